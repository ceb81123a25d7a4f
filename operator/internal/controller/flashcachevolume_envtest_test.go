//go:build envtest

package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
)

func TestNewVolumeGetsFinalizerAndWaitsForAgent(t *testing.T) {
	createNode(t, "node-new", "node-new")
	fcv := createVolume(t, "new", "node-new")
	t.Cleanup(func() { orphan(t, fcv.Name) })

	waitForReady(t, "new", metav1.ConditionFalse, fcv1.ReasonWaitingForAgent)
	got := getVolume(t, "new")
	if !controllerutil.ContainsFinalizer(got, fcv1.Finalizer) {
		t.Errorf("finalizers = %v, want %s", got.Finalizers, fcv1.Finalizer)
	}
	if got.Status.Phase != fcv1.PhasePending {
		t.Errorf("phase = %s, want Pending", got.Status.Phase)
	}
	if _, err := getPV("flashcache-new"); !apierrors.IsNotFound(err) {
		t.Errorf("PersistentVolume exists before the agent reported a device (err %v)", err)
	}
}

func TestPersistentVolumeIsPublishedWhenAgentReportsDevice(t *testing.T) {
	createNode(t, "worker-a", "worker-a.example.com")
	fcv := createVolume(t, "published", "worker-a", func(v *fcv1.FlashCacheVolume) {
		v.Spec.Volume.StorageClassName = "fast-mysql"
		v.Spec.Volume.FSType = "ext4"
	})
	t.Cleanup(func() { orphan(t, fcv.Name) })
	reportAsAgent(t, "published", metav1.ConditionFalse, fcv1.ReasonProvisioning, nil)
	waitForReady(t, "published", metav1.ConditionFalse, fcv1.ReasonNotProvisioned)
	if phase := getVolume(t, "published").Status.Phase; phase != fcv1.PhaseProvisioning {
		t.Errorf("phase while the agent works = %s, want Provisioning", phase)
	}

	reportAsAgent(t, "published", metav1.ConditionTrue, fcv1.ReasonProvisioned, builtDevice("/dev/bcache/by-uuid/5f0c", "931Gi"))

	pv := waitForPV(t, "flashcache-published")
	if pv.Spec.Local == nil || pv.Spec.Local.Path != "/dev/bcache/by-uuid/5f0c" || pv.Spec.Local.FSType == nil || *pv.Spec.Local.FSType != "ext4" {
		t.Errorf("local source = %+v", pv.Spec.Local)
	}
	if got := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0]; got.Key != hostnameLabel || got.Values[0] != "worker-a.example.com" {
		t.Errorf("node affinity = %+v, want the node's hostname label", got)
	}
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Cmp(resource.MustParse("931Gi")) != 0 {
		t.Errorf("capacity = %s", got.String())
	}
	if pv.Spec.StorageClassName != "fast-mysql" || *pv.Spec.VolumeMode != corev1.PersistentVolumeFilesystem ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("class %s mode %s reclaim %s", pv.Spec.StorageClassName, *pv.Spec.VolumeMode, pv.Spec.PersistentVolumeReclaimPolicy)
	}
	if len(pv.Spec.AccessModes) != 1 || pv.Spec.AccessModes[0] != corev1.ReadWriteOnce {
		t.Errorf("access modes = %v", pv.Spec.AccessModes)
	}

	waitForReady(t, "published", metav1.ConditionTrue, fcv1.ReasonPersistentVolumeAvailable)
	got := getVolume(t, "published")
	if got.Status.PersistentVolumeName != "flashcache-published" || got.Status.Phase != fcv1.PhaseReady {
		t.Errorf("status pv=%q phase=%s", got.Status.PersistentVolumeName, got.Status.Phase)
	}
	// The operator's apply must leave the agent's fields and condition alone.
	if got.Status.Device == nil || got.Status.Device.Path != "/dev/bcache/by-uuid/5f0c" ||
		!meta.IsStatusConditionTrue(got.Status.Conditions, fcv1.ConditionProvisioned) {
		t.Errorf("agent's status was lost: device=%+v conditions=%+v", got.Status.Device, got.Status.Conditions)
	}
	eventually(t, "PersistentVolumeCreated event", func() error {
		if note, ok := eventReasons(t, got)["PersistentVolumeCreated"]; !ok || !strings.Contains(note, "worker-a:/dev/bcache/by-uuid/5f0c") {
			return fmt.Errorf("events = %v", eventReasons(t, got))
		}
		return nil
	})

	// A claim binds: Ready says so.
	setPhase(t, pv.Name, &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "db", Name: "data-mysql-0", UID: "c1"}, corev1.VolumeBound)
	waitForReady(t, "published", metav1.ConditionTrue, fcv1.ReasonPersistentVolumeBound)

	// reclaimPolicy is the one volume field that may change; it reaches the PersistentVolume.
	patchSpec(t, "published", func(v *fcv1.FlashCacheVolume) { v.Spec.Volume.ReclaimPolicy = corev1.PersistentVolumeReclaimDelete })
	eventually(t, "reclaim policy on the PersistentVolume", func() error {
		pv, err := getPV("flashcache-published")
		if err != nil {
			return err
		}
		if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
			return fmt.Errorf("reclaim policy = %s", pv.Spec.PersistentVolumeReclaimPolicy)
		}
		return nil
	})
}

func TestBlockVolumeIsPublishedWithoutFilesystem(t *testing.T) {
	createNode(t, "worker-block", "worker-block")
	fcv := createVolume(t, "raw", "worker-block", func(v *fcv1.FlashCacheVolume) { v.Spec.Volume.VolumeMode = corev1.PersistentVolumeBlock })
	t.Cleanup(func() { orphan(t, fcv.Name) })
	reportAsAgent(t, "raw", metav1.ConditionTrue, fcv1.ReasonProvisioned, builtDevice("/dev/bcache/by-uuid/raw", "10Gi"))
	pv := waitForPV(t, "flashcache-raw")
	if *pv.Spec.VolumeMode != corev1.PersistentVolumeBlock || pv.Spec.Local.FSType != nil {
		t.Errorf("volumeMode=%s fsType=%v, want Block without fsType", *pv.Spec.VolumeMode, pv.Spec.Local.FSType)
	}
}

func TestAgentRefusalFailsTheVolumeWithItsReason(t *testing.T) {
	createNode(t, "worker-refuse", "worker-refuse")
	fcv := createVolume(t, "refused", "worker-refuse")
	t.Cleanup(func() { orphan(t, fcv.Name) })
	reportAsAgent(t, "refused", metav1.ConditionFalse, "DeviceCarriesFilesystem", nil)
	waitForReady(t, "refused", metav1.ConditionFalse, fcv1.ReasonNotProvisioned)
	got := getVolume(t, "refused")
	_, _, msg := readyReason(t, "refused")
	if got.Status.Phase != fcv1.PhaseFailed || !strings.Contains(msg, "DeviceCarriesFilesystem") {
		t.Errorf("phase=%s message=%q, want Failed naming the agent's reason", got.Status.Phase, msg)
	}
}

func TestUnusableDevicePathIsNotPublished(t *testing.T) {
	createNode(t, "worker-bad", "worker-bad")
	fcv := createVolume(t, "badpath", "worker-bad")
	t.Cleanup(func() { orphan(t, fcv.Name) })
	reportAsAgent(t, "badpath", metav1.ConditionTrue, fcv1.ReasonProvisioned, builtDevice("/dev/../etc/shadow", "1Gi"))
	waitForReady(t, "badpath", metav1.ConditionFalse, fcv1.ReasonInvalidDeviceStatus)
	if _, err := getPV("flashcache-badpath"); !apierrors.IsNotFound(err) {
		t.Errorf("PersistentVolume published for an unusable path (err %v)", err)
	}
}

func TestForeignPersistentVolumeOfTheSameNameIsAConflict(t *testing.T) {
	createNode(t, "worker-c", "worker-c")
	fsType := "xfs"
	foreign := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "flashcache-clash"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/other", FSType: &fsType}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: hostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"worker-c"}}},
			}}}},
		},
	}
	if err := k8s.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), foreign) })

	fcv := createVolume(t, "clash", "worker-c")
	reportAsAgent(t, "clash", metav1.ConditionTrue, fcv1.ReasonProvisioned, builtDevice("/dev/bcache/by-uuid/clash", "1Gi"))
	waitForReady(t, "clash", metav1.ConditionFalse, fcv1.ReasonPersistentVolumeConflict)
	if phase := getVolume(t, "clash").Status.Phase; phase != fcv1.PhaseFailed {
		t.Errorf("phase = %s, want Failed", phase)
	}

	// Deleting the volume must not delete someone else's PersistentVolume.
	reportAsAgent(t, "clash", metav1.ConditionFalse, fcv1.ReasonTornDown, nil)
	if err := k8s.Delete(context.Background(), fcv); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "FlashCacheVolume clash", fcv)
	if pv, err := getPV("flashcache-clash"); err != nil || pv.Spec.Local.Path != "/mnt/other" || !pv.DeletionTimestamp.IsZero() {
		t.Errorf("the foreign PersistentVolume was touched: %v %+v", err, pv)
	}
}

func TestMissingNodeIsReportedAndPublishingResumesWhenItJoins(t *testing.T) {
	fcv := createVolume(t, "latenode", "worker-late")
	t.Cleanup(func() { orphan(t, fcv.Name) })
	reportAsAgent(t, "latenode", metav1.ConditionTrue, fcv1.ReasonProvisioned, builtDevice("/dev/bcache/by-uuid/late", "5Gi"))
	waitForReady(t, "latenode", metav1.ConditionFalse, fcv1.ReasonNodeNotFound)

	createNode(t, "worker-late", "late-host")
	pv := waitForPV(t, "flashcache-latenode")
	if v := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0]; v != "late-host" {
		t.Errorf("affinity value = %s, want late-host", v)
	}
}

func TestStorageClassIsCreatedOnlyWhenAskedAndNeverChanged(t *testing.T) {
	createNode(t, "worker-sc", "worker-sc")
	ctx := context.Background()
	fcv := createVolume(t, "withclass", "worker-sc", func(v *fcv1.FlashCacheVolume) {
		v.Spec.Volume.StorageClassName = "flashcache-local"
		v.Spec.Volume.CreateStorageClass = true
	})
	t.Cleanup(func() { orphan(t, fcv.Name) })
	var sc storagev1.StorageClass
	eventually(t, "StorageClass flashcache-local", func() error {
		return k8s.Get(ctx, types.NamespacedName{Name: "flashcache-local"}, &sc)
	})
	if sc.Provisioner != "kubernetes.io/no-provisioner" || sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		t.Errorf("StorageClass = %s %v", sc.Provisioner, sc.VolumeBindingMode)
	}

	other := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses"}, Provisioner: "example.com/csi"}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	fcv2 := createVolume(t, "withforeignclass", "worker-sc", func(v *fcv1.FlashCacheVolume) {
		v.Spec.Volume.StorageClassName = "someone-elses"
		v.Spec.Volume.CreateStorageClass = true
	})
	t.Cleanup(func() { orphan(t, fcv2.Name) })
	eventually(t, "StorageClassConflict event", func() error {
		if _, ok := eventReasons(t, getVolume(t, fcv2.Name))["StorageClassConflict"]; !ok {
			return fmt.Errorf("no StorageClassConflict event")
		}
		return nil
	})
	if err := k8s.Get(ctx, types.NamespacedName{Name: "someone-elses"}, other); err != nil || other.Provisioner != "example.com/csi" {
		t.Errorf("existing StorageClass changed: %v %s", err, other.Provisioner)
	}

	plain := createVolume(t, "noclass", "worker-sc", func(v *fcv1.FlashCacheVolume) { v.Spec.Volume.StorageClassName = "not-created" })
	t.Cleanup(func() { orphan(t, plain.Name) })
	waitForReady(t, "noclass", metav1.ConditionFalse, fcv1.ReasonWaitingForAgent)
	if err := k8s.Get(ctx, types.NamespacedName{Name: "not-created"}, &storagev1.StorageClass{}); !apierrors.IsNotFound(err) {
		t.Errorf("StorageClass created without being asked (err %v)", err)
	}
}

func TestDeletionWaitsForClaimThenPersistentVolumeThenAgentTeardown(t *testing.T) {
	createNode(t, "worker-del", "worker-del")
	fcv := createVolume(t, "deleted", "worker-del")
	reportAsAgent(t, "deleted", metav1.ConditionTrue, fcv1.ReasonProvisioned, builtDevice("/dev/bcache/by-uuid/del", "1Gi"))
	pv := waitForPV(t, "flashcache-deleted")
	setPhase(t, pv.Name, &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "db", Name: "data-mysql-1", UID: "c2"}, corev1.VolumeBound)
	waitForReady(t, "deleted", metav1.ConditionTrue, fcv1.ReasonPersistentVolumeBound)

	if err := k8s.Delete(context.Background(), fcv); err != nil {
		t.Fatal(err)
	}
	waitForReady(t, "deleted", metav1.ConditionFalse, fcv1.ReasonWaitingForClaimRelease)
	if _, _, msg := readyReason(t, "deleted"); !strings.Contains(msg, "db/data-mysql-1") || !strings.Contains(msg, "Orphan") {
		t.Errorf("message %q should name the claim and the way out", msg)
	}
	if phase := getVolume(t, "deleted").Status.Phase; phase != fcv1.PhaseDeleting {
		t.Errorf("phase = %s, want Deleting", phase)
	}
	consistently(t, "PersistentVolume kept while bound", func() error {
		pv, err := getPV("flashcache-deleted")
		if err != nil || !pv.DeletionTimestamp.IsZero() {
			return fmt.Errorf("PersistentVolume deleted under a bound claim (err %v)", err)
		}
		return nil
	})

	// The claim goes away: the PersistentVolume is deleted, then the agent is asked to tear down.
	setPhase(t, pv.Name, nil, corev1.VolumeReleased)
	waitPVDeletedByOperator(t, "flashcache-deleted")
	waitForReady(t, "deleted", metav1.ConditionFalse, fcv1.ReasonWaitingForTeardown)
	consistently(t, "volume kept until the agent tore the device down", func() error {
		_, err := getVolumeErr("deleted")
		return err
	})

	reportAsAgent(t, "deleted", metav1.ConditionFalse, fcv1.ReasonTornDown, nil)
	waitGone(t, "FlashCacheVolume", &fcv1.FlashCacheVolume{ObjectMeta: metav1.ObjectMeta{Name: "deleted"}})
}

func TestOrphanPolicyStopsAWaitingDeletionAndKeepsThePersistentVolume(t *testing.T) {
	createNode(t, "worker-orphan", "worker-orphan")
	fcv := createVolume(t, "orphaned", "worker-orphan")
	reportAsAgent(t, "orphaned", metav1.ConditionTrue, fcv1.ReasonProvisioned, builtDevice("/dev/bcache/by-uuid/orph", "1Gi"))
	pv := waitForPV(t, "flashcache-orphaned")
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pv) })
	setPhase(t, pv.Name, &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "db", Name: "data", UID: "c3"}, corev1.VolumeBound)

	if err := k8s.Delete(context.Background(), fcv); err != nil {
		t.Fatal(err)
	}
	waitForReady(t, "orphaned", metav1.ConditionFalse, fcv1.ReasonWaitingForClaimRelease)
	patchSpec(t, "orphaned", func(v *fcv1.FlashCacheVolume) { v.Spec.DeletionPolicy = fcv1.DeletionPolicyOrphan })
	waitGone(t, "FlashCacheVolume", &fcv1.FlashCacheVolume{ObjectMeta: metav1.ObjectMeta{Name: "orphaned"}})
	if pv, err := getPV("flashcache-orphaned"); err != nil || !pv.DeletionTimestamp.IsZero() {
		t.Errorf("orphaned PersistentVolume was deleted (err %v)", err)
	}
}

func TestDeletionBeforeTheAgentStartedIsImmediate(t *testing.T) {
	fcv := createVolume(t, "untouched", "worker-nowhere")
	eventually(t, "finalizer", func() error {
		if !controllerutil.ContainsFinalizer(getVolume(t, "untouched"), fcv1.Finalizer) {
			return fmt.Errorf("no finalizer yet")
		}
		return nil
	})
	if err := k8s.Delete(context.Background(), fcv); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "FlashCacheVolume", fcv)
}

func TestReclaimPolicyDeleteDeletesTheVolumeWhenItsClaimIsReleased(t *testing.T) {
	createNode(t, "worker-reclaim", "worker-reclaim")
	fcv := createVolume(t, "ephemeral", "worker-reclaim", func(v *fcv1.FlashCacheVolume) {
		v.Spec.Volume.ReclaimPolicy = corev1.PersistentVolumeReclaimDelete
	})
	reportAsAgent(t, "ephemeral", metav1.ConditionTrue, fcv1.ReasonProvisioned, builtDevice("/dev/bcache/by-uuid/eph", "1Gi"))
	pv := waitForPV(t, "flashcache-ephemeral")
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("reclaim policy = %s", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	setPhase(t, pv.Name, &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "db", Name: "scratch", UID: "c4"}, corev1.VolumeBound)
	waitForReady(t, "ephemeral", metav1.ConditionTrue, fcv1.ReasonPersistentVolumeBound)

	setPhase(t, pv.Name, nil, corev1.VolumeReleased)
	waitPVDeletedByOperator(t, "flashcache-ephemeral")
	waitForReady(t, "ephemeral", metav1.ConditionFalse, fcv1.ReasonWaitingForTeardown)
	if got := getVolume(t, "ephemeral"); got.DeletionTimestamp.IsZero() {
		t.Error("FlashCacheVolume not being deleted after its Delete-policy claim was released")
	}
	reportAsAgent(t, "ephemeral", metav1.ConditionFalse, fcv1.ReasonTornDown, nil)
	waitGone(t, "FlashCacheVolume", fcv)
}

func TestRetainedReleasedVolumeIsNotReadyAndExplainsReuse(t *testing.T) {
	createNode(t, "worker-retain", "worker-retain")
	fcv := createVolume(t, "retained", "worker-retain")
	t.Cleanup(func() { orphan(t, fcv.Name) })
	reportAsAgent(t, "retained", metav1.ConditionTrue, fcv1.ReasonProvisioned, builtDevice("/dev/bcache/by-uuid/ret", "1Gi"))
	pv := waitForPV(t, "flashcache-retained")
	setPhase(t, pv.Name, &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "db", Name: "old", UID: "c5"}, corev1.VolumeReleased)
	waitForReady(t, "retained", metav1.ConditionFalse, fcv1.ReasonPersistentVolumeReleased)
	if _, _, msg := readyReason(t, "retained"); !strings.Contains(msg, "claimRef") {
		t.Errorf("message %q should say how to reuse the volume", msg)
	}
	consistently(t, "retained PersistentVolume kept", func() error {
		_, err := getPV("flashcache-retained")
		return err
	})
}

func getVolumeErr(name string) (*fcv1.FlashCacheVolume, error) {
	var fcv fcv1.FlashCacheVolume
	err := k8s.Get(context.Background(), types.NamespacedName{Name: name}, &fcv)
	return &fcv, err
}

func patchSpec(t *testing.T, name string, mutate func(*fcv1.FlashCacheVolume)) {
	t.Helper()
	fcv := getVolume(t, name)
	patch := client.MergeFrom(fcv.DeepCopy())
	mutate(fcv)
	if err := k8s.Patch(context.Background(), fcv, patch); err != nil {
		t.Fatal(err)
	}
}

// orphan removes a test's volume without waiting for a teardown no agent will do.
func orphan(t *testing.T, name string) {
	t.Helper()
	fcv, err := getVolumeErr(name)
	if err != nil {
		return
	}
	patch := client.MergeFrom(fcv.DeepCopy())
	fcv.Spec.DeletionPolicy = fcv1.DeletionPolicyOrphan
	_ = k8s.Patch(context.Background(), fcv, patch)
	_ = k8s.Delete(context.Background(), fcv)
	_ = k8s.Delete(context.Background(), &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: persistentVolumeName(fcv)}})
}

// A volume the CSI driver carved for a claim gets no PersistentVolume from the operator (the
// provisioner publishes one): Ready follows the agent's Provisioned alone.
func TestAClaimedVolumeIsReadyWithoutAPersistentVolumeOfTheOperators(t *testing.T) {
	createNode(t, "node-claimed", "node-claimed")
	createVolume(t, "claimed", "node-claimed", func(f *fcv1.FlashCacheVolume) {
		f.Annotations = map[string]string{fcv1.AnnotationProvisionedBy: fcv1.CSIDriverName, fcv1.AnnotationClaim: "db/data-mysql-0"}
		f.Spec.CacheDevice, f.Spec.BackingDevice = nil, nil
		f.Spec.Pool = &fcv1.PoolVolumeSource{Name: "pool-claimed", Size: resource.MustParse("1Gi")}
	})
	t.Cleanup(func() { orphan(t, "claimed") })
	waitForReady(t, "claimed", metav1.ConditionFalse, fcv1.ReasonWaitingForAgent)
	reportAsAgent(t, "claimed", metav1.ConditionTrue, fcv1.ReasonProvisioned, builtDevice("/dev/flashcache/claimed", "1Gi"))
	waitForReady(t, "claimed", metav1.ConditionTrue, fcv1.ReasonProvisionedForClaim)
	if _, _, m := readyReason(t, "claimed"); !strings.Contains(m, "db/data-mysql-0") {
		t.Errorf("Ready message %q does not name the claim", m)
	}
	consistently(t, "no PersistentVolume of the operator's", func() error {
		if _, err := getPV(persistentVolumeName(getVolume(t, "claimed"))); !apierrors.IsNotFound(err) {
			return fmt.Errorf("PersistentVolume %s: %v", persistentVolumeName(getVolume(t, "claimed")), err)
		}
		return nil
	})
}
