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
// Degraded, CacheDeviceLost, with an event, and deleting the volume still tears down what is
// left on the backing disk.
func testCacheLoss(t *testing.T, ctx context.Context, vm *vmharness.VM, k8s client.Client, kubectl *testenv.Kubectl, dir string, cache, backing vmharness.Disk) {
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
	if err := vm.Pull(ctx, cache); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	got := waitVolumeNamed(t, ctx, k8s, lossVolume, 2*time.Minute, "Degraded=True, CacheDeviceLost", func(f *fcv1.FlashCacheVolume) bool {
		d := condition(f, fcv1.ConditionDegraded)
		return d.Status == metav1.ConditionTrue && d.Reason == fcv1.ReasonCacheDeviceLost
	})
	d := condition(got, fcv1.ConditionDegraded)
	t.Logf("Degraded %s after the SSD went away: %s", since(began), d.Message)
	if !strings.Contains(d.Message, "no dirty data") {
		t.Errorf("the condition does not say whether dirty data was lost: %s", d.Message)
	}
	if p := condition(got, fcv1.ConditionProvisioned); p.Status != metav1.ConditionTrue {
		t.Errorf("Provisioned should stay True (the device was built and still serves): %+v", p)
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
