//go:build bench

package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/csi"
	"github.com/flashcache/flashcache/operator/internal/testenv"
	"github.com/flashcache/flashcache/operator/test/bench/results"
	"github.com/flashcache/flashcache/operator/test/e2e/cluster"
)

const (
	claimsNode         = "kwok-claims"
	claimsStorageClass = "flashcache-claims"
	claimSize          = "1Gi"
	// claimsSimulation says what of the path from claim to Bound is not the real thing.
	claimsSimulation = "the node is a kwok node with no disks, so the benchmark does what its kubelet and agent would: " +
		"it writes the node's CSINode entry and topology label (the kubelet's, at the node plugin's registration) and " +
		"the pool's Ready status and capacity (the agent's, once it built the pool); the volumes are never built"
)

// TestClaimsToBound times claims from creation to Bound on one node with one FlashCachePool,
// through the parts that bind a claim: kube-scheduler (WaitForFirstConsumer and the
// CSIStorageCapacity it checks), the external-provisioner sidecar built from the Go module proxy
// (hack/build-csi-sidecars.sh) with the chart's arguments and the operator's ServiceAccount, the
// operator's CSI controller, and kube-controller-manager's binder. It writes claims.json.
func TestClaimsToBound(t *testing.T) {
	cfg := configFromEnv(t)
	binary, sidecars := os.Getenv("FLASHCACHE_BIN"), cluster.SidecarsFromEnv(t)
	if binary == "" {
		t.Fatal("FLASHCACHE_BIN is not set: run `make bench-scale`")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	res := results.Claims{Command: os.Getenv("BENCH_COMMAND"), Claims: cfg.claims, ClaimSize: claimSize, Node: claimsNode,
		Simulation: claimsSimulation, StartedAt: time.Now().UTC(), MachineCPUs: runtime.NumCPU(), MachineLoadAverageAtStart: loadAverage()}
	if out, err := runOutput(binary, "version"); err == nil {
		res.FlashcacheVersion = strings.TrimSpace(out)
	}
	if out, err := runOutput(filepath.Join(sidecars, "csi-provisioner"), "--version"); err == nil {
		res.ProvisionerVersion = strings.TrimSpace(out)
	}

	dir := cluster.TestDir(t)
	c, version := chartOnACluster(t, ctx, dir, "--set", "csi.enabled=true")
	res.KubernetesVersion = version
	socket := filepath.Join(dir, "csi.sock")
	op := c.StartOperator(t, ctx, cluster.OperatorOptions{Binary: binary, Namespace: chartNamespace, Dir: dir, CSIEndpoint: "unix://" + socket})
	admin := rest.CopyConfig(c.Config)
	admin.QPS, admin.Burst = -1, -1
	clientset, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(admin, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := c.AddNode(ctx, claimsNode, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterCSINode(ctx, claimsNode, csi.DriverName, csi.TopologyNodeKey); err != nil {
		t.Fatal(err)
	}
	size := resource.MustParse(claimSize)
	// Room for every claim twice over: the benchmark times binding, not a full pool.
	poolBytes := int64(cfg.claims+4) * size.Value() * 2
	buildPool(t, ctx, c, k8s, poolBytes)
	c.StartCSISidecar(t, ctx, sidecars, "csi-provisioner", chartNamespace, socket, dir)
	waitForCapacity(t, ctx, clientset)

	res.BoundMs = summarize(measureClaims(t, ctx, cfg, clientset, &res))
	var volumes fcv1.FlashCacheVolumeList
	if err := k8s.List(ctx, &volumes); err != nil {
		t.Fatal(err)
	}
	carved := 0
	for _, v := range volumes.Items {
		if v.Spec.Pool != nil && v.Spec.Pool.Name == "claims" && v.Spec.NodeName == claimsNode {
			carved++
		}
	}
	if carved != cfg.claims {
		t.Errorf("%d FlashCacheVolumes carved from pool claims on %s for %d claims", carved, claimsNode, cfg.claims)
	}
	if err := op.Exited(); err != nil {
		t.Fatal(err)
	}
	if err := results.Write(cfg.out, results.ClaimsFile, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("results in %s\n%s", filepath.Join(cfg.out, results.ClaimsFile), claimsTable(&res))
}

// buildPool creates the node's FlashCachePool and reports it Ready as its agent would, with the
// chart's agent ServiceAccount.
func buildPool(t *testing.T, ctx context.Context, c *cluster.Cluster, k8s client.Client, bytes int64) {
	t.Helper()
	pool := &fcv1.FlashCachePool{ObjectMeta: metav1.ObjectMeta{Name: "claims"}, Spec: fcv1.FlashCachePoolSpec{
		NodeName:       claimsNode,
		CacheDevice:    fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-claims"},
		BackingDevices: []fcv1.PoolBackingDevice{{Path: "/dev/disk/by-id/scsi-claims"}},
	}}
	if err := k8s.Create(ctx, pool); err != nil {
		t.Fatalf("FlashCachePool: %v", err)
	}
	agentCfg, err := serviceAccountConfig(ctx, c, "flashcache-agent")
	if err != nil {
		t.Fatal(err)
	}
	agent, err := client.New(agentCfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	capacity, cacheCapacity := resource.NewQuantity(bytes, resource.BinarySI), resource.NewQuantity(bytes/10, resource.BinarySI)
	pool.Status = fcv1.FlashCachePoolStatus{Phase: fcv1.PoolPhaseReady, ObservedGeneration: pool.Generation, CacheSetUUID: "00000000-0000-4000-8000-000000000001",
		VolumeGroup: "fcp-claims", CacheCapacity: cacheCapacity, Capacity: capacity, Allocatable: capacity}
	if err := agent.Status().Update(ctx, pool); err != nil {
		t.Fatalf("the pool's status, as the agent: %v", err)
	}
}

// waitForCapacity waits until the provisioner published the node's capacity, which the
// scheduler checks before it picks the node for a claim.
func waitForCapacity(t *testing.T, ctx context.Context, clientset kubernetes.Interface) {
	t.Helper()
	objects := 0
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := clientset.StorageV1().CSIStorageCapacities(chartNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		objects = len(list.Items)
		return slices.ContainsFunc(list.Items, func(c storagev1.CSIStorageCapacity) bool {
			return c.StorageClassName == claimsStorageClass && c.Capacity != nil && c.Capacity.Sign() > 0 &&
				c.NodeTopology != nil && c.NodeTopology.MatchLabels[csi.TopologyNodeKey] == claimsNode
		}), nil
	}); err != nil {
		t.Fatalf("no CSIStorageCapacity for %s on %s after 3 minutes (%d objects): %v", claimsStorageClass, claimsNode, objects, err)
	}
}

// measureClaims creates the claims, each with a pod on the node, all at once, and times each
// claim from its creation to Bound as a watch reports it.
func measureClaims(t *testing.T, ctx context.Context, cfg benchConfig, clientset kubernetes.Interface, res *results.Claims) []time.Duration {
	t.Helper()
	var mu sync.Mutex
	created, boundAt := map[string]time.Time{}, map[string]time.Time{}
	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace("default"))
	informer := factory.Core().V1().PersistentVolumeClaims().Informer()
	seen := func(obj any) {
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && pvc.Status.Phase == corev1.ClaimBound {
			mu.Lock()
			if _, ok := boundAt[pvc.Name]; !ok {
				boundAt[pvc.Name] = time.Now()
			}
			mu.Unlock()
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }}); err != nil {
		t.Fatal(err)
	}
	watching, stopWatching := context.WithCancel(ctx)
	factory.Start(watching.Done())
	defer factory.Shutdown()
	defer stopWatching() // first: Shutdown waits for the informer to stop
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("claim informer did not sync")
	}

	sc := claimsStorageClass
	began := time.Now()
	if err := parallel(ctx, cfg.claims, clientWorkers, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("claim-%03d", i)
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &sc,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(claimSize)}},
		}}
		start := time.Now()
		if _, err := clientset.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("claim %s: %w", name, err)
		}
		mu.Lock()
		created[name] = start
		mu.Unlock()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: claimsNode},
			Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:   []corev1.Container{{Name: "db", Image: "mysql", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/mysql"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		}}
		_, err := clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	boundCount := func() int { mu.Lock(); defer mu.Unlock(); return len(boundAt) }
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		return boundCount() == cfg.claims, nil
	}); err != nil {
		t.Fatalf("%d of %d claims Bound after 10 minutes: %v", boundCount(), cfg.claims, err)
	}
	res.AllBoundSeconds = round(time.Since(began).Seconds())
	mu.Lock()
	defer mu.Unlock()
	var bound []time.Duration
	for name, at := range boundAt {
		bound = append(bound, at.Sub(created[name]))
	}
	return bound
}

func claimsTable(res *results.Claims) string {
	return fmt.Sprintf("claims: %d of %s on %s; claim to Bound p50 %.0f ms, p99 %.0f ms, max %.0f ms; all Bound in %.1f s",
		res.Claims, res.ClaimSize, res.Node, res.BoundMs.P50, res.BoundMs.P99, res.BoundMs.Max, res.AllBoundSeconds)
}
