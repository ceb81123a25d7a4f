// Package agent is the node side of flashcache on Kubernetes: it watches the FlashCacheVolumes
// of its own node, drives the engine for them, flushes and holds them for a drain, tears them down
// when the operator says so, and reports what the host looks like in their status.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/internal/units"
	"github.com/flashcache/flashcache/operator/internal/volumefile"
)

// FieldManager is the agent's server-side apply identity; the operator uses its own.
const FieldManager = "flashcache-agent"

// Timing of the agent's loop. Status is refreshed while nothing happens, so that dirty bytes and
// hit ratio in status and metrics stay current; more often while data is dirty or a drain runs.
const (
	refreshIdle     = 30 * time.Second
	refreshDirty    = 10 * time.Second
	refreshDraining = 2 * time.Second
	// retryRefused: a refusal needs a person (consent, another disk); looking again now and then
	// notices the fix without hammering the disks.
	retryRefused = 2 * time.Minute
	retryBusy    = 5 * time.Second
	// retrySessionLost: a lost iSCSI session usually comes back by itself; Ready should follow soon.
	retrySessionLost = 10 * time.Second
	// retryFixedElsewhere: the fix is outside the volume, where the agent cannot watch (a
	// corrected CHAP Secret, a replaced SSD); it should take effect within a minute.
	retryFixedElsewhere = 30 * time.Second
	// lockWait is how long a run waits for another one on the same disks before it says Busy.
	lockWait = 2 * time.Second
	// progressEvery bounds how often a running flush writes its progress to status.
	progressEvery = 2 * time.Second
)

// Reconciler drives the engine for the FlashCacheVolumes whose spec.nodeName is NodeName.
type Reconciler struct {
	client.Client
	// APIReader reads straight from the API server, not the cache: CHAP Secrets (the agent
	// neither lists nor watches Secrets, so it caches none), and a volume about to be torn down
	// (the cache may not hold yet the status of the teardown that just finished).
	APIReader client.Reader
	NodeName  string
	Engine    *engine.Engine
	Recorder  events.EventRecorder
	Metrics   *Metrics
	// FlushTimeout bounds one blocking flush pass; a drain's flush that needs longer continues
	// in the next pass (bcache keeps writing back meanwhile).
	FlushTimeout time.Duration
	// RequestGrace is how long an eviction's flush request keeps a volume held after the last
	// retry of that eviction: long enough for the evicted pod to stop and a drain to finish.
	RequestGrace time.Duration
	// Now is the clock; tests replace it.
	Now func() time.Time

	mu sync.Mutex
	// pending are the volumes seen at start that have not been reconciled once: until they have
	// been (and their devices registered after a reboot), the agent is not ready.
	pending map[string]bool
	// done are the volumes reconciled at least once, so that Start does not wait for them.
	done    map[string]bool
	started bool
}

// +kubebuilder:rbac:groups=flashcache.io,resources=flashcachevolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups=flashcache.io,resources=flashcachevolumes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=flashcache.io,resources=flashcachepools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get,namespace=flashcache-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,namespace=flashcache-system

// Reconcile brings one volume of this node to its spec and reports it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	defer r.markReconciled(req.Name)
	var fcv fcv1.FlashCacheVolume
	if err := r.Get(ctx, req.NamespacedName, &fcv); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.Metrics.Forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if fcv.Spec.NodeName != r.NodeName {
		return ctrl.Result{}, nil
	}
	v := engine.VolumeOf(&fcv)
	var err error
	if v.CHAP, err = r.chap(ctx, &fcv); err != nil {
		return r.failed(ctx, &fcv, newReport(&fcv, r.now()), "read CHAP secret", err)
	}
	if fcv.Spec.Pool != nil {
		pool, err := r.pool(ctx, &fcv)
		switch {
		case err == nil:
			v.Pool = pool
		case fcv.DeletionTimestamp.IsZero():
			return r.failed(ctx, &fcv, newReport(&fcv, r.now()), "read pool", err)
		}
	}
	if !fcv.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, &fcv, v)
	}

	st := newReport(&fcv, r.now())
	if meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionProvisioned) == nil {
		// Recorded before any device is touched, under the resourceVersion just read: the
		// operator removes its finalizer with an optimistic lock too, so a volume deleted
		// meanwhile makes one of the two fail, never both proceed.
		st.provisioned = condition(fcv1.ConditionProvisioned, metav1.ConditionFalse, fcv1.ReasonProvisioning,
			"the node agent is building the device")
		if err := r.applyStatus(ctx, &fcv, st, true); err != nil {
			return ctrl.Result{}, err
		}
	}

	unlock, err := engine.Lock(ctx, v, lockWait)
	if err != nil {
		if errors.Is(err, engine.ErrBusy) {
			if !st.fromBusy(&fcv, err) {
				return ctrl.Result{RequeueAfter: retryBusy}, nil
			}
			return ctrl.Result{RequeueAfter: retryBusy}, r.applyStatus(ctx, &fcv, st, false)
		}
		return r.failed(ctx, &fcv, st, "lock", err)
	}
	defer unlock()

	var node corev1.Node
	if err := r.Get(ctx, types.NamespacedName{Name: r.NodeName}, &node); err != nil {
		return ctrl.Result{}, fmt.Errorf("reading node %s: %w", r.NodeName, err)
	}
	why := r.flushWanted(&fcv, &node)
	res, pass, err := r.converge(ctx, &fcv, v, why, st)
	r.Metrics.EngineRun(fcv.Name)
	if err != nil {
		return r.failed(ctx, &fcv, st, "apply", err)
	}
	st.fromResult(res, fcv.Generation)
	st.fromPass(pass, res.Status)
	if f := st.failure; f != nil && (fcv.Status.Failure == nil || fcv.Status.Failure.Reason != f.Reason) {
		// Said when it starts; the condition and status.failure keep saying it.
		r.Recorder.Eventf(&fcv, nil, corev1.EventTypeWarning, f.Reason, "Apply", "%s", st.degraded.Message)
	}
	r.Metrics.Observe(v, res, st.wearPercent)
	r.Metrics.Pass(fcv.Name, pass)
	if err := r.applyStatus(ctx, &fcv, st, false); err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case why != "" || res.Status.Held:
		return ctrl.Result{RequeueAfter: refreshDraining}, nil
	case res.Status.DirtyBytes > 0:
		return ctrl.Result{RequeueAfter: refreshDirty}, nil
	}
	return ctrl.Result{RequeueAfter: refreshIdle}, nil
}

// converge runs the engine for a volume that is not being deleted: flush and hold it when a drain
// wants that, release it when nothing does, and otherwise let the engine converge it (build or
// adopt, tunables, and the flush pass that is due).
func (r *Reconciler) converge(ctx context.Context, fcv *fcv1.FlashCacheVolume, v engine.Volume, why string, st *report) (*engine.Result, *engine.PassReport, error) {
	log := logf.FromContext(ctx)
	// Converge plans on this same observation unless a flush changes the host in between: one
	// observation a refresh, not two.
	before, observed, err := r.Engine.ObserveStatus(ctx, v)
	var cacheLost *engine.CacheLostError
	switch {
	case errors.Is(err, engine.ErrNotLoggedIn):
		// Nothing of the volume runs without its iSCSI session; Apply logs in first.
		before = &engine.Status{}
	case errors.As(err, &cacheLost):
		// Nothing can be flushed from a lost cache; Apply does what the loss allows (detach a
		// clean one before a read fails on it, start one missing at boot) and reports it.
		before = &engine.Status{}
	case err != nil:
		return nil, nil, err
	}
	running := before.Device != ""
	writeback := v.Spec.EffectiveMode() == fcv1.CacheModeWriteback

	if why != "" && writeback && running && (!before.Held || before.DirtyBytes > 0) {
		if !before.Held {
			log.Info("flushing and holding in writethrough", "why", why, "dirty", before.DirtyBytes)
			r.Recorder.Eventf(fcv, nil, corev1.EventTypeNormal, "FlushStarted", "Flush",
				"flushing %s to the backing disk and holding writethrough: %s", units.Bytes(before.DirtyBytes), why)
		}
		if err := r.flush(ctx, fcv, v, st); err != nil {
			return nil, nil, err
		}
		observed = nil
		r.Recorder.Eventf(fcv, nil, corev1.EventTypeNormal, "Flushed", "Flush",
			"the cache is clean and held in writethrough: %s", why)
	}
	var res *engine.Result
	pass := &engine.PassReport{}
	switch {
	case why == "" && before.Held:
		log.Info("nothing wants the volume held any more: restoring the configured mode")
		if res, err = r.Engine.Release(ctx, v); err != nil {
			return res, pass, err
		}
		r.Recorder.Eventf(fcv, nil, corev1.EventTypeNormal, "Released", "Release",
			"the node is schedulable and no eviction is waiting: cache mode %s restored", res.Status.CacheMode)
	default:
		want := engine.Desired{Hold: why != "" && writeback, FlushRequest: fcv.Annotations[fcv1.AnnotationBackgroundFlush], Observed: observed}
		res, pass, err = r.Engine.Converge(ctx, v, want, r.now())
		if err != nil {
			// A pass is recorded before its knobs change: said even when the apply after it
			// failed, or it runs without its start ever being said.
			r.notePass(ctx, fcv, pass)
			return res, pass, err
		}
	}
	if res.Changed {
		// With the warnings, so that a log says why a volume stays in writethrough (the check's
		// verdict) after its events have expired.
		log.Info("applied", "steps", len(res.Steps), "warnings", res.Warnings)
		if !running {
			r.Recorder.Eventf(fcv, nil, corev1.EventTypeNormal, "Provisioned", "Apply",
				"bcache device %s ready at %s (%d steps)", res.Status.Device, res.Status.StablePath, len(res.Steps))
		}
		// Said once when the host changed, not on every refresh: the conditions keep saying it.
		for _, w := range res.Warnings {
			r.Recorder.Eventf(fcv, nil, corev1.EventTypeWarning, "Warning", "Apply", "%s", w)
		}
	}
	if w := res.Wear; w != nil && w.BecameWorn {
		log.Info("cache device worn while running", "reasons", w.Reasons)
		r.Recorder.Eventf(fcv, nil, corev1.EventTypeWarning, "CacheWorn", "WearCheck",
			"the cache device crossed its wear limit while running (%s); mode now %s", strings.Join(w.Reasons, "; "), res.Status.CacheMode)
	}
	r.notePass(ctx, fcv, pass)
	return res, pass, nil
}

// notePass logs what a converge did with the volume's flush pass and records it as an event.
func (r *Reconciler) notePass(ctx context.Context, fcv *fcv1.FlashCacheVolume, pass *engine.PassReport) {
	if pass == nil {
		return
	}
	log := logf.FromContext(ctx)
	switch {
	case pass.Started:
		log.Info("flush pass started", "reason", pass.Reason, "dirty", pass.DirtyAtStart)
		r.Recorder.Eventf(fcv, nil, corev1.EventTypeNormal, "FlushPassStarted", "Flush",
			"writing %s back at full speed, in writeback (%s)", units.Bytes(pass.DirtyAtStart), pass.Reason)
	case pass.FinishedInWritethrough:
		log.Info("flush pass finished in writethrough", "reason", pass.Reason, "took", pass.Elapsed)
		r.Recorder.Eventf(fcv, nil, corev1.EventTypeWarning, "FlushPassFinishedInWritethrough", "Flush",
			"the pass started %s ago did not write back in writeback what was dirty at its start: the rest was flushed in writethrough (%.0fs), as the flush period requires",
			pass.Elapsed.Round(time.Second), pass.WritethroughFlushSeconds)
	case pass.Ended:
		log.Info("flush pass done", "reason", pass.Reason, "took", pass.Elapsed, "swept", pass.Swept)
		since := ""
		if pass.Swept {
			since = "; what is dirty now was written since it began"
		}
		r.Recorder.Eventf(fcv, nil, corev1.EventTypeNormal, "FlushPassDone", "Flush",
			"%s written back in %s, in writeback (%s)%s", units.Bytes(pass.DirtyAtStart), pass.Elapsed.Round(time.Second), pass.Reason, since)
	}
}

// flush runs the blocking flush, writing its progress to status for the eviction webhook.
func (r *Reconciler) flush(ctx context.Context, fcv *fcv1.FlashCacheVolume, v engine.Volume, st *report) error {
	var last time.Time
	r.Metrics.Flushing(fcv.Name, true)
	defer r.Metrics.Flushing(fcv.Name, false)
	_, err := r.Engine.Flush(ctx, v, r.FlushTimeout, func(p engine.FlushProgress) {
		r.Metrics.FlushProgress(fcv.Name, p.DirtyBytes)
		if r.now().Sub(last) < progressEvery {
			return
		}
		last = r.now()
		st.flushing = condition(fcv1.ConditionFlushing, metav1.ConditionTrue, fcv1.ReasonFlushInProgress, progressMessage(p))
		st.dirty = &p.DirtyBytes
		if err := r.applyStatus(ctx, fcv, st, false); err != nil {
			logf.FromContext(ctx).Error(err, "reporting flush progress")
		}
	})
	if err != nil {
		st.flushing = condition(fcv1.ConditionFlushing, metav1.ConditionTrue, fcv1.ReasonFlushFailed, err.Error())
		return fmt.Errorf("blocking flush: %w", err)
	}
	return nil
}

// pool reads the FlashCachePool a carved volume names; it must be on this node too.
func (r *Reconciler) pool(ctx context.Context, fcv *fcv1.FlashCacheVolume) (*engine.Pool, error) {
	var pool fcv1.FlashCachePool
	if err := r.Get(ctx, types.NamespacedName{Name: fcv.Spec.Pool.Name}, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &engine.Refusal{Reason: engine.ReasonPoolNotReady, Field: "pool.name",
				Message: fmt.Sprintf("there is no FlashCachePool %s on node %s", fcv.Spec.Pool.Name, r.NodeName)}
		}
		return nil, fmt.Errorf("reading pool %s: %w", fcv.Spec.Pool.Name, err)
	}
	if pool.Spec.NodeName != fcv.Spec.NodeName {
		return nil, &engine.Refusal{Reason: engine.ReasonPoolOnAnotherNode, Field: "pool.name",
			Message: fmt.Sprintf("pool %s is on node %s, the volume on %s", pool.Name, pool.Spec.NodeName, fcv.Spec.NodeName)}
	}
	p := engine.PoolOf(&pool)
	return &p, nil
}

// chap reads the credentials of the volume's iSCSI CHAP Secret, if it names one.
func (r *Reconciler) chap(ctx context.Context, fcv *fcv1.FlashCacheVolume) (*blockdev.CHAP, error) {
	src := fcv.Spec.BackingISCSI()
	if src == nil || src.CHAPSecretRef == nil {
		return nil, nil
	}
	ref := src.CHAPSecretRef
	reader := r.reader()
	var secret corev1.Secret
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &secret); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			// Retried slowly, like a refusal: a person must create the Secret or let the agent read it.
			return nil, &engine.Refusal{Reason: fcv1.ReasonCHAPSecretUnreadable, Field: "spec.backingDevice.iscsi.chapSecretRef",
				Message: fmt.Sprintf("Secret %s/%s: %v (the agent reads Secrets only in the namespaces the chart grants it)", ref.Namespace, ref.Name, err)}
		}
		return nil, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	chap, err := volumefile.CHAPFromSecret(&secret)
	if err != nil {
		return nil, &engine.Refusal{Reason: fcv1.ReasonCHAPSecretUnreadable, Field: "spec.backingDevice.iscsi.chapSecretRef", Message: err.Error()}
	}
	return chap, nil
}

// flushWanted says why the volume must be flushed and held now, or "" when nothing wants it.
func (r *Reconciler) flushWanted(fcv *fcv1.FlashCacheVolume, node *corev1.Node) string {
	if node.Spec.Unschedulable {
		return fmt.Sprintf("node %s is cordoned", node.Name)
	}
	if at, ok := flushRequestedAt(fcv); ok && r.now().Sub(at) < r.RequestGrace {
		return fmt.Sprintf("an eviction asked for it at %s", at.Format(time.RFC3339))
	}
	return ""
}

// flushRequestedAt reads the eviction webhook's request from the volume.
func flushRequestedAt(fcv *fcv1.FlashCacheVolume) (time.Time, bool) {
	v, ok := fcv.Annotations[fcv1.AnnotationFlushRequested]
	if !ok {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339, v)
	return at, err == nil
}

// reconcileDelete tears the device down once the operator says its PersistentVolume is gone.
func (r *Reconciler) reconcileDelete(ctx context.Context, fcv *fcv1.FlashCacheVolume, v engine.Volume) (ctrl.Result, error) {
	provisioned := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionProvisioned)
	ready := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionReady)
	if provisioned == nil || provisioned.Reason == fcv1.ReasonTornDown || fcv.Spec.DeletionPolicy == fcv1.DeletionPolicyOrphan ||
		ready == nil || ready.Reason != fcv1.ReasonWaitingForTeardown {
		return ctrl.Result{}, nil
	}
	st := newReport(fcv, r.now())
	if v.Carved() && v.Pool == nil && provisioned.Status != metav1.ConditionTrue && fcv.Status.Device == nil {
		// Carved from a pool that is gone, and never built: nothing to tear down.
		return r.tornDown(ctx, fcv, st)
	}
	unlock, err := engine.Lock(ctx, v, lockWait)
	switch {
	case errors.Is(err, engine.ErrBusy):
		return ctrl.Result{RequeueAfter: retryBusy}, nil
	case err != nil:
		return r.failed(ctx, fcv, st, "teardown", err)
	}
	defer unlock()
	// The cache can be a status behind: right after a teardown, a second reconcile of the same
	// volume found it not yet torn down, and its teardown logged in to the iSCSI target again
	// (to look for our superblock on the LUN) and left the node record that logs in at boot.
	var live fcv1.FlashCacheVolume
	if err := r.reader().Get(ctx, client.ObjectKeyFromObject(fcv), &live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if p := meta.FindStatusCondition(live.Status.Conditions, fcv1.ConditionProvisioned); p != nil && p.Reason == fcv1.ReasonTornDown {
		return ctrl.Result{}, nil
	}
	res, err := r.Engine.Teardown(ctx, v, r.FlushTimeout)
	if err != nil {
		// A volume whose device was never built (its disk was never there) has nothing to tear
		// down. One that was built and lost a disk stays: its data may be on the missing disk,
		// and only a person can say it may go (deletionPolicy Orphan).
		if !errors.Is(err, blockdev.ErrNotFound) || provisioned.Status == metav1.ConditionTrue || fcv.Status.Device != nil {
			return r.failed(ctx, fcv, st, "teardown", err)
		}
	}
	// The steps, so that a log says what a teardown did (logged out, deleted the node record).
	var steps []string
	if res != nil {
		steps = res.Steps
	}
	logf.FromContext(ctx).Info("tore the device down", "steps", steps)
	r.Recorder.Eventf(fcv, nil, corev1.EventTypeNormal, "TornDown", "Teardown", "flushed, detached and removed the bcache device")
	return r.tornDown(ctx, fcv, st)
}

// reader is the API server's reader, or the cache's where none is set (unit tests).
func (r *Reconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// tornDown reports a volume with no device left, which lets the operator finish its deletion.
func (r *Reconciler) tornDown(ctx context.Context, fcv *fcv1.FlashCacheVolume, st *report) (ctrl.Result, error) {
	r.Metrics.Forget(fcv.Name)
	st.provisioned = condition(fcv1.ConditionProvisioned, metav1.ConditionFalse, fcv1.ReasonTornDown, "the device was flushed and removed")
	st.device, st.dirty, st.dirtySince, st.failure = nil, nil, nil, nil
	st.flushing = condition(fcv1.ConditionFlushing, metav1.ConditionFalse, fcv1.ReasonNotRequested, "the volume is gone")
	return ctrl.Result{}, r.applyStatus(ctx, fcv, st, false)
}

// failed reports an engine error on the volume without crashing or hammering: refusals and
// missing devices need a person and are looked at again slowly; other errors back off.
func (r *Reconciler) failed(ctx context.Context, fcv *fcv1.FlashCacheVolume, st *report, op string, err error) (ctrl.Result, error) {
	r.Metrics.EngineError(fcv.Name, op)
	class := engine.Classify(err)
	reason, result, ret := class.Reason, ctrl.Result{}, err
	switch class.Retry {
	case engine.RetrySoon:
		result, ret = ctrl.Result{RequeueAfter: retrySessionLost}, nil
	case engine.RetryWhenFixedElsewhere:
		result, ret = ctrl.Result{RequeueAfter: retryFixedElsewhere}, nil
	case engine.RetryRarely:
		result, ret = ctrl.Result{RequeueAfter: retryRefused}, nil
	}
	var refusal *engine.Refusal
	if errors.As(err, &refusal) && class.Retry == engine.RetryRarely {
		// Conditions say Refused; the refusal's own reason is in the message.
		reason = fcv1.ReasonRefused
	}
	logf.FromContext(ctx).Error(err, "engine run failed", "operation", op, "reason", reason)
	r.Recorder.Eventf(fcv, nil, corev1.EventTypeWarning, reason, op, "%s: %v", op, err)
	if f := engine.FailureOf(err); f != nil {
		st.setFailure(f)
	}
	st.fromError(fcv, reason, err)
	if serr := r.applyStatus(ctx, fcv, st, false); serr != nil {
		return ctrl.Result{}, errors.Join(ret, serr)
	}
	return result, ret
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager watches this node's volumes and the Node itself (cordon and uncordon).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fcv1.FlashCacheVolume{}).
		// A volume waiting for its pool is built as soon as the pool is.
		Watches(&fcv1.FlashCachePool{}, handler.EnqueueRequestsFromMapFunc(r.volumesOfPool),
			builder.WithPredicates(predicate.Funcs{
				UpdateFunc: func(e event.UpdateEvent) bool {
					return poolChangedItsVolumes(e.ObjectOld.(*fcv1.FlashCachePool), e.ObjectNew.(*fcv1.FlashCachePool))
				},
			})).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allVolumes),
			builder.WithPredicates(predicate.Funcs{
				UpdateFunc: func(e event.UpdateEvent) bool {
					return e.ObjectOld.(*corev1.Node).Spec.Unschedulable != e.ObjectNew.(*corev1.Node).Spec.Unschedulable
				},
			})).
		WithOptions(controller.Options{
			// Volumes on different disks flush in parallel; the engine's lock keeps two runs
			// off the same disk.
			MaxConcurrentReconciles: 4,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
		}).
		Named("agent").
		Complete(r)
}

func (r *Reconciler) allVolumes(ctx context.Context, _ client.Object) []reconcile.Request {
	var list fcv1.FlashCacheVolumeList
	if err := r.List(ctx, &list); err != nil {
		logf.FromContext(ctx).Error(err, "listing volumes after a node change")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, fcv := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: fcv.Name}})
	}
	return reqs
}

// Start records the volumes to bring up before the agent calls itself ready. It runs as a
// manager runnable once the cache has synced.
func (r *Reconciler) Start(ctx context.Context) error {
	var list fcv1.FlashCacheVolumeList
	if err := r.List(ctx, &list); err != nil {
		return fmt.Errorf("listing this node's volumes: %w", err)
	}
	r.mu.Lock()
	r.pending = map[string]bool{}
	for _, fcv := range list.Items {
		if !r.done[fcv.Name] {
			r.pending[fcv.Name] = true
		}
	}
	r.started = true
	r.mu.Unlock()
	<-ctx.Done()
	return nil
}

func (r *Reconciler) markReconciled(name string) {
	r.mu.Lock()
	delete(r.pending, name)
	if r.done == nil {
		r.done = map[string]bool{}
	}
	r.done[name] = true
	r.mu.Unlock()
}

// Ready is the readiness check: every volume known at start has been through the engine once,
// so after a reboot its bcache device is registered again.
func (r *Reconciler) Ready(_ *http.Request) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		return errors.New("the volume list has not been read yet")
	}
	if len(r.pending) > 0 {
		return fmt.Errorf("%d volumes not brought up yet", len(r.pending))
	}
	return nil
}
