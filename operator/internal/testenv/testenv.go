// Package testenv starts a real etcd and kube-apiserver for tests, from the binaries that
// hack/build-control-plane.sh builds (make envtest-assets prints their folder).
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
)

// Scheme holds Kubernetes' own types and the project's API: what a test's client reads and
// writes.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(fcv1.AddToScheme(s))
	return s
}

// RepoRoot is the top of the repository, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// CRDDir is the folder of generated CustomResourceDefinitions.
func CRDDir() string { return filepath.Join(RepoRoot(), "crds") }

// ChartDir is the folder of the Helm chart.
func ChartDir() string { return filepath.Join(RepoRoot(), "charts", "flashcache") }

// Assets is the folder of control-plane binaries, or an error that says how to build them.
func Assets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", fmt.Errorf("KUBEBUILDER_ASSETS is not set: run these tests with `make test-envtest`, or export KUBEBUILDER_ASSETS=$(make -s envtest-assets)")
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s lacks %s: %w", dir, bin, err)
		}
	}
	return dir, nil
}

// Start runs a control plane, installing the CRDs in crdDirs (none: a bare API server).
func Start(crdDirs ...string) (*envtest.Environment, *rest.Config, error) {
	assets, err := Assets()
	if err != nil {
		return nil, nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: len(crdDirs) > 0,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("starting etcd and kube-apiserver from %s: %w", assets, err)
	}
	return env, cfg, nil
}

// kubectlTimeout bounds one kubectl call; a hung API server must fail the test, not stall it.
const kubectlTimeout = 2 * time.Minute

// Kubectl runs the kubectl of the assets folder against the environment as an admin.
type Kubectl struct {
	bin        string
	kubeconfig string
	// cacheDir keeps kubectl's discovery cache apart from the user's ~/.kube/cache.
	cacheDir string
}

// WriteAdminKubeconfig writes a kubeconfig for a system:masters user of env to path.
func WriteAdminKubeconfig(env *envtest.Environment, path string) error {
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding admin user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("rendering kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}

// NewKubectl writes an admin kubeconfig for env into dir and returns a kubectl that uses it.
func NewKubectl(env *envtest.Environment, dir string) (*Kubectl, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := WriteAdminKubeconfig(env, path); err != nil {
		return nil, err
	}
	return &Kubectl{bin: filepath.Join(assets, "kubectl"), kubeconfig: path, cacheDir: filepath.Join(dir, "kube-cache")}, nil
}

// Eventually runs kubectl until it succeeds or the timeout passes, for what the API server
// publishes asynchronously (discovery and OpenAPI of a new CRD).
func (k *Kubectl) Eventually(timeout time.Duration, args ...string) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		out, err := k.Run(args...)
		if err == nil || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(time.Second)
	}
}

// Run runs kubectl with args and returns its combined output.
func (k *Kubectl) Run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	return k.RunContext(ctx, args...)
}

// Plugin runs `kubectl NAME ARGS` with pluginDir first on the PATH, as a user with a kubectl
// plugin installed runs it (kubectl finds kubectl-NAME there and passes it the arguments), with
// this kubectl's kubeconfig.
func (k *Kubectl) Plugin(ctx context.Context, pluginDir, name string, args ...string) (string, error) {
	argv := append(append([]string{name}, args...), "--kubeconfig", k.kubeconfig)
	cmd := exec.CommandContext(ctx, k.bin, argv...)
	cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w\n%s", argv, err, out)
	}
	return string(out), nil
}

// RunContext is Run bounded by ctx instead of the usual two minutes, for commands that wait
// longer on purpose (kubectl drain --timeout, kubectl wait).
func (k *Kubectl) RunContext(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w\n%s", args, err, out)
	}
	return string(out), nil
}
