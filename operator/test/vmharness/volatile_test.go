//go:build vm

package vmharness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// TestVolatileDiskCaches proves the volatile-cache emulation from inside the guest, on one VM
// with an honest HDD, a lying HDD and a plain one: what the guest kernel sees, what a flush
// costs, and what survives a power cut (Kill then Start) and a clean Shutdown then Start.
func TestVolatileDiskCaches(t *testing.T) {
	image := vmharness.ImageFromEnv(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	honest := vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-honest0", Size: 1 << 30, Cache: vmharness.CacheVolatileHonest}
	liar := vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-liar0", Size: 1 << 30, Cache: vmharness.CacheVolatileLying}
	plain := vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-plain0", Size: 1 << 30}
	work := t.TempDir()
	vm, err := vmharness.Boot(ctx, vmharness.Options{
		Image:   image,
		WorkDir: work,
		Disks:   []vmharness.Disk{honest, liar, plain},
		Logf:    t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	t.Logf("boot to ssh ready: %s", vm.BootTime().Round(100*time.Millisecond))

	run := func(t *testing.T, cmd string) string {
		t.Helper()
		out, err := vm.Output(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	queue := func(t *testing.T, d vmharness.Disk, file string) string {
		t.Helper()
		return run(t, fmt.Sprintf("cat /sys/block/$(basename $(readlink -f %s))/queue/%s", d.ByID(), file))
	}

	t.Run("guest sees rotating disks with a volatile write cache", func(t *testing.T) {
		for _, d := range []vmharness.Disk{honest, liar, plain} {
			if got := queue(t, d, "write_cache"); got != "write back" {
				t.Errorf("%s: write_cache %q, want \"write back\" (else the kernel sends no flushes)", d.Serial, got)
			}
			if got := queue(t, d, "rotational"); got != "1" {
				t.Errorf("%s: rotational %s, want 1", d.Serial, got)
			}
			t.Logf("%s (%s): write_cache %q, fua %s", d.Serial, d.Cache, queue(t, d, "write_cache"), queue(t, d, "fua"))
		}
	})

	t.Run("flush latency", func(t *testing.T) {
		// One thread, 4 KiB O_DIRECT writes, each followed by fsync on the block device (a
		// cache flush), for a few seconds: fio reports the fsyncs' latency apart from the
		// writes', which QEMU's IOPS throttle may slow.
		lat := map[string]syncLatency{}
		for _, d := range []vmharness.Disk{honest, liar, plain} {
			l := fsyncLatency(t, vm, ctx, d)
			lat[d.Serial] = l
			t.Logf("%s (%s): %d fsyncs in 5 s, latency mean %s, p50 %s, p99 %s, max %s; %.0f write+fsync/s",
				d.Serial, d.Cache, l.n, l.mean, l.p50, l.p99, l.max, l.perSec)
		}
		// Medians: on a busy TCG host a few fsyncs take a hundred milliseconds whatever the
		// disk, which moves means and maxima. Every honest fsync follows a write, so it writes
		// a block back and pays at least the modelled delay.
		if h := lat[honest.Serial]; h.p50 < vmharness.VolatileFlushDelay {
			t.Errorf("honest flush p50 %s, want at least the modelled %s", h.p50, vmharness.VolatileFlushDelay)
		}
		// A lying fsync is a round trip, which a loaded host slows too (1.2 ms beside a full
		// make test, 0.3 ms alone): it must stay well under the modelled delay it skips.
		if l, h := lat[liar.Serial], lat[honest.Serial]; l.p50 > vmharness.VolatileFlushDelay/2 || l.p50*4 > h.p50 {
			t.Errorf("lying flush p50 %s: want under half the modelled %s and far below the honest %s", l.p50, vmharness.VolatileFlushDelay, h.p50)
		}
	})

	// Each region is 4 MiB of pseudo-random data, beyond what fio wrote.
	type region struct {
		disk    vmharness.Disk
		offMiB  int
		seed    int
		flushed bool
	}
	write := func(t *testing.T, r region) {
		t.Helper()
		sync := ""
		if r.flushed {
			sync = " conv=fsync"
		}
		run(t, fmt.Sprintf("%s | dd of=%s bs=1M seek=%d oflag=direct iflag=fullblock status=none%s",
			pattern(r.seed), r.disk.ByID(), r.offMiB, sync))
	}
	// intact is how many of the region's 4 KiB blocks hold what was written.
	intact := func(t *testing.T, r region) int {
		t.Helper()
		out := run(t, fmt.Sprintf("dd if=%s bs=1M skip=%d count=%d iflag=direct status=none | python3 -c %s",
			r.disk.ByID(), r.offMiB, regionMiB, vmharness.ShellQuote(fmt.Sprintf(
				"import random,sys; w=random.Random(%d).randbytes(%d); g=sys.stdin.buffer.read(); "+
					"print(sum(g[i:i+4096]==w[i:i+4096] for i in range(0,len(w),4096)))", r.seed, regionMiB<<20))))
		n, err := strconv.Atoi(out)
		if err != nil {
			t.Fatalf("block count %q: %v", out, err)
		}
		return n
	}
	const blocks = regionMiB << 20 / 4096
	describe := func(r region) string {
		f := "unflushed"
		if r.flushed {
			f = "flushed"
		}
		return fmt.Sprintf("%s (%s), %s, at %d MiB", r.disk.Serial, r.disk.Cache, f, r.offMiB)
	}
	check := func(t *testing.T, when string, r region, wantIntact bool) {
		t.Helper()
		n := intact(t, r)
		t.Logf("%s, %s: %d of %d blocks intact", when, describe(r), n, blocks)
		switch {
		case wantIntact && n != blocks:
			t.Errorf("%s, %s: %d of %d blocks lost, want none", when, describe(r), blocks-n, blocks)
		case !wantIntact && n == blocks:
			t.Errorf("%s, %s: nothing lost, want a loss", when, describe(r))
		}
	}

	t.Run("power cut", func(t *testing.T) {
		honestFlushed := region{honest, 100, 1, true}
		liarWrittenBack := region{liar, 100, 3, true}
		plainUnflushed := region{plain, 100, 5, false}
		honestUnflushed := region{honest, 200, 2, false}
		liarFlushed := region{liar, 200, 4, true}
		// Every flush of a disk writes all of its cache back, so the honest disk's unflushed
		// region comes after its last flush, and the liar's flushed one after the write-back.
		for _, r := range []region{honestFlushed, liarWrittenBack, plainUnflushed} {
			write(t, r)
		}
		wbStart := time.Now()
		if err := vm.WriteBackDiskCaches(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("WriteBackDiskCaches: %s", time.Since(wbStart).Round(time.Millisecond))
		for _, r := range []region{honestUnflushed, liarFlushed} {
			write(t, r)
		}
		all := []region{honestFlushed, liarWrittenBack, plainUnflushed, honestUnflushed, liarFlushed}
		for _, r := range all {
			check(t, "before the cut", r, true)
		}
		if err := vm.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := vm.Start(ctx); err != nil {
			t.Fatal(err)
		}
		check(t, "after the cut", honestFlushed, true)
		check(t, "after the cut", liarWrittenBack, true)
		check(t, "after the cut", plainUnflushed, true) // CacheNone: the host's page cache has it
		check(t, "after the cut", honestUnflushed, false)
		check(t, "after the cut", liarFlushed, false) // the lie
	})

	t.Run("clean shutdown", func(t *testing.T) {
		var all []region
		for i, d := range []vmharness.Disk{honest, liar} {
			all = append(all, region{d, 300, 10 + 2*i, true}, region{d, 400, 11 + 2*i, false})
		}
		for _, r := range all {
			write(t, r)
		}
		sdStart := time.Now()
		if err := vm.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("clean shutdown: %s", time.Since(sdStart).Round(100*time.Millisecond))
		if err := vm.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for _, r := range all {
			check(t, "after shutdown and start", r, true)
		}
	})

	// A reboot is not a power cycle: nbdkit keeps running, and the caches with it. The liar's
	// backing file shows the data is still only cached.
	t.Run("reboot keeps the caches", func(t *testing.T) {
		r := region{liar, 500, 20, true}
		write(t, r)
		if err := vm.Reboot(ctx); err != nil {
			t.Fatal(err)
		}
		check(t, "after a reboot", r, true)
		b := make([]byte, regionMiB<<20)
		f, err := os.Open(vm.Disks()[1].Path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.ReadAt(b, int64(r.offMiB)<<20); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, make([]byte, len(b))) {
			t.Errorf("the liar's backing file holds data at %d MiB, which only its cache should", r.offMiB)
		}
	})

	if err := vm.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	// nbdkit says nothing unless something went wrong; show it if it did.
	logs, _ := filepath.Glob(filepath.Join(work, "nbd-*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		var said []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if !strings.HasPrefix(line, "--- ") {
				said = append(said, line)
			}
		}
		if len(said) > 0 {
			t.Logf("%s:\n%s", filepath.Base(l), strings.Join(said, "\n"))
		}
	}
	t.Logf("volatile cache test total: %s", time.Since(start).Round(100*time.Millisecond))
}

const regionMiB = 4

// pattern is a guest command printing regionMiB MiB of pseudo-random data determined by seed.
func pattern(seed int) string {
	return "python3 -c " + vmharness.ShellQuote(fmt.Sprintf(
		"import random,sys; sys.stdout.buffer.write(random.Random(%d).randbytes(%d))", seed, regionMiB<<20))
}

type syncLatency struct {
	n                   int
	mean, p50, p99, max time.Duration
	perSec              float64
}

// fsyncLatency runs fio's write+fsync loop on the first 64 MiB of d.
func fsyncLatency(t *testing.T, vm *vmharness.VM, ctx context.Context, d vmharness.Disk) syncLatency {
	t.Helper()
	out, err := vm.Output(ctx, fmt.Sprintf("fio --name=fsync --filename=%s --rw=write --bs=4k --size=64M "+
		"--ioengine=psync --direct=1 --fsync=1 --runtime=5 --time_based --output-format=json", d.ByID()))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Jobs []struct {
			Write struct {
				IOPS float64 `json:"iops"`
			} `json:"write"`
			Sync struct {
				TotalIOs int `json:"total_ios"`
				LatNS    struct {
					Mean       float64            `json:"mean"`
					Max        float64            `json:"max"`
					N          int                `json:"N"`
					Percentile map[string]float64 `json:"percentile"`
				} `json:"lat_ns"`
			} `json:"sync"`
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Jobs) != 1 || r.Jobs[0].Sync.LatNS.N == 0 {
		t.Fatalf("fio output (%v): %s", err, out)
	}
	s := r.Jobs[0].Sync.LatNS
	ns := func(f float64) time.Duration { return time.Duration(f).Round(time.Microsecond) }
	return syncLatency{
		n: s.N, mean: ns(s.Mean), max: ns(s.Max),
		p50: ns(s.Percentile["50.000000"]), p99: ns(s.Percentile["99.000000"]),
		perSec: r.Jobs[0].Write.IOPS,
	}
}
