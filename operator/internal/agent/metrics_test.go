package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/internal/testenv"
)

var seriesName = regexp.MustCompile(`flashcache_[a-z_]+`)

// The chart's Grafana dashboard queries only series the agent exports: a renamed metric would
// otherwise leave an empty panel that nobody notices until an incident.
func TestDashboardQueriesOnlyTheAgentsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	wear := int32(3)
	m.Observe("v", &engine.Status{State: "clean"}, &wear)
	m.Flushing("v", true)
	m.FlushProgress("v", 1<<20)
	m.EngineError("v", "apply")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
	}
	dashboard, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "charts", "flashcache", "files", "dashboards", "flashcache.json"))
	if err != nil {
		t.Fatal(err)
	}
	queried := seriesName.FindAllString(string(dashboard), -1)
	if len(queried) == 0 {
		t.Fatal("the dashboard queries no flashcache series")
	}
	seen := map[string]bool{}
	for _, name := range queried {
		seen[name] = true
		if !exported[name] {
			t.Errorf("the dashboard queries %s, which the agent does not export (it exports %v)", name, exported)
		}
	}
	for name := range exported {
		if !seen[name] {
			t.Errorf("the agent exports %s, which no dashboard panel shows", name)
		}
	}
}
