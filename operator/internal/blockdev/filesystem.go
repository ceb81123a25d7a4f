package blockdev

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// MakeFilesystem makes a filesystem on a device that Signatures found blank: XFS (MySQL's usual
// choice on Linux) or ext4. The caller checks blankness: a device that carries anything is never
// formatted.
func (r Runner) MakeFilesystem(ctx context.Context, fsType, devPath string) error {
	var err error
	switch fsType {
	case "xfs":
		_, err = r.Run(ctx, "mkfs.xfs", "-q", devPath)
	case "ext4":
		_, err = r.Run(ctx, "mkfs.ext4", "-q", devPath)
	default:
		return fmt.Errorf("filesystem %q: flashcache makes xfs or ext4", fsType)
	}
	if err != nil {
		return fmt.Errorf("making %s on %s: %w", fsType, devPath, err)
	}
	return nil
}

// GrowFilesystem grows the filesystem mounted at mountPoint to its device's size, while mounted:
// XFS by its mount point, ext4 by its device.
func (r Runner) GrowFilesystem(ctx context.Context, fsType, devPath, mountPoint string) error {
	var err error
	switch fsType {
	case "xfs":
		_, err = r.Run(ctx, "xfs_growfs", mountPoint)
	case "ext4":
		_, err = r.Run(ctx, "resize2fs", devPath)
	default:
		return fmt.Errorf("filesystem %q: flashcache grows xfs or ext4", fsType)
	}
	if err != nil {
		return fmt.Errorf("growing the %s filesystem at %s: %w", fsType, mountPoint, err)
	}
	return nil
}

// mountFlags are the mount options that are flags of mount(2); any other option goes to the
// filesystem as data (XFS's "nouuid", "discard").
var mountFlags = map[string]uintptr{
	"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
	"sync": unix.MS_SYNCHRONOUS, "noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME,
	"relatime": unix.MS_RELATIME, "bind": unix.MS_BIND,
}

// MountOptions splits mount options into mount(2)'s flags and the filesystem's data string.
func MountOptions(options []string) (uintptr, string) {
	var flags uintptr
	var data []string
	for _, o := range options {
		if f, ok := mountFlags[o]; ok {
			flags |= f
		} else if o != "" && o != "rw" && o != "defaults" {
			data = append(data, o)
		}
	}
	return flags, strings.Join(data, ",")
}

// MountAt mounts source at target with mount(2): a filesystem of fsType, or with "bind" among the
// options a bind mount (made read-only by a remount when "ro" is asked, which a bind mount does
// not take at once).
func MountAt(source, target, fsType string, options []string) error {
	flags, data := MountOptions(options)
	if err := unix.Mount(source, target, fsType, flags, data); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", source, target, err)
	}
	if flags&unix.MS_BIND != 0 && flags&unix.MS_RDONLY != 0 {
		if err := unix.Mount("", target, "", flags|unix.MS_REMOUNT, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return fmt.Errorf("making the bind mount at %s read-only: %w", target, err)
		}
	}
	return nil
}

// Unmount unmounts target if something is mounted there, and removes it (a folder, or the file
// a block volume was bound onto). A path that is not there is already done.
func Unmount(target string) error {
	mounted, err := IsMountPoint(target)
	if err != nil {
		return err
	}
	if mounted {
		if err := unix.Unmount(target, 0); err != nil {
			return fmt.Errorf("unmounting %s: %w", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing %s: %w", target, err)
	}
	return nil
}

// IsMountPoint says whether something is mounted at path, by this process's mount table (a
// bind mount of a file counts too, which comparing device numbers would miss).
func IsMountPoint(path string) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("reading the mount table: %w", err)
	}
	return slices.ContainsFunc(ParseMountInfo(string(info)), func(m Mount) bool { return m.MountPoint == abs }), nil
}
