package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/flashcache/flashcache/operator/internal/version"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestVersionJSONReportsStampedVersion(t *testing.T) {
	old := version.Version
	version.Version = "v9.9.9-test"
	t.Cleanup(func() { version.Version = old })

	out, err := run(t, "version", "-o", "json")
	if err != nil {
		t.Fatalf("version -o json: %v", err)
	}
	var info version.Info
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if info.Version != "v9.9.9-test" || info.GoVersion == "" || info.Platform == "" {
		t.Errorf("info = %+v", info)
	}
}

func TestVersionRejectsUnknownFormat(t *testing.T) {
	if _, err := run(t, "version", "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "--output") {
		t.Errorf("err = %v, want one naming --output", err)
	}
}

func TestUnbuiltSubcommandsFailAndSaySo(t *testing.T) {
	for _, args := range [][]string{{"agent"}, {"node", "apply"}, {"node", "flush"}} {
		_, err := run(t, args...)
		if !errors.Is(err, errNotBuilt) {
			t.Errorf("%v: err = %v, want not built yet", args, err)
		}
	}
}

func TestOperatorNeedsAReachableKubeconfig(t *testing.T) {
	_, err := run(t, "operator", "--kubeconfig", "/nonexistent/kubeconfig", "--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("err = %v, want one naming --kubeconfig", err)
	}
}
