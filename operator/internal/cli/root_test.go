package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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

func TestAgentNeedsItsNodeName(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	_, err := run(t, "agent", "--kubeconfig", "/nonexistent/kubeconfig")
	if err == nil || !strings.Contains(err.Error(), "--node-name") {
		t.Errorf("err = %v, want one naming --node-name", err)
	}
}

func TestOperatorNeedsAReachableKubeconfig(t *testing.T) {
	_, err := run(t, "operator", "--kubeconfig", "/nonexistent/kubeconfig", "--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("err = %v, want one naming --kubeconfig", err)
	}
}

func TestNodeCommandsNeedAValidVolumeFile(t *testing.T) {
	if _, err := run(t, "node", "apply"); err == nil || !strings.Contains(err.Error(), "config") {
		t.Errorf("no --config: err = %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(`apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: v}
spec:
  nodeName: h
  cacheDevice: {path: /dev/sdb}
  backingDevice: {path: /dev/disk/by-id/ata-x}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	// Refused before any disk is looked at: /dev/sdb is not even read.
	for _, sub := range []string{"plan", "apply", "flush", "release", "status", "check"} {
		_, err := run(t, "node", sub, "--config", bad)
		if err == nil || !strings.Contains(err.Error(), "spec.cacheDevice.path") {
			t.Errorf("node %s: err = %v, want one naming spec.cacheDevice.path", sub, err)
		}
	}
	if _, err := run(t, "node", "teardown", "--config", bad); err == nil || !strings.Contains(err.Error(), "--confirm") {
		t.Errorf("teardown without --confirm: err = %v", err)
	}
}

// A process started with --kubeconfig must not be slower than the same process in a pod, whose
// configuration ctrl.GetConfig returns without a client-side rate limit.
func TestKubeconfigHasNoClientSideRateLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := restConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS >= 0 {
		t.Errorf("QPS %v, want negative (no client-side rate limit)", cfg.QPS)
	}
}
