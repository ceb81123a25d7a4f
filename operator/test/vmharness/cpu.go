package vmharness

import (
	"context"
	"strings"
	"time"
)

// guestCPUScript prints where the guest's CPU went since it booted: the kernel's totals, then
// the processes alive now by name, each with what its reaped children used (the agent's disk
// commands count under the agent, a test's commands under sshd). Under TCG every guest
// instruction is the host's CPU, so this is where a tier's QEMU time goes: the place to look
// before making a test cheaper.
const guestCPUScript = `hz=$(getconf CLK_TCK)
awk -v hz="$hz" 'NR == 1 {printf "guest CPU since boot: user %.0f s, system %.0f s, softirq %.0f s, idle %.0f s\n", ($2 + $3) / hz, $4 / hz, $8 / hz, $5 / hz; exit}' /proc/stat
awk -v hz="$hz" '{
	l = $0; o = index(l, "("); c = length(l); while (c > o && substr(l, c, 1) != ")") c--
	name = substr(l, o + 1, c - o - 1); sub(/[\/:][0-9u].*$/, "", name)
	split(substr(l, c + 2), f, " ")
	own[name] += (f[12] + f[13]) / hz; kids[name] += (f[14] + f[15]) / hz; n[name]++
} END {
	for (p in own) if (own[p] + kids[p] >= 1) printf "%8.1f s %8.1f s own %8.1f s children  %3d x %s\n", own[p] + kids[p], own[p], kids[p], n[p], p
}' /proc/[0-9]*/stat 2>/dev/null | sort -rn | head -15`

// GuestCPU reports where the guest's CPU went since it booted (guestCPUScript).
func (vm *VM) GuestCPU(ctx context.Context) (string, error) {
	out, err := vm.Output(ctx, guestCPUScript)
	return strings.TrimRight(out, "\n"), err
}

// logGuestCPU writes GuestCPU to the test's log (Options.Logf) as the VM closes. Best effort: a
// guest that no longer answers is being killed anyway.
func (vm *VM) logGuestCPU() {
	if vm.opts.Logf == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if out, err := vm.GuestCPU(ctx); err == nil {
		vm.logf("where the guest's CPU went (process: total, its own, its reaped children's):\n%s", out)
	}
}
