package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/flashcache/flashcache/operator/test/bench/results"
)

// The issues' targets (#10, #23, #25).
const (
	allFlashShareTarget  = 0.9
	flushCostShareTarget = 0.9
	bcacheAimRatio       = 1.3
	intervalCVTarget     = 0.10
	flushRatioTarget     = 0.9
	scaleVolumesTarget   = 1000
	reconcileSecsTarget  = 60.0
	peakRSSMiBTarget     = 200.0
	webhookP99MsTarget   = 10.0
	statusMet            = "met"
	statusMissed         = "missed"
	statusNotMeasured    = "not measured"
	statusNoTarget       = "no target"
	flashcacheConfigName = "`" + flashcacheDefaults + "`"
)

// target is one row of the targets table.
type target struct {
	goal, measured, status string
}

func verdict(ok bool) string {
	if ok {
		return statusMet
	}
	return statusMissed
}

// targets checks the targets against the data; a target whose data is missing is
// "not measured", never met.
func targets(in inputs, sets []oltpSet) []target {
	var out []target
	summaries := sets[0].summaries
	fc := medianTPS(summaries, flashcacheDefaults)
	tpsTarget := func(goal, other string, met func(r float64) bool) target {
		r := ratio(fc, medianTPS(summaries, other))
		if math.IsNaN(r) {
			return target{goal, dash, statusNotMeasured}
		}
		measured := fmt.Sprintf("%s× %s (%s vs %s TPS)", num(r, 2), other, num(fc, 1), num(medianTPS(summaries, other), 1))
		if met == nil {
			return target{goal, measured, statusNoTarget}
		}
		return target{goal, measured, verdict(met(r))}
	}
	out = append(out,
		tpsTarget(fmt.Sprintf("%s TPS ≥ %.1f × all-flash", flashcacheConfigName, allFlashShareTarget), allFlash,
			func(r float64) bool { return r >= allFlashShareTarget }),
		tpsTarget(flashcacheConfigName+" TPS above bcache-stock", bcacheStock, func(r float64) bool { return r > 1 }),
		tpsTarget(fmt.Sprintf("aim: %s TPS ≥ %.1f × bcache-stock", flashcacheConfigName, bcacheAimRatio), bcacheStock,
			func(r float64) bool { return r >= bcacheAimRatio }),
		tpsTarget(flashcacheConfigName+" TPS above lvmcache", lvmcache, func(r float64) bool { return r > 1 }),
		tpsTarget(flashcacheConfigName+" TPS over HDD only", hddOnly, nil),
		tpsTarget(fmt.Sprintf("the time-based flush costs ≤ %.0f %%: %s TPS ≥ %.1f × flushPeriod 0s", 100*(1-flushCostShareTarget),
			flashcacheConfigName, flushCostShareTarget), flashcacheFlushOff, func(r float64) bool { return r >= flushCostShareTarget }),
	)
	ageGoal := flashcacheConfigName + " oldest dirty data within its bound (flushPeriod + the pass's limit)"
	if s := find(summaries, flashcacheDefaults); s != nil && !math.IsNaN(s.oldestDirtySeconds) && s.config.DirtyAgeBoundSeconds > 0 {
		out = append(out, target{ageGoal, fmt.Sprintf("%s s oldest of %d markers; bound %s s", num(s.oldestDirtySeconds, 0), s.dirtyAgeMarkers,
			num(s.config.DirtyAgeBoundSeconds, 0)), verdict(s.oldestDirtySeconds <= s.config.DirtyAgeBoundSeconds)})
	} else {
		out = append(out, target{ageGoal, dash, statusNotMeasured})
	}

	cvGoal := fmt.Sprintf("%s 10-s TPS CV ≤ %.0f %%", flashcacheConfigName, 100*intervalCVTarget)
	if s := find(summaries, flashcacheDefaults); s != nil && !math.IsNaN(s.intervalCV) {
		out = append(out, target{cvGoal, percent(s.intervalCV) + " %", verdict(s.intervalCV <= intervalCVTarget)})
	} else {
		out = append(out, target{cvGoal, dash, statusNotMeasured})
	}

	flushGoal := fmt.Sprintf("flush efficiency ≥ %.1f", flushRatioTarget)
	if in.flush == nil || len(in.flush.Patterns) == 0 {
		out = append(out, target{flushGoal, dash, statusNotMeasured})
	}
	if in.flush != nil {
		for _, p := range in.flush.Patterns {
			out = append(out, target{flushGoal + ", " + inline(p.Name),
				fmt.Sprintf("%s (%s of %s MiB/s)", num(p.Ratio, 2), num(p.FlushMBps, 2), num(p.RequestBaselineMBps, 2)),
				verdict(p.Ratio >= flushRatioTarget)})
		}
	}
	if len(sets) > 1 {
		out = append(out, largerSetTargets(sets[1].summaries)...)
	} else {
		out = append(out, target{"larger-than-cache set: " + flashcacheConfigName + " above bcache-stock, lvmcache and dm-writecache", dash, statusNotMeasured})
	}
	return append(out, scaleTargets(in.scale)...)
}

// largerSetTargets are #25's for the data set larger than the cache: flashcache's defaults
// above every other cache, on median TPS and on HDD reads per transaction (fewer is better).
func largerSetTargets(summaries []oltpSummary) []target {
	var out []target
	fc := find(summaries, flashcacheDefaults)
	for _, other := range []string{bcacheStock, lvmcache, dmWritecache} {
		goal := fmt.Sprintf("larger-than-cache set: %s above %s on TPS and HDD reads / txn", flashcacheConfigName, other)
		o := find(summaries, other)
		if fc == nil || o == nil || math.IsNaN(fc.tps) || math.IsNaN(o.tps) {
			out = append(out, target{goal, dash, statusNotMeasured})
			continue
		}
		measured := fmt.Sprintf("%s vs %s TPS; %s vs %s HDD reads / txn", num(fc.tps, 1), num(o.tps, 1), num(fc.hddReadsPerTxn, 2), num(o.hddReadsPerTxn, 2))
		out = append(out, target{goal, measured, verdict(fc.tps > o.tps && fc.hddReadsPerTxn < o.hddReadsPerTxn)})
	}
	return out
}

// scaleTargets are the operator's. Reconcile time and memory only count at the size:
// a smaller run (the smoke test) measures them, but does not meet a target.
func scaleTargets(s *results.Scale) []target {
	reconcileGoal := fmt.Sprintf("%d volumes reconciled (all PVs) in ≤ %.0f s", scaleVolumesTarget, reconcileSecsTarget)
	rssGoal := fmt.Sprintf("operator peak RSS ≤ %.0f MiB", peakRSSMiBTarget)
	webhookGoal := fmt.Sprintf("eviction webhook p99 ≤ %.0f ms (server side)", webhookP99MsTarget)
	if s == nil {
		return []target{{reconcileGoal, dash, statusNotMeasured}, {rssGoal, dash, statusNotMeasured}, {webhookGoal, dash, statusNotMeasured}}
	}
	atSize := func(ok bool) string {
		if s.Volumes < scaleVolumesTarget {
			return statusNotMeasured
		}
		return verdict(ok)
	}
	volumes := fmt.Sprintf(" (%d volumes, %d nodes)", s.Volumes, s.Nodes)
	peakMiB := float64(s.OperatorPeakRSSBytes) / (1 << 20)
	out := []target{
		{reconcileGoal, num(s.TimeToAllPVsSeconds, 1) + " s" + volumes, atSize(s.TimeToAllPVsSeconds <= reconcileSecsTarget)},
		{rssGoal, mib(s.OperatorPeakRSSBytes) + " MiB" + volumes, atSize(peakMiB <= peakRSSMiBTarget)},
	}
	client := fmt.Sprintf("client-side eviction p50 %s ms, p99 %s ms", num(s.EvictionLatencyMs.P50, 1), num(s.EvictionLatencyMs.P99, 1))
	if w := s.WebhookServerLatencyMs; w != nil {
		out = append(out, target{webhookGoal, fmt.Sprintf("p99 %s ms (p50 %s ms); beside it: %s", num(w.P99, 2), num(w.P50, 2), client),
			verdict(w.P99 <= webhookP99MsTarget)})
	} else {
		out = append(out, target{webhookGoal, "server side not available; " + client, statusNotMeasured})
	}
	return out
}

func writeTargets(b *strings.Builder, ts []target) {
	b.WriteString("## Targets\n\n")
	b.WriteString("The performance targets, checked against the data above. A target without data is " +
		"\"not measured\".\n\n")
	var rows [][]string
	for _, t := range ts {
		rows = append(rows, []string{t.goal, t.measured, t.status})
	}
	table(b, []string{"Target", "Measured", "Status"}, "lll", rows)
}
