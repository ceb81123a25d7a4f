// Package helm tests the chart in charts/flashcache: these tests need no cluster; the ones with
// the helm build tag (`make test-helm`) lint, render and install it into a real control plane.
package helm

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/flashcache/flashcache/operator/internal/csi"
	"github.com/flashcache/flashcache/operator/internal/testenv"
)

// leafPaths lists the dotted paths of values' leaves; an empty map or list is a leaf.
func leafPaths(prefix string, v any, out *[]string) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		*out = append(*out, prefix)
		return
	}
	for k, child := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		leafPaths(p, child, out)
	}
}

var readmeRow = regexp.MustCompile("(?m)^\\| `([A-Za-z0-9.]+)` \\| `([^`]*)` \\|")

// Every value a user can set is in the README's table, and every row of the table is a value.
func TestChartReadmeDocumentsEveryValue(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testenv.ChartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(testenv.ChartDir(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range readmeRow.FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = true
	}
	var leaves []string
	leafPaths("", values, &leaves)
	sort.Strings(leaves)
	for _, leaf := range leaves {
		covered := false
		for key := range documented {
			if leaf == key || strings.HasPrefix(leaf, key+".") {
				covered = true
			}
		}
		if !covered {
			t.Errorf("value %s is not in the README's values table", leaf)
		}
	}
	for key := range documented {
		found := false
		for _, leaf := range leaves {
			if leaf == key || strings.HasPrefix(leaf, key+".") {
				found = true
			}
		}
		if !found {
			t.Errorf("the README documents %s, which values.yaml does not have", key)
		}
	}
}

// The chart installs the repository's CRDs, byte for byte: one source of truth.
func TestChartCRDsAreTheRepositorysCRDs(t *testing.T) {
	want, err := filepath.Glob(filepath.Join(testenv.CRDDir(), "*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no CRDs in %s (%v)", testenv.CRDDir(), err)
	}
	got, _ := filepath.Glob(filepath.Join(testenv.ChartDir(), "crds", "*.yaml"))
	if len(got) != len(want) {
		t.Errorf("chart has %d CRD files, crds/ has %d", len(got), len(want))
	}
	for _, path := range want {
		a, _ := os.ReadFile(path)
		b, err := os.ReadFile(filepath.Join(testenv.ChartDir(), "crds", filepath.Base(path)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("charts/flashcache/crds/%s differs from crds/ (run make generate): %v", filepath.Base(path), err)
		}
	}
}

// The chart's RBAC rules and webhook definition are the project's own files, not hand-kept copies.
func TestChartCopiesAreTheProjectsFiles(t *testing.T) {
	for copy, source := range map[string]string{
		"files/rbac/operator.yaml":    "operator/config/rbac/operator/role.yaml",
		"files/rbac/agent.yaml":       "operator/config/rbac/agent/role.yaml",
		"files/webhook/eviction.yaml": "operator/config/webhook/eviction.yaml",
	} {
		a, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), source))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(testenv.ChartDir(), copy))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("charts/flashcache/%s differs from %s (run make generate): %v", copy, source, err)
		}
	}
}

// helm's --set reads an all-digit value as a number, and the schema refuses a number where it
// wants an image tag: a commit whose short hash was all digits (3866906) failed the demo's
// install. Every helm command the project runs or tells a user to run sets tags with --set-string.
var tagSetAsNumber = regexp.MustCompile(`--set(\s+|=)['"]?[A-Za-z0-9_.\[\]]*\btag=`)

func TestImageTagsAreSetAsStrings(t *testing.T) {
	root := testenv.RepoRoot()
	var files []string
	for _, pattern := range []string{"Makefile", "README.md", "hack/*.sh", "docs/*.md",
		"charts/flashcache/README.md", "charts/flashcache/templates/NOTES.txt"} {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, matches...)
	}
	if len(files) < 5 {
		t.Fatalf("found %d files to read under %s, want the scripts and docs", len(files), root)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if tagSetAsNumber.MatchString(line) {
				rel, _ := filepath.Rel(root, f)
				t.Errorf("%s:%d sets an image tag with --set, which makes an all-digit tag a number the schema refuses; use --set-string:\n%s",
					rel, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// The schema takes the StorageClass parameters the CSI driver takes, no more and no fewer.
func TestChartStorageClassParametersAreTheDriversTunables(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testenv.ChartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			CSI struct {
				Properties struct {
					StorageClass struct {
						Properties struct {
							Parameters struct {
								PropertyNames struct {
									Enum []string `json:"enum"`
								} `json:"propertyNames"`
							} `json:"parameters"`
						} `json:"properties"`
					} `json:"storageClass"`
				} `json:"properties"`
			} `json:"csi"`
		} `json:"properties"`
	}
	if err := yaml.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	got := schema.Properties.CSI.Properties.StorageClass.Properties.Parameters.PropertyNames.Enum
	if strings.Join(got, " ") != strings.Join(csi.TunableParameters, " ") {
		t.Errorf("values.schema.json csi.storageClass.parameters takes %v; the driver takes %v", got, csi.TunableParameters)
	}
}

// runbookBase is where the alerts' runbook links point: the repository's docs/runbooks.
const runbookBase = "https://github.com/flashcache/flashcache/blob/main/docs/runbooks/"

// Every alert says how bad it is, what happened and what to do: a severity, a summary, a
// description, and a runbook that exists in docs/runbooks.
func TestAlertsHaveASeverityAndARunbook(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testenv.ChartDir(), "files", "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts++
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: no summary or description", r.Alert)
			}
			url := r.Annotations["runbook_url"]
			page, ok := strings.CutPrefix(url, runbookBase)
			if !ok {
				t.Errorf("%s: runbook %q is not under %s", r.Alert, url, runbookBase)
				continue
			}
			if _, err := os.Stat(filepath.Join(testenv.RepoRoot(), "docs", "runbooks", page)); err != nil {
				t.Errorf("%s: runbook %s: %v", r.Alert, page, err)
			}
		}
	}
	if alerts < 10 {
		t.Errorf("%d alerts, want the ten the chart documents", alerts)
	}
}
