//go:build envtest

package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/heartbeat"
)

// gatherCluster scrapes a ClusterMetrics once: series name -> its labels, joined -> value.
func gatherCluster(t *testing.T, m *ClusterMetrics) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			got[f.GetName()+labelString(metric.GetLabel())] = metric.GetGauge().GetValue()
		}
	}
	return got
}

func labelString(labels []*dto.LabelPair) string {
	s := ""
	for _, l := range labels {
		s += fmt.Sprintf(" %s=%s", l.GetName(), l.GetValue())
	}
	return s
}

// The operator exports each volume's phase and, for each node with volumes, whether its agent
// renews its heartbeat, from what the API server holds: the series the Degraded, Failed and
// agent-down alerts read, which no agent can export about itself.
func TestClusterMetricsExportPhasesAndTheAgentsHeartbeats(t *testing.T) {
	ctx := context.Background()
	createNode(t, "metrics-node-a", "metrics-node-a")
	createNode(t, "metrics-node-b", "metrics-node-b")
	a := createVolume(t, "metrics-a", "metrics-node-a")
	t.Cleanup(func() { orphan(t, a.Name) })
	b := createVolume(t, "metrics-b", "metrics-node-b")
	t.Cleanup(func() { orphan(t, b.Name) })
	reportAsAgent(t, "metrics-b", metav1.ConditionFalse, "DeviceCarriesFilesystem", nil)
	waitForReady(t, "metrics-b", metav1.ConditionFalse, fcv1.ReasonNotProvisioned)

	renewed, seconds := metav1.NewMicroTime(time.Now()), int32(40)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: heartbeat.LeaseName("metrics-node-a"), Namespace: "default"},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &renewed, LeaseDurationSeconds: &seconds},
	}
	if err := k8s.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, lease) })

	m := &ClusterMetrics{Volumes: k8s, Leases: k8s, AgentNamespace: "default", Log: logr.Discard()}
	got := gatherCluster(t, m)
	for series, want := range map[string]float64{
		"flashcache_volume_phase node=metrics-node-b phase=Failed volume=metrics-b": 1,
		"flashcache_node_agent_up node=metrics-node-a":                              1,
		"flashcache_node_agent_up node=metrics-node-b":                              0, // no Lease at all
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (exported: %v), want %v", series, v, ok, want)
		}
	}
	phases := 0
	for series := range got {
		if strings.HasPrefix(series, "flashcache_volume_phase ") && strings.Contains(series, "volume=metrics-a") {
			phases++
		}
	}
	if phases != 1 {
		t.Errorf("%d phase series for metrics-a, want one (its current phase)", phases)
	}

	// An hour later by the collector's clock, node-a's agent has been silent for an hour.
	m.Now = func() time.Time { return time.Now().Add(time.Hour) }
	if v := gatherCluster(t, m)["flashcache_node_agent_up node=metrics-node-a"]; v != 0 {
		t.Errorf("agent_up of a Lease an hour old = %v, want 0", v)
	}
	// Without an agent namespace the heartbeats are not read, and agent_up is not exported.
	m.AgentNamespace = ""
	for series := range gatherCluster(t, m) {
		if strings.HasPrefix(series, "flashcache_node_agent_up ") {
			t.Errorf("exported %s without an agent namespace", series)
		}
	}
}
