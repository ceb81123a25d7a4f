package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CacheMode is the bcache cache_mode of the volume.
// +kubebuilder:validation:Enum=writeback;writethrough;writearound
type CacheMode string

const (
	// CacheModeWriteback acknowledges writes once they are on the cache device.
	CacheModeWriteback CacheMode = "writeback"
	// CacheModeWritethrough acknowledges writes once they are on the backing device.
	CacheModeWritethrough CacheMode = "writethrough"
	// CacheModeWritearound sends writes to the backing device only; reads are cached.
	CacheModeWritearound CacheMode = "writearound"
)

// ReplacementPolicy is bcache's cache_replacement_policy.
// +kubebuilder:validation:Enum=lru;fifo;random
type ReplacementPolicy string

// Replacement policies bcache knows.
const (
	ReplacementPolicyLRU    ReplacementPolicy = "lru"
	ReplacementPolicyFIFO   ReplacementPolicy = "fifo"
	ReplacementPolicyRandom ReplacementPolicy = "random"
)

// WritebackThrottling is what the block layer's writeback throttling (wbt) does on the backing
// disk's queue.
// +kubebuilder:validation:Enum=Disabled;Kernel
type WritebackThrottling string

// Writeback throttling settings.
const (
	// WritebackThrottlingDisabled turns wbt off on the backing disk (queue/wbt_lat_usec 0).
	WritebackThrottlingDisabled WritebackThrottling = "Disabled"
	// WritebackThrottlingKernel keeps the kernel's default (on for rotating disks).
	WritebackThrottlingKernel WritebackThrottling = "Kernel"
)

// CongestionBypass is whether bcache sends I/O around a cache set it judges congested.
// +kubebuilder:validation:Enum=Disabled;Kernel
type CongestionBypass string

// Congestion bypass settings.
const (
	// CongestionBypassDisabled writes 0 to the cache set's congested_read_threshold_us and
	// congested_write_threshold_us: bcache never goes around the cache for its latency.
	CongestionBypassDisabled CongestionBypass = "Disabled"
	// CongestionBypassKernel sets the kernel's own thresholds: 2 ms for reads, 20 ms for writes.
	CongestionBypassKernel CongestionBypass = "Kernel"
)

// FlushThrottle is what a flush pass that falls behind does to the writers of the volume before
// its limit.
// +kubebuilder:validation:Enum=Disabled;Proportional
type FlushThrottle string

// Flush throttle settings.
const (
	// FlushThrottleDisabled leaves the writers alone: a pass still dirty at its limit is finished in
	// writethrough, which slows them all at once.
	FlushThrottleDisabled FlushThrottle = "Disabled"
	// FlushThrottleProportional limits the writes to the volume (cgroup v2 io.max) in proportion
	// as a pass lags, so that it ends in writeback.
	FlushThrottleProportional FlushThrottle = "Proportional"
)

// SafetyPolicy says what happens when a device fails the durability checks.
// +kubebuilder:validation:Enum=Enforce;Warn
type SafetyPolicy string

const (
	// SafetyPolicyEnforce keeps the volume in writethrough unless every device is judged Safe
	// and the cache is not worn: Unsafe and Unknown alike.
	SafetyPolicyEnforce SafetyPolicy = "Enforce"
	// SafetyPolicyWarn enables writeback anyway and reports the verdict as a condition.
	SafetyPolicyWarn SafetyPolicy = "Warn"
)

// DeletionPolicy says what deleting a FlashCacheVolume does to the devices.
// +kubebuilder:validation:Enum=Teardown;Orphan
type DeletionPolicy string

const (
	// DeletionPolicyTeardown waits for the claim to release the PersistentVolume, deletes it,
	// and waits for the node agent to flush, detach and remove the bcache device.
	DeletionPolicyTeardown DeletionPolicy = "Teardown"
	// DeletionPolicyOrphan removes the object at once and leaves the node and the
	// PersistentVolume as they are.
	DeletionPolicyOrphan DeletionPolicy = "Orphan"
)

// FileSystemType is the filesystem kubelet creates on a Filesystem-mode volume.
// +kubebuilder:validation:Enum=xfs;ext4
type FileSystemType string

// CacheDeviceSpec names the SSD or NVMe device that caches the volume.
type CacheDeviceSpec struct {
	// path is the whole cache device by a stable name: /dev/disk/by-id/... or /dev/disk/by-path/...
	// Kernel names such as /dev/nvme0n1 change across boots and are refused.
	// It is the one device that may change, to replace a lost SSD: the agent refuses a new device
	// while the old one still works (CacheStillAttached), and partitions a new blank one and
	// attaches it to the backing disk without touching the data (docs/runbooks).
	// +required
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="self.matches('^/dev/disk/by-(id|path)/[A-Za-z0-9][A-Za-z0-9:._+@,=\\\\-]*$')",message="must be a stable device path: /dev/disk/by-id/<name> or /dev/disk/by-path/<name>"
	Path string `json:"path"`

	// overProvisionPercent is the share of the device left unpartitioned, after a full discard,
	// as spare area for the SSD's wear levelling.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=50
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cacheDevice.overProvisionPercent is immutable: the cache device is already partitioned"
	OverProvisionPercent *int32 `json:"overProvisionPercent,omitempty"`

	// bucketSize is bcache's unit of allocation and eviction on the cache device, a power of two
	// from 4Ki to 16Mi. Smaller buckets let clean data be evicted without the dirty data beside
	// it, and writeback paces itself by how many buckets hold dirty data; they cost the node's
	// memory (bcache keeps a few bytes for each bucket) and, in a pool, attachments: the cache
	// set's table of volumes is one bucket, bucketSize/128 volumes in the pool's life (4096 at
	// 512Ki, 512 at 64Ki). See docs/design.md. It is written when the cache device is formatted
	// and kept for the device's life: a cache already formatted with another size keeps it, and
	// apply says so in a warning.
	// +optional
	// +kubebuilder:default="512Ki"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isInteger() && [4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576, 2097152, 4194304, 8388608, 16777216].exists(b, quantity(string(self)).asInteger() == b)",message="cacheDevice.bucketSize must be a power of two from 4Ki to 16Mi"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cacheDevice.bucketSize is immutable: the cache device is formatted with it"
	BucketSize *resource.Quantity `json:"bucketSize,omitempty"`
}

// BackingDeviceSpec names the slow device that holds the data. Exactly one of path and iscsi is set.
// +kubebuilder:validation:XValidation:rule="has(self.path) != has(self.iscsi)",message="exactly one of backingDevice.path and backingDevice.iscsi must be set"
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="backingDevice is immutable"
type BackingDeviceSpec struct {
	// path is a local disk or partition by a stable name: /dev/disk/by-id/... or /dev/disk/by-path/...
	// +optional
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="self.matches('^/dev/disk/by-(id|path)/[A-Za-z0-9][A-Za-z0-9:._+@,=\\\\-]*$')",message="must be a stable device path: /dev/disk/by-id/<name> or /dev/disk/by-path/<name>"
	Path string `json:"path,omitempty"`

	// iscsi is a LUN on an iSCSI target that the node logs in to.
	// +optional
	ISCSI *ISCSISource `json:"iscsi,omitempty"`
}

// ISCSISource is an iSCSI LUN used as backing device.
type ISCSISource struct {
	// portal is the target portal, host or IP with an optional port (default 3260).
	// +required
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:Pattern=`^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)(:[0-9]{1,5})?$`
	Portal string `json:"portal"`

	// additionalPortals are further portals of the same target, for multipath.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)(:[0-9]{1,5})?$`
	AdditionalPortals []string `json:"additionalPortals,omitempty"`

	// iqn is the target's name: iqn.YYYY-MM.reversed.domain[:suffix], eui.<16 hex> or naa.<16 or 32 hex>.
	// +required
	// +kubebuilder:validation:MaxLength=223
	// +kubebuilder:validation:Pattern=`^(iqn\.[0-9]{4}-[0-9]{2}\.[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[^\s]+)?|eui\.[0-9A-Fa-f]{16}|naa\.[0-9A-Fa-f]{16}([0-9A-Fa-f]{16})?)$`
	IQN string `json:"iqn"`

	// lun is the logical unit number on the target.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16383
	LUN int32 `json:"lun"`

	// chapSecretRef names a Secret with CHAP credentials (keys node.session.auth.username and
	// node.session.auth.password). The credentials are never logged or copied into status.
	// Both name and namespace are required: a FlashCacheVolume has no namespace to imply.
	// +optional
	// +kubebuilder:validation:XValidation:rule="has(self.name) && self.name != '' && has(self.__namespace__) && self.__namespace__ != ''",message="chapSecretRef needs both name and namespace: a FlashCacheVolume is cluster-scoped, so no namespace is implied"
	CHAPSecretRef *corev1.SecretReference `json:"chapSecretRef,omitempty"`

	// initiatorName overrides the node's initiator IQN for this session.
	// +optional
	// +kubebuilder:validation:MaxLength=223
	// +kubebuilder:validation:Pattern=`^(iqn\.[0-9]{4}-[0-9]{2}\.[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[^\s]+)?|eui\.[0-9A-Fa-f]{16}|naa\.[0-9A-Fa-f]{16}([0-9A-Fa-f]{16})?)$`
	InitiatorName string `json:"initiatorName,omitempty"`
}

// VolumeSpec says how the bcache device is offered to pods as a PersistentVolume.
type VolumeSpec struct {
	// storageClassName is set on the PersistentVolume; claims select the volume by it.
	// +optional
	// +kubebuilder:default=flashcache
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volume.storageClassName is immutable"
	StorageClassName string `json:"storageClassName,omitempty"`

	// createStorageClass asks the operator to create the StorageClass (provisioner
	// kubernetes.io/no-provisioner, volumeBindingMode WaitForFirstConsumer) when it does not exist.
	// An existing StorageClass of that name is never changed.
	// +optional
	CreateStorageClass bool `json:"createStorageClass,omitempty"`

	// volumeMode is Filesystem (kubelet formats and mounts the device) or Block.
	// +optional
	// +kubebuilder:default=Filesystem
	// +kubebuilder:validation:Enum=Filesystem;Block
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volume.volumeMode is immutable"
	VolumeMode corev1.PersistentVolumeMode `json:"volumeMode,omitempty"`

	// fsType is the filesystem kubelet creates on first mount in Filesystem mode.
	// +optional
	// +kubebuilder:default=xfs
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volume.fsType is immutable"
	FSType FileSystemType `json:"fsType,omitempty"`

	// reclaimPolicy is the PersistentVolume's reclaim policy. Retain keeps the volume and its data
	// when the claim is released. Delete deletes this FlashCacheVolume when the claim is released,
	// which tears the device down like any deletion (see deletionPolicy): the data is lost.
	// +optional
	// +kubebuilder:default=Retain
	// +kubebuilder:validation:Enum=Retain;Delete
	ReclaimPolicy corev1.PersistentVolumeReclaimPolicy `json:"reclaimPolicy,omitempty"`
}

// SafetySpec configures the durability checks run before writeback is enabled.
type SafetySpec struct {
	// policy is Enforce or Warn. Enforce enables writeback only when every device is judged
	// Safe and the cache is not worn: a device judged Unsafe (flushes that cost nothing, on a
	// disk or an SSD) or Unknown (a volatile write cache that could not be measured) keeps the
	// volume in writethrough, since in writeback the SSD holds the only copy of dirty data. A
	// cache known to be battery or flash backed is declared with trustWriteCache; Warn enables
	// writeback whatever the verdict, and reports it.
	// +optional
	// +kubebuilder:default=Enforce
	Policy SafetyPolicy `json:"policy,omitempty"`

	// trustWriteCache says that a volatile write cache the checks find is battery or flash backed
	// (power-loss protection): flushes that cost nothing, or a cache that could not be measured,
	// are then judged Safe.
	// +optional
	TrustWriteCache bool `json:"trustWriteCache,omitempty"`

	// disableBackingWriteCache turns the backing disk's volatile write cache off where the disk
	// allows it (SCSI and SATA disks, through the kernel), so that nothing acknowledged waits in
	// it. Unset, the cache is left as it is; it is never turned back on.
	// +optional
	DisableBackingWriteCache bool `json:"disableBackingWriteCache,omitempty"`

	// maxWearPercent is the share of the cache device's rated life (SMART percentage used) past
	// which it counts as worn: under Enforce a worn cache is flushed and held in writethrough.
	// +optional
	// +kubebuilder:default=90
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxWearPercent *int32 `json:"maxWearPercent,omitempty"`

	// wearCheckInterval is how often the cache device's SMART wear is read again while the
	// volume runs: a cache that crosses maxWearPercent (or reports a critical warning) is then
	// flushed and held in writethrough under Enforce without waiting for a reboot. 0s reads it
	// only at the durability check, once per boot.
	// +optional
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$')",message="wearCheckInterval must be a duration such as 30m or 1h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) == duration('0s') || (duration(self) >= duration('10s') && duration(self) <= duration('168h'))",message="wearCheckInterval must be 0s (at the check only) or between 10s and 168h"
	WearCheckInterval *metav1.Duration `json:"wearCheckInterval,omitempty"`
}

// WipeSpec is explicit consent to destroy what a device carries. Without it the agent refuses
// a device with a filesystem, partition table, LVM or foreign bcache signature.
type WipeSpec struct {
	// cacheDevice consents to erasing the cache device.
	// +optional
	CacheDevice bool `json:"cacheDevice,omitempty"`

	// backingDevice consents to erasing the backing device and every byte of data on it.
	// +optional
	BackingDevice bool `json:"backingDevice,omitempty"`
}

// PoolVolumeSource carves a volume from a FlashCachePool: a logical volume of the pool's volume
// group, cached by the pool's cache set.
// +kubebuilder:validation:XValidation:rule="self.name == oldSelf.name",message="pool.name is immutable: the volume's data is in that pool"
// +kubebuilder:validation:XValidation:rule="quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0",message="pool.size may grow, never shrink"
type PoolVolumeSource struct {
	// name is the FlashCachePool, on the same node (spec.nodeName).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// size is the volume's capacity, rounded up to the volume group's extent (4 MiB). It may grow;
	// bcache cannot resize a registered backing device, so the agent grows it while the volume is
	// not in use (no pod on the node has it mounted) and the device's name stays the same.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isInteger() && quantity(string(self)).compareTo(quantity('64Mi')) >= 0 && quantity(string(self)).compareTo(quantity('1Pi')) <= 0",message="pool.size must be a whole number of bytes from 64Mi to 1Pi"
	Size resource.Quantity `json:"size"`
}

// FlashCacheVolumeSpec is the desired flash-cached block device on one node: whole devices
// (cacheDevice and backingDevice), or a share of a pool (pool).
// +kubebuilder:validation:XValidation:rule="has(self.pool) ? !has(self.cacheDevice) && !has(self.backingDevice) : has(self.cacheDevice) && has(self.backingDevice)",message="set either pool, or both cacheDevice and backingDevice"
// +kubebuilder:validation:XValidation:rule="has(self.pool) == has(oldSelf.pool)",message="a volume cannot move between whole devices and a pool"
// +kubebuilder:validation:XValidation:rule="!has(self.backingDevice) || !has(self.cacheDevice) || !has(self.backingDevice.path) || self.backingDevice.path != self.cacheDevice.path",message="backingDevice.path must not be the cache device",fieldPath=".backingDevice.path"
type FlashCacheVolumeSpec struct {
	// nodeName is the node that owns both devices.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable: the devices belong to that node"
	NodeName string `json:"nodeName"`

	// cacheDevice is the SSD or NVMe device, the whole of it for this volume. Set with
	// backingDevice, or set pool instead.
	// +optional
	CacheDevice *CacheDeviceSpec `json:"cacheDevice,omitempty"`

	// backingDevice is the slower device that holds the data. Set with cacheDevice, or set pool
	// instead.
	// +optional
	BackingDevice *BackingDeviceSpec `json:"backingDevice,omitempty"`

	// pool carves the volume from a FlashCachePool on the same node, sharing its SSD with the
	// pool's other volumes, instead of whole devices.
	// +optional
	Pool *PoolVolumeSource `json:"pool,omitempty"`

	// mode is bcache's cache mode. Writeback is enabled only after the safety checks pass
	// (or policy is Warn); drains hold the volume in writethrough while they flush.
	// +optional
	// +kubebuilder:default=writeback
	Mode CacheMode `json:"mode,omitempty"`

	// dirtyThresholdPercent is the share of the cache bcache's writeback aims to keep dirty
	// (bcache writeback_percent): above it, writeback speeds up in proportion to the excess. The
	// default is 1, not bcache's 10: writeback then runs all the time, so each flush pass finds
	// little to write and ends in writeback, and a database's throughput is higher and steadier
	// than with more dirty data held (docs/operations.md#tuning). 0 leaves writeback unthrottled,
	// at idle I/O priority.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=40
	DirtyThresholdPercent *int32 `json:"dirtyThresholdPercent,omitempty"`

	// flushPeriod bounds how long dirty data stays on the cache device only. Every half period a
	// flush pass writes the dirty data back while the volume stays in writeback, paced over most
	// of the other half and at full speed at its end, so data written now is on the backing disk
	// within one period (half a period and a minute, for periods under 2m); a pass still dirty
	// then is finished in writethrough. 0s turns time-based flushing off.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$')",message="flushPeriod must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) == duration('0s') || (duration(self) >= duration('10s') && duration(self) <= duration('24h'))",message="flushPeriod must be 0s (off) or between 10s and 24h"
	FlushPeriod *metav1.Duration `json:"flushPeriod,omitempty"`

	// flushThrottle is what a flush pass does when it falls behind: when the data dirty at its
	// start is being written back too slowly to finish before its limit, Proportional limits the
	// bytes a second that the cgroups writing to the volume may write to it (cgroup v2 io.max on
	// the bcache device; reads are never limited), lowered as the pass lags and raised as it
	// catches up, so the database slows a little for as long as needed rather than all at once
	// when the pass is finished in writethrough, which stays as the backstop. Disabled (the default)
	// leaves only that backstop. The limit lives in the kernel, not in the volume: the engine
	// sets it again after a restart and removes it when the pass is no longer behind, the volume
	// is clean, or at teardown.
	// +optional
	// +kubebuilder:default=Disabled
	FlushThrottle FlushThrottle `json:"flushThrottle,omitempty"`

	// sequentialCutoff is the size above which sequential I/O bypasses the cache; 0 caches all I/O.
	// +optional
	// +kubebuilder:default="4Mi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isInteger() && quantity(string(self)).compareTo(quantity('0')) >= 0 && quantity(string(self)).compareTo(quantity('1Gi')) <= 0",message="sequentialCutoff must be a whole number of bytes from 0 to 1Gi"
	SequentialCutoff *resource.Quantity `json:"sequentialCutoff,omitempty"`

	// cacheSequentialUntilFull caches sequential I/O as well while more than 10% of the cache
	// device is unused, so that a restore or first load lands on the SSD instead of warming it
	// at the backing disk's random-read rate; once the cache has filled, sequentialCutoff keeps
	// backups and large copies from evicting the working set, until more than 25% of the cache is
	// unused again. false applies sequentialCutoff from the start.
	// +optional
	// +kubebuilder:default=true
	CacheSequentialUntilFull *bool `json:"cacheSequentialUntilFull,omitempty"`

	// replacementPolicy is how bcache chooses buckets to evict.
	// +optional
	// +kubebuilder:default=lru
	ReplacementPolicy ReplacementPolicy `json:"replacementPolicy,omitempty"`

	// backingWritebackThrottling is the block layer's writeback throttling (wbt) on the backing
	// disk's queue (the whole disk's, for a partition). Disabled (the default) turns it off while the
	// volume exists: bcache forwards every commit's flush to the backing disk as a write that wbt
	// queues behind bcache's own writeback, so with it on each commit waits for the writeback in
	// flight (docs/benchmarks/results/README.md). Kernel restores the kernel's default. It is the
	// queue's setting, not the disk's: the engine sets it again after a reboot, and teardown
	// restores the kernel's default. A volume carved from a pool leaves it to the pool's field of
	// the same name: the pool's volumes share its disks.
	// +optional
	// +kubebuilder:default=Disabled
	BackingWritebackThrottling WritebackThrottling `json:"backingWritebackThrottling,omitempty"`

	// cacheCongestionBypass is bcache's own congestion bypass: with Kernel, bcache sends reads and
	// writes around the cache set, to the backing disk, while the cache's average latency is above
	// 2 ms for reads or 20 ms for writes, so a hot block is read from the HDD while the SSD is busy.
	// Disabled (the default) sets both thresholds to 0: every read that hits and every write is
	// served by the SSD, as a database on a cache expects (docs/operations.md). It is the cache
	// set's setting, not the volume's: the engine sets it again after a reboot. A volume carved from
	// a pool leaves it to the pool's field of the same name: the pool's volumes share its cache set.
	// +optional
	// +kubebuilder:default=Disabled
	CacheCongestionBypass CongestionBypass `json:"cacheCongestionBypass,omitempty"`

	// volume says how the device is offered as a PersistentVolume.
	// +optional
	// +kubebuilder:default={}
	Volume VolumeSpec `json:"volume,omitempty"`

	// safety configures the durability checks.
	// +optional
	// +kubebuilder:default={}
	Safety SafetySpec `json:"safety,omitempty"`

	// wipe is consent to erase existing signatures on the named devices. Absent, a device that
	// carries anything but this volume's own bcache superblock is refused.
	// +optional
	Wipe *WipeSpec `json:"wipe,omitempty"`

	// deletionPolicy is what deleting this object does: Teardown (default) or Orphan.
	// It may be changed while a deletion waits, to stop waiting.
	// +optional
	// +kubebuilder:default=Teardown
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// VolumePhase summarises the conditions for people; programs should read the conditions.
// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Flushing;Degraded;Failed;Deleting
type VolumePhase string

// Phases of a FlashCacheVolume.
const (
	PhasePending      VolumePhase = "Pending"
	PhaseProvisioning VolumePhase = "Provisioning"
	PhaseReady        VolumePhase = "Ready"
	PhaseFlushing     VolumePhase = "Flushing"
	PhaseDegraded     VolumePhase = "Degraded"
	PhaseFailed       VolumePhase = "Failed"
	PhaseDeleting     VolumePhase = "Deleting"
)

// DeviceStatus is the bcache device the agent built.
type DeviceStatus struct {
	// name is the kernel name (bcache0). It can change across reboots; use path.
	// +optional
	Name string `json:"name,omitempty"`
	// path is the stable path of the bcache device on the node; the PersistentVolume points at it.
	// +optional
	Path string `json:"path,omitempty"`
	// cacheSetUUID is the bcache cache set's UUID.
	// +optional
	CacheSetUUID string `json:"cacheSetUUID,omitempty"`
	// backingUUID is the UUID in the backing device's bcache superblock.
	// +optional
	BackingUUID string `json:"backingUUID,omitempty"`
	// capacity is the size of the bcache device.
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`
	// cacheMode is the mode the kernel reports now (writethrough while a drain holds the volume).
	// +optional
	CacheMode CacheMode `json:"cacheMode,omitempty"`
	// state is bcache's state: no cache, clean, dirty or inconsistent.
	// +optional
	State string `json:"state,omitempty"`
}

// FailedDevice names the device of a failure.
// +kubebuilder:validation:Enum=Cache;Backing
type FailedDevice string

// The devices of a volume.
const (
	FailedDeviceCache   FailedDevice = "Cache"
	FailedDeviceBacking FailedDevice = "Backing"
)

// FailureStatus is a device failure as the agent last observed it.
type FailureStatus struct {
	// device is the failed one: Cache or Backing.
	Device FailedDevice `json:"device"`
	// reason is the Degraded condition's reason, e.g. CacheDeviceLost or BackingDeviceErrors.
	Reason string `json:"reason"`
	// since is when the agent first saw this failure.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// dirtyDataAtRisk says that writes acknowledged from the cache were not on the backing disk
	// when the cache device was lost: they went with it unless the device comes back.
	DirtyDataAtRisk bool `json:"dirtyDataAtRisk"`
	// dirtyDataLastObserved is the dirty data at the last observation: of the running device
	// when it still runs, otherwise the last figure read before the failure.
	// +optional
	DirtyDataLastObserved *resource.Quantity `json:"dirtyDataLastObserved,omitempty"`
	// kernelAction is what bcache did or will do, under the policy flashcache sets:
	// stop_when_cache_set_failed=auto, cache set errors=unregister, I/O error limits 8 (cache)
	// and 64 (backing).
	// +optional
	KernelAction string `json:"kernelAction,omitempty"`
}

// SafetyVerdict is the outcome of the durability checks.
// +kubebuilder:validation:Enum=Safe;Unsafe;Unknown
type SafetyVerdict string

// Verdicts of the durability checks.
const (
	SafetyVerdictSafe    SafetyVerdict = "Safe"
	SafetyVerdictUnsafe  SafetyVerdict = "Unsafe"
	SafetyVerdictUnknown SafetyVerdict = "Unknown"
)

// SafetyStatus is the last verdict of the durability checks.
type SafetyStatus struct {
	// verdict is Safe, Unsafe or Unknown.
	// +optional
	Verdict SafetyVerdict `json:"verdict,omitempty"`
	// reasons explain the verdict to a person.
	// +optional
	// +listType=atomic
	Reasons []string `json:"reasons,omitempty"`
	// checkedAt is when the checks ran.
	// +optional
	CheckedAt *metav1.Time `json:"checkedAt,omitempty"`
	// devices are the devices the verdict is of. It holds for them only: a volume rebuilt on
	// other disks, or given another SSD, is checked again before it may write back.
	// +optional
	// +listType=map
	// +listMapKey=role
	Devices []SafetyDeviceStatus `json:"devices,omitempty"`
}

// SafetyDeviceStatus is one device a verdict is of.
type SafetyDeviceStatus struct {
	// role is cache or backing.
	Role string `json:"role"`
	// path is the path the spec names.
	// +optional
	Path string `json:"path,omitempty"`
	// device is the kernel's device node it resolved to when checked.
	// +optional
	Device string `json:"device,omitempty"`
	// hardwareID is what the disk reports identifies it: its WWID, or else its serial.
	// +optional
	HardwareID string `json:"hardwareID,omitempty"`
	// verdict is this device's own verdict.
	// +optional
	Verdict SafetyVerdict `json:"verdict,omitempty"`
}

// FlashCacheVolumeStatus is what the operator and the node agent observed. The agent owns what
// it sees on the host (device, dirty data, hit ratio, safety, its conditions, observedGeneration);
// the operator owns phase, persistentVolumeName and the Ready condition. Each writes with
// server-side apply under its own field manager.
type FlashCacheVolumeStatus struct {
	// phase summarises the conditions.
	// +optional
	Phase VolumePhase `json:"phase,omitempty"`

	// observedGeneration is the spec generation the node agent last applied to the host.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// persistentVolumeName is the PersistentVolume the operator published for this volume.
	// +optional
	PersistentVolumeName string `json:"persistentVolumeName,omitempty"`

	// device is the bcache device on the node.
	// +optional
	Device *DeviceStatus `json:"device,omitempty"`

	// dirtyData is how much data is on the cache device only.
	// +optional
	DirtyData *resource.Quantity `json:"dirtyData,omitempty"`

	// dirtySince bounds the age of the oldest dirty data: the volume has not been seen clean
	// since then, so nothing on the cache alone is older. It errs early by up to a minute (a
	// clean volume's time is saved once a minute), never late. Unset while the volume is clean,
	// and when the agent has not seen it clean yet.
	// +optional
	DirtySince *metav1.Time `json:"dirtySince,omitempty"`

	// hitRatioPercent is the share of reads served from the cache since the device started.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	HitRatioPercent *int32 `json:"hitRatioPercent,omitempty"`

	// cacheWearPercent is the cache device's estimate of its life used (NVMe percentage_used).
	// +optional
	CacheWearPercent *int32 `json:"cacheWearPercent,omitempty"`

	// safety is the last verdict of the durability checks.
	// +optional
	Safety *SafetyStatus `json:"safety,omitempty"`

	// failure is the cache or backing device failure the volume is living with, if any: what
	// was at stake and what bcache did. It goes when the volume is whole again.
	// +optional
	Failure *FailureStatus `json:"failure,omitempty"`

	// conditions: Ready (operator), Provisioned, SafetyChecked, Flushing, Degraded (agent).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FlashCacheVolume is an SSD caching a slower disk on one node through bcache, offered to pods as
// a PersistentVolume. It is cluster-scoped, like the PersistentVolume it produces and the node
// whose disks it takes.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=fcv,categories=flashcache
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Dirty",type=string,JSONPath=`.status.dirtyData`
// +kubebuilder:printcolumn:name="Dirty Since",type=date,JSONPath=`.status.dirtySince`,priority=1
// +kubebuilder:printcolumn:name="Hit Ratio",type=integer,JSONPath=`.status.hitRatioPercent`
// +kubebuilder:printcolumn:name="PV",type=string,JSONPath=`.status.persistentVolumeName`,priority=1
// +kubebuilder:printcolumn:name="Device",type=string,JSONPath=`.status.device.path`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (at most 63 lower-case letters, digits and '-'): it is used as a label value"
type FlashCacheVolume struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FlashCacheVolumeSpec `json:"spec"`
	// +optional
	Status FlashCacheVolumeStatus `json:"status,omitempty"`
}

// FlashCacheVolumeList is a list of FlashCacheVolumes.
// +kubebuilder:object:root=true
type FlashCacheVolumeList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FlashCacheVolume `json:"items"`
}

func init() {
	SchemeBuilder.Register(&FlashCacheVolume{}, &FlashCacheVolumeList{})
}
