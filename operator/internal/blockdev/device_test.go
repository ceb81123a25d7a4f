package blockdev

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestHardwareIDPrefersTheWWIDToTheSerial(t *testing.T) {
	write := func(dir, file, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nvme, scsi, virtio, none := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	write(nvme, "wwid", "nvme.1b36-66632d636163686530-51454d55204e564d65204374726c-00000001\n")
	write(nvme, "device/serial", "fc-cache0           \n")
	write(scsi, "device/wwid", "t10.QEMU    QEMU HARDDISK   fc-backing0\n")
	write(virtio, "serial", "disk-7\n")
	for dir, want := range map[string]string{
		nvme:   "nvme.1b36-66632d636163686530-51454d55204e564d65204374726c-00000001",
		scsi:   "t10.QEMU QEMU HARDDISK fc-backing0",
		virtio: "disk-7",
		none:   "",
	} {
		if got := hardwareID(dir); got != want {
			t.Errorf("hardwareID = %q, want %q", got, want)
		}
	}
}

// Without udev (the agent's container), LVM makes its volumes' nodes itself: /dev/<vg>/<lv> links
// to /dev/mapper/<vg>-<lv>, a name sysfs does not know (it knows dm-N). Inspect must find the
// device by its number. A node with a mapper-like name for one of this host's block devices
// stands in for it.
func TestInspectNamesTheDeviceByItsNumberNotItsNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a device node needs root")
	}
	ids, err := os.ReadDir(SysDevBlock)
	if err != nil || len(ids) == 0 {
		t.Skipf("no block devices in %s: %v", SysDevBlock, err)
	}
	id := ids[0].Name()
	link, err := filepath.EvalSymlinks(filepath.Join(SysDevBlock, id))
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Base(link)
	var major, minor uint32
	if _, err := fmt.Sscanf(id, "%d:%d", &major, &minor); err != nil {
		t.Fatal(err)
	}
	dev := t.TempDir()
	node := filepath.Join(dev, "mapper", "fcp--pool-fc--claim")
	if err := os.MkdirAll(filepath.Dir(node), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(major, minor))); err != nil {
		t.Skipf("mknod: %v", err)
	}
	path := filepath.Join(dev, "fcp-pool", "fc-claim")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../mapper/fcp--pool-fc--claim", path); err != nil {
		t.Fatal(err)
	}
	d, err := Inspect(path)
	if err != nil {
		t.Fatalf("Inspect(%s): %v", path, err)
	}
	if d.Name != want || d.MajorMinor != id || d.Path != path {
		t.Errorf("Inspect(%s) = name %q, number %q, path %q; want %q, %q, the path named", path, d.Name, d.MajorMinor, d.Path, want, id)
	}
}
