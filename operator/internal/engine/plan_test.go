package engine

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

const gib = int64(1) << 30

func testVolume() Volume {
	op, pct := int32(20), int32(10)
	cutoff := resource.MustParse("4Mi")
	return Volume{Name: "mysql", Spec: fcv1.FlashCacheVolumeSpec{
		NodeName:              "n1",
		CacheDevice:           &fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-ssd", OverProvisionPercent: &op},
		BackingDevice:         &fcv1.BackingDeviceSpec{Path: "/dev/disk/by-id/scsi-hdd"},
		Mode:                  fcv1.CacheModeWriteback,
		DirtyThresholdPercent: &pct,
		SequentialCutoff:      &cutoff,
		ReplacementPolicy:     fcv1.ReplacementPolicyLRU,
	}}
}

// blankDisks is a host with an empty 4 GiB NVMe and an empty 8 GiB HDD, root on vda.
func blankDisks() *Observation {
	return &Observation{
		RootDisks: []string{"vda"},
		CacheSide: CacheSide{CacheUnusedPercent: -1,
			Cache: blockdev.Device{Path: "/dev/disk/by-id/nvme-ssd", DevPath: "/dev/nvme0n1", Name: "nvme0n1", SizeBytes: 4 * gib, DiscardMaxBytes: 1 << 30}},
		Backing: blockdev.Device{Path: "/dev/disk/by-id/scsi-hdd", DevPath: "/dev/sda", Name: "sda", SizeBytes: 8 * gib, Rotational: true},
	}
}

// converged is the same host once the volume is built and tuned.
func converged(v Volume) *Observation {
	o := blankDisks()
	o.Cache.Partitions = []string{"nvme0n1p1"}
	o.CachePart = &blockdev.Device{DevPath: "/dev/nvme0n1p1", Name: "nvme0n1p1", Parent: "nvme0n1", SizeBytes: 3276 << 20, Holders: []string{"bcache0"}}
	o.CachePartName = v.Label()
	o.CacheSigs = []blockdev.Signature{{Type: "gpt", Usage: "partition table"}}
	o.CachePartSigs = []blockdev.Signature{{Type: "bcache"}}
	o.CacheSB = &blockdev.SuperBlock{Fields: map[string]string{"sb.version": "3 [cache device]", "cset.uuid": "set-1", "dev.uuid": "c-1"}}
	o.CacheReg = &blockdev.CacheRegistration{SetUUID: "set-1"}
	o.CacheKnobs = map[string]string{"cache_replacement_policy": "[lru] fifo random", "set/errors": "[unregister] panic", "set/io_error_limit": "8"}
	o.CacheUnusedPercent = 3 // a cache in use is full: bcache keeps clean data until it needs the room
	o.BackingSigs = []blockdev.Signature{{Type: "bcache"}}
	o.BackingSB = &blockdev.SuperBlock{Fields: map[string]string{"sb.version": "1 [backing device]", "dev.label": v.Label(), "cset.uuid": "set-1", "dev.uuid": "b-1"}}
	o.BackingReg = &blockdev.BackingRegistration{Sysfs: "/sys/block/sda/bcache", Device: "bcache0", AttachedSet: "set-1"}
	o.Backing.Holders = []string{"bcache0"}
	o.Knobs = map[string]string{
		"label": v.Label(), "cache_mode": "writethrough [writeback] writearound none", "writeback_percent": "10",
		"writeback_delay": "1", "writeback_running": "1", "writeback_rate_minimum": "8", "sequential_cutoff": "4.0M", "state": "clean", "dirty_data": "0.0k",
		"stop_when_cache_set_failed": "[auto] always", "io_error_limit": "64", "io_errors": "0",
	}
	o.StableTarget = "/dev/bcache0"
	return o
}

// plannedSteps is the plan for v on o, each step as it is logged, joined by "; ".
func plannedSteps(t *testing.T, v Volume, o *Observation) string {
	t.Helper()
	steps, err := Plan(v, o, Desired{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		got = append(got, s.String())
	}
	return strings.Join(got, "; ")
}

func kinds(steps []Step) string {
	var k []string
	for _, s := range steps {
		if s.Tunable != "" {
			k = append(k, string(s.Kind)+":"+s.Tunable)
		} else {
			k = append(k, string(s.Kind))
		}
	}
	return strings.Join(k, " ")
}

func TestPlanFromBlankDisksBuildsEverythingInOrder(t *testing.T) {
	steps, err := Plan(testVolume(), blankDisks(), Desired{})
	if err != nil {
		t.Fatal(err)
	}
	want := "partition-cache-device make-bcache register-cache register-backing attach " +
		"set-tunable:label set-tunable:cache_mode set-tunable:writeback_percent set-tunable:writeback_delay set-tunable:writeback_running set-tunable:writeback_rate_minimum set-tunable:sequential_cutoff " +
		"set-tunable:stop_when_cache_set_failed set-tunable:io_error_limit " +
		"set-cache-tunable:cache_replacement_policy set-cache-tunable:set/errors set-cache-tunable:set/io_error_limit link-stable-path"
	if got := kinds(steps); got != want {
		t.Errorf("steps:\n got %s\nwant %s", got, want)
	}
	part := steps[0]
	if part.Start != 2048 || part.Label != "fc-mysql" || !part.Discard {
		t.Errorf("partition step = %+v", part)
	}
	// 80% of 4 GiB, on a 1 MiB boundary: the partition ends at 3276 MiB.
	if size := (part.End - part.Start + 1) * 512; size != 3275<<20 {
		t.Errorf("partition size = %d MiB, want 3275 MiB (1 MiB to 3276 MiB)", size>>20)
	}
}

func TestPlanOfConvergedVolumeIsEmpty(t *testing.T) {
	v := testVolume()
	steps, err := Plan(v, converged(v), Desired{})
	if err != nil || len(steps) != 0 {
		t.Errorf("steps = %v, err = %v; want none", steps, err)
	}
}

func TestPlanSetsOnlyDriftedTunables(t *testing.T) {
	v := testVolume()
	o := converged(v)
	o.Knobs["writeback_percent"] = "40"
	o.Knobs["sequential_cutoff"] = "0.0k"
	o.StableTarget = "/dev/bcache3"
	steps, err := Plan(v, o, Desired{})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(steps); got != "set-tunable:writeback_percent set-tunable:sequential_cutoff link-stable-path" {
		t.Errorf("steps = %s", got)
	}
	if steps[0].From != "40" || steps[0].Value != "10" || steps[1].Value != "4194304" {
		t.Errorf("tunable steps = %+v", steps[:2])
	}
}

func TestPlanUsesTheDefaultDirtyThresholdWhenUnset(t *testing.T) {
	v := testVolume()
	v.Spec.DirtyThresholdPercent = nil
	o := converged(v)
	o.Knobs["writeback_percent"] = "10"
	steps, err := Plan(v, o, Desired{})
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(int(fcv1.DefaultDirtyThresholdPercent))
	if got := kinds(steps); got != "set-tunable:writeback_percent" || steps[0].Value != want {
		t.Errorf("steps = %+v, want writeback_percent set to the default, %s", steps, want)
	}
}

func TestPlanCachesSequentialIOWhileTheCacheFills(t *testing.T) {
	v := testVolume()
	cutoffAt := func(v Volume, unused int, have string) string {
		t.Helper()
		o := converged(v)
		o.CacheUnusedPercent = unused
		o.Knobs["sequential_cutoff"] = have
		steps, err := Plan(v, o, Desired{})
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) == 0 {
			return "kept " + have
		}
		if len(steps) != 1 || steps[0].Tunable != "sequential_cutoff" {
			t.Fatalf("steps = %s", kinds(steps))
		}
		return "set " + steps[0].Value
	}
	// A new, empty cache takes everything, so a restore lands on the SSD.
	if got := cutoffAt(v, 99, "4.0M"); got != "set 0" {
		t.Errorf("empty cache: %s, want set 0", got)
	}
	if got := cutoffAt(v, 11, "0.0k"); got != "kept 0.0k" {
		t.Errorf("cache 89%% used: %s, want kept 0.0k", got)
	}
	// Filled: the spec's cutoff protects the working set from backups and large copies.
	if got := cutoffAt(v, 10, "0.0k"); got != "set 4194304" {
		t.Errorf("cache 90%% used: %s, want set 4194304", got)
	}
	// Filled, it stays filled while garbage collection moves the unused share a few points.
	for _, unused := range []int{11, 25} {
		if got := cutoffAt(v, unused, "4.0M"); got != "kept 4.0M" {
			t.Errorf("filled cache %d%% unused: %s, want kept 4.0M", unused, got)
		}
	}
	// Emptied since (discards, a volume made again): it fills again.
	if got := cutoffAt(v, 26, "4.0M"); got != "set 0" {
		t.Errorf("filled cache now 26%% unused: %s, want set 0", got)
	}
	// Unknown (bcache did not say) is not taken for empty.
	if got := cutoffAt(v, -1, "0.0k"); got != "set 4194304" {
		t.Errorf("unknown fill: %s, want set 4194304", got)
	}
	off := false
	v.Spec.CacheSequentialUntilFull = &off
	if got := cutoffAt(v, 99, "0.0k"); got != "set 4194304" {
		t.Errorf("cacheSequentialUntilFull false, empty cache: %s, want set 4194304", got)
	}
}

func TestPlanHoldKeepsWritethrough(t *testing.T) {
	v := testVolume()
	steps, err := Plan(v, converged(v), Desired{Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].Tunable != "cache_mode" || steps[0].Value != "writethrough" {
		t.Errorf("steps = %v, want one switching to writethrough", steps)
	}
}

func refusal(t *testing.T, err error) *Refusal {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a refusal", err)
	}
	return r
}

func TestPlanRefusesWhatItMustNotTouch(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Observation)
		reason string
		field  string
	}{
		{"root disk as backing", func(o *Observation) { o.RootDisks = []string{"sda"} }, ReasonRootDisk, "backingDevice.path"},
		{"root disk as cache", func(o *Observation) { o.RootDisks = []string{"nvme0n1"} }, ReasonRootDisk, "cacheDevice.path"},
		{"mounted backing", func(o *Observation) { o.BackingMounts = []string{"/var/lib/mysql"} }, ReasonMounted, "backingDevice.path"},
		{"ext4 on backing", func(o *Observation) {
			o.BackingSigs = []blockdev.Signature{{Type: "ext4", Usage: "filesystem", Label: "data"}}
		}, ReasonCarriesData, "backingDevice.path"},
		{"LVM on backing", func(o *Observation) { o.BackingSigs = []blockdev.Signature{{Type: "LVM2_member", Usage: "raid"}} }, ReasonCarriesData, "backingDevice.path"},
		{"foreign bcache on backing", func(o *Observation) {
			o.BackingSigs = []blockdev.Signature{{Type: "bcache"}}
			o.BackingSB = &blockdev.SuperBlock{Fields: map[string]string{"sb.version": "1 [backing device]", "dev.label": "someone-else"}}
		}, ReasonCarriesData, "backingDevice.path"},
		{"partition table on cache", func(o *Observation) {
			o.CacheSigs = []blockdev.Signature{{Type: "dos", Usage: "partition table"}}
			o.Cache.Partitions = []string{"nvme0n1p1"}
		}, ReasonCarriesData, "cacheDevice.path"},
		{"cache is a partition", func(o *Observation) { o.Cache.Parent = "nvme0n1"; o.Cache.Name = "nvme0n1p2" }, ReasonNotWholeDisk, "cacheDevice.path"},
		{"same disk", func(o *Observation) { o.Backing.Parent = "nvme0n1"; o.Backing.Name = "nvme0n1p2" }, ReasonSameDisk, "backingDevice.path"},
		{"backing held by LVM", func(o *Observation) { o.Backing.Holders = []string{"dm-0"} }, ReasonHeld, "backingDevice.path"},
		{"cache partition held by another device", func(o *Observation) {
			o.Cache.Partitions = []string{"nvme0n1p1"}
			o.CachePart = &blockdev.Device{DevPath: "/dev/nvme0n1p1", Name: "nvme0n1p1", Parent: "nvme0n1", Holders: []string{"md0"}}
		}, ReasonHeld, "cacheDevice.path"},
		{"cache too small", func(o *Observation) { o.Cache.SizeBytes = 70 << 20 }, ReasonCacheTooSmall, "cacheDevice.path"},
	}
	for _, c := range cases {
		o := blankDisks()
		c.mutate(o)
		steps, err := Plan(testVolume(), o, Desired{})
		if err == nil {
			t.Errorf("%s: planned %v, want a refusal", c.name, kinds(steps))
			continue
		}
		r := refusal(t, err)
		if r.Reason != c.reason || r.Field != c.field {
			t.Errorf("%s: refusal %s on %s (%s), want %s on %s", c.name, r.Reason, r.Field, r.Message, c.reason, c.field)
		}
	}
}

func TestPlanWipesOnlyWithConsent(t *testing.T) {
	v := testVolume()
	v.Spec.Wipe = &fcv1.WipeSpec{BackingDevice: true}
	o := blankDisks()
	o.BackingSigs = []blockdev.Signature{{Type: "ext4", Usage: "filesystem"}}
	steps, err := Plan(v, o, Desired{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(kinds(steps), "wipe-backing-device make-bcache ") {
		t.Errorf("steps = %s", kinds(steps))
	}
	// Consent for the backing device is not consent for the cache device.
	o.CacheSigs = []blockdev.Signature{{Type: "xfs", Usage: "filesystem"}}
	if _, err := Plan(v, o, Desired{}); refusal(t, err).Field != "cacheDevice.path" {
		t.Errorf("cache device with data planned with backing-only consent")
	}
}

func TestPlanRefusesBackingAttachedToAnotherCacheSet(t *testing.T) {
	v := testVolume()
	o := converged(v)
	o.BackingReg.AttachedSet = "set-other"
	if r := refusal(t, func() error { _, err := Plan(v, o, Desired{}); return err }()); r.Reason != ReasonForeignCacheSet {
		t.Errorf("reason = %s", r.Reason)
	}
}

// A new SSD named while the volume's cache still lives would be made a second member of its
// cache set: refused before the new device is touched.
func TestANewCacheDeviceIsRefusedWhileTheOldOneLives(t *testing.T) {
	v := testVolume()
	o := converged(v)
	o.AttachedCacheAlive = true
	replacement := blankDisks()
	o.Cache, o.CachePart, o.CachePartName, o.CacheSigs, o.CachePartSigs, o.CacheSB, o.CacheReg, o.CacheKnobs =
		replacement.Cache, nil, "", nil, nil, nil, nil, nil
	if r := refusal(t, func() error { _, err := Plan(v, o, Desired{}); return err }()); r.Reason != ReasonCacheStillAttached || r.Field != "cacheDevice.path" {
		t.Errorf("refusal %s on %s", r.Reason, r.Field)
	}
	// Once the old device is gone (bcache still lists the set until it meets an I/O error) the
	// backing device leaves the dead set, and the new one is partitioned.
	o.AttachedCacheAlive = false
	steps, err := Plan(v, o, Desired{})
	if err != nil || len(steps) < 2 || steps[0].Kind != StepDetachLostCache || steps[0].Value != "set-1" || steps[1].Kind != StepPartitionCache {
		t.Errorf("with the old cache gone: %v, %v", kinds(steps), err)
	}
	// Unless dirty data stays behind in the dead set.
	o.Knobs["dirty_data"] = "4.0k"
	if _, err := Plan(v, o, Desired{}); refusal(t, err).Reason != ReasonDirtyWithoutCache {
		t.Errorf("a new cache planned while dirty data is in the dead set: %v", err)
	}
	o.Knobs["dirty_data"] = "0.0k"
	// The volume's own cache, converged, is never refused.
	if _, err := Plan(v, func() *Observation { c := converged(v); c.AttachedCacheAlive = true; return c }(), Desired{}); err != nil {
		t.Errorf("converged volume: %v", err)
	}
}

func TestPlanRefusesRepartitionUnderNewOverProvisioning(t *testing.T) {
	v := testVolume()
	o := converged(v)
	op := int32(40)
	v.Spec.CacheDevice.OverProvisionPercent = &op
	if r := refusal(t, func() error { _, err := Plan(v, o, Desired{}); return err }()); r.Reason != ReasonPartitionMismatch {
		t.Errorf("reason = %s", r.Reason)
	}
}

func TestLabelFitsBcacheAndStaysUnique(t *testing.T) {
	short := Volume{Name: "mysql-0"}
	if short.Label() != "fc-mysql-0" {
		t.Errorf("label %q", short.Label())
	}
	a := Volume{Name: "mysql-data-of-a-very-long-statefulset-name-0"}
	b := Volume{Name: "mysql-data-of-a-very-long-statefulset-name-1"}
	if len(a.Label()) != bcacheLabelMax || a.Label() == b.Label() {
		t.Errorf("long labels %q %q", a.Label(), b.Label())
	}
}

func TestHumanSizeMatchesBcachePrinting(t *testing.T) {
	cases := map[int64]string{0: "0.0k", 512: "0.5k", 4 << 20: "4.0M", 1536 << 10: "1.5M", 1000 << 10: "0.9M", 999 << 10: "999.0k"}
	for in, want := range cases {
		if got := humanSize(in); got != want {
			t.Errorf("humanSize(%d) = %s, want %s", in, got, want)
		}
	}
}

func TestBackingWithOurCacheSetButNoLabelYetIsOurs(t *testing.T) {
	// make-bcache ran, the label (written through sysfs) did not: a kill between the two.
	v := testVolume()
	o := converged(v)
	o.BackingSB.Fields["dev.label"] = "(empty)"
	o.Knobs["label"] = ""
	steps, err := Plan(v, o, Desired{})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(steps); got != "set-tunable:label" {
		t.Errorf("steps = %s, want only the label", got)
	}
	// The same unlabelled superblock of another cache set is not ours.
	o.BackingSB.Fields["cset.uuid"] = "set-other"
	if _, err := Plan(v, o, Desired{}); refusal(t, err).Reason != ReasonCarriesData {
		t.Errorf("unlabelled backing device of another cache set taken")
	}
}

func TestMissingCacheSuperblockIsRemadeOnlyForACleanBackingDevice(t *testing.T) {
	v := testVolume()
	o := converged(v)
	o.CacheSB, o.CacheReg, o.CachePartSigs = nil, nil, nil
	o.BackingReg, o.Backing.Holders, o.CachePart.Holders = nil, nil, nil
	o.BackingSB.Fields["dev.data.cache_state"] = "1 [clean]"
	steps, err := Plan(v, o, Desired{})
	if err != nil {
		t.Fatal(err)
	}
	// A set of its own, never the old UUID: the old SSD, should it return, must not claim the disk.
	if steps[0].Kind != StepMakeCache || steps[0].Value != "" {
		t.Errorf("first step = %v, want make-bcache-cache into a new set", steps[0])
	}
	o.BackingSB.Fields["dev.data.cache_state"] = "2 [dirty]"
	if _, err := Plan(v, o, Desired{}); refusal(t, err).Reason != ReasonDirtyWithoutCache {
		t.Errorf("a new cache planned over a backing device whose dirty data is elsewhere")
	}
}

func TestTableTheKernelHasNotReadIsReadNotWiped(t *testing.T) {
	v := testVolume()
	o := blankDisks()
	o.CacheSigs = []blockdev.Signature{{Type: "gpt", Usage: "partition table"}, {Type: "PMBR", Usage: "partition table"}}
	o.OnDiskPartName = v.Label()
	steps, err := Plan(v, o, Desired{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(kinds(steps), "reread-partition-table make-bcache ") {
		t.Errorf("steps = %s", kinds(steps))
	}
	o.OnDiskPartName = "someone-else"
	if _, err := Plan(v, o, Desired{}); refusal(t, err).Reason != ReasonCarriesData {
		t.Errorf("another table was not refused")
	}
}

func TestPlanTurnsTheBackingWriteCacheOffOnlyWhenAsked(t *testing.T) {
	v := testVolume()
	o := converged(v)
	o.Backing.WriteCache = "write back"
	if steps, _ := Plan(v, o, Desired{}); len(steps) != 0 {
		t.Errorf("steps without the option: %s", kinds(steps))
	}
	v.Spec.Safety.DisableBackingWriteCache = true
	if steps, _ := Plan(v, o, Desired{}); kinds(steps) != "disable-backing-write-cache" {
		t.Errorf("steps = %s", kinds(steps))
	}
	o.Backing.WriteCache = "write through"
	if steps, _ := Plan(v, o, Desired{}); len(steps) != 0 {
		t.Errorf("steps once off: %s", kinds(steps))
	}
}

func TestOursIsOneRuleForPlanCheckAndTeardown(t *testing.T) {
	v := testVolume()
	o := converged(v)
	if c, b := ours(v, o); !c || !b {
		t.Fatalf("converged volume: cache %v backing %v", c, b)
	}
	o.BackingSB.Fields["dev.label"] = "(empty)"
	if _, b := ours(v, o); !b {
		t.Error("unlabelled backing device of our cache set is not ours")
	}
	o.BackingSB.Fields["cset.uuid"] = "set-other"
	if _, b := ours(v, o); b {
		t.Error("unlabelled backing device of another cache set is ours")
	}
	o.CachePartName = "fc-someone-else"
	if c, _ := ours(v, o); c {
		t.Error("a partition named for another volume is ours")
	}
}

// A periodic pass spreads its writeback up to its pace deadline: the rate floor is raised to the
// dirty data over the pace, the throttle stays, and a floor already high enough is kept; the same
// dirty data nearer the deadline does not raise it. After the deadline, and for a pass asked for,
// writeback goes at full speed.
func TestPlanPacesAPeriodicPassAndUnthrottlesAfterItsDeadline(t *testing.T) {
	v := testVolume()
	o := converged(v)
	o.Knobs["dirty_data"] = "120.0M"
	o.Knobs["state"] = "dirty"
	tunableSteps := func(want Desired) map[string]string {
		steps, err := Plan(v, o, want)
		if err != nil {
			t.Fatal(err)
		}
		set := map[string]string{}
		for _, s := range steps {
			if s.Kind == StepSetTunable {
				set[s.Tunable] = s.Value
			}
		}
		return set
	}

	// 120 MiB in 100 s is 2458 sectors a second; the floor is set half as high again.
	paced := func(left time.Duration) Desired {
		return Desired{Passing: true, PaceUntil: time.Now().Add(left), PaceOver: 100 * time.Second}
	}
	set := tunableSteps(paced(100 * time.Second))
	floor, err := strconv.Atoi(set["writeback_rate_minimum"])
	if err != nil || floor < 3600 || floor > 3700 {
		t.Errorf("paced pass: writeback_rate_minimum set to %q, want about 3687 (120 MiB over 100 s, x1.5); steps %v", set["writeback_rate_minimum"], set)
	}
	if _, changed := set["writeback_percent"]; changed || set["writeback_delay"] != "0" {
		t.Errorf("paced pass: %v, want the throttle's percent kept and no pause between scans", set)
	}

	// Set, it stays while the need is within reach: no rewrite at every run.
	o.Knobs["writeback_rate_minimum"] = set["writeback_rate_minimum"]
	o.Knobs["writeback_delay"] = "0"
	if set := tunableSteps(paced(90 * time.Second)); len(set) != 0 {
		t.Errorf("paced pass with its floor set: steps %v, want none", set)
	}
	// As much dirty with 5 s of the pace left: under a steady load the sweep has no less to go,
	// and a floor over the time left (20 times this one) would ask far more than the disk takes.
	if set := tunableSteps(paced(5 * time.Second)); len(set) != 0 {
		t.Errorf("paced pass near its deadline, the same dirty data: steps %v, want the floor kept", set)
	}
	// Dirty data that grew past the floor's reach raises it.
	o.Knobs["dirty_data"] = "600.0M"
	if set := tunableSteps(paced(90 * time.Second)); set["writeback_rate_minimum"] == "" {
		t.Errorf("paced pass, 600 MiB dirty with 90 s left: steps %v, want the floor raised", set)
	}

	for name, want := range map[string]Desired{
		"past its deadline": {Passing: true, PaceUntil: time.Now().Add(-time.Second)},
		"asked for":         {Passing: true},
	} {
		if set := tunableSteps(want); set["writeback_percent"] != "0" {
			t.Errorf("pass %s: steps %v, want writeback_percent 0 (full speed)", name, set)
		}
	}
	// Outside a pass the kernel's floor comes back.
	if set := tunableSteps(Desired{}); set["writeback_rate_minimum"] != "8" || set["writeback_delay"] != "1" {
		t.Errorf("after the pass: steps %v, want writeback_rate_minimum 8 and writeback_delay 1 back", set)
	}
}

// bcache 6.1 refuses to register a cache of 512 buckets or fewer; make-bcache's are 512 KiB
// unless the spec says otherwise. The 160 MiB SSD is the one a benchmark made, partitioned and
// formatted before the kernel said no.
func TestCachePartitionIsRefusedWhereBcacheWouldRefuseIt(t *testing.T) {
	for _, c := range []struct {
		diskMiB, overProvision, bucketKiB int64
		fits                              bool
	}{
		{160, 20, 512, false}, // 127 MiB: 254 buckets
		{320, 20, 512, false}, // 255 MiB: 510 buckets
		{400, 20, 512, true},  // 319 MiB: 638 buckets
		{1024, 20, 512, true},
		{160, 20, 64, true},             // 127 MiB: 2032 buckets of 64 KiB
		{1024, 20, 2048, false},         // 818 MiB: 409 buckets of 2 MiB
		{16 << 10, 50, 16 << 10, false}, // 8 GiB: 511 buckets of 16 MiB
	} {
		l := cacheLayout{overProvisionPercent: c.overProvision, bucketBytes: c.bucketKiB << 10}
		start, end, err := cachePartition(c.diskMiB<<20, l)
		if c.fits {
			if err != nil {
				t.Errorf("%d MiB at %d%%, %d-KiB buckets: %v, want a partition", c.diskMiB, c.overProvision, c.bucketKiB, err)
			} else if buckets := (end - start + 1) * sectorSize / l.bucketBytes; buckets <= 512 {
				t.Errorf("%d MiB at %d%%, %d-KiB buckets: a partition of %d buckets, which bcache refuses", c.diskMiB, c.overProvision, c.bucketKiB, buckets)
			}
			continue
		}
		var r *Refusal
		if !errors.As(err, &r) || r.Reason != ReasonCacheTooSmall || !strings.Contains(r.Message, "512 buckets") || !strings.Contains(r.Message, "cacheDevice.bucketSize") {
			t.Errorf("%d MiB at %d%%, %d-KiB buckets: %v, want a refusal that says bcache needs more than 512 buckets", c.diskMiB, c.overProvision, c.bucketKiB, err)
		}
	}
}

func TestTheBcacheDevicesTunablesAreSetInOneRound(t *testing.T) {
	tunable := func(name string) Step { return Step{Kind: StepSetTunable, Device: "/dev/bcache0", Tunable: name} }
	link := Step{Kind: StepLinkStablePath, Device: "/dev/flashcache/v"}
	cacheKnob := Step{Kind: StepSetCacheTunable, Device: "/dev/nvme0n1p1", Tunable: "congested_read_threshold_us"}
	for name, tc := range map[string]struct {
		steps []Step
		want  int
	}{
		"tunables, then the link":          {[]Step{tunable("label"), tunable("writeback_percent"), tunable("cache_mode"), link}, 3},
		"a step that changes the host":     {[]Step{{Kind: StepRegisterBacking}, tunable("label"), tunable("cache_mode")}, 1},
		"the cache set's knobs stay apart": {[]Step{tunable("label"), cacheKnob, tunable("cache_mode")}, 1},
		"one tunable":                      {[]Step{tunable("cache_mode")}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			if got := sameRound(tc.steps); len(got) != tc.want {
				t.Errorf("sameRound ran %d steps (%v), want %d", len(got), got, tc.want)
			}
		})
	}
}

func TestPlanTurnsTheBackingDisksWritebackThrottlingOffByDefault(t *testing.T) {
	v := testVolume()
	o := converged(v)
	o.Backing.Name, o.Backing.Parent = "sdb1", "sdb"
	for _, c := range []struct {
		setting fcv1.WritebackThrottling
		have    string
		want    string // the step, or "" for none
	}{
		{"", "75000", `set-backing-writeback-throttling /dev/sdb: wbt_lat_usec "75000" -> "0"`},
		{fcv1.WritebackThrottlingDisabled, "0", ""},
		{fcv1.WritebackThrottlingDisabled, "", ""}, // no such knob on this queue
		{fcv1.WritebackThrottlingKernel, "0", `set-backing-writeback-throttling /dev/sdb: wbt_lat_usec "0" -> "-1"`},
		{fcv1.WritebackThrottlingKernel, "75000", ""},
		{fcv1.WritebackThrottlingKernel, "20000", ""}, // someone's own target is left alone
	} {
		v.Spec.BackingWritebackThrottling, o.Backing.WritebackThrottlingUsec = c.setting, c.have
		if got := plannedSteps(t, v, o); got != c.want {
			t.Errorf("%q with wbt_lat_usec %q: steps %q, want %q", c.setting, c.have, got, c.want)
		}
	}
}

// A flush pass tells an extent written back from one still dirty by where it lies on the cache;
// bcache's copying garbage collector moves dirty extents, so it stays off, as the kernel leaves it.
func TestPlanTurnsBcachesCopyingGarbageCollectorOff(t *testing.T) {
	v := testVolume()
	for have, want := range map[string]string{"1": "set-cache-tunable:set/internal/copy_gc_enabled", "0": "", "": ""} {
		o := converged(v)
		o.CacheKnobs["set/internal/copy_gc_enabled"] = have
		steps, err := Plan(v, o, Desired{})
		if err != nil {
			t.Fatal(err)
		}
		if got := kinds(steps); got != want {
			t.Errorf("copy_gc_enabled %q: steps %q, want %q", have, got, want)
		}
	}
}

// bcache sends reads to the backing disk while the cache's average read latency is over 2 ms;
// by default the engine sets both congestion thresholds to 0, and Kernel gives the kernel's back.
func TestPlanSetsTheCacheSetsCongestionThresholds(t *testing.T) {
	v := testVolume()
	for _, c := range []struct {
		setting     fcv1.CongestionBypass
		read, write string
		want        string // the steps, or "" for none
	}{
		{"", "2000", "20000", `set-cache-tunable /dev/nvme0n1p1: set/congested_read_threshold_us "2000" -> "0"; ` +
			`set-cache-tunable /dev/nvme0n1p1: set/congested_write_threshold_us "20000" -> "0"`},
		{fcv1.CongestionBypassDisabled, "0", "0", ""},
		{fcv1.CongestionBypassDisabled, "", "", ""}, // a kernel without the knobs
		{fcv1.CongestionBypassDisabled, "0", "500", `set-cache-tunable /dev/nvme0n1p1: set/congested_write_threshold_us "500" -> "0"`},
		{fcv1.CongestionBypassKernel, "0", "0", `set-cache-tunable /dev/nvme0n1p1: set/congested_read_threshold_us "0" -> "2000"; ` +
			`set-cache-tunable /dev/nvme0n1p1: set/congested_write_threshold_us "0" -> "20000"`},
		{fcv1.CongestionBypassKernel, "2000", "20000", ""},
	} {
		o := converged(v)
		o.CacheKnobs["set/congested_read_threshold_us"], o.CacheKnobs["set/congested_write_threshold_us"] = c.read, c.write
		v.Spec.CacheCongestionBypass = c.setting
		if got := plannedSteps(t, v, o); got != c.want {
			t.Errorf("%q with thresholds %q/%q: steps %q, want %q", c.setting, c.read, c.write, got, c.want)
		}
	}
}
