package engine

import (
	"errors"
	"os"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// Retry says when trying an engine run again can help.
type Retry int

const (
	// RetryWithBackoff: a transient error; try again, backing off.
	RetryWithBackoff Retry = iota
	// RetrySoon: the cause usually goes by itself (an iSCSI session coming back).
	RetrySoon
	// RetryWhenFixedElsewhere: the fix is outside the volume's spec, where a front end cannot
	// watch (a Secret, a replaced SSD, a disk back online).
	RetryWhenFixedElsewhere
	// RetryRarely: a person must act on the spec or the host (consent, another disk).
	RetryRarely
)

// ErrorClass is what an engine error means to a front end: the reason it reports, the spec field
// concerned, when to try again, and what the volume looks like if the error let it be observed.
type ErrorClass struct {
	Reason string
	Field  string
	Retry  Retry
	Status *Status
}

// Classify is the one place that reads engine errors; the agent and `flashcache node` report
// what it says.
func Classify(err error) ErrorClass {
	var refusal *Refusal
	var lost *SessionLostError
	var cacheLost *CacheLostError
	var backingFailed *BackingFailedError
	switch {
	case errors.As(err, &lost):
		return ErrorClass{Reason: fcv1.ReasonISCSISessionLost, Field: "backingDevice.iscsi", Retry: RetrySoon}
	case errors.As(err, &cacheLost):
		// Before a missing device, which it wraps: the reason says what became of dirty data.
		return ErrorClass{Reason: cacheLost.Reason(), Field: cacheLost.field(), Retry: RetryWhenFixedElsewhere, Status: cacheLost.Status}
	case errors.As(err, &backingFailed):
		return ErrorClass{Reason: fcv1.ReasonBackingDeviceErrors, Field: "backingDevice.path", Retry: RetryWhenFixedElsewhere, Status: backingFailed.Status}
	case errors.As(err, &refusal) && (refusal.Reason == ReasonPoolNotReady || refusal.Reason == ReasonPoolFull ||
		refusal.Reason == fcv1.ReasonCacheDeviceLost || refusal.Reason == fcv1.ReasonCacheDeviceErrors):
		// The pool's build, a volume deleted from it, or its SSD back or replaced changes this;
		// not the volume's spec.
		return ErrorClass{Reason: refusal.Reason, Field: refusal.Field, Retry: RetryWhenFixedElsewhere}
	case errors.As(err, &refusal) && (refusal.Reason == fcv1.ReasonCHAPSecretUnreadable || refusal.Reason == fcv1.ReasonISCSILoginRefused):
		// A front end may read Secrets without watching them: a corrected one is noticed by trying again.
		return ErrorClass{Reason: refusal.Reason, Field: refusal.Field, Retry: RetryWhenFixedElsewhere}
	case errors.As(err, &refusal):
		return ErrorClass{Reason: refusal.Reason, Field: refusal.Field, Retry: RetryRarely}
	case errors.Is(err, blockdev.ErrNotFound) || errors.Is(err, os.ErrNotExist):
		return ErrorClass{Reason: fcv1.ReasonDeviceMissing, Retry: RetryRarely}
	}
	return ErrorClass{Reason: fcv1.ReasonApplyFailed, Retry: RetryWithBackoff}
}
