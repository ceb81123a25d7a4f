package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/flashcache/flashcache/operator/internal/testenv"
)

// ChartDir is the repository's chart.
func ChartDir() string { return filepath.Join(testenv.RepoRoot(), "charts", "flashcache") }

// Helm runs the assets' helm (hack/build-control-plane.sh helm builds it) as an admin of the
// cluster, in the chart's folder, with helm's caches and configuration under the cluster's
// folder, never the user's. It returns helm's combined output.
func (c *Cluster) Helm(ctx context.Context, args ...string) (string, error) {
	bin := filepath.Join(c.Assets, "helm")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("cluster: helm is not built (hack/build-control-plane.sh helm): %w", err)
	}
	kubeconfig := filepath.Join(c.Dir, "kubeconfig-helm")
	if _, err := os.Stat(kubeconfig); err != nil {
		if err := testenv.WriteAdminKubeconfig(c.Env, kubeconfig); err != nil {
			return "", fmt.Errorf("cluster: %w", err)
		}
	}
	home := filepath.Join(c.Dir, "helm")
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = ChartDir()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
