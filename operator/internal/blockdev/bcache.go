package blockdev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SysFsBcache is bcache's own sysfs folder: registration and cache sets.
var SysFsBcache = "/sys/fs/bcache"

// Signatures lists what wipefs finds on a device (filesystems, partition tables, LVM, RAID,
// bcache). It reads only; nothing is erased.
func (r Runner) Signatures(ctx context.Context, devPath string) ([]Signature, error) {
	out, err := r.Run(ctx, "wipefs", "--no-act", "--json", devPath)
	if err != nil {
		return nil, fmt.Errorf("looking for signatures on %s: %w", devPath, err)
	}
	return ParseWipefsJSON(out)
}

// SuperShow reads a bcache superblock.
func (r Runner) SuperShow(ctx context.Context, devPath string) (SuperBlock, error) {
	out, err := r.Run(ctx, "bcache-super-show", devPath)
	if err != nil {
		return SuperBlock{}, fmt.Errorf("reading the bcache superblock of %s: %w", devPath, err)
	}
	sb, err := ParseSuperShow(out)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", devPath, err)
	}
	return sb, nil
}

// FirstPartitionName reads the name of partition 1 from the partition table on the disk itself,
// which the kernel may not have read yet.
func (r Runner) FirstPartitionName(ctx context.Context, devPath string) (string, error) {
	out, err := r.Run(ctx, "sfdisk", "--json", devPath)
	if err != nil {
		return "", fmt.Errorf("reading the partition table of %s: %w", devPath, err)
	}
	return ParseSfdiskFirstName(out)
}

// CacheRegistration is a registered bcache cache device.
type CacheRegistration struct {
	// SetUUID is the cache set it belongs to; /sys/fs/bcache/<SetUUID> is the set's folder.
	SetUUID string
}

// RegisteredCache returns the registration of a cache device, or nil when the kernel does not
// know it as one.
func RegisteredCache(name string) (*CacheRegistration, error) {
	set, err := os.Readlink(filepath.Join(SysClassBlock, name, "bcache", "set"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the cache set of %s: %w", name, err)
	}
	return &CacheRegistration{SetUUID: filepath.Base(set)}, nil
}

// CachesBackingDevices says whether a registered cache set has backing devices attached (the
// set's folder holds a bdevN link for each).
func CachesBackingDevices(setUUID string) (bool, error) {
	links, err := filepath.Glob(filepath.Join(SysFsBcache, setUUID, "bdev*"))
	if err != nil {
		return false, fmt.Errorf("listing the backing devices of cache set %s: %w", setUUID, err)
	}
	return len(links) > 0, nil
}

// BackingRegistration is a registered bcache backing device and the bcacheN device on top of it.
type BackingRegistration struct {
	// Sysfs is the backing device's bcache folder, where its knobs are.
	Sysfs string
	// Device is the kernel name of the bcache device, e.g. bcache0; empty while bcache waits for
	// the cache set the backing device belongs to.
	Device string
	// AttachedSet is the cache set it is attached to; empty when it runs without a cache.
	AttachedSet string
}

// RegisteredBacking returns the registration of a backing device, or nil when the kernel does not
// know it as one.
func RegisteredBacking(name string) (*BackingRegistration, error) {
	dir := filepath.Join(SysClassBlock, name, "bcache")
	if _, err := os.Stat(filepath.Join(dir, "cache_mode")); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	reg := &BackingRegistration{Sysfs: dir}
	dev, err := os.Readlink(filepath.Join(dir, "dev"))
	switch {
	case err == nil:
		reg.Device = filepath.Base(dev)
	case errors.Is(err, os.ErrNotExist):
		// Registered, but bcache starts no device until the cache set it was attached to
		// appears (a backing device that may hold dirty data must not serve without it).
	default:
		return nil, fmt.Errorf("finding the bcache device of %s: %w", name, err)
	}
	if set, err := os.Readlink(filepath.Join(dir, "cache")); err == nil {
		reg.AttachedSet = filepath.Base(set)
	}
	return reg, nil
}

// Register asks the kernel to register a bcache device, as udev would; pods have no udev. It uses
// register_quiet, which succeeds for a device that is already registered, so callers must check
// the registration afterwards (it also succeeds, silently, for a device someone else holds).
func Register(devPath string) error {
	return WriteSysfs(filepath.Join(SysFsBcache, "register_quiet"), devPath)
}

// Knob reads a bcache sysfs attribute from a folder such as BackingRegistration.Sysfs.
func Knob(dir, name string) (string, error) { return ReadSysfs(filepath.Join(dir, name)) }

// SetKnob writes a bcache sysfs attribute.
func SetKnob(dir, name, value string) error { return WriteSysfs(filepath.Join(dir, name), value) }

// WaitFor polls cond every interval until it returns true, an error, or ctx ends.
func WaitFor(ctx context.Context, interval time.Duration, what string, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// ParseBytes parses a decimal byte count from sysfs.
func ParseBytes(s string) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a byte count", s)
	}
	return v, nil
}
