// Package expositions finds samples in decoded Prometheus expositions, for the tests that scrape
// the operator's and the agent's /metrics: labels matched as labels, not as substrings of a line.
package expositions

import dto "github.com/prometheus/client_model/go"

// Find is the first metric of family name whose labels include every label in want, or nil.
func Find(families map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
next:
	for _, m := range families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}
