package blockdev

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestMountOptionsSplitFlagsFromTheFilesystemsData(t *testing.T) {
	flags, data := MountOptions([]string{"bind", "ro", "noatime", "nouuid", "rw", "", "discard"})
	if flags != unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOATIME || data != "nouuid,discard" {
		t.Errorf("flags %#x data %q: want bind|ro|noatime and \"nouuid,discard\"", flags, data)
	}
}

func TestAnUnknownFilesystemIsNeitherMadeNorGrown(t *testing.T) {
	if err := (Runner{}).MakeFilesystem(t.Context(), "btrfs", "/dev/null"); err == nil {
		t.Error("btrfs made")
	}
	if err := (Runner{}).GrowFilesystem(t.Context(), "vfat", "/dev/null", "/mnt"); err == nil {
		t.Error("vfat grown")
	}
}

func TestIsMountPointReadsTheMountTable(t *testing.T) {
	if mounted, err := IsMountPoint("/proc"); err != nil || !mounted {
		t.Errorf("/proc: %v %v, want mounted", mounted, err)
	}
	if mounted, err := IsMountPoint(t.TempDir()); err != nil || mounted {
		t.Errorf("a new folder: %v %v, want not mounted", mounted, err)
	}
}
