package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/internal/safety"
)

func TestFlushIsWantedWhileCordonedOrWhileAnEvictionWaits(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	r := &Reconciler{RequestGrace: 2 * time.Minute, Now: func() time.Time { return now }}
	fcv := func(requested string) *fcv1.FlashCacheVolume {
		f := &fcv1.FlashCacheVolume{}
		if requested != "" {
			f.Annotations = map[string]string{fcv1.AnnotationFlushRequested: requested}
		}
		return f
	}
	node := func(cordoned bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		n.Spec.Unschedulable = cordoned
		return n
	}
	for name, tc := range map[string]struct {
		fcv  *fcv1.FlashCacheVolume
		node *corev1.Node
		want string
	}{
		"nothing":            {fcv(""), node(false), ""},
		"cordoned":           {fcv(""), node(true), "cordoned"},
		"recent eviction":    {fcv(now.Add(-30 * time.Second).Format(time.RFC3339)), node(false), "eviction"},
		"eviction long ago":  {fcv(now.Add(-10 * time.Minute).Format(time.RFC3339)), node(false), ""},
		"unreadable request": {fcv("yesterday"), node(false), ""},
		"cordoned, long ago": {fcv(now.Add(-10 * time.Minute).Format(time.RFC3339)), node(true), "cordoned"},
	} {
		got := r.flushWanted(tc.fcv, tc.node)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: flushWanted = %q, want one containing %q", name, got, tc.want)
		}
	}
}

func TestReportSaysHeldCleanOnlyWhenCleanAndOutOfWriteback(t *testing.T) {
	for name, tc := range map[string]struct {
		status engine.Status
		reason string
	}{
		"held clean":         {engine.Status{Device: "bcache0", CacheSetUUID: "u", State: "clean", CacheMode: "writethrough", Held: true}, fcv1.ReasonHeldClean},
		"held, still dirty":  {engine.Status{Device: "bcache0", CacheSetUUID: "u", State: "dirty", CacheMode: "writethrough", Held: true, DirtyBytes: 4096}, fcv1.ReasonFlushInProgress},
		"held, in writeback": {engine.Status{Device: "bcache0", CacheSetUUID: "u", State: "clean", CacheMode: "writeback", Held: true}, fcv1.ReasonFlushInProgress},
		"not held":           {engine.Status{Device: "bcache0", CacheSetUUID: "u", State: "clean", CacheMode: "writeback"}, fcv1.ReasonNotRequested},
	} {
		st := newReport(&fcv1.FlashCacheVolume{}, time.Now())
		s := tc.status
		st.fromResult(&engine.Result{Status: &s}, 3)
		if st.flushing.Reason != tc.reason {
			t.Errorf("%s: Flushing reason %s, want %s", name, st.flushing.Reason, tc.reason)
		}
		if st.observedGeneration != 3 || st.provisioned.Status != metav1.ConditionTrue {
			t.Errorf("%s: generation %d, provisioned %v", name, st.observedGeneration, st.provisioned)
		}
	}
}

func TestReportCarriesTheVerdictAndTheWritethroughItForces(t *testing.T) {
	used := 7
	check := &engine.CheckReport{Verdict: safety.Unsafe, Policy: "Enforce", WritebackAllowed: false,
		Reasons: []string{"flushes add 370µs to a write on a rotating disk"},
		Devices: []engine.DeviceCheck{{Role: "cache", Device: "/dev/nvme0n1", HardwareID: "eui.0025388b", Verdict: safety.Safe, Wear: &safety.Wear{PercentUsed: &used}},
			{Role: "backing", Device: "/dev/sdb", HardwareID: "naa.5000c500", Verdict: safety.Unsafe}}}
	st := newReport(&fcv1.FlashCacheVolume{}, time.Now())
	st.fromResult(&engine.Result{Status: &engine.Status{Device: "bcache0", State: "no cache"}, Check: check}, 1)
	if st.safety.Verdict != fcv1.SafetyVerdictUnsafe || st.safetyChecked.Reason != fcv1.ReasonWritethroughEnforced ||
		st.safetyChecked.Status != metav1.ConditionFalse || !strings.Contains(st.safetyChecked.Message, "370µs") ||
		!strings.Contains(st.safetyChecked.Message, "spec.safety.trustWriteCache") || !strings.Contains(st.safetyChecked.Message, "spec.safety.policy: Warn") {
		t.Errorf("safety %v, condition %+v", st.safety, st.safetyChecked)
	}
	if d := st.safety.Devices; len(d) != 2 || d[1].Role != "backing" || d[1].HardwareID != "naa.5000c500" || d[1].Verdict != fcv1.SafetyVerdictUnsafe {
		t.Errorf("the status does not say which devices the verdict is of: %+v", d)
	}
	if st.wearPercent == nil || *st.wearPercent != 7 {
		t.Errorf("wear %v, want 7", st.wearPercent)
	}
	if st.degraded.Status != metav1.ConditionTrue || st.degraded.Reason != fcv1.ReasonNoCache {
		t.Errorf("a device without its cache must be Degraded: %+v", st.degraded)
	}
}

func TestReportKeepsConditionsItDoesNotTouch(t *testing.T) {
	fcv := &fcv1.FlashCacheVolume{}
	meta.SetStatusCondition(&fcv.Status.Conditions, metav1.Condition{Type: fcv1.ConditionSafetyChecked, Status: metav1.ConditionTrue, Reason: fcv1.ReasonSafe})
	st := newReport(fcv, time.Now())
	if st.safetyChecked == nil || st.safetyChecked.Reason != fcv1.ReasonSafe {
		t.Errorf("an apply that carries no check must resend the last verdict: %+v", st.safetyChecked)
	}
}

func TestProgressMessageShowsWhatDrainPrints(t *testing.T) {
	msg := progressMessage(engine.FlushProgress{DirtyBytes: 3 << 30, BytesPerSecond: 80 << 20, ETA: 38400 * time.Millisecond})
	if msg != "flushing 3.0 GiB to the backing disk at 80.0 MiB/s, ~38s left" {
		t.Errorf("progress: %q", msg)
	}
}

// A device failure is kept in status.failure with the dirty data last observed: the running
// device's own figure when there is one, else the one the status held from before the failure;
// its first sighting stays; a whole volume clears it.
func TestReportKeepsTheFailureWithTheDirtyDataLastObserved(t *testing.T) {
	first := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	fcv := &fcv1.FlashCacheVolume{}
	st := newReport(fcv, first)
	st.fromResult(&engine.Result{Status: &engine.Status{Device: "bcache0", CacheSetUUID: "u", State: "dirty", DirtyBytes: 3 << 20}}, 1)
	if st.failure != nil {
		t.Fatalf("a whole volume has no failure: %+v", st.failure)
	}
	st.setFailure(engine.FailureOf(&engine.CacheLostError{Path: "/dev/disk/by-id/nvme-x", DirtyOnDisk: true}))
	f := st.failure
	if f == nil || f.Device != fcv1.FailedDeviceCache || f.Reason != fcv1.ReasonCacheDeviceLost || !f.DirtyDataAtRisk ||
		f.DirtyDataLastObserved == nil || f.DirtyDataLastObserved.Value() != 3<<20 || !f.Since.Time.Equal(first) || f.KernelAction == "" {
		t.Fatalf("after the loss: %+v", f)
	}
	st.now = first.Add(time.Minute)
	st.setFailure(engine.FailureOf(&engine.CacheLostError{Path: "/dev/disk/by-id/nvme-x", DirtyOnDisk: true}))
	if !st.failure.Since.Time.Equal(first) {
		t.Errorf("the same failure seen again moved since to %v", st.failure.Since)
	}
	st.fromResult(&engine.Result{Status: &engine.Status{Device: "bcache0", CacheSetUUID: "u2", State: "clean"}}, 2)
	if st.failure != nil || st.degraded.Status != metav1.ConditionFalse {
		t.Errorf("after the replacement: failure %+v, degraded %+v", st.failure, st.degraded)
	}
	// Backing I/O errors counted on a running device are a failure of their own.
	st.fromResult(&engine.Result{Status: &engine.Status{Device: "bcache0", CacheSetUUID: "u2", State: "clean", BackingIOErrors: 2, BackingIOErrorLimit: 64}}, 2)
	if st.failure == nil || st.failure.Device != fcv1.FailedDeviceBacking || st.degraded.Reason != fcv1.ReasonBackingDeviceErrors ||
		!strings.Contains(st.degraded.Message, "counted 2 backing I/O errors") {
		t.Errorf("with backing errors: failure %+v, degraded %+v", st.failure, st.degraded)
	}
}

func TestAFailureReadFromAStaleObjectKeepsABuiltVolumeProvisioned(t *testing.T) {
	provisioning := metav1.Condition{Type: fcv1.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: fcv1.ReasonProvisioning}
	provisioned := metav1.Condition{Type: fcv1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: fcv1.ReasonProvisioned}
	lost := &engine.CacheLostError{Path: "/dev/disk/by-id/nvme-gone"}
	refused := errors.New("backingDevice.path: carries a filesystem")
	for name, tc := range map[string]struct {
		read        *metav1.Condition
		err         error
		provisioned metav1.ConditionStatus
		degraded    bool
	}{
		// The object a reconcile queued by the agent's first write reads: Provisioning, though
		// the device was built since. A cache lost meanwhile is still a built volume's.
		"lost cache, stale object":   {&provisioning, lost, metav1.ConditionTrue, true},
		"lost cache, current object": {&provisioned, lost, metav1.ConditionTrue, true},
		"error of a built volume":    {&provisioned, refused, metav1.ConditionTrue, true},
		"error while provisioning":   {&provisioning, refused, metav1.ConditionFalse, false},
		"error before any condition": {nil, refused, metav1.ConditionFalse, false},
	} {
		fcv := &fcv1.FlashCacheVolume{}
		if tc.read != nil {
			fcv.Status.Conditions = []metav1.Condition{*tc.read}
		}
		st := newReport(fcv, time.Now())
		st.fromError(fcv, fcv1.ReasonCacheDeviceLost, tc.err)
		if st.provisioned == nil || st.provisioned.Status != tc.provisioned || (st.degraded != nil) != tc.degraded {
			t.Errorf("%s: Provisioned %+v, Degraded %+v; want Provisioned %s, Degraded set %v", name, st.provisioned, st.degraded, tc.provisioned, tc.degraded)
		}
	}
}

func TestABusyLockKeepsABuiltVolumeProvisioned(t *testing.T) {
	busy := engine.ErrBusy
	for name, tc := range map[string]struct {
		read    *metav1.Condition
		reports bool
	}{
		"built":         {&metav1.Condition{Type: fcv1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: fcv1.ReasonProvisioned}, false},
		"being built":   {&metav1.Condition{Type: fcv1.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: fcv1.ReasonProvisioning}, true},
		"not yet begun": {nil, true},
	} {
		fcv := &fcv1.FlashCacheVolume{}
		if tc.read != nil {
			fcv.Status.Conditions = []metav1.Condition{*tc.read}
		}
		st := newReport(fcv, time.Now())
		if got := st.fromBusy(fcv, busy); got != tc.reports {
			t.Errorf("%s: fromBusy = %v, want %v", name, got, tc.reports)
		}
		if tc.reports && (st.provisioned == nil || st.provisioned.Reason != fcv1.ReasonBusy || st.provisioned.Status != metav1.ConditionFalse) {
			t.Errorf("%s: Provisioned %+v, want False/Busy", name, st.provisioned)
		}
		if !tc.reports && st.provisioned != nil && st.provisioned.Status != metav1.ConditionTrue {
			t.Errorf("%s: Provisioned %+v, want it kept True", name, st.provisioned)
		}
	}
}
