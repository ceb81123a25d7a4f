package cli

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/agent"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/csi"
	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/internal/heartbeat"
	"github.com/flashcache/flashcache/operator/internal/version"
)

type agentOptions struct {
	kubeconfig   string
	nodeName     string
	metricsAddr  string
	probeAddr    string
	pprofAddr    string
	holdDir      string
	stateDir     string
	flushTimeout time.Duration
	requestGrace time.Duration
	// heartbeatNamespace is where the agent renews its Lease; empty: no heartbeat.
	heartbeatNamespace string
	heartbeatInterval  time.Duration
	csiEndpoint        string
	csiRegistration    string
	zap                zap.Options
}

func newAgentCommand() *cobra.Command {
	opts := agentOptions{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: build, report, flush for drains and tear down this node's volumes",
		Long: `Runs on every node (the DaemonSet), as root with the host's /dev, /sys and /run. It watches the
FlashCacheVolumes whose spec.nodeName is this node, drives the engine for them, flushes and holds
them in writethrough while the node is cordoned or an eviction waits, and reports in their status.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: $KUBECONFIG, then in-cluster")
	f.StringVar(&opts.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, from the downward API)")
	f.StringVar(&opts.metricsAddr, "metrics-bind-address", ":8090", "address of the Prometheus metrics endpoint; 0 turns it off")
	f.StringVar(&opts.probeAddr, "health-probe-bind-address", ":8091", "address of /healthz and /readyz")
	f.StringVar(&opts.pprofAddr, "pprof-bind-address", "", "address of Go's profiler (/debug/pprof/), to see where the agent's CPU goes; empty: off")
	f.StringVar(&opts.holdDir, "hold-dir", engine.DefaultHoldDir, "where holds of flushed volumes are recorded (on the host, so they outlive the pod)")
	f.StringVar(&opts.stateDir, "state-dir", engine.DefaultStateDir, "where each volume's schedule (flush passes) is kept (on the host, so it outlives the pod)")
	f.DurationVar(&opts.flushTimeout, "flush-timeout", 10*time.Minute, "bound of one blocking flush (a drain's or an eviction's); a longer flush goes on in the next reconcile")
	f.StringVar(&opts.heartbeatNamespace, "heartbeat-namespace", os.Getenv("POD_NAMESPACE"), "namespace of this node's heartbeat Lease, which the eviction webhook reads to say when a drain waits on a dead agent (default $POD_NAMESPACE); empty: no heartbeat")
	f.DurationVar(&opts.heartbeatInterval, "heartbeat-interval", heartbeat.DefaultInterval, "how often the heartbeat Lease is renewed; it is counted silent after four intervals")
	f.StringVar(&opts.csiEndpoint, "csi-endpoint", "", "unix socket to serve the CSI node service on, for the kubelet (unix:///var/lib/kubelet/plugins/csi.flashcache.io/csi.sock); empty: no CSI")
	f.StringVar(&opts.csiRegistration, "kubelet-registration-socket", csi.DefaultRegistrationSocket, "socket in the kubelet's plugins_registry folder through which the kubelet registers the CSI driver (with --csi-endpoint, which must be the same path on the host)")
	f.DurationVar(&opts.requestGrace, "flush-request-grace", 2*time.Minute, "how long an eviction's flush request holds a volume in writethrough after its last retry")
	goFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	opts.zap.BindFlags(goFlags)
	f.AddGoFlagSet(goFlags)
	return cmd
}

func runAgent(opts agentOptions) error {
	if opts.nodeName == "" {
		return fmt.Errorf("--node-name: empty; set it or $NODE_NAME (spec.nodeName from the downward API)")
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	log := ctrl.Log.WithName("agent").WithValues("node", opts.nodeName)
	log.Info("starting", "version", version.Get().Version)

	cfg, err := restConfig(opts.kubeconfig)
	if err != nil {
		return err
	}
	scheme := newScheme()

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// The agent sees its own node's volumes and its own Node only: the API server filters
		// (spec.nodeName is a selectable field of the CRD), so a large cluster costs it nothing.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&fcv1.FlashCacheVolume{}: {Field: fields.OneTermEqualSelector("spec.nodeName", opts.nodeName)},
			&corev1.Node{}:           {Field: fields.OneTermEqualSelector("metadata.name", opts.nodeName)},
			&fcv1.FlashCachePool{}:   {Field: fields.OneTermEqualSelector("spec.nodeName", opts.nodeName)},
		}},
		Metrics:                metricsserver.Options{BindAddress: opts.metricsAddr},
		HealthProbeBindAddress: opts.probeAddr,
		PprofBindAddress:       opts.pprofAddr,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	engineLog := ctrl.Log.WithName("engine")
	agentMetrics := agent.NewMetrics(metrics.Registry)
	r := &agent.Reconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		NodeName:     opts.nodeName,
		Engine:       &engine.Engine{Run: blockdev.Runner{Log: engineLog, Ran: agentMetrics.Ran}, Log: engineLog, HoldDir: opts.holdDir, StateDir: opts.stateDir},
		Recorder:     mgr.GetEventRecorder("flashcache-agent"),
		Metrics:      agentMetrics,
		FlushTimeout: opts.flushTimeout,
		RequestGrace: opts.requestGrace,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the agent: %w", err)
	}
	pools := &agent.PoolReconciler{Client: mgr.GetClient(), NodeName: opts.nodeName, Engine: r.Engine, Recorder: mgr.GetEventRecorder("flashcache-agent")}
	if err := pools.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the agent's pools: %w", err)
	}
	if err := mgr.Add(r); err != nil {
		return fmt.Errorf("adding the start-up pass: %w", err)
	}
	if opts.heartbeatNamespace != "" {
		// Its own client: the manager's would read Leases through a cache of all of them.
		leases, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return fmt.Errorf("creating the heartbeat's client: %w", err)
		}
		if err := mgr.Add(&heartbeat.Renewer{Client: leases, Namespace: opts.heartbeatNamespace, Node: opts.nodeName, Interval: opts.heartbeatInterval}); err != nil {
			return fmt.Errorf("adding the heartbeat: %w", err)
		}
	} else {
		ctrl.Log.Info("no --heartbeat-namespace: drains will not be told when this agent is down")
	}
	if opts.csiEndpoint != "" {
		log := ctrl.Log.WithName("csi")
		node := &csi.Node{NodeName: opts.nodeName, Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Runner: blockdev.Runner{Log: log, Ran: agentMetrics.Ran}, Log: log}
		if err := mgr.Add(&csi.Server{Endpoint: opts.csiEndpoint, Identity: &csi.Identity{}, Node: node, Log: log}); err != nil {
			return fmt.Errorf("setting up the CSI node service: %w", err)
		}
		if err := mgr.Add(&csi.Registrar{Socket: opts.csiRegistration, Endpoint: opts.csiEndpoint, Log: log}); err != nil {
			return fmt.Errorf("setting up the kubelet's plugin registration: %w", err)
		}
	}
	return runManager(mgr, r.Ready)
}
