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
	// ReasonProvisionedForClaim: the CSI driver carved the volume for a claim and the agent built
	// it; the CSI provisioner, not the operator, publishes its PersistentVolume.
	ReasonProvisionedForClaim      = "ProvisionedForClaim"
	ReasonWaitingForClaimRelease   = "WaitingForClaimRelease"
	ReasonDeletingPersistentVolume = "DeletingPersistentVolume"
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

// Reasons the node agent gives on its conditions.
const (
	// ReasonApplyFailed: the last engine run failed; the message says where. The agent retries
	// with backoff.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonRefused: the engine refused to touch a device (not ours, carries data, mounted, the
	// root disk); nothing was changed. It retries rarely, since only a person can fix this.
	ReasonRefused = "Refused"
	// ReasonDeviceMissing: a device the spec names is not on the node.
	ReasonDeviceMissing = "DeviceMissing"
	// ReasonBusy: another engine run holds the volume's devices.
	ReasonBusy = "Busy"
	// ReasonSafe, ReasonUnsafe and ReasonUnknown mirror the durability verdict on SafetyChecked.
	ReasonSafe    = "Safe"
	ReasonUnsafe  = "Unsafe"
	ReasonUnknown = "Unknown"
	// ReasonWritethroughEnforced: writeback was refused by the Enforce policy.
	ReasonWritethroughEnforced = "WritethroughEnforced"
	// ReasonFlushInProgress: a blocking flush is writing dirty data to the backing device; the
	// message carries the progress that the eviction webhook shows to kubectl drain.
	ReasonFlushInProgress = "FlushInProgress"
	// ReasonHeldClean: the volume is clean and held in writethrough until the node is schedulable
	// again and no eviction asked for a flush lately. Evictions pass.
	ReasonHeldClean = "HeldClean"
	// ReasonFlushPass: a flush pass (every flushPeriod, paced; or asked for, at full speed)
	// writes the dirty data back while the volume stays in writeback; the message says why and
	// how far it got. Not a drain: the phase stays Ready and evictions are not held for it.
	ReasonFlushPass = "FlushPass"
	// ReasonNotRequested: no drain or eviction wants the volume flushed.
	ReasonNotRequested = "NotRequested"
	// ReasonFlushFailed: the blocking flush did not finish; the message says why.
	ReasonFlushFailed = "FlushFailed"
	// ReasonRunning: the device serves with its cache (Degraded=False).
	ReasonRunning = "Running"
	// ReasonNoCache: the bcache device runs without its cache set.
	ReasonNoCache = "NoCache"
	// ReasonISCSISessionLost: the backing LUN's iSCSI session is down (Degraded=True); the
	// message says what happens to I/O and to dirty data meanwhile. The volume returns to Ready
	// by itself when the session does.
	ReasonISCSISessionLost = "ISCSISessionLost"
	// ReasonCHAPSecretUnreadable: the CHAP Secret is missing, lacks a key, or the agent may not
	// read it. The message names the Secret and the key, never a value.
	ReasonCHAPSecretUnreadable = "CHAPSecretUnreadable"
	// ReasonCacheDeviceLost: the cache device is gone (died or pulled) while the backing disk
	// carries the volume. The message says whether dirty data was on it: clean, the volume
	// serves uncached from the backing disk; dirty, it is not started by force.
	ReasonCacheDeviceLost = "CacheDeviceLost"
	// ReasonCacheDeviceErrors: the cache device is there but fails its I/O: reading it returns
	// I/O errors, or bcache counted errors on it. The message says whether dirty data was on it;
	// what follows is as for CacheDeviceLost.
	ReasonCacheDeviceErrors = "CacheDeviceErrors"
	// ReasonBackingDeviceErrors: the backing disk returned I/O errors, or is offline. Dirty data
	// waits on the cache device; the message says how many errors bcache counted and at how many
	// it stops the device.
	ReasonBackingDeviceErrors = "BackingDeviceErrors"
	// ReasonISCSILoginRefused: the target refused the login (wrong CHAP credentials, or this
	// initiator is not allowed); nothing was touched. The agent tries again as for a missing
	// Secret, so a corrected Secret is picked up without editing the volume.
	ReasonISCSILoginRefused = "ISCSILoginRefused"
)

const (
	// AnnotationFlushRequested is set by the eviction webhook on a volume whose pod's eviction it
	// held back (an RFC 3339 time, refreshed on each retry). The agent flushes and holds the
	// volume while the request is recent or the node is cordoned.
	AnnotationFlushRequested = "flashcache.io/flush-requested"
	// AnnotationEvictWithoutFlush, set to "true" by a person on a volume, lets evictions of its
	// pods pass at once, dirty or not: for emergencies, when the flush cannot finish.
	AnnotationEvictWithoutFlush = "flashcache.io/evict-without-flush"
	// AnnotationAcceptCacheLoss, set by a person to the path of a lost cache device, gives up the
	// dirty data that was only on it: the agent then starts the backing disk without its cache.
	// It names the path so that it cannot outlive the loss it was meant for: once
	// cacheDevice.path names a new device, it no longer applies.
	AnnotationAcceptCacheLoss = "flashcache.io/accept-cache-loss"
	// AnnotationBackgroundFlush, set by a person to any new value (a time, say), asks the agent
	// for a flush pass now: the dirty data written back at full speed while the volume stays in
	// writeback. Each new value asks once; Flushing (reason FlushPass) shows the progress.
	AnnotationBackgroundFlush = "flashcache.io/background-flush"
	// AnnotationProvisionedBy marks a volume the CSI driver carved for a claim, as Kubernetes
	// marks a PersistentVolume, with the driver's name: the operator then publishes no
	// PersistentVolume of its own (the provisioner does), and the driver changes and deletes only
	// volumes it made.
	AnnotationProvisionedBy = "flashcache.io/provisioned-by"
	// AnnotationClaim names the claim (namespace/name) a volume was carved for.
	AnnotationClaim = "flashcache.io/claim"
	// AnnotationCSIName is the name the CSI CreateVolume call gave a volume it carved, when that
	// name is not the volume's own (a name that is not a DNS label is turned into one).
	AnnotationCSIName = "flashcache.io/csi-name"
)

// CSIDriverName is the CSI driver's name: a StorageClass's provisioner, the CSIDriver object, and
// the value of AnnotationProvisionedBy.
const CSIDriverName = "csi.flashcache.io"
