//go:build e2e

package e2e

import (
	"context"
	"regexp"
	"strconv"
	"strings"

	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// agentMetrics is what the node's agent serves on /metrics (its default address, in the guest).
func agentMetrics(ctx context.Context, vm *vmharness.VM) (string, error) {
	return vm.Output(ctx, "exec 3<>/dev/tcp/127.0.0.1/8090 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3")
}

// parseSeries maps each series of a Prometheus text exposition, `name{labels}` as printed, to its value.
func parseSeries(exposition string) map[string]float64 {
	series := map[string]float64{}
	for _, l := range strings.Split(exposition, "\n") {
		i := strings.LastIndexByte(l, ' ')
		if strings.HasPrefix(l, "#") || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(l[i+1:]), 64); err == nil {
			series[l[:i]] = v
		}
	}
	return series
}

var ranCommand = regexp.MustCompile(`\tran\t.*"command": "([^" ]+)`)

// commandsRun counts, by command, the "ran" lines of a `flashcache node ... -v` log.
func commandsRun(log string) map[string]int {
	counts := map[string]int{}
	for _, m := range ranCommand.FindAllStringSubmatch(log, -1) {
		counts[m[1]]++
	}
	return counts
}
