package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// OperatorOptions describe how StartOperator runs bin/flashcache's operator.
type OperatorOptions struct {
	// Binary is bin/flashcache.
	Binary string
	// Namespace is where the chart was installed: the operator's ServiceAccount, lease and
	// certificate Secret live there.
	Namespace string
	// Dir receives operator.log, the operator's kubeconfig and its certificate folder.
	Dir string
	// Metrics serves the operator's Prometheus metrics on a free loopback port (MetricsURL);
	// without it the endpoint is off, as the end-to-end tests need nothing from it.
	Metrics bool
	// CSIEndpoint, when set, is the unix socket the operator serves the CSI controller on
	// (--csi-endpoint), for a test that calls it as the provisioner would.
	CSIEndpoint string
}

// Operator is a running operator process.
type Operator struct {
	// Pid is the operator process's id, for reading its /proc entries.
	Pid int
	// WebhookPort is the loopback port the eviction webhook serves on.
	WebhookPort int
	// MetricsURL is http://127.0.0.1:<port>/metrics, or "" without OperatorOptions.Metrics.
	MetricsURL string
	// LogPath is the operator's combined output.
	LogPath string

	done chan struct{}
	mu   sync.Mutex
	err  error
}

// Exited is nil while the operator runs, and says how it ended (with its log's tail) after.
func (o *Operator) Exited() error {
	select {
	case <-o.done:
	default:
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Errorf("operator exited (%v); end of %s:\n%s", o.err, o.LogPath, logTail(o.LogPath, 3000))
}

// StartOperator points the chart's webhook configuration at a port on this host and runs the
// operator there, as the chart would (leader election, self-managed certificates in the chart's
// Secret), with the chart ServiceAccount's token, so a verb missing from the chart's RBAC shows.
// It returns once the operator has injected the webhook's CA, and stops the operator when t
// ends.
func (c *Cluster) StartOperator(t testing.TB, ctx context.Context, opts OperatorOptions) *Operator {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	webhooks := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	config, err := webhooks.Get(ctx, "flashcache-eviction", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("cluster: the chart's webhook configuration: %v", err)
	}
	url := fmt.Sprintf("https://localhost:%d/validate-eviction", port)
	for i := range config.Webhooks {
		config.Webhooks[i].ClientConfig = admissionv1.WebhookClientConfig{URL: &url}
	}
	if _, err := webhooks.Update(ctx, config, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("cluster: pointing the webhook at this host: %v", err)
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, opts.Namespace, "flashcache-operator", "", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(opts.Dir, "operator-kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatalf("cluster: %v", err)
	}
	op := &Operator{WebhookPort: port, LogPath: filepath.Join(opts.Dir, "operator.log"), done: make(chan struct{})}
	metricsAddr := "0"
	if opts.Metrics {
		metricsPort, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		metricsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(metricsPort))
		op.MetricsURL = "http://" + metricsAddr + "/metrics"
	}
	logFile, err := os.Create(op.LogPath)
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	cmd := exec.Command(opts.Binary, "operator", "--kubeconfig", path,
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", "0",
		"--leader-elect", "--leader-election-namespace", opts.Namespace,
		"--webhook-port", strconv.Itoa(port), "--webhook-namespace", opts.Namespace, "--agent-namespace", opts.Namespace,
		"--webhook-dns-name", "localhost", "--webhook-cert-dir", filepath.Join(opts.Dir, "webhook-certs"))
	if opts.CSIEndpoint != "" {
		cmd.Args = append(cmd.Args, "--csi-endpoint", opts.CSIEndpoint)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A test binary that dies (timeout, panic) must not leave an operator behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("cluster: starting the operator: %v", err)
	}
	op.Pid = cmd.Process.Pid
	go func() {
		err := cmd.Wait()
		logFile.Close()
		op.mu.Lock()
		op.err = err
		op.mu.Unlock()
		close(op.done)
	}()
	t.Cleanup(func() {
		// SIGTERM, as the kubelet would: the operator releases its lease on the way out.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-op.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-op.done
		}
		if t.Failed() {
			t.Logf("operator log (tail):\n%s", logTail(op.LogPath, 4000))
		}
	})

	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := op.Exited(); err != nil {
			return false, err
		}
		got, err := webhooks.Get(ctx, config.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil // the API server may be busy; the deadline decides
		}
		return len(got.Webhooks) > 0 && len(got.Webhooks[0].ClientConfig.CABundle) > 0, nil
	})
	if err != nil {
		t.Fatalf("cluster: waiting for the operator to inject the webhook's CA (log %s): %v", op.LogPath, err)
	}
	return op
}

// FreePort is a loopback TCP port that was free a moment ago.
func FreePort() (int, error) { return FreePortOn("127.0.0.1") }

// FreePortOn is a TCP port of address that was free a moment ago.
func FreePortOn(address string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
	if err != nil {
		return 0, fmt.Errorf("cluster: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
