package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	fcv1ac "github.com/flashcache/flashcache/operator/internal/applyconfiguration/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/engine"
)

// PoolFinalizer keeps a pool's object until the agent of its node has torn it down.
const PoolFinalizer = "flashcache.io/pool-teardown"

// PoolReconciler builds the pools of this node (the SSD as one cache set, the slow disks as one
// volume group) and reports their capacity; a deleted pool is torn down once no volume is carved
// from it.
type PoolReconciler struct {
	client.Client
	NodeName string
	Engine   *engine.Engine
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=flashcache.io,resources=flashcachepools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=flashcache.io,resources=flashcachepools/status,verbs=get;update;patch

// retryPool is how often a pool that failed for a reason a person must fix is looked at again.
const retryPool = 2 * time.Minute

// Reconcile brings one pool of this node to its spec and reports it.
func (r *PoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool fcv1.FlashCachePool
	if err := r.Get(ctx, req.NamespacedName, &pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pool.Spec.NodeName != r.NodeName {
		return ctrl.Result{}, nil
	}
	p := engine.PoolOf(&pool)
	if !pool.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, &pool, p)
	}
	if !controllerutil.ContainsFinalizer(&pool, PoolFinalizer) {
		// Before any device is touched: a pool deleted from now on waits for its teardown.
		controllerutil.AddFinalizer(&pool, PoolFinalizer)
		if err := r.Update(ctx, &pool); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer of pool %s: %w", pool.Name, err)
		}
	}
	// Most runs follow a volume built or removed and only read the free space again: a look
	// with the devices shared, beside the pool's volumes. A pool that needs a step, or is refused,
	// is found so again with them taken alone, and only then acted on or reported.
	if status, ok := r.lookAtPool(ctx, p); ok {
		return ctrl.Result{}, r.poolReady(ctx, &pool, status)
	}
	unlock, res, err := lockPool(ctx, p)
	if unlock == nil {
		return res, err
	}
	defer unlock()
	applied, err := r.Engine.ApplyPool(ctx, p)
	if err != nil {
		return r.poolFailed(ctx, &pool, "apply", err)
	}
	if applied.Changed {
		r.Recorder.Eventf(&pool, nil, corev1.EventTypeNormal, fcv1.ReasonProvisioned, "Apply", "%d steps: the cache set and the volume group are ready", len(applied.Steps))
	}
	return ctrl.Result{}, r.poolReady(ctx, &pool, &applied.Status)
}

// lookAtPool reads a pool that stands as its spec asks, with its devices taken shared; false when
// they are taken alone, or the pool needs more than a look.
func (r *PoolReconciler) lookAtPool(ctx context.Context, p engine.Pool) (*engine.PoolStatus, bool) {
	unlock, err := engine.LockPoolToLook(ctx, p, lockWait)
	if err != nil {
		return nil, false
	}
	defer unlock()
	return r.Engine.PoolAsBuilt(ctx, p)
}

func (r *PoolReconciler) poolReady(ctx context.Context, pool *fcv1.FlashCachePool, s *engine.PoolStatus) error {
	msg := fmt.Sprintf("cache set %s on %s of the SSD; volume group %s, %s of %s free",
		s.CacheSetUUID, quantity(s.CacheCapacityBytes), s.VolumeGroup, quantity(s.AllocatableBytes), quantity(s.CapacityBytes))
	return r.applyPoolStatus(ctx, pool, s, fcv1.PoolPhaseReady,
		condition(fcv1.ConditionProvisioned, metav1.ConditionTrue, fcv1.ReasonProvisioned, msg))
}

func (r *PoolReconciler) reconcileDelete(ctx context.Context, pool *fcv1.FlashCachePool, p engine.Pool) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, PoolFinalizer) {
		return ctrl.Result{}, nil
	}
	unlock, res, err := lockPool(ctx, p)
	if unlock == nil {
		return res, err
	}
	defer unlock()
	if _, err := r.Engine.TeardownPool(ctx, p); err != nil {
		return r.poolFailed(ctx, pool, "teardown", err)
	}
	r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, fcv1.ReasonTornDown, "Teardown", "removed the cache set and the volume group")
	controllerutil.RemoveFinalizer(pool, PoolFinalizer)
	if err := r.Update(ctx, pool); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("removing the finalizer of pool %s: %w", pool.Name, err)
	}
	logf.FromContext(ctx).Info("tore the pool down")
	return ctrl.Result{}, nil
}

// lockPool takes the pool's devices; without them (nil Unlock) the result says when to try again.
func lockPool(ctx context.Context, p engine.Pool) (engine.Unlock, ctrl.Result, error) {
	unlock, err := engine.LockPool(ctx, p, lockWait)
	switch {
	case errors.Is(err, engine.ErrBusy):
		return nil, ctrl.Result{RequeueAfter: retryBusy}, nil
	case err != nil:
		return nil, ctrl.Result{}, err
	}
	return unlock, ctrl.Result{}, nil
}

// poolFailed reports an engine error on the pool, as failed does on a volume.
func (r *PoolReconciler) poolFailed(ctx context.Context, pool *fcv1.FlashCachePool, op string, err error) (ctrl.Result, error) {
	class := engine.Classify(err)
	logf.FromContext(ctx).Error(err, "engine run on the pool failed", "operation", op, "reason", class.Reason)
	r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, class.Reason, op, "%s: %v", op, err)
	phase := fcv1.PoolPhaseFailed
	if !pool.DeletionTimestamp.IsZero() {
		phase = fcv1.PoolPhaseDeleting
	}
	cond := condition(fcv1.ConditionProvisioned, metav1.ConditionFalse, class.Reason, err.Error())
	if serr := r.applyPoolStatus(ctx, pool, nil, phase, cond); serr != nil {
		return ctrl.Result{}, serr
	}
	if class.Retry == engine.RetryWithBackoff {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: retryPool}, nil
}

// applyPoolStatus writes the agent's part of the pool's status; s is nil when the host could not
// be read, and the capacity last reported stays.
func (r *PoolReconciler) applyPoolStatus(ctx context.Context, pool *fcv1.FlashCachePool, s *engine.PoolStatus, phase fcv1.PoolPhase, c *metav1.Condition) error {
	status := fcv1ac.FlashCachePoolStatus().WithPhase(phase).WithObservedGeneration(pool.Generation)
	if s != nil {
		status.WithCacheSetUUID(s.CacheSetUUID).WithVolumeGroup(s.VolumeGroup).
			WithCacheCapacity(*resource.NewQuantity(s.CacheCapacityBytes, resource.BinarySI)).
			WithCapacity(*resource.NewQuantity(s.CapacityBytes, resource.BinarySI)).
			WithAllocatable(*resource.NewQuantity(s.AllocatableBytes, resource.BinarySI)).
			WithVolumes(int32(s.Volumes))
	} else {
		old := pool.Status
		status.WithCacheSetUUID(old.CacheSetUUID).WithVolumeGroup(old.VolumeGroup).WithVolumes(old.Volumes)
		for _, q := range []struct {
			v   *resource.Quantity
			set func(resource.Quantity) *fcv1ac.FlashCachePoolStatusApplyConfiguration
		}{{old.CacheCapacity, status.WithCacheCapacity}, {old.Capacity, status.WithCapacity}, {old.Allocatable, status.WithAllocatable}} {
			if q.v != nil {
				q.set(*q.v)
			}
		}
	}
	since := metav1.NewTime(time.Now())
	if old := meta.FindStatusCondition(pool.Status.Conditions, c.Type); old != nil && old.Status == c.Status {
		since = old.LastTransitionTime
	}
	status.WithConditions(metav1ac.Condition().WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).
		WithMessage(c.Message).WithObservedGeneration(pool.Generation).WithLastTransitionTime(since))
	ac := fcv1ac.FlashCachePool(pool.Name).WithStatus(status)
	if err := r.Status().Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying status of pool %s: %w", pool.Name, err)
	}
	return nil
}

func quantity(b int64) string { return resource.NewQuantity(b, resource.BinarySI).String() }

// SetupWithManager watches the pools, and the volumes carved from them: a volume built or gone
// changes its pool's free space, and a deleted pool waits for its last volume's teardown.
// (The volume reconciler requeues a pool's volumes when the pool changes.)
func (r *PoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fcv1.FlashCachePool{}).
		Watches(&fcv1.FlashCacheVolume{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if fcv, ok := o.(*fcv1.FlashCacheVolume); ok && fcv.Spec.Pool != nil {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: fcv.Spec.Pool.Name}}}
			}
			return nil
		}), builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				return volumeChangedItsPool(e.ObjectOld.(*fcv1.FlashCacheVolume), e.ObjectNew.(*fcv1.FlashCacheVolume))
			},
		})).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
		}).
		Named("agent-pool").
		Complete(r)
}

// volumeChangedItsPool says whether a volume's update can change its pool's free space or hold
// up its teardown: not the refreshes of dirty data, hit ratio and wear, which would otherwise
// make the pool read its disks again every few seconds for each volume.
func volumeChangedItsPool(old, new *fcv1.FlashCacheVolume) bool {
	return old.Generation != new.Generation || old.Status.ObservedGeneration != new.Status.ObservedGeneration ||
		!old.DeletionTimestamp.Equal(new.DeletionTimestamp) || !slices.Equal(old.Finalizers, new.Finalizers) ||
		conditionStatus(old.Status.Conditions, fcv1.ConditionProvisioned) != conditionStatus(new.Status.Conditions, fcv1.ConditionProvisioned) ||
		deviceIdentity(old.Status.Device) != deviceIdentity(new.Status.Device)
}

// poolChangedItsVolumes says whether a pool's update matters to the volumes carved from it: its
// spec, its readiness (volumes wait for it), its deletion, its cache set, and space given back (a
// volume refused as PoolFull waits for it). Not the space each of their own builds takes.
func poolChangedItsVolumes(old, new *fcv1.FlashCachePool) bool {
	return old.Generation != new.Generation || old.Status.Phase != new.Status.Phase ||
		old.Status.CacheSetUUID != new.Status.CacheSetUUID || !old.DeletionTimestamp.Equal(new.DeletionTimestamp) ||
		conditionStatus(old.Status.Conditions, fcv1.ConditionProvisioned) != conditionStatus(new.Status.Conditions, fcv1.ConditionProvisioned) ||
		(old.Status.Allocatable != nil && new.Status.Allocatable != nil && new.Status.Allocatable.Cmp(*old.Status.Allocatable) > 0)
}

func conditionStatus(conditions []metav1.Condition, typ string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(conditions, typ); c != nil {
		return c.Status
	}
	return ""
}

// deviceIdentity is what of a volume's device its pool counts: which device, and its size; not
// its state or mode, which change as data is written and flushed.
func deviceIdentity(d *fcv1.DeviceStatus) string {
	if d == nil {
		return ""
	}
	capacity := ""
	if d.Capacity != nil {
		capacity = d.Capacity.String()
	}
	return strings.Join([]string{d.Name, d.BackingUUID, d.CacheSetUUID, capacity}, "/")
}

// volumesOfPool are the requests of this node's volumes carved from a pool, so that a volume
// waiting for its pool (PoolNotReady) is built as soon as the pool is.
func (r *Reconciler) volumesOfPool(ctx context.Context, o client.Object) []reconcile.Request {
	var list fcv1.FlashCacheVolumeList
	if err := r.List(ctx, &list); err != nil {
		logf.FromContext(ctx).Error(err, "listing volumes after a pool change")
		return nil
	}
	var reqs []reconcile.Request
	for _, fcv := range list.Items {
		if fcv.Spec.Pool != nil && fcv.Spec.Pool.Name == o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: fcv.Name}})
		}
	}
	return reqs
}
