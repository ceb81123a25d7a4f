package blockdev

import (
	"testing"
)

const backingSuperShow = `sb.magic		ok
sb.first_sector		8 [match]
sb.csum			9F5B8A7E13C2D4E1 [match]
sb.version		1 [backing device]

dev.label		fc-3a7bd3e2360a3d29eea436fcfb7e
dev.uuid		4b8a5f0e-6a1c-4c1e-9d0e-2f3c4b5a6d7e
dev.sectors_per_block	1
dev.sectors_per_bucket	1024
dev.data.first_sector	16
dev.data.cache_mode	1 [writeback]
dev.data.cache_state	2 [dirty]

cset.uuid		d1c2b3a4-0000-4e5f-8a9b-0c1d2e3f4a5b
`

const cacheSuperShow = `sb.magic		ok
sb.first_sector		8 [match]
sb.csum			1122334455667788 [match]
sb.version		3 [cache device]

dev.label		(empty)
dev.uuid		aa5b1d2c-1111-4222-8333-944455566677
dev.sectors_per_block	1
dev.sectors_per_bucket	1024
dev.cache.first_sector	1024
dev.cache.cache_sectors	6709248
dev.cache.total_sectors	6710272
dev.cache.ordered	yes
dev.cache.discard	no
dev.cache.pos		0
dev.cache.replacement	0 [lru]

cset.uuid		d1c2b3a4-0000-4e5f-8a9b-0c1d2e3f4a5b
`

func TestParseSuperShowBacking(t *testing.T) {
	sb, err := ParseSuperShow(backingSuperShow)
	if err != nil {
		t.Fatal(err)
	}
	if sb.IsCache() {
		t.Error("backing superblock read as cache")
	}
	if sb.UUID() != "4b8a5f0e-6a1c-4c1e-9d0e-2f3c4b5a6d7e" || sb.SetUUID() != "d1c2b3a4-0000-4e5f-8a9b-0c1d2e3f4a5b" {
		t.Errorf("uuid %q set %q", sb.UUID(), sb.SetUUID())
	}
	if sb.Label() != "fc-3a7bd3e2360a3d29eea436fcfb7e" {
		t.Errorf("label %q", sb.Label())
	}
	if off, err := sb.DataOffsetBytes(); err != nil || off != 8192 {
		t.Errorf("data offset = %d, %v; want 8192", off, err)
	}
}

func TestParseSuperShowCache(t *testing.T) {
	sb, err := ParseSuperShow(cacheSuperShow)
	if err != nil {
		t.Fatal(err)
	}
	if !sb.IsCache() || sb.Label() != "" {
		t.Errorf("cache=%v label=%q", sb.IsCache(), sb.Label())
	}
	if _, err := sb.DataOffsetBytes(); err == nil {
		t.Error("a cache superblock has no data offset")
	}
	if b, err := sb.BucketBytes(); err != nil || b != 512<<10 {
		t.Errorf("bucket size = %d, %v; want 524288", b, err)
	}
}

func TestParseSuperShowRejectsNonBcache(t *testing.T) {
	if _, err := ParseSuperShow("sb.magic\t\tbad magic\n"); err == nil {
		t.Error("bad magic accepted")
	}
	if _, err := ParseSuperShow(""); err == nil {
		t.Error("empty output accepted")
	}
}

func TestActiveChoice(t *testing.T) {
	got, err := ActiveChoice("writethrough [writeback] writearound none\n")
	if err != nil || got != "writeback" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := ActiveChoice("lru fifo random"); err == nil {
		t.Error("no bracket accepted")
	}
}

func TestParseHumanSize(t *testing.T) {
	cases := map[string]int64{
		"0.0k":   0,
		"0":      0,
		"0.5k":   512,
		"512":    512,
		"1.0M":   1 << 20,
		"1.5M":   3 << 19,
		"3.1G":   3328599654,
		"4.0k\n": 4096,
	}
	for in, want := range cases {
		got, err := ParseHumanSize(in)
		if err != nil || got != want {
			t.Errorf("%q: got %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "M", "-1.0k", "1.0X"} {
		if _, err := ParseHumanSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseWipefsJSON(t *testing.T) {
	sigs, err := ParseWipefsJSON(`{
   "signatures": [
      {"device":"sdb", "offset":"0x438", "type":"ext4", "uuid":"0d5f", "label":"data", "usage":"filesystem"},
      {"device":"sdb", "offset":"0x1fe", "type":"dos", "uuid":null, "label":null, "usage":"partition table"}
   ]
}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(sigs) != 2 || sigs[0].Type != "ext4" || sigs[0].Usage != "filesystem" || sigs[1].Type != "dos" {
		t.Errorf("signatures = %+v", sigs)
	}
	if sigs, err := ParseWipefsJSON(""); err != nil || len(sigs) != 0 {
		t.Errorf("blank device: %v %v", sigs, err)
	}
}

func TestParseMountInfo(t *testing.T) {
	mounts := ParseMountInfo(`22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
30 22 8:17 / /mnt/my\040data rw,relatime shared:7 - xfs /dev/sdb1 rw
31 22 0:5 / /dev rw,nosuid - devtmpfs udev rw
`)
	if len(mounts) != 3 {
		t.Fatalf("mounts = %+v", mounts)
	}
	if mounts[0].MajorMinor != "254:1" || mounts[0].MountPoint != "/" || mounts[0].Source != "/dev/vda1" {
		t.Errorf("root = %+v", mounts[0])
	}
	if mounts[1].MountPoint != "/mnt/my data" {
		t.Errorf("escaped mount point = %q", mounts[1].MountPoint)
	}
}

func TestParseSfdiskFirstName(t *testing.T) {
	out := `{
   "partitiontable": {
      "label": "gpt", "id": "90C8246D-11FA-4DED-A65A-F8009BBA822E", "device": "/dev/nvme0n1", "unit": "sectors",
      "firstlba": 34, "lastlba": 4194270, "sectorsize": 512,
      "partitions": [
         {"node": "/dev/nvme0n1p2", "start": 3354624, "size": 2048, "type": "0FC63DAF-8483-4772-8E79-3D69D8477DE4", "uuid": "B", "name": "other"},
         {"node": "/dev/nvme0n1p1", "start": 2048, "size": 3352576, "type": "0FC63DAF-8483-4772-8E79-3D69D8477DE4", "uuid": "A", "name": "fc-vol-a"}
      ]
   }
}`
	if got, err := ParseSfdiskFirstName(out); err != nil || got != "fc-vol-a" {
		t.Errorf("got %q, %v", got, err)
	}
	if got, err := ParseSfdiskFirstName(`{"partitiontable": {"label": "gpt", "partitions": []}}`); err != nil || got != "" {
		t.Errorf("empty table: %q, %v", got, err)
	}
	if _, err := ParseSfdiskFirstName("not json"); err == nil {
		t.Error("garbage accepted")
	}
}

func TestParseUnusedPercent(t *testing.T) {
	// As a 5.10-6.x kernel prints it, with tabs.
	stats := "Unused:\t\t62%\nClean:\t\t0%\nDirty:\t\t37%\nMetadata:\t0%\nAverage:\t188\nSectors per Q:\t99968\nQuantiles:\t[5 17 29]\n"
	if got, err := ParseUnusedPercent(stats); err != nil || got != 62 {
		t.Errorf("ParseUnusedPercent = %d, %v; want 62", got, err)
	}
	for _, bad := range []string{"", "Clean:\t\t0%\n", "Unused:\t\tmany\n", "Unused:\t\t140%\n"} {
		if got, err := ParseUnusedPercent(bad); err == nil {
			t.Errorf("ParseUnusedPercent(%q) = %d, want an error", bad, got)
		}
	}
}
