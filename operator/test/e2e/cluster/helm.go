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

// Helm runs the assets' helm (hack/build-control-plane.sh helm builds it) as an admin of the
// cluster, with helm's caches and configuration under the cluster's folder. It returns helm's
// combined output.
func (c *Cluster) Helm(ctx context.Context, args ...string) (string, error) {
	kubeconfig := filepath.Join(c.Dir, "kubeconfig-helm")
	if _, err := os.Stat(kubeconfig); err != nil {
		if err := testenv.WriteAdminKubeconfig(c.Env, kubeconfig); err != nil {
			return "", fmt.Errorf("cluster: %w", err)
		}
	}
	return RunHelm(ctx, c.Assets, filepath.Join(c.Dir, "helm"), kubeconfig, args...)
}

// RunHelm runs assets' helm in the chart's folder, with its caches and configuration under
// home, never the user's, and against kubeconfig's cluster when it is not empty (lint and
// template need none). It returns helm's combined output.
func RunHelm(ctx context.Context, assets, home, kubeconfig string, args ...string) (string, error) {
	bin := filepath.Join(assets, "helm")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("helm is not built (hack/build-control-plane.sh helm): %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = testenv.ChartDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	if kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+kubeconfig)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
