//go:build envtest

package webhook

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/controller"
	"github.com/flashcache/flashcache/operator/internal/heartbeat"
	"github.com/flashcache/flashcache/operator/internal/testenv"
)

var (
	k8s  client.Client
	gate *EvictionGate
	// uncached reads its writes back at once, as the agent's heartbeat client does: the
	// manager's client reads a Lease through a cache that may not have seen it created yet.
	uncached client.Client
)

// TestMain serves the gate, registered with the shipped ValidatingWebhookConfiguration, to a
// real kube-apiserver: evictions in these tests go through the API server's admission chain.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "operator", "config", "webhook", "eviction.yaml"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		var config admissionv1.ValidatingWebhookConfiguration
		if err := yaml.Unmarshal(raw, &config); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		assets, err := testenv.Assets()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: []string{testenv.CRDDir()},
			ErrorIfCRDPathMissing: true,
			WebhookInstallOptions: envtest.WebhookInstallOptions{ValidatingWebhooks: []*admissionv1.ValidatingWebhookConfiguration{&config}}}
		cfg, err := env.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = env.Stop() }()

		cacheOpts, err := controller.CacheOptions()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cacheOpts.ByObject[&corev1.Pod{}] = cache.ByObject{Transform: SlimPod}
		wo := env.WebhookInstallOptions
		server, _, err := NewServer(Options{Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir, Certs: CertsFiles}, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: testenv.Scheme(), Cache: cacheOpts, WebhookServer: server,
			Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := Register(mgr, Options{AgentNamespace: "default"}, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		gate = &EvictionGate{Reader: mgr.GetCache(), Writer: mgr.GetClient(), Recorder: mgr.GetEventRecorder("test"),
			Agents: mgr.GetAPIReader(), AgentNamespace: "default"}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = mgr.Start(ctx) }()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			fmt.Fprintln(os.Stderr, "cache did not sync")
			return 1
		}
		k8s = mgr.GetClient()
		if uncached, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

// fixture makes a namespace, and a pod whose claim is bound to the PersistentVolume of a
// FlashCacheVolume with the given status.
func fixture(t *testing.T, mode fcv1.CacheMode, status fcv1.FlashCacheVolumeStatus, annotations map[string]string) (*corev1.Pod, *fcv1.FlashCacheVolume) {
	t.Helper()
	ctx := context.Background()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[len(name)-50:]
	}
	name = strings.Trim(name, "-")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	fcv := &fcv1.FlashCacheVolume{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: fcv1.FlashCacheVolumeSpec{NodeName: "node-1", Mode: mode,
			CacheDevice:   &fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-" + name},
			BackingDevice: &fcv1.BackingDeviceSpec{Path: "/dev/disk/by-id/hdd-" + name}}}
	must(k8s.Create(ctx, fcv))
	fcv.Status = status
	must(k8s.Status().Update(ctx, fcv))
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "flashcache-" + name,
		Labels: map[string]string{fcv1.LabelVolume: name}, Annotations: map[string]string{fcv1.AnnotationVolumeUID: string(fcv.UID)}},
		Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: "flashcache",
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/dev/flashcache/" + name}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-1"}}}}}}}}}
	must(k8s.Create(ctx, pv))
	class := "flashcache"
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: name},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: pv.Name,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	must(k8s.Create(ctx, pvc))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mysql-0", Namespace: name},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "mysql", Image: "mariadb"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	must(k8s.Create(ctx, pod))
	// The gate reads the cache: wait until it has everything.
	waitFor(t, "the cache to see the fixture", func() bool {
		var got fcv1.FlashCacheVolume
		var p corev1.Pod
		return k8s.Get(ctx, types.NamespacedName{Name: name}, &got) == nil && got.Status.Device != nil == (status.Device != nil) &&
			k8s.Get(ctx, client.ObjectKeyFromObject(pod), &p) == nil
	})
	return pod, fcv
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func evict(pod *corev1.Pod) error {
	return k8s.SubResource("eviction").Create(context.Background(), pod,
		&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}})
}

func dirtyWriteback(dirty string) fcv1.FlashCacheVolumeStatus {
	q := resource.MustParse(dirty)
	return fcv1.FlashCacheVolumeStatus{DirtyData: &q,
		Device: &fcv1.DeviceStatus{Name: "bcache0", Path: "/dev/flashcache/x", CacheMode: fcv1.CacheModeWriteback, State: "dirty"}}
}

func TestEvictionOfAPodOnADirtyWritebackVolumeGets429AndRequestsAFlush(t *testing.T) {
	pod, fcv := fixture(t, fcv1.CacheModeWriteback, dirtyWriteback("3Mi"), nil)
	err := evict(pod)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction: %v, want 429 Too Many Requests", err)
	}
	if !strings.Contains(err.Error(), "flashcache volume "+fcv.Name) || !strings.Contains(err.Error(), "3.0 MiB") {
		t.Errorf("the message should say which volume waits and how much is dirty: %v", err)
	}
	var got fcv1.FlashCacheVolume
	waitFor(t, "the flush request on the volume", func() bool {
		return k8s.Get(context.Background(), types.NamespacedName{Name: fcv.Name}, &got) == nil &&
			got.Annotations[fcv1.AnnotationFlushRequested] != ""
	})
	if _, err := time.Parse(time.RFC3339, got.Annotations[fcv1.AnnotationFlushRequested]); err != nil {
		t.Errorf("flush request %q is not a time: %v", got.Annotations[fcv1.AnnotationFlushRequested], err)
	}
}

func TestEvictionWaitsWithTheAgentsProgressAndPassesOnceHeldClean(t *testing.T) {
	status := dirtyWriteback("1Gi")
	status.Conditions = []metav1.Condition{{Type: fcv1.ConditionFlushing, Status: metav1.ConditionTrue, Reason: fcv1.ReasonFlushInProgress,
		Message: "flushing 1.0 GiB to the backing disk at 50.0 MiB/s, ~20s left", LastTransitionTime: metav1.Now()}}
	pod, fcv := fixture(t, fcv1.CacheModeWriteback, status, nil)
	if err := evict(pod); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "~20s left") {
		t.Fatalf("eviction: %v, want 429 with the agent's progress", err)
	}

	// The agent is done: clean, writethrough, held.
	// The webhook's flush stamp races this update, as it would race the agent's: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var got fcv1.FlashCacheVolume
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: fcv.Name}, &got); err != nil {
			return err
		}
		zero := resource.MustParse("0")
		got.Status.DirtyData = &zero
		got.Status.Device.CacheMode, got.Status.Device.State = fcv1.CacheModeWritethrough, "clean"
		got.Status.Conditions = []metav1.Condition{{Type: fcv1.ConditionFlushing, Status: metav1.ConditionTrue, Reason: fcv1.ReasonHeldClean,
			Message: "clean and held", LastTransitionTime: metav1.Now()}}
		return k8s.Status().Update(context.Background(), &got)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cache to see the volume held clean", func() bool {
		var c fcv1.FlashCacheVolume
		return k8s.Get(context.Background(), types.NamespacedName{Name: fcv.Name}, &c) == nil && c.Status.DirtyData.IsZero()
	})
	if err := evict(pod); err != nil {
		t.Fatalf("eviction of a pod whose volume is clean and held: %v", err)
	}
}

func TestCleanButNotHeldWritebackVolumeStillWaits(t *testing.T) {
	// Clean now, but still in writeback: the pod could dirty it again before it stops.
	status := dirtyWriteback("0")
	pod, _ := fixture(t, fcv1.CacheModeWriteback, status, nil)
	if err := evict(pod); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction: %v, want 429 until the volume is held in writethrough", err)
	}
}

func TestEvictionsThatNeedNoFlushPassAtOnce(t *testing.T) {
	zero := resource.MustParse("0")
	writethrough := fcv1.FlashCacheVolumeStatus{DirtyData: &zero,
		Device: &fcv1.DeviceStatus{Name: "bcache0", Path: "/dev/flashcache/x", CacheMode: fcv1.CacheModeWritethrough, State: "clean"}}
	for name, tc := range map[string]struct {
		mode        fcv1.CacheMode
		status      fcv1.FlashCacheVolumeStatus
		annotations map[string]string
	}{
		"writethrough":       {fcv1.CacheModeWritethrough, writethrough, nil},
		"emergency-override": {fcv1.CacheModeWriteback, dirtyWriteback("5Gi"), map[string]string{fcv1.AnnotationEvictWithoutFlush: "true"}},
		"never-built":        {fcv1.CacheModeWriteback, fcv1.FlashCacheVolumeStatus{}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			pod, _ := fixture(t, tc.mode, tc.status, tc.annotations)
			if err := evict(pod); err != nil {
				t.Fatalf("eviction: %v, want it admitted", err)
			}
		})
	}
	t.Run("pod-without-claims", func(t *testing.T) {
		ns := "plain"
		if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}
		if err := k8s.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		if err := evict(pod); err != nil {
			t.Fatalf("eviction: %v", err)
		}
	})
}

// BenchmarkGateAdmitsAPodWithoutFlashcacheVolumes is the latency the gate adds to an eviction
// of an ordinary pod: lookups in the informer cache only.
func BenchmarkGateAdmitsAPodWithoutFlashcacheVolumes(b *testing.B) {
	ctx := context.Background()
	ns := "bench"
	_ = k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "web", Image: "nginx"}},
			Volumes: []corev1.Volume{{Name: "other", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "elsewhere"}}}}}}
	_ = k8s.Create(ctx, pod)
	deadline := time.Now().Add(10 * time.Second)
	for k8s.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}) != nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	req := admission.Request{}
	req.Name, req.Namespace, req.SubResource = pod.Name, ns, "eviction"
	req.Resource.Resource = "pods"
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res := gate.Handle(ctx, req); !res.Allowed {
			b.Fatalf("denied: %v", res.Result)
		}
	}
}

func TestAHeldEvictionSaysWhenTheNodeAgentIsSilentAndHowToProceed(t *testing.T) {
	pod, fcv := fixture(t, fcv1.CacheModeWriteback, dirtyWriteback("5Mi"), nil)
	ctx := context.Background()
	escape := "kubectl annotate flashcachevolume " + fcv.Name + " " + fcv1.AnnotationEvictWithoutFlush + "=true"

	err := evict(pod)
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "the node agent on node-1 has never reported") ||
		!strings.Contains(err.Error(), escape) || !strings.Contains(err.Error(), "docs/runbooks/agent-down.md") {
		t.Fatalf("no Lease: %v, want 429 naming the silent agent and the way out", err)
	}

	renewer := &heartbeat.Renewer{Client: uncached, Namespace: "default", Node: "node-1"}
	if err := renewer.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := evict(pod); !apierrors.IsTooManyRequests(err) || strings.Contains(err.Error(), "kubectl annotate") {
		t.Errorf("fresh Lease: %v, want 429 without the way around the flush", err)
	}

	renewer.Now = func() time.Time { return time.Now().Add(-3 * time.Minute) }
	if err := renewer.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	err = evict(pod)
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "last reported 3m0s ago") || !strings.Contains(err.Error(), escape) {
		t.Errorf("stale Lease: %v, want 429 saying when the agent last reported", err)
	}
}

// A volume carved for a claim by the CSI driver has the provisioner's PersistentVolume, named as
// the volume and not labelled by the operator: its pod's eviction waits for its flush too, and
// a claim bound to another volume of that name is not taken for it.
func TestEvictionOfAPodOnAClaimedVolumeWaitsForItsFlush(t *testing.T) {
	ctx := context.Background()
	name := "claimed-eviction"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	volume := "pvc-claimed-eviction"
	fcv := &fcv1.FlashCacheVolume{ObjectMeta: metav1.ObjectMeta{Name: volume, Annotations: map[string]string{
		fcv1.AnnotationProvisionedBy: fcv1.CSIDriverName, fcv1.AnnotationClaim: name + "/data"}},
		Spec: fcv1.FlashCacheVolumeSpec{NodeName: "node-1", Mode: fcv1.CacheModeWriteback,
			Pool: &fcv1.PoolVolumeSource{Name: "pool-1", Size: resource.MustParse("1Gi")}}}
	must(k8s.Create(ctx, fcv))
	fcv.Status = dirtyWriteback("5Mi")
	must(k8s.Status().Update(ctx, fcv))
	class := "flashcache-claims"
	pod := func(claim string) *corev1.Pod {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: name},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: volume,
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		must(k8s.Create(ctx, pvc))
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mysql-" + claim, Namespace: name},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "mysql", Image: "mariadb"}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}
		must(k8s.Create(ctx, p))
		return p
	}
	mine, other := pod("data"), pod("other")
	waitFor(t, "the cache to see the claimed volume", func() bool {
		var got fcv1.FlashCacheVolume
		var p corev1.Pod
		return k8s.Get(ctx, types.NamespacedName{Name: volume}, &got) == nil && got.Status.Device != nil &&
			k8s.Get(ctx, client.ObjectKeyFromObject(other), &p) == nil
	})
	if err := evict(mine); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "flashcache volume "+volume) {
		t.Errorf("eviction of the claim's pod: %v, want 429 naming %s", err, volume)
	}
	if err := evict(other); err != nil {
		t.Errorf("eviction of a pod whose claim the volume does not record: %v, want it to pass", err)
	}
}
