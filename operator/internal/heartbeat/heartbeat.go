// Package heartbeat is how the operator knows a node agent is alive: each agent renews a Lease
// named for its node, as kubelets do for nodes, and the eviction webhook reads it when a drain
// waits on that node, so that a drain held back by a dead agent says so instead of waiting in
// silence.
package heartbeat

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// DefaultInterval is how often an agent renews its Lease. The Lease says it lasts
// LeaseIntervals intervals: one not renewed for that long is an agent that is gone or stuck,
// not one that missed a renewal or two.
const (
	DefaultInterval = 10 * time.Second
	LeaseIntervals  = 4
)

// LeaseName is the name of the node agent's Lease on node.
func LeaseName(node string) string { return "flashcache-agent-" + node }

// Renewer keeps this node's agent Lease fresh while the agent runs. It is a controller-runtime
// Runnable that runs on every replica (the agent is one per node: no leader election).
type Renewer struct {
	Client    client.Client
	Namespace string
	Node      string
	Interval  time.Duration
	Now       func() time.Time
}

// NeedLeaderElection: every agent renews its own Lease.
func (r *Renewer) NeedLeaderElection() bool { return false }

func (r *Renewer) interval() time.Duration {
	if r.Interval <= 0 {
		return DefaultInterval
	}
	return r.Interval
}

func (r *Renewer) leaseSeconds() int32 {
	return int32(max(1, (LeaseIntervals*r.interval()+time.Second-1)/time.Second))
}

// Start renews the Lease every Interval until ctx ends; an API error is logged and retried at
// the next tick, since a heartbeat that gives up is worse than one that is late.
func (r *Renewer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("heartbeat").WithValues("lease", r.Namespace+"/"+LeaseName(r.Node))
	tick := time.NewTicker(r.interval())
	defer tick.Stop()
	for {
		if err := r.Renew(ctx); err != nil {
			log.Error(err, "renewing the agent's lease")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Renew creates or renews the Lease once.
func (r *Renewer) Renew(ctx context.Context) error {
	now := metav1.NewMicroTime(r.now())
	key := types.NamespacedName{Namespace: r.Namespace, Name: LeaseName(r.Node)}
	var lease coordinationv1.Lease
	err := r.Client.Get(ctx, key, &lease)
	if apierrors.IsNotFound(err) {
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{"app.kubernetes.io/name": "flashcache", "app.kubernetes.io/component": "agent"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: new(r.Node), LeaseDurationSeconds: new(r.leaseSeconds()),
				AcquireTime: &now, RenewTime: &now},
		}
		if err := r.Client.Create(ctx, &lease); err != nil {
			return fmt.Errorf("creating lease %s: %w", key, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading lease %s: %w", key, err)
	}
	lease.Spec.HolderIdentity = new(r.Node)
	lease.Spec.LeaseDurationSeconds = new(r.leaseSeconds())
	lease.Spec.RenewTime = &now
	if err := r.Client.Update(ctx, &lease); err != nil {
		return fmt.Errorf("renewing lease %s: %w", key, err)
	}
	return nil
}

func (r *Renewer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Silence says why the agent on node cannot be counted on, from its Lease: "" while it is
// fresh. reader should not be a cache the operator would have to list every Lease into.
func Silence(ctx context.Context, reader client.Reader, namespace, node string, now time.Time) (string, error) {
	key := types.NamespacedName{Namespace: namespace, Name: LeaseName(node)}
	var lease coordinationv1.Lease
	if err := reader.Get(ctx, key, &lease); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("the node agent on %s has never reported (no Lease %s)", node, key), nil
		}
		return "", fmt.Errorf("reading lease %s: %w", key, err)
	}
	duration := LeaseIntervals * DefaultInterval
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		duration = time.Duration(*d) * time.Second
	}
	if lease.Spec.RenewTime == nil {
		return fmt.Sprintf("the node agent on %s has never reported (Lease %s has no renew time)", node, key), nil
	}
	if age := now.Sub(lease.Spec.RenewTime.Time); age > duration {
		return fmt.Sprintf("the node agent on %s last reported %s ago (Lease %s)", node, age.Round(time.Second), key), nil
	}
	return "", nil
}
