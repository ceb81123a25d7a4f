package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/units"
)

// CacheLostError: the cache device the spec names is gone while the backing device still
// carries this volume's superblock: the SSD died, was pulled, or is missing at boot. What that
// means for the data depends on whether bcache had dirty data on it, which the message says.
type CacheLostError struct {
	Path string
	// Pool is the pool of a carved volume, whose cache set the pool's other volumes share;
	// empty for a volume on whole devices.
	Pool string
	// Status is the bcache device's, when the backing device is registered.
	Status *Status
	// DirtyOnDisk: the backing superblock says dirty, so writes acknowledged from the cache
	// may exist only on the lost device. While the device runs attached, bcache's own count of
	// dirty bytes is the truth: the superblock's flag is cleared lazily.
	DirtyOnDisk bool
	// Failing: the device is there but reading it fails with I/O errors; otherwise it is gone.
	Failing bool
	// Accepted: the volume carries flashcache.io/accept-cache-loss naming this path.
	Accepted bool
	// SuperblockState is the backing superblock's cache state: clean, dirty, detached, or
	// inconsistent once bcache was started without its cache.
	SuperblockState string
	missing         error
	// backing is what is left to observe: the backing device alone, for Teardown and recovery.
	backing *Observation
}

func (e *CacheLostError) Unwrap() error { return e.missing }

// Running: the bcache device exists and serves.
func (e *CacheLostError) Running() bool { return e.Status != nil && e.Status.Device != "" }

// attached: it still runs on the lost cache's set, which bcache has not failed yet.
func (e *CacheLostError) attached() bool { return e.Running() && e.Status.CacheSetUUID != "" }

// Dirty says whether dirty data was at stake.
func (e *CacheLostError) Dirty() bool {
	if e.attached() {
		return e.Status.DirtyBytes > 0
	}
	return e.DirtyOnDisk
}

// gone says what became of the device.
func (e *CacheLostError) gone() string {
	if e.Failing {
		return "is failing (reading it returns I/O errors)"
	}
	return "is gone"
}

// Reason is the condition reason: a device that went away, or one that fails its I/O.
func (e *CacheLostError) Reason() string {
	if e.Failing {
		return fcv1.ReasonCacheDeviceErrors
	}
	return fcv1.ReasonCacheDeviceLost
}

// field is the spec field the condition names: a carved volume's cache device is its pool's.
func (e *CacheLostError) field() string {
	if e.Pool != "" {
		return "pool.name"
	}
	return "cacheDevice.path"
}

// device names the lost device in messages: a carved volume's is its pool's.
func (e *CacheLostError) device() string {
	if e.Pool != "" {
		return fmt.Sprintf("%s: pool %s's cache device %s", e.field(), e.Pool, e.Path)
	}
	return e.field() + ": " + e.Path
}

// replaceHint says how to give the volume a new cache device.
func (e *CacheLostError) replaceHint() string {
	if e.Pool != "" {
		return fmt.Sprintf("Name a new blank device in pool %s's cacheDevice.path: it becomes the pool's cache set, and each clean volume "+
			"of the pool is attached to it without touching its data", e.Pool)
	}
	return "Name a new blank device in cacheDevice.path: it is partitioned and attached without touching the data"
}

func (e *CacheLostError) Error() string {
	switch {
	case e.attached() && e.Dirty():
		return fmt.Sprintf("%s %s with %s of dirty data on it: those writes exist only on the lost device. "+
			"Reads of that data fail rather than return stale blocks, and when bcache fails the cache set (at its I/O error limit, %s) "+
			"it stops /dev/%s (stop_when_cache_set_failed=auto); flashcache will not start it by force. If the device comes back, "+
			"the data comes back with it", e.device(), e.gone(), units.Bytes(e.Status.DirtyBytes), cacheIOErrorLimit, e.Status.Device)
	case e.attached():
		return fmt.Sprintf("%s %s; no dirty data was on it. bcache has not noticed yet: "+
			"an apply detaches the lost cache, and /dev/%s then serves from the backing disk alone, uncached. %s", e.device(), e.gone(), e.Status.Device, e.replaceHint())
	case e.Running() && e.Accepted && e.SuperblockState == "inconsistent":
		return fmt.Sprintf("%s %s and its loss was accepted (%s): /dev/%s serves the backing disk alone, uncached, "+
			"without the writes that were only on the lost device; check the data above it (database recovery, fsck). %s",
			e.device(), e.gone(), fcv1.AnnotationAcceptCacheLoss, e.Status.Device, e.replaceHint())
	case e.Running():
		return fmt.Sprintf("%s %s; no dirty data was on it, and /dev/%s serves from the backing disk alone, uncached. %s",
			e.device(), e.gone(), e.Status.Device, e.replaceHint())
	case e.Dirty():
		return fmt.Sprintf("%s %s and the backing disk's superblock says dirty: writes acknowledged from the cache "+
			"exist only on the lost device, so the volume is not started (starting it would serve stale blocks silently). "+
			"If the device comes back, the data comes back with it. If it cannot, accept the loss by annotating the volume "+
			"%s=%s: it then runs uncached, without those writes", e.device(), e.gone(), fcv1.AnnotationAcceptCacheLoss, e.Path)
	default:
		return fmt.Sprintf("%s %s; the backing disk is clean and holds every write, and an apply starts it "+
			"without its cache. %s", e.device(), e.gone(), e.replaceHint())
	}
}

// cacheLost explains a missing cache device when the backing device is this volume's; otherwise
// it returns missing as it is.
func (e *Engine) cacheLost(ctx context.Context, v Volume, missing error) error {
	o := &Observation{}
	var err error
	if o.Backing, err = e.backingDevice(ctx, v); err != nil {
		return missing
	}
	if o.BackingSigs, err = e.Run.Signatures(ctx, o.Backing.DevPath); err != nil {
		return missing
	}
	if err := e.observeBacking(ctx, v, o); err != nil || o.BackingSB == nil || o.BackingSB.IsCache() || o.BackingSB.Label() != v.Label() {
		return missing
	}
	state := o.BackingSB.Fields["dev.data.cache_state"]
	if i := strings.IndexByte(state, '['); i >= 0 {
		state = strings.Trim(state[i:], "[]")
	}
	lost := &CacheLostError{Path: v.CachePath(), missing: missing, backing: o, SuperblockState: state,
		Failing:     errors.Is(missing, blockdev.ErrUnreadable),
		DirtyOnDisk: state == "dirty", Accepted: v.AcceptedCacheLoss != "" && v.AcceptedCacheLoss == v.CachePath()}
	if v.Carved() {
		lost.Pool = v.Spec.Pool.Name
	}
	if o.BackingReg != nil {
		lost.Status = statusOf(v, o)
		lost.Status.Held = e.held(v)
	}
	return lost
}

// keepServing does what a lost cache allows, and nothing a person must decide:
//   - clean and still attached: it unregisters the lost cache set, so bcache detaches it now
//     instead of failing the next read that was to be a hit;
//   - not running (missing at boot, or stopped by bcache) and clean, or dirty with the loss
//     accepted: it starts the backing device without its cache. bcache then marks it
//     inconsistent, voiding whatever a cache set still holds for it.
//
// A dirty cache whose loss was not accepted is left alone, and so is a device still attached
// with dirty data: bcache stops it when it fails the cache set. It returns the loss as it is
// afterwards.
func (e *Engine) keepServing(ctx context.Context, v Volume, lost *CacheLostError, res *Result) error {
	o := lost.backing
	step, ok := stepWithoutCache(lost)
	if !ok {
		return lost
	}
	e.Log.Info("applying", "volume", v.Name, "step", step.String(), "reason", "cache device lost")
	if err := e.executeWithoutCache(ctx, v, o, step); err != nil {
		return fmt.Errorf("%s with the cache device gone: %w", step.Kind, err)
	}
	res.Changed = true
	res.Steps = append(res.Steps, step)
	again := e.cacheLost(ctx, v, lost.missing)
	if next, ok := again.(*CacheLostError); ok && step.Kind == StepRegisterBacking {
		return e.keepServing(ctx, v, next, res)
	}
	return again
}

// stepWithoutCache is keepServing's next step, if any.
func stepWithoutCache(lost *CacheLostError) (Step, bool) {
	switch {
	case lost.attached() && !lost.Dirty():
		return Step{Kind: StepDetachLostCache, Device: "/dev/" + lost.Status.Device, Value: lost.Status.CacheSetUUID}, true
	case lost.Running() || (lost.Dirty() && !lost.Accepted):
		return Step{}, false
	case lost.backing.BackingReg == nil:
		return Step{Kind: StepRegisterBacking, Device: lost.backing.Backing.DevPath}, true
	default:
		return Step{Kind: StepStartWithoutCache, Device: lost.backing.Backing.DevPath}, true
	}
}

func (e *Engine) executeWithoutCache(ctx context.Context, v Volume, o *Observation, s Step) error {
	switch s.Kind {
	case StepDetachLostCache:
		if v.Carved() {
			return e.leaveSharedSet(ctx, o, s.Value)
		}
		if err := blockdev.SetKnob(filepath.Join(blockdev.SysFsBcache, s.Value), "unregister", "1"); err != nil {
			return err
		}
		if err := e.waitUntil(ctx, s.Device+" to detach from the lost cache set "+s.Value, func() (bool, error) {
			reg, err := blockdev.RegisteredBacking(o.Backing.Name)
			return reg != nil && reg.AttachedSet == "", err
		}); err != nil {
			return err
		}
		// A failing SSD that reads again can be registered only once its old set is freed.
		return e.waitForSetGone(ctx, s.Value)
	case StepRegisterBacking:
		return e.execute(ctx, v, o, s)
	case StepStartWithoutCache:
		if err := blockdev.SetKnob(o.BackingReg.Sysfs, "running", "1"); err != nil {
			return err
		}
		var dev string
		if err := e.waitUntil(ctx, "bcache to start "+o.Backing.DevPath+" without its cache", func() (bool, error) {
			reg, err := blockdev.RegisteredBacking(o.Backing.Name)
			if reg != nil {
				dev = reg.Device
			}
			return dev != "", err
		}); err != nil {
			return err
		}
		return linkAtomically("/dev/"+dev, v.StablePath())
	}
	return fmt.Errorf("%s is not a step for a volume without its cache", s.Kind)
}

// leaveSharedSet detaches one clean backing device from a pool's cache set whose cache device
// is gone. Unregistering the set, as a volume on whole devices does, would detach every volume
// of the pool, the dirty ones too, and a detach ends by writing the backing superblock clean:
// for a volume whose dirty data is on the lost device, that must not happen. The set stays for
// bcache to fail itself (on kernel 6.1 at once, when this detach's write of the set's uuid table
// fails; else at its I/O error limit), which stops the dirty volumes
// (stop_when_cache_set_failed=auto) with their superblocks still dirty.
func (e *Engine) leaveSharedSet(ctx context.Context, o *Observation, set string) error {
	if err := blockdev.SetKnob(o.BackingReg.Sysfs, "detach", "1"); err != nil {
		return err
	}
	return e.waitUntil(ctx, o.Backing.DevPath+" to detach from cache set "+set+", whose cache device is gone", func() (bool, error) {
		reg, err := blockdev.RegisteredBacking(o.Backing.Name)
		return reg == nil || reg.AttachedSet == "", err
	})
}

// BackingFailedError: the backing disk is offline, so the kernel rejects every I/O to it (the
// SCSI layer gave up on it, or an operator took it offline). Dirty data is not at stake: it
// stays on the cache device until the disk is back.
type BackingFailedError struct {
	Path  string
	State string
	// Status is the bcache device's, when the backing device is still registered.
	Status *Status
}

func (e *BackingFailedError) Error() string {
	if e.Status != nil && e.Status.Device != "" {
		return fmt.Sprintf("backingDevice.path: %s is %s: the kernel rejects every I/O to it. /dev/%s still serves what the cache holds; "+
			"other reads fail, and %s of dirty data waits on the cache device. bcache stops the device after %d backing I/O errors "+
			"(%d so far); the dirty data then stays on the cache device until the disk is back, and an apply registers it again",
			e.Path, e.State, e.Status.Device, units.Bytes(e.Status.DirtyBytes), e.Status.BackingIOErrorLimit, e.Status.BackingIOErrors)
	}
	return fmt.Sprintf("backingDevice.path: %s is %s: the kernel rejects every I/O to it, and no bcache device serves the volume "+
		"(bcache stops it at its backing I/O error limit). Dirty data stays on the cache device until the disk is back; an apply "+
		"then registers it again and writeback resumes", e.Path, e.State)
}

// backingOffline reports an offline backing disk with what sysfs alone says of its registration:
// no I/O can reach the disk to read its superblock.
func (e *Engine) backingOffline(v Volume, o *Observation) error {
	failed := &BackingFailedError{Path: v.BackingPath(), State: o.Backing.State}
	if failed.Path == "" {
		failed.Path = o.Backing.DevPath
	}
	reg, err := blockdev.RegisteredBacking(o.Backing.Name)
	if err != nil {
		return fmt.Errorf("%s: %w", failed.Error(), err)
	}
	if o.BackingReg = reg; reg != nil {
		o.Knobs = backingKnobValues(reg)
		failed.Status = statusOf(v, o)
	}
	return failed
}

// Failure is a device failure summarised for a volume's status.
type Failure struct {
	Device       fcv1.FailedDevice
	Reason       string
	DirtyAtRisk  bool
	DirtyBytes   *int64
	KernelAction string
}

// FailureOf summarises a lost cache or a failed backing disk; nil for other errors.
func FailureOf(err error) *Failure {
	var lost *CacheLostError
	var backing *BackingFailedError
	switch {
	case errors.As(err, &lost):
		f := &Failure{Device: fcv1.FailedDeviceCache, Reason: lost.Reason(), DirtyAtRisk: lost.Dirty()}
		if lost.Running() {
			f.DirtyBytes = &lost.Status.DirtyBytes
		}
		switch {
		case lost.attached():
			f.KernelAction = "none yet: bcache fails the cache set at its I/O error limit; with dirty data it then stops the device (stop_when_cache_set_failed=auto)"
		case lost.Running():
			f.KernelAction = "runs the device without its cache, from the backing disk alone"
		case lost.Dirty():
			f.KernelAction = "stopped the device, or never started it: its dirty data is not on the backing disk"
		default:
			f.KernelAction = "waits for the cache set before starting the device"
		}
		return f
	case errors.As(err, &backing):
		f := &Failure{Device: fcv1.FailedDeviceBacking, Reason: fcv1.ReasonBackingDeviceErrors,
			KernelAction: "stopped the device at its backing I/O error limit, or never started it; the cache set keeps the dirty data"}
		if s := backing.Status; s != nil && s.Device != "" {
			f.DirtyBytes = &s.DirtyBytes
			f.KernelAction = fmt.Sprintf("fails the I/O that reaches the disk; counted %d backing I/O errors and stops the device at %d", s.BackingIOErrors, s.BackingIOErrorLimit)
		}
		return f
	}
	return nil
}

// FailureOfStatus is the failure a running device shows by itself: I/O errors counted on the
// backing or the cache device.
func FailureOfStatus(s *Status) *Failure {
	switch {
	case s == nil:
		return nil
	case s.BackingIOErrors == 0 && s.CacheIOErrors > 0:
		return &Failure{Device: fcv1.FailedDeviceCache, Reason: fcv1.ReasonCacheDeviceErrors, DirtyBytes: &s.DirtyBytes,
			KernelAction: fmt.Sprintf("counted %d cache I/O errors and served those reads from the backing disk; fails the cache set at %s", s.CacheIOErrors, cacheIOErrorLimit)}
	case s.BackingIOErrors == 0:
		return nil
	}
	return &Failure{Device: fcv1.FailedDeviceBacking, Reason: fcv1.ReasonBackingDeviceErrors, DirtyBytes: &s.DirtyBytes,
		KernelAction: fmt.Sprintf("counted %d backing I/O errors since the device was registered; stops it at %d, and the cache set keeps the dirty data", s.BackingIOErrors, s.BackingIOErrorLimit)}
}

// waitForSetGone waits until the kernel has freed a cache set, which it does some time after the
// set was unregistered or failed: until then a new cache device with the same set UUID is
// refused ("duplicate cache set member", EINVAL).
func (e *Engine) waitForSetGone(ctx context.Context, set string) error {
	return e.waitUntil(ctx, "the kernel to free cache set "+set, func() (bool, error) {
		_, err := os.Stat(filepath.Join(blockdev.SysFsBcache, set))
		if errors.Is(err, os.ErrNotExist) {
			return true, nil
		}
		return false, err
	})
}
