package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// Pool is one FlashCachePool as the engine sees it: the SSD becomes one cache set and the slow
// disks one LVM volume group, from which volumes are carved.
type Pool struct {
	Name string
	Spec fcv1.FlashCachePoolSpec
}

// PoolOf is the engine's view of a FlashCachePool.
func PoolOf(p *fcv1.FlashCachePool) Pool { return Pool{Name: p.Name, Spec: p.Spec} }

// Label is the GPT name of the pool's cache partition. It cannot be a volume's label: those
// start with "fc-", and "fcp-" does not.
func (p Pool) Label() string { return label("fcp-", p.Name) }

func (p Pool) cacheLayout() cacheLayout {
	return cacheLayout{overProvisionPercent: int64(p.Spec.EffectiveOverProvisionPercent()), bucketBytes: p.Spec.EffectiveBucketSizeBytes()}
}

// VolumeGroup is the name of the pool's LVM volume group.
func (p Pool) VolumeGroup() string { return "fcp-" + p.Name }

// Tag marks the volume group as the pool's: a group of the same name without it is refused.
func (p Pool) Tag() string { return "flashcache.io/pool=" + p.Name }

// PoolExtentBytes is the extent of a pool's volume group (vgcreate's default): a carved volume's
// logical volume is a whole number of extents.
const PoolExtentBytes = 4 << 20

// CarvedBackingBytes is the size of the logical volume behind a carved volume of size bytes:
// bcache's data offset (its superblock and the safety check's scratch region) before the data,
// rounded up to whole extents, so that the volume's device holds at least the size asked for.
func CarvedBackingBytes(size int64) int64 {
	want := size + backingDataOffsetBytes
	return (want + PoolExtentBytes - 1) / PoolExtentBytes * PoolExtentBytes
}

// LargestCarvedVolume is the largest size, in whole extents, whose logical volume fits in free
// bytes of a pool.
func LargestCarvedVolume(free int64) int64 {
	extents := free / PoolExtentBytes * PoolExtentBytes
	return max(0, (extents-backingDataOffsetBytes)/PoolExtentBytes*PoolExtentBytes)
}

// Steps of a pool's slow disks.
const (
	StepCreatePV StepKind = "create-physical-volume"
	StepCreateVG StepKind = "create-volume-group"
	StepExtendVG StepKind = "extend-volume-group"
)

// Refusal reasons of pools.
const (
	ReasonForeignVolumeGroup  = "InAnotherVolumeGroup"
	ReasonBackingNotWholeDisk = "BackingDeviceNotWholeDisk"
	ReasonPoolInUse           = "PoolInUse"
)

// PoolDisk is one of the pool's slow disks as the host shows it.
type PoolDisk struct {
	Device blockdev.Device
	Sigs   []blockdev.Signature
	Mounts []string
	// PV is the disk's LVM physical volume, when it is one.
	PV *blockdev.PhysicalVolume
}

// PoolObservation is the host state that matters to one pool, read fresh before every step.
type PoolObservation struct {
	RootDisks []string
	CacheSide
	// Backing are the spec's backing devices, in its order.
	Backing []PoolDisk
	// VG is the pool's volume group, when it exists; LVs are its logical volumes, and Members
	// its physical volumes (the spec's disks, and any a spec no longer names).
	VG      *blockdev.VolumeGroup
	LVs     []blockdev.LogicalVolume
	Members []string
}

// ObservePool reads what the kernel, the disks and LVM say about the pool's devices.
func (e *Engine) ObservePool(ctx context.Context, p Pool) (*PoolObservation, error) {
	o := &PoolObservation{CacheSide: CacheSide{CacheUnusedPercent: -1}}
	var err error
	if o.RootDisks, err = blockdev.RootDisks(); err != nil {
		return nil, err
	}
	if o.Cache, err = blockdev.Inspect(p.Spec.CacheDevice.Path); err != nil {
		if errors.Is(err, blockdev.ErrNotFound) {
			return nil, poolCacheLost(p, fcv1.ReasonCacheDeviceLost, "is gone")
		}
		return nil, fmt.Errorf("cacheDevice.path: %w", err)
	}
	if err := blockdev.ReadProbe(o.Cache.DevPath); errors.Is(err, blockdev.ErrUnreadable) {
		return nil, poolCacheLost(p, fcv1.ReasonCacheDeviceErrors, "is failing (reading it returns I/O errors)")
	}
	if err := e.observeCacheSide(ctx, &o.CacheSide); err != nil {
		return nil, err
	}
	pvs, err := e.Run.PhysicalVolumes(ctx)
	if err != nil {
		return nil, err
	}
	for _, pv := range pvs {
		if pv.VG == p.VolumeGroup() {
			o.Members = append(o.Members, pv.Path)
		}
	}
	for i, b := range p.Spec.BackingDevices {
		var d PoolDisk
		if d.Device, err = blockdev.Inspect(b.Path); err != nil {
			return nil, fmt.Errorf("backingDevices[%d].path: %w", i, err)
		}
		if d.Sigs, err = e.Run.Signatures(ctx, d.Device.DevPath); err != nil {
			return nil, err
		}
		if d.Mounts, err = blockdev.MountedAt(d.Device); err != nil {
			return nil, err
		}
		for _, pv := range pvs {
			if pv.Path == d.Device.DevPath {
				d.PV = &pv
			}
		}
		o.Backing = append(o.Backing, d)
	}
	vgs, err := e.Run.VolumeGroups(ctx, p.VolumeGroup())
	if err != nil {
		return nil, err
	}
	if len(vgs) == 1 {
		o.VG = &vgs[0]
		if o.LVs, err = e.Run.LogicalVolumes(ctx, p.VolumeGroup()); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// poolCacheLost reports a pool whose SSD is gone or failing. What that means differs per volume
// (whether it had dirty data), so each carved volume's status says it.
func poolCacheLost(p Pool, reason, what string) error {
	return &Refusal{Reason: reason, Field: "cacheDevice.path",
		Message: fmt.Sprintf("%s %s: every volume carved from pool %s lost its cache, and each one's status says whether dirty data was on it. "+
			"Clean volumes serve from their logical volumes, uncached; dirty ones wait for the device to come back. "+
			"To replace it, name a new blank device here: it becomes the pool's cache set, and each clean volume is attached to it",
			p.Spec.CacheDevice.Path, what, p.Name)}
}

// cacheOurs says whether the cache partition is the pool's: named with its label.
func (o *PoolObservation) cacheOurs(p Pool) bool {
	return o.CachePart != nil && o.CachePartName == p.Label()
}

// PlanPool lists the steps that take the host from o to the pool p. It changes nothing. A
// refusal comes back as a *Refusal.
func PlanPool(p Pool, o *PoolObservation) ([]Step, error) {
	if err := guardPool(p, o); err != nil {
		return nil, err
	}
	var steps []Step
	wipe := fcv1.PoolWipeSpec{}
	if p.Spec.Wipe != nil {
		wipe = *p.Spec.Wipe
	}

	// The cache device: partitioned with its spare area, as for a volume on whole devices.
	partSteps, cacheSB, cachePart, err := planCachePartition(&o.CacheSide, p.Label(), o.cacheOurs(p), wipe.CacheDevice, p.cacheLayout(), "pool")
	if err != nil {
		return nil, err
	}
	steps = append(steps, partSteps...)
	if !cacheSB {
		steps = append(steps, Step{Kind: StepMakeCache, Device: cachePart})
	}
	if o.CacheReg == nil || !cacheSB {
		steps = append(steps, Step{Kind: StepRegisterCache, Device: cachePart})
	}
	steps = append(steps, cacheTunableSteps(cachePart, o.CacheKnobs, p.Spec.EffectiveReplacementPolicy(), p.Spec.EffectiveCacheCongestionBypass())...)

	// The slow disks: each one a physical volume of the pool's volume group.
	vg := p.VolumeGroup()
	if o.VG != nil && !o.VG.HasTag(p.Tag()) {
		return nil, &Refusal{Reason: ReasonForeignVolumeGroup, Field: "metadata.name",
			Message: fmt.Sprintf("a volume group %s exists and is not this pool's (no tag %s); rename the pool or remove that group", vg, p.Tag())}
	}
	var joining []string
	for i, d := range o.Backing {
		field := fmt.Sprintf("backingDevices[%d].path", i)
		switch {
		case d.PV != nil && d.PV.VG == vg:
			continue
		case d.PV != nil && d.PV.VG != "":
			return nil, &Refusal{Reason: ReasonForeignVolumeGroup, Field: field,
				Message: fmt.Sprintf("%s belongs to volume group %s", d.Device.DevPath, d.PV.VG)}
		case d.PV != nil:
			// A physical volume in no group holds no data: a run stopped after pvcreate.
		case len(d.Sigs) > 0 && !wipe.BackingDevices:
			return nil, &Refusal{Reason: ReasonCarriesData, Field: field,
				Message: fmt.Sprintf("%s carries %s; set spec.wipe.backingDevices to erase it and every byte of data on it", d.Device.DevPath, describe(d.Sigs, d.Device.Partitions))}
		case len(d.Sigs) > 0:
			steps = append(steps, Step{Kind: StepWipeBacking, Device: d.Device.DevPath}, Step{Kind: StepCreatePV, Device: d.Device.DevPath})
		default:
			steps = append(steps, Step{Kind: StepCreatePV, Device: d.Device.DevPath})
		}
		joining = append(joining, d.Device.DevPath)
	}
	switch {
	case o.VG == nil:
		steps = append(steps, Step{Kind: StepCreateVG, Device: vg, Value: strings.Join(joining, " ")})
	case len(joining) > 0:
		for _, d := range joining {
			steps = append(steps, Step{Kind: StepExtendVG, Device: vg, Value: d})
		}
	}
	// Every volume carved from a disk forwards its commits' flushes to that disk's queue.
	for _, d := range o.Backing {
		if s := backingWBTStep(p.Spec.EffectiveBackingWritebackThrottling(), d.Device); s != nil {
			steps = append(steps, *s)
		}
	}
	return steps, nil
}

// guardPool refuses devices the engine must never touch, whatever the spec says.
func guardPool(p Pool, o *PoolObservation) error {
	type named struct {
		field  string
		dev    blockdev.Device
		mounts []string
	}
	all := []named{{"cacheDevice.path", o.Cache, o.CacheMounts}}
	for i, d := range o.Backing {
		all = append(all, named{fmt.Sprintf("backingDevices[%d].path", i), d.Device, d.Mounts})
	}
	disks := map[string]string{}
	for _, d := range all {
		if slices.Contains(o.RootDisks, d.dev.Disk()) {
			return &Refusal{Reason: ReasonRootDisk, Field: d.field,
				Message: fmt.Sprintf("%s is on %s, the disk of the root filesystem", d.dev.Path, d.dev.Disk())}
		}
		if len(d.mounts) > 0 {
			return &Refusal{Reason: ReasonMounted, Field: d.field,
				Message: fmt.Sprintf("%s is in use: mounted at %s", d.dev.Path, strings.Join(d.mounts, ", "))}
		}
		if d.dev.IsPartition() {
			reason := ReasonNotWholeDisk
			if d.field != "cacheDevice.path" {
				reason = ReasonBackingNotWholeDisk
			}
			return &Refusal{Reason: reason, Field: d.field,
				Message: fmt.Sprintf("%s is a partition of %s; a pool takes whole disks", d.dev.Path, d.dev.Parent)}
		}
		if other, ok := disks[d.dev.Disk()]; ok {
			return &Refusal{Reason: ReasonSameDisk, Field: d.field,
				Message: fmt.Sprintf("%s is the disk %s, already named by %s", d.dev.Path, d.dev.Disk(), other)}
		}
		disks[d.dev.Disk()] = d.field
	}
	if len(o.Cache.Holders) > 0 {
		return &Refusal{Reason: ReasonHeld, Field: "cacheDevice.path",
			Message: fmt.Sprintf("%s is held by %s", o.Cache.Path, strings.Join(o.Cache.Holders, ", "))}
	}
	// The pool's own cache partition is held by its volumes' bcache devices; any other is not
	// the pool's to take.
	if o.CachePart != nil && !o.cacheOurs(p) && len(o.CachePart.Holders) > 0 {
		return &Refusal{Reason: ReasonHeld, Field: "cacheDevice.path",
			Message: fmt.Sprintf("%s is held by %s", o.CachePart.DevPath, strings.Join(o.CachePart.Holders, ", "))}
	}
	for i, d := range o.Backing {
		// A member's holders are the device-mapper devices of the pool's logical volumes.
		if len(d.Device.Holders) > 0 && (d.PV == nil || d.PV.VG != p.VolumeGroup()) {
			return &Refusal{Reason: ReasonHeld, Field: fmt.Sprintf("backingDevices[%d].path", i),
				Message: fmt.Sprintf("%s is held by %s", d.Device.Path, strings.Join(d.Device.Holders, ", "))}
		}
	}
	if o.cacheOurs(p) {
		_, end, err := cachePartition(o.Cache.SizeBytes, p.cacheLayout())
		if err == nil && o.CachePart.SizeBytes > (end+1)*sectorSize {
			return &Refusal{Reason: ReasonPartitionMismatch, Field: "cacheDevice.overProvisionPercent",
				Message: fmt.Sprintf("%s is larger than this over-provisioning allows; it was partitioned with another value", o.CachePart.DevPath)}
		}
	}
	return nil
}

// PoolStatus is what the host says of a built pool.
type PoolStatus struct {
	CacheSetUUID       string `json:"cacheSetUUID,omitempty"`
	VolumeGroup        string `json:"volumeGroup,omitempty"`
	CacheCapacityBytes int64  `json:"cacheCapacityBytes"`
	CapacityBytes      int64  `json:"capacityBytes"`
	AllocatableBytes   int64  `json:"allocatableBytes"`
	Volumes            int    `json:"volumes"`
}

func poolStatusOf(o *PoolObservation) PoolStatus {
	var s PoolStatus
	if o.CacheReg != nil {
		s.CacheSetUUID = o.CacheReg.SetUUID
	}
	if o.CachePart != nil {
		s.CacheCapacityBytes = o.CachePart.SizeBytes
	}
	if o.VG != nil {
		s.VolumeGroup, s.CapacityBytes, s.AllocatableBytes, s.Volumes = o.VG.Name, o.VG.SizeBytes, o.VG.FreeBytes, len(o.LVs)
	}
	return s
}

// PoolResult is what ApplyPool did and found.
type PoolResult struct {
	Changed bool       `json:"changed"`
	Steps   []Step     `json:"steps"`
	Status  PoolStatus `json:"status"`
}

// ApplyPool builds or adopts the pool, one step at a time, observing again after each step. Run
// again after an interruption, it continues where the host is.
func (e *Engine) ApplyPool(ctx context.Context, p Pool) (*PoolResult, error) {
	res := &PoolResult{Steps: []Step{}}
	for range maxRounds {
		o, err := e.ObservePool(ctx, p)
		if err != nil {
			return res, err
		}
		steps, err := PlanPool(p, o)
		if err != nil {
			return res, err
		}
		if len(steps) == 0 {
			res.Status = poolStatusOf(o)
			return res, nil
		}
		if n := len(res.Steps); n > 0 && res.Steps[n-1] == steps[0] {
			return res, fmt.Errorf("%s did not take effect: the host still needs it after running it", steps[0])
		}
		e.Log.Info("applying", "pool", p.Name, "step", steps[0].String())
		if err := e.executePool(ctx, p, o, steps[0]); err != nil {
			return res, fmt.Errorf("%s: %w", steps[0].Kind, err)
		}
		res.Changed = true
		res.Steps = append(res.Steps, steps[0])
	}
	return res, fmt.Errorf("pool %s did not converge in %d steps", p.Name, maxRounds)
}

// PoolAsBuilt observes the pool and says whether it stands as its spec asks, with its status
// when it does. Anything else (a step to take, a refusal, an error) is for ApplyPool to find
// again and act on or report, under the pool's devices taken alone.
func (e *Engine) PoolAsBuilt(ctx context.Context, p Pool) (*PoolStatus, bool) {
	o, err := e.ObservePool(ctx, p)
	if err != nil {
		return nil, false
	}
	if steps, err := PlanPool(p, o); err != nil || len(steps) > 0 {
		return nil, false
	}
	s := poolStatusOf(o)
	return &s, true
}

// PlanPoolOnly observes and plans without changing anything.
func (e *Engine) PlanPoolOnly(ctx context.Context, p Pool) ([]Step, error) {
	o, err := e.ObservePool(ctx, p)
	if err != nil {
		return nil, err
	}
	return PlanPool(p, o)
}

func (e *Engine) executePool(ctx context.Context, p Pool, o *PoolObservation, s Step) error {
	switch s.Kind {
	case StepWipeCache, StepPartitionCache, StepRereadTable, StepRegisterCache, StepSetCacheTunable:
		return e.executeCacheStep(ctx, &o.CacheSide, s)
	case StepMakeCache:
		if o.CachePart == nil {
			return fmt.Errorf("no partition on %s", o.Cache.DevPath)
		}
		return e.Run.MakeBcache(ctx, blockdev.MakeBcache{CacheDevPath: o.CachePart.DevPath, ReplacementPolicy: makeBcachePolicy(p.Spec.EffectiveReplacementPolicy()),
			BucketBytes: p.cacheLayout().bucketBytes})
	case StepWipeBacking:
		for _, d := range o.Backing {
			if d.Device.DevPath == s.Device {
				return e.wipeAll(ctx, d.Device)
			}
		}
		return fmt.Errorf("%s is not a backing device of pool %s", s.Device, p.Name)
	case StepCreatePV:
		return e.Run.CreatePhysicalVolume(ctx, s.Device)
	case StepCreateVG:
		return e.Run.CreateVolumeGroup(ctx, s.Device, p.Tag(), strings.Fields(s.Value)...)
	case StepExtendVG:
		return e.Run.ExtendVolumeGroup(ctx, s.Device, s.Value)
	case StepBackingWBT:
		return setBackingWBT(s)
	}
	return fmt.Errorf("unknown step %q", s.Kind)
}

// TeardownPool removes an empty pool from the host: the cache set unregistered and its partition
// table erased, the volume group removed and the disks' LVM labels erased. A pool that still
// has volumes carved from it is refused, as are devices that are not the pool's.
func (e *Engine) TeardownPool(ctx context.Context, p Pool) (*TeardownResult, error) {
	res := &TeardownResult{Steps: []string{}}
	o, err := e.ObservePool(ctx, p)
	if err != nil {
		return res, err
	}
	if len(o.LVs) > 0 {
		var names []string
		for _, lv := range o.LVs {
			names = append(names, lv.Name)
		}
		return res, &Refusal{Reason: ReasonPoolInUse, Field: "metadata.name",
			Message: fmt.Sprintf("volumes are still carved from the pool (%s in %s): delete them first", strings.Join(names, ", "), p.VolumeGroup())}
	}
	cacheOurs := o.cacheOurs(p)
	if cacheOurs && len(o.CachePart.Holders) > 0 {
		return res, &Refusal{Reason: ReasonPoolInUse, Field: "metadata.name",
			Message: fmt.Sprintf("%s still caches %s", o.CachePart.DevPath, strings.Join(o.CachePart.Holders, ", "))}
	}
	if cacheOurs && o.CacheReg != nil {
		if err := e.unregisterCacheSet(ctx, o.CacheReg.SetUUID); err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, "unregistered cache set "+o.CacheReg.SetUUID)
	}
	if cacheOurs {
		steps, err := e.eraseCachePartition(ctx, &o.CacheSide)
		res.Steps = append(res.Steps, steps...)
		if err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, "erased the cache partition and partition table of "+o.Cache.DevPath)
	}
	if o.VG != nil && o.VG.HasTag(p.Tag()) {
		// Before the group goes: after it, nothing says which disks were the pool's. Its members,
		// not the spec's disks: the spec read at teardown may name fewer than the pool grew to.
		for _, pv := range o.Members {
			disk, err := blockdev.Inspect(pv)
			if errors.Is(err, blockdev.ErrNotFound) {
				continue // a disk gone has no queue to restore
			}
			if err != nil {
				return res, fmt.Errorf("physical volume %s of %s: %w", pv, o.VG.Name, err)
			}
			step, err := restoreBackingWBT(p.Spec.EffectiveBackingWritebackThrottling(), disk)
			if err != nil {
				return res, err
			}
			if step != "" {
				res.Steps = append(res.Steps, step)
			}
		}
		if err := e.Run.RemoveVolumeGroup(ctx, o.VG.Name); err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, "removed volume group "+o.VG.Name)
		for _, pv := range o.Members {
			if err := e.Run.RemovePhysicalVolume(ctx, pv); err != nil {
				return res, err
			}
			res.Steps = append(res.Steps, "erased the LVM label of "+pv)
		}
	}
	res.Changed = len(res.Steps) > 0
	return res, nil
}

// eraseCachePartition erases the bcache superblock on a cache partition and the partition table
// around it, and waits until the kernel has dropped the partition: a build that follows at once
// must not find it and refuse the disk as one that carries partitions.
// It returns the steps it took besides (a cache set registered again meanwhile and stopped).
func (e *Engine) eraseCachePartition(ctx context.Context, o *CacheSide) ([]string, error) {
	var steps []string
	err := e.whenReleased(ctx, "wipefs", func() error {
		// udev's rules register a cache device again when it changes, which brings its cache set
		// back after the unregister above. One that caches no backing device is unregistered
		// again; one that does is left alone, and wipefs fails on it.
		reg, err := blockdev.RegisteredCache(o.CachePart.Name)
		if err != nil {
			return err
		}
		if reg != nil {
			caching, err := blockdev.CachesBackingDevices(reg.SetUUID)
			if err != nil {
				return err
			}
			if !caching {
				if err := e.unregisterCacheSet(ctx, reg.SetUUID); err != nil {
					return err
				}
				if step := "unregistered cache set " + reg.SetUUID + " again, registered during teardown (by udev's rules)"; !slices.Contains(steps, step) {
					steps = append(steps, step)
				}
			}
		}
		return e.Run.WipeSignatures(ctx, o.CachePart.DevPath, false)
	})
	if err != nil {
		return steps, err
	}
	if err := e.whenReleased(ctx, "sgdisk", func() error { return e.Run.ZapPartitionTable(ctx, o.Cache.DevPath) }); err != nil {
		return steps, err
	}
	return steps, e.waitUntil(ctx, "the kernel to drop the partitions of "+o.Cache.DevPath, func() (bool, error) {
		d, err := blockdev.InspectName(o.Cache.Name)
		if err != nil || len(d.Partitions) == 0 {
			return err == nil, err
		}
		// sgdisk asks the kernel to reread the table, which fails while bcache still holds the
		// partition: telling it directly works once the holder is gone.
		_ = e.Run.ForgetPartitions(ctx, o.Cache.DevPath)
		return false, nil
	})
}

// PoolStatus observes a pool and reports what the host says of it.
func (e *Engine) PoolStatus(ctx context.Context, p Pool) (*PoolStatus, error) {
	o, err := e.ObservePool(ctx, p)
	if err != nil {
		return nil, err
	}
	s := poolStatusOf(o)
	return &s, nil
}
