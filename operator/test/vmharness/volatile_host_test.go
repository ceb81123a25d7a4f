//go:build vm

package vmharness

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestVolatileCachesOnTheHost checks the nbdkit side of volatile disks without a VM (in a
// second or two): what reaches the backing file, when, and what a power cut leaves. It is
// tagged vm because it needs the host tools hack/install-vm-deps.sh installs.
func TestVolatileCachesOnTheHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	work := t.TempDir()
	disks, err := prepareDisks([]Disk{
		{Kind: HDD, Serial: "honest", Size: 64 << 20, Cache: CacheVolatileHonest},
		{Kind: HDD, Serial: "liar", Size: 64 << 20, Cache: CacheVolatileLying},
	}, work)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range disks {
		if err := ensureBackingFile(d); err != nil {
			t.Fatal(err)
		}
	}
	vs, err := newVolatileSet(disks, work)
	if err != nil {
		t.Fatal(err)
	}
	defer vs.stop()
	if err := vs.powerOn(ctx); err != nil {
		t.Fatal(err)
	}
	honest, liar := vs.disks[0], vs.disks[1]

	block := func(b byte) []byte { return bytes.Repeat([]byte{b}, 4096) }
	zero := block(0)
	dial := func(v *volatileDisk) *nbdConn {
		t.Helper()
		c, err := dialNBD(ctx, v.guestSocket())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	write := func(c *nbdConn, off uint64, data []byte) {
		t.Helper()
		if err := c.write(ctx, off, data, false); err != nil {
			t.Fatal(err)
		}
	}
	flush := func(c *nbdConn) time.Duration {
		t.Helper()
		start := time.Now()
		if err := c.flush(ctx); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	// onDisk is what the backing file holds: what survives a power cut.
	onDisk := func(v *volatileDisk, off int64) []byte {
		t.Helper()
		f, err := os.Open(v.disk.Path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 4096)
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		return b
	}
	seen := func(c *nbdConn, off uint64) []byte {
		t.Helper()
		b, err := c.read(ctx, off, 4096)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	expect := func(what string, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Errorf("%s: got %#x..., want %#x...", what, got[:4], want[:4])
		}
	}

	h, l := dial(honest), dial(liar)
	// Each disk's flush is timed a few times after one 4 KiB write: the honest one must never be
	// faster than the delay it models, and the liar is judged by its fastest, because a host busy
	// with three guests can stall any single round trip past the delay (CI at bc4269a: 9.3 ms).
	const flushSamples = 5
	honestFlush, liarFlush := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range flushSamples {
		write(h, 4<<20, block(0xb1))
		honestFlush = min(honestFlush, flush(h))
		write(l, 0, block(0xc1))
		liarFlush = min(liarFlush, flush(l))
	}
	write(h, 0, block(0xa1))
	// FUA on the honest disk writes through; on the liar it is dropped like a flush.
	if err := h.write(ctx, 8<<20, block(0xd1), true); err != nil {
		t.Fatal(err)
	}
	if err := l.write(ctx, 8<<20, block(0xd2), true); err != nil {
		t.Fatal(err)
	}
	t.Logf("fastest of %d flushes after one 4 KiB write: honest %s, lying %s", flushSamples, honestFlush.Round(10*time.Microsecond), liarFlush.Round(time.Microsecond))
	if honestFlush < VolatileFlushDelay {
		t.Errorf("honest flush took %s, less than the %s it models", honestFlush, VolatileFlushDelay)
	}
	// Against the delay an honest flush models, not a fixed time: on a host busy with three
	// guests the liar's round trip alone took 1.5 ms (warm make test at 4f1930a).
	if liarFlush > VolatileFlushDelay/2 {
		t.Errorf("lying flush took %s, want well under the %s an honest flush takes", liarFlush, VolatileFlushDelay)
	}

	expect("honest disk serves its unflushed write", seen(h, 0), block(0xa1))
	expect("liar serves its flushed write", seen(l, 0), block(0xc1))
	expect("honest backing file before the cut, unflushed", onDisk(honest, 0), zero)
	expect("honest backing file before the cut, flushed", onDisk(honest, 4<<20), block(0xb1))
	expect("honest backing file before the cut, FUA", onDisk(honest, 8<<20), block(0xd1))
	expect("lying backing file before the cut, flushed", onDisk(liar, 0), zero)
	expect("lying backing file before the cut, FUA", onDisk(liar, 8<<20), zero)
	_ = h.close()
	_ = l.close()

	vs.powerCut()
	if err := vs.powerOn(ctx); err != nil {
		t.Fatal(err)
	}
	h, l = dial(honest), dial(liar)
	expect("honest after the cut, unflushed", seen(h, 0), zero)
	expect("honest after the cut, flushed", seen(h, 4<<20), block(0xb1))
	expect("honest after the cut, FUA", seen(h, 8<<20), block(0xd1))
	expect("liar after the cut, flushed", seen(l, 0), zero)
	expect("liar after the cut, FUA", seen(l, 8<<20), zero)

	// The liar keeps what was written back, and loses what came after.
	write(l, 0, block(0xe1))
	flush(l)
	if err := vs.writeBack(ctx); err != nil {
		t.Fatal(err)
	}
	expect("liar backing file after a write-back", onDisk(liar, 0), block(0xe1))
	write(l, 4096, block(0xe2))
	flush(l)
	_ = h.close()
	_ = l.close()
	vs.powerCut()
	if err := vs.powerOn(ctx); err != nil {
		t.Fatal(err)
	}
	expect("liar after a write-back and a cut, written back", onDisk(liar, 0), block(0xe1))
	expect("liar after a write-back and a cut, written after", onDisk(liar, 4096), zero)

	// A clean power-off writes both caches back, unflushed writes included.
	h, l = dial(honest), dial(liar)
	write(h, 12<<20, block(0xf1))
	write(l, 12<<20, block(0xf2))
	flush(l)
	_ = h.close()
	_ = l.close()
	if err := vs.powerOff(ctx); err != nil {
		t.Fatal(err)
	}
	expect("honest after a clean power-off", onDisk(honest, 12<<20), block(0xf1))
	expect("liar after a clean power-off", onDisk(liar, 12<<20), block(0xf2))
	for _, s := range []*nbdServer{honest.cache, liar.cache, liar.front} {
		if s.running() {
			t.Errorf("nbdkit for %s still runs after powerOff", s.name)
		}
		if log, _ := os.ReadFile(s.log); bytes.Contains(log, []byte("error")) {
			t.Errorf("%s:\n%s", filepath.Base(s.log), log)
		}
	}
}
