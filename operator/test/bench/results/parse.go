package results

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// Sysbench is what a `sysbench ... --report-interval=N run` printed.
type Sysbench struct {
	IntervalTPS  []float64
	Transactions int64
	TPS          float64
	P95Ms        float64
	// P99Ms is read off the latency histogram (`--histogram=on`); 0 without one.
	P99Ms float64
}

var (
	sysbenchInterval = regexp.MustCompile(`^\[\s*\d+s\s*\]\s+thds:\s*\d+\s+tps:\s*([0-9.]+)`)
	sysbenchTxns     = regexp.MustCompile(`^\s*transactions:\s+(\d+)\s+\(([0-9.]+) per sec\.\)`)
	sysbenchP95      = regexp.MustCompile(`^\s*95th percentile:\s+([0-9.]+)`)
	// A histogram row: the bucket's latency in ms, its bar of stars, its count.
	sysbenchBucket = regexp.MustCompile(`^\s*([0-9.]+)\s+\|\**\s+(\d+)\s*$`)
)

// ParseSysbench reads sysbench 1.0's run output (interval lines and the summary).
func ParseSysbench(out string) (Sysbench, error) {
	var s Sysbench
	var haveTxns, haveP95 bool
	var buckets []bucket
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := sysbenchBucket.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			n, _ := strconv.ParseInt(m[2], 10, 64)
			buckets = append(buckets, bucket{v, n})
		} else if m := sysbenchInterval.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			s.IntervalTPS = append(s.IntervalTPS, v)
		} else if m := sysbenchTxns.FindStringSubmatch(line); m != nil {
			s.Transactions, _ = strconv.ParseInt(m[1], 10, 64)
			s.TPS, _ = strconv.ParseFloat(m[2], 64)
			haveTxns = true
		} else if m := sysbenchP95.FindStringSubmatch(line); m != nil {
			s.P95Ms, _ = strconv.ParseFloat(m[1], 64)
			haveP95 = true
		}
	}
	if !haveTxns || !haveP95 {
		return s, fmt.Errorf("sysbench output has no transactions or 95th percentile summary")
	}
	s.P99Ms = histogramPercentile(buckets, 0.99)
	return s, nil
}

type bucket struct {
	ms    float64
	count int64
}

// histogramPercentile is the latency of the bucket where the cumulative count reaches q of the
// whole, as sysbench computes its own percentile; 0 for no histogram.
func histogramPercentile(buckets []bucket, q float64) float64 {
	var total int64
	for _, b := range buckets {
		total += b.count
	}
	if total == 0 {
		return 0
	}
	var seen int64
	for _, b := range buckets {
		seen += b.count
		if float64(seen) >= q*float64(total) {
			return b.ms
		}
	}
	return buckets[len(buckets)-1].ms
}

// Fio is the part of fio's JSON output (one job) the benchmark reports.
type Fio struct {
	ReadIOPS, WriteIOPS float64
	ReadP95Ms           float64
	WriteBytesPerSec    float64
}

// ParseFio reads `fio --output-format=json` with one job.
func ParseFio(out []byte) (Fio, error) {
	var doc struct {
		Jobs []struct {
			Read  fioSide `json:"read"`
			Write fioSide `json:"write"`
		} `json:"jobs"`
	}
	// fio prints warnings before the JSON document when it adjusts an option.
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return Fio{}, fmt.Errorf("fio output: %w", err)
	}
	if len(doc.Jobs) != 1 {
		return Fio{}, fmt.Errorf("fio output: want one job, have %d", len(doc.Jobs))
	}
	j := doc.Jobs[0]
	return Fio{ReadIOPS: j.Read.IOPS, WriteIOPS: j.Write.IOPS, ReadP95Ms: j.Read.Clat.Percentile["95.000000"] / 1e6,
		WriteBytesPerSec: j.Write.BWBytes}, nil
}

type fioSide struct {
	IOPS    float64 `json:"iops"`
	BWBytes float64 `json:"bw_bytes"`
	Clat    struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// BlockStat is a block device's I/O counters, /sys/block/<dev>/stat (Documentation/block/stat.rst).
type BlockStat struct {
	Reads, ReadSectors, Writes, WriteSectors int64
}

// ParseBlockStat reads one /sys/block/<dev>/stat line.
func ParseBlockStat(line string) (BlockStat, error) {
	f := strings.Fields(line)
	if len(f) < 7 {
		return BlockStat{}, fmt.Errorf("block stat %q: want at least 7 fields", line)
	}
	var v [7]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return BlockStat{}, fmt.Errorf("block stat %q: field %d: %w", line, i+1, err)
		}
		v[i] = n
	}
	return BlockStat{Reads: v[0], ReadSectors: v[2], Writes: v[4], WriteSectors: v[6]}, nil
}

// Sub is the I/O between two readings.
func (b BlockStat) Sub(before BlockStat) BlockStat {
	return BlockStat{b.Reads - before.Reads, b.ReadSectors - before.ReadSectors, b.Writes - before.Writes, b.WriteSectors - before.WriteSectors}
}

// ReadHitRatio is the share of what was read from the volume (top) that the HDD did not serve.
// Read-ahead or a cache's promotion reads can make the HDD read more than the volume did; that
// counts as no hits at all rather than a negative ratio.
func ReadHitRatio(top, hdd BlockStat) float64 {
	if top.ReadSectors <= 0 {
		return 0
	}
	r := 1 - float64(hdd.ReadSectors)/float64(top.ReadSectors)
	if r < 0 {
		return 0
	}
	return r
}

// ParseDirtyAges reads the dirty-age sampler's lines ("arrived WRITTEN ARRIVED", "open WRITTEN
// NOW", Unix times): the seconds each marker took to reach the HDD, and how long the one still
// under way had waited.
func ParseDirtyAges(out string) (ages []float64, open float64, err error) {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 || (f[0] != "arrived" && f[0] != "open") {
			return nil, 0, fmt.Errorf("dirty-age sampler printed %q", line)
		}
		from, err1 := strconv.ParseFloat(f[1], 64)
		to, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil || to < from {
			return nil, 0, fmt.Errorf("dirty-age sampler printed %q", line)
		}
		if f[0] == "arrived" {
			ages = append(ages, to-from)
		} else {
			open = to - from
		}
	}
	return ages, open, nil
}

// ParseWritebackSamples reads the writeback sampler's lines, "TIME DIRTY RATE MINIMUM WRITES
// SECTORS": a time in seconds, bcache's dirty_data and writeback_rate as it prints them ("1.5M"),
// writeback_rate_minimum in sectors, and the backing disk's writes and sectors written so far.
// The first line is the baseline of the HDD's counters; each later one is a sample.
func ParseWritebackSamples(out string) ([]WritebackSample, error) {
	var samples []WritebackSample
	var first, prevAt float64
	var prevWrites, prevSectors int64
	baseline := true
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 6 {
			return nil, fmt.Errorf("writeback sampler printed %q", line)
		}
		at, err1 := strconv.ParseFloat(f[0], 64)
		dirty, err2 := blockdev.ParseHumanSize(f[1])
		rate, err3 := blockdev.ParseHumanSize(f[2])
		minimum, err4 := strconv.ParseInt(f[3], 10, 64)
		writes, err5 := strconv.ParseInt(f[4], 10, 64)
		sectors, err6 := strconv.ParseInt(f[5], 10, 64)
		if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
			return nil, fmt.Errorf("writeback sampler printed %q: %w", line, err)
		}
		if baseline {
			first, baseline = at, false
		} else if at > prevAt {
			secs := at - prevAt
			samples = append(samples, WritebackSample{Seconds: at - first, DirtyBytes: dirty, RateBytes: rate, RateMinimumBytes: minimum * 512,
				HDDWritesPerSecond: float64(writes-prevWrites) / secs, HDDWriteBytesPerSecond: float64(sectors-prevSectors) * 512 / secs})
		}
		prevAt, prevWrites, prevSectors = at, writes, sectors
	}
	return samples, nil
}
