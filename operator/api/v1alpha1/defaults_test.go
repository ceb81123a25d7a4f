package v1alpha1

import "testing"

// An empty spec reads as the defaults the API server would have filled in (checked against a
// real one in the envtest API tests), so code that sees an undefaulted spec behaves the same.
func TestEffectiveValuesOfAnEmptySpecAreTheDefaults(t *testing.T) {
	var s FlashCacheVolumeSpec
	for _, c := range []struct {
		field     string
		got, want any
	}{
		{"mode", s.EffectiveMode(), DefaultMode},
		{"cacheDevice.overProvisionPercent", s.EffectiveOverProvisionPercent(), DefaultOverProvisionPercent},
		{"dirtyThresholdPercent", s.EffectiveDirtyThresholdPercent(), DefaultDirtyThresholdPercent},
		{"flushPeriod", s.EffectiveFlushPeriod(), DefaultFlushPeriod},
		{"flushThrottle", s.EffectiveFlushThrottle(), DefaultFlushThrottle},
		{"sequentialCutoff", s.EffectiveSequentialCutoffBytes(), DefaultSequentialCutoffBytes},
		{"cacheSequentialUntilFull", s.EffectiveCacheSequentialUntilFull(), true},
		{"replacementPolicy", s.EffectiveReplacementPolicy(), DefaultReplacementPolicy},
		{"cacheDevice.bucketSize", s.EffectiveBucketSizeBytes(), DefaultBucketSizeBytes},
		{"backingWritebackThrottling", s.EffectiveBackingWritebackThrottling(), DefaultBackingWritebackThrottling},
		{"cacheCongestionBypass", s.EffectiveCacheCongestionBypass(), DefaultCacheCongestionBypass},
		{"safety.policy", s.Safety.EffectivePolicy(), DefaultSafetyPolicy},
		{"safety.maxWearPercent", s.Safety.EffectiveMaxWearPercent(), DefaultMaxWearPercent},
		{"safety.wearCheckInterval", s.Safety.EffectiveWearCheckInterval(), DefaultWearCheckInterval},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.field, c.got, c.want)
		}
	}
	var pool FlashCachePoolSpec
	if got := pool.EffectiveBackingWritebackThrottling(); got != DefaultBackingWritebackThrottling {
		t.Errorf("pool's backingWritebackThrottling: %v, want %v", got, DefaultBackingWritebackThrottling)
	}
	if got := pool.EffectiveCacheCongestionBypass(); got != DefaultCacheCongestionBypass {
		t.Errorf("pool's cacheCongestionBypass: %v, want %v", got, DefaultCacheCongestionBypass)
	}
	zero, off := int32(0), false
	s.DirtyThresholdPercent, s.CacheSequentialUntilFull = &zero, &off
	if s.EffectiveDirtyThresholdPercent() != 0 || s.EffectiveCacheSequentialUntilFull() {
		t.Errorf("a set value is not the effective one")
	}
}
