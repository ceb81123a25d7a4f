// Package engine builds, adopts, tunes, flushes and tears down one flash-cached volume on the host
// it runs on. It is the one node core behind the agent, `flashcache node` and the tests; it
// reaches disks only through internal/blockdev.
//
// Every operation is observe -> plan -> act, one step at a time, observing again after each step,
// so a run that was killed midway converges when it is run again.
package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// Volume is one FlashCacheVolume as the engine sees it: its name and its spec, defaults filled in.
type Volume struct {
	Name string
	Spec fcv1.FlashCacheVolumeSpec
	// CHAP holds the credentials of spec.backingDevice.iscsi.chapSecretRef, read by the front
	// end (the agent from the Secret, `flashcache node` from a Secret in the volume file).
	CHAP *blockdev.CHAP
	// AcceptedCacheLoss is the flashcache.io/accept-cache-loss annotation: the cache device path
	// whose dirty data a person has given up. It counts only while it names the spec's path.
	AcceptedCacheLoss string
	// Pool is the pool spec.pool names, read by the front end, for a carved volume.
	Pool *Pool
}

// Carved says the volume is a share of a pool rather than whole devices.
func (v Volume) Carved() bool { return v.Spec.Pool != nil }

// CachePath is the cache device the volume uses: its own, or its pool's.
func (v Volume) CachePath() string {
	if v.Carved() {
		if v.Pool == nil {
			return ""
		}
		return v.Pool.Spec.CacheDevice.Path
	}
	return v.Spec.CacheDevice.Path
}

// BackingPath is the backing device the volume names: its own disk, or its logical volume in
// its pool's volume group. Empty for an iSCSI LUN, found through its session.
func (v Volume) BackingPath() string {
	if v.Carved() {
		if v.Pool == nil {
			return ""
		}
		return "/dev/" + v.Pool.VolumeGroup() + "/" + v.LogicalVolume()
	}
	return v.Spec.BackingDevice.Path
}

// LogicalVolume is the name of a carved volume's logical volume in its pool's group.
func (v Volume) LogicalVolume() string { return "fc-" + v.Name }

// LogicalVolumeTag marks a logical volume as the volume's.
func (v Volume) LogicalVolumeTag() string { return "flashcache.io/volume=" + v.Name }

// cacheLabel is the GPT name of the cache partition the volume uses: its own, or its pool's.
func (v Volume) cacheLabel() string {
	if v.Carved() && v.Pool != nil {
		return v.Pool.Label()
	}
	return v.Label()
}

// cacheLayout is how the cache device the volume uses is partitioned and formatted: by its own
// spec, or by its pool's.
func (v Volume) cacheLayout() cacheLayout {
	if v.Carved() && v.Pool != nil {
		return v.Pool.cacheLayout()
	}
	return cacheLayout{overProvisionPercent: int64(v.Spec.EffectiveOverProvisionPercent()), bucketBytes: v.Spec.EffectiveBucketSizeBytes()}
}

// cacheField is the spec field that names the cache device the volume uses.
func (v Volume) cacheField() string {
	if v.Carved() {
		return "pool.name"
	}
	return "cacheDevice.path"
}

// VolumeOf is the engine's view of a FlashCacheVolume, from the API server or a volume file.
func VolumeOf(fcv *fcv1.FlashCacheVolume) Volume {
	return Volume{Name: fcv.Name, Spec: fcv.Spec, AcceptedCacheLoss: fcv.Annotations[fcv1.AnnotationAcceptCacheLoss]}
}

// bcacheLabelMax is the size of the label field in a bcache superblock (SB_LABEL_SIZE).
const bcacheLabelMax = 32

// Label marks the devices as this volume's: it is the bcache label of the backing device and the
// GPT name of the cache partition. A restart or reboot finds the label and adopts the devices
// instead of building them again; a device with another label is never taken without consent.
func (v Volume) Label() string { return label("fc-", v.Name) }

// label is prefix and name, cut to fit a bcache label with a hash of the whole name when it is
// too long. No ':' in it: sgdisk ends a partition name at the first colon.
func label(prefix, name string) string {
	if len(prefix)+len(name) <= bcacheLabelMax {
		return prefix + name
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:])[:8]
	keep := bcacheLabelMax - len(prefix) - 1 - len(hash)
	return prefix + name[:keep] + "-" + hash
}

// StablePath is the path of the bcache device that survives bcacheN renumbering across boots: a
// link the engine keeps pointing at the current bcacheN. PersistentVolumes point here.
func (v Volume) StablePath() string { return filepath.Join(StableDir, v.Name) }

// StableDir holds the engine's links to bcache devices.
var StableDir = "/dev/flashcache"
