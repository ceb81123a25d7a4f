//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/testenv"
	"github.com/flashcache/flashcache/operator/test/e2e/cluster"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

const (
	volumeName = "mysql-data"
	// dataSpan is the region of the volume the test dirties and then compares on the backing disk.
	// Small, so that its random 4 KiB writes land close together: a checksum read of the span
	// costs the throttled HDD one request per gap between cached blocks (bcache caches one miss
	// per read request), and over 256 MiB the gaps made each checksum 38-63 s. Over 32 MiB the
	// 24 MiB of DirtyDataOnTheCache still leave about 17 MiB of scattered dirty blocks, half a
	// minute of writeback at 150 IOPS.
	dataSpan = 32 << 20
	// unwrittenRegion is where HitRatioAndMetricsAreWhatTheKernelCounts reads: past dataSpan and
	// the 256 MiB the flush-period test's busy writer scatters its blocks over, before its marker.
	unwrittenRegion = 384 << 20
	// requestGrace is the agent's --flush-request-grace: short, so uncordon restores writeback
	// within the test.
	requestGrace = 15 * time.Second
	// heartbeatInterval is the agent's --heartbeat-interval: short, so that a stopped agent is
	// counted silent after 8 s rather than 40.
	heartbeatInterval = 2 * time.Second
	// chartNamespace is where the test installs the chart.
	chartNamespace = "flashcache-system"
)

func init() {
	// The test's own clients log nothing worth reading; the components keep their logs.
	logf.SetLogger(logr.Discard())
}

// TestDrainWaitsForTheFlush is the whole drain story: the operator and its eviction webhook on
// the host, the real agent inside the VM on real bcache, kwok as the VM's kubelet.
func TestDrainWaitsForTheFlush(t *testing.T) {
	image, binary := vmharness.ImageFromEnv(t), vmharness.BinaryFromEnv(t)
	// 21 minutes on a two-core host shared with two other VMs: room for a slower host.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	dir := cluster.TestDir(t)
	nvme := vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-e2e-cache", Size: 1 << 30}
	// A volatile write cache that honours flushes, as a real 7200 rpm disk has: QEMU's plain
	// emulated disk completes flushes at the host SSD's speed, which the durability check rightly
	// calls Unsafe.
	hdd := vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-e2e-backing", Size: 2 << 30, Cache: vmharness.CacheVolatileHonest}

	// A second volume whose SSD the test pulls out, and the SSD that replaces it.
	nvmeLoss := vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-e2e-cache-loss", Size: 512 << 20}
	nvmeNew := vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-e2e-cache-new", Size: 512 << 20}
	hddLoss := vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-e2e-backing-loss", Size: 512 << 20}

	vm, c := clusterAndGuest(t, ctx, dir, vmharness.Options{Image: image, Disks: []vmharness.Disk{nvme, hdd, nvmeLoss, nvmeNew, hddLoss}})
	kubectl, err := c.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(c.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	// The chart installs the CRD, the RBAC, the ServiceAccounts and the webhook configuration.
	// The operator and the agent run outside pods (on the host, in the VM), each with a token of
	// its chart ServiceAccount: a verb missing from the chart's RBAC fails this test. (No
	// Deployment or DaemonSet controller runs, so the chart's own pods never exist.)
	if _, err := c.Helm(ctx, "install", "flashcache", ".", "--namespace", chartNamespace, "--create-namespace"); err != nil {
		t.Fatal(err)
	}
	// The operator serves the CSI controller too, for csi-sanity (CSISanityOnAPool).
	controllerSocket := filepath.Join(dir, "csi-controller.sock")
	operator := c.StartOperator(t, ctx, cluster.OperatorOptions{Binary: binary, Namespace: chartNamespace, Dir: dir, CSIEndpoint: "unix://" + controllerSocket})
	webhookPort := operator.WebhookPort

	sh := func(t *testing.T, cmd string) string { t.Helper(); return guest(t, ctx, vm, cmd) }
	if err := vm.CopyFile(ctx, binary, "/usr/local/bin/flashcache", 0o755); err != nil {
		t.Fatal(err)
	}
	agentConfig, err := c.ServiceAccountKubeconfig(ctx, chartNamespace, "flashcache-agent", vmharness.HostAddr, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(dir, "agent-kubeconfig")
	if err := os.WriteFile(local, agentConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := vm.CopyFile(ctx, local, "/root/agent.kubeconfig", 0o600); err != nil {
		t.Fatal(err)
	}
	startAgent := func(t *testing.T) {
		t.Helper()
		sh(t, fmt.Sprintf("setsid nohup flashcache agent --kubeconfig /root/agent.kubeconfig --node-name %s "+
			"--flush-request-grace %s --heartbeat-namespace %s --heartbeat-interval %s "+
			"--csi-endpoint unix://%s --kubelet-registration-socket %s >>/root/agent.log 2>&1 </dev/null &",
			nodeName, requestGrace, chartNamespace, heartbeatInterval, agentCSISocket, agentRegistrationSocket))
	}
	t.Cleanup(func() {
		if !t.Failed() || vm == nil {
			return
		}
		// Whole, beside the operator's and the cluster's logs the failed test keeps; its end here.
		out, err := vm.Output(context.Background(), "cat /root/agent.log")
		if err != nil {
			return
		}
		if err := os.WriteFile(filepath.Join(dir, "agent.log"), []byte(out), 0o644); err != nil {
			t.Log(err)
		}
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		t.Logf("agent log (tail; whole in %s):\n%s", filepath.Join(dir, "agent.log"), strings.Join(lines[max(0, len(lines)-60):], "\n"))
	})
	if _, err := c.AddNode(ctx, nodeName, nil); err != nil {
		t.Fatal(err)
	}
	startAgent(t)
	t.Logf("operator (webhook on :%d), agent and node %s up", webhookPort, nodeName)

	fcv := fmt.Sprintf(`apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: %s}
spec:
  nodeName: %s
  cacheDevice: {path: %s}
  backingDevice: {path: %s}
  mode: writeback
  # Writeback stays at its floor below 40%% dirty, so the data written below is still on the
  # cache only when the drain starts.
  dirtyThresholdPercent: 40
  flushPeriod: 0s
  volume: {storageClassName: flashcache, createStorageClass: true}
`, volumeName, nodeName, nvme.ByID(), hdd.ByID())
	apply(t, kubectl, dir, "fcv.yaml", fcv)

	t.Run("AgentRestartMidProvisionConvergesWithoutFormattingAgain", func(t *testing.T) {
		// The first superblock on the backing disk is the volume's identity: a second format
		// would give it another UUID.
		var first string
		deadline := time.Now().Add(5 * time.Minute)
		for first == "" {
			if time.Now().After(deadline) {
				t.Fatal("no bcache superblock on the backing disk after 5 minutes")
			}
			first = strings.TrimSpace(sh(t, "bcache-super-show "+hdd.ByID()+" 2>/dev/null | awk '$1==\"dev.uuid\" {print $2}' || true"))
			time.Sleep(200 * time.Millisecond)
		}
		sh(t, "pkill -9 -x flashcache || true")
		t.Logf("agent killed right after it formatted the backing disk (uuid %s)", first)
		startAgent(t)
		got := waitVolume(t, ctx, k8s, 5*time.Minute, "Ready", func(f *fcv1.FlashCacheVolume) bool {
			return f.Status.Phase == fcv1.PhaseReady && f.Status.Device != nil
		})
		if got.Status.Device.BackingUUID != first {
			t.Errorf("backing UUID %s after the restart, %s before: the disk was formatted again", got.Status.Device.BackingUUID, first)
		}
		if got.Status.Safety == nil || got.Status.Safety.Verdict != fcv1.SafetyVerdictSafe || got.Status.Device.CacheMode != fcv1.CacheModeWriteback {
			t.Errorf("want a Safe verdict and writeback: safety %+v, device %+v", got.Status.Safety, got.Status.Device)
		}
		if got.Status.ObservedGeneration != got.Generation {
			t.Errorf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Generation)
		}
		var pv corev1.PersistentVolume
		if err := k8s.Get(ctx, types.NamespacedName{Name: got.Status.PersistentVolumeName}, &pv); err != nil {
			t.Fatalf("PersistentVolume: %v", err)
		}
		if pv.Spec.Local == nil || pv.Spec.Local.Path != "/dev/flashcache/"+volumeName {
			t.Errorf("PersistentVolume points at %+v", pv.Spec.Local)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("StatefulSetClaimBindsTheVolume", func(t *testing.T) {
		apply(t, kubectl, dir, "mysql.yaml", strings.ReplaceAll(strings.ReplaceAll(mysqlStatefulSet, "STORAGECLASS", "flashcache"), "SIZE", "1Gi"))
		eventually(t, ctx, 3*time.Minute, "pod default/mysql-0 running on vm with its claim bound", func(ctx context.Context) (*corev1.Pod, bool, error) {
			var pvc corev1.PersistentVolumeClaim
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: "default", Name: "data-mysql-0"}, &pvc); err != nil {
				return nil, false, err
			}
			var pod corev1.Pod
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: "default", Name: "mysql-0"}, &pod); err != nil {
				return nil, false, err
			}
			return &pod, pvc.Spec.VolumeName == "flashcache-"+volumeName && pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName == nodeName, nil
		})
		out, _ := kubectl.Run("get", "fcv,pv,pvc,pods", "-o", "wide")
		t.Logf("\n%s", out)
	})
	if t.Failed() {
		t.FailNow()
	}

	stateFile := "/sys/block/$(basename $(readlink -f /dev/flashcache/" + volumeName + "))/bcache/"
	var checksum, checksum2 string
	// checksumVolume is the md5 of the volume's first dataSpan bytes, read through bcache.
	checksumVolume := func(t *testing.T) string {
		t.Helper()
		return sh(t, fmt.Sprintf("dd if=/dev/flashcache/%s bs=1M count=%d iflag=direct status=none | md5sum | cut -d' ' -f1", volumeName, dataSpan>>20))
	}
	t.Run("DirtyDataOnTheCache", func(t *testing.T) {
		// Random 4 KiB writes: on a 150 IOPS disk their writeback takes tens of seconds.
		sh(t, fmt.Sprintf("fio --name=dirty --filename=/dev/flashcache/%s --rw=randwrite --bs=4k --size=%d --io_size=24M "+
			"--direct=1 --ioengine=psync --randrepeat=0 --output=/dev/null && sync", volumeName, dataSpan))
		checksum = checksumVolume(t)
		if state := sh(t, "cat "+stateFile+"state"); state != "dirty" {
			t.Fatalf("bcache state %q after writing, want dirty", state)
		}
		waitVolume(t, ctx, k8s, time.Minute, "dirty data in status", func(f *fcv1.FlashCacheVolume) bool {
			return f.Status.DirtyData != nil && f.Status.DirtyData.Value() > 1<<20
		})
		metrics := sh(t, "exec 3<>/dev/tcp/127.0.0.1/8090 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3 | grep '^flashcache_volume_dirty_bytes'")
		if !strings.Contains(metrics, `volume="`+volumeName+`"`) {
			t.Errorf("agent metrics lack the volume's dirty bytes:\n%s", metrics)
		}
		t.Logf("dirty: %s; metrics: %s", sh(t, "cat "+stateFile+"dirty_data"), metrics)
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("KubectlFlashcacheShowsTheDirtyVolumeAndWhatADrainWouldWaitFor", func(t *testing.T) {
		status := kubectlFlashcache(t, ctx, kubectl, "status", nodeName)
		row := ""
		for _, line := range strings.Split(status, "\n") {
			if strings.HasPrefix(line, volumeName+" ") {
				row = line
			}
		}
		if row == "" {
			t.Fatalf("status lists no %s", volumeName)
		}
		requireAll(t, "status's row", row, nodeName, "Ready", "writeback", "MiB", "Safe", "cache=/dev/nvme", "backing=/dev/sd")
		if strings.Contains(row, "clean") {
			t.Errorf("status calls the dirty volume clean: %s", row)
		}
		drain := kubectlFlashcache(t, ctx, kubectl, "drain-status", nodeName)
		requireAll(t, "drain-status", drain, "node "+nodeName+": schedulable; agent: alive",
			"kubectl annotate flashcachevolume "+volumeName+" flashcache.io/evict-without-flush=true")
		requireRow(t, drain, volumeName, "default/mysql-0", "waits")
	})

	t.Run("DrainWaitsUntilTheCacheIsClean", func(t *testing.T) {
		// Watch bcache from the host's clock, as the drain's output is.
		var mu sync.Mutex
		var firstClean time.Time
		sawDirty := false
		watchCtx, stopWatch := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for watchCtx.Err() == nil {
				out, err := vm.Output(watchCtx, "cat "+stateFile+"state")
				now := time.Now()
				if err == nil {
					mu.Lock()
					switch strings.TrimSpace(out) {
					case "dirty":
						sawDirty = true
					case "clean":
						if firstClean.IsZero() {
							firstClean = now
						}
					}
					mu.Unlock()
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		lines := drain(t, ctx, c, dir)
		stopWatch()
		<-watched

		var evicted time.Time
		retries := 0
		for _, l := range lines {
			t.Logf("%s  %s", l.at.Format("15:04:05.000"), l.text)
			if strings.Contains(l.text, "will retry") && strings.Contains(l.text, "flashcache volume "+volumeName) {
				retries++
			}
			if strings.Contains(l.text, "pod/mysql-0 evicted") {
				evicted = l.at
			}
		}
		if retries == 0 {
			t.Errorf("drain printed no 429 progress from the webhook")
		}
		if evicted.IsZero() {
			t.Fatalf("drain never evicted mysql-0")
		}
		mu.Lock()
		defer mu.Unlock()
		if !sawDirty {
			t.Errorf("bcache was never seen dirty during the drain: the test proved nothing")
		}
		// The watcher polls every 200 ms over SSH: it sees "clean" up to about a second late.
		if firstClean.IsZero() || evicted.Before(firstClean.Add(-time.Second)) {
			t.Errorf("evicted at %s, bcache first seen clean at %s: the eviction came before the flush finished",
				evicted.Format("15:04:05.000"), firstClean.Format("15:04:05.000"))
		}
		t.Logf("%d 429 answers; clean at %s, evicted at %s", retries, firstClean.Format("15:04:05.000"), evicted.Format("15:04:05.000"))
		if mode := sh(t, "cat "+stateFile+"cache_mode"); !strings.Contains(mode, "[writethrough]") {
			t.Errorf("cache mode after drain: %s, want held in writethrough", mode)
		}
		// Every byte written through the cache is on the backing disk itself.
		offset, err := strconv.ParseInt(sh(t, "bcache-super-show "+hdd.ByID()+" | awk '$1==\"dev.data.first_sector\" {print $2}'"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		onDisk := sh(t, fmt.Sprintf("dd if=%s bs=1M skip=%d count=%d iflag=direct,skip_bytes status=none | md5sum | cut -d' ' -f1",
			hdd.ByID(), offset*512, dataSpan>>20))
		if onDisk != checksum {
			t.Errorf("backing disk past bcache's data offset: md5 %s, through the volume before the drain: %s", onDisk, checksum)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("KubectlFlashcacheSaysEvictionsPassOnceHeldClean", func(t *testing.T) {
		drain := kubectlFlashcache(t, ctx, kubectl, "drain-status", nodeName)
		requireAll(t, "drain-status after the drain", drain, "node "+nodeName+": cordoned; agent: alive")
		requireRow(t, drain, volumeName, "-", "passes")
		if strings.Contains(drain, "waits") {
			t.Errorf("drain-status says an eviction waits on a volume held clean")
		}
	})

	t.Run("UncordonRestoresWriteback", func(t *testing.T) {
		if out, err := kubectl.Run("uncordon", nodeName); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		got := waitVolume(t, ctx, k8s, requestGrace+2*time.Minute, "writeback restored", func(f *fcv1.FlashCacheVolume) bool {
			c := meta.FindStatusCondition(f.Status.Conditions, fcv1.ConditionFlushing)
			return f.Status.Device != nil && f.Status.Device.CacheMode == fcv1.CacheModeWriteback && c != nil && c.Status == metav1.ConditionFalse
		})
		if mode := sh(t, "cat "+stateFile+"cache_mode"); !strings.Contains(mode, "[writeback]") {
			t.Errorf("kernel cache mode %s after uncordon, status says %s", mode, got.Status.Device.CacheMode)
		}
		eventually(t, ctx, 3*time.Minute, "mysql-0 running again on vm", func(ctx context.Context) (*corev1.Pod, bool, error) {
			var pod corev1.Pod
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: "default", Name: "mysql-0"}, &pod); err != nil {
				return nil, false, err
			}
			return &pod, pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName == nodeName, nil
		})
	})
	if t.Failed() {
		t.FailNow()
	}

	testFlushPassesThroughTheAgent(t, &policyBed{ctx: ctx, vm: vm, k8s: k8s, kubectl: kubectl, dir: dir, hdd: hdd, stateFile: stateFile, startAgent: startAgent})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("HitRatioAndMetricsAreWhatTheKernelCounts", func(t *testing.T) {
		// Random 4 KiB reads of a region nothing wrote, twice over the same offsets: the first
		// pass misses, the second hits what bcache cached then.
		sh(t, "echo 1 > "+stateFile+"clear_stats")
		sh(t, fmt.Sprintf("fio --name=reads --filename=/dev/flashcache/%s --rw=randread --bs=4k --offset=%d --size=8M --loops=2 "+
			"--randrepeat=1 --direct=1 --ioengine=psync --output=/dev/null", volumeName, unwrittenRegion))
		counted := func(file string) int64 {
			n, err := strconv.ParseInt(sh(t, "cat "+stateFile+"stats_total/"+file), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			return n
		}
		// bcache adds the requests it saw to stats_total on a timer (every 13.6 s in 6.1), so the
		// counts come in steps after the reads.
		var hits, misses int64
		eventually(t, ctx, time.Minute, "bcache to count hits and misses", func(context.Context) (string, bool, error) {
			hits, misses = counted("cache_hits"), counted("cache_misses")
			return fmt.Sprintf("%d hits, %d misses", hits, misses), hits > 0 && misses > 0, nil
		})
		t.Logf("after the reads: %d hits, %d misses, hit ratio %s%% (bcache)", hits, misses, sh(t, "cat "+stateFile+"stats_total/cache_hit_ratio"))
		// metric is the volume's sample of name with the labels given, as the exposition prints it.
		metric := func(ctx context.Context, name string, labels map[string]string) (string, error) {
			families, err := agentMetrics(ctx, vm)
			if err != nil {
				return "", err
			}
			want := map[string]string{"volume": volumeName}
			for k, v := range labels {
				want[k] = v
			}
			v, ok := families.value(name, want)
			if !ok {
				return "", fmt.Errorf("no %s%v in the agent's metrics", name, want)
			}
			return strconv.FormatFloat(v, 'g', -1, 64), nil
		}
		// The agent refreshes an idle volume's status every 30 s; other I/O (MariaDB) may move the
		// kernel's ratio meanwhile, so each side is read again until they agree.
		eventually(t, ctx, 2*time.Minute, "the status and the metric to show the kernel's hit ratio", func(ctx context.Context) (string, bool, error) {
			kernel := sh(t, "cat "+stateFile+"stats_total/cache_hit_ratio")
			var f fcv1.FlashCacheVolume
			if err := k8s.Get(ctx, types.NamespacedName{Name: volumeName}, &f); err != nil {
				return "", false, err
			}
			exported, err := metric(ctx, "flashcache_volume_cache_hit_ratio_percent", nil)
			if err != nil {
				return "", false, err
			}
			status := "unset"
			if f.Status.HitRatioPercent != nil {
				status = strconv.Itoa(int(*f.Status.HitRatioPercent))
			}
			seen := fmt.Sprintf("kernel %s%%, status %s%%, metric %s%%", kernel, status, exported)
			return seen, status == kernel && exported == kernel, nil
		})
		state := sh(t, "cat "+stateFile+"state")
		if got, err := metric(ctx, "flashcache_volume_state", map[string]string{"state": state}); err != nil || got != "1" {
			t.Errorf("flashcache_volume_state for bcache's %q: %q, %v; want 1", state, got, err)
		}
		// What the alert rules compare: the spec's promises and the check's verdict.
		var f fcv1.FlashCacheVolume
		if err := k8s.Get(ctx, types.NamespacedName{Name: volumeName}, &f); err != nil {
			t.Fatal(err)
		}
		for _, want := range []struct {
			name   string
			labels map[string]string
			value  string
		}{
			{"flashcache_volume_flush_period_seconds", nil, strconv.FormatFloat(f.Spec.EffectiveFlushPeriod().Seconds(), 'g', -1, 64)},
			{"flashcache_volume_max_wear_percent", nil, "90"},
			{"flashcache_volume_safety_verdict", map[string]string{"verdict": "Safe"}, "1"},
			{"flashcache_volume_safety_verdict", map[string]string{"verdict": "Unknown"}, "0"},
			{"flashcache_volume_writeback_refused", nil, "0"},
		} {
			if got, err := metric(ctx, want.name, want.labels); err != nil || got != want.value {
				t.Errorf("%s%v: %q, %v; want %s", want.name, want.labels, got, err, want.value)
			}
		}
	})

	// The node's only volume, refreshed every 10 or 30 s: each refresh observes its disks once
	// (the agent's status read is the apply's first observation), not twice. Under emulation an
	// observation is a second or more of CPU, and a node refreshes every volume all day.
	t.Run("ARefreshObservesTheVolumeOnce", func(t *testing.T) {
		sh(t, "cat > /root/status.yaml <<'EOF'\n"+fcv+"EOF")
		once := commandsRun(sh(t, "flashcache node status --config /root/status.yaml --volume "+volumeName+" -v 2>&1 >/dev/null"))
		if once["wipefs"] == 0 {
			t.Fatalf("flashcache node status -v ran no wipefs: %v", once)
		}
		runs := func(e exposition) float64 {
			n, _ := e.value("flashcache_engine_runs_total", map[string]string{"volume": volumeName})
			return n
		}
		commands := func(e exposition, command string) float64 {
			n, _ := e.value("flashcache_disk_commands_total", map[string]string{"command": command})
			return n
		}
		before, err := agentMetrics(ctx, vm)
		if err != nil {
			t.Fatal(err)
		}
		after := eventually(t, ctx, 3*time.Minute, "four refreshes of "+volumeName, func(ctx context.Context) (exposition, bool, error) {
			e, err := agentMetrics(ctx, vm)
			return e, err == nil && runs(e)-runs(before) >= 4, err
		})
		refreshes := runs(after) - runs(before)
		// The counts must be there to be compared: a refresh observes, and an observation runs wipefs.
		if ran := commands(after, "wipefs") - commands(before, "wipefs"); ran < float64(once["wipefs"])*(refreshes-1) {
			t.Errorf("wipefs counted %.0f times in %.0f refreshes; one observation runs it %d times", ran, refreshes, once["wipefs"])
		}
		for command, n := range once {
			ran := commands(after, command) - commands(before, command)
			t.Logf("%s: %.0f runs in %.0f refreshes; one observation runs it %d times", command, ran, refreshes, n)
			// One refresh under way at either end may be counted in part: with two observations a
			// refresh, four refreshes would show at least six, more than the five allowed.
			if ran > float64(n)*(refreshes+1) {
				t.Errorf("%s ran %.0f times in %.0f refreshes, more than one observation (%d) a refresh", command, ran, refreshes, n)
			}
		}
	})

	t.Run("AnEvictionWaitingOnAStoppedAgentNamesItAndTheWayOut", func(t *testing.T) {
		sh(t, "pkill -x flashcache; for i in $(seq 50); do pgrep -x flashcache >/dev/null || break; sleep 0.2; done")
		defer startAgent(t)
		eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "mysql-0", Namespace: "default"},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}}
		var said string
		eventually(t, ctx, time.Minute, "a 429 naming the silent agent", func(ctx context.Context) (string, bool, error) {
			err := c.Client.CoreV1().Pods("default").EvictV1(ctx, eviction)
			if !apierrors.IsTooManyRequests(err) {
				return fmt.Sprint(err), false, fmt.Errorf("the eviction of a pod on a writeback volume with its agent down: %v, want 429", err)
			}
			said = err.Error()
			return said, strings.Contains(said, "the node agent on "+nodeName+" last reported"), nil
		})
		t.Logf("the eviction's answer: %s", said)
		drain := kubectlFlashcache(t, ctx, kubectl, "drain-status", nodeName)
		requireAll(t, "drain-status with the agent stopped", drain, "agent: the node agent on "+nodeName+" last reported",
			"nothing flushes this node's volumes while it is down")
		requireRow(t, drain, volumeName, "default/mysql-0", "waits")
		for _, want := range []string{"kubectl -n " + chartNamespace + " get pods -l app.kubernetes.io/component=agent --field-selector spec.nodeName=" + nodeName,
			"kubectl annotate flashcachevolume " + volumeName + " flashcache.io/evict-without-flush=true", "docs/runbooks/agent-down.md"} {
			if !strings.Contains(said, want) {
				t.Errorf("the answer lacks %q", want)
			}
		}
	})

	t.Run("EvictionWithoutCordonFlushesToo", func(t *testing.T) {
		// The agent the last test restarted has applied the volume again: ready, and the kernel
		// in writeback, before the writes that must leave it dirty.
		eventually(t, ctx, 2*time.Minute, "the restarted agent ready and the volume in writeback", func(ctx context.Context) (string, bool, error) {
			out, _ := vm.Output(ctx, "cat "+stateFile+"cache_mode; exec 3<>/dev/tcp/127.0.0.1/8091 && printf 'GET /readyz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n1 <&3")
			return out, strings.Contains(out, "[writeback]") && strings.Contains(out, " 200 "), nil
		})
		// What an autoscaler or a descheduler does: evict, with the node still schedulable.
		sh(t, fmt.Sprintf("fio --name=dirty2 --filename=/dev/flashcache/%s --rw=randwrite --bs=4k --size=%d --io_size=8M "+
			"--direct=1 --ioengine=psync --randrepeat=0 --output=/dev/null && sync", volumeName, dataSpan))
		if state := sh(t, "cat "+stateFile+"state"); state != "dirty" {
			t.Fatalf("bcache state %q after writing, want dirty; cache_mode %s, dirty_data %s; agent log:\n%s", state,
				sh(t, "cat "+stateFile+"cache_mode"), sh(t, "cat "+stateFile+"dirty_data"), sh(t, "tail -n 30 /root/agent.log"))
		}
		checksum2 = checksumVolume(t)
		eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "mysql-0", Namespace: "default"}}
		refused := 0
		eventually(t, ctx, 5*time.Minute, "the eviction admitted", func(ctx context.Context) (string, bool, error) {
			err := c.Client.CoreV1().Pods("default").EvictV1(ctx, eviction)
			if apierrors.IsTooManyRequests(err) {
				refused++
				return err.Error(), false, nil
			}
			return "", err == nil, err
		})
		if refused == 0 {
			t.Errorf("the eviction of a pod on a dirty writeback volume was admitted at once")
		}
		if state := sh(t, "cat "+stateFile+"state"); state != "clean" {
			t.Errorf("bcache state %q once the eviction was admitted, want clean", state)
		}
		var node corev1.Node
		if err := k8s.Get(ctx, types.NamespacedName{Name: nodeName}, &node); err != nil || node.Spec.Unschedulable {
			t.Errorf("the node should have stayed schedulable: %v", err)
		}
		t.Logf("eviction refused %d times, then admitted with the cache clean", refused)
	})

	t.Run("AfterARebootTheAgentRegistersTheDeviceAgain", func(t *testing.T) {
		before := sh(t, "readlink -f /dev/flashcache/"+volumeName)
		if err := vm.Reboot(ctx); err != nil {
			t.Fatal(err)
		}
		startAgent(t)
		eventually(t, ctx, 3*time.Minute, "the stable link back and the agent ready", func(ctx context.Context) (string, bool, error) {
			out, _ := vm.Output(ctx, "readlink -f /dev/flashcache/"+volumeName+"; "+
				"exec 3<>/dev/tcp/127.0.0.1/8091 && printf 'GET /readyz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n1 <&3")
			return out, strings.Contains(out, "/dev/bcache") && strings.Contains(out, " 200 "), nil
		})
		got := waitVolume(t, ctx, k8s, time.Minute, "Ready after the reboot", func(f *fcv1.FlashCacheVolume) bool {
			p := meta.FindStatusCondition(f.Status.Conditions, fcv1.ConditionProvisioned)
			return f.Status.Phase == fcv1.PhaseReady && p != nil && p.Status == metav1.ConditionTrue
		})
		sum := checksumVolume(t)
		if sum != checksum2 {
			t.Errorf("after the reboot the volume reads md5 %s, before it %s", sum, checksum2)
		}
		t.Logf("device %s before the reboot, %s after; backing uuid %s", before, got.Status.Device.Name, got.Status.Device.BackingUUID)
	})

	t.Run("AMissingDiskIsAConditionNotACrash", func(t *testing.T) {
		apply(t, kubectl, dir, "ghost.yaml", fmt.Sprintf(`apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: ghost}
spec:
  nodeName: %s
  cacheDevice: {path: /dev/disk/by-id/nvme-not-in-this-node}
  backingDevice: {path: /dev/disk/by-id/ata-not-in-this-node}
`, nodeName))
		eventually(t, ctx, 2*time.Minute, "ghost: Provisioned=False, DeviceMissing", func(ctx context.Context) (*fcv1.FlashCacheVolume, bool, error) {
			var f fcv1.FlashCacheVolume
			if err := k8s.Get(ctx, types.NamespacedName{Name: "ghost"}, &f); err != nil {
				return nil, false, err
			}
			p := meta.FindStatusCondition(f.Status.Conditions, fcv1.ConditionProvisioned)
			return &f, p != nil && p.Reason == fcv1.ReasonDeviceMissing && strings.Contains(p.Message, "nvme-not-in-this-node"), nil
		})
		if out := sh(t, "pgrep -x flashcache | wc -l"); out != "1" {
			t.Errorf("the agent should still run, once: %s processes", out)
		}
		if out, err := kubectl.Run("delete", "fcv", "ghost", "--timeout=2m"); err != nil {
			t.Fatalf("a volume that was never built must go away when deleted: %v\n%s", err, out)
		}
	})

	t.Run("ALostSSDIsDegradedThenReplacedThroughTheSpec", func(t *testing.T) {
		testCacheLoss(t, ctx, vm, k8s, kubectl, dir, nvmeLoss, nvmeNew, hddLoss)
	})

	t.Run("DeletingTheVolumeTearsTheDeviceDown", func(t *testing.T) {
		for _, args := range [][]string{
			{"delete", "statefulset", "mysql", "-n", "default", "--wait"},
			{"delete", "pvc", "data-mysql-0", "-n", "default", "--wait=false"},
			{"delete", "fcv", volumeName, "--wait=false"},
		} {
			if out, err := kubectl.Run(args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		}
		eventually(t, ctx, 5*time.Minute, "the FlashCacheVolume and its PersistentVolume gone", func(ctx context.Context) (string, bool, error) {
			var f fcv1.FlashCacheVolume
			err := k8s.Get(ctx, types.NamespacedName{Name: volumeName}, &f)
			if err == nil {
				r := meta.FindStatusCondition(f.Status.Conditions, fcv1.ConditionReady)
				return fmt.Sprintf("volume still there: %+v", r), false, nil
			}
			if !apierrors.IsNotFound(err) {
				return "", false, err
			}
			var pv corev1.PersistentVolume
			err = k8s.Get(ctx, types.NamespacedName{Name: "flashcache-" + volumeName}, &pv)
			return "PersistentVolume still there", apierrors.IsNotFound(err), nil
		})
		if out := sh(t, "ls /dev/flashcache/ 2>/dev/null; ls /sys/fs/bcache/ | grep -c -- - || true"); strings.Contains(out, volumeName) || out != "0" {
			t.Errorf("after teardown the node still has: %q", out)
		}
		if out := sh(t, "wipefs --no-act --output TYPE --noheadings "+hdd.ByID()+" || true"); strings.Contains(out, "bcache") {
			t.Errorf("the backing disk still carries a bcache signature: %q", out)
		}
	})

	// The disks are blank again: a pool of them, with two volumes carved from it.
	t.Run("APoolAndItsCarvedVolumesThroughTheAgent", func(t *testing.T) { testPoolThroughTheAgent(t, ctx, vm, k8s, kubectl, dir, nvme, hdd) })

	// The disks are blank again: csi-sanity's volumes are carved from a pool of them.
	t.Run("CSISanityOnAPool", func(t *testing.T) { testCSISanity(t, ctx, vm, k8s, kubectl, dir, controllerSocket, nvme, hdd) })

	// The disks are blank again: claims through the StorageClass and the sidecars, on a pool of them.
	t.Run("ClaimsThroughTheSidecars", func(t *testing.T) {
		testClaimsThroughTheSidecars(t, ctx, c, vm, k8s, kubectl, dir, controllerSocket, nvme, hdd)
	})

	// The disks are blank again: the HDD becomes an iSCSI LUN behind the same NVMe.
	t.Run("ISCSIBackingLUN", func(t *testing.T) { testISCSIThroughTheAgent(t, ctx, vm, k8s, kubectl, dir, nvme, hdd) })

	// Last, since the operator does not come back: with no operator to answer the webhook, which
	// fails closed, the eviction of a pod that has nothing to do with flashcache is refused too,
	// as docs/runbooks/operator-down.md says, and kube-system's pods are not held back.
	t.Run("WithTheOperatorDownEvictionsOutsideKubeSystemAreRefused", func(t *testing.T) {
		if err := syscall.Kill(operator.Pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		eventually(t, ctx, 30*time.Second, "the operator to exit", func(context.Context) (string, bool, error) {
			return "", operator.Exited() != nil, nil
		})
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, ns := range []string{"web", "kube-system"} {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "no-volumes", Namespace: ns},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
			if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		eviction := func(ns string) error {
			return c.Client.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "no-volumes", Namespace: ns}})
		}
		err := eviction("web")
		if err == nil || !strings.Contains(err.Error(), `failed calling webhook "eviction.flashcache.io"`) {
			t.Errorf("eviction of a pod without flashcache volumes, operator down: %v, want the webhook's failure", err)
		}
		t.Logf("what kubectl drain would print: %v", err)
		if err := eviction("kube-system"); err != nil {
			t.Errorf("eviction in kube-system, operator down: %v, want it admitted", err)
		}
	})

	// The chart's RBAC let each component do everything it did: a refused request shows in its
	// log as "forbidden", and the components log their failed requests before they retry.
	t.Run("NoRequestWasForbidden", func(t *testing.T) {
		operatorLog, err := os.ReadFile(filepath.Join(dir, "operator.log"))
		if err != nil {
			t.Fatal(err)
		}
		for component, log := range map[string]string{
			"operator": string(operatorLog),
			"agent":    sh(t, "cat /root/agent.log"),
		} {
			for _, line := range cluster.ForbiddenLines(log) {
				t.Errorf("%s: %s", component, line)
			}
		}
	})
}

// mysqlStatefulSet stands for MySQL: kwok runs no containers, so only its shape matters.
const mysqlStatefulSet = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: mysql
  namespace: default
spec:
  replicas: 1
  serviceName: mysql
  selector:
    matchLabels: {app: mysql}
  template:
    metadata:
      labels: {app: mysql}
    spec:
      containers:
      - name: mysql
        image: registry.invalid/mysql:8.4
        volumeMounts:
        - name: data
          mountPath: /var/lib/mysql
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: STORAGECLASS
      resources:
        requests:
          storage: SIZE
`

type drainLine struct {
	at   time.Time
	text string
}

// drain runs kubectl drain on the node and returns its output lines with the time each arrived.
func drain(t *testing.T, ctx context.Context, c *cluster.Cluster, dir string) []drainLine {
	t.Helper()
	kubeconfig, err := c.HostKubeconfig(envtest.User{Name: "admin-drain", Groups: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "drain-kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	drainCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(drainCtx, filepath.Join(c.Assets, "kubectl"), "--kubeconfig", path,
		"drain", nodeName, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=8m")
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	var lines []drainLine
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines = append(lines, drainLine{time.Now(), sc.Text()})
		}
	}()
	err = cmd.Run()
	_ = w.Close()
	<-done
	if err != nil {
		var all []string
		for _, l := range lines {
			all = append(all, l.text)
		}
		t.Fatalf("kubectl drain: %v\n%s", err, strings.Join(all, "\n"))
	}
	return lines
}

func apply(t *testing.T, kubectl *testenv.Kubectl, dir, name, doc string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl.Run("apply", "-f", path); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func waitVolume(t *testing.T, ctx context.Context, k8s client.Client, timeout time.Duration, what string, ok func(*fcv1.FlashCacheVolume) bool) *fcv1.FlashCacheVolume {
	t.Helper()
	return waitVolumeNamed(t, ctx, k8s, volumeName, timeout, what, ok)
}

// waitVolumeNamed waits until the FlashCacheVolume name satisfies ok.
func waitVolumeNamed(t *testing.T, ctx context.Context, k8s client.Client, name string, timeout time.Duration, what string, ok func(*fcv1.FlashCacheVolume) bool) *fcv1.FlashCacheVolume {
	t.Helper()
	return eventually(t, ctx, timeout, what, func(ctx context.Context) (*fcv1.FlashCacheVolume, bool, error) {
		var f fcv1.FlashCacheVolume
		if err := k8s.Get(ctx, types.NamespacedName{Name: name}, &f); err != nil {
			return nil, false, err
		}
		return &f, ok(&f), nil
	})
}

// condition is the volume's condition of type kind, or a zero one.
func condition(f *fcv1.FlashCacheVolume, kind string) metav1.Condition {
	if c := meta.FindStatusCondition(f.Status.Conditions, kind); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// kubectlFlashcache runs `kubectl flashcache ARGS` as a user who installed the plugin does:
// kubectl finds bin/kubectl-flashcache (FLASHCACHE_KUBECTL_PLUGIN, built by make test-e2e) on
// the PATH.
func kubectlFlashcache(t *testing.T, ctx context.Context, kubectl *testenv.Kubectl, args ...string) string {
	t.Helper()
	out, err := kubectlFlashcacheErr(ctx, kubectl, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl flashcache %s:\n%s", strings.Join(args, " "), out)
	return out
}

func kubectlFlashcacheErr(ctx context.Context, kubectl *testenv.Kubectl, args ...string) (string, error) {
	plugin := os.Getenv("FLASHCACHE_KUBECTL_PLUGIN")
	if filepath.Base(plugin) != "kubectl-flashcache" {
		return "", fmt.Errorf("FLASHCACHE_KUBECTL_PLUGIN=%q: want the path of kubectl-flashcache (make test-e2e builds it)", plugin)
	}
	return kubectl.Plugin(ctx, filepath.Dir(plugin), "flashcache", append(args, "--agent-namespace", chartNamespace)...)
}

// requireAll fails the test for each of wants that out lacks.
func requireAll(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q", what, want)
		}
	}
}

// requireRow fails the test unless a line of a table printed by the plugin starts with cells.
func requireRow(t *testing.T, table string, cells ...string) {
	t.Helper()
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(cells) && slices.Equal(f[:len(cells)], cells) {
			return
		}
	}
	t.Errorf("no row starting %q in:\n%s", cells, table)
}
