// Package kubenode makes a vmharness VM a real Kubernetes node of a cluster started with
// cluster.Options.Address: containerd and runc from the image's Debian packages, kubelet and
// kube-proxy from the cluster's assets folder (shared into the guest over 9p), images imported
// from tarballs (hack/build-node-images.sh), pods on a bridge network the host routes to.
package kubenode

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flashcache/flashcache/operator/test/e2e/cluster"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// Share tags the VM must be booted with (vmharness.Options.Shares): the cluster's assets
// folder, for kubelet and kube-proxy, and the node images' folder.
const (
	BinShare    = "k8sbin"
	ImagesShare = "k8simages"
)

// Options describe the node.
type Options struct {
	// Name is the node's name.
	Name string
	// IP is the guest's address on the VM's tap card, in the same /24 as the cluster's
	// Address; the host must route PodCIDR to it.
	IP string
	// PodCIDR is the pods' subnet on this node.
	PodCIDR string
	// PauseImage is the pod sandbox image, one of the imported images.
	PauseImage string
	// ReadyTimeout bounds the wait, once node-setup.sh has imported the images and started
	// kubelet and kube-proxy, for the node to be Ready and kube-proxy to route the kubernetes
	// Service; default 5 minutes.
	ReadyTimeout time.Duration
	Logf         func(format string, args ...any)
}

//go:embed node-setup.sh
var nodeSetup string

// nodeSetupPath is where Setup and PreparedRoot write node-setup.sh in the guest.
const nodeSetupPath = "/usr/local/sbin/flashcache-node-setup"

// Setup writes the node's credentials into the guest, runs node-setup.sh there and waits until
// the Node is Ready. The kubelet authenticates as system:node:<Name> (the Node authorizer's
// user), kube-proxy as system:kube-proxy; the API server's client certificate towards the
// kubelet chains to the cluster's CA, which the kubelet trusts.
func Setup(ctx context.Context, vm *vmharness.VM, c *cluster.Cluster, opts Options) (*corev1.Node, error) {
	if c.PKI == nil {
		return nil, fmt.Errorf("kubenode: the cluster was not started for real nodes (cluster.Options.Address)")
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 5 * time.Minute
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	kubelet, err := c.HostKubeconfig(envtest.User{Name: "system:node:" + opts.Name, Groups: []string{"system:nodes"}})
	if err != nil {
		return nil, err
	}
	proxy, err := c.HostKubeconfig(envtest.User{Name: "system:kube-proxy", Groups: []string{"system:node-proxier"}})
	if err != nil {
		return nil, err
	}
	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{"/etc/kubernetes/kubelet.kubeconfig", kubelet, 0o600},
		{"/etc/kubernetes/kube-proxy.kubeconfig", proxy, 0o600},
		{"/etc/kubernetes/pki/ca.crt", c.PKI.CAPEM, 0o644},
		{nodeSetupPath, []byte(nodeSetup), 0o755},
	}
	for _, f := range files {
		if err := vm.WriteFile(ctx, f.path, f.data, f.mode); err != nil {
			return nil, fmt.Errorf("kubenode: %w", err)
		}
	}
	env := map[string]string{
		"NODE_NAME": opts.Name, "NODE_IP": opts.IP, "NODE_MAC": vmharness.TapMAC, "POD_CIDR": opts.PodCIDR,
		"PAUSE_IMAGE": opts.PauseImage, "BIN_TAG": BinShare, "IMAGES_TAG": ImagesShare,
	}
	var cmd strings.Builder
	for k, v := range env {
		fmt.Fprintf(&cmd, "%s=%s ", k, vmharness.ShellQuote(v))
	}
	cmd.WriteString(nodeSetupPath)
	start := time.Now()
	out, err := vm.Output(ctx, cmd.String())
	if err != nil {
		return nil, fmt.Errorf("kubenode: node setup: %w\n%s", err, out)
	}
	logf("kubenode: %s", strings.TrimSpace(out))

	waitCtx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	var last *corev1.Node
	err = wait.PollUntilContextCancel(waitCtx, time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, opts.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = n
		return cluster.NodeReady(n), nil
	})
	if err != nil {
		journal, _ := vm.Output(context.Background(), "journalctl -u kubelet -u containerd --no-pager -n 60")
		return nil, fmt.Errorf("kubenode: node %s not Ready after %s (last seen: %v): %w\nkubelet and containerd:\n%s",
			opts.Name, opts.ReadyTimeout, cluster.DescribeNode(last), err, journal)
	}
	logf("kubenode: node %s Ready %s after setup began", opts.Name, time.Since(start).Round(100*time.Millisecond))
	// Ready says nothing of kube-proxy. Without its rules a pod's connection to the API server's
	// Service address is routed nowhere, and every pod that needs it exits after 30 s, far from
	// the cause (the demo's chart once waited 10 minutes so).
	err = wait.PollUntilContextCancel(waitCtx, time.Second, true, func(ctx context.Context) (bool, error) {
		_, _, code, err := vm.Run(ctx, "iptables -t nat -S KUBE-SERVICES 2>/dev/null | grep -q 'default/kubernetes:https'")
		return err == nil && code == 0, nil
	})
	if err != nil {
		journal, _ := vm.Output(context.Background(), "systemctl status --no-pager kube-proxy | head -n 5; journalctl -u kube-proxy --no-pager -n 30")
		return nil, fmt.Errorf("kubenode: kube-proxy has not routed the kubernetes Service on node %s: %w\nkube-proxy:\n%s", opts.Name, err, journal)
	}
	logf("kubenode: kube-proxy routes the kubernetes Service %s after setup began", time.Since(start).Round(100*time.Millisecond))
	return last, nil
}
