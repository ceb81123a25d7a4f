//go:build vm

package enginevm

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/internal/engine"
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

// poolBucketSize is the bucket size of poolCache's cache set: not make-bcache's default, so the
// pool steps show the spec's size reaching the kernel and their volumes working on it.
const poolBucketSize = "64Ki"

// poolFile writes a FlashCachePool named db on poolCache with the given backing disks into the
// guest's /root, followed by extra documents.
func (g *guest) poolFile(t *testing.T, name string, backing []vmharness.Disk, extra string) {
	t.Helper()
	g.writePoolFile(t, name, "{path: "+poolCache.ByID()+", bucketSize: "+poolBucketSize+"}", backing, extra)
}

// poolFileOn is poolFile with the pool's cache device named, at the default bucket size.
func (g *guest) poolFileOn(t *testing.T, name string, cache vmharness.Disk, backing []vmharness.Disk, extra string) {
	t.Helper()
	g.writePoolFile(t, name, "{path: "+cache.ByID()+"}", backing, extra)
}

// writePoolFile writes the pool with cacheDevice as given, a YAML flow mapping.
func (g *guest) writePoolFile(t *testing.T, name, cacheDevice string, backing []vmharness.Disk, extra string) {
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
  cacheDevice: %s
  backingDevices:
%s%s`, cacheDevice, disks.String(), extra)
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

// carvedVolumeDoc is a FlashCacheVolume carved from pool db that keeps what is written to it
// dirty (no flush period, no sequential bypass) up to its threshold.
func carvedVolumeDoc(name, size string, dirtyThresholdPercent int) string {
	return fmt.Sprintf(`---
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: %s}
spec:
  nodeName: vm
  pool: {name: db, size: %s}
  dirtyThresholdPercent: %d
  flushPeriod: 0s
  sequentialCutoff: "0"
  safety: {trustWriteCache: true}
`, name, size, dirtyThresholdPercent)
}

// carvedVolumes are two volumes of pool db with different modes of writeback and thresholds:
// bcache keeps those per backing device.
var carvedVolumes = carvedVolumeDoc("carved-a", "256Mi", 40) + carvedVolumeDoc("carved-b", "128Mi", 30)

func testPoolBuild(t *testing.T, g *guest) {
	g.poolFile(t, "pool.yaml", []vmharness.Disk{poolHDD1}, carvedVolumes)
	wbt := g.queueWBT(t, poolHDD1)
	if wbt == "0" || wbt == "" {
		t.Fatalf("the pool's HDD has wbt_lat_usec %q before the pool: nothing to see", wbt)
	}
	r, code, stderr := g.node(t, "apply", "pool.yaml")
	if code != 0 || len(r.Pools) != 1 || r.Pools[0].Error != nil || !r.Pools[0].Changed || r.Pools[0].Status == nil {
		t.Fatalf("pool apply: exit %d, %+v\n%s\n%s", code, r.Pools, r, stderr)
	}
	var kinds []string
	for _, s := range r.Pools[0].Steps {
		kinds = append(kinds, s.Kind)
	}
	t.Logf("pool built in steps: %s", strings.Join(kinds, " "))
	// backingWritebackThrottling's default, on the pool's disk: both carved volumes forward their
	// commits' flushes to its queue.
	if got := g.queueWBT(t, poolHDD1); got != "0" {
		t.Errorf("the pool's HDD has wbt_lat_usec %q after the pool's apply (was %s), want 0", got, wbt)
	}
	if !r.Pools[0].Steps[0].Discard {
		t.Errorf("the SSD was not discarded before partitioning: %+v", r.Pools[0].Steps[0])
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
	} else if got := g.sh(t, "cat /sys/fs/bcache/"+st.CacheSetUUID+"/bucket_size"); got != "64.0k" {
		t.Errorf("cache set %s has buckets of %s, want the spec's %s", st.CacheSetUUID, got, poolBucketSize)
	}
	if got := g.congestionThresholds(t, st.CacheSetUUID); got != "0 0" {
		t.Errorf("the pool's cache set has congested read/write thresholds %q, want \"0 0\" (cacheCongestionBypass: Disabled)", got)
	}
	if name := g.sh(t, "sfdisk --part-label /dev/"+ssd+" 1"); name != "fcp-db" {
		t.Errorf("cache partition named %q, want fcp-db", name)
	}
	vg := g.sh(t, "vgs --noheadings --units b --nosuffix -o vg_name,pv_count,vg_size,vg_tags fcp-db")
	f := strings.Fields(vg)
	if len(f) != 4 || f[0] != "fcp-db" || f[1] != "1" || f[3] != "flashcache.io/pool=db" {
		t.Fatalf("volume group: %q", vg)
	}
	if size, _ := strconv.ParseInt(f[2], 10, 64); size != st.CapacityBytes || size < poolHDD1.Size*99/100 {
		t.Errorf("volume group of %d bytes, status %+v: want the whole HDD", size, *st)
	}

	// Both volumes: a logical volume each, attached to the pool's one cache set, each with its
	// own threshold.
	if len(r.Volumes) != 2 {
		t.Fatalf("volumes: %s", r)
	}
	for i, want := range []struct {
		name    string
		size    int64
		percent string
	}{{"carved-a", 256 << 20, "40"}, {"carved-b", 128 << 20, "30"}} {
		v := r.Volumes[i]
		if v.Error != nil || v.Status == nil || v.Status.CacheSetUUID != st.CacheSetUUID || v.Status.CacheMode != "writeback" {
			t.Fatalf("%s: %s", want.name, r)
		}
		if w := strings.Join(v.Warnings, " "); strings.Contains(w, "bucketSize") {
			t.Errorf("%s: the pool's cache, formatted as its spec asks, read as another bucket size: %s", want.name, w)
		}
		lv := g.sh(t, "lvs --noheadings --units b --nosuffix -o lv_size,lv_tags fcp-db/fc-"+want.name)
		if lf := strings.Fields(lv); len(lf) != 2 || lf[0] != strconv.FormatInt(engine.CarvedBackingBytes(want.size), 10) || lf[1] != "flashcache.io/volume="+want.name {
			t.Errorf("%s: logical volume %q", want.name, lv)
		}
		dev := g.sh(t, "basename $(readlink -f /dev/flashcache/"+want.name+")")
		if got := g.sh(t, "cat /sys/block/"+dev+"/bcache/writeback_percent"); got != want.percent {
			t.Errorf("%s: writeback_percent %s, want %s", want.name, got, want.percent)
		}
		// The device holds the size asked for: bcache's header is the logical volume's extra.
		if v.Status.CapacityBytes < want.size || v.Status.CapacityBytes >= want.size+4<<20 {
			t.Errorf("%s: %d bytes for a pool.size of %d", want.name, v.Status.CapacityBytes, want.size)
		}
	}
	// The apply's report has the pool as it was before its volumes; status reads it again.
	r, code, _ = g.node(t, "status", "pool.yaml")
	if code != 0 || len(r.Pools) != 1 || r.Pools[0].Status == nil {
		t.Fatalf("status: exit %d, %+v", code, r.Pools)
	}
	if st := r.Pools[0].Status; st.Volumes != 2 || st.AllocatableBytes != st.CapacityBytes-(260+132)<<20 {
		t.Errorf("pool status %+v after two volumes of 256 and 128 MiB", *st)
	}

	r, code, _ = g.node(t, "apply", "pool.yaml")
	if code != 0 || r.Changed {
		t.Errorf("second apply: exit %d\n%s%+v", code, r, r.Pools)
	}
	r, code, _ = g.node(t, "plan", "pool.yaml")
	if code != 0 || len(r.Pools) != 1 || len(r.Pools[0].Steps) != 0 || r.stepKinds() != "" {
		t.Errorf("plan of a built pool: exit %d, %+v\n%s", code, r.Pools, r)
	}
}

func testCarvedVolumesKeepTheirOwnData(t *testing.T, g *guest) {
	dirty := func(name string) int64 {
		r, code, _ := g.node(t, "status", "pool.yaml", "--volume", name)
		if code != 0 || len(r.Volumes) != 1 || r.Volumes[0].Status == nil {
			t.Fatalf("status of %s: exit %d\n%s", name, code, r)
		}
		return r.Volumes[0].Status.DirtyBytes
	}
	// bcache sends sequential writes around a cache it finds congested (over 20 ms a write, in
	// writeback mode too), which an emulated NVMe on a busy host is: off for this test, whose
	// subject is where dirty data goes, not congestion.
	g.sh(t, "set=/sys/block/$(basename $(readlink -f /dev/flashcache/carved-a))/bcache/cache; "+
		vmharness.CongestionOff("$set"))
	// bcache's own writeback runs per volume at a rate its controller picks from the set's load
	// (full speed when the set looks idle, which under emulation each status command's seconds
	// are), so how much of 32 MiB is still dirty a minute later is the host's business. Stopped
	// on both, the dirty data is exactly what was written, and the flush of carved-a must start
	// its own writeback (the engine sets writeback_running) without touching carved-b's.
	stopWriteback := "for v in carved-a carved-b; do echo %s > /sys/block/$(basename $(readlink -f /dev/flashcache/$v))/bcache/writeback_running; done"
	g.sh(t, fmt.Sprintf(stopWriteback, "0"))
	defer g.sh(t, fmt.Sprintf(stopWriteback, "1"))
	for _, name := range []string{"carved-a", "carved-b"} {
		g.sh(t, "head -c 32M /dev/urandom > /root/"+name+".bin && sha256sum < /root/"+name+".bin > /root/"+name+".sum && "+
			"dd if=/root/"+name+".bin of=/dev/flashcache/"+name+" bs=1M oflag=direct status=none")
	}
	a0, b0 := dirty("carved-a"), dirty("carved-b")
	if a0 < 32<<20 || b0 < 32<<20 {
		t.Fatalf("dirty after writing 32 MiB to each with writeback stopped: %d and %d bytes\n%s", a0, b0,
			g.sh(t, "for v in carved-a carved-b; do d=/sys/block/$(basename $(readlink -f /dev/flashcache/$v))/bcache; echo $v $(cat $d/cache_mode $d/state $d/dirty_data $d/sequential_cutoff $d/writeback_percent $d/writeback_running $d/stats_total/bypassed); done"))
	}
	// A flush of one volume writes back its own dirty data, and leaves the other's knobs and
	// dirty data alone.
	r, code, stderr := g.node(t, "flush", "pool.yaml", "--volume", "carved-a")
	if code != 0 || r.Volumes[0].Flush == nil {
		t.Fatalf("flush of carved-a: exit %d\n%s%s", code, r, stderr)
	}
	knobs := g.sh(t, "d=/sys/block/$(basename $(readlink -f /dev/flashcache/carved-b))/bcache; echo $(cat $d/cache_mode $d/writeback_percent $d/writeback_running $d/state)")
	a, b := dirty("carved-a"), dirty("carved-b")
	t.Logf("dirty before the flush of carved-a: %d and %d bytes; after: %d and %d; carved-b: %s", a0, b0, a, b, knobs)
	if a != 0 || b != b0 || knobs != "writethrough [writeback] writearound none 30 0 dirty" {
		t.Errorf("after flushing carved-a: %d bytes dirty on it, %d on carved-b (had %d), carved-b's knobs %q (want 0, all of carved-b's, and carved-b in writeback at 30%% with its writeback still stopped)", a, b, b0, knobs)
	}
	if _, code, _ := g.node(t, "release", "pool.yaml", "--volume", "carved-a"); code != 0 {
		t.Fatalf("release of carved-a: exit %d", code)
	}
	for _, name := range []string{"carved-a", "carved-b"} {
		g.sh(t, "echo 3 > /proc/sys/vm/drop_caches; test \"$(dd if=/dev/flashcache/"+name+" bs=1M count=32 iflag=direct status=none | sha256sum)\" = \"$(cat /root/"+name+".sum)\"")
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
	if got := strings.Join(kinds, " "); got != "create-physical-volume extend-volume-group set-backing-writeback-throttling" {
		t.Errorf("steps %q, want the new disk labelled, added and its writeback throttling off, nothing else", got)
	}
	if got := g.queueWBT(t, poolHDD2); got != "0" {
		t.Errorf("the added HDD has wbt_lat_usec %q, want 0", got)
	}
	if st := r.Pools[0].Status; st.CapacityBytes < (poolHDD1.Size+poolHDD2.Size)*99/100 {
		t.Errorf("capacity %d after adding a disk, want about %d", st.CapacityBytes, poolHDD1.Size+poolHDD2.Size)
	}
	if n := g.sh(t, "vgs --noheadings -o pv_count fcp-db"); strings.TrimSpace(n) != "2" {
		t.Errorf("volume group has %s physical volumes, want 2", n)
	}
}

func testCarvedVolumeGrowsWhenNotInUse(t *testing.T, g *guest) {
	grown := strings.Replace(carvedVolumes, "pool: {name: db, size: 128Mi}", "pool: {name: db, size: 192Mi}", 1)
	g.poolFile(t, "pool.yaml", []vmharness.Disk{poolHDD1}, grown)
	size := func() int64 {
		return g.sysfsInt(t, "/sys/block/$(basename $(readlink -f /dev/flashcache/carved-b))/size") * 512
	}
	before := size()
	// Held (a device-mapper device on top, as a filesystem's mount would hold it), it waits, and
	// says why.
	holder := "dmsetup create carved-b-holder --table \"0 $(blockdev --getsz /dev/flashcache/carved-b) linear /dev/flashcache/carved-b 0\""
	g.sh(t, holder)
	r, code, _ := g.node(t, "apply", "pool.yaml")
	g.sh(t, "dmsetup remove carved-b-holder")
	if code != 0 || !strings.Contains(strings.Join(r.Volumes[1].Warnings, " "), "once nothing uses") || size() != before {
		t.Fatalf("grown while held: exit %d, size %d (was %d)\n%s%v", code, size(), before, r, r.Volumes[1].Warnings)
	}
	r, code, stderr := g.node(t, "apply", "pool.yaml")
	if code != 0 {
		t.Fatalf("grown while unused: exit %d\n%s%s", code, r, stderr)
	}
	t.Logf("grown in steps: %s", r.steps(1))
	if after := size(); after < 192<<20 || after >= 196<<20 {
		t.Errorf("carved-b is %d bytes after growing to 192 MiB (was %d)", after, before)
	}
	if r.Volumes[1].Status == nil || r.Volumes[1].Status.CacheMode != "writeback" {
		t.Errorf("carved-b after growing: %s", r)
	}
	g.sh(t, "echo 3 > /proc/sys/vm/drop_caches; test \"$(dd if=/dev/flashcache/carved-b bs=1M count=32 iflag=direct status=none | sha256sum)\" = \"$(cat /root/carved-b.sum)\"")
	if r, code, _ := g.node(t, "apply", "pool.yaml"); code != 0 || r.Changed {
		t.Errorf("apply after growing: exit %d: %s / %s", code, r.steps(0), r.steps(1))
	}
}

func testCarvedVolumeTeardownGivesItsSpaceBack(t *testing.T, g *guest) {
	// A filesystem on carved-a, for the volume carved next on its extents not to show.
	g.sh(t, "mkfs.ext4 -q -F /dev/flashcache/carved-a")
	before := g.sh(t, "vgs --noheadings --units b --nosuffix -o vg_free fcp-db")
	r, code, stderr := g.node(t, "teardown", "pool.yaml", "--volume", "carved-a", "--confirm")
	if code != 0 || len(r.Pools) != 0 || r.Volumes[0].Teardown == nil || !r.Volumes[0].Teardown.Changed {
		t.Fatalf("teardown of carved-a: exit %d\n%s%+v\n%s", code, r, r.Pools, stderr)
	}
	t.Logf("teardown of carved-a: %v", r.Volumes[0].Teardown.Steps)
	if out := g.sh(t, "lvs --noheadings -o lv_name fcp-db"); strings.Contains(out, "fc-carved-a") || !strings.Contains(out, "fc-carved-b") {
		t.Errorf("logical volumes after carved-a's teardown: %q", out)
	}
	after := g.sh(t, "vgs --noheadings --units b --nosuffix -o vg_free fcp-db")
	b, _ := strconv.ParseInt(strings.TrimSpace(before), 10, 64)
	a, _ := strconv.ParseInt(strings.TrimSpace(after), 10, 64)
	if a-b != engine.CarvedBackingBytes(256<<20) {
		t.Errorf("free space %d -> %d: want carved-a's logical volume back", b, a)
	}
	// The pool's cache set still serves carved-b, with its data.
	g.sh(t, "echo 3 > /proc/sys/vm/drop_caches; test \"$(dd if=/dev/flashcache/carved-b bs=1M count=32 iflag=direct status=none | sha256sum)\" = \"$(cat /root/carved-b.sum)\"")
	g.sh(t, "test ! -e /dev/flashcache/carved-a")

	// A volume carved on the same extents is blank: nothing of carved-a's filesystem shows
	// through it, to be taken for its own and mounted.
	g.poolFile(t, "carved-c.yaml", []vmharness.Disk{poolHDD1, poolHDD2}, `---
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: carved-c}
spec:
  nodeName: vm
  pool: {name: db, size: 256Mi}
  flushPeriod: 0s
  safety: {trustWriteCache: true}
`)
	if r, code, stderr := g.node(t, "apply", "carved-c.yaml"); code != 0 {
		t.Fatalf("apply of carved-c: exit %d\n%s%s", code, r, stderr)
	}
	if extents := g.sh(t, "lvs --noheadings -o seg_pe_ranges fcp-db/fc-carved-c"); !strings.Contains(extents, ":0-") {
		t.Errorf("carved-c is on extents %q, not carved-a's first ones", extents)
	}
	if sigs := g.sh(t, "wipefs --no-act --noheadings /dev/flashcache/carved-c; blkid -p /dev/flashcache/carved-c || true"); sigs != "" {
		t.Errorf("a new volume on carved-a's extents shows %q", sigs)
	}
	if r, code, stderr := g.node(t, "teardown", "carved-c.yaml", "--volume", "carved-c", "--confirm"); code != 0 {
		t.Fatalf("teardown of carved-c: exit %d\n%s%s", code, r, stderr)
	}
}

func testPoolTeardown(t *testing.T, g *guest) {
	// carved-b is still carved from the pool: the pool is refused while it exists.
	r, code, _ := g.node(t, "teardown", "pool2.yaml", "--confirm")
	if code == 0 || len(r.Pools) != 1 || r.Pools[0].Error == nil || r.Pools[0].Error.Reason != "PoolInUse" || !strings.Contains(r.Pools[0].Error.Message, "fc-carved-b") {
		t.Fatalf("teardown of a pool with a volume: exit %d, %+v", code, r.Pools)
	}
	// The whole file: its volumes first, then the pool.
	r, code, stderr := g.node(t, "teardown", "pool.yaml", "--confirm")
	if code != 0 || len(r.Pools) != 1 || r.Pools[0].Teardown == nil || !r.Pools[0].Teardown.Changed {
		t.Fatalf("pool teardown: exit %d, %+v\n%s\n%s", code, r.Pools, r, stderr)
	}
	t.Logf("pool teardown: %v", r.Pools[0].Teardown.Steps)
	if sigs := g.sh(t, "wipefs --no-act "+poolCache.ByID()+" "+poolHDD1.ByID()+" "+poolHDD2.ByID()); sigs != "" {
		t.Errorf("signatures left after the pool's teardown:\n%s", sigs)
	}
	for _, d := range []vmharness.Disk{poolHDD1, poolHDD2} {
		if got := g.queueWBT(t, d); got == "0" || got == "" {
			t.Errorf("%s has wbt_lat_usec %q after the pool's teardown, want the kernel's default back", d.Serial, got)
		}
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

// testCarvedVolumesProbeEachDiskInTurn checks both carved volumes at once, as the agent does when a
// StatefulSet scaled up builds them side by side: their durability probes share the pool's SSD
// and HDD, and a probe that ran beside another would time the other's writes and flushes.
func testCarvedVolumesProbeEachDiskInTurn(t *testing.T, g *guest) {
	g.sh(t, "for v in carved-a carved-b; do flashcache node check --config /root/pool.yaml --volume $v -o json > /root/check-$v.json & done; wait")
	type window struct {
		volume, device string
		from, to       time.Time
	}
	probes := map[string][]window{}
	for _, v := range []string{"carved-a", "carved-b"} {
		check := decodeCheck(t, g.sh(t, "cat /root/check-"+v+".json"))
		for _, d := range check.Devices {
			if d.Probe.Writes == 0 || d.Probe.Started.IsZero() || d.Probe.Ended.Before(d.Probe.Started) {
				t.Fatalf("%s's %s %s was not probed: %+v", v, d.Role, d.Device, d.Probe)
			}
			probes[d.Role] = append(probes[d.Role], window{v, d.Device, d.Probe.Started, d.Probe.Ended})
			t.Logf("%s's %s %s probed %s .. %s", v, d.Role, d.Device, d.Probe.Started.Format(time.StampMicro), d.Probe.Ended.Format(time.StampMicro))
		}
	}
	// Both caches are the pool's SSD partition, both backing devices logical volumes on its one HDD.
	for role, w := range probes {
		a, b := w[0], w[1]
		if a.from.Before(b.to) && b.from.Before(a.to) {
			t.Errorf("the %s probes ran at once on one disk: %s's %s %s .. %s and %s's %s %s .. %s", role,
				a.volume, a.device, a.from.Format(time.StampMicro), a.to.Format(time.StampMicro), b.volume, b.device, b.from.Format(time.StampMicro), b.to.Format(time.StampMicro))
		}
	}
}
