// Package cluster starts a whole local Kubernetes cluster for end-to-end tests: etcd and
// kube-apiserver (through envtest, with the CRDs installed), kube-controller-manager,
// kube-scheduler, and kwok playing the kubelet of the nodes a test creates with AddNode. Nodes
// without kwok's annotation are left alone, so a real agent can later report for one of them.
// With Options.Address it serves real kubelets instead (make demo's node): see Options.Address.
//
// Every binary comes from hack/build-control-plane.sh (KUBEBUILDER_ASSETS); `make test-e2e`
// builds them. Every wait is bounded, and the logs of every process are kept when a test fails.
package cluster

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flashcache/flashcache/operator/internal/testenv"
)

const (
	// KwokNodeAnnotation and KwokNodeValue mark the nodes kwok manages; the convention is
	// kwok's own (kwokctl creates its fake nodes with it).
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	KwokNodeValue      = "fake"
)

// Controllers are the kube-controller-manager loops the tests' workloads need, and why:
//   - statefulset: creates the pods and claims of a StatefulSet and recreates evicted pods;
//   - persistentvolume-binder: completes the binding the scheduler starts for a
//     WaitForFirstConsumer claim;
//   - persistentvolume(claim)-protection: removes the finalizers the StorageObjectInUseProtection
//     admission plugin adds, once a volume or claim is unused, so deletions finish;
//   - serviceaccount: creates each namespace's "default" ServiceAccount, without which the
//     ServiceAccount admission plugin (enabled here, unlike envtest's default) refuses pods;
//   - root-ca-certificate-publisher: kube-root-ca.crt, which admitted pods' token volume names;
//   - node-lifecycle: removes the node.kubernetes.io/not-ready taint that the
//     TaintNodesByCondition admission plugin puts on every new node, once kwok reports it Ready;
//     without it nothing is ever scheduled;
//   - garbage-collector: deletes what an owner (a StatefulSet) leaves when it is deleted;
//   - disruption: computes PodDisruptionBudgets' allowed disruptions, which eviction (kubectl
//     drain) obeys; without it a budget would block every eviction.
var Controllers = []string{
	"statefulset-controller",
	"persistentvolume-binder-controller",
	"persistentvolume-protection-controller",
	"persistentvolumeclaim-protection-controller",
	"serviceaccount-controller",
	"root-ca-certificate-publisher-controller",
	"node-lifecycle-controller",
	"garbage-collector-controller",
	"disruption-controller",
}

// RealNodeControllers are the loops a cluster with real kubelets needs besides Controllers: a
// chart's Deployments and DaemonSets become pods only through them, the webhook's and the
// kubernetes Service's endpoints are what the API server and kube-proxy route by, and the pod
// garbage collector removes the pods of a node that is gone.
var RealNodeControllers = append(append([]string(nil), Controllers...),
	"deployment-controller",
	"replicaset-controller",
	"daemonset-controller",
	"endpoints-controller",
	"endpointslice-controller",
	"pod-garbage-collector-controller",
)

// Binaries are the files the assets folder must hold: `hack/build-control-plane.sh` with these
// names as arguments builds them.
var Binaries = []string{"etcd", "kube-apiserver", "kubectl", "kube-controller-manager", "kube-scheduler", "kwok"}

// Options describe a cluster. The zero value is what the end-to-end tests use.
type Options struct {
	// Dir receives the logs (<component>.log), kubeconfigs and kwok's stages. Created if
	// missing. Start needs it; ForTest picks one.
	Dir string
	// CRDDirs are installed before Start returns; nil means the repository's crds/.
	CRDDirs []string
	// Controllers overrides the kube-controller-manager loops (default: Controllers).
	Controllers []string
	// Address, when set, is an IP address of this host that real kubelets reach the API server
	// at (a tap interface's, say). The API server then binds to it with a certificate for it
	// and for the kubernetes Service (see PKI), authorizes kubelets as nodes (Node,RBAC and
	// NodeRestriction), reaches kubelets and webhooks at their pod and node addresses, and runs
	// RealNodeControllers; kwok is not started. The zero value is the kwok cluster the
	// end-to-end tests use.
	Address string
	// StartTimeout bounds each component's start, and AddNode's wait for kwok; default 2
	// minutes, generous because TCG guests share the machine's cores with the control plane.
	StartTimeout time.Duration
	// Logf, when set, receives progress; t.Logf fits.
	Logf func(format string, args ...any)
}

// Cluster is a running cluster.
type Cluster struct {
	// Env is the envtest environment of etcd and kube-apiserver.
	Env *envtest.Environment
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Client is a clientset built from Config.
	Client kubernetes.Interface
	// Assets is the folder of the control-plane binaries.
	Assets string
	// Dir is Options.Dir: logs and kubeconfigs.
	Dir string
	// PKI is the cluster's own certificate authority with Options.Address, else nil (envtest's).
	PKI *PKI

	opts    Options
	procs   []*process
	closers []io.Closer
}

// Start runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, and returns
// once each is up: the API server healthy with the CRDs established, the controller manager and
// the scheduler holding their leader leases (so their controllers run), kwok started. Whether kwok
// works shows only when it has a node: AddNode waits for that. The caller must Stop the cluster,
// even after an error from a later call; after an error from Start nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("cluster: no Dir given")
	}
	if opts.CRDDirs == nil {
		opts.CRDDirs = []string{testenv.CRDDir()}
	}
	if opts.Controllers == nil {
		opts.Controllers = Controllers
		if opts.Address != "" {
			opts.Controllers = RealNodeControllers
		}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	assets, err := testenv.Assets()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	for _, bin := range Binaries {
		if bin == "kwok" && opts.Address != "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("cluster: KUBEBUILDER_ASSETS=%s lacks %s (build it with hack/build-control-plane.sh %s): %w",
				assets, bin, strings.Join(Binaries, " "), err)
		}
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c := &Cluster{Assets: assets, Dir: opts.Dir, opts: opts}
	if err := c.start(ctx); err != nil {
		if stopErr := c.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return c, nil
}

// TestDir is a fresh folder for t's logs and files, under the system's temp dir: removed when
// t passes, kept (and named in the test's output) when it fails, which t.TempDir would not do.
func TestDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "flashcache-"+safeName(t.Name())+"-")
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs and files kept in %s", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("removing %s: %v", dir, err)
		}
	})
	return dir
}

// ForTest starts a cluster for t and stops it when t ends; a failure to start fails t. Without
// opts.Dir, the cluster's folder is a TestDir. When t fails, the end of every component's log
// is printed, so a failure can be read without running it again.
func ForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = TestDir(t)
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Errorf("%v", err)
		logTails(t, opts.Dir)
		t.FailNow()
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, c.Dir)
		}
		if err := c.Stop(); err != nil {
			t.Errorf("cluster: stop: %v", err)
		}
	})
	return c
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func safeName(s string) string {
	s = unsafeChars.ReplaceAllString(s, "_")
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf("cluster: "+format, args...)
	}
}

func (c *Cluster) start(ctx context.Context) error {
	began := time.Now()
	if err := c.startAPIServer(); err != nil {
		return err
	}
	c.logf("etcd and kube-apiserver up at %s in %s, CRDs from %v installed",
		c.Config.Host, time.Since(began).Round(100*time.Millisecond), c.opts.CRDDirs)

	kcm, err := c.componentKubeconfig("kube-controller-manager")
	if err != nil {
		return err
	}
	sched, err := c.componentKubeconfig("kube-scheduler")
	if err != nil {
		return err
	}
	// Leader election is on although there is one instance of each: the lease it takes is
	// the only sign, short of a health port, that the component got past its start-up.
	if err := c.run("kube-controller-manager",
		"--kubeconfig", kcm,
		"--controllers", strings.Join(c.opts.Controllers, ","),
		"--leader-elect=true",
		// No serving port: nothing here scrapes or probes it, and it would need its own
		// certificate and authentication set-up.
		"--secure-port=0",
		// Every loop acts as the controller manager's own (admin) user: the per-controller
		// ServiceAccounts would need the token controller and its signing key.
		"--use-service-account-credentials=false",
	); err != nil {
		return err
	}
	if err := c.run("kube-scheduler",
		"--kubeconfig", sched,
		"--leader-elect=true",
		"--secure-port=0",
	); err != nil {
		return err
	}
	if c.opts.Address == "" {
		if err := c.startKwok(); err != nil {
			return err
		}
	}

	waitCtx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
		if err := c.waitForLease(waitCtx, lease); err != nil {
			return err
		}
	}
	c.logf("kube-controller-manager and kube-scheduler lead after %s; logs in %s",
		time.Since(began).Round(100*time.Millisecond), c.Dir)
	return nil
}

func (c *Cluster) startKwok() error {
	kwok, err := c.componentKubeconfig("kwok")
	if err != nil {
		return err
	}
	stages := filepath.Join(c.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, kwokStages, 0o644); err != nil {
		return fmt.Errorf("writing kwok stages: %w", err)
	}
	// The stages are what kwokctl configures by default: nodes become Ready and renew a
	// lease, pods become Running at once, and a pod being deleted (eviction, drain) is removed
	// as a kubelet would once its containers stopped.
	return c.run("kwok",
		"--kubeconfig", kwok,
		"--config", stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector", KwokNodeAnnotation+"="+KwokNodeValue,
		"--node-lease-duration-seconds=40",
		// Pod addresses that do not collide with the API server's service range.
		"--cidr=10.244.0.0/16",
	)
}

// serveRealNodes sets the API server up for kubelets on other machines (Options.Address).
func (c *Cluster) serveRealNodes(api *envtest.APIServer) error {
	pki, err := NewPKI(filepath.Join(c.Dir, "pki"), c.opts.Address)
	if err != nil {
		return err
	}
	port, err := FreePortOn(c.opts.Address)
	if err != nil {
		return err
	}
	c.PKI = pki
	api.CertDir = pki.Dir
	api.SecureServing.Address = c.opts.Address
	api.SecureServing.Port = strconv.Itoa(port)
	api.SecureServing.CA = pki.CAPEM
	args := api.Configure()
	args.Set("authorization-mode", "Node,RBAC")
	args.Set("enable-admission-plugins", "NodeRestriction")
	args.Set("kubelet-client-certificate", filepath.Join(pki.Dir, pkiKubeletClientCert))
	args.Set("kubelet-client-key", filepath.Join(pki.Dir, pkiKubeletClientKey))
	// A kubelet's hostname means nothing on this host; its InternalIP is routed.
	args.Set("kubelet-preferred-address-types", "InternalIP")
	// Webhooks (the eviction webhook among them) are called at their Service's endpoint, a
	// pod address routed to the node, not at the Service's virtual IP, which only kube-proxy
	// on a node knows.
	args.Set("enable-aggregator-routing", "true")
	return nil
}

func (c *Cluster) startAPIServer() error {
	etcdLog, err := c.openLog("etcd")
	if err != nil {
		return err
	}
	apiLog, err := c.openLog("kube-apiserver")
	if err != nil {
		return err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    c.Assets,
		CRDDirectoryPaths:        c.opts.CRDDirs,
		ErrorIfCRDPathMissing:    len(c.opts.CRDDirs) > 0,
		ControlPlaneStartTimeout: c.opts.StartTimeout,
		ControlPlaneStopTimeout:  time.Minute,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Out: etcdLog, Err: etcdLog}
	api := env.ControlPlane.GetAPIServer()
	api.Out, api.Err = apiLog, apiLog
	// envtest disables the ServiceAccount admission plugin because it runs no controller to
	// create the "default" ServiceAccounts; this cluster does, and pods then look as they do
	// in a real cluster (a service account, a projected token volume).
	api.Configure().Disable("disable-admission-plugins")
	if c.opts.Address != "" {
		if err := c.serveRealNodes(api); err != nil {
			etcdLog.Close()
			apiLog.Close()
			return err
		}
	}
	c.Env = env
	cfg, err := env.Start()
	if err != nil {
		// envtest stops what it started when Start fails, but not always the log files.
		etcdLog.Close()
		apiLog.Close()
		c.Env = nil
		return fmt.Errorf("starting etcd and kube-apiserver from %s: %w", c.Assets, err)
	}
	c.closers = append(c.closers, etcdLog, apiLog)
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	return nil
}

// componentKubeconfig writes a kubeconfig for a control-plane component, as a system:masters
// user of its own name so that audit and API server logs tell the components apart.
func (c *Cluster) componentKubeconfig(name string) (string, error) {
	path := filepath.Join(c.Dir, "kubeconfig-"+name)
	kubeconfig, err := c.HostKubeconfig(envtest.User{Name: name, Groups: []string{"system:masters"}})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// waitForLease waits until a component holds its leader lease in kube-system, or has exited.
func (c *Cluster) waitForLease(ctx context.Context, name string) error {
	p := c.proc(name)
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := p.exitErr(); err != nil {
			return false, err
		}
		lease, err := c.Client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, nil // the API server may be busy; the deadline decides
		}
		return holder(lease) != "", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to take its leader lease (log %s): %w", name, p.logPath, err)
	}
	return nil
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Stop ends kwok, the scheduler and the controller manager (SIGTERM, then SIGKILL after 20 s),
// then the API server and etcd. It can be called more than once.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].stop(20 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	c.procs = nil
	if c.Env != nil {
		if err := c.Env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
		}
		c.Env = nil
	}
	for _, f := range c.closers {
		_ = f.Close()
	}
	c.closers = nil
	return errors.Join(errs...)
}

// AddNode creates a Node for kwok to play (its annotation, and the kubernetes.io/hostname label
// that local PersistentVolumes' node affinity matches), and waits until it is Ready and free of
// taints, that is schedulable. labels are added to the node's.
func (c *Cluster) AddNode(ctx context.Context, name string, labels map[string]string) (*corev1.Node, error) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Annotations: map[string]string{KwokNodeAnnotation: KwokNodeValue},
		Labels:      map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"},
	}}
	for k, v := range labels {
		node.Labels[k] = v
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("cluster: creating node %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	var last *corev1.Node
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.proc("kwok").exitErr(); err != nil {
			return false, err
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = n
		return NodeReady(n) && len(n.Spec.Taints) == 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: node %s did not become Ready and untainted (kwok log %s, kube-controller-manager log %s; last seen: %s): %w",
			name, c.proc("kwok").logPath, c.proc("kube-controller-manager").logPath, DescribeNode(last), err)
	}
	return last, nil
}

// NodeReady says whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// DescribeNode is the node's conditions and taints, for an error message; "never" for nil.
func DescribeNode(n *corev1.Node) string {
	if n == nil {
		return "never"
	}
	var conds []string
	for _, cond := range n.Status.Conditions {
		conds = append(conds, string(cond.Type)+"="+string(cond.Status))
	}
	var taints []string
	for _, t := range n.Spec.Taints {
		taints = append(taints, t.ToString())
	}
	return fmt.Sprintf("conditions %v, taints %v", conds, taints)
}

// logTails writes the end of every component's log in dir to t, for a failed test.
func logTails(t testing.TB, dir string) {
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if tail := logTail(filepath.Join(dir, name+".log"), 3000); tail != "" {
			t.Logf("--- %s.log, last lines:\n%s", name, tail)
		}
	}
}

// kwokStages are kwok v0.8.0's default stages as kwokctl installs them (from sigs.k8s.io/kwok's
// kustomize/stage: node/fast, node/heartbeat-with-lease, pod/fast). The kwok binary alone has
// none and refuses to start without.
//
//go:embed kwok-stages.yaml
var kwokStages []byte
