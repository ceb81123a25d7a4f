//go:build vm

// Package durability cuts the power under a committing workload and counts the commits that
// were acknowledged and then lost: on an honest SSD and backing disk that both have volatile
// write caches, and on a backing disk that lies about flushes. It also checks that the
// durability check tells honest disks and SSDs from lying ones, and that its verdict is of the
// devices it probed.
package durability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/test/vmharness"
)

const (
	cuts = 3
	// recordsPerRound spaces the rounds apart on the volume (4 KiB records).
	recordsPerRound = 20000
	// Each round writes at least this many acknowledged records and runs at least this long,
	// so that writeback to the backing disk is under way when the power goes.
	minAcks   = 150
	minWrites = 6 * time.Second
	// commitRecord is past every round's records: the last round's closing commit goes there.
	commitRecord = (cuts + 2) * recordsPerRound
)

type volume struct {
	name          string
	cache, hdd    vmharness.Disk
	extra         string // spec lines for the run (the liar needs policy Warn to get writeback)
	acked         int64  // acknowledged records over all rounds
	lostVolume    int    // acknowledged records missing when read through the volume
	lostBacking   int    // acknowledged records missing on the backing disk after flush and detach
	lostInLastCut int    // of those, records of the round that ends with writeback done and a commit
	roundsCovered []roundRange
}

type roundRange struct {
	round, start, count int64
}

func TestPowerCutLosesNoAcknowledgedWriteOnHonestDisks(t *testing.T) {
	image, binary := vmharness.ImageFromEnv(t), vmharness.BinaryFromEnv(t)
	writer := filepath.Join(t.TempDir(), "diskwriter")
	build := exec.Command("go", "build", "-o", writer, "./diskwriter")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building diskwriter: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()

	// The honest volume's SSD has a volatile cache too, which its flushes write to flash: a
	// power cut loses what bcache did not flush, on both of its disks.
	honest := &volume{name: "vol-honest",
		cache: vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-pc-cache-h", Size: 1 << 30, Cache: vmharness.CacheVolatileHonest},
		hdd:   vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-pc-honest", Size: 1 << 30, Cache: vmharness.CacheVolatileHonest}}
	liar := &volume{name: "vol-liar",
		cache: vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-pc-cache-l", Size: 1 << 30},
		// Unthrottled: a lying cache takes writes at its interface's speed, and QEMU's token
		// bucket would add its own jitter to the flush cost the check measures.
		hdd:   vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-pc-liar", Size: 1 << 30, Cache: vmharness.CacheVolatileLying, IOPS: -1},
		extra: "  safety: {policy: Warn}\n"}
	// An SSD that acknowledges flushes it does not do, checked only: beside a plain disk.
	ssdLiar := &volume{name: "vol-ssd-liar",
		cache: vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-pc-ssd-liar", Size: 256 << 20, Cache: vmharness.CacheVolatileLying},
		hdd:   vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-pc-plain", Size: 256 << 20}}
	vm, err := vmharness.Boot(ctx, vmharness.Options{Image: image, WorkDir: t.TempDir(), Logf: t.Logf,
		Disks: []vmharness.Disk{honest.cache, honest.hdd, liar.cache, liar.hdd, ssdLiar.cache, ssdLiar.hdd}})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	vm.LogDiagnosticsOnFailure(t)
	sh := func(t *testing.T, cmd string) string {
		t.Helper()
		out, err := vm.Output(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	for local, remote := range map[string]string{binary: "/usr/local/bin/flashcache", writer: "/usr/local/bin/diskwriter"} {
		if err := vm.CopyFile(ctx, local, remote, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// dirtyThresholdPercent 0: writeback runs all the time, so a cut lands in the middle of it.
	file := func(v *volume, name, extra string) {
		doc := fmt.Sprintf("apiVersion: flashcache.io/v1alpha1\nkind: FlashCacheVolume\nmetadata: {name: %s}\nspec:\n"+
			"  nodeName: vm\n  cacheDevice: {path: %s}\n  backingDevice: {path: %s}\n  dirtyThresholdPercent: 0\n  sequentialCutoff: 0\n%s",
			v.name, v.cache.ByID(), v.hdd.ByID(), extra)
		local := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(local, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := vm.CopyFile(ctx, local, "/root/"+name, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file(honest, "honest.yaml", "")
	file(liar, "liar.yaml", "")
	file(liar, "liar-warn.yaml", liar.extra)
	file(ssdLiar, "ssd-liar.yaml", "")

	t.Run("CheckTellsTheHonestDiskFromTheLiar", func(t *testing.T) {
		verdicts := map[string]string{}
		for _, f := range []string{"honest.yaml", "liar.yaml", "ssd-liar.yaml"} {
			var r struct {
				Volumes []struct {
					Check struct {
						Devices []struct {
							Role    string   `json:"role"`
							Verdict string   `json:"verdict"`
							Reasons []string `json:"reasons"`
						} `json:"devices"`
					} `json:"check"`
				} `json:"volumes"`
			}
			out := sh(t, "flashcache node check -o json --config /root/"+f)
			if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Volumes) != 1 {
				t.Fatalf("%s: %v\n%s", f, err, out)
			}
			for _, d := range r.Volumes[0].Check.Devices {
				t.Logf("%s %s: %s %q", f, d.Role, d.Verdict, d.Reasons)
				verdicts[f+" "+d.Role] = d.Verdict
			}
		}
		for _, want := range []struct{ device, verdict string }{
			{"honest.yaml cache", "Safe"}, {"honest.yaml backing", "Safe"},
			{"liar.yaml backing", "Unsafe"}, {"ssd-liar.yaml cache", "Unsafe"},
		} {
			if got := verdicts[want.device]; got != want.verdict {
				t.Errorf("%s: %s, want %s", want.device, got, want.verdict)
			}
		}
	})

	t.Run("EnforceKeepsTheLiarOutOfWriteback", func(t *testing.T) {
		sh(t, "flashcache node apply --config /root/honest.yaml")
		if mode := sh(t, "cat /sys/block/$(basename $(readlink -f /dev/flashcache/vol-honest))/bcache/cache_mode"); !strings.Contains(mode, "[writeback]") {
			t.Errorf("honest volume: %q, want writeback", mode)
		}
		out := sh(t, "flashcache node apply --config /root/liar.yaml")
		if mode := sh(t, "cat /sys/block/$(basename $(readlink -f /dev/flashcache/vol-liar))/bcache/cache_mode"); !strings.Contains(mode, "[writethrough]") {
			t.Errorf("lying backing disk under Enforce: %q, want writethrough", mode)
		}
		if !strings.Contains(out, "Unsafe") {
			t.Errorf("apply did not say why:\n%s", out)
		}
		// Forced, to show what the check prevents.
		sh(t, "flashcache node apply --config /root/liar-warn.yaml")
	})
	if t.Failed() {
		t.FailNow()
	}
	// No pause between writeback passes (the engine keeps bcache's 30 s): with the spec's
	// dirtyThresholdPercent 0, bcache writes back all the time, so each cut lands mid-writeback.
	keepWritingBack := func(t *testing.T) {
		t.Helper()
		for _, v := range []*volume{honest, liar} {
			sh(t, "echo 0 > /sys/block/$(basename $(readlink -f /dev/flashcache/"+v.name+"))/bcache/writeback_delay")
		}
	}
	keepWritingBack(t)
	// From here on a cut loses only what the workload writes (and bcache writes back).
	if err := vm.WriteBackDiskCaches(ctx); err != nil {
		t.Fatal(err)
	}

	// The last round (run first): a batch made durable with one flush, then no flush from the
	// workload while bcache writes it back and marks it clean; one more commit, and the power
	// goes. Does writeback make the backing disk's volatile cache durable before it marks the
	// data clean?
	{
		round := int64(cuts + 1)
		start := (round - 1) * recordsPerRound
		const batch = 4096 // 16 MiB
		for _, v := range []*volume{honest, liar} {
			sh(t, fmt.Sprintf("echo 0 > /sys/block/$(basename $(readlink -f /dev/flashcache/%s))/bcache/writeback_running", v.name))
			out := sh(t, fmt.Sprintf("diskwriter -batch -dev /dev/flashcache/%s -start %d -count %d -round %d", v.name, start, batch, round))
			if out != fmt.Sprintf("ack %d", start+batch-1) {
				t.Fatalf("batch writer: %q", out)
			}
			v.acked += batch
			v.roundsCovered = append(v.roundsCovered, roundRange{round, start, batch})
		}
		// Writeback at about 1 MiB/s (under its target the rate falls to writeback_rate_minimum,
		// here 2048 sectors/s).
		for _, v := range []*volume{honest, liar} {
			sh(t, fmt.Sprintf("cd /sys/block/$(basename $(readlink -f /dev/flashcache/%s))/bcache && "+
				"echo 10 > writeback_percent && echo 2048 > writeback_rate_minimum && echo 1 > writeback_running", v.name))
		}
		// Wait until writeback has written the whole batch back and counted it clean.
		for _, v := range []*volume{honest, liar} {
			dir := "/sys/block/$(basename $(readlink -f /dev/flashcache/" + v.name + "))/bcache/"
			deadline := time.Now().Add(2 * time.Minute)
			for {
				d := sh(t, "cat "+dir+"dirty_data")
				if kibOf(d) == 0 {
					sh(t, "echo 0 > "+dir+"writeback_running")
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: writeback did not finish: %s dirty", v.name, d)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		// bcache writes a dirty btree node 30 s after it was dirtied: after that, the keys that
		// writeback marked clean are on the cache device, and the data they describe lives only
		// on the backing disk.
		time.Sleep(35 * time.Second)
		// The workload commits once more. Until a journal entry is written after the btree
		// nodes, a restart replays the batch's journal entries, which mark the batch dirty again
		// and have it written back once more; on a live database the next commit writes one.
		// Without this commit the liar lost the whole batch in some runs and nothing in others.
		for _, v := range []*volume{honest, liar} {
			sh(t, fmt.Sprintf("diskwriter -dev /dev/flashcache/%s -start %d -count 1 -round %d", v.name, commitRecord, round))
		}
		if err := vm.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := vm.Start(ctx); err != nil {
			t.Fatal(err)
		}
		sh(t, "flashcache node apply --config /root/honest.yaml && flashcache node apply --config /root/liar-warn.yaml")
		keepWritingBack(t)
		for _, v := range []*volume{honest, liar} {
			v.lostVolume += missing(t, sh, "/dev/flashcache/"+v.name, 0, v.roundsCovered[len(v.roundsCovered)-1])
		}
	}

	for round := int64(1); round <= cuts; round++ {
		start := (round - 1) * recordsPerRound
		acks := map[*volume]*int64{}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, v := range []*volume{honest, liar} {
			last := start - 1
			acks[v] = &last
			wg.Add(1)
			go func(v *volume) {
				defer wg.Done()
				r, w, _ := os.Pipe()
				go func() {
					sc := bufio.NewScanner(r)
					for sc.Scan() {
						if n, err := strconv.ParseInt(strings.TrimPrefix(sc.Text(), "ack "), 10, 64); err == nil {
							mu.Lock()
							*acks[v] = n
							mu.Unlock()
						}
					}
				}()
				// Ends with an error when the power goes: that is the point.
				_, _ = vm.Stream(ctx, fmt.Sprintf("diskwriter -dev /dev/flashcache/%s -start %d -count %d -round %d",
					v.name, start, recordsPerRound, round), w)
				_ = w.Close()
			}(v)
		}
		began := time.Now()
		for {
			mu.Lock()
			ready := *acks[honest]-start >= minAcks && *acks[liar]-start >= minAcks
			mu.Unlock()
			if ready && time.Since(began) >= minWrites {
				break
			}
			if time.Since(began) > 5*time.Minute {
				t.Fatalf("round %d: the writers acknowledged too little in 5 minutes", round)
			}
			time.Sleep(200 * time.Millisecond)
		}
		mu.Lock()
		written := (*acks[honest] - start + 1) * 4
		mu.Unlock()
		dirty := sh(t, "cat /sys/block/$(basename $(readlink -f /dev/flashcache/vol-honest))/bcache/dirty_data") + " of " +
			strconv.FormatInt(written, 10) + " KiB written"
		if err := vm.Kill(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		for _, v := range []*volume{honest, liar} {
			n := *acks[v] - start + 1
			v.acked += n
			v.roundsCovered = append(v.roundsCovered, roundRange{round, start, n})
		}
		mu.Unlock()
		wg.Wait()
		last := len(honest.roundsCovered) - 1
		t.Logf("round %d: power cut with %s dirty on the honest volume; acknowledged %d (honest) and %d (liar)",
			round, dirty, honest.roundsCovered[last].count, liar.roundsCovered[last].count)
		if err := vm.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// The engine adopts the volumes after the cut, as the agent or the boot unit would.
		sh(t, "flashcache node apply --config /root/honest.yaml && flashcache node apply --config /root/liar-warn.yaml")
		keepWritingBack(t)
		for _, v := range []*volume{honest, liar} {
			v.lostVolume += missing(t, sh, "/dev/flashcache/"+v.name, 0, v.roundsCovered[len(v.roundsCovered)-1])
		}
	}

	// Everything through the cache onto the backing disks, then read them directly.
	for _, v := range []*volume{honest, liar} {
		f := map[*volume]string{honest: "honest.yaml", liar: "liar-warn.yaml"}[v]
		sh(t, "flashcache node flush --timeout 20m --config /root/"+f)
		bc := "/sys/block/$(basename $(readlink -f /dev/flashcache/" + v.name + "))/bcache/"
		sh(t, "echo 1 > "+bc+"detach && for i in $(seq 300); do [ \"$(cat "+bc+"state)\" = 'no cache' ] && break; sleep 0.1; done")
		offset, err := strconv.ParseInt(sh(t, "bcache-super-show "+v.hdd.ByID()+" | awk '/dev.data.first_sector/ {print $2}'"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		for _, rr := range v.roundsCovered {
			n := missing(t, sh, v.hdd.ByID(), offset*512, rr)
			t.Logf("%s round %d: %d of %d lost on the backing disk", v.name, rr.round, n, rr.count)
			v.lostBacking += n
			if rr.round == cuts+1 {
				v.lostInLastCut += n
			}
		}
	}

	t.Logf("\n%-28s %5s %8s %22s %30s\n%-28s %5d %8d %22d %30d\n%-28s %5d %8d %22d %30d",
		"case", "cuts", "acked", "lost (through volume)", "lost (backing, after flush)",
		"honest volatile caches", cuts+1, honest.acked, honest.lostVolume, honest.lostBacking,
		"lying cache (forced by Warn)", cuts+1, liar.acked, liar.lostVolume, liar.lostBacking)
	if honest.lostVolume != 0 || honest.lostBacking != 0 {
		t.Errorf("honest disks lost acknowledged writes: %d through the volume, %d on the backing disk", honest.lostVolume, honest.lostBacking)
	}
	if liar.lostVolume+liar.lostBacking == 0 {
		t.Errorf("the lying disk lost nothing: the test cannot tell a lie from the truth")
	}
	if liar.lostInLastCut == 0 {
		t.Errorf("the lying disk kept the batch bcache had written back and marked clean: the last cut proves nothing")
	}

	// This boot's check of vol-honest found its disks Safe. The same name, rebuilt on the liar's
	// disks without a teardown (by hand, as someone might), must be probed again, not given the
	// honest disks' verdict; and a teardown forgets the check.
	t.Run("ACheckIsOfTheDevicesItProbed", func(t *testing.T) {
		if out := sh(t, "cat /run/flashcache/checks/vol-honest.json"); !strings.Contains(out, `"verdict": "Safe"`) {
			t.Fatalf("no Safe check of vol-honest this boot:\n%s", out)
		}
		sh(t, "for d in /sys/block/bcache*; do echo 1 > $d/bcache/stop; done; "+
			"for i in $(seq 100); do ls -d /sys/block/bcache* >/dev/null 2>&1 || break; sleep 0.1; done; "+
			"for s in /sys/fs/bcache/*-*; do echo 1 > $s/unregister; done; "+
			"for i in $(seq 100); do ls -d /sys/fs/bcache/*-* >/dev/null 2>&1 || break; sleep 0.1; done; "+
			"for p in $(lsblk -nro NAME "+liar.cache.ByID()+" | tail -n +2); do wipefs -qa /dev/$p; done; "+
			"wipefs -qa "+liar.cache.ByID()+" "+liar.hdd.ByID()+" && rm -f /dev/flashcache/vol-honest /dev/flashcache/vol-liar && udevadm settle")
		moved := &volume{name: honest.name, cache: liar.cache, hdd: liar.hdd}
		file(moved, "moved.yaml", "")
		out := sh(t, "flashcache node apply --config /root/moved.yaml")
		if mode := sh(t, "cat /sys/block/$(basename $(readlink -f /dev/flashcache/vol-honest))/bcache/cache_mode"); !strings.Contains(mode, "[writethrough]") {
			t.Errorf("vol-honest rebuilt on the lying disk: %q, want writethrough\n%s", mode, out)
		}
		liarDev := sh(t, "readlink -f "+liar.hdd.ByID())
		if !strings.Contains(out, "Unsafe") || !strings.Contains(out, "backing "+liarDev) {
			t.Errorf("apply did not probe the lying disk %s:\n%s", liarDev, out)
		}
		sh(t, "flashcache node teardown --confirm --config /root/moved.yaml")
		if out := sh(t, "ls /run/flashcache/checks/"); strings.Contains(out, "vol-honest") {
			t.Errorf("teardown left the check behind: %s", out)
		}
	})
}

// missing counts the records of a round that are absent or damaged on dev, whose record 0 is
// at base bytes.
func missing(t *testing.T, sh func(*testing.T, string) string, dev string, base int64, rr roundRange) int {
	t.Helper()
	if rr.count <= 0 {
		return 0
	}
	out := sh(t, fmt.Sprintf("diskwriter -verify -dev %s -base %d -start %d -count %d -round %d", dev, base, rr.start, rr.count, rr.round))
	var lost, total int
	if _, err := fmt.Sscanf(out, "missing %d of %d", &lost, &total); err != nil {
		t.Fatalf("verify output %q: %v", out, err)
	}
	return lost
}

// kibOf reads bcache's human sizes ("3.1M", "512.0k") in KiB; 0 for anything else.
func kibOf(s string) float64 {
	mult := map[byte]float64{'k': 1, 'M': 1 << 10, 'G': 1 << 20}
	if s == "" {
		return 0
	}
	m, ok := mult[s[len(s)-1]]
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(s[:len(s)-1], 64)
	if err != nil {
		return 0
	}
	return v * m
}
