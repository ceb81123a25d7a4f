package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flashcache/flashcache/operator/internal/controller"
	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/internal/safety"
	"github.com/flashcache/flashcache/operator/internal/testenv"
)

var seriesName = regexp.MustCompile(`flashcache_[a-z_]+`)

// ExportedSeries are the names of every series the agent exports, each observed once.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	wear := int32(3)
	v := engine.Volume{Name: "v"}
	m.Observe(v, &engine.Result{Status: &engine.Status{State: "clean"}, Check: &engine.CheckReport{Verdict: safety.Safe}}, &wear)
	m.Flushing("v", true)
	m.FlushProgress("v", 1<<20)
	m.Pass("v", &engine.PassReport{})
	m.EngineError("v", "apply")
	m.EngineRun("v")
	m.Ran("wipefs", time.Millisecond)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
	}
	return exported
}

// The chart's Grafana dashboard and alert rules use only series the agent or the operator
// exports, and every series the agent exports is on the dashboard or in a rule: a renamed metric
// would otherwise leave an empty panel, or an alert that never fires, which nobody notices until
// an incident.
func TestDashboardAndAlertsUseOnlyExportedSeries(t *testing.T) {
	exported := exportedSeries(t)
	operator := map[string]bool{}
	for _, name := range controller.ClusterSeries {
		operator[name] = true
	}
	seen := map[string]bool{}
	for _, file := range []string{"dashboards/flashcache.json", "prometheus-rules.yaml"} {
		raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "charts", "flashcache", "files", file))
		if err != nil {
			t.Fatal(err)
		}
		used := seriesName.FindAllString(string(raw), -1)
		if len(used) == 0 {
			t.Fatalf("%s uses no flashcache series", file)
		}
		for _, name := range used {
			seen[name] = true
			if !exported[name] && !operator[name] {
				t.Errorf("%s uses %s, which neither the agent nor the operator exports (the agent exports %v)", file, name, exported)
			}
		}
	}
	for name := range exported {
		if !seen[name] {
			t.Errorf("the agent exports %s, which no dashboard panel shows and no alert uses", name)
		}
	}
	for name := range operator {
		if !seen[name] {
			t.Errorf("the operator exports %s, which no dashboard panel shows and no alert uses", name)
		}
	}
}

// The dirty age is the time since the volume was last seen clean as of the scrape, not as of the
// round that saw it dirty: a round held for minutes by a pass's writethrough finish must not
// hold the age with it.
func TestDirtyAgeIsOfTheScrape(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	clock := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	m.dirtyAge.now = func() time.Time { return clock }
	v := engine.Volume{Name: "v"}
	cleanAt := clock.Add(-90 * time.Second)
	m.Observe(v, &engine.Result{Status: &engine.Status{State: "dirty", DirtyBytes: 1 << 20, DirtySince: &cleanAt}}, nil)
	if got := testutil.ToFloat64(m.dirtyAge); got != 90 {
		t.Errorf("age %v s at the round, want 90", got)
	}
	clock = clock.Add(5 * time.Minute)
	if got := testutil.ToFloat64(m.dirtyAge); got != 390 {
		t.Errorf("age %v s five minutes after the round, want 390", got)
	}
	m.Observe(v, &engine.Result{Status: &engine.Status{State: "clean"}}, nil)
	if got := testutil.ToFloat64(m.dirtyAge); got != 0 {
		t.Errorf("age %v s of a clean volume, want 0", got)
	}
	// Dirty and never seen clean (the agent just started): no bound to give.
	m.Observe(v, &engine.Result{Status: &engine.Status{State: "dirty", DirtyBytes: 1 << 20}}, nil)
	if n := testutil.CollectAndCount(m.dirtyAge); n != 0 {
		t.Errorf("%d age series for a volume never seen clean, want none", n)
	}
	m.Observe(v, &engine.Result{Status: &engine.Status{State: "clean"}}, nil)
	m.Forget("v")
	if n := testutil.CollectAndCount(m.dirtyAge); n != 0 {
		t.Errorf("%d age series after the volume was forgotten, want none", n)
	}
}

// Passes are counted as they end, by whether the blocking flush in writethrough finished them;
// both series exist from the first round, so that increase() sees the first pass of each.
func TestFlushPassesCountedByOutcome(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	count := func(outcome string) float64 { return testutil.ToFloat64(m.passes.WithLabelValues("v", outcome)) }
	m.Pass("v", &engine.PassReport{})
	if n := testutil.CollectAndCount(m.passes); n != 2 {
		t.Errorf("%d pass series after a round without a pass, want 2 (one for each outcome)", n)
	}
	for _, p := range []engine.PassReport{
		{Started: true, Active: true}, {Active: true},
		{Ended: true, Swept: true},
		{Started: true, Active: true}, {Ended: true, FinishedInWritethrough: true},
		{Started: true, Active: true}, {Ended: true},
	} {
		m.Pass("v", &p)
	}
	if got := count(passOutcomeWriteback); got != 2 {
		t.Errorf("%v passes ended in writeback, want 2", got)
	}
	if got := count(passOutcomeWritethrough); got != 1 {
		t.Errorf("%v passes finished in writethrough, want 1", got)
	}
}
