package agent

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/internal/safety"
)

// Metrics are the agent's Prometheus series, one set per volume of the node.
type Metrics struct {
	dirty, bypassed, writebackRate                              *prometheus.GaugeVec
	dirtyAge                                                    *dirtyAges
	flushRemaining                                              *prometheus.GaugeVec
	hitRatio, available, wear, flushing, passActive, writeLimit *prometheus.GaugeVec
	state, ioErrors                                             *prometheus.GaugeVec
	flushPeriod, maxWear, verdict, writebackRefused             *prometheus.GaugeVec
	errors, runs, passes                                        *prometheus.CounterVec
	commands, commandSeconds                                    *prometheus.CounterVec
}

// verdicts are the durability check's verdicts; one series each, 1 for the volume's current one.
var verdicts = []safety.Verdict{safety.Safe, safety.Unsafe, safety.Unknown}

// bcacheStates are the values of bcache's state file; one series each, 1 for the current one.
var bcacheStates = []string{"no cache", "clean", "dirty", "inconsistent"}

// NewMetrics registers the agent's series with reg (controller-runtime's registry in the agent).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "flashcache", Name: name, Help: help}, append([]string{"volume"}, labels...))
		reg.MustRegister(g)
		return g
	}
	m := &Metrics{
		dirty:          gauge("volume_dirty_bytes", "Data on the cache device only, not yet on the backing disk."),
		dirtyAge:       newDirtyAges(reg, time.Now),
		hitRatio:       gauge("volume_cache_hit_ratio_percent", "Share of reads served from the cache since the device was registered."),
		bypassed:       gauge("volume_bypassed_bytes", "I/O that went around the cache (sequential, congested) since the device was registered."),
		available:      gauge("volume_cache_available_percent", "Share of the cache set neither dirty nor pinned."),
		writebackRate:  gauge("volume_writeback_rate_bytes_per_second", "The pace bcache's writeback aims at now."),
		state:          gauge("volume_state", "bcache's state of the volume: 1 for the current one.", "state"),
		wear:           gauge("volume_cache_wear_percent", "The cache device's estimate of its life used."),
		flushing:       gauge("volume_flushing", "1 while a blocking flush runs."),
		flushRemaining: gauge("volume_flush_remaining_bytes", "Dirty data a running blocking flush has still to write."),
		passActive:     gauge("volume_flush_pass_active", "1 while a flush pass (every half flushPeriod, or asked for) writes back in writeback mode."),
		writeLimit:     gauge("volume_write_limit_bytes", "The limit on the volume's writers, in bytes a second, set while flush passes lag (spec.flushThrottle Proportional); 0 for none."),
		ioErrors: gauge("volume_io_errors", "I/O errors bcache counted on the volume's cache or backing device since it registered it; "+
			"at 8 (cache) or 64 (backing) it gives the device up.", "device"),
		flushPeriod: gauge("volume_flush_period_seconds", "The spec's flushPeriod: dirty data older than this breaks its promise (0: no periodic flush)."),
		maxWear:     gauge("volume_max_wear_percent", "The spec's safety.maxWearPercent: past it the cache counts as worn and, under Enforce, is held in writethrough."),
		verdict:     gauge("volume_safety_verdict", "The durability check's verdict on the volume's devices: 1 for the current one.", "verdict"),
		writebackRefused: gauge("volume_writeback_refused", "1 when the spec asks for writeback and the volume is held in writethrough "+
			"because its durability check (verdict or wear, under the spec's policy) refuses it, or has not run yet."),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "flashcache", Name: "engine_errors_total",
			Help: "Engine runs that failed, by operation."}, []string{"volume", "operation"}),
	}
	m.passes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "flashcache", Name: "volume_flush_passes_total",
		Help: "Flush passes that ended, by how: in writeback, or finished by the blocking flush in writethrough " +
			"(the backing disk did not write back within the pass's limit what was dirty at its start)."}, []string{"volume", "outcome"})
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "flashcache", Name: "engine_runs_total",
		Help: "Engine runs on a volume (a build, an adoption or a refresh of its status), failed or not."}, []string{"volume"})
	m.commands = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "flashcache", Name: "disk_commands_total",
		Help: "Commands the agent ran on the node's disks (LVM's reports, wipefs, bcache-super-show, ...), by command."}, []string{"command"})
	m.commandSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "flashcache", Name: "disk_command_seconds_total",
		Help: "Time the agent's disk commands took, by command."}, []string{"command"})
	reg.MustRegister(m.errors, m.runs, m.passes, m.commands, m.commandSeconds)
	return m
}

// Ran counts a command the agent ran (blockdev.Runner's Ran).
func (m *Metrics) Ran(command string, took time.Duration) {
	if m != nil {
		m.commands.WithLabelValues(command).Inc()
		m.commandSeconds.WithLabelValues(command).Add(took.Seconds())
	}
}

// EngineRun counts a run of the engine on a volume.
func (m *Metrics) EngineRun(volume string) {
	if m != nil {
		m.runs.WithLabelValues(volume).Inc()
	}
}

// Observe records what the engine reported about a volume after a run, beside what its spec
// promises (the flush period, the wear limit), which the alert rules compare it with.
func (m *Metrics) Observe(v engine.Volume, res *engine.Result, wearPercent *int32) {
	if m == nil || res == nil || res.Status == nil {
		return
	}
	volume, s := v.Name, res.Status
	m.flushPeriod.WithLabelValues(volume).Set(v.Spec.EffectiveFlushPeriod().Seconds())
	m.maxWear.WithLabelValues(volume).Set(float64(v.Spec.Safety.EffectiveMaxWearPercent()))
	if c := res.Check; c != nil {
		for _, verdict := range verdicts {
			m.verdict.WithLabelValues(volume, string(verdict)).Set(boolGauge(c.Verdict == verdict))
		}
	}
	m.writebackRefused.WithLabelValues(volume).Set(boolGauge(engine.WritebackRefused(v, res.Check)))
	m.dirty.WithLabelValues(volume).Set(float64(s.DirtyBytes))
	m.dirtyAge.observe(volume, s)
	m.hitRatio.WithLabelValues(volume).Set(float64(s.HitRatioPercent))
	m.bypassed.WithLabelValues(volume).Set(float64(s.BypassedBytes))
	m.available.WithLabelValues(volume).Set(float64(s.CacheAvailablePercent))
	m.writebackRate.WithLabelValues(volume).Set(float64(s.WritebackRateBytes))
	for _, st := range bcacheStates {
		m.state.WithLabelValues(volume, st).Set(boolGauge(st == s.State))
	}
	if wearPercent != nil {
		m.wear.WithLabelValues(volume).Set(float64(*wearPercent))
	}
	m.ioErrors.WithLabelValues(volume, "cache").Set(float64(s.CacheIOErrors))
	m.ioErrors.WithLabelValues(volume, "backing").Set(float64(s.BackingIOErrors))
}

// Flushing marks a blocking flush as running or done.
func (m *Metrics) Flushing(volume string, on bool) {
	if m == nil {
		return
	}
	if !on {
		m.flushRemaining.WithLabelValues(volume).Set(0)
	}
	m.flushing.WithLabelValues(volume).Set(boolGauge(on))
}

// Pass records whether a flush pass runs on the volume.
func (m *Metrics) Pass(volume string, p *engine.PassReport) {
	if m == nil || p == nil {
		return
	}
	m.passActive.WithLabelValues(volume).Set(boolGauge(p.Active))
	m.writeLimit.WithLabelValues(volume).Set(float64(p.WriteLimitBytes))
	// Both outcomes exist from the volume's first round: increase() over a series born at its
	// first pass would miss that pass.
	inWriteback, inWritethrough := m.passes.WithLabelValues(volume, passOutcomeWriteback), m.passes.WithLabelValues(volume, passOutcomeWritethrough)
	switch {
	case p.FinishedInWritethrough:
		inWritethrough.Inc()
	case p.Ended:
		inWriteback.Inc()
	}
}

// The outcome label of flashcache_volume_flush_passes_total.
const (
	passOutcomeWriteback    = "writeback"
	passOutcomeWritethrough = "writethrough"
)

// FlushProgress records the dirty data a running flush still has to write.
func (m *Metrics) FlushProgress(volume string, remaining int64) {
	if m != nil {
		m.flushRemaining.WithLabelValues(volume).Set(float64(remaining))
	}
}

// EngineError counts a failed engine run.
func (m *Metrics) EngineError(volume, operation string) {
	if m != nil {
		m.errors.WithLabelValues(volume, operation).Inc()
	}
}

// Forget drops a volume's series once it is gone from the node.
func (m *Metrics) Forget(volume string) {
	if m == nil {
		return
	}
	m.dirtyAge.forget(volume)
	for _, g := range []*prometheus.GaugeVec{m.dirty, m.hitRatio, m.bypassed, m.available, m.writebackRate, m.state, m.wear,
		m.flushing, m.flushRemaining, m.passActive, m.writeLimit, m.ioErrors, m.flushPeriod, m.maxWear, m.verdict, m.writebackRefused} {
		g.DeletePartialMatch(prometheus.Labels{"volume": volume})
	}
	m.errors.DeletePartialMatch(prometheus.Labels{"volume": volume})
	m.runs.DeletePartialMatch(prometheus.Labels{"volume": volume})
	m.passes.DeletePartialMatch(prometheus.Labels{"volume": volume})
}

// dirtyAges exports flashcache_volume_dirty_age_seconds, worked out when scraped from the last
// time each volume was seen clean. A gauge set by the rounds would stand still while a round is
// busy, and a pass's writethrough finish keeps its round for as long as the backing disk needs
// (minutes on a slow one): the age would read short exactly while the data is overdue.
type dirtyAges struct {
	desc *prometheus.Desc
	now  func() time.Time
	mu   sync.Mutex
	// since holds each volume's last clean time; nil for a volume clean now.
	since map[string]*time.Time
}

func newDirtyAges(reg prometheus.Registerer, now func() time.Time) *dirtyAges {
	d := &dirtyAges{now: now, since: map[string]*time.Time{},
		desc: prometheus.NewDesc("flashcache_volume_dirty_age_seconds", "A bound on the age of the oldest dirty data: time since the volume was last seen clean, "+
			"as of the scrape (0 when clean; absent while dirty and not yet seen clean).", []string{"volume"}, nil)}
	reg.MustRegister(d)
	return d
}

func (d *dirtyAges) observe(volume string, s *engine.Status) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case s.DirtySince != nil:
		since := *s.DirtySince
		d.since[volume] = &since
	case !s.Dirty():
		d.since[volume] = nil
	default:
		delete(d.since, volume)
	}
}

func (d *dirtyAges) forget(volume string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.since, volume)
}

func (d *dirtyAges) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d *dirtyAges) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	for volume, since := range d.since {
		age := 0.0
		if since != nil {
			age = now.Sub(*since).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, age, volume)
	}
}

// boolGauge is a 0/1 series' value.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
