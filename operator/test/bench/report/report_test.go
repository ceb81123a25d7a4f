package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/test/bench/results"
)

// fixture writes a results folder: three configurations of two runs each, where flashcache's
// median TPS (1000) is 0.91 of all-flash's (1100), which meets the 0.9 target, and 1.18 of
// bcache-stock's (850), which misses the 1.3 aim; a flush.json and a scale.json.
func fixture(t *testing.T, withScale bool) string {
	t.Helper()
	dir := t.TempDir()
	run := func(config string, rep int, tps float64, intervals ...float64) results.OLTPRun {
		return results.OLTPRun{Config: config, Rep: rep, TPS: tps, IntervalTPS: intervals, P95Ms: 20 + float64(rep),
			ReadHitRatio: 0.9, HDDReadsPerTxn: 0.5, HDDWritesPerTxn: 1.25, SSDWriteBytesPerTxn: 16 << 10,
			CopySeconds: 60, DirtyBytesAfter: 100 << 20, FlushSeconds: 5, FioReadIOPS: 300, FioWriteIOPS: 100,
			FioHDDReadsPerKiloOps: 50}
	}
	oltp := results.OLTP{
		Command: "make bench BENCH_OUT=/tmp/out",
		Started: "2026-11-22T10:00:00Z",
		Seconds: 7322,
		Machine: results.Machine{HostCPU: "Test CPU", HostCores: 2, GuestCPUs: 2, GuestMemMiB: 2048, GuestKernel: "6.12",
			QEMU: "QEMU 9.2", MariaDB: "11.4", Sysbench: "1.0.20", Fio: "fio-3.38", LVM: "2.03", FlashcacheRev: "abc1234"},
		Params: results.OLTPParams{DataMiB: 4096, Tables: 8, RowsPerTable: 1000000, BufferPoolMiB: 256, Threads: 8,
			WarmupSeconds: 60, MeasureSeconds: 40, FioSeconds: 30, Repetitions: 2, CacheDiskMiB: 2048,
			BackingDiskMiB: 8192, BackingIOPS: 150, BackingMBPerSec: 120},
		Configs: []results.Config{
			{Name: "all-flash", Description: "the data set directly on the NVMe (the ceiling)"},
			{Name: "flashcache", Description: "flashcache's defaults", Cached: true},
			{Name: "bcache-stock", Description: "make-bcache | every knob as bcache leaves it", Cached: true},
		},
		// Interleaved, as the benchmark runs them, and the second repetition first: the report
		// must order by repetition itself.
		Runs: []results.OLTPRun{
			run("all-flash", 2, 1200, 1150, 1250, 1200, 1200),
			run("flashcache", 2, 1050, 1050, 1050, 1050, 1050),
			run("bcache-stock", 2, 900, 700, 1100, 900, 900),
			run("all-flash", 1, 1000, 1000, 1000, 1000, 1000),
			run("flashcache", 1, 950, 950, 950, 950, 950),
			run("bcache-stock", 1, 800, 600, 1000, 800, 800),
		},
		Failures: []string{"flashcache #3: guest did not answer"},
	}
	oltp.Configs[1].DirtyAgeBoundSeconds = 600
	oltp.Configs[2].Bcache = true
	oltp.Runs[2].BypassedBytes, oltp.Runs[5].BypassedBytes = 3<<20, 5<<20
	for i := range oltp.Runs {
		oltp.Runs[i].P99Ms = 40 + float64(oltp.Runs[i].Rep)
	}
	// flashcache's markers: 3 arrived (median 200 s), the oldest 590 s, within its bound;
	// bcache-stock's one marker still waiting after 700 s when its run ended.
	oltp.Runs[1].DirtyAgeSeconds = []float64{100, 590}
	oltp.Runs[4].DirtyAgeSeconds, oltp.Runs[4].DirtyAgeOpenSeconds = []float64{200}, 30
	oltp.Runs[2].DirtyAgeOpenSeconds = 700
	flush := results.Flush{Command: oltp.Command, Patterns: []results.FlushPattern{
		{Name: "sequential 1 MiB", BlockBytes: 1 << 20, DirtyBytes: 512 << 20, FlushSeconds: 5.4, FlushMBps: 95,
			FlushHDDWrites: 4096, FlushHDDRequestBytes: 128 << 10, FlushHDDWritesPerSec: 758, RequestBaselineMBps: 100, Ratio: 0.95, BaselineMBps: 150, BlockRatio: 0.63},
		{Name: "random 4 KiB", BlockBytes: 4 << 10, DirtyBytes: 64 << 20, FlushSeconds: 100, FlushMBps: 0.64,
			FlushHDDWrites: 16384, FlushHDDRequestBytes: 4 << 10, FlushHDDWritesPerSec: 164, RequestBaselineMBps: 1.28, Ratio: 0.5, BaselineMBps: 1.28, BlockRatio: 0.5},
	}}
	for name, v := range map[string]any{results.OLTPFile: oltp, results.FlushFile: flush} {
		if err := results.Write(dir, name, v); err != nil {
			t.Fatal(err)
		}
	}
	if withScale {
		scale := results.Scale{Volumes: 1000, Nodes: 200, TimeToAllPVsSeconds: 18.4, OperatorPeakRSSBytes: 250 << 20,
			Evictions: 200, EvictionConcurrency: 16, EvictionLatencyMs: results.LatencyMs{P50: 102.1, P99: 125.2, Max: 130.9},
			WebhookServerLatencyMs:   &results.LatencyMs{P50: 0.08, P99: 2.13},
			WebhookServerLatencyNote: "server side, the operator's own",
			Simulation:               "simulated agent: reports each volume Ready as the real agent would, no devices",
			StartedAt:                time.Date(2026, 11, 22, 13, 58, 31, 0, time.UTC)}
		if err := results.Write(dir, results.ScaleFile, scale); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func generateInto(t *testing.T, resultsDir string) (docs, markdown string) {
	t.Helper()
	docs = t.TempDir()
	if err := generate(resultsDir, docs, ""); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(docs, markdownFile))
	if err != nil {
		t.Fatal(err)
	}
	return docs, string(b)
}

// line is the one line of markdown that contains all of parts; the test fails otherwise.
func line(t *testing.T, markdown string, parts ...string) string {
	t.Helper()
	var found []string
next:
	for _, l := range strings.Split(markdown, "\n") {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		found = append(found, l)
	}
	if len(found) != 1 {
		t.Fatalf("want one line with %q, have %d:\n%s", parts, len(found), strings.Join(found, "\n"))
	}
	return found[0]
}

func TestReportTablesHaveMediansAndRatios(t *testing.T) {
	_, md := generateInto(t, fixture(t, true))
	fc := line(t, md, "| `flashcache` |", "flashcache's defaults")
	for _, want := range []string{"| 2 |", "| 1000.0 (950.0–1050.0) |", "| 0.91× |", "| 1.18× |", "| – |", "| 21.5 |"} {
		if !strings.Contains(fc, want) {
			t.Errorf("flashcache row lacks %q:\n%s", want, fc)
		}
	}
	line(t, md, "| `all-flash` (ceiling) |", "| 1100.0 (1000.0–1200.0) |", "| 1.00× |")
	line(t, md, "make-bcache \\| every knob")
	line(t, md, "| `flashcache` | 90.0 | 0.50 | 1.25 | 16.0 | – | 60 | 100 | 5.0 | 400 | 50 |")
	line(t, md, "| sequential 1 MiB | 512 | 5.4 | 95.00 | 4096 × 128 KiB | 758 | 100.00 | 0.95 | 150.00 | 0.63 |")
	line(t, md, "| Host CPU | Test CPU |")
	line(t, md, "took 2 h 02 min")
	line(t, md, "- flashcache #3: guest did not answer")
	if strings.Count(md, "make bench BENCH_OUT=/tmp/out") != 1 {
		t.Errorf("the command shared by oltp.json and flush.json should be printed once:\n%s", md)
	}
	line(t, md, "The node agent here is simulated", "simulated agent: reports each volume Ready")
}

func TestReportShowsP99AndTheAgeOfDirtyDataAgainstTheBound(t *testing.T) {
	_, md := generateInto(t, fixture(t, false))
	line(t, md, "| `flashcache` |", "flashcache's defaults", "| 21.5 | 41.5 |")
	line(t, md, "| `flashcache` | 3 | 200 | 590 | 600 | yes |")
	line(t, md, "| `bcache-stock` | 0 | – | 700 | – | – |")
	line(t, md, "| `bcache-stock` | 90.0 |", "| 4.0 |")
	line(t, md, "oldest dirty data within its bound", "| 590 s oldest of 3 markers; bound 600 s | met |")
	line(t, md, "the time-based flush costs ≤ 10 %", "| not measured |")
	if strings.Contains(md, "| `all-flash` (ceiling) | 0 |") {
		t.Errorf("a configuration without markers has a dirty-age row:\n%s", md)
	}
}

func TestReportTargetsSayMetAndMissed(t *testing.T) {
	_, md := generateInto(t, fixture(t, true))
	for _, c := range []struct{ row, status string }{
		{"≥ 0.9 × all-flash", "met"},
		{"TPS above bcache-stock", "met"},
		{"aim: `flashcache` TPS ≥ 1.3 × bcache-stock", "missed"},
		{"TPS above lvmcache", "not measured"},
		{"TPS over HDD only", "not measured"},
		{"10-s TPS CV ≤ 10 %", "met"},
		{"flush efficiency ≥ 0.9, sequential 1 MiB", "met"},
		{"flush efficiency ≥ 0.9, random 4 KiB", "missed"},
		{"1000 volumes reconciled", "met"},
		{"operator peak RSS", "missed"},
		{"eviction webhook p99", "met"},
	} {
		if l := line(t, md, c.row); !strings.HasSuffix(l, "| "+c.status+" |") {
			t.Errorf("target %q: want %q, row %s", c.row, c.status, l)
		}
	}
	line(t, md, "eviction webhook p99", "p99 2.13 ms", "client-side eviction p50 102.1 ms, p99 125.2 ms")
}

// The age bound's cost is also checked against flashcache without it and with the initial copy
// around the cache: 1000 TPS against 1100 is 0.91, within the 10 %.
func TestReportTargetsWeighTheBoundAgainstUnbounded(t *testing.T) {
	dir := fixture(t, false)
	_, md := generateInto(t, dir)
	line(t, md, "the age bound costs ≤ 10 %", "| not measured |")
	var o results.OLTP
	if err := results.Read(dir, results.OLTPFile, &o); err != nil {
		t.Fatal(err)
	}
	o.Configs = append(o.Configs, results.Config{Name: "flashcache-unbounded", Cached: true})
	o.Runs = append(o.Runs, results.OLTPRun{Config: "flashcache-unbounded", Rep: 1, TPS: 1100, IntervalTPS: []float64{1100}})
	if err := results.Write(dir, results.OLTPFile, o); err != nil {
		t.Fatal(err)
	}
	_, md = generateInto(t, dir)
	line(t, md, "the age bound costs ≤ 10 %", "0.91× flashcache-unbounded (1000.0 vs 1100.0 TPS)", "| met |")
}

func TestReportChartsArePNGs(t *testing.T) {
	docs, md := generateInto(t, fixture(t, true))
	for _, name := range []string{"tps-median.png", "tps-all-flash.png", "tps-flashcache.png", "tps-bcache-stock.png"} {
		line(t, md, "](benchmarks/"+name+")")
		f, err := os.Open(filepath.Join(docs, chartsDir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() == 0 || b.Dy() == 0 {
			t.Errorf("%s is empty: %v", name, b)
		}
	}
}

func TestReportWithoutScaleSaysNotRun(t *testing.T) {
	_, md := generateInto(t, fixture(t, false))
	if !strings.Contains(md, "## Operator at scale\n\n"+notRun+"\n") {
		t.Errorf("no \"not run\" for the missing scale.json:\n%s", md)
	}
	if l := line(t, md, "operator peak RSS"); !strings.HasSuffix(l, "| not measured |") {
		t.Errorf("RSS target without scale.json: %s", l)
	}
}

func TestReportIsDeterministic(t *testing.T) {
	dir := fixture(t, true)
	_, first := generateInto(t, dir)
	_, second := generateInto(t, dir)
	if first != second {
		t.Errorf("two renderings of the same results differ:\n%s\n---\n%s", first, second)
	}
}

func TestReportPrintsNotesUnderAnalysis(t *testing.T) {
	notes := filepath.Join(t.TempDir(), "notes.md")
	if err := os.WriteFile(notes, []byte("flashcache flushes *early*.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	docs := t.TempDir()
	if err := generate(fixture(t, true), docs, notes); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(docs, markdownFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "## Analysis\n\nflashcache flushes *early*.\n") {
		t.Errorf("notes not under Analysis:\n%s", b)
	}
}

func TestReportHasTheLargerThanCacheSetWithItsTargets(t *testing.T) {
	dir := fixture(t, false)
	run := func(config string, tps, hddReads float64) results.OLTPRun {
		return results.OLTPRun{Config: config, Rep: 1, TPS: tps, IntervalTPS: []float64{tps, tps}, P95Ms: 30, P99Ms: 60, HDDReadsPerTxn: hddReads}
	}
	larger := results.OLTP{
		Params: results.OLTPParams{DataSet: results.DataSetLargerThanCache, DataMiB: 1024, CacheDiskMiB: 640, Repetitions: 1},
		Configs: []results.Config{{Name: "flashcache", Cached: true}, {Name: "bcache-stock", Cached: true},
			{Name: "lvmcache", Cached: true}, {Name: "dm-writecache", Cached: true}},
		// Above bcache-stock on both; above lvmcache on TPS but with more HDD reads; dm-writecache
		// not run.
		Runs:     []results.OLTPRun{run("flashcache", 30, 2), run("bcache-stock", 20, 3), run("lvmcache", 25, 1.5)},
		Failures: []string{"dm-writecache #1: lvconvert failed"},
	}
	if err := results.Write(dir, results.OLTPFileFor(results.DataSetLargerThanCache), larger); err != nil {
		t.Fatal(err)
	}
	docs, md := generateInto(t, dir)
	line(t, md, "## OLTP results: a data set larger than the cache")
	line(t, md, "## OLTP parameters: a data set larger than the cache")
	line(t, md, "| larger-than-cache set: `flashcache` above bcache-stock on TPS and HDD reads / txn |", "| met |")
	line(t, md, "| larger-than-cache set: `flashcache` above lvmcache on TPS and HDD reads / txn |", "| missed |")
	line(t, md, "| larger-than-cache set: `flashcache` above dm-writecache on TPS and HDD reads / txn |", "| not measured |")
	line(t, md, "- dm-writecache #1: lvconvert failed (a data set larger than the cache)")
	for _, chart := range []string{"larger-tps-median.png", "larger-tps-flashcache.png", "tps-flashcache.png"} {
		if _, err := os.Stat(filepath.Join(docs, chartsDir, chart)); err != nil {
			t.Errorf("chart %s: %v", chart, err)
		}
	}
	if !strings.Contains(md, "](benchmarks/larger-tps-flashcache.png)") {
		t.Errorf("the larger set's chart is not linked")
	}
}

// A long comparison in its own subfolder gets its own sections, charts and #23's targets; the
// folder's absence changes nothing else.
func TestReportHasTheLongComparisonWithItsTargets(t *testing.T) {
	dir := fixture(t, false)
	run := func(config string, tps float64, intervals ...float64) results.OLTPRun {
		return results.OLTPRun{Config: config, Rep: 1, TPS: tps, IntervalTPS: intervals, P95Ms: 300, P99Ms: 600, DirtyAgeSeconds: []float64{250, 280}}
	}
	long := results.OLTP{
		Params: results.OLTPParams{DataMiB: 256, Tables: 4, MeasureSeconds: 1200, Repetitions: 1},
		Configs: []results.Config{{Name: "flashcache", Cached: true, DirtyAgeBoundSeconds: 300},
			{Name: "flashcache-flush-off", Cached: true}},
		// 0.95 of the volume without passes (met), but a CV of about 25 % (missed).
		Runs: []results.OLTPRun{run("flashcache", 38, 30, 46, 38), run("flashcache-flush-off", 40, 40, 40, 40)},
	}
	if err := results.Write(filepath.Join(dir, "flush-period-paced"), results.OLTPFile, long); err != nil {
		t.Fatal(err)
	}
	docs, md := generateInto(t, dir)
	line(t, md, "## OLTP results: long runs, a paced pass every half period (issue 23, 256 MiB, at 8bae036)")
	line(t, md, "| long runs, a paced pass every half period (issue 23, 256 MiB, at 8bae036): the time-based flush costs ≤ 10 % (`flashcache` TPS ≥ 0.9 × flushPeriod 0s) |", "0.95×", "| met |")
	line(t, md, "| long runs, a paced pass every half period (issue 23, 256 MiB, at 8bae036): `flashcache` 10-s TPS CV ≤ 10 % |", "| missed |")
	line(t, md, "| long runs, a paced pass every half period (issue 23, 256 MiB, at 8bae036): `flashcache` oldest dirty data within its bound |", "280 s oldest", "| met |")
	if _, err := os.Stat(filepath.Join(docs, chartsDir, "flush-period-paced-tps-flashcache.png")); err != nil {
		t.Errorf("the long comparison's chart: %v", err)
	}
}

func TestReportRendersClaimsToBound(t *testing.T) {
	dir := fixture(t, false)
	_, md := generateInto(t, dir)
	if !strings.Contains(md, "## Claims to Bound\n\n"+notRun+"\n") {
		t.Errorf("no \"not run\" for the missing claims.json:\n%s", md)
	}
	claims := results.Claims{Command: "make bench-scale", Claims: 20, ClaimSize: "1Gi", Node: "kwok-claims",
		BoundMs: results.LatencyMs{P50: 3272.1, P99: 5428.8, Max: 5428.8, Mean: 3270.4}, AllBoundSeconds: 5.49, Simulation: "the pool's status is written."}
	if err := results.Write(dir, results.ClaimsFile, claims); err != nil {
		t.Fatal(err)
	}
	_, md = generateInto(t, dir)
	if l := line(t, md, "| Claim to Bound |"); !strings.Contains(l, "p50 3272 ms, p99 5429 ms") {
		t.Errorf("claims row: %s", l)
	}
	if !strings.Contains(md, "20 claims of 1Gi, each with a pod on node kwok-claims") || !strings.Contains(md, "make bench-scale") {
		t.Errorf("claims section:\n%s", md)
	}
}

// Runs of one benchmark on two emulators say so, with how many ran on each; runs of one emulator
// say nothing.
func TestReportSaysWhenRunsRanOnTwoEmulators(t *testing.T) {
	dir := fixture(t, false)
	_, markdown := generateInto(t, dir)
	if strings.Contains(markdown, "more than one emulator") {
		t.Errorf("runs of one emulator, yet the report says more than one")
	}
	var o results.OLTP
	if err := results.Read(dir, results.OLTPFile, &o); err != nil {
		t.Fatal(err)
	}
	for i := range o.Runs {
		o.Runs[i].QEMU = "QEMU 10.0"
	}
	o.Runs[0].QEMU, o.Runs[3].QEMU = "QEMU 7.2", "QEMU 7.2"
	if err := results.Write(dir, results.OLTPFile, o); err != nil {
		t.Fatal(err)
	}
	_, markdown = generateInto(t, dir)
	line(t, markdown, "more than one emulator", "QEMU 7.2 (2 runs), QEMU 10.0 (4 runs)")
}
