package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SidecarsFromEnv is the folder of csi-provisioner and csi-resizer (FLASHCACHE_CSI_SIDECARS, set
// by the Makefile from hack/build-csi-sidecars.sh).
func SidecarsFromEnv(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("FLASHCACHE_CSI_SIDECARS")
	if dir == "" {
		t.Fatal("FLASHCACHE_CSI_SIDECARS is not set: run the test through make, or set it to the output of hack/build-csi-sidecars.sh")
	}
	return dir
}

// sidecarArgs are the chart's arguments for each sidecar (charts/flashcache/templates/operator/
// deployment.yaml), but the provisioner's capacity objects have no owner: outside a pod there is
// no Deployment to own them.
var sidecarArgs = map[string][]string{
	"csi-provisioner": {"--extra-create-metadata", "--enable-capacity", "--capacity-ownerref-level=-1", "--default-fstype=xfs"},
	"csi-resizer":     {},
}

// StartCSISidecar runs csi-provisioner or csi-resizer from folder on this host, as the chart runs
// it beside the operator: on the operator's CSI socket, with a token of the operator's
// ServiceAccount in namespace (so the chart's RBAC is what it has), leader election on. Its log
// is <dir>/<name>.log; it stops when the test ends.
func (c *Cluster) StartCSISidecar(t testing.TB, ctx context.Context, folder, name, namespace, socket, dir string) {
	t.Helper()
	own, ok := sidecarArgs[name]
	if !ok {
		t.Fatalf("no CSI sidecar %q", name)
	}
	raw, err := c.ServiceAccountKubeconfig(ctx, namespace, "flashcache-operator", "", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, name+".kubeconfig")
	if err := os.WriteFile(kubeconfig, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	args := append([]string{"--csi-address=" + socket, "--kubeconfig=" + kubeconfig, "--leader-election",
		"--leader-election-namespace=" + namespace, "--timeout=60s"}, own...)
	cmd := exec.CommandContext(sctx, filepath.Join(folder, name), args...)
	cmd.Env = append(os.Environ(), "NAMESPACE="+namespace, "POD_NAME="+name+"-outside-a-pod")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		_ = cmd.Wait()
		_ = logFile.Close()
		// A verb the chart's RBAC lacks shows only in the sidecar's log.
		if out, err := os.ReadFile(logFile.Name()); err == nil {
			for _, line := range ForbiddenLines(string(out)) {
				t.Errorf("%s was refused by the API server (the chart's RBAC): %s", name, line)
			}
		}
		if t.Failed() {
			if out, err := exec.Command("tail", "-n", "40", logFile.Name()).Output(); err == nil {
				t.Logf("%s log (tail):\n%s", name, out)
			}
		}
	})
}

// ForbiddenLines are the lines of a component's log that say the API server refused it a
// request: a verb missing from the chart's RBAC.
func ForbiddenLines(log string) []string {
	var lines []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			lines = append(lines, line)
		}
	}
	return lines
}

// RegisterCSINode writes what a kubelet writes when a CSI node plugin registers with it: the
// node's label for the driver's topology key, and the driver in the node's CSINode. kwok plays
// the kubelet of the tests' nodes, and it does neither.
func (c *Cluster) RegisterCSINode(ctx context.Context, node, driver, topologyKey string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{topologyKey: node}}})
	if err != nil {
		return err
	}
	n, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("cluster: labelling node %s: %w", node, err)
	}
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: node, TopologyKeys: []string{topologyKey}}}},
	}
	if _, err := c.Client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("cluster: CSINode %s: %w", node, err)
	}
	return nil
}
