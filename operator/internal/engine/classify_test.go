package engine

import (
	"errors"
	"fmt"
	"testing"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

func TestClassify(t *testing.T) {
	running := &Status{Device: "bcache0"}
	cases := []struct {
		name string
		err  error
		want ErrorClass
	}{
		{"refusal", fmt.Errorf("apply: %w", &Refusal{Reason: ReasonCarriesData, Field: "backingDevice.path"}),
			ErrorClass{Reason: ReasonCarriesData, Field: "backingDevice.path", Retry: RetryRarely}},
		{"CHAP Secret unreadable", &Refusal{Reason: fcv1.ReasonCHAPSecretUnreadable, Field: "backingDevice.iscsi.chapSecretRef"},
			ErrorClass{Reason: fcv1.ReasonCHAPSecretUnreadable, Field: "backingDevice.iscsi.chapSecretRef", Retry: RetryWhenFixedElsewhere}},
		{"session lost", &SessionLostError{IQN: "iqn.x", Portal: "p", State: "FAILED"},
			ErrorClass{Reason: fcv1.ReasonISCSISessionLost, Field: "backingDevice.iscsi", Retry: RetrySoon}},
		{"cache lost, though it wraps a missing device", &CacheLostError{Path: "/dev/disk/by-id/x", Status: running, missing: blockdev.ErrNotFound},
			ErrorClass{Reason: fcv1.ReasonCacheDeviceLost, Field: "cacheDevice.path", Retry: RetryWhenFixedElsewhere, Status: running}},
		{"cache failing", &CacheLostError{Failing: true},
			ErrorClass{Reason: fcv1.ReasonCacheDeviceErrors, Field: "cacheDevice.path", Retry: RetryWhenFixedElsewhere}},
		{"backing disk offline", &BackingFailedError{Path: "/dev/sdb", State: "offline", Status: running},
			ErrorClass{Reason: fcv1.ReasonBackingDeviceErrors, Field: "backingDevice.path", Retry: RetryWhenFixedElsewhere, Status: running}},
		{"device missing", fmt.Errorf("observe: %w", blockdev.ErrNotFound),
			ErrorClass{Reason: fcv1.ReasonDeviceMissing, Retry: RetryRarely}},
		{"anything else", errors.New("make-bcache: exit 1"),
			ErrorClass{Reason: fcv1.ReasonApplyFailed, Retry: RetryWithBackoff}},
	}
	for _, c := range cases {
		if got := Classify(c.err); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
