//go:build ansible

// Package ansible runs the role and the playbooks for real, over SSH, against the test VM with
// an emulated NVMe drive and a 7200 rpm disk, as `make test-ansible` does.
package ansible

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/testenv"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

const volumeName = "mysql-data"

// recap is a host's line of the PLAY RECAP.
type recap struct{ ok, changed, failed int }

var recapLine = regexp.MustCompile(`(?m)^vm\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)`)

type bed struct {
	t         *testing.T
	ctx       context.Context
	vm        *vmharness.VM
	dir       string
	inventory string
	ansible   string
	// mitogen is the folder of Mitogen's strategy plugins, which most runs use: under emulation
	// a task's own Python interpreter costs 4-15 s, Mitogen's one interpreter per host a second.
	mitogen string
}

// playbook runs a playbook of playbooks/ (or a path) with extra arguments through Mitogen; it
// returns the output and the VM's recap, and whether ansible-playbook succeeded.
func (b *bed) playbook(t *testing.T, name string, args ...string) (string, recap, bool) {
	t.Helper()
	return b.run(t, "mitogen_linear", name, args...)
}

// stockPlaybook runs a playbook with Ansible's own strategy, as the role's users run it.
func (b *bed) stockPlaybook(t *testing.T, name string, args ...string) (string, recap, bool) {
	t.Helper()
	return b.run(t, "linear", name, args...)
}

func (b *bed) run(t *testing.T, strategy, name string, args ...string) (string, recap, bool) {
	t.Helper()
	path := name
	if !filepath.IsAbs(name) {
		path = filepath.Join(testenv.RepoRoot(), "playbooks", name)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(b.ansible, "ansible-playbook"), append([]string{"-i", b.inventory, path}, args...)...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "ANSIBLE_HOME="+filepath.Join(b.dir, "ansible-home"),
		"ANSIBLE_NOCOLOR=1", "ANSIBLE_HOST_KEY_CHECKING=True", "ANSIBLE_RETRY_FILES_ENABLED=False",
		"ANSIBLE_ROLES_PATH="+filepath.Join(testenv.RepoRoot(), "roles"),
		"ANSIBLE_STRATEGY_PLUGINS="+b.mitogen, "ANSIBLE_STRATEGY="+strategy,
		// Mitogen's connection includes starting its interpreter on the VM, which under
		// emulation on a loaded host took longer than the 10 s default: the host was unreachable.
		"ANSIBLE_TIMEOUT=120",
		"PATH="+b.ansible+":"+os.Getenv("PATH"))
	began := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("ansible-playbook (%s) %s %s: %s", strategy, filepath.Base(path), strings.Join(args, " "), time.Since(began).Round(100*time.Millisecond))
	text := string(out)
	var r recap
	if m := recapLine.FindStringSubmatch(text); m != nil {
		r.ok, _ = strconv.Atoi(m[1])
		r.changed, _ = strconv.Atoi(m[2])
		r.failed, _ = strconv.Atoi(m[3])
	}
	return text, r, err == nil
}

func (b *bed) sh(t *testing.T, cmd string) string {
	t.Helper()
	out, err := b.vm.Output(b.ctx, cmd)
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return strings.TrimSpace(out)
}

// nodeStatus is what `flashcache node status` reports of the volume.
func (b *bed) nodeStatus(t *testing.T) (dirty int64, mode string) {
	t.Helper()
	return b.nodeStatusOf(t, volumeName)
}

// nodeStatusOf is what `flashcache node status` reports of the host's only volume, name.
func (b *bed) nodeStatusOf(t *testing.T, name string) (dirty int64, mode string) {
	t.Helper()
	var report struct {
		Volumes []struct {
			Name   string `json:"name"`
			Status struct {
				DirtyBytes int64  `json:"dirtyBytes"`
				CacheMode  string `json:"cacheMode"`
			} `json:"status"`
		} `json:"volumes"`
	}
	out := b.sh(t, "flashcache node status --config /etc/flashcache/volumes.yaml -o json --volume "+name)
	if err := json.Unmarshal([]byte(out), &report); err != nil || len(report.Volumes) != 1 || report.Volumes[0].Name != name {
		t.Fatalf("node status, want volume %s: %v\n%s", name, err, out)
	}
	return report.Volumes[0].Status.DirtyBytes, report.Volumes[0].Status.CacheMode
}

// dirty writes random 4 KiB blocks that stay on the cache (dirtyThresholdPercent 40, no
// time-based flush): data the flush must carry to the backing disk.
func (b *bed) dirty(t *testing.T, mib int) int64 {
	t.Helper()
	b.sh(t, fmt.Sprintf("fio --name=dirty --filename=/dev/flashcache/%s --rw=randwrite --bs=4k --size=256M "+
		"--io_size=%dM --direct=1 --ioengine=psync --randrepeat=0 --output=/dev/null", volumeName, mib))
	d, _ := b.nodeStatus(t)
	if d < int64(mib)<<20/3 {
		t.Fatalf("only %d bytes dirty after writing %d MiB", d, mib)
	}
	return d
}

func TestPlaybooksOnTheVM(t *testing.T) {
	image, binary := vmharness.ImageFromEnv(t), vmharness.BinaryFromEnv(t)
	ansible := os.Getenv("FLASHCACHE_ANSIBLE_BIN")
	if ansible == "" {
		t.Fatal("FLASHCACHE_ANSIBLE_BIN is not set (make test-ansible sets it to hack/install-ansible.sh's folder)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	dir := t.TempDir()
	nvme := vmharness.Disk{Kind: vmharness.NVMe, Serial: "fc-ansible-cache", Size: 1 << 30}
	// A volatile cache that honours flushes, as a real 7200 rpm disk's: the role's apply runs
	// the durability check, and QEMU's plain disk is rightly judged Unsafe.
	hdd := vmharness.Disk{Kind: vmharness.HDD, Serial: "fc-ansible-backing", Size: 2 << 30, Cache: vmharness.CacheVolatileHonest}
	vm, err := vmharness.Boot(ctx, vmharness.Options{Image: image, WorkDir: filepath.Join(dir, "vm"), Logf: t.Logf,
		Disks: []vmharness.Disk{nvme, hdd}})
	if vm != nil {
		defer vm.Close()
		vm.LogDiagnosticsOnFailure(t)
	}
	if err != nil {
		t.Fatal(err)
	}
	b := &bed{t: t, ctx: ctx, vm: vm, dir: dir, ansible: ansible, inventory: filepath.Join(dir, "inventory.yml"),
		mitogen: mitogenStrategies(t, ansible)}
	writeInventory(t, b.inventory, vm, binary, nvme, hdd)

	t.Run("BadVariablesFailNamingThem", func(t *testing.T) {
		out, _, ok := b.playbook(t, "provision.yml", "-e", `{"flashcache_volumes": [{"name": "x", "cacheDevice": {"path": "/dev/a"}, "backingDevice": {"path": "/dev/b"}, "mode": "writefast"}]}`)
		if ok || !strings.Contains(out, "mode") || !strings.Contains(out, "writefast") {
			t.Errorf("mode: writefast: want a failure naming mode and the value:\n%s", tail(out))
		}
		out, _, ok = b.playbook(t, "provision.yml", "-e", `{"flashcache_volumes": [{"name": "x", "cacheDevice": {"path": "/dev/a", "overProvision": 10}, "backingDevice": {"path": "/dev/b"}}]}`)
		if ok || !strings.Contains(out, "overProvision") {
			t.Errorf("an unknown option: want a failure naming it:\n%s", tail(out))
		}
		out, _, ok = b.playbook(t, "provision.yml", "-e", "flashcache_binary_source=url", "-e", "flashcache_binary_url=http://example.invalid/flashcache")
		if ok || !strings.Contains(out, "flashcache_binary_sha256") {
			t.Errorf("a URL without a checksum: want a failure naming flashcache_binary_sha256:\n%s", tail(out))
		}
		b.assertUntouched(t)
	})

	t.Run("CheckModeOnAFreshHostChangesNothing", func(t *testing.T) {
		out, r, ok := b.playbook(t, "provision.yml", "--check", "--diff")
		if !ok || r.changed == 0 {
			t.Errorf("check mode: ok=%v, recap %+v: want success and changes announced\n%s", ok, r, tail(out))
		}
		b.assertUntouched(t)
	})

	t.Run("ProvisionBuildsTheVolumeAndSetsFacts", func(t *testing.T) {
		out, r, ok := b.stockPlaybook(t, filepath.Join(testenv.RepoRoot(), "operator", "test", "ansible", "testdata", "provision-and-read-facts.yml"))
		if !ok || r.changed == 0 || r.failed != 0 {
			t.Fatalf("provision: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
		m := regexp.MustCompile(`FACTS (\{.*\})"`).FindStringSubmatch(strings.ReplaceAll(out, `\"`, `"`))
		if m == nil {
			t.Fatalf("no facts printed:\n%s", tail(out))
		}
		var facts struct {
			Devices  map[string]string `json:"devices"`
			Verdicts map[string]string `json:"verdicts"`
		}
		if err := json.Unmarshal([]byte(m[1]), &facts); err != nil {
			t.Fatalf("facts %s: %v", m[1], err)
		}
		if facts.Devices[volumeName] != "/dev/flashcache/"+volumeName || facts.Verdicts[volumeName] != "Safe" {
			t.Errorf("facts: %+v, want the device path and a Safe verdict", facts)
		}
		if got := b.sh(t, "readlink -f /dev/flashcache/"+volumeName+" && systemctl is-active flashcache.service && systemctl is-enabled flashcache.service"); !strings.Contains(got, "/dev/bcache") || strings.Count(got, "active")+strings.Count(got, "enabled") != 2 {
			t.Errorf("device and unit: %q", got)
		}
		if _, mode := b.nodeStatus(t); mode != "writeback" {
			t.Errorf("cache mode %s, want writeback", mode)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("SecondRunChangesNothing", func(t *testing.T) {
		out, r, ok := b.playbook(t, "provision.yml")
		if !ok || r.changed != 0 {
			t.Errorf("second run: ok=%v, recap %+v, want changed=0\n%s", ok, r, tail(out))
		}
	})

	t.Run("CheckModeAfterwardsChangesNothing", func(t *testing.T) {
		out, r, ok := b.playbook(t, "provision.yml", "--check", "--diff")
		if !ok || r.changed != 0 {
			t.Errorf("check mode: ok=%v, recap %+v, want changed=0\n%s", ok, r, tail(out))
		}
	})

	t.Run("ABadSpecInCheckModeFailsNamingTheFieldAndChangesNothing", func(t *testing.T) {
		before := b.sh(t, "cat /etc/flashcache/volumes.yaml")
		volumes := fmt.Sprintf(`{"flashcache_volumes": [{"name": %q, "cacheDevice": {"path": %q, "overProvisionPercent": 80}, "backingDevice": {"path": %q}}]}`,
			volumeName, nvme.ByID(), hdd.ByID())
		out, _, ok := b.playbook(t, "provision.yml", "--check", "-e", volumes)
		if ok || !strings.Contains(out, "spec.cacheDevice.overProvisionPercent") {
			t.Errorf("overProvisionPercent 80: want a failure naming spec.cacheDevice.overProvisionPercent:\n%s", tail(out))
		}
		if after := b.sh(t, "cat /etc/flashcache/volumes.yaml"); after != before {
			t.Errorf("check mode changed the volume file:\n%s", after)
		}
	})

	t.Run("BinaryFromAURLIsChecksumVerified", func(t *testing.T) {
		url, sum := serve(t, binary)
		out, _, ok := b.playbook(t, "provision.yml", "-e", "flashcache_binary_source=url", "-e", "flashcache_binary_url="+url,
			"-e", "flashcache_binary_sha256="+strings.Repeat("0", 64))
		if ok || !strings.Contains(strings.ToLower(out), "checksum") {
			t.Errorf("a wrong checksum: want a failure about it:\n%s", tail(out))
		}
		out, r, ok := b.playbook(t, "provision.yml", "-e", "flashcache_binary_source=url", "-e", "flashcache_binary_url="+url,
			"-e", "flashcache_binary_sha256="+sum)
		if !ok || r.changed != 0 {
			t.Errorf("the right checksum, same binary: ok=%v, recap %+v, want changed=0\n%s", ok, r, tail(out))
		}
	})

	t.Run("DrainBlocksUntilCleanAndPrintsProgress", func(t *testing.T) {
		dirty := b.dirty(t, 12)
		// The HDD slowed to 40 writes a second for the drain: at its own 150 the 12 MiB went in
		// about 20 s, and on a loaded host (CI, beside other tiers) one round of the role's wait
		// took as long, so the flush was over before the second round read a progress line. A
		// user's slow flush is what the progress is for; about a minute of it gives each run
		// several rounds.
		if err := vm.SetIOPS(ctx, hdd, 40); err != nil {
			t.Fatalf("slowing the HDD for the drain: %v", err)
		}
		defer func() {
			if err := vm.SetIOPS(ctx, hdd, 0); err != nil {
				t.Errorf("giving the HDD its own speed back: %v", err)
			}
		}()
		began := time.Now()
		// A drain that stalls fails within 5 minutes with the role's own message (the last
		// progress line) instead of meeting the playbook's 15-minute kill. key=value, as a user
		// types it: the value is then a string, which the role's arithmetic must take.
		out, r, ok := b.playbook(t, "drain.yml", "-e", "flashcache_drain_progress_interval=2", "-e", "flashcache_drain_timeout=300")
		if !ok || r.failed != 0 {
			t.Fatalf("drain: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
		t.Logf("drain of %.1f MiB took %s", float64(dirty)/(1<<20), time.Since(began).Round(time.Second))
		progress := regexp.MustCompile(`"msg": "(`+volumeName+`: ([0-9.]+) MiB dirty[^"]*)"`).FindAllStringSubmatch(out, -1)
		if len(progress) == 0 {
			t.Fatalf("drain printed no progress:\n%s", tail(out))
		}
		t.Logf("%d progress lines, first %q, last %q", len(progress), progress[0][1], progress[len(progress)-1][1])
		dirtyIn := func(line []string) float64 {
			v, _ := strconv.ParseFloat(line[2], 64)
			return v
		}
		if first, last := dirtyIn(progress[0]), dirtyIn(progress[len(progress)-1]); len(progress) > 1 && last >= first {
			t.Errorf("the progress lines do not show the flush advancing: %.1f MiB dirty first, %.1f MiB last", first, last)
		}
		if d, mode := b.nodeStatus(t); d != 0 || mode != "writethrough" {
			t.Errorf("after drain: %d bytes dirty, %s; want 0 and writethrough (held)", d, mode)
		}
	})

	t.Run("UndrainRestoresWriteback", func(t *testing.T) {
		out, r, ok := b.playbook(t, "undrain.yml")
		if !ok || r.changed == 0 {
			t.Errorf("undrain: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
		if _, mode := b.nodeStatus(t); mode != "writeback" {
			t.Errorf("after undrain: %s, want writeback", mode)
		}
	})

	t.Run("CheckReportsTheVerdicts", func(t *testing.T) {
		out, r, ok := b.playbook(t, "check.yml")
		if !ok || r.changed != 0 || !strings.Contains(out, volumeName+": Safe, writeback allowed: True") {
			t.Errorf("check: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
	})

	t.Run("StoppingTheUnitFlushes", func(t *testing.T) {
		b.dirty(t, 8)
		b.sh(t, "systemctl stop flashcache.service")
		if d, mode := b.nodeStatus(t); d != 0 || mode != "writeback" {
			t.Errorf("after the shutdown flush: %d bytes dirty, %s; want 0 and the configured writeback", d, mode)
		}
		b.sh(t, "systemctl start flashcache.service")
	})

	// systemd's reboot path stops flashcache.service after the file systems (its flush) and
	// starts it at boot (its apply). The flush shows in the previous boot's journal (made
	// persistent for this), the apply in /dev/flashcache/, a tmpfs that only it fills. bcache's
	// own dirty count cannot tell: it marks written-back data clean lazily, in btree writes that
	// a reboot can precede, and counts that data dirty again after it (writing it back again).
	t.Run("RebootFlushesAtShutdownAndRegistersAtBoot", func(t *testing.T) {
		b.sh(t, "mkdir -p /var/log/journal && systemd-tmpfiles --create --prefix /var/log/journal && journalctl --flush")
		dirty := b.dirty(t, 8)
		// The earlier `systemctl stop` flushed in this boot too: only what comes after this counts.
		since := b.sh(t, "date +%s")
		if err := vm.Reboot(ctx); err != nil {
			t.Fatal(err)
		}
		writeInventory(t, b.inventory, vm, binary, nvme, hdd) // QEMU's SSH port is new
		if got := b.sh(t, "systemctl is-active flashcache.service; test -e /dev/flashcache/"+volumeName+" && echo registered"); got != "active\nregistered" {
			t.Errorf("after the reboot: %q, want the unit active and the volume registered", got)
		}
		shutdown := b.sh(t, "journalctl -b -1 -u flashcache.service -o cat --since @"+since)
		m := regexp.MustCompile(`flushed ([0-9.]+) MiB`).FindStringSubmatch(shutdown)
		if m == nil || m[1] == "0.0" {
			t.Errorf("the shutdown's journal shows no flush of the %.1f MiB dirty:\n%s", float64(dirty)/(1<<20), shutdown)
		} else {
			t.Logf("at shutdown the unit flushed %s MiB of %.1f MiB dirty", m[1], float64(dirty)/(1<<20))
		}
		if _, mode := b.nodeStatus(t); mode != "writeback" {
			t.Errorf("after the reboot: %s, want writeback", mode)
		}
	})

	t.Run("TheHostsLoopFlushesEveryPeriodAndSwitchesTheCutoffWithoutAPlaybook", func(t *testing.T) { testHostLoop(t, b, nvme, hdd) })

	t.Run("DatabaseSettingsRole", func(t *testing.T) {
		play := filepath.Join(testenv.RepoRoot(), "operator", "test", "ansible", "testdata", "mysql-settings.yml")
		out, r, ok := b.playbook(t, play)
		if !ok || r.changed == 0 {
			t.Fatalf("flashcache_mysql: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
		got := b.sh(t, "cat /etc/mysql/mariadb.conf.d/60-flashcache.cnf")
		for _, want := range []string{"innodb_flush_log_at_trx_commit = 1", "sync_binlog = 1", "innodb_flush_method = O_DIRECT"} {
			if !strings.Contains(got, want) {
				t.Errorf("the option file lacks %q:\n%s", want, got)
			}
		}
		if out, r, ok := b.playbook(t, play); !ok || r.changed != 0 {
			t.Errorf("second run: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
		if out, _, ok := b.playbook(t, play, "-e", "flashcache_mysql_flush_log_at_trx_commit=3"); ok || !strings.Contains(out, "flashcache_mysql_flush_log_at_trx_commit") {
			t.Errorf("a value out of its choices: want a failure naming it:\n%s", tail(out))
		}
	})

	t.Run("TeardownRefusesWithoutConfirmation", func(t *testing.T) {
		out, _, ok := b.playbook(t, "teardown.yml")
		if ok || !strings.Contains(out, "flashcache_teardown_confirm=vm") {
			t.Errorf("teardown without confirmation: want a refusal naming flashcache_teardown_confirm:\n%s", tail(out))
		}
		if got := b.sh(t, "test -e /dev/flashcache/"+volumeName+" && echo present"); got != "present" {
			t.Errorf("the volume is gone after a refused teardown")
		}
	})

	t.Run("TeardownWithConfirmation", func(t *testing.T) {
		out, r, ok := b.playbook(t, "teardown.yml", "-e", "flashcache_teardown_confirm=vm")
		if !ok || r.changed == 0 {
			t.Fatalf("teardown: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
		if got := b.sh(t, "ls /dev/flashcache/ 2>/dev/null; wipefs --no-act --output TYPE --noheadings "+hdd.ByID()+"; systemctl is-enabled flashcache.service || true"); strings.Contains(got, volumeName) || strings.Contains(got, "bcache") || !strings.Contains(got, "disabled") {
			t.Errorf("after teardown: %q", got)
		}
	})

	t.Run("APoolWithTwoCarvedVolumes", func(t *testing.T) { testPool(t, b, nvme, hdd) })
	t.Run("ISCSIBackingLUNWithCHAP", func(t *testing.T) { testISCSI(t, b, nvme, hdd) })
}

// testPool builds a pool of the SSD and the disk with two volumes carved from it, each with its
// own threshold, and tears it all down again.
func testPool(t *testing.T, b *bed, nvme, hdd vmharness.Disk) {
	raw, err := json.Marshal(map[string]any{
		"flashcache_pools": []map[string]any{{
			"name": "db", "cacheDevice": map[string]any{"path": nvme.ByID()},
			"backingDevices": []map[string]any{{"path": hdd.ByID()}},
		}},
		"flashcache_volumes": []map[string]any{
			{"name": "pool-a", "pool": map[string]any{"name": "db", "size": "256Mi"}, "safety": map[string]any{"trustWriteCache": true}},
			{"name": "pool-b", "pool": map[string]any{"name": "db", "size": "128Mi"}, "dirtyThresholdPercent": 20, "safety": map[string]any{"trustWriteCache": true}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	vars := string(raw)
	t.Run("ProvisionBuildsThePoolThenItsVolumes", func(t *testing.T) {
		out, r, ok := b.playbook(t, "provision.yml", "-e", vars)
		if !ok || r.changed == 0 {
			t.Fatalf("provision: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
		if got := b.sh(t, "lvs --noheadings -o lv_name fcp-db | sort | tr -s ' \\n' ' '"); strings.TrimSpace(got) != "fc-pool-a fc-pool-b" {
			t.Errorf("logical volumes of the pool: %q", got)
		}
		// pool-a leaves the threshold to its default; pool-b sets its own.
		for name, percent := range map[string]string{"pool-a": strconv.Itoa(int(fcv1.DefaultDirtyThresholdPercent)), "pool-b": "20"} {
			if _, mode := b.nodeStatusOf(t, name); mode != "writeback" {
				t.Errorf("%s: cache mode %s, want writeback", name, mode)
			}
			if got := b.sh(t, "cat /sys/block/$(basename $(readlink -f /dev/flashcache/"+name+"))/bcache/writeback_percent"); got != percent {
				t.Errorf("%s: writeback_percent %s, want %s", name, got, percent)
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Run("SecondRunChangesNothing", func(t *testing.T) {
		if out, r, ok := b.playbook(t, "provision.yml", "-e", vars); !ok || r.changed != 0 {
			t.Errorf("second run: ok=%v, recap %+v, want changed=0\n%s", ok, r, tail(out))
		}
	})
	t.Run("CheckModeChangesNothing", func(t *testing.T) {
		if out, r, ok := b.playbook(t, "provision.yml", "--check", "--diff", "-e", vars); !ok || r.changed != 0 {
			t.Errorf("check mode: ok=%v, recap %+v, want changed=0\n%s", ok, r, tail(out))
		}
	})
	t.Run("TeardownRemovesTheVolumesThenThePool", func(t *testing.T) {
		out, r, ok := b.playbook(t, "teardown.yml", "-e", "flashcache_teardown_confirm=vm", "-e", vars)
		if !ok || r.changed == 0 {
			t.Fatalf("teardown: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
		if got := b.sh(t, "ls /dev/flashcache/ 2>/dev/null; wipefs --no-act --noheadings "+nvme.ByID()+" "+hdd.ByID()+"; vgs --noheadings fcp-db 2>&1 || true"); strings.Contains(got, "pool-") ||
			strings.Contains(got, "LVM2") || strings.Contains(got, "bcache") || strings.Contains(got, "gpt") {
			t.Errorf("after teardown: %q", got)
		}
	})
}

// testISCSI builds a volume whose backing device is an iSCSI LUN (the guest serves the torn-down
// disk through LIO and logs in over 127.0.0.1), with CHAP credentials from the role's variables.
func testISCSI(t *testing.T, b *bed, nvme, hdd vmharness.Disk) {
	const right, wrong = "ansible-chap-7431", "ansible-wrong-2718"
	san := vmharness.ISCSITarget{IQN: "iqn.2003-01.io.flashcache.vm:ansible", User: "fc-ansible", Password: right,
		LUNs: []vmharness.Disk{hdd}}
	if err := b.vm.ServeISCSI(b.ctx, san); err != nil {
		t.Fatal(err)
	}
	vars := func(password string) string {
		raw, err := json.Marshal(map[string]any{
			"flashcache_volumes": []map[string]any{{
				"name": "san-data", "cacheDevice": map[string]any{"path": nvme.ByID()},
				"backingDevice": map[string]any{"iscsi": map[string]any{
					"portal": vmharness.Portal, "iqn": san.IQN, "lun": 0,
					"chapSecretRef": map[string]any{"name": "san-chap", "namespace": "flashcache-system"}}},
				"mode": "writeback", "safety": map[string]any{"trustWriteCache": true},
			}},
			"flashcache_chap_secrets": []map[string]any{{"name": "san-chap", "namespace": "flashcache-system",
				"username": san.User, "password": password}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	noPassword := func(t *testing.T, out string) {
		t.Helper()
		for _, p := range []string{right, wrong} {
			if strings.Contains(out, p) {
				t.Errorf("a CHAP password is in the playbook's output:\n%s", tail(out))
			}
		}
	}

	t.Run("AWrongPasswordFailsNamingTheSecretAndTouchesNothing", func(t *testing.T) {
		out, _, ok := b.playbook(t, "provision.yml", "--diff", "-e", vars(wrong))
		if ok || !strings.Contains(out, "ISCSILoginRefused") || !strings.Contains(out, "backingDevice.iscsi.chapSecretRef") {
			t.Errorf("a wrong CHAP password: want a failure naming ISCSILoginRefused and the field:\n%s", tail(out))
		}
		noPassword(t, out)
		if got := b.vm.ISCSISessions(b.ctx); got != "" {
			t.Errorf("sessions after a refused login: %q", got)
		}
		if got := b.sh(t, "wipefs --noheadings "+nvme.ByID()); got != "" {
			t.Errorf("the cache device was touched: %s", got)
		}
	})

	t.Run("TheRightPasswordBuildsTheVolumeAfterTheNetwork", func(t *testing.T) {
		out, r, ok := b.playbook(t, "provision.yml", "--diff", "-e", vars(right))
		if !ok || r.changed == 0 {
			t.Fatalf("provision: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
		noPassword(t, out)
		if got := b.vm.ISCSISessions(b.ctx); got != "LOGGED_IN" {
			t.Errorf("sessions %q, want one LOGGED_IN", got)
		}
		if got := b.sh(t, "stat -c '%a %U' /etc/flashcache/volumes.yaml"); got != "600 root" {
			t.Errorf("the volume file holds a password and is %s, want 600 root", got)
		}
		if got := b.sh(t, "systemctl is-active iscsid.service; systemctl is-enabled iscsid.service open-iscsi.service"); got != "active\nenabled\nenabled" {
			t.Errorf("iscsid and the boot login: %q", got)
		}
		// What systemd made of the unit: started after the network and iscsid, and (stopped in
		// reverse) flushed before the session is logged out and the network goes down.
		unit := b.sh(t, "systemctl show -p After -p Before -p WantedBy flashcache.service")
		for _, want := range []string{"network-online.target", "iscsid.service", "open-iscsi.service", "remote-fs.target"} {
			if !strings.Contains(unit, want) {
				t.Errorf("flashcache.service is not ordered with %s:\n%s", want, unit)
			}
		}
		if got := b.sh(t, "find /etc/systemd/system -path '*.wants/flashcache.service'"); got != "/etc/systemd/system/remote-fs.target.wants/flashcache.service" {
			t.Errorf("flashcache.service is enabled under %q, want remote-fs.target.wants", got)
		}
		if _, mode := b.nodeStatusOf(t, "san-data"); mode != "writeback" {
			t.Errorf("cache mode %s, want writeback", mode)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("SecondRunChangesNothing", func(t *testing.T) {
		out, r, ok := b.playbook(t, "provision.yml", "--diff", "-e", vars(right))
		if !ok || r.changed != 0 {
			t.Errorf("second run: ok=%v, recap %+v, want changed=0\n%s", ok, r, tail(out))
		}
		noPassword(t, out)
	})

	t.Run("TeardownFlushesAndLogsOut", func(t *testing.T) {
		b.sh(t, "fio --name=dirty --filename=/dev/flashcache/san-data --rw=randwrite --bs=4k --size=256M "+
			"--io_size=8M --direct=1 --ioengine=psync --randrepeat=0 --output=/dev/null")
		if d, _ := b.nodeStatusOf(t, "san-data"); d == 0 {
			t.Fatalf("nothing dirty after the write")
		}
		out, r, ok := b.playbook(t, "teardown.yml", "-e", "flashcache_teardown_confirm=vm", "-e", vars(right))
		if !ok || r.changed == 0 {
			t.Fatalf("teardown: ok=%v, recap %+v\n%s", ok, r, tail(out))
		}
		noPassword(t, out)
		if got := b.vm.ISCSISessions(b.ctx); got != "" {
			t.Errorf("sessions after teardown: %q", got)
		}
		if out, _, code, _ := b.vm.Run(b.ctx, "iscsiadm -m node -T "+san.IQN); code == 0 {
			t.Errorf("the node record is left (it would log in at boot):\n%s", out)
		}
	})
}

// mitogenStrategies is the folder of the strategy plugins of the Mitogen that
// hack/ansible-requirements.txt installs beside Ansible.
func mitogenStrategies(t *testing.T, ansible string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(ansible, "python3"), "-c",
		"import os, ansible_mitogen.plugins.strategy as s; print(os.path.dirname(s.__file__))").Output()
	if err != nil {
		t.Fatalf("Mitogen's strategy plugins (hack/ansible-requirements.txt): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// assertUntouched checks that nothing of the role reached the host.
func (b *bed) assertUntouched(t *testing.T) {
	t.Helper()
	if got := b.sh(t, "ls /usr/local/bin/flashcache /etc/flashcache /etc/systemd/system/flashcache.service 2>/dev/null; ls /sys/fs/bcache/ | grep -c -- - || true; wipefs --no-act --noheadings /dev/disk/by-id/*fc-ansible* 2>/dev/null | wc -l"); got != "0\n0" {
		t.Errorf("the host was changed: %q", got)
	}
}

func writeInventory(t *testing.T, path string, vm *vmharness.VM, binary string, nvme, hdd vmharness.Disk) {
	t.Helper()
	ssh := vm.SSHCommand() // ssh -i KEY -p PORT -o ... root@127.0.0.1
	var key, port string
	var options []string
	for i := 1; i < len(ssh)-1; i++ {
		switch ssh[i] {
		case "-i":
			key = ssh[i+1]
			i++
		case "-p":
			port = ssh[i+1]
			i++
		case "-o":
			options = append(options, "-o "+ssh[i+1])
			i++
		}
	}
	inventory := map[string]any{"flashcache": map[string]any{"hosts": map[string]any{"vm": map[string]any{
		"ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "root",
		"ansible_ssh_private_key_file": key, "ansible_ssh_common_args": strings.Join(options, " "),
		"ansible_python_interpreter": "/usr/bin/python3",
		"flashcache_binary_src":      binary,
		"flashcache_volumes": []map[string]any{{
			"name": volumeName, "cacheDevice": map[string]any{"path": nvme.ByID()},
			"backingDevice": map[string]any{"path": hdd.ByID()}, "mode": "writeback",
			// The data written stays on the cache until a flush: writeback idles below 40%
			// dirty, and no time-based flush runs.
			"dirtyThresholdPercent": 40, "flushPeriod": "0s",
		}},
	}}}}
	raw, err := yaml.Marshal(inventory)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// serve offers the binary over HTTP to the guest (QEMU forwards its vmharness.HostAddr to this
// host's loopback) and returns its URL and SHA-256.
func serve(t *testing.T, binary string) (string, string) {
	t.Helper()
	raw, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(raw)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return fmt.Sprintf("http://%s:%d/flashcache", vmharness.HostAddr, ln.Addr().(*net.TCPAddr).Port), hex.EncodeToString(sum[:])
}

// tail is the end of a playbook's output, where its failure is.
func tail(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return strings.Join(lines, "\n")
}

// testHostLoop: flashcache-run.service, which the role installs, keeps converging the volume on
// the host as the agent does on a node. Its dirty data reaches the backing disk within the flush
// period's bound, measured on the raw disk across a restart of the service, and the sequential
// cutoff switches on once the cache has filled, with no playbook run in between.
func testHostLoop(t *testing.T, b *bed, nvme, hdd vmharness.Disk) {
	// A pass every 15 s (half the period), each with a minute's limit (the floor).
	const period, limit, interval = 30 * time.Second, time.Minute, 10 * time.Second
	if got := b.sh(t, "systemctl is-active flashcache-run.service"); got != "active" {
		t.Fatalf("flashcache-run.service is %s after the boot, want active", got)
	}
	metrics := b.sh(t, `python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8090/metrics").read().decode())'`)
	if !strings.Contains(metrics, `flashcache_volume_dirty_bytes{volume="`+volumeName+`"}`) {
		t.Errorf("the host's metrics lack the volume's dirty bytes:\n%s", metrics)
	}
	// The same volume with a flush period, through the role: the loop reads the file it writes.
	volumes := fmt.Sprintf(`{"flashcache_volumes": [{"name": %q, "cacheDevice": {"path": %q}, "backingDevice": {"path": %q}, `+
		`"mode": "writeback", "dirtyThresholdPercent": 40, "flushPeriod": "%s"}]}`, volumeName, nvme.ByID(), hdd.ByID(), period)
	if out, r, ok := b.playbook(t, "provision.yml", "-e", volumes); !ok || r.failed != 0 {
		t.Fatalf("provision with a flush period: ok=%v, recap %+v\n%s", ok, r, tail(out))
	}
	bc := "/sys/block/$(basename $(readlink -f /dev/flashcache/" + volumeName + "))/bcache/"
	// Busy, so bcache never sees the set idle (and writes back at full speed by itself). Its
	// trickle (a key a second, in offset order) rarely reaches the marker, past the scattered
	// writes, before the pass.
	b.sh(t, "( while :; do dd if=/dev/urandom of=/dev/flashcache/"+volumeName+" bs=4k count=1 seek=$(( RANDOM * 2 )) oflag=direct status=none; sleep 2; done ) "+
		">/dev/null 2>&1 </dev/null & echo $! >/root/busy.pid")
	defer b.sh(t, "kill $(cat /root/busy.pid) || true")
	// Not b.dirty: a pass may already be writing this back when it returns.
	b.sh(t, "fio --name=dirty --filename=/dev/flashcache/"+volumeName+" --rw=randwrite --bs=4k --size=256M --io_size=4M --direct=1 --ioengine=psync --randrepeat=0 --output=/dev/null")
	b.sh(t, "head -c 4096 /dev/urandom >/root/marker && dd if=/root/marker of=/dev/flashcache/"+volumeName+" bs=4k seek=$(( 1536 * 256 )) oflag=direct conv=fsync status=none")
	written := time.Now()
	want := b.sh(t, "md5sum </root/marker | cut -d' ' -f1")
	read := "dd if=" + hdd.ByID() + " bs=4096 skip=$(( ($(bcache-super-show " + hdd.ByID() + " | awk '/dev.data.first_sector/ {print $2}') * 512 + 1536 * 1048576) / 4096 )) count=1 iflag=direct status=none | md5sum | cut -d' ' -f1"
	restarted := false
	var arrived time.Duration
	for deadline := written.Add(period/2 + limit + interval + time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if !restarted && time.Since(written) > 5*time.Second {
			b.sh(t, "systemctl restart flashcache-run.service")
			restarted = true
		}
		if b.sh(t, read) == want {
			arrived = time.Since(written)
			break
		}
	}
	log := b.sh(t, "journalctl -u flashcache-run.service -o cat --no-pager | tail -n 20")
	if arrived == 0 {
		t.Fatalf("the marker never reached the backing disk; the service's log:\n%s", log)
	}
	t.Logf("the marker reached the backing disk %s after it was written (the service restarted 5 s in)", arrived.Round(time.Second))
	if bound := period/2 + limit + interval; arrived > bound {
		t.Errorf("the marker took %s, over the bound %s", arrived.Round(time.Second), bound)
	}
	if !strings.Contains(log, "flush pass started") {
		t.Errorf("the service's log shows no flush pass:\n%s", log)
	}

	// Fill the cache with one sequential stream: cached while the cache fills (the cutoff is 0
	// meanwhile), then the loop sets the spec's 4 MiB cutoff by itself.
	if got := b.sh(t, "cat "+bc+"sequential_cutoff"); got != "0.0k" {
		t.Fatalf("sequential_cutoff %s before the cache filled, want 0 (cacheSequentialUntilFull)", got)
	}
	// Under emulation the NVMe's latency crosses bcache's congestion thresholds, and bcache then
	// sends sequential I/O around its own cache whatever the cutoff says: off for this fill.
	b.sh(t, "for set in /sys/fs/bcache/*-*; do "+vmharness.CongestionOff("$set")+"; done")
	b.sh(t, "dd if=/dev/zero of=/dev/flashcache/"+volumeName+" bs=1M count=900 oflag=direct status=none")
	filled := time.Now()
	for {
		got := b.sh(t, "cat "+bc+"sequential_cutoff")
		if got == "4.0M" {
			t.Logf("sequential_cutoff 4.0M %s after the cache filled, with no playbook run", time.Since(filled).Round(time.Second))
			break
		}
		if time.Since(filled) > 3*interval {
			t.Fatalf("sequential_cutoff still %s %s after the cache filled; unused: %s", got, time.Since(filled).Round(time.Second),
				b.sh(t, "grep -i unused /sys/fs/bcache/*-*/cache0/priority_stats || true"))
		}
		time.Sleep(time.Second)
	}
}
