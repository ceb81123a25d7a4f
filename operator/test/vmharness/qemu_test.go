package vmharness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
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
		disks: disks, memoryMiB: 2048, cpus: 2, sshPort: 2222, consoleLog: "/c.log"})
	joined := strings.Join(args, " ")

	for _, want := range []string{
		"-drive if=none,id=disk0,format=raw,file=/work,,dir/disk-cache0.img,discard=unmap",
		"-device nvme,drive=disk0,serial=cache0",
		"-drive if=none,id=disk1,format=raw,file=/work,,dir/disk-slow0.img,throttling.iops-total=150,throttling.bps-total=157286400",
		"-device scsi-hd,bus=scsi0.0,drive=disk1,serial=slow0,rotation_rate=7200,discard_granularity=0",
		"-drive if=none,id=disk2,format=raw,file=/work,,dir/disk-slow1.img,throttling.bps-total=10485760 ",
		"hostfwd=tcp:127.0.0.1:2222-:22",
		"-accel tcg",
		"-no-reboot",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q:\n%s", want, joined)
		}
	}
	if n := strings.Count(joined, "virtio-scsi-pci"); n != 1 {
		t.Errorf("want one virtio-scsi controller for all HDDs, got %d", n)
	}
	if !slices.Contains(args, "c") {
		t.Errorf("kernel cmdline not passed as one argument: %q", args)
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
	if got := shellQuote("it's"); got != `'it'\''s'` {
		t.Error(got)
	}
}
