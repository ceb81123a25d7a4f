//go:build e2e

// Package e2e runs flashcache end to end: a real control plane on the host (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) and a QEMU guest that is the node
// "vm", whose pods kwok plays while the guest's own processes reach the API server.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/test/e2e/cluster"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

const nodeName = "vm"

// workload is a StatefulSet whose one replica claims a local PersistentVolume on the node vm,
// through a WaitForFirstConsumer class: the shape of a MySQL on a flashcache volume.
const workload = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: e2e-local
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: e2e-local-vm
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: e2e-local
  volumeMode: Filesystem
  local:
    path: /mnt/e2e
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - key: kubernetes.io/hostname
          operator: In
          values: [vm]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: default
spec:
  replicas: 1
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        # kwok runs no containers: the image is never pulled.
        image: registry.invalid/mysql:8.4
        volumeMounts:
        - name: data
          mountPath: /var/lib/mysql
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: e2e-local
      resources:
        requests:
          storage: 1Gi
`

// TestSmoke proves the test bed: the guest reaches the host's API server with a verified TLS
// connection, kwok makes the node vm Ready and runs its pods, a StatefulSet's claim binds the
// local volume on vm, and kubectl drain evicts the pod.
func TestSmoke(t *testing.T) {
	image := vmharness.ImageFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	dir := cluster.TestDir(t)

	vm, c := clusterAndGuest(t, ctx, dir, vmharness.Options{Image: image})
	kubectl, err := c.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster and guest up after %s; guest by hand: %s", since(start), strings.Join(vm.SSHCommand(), " "))

	t.Run("GuestReachesTheAPIServer", func(t *testing.T) {
		const user = "flashcache-e2e-guest"
		kubeconfig, err := c.GuestKubeconfig(envtest.User{Name: user, Groups: []string{"system:masters"}})
		if err != nil {
			t.Fatal(err)
		}
		local := filepath.Join(dir, "guest-kubeconfig")
		if err := os.WriteFile(local, kubeconfig, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := vm.Output(ctx, "mkdir -p /root/.kube"); err != nil {
			t.Fatal(err)
		}
		if err := vm.CopyFile(ctx, local, "/root/.kube/config", 0o600); err != nil {
			t.Fatal(err)
		}
		copyStart := time.Now()
		if err := vm.CopyFile(ctx, filepath.Join(c.Assets, "kubectl"), "/usr/local/bin/kubectl", 0o755); err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl copied into the guest in %s", since(copyStart))

		server := guest(t, ctx, vm, "kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}'")
		if !strings.HasPrefix(server, "https://"+vmharness.HostAddr+":") {
			t.Errorf("guest kubeconfig server is %q, want https://%s:<port>", server, vmharness.HostAddr)
		}
		if out := guest(t, ctx, vm, "kubectl get --raw /readyz"); out != "ok" {
			t.Errorf("readyz from the guest: %q, want ok", out)
		}
		if who := guest(t, ctx, vm, "kubectl auth whoami -o jsonpath='{.status.userInfo.username}'"); who != user {
			t.Errorf("the API server knows the guest as %q, want %q", who, user)
		}
	})

	t.Run("KwokPlaysTheNodeAndOnlyIt", func(t *testing.T) {
		// Created first, so that kwok has seen it by the time it has made vm Ready.
		unmanaged := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "unmanaged", Labels: map[string]string{corev1.LabelHostname: "unmanaged"}}}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, unmanaged, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		node, err := c.AddNode(ctx, nodeName, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s Ready, kubelet %s", node.Name, node.Status.NodeInfo.KubeletVersion)
		// A node without kwok's annotation is where a real kubelet or agent would report:
		// kwok must never write its status.
		time.Sleep(2 * time.Second)
		got, err := c.Client.CoreV1().Nodes().Get(ctx, "unmanaged", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Conditions) != 0 {
			t.Errorf("kwok reported for the node without its annotation: %+v", got.Status.Conditions)
		}
		if err := c.Client.CoreV1().Nodes().Delete(ctx, "unmanaged", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	var podUID types.UID
	t.Run("StatefulSetClaimBindsTheLocalVolumeAndRuns", func(t *testing.T) {
		manifest := filepath.Join(dir, "workload.yaml")
		if err := os.WriteFile(manifest, []byte(workload), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := kubectl.Run("apply", "-f", manifest); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		began := time.Now()
		pvc := eventually(t, ctx, 3*time.Minute, "claim default/data-db-0 bound to e2e-local-vm", func(ctx context.Context) (*corev1.PersistentVolumeClaim, bool, error) {
			pvc, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data-db-0", metav1.GetOptions{})
			if err != nil {
				return nil, false, err
			}
			return pvc, pvc.Status.Phase == corev1.ClaimBound, nil
		})
		if pvc.Spec.VolumeName != "e2e-local-vm" {
			t.Errorf("claim bound to %q, want e2e-local-vm", pvc.Spec.VolumeName)
		}
		pod := eventually(t, ctx, 3*time.Minute, "pod default/db-0 running", func(ctx context.Context) (*corev1.Pod, bool, error) {
			pod, err := c.Client.CoreV1().Pods("default").Get(ctx, "db-0", metav1.GetOptions{})
			if err != nil {
				return nil, false, err
			}
			return pod, pod.Status.Phase == corev1.PodRunning, nil
		})
		if pod.Spec.NodeName != nodeName {
			t.Errorf("pod db-0 runs on %q, want %s", pod.Spec.NodeName, nodeName)
		}
		// The ServiceAccount admission plugin is on, as in a real cluster.
		if pod.Spec.ServiceAccountName != "default" {
			t.Errorf("pod db-0 has service account %q, want default", pod.Spec.ServiceAccountName)
		}
		podUID = pod.UID
		t.Logf("claim bound and pod running on %s after %s", pod.Spec.NodeName, since(began))
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("DrainEvictsThePod", func(t *testing.T) {
		began := time.Now()
		drainCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		out, err := kubectl.RunContext(drainCtx, "drain", nodeName, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=2m")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("drained in %s:\n%s", since(began), strings.TrimSpace(out))
		if !strings.Contains(out, "evicting pod default/db-0") {
			t.Errorf("drain did not evict db-0:\n%s", out)
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !node.Spec.Unschedulable {
			t.Errorf("node %s is not cordoned after drain", nodeName)
		}
		// The StatefulSet recreates db-0, which its claim ties to the cordoned node: it must
		// wait, Pending, rather than run anywhere.
		eventually(t, ctx, time.Minute, "db-0 recreated and unschedulable", func(ctx context.Context) (*corev1.Pod, bool, error) {
			pod, err := c.Client.CoreV1().Pods("default").Get(ctx, "db-0", metav1.GetOptions{})
			if err != nil {
				return nil, false, err
			}
			if pod.UID == podUID {
				return pod, false, fmt.Errorf("the evicted pod (uid %s) still exists", podUID)
			}
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					return pod, pod.Spec.NodeName == "", nil
				}
			}
			return pod, false, nil
		})
	})
	t.Logf("smoke test done in %s", since(start))
}

// clusterAndGuest starts the control plane and boots the guest side by side (each takes tens
// of seconds). The guest powers off before the control plane stops: an agent still watching
// keeps kube-apiserver from stopping in time.
func clusterAndGuest(t *testing.T, ctx context.Context, dir string, opts vmharness.Options) (*vmharness.VM, *cluster.Cluster) {
	t.Helper()
	var vm *vmharness.VM
	var bootErr error
	booted := make(chan struct{})
	opts.WorkDir, opts.Logf = filepath.Join(dir, "vm"), t.Logf
	go func() {
		defer close(booted)
		vm, bootErr = vmharness.Boot(ctx, opts)
	}()
	t.Cleanup(func() {
		<-booted
		if vm != nil {
			vm.Close()
		}
	})
	c := cluster.ForTest(t, cluster.Options{Dir: filepath.Join(dir, "cluster")})
	<-booted
	if bootErr != nil {
		t.Fatal(bootErr)
	}
	t.Cleanup(vm.Close)
	vm.LogDiagnosticsOnFailure(t)
	return vm, c
}

// guest runs cmd in the guest and returns its trimmed stdout; a failure fails t.
func guest(t *testing.T, ctx context.Context, vm *vmharness.VM, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	began := time.Now()
	stdout, stderr, code, err := vm.Run(ctx, cmd)
	if err != nil || code != 0 {
		t.Fatalf("guest: %s: exit %d, %v\n%s%s", cmd, code, err, stdout, stderr)
	}
	logSlow(t, began, "guest: "+cmd)
	return strings.TrimSpace(stdout)
}

// slowStep is how long a guest command or a wait may take before the log says so: where a
// tier's time goes is then in every run's log, not only in a profile someone remembers to take.
const slowStep = 10 * time.Second

func logSlow(t *testing.T, began time.Time, what string) {
	t.Helper()
	if d := time.Since(began); d >= slowStep {
		if len(what) > 120 {
			what = what[:117] + "..."
		}
		t.Logf("took %s: %s", d.Round(100*time.Millisecond), what)
	}
}

// eventually polls check every half second until it reports done, failing t after timeout with
// what it last saw. Errors from check are remembered, not fatal: the state may still change.
func eventually[T any](t *testing.T, ctx context.Context, timeout time.Duration, what string, check func(context.Context) (T, bool, error)) T {
	t.Helper()
	var last T
	var lastErr error
	defer logSlow(t, time.Now(), "waiting for "+what)
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		v, done, err := check(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last, lastErr = v, nil
		return done, nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: %v; last error: %v; last seen:\n%s", timeout, what, err, lastErr, describe(last))
	}
	return last
}

func describe(v any) string {
	switch o := v.(type) {
	case *corev1.Pod:
		if o == nil {
			return "nothing"
		}
		return fmt.Sprintf("pod %s uid %s node %q phase %s conditions %+v", o.Name, o.UID, o.Spec.NodeName, o.Status.Phase, o.Status.Conditions)
	case *fcv1.FlashCacheVolume:
		if o == nil {
			return "nothing"
		}
		return fmt.Sprintf("volume %s phase %s device %+v dirty %v conditions %+v", o.Name, o.Status.Phase, o.Status.Device, o.Status.DirtyData, o.Status.Conditions)
	case *corev1.PersistentVolumeClaim:
		if o == nil {
			return "nothing"
		}
		return fmt.Sprintf("claim %s phase %s volume %q annotations %v", o.Name, o.Status.Phase, o.Spec.VolumeName, o.Annotations)
	}
	return fmt.Sprintf("%+v", v)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }
