//go:build vm

package enginevm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/test/vmharness"
)

var (
	cacheLost   = vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-cache-lost", Size: 1 << 30}
	cacheSpare  = vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-cache-spare", Size: 1 << 30}
	survivorHDD = vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-hdd-survivor", Size: 1 << 30}
)

// TestCacheDeviceLossAndReplacement pulls the SSD out from under a running volume (its PCI
// function removed, as when a drive dies or is pulled): clean, the volume keeps serving from the
// backing disk and says so, and a new SSD is attached without touching the data; dirty, the
// engine says the dirty data is at stake and starts nothing by force.
func TestCacheDeviceLossAndReplacement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	g := bootGuest(t, ctx, cacheLost, cacheSpare, survivorHDD)
	const tunables = "  mode: writeback\n  dirtyThresholdPercent: 40\n  flushPeriod: 0s\n"
	g.volumeFile(t, "lost.yaml", "survivor", cacheLost.ByID(), survivorHDD.ByID(), trusted+tunables)
	g.volumeFile(t, "spare.yaml", "survivor", cacheSpare.ByID(), survivorHDD.ByID(), trusted+tunables)
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
	var before, backingUUID string

	steps := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"BuildWriteAndFlush", func(t *testing.T) {
			r, code, _ := g.node(t, "apply", "lost.yaml")
			if code != 0 {
				t.Fatalf("apply: %s", r)
			}
			backingUUID = r.Volumes[0].Status.BackingUUID
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
		{"ACleanCacheLostIsReportedAndTheVolumeServesUncached", func(t *testing.T) {
			pull(t, cacheLost)
			r, code, _ := g.node(t, "status", "lost.yaml")
			e := r.Volumes[0].Error
			if code == 0 || e == nil || e.Reason != "CacheDeviceLost" || e.Field != "cacheDevice.path" || !strings.Contains(e.Message, "no dirty data") {
				t.Fatalf("status with the SSD gone: exit %d\n%s", code, r)
			}
			// bcache learns of the loss at its next I/O to the cache: a read that was to be a
			// hit fails once, and then caching is disabled and the backing disk serves.
			first, _, firstCode, _ := g.vm.Run(ctx, sum)
			t.Logf("the first read after the loss: exit %d, %s", firstCode, strings.TrimSpace(first))
			deadline := time.Now().Add(30 * time.Second)
			for g.sh(t, "test -e /sys/block/$(basename $(readlink -f /dev/flashcache/survivor))/bcache/cache && echo attached || true") != "" {
				if time.Now().After(deadline) {
					t.Fatalf("bcache is still attached to its cache set after the SSD went away")
				}
				time.Sleep(time.Second)
			}
			if got := g.sh(t, sum); got != before {
				t.Errorf("uncached, the volume reads %s; before the loss %s", got, before)
			}
			r, _, _ = g.node(t, "status", "lost.yaml")
			if e := r.Volumes[0].Error; e == nil || !strings.Contains(e.Message, "uncached") || r.Volumes[0].Status == nil {
				t.Errorf("status once bcache runs uncached: want the message to say so, with the device's status\n%s", r)
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
		{"ADirtyCacheLostIsNotStartedByForce", func(t *testing.T) {
			if r, code, _ := g.node(t, "release", "spare.yaml"); code != 0 {
				t.Fatalf("release: %s", r)
			}
			dirty(t)
			r, _, _ := g.node(t, "status", "spare.yaml")
			if st := r.Volumes[0].Status; st == nil || st.DirtyBytes == 0 {
				t.Fatalf("nothing dirty before the loss: %s", r)
			}
			pull(t, cacheSpare)
			r, code, _ := g.node(t, "status", "spare.yaml")
			if e := r.Volumes[0].Error; code == 0 || e == nil || e.Reason != "CacheDeviceLost" || !strings.Contains(e.Message, "dirty data on it") {
				t.Fatalf("status with a dirty SSD gone: exit %d\n%s", code, r)
			}
			// Let bcache meet the loss, then ask the engine to converge: it must refuse.
			out, _, _, _ := g.vm.Run(ctx, "dd if=/dev/flashcache/survivor of=/dev/null bs=1M count=256 iflag=direct status=none; sleep 3; "+
				"cat /sys/block/bcache*/bcache/state 2>&1; dmesg | grep -i bcache | tail -n 5")
			t.Logf("what bcache did:\n%s", out)
			r, code, _ = g.node(t, "apply", "spare.yaml")
			if e := r.Volumes[0].Error; code == 0 || e == nil || e.Reason != "CacheDeviceLost" || !strings.Contains(e.Message, "not started") || len(r.Volumes[0].Steps) != 0 {
				t.Errorf("apply with a dirty SSD gone: exit %d, steps %s\n%s", code, r.stepKinds(), r)
			}
			// Nothing serves the stale blocks of the backing disk.
			if n := g.sh(t, "ls /sys/block/ | grep -c '^bcache' || true"); n != "0" {
				t.Errorf("%s bcache devices run after a dirty cache was lost", n)
			}
		}},
		{"TeardownWithTheSSDGoneErasesWhatIsLeft", func(t *testing.T) {
			r, code, _ := g.node(t, "teardown", "spare.yaml", "--confirm")
			if code != 0 || r.Volumes[0].Teardown == nil {
				t.Fatalf("teardown: exit %d\n%s", code, r)
			}
			steps := strings.Join(r.Volumes[0].Teardown.Steps, "\n")
			if !strings.Contains(steps, "dirty data on it with it") || !strings.Contains(steps, "erased the bcache superblock of") {
				t.Errorf("teardown steps:\n%s", steps)
			}
			if sigs := g.sh(t, "wipefs --noheadings "+survivorHDD.ByID()); sigs != "" {
				t.Errorf("the backing disk still carries %s", sigs)
			}
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.fn) {
			t.Fatalf("%s failed; the later steps depend on it", s.name)
		}
	}
}
