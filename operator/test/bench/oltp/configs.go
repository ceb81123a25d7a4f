//go:build bench

package oltp

import (
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/test/bench/results"
)

// storage is one configuration of the comparison: how to build the volume on blank disks, and
// how its user would flush it.
type storage struct {
	results.Config
	// setup builds the volume on blank disks and prints its block device on its last line.
	setup string
	// flushSpec, for flashcache configurations, is the spec the volume file carries.
	flushSpec string
	// kind chooses the dirty-data reading and the blocking flush.
	kind storageKind
	// afterApply runs after setup (sysfs knobs the engine does not set, for exploring one).
	afterApply string
	// backing, when set, is the volume's backing device if it is not $HDD itself (a carved
	// volume's logical volume): the dirty-age sampler reads it raw.
	backing string
	// flushVolume, when set, is the one volume of the volume file the run's flush is of.
	flushVolume string
}

type storageKind int

const (
	uncached storageKind = iota
	stockBcache
	flashcache
	lvmCache
	lvmWritecache
)

// unboundedSpec is flashcache-unbounded's spec lines, which its variants extend: no age bound,
// and the initial copy around the cache, as stock bcache.
const unboundedSpec = "  flushPeriod: 0s\n  cacheSequentialUntilFull: false\n"

// volumeFile is where flashcache configurations keep their spec in the guest.
const volumeFile = "/root/bench-volume.yaml"

// flashcacheSetup writes the volume file and applies it with the binary under test; the same
// engine the agent and the Ansible role run.
func flashcacheSetup(extra string) string { return flashcacheSetupWith("", "", extra) }

// flashcacheSetupWith is flashcacheSetup with more of cacheDevice's and safety's fields
// (", name: value").
func flashcacheSetupWith(cacheFields, safetyFields, extra string) string {
	return fmt.Sprintf(`cat >%[1]s <<'EOF'
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: bench}
spec:
  nodeName: bench
  cacheDevice: {path: $NVME%[3]s}
  backingDevice: {path: $HDD}
  safety: {trustWriteCache: true%[4]s}
%[2]sEOF
sed -i "s|\$NVME|$NVME|; s|\$HDD|$HDD|" %[1]s
flashcache node apply --config %[1]s -o json >/root/apply.json
dev=$(python3 -c 'import json;print(json.load(open("/root/apply.json"))["volumes"][0]["status"]["device"])')
echo /dev/${dev#/dev/}
`, volumeFile, extra, cacheFields, safetyFields)
}

// carvedSetup builds a pool of the SSD and the two HDDs with a volume bench carved from it,
// as large as the first HDD holds (the fitting ones' size, less LVM's and bcache's headers), and
// with neighbour a second volume of 512 MiB, which lands on the second HDD.
func carvedSetup(neighbour bool) string {
	second := ""
	if neighbour {
		second = `---
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: neighbour}
spec:
  nodeName: bench
  pool: {name: bench, size: 512Mi}
  safety: {trustWriteCache: true}
`
	}
	return fmt.Sprintf(`hdd_mib=$(( $(blockdev --getsize64 $(readlink -f $HDD)) / 1048576 ))
cat >%[1]s <<EOF
apiVersion: flashcache.io/v1alpha1
kind: FlashCachePool
metadata: {name: bench}
spec:
  nodeName: bench
  cacheDevice: {path: $NVME}
  backingDevices: [{path: $HDD}, {path: $HDD2}]
---
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: bench}
spec:
  nodeName: bench
  pool: {name: bench, size: $(( hdd_mib - 8 ))Mi}
  safety: {trustWriteCache: true}
%[2]sEOF
flashcache node apply --config %[1]s -o json >/root/apply.json
dev=$(python3 -c 'import json;print(json.load(open("/root/apply.json"))["volumes"][0]["status"]["device"])')
echo /dev/${dev#/dev/}
`, volumeFile, second)
}

// busyNeighbour keeps the neighbour volume busy through the whole run: 200 random 16-KiB
// writes a second, which its writeback to the second HDD cannot keep up with, so the shared
// cache set holds its dirty data beside bench's.
const busyNeighbour = `setsid nohup fio --name=neighbour --filename=/dev/flashcache/neighbour --rw=randwrite --bs=16k --ioengine=psync ` +
	`--direct=1 --time_based --runtime=86400 --rate_iops=200 --output=/dev/null >/dev/null 2>&1 &`

// lvmSetup makes the volume group and the data volume on the HDD, and a cache volume of the
// same size as flashcache's cache partition (80% of the SSD, its default over-provisioning).
func lvmSetup(convert string) string {
	return `pvcreate -q -y -ff $HDD $NVME >/dev/null
vgcreate -q bench $HDD $NVME >/dev/null
lvcreate -q -y -n data -l 100%PVS bench $HDD >/dev/null
lvcreate -q -y -n fast -l 80%PVS bench $NVME >/dev/null
` + convert + `
readlink -f /dev/bench/data
`
}

// stockBcacheSetup formats the whole SSD and HDD with make-bcache (with extra options) and registers them.
func stockBcacheSetup(options string) string {
	return `make-bcache --writeback ` + options + `-C $NVME -B $HDD >/dev/null
udevadm settle
for d in $NVME $HDD; do echo $(readlink -f $d) >/sys/fs/bcache/register 2>/dev/null || true; done
for i in $(seq 50); do [ -e /sys/block/$(basename $(readlink -f $HDD))/bcache/dev ] && break; sleep 0.2; done
echo /dev/$(basename $(readlink -f /sys/block/$(basename $(readlink -f $HDD))/bcache/dev))
`
}

// allStorages are every configuration the benchmark knows, in report order.
func allStorages() []storage {
	fc := func(name, desc, extra string) storage {
		return storage{Config: results.Config{Name: name, Description: desc, Cached: true, DirtyAgeBoundSeconds: dirtyAgeBound(extra).Seconds()},
			kind: flashcache, setup: flashcacheSetup(extra), flushSpec: extra}
	}
	all := []storage{
		{Config: results.Config{Name: "hdd", Description: "HDD only, no cache (the floor)"}, kind: uncached, setup: "readlink -f $HDD"},
		{Config: results.Config{Name: "all-flash", Description: "the data set directly on the NVMe (the ceiling)"}, kind: uncached, setup: "readlink -f $NVME"},
		{Config: results.Config{Name: "bcache-stock", Description: "make-bcache --writeback on the whole SSD and HDD, every knob as bcache leaves it", Cached: true},
			kind: stockBcache, setup: stockBcacheSetup("")},
		// On the larger set most of the 512-KiB buckets held some dirty data with a few MiB dirty
		// (results/README.md): smaller buckets, if they hold less of what is clean, would leave
		// fewer in use and bcache's fragmentation terms less to do. make-bcache's option, on
		// stock bcache, before the engine gets a knob for it.
		{Config: results.Config{Name: "bcache-stock-bucket-64k", Description: "bcache-stock with 64-KiB buckets (make-bcache --bucket 64k; 512 KiB by default)", Cached: true},
			kind: stockBcache, setup: stockBcacheSetup("--bucket 64k ")},
		fc("flashcache", "flashcache's defaults (`flashcache node apply` of a spec naming only the devices)", ""),
		// On the fitting set every pass ran its limit and was finished in writethrough, a third of
		// the run, since bcache never says clean under a steady load; a pass now ends once what was
		// dirty at its start is written back, read in bcache's btree dump in debugfs. Without
		// debugfs a pass ends only when clean: the defaults as they ran until the engine read the dump.
		withSetup(fc("flashcache-no-debugfs", "defaults on a host without debugfs: a pass ends only when bcache says clean, or in writethrough at its limit (every pass, until the engine read bcache's btree dump)", ""),
			"umount /sys/kernel/debug\n"+flashcacheSetup("")),
		// Stock bcache caches on the whole SSD; flashcache's default leaves a fifth of it
		// unpartitioned for wear levelling, so on a data set larger than the cache this one
		// tells the cache's size from flashcache's knobs.
		withSetup(fc("flashcache-spare-0", "defaults with cacheDevice.overProvisionPercent 0: the whole SSD a cache, as large as stock bcache's", ""),
			flashcacheSetupWith(", overProvisionPercent: 0", "", "")),
		// 64-KiB buckets on stock bcache held more hits and steadier TPS on the larger set
		// (results/README.md): the same with flashcache's threshold and passes.
		withSetup(fc("flashcache-bucket-64k", "defaults with cacheDevice.bucketSize 64Ki (512Ki by default)", ""),
			flashcacheSetupWith(", bucketSize: 64Ki", "", "")),
		// With 64-KiB buckets and a 40% threshold the cache can hold 40% of dirty data, where the
		// passes let it hold what two and a half minutes bring: how much the age bound costs in HDD writes.
		withSetup(fc("flashcache-bucket-64k-flush-off", "flashcache-bucket-64k with time-based flushing off (flushPeriod 0s) and dirtyThresholdPercent 40", "  flushPeriod: 0s\n  dirtyThresholdPercent: 40\n"),
			flashcacheSetupWith(", bucketSize: 64Ki", "", "  flushPeriod: 0s\n  dirtyThresholdPercent: 40\n")),
		fc("flashcache-flush-off", "defaults with time-based flushing off (flushPeriod 0s)", "  flushPeriod: 0s\n"),
		// bcache caches a write only while at most 70% of its buckets are in use (40% for writes
		// not marked sync); without the passes the larger set's dirty data held the cache at that
		// cutoff (results/README.md). The module's own parameters raise it to its maximum, 90
		// (70): whether bcache then holds dirty data as lvm's caches do, and writes the HDD less.
		withSetup(fc("flashcache-flush-off-cutoff-90", "flashcache-flush-off with bcache loaded with bch_cutoff_writeback_sync=90 bch_cutoff_writeback=70 (70 and 40 by default)", "  flushPeriod: 0s\n"),
			"modprobe -r bcache 2>/dev/null; modprobe bcache bch_cutoff_writeback_sync=90 bch_cutoff_writeback=70\n"+flashcacheSetup("  flushPeriod: 0s\n")),
		// On the fitting set every pass cut TPS to a tenth: commits waited in fsync while bcache's
		// empty flush to the HDD queued in the HDD's writeback throttling (wbt) behind the pass's
		// writes (stacks in results/README.md). With the HDD's volatile cache off the kernel drops
		// that flush, and each writeback write is durable when it completes.
		withSetup(fc("flashcache-backing-wc-off", "defaults with safety.disableBackingWriteCache: the HDD's volatile write cache off, so the flush bcache forwards with each commit is dropped", ""),
			flashcacheSetupWith("", ", disableBackingWriteCache: true", "")),
		// The same stall's other remedy, without touching the disk, is the default now: wbt off on
		// the HDD's queue, so the forwarded flush is not queued behind the pass (35.7-35.9 TPS against
		// 27.6-29.9: flashcache #1 with the knob set by hand, #2 by the engine). This one is the
		// defaults before it.
		fc("flashcache-wbt-kernel", "defaults with backingWritebackThrottling Kernel: the HDD queue's writeback throttling as the kernel sets it (the defaults until backingWritebackThrottling came)",
			"  backingWritebackThrottling: Kernel\n"),
		// On the fitting set stock bcache made 1.7x the defaults of the day (wbt on; 1.4x today's),
		// writing the HDD 2.85 times a transaction against 5.1 with its dirty data unbounded in age; flashcache-flush-off could
		// not tell the bound's share, as its copy, cached dirty, met bcache's write cutoff. This one
		// is flashcache without the bound and with the copy around the cache, as stock bcache's.
		fc("flashcache-unbounded", "flushPeriod 0s and cacheSequentialUntilFull false: no age bound, and the initial copy around the cache, as stock bcache",
			unboundedSpec),
		// In flashcache-unbounded's bursts (fragmentation term, more than half the buckets dirty)
		// 27-28% of the buckets were available, past bcache's write cutoff (70% in use): every write,
		// InnoDB's redo log too, went through to the HDD behind hundreds of MB/s of writeback
		// (stacks: mariadbd in xfs_file_dio_write_unaligned, results/README.md). bcache's own 10%
		// threshold keeps its controller writing back steadily, as stock bcache's did.
		fc("flashcache-unbounded-dirty-10", "flashcache-unbounded with dirtyThresholdPercent 10 (bcache's default)",
			unboundedSpec+"  dirtyThresholdPercent: 10\n"),
		// Runs of these three before backingWritebackThrottling was the default had the kernel's
		// wbt on the HDD: kept under their own names, so that later repetitions do not mix with them.
		fc("flashcache-flush-off-wbt-kernel", "flashcache-flush-off with backingWritebackThrottling Kernel (as flashcache-flush-off ran before Disabled was the default)",
			"  flushPeriod: 0s\n  backingWritebackThrottling: Kernel\n"),
		fc("flashcache-unbounded-wbt-kernel", "flashcache-unbounded with backingWritebackThrottling Kernel (as flashcache-unbounded ran before Disabled was the default)",
			unboundedSpec+"  backingWritebackThrottling: Kernel\n"),
		withSetup(fc("flashcache-backing-wc-off-wbt-kernel", "flashcache-backing-wc-off with backingWritebackThrottling Kernel (as flashcache-backing-wc-off ran before Disabled was the default)", ""),
			flashcacheSetupWith("", ", disableBackingWriteCache: true", "  backingWritebackThrottling: Kernel\n")),
		fc("flashcache-flush-30s", "defaults with a time-based flush every 30 s", "  flushPeriod: 30s\n"),
		// On the fitting set the HDD's whole rate decides TPS, and each pass writes back every page
		// dirtied since the last: the bound's cost is HDD writes a transaction (4.5 at 5 minutes,
		// 2.5 unbounded). A longer period lets more rewrites land on the SSD alone.
		fc("flashcache-flush-10m", "defaults with a time-based flush every 10 minutes (5 by default)", "  flushPeriod: 10m\n"),
		// The default was 40 until 2026-12-06; at 1% (bcache writing back all the time) passes found
		// less to sweep and ended in writeback, and TPS was higher and steadier (results/README.md).
		// Runs of the variants made before are kept as <variant>-dirty-40.
		fc("flashcache-dirty-40", "defaults with dirtyThresholdPercent 40 (the default until 2026-12-06)", "  dirtyThresholdPercent: 40\n"),
		fc("flashcache-dirty-10", "defaults with dirtyThresholdPercent 10 (bcache's default, and the old one)", "  dirtyThresholdPercent: 10\n"),
		fc("flashcache-throttle", "defaults with flushThrottle Proportional: a write limit on MariaDB while a flush pass lags, instead of the writethrough finish", "  flushThrottle: Proportional\n"),
		fc("flashcache-cutoff-4m", "cacheSequentialUntilFull false: the 4 MiB cutoff from the start, so the initial copy goes around the cache (the old default)",
			"  cacheSequentialUntilFull: false\n"),
		fc("flashcache-fifo", "defaults with replacementPolicy fifo (bcache's lru is the default)", "  replacementPolicy: fifo\n"),
		// On a slower host the emulated SSD's latency crossed bcache's 2-ms read threshold and bcache
		// sent 786-1162 MiB a run around its own cache, to the HDD (results/README.md): the thresholds
		// are 0 by default now (cacheCongestionBypass Disabled); this one is the defaults before.
		fc("flashcache-congestion-kernel", "defaults with cacheCongestionBypass Kernel: bcache's own congestion thresholds (2 ms reads, 20 ms writes), the defaults until cacheCongestionBypass came",
			"  cacheCongestionBypass: Kernel\n"),
		fc("flashcache-congestion-off", "defaults with bcache's congestion thresholds off: no read or write goes around a busy cache (set by hand before cacheCongestionBypass; its default since)",
			"  cacheCongestionBypass: Disabled\n"),
		// On the larger set bcache's writeback, not the passes, wrote the HDD five times a
		// transaction: with scattered dirty pages most buckets hold some dirty data, and the kernel
		// then raises the writeback rate by its fragmentation terms (results/README.md).
		withAfterApply(fc("flashcache-fragment-off", "defaults with bcache's writeback_consider_fragment 0: writeback paced by the dirty target alone, however many buckets hold dirty data", ""),
			"echo 0 >/sys/block/$(basename $DEV)/bcache/writeback_consider_fragment"),
		{Config: results.Config{Name: "flashcache-carved", Description: "defaults, on a volume carved from a pool (a logical volume on the HDD, the pool's cache set on the SSD), alone on it", Cached: true,
			DirtyAgeBoundSeconds: dirtyAgeBound("").Seconds()},
			kind: flashcache, setup: carvedSetup(false), backing: "/dev/fcp-bench/fc-bench", flushVolume: "bench"},
		{Config: results.Config{Name: "flashcache-carved-busy-neighbour", Description: "flashcache-carved with a second volume of the pool, on the second HDD, taking 200 random 16-KiB writes a second throughout", Cached: true,
			DirtyAgeBoundSeconds: dirtyAgeBound("").Seconds()},
			kind: flashcache, setup: carvedSetup(true), backing: "/dev/fcp-bench/fc-bench", flushVolume: "bench", afterApply: busyNeighbour},
		{Config: results.Config{Name: "lvmcache", Description: "lvmcache: dm-cache, writeback, smq, cache volume of 80% of the SSD", Cached: true},
			kind: lvmCache, setup: lvmSetup("lvconvert -q -y --type cache --cachevol fast --cachemode writeback --cachepolicy smq bench/data >/dev/null")},
		{Config: results.Config{Name: "dm-writecache", Description: "lvm's dm-writecache, cache volume of 80% of the SSD", Cached: true},
			kind: lvmWritecache, setup: lvmSetup("lvchange -q -an bench/fast && lvconvert -q -y --type writecache --cachevol fast bench/data >/dev/null")},
	}
	// The report counts bypassed bytes for these.
	for i := range all {
		all[i].Bcache = all[i].onBcache()
	}
	return all
}

// dirtyAgeBound is the engine's bound for the flush period a configuration's spec lines give,
// with the API's default when they give none.
func dirtyAgeBound(specLines string) time.Duration {
	var spec fcv1.FlashCacheVolumeSpec
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(specLines, "\n  ", "\n")), &spec); err != nil {
		panic(fmt.Sprintf("bench configuration spec %q: %v", specLines, err))
	}
	return engine.DirtyAgeBound(spec.EffectiveFlushPeriod())
}

func withSetup(s storage, script string) storage {
	s.setup = script
	return s
}

func withAfterApply(s storage, script string) storage {
	s.afterApply = script
	return s
}

// defaultConfigs are what each data set runs when BENCH_CONFIGS does not say: on the fitting
// set every configuration but the larger set's variants; on the larger set no all-flash (the
// SSD is too small to hold the data), the knobs that decide what stays in a cache too small, and
// those that could move the HDD's writes a transaction, which decide TPS there (lvmcache, keeping
// hot blocks dirty as long as it likes, wrote 2.8 against flashcache's 5.3): the time-based flush
// off (5.1: not it) and bcache's fragmentation boost off. On both, the HDD queue's writeback
// throttling as the kernel sets it (the defaults before backingWritebackThrottling); on the
// fitting set also the HDD's volatile cache off, which let commits go on through a pass there.
var defaultConfigs = map[string][]string{
	results.DataSetFits: {"hdd", "all-flash", "bcache-stock", "flashcache", "flashcache-no-debugfs", "flashcache-wbt-kernel", "flashcache-flush-off", "flashcache-unbounded", "flashcache-unbounded-dirty-10", "flashcache-backing-wc-off", "flashcache-flush-30s", "flashcache-flush-10m",
		"flashcache-dirty-40", "flashcache-dirty-10", "flashcache-throttle", "flashcache-cutoff-4m", "flashcache-carved", "flashcache-carved-busy-neighbour", "lvmcache", "dm-writecache"},
	results.DataSetLargerThanCache: {"hdd", "bcache-stock", "bcache-stock-bucket-64k", "flashcache", "flashcache-no-debugfs", "flashcache-wbt-kernel", "flashcache-bucket-64k", "flashcache-spare-0", "flashcache-flush-off", "flashcache-fragment-off",
		"flashcache-dirty-40", "flashcache-cutoff-4m", "flashcache-fifo", "flashcache-congestion-kernel", "lvmcache", "dm-writecache"},
}

// selectStorages picks configurations by name (the data set's defaults for ""), in report order.
func selectStorages(names, dataSet string) ([]storage, error) {
	all := allStorages()
	if strings.TrimSpace(names) == "" {
		names = strings.Join(defaultConfigs[dataSet], ",")
	}
	byName := map[string]storage{}
	for _, s := range all {
		byName[s.Name] = s
	}
	var out []storage
	for _, n := range strings.Split(names, ",") {
		s, ok := byName[strings.TrimSpace(n)]
		if !ok {
			var known []string
			for _, s := range all {
				known = append(known, s.Name)
			}
			return nil, fmt.Errorf("BENCH_CONFIGS: unknown configuration %q (known: %s)", n, strings.Join(known, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}

// bcacheBytes prints a bcache sysfs size ("1.5M") in bytes.
const bcacheBytes = `bcache_bytes() { python3 - "$1" <<'EOF'
import sys
units = {"k": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
v = open(sys.argv[1]).read().strip()
print(int(float(v[:-1]) * units[v[-1]]) if v[-1] in units else int(v))
EOF
}
`

// bypassedBytesScript prints the I/O bcache sent around its cache since the device was
// registered (sequential past the cutoff, or the cache congested); "" for other caches.
func (s storage) bypassedBytesScript() string {
	if !s.onBcache() {
		return ""
	}
	return bcacheBytes + "bcache_bytes /sys/block/$(basename $DEV)/bcache/stats_total/bypassed"
}

// dirtyBytesScript prints the bytes the cache holds that the HDD does not have yet.
func (s storage) dirtyBytesScript() string {
	switch s.kind {
	case stockBcache, flashcache:
		return bcacheBytes + "bcache_bytes /sys/block/$(basename $DEV)/bcache/dirty_data"
	case lvmCache:
		// dm-cache status: 0 <len> cache <md block> <md used/total> <block sectors> <used/total>
		// <read hits> <read misses> <write hits> <write misses> <demotions> <promotions> <dirty> ...
		return `dmsetup status bench-data | awk '{print $14 * $6 * 512}'`
	case lvmWritecache:
		// dm-writecache status: 0 <len> writecache <errors> <total blocks> <free blocks> <blocks under writeback> ...
		// Blocks not free hold data not yet written back or kept for reads; 4 KiB each.
		return `dmsetup status bench-data | awk '{print ($5 - $6) * 4096}'`
	}
	return "echo 0"
}

// samplesDirtyAge says whether the run can follow markers to the HDD: bcache keeps the backing
// device's blocks at a fixed offset (its data_offset), so a block of the volume has a known
// place on the raw HDD. Not lvm's caches: dm-cache sends a write to a block it has not promoted
// straight to the origin, and dm-writecache, once full (as it is after the warm-up here), sends
// a write to a block it does not hold there too: every marker reached the HDD at the first read
// (4830 in dm-writecache's first 20-minute run, all within 0.3 s) while 506 MiB stayed dirty.
// Their dirty MiB after the run is the measure.
func (s storage) samplesDirtyAge() bool { return s.onBcache() }

// onBcache says whether the configuration is built on bcache (stock or flashcache's).
func (s storage) onBcache() bool { return s.kind == stockBcache || s.kind == flashcache }

// dirtyAgeSampler runs in the background during the measured run: it writes a marker through
// the volume past the end of the filesystem (the volume is 1 GiB larger than it), flushed, and
// reads the raw HDD at the same block every 5 s until the marker is there, then writes the
// next one. Each line it prints is "arrived WRITTEN ARRIVED" or, when stopped, "open WRITTEN
// NOW". One marker at a time keeps its reads to 0.2 a second of the HDD's 150.
const dirtyAgeSampler = `hdd=$(readlink -f ${BACKING:-$HDD})
first=$(bcache-super-show $hdd | awk '/dev.data.first_sector/ {print $2}')
if [ -z "$first" ]; then echo "dirty-age sampler: no data offset in $hdd's bcache superblock" >&2; exit 1; fi
cat >/run/bench-age.sh <<'EOF'
hdd=$1 first=$2
i=0
while [ ! -e /run/bench-age.stop ]; do
	block=$(( FS_MIB * 256 + i ))
	head -c 4096 /dev/urandom >/run/bench-marker
	want=$(md5sum </run/bench-marker | cut -d' ' -f1)
	dd if=/run/bench-marker of=$DEV bs=4k seek=$block oflag=direct conv=fsync status=none
	written=$(date +%s.%N)
	while :; do
		if [ -e /run/bench-age.stop ]; then echo "open $written $(date +%s.%N)"; break 2; fi
		got=$(dd if=$hdd bs=4096 skip=$(( first * 512 + block * 4096 )) count=1 iflag=direct,skip_bytes status=none | md5sum | cut -d' ' -f1)
		if [ "$got" = "$want" ]; then echo "arrived $written $(date +%s.%N)"; break; fi
		sleep 5
	done
	i=$(( i + 1 ))
done
EOF
rm -f /run/bench-age.stop /run/bench-age.log
nohup bash /run/bench-age.sh $hdd $first >/run/bench-age.log 2>&1 &
echo $! >/run/bench-age.pid
`

// stopDirtyAgeSampler stops the sampler and prints its lines.
const stopDirtyAgeSampler = `[ -f /run/bench-age.pid ] || exit 0
touch /run/bench-age.stop
pid=$(cat /run/bench-age.pid)
while kill -0 $pid 2>/dev/null; do sleep 0.2; done
rm -f /run/bench-age.pid
cat /run/bench-age.log`

// writebackSampler runs in the background during the measured run of a bcache configuration:
// every 10 s, as sysbench reports, a line "TIME DIRTY RATE MINIMUM WRITES SECTORS" (bcache's
// dirty_data, writeback_rate and writeback_rate_minimum, the HDD's writes and sectors written
// so far), so that what a flush pass asked of the HDD stands beside the TPS of the same 10 s.
// Five reads of sysfs every 10 s: nothing the guest's CPUs notice.
const writebackSampler = `bc=/sys/block/$(basename $(readlink -f $DEV))/bcache
hddstat=/sys/class/block/$(basename $(readlink -f ${BACKING:-$HDD}))/stat
cat >/run/bench-wb.sh <<'EOF'
bc=$1 hddstat=$2
while :; do
	read -r _ _ _ _ writes _ sectors _ <$hddstat
	echo "$(date +%s.%N) $(cat $bc/dirty_data) $(cat $bc/writeback_rate) $(cat $bc/writeback_rate_minimum) $writes $sectors"
	sleep 10
done
EOF
nohup bash /run/bench-wb.sh $bc $hddstat >/run/bench-wb.log 2>&1 &
echo $! >/run/bench-wb.pid
`

// stopWritebackSampler stops the sampler and prints its lines.
const stopWritebackSampler = `[ -f /run/bench-wb.pid ] || exit 0
kill $(cat /run/bench-wb.pid)
rm -f /run/bench-wb.pid
cat /run/bench-wb.log`

// flushScript is the blocking flush each tool offers its user, run after the workload.
func (s storage) flushScript() string {
	switch s.kind {
	case stockBcache:
		// Stock bcache has no flush command; detaching writes every dirty block back, unthrottled.
		return `echo 1 >/sys/block/$(basename $DEV)/bcache/detach
until grep -q 'no cache' /sys/block/$(basename $DEV)/bcache/state; do sleep 0.2; done`
	case flashcache:
		only := ""
		if s.flushVolume != "" {
			only = " --volume " + s.flushVolume
		}
		return "flashcache node flush --config " + volumeFile + only + " --timeout 30m -o json >/root/flush.json"
	case lvmCache, lvmWritecache:
		return "lvconvert -q -y --splitcache bench/data >/dev/null"
	}
	return "true"
}
