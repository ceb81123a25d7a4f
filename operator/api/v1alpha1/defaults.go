package v1alpha1

import "time"

// The defaults of the spec, once. Each must match its field's +kubebuilder:default, which the
// API server (and `flashcache node`, through the embedded CRD) fills in; the API tests check
// each against a real API server. Code that reads a spec not defaulted by either (a unit test, an
// object built in memory) uses the Effective methods below, never a literal of its own.
const (
	DefaultOverProvisionPercent int32 = 20
	DefaultMode                       = CacheModeWriteback
	// DefaultDirtyThresholdPercent is 1, not bcache's 10 (40 until 2026-12-06): writeback all the
	// time leaves the flush passes little to write (docs/operations.md#tuning).
	DefaultDirtyThresholdPercent int32 = 1
	DefaultFlushPeriod                 = 5 * time.Minute
	// DefaultFlushThrottle is Disabled until the long runs show Proportional keeps throughput steadier.
	DefaultFlushThrottle               = FlushThrottleDisabled
	DefaultSequentialCutoffBytes int64 = 4 << 20
	DefaultReplacementPolicy           = ReplacementPolicyLRU
	// DefaultBackingWritebackThrottling is Disabled: with wbt on, commits wait behind bcache's
	// writeback (docs/benchmarks/results/README.md).
	DefaultBackingWritebackThrottling = WritebackThrottlingDisabled
	// DefaultCacheCongestionBypass is Disabled: under load bcache judged the SSD congested and sent
	// hot reads to the HDD (docs/benchmarks/results/README.md).
	DefaultCacheCongestionBypass = CongestionBypassDisabled
	// DefaultBucketSizeBytes is make-bcache's own default.
	DefaultBucketSizeBytes   int64 = 512 << 10
	DefaultSafetyPolicy            = SafetyPolicyEnforce
	DefaultMaxWearPercent    int32 = 90
	DefaultWearCheckInterval       = time.Hour
)

// EffectiveMode is spec.mode, or its default.
func (s *FlashCacheVolumeSpec) EffectiveMode() CacheMode {
	if s.Mode == "" {
		return DefaultMode
	}
	return s.Mode
}

// EffectiveOverProvisionPercent is spec.cacheDevice.overProvisionPercent, or its default.
func (s *FlashCacheVolumeSpec) EffectiveOverProvisionPercent() int32 {
	if s.CacheDevice != nil && s.CacheDevice.OverProvisionPercent != nil {
		return *s.CacheDevice.OverProvisionPercent
	}
	return DefaultOverProvisionPercent
}

// EffectiveBucketSizeBytes is spec.cacheDevice.bucketSize in bytes, or its default.
func (s *FlashCacheVolumeSpec) EffectiveBucketSizeBytes() int64 {
	if s.CacheDevice != nil {
		return s.CacheDevice.effectiveBucketSizeBytes()
	}
	return DefaultBucketSizeBytes
}

func (c *CacheDeviceSpec) effectiveBucketSizeBytes() int64 {
	if c.BucketSize != nil {
		return c.BucketSize.Value()
	}
	return DefaultBucketSizeBytes
}

// EffectiveDirtyThresholdPercent is spec.dirtyThresholdPercent, or its default.
func (s *FlashCacheVolumeSpec) EffectiveDirtyThresholdPercent() int32 {
	if p := s.DirtyThresholdPercent; p != nil {
		return *p
	}
	return DefaultDirtyThresholdPercent
}

// EffectiveFlushThrottle is spec.flushThrottle, or its default.
func (s *FlashCacheVolumeSpec) EffectiveFlushThrottle() FlushThrottle {
	if s.FlushThrottle == "" {
		return DefaultFlushThrottle
	}
	return s.FlushThrottle
}

// EffectiveFlushPeriod is spec.flushPeriod, or its default; 0 is off.
func (s *FlashCacheVolumeSpec) EffectiveFlushPeriod() time.Duration {
	if s.FlushPeriod == nil {
		return DefaultFlushPeriod
	}
	return s.FlushPeriod.Duration
}

// EffectiveSequentialCutoffBytes is spec.sequentialCutoff in bytes, or its default.
func (s *FlashCacheVolumeSpec) EffectiveSequentialCutoffBytes() int64 {
	if s.SequentialCutoff != nil {
		return s.SequentialCutoff.Value()
	}
	return DefaultSequentialCutoffBytes
}

// EffectiveCacheSequentialUntilFull is spec.cacheSequentialUntilFull, or its default (true).
func (s *FlashCacheVolumeSpec) EffectiveCacheSequentialUntilFull() bool {
	return s.CacheSequentialUntilFull == nil || *s.CacheSequentialUntilFull
}

// EffectiveReplacementPolicy is spec.replacementPolicy, or its default.
func (s *FlashCacheVolumeSpec) EffectiveReplacementPolicy() ReplacementPolicy {
	if s.ReplacementPolicy == "" {
		return DefaultReplacementPolicy
	}
	return s.ReplacementPolicy
}

// EffectiveBackingWritebackThrottling is spec.backingWritebackThrottling, or its default.
func (s *FlashCacheVolumeSpec) EffectiveBackingWritebackThrottling() WritebackThrottling {
	return orDefault(s.BackingWritebackThrottling, DefaultBackingWritebackThrottling)
}

// EffectiveBackingWritebackThrottling is spec.backingWritebackThrottling, or its default.
func (s *FlashCachePoolSpec) EffectiveBackingWritebackThrottling() WritebackThrottling {
	return orDefault(s.BackingWritebackThrottling, DefaultBackingWritebackThrottling)
}

// orDefault is an enum field's value, or def when it is unset.
func orDefault[T ~string](value, def T) T {
	if value == "" {
		return def
	}
	return value
}

// EffectiveCacheCongestionBypass is spec.cacheCongestionBypass, or its default.
func (s *FlashCacheVolumeSpec) EffectiveCacheCongestionBypass() CongestionBypass {
	return orDefault(s.CacheCongestionBypass, DefaultCacheCongestionBypass)
}

// EffectiveCacheCongestionBypass is spec.cacheCongestionBypass, or its default.
func (s *FlashCachePoolSpec) EffectiveCacheCongestionBypass() CongestionBypass {
	return orDefault(s.CacheCongestionBypass, DefaultCacheCongestionBypass)
}

// EffectivePolicy is spec.safety.policy, or its default.
func (s *SafetySpec) EffectivePolicy() SafetyPolicy {
	if s.Policy == "" {
		return DefaultSafetyPolicy
	}
	return s.Policy
}

// EffectiveMaxWearPercent is spec.safety.maxWearPercent, or its default.
func (s *SafetySpec) EffectiveMaxWearPercent() int32 {
	if p := s.MaxWearPercent; p != nil {
		return *p
	}
	return DefaultMaxWearPercent
}

// EffectiveWearCheckInterval is spec.safety.wearCheckInterval, or its default; 0 is off.
func (s *SafetySpec) EffectiveWearCheckInterval() time.Duration {
	if s.WearCheckInterval == nil {
		return DefaultWearCheckInterval
	}
	return s.WearCheckInterval.Duration
}

// BackingISCSI is the iSCSI LUN the volume's backing device is, if it is one.
func (s *FlashCacheVolumeSpec) BackingISCSI() *ISCSISource {
	if s.BackingDevice == nil {
		return nil
	}
	return s.BackingDevice.ISCSI
}

// EffectiveReplacementPolicy is spec.replacementPolicy, or its default.
func (s *FlashCachePoolSpec) EffectiveReplacementPolicy() ReplacementPolicy {
	if s.ReplacementPolicy == "" {
		return DefaultReplacementPolicy
	}
	return s.ReplacementPolicy
}

// EffectiveOverProvisionPercent is spec.cacheDevice.overProvisionPercent, or its default.
func (s *FlashCachePoolSpec) EffectiveOverProvisionPercent() int32 {
	if s.CacheDevice.OverProvisionPercent != nil {
		return *s.CacheDevice.OverProvisionPercent
	}
	return DefaultOverProvisionPercent
}

// EffectiveBucketSizeBytes is spec.cacheDevice.bucketSize in bytes, or its default.
func (s *FlashCachePoolSpec) EffectiveBucketSizeBytes() int64 {
	return s.CacheDevice.effectiveBucketSizeBytes()
}
