package engine

import (
	"context"
	"fmt"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// Observation is the host state that matters to one volume, read fresh before every step.
type Observation struct {
	RootDisks []string

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

	Backing       blockdev.Device
	BackingSigs   []blockdev.Signature
	BackingMounts []string
	BackingSB     *blockdev.SuperBlock
	BackingReg    *blockdev.BackingRegistration

	// Knobs are the bcache device's tunables as the kernel reports them, when it runs.
	Knobs map[string]string
	// CacheKnobs are the cache device's tunables (replacement policy).
	CacheKnobs map[string]string
	// StableTarget is where the volume's stable link points now ("" when it does not exist).
	StableTarget string
}

// backingKnobs are the backing device's tunables the engine manages.
var backingKnobs = []string{"cache_mode", "writeback_percent", "writeback_delay", "writeback_running", "sequential_cutoff", "state", "dirty_data", "label"}

// Observe reads what the kernel and the disks say about the volume's devices.
func (e *Engine) Observe(ctx context.Context, v Volume) (*Observation, error) {
	o := &Observation{}
	var err error
	if o.RootDisks, err = blockdev.RootDisks(); err != nil {
		return nil, err
	}
	if o.Cache, err = blockdev.Inspect(v.Spec.CacheDevice.Path); err != nil {
		return nil, fmt.Errorf("cacheDevice.path: %w", err)
	}
	if o.Backing, err = e.backingDevice(ctx, v); err != nil {
		return nil, err
	}
	if o.CacheMounts, err = blockdev.MountedAt(o.Cache); err != nil {
		return nil, err
	}

	if o.CacheSigs, err = e.Run.Signatures(ctx, o.Cache.DevPath); err != nil {
		return nil, err
	}
	if o.BackingSigs, err = e.Run.Signatures(ctx, o.Backing.DevPath); err != nil {
		return nil, err
	}

	if hasType(o.CacheSigs, "gpt") {
		// From the table on the disk: the kernel's copy lacks the name when it learnt of the
		// partition through partx, and lacks the partition when a run died before telling it.
		if o.OnDiskPartName, err = e.Run.FirstPartitionName(ctx, o.Cache.DevPath); err != nil {
			return nil, err
		}
	}
	if len(o.Cache.Partitions) > 0 {
		part, err := blockdev.InspectName(o.Cache.Partitions[0])
		if err != nil {
			return nil, err
		}
		o.CachePart = &part
		o.CachePartName = o.OnDiskPartName
		if o.CachePartSigs, err = e.Run.Signatures(ctx, part.DevPath); err != nil {
			return nil, err
		}
		if hasType(o.CachePartSigs, "bcache") {
			sb, err := e.Run.SuperShow(ctx, part.DevPath)
			if err != nil {
				return nil, err
			}
			o.CacheSB = &sb
		}
		if o.CacheReg, err = blockdev.RegisteredCache(part.Name); err != nil {
			return nil, err
		}
		if o.CacheReg != nil {
			o.CacheKnobs = map[string]string{}
			dir := cacheKnobDir(part.Name)
			if val, err := blockdev.Knob(dir, "cache_replacement_policy"); err == nil {
				o.CacheKnobs["cache_replacement_policy"] = val
			}
		}
	}

	if hasType(o.BackingSigs, "bcache") {
		sb, err := e.Run.SuperShow(ctx, o.Backing.DevPath)
		if err != nil {
			return nil, err
		}
		o.BackingSB = &sb
	}
	if o.BackingReg, err = blockdev.RegisteredBacking(o.Backing.Name); err != nil {
		return nil, err
	}
	ownDevice := ""
	if o.BackingReg != nil {
		ownDevice = o.BackingReg.Device
	}
	if o.BackingMounts, err = blockdev.MountedAt(o.Backing, ownDevice); err != nil {
		return nil, err
	}
	if o.BackingReg != nil {
		o.Knobs = map[string]string{}
		for _, k := range backingKnobs {
			if val, err := blockdev.Knob(o.BackingReg.Sysfs, k); err == nil {
				o.Knobs[k] = val
			}
		}
	}
	o.StableTarget = readLink(v.StablePath())
	return o, nil
}

// backingDevice resolves the backing device: a local path, or the LUN of a logged-in session.
func (e *Engine) backingDevice(ctx context.Context, v Volume) (blockdev.Device, error) {
	if v.Spec.BackingDevice.ISCSI != nil {
		return e.iscsiBacking(ctx, v)
	}
	d, err := blockdev.Inspect(v.Spec.BackingDevice.Path)
	if err != nil {
		return d, fmt.Errorf("backingDevice.path: %w", err)
	}
	return d, nil
}

// ours says which devices carry this volume's marks: a cache partition named for it, and a
// backing superblock with its label, or with no label yet and the cache partition's set (a run
// stopped between make-bcache and writing the label). Plan, Check and Teardown all ask it.
func ours(v Volume, o *Observation) (cache, backing bool) {
	label := v.Label()
	cache = o.CachePart != nil && o.CachePartName == label
	set := ""
	if cache && o.CacheSB != nil && o.CacheSB.IsCache() {
		set = o.CacheSB.SetUUID()
	}
	backing = o.BackingSB != nil && !o.BackingSB.IsCache() &&
		(o.BackingSB.Label() == label || (o.BackingSB.Label() == "" && set != "" && o.BackingSB.SetUUID() == set))
	return cache, backing
}

// Mode is the spec's cache mode, defaulted as the CRD does.
func (v Volume) Mode() fcv1.CacheMode {
	if v.Spec.Mode == "" {
		return fcv1.CacheModeWriteback
	}
	return v.Spec.Mode
}

// replacementPolicyOf is the spec's replacement policy, defaulted as the CRD does.
func replacementPolicyOf(v Volume) string {
	if v.Spec.ReplacementPolicy == "" {
		return string(fcv1.ReplacementPolicyLRU)
	}
	return string(v.Spec.ReplacementPolicy)
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
