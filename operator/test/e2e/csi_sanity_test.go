//go:build e2e

package e2e

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/testenv"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

const (
	// agentCSISocket is where the agent in the guest serves the CSI node service.
	agentCSISocket = "/run/flashcache/csi.sock"
	// agentRegistrationSocket stands in for the kubelet's plugins_registry socket: kwok is this
	// node's kubelet, and nothing registers.
	agentRegistrationSocket = "/run/flashcache/registration.sock"
	sanityPool              = "e2e-sanity"
	// sanityRetryFor bounds how long a call is asked again while the agent builds or tears down
	// the volume it names.
	sanityRetryFor = 3 * time.Minute
	// sanityRetryEvery is how soon it is asked again: the suite's 45 specs wait this way for the
	// agent one after another, so half of it, on average, is added to each wait.
	sanityRetryEvery = 500 * time.Millisecond
)

// sanityWaits counts the calls asked again and the time they waited, for the test's log.
var sanityWaits struct {
	calls  atomic.Int64
	waited atomic.Int64 // nanoseconds
}

// retryUnavailable retries a call the driver answers with Unavailable, as the kubelet and the
// external-provisioner do: a volume that CreateVolume returned is built by the agent afterwards
// (a logical volume, bcache's registration), and NodeStageVolume says "not built yet" until it
// is; DeleteVolume says "being flushed and torn down" until the agent has given the space back.
// csi-sanity asks once, so its clients ask again the way the sidecars would.
func retryUnavailable(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	deadline := start.Add(sanityRetryFor)
	for asked := 0; ; asked++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			if asked > 0 {
				sanityWaits.calls.Add(1)
				sanityWaits.waited.Add(int64(time.Since(start)))
			}
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(sanityRetryEvery):
		}
	}
}

// testCSISanity runs csi-sanity (csi-test/v5's pkg/sanity, the suite every CSI driver is held
// to) against flashcache's driver on real parts: the controller service of the operator on this
// host, and the node service of the agent in the guest, reached through the SSH connection. The
// volumes it creates are carved from a pool of the node's blank NVMe and HDD, built by the agent
// on real LVM and bcache, staged and published on the guest's filesystem. The suite must pass
// whole; afterwards no volume is left and the pool's teardown leaves blank disks.
func testCSISanity(t *testing.T, ctx context.Context, vm *vmharness.VM, k8s client.Client, kubectl *testenv.Kubectl, dir, controllerSocket string, nvme, hdd vmharness.Disk) {
	applyPool(t, ctx, k8s, kubectl, dir, sanityPool, nvme, hdd)
	t.Cleanup(func() {
		if t.Failed() {
			if out, err := vm.Output(context.Background(), "dmesg | tail -n 60"); err == nil {
				t.Logf("the guest's kernel log (tail):\n%s", out)
			}
		}
	})
	inGuest := func(cmd string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return vm.Output(ctx, cmd)
	}
	config := sanity.NewTestConfig()
	// Node calls go to the agent's socket in the guest; the address only names it for gRPC.
	config.Address = "passthrough:///flashcache-agent-in-the-guest"
	config.DialOptions = []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return vm.DialUnix(ctx, agentCSISocket) }),
		grpc.WithUnaryInterceptor(retryUnavailable),
	}
	config.ControllerAddress = "unix:" + controllerSocket
	config.ControllerDialOptions = append(config.ControllerDialOptions, grpc.WithUnaryInterceptor(retryUnavailable))
	// The smallest volume of the default filesystem (mkfs.xfs refuses a device under 300 MiB),
	// and five extents more for the expansion tests.
	config.TestVolumeSize = 300 << 20
	config.TestVolumeExpandSize = 320 << 20
	config.TestVolumeParameters = map[string]string{"flushPeriod": "0s"}
	// The staging and target folders are the guest's, where the node service mounts.
	config.StagingPath = "/var/lib/csi-sanity/staging"
	config.TargetPath = "/var/lib/csi-sanity/target"
	config.CreateStagingDir = func(path string) (string, error) {
		_, err := inGuest("mkdir -p " + vmharness.ShellQuote(path))
		return path, err
	}
	config.CreateTargetDir = config.CreateStagingDir
	config.RemoveStagingPath = func(path string) error {
		_, err := inGuest("rm -rf --one-file-system " + vmharness.ShellQuote(path))
		return err
	}
	config.RemoveTargetPath = config.RemoveStagingPath
	config.CheckPath = func(path string) (sanity.PathKind, error) {
		out, err := inGuest("stat -c %F " + vmharness.ShellQuote(path) + " 2>/dev/null || echo missing")
		switch kind := strings.TrimSpace(out); {
		case err != nil:
			return "", err
		case kind == "missing":
			return sanity.PathIsNotFound, nil
		case kind == "directory":
			return sanity.PathIsDir, nil
		case strings.HasPrefix(kind, "regular"):
			return sanity.PathIsFile, nil
		default:
			return sanity.PathIsOther, nil
		}
	}
	logBefore := strings.TrimSpace(guest(t, ctx, vm, "wc -l < /root/agent.log"))
	sanityStart := time.Now()
	sanity.Test(t, config)
	t.Logf("csi-sanity took %s; %d calls waited for the agent, %s in all", time.Since(sanityStart).Round(time.Second),
		sanityWaits.calls.Load(), time.Duration(sanityWaits.waited.Load()).Round(time.Second))
	// The pool stood built all along, so its agent read it with its disks shared: no call on a
	// volume carved from it was turned away because the pool held the disks alone (a lock on a
	// disk names its path; a volume's own lock names its logical volume).
	if n := strings.TrimSpace(guest(t, ctx, vm, "tail -n +$(("+logBefore+" + 1)) /root/agent.log | "+
		"grep -c 'is Busy: another flashcache run is using the volume.s devices: /dev/' || true")); n != "0" {
		t.Errorf("%s node calls were answered Busy because the pool's disks were taken alone while the pool stood built", n)
	}

	// Every volume the suite made was deleted through DeleteVolume; the agent tears each down.
	eventually(t, ctx, 5*time.Minute, "no volume left on the sanity pool", func(ctx context.Context) (string, bool, error) {
		var volumes fcv1.FlashCacheVolumeList
		if err := k8s.List(ctx, &volumes); err != nil {
			return "", false, err
		}
		var left []string
		for _, v := range volumes.Items {
			if v.Spec.Pool != nil && v.Spec.Pool.Name == sanityPool {
				left = append(left, v.Name)
			}
		}
		return strings.Join(left, " "), len(left) == 0, nil
	})
	if out, err := kubectl.Run("delete", "fcp", sanityPool, "--wait=false"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	eventually(t, ctx, 3*time.Minute, "the sanity pool gone", func(ctx context.Context) (string, bool, error) {
		var p fcv1.FlashCachePool
		err := k8s.Get(ctx, types.NamespacedName{Name: sanityPool}, &p)
		if err == nil {
			return string(p.Status.Phase), false, nil
		}
		return "", apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if out := guest(t, ctx, vm, "wipefs --no-act --noheadings "+nvme.ByID()+" "+hdd.ByID()+"; grep -c csi-sanity /proc/mounts || true"); strings.TrimSpace(out) != "0" {
		t.Errorf("after the suite and the pool's teardown the node still has: %q", out)
	}
}
