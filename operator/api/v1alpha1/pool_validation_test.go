//go:build envtest

package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
)

// minimalPool is the smallest valid FlashCachePool, as a user would write it.
func minimalPool(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "flashcache.io/v1alpha1",
		"kind":       "FlashCachePool",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"nodeName":       "worker-1",
			"cacheDevice":    map[string]any{"path": "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_pool01"},
			"backingDevices": []any{map[string]any{"path": "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_hdd1"}},
		},
	}}
}

// carvedVolume is the smallest valid FlashCacheVolume carved from a pool.
func carvedVolume(name string) *unstructured.Unstructured {
	u := minimalVolume(name)
	remove("spec", "cacheDevice")(u)
	remove("spec", "backingDevice")(u)
	set(map[string]any{"name": "pool-a", "size": "10Gi"}, "spec", "pool")(u)
	return u
}

func TestPoolCRDIsClusterScopedWithShortName(t *testing.T) {
	out, err := kubectl.Run("get", "fcp")
	if err != nil {
		t.Fatalf("kubectl get fcp: %v\n%s", err, out)
	}
	out, err = kubectl.Eventually(30*time.Second, "explain", "fcp.spec")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"nodeName", "cacheDevice", "backingDevices", "replacementPolicy", "wipe", "volume group"} {
		if !strings.Contains(out, w) {
			t.Errorf("kubectl explain fcp.spec lacks %q:\n%s", w, out)
		}
	}
}

func TestPoolDefaultsAreFilledByTheAPIServer(t *testing.T) {
	ctx := context.Background()
	if err := k8s.Create(ctx, minimalPool("pool-defaults")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, minimalPool("pool-defaults")) })
	var got fcv1.FlashCachePool
	if err := k8s.Get(ctx, types.NamespacedName{Name: "pool-defaults"}, &got); err != nil {
		t.Fatal(err)
	}
	if p := got.Spec.CacheDevice.OverProvisionPercent; p == nil || *p != fcv1.DefaultOverProvisionPercent {
		t.Errorf("cacheDevice.overProvisionPercent = %v, want %d", deref(p), fcv1.DefaultOverProvisionPercent)
	}
	if b := got.Spec.CacheDevice.BucketSize; b == nil || b.Value() != fcv1.DefaultBucketSizeBytes {
		t.Errorf("cacheDevice.bucketSize = %v, want %d bytes", b, fcv1.DefaultBucketSizeBytes)
	}
	if got.Spec.ReplacementPolicy != fcv1.DefaultReplacementPolicy {
		t.Errorf("replacementPolicy = %q, want %q", got.Spec.ReplacementPolicy, fcv1.DefaultReplacementPolicy)
	}
	if got.Spec.BackingWritebackThrottling != fcv1.DefaultBackingWritebackThrottling {
		t.Errorf("backingWritebackThrottling = %q, want %q", got.Spec.BackingWritebackThrottling, fcv1.DefaultBackingWritebackThrottling)
	}
	if got.Spec.CacheCongestionBypass != fcv1.DefaultCacheCongestionBypass {
		t.Errorf("cacheCongestionBypass = %q, want %q", got.Spec.CacheCongestionBypass, fcv1.DefaultCacheCongestionBypass)
	}
}

// expectInvalid creates u and wants the API server to refuse it naming field, with contains in
// its message.
func expectInvalid(t *testing.T, what string, u *unstructured.Unstructured, field, contains string) {
	t.Helper()
	err := k8s.Create(context.Background(), u)
	switch {
	case err == nil:
		_ = k8s.Delete(context.Background(), u)
		t.Errorf("%s: accepted", what)
	case !apierrors.IsInvalid(err):
		t.Errorf("%s: err = %v, want Invalid", what, err)
	case !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), contains):
		t.Errorf("%s: message does not name %s with %q:\n%v", what, field, contains, err)
	}
}

func TestInvalidPoolsAreRejectedNamingTheField(t *testing.T) {
	cases := []struct {
		name            string
		mutate          func(*unstructured.Unstructured)
		field, contains string
	}{
		{"no backing devices", set([]any{}, "spec", "backingDevices"), "spec.backingDevices", "at least 1"},
		{"kernel name as backing device", set([]any{map[string]any{"path": "/dev/sdb"}}, "spec", "backingDevices"), "spec.backingDevices[0].path", "/dev/disk/by-"},
		{"a backing device twice", set([]any{map[string]any{"path": "/dev/disk/by-id/a"}, map[string]any{"path": "/dev/disk/by-id/a"}}, "spec", "backingDevices"), "spec.backingDevices[1]", "Duplicate"},
		{"the cache device as backing device", set([]any{map[string]any{"path": "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_pool01"}}, "spec", "backingDevices"), "spec.backingDevices", "must not be the cache device"},
		{"kernel name as cache device", set("/dev/nvme0n1", "spec", "cacheDevice", "path"), "spec.cacheDevice.path", "/dev/disk/by-"},
		{"unknown replacement policy", set("mru", "spec", "replacementPolicy"), "spec.replacementPolicy", "lru"},
		{"unknown writeback throttling", set("Off", "spec", "backingWritebackThrottling"), "spec.backingWritebackThrottling", "Disabled"},
		{"congestion bypass as a threshold", set(int64(2000), "spec", "cacheCongestionBypass"), "spec.cacheCongestionBypass", "string"},
		{"bucket size not a power of two", set("3Mi", "spec", "cacheDevice", "bucketSize"), "spec.cacheDevice.bucketSize", "power of two from 4Ki to 16Mi"},
		{"name not a DNS label", set("Pool_A", "metadata", "name"), "metadata.name", "DNS label"},
	}
	for i, c := range cases {
		u := minimalPool(fmt.Sprintf("invalid-pool-%d", i))
		c.mutate(u)
		expectInvalid(t, c.name, u, c.field, c.contains)
	}
}

func TestPoolBackingDevicesMayBeAddedNeverRemoved(t *testing.T) {
	ctx := context.Background()
	if err := k8s.Create(ctx, minimalPool("pool-grow")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, minimalPool("pool-grow")) })
	update := func(devices ...string) error {
		u := minimalPool("")
		if err := k8s.Get(ctx, types.NamespacedName{Name: "pool-grow"}, u); err != nil {
			t.Fatal(err)
		}
		var list []any
		for _, d := range devices {
			list = append(list, map[string]any{"path": d})
		}
		set(list, "spec", "backingDevices")(u)
		return k8s.Update(ctx, u)
	}
	if err := update("/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_hdd1", "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_hdd2"); err != nil {
		t.Errorf("adding a backing device: %v", err)
	}
	err := update("/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_hdd2")
	if err == nil || !strings.Contains(err.Error(), "spec.backingDevices") || !strings.Contains(err.Error(), "never removed") {
		t.Errorf("removing a backing device: err = %v, want it refused naming spec.backingDevices", err)
	}
	u := minimalPool("")
	if err := k8s.Get(ctx, types.NamespacedName{Name: "pool-grow"}, u); err != nil {
		t.Fatal(err)
	}
	set("worker-2", "spec", "nodeName")(u)
	if err := k8s.Update(ctx, u); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("moving a pool to another node: err = %v, want it refused as immutable", err)
	}
}

func TestCarvedVolumesNameAPoolOrWholeDevicesNeverBoth(t *testing.T) {
	ctx := context.Background()
	u := carvedVolume("carved-valid")
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatalf("a volume carved from a pool: %v", err)
	}
	_ = k8s.Delete(ctx, u)

	bothPoolAndCache := carvedVolume("carved-both")
	set(map[string]any{"path": "/dev/disk/by-id/nvme-x"}, "spec", "cacheDevice")(bothPoolAndCache)
	expectInvalid(t, "pool and cacheDevice", bothPoolAndCache, "spec", "either pool, or both cacheDevice and backingDevice")

	neither := minimalVolume("carved-neither")
	remove("spec", "cacheDevice")(neither)
	remove("spec", "backingDevice")(neither)
	expectInvalid(t, "no devices and no pool", neither, "spec", "either pool, or both cacheDevice and backingDevice")

	cacheOnly := minimalVolume("carved-cache-only")
	remove("spec", "backingDevice")(cacheOnly)
	expectInvalid(t, "a cache device without a backing device", cacheOnly, "spec", "either pool, or both cacheDevice and backingDevice")

	for i, size := range []string{"1Mi", "1.5Gi", "-1Gi", "2Pi"} {
		u := carvedVolume(fmt.Sprintf("carved-size-%d", i))
		set(size, "spec", "pool", "size")(u)
		expectInvalid(t, "size "+size, u, "spec.pool.size", "from 64Mi to 1Pi")
	}
	noName := carvedVolume("carved-no-name")
	remove("spec", "pool", "name")(noName)
	expectInvalid(t, "pool without a name", noName, "spec.pool.name", "Required")
}

func TestCarvedVolumesGrowAndStayInTheirPool(t *testing.T) {
	ctx := context.Background()
	if err := k8s.Create(ctx, carvedVolume("carved-update")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, carvedVolume("carved-update")) })
	cases := []struct {
		name     string
		mutate   func(*unstructured.Unstructured)
		field    string // empty: the change is allowed
		contains string
	}{
		{"grow", set("20Gi", "spec", "pool", "size"), "", ""},
		{"shrink", set("5Gi", "spec", "pool", "size"), "spec.pool", "never shrink"},
		{"another pool", set("pool-b", "spec", "pool", "name"), "spec.pool", "pool.name is immutable"},
		{"to whole devices", func(u *unstructured.Unstructured) {
			remove("spec", "pool")(u)
			set(map[string]any{"path": "/dev/disk/by-id/nvme-x"}, "spec", "cacheDevice")(u)
			set(map[string]any{"path": "/dev/disk/by-id/ata-y"}, "spec", "backingDevice")(u)
		}, "spec", "cannot move between whole devices and a pool"},
		{"flush period", set("30s", "spec", "flushPeriod"), "", ""},
	}
	for _, c := range cases {
		u := carvedVolume("")
		if err := k8s.Get(ctx, types.NamespacedName{Name: "carved-update"}, u); err != nil {
			t.Fatal(err)
		}
		c.mutate(u)
		err := k8s.Update(ctx, u)
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: change rejected: %v", c.name, err)
		case c.field == "":
		case err == nil:
			t.Errorf("%s: change accepted, want it rejected", c.name)
		case !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.contains):
			t.Errorf("%s: err does not name %s with %q: %v", c.name, c.field, c.contains, err)
		}
	}
}
