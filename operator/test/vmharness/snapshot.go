package vmharness

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Booted snapshots. A boot under TCG costs 15-35 s of both host cores (firmware, kernel,
// systemd, sshd) and make test boots a guest some thirty times; most of those boots are a new
// VM's first, which proves nothing about the system under test. So the image is booted once
// with no data disks but room for them (a SCSI controller, PCIe root ports for NVMe drives), its
// RAM and devices saved with QEMU's migration to a file beside its root overlay, and a new VM
// starts from that state in a few seconds: its data disks are then hot-plugged, as a disk added
// to a running server is, and the guest's clock set. Reboots, power cuts and Start after Kill
// still boot for real: they are what the tests about boots measure.
//
// A VM whose machine differs from the snapshot's (memory, CPUs, shared folders, a tap card, more
// NVMe drives than root ports) boots for real, as does every VM when FLASHCACHE_VM_COLD_BOOT is
// set, for a test of the boot itself or to tell a snapshot's fault from the code's.

// snapshotLayout names the snapshot machine's devices; a change to them changes it, so that a
// cached snapshot of another machine is never restored.
const snapshotLayout = "2: hotplug SCSI controller, 6 PCIe root ports, maxcpus of 2 or more"

// ColdBootEnv, when set to anything but "" or "0", makes every Boot a real boot.
const ColdBootEnv = "FLASHCACHE_VM_COLD_BOOT"

// bootedSnapshot is one saved machine: its state (QEMU's migration stream) and its root overlay
// as it was when saved, on the image's base.
type bootedSnapshot struct{ dir string }

func (s bootedSnapshot) state() string   { return filepath.Join(s.dir, "state") }
func (s bootedSnapshot) overlay() string { return filepath.Join(s.dir, "root.qcow2") }

// restorable says whether a VM of opts and disks can start from a booted snapshot.
func restorable(opts Options, disks []Disk) bool {
	if v := os.Getenv(ColdBootEnv); v != "" && v != "0" {
		return false
	}
	if len(opts.Shares) > 0 || opts.Tap != "" {
		return false // 9p shares and tap cards are part of the machine, not hot-pluggable here
	}
	if opts.RootBase != "" {
		return false // the snapshot's root is on the image's own rootfs
	}
	nvme := 0
	for _, d := range disks {
		if d.Kind == NVMe {
			nvme++
		}
	}
	return nvme <= hotplugRootPorts
}

var qemuVersion = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("qemu-system-x86_64", "--version").Output()
	if err != nil {
		return "", fmt.Errorf("qemu-system-x86_64 --version: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
})

// snapshotFor is the image's booted snapshot of the machine opts describes, made first when
// missing: one real boot, under a lock every process on the host shares, so that two tests
// starting at once make it once.
func snapshotFor(ctx context.Context, opts Options) (*bootedSnapshot, error) {
	version, err := qemuVersion()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\n%s\nmemory %d cpus %d", version, snapshotLayout, opts.MemoryMiB, opts.CPUs)))
	snap := &bootedSnapshot{dir: filepath.Join(opts.Image, "booted-"+hex.EncodeToString(sum[:6]))}
	if _, err := os.Stat(snap.state()); err == nil {
		return snap, nil
	}
	unlock, err := Lock(ctx, snap.dir+".lock")
	if err != nil {
		return nil, fmt.Errorf("booted snapshot: waiting for another process making it: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(snap.state()); err == nil {
		return snap, nil // made meanwhile
	}
	if err := makeSnapshot(ctx, opts, snap); err != nil {
		return nil, fmt.Errorf("booted snapshot: %w", err)
	}
	return snap, nil
}

// Lock takes an exclusive lock on the file at path (created if missing), which every process on
// the host shares, giving up when ctx ends; unlock releases it. For what is made once and kept in
// the image's folder, so that two tests starting at once make it once.
func Lock(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// makeSnapshot boots the machine for real, lets it come to rest and saves it.
func makeSnapshot(ctx context.Context, opts Options, snap *bootedSnapshot) error {
	start := time.Now()
	work, err := os.MkdirTemp(filepath.Dir(snap.dir), ".booted-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	vm, err := newVM(ctx, Options{Image: opts.Image, WorkDir: work, MemoryMiB: opts.MemoryMiB, CPUs: opts.CPUs,
		BootTimeout: opts.BootTimeout, Logf: opts.Logf})
	if err != nil {
		return err
	}
	defer vm.Close()
	vm.hotplugMachine = true
	vm.logf("making the booted snapshot %s (a real boot, once per image and QEMU)", snap.dir)
	if err := vm.boot(ctx); err != nil {
		return err
	}
	// At rest: every unit started, the root disk's writes on the overlay. Then the harness's
	// session ends, so that no restored guest holds a connection from the past.
	if _, _, _, err := vm.Run(ctx, "systemctl is-system-running --wait; sync"); err != nil {
		return err
	}
	vm.closeClient()
	time.Sleep(time.Second)
	s, err := dialQMP(ctx, vm.qmpSocket())
	if err != nil {
		return err
	}
	defer s.close()
	state := filepath.Join(work, "state")
	if _, err := s.call("stop", nil); err != nil {
		return err
	}
	if _, err := s.call("migrate", map[string]any{"uri": "exec:cat > " + ShellQuote(state)}); err != nil {
		return err
	}
	for {
		raw, err := s.call("query-migrate", nil)
		if err != nil {
			return err
		}
		var m struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("query-migrate: %w", err)
		}
		if m.Status == "completed" {
			break
		}
		if m.Status == "failed" || m.Status == "cancelled" {
			return fmt.Errorf("saving the machine's state: migration %s: %s", m.Status, m.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	_, _ = s.call("quit", nil)
	vm.mu.Lock()
	exited := vm.exited
	vm.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		return errors.New("QEMU did not quit after saving the machine's state")
	}
	if err := os.MkdirAll(snap.dir, 0o755); err != nil {
		return err
	}
	// The state last: its presence says the snapshot is whole.
	if err := os.Rename(vm.root, snap.overlay()); err != nil {
		return err
	}
	if err := os.Rename(state, snap.state()); err != nil {
		return err
	}
	vm.logf("booted snapshot made in %s", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// restore starts the VM from snap instead of booting it: QEMU loads the saved machine, the data
// disks are plugged in, the guest runs on, and its clock is set to the host's.
func (vm *VM) restore(ctx context.Context, snap *bootedSnapshot) error {
	ctx, cancel := context.WithTimeout(ctx, vm.opts.BootTimeout)
	defer cancel()
	start := time.Now()
	if err := copyFile(snap.overlay(), vm.root); err != nil {
		return err
	}
	if err := vm.volatile.powerOn(ctx); err != nil {
		return err
	}
	if err := vm.launchWith("exec:cat " + ShellQuote(snap.state())); err != nil {
		return err
	}
	s, err := vm.waitIncoming(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	disks := vm.presentDisks()
	sockets := vm.volatile.sockets()
	ports := 0
	for i, d := range disks {
		if err := plugDisk(s, i, d, sockets[d.Serial], &ports); err != nil {
			return err
		}
	}
	if _, err := s.call("cont", nil); err != nil {
		return err
	}
	vm.mu.Lock()
	addr := "127.0.0.1:" + strconv.Itoa(vm.port)
	vm.mu.Unlock()
	var lastErr error
	for {
		client, err := vm.dial(ctx, addr, 3*time.Second)
		if err == nil {
			vm.mu.Lock()
			vm.client = client
			vm.mu.Unlock()
			break
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("ssh after the restore: %w (last attempt: %v)", ctx.Err(), lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Every restored guest starts with the same random state: mix some of the host's in.
	seed := make([]byte, 64)
	_, _ = rand.Read(seed)
	var wait strings.Builder
	for _, d := range disks {
		fmt.Fprintf(&wait, " %s", ShellQuote(d.ByID()))
	}
	script := fmt.Sprintf(`date -s @%d.%09d >/dev/null && echo %s > /dev/urandom &&
for link in%s; do
	n=0; until [ -e "$link" ]; do n=$((n+1)); [ $n -le 300 ] || { echo "$link did not appear" >&2; exit 1; }; sleep 0.1; done
done
udevadm settle`, time.Now().Unix(), time.Now().Nanosecond(), hex.EncodeToString(seed), wait.String())
	if out, err := vm.Output(ctx, script); err != nil {
		return fmt.Errorf("after the restore: %w\n%s", err, out)
	}
	vm.mu.Lock()
	vm.bootTime = time.Since(start)
	vm.mu.Unlock()
	vm.logf("restored from the booted snapshot, disks plugged in, ssh ready after %s (port %d)", vm.bootTime.Round(100*time.Millisecond), vm.port)
	return nil
}

// waitIncoming waits until QEMU has loaded the saved state (it then stays paused) and returns a
// QMP session on it.
func (vm *VM) waitIncoming(ctx context.Context) (*qmpSession, error) {
	vm.mu.Lock()
	exited := vm.exited
	vm.mu.Unlock()
	for {
		select {
		case <-exited:
			return nil, fmt.Errorf("QEMU exited while loading the saved state\n%s", vm.diagnostics())
		default:
		}
		if s, err := dialQMP(ctx, vm.qmpSocket()); err == nil {
			raw, err := s.call("query-status", nil)
			var st struct {
				Status string `json:"status"`
			}
			if err == nil && json.Unmarshal(raw, &st) == nil && st.Status == "paused" {
				return s, nil
			}
			s.close()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("loading the saved state: %w\n%s", ctx.Err(), vm.diagnostics())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// plugDisk adds disk i to a paused restored machine as launch would have given it at boot: the
// same backing (a file, or a volatile disk's nbdkit socket), throttling, and device properties.
// ports counts the NVMe root ports used so far.
func plugDisk(s *qmpSession, i int, d Disk, nbdSocket string, ports *int) error {
	node := "disk" + strconv.Itoa(i)
	blockdev := map[string]any{"node-name": node}
	if nbdSocket != "" {
		blockdev["driver"] = "nbd"
		blockdev["server"] = map[string]any{"type": "unix", "path": nbdSocket}
	} else {
		file := map[string]any{"driver": "file", "filename": d.Path}
		blockdev["driver"] = "raw"
		blockdev["file"] = file
		if d.Kind == NVMe {
			file["discard"] = "unmap"
		}
	}
	if d.Kind == NVMe {
		blockdev["discard"] = "unmap"
	}
	if _, err := s.call("blockdev-add", blockdev); err != nil {
		return err
	}
	switch d.Kind {
	case NVMe:
		port := hotplugRootPort(*ports)
		*ports++
		_, err := s.call("device_add", map[string]any{"driver": "nvme", "id": d.Serial, "drive": node, "serial": d.Serial,
			"smart_critical_warning": d.NVMeCriticalWarning, "bus": port})
		return err
	case HDD:
		if _, err := s.call("device_add", map[string]any{"driver": "scsi-hd", "id": d.Serial, "bus": "scsi0.0", "drive": node,
			"serial": d.Serial, "rotation_rate": 7200, "discard_granularity": 0}); err != nil {
			return err
		}
		if d.IOPS <= 0 && d.BytesPerSec <= 0 {
			return nil
		}
		_, err := s.call("block_set_io_throttle", ioThrottle(d, d.IOPS))
		return err
	}
	return fmt.Errorf("disk %s: unknown kind %v", d.Serial, d.Kind)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
