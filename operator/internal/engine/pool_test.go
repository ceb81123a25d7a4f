package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

func testPool() Pool {
	return Pool{Name: "worker-1", Spec: fcv1.FlashCachePoolSpec{
		NodeName:    "n1",
		CacheDevice: fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-ssd"},
		BackingDevices: []fcv1.PoolBackingDevice{
			{Path: "/dev/disk/by-id/scsi-hdd1"}, {Path: "/dev/disk/by-id/scsi-hdd2"},
		},
	}}
}

// blankPoolDisks is a host with an empty 4 GiB NVMe and two empty 8 GiB HDDs, root on vda.
func blankPoolDisks() *PoolObservation {
	return &PoolObservation{
		RootDisks: []string{"vda"},
		CacheSide: CacheSide{CacheUnusedPercent: -1,
			Cache: blockdev.Device{Path: "/dev/disk/by-id/nvme-ssd", DevPath: "/dev/nvme0n1", Name: "nvme0n1", SizeBytes: 4 * gib, DiscardMaxBytes: 1 << 30}},
		Backing: []PoolDisk{
			{Device: blockdev.Device{Path: "/dev/disk/by-id/scsi-hdd1", DevPath: "/dev/sda", Name: "sda", SizeBytes: 8 * gib, Rotational: true, WritebackThrottlingUsec: "75000"}},
			{Device: blockdev.Device{Path: "/dev/disk/by-id/scsi-hdd2", DevPath: "/dev/sdb", Name: "sdb", SizeBytes: 8 * gib, Rotational: true, WritebackThrottlingUsec: "75000"}},
		},
	}
}

// builtPool is the same host once the pool is built, with one volume carved from it.
func builtPool(p Pool) *PoolObservation {
	o := blankPoolDisks()
	o.Cache.Partitions = []string{"nvme0n1p1"}
	o.CachePart = &blockdev.Device{DevPath: "/dev/nvme0n1p1", Name: "nvme0n1p1", Parent: "nvme0n1", SizeBytes: 3276 << 20, Holders: []string{"bcache0"}}
	o.CachePartName, o.OnDiskPartName = p.Label(), p.Label()
	o.CacheSigs = []blockdev.Signature{{Type: "gpt", Usage: "partition table"}}
	o.CachePartSigs = []blockdev.Signature{{Type: "bcache"}}
	o.CacheSB = &blockdev.SuperBlock{Fields: map[string]string{"sb.version": "3 [cache device]", "cset.uuid": "set-1", "dev.uuid": "c-1"}}
	o.CacheReg = &blockdev.CacheRegistration{SetUUID: "set-1"}
	o.CacheKnobs = map[string]string{"cache_replacement_policy": "[lru] fifo random", "set/errors": "[unregister] panic", "set/io_error_limit": "8"}
	for i := range o.Backing {
		d := &o.Backing[i]
		d.Sigs = []blockdev.Signature{{Type: "LVM2_member", Usage: "raid"}}
		d.PV = &blockdev.PhysicalVolume{Path: d.Device.DevPath, VG: p.VolumeGroup(), SizeBytes: 8 * gib}
		d.Device.WritebackThrottlingUsec = blockdev.WritebackThrottlingOff
	}
	o.Backing[0].Device.Holders = []string{"dm-0"}
	o.VG = &blockdev.VolumeGroup{Name: p.VolumeGroup(), SizeBytes: 16*gib - 8<<20, FreeBytes: 15*gib - 8<<20, ExtentBytes: 4 << 20, PVCount: 2, LVCount: 1, Tags: p.Tag()}
	o.LVs = []blockdev.LogicalVolume{{Name: "fc-mysql-0", VG: p.VolumeGroup(), Path: "/dev/" + p.VolumeGroup() + "/fc-mysql-0", SizeBytes: gib, Active: true}}
	return o
}

func TestPoolFromBlankDisks(t *testing.T) {
	p := testPool()
	steps, err := PlanPool(p, blankPoolDisks())
	if err != nil {
		t.Fatal(err)
	}
	want := "partition-cache-device make-bcache-cache register-cache set-cache-tunable:cache_replacement_policy set-cache-tunable:set/errors set-cache-tunable:set/io_error_limit create-physical-volume create-physical-volume create-volume-group" +
		" set-backing-writeback-throttling:wbt_lat_usec set-backing-writeback-throttling:wbt_lat_usec"
	if got := kinds(steps); got != want {
		t.Fatalf("steps = %s\nwant %s", got, want)
	}
	part := steps[0]
	if !part.Discard || part.Label != "fcp-worker-1" || part.Start != 2048 {
		t.Errorf("partition step = %+v: want the whole SSD discarded, partition 1 from 1 MiB named fcp-worker-1", part)
	}
	// 20% of the SSD left as spare area by default.
	if size := (part.End - part.Start + 1) * sectorSize; size > 4*gib*80/100 || size < 4*gib*79/100 {
		t.Errorf("cache partition of %d MiB on a 4096 MiB SSD, want about 80%%", size>>20)
	}
	vg := steps[len(steps)-3]
	if vg.Device != "fcp-worker-1" || vg.Value != "/dev/sda /dev/sdb" {
		t.Errorf("volume group step = %+v", vg)
	}
}

func TestABuiltPoolNeedsNothing(t *testing.T) {
	p := testPool()
	if steps, err := PlanPool(p, builtPool(p)); err != nil || len(steps) != 0 {
		t.Fatalf("steps = %v, err = %v; want none", steps, err)
	}
	s := poolStatusOf(builtPool(p))
	if s.CacheSetUUID != "set-1" || s.VolumeGroup != "fcp-worker-1" || s.Volumes != 1 || s.AllocatableBytes != 15*gib-8<<20 || s.CacheCapacityBytes != 3276<<20 {
		t.Errorf("status = %+v", s)
	}
}

func TestAPoolGrowsByTheDisksAddedToItsSpec(t *testing.T) {
	p := testPool()
	o := builtPool(p)
	p.Spec.BackingDevices = append(p.Spec.BackingDevices, fcv1.PoolBackingDevice{Path: "/dev/disk/by-id/scsi-hdd3"})
	o.Backing = append(o.Backing, PoolDisk{Device: blockdev.Device{Path: "/dev/disk/by-id/scsi-hdd3", DevPath: "/dev/sdc", Name: "sdc", SizeBytes: 8 * gib, Rotational: true, WritebackThrottlingUsec: "75000"}})
	steps, err := PlanPool(p, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(steps); got != "create-physical-volume extend-volume-group set-backing-writeback-throttling:wbt_lat_usec" || steps[1].Value != "/dev/sdc" || steps[2].Device != "/dev/sdc" {
		t.Errorf("steps = %v", steps)
	}
}

// The pool's volumes share its disks' queues, so the pool, not a volume, sets their writeback
// throttling: off by default, the kernel's again with Kernel (only from off).
func TestAPoolSetsItsDisksWritebackThrottling(t *testing.T) {
	p := testPool()
	for _, c := range []struct {
		setting    fcv1.WritebackThrottling
		sda, sdb   string
		wantDevice string // the one step's disk, or "" for none
		wantValue  string
	}{
		{"", "75000", "0", "/dev/sda", "0"}, // sda back from a reboot, sdb already off
		{fcv1.WritebackThrottlingDisabled, "0", "0", "", ""},
		{fcv1.WritebackThrottlingKernel, "0", "75000", "/dev/sda", "-1"},
		{fcv1.WritebackThrottlingKernel, "20000", "75000", "", ""}, // someone's own target is left alone
	} {
		o := builtPool(p)
		p.Spec.BackingWritebackThrottling = c.setting
		o.Backing[0].Device.WritebackThrottlingUsec, o.Backing[1].Device.WritebackThrottlingUsec = c.sda, c.sdb
		steps, err := PlanPool(p, o)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.wantDevice == "" && len(steps) != 0:
			t.Errorf("%q with sda %s, sdb %s: steps %v, want none", c.setting, c.sda, c.sdb, steps)
		case c.wantDevice != "" && (len(steps) != 1 || steps[0].Kind != StepBackingWBT || steps[0].Device != c.wantDevice || steps[0].Value != c.wantValue):
			t.Errorf("%q with sda %s, sdb %s: steps %v, want wbt_lat_usec %s on %s", c.setting, c.sda, c.sdb, steps, c.wantValue, c.wantDevice)
		}
	}
}

func TestAPoolRunStoppedAfterPvcreateGoesOnWithoutConsent(t *testing.T) {
	p := testPool()
	o := blankPoolDisks()
	o.Backing[0].Sigs = []blockdev.Signature{{Type: "LVM2_member"}}
	o.Backing[0].PV = &blockdev.PhysicalVolume{Path: "/dev/sda"}
	steps, err := PlanPool(p, o)
	if err != nil {
		t.Fatal(err)
	}
	wbt := " set-backing-writeback-throttling:wbt_lat_usec"
	if got := kinds(steps); !strings.HasSuffix(got, "set-cache-tunable:set/io_error_limit create-physical-volume create-volume-group"+wbt+wbt) || steps[len(steps)-4].Device != "/dev/sdb" {
		t.Errorf("steps = %s: want only sdb labelled, then the group of both", got)
	}
}

func TestPoolRefusals(t *testing.T) {
	p := testPool()
	cases := []struct {
		name          string
		change        func(*Pool, *PoolObservation)
		reason, field string
	}{
		{"a backing disk with a filesystem", func(_ *Pool, o *PoolObservation) {
			o.Backing[1].Sigs = []blockdev.Signature{{Type: "xfs", Usage: "filesystem"}}
		}, ReasonCarriesData, "backingDevices[1].path"},
		{"a backing disk in another volume group", func(_ *Pool, o *PoolObservation) {
			o.Backing[0].Sigs = []blockdev.Signature{{Type: "LVM2_member"}}
			o.Backing[0].PV = &blockdev.PhysicalVolume{Path: "/dev/sda", VG: "data"}
		}, ReasonForeignVolumeGroup, "backingDevices[0].path"},
		{"a volume group of the pool's name that is not the pool's", func(p *Pool, o *PoolObservation) {
			o.VG = &blockdev.VolumeGroup{Name: p.VolumeGroup()}
		}, ReasonForeignVolumeGroup, "metadata.name"},
		{"a partition as backing device", func(_ *Pool, o *PoolObservation) {
			o.Backing[1].Device.Parent = "sdb"
		}, ReasonBackingNotWholeDisk, "backingDevices[1].path"},
		{"the same disk twice", func(_ *Pool, o *PoolObservation) {
			o.Backing[1].Device.Name = "sda"
		}, ReasonSameDisk, "backingDevices[1].path"},
		{"the root disk", func(_ *Pool, o *PoolObservation) {
			o.RootDisks = []string{"sdb"}
		}, ReasonRootDisk, "backingDevices[1].path"},
		{"a mounted backing disk", func(_ *Pool, o *PoolObservation) {
			o.Backing[0].Mounts = []string{"/srv"}
		}, ReasonMounted, "backingDevices[0].path"},
		{"a backing disk held by another device", func(_ *Pool, o *PoolObservation) {
			o.Backing[0].Device.Holders = []string{"md0"}
		}, ReasonHeld, "backingDevices[0].path"},
		{"an SSD with a partition table", func(_ *Pool, o *PoolObservation) {
			o.CacheSigs = []blockdev.Signature{{Type: "gpt"}}
			o.Cache.Partitions = []string{"nvme0n1p1"}
			o.CachePart = &blockdev.Device{DevPath: "/dev/nvme0n1p1", Name: "nvme0n1p1", Parent: "nvme0n1"}
			o.CachePartName = "data"
		}, ReasonCarriesData, "cacheDevice.path"},
	}
	for _, c := range cases {
		pool, o := p, blankPoolDisks()
		c.change(&pool, o)
		_, err := PlanPool(pool, o)
		var r *Refusal
		if !errors.As(err, &r) || r.Reason != c.reason || r.Field != c.field {
			t.Errorf("%s: got %v, want %s on %s", c.name, err, c.reason, c.field)
		}
	}
}

func TestPoolWipeConsent(t *testing.T) {
	p := testPool()
	p.Spec.Wipe = &fcv1.PoolWipeSpec{BackingDevices: true}
	o := blankPoolDisks()
	o.Backing[1].Sigs = []blockdev.Signature{{Type: "xfs", Usage: "filesystem"}}
	steps, err := PlanPool(p, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(steps); !strings.Contains(got, "create-physical-volume wipe-backing-device create-physical-volume create-volume-group") {
		t.Errorf("steps = %s: want sdb wiped before it is labelled", got)
	}
}

func TestPoolAndVolumeLabelsNeverMeet(t *testing.T) {
	// A volume named "p-x" must not take a pool named "x"'s partition for its own, nor the reverse.
	v := Volume{Name: "p-x"}
	p := Pool{Name: "x"}
	if v.Label() == p.Label() {
		t.Fatalf("volume %s and pool %s share the label %s", v.Name, p.Name, p.Label())
	}
}

func carvedVolume(p *Pool) Volume {
	v := testVolume()
	v.Name, v.Pool = "mysql-0", p
	v.Spec.CacheDevice, v.Spec.BackingDevice = nil, nil
	v.Spec.Pool = &fcv1.PoolVolumeSource{Name: p.Name, Size: resource.MustParse("1Gi")}
	return v
}

// carvedReady is the built pool seen by a carved volume whose logical volume is not made yet.
func carvedReady(p Pool) *Observation {
	po := builtPool(p)
	return &Observation{RootDisks: po.RootDisks, CacheSide: po.CacheSide, PoolVG: po.VG}
}

// carvedBuilt is the built pool seen by v, a 1 GiB carved volume built and attached to set.
func carvedBuilt(p Pool, v Volume, set string) *Observation {
	o := carvedReady(p)
	o.LV = &blockdev.LogicalVolume{Name: "fc-mysql-0", Path: "/dev/fcp-worker-1/fc-mysql-0", SizeBytes: gib + 4<<20, Active: true, Tags: v.LogicalVolumeTag()}
	o.Backing = blockdev.Device{Path: o.LV.Path, DevPath: "/dev/dm-0", Name: "dm-0", SizeBytes: gib + 4<<20, Rotational: true, Holders: []string{"bcache1"}}
	o.BackingSigs = []blockdev.Signature{{Type: "bcache"}}
	o.BackingSB = &blockdev.SuperBlock{Fields: map[string]string{"sb.version": "1 [backing device]", "dev.label": v.Label(), "cset.uuid": set, "dev.uuid": "b-1"}}
	o.BackingReg = &blockdev.BackingRegistration{Sysfs: "/sys/block/dm-0/bcache", Device: "bcache1", AttachedSet: set}
	o.BcacheSizeBytes = gib + 2<<20
	return o
}

func TestACarvedVolumeIsALogicalVolumeOnThePoolsCacheSet(t *testing.T) {
	p := testPool()
	v := carvedVolume(&p)
	o := carvedReady(p)
	steps, err := Plan(v, o, Desired{})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].Kind != StepCreateLV || steps[0].Device != "/dev/fcp-worker-1/fc-mysql-0" || steps[0].Value != "1077936128" {
		t.Fatalf("steps = %v, want the logical volume first", steps)
	}
	// Made and active: the backing superblock on the pool's set, registration, attachment,
	// the volume's own tunables and its link. Nothing of the cache device is the volume's.
	o.LV = &blockdev.LogicalVolume{Name: "fc-mysql-0", Path: "/dev/fcp-worker-1/fc-mysql-0", SizeBytes: gib + 4<<20, Active: true, Tags: v.LogicalVolumeTag()}
	o.Backing = blockdev.Device{Path: "/dev/fcp-worker-1/fc-mysql-0", DevPath: "/dev/dm-0", Name: "dm-0", SizeBytes: gib + 4<<20, Rotational: true}
	steps, err = Plan(v, o, Desired{})
	if err != nil {
		t.Fatal(err)
	}
	got := kinds(steps)
	if !strings.HasPrefix(got, "make-bcache-backing register-backing attach set-tunable:label") || !strings.HasSuffix(got, "link-stable-path") ||
		strings.Contains(got, "cache-device") || strings.Contains(got, "set-cache-tunable") || strings.Contains(got, "register-cache") {
		t.Errorf("steps = %s", got)
	}
	if steps[0].Value != "set-1" || steps[2].Value != "set-1" {
		t.Errorf("the backing device is not made for and attached to the pool's set: %v", steps[:3])
	}
}

func TestACarvedVolumeWaitsForItsPoolAndItsRoom(t *testing.T) {
	p := testPool()
	v := carvedVolume(&p)
	_, err := Plan(v, &Observation{RootDisks: []string{"vda"}, CacheSide: blankPoolDisks().CacheSide}, Desired{})
	var r *Refusal
	if !errors.As(err, &r) || r.Reason != ReasonPoolNotReady || r.Field != "pool.name" || Classify(err).Retry != RetryWhenFixedElsewhere {
		t.Errorf("a pool not built: %v", err)
	}
	o := carvedReady(p)
	o.PoolVG.FreeBytes = 512 << 20
	_, err = Plan(v, o, Desired{})
	if !errors.As(err, &r) || r.Reason != ReasonPoolFull || r.Field != "pool.size" || !strings.Contains(r.Message, "512.0M") {
		t.Errorf("a pool with 512 MiB free for 1 GiB: %v", err)
	}
}

func TestACarvedVolumesGuardLetsThePoolsOtherVolumesHoldTheCache(t *testing.T) {
	p := testPool()
	v := carvedVolume(&p)
	o := carvedReady(p)
	o.CachePart.Holders = []string{"bcache0", "bcache1"}
	if _, err := Plan(v, o, Desired{}); err != nil {
		t.Errorf("the pool's cache partition held by its volumes: %v", err)
	}
	o.CachePartName = "someone-else"
	if _, err := Plan(v, o, Desired{}); !strings.Contains(fmt.Sprint(err), "not built") {
		t.Errorf("a cache partition that is not the pool's: %v", err)
	}
}

func TestACarvedVolumeGrowsWhileNothingUsesIt(t *testing.T) {
	p := testPool()
	v := carvedVolume(&p)
	v.Spec.Pool.Size = resource.MustParse("2Gi")
	o := carvedBuilt(p, v, "set-1")

	o.BcacheInUse = true
	if steps, err := Plan(v, o, Desired{}); err != nil || strings.Contains(kinds(steps), "extend") || strings.Contains(kinds(steps), "restart") {
		t.Errorf("in use: steps %s, err %v; want no growth", kinds(steps), err)
	}
	o.BcacheInUse = false
	steps, err := Plan(v, o, Desired{})
	if err != nil || len(steps) != 1 || steps[0].Kind != StepExtendLV || steps[0].Value != "2151677952" {
		t.Fatalf("not in use: steps %v, err %v; want the logical volume extended first", steps, err)
	}
	o.LV.SizeBytes, o.Backing.SizeBytes = 2*gib+4<<20, 2*gib+4<<20
	steps, err = Plan(v, o, Desired{})
	if err != nil || len(steps) == 0 || steps[0].Kind != StepRestartBacking || !strings.HasPrefix(kinds(steps[1:]), "set-tunable") {
		t.Fatalf("extended: steps %s, err %v; want the bcache device registered again, then its tunables", kinds(steps), err)
	}
	o.BcacheSizeBytes = 2*gib + 2<<20
	if steps, _ := Plan(v, o, Desired{}); strings.Contains(kinds(steps), "restart") {
		t.Errorf("grown: steps %s, want no restart", kinds(steps))
	}
}

// A carved volume's logical volume holds bcache's header before the size asked for, in whole
// extents, and the largest volume said to fit in a pool's free space does fit.
func TestCarvedVolumesHoldTheirSizeAfterBcachesHeader(t *testing.T) {
	for size, want := range map[int64]int64{64 << 20: 68 << 20, 62 << 20: 64 << 20, gib: gib + 4<<20} {
		if got := CarvedBackingBytes(size); got != want {
			t.Errorf("CarvedBackingBytes(%d) = %d, want %d", size, got, want)
		}
	}
	for free := int64(0); free < 80<<20; free += 1 << 20 {
		largest := LargestCarvedVolume(free)
		if largest%PoolExtentBytes != 0 || (largest > 0 && CarvedBackingBytes(largest) > free) || CarvedBackingBytes(largest+PoolExtentBytes) <= free {
			t.Errorf("LargestCarvedVolume(%d) = %d", free, largest)
		}
	}
}

// The pool names a new SSD while a volume is still attached to the set of the lost one: a clean
// volume leaves that set (alone: the set is the pool's other volumes' too) and joins the new one;
// a dirty one is refused, its data being in the lost set.
func TestACarvedVolumeMovesToThePoolsNewSSDOnlyWhenClean(t *testing.T) {
	p := testPool()
	v := carvedVolume(&p)
	o := carvedBuilt(p, v, "set-old")
	o.Knobs = map[string]string{"dirty_data": "0.0k"}

	steps, err := Plan(v, o, Desired{})
	if err != nil || !strings.HasPrefix(kinds(steps), "detach-lost-cache attach") || steps[0].Value != "set-old" || steps[1].Value != "set-1" {
		t.Errorf("clean on the lost set: steps %s, err %v; want it detached from set-old, then attached to set-1", kinds(steps), err)
	}
	o.Knobs["dirty_data"] = "4.0M"
	_, err = Plan(v, o, Desired{})
	var r *Refusal
	if !errors.As(err, &r) || r.Reason != ReasonDirtyWithoutCache || r.Field != "pool.name" || !strings.Contains(r.Message, "4.0M") {
		t.Errorf("dirty on the lost set: %v", err)
	}
	o.AttachedCacheAlive = true
	if _, err = Plan(v, o, Desired{}); !errors.As(err, &r) || r.Reason != ReasonForeignCacheSet {
		t.Errorf("on another set whose SSD works: %v", err)
	}
}

func TestALostPoolCacheNamesThePoolAndItsField(t *testing.T) {
	lost := &CacheLostError{Path: "/dev/disk/by-id/nvme-pool", Pool: "db", Status: &Status{Device: "bcache1", CacheSetUUID: "set-1"}}
	msg := lost.Error()
	if !strings.HasPrefix(msg, "pool.name: pool db's cache device /dev/disk/by-id/nvme-pool is gone; no dirty data") ||
		!strings.Contains(msg, "pool db's cacheDevice.path") || Classify(lost).Field != "pool.name" {
		t.Errorf("%s (field %q)", msg, Classify(lost).Field)
	}
	err := poolCacheLost(testPool(), fcv1.ReasonCacheDeviceLost, "is gone")
	if c := Classify(err); c.Reason != "CacheDeviceLost" || c.Field != "cacheDevice.path" || c.Retry != RetryWhenFixedElsewhere {
		t.Errorf("a pool's lost SSD classified %+v", c)
	}
}

// The cache set is the pool's: its congestion thresholds follow the pool's cacheCongestionBypass.
func TestAPoolSetsItsCacheSetsCongestionThresholds(t *testing.T) {
	p := testPool()
	for _, c := range []struct {
		setting fcv1.CongestionBypass
		have    string
		want    string
	}{
		{"", "2000", "set-cache-tunable:set/congested_read_threshold_us set-cache-tunable:set/congested_write_threshold_us"},
		{fcv1.CongestionBypassKernel, "2000", ""},
		{fcv1.CongestionBypassKernel, "0", "set-cache-tunable:set/congested_read_threshold_us set-cache-tunable:set/congested_write_threshold_us"},
	} {
		o := builtPool(p)
		o.CacheKnobs["set/congested_read_threshold_us"] = c.have
		o.CacheKnobs["set/congested_write_threshold_us"] = c.have + "0"
		p.Spec.CacheCongestionBypass = c.setting
		steps, err := PlanPool(p, o)
		if err != nil {
			t.Fatal(err)
		}
		if got := kinds(steps); got != c.want {
			t.Errorf("%q with thresholds %s/%s0: steps %q, want %q", c.setting, c.have, c.have, got, c.want)
		}
	}
}
