package results

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const sysbenchRun = `sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Running the test with following options:
Number of threads: 4
Report intermediate results every 10 second(s)

[ 10s ] thds: 4 tps: 99.06 qps: 1984.96 (r/w/o: 1390.21/396.23/198.52) lat (ms,95%): 69.29 err/s: 0.00 reconn/s: 0.00
[ 20s ] thds: 4 tps: 104.52 qps: 2089.95 (r/w/o: 1462.41/418.49/209.04) lat (ms,95%): 59.99 err/s: 0.00 reconn/s: 0.00
[ 30s ] thds: 4 tps: 107.20 qps: 2146.05 (r/w/o: 1503.07/428.59/214.40) lat (ms,95%): 61.08 err/s: 0.00 reconn/s: 0.00
SQL statistics:
    queries performed:
        read:                            43568
    transactions:                        3112   (103.59 per sec.)
    queries:                             62240  (2071.82 per sec.)

Latency (ms):
         min:                                    8.03
         avg:                                   38.60
         max:                                  222.69
         95th percentile:                       63.32
`

func TestParseSysbenchReadsIntervalsAndSummary(t *testing.T) {
	s, err := ParseSysbench(sysbenchRun)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.IntervalTPS) != 3 || s.IntervalTPS[1] != 104.52 {
		t.Errorf("intervals %v", s.IntervalTPS)
	}
	if s.Transactions != 3112 || s.TPS != 103.59 || s.P95Ms != 63.32 {
		t.Errorf("summary %+v", s)
	}
	if _, err := ParseSysbench("FATAL: unable to connect to MySQL server\n"); err == nil {
		t.Error("a failed run parsed without error")
	}
}

func TestParseFioSkipsWarningsBeforeTheDocument(t *testing.T) {
	out := []byte(`fio: note: both iodepth >= 1 and synchronous I/O engine are selected
{"jobs":[{"read":{"iops":151.5,"clat_ns":{"percentile":{"95.000000":12500000}}},"write":{"iops":64.2,"bw_bytes":1052000}}]}`)
	f, err := ParseFio(out)
	if err != nil {
		t.Fatal(err)
	}
	if f.ReadIOPS != 151.5 || f.WriteIOPS != 64.2 || f.ReadP95Ms != 12.5 || f.WriteBytesPerSec != 1052000 {
		t.Errorf("%+v", f)
	}
	if _, err := ParseFio([]byte(`{"jobs":[]}`)); err == nil {
		t.Error("no job parsed without error")
	}
}

func TestBlockStatDeltaAndHitRatio(t *testing.T) {
	before, err := ParseBlockStat("  100 0 8000 10 50 0 4000 20 0 30 40 0 0 0 0 0 0")
	if err != nil {
		t.Fatal(err)
	}
	after, _ := ParseBlockStat("  300 0 24000 10 90 0 9000 20 0 30 40 0 0 0 0 0 0")
	d := after.Sub(before)
	if d != (BlockStat{Reads: 200, ReadSectors: 16000, Writes: 40, WriteSectors: 5000}) {
		t.Errorf("delta %+v", d)
	}
	if r := ReadHitRatio(BlockStat{ReadSectors: 1000}, BlockStat{ReadSectors: 250}); r != 0.75 {
		t.Errorf("hit ratio %v, want 0.75", r)
	}
	if r := ReadHitRatio(BlockStat{ReadSectors: 1000}, BlockStat{ReadSectors: 1200}); r != 0 {
		t.Errorf("hit ratio with read-ahead %v, want 0", r)
	}
	if _, err := ParseBlockStat("1 2 3"); err == nil {
		t.Error("short stat line parsed")
	}
}

func TestStatistics(t *testing.T) {
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median %v", m)
	}
	if m := Median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median %v", m)
	}
	if lo, hi := MinMax([]float64{3, 1, 2}); lo != 1 || hi != 3 {
		t.Errorf("minmax %v %v", lo, hi)
	}
	if cv := CV([]float64{90, 110}); math.Abs(cv-0.1) > 1e-9 {
		t.Errorf("cv %v, want 0.1", cv)
	}
	if !math.IsNaN(CV([]float64{5})) || !math.IsNaN(Median(nil)) {
		t.Error("statistics of too few values are not NaN")
	}
}

// TestScaleDecodesWhatTheBenchmarkWrote keeps results.Scale in step with the scale benchmark's
// output: testdata/scale.json is a real run's file, and every name in it must survive a round trip.
func TestScaleDecodesWhatTheBenchmarkWrote(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", ScaleFile))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var s Scale
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("decode: %v", err)
	}
	again, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(again, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip changed scale.json:\n got %v\nwant %v", got, want)
	}
}

func TestResumeOLTPKeepsRunsOfTheSameParametersOnly(t *testing.T) {
	dir := t.TempDir()
	p := OLTPParams{DataMiB: 1024, Tables: 8, MeasureSeconds: 1200, Repetitions: 3}

	empty, err := ResumeOLTP(dir, p)
	if err != nil || len(empty.Runs) != 0 {
		t.Fatalf("no file: got %+v, %v; want an empty start", empty, err)
	}

	saved := OLTP{Params: p, Configs: []Config{{Name: "hdd"}},
		Runs:     []OLTPRun{{Config: "hdd", Rep: 1, TPS: 5.3}},
		Failures: []string{"hdd #2: flush: timeout"}}
	if err := Write(dir, OLTPFile, saved); err != nil {
		t.Fatal(err)
	}
	got, err := ResumeOLTP(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Has("hdd", 1) || got.Has("hdd", 2) || got.Has("all-flash", 1) {
		t.Errorf("resumed runs %+v: want hdd #1 only", got.Runs)
	}
	if len(got.Failures) != 0 {
		t.Errorf("failures kept: %v; what failed is measured again", got.Failures)
	}
	got.AddConfig(Config{Name: "all-flash"})
	got.AddConfig(Config{Name: "hdd", Description: "again"})
	if len(got.Configs) != 2 || got.Configs[0].Description != "again" {
		t.Errorf("configs %+v: want hdd (updated) then all-flash", got.Configs)
	}

	more := p
	more.Repetitions = 5
	extended, err := ResumeOLTP(dir, more)
	if err != nil || !extended.Has("hdd", 1) || extended.Params.Repetitions != 5 {
		t.Errorf("more repetitions: got %+v, %v; want hdd #1 kept and 5 repetitions", extended, err)
	}
	fewer := p
	fewer.Repetitions = 1
	if kept, err := ResumeOLTP(dir, fewer); err != nil || kept.Params.Repetitions != 3 {
		t.Errorf("fewer repetitions: got %+v, %v; want the file's 3 kept", kept, err)
	}

	other := p
	other.MeasureSeconds = 90
	_, err = ResumeOLTP(dir, other)
	if err == nil || !strings.Contains(err.Error(), "measureSeconds 1200 there, 90 now") {
		t.Errorf("other parameters: got %v; want an error naming measureSeconds", err)
	}
	if _, err := os.Stat(filepath.Join(dir, OLTPFile+".new")); !os.IsNotExist(err) {
		t.Errorf("the temporary file of a write is left behind: %v", err)
	}
}

func TestParseSysbenchReadsP99OffTheHistogram(t *testing.T) {
	out := sysbenchRun + `
Latency histogram (values are in milliseconds)
       value  ------------- distribution ------------- count
      10.000 |****************************************  90
      50.000 |****                                      8
     120.000 |*                                         1
     300.000 |*                                         1
`
	s, err := ParseSysbench(out)
	if err != nil {
		t.Fatal(err)
	}
	if s.P99Ms != 120 || s.P95Ms != 63.32 {
		t.Errorf("p99 %v, p95 %v; want 120 (the 99th of 100 latencies) and the summary's 63.32", s.P99Ms, s.P95Ms)
	}
	if plain, _ := ParseSysbench(sysbenchRun); plain.P99Ms != 0 {
		t.Errorf("p99 %v without a histogram; want 0", plain.P99Ms)
	}
}

func TestParseDirtyAgesAndTheOldest(t *testing.T) {
	ages, open, err := ParseDirtyAges("arrived 100.0 130.5\narrived 131.0 420.0\nopen 421.0 500.0\n")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ages, []float64{30.5, 289}) || open != 79 {
		t.Errorf("ages %v, open %v; want [30.5 289] and 79", ages, open)
	}
	run := OLTPRun{DirtyAgeSeconds: ages, DirtyAgeOpenSeconds: open}
	if run.OldestDirtySeconds() != 289 {
		t.Errorf("oldest %v, want 289", run.OldestDirtySeconds())
	}
	if run := (OLTPRun{DirtyAgeOpenSeconds: 400}); run.OldestDirtySeconds() != 400 {
		t.Errorf("a marker still waiting at the end is the oldest: got %v", run.OldestDirtySeconds())
	}
	if !math.IsNaN(OLTPRun{}.OldestDirtySeconds()) {
		t.Errorf("no samples: want NaN")
	}
	if _, _, err := ParseDirtyAges("arrived 5\n"); err == nil {
		t.Errorf("a short line: want an error")
	}
}

// A sitting on another emulator keeps, on each earlier run, the emulator it ran on.
func TestSetMachineKeepsTheEmulatorOfEarlierRuns(t *testing.T) {
	o := OLTP{Machine: Machine{QEMU: "QEMU 7.2"}, Runs: []OLTPRun{{Config: "hdd", Rep: 1}, {Config: "hdd", Rep: 2, QEMU: "QEMU 6.2"}}}
	o.SetMachine(Machine{QEMU: "QEMU 10.0"})
	if o.Machine.QEMU != "QEMU 10.0" || o.Runs[0].QEMU != "QEMU 7.2" || o.Runs[1].QEMU != "QEMU 6.2" {
		t.Errorf("machine %q, runs on %q and %q; want 10.0, and 7.2 and 6.2 kept", o.Machine.QEMU, o.Runs[0].QEMU, o.Runs[1].QEMU)
	}
}

func TestParsePassLog(t *testing.T) {
	log := "2026-12-01T16:00:00Z\tINFO\tflush pass started\t{\"reason\": \"flushPeriod\"}\n" +
		"2026-12-01T16:00:20Z\tINFO\tflush pass: write limit\t{\"volume\": \"db\", \"bytesPerSecond\": 5872025, \"was\": 0}\n" +
		"2026-12-01T16:02:30Z\tINFO\tflush pass did not write back what was dirty at its start within its limit: finished in writethrough\t{\"took\": \"2m30s\"}\n" +
		"2026-12-01T16:03:00Z\tINFO\tflush pass done\t{\"swept\": true}\n" +
		"2026-12-01T16:05:30Z\tINFO\tflush pass did not write back what was dirty at its start within its limit: finished in writethrough\t{\"took\": \"2m31s\", \"writethroughSeconds\": 12.5}\n" +
		"2026-12-01T16:04:00Z\tINFO\tflush pass: write limit lifted\t{\"volume\": \"db\", \"was\": 4110417}\n"
	var run OLTPRun
	ParsePassLog(&run, log)
	if run.PassesInWriteback != 1 || run.PassesInWritethrough != 2 || len(run.WriteLimits) != 2 || run.WriteLimits[0] != 5872025 || run.WriteLimits[1] != 0 {
		t.Errorf("got %d in writeback, %d in writethrough, limits %v", run.PassesInWriteback, run.PassesInWritethrough, run.WriteLimits)
	}
	if len(run.WritethroughSeconds) != 1 || run.WritethroughSeconds[0] != 12.5 {
		t.Errorf("writethrough lengths %v, want [12.5] (the first finish's line gives none)", run.WritethroughSeconds)
	}
}

// The sampler's first line is the HDD counters' baseline; each later one a sample of the 10 s
// before it.
func TestParseWritebackSamples(t *testing.T) {
	got, err := ParseWritebackSamples("1000.0 130.2M 1.5M 8 5000 80000\n" +
		"1010.0 131.0M 2.0M 4096 6500 96000\n" +
		"1020.0 98.5M 4.0k 8 8000 112000\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []WritebackSample{
		{Seconds: 10, DirtyBytes: 131 << 20, RateBytes: 2 << 20, RateMinimumBytes: 2 << 20, HDDWritesPerSecond: 150, HDDWriteBytesPerSecond: 16000 * 512 / 10},
		{Seconds: 20, DirtyBytes: 98<<20 + 512<<10, RateBytes: 4 << 10, RateMinimumBytes: 4 << 10, HDDWritesPerSecond: 150, HDDWriteBytesPerSecond: 16000 * 512 / 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got, err := ParseWritebackSamples(""); err != nil || len(got) != 0 {
		t.Errorf("a sampler stopped before its first line: %v, %v; want no samples and no error", got, err)
	}
	if _, err := ParseWritebackSamples("1000.0 130.2M 1.5M eight 5000 80000\n"); err == nil {
		t.Errorf("a floor that is not a number: want an error")
	}
}
