package engine

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// A pass that cannot write back what was dirty at its start before its limit is finished in
// writethrough, and the database then runs at the backing disk's pace, all at once, for as long
// as that flush takes. Under spec.flushThrottle Proportional the engine sees it coming: every
// run it compares the share of the start extents written back with the share of the pass's time
// gone (its schedule), and while the sweep is behind it limits the bytes a second that the
// volume's writers may write (blockdev.SetWriteLimit), a little more each run it stays behind and
// a little less each run it is ahead. Fewer new dirty extents then land ahead of bcache's
// writeback, which works through the index in key order, and the sweep reaches the end of the
// start extents sooner. The limit is kept from one pass to the next, which under a steady load
// follow each other, so that it settles rather than swings; the writethrough finish stays, for a
// pass the limit could not save.

// WriteThrottle is the write limit on a volume's writers and what the engine read to size it.
type WriteThrottle struct {
	// BytesPerSecond is the limit on all the volume's writers together; 0 when none is set.
	BytesPerSecond int64 `json:"bytesPerSecond,omitempty"`
	// Unthrottled is the write rate when the limit was first set: the limit never goes below a
	// share of it (writeLimitLeastShare), and is lifted once a pass ahead of its time raises it
	// that high.
	Unthrottled int64 `json:"unthrottled,omitempty"`
	// Device is the major:minor the limit is set for, and Cgroups the top-level cgroups it is
	// set on, with each one's part.
	Device  string           `json:"device,omitempty"`
	Cgroups map[string]int64 `json:"cgroups,omitempty"`

	// ReadAt is the last reading: the bytes written to the device and by each cgroup until then,
	// the pass it belonged to, and the share of that pass's start extents written back.
	ReadAt        time.Time        `json:"readAt,omitzero"`
	WrittenBytes  int64            `json:"writtenBytes,omitempty"`
	CgroupWrites  map[string]int64 `json:"cgroupWrites,omitempty"`
	PassStartedAt time.Time        `json:"passStartedAt,omitzero"`
	Swept         float64          `json:"swept,omitempty"`
}

const (
	// writeLimitFloor is the least the limit goes to: the writethrough finish it stands in for
	// lets a database write about as much, at the backing disk's pace.
	writeLimitFloor = 1 << 20
	// writeLimitLeastShare is the least share of the unthrottled write rate the limit keeps: held
	// lower, the database runs as slowly as under the writethrough finish, for longer.
	writeLimitLeastShare = 0.4
	// passSweepShare is the part of the pass's limit by which the throttle aims to have swept
	// the start extents, leaving the rest for the sweep's tail.
	passSweepShare = 0.85
	// The sweep is behind its schedule by more than sweepBehind (a share of the start extents)
	// or ahead of it by more than sweepAhead; in between the limit holds. Far behind, the limit
	// falls faster.
	sweepBehind, sweepFarBehind, sweepAhead = 0.03, 0.1, 0.1
	// A limit moves by these factors a run: gently, as bcache's sweep is lumpy and the load's
	// response to a limit takes a run or two to show.
	limitDown, limitDownFast, limitUp = 0.93, 0.85, 1.1
	// writethroughFinishCut is how the limit is cut when a pass had to be finished in
	// writethrough all the same.
	writethroughFinishCut = 0.85
)

// sweepReading is what one run saw of the volume for the throttle.
type sweepReading struct {
	now          time.Time
	writtenBytes int64
	// pass is the pass under way, nil for none; swept is the share of its start extents written
	// back, -1 when unknown (no btree dump, or the pass's first reading of it).
	pass     *PassState
	deadline time.Time
	swept    float64
}

// nextWriteLimit records the reading r and returns the limit on all writers together that it
// calls for, 0 for none.
func (t *WriteThrottle) nextWriteLimit(r sweepReading) int64 {
	dt := r.now.Sub(t.ReadAt).Seconds()
	writeRate := 0.0
	if !t.ReadAt.IsZero() && dt > 0 && r.writtenBytes >= t.WrittenBytes {
		writeRate = float64(r.writtenBytes-t.WrittenBytes) / dt
	}
	t.ReadAt, t.WrittenBytes = r.now, r.writtenBytes
	limit := t.BytesPerSecond
	if r.pass == nil || r.swept < 0 || !r.deadline.After(r.pass.StartedAt) {
		// Between passes the limit holds: under a steady load the next pass needs it too.
		t.PassStartedAt, t.Swept = time.Time{}, 0
		return limit
	}
	t.PassStartedAt, t.Swept = r.pass.StartedAt, r.swept
	due := min(r.now.Sub(r.pass.StartedAt).Seconds()/r.deadline.Sub(r.pass.StartedAt).Seconds(), 1)
	lag := due - r.swept
	switch {
	case lag > sweepBehind:
		down := limitDown
		if lag > sweepFarBehind {
			down = limitDownFast
		}
		base := float64(limit)
		if limit == 0 {
			if writeRate < writeLimitFloor {
				// Too little is written for a limit to make room.
				return 0
			}
			base, t.Unthrottled = writeRate, int64(writeRate)
		}
		return max(int64(base*down), t.least())
	case lag < -sweepAhead && limit > 0:
		raised := int64(float64(limit) * limitUp)
		if raised >= t.Unthrottled {
			return 0
		}
		return raised
	}
	return limit
}

// least is the lowest the limit goes.
func (t *WriteThrottle) least() int64 {
	return max(int64(writeLimitLeastShare*float64(t.Unthrottled)), writeLimitFloor)
}

// afterWritethroughFinish is the limit to keep after a pass was finished in writethrough: lower
// than the one that did not save it, so the next pass starts further ahead.
func (t *WriteThrottle) afterWritethroughFinish() int64 {
	if t.BytesPerSecond == 0 {
		return 0
	}
	return max(int64(float64(t.BytesPerSecond)*writethroughFinishCut), t.least())
}

// writeLimitKept says whether a volume keeps a write limit this run: its spec asks for one, and it
// is in writeback, dirty or with a pass under way. A pass finished in writethrough this run left
// it clean, and the status read right after the blocking flush can say so before its writers
// write again; they go on, and the lowered limit is kept for the next pass.
func writeLimitKept(v Volume, s *Status, passing, finishedInWritethrough bool) bool {
	return v.Spec.EffectiveFlushThrottle() == fcv1.FlushThrottleProportional &&
		s != nil && s.Device != "" && (passing || s.Dirty() || finishedInWritethrough) &&
		s.CacheMode == string(fcv1.CacheModeWriteback) && !s.Held
}

// throttleWrites sizes the volume's write limit from this run's reading and sets it on the
// cgroups that write to the device, in proportion to what each wrote since the last run. A
// volume that keeps none (writeLimitKept) has its limit lifted.
func (e *Engine) throttleWrites(v Volume, st *State, s *Status, r sweepReading, finishedInWritethrough bool) (int64, error) {
	if !writeLimitKept(v, s, r.pass != nil, finishedInWritethrough) {
		return 0, e.liftWriteLimit(v, st)
	}
	dev, err := blockdev.DeviceNumber(s.Device)
	if err != nil {
		return 0, err
	}
	if st.Throttle != nil && st.Throttle.Device != dev {
		// The device was made again under another number: its old limits went with it.
		st.Throttle = nil
	}
	if st.Throttle == nil {
		st.Throttle = &WriteThrottle{Device: dev}
	}
	t := st.Throttle
	if r.writtenBytes, err = blockdev.WrittenBytes(s.Device); err != nil {
		return t.BytesPerSecond, err
	}
	limit := t.nextWriteLimit(r)
	if finishedInWritethrough {
		limit = t.afterWritethroughFinish()
	}
	if err := blockdev.EnableIOController(); err != nil {
		return 0, err
	}
	writes, err := blockdev.CgroupWrites(dev)
	if err != nil {
		return t.BytesPerSecond, err
	}
	parts := limitParts(limit, t.CgroupWrites, writes)
	t.CgroupWrites = writes
	if limit != t.BytesPerSecond {
		e.Log.Info("flush pass: write limit", "volume", v.Name, "bytesPerSecond", limit, "was", t.BytesPerSecond,
			"swept", t.Swept, "cgroups", parts)
	}
	err = setLimitParts(dev, t.Cgroups, parts)
	t.BytesPerSecond, t.Cgroups = limit, parts
	if err != nil {
		return limit, fmt.Errorf("setting the write limit: %w", err)
	}
	return limit, nil
}

// setLimitParts sets each cgroup's part of the limit on the device dev, and lifts it from the
// cgroups in was that have no part any more.
func setLimitParts(dev string, was, parts map[string]int64) error {
	var errs []error
	for _, cg := range slices.Sorted(maps.Keys(was)) {
		if _, ok := parts[cg]; !ok {
			errs = append(errs, blockdev.SetWriteLimit(cg, dev, 0))
		}
	}
	for cg, bps := range parts {
		// Written again each run, and only on a change worth making: systemd may have turned
		// the io controller off and on meanwhile, which drops the limit, and a small change
		// rewritten every run would restart what blk-throttle already let through.
		if have, err := blockdev.WriteLimit(cg, dev); err == nil && have > 0 && math.Abs(float64(have-bps)) <= 0.1*float64(bps) {
			continue
		}
		errs = append(errs, blockdev.SetWriteLimit(cg, dev, bps))
	}
	return errors.Join(errs...)
}

// limitParts splits limit among the cgroups that wrote at least a hundredth of what was written
// to the device since the last reading, in proportion to what each wrote; none when limit is 0.
func limitParts(limit int64, before, now map[string]int64) map[string]int64 {
	if limit <= 0 {
		return nil
	}
	deltas, total := map[string]int64{}, int64(0)
	for cg, n := range now {
		if d := n - before[cg]; d > 0 {
			deltas[cg], total = d, total+d
		}
	}
	parts := map[string]int64{}
	for cg, d := range deltas {
		if d*100 < total {
			// Next to nothing: a limit there would make no room.
			continue
		}
		parts[cg] = max(limit*d/total, writeLimitFloor)
	}
	return parts
}

// liftWriteLimit removes the volume's write limit from every cgroup it was set on.
func (e *Engine) liftWriteLimit(v Volume, st *State) error {
	t := st.Throttle
	if t == nil {
		return nil
	}
	if err := setLimitParts(t.Device, t.Cgroups, nil); err != nil {
		return fmt.Errorf("lifting the write limit: %w", err)
	}
	if t.BytesPerSecond > 0 {
		e.Log.Info("flush pass: write limit lifted", "volume", v.Name, "was", t.BytesPerSecond)
	}
	st.Throttle = nil
	return nil
}
