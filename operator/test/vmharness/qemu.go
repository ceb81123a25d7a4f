package vmharness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// HostAddr is the host as the guest sees it: QEMU's user networking (slirp) answers there as
// gateway and forwards the guest's TCP connections to the host's 127.0.0.1, so a server that
// listens on the host's loopback only is reachable from the guest at HostAddr:<port>.
const HostAddr = "10.0.2.2"

// DiskKind is how a data disk presents itself to the guest.
type DiskKind int

const (
	// NVMe is an NVMe controller with one namespace: rotational 0, discard passed through to
	// the backing file (it punches holes), a SMART log; the cache device in tests.
	NVMe DiskKind = iota + 1
	// HDD is a SCSI disk on a virtio-scsi controller reporting 7200 rpm (rotational 1), with
	// QEMU's I/O throttling so it is about as slow as a real one, and no discard; the backing
	// device in tests.
	HDD
)

func (k DiskKind) String() string {
	switch k {
	case NVMe:
		return "nvme"
	case HDD:
		return "hdd"
	}
	return "DiskKind(" + strconv.Itoa(int(k)) + ")"
}

// A 7200 rpm disk manages roughly 80-200 random IOPS depending on queue depth, and 150-250
// MB/s sequentially depending on size and zone. QEMU throttles with one token bucket per drive,
// so these caps hold for any mix: small random I/O hits the IOPS cap, large sequential I/O the
// bandwidth cap. They cap rate only: a flush still returns as fast as the host's fdatasync.
const (
	DefaultHDDIOPS        = 150
	DefaultHDDBytesPerSec = 150 << 20
)

// Disk is one data disk. Its backing file outlives the VM (Reboot, Kill then Start, or a new
// Boot with the same Path), which is what durability tests need.
type Disk struct {
	Kind DiskKind
	// Serial is what the guest's udev puts in /dev/disk/by-id (see ByID). Up to 20 letters,
	// digits, '-' or '_' (NVMe's limit), unique within a VM.
	Serial string
	// Size in bytes, a multiple of 4096. A missing backing file is created sparse at this size;
	// an existing one must have exactly this size.
	Size int64
	// Path of the raw backing file; defaults to <WorkDir>/disk-<Serial>.img.
	Path string
	// HDD throttling: 0 means the default above, a negative value means unlimited. It applies
	// to reads and writes as QEMU receives them (not to flushes, nor to a volatile cache's
	// write-back), whatever Cache says.
	IOPS        int
	BytesPerSec int64
	// NVMeCriticalWarning is the SMART critical warning an NVMe disk reports (bit 0: available
	// spare below threshold), for the wear checks.
	NVMeCriticalWarning uint8
	// Cache is the disk's write cache; the zero value, CacheNone, is QEMU's plain file backing.
	// A volatile cache is served by nbdkit processes the harness runs beside QEMU (logs in
	// <WorkDir>/nbd-<Serial>-*.log), so that a power cut (Kill) can lose what the guest did not
	// flush, or, with CacheVolatileLying, what it did.
	Cache DiskCache
	// Faulty serves the disk through nbdkit's error filter, which fails every read and write
	// with EIO while VM.SetFailing has it failing: a drive that still answers but whose media
	// or controller gives out. Not with a volatile Cache.
	Faulty bool
}

// ByID is the stable name the guest's udev gives the disk, as observed with Debian 12's udev
// and QEMU 7.2 and 10.0. NVMe also gets "..._1" (namespace 1) and an nvme-nvme.1b36-... (EUI) link;
// the SCSI disk gets only the "0" (vendor/model/serial) link, no "S" (page 0x83) variant.
func (d Disk) ByID() string {
	switch d.Kind {
	case NVMe:
		return "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_" + d.Serial
	case HDD:
		return "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_" + d.Serial
	}
	return ""
}

var serialRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,20}$`)

// prepareDisks fills in defaults and checks what QEMU would otherwise accept and silently
// mangle (long serials are truncated, odd sizes rounded), which would break by-id names.
func prepareDisks(disks []Disk, workDir string) ([]Disk, error) {
	out := make([]Disk, len(disks))
	seen := map[string]bool{}
	for i, d := range disks {
		if d.Kind != NVMe && d.Kind != HDD {
			return nil, fmt.Errorf("disk %d: unknown kind %v", i, d.Kind)
		}
		if !serialRE.MatchString(d.Serial) {
			return nil, fmt.Errorf("disk %d: serial %q must be 1-20 of [A-Za-z0-9_-]", i, d.Serial)
		}
		if seen[d.Serial] {
			return nil, fmt.Errorf("disk %d: serial %q is used twice", i, d.Serial)
		}
		seen[d.Serial] = true
		switch {
		case d.Cache != CacheNone && !d.Cache.volatile():
			return nil, fmt.Errorf("disk %s: unknown cache %v", d.Serial, d.Cache)
		case d.Cache.volatile() && d.Faulty:
			return nil, fmt.Errorf("disk %s: a faulty disk has no volatile cache", d.Serial)
		}
		if d.Size <= 0 || d.Size%4096 != 0 {
			return nil, fmt.Errorf("disk %s: size %d must be a positive multiple of 4096", d.Serial, d.Size)
		}
		if d.Path == "" {
			d.Path = filepath.Join(workDir, "disk-"+d.Serial+".img")
		}
		p, err := filepath.Abs(d.Path)
		if err != nil {
			return nil, fmt.Errorf("disk %s: %w", d.Serial, err)
		}
		d.Path = p
		if d.Kind == HDD {
			if d.IOPS == 0 {
				d.IOPS = DefaultHDDIOPS
			}
			if d.BytesPerSec == 0 {
				d.BytesPerSec = DefaultHDDBytesPerSec
			}
		}
		out[i] = d
	}
	return out, nil
}

// ensureBackingFile creates a missing file sparse, and refuses one of another size: resizing
// would silently change what a test meant to keep.
func ensureBackingFile(d Disk) error {
	st, err := os.Stat(d.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		f, err := os.OpenFile(d.Path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("disk %s: create backing file: %w", d.Serial, err)
		}
		if err := f.Truncate(d.Size); err != nil {
			f.Close()
			return fmt.Errorf("disk %s: size backing file: %w", d.Serial, err)
		}
		return f.Close()
	case err != nil:
		return fmt.Errorf("disk %s: %w", d.Serial, err)
	case st.Size() != d.Size:
		return fmt.Errorf("disk %s: backing file %s has %d bytes, want %d", d.Serial, d.Path, st.Size(), d.Size)
	}
	return nil
}

// qemuConfig is everything one QEMU launch needs; kept apart from process handling so the
// command line can be checked without running anything.
type qemuConfig struct {
	kernel, initrd, cmdline string
	rootDisk                string
	disks                   []Disk
	nbdSockets              map[string]string // by serial: volatile disks, served by nbdkit
	memoryMiB, cpus         int
	sshPort                 int
	consoleLog              string
	shares                  []Share
	tap                     string
	// qmpSocket, when set, is where QEMU listens for QMP (run-time changes to devices).
	qmpSocket string
	// hotplugSlots gives the machine room for data disks added while it runs (a SCSI controller,
	// PCIe root ports for NVMe drives) instead of disks of its own: a booted snapshot's machine.
	hotplugSlots bool
	// incoming, when set, starts the machine from a saved state (QEMU's -incoming) instead of
	// booting it.
	incoming string
	// traceEvents and traceFile, when set, turn on QEMU's trace events of those patterns
	// (FLASHCACHE_VM_QEMU_TRACE), written to traceFile: what the emulated devices did when a
	// guest's driver says they did not answer.
	traceEvents []string
	traceFile   string
}

// hotplugRootPorts is how many NVMe drives a VM restored from a booted snapshot can take.
const hotplugRootPorts = 6

// hotplugRootPort is the id of the i-th PCIe root port of a hot-plug machine.
func hotplugRootPort(i int) string { return fmt.Sprintf("fc-rp%d", i) }

// qemuArgs builds the command line. -no-reboot turns a guest reboot into a QEMU exit, which the
// harness answers by starting QEMU again: Reboot is then the guest's real reboot path, and a
// kernel panic (panic=-1 in the image's cmdline) ends QEMU at once instead of looping.
func qemuArgs(c qemuConfig) []string {
	args := []string{
		// KVM hangs on these hosts and the host kernel lacks bcache anyway: emulate.
		"-accel", "tcg",
		"-machine", "q35",
		// Nehalem (x86-64-v2: SSE4.2, POPCNT, no AVX), not max: TCG emulates AVX slowly and the
		// kernel self-tests every AVX cipher at boot. Boots took 13.3-14.1 s against 15.1-16.2 s
		// (three of each, interleaved); Python and gzip in the guest ran the same or faster.
		"-cpu", "Nehalem",
		// maxcpus of 2 or more, even for a one-vCPU guest: TCG emits the guest's memory barriers
		// as host fences only when the machine can have more than one vCPU (CF_PARALLEL). Without
		// them the guest's NVMe driver's shadow doorbell handshake (store the queue's tail, fence,
		// load the device's event index) raced QEMU's device thread doing the mirror image on the
		// host: both read the other's old value, the driver skipped the doorbell and the device
		// slept on a queue with commands in it. One-vCPU guests then saw "nvme nvme0: I/O ... QID
		// 1 timeout, aborting" for a whole batch of commands, a flush hung, and the NVMe was gone.
		"-smp", fmt.Sprintf("%d,maxcpus=%d", c.cpus, max(c.cpus, 2)),
		"-m", strconv.Itoa(c.memoryMiB),
		"-nodefaults", "-display", "none", "-no-reboot",
		"-kernel", c.kernel, "-initrd", c.initrd, "-append", c.cmdline,
		"-chardev", "file,id=console,append=on,path=" + escapeOpt(c.consoleLog),
		"-serial", "chardev:console",
		// The root disk is the only virtio-blk disk, so it is /dev/vda as the image expects.
		"-drive", "if=none,id=root,format=qcow2,file=" + escapeOpt(c.rootDisk),
		"-device", "virtio-blk-pci,drive=root",
		// Loopback only: nothing outside this host can reach the guest's sshd. Not
		// restrict=on: the guest reaches the host's loopback as HostAddr (the end-to-end
		// tests' API server listens there).
		"-netdev", fmt.Sprintf("user,id=net0,hostfwd=tcp:127.0.0.1:%d-:22", c.sshPort),
		"-device", "virtio-net-pci,netdev=net0",
		// Entropy right away, so sshd and the kernel's RNG do not wait at boot.
		"-device", "virtio-rng-pci",
	}
	if c.qmpSocket != "" {
		args = append(args, "-qmp", "unix:"+escapeOpt(c.qmpSocket)+",server=on,wait=off")
	}
	if c.tap != "" {
		args = append(args,
			"-netdev", "tap,id=net1,script=no,downscript=no,ifname="+escapeOpt(c.tap),
			"-device", "virtio-net-pci,netdev=net1,mac="+TapMAC)
	}
	for i, s := range c.shares {
		// security_model=none: the guest sees the host's owners and modes, and readonly keeps
		// the guest from changing the host's files.
		args = append(args, "-virtfs", fmt.Sprintf("local,id=share%d,path=%s,mount_tag=%s,security_model=none,readonly=on",
			i, escapeOpt(s.Path), escapeOpt(s.Tag)))
	}
	if c.hotplugSlots {
		args = append(args, "-device", "virtio-scsi-pci,id=scsi0")
		for i := range hotplugRootPorts {
			args = append(args, "-device", fmt.Sprintf("pcie-root-port,id=%s,chassis=%d", hotplugRootPort(i), i+1))
		}
	}
	if c.incoming != "" {
		args = append(args, "-incoming", c.incoming)
	}
	if len(c.traceEvents) > 0 {
		// Each event with its time (pid@seconds.microseconds): how long a command waited.
		args = append(args, "-msg", "timestamp=on")
	}
	for i, pattern := range c.traceEvents {
		option := "enable=" + escapeOpt(pattern)
		if i == 0 {
			option += ",file=" + escapeOpt(c.traceFile)
		}
		args = append(args, "-trace", option)
	}
	scsi := c.hotplugSlots
	for i, d := range c.disks {
		id := fmt.Sprintf("disk%d", i)
		drive := "if=none,id=" + id + ",format=raw,file=" + escapeOpt(d.Path)
		if sock, ok := c.nbdSockets[d.Serial]; ok {
			// The nbd driver keeps no data of its own and sends every guest flush to the
			// server; QEMU's default cache mode (writeback) only makes the device report a
			// volatile write cache (WCE), so that the guest sends flushes at all. Note that
			// cache.no-flush=on would not make a liar: the nbd driver flushes "to the OS",
			// which QEMU does even in that mode.
			drive = "if=none,id=" + id + ",driver=nbd,server.type=unix,server.path=" + escapeOpt(sock)
		}
		switch d.Kind {
		case NVMe:
			args = append(args,
				"-drive", drive+",discard=unmap",
				// id=serial: QMP finds the device at /machine/peripheral/<serial>.
				"-device", fmt.Sprintf("nvme,id=%s,drive=%s,serial=%s,smart_critical_warning=%d", d.Serial, id, d.Serial, d.NVMeCriticalWarning))
		case HDD:
			if !scsi {
				args = append(args, "-device", "virtio-scsi-pci,id=scsi0")
				scsi = true
			}
			if d.IOPS > 0 {
				drive += ",throttling.iops-total=" + strconv.Itoa(d.IOPS)
			}
			if d.BytesPerSec > 0 {
				drive += ",throttling.bps-total=" + strconv.FormatInt(d.BytesPerSec, 10)
			}
			// scsi-hd advertises UNMAP even when the drive ignores it; a spinning disk has
			// no TRIM, and code that checks discard support must see that.
			args = append(args,
				"-drive", drive,
				"-device", "scsi-hd,id="+d.Serial+",bus=scsi0.0,drive="+id+",serial="+d.Serial+",rotation_rate=7200,discard_granularity=0")
		}
	}
	return args
}

// escapeOpt doubles commas, QEMU's escape inside an option value, so any path works.
func escapeOpt(s string) string { return strings.ReplaceAll(s, ",", ",,") }
