package safety

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	on, off := boolPtr(true), boolPtr(false)
	hdd := KernelView{WriteCache: "write back", Rotational: true}
	ssd := KernelView{WriteCache: "write back"}
	probe := func(p50 time.Duration) *Probe {
		return &Probe{Writes: 200, P10: p50, P50: p50, P99: 2 * p50, PerSecond: float64(time.Second / p50)}
	}
	// throttled: every write takes 6.7 ms (150 IOPS); a flush is a 300 µs round trip, and
	// whatever writing the cache costs.
	throttled := func(flush time.Duration) *Probe {
		const write, roundTrip = 6700 * time.Microsecond, 300 * time.Microsecond
		return &Probe{Writes: 200, PlainP10: write, PlainP50: write, FlushP10: roundTrip + flush, FlushP50: roundTrip + flush,
			EmptyFlushP10: roundTrip, EmptyFlushP50: roundTrip, P10: write + roundTrip + flush, P50: write + roundTrip + flush, P99: 20 * time.Millisecond, PerSecond: 100}
	}
	// busy: the host is loaded, so every round trip is slow, writes and flushes alike (the
	// figures of a lying and an honest emulated disk beside a full make test).
	busy := func(write, flush, emptyFlush time.Duration) *Probe {
		return &Probe{Writes: 200, PlainP10: write, PlainP50: 2 * write, FlushP10: flush, FlushP50: 2 * flush,
			EmptyFlushP10: emptyFlush, EmptyFlushP50: 2 * emptyFlush, P10: write + flush, P50: 2 * (write + flush), P99: 20 * time.Millisecond, PerSecond: 250}
	}
	cases := []struct {
		name    string
		k       KernelView
		d       DeviceView
		p       *Probe
		trusted bool
		want    Verdict
		reason  string
	}{
		{"honest HDD", hdd, DeviceView{Source: "sdparm WCE", VolatileCache: on}, probe(8 * time.Millisecond), false, Safe, "p50 8ms"},
		{"lying HDD", hdd, DeviceView{Source: "sdparm WCE", VolatileCache: on}, probe(40 * time.Microsecond), false, Unsafe, "lying or battery backed"},
		{"throttled honest HDD", hdd, DeviceView{Source: "sdparm WCE", VolatileCache: on}, throttled(8600 * time.Microsecond), false, Safe, "the write p10 6.7ms"},
		{"throttled lying HDD", hdd, DeviceView{Source: "sdparm WCE", VolatileCache: on}, throttled(100 * time.Microsecond), false, Unsafe, "flushes add 100µs"},
		{"lying HDD whose flush is a slow round trip", hdd, DeviceView{Source: "sdparm WCE", VolatileCache: on}, throttled(1100 * time.Microsecond), false, Unsafe, "flushes add 1.1ms"},
		{"lying HDD on a busy host", hdd, DeviceView{Source: "sdparm WCE", VolatileCache: on}, busy(1900*time.Microsecond, 2190*time.Microsecond, 1950*time.Microsecond), false, Unsafe, "flushes add 240µs"},
		{"honest HDD on a busy host", hdd, DeviceView{Source: "sdparm WCE", VolatileCache: on}, busy(1900*time.Microsecond, 10500*time.Microsecond, 1950*time.Microsecond), false, Safe, "the flush p10 10.5ms"},
		{"battery-backed HDD", hdd, DeviceView{Source: "sdparm WCE", VolatileCache: on}, probe(40 * time.Microsecond), true, Safe, "trusted"},
		{"cache on, kernel writes through", KernelView{WriteCache: "write through", Rotational: true}, DeviceView{Source: "sdparm WCE", VolatileCache: on}, probe(8 * time.Millisecond), false, Unsafe, "never sends flushes"},
		{"no volatile cache", KernelView{WriteCache: "write through", Rotational: true}, DeviceView{Source: "sdparm WCE", VolatileCache: off}, probe(6 * time.Millisecond), false, Safe, "no volatile write cache"},
		{"honest SSD", ssd, DeviceView{Source: "nvme", VolatileCache: on}, busy(250*time.Microsecond, 430*time.Microsecond, 150*time.Microsecond), false, Safe, "the flush p10 430µs"},
		{"SSD whose flushes cost nothing", ssd, DeviceView{Source: "nvme", VolatileCache: on}, busy(250*time.Microsecond, 180*time.Microsecond, 150*time.Microsecond), false, Unsafe, "flushes add 30µs to a write on an SSD"},
		{"power-loss protected SSD", ssd, DeviceView{Source: "nvme", VolatileCache: on}, busy(20*time.Microsecond, 12*time.Microsecond, 10*time.Microsecond), true, Safe, "power-loss protected"},
		{"SSD without a volatile cache", KernelView{WriteCache: "write through"}, DeviceView{Source: "nvme", VolatileCache: off}, busy(20*time.Microsecond, 1*time.Microsecond, 1*time.Microsecond), false, Safe, "no volatile write cache"},
		{"not measured, cache on", hdd, DeviceView{}, &Probe{SkipReason: "no scratch region"}, false, Unknown, "no scratch region"},
		{"not measured, cache on and trusted", hdd, DeviceView{}, &Probe{SkipReason: "no scratch region"}, true, Safe, "trusted as battery or flash backed"},
		{"not measured, no cache", KernelView{WriteCache: "write through"}, DeviceView{}, nil, false, Safe, "not measured"},
	}
	for _, c := range cases {
		got, reasons := Judge(c.k, c.d, c.p, c.trusted)
		if got != c.want || !strings.Contains(strings.Join(reasons, "; "), c.reason) {
			t.Errorf("%s: %s %q, want %s mentioning %q", c.name, got, reasons, c.want, c.reason)
		}
	}
}

func TestCombineTakesTheWorst(t *testing.T) {
	if Combine(Safe, Unknown, Safe) != Unknown || Combine(Unknown, Unsafe) != Unsafe || Combine(Safe, Safe) != Safe || Combine() != Safe {
		t.Error("Combine is not the worst verdict")
	}
}

func TestParseSdparmWCE(t *testing.T) {
	v, err := ParseSdparmWCE("    /dev/sdb: QEMU      QEMU HARDDISK     2.5+\nWCE           1  [cha: y, def:  1, sav:  1]\n")
	if err != nil || v.VolatileCache == nil || !*v.VolatileCache || v.Changeable == nil || !*v.Changeable {
		t.Errorf("%+v %v", v, err)
	}
	v, err = ParseSdparmWCE("    /dev/sda: QEMU      QEMU HARDDISK     2.5+\nWCE           0  [cha: n, def:  0]\n")
	if err != nil || *v.VolatileCache || *v.Changeable {
		t.Errorf("%+v %v", v, err)
	}
	if _, err := ParseSdparmWCE("unable to access\n"); err == nil {
		t.Error("no WCE accepted")
	}
}

func TestParseHdparmW(t *testing.T) {
	v, err := ParseHdparmW("\n/dev/sda:\n write-caching =  1 (on)\n")
	if err != nil || !*v.VolatileCache {
		t.Errorf("%+v %v", v, err)
	}
	if _, err := ParseHdparmW("\n/dev/sdb:\n write-caching = not supported\n"); err == nil {
		t.Error("not supported accepted")
	}
}

func TestParseNVMe(t *testing.T) {
	v, err := ParseNVMe(`{"vid": 6900, "vwc": 7, "mn": "QEMU NVMe Ctrl"}`, "get-feature:0x06 (Volatile Write Cache), Current value:0x00000001\n")
	if err != nil || !*v.VolatileCache || !*v.Changeable {
		t.Errorf("%+v %v", v, err)
	}
	v, err = ParseNVMe(`{"vwc": 6}`, "")
	if err != nil || *v.VolatileCache {
		t.Errorf("no VWC: %+v %v", v, err)
	}
	v, err = ParseNVMe(`{"vwc": 1}`, "get-feature:0x06 (Volatile Write Cache), Current value:0\n")
	if err != nil || *v.VolatileCache {
		t.Errorf("VWC disabled: %+v %v", v, err)
	}
	if nvmeController("nvme1n1") != "nvme1" || nvmeController("nvme0c1n2") != "nvme0" {
		t.Error("controller of namespace")
	}
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseSmart(t *testing.T) {
	cases := []struct {
		file   string
		used   int
		worn   bool
		reason string
	}{
		{"smartctl-nvme-healthy.json", 3, false, ""},
		{"smartctl-nvme-worn.json", 93, true, "93% of the rated life is used"},
		{"smartctl-nvme-spare-low.json", 41, true, "available spare 5% is below the device's threshold 10%"},
		{"smartctl-ata-samsung.json", 92, true, "92% of the rated life"},
		{"smartctl-ata-intel-failing.json", 91, true, "Available_Reservd_Space (id 232) is at 9, at or below its threshold 10"},
	}
	for _, c := range cases {
		w, err := ParseSmart(fixture(t, c.file), 90)
		if err != nil {
			t.Errorf("%s: %v", c.file, err)
			continue
		}
		if w.PercentUsed == nil || *w.PercentUsed != c.used || w.Worn != c.worn || !strings.Contains(strings.Join(w.Reasons, "; "), c.reason) {
			t.Errorf("%s: used %v worn %v reasons %q; want %d %v %q", c.file, deref(w.PercentUsed), w.Worn, w.Reasons, c.used, c.worn, c.reason)
		}
	}
	if w, _ := ParseSmart(fixture(t, "smartctl-nvme-worn.json"), 95); w.Worn {
		t.Error("93% used is not worn at a 95% limit")
	}
	if _, err := ParseSmart([]byte(`{"device": {"type": "scsi"}}`), 90); err == nil {
		t.Error("no health data accepted")
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestSummarizePercentiles(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	p := summarize(lat, 5*time.Second, 0, 4096)
	if p.P10 != 11*time.Millisecond || p.P50 != 51*time.Millisecond || p.P99 != 100*time.Millisecond || p.Max != 100*time.Millisecond || p.PerSecond != 20 {
		t.Errorf("%+v", p)
	}
}

func TestAFlushCostNearTheBarIsMeasuredAgainAndTheLowerKept(t *testing.T) {
	ssd := KernelView{WriteCache: "write back"}
	hdd := KernelView{WriteCache: "write back", Rotational: true}
	probe := func(flush, empty time.Duration) *Probe {
		return &Probe{Writes: 200, FlushP10: flush, EmptyFlushP10: empty}
	}
	for name, tc := range map[string]struct {
		k    KernelView
		p    *Probe
		want bool
	}{
		// A lying emulated NVMe beside another VM: 83 µs against the bar of 80.
		"SSD liar lifted over the bar": {ssd, probe(372*time.Microsecond, 289*time.Microsecond), true},
		"SSD liar under the bar":       {ssd, probe(320*time.Microsecond, 289*time.Microsecond), false},
		"SSD that writes its cache":    {ssd, probe(2240*time.Microsecond, 497*time.Microsecond), false},
		"SSD at twice the bar":         {ssd, probe(460*time.Microsecond, 300*time.Microsecond), false},
		"HDD liar lifted over the bar": {hdd, probe(3*time.Millisecond, 800*time.Microsecond), true},
		"HDD that writes its cache":    {hdd, probe(9870*time.Microsecond, 800*time.Microsecond), false},
		"the kernel sends no flushes":  {KernelView{WriteCache: "write through"}, probe(372*time.Microsecond, 289*time.Microsecond), false},
		"not measured":                 {ssd, &Probe{SkipReason: "no scratch region"}, false},
	} {
		if got := tc.p.NearTheBar(tc.k); got != tc.want {
			t.Errorf("%s: NearTheBar = %v, want %v (cost %s)", name, got, tc.want, tc.p.FlushCost())
		}
	}
	first, second := probe(372*time.Microsecond, 289*time.Microsecond), probe(310*time.Microsecond, 285*time.Microsecond)
	if LowerFlushCost(first, second) != second || LowerFlushCost(second, first) != second {
		t.Errorf("LowerFlushCost kept the probe with the higher cost")
	}
	if v, _ := Judge(ssd, DeviceView{}, LowerFlushCost(first, second), false); v != Unsafe {
		t.Errorf("the liar measured again is %s, want Unsafe", v)
	}
}
