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

// volatileChecks prove the volatile-cache emulation from inside the guest, on an honest HDD, a
// lying HDD and a plain one: what the guest kernel sees, what a flush costs, and what survives a
// power cut (Kill then Start), a clean Shutdown then Start, and a reboot. They run in
// TestVMHasWhatKernelTestsNeed's VM, whose boots they share.
type volatileChecks struct {
	vm                  *vmharness.VM
	ctx                 context.Context
	honest, liar, plain vmharness.Disk
}

func volatileDisks() (honest, liar, plain vmharness.Disk) {
	return vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-honest0", Size: 1 << 30, Cache: vmharness.CacheVolatileHonest},
		vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-liar0", Size: 1 << 30, Cache: vmharness.CacheVolatileLying},
		vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-plain0", Size: 1 << 30}
}

func (v volatileChecks) run(t *testing.T, cmd string) string {
	t.Helper()
	out, err := v.vm.Output(v.ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func (v volatileChecks) queue(t *testing.T, d vmharness.Disk, file string) string {
	t.Helper()
	return v.run(t, fmt.Sprintf("cat /sys/block/$(basename $(readlink -f %s))/queue/%s", d.ByID(), file))
}

func (v volatileChecks) guestSeesRotatingDisksWithAVolatileCache(t *testing.T) {
	for _, d := range []vmharness.Disk{v.honest, v.liar, v.plain} {
		if got := v.queue(t, d, "write_cache"); got != "write back" {
			t.Errorf("%s: write_cache %q, want \"write back\" (else the kernel sends no flushes)", d.Serial, got)
		}
		if got := v.queue(t, d, "rotational"); got != "1" {
			t.Errorf("%s: rotational %s, want 1", d.Serial, got)
		}
		t.Logf("%s (%s): write_cache %q, fua %s", d.Serial, d.Cache, v.queue(t, d, "write_cache"), v.queue(t, d, "fua"))
	}
}

// flushLatency: one thread, 4 KiB O_DIRECT writes, each followed by fsync on the block device
// (a cache flush), for a few seconds: fio reports the fsyncs' latency apart from the writes',
// which QEMU's IOPS throttle may slow.
func (v volatileChecks) flushLatency(t *testing.T) {
	lat := map[string]syncLatency{}
	for _, d := range []vmharness.Disk{v.honest, v.liar, v.plain} {
		l := fsyncLatency(t, v.vm, v.ctx, d)
		lat[d.Serial] = l
		t.Logf("%s (%s): %d fsyncs in 5 s, latency mean %s, p50 %s, p99 %s, max %s; %.0f write+fsync/s",
			d.Serial, d.Cache, l.n, l.mean, l.p50, l.p99, l.max, l.perSec)
	}
	// Medians: on a busy TCG host a few fsyncs take a hundred milliseconds whatever the
	// disk, which moves means and maxima. Every honest fsync follows a write, so it writes
	// a block back and pays at least the modelled delay.
	if h := lat[v.honest.Serial]; h.p50 < vmharness.VolatileFlushDelay {
		t.Errorf("honest flush p50 %s, want at least the modelled %s", h.p50, vmharness.VolatileFlushDelay)
	}
	// A lying fsync is a round trip, which a loaded host slows too (1.2 ms beside a full
	// make test, 0.3 ms alone): it must stay well under the modelled delay it skips.
	if l, h := lat[v.liar.Serial], lat[v.honest.Serial]; l.p50 > vmharness.VolatileFlushDelay/2 || l.p50*4 > h.p50 {
		t.Errorf("lying flush p50 %s: want under half the modelled %s and far below the honest %s", l.p50, vmharness.VolatileFlushDelay, h.p50)
	}
}

// region is 4 MiB of pseudo-random data on a disk, beyond what fio wrote.
type region struct {
	disk    vmharness.Disk
	offMiB  int
	seed    int
	flushed bool
}

func (r region) String() string {
	f := "unflushed"
	if r.flushed {
		f = "flushed"
	}
	return fmt.Sprintf("%s (%s), %s, at %d MiB", r.disk.Serial, r.disk.Cache, f, r.offMiB)
}

func (v volatileChecks) write(t *testing.T, r region) {
	t.Helper()
	sync := ""
	if r.flushed {
		sync = " conv=fsync"
	}
	v.run(t, fmt.Sprintf("%s | dd of=%s bs=1M seek=%d oflag=direct iflag=fullblock status=none%s",
		pattern(r.seed), r.disk.ByID(), r.offMiB, sync))
}

// intact is how many of the region's 4 KiB blocks hold what was written.
func (v volatileChecks) intact(t *testing.T, r region) int {
	t.Helper()
	out := v.run(t, fmt.Sprintf("dd if=%s bs=1M skip=%d count=%d iflag=direct status=none | python3 -c %s",
		r.disk.ByID(), r.offMiB, regionMiB, vmharness.ShellQuote(fmt.Sprintf(
			"import random,sys; w=random.Random(%d).randbytes(%d); g=sys.stdin.buffer.read(); "+
				"print(sum(g[i:i+4096]==w[i:i+4096] for i in range(0,len(w),4096)))", r.seed, regionMiB<<20))))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("block count %q: %v", out, err)
	}
	return n
}

func (v volatileChecks) check(t *testing.T, when string, r region, wantIntact bool) {
	t.Helper()
	const blocks = regionMiB << 20 / 4096
	n := v.intact(t, r)
	t.Logf("%s, %s: %d of %d blocks intact", when, r, n, blocks)
	switch {
	case wantIntact && n != blocks:
		t.Errorf("%s, %s: %d of %d blocks lost, want none", when, r, blocks-n, blocks)
	case !wantIntact && n == blocks:
		t.Errorf("%s, %s: nothing lost, want a loss", when, r)
	}
}

// powerCutRegions are written before a power cut: every flush of a disk writes all of its cache
// back, so the honest disk's unflushed region comes after its last flush, and the liar's flushed
// one after the write-back. afterCut is whether each survives the cut.
func (v volatileChecks) powerCutRegions(t *testing.T) (regions []region, afterCut []bool) {
	honestFlushed := region{v.honest, 100, 1, true}
	liarWrittenBack := region{v.liar, 100, 3, true}
	plainUnflushed := region{v.plain, 100, 5, false}
	honestUnflushed := region{v.honest, 200, 2, false}
	liarFlushed := region{v.liar, 200, 4, true}
	for _, r := range []region{honestFlushed, liarWrittenBack, plainUnflushed} {
		v.write(t, r)
	}
	wbStart := time.Now()
	if err := v.vm.WriteBackDiskCaches(v.ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("WriteBackDiskCaches: %s", time.Since(wbStart).Round(time.Millisecond))
	for _, r := range []region{honestUnflushed, liarFlushed} {
		v.write(t, r)
	}
	regions = []region{honestFlushed, liarWrittenBack, plainUnflushed, honestUnflushed, liarFlushed}
	for _, r := range regions {
		v.check(t, "before the cut", r, true)
	}
	// CacheNone: the host's page cache keeps the plain disk's writes. The liar's flushed region
	// is the lie.
	return regions, []bool{true, true, true, false, false}
}

// cleanShutdown writes flushed and unflushed regions on both volatile disks: a clean shutdown
// writes every cache back, so all of them are there after the next start.
func (v volatileChecks) cleanShutdown(t *testing.T) {
	var all []region
	for i, d := range []vmharness.Disk{v.honest, v.liar} {
		all = append(all, region{d, 300, 10 + 2*i, true}, region{d, 400, 11 + 2*i, false})
	}
	for _, r := range all {
		v.write(t, r)
	}
	sdStart := time.Now()
	if err := v.vm.Shutdown(v.ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("clean shutdown: %s", time.Since(sdStart).Round(100*time.Millisecond))
	if err := v.vm.Start(v.ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		v.check(t, "after shutdown and start", r, true)
	}
}

// liarBackingFileIsBlankAt fails when the liar's backing file holds r: a reboot is not a power
// cycle, nbdkit keeps running and the caches with it, so r is still only cached.
func (v volatileChecks) liarBackingFileIsBlankAt(t *testing.T, r region) {
	var path string
	for _, d := range v.vm.Disks() {
		if d.Serial == v.liar.Serial {
			path = d.Path
		}
	}
	b := make([]byte, regionMiB<<20)
	f, err := os.Open(path)
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
}

// nbdkitSaid logs what nbdkit wrote in work, which is nothing unless something went wrong.
func nbdkitSaid(t *testing.T, work string) {
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
