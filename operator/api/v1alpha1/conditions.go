package v1alpha1

// Condition types. Ready belongs to the operator; the others to the node agent.
const (
	// ConditionReady is True while the volume is offered as a PersistentVolume.
	ConditionReady = "Ready"
	// ConditionProvisioned is True once the agent has built the bcache device.
	ConditionProvisioned = "Provisioned"
	// ConditionSafetyChecked carries the durability verdict.
	ConditionSafetyChecked = "SafetyChecked"
	// ConditionFlushing is True while a blocking flush runs or holds the volume in writethrough.
	ConditionFlushing = "Flushing"
	// ConditionDegraded is True while the volume serves with less than it should (no cache, errors).
	ConditionDegraded = "Degraded"
)

// Reasons of the Provisioned condition that the operator's protocol depends on. The agent sets
// Provisioned=False with ReasonProvisioning, with the resourceVersion it read, before it touches
// any device; an object without a Provisioned condition therefore has nothing on the node.
const (
	ReasonProvisioning = "Provisioning"
	ReasonProvisioned  = "Provisioned"
	ReasonTornDown     = "TornDown"
)

// Reasons of the Ready condition.
const (
	ReasonWaitingForAgent           = "WaitingForAgent"
	ReasonNotProvisioned            = "NotProvisioned"
	ReasonNodeNotFound              = "NodeNotFound"
	ReasonInvalidDeviceStatus       = "InvalidDeviceStatus"
	ReasonPersistentVolumeConflict  = "PersistentVolumeConflict"
	ReasonPersistentVolumeDrift     = "PersistentVolumeDrift"
	ReasonPersistentVolumeAvailable = "PersistentVolumeAvailable"
	ReasonPersistentVolumeBound     = "PersistentVolumeBound"
	ReasonPersistentVolumeReleased  = "PersistentVolumeReleased"
	ReasonWaitingForClaimRelease    = "WaitingForClaimRelease"
	ReasonDeletingPersistentVolume  = "DeletingPersistentVolume"
	// ReasonWaitingForTeardown tells the node agent that the PersistentVolume is gone and the
	// device may be flushed, detached and removed.
	ReasonWaitingForTeardown = "WaitingForTeardown"
)

const (
	// Finalizer holds a FlashCacheVolume until its PersistentVolume and device are gone.
	Finalizer = "flashcache.io/teardown"
	// LabelVolume names the FlashCacheVolume that a PersistentVolume belongs to.
	LabelVolume = "flashcache.io/volume"
	// AnnotationVolumeUID ties a PersistentVolume to one FlashCacheVolume object, so a
	// re-created object of the same name does not silently take over an old volume.
	AnnotationVolumeUID = "flashcache.io/volume-uid"
)
