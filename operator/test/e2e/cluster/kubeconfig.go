package cluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flashcache/flashcache/operator/internal/testenv"
	"github.com/flashcache/flashcache/operator/test/vmharness"
)

// servingName is a name the API server's serving certificate holds whatever address it is
// reached at: envtest issues it for "localhost" (a DNS SAN) and its bind address, 127.0.0.1.
const servingName = "localhost"

// HostKubeconfig is a kubeconfig for a process on this host, as user (a client certificate
// with user.Name as its name and user.Groups as its groups); the server is
// https://127.0.0.1:<port>.
func (c *Cluster) HostKubeconfig(user envtest.User) ([]byte, error) {
	u, err := c.Env.AddUser(user, nil)
	if err != nil {
		return nil, fmt.Errorf("cluster: adding user %s: %w", user.Name, err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("cluster: kubeconfig for %s: %w", user.Name, err)
	}
	return kubeconfig, nil
}

// KubeconfigVia is a kubeconfig for a process that reaches this host's loopback interface as
// host, such as a QEMU guest behind user networking. The server is https://<host>:<port>, and
// tls-server-name makes the client check the API server's certificate against a name it
// holds, so the connection is verified as from the host.
func (c *Cluster) KubeconfigVia(host string, user envtest.User) ([]byte, error) {
	raw, err := c.HostKubeconfig(user)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, fmt.Errorf("cluster: parsing kubeconfig for %s: %w", user.Name, err)
	}
	for name, cl := range cfg.Clusters {
		u, err := url.Parse(cl.Server)
		if err != nil {
			return nil, fmt.Errorf("cluster: kubeconfig cluster %s: server %q: %w", name, cl.Server, err)
		}
		u.Host = net.JoinHostPort(host, u.Port())
		cl.Server = u.String()
		cl.TLSServerName = servingName
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: rendering kubeconfig for %s: %w", user.Name, err)
	}
	return out, nil
}

// GuestKubeconfig is a kubeconfig for a process inside a vmharness VM, as user: QEMU's user
// networking forwards the guest's connections to vmharness.HostAddr to the host's loopback.
func (c *Cluster) GuestKubeconfig(user envtest.User) ([]byte, error) {
	return c.KubeconfigVia(vmharness.HostAddr, user)
}

// Kubectl is the assets' kubectl as an admin (system:masters) of the cluster, for what a test
// does the way a person would (apply, drain).
func (c *Cluster) Kubectl() (*testenv.Kubectl, error) {
	dir := filepath.Join(c.Dir, "kubectl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	k, err := testenv.NewKubectl(c.Env, dir)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return k, nil
}

// ServiceAccountKubeconfig is a kubeconfig that authenticates with a token of the ServiceAccount
// namespace/name, issued by the API server as the kubelet would for a pod, so the process has
// exactly that account's RBAC. via is the address the process reaches this host's loopback at
// ("" for a process on this host, vmharness.HostAddr for one in a guest).
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name, via string, lifetime time.Duration) ([]byte, error) {
	seconds := int64(lifetime.Seconds())
	token, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("cluster: token of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	server, err := url.Parse(c.Config.Host)
	if err != nil {
		return nil, fmt.Errorf("cluster: API server address %q: %w", c.Config.Host, err)
	}
	cl := clientcmdapi.NewCluster()
	cl.CertificateAuthorityData = c.Config.CAData
	if via != "" {
		server.Host = net.JoinHostPort(via, server.Port())
		cl.TLSServerName = servingName
	}
	cl.Server = server.String()
	user := clientcmdapi.NewAuthInfo()
	user.Token = token.Status.Token
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = cl
	cfg.AuthInfos[name] = user
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: name, Namespace: namespace}
	cfg.CurrentContext = "default"
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: rendering kubeconfig of %s/%s: %w", namespace, name, err)
	}
	return out, nil
}
