//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/testenv"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// testPoolThroughTheAgent gives the node's blank SSD and disk to a FlashCachePool and carves two
// volumes from it, written by hand as a CSI driver would: the agent builds the pool, reports its
// capacity, builds each volume on the pool's cache set, and the operator publishes their
// PersistentVolumes. Deleting the volumes gives their space back; deleting the pool then leaves
// blank disks.
func testPoolThroughTheAgent(t *testing.T, ctx context.Context, vm *vmharness.VM, k8s client.Client, kubectl *testenv.Kubectl, dir string, nvme, hdd vmharness.Disk) {
	carved := func(name, size string) string {
		return fmt.Sprintf(`---
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: %s}
spec:
  nodeName: %s
  pool: {name: e2e-pool, size: %s}
  flushPeriod: 0s
  volume: {storageClassName: flashcache-pool}
`, name, nodeName, size)
	}
	// The volumes first: they wait for their pool (PoolNotReady), and are built once it is.
	apply(t, kubectl, dir, "carved.yaml", carved("carved-a", "256Mi")+carved("carved-b", "128Mi"))
	waitVolumeNamed(t, ctx, k8s, "carved-a", time.Minute, "carved-a waiting for its pool", func(f *fcv1.FlashCacheVolume) bool {
		c := meta.FindStatusCondition(f.Status.Conditions, fcv1.ConditionProvisioned)
		return c != nil && c.Status == "False" && strings.Contains(c.Message, "e2e-pool")
	})
	pool := applyPool(t, ctx, k8s, kubectl, dir, "e2e-pool", nvme, hdd)
	if pool.Status.CacheSetUUID == "" || pool.Status.VolumeGroup != "fcp-e2e-pool" || pool.Status.Capacity.Value() < hdd.Size*99/100 {
		t.Errorf("pool status: %+v", pool.Status)
	}
	for _, name := range []string{"carved-a", "carved-b"} {
		f := waitVolumeNamed(t, ctx, k8s, name, 3*time.Minute, name+" ready on the pool's cache set", func(f *fcv1.FlashCacheVolume) bool {
			return f.Status.Phase == fcv1.PhaseReady && f.Status.Device != nil && f.Status.PersistentVolumeName != ""
		})
		if f.Status.Device.CacheSetUUID != pool.Status.CacheSetUUID {
			t.Errorf("%s is on cache set %s, the pool's is %s", name, f.Status.Device.CacheSetUUID, pool.Status.CacheSetUUID)
		}
		var pv corev1.PersistentVolume
		if err := k8s.Get(ctx, types.NamespacedName{Name: f.Status.PersistentVolumeName}, &pv); err != nil {
			t.Fatal(err)
		}
		if pv.Spec.Local == nil || pv.Spec.Local.Path != "/dev/flashcache/"+name {
			t.Errorf("%s: PersistentVolume %+v", name, pv.Spec.PersistentVolumeSource)
		}
	}
	eventually(t, ctx, time.Minute, "the pool's status counting both volumes", func(ctx context.Context) (string, bool, error) {
		var p fcv1.FlashCachePool
		if err := k8s.Get(ctx, types.NamespacedName{Name: "e2e-pool"}, &p); err != nil {
			return "", false, err
		}
		return fmt.Sprintf("%d volumes, %v allocatable", p.Status.Volumes, p.Status.Allocatable), p.Status.Volumes == 2, nil
	})

	// A pool with volumes carved from it waits for them.
	if out, err := kubectl.Run("delete", "fcp", "e2e-pool", "--wait=false"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	eventually(t, ctx, time.Minute, "the deleted pool held by its volumes", func(ctx context.Context) (string, bool, error) {
		var p fcv1.FlashCachePool
		if err := k8s.Get(ctx, types.NamespacedName{Name: "e2e-pool"}, &p); err != nil {
			return "", false, err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, fcv1.ConditionProvisioned)
		return fmt.Sprintf("%+v", c), c != nil && c.Reason == "PoolInUse", nil
	})
	if out, err := kubectl.Run("delete", "fcv", "carved-a", "carved-b", "--wait=false"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	eventually(t, ctx, 5*time.Minute, "the volumes, then the pool, gone", func(ctx context.Context) (string, bool, error) {
		for _, name := range []string{"carved-a", "carved-b"} {
			var f fcv1.FlashCacheVolume
			if err := k8s.Get(ctx, types.NamespacedName{Name: name}, &f); !apierrors.IsNotFound(err) {
				return name + " still there", false, nil
			}
		}
		var p fcv1.FlashCachePool
		err := k8s.Get(ctx, types.NamespacedName{Name: "e2e-pool"}, &p)
		return "the pool still there", apierrors.IsNotFound(err), nil
	})
	if out := guest(t, ctx, vm, "wipefs --no-act --noheadings "+nvme.ByID()+" "+hdd.ByID()+"; ls /dev/flashcache/ 2>/dev/null || true"); out != "" {
		t.Errorf("after the pool's teardown the node still has: %q", out)
	}
}

// applyPool applies a FlashCachePool of the node's NVMe and HDD and waits until the agent has
// built it and reported its capacity.
func applyPool(t *testing.T, ctx context.Context, k8s client.Client, kubectl *testenv.Kubectl, dir, name string, nvme, hdd vmharness.Disk) *fcv1.FlashCachePool {
	t.Helper()
	apply(t, kubectl, dir, name+".yaml", fmt.Sprintf(`apiVersion: flashcache.io/v1alpha1
kind: FlashCachePool
metadata: {name: %s}
spec:
  nodeName: %s
  cacheDevice: {path: %s}
  backingDevices:
  - path: %s
`, name, nodeName, nvme.ByID(), hdd.ByID()))
	return eventually(t, ctx, 3*time.Minute, "pool "+name+" provisioned with its capacity", func(ctx context.Context) (*fcv1.FlashCachePool, bool, error) {
		var p fcv1.FlashCachePool
		if err := k8s.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return nil, false, err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, fcv1.ConditionProvisioned)
		return &p, c != nil && c.Status == "True" && p.Status.Phase == fcv1.PoolPhaseReady && p.Status.Capacity != nil, nil
	})
}
