package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/safety"
)

// Engine runs the node work for volumes on this host.
type Engine struct {
	Run blockdev.Runner
	Log logr.Logger
	// HoldDir keeps a marker per volume held in writethrough by a flush, so that a later apply,
	// even after a reboot, does not switch it back to writeback behind the drain's back.
	HoldDir string
	// StateDir keeps each volume's schedule (policy.go); empty is DefaultStateDir.
	StateDir string
}

// DefaultHoldDir is where holds live on a host; the agent mounts it from the host.
const DefaultHoldDir = "/var/lib/flashcache/holds"

const (
	// maxRounds bounds observe-plan-act; a volume needs about fifteen steps from blank disks.
	maxRounds = 40
	// appearTimeout bounds waiting for the kernel to show a partition or a registered device.
	appearTimeout = 30 * time.Second
	// discardTimeout bounds a whole-device discard, which takes minutes on large, slow SSDs.
	discardTimeout = 15 * time.Minute
)

// DowngradeFlushTimeout bounds the blocking flush that apply runs when it leaves writeback with
// dirty data (a hold, or a safety downgrade).
var DowngradeFlushTimeout = time.Hour

// Result is what apply did and what the volume looks like now.
type Result struct {
	Changed  bool         `json:"changed"`
	Steps    []Step       `json:"steps"`
	Warnings []string     `json:"warnings,omitempty"`
	Status   *Status      `json:"status,omitempty"`
	Check    *CheckReport `json:"check,omitempty"`
	// Wear is the cache device's wear read again by Converge this run, when it was due.
	Wear *WearReading `json:"wear,omitempty"`
}

// WritebackRefused says whether the durability check keeps a volume whose spec asks for
// writeback in writethrough: no check has run on its devices yet, or the last one refuses
// writeback (its verdict or the cache's wear, under the spec's policy).
func WritebackRefused(v Volume, check *CheckReport) bool {
	return v.Spec.EffectiveMode() == fcv1.CacheModeWriteback && (check == nil || !check.WritebackAllowed)
}

// Apply builds or adopts the volume and sets its tunables, one step at a time, observing again
// after each step. Run again after an interruption, it continues where the host is.
//
// Writeback is enabled only after a durability check on the built devices allowed it (once per
// boot); until then, and whenever the check refuses it under the Enforce policy, the volume
// runs in writethrough.
func (e *Engine) Apply(ctx context.Context, v Volume, want Desired) (*Result, error) {
	res := &Result{Steps: []Step{}}
	observed := want.Observed
	want.Observed = nil
	if v.Spec.BackingISCSI() != nil {
		if err := e.connectISCSI(ctx, v, res); err != nil {
			return res, err
		}
		if res.Changed {
			observed = nil
		}
	}
	want = e.desired(v, want)
	wantsWriteback := v.Spec.EffectiveMode() == fcv1.CacheModeWriteback
	check, err := e.lastCheck(ctx, v)
	if err != nil {
		return res, err
	}
	want.SafetyWritethrough = WritebackRefused(v, check)
	o, err := e.converge(ctx, v, want, observed, res)
	var lost *CacheLostError
	if errors.As(err, &lost) {
		return res, e.keepServing(ctx, v, lost, res)
	}
	if err != nil {
		return res, err
	}
	if check != nil {
		again, err := e.lastCheck(ctx, v)
		if err != nil {
			return res, err
		}
		if again == nil {
			// The steps changed a device the check judged (a carved volume grown onto more of its
			// pool's disks): judged again now, not at the next run.
			check = nil
		}
	}
	if wantsWriteback && check == nil {
		// On converge's last observation: nothing has changed since, and under emulation another
		// is a second or more of a volume's build.
		if check, err = e.check(ctx, v, o); err != nil {
			return res, fmt.Errorf("durability check: %w", err)
		}
		if check.WritebackAllowed {
			want.SafetyWritethrough = false
			if o, err = e.converge(ctx, v, want, nil, res); err != nil {
				return res, err
			}
		}
	}
	res.Check = check
	if check != nil && (check.Verdict != safety.Safe || check.Worn) {
		what := "writeback stays enabled (policy Warn)"
		if !check.WritebackAllowed {
			what = "the volume stays in writethrough (policy Enforce)"
			if way := check.WayToWriteback(); way != "" {
				what += "; " + way
			}
		}
		res.Warnings = append(res.Warnings, fmt.Sprintf("durability check %s%s: %s; %s", check.Verdict, wornText(check.Worn), strings.Join(check.Reasons, " | "), what))
	}
	if v.Carved() {
		if v.Spec.Safety.DisableBackingWriteCache {
			res.Warnings = append(res.Warnings, "safety.disableBackingWriteCache is not applied to a carved volume: its disks are the pool's, shared with its other volumes")
		}
		if o.LV != nil && o.LV.SizeBytes < CarvedBackingBytes(v.Spec.Pool.Size.Value()) && o.BackingReg != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("pool.size %s is more than the volume's %s: it grows once nothing uses /dev/%s "+
				"(no mount, no holder): bcache takes a new size only when the device is registered again",
				humanSize(v.Spec.Pool.Size.Value()), humanSize(o.LV.SizeBytes-backingDataOffsetBytes), o.BackingReg.Device))
		}
	}
	if o.Cache.DiscardMaxBytes == 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s does not support discard: the spare area is not known to the SSD as free", o.Cache.DevPath))
	}
	if w := bucketSizeWarning(v, o); w != "" {
		res.Warnings = append(res.Warnings, w)
	}
	res.Status = statusOf(v, o)
	res.Status.Held = want.Hold
	if n := res.Status.BackingIOErrors; n > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s: %s returned %d I/O errors since bcache registered it; at %d bcache stops /dev/%s "+
			"(dirty data stays on the cache device). The count starts again when the device is registered again",
			fcv1.ReasonBackingDeviceErrors, o.Backing.DevPath, n, res.Status.BackingIOErrorLimit, res.Status.Device))
	}
	if n := res.Status.CacheIOErrors; n > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s: %s returned %d I/O errors that bcache recovered from by reading the backing disk; "+
			"at %s it fails the cache set (a clean device then runs uncached, a dirty one stops)",
			fcv1.ReasonCacheDeviceErrors, o.Cache.DevPath, n, cacheIOErrorLimit))
	}
	return res, nil
}

// bucketSizeWarning says when the cache the volume uses was formatted with another bucket size
// than its spec (or its pool's) asks for. The size is make-bcache's, written once: changing it
// means formatting the cache again, which drops everything cached, so the engine never does it
// for a spec change; a new cache device takes the spec's size.
func bucketSizeWarning(v Volume, o *Observation) string {
	if o.CacheSB == nil || !o.CacheSB.IsCache() {
		return ""
	}
	have, err := o.CacheSB.BucketBytes()
	want := v.cacheLayout().bucketBytes
	if err != nil || have == want {
		return ""
	}
	field := "cacheDevice.bucketSize"
	if v.Carved() {
		field = "pool " + v.Spec.Pool.Name + "'s " + field
	}
	return fmt.Sprintf("%s is %s, but %s was formatted with buckets of %s, which it keeps: the bucket size is set only when a cache device is formatted",
		field, humanSize(want), o.CachePart.DevPath, humanSize(have))
}

func wornText(worn bool) string {
	if worn {
		return ", cache device worn"
	}
	return ""
}

// converge runs observe, plan, act until the plan is empty and returns the last observation. Its
// first round plans on observed when the caller has one.
func (e *Engine) converge(ctx context.Context, v Volume, want Desired, observed *Observation, res *Result) (*Observation, error) {
	var last []Step
	for range maxRounds {
		o := observed
		observed = nil
		if o == nil {
			var err error
			if o, err = e.Observe(ctx, v); err != nil {
				return nil, err
			}
		}
		steps, err := Plan(v, o, want)
		if err != nil {
			return nil, err
		}
		if len(steps) == 0 {
			return o, nil
		}
		if slices.Contains(last, steps[0]) {
			return nil, fmt.Errorf("%s did not take effect: the host still needs it after running it", steps[0])
		}
		last = sameRound(steps)
		for _, s := range last {
			e.Log.Info("applying", "volume", v.Name, "step", s.String())
			if err := e.execute(ctx, v, o, s); err != nil {
				return nil, fmt.Errorf("%s: %w", s.Kind, err)
			}
			res.Changed = true
			res.Steps = append(res.Steps, s)
		}
	}
	return nil, fmt.Errorf("volume %s did not converge in %d rounds of steps", v.Name, maxRounds)
}

// sameRound is the plan's first step, and the bcache device's tunables that follow it when it
// is one: independent sysfs writes, each read back as it is made, so the host need not be
// observed again (a dozen commands, a second or more each time under emulation) between them.
func sameRound(steps []Step) []Step {
	n := 1
	for n < len(steps) && steps[0].Kind == StepSetTunable && steps[n].Kind == StepSetTunable {
		n++
	}
	return steps[:n]
}

// PlanOnly observes and plans without changing anything: `flashcache node plan`.
func (e *Engine) PlanOnly(ctx context.Context, v Volume, want Desired) ([]Step, error) {
	want = e.desired(v, want)
	if t := v.Spec.BackingISCSI(); t != nil {
		// Until the login there is no LUN to look at: the login is the whole plan.
		if s, err := blockdev.FindISCSISession(ctx, v.iscsiTarget()); err == nil && s == nil {
			return []Step{{Kind: StepISCSILogin, Device: t.IQN + " at " + t.Portal}}, nil
		}
	}
	o, err := e.Observe(ctx, v)
	if err != nil {
		return nil, err
	}
	return Plan(v, o, want)
}

func (e *Engine) execute(ctx context.Context, v Volume, o *Observation, s Step) error {
	switch s.Kind {
	case StepWipeCache:
		return e.executeCacheStep(ctx, &o.CacheSide, s)
	case StepWipeBacking:
		return e.wipeAll(ctx, o.Backing)
	case StepPartitionCache, StepRereadTable:
		return e.executeCacheStep(ctx, &o.CacheSide, s)
	case StepMakeBcache, StepMakeCache, StepMakeBacking:
		m := blockdev.MakeBcache{CacheSetUUID: s.Value}
		if s.Kind != StepMakeBacking {
			if o.CachePart == nil {
				return fmt.Errorf("no partition on %s", o.Cache.DevPath)
			}
			m.CacheDevPath, m.ReplacementPolicy = o.CachePart.DevPath, makeBcachePolicy(v.Spec.EffectiveReplacementPolicy())
			m.BucketBytes = v.cacheLayout().bucketBytes
		}
		if s.Kind != StepMakeCache {
			// Data from 2 MiB: the gap after the superblock is the durability probe's scratch.
			m.BackingDevPath, m.DataOffsetSectors = o.Backing.DevPath, safety.BackingDataOffsetSectors
		}
		if s.Kind == StepMakeBacking && v.Carved() {
			if err := e.clearStaleSignatures(ctx, o.Backing); err != nil {
				return err
			}
		}
		return e.Run.MakeBcache(ctx, m)
	case StepRegisterCache:
		return e.executeCacheStep(ctx, &o.CacheSide, s)
	case StepDetachLostCache:
		return e.executeWithoutCache(ctx, v, o, s)
	case StepCreateLV:
		size, err := strconv.ParseInt(s.Value, 10, 64)
		if err != nil {
			return fmt.Errorf("size %q: %w", s.Value, err)
		}
		if err := e.Run.CreateLogicalVolume(ctx, v.Pool.VolumeGroup(), v.LogicalVolume(), size, v.LogicalVolumeTag()); err != nil {
			return err
		}
		return e.waitUntil(ctx, s.Device+" to appear", func() (bool, error) { _, err := os.Stat(s.Device); return err == nil, nil })
	case StepExtendLV:
		size, err := strconv.ParseInt(s.Value, 10, 64)
		if err != nil {
			return fmt.Errorf("size %q: %w", s.Value, err)
		}
		return e.Run.ExtendLogicalVolume(ctx, v.Pool.VolumeGroup(), v.LogicalVolume(), size)
	case StepRestartBacking:
		return e.restartBacking(ctx, v, o)
	case StepActivateLV:
		if err := e.Run.ActivateLogicalVolume(ctx, v.Pool.VolumeGroup(), v.LogicalVolume()); err != nil {
			return err
		}
		return e.waitUntil(ctx, s.Device+" to appear", func() (bool, error) { _, err := os.Stat(s.Device); return err == nil, nil })
	case StepRegisterBacking:
		if e.registeredByUdev(ctx, func() (bool, error) { reg, err := blockdev.RegisteredBacking(o.Backing.Name); return reg != nil, err }) {
			return nil
		}
		if err := blockdev.Register(o.Backing.DevPath); err != nil {
			return err
		}
		return e.waitUntil(ctx, "the kernel to register "+o.Backing.DevPath, func() (bool, error) {
			reg, err := blockdev.RegisteredBacking(o.Backing.Name)
			return reg != nil, err
		})
	case StepAttach:
		if o.BackingReg == nil || s.Value == "" {
			return fmt.Errorf("nothing to attach yet")
		}
		// After make-bcache, udev's rules register both devices and bcache attaches the backing
		// device by itself: a write that races it fails (EINVAL once it is attached, ENOENT while
		// its registration is under way). Whether it ended attached is what counts.
		written := blockdev.SetKnob(o.BackingReg.Sysfs, "attach", s.Value)
		err := e.waitUntil(ctx, "the backing device to attach to cache set "+s.Value, func() (bool, error) {
			reg, err := blockdev.RegisteredBacking(o.Backing.Name)
			return reg != nil && reg.AttachedSet == s.Value, err
		})
		if err != nil && written != nil {
			return fmt.Errorf("%w (%v)", written, err)
		}
		return err
	case StepSetTunable:
		if o.BackingReg == nil || o.BackingReg.Device == "" {
			return fmt.Errorf("the bcache device is not running")
		}
		if from, _ := blockdev.ActiveChoice(s.From); s.Tunable == "cache_mode" && from == string(fcv1.CacheModeWriteback) &&
			s.Value != from && o.Knobs["state"] == "dirty" {
			// Leaving writeback with dirty data: flush it unthrottled first, or it could trickle
			// to the backing disk for hours. The next steps restore the throttling knobs.
			if _, err := e.flush(ctx, v, o, DowngradeFlushTimeout, nil); err != nil {
				return err
			}
		}
		return e.setAndVerify(o.BackingReg.Sysfs, s)
	case StepSetCacheTunable:
		return e.executeCacheStep(ctx, &o.CacheSide, s)
	case StepWriteThrough:
		return disableWriteCache(o.Backing)
	case StepBackingWBT:
		return setBackingWBT(s)
	case StepLinkStablePath:
		if o.BackingReg == nil {
			return fmt.Errorf("the bcache device is not running")
		}
		return linkAtomically("/dev/"+o.BackingReg.Device, v.StablePath())
	}
	return fmt.Errorf("unknown step %q", s.Kind)
}

// udevGrace is how long a registration step first waits for udev: bcache-tools' rules register
// a device as soon as its new superblock is seen, and a registration of ours at the same moment
// races it in the kernel (an e2e run once saw a restarted agent make no progress for five
// minutes right after such a pair).
const udevGrace = 2 * time.Second

// registeredByUdev waits up to udevGrace for a device to be registered without us.
func (e *Engine) registeredByUdev(ctx context.Context, registered func() (bool, error)) bool {
	ctx, cancel := context.WithTimeout(ctx, udevGrace)
	defer cancel()
	return blockdev.WaitFor(ctx, 100*time.Millisecond, "udev's registration", registered) == nil
}

// executeCacheStep runs the steps that concern the cache device alone, for a volume on whole
// devices and for a pool alike.
func (e *Engine) executeCacheStep(ctx context.Context, o *CacheSide, s Step) error {
	switch s.Kind {
	case StepWipeCache:
		return e.wipeAll(ctx, o.Cache)
	case StepPartitionCache:
		if s.Discard {
			if err := e.Run.Discard(ctx, o.Cache.DevPath, discardTimeout); err != nil {
				return err
			}
		}
		if err := e.Run.ZapPartitionTable(ctx, o.Cache.DevPath); err != nil {
			return err
		}
		if err := e.Run.CreatePartition(ctx, o.Cache.DevPath, s.Start, s.End, s.Label); err != nil {
			return err
		}
		return e.waitForPartition(ctx, o.Cache)
	case StepRereadTable:
		if err := e.Run.RereadPartitionTable(ctx, o.Cache.DevPath); err != nil {
			return err
		}
		return e.waitForPartition(ctx, o.Cache)
	}
	if o.CachePart == nil {
		return fmt.Errorf("no partition on %s", o.Cache.DevPath)
	}
	switch s.Kind {
	case StepRegisterCache:
		if e.registeredByUdev(ctx, func() (bool, error) { reg, err := blockdev.RegisteredCache(o.CachePart.Name); return reg != nil, err }) {
			return nil
		}
		if err := blockdev.Register(o.CachePart.DevPath); err != nil {
			return err
		}
		return e.waitUntil(ctx, "the kernel to register "+o.CachePart.DevPath, func() (bool, error) {
			reg, err := blockdev.RegisteredCache(o.CachePart.Name)
			return reg != nil, err
		})
	case StepSetCacheTunable:
		return e.setAndVerify(cacheKnobDir(o.CachePart.Name), s)
	}
	return fmt.Errorf("%s is not a step of the cache device", s.Kind)
}

// setAndVerify writes a tunable and reads it back: the kernel clamps some values silently.
func (e *Engine) setAndVerify(dir string, s Step) error {
	if err := blockdev.SetKnob(dir, s.Tunable, s.Value); err != nil {
		return err
	}
	got, err := blockdev.Knob(dir, s.Tunable)
	if err != nil {
		return err
	}
	if active, err := blockdev.ActiveChoice(got); err == nil {
		got = active
	}
	if got != s.Value {
		if a, err1 := blockdev.ParseHumanSize(got); err1 == nil {
			if b, err2 := strconv.ParseInt(s.Value, 10, 64); err2 == nil && humanSize(a) == humanSize(b) {
				return nil
			}
		}
		return fmt.Errorf("%s/%s reads back %q after writing %q", dir, s.Tunable, got, s.Value)
	}
	return nil
}

// wipeAll erases the signatures on a disk's partitions and then on the disk itself, and makes the
// kernel forget the old partitions. Called only with the spec's consent.
func (e *Engine) wipeAll(ctx context.Context, d blockdev.Device) error {
	for _, p := range d.Partitions {
		if err := e.Run.WipeSignatures(ctx, "/dev/"+p, true); err != nil {
			return err
		}
	}
	if err := e.Run.WipeSignatures(ctx, d.DevPath, true); err != nil {
		return err
	}
	if len(d.Partitions) > 0 {
		if err := e.Run.ForgetPartitions(ctx, d.DevPath); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) waitForPartition(ctx context.Context, disk blockdev.Device) error {
	return e.waitUntil(ctx, "partition 1 of "+disk.DevPath, func() (bool, error) {
		d, err := blockdev.InspectName(disk.Name)
		if err != nil || len(d.Partitions) == 0 {
			return false, nil
		}
		_, err = os.Stat("/dev/" + d.Partitions[0])
		return err == nil, nil
	})
}

func (e *Engine) waitUntil(ctx context.Context, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, appearTimeout)
	defer cancel()
	return blockdev.WaitFor(ctx, 100*time.Millisecond, what, cond)
}

// linkAtomically points link at target, replacing an older link in one rename.
func linkAtomically(target, link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(link), err)
	}
	tmp := link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("linking %s: %w", link, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		return fmt.Errorf("linking %s: %w", link, err)
	}
	return nil
}

func (e *Engine) holdPath(v Volume) string {
	dir := e.HoldDir
	if dir == "" {
		dir = DefaultHoldDir
	}
	return filepath.Join(dir, v.Name)
}

func (e *Engine) held(v Volume) bool {
	_, err := os.Stat(e.holdPath(v))
	return err == nil
}

func (e *Engine) setHold(v Volume, on bool) error {
	path := e.holdPath(v)
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("releasing hold: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("recording hold: %w", err)
	}
	if err := os.WriteFile(path, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("recording hold: %w", err)
	}
	return nil
}

// disableWriteCache turns a SCSI or SATA disk's volatile write cache off through the sd driver:
// writing "write through" to cache_type sends the MODE SELECT and updates the kernel's view in
// one go, which sdparm or hdparm alone would not.
func disableWriteCache(d blockdev.Device) error {
	matches, _ := filepath.Glob(filepath.Join(blockdev.SysClassBlock, d.Disk(), "device", "scsi_disk", "*", "cache_type"))
	if len(matches) != 1 {
		return fmt.Errorf("%s is not a SCSI or SATA disk: its write cache cannot be turned off here", d.DevPath)
	}
	if err := blockdev.WriteSysfs(matches[0], "write through"); err != nil {
		return err
	}
	got, err := blockdev.ReadSysfs(filepath.Join(blockdev.SysClassBlock, d.Disk(), "queue", "write_cache"))
	if err != nil {
		return err
	}
	if got != "write through" {
		return fmt.Errorf("%s still reports %q after turning its write cache off", d.DevPath, got)
	}
	return nil
}

// restartBacking stops a carved volume's bcache device and registers its backing device again,
// so that bcache reads its grown size: dirty data is written back first (in writethrough), and
// the tunables, which a registration resets, are set by the steps that follow.
func (e *Engine) restartBacking(ctx context.Context, v Volume, o *Observation) error {
	if o.BackingReg == nil {
		return fmt.Errorf("the bcache device is not running")
	}
	if o.Knobs["state"] == "dirty" {
		if _, err := e.flush(ctx, v, o, DowngradeFlushTimeout, nil); err != nil {
			return err
		}
	}
	if err := blockdev.SetKnob(o.BackingReg.Sysfs, "stop", "1"); err != nil {
		return err
	}
	if err := e.waitUntil(ctx, o.BackingReg.Device+" to stop", func() (bool, error) {
		reg, err := blockdev.RegisteredBacking(o.Backing.Name)
		return reg == nil, err
	}); err != nil {
		return err
	}
	// bcache closes the device some time after the stop returns, and until then a registration is
	// refused as busy (quietly, through register_quiet): register until the kernel has it.
	return e.waitUntil(ctx, "the kernel to register "+o.Backing.DevPath+" again", func() (bool, error) {
		reg, err := blockdev.RegisteredBacking(o.Backing.Name)
		if err != nil || (reg != nil && reg.Device != "") {
			return err == nil, err
		}
		if err := blockdev.Register(o.Backing.DevPath); err != nil && !errors.Is(err, syscall.EBUSY) {
			return false, err
		}
		return false, nil
	})
}

// makeBcachePolicy is the replacement policy to format a cache with: make-bcache knows lru and
// fifo only, and a tunable step sets random through sysfs afterwards.
func makeBcachePolicy(p fcv1.ReplacementPolicy) string {
	if p == fcv1.ReplacementPolicyRandom {
		return string(fcv1.ReplacementPolicyLRU)
	}
	return string(p)
}

// staleSignatureWindow is how much of a carved volume's data is zeroed at each end before it
// becomes a backing device: every filesystem, partition table, RAID and LVM signature blkid
// knows lies in the first or the last MiB of a device.
const staleSignatureWindow = 1 << 20

// clearStaleSignatures zeroes the start and the end of a new carved volume's data. Its logical
// volume may reuse extents of one deleted before: lvcreate wipes the signatures at its start,
// but bcache's data begins 2 MiB further in, where the old volume's filesystem would otherwise
// appear whole in the new device, be taken for the new claim's own and be mounted into its pod.
// The rest of the old bytes are not erased (as with any thick LVM volume); a filesystem made on
// the device does not show them.
func (e *Engine) clearStaleSignatures(ctx context.Context, lv blockdev.Device) error {
	if lv.SizeBytes < backingDataOffsetBytes+2*staleSignatureWindow {
		return fmt.Errorf("%s is %d bytes, too small for a carved volume", lv.DevPath, lv.SizeBytes)
	}
	for _, offset := range []int64{backingDataOffsetBytes, lv.SizeBytes - staleSignatureWindow} {
		if err := e.Run.ZeroRange(ctx, lv.DevPath, offset, staleSignatureWindow); err != nil {
			return fmt.Errorf("zeroing what a deleted volume left in %s: %w", lv.DevPath, err)
		}
	}
	return nil
}
