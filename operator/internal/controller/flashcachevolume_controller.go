// Package controller reconciles FlashCacheVolumes into PersistentVolumes.
package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	fcv1ac "github.com/flashcache/flashcache/operator/internal/applyconfiguration/api/v1alpha1"
)

const (
	// FieldManager is the operator's server-side apply identity; the agent uses its own.
	FieldManager = "flashcache-operator"
	// nodeNameIndex indexes FlashCacheVolumes by spec.nodeName.
	nodeNameIndex = "spec.nodeName"
	// noProvisioner is the provisioner of StorageClasses whose volumes are created by hand.
	noProvisioner = "kubernetes.io/no-provisioner"
	// nodeRetry is how soon to look again for a Node that does not exist yet.
	nodeRetry = 30 * time.Second
)

// FlashCacheVolumeReconciler publishes a PersistentVolume for each FlashCacheVolume that the node
// agent has built, and holds deletion until the volume's claim and device are gone.
type FlashCacheVolumeReconciler struct {
	client.Client
	// APIReader reads objects the cache does not hold (PersistentVolumes without our label).
	APIReader client.Reader
	Recorder  events.EventRecorder
}

// +kubebuilder:rbac:groups=flashcache.io,resources=flashcachevolumes,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=flashcache.io,resources=flashcachevolumes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=flashcache.io,resources=flashcachevolumes/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one FlashCacheVolume one step towards its spec.
func (r *FlashCacheVolumeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fcv fcv1.FlashCacheVolume
	if err := r.Get(ctx, req.NamespacedName, &fcv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fcv.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, &fcv)
	}
	if controllerutil.AddFinalizer(&fcv, fcv1.Finalizer) {
		if err := r.Update(ctx, &fcv); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer %s: %w", fcv1.Finalizer, err)
		}
	}
	if err := r.ensureStorageClass(ctx, &fcv); err != nil {
		return ctrl.Result{}, err
	}
	want, result, err := r.reconcilePersistentVolume(ctx, &fcv)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.applyStatus(ctx, &fcv, want); err != nil {
		return ctrl.Result{}, err
	}
	return result, nil
}

// reconcilePersistentVolume publishes the PersistentVolume once the agent reports the device, and
// says what the Ready condition should be.
func (r *FlashCacheVolumeReconciler) reconcilePersistentVolume(ctx context.Context, fcv *fcv1.FlashCacheVolume) (operatorStatus, ctrl.Result, error) {
	log := logf.FromContext(ctx)
	notReady := func(reason, format string, args ...any) operatorStatus {
		return operatorStatus{ready: readyCondition(fcv, metav1.ConditionFalse, reason, fmt.Sprintf(format, args...))}
	}

	provisioned := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionProvisioned)
	if fcv.Annotations[fcv1.AnnotationProvisionedBy] == fcv1.CSIDriverName {
		// Carved for a claim: the CSI provisioner publishes its PersistentVolume.
		switch {
		case provisioned == nil:
			return notReady(fcv1.ReasonWaitingForAgent, "waiting for the node agent on %s to build the device", fcv.Spec.NodeName), ctrl.Result{}, nil
		case provisioned.Status != metav1.ConditionTrue:
			return notReady(fcv1.ReasonNotProvisioned, "node agent: %s: %s", provisioned.Reason, provisioned.Message), ctrl.Result{}, nil
		}
		return operatorStatus{ready: readyCondition(fcv, metav1.ConditionTrue, fcv1.ReasonProvisionedForClaim,
			fmt.Sprintf("carved for claim %s; %s publishes its PersistentVolume", orUnknownClaim(fcv.Annotations[fcv1.AnnotationClaim]), fcv1.CSIDriverName))}, ctrl.Result{}, nil
	}

	pv, err := r.getPersistentVolume(ctx, persistentVolumeName(fcv))
	if err != nil {
		return operatorStatus{}, ctrl.Result{}, err
	}
	conflict := notReady(fcv1.ReasonPersistentVolumeConflict,
		"PersistentVolume %s exists but was not published for this FlashCacheVolume (uid %s); delete it or rename this volume",
		persistentVolumeName(fcv), fcv.UID)
	if pv != nil && !ownedBy(pv, fcv) {
		return conflict, ctrl.Result{}, nil
	}

	if pv == nil {
		switch {
		case provisioned == nil:
			return notReady(fcv1.ReasonWaitingForAgent, "waiting for the node agent on %s to build the device", fcv.Spec.NodeName), ctrl.Result{}, nil
		case provisioned.Status != metav1.ConditionTrue:
			return notReady(fcv1.ReasonNotProvisioned, "node agent: %s: %s", provisioned.Reason, provisioned.Message), ctrl.Result{}, nil
		}
		if err := validateDeviceStatus(fcv.Status.Device); err != nil {
			return notReady(fcv1.ReasonInvalidDeviceStatus, "the node agent's report is unusable: %v", err), ctrl.Result{}, nil
		}
	}

	var node metav1.PartialObjectMetadata
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := r.Get(ctx, types.NamespacedName{Name: fcv.Spec.NodeName}, &node); err != nil {
		if !apierrors.IsNotFound(err) {
			return operatorStatus{}, ctrl.Result{}, fmt.Errorf("reading node %s: %w", fcv.Spec.NodeName, err)
		}
		return notReady(fcv1.ReasonNodeNotFound, "node %s does not exist", fcv.Spec.NodeName), ctrl.Result{RequeueAfter: nodeRetry}, nil
	}

	if pv == nil {
		pv = desiredPersistentVolume(fcv, nodeHostname(node.Name, node.Labels))
		if err := r.Create(ctx, pv); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Created meanwhile by someone else, unseen by our label-filtered cache.
				return conflict, ctrl.Result{}, nil
			}
			return operatorStatus{}, ctrl.Result{}, fmt.Errorf("creating PersistentVolume %s: %w", pv.Name, err)
		}
		log.Info("created PersistentVolume", "persistentVolume", pv.Name, "path", pv.Spec.Local.Path)
		r.Recorder.Eventf(fcv, pv, corev1.EventTypeNormal, "PersistentVolumeCreated", "Create",
			"created PersistentVolume %s on %s:%s", pv.Name, fcv.Spec.NodeName, pv.Spec.Local.Path)
	}

	published := operatorStatus{persistentVolumeName: pv.Name}
	if fcv.Status.Device != nil && validateDeviceStatus(fcv.Status.Device) == nil {
		want := desiredPersistentVolume(fcv, nodeHostname(node.Name, node.Labels))
		if drift := immutableDrift(pv, want); len(drift) > 0 {
			published.ready = readyCondition(fcv, metav1.ConditionFalse, fcv1.ReasonPersistentVolumeDrift,
				fmt.Sprintf("PersistentVolume %s differs from this volume in %s, which cannot be changed in place",
					pv.Name, strings.Join(drift, ", ")))
			return published, ctrl.Result{}, nil
		}
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != fcv.Spec.Volume.ReclaimPolicy {
		patch := client.MergeFrom(pv.DeepCopy())
		pv.Spec.PersistentVolumeReclaimPolicy = fcv.Spec.Volume.ReclaimPolicy
		if err := r.Patch(ctx, pv, patch); err != nil {
			return operatorStatus{}, ctrl.Result{}, fmt.Errorf("setting reclaim policy of PersistentVolume %s: %w", pv.Name, err)
		}
	}

	switch {
	case claimReleased(pv) && fcv.Spec.Volume.ReclaimPolicy == corev1.PersistentVolumeReclaimDelete:
		log.Info("claim released with reclaimPolicy Delete; deleting the volume", "claim", claimName(pv))
		r.Recorder.Eventf(fcv, pv, corev1.EventTypeNormal, "ClaimReleased", "Delete",
			"claim %s released PersistentVolume %s and reclaimPolicy is Delete: deleting this volume", claimName(pv), pv.Name)
		if err := r.Delete(ctx, fcv, client.Preconditions{UID: &fcv.UID}); client.IgnoreNotFound(err) != nil {
			return operatorStatus{}, ctrl.Result{}, fmt.Errorf("deleting FlashCacheVolume after its claim was released: %w", err)
		}
		published.ready = readyCondition(fcv, metav1.ConditionFalse, fcv1.ReasonPersistentVolumeReleased,
			fmt.Sprintf("claim %s released the volume; reclaimPolicy Delete: the volume is being deleted", claimName(pv)))
	case claimReleased(pv):
		published.ready = readyCondition(fcv, metav1.ConditionFalse, fcv1.ReasonPersistentVolumeReleased,
			fmt.Sprintf("claim %s released PersistentVolume %s; the data is kept (reclaimPolicy Retain). "+
				"To offer it to a new claim, remove spec.claimRef from the PersistentVolume", claimName(pv), pv.Name))
	case pv.Spec.ClaimRef != nil:
		published.ready = readyCondition(fcv, metav1.ConditionTrue, fcv1.ReasonPersistentVolumeBound,
			fmt.Sprintf("PersistentVolume %s is bound to claim %s", pv.Name, claimName(pv)))
	default:
		published.ready = readyCondition(fcv, metav1.ConditionTrue, fcv1.ReasonPersistentVolumeAvailable,
			fmt.Sprintf("PersistentVolume %s is available to claims of StorageClass %q", pv.Name, pv.Spec.StorageClassName))
	}
	return published, ctrl.Result{}, nil
}

// reconcileDelete holds the finalizer until no claim uses the volume, its PersistentVolume is
// gone, and the agent has torn the device down; or at once when the user orphans it.
func (r *FlashCacheVolumeReconciler) reconcileDelete(ctx context.Context, fcv *fcv1.FlashCacheVolume) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	if !controllerutil.ContainsFinalizer(fcv, fcv1.Finalizer) {
		return ctrl.Result{}, nil
	}
	if fcv.Spec.DeletionPolicy == fcv1.DeletionPolicyOrphan {
		log.Info("orphaning the volume: its PersistentVolume and device are left as they are")
		r.Recorder.Eventf(fcv, nil, corev1.EventTypeWarning, "Orphaned", "Delete",
			"deletionPolicy Orphan: PersistentVolume %s and the bcache device on %s are left in place",
			persistentVolumeName(fcv), fcv.Spec.NodeName)
		return ctrl.Result{}, r.removeFinalizer(ctx, fcv)
	}

	waiting := func(reason, format string, args ...any) (ctrl.Result, error) {
		return ctrl.Result{}, r.applyStatus(ctx, fcv, operatorStatus{
			ready: readyCondition(fcv, metav1.ConditionFalse, reason, fmt.Sprintf(format, args...)),
		})
	}

	pv, err := r.getPersistentVolume(ctx, persistentVolumeName(fcv))
	if err != nil {
		return ctrl.Result{}, err
	}
	if pv != nil && ownedBy(pv, fcv) {
		if claimHolds(pv) {
			return waiting(fcv1.ReasonWaitingForClaimRelease,
				"PersistentVolume %s is bound to claim %s: delete the claim first, or set spec.deletionPolicy to Orphan",
				pv.Name, claimName(pv))
		}
		if pv.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, pv, client.Preconditions{UID: &pv.UID}); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("deleting PersistentVolume %s: %w", pv.Name, err)
			}
			log.Info("deleted PersistentVolume", "persistentVolume", pv.Name)
			r.Recorder.Eventf(fcv, pv, corev1.EventTypeNormal, "PersistentVolumeDeleted", "Delete",
				"deleted PersistentVolume %s", pv.Name)
		}
		return waiting(fcv1.ReasonDeletingPersistentVolume, "waiting for PersistentVolume %s to be deleted", pv.Name)
	}

	provisioned := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionProvisioned)
	if provisioned != nil && provisioned.Reason != fcv1.ReasonTornDown {
		return waiting(fcv1.ReasonWaitingForTeardown,
			"waiting for the node agent on %s to flush and remove the bcache device; set spec.deletionPolicy to Orphan to leave it",
			fcv.Spec.NodeName)
	}
	if provisioned != nil {
		r.Recorder.Eventf(fcv, nil, corev1.EventTypeNormal, "TornDown", "Delete",
			"the node agent on %s removed the bcache device", fcv.Spec.NodeName)
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, fcv)
}

func (r *FlashCacheVolumeReconciler) removeFinalizer(ctx context.Context, fcv *fcv1.FlashCacheVolume) error {
	patch := client.MergeFromWithOptions(fcv.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(fcv, fcv1.Finalizer)
	// The optimistic lock matters: an agent that has just recorded that it is touching the
	// devices makes this patch fail, and the next pass waits for its teardown.
	if err := r.Patch(ctx, fcv, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing finalizer %s: %w", fcv1.Finalizer, err)
	}
	return nil
}

// getPersistentVolume reads a PersistentVolume from the cache, which holds only ours, and falls
// back to the API server so that a foreign one of the same name is seen as a conflict.
func (r *FlashCacheVolumeReconciler) getPersistentVolume(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	var pv corev1.PersistentVolume
	err := r.Get(ctx, types.NamespacedName{Name: name}, &pv)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, types.NamespacedName{Name: name}, &pv)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading PersistentVolume %s: %w", name, err)
	}
	return &pv, nil
}

// ensureStorageClass creates the StorageClass when asked to and it does not exist. An existing
// one is never changed: other volumes and claims may depend on it.
func (r *FlashCacheVolumeReconciler) ensureStorageClass(ctx context.Context, fcv *fcv1.FlashCacheVolume) error {
	if !fcv.Spec.Volume.CreateStorageClass {
		return nil
	}
	name := fcv.Spec.Volume.StorageClassName
	var sc storagev1.StorageClass
	err := r.Get(ctx, types.NamespacedName{Name: name}, &sc)
	if err == nil {
		if sc.Provisioner != noProvisioner {
			r.Recorder.Eventf(fcv, &sc, corev1.EventTypeWarning, "StorageClassConflict", "Create",
				"StorageClass %s exists with provisioner %s, not %s; it is left unchanged", name, sc.Provisioner, noProvisioner)
		}
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading StorageClass %s: %w", name, err)
	}
	bindingMode := storagev1.VolumeBindingWaitForFirstConsumer
	reclaim := corev1.PersistentVolumeReclaimRetain
	sc = storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "flashcache"}},
		Provisioner:       noProvisioner,
		VolumeBindingMode: &bindingMode,
		ReclaimPolicy:     &reclaim,
	}
	if err := r.Create(ctx, &sc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", name, err)
	}
	r.Recorder.Eventf(fcv, &sc, corev1.EventTypeNormal, "StorageClassCreated", "Create",
		"created StorageClass %s (%s, WaitForFirstConsumer)", name, noProvisioner)
	return nil
}

// applyStatus writes the operator's part of the status with server-side apply, leaving the
// agent's fields and conditions to the agent. It writes nothing when nothing changed, so its own
// update event ends the loop.
func (r *FlashCacheVolumeReconciler) applyStatus(ctx context.Context, fcv *fcv1.FlashCacheVolume, want operatorStatus) error {
	phase := computePhase(fcv, want.ready)
	if statusUpToDate(fcv, want, phase) {
		return nil
	}
	c := want.ready
	status := fcv1ac.FlashCacheVolumeStatus().
		WithPhase(phase).
		WithConditions(metav1ac.Condition().
			WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).WithMessage(c.Message).
			WithObservedGeneration(c.ObservedGeneration).WithLastTransitionTime(c.LastTransitionTime))
	if want.persistentVolumeName != "" {
		status.WithPersistentVolumeName(want.persistentVolumeName)
	}
	ac := fcv1ac.FlashCacheVolume(fcv.Name).WithStatus(status)
	if err := r.Status().Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying status: %w", err)
	}
	return nil
}

// SetupWithManager registers the controller and what it watches.
func (r *FlashCacheVolumeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &fcv1.FlashCacheVolume{}, nodeNameIndex,
		func(o client.Object) []string { return []string{o.(*fcv1.FlashCacheVolume).Spec.NodeName} }); err != nil {
		return fmt.Errorf("indexing FlashCacheVolumes by node: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&fcv1.FlashCacheVolume{}).
		Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(volumeOfPersistentVolume)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.volumesOnNode),
			builder.OnlyMetadata, builder.WithPredicates(predicate.Or(predicate.LabelChangedPredicate{}, createOrDelete()))).
		Named("flashcachevolume").
		Complete(r)
}

func volumeOfPersistentVolume(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[fcv1.LabelVolume]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

func (r *FlashCacheVolumeReconciler) volumesOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var list fcv1.FlashCacheVolumeList
	if err := r.List(ctx, &list, client.MatchingFields{nodeNameIndex: o.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "listing FlashCacheVolumes of node", "node", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, v := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: v.Name}})
	}
	return reqs
}

// createOrDelete passes only the creation and deletion of an object: a Node's status heartbeat
// must not wake every volume on it.
func createOrDelete() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc:  func(_ event.UpdateEvent) bool { return false },
		GenericFunc: func(_ event.GenericEvent) bool { return false },
	}
}

// CacheOptions limits what the manager's cache holds: only PersistentVolumes that carry our
// label, so a cluster with thousands of other volumes costs the operator nothing.
func CacheOptions() (cache.Options, error) {
	selector, err := labels.Parse(fcv1.LabelVolume)
	if err != nil {
		return cache.Options{}, fmt.Errorf("parsing PersistentVolume selector: %w", err)
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.PersistentVolume{}: {Label: selector},
	}}, nil
}

// orUnknownClaim is a claimed volume's claim as its annotation names it, when the provisioner
// passed the claim's name.
func orUnknownClaim(claim string) string {
	if claim == "" {
		return "(name not passed by the provisioner)"
	}
	return claim
}
