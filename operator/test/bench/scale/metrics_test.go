//go:build bench

package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/flashcache/flashcache/operator/test/bench/results"
	"github.com/flashcache/flashcache/operator/test/expositions"
)

// protoAccept asks for Prometheus' protobuf exposition: only it carries native histograms,
// whose ~9 % wide buckets resolve a webhook's latency where the classic decade buckets of
// controller_runtime_webhook_latency_seconds (1 ms, 10 ms, 100 ms) cannot.
const protoAccept = `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3`

// scrape reads a Prometheus endpoint into its metric families.
func scrape(ctx context.Context, hc *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	req.Header.Set("Accept", protoAccept)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("scraping %s: %s: %s", url, resp.Status, body)
	}
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	out := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decoding %s: %w", url, err)
		}
		out[mf.GetName()] = &mf
	}
}

// findHistogram is the histogram of family name whose labels include want, or nil.
func findHistogram(families map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Histogram {
	return expositions.Find(families, name, want).GetHistogram()
}

// bucket is a histogram bucket with its count (not cumulative) between lower and upper bound.
type bucket struct {
	lower, upper float64
	count        float64
}

// histogramDelta is what a histogram observed between two scrapes: its count, sum and buckets.
type histogramDelta struct {
	count   uint64
	sum     float64
	buckets []bucket
	native  bool
}

// deltaOf subtracts before (nil: nothing observed yet) from after. Native buckets are used when
// both scrapes have them at the same resolution, the classic ones otherwise.
func deltaOf(before, after *dto.Histogram) (histogramDelta, error) {
	if after == nil {
		return histogramDelta{}, errors.New("no histogram after the burst")
	}
	if before == nil {
		before = &dto.Histogram{}
	}
	d := histogramDelta{count: after.GetSampleCount() - before.GetSampleCount(), sum: after.GetSampleSum() - before.GetSampleSum()}
	if after.GetSampleCount() < before.GetSampleCount() {
		return d, errors.New("the histogram was reset between the scrapes")
	}
	if len(after.GetPositiveSpan()) > 0 && (before.GetSampleCount() == 0 || (before.Schema != nil && before.GetSchema() == after.GetSchema())) {
		b, a := nativeBuckets(before), nativeBuckets(after)
		base := math.Pow(2, math.Pow(2, -float64(after.GetSchema())))
		var idx []int
		for i := range a {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		zero := float64(after.GetZeroCount()) - float64(before.GetZeroCount())
		if zero > 0 {
			d.buckets = append(d.buckets, bucket{0, after.GetZeroThreshold(), zero})
		}
		for _, i := range idx {
			if n := a[i] - b[i]; n > 0 {
				// Bucket i of schema s holds (base^(i-1), base^i].
				d.buckets = append(d.buckets, bucket{math.Pow(base, float64(i-1)), math.Pow(base, float64(i)), n})
			}
		}
		d.native = true
		return d, nil
	}
	prevUpper, prevAfter, prevBefore := 0.0, 0.0, 0.0
	beforeCum := map[float64]float64{}
	for _, bk := range before.GetBucket() {
		beforeCum[bk.GetUpperBound()] = float64(bk.GetCumulativeCount())
	}
	for _, bk := range after.GetBucket() {
		cumAfter, cumBefore := float64(bk.GetCumulativeCount()), beforeCum[bk.GetUpperBound()]
		if n := (cumAfter - prevAfter) - (cumBefore - prevBefore); n > 0 {
			d.buckets = append(d.buckets, bucket{prevUpper, bk.GetUpperBound(), n})
		}
		prevUpper, prevAfter, prevBefore = bk.GetUpperBound(), cumAfter, cumBefore
	}
	return d, nil
}

// nativeBuckets decodes a native histogram's positive spans into counts by bucket index.
func nativeBuckets(h *dto.Histogram) map[int]float64 {
	out := map[int]float64{}
	idx, count := 0, int64(0)
	deltas := h.GetPositiveDelta()
	k := 0
	for _, span := range h.GetPositiveSpan() {
		idx += int(span.GetOffset())
		for j := 0; j < int(span.GetLength()) && k < len(deltas); j++ {
			count += deltas[k]
			k++
			out[idx] = float64(count)
			idx++
		}
	}
	return out
}

// quantile estimates the q-quantile. In native buckets it interpolates linearly, as Prometheus'
// histogram_quantile does, within 9 %. In classic buckets, which are five times apart, an
// interpolated value would be invented: it is the upper bound of the bucket the quantile is in.
func (d histogramDelta) quantile(q float64) float64 {
	var total float64
	for _, b := range d.buckets {
		total += b.count
	}
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	var seen float64
	for _, b := range d.buckets {
		if seen+b.count >= rank {
			switch {
			case math.IsInf(b.upper, 1):
				return b.lower
			case !d.native:
				return b.upper
			}
			return b.lower + (b.upper-b.lower)*(rank-seen)/b.count
		}
		seen += b.count
	}
	return d.buckets[len(d.buckets)-1].upper
}

// summaryMs is the delta's p50, p99 and mean in milliseconds.
func (d histogramDelta) summaryMs() results.LatencyMs {
	s := results.LatencyMs{P50: d.quantile(0.5) * 1000, P99: d.quantile(0.99) * 1000, Count: d.count}
	if d.count > 0 {
		s.Mean = d.sum / float64(d.count) * 1000
	}
	return s
}

// bounds lists the bucket bounds the estimate came from, for the output's note.
func (d histogramDelta) bounds() string {
	var parts []string
	for _, b := range d.buckets {
		parts = append(parts, strconv.FormatFloat(b.upper*1000, 'g', 3, 64))
	}
	return strings.Join(parts, ", ")
}

// procStat is what /proc says of a process: CPU time (user + system) and memory.
type procStat struct {
	cpuSeconds float64
	// peakRSS is VmHWM, the resident set's high-water mark over the process's life.
	peakRSS int64
	rss     int64
}

// userHZ is the unit of /proc/<pid>/stat's times: fixed at 100 by the kernel's ABI on Linux,
// whatever CONFIG_HZ is.
const userHZ = 100

func readProc(pid int) (procStat, error) {
	var st procStat
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, fmt.Errorf("reading the operator's CPU time: %w", err)
	}
	// The command name, in parentheses, may hold spaces: the fields that follow start after
	// the last ")". utime and stime are fields 14 and 15, so 12th and 13th after it.
	rest := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(rest) < 13 {
		return st, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(rest))
	}
	utime, err1 := strconv.ParseInt(rest[11], 10, 64)
	stime, err2 := strconv.ParseInt(rest[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return st, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	st.cpuSeconds = float64(utime+stime) / userHZ
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, fmt.Errorf("reading the operator's memory: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return st, fmt.Errorf("/proc/%d/status: %s: %w", pid, line, err)
		}
		switch fields[0] {
		case "VmHWM:":
			st.peakRSS = kb << 10
		case "VmRSS:":
			st.rss = kb << 10
		}
	}
	if st.peakRSS == 0 {
		return st, fmt.Errorf("/proc/%d/status has no VmHWM", pid)
	}
	return st, nil
}
