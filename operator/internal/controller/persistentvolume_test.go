package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
)

func builtVolume(mode corev1.PersistentVolumeMode) *fcv1.FlashCacheVolume {
	capacity := resource.MustParse("100Gi")
	return &fcv1.FlashCacheVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "mysql-0", UID: "uid-1"},
		Spec: fcv1.FlashCacheVolumeSpec{
			NodeName: "worker-1",
			Volume: fcv1.VolumeSpec{
				StorageClassName: "flashcache", VolumeMode: mode, FSType: "xfs",
				ReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			},
		},
		Status: fcv1.FlashCacheVolumeStatus{Device: &fcv1.DeviceStatus{
			Name: "bcache0", Path: "/dev/bcache/by-uuid/1234", Capacity: &capacity,
		}},
	}
}

func TestDesiredPersistentVolumeIsLocalVolumePinnedToNodeHostname(t *testing.T) {
	pv := desiredPersistentVolume(builtVolume(corev1.PersistentVolumeFilesystem), "worker-1.example")

	if pv.Name != "flashcache-mysql-0" {
		t.Errorf("name = %q, want flashcache-mysql-0", pv.Name)
	}
	if pv.Spec.Local == nil || pv.Spec.Local.Path != "/dev/bcache/by-uuid/1234" {
		t.Fatalf("local = %+v, want path /dev/bcache/by-uuid/1234", pv.Spec.Local)
	}
	if pv.Spec.Local.FSType == nil || *pv.Spec.Local.FSType != "xfs" {
		t.Errorf("fsType = %v, want xfs", pv.Spec.Local.FSType)
	}
	term := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0]
	if term.Key != "kubernetes.io/hostname" || term.Operator != corev1.NodeSelectorOpIn || len(term.Values) != 1 || term.Values[0] != "worker-1.example" {
		t.Errorf("node affinity = %+v, want kubernetes.io/hostname In [worker-1.example]", term)
	}
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Cmp(resource.MustParse("100Gi")) != 0 {
		t.Errorf("capacity = %s, want 100Gi", got.String())
	}
	if pv.Labels[fcv1.LabelVolume] != "mysql-0" || pv.Annotations[fcv1.AnnotationVolumeUID] != "uid-1" {
		t.Errorf("ownership marks = %v %v", pv.Labels, pv.Annotations)
	}
	if !ownedBy(pv, builtVolume(corev1.PersistentVolumeFilesystem)) {
		t.Error("ownedBy(desired PV) = false")
	}
}

func TestBlockVolumeHasNoFilesystemType(t *testing.T) {
	pv := desiredPersistentVolume(builtVolume(corev1.PersistentVolumeBlock), "worker-1")
	if pv.Spec.Local.FSType != nil {
		t.Errorf("fsType = %q, want none for a Block volume", *pv.Spec.Local.FSType)
	}
	if *pv.Spec.VolumeMode != corev1.PersistentVolumeBlock {
		t.Errorf("volumeMode = %s", *pv.Spec.VolumeMode)
	}
}

func TestOwnedByRejectsSameNameFromAnotherObject(t *testing.T) {
	pv := desiredPersistentVolume(builtVolume(corev1.PersistentVolumeFilesystem), "worker-1")
	recreated := builtVolume(corev1.PersistentVolumeFilesystem)
	recreated.UID = "uid-2"
	if ownedBy(pv, recreated) {
		t.Error("a PersistentVolume of an earlier object with the same name counted as owned")
	}
}

func TestNodeHostnamePrefersLabel(t *testing.T) {
	if got := nodeHostname("n1", map[string]string{hostnameLabel: "host-a"}); got != "host-a" {
		t.Errorf("got %q, want host-a", got)
	}
	if got := nodeHostname("n1", nil); got != "n1" {
		t.Errorf("got %q, want n1", got)
	}
}

func TestValidateDeviceStatus(t *testing.T) {
	good := resource.MustParse("1Gi")
	zero := resource.MustParse("0")
	cases := []struct {
		name string
		dev  *fcv1.DeviceStatus
		ok   bool
	}{
		{"stable path", &fcv1.DeviceStatus{Path: "/dev/bcache/by-uuid/x", Capacity: &good}, true},
		{"missing", nil, false},
		{"relative", &fcv1.DeviceStatus{Path: "bcache0", Capacity: &good}, false},
		{"outside /dev", &fcv1.DeviceStatus{Path: "/etc/shadow", Capacity: &good}, false},
		{"escapes /dev", &fcv1.DeviceStatus{Path: "/dev/../etc/shadow", Capacity: &good}, false},
		{"no capacity", &fcv1.DeviceStatus{Path: "/dev/bcache0"}, false},
		{"zero capacity", &fcv1.DeviceStatus{Path: "/dev/bcache0", Capacity: &zero}, false},
	}
	for _, c := range cases {
		err := validateDeviceStatus(c.dev)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestImmutableDriftNamesChangedFields(t *testing.T) {
	fcv := builtVolume(corev1.PersistentVolumeFilesystem)
	want := desiredPersistentVolume(fcv, "worker-1")
	if d := immutableDrift(want.DeepCopy(), want); len(d) != 0 {
		t.Fatalf("drift of identical PV = %v", d)
	}
	have := want.DeepCopy()
	have.Spec.Local.Path = "/dev/bcache1"
	have.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values = []string{"worker-2"}
	got := immutableDrift(have, want)
	if len(got) != 2 || got[0] != "spec.local" || got[1] != "spec.nodeAffinity" {
		t.Errorf("drift = %v, want [spec.local spec.nodeAffinity]", got)
	}
}

func TestClaimHoldsUntilReleased(t *testing.T) {
	ref := &corev1.ObjectReference{Namespace: "db", Name: "data-mysql-0"}
	cases := []struct {
		phase    corev1.PersistentVolumePhase
		claim    *corev1.ObjectReference
		holds    bool
		released bool
	}{
		{corev1.VolumeAvailable, nil, false, false},
		{corev1.VolumeAvailable, ref, true, false}, // pre-bound, binding in progress
		{corev1.VolumeBound, ref, true, false},
		{corev1.VolumeReleased, ref, false, true},
		{corev1.VolumeFailed, ref, false, true},
	}
	for _, c := range cases {
		pv := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{ClaimRef: c.claim}, Status: corev1.PersistentVolumeStatus{Phase: c.phase}}
		if claimHolds(pv) != c.holds || claimReleased(pv) != c.released {
			t.Errorf("phase %s claim %v: holds=%v released=%v, want %v %v", c.phase, c.claim != nil, claimHolds(pv), claimReleased(pv), c.holds, c.released)
		}
	}
	if got := claimName(&corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{ClaimRef: ref}}); got != "db/data-mysql-0" {
		t.Errorf("claimName = %q", got)
	}
}

func TestComputePhase(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason}
	}
	ready := cond(fcv1.ConditionReady, metav1.ConditionTrue, fcv1.ReasonPersistentVolumeAvailable)
	notReady := cond(fcv1.ConditionReady, metav1.ConditionFalse, fcv1.ReasonWaitingForAgent)
	provisioned := cond(fcv1.ConditionProvisioned, metav1.ConditionTrue, fcv1.ReasonProvisioned)
	cases := []struct {
		name     string
		conds    []metav1.Condition
		ready    metav1.Condition
		deleting bool
		want     fcv1.VolumePhase
	}{
		{"new", nil, notReady, false, fcv1.PhasePending},
		{"agent working", []metav1.Condition{cond(fcv1.ConditionProvisioned, metav1.ConditionFalse, fcv1.ReasonProvisioning)}, notReady, false, fcv1.PhaseProvisioning},
		{"agent refused", []metav1.Condition{cond(fcv1.ConditionProvisioned, metav1.ConditionFalse, "DeviceInUse")}, notReady, false, fcv1.PhaseFailed},
		{"built, PV pending", []metav1.Condition{provisioned}, notReady, false, fcv1.PhaseProvisioning},
		{"PV conflict before the agent reported", nil, cond(fcv1.ConditionReady, metav1.ConditionFalse, fcv1.ReasonPersistentVolumeConflict), false, fcv1.PhaseFailed},
		{"built, PV conflict", []metav1.Condition{provisioned}, cond(fcv1.ConditionReady, metav1.ConditionFalse, fcv1.ReasonPersistentVolumeConflict), false, fcv1.PhaseFailed},
		{"ready", []metav1.Condition{provisioned}, ready, false, fcv1.PhaseReady},
		{"flushing", []metav1.Condition{provisioned, cond(fcv1.ConditionFlushing, metav1.ConditionTrue, "Drain")}, ready, false, fcv1.PhaseFlushing},
		{"a flush pass is not a drain", []metav1.Condition{provisioned, cond(fcv1.ConditionFlushing, metav1.ConditionTrue, fcv1.ReasonFlushPass)}, ready, false, fcv1.PhaseReady},
		{"degraded wins over flushing", []metav1.Condition{provisioned, cond(fcv1.ConditionFlushing, metav1.ConditionTrue, "Drain"), cond(fcv1.ConditionDegraded, metav1.ConditionTrue, "CacheLost")}, ready, false, fcv1.PhaseDegraded},
		{"deleting", []metav1.Condition{provisioned}, ready, true, fcv1.PhaseDeleting},
	}
	for _, c := range cases {
		fcv := &fcv1.FlashCacheVolume{Status: fcv1.FlashCacheVolumeStatus{Conditions: c.conds}}
		if c.deleting {
			now := metav1.Now()
			fcv.DeletionTimestamp = &now
		}
		if got := computePhase(fcv, c.ready); got != c.want {
			t.Errorf("%s: phase = %s, want %s", c.name, got, c.want)
		}
	}
}

func TestReadyConditionKeepsTransitionTimeWhileStatusHolds(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fcv := &fcv1.FlashCacheVolume{Status: fcv1.FlashCacheVolumeStatus{Conditions: []metav1.Condition{{
		Type: fcv1.ConditionReady, Status: metav1.ConditionFalse, Reason: fcv1.ReasonWaitingForAgent, LastTransitionTime: then,
	}}}}
	same := readyCondition(fcv, metav1.ConditionFalse, fcv1.ReasonNodeNotFound, "node gone")
	if !same.LastTransitionTime.Equal(&then) {
		t.Errorf("status unchanged but transition time moved to %v", same.LastTransitionTime)
	}
	flipped := readyCondition(fcv, metav1.ConditionTrue, fcv1.ReasonPersistentVolumeAvailable, "")
	if flipped.LastTransitionTime.Equal(&then) {
		t.Error("status changed but transition time stayed")
	}
}
