//go:build image

// Package image checks a built flashcache image (make test-image): the binary in it carries the
// version it was built as, runs as root and as the chart's non-root uid, and finds on PATH every
// tool the engine declares.
package image

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/version"
)

// nonRootUID is what the chart's operator Deployment sets as runAsUser.
const nonRootUID = "65532"

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set; run make test-image", name)
	}
	return v
}

// docker runs the docker client and returns its standard output; a non-zero exit is returned
// as an error, with what the command printed on stderr.
func docker(t *testing.T, args ...string) (string, error) {
	t.Helper()
	client := os.Getenv("DOCKER")
	if client == "" {
		client = "docker"
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(client, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		t.Logf("%s %s: %v\n%s", client, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), err
}

func TestVersionIsStamped(t *testing.T) {
	image := env(t, "FLASHCACHE_IMAGE")
	want := version.Info{Version: env(t, "FLASHCACHE_VERSION"), Commit: os.Getenv("FLASHCACHE_COMMIT")}
	for _, user := range []string{"0", nonRootUID} {
		out, err := docker(t, "run", "--rm", "--user", user, image, "version", "-o", "json")
		if err != nil {
			t.Fatalf("version as uid %s: %v", user, err)
		}
		var got version.Info
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("version -o json is not JSON: %v\n%s", err, out)
		}
		if got.Version != want.Version || (want.Commit != "" && got.Commit != want.Commit) {
			t.Errorf("as uid %s: version %q commit %q, want %q %q", user, got.Version, got.Commit, want.Version, want.Commit)
		}
	}
}

func TestLabelsNameTheVersion(t *testing.T) {
	image := env(t, "FLASHCACHE_IMAGE")
	out, err := docker(t, "image", "inspect", "--format", "{{json .Config.Labels}}", image)
	if err != nil {
		t.Fatal(err)
	}
	var labels map[string]string
	if err := json.Unmarshal([]byte(out), &labels); err != nil {
		t.Fatalf("labels are not JSON: %v\n%s", err, out)
	}
	if got, want := labels["org.opencontainers.image.version"], env(t, "FLASHCACHE_VERSION"); got != want {
		t.Errorf("org.opencontainers.image.version = %q, want %q (all labels: %v)", got, want, labels)
	}
	for _, key := range []string{"source", "revision", "title", "description"} {
		if labels["org.opencontainers.image."+key] == "" {
			t.Errorf("no org.opencontainers.image.%s label (all labels: %v)", key, labels)
		}
	}
}

func TestEveryDeclaredToolIsInTheImage(t *testing.T) {
	image := env(t, "FLASHCACHE_IMAGE")
	// Exits non-zero when a tool is missing; the report says which, so read it either way.
	out, runErr := docker(t, "run", "--rm", image, "node", "tools", "-o", "json")
	var report struct {
		Missing []string              `json:"missing"`
		Tools   []blockdev.ToolStatus `json:"tools"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("node tools -o json is not JSON (%v): %v\n%s", runErr, err, out)
	}
	found := map[string]string{}
	for _, s := range report.Tools {
		found[s.Name] = s.Path
	}
	// The list is the engine's own table, as compiled into this test, not the image's answer:
	// an image built from a stale table must fail here.
	for _, tool := range blockdev.Tools {
		if found[tool.Name] == "" {
			t.Errorf("%s (Debian package %s) is not on the image's PATH", tool.Name, tool.Debian)
		}
	}
	if runErr != nil || len(report.Missing) > 0 {
		t.Errorf("node tools: %v, missing %v", runErr, report.Missing)
	}
}
