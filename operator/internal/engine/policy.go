package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// The engine owns a volume's policy over time as well as its build: the flush pass behind
// spec.flushPeriod and a pass asked for on demand. What is due next is kept in a small state file
// per volume on the host, so that an agent or a `flashcache node run` loop that restarts, or a
// reboot, neither forgets a pass nor starts one early. The agent and `flashcache node` call
// Converge on an interval and translate its result; neither keeps a schedule of its own.

// DefaultStateDir is where the engine keeps each volume's state on a host; the agent mounts
// /var/lib/flashcache from the host, so the state outlives the pod.
const DefaultStateDir = "/var/lib/flashcache/state"

// Pass reasons.
const (
	PassFlushPeriod = "flushPeriod"
	PassRequested   = "requested"
)

// State is what the engine remembers of a volume between runs.
type State struct {
	// PeriodFrom is when the current pass interval (half a flush period) began: when the last
	// pass started, or when the engine first saw the volume with this flush period.
	PeriodFrom time.Time `json:"periodFrom"`
	// Period is the flush period PeriodFrom counts; a spec that changes it starts a new period.
	Period time.Duration `json:"period"`
	// Pass is the flush pass under way, if any.
	Pass *PassState `json:"pass,omitempty"`
	// FlushRequest is the last flush request honoured (Desired.FlushRequest).
	FlushRequest string `json:"flushRequest,omitempty"`
	// WearReadAt is when the cache device's SMART wear was last read while the volume ran.
	WearReadAt time.Time `json:"wearReadAt,omitzero"`
	// CleanSeenAt is the last time the volume was seen clean, to cleanSeenResolution: nothing
	// dirty now is older, which is what Status.DirtySince reports.
	CleanSeenAt time.Time `json:"cleanSeenAt,omitzero"`
	// Throttle is the write limit set on the volume's writers under spec.flushThrottle
	// Proportional, kept across passes: under a steady load the next pass needs it too.
	Throttle *WriteThrottle `json:"throttle,omitempty"`
}

// cleanSeenResolution is how often a clean volume's CleanSeenAt is saved: once a minute rather
// than every round, so DirtySince may be up to this much early. An age bound then errs long,
// never short.
const cleanSeenResolution = time.Minute

// noteClean records now as the last time the volume was seen clean, when it is clean and the
// recorded time is older than cleanSeenResolution, and says whether the state changed.
func (st *State) noteClean(dirty bool, now time.Time) bool {
	if dirty || now.Sub(st.CleanSeenAt) < cleanSeenResolution {
		return false
	}
	st.CleanSeenAt = now
	return true
}

// dirtySince is Status.DirtySince for a volume that is dirty or not.
func (st *State) dirtySince(dirty bool) *time.Time {
	if !dirty || st.CleanSeenAt.IsZero() {
		return nil
	}
	t := st.CleanSeenAt
	return &t
}

// PassState is a flush pass under way: writeback, paced or at full speed, in writeback mode, until
// clean.
type PassState struct {
	Reason       string    `json:"reason"`
	StartedAt    time.Time `json:"startedAt"`
	DirtyAtStart int64     `json:"dirtyAtStart"`
	// LimitFrom is when the pass's limit began counting, when not at its start: a pass asked for
	// while another ran replaces it, and what was dirty when that one began is due by its limit.
	LimitFrom time.Time `json:"limitFrom,omitzero"`
}

// limitFrom is when the pass's limit began counting.
func (p *PassState) limitFrom() time.Time {
	if p.LimitFrom.IsZero() {
		return p.StartedAt
	}
	return p.LimitFrom
}

// PassReport says what Converge did about flush passes in one run.
type PassReport struct {
	// Active is true while a pass runs after this run.
	Active bool   `json:"active"`
	Reason string `json:"reason,omitempty"`
	// Started, Ended and Finished in writethrough say what happened in this run: a pass that
	// did not get the volume clean or swept within its limit is finished by the blocking flush.
	Started bool `json:"started,omitempty"`
	Ended   bool `json:"ended,omitempty"`
	// Swept is true when the pass ended with the volume still dirty: every extent dirty when it
	// began was written back (bcache's btree dump said so), and what is dirty now was written since.
	Swept                    bool          `json:"swept,omitempty"`
	FinishedInWritethrough   bool          `json:"finishedInWritethrough,omitempty"`
	StartedAt                time.Time     `json:"startedAt,omitzero"`
	Elapsed                  time.Duration `json:"elapsed,omitempty"`
	DirtyAtStart             int64         `json:"dirtyAtStart,omitempty"`
	WritethroughFlushSeconds float64       `json:"writethroughFlushSeconds,omitempty"`
	// WriteLimitBytes is the limit on the volume's writers after this run, in bytes a second
	// (spec.flushThrottle Proportional); 0 for none.
	WriteLimitBytes int64 `json:"writeLimitBytes,omitempty"`
}

// Converge is one run of everything the engine owns for a volume at now: Apply (build or adopt,
// tunables, the cutoff while the cache fills, the durability check), then the flush pass that
// is due.
//
// A periodic pass starts every half flush period on a dirty volume. It writes back in writeback
// mode (Desired.Passing), so commits keep landing on the SSD while it runs, paced over three
// quarters of its limit and at full speed after that (Desired.PaceUntil); it ends when bcache
// reports the volume clean, or, where bcache's btree dump can be read, as soon as every extent
// dirty at its start has been written back (passSwept): a volume under a steady load is never
// clean, as bcache says clean only after a full scan of its index found nothing dirty. A pass
// that has done neither after its limit (half a flush period, and at least passLimitFloor) is
// finished by the blocking flush, in writethrough: a workload that dirties data faster than the
// backing disk writes it back would otherwise keep a pass from ever ending. Data
// written at t is therefore on the backing disk by t + DirtyAgeBound (the flush period, from two
// minutes up), plus the blocking flush's length when a pass needed it, plus the interval at which
// the caller runs Converge.
//
// A new want.FlushRequest starts a pass now if the volume is dirty. A pass under way covers only
// what was dirty at its start, so the request's replaces it, within that one's limit; a request
// that comes as a pass reaches its limit is served by the writethrough finish, which flushes
// everything. A request is honoured once, whatever the volume looked like then.
func (e *Engine) Converge(ctx context.Context, v Volume, want Desired, now time.Time) (*Result, *PassReport, error) {
	st, err := e.loadState(v)
	if err != nil {
		return nil, nil, err
	}
	pr := &PassReport{}
	wear, wearErr := e.watchWear(ctx, v, st, now, want.Observed)
	res, err := e.Apply(ctx, v, want)
	// The apply may have changed the host: the applies below observe it again.
	want.Observed = nil
	if res != nil {
		res.Wear = wear
		if wearErr != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("reading the cache device's wear: %v", wearErr))
		}
	}
	if err != nil || res.Status == nil || res.Status.Device == "" {
		return res, pr, err
	}
	dirty := res.Status.Dirty()
	inWriteback := res.Status.CacheMode == string(fcv1.CacheModeWriteback) && !res.Status.Held
	stateChanged := st.startPeriodIfNew(v.Spec.EffectiveFlushPeriod(), now)
	if st.noteClean(dirty, now) {
		stateChanged = true
	}
	swept, sweep := false, sweepReading{now: now, swept: -1}
	if st.Pass != nil && dirty && inWriteback {
		swept, sweep.swept = e.passSwept(v, st.Pass, res.Status)
		sweep.pass, sweep.deadline = st.Pass, st.Pass.limitFrom().Add(time.Duration(passSweepShare*float64(passLimit(v.Spec.EffectiveFlushPeriod()))))
	}
	if p := st.Pass; p != nil {
		pr.Reason, pr.StartedAt, pr.DirtyAtStart, pr.Elapsed = p.Reason, p.StartedAt, p.DirtyAtStart, now.Sub(p.StartedAt)
	}
	requested := want.FlushRequest != "" && want.FlushRequest != st.FlushRequest
	if requested {
		st.FlushRequest, stateChanged = want.FlushRequest, true
	}
	// A pass that swept its start extents is done, unless a request came for what is dirty now.
	swept = swept && !requested
	switch next := nextPass(st, dirty && !swept, inWriteback, v.Spec.EffectiveFlushPeriod(), now, requested); next {
	case passCovered:
		// A drain's hold or a safety downgrade flushed the volume in writethrough meanwhile.
		pr.Ended = true
		st.Pass, st.PeriodFrom, stateChanged = nil, now, true
	case passEnd:
		pr.Ended, pr.Swept = true, swept
		if swept && st.Pass.StartedAt.After(st.CleanSeenAt) {
			// Nothing dirty now was written before the pass began.
			st.CleanSeenAt = st.Pass.StartedAt
		}
		st.Pass = nil
		if err := e.saveState(v, st); err != nil {
			return res, pr, err
		}
		stateChanged = false
		if res, err = e.reapply(ctx, v, want, res); err != nil {
			return res, pr, err
		}
	case passFinishInWritethrough:
		e.Log.Info("flush pass did not write back what was dirty at its start within its limit: finishing it in writethrough", "volume", v.Name,
			"startedAt", st.Pass.StartedAt, "dirty", res.Status.DirtyBytes, "startExtentsWrittenBack", sweep.swept)
		// The pass ends here, so that the apply at the end of the blocking flush restores the
		// spec's throttle rather than the pass's.
		st.Pass = nil
		if err := e.saveState(v, st); err != nil {
			return res, pr, err
		}
		stateChanged = false
		flushed, err := e.FlushPass(ctx, v, DowngradeFlushTimeout)
		if err != nil {
			return res, pr, fmt.Errorf("finishing the flush pass in writethrough: %w", err)
		}
		pr.Ended, pr.FinishedInWritethrough, pr.WritethroughFlushSeconds = true, true, flushed.Duration.Seconds()
		// The blocking flush ended with the volume clean.
		st.CleanSeenAt, stateChanged = now.Add(flushed.Duration), true
		if res.Status, err = e.Status(ctx, v); err != nil {
			return res, pr, err
		}
	case passGoesOn:
		pr.Active = true
	case passNewPeriod, passStart, passStartRequested, passRestartRequested:
		st.PeriodFrom, stateChanged = now, true
		if next == passNewPeriod {
			break
		}
		reason := PassFlushPeriod
		if next != passStart {
			reason = PassRequested
		}
		pass := &PassState{Reason: reason, StartedAt: now, DirtyAtStart: res.Status.DirtyBytes}
		if next == passRestartRequested {
			pass.LimitFrom = st.Pass.limitFrom()
		}
		st.Pass = pass
		pr.Started, pr.Active, pr.Reason, pr.StartedAt, pr.DirtyAtStart, pr.Elapsed = true, true, reason, now, res.Status.DirtyBytes, 0
		// Recorded before the knobs change, so a crash in between is seen as a pass that runs.
		if err := e.saveState(v, st); err != nil {
			return res, pr, err
		}
		stateChanged = false
		if res, err = e.reapply(ctx, v, want, res); err != nil {
			return res, pr, err
		}
	}
	if !pr.Active {
		sweep.pass = nil
	}
	hadLimit := st.Throttle != nil
	if pr.WriteLimitBytes, err = e.throttleWrites(v, st, res.Status, sweep, pr.FinishedInWritethrough); err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("flush throttle: %v", err))
	}
	if stateChanged || hadLimit || st.Throttle != nil {
		if err := e.saveState(v, st); err != nil {
			return res, pr, err
		}
	}
	if res.Status != nil {
		res.Status.DirtySince = st.dirtySince(res.Status.Dirty())
	}
	return res, pr, nil
}

// WearReading is a reading of the cache device's wear while the volume runs.
type WearReading struct {
	At time.Time `json:"at"`
	// PercentUsed is SMART's estimate of the life used, when the device gives one.
	PercentUsed *int `json:"percentUsed,omitempty"`
	Worn        bool `json:"worn"`
	// BecameWorn is true on the reading that found the cache worn for the first time this boot.
	BecameWorn bool     `json:"becameWorn,omitempty"`
	Reasons    []string `json:"reasons,omitempty"`
}

// watchWear reads the cache device's wear again when safety.wearCheckInterval has passed since
// the last reading (or the check), and records it in the saved check, which Apply then follows:
// under Enforce a cache found worn is flushed and held in writethrough in the same run. Without a
// check this boot there is nothing to update: the check reads the wear itself.
func (e *Engine) watchWear(ctx context.Context, v Volume, st *State, now time.Time, observed *Observation) (*WearReading, error) {
	interval := v.Spec.Safety.EffectiveWearCheckInterval()
	check, err := e.lastCheck(ctx, v)
	if err != nil {
		return nil, err
	}
	if interval <= 0 || check == nil {
		return nil, nil
	}
	last := check.At
	if st.WearReadAt.After(last) {
		last = st.WearReadAt
	}
	if now.Sub(last) < interval {
		return nil, nil
	}
	o := observed
	if o == nil {
		var err error
		if o, err = e.Observe(ctx, v); err != nil {
			return nil, err
		}
	}
	st.WearReadAt = now
	if err := e.saveState(v, st); err != nil {
		return nil, err
	}
	w := e.wear(ctx, o.Cache, int(v.Spec.Safety.EffectiveMaxWearPercent()))
	reading := &WearReading{At: now}
	if w != nil {
		reading.PercentUsed, reading.Worn, reading.Reasons = w.PercentUsed, w.Worn, w.Reasons
	}
	reading.BecameWorn = reading.Worn && !check.Worn
	for i := range check.Devices {
		if check.Devices[i].Role == "cache" {
			check.Devices[i].Wear = w
		}
	}
	if reading.BecameWorn {
		check.Worn = true
		check.Reasons = append(check.Reasons, "cache worn while running: "+strings.Join(reading.Reasons, "; "))
	}
	check.WritebackAllowed = writebackAllowed(v, check)
	if err := e.saveCheck(v, check); err != nil {
		return reading, err
	}
	return reading, nil
}

// startPeriodIfNew starts counting a period at now when none was counted yet or the spec's flush
// period changed (turned on from 0s, say: data dirtied while it was off is then written back within
// the new period), and says whether the state changed.
func (st *State) startPeriodIfNew(period time.Duration, now time.Time) bool {
	if !st.PeriodFrom.IsZero() && st.Period == period {
		return false
	}
	st.PeriodFrom, st.Period = now, period
	return true
}

// passAction is what is due about flush passes.
type passAction int

const (
	passNothing passAction = iota
	// passNewPeriod: a period ended on a clean volume; the next one starts.
	passNewPeriod
	passStart
	passStartRequested
	// passRestartRequested: a pass was asked for while another ran. That one covers only what
	// was dirty at its start, the request everything dirty now: a new pass starts, within the
	// limit of the one it replaces.
	passRestartRequested
	passGoesOn
	// passEnd: the volume is clean; the pass is done.
	passEnd
	// passFinishInWritethrough: the pass ran its limit without getting the volume clean.
	passFinishInWritethrough
	// passCovered: the volume left writeback (a drain's hold, a downgrade), which flushes it.
	passCovered
)

// nextPass decides what is due about flush passes, from the state, what the volume looks like
// and the time.
func nextPass(st *State, dirty, inWriteback bool, period time.Duration, now time.Time, flushNow bool) passAction {
	switch {
	case st.Pass != nil && !inWriteback:
		return passCovered
	case st.Pass != nil && !dirty:
		return passEnd
	case st.Pass != nil && now.Sub(st.Pass.limitFrom()) >= passLimit(period):
		return passFinishInWritethrough
	case st.Pass != nil && flushNow:
		return passRestartRequested
	case st.Pass != nil:
		return passGoesOn
	case !inWriteback:
		return passNothing
	case flushNow && dirty:
		return passStartRequested
	case period > 0 && now.Sub(st.PeriodFrom) >= passInterval(period) && dirty:
		return passStart
	case period > 0 && now.Sub(st.PeriodFrom) >= passInterval(period):
		return passNewPeriod
	}
	return passNothing
}

// passLimitFloor keeps a short flushPeriod from turning every pass into a blocking flush: a
// backing disk needs some time for any amount of dirty data.
const passLimitFloor = time.Minute

// passLimit is how long a pass may run in writeback mode before the blocking flush finishes it.
func passLimit(period time.Duration) time.Duration {
	return max(passInterval(period), passLimitFloor)
}

// passInterval is how often a periodic pass starts: every half period. Data written at t is then
// covered by a pass that starts by t + period/2 and is clean within its limit, another half
// period: on the backing disk by t + period, which is what flushPeriod promises.
func passInterval(period time.Duration) time.Duration {
	return period / 2
}

// passPaceShare is the part of a periodic pass's limit over which it spreads its writeback; the
// rest is left at full speed, before the blocking flush, for data dirtied faster than the pace.
const passPaceShare = 0.75

// passPaceUntil is when a pass that started at startedAt should have written its dirty data back,
// or zero when it is not paced: a pass asked for goes at full speed, as its caller waits for it.
func passPaceUntil(p *PassState, period time.Duration) time.Time {
	if p == nil || p.Reason != PassFlushPeriod {
		return time.Time{}
	}
	return p.StartedAt.Add(passPaceOver(period))
}

// passPaceOver is how long a periodic pass spreads its writeback over.
func passPaceOver(period time.Duration) time.Duration {
	return time.Duration(passPaceShare * float64(passLimit(period)))
}

// kernelWritebackRateMinimum is bcache's own floor of the writeback rate, in 512-byte sectors a
// second: 4 KiB/s, a trickle. Outside a pass the engine keeps it there, so a pass's floor never
// outlives it.
const kernelWritebackRateMinimum = 8

// passPace is the writeback rate floor, in sectors a second, that writes dirtyBytes back over the
// pass's pace (over), and whether the pass is still paced (time is left). bcache applies the floor
// at its next rate update (writeback_rate_update_seconds, 5 s by default). Each run of Converge
// sizes it again from what is dirty then, so data dirtied during the pass raises it, but over
// the whole pace, not the time left: under a steady load as much is dirty late in a pass as at
// its start, and a floor over the time left climbed past what the backing disk takes for the
// last part of every pass. A pass that falls behind goes at full speed after its pace, and is
// finished in writethrough at its limit.
func passPace(dirtyBytes int64, over, left time.Duration) (int64, bool) {
	if left <= 0 || over <= 0 {
		return 0, false
	}
	sectors := int64(math.Ceil(float64(dirtyBytes) / 512 / over.Seconds()))
	return max(sectors, kernelWritebackRateMinimum), true
}

// paceTunable sets the rate floor half as high again as needed, and accepts anything from the
// need to three times it, so that a pass rewrites the knob a few times as the deadline nears, not
// at every run.
func paceTunable(sectors int64) tunable {
	return tunable{"writeback_rate_minimum", strconv.FormatInt(sectors*3/2, 10), func(have string) bool {
		n, err := strconv.ParseInt(strings.TrimSpace(have), 10, 64)
		return err == nil && n >= sectors && n <= 3*sectors
	}}
}

// DirtyAgeBound is how long data written in writeback may stay on the cache alone when the
// passes keep up: half a period until a pass starts, then the pass's limit, after which the
// blocking flush finishes it (that flush's own length comes on top). That is the flush period
// itself from two minutes up; a shorter period's passes get at least passLimitFloor. 0 for no
// flush period.
func DirtyAgeBound(period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	return passInterval(period) + passLimit(period)
}

// reapply runs Apply again after the state changed (a pass began or ended), and merges its steps
// into the earlier result, so a caller sees every change of this run.
func (e *Engine) reapply(ctx context.Context, v Volume, want Desired, earlier *Result) (*Result, error) {
	res, err := e.Apply(ctx, v, want)
	if res != nil {
		res.Steps = append(earlier.Steps, res.Steps...)
		res.Changed = res.Changed || earlier.Changed
	}
	return res, err
}

// desired completes what a caller wants with what the engine keeps on the host: a drain's hold,
// and a flush pass under way, which every run, Converge's or a plain apply's, keeps unthrottled
// until Converge ends it.
func (e *Engine) desired(v Volume, want Desired) Desired {
	want.Hold = want.Hold || e.held(v)
	if st, err := e.loadState(v); err == nil && st.Pass != nil && !want.Hold {
		want.Passing = true
		want.PaceUntil = passPaceUntil(st.Pass, v.Spec.EffectiveFlushPeriod())
		want.PaceOver = passPaceOver(v.Spec.EffectiveFlushPeriod())
	}
	return want
}

func (e *Engine) statePath(v Volume) string {
	dir := e.StateDir
	if dir == "" {
		dir = DefaultStateDir
	}
	return filepath.Join(dir, v.Name+".json")
}

// loadState reads the volume's state; a volume never seen has an empty one.
func (e *Engine) loadState(v Volume) (*State, error) {
	b, err := os.ReadFile(e.statePath(v))
	if errors.Is(err, os.ErrNotExist) {
		return &State{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the volume's state: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		// A torn write (power cut) loses the schedule, not the volume: start counting again.
		e.Log.Info("the volume's state file is unreadable: starting its schedule again", "volume", v.Name, "error", err.Error())
		return &State{}, nil
	}
	return &st, nil
}

// saveState writes the state through a temporary file and a rename, so a crash leaves the old
// state or the new one.
func (e *Engine) saveState(v Volume, st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomically(e.statePath(v), b); err != nil {
		return fmt.Errorf("recording the volume's state: %w", err)
	}
	return nil
}

// writeFileAtomically writes b through a temporary file and a rename, so a crash leaves the old
// file or the new one.
func writeFileAtomically(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// forgetState removes the volume's state, at teardown.
func (e *Engine) forgetState(v Volume) error {
	for _, path := range []string{e.statePath(v), e.passExtentsPath(v)} {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the volume's state: %w", err)
		}
	}
	return nil
}

// A pass ends when bcache reports the volume clean, which under a steady load it never does: it
// does so only after one scan of its whole index found no dirty key, and the load dirties keys
// all the time. What the age bound needs is less: that the data dirty when the pass began has
// reached the backing disk. bcache's btree dump shows where each dirty extent's data lies on the
// cache; data is never rewritten in place there (see blockdev.CacheExtent), so once none of the
// extents dirty at the pass's start is dirty any more, every byte written before it is on the
// backing disk or was overwritten since. The pass then ends without the writethrough finish.

// passExtents is the dirty extents of the volume, read once a pass has begun.
type passExtents struct {
	// PassStartedAt names the pass they were read for, CacheSet the cache set they lie on.
	PassStartedAt time.Time `json:"passStartedAt"`
	CacheSet      string    `json:"cacheSet"`
	// ReadAt is when they were read: anything dirty then is in them.
	ReadAt  time.Time              `json:"readAt"`
	Extents []blockdev.CacheExtent `json:"extents"`
	// NoneLeftAt is when a reading first found none of them dirty. The pass ends only when the
	// next reading agrees: the dump is read key by key while bcache works, and a piece of an
	// extent that an overwrite split behind the reader's position is missed by that one reading,
	// never by two that follow each other with nothing moving the piece.
	NoneLeftAt time.Time `json:"noneLeftAt,omitzero"`
}

func (e *Engine) passExtentsPath(v Volume) string {
	return strings.TrimSuffix(e.statePath(v), ".json") + ".pass-extents"
}

// passSwept says whether every extent dirty early in the pass p has been written back. In the
// first run of the pass it reads them (any moment after the pass began will do: what was dirty
// before is dirty then, or written back already) and says no. Without the dump (debugfs not
// there) or with one it cannot read, it says no, and the pass ends as before: clean, or in
// writethrough at its limit.
//
// It also says what share of the sectors of those extents is no longer dirty, -1 when it cannot
// tell (no dump, or the first reading).
func (e *Engine) passSwept(v Volume, p *PassState, s *Status) (bool, float64) {
	inode, err := blockdev.BackingInode(s.CacheSetUUID, s.Device)
	if err != nil {
		e.Log.V(1).Info("flush pass: no bcache id for the backing device; the pass ends when clean", "volume", v.Name, "error", err.Error())
		return false, -1
	}
	now, err := blockdev.DirtyExtents(s.CacheSetUUID, inode)
	if err != nil {
		e.Log.V(1).Info("flush pass: no btree dump to read; the pass ends when clean", "volume", v.Name, "error", err.Error())
		return false, -1
	}
	var before passExtents
	b, err := os.ReadFile(e.passExtentsPath(v))
	if err == nil {
		err = json.Unmarshal(b, &before)
	}
	if err != nil || !before.PassStartedAt.Equal(p.StartedAt) || before.CacheSet != s.CacheSetUUID {
		before = passExtents{PassStartedAt: p.StartedAt, CacheSet: s.CacheSetUUID, ReadAt: time.Now(), Extents: mergeExtents(now)}
		e.savePassExtents(v, &before)
		// Nothing to compare yet: what bcache wrote back since the pass began is not in them.
		return false, -1
	}
	left := blockdev.StillDirty(before.Extents, now)
	var total uint64
	for _, x := range before.Extents {
		total += x.Sectors
	}
	swept := 1.0
	if total > 0 {
		swept = 1 - float64(left)/float64(total)
	}
	e.Log.V(1).Info("flush pass: extents dirty at its start still dirty", "volume", v.Name, "sectors", left, "of", total)
	if left == 0 && !before.NoneLeftAt.IsZero() {
		return true, swept
	}
	if (left == 0) != !before.NoneLeftAt.IsZero() {
		before.NoneLeftAt = time.Time{}
		if left == 0 {
			before.NoneLeftAt = time.Now()
		}
		e.savePassExtents(v, &before)
	}
	return false, swept
}

// savePassExtents records a pass's extents; a pass that cannot goes on until clean or its limit.
func (e *Engine) savePassExtents(v Volume, pe *passExtents) {
	b, err := json.Marshal(pe)
	if err == nil {
		err = writeFileAtomically(e.passExtentsPath(v), b)
	}
	if err != nil {
		e.Log.Info("flush pass: recording the extents dirty at its start", "volume", v.Name, "error", err.Error())
	}
}

// mergeExtents joins extents that follow each other on the cache: the initial copy and
// sequential writes make long runs of them, and the file stays small.
func mergeExtents(ext []blockdev.CacheExtent) []blockdev.CacheExtent {
	out := make([]blockdev.CacheExtent, 0, len(ext))
	for _, x := range ext {
		if n := len(out); n > 0 && out[n-1].Dev == x.Dev && out[n-1].Gen == x.Gen && out[n-1].Offset+out[n-1].Sectors == x.Offset {
			out[n-1].Sectors += x.Sectors
			continue
		}
		out = append(out, x)
	}
	return out
}
