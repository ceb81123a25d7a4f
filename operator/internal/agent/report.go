package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	fcv1ac "github.com/flashcache/flashcache/operator/internal/applyconfiguration/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/internal/safety"
	"github.com/flashcache/flashcache/operator/internal/units"
)

// report is every status field the agent owns. Server-side apply drops the fields a manager
// stops sending, so each apply carries all of them, starting from what the object says now.
type report struct {
	now                time.Time
	old                []metav1.Condition
	observedGeneration int64
	device             *fcv1.DeviceStatus
	dirty              *int64
	dirtySince         *metav1.Time
	hitRatio           *int32
	wearPercent        *int32
	safety             *fcv1.SafetyStatus
	failure            *fcv1.FailureStatus

	provisioned, safetyChecked, flushing, degraded *metav1.Condition
}

func newReport(fcv *fcv1.FlashCacheVolume, now time.Time) *report {
	st := &report{now: now, old: fcv.Status.Conditions, observedGeneration: fcv.Status.ObservedGeneration,
		device: fcv.Status.Device.DeepCopy(), dirtySince: fcv.Status.DirtySince.DeepCopy(), hitRatio: fcv.Status.HitRatioPercent,
		wearPercent: fcv.Status.CacheWearPercent, safety: fcv.Status.Safety.DeepCopy(), failure: fcv.Status.Failure.DeepCopy()}
	if fcv.Status.DirtyData != nil {
		d := fcv.Status.DirtyData.Value()
		st.dirty = &d
	}
	find := func(t string) *metav1.Condition {
		if c := meta.FindStatusCondition(fcv.Status.Conditions, t); c != nil {
			return c.DeepCopy()
		}
		return nil
	}
	st.provisioned, st.safetyChecked, st.flushing, st.degraded =
		find(fcv1.ConditionProvisioned), find(fcv1.ConditionSafetyChecked), find(fcv1.ConditionFlushing), find(fcv1.ConditionDegraded)
	return st
}

func condition(t string, s metav1.ConditionStatus, reason, message string) *metav1.Condition {
	return &metav1.Condition{Type: t, Status: s, Reason: reason, Message: message}
}

// fromError says on the conditions that an engine run failed with reason: on Degraded when the
// device was built and may still serve, on Provisioned otherwise.
func (st *report) fromError(fcv *fcv1.FlashCacheVolume, reason string, err error) {
	// A lost cache is only ever reported of a volume the engine built (the backing disk carries
	// its label), whatever the object read from the informer cache says: under load that object
	// can predate the agent's own write of Provisioned=True (a reconcile queued by the first
	// write reads it), and writing back what it said left a volume that serves degraded in phase
	// Failed, or Provisioning, for good.
	var cacheLost *engine.CacheLostError
	built := errors.As(err, &cacheLost)
	p := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionProvisioned)
	switch {
	case p != nil && p.Status == metav1.ConditionTrue:
		// The device was built once and may still serve: say so on Degraded, keep Provisioned.
		st.degraded = condition(fcv1.ConditionDegraded, metav1.ConditionTrue, reason, err.Error())
	case built:
		st.degraded = condition(fcv1.ConditionDegraded, metav1.ConditionTrue, reason, err.Error())
		st.provisioned = condition(fcv1.ConditionProvisioned, metav1.ConditionTrue, fcv1.ReasonProvisioned,
			"the device was built; it serves degraded (see Degraded)")
	default:
		st.provisioned = condition(fcv1.ConditionProvisioned, metav1.ConditionFalse, reason, err.Error())
	}
}

// fromBusy says on Provisioned that another run holds the volume's disks, while the volume is
// being built, and reports whether it did. A built volume stays Provisioned: another run (the
// pool's, a drain's flush) holds the disks for seconds, and the node service stages only a
// Provisioned volume, so a Busy there kept a claim's pod from starting for minutes of the
// kubelet's back-off.
func (st *report) fromBusy(fcv *fcv1.FlashCacheVolume, err error) bool {
	if p := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionProvisioned); p != nil && p.Status == metav1.ConditionTrue {
		return false
	}
	st.provisioned = condition(fcv1.ConditionProvisioned, metav1.ConditionFalse, fcv1.ReasonBusy, err.Error())
	return true
}

// fromPass says on Flushing that a flush pass runs, unless a drain's flush already does.
func (st *report) fromPass(p *engine.PassReport, s *engine.Status) {
	if p == nil || !p.Active || s.Held {
		return
	}
	st.flushing = condition(fcv1.ConditionFlushing, metav1.ConditionTrue, fcv1.ReasonFlushPass,
		fmt.Sprintf("%s pass started %s: %s dirty then, %s now; writing back at full speed, in writeback",
			p.Reason, p.StartedAt.UTC().Format(time.RFC3339), units.Bytes(p.DirtyAtStart), units.Bytes(s.DirtyBytes)))
}

// fromResult fills the report from an engine run that succeeded.
func (st *report) fromResult(res *engine.Result, generation int64) {
	s := res.Status
	st.observedGeneration = generation
	st.provisioned = condition(fcv1.ConditionProvisioned, metav1.ConditionTrue, fcv1.ReasonProvisioned,
		fmt.Sprintf("bcache device %s at %s", s.Device, s.StablePath))
	capacity := resource.NewQuantity(s.CapacityBytes, resource.BinarySI)
	st.device = &fcv1.DeviceStatus{Name: s.Device, Path: s.StablePath, CacheSetUUID: s.CacheSetUUID,
		BackingUUID: s.BackingUUID, Capacity: capacity, CacheMode: fcv1.CacheMode(s.CacheMode), State: s.State}
	dirty := s.DirtyBytes
	st.dirty = &dirty
	st.dirtySince = nil
	if s.DirtySince != nil {
		st.dirtySince = &metav1.Time{Time: *s.DirtySince}
	}
	hit := s.HitRatioPercent
	st.hitRatio = &hit

	if c := res.Check; c != nil {
		st.safety = &fcv1.SafetyStatus{Verdict: fcv1.SafetyVerdict(c.Verdict), Reasons: c.Reasons, CheckedAt: &metav1.Time{Time: c.At}}
		for _, d := range c.Devices {
			st.safety.Devices = append(st.safety.Devices, fcv1.SafetyDeviceStatus{Role: d.Role, Path: d.Path, Device: d.Device,
				HardwareID: d.HardwareID, Verdict: fcv1.SafetyVerdict(d.Verdict)})
		}
		reason := map[safety.Verdict]string{safety.Safe: fcv1.ReasonSafe, safety.Unsafe: fcv1.ReasonUnsafe}[c.Verdict]
		if reason == "" {
			reason = fcv1.ReasonUnknown
		}
		status := metav1.ConditionTrue
		msg := strings.Join(c.Reasons, "; ")
		if !c.WritebackAllowed {
			reason, status = fcv1.ReasonWritethroughEnforced, metav1.ConditionFalse
			msg = fmt.Sprintf("verdict %s under policy %s: the volume stays in writethrough: %s", c.Verdict, c.Policy, msg)
			if way := c.WayToWriteback(); way != "" {
				msg += ". " + way
			}
		}
		st.safetyChecked = condition(fcv1.ConditionSafetyChecked, status, reason, msg)
		if w := c.CacheWearPercent(); w != nil {
			st.wearPercent = w
		}
	}

	switch {
	case s.Held && s.DirtyBytes == 0 && s.CacheMode != string(fcv1.CacheModeWriteback):
		st.flushing = condition(fcv1.ConditionFlushing, metav1.ConditionTrue, fcv1.ReasonHeldClean,
			"the cache is clean and the volume is held in writethrough; evictions pass")
	case s.Held:
		st.flushing = condition(fcv1.ConditionFlushing, metav1.ConditionTrue, fcv1.ReasonFlushInProgress,
			fmt.Sprintf("flushing: %s dirty", units.Bytes(s.DirtyBytes)))
	default:
		st.flushing = condition(fcv1.ConditionFlushing, metav1.ConditionFalse, fcv1.ReasonNotRequested,
			"no drain, eviction or flush pass is under way")
	}
	st.setFailure(engine.FailureOfStatus(s))
	switch {
	case st.failure != nil:
		st.degraded = condition(fcv1.ConditionDegraded, metav1.ConditionTrue, st.failure.Reason,
			fmt.Sprintf("the %s device returned I/O errors: bcache %s", strings.ToLower(string(st.failure.Device)), st.failure.KernelAction))
	case s.State == "no cache" || s.CacheSetUUID == "":
		st.degraded = condition(fcv1.ConditionDegraded, metav1.ConditionTrue, fcv1.ReasonNoCache,
			"the bcache device runs without its cache: reads and writes go to the backing disk")
	default:
		st.degraded = condition(fcv1.ConditionDegraded, metav1.ConditionFalse, fcv1.ReasonRunning,
			fmt.Sprintf("running with its cache, %s", s.State))
	}
}

// setFailure records a device failure, or clears it (nil). The dirty data is the failure's own
// reading when the device still runs, otherwise the last one the status holds.
func (st *report) setFailure(f *engine.Failure) {
	if f == nil {
		st.failure = nil
		return
	}
	since := metav1.NewTime(st.now)
	if st.failure != nil && st.failure.Reason == f.Reason && st.failure.Since != nil {
		since = *st.failure.Since
	}
	st.failure = &fcv1.FailureStatus{Device: f.Device, Reason: f.Reason, Since: &since, DirtyDataAtRisk: f.DirtyAtRisk, KernelAction: f.KernelAction}
	dirty := st.dirty
	if f.DirtyBytes != nil {
		dirty = f.DirtyBytes
		st.dirty = f.DirtyBytes
	}
	if dirty != nil {
		st.failure.DirtyDataLastObserved = resource.NewQuantity(*dirty, resource.BinarySI)
	}
}

// applyStatus writes the report with server-side apply. With lock, the apply carries the
// resourceVersion that was read, and fails if the object changed since.
func (r *Reconciler) applyStatus(ctx context.Context, fcv *fcv1.FlashCacheVolume, st *report, lock bool) error {
	status := fcv1ac.FlashCacheVolumeStatus()
	if st.observedGeneration > 0 {
		status.WithObservedGeneration(st.observedGeneration)
	}
	if d := st.device; d != nil {
		dev := fcv1ac.DeviceStatus().WithName(d.Name).WithPath(d.Path).WithCacheSetUUID(d.CacheSetUUID).
			WithBackingUUID(d.BackingUUID).WithCacheMode(d.CacheMode).WithState(d.State)
		if d.Capacity != nil {
			dev.WithCapacity(*d.Capacity)
		}
		status.WithDevice(dev)
	}
	if st.dirty != nil {
		status.WithDirtyData(*resource.NewQuantity(*st.dirty, resource.BinarySI))
	}
	if st.dirtySince != nil {
		status.WithDirtySince(*st.dirtySince)
	}
	if st.hitRatio != nil {
		status.WithHitRatioPercent(*st.hitRatio)
	}
	if st.wearPercent != nil {
		status.WithCacheWearPercent(*st.wearPercent)
	}
	if s := st.safety; s != nil {
		sac := fcv1ac.SafetyStatus().WithVerdict(s.Verdict).WithReasons(s.Reasons...)
		if s.CheckedAt != nil {
			sac.WithCheckedAt(*s.CheckedAt)
		}
		for _, d := range s.Devices {
			sac.WithDevices(fcv1ac.SafetyDeviceStatus().WithRole(d.Role).WithPath(d.Path).WithDevice(d.Device).
				WithHardwareID(d.HardwareID).WithVerdict(d.Verdict))
		}
		status.WithSafety(sac)
	}
	if f := st.failure; f != nil {
		fac := fcv1ac.FailureStatus().WithDevice(f.Device).WithReason(f.Reason).WithDirtyDataAtRisk(f.DirtyDataAtRisk).WithKernelAction(f.KernelAction)
		if f.Since != nil {
			fac.WithSince(*f.Since)
		}
		if f.DirtyDataLastObserved != nil {
			fac.WithDirtyDataLastObserved(*f.DirtyDataLastObserved)
		}
		status.WithFailure(fac)
	}
	for _, c := range []*metav1.Condition{st.provisioned, st.safetyChecked, st.flushing, st.degraded} {
		if c == nil {
			continue
		}
		since := metav1.NewTime(st.now)
		if old := meta.FindStatusCondition(st.old, c.Type); old != nil && old.Status == c.Status {
			since = old.LastTransitionTime
		}
		status.WithConditions(metav1ac.Condition().WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).
			WithMessage(c.Message).WithObservedGeneration(st.observedGeneration).WithLastTransitionTime(since))
	}
	ac := fcv1ac.FlashCacheVolume(fcv.Name).WithStatus(status)
	if lock {
		ac.WithResourceVersion(fcv.ResourceVersion)
	}
	if err := r.Status().Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying status of %s: %w", fcv.Name, err)
	}
	return nil
}

// progressMessage is what kubectl drain prints while it waits: dirty bytes, rate and time left.
func progressMessage(p engine.FlushProgress) string {
	msg := fmt.Sprintf("flushing %s to the backing disk", units.Bytes(p.DirtyBytes))
	if p.BytesPerSecond > 0 {
		msg += fmt.Sprintf(" at %s/s, ~%s left", units.Bytes(int64(p.BytesPerSecond)), p.ETA.Round(time.Second))
	}
	return msg
}
