package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
