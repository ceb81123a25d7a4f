package main

import (
	"math"
	"sort"

	"github.com/flashcache/flashcache/operator/test/bench/results"
)

// The configurations the targets and the ratio columns compare against, as the OLTP
// benchmark names them.
const (
	flashcacheDefaults  = "flashcache"
	allFlash            = "all-flash"
	bcacheStock         = "bcache-stock"
	lvmcache            = "lvmcache"
	dmWritecache        = "dm-writecache"
	flashcacheFlushOff  = "flashcache-flush-off"
	flashcacheUnbounded = "flashcache-unbounded"
	hddOnly             = "hdd"
)

// oltpSummary is one configuration's runs and their medians; NaN where nothing was measured.
type oltpSummary struct {
	config results.Config
	// runs are in repetition order.
	runs []results.OLTPRun

	tps, tpsMin, tpsMax float64
	p95Ms, p99Ms        float64
	intervalCV          float64
	// The dirty-age markers of every run: how many reached the HDD, the median time they took,
	// and the oldest seen in any run (the worst, not a median: the bound is a promise).
	dirtyAgeMarkers       int
	dirtyAgeMedian        float64
	oldestDirtySeconds    float64
	readHitRatio          float64
	hddReadsPerTxn        float64
	hddWritesPerTxn       float64
	ssdKiBPerTxn          float64
	copySeconds           float64
	dirtyMiB              float64
	bypassedMiB           float64
	flushSeconds          float64
	fioIOPS               float64
	fioHDDReadsPerKiloOps float64
	// incompleteFlushes counts the runs whose flush timed out: their flush time is a lower bound.
	incompleteFlushes int
}

// summarize groups the runs by configuration, in the order of o.Configs. Runs of a
// configuration the file does not list come last, in the order they first appear, rather than
// being dropped unseen.
func summarize(o *results.OLTP) []oltpSummary {
	configs := append([]results.Config(nil), o.Configs...)
	known := map[string]bool{}
	for _, c := range configs {
		known[c.Name] = true
	}
	for _, r := range o.Runs {
		if !known[r.Config] {
			known[r.Config] = true
			configs = append(configs, results.Config{Name: r.Config, Cached: true})
		}
	}
	var out []oltpSummary
	for _, c := range configs {
		s := oltpSummary{config: c}
		for _, r := range o.Runs {
			if r.Config == c.Name {
				s.runs = append(s.runs, r)
			}
		}
		sort.SliceStable(s.runs, func(i, j int) bool { return s.runs[i].Rep < s.runs[j].Rep })
		s.tps = medianOf(s.runs, func(r results.OLTPRun) float64 { return r.TPS })
		s.tpsMin, s.tpsMax = results.MinMax(valuesOf(s.runs, func(r results.OLTPRun) float64 { return r.TPS }))
		s.p95Ms = medianOf(s.runs, func(r results.OLTPRun) float64 { return r.P95Ms })
		// Runs from before p99 was measured have none.
		s.p99Ms = medianOf(s.runs, func(r results.OLTPRun) float64 { return positive(r.P99Ms) })
		var ages []float64
		s.oldestDirtySeconds = math.NaN()
		for _, r := range s.runs {
			ages = append(ages, r.DirtyAgeSeconds...)
			if o := r.OldestDirtySeconds(); !math.IsNaN(o) && (math.IsNaN(s.oldestDirtySeconds) || o > s.oldestDirtySeconds) {
				s.oldestDirtySeconds = o
			}
		}
		s.dirtyAgeMarkers, s.dirtyAgeMedian = len(ages), results.Median(ages)
		s.intervalCV = medianOf(s.runs, func(r results.OLTPRun) float64 { return results.CV(r.IntervalTPS) })
		s.readHitRatio = medianOf(s.runs, func(r results.OLTPRun) float64 { return r.ReadHitRatio })
		s.hddReadsPerTxn = medianOf(s.runs, func(r results.OLTPRun) float64 { return r.HDDReadsPerTxn })
		s.hddWritesPerTxn = medianOf(s.runs, func(r results.OLTPRun) float64 { return r.HDDWritesPerTxn })
		s.ssdKiBPerTxn = medianOf(s.runs, func(r results.OLTPRun) float64 { return r.SSDWriteBytesPerTxn / (1 << 10) })
		s.copySeconds = medianOf(s.runs, func(r results.OLTPRun) float64 { return r.CopySeconds })
		s.dirtyMiB = medianOf(s.runs, func(r results.OLTPRun) float64 { return float64(r.DirtyBytesAfter) / (1 << 20) })
		s.bypassedMiB = math.NaN()
		if c.Bcache {
			s.bypassedMiB = medianOf(s.runs, func(r results.OLTPRun) float64 { return float64(r.BypassedBytes) / (1 << 20) })
		}
		s.flushSeconds = medianOf(s.runs, func(r results.OLTPRun) float64 { return r.FlushSeconds })
		s.fioIOPS = medianOf(s.runs, func(r results.OLTPRun) float64 { return r.FioReadIOPS + r.FioWriteIOPS })
		s.fioHDDReadsPerKiloOps = medianOf(s.runs, func(r results.OLTPRun) float64 { return r.FioHDDReadsPerKiloOps })
		for _, r := range s.runs {
			if r.FlushIncomplete {
				s.incompleteFlushes++
			}
		}
		out = append(out, s)
	}
	return out
}

func valuesOf(runs []results.OLTPRun, value func(results.OLTPRun) float64) []float64 {
	var xs []float64
	for _, r := range runs {
		xs = append(xs, value(r))
	}
	return xs
}

// medianOf is the median of a value over runs, leaving out the runs where it is NaN (a CV of a
// run too short to have one); NaN when no run has it.
func medianOf(runs []results.OLTPRun, value func(results.OLTPRun) float64) float64 {
	var xs []float64
	for _, x := range valuesOf(runs, value) {
		if !math.IsNaN(x) {
			xs = append(xs, x)
		}
	}
	return results.Median(xs)
}

// find is the summary of the named configuration, or nil.
func find(summaries []oltpSummary, name string) *oltpSummary {
	for i := range summaries {
		if summaries[i].config.Name == name {
			return &summaries[i]
		}
	}
	return nil
}

// medianTPS is the named configuration's median TPS, NaN if it did not run.
func medianTPS(summaries []oltpSummary, name string) float64 {
	if s := find(summaries, name); s != nil {
		return s.tps
	}
	return math.NaN()
}

// ratio is a/b, NaN when either was not measured or b is zero.
func ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}

func ratioString(a, b float64) string {
	r := ratio(a, b)
	if math.IsNaN(r) {
		return dash
	}
	return num(r, 2) + "×"
}
