// Package vmharness boots the Debian test VM built by hack/build-vm-image.sh under QEMU (TCG:
// the host kernel has no bcache and KVM is not usable), with emulated NVMe and HDD data disks,
// and drives it over SSH. Kernel-level tests (build tag vm) use it to run the real flashcache
// binary against a real bcache.
//
// A VM's root disk is a throwaway qcow2 overlay on the cached base image; data disks are raw
// files that outlive it. Every wait is bounded by the caller's context and a timeout, and a
// failed boot reports the tail of the serial console.
package vmharness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// Options describe a VM.
type Options struct {
	// Image is the folder hack/build-vm-image.sh prints.
	Image string
	// WorkDir receives the root overlay, console.log, qemu.log, known_hosts and, by default,
	// the data disks' backing files. Created if missing.
	WorkDir string
	// RootBase, when set, is the qcow2 the root overlay is made on instead of the image's
	// rootfs.qcow2: an overlay of that rootfs prepared once and kept (a node's imported images,
	// kubenode.PreparedRoot). A VM on one boots for real, not from a booted snapshot.
	RootBase string
	Disks    []Disk
	// MemoryMiB defaults to 2048, CPUs to 2 (or FLASHCACHE_VM_CPUS).
	MemoryMiB int
	CPUs      int
	// Shares are host folders the guest can mount read-only over 9p (virtio), for files too
	// large to copy over SSH at every boot: binaries, image tarballs.
	Shares []Share
	// Tap, when set, is the name of an existing tap interface that becomes the guest's second
	// network card (eth1, MAC TapMAC): a network the host can route to, unlike user networking.
	// The caller creates the tap and configures the guest's address on it.
	Tap string
	// BootTimeout bounds each boot from QEMU start to SSH ready; default 5 minutes, generous
	// because TCG on a busy CI machine can be several times slower than the usual 15 s.
	BootTimeout time.Duration
	// Logf, when set, receives progress (boot, reboot, timings); t.Logf fits.
	Logf func(format string, args ...any)
}

// Share is a host folder exported to the guest over 9p; the guest mounts it with
// `mount -t 9p -o trans=virtio,version=9p2000.L,ro <Tag> <dir>`.
type Share struct {
	Tag  string
	Path string
}

// TapMAC is the guest's MAC address on Options.Tap, so the guest can name the card by it.
const TapMAC = "52:54:00:fc:00:02"

// VM is a running (or stopped, after Kill or Shutdown) QEMU guest. Its methods may be called
// from several goroutines.
type VM struct {
	opts      Options
	disks     []Disk
	absent    map[string]bool // serials left out of the next launch (SetPresent)
	root      string
	console   string
	qemuLog   string
	hostKey   ssh.PublicKey
	sshConfig *ssh.ClientConfig
	keyPath   string
	volatile  *volatileSet
	// hotplugMachine: the machine of a booted snapshot, with room for disks and none of its own.
	hotplugMachine bool

	mu       sync.Mutex
	port     int
	proc     *os.Process
	exited   chan struct{} // closed when the current QEMU process has exited
	client   *ssh.Client
	bootTime time.Duration
}

// Boot creates a fresh root overlay, creates missing data disk files, starts QEMU and waits
// until SSH answers. The caller must Close the VM, even after an error from later methods.
func Boot(ctx context.Context, opts Options) (*VM, error) {
	vm, err := newVM(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("vmharness: boot: %w", err)
	}
	if restorable(vm.opts, vm.disks) {
		snap, err := snapshotFor(ctx, vm.opts)
		if err == nil {
			if err = vm.restore(ctx, snap); err == nil {
				return vm, nil
			}
			vm.kill()
		}
		// A snapshot that cannot be made or restored costs time, not the test: boot for real.
		vm.logf("no start from a booted snapshot (%v); booting", err)
		if err := vm.newRootOverlay(ctx); err != nil {
			vm.Close()
			return nil, fmt.Errorf("vmharness: boot: %w", err)
		}
	}
	if err := vm.Start(ctx); err != nil {
		vm.Close()
		return nil, err
	}
	return vm, nil
}

func newVM(ctx context.Context, opts Options) (*VM, error) {
	if opts.Image == "" {
		return nil, errors.New("no image folder given (the folder hack/build-vm-image.sh prints)")
	}
	if opts.WorkDir == "" {
		return nil, errors.New("no work dir given")
	}
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = 2048
	}
	if opts.CPUs == 0 {
		opts.CPUs = 2
		// make test gives some tiers' guests one vCPU (docs/testing.md says which and why).
		if n, err := strconv.Atoi(os.Getenv("FLASHCACHE_VM_CPUS")); err == nil && n > 0 {
			opts.CPUs = n
		}
	}
	if opts.BootTimeout == 0 {
		opts.BootTimeout = 5 * time.Minute
	}
	var err error
	if opts.Image, err = filepath.Abs(opts.Image); err != nil {
		return nil, err
	}
	if opts.WorkDir, err = filepath.Abs(opts.WorkDir); err != nil {
		return nil, err
	}
	if opts.RootBase != "" {
		if opts.RootBase, err = filepath.Abs(opts.RootBase); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range []string{"rootfs.qcow2", "vmlinuz", "initrd.img", "cmdline", "id_ed25519", "ssh_host_ed25519_key.pub"} {
		if _, err := os.Stat(filepath.Join(opts.Image, f)); err != nil {
			return nil, fmt.Errorf("image folder %s is incomplete (rebuild with hack/build-vm-image.sh): %w", opts.Image, err)
		}
	}
	disks, err := prepareDisks(opts.Disks, opts.WorkDir)
	if err != nil {
		return nil, err
	}
	for _, d := range disks {
		if err := ensureBackingFile(d); err != nil {
			return nil, err
		}
	}
	volatile, err := newVolatileSet(disks, opts.WorkDir)
	if err != nil {
		return nil, err
	}

	vm := &VM{
		opts:     opts,
		disks:    disks,
		root:     filepath.Join(opts.WorkDir, "root.qcow2"),
		console:  filepath.Join(opts.WorkDir, "console.log"),
		qemuLog:  filepath.Join(opts.WorkDir, "qemu.log"),
		keyPath:  filepath.Join(opts.Image, "id_ed25519"),
		volatile: volatile,
	}
	if err := vm.loadKeys(); err != nil {
		return nil, err
	}
	if err := vm.newRootOverlay(ctx); err != nil {
		return nil, err
	}
	return vm, nil
}

// newRootOverlay gives the VM a blank root overlay on the image: a new Boot is a new machine and
// never inherits a root disk from an earlier run.
func (vm *VM) newRootOverlay(ctx context.Context) error {
	if err := os.Remove(vm.root); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	base := vm.opts.RootBase
	if base == "" {
		base = filepath.Join(vm.opts.Image, "rootfs.qcow2")
	}
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2",
		"-b", base, vm.root).CombinedOutput()
	if err != nil {
		return fmt.Errorf("create root overlay: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

func (vm *VM) loadKeys() error {
	keyPEM, err := os.ReadFile(vm.keyPath)
	if err != nil {
		return err
	}
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		return fmt.Errorf("parse %s: %w", vm.keyPath, err)
	}
	hostLine, err := os.ReadFile(filepath.Join(vm.opts.Image, "ssh_host_ed25519_key.pub"))
	if err != nil {
		return err
	}
	vm.hostKey, _, _, _, err = ssh.ParseAuthorizedKey(hostLine)
	if err != nil {
		return fmt.Errorf("parse guest host key: %w", err)
	}
	vm.sshConfig = &ssh.ClientConfig{
		User:              "root",
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback:   ssh.FixedHostKey(vm.hostKey),
		HostKeyAlgorithms: []string{vm.hostKey.Type()},
	}
	return nil
}

// Disks returns the data disks with defaults filled in (Path, throttling).
func (vm *VM) Disks() []Disk { return append([]Disk(nil), vm.disks...) }

// BootTime is how long the last boot took from QEMU start to SSH ready.
func (vm *VM) BootTime() time.Duration {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.bootTime
}

// ConsoleLog is the path of the serial console log; boots append to it.
func (vm *VM) ConsoleLog() string { return vm.console }

// SSHCommand is the ssh command line a human can paste to reach the guest as root.
func (vm *VM) SSHCommand() []string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return []string{"ssh", "-i", vm.keyPath, "-p", strconv.Itoa(vm.port),
		"-o", "UserKnownHostsFile=" + filepath.Join(vm.opts.WorkDir, "known_hosts"),
		"-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR",
		"root@127.0.0.1"}
}

func (vm *VM) logf(format string, args ...any) {
	if vm.opts.Logf != nil {
		vm.opts.Logf("vm: "+format, args...)
	}
}

// Start powers the VM on again after Kill or Shutdown, with the same root and data disks, and
// waits for SSH. Volatile disks come back with empty caches: their nbdkit starts before QEMU.
func (vm *VM) Start(ctx context.Context) error {
	if vm.running() {
		return errors.New("vmharness: start: already running")
	}
	if err := vm.boot(ctx); err != nil {
		return fmt.Errorf("vmharness: start: %w", err)
	}
	return nil
}

func (vm *VM) running() bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.exited == nil {
		return false
	}
	select {
	case <-vm.exited:
		return false
	default:
		return true
	}
}

// boot starts QEMU and waits for SSH. Picking a free port and handing it to QEMU races with
// other processes, so a lost race (QEMU cannot bind) is retried with another port.
func (vm *VM) boot(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, vm.opts.BootTimeout)
	defer cancel()
	start := time.Now()
	if err := vm.volatile.powerOn(ctx); err != nil {
		vm.kill()
		return err
	}
	resets := 0
	for attempt := 1; ; attempt++ {
		consoleAt := fileSize(vm.console)
		if err := vm.launch(); err != nil {
			return err
		}
		err := vm.waitSSH(ctx, consoleAt)
		if err == nil {
			break
		}
		if attempt < 3 && errors.Is(err, errPortTaken) {
			vm.logf("ssh port was taken, retrying with another")
			continue
		}
		var fault emulatorFault
		if errors.As(err, &fault) && resets < maxBootResets {
			resets++
			// A reset, not a power cut: the fault is the emulator's, and a reboot that stalled
			// must still find what the disks' volatile caches held (CI at 11e3e9c lost a lying
			// disk's flushed-to-cache blocks to a power cycle here).
			vm.logf("%s before ssh came up; resetting it (QEMU again, the disks keep power)", fault.what())
			vm.stopQEMU()
			continue
		}
		vm.kill()
		return fmt.Errorf("%w\n%s", err, vm.diagnostics())
	}
	vm.mu.Lock()
	vm.bootTime = time.Since(start)
	vm.mu.Unlock()
	vm.logf("ssh ready after %s (port %d)", vm.bootTime.Round(100*time.Millisecond), vm.port)
	return nil
}

var errPortTaken = errors.New("ssh forwarding port already in use")

// maxBootResets bounds how often one boot is started again after the guest's kernel stalled or
// QEMU failed an assertion of its own.
const maxBootResets = 2

// stallMarkers are what the guest's kernel prints when a CPU stops making progress. Under TCG
// on a host whose cores are all busy, a boot once stalled for good in the crypto self-tests
// (soft lockup at a patched jump label, 261 s and counting) while the same image booted in 19 s
// every other time: a fault of the emulator, not of the system under test, and a new power-on
// does not meet it.
var stallMarkers = [][]byte{[]byte("BUG: soft lockup"), []byte("self-detected stall"), []byte("rcu_sched detected stalls"), []byte("rcu_preempt detected stalls")}

// bootSilenceLimit is how long a booting guest's console may stay silent before the boot counts
// as stalled. A boot prints something every few seconds until sshd listens (19 s in all on an
// idle host); a warm CI run once lost 5 minutes to a guest whose kernel stopped after
// "sched_clock: Marking stable" at 1.6 s and never printed again, not even a stall report.
const bootSilenceLimit = 90 * time.Second

// consoleSilence follows the console of one boot and says when it has not grown for limit.
type consoleSilence struct {
	limit time.Duration
	size  int
	since time.Time
}

// stalled is why the boot whose console text so far is text counts as stalled, or "": a stall
// its kernel reported, or a console silent for limit before sshd listens.
func (c *consoleSilence) stalled(text []byte, now time.Time) string {
	if line := stallIn(text); line != "" {
		return line
	}
	if bytes.Contains(text, sshReadyMarker) {
		return ""
	}
	return c.check(text, now)
}

// check takes the console text so far; it returns a description of the silence once the text
// has not grown for limit, and "" before.
func (c *consoleSilence) check(text []byte, now time.Time) string {
	if c.since.IsZero() || len(text) != c.size {
		c.size, c.since = len(text), now
		return ""
	}
	if now.Sub(c.since) < c.limit {
		return ""
	}
	last := bytes.TrimSpace(text)
	if i := bytes.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	return fmt.Sprintf("the console was silent for %s after %q", c.limit, bytes.TrimSpace(last))
}

// guestStall is a boot whose kernel reported a stall before SSH answered.
type guestStall struct{ line string }

func (s *guestStall) Error() string { return "the guest's kernel stalled: " + s.line }
func (s *guestStall) what() string  { return fmt.Sprintf("the guest's kernel stalled (%q)", s.line) }

// emulatorFault is a boot that failed for the emulator's sake, not the system's under test: a new
// start of QEMU does not meet it.
type emulatorFault interface {
	error
	what() string
}

// emulatorAbort is a boot whose QEMU exited on a failed assertion of its own before SSH answered.
type emulatorAbort struct{ line string }

func (a *emulatorAbort) Error() string { return "QEMU failed: " + a.line }
func (a *emulatorAbort) what() string  { return fmt.Sprintf("QEMU itself failed (%q)", a.line) }

// emulatorAbortMarkers are how QEMU says it aborted on a check of its own (glibc's assert, GLib's
// g_assert). Under TCG a guest's reboot once ended 4.9 s into the boot, during PCI enumeration,
// with "system/physmem.c:2678: iotlb_to_section: Assertion `section_index <
// d->map.sections_nb' failed" (make test at 7759e40) while the same reboot passed in every run before
// and after: a fault of the emulator, not of the system under test.
var emulatorAbortMarkers = [][]byte{[]byte(": Assertion `"), []byte(": Assertion '"), []byte("assertion failed: (")}

// launchHeader begins the line launchWith writes to QEMU's log before each start.
const launchHeader = "--- "

// lastLaunch is the part of QEMU's log that the last start wrote.
func lastLaunch(log []byte) []byte {
	if i := bytes.LastIndex(log, []byte("\n"+launchHeader)); i >= 0 {
		return log[i+1:]
	}
	return log
}

// sshReadyMarker is what the image's flashcache-ssh-ready.service prints once sshd listens
// (hack/build-vm-image.sh); after sshReadyFallback without it (an older image, or a boot slowed
// down by a busy host) the harness dials as it would without a marker.
var sshReadyMarker = []byte("flashcache-vm: sshd is listening")

const sshReadyFallback = 45 * time.Second

// consoleSince is the console log after offset; nil when it cannot be read.
func consoleSince(console string, offset int64) []byte {
	f, err := os.Open(console)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	text, _ := io.ReadAll(f)
	return text
}

// crashMarkers are what the guest's kernel prints when a thread hits a bug it cannot go on from:
// a BUG_ON, an oops, a protection fault. The thread is gone, and whatever waits on it (a sysfs
// write, an I/O) waits for good: bcache's allocator thread once hit a BUG_ON as a lost SSD's set
// failed, and the apply that failed it waited until its test's 20-minute deadline.
var crashMarkers = [][]byte{[]byte("kernel BUG at"), []byte("BUG: kernel NULL pointer dereference"),
	[]byte("BUG: unable to handle"), []byte("general protection fault"), []byte("Oops: ")}

// stallIn is the first stall report in text, or "".
func stallIn(text []byte) string { return firstLineWith(text, stallMarkers) }

// crashIn is the first line of text that reports a kernel crash, or "".
func crashIn(text []byte) string { return firstLineWith(text, crashMarkers) }

// firstLineWith is the first line of text that holds one of markers (the first marker found
// first), or "".
func firstLineWith(text []byte, markers [][]byte) string {
	for _, m := range markers {
		if i := bytes.Index(text, m); i >= 0 {
			line := text[bytes.LastIndexByte(text[:i], '\n')+1:]
			if j := bytes.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			return string(bytes.TrimSpace(line))
		}
	}
	return ""
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func (vm *VM) launch() error { return vm.launchWith("") }

// launchWith starts QEMU; with incoming set, from that saved state (the machine of a booted
// snapshot, its disks plugged in afterwards) instead of a boot with the VM's disks.
func (vm *VM) launchWith(incoming string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	image := vm.opts.Image
	cmdline, err := os.ReadFile(filepath.Join(image, "cmdline"))
	if err != nil {
		return err
	}
	disks := vm.presentDisks()
	if incoming != "" {
		disks = nil // plugged in once the saved machine is loaded
	}
	var traceFile string
	traceEvents := strings.Fields(strings.ReplaceAll(os.Getenv(QEMUTraceEnv), ",", " "))
	if len(traceEvents) > 0 {
		traceFile = vm.qemuTrace()
	}
	args := qemuArgs(qemuConfig{
		kernel:       filepath.Join(image, "vmlinuz"),
		initrd:       filepath.Join(image, "initrd.img"),
		cmdline:      strings.TrimSpace(string(cmdline)),
		rootDisk:     vm.root,
		disks:        disks,
		nbdSockets:   vm.volatile.sockets(),
		memoryMiB:    vm.opts.MemoryMiB,
		cpus:         vm.opts.CPUs,
		sshPort:      port,
		consoleLog:   vm.console,
		shares:       vm.opts.Shares,
		tap:          vm.opts.Tap,
		qmpSocket:    vm.qmpSocket(),
		hotplugSlots: vm.hotplugMachine || incoming != "",
		incoming:     incoming,
		traceEvents:  traceEvents,
		traceFile:    traceFile,
	})
	known := fmt.Sprintf("[127.0.0.1]:%d %s", port, ssh.MarshalAuthorizedKey(vm.hostKey))
	if err := os.WriteFile(filepath.Join(vm.opts.WorkDir, "known_hosts"), []byte(known), 0o644); err != nil {
		return err
	}
	logFile, err := os.OpenFile(vm.qemuLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "%s%s qemu-system-x86_64 %s\n", launchHeader, time.Now().Format(time.RFC3339), strings.Join(args, " "))
	cmd := exec.Command("qemu-system-x86_64", args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A test binary that dies (timeout, panic, ^C) must not leave QEMU running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start qemu: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	vm.mu.Lock()
	vm.port, vm.proc, vm.exited = port, cmd.Process, exited
	vm.mu.Unlock()
	vm.logf("qemu started (pid %d), console in %s", cmd.Process.Pid, vm.console)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitSSH retries until the guest's sshd completes a handshake. QEMU's user networking
// accepts the TCP connection itself before the guest listens, and while the guest's network is
// not up yet such a connection stays silent instead of failing: so a connect proves nothing, and
// an attempt that hears no server greeting soon is dropped and made again (see dial).
// The image says on the console when sshd listens (sshReadyMarker), and no attempt is made
// before: only an image without the marker pays for the silent attempts, after
// sshReadyFallback. A kernel that reports a stall first, or a console silent for
// bootSilenceLimit before the marker, ends the wait with a *guestStall.
func (vm *VM) waitSSH(ctx context.Context, consoleAt int64) error {
	vm.mu.Lock()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(vm.port))
	exited := vm.exited
	vm.mu.Unlock()
	var lastErr error
	start := time.Now()
	quiet := consoleSilence{limit: bootSilenceLimit}
	for attempt := 1; ; attempt++ {
	untilListening:
		for time.Since(start) < sshReadyFallback {
			text := consoleSince(vm.console, consoleAt)
			if bytes.Contains(text, sshReadyMarker) {
				break
			}
			if line := quiet.stalled(text, time.Now()); line != "" {
				return &guestStall{line: line}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for the console to say sshd listens: %w", ctx.Err())
			case <-exited: // said below
				break untilListening
			case <-time.After(200 * time.Millisecond):
			}
		}
		select {
		case <-exited:
			said := lastLaunch(tail(vm.qemuLog, 4096))
			if bytes.Contains(said, []byte("host forwarding rule")) {
				return errPortTaken
			}
			if line := firstLineWith(said, emulatorAbortMarkers); line != "" {
				return &emulatorAbort{line: line}
			}
			return errors.New("qemu exited before ssh was ready")
		default:
		}
		if line := quiet.stalled(consoleSince(vm.console, consoleAt), time.Now()); line != "" {
			return &guestStall{line: line}
		}
		client, err := vm.dial(ctx, addr, greetingWait(attempt))
		if err == nil {
			vm.mu.Lock()
			vm.client = client
			vm.mu.Unlock()
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for ssh on %s: %w (last attempt: %v)", addr, ctx.Err(), lastErr)
		case <-exited:
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// greetingWait is how long attempt n waits for sshd's greeting: 3 s for the first ten, since a
// silent connection is usually one the guest never saw (a single wait of 20 s there cost up to
// 20 s of a boot), then longer, so that a guest slowed down by a busy host still gets through.
func greetingWait(attempt int) time.Duration {
	if attempt <= 10 {
		return 3 * time.Second
	}
	return min(time.Duration(attempt-8)*2*time.Second, 20*time.Second)
}

// dial connects and, once sshd's greeting line has arrived within greeting, completes the
// handshake with a deadline of its own.
func (vm *VM) dial(ctx context.Context, addr string, greeting time.Duration) (*ssh.Client, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(greeting))
	first := make([]byte, 4)
	if _, err := io.ReadFull(conn, first); err != nil {
		conn.Close()
		return nil, fmt.Errorf("no ssh greeting within %s: %w", greeting, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	replayed := &prefixedConn{Conn: conn, prefix: first}
	c, chans, reqs, err := ssh.NewClientConn(replayed, addr, vm.sshConfig)
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// prefixedConn gives back the bytes dial read to see that sshd answers, before the rest.
type prefixedConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Reboot reboots the guest cleanly (systemd's reboot path, so filesystems are synced and
// unmounted) and waits for SSH again; disks are the same. It checks the boot ID changed.
func (vm *VM) Reboot(ctx context.Context) error {
	before, err := vm.bootID(ctx)
	if err != nil {
		return fmt.Errorf("vmharness: reboot: %w", err)
	}
	start := time.Now()
	if err := vm.powerDown(ctx, "systemctl reboot"); err != nil {
		return fmt.Errorf("vmharness: reboot: %w", err)
	}
	if err := vm.boot(ctx); err != nil {
		return fmt.Errorf("vmharness: reboot: %w", err)
	}
	after, err := vm.bootID(ctx)
	if err != nil {
		return fmt.Errorf("vmharness: reboot: %w", err)
	}
	if after == before {
		return fmt.Errorf("vmharness: reboot: boot ID %s did not change", after)
	}
	vm.logf("rebooted in %s", time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (vm *VM) bootID(ctx context.Context) (string, error) {
	id, err := vm.Output(ctx, "cat /proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(id), err
}

// Shutdown powers the guest off cleanly and waits for QEMU to exit. If that does not happen
// within ctx, QEMU is killed and an error returned. Volatile disks then write their caches back,
// even a lying one (a real disk does so before it spins down), and their nbdkit stops.
func (vm *VM) Shutdown(ctx context.Context) error {
	if err := vm.powerDown(ctx, "systemctl poweroff"); err != nil {
		return fmt.Errorf("vmharness: shutdown: %w", err)
	}
	if err := vm.volatile.powerOff(ctx); err != nil {
		return fmt.Errorf("vmharness: shutdown: %w", err)
	}
	return nil
}

// WriteBackDiskCaches makes every volatile disk write its cache to its backing file, as a disk
// does on its own in the background; for a lying disk it is, besides a clean Shutdown, the only
// way data becomes durable, so it sets the point before which a power cut loses nothing. The
// guest sees nothing but the disks' I/O stalling meanwhile. VMs without volatile disks: a no-op.
func (vm *VM) WriteBackDiskCaches(ctx context.Context) error {
	if err := vm.volatile.writeBack(ctx); err != nil {
		return fmt.Errorf("vmharness: write back disk caches: %w", err)
	}
	return nil
}

// powerDown asks the guest to stop (QEMU runs with -no-reboot, so a reboot stops it too) and
// waits for QEMU to exit.
func (vm *VM) powerDown(ctx context.Context, command string) error {
	vm.mu.Lock()
	exited := vm.exited
	vm.mu.Unlock()
	if !vm.running() {
		return errors.New("not running")
	}
	// The guest may drop the connection before reporting an exit status; only QEMU's exit
	// tells whether the command worked.
	runCtx, cancelRun := context.WithTimeout(ctx, 30*time.Second)
	_, _, _, _ = vm.Run(runCtx, command)
	cancelRun()
	vm.closeClient()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		vm.kill()
		return fmt.Errorf("guest did not stop after %q: %w\n%s", command, ctx.Err(), vm.diagnostics())
	}
}

// Kill ends QEMU with SIGKILL: a power cut. Writes QEMU had not yet passed to the host are
// lost; writes it had passed survive in the host's page cache, whether or not the guest
// flushed them, except on volatile disks: their nbdkit is killed too (SIGKILL), and their
// caches with it. Start powers the VM on again.
func (vm *VM) Kill() error {
	if !vm.running() {
		return errors.New("vmharness: kill: not running")
	}
	vm.kill()
	return nil
}

func (vm *VM) kill() {
	vm.stopQEMU()
	// After QEMU, so that the guest never sees its disks vanish.
	vm.volatile.powerCut()
}

// stopQEMU ends the machine and nothing else: the volatile disks' servers, and what their caches
// hold, stay, as a real disk's do when the machine is reset rather than unplugged.
func (vm *VM) stopQEMU() {
	vm.closeClient()
	vm.mu.Lock()
	proc, exited := vm.proc, vm.exited
	vm.mu.Unlock()
	if proc != nil {
		_ = proc.Kill()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			vm.logf("qemu pid %d did not exit 30 s after SIGKILL", proc.Pid)
		}
	}
}

func (vm *VM) closeClient() {
	vm.mu.Lock()
	c := vm.client
	vm.client = nil
	vm.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// Close kills QEMU if it still runs, and stops the volatile disks' nbdkit without writing
// their caches back: for them too it is a power cut. The work dir (and the disks in it) stays;
// tests usually put it in t.TempDir().
func (vm *VM) Close() {
	if vm.running() {
		vm.logGuestCPU()
		vm.kill()
	}
	vm.volatile.stop()
	vm.closeClient()
}

// diagnostics is what a human needs to see why a boot failed: the end of the console and of
// QEMU's own output.
func (vm *VM) diagnostics() string {
	return fmt.Sprintf("--- console (%s), the kernel's complaints:\n%s\n--- console, last lines:\n%s\n--- qemu (%s), last lines:\n%s%s",
		vm.console, kernelComplaints(vm.console), tail(vm.console, 6000), vm.qemuLog, tail(vm.qemuLog, 1500), vm.volatile.diagnostics())
}

// QEMUTraceEnv names QEMU trace event patterns (comma- or space-separated, such as
// "pci_nvme_*") to record for every VM, into the file qemuTrace names.
const QEMUTraceEnv = "FLASHCACHE_VM_QEMU_TRACE"

// QEMUTraceDirEnv is where the trace files go (default: the VM's work folder, which a test's
// cleanup removes): one file per QEMU start, named by the test's folder and the time.
const QEMUTraceDirEnv = "FLASHCACHE_VM_QEMU_TRACE_DIR"

func (vm *VM) qemuTrace() string {
	dir := os.Getenv(QEMUTraceDirEnv)
	if dir == "" {
		dir = vm.opts.WorkDir
	}
	test := vm.opts.WorkDir // t.TempDir's folder is named after the test, a level or two up
	for d := vm.opts.WorkDir; filepath.Dir(d) != d; d = filepath.Dir(d) {
		if strings.HasPrefix(filepath.Base(d), "Test") {
			test = d
			break
		}
	}
	return filepath.Join(dir, fmt.Sprintf("qemu-trace-%s-%s.log", filepath.Base(test), time.Now().UTC().Format("150405.000")))
}

// complaint matches the console lines in which the guest's kernel says a device or the block
// layer misbehaved: a test that fails long after them (a flush that never ends, a volume gone)
// shows them even when the console's tail is all later output.
// Routine lines (a drive probed, a cache registered) stay out, so that the first 40 are news.
var complaint = regexp.MustCompile(`(?i)(nvme.*(timeout|abort|reset|error|fail|remov)|I/O error|medium error|blk_update_request|bcache: .*(error|fail)|` +
	`blocked for more than|hung_task|Call Trace|\bBUG\b|WARNING: |Oops|rcu_.*stall|soft lockup|\[FAILED\]|Timed out)`)

// kernelComplaints is the console's complaint lines, the first 40 and the last 20 of them.
func kernelComplaints(console string) string {
	raw, err := os.ReadFile(console)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, line := range strings.Split(string(bytes.ToValidUTF8(raw, []byte("?"))), "\n") {
		if strings.HasPrefix(line, "[") && complaint.MatchString(line) {
			lines = append(lines, strings.TrimRight(line, "\r"))
		}
	}
	if len(lines) == 0 {
		return "(none)"
	}
	if len(lines) > 60 {
		lines = append(append(lines[:40:40], fmt.Sprintf("... %d more ...", len(lines)-60)), lines[len(lines)-20:]...)
	}
	return strings.Join(lines, "\n")
}

func tail(path string, n int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return []byte(err.Error())
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return bytes.ToValidUTF8(b, []byte("?"))
}
