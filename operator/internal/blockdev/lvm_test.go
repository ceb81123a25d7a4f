package blockdev

import "testing"

// The reports as lvm2 2.03 prints them with --reportformat json --units b --nosuffix.
const vgsReport = `  {
      "report": [
          {
              "vg": [
                  {"vg_name":"fc-pool-a", "vg_size":"8585740288", "vg_free":"4290772992", "vg_extent_size":"4194304", "pv_count":"2", "lv_count":"1", "vg_tags":"flashcache.io/pool=pool-a"}
              ]
          }
      ]
  }
`

const lvsReport = `  {
      "report": [
          {
              "lv": [
                  {"lv_name":"mysql-0", "vg_name":"fc-pool-a", "lv_path":"/dev/fc-pool-a/mysql-0", "lv_size":"1073741824", "lv_tags":"flashcache.io/volume=mysql-0", "lv_active":"active"},
                  {"lv_name":"mysql-1", "vg_name":"fc-pool-a", "lv_path":"/dev/fc-pool-a/mysql-1", "lv_size":"2147483648", "lv_tags":"", "lv_active":""}
              ]
          }
      ]
  }
`

const pvsReport = `  {
      "report": [
          {
              "pv": [
                  {"pv_name":"/dev/sdb", "vg_name":"fc-pool-a", "pv_size":"4294967296"},
                  {"pv_name":"/dev/sdc", "vg_name":"", "pv_size":"4294967296"}
              ]
          }
      ]
  }
`

func TestParseLVMReports(t *testing.T) {
	vgs, err := ParseVGs(vgsReport)
	if err != nil {
		t.Fatal(err)
	}
	if want := (VolumeGroup{Name: "fc-pool-a", SizeBytes: 8585740288, FreeBytes: 4290772992, ExtentBytes: 4 << 20, PVCount: 2, LVCount: 1,
		Tags: "flashcache.io/pool=pool-a"}); len(vgs) != 1 || vgs[0] != want {
		t.Errorf("vgs = %+v, want %+v", vgs, want)
	}
	lvs, err := ParseLVs(lvsReport)
	if err != nil {
		t.Fatal(err)
	}
	if len(lvs) != 2 || lvs[0].Path != "/dev/fc-pool-a/mysql-0" || lvs[0].SizeBytes != 1<<30 || !lvs[0].Active || lvs[1].Active || lvs[1].SizeBytes != 2<<30 {
		t.Errorf("lvs = %+v", lvs)
	}
	pvs, err := ParsePVs(pvsReport)
	if err != nil {
		t.Fatal(err)
	}
	if len(pvs) != 2 || pvs[0] != (PhysicalVolume{Path: "/dev/sdb", VG: "fc-pool-a", SizeBytes: 4 << 30}) || pvs[1].VG != "" {
		t.Errorf("pvs = %+v", pvs)
	}
}

func TestParseLVMReportsRefuseWhatTheyCannotRead(t *testing.T) {
	if _, err := ParseVGs(`{"report":[{"vg":[{"vg_name":"x","vg_size":"8.00g"}]}]}`); err == nil {
		t.Error("a size with a unit (no --units b --nosuffix) was read as a number")
	}
	if _, err := ParseLVs("  Volume group \"x\" not found"); err == nil {
		t.Error("an error message was read as a report")
	}
	if vgs, err := ParseVGs(`{"report":[{"vg":[]}]}`); err != nil || len(vgs) != 0 {
		t.Errorf("an empty report: %v, %v", vgs, err)
	}
}
