package controller

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/heartbeat"
)

// ClusterSeries are the names of the series ClusterMetrics exports.
var ClusterSeries = []string{"flashcache_volume_phase", "flashcache_node_agent_up"}

var (
	volumePhaseDesc = prometheus.NewDesc(ClusterSeries[0],
		"The FlashCacheVolume's phase as its status says: 1, one series a volume, labelled with the current phase.",
		[]string{"volume", "node", "phase"}, nil)
	agentUpDesc = prometheus.NewDesc(ClusterSeries[1],
		"1 while the node agent of a node that has volumes renews its heartbeat Lease, 0 once it has not for four intervals "+
			"(or never did): then no one flushes that node's volumes, and its drains wait.",
		[]string{"node"}, nil)
)

// ClusterMetrics exports what only the operator sees across the nodes, read at each scrape: every
// volume's phase, and whether the agent of each node with volumes is alive. An agent that is gone
// exports nothing itself, which is the very case an on-call person must be told about.
type ClusterMetrics struct {
	// Volumes lists the FlashCacheVolumes (the manager's cache).
	Volumes client.Reader
	// Leases reads the agents' heartbeat Leases, uncached (as the eviction webhook does).
	Leases client.Reader
	// AgentNamespace is where the agents renew their Leases; empty: agent_up is not exported.
	AgentNamespace string
	Log            logr.Logger
	Now            func() time.Time
}

// Describe sends the two series' descriptions.
func (m *ClusterMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- volumePhaseDesc
	ch <- agentUpDesc
}

// Collect reads the volumes and the Leases of their nodes. A read that fails leaves its series
// out of this scrape (and is logged) rather than fail the whole endpoint.
func (m *ClusterMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var list fcv1.FlashCacheVolumeList
	if err := m.Volumes.List(ctx, &list); err != nil {
		m.Log.Error(err, "listing volumes for the metrics")
		return
	}
	nodes := map[string]bool{}
	for i := range list.Items {
		fcv := &list.Items[i]
		phase := fcv.Status.Phase
		if phase == "" {
			phase = fcv1.PhasePending
		}
		ch <- prometheus.MustNewConstMetric(volumePhaseDesc, prometheus.GaugeValue, 1, fcv.Name, fcv.Spec.NodeName, string(phase))
		if fcv.Spec.NodeName != "" {
			nodes[fcv.Spec.NodeName] = true
		}
	}
	if m.AgentNamespace == "" {
		return
	}
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	for node := range nodes {
		silence, err := heartbeat.Silence(ctx, m.Leases, m.AgentNamespace, node, now())
		if err != nil {
			m.Log.Error(err, "reading an agent's heartbeat for the metrics", "node", node)
			continue
		}
		up := 0.0
		if silence == "" {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(agentUpDesc, prometheus.GaugeValue, up, node)
	}
}
