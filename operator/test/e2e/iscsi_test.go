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

const sanVolume = "san-data"

// testISCSIThroughTheAgent serves a guest disk as an iSCSI LUN (LIO, CHAP, 127.0.0.1) and has
// the agent build a volume on it with the credentials of a Secret read through the API server:
// a wrong password, then the right one, a lost and restored session, and teardown's logout.
func testISCSIThroughTheAgent(t *testing.T, ctx context.Context, vm *vmharness.VM, k8s client.Client, kubectl *testenv.Kubectl, dir string, cache, lun vmharness.Disk) {
	const right, wrong = "e2e-chap-pass-5821", "e2e-wrong-pass-3306"
	san := vmharness.ISCSITarget{IQN: "iqn.2003-01.io.flashcache.vm:e2e", User: "fc-e2e", Password: right, LUNs: []vmharness.Disk{lun}}
	if err := vm.ServeISCSI(ctx, san); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "san-chap", Namespace: chartNamespace},
		StringData: map[string]string{"node.session.auth.username": san.User, "node.session.auth.password": wrong},
	}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	apply(t, kubectl, dir, "san.yaml", fmt.Sprintf(`apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: %s}
spec:
  nodeName: %s
  cacheDevice: {path: %s}
  backingDevice:
    iscsi:
      portal: %s
      iqn: %s
      lun: 0
      chapSecretRef: {name: san-chap, namespace: %s}
  mode: writeback
  safety: {trustWriteCache: true}
  volume: {storageClassName: flashcache-san}
`, sanVolume, nodeName, cache.ByID(), vmharness.Portal, san.IQN, chartNamespace))
	waitSAN := func(t *testing.T, timeout time.Duration, what string, ok func(*fcv1.FlashCacheVolume) bool) *fcv1.FlashCacheVolume {
		t.Helper()
		return waitVolumeNamed(t, ctx, k8s, sanVolume, timeout, what, ok)
	}

	t.Run("AWrongPasswordIsAConditionAndTouchesNothing", func(t *testing.T) {
		got := waitSAN(t, 2*time.Minute, "Provisioned=False, ISCSILoginRefused", func(f *fcv1.FlashCacheVolume) bool {
			return condition(f, fcv1.ConditionProvisioned).Reason == fcv1.ReasonISCSILoginRefused
		})
		if msg := condition(got, fcv1.ConditionProvisioned).Message; !strings.Contains(msg, "chapSecretRef") {
			t.Errorf("the condition does not name the field: %s", msg)
		}
		if s := vm.ISCSISessions(ctx); s != "" {
			t.Errorf("sessions after a refused login: %q", s)
		}
		if sigs := guest(t, ctx, vm, "wipefs --noheadings "+cache.ByID()); sigs != "" {
			t.Errorf("the cache device was touched: %s", sigs)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("TheCorrectedSecretIsPickedUp", func(t *testing.T) {
		secret.StringData = map[string]string{"node.session.auth.username": san.User, "node.session.auth.password": right}
		if err := k8s.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		got := waitSAN(t, 3*time.Minute, "Ready on the LUN", func(f *fcv1.FlashCacheVolume) bool {
			return f.Status.Phase == fcv1.PhaseReady && f.Status.Device != nil
		})
		t.Logf("Ready %s after the Secret was corrected; device %s, mode %s", since(began), got.Status.Device.Name, got.Status.Device.CacheMode)
		if s := vm.ISCSISessions(ctx); s != "LOGGED_IN" {
			t.Errorf("sessions %q, want one LOGGED_IN", s)
		}
		if got.Status.Device.CacheMode != fcv1.CacheModeWriteback {
			t.Errorf("cache mode %s, want writeback", got.Status.Device.CacheMode)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("ALostSessionIsDegradedAndComesBackReady", func(t *testing.T) {
		guest(t, ctx, vm, "fio --name=san --filename=/dev/flashcache/"+sanVolume+" --rw=randwrite --bs=4k --size=256M "+
			"--io_size=8M --direct=1 --ioengine=psync --randrepeat=0 --output=/dev/null")
		sum := guest(t, ctx, vm, "dd if=/dev/flashcache/"+sanVolume+" bs=1M count=256 iflag=direct status=none | md5sum")
		if err := vm.SetISCSITargetEnabled(ctx, san, false); err != nil {
			t.Fatal(err)
		}
		enabled := false
		defer func() {
			// A failure below must not leave the target away: the next step deletes the volume.
			if !enabled {
				if err := vm.SetISCSITargetEnabled(ctx, san, true); err != nil {
					t.Error(err)
				}
			}
		}()
		began := time.Now()
		// The kernel holds I/O to a lost LUN for 120 s (the session's recovery timeout): a run that
		// was writing a superblock then (a cache mode change) reports the loss only after it.
		got := waitSAN(t, 3*time.Minute, "Degraded=True, ISCSISessionLost", func(f *fcv1.FlashCacheVolume) bool {
			d := condition(f, fcv1.ConditionDegraded)
			return d.Status == metav1.ConditionTrue && d.Reason == fcv1.ReasonISCSISessionLost
		})
		msg := condition(got, fcv1.ConditionDegraded).Message
		if !strings.Contains(msg, "dirty data stays") {
			t.Errorf("the condition does not say what becomes of dirty data: %s", msg)
		}
		t.Logf("Degraded %s after the target went away (phase %s): %s", since(began), got.Status.Phase, msg)
		if err := vm.SetISCSITargetEnabled(ctx, san, true); err != nil {
			t.Fatal(err)
		}
		enabled = true
		began = time.Now()
		got = waitSAN(t, 3*time.Minute, "Ready again, Degraded=False", func(f *fcv1.FlashCacheVolume) bool {
			return f.Status.Phase == fcv1.PhaseReady && condition(f, fcv1.ConditionDegraded).Status == metav1.ConditionFalse
		})
		t.Logf("Ready %s after the target came back", since(began))
		if after := guest(t, ctx, vm, "dd if=/dev/flashcache/"+sanVolume+" bs=1M count=256 iflag=direct status=none | md5sum"); after != sum {
			t.Errorf("after the outage the volume reads %s, before it %s", after, sum)
		}
		if got.Status.Device == nil || got.Status.Device.BackingUUID == "" {
			t.Errorf("device status after recovery: %+v", got.Status.Device)
		}
	})

	t.Run("DeletingTheVolumeLogsOut", func(t *testing.T) {
		if out, err := kubectl.Run("delete", "fcv", sanVolume, "--wait=false"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		eventually(t, ctx, 5*time.Minute, "the volume gone and the session logged out", func(ctx context.Context) (string, bool, error) {
			var f fcv1.FlashCacheVolume
			if err := k8s.Get(ctx, types.NamespacedName{Name: sanVolume}, &f); !apierrors.IsNotFound(err) {
				return fmt.Sprintf("volume still there (%v)", err), false, nil
			}
			s := vm.ISCSISessions(ctx)
			return "sessions: " + s, s == "", nil
		})
		if out, _, code, _ := vm.Run(ctx, "iscsiadm -m node -T "+san.IQN); code == 0 {
			t.Errorf("the node record is left (it would log in at boot):\n%s", out)
		}
	})

	// The passwords were in a Secret only: not in the agent's log, nor in any event.
	t.Run("NoPasswordLeaked", func(t *testing.T) {
		var events corev1.EventList
		if err := k8s.List(ctx, &events); err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		for _, e := range events.Items {
			text.WriteString(e.Reason + " " + e.Message + "\n")
		}
		text.WriteString(guest(t, ctx, vm, "cat /root/agent.log"))
		for _, p := range []string{right, wrong} {
			if strings.Contains(text.String(), p) {
				t.Errorf("a CHAP password is in the agent's log or an event")
			}
		}
		if !strings.Contains(text.String(), fcv1.ReasonISCSILoginRefused) || !strings.Contains(text.String(), fcv1.ReasonISCSISessionLost) {
			t.Errorf("the events and the log do not name both the refusal and the lost session: the check above proved nothing")
		}
	})
}
