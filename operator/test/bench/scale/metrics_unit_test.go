//go:build bench

package scale

import (
	"math"
	"os"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// The server-side latency is only as right as the decoding of the histogram: checked here on
// numbers worked out by hand, without a cluster.
func TestNativeHistogramDelta(t *testing.T) {
	// Schema 0: bucket i holds (2^(i-1), 2^i]. Buckets -3 (1/16, 1/8] and -2 (1/8, 1/4] and,
	// after a gap of one, 0 (1/2, 1]; counts 1, 2, 1 written as deltas.
	after := &dto.Histogram{
		SampleCount: proto.Uint64(5), SampleSum: proto.Float64(1.5), Schema: proto.Int32(0),
		ZeroThreshold: proto.Float64(1e-9), ZeroCount: proto.Uint64(1),
		PositiveSpan:  []*dto.BucketSpan{{Offset: proto.Int32(-3), Length: proto.Uint32(2)}, {Offset: proto.Int32(1), Length: proto.Uint32(1)}},
		PositiveDelta: []int64{1, 1, -1},
	}
	before := &dto.Histogram{
		SampleCount: proto.Uint64(1), SampleSum: proto.Float64(0), Schema: proto.Int32(0),
		ZeroThreshold: proto.Float64(1e-9), ZeroCount: proto.Uint64(1),
	}
	d, err := deltaOf(before, after)
	if err != nil {
		t.Fatal(err)
	}
	if !d.native || d.count != 4 || d.sum != 1.5 {
		t.Fatalf("delta %+v", d)
	}
	want := []bucket{{0.0625, 0.125, 1}, {0.125, 0.25, 2}, {0.5, 1, 1}}
	if len(d.buckets) != len(want) {
		t.Fatalf("buckets %+v, want %+v", d.buckets, want)
	}
	for i := range want {
		if d.buckets[i] != want[i] {
			t.Errorf("bucket %d: %+v, want %+v", i, d.buckets[i], want[i])
		}
	}
	// Rank 2 of 4: one in the first bucket, the second halfway through (1/8, 1/4].
	if got := d.quantile(0.5); math.Abs(got-0.1875) > 1e-12 {
		t.Errorf("p50 %v, want 0.1875", got)
	}
}

func TestClassicHistogramQuantileIsABucketBound(t *testing.T) {
	h := &dto.Histogram{SampleCount: proto.Uint64(10), SampleSum: proto.Float64(0.3), Bucket: []*dto.Bucket{
		{UpperBound: proto.Float64(0.005), CumulativeCount: proto.Uint64(0)},
		{UpperBound: proto.Float64(0.025), CumulativeCount: proto.Uint64(9)},
		{UpperBound: proto.Float64(0.1), CumulativeCount: proto.Uint64(10)},
	}}
	d, err := deltaOf(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	if d.native || d.quantile(0.5) != 0.025 || d.quantile(0.99) != 0.1 {
		t.Errorf("classic p50 %v p99 %v, want the bounds 0.025 and 0.1", d.quantile(0.5), d.quantile(0.99))
	}
}

func TestReadProcOfThisProcess(t *testing.T) {
	st, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.peakRSS < st.rss || st.rss <= 0 || st.cpuSeconds < 0 {
		t.Errorf("%+v", st)
	}
}
