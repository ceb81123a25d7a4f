//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flashcache/flashcache/operator/test/expositions"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// agentMetrics is what the node's agent serves on /metrics (its default address, in the guest),
// decoded by family.
func agentMetrics(ctx context.Context, vm *vmharness.VM) (exposition, error) {
	out, err := vm.Output(ctx, "exec 3<>/dev/tcp/127.0.0.1/8090 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3")
	if err != nil {
		return nil, err
	}
	return decodeExposition(out)
}

// decodeExposition decodes an HTTP/1.0 answer carrying a Prometheus text exposition.
func decodeExposition(out string) (exposition, error) {
	head, body, found := strings.Cut(out, "\r\n\r\n")
	if !found || !strings.Contains(strings.SplitN(head, "\r\n", 2)[0], " 200 ") {
		return nil, fmt.Errorf("the agent's /metrics answered %.200q", out)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("decoding the agent's /metrics: %w", err)
	}
	return families, nil
}

// exposition is a scrape's metric families by name.
type exposition map[string]*dto.MetricFamily

// value is the sample of family name whose labels include every label in want, and whether
// there is one. A counter, a gauge or an untyped sample; the first that matches.
func (e exposition) value(name string, want map[string]string) (float64, bool) {
	m := expositions.Find(e, name, want)
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
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
