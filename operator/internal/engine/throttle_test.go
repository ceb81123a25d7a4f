package engine

import (
	"testing"
	"time"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
)

// feed runs the throttle over readings every 10 s of a pass that started at t0 and must sweep by
// t0+deadline, with the writers writing writeRate bytes a second, and returns the limits.
func feed(t *WriteThrottle, pass *PassState, deadline time.Duration, writeRate int64, swept []float64) []int64 {
	var limits []int64
	written := int64(0)
	for i, s := range swept {
		now := pass.StartedAt.Add(time.Duration(i+1) * 10 * time.Second)
		written += writeRate * 10
		limit := t.nextWriteLimit(sweepReading{now: now, writtenBytes: written, pass: pass, deadline: pass.StartedAt.Add(deadline), swept: s})
		t.BytesPerSecond = limit
		limits = append(limits, limit)
	}
	return limits
}

func TestWriteLimitFallsWhileTheSweepLagsAndLiftsWhenAhead(t *testing.T) {
	pass := &PassState{Reason: PassFlushPeriod, StartedAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	th := &WriteThrottle{}
	// 100 s to the deadline: 10% of the sweep is due a run. 2% a run falls behind.
	limits := feed(th, pass, 100*time.Second, 8<<20, []float64{0.1, 0.12, 0.14, 0.16, 0.18, 0.2, 0.22, 0.24, 0.26, 0.28, 0.3, 0.32, 0.34, 0.36})
	if limits[0] != 0 {
		t.Fatalf("a limit on schedule: %v", limits)
	}
	if limits[1] == 0 || limits[1] >= 8<<20 || limits[2] >= limits[1] {
		t.Fatalf("the limit did not fall below the write rate while the sweep lagged: %v", limits)
	}
	if down := limitDownFast; limits[1] < int64(down*float64(8<<20))-1 {
		t.Fatalf("the first limit fell further than a run's step: %d", limits[1])
	}
	if th.Unthrottled != 8<<20 {
		t.Fatalf("unthrottled rate %d, want the write rate before the limit", th.Unthrottled)
	}
	share := writeLimitLeastShare
	if least := int64(share * float64(8<<20)); limits[len(limits)-1] != least {
		t.Fatalf("far behind for long, the limit is %d, want its least, %d: %v", limits[len(limits)-1], least, limits)
	}
	// The next pass runs well ahead of its schedule: the limit rises, then is lifted.
	next := &PassState{Reason: PassFlushPeriod, StartedAt: pass.StartedAt.Add(10 * time.Minute)}
	swept := []float64{}
	for i := range 20 {
		swept = append(swept, min(0.3+0.05*float64(i), 0.99))
	}
	more := feed(th, next, 200*time.Second, 3<<20, swept)
	if more[0] <= limits[len(limits)-1] {
		t.Fatalf("the limit did not rise with the sweep ahead: %v", more)
	}
	if more[len(more)-1] != 0 {
		t.Fatalf("the limit was not lifted with the sweep ahead for long: %v", more)
	}
}

func TestWriteLimitHoldsOnScheduleAndBetweenPasses(t *testing.T) {
	pass := &PassState{Reason: PassFlushPeriod, StartedAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	th := &WriteThrottle{BytesPerSecond: 4 << 20, Unthrottled: 8 << 20}
	// 10% a run, 100 s to the deadline: on schedule.
	limits := feed(th, pass, 100*time.Second, 4<<20, []float64{0.1, 0.2, 0.3, 0.4})
	for _, l := range limits {
		if l != 4<<20 {
			t.Fatalf("the limit moved on schedule: %v", limits)
		}
	}
	if l := th.nextWriteLimit(sweepReading{now: pass.StartedAt.Add(time.Minute), writtenBytes: 1 << 30, swept: -1}); l != 4<<20 {
		t.Fatalf("between passes the limit became %d", l)
	}
}

func TestNoLimitForAFewWrites(t *testing.T) {
	pass := &PassState{Reason: PassFlushPeriod, StartedAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	if limits := feed(&WriteThrottle{}, pass, 100*time.Second, writeLimitFloor/2, []float64{0, 0, 0, 0}); limits[3] != 0 {
		t.Fatalf("a limit on writers below the floor: %v", limits)
	}
}

func TestWriteLimitAfterAWritethroughFinish(t *testing.T) {
	cut, share := writethroughFinishCut, writeLimitLeastShare
	if got := (&WriteThrottle{BytesPerSecond: 10 << 20, Unthrottled: 12 << 20}).afterWritethroughFinish(); got != int64(cut*float64(10<<20)) {
		t.Errorf("got %d", got)
	}
	if got := (&WriteThrottle{BytesPerSecond: 5 << 20, Unthrottled: 12 << 20}).afterWritethroughFinish(); got != int64(share*float64(12<<20)) {
		t.Errorf("below the least share: got %d", got)
	}
	if got := (&WriteThrottle{}).afterWritethroughFinish(); got != 0 {
		t.Errorf("no limit before: got %d", got)
	}
}

func TestLimitPartsFollowWhatEachCgroupWrote(t *testing.T) {
	parts := limitParts(8<<20, map[string]int64{"kubepods.slice": 100, "system.slice": 50},
		map[string]int64{"kubepods.slice": 100 + 3<<20, "system.slice": 50 + 1<<20, "user.slice": 7})
	if near := func(a, b int64) bool { return a > b-b/1000 && a < b+b/1000 }; !near(parts["kubepods.slice"], 6<<20) || !near(parts["system.slice"], 2<<20) {
		t.Errorf("parts %v", parts)
	}
	if _, ok := parts["user.slice"]; ok {
		t.Errorf("a limit on a cgroup that wrote next to nothing: %v", parts)
	}
	if limitParts(0, nil, map[string]int64{"a": 1}) != nil {
		t.Error("parts of no limit")
	}
}

func TestWriteLimitIsKeptAfterAWritethroughFinishLeftTheVolumeClean(t *testing.T) {
	v := Volume{Name: "vol", Spec: fcv1.FlashCacheVolumeSpec{FlushThrottle: fcv1.FlushThrottleProportional}}
	clean := &Status{Device: "bcache0", CacheMode: string(fcv1.CacheModeWriteback), State: "clean"}
	dirty := &Status{Device: "bcache0", CacheMode: string(fcv1.CacheModeWriteback), State: "dirty", DirtyBytes: 4096}
	if !writeLimitKept(v, clean, false, true) {
		t.Error("the limit was lifted in the run whose writethrough finish left the volume clean")
	}
	if writeLimitKept(v, clean, false, false) {
		t.Error("an idle clean volume kept its limit")
	}
	if !writeLimitKept(v, dirty, false, false) || !writeLimitKept(v, clean, true, false) {
		t.Error("a dirty volume, or one with a pass under way, lost its limit")
	}
	held := *dirty
	held.Held = true
	writethrough := *dirty
	writethrough.CacheMode = string(fcv1.CacheModeWritethrough)
	disabled := v
	disabled.Spec.FlushThrottle = fcv1.FlushThrottleDisabled
	if writeLimitKept(v, &held, true, true) || writeLimitKept(v, &writethrough, true, true) || writeLimitKept(disabled, dirty, true, true) {
		t.Error("a limit kept on a held volume, one out of writeback, or one whose spec turned it off")
	}
}
