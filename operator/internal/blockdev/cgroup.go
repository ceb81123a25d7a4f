package blockdev

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The write limit of a flush pass that falls behind is cgroup v2's io.max on the bcache device:
// blk-throttle sits in submit_bio, before bcache sees a bio, so it holds back the writers of the
// volume and nobody else (bcache's writeback and the file system's log are kernel threads, in
// the root cgroup, which cannot be limited). Limits are set on the top-level cgroups that write
// to the device (kubepods.slice under a kubelet, system.slice for a database run by systemd):
// blk-throttle is hierarchical, so a top-level limit holds back everything below it, whichever
// pod or unit writes.

// CgroupRoot is where the cgroup v2 hierarchy is mounted. The agent mounts the host's /sys, so it
// is the host's root there too.
var CgroupRoot = "/sys/fs/cgroup"

// ErrNoIOController is returned where the kernel has no cgroup v2 io controller to limit writes.
var ErrNoIOController = errors.New("no cgroup v2 io controller")

// WrittenBytes is what has been written to a block device since it appeared, from its stat file
// (the seventh field counts 512-byte sectors whatever the device's block size).
func WrittenBytes(name string) (int64, error) {
	s, err := ReadSysfs(filepath.Join(SysClassBlock, name, "stat"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(s)
	if len(f) < 7 {
		return 0, fmt.Errorf("%s/stat has %d fields, want at least 7", name, len(f))
	}
	sectors, err := strconv.ParseInt(f[6], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s/stat: sectors written: %w", name, err)
	}
	return sectors * 512, nil
}

// EnableIOController turns the io controller on for the root's children, so that they have io.max
// and io.stat. Under a kubelet it is on already (runc enables every controller for kubepods); on
// a host where systemd runs the database it is on only if some unit asks for IOAccounting, and
// systemd may turn it off again when it next realizes its slices: the engine calls this on every
// run that limits writes.
func EnableIOController() error {
	controllers, err := ReadSysfs(filepath.Join(CgroupRoot, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoIOController, err)
	}
	if !slices.Contains(strings.Fields(controllers), "io") {
		return fmt.Errorf("%w: %s/cgroup.controllers is %q", ErrNoIOController, CgroupRoot, controllers)
	}
	enabled, err := ReadSysfs(filepath.Join(CgroupRoot, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	if slices.Contains(strings.Fields(enabled), "io") {
		return nil
	}
	return WriteSysfs(filepath.Join(CgroupRoot, "cgroup.subtree_control"), "+io")
}

// CgroupWrites is the bytes each top-level cgroup has written to the device majMin, from its
// io.stat, for those that have written to it; cgroups are named relative to CgroupRoot.
func CgroupWrites(majMin string) (map[string]int64, error) {
	entries, err := os.ReadDir(CgroupRoot)
	if err != nil {
		return nil, fmt.Errorf("listing cgroups: %w", err)
	}
	writes := map[string]int64{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(CgroupRoot, e.Name(), "io.stat"))
		if err != nil {
			// No io controller for it, or it went away meanwhile.
			continue
		}
		if n, ok := ParseIOStatWrites(string(b), majMin); ok && n > 0 {
			writes[e.Name()] = n
		}
	}
	return writes, nil
}

// ParseIOStatWrites is the wbytes of device majMin in an io.stat file.
func ParseIOStatWrites(ioStat, majMin string) (int64, bool) {
	return ioKey(ioStat, majMin, "wbytes")
}

// ParseIOMaxWriteLimit is the wbps limit of device majMin in an io.max file, 0 for none.
func ParseIOMaxWriteLimit(ioMax, majMin string) int64 {
	n, _ := ioKey(ioMax, majMin, "wbps")
	return n
}

// ioKey reads key=value of the line for majMin in a nested-keyed cgroup file; "max" is no value.
func ioKey(file, majMin, key string) (int64, bool) {
	sc := bufio.NewScanner(strings.NewReader(file))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != majMin {
			continue
		}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k != key {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// WriteLimit is the wbps limit on the device majMin for the cgroup, 0 for none.
func WriteLimit(cgroup, majMin string) (int64, error) {
	b, err := os.ReadFile(ioMaxPath(cgroup))
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", ioMaxPath(cgroup), err)
	}
	return ParseIOMaxWriteLimit(string(b), majMin), nil
}

// IOMaxWriteLimitLine is the io.max line that limits writes to majMin to bytesPerSecond, or
// lifts the limit for 0. It names wbps alone, so any other limit on the device is kept.
func IOMaxWriteLimitLine(majMin string, bytesPerSecond int64) string {
	if bytesPerSecond <= 0 {
		return majMin + " wbps=max"
	}
	return majMin + " wbps=" + strconv.FormatInt(bytesPerSecond, 10)
}

// SetWriteLimit limits the cgroup's writes to the device majMin to bytesPerSecond, or lifts the
// limit for 0. A cgroup that is gone has nothing to lift.
func SetWriteLimit(cgroup, majMin string, bytesPerSecond int64) error {
	err := WriteSysfs(ioMaxPath(cgroup), IOMaxWriteLimitLine(majMin, bytesPerSecond))
	if bytesPerSecond <= 0 && errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func ioMaxPath(cgroup string) string { return filepath.Join(CgroupRoot, cgroup, "io.max") }
