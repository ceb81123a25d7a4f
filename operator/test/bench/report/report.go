package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flashcache/flashcache/operator/test/bench/results"
)

const (
	markdownFile = "benchmarks.md"
	chartsDir    = "benchmarks"
	// notRun stands in for a section whose JSON file the results folder does not have.
	notRun = "Not run in this results folder."
	// dash is printed for a value that was not measured (no runs, NaN, a missing configuration).
	dash = "–"
)

// inputs are the results folder's files; nil for one that is not there. oltp is the data set
// that fits the cache, larger the one larger than the cache.
type inputs struct {
	oltp   *results.OLTP
	larger *results.OLTP
	flush  *results.Flush
	scale  *results.Scale
	claims *results.Claims
	// long are the long comparisons that ran, in longRuns' order.
	long []longRun
}

// longRun is a long comparison's results: OLTP runs of 20 minutes and more, kept in a subfolder
// of their own because they take hours and are run apart from `make bench`.
type longRun struct {
	dir, heading string
	oltp         *results.OLTP
}

// longRuns are the long comparisons the report knows, by subfolder: issue 23's flush period
// against none, with the passes as they were and as they are.
var longRuns = []struct{ dir, heading string }{
	{"flush-period", ": long runs, a full-speed pass every period (issue 23, 256 MiB, at 9257fe3)"},
	{"flush-period-paced", ": long runs, a paced pass every half period (issue 23, 256 MiB, at 8bae036)"},
}

// oltpSet is one data set's OLTP results as the page shows them.
type oltpSet struct {
	oltp      *results.OLTP
	summaries []oltpSummary
	charts    chartFiles
	// heading follows the OLTP sections' headings ("" for the fitting set); prefix starts its
	// charts' file names.
	heading, prefix string
}

// oltpSets are the data sets in page order; the larger one only when it ran.
func oltpSets(in inputs) []oltpSet {
	sets := []oltpSet{{oltp: in.oltp}}
	if in.larger != nil {
		sets = append(sets, oltpSet{oltp: in.larger, heading: ": a data set larger than the cache", prefix: "larger-"})
	}
	for _, l := range in.long {
		sets = append(sets, oltpSet{oltp: l.oltp, heading: l.heading, prefix: l.dir + "-"})
	}
	for i := range sets {
		if sets[i].oltp != nil {
			sets[i].summaries = summarize(sets[i].oltp)
		}
	}
	return sets
}

// load reads what the results folder has. A missing file is not an error: `make bench` can
// run a part of the benchmarks, and the report says what was not run.
func load(dir string) (inputs, error) {
	// A mistyped folder would otherwise give a page of "not run".
	if _, err := os.Stat(dir); err != nil {
		return inputs{}, fmt.Errorf("results folder: %w", err)
	}
	var in inputs
	var oltp, larger results.OLTP
	var flush results.Flush
	var scale results.Scale
	var claims results.Claims
	for _, f := range []struct {
		name  string
		value any
		keep  func()
	}{
		{results.OLTPFile, &oltp, func() { in.oltp = &oltp }},
		{results.OLTPFileFor(results.DataSetLargerThanCache), &larger, func() { in.larger = &larger }},
		{results.FlushFile, &flush, func() { in.flush = &flush }},
		{results.ScaleFile, &scale, func() { in.scale = &scale }},
		{results.ClaimsFile, &claims, func() { in.claims = &claims }},
	} {
		err := results.Read(dir, f.name, f.value)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return inputs{}, fmt.Errorf("results folder %s: %w", dir, err)
		default:
			f.keep()
		}
	}
	for _, l := range longRuns {
		var o results.OLTP
		err := results.Read(filepath.Join(dir, l.dir), results.OLTPFile, &o)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return inputs{}, fmt.Errorf("results folder %s: %w", dir, err)
		default:
			in.long = append(in.long, longRun{dir: l.dir, heading: l.heading, oltp: &o})
		}
	}
	return in, nil
}

// generate writes docsDir/benchmarks.md and its charts from the results folder.
func generate(resultsDir, docsDir, notesFile string) error {
	in, err := load(resultsDir)
	if err != nil {
		return err
	}
	var notes string
	if notesFile != "" {
		b, err := os.ReadFile(notesFile)
		if err != nil {
			return fmt.Errorf("notes: %w", err)
		}
		notes = string(b)
	}
	dir := filepath.Join(docsDir, chartsDir)
	if err := removeCharts(dir); err != nil {
		return err
	}
	sets := oltpSets(in)
	for i := range sets {
		if sets[i].charts, err = writeCharts(dir, sets[i].prefix, sets[i].summaries); err != nil {
			return err
		}
	}
	md := render(in, sets, notes)
	if err := os.WriteFile(filepath.Join(docsDir, markdownFile), []byte(md), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", markdownFile, err)
	}
	return nil
}

// render is the whole of benchmarks.md. It depends on nothing but its arguments, so the same
// results give the same page.
func render(in inputs, sets []oltpSet, notes string) string {
	var b strings.Builder
	writeIntro(&b, in)
	writeMachine(&b, in)
	for _, set := range sets {
		writeParams(&b, set.oltp, set.heading)
		writeOLTP(&b, set.oltp, set.summaries, set.heading)
		writeChartSection(&b, set.oltp, set.summaries, set.charts, set.heading)
	}
	writeTargets(&b, targets(in, sets))
	writeFlush(&b, in.flush)
	writeScale(&b, in.scale)
	writeClaims(&b, in.claims)
	if notes != "" {
		b.WriteString("## Analysis\n\n")
		b.WriteString(notes)
		if !strings.HasSuffix(notes, "\n") {
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	var failures []string
	for _, set := range sets {
		if set.oltp != nil {
			for _, f := range set.oltp.Failures {
				if label := strings.TrimPrefix(set.heading, ": "); label != "" {
					f += " (" + label + ")"
				}
				failures = append(failures, f)
			}
		}
	}
	if len(failures) > 0 {
		b.WriteString("## Failures\n\nThese OLTP runs failed and are not in the tables above:\n\n")
		for _, f := range failures {
			fmt.Fprintf(&b, "- %s\n", inline(f))
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

func writeIntro(b *strings.Builder, in inputs) {
	b.WriteString("# flashcache benchmarks\n\n")
	b.WriteString("This page compares a MariaDB OLTP workload (sysbench) on a flashcache volume with the same " +
		"workload on the HDD alone, on flash alone and on other block caches, measures how " +
		"fast flashcache writes dirty data back to the HDD, and how the operator copes with many volumes. " +
		"It is generated by `make bench` from the JSON files it saves in `docs/benchmarks/results/` " +
		"(`make bench-report` renders it again from them): edit the benchmarks or the notes, not this file.\n\n")
	var commands []string
	addCommand := func(c string) {
		if c != "" && !slices.Contains(commands, c) {
			commands = append(commands, c)
		}
	}
	if in.oltp != nil {
		addCommand(in.oltp.Command)
	}
	if in.flush != nil {
		addCommand(in.flush.Command)
	}
	if in.scale != nil {
		addCommand(in.scale.Command)
	}
	if in.claims != nil {
		addCommand(in.claims.Command)
	}
	if len(commands) > 0 {
		b.WriteString("The results come from:\n\n```sh\n")
		for _, c := range commands {
			b.WriteString(c + "\n")
		}
		b.WriteString("```\n\n")
	}
	var when []string
	if in.oltp != nil {
		when = append(when, fmt.Sprintf("The OLTP benchmark started at %s; its sittings (a stopped benchmark resumes) took %s in all.", orDash(in.oltp.Started), duration(in.oltp.Seconds)))
		// A benchmark resumed after a change to the code holds runs of more than one revision.
		var revisions []string
		for _, r := range in.oltp.Runs {
			if r.Revision != "" && !slices.Contains(revisions, r.Revision) {
				revisions = append(revisions, r.Revision)
			}
		}
		if len(revisions) > 1 {
			when = append(when, fmt.Sprintf("Its runs measured flashcache revisions %s in that order (oltp.json says which run measured which).", strings.Join(revisions, ", ")))
		}
	}
	if in.scale != nil && !in.scale.StartedAt.IsZero() {
		when = append(when, fmt.Sprintf("The operator-scale benchmark started at %s.", in.scale.StartedAt.UTC().Format(time.RFC3339)))
	}
	if len(when) > 0 {
		b.WriteString(strings.Join(when, " ") + "\n\n")
	}
}

func writeMachine(b *strings.Builder, in inputs) {
	b.WriteString("## Machine and versions\n\n")
	var m results.Machine
	switch {
	case in.oltp != nil:
		m = in.oltp.Machine
	case in.flush != nil:
		// Without an OLTP run the flush benchmark's VM is the one to describe.
		m = in.flush.Machine
		b.WriteString("From flush.json (the OLTP benchmark did not run).\n\n")
	default:
		b.WriteString(notRun + "\n\n")
		return
	}
	table(b, []string{"", "Version or size"}, "ll", [][]string{
		{"Host CPU", orDash(m.HostCPU)},
		{"Host cores", count(m.HostCores)},
		{"Guest CPUs", count(m.GuestCPUs)},
		{"Guest memory", mibOrDash(m.GuestMemMiB)},
		{"Guest kernel", orDash(m.GuestKernel)},
		{"QEMU", orDash(m.QEMU)},
		{"MariaDB", orDash(m.MariaDB)},
		{"sysbench", orDash(m.Sysbench)},
		{"fio", orDash(m.Fio)},
		{"LVM", orDash(m.LVM)},
		{"flashcache revision", orDash(m.FlashcacheRev)},
	})
}

func writeParams(b *strings.Builder, o *results.OLTP, heading string) {
	b.WriteString("## OLTP parameters" + heading + "\n\n")
	if o == nil {
		b.WriteString(notRun + "\n\n")
		return
	}
	p := o.Params
	table(b, []string{"Parameter", "Value"}, "lr", [][]string{
		{"Data set", mibOrDash(p.DataMiB)},
		{"Tables × rows", fmt.Sprintf("%s × %s", count(p.Tables), count(p.RowsPerTable))},
		{"InnoDB buffer pool", mibOrDash(p.BufferPoolMiB)},
		{"sysbench threads", count(p.Threads)},
		{"Warm-up (discarded)", seconds(p.WarmupSeconds)},
		{"Measured run", seconds(p.MeasureSeconds)},
		{"fio run", seconds(p.FioSeconds)},
		{"Repetitions per configuration (interleaved)", count(p.Repetitions)},
		{"Cache disk (SSD)", mibOrDash(p.CacheDiskMiB)},
		{"Backing disk (HDD)", mibOrDash(p.BackingDiskMiB)},
		{"HDD throttled to", fmt.Sprintf("%s IOPS, %s MB/s", count(p.BackingIOPS), num(positive(p.BackingMBPerSec), 0))},
	})
}

func writeOLTP(b *strings.Builder, o *results.OLTP, summaries []oltpSummary, heading string) {
	b.WriteString("## OLTP results" + heading + "\n\n")
	if o == nil {
		b.WriteString(notRun + "\n\n")
		return
	}
	b.WriteString("Medians over the runs of each configuration; TPS also as \"median (min–max)\". Ratios are of " +
		"median TPS. The CV is the coefficient of variation of the 10-s interval TPS within a run (median over " +
		"the runs): how steady the throughput was. Floor and ceiling are the uncached configurations.\n\n")
	if note := emulatorsNote(o.Runs); note != "" {
		b.WriteString(note + "\n\n")
	}
	b.WriteString("### Throughput and latency\n\n")
	var rows [][]string
	for _, s := range summaries {
		rows = append(rows, []string{
			configLabel(s.config), inline(s.config.Description), strconv.Itoa(len(s.runs)),
			tpsSpread(s), ratioString(s.tps, medianTPS(summaries, allFlash)),
			ratioString(s.tps, medianTPS(summaries, bcacheStock)), ratioString(s.tps, medianTPS(summaries, hddOnly)),
			num(s.p95Ms, 1), num(s.p99Ms, 1), percent(s.intervalCV),
		})
	}
	table(b, []string{"Configuration", "Description", "Runs", "TPS median (min–max)", "vs all-flash",
		"vs bcache-stock", "vs HDD", "p95 latency (ms)", "p99 latency (ms)", "10-s TPS CV (%)"}, "llrrrrrrrr", rows)

	writeDirtyAge(b, summaries)

	b.WriteString("### Where the I/O went\n\n")
	b.WriteString("Read hit ratio: the share of the bytes read from the volume that the HDD did not serve. " +
		"Per-transaction counts are over the measured run, and so is what bcache bypassed (sequential I/O past its cutoff, or a cache it judged congested). Dirty data is what was left in the cache when the " +
		"run ended, and flush is how long writing it back took. The fio columns are of a separate fio run of " +
		"random I/O on the same volume.\n\n")
	rows = nil
	for _, s := range summaries {
		flush := num(s.flushSeconds, 1)
		if s.incompleteFlushes > 0 {
			flush += fmt.Sprintf(" (%d unfinished)", s.incompleteFlushes)
		}
		rows = append(rows, []string{
			configLabel(s.config), percent(s.readHitRatio), num(s.hddReadsPerTxn, 2), num(s.hddWritesPerTxn, 2),
			num(s.ssdKiBPerTxn, 1), num(s.bypassedMiB, 1), num(s.copySeconds, 0), num(s.dirtyMiB, 0), flush, num(s.fioIOPS, 0),
			num(s.fioHDDReadsPerKiloOps, 0),
		})
	}
	table(b, []string{"Configuration", "Read hits (%)", "HDD reads / txn", "HDD writes / txn",
		"SSD KiB written / txn", "Bypassed by bcache (MiB)", "Initial copy (s)", "Dirty after run (MiB)", "Flush (s)", "fio IOPS (r+w)",
		"fio HDD reads / 1000 ops"}, "lrrrrrrrrrr", rows)
}

// writeDirtyAge is the age of dirty data the markers measured, against flashcache's bound.
func writeDirtyAge(b *strings.Builder, summaries []oltpSummary) {
	var rows [][]string
	for _, s := range summaries {
		if math.IsNaN(s.oldestDirtySeconds) {
			continue
		}
		bound, within := dash, dash
		if s.config.DirtyAgeBoundSeconds > 0 {
			bound = num(s.config.DirtyAgeBoundSeconds, 0)
			within = "yes"
			if s.oldestDirtySeconds > s.config.DirtyAgeBoundSeconds {
				within = "**no**"
			}
		}
		rows = append(rows, []string{configLabel(s.config), strconv.Itoa(s.dirtyAgeMarkers), num(s.dirtyAgeMedian, 0),
			num(s.oldestDirtySeconds, 0), bound, within})
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("### Age of dirty data\n\n")
	b.WriteString("During each measured run a marker block is written through the volume (past the end of the " +
		"filesystem, flushed), and the raw HDD is read every 5 s until the marker is there; then the next one. " +
		"The oldest is the longest any marker took, or the longest one still waited when a run ended, over all " +
		"runs. The bound is flashcache's for the configuration's flush period: the period, then the pass's limit " +
		"(the period, at least a minute); none without a period.\n\n")
	table(b, []string{"Configuration", "Markers on the HDD", "Median age (s)", "Oldest seen (s)", "Bound (s)",
		"Within the bound"}, "lrrrrl", rows)
}

// configLabel marks the uncached configurations, which bound the cached ones.
func configLabel(c results.Config) string {
	name := "`" + c.Name + "`"
	switch {
	case c.Cached:
		return name
	case c.Name == allFlash:
		return name + " (ceiling)"
	default:
		return name + " (floor)"
	}
}

func tpsSpread(s oltpSummary) string {
	if len(s.runs) == 0 {
		return dash
	}
	return fmt.Sprintf("%s (%s–%s)", num(s.tps, 1), num(s.tpsMin, 1), num(s.tpsMax, 1))
}

func writeChartSection(b *strings.Builder, o *results.OLTP, summaries []oltpSummary, charts chartFiles, heading string) {
	b.WriteString("## TPS over time" + heading + "\n\n")
	if o == nil {
		b.WriteString(notRun + "\n\n")
		return
	}
	if charts.median != "" {
		b.WriteString("Median TPS per configuration, the whiskers from the slowest to the fastest run:\n\n")
		fmt.Fprintf(b, "![median TPS per configuration](%s)\n\n", charts.median)
	}
	b.WriteString("TPS of each 10-s interval of the measured runs, one line per run; every chart has the same " +
		"y axis.\n\n")
	for _, s := range summaries {
		fmt.Fprintf(b, "### %s\n\n", s.config.Name)
		if file, ok := charts.perConfig[s.config.Name]; ok {
			fmt.Fprintf(b, "![TPS over time, %s](%s)\n\n", s.config.Name, file)
		} else {
			b.WriteString("No run with interval TPS.\n\n")
		}
	}
}

func writeFlush(b *strings.Builder, f *results.Flush) {
	b.WriteString("## Flush efficiency\n\n")
	if f == nil {
		b.WriteString(notRun + "\n\n")
		return
	}
	b.WriteString("Dirty data written back by `flashcache node flush`, against the HDD written directly by fio " +
		"(O_DIRECT, 32 in flight): with requests of the size the flush itself sent (the same I/O pattern; the target's " +
		"ratio, whose physical limit is 1) and with the block size the data was written in. The emulated HDD caps " +
		"requests per second, not seeks, so a flush that sends smaller requests than the data was written in is " +
		"slower here than on a disk that merges sequential writes.\n\n")
	var rows [][]string
	for _, p := range f.Patterns {
		rows = append(rows, []string{
			inline(p.Name), num(float64(p.DirtyBytes)/(1<<20), 0), num(p.FlushSeconds, 1), num(p.FlushMBps, 2),
			fmt.Sprintf("%s × %s", count(int(p.FlushHDDWrites)), size(p.FlushHDDRequestBytes)), num(p.FlushHDDWritesPerSec, 0),
			num(p.RequestBaselineMBps, 2), num(p.Ratio, 2), num(p.BaselineMBps, 2), num(p.BlockRatio, 2),
		})
	}
	table(b, []string{"Pattern", "Dirty (MiB)", "Flush (s)", "Flush (MiB/s)", "HDD writes during the flush", "HDD writes/s",
		"HDD direct, same requests (MiB/s)", "Ratio", "HDD direct, written block size (MiB/s)", "Ratio to that"}, "lrrrrrrrrr", rows)
}

func writeScale(b *strings.Builder, s *results.Scale) {
	b.WriteString("## Operator at scale\n\n")
	if s == nil {
		b.WriteString(notRun + "\n\n")
		return
	}
	if s.Simulation != "" {
		fmt.Fprintf(b, "The node agent here is simulated: the nodes are kwok nodes without block devices. "+
			"As scale.json puts it: %s.\n\n", strings.TrimSuffix(inline(s.Simulation), "."))
	}
	var notes []string
	// footnote numbers a note and returns its marker; an empty note gets none.
	footnote := func(note string) string {
		if note == "" {
			return ""
		}
		notes = append(notes, note)
		return fmt.Sprintf(" <sup>%d</sup>", len(notes))
	}
	rows := [][]string{
		{"Volumes / nodes", fmt.Sprintf("%d FlashCacheVolumes on %d nodes", s.Volumes, s.Nodes)},
		{"Kubernetes", orDash(s.KubernetesVersion)},
		{"Time to first / half / all PersistentVolumes", fmt.Sprintf("%s / %s / %s s", num(s.TimeToFirstPVSeconds, 1),
			num(s.TimeToHalfPVsSeconds, 1), num(s.TimeToAllPVsSeconds, 1))},
		{"Time to all volumes Ready", num(s.TimeToAllReadySeconds, 1) + " s"},
		{"Operator CPU, volumes" + footnote(s.OperatorCPUSecondsNote), num(s.OperatorCPUSeconds, 2) + " s"},
		{"Operator CPU, evictions", num(s.OperatorCPUSecondsEvictions, 2) + " s"},
		{"Operator peak RSS" + footnote(s.OperatorPeakRSSNote), fmt.Sprintf("%s MiB (%s MiB after the PVs, %s MiB before the volumes)",
			mib(s.OperatorPeakRSSBytes), mib(s.OperatorRSSAfterPVsBytes), mib(s.OperatorStartupRSSBytes))},
		{"Eviction, client side" + footnote(s.EvictionLatencyNote), fmt.Sprintf("p50 %s ms, p99 %s ms, max %s ms (%d evictions, %d in flight)",
			num(s.EvictionLatencyMs.P50, 1), num(s.EvictionLatencyMs.P99, 1), num(s.EvictionLatencyMs.Max, 1), s.Evictions, s.EvictionConcurrency)},
		{"Eviction dry run, client side" + footnote(s.DryRunEvictionLatencyNote), fmt.Sprintf("p50 %s ms, p99 %s ms",
			num(s.DryRunEvictionLatencyMs.P50, 1), num(s.DryRunEvictionLatencyMs.P99, 1))},
		{"Webhook, server side" + footnote(s.WebhookServerLatencyNote), webhookLatencyOrDash(s.WebhookServerLatencyMs)},
		{"Webhook, the API server's view" + footnote(s.APIServerWebhookLatencyNote), bucketBoundsOrDash(s.APIServerWebhookLatencyMs)},
		{"Machine", fmt.Sprintf("%s CPUs, load average at start %s", count(s.MachineCPUs), orDash(s.MachineLoadAverageAtStart))},
		{"flashcache", orDash(s.FlashcacheVersion)},
	}
	for i := range rows {
		rows[i][1] = inline(rows[i][1])
	}
	table(b, []string{"Measure", "Value"}, "ll", rows)
	for i, n := range notes {
		fmt.Fprintf(b, "<sup>%d</sup> %s\n\n", i+1, inline(n))
	}
}

// writeClaims renders claims.json: how long a claim takes to be Bound.
func writeClaims(b *strings.Builder, c *results.Claims) {
	b.WriteString("## Claims to Bound\n\n")
	if c == nil {
		b.WriteString(notRun + "\n\n")
		return
	}
	fmt.Fprintf(b, "%d claims of %s, each with a pod on node %s, created at once; each timed from its creation to Bound as a watch "+
		"saw it, through kube-scheduler, the external-provisioner sidecar, the operator's CSI controller and the binder. "+
		"With %d claims the p99 is the slowest one. What is simulated: %s.\n\n",
		c.Claims, c.ClaimSize, c.Node, c.Claims, strings.TrimSuffix(inline(c.Simulation), "."))
	rows := [][]string{
		{"Claim to Bound", fmt.Sprintf("p50 %s ms, p99 %s ms, max %s ms, mean %s ms", num(c.BoundMs.P50, 0), num(c.BoundMs.P99, 0),
			num(c.BoundMs.Max, 0), num(c.BoundMs.Mean, 0))},
		{"All Bound", num(c.AllBoundSeconds, 1) + " s after the first claim"},
		{"Kubernetes / provisioner", orDash(c.KubernetesVersion) + " / " + orDash(c.ProvisionerVersion)},
		{"Machine", fmt.Sprintf("%s CPUs, load average at start %s", count(c.MachineCPUs), orDash(c.MachineLoadAverageAtStart))},
		{"flashcache", orDash(c.FlashcacheVersion)},
	}
	for i := range rows {
		rows[i][1] = inline(rows[i][1])
	}
	table(b, []string{"Measure", "Value"}, "ll", rows)
}

// webhookLatencyOrDash prints the operator's own webhook latency: well under a millisecond, so
// with microseconds.
func webhookLatencyOrDash(l *results.LatencyMs) string {
	if l == nil {
		return dash
	}
	return fmt.Sprintf("p50 %s ms, p99 %s ms", num(l.P50, 3), num(l.P99, 3))
}

// bucketBoundsOrDash prints the API server's latency, whose percentiles are only the bounds of
// the classic buckets they fall in; its mean is exact.
func bucketBoundsOrDash(l *results.LatencyMs) string {
	if l == nil {
		return dash
	}
	return fmt.Sprintf("p50 ≤ %s ms, p99 ≤ %s ms, mean %s ms", num(l.P50, 0), num(l.P99, 0), num(l.Mean, 1))
}

// table writes a markdown table; align has one letter per column, l or r.
func table(b *strings.Builder, header []string, align string, rows [][]string) {
	b.WriteString("|")
	for _, h := range header {
		b.WriteString(" " + h + " |")
	}
	b.WriteString("\n|")
	for _, a := range align {
		if a == 'r' {
			b.WriteString(" ---: |")
		} else {
			b.WriteString(" --- |")
		}
	}
	b.WriteString("\n")
	for _, row := range rows {
		b.WriteString("|")
		for _, cell := range row {
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// inline makes free text from the JSON safe inside a table cell or a list item.
func inline(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// num prints x with the given decimals, or a dash for a value that was not measured.
func num(x float64, decimals int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return dash
	}
	return strconv.FormatFloat(x, 'f', decimals, 64)
}

// percent prints a ratio as a percentage.
func percent(ratio float64) string { return num(100*ratio, 1) }

// positive is x, or NaN when x is zero or less: a count or a limit of zero was not recorded.
func positive(x float64) float64 {
	if x <= 0 {
		return math.NaN()
	}
	return x
}

func count(n int) string { return num(positive(float64(n)), 0) }

func mibOrDash(n int) string {
	if n <= 0 {
		return dash
	}
	return strconv.Itoa(n) + " MiB"
}

func seconds(n int) string {
	if n <= 0 {
		return dash
	}
	return strconv.Itoa(n) + " s"
}

func mib(bytes int64) string { return num(positive(float64(bytes))/(1<<20), 1) }

// size prints a block size in the unit it is a whole number of.
func size(bytes int64) string {
	switch {
	case bytes <= 0:
		return dash
	case bytes%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", bytes>>20)
	case bytes%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", bytes>>10)
	case bytes < 1<<10:
		return fmt.Sprintf("%d B", bytes)
	}
	// An average request size: a decimal is enough.
	return fmt.Sprintf("%.1f KiB", float64(bytes)/(1<<10))
}

func duration(secs float64) string {
	if secs <= 0 || math.IsNaN(secs) {
		return dash
	}
	total := int(math.Round(secs))
	h, m, s := total/3600, total%3600/60, total%60
	switch {
	case h > 0:
		return fmt.Sprintf("%d h %02d min", h, m)
	case m > 0:
		return fmt.Sprintf("%d min %02d s", m, s)
	}
	return fmt.Sprintf("%d s", s)
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return dash
	}
	return s
}

// emulatorsNote says so when the runs ran on more than one emulator (a benchmark resumed after
// QEMU changed): under TCG the emulator is the guest's CPU.
func emulatorsNote(runs []results.OLTPRun) string {
	var emulators []string
	count := map[string]int{}
	for _, r := range runs {
		if r.QEMU == "" {
			continue
		}
		if count[r.QEMU] == 0 {
			emulators = append(emulators, r.QEMU)
		}
		count[r.QEMU]++
	}
	if len(emulators) < 2 {
		return ""
	}
	var parts []string
	for _, e := range emulators {
		parts = append(parts, fmt.Sprintf("%s (%d runs)", inline(e), count[e]))
	}
	return "These runs ran on more than one emulator, " + strings.Join(parts, ", ") +
		": the machine table names the last sitting's, and the results file says which run ran on which."
}
