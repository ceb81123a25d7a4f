package controller

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
)

const (
	// hostnameLabel is what kubelet labels its Node with and what the scheduler's volume binding
	// matches a local PersistentVolume's node affinity against (it sees node labels, not fields).
	hostnameLabel = "kubernetes.io/hostname"
	// pvNamePrefix keeps our PersistentVolumes apart from anyone else's.
	pvNamePrefix = "flashcache-"
)

// persistentVolumeName is the name of the PersistentVolume published for a FlashCacheVolume.
func persistentVolumeName(fcv *fcv1.FlashCacheVolume) string {
	return pvNamePrefix + fcv.Name
}

// nodeHostname is the value of the node's hostname label, which can differ from its name.
func nodeHostname(nodeName string, labels map[string]string) string {
	if h := labels[hostnameLabel]; h != "" {
		return h
	}
	return nodeName
}

// validateDeviceStatus checks what the agent reported before it becomes a PersistentVolume:
// kubelet will open that path as root on the node.
func validateDeviceStatus(dev *fcv1.DeviceStatus) error {
	if dev == nil {
		return fmt.Errorf("status.device is not set")
	}
	if !strings.HasPrefix(dev.Path, "/dev/") || path.Clean(dev.Path) != dev.Path {
		return fmt.Errorf("status.device.path %q is not a clean path under /dev/", dev.Path)
	}
	if dev.Capacity == nil || dev.Capacity.Sign() <= 0 {
		return fmt.Errorf("status.device.capacity is not a positive size")
	}
	return nil
}

// desiredPersistentVolume is the local PersistentVolume on the bcache device's stable path,
// pinned to the node that owns the devices.
func desiredPersistentVolume(fcv *fcv1.FlashCacheVolume, hostname string) *corev1.PersistentVolume {
	vol := fcv.Spec.Volume
	volumeMode := vol.VolumeMode
	local := &corev1.LocalVolumeSource{Path: fcv.Status.Device.Path}
	if volumeMode != corev1.PersistentVolumeBlock {
		fsType := string(vol.FSType)
		local.FSType = &fsType
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name: persistentVolumeName(fcv),
			Labels: map[string]string{
				fcv1.LabelVolume:               fcv.Name,
				"app.kubernetes.io/managed-by": "flashcache",
			},
			Annotations: map[string]string{fcv1.AnnotationVolumeUID: string(fcv.UID)},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *fcv.Status.Device.Capacity},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: vol.ReclaimPolicy,
			StorageClassName:              vol.StorageClassName,
			VolumeMode:                    &volumeMode,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: local},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: hostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{hostname},
					}},
				}},
			}},
		},
	}
}

// ownedBy says whether an existing PersistentVolume was published for this very object.
func ownedBy(pv *corev1.PersistentVolume, fcv *fcv1.FlashCacheVolume) bool {
	return pv.Labels[fcv1.LabelVolume] == fcv.Name && pv.Annotations[fcv1.AnnotationVolumeUID] == string(fcv.UID)
}

// immutableDrift lists the fields of an existing PersistentVolume that differ from what it should
// be and that the API server does not let anyone change in place.
func immutableDrift(have, want *corev1.PersistentVolume) []string {
	var drift []string
	if !equality.Semantic.DeepEqual(have.Spec.PersistentVolumeSource, want.Spec.PersistentVolumeSource) {
		drift = append(drift, "spec.local")
	}
	if !equality.Semantic.DeepEqual(have.Spec.NodeAffinity, want.Spec.NodeAffinity) {
		drift = append(drift, "spec.nodeAffinity")
	}
	if !equality.Semantic.DeepEqual(have.Spec.VolumeMode, want.Spec.VolumeMode) {
		drift = append(drift, "spec.volumeMode")
	}
	if have.Spec.StorageClassName != want.Spec.StorageClassName {
		drift = append(drift, "spec.storageClassName")
	}
	return drift
}

// claimHolds says whether a claim still holds the PersistentVolume, so deleting it now would take
// a database's disk away. A Released or Failed volume has lost its claim.
func claimHolds(pv *corev1.PersistentVolume) bool {
	if pv.Spec.ClaimRef == nil {
		return false
	}
	switch pv.Status.Phase {
	case corev1.VolumeReleased, corev1.VolumeFailed:
		return false
	}
	return true
}

// claimReleased says whether a claim that was bound to the PersistentVolume has gone away.
func claimReleased(pv *corev1.PersistentVolume) bool {
	return pv.Spec.ClaimRef != nil && !claimHolds(pv)
}

func claimName(pv *corev1.PersistentVolume) string {
	if pv.Spec.ClaimRef == nil {
		return ""
	}
	return pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name
}
