package blockdev

import "testing"

func TestParseIOStatWrites(t *testing.T) {
	stat := "8:16 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n254:0 rbytes=4096 wbytes=1048576 rios=1 wios=256 dbytes=0 dios=0\n"
	if n, ok := ParseIOStatWrites(stat, "254:0"); !ok || n != 1048576 {
		t.Errorf("254:0: got %d %v, want 1048576", n, ok)
	}
	if _, ok := ParseIOStatWrites(stat, "254:1"); ok {
		t.Error("254:1 is not in io.stat, found it")
	}
}

func TestParseIOMaxWriteLimit(t *testing.T) {
	ioMax := "8:16 rbps=max wbps=1000 riops=max wiops=max\n254:0 rbps=max wbps=2097152 riops=max wiops=max\n"
	if got := ParseIOMaxWriteLimit(ioMax, "254:0"); got != 2097152 {
		t.Errorf("254:0: got %d", got)
	}
	if got := ParseIOMaxWriteLimit("254:0 rbps=max wbps=max riops=100 wiops=max\n", "254:0"); got != 0 {
		t.Errorf("wbps=max: got %d, want 0", got)
	}
	if got := ParseIOMaxWriteLimit("", "254:0"); got != 0 {
		t.Errorf("empty io.max: got %d, want 0", got)
	}
}

func TestIOMaxWriteLimitLine(t *testing.T) {
	if got := IOMaxWriteLimitLine("254:0", 3<<20); got != "254:0 wbps=3145728" {
		t.Errorf("got %q", got)
	}
	if got := IOMaxWriteLimitLine("254:0", 0); got != "254:0 wbps=max" {
		t.Errorf("got %q", got)
	}
}
