package expositions

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestFindMatchesLabelsAsLabels(t *testing.T) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(`# TYPE flashcache_volume_state gauge
flashcache_volume_state{state="clean",volume="v10"} 0
flashcache_volume_state{state="clean",volume="v1"} 1
flashcache_volume_state{state="dirty",volume="v1"} 0
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		want  map[string]string
		value float64
		found bool
	}{
		{map[string]string{"volume": "v1", "state": "clean"}, 1, true},
		{map[string]string{"volume": "v1", "state": "dirty"}, 0, true},
		{map[string]string{"volume": "v1"}, 1, true},
		{map[string]string{"volume": "v"}, 0, false},
		{map[string]string{"volume": "v1", "state": "unknown"}, 0, false},
	} {
		m := Find(families, "flashcache_volume_state", c.want)
		if (m != nil) != c.found || m.GetGauge().GetValue() != c.value {
			t.Errorf("Find(%v): %v, want found %v with %v", c.want, m, c.found, c.value)
		}
	}
	if m := Find(families, "flashcache_no_such_family", nil); m != nil {
		t.Errorf("Find of a missing family: %v", m)
	}
}
