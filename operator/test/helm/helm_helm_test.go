//go:build helm

package helm

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

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
		"example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,podmonitors,prometheusrules}.yaml"},
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
		{"agent.iscsi.secretNamespaces={Databases}", "/agent/iscsi/secretNamespaces/0"},
		// helm's schema error names the key but not its path.
		{"csi.storageClass.parameters.nodeName=worker-1", "invalid propertyName 'nodeName'"},
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

// A short commit hash can be all digits: given with --set it is a number, which the schema
// refuses naming the field; with --set-string it is the tag every image of the chart runs.
func TestAnAllDigitImageTagIsATag(t *testing.T) {
	if out, err := helm(t, "template", "x", ".", "--set", "image.tag=3866906"); err == nil || !strings.Contains(out, "/image/tag") {
		t.Errorf("--set image.tag=3866906: want a refusal naming /image/tag, got err %v:\n%s", err, out)
	}
	out, err := helm(t, "template", "x", ".", "--set", "image.repository=flashcache", "--set-string", "image.tag=3866906")
	if err != nil {
		t.Fatalf("--set-string image.tag=3866906: %v\n%s", err, out)
	}
	var workloads int
	for _, o := range renderedObjects(t, out) {
		var spec corev1.PodSpec
		switch o.Kind {
		case "Deployment":
			var d appsv1.Deployment
			decode(t, o.raw, &d)
			spec = d.Spec.Template.Spec
		case "DaemonSet":
			var d appsv1.DaemonSet
			decode(t, o.raw, &d)
			spec = d.Spec.Template.Spec
		default:
			continue
		}
		workloads++
		if got := spec.Containers[0].Image; got != "flashcache:3866906" {
			t.Errorf("%s runs %s, want flashcache:3866906", o.Kind, got)
		}
	}
	if workloads < 2 {
		t.Errorf("rendered %d Deployments and DaemonSets, want the operator's and the agent's", workloads)
	}
}

// With agent.iscsi.enabled, the agent runs in the host's network namespace with the host's
// iSCSI state, whatever agent.hostNetwork says; without it, neither. Either way the agent may
// get Secrets in the release namespace and each of agent.iscsi.secretNamespaces, once each, and
// nothing else namespaced.
func TestChartRendersTheAgentsISCSIAccess(t *testing.T) {
	iscsiMounts := []string{"/etc/iscsi", "/var/lib/iscsi", "/run/lock/iscsi"}
	for _, tc := range []struct {
		name       string
		args       []string
		agent      string // the name of the agent's objects
		iscsi      bool
		namespaces []string
	}{
		{"defaults", nil, "flashcache-agent", false, []string{"flashcache-system"}},
		{"all-options", valuesArgs(valueSets["all-options"]), "fc-agent", true, []string{"databases", "flashcache-system"}},
		{"iscsi-without-hostNetwork", []string{"--set", "agent.iscsi.enabled=true", "--set", "agent.hostNetwork=false",
			"--set", "agent.iscsi.secretNamespaces={databases,flashcache-system,tenant-a,databases}"},
			"flashcache-agent", true, []string{"databases", "flashcache-system", "tenant-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "flashcache", ".", "--namespace", "flashcache-system"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			objects := renderedObjects(t, out)

			var agent *appsv1.DaemonSet
			for _, o := range objects {
				if o.Kind == "DaemonSet" {
					agent = &appsv1.DaemonSet{}
					decode(t, o.raw, agent)
				}
			}
			if agent == nil {
				t.Fatal("no DaemonSet rendered")
			}
			pod := agent.Spec.Template.Spec
			hostNetwork := tc.iscsi || tc.name == "all-options" // all-options sets agent.hostNetwork too
			if pod.HostNetwork != hostNetwork {
				t.Errorf("agent hostNetwork %v, want %v", pod.HostNetwork, hostNetwork)
			}
			if hostNetwork && pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
				t.Errorf("agent dnsPolicy %q, want %q with the host's network", pod.DNSPolicy, corev1.DNSClusterFirstWithHostNet)
			}
			volumes := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				volumes[v.Name] = v
			}
			mounted := map[string]bool{}
			for _, m := range pod.Containers[0].VolumeMounts {
				v, ok := volumes[m.Name]
				if !ok {
					t.Errorf("mount %s: no volume %s", m.MountPath, m.Name)
					continue
				}
				if v.HostPath == nil || v.HostPath.Path != m.MountPath {
					continue
				}
				mounted[m.MountPath] = true
				if slices.Contains(iscsiMounts, m.MountPath) {
					if v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
						t.Errorf("host path %s: type %v, want DirectoryOrCreate", m.MountPath, v.HostPath.Type)
					}
					if m.ReadOnly {
						t.Errorf("host path %s is mounted read-only: iscsiadm writes its records and locks there", m.MountPath)
					}
				}
			}
			for _, path := range iscsiMounts {
				if mounted[path] != tc.iscsi {
					t.Errorf("host's %s mounted at the same path: %v, want %v", path, mounted[path], tc.iscsi)
				}
			}

			roles := map[string]int{}
			bindings := map[string]int{}
			for _, o := range objects {
				switch o.Kind {
				case "Role":
					var role rbacv1.Role
					decode(t, o.raw, &role)
					if role.Name != tc.agent {
						continue
					}
					roles[role.Namespace]++
					// Everywhere: get on secrets. In the release namespace also its heartbeat Lease.
					want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}
					if role.Namespace == "flashcache-system" {
						want = append(want, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "get", "update"}})
					}
					if !reflect.DeepEqual(role.Rules, want) {
						t.Errorf("Role %s/%s: rules %+v, want %+v", role.Namespace, role.Name, role.Rules, want)
					}
				case "RoleBinding":
					var binding rbacv1.RoleBinding
					decode(t, o.raw, &binding)
					if binding.Name != tc.agent {
						continue
					}
					bindings[binding.Namespace]++
					want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: tc.agent, Namespace: "flashcache-system"}}
					if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != tc.agent || !reflect.DeepEqual(binding.Subjects, want) {
						t.Errorf("RoleBinding %s/%s: %+v to %+v, want the Role %s to the agent's ServiceAccount",
							binding.Namespace, binding.Name, binding.RoleRef, binding.Subjects, tc.agent)
					}
				}
			}
			for _, ns := range tc.namespaces {
				if roles[ns] != 1 || bindings[ns] != 1 {
					t.Errorf("namespace %s: %d agent Roles and %d RoleBindings, want one of each", ns, roles[ns], bindings[ns])
				}
			}
			if len(roles) != len(tc.namespaces) || len(bindings) != len(tc.namespaces) {
				t.Errorf("agent Roles in %v and RoleBindings in %v, want exactly %v", roles, bindings, tc.namespaces)
			}
		})
	}
}

type renderedObject struct {
	Kind string `json:"kind"`
	raw  []byte
}

// renderedObjects splits helm template's output into its objects.
func renderedObjects(t *testing.T, manifests string) []renderedObject {
	t.Helper()
	var objects []renderedObject
	for _, doc := range strings.Split(manifests, "\n---\n") {
		var o renderedObject
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if o.Kind != "" {
			o.raw = []byte(doc)
			objects = append(objects, o)
		}
	}
	return objects
}

func decode(t *testing.T, raw []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatalf("%v in:\n%s", err, raw)
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
	// databases: the namespace all-options.yaml lets the agent read CHAP Secrets in.
	for _, ns := range []string{"flashcache-system", "monitoring", "databases"} {
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
			"validatingwebhookconfiguration/flashcache-eviction", "-n", "flashcache-system", "role/flashcache-operator", "role/flashcache-agent"); err != nil {
			t.Error(err)
		}
		// The agent may get (CHAP) Secrets in the release namespace only, by default.
		agentCan(t, kubectl, "get", "secrets", "flashcache-system", true)
		agentCan(t, kubectl, "get", "secrets", "databases", false)

		// The operator injects the webhook's CA bundle after the install; an upgrade must keep it.
		caBundle := `{"webhooks":[{"name":"eviction.flashcache.io","clientConfig":{"caBundle":"Y2E="}}]}`
		if _, err := kubectl.Run("patch", "validatingwebhookconfiguration/flashcache-eviction", "--type=strategic", "-p", caBundle); err != nil {
			t.Fatal(err)
		}

		if _, err := c.Helm(ctx, "upgrade", "flashcache", ".", "--namespace", "flashcache-system", "--wait", "--timeout", "3m",
			"--set", "operator.replicas=3", "--set", "metrics.podMonitor.enabled=true", "--set", "agent.flushTimeout=20m",
			"--set", "agent.iscsi.enabled=true", "--set", "agent.iscsi.secretNamespaces={databases}"); err != nil {
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
		// agent.iscsi.enabled: the host's network (for iscsid's abstract socket) and its iSCSI
		// records, and CHAP Secrets readable in the extra namespace too, with get only.
		if !agent.Spec.Template.Spec.HostNetwork {
			t.Error("agent after upgrade with agent.iscsi.enabled: not in the host's network")
		}
		etcISCSI := false
		for _, m := range agent.Spec.Template.Spec.Containers[0].VolumeMounts {
			etcISCSI = etcISCSI || m.MountPath == "/etc/iscsi"
		}
		if !etcISCSI {
			t.Errorf("agent after upgrade with agent.iscsi.enabled: no /etc/iscsi mount in %+v", agent.Spec.Template.Spec.Containers[0].VolumeMounts)
		}
		for _, ns := range []string{"flashcache-system", "databases"} {
			if _, err := kubectl.Run("-n", ns, "get", "role/flashcache-agent", "rolebinding/flashcache-agent"); err != nil {
				t.Error(err)
			}
			agentCan(t, kubectl, "get", "secrets", ns, true)
			agentCan(t, kubectl, "list", "secrets", ns, false)
		}
		agentCan(t, kubectl, "get", "secrets", "kube-system", false)
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
		if out, _ := kubectl.Run("-n", "databases", "get", "role/flashcache-agent", "rolebinding/flashcache-agent", "--ignore-not-found"); strings.TrimSpace(out) != "" {
			t.Errorf("left behind in namespace databases after uninstall:\n%s", out)
		}
	})
}

// agentCan checks what the API server's authorizer lets the agent's ServiceAccount do.
func agentCan(t *testing.T, kubectl *testenv.Kubectl, verb, resource, namespace string, want bool) {
	t.Helper()
	// can-i exits non-zero for "no"; its answer is the first word of its output.
	out, err := kubectl.Run("auth", "can-i", verb, resource, "-n", namespace,
		"--as", "system:serviceaccount:flashcache-system:flashcache-agent")
	answer := ""
	if words := strings.Fields(out); len(words) > 0 {
		answer = words[0] // "no - <reason>" when the authorizer gives one
	}
	if answer != "yes" && answer != "no" {
		t.Errorf("kubectl auth can-i %s %s -n %s: %v", verb, resource, namespace, err)
	} else if got := answer == "yes"; got != want {
		t.Errorf("the agent can %s %s in %s: %v, want %v", verb, resource, namespace, got, want)
	}
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

// The chart's alert rules, as it renders them into its PrometheusRule, pass `promtool check
// rules` and the unit tests of testdata/prometheus-rules.test.yaml: each alert fires on the
// series that should make it fire, with its labels and its rendered text, and stays quiet on the
// near misses.
func TestAlertRulesUnderPromtool(t *testing.T) {
	promtool := os.Getenv("FLASHCACHE_PROMTOOL")
	if promtool == "" {
		t.Fatal("FLASHCACHE_PROMTOOL is not set: run make test-helm, which builds promtool")
	}
	out, err := helm(t, "template", "x", ".", "--set", "metrics.prometheusRule.enabled=true")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	var spec []byte
	for _, o := range renderedObjects(t, out) {
		if o.Kind != "PrometheusRule" {
			continue
		}
		var rule struct {
			Spec json.RawMessage `json:"spec"`
		}
		if err := yaml.Unmarshal(o.raw, &rule); err != nil {
			t.Fatal(err)
		}
		if spec, err = yaml.JSONToYAML(rule.Spec); err != nil {
			t.Fatal(err)
		}
	}
	if spec == nil {
		t.Fatal("metrics.prometheusRule.enabled=true rendered no PrometheusRule")
	}
	dir := t.TempDir()
	tests, err := os.ReadFile("testdata/prometheus-rules.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"rules.yaml": spec, "rules.test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules.test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Errorf("promtool %s: %v", strings.Join(args, " "), err)
		}
	}
}
