package engine

import (
	"os"
	"testing"
	"time"
)

func TestNextPass(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	period := 5 * time.Minute
	idle := &State{PeriodFrom: t0}
	running := &State{PeriodFrom: t0, Pass: &PassState{Reason: PassFlushPeriod, StartedAt: t0}}
	replaced := &State{PeriodFrom: t0.Add(time.Minute), Pass: &PassState{Reason: PassRequested, StartedAt: t0.Add(time.Minute), LimitFrom: t0}}
	cases := []struct {
		name        string
		st          *State
		dirty       bool
		inWriteback bool
		period      time.Duration
		at          time.Duration
		flushNow    bool
		want        passAction
	}{
		{"within half the period", idle, true, true, period, 2 * time.Minute, false, passNothing},
		{"half the period over, dirty", idle, true, true, period, 150 * time.Second, false, passStart},
		{"half the period over, clean", idle, false, true, period, 3 * time.Minute, false, passNewPeriod},
		{"flushPeriod 0s is off", idle, true, true, 0, 48 * time.Hour, false, passNothing},
		{"asked for, dirty", idle, true, true, period, time.Second, true, passStartRequested},
		{"asked for, clean", idle, false, true, period, time.Second, true, passNothing},
		{"asked for with flushPeriod off", idle, true, true, 0, time.Second, true, passStartRequested},
		{"not in writeback: nothing to pass", idle, true, false, period, time.Hour, false, passNothing},
		{"pass still dirty", running, true, true, period, 2 * time.Minute, false, passGoesOn},
		{"pass clean", running, false, true, period, 2 * time.Minute, false, passEnd},
		{"pass within its limit", running, true, true, period, 149 * time.Second, false, passGoesOn},
		{"pass over its limit, half the period", running, true, true, period, 150 * time.Second, false, passFinishInWritethrough},
		{"a short period's pass gets the floor", running, true, true, 10 * time.Second, 30 * time.Second, false, passGoesOn},
		{"a short period's pass past the floor", running, true, true, 10 * time.Second, passLimitFloor, false, passFinishInWritethrough},
		{"pass and a drain's hold", running, true, false, period, time.Minute, false, passCovered},
		{"pass and a request: a pass for what is dirty now", running, true, true, period, time.Minute, true, passRestartRequested},
		{"pass at its limit and a request: the finish first", running, true, true, period, 150 * time.Second, true, passFinishInWritethrough},
		{"pass clean and a request: nothing left", running, false, true, period, time.Minute, true, passEnd},
		{"a pass that replaced one keeps its limit", replaced, true, true, period, 150 * time.Second, false, passFinishInWritethrough},
		{"a pass that replaced one, within that limit", replaced, true, true, period, 149 * time.Second, false, passGoesOn},
	}
	for _, c := range cases {
		if got := nextPass(c.st, c.dirty, c.inWriteback, c.period, t0.Add(c.at), c.flushNow); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestAPeriodStartsWhenTheFlushPeriodIsSetOrChanged(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	st := &State{}
	if !st.startPeriodIfNew(time.Minute, t0) || !st.PeriodFrom.Equal(t0) {
		t.Fatalf("first sight: %+v", st)
	}
	if st.startPeriodIfNew(time.Minute, t0.Add(time.Hour)) || !st.PeriodFrom.Equal(t0) {
		t.Errorf("the same period went on counting from %s, want %s", st.PeriodFrom, t0)
	}
	off := &State{PeriodFrom: t0, Period: 0}
	if !off.startPeriodIfNew(time.Minute, t0.Add(time.Hour)) || !off.PeriodFrom.Equal(t0.Add(time.Hour)) {
		t.Errorf("turned on an hour later: the period starts then, got %+v", off)
	}
	if nextPass(off, true, true, time.Minute, t0.Add(time.Hour+time.Second), false) != passNothing {
		t.Errorf("a pass right after the period was turned on: dirty data would be flushed early, the bound measured from the wrong time")
	}
}

func TestStateSurvivesAndATornFileStartsAgain(t *testing.T) {
	e := &Engine{StateDir: t.TempDir()}
	v := Volume{Name: "db"}
	st, err := e.loadState(v)
	if err != nil || !st.PeriodFrom.IsZero() || st.Pass != nil {
		t.Fatalf("a volume never seen: %+v %v", st, err)
	}
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	want := &State{PeriodFrom: t0, Pass: &PassState{Reason: PassRequested, StartedAt: t0, DirtyAtStart: 42}}
	if err := e.saveState(v, want); err != nil {
		t.Fatal(err)
	}
	got, err := e.loadState(v)
	if err != nil || !got.PeriodFrom.Equal(t0) || got.Pass == nil || *got.Pass != *want.Pass {
		t.Fatalf("loaded %+v %v, want %+v", got, err, want)
	}
	if err := os.WriteFile(e.statePath(v), []byte(`{"periodFrom": "2026-`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := e.loadState(v); err != nil || !got.PeriodFrom.IsZero() {
		t.Errorf("torn state: %+v %v, want an empty state", got, err)
	}
	if err := e.forgetState(v); err != nil {
		t.Fatal(err)
	}
	if err := e.forgetState(v); err != nil {
		t.Errorf("forgetting twice: %v", err)
	}
}

func TestDirtyAgeBoundIsThePeriodFromTwoMinutesUp(t *testing.T) {
	for _, c := range []struct{ period, want time.Duration }{
		{0, 0},
		{30 * time.Second, 15*time.Second + passLimitFloor},
		{2 * time.Minute, 2 * time.Minute},
		{5 * time.Minute, 5 * time.Minute},
	} {
		if got := DirtyAgeBound(c.period); got != c.want {
			t.Errorf("DirtyAgeBound(%s) = %s, want %s", c.period, got, c.want)
		}
	}
}

func TestDirtySinceIsTheLastTimeTheVolumeWasSeenClean(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	var st State
	if st.dirtySince(true) != nil {
		t.Errorf("never seen clean: want no bound, not a guess")
	}
	if !st.noteClean(false, t0) || !st.CleanSeenAt.Equal(t0) {
		t.Fatalf("first clean sighting not recorded: %v", st.CleanSeenAt)
	}
	// Clean again within the resolution: not saved again (no write every round).
	if st.noteClean(false, t0.Add(30*time.Second)) {
		t.Errorf("a clean volume's time saved again after 30 s; want at most once per %s", cleanSeenResolution)
	}
	if st.noteClean(true, t0.Add(2*time.Minute)) {
		t.Errorf("a dirty volume changed CleanSeenAt")
	}
	if got := st.dirtySince(true); got == nil || !got.Equal(t0) {
		t.Errorf("dirtySince %v, want %v: the bound errs early, never late", got, t0)
	}
	if st.dirtySince(false) != nil {
		t.Errorf("a clean volume has a dirtySince")
	}
	if !st.noteClean(false, t0.Add(2*time.Minute)) || !st.CleanSeenAt.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("clean a minute later: not recorded")
	}
}

// Only a periodic pass is paced, over three quarters of its limit (half a period, at least a
// minute).
func TestPassPaceUntil(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	if got := passPaceUntil(&PassState{Reason: PassFlushPeriod, StartedAt: t0}, 10*time.Minute); !got.Equal(t0.Add(225 * time.Second)) {
		t.Errorf("10m period: paced until %s, want 225 s after the start (three quarters of 5 min)", got.Sub(t0))
	}
	if got := passPaceUntil(&PassState{Reason: PassFlushPeriod, StartedAt: t0}, 10*time.Second); !got.Equal(t0.Add(45 * time.Second)) {
		t.Errorf("10s period: paced until %s, want 45 s (three quarters of the one-minute floor)", got.Sub(t0))
	}
	if got := passPaceUntil(&PassState{Reason: PassRequested, StartedAt: t0}, 5*time.Minute); !got.IsZero() {
		t.Errorf("a pass asked for is paced until %s, want not paced", got)
	}
	if got := passPaceOver(5 * time.Minute); got != 112500*time.Millisecond {
		t.Errorf("5m period: paced over %s, want 112.5 s (three quarters of 150 s)", got)
	}
	if floor, paced := passPace(0, time.Minute, time.Minute); !paced || floor != kernelWritebackRateMinimum {
		t.Errorf("nothing dirty: floor %d paced %v, want the kernel's floor", floor, paced)
	}
}
