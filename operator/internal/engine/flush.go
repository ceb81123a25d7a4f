package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// Status is what the volume looks like on the host.
type Status struct {
	Device        string `json:"device,omitempty"`
	StablePath    string `json:"stablePath,omitempty"`
	CacheSetUUID  string `json:"cacheSetUUID,omitempty"`
	BackingUUID   string `json:"backingUUID,omitempty"`
	CapacityBytes int64  `json:"capacityBytes,omitempty"`
	CacheMode     string `json:"cacheMode,omitempty"`
	State         string `json:"state,omitempty"`
	DirtyBytes    int64  `json:"dirtyBytes"`
	// DirtySince, set by Converge while the volume is dirty, is the last time it was seen clean:
	// no dirty data is older. Nil when clean, or not seen clean yet.
	DirtySince *time.Time `json:"dirtySince,omitempty"`
	Held       bool       `json:"held"`
	// HitRatioPercent, BypassedBytes are bcache's totals since the device was registered.
	HitRatioPercent int32 `json:"hitRatioPercent"`
	BypassedBytes   int64 `json:"bypassedBytes"`
	// WritebackRateBytes is the pace bcache's writeback aims at now, per second.
	WritebackRateBytes int64 `json:"writebackRateBytes"`
	// CacheAvailablePercent is the share of the cache set neither dirty nor pinned.
	CacheAvailablePercent int32 `json:"cacheAvailablePercent"`
	// BackingIOErrors are the backing disk's I/O errors bcache counted since it registered the
	// device; at BackingIOErrorLimit it stops the device (dirty data stays on the cache).
	BackingIOErrors     int64 `json:"backingIOErrors"`
	BackingIOErrorLimit int64 `json:"backingIOErrorLimit,omitempty"`
	// CacheIOErrors are the cache device's I/O errors bcache counted (and recovered from, by
	// reading the backing disk); at 8 it fails the cache set.
	CacheIOErrors int64 `json:"cacheIOErrors"`
}

// Dirty says whether the cache holds data the backing disk does not: bcache's dirty_data can
// lag its state file, so both must say so.
func (s *Status) Dirty() bool { return s.DirtyBytes > 0 && s.State != "clean" }

func statusOf(v Volume, o *Observation) *Status {
	s := &Status{}
	if o.BackingReg == nil {
		return s
	}
	s.Device = o.BackingReg.Device
	if s.Device == "" {
		// Registered, waiting for its cache set: nothing serves the volume.
		s.State = "waiting for its cache set"
		return s
	}
	s.StablePath = v.StablePath()
	s.CacheSetUUID = o.BackingReg.AttachedSet
	if o.BackingSB != nil {
		s.BackingUUID = o.BackingSB.UUID()
	}
	if d, err := blockdev.InspectName(o.BackingReg.Device); err == nil {
		s.CapacityBytes = d.SizeBytes
	}
	s.CacheMode, _ = blockdev.ActiveChoice(o.Knobs["cache_mode"])
	s.State = o.Knobs["state"]
	s.DirtyBytes, _ = blockdev.ParseHumanSize(o.Knobs["dirty_data"])
	s.BackingIOErrors, _ = strconv.ParseInt(o.Knobs["io_errors"], 10, 64)
	s.BackingIOErrorLimit, _ = strconv.ParseInt(o.Knobs["io_error_limit"], 10, 64)
	s.CacheIOErrors, _ = strconv.ParseInt(o.CacheKnobs["io_errors"], 10, 64)
	// Statistics only: a kernel that lacks one leaves it zero rather than failing the status.
	dir := o.BackingReg.Sysfs
	if v, err := blockdev.Knob(dir, "stats_total/cache_hit_ratio"); err == nil {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil {
			s.HitRatioPercent = int32(n)
		}
	}
	if v, err := blockdev.Knob(dir, "stats_total/bypassed"); err == nil {
		s.BypassedBytes, _ = blockdev.ParseHumanSize(v)
	}
	if v, err := blockdev.Knob(dir, "writeback_rate"); err == nil {
		s.WritebackRateBytes, _ = blockdev.ParseHumanSize(v)
	}
	if s.CacheSetUUID != "" {
		if v, err := blockdev.Knob(filepath.Join(blockdev.SysFsBcache, s.CacheSetUUID), "cache_available_percent"); err == nil {
			if n, err := strconv.ParseInt(v, 10, 32); err == nil {
				s.CacheAvailablePercent = int32(n)
			}
		}
	}
	return s
}

// Status observes the volume and reports it, changing nothing.
func (e *Engine) Status(ctx context.Context, v Volume) (*Status, error) {
	s, _, err := e.ObserveStatus(ctx, v)
	return s, err
}

// ObserveStatus is Status and the observation it was made from, which a caller that then changes
// nothing on the host hands to Converge (Desired.Observed) rather than have it observe again.
func (e *Engine) ObserveStatus(ctx context.Context, v Volume) (*Status, *Observation, error) {
	o, err := e.Observe(ctx, v)
	if err != nil {
		return nil, nil, err
	}
	s := statusOf(v, o)
	s.Held = e.held(v)
	return s, o, nil
}

// flushPoll is how often a flush looks at bcache's state.
const flushPoll = 100 * time.Millisecond

// FlushProgress is reported about once a second while a flush waits.
type FlushProgress struct {
	DirtyBytes int64         `json:"dirtyBytes"`
	State      string        `json:"state"`
	Elapsed    time.Duration `json:"elapsed"`
	// BytesPerSecond is the rate dirty data went down over the last interval.
	BytesPerSecond float64       `json:"bytesPerSecond"`
	ETA            time.Duration `json:"eta"`
}

// FlushResult is how a flush went.
type FlushResult struct {
	FlushedBytes int64         `json:"flushedBytes"`
	Duration     time.Duration `json:"duration"`
	// BytesPerSecond is the average rate over the whole flush.
	BytesPerSecond float64 `json:"bytesPerSecond"`
	Held           bool    `json:"held"`
}

// Flush writes every dirty block to the backing device and holds the volume in writethrough, so
// no new dirty data appears: writethrough first, then writeback unthrottled (percent 0, no pause
// between passes), then wait until bcache says clean. The hold stays until Release. A flush that
// only switched the mode could take hours: under target, writeback trickles at 4 KiB/s.
func (e *Engine) Flush(ctx context.Context, v Volume, timeout time.Duration, progress func(FlushProgress)) (*FlushResult, error) {
	o, err := e.Observe(ctx, v)
	if err != nil {
		return nil, err
	}
	if o.BackingReg == nil || o.BackingReg.Device == "" {
		return nil, fmt.Errorf("volume %s is not running on this host", v.Name)
	}
	// The hold goes first, so that an apply running meanwhile does not restore writeback.
	if err := e.setHold(v, true); err != nil {
		return nil, err
	}
	res, err := e.flush(ctx, v, o, timeout, progress)
	if res != nil {
		res.Held = true
	}
	return res, err
}

// flush is the blocking flush itself; the caller decides about holds.
func (e *Engine) flush(ctx context.Context, v Volume, o *Observation, timeout time.Duration, progress func(FlushProgress)) (*FlushResult, error) {
	dir := o.BackingReg.Sysfs
	// Measured before writeback is unleashed, so the rate covers all of it.
	first, _ := readDirty(dir)
	for _, knob := range []struct{ name, value string }{
		{"cache_mode", string(fcv1.CacheModeWritethrough)},
		{"writeback_delay", "0"},
		{"writeback_percent", "0"},
		// Someone may have stopped writeback; a flush that waited on it would never end.
		{"writeback_running", "1"},
	} {
		if err := blockdev.SetKnob(dir, knob.name, knob.value); err != nil {
			return nil, err
		}
	}

	start := time.Now()
	last, lastAt := first, start
	reported := time.Time{}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Poll often enough to time short flushes well; report progress about once a second.
	err := blockdev.WaitFor(ctx, flushPoll, fmt.Sprintf("volume %s to be clean", v.Name), func() (bool, error) {
		state, err := blockdev.Knob(dir, "state")
		if err != nil {
			return false, err
		}
		dirty, err := readDirty(dir)
		if err != nil {
			return false, err
		}
		now := time.Now()
		done := state == "clean" || state == "no cache"
		if progress != nil && (done || now.Sub(reported) >= time.Second) {
			p := FlushProgress{DirtyBytes: dirty, State: state, Elapsed: now.Sub(start)}
			if dt := now.Sub(lastAt).Seconds(); dt > 0 && dirty < last {
				p.BytesPerSecond = float64(last-dirty) / dt
				p.ETA = time.Duration(float64(dirty) / p.BytesPerSecond * float64(time.Second))
			}
			last, lastAt, reported = dirty, now, now
			progress(p)
		}
		// "clean" comes only after a full scan finds no dirty keys; "no cache" has none to flush.
		return done, nil
	})
	if err != nil {
		left, _ := readDirty(dir)
		return nil, fmt.Errorf("%w; %s of dirty data left, volume held in writethrough", err, humanSize(left))
	}
	elapsed := time.Since(start)
	res := &FlushResult{FlushedBytes: first, Duration: elapsed}
	if elapsed > 0 {
		res.BytesPerSecond = float64(first) / elapsed.Seconds()
	}
	return res, nil
}

// Release ends a hold and applies the spec again, which restores the configured mode and
// throttling.
func (e *Engine) Release(ctx context.Context, v Volume) (*Result, error) {
	if err := e.setHold(v, false); err != nil {
		return nil, err
	}
	return e.Apply(ctx, v, Desired{})
}

// FlushPass is the blocking flush of a pass that could not get clean in writeback (and of
// `flashcache node flush --pass`): when dirty data is present, flush it all in writethrough and go
// back to the configured mode. A volume held by a drain stays held.
func (e *Engine) FlushPass(ctx context.Context, v Volume, timeout time.Duration) (*FlushResult, error) {
	o, err := e.Observe(ctx, v)
	if err != nil {
		return nil, err
	}
	if o.BackingReg == nil || o.BackingReg.Device == "" {
		return nil, fmt.Errorf("volume %s is not running on this host", v.Name)
	}
	if o.Knobs["state"] != "dirty" {
		return &FlushResult{Held: e.held(v)}, nil
	}
	wasHeld := e.held(v)
	res, err := e.Flush(ctx, v, timeout, nil)
	if err != nil || wasHeld {
		return res, err
	}
	if _, err := e.Release(ctx, v); err != nil {
		return res, err
	}
	res.Held = false
	return res, nil
}

func readDirty(dir string) (int64, error) {
	s, err := blockdev.Knob(dir, "dirty_data")
	if err != nil {
		return 0, err
	}
	return blockdev.ParseHumanSize(s)
}
