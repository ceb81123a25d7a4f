//go:build vm

package enginevm

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// The age of dirty data, measured where it matters: on the raw backing disk. A marker block is
// written through the volume, other writes keep the volume busy and dirty, and the backing disk
// is read directly at the marker's offset until the marker is there. `flashcache node run` (the
// loop a host runs, the agent's twin) is restarted in between, at a moment when a schedule kept
// in memory would start its period again and miss the bound.
const (
	// agePeriod: a pass every 40 s (half the period), each with a minute's limit (the floor).
	agePeriod   = 80 * time.Second
	ageInterval = 5 * time.Second
	// ageRestartAt is when the loop is restarted, counted from its first start: a schedule that
	// forgot the interval would start its pass no earlier than ageRestartAt + agePeriod/2.
	ageRestartAt = 25 * time.Second
	// ageDirtyMiB of scattered 4 KiB writes keep the volume dirty: below the dirty threshold,
	// bcache writes them back at its floor rate, a key a second, in the order of their offsets, so
	// the marker past them reaching the disk is the pass's doing (the log says when it was not).
	// Few enough that the pass's pace (this much over three quarters of its limit) is a small
	// part of what the backing disk takes at full speed, so the two are told apart.
	ageDirtyMiB = 4
	// ageMarkerMiB is where the marker goes, past the scattered writes.
	ageMarkerMiB = 3 << 10
)

// ageScript runs the whole measurement in the guest and prints one JSON object: guest times in
// seconds, and the cache modes seen while polling.
const ageScript = `set -eu
cfg=/root/a-period.yaml
dev=$(basename $(readlink -f /dev/flashcache/vol-a)); bc=/sys/block/$dev/bcache
rm -f /var/lib/flashcache/state/vol-a.json /root/run.log
now() { date +%%s.%%N; }
` + scrapeMetrics + `
start_loop() { nohup flashcache node run --config $cfg --interval %[1]ds --metrics-bind-address 127.0.0.1:8090 >>/root/run.log 2>&1 & echo $! >/root/run.pid; }
writer=""
trap 'kill $writer 2>/dev/null || true; [ -f /root/run.pid ] && kill $(cat /root/run.pid) 2>/dev/null || true' EXIT
loop_started=$(now); start_loop
# The loop's first round sees the volume clean, which the exported age counts from: a writer
# that came first, on a loaded host, left it with no age to export.
for i in $(seq 100); do [ -s /var/lib/flashcache/state/vol-a.json ] && break; sleep 0.2; done
# Busy, so bcache never sees the set idle (idle, it writes back at full speed by itself).
( while :; do dd if=/dev/urandom of=/dev/flashcache/vol-a bs=4k count=1 seek=$(( (RANDOM * 32768 + RANDOM) %% 262144 )) oflag=direct status=none; sleep 2; done ) &
writer=$!
# What the backing disk has written (sectors), and the writeback rate floor and target, over time.
hdd=$(basename $(readlink -f %[4]s))
sample() { echo "$(now) $(awk '{print $7}' /sys/block/$hdd/stat) $(cat $bc/writeback_rate_minimum) $(cat $bc/writeback_percent)" >> /root/age-samples; }
rm -f /root/age-samples
fio --name=scatter --filename=/dev/flashcache/vol-a --rw=randwrite --bs=4k --direct=1 --size=2g --io_size=%[2]dm --randrepeat=0 --output=/dev/null
head -c 4096 /dev/urandom > /root/marker
dd if=/root/marker of=/dev/flashcache/vol-a bs=4k seek=$(( %[3]d * 256 )) oflag=direct conv=fsync status=none
marker_written=$(now)
want=$(md5sum < /root/marker | cut -d' ' -f1)
offset=$(( $(bcache-super-show %[4]s | awk '/dev.data.first_sector/ {print $2}') * 512 + %[3]d * 1048576 ))
restarted=""; arrived=""; modes=""; bounds_before=0; bounds_after=0; short=""
before() { awk -v a="$(now)" -v b="$1" 'BEGIN { exit !(a < b) }'; }
while before "$(awk -v s=$loop_started 'BEGIN { printf "%%.3f", s + %[5]d }')"; do
	if [ -z "$restarted" ] && ! before "$(awk -v s=$loop_started 'BEGIN { printf "%%.3f", s + %[6]d }')"; then
		kill -TERM $(cat /root/run.pid); while kill -0 $(cat /root/run.pid) 2>/dev/null; do sleep 0.1; done
		restarted=$(now); start_loop
	fi
	mode=$(sed 's/.*\[\(.*\)\].*/\1/' $bc/cache_mode); modes="$modes $mode"
	sample
	got=$(dd if=%[4]s bs=4096 skip=$(( offset / 4096 )) count=1 iflag=direct status=none | md5sum | cut -d' ' -f1)
	if [ "$got" = "$want" ]; then arrived=$(now); break; fi
	# The loop's bound on the age of dirty data, against the marker's age as the loop's last
	# round saw it: never less.
	bound=$(scrape_metrics 8090 |
		awk '/^flashcache_volume_dirty_age_seconds\{volume="vol-a"\}/ {print $2}')
	if [ -n "$bound" ]; then
		if [ -z "$restarted" ]; then bounds_before=$((bounds_before + 1)); else bounds_after=$((bounds_after + 1)); fi
		awk -v b="$bound" -v w="$marker_written" -v n="$(now)" 'BEGIN { exit !(b < n - w - %[1]d - 2) }' && short="$short $bound@$(awk -v w="$marker_written" -v n="$(now)" 'BEGIN { printf "%%.0f", n - w }')"
	fi
	sleep 2
done
# The writer's work is done once the marker is on the disk. Left on, it kept the volume dirty
# and a second pass began while the knobs below were read (a loaded CI run read delay 0).
kill $writer; wait $writer 2>/dev/null || true
# The pass under way is left to end; the loop sees it clean and restores the throttle. A pass
# begun meanwhile, for the writer's last blocks, is let end too: the knobs are read between passes.
passes_ended() { [ "$(grep -c 'flush pass started' /root/run.log)" -le "$(grep -c 'flush pass done\|finished in writethrough' /root/run.log)" ]; }
for i in $(seq 60); do grep -q 'flush pass done\|finished in writethrough' /root/run.log && break; sample; sleep 1; done
for i in $(seq 60); do passes_ended && break; sleep 1; done
sleep %[1]d
for i in $(seq 60); do passes_ended && break; sleep 1; done
python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8090/metrics").read().decode())' > /root/metrics.txt
printf '{"loopStarted": %%s, "markerWritten": %%s, "restarted": %%s, "arrived": %%s, "modes": "%%s", "percentAfter": "%%s", "delayAfter": "%%s", "rateMinimumAfter": "%%s", "ageBoundsBeforeRestart": %%d, "ageBoundsAfterRestart": %%d, "ageBoundsShort": "%%s"}\n' \
	"$loop_started" "$marker_written" "${restarted:-0}" "${arrived:-0}" "$modes" "$(cat $bc/writeback_percent)" "$(cat $bc/writeback_delay)" "$(cat $bc/writeback_rate_minimum)" "$bounds_before" "$bounds_after" "$short"
`

type ageResult struct {
	LoopStarted      float64 `json:"loopStarted"`
	MarkerWritten    float64 `json:"markerWritten"`
	Restarted        float64 `json:"restarted"`
	Arrived          float64 `json:"arrived"`
	Modes            string  `json:"modes"`
	PercentAfter     string  `json:"percentAfter"`
	DelayAfter       string  `json:"delayAfter"`
	RateMinimumAfter string  `json:"rateMinimumAfter"`
	// AgeBoundsBeforeRestart and AgeBoundsAfterRestart count the scrapes that found the loop's
	// dirty-age bound while the marker was on the cache alone, before and after the loop's
	// restart; AgeBoundsShort lists those under the marker's age ("bound@age").
	AgeBoundsBeforeRestart int    `json:"ageBoundsBeforeRestart"`
	AgeBoundsAfterRestart  int    `json:"ageBoundsAfterRestart"`
	AgeBoundsShort         string `json:"ageBoundsShort"`
}

func testFlushPeriodBoundsDirtyAge(t *testing.T, g *guest) {
	// Start clean and in writeback, with the flush period the test measures.
	if _, code, stderr := g.node(t, "flush", "a.yaml", "--pass", "--timeout", "5m"); code != 0 {
		t.Fatalf("flush --pass: exit %d\n%s", code, stderr)
	}
	g.volumeFile(t, "a-period.yaml", "vol-a", cacheA.ByID(), hddA.ByID(), trusted+fmt.Sprintf("  flushPeriod: %s\n", agePeriod))
	passInterval, passLimit := agePeriod/2, max(agePeriod/2, time.Minute)
	budget := passInterval + passLimit + 3*ageInterval + 60*time.Second
	script := fmt.Sprintf(ageScript, int(ageInterval.Seconds()), ageDirtyMiB, ageMarkerMiB, hddA.ByID(), int(budget.Seconds()), int(ageRestartAt.Seconds()))
	out := g.sh(t, script)
	runLog := g.sh(t, "cat /root/run.log")
	t.Logf("flashcache node run's log:\n%s", runLog)
	var r ageResult
	if err := json.Unmarshal([]byte(lastLine(out)), &r); err != nil {
		t.Fatalf("guest output: %v\n%s", err, out)
	}
	passStarts := passStartTimes(t, runLog)
	passEnds := logTimes(t, runLog, "flush pass done")
	t.Logf("loop started at 0 s; marker written at %.1f s; loop restarted at %.1f s; passes started at %s, done at %s; marker on the backing disk at %.1f s",
		r.MarkerWritten-r.LoopStarted, r.Restarted-r.LoopStarted, relative(passStarts, r.LoopStarted), relative(passEnds, r.LoopStarted), r.Arrived-r.LoopStarted)

	if r.Restarted == 0 {
		t.Errorf("the loop was not restarted before the marker arrived")
	}
	if r.Arrived == 0 {
		t.Fatalf("the marker never reached the backing disk within %s", budget)
	}
	// The documented bound: half the period until a pass starts, the pass's limit, the loop's
	// interval (from two-minute periods up, the first two are the period itself).
	bound := passInterval + passLimit + ageInterval
	if age := time.Duration((r.Arrived - r.MarkerWritten) * float64(time.Second)); age > bound {
		t.Errorf("the marker took %s to reach the backing disk, over the bound %s", age.Round(time.Second), bound)
	}
	// The restart kept the schedule: the first pass started half a period after the loop's first
	// start, not half a period after the restart.
	if len(passStarts) == 0 {
		t.Fatalf("no flush pass started")
	}
	// When the round decided (the pass's startedAt), not when it logged: a round's apply takes
	// seconds under emulation. A lost schedule would start it after ageRestartAt + passInterval.
	first := time.Duration((passStarts[0] - r.LoopStarted) * float64(time.Second))
	if limit := passInterval + 3*ageInterval; first > limit {
		t.Errorf("the first pass started %s after the loop's first start, want within %s: the restart at %s lost the schedule",
			first.Round(time.Second), limit, ageRestartAt)
	}
	if r.Arrived < passStarts[0] {
		t.Logf("the marker reached the disk %.1f s before the pass: bcache's trickle wrote it; the bound still held", passStarts[0]-r.Arrived)
	}
	// In writeback the whole time, paced while the pass ran; throttled again after.
	if strings.Contains(r.Modes, "writethrough") && !strings.Contains(runLog, "finished in writethrough") {
		t.Errorf("the volume left writeback during the pass: %s", r.Modes)
	}
	if strings.Contains(runLog, "finished in writethrough") {
		t.Errorf("the pass did not get %d MiB clean within its limit %s and was finished in writethrough", ageDirtyMiB, passLimit)
	}
	if len(passEnds) == 0 || r.PercentAfter != defaultPercent || r.DelayAfter != "1" || r.RateMinimumAfter != "8" {
		t.Errorf("after the pass: %d passes done, writeback_percent %s, writeback_delay %s, writeback_rate_minimum %s; want the pass done and %s, 1, 8",
			len(passEnds), r.PercentAfter, r.DelayAfter, r.RateMinimumAfter, defaultPercent)
	}
	if len(passEnds) > 0 {
		checkPassPaced(t, g.sh(t, "cat /root/age-samples"), passStarts[0], passEnds[0], passDirtyAtStart(t, runLog), passLimit)
	}
	// The bound the loop exports never under-states the age of data still on the cache alone.
	// How many scrapes fit depends on the host's load (one ran 3 in 65 s beside another lane), so
	// the test asks for the bound before the restart and again after it, as the loop restarted
	// from its state file must export it too.
	if r.AgeBoundsBeforeRestart == 0 || r.AgeBoundsAfterRestart == 0 {
		t.Errorf("flashcache_volume_dirty_age_seconds read %d times before the loop's restart and %d after, while the marker waited; want it exported by both",
			r.AgeBoundsBeforeRestart, r.AgeBoundsAfterRestart)
	}
	if r.AgeBoundsShort != "" {
		t.Errorf("the exported dirty-age bound was under the marker's age (bound@age, seconds):%s", r.AgeBoundsShort)
	}
	// The loop serves the agent's metrics, under the same names.
	metrics := g.sh(t, "cat /root/metrics.txt")
	for _, series := range []string{`flashcache_volume_dirty_bytes{volume="vol-a"}`, `flashcache_volume_flush_pass_active{volume="vol-a"} 0`, `flashcache_volume_state{state="`} {
		if !strings.Contains(metrics, series) {
			t.Errorf("metrics lack %s:\n%s", series, metrics)
		}
	}
}

// testBackgroundFlush: a flush asked for writes every dirty byte back while the volume stays in
// writeback, and says how it went. Asked for while another pass runs, whose start extents were
// read before the data it must cover was written, it starts a pass of its own.
func testBackgroundFlush(t *testing.T, g *guest) {
	dev := g.sh(t, "basename $(readlink -f /dev/flashcache/vol-a)")
	bc := "/sys/block/" + dev + "/bcache/"
	// A pass under way: asked for, and one round of the loop has read what was dirty at its start
	// (the backing disk slowed, so that it cannot be done yet).
	restore := g.slowDisk(t, hddA, 3)
	defer restore()
	g.sh(t, "fio --name=first --filename=/dev/flashcache/vol-a --rw=randwrite --bs=4k --direct=1 --size=1g --io_size=1m --randrepeat=0 --output=/dev/null")
	if _, code, stderr := g.node(t, "flush", "a-period.yaml", "--background"); code != 0 {
		t.Fatalf("flush --background: exit %d\n%s", code, stderr)
	}
	g.sh(t, "timeout 6 flashcache node run --config /root/a-period.yaml --interval 2s --metrics-bind-address 0 >/root/background-first.log 2>&1 || true")
	first := g.flushState(t)
	if first.Pass == nil {
		t.Fatalf("no pass under way after a background flush and a round of the loop:\n%+v\n%s", first, g.sh(t, "cat /root/background-first.log"))
	}
	// Dirty, under the threshold, writeback running: bcache alone would trickle. The disk stays
	// slow until the request's own pass has started: the pass under way writes back at full
	// speed, and on a quick disk it can make the volume clean before the request reads it (it
	// did under load, in 7 s), when there is rightly nothing left to start a pass for.
	g.sh(t, "fio --name=dirty --filename=/dev/flashcache/vol-a --rw=randwrite --bs=4k --direct=1 --size=1g --io_size=8m --randrepeat=0 --output=/dev/null")
	before := g.sh(t, "cat "+bc+"dirty_data")
	g.sh(t, "( while :; do sed 's/.*\\[\\(.*\\)\\].*/\\1/' "+bc+"cache_mode >> /root/modes; sleep 0.5; done ) >/dev/null 2>&1 & echo $! > /root/sampler.pid")
	restoreCtx, stopRestorer := context.WithTimeout(g.ctx, 2*time.Minute)
	restored := make(chan error, 1)
	go func() { restored <- g.restoreWhenAnotherRequestIsRecorded(restoreCtx, hddA, first.FlushRequest) }()
	start := time.Now()
	r, code, stderr := g.node(t, "flush", "a-period.yaml", "--background", "--wait", "--timeout", "5m")
	stopRestorer()
	if err := <-restored; err != nil {
		t.Errorf("giving the backing disk its speed back once the request was recorded: %v", err)
	}
	restore()
	g.sh(t, "kill $(cat /root/sampler.pid)")
	modes := g.sh(t, "sort | uniq -c < /root/modes; rm -f /root/modes")
	t.Logf("dirty %s before; flush --background --wait: exit %d in %s; cache modes sampled: %s\n%s", before, code, time.Since(start).Round(time.Second), modes, stderr)
	if code != 0 {
		t.Fatalf("flush --background --wait: exit %d\n%s", code, r)
	}
	// The request's own pass, started by this command: the one under way covered only what was
	// dirty when it began.
	if !strings.Contains(stderr, "flush pass (requested) 0s in") || !r.Changed {
		t.Errorf("the request did not start a pass of its own (changed=%v):\n%s", r.Changed, stderr)
	}
	if strings.Contains(modes, "writethrough") {
		t.Errorf("the volume left writeback during a background flush: %s", modes)
	}
	if s := r.Volumes[0].Status; s == nil || s.CacheMode != "writeback" || s.State != "clean" {
		t.Errorf("after the background flush: %+v, want clean in writeback", s)
	}
	if p := g.sh(t, "cat "+bc+"writeback_percent"); p != defaultPercent {
		t.Errorf("writeback_percent after the background flush = %s, want the default's %s back", p, defaultPercent)
	}
	// On a clean volume it has nothing to do.
	r, code, _ = g.node(t, "flush", "a-period.yaml", "--background")
	if code != 0 || r.Changed {
		t.Errorf("background flush of a clean volume: exit %d changed=%v", code, r.Changed)
	}
}

// flushState is vol-a's saved schedule: the last flush request honoured and the pass under way.
func (g *guest) flushState(t *testing.T) engine.State {
	t.Helper()
	st, err := g.readFlushState(g.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// readFlushState is flushState for a caller that reports rather than fails the test.
func (g *guest) readFlushState(ctx context.Context) (engine.State, error) {
	var st engine.State
	out, err := g.vm.Output(ctx, "cat /var/lib/flashcache/state/vol-a.json")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("vol-a's state is not JSON: %w\n%s", err, out)
	}
	return st, nil
}

// restoreWhenAnotherRequestIsRecorded gives d its own speed back once vol-a's state records a
// flush request other than previous, which the engine saves as it decides what the request
// starts. It runs beside a command that waits, so it reports instead of failing the test.
func (g *guest) restoreWhenAnotherRequestIsRecorded(ctx context.Context, d vmharness.Disk, previous string) error {
	for {
		if st, err := g.readFlushState(ctx); err == nil && st.FlushRequest != "" && st.FlushRequest != previous {
			return g.vm.SetIOPS(ctx, d, 0)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no request other than %q recorded: %w", previous, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkPassPaced measures the backing disk while a periodic pass ran: in its paced part (three
// quarters of its limit) the disk wrote at about the pace (the dirty data at the start over that
// time, set half as high again), well under what it takes at full speed, with the dirty threshold
// kept; samples are "time sectors-written rate-floor percent" lines.
func checkPassPaced(t *testing.T, samples string, started, ended float64, dirtyAtStart int64, limit time.Duration) {
	t.Helper()
	paceEnd := min(ended, started+0.75*limit.Seconds())
	pace := float64(dirtyAtStart) / (0.75 * limit.Seconds())
	var rates []float64
	var floors []string
	var prevAt, prevSectors float64
	for _, line := range strings.Split(strings.TrimSpace(samples), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		at, _ := strconv.ParseFloat(f[0], 64)
		sectors, _ := strconv.ParseFloat(f[1], 64)
		if at > started && at <= paceEnd {
			floors = append(floors, f[2])
			if f[3] == "0" {
				t.Errorf("writeback_percent 0 at %.1f s into the pass, before its pace deadline: the pass went at full speed", at-started)
			}
			if prevAt > started && at > prevAt {
				rates = append(rates, (sectors-prevSectors)*512/(at-prevAt))
			}
		}
		prevAt, prevSectors = at, sectors
	}
	slices.Sort(rates)
	t.Logf("pass: %.1f s, %.1f MiB dirty at its start, pace %.0f KiB/s; the backing disk wrote at %s KiB/s (2-s windows, sorted); writeback_rate_minimum %v",
		ended-started, float64(dirtyAtStart)/(1<<20), pace/1024, kibPerSecond(rates), floors)
	if len(rates) < 3 {
		t.Fatalf("only %d samples of the backing disk in the pass's paced part", len(rates))
	}
	// Half as high again as the pace, and bcache lets a writer run up to 2 s ahead of its rate:
	// 2.5 times the pace is paced; full speed is several times more here.
	if median := rates[len(rates)/2]; median > 2.5*pace {
		t.Errorf("the backing disk wrote at a median %.0f KiB/s in the pass's paced part, over 2.5 times its pace (%.0f KiB/s): the pass was not paced", median/1024, pace/1024)
	}
	raised := false
	for _, f := range floors {
		if n, err := strconv.Atoi(f); err == nil && n > 8 {
			raised = true
		}
	}
	if !raised {
		t.Errorf("writeback_rate_minimum never raised during the pass: %v", floors)
	}
}

func kibPerSecond(rates []float64) string {
	var s []string
	for _, r := range rates {
		s = append(s, strconv.FormatFloat(r/1024, 'f', 0, 64))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// passDirtyAtStart is the dirty data the loop's first pass started with, from its log.
func passDirtyAtStart(t *testing.T, log string) int64 {
	t.Helper()
	m := regexp.MustCompile(`flush pass started.*"dirtyBytes": (\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no dirtyBytes in the loop's pass start:\n%s", log)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// passStartTimes returns the startedAt of each "flush pass started" line of the loop's log, in
// seconds since the epoch.
func passStartTimes(t *testing.T, log string) []float64 {
	t.Helper()
	var times []float64
	for _, m := range regexp.MustCompile(`flush pass started.*"startedAt": "([^"]+)"`).FindAllStringSubmatch(log, -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("startedAt %q: %v", m[1], err)
		}
		times = append(times, float64(at.UnixNano())/1e9)
	}
	return times
}

// logTimes returns the times, in seconds since the epoch, of the log lines containing msg (zap's
// console encoder puts an RFC 3339 time first).
func logTimes(t *testing.T, log, msg string) []float64 {
	t.Helper()
	var times []float64
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		stamp, _, _ := strings.Cut(line, "\t")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			t.Fatalf("log line without a time: %q", line)
		}
		times = append(times, float64(at.UnixNano())/1e9)
	}
	return times
}

func relative(times []float64, from float64) string {
	var s []string
	for _, at := range times {
		s = append(s, strconv.FormatFloat(at-from, 'f', 1, 64)+" s")
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// testWearWhileRunning: an SSD that starts reporting a critical warning while the volume runs
// is read again within safety.wearCheckInterval by `flashcache node run`, and the volume is
// flushed and held in writethrough then, not at the next boot. QEMU's NVMe takes the warning at
// run time through QMP, as a failing drive raises it.
func testWearWhileRunning(t *testing.T, g *guest) {
	const interval = 10 * time.Second
	g.volumeFile(t, "e.yaml", "vol-e", cacheA.ByID(), hddA.ByID(), "  safety: {trustWriteCache: true, wearCheckInterval: 10s}\n")
	if r, code, stderr := g.node(t, "apply", "e.yaml"); code != 0 || r.Volumes[0].Status == nil || r.Volumes[0].Status.CacheMode != "writeback" {
		t.Fatalf("apply: exit %d %s\n%s", code, r, stderr)
	}
	dev := g.sh(t, "basename $(readlink -f /dev/flashcache/vol-e)")
	bc := "/sys/block/" + dev + "/bcache/"
	g.sh(t, "nohup flashcache node run --config /root/e.yaml --interval 2s --metrics-bind-address 0 >/root/run-e.log 2>&1 & echo $! >/root/run-e.pid")
	defer g.sh(t, "kill $(cat /root/run-e.pid); while kill -0 $(cat /root/run-e.pid) 2>/dev/null; do sleep 0.2; done")
	sum := g.sh(t, "head -c 16M /dev/urandom | tee /root/e-pattern | dd of=/dev/flashcache/vol-e bs=64k oflag=direct status=none && sha256sum < /root/e-pattern | cut -d' ' -f1")
	if state := g.sh(t, "cat "+bc+"state"); state != "dirty" {
		t.Fatalf("state %q after writing, want dirty", state)
	}
	if err := g.vm.SetNVMeCriticalWarning(g.ctx, cacheA.Serial, 1); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.vm.SetNVMeCriticalWarning(g.ctx, cacheA.Serial, 0); err != nil {
			t.Error(err)
		}
	}()
	if warning := g.sh(t, "smartctl --json -a "+cacheA.ByID()+" | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"nvme_smart_health_information_log\"][\"critical_warning\"])'"); warning != "1" {
		t.Fatalf("the guest sees critical_warning %s after QMP set it to 1", warning)
	}
	set := time.Now()
	deadline := set.Add(interval + 2*time.Minute)
	for {
		mode, state := g.sh(t, "cat "+bc+"cache_mode"), g.sh(t, "cat "+bc+"state")
		if strings.Contains(mode, "[writethrough]") && state == "clean" {
			t.Logf("flushed and in writethrough %s after the warning was raised", time.Since(set).Round(time.Second))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the warning: mode %q state %q; log:\n%s", time.Since(set).Round(time.Second), mode, state, g.sh(t, "cat /root/run-e.log"))
		}
		time.Sleep(time.Second)
	}
	if took := time.Since(set); took > interval+time.Minute {
		t.Errorf("the downgrade took %s, more than the interval %s and a minute's flush", took.Round(time.Second), interval)
	}
	// The loop says so once its round, which ran the downgrade's flush, returns.
	if log := g.sh(t, "for i in $(seq 60); do grep -q 'cache device worn while running' /root/run-e.log && break; sleep 0.5; done; cat /root/run-e.log"); !strings.Contains(log, "cache device worn while running") {
		t.Errorf("the loop did not say the cache wore out:\n%s", log)
	}
	if got := g.sh(t, "dd if=/dev/flashcache/vol-e bs=1M count=16 iflag=direct status=none | sha256sum | cut -d' ' -f1"); got != sum {
		t.Errorf("data changed by the downgrade")
	}
	if r, code, _ := g.node(t, "teardown", "e.yaml", "--confirm"); code != 0 {
		t.Errorf("teardown: %s", r)
	}
}

// redirtyWriter matches the pass script's writer, fio and its job process (pgrep -f).
// Anchored: the shell that runs pgrep has the pattern in its own command line.
const redirtyWriter = "^fio --name=redirty"

// passScript runs a flush loop over vol-a (flushPeriod 30s) under a steady writer: fio rewrites
// the first 64 KiB 400 times a second (a block bcache writes back is usually written again
// before its write-back lands), so bcache never reports the volume clean. The loop starts
// first, and is let see the volume clean when it is (so that it exports the age of what comes
// next); then %[3]d MiB of 4-KiB writes scattered over 2 GiB and a 4-KiB marker at %[4]d MiB are
// written once, so they are dirty when the first pass begins. It samples the cache mode and state
// five times a second until the loop's log says a pass ended (done, or finished in writethrough)
// and the volume is in writeback, or %[2]d s passed, then saves the loop's metrics and stops the
// loop and the writer. It writes "marker <md5> <byte offset on the backing disk>", "started
// <time>" and the samples to /root/pass.out, the metrics to /root/pass-metrics.txt, and touches
// /root/pass.done at the end, so the host can act while it runs.
const passScript = `set -eu
dev=$(basename $(readlink -f /dev/flashcache/vol-a)); bc=/sys/block/$dev/bcache; hdd=$(basename $(readlink -f %[5]s))
rm -f /var/lib/flashcache/state/vol-a.json /var/lib/flashcache/state/vol-a.pass-extents /root/pass.log /root/pass-samples /root/pass.done /root/pass-metrics.txt
now() { date +%%s.%%N; }
` + scrapeMetrics + `
{
writer=""
trap '[ -n "$writer" ] && kill $writer 2>/dev/null || true; [ -f /root/pass.pid ] && kill $(cat /root/pass.pid) 2>/dev/null || true' EXIT
started=$(now)
nohup flashcache node run --config /root/a-pass.yaml --interval %[1]ds --metrics-bind-address 127.0.0.1:8091 >/root/pass.log 2>&1 & echo $! >/root/pass.pid
for i in $(seq 50); do scrape_metrics 8091 | grep -qE '^flashcache_volume_dirty_age_seconds\{volume="vol-a"\} 0$' && break; sleep 0.2; done
fio --name=scatter --filename=/dev/flashcache/vol-a --rw=randwrite --bs=4k --direct=1 --offset=1m --size=2g --io_size=%[3]dm --randrepeat=0 --output=/dev/null
head -c 4096 /dev/urandom > /root/marker
dd if=/root/marker of=/dev/flashcache/vol-a bs=4k seek=$(( %[4]d * 256 )) oflag=direct conv=fsync status=none
echo "marker $(md5sum < /root/marker | cut -d' ' -f1) $(( $(bcache-super-show %[5]s | awk '/dev.data.first_sector/ {print $2}') * 512 + %[4]d * 1048576 ))"
fio --name=redirty --filename=/dev/flashcache/vol-a --rw=randwrite --bs=4k --direct=1 --size=64k --rate_iops=400 --time_based --runtime=900 --output=/dev/null &
writer=$!
deadline=$(awk -v s=$started 'BEGIN { printf "%%d", s + %[2]d }')
# Sampled five times a second with the shell's builtins: the writethrough of a short flush lasts
# about a second.
while [ ${EPOCHREALTIME%%.*} -lt $deadline ]; do
	read -r modes <$bc/cache_mode; read -r state <$bc/state
	read -r _ _ _ _ hddwrites _ </sys/block/$hdd/stat; read -r _ _ _ _ _ _ volsectors _ </sys/block/$dev/stat
	mode=${modes#*[}; mode=${mode%%]*}
	echo "$EPOCHREALTIME $mode $state $hddwrites $volsectors" >>/root/pass-samples
	if [ "$mode" = writeback ] && grep -qE 'flush pass done|finished in writethrough' /root/pass.log; then break; fi
	sleep 0.2
done
# The round that logged the pass's end counts it a moment later.
sleep 1; scrape_metrics 8091 >/root/pass-metrics.txt || true
kill $(cat /root/pass.pid); while kill -0 $(cat /root/pass.pid) 2>/dev/null; do sleep 0.2; done; rm -f /root/pass.pid
kill $writer; wait $writer 2>/dev/null || true
echo "started $started"
cat /root/pass-samples
} >/root/pass.out 2>&1
touch /root/pass.done
`

// scrapeMetrics defines scrape_metrics PORT, which prints what a loop's metrics server on
// 127.0.0.1:PORT serves, headers and all, with the shell alone.
const scrapeMetrics = `scrape_metrics() { (exec 3<>/dev/tcp/127.0.0.1/$1 && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3) 2>/dev/null; }`

// passRun is what passScript saw.
type passRun struct {
	// metrics is what the loop exported as the pass ended.
	metrics             string
	started             float64
	markerMD5           string
	markerOffset        int64
	samples             []passSample
	log                 string
	starts, dones       []float64
	escalated, finished []float64
}

// passSample is one look at the volume: its mode and state, the writes the backing disk completed
// and the bytes written to the volume until then.
type passSample struct {
	at                  float64
	mode, state         string
	hddWrites, volBytes int64
}

// rates is what the backing disk and the volume did between the samples nearest from and to: the
// backing disk's writes a second and the bytes a second written to the volume.
func (r passRun) rates(from, to float64) (hddWrites, volBytes float64) {
	var a, b *passSample
	for i := range r.samples {
		s := &r.samples[i]
		if a == nil && s.at >= from {
			a = s
		}
		if s.at <= to {
			b = s
		}
	}
	if a == nil || b == nil || b.at <= a.at {
		return 0, 0
	}
	dt := b.at - a.at
	return float64(b.hddWrites-a.hddWrites) / dt, float64(b.volBytes-a.volBytes) / dt
}

// runPass writes a-pass.yaml, with extraSpec's lines added to the spec, and runs passScript in the
// background; onLog, when not nil, is
// called with the loop's log every second while it runs, so the host can change the disks.
func (g *guest) runPass(t *testing.T, scatterMiB int, extraSpec string, onLog func(log string)) passRun {
	t.Helper()
	const period, interval = 30 * time.Second, 5 * time.Second
	limit := max(period/2, time.Minute) // the engine's pass limit for this period
	g.volumeFile(t, "a-pass.yaml", "vol-a", cacheA.ByID(), hddA.ByID(), trusted+fmt.Sprintf("  flushPeriod: %s\n", period)+extraSpec)
	// Room for one pass that ended early (on a busy host fio's 400 writes a second fall behind)
	// before the one the test is about.
	budget := period/2 + 2*limit + 2*time.Minute
	script := fmt.Sprintf(passScript, int(interval.Seconds()), int(budget.Seconds()), scatterMiB, ageMarkerMiB, hddA.ByID())
	if err := g.vm.WriteFile(g.ctx, "/root/pass.sh", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// The last run's log goes first: read before the script removes it, its lines would be
	// taken for this run's (a pass's end; a writethrough finish, which restores a slowed disk).
	g.sh(t, "rm -f /root/pass.done /root/pass.log; nohup bash /root/pass.sh >/dev/null 2>&1 &")
	deadline := time.Now().Add(budget + 5*time.Minute)
	for g.sh(t, "[ -f /root/pass.done ] && echo done || true") != "done" {
		if time.Now().After(deadline) {
			t.Fatalf("the pass script did not end within %s", budget+5*time.Minute)
		}
		if onLog != nil {
			onLog(g.sh(t, "cat /root/pass.log 2>/dev/null || true"))
		}
		time.Sleep(time.Second)
	}
	r := passRun{log: g.sh(t, "cat /root/pass.log"), metrics: g.sh(t, "cat /root/pass-metrics.txt 2>/dev/null || true")}
	t.Logf("flashcache node run's log:\n%s", r.log)
	for _, l := range strings.Split(g.sh(t, "cat /root/pass.out"), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "started":
			r.started, _ = strconv.ParseFloat(f[1], 64)
		case len(f) == 3 && f[0] == "marker":
			r.markerMD5 = f[1]
			r.markerOffset, _ = strconv.ParseInt(f[2], 10, 64)
		case len(f) == 5:
			at, _ := strconv.ParseFloat(f[0], 64)
			hddWrites, _ := strconv.ParseInt(f[3], 10, 64)
			volSectors, _ := strconv.ParseInt(f[4], 10, 64)
			r.samples = append(r.samples, passSample{at, f[1], f[2], hddWrites, volSectors * 512})
		}
	}
	r.starts = passStartTimes(t, r.log)
	r.dones = logTimes(t, r.log, "flush pass done")
	r.escalated = logTimes(t, r.log, "finishing it in writethrough")
	r.finished = logTimes(t, r.log, "finished in writethrough")
	if r.started == 0 || r.markerMD5 == "" || len(r.samples) == 0 {
		t.Fatalf("the pass script's output is incomplete:\n%s", g.sh(t, "cat /root/pass.out"))
	}
	return r
}

// testPassEndsWhenWhatWasDirtyAtItsStartIsWrittenBack: under a writer that keeps the volume dirty,
// so that bcache never reports it clean, a pass ends in writeback, within its limit, once every
// extent that was dirty when it began has been written back (bcache's btree dump in debugfs
// says so), and the marker written before it is then on the backing disk itself. Before the
// engine read the dump, such a pass always ran its limit and was finished in writethrough.
func testPassEndsWhenWhatWasDirtyAtItsStartIsWrittenBack(t *testing.T, g *guest) {
	if _, code, stderr := g.node(t, "flush", "a.yaml", "--pass", "--timeout", "5m"); code != 0 {
		t.Fatalf("flush --pass: exit %d\n%s", code, stderr)
	}
	limit := time.Minute
	r := g.runPass(t, 2, "", nil)
	if len(r.starts) == 0 || len(r.dones) == 0 {
		t.Fatalf("want a pass started and done; log:\n%s", r.log)
	}
	// More than the rewritten 64 KiB was dirty when the pass began: scattered blocks that nothing
	// rewrites, which only writeback makes clean. (How many of the 2 MiB bcache has written back
	// by then varies: 0.1 to 1.9 MiB were left in three runs.)
	if dirty := passDirtyAtStart(t, r.log); dirty <= 64<<10 {
		t.Errorf("%d bytes dirty when the pass began: no more than the rewritten region, nothing for the pass to write back", dirty)
	}
	t.Logf("loop started at 0 s; passes started at %s, done at %s; escalated at %s",
		relative(r.starts, r.started), relative(r.dones, r.started), relative(r.escalated, r.started))
	if len(r.escalated) > 0 {
		t.Errorf("a pass was finished in writethrough: the extents dirty at its start were not seen written back")
	}
	if !regexp.MustCompile(`flush pass done.*"swept": true`).MatchString(r.log) {
		t.Errorf("the pass did not end swept (the volume clean instead?)")
	}
	if took := time.Duration((r.dones[0] - r.starts[0]) * float64(time.Second)); took > limit {
		t.Errorf("the pass took %s, over its limit %s", took.Round(time.Second), limit)
	}
	// bcache never said clean while the pass ran: the old criterion would not have ended it.
	for _, s := range r.samples {
		if s.at < r.starts[0] || s.at > r.dones[0] {
			continue
		}
		if s.mode != "writeback" || s.state == "clean" {
			t.Errorf("%.1f s into the pass the volume was %s/%s, want writeback and dirty throughout", s.at-r.starts[0], s.mode, s.state)
			break
		}
	}
	// The marker, dirty before the pass, is on the backing disk itself, past bcache's data offset.
	got := g.sh(t, fmt.Sprintf("dd if=%s bs=4096 skip=%d count=1 iflag=direct status=none | md5sum | cut -d' ' -f1", hddA.ByID(), r.markerOffset/4096))
	if got != r.markerMD5 {
		t.Errorf("the backing disk holds %s where the marker (%s) was written before the pass: not written back", got, r.markerMD5)
	}
	// bcache's copying garbage collector moves dirty extents, which a pass would take for written
	// back: turned on by hand, the next apply turns it off again.
	gc := "/sys/fs/bcache/$(basename $(readlink -f /sys/block/$(basename $(readlink -f /dev/flashcache/vol-a))/bcache/cache))/internal/copy_gc_enabled"
	g.sh(t, "echo 1 > "+gc)
	if _, code, stderr := g.node(t, "apply", "a-pass.yaml"); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, stderr)
	}
	if got := g.sh(t, "cat "+gc); got != "0" {
		t.Errorf("copy_gc_enabled %s after an apply, want 0", got)
	}
}

// testPassFinishedInWritethrough: a pass that cannot write back what was dirty at its start (the
// backing disk slowed to a few I/O a second) runs in writeback for its whole limit, no less, and
// is then finished by the blocking flush in writethrough, after which the volume is in writeback
// again: the last part of the bound on dirty data's age. While the finish runs, the exported age
// of dirty data goes on growing (the round that runs it is busy), and the pass is counted as
// finished in writethrough.
func testPassFinishedInWritethrough(t *testing.T, g *guest) {
	limit := time.Minute // the engine's pass limit for the script's 30-s period
	// Clean to start with, so that the loop sees it clean and exports the age of what follows.
	if _, code, stderr := g.node(t, "flush", "a.yaml", "--pass", "--timeout", "5m"); code != 0 {
		t.Fatalf("flush --pass: exit %d\n%s", code, stderr)
	}
	// 2 MiB of scattered 4-KiB writes, 512 extents: at 3 I/O a second the backing disk writes
	// back at most 180 in a minute. Its own rate comes back once the finish has run slow for
	// slowFinish, so the blocking flush ends seconds later, as it does when the writer alone keeps
	// the volume dirty.
	const slowFinish = 12 * time.Second
	restore := g.slowDisk(t, hddA, 3)
	defer restore()
	// Timed from when the blocking flush has begun (the volume in writethrough), not from the
	// log line that announces it: on a loaded host the flush may look at the volume seconds later,
	// and a disk restored meanwhile had left it clean, with nothing for the flush to do.
	mode := "/sys/block/$(basename $(readlink -f /dev/flashcache/vol-a))/bcache/cache_mode"
	scrapeAge := scrapeMetrics + `; echo "$(date +%s.%N) $(scrape_metrics 8091 | awk '/^flashcache_volume_dirty_age_seconds\{volume="vol-a"\}/ {print $2}')"`
	type ageSeen struct{ at, age float64 }
	var ages []ageSeen
	var slowSince time.Time
	r := g.runPass(t, 2, "", func(log string) {
		if strings.Contains(log, "finished in writethrough") {
			restore()
			return
		}
		if !strings.Contains(log, "finishing it in writethrough") || !strings.Contains(g.sh(t, "cat "+mode), "[writethrough]") {
			return
		}
		if slowSince.IsZero() {
			slowSince = time.Now()
		}
		if f := strings.Fields(g.sh(t, scrapeAge)); len(f) == 2 {
			at, _ := strconv.ParseFloat(f[0], 64)
			// 0: seen clean, the finish ended since the log was read.
			if age, _ := strconv.ParseFloat(f[1], 64); age > 0 {
				ages = append(ages, ageSeen{at, age})
			}
		} else {
			t.Errorf("no dirty age exported while the finish ran: %q", f)
		}
		if time.Since(slowSince) >= slowFinish {
			restore()
		}
	})
	restore()
	if len(r.starts) == 0 || len(r.escalated) == 0 || len(r.finished) == 0 {
		t.Fatalf("want a pass started, escalated and finished in writethrough; log:\n%s", r.log)
	}
	// The pass that escalated: the last to start before the escalation.
	pass := r.starts[0]
	for _, p := range r.starts {
		if p <= r.escalated[0] {
			pass = p
		}
	}
	var firstWT, lastWT float64
	for _, s := range r.samples {
		if s.mode == "writethrough" {
			if firstWT == 0 {
				firstWT = s.at
			}
			lastWT = s.at
		}
	}
	back := r.samples[len(r.samples)-1]
	t.Logf("loop started at 0 s; pass started at %.1f s, escalated at %.1f s, finished in writethrough at %.1f s; writethrough sampled from %.1f s to %.1f s; last sample %s/%s",
		pass-r.started, r.escalated[0]-r.started, r.finished[0]-r.started, firstWT-r.started, lastWT-r.started, back.mode, back.state)

	if got := time.Duration((r.escalated[0] - pass) * float64(time.Second)); got < limit-time.Second || got > limit+3*5*time.Second+30*time.Second {
		t.Errorf("the pass was escalated %s after it started, want its limit %s (plus a round or three)", got.Round(time.Second), limit)
	}
	if firstWT == 0 {
		t.Errorf("the volume was never seen in writethrough: the escalation's blocking flush did not run")
	} else if firstWT < pass+limit.Seconds()-2 {
		t.Errorf("writethrough at %.1f s, %.1f s into the pass: the pass must keep writeback for its limit %s", firstWT-r.started, firstWT-pass, limit)
	}
	if back.mode != "writeback" {
		t.Errorf("the volume is in %s after the pass was finished, want writeback again", back.mode)
	}
	// Nothing was seen clean since before the pass began, so the age is at least the time since
	// then, at every scrape.
	if len(ages) < 3 {
		t.Errorf("the age was read %d times while the finish ran slow for %s, want several", len(ages), slowFinish)
	}
	for _, a := range ages {
		if since := a.at - pass; a.age < since-1 {
			t.Errorf("dirty age %.1f s exported %.1f s into the pass, while the finish ran: short of the time since the pass began", a.age, since)
		}
	}
	if n := len(ages); n > 0 {
		first, last := ages[0], ages[n-1]
		t.Logf("dirty age while the finish ran: %.1f s at %.1f s into the pass ... %.1f s at %.1f s", first.age, first.at-pass, last.age, last.at-pass)
		// The volume was last seen clean some seconds before the pass began, so the bound above
		// holds for a while even for an age that stands still (a gauge set by the rounds, at its
		// value before the finish: it grew 0.0 s in 13.9 s): it must also keep time.
		if grew, span := last.age-first.age, last.at-first.at; grew < span-1 {
			t.Errorf("the dirty age grew %.1f s in the %.1f s between the first and last reads while the finish ran: it must grow with the clock", grew, span)
		}
	}
	for outcome, want := range map[string]int{"writethrough": len(r.finished), "writeback": len(r.dones)} {
		series := fmt.Sprintf(`flashcache_volume_flush_passes_total{outcome=%q,volume="vol-a"} %d`, outcome, want)
		if !strings.Contains(r.metrics, series) {
			t.Errorf("the loop's metrics lack %s:\n%s", series, r.metrics)
		}
	}
	// The writer went on throughout: in writethrough its writes leave nothing dirty, so the
	// blocking flush writes back what the slowed disk left (a few hundred scattered blocks) in seconds.
	if wt := lastWT - firstWT; wt > 60 {
		t.Errorf("writethrough lasted %.0f s; the flush of a few hundred dirty blocks should take seconds", wt)
	}
	if _, code, stderr := g.node(t, "flush", "a.yaml", "--pass", "--timeout", "5m"); code != 0 {
		t.Fatalf("flush --pass afterwards: exit %d\n%s", code, stderr)
	}
}

// testWriteLimitWhileAPassLags: under flushThrottle Proportional a pass whose sweep lags (the
// backing disk slowed to 3 I/O a second, as in testPassFinishedInWritethrough) limits, before its
// own limit, the writes of the top-level cgroup that writes to the volume (passScript's writer
// runs from an ssh session): the engine sets io.max's wbps for the bcache device there. The
// writer then writes no faster than the limit (the kernel applies it), the limit is kept after the
// pass, and a spec that turns the throttle off lifts it.
func testWriteLimitWhileAPassLags(t *testing.T, g *guest) {
	const slowIOPS = 3
	restore := func() {}
	defer func() { restore() }()
	// The writer's top-level cgroup (system.slice, as ssh's sessions run there on the test image),
	// its limit on the volume and what it wrote to it.
	const readCgroup = `dev=$(cat /sys/block/$(basename $(readlink -f /dev/flashcache/vol-a))/dev)
cg=${CG:-$(cut -d: -f3 /proc/$(pgrep -f '` + redirtyWriter + `' | head -1)/cgroup 2>/dev/null | cut -d/ -f2)}
[ -n "$cg" ] || exit 0
wbps=$(awk -v d=$dev '$1 == d { for (i = 2; i <= NF; i++) if ($i ~ /^wbps=/) print substr($i, 6) }' /sys/fs/cgroup/$cg/io.max 2>/dev/null)
wbytes=$(awk -v d=$dev '$1 == d { for (i = 2; i <= NF; i++) if ($i ~ /^wbytes=/) print substr($i, 8) }' /sys/fs/cgroup/$cg/io.stat 2>/dev/null)
echo "$EPOCHREALTIME $cg ${wbps:-max} ${wbytes:-0}"`
	type reading struct {
		at           float64
		wbps, wbytes int64
	}
	// readLimit reads the limit of the cgroup cg, or of the writer's when cg is empty; wbps 0 is
	// none ("max").
	readLimit := func(cg string) (rd reading, cgroup string, ok bool) {
		script := readCgroup
		if cg != "" {
			script = "CG=" + cg + "\n" + readCgroup
		}
		f := strings.Fields(g.sh(t, script))
		if len(f) != 4 {
			return reading{}, "", false
		}
		rd.at, _ = strconv.ParseFloat(f[0], 64)
		rd.wbps, _ = strconv.ParseInt(f[2], 10, 64) // "max": 0
		rd.wbytes, _ = strconv.ParseInt(f[3], 10, 64)
		return rd, f[1], true
	}
	var readings []reading
	writerCgroup := ""
	var r passRun
	var set []float64
	// A round in which the pass could not lag as the test means it to, because the backing disk
	// wrote faster than its cap or the writer wrote less than the engine limits from, proves
	// nothing either way, and is run again, three rounds at most. The disk has written back at
	// bcache's own pace (13 times a second) under a cap of 3 that QEMU reported (query-block),
	// in the first round of five runs of the test in a row (CI at 01131ee, then four times
	// here); each time the next round's cap held. Setting the disk's own cap again, quietly,
	// before slowing it did not help.
	const rounds = 3
	for round := 1; ; round++ {
		restore = g.slowDisk(t, hddA, slowIOPS)
		readings, writerCgroup = nil, ""
		r = g.runPass(t, 2, "  flushThrottle: Proportional\n", func(log string) {
			if strings.Contains(log, "finishing it in writethrough") {
				restore()
				return
			}
			if rd, cg, ok := readLimit(""); ok {
				readings = append(readings, rd)
				writerCgroup = cg
			}
		})
		restore()
		if len(r.starts) == 0 {
			t.Fatalf("no pass started; log:\n%s", r.log)
		}
		if set = logTimes(t, r.log, "flush pass: write limit"); len(set) > 0 {
			break
		}
		end := r.samples[len(r.samples)-1].at
		for _, e := range slices.Concat(r.dones, r.escalated) {
			end = min(end, e)
		}
		hddWrites, volBytes := r.rates(r.starts[0], end)
		seen := fmt.Sprintf("from the pass's start to its end the backing disk wrote %.1f times a second (capped at %d) and the volume was written %.0f B/s",
			hddWrites, slowIOPS, volBytes)
		couldLag := true
		// A pass that wrote back what was dirty at its start within its pace (engine.passPaceShare,
		// three quarters of its minute) did not lag: too little was dirty by then. On a fresh
		// machine the disk wrote 1.3 of the 2 MiB back before the pass began, faster than its cap.
		if len(r.dones) > 0 {
			took := r.dones[0] - r.starts[0]
			seen += fmt.Sprintf("; the pass wrote back the %d bytes dirty at its start in %.0f s", passDirtyAtStart(t, r.log), took)
			if took < 0.75*time.Minute.Seconds() {
				couldLag = false
			}
		}
		// engine.writeLimitFloor: below it the engine sets no limit, as one would make no room.
		const writeLimitFloor = 1 << 20
		if round == rounds || (couldLag && hddWrites <= 2*slowIOPS && volBytes >= writeLimitFloor) {
			t.Fatalf("the lagging pass set no write limit; %s; log:\n%s", seen, r.log)
		}
		t.Logf("round %d set no write limit, but the pass could not lag as meant: %s; once more", round, seen)
		if _, code, stderr := g.node(t, "flush", "a.yaml", "--pass", "--timeout", "5m"); code != 0 {
			t.Fatalf("flush --pass between the rounds: exit %d\n%s", code, stderr)
		}
	}
	end := math.Inf(1)
	if len(r.escalated) > 0 {
		end = r.escalated[0]
	}
	if set[0] >= end {
		t.Errorf("the write limit came at %.1f s, not before the pass's writethrough finish at %.1f s", set[0]-r.started, end-r.started)
	}
	// While one limit held for 5 s or more, the writer's cgroup (fio's 400 4-KiB writes a second,
	// 1.6 MB/s) wrote no faster than it.
	checked := false
	for i := range readings {
		j := i
		for j+1 < len(readings) && readings[j+1].wbps == readings[i].wbps && readings[j+1].at < end {
			j++
		}
		a, b := readings[i], readings[j]
		if a.wbps == 0 || b.at-a.at < 5 {
			continue
		}
		rate := float64(b.wbytes-a.wbytes) / (b.at - a.at)
		t.Logf("limit %d B/s from %.1f s to %.1f s: the writer's cgroup wrote %.0f B/s", a.wbps, a.at-r.started, b.at-r.started, rate)
		if rate > 1.15*float64(a.wbps) {
			t.Errorf("the writer's cgroup wrote %.0f B/s under a limit of %d B/s", rate, a.wbps)
		}
		if rate > 1.5e6 {
			t.Errorf("the writer's cgroup wrote %.0f B/s under the limit, the writer's own rate: nothing held it back", rate)
		}
		checked = true
		break
	}
	if !checked {
		t.Errorf("no limit was seen in the writer's cgroup's io.max for 5 s while the pass ran: %v", readings)
	}
	// The limit outlives the pass, for the next one: after a pass done in writeback, and after
	// one finished in writethrough, no higher than before, although that blocking flush left the
	// volume clean: the writer goes on and dirties it again before the loop's next round. (That
	// the finish's own round keeps the limit when its status reads clean is a unit test's,
	// TestWriteLimitIsKeptAfterAWritethroughFinishLeftTheVolumeClean. A writer stopped over the
	// finish, as this test once did, left the volume clean into the next round, which rightly
	// lifts the limit of a clean volume: make test at ed81b77.)
	if writerCgroup == "" {
		t.Fatalf("the writer's cgroup was never read")
	}
	ending := "done in writeback"
	if len(r.finished) > 0 {
		ending = "finished in writethrough"
	}
	var before int64
	for _, rd := range readings {
		if rd.wbps > 0 {
			before = rd.wbps
		}
	}
	if kept, _, ok := readLimit(writerCgroup); !ok || kept.wbps == 0 {
		t.Errorf("after the pass %s, %s/io.max does not limit the volume: the limit must be kept for the next pass; log:\n%s", ending, writerCgroup, r.log)
	} else if kept.wbps > before {
		t.Errorf("after the pass %s the limit is %d B/s, above the %d B/s it was while the pass lagged", ending, kept.wbps, before)
	} else {
		t.Logf("after the pass %s the limit is %d B/s (%d B/s while it lagged)", ending, kept.wbps, before)
	}
	// Turned off in the spec, the limit goes at the next run: the loop runs until it says so, or
	// exits, a minute at most (1-4 s here, loaded or not; it says nothing when the limit was lost
	// before it, as CI at 0261ec6 and 7d957cf showed, so how long it waited is part of the message).
	g.volumeFile(t, "a-pass-off.yaml", "vol-a", cacheA.ByID(), hddA.ByID(), trusted+"  flushPeriod: 30s\n  flushThrottle: Disabled\n")
	waited := strings.Fields(g.sh(t, `start=$EPOCHREALTIME
flashcache node run --config /root/a-pass-off.yaml --interval 2s --metrics-bind-address 0 >/root/pass-off.log 2>&1 & pid=$!
running=yes
while ! grep -q "write limit lifted" /root/pass-off.log; do
	kill -0 $pid 2>/dev/null || { running=no; break; }
	[ $(( ${EPOCHREALTIME%.*} - ${start%.*} )) -lt 60 ] || break
	sleep 0.5
done
echo $(awk -v a=$start -v b=$EPOCHREALTIME 'BEGIN { printf "%.1f", b - a }') $running
kill $pid 2>/dev/null || true; wait $pid || true`))
	passOffLog := g.sh(t, "cat /root/pass-off.log")
	if got, _, ok := readLimit(writerCgroup); !ok || got.wbps != 0 {
		t.Errorf("%s/io.max still limits the volume after flushThrottle Disabled (%d B/s)\n%s", writerCgroup, got.wbps, passOffLog)
	}
	if len(waited) != 2 {
		t.Fatalf("the pass-off loop's wait printed %q", waited)
	}
	if !strings.Contains(passOffLog, "write limit lifted") {
		t.Errorf("the loop did not say it lifted the limit in %s s (still running: %s); its log:\n%s", waited[0], waited[1], passOffLog)
	} else {
		t.Logf("the loop said it lifted the limit %s s after it started", waited[0])
	}
	if _, code, stderr := g.node(t, "flush", "a.yaml", "--pass", "--timeout", "5m"); code != 0 {
		t.Fatalf("flush --pass afterwards: exit %d\n%s", code, stderr)
	}
}

// slowDisk throttles the disk to iops and returns what restores its own rate, once however often
// it is called.
func (g *guest) slowDisk(t *testing.T, d vmharness.Disk, iops int) func() {
	t.Helper()
	if err := g.vm.SetIOPS(g.ctx, d, iops); err != nil {
		t.Fatal(err)
	}
	restored := false
	return func() {
		if !restored {
			if err := g.vm.SetIOPS(g.ctx, d, 0); err != nil {
				t.Fatal(err)
			}
			restored = true
		}
	}
}
