// Package safety judges whether a device's writes are durable when the kernel says they are:
// what the kernel believes about its write cache, what the device itself says, and how fast it
// really completes synchronous writes. A disk that acknowledges a flush it never did loses
// committed transactions at a power cut; writeback caching on top of it loses more.
package safety

import (
	"fmt"
	"time"
)

// Verdict is the outcome for one device or a volume.
type Verdict string

// Verdicts.
const (
	Safe    Verdict = "Safe"
	Unsafe  Verdict = "Unsafe"
	Unknown Verdict = "Unknown"
)

// KernelView is what the block layer believes (queue/*).
type KernelView struct {
	// WriteCache is "write back" (volatile cache: the kernel sends flushes) or "write through".
	WriteCache      string `json:"writeCache"`
	FUA             bool   `json:"fua"`
	Rotational      bool   `json:"rotational"`
	DiscardMaxBytes int64  `json:"discardMaxBytes"`
}

// DeviceView is what the device reports about its own volatile write cache.
type DeviceView struct {
	// Source names the command that answered (sdparm, hdparm, nvme); empty when none did.
	Source string `json:"source,omitempty"`
	// VolatileCache is whether the volatile write cache is on; nil when unknown.
	VolatileCache *bool `json:"volatileCache,omitempty"`
	// Changeable is whether it can be switched off; nil when unknown.
	Changeable *bool  `json:"changeable,omitempty"`
	Detail     string `json:"detail,omitempty"`
}

// Probe is a measured series of small writes, each flushed, then flushed again with nothing
// written (see SyncWriteProbe).
type Probe struct {
	Writes int `json:"writes"`
	// Started and Ended bound the probe's I/O: no other probe of the same disk runs in between.
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
	// Offset and Bytes locate the scratch region written (never user data nor spare area).
	Offset int64 `json:"offset"`
	Bytes  int64 `json:"bytes"`
	// P10..Max are of a durable write: the write and its flush.
	P10 time.Duration `json:"p10"`
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
	// PlainP10 and PlainP50 are of the writes alone.
	PlainP10 time.Duration `json:"plainP10"`
	PlainP50 time.Duration `json:"plainP50"`
	// FlushP10 and FlushP50 are of the flush after each write; EmptyFlushP10 and EmptyFlushP50 of
	// the flush after it, with nothing to write: a round trip to the device. The judgement reads
	// the fastest tenths: a busy host (CPU contention, scheduling, other I/O) only ever adds
	// latency, so the fastest show what the device does. A lying disk's sync writes on a loaded
	// host once read a p10 of 4.1 ms against 1.9 ms for plain writes, over every bar below that
	// compared writes with writes; its flushes cost what its round trips do, however slow.
	FlushP10      time.Duration `json:"flushP10"`
	FlushP50      time.Duration `json:"flushP50"`
	EmptyFlushP10 time.Duration `json:"emptyFlushP10"`
	EmptyFlushP50 time.Duration `json:"emptyFlushP50"`
	PerSecond     float64       `json:"perSecond"`
	SkipReason    string        `json:"skipReason,omitempty"`
}

// FlushCost is what a flush after a write costs over a flush with nothing to write.
func (p *Probe) FlushCost() time.Duration { return p.FlushP10 - p.EmptyFlushP10 }

// NearTheBar says whether the probe's flush cost passed the bar Judge holds it to by less than
// the bar itself. A busy host adds latency to the flushes after writes as well as to the empty
// ones, and can lift a lying cache's cost over the bar (an emulated liar, 20-35 µs alone,
// measured 83 µs against the SSD's 80 beside another VM); a device that does write its cache
// costs more than twice the bar (the emulated honest NVMe 180-300 µs, a 7200 rpm disk 8-10 ms).
// Such a probe is taken again, and the lowest cost kept (LowerFlushCost).
func (p *Probe) NearTheBar(k KernelView) bool {
	if p == nil || p.Writes == 0 || p.FlushP10 == 0 || k.WriteCache != "write back" {
		return false
	}
	bar := SolidStateFlushCostFloor
	if k.Rotational {
		bar = FlushCostFloor
	}
	cost := p.FlushCost()
	return cost >= bar && cost < 2*bar
}

// LowerFlushCost is the probe of a and b whose flush cost is lower: contention only ever adds
// to it, so the lower is nearer what the device does.
func LowerFlushCost(a, b *Probe) *Probe {
	if b.FlushCost() < a.FlushCost() {
		return b
	}
	return a
}

// Thresholds of the judgement.
const (
	// RotationalFloor: a 7200 rpm platter turns once in 8.3 ms and 15k rpm in 4 ms; a write
	// that must reach it waits about half a turn on average. Sync writes that a rotating disk
	// completes in under a millisecond did not reach the platter.
	RotationalFloor = time.Millisecond
	// FlushCostFloor: a flush that must write a block makes an honest rotating disk wait for
	// the sector to come round under the head, most of a turn after back-to-back writes: 4 ms at
	// 15k rpm, 8.3 ms at 7200 rpm. A flush that costs less than half the fastest turn over an
	// empty flush did not wait for a platter.
	FlushCostFloor = 2 * time.Millisecond
	// SolidStateFlushCostFloor: an SSD whose volatile cache holds a written block must program
	// it into flash before its flush completes, hundreds of microseconds for a page, so a flush
	// after a write costs at least that much more than an empty one. The test VM's plain
	// emulated NVMe, whose flush is the host's fdatasync, measured 180-300 µs; its emulated
	// liars 20-35 µs; the bar sits between them. A cache whose flushes cost less acknowledges
	// them without writing, or is power-loss protected, which timing cannot tell apart and
	// safety.trustWriteCache says.
	SolidStateFlushCostFloor = 80 * time.Microsecond
)

// Judge decides one device from what was observed. trusted says the spec vouches that a volatile
// cache is battery or flash backed.
func Judge(k KernelView, d DeviceView, p *Probe, trusted bool) (Verdict, []string) {
	var reasons []string
	volatileOn := d.VolatileCache != nil && *d.VolatileCache
	kernelSendsFlushes := k.WriteCache == "write back"

	if volatileOn && !kernelSendsFlushes {
		return Unsafe, []string{fmt.Sprintf("the device's volatile write cache is on (%s) but the kernel believes it writes through, so it never sends flushes", d.Source)}
	}
	if !kernelSendsFlushes && d.VolatileCache == nil {
		reasons = append(reasons, "the kernel sees no volatile write cache; the device did not say")
	}
	if !kernelSendsFlushes && d.VolatileCache != nil && !*d.VolatileCache {
		reasons = append(reasons, fmt.Sprintf("no volatile write cache (%s)", d.Source))
	}
	if kernelSendsFlushes {
		reasons = append(reasons, "volatile write cache on; the kernel sends flushes")
	}
	if p == nil || p.Writes == 0 {
		skip := "not measured"
		if p != nil && p.SkipReason != "" {
			skip = p.SkipReason
		}
		reasons = append(reasons, "sync-write probe: "+skip)
		switch {
		case kernelSendsFlushes && trusted:
			return Safe, append(reasons, "its volatile write cache is trusted as battery or flash backed (safety.trustWriteCache)")
		case kernelSendsFlushes:
			return Unknown, reasons
		}
		return Safe, reasons
	}
	reasons = append(reasons, fmt.Sprintf("write and flush: p10 %s, p50 %s, p99 %s, %.0f/s; the flush p10 %s, an empty flush p10 %s, the write p10 %s", round(p.P10), round(p.P50), round(p.P99), p.PerSecond, round(p.FlushP10), round(p.EmptyFlushP10), round(p.PlainP10)))
	// With a volatile cache, a rotating disk's flush of a written block waits for the platter:
	// about half a turn or more over a flush with nothing to write. A cache that answers flushes
	// at once makes both the same round trip.
	fast := k.Rotational && p.P10 < RotationalFloor
	noFlushCost := k.Rotational && kernelSendsFlushes && p.FlushP10 > 0 && p.FlushCost() < FlushCostFloor
	noFlashFlushCost := !k.Rotational && kernelSendsFlushes && p.FlushP10 > 0 && p.FlushCost() < SolidStateFlushCostFloor
	switch {
	case (fast || noFlushCost) && trusted:
		return Safe, append(reasons, "a rotating disk completes flushes faster than its platters turn: its write cache is trusted as battery or flash backed (safety.trustWriteCache)")
	case fast:
		return Unsafe, append(reasons, fmt.Sprintf("a rotating disk completes a write and its flush in %s (fastest tenth), faster than its platters turn: its write cache is lying or battery backed (set safety.trustWriteCache if it is backed)", round(p.P10)))
	case noFlushCost:
		return Unsafe, append(reasons, fmt.Sprintf("flushes add %s to a write on a rotating disk (fastest tenth), over an empty flush, less than its platters need: its write cache acknowledges flushes it does not do, or is battery backed (set safety.trustWriteCache if it is backed)", round(p.FlushCost())))
	case noFlashFlushCost && trusted:
		return Safe, append(reasons, "an SSD's flushes cost nothing: its write cache is trusted as power-loss protected (safety.trustWriteCache)")
	case noFlashFlushCost:
		return Unsafe, append(reasons, fmt.Sprintf("flushes add %s to a write on an SSD (fastest tenth), less than programming flash takes: its write cache acknowledges flushes it does not do, or is power-loss protected (set safety.trustWriteCache if it is)", round(p.FlushCost())))
	}
	return Safe, reasons
}

// Combine is the verdict of a volume: the worst of its devices.
func Combine(verdicts ...Verdict) Verdict {
	out := Safe
	for _, v := range verdicts {
		switch {
		case v == Unsafe:
			return Unsafe
		case v == Unknown:
			out = Unknown
		}
	}
	return out
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(100 * time.Nanosecond)
	}
}
