package engine

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/safety"
)

// StepKind names one action of the engine.
type StepKind string

// The actions, in the order a new volume needs them.
const (
	StepWipeCache       StepKind = "wipe-cache-device"
	StepPartitionCache  StepKind = "partition-cache-device"
	StepRereadTable     StepKind = "reread-partition-table"
	StepMakeBcache      StepKind = "make-bcache"
	StepMakeCache       StepKind = "make-bcache-cache"
	StepWipeBacking     StepKind = "wipe-backing-device"
	StepMakeBacking     StepKind = "make-bcache-backing"
	StepRegisterCache   StepKind = "register-cache"
	StepRegisterBacking StepKind = "register-backing"
	StepAttach          StepKind = "attach"
	StepSetTunable      StepKind = "set-tunable"
	StepSetCacheTunable StepKind = "set-cache-tunable"
	StepLinkStablePath  StepKind = "link-stable-path"
	StepWriteThrough    StepKind = "disable-backing-write-cache"
	StepBackingWBT      StepKind = "set-backing-writeback-throttling"
	// The iSCSI steps run before the others: the backing LUN has no device until the login.
	StepISCSILogin   StepKind = "iscsi-login"
	StepISCSIStartup StepKind = "iscsi-start-at-boot"
	// With the cache device lost: detach a clean volume from its dead cache set, or start the
	// backing device alone.
	StepDetachLostCache   StepKind = "detach-lost-cache"
	StepStartWithoutCache StepKind = "start-without-cache"
	// A carved volume's logical volume, made in its pool's volume group, or activated.
	StepCreateLV   StepKind = "create-logical-volume"
	StepActivateLV StepKind = "activate-logical-volume"
	// A carved volume grown: its logical volume extended, then its bcache device stopped and
	// registered again, the only way bcache takes a backing device's new size.
	StepExtendLV       StepKind = "extend-logical-volume"
	StepRestartBacking StepKind = "restart-backing-device"
)

// Step is one action. Steps after the first may name devices that do not exist yet (the cache
// partition before it is created); the engine runs only the first and plans again.
type Step struct {
	Kind   StepKind `json:"kind"`
	Device string   `json:"device"`
	// Tunable and Value for set-tunable steps; From is what the kernel reports now.
	Tunable string `json:"tunable,omitempty"`
	Value   string `json:"value,omitempty"`
	From    string `json:"from,omitempty"`
	// Start and End are the partition's sectors, for partition-cache-device.
	Start int64 `json:"startSector,omitempty"`
	End   int64 `json:"endSector,omitempty"`
	// Discard says the whole device is discarded before it is partitioned, so the SSD knows the
	// spare area is free. One step with the partitioning: a discard changes nothing the engine
	// can observe afterwards.
	Discard bool `json:"discard,omitempty"`
	// Label is the volume's label, for steps that write it.
	Label string `json:"label,omitempty"`
}

func (s Step) String() string {
	switch s.Kind {
	case StepSetTunable, StepSetCacheTunable, StepBackingWBT:
		return fmt.Sprintf("%s %s: %s %q -> %q", s.Kind, s.Device, s.Tunable, s.From, s.Value)
	case StepPartitionCache:
		discard := ""
		if s.Discard {
			discard = "discard the whole device, "
		}
		return fmt.Sprintf("%s %s: %sGPT, partition 1 sectors %d-%d named %q, rest left unpartitioned", s.Kind, s.Device, discard, s.Start, s.End, s.Label)
	default:
		return fmt.Sprintf("%s %s", s.Kind, s.Device)
	}
}

// Refusal is a reason the engine will not touch a device. Nothing has been changed when it is
// returned.
type Refusal struct {
	// Reason is a CamelCase cause for conditions, e.g. DeviceMounted.
	Reason string
	// Field is the spec field that named the device.
	Field   string
	Message string
}

func (r *Refusal) Error() string { return fmt.Sprintf("%s: %s", r.Field, r.Message) }

// Refusal reasons.
const (
	ReasonRootDisk           = "DeviceIsRootDisk"
	ReasonMounted            = "DeviceMounted"
	ReasonHeld               = "DeviceHeld"
	ReasonCarriesData        = "DeviceCarriesData"
	ReasonNotWholeDisk       = "CacheDeviceNotWholeDisk"
	ReasonSameDisk           = "DevicesShareADisk"
	ReasonForeignCacheSet    = "AttachedToAnotherCacheSet"
	ReasonCacheTooSmall      = "CacheDeviceTooSmall"
	ReasonPartitionMismatch  = "CachePartitionMismatch"
	ReasonDirtyWithoutCache  = "DirtyDataWithoutItsCache"
	ReasonISCSILoginRefused  = fcv1.ReasonISCSILoginRefused
	ReasonCacheStillAttached = "CacheStillAttached"
	// ReasonPoolNotReady: a carved volume's pool has no cache set or volume group on the host yet.
	ReasonPoolNotReady = "PoolNotReady"
	// ReasonPoolFull: a carved volume's pool has less free space than the volume's size.
	ReasonPoolFull = "PoolFull"
	// ReasonPoolOnAnotherNode: a carved volume names a pool of another node.
	ReasonPoolOnAnotherNode = "PoolOnAnotherNode"
)

const (
	sectorSize   = 512
	alignSectors = (1 << 20) / sectorSize // 1 MiB
	// backingDataOffsetBytes is where a backing device's data starts: bcache's superblock and the
	// durability check's scratch region come before it.
	backingDataOffsetBytes = safety.BackingDataOffsetSectors * sectorSize
	// gptBackupSectors is what the backup GPT takes at the end of the disk.
	gptBackupSectors = 34
	// minCacheBuckets is the fewest buckets a cache the kernel registers has: bcache 6.1 refuses
	// a cache of 512 buckets or fewer ("ca->sb.nbuckets is too small"; it sizes its free lists
	// from the bucket count rounded up to a power of two, divided by 1024). A 127 MiB partition of
	// 512-KiB buckets was made, then refused at registration, seen in the VM; refused here,
	// nothing is written first.
	minCacheBuckets = 513
	// writebackDelay is bcache's pause after each full pass of writeback over the index, in
	// seconds. A write to the knob does not cut a pause short, so a blocking flush waited up to
	// the kernel's default of 30 s before it wrote anything: `make bench` measured a 63 MiB
	// flush taking 31 s where the disk needs 1. One second caps that wait; dirty data under the
	// threshold still trickles at the rate bcache's controller sets, whatever the pause.
	writebackDelay = "1"
)

// Desired is what the engine wants the kernel to report, beyond the devices existing.
type Desired struct {
	// Hold keeps the volume in writethrough, whatever the spec says: a drain or maintenance flush
	// holds it until it is released.
	Hold bool
	// SafetyWritethrough keeps the volume in writethrough because no durability check has
	// allowed writeback yet, or the last one refused it.
	SafetyWritethrough bool
	// Passing writes back, with no pause between scans, while the volume stays in its mode: a
	// flush pass (the time-based one behind flushPeriod, or one asked for) is running. The engine
	// sets it from the volume's state.
	Passing bool
	// PaceUntil is when a paced pass should have written back what is dirty: until then bcache's
	// writeback rate floor is the dirty data over PaceOver (its own throttle stays on above the
	// dirty threshold), so the backing disk takes a steady share of writeback rather than a
	// burst that commits queue behind. After it, or when zero (a pass asked for), the pass
	// writes back at full speed.
	PaceUntil time.Time
	// PaceOver is the time a paced pass spreads its writeback over, from its start to PaceUntil:
	// the floor is what is dirty over all of it, however much of it is gone (passPace says why).
	PaceOver time.Duration
	// FlushRequest asks Converge for a flush pass now (in writeback mode, unlike a drain's
	// flush): a token, honoured once, when it differs from the last one honoured.
	FlushRequest string
	// Observed is an observation of the volume the caller made just before, changing nothing on
	// the host since (ObserveStatus): the first apply plans its first round on it instead of
	// observing again, which is a dozen commands (LVM's reports, wipefs, sfdisk) and, under
	// emulation, a second or more of CPU on every refresh of every volume. Used once.
	Observed *Observation
}

// Plan lists the steps that take the host from o to the volume v. It changes nothing. A refusal
// comes back as a *Refusal.
func Plan(v Volume, o *Observation, want Desired) ([]Step, error) {
	if err := guard(v, o); err != nil {
		return nil, err
	}
	if v.Carved() {
		return planCarved(v, o, want)
	}
	label := v.Label()
	var steps []Step

	// The cache device: ours when its first partition carries our label.
	cacheIsOurs, backingIsOurs := ours(v, o)
	// The backing device is attached to a cache set that is not on the named cache device: the
	// spec names a new SSD.
	attachedElsewhere := backingIsOurs && o.BackingReg != nil && o.BackingReg.AttachedSet != "" &&
		!(cacheIsOurs && o.CacheSB != nil && o.CacheSB.SetUUID() == o.BackingReg.AttachedSet)
	switch {
	case attachedElsewhere && o.AttachedCacheAlive:
		// A replacement SSD is for a cache that is gone; the live one holds the volume's cache
		// set, and a second device made into that set would fight it for the backing disk.
		return nil, &Refusal{Reason: ReasonCacheStillAttached, Field: "cacheDevice.path",
			Message: fmt.Sprintf("%s is attached to cache set %s, whose cache device still works and is not %s: "+
				"a new SSD replaces a lost one only; to move a working volume, flush it, tear it down and build it again",
				o.Backing.DevPath, o.BackingReg.AttachedSet, o.Cache.Path)}
	case attachedElsewhere:
		// A new SSD for a lost one that bcache has not failed yet: the backing device leaves the
		// dead set first, and only if nothing dirty stays behind in it.
		if dirty, _ := blockdev.ParseHumanSize(o.Knobs["dirty_data"]); dirty > 0 {
			return nil, &Refusal{Reason: ReasonDirtyWithoutCache, Field: "cacheDevice.path",
				Message: fmt.Sprintf("%s has %s of dirty data in cache set %s, whose cache device is gone; a new cache would lose it",
					o.Backing.DevPath, o.Knobs["dirty_data"], o.BackingReg.AttachedSet)}
		}
		steps = append(steps, Step{Kind: StepDetachLostCache, Device: o.Backing.DevPath, Value: o.BackingReg.AttachedSet})
	}
	partSteps, cacheSB, cachePart, err := planCachePartition(&o.CacheSide, label, cacheIsOurs, wipeConsent(v).CacheDevice, v.cacheLayout(), "volume")
	if err != nil {
		return nil, err
	}
	steps = append(steps, partSteps...)
	set := ""
	if cacheSB {
		set = o.CacheSB.SetUUID()
	}

	// The backing device: ours when its bcache superblock carries our label, or no label yet and
	// our cache set (make-bcache writes the set, and the label can only follow through sysfs).
	if !backingIsOurs && len(o.BackingSigs) > 0 {
		if !wipeConsent(v).BackingDevice {
			return nil, &Refusal{Reason: ReasonCarriesData, Field: "backingDevice.path",
				Message: fmt.Sprintf("%s carries %s; set spec.wipe.backingDevice to erase it and every byte of data on it", o.Backing.DevPath, describe(o.BackingSigs, o.Backing.Partitions))}
		}
		steps = append(steps, Step{Kind: StepWipeBacking, Device: o.Backing.DevPath})
	}

	// One make-bcache call formats both with the same cache set, so they attach by themselves
	// and the backing device is recognisably ours before its label is written.
	switch {
	case !cacheSB && !backingIsOurs:
		steps = append(steps, Step{Kind: StepMakeBcache, Device: cachePart + " and " + o.Backing.DevPath})
	case !cacheSB:
		if state := o.BackingSB.Fields["dev.data.cache_state"]; strings.Contains(state, "dirty") {
			return nil, &Refusal{Reason: ReasonDirtyWithoutCache, Field: "cacheDevice.path",
				Message: fmt.Sprintf("%s holds dirty data of cache set %s, which is not on %s; a new cache would lose it", o.Backing.DevPath, o.BackingSB.SetUUID(), cachePart)}
		}
		// A cache set of its own, attached below: reusing the lost set's UUID would let the old
		// SSD, should it come back, claim the backing device too.
		steps = append(steps, Step{Kind: StepMakeCache, Device: cachePart})
	case !backingIsOurs:
		steps = append(steps, Step{Kind: StepMakeBacking, Device: o.Backing.DevPath, Value: set})
	}

	// Registration and attachment, as udev and bcache-tools' rules would do on a host.
	if o.CacheReg == nil || !cacheSB {
		steps = append(steps, Step{Kind: StepRegisterCache, Device: cachePart})
	}
	if o.BackingReg == nil || !backingIsOurs {
		steps = append(steps, Step{Kind: StepRegisterBacking, Device: o.Backing.DevPath})
	}
	bcacheDev := "the bcache device of " + o.Backing.DevPath
	if o.BackingReg != nil && o.BackingReg.Device != "" {
		bcacheDev = "/dev/" + o.BackingReg.Device
	}
	switch {
	case o.BackingReg == nil || set == "":
		steps = append(steps, Step{Kind: StepAttach, Device: bcacheDev})
	case o.BackingReg.AttachedSet == "":
		steps = append(steps, Step{Kind: StepAttach, Device: bcacheDev, Value: set})
	case o.BackingReg.AttachedSet != set:
		return nil, &Refusal{Reason: ReasonForeignCacheSet, Field: "backingDevice.path",
			Message: fmt.Sprintf("%s is attached to cache set %s, not to this volume's cache set %s", o.Backing.DevPath, o.BackingReg.AttachedSet, set)}
	}

	steps = append(steps, tunableSteps(v, o, want, bcacheDev)...)
	steps = append(steps, cacheTunableSteps(cachePart, o.CacheKnobs, v.Spec.EffectiveReplacementPolicy(), v.Spec.EffectiveCacheCongestionBypass())...)

	if v.Spec.Safety.DisableBackingWriteCache && o.Backing.WriteCache == "write back" {
		steps = append(steps, Step{Kind: StepWriteThrough, Device: o.Backing.DevPath, From: o.Backing.WriteCache, Value: "write through"})
	}
	if s := backingWBTStep(v.Spec.EffectiveBackingWritebackThrottling(), o.Backing); s != nil {
		steps = append(steps, *s)
	}
	return append(steps, linkStep(v, o, bcacheDev)...), nil
}

// backingWBTStep sets a backing disk's writeback throttling as a volume's or a pool's spec asks,
// when the kernel reports otherwise: Disabled is 0; Kernel is the kernel's default, restored only
// from 0, so that a latency target someone chose is left alone. A queue without the knob has
// nothing to set.
func backingWBTStep(mode fcv1.WritebackThrottling, backing blockdev.Device) *Step {
	have := backing.WritebackThrottlingUsec
	want := blockdev.WritebackThrottlingOff
	if mode == fcv1.WritebackThrottlingKernel {
		want = blockdev.WritebackThrottlingDefault
	}
	if have == "" || have == want || (want == blockdev.WritebackThrottlingDefault && have != blockdev.WritebackThrottlingOff) {
		return nil
	}
	return &Step{Kind: StepBackingWBT, Device: "/dev/" + backing.Disk(), Tunable: "wbt_lat_usec", From: have, Value: want}
}

// setBackingWBT takes a StepBackingWBT: the kernel must report 0 after it is written, or the flush
// would go on queueing behind writeback while the volume's status said otherwise.
func setBackingWBT(s Step) error {
	got, err := blockdev.SetWritebackThrottling(strings.TrimPrefix(s.Device, "/dev/"), s.Value)
	if err != nil {
		return err
	}
	if s.Value == blockdev.WritebackThrottlingOff && got != s.Value {
		return fmt.Errorf("%s reports wbt_lat_usec %q after writing %q", s.Device, got, s.Value)
	}
	return nil
}

// restoreBackingWBT gives a disk whose writeback throttling a spec with Disabled turned off (or
// found off) the kernel's default back, at teardown, and says what it did.
func restoreBackingWBT(mode fcv1.WritebackThrottling, disk blockdev.Device) (string, error) {
	if mode != fcv1.WritebackThrottlingDisabled || disk.WritebackThrottlingUsec != blockdev.WritebackThrottlingOff {
		return "", nil
	}
	got, err := blockdev.SetWritebackThrottling(disk.Disk(), blockdev.WritebackThrottlingDefault)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("restored the kernel's writeback throttling on /dev/%s (wbt_lat_usec %s)", disk.Disk(), got), nil
}

// tunableSteps set the bcache device's tunables the kernel does not report as wanted.
func tunableSteps(v Volume, o *Observation, want Desired, bcacheDev string) []Step {
	var steps []Step
	dirty, _ := blockdev.ParseHumanSize(o.Knobs["dirty_data"])
	for _, t := range tunables(v, want, o.CacheUnusedPercent, o.Knobs["sequential_cutoff"], dirty) {
		have := o.Knobs[t.name]
		if o.BackingReg == nil || !t.matches(have) {
			steps = append(steps, Step{Kind: StepSetTunable, Device: bcacheDev, Tunable: t.name, Value: t.value, From: have})
		}
	}
	return steps
}

// linkStep points the volume's stable path at its bcache device, when it does not yet.
func linkStep(v Volume, o *Observation, bcacheDev string) []Step {
	if o.BackingReg == nil || o.BackingReg.Device == "" || o.StableTarget != "/dev/"+o.BackingReg.Device {
		return []Step{{Kind: StepLinkStablePath, Device: v.StablePath(), Value: bcacheDev}}
	}
	return nil
}

// planCarved is Plan for a volume carved from a pool: the pool's cache set is there (the pool's
// apply builds it), so the steps are the logical volume's, its backing superblock, registration
// and attachment to the pool's set, its tunables and its link. The cache device is not the
// volume's to change.
func planCarved(v Volume, o *Observation, want Desired) ([]Step, error) {
	p := v.Pool
	if o.CachePart == nil || o.CachePartName != p.Label() || o.CacheSB == nil || !o.CacheSB.IsCache() || o.CacheReg == nil || o.PoolVG == nil {
		return nil, &Refusal{Reason: ReasonPoolNotReady, Field: "pool.name",
			Message: fmt.Sprintf("pool %s is not built on this host yet: its cache set and volume group come first", p.Name)}
	}
	set := o.CacheSB.SetUUID()
	lvPath := v.BackingPath()
	size := v.Spec.Pool.Size.Value()
	lvSize := CarvedBackingBytes(size)
	var steps []Step
	switch {
	case o.LV == nil && o.PoolVG.FreeBytes < lvSize:
		return nil, &Refusal{Reason: ReasonPoolFull, Field: "pool.size",
			Message: fmt.Sprintf("pool %s has %s free in volume group %s; the volume wants %s (%s with bcache's header)", p.Name, humanSize(o.PoolVG.FreeBytes), o.PoolVG.Name, humanSize(size), humanSize(lvSize))}
	case o.LV == nil:
		return []Step{{Kind: StepCreateLV, Device: lvPath, Value: strconv.FormatInt(lvSize, 10)}}, nil
	case !o.LV.Active:
		return []Step{{Kind: StepActivateLV, Device: lvPath}}, nil
	case o.LV.SizeBytes < lvSize && !o.BcacheInUse:
		// Grown while nothing uses it: LVM first, then bcache, which takes the new size at its
		// next registration. In use, Apply says it waits.
		return []Step{{Kind: StepExtendLV, Device: lvPath, Value: strconv.FormatInt(lvSize, 10)}}, nil
	}
	_, backingOurs := ours(v, o)
	if !backingOurs && len(o.BackingSigs) > 0 {
		if !wipeConsent(v).BackingDevice {
			return nil, &Refusal{Reason: ReasonCarriesData, Field: "pool.name",
				Message: fmt.Sprintf("%s carries %s; set spec.wipe.backingDevice to erase it and every byte of data on it", lvPath, describe(o.BackingSigs, nil))}
		}
		steps = append(steps, Step{Kind: StepWipeBacking, Device: lvPath})
	}
	if !backingOurs {
		steps = append(steps, Step{Kind: StepMakeBacking, Device: lvPath, Value: set})
	}
	if o.BackingReg == nil || !backingOurs {
		steps = append(steps, Step{Kind: StepRegisterBacking, Device: lvPath})
	}
	bcacheDev := "the bcache device of " + lvPath
	if o.BackingReg != nil && o.BackingReg.Device != "" {
		bcacheDev = "/dev/" + o.BackingReg.Device
	}
	switch {
	case o.BackingReg == nil || o.BackingReg.AttachedSet == "":
		steps = append(steps, Step{Kind: StepAttach, Device: bcacheDev, Value: set})
	case o.BackingReg.AttachedSet != set && !o.AttachedCacheAlive && backingOurs:
		// The pool has a new SSD for a lost one that bcache has not failed yet: the volume
		// leaves the dead set first, and only if nothing dirty stays behind in it.
		if dirty, _ := blockdev.ParseHumanSize(o.Knobs["dirty_data"]); dirty > 0 {
			return nil, &Refusal{Reason: ReasonDirtyWithoutCache, Field: "pool.name",
				Message: fmt.Sprintf("%s has %s of dirty data in cache set %s, whose cache device is gone; pool %s's new cache would lose it",
					lvPath, o.Knobs["dirty_data"], o.BackingReg.AttachedSet, p.Name)}
		}
		steps = append(steps, Step{Kind: StepDetachLostCache, Device: bcacheDev, Value: o.BackingReg.AttachedSet},
			Step{Kind: StepAttach, Device: bcacheDev, Value: set})
	case o.BackingReg.AttachedSet != set:
		return nil, &Refusal{Reason: ReasonForeignCacheSet, Field: "pool.name",
			Message: fmt.Sprintf("%s is attached to cache set %s, not to pool %s's cache set %s", lvPath, o.BackingReg.AttachedSet, p.Name, set)}
	}
	if backingOurs && o.BcacheSizeBytes > 0 && o.BcacheSizeBytes+backingDataOffsetBytes < o.LV.SizeBytes && !o.BcacheInUse {
		// Before the tunables: a new registration starts them from bcache's defaults.
		steps = append(steps, Step{Kind: StepRestartBacking, Device: bcacheDev, From: humanSize(o.BcacheSizeBytes),
			Value: humanSize(o.LV.SizeBytes - backingDataOffsetBytes)})
	}
	steps = append(steps, tunableSteps(v, o, want, bcacheDev)...)
	return append(steps, linkStep(v, o, bcacheDev)...), nil
}

// planCachePartition plans the cache device's partition for a volume on whole devices or for a
// pool (what), whose label names it: read a table of ours the kernel has not, or wipe (with
// consent) and partition a device that is not ours, leaving the spare area. It says whether the
// partition is ours with a cache superblock already, and names the partition for later steps.
func planCachePartition(o *CacheSide, label string, ours, consent bool, layout cacheLayout, what string) (steps []Step, cacheSB bool, cachePart string, err error) {
	steps, ours, err = planPartitionSteps(o, label, ours, consent, layout)
	if err != nil {
		return nil, false, "", err
	}
	cachePart = "partition 1 of " + o.Cache.DevPath
	if o.CachePart != nil && (len(steps) == 0 || steps[len(steps)-1].Kind != StepPartitionCache) {
		cachePart = o.CachePart.DevPath
	}
	cacheSB = ours && o.CacheSB != nil
	if cacheSB && !o.CacheSB.IsCache() {
		return nil, false, "", &Refusal{Reason: ReasonCarriesData, Field: "cacheDevice.path",
			Message: fmt.Sprintf("%s is labelled for this %s but holds a bcache backing superblock", cachePart, what)}
	}
	return steps, cacheSB, cachePart, nil
}

func planPartitionSteps(o *CacheSide, label string, ours, consent bool, layout cacheLayout) ([]Step, bool, error) {
	var steps []Step
	if !ours && len(o.Cache.Partitions) == 0 && o.OnDiskPartName == label {
		// Our table is on the disk but the kernel has not read it: a run killed right after
		// sgdisk wrote it. Reading it is all that is missing; no consent is needed.
		steps = append(steps, Step{Kind: StepRereadTable, Device: o.Cache.DevPath})
		ours = true
	}
	if !ours {
		if len(o.CacheSigs) > 0 || len(o.Cache.Partitions) > 0 {
			if !consent {
				return nil, false, &Refusal{Reason: ReasonCarriesData, Field: "cacheDevice.path",
					Message: fmt.Sprintf("%s carries %s; set spec.wipe.cacheDevice to erase it", o.Cache.DevPath, describe(o.CacheSigs, o.Cache.Partitions))}
			}
			steps = append(steps, Step{Kind: StepWipeCache, Device: o.Cache.DevPath})
		}
		start, end, err := cachePartition(o.Cache.SizeBytes, layout)
		if err != nil {
			return nil, false, err
		}
		return append(steps, Step{Kind: StepPartitionCache, Device: o.Cache.DevPath, Start: start, End: end, Label: label,
			Discard: o.Cache.DiscardMaxBytes > 0}), false, nil
	}
	if o.CacheSB == nil && len(o.CachePartSigs) > 0 && !consent {
		return nil, false, &Refusal{Reason: ReasonCarriesData, Field: "cacheDevice.path",
			Message: fmt.Sprintf("%s carries %s; set spec.wipe.cacheDevice to erase it", o.CachePart.DevPath, describe(o.CachePartSigs, nil))}
	}
	return steps, true, nil
}

// guard refuses devices the engine must never touch, whatever the spec says.
func guard(v Volume, o *Observation) error {
	for _, d := range []struct {
		field  string
		dev    blockdev.Device
		mounts []string
	}{
		{"cacheDevice.path", o.Cache, o.CacheMounts},
		{"backingDevice.path", o.Backing, o.BackingMounts},
	} {
		if slices.Contains(o.RootDisks, d.dev.Disk()) {
			return &Refusal{Reason: ReasonRootDisk, Field: d.field,
				Message: fmt.Sprintf("%s is on %s, the disk of the root filesystem", d.dev.Path, d.dev.Disk())}
		}
		if len(d.mounts) > 0 {
			return &Refusal{Reason: ReasonMounted, Field: d.field,
				Message: fmt.Sprintf("%s is in use: mounted at %s", d.dev.Path, strings.Join(d.mounts, ", "))}
		}
	}
	if o.Cache.IsPartition() {
		return &Refusal{Reason: ReasonNotWholeDisk, Field: v.cacheField(),
			Message: fmt.Sprintf("%s is a partition of %s; name the whole SSD: the engine partitions it and leaves spare area", o.Cache.Path, o.Cache.Parent)}
	}
	if o.Cache.Disk() == o.Backing.Disk() {
		return &Refusal{Reason: ReasonSameDisk, Field: "backingDevice.path",
			Message: fmt.Sprintf("%s and %s are on the same disk %s", o.Cache.Path, o.Backing.Path, o.Cache.Disk())}
	}
	ours := ""
	if o.BackingReg != nil {
		ours = o.BackingReg.Device
	}
	for _, h := range o.Backing.Holders {
		if h != ours {
			return &Refusal{Reason: ReasonHeld, Field: "backingDevice.path",
				Message: fmt.Sprintf("%s is held by %s", o.Backing.Path, h)}
		}
	}
	if len(o.Cache.Holders) > 0 {
		return &Refusal{Reason: ReasonHeld, Field: v.cacheField(),
			Message: fmt.Sprintf("%s is held by %s", o.Cache.Path, strings.Join(o.Cache.Holders, ", "))}
	}
	// A pool's cache partition is held by the bcache devices of all its volumes.
	if o.CachePart != nil && !v.Carved() {
		// bcache links the cache partition to the bcache device it serves, like the backing device.
		for _, h := range o.CachePart.Holders {
			if h != ours {
				return &Refusal{Reason: ReasonHeld, Field: "cacheDevice.path",
					Message: fmt.Sprintf("%s is held by %s", o.CachePart.DevPath, h)}
			}
		}
	}
	if o.CachePart != nil && o.CachePartName == v.cacheLabel() {
		_, end, err := cachePartition(o.Cache.SizeBytes, v.cacheLayout())
		if err == nil && o.CachePart.SizeBytes > (end+1)*sectorSize {
			return &Refusal{Reason: ReasonPartitionMismatch, Field: "cacheDevice.overProvisionPercent",
				Message: fmt.Sprintf("%s is larger than this over-provisioning allows; it was partitioned with another value", o.CachePart.DevPath)}
		}
	}
	return nil
}

// cacheLayout is how a cache device is partitioned and formatted, from the spec of the volume
// or pool that owns it: the share left as spare area, and bcache's bucket size.
type cacheLayout struct {
	overProvisionPercent int64
	bucketBytes          int64
}

// cachePartition returns the first and last sector of the cache partition: from 1 MiB, covering
// (100 - overProvision)% of the disk, ending on a 1 MiB boundary, clear of the backup GPT.
func cachePartition(diskBytes int64, l cacheLayout) (start, end int64, err error) {
	total := diskBytes / sectorSize
	start = alignSectors
	want := total * (100 - l.overProvisionPercent) / 100
	lastUsable := total - gptBackupSectors - 1
	end = want/alignSectors*alignSectors - 1
	if end > lastUsable {
		end = (lastUsable+1)/alignSectors*alignSectors - 1
	}
	if minBytes := minCacheBuckets * l.bucketBytes; (end-start+1)*sectorSize < minBytes {
		return 0, 0, &Refusal{Reason: ReasonCacheTooSmall, Field: "cacheDevice.path",
			Message: fmt.Sprintf("a %d MiB device leaves a cache partition of %d MiB at %d%% over-provisioning; bcache needs more than 512 buckets of %s (cacheDevice.bucketSize), at least %.1f MiB",
				diskBytes>>20, (end-start+1)*sectorSize>>20, l.overProvisionPercent, humanSize(l.bucketBytes), float64(minBytes)/(1<<20))}
	}
	return start, end, nil
}

type tunable struct {
	name, value string
	matches     func(have string) bool
}

// fillUntilUnusedPercent is how much of the cache device must still be unused for sequential I/O
// to be cached when the spec says cacheSequentialUntilFull. bcache counts a bucket as used once
// allocated, so this tracks the fill, and the cutoff applies before the working set is crowded.
const fillUntilUnusedPercent = 10

// refillFromUnusedPercent is how much of a filled cache must be unused again before sequential
// I/O is cached again. bcache's garbage collection moves the unused share a few points either
// way as it reclaims buckets: with the one threshold, the benchmark's full cache under a
// database's load went from the spec's cutoff to none and back every 20-30 s, and a backup
// streaming in the seconds without one would have evicted the working set. A cache emptied since
// (discarded blocks, a volume made again on it) fills again.
const refillFromUnusedPercent = 25

// effectiveSequentialCutoff is the sequential cutoff the volume should have now, given the one
// bcache applies (have, as it prints it): 0 while the cache is filling, which stops when 10% or
// less of it is unused and starts again only past 25% (cacheUnusedPercent of -1 means unknown,
// and then the spec's cutoff holds).
func effectiveSequentialCutoff(v Volume, cacheUnusedPercent int, have string) int64 {
	cutoff := v.Spec.EffectiveSequentialCutoffBytes()
	if !v.Spec.EffectiveCacheSequentialUntilFull() {
		return cutoff
	}
	fillingWhileOver := fillUntilUnusedPercent
	if applied, err := blockdev.ParseHumanSize(have); err == nil && applied > 0 {
		fillingWhileOver = refillFromUnusedPercent
	}
	if cacheUnusedPercent > fillingWhileOver {
		return 0
	}
	return cutoff
}

// tunables are the backing device's knobs as the spec wants them, given how much of the cache
// device is still unused and the sequential cutoff bcache applies now (haveCutoff).
func tunables(v Volume, want Desired, cacheUnusedPercent int, haveCutoff string, dirtyBytes int64) []tunable {
	mode := string(v.Spec.EffectiveMode())
	if want.Hold || (want.SafetyWritethrough && mode == string(fcv1.CacheModeWriteback)) {
		mode = string(fcv1.CacheModeWritethrough)
	}
	percent := v.Spec.EffectiveDirtyThresholdPercent()
	delay := writebackDelay
	rateMinimum := tunable{"writeback_rate_minimum", strconv.Itoa(kernelWritebackRateMinimum), exact(strconv.Itoa(kernelWritebackRateMinimum))}
	if want.Passing {
		// No pause between scans, in writeback mode, so commits still land on the SSD.
		delay = "0"
		if floor, paced := passPace(dirtyBytes, want.PaceOver, time.Until(want.PaceUntil)); paced {
			rateMinimum = paceTunable(floor)
		} else {
			// No target: no throttle, and writeback at idle I/O priority, below the database's
			// own I/O; bcache writes back as fast as the backing disk takes it.
			percent = 0
		}
	}
	cutoff := effectiveSequentialCutoff(v, cacheUnusedPercent, haveCutoff)
	return []tunable{
		{"label", v.Label(), exact(v.Label())},
		{"cache_mode", mode, choice(mode)},
		{"writeback_percent", strconv.Itoa(int(percent)), exact(strconv.Itoa(int(percent)))},
		{"writeback_delay", delay, exact(delay)},
		// Stopped writeback leaves dirty data on the SSD for ever.
		{"writeback_running", "1", exact("1")},
		rateMinimum,
		{"sequential_cutoff", strconv.FormatInt(cutoff, 10), func(have string) bool {
			// bcache prints "4.0M": one decimal of the unit, so compare at that precision.
			got, err := blockdev.ParseHumanSize(have)
			if err != nil {
				return false
			}
			return humanSize(got) == humanSize(cutoff)
		}},
		// What bcache does when the cache set fails: stop the device only if it has dirty data,
		// which would otherwise be served stale; a clean one keeps serving from the backing disk.
		{"stop_when_cache_set_failed", "auto", choice("auto")},
		// The kernel's default, set so that a host's own tuning cannot change it unseen: after 64
		// backing I/O errors bcache stops the device, and dirty data stays on the cache.
		{"io_error_limit", backingIOErrorLimit, exact(backingIOErrorLimit)},
	}
}

// backingIOErrorLimit and cacheIOErrorLimit are the kernel's defaults, chosen on purpose: a failing
// SSD is given up after a few errors (its clean data can be read from the backing disk), a failing
// backing disk after more (nothing else holds its data).
const (
	backingIOErrorLimit = "64"
	cacheIOErrorLimit   = "8"
)

// The kernel's congestion thresholds (bcache's cache_set_alloc), for cacheCongestionBypass Kernel.
const (
	kernelCongestedReadUsec  = "2000"
	kernelCongestedWriteUsec = "20000"
)

// cacheTunableSteps set each of cacheTunables that the cache device's knobs (have) do not match
// yet: a volume's own cache set or a pool's.
func cacheTunableSteps(cachePart string, have map[string]string, policy fcv1.ReplacementPolicy, bypass fcv1.CongestionBypass) []Step {
	var steps []Step
	for _, t := range cacheTunables(policy, bypass) {
		if !t.matches(have[t.name]) {
			steps = append(steps, Step{Kind: StepSetCacheTunable, Device: cachePart, Tunable: t.name, Value: t.value, From: have[t.name]})
		}
	}
	return steps
}

// cacheTunables are the cache device's and its cache set's knobs, with the replacement policy
// and the congestion bypass the volume or the pool wants.
func cacheTunables(policy fcv1.ReplacementPolicy, bypass fcv1.CongestionBypass) []tunable {
	readUsec, writeUsec := "0", "0"
	if bypass == fcv1.CongestionBypassKernel {
		readUsec, writeUsec = kernelCongestedReadUsec, kernelCongestedWriteUsec
	}
	return []tunable{
		{"cache_replacement_policy", string(policy), choice(string(policy))},
		// A failed cache set is unregistered, never a kernel panic: one volume's SSD must not take
		// the node and its other volumes down.
		{"set/errors", "unregister", choice("unregister")},
		{"set/io_error_limit", cacheIOErrorLimit, exact(cacheIOErrorLimit)},
		// bcache's copying garbage collector stays off, as the kernel leaves it: it moves dirty
		// extents to other places on the cache, and a pass that reads where the extents dirty at
		// its start lie (passSwept) would take one moved for one written back. A kernel without
		// the knob has nothing to set.
		{"set/internal/copy_gc_enabled", "0", exactOrAbsent("0")},
		// While the cache's average latency is over a threshold bcache sends I/O to the backing
		// disk instead; 0 turns that off. A kernel without the knobs has no such bypass.
		{"set/congested_read_threshold_us", readUsec, exactOrAbsent(readUsec)},
		{"set/congested_write_threshold_us", writeUsec, exactOrAbsent(writeUsec)},
	}
}

func exact(value string) func(string) bool {
	return func(have string) bool { return have == value }
}

// exactOrAbsent also matches a knob the kernel does not have: there is nothing to set.
func exactOrAbsent(value string) func(string) bool {
	return func(have string) bool { return have == value || have == "" }
}

// choice matches a sysfs list such as "[auto] always" whose active entry is value.
func choice(value string) func(string) bool {
	return func(have string) bool { a, _ := blockdev.ActiveChoice(have); return a == value }
}

// humanSize prints bytes the way bcache does (bch_hprint), for comparisons at its precision.
func humanSize(v int64) string {
	const units = "?kMGTPEZY"
	u, q, t := 0, v, int64(0)
	for {
		u++
		t = q & 1023
		q >>= 10
		if q < 1000 {
			break
		}
	}
	return fmt.Sprintf("%d.%d%c", q, t*10/1024, units[u])
}

func wipeConsent(v Volume) fcv1.WipeSpec {
	if v.Spec.Wipe == nil {
		return fcv1.WipeSpec{}
	}
	return *v.Spec.Wipe
}

// describe says what a device carries, for refusals.
func describe(sigs []blockdev.Signature, partitions []string) string {
	var what []string
	for _, s := range sigs {
		kind := s.Type
		if s.Usage != "" {
			kind += " " + s.Usage
		}
		if s.Label != "" {
			kind += fmt.Sprintf(" labelled %q", s.Label)
		}
		what = append(what, kind)
	}
	if len(partitions) > 0 {
		what = append(what, fmt.Sprintf("partitions %s", strings.Join(partitions, ", ")))
	}
	if len(what) == 0 {
		return "data"
	}
	return strings.Join(slices.Compact(what), ", ")
}

// readLink returns where a symlink points, or "" when it does not exist.
func readLink(path string) string {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	return target
}
