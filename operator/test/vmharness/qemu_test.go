package vmharness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestQemuArgsGiveEachDiskKindItsDevice(t *testing.T) {
	disks, err := prepareDisks([]Disk{
		{Kind: NVMe, Serial: "cache0", Size: 4 << 30},
		{Kind: HDD, Serial: "slow0", Size: 8 << 30},
		{Kind: HDD, Serial: "slow1", Size: 8 << 30, IOPS: -1, BytesPerSec: 10 << 20},
	}, "/work,dir")
	if err != nil {
		t.Fatal(err)
	}
	args := qemuArgs(qemuConfig{kernel: "k", initrd: "i", cmdline: "c", rootDisk: "/r.qcow2",
		disks: disks, memoryMiB: 2048, cpus: 2, sshPort: 2222, consoleLog: "/c.log", qmpSocket: "/work/qmp.sock"})
	joined := strings.Join(args, " ")

	for _, want := range []string{
		"-drive if=none,id=disk0,format=raw,file=/work,,dir/disk-cache0.img,discard=unmap",
		"-device nvme,id=cache0,drive=disk0,serial=cache0",
		"-drive if=none,id=disk1,format=raw,file=/work,,dir/disk-slow0.img,throttling.iops-total=150,throttling.bps-total=157286400",
		"-device scsi-hd,id=slow0,bus=scsi0.0,drive=disk1,serial=slow0,rotation_rate=7200,discard_granularity=0",
		"-drive if=none,id=disk2,format=raw,file=/work,,dir/disk-slow1.img,throttling.bps-total=10485760 ",
		"hostfwd=tcp:127.0.0.1:2222-:22",
		"-accel tcg",
		"-no-reboot",
		"-qmp unix:/work/qmp.sock,server=on,wait=off",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "restrict=") {
		t.Errorf("restricted user networking would cut the guest off from HostAddr:\n%s", joined)
	}
	if n := strings.Count(joined, "virtio-scsi-pci"); n != 1 {
		t.Errorf("want one virtio-scsi controller for all HDDs, got %d", n)
	}
	if !slices.Contains(args, "c") {
		t.Errorf("kernel cmdline not passed as one argument: %q", args)
	}
}

func TestVolatileHDDIsServedByNbdkitBehindTheSameDevice(t *testing.T) {
	work := "/w,d"
	disks, err := prepareDisks([]Disk{
		{Kind: HDD, Serial: "honest0", Size: 8 << 30, Cache: CacheVolatileHonest},
		{Kind: HDD, Serial: "liar0", Size: 8 << 30, Cache: CacheVolatileLying, IOPS: -1},
	}, work)
	if err != nil {
		t.Fatal(err)
	}
	honest, err := newVolatileDisk(disks[0], work)
	if err != nil {
		t.Fatal(err)
	}
	liar, err := newVolatileDisk(disks[1], work)
	if err != nil {
		t.Fatal(err)
	}
	if honest.front != nil || liar.front == nil {
		t.Fatalf("only the liar needs a front server: honest %v, liar %v", honest.front, liar.front)
	}
	if honest.guestSocket() != "/w,d/nbd-honest0-cache.sock" || liar.guestSocket() != "/w,d/nbd-liar0-liar.sock" {
		t.Errorf("guest sockets %s, %s", honest.guestSocket(), liar.guestSocket())
	}

	args := qemuArgs(qemuConfig{kernel: "k", initrd: "i", cmdline: "c", rootDisk: "/r.qcow2",
		disks: disks, memoryMiB: 2048, cpus: 2, sshPort: 2222, consoleLog: "/c.log",
		nbdSockets: map[string]string{"honest0": honest.guestSocket(), "liar0": liar.guestSocket()}})
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-drive if=none,id=disk0,driver=nbd,server.type=unix,server.path=/w,,d/nbd-honest0-cache.sock,throttling.iops-total=150,throttling.bps-total=157286400 ",
		"-device scsi-hd,id=honest0,bus=scsi0.0,drive=disk0,serial=honest0,rotation_rate=7200,discard_granularity=0",
		"-drive if=none,id=disk1,driver=nbd,server.type=unix,server.path=/w,,d/nbd-liar0-liar.sock,throttling.bps-total=157286400 ",
		"-device scsi-hd,id=liar0,bus=scsi0.0,drive=disk1,serial=liar0,rotation_rate=7200,discard_granularity=0",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "no-flush") || strings.Contains(joined, "cache.direct") {
		t.Errorf("QEMU must forward flushes and report a write-back cache: %s", joined)
	}

	cache := strings.Join(honest.cache.args, " ")
	for _, want := range []string{"--filter=cache --filter=delay --filter=fua file file=/w,d/disk-honest0.img",
		"cache=writeback", "cache-min-block-size=1048576", "delay-write=8ms", "fuamode=discard", "--foreground"} {
		if !strings.Contains(cache, want) {
			t.Errorf("cache server args lack %q: %s", want, cache)
		}
	}
	if strings.Contains(cache, "cache-max-size") {
		t.Errorf("cache-max-size drops dirty blocks in nbdkit 1.32: %s", cache)
	}
	if liarCache := strings.Join(liar.cache.args, " "); strings.ReplaceAll(liarCache, "liar0", "honest0") != cache {
		t.Errorf("a liar's cache should be the honest one:\n%s\n%s", liarCache, cache)
	}
	front := strings.Join(liar.front.args, " ")
	if !strings.Contains(front, "--filter=fua nbd socket=/w,d/nbd-liar0-cache.sock fuamode=discard") {
		t.Errorf("liar front args: %s", front)
	}

	// An NVMe disk's volatile cache pays an SSD's flush, and keeps its discard.
	ssds, err := prepareDisks([]Disk{{Kind: NVMe, Serial: "ssd0", Size: 1 << 20, Cache: CacheVolatileHonest}}, "/w,d")
	if err != nil {
		t.Fatal(err)
	}
	ssd, err := newVolatileDisk(ssds[0], "/w,d")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ssd.cache.args, " "); !strings.Contains(got, "delay-write=1ms") {
		t.Errorf("SSD cache server args: %s", got)
	}
	ssdArgs := strings.Join(qemuArgs(qemuConfig{kernel: "k", initrd: "i", cmdline: "c", rootDisk: "/r.qcow2", disks: ssds,
		memoryMiB: 2048, cpus: 2, sshPort: 2222, consoleLog: "/c.log", nbdSockets: map[string]string{"ssd0": ssd.guestSocket()}}), " ")
	if !strings.Contains(ssdArgs, "driver=nbd,server.type=unix,server.path=/w,,d/nbd-ssd0-cache.sock,discard=unmap -device nvme,id=ssd0") {
		t.Errorf("SSD args: %s", ssdArgs)
	}

	for name, d := range map[string]Disk{
		"unknown cache": {Kind: HDD, Serial: "a", Size: 4096, Cache: 7},
	} {
		if _, err := prepareDisks([]Disk{d}, "/w"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	long := Disk{Kind: HDD, Serial: "h", Size: 4096, Cache: CacheVolatileHonest, Path: "/x.img"}
	if _, err := newVolatileDisk(long, "/"+strings.Repeat("d", 100)); err == nil {
		t.Error("a socket path longer than sun_path was accepted")
	}
}

func TestPrepareDisksRejectsWhatWouldBreakByIDNames(t *testing.T) {
	for name, disks := range map[string][]Disk{
		"long serial":   {{Kind: NVMe, Serial: "abcdefghijklmnopqrstu", Size: 4096}},
		"space":         {{Kind: HDD, Serial: "a b", Size: 4096}},
		"duplicate":     {{Kind: NVMe, Serial: "a", Size: 4096}, {Kind: HDD, Serial: "a", Size: 4096}},
		"odd size":      {{Kind: HDD, Serial: "a", Size: 1000}},
		"no kind":       {{Serial: "a", Size: 4096}},
		"empty serial":  {{Kind: NVMe, Size: 4096}},
		"negative size": {{Kind: NVMe, Serial: "a", Size: -4096}},
	} {
		if _, err := prepareDisks(disks, "/w"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestBackingFileIsCreatedSparseAndKeptButNeverResized(t *testing.T) {
	d := Disk{Kind: HDD, Serial: "a", Size: 1 << 30, Path: filepath.Join(t.TempDir(), "a.img")}
	if err := ensureBackingFile(d); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	if blocks := st.Sys().(*syscall.Stat_t).Blocks; blocks != 0 {
		t.Errorf("new backing file uses %d blocks, want a sparse file", blocks)
	}
	if err := ensureBackingFile(d); err != nil {
		t.Fatalf("existing file of the right size: %v", err)
	}
	d.Size *= 2
	if err := ensureBackingFile(d); err == nil {
		t.Fatal("a file of another size was accepted")
	}
}

func TestByIDNamesFollowUdev(t *testing.T) {
	if got := (Disk{Kind: NVMe, Serial: "c0"}).ByID(); got != "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_c0" {
		t.Error(got)
	}
	if got := (Disk{Kind: HDD, Serial: "h0"}).ByID(); got != "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_h0" {
		t.Error(got)
	}
}

func TestShellQuote(t *testing.T) {
	if got := ShellQuote("it's"); got != `'it'\''s'` {
		t.Error(got)
	}
}

func TestQemuArgsShareFoldersAndAddTheTapCard(t *testing.T) {
	args := qemuArgs(qemuConfig{kernel: "k", initrd: "i", cmdline: "c", rootDisk: "/r.qcow2", memoryMiB: 2048, cpus: 2,
		sshPort: 2222, consoleLog: "/c.log", tap: "fcdemo0", shares: []Share{{Tag: "bin", Path: "/cache/a,b"}}})
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-netdev tap,id=net1,script=no,downscript=no,ifname=fcdemo0",
		"-device virtio-net-pci,netdev=net1,mac=" + TapMAC,
		"-virtfs local,id=share0,path=/cache/a,,b,mount_tag=bin,security_model=none,readonly=on",
		"hostfwd=tcp:127.0.0.1:2222-:22",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q:\n%s", want, joined)
		}
	}
	if plain := strings.Join(qemuArgs(qemuConfig{sshPort: 2222}), " "); strings.Contains(plain, "tap") || strings.Contains(plain, "virtfs") {
		t.Errorf("a VM without a tap or shares got them:\n%s", plain)
	}
}

func TestStallIsReportedOnlyFromTheBootBeingWaitedFor(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	earlier := "[  280.663783] watchdog: BUG: soft lockup - CPU#0 stuck for 261s! [cryptomgr_test:52]\n"
	if err := os.WriteFile(console, []byte(earlier+"[    0.000000] Linux version 6.1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	at := fileSize(console)
	if got := stallIn(consoleSince(console, at)); got != "" {
		t.Errorf("a stall of an earlier boot was reported: %q", got)
	}
	if got := stallIn(consoleSince(console, 0)); got != strings.TrimSpace(earlier) {
		t.Errorf("the stall from the start = %q", got)
	}
	f, err := os.OpenFile(console, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("[   31.2] rcu: INFO: rcu_preempt self-detected stall on CPU\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := stallIn(consoleSince(console, at)); got != "[   31.2] rcu: INFO: rcu_preempt self-detected stall on CPU" {
		t.Errorf("the new boot's stall: %q", got)
	}
}

func TestSSHReadyIsReadOnlyFromTheBootBeingWaitedFor(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	if err := os.WriteFile(console, []byte("flashcache-vm: sshd is listening\n[    0.000000] Linux version 6.1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	at := fileSize(console)
	if bytes.Contains(consoleSince(console, at), sshReadyMarker) {
		t.Error("the marker of an earlier boot counted")
	}
	f, err := os.OpenFile(console, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("Debian GNU/Linux 12 flashcache-vm ttyS0\nflashcache-vm: sshd is listening\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !bytes.Contains(consoleSince(console, at), sshReadyMarker) {
		t.Error("the new boot's marker was not seen")
	}
}

// A booted snapshot's machine and the one restored from it: the same devices, room for disks and
// none of their own (they are plugged in after the restore), the saved state loaded instead of a
// boot.
func TestSnapshotMachineHasRoomForDisksAndNoneOfItsOwn(t *testing.T) {
	disks, err := prepareDisks([]Disk{{Kind: NVMe, Serial: "c", Size: 4096}, {Kind: HDD, Serial: "h", Size: 4096}}, "/w")
	if err != nil {
		t.Fatal(err)
	}
	saved := strings.Join(qemuArgs(qemuConfig{rootDisk: "/r.qcow2", sshPort: 2222, hotplugSlots: true}), " ")
	restored := qemuArgs(qemuConfig{rootDisk: "/r2.qcow2", sshPort: 2223, hotplugSlots: true, incoming: "exec:cat '/s/state'"})
	if got := strings.Count(saved, "pcie-root-port"); got != hotplugRootPorts {
		t.Errorf("%d root ports, want %d:\n%s", got, hotplugRootPorts, saved)
	}
	if strings.Count(saved, "virtio-scsi-pci,id=scsi0") != 1 || strings.Contains(saved, "-incoming") {
		t.Errorf("the snapshot's machine: want one SCSI controller and a boot:\n%s", saved)
	}
	joined := strings.Join(restored, " ")
	if !strings.Contains(joined, "-incoming exec:cat '/s/state'") {
		t.Errorf("the restored machine does not load the state:\n%s", joined)
	}
	devices := func(args []string) (d []string) {
		for i := range args {
			if args[i] == "-device" {
				d = append(d, args[i+1])
			}
		}
		return d
	}
	if s, r := devices(strings.Fields(saved)), devices(restored); strings.Join(s, " ") != strings.Join(r, " ") {
		t.Errorf("the restored machine's devices differ from the saved one's:\n%v\n%v", s, r)
	}
	// HDDs given to a hot-plug machine use its SCSI controller, not one more.
	withDisks := strings.Join(qemuArgs(qemuConfig{rootDisk: "/r.qcow2", disks: disks, hotplugSlots: true}), " ")
	if strings.Count(withDisks, "virtio-scsi-pci") != 1 {
		t.Errorf("a second SCSI controller:\n%s", withDisks)
	}
}

func TestASilentConsoleCountsAsAStallOnlyAfterTheLimit(t *testing.T) {
	quiet := consoleSilence{limit: 90 * time.Second}
	t0 := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	boot := []byte("[    1.560924] NET: Registered PF_PACKET protocol family\n[    1.564044] sched_clock: Marking stable\n")
	if got := quiet.check(boot, t0); got != "" {
		t.Errorf("first look: %q", got)
	}
	if got := quiet.check(boot, t0.Add(89*time.Second)); got != "" {
		t.Errorf("silent for 89 s: %q", got)
	}
	grown := append(boot, "[    2.1] Run /init as init process\n"...)
	if got := quiet.check(grown, t0.Add(89*time.Second)); got != "" {
		t.Errorf("the console grew: %q", got)
	}
	if got := quiet.check(grown, t0.Add(170*time.Second)); got != "" {
		t.Errorf("silent for 81 s since it grew: %q", got)
	}
	got := quiet.check(grown, t0.Add(179*time.Second))
	if !strings.Contains(got, "silent for 1m30s") || !strings.Contains(got, "Run /init as init process") {
		t.Errorf("silent for 90 s since it grew: %q", got)
	}
}

func TestASilentConsoleAfterSshdListensIsNoStall(t *testing.T) {
	quiet := consoleSilence{limit: 90 * time.Second}
	t0 := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	up := []byte("[   18.2] systemd[1]: Reached target multi-user.target\nflashcache-vm: sshd is listening\n")
	quiet.stalled(up, t0)
	if got := quiet.stalled(up, t0.Add(10*time.Minute)); got != "" {
		t.Errorf("a guest that is up and quiet: %q", got)
	}
	stalled := []byte("[   31.2] rcu: INFO: rcu_preempt self-detected stall on CPU\n")
	if got := quiet.stalled(stalled, t0); got != "[   31.2] rcu: INFO: rcu_preempt self-detected stall on CPU" {
		t.Errorf("a reported stall: %q", got)
	}
}

// recordingTB is a test that can be made to fail without failing the real one: it keeps what is
// logged and runs its cleanups when told.
type recordingTB struct {
	testing.TB
	failed   bool
	logs     []string
	cleanups []func()
}

func (r *recordingTB) Failed() bool            { return r.failed }
func (r *recordingTB) Cleanup(f func())        { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) Logf(f string, a ...any) { r.logs = append(r.logs, fmt.Sprintf(f, a...)) }
func (r *recordingTB) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestAFailedTestPrintsWhatTheGuestsKernelSaid(t *testing.T) {
	dir := t.TempDir()
	vm := &VM{console: filepath.Join(dir, "console.log"), qemuLog: filepath.Join(dir, "qemu.log"), volatile: &volatileSet{}}
	said := "[ 1862.1] nvme nvme0: I/O 12 QID 1 timeout, reset controller\n"
	if err := os.WriteFile(vm.console, []byte("[    0.0] Linux version 6.1.0\n"+said), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, failed := range []bool{false, true} {
		tb := &recordingTB{TB: t, failed: failed}
		vm.LogDiagnosticsOnFailure(tb)
		tb.end()
		printed := strings.Join(tb.logs, "\n")
		if failed != strings.Contains(printed, strings.TrimSpace(said)) {
			t.Errorf("failed=%v: the test printed %q", failed, printed)
		}
	}
}

// The kernel's complaint stays in the diagnostics when later output has pushed it out of the
// console's tail (a test fails minutes after the NVMe timed out), and routine lines stay out.
func TestTheKernelsComplaintsOutliveTheConsolesTail(t *testing.T) {
	dir := t.TempDir()
	vm := &VM{console: filepath.Join(dir, "console.log"), qemuLog: filepath.Join(dir, "qemu.log"), volatile: &volatileSet{}}
	complaint := "[  539.585809] nvme nvme0: I/O 640 (I/O Cmd) QID 1 timeout, aborting"
	routine := "[  263.612063] sd 1:0:0:0: [sdb] Preferred minimum I/O size 512 bytes\n" +
		"[   41.860851] nvme nvme0: 2/0/0 default/read/poll queues\n" +
		"[  234.962512] bcache: register_cache() registered cache device nvme0n1p1\n"
	console := "[    0.0] Linux version 6.1.0\n" + routine + complaint + "\n" + strings.Repeat(routine, 200)
	if err := os.WriteFile(vm.console, []byte(console), 0o644); err != nil {
		t.Fatal(err)
	}
	printed := vm.diagnostics()
	if !strings.Contains(printed, complaint) {
		t.Errorf("the diagnostics lack the complaint %q:\n%s", complaint, printed[:min(len(printed), 2000)])
	}
	if got := kernelComplaints(vm.console); got != complaint {
		t.Errorf("complaints: got %q, want only %q", got, complaint)
	}
}

func TestTraceEventsGoToOneFile(t *testing.T) {
	args := strings.Join(qemuArgs(qemuConfig{sshPort: 2222, traceEvents: []string{"pci_nvme_*", "pci_nvme_err_*"}, traceFile: "/t/trace,1.log"}), " ")
	if want := "-msg timestamp=on -trace enable=pci_nvme_*,file=/t/trace,,1.log -trace enable=pci_nvme_err_*"; !strings.Contains(args, want) {
		t.Errorf("args lack %q:\n%s", want, args)
	}
	if plain := strings.Join(qemuArgs(qemuConfig{sshPort: 2222}), " "); strings.Contains(plain, "-trace") {
		t.Errorf("no trace asked for, but: %s", plain)
	}
}

// A one-vCPU guest's machine can still have two, so that TCG emits the guest's memory barriers:
// without them the NVMe driver's shadow doorbell handshake with QEMU's device thread lost
// doorbells, and whole batches of commands timed out.
func TestEveryGuestsBarriersAreHostFences(t *testing.T) {
	for cpus, want := range map[int]string{1: "-smp 1,maxcpus=2 ", 2: "-smp 2,maxcpus=2 ", 4: "-smp 4,maxcpus=4 "} {
		if args := strings.Join(qemuArgs(qemuConfig{cpus: cpus, sshPort: 2222}), " "); !strings.Contains(args, want) {
			t.Errorf("%d vCPUs: args lack %q:\n%s", cpus, want, args)
		}
	}
}

// The lines of the bcache BUG that once held a test's apply until its deadline, and lines that
// failure tests cause on purpose, which are no crash.
func TestAKernelBUGIsACrashAndADeviceErrorIsNot(t *testing.T) {
	bug := `[  102.871118] bcache: bch_cache_set_error() error on 078640b9: accessing uuids, disabling caching
[  102.876306] ------------[ cut here ]------------
[  102.878563] kernel BUG at drivers/md/bcache/super.c:660!
[  102.880676] invalid opcode: 0000 [#1] PREEMPT SMP NOPTI
[  102.882300] RIP: 0010:bch_prio_write+0x343/0x4e0 [bcache]
`
	if got, want := crashIn([]byte(bug)), "[  102.878563] kernel BUG at drivers/md/bcache/super.c:660!"; got != want {
		t.Errorf("crashIn(the bcache BUG) = %q, want %q", got, want)
	}
	nullDeref := "[ 5.1] BUG: kernel NULL pointer dereference, address: 0000000000000008\n[ 5.1] #PF: supervisor read access in kernel mode\n[ 5.1] Oops: 0000 [#1] PREEMPT SMP NOPTI\n"
	if got, want := crashIn([]byte(nullDeref)), "[ 5.1] BUG: kernel NULL pointer dereference, address: 0000000000000008"; got != want {
		t.Errorf("crashIn(a NULL dereference) = %q, want %q", got, want)
	}
	noCrash := `[   70.454072] I/O error, dev sda, sector 84608 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0
[   70.454306] bcache: bch_count_backing_io_errors() sda: IO error on backing device, unrecoverable
[   89.897674] bcache: bch_count_io_errors() nvme0n1p1: IO error on reading from cache, recovering.
[  120.1] INFO: task flashcache:650 blocked for more than 120 seconds.
[  130.2] WARNING: CPU: 1 PID: 297 at drivers/md/bcache/writeback.c:100 update_writeback_rate+0x1/0x2
[  280.6] watchdog: BUG: soft lockup - CPU#0 stuck for 261s! [cryptomgr_test:52]
`
	if got := crashIn([]byte(noCrash)); got != "" {
		t.Errorf("crashIn(device errors, a hung task, a warning, a stall) = %q, want none", got)
	}
}

// How QEMU's own exit before ssh is told apart: its failed assertion is the emulator's and worth
// a reset, a port lost to another process is retried on another port, anything else fails the
// boot. Only the last start's lines count: an assertion a reset already answered is history.
func TestQEMUsOwnAssertionBeforeSSHIsTheEmulatorsFault(t *testing.T) {
	const started = "--- 2026-12-05T07:41:02Z qemu-system-x86_64 -machine q35 -nographic\n"
	const assertion = "2026-12-05T07:41:07.113 qemu-system-x86_64: ../../system/physmem.c:2678: iotlb_to_section: Assertion `section_index < d->map.sections_nb' failed."
	const portTaken = "qemu-system-x86_64: -netdev user,id=net0,hostfwd=tcp:127.0.0.1:40111-:22: could not set up host forwarding rule 'tcp:127.0.0.1:40111-:22'"
	for name, c := range map[string]struct {
		log       string
		abort     string
		portTaken bool
	}{
		"an assertion":                       {log: started + assertion + "\n", abort: assertion},
		"GLib's assertion":                   {log: started + "**\nERROR:../../hw/nvme/ctrl.c:1234:nvme_x: assertion failed: (sq != NULL)\nBail out!\n", abort: "ERROR:../../hw/nvme/ctrl.c:1234:nvme_x: assertion failed: (sq != NULL)"},
		"the port taken":                     {log: started + portTaken + "\n", portTaken: true},
		"killed":                             {log: started + "qemu-system-x86_64: terminating on signal 9 from pid 4242\n"},
		"an assertion answered by one reset": {log: started + assertion + "\n" + started + "qemu-system-x86_64: terminating on signal 15\n"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			exited := make(chan struct{})
			close(exited)
			vm := &VM{console: filepath.Join(dir, "console.log"), qemuLog: filepath.Join(dir, "qemu.log"), exited: exited, volatile: &volatileSet{}}
			if err := os.WriteFile(vm.qemuLog, []byte(c.log), 0o644); err != nil {
				t.Fatal(err)
			}
			err := vm.waitSSH(t.Context(), 0)
			var abort *emulatorAbort
			switch {
			case c.abort != "":
				if !errors.As(err, &abort) || abort.line != c.abort {
					t.Errorf("waitSSH: %v, want QEMU's failure %q", err, c.abort)
				}
			case c.portTaken:
				if !errors.Is(err, errPortTaken) {
					t.Errorf("waitSSH: %v, want the port taken", err)
				}
			default:
				if err == nil || errors.As(err, &abort) || errors.Is(err, errPortTaken) {
					t.Errorf("waitSSH: %v, want a failed boot", err)
				}
			}
		})
	}
}

// The answer is QEMU 10's own to query-block after block_set_io_throttle set the device hdd-x's
// cap to 3; a QEMU that names the device by its QOM path is read the same way.
func TestThrottledIOPSIsReadFromTheNamedDevice(t *testing.T) {
	answer := `[{"device": "root", "inserted": {"iops": 0}, "qdev": "/machine/peripheral-anon/device[0]/virtio-backend"},
		{"io-status": "ok", "device": "d1", "inserted": {"iops_rd": 0, "group": "d1", "iops": 3, "bps": 0}, "qdev": "hdd-x", "type": "unknown"},
		{"device": "d2", "inserted": {"iops": 150}, "qdev": "/machine/peripheral/hdd-y/virtio-backend"},
		{"device": "cd", "qdev": "hdd-z"}]`
	for serial, want := range map[string]int{"hdd-x": 3, "hdd-y": 150} {
		if got, err := throttledIOPS(json.RawMessage(answer), serial); err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d", serial, got, err, want)
		}
	}
	for _, serial := range []string{"hdd-z", "hdd", "root"} {
		if got, err := throttledIOPS(json.RawMessage(answer), serial); err == nil {
			t.Errorf("%s: %d, want an error: no drive with a cap is that device", serial, got)
		}
	}
}
