//go:build bench

package oltp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/test/bench/results"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// TestFlushEfficiency puts dirty data of known size and shape on a flashcache volume, times
// `flashcache node flush`, and compares its rate with the backing disk written directly with the
// same request size: the ratio's physical limit is 1.0.
func TestFlushEfficiency(t *testing.T) {
	seqMiB := envInt(t, "BENCH_FLUSH_SEQUENTIAL_MIB", 1024)
	randomMiB := envInt(t, "BENCH_FLUSH_RANDOM_MIB", 16)
	baselineSeconds := envInt(t, "BENCH_FLUSH_BASELINE_SECONDS", 30)
	const memMiB = 1024
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	g := bootGuest(t, ctx, memMiB, map[string]vmharness.Disk{
		"NVME": {Kind: vmharness.NVMe, Serial: "fc-flush-nvme", Size: 4 << 30},
		"HDD":  {Kind: vmharness.HDD, Serial: "fc-flush-hdd", Size: 4 << 30},
	})
	res := results.Flush{Command: os.Getenv("BENCH_COMMAND"), Machine: g.machine(memMiB)}

	patterns := []struct {
		name   string
		block  int64
		random bool
		// fio options that write the dirty data on the volume.
		dirty string
	}{
		{"sequential 1 MiB", 1 << 20, false, fmt.Sprintf("--rw=write --bs=1M --size=%dM --iodepth=4", seqMiB)},
		// Unique random 4 KiB blocks over 2 GiB (fio's random map never repeats one): the worst
		// case, one request per dirty block whatever their order.
		{"random 4 KiB", 4 << 10, true, fmt.Sprintf("--rw=randwrite --bs=4k --size=2G --io_size=%dM --iodepth=32", randomMiB)},
	}
	// baseline writes the raw HDD for baselineSeconds with requests of block bytes, 32 in flight
	// (the most bcache's writeback keeps in flight is 64), and returns bytes per second.
	baselines := map[string]float64{}
	baseline := func(block int64, random bool) float64 {
		rw := "write"
		if random {
			rw = "randwrite"
		}
		key := fmt.Sprintf("%s %d", rw, block)
		if bw, ok := baselines[key]; ok {
			return bw
		}
		out := g.must(fmt.Sprintf("fio --name=baseline --filename=$HDD --direct=1 --ioengine=libaio --output-format=json --rw=%s --bs=%d --size=2G --iodepth=32 --time_based --runtime=%d",
			rw, block, baselineSeconds))
		fio, err := results.ParseFio([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		bw := fio.WriteBytesPerSec
		t.Logf("HDD written directly, %s of %s: %.2f MiB/s", rw, size(block), bw/(1<<20))
		baselines[key] = bw
		return bw
	}

	// Dirty data stays on the SSD until the flush: every write is cached (no sequential
	// cutoff), writeback waits until 40% of the cache is dirty, and no time-based pass runs.
	dev := lastLine(g.must(resetDisks + flashcacheSetup("  sequentialCutoff: \"0\"\n  dirtyThresholdPercent: 40\n  flushPeriod: 0s\n")))
	hdd := g.must("basename $(readlink -f $HDD)")
	knobs := "/sys/block/" + strings.TrimPrefix(dev, "/dev/") + "/bcache/"
	for _, pat := range patterns {
		// Background writeback stops while the dirty data is written, so that the flush finds all
		// of it: after a flush, bcache's writeback rate stays high for a few seconds and wrote a
		// small pattern back by itself before the flush began (CI at 99efac3). The flush starts
		// writeback again.
		g.must("echo 0 >" + knobs + "writeback_running")
		g.must(fmt.Sprintf("fio --name=dirty --filename=%s --direct=1 --ioengine=libaio --output-format=json %s >/dev/null", dev, pat.dirty))
		if state := g.must("cat " + knobs + "cache_mode " + knobs + "state " + knobs + "dirty_data | tr '\\n' ' '"); !strings.Contains(state, "[writeback]") || !strings.Contains(state, "dirty") {
			t.Fatalf("%s: after fio the volume is not dirty in writeback (cache_mode, state, dirty_data): %s", pat.name, state)
		}
		before, err := g.blockStats(ctx, hdd)
		if err != nil {
			t.Fatal(err)
		}
		out := g.must("flashcache node flush --config " + volumeFile + " --timeout 60m -o json")
		after, err := g.blockStats(ctx, hdd)
		if err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Volumes []struct {
				Flush *struct {
					FlushedBytes int64 `json:"flushedBytes"`
					Duration     int64 `json:"duration"`
				} `json:"flush"`
			} `json:"volumes"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Volumes) != 1 || rep.Volumes[0].Flush == nil {
			t.Fatalf("flush report (%v): %s", err, out)
		}
		f := rep.Volumes[0].Flush
		if f.FlushedBytes <= 0 {
			t.Fatalf("%s: the flush wrote nothing back; the dirty data never reached the cache: %s", pat.name, out)
		}
		secs := time.Duration(f.Duration).Seconds()
		w := after[hdd].Sub(before[hdd])
		fp := results.FlushPattern{Name: pat.name, BlockBytes: pat.block, DirtyBytes: f.FlushedBytes, FlushSeconds: secs,
			FlushMBps: float64(f.FlushedBytes) / secs / (1 << 20), FlushHDDWrites: w.Writes, FlushHDDWritesPerSec: float64(w.Writes) / secs}
		if w.Writes > 0 {
			fp.FlushHDDRequestBytes = w.WriteSectors * 512 / w.Writes
		}
		res.Patterns = append(res.Patterns, fp)
		t.Logf("%s: %s dirty flushed in %.1f s, %.2f MiB/s: %d HDD writes of %s on average, %.0f per second",
			pat.name, mib(f.FlushedBytes), secs, fp.FlushMBps, w.Writes, size(fp.FlushHDDRequestBytes), fp.FlushHDDWritesPerSec)
		g.must("flashcache node release --config " + volumeFile + " -o json >/dev/null")
	}

	// The baselines last, on the raw HDD once the volume is gone: only now is the flush's
	// request size known.
	g.must(resetDisks)
	for i := range res.Patterns {
		fp, pat := &res.Patterns[i], patterns[i]
		request := max(4096, (fp.FlushHDDRequestBytes+2048)/4096*4096)
		fp.RequestBaselineMBps = baseline(request, pat.random) / (1 << 20)
		fp.BaselineMBps = baseline(pat.block, pat.random) / (1 << 20)
		fp.Ratio, fp.BlockRatio = fp.FlushMBps/fp.RequestBaselineMBps, fp.FlushMBps/fp.BaselineMBps
		t.Logf("%s: flush %.2f MiB/s is %.2f of the HDD written with its requests (%s, %.2f MiB/s) and %.2f of it written in %s blocks (%.2f MiB/s)",
			fp.Name, fp.FlushMBps, fp.Ratio, size(request), fp.RequestBaselineMBps, fp.BlockRatio, size(pat.block), fp.BaselineMBps)
	}
	out := outDir(t)
	if err := results.Write(out, results.FlushFile, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("results in %s", filepath.Join(out, results.FlushFile))
}

// size prints a request size the way people say it (4 KiB, 1 MiB, 132 KiB).
func size(b int64) string {
	if b >= 1<<20 && b%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%.0f KiB", float64(b)/1024)
}
