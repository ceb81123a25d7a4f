//go:build bench

// Package oltp is the disk half of `make bench`: MariaDB under sysbench's OLTP read/write load
// and a fio run on each storage configuration, and the flush efficiency of flashcache's blocking
// flush, in the QEMU guest with an emulated NVMe SSD and a throttled SCSI HDD. It prints tables
// and writes oltp.json and flush.json for the report; it asserts no speed.
package oltp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/test/bench/results"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// guest is the benchmark's VM.
type guest struct {
	t   *testing.T
	vm  *vmharness.VM
	ctx context.Context
	// env is sourced by every script: the disks' by-id paths.
	env string
}

// script runs a bash script in the guest with the disks' variables set, and returns its
// stdout; a failure carries the script's stderr.
func (g *guest) script(ctx context.Context, body string) (string, error) {
	stdout, stderr, code, err := g.vm.Run(ctx, "bash -c "+vmharness.ShellQuote("set -euo pipefail\n"+g.env+"\n"+body))
	if err != nil {
		return stdout, fmt.Errorf("guest script: %w", err)
	}
	if code != 0 {
		return stdout, fmt.Errorf("guest script exited %d: %s\n--- script ---\n%s", code, lastLines(stderr, 15), body)
	}
	return strings.TrimSpace(stdout), nil
}

// must is script for steps the benchmark cannot go on without.
func (g *guest) must(body string) string {
	g.t.Helper()
	out, err := g.script(g.ctx, body)
	if err != nil {
		g.t.Fatal(err)
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// bootGuest boots the test image with disks, installs the flashcache binary under test and
// exports each disk's by-id path under its variable name (NVME, HDD, SRC).
func bootGuest(t *testing.T, ctx context.Context, memMiB int, disks map[string]vmharness.Disk) *guest {
	t.Helper()
	image, binary := vmharness.ImageFromEnv(t), vmharness.BinaryFromEnv(t)
	var list []vmharness.Disk
	var env []string
	for name, d := range disks {
		list = append(list, d)
		env = append(env, fmt.Sprintf("export %s=%s", name, d.ByID()))
	}
	vm, err := vmharness.Boot(ctx, vmharness.Options{Image: image, WorkDir: t.TempDir(), Logf: t.Logf, Disks: list, MemoryMiB: memMiB, CPUs: 2})
	if vm != nil {
		t.Cleanup(vm.Close)
		vm.LogDiagnosticsOnFailure(t)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.CopyFile(ctx, binary, "/usr/local/bin/flashcache", 0o755); err != nil {
		t.Fatal(err)
	}
	g := &guest{t: t, vm: vm, ctx: ctx, env: strings.Join(env, "\n")}
	t.Logf("guest up in %s; by hand: %s", vm.BootTime().Round(time.Second), strings.Join(vm.SSHCommand(), " "))
	return g
}

// machine describes the host, the guest and the tools' versions.
func (g *guest) machine(memMiB int) results.Machine {
	m := results.Machine{HostCores: runtime.NumCPU(), GuestCPUs: 2, GuestMemMiB: memMiB, FlashcacheRev: os.Getenv("BENCH_REVISION")}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.HostCPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("qemu-system-x86_64", "--version").Output(); err == nil {
		m.QEMU = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
	}
	// dpkg-query lists packages in its own order, so each line names its package.
	versions := map[string]string{}
	for _, line := range strings.Split(g.must(`dpkg-query -W -f='${Package} ${Version}\n' mariadb-server sysbench fio lvm2`), "\n") {
		if pkg, version, ok := strings.Cut(line, " "); ok {
			versions[pkg] = version
		}
	}
	m.GuestKernel = g.must("uname -r")
	m.MariaDB, m.Sysbench, m.Fio, m.LVM = versions["mariadb-server"], versions["sysbench"], versions["fio"], versions["lvm2"]
	return m
}

// envInt reads a positive integer parameter, or its default.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive whole number", name, s)
	}
	return n
}

// outDir is where results go: BENCH_OUT, or a temporary folder.
func outDir(t *testing.T) string {
	if d := os.Getenv("BENCH_OUT"); d != "" {
		return d
	}
	return t.TempDir()
}

// blockStats reads /sys/block/<name>/stat for each name.
func (g *guest) blockStats(ctx context.Context, names ...string) (map[string]results.BlockStat, error) {
	var cmd strings.Builder
	for _, n := range names {
		fmt.Fprintf(&cmd, "cat /sys/block/%s/stat\n", n)
	}
	out, err := g.script(ctx, cmd.String())
	if err != nil {
		return nil, err
	}
	lines := strings.Split(out, "\n")
	if len(lines) != len(names) {
		return nil, fmt.Errorf("block stats: want %d lines, have %q", len(names), out)
	}
	stats := map[string]results.BlockStat{}
	for i, n := range names {
		s, err := results.ParseBlockStat(lines[i])
		if err != nil {
			return nil, err
		}
		stats[n] = s
	}
	return stats, nil
}
