//go:build vm

package enginevm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/internal/safety"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// keepsDirty leaves written data dirty on the cache: a high threshold and no time-based flush.
const keepsDirty = "  mode: writeback\n  dirtyThresholdPercent: 40\n  flushPeriod: 0s\n"

var (
	cacheLost   = vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-cache-lost", Size: 1 << 30}
	cacheSpare  = vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-cache-spare", Size: 1 << 30}
	cacheThird  = vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-cache-third", Size: 1 << 30}
	survivorHDD = vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-hdd-survivor", Size: 1 << 30}

	failingCache = vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-cache-failing", Size: 1 << 30, Faulty: true}
	failingHDD   = vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-hdd-failing", Size: 1 << 30}

	cacheOfFlaky = vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-cache-flaky", Size: 1 << 30}
	flakyHDD     = vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-hdd-flaky", Size: 1 << 30}
)

// TestCacheDeviceLossAndReplacement loses the SSD under a volume in each way it happens: pulled
// while running (its PCI function removed) clean and dirty, and missing at boot dirty and clean.
// Clean, the volume keeps serving from the backing disk and says so; dirty, it is not started
// until the SSD comes back (with its data) or a person accepts the loss. A new SSD is attached
// without touching the data.
func TestCacheDeviceLossAndReplacement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	g := bootGuest(t, ctx, cacheLost, cacheSpare, cacheThird, survivorHDD)
	g.volumeFile(t, "lost.yaml", "survivor", cacheLost.ByID(), survivorHDD.ByID(), trusted+keepsDirty)
	g.volumeFile(t, "spare.yaml", "survivor", cacheSpare.ByID(), survivorHDD.ByID(), trusted+keepsDirty)
	g.volumeFile(t, "third.yaml", "survivor", cacheThird.ByID(), survivorHDD.ByID(), trusted+keepsDirty)
	pull := func(t *testing.T, d vmharness.Disk) {
		t.Helper()
		if err := g.vm.Pull(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	dirty := func(t *testing.T) {
		t.Helper()
		g.sh(t, "fio --name=dirty --filename=/dev/flashcache/survivor --rw=randwrite --bs=4k --size=256M --io_size=8M "+
			"--direct=1 --ioengine=psync --randrepeat=0 --output=/dev/null")
	}
	const sum = "dd if=/dev/flashcache/survivor bs=1M count=256 iflag=direct status=none | md5sum"
	bcacheDevices := func(t *testing.T) string { return g.sh(t, "ls /sys/block/ | grep -c '^bcache' || true") }
	var before, backingUUID, dirtySum string

	runSteps(t, []step{
		{"BuildWriteAndFlush", func(t *testing.T) {
			r, code, _ := g.node(t, "apply", "lost.yaml")
			if code != 0 {
				t.Fatalf("apply: %s", r)
			}
			backingUUID = r.Volumes[0].Status.BackingUUID
			// The failure policy flashcache sets, whatever the host had.
			dev := "/sys/block/" + r.Volumes[0].Status.Device + "/bcache/"
			set := "/sys/fs/bcache/" + r.Volumes[0].Status.CacheSetUUID + "/"
			policy := g.sh(t, "cat "+dev+"stop_when_cache_set_failed "+dev+"io_error_limit "+set+"errors "+set+"io_error_limit")
			if want := "[auto] always\n64\n[unregister] panic\n8"; policy != want {
				t.Errorf("failure policy:\n%s\nwant\n%s", policy, want)
			}
			dirty(t)
			if r, code, _ := g.node(t, "flush", "lost.yaml"); code != 0 {
				t.Fatalf("flush: %s", r)
			}
			before = g.sh(t, sum)
		}},
		{"ANewSSDIsRefusedWhileTheOldOneWorks", func(t *testing.T) {
			r, code, _ := g.node(t, "apply", "spare.yaml")
			if e := r.Volumes[0].Error; code == 0 || e == nil || e.Reason != "CacheStillAttached" || e.Field != "cacheDevice.path" {
				t.Fatalf("apply naming another SSD while the cache works: exit %d\n%s", code, r)
			}
			if sigs := g.sh(t, "wipefs --noheadings "+cacheSpare.ByID()); sigs != "" {
				t.Errorf("the new SSD was touched: %s", sigs)
			}
		}},
		{"ACleanCacheLostIsDetachedAndTheVolumeServesUncached", func(t *testing.T) {
			pull(t, cacheLost)
			r, code, _ := g.node(t, "status", "lost.yaml")
			wantError(t, r, code, "CacheDeviceLost", "cacheDevice.path", "no dirty data")
			// Left to itself, bcache would fail the next read that was to be a hit before it
			// detached the cache. An apply detaches it first.
			r, code, _ = g.node(t, "apply", "lost.yaml")
			wantError(t, r, code, "CacheDeviceLost", "cacheDevice.path", "uncached")
			if kinds := r.stepKinds(); kinds != "detach-lost-cache" {
				t.Errorf("apply with a clean SSD gone: steps %q, want detach-lost-cache", kinds)
			}
			if r.Volumes[0].Status == nil || r.Volumes[0].Status.CacheSetUUID != "" {
				t.Errorf("apply with a clean SSD gone: want the status of a device without a cache set\n%s", r)
			}
			out, _, code, _ := g.vm.Run(ctx, sum)
			if got := strings.TrimSpace(out); code != 0 || got != before {
				t.Errorf("uncached, the volume reads %q (exit %d); before the loss %s", got, code, before)
			}
			if r, code, _ := g.node(t, "apply", "lost.yaml"); code == 0 || len(r.Volumes[0].Steps) != 0 {
				t.Errorf("a second apply: exit %d, steps %s", code, r.stepKinds())
			}
		}},
		{"ANewSSDIsAttachedWithoutTouchingTheData", func(t *testing.T) {
			r, code, _ := g.node(t, "apply", "spare.yaml")
			if code != 0 {
				t.Fatalf("apply with the new SSD: %s", r)
			}
			kinds := r.stepKinds()
			for _, never := range []string{"make-bcache ", "make-bcache-backing", "wipe-backing"} {
				if strings.Contains(kinds+" ", never) {
					t.Errorf("replacing the SSD ran %s: %s", never, kinds)
				}
			}
			if !strings.Contains(kinds, "partition-cache-device") || !strings.Contains(kinds, "make-bcache-cache") {
				t.Errorf("replacing the SSD: steps %s, want the new device partitioned and made a cache", kinds)
			}
			st := r.Volumes[0].Status
			if st == nil || st.BackingUUID != backingUUID || st.CacheSetUUID == "" {
				t.Fatalf("after the replacement: status %+v, want backing %s attached to a cache set", st, backingUUID)
			}
			if got := g.sh(t, sum); got != before {
				t.Errorf("after the replacement the volume reads %s; before the loss %s", got, before)
			}
			if r, code, _ := g.node(t, "apply", "spare.yaml"); code != 0 || r.Changed {
				t.Errorf("a second apply: exit %d, steps %s", code, r.stepKinds())
			}
		}},
		{"ADirtyCacheMissingAtBootIsNotStarted", func(t *testing.T) {
			if r, code, _ := g.node(t, "release", "spare.yaml"); code != 0 {
				t.Fatalf("release: %s", r)
			}
			dirty(t)
			r, _, _ := g.node(t, "status", "spare.yaml")
			if st := r.Volumes[0].Status; st == nil || st.DirtyBytes == 0 {
				t.Fatalf("nothing dirty before the power cut: %s", r)
			}
			dirtySum = g.sh(t, sum)
			g.bootWith(t, cacheSpare, false)
			r, code, _ := g.node(t, "apply", "spare.yaml")
			wantError(t, r, code, "CacheDeviceLost", "cacheDevice.path", "not started")
			if len(r.Volumes[0].Steps) != 0 || bcacheDevices(t) != "0" {
				t.Errorf("apply with a dirty SSD missing: steps %s, %s bcache devices run", r.stepKinds(), bcacheDevices(t))
			}
			// Nor may a new SSD take its place while the dirty data is unaccounted for.
			r, code, _ = g.node(t, "apply", "third.yaml")
			if e := r.Volumes[0].Error; code == 0 || e == nil || e.Reason != "DirtyDataWithoutItsCache" {
				t.Errorf("a new SSD with dirty data missing: exit %d\n%s", code, r)
			}
			if sigs := g.sh(t, "wipefs --noheadings "+cacheThird.ByID()+" 2>&1; wipefs --noheadings "+cacheThird.ByID()+"-part1 2>&1 || true"); strings.Contains(sigs, "bcache") {
				t.Errorf("the new SSD was made a cache: %s", sigs)
			}
		}},
		{"TheSSDBackAtBootBringsItsDirtyDataBack", func(t *testing.T) {
			g.bootWith(t, cacheSpare, true)
			if r, code, _ := g.node(t, "apply", "spare.yaml"); code != 0 {
				t.Fatalf("apply with the SSD back: %s", r)
			}
			if got := g.sh(t, sum); got != dirtySum {
				t.Errorf("with the SSD back the volume reads %s; before the power cut %s", got, dirtySum)
			}
		}},
		{"ADirtyCacheLostWhileRunningIsNotStartedByForce", func(t *testing.T) {
			dirty(t)
			pull(t, cacheSpare)
			r, code, _ := g.node(t, "status", "spare.yaml")
			wantError(t, r, code, "CacheDeviceLost", "cacheDevice.path", "dirty")
			// Let bcache meet the loss, then ask the engine to converge: it must refuse.
			out, _, _, _ := g.vm.Run(ctx, "dd if=/dev/flashcache/survivor of=/dev/null bs=1M count=256 iflag=direct status=none; sleep 3; "+
				"cat /sys/block/bcache*/bcache/state 2>&1; dmesg | grep -i bcache | tail -n 5")
			t.Logf("what bcache did:\n%s", out)
			r, code, _ = g.node(t, "apply", "spare.yaml")
			wantError(t, r, code, "CacheDeviceLost", "cacheDevice.path", "not started")
			if len(r.Volumes[0].Steps) != 0 || bcacheDevices(t) != "0" {
				t.Errorf("apply with a dirty SSD gone: steps %s, %s bcache devices run", r.stepKinds(), bcacheDevices(t))
			}
		}},
		{"AcceptingTheLossStartsTheBackingDiskUncached", func(t *testing.T) {
			g.sh(t, fmt.Sprintf("sed 's|^metadata: {name: survivor}|metadata: {name: survivor, annotations: {flashcache.io/accept-cache-loss: %s}}|' "+
				"/root/spare.yaml > /root/accept.yaml && grep -q accept-cache-loss /root/accept.yaml", cacheSpare.ByID()))
			r, code, _ := g.node(t, "apply", "accept.yaml")
			wantError(t, r, code, "CacheDeviceLost", "cacheDevice.path", "loss was accepted")
			if kinds := r.stepKinds(); !strings.HasSuffix(kinds, "start-without-cache") {
				t.Errorf("accepting the loss: steps %q, want the backing device started without its cache", kinds)
			}
			if state := g.sh(t, "bcache-super-show "+survivorHDD.ByID()+" | awk '/cache_state/ {print $3}'"); state != "[inconsistent]" {
				t.Errorf("backing superblock state %s, want [inconsistent]: bcache must void what a cache set holds for it", state)
			}
			if out, _, code, _ := g.vm.Run(ctx, sum); code != 0 {
				t.Errorf("uncached after the accepted loss, the volume does not read: %s", out)
			}
			// The annotation names the lost path: without it the status still says what happened.
			r, code, _ = g.node(t, "status", "spare.yaml")
			wantError(t, r, code, "CacheDeviceLost", "cacheDevice.path", "uncached")
		}},
		{"ANewSSDAfterTheAcceptedLossIsAttached", func(t *testing.T) {
			r, code, _ := g.node(t, "apply", "third.yaml")
			if code != 0 {
				t.Fatalf("apply with a new SSD after the accepted loss: %s", r)
			}
			if kinds := r.stepKinds(); !strings.Contains(kinds, "make-bcache-cache") || strings.Contains(kinds, "make-bcache-backing") {
				t.Errorf("steps %s, want a new cache for the backing disk as it is", kinds)
			}
			if st := r.Volumes[0].Status; st == nil || st.BackingUUID != backingUUID || st.CacheSetUUID == "" {
				t.Errorf("after the replacement: status %+v, want backing %s attached to a cache set", st, backingUUID)
			}
			if r, code, _ := g.node(t, "apply", "third.yaml"); code != 0 || r.Changed {
				t.Errorf("a second apply: exit %d, steps %s", code, r.stepKinds())
			}
		}},
		{"ACleanCacheMissingAtBootIsStartedUncached", func(t *testing.T) {
			dirty(t)
			if r, code, _ := g.node(t, "flush", "third.yaml"); code != 0 {
				t.Fatalf("flush: %s", r)
			}
			clean := g.sh(t, sum)
			g.bootWith(t, cacheThird, false)
			r, code, _ := g.node(t, "apply", "third.yaml")
			wantError(t, r, code, "CacheDeviceLost", "cacheDevice.path", "uncached")
			if kinds := r.stepKinds(); !strings.HasSuffix(kinds, "start-without-cache") {
				t.Errorf("apply with a clean SSD missing at boot: steps %q, want start-without-cache", kinds)
			}
			if got := g.sh(t, sum); got != clean {
				t.Errorf("uncached after the boot, the volume reads %s; before %s", got, clean)
			}
		}},
		{"TeardownWithTheSSDGoneErasesWhatIsLeft", func(t *testing.T) {
			r, code, _ := g.node(t, "teardown", "third.yaml", "--confirm")
			if code != 0 || r.Volumes[0].Teardown == nil {
				t.Fatalf("teardown: exit %d\n%s", code, r)
			}
			steps := strings.Join(r.Volumes[0].Teardown.Steps, "\n")
			if !strings.Contains(steps, "was gone") || !strings.Contains(steps, "erased the bcache superblock of") {
				t.Errorf("teardown steps:\n%s", steps)
			}
			if sigs := g.sh(t, "wipefs --noheadings "+survivorHDD.ByID()); sigs != "" {
				t.Errorf("the backing disk still carries %s", sigs)
			}
		}},
	})
}

// TestBackingDiskErrors takes the backing disk offline under a volume with dirty data, as the
// SCSI layer does with a disk that stopped answering: the errors are counted and reported, bcache
// stops the device at its limit, and once the disk is back an apply registers it again and the
// dirty data reaches it whole.
func TestBackingDiskErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	g := bootGuest(t, ctx, cacheOfFlaky, flakyHDD)
	g.volumeFile(t, "flaky.yaml", "flaky", cacheOfFlaky.ByID(), flakyHDD.ByID(),
		trusted+keepsDirty+"  sequentialCutoff: \"0\"\n")
	offline := func(t *testing.T, off bool) {
		t.Helper()
		if err := g.vm.SetOffline(ctx, flakyHDD, off); err != nil {
			t.Fatal(err)
		}
	}
	// Reads beyond the 16 MiB written miss the cache and go to the disk.
	readUncached := func(t *testing.T, n int) {
		t.Helper()
		g.sh(t, fmt.Sprintf("for i in $(seq 1 %d); do dd if=/dev/flashcache/flaky of=/dev/null bs=4k count=1 skip=$((10000+i*64)) iflag=direct status=none 2>/dev/null || true; done", n))
	}
	const sum = "dd if=/dev/flashcache/flaky bs=1M count=16 iflag=direct status=none | md5sum"
	var want string

	runSteps(t, []step{
		{"BuildAndLeaveDirtyData", func(t *testing.T) {
			if r, code, _ := g.node(t, "apply", "flaky.yaml"); code != 0 {
				t.Fatalf("apply: %s", r)
			}
			// bcache writes back at full speed a set it sees idle, as the seconds of a status
			// command under emulation are: a CI run found all 16 MiB written back before it.
			// Stopped, the data waits on the cache until the disk is back and an apply (which
			// sets writeback_running again) registers it.
			// Congestion bypass off too: in a fresh machine's run (the cold builds beside three lanes)
			// 4 of the 16 MiB went around the slow emulated NVMe to the disk, and read back with
			// the disk offline failed.
			g.sh(t, "bc=/sys/block/$(basename $(readlink -f /dev/flashcache/flaky))/bcache; "+
				vmharness.CongestionOff("$bc/cache")+" && echo 0 > $bc/writeback_running")
			g.sh(t, "head -c 16M /dev/urandom > /root/data && dd if=/root/data of=/dev/flashcache/flaky bs=1M oflag=direct status=none")
			want = g.sh(t, "md5sum < /root/data")
			r, _, _ := g.node(t, "status", "flaky.yaml")
			if st := r.Volumes[0].Status; st == nil || st.DirtyBytes == 0 || st.BackingIOErrors != 0 || st.BackingIOErrorLimit != 64 {
				t.Fatalf("after the write: want dirty data, no backing errors and the limit at 64\n%+v", st)
			}
		}},
		{"OfflineTheErrorsAreCountedAndTheDirtyDataWaits", func(t *testing.T) {
			offline(t, true)
			readUncached(t, 3)
			r, code, _ := g.node(t, "status", "flaky.yaml")
			wantError(t, r, code, "BackingDeviceErrors", "backingDevice.path", "of dirty data waits on the cache device")
			if st := r.Volumes[0].Status; st == nil || st.BackingIOErrors < 3 {
				t.Errorf("want at least 3 backing I/O errors counted: %+v", st)
			}
			if got := g.sh(t, sum); got != want {
				t.Errorf("with the disk offline the cached data reads %s, want %s", got, want)
			}
		}},
		{"AtTheLimitBcacheStopsTheDeviceAndKeepsTheDirtyData", func(t *testing.T) {
			readUncached(t, 70)
			r, code, _ := g.node(t, "apply", "flaky.yaml")
			wantError(t, r, code, "BackingDeviceErrors", "backingDevice.path", "no bcache device serves the volume")
			if n := g.sh(t, "ls /sys/block/ | grep -c '^bcache' || true"); n != "0" {
				t.Errorf("%s bcache devices still run past the error limit", n)
			}
			if sets := g.sh(t, "ls /sys/fs/bcache/ | grep -c -- - || true"); sets != "1" {
				t.Errorf("%s cache sets registered, want the one holding the dirty data", sets)
			}
		}},
		{"BackOnlineAnApplyRegistersItAndTheDataReachesTheDisk", func(t *testing.T) {
			offline(t, false)
			r, code, _ := g.node(t, "apply", "flaky.yaml")
			if code != 0 || !strings.Contains(r.stepKinds(), "register-backing") {
				t.Fatalf("apply with the disk back: exit %d\n%s", code, r)
			}
			if st := r.Volumes[0].Status; st == nil || st.BackingIOErrors != 0 || st.DirtyBytes == 0 {
				t.Errorf("registered again: want the dirty data still there and the error count reset: %+v", st)
			}
			if r, code, _ := g.node(t, "flush", "flaky.yaml"); code != 0 {
				t.Fatalf("flush: %s", r)
			}
			if got := g.sh(t, sum); got != want {
				t.Errorf("the volume reads %s, want %s", got, want)
			}
			onDisk := g.sh(t, fmt.Sprintf("dd if=%s bs=1M skip=%d count=16 iflag=direct,skip_bytes status=none | md5sum",
				flakyHDD.ByID(), safety.BackingDataOffsetSectors*512))
			if onDisk != want {
				t.Errorf("the backing disk holds %s after the flush, want %s", onDisk, want)
			}
		}},
		{"ErrorsOnARunningDeviceAreAWarning", func(t *testing.T) {
			offline(t, true)
			readUncached(t, 1)
			offline(t, false)
			r, code, _ := g.node(t, "apply", "flaky.yaml")
			if code != 0 || len(r.Volumes[0].Warnings) == 0 || !strings.Contains(strings.Join(r.Volumes[0].Warnings, "\n"), "BackingDeviceErrors") {
				t.Errorf("apply after one backing error: exit %d, warnings %q", code, r.Volumes[0].Warnings)
			}
		}},
		{"Teardown", func(t *testing.T) {
			if r, code, _ := g.node(t, "teardown", "flaky.yaml", "--confirm"); code != 0 {
				t.Fatalf("teardown: %s", r)
			}
		}},
	})
}

// TestCacheDeviceErrors makes the SSD fail every read and write while it stays in the machine
// (nbdkit's error filter under the emulated NVMe), clean and then dirty: bcache fails the cache
// set, the engine reports CacheDeviceErrors and keeps a clean volume serving from the backing
// disk; a dirty one is not started, and when the SSD reads again its dirty data comes back.
func TestCacheDeviceErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	g := bootGuest(t, ctx, failingCache, failingHDD)
	g.volumeFile(t, "failing.yaml", "failing", failingCache.ByID(), failingHDD.ByID(),
		trusted+keepsDirty+"  sequentialCutoff: \"0\"\n")
	failing := func(t *testing.T, on bool) {
		t.Helper()
		if err := g.vm.SetFailing(failingCache, on); err != nil {
			t.Fatal(err)
		}
	}
	const sum = "dd if=/dev/flashcache/failing bs=1M count=16 iflag=direct status=none | md5sum"
	write := func(t *testing.T) string {
		t.Helper()
		g.sh(t, "head -c 16M /dev/urandom > /root/data && dd if=/root/data of=/dev/flashcache/failing bs=1M oflag=direct status=none")
		return g.sh(t, "md5sum < /root/data")
	}
	var want string

	runSteps(t, []step{
		{"BuildWriteAndFlush", func(t *testing.T) {
			if r, code, _ := g.node(t, "apply", "failing.yaml"); code != 0 {
				t.Fatalf("apply: %s", r)
			}
			want = write(t)
			if r, code, _ := g.node(t, "flush", "failing.yaml"); code != 0 {
				t.Fatalf("flush: %s", r)
			}
			// Read once so that the data is in the cache: the reads below are hits.
			if got := g.sh(t, sum); got != want {
				t.Fatalf("reads %s, want %s", got, want)
			}
		}},
		{"ACleanCacheThatFailsServesFromTheBackingDisk", func(t *testing.T) {
			failing(t, true)
			r, code, _ := g.node(t, "apply", "failing.yaml")
			wantError(t, r, code, "CacheDeviceErrors", "cacheDevice.path", "no dirty data")
			// Every read must work: bcache retries a failed cache read on the backing disk,
			// and the apply has detached the failing cache.
			out, _, code, _ := g.vm.Run(ctx, sum)
			if got := strings.TrimSpace(out); code != 0 || got != want {
				t.Errorf("with the SSD failing the volume reads %q (exit %d), want %s", got, code, want)
			}
			if n := g.sh(t, "ls /sys/block/$(basename $(readlink -f /dev/flashcache/failing))/bcache/ | grep -c '^cache$' || true"); n != "0" {
				t.Errorf("the failing cache is still attached")
			}
			out, _, _, _ = g.vm.Run(ctx, "dmesg | grep -i bcache | tail -n 6")
			t.Logf("what bcache did:\n%s", out)
		}},
		{"TheSSDReadingAgainIsAttachedAgain", func(t *testing.T) {
			failing(t, false)
			r, code, _ := g.node(t, "apply", "failing.yaml")
			if st := r.Volumes[0].Status; code != 0 || st == nil || st.CacheSetUUID == "" {
				t.Fatalf("apply with the SSD reading again: exit %d\n%s", code, r)
			}
			if got := g.sh(t, sum); got != want {
				t.Errorf("attached again the volume reads %s, want %s", got, want)
			}
		}},
		{"ADirtyCacheThatFailsIsNotStartedAndItsDataComesBack", func(t *testing.T) {
			// The flush held the volume in writethrough; writeback makes dirty data again.
			if r, code, _ := g.node(t, "release", "failing.yaml"); code != 0 {
				t.Fatalf("release: %s", r)
			}
			want = write(t)
			r, _, _ := g.node(t, "status", "failing.yaml")
			if st := r.Volumes[0].Status; st == nil || st.DirtyBytes == 0 {
				out, _, _, _ := g.vm.Run(ctx, "grep . /sys/block/bcache*/bcache/{cache_mode,state,dirty_data,sequential_cutoff,stats_total/bypassed} /sys/fs/bcache/*/congested*")
				t.Fatalf("nothing dirty: %+v\n%s", st, out)
			}
			failing(t, true)
			// A read of dirty data that the cache cannot deliver fails: it is never served
			// stale from the backing disk.
			out, _, code, _ := g.vm.Run(ctx, "set -o pipefail; "+sum)
			if got := strings.TrimSpace(out); code == 0 && got != want {
				t.Errorf("with dirty data on a failing SSD the volume read %s without an error, want %s or an error", got, want)
			}
			out, _, _, _ = g.vm.Run(ctx, "dmesg | grep -i bcache | tail -n 4")
			t.Logf("what bcache did:\n%s", out)
			r, code, _ = g.node(t, "apply", "failing.yaml")
			wantError(t, r, code, "CacheDeviceErrors", "cacheDevice.path", "dirty")
			if len(r.Volumes[0].Steps) != 0 {
				t.Errorf("apply with dirty data on a failing SSD ran %s", r.stepKinds())
			}
			failing(t, false)
			if r, code, _ := g.node(t, "apply", "failing.yaml"); code != 0 {
				t.Fatalf("apply with the SSD reading again: %s", r)
			}
			if r, code, _ := g.node(t, "flush", "failing.yaml"); code != 0 {
				t.Fatalf("flush: %s", r)
			}
			if got := g.sh(t, sum); got != want {
				t.Errorf("after the SSD came back the volume reads %s, want %s", got, want)
			}
		}},
		{"Teardown", func(t *testing.T) {
			if r, code, _ := g.node(t, "teardown", "failing.yaml", "--confirm"); code != 0 {
				t.Fatalf("teardown: %s", r)
			}
		}},
	})
}
