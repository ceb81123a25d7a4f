//go:build envtest

package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/internal/testenv"
)

// eventLog keeps the reasons of the events the reconciler records.
type eventLog struct {
	mu      sync.Mutex
	reasons []string
}

func (e *eventLog) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reasons = append(e.reasons, fmt.Sprintf("%s %s (%s): %s", eventtype, reason, action, fmt.Sprintf(note, args...)))
}

func (e *eventLog) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.reasons
	e.reasons = nil
	return r
}

// A reconcile that reads the volume from a cache a status behind (built, waiting for teardown)
// after its teardown has finished must not tear down again: the second teardown of an iSCSI
// volume logged in to the target to look for the superblock and left the node record behind
// (CI at 75a9cb5). The API server's copy decides; with it still waiting, the teardown runs.
func TestATeardownReadFromAStaleObjectIsNotDoneTwice(t *testing.T) {
	env, cfg, err := testenv.Start(testenv.CRDDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	engine.LockDir = t.TempDir()

	// Disks that are not there: a teardown that runs finds nothing and says so, touching nothing.
	fcv := &fcv1.FlashCacheVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "torn-down", Finalizers: []string{fcv1.Finalizer}},
		Spec: fcv1.FlashCacheVolumeSpec{NodeName: "node-a",
			CacheDevice:   &fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/fc-envtest-no-such-cache"},
			BackingDevice: &fcv1.BackingDeviceSpec{Path: "/dev/disk/by-id/fc-envtest-no-such-backing"}},
	}
	if err := c.Create(ctx, fcv); err != nil {
		t.Fatal(err)
	}
	waiting := []metav1.Condition{
		{Type: fcv1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: fcv1.ReasonProvisioned, Message: "built"},
		{Type: fcv1.ConditionReady, Status: metav1.ConditionFalse, Reason: fcv1.ReasonWaitingForTeardown, Message: "the PersistentVolume is gone"},
	}
	setConditions := func(conds []metav1.Condition) {
		t.Helper()
		var live fcv1.FlashCacheVolume
		if err := c.Get(ctx, client.ObjectKeyFromObject(fcv), &live); err != nil {
			t.Fatal(err)
		}
		live.Status.Conditions = nil
		for _, cond := range conds {
			meta.SetStatusCondition(&live.Status.Conditions, cond)
		}
		if err := c.Status().Update(ctx, &live); err != nil {
			t.Fatal(err)
		}
	}
	// What the reconcile read: the status from before the teardown.
	stale := fcv.DeepCopy()
	for _, cond := range waiting {
		meta.SetStatusCondition(&stale.Status.Conditions, cond)
	}
	now := metav1.Now()
	stale.DeletionTimestamp = &now

	events := &eventLog{}
	r := &Reconciler{Client: c, APIReader: c, NodeName: "node-a", Recorder: events,
		Engine:  &engine.Engine{Run: blockdev.Runner{}, HoldDir: t.TempDir(), StateDir: t.TempDir()},
		Metrics: NewMetrics(prometheus.NewRegistry()), FlushTimeout: time.Minute, Now: time.Now}

	// The API server already has the teardown's status.
	setConditions([]metav1.Condition{
		{Type: fcv1.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: fcv1.ReasonTornDown, Message: "the device was flushed and removed"},
		waiting[1],
	})
	if _, err := r.reconcileDelete(ctx, stale, engine.VolumeOf(stale)); err != nil {
		t.Fatalf("reconcile of the stale object: %v", err)
	}
	if got := events.take(); len(got) != 0 {
		t.Errorf("the stale object's reconcile ran a teardown again: events %q", got)
	}

	// The control: the API server's copy still waits for the teardown, and the same call runs it.
	setConditions(waiting)
	_, _ = r.reconcileDelete(ctx, stale, engine.VolumeOf(stale))
	if got := events.take(); len(got) == 0 {
		t.Errorf("with the volume still waiting for its teardown, the reconcile recorded nothing: did it run one?")
	}
}
