//go:build helm

package helm

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flashcache/flashcache/operator/internal/testenv"
	"github.com/flashcache/flashcache/operator/test/e2e/cluster"
)

// valueSets are the values the chart is checked with: the defaults, and the files that set
// every documented option between them.
var valueSets = map[string][]string{
	"defaults":                    nil,
	"all-options":                 {"testdata/all-options.yaml"},
	"cert-manager-cluster-issuer": {"testdata/cert-manager-cluster-issuer.yaml"},
	"minimal":                     {"testdata/minimal.yaml"},
}

// thirdPartyCRDs are the CRDs of the optional objects the chart makes, from the projects that
// own them, through the Go module proxy (their modules carry the CRD files).
var thirdPartyCRDs = []struct{ module, files string }{
	{"github.com/prometheus-operator/prometheus-operator@v0.85.0",
		"example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,podmonitors}.yaml"},
	{"github.com/cert-manager/cert-manager@v1.21.2",
		"deploy/crds/cert-manager.io_{certificates,issuers,clusterissuers}.yaml"},
}

// helm runs helm on the chart without a cluster (lint, template).
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	return cluster.RunHelm(context.Background(), assets, t.TempDir(), "", args...)
}

func valuesArgs(files []string) []string {
	var args []string
	for _, f := range files {
		abs, _ := filepath.Abs(f)
		args = append(args, "--values", abs)
	}
	return args
}

func TestChartLintsWithEveryValueSet(t *testing.T) {
	for name, files := range valueSets {
		t.Run(name, func(t *testing.T) {
			if out, err := helm(t, append([]string{"lint", "--strict", "."}, valuesArgs(files)...)...); err != nil {
				t.Fatal(err)
			} else if !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint:\n%s", out)
			}
		})
	}
}

// A wrong value stops the install with a message that names it, before anything is applied.
func TestChartRejectsBadValuesNamingTheField(t *testing.T) {
	for _, tc := range []struct{ set, field string }{
		{"webhook.certs=vault", "/webhook/certs"},
		{"operator.replicas=0", "/operator/replicas"},
		{"agent.flushTimeout=ten minutes", "/agent/flushTimeout"},
		{"webhook.failurePolicy=fail", "/webhook/failurePolicy"},
		{"storageClass.reclaimPolicy=Recycle", "/storageClass/reclaimPolicy"},
		{"agent.priorityClass.value=2000000000", "/agent/priorityClass/value"},
		{"operator.replica=2", "replica"},
	} {
		out, err := helm(t, "template", "x", ".", "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s: rendered, want it refused", tc.set)
			continue
		}
		if !strings.Contains(out, tc.field) {
			t.Errorf("--set %s: the error does not name %s:\n%s", tc.set, tc.field, out)
		}
	}
}

// TestChartOnARealAPIServer renders every value set and applies it as a server-side dry run,
// applies the plain manifests the same way, then installs and upgrades the chart into a
// control plane whose node kwok plays, and uninstalls it.
func TestChartOnARealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The workload controllers too, so that the Deployment and the DaemonSet get pods that kwok
	// runs, and `helm install --wait` has something to wait for.
	controllers := append([]string{"deployment-controller", "replicaset-controller", "daemonset-controller"}, cluster.Controllers...)
	c := cluster.ForTest(t, cluster.Options{Controllers: controllers})
	kubectl, err := c.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	installThirdPartyCRDs(t, ctx, kubectl, c.Dir)
	for _, ns := range []string{"flashcache-system", "monitoring"} {
		if _, err := kubectl.Run("create", "namespace", ns); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("TemplateAppliesAsServerSideDryRun", func(t *testing.T) {
		for name, files := range valueSets {
			args := append([]string{"template", "flashcache", ".", "--namespace", "flashcache-system", "--include-crds"}, valuesArgs(files)...)
			rendered, err := c.Helm(ctx, args...)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			path := filepath.Join(c.Dir, name+".yaml")
			if err := os.WriteFile(path, []byte(rendered), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := kubectl.Run("apply", "--dry-run=server", "--server-side", "-f", path); err != nil {
				t.Errorf("%s: the API server refuses the rendered chart: %v", name, err)
			} else {
				t.Logf("%s: %d objects accepted", name, strings.Count(out, "(server dry run)"))
			}
		}
	})

	t.Run("PlainManifestsApplyAsServerSideDryRun", func(t *testing.T) {
		path := filepath.Join(testenv.RepoRoot(), "deploy", "flashcache.yaml")
		if _, err := kubectl.Run("apply", "--dry-run=server", "--server-side", "-f", path); err != nil {
			t.Errorf("deploy/flashcache.yaml: %v", err)
		}
	})

	if _, err := c.AddNode(ctx, "worker-1", nil); err != nil {
		t.Fatal(err)
	}
	t.Run("InstallUpgradeUninstall", func(t *testing.T) {
		// --wait: kwok runs the pods on its node, so the Deployment and the DaemonSet must
		// become ready, which needs every object (ServiceAccounts, PriorityClass) in place.
		if _, err := c.Helm(ctx, "install", "flashcache", ".", "--namespace", "flashcache-system",
			"--wait", "--timeout", "3m"); err != nil {
			t.Fatal(err)
		}
		operator := deployment(t, ctx, c, "flashcache-operator")
		if operator.Status.ReadyReplicas != 2 {
			t.Errorf("operator: %d ready replicas, want 2", operator.Status.ReadyReplicas)
		}
		if _, err := kubectl.Run("-n", "flashcache-system", "rollout", "status", "daemonset/flashcache-agent", "--timeout=2m"); err != nil {
			t.Error(err)
		}
		if _, err := kubectl.Run("get", "priorityclass/flashcache-node-critical", "storageclass/flashcache",
			"validatingwebhookconfiguration/flashcache-eviction", "-n", "flashcache-system", "role/flashcache-operator"); err != nil {
			t.Error(err)
		}

		// The operator injects the webhook's CA bundle after the install; an upgrade must keep it.
		caBundle := `{"webhooks":[{"name":"eviction.flashcache.io","clientConfig":{"caBundle":"Y2E="}}]}`
		if _, err := kubectl.Run("patch", "validatingwebhookconfiguration/flashcache-eviction", "--type=strategic", "-p", caBundle); err != nil {
			t.Fatal(err)
		}

		if _, err := c.Helm(ctx, "upgrade", "flashcache", ".", "--namespace", "flashcache-system", "--wait", "--timeout", "3m",
			"--set", "operator.replicas=3", "--set", "metrics.podMonitor.enabled=true", "--set", "agent.flushTimeout=20m"); err != nil {
			t.Fatal(err)
		}
		operator = deployment(t, ctx, c, "flashcache-operator")
		if operator.Status.ReadyReplicas != 3 {
			t.Errorf("operator after upgrade: %d ready replicas, want 3", operator.Status.ReadyReplicas)
		}
		agent, err := c.Client.AppsV1().DaemonSets("flashcache-system").Get(ctx, "flashcache-agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if args := strings.Join(agent.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--flush-timeout=20m") {
			t.Errorf("agent after upgrade: args %q, want --flush-timeout=20m", args)
		}
		if out, err := kubectl.Run("get", "validatingwebhookconfiguration/flashcache-eviction",
			"-o", "jsonpath={.webhooks[0].clientConfig.caBundle}"); err != nil || out != "Y2E=" {
			t.Errorf("the webhook's CA bundle after the upgrade: %q (%v), want the injected one kept", out, err)
		}
		if _, err := kubectl.Run("-n", "flashcache-system", "get", "podmonitor/flashcache-agent"); err != nil {
			t.Error(err)
		}
		history, err := c.Helm(ctx, "history", "flashcache", "--namespace", "flashcache-system", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var revisions []struct {
			Revision int    `json:"revision"`
			Status   string `json:"status"`
		}
		if err := json.Unmarshal([]byte(history), &revisions); err != nil {
			t.Fatalf("helm history: %v\n%s", err, history)
		}
		if len(revisions) != 2 || revisions[1].Status != "deployed" {
			t.Errorf("helm history: %+v, want two revisions, the second deployed", revisions)
		}

		if _, err := c.Helm(ctx, "uninstall", "flashcache", "--namespace", "flashcache-system", "--wait", "--timeout", "2m"); err != nil {
			t.Fatal(err)
		}
		// Helm leaves the CRD (it never deletes crds/), so the volumes and their data survive
		// an uninstall; everything else is gone.
		if out, err := kubectl.Run("get", "crd/flashcachevolumes.flashcache.io"); err != nil {
			t.Errorf("the CRD went with the release: %s", out)
		}
		if out, _ := kubectl.Run("get", "validatingwebhookconfiguration/flashcache-eviction", "clusterrole/flashcache-operator", "--ignore-not-found"); strings.TrimSpace(out) != "" {
			t.Errorf("left behind after uninstall:\n%s", out)
		}
	})
}

func deployment(t *testing.T, ctx context.Context, c *cluster.Cluster, name string) *appsv1.Deployment {
	t.Helper()
	d, err := c.Client.AppsV1().Deployments("flashcache-system").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// installThirdPartyCRDs applies prometheus-operator's and cert-manager's CRDs, downloaded as
// their Go modules.
func installThirdPartyCRDs(t *testing.T, ctx context.Context, kubectl *testenv.Kubectl, dir string) {
	t.Helper()
	for _, crd := range thirdPartyCRDs {
		cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", crd.module)
		cmd.Dir = dir // outside any module: the download must not touch the project's go.sum
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go mod download %s: %v", crd.module, err)
		}
		var mod struct{ Dir, Error string }
		if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
			t.Fatalf("go mod download %s: %v %s", crd.module, err, mod.Error)
		}
		for _, file := range expandBraces(crd.files) {
			if _, err := kubectl.Run("apply", "--server-side", "-f", filepath.Join(mod.Dir, file)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, crd := range []string{"servicemonitors.monitoring.coreos.com", "podmonitors.monitoring.coreos.com",
		"certificates.cert-manager.io", "issuers.cert-manager.io", "clusterissuers.cert-manager.io"} {
		if _, err := kubectl.Run("wait", "--for=condition=Established", "--timeout=60s", "crd/"+crd); err != nil {
			t.Fatal(err)
		}
	}
}

// expandBraces expands one {a,b} group, as a shell would.
func expandBraces(pattern string) []string {
	open, end := strings.Index(pattern, "{"), strings.Index(pattern, "}")
	if open < 0 || end < open {
		return []string{pattern}
	}
	var out []string
	for _, alt := range strings.Split(pattern[open+1:end], ",") {
		out = append(out, pattern[:open]+alt+pattern[end+1:])
	}
	return out
}
