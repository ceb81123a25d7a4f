package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Certificate sources for the webhook's serving certificate.
const (
	// CertsSelf: the operator makes and rotates a CA and serving certificate with
	// open-policy-agent/cert-controller, keeps them in a Secret and injects the CA into the
	// ValidatingWebhookConfiguration.
	CertsSelf = "self"
	// CertsFiles: tls.crt and tls.key in the certificate folder come from elsewhere
	// (cert-manager), which also injects the CA.
	CertsFiles = "files"
)

// Options configure the webhook server.
type Options struct {
	Port    int
	CertDir string
	// Certs is CertsSelf or CertsFiles.
	Certs string
	// Secret keeps the self-managed certificates.
	Secret types.NamespacedName
	// DNSName is the name the API server calls the webhook by (service.namespace.svc).
	DNSName string
	// Configuration is the ValidatingWebhookConfiguration to inject the CA into.
	Configuration string
	// AgentNamespace is where the node agents renew their Leases (heartbeat); empty: a held
	// eviction does not say whether the agent is alive.
	AgentNamespace string
}

// The certificate Secret lives in the operator's namespace: a Role there, not a ClusterRole, so
// the operator cannot read the cluster's other Secrets. The chart binds it in its release's
// namespace.
// +kubebuilder:rbac:groups="",namespace=flashcache-system,resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;update;patch

// NewServer returns the webhook server for the manager's options. With self-managed
// certificates it serves the certificate straight from the Secret, so it does not wait the
// minute a kubelet takes to update a mounted Secret after a rotation.
func NewServer(opts Options, reader client.Reader) (webhook.Server, *SecretCertificate, error) {
	server := webhook.Options{Port: opts.Port, CertDir: opts.CertDir}
	var source *SecretCertificate
	switch opts.Certs {
	case CertsFiles:
	case CertsSelf:
		source = &SecretCertificate{Reader: reader, Secret: opts.Secret, MirrorDir: opts.CertDir}
		server.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = source.GetCertificate }}
	default:
		return nil, nil, fmt.Errorf("--webhook-certs: %q is neither %s nor %s", opts.Certs, CertsSelf, CertsFiles)
	}
	return webhook.NewServer(server), source, nil
}

// Register adds the eviction gate to the manager's webhook server and, with self-managed
// certificates, the rotator that makes them.
func Register(mgr ctrl.Manager, opts Options, source *SecretCertificate) error {
	// The gate reads pods and claims from the cache, whose informers otherwise start at the first
	// read: the first eviction after a start would wait for a list of every pod in the cluster,
	// against the API server's timeout for the webhook. Asked for now, they start and sync with
	// the manager.
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.PersistentVolumeClaim{}} {
		if _, err := mgr.GetCache().GetInformer(context.Background(), obj, cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("starting the %T informer of the eviction gate: %w", obj, err)
		}
	}
	mgr.GetWebhookServer().Register(Path, &admission.Webhook{Handler: &EvictionGate{
		Reader:   mgr.GetCache(),
		Writer:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("flashcache-eviction-webhook"),
		// Uncached: one Get per held eviction, instead of a watch of every Lease in the namespace.
		Agents:         mgr.GetAPIReader(),
		AgentNamespace: opts.AgentNamespace,
	}})
	if source == nil {
		return nil
	}
	if err := mgr.Add(source); err != nil {
		return err
	}
	return rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      opts.Secret,
		CertDir:        opts.CertDir,
		CAName:         "flashcache-ca",
		CAOrganization: "flashcache",
		DNSName:        opts.DNSName,
		IsReady:        make(chan struct{}),
		Webhooks:       []rotator.WebhookInfo{{Name: opts.Configuration, Type: rotator.Validating}},
		// Every replica serves the webhook, so every replica must keep its certificate current;
		// the rotator's writes are idempotent.
		RequireLeaderElection: false,
	})
}

// SecretCertificate serves the certificate the rotator keeps in a Secret, and mirrors it into
// MirrorDir, where the rotator checks that it arrived. Start keeps both current, so a TLS
// handshake never waits on the API server.
type SecretCertificate struct {
	Reader    client.Reader
	Secret    types.NamespacedName
	MirrorDir string

	mu      sync.Mutex
	cert    *tls.Certificate
	version string
}

const certificateRefresh = 30 * time.Second

// GetCertificate is tls.Config.GetCertificate.
func (s *SecretCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert == nil {
		return nil, fmt.Errorf("the webhook certificate in %s has not been read yet", s.Secret)
	}
	return s.cert, nil
}

func (s *SecretCertificate) refresh(ctx context.Context) error {
	var secret corev1.Secret
	if err := s.Reader.Get(ctx, s.Secret, &secret); err != nil {
		return fmt.Errorf("reading webhook certificate secret %s: %w", s.Secret, err)
	}
	if secret.ResourceVersion == s.version && s.cert != nil {
		return nil
	}
	crt, key := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return errors.New("the webhook certificate has not been made yet")
	}
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return fmt.Errorf("webhook certificate in %s: %w", s.Secret, err)
	}
	if s.MirrorDir != "" {
		if err := os.MkdirAll(s.MirrorDir, 0o700); err != nil {
			return fmt.Errorf("certificate folder: %w", err)
		}
		for name, data := range map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key} {
			if err := os.WriteFile(filepath.Join(s.MirrorDir, name), data, 0o600); err != nil {
				return fmt.Errorf("mirroring the webhook certificate: %w", err)
			}
		}
	}
	s.cert, s.version = &cert, secret.ResourceVersion
	return nil
}

// Start reads the certificate at once and then every certificateRefresh (every second until it
// exists), keeping the served certificate and the mirror current: the rotator fails if the files
// do not appear within minutes.
func (s *SecretCertificate) Start(ctx context.Context) error {
	for {
		s.mu.Lock()
		err := s.refresh(ctx)
		s.mu.Unlock()
		wait := certificateRefresh
		if err != nil {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// NeedLeaderElection: every replica serves.
func (s *SecretCertificate) NeedLeaderElection() bool { return false }

// EnsureSecret creates the empty Secret the rotator fills, when the installation did not: the
// rotator only updates one that exists.
func EnsureSecret(ctx context.Context, c client.Client, key types.NamespacedName) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
		Labels: map[string]string{"app.kubernetes.io/name": "flashcache", "app.kubernetes.io/component": "webhook"}}}
	if err := c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating webhook certificate secret %s: %w", key, err)
	}
	return nil
}
