package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/safety"
)

// DeviceCheck is the durability and wear judgement of one device. Path, Device, MajorMinor,
// HardwareID and SizeBytes say which device it is: a check holds only while they do.
type DeviceCheck struct {
	Role       string            `json:"role"`
	Path       string            `json:"path"`
	Device     string            `json:"device"`
	MajorMinor string            `json:"majorMinor"`
	HardwareID string            `json:"hardwareID,omitempty"`
	SizeBytes  int64             `json:"sizeBytes"`
	Kernel     safety.KernelView `json:"kernel"`
	Cache      safety.DeviceView `json:"writeCache"`
	Probe      *safety.Probe     `json:"probe,omitempty"`
	Wear       *safety.Wear      `json:"wear,omitempty"`
	Verdict    safety.Verdict    `json:"verdict"`
	Reasons    []string          `json:"reasons"`
}

// CheckReport is the judgement of a volume: the worst of its devices, and what the policy makes
// of it.
type CheckReport struct {
	Volume  string         `json:"volume"`
	BootID  string         `json:"bootID"`
	At      time.Time      `json:"at"`
	Verdict safety.Verdict `json:"verdict"`
	Worn    bool           `json:"worn"`
	// WritebackAllowed is what the spec's policy makes of the verdict and the wear.
	WritebackAllowed bool          `json:"writebackAllowed"`
	Policy           string        `json:"policy"`
	Reasons          []string      `json:"reasons"`
	Devices          []DeviceCheck `json:"devices"`
}

// WayToWriteback says, by field, how a user who knows their disks enables writeback when the
// verdict keeps the volume in writethrough; empty when the verdict is Safe and only wear does.
func (c *CheckReport) WayToWriteback() string {
	if c == nil || c.Verdict == safety.Safe {
		return ""
	}
	return "if the write cache is battery or flash backed, say so with spec.safety.trustWriteCache: true; " +
		"spec.safety.policy: Warn enables writeback whatever the verdict"
}

// CacheWearPercent is the cache device's wear as SMART reported it, when it did.
func (c *CheckReport) CacheWearPercent() *int32 {
	if c == nil {
		return nil
	}
	for _, d := range c.Devices {
		if d.Role == "cache" && d.Wear != nil && d.Wear.PercentUsed != nil {
			w := int32(*d.Wear.PercentUsed)
			return &w
		}
	}
	return nil
}

// CheckDir keeps the last check of each volume for this boot and these devices: disks' caches
// can change across a reboot, a verdict is of the devices probed and no other, and a probe per
// apply would be I/O for nothing.
var CheckDir = "/run/flashcache/checks"

// Check judges both devices of the volume: the kernel's view, the device's own view of its write
// cache, timed writes and flushes on a scratch region (never user data, never the spare
// area), and for the cache device its SMART wear. It writes only to the scratch regions, and
// only on devices that are blank or this volume's.
func (e *Engine) Check(ctx context.Context, v Volume) (*CheckReport, error) {
	o, err := e.Observe(ctx, v)
	if err != nil {
		return nil, err
	}
	return e.check(ctx, v, o)
}

// check is Check on an observation of the host made just before, with nothing changed since.
func (e *Engine) check(ctx context.Context, v Volume, o *Observation) (*CheckReport, error) {
	if err := guard(v, o); err != nil {
		return nil, err
	}
	cacheOurs, backingOurs := ours(v, o)
	cacheBlank := len(o.CacheSigs) == 0 && len(o.Cache.Partitions) == 0
	backingBlank := len(o.BackingSigs) == 0

	rep := &CheckReport{Volume: v.Name, BootID: bootID(), At: time.Now().UTC(), Policy: string(v.Spec.Safety.EffectivePolicy())}
	cache, err := e.checkDevice(ctx, "cache", o.Cache, v.Spec.Safety.TrustWriteCache, func() (int64, int64, string) {
		if cacheOurs || cacheBlank {
			return safety.CacheScratchOffset, safety.CacheScratchBytes, ""
		}
		return 0, 0, "the device carries data that is not this volume's: nothing is written to it"
	})
	if err != nil {
		return nil, err
	}
	cache.Wear = e.wear(ctx, o.Cache, int(v.Spec.Safety.EffectiveMaxWearPercent()))
	if cache.Wear != nil && cache.Wear.Worn {
		rep.Worn = true
		cache.Reasons = append(cache.Reasons, cache.Wear.Reasons...)
	}
	backing, err := e.checkDevice(ctx, "backing", o.Backing, v.Spec.Safety.TrustWriteCache, func() (int64, int64, string) {
		if backingBlank {
			return safety.BackingScratchOffset, safety.BackingScratchBytes, ""
		}
		if backingOurs {
			if off, err := o.BackingSB.DataOffsetBytes(); err == nil && off >= safety.BackingScratchOffset+safety.BackingScratchBytes {
				return safety.BackingScratchOffset, safety.BackingScratchBytes, ""
			}
			return 0, 0, "this volume's data starts too early on the backing device to leave a scratch region"
		}
		return 0, 0, "the device carries data that is not this volume's: nothing is written to it"
	})
	if err != nil {
		return nil, err
	}
	rep.Devices = []DeviceCheck{cache, backing}
	rep.Verdict = safety.Combine(cache.Verdict, backing.Verdict)
	for _, d := range rep.Devices {
		rep.Reasons = append(rep.Reasons, fmt.Sprintf("%s %s: %s: %s", d.Role, d.Device, d.Verdict, strings.Join(d.Reasons, "; ")))
	}
	rep.WritebackAllowed = writebackAllowed(v, rep)
	if err := e.saveCheck(v, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// checkDevice judges one device. Its error is only that of waiting for the disks to probe: a
// failed probe is a reason in the verdict.
func (e *Engine) checkDevice(ctx context.Context, role string, d blockdev.Device, trusted bool, scratch func() (int64, int64, string)) (DeviceCheck, error) {
	c := DeviceCheck{Role: role, Path: d.Path, Device: d.DevPath, MajorMinor: d.MajorMinor, HardwareID: d.HardwareID, SizeBytes: d.SizeBytes,
		Kernel: safety.KernelViewOf(d), Cache: safety.DeviceViewOf(ctx, e.Run, d)}
	off, size, skip := scratch()
	if skip != "" {
		c.Probe = &safety.Probe{SkipReason: skip}
	} else {
		unlock, err := lockDisksToProbe(ctx, blockdev.DisksUnder(d.Name))
		if err != nil {
			return c, fmt.Errorf("probing the %s device %s: %w", role, d.DevPath, err)
		}
		c.Probe = probe(ctx, d, c.Kernel, off, size)
		unlock()
	}
	c.Verdict, c.Reasons = safety.Judge(c.Kernel, c.Cache, c.Probe, trusted)
	return c, nil
}

// probe times flushes on the scratch region [off, off+size) of d, again when the first probe's
// flush cost is near the bar, keeping the lowest; a probe that fails says why.
func probe(ctx context.Context, d blockdev.Device, k safety.KernelView, off, size int64) *safety.Probe {
	p, err := safety.SyncWriteProbe(ctx, d.DevPath, off, size, safety.DefaultProbeLimits)
	if err != nil {
		return &safety.Probe{SkipReason: err.Error()}
	}
	for again := 0; again < 2 && p.NearTheBar(k); again++ {
		next, err := safety.SyncWriteProbe(ctx, d.DevPath, off, size, safety.DefaultProbeLimits)
		if err != nil {
			break
		}
		p = safety.LowerFlushCost(p, next)
	}
	return p
}

// wear reads SMART; smartctl's exit status is a bit mask that is non-zero for a worn device, so
// its output is read whatever it exits with.
func (e *Engine) wear(ctx context.Context, d blockdev.Device, maxPercent int) *safety.Wear {
	out, _ := e.Run.SmartJSON(ctx, "/dev/"+d.Disk())
	w, err := safety.ParseSmart([]byte(out), maxPercent)
	if err != nil {
		return nil
	}
	return w
}

// lastCheck returns this boot's last check of the volume, if any, as long as it is of the
// devices the spec names now: a same-named volume rebuilt on other disks, a replaced SSD or a
// changed backing path is checked again. A backing LUN whose session is lost cannot be compared:
// that is an error, not "no check", which would make Apply write the safe mode into the kernel,
// a superblock write that waits on the lost session for its whole recovery timeout.
func (e *Engine) lastCheck(ctx context.Context, v Volume) (*CheckReport, error) {
	b, err := os.ReadFile(e.checkFile(v))
	if err != nil {
		return nil, nil
	}
	var rep CheckReport
	if json.Unmarshal(b, &rep) != nil || rep.BootID != bootID() {
		return nil, nil
	}
	same, err := e.sameDevices(ctx, v, &rep)
	if err != nil || !same {
		return nil, err
	}
	// The policy may have changed since; the measurements have not.
	rep.Policy = string(v.Spec.Safety.EffectivePolicy())
	rep.WritebackAllowed = writebackAllowed(v, &rep)
	return &rep, nil
}

// writebackAllowed is what the spec's policy makes of a check: Warn allows writeback whatever
// was found, Enforce only on devices judged Safe and a cache that is not worn. Unknown is not
// Safe: in writeback the SSD holds the only copy of dirty data.
func writebackAllowed(v Volume, rep *CheckReport) bool {
	return v.Spec.Safety.EffectivePolicy() == fcv1.SafetyPolicyWarn || (rep.Verdict == safety.Safe && !rep.Worn)
}

// sameDevices says whether the devices the spec names now are those rep judged; it fails only
// when the backing LUN's session is lost.
func (e *Engine) sameDevices(ctx context.Context, v Volume, rep *CheckReport) (bool, error) {
	cache, err := blockdev.Inspect(v.CachePath())
	if err != nil {
		return false, nil
	}
	backing, err := e.backingDevice(ctx, v)
	var lost *SessionLostError
	if errors.As(err, &lost) {
		return false, err
	}
	if err != nil {
		return false, nil
	}
	now := map[string]blockdev.Device{"cache": cache, "backing": backing}
	if len(rep.Devices) != len(now) {
		return false, nil
	}
	for _, c := range rep.Devices {
		d, ok := now[c.Role]
		if !ok || !c.isOf(d) {
			return false, nil
		}
	}
	return true, nil
}

func (c DeviceCheck) isOf(d blockdev.Device) bool {
	return c.Path == d.Path && c.Device == d.DevPath && c.MajorMinor == d.MajorMinor && c.HardwareID == d.HardwareID && c.SizeBytes == d.SizeBytes
}

func (e *Engine) checkFile(v Volume) string { return filepath.Join(CheckDir, v.Name+".json") }

// forgetCheck removes the volume's saved check: after a teardown, a volume of the same name is
// new, whatever disks it is built on.
func (e *Engine) forgetCheck(v Volume) error {
	if err := os.Remove(e.checkFile(v)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("forgetting the check: %w", err)
	}
	return nil
}

func (e *Engine) saveCheck(v Volume, rep *CheckReport) error {
	if err := os.MkdirAll(CheckDir, 0o755); err != nil {
		return fmt.Errorf("recording the check: %w", err)
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(e.checkFile(v), b, 0o644); err != nil {
		return fmt.Errorf("recording the check: %w", err)
	}
	return nil
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}
