// Package results holds what `make bench` measures, as the benchmarks write it (JSON files in
// one folder) and as the report reads it, with the parsers of the tools' output and the
// statistics the report prints. Nothing here needs a VM or a cluster, so the unit tier covers it.
package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// File names inside a results folder.
const (
	OLTPFile  = "oltp.json"
	FlushFile = "flush.json"
	ScaleFile = "scale.json"
	// ClaimsFile is the claim-to-Bound benchmark's.
	ClaimsFile = "claims.json"
)

// The OLTP benchmark's data sets: one that fits the cache, and one at least twice the cache
// partition, where the cache's admission and replacement decide.
const (
	DataSetFits            = "fits"
	DataSetLargerThanCache = "larger-than-cache"
)

// DataSets are the data sets, in report order.
var DataSets = []string{DataSetFits, DataSetLargerThanCache}

// OLTPFileFor is the file a data set's OLTP results are in; the fitting set keeps oltp.json.
func OLTPFileFor(dataSet string) string {
	if dataSet == "" || dataSet == DataSetFits {
		return OLTPFile
	}
	return "oltp-" + dataSet + ".json"
}

// Machine is where a benchmark ran.
type Machine struct {
	HostCPU       string `json:"hostCPU"`
	HostCores     int    `json:"hostCores"`
	GuestCPUs     int    `json:"guestCPUs"`
	GuestMemMiB   int    `json:"guestMemMiB"`
	GuestKernel   string `json:"guestKernel"`
	QEMU          string `json:"qemu"`
	MariaDB       string `json:"mariadb"`
	Sysbench      string `json:"sysbench"`
	Fio           string `json:"fio"`
	LVM           string `json:"lvm"`
	FlashcacheRev string `json:"flashcacheRevision"`
}

// OLTPParams are the sizes and durations of an OLTP run; the report prints them.
type OLTPParams struct {
	// DataSet is DataSetFits (also when empty: runs from before there were two) or
	// DataSetLargerThanCache.
	DataSet         string  `json:"dataSet,omitempty"`
	DataMiB         int     `json:"dataMiB"`
	Tables          int     `json:"tables"`
	RowsPerTable    int     `json:"rowsPerTable"`
	BufferPoolMiB   int     `json:"bufferPoolMiB"`
	Threads         int     `json:"threads"`
	WarmupSeconds   int     `json:"warmupSeconds"`
	MeasureSeconds  int     `json:"measureSeconds"`
	FioSeconds      int     `json:"fioSeconds"`
	Repetitions     int     `json:"repetitions"`
	CacheDiskMiB    int     `json:"cacheDiskMiB"`
	BackingDiskMiB  int     `json:"backingDiskMiB"`
	BackingIOPS     int     `json:"backingIOPS"`
	BackingMBPerSec float64 `json:"backingMBPerSec"`
}

// Config is one storage configuration of the OLTP comparison.
type Config struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Cached is false for the floor and the ceiling (HDD only, all-flash).
	Cached bool `json:"cached"`
	// Bcache is true for the configurations built on bcache, whose bypassed bytes are counted.
	Bcache bool `json:"bcache,omitempty"`
	// DirtyAgeBoundSeconds is the bound flashcache documents on the age of dirty data for the
	// configuration's flush period (engine.DirtyAgeBound); 0 for none.
	DirtyAgeBoundSeconds float64 `json:"dirtyAgeBoundSeconds,omitempty"`
}

// OLTPRun is one configuration's run: the initial copy, a discarded warm-up, the measured
// sysbench run, the flush after it and the fio run.
type OLTPRun struct {
	Config string `json:"config"`
	Rep    int    `json:"rep"`
	// Revision is the flashcache revision the run measured; a resumed benchmark may hold runs
	// of several.
	Revision string `json:"revision,omitempty"`
	// QEMU is the emulator the run ran on: under TCG the guest's CPU is the emulator's, so a
	// benchmark resumed on another version holds runs of two (the machine block is the last
	// sitting's).
	QEMU  string `json:"qemu,omitempty"`
	Ended string `json:"ended,omitempty"`

	CopySeconds float64 `json:"copySeconds"`

	Transactions int64     `json:"transactions"`
	TPS          float64   `json:"tps"`
	IntervalTPS  []float64 `json:"intervalTPS"`
	P95Ms        float64   `json:"p95Ms"`
	P99Ms        float64   `json:"p99Ms,omitempty"`

	// DirtyAgeSeconds are how long markers took to reach the HDD: written through the volume
	// one after the other during the measured run, past the end of the filesystem, and read
	// back off the raw HDD until there (bcache configurations). DirtyAgeOpenSeconds is how long
	// the last one had waited when the run ended, still not on the HDD.
	DirtyAgeSeconds     []float64 `json:"dirtyAgeSeconds,omitempty"`
	DirtyAgeOpenSeconds float64   `json:"dirtyAgeOpenSeconds,omitempty"`

	// PassesInWriteback, PassesInWritethrough, WritethroughSeconds and WriteLimits are what
	// `flashcache node run` logged during the measured run (flashcache configurations): the flush
	// passes that ended in writeback, those finished in writethrough and how long each of those
	// held the volume in writethrough (where the log says), and each write limit it set (bytes a
	// second, 0 for lifted) under flushThrottle Proportional.
	PassesInWriteback    int       `json:"passesInWriteback,omitempty"`
	PassesInWritethrough int       `json:"passesInWritethrough,omitempty"`
	WritethroughSeconds  []float64 `json:"writethroughSeconds,omitempty"`
	WriteLimits          []int64   `json:"writeLimits,omitempty"`

	// Writeback is bcache's writeback sampled every 10 s through the measured run (bcache
	// configurations, from 2026-12-06 19:40): beside the 10-s TPS, what a flush pass's floor and
	// bcache's own rate asked of the HDD, and what it wrote.
	Writeback []WritebackSample `json:"writeback,omitempty"`

	// ReadHitRatio is the share of the bytes read from the volume that did not come from the
	// HDD, from /sys/block/*/stat over the measured run: the same definition for every cache.
	ReadHitRatio        float64 `json:"readHitRatio"`
	HDDReadsPerTxn      float64 `json:"hddReadsPerTxn"`
	HDDWritesPerTxn     float64 `json:"hddWritesPerTxn"`
	SSDWriteBytesPerTxn float64 `json:"ssdWriteBytesPerTxn"`
	// BypassedBytes is what bcache sent around its cache during the measured run (its
	// stats_total/bypassed, which it updates every few seconds): sequential I/O past the cutoff,
	// or I/O to a cache it judged congested.
	BypassedBytes         int64   `json:"bypassedBytes,omitempty"`
	DirtyBytesAfter       int64   `json:"dirtyBytesAfter"`
	FlushSeconds          float64 `json:"flushSeconds"`
	FlushIncomplete       bool    `json:"flushIncomplete,omitempty"`
	FioReadIOPS           float64 `json:"fioReadIOPS"`
	FioWriteIOPS          float64 `json:"fioWriteIOPS"`
	FioReadP95Ms          float64 `json:"fioReadP95Ms"`
	FioHDDReadsPerKiloOps float64 `json:"fioHDDReadsPerKiloOps"`
}

// OldestDirtySeconds is the oldest dirty data the run saw: the longest a marker took to reach
// the HDD, or had waited at the end; NaN when none was sampled.
func (r OLTPRun) OldestDirtySeconds() float64 {
	if len(r.DirtyAgeSeconds) == 0 && r.DirtyAgeOpenSeconds == 0 {
		return math.NaN()
	}
	oldest := r.DirtyAgeOpenSeconds
	for _, a := range r.DirtyAgeSeconds {
		oldest = math.Max(oldest, a)
	}
	return oldest
}

// OLTP is oltp.json.
type OLTP struct {
	Command  string     `json:"command"`
	Started  string     `json:"started"`
	Seconds  float64    `json:"seconds"`
	Machine  Machine    `json:"machine"`
	Params   OLTPParams `json:"params"`
	Configs  []Config   `json:"configs"`
	Runs     []OLTPRun  `json:"runs"`
	Failures []string   `json:"failures,omitempty"`
}

// FlushPattern is one kind of dirty data, flushed by `flashcache node flush` and compared with
// the backing disk written directly: with the requests the flush itself sent (the same I/O
// pattern, the target's measure) and with the block size the data was written in.
type FlushPattern struct {
	Name         string  `json:"name"`
	BlockBytes   int64   `json:"blockBytes"`
	DirtyBytes   int64   `json:"dirtyBytes"`
	FlushSeconds float64 `json:"flushSeconds"`
	FlushMBps    float64 `json:"flushMBps"`
	// The HDD's write requests during the flush, from /sys/block/<hdd>/stat.
	FlushHDDWrites       int64   `json:"flushHDDWrites"`
	FlushHDDRequestBytes int64   `json:"flushHDDRequestBytes"`
	FlushHDDWritesPerSec float64 `json:"flushHDDWritesPerSec"`
	// The HDD written directly by fio with requests of FlushHDDRequestBytes, and Ratio against it.
	RequestBaselineMBps float64 `json:"requestBaselineMBps"`
	Ratio               float64 `json:"ratio"`
	// The HDD written directly with BlockBytes requests, and the flush against that.
	BaselineMBps float64 `json:"baselineMBps"`
	BlockRatio   float64 `json:"blockRatio"`
}

// Flush is flush.json.
type Flush struct {
	Command  string         `json:"command"`
	Machine  Machine        `json:"machine"`
	Patterns []FlushPattern `json:"patterns"`
}

// LatencyMs summarises a latency distribution in milliseconds.
type LatencyMs struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max,omitempty"`
	Mean float64 `json:"mean,omitempty"`
	// Count is how many observations the summary is of (server side: the histogram's delta).
	Count uint64 `json:"count,omitempty"`
}

// Claims is claims.json, written by the claim-to-Bound benchmark: claims of ClaimSize created at
// once on Node, each with a pod, and how long each took to be Bound.
type Claims struct {
	Command            string    `json:"command,omitempty"`
	Claims             int       `json:"claims"`
	ClaimSize          string    `json:"claimSize"`
	Node               string    `json:"node"`
	BoundMs            LatencyMs `json:"boundMs"`
	AllBoundSeconds    float64   `json:"allBoundSeconds"`
	Simulation         string    `json:"simulation"`
	KubernetesVersion  string    `json:"kubernetesVersion"`
	ProvisionerVersion string    `json:"provisionerVersion"`
	FlashcacheVersion  string    `json:"flashcacheVersion"`
	MachineCPUs        int       `json:"machineCPUs"`
	// MachineLoadAverageAtStart is /proc/loadavg's first three fields.
	MachineLoadAverageAtStart string    `json:"machineLoadAverageAtStart"`
	StartedAt                 time.Time `json:"startedAt"`
}

// Scale is scale.json, written by the operator-scale benchmark. The names up to
// kubernetesVersion are the issue's; the rest add detail. The notes say how a number was taken.
type Scale struct {
	Command                  string     `json:"command,omitempty"`
	Volumes                  int        `json:"volumes"`
	Nodes                    int        `json:"nodes"`
	TimeToAllPVsSeconds      float64    `json:"timeToAllPVsSeconds"`
	OperatorCPUSeconds       float64    `json:"operatorCPUSeconds"`
	OperatorPeakRSSBytes     int64      `json:"operatorPeakRSSBytes"`
	Evictions                int        `json:"evictions"`
	EvictionConcurrency      int        `json:"evictionConcurrency"`
	EvictionLatencyMs        LatencyMs  `json:"evictionLatencyMs"`
	WebhookServerLatencyMs   *LatencyMs `json:"webhookServerLatencyMs,omitempty"`
	WebhookServerLatencyNote string     `json:"webhookServerLatencyNote"`
	Simulation               string     `json:"simulation"`
	KubernetesVersion        string     `json:"kubernetesVersion"`

	EvictionLatencyNote         string     `json:"evictionLatencyNote"`
	DryRunEvictionLatencyMs     LatencyMs  `json:"dryRunEvictionLatencyMs"`
	DryRunEvictionLatencyNote   string     `json:"dryRunEvictionLatencyNote"`
	APIServerWebhookLatencyMs   *LatencyMs `json:"apiserverWebhookLatencyMs,omitempty"`
	APIServerWebhookLatencyNote string     `json:"apiserverWebhookLatencyNote"`
	CreateVolumesSeconds        float64    `json:"createVolumesSeconds"`
	TimeToFirstPVSeconds        float64    `json:"timeToFirstPVSeconds"`
	TimeToHalfPVsSeconds        float64    `json:"timeToHalfPVsSeconds"`
	TimeToAllReadySeconds       float64    `json:"timeToAllReadySeconds"`
	OperatorCPUSecondsNote      string     `json:"operatorCPUSecondsNote"`
	OperatorRSSAfterPVsBytes    int64      `json:"operatorRSSAfterPVsBytes"`
	OperatorCPUSecondsEvictions float64    `json:"operatorCPUSecondsEvictions"`
	EvictionBurstSeconds        float64    `json:"evictionBurstSeconds"`
	OperatorPeakRSSNote         string     `json:"operatorPeakRSSNote"`
	MachineCPUs                 int        `json:"machineCPUs"`
	MachineLoadAverageAtStart   string     `json:"machineLoadAverageAtStart"`
	FlashcacheVersion           string     `json:"flashcacheVersion"`
	StartedAt                   time.Time  `json:"startedAt"`
	// The simulated agent's and the operator's identities, and how crowded the nodes were.
	SimulatedAgentWorkers         int     `json:"simulatedAgentWorkers"`
	SimulatedAgentServiceAccount  string  `json:"simulatedAgentServiceAccount"`
	OperatorServiceAccount        string  `json:"operatorServiceAccount"`
	UnrelatedPodsPerNodeAtMost    int     `json:"unrelatedPodsPerNodeAtMost"`
	OperatorStartupRSSBytes       int64   `json:"operatorStartupRSSBytes"`
	OperatorCPUSecondsBeforeStart float64 `json:"operatorCPUSecondsBeforeVolumes"`
}

// SetMachine describes where the benchmark runs now. Runs kept from an earlier sitting that do not
// say which emulator they ran on ran on the one the machine block then named, which they keep.
func (o *OLTP) SetMachine(m Machine) {
	for i := range o.Runs {
		if o.Runs[i].QEMU == "" {
			o.Runs[i].QEMU = o.Machine.QEMU
		}
	}
	o.Machine = m
}

// ResumeOLTP loads the runs a previous, unfinished benchmark of p's data set left in dir, so
// that a run which cannot finish in one sitting goes on where it stopped. Runs are kept only
// when they were measured with the same parameters: otherwise their figures would not compare,
// and the error says which parameter differs. The number of repetitions is not one of them: a
// larger BENCH_REPETITIONS adds repetitions to the runs kept, and the file then says the larger.
// A missing file is an empty start; failures are dropped, since what failed is measured again.
func ResumeOLTP(dir string, p OLTPParams) (OLTP, error) {
	var o OLTP
	file := OLTPFileFor(p.DataSet)
	err := Read(dir, file, &o)
	if errors.Is(err, os.ErrNotExist) {
		return OLTP{}, nil
	}
	if err != nil {
		return OLTP{}, err
	}
	if diff := paramsDiff(o.Params, p); diff != "" {
		return OLTP{}, fmt.Errorf("%s holds runs of other parameters (%s): move it away, or set BENCH_RESULTS to another folder",
			filepath.Join(dir, file), diff)
	}
	o.Failures = nil
	o.Params.Repetitions = max(o.Params.Repetitions, p.Repetitions)
	return o, nil
}

// paramsDiff names the first parameter that differs between what was measured and what would
// be, in its JSON name; "" when they are the same.
func paramsDiff(had, want OLTPParams) string {
	had.Repetitions = want.Repetitions
	a, _ := json.Marshal(had)
	b, _ := json.Marshal(want)
	var am, bm map[string]any
	_ = json.Unmarshal(a, &am)
	_ = json.Unmarshal(b, &bm)
	keys := make([]string, 0, len(bm))
	for k := range bm {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if fmt.Sprint(am[k]) != fmt.Sprint(bm[k]) {
			return fmt.Sprintf("%s %v there, %v now", k, am[k], bm[k])
		}
	}
	return ""
}

// Has reports whether config's repetition rep was measured.
func (o *OLTP) Has(config string, rep int) bool {
	for _, r := range o.Runs {
		if r.Config == config && r.Rep == rep {
			return true
		}
	}
	return false
}

// AddConfig lists c among the configurations, once; a resumed benchmark may add some.
func (o *OLTP) AddConfig(c Config) {
	for i, have := range o.Configs {
		if have.Name == c.Name {
			o.Configs[i] = c
			return
		}
	}
	o.Configs = append(o.Configs, c)
}

// Write stores v as indented JSON in dir/name. It writes a new file and renames it over the
// old one, so that a benchmark killed while saving leaves the runs saved before intact.
func Write(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results folder: %w", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path+".new", append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// Read loads dir/name into v; a missing file is reported as os.ErrNotExist.
func Read(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", name, err)
	}
	return nil
}

// Median of xs (NaN for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// MinMax of xs (NaN for none).
func MinMax(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	lo, hi = xs[0], xs[0]
	for _, x := range xs[1:] {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// CV is the coefficient of variation (population standard deviation over mean) of xs: how
// steady the 10-s TPS of a run was. NaN for fewer than two values or a zero mean.
func CV(xs []float64) float64 {
	if len(xs) < 2 {
		return math.NaN()
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	if mean == 0 {
		return math.NaN()
	}
	var sq float64
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	return math.Sqrt(sq/float64(len(xs))) / mean
}

// WritebackSample is one sample of a bcache volume's writeback, and the HDD's writes in the
// seconds since the sample before.
type WritebackSample struct {
	// Seconds since the first sample, which was taken as the measured run began.
	Seconds    float64 `json:"seconds"`
	DirtyBytes int64   `json:"dirtyBytes"`
	// RateBytes is the rate bcache's writeback aims at, a second (writeback_rate);
	// RateMinimumBytes its floor (writeback_rate_minimum), which a paced flush pass raises.
	RateBytes        int64 `json:"rateBytes"`
	RateMinimumBytes int64 `json:"rateMinimumBytes"`
	// HDDWritesPerSecond and HDDWriteBytesPerSecond are the backing disk's, since the sample
	// before (/sys/block/*/stat): every writer's, the database's own writes around the cache too.
	HDDWritesPerSecond     float64 `json:"hddWritesPerSecond"`
	HDDWriteBytesPerSecond float64 `json:"hddWriteBytesPerSecond"`
}

// ParsePassLog fills in run's pass counts, writethrough lengths and write limits from lines of
// `flashcache node run`'s log.
func ParsePassLog(run *OLTPRun, log string) {
	limitRE := regexp.MustCompile(`"bytesPerSecond":\s*(\d+)`)
	writethroughRE := regexp.MustCompile(`"writethroughSeconds":\s*([0-9.]+)`)
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.Contains(line, "finished in writethrough"):
			run.PassesInWritethrough++
			if m := writethroughRE.FindStringSubmatch(line); m != nil {
				secs, _ := strconv.ParseFloat(m[1], 64)
				run.WritethroughSeconds = append(run.WritethroughSeconds, secs)
			}
		case strings.Contains(line, "flush pass done"):
			run.PassesInWriteback++
		case strings.Contains(line, "write limit lifted"):
			run.WriteLimits = append(run.WriteLimits, 0)
		case strings.Contains(line, "write limit"):
			if m := limitRE.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				run.WriteLimits = append(run.WriteLimits, n)
			}
		}
	}
}
