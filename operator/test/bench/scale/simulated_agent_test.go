//go:build bench

package scale

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/agent"
	fcv1ac "github.com/flashcache/flashcache/operator/internal/applyconfiguration/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/testenv"
)

// simulationSentence is what the output says the simulated agent is.
const simulationSentence = "simulated agent: reports each volume Ready as the real agent would, no devices " +
	"(one process for all nodes, as the agent's ServiceAccount: a server-side apply of Provisioned=False/Provisioning " +
	"under the resourceVersion it read, then one of the full status of a built, clean, Safe writeback volume; " +
	"no engine runs and no 30 s idle refresh is sent)"

// simulatedAgent stands in for the flashcache agents of every kwok node: kwok has no block
// devices, and what the operator reacts to is only the status the agent writes. Its two writes
// per volume are the real agent's (operator/internal/agent: Reconcile, report.fromResult,
// applyStatus) when a volume is first built and comes up clean, with the same field manager,
// conditions and messages, so the operator sees the same sequence of updates.
type simulatedAgent struct {
	client.Client
}

// startSimulatedAgent runs the simulated agent with cfg (the chart's agent ServiceAccount) until
// ctx ends. workers bounds how many volumes it reports at once, as many agents would.
func startSimulatedAgent(ctx context.Context, cfg *rest.Config, workers int) (<-chan error, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("simulated agent: creating manager: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&fcv1.FlashCacheVolume{}).
		Named("simulated-agent").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(&simulatedAgent{Client: mgr.GetClient()})
	if err != nil {
		return nil, fmt.Errorf("simulated agent: setting up controller: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return done, nil
}

// Reconcile reports one volume as built and Ready, once.
func (a *simulatedAgent) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fcv fcv1.FlashCacheVolume
	if err := a.Get(ctx, req.NamespacedName, &fcv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fcv.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the benchmark deletes nothing
	}
	provisioned := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionProvisioned)
	if provisioned != nil && provisioned.Status == metav1.ConditionTrue {
		// Reported already; the real agent's idle refresh would write the same status again,
		// which the API server drops as a no-op.
		return ctrl.Result{}, nil
	}
	now := metav1.Now()
	if provisioned == nil {
		// The real agent says it is building under the resourceVersion it read, so that a
		// volume deleted meanwhile fails this write; a conflict (the operator added its
		// finalizer) is retried with backoff, as the agent's controller does.
		building := fcv1ac.FlashCacheVolumeStatus().WithConditions(condition(fcv1.ConditionProvisioned,
			metav1.ConditionFalse, fcv1.ReasonProvisioning, "the node agent is building the device", fcv.Status.ObservedGeneration, now))
		ac := fcv1ac.FlashCacheVolume(fcv.Name).WithResourceVersion(fcv.ResourceVersion).WithStatus(building)
		if err := a.Status().Apply(ctx, ac, client.FieldOwner(agent.FieldManager), client.ForceOwnership); err != nil {
			return ctrl.Result{}, fmt.Errorf("simulated agent: reporting %s as building: %w", fcv.Name, err)
		}
	}
	if err := a.Status().Apply(ctx, readyStatus(&fcv, now), client.FieldOwner(agent.FieldManager), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("simulated agent: reporting %s as built: %w", fcv.Name, err)
	}
	return ctrl.Result{}, nil
}

// readyStatus is every status field the real agent owns, as it writes them for a volume it has
// just built whose cache is clean and whose devices passed the safety check.
func readyStatus(fcv *fcv1.FlashCacheVolume, now metav1.Time) *fcv1ac.FlashCacheVolumeApplyConfiguration {
	gen := fcv.Generation
	device := fmt.Sprintf("bcache-sim-%s", fcv.Name)
	path := "/dev/flashcache/" + fcv.Name
	mode := fcv.Spec.EffectiveMode()
	status := fcv1ac.FlashCacheVolumeStatus().
		WithObservedGeneration(gen).
		WithDevice(fcv1ac.DeviceStatus().WithName(device).WithPath(path).
			// The volume's own UID: stable across reports and unique, which is all the operator needs.
			WithCacheSetUUID(string(fcv.UID)).WithBackingUUID(string(fcv.UID)).
			WithCacheMode(mode).WithState("clean").WithCapacity(resource.MustParse("100Gi"))).
		WithDirtyData(*resource.NewQuantity(0, resource.BinarySI)).
		WithHitRatioPercent(0).
		WithSafety(fcv1ac.SafetyStatus().WithVerdict(fcv1.SafetyVerdictSafe).
			WithReasons("simulated: no devices were checked").WithCheckedAt(now)).
		WithConditions(
			condition(fcv1.ConditionProvisioned, metav1.ConditionTrue, fcv1.ReasonProvisioned,
				fmt.Sprintf("bcache device %s at %s", device, path), gen, now),
			condition(fcv1.ConditionSafetyChecked, metav1.ConditionTrue, fcv1.ReasonSafe,
				"simulated: no devices were checked", gen, now),
			condition(fcv1.ConditionFlushing, metav1.ConditionFalse, fcv1.ReasonNotRequested,
				"no drain or eviction is waiting for this volume", gen, now),
			condition(fcv1.ConditionDegraded, metav1.ConditionFalse, fcv1.ReasonRunning,
				"running with its cache, clean", gen, now))
	return fcv1ac.FlashCacheVolume(fcv.Name).WithStatus(status)
}

func condition(kind string, status metav1.ConditionStatus, reason, message string, gen int64, at metav1.Time) *metav1ac.ConditionApplyConfiguration {
	return metav1ac.Condition().WithType(kind).WithStatus(status).WithReason(reason).WithMessage(message).
		WithObservedGeneration(gen).WithLastTransitionTime(at)
}
