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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/testenv"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

const lossVolume = "ssd-loss"

// testCacheLoss pulls a volume's SSD out of the node (its PCI function removed): the agent says
// Degraded, CacheDeviceLost, with an event and status.failure; a new SSD named in the spec is
// attached with the data intact; and after that SSD is lost too, deleting the volume still tears
// down what is left on the backing disk.
func testCacheLoss(t *testing.T, ctx context.Context, vm *vmharness.VM, k8s client.Client, kubectl *testenv.Kubectl, dir string, cache, replacement, backing vmharness.Disk) {
	apply(t, kubectl, dir, "loss.yaml", fmt.Sprintf(`apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: %s}
spec:
  nodeName: %s
  cacheDevice: {path: %s}
  backingDevice: {path: %s}
  mode: writethrough
  volume: {storageClassName: flashcache-loss}
`, lossVolume, nodeName, cache.ByID(), backing.ByID()))
	waitVolumeNamed(t, ctx, k8s, lossVolume, 3*time.Minute, lossVolume+" Ready", func(f *fcv1.FlashCacheVolume) bool {
		return f.Status.Phase == fcv1.PhaseReady
	})
	const sum = "dd if=/dev/flashcache/" + lossVolume + " bs=1M count=8 iflag=direct status=none | md5sum"
	guest(t, ctx, vm, "dd if=/dev/urandom of=/dev/flashcache/"+lossVolume+" bs=1M count=8 oflag=direct status=none")
	before := guest(t, ctx, vm, sum)
	if err := vm.Pull(ctx, cache); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	// The agent detaches the dead cache at its next look, before a read can fail on it.
	got := waitVolumeNamed(t, ctx, k8s, lossVolume, 2*time.Minute, "Degraded=True, CacheDeviceLost, served uncached", func(f *fcv1.FlashCacheVolume) bool {
		d := condition(f, fcv1.ConditionDegraded)
		return d.Status == metav1.ConditionTrue && d.Reason == fcv1.ReasonCacheDeviceLost &&
			f.Status.Failure != nil && strings.Contains(f.Status.Failure.KernelAction, "without its cache")
	})
	d := condition(got, fcv1.ConditionDegraded)
	t.Logf("Degraded %s after the SSD went away: %s", since(began), d.Message)
	if !strings.Contains(d.Message, "no dirty data") {
		t.Errorf("the condition does not say whether dirty data was lost: %s", d.Message)
	}
	if p := condition(got, fcv1.ConditionProvisioned); p.Status != metav1.ConditionTrue {
		t.Errorf("Provisioned should stay True (the device was built and still serves): %+v", p)
	}
	if f := got.Status.Failure; f == nil || f.Device != fcv1.FailedDeviceCache || f.Reason != fcv1.ReasonCacheDeviceLost ||
		f.DirtyDataAtRisk || f.KernelAction == "" || f.Since == nil || f.DirtyDataLastObserved == nil {
		t.Errorf("status.failure: %+v, want the lost cache, no dirty data at risk, what bcache did and the dirty data last observed", f)
	}
	if got := guest(t, ctx, vm, sum); got != before {
		t.Errorf("served without its cache, the volume reads %s; before the loss %s", got, before)
	}
	var events corev1.EventList
	if err := k8s.List(ctx, &events); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range events.Items {
		found = found || (e.InvolvedObject.Name == lossVolume && e.Reason == fcv1.ReasonCacheDeviceLost && e.Type == corev1.EventTypeWarning)
	}
	if !found {
		t.Errorf("no warning event with reason %s on %s", fcv1.ReasonCacheDeviceLost, lossVolume)
	}

	// The replacement, through the spec: the one device field that may change.
	if out, err := kubectl.Run("patch", "fcv", lossVolume, "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"cacheDevice":{"path":%q}}}`, replacement.ByID())); err != nil {
		t.Fatalf("naming a new SSD: %v\n%s", err, out)
	}
	began = time.Now()
	got = waitVolumeNamed(t, ctx, k8s, lossVolume, 3*time.Minute, "Degraded=False with a cache set, no failure", func(f *fcv1.FlashCacheVolume) bool {
		d := condition(f, fcv1.ConditionDegraded)
		return d.Status == metav1.ConditionFalse && f.Status.Failure == nil && f.Status.Device != nil && f.Status.Device.CacheSetUUID != "" &&
			f.Status.ObservedGeneration == f.Generation
	})
	t.Logf("the new SSD attached %s after the spec named it: %s", since(began), condition(got, fcv1.ConditionDegraded).Message)
	if got := guest(t, ctx, vm, sum); got != before {
		t.Errorf("after the replacement the volume reads %s; before the loss %s", got, before)
	}
	if sigs := guest(t, ctx, vm, "wipefs --noheadings --output TYPE "+replacement.ByID()+"-part1"); !strings.Contains(sigs, "bcache") {
		t.Errorf("the new SSD's partition carries %q, want a bcache cache", sigs)
	}

	// The backing disk goes offline under the running volume: reads that miss the cache fail,
	// and the agent says so at its next look.
	if err := vm.SetOffline(ctx, backing, true); err != nil {
		t.Fatal(err)
	}
	guest(t, ctx, vm, "for i in 1 2 3; do dd if=/dev/flashcache/"+lossVolume+" of=/dev/null bs=4k count=1 skip=$((20000+i*64)) iflag=direct status=none 2>/dev/null || true; done")
	began = time.Now()
	got = waitVolumeNamed(t, ctx, k8s, lossVolume, 2*time.Minute, "Degraded=True, BackingDeviceErrors", func(f *fcv1.FlashCacheVolume) bool {
		d := condition(f, fcv1.ConditionDegraded)
		return d.Status == metav1.ConditionTrue && d.Reason == fcv1.ReasonBackingDeviceErrors
	})
	t.Logf("Degraded %s after the backing disk went offline: %s", since(began), condition(got, fcv1.ConditionDegraded).Message)
	if f := got.Status.Failure; f == nil || f.Device != fcv1.FailedDeviceBacking || f.DirtyDataAtRisk || !strings.Contains(f.KernelAction, "backing I/O errors") {
		t.Errorf("status.failure with the backing disk offline: %+v", f)
	}
	if err := vm.SetOffline(ctx, backing, false); err != nil {
		t.Fatal(err)
	}
	// Back online, the errors stay counted until the device is registered again: still Degraded,
	// now saying how many there were.
	got = waitVolumeNamed(t, ctx, k8s, lossVolume, 2*time.Minute, "Degraded=True with the errors counted", func(f *fcv1.FlashCacheVolume) bool {
		return f.Status.Failure != nil && strings.Contains(f.Status.Failure.KernelAction, "backing I/O errors since the device was registered")
	})
	if got := guest(t, ctx, vm, sum); got != before {
		t.Errorf("with the backing disk back the volume reads %s; before %s", got, before)
	}

	if err := vm.Pull(ctx, replacement); err != nil {
		t.Fatal(err)
	}
	waitVolumeNamed(t, ctx, k8s, lossVolume, 2*time.Minute, "Degraded=True, CacheDeviceLost, the new SSD gone", func(f *fcv1.FlashCacheVolume) bool {
		d := condition(f, fcv1.ConditionDegraded)
		return d.Status == metav1.ConditionTrue && d.Reason == fcv1.ReasonCacheDeviceLost
	})

	if out, err := kubectl.Run("delete", "fcv", lossVolume, "--wait=false"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	eventually(t, ctx, 3*time.Minute, "the volume deleted despite its lost SSD", func(ctx context.Context) (string, bool, error) {
		var f fcv1.FlashCacheVolume
		err := k8s.Get(ctx, types.NamespacedName{Name: lossVolume}, &f)
		if err == nil {
			return fmt.Sprintf("still there: %+v", f.Status.Conditions), false, nil
		}
		return "", apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if out := guest(t, ctx, vm, "wipefs --no-act --output TYPE --noheadings "+backing.ByID()+" || true"); strings.Contains(out, "bcache") {
		t.Errorf("the backing disk still carries a bcache signature: %q", out)
	}
}
