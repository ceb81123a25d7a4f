package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// CacheSide is what the kernel and the disk say about a cache device: the SSD, its first
// partition and the cache set on it. A volume on whole devices and a pool observe it alike.
type CacheSide struct {
	Cache       blockdev.Device
	CacheSigs   []blockdev.Signature
	CacheMounts []string
	// CachePart is the cache disk's first partition, when there is one.
	CachePart *blockdev.Device
	// CachePartName is OnDiskPartName when the kernel knows the partition.
	CachePartName string
	CachePartSigs []blockdev.Signature
	// OnDiskPartName is the name of the first partition in the cache disk's GPT.
	OnDiskPartName string
	CacheSB        *blockdev.SuperBlock
	CacheReg       *blockdev.CacheRegistration
	// CacheKnobs are the cache device's tunables (replacement policy).
	CacheKnobs map[string]string
	// CacheUnusedPercent is the share of the registered cache device that holds no data; -1
	// when it is not registered or bcache did not say.
	CacheUnusedPercent int
}

// Observation is the host state that matters to one volume, read fresh before every step.
type Observation struct {
	RootDisks []string

	CacheSide

	Backing       blockdev.Device
	BackingSigs   []blockdev.Signature
	BackingMounts []string
	BackingSB     *blockdev.SuperBlock
	BackingReg    *blockdev.BackingRegistration

	// AttachedCacheAlive: the cache set the backing device is attached to still has its cache
	// device (a pulled or dead SSD leaves the set registered until bcache meets an I/O error).
	AttachedCacheAlive bool
	// Knobs are the bcache device's tunables as the kernel reports them, when it runs.
	Knobs map[string]string
	// StableTarget is where the volume's stable link points now ("" when it does not exist).
	StableTarget string

	// PoolVG and LV are a carved volume's pool's volume group and its own logical volume, when
	// they exist. Until its logical volume is active, a carved volume has no backing device.
	PoolVG *blockdev.VolumeGroup
	LV     *blockdev.LogicalVolume
	// BcacheSizeBytes is the running bcache device's size, and BcacheInUse says that something
	// has it: mounted, held by another device, or opened exclusively. A carved volume grows only
	// while it is not in use, since bcache takes a new size only at registration.
	BcacheSizeBytes int64
	BcacheInUse     bool
}

// backingMissing says a carved volume's logical volume is not there (yet) as a device.
func (o *Observation) backingMissing(v Volume) bool {
	return v.Carved() && (o.LV == nil || !o.LV.Active)
}

// backingKnobs are the backing device's tunables the engine manages.
var backingKnobs = []string{"cache_mode", "writeback_percent", "writeback_delay", "writeback_running", "writeback_rate_minimum", "sequential_cutoff", "state", "dirty_data", "label",
	"stop_when_cache_set_failed", "io_error_limit", "io_errors"}

// cacheKnobs are the cache device's tunables the engine manages; set/ is its cache set's folder.
var cacheKnobs = []string{"cache_replacement_policy", "set/errors", "set/io_error_limit", "set/internal/copy_gc_enabled",
	"set/congested_read_threshold_us", "set/congested_write_threshold_us", "io_errors"}

// backingKnobValues reads the tunables of a registered backing device; nil when it is not.
func backingKnobValues(reg *blockdev.BackingRegistration) map[string]string {
	if reg == nil {
		return nil
	}
	knobs := map[string]string{}
	for _, k := range backingKnobs {
		if val, err := blockdev.Knob(reg.Sysfs, k); err == nil {
			knobs[k] = val
		}
	}
	return knobs
}

// Observe reads what the kernel and the disks say about the volume's devices.
func (e *Engine) Observe(ctx context.Context, v Volume) (*Observation, error) {
	o, err := e.observe(ctx, v)
	var lost *CacheLostError
	if err != nil && !errors.As(err, &lost) {
		// A cache device that goes away while it is read fails whichever command read it first
		// (sfdisk, wipefs): that is a lost cache too, not a failed apply.
		if _, ierr := blockdev.Inspect(v.CachePath()); errors.Is(ierr, blockdev.ErrNotFound) {
			return nil, e.cacheLost(ctx, v, fmt.Errorf("%s: %w", v.cacheField(), ierr))
		}
	}
	return o, err
}

func (e *Engine) observe(ctx context.Context, v Volume) (*Observation, error) {
	o := &Observation{CacheSide: CacheSide{CacheUnusedPercent: -1}}
	var err error
	if o.RootDisks, err = blockdev.RootDisks(); err != nil {
		return nil, err
	}
	if v.Carved() && v.Pool == nil {
		return nil, fmt.Errorf("pool.name: volume %s is carved from pool %s, which the engine was not given", v.Name, v.Spec.Pool.Name)
	}
	if o.Cache, err = blockdev.Inspect(v.CachePath()); err != nil {
		err = fmt.Errorf("%s: %w", v.cacheField(), err)
		if errors.Is(err, blockdev.ErrNotFound) {
			return nil, e.cacheLost(ctx, v, err)
		}
		return nil, err
	}
	if err := blockdev.ReadProbe(o.Cache.DevPath); errors.Is(err, blockdev.ErrUnreadable) {
		// Answering but unreadable is a lost cache too; the message says which.
		return nil, e.cacheLost(ctx, v, fmt.Errorf("%s: %w", v.cacheField(), err))
	}
	if v.Carved() {
		if err := e.observeLogicalVolume(ctx, v, o); err != nil {
			return nil, err
		}
		if o.backingMissing(v) {
			if err := e.observeCacheSide(ctx, &o.CacheSide); err != nil {
				return nil, err
			}
			o.StableTarget = readLink(v.StablePath())
			return o, nil
		}
	}
	if o.Backing, err = e.backingDevice(ctx, v); err != nil {
		return nil, err
	}
	if o.Backing.Offline() {
		return nil, e.backingOffline(v, o)
	}
	if err := e.observeCacheSide(ctx, &o.CacheSide); err != nil {
		return nil, err
	}
	if o.BackingSigs, err = e.Run.Signatures(ctx, o.Backing.DevPath); err != nil {
		return nil, err
	}
	if err := e.observeBacking(ctx, v, o); err != nil {
		return nil, err
	}
	return o, nil
}

// observeCacheSide reads the signatures, partition, superblock, registration and tunables of a
// cache device that o.Cache has already found.
func (e *Engine) observeCacheSide(ctx context.Context, o *CacheSide) error {
	var err error
	if o.CacheMounts, err = blockdev.MountedAt(o.Cache); err != nil {
		return err
	}
	if o.CacheSigs, err = e.Run.Signatures(ctx, o.Cache.DevPath); err != nil {
		return err
	}
	if hasType(o.CacheSigs, "gpt") {
		// From the table on the disk: the kernel's copy lacks the name when it learnt of the
		// partition through partx, and lacks the partition when a run died before telling it.
		if o.OnDiskPartName, err = e.Run.FirstPartitionName(ctx, o.Cache.DevPath); err != nil {
			return err
		}
	}
	if len(o.Cache.Partitions) > 0 {
		part, err := blockdev.InspectName(o.Cache.Partitions[0])
		if err != nil {
			return err
		}
		o.CachePart = &part
		o.CachePartName = o.OnDiskPartName
		if o.CachePartSigs, err = e.Run.Signatures(ctx, part.DevPath); err != nil {
			return err
		}
		if hasType(o.CachePartSigs, "bcache") {
			sb, err := e.Run.SuperShow(ctx, part.DevPath)
			if err != nil {
				return err
			}
			o.CacheSB = &sb
		}
		if o.CacheReg, err = blockdev.RegisteredCache(part.Name); err != nil {
			return err
		}
		if o.CacheReg != nil {
			o.CacheKnobs = map[string]string{}
			dir := cacheKnobDir(part.Name)
			for _, k := range cacheKnobs {
				if val, err := blockdev.Knob(dir, k); err == nil {
					o.CacheKnobs[k] = val
				}
			}
			if stats, err := blockdev.Knob(dir, "priority_stats"); err == nil {
				if unused, err := blockdev.ParseUnusedPercent(stats); err == nil {
					o.CacheUnusedPercent = unused
				}
			}
		}
	}
	return nil
}

// observeBacking fills in the backing device's superblock, registration, mounts and tunables;
// o.Backing and o.BackingSigs are known.
func (e *Engine) observeBacking(ctx context.Context, v Volume, o *Observation) error {
	var err error
	if hasType(o.BackingSigs, "bcache") {
		sb, err := e.Run.SuperShow(ctx, o.Backing.DevPath)
		if err != nil {
			return err
		}
		o.BackingSB = &sb
	}
	if o.BackingReg, err = blockdev.RegisteredBacking(o.Backing.Name); err != nil {
		return err
	}
	ownDevice := ""
	if o.BackingReg != nil {
		ownDevice = o.BackingReg.Device
	}
	if o.BackingMounts, err = blockdev.MountedAt(o.Backing, ownDevice); err != nil {
		return err
	}
	if o.BackingReg != nil && o.BackingReg.AttachedSet != "" {
		_, err := os.Stat(filepath.Join(blockdev.SysFsBcache, o.BackingReg.AttachedSet, "cache0"))
		o.AttachedCacheAlive = err == nil
	}
	o.Knobs = backingKnobValues(o.BackingReg)
	o.StableTarget = readLink(v.StablePath())
	if v.Carved() && o.BackingReg != nil && o.BackingReg.Device != "" {
		if d, err := blockdev.InspectName(o.BackingReg.Device); err == nil {
			o.BcacheSizeBytes = d.SizeBytes
			o.BcacheInUse = len(d.Holders) > 0 || mountedDevice(d.Name) || blockdev.OpenedExclusively(d.DevPath)
		}
	}
	return nil
}

// observeLogicalVolume finds a carved volume's pool's volume group and its logical volume in it.
func (e *Engine) observeLogicalVolume(ctx context.Context, v Volume, o *Observation) error {
	vgs, err := e.Run.VolumeGroups(ctx, v.Pool.VolumeGroup())
	if err != nil || len(vgs) != 1 {
		return err
	}
	o.PoolVG = &vgs[0]
	lvs, err := e.Run.LogicalVolumes(ctx, v.Pool.VolumeGroup())
	if err != nil {
		return err
	}
	for _, lv := range lvs {
		if lv.Name == v.LogicalVolume() {
			o.LV = &lv
		}
	}
	return nil
}

// backingDevice resolves the backing device: a local path, a carved volume's logical volume, or
// the LUN of a logged-in session.
func (e *Engine) backingDevice(ctx context.Context, v Volume) (blockdev.Device, error) {
	if v.Spec.BackingISCSI() != nil {
		return e.iscsiBacking(ctx, v)
	}
	d, err := blockdev.Inspect(v.BackingPath())
	if err != nil {
		field := "backingDevice.path"
		if v.Carved() {
			field = "pool.name"
		}
		return d, fmt.Errorf("%s: %w", field, err)
	}
	return d, nil
}

// ours says which devices carry this volume's marks: a cache partition named for it, and a
// backing superblock with its label, or with no label yet and the cache partition's set (a run
// stopped between make-bcache and writing the label). Plan, Check and Teardown all ask it.
func ours(v Volume, o *Observation) (cache, backing bool) {
	label := v.Label()
	cache = o.CachePart != nil && o.CachePartName == v.cacheLabel()
	set := ""
	if cache && o.CacheSB != nil && o.CacheSB.IsCache() {
		set = o.CacheSB.SetUUID()
	}
	backing = o.BackingSB != nil && !o.BackingSB.IsCache() &&
		(o.BackingSB.Label() == label || (o.BackingSB.Label() == "" && set != "" && o.BackingSB.SetUUID() == set))
	return cache, backing
}

func hasType(sigs []blockdev.Signature, typ string) bool {
	for _, s := range sigs {
		if s.Type == typ {
			return true
		}
	}
	return false
}

func cacheKnobDir(partName string) string {
	return blockdev.SysClassBlock + "/" + partName + "/bcache"
}
