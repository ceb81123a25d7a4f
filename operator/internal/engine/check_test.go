package engine

import (
	"strings"
	"testing"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/safety"
)

func TestEnforceAllowsWritebackOnlyOnSafeDevicesAndAnUnwornCache(t *testing.T) {
	enforce, warn := Volume{Name: "db"}, Volume{Name: "db", Spec: fcv1.FlashCacheVolumeSpec{Safety: fcv1.SafetySpec{Policy: fcv1.SafetyPolicyWarn}}}
	for _, c := range []struct {
		v       Volume
		verdict safety.Verdict
		worn    bool
		want    bool
	}{
		{enforce, safety.Safe, false, true},
		{enforce, safety.Unknown, false, false},
		{enforce, safety.Unsafe, false, false},
		{enforce, safety.Safe, true, false},
		{warn, safety.Unknown, false, true},
		{warn, safety.Unsafe, true, true},
	} {
		rep := &CheckReport{Verdict: c.verdict, Worn: c.worn}
		if got := writebackAllowed(c.v, rep); got != c.want {
			t.Errorf("policy %q, %s, worn %v: writeback allowed %v, want %v", c.v.Spec.Safety.Policy, c.verdict, c.worn, got, c.want)
		}
		if way := rep.WayToWriteback(); (c.verdict != safety.Safe) != strings.Contains(way, "spec.safety.trustWriteCache") {
			t.Errorf("%s: way to writeback %q", c.verdict, way)
		}
	}
}
