package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	webhookserver "sigs.k8s.io/controller-runtime/pkg/webhook"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/controller"
	"github.com/flashcache/flashcache/operator/internal/csi"
	"github.com/flashcache/flashcache/operator/internal/version"
	"github.com/flashcache/flashcache/operator/internal/webhook"
)

type operatorOptions struct {
	kubeconfig              string
	metricsAddr             string
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	webhook                 webhook.Options
	webhookNamespace        string
	webhookService          string
	csiEndpoint             string
	zap                     zap.Options
}

func newOperatorCommand() *cobra.Command {
	opts := operatorOptions{zap: zap.Options{Development: false}}
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the operator: publish PersistentVolumes for FlashCacheVolumes and guard their deletion",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runOperator(cmd, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: $KUBECONFIG, then in-cluster")
	f.StringVar(&opts.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 turns it off")
	f.StringVar(&opts.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	f.BoolVar(&opts.leaderElect, "leader-elect", false, "elect a leader, so that only one of several replicas reconciles")
	f.StringVar(&opts.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election lease; empty: the pod's own")
	f.IntVar(&opts.webhook.Port, "webhook-port", 9443, "port of the eviction webhook; 0 turns the webhook off")
	f.StringVar(&opts.csiEndpoint, "csi-endpoint", "", "unix socket to serve the CSI controller on, for the provisioner and resizer sidecars (unix:///csi/csi.sock); empty: no CSI")
	f.StringVar(&opts.webhook.CertDir, "webhook-cert-dir", filepath.Join(os.TempDir(), "flashcache-webhook-certs"), "folder of the webhook's tls.crt and tls.key")
	f.StringVar(&opts.webhook.Certs, "webhook-certs", webhook.CertsSelf, "where the serving certificate comes from: self (made, rotated and injected by the operator) or files (cert-manager)")
	f.StringVar(&opts.webhookNamespace, "webhook-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the webhook Service and certificate Secret (default $POD_NAMESPACE)")
	f.StringVar(&opts.webhookService, "webhook-service", "flashcache-webhook", "Service the API server calls the webhook through")
	f.StringVar(&opts.webhook.Secret.Name, "webhook-secret", "flashcache-webhook-certs", "Secret that keeps the self-made certificates")
	f.StringVar(&opts.webhook.DNSName, "webhook-dns-name", "", "name in the serving certificate (default <service>.<namespace>.svc)")
	f.StringVar(&opts.webhook.Configuration, "webhook-configuration", "flashcache-eviction", "ValidatingWebhookConfiguration to inject the CA into")
	f.StringVar(&opts.webhook.AgentNamespace, "agent-namespace", os.Getenv("POD_NAMESPACE"), "namespace where the node agents renew their heartbeat Leases (default $POD_NAMESPACE); empty: a held eviction does not check them")
	goFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	opts.zap.BindFlags(goFlags)
	f.AddGoFlagSet(goFlags)
	return cmd
}

// Leader election keeps a Lease, and records its changes as events, in the operator's namespace.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=flashcache-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=flashcache-system,resources=events,verbs=create;patch

func runOperator(cmd *cobra.Command, opts operatorOptions) error {
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	log := ctrl.Log.WithName("operator")
	log.Info("starting", "version", version.Get().Version)

	cfg, err := restConfig(opts.kubeconfig)
	if err != nil {
		return err
	}
	scheme := newScheme()

	cacheOpts, err := controller.CacheOptions()
	if err != nil {
		return err
	}
	var server webhookserver.Server
	var certs *webhook.SecretCertificate
	if opts.webhook.Port != 0 {
		cacheOpts.ByObject[&corev1.Pod{}] = cache.ByObject{Transform: webhook.SlimPod}
		if opts.webhook.Certs == webhook.CertsSelf {
			if opts.webhookNamespace == "" {
				return fmt.Errorf("--webhook-namespace: empty; set it or $POD_NAMESPACE for the certificate Secret")
			}
			opts.webhook.Secret.Namespace = opts.webhookNamespace
			if opts.webhook.DNSName == "" {
				opts.webhook.DNSName = opts.webhookService + "." + opts.webhookNamespace + ".svc"
			}
		}
		// The certificate is read with a direct client: caching Secrets would mean watching
		// every Secret of the namespace.
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return fmt.Errorf("creating client: %w", err)
		}
		if server, certs, err = webhook.NewServer(opts.webhook, direct); err != nil {
			return err
		}
		if certs != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := webhook.EnsureSecret(ctx, direct, opts.webhook.Secret)
			cancel()
			if err != nil {
				return err
			}
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		WebhookServer:           server,
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: opts.metricsAddr},
		HealthProbeBindAddress:  opts.probeAddr,
		LeaderElection:          opts.leaderElect,
		LeaderElectionID:        "flashcache-operator.flashcache.io",
		LeaderElectionNamespace: opts.leaderElectionNamespace,
		// The process exits right after the manager stops, so release the lease at once
		// rather than make the next replica wait for it to expire.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := (&controller.FlashCacheVolumeReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("flashcache-operator"),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up FlashCacheVolume controller: %w", err)
	}
	// Every replica answers scrapes from its own cache, leader or not: the alert rules take the
	// max over replicas.
	if err := crmetrics.Registry.Register(&controller.ClusterMetrics{Volumes: mgr.GetClient(), Leases: mgr.GetAPIReader(),
		AgentNamespace: opts.webhook.AgentNamespace, Log: ctrl.Log.WithName("metrics")}); err != nil {
		return fmt.Errorf("registering the cluster metrics: %w", err)
	}
	if server != nil {
		if err := webhook.Register(mgr, opts.webhook, certs); err != nil {
			return fmt.Errorf("setting up the eviction webhook: %w", err)
		}
	}
	if opts.csiEndpoint != "" {
		// Free space is counted from the volumes that exist: read straight from the API
		// server, since a cache a moment behind would give two claims the same space.
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return fmt.Errorf("creating the CSI controller's client: %w", err)
		}
		log := ctrl.Log.WithName("csi")
		if err := mgr.Add(&csi.Server{Endpoint: opts.csiEndpoint, Identity: &csi.Identity{},
			Controller: &csi.Controller{Client: direct, Log: log}, Log: log}); err != nil {
			return fmt.Errorf("setting up the CSI controller: %w", err)
		}
	}
	return runManager(mgr, healthz.Ping)
}

// runManager adds the probes (/healthz: the process answers; /readyz: ready) and runs the
// manager until SIGTERM.
func runManager(mgr ctrl.Manager, ready healthz.Checker) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// newScheme knows Kubernetes' own types and FlashCacheVolumes.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(fcv1.AddToScheme(scheme))
	return scheme
}

// restConfig reads the named kubeconfig, or falls back to $KUBECONFIG and the in-cluster config.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("finding the API server (set --kubeconfig or $KUBECONFIG outside a cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading --kubeconfig %s: %w", kubeconfig, err)
	}
	if cfg.QPS == 0 {
		// As ctrl.GetConfig does for the in-cluster configuration: no client-side rate limit,
		// the API server's priority and fairness decides. Left at 0, client-go would allow 5
		// requests a second, and a process started with --kubeconfig would publish volumes at a
		// fraction of the speed of the same process in a pod.
		cfg.QPS = -1
	}
	return cfg, nil
}
