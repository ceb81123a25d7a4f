//go:build bench

package oltp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/test/bench/results"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// params are the OLTP run's sizes. The defaults keep the data set 8 times the buffer pool and,
// on the fitting set, well inside the cache. They are long runs: a 5-minute warm-up, then 20
// minutes measured, so that the default 5-minute flush period's passes fire several times in
// each run; about half an hour per run with its copy, fio and flush, so the whole matrix (11
// and 8 configurations, 3 times) is a day of TCG, which a benchmark that resumes where it
// stopped can take in parts. The smoke in `make test` shrinks them.
//
// BENCH_DATA_SET=larger-than-cache measures the same data set on an SSD whose cache partition
// (80% of it, the default over-provisioning) holds half of it: the hot set of sysbench's pareto
// then competes for the cache, and the cache's admission and replacement decide. bcache registers
// no cache of 256 MiB or less (512 buckets), so this set needs BENCH_DATA_MIB of 520 or more
// (the default 1024): on the 256-MiB set of the long fitting runs the engine refuses the SSD.
func params(t *testing.T) results.OLTPParams {
	dataSet := os.Getenv("BENCH_DATA_SET")
	if dataSet == "" {
		dataSet = results.DataSetFits
	}
	if !slices.Contains(results.DataSets, dataSet) {
		t.Fatalf("BENCH_DATA_SET=%s: want one of %s", dataSet, strings.Join(results.DataSets, ", "))
	}
	dataMiB := envInt(t, "BENCH_DATA_MIB", 1024)
	cacheDiskMiB := 4096
	if dataSet == results.DataSetLargerThanCache {
		cacheDiskMiB = dataMiB * 5 / 8
	}
	p := results.OLTPParams{
		DataSet:         dataSet,
		DataMiB:         dataMiB,
		Tables:          envInt(t, "BENCH_TABLES", 8),
		BufferPoolMiB:   envInt(t, "BENCH_BUFFER_POOL_MIB", 128),
		Threads:         envInt(t, "BENCH_THREADS", 4),
		WarmupSeconds:   envInt(t, "BENCH_WARMUP_SECONDS", 300),
		MeasureSeconds:  envInt(t, "BENCH_MEASURE_SECONDS", 1200),
		FioSeconds:      envInt(t, "BENCH_FIO_SECONDS", 30),
		Repetitions:     envInt(t, "BENCH_REPETITIONS", 3),
		CacheDiskMiB:    envInt(t, "BENCH_CACHE_DISK_MIB", cacheDiskMiB),
		BackingIOPS:     vmharness.DefaultHDDIOPS,
		BackingMBPerSec: float64(vmharness.DefaultHDDBytesPerSec) / (1 << 20),
	}
	// sysbench's rows take about 300 bytes each with the secondary index (3400 per MiB measured
	// in this guest).
	p.RowsPerTable = p.DataMiB * 3400 / p.Tables
	p.BackingDiskMiB = filesystemMiB(p) + 1024
	return p
}

// filesystemMiB is the size of the XFS that holds MariaDB's files: the tables, InnoDB's system
// tablespace, undo and redo logs, and room to grow.
func filesystemMiB(p results.OLTPParams) int { return p.DataMiB*5/4 + 512 }

// datasetDisk holds the prepared database. It is made once per size and kept in the build
// cache, so that every configuration starts from the same bytes and a warm `make bench` skips
// the hour-long insert.
func datasetDisk(t *testing.T, p results.OLTPParams) (vmharness.Disk, bool) {
	dir := os.Getenv("BENCH_DATASET_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	image := filepath.Base(vmharness.ImageFromEnv(t))
	path := filepath.Join(dir, fmt.Sprintf("oltp-%dt-%dr-4k-%s.img", p.Tables, p.RowsPerTable, image))
	_, err := os.Stat(path + ".ok")
	// Unthrottled: copying it must not be what a configuration's time measures.
	return vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-bench-data", Size: int64(filesystemMiB(p)) << 20, Path: path, IOPS: -1, BytesPerSec: -1}, err == nil
}

// mariadbConfig points MariaDB at the volume under test. O_DIRECT keeps InnoDB's reads off the
// guest's page cache, so the buffer pool is the only cache above the storage.
func mariadbConfig(p results.OLTPParams) string {
	return fmt.Sprintf(`mkdir -p /mnt/db
cat >/etc/mysql/mariadb.conf.d/99-bench.cnf <<'EOF'
[mysqld]
datadir = /mnt/db/mysql
innodb_buffer_pool_size = %dM
innodb_flush_method = O_DIRECT
innodb_flush_log_at_trx_commit = 1
innodb_log_file_size = 256M
max_connections = 64
EOF
systemctl unmask mariadb.service >/dev/null 2>&1
`, p.BufferPoolMiB)
}

func sysbenchArgs(p results.OLTPParams) string {
	return fmt.Sprintf("sysbench oltp_read_write --db-driver=mysql --mysql-user=root --mysql-socket=/run/mysqld/mysqld.sock --tables=%d --table-size=%d --rand-type=pareto", p.Tables, p.RowsPerTable)
}

func TestOLTP(t *testing.T) {
	p := params(t)
	storages, err := selectStorages(os.Getenv("BENCH_CONFIGS"), p.DataSet)
	if err != nil {
		t.Fatal(err)
	}
	out := outDir(t)
	// A benchmark of hours may not finish in one sitting: what an earlier, interrupted one
	// measured with the same parameters is kept, and only the rest runs.
	res, err := results.ResumeOLTP(out, p)
	if err != nil {
		t.Fatal(err)
	}
	var todo int
	for rep := 1; rep <= p.Repetitions; rep++ {
		for _, s := range storages {
			if !res.Has(s.Name, rep) {
				todo++
			}
		}
	}
	t.Logf("runs to measure: %d; runs kept from %s: %d", todo, filepath.Join(out, results.OLTPFileFor(p.DataSet)), len(res.Runs))
	if todo == 0 {
		t.Logf("nothing left to measure\n%s", oltpTable(res))
		return
	}
	src, prepared := datasetDisk(t, p)
	const memMiB = 2048
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Hour)
	defer cancel()
	g := bootGuest(t, ctx, memMiB, map[string]vmharness.Disk{
		"NVME": {Kind: vmharness.NVMe, Serial: "fc-bench-nvme", Size: int64(p.CacheDiskMiB) << 20},
		"HDD":  {Kind: vmharness.HDD, Serial: "fc-bench-hdd", Size: int64(p.BackingDiskMiB) << 20},
		// The second slow disk of the carved configurations' pool, where their neighbour lives.
		"HDD2": {Kind: vmharness.HDD, Serial: "fc-bench-hdd2", Size: int64(p.BackingDiskMiB) << 20},
		"SRC":  src,
	})
	g.must(mariadbConfig(p))
	if !prepared {
		start := time.Now()
		// 4 KiB sectors: dm-writecache presents 4 KiB logical blocks, and XFS made for 512-byte
		// ones cannot be mounted there.
		g.must(fmt.Sprintf(`mkfs.xfs -q -f -s size=4096 $SRC
mount $SRC /mnt/db
mkdir /mnt/db/mysql && chown mysql:mysql /mnt/db/mysql
mariadb-install-db --user=mysql --datadir=/mnt/db/mysql >/dev/null
systemctl start mariadb
mariadb -e 'create database sbtest'
%s --threads=%d prepare >/dev/null
systemctl stop mariadb
umount /mnt/db
sync`, sysbenchArgs(p), p.Tables))
		if err := os.WriteFile(src.Path+".ok", []byte(fmt.Sprintf("%+v\n", p)), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("data set prepared in %s: %d tables of %d rows", time.Since(start).Round(time.Second), p.Tables, p.RowsPerTable)
	}

	if res.Started == "" {
		res.Started = time.Now().UTC().Format(time.RFC3339)
	}
	// A sitting of fewer repetitions than the file's (one more of a configuration, say) leaves the
	// file's count as it was.
	repetitions := max(res.Params.Repetitions, p.Repetitions)
	res.Command, res.Params = os.Getenv("BENCH_COMMAND"), p
	res.Params.Repetitions = repetitions
	res.SetMachine(g.machine(memMiB))
	for _, s := range storages {
		res.AddConfig(s.Config)
	}
	begin, secondsBefore := time.Now(), res.Seconds
	save := func() {
		res.Seconds = secondsBefore + time.Since(begin).Seconds()
		if err := results.Write(out, results.OLTPFileFor(p.DataSet), res); err != nil {
			t.Fatal(err)
		}
	}
	// Interleaved (A B C A B C ...): a slow spell of the host lands on every configuration alike.
	for rep := 1; rep <= p.Repetitions; rep++ {
		for _, s := range storages {
			if res.Has(s.Name, rep) {
				continue
			}
			start := time.Now()
			run, err := g.runOLTP(p, s)
			if err != nil {
				t.Errorf("%s, repetition %d: %v", s.Name, rep, err)
				res.Failures = append(res.Failures, fmt.Sprintf("%s #%d: %v", s.Name, rep, firstLine(err.Error())))
				save()
				continue
			}
			run.Config, run.Rep = s.Name, rep
			run.Revision, run.QEMU, run.Ended = res.Machine.FlashcacheRev, res.Machine.QEMU, time.Now().UTC().Format(time.RFC3339)
			res.Runs = append(res.Runs, run)
			// Saved as each run ends, so that an interrupted benchmark keeps what it measured.
			save()
			t.Logf("%-22s #%d %6.1f TPS (10-s CV %4.1f%%) p95 %6.1f ms, p99 %6.1f ms, oldest dirty %4.0f s (%d markers), hits %5.1f%%, HDD %5.2f r + %5.2f w/txn, SSD %6.1f KiB/txn, copy %4.0f s, flush %5.1f s of %s; fio %5.0f r + %4.0f w IOPS [%s]",
				s.Name, rep, run.TPS, 100*results.CV(run.IntervalTPS), run.P95Ms, run.P99Ms, run.OldestDirtySeconds(), len(run.DirtyAgeSeconds), 100*run.ReadHitRatio, run.HDDReadsPerTxn, run.HDDWritesPerTxn,
				run.SSDWriteBytesPerTxn/1024, run.CopySeconds, run.FlushSeconds, mib(run.DirtyBytesAfter), run.FioReadIOPS, run.FioWriteIOPS, time.Since(start).Round(time.Second))
		}
	}
	t.Logf("results in %s\n%s", filepath.Join(out, results.OLTPFileFor(p.DataSet)), oltpTable(res))
}

// runOLTP builds one configuration on blank disks, copies the data set onto it, runs MariaDB's
// warm-up and measured load, then fio, then the tool's blocking flush, and takes it apart.
func (g *guest) runOLTP(p results.OLTPParams, s storage) (results.OLTPRun, error) {
	var run results.OLTPRun
	ctx := g.ctx
	if _, err := g.script(ctx, resetDisks); err != nil {
		return run, fmt.Errorf("reset: %w", err)
	}
	dev, err := g.script(ctx, s.setup)
	if err != nil {
		return run, fmt.Errorf("setup: %w", err)
	}
	dev = lastLine(dev)
	if !strings.HasPrefix(dev, "/dev/") {
		return run, fmt.Errorf("setup printed %q, not a device", dev)
	}
	export := "export DEV=" + dev + "\n"
	if s.backing != "" {
		export += "export BACKING=" + s.backing + "\n"
	}
	if s.afterApply != "" {
		if _, err := g.script(ctx, export+s.afterApply); err != nil {
			return run, fmt.Errorf("after setup: %w", err)
		}
	}
	names, err := g.script(ctx, export+`basename $DEV; basename $(readlink -f $HDD); basename $(readlink -f $NVME)`)
	if err != nil {
		return run, err
	}
	devs := strings.Split(names, "\n")
	top, hdd, nvme := devs[0], devs[1], devs[2]

	start := time.Now()
	if _, err := g.script(ctx, export+fmt.Sprintf("dd if=$SRC of=$DEV bs=1M count=%d iflag=direct oflag=direct status=none && sync", filesystemMiB(p))); err != nil {
		return run, fmt.Errorf("initial copy: %w", err)
	}
	run.CopySeconds = time.Since(start).Seconds()

	if _, err := g.script(ctx, export+"mount -o nouuid $DEV /mnt/db && systemctl start mariadb"); err != nil {
		return run, fmt.Errorf("start MariaDB: %w", err)
	}
	if s.kind == flashcache {
		// What the agent (or a host's flashcache node run) does: a flush pass every flushPeriod.
		if _, err := g.script(ctx, flushPassLoop); err != nil {
			return run, fmt.Errorf("time-based flush: %w", err)
		}
	}
	sysbench := sysbenchArgs(p) + fmt.Sprintf(" --threads=%d", p.Threads)
	if _, err := g.script(ctx, fmt.Sprintf("%s --time=%d run >/dev/null", sysbench, p.WarmupSeconds)); err != nil {
		return run, fmt.Errorf("warm-up: %w", err)
	}
	before, err := g.blockStats(ctx, top, hdd, nvme)
	if err != nil {
		return run, err
	}
	bypassedBefore, err := g.bytesFrom(ctx, export, s.bypassedBytesScript())
	if err != nil {
		return run, fmt.Errorf("bypassed bytes: %w", err)
	}
	if s.samplesDirtyAge() {
		if _, err := g.script(ctx, export+fmt.Sprintf("export FS_MIB=%d\n", filesystemMiB(p))+dirtyAgeSampler); err != nil {
			return run, fmt.Errorf("start the dirty-age sampler: %w", err)
		}
	}
	if s.onBcache() {
		if _, err := g.script(ctx, export+writebackSampler); err != nil {
			return run, fmt.Errorf("start the writeback sampler: %w", err)
		}
	}
	logFrom := int64(0)
	if s.kind == flashcache {
		if logFrom, err = g.bytesFrom(ctx, "", "wc -l </var/log/flashcache-run.log"); err != nil {
			return run, fmt.Errorf("flush loop's log: %w", err)
		}
	}
	out, err := g.script(ctx, fmt.Sprintf("%s --time=%d --report-interval=10 --percentile=95 --histogram=on run", sysbench, p.MeasureSeconds))
	if err != nil {
		return run, fmt.Errorf("measured run: %w", err)
	}
	if s.kind == flashcache {
		passLog, err := g.script(ctx, fmt.Sprintf("tail -n +%d /var/log/flashcache-run.log | grep -E 'flush pass done|finished in writethrough|write limit' || true", logFrom+1))
		if err != nil {
			return run, fmt.Errorf("flush loop's log: %w", err)
		}
		results.ParsePassLog(&run, passLog)
	}
	if s.onBcache() {
		samples, err := g.script(ctx, stopWritebackSampler)
		if err != nil {
			return run, fmt.Errorf("writeback sampler: %w", err)
		}
		if run.Writeback, err = results.ParseWritebackSamples(samples); err != nil {
			return run, err
		}
	}
	if s.samplesDirtyAge() {
		ages, err := g.script(ctx, stopDirtyAgeSampler)
		if err != nil {
			return run, fmt.Errorf("dirty-age sampler: %w", err)
		}
		if run.DirtyAgeSeconds, run.DirtyAgeOpenSeconds, err = results.ParseDirtyAges(ages); err != nil {
			return run, err
		}
	}
	after, err := g.blockStats(ctx, top, hdd, nvme)
	if err != nil {
		return run, err
	}
	bypassedAfter, err := g.bytesFrom(ctx, export, s.bypassedBytesScript())
	if err != nil {
		return run, fmt.Errorf("bypassed bytes: %w", err)
	}
	run.BypassedBytes = bypassedAfter - bypassedBefore
	sb, err := results.ParseSysbench(out)
	if err != nil {
		return run, err
	}
	run.Transactions, run.TPS, run.IntervalTPS, run.P95Ms, run.P99Ms = sb.Transactions, sb.TPS, sb.IntervalTPS, sb.P95Ms, sb.P99Ms
	if run.P99Ms == 0 {
		return run, fmt.Errorf("sysbench printed no latency histogram (--histogram=on): no p99")
	}
	if sb.Transactions > 0 {
		txns := float64(sb.Transactions)
		dTop, dHDD, dNVMe := after[top].Sub(before[top]), after[hdd].Sub(before[hdd]), after[nvme].Sub(before[nvme])
		run.ReadHitRatio = results.ReadHitRatio(dTop, dHDD)
		run.HDDReadsPerTxn = float64(dHDD.Reads) / txns
		run.HDDWritesPerTxn = float64(dHDD.Writes) / txns
		run.SSDWriteBytesPerTxn = float64(dNVMe.WriteSectors) * 512 / txns
	}
	if _, err := g.script(ctx, "systemctl stop mariadb && umount /mnt/db"); err != nil {
		return run, fmt.Errorf("stop MariaDB: %w", err)
	}

	// Random 16 KiB reads and writes (InnoDB's page), 70% reads, zipf-distributed over the data
	// set, O_DIRECT, 16 in flight: the disks decide, not the emulated CPU.
	fioBefore, err := g.blockStats(ctx, hdd)
	if err != nil {
		return run, err
	}
	fioOut, err := g.script(ctx, export+fmt.Sprintf(`fio --name=zipf --filename=$DEV --size=%dM --rw=randrw --rwmixread=70 --bs=16k --direct=1 --ioengine=libaio --iodepth=16 --random_distribution=zipf:1.2 --time_based --runtime=%d --output-format=json`, filesystemMiB(p), p.FioSeconds))
	if err != nil {
		return run, fmt.Errorf("fio: %w", err)
	}
	fio, err := results.ParseFio([]byte(fioOut))
	if err != nil {
		return run, err
	}
	fioAfter, err := g.blockStats(ctx, hdd)
	if err != nil {
		return run, err
	}
	run.FioReadIOPS, run.FioWriteIOPS, run.FioReadP95Ms = fio.ReadIOPS, fio.WriteIOPS, fio.ReadP95Ms
	if ops := (fio.ReadIOPS + fio.WriteIOPS) * float64(p.FioSeconds); ops > 0 {
		run.FioHDDReadsPerKiloOps = float64(fioAfter[hdd].Sub(fioBefore[hdd]).Reads) / ops * 1000
	}

	if _, err := g.script(ctx, stopFlushPassLoop); err != nil {
		return run, err
	}
	if run.DirtyBytesAfter, err = g.bytesFrom(ctx, export, s.dirtyBytesScript()); err != nil {
		return run, fmt.Errorf("dirty data: %w", err)
	}
	flushCtx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	start = time.Now()
	if _, err := g.script(flushCtx, export+s.flushScript()); err != nil {
		return run, fmt.Errorf("flush: %w", err)
	}
	run.FlushSeconds = time.Since(start).Seconds()
	return run, nil
}

// bytesFrom runs a script that prints a number of bytes; 0 for no script.
func (g *guest) bytesFrom(ctx context.Context, export, script string) (int64, error) {
	if script == "" {
		return 0, nil
	}
	out, err := g.script(ctx, export+script)
	if err != nil {
		return 0, err
	}
	var n int64
	if _, err := fmt.Sscan(out, &n); err != nil {
		return 0, fmt.Errorf("%q: %w", out, err)
	}
	return n, nil
}

// resetDisks takes down whatever the previous configuration built and leaves both disks blank,
// the SSD discarded: every configuration starts with a cold cache. Nothing is flushed; the data
// set is copied afresh each time. A run that failed half way may have left its time-based
// flush or its dirty-age sampler running.
const resetDisks = `[ -f /run/bench-flush-loop.pid ] && kill $(cat /run/bench-flush-loop.pid) 2>/dev/null; rm -f /run/bench-flush-loop.pid
[ -f /run/bench-age.pid ] && kill $(cat /run/bench-age.pid) 2>/dev/null; rm -f /run/bench-age.pid
pkill -x fio 2>/dev/null || true; while pgrep -x fio >/dev/null; do sleep 0.2; done
systemctl stop mariadb 2>/dev/null || true
umount /mnt/db 2>/dev/null || true
vgremove -q -ff -y bench >/dev/null 2>&1 || true
for f in /sys/block/bcache*/bcache/stop; do [ -e "$f" ] && echo 1 >"$f"; done
for s in /sys/fs/bcache/*-*-*-*-*; do [ -e "$s/stop" ] && echo 1 >"$s/stop"; done
for i in $(seq 100); do ls /sys/fs/bcache/ | grep -q -- - || break; sleep 0.2; done
for i in $(seq 100); do ls /sys/block/ | grep -q bcache || break; sleep 0.2; done
vgremove -q -ff -y fcp-bench >/dev/null 2>&1 || true
rm -rf /var/lib/flashcache
for d in $(lsblk -nrpo NAME $(readlink -f $NVME) | tail -n +2) $(readlink -f $NVME) $(readlink -f $HDD) $(readlink -f $HDD2); do wipefs -q -a $d; done
sgdisk -q --zap-all $(readlink -f $NVME) >/dev/null 2>&1 || true
blkdiscard -f $(readlink -f $NVME)
partprobe $(readlink -f $NVME) 2>/dev/null || true
udevadm settle
`

// flushPassLoop starts `flashcache node run`, the loop a host without Kubernetes runs (and the
// agent's twin): flush passes every spec.flushPeriod, the cutoff once the cache has filled.
const flushPassLoop = `nohup flashcache node run --config ` + volumeFile + ` --metrics-bind-address 0 >/var/log/flashcache-run.log 2>&1 &
echo $! >/run/bench-flush-loop.pid
`

// stopFlushPassLoop stops the loop; a pass under way goes on in the kernel until the flush that
// ends the run.
const stopFlushPassLoop = `[ -f /run/bench-flush-loop.pid ] || exit 0
pid=$(cat /run/bench-flush-loop.pid)
kill $pid 2>/dev/null || true
while kill -0 $pid 2>/dev/null; do sleep 0.2; done
rm -f /run/bench-flush-loop.pid`

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// oltpTable is the run's summary for the test log: medians per configuration.
func oltpTable(r results.OLTP) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %8s %8s %7s %8s %9s %9s %10s %9s\n", "config", "TPS", "p95 ms", "hits", "HDD r/t", "HDD w/t", "SSD KiB/t", "flush s", "fio IOPS")
	for _, c := range r.Configs {
		var tps, p95, hits, hr, hw, ssd, flush, fio []float64
		for _, run := range r.Runs {
			if run.Config != c.Name {
				continue
			}
			tps, p95, hits = append(tps, run.TPS), append(p95, run.P95Ms), append(hits, run.ReadHitRatio)
			hr, hw, ssd = append(hr, run.HDDReadsPerTxn), append(hw, run.HDDWritesPerTxn), append(ssd, run.SSDWriteBytesPerTxn/1024)
			flush, fio = append(flush, run.FlushSeconds), append(fio, run.FioReadIOPS+run.FioWriteIOPS)
		}
		m := results.Median
		fmt.Fprintf(&b, "%-22s %8.1f %8.1f %6.1f%% %8.2f %9.2f %9.1f %10.1f %9.0f\n", c.Name, m(tps), m(p95), 100*m(hits), m(hr), m(hw), m(ssd), m(flush), m(fio))
	}
	return b.String()
}
