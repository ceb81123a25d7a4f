package controller

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
)

// operatorStatus is the part of the status the operator owns.
type operatorStatus struct {
	ready                metav1.Condition
	persistentVolumeName string
}

// failingReadyReasons are Ready reasons that need a person, rather than time, to resolve.
var failingReadyReasons = map[string]bool{
	fcv1.ReasonInvalidDeviceStatus:      true,
	fcv1.ReasonPersistentVolumeConflict: true,
	fcv1.ReasonPersistentVolumeDrift:    true,
}

// computePhase summarises the agent's conditions and the operator's Ready condition.
func computePhase(fcv *fcv1.FlashCacheVolume, ready metav1.Condition) fcv1.VolumePhase {
	if !fcv.DeletionTimestamp.IsZero() {
		return fcv1.PhaseDeleting
	}
	conds := fcv.Status.Conditions
	provisioned := meta.FindStatusCondition(conds, fcv1.ConditionProvisioned)
	switch {
	case failingReadyReasons[ready.Reason]:
		return fcv1.PhaseFailed
	case provisioned == nil:
		return fcv1.PhasePending
	case provisioned.Status != metav1.ConditionTrue && provisioned.Reason == fcv1.ReasonProvisioning:
		return fcv1.PhaseProvisioning
	case provisioned.Status != metav1.ConditionTrue:
		return fcv1.PhaseFailed
	case meta.IsStatusConditionTrue(conds, fcv1.ConditionDegraded):
		return fcv1.PhaseDegraded
	case meta.IsStatusConditionTrue(conds, fcv1.ConditionFlushing) && meta.FindStatusCondition(conds, fcv1.ConditionFlushing).Reason != fcv1.ReasonFlushPass:
		return fcv1.PhaseFlushing
	case ready.Status == metav1.ConditionTrue:
		return fcv1.PhaseReady
	default:
		return fcv1.PhaseProvisioning
	}
}

// readyCondition builds the Ready condition, keeping the last transition time when the status
// does not change, as meta.SetStatusCondition does.
func readyCondition(fcv *fcv1.FlashCacheVolume, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	cond := metav1.Condition{
		Type:               fcv1.ConditionReady,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: fcv.Generation,
		LastTransitionTime: metav1.Now(),
	}
	if old := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionReady); old != nil && old.Status == status {
		cond.LastTransitionTime = old.LastTransitionTime
	}
	return cond
}

// statusUpToDate says whether applying the operator's part would change nothing.
func statusUpToDate(fcv *fcv1.FlashCacheVolume, want operatorStatus, phase fcv1.VolumePhase) bool {
	old := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionReady)
	return old != nil &&
		old.Status == want.ready.Status &&
		old.Reason == want.ready.Reason &&
		old.Message == want.ready.Message &&
		old.ObservedGeneration == want.ready.ObservedGeneration &&
		fcv.Status.Phase == phase &&
		fcv.Status.PersistentVolumeName == want.persistentVolumeName
}
