package blockdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Paths of the kernel's views. The agent runs with hostPID, so PID 1's mount table is the host's
// and not the container's.
var (
	SysClassBlock = "/sys/class/block"
	SysDevBlock   = "/sys/dev/block"
	HostMountInfo = "/proc/1/mountinfo"
	HostSwaps     = "/proc/swaps"
)

// ErrNotFound is returned for a device path that does not exist.
var ErrNotFound = errors.New("no such device")

// Device is what the kernel says about one block device.
type Device struct {
	// Path is the path the caller named, e.g. /dev/disk/by-id/nvme-...
	Path string
	// DevPath is the kernel node it resolves to, e.g. /dev/nvme0n1.
	DevPath string
	// Name is the kernel name, e.g. nvme0n1.
	Name       string
	MajorMinor string
	SizeBytes  int64
	// Parent is the whole disk of a partition; empty for a whole disk.
	Parent string
	// Partitions are the kernel names of a whole disk's partitions.
	Partitions []string
	// Holders are the devices stacked on this one (bcache0, dm-0, md0).
	Holders         []string
	Rotational      bool
	DiscardMaxBytes int64
	WriteCache      string // "write back" or "write through"
	// WritebackThrottlingUsec is the queue's wbt_lat_usec: the block layer's writeback
	// throttling latency target, 0 when off; empty where the queue has no such knob.
	WritebackThrottlingUsec string
	FUA                     bool
	LogicalBlock            int64
	// State is the SCSI disk's state (running, offline, blocked...); empty for other disks.
	State string
	// HardwareID names the whole disk's hardware, from what it reports about itself: its WWID
	// (NVMe EUI/NGUID, SCSI VPD page 0x83) or else its serial; empty when it reports neither.
	HardwareID string
}

// Offline says the kernel has taken the disk offline after errors, or was told to: it rejects
// every I/O to it.
func (d Device) Offline() bool { return d.State == "offline" }

// IsPartition says whether the device is a partition of a disk.
func (d Device) IsPartition() bool { return d.Parent != "" }

// Disk is the whole disk the device is on (itself for a whole disk).
func (d Device) Disk() string {
	if d.Parent != "" {
		return d.Parent
	}
	return d.Name
}

// Inspect resolves path and reads what sysfs says about the block device behind it.
func Inspect(path string) (Device, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Device{}, fmt.Errorf("%s: %w", path, ErrNotFound)
		}
		return Device{}, fmt.Errorf("resolving %s: %w", path, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return Device{}, fmt.Errorf("%s: %w", real, err)
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return Device{}, fmt.Errorf("%s (%s) is not a block device", path, real)
	}
	name, err := kernelName(path, fi)
	if err != nil {
		return Device{}, err
	}
	return inspectName(path, name)
}

// kernelName is the kernel's name of the block device node fi, found by its major:minor: the
// node's own name need not be it. Without udev (the agent's container), LVM makes its volumes'
// nodes itself, /dev/<vg>/<lv> linking to /dev/mapper/<vg>-<lv>, where sysfs knows only dm-N.
func kernelName(path string, fi os.FileInfo) (string, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("%s: no device number", path)
	}
	id := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	name, err := nameOfNumber(id)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return name, nil
}

// nameOfNumber is the kernel's name of the block device numbered id (major:minor), from sysfs.
func nameOfNumber(id string) (string, error) {
	link, err := filepath.EvalSymlinks(filepath.Join(SysDevBlock, id))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("no block device %s in %s: %w", id, SysDevBlock, ErrNotFound)
		}
		return "", fmt.Errorf("resolving block device %s: %w", id, err)
	}
	return filepath.Base(link), nil
}

// InspectName reads sysfs for a kernel device name such as nvme0n1p1 or bcache0.
func InspectName(name string) (Device, error) {
	return inspectName("/dev/"+name, name)
}

// DeviceNumber is the major:minor of a block device by kernel name, as the mount table, io.max
// and io.stat name it.
func DeviceNumber(name string) (string, error) {
	return readTrim(filepath.Join(SysClassBlock, name, "dev"))
}

func inspectName(path, name string) (Device, error) {
	sys := filepath.Join(SysClassBlock, name)
	if _, err := os.Stat(sys); err != nil {
		return Device{}, fmt.Errorf("%s: no %s: %w", path, sys, ErrNotFound)
	}
	d := Device{Path: path, DevPath: "/dev/" + name, Name: name}
	var err error
	if d.MajorMinor, err = DeviceNumber(name); err != nil {
		return d, err
	}
	sectors, err := readInt(filepath.Join(sys, "size"))
	if err != nil {
		return d, err
	}
	d.SizeBytes = sectors * 512
	queue := filepath.Join(sys, "queue")
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		link, err := filepath.EvalSymlinks(sys)
		if err != nil {
			return d, fmt.Errorf("resolving %s: %w", sys, err)
		}
		d.Parent = filepath.Base(filepath.Dir(link))
		queue = filepath.Join(SysClassBlock, d.Parent, "queue")
	} else {
		entries, err := os.ReadDir(sys)
		if err != nil {
			return d, fmt.Errorf("listing %s: %w", sys, err)
		}
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(sys, e.Name(), "partition")); err == nil {
				d.Partitions = append(d.Partitions, e.Name())
			}
		}
		sort.Strings(d.Partitions)
	}
	if d.Holders, err = listDir(filepath.Join(sys, "holders")); err != nil {
		return d, err
	}
	rot, _ := readTrim(filepath.Join(queue, "rotational"))
	d.Rotational = rot == "1"
	d.DiscardMaxBytes, _ = readInt(filepath.Join(queue, "discard_max_bytes"))
	d.WriteCache, _ = readTrim(filepath.Join(queue, "write_cache"))
	d.WritebackThrottlingUsec, _ = readTrim(filepath.Join(queue, "wbt_lat_usec"))
	fua, _ := readTrim(filepath.Join(queue, "fua"))
	d.FUA = fua == "1"
	d.LogicalBlock, _ = readInt(filepath.Join(queue, "logical_block_size"))
	d.HardwareID = hardwareID(filepath.Dir(queue))
	if scsi, err := os.Stat(filepath.Join(filepath.Dir(queue), "device", "scsi_disk")); err == nil && scsi.IsDir() {
		d.State, _ = readTrim(filepath.Join(filepath.Dir(queue), "device", "state"))
	}
	return d, nil
}

// MountedAt returns where the device or any of its partitions or holders is mounted or used as
// swap, according to the host's mount table. Holders named in except are not counted: a
// volume's own bcache device being mounted is its normal use.
func MountedAt(d Device, except ...string) ([]string, error) {
	ids := map[string]bool{d.MajorMinor: true}
	names := map[string]bool{d.Name: true}
	for _, p := range d.Partitions {
		names[p] = true
		if mm, err := DeviceNumber(p); err == nil {
			ids[mm] = true
		}
	}
	for _, h := range d.Holders {
		if slices.Contains(except, h) {
			continue
		}
		names[h] = true
		if mm, err := DeviceNumber(h); err == nil {
			ids[mm] = true
		}
	}
	info, err := os.ReadFile(HostMountInfo)
	if err != nil {
		return nil, fmt.Errorf("reading the host's mount table: %w", err)
	}
	var where []string
	for _, m := range ParseMountInfo(string(info)) {
		if ids[m.MajorMinor] {
			where = append(where, m.MountPoint)
		}
	}
	if swaps, err := os.ReadFile(HostSwaps); err == nil {
		for _, line := range strings.Split(string(swaps), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 0 && names[filepath.Base(f[0])] {
				where = append(where, "swap")
			}
		}
	}
	return where, nil
}

// RootDisks returns the whole disks under the host's root filesystem, following device-mapper
// and md stacking down to the disks.
func RootDisks() ([]string, error) {
	info, err := os.ReadFile(HostMountInfo)
	if err != nil {
		return nil, fmt.Errorf("reading the host's mount table: %w", err)
	}
	var rootID string
	for _, m := range ParseMountInfo(string(info)) {
		if m.MountPoint == "/" {
			rootID = m.MajorMinor
		}
	}
	if rootID == "" {
		return nil, fmt.Errorf("no root filesystem in %s", HostMountInfo)
	}
	rootName, err := nameOfNumber(rootID)
	if err != nil {
		// A root on a filesystem without a block device (tmpfs, overlay, 9p) has no disk.
		return nil, nil
	}
	return DisksUnder(rootName), nil
}

// DisksUnder returns the whole disks under the block device name (itself, or the disk it is a
// partition of, when nothing is stacked under it), following device-mapper and md stacking.
func DisksUnder(name string) []string {
	disks := map[string]bool{}
	var walk func(name string, depth int)
	walk = func(name string, depth int) {
		if depth > 8 {
			return
		}
		d, err := InspectName(name)
		if err != nil {
			return
		}
		slaves, _ := listDir(filepath.Join(SysClassBlock, d.Disk(), "slaves"))
		if d.IsPartition() {
			partSlaves, _ := listDir(filepath.Join(SysClassBlock, name, "slaves"))
			slaves = append(slaves, partSlaves...)
		}
		if len(slaves) == 0 {
			disks[d.Disk()] = true
			return
		}
		for _, s := range slaves {
			walk(s, depth+1)
		}
	}
	walk(name, 0)
	out := make([]string, 0, len(disks))
	for d := range disks {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// ReadSysfs reads one sysfs attribute, trimmed.
func ReadSysfs(path string) (string, error) { return readTrim(path) }

// WriteSysfs writes one sysfs attribute. The kernel's error (EINVAL, EBUSY) is the answer.
func WriteSysfs(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	if _, err := f.WriteString(value); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %q to %s: %w", value, path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %q to %s: %w", value, path, err)
	}
	return nil
}

// hardwareID reads what a whole disk's sysfs folder says identifies it: the namespace's wwid
// (NVMe), the SCSI device's wwid, the controller's serial (NVMe), or the serial of a virtio disk.
func hardwareID(disk string) string {
	for _, f := range []string{"wwid", "device/wwid", "device/serial", "serial"} {
		if id, err := readTrim(filepath.Join(disk, f)); err == nil && id != "" {
			return strings.Join(strings.Fields(id), " ")
		}
	}
	return ""
}

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func readInt(path string) (int64, error) {
	s, err := readTrim(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", path, s)
	}
	return v, nil
}

func listDir(path string) ([]string, error) {
	entries, err := os.ReadDir(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", path, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// ErrUnreadable: the device is there, but reading it fails with an I/O error.
var ErrUnreadable = errors.New("reading it fails with an I/O error")

// ReadProbe reads the device's first 4 KiB past any cache of the host's, so a device that
// answers but cannot deliver its data is told apart from one that works. EIO and ENODATA count
// (the kernel turns an NVMe or SCSI medium error into ENODATA); a device that cannot be opened,
// or fails otherwise, is reported as that.
func ReadProbe(devPath string) error {
	f, err := os.OpenFile(devPath, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", devPath, err)
	}
	defer f.Close()
	// O_DIRECT wants a buffer aligned to the logical block; a page-sized mapping is.
	buf, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("a buffer to read %s: %w", devPath, err)
	}
	defer func() { _ = syscall.Munmap(buf) }()
	if _, err := f.ReadAt(buf, 0); err != nil {
		if errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENODATA) {
			return fmt.Errorf("%s: %w", devPath, ErrUnreadable)
		}
		return fmt.Errorf("reading %s: %w", devPath, err)
	}
	return nil
}

// OpenedExclusively says whether something holds the device exclusively (a mounted filesystem,
// a device-mapper or md device, a process that opened it with O_EXCL): an exclusive open of our
// own then fails with EBUSY. A process that opened it without O_EXCL is not seen.
func OpenedExclusively(devPath string) bool {
	fd, err := unix.Open(devPath, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		return errors.Is(err, unix.EBUSY)
	}
	_ = unix.Close(fd)
	return false
}

// Writeback throttling values for SetWritebackThrottling: off, and the kernel's default for the
// disk (75 ms for a rotating one), which the kernel picks itself when told -1.
const (
	WritebackThrottlingOff     = "0"
	WritebackThrottlingDefault = "-1"
)

// SetWritebackThrottling writes a whole disk's queue/wbt_lat_usec and returns what the kernel
// then reports.
func SetWritebackThrottling(disk, usec string) (string, error) {
	path := filepath.Join(SysClassBlock, disk, "queue", "wbt_lat_usec")
	if err := WriteSysfs(path, usec); err != nil {
		return "", err
	}
	return ReadSysfs(path)
}
