//go:build vm

package vmharness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// TestVMHasWhatKernelTestsNeed boots the test VM with one NVMe, one HDD and the three HDDs of the
// volatile-cache emulation, and checks every property later tests rely on: stable by-id names,
// the right rotational and discard flags, the bcache module and tools, file copy, the
// emulation's flush costs, and what survives a reboot, a power cut and a clean shutdown. One VM
// for all of it: a boot costs 20 to 45 s under TCG.
func TestVMHasWhatKernelTestsNeed(t *testing.T) {
	image := vmharness.ImageFromEnv(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	nvme := vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-cache0", Size: 4 << 30}
	hdd := vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-backing0", Size: 8 << 30}
	honest, liar, plain := volatileDisks()
	work := t.TempDir()
	vm, err := vmharness.Boot(ctx, vmharness.Options{
		Image:   image,
		WorkDir: work,
		Disks:   []vmharness.Disk{nvme, hdd, honest, liar, plain},
		Logf:    t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	t.Logf("boot to ssh ready: %s; by hand: %s", vm.BootTime().Round(100*time.Millisecond), strings.Join(vm.SSHCommand(), " "))

	run := func(t *testing.T, cmd string) string {
		t.Helper()
		out, err := vm.Output(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	sysfsInt := func(t *testing.T, disk vmharness.Disk, file string) int64 {
		t.Helper()
		s := run(t, fmt.Sprintf("cat /sys/block/$(basename $(readlink -f %s))/queue/%s", disk.ByID(), file))
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s of %s: %v", file, disk.Serial, err)
		}
		return n
	}

	t.Run("by-id names exist", func(t *testing.T) {
		for _, d := range []vmharness.Disk{nvme, hdd} {
			run(t, "test -b "+d.ByID())
		}
		t.Logf("by-id:\n%s", run(t, "ls -l /dev/disk/by-id/"))
	})

	t.Run("an NVMe namespace sits on its controller, behind no multipath head", func(t *testing.T) {
		// QEMU 10 reports a multi-controller subsystem; the image's nvme_core.multipath=N keeps
		// the single-port layout that the fault tests' Pull and real single-port SSDs have.
		dev := run(t, fmt.Sprintf("readlink -f /sys/block/$(basename $(readlink -f %s))/device", nvme.ByID()))
		if !strings.Contains(dev, "/nvme/nvme") || strings.Contains(dev, "nvme-subsystem") {
			t.Errorf("the NVMe namespace's device is %s, want its controller (.../nvme/nvmeN)", dev)
		}
	})

	t.Run("the guest says where its CPU went", func(t *testing.T) {
		out, err := vm.GuestCPU(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out, "guest CPU since boot: user ") || !regexp.MustCompile(`(?m)^ +[0-9.]+ s +[0-9.]+ s own +[0-9.]+ s children +[0-9]+ x systemd$`).MatchString(out) {
			t.Errorf("the report has no totals or no line for systemd:\n%s", out)
		}
	})

	t.Run("HDD rotates, NVMe does not", func(t *testing.T) {
		if got := sysfsInt(t, hdd, "rotational"); got != 1 {
			t.Errorf("HDD rotational = %d, want 1", got)
		}
		if got := sysfsInt(t, nvme, "rotational"); got != 0 {
			t.Errorf("NVMe rotational = %d, want 0", got)
		}
	})

	t.Run("NVMe discard reaches the backing file, HDD has none", func(t *testing.T) {
		if got := sysfsInt(t, nvme, "discard_max_bytes"); got <= 0 {
			t.Errorf("NVMe discard_max_bytes = %d, want > 0", got)
		}
		if got := sysfsInt(t, hdd, "discard_max_bytes"); got != 0 {
			t.Errorf("HDD discard_max_bytes = %d, want 0", got)
		}
		backing := vm.Disks()[0].Path
		run(t, "dd if=/dev/urandom of="+nvme.ByID()+" bs=1M count=32 oflag=direct status=none")
		written := allocated(t, backing)
		run(t, "blkdiscard -f "+nvme.ByID())
		discarded := allocated(t, backing)
		t.Logf("NVMe backing file: %d KiB allocated after writing 32 MiB, %d KiB after blkdiscard", written>>10, discarded>>10)
		if written < 32<<20 || discarded >= written {
			t.Errorf("discard did not free the backing file's blocks")
		}
	})

	t.Run("bcache module and tools", func(t *testing.T) {
		run(t, "modprobe bcache && test -e /sys/fs/bcache/register")
		run(t, "command -v make-bcache && command -v bcache-super-show && command -v sgdisk && command -v wipefs")
	})

	t.Run("copied file round-trips", func(t *testing.T) {
		local := filepath.Join(t.TempDir(), "payload")
		content := fmt.Sprintf("flashcache %d\n", time.Now().UnixNano())
		if err := os.WriteFile(local, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := vm.CopyFile(ctx, local, "/usr/local/bin/payload", 0o755); err != nil {
			t.Fatal(err)
		}
		if got := run(t, "cat /usr/local/bin/payload"); got+"\n" != content {
			t.Errorf("copied file reads %q, want %q", got, content)
		}
		if got := run(t, "stat -c %a /usr/local/bin/payload"); got != "755" {
			t.Errorf("mode %s, want 755", got)
		}
	})

	// A command waiting on a thread the kernel lost to a crash would wait for good; the harness
	// ends it when the console reports the crash. What is written to /dev/kmsg reaches the
	// console as the kernel's own lines do, so a written line stands for a crash without one.
	t.Run("a kernel crash on the console ends the command", func(t *testing.T) {
		began := time.Now()
		_, _, code, err := vm.Run(ctx, "echo 'kernel BUG at vmharness/vm_test.go (written by the test, not a crash)' > /dev/kmsg; sleep 60")
		if err == nil || !strings.Contains(err.Error(), "the guest's kernel crashed while it ran: ") || !strings.Contains(err.Error(), "written by the test") {
			t.Fatalf("exit %d, error %v: want the crash's line as the error", code, err)
		}
		if took := time.Since(began); took > 20*time.Second {
			t.Errorf("the command ended %s after the crash's line, want within seconds", took.Round(time.Second))
		}
	})
	t.Run("HDD throughput", func(t *testing.T) {
		seq := fio(t, vm, ctx, "--rw=write --bs=1M --size=256M --iodepth=4", hdd)
		rnd := fio(t, vm, ctx, "--rw=randread --bs=4k --iodepth=16 --runtime=5 --time_based", hdd)
		t.Logf("HDD (limits %d IOPS, %d MiB/s): sequential write %.0f MiB/s, random 4k read %.0f IOPS",
			vmharness.DefaultHDDIOPS, vmharness.DefaultHDDBytesPerSec>>20, seq.Write.BWBytes/(1<<20), rnd.Read.IOPS)
		nv := fio(t, vm, ctx, "--rw=randread --bs=4k --iodepth=16 --runtime=5 --time_based", nvme)
		t.Logf("NVMe random 4k read %.0f IOPS (TCG-bound, not a device limit)", nv.Read.IOPS)
	})

	volatile := volatileChecks{vm: vm, ctx: ctx, honest: honest, liar: liar, plain: plain}
	t.Run("guest sees rotating disks with a volatile write cache", volatile.guestSeesRotatingDisksWithAVolatileCache)
	t.Run("flush latency", volatile.flushLatency)

	// Far into the HDD, where the throughput test above did not write.
	marker := fmt.Sprintf("flashcache-marker-%d", time.Now().UnixNano())
	readMarker := fmt.Sprintf("dd if=%s bs=4096 skip=1000000 count=1 status=none | head -c %d", hdd.ByID(), len(marker))

	t.Run("reboot keeps data disk contents and the volatile caches", func(t *testing.T) {
		run(t, fmt.Sprintf("printf %%s %s | dd of=%s bs=4096 seek=1000000 conv=sync,fsync status=none && sync", marker, hdd.ByID()))
		cached := region{liar, 500, 20, true}
		volatile.write(t, cached)
		if err := vm.Reboot(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("boot after reboot: %s", vm.BootTime().Round(100*time.Millisecond))
		if got := run(t, readMarker); got != marker {
			t.Errorf("after reboot the HDD holds %q, want %q", got, marker)
		}
		volatile.check(t, "after a reboot", cached, true)
		volatile.liarBackingFileIsBlankAt(t, cached)
	})

	t.Run("power cut", func(t *testing.T) {
		regions, afterCut := volatile.powerCutRegions(t)
		if err := vm.Kill(); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := vm.Run(ctx, "true"); err == nil {
			t.Error("Run worked on a killed VM")
		}
		if err := vm.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if got := run(t, readMarker); got != marker {
			t.Errorf("after a power cut the HDD holds %q, want %q (it was synced before)", got, marker)
		}
		for i, r := range regions {
			volatile.check(t, "after the cut", r, afterCut[i])
		}
	})

	t.Run("clean shutdown", volatile.cleanShutdown)

	if err := vm.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	nbdkitSaid(t, work)
	t.Logf("harness test total: %s", time.Since(start).Round(100*time.Millisecond))
}

// allocated is how many bytes of a host file are really stored (it is sparse).
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Blocks * 512
}

type fioResult struct {
	Read, Write struct {
		BWBytes float64 `json:"bw_bytes"`
		IOPS    float64 `json:"iops"`
	}
}

// fio runs one direct-I/O job on the whole disk and returns its figures.
func fio(t *testing.T, vm *vmharness.VM, ctx context.Context, job string, disk vmharness.Disk) fioResult {
	t.Helper()
	out, err := vm.Output(ctx, fmt.Sprintf("fio --name=probe --filename=%s --direct=1 --ioengine=libaio %s --output-format=json", disk.ByID(), job))
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Jobs []fioResult }
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("fio output (%v): %s", err, out)
	}
	return r.Jobs[0]
}
