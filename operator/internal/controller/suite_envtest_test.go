//go:build envtest

package controller

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	fcv1ac "github.com/flashcache/flashcache/operator/internal/applyconfiguration/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/testenv"
)

// agentFieldManager is the identity under which these tests write what the node agent reports.
const agentFieldManager = "flashcache-agent"

var k8s client.Client

// TestMain runs the operator's controller in a manager against a real etcd and kube-apiserver.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		env, cfg, err := testenv.Start(testenv.CRDDir())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = env.Stop() }()

		logFile, err := os.CreateTemp("", "flashcache-controller-envtest-*.log")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = logFile.Close() }()
		fmt.Fprintln(os.Stderr, "operator log:", logFile.Name())
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logFile)))
		scheme := testenv.Scheme()
		cacheOpts, err := CacheOptions()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{
			Scheme: scheme, Cache: cacheOpts,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := (&FlashCacheVolumeReconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(FieldManager),
		}).SetupWithManager(mgr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			if err := mgr.Start(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "manager:", err)
			}
		}()
		if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

// eventually polls check until it returns nil, failing the test with its last error after 20 s.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consistently fails the test if check returns an error within the next two seconds.
func consistently(t *testing.T, what string, check func() error) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := check(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func createNode(t *testing.T, name, hostname string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{hostnameLabel: hostname}}}
	if err := k8s.Create(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), node) })
}

func createVolume(t *testing.T, name, node string, mutate ...func(*fcv1.FlashCacheVolume)) *fcv1.FlashCacheVolume {
	t.Helper()
	fcv := &fcv1.FlashCacheVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fcv1.FlashCacheVolumeSpec{
			NodeName:      node,
			CacheDevice:   &fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_" + name},
			BackingDevice: &fcv1.BackingDeviceSpec{Path: "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_" + name},
		},
	}
	for _, m := range mutate {
		m(fcv)
	}
	if err := k8s.Create(context.Background(), fcv); err != nil {
		t.Fatal(err)
	}
	return fcv
}

func getVolume(t *testing.T, name string) *fcv1.FlashCacheVolume {
	t.Helper()
	var fcv fcv1.FlashCacheVolume
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: name}, &fcv); err != nil {
		t.Fatal(err)
	}
	return &fcv
}

// reportAsAgent writes the agent's part of the status the way the agent does: server-side apply
// under its own field manager.
func reportAsAgent(t *testing.T, name string, provisioned metav1.ConditionStatus, reason string, device *fcv1ac.DeviceStatusApplyConfiguration) {
	t.Helper()
	status := fcv1ac.FlashCacheVolumeStatus().WithConditions(metav1ac.Condition().
		WithType(fcv1.ConditionProvisioned).WithStatus(provisioned).WithReason(reason).
		WithMessage("reported by the test agent").WithLastTransitionTime(metav1.Now()))
	if device != nil {
		status.WithDevice(device)
	}
	ac := fcv1ac.FlashCacheVolume(name).WithStatus(status)
	if err := k8s.Status().Apply(context.Background(), ac, client.FieldOwner(agentFieldManager), client.ForceOwnership); err != nil {
		t.Fatalf("agent status: %v", err)
	}
}

func builtDevice(path, capacity string) *fcv1ac.DeviceStatusApplyConfiguration {
	return fcv1ac.DeviceStatus().WithName("bcache0").WithPath(path).WithCapacity(resource.MustParse(capacity)).
		WithCacheMode(fcv1.CacheModeWriteback).WithState("clean")
}

func readyReason(t *testing.T, name string) (metav1.ConditionStatus, string, string) {
	t.Helper()
	c := meta.FindStatusCondition(getVolume(t, name).Status.Conditions, fcv1.ConditionReady)
	if c == nil {
		return "", "", ""
	}
	return c.Status, c.Reason, c.Message
}

func waitForReady(t *testing.T, name string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, "Ready condition of "+name, func() error {
		if s, r, m := readyReason(t, name); s != status || r != reason {
			return fmt.Errorf("Ready = %s/%s (%s), want %s/%s", s, r, m, status, reason)
		}
		return nil
	})
}

func getPV(name string) (*corev1.PersistentVolume, error) {
	var pv corev1.PersistentVolume
	err := k8s.Get(context.Background(), types.NamespacedName{Name: name}, &pv)
	return &pv, err
}

func waitForPV(t *testing.T, name string) *corev1.PersistentVolume {
	t.Helper()
	var pv *corev1.PersistentVolume
	eventually(t, "PersistentVolume "+name, func() (err error) {
		pv, err = getPV(name)
		return err
	})
	return pv
}

func waitGone(t *testing.T, what string, obj client.Object) {
	t.Helper()
	eventually(t, what+" to be deleted", func() error {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
}

// setPhase plays the part of kube-controller-manager's PersistentVolume binder, which envtest
// does not run.
func setPhase(t *testing.T, pvName string, claim *corev1.ObjectReference, phase corev1.PersistentVolumePhase) {
	t.Helper()
	// The operator may write the PersistentVolume at the same moment: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv, err := getPV(pvName)
		if err != nil {
			return err
		}
		if claim != nil {
			pv.Spec.ClaimRef = claim
			if err := k8s.Update(context.Background(), pv); err != nil {
				return err
			}
		}
		pv.Status.Phase = phase
		return k8s.Status().Update(context.Background(), pv)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitPVDeletedByOperator waits for the operator to delete a PersistentVolume, then plays
// kube-controller-manager's pv-protection controller, which envtest does not run: it removes the
// protection finalizer that kube-apiserver's admission added, so the deletion completes.
func waitPVDeletedByOperator(t *testing.T, name string) {
	t.Helper()
	eventually(t, "operator deletes PersistentVolume "+name, func() error {
		pv, err := getPV(name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if pv.DeletionTimestamp.IsZero() {
			return fmt.Errorf("not being deleted")
		}
		if controllerutil.RemoveFinalizer(pv, "kubernetes.io/pv-protection") {
			return k8s.Update(context.Background(), pv)
		}
		return fmt.Errorf("still there with finalizers %v", pv.Finalizers)
	})
	waitGone(t, "PersistentVolume", &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

func eventReasons(t *testing.T, fcv *fcv1.FlashCacheVolume) map[string]string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, e := range list.Items {
		if e.Regarding.UID == fcv.UID {
			reasons[e.Reason] = e.Note
		}
	}
	return reasons
}
