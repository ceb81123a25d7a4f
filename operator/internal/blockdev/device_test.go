package blockdev

import (
	"os"
	"path/filepath"
	"testing"
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
