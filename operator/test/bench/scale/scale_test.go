//go:build bench

// Package scale measures the operator at scale (issue #10): how long it takes to publish the
// PersistentVolumes of many FlashCacheVolumes across many kwok nodes, what that costs the
// operator process in CPU and memory, and how long the eviction webhook makes evictions of pods
// that use no flashcache volume wait. It reports numbers and asserts no speed: it fails only when
// something does not work (a PersistentVolume never appears, an eviction is refused, the
// operator exits).
//
// kwok nodes have no block devices, so a simulated agent writes the status a real agent writes
// for a volume it has built; the operator is the real binary, run as the end-to-end tests run it.
package scale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/testenv"
	"github.com/flashcache/flashcache/operator/internal/webhook"
	"github.com/flashcache/flashcache/operator/test/bench/results"
	"github.com/flashcache/flashcache/operator/test/e2e/cluster"
)

const (
	chartNamespace = "flashcache-system"
	// podNamespace holds the pods that are evicted: they use no flashcache volume.
	podNamespace = "bench-unrelated"
	// pvBound is how long every PersistentVolume may take to appear before the benchmark calls
	// the operator broken rather than slow; generous, as the machine may be shared.
	pvBound = 20 * time.Minute
	// clientWorkers is how many requests the benchmark itself has in flight while it creates
	// nodes, volumes and pods.
	clientWorkers = 16
)

func init() {
	// The benchmark's own clients log nothing worth reading; the components keep their logs.
	logf.SetLogger(logr.Discard())
}

// benchConfig is the benchmark's size, from the environment.
type benchConfig struct {
	volumes, nodes, evictions, evictionConcurrency int
	// claims is TestClaimsToBound's number of claims on its one node.
	claims int
	out    string
}

func configFromEnv(t *testing.T) benchConfig {
	t.Helper()
	number := func(name string, def int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive whole number", name, v)
		}
		return n
	}
	cfg := benchConfig{
		volumes:             number("BENCH_SCALE_VOLUMES", 1000),
		nodes:               number("BENCH_SCALE_NODES", 200),
		evictions:           number("BENCH_SCALE_EVICTIONS", 200),
		evictionConcurrency: number("BENCH_SCALE_EVICTION_CONCURRENCY", 16),
		claims:              number("BENCH_CLAIMS", 20),
		out:                 os.Getenv("BENCH_OUT"),
	}
	if cfg.out == "" {
		cfg.out = t.TempDir()
	}
	return cfg
}

// TestOperatorScale is the benchmark; see the package comment.
func TestOperatorScale(t *testing.T) {
	cfg := configFromEnv(t)
	binary := os.Getenv("FLASHCACHE_BIN")
	if binary == "" {
		t.Fatal("FLASHCACHE_BIN is not set: run `make bench-scale`, or set it to bin/flashcache from `make build`")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 28*time.Minute)
	defer cancel()
	res := results.Scale{
		// The command that ran the benchmark, as `make bench` passes it, for the report to print.
		Command: os.Getenv("BENCH_COMMAND"),
		Volumes: cfg.volumes, Nodes: cfg.nodes, Evictions: cfg.evictions, EvictionConcurrency: cfg.evictionConcurrency,
		Simulation: simulationSentence, StartedAt: time.Now().UTC(), MachineCPUs: runtime.NumCPU(), MachineLoadAverageAtStart: loadAverage(),
		SimulatedAgentWorkers: clientWorkers, SimulatedAgentServiceAccount: chartNamespace + "/flashcache-agent",
		OperatorServiceAccount: chartNamespace + "/flashcache-operator",
	}
	if out, err := runOutput(binary, "version"); err == nil {
		res.FlashcacheVersion = strings.TrimSpace(out)
	}

	dir := cluster.TestDir(t)
	c, version := chartOnACluster(t, ctx, dir)
	res.KubernetesVersion = version
	op := c.StartOperator(t, ctx, cluster.OperatorOptions{Binary: binary, Namespace: chartNamespace, Dir: dir, Metrics: true})
	t.Logf("operator up (pid %d, webhook :%d, metrics %s)", op.Pid, op.WebhookPort, op.MetricsURL)

	// The benchmark's own clients are not rate-limited, so that what waits is the operator.
	admin := rest.CopyConfig(c.Config)
	admin.QPS, admin.Burst = -1, -1
	clientset, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	k8s, err := client.New(admin, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}

	began := time.Now()
	nodes := make([]string, cfg.nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("kwok-%03d", i)
	}
	if err := parallel(ctx, len(nodes), clientWorkers, func(ctx context.Context, i int) error {
		_, err := c.AddNode(ctx, nodes[i], nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kwok nodes Ready in %s", len(nodes), since(began))

	agentCfg, err := serviceAccountConfig(ctx, c, "flashcache-agent")
	if err != nil {
		t.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone, err := startSimulatedAgent(agentCtx, agentCfg, clientWorkers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("simulated agent: %v", err)
		}
	})

	measureVolumes(t, ctx, cfg, c, clientset, k8s, op, nodes, &res)
	measureEvictions(t, ctx, cfg, c, clientset, op, nodes, &res)
	if err := op.Exited(); err != nil {
		t.Fatal(err)
	}

	if err := writeResult(cfg.out, &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("results in %s\n%s", filepath.Join(cfg.out, "scale.json"), table(&res))
}

// measureVolumes creates the volumes, round robin over the nodes, and times the operator until
// every one has its PersistentVolume, then until every one is Ready.
func measureVolumes(t *testing.T, ctx context.Context, cfg benchConfig, c *cluster.Cluster, clientset kubernetes.Interface,
	k8s client.Client, op *cluster.Operator, nodes []string, res *results.Scale) {
	t.Helper()
	// Watched, not polled, so the time each PersistentVolume appeared is when the benchmark was
	// told, and the benchmark's own load on the API server stays small.
	var mu sync.Mutex
	pvSeen := map[string]time.Time{}
	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = fcv1.LabelVolume }))
	pvInformer := factory.Core().V1().PersistentVolumes().Informer()
	if _, err := pvInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if pv, ok := obj.(*corev1.PersistentVolume); ok {
			mu.Lock()
			if _, seen := pvSeen[pv.Name]; !seen {
				pvSeen[pv.Name] = time.Now()
			}
			mu.Unlock()
		}
	}}); err != nil {
		t.Fatalf("watching PersistentVolumes: %v", err)
	}
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	factory.Start(informerCtx.Done())
	factory.WaitForCacheSync(informerCtx.Done())

	before, err := readProc(op.Pid)
	if err != nil {
		t.Fatal(err)
	}
	res.OperatorCPUSecondsBeforeStart = before.cpuSeconds
	res.OperatorStartupRSSBytes = before.peakRSS

	names := make([]string, cfg.volumes)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%04d", i)
	}
	start := time.Now()
	if err := parallel(ctx, len(names), clientWorkers, func(ctx context.Context, i int) error {
		node := nodes[i%len(nodes)]
		fcv := &fcv1.FlashCacheVolume{
			ObjectMeta: metav1.ObjectMeta{Name: names[i]},
			Spec: fcv1.FlashCacheVolumeSpec{
				NodeName:      node,
				CacheDevice:   &fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-sim-" + names[i]},
				BackingDevice: &fcv1.BackingDeviceSpec{Path: "/dev/disk/by-id/ata-sim-" + names[i]},
			},
		}
		if err := k8s.Create(ctx, fcv); err != nil {
			return fmt.Errorf("creating FlashCacheVolume %s: %w", names[i], err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res.CreateVolumesSeconds = time.Since(start).Seconds()
	t.Logf("%d FlashCacheVolumes created in %s", len(names), since(start))

	progress := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, pvBound, true, func(ctx context.Context) (bool, error) {
		if err := op.Exited(); err != nil {
			return false, err
		}
		mu.Lock()
		n := len(pvSeen)
		mu.Unlock()
		if time.Since(progress) > 15*time.Second {
			t.Logf("%d of %d PersistentVolumes after %s", n, len(names), since(start))
			progress = time.Now()
		}
		return n >= len(names), nil
	})
	if err != nil {
		mu.Lock()
		n := len(pvSeen)
		mu.Unlock()
		t.Fatalf("%d of %d PersistentVolumes after %s: %v", n, len(names), since(start), err)
	}
	mu.Lock()
	var times []time.Duration
	for _, at := range pvSeen {
		times = append(times, at.Sub(start))
	}
	mu.Unlock()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	res.TimeToFirstPVSeconds = times[0].Seconds()
	res.TimeToHalfPVsSeconds = times[(len(times)-1)/2].Seconds()
	res.TimeToAllPVsSeconds = times[len(times)-1].Seconds()

	after, err := readProc(op.Pid)
	if err != nil {
		t.Fatal(err)
	}
	res.OperatorCPUSeconds = after.cpuSeconds - before.cpuSeconds
	res.OperatorCPUSecondsNote = "utime+stime of the operator process from before the first FlashCacheVolume was created until the last PersistentVolume appeared"
	res.OperatorRSSAfterPVsBytes = after.rss
	t.Logf("every PersistentVolume after %.1f s; operator CPU %.2f s", res.TimeToAllPVsSeconds, res.OperatorCPUSeconds)

	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, pvBound, true, func(ctx context.Context) (bool, error) {
		if err := op.Exited(); err != nil {
			return false, err
		}
		var list fcv1.FlashCacheVolumeList
		if err := k8s.List(ctx, &list); err != nil {
			return false, nil
		}
		ready := 0
		for _, v := range list.Items {
			if v.Status.Phase == fcv1.PhaseReady {
				ready++
			}
		}
		return ready >= len(names), nil
	})
	if err != nil {
		t.Fatalf("not every FlashCacheVolume Ready after %s: %v", since(start), err)
	}
	res.TimeToAllReadySeconds = time.Since(start).Seconds()
}

// measureEvictions creates pods that use no flashcache volume on the kwok nodes, waits until
// kwok runs them all, then evicts them in a burst and times each eviction as its client sees it.
func measureEvictions(t *testing.T, ctx context.Context, cfg benchConfig, c *cluster.Cluster, clientset kubernetes.Interface,
	op *cluster.Operator, nodes []string, res *results.Scale) {
	t.Helper()
	if _, err := clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", podNamespace, err)
	}
	// The ServiceAccount admission plugin refuses pods until the namespace's "default" account exists.
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := clientset.CoreV1().ServiceAccounts(podNamespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no default ServiceAccount in %s: %v", podNamespace, err)
	}
	pods := make([]string, cfg.evictions)
	for i := range pods {
		pods[i] = fmt.Sprintf("unrelated-%04d", i)
	}
	res.UnrelatedPodsPerNodeAtMost = (len(pods) + len(nodes) - 1) / len(nodes)
	if err := parallel(ctx, len(pods), clientWorkers, func(ctx context.Context, i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pods[i], Labels: map[string]string{"app": "unrelated"}},
			Spec: corev1.PodSpec{
				// Placed directly: what is measured is the webhook, not the scheduler.
				NodeName:   nodes[i%len(nodes)],
				Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/unrelated:1"}},
			},
		}
		if _, err := clientset.CoreV1().Pods(podNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", pods[i], err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := clientset.CoreV1().Pods(podNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running >= len(pods), nil
	}); err != nil {
		t.Fatalf("kwok did not run every unrelated pod: %v", err)
	}
	// The operator's pod cache must have them too, or the webhook admits them without looking;
	// a few seconds is plenty for a watch event.
	time.Sleep(3 * time.Second)

	apiHTTP, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		t.Fatalf("API server metrics client: %v", err)
	}
	apiMetricsURL := strings.TrimSuffix(c.Config.Host, "/") + "/metrics"
	// A dry run goes through admission, the webhook included, and writes nothing: the difference
	// to the real burst is what storing the eviction costs, not the webhook.
	dryRun, _ := evictAll(t, ctx, clientset, pods, cfg.evictionConcurrency, true)
	res.DryRunEvictionLatencyMs = summarize(dryRun)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return webhookRequests(ctx, op.MetricsURL) >= float64(len(pods)), nil
	}); err != nil {
		t.Logf("the operator's metrics do not show every dry-run eviction: %v", err)
	}
	opBefore, opErr := scrape(ctx, http.DefaultClient, op.MetricsURL)
	apiBefore, apiErr := scrape(ctx, apiHTTP, apiMetricsURL)
	cpuBefore, err := readProc(op.Pid)
	if err != nil {
		t.Fatal(err)
	}

	latencies, burst := evictAll(t, ctx, clientset, pods, cfg.evictionConcurrency, false)
	res.EvictionBurstSeconds = burst.Seconds()
	cpuAfter, err := readProc(op.Pid)
	if err != nil {
		t.Fatal(err)
	}
	res.OperatorCPUSecondsEvictions = cpuAfter.cpuSeconds - cpuBefore.cpuSeconds
	res.OperatorPeakRSSBytes = cpuAfter.peakRSS
	res.OperatorPeakRSSNote = "VmHWM of the operator process at the end of the run: its resident high-water mark over its whole life"

	res.EvictionLatencyMs = summarize(latencies)
	res.DryRunEvictionLatencyNote = "client side, the same pods evicted with dryRun=All first, same concurrency: admission and the webhook, no storage"
	res.EvictionLatencyNote = fmt.Sprintf("client side: each eviction call (POST pods/eviction) from send to answer, %d in flight, "+
		"as a drain waits for it; includes the API server's admission (the webhook call), the eviction and the deletion it makes", cfg.evictionConcurrency)

	wantHook := map[string]string{"webhook": webhook.Path}
	opAfter, opErr2 := scrape(ctx, http.DefaultClient, op.MetricsURL)
	if err := errors.Join(opErr, opErr2); err != nil {
		res.WebhookServerLatencyNote = "not available: " + err.Error()
	} else if d, err := deltaOf(findHistogram(opBefore, "controller_runtime_webhook_latency_seconds", wantHook),
		findHistogram(opAfter, "controller_runtime_webhook_latency_seconds", wantHook)); err != nil {
		res.WebhookServerLatencyNote = "not available: " + err.Error()
	} else {
		s := d.summaryMs()
		res.WebhookServerLatencyMs = &s
		kind := "native (exponential, ~9 % wide) buckets"
		if !d.native {
			kind = "classic buckets with upper bounds (ms) " + d.bounds()
		}
		res.WebhookServerLatencyNote = "server side, the operator's own: controller_runtime_webhook_latency_seconds{webhook=\"" + webhook.Path +
			"\"}, from decoding the AdmissionReview to writing the answer (no TLS, no network); p50/p99 interpolated in its " + kind + "; mean exact"
	}

	wantAPI := map[string]string{"name": "eviction.flashcache.io", "type": "validating"}
	apiAfter, apiErr2 := scrape(ctx, apiHTTP, apiMetricsURL)
	if err := errors.Join(apiErr, apiErr2); err != nil {
		res.APIServerWebhookLatencyNote = "not available: " + err.Error()
	} else if d, err := deltaOf(findHistogram(apiBefore, "apiserver_admission_webhook_admission_duration_seconds", wantAPI),
		findHistogram(apiAfter, "apiserver_admission_webhook_admission_duration_seconds", wantAPI)); err != nil {
		res.APIServerWebhookLatencyNote = "not available: " + err.Error()
	} else {
		s := d.summaryMs()
		res.APIServerWebhookLatencyMs = &s
		res.APIServerWebhookLatencyNote = "the API server's view of the webhook call (TLS, HTTP, the operator's handling): " +
			"apiserver_admission_webhook_admission_duration_seconds{name=\"eviction.flashcache.io\"}; mean exact, p50 and p99 " +
			"are the upper bounds of the buckets they fall in (the buckets that saw requests end at, ms: " + d.bounds() + ")"
	}
}

// evictAll evicts every pod, concurrency at a time, timing each call; any refusal fails t:
// none of these pods uses a flashcache volume. It returns the latencies and the burst's length.
func evictAll(t *testing.T, ctx context.Context, clientset kubernetes.Interface, pods []string, concurrency int, dryRun bool) ([]time.Duration, time.Duration) {
	t.Helper()
	latencies := make([]time.Duration, len(pods))
	var refused atomic.Int32
	var refusals sync.Map
	var opts metav1.DeleteOptions
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	burst := time.Now()
	err := parallel(ctx, len(pods), concurrency, func(ctx context.Context, i int) error {
		eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods[i], Namespace: podNamespace}, DeleteOptions: &opts}
		began := time.Now()
		err := clientset.CoreV1().Pods(podNamespace).EvictV1(ctx, eviction)
		latencies[i] = time.Since(began)
		if err != nil {
			refused.Add(1)
			refusals.Store(pods[i], err.Error())
		}
		return nil
	})
	took := time.Since(burst)
	if err != nil {
		t.Fatal(err)
	}
	if n := refused.Load(); n > 0 {
		var some []string
		refusals.Range(func(k, v any) bool { some = append(some, fmt.Sprintf("%s: %s", k, v)); return len(some) < 5 })
		t.Fatalf("%d evictions (dry run %v) of pods that use no flashcache volume were refused, e.g.:\n%s", n, dryRun, strings.Join(some, "\n"))
	}
	return latencies, took
}

func summarize(latencies []time.Duration) results.LatencyMs {
	sorted := append([]time.Duration(nil), latencies...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return results.LatencyMs{
		P50: ms(percentile(sorted, 0.50)), P99: ms(percentile(sorted, 0.99)), Max: ms(sorted[len(sorted)-1]),
		Mean: ms(mean(sorted)), Count: uint64(len(sorted)),
	}
}

// webhookRequests is how many admission requests the operator's webhook has answered, or -1.
func webhookRequests(ctx context.Context, url string) float64 {
	families, err := scrape(ctx, http.DefaultClient, url)
	if err != nil {
		return -1
	}
	h := findHistogram(families, "controller_runtime_webhook_latency_seconds", map[string]string{"webhook": webhook.Path})
	if h == nil {
		return -1
	}
	return float64(h.GetSampleCount())
}

// parallel runs f for 0..n-1 with at most workers at once, and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		// Ours is cancelled only with an error: this is the caller's deadline.
		return fmt.Errorf("stopped before the end: %w", ctx.Err())
	}
	return first
}

// chartOnACluster starts the benchmark's cluster in dir and installs the chart with helmArgs;
// it returns the cluster and its Kubernetes version.
func chartOnACluster(t *testing.T, ctx context.Context, dir string, helmArgs ...string) (*cluster.Cluster, string) {
	t.Helper()
	c := cluster.ForTest(t, cluster.Options{Dir: filepath.Join(dir, "cluster")})
	version, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("asking the API server its version: %v", err)
	}
	args := append([]string{"install", "flashcache", ".", "--namespace", chartNamespace, "--create-namespace"}, helmArgs...)
	if _, err := c.Helm(ctx, args...); err != nil {
		t.Fatal(err)
	}
	return c, version.GitVersion
}

// serviceAccountConfig is a client configuration with a token of the chart's ServiceAccount
// name, so the simulated agent has exactly the real agent's RBAC.
func serviceAccountConfig(ctx context.Context, c *cluster.Cluster, name string) (*rest.Config, error) {
	raw, err := c.ServiceAccountKubeconfig(ctx, chartNamespace, name, "", 2*time.Hour)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s: %w", name, err)
	}
	// It stands for many agents, each with its own client: no shared client-side rate limit.
	cfg.QPS, cfg.Burst = -1, -1
	return cfg, nil
}

// percentile is the nearest-rank q-quantile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func ms(d time.Duration) float64 { return round(float64(d) / float64(time.Millisecond)) }

// round keeps three decimals: the numbers are measurements, not exact.
func round(f float64) float64 { return math.Round(f*1000) / 1000 }

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

func writeResult(dir string, res *results.Scale) error {
	for _, f := range []*float64{&res.TimeToAllPVsSeconds, &res.OperatorCPUSeconds, &res.CreateVolumesSeconds,
		&res.TimeToFirstPVSeconds, &res.TimeToHalfPVsSeconds, &res.TimeToAllReadySeconds, &res.OperatorCPUSecondsEvictions,
		&res.EvictionBurstSeconds, &res.OperatorCPUSecondsBeforeStart} {
		*f = round(*f)
	}
	for _, s := range []*results.LatencyMs{res.WebhookServerLatencyMs, res.APIServerWebhookLatencyMs} {
		if s != nil {
			s.P50, s.P99, s.Mean = round(s.P50), round(s.P99), round(s.Mean)
		}
	}
	return results.Write(dir, results.ScaleFile, res)
}

// table is the human view of the result.
func table(res *results.Scale) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(w, "  %s\t%s\n", k, v) }
	row("volumes / nodes", fmt.Sprintf("%d / %d (kwok), Kubernetes %s, %d CPUs, load at start %s", res.Volumes, res.Nodes, res.KubernetesVersion, res.MachineCPUs, res.MachineLoadAverageAtStart))
	row("agent", res.Simulation)
	row("creating the volumes", fmt.Sprintf("%.1f s (the benchmark's %d parallel creates)", res.CreateVolumesSeconds, clientWorkers))
	row("time to first / half / all PVs", fmt.Sprintf("%.1f / %.1f / %.1f s from the first create", res.TimeToFirstPVSeconds, res.TimeToHalfPVsSeconds, res.TimeToAllPVsSeconds))
	row("time to all volumes Ready", fmt.Sprintf("%.1f s", res.TimeToAllReadySeconds))
	row("operator CPU (volumes)", fmt.Sprintf("%.2f s user+system", res.OperatorCPUSeconds))
	row("operator CPU (evictions)", fmt.Sprintf("%.2f s user+system", res.OperatorCPUSecondsEvictions))
	row("operator RSS", fmt.Sprintf("peak (VmHWM) %s; %s after the PVs; peak before the volumes %s", mib(res.OperatorPeakRSSBytes), mib(res.OperatorRSSAfterPVsBytes), mib(res.OperatorStartupRSSBytes)))
	row("eviction, client side", fmt.Sprintf("p50 %.1f ms, p99 %.1f ms, max %.1f ms, mean %.1f ms (%d evictions, %d in flight, burst %.1f s)",
		res.EvictionLatencyMs.P50, res.EvictionLatencyMs.P99, res.EvictionLatencyMs.Max, res.EvictionLatencyMs.Mean, res.Evictions, res.EvictionConcurrency, res.EvictionBurstSeconds))
	row("eviction, dry run, client side", fmt.Sprintf("p50 %.1f ms, p99 %.1f ms, max %.1f ms (admission and webhook, nothing stored)",
		res.DryRunEvictionLatencyMs.P50, res.DryRunEvictionLatencyMs.P99, res.DryRunEvictionLatencyMs.Max))
	if s := res.WebhookServerLatencyMs; s != nil {
		row("webhook, operator side", fmt.Sprintf("p50 %.3f ms, p99 %.3f ms, mean %.3f ms (%d requests; controller_runtime_webhook_latency_seconds)", s.P50, s.P99, s.Mean, s.Count))
	} else {
		row("webhook, operator side", res.WebhookServerLatencyNote)
	}
	if s := res.APIServerWebhookLatencyMs; s != nil {
		row("webhook, API server side", fmt.Sprintf("mean %.2f ms, p50 <= %g ms, p99 <= %g ms (bucket bounds; apiserver_admission_webhook_admission_duration_seconds)", s.Mean, s.P50, s.P99))
	} else {
		row("webhook, API server side", res.APIServerWebhookLatencyNote)
	}
	_ = w.Flush()
	return b.String()
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func runOutput(binary string, args ...string) (string, error) {
	out, err := exec.Command(binary, args...).Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", binary, strings.Join(args, " "), err)
	}
	return string(out), nil
}

func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
