//go:build vm

package enginevm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// The guest exports its own disks through LIO and logs in to them over 127.0.0.1.
const (
	chapPassword  = "right-password-1234"
	wrongPassword = "wrong-password-9876"
)

var (
	cacheI  = vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-cache-i", Size: 1 << 30}
	sanLUN0 = vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-san-lun0", Size: 1 << 30}
	sanLUN1 = vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-san-lun1", Size: 256 << 20}
	san     = vmharness.ISCSITarget{IQN: "iqn.2003-01.io.flashcache.vm:san1", User: "fc-initiator", Password: chapPassword,
		LUNs: []vmharness.Disk{sanLUN0, sanLUN1}}
	targetIQN = san.IQN
)

func TestISCSIBackingDevice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	g := bootGuest(t, ctx, cacheI, sanLUN0, sanLUN1)
	vm := g.vm
	if err := vm.ServeISCSI(ctx, san); err != nil {
		t.Fatal(err)
	}

	volumeFile := func(t *testing.T, name, password string) {
		t.Helper()
		doc := fmt.Sprintf(`apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: san}
spec:
  nodeName: vm
  cacheDevice: {path: %s}
  backingDevice:
    iscsi:
      portal: 127.0.0.1
      iqn: %s
      lun: 0
      chapSecretRef: {namespace: flashcache-system, name: san1-chap}
%s---
apiVersion: v1
kind: Secret
metadata: {namespace: flashcache-system, name: san1-chap}
stringData:
  node.session.auth.username: %s
  node.session.auth.password: %s
`, cacheI.ByID(), targetIQN, trusted, san.User, password)
		local := filepath.Join(g.dir, name)
		if err := os.WriteFile(local, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := vm.CopyFile(ctx, local, "/root/"+name, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	volumeFile(t, "san-wrong.yaml", wrongPassword)
	volumeFile(t, "san.yaml", chapPassword)
	sessions := func(t *testing.T) string { return vm.ISCSISessions(ctx) }
	sessionState := func(t *testing.T, want string) {
		t.Helper()
		if err := vm.WaitISCSISessions(ctx, want, 90*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	runSteps(t, []step{
		{"WrongCHAPIsRefusedAndNothingIsTouched", func(t *testing.T) {
			r, code, stderr := g.node(t, "apply", "san-wrong.yaml")
			if code == 0 || len(r.Volumes) != 1 || r.Volumes[0].Error == nil {
				t.Fatalf("apply with a wrong password: exit %d\n%s", code, r)
			}
			e := r.Volumes[0].Error
			if e.Reason != "ISCSILoginRefused" || e.Field != "backingDevice.iscsi.chapSecretRef" {
				t.Errorf("error %s on %s: %s", e.Reason, e.Field, e.Message)
			}
			for _, secret := range []string{wrongPassword, chapPassword} {
				if strings.Contains(e.Message+stderr, secret) {
					t.Errorf("a password is in the output: %s %s", e.Message, stderr)
				}
			}
			if s := sessions(t); s != "" {
				t.Errorf("a session is left: %s", s)
			}
			if sigs := g.sh(t, "wipefs --noheadings "+cacheI.ByID()); sigs != "" {
				t.Errorf("the cache device was touched: %s", sigs)
			}
		}},
		{"BuildsAWritebackVolumeOnTheLUN", func(t *testing.T) {
			r, code, _ := g.node(t, "apply", "san.yaml")
			if code != 0 || !strings.HasPrefix(r.stepKinds(), "iscsi-login ") {
				t.Fatalf("apply: exit %d, steps %s\n%s", code, r.stepKinds(), r)
			}
			if st := r.Volumes[0].Status; st == nil || st.CacheMode != "writeback" {
				t.Errorf("status %+v", st)
			}
			if s := sessions(t); s != "LOGGED_IN" {
				t.Errorf("sessions %q", s)
			}
			if out := g.sh(t, "iscsiadm -m node -T "+targetIQN+" -p 127.0.0.1:3260 | grep -E '^node.startup'"); !strings.Contains(out, "automatic") {
				t.Errorf("the session does not start at boot: %s", out)
			}
			if out := g.sh(t, "grep -rl "+chapPassword+" /run/flashcache /var/lib/flashcache 2>/dev/null || true"); out != "" {
				t.Errorf("the password was written to %s", out)
			}
			if r, _, _ := g.node(t, "apply", "san.yaml"); r.Changed {
				t.Errorf("second apply changed: %s", r.stepKinds())
			}
		}},
		{"FlushedDataIsOnTheLUN", func(t *testing.T) {
			g.sh(t, "head -c 8M /dev/urandom > /root/data && dd if=/root/data of=/dev/flashcache/san bs=1M oflag=direct status=none")
			if dirty := g.sh(t, "cat /sys/block/$(basename $(readlink -f /dev/flashcache/san))/bcache/dirty_data"); dirty == "0.0k" {
				t.Fatalf("nothing dirty after the write: the volume is not in writeback")
			}
			if r, code, _ := g.node(t, "flush", "san.yaml"); code != 0 {
				t.Fatalf("flush: %s", r)
			}
			// The disk the target exports, read on the target's side, past bcache's data offset.
			offset := g.sh(t, "bcache-super-show "+sanLUN0.ByID()+" | awk '/dev.data.first_sector/ {print $2}'")
			want := g.sh(t, "md5sum < /root/data")
			got := g.sh(t, fmt.Sprintf("dd if=%s bs=1M skip=$((%s*512)) count=8 iflag=direct,skip_bytes status=none | md5sum", sanLUN0.ByID(), offset))
			if got != want {
				t.Errorf("the LUN holds %s, the data written was %s", got, want)
			}
			g.node(t, "release", "san.yaml")
		}},
		{"SessionLossIsReportedAndRecoveryNeedsNoRebuild", func(t *testing.T) {
			if err := vm.SetISCSITargetEnabled(ctx, san, false); err != nil {
				t.Fatal(err)
			}
			sessionState(t, "FAILED")
			r, code, _ := g.node(t, "apply", "san.yaml")
			if code == 0 || r.Volumes[0].Error == nil || r.Volumes[0].Error.Reason != "ISCSISessionLost" ||
				!strings.Contains(r.Volumes[0].Error.Message, "dirty data stays") {
				t.Fatalf("apply with the session down: exit %d\n%s", code, r)
			}
			if err := vm.SetISCSITargetEnabled(ctx, san, true); err != nil {
				t.Fatal(err)
			}
			sessionState(t, "LOGGED_IN")
			r, code, _ = g.node(t, "apply", "san.yaml")
			if code != 0 || strings.Contains(r.stepKinds(), "make-bcache") || strings.Contains(r.stepKinds(), "iscsi-login") {
				t.Fatalf("apply after the session returned: exit %d, steps %s", code, r.stepKinds())
			}
			if got, want := g.sh(t, "head -c 8M /dev/flashcache/san | md5sum"), g.sh(t, "md5sum < /root/data"); got != want {
				t.Errorf("after the outage the volume reads %s, want %s", got, want)
			}
		}},
		{"TeardownAfterABootWithoutTheSessionLogsInFirst", func(t *testing.T) {
			// As after a boot that did not log in: the bcache device stopped, its cache set
			// unregistered, no session. Our superblock is still on the LUN.
			g.sh(t, "dev=$(basename $(readlink -f /dev/flashcache/san)) && set=$(basename $(readlink -f /sys/block/$dev/bcache/cache)) && "+
				"echo 1 > /sys/block/$dev/bcache/stop && echo 1 > /sys/fs/bcache/$set/unregister && "+
				"for i in $(seq 600); do ls /sys/fs/bcache/ | grep -q -- - || break; sleep 0.1; done && ! ls /sys/fs/bcache/ | grep -q -- - && "+
				"iscsiadm -m node -T "+targetIQN+" -p "+vmharness.Portal+" -u")
			sessionState(t, "")
			r, code, _ := g.node(t, "teardown", "san.yaml", "--confirm")
			if code != 0 || r.Volumes[0].Teardown == nil {
				t.Fatalf("teardown: exit %d\n%s", code, r)
			}
			steps := strings.Join(r.Volumes[0].Teardown.Steps, "\n")
			if !strings.Contains(steps, "iscsi-login") || !strings.Contains(steps, "logged out of "+targetIQN) {
				t.Errorf("teardown should report its login and its logout; steps:\n%s", steps)
			}
			if s := sessions(t); s != "" {
				t.Errorf("sessions left: %q", s)
			}
			if sigs := g.sh(t, "blockdev --flushbufs "+sanLUN0.ByID()+" && wipefs --noheadings "+sanLUN0.ByID()); sigs != "" {
				t.Errorf("the LUN still carries %s", sigs)
			}
			// Built again for the next step, on the blank LUN.
			if r, code, _ := g.node(t, "apply", "san.yaml"); code != 0 {
				t.Fatalf("apply after teardown: exit %d\n%s", code, r)
			}
		}},
		{"TeardownStopsARegistrationMadeDuringIt", func(t *testing.T) {
			// udev's rules register a device carrying a bcache superblock when it appears or
			// changes, at a moment of their choosing: a CI run's teardown, just logged in, found
			// the LUN held by such a registration for 30 s. Here, with the session up, the bcache
			// device stopped and its cache set unregistered, a stand-in holds the LUN and the cache
			// partition (so teardown's look finds neither registered), and lets each go and
			// registers it once teardown's first wipefs erasing it has failed on it: that brings
			// the cache set back too. It waits for teardown's own attempt, not for a time: a fixed
			// 2 s was shorter than teardown's look in a loaded CI run, which then found the LUN
			// registered already. udev's own rules are set aside meanwhile: they register a
			// device again as soon as bcache closes it.
			g.sh(t, "ln -sf /dev/null /etc/udev/rules.d/69-bcache.rules && udevadm control --reload")
			defer g.sh(t, "rm -f /etc/udev/rules.d/69-bcache.rules && udevadm control --reload")
			cachePart := g.sh(t, "dev=$(basename $(readlink -f /dev/flashcache/san)) && set=$(basename $(readlink -f /sys/block/$dev/bcache/cache)) && "+
				"lun=$(basename $(readlink -f "+san.LUNPath(0)+")) && cache=$(basename $(dirname $(readlink -f /sys/fs/bcache/$set/cache0))) && "+
				"echo 1 > /sys/block/$dev/bcache/stop && echo 1 > /sys/fs/bcache/$set/unregister && "+
				"for i in $(seq 600); do ls /sys/fs/bcache/ | grep -q -- - || [ -e /sys/block/$lun/bcache ] || break; "+
				"[ -e /sys/block/$lun/bcache/dev ] || echo 1 > /sys/block/$lun/bcache/stop 2>/dev/null; sleep 0.1; done && "+
				"! ls /sys/fs/bcache/ | grep -q -- - && [ ! -e /sys/block/$lun/bcache ] && udevadm settle && echo /dev/$cache")
			// Teardown's wipefs lives for 10 ms; a stand-in scanning /proc for it caught one only by
			// chance, once after 30 s (a CI run's teardown timed out waiting). A wipefs first on root's
			// PATH logs each run as it ends, so the stand-in sees every attempt, and runs under a
			// lock the stand-in takes to let a device go and register it: no attempt in between.
			wrapper := `#!/bin/sh
exec 9>/run/wipefs.lock
flock 9
/usr/sbin/wipefs "$@"; rc=$?
echo "$rc $*" >> /run/wipefs-runs.log
exit $rc
`
			g.sh(t, "cat > /usr/local/sbin/wipefs <<'EOF'\n"+wrapper+"EOF\n"+
				"chmod +x /usr/local/sbin/wipefs && : > /run/wipefs-runs.log && [ \"$(command -v wipefs)\" = /usr/local/sbin/wipefs ]")
			defer g.sh(t, "rm -f /usr/local/sbin/wipefs /run/wipefs-runs.log /run/wipefs.lock")
			lateRegistrar := `import fcntl, os, sys, time
def failed_erasing(device):
    # An erasing wipefs (not the --no-act look) that failed: teardown's own attempt on the held device.
    with open("/run/wipefs-runs.log") as f:
        for line in f:
            rc, *argv = line.split()
            if rc != "0" and "--all" in argv and os.path.realpath(argv[-1]) == device:
                return True
def wait(what, found):
    deadline = time.time() + 120
    while not found():
        if time.time() > deadline:
            sys.exit("no " + what + " in 120 s")
        time.sleep(0.02)
lock = open("/run/wipefs.lock", "w")
held = []
for device in map(os.path.realpath, sys.argv[1:]):
    for attempt in range(100):
        try:
            held.append((os.open(device, os.O_RDONLY | os.O_EXCL), device))
            break
        except OSError:  # bcache lets a device go a moment after its registration is gone
            time.sleep(0.1)
    else:
        sys.exit(device + " stayed busy")
print("held", flush=True)
for fd, device in held:
    wait("failed wipefs erasing " + device, lambda: failed_erasing(device))
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.close(fd)
    with open("/sys/fs/bcache/register_quiet", "w") as f:
        f.write(device)
    fcntl.flock(lock, fcntl.LOCK_UN)
`
			g.sh(t, "cat > /root/late-registrar.py <<'EOF'\n"+lateRegistrar+"EOF\n"+
				"setsid python3 /root/late-registrar.py "+san.LUNPath(0)+" "+cachePart+" >/root/late-registrar.log 2>&1 </dev/null & "+
				"for i in $(seq 100); do grep -q held /root/late-registrar.log && break; sleep 0.1; done; grep held /root/late-registrar.log")
			r, code, _ := g.node(t, "teardown", "san.yaml", "--confirm")
			if log := g.sh(t, "cat /root/late-registrar.log"); log != "held" {
				t.Errorf("the stand-in for udev: %s", log)
			}
			if code != 0 || r.Volumes[0].Teardown == nil {
				t.Fatalf("teardown: exit %d\n%s", code, r)
			}
			if steps := strings.Join(r.Volumes[0].Teardown.Steps, "\n"); !strings.Contains(steps, "made during teardown") ||
				!strings.Contains(steps, "again, registered during teardown") {
				t.Errorf("teardown should report the registrations it stopped; steps:\n%s", steps)
			}
			if sets := g.sh(t, "ls /sys/fs/bcache/ | grep -- - || true"); sets != "" {
				t.Errorf("cache sets left registered: %s", sets)
			}
			if sigs := g.sh(t, "blockdev --flushbufs "+sanLUN0.ByID()+" && wipefs --noheadings "+sanLUN0.ByID()); sigs != "" {
				t.Errorf("the LUN still carries %s", sigs)
			}
			if r, code, _ := g.node(t, "apply", "san.yaml"); code != 0 {
				t.Fatalf("apply after teardown: exit %d\n%s", code, r)
			}
		}},
		{"TeardownLogsOutOnlyWhenNoOtherLUNIsInUse", func(t *testing.T) {
			// Another LUN of the same session, in use: the session must stay.
			lun1 := g.sh(t, "basename $(readlink -f "+san.LUNPath(1)+")")
			g.sh(t, "mkfs.ext4 -q /dev/"+lun1+" && mkdir -p /mnt/lun1 && mount /dev/"+lun1+" /mnt/lun1")
			r, code, _ := g.node(t, "teardown", "san.yaml", "--confirm")
			if code != 0 || r.Volumes[0].Teardown == nil {
				t.Fatalf("teardown: exit %d\n%s", code, r)
			}
			steps := strings.Join(r.Volumes[0].Teardown.Steps, "\n")
			if !strings.Contains(steps, "left the session") || !strings.Contains(steps, "mounted at /mnt/lun1") {
				t.Errorf("teardown steps:\n%s", steps)
			}
			if s := sessions(t); s != "LOGGED_IN" {
				t.Errorf("the shared session is gone: %q", s)
			}
			// The target's disk, read past the guest's page cache: LIO wrote it underneath.
			if sigs := g.sh(t, "blockdev --flushbufs "+sanLUN0.ByID()+" && wipefs --noheadings "+sanLUN0.ByID()); sigs != "" {
				t.Errorf("the LUN still carries %s", sigs)
			}
			g.sh(t, "umount /mnt/lun1")
			r, code, _ = g.node(t, "teardown", "san.yaml", "--confirm")
			steps = strings.Join(r.Volumes[0].Teardown.Steps, "\n")
			if code != 0 || !strings.Contains(steps, "logged out of "+targetIQN) {
				t.Fatalf("second teardown: exit %d, steps:\n%s", code, steps)
			}
			if s := sessions(t); s != "" {
				t.Errorf("sessions left: %q", s)
			}
			if out, _, code, _ := vm.Run(ctx, "iscsiadm -m node -T "+targetIQN); code == 0 {
				t.Errorf("the node record is left (it would log in at boot):\n%s", out)
			}
		}},
	})
}
