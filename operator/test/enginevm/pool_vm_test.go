//go:build vm

package enginevm

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flashcache/flashcache/operator/test/vmharness"
)

var (
	poolCache = vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-pool-cache", Size: 1 << 30}
	poolHDD1  = vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-pool-hdd1", Size: 1 << 30}
	poolHDD2  = vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-pool-hdd2", Size: 1 << 30}
)

// poolReport is one pool's part of `flashcache node ... -o json`.
type poolReport struct {
	Name    string `json:"name"`
	Changed bool   `json:"changed"`
	Steps   []struct {
		Kind    string `json:"kind"`
		Device  string `json:"device"`
		Value   string `json:"value"`
		Discard bool   `json:"discard"`
	} `json:"steps"`
	Status *struct {
		CacheSetUUID       string `json:"cacheSetUUID"`
		VolumeGroup        string `json:"volumeGroup"`
		CacheCapacityBytes int64  `json:"cacheCapacityBytes"`
		CapacityBytes      int64  `json:"capacityBytes"`
		AllocatableBytes   int64  `json:"allocatableBytes"`
		Volumes            int    `json:"volumes"`
	} `json:"status"`
	Teardown *struct {
		Changed bool     `json:"changed"`
		Steps   []string `json:"steps"`
	} `json:"teardown"`
	Error *struct {
		Reason  string `json:"reason"`
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"error"`
}

// poolFile writes a FlashCachePool named db with the given backing disks into the guest's
// /root, followed by extra documents.
func (g *guest) poolFile(t *testing.T, name string, backing []vmharness.Disk, extra string) {
	t.Helper()
	var disks strings.Builder
	for _, d := range backing {
		fmt.Fprintf(&disks, "  - path: %s\n", d.ByID())
	}
	doc := fmt.Sprintf(`apiVersion: flashcache.io/v1alpha1
kind: FlashCachePool
metadata: {name: db}
spec:
  nodeName: vm
  cacheDevice: {path: %s}
  backingDevices:
%s%s`, poolCache.ByID(), disks.String(), extra)
	local := filepath.Join(g.dir, name)
	if err := os.WriteFile(local, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.vm.CopyFile(g.ctx, local, "/root/"+name, 0o600); err != nil {
		t.Fatal(err)
	}
}

func testPoolRefusesData(t *testing.T, g *guest) {
	// hddC carries the ext4 filesystem of an earlier step, and its checksummed file.
	g.poolFile(t, "pool-c.yaml", []vmharness.Disk{poolHDD1, hddC}, "")
	r, code, _ := g.node(t, "apply", "pool-c.yaml")
	if code == 0 || len(r.Pools) != 1 || r.Pools[0].Error == nil || r.Pools[0].Error.Reason != "DeviceCarriesData" ||
		r.Pools[0].Error.Field != "backingDevices[1].path" || !strings.Contains(r.Pools[0].Error.Message, "ext4") {
		t.Fatalf("a pool naming a disk with a filesystem: exit %d, %+v", code, r.Pools)
	}
	g.sh(t, "mount -o ro "+hddC.ByID()+" /mnt/c && sha256sum -c /root/c.sum && umount /mnt/c")
	// The refusal came before any step: the other disks are as blank as before.
	if sigs := g.sh(t, "wipefs --no-act "+poolCache.ByID()+" "+poolHDD1.ByID()); sigs != "" {
		t.Errorf("a refused pool touched its other disks:\n%s", sigs)
	}
}

func testPoolBuild(t *testing.T, g *guest) {
	carved := `---
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: carved}
spec:
  nodeName: vm
  pool: {name: db, size: 256Mi}
`
	g.poolFile(t, "pool.yaml", []vmharness.Disk{poolHDD1}, carved)
	r, code, stderr := g.node(t, "apply", "pool.yaml")
	if len(r.Pools) != 1 || r.Pools[0].Error != nil || !r.Pools[0].Changed || r.Pools[0].Status == nil {
		t.Fatalf("pool apply: exit %d, %+v\n%s", code, r.Pools, stderr)
	}
	var kinds []string
	for _, s := range r.Pools[0].Steps {
		kinds = append(kinds, s.Kind)
	}
	t.Logf("pool built in steps: %s", strings.Join(kinds, " "))
	if !r.Pools[0].Steps[0].Discard {
		t.Errorf("the SSD was not discarded before partitioning: %+v", r.Pools[0].Steps[0])
	}
	// The carved volume is refused naming its field, after the pool was built: nothing else is
	// touched for it.
	if code == 0 || len(r.Volumes) != 1 || r.Volumes[0].Error == nil || r.Volumes[0].Error.Field != "pool" || r.Volumes[0].Error.Reason != "PoolVolumesUnsupported" {
		t.Errorf("carved volume: exit %d\n%s", code, r)
	}

	st := r.Pools[0].Status
	ssd := g.kernelName(t, poolCache)
	// The cache set runs on partition 1, 80% of the SSD; the rest is unpartitioned spare area.
	part := g.sysfsInt(t, "/sys/class/block/"+ssd+"p1/size") * 512
	if part != st.CacheCapacityBytes || part > poolCache.Size*80/100 || part < poolCache.Size*79/100 {
		t.Errorf("cache partition %d bytes (status %d) on a %d-byte SSD: want about 80%%", part, st.CacheCapacityBytes, poolCache.Size)
	}
	if uuid := g.sh(t, "ls /sys/fs/bcache | grep -x "+st.CacheSetUUID+" || true"); uuid == "" {
		t.Errorf("cache set %s is not registered", st.CacheSetUUID)
	}
	if name := g.sh(t, "sfdisk --part-label /dev/"+ssd+" 1"); name != "fcp-db" {
		t.Errorf("cache partition named %q, want fcp-db", name)
	}
	vg := g.sh(t, "vgs --noheadings --units b --nosuffix -o vg_name,pv_count,vg_size,vg_free,vg_tags fcp-db")
	f := strings.Fields(vg)
	if len(f) != 5 || f[0] != "fcp-db" || f[1] != "1" || f[4] != "flashcache.io/pool=db" {
		t.Fatalf("volume group: %q", vg)
	}
	size, _ := strconv.ParseInt(f[2], 10, 64)
	if size != st.CapacityBytes || size < poolHDD1.Size*99/100 || st.AllocatableBytes != size || st.Volumes != 0 {
		t.Errorf("volume group of %d bytes, status %+v: want the whole HDD, all of it free, no volume", size, *st)
	}
	if pv := g.sh(t, "pvs --noheadings -o vg_name "+poolHDD1.ByID()); strings.TrimSpace(pv) != "fcp-db" {
		t.Errorf("%s is in volume group %q", poolHDD1.ByID(), pv)
	}

	r, code, _ = g.node(t, "apply", "pool.yaml")
	if len(r.Pools) != 1 || r.Pools[0].Changed || r.Pools[0].Error != nil {
		t.Errorf("second apply of the pool: exit %d, %+v", code, r.Pools)
	}
	r, code, _ = g.node(t, "plan", "pool.yaml")
	if len(r.Pools) != 1 || len(r.Pools[0].Steps) != 0 {
		t.Errorf("plan of a built pool: exit %d, %+v", code, r.Pools)
	}
}

func testPoolGrows(t *testing.T, g *guest) {
	g.poolFile(t, "pool2.yaml", []vmharness.Disk{poolHDD1, poolHDD2}, "")
	r, code, stderr := g.node(t, "apply", "pool2.yaml")
	if code != 0 || len(r.Pools) != 1 || r.Pools[0].Status == nil {
		t.Fatalf("apply with a second disk: exit %d, %+v\n%s", code, r.Pools, stderr)
	}
	var kinds []string
	for _, s := range r.Pools[0].Steps {
		kinds = append(kinds, s.Kind)
	}
	if got := strings.Join(kinds, " "); got != "create-physical-volume extend-volume-group" {
		t.Errorf("steps %q, want the new disk labelled and added, nothing else", got)
	}
	if st := r.Pools[0].Status; st.CapacityBytes < (poolHDD1.Size+poolHDD2.Size)*99/100 {
		t.Errorf("capacity %d after adding a disk, want about %d", st.CapacityBytes, poolHDD1.Size+poolHDD2.Size)
	}
	if n := g.sh(t, "vgs --noheadings -o pv_count fcp-db"); strings.TrimSpace(n) != "2" {
		t.Errorf("volume group has %s physical volumes, want 2", n)
	}
}

func testPoolTeardown(t *testing.T, g *guest) {
	// An LV of the group stands for a carved volume: the pool is refused while it exists.
	g.sh(t, "lvcreate -q -y -n squatter -L 64m fcp-db >/dev/null")
	r, code, _ := g.node(t, "teardown", "pool2.yaml", "--confirm")
	if code == 0 || len(r.Pools) != 1 || r.Pools[0].Error == nil || r.Pools[0].Error.Reason != "PoolInUse" || !strings.Contains(r.Pools[0].Error.Message, "squatter") {
		t.Fatalf("teardown of a pool with a volume: exit %d, %+v", code, r.Pools)
	}
	g.sh(t, "lvremove -q -y fcp-db/squatter >/dev/null")

	r, code, stderr := g.node(t, "teardown", "pool2.yaml", "--confirm")
	if code != 0 || len(r.Pools) != 1 || r.Pools[0].Teardown == nil || !r.Pools[0].Teardown.Changed {
		t.Fatalf("pool teardown: exit %d, %+v\n%s", code, r.Pools, stderr)
	}
	t.Logf("pool teardown: %v", r.Pools[0].Teardown.Steps)
	if sigs := g.sh(t, "wipefs --no-act "+poolCache.ByID()+" "+poolHDD1.ByID()+" "+poolHDD2.ByID()); sigs != "" {
		t.Errorf("signatures left after the pool's teardown:\n%s", sigs)
	}
	ssd := g.kernelName(t, poolCache)
	if n := strings.Count(g.sh(t, "ls /sys/class/block/"+ssd), ssd+"p"); n != 0 {
		t.Errorf("%d partitions left on %s", n, ssd)
	}
	if r, code, _ := g.node(t, "teardown", "pool2.yaml", "--confirm"); code != 0 || r.Changed {
		t.Errorf("second teardown: exit %d changed %v", code, r.Changed)
	}
	// Built again at once: the kernel must have let go of the old partition.
	r, code, stderr = g.node(t, "apply", "pool2.yaml")
	if code != 0 || len(r.Pools) != 1 || r.Pools[0].Error != nil {
		t.Fatalf("apply right after teardown: exit %d, %+v\n%s", code, r.Pools, stderr)
	}
	if r, code, _ := g.node(t, "teardown", "pool2.yaml", "--confirm"); code != 0 || !r.Changed {
		t.Errorf("final teardown: exit %d changed %v", code, r.Changed)
	}
}
