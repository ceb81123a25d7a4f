package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// TeardownResult is what teardown did.
type TeardownResult struct {
	Changed bool         `json:"changed"`
	Flush   *FlushResult `json:"flush,omitempty"`
	Steps   []string     `json:"steps"`
}

// Teardown removes the volume from the host in the only safe order: flush, detach (which writes
// back anything left), stop the bcache device, unregister the cache set, then erase our own
// signatures and the cache partition table we wrote. Devices that are not ours are refused.
func (e *Engine) Teardown(ctx context.Context, v Volume, flushTimeout time.Duration) (*TeardownResult, error) {
	res := &TeardownResult{Steps: []string{}}
	if v.Spec.BackingISCSI() != nil {
		// Our superblock is on the LUN: log in to erase it, even after a boot that did not.
		connected := &Result{}
		err := e.connectISCSI(ctx, v, connected)
		for _, s := range connected.Steps {
			res.Steps = append(res.Steps, s.String())
		}
		if err != nil {
			return res, err
		}
	}
	o, err := e.Observe(ctx, v)
	var lost *CacheLostError
	if errors.As(err, &lost) {
		// The SSD is gone: what is left to remove is on the backing disk.
		o, err = lost.backing, nil
	}
	if err != nil {
		return res, err
	}
	cacheOurs, backingOurs := ours(v, o)
	if v.Carved() {
		// The cache set is the pool's, serving its other volumes: the pool's teardown removes it.
		cacheOurs = false
	}
	if o.BackingSB != nil && !backingOurs {
		return res, &Refusal{Reason: ReasonCarriesData, Field: "backingDevice.path",
			Message: fmt.Sprintf("%s carries a bcache superblock labelled %q of cache set %s, not this volume's: not touching it", o.Backing.DevPath, o.BackingSB.Label(), o.BackingSB.SetUUID())}
	}
	if len(o.BackingMounts) > 0 || (o.BackingReg != nil && o.BackingReg.Device != "" && mountedDevice(o.BackingReg.Device)) {
		return res, &Refusal{Reason: ReasonMounted, Field: "backingDevice.path",
			Message: "the volume is in use (mounted); unmount it before teardown"}
	}
	if st, err := e.loadState(v); err == nil && st.Throttle != nil && len(st.Throttle.Cgroups) > 0 {
		t := st.Throttle
		if err := e.liftWriteLimit(v, st); err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, "lifted the write limit on "+t.Device+" from cgroups "+strings.Join(slices.Sorted(maps.Keys(t.Cgroups)), ", "))
	}

	if lost != nil {
		gone := "the cache device " + lost.Path + " was gone"
		if lost.Dirty() {
			gone += ", and the dirty data on it with it"
		}
		res.Steps = append(res.Steps, gone)
	}
	if o.BackingReg != nil {
		if o.BackingReg.AttachedSet != "" && lost != nil && v.Carved() {
			// The pool's set serves other volumes: this one leaves it alone, and only clean (a
			// dirty one's data is lost with the device; its bcache device stops below).
			if !lost.Dirty() {
				if err := e.leaveSharedSet(ctx, o, o.BackingReg.AttachedSet); err != nil {
					return res, err
				}
				res.Steps = append(res.Steps, "detached "+o.BackingReg.Device+" from cache set "+o.BackingReg.AttachedSet+" (its cache device is gone)")
			}
		} else if o.BackingReg.AttachedSet != "" && lost != nil {
			// A set whose only cache device is gone: nothing can be flushed from it.
			setDir := filepath.Join(blockdev.SysFsBcache, o.BackingReg.AttachedSet)
			switch err := blockdev.SetKnob(setDir, "unregister", "1"); {
			case err == nil:
				res.Steps = append(res.Steps, "unregistered cache set "+o.BackingReg.AttachedSet+" (its cache device is gone)")
			case !errors.Is(err, os.ErrNotExist):
				return res, err
			}
		} else if o.BackingReg.AttachedSet != "" {
			flush, err := e.Flush(ctx, v, flushTimeout, nil)
			if err != nil {
				return res, err
			}
			res.Flush = flush
			if err := blockdev.SetKnob(o.BackingReg.Sysfs, "detach", "1"); err != nil {
				return res, err
			}
			res.Steps = append(res.Steps, "detached "+o.BackingReg.Device+" from cache set "+o.BackingReg.AttachedSet)
			if err := e.waitLong(ctx, flushTimeout, "detach of "+o.BackingReg.Device, func() (bool, error) {
				reg, err := blockdev.RegisteredBacking(o.Backing.Name)
				return reg == nil || reg.AttachedSet == "", err
			}); err != nil {
				return res, err
			}
		}
		if err := blockdev.SetKnob(o.BackingReg.Sysfs, "stop", "1"); err != nil {
			return res, err
		}
		stopped := o.BackingReg.Device
		if stopped == "" {
			stopped = "the registration of " + o.Backing.DevPath + " (its bcache device was waiting for its cache set)"
		}
		res.Steps = append(res.Steps, "stopped "+stopped)
		if err := e.waitUntil(ctx, stopped+" to stop", func() (bool, error) {
			// Its bcache device gone is what counts: a registration left waiting for its cache set
			// (this one, or udev's again) is stopped again before the superblock is erased.
			reg, err := blockdev.RegisteredBacking(o.Backing.Name)
			return reg == nil || reg.Device == "", err
		}); err != nil {
			return res, err
		}
	}
	if cacheOurs && o.CacheReg != nil {
		if err := e.unregisterCacheSet(ctx, o.CacheReg.SetUUID); err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, "unregistered cache set "+o.CacheReg.SetUUID)
	}
	if backingOurs {
		restopped := false
		err := e.whenReleased(ctx, "wipefs", func() error {
			// udev's rules register a device carrying a bcache superblock whenever it appears (a LUN
			// just logged in to) or changes, so bcache can take it again after the look above or the
			// stop: a CI run found it busy for 30 s. A registration still waiting for its cache set
			// has no bcache device yet that anyone could hold open; it is stopped again. One that
			// runs is left alone, and wipefs fails on it.
			reg, err := blockdev.RegisteredBacking(o.Backing.Name)
			if err != nil {
				return err
			}
			if reg != nil && reg.Device == "" {
				if err := blockdev.SetKnob(reg.Sysfs, "stop", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
				restopped = true
			}
			return e.Run.WipeBcacheSignature(ctx, o.Backing.DevPath)
		})
		if err != nil {
			return res, err
		}
		if restopped {
			res.Steps = append(res.Steps, "stopped a registration of "+o.Backing.DevPath+" made during teardown (by udev's rules)")
		}
		res.Steps = append(res.Steps, "erased the bcache superblock of "+o.Backing.DevPath)
	}
	if backingOurs && !v.Carved() {
		// A carved volume's disks are the pool's, which restores them at its own teardown.
		step, err := restoreBackingWBT(v.Spec.EffectiveBackingWritebackThrottling(), o.Backing)
		if err != nil {
			return res, err
		}
		if step != "" {
			res.Steps = append(res.Steps, step)
		}
	}
	if v.Carved() && o.LV != nil && (backingOurs || o.BackingSB == nil) {
		// Its space goes back to the pool; only a logical volume of this name and tag is removed.
		if !o.LV.HasTag(v.LogicalVolumeTag()) {
			return res, &Refusal{Reason: ReasonCarriesData, Field: "pool.name",
				Message: fmt.Sprintf("%s is not tagged %s: not removing it", v.BackingPath(), v.LogicalVolumeTag())}
		}
		if err := e.whenReleased(ctx, "lvremove", func() error { return e.Run.RemoveLogicalVolume(ctx, v.Pool.VolumeGroup(), v.LogicalVolume()) }); err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, "removed logical volume "+v.BackingPath()+", its space back in pool "+v.Pool.Name)
	}
	if cacheOurs {
		steps, err := e.eraseCachePartition(ctx, &o.CacheSide)
		res.Steps = append(res.Steps, steps...)
		if err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, "erased the cache partition and partition table of "+o.Cache.DevPath)
	}
	if err := os.Remove(v.StablePath()); err == nil {
		res.Steps = append(res.Steps, "removed "+v.StablePath())
	}
	if err := e.setHold(v, false); err != nil {
		return res, err
	}
	if err := e.forgetState(v); err != nil {
		return res, err
	}
	if err := e.forgetCheck(v); err != nil {
		return res, err
	}
	if v.Spec.BackingISCSI() != nil {
		step, err := e.disconnectISCSI(ctx, v)
		if err != nil {
			return res, err
		}
		if step != "" {
			res.Steps = append(res.Steps, step)
		}
	}
	res.Changed = len(res.Steps) > 0
	return res, nil
}

// unregisterCacheSet stops a cache set and waits until the kernel has let it go. A set already
// gone when the knob is written is what it waits for.
func (e *Engine) unregisterCacheSet(ctx context.Context, uuid string) error {
	setDir := filepath.Join(blockdev.SysFsBcache, uuid)
	if err := blockdev.SetKnob(setDir, "unregister", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return e.waitUntil(ctx, "cache set "+uuid+" to go", func() (bool, error) {
		_, err := os.Stat(setDir)
		return errors.Is(err, os.ErrNotExist), nil
	})
}

// whenReleased runs a command that needs the device to itself, retrying while the kernel still
// holds it: bcache closes its devices asynchronously after stop and unregister.
func (e *Engine) whenReleased(ctx context.Context, name string, run func() error) error {
	var last error
	err := e.waitUntil(ctx, name+" on a released device", func() (bool, error) {
		err := run()
		var ce *blockdev.CommandError
		if errors.As(err, &ce) && strings.Contains(strings.ToLower(ce.Stderr), "busy") {
			last = err
			return false, nil
		}
		return true, err
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w; last attempt: %v", err, last)
	}
	return err
}

func (e *Engine) waitLong(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return blockdev.WaitFor(ctx, 200*time.Millisecond, what, cond)
}

// mountedDevice says whether a kernel device (bcache0) is mounted on the host.
func mountedDevice(name string) bool {
	d, err := blockdev.InspectName(name)
	if err != nil {
		return false
	}
	where, err := blockdev.MountedAt(d)
	return err == nil && len(where) > 0
}
