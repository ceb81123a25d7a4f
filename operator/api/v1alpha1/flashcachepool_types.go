package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolBackingDevice is one slow disk of a pool's volume group.
type PoolBackingDevice struct {
	// path is a whole local disk by a stable name: /dev/disk/by-id/... or /dev/disk/by-path/...
	// +required
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="self.matches('^/dev/disk/by-(id|path)/[A-Za-z0-9][A-Za-z0-9:._+@,=\\\\-]*$')",message="must be a stable device path: /dev/disk/by-id/<name> or /dev/disk/by-path/<name>"
	Path string `json:"path"`
}

// PoolWipeSpec is explicit consent to destroy what a pool's devices carry. Without it the agent
// refuses a device with a filesystem, partition table, LVM or foreign bcache signature.
type PoolWipeSpec struct {
	// cacheDevice consents to erasing the cache device.
	// +optional
	CacheDevice bool `json:"cacheDevice,omitempty"`

	// backingDevices consents to erasing every backing device of the pool and every byte of data
	// on them.
	// +optional
	BackingDevices bool `json:"backingDevices,omitempty"`
}

// FlashCachePoolSpec is one node's SSD and slow disks, from which volumes are carved: the SSD,
// less its spare area, becomes one bcache cache set; the slow disks one LVM volume group. Each
// volume carved from the pool is a logical volume of that group, registered as a bcache backing
// device on that cache set, with its own mode and tunables.
// +kubebuilder:validation:XValidation:rule="!self.backingDevices.exists(d, d.path == self.cacheDevice.path)",message="a backing device must not be the cache device",fieldPath=".backingDevices"
type FlashCachePoolSpec struct {
	// nodeName is the node that owns the devices.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable: the devices belong to that node"
	NodeName string `json:"nodeName"`

	// cacheDevice is the SSD or NVMe device that all of the pool's volumes share.
	// +required
	CacheDevice CacheDeviceSpec `json:"cacheDevice"`

	// backingDevices are the slow disks; their space is what volumes are carved from. Disks may
	// be added, never removed while the pool exists.
	// +required
	// +listType=map
	// +listMapKey=path
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="oldSelf.all(o, self.exists(d, d.path == o.path))",message="backingDevices may be added, never removed: the pool's volumes may live on them"
	BackingDevices []PoolBackingDevice `json:"backingDevices"`

	// replacementPolicy is how bcache chooses buckets to evict. It belongs to the cache device, so
	// it is the pool's, for all its volumes.
	// +optional
	// +kubebuilder:default=lru
	ReplacementPolicy ReplacementPolicy `json:"replacementPolicy,omitempty"`

	// backingWritebackThrottling is the block layer's writeback throttling (wbt) on every backing
	// disk's queue, as a volume's own field of that name is on its backing disk: Disabled (the
	// default) turns it off while the pool exists, so that the flush bcache forwards with each
	// commit does not queue behind the writeback of every volume carved from the disk; Kernel
	// restores the kernel's default. It is the pool's, not a volume's: its volumes share the disks'
	// queues. Set again after a reboot; teardown restores the kernel's default.
	// +optional
	// +kubebuilder:default=Disabled
	BackingWritebackThrottling WritebackThrottling `json:"backingWritebackThrottling,omitempty"`

	// cacheCongestionBypass is bcache's congestion bypass on the pool's cache set, as a volume's own
	// field of that name is on its cache set: Disabled (the default) sets the set's congestion
	// thresholds to 0, so no read or write goes around the SSD for its latency; Kernel sets the
	// kernel's 2 ms for reads and 20 ms for writes. It is the pool's, for all its volumes.
	// +optional
	// +kubebuilder:default=Disabled
	CacheCongestionBypass CongestionBypass `json:"cacheCongestionBypass,omitempty"`

	// wipe is consent to erase existing signatures on the named devices. Absent, a device that
	// carries anything but this pool's own cache set or volume group is refused.
	// +optional
	Wipe *PoolWipeSpec `json:"wipe,omitempty"`
}

// PoolPhase summarises the conditions for people; programs should read the conditions.
// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Degraded;Failed;Deleting
type PoolPhase string

// Phases of a FlashCachePool.
const (
	PoolPhasePending      PoolPhase = "Pending"
	PoolPhaseProvisioning PoolPhase = "Provisioning"
	PoolPhaseReady        PoolPhase = "Ready"
	PoolPhaseDegraded     PoolPhase = "Degraded"
	PoolPhaseFailed       PoolPhase = "Failed"
	PoolPhaseDeleting     PoolPhase = "Deleting"
)

// FlashCachePoolStatus is what the node agent observed of the pool, and what the operator
// derived from it.
type FlashCachePoolStatus struct {
	// phase summarises the conditions.
	// +optional
	Phase PoolPhase `json:"phase,omitempty"`

	// observedGeneration is the spec generation the node agent last applied to the host.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// cacheSetUUID is the bcache cache set every volume of the pool attaches to.
	// +optional
	CacheSetUUID string `json:"cacheSetUUID,omitempty"`

	// volumeGroup is the LVM volume group made of the backing devices.
	// +optional
	VolumeGroup string `json:"volumeGroup,omitempty"`

	// cacheCapacity is the size of the cache partition (the SSD less its spare area).
	// +optional
	CacheCapacity *resource.Quantity `json:"cacheCapacity,omitempty"`

	// capacity is the volume group's size: the most the pool's volumes can hold together.
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`

	// allocatable is what is left in the volume group for new volumes and expansions.
	// +optional
	Allocatable *resource.Quantity `json:"allocatable,omitempty"`

	// volumes is how many volumes are carved from the pool.
	// +optional
	Volumes int32 `json:"volumes,omitempty"`

	// conditions: Provisioned (agent), Ready (operator).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FlashCachePool is one node's SSD shared by many cached volumes: the SSD as one bcache cache
// set, the slow disks as one LVM volume group. FlashCacheVolumes name it (spec.pool) with a size
// instead of whole devices. It is cluster-scoped, like the node whose disks it takes.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=fcp,categories=flashcache
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Capacity",type=string,JSONPath=`.status.capacity`
// +kubebuilder:printcolumn:name="Allocatable",type=string,JSONPath=`.status.allocatable`
// +kubebuilder:printcolumn:name="Volumes",type=integer,JSONPath=`.status.volumes`
// +kubebuilder:printcolumn:name="Cache",type=string,JSONPath=`.status.cacheCapacity`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (at most 63 lower-case letters, digits and '-'): it names the volume group on the node"
type FlashCachePool struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FlashCachePoolSpec `json:"spec"`
	// +optional
	Status FlashCachePoolStatus `json:"status,omitempty"`
}

// FlashCachePoolList is a list of FlashCachePools.
// +kubebuilder:object:root=true
type FlashCachePoolList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FlashCachePool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&FlashCachePool{}, &FlashCachePoolList{})
}
