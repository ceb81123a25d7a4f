package safety

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Scratch regions for the probe: never user data, never the SSD's spare area.
const (
	// CacheScratchOffset..+CacheScratchBytes lies between the GPT (17 KiB) and the cache
	// partition, which starts at 1 MiB.
	CacheScratchOffset = 512 << 10
	CacheScratchBytes  = 512 << 10
	// BackingScratchOffset..+BackingScratchBytes lies between the bcache superblock (4 KiB) and
	// the data, which the engine starts at BackingDataOffsetSectors.
	BackingScratchOffset = 1 << 20
	BackingScratchBytes  = 1 << 20
	// BackingDataOffsetSectors is where make-bcache is told to start a backing device's data
	// (2 MiB), leaving the scratch region free for the life of the volume.
	BackingDataOffsetSectors = 4096
)

// ProbeLimits bounds a probe.
type ProbeLimits struct {
	Writes   int
	Duration time.Duration
}

// DefaultProbeLimits: enough writes for a p99, and never more than a few seconds of I/O.
var DefaultProbeLimits = ProbeLimits{Writes: 200, Duration: 3 * time.Second}

const probeBlock = 4096

// SyncWriteProbe measures what a flush costs on dev, cycling through [offset, offset+size): each
// round writes one 4 KiB block with O_DIRECT (into the device's volatile cache, if it has one),
// flushes it (fdatasync on a block device always sends the device a flush), and flushes again
// with nothing written. The second flush is a bare round trip to the device; what the first costs
// over it is the device writing its cache to stable media. The three are interleaved so that a
// busy host, which only ever adds latency, weighs on all of them alike: a lying disk's flush
// after a write costs what its empty flush does, however slow both get.
func SyncWriteProbe(ctx context.Context, dev string, offset, size int64, limits ProbeLimits) (*Probe, error) {
	if offset%probeBlock != 0 || size < probeBlock {
		return nil, fmt.Errorf("probe region %d+%d is not aligned to %d", offset, size, probeBlock)
	}
	f, err := os.OpenFile(dev, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s for the write probe: %w", dev, err)
	}
	defer func() { _ = f.Close() }()
	// O_DIRECT needs an aligned buffer: an anonymous mapping is page aligned.
	buf, err := unix.Mmap(-1, 0, probeBlock, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("allocating the probe buffer: %w", err)
	}
	defer func() { _ = unix.Munmap(buf) }()
	for i := range buf {
		buf[i] = byte(i * 7)
	}

	blocks := size / probeBlock
	var plain, flush, emptyFlush, durable []time.Duration
	start := time.Now()
	for i := 0; i < limits.Writes && time.Since(start) < limits.Duration; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := time.Now()
		if _, err := f.WriteAt(buf, offset+int64(i)%blocks*probeBlock); err != nil {
			return nil, fmt.Errorf("write to %s: %w", dev, err)
		}
		written := time.Now()
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return nil, fmt.Errorf("flush of %s: %w", dev, err)
		}
		flushed := time.Now()
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return nil, fmt.Errorf("flush of %s: %w", dev, err)
		}
		plain = append(plain, written.Sub(t))
		flush = append(flush, flushed.Sub(written))
		emptyFlush = append(emptyFlush, time.Since(flushed))
		durable = append(durable, flushed.Sub(t))
	}
	p := summarize(durable, time.Since(start), offset, size)
	p.Started, p.Ended = start, time.Now()
	w, fl, ef := summarize(plain, 0, offset, size), summarize(flush, 0, offset, size), summarize(emptyFlush, 0, offset, size)
	p.PlainP10, p.PlainP50 = w.P10, w.P50
	p.FlushP10, p.FlushP50 = fl.P10, fl.P50
	p.EmptyFlushP10, p.EmptyFlushP50 = ef.P10, ef.P50
	return p, nil
}

func summarize(lat []time.Duration, total time.Duration, offset, size int64) *Probe {
	p := &Probe{Writes: len(lat), Offset: offset, Bytes: size}
	if len(lat) == 0 {
		return p
	}
	sorted := append([]time.Duration(nil), lat...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	p.P10 = sorted[len(sorted)/10]
	p.P50 = sorted[len(sorted)/2]
	p.P99 = sorted[(len(sorted)*99)/100]
	p.Max = sorted[len(sorted)-1]
	if total > 0 {
		p.PerSecond = float64(len(lat)) / total.Seconds()
	}
	return p
}
