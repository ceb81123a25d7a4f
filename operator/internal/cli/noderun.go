package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flashcache/flashcache/operator/internal/agent"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/internal/volumefile"
)

// runLockWait is how long one round waits for a volume whose disks another run holds (a drain's
// flush, the boot unit's apply); the next round tries again.
const runLockWait = time.Second

type runOptions struct {
	interval    time.Duration
	metricsAddr string
}

// newNodeRunCommand is `flashcache node run`: on a host without Kubernetes, what the agent does
// on a node, for the volumes of a file.
func newNodeRunCommand(opts *nodeOptions) *cobra.Command {
	ro := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Keep the volumes converged: tunables, flush passes every half flushPeriod, the cutoff while the cache fills; serve metrics",
		Long: `Runs until stopped, converging each volume of the file every --interval as the Kubernetes
agent does on a node: it builds or adopts the volume and keeps its tunables, starts a flush pass
when spec.flushPeriod has passed (writeback at full speed, in writeback mode, until clean),
switches the sequential cutoff once the cache has filled, and respects a drain's hold. What is
due is kept under /var/lib/flashcache/state, so a restart neither loses nor repeats a pass. The
agent's metrics are served on --metrics-bind-address. The file is read again every round.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLoop(cmd, opts, ro)
		},
	}
	cmd.Flags().DurationVar(&ro.interval, "interval", 10*time.Second, "how often each volume is converged")
	cmd.Flags().StringVar(&ro.metricsAddr, "metrics-bind-address", "127.0.0.1:8090", "address of the Prometheus metrics endpoint; 0 turns it off")
	return cmd
}

func runLoop(cmd *cobra.Command, opts *nodeOptions, ro *runOptions) error {
	if ro.interval <= 0 {
		return fmt.Errorf("--interval must be positive")
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := newNodeLogger(cmd, opts)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := agent.NewMetrics(reg)
	e := &engine.Engine{Run: blockdev.Runner{Log: log, Ran: metrics.Ran}, Log: log, HoldDir: opts.holdDir, StateDir: opts.stateDir}
	if ro.metricsAddr != "0" && ro.metricsAddr != "" {
		ln, err := net.Listen("tcp", ro.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-bind-address: %w", err)
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
		log.Info("serving metrics", "address", ln.Addr().String())
	}

	var volumes []engine.Volume
	known := map[string]bool{}
	ticker := time.NewTicker(ro.interval)
	defer ticker.Stop()
	for {
		loaded, err := volumefile.Load(ctx, opts.config)
		switch {
		case err != nil && volumes == nil:
			return fmt.Errorf("--config %s: %w", opts.config, err)
		case err != nil:
			log.Error(err, "reading the volume file failed: going on with the volumes read before", "config", opts.config)
		default:
			// Pools are built by `flashcache node apply`; the loop converges volumes.
			volumes = loaded.Volumes
		}
		seen := map[string]bool{}
		for _, v := range volumes {
			if opts.volume != "" && v.Name != opts.volume {
				continue
			}
			seen[v.Name] = true
			convergeOnce(ctx, e, v, metrics, log)
		}
		for name := range known {
			if !seen[name] {
				metrics.Forget(name)
			}
		}
		known = seen
		select {
		case <-ctx.Done():
			log.Info("stopping; a flush pass under way goes on in the kernel and is picked up at the next start")
			return nil
		case <-ticker.C:
		}
	}
}

// convergeOnce runs one round for a volume and logs what changed; errors are logged and counted,
// and the next round tries again.
func convergeOnce(ctx context.Context, e *engine.Engine, v engine.Volume, metrics *agent.Metrics, log logr.Logger) {
	log = log.WithValues("volume", v.Name)
	unlock, err := engine.Lock(ctx, v, runLockWait)
	if errors.Is(err, engine.ErrBusy) {
		log.V(1).Info("another run holds the volume's disks; next round")
		return
	}
	if err != nil {
		log.Error(err, "locking the volume's disks")
		metrics.EngineError(v.Name, "lock")
		return
	}
	defer unlock()
	res, pass, err := e.Converge(ctx, v, engine.Desired{}, time.Now())
	metrics.EngineRun(v.Name)
	// Said even when the converge then failed: a pass is recorded before its knobs change, and
	// a stop in between (the converge cancelled) left a pass that ran without its start logged.
	logPass(log, pass)
	if err != nil {
		if ctx.Err() == nil {
			log.Error(err, "converge failed")
			metrics.EngineError(v.Name, "converge")
		}
		return
	}
	if res.Changed {
		log.Info("changed", "steps", res.Steps)
		for _, w := range res.Warnings {
			log.Info("warning", "warning", w)
		}
	}
	if w := res.Wear; w != nil && w.BecameWorn {
		log.Info("cache device worn while running", "reasons", w.Reasons, "cacheMode", res.Status.CacheMode)
	}
	metrics.Observe(v, res, res.Check.CacheWearPercent())
	metrics.Pass(v.Name, pass)
}

// logPass says what the round did with the volume's flush pass.
func logPass(log logr.Logger, pass *engine.PassReport) {
	if pass == nil {
		return
	}
	switch {
	case pass.Started:
		log.Info("flush pass started", "reason", pass.Reason, "dirtyBytes", pass.DirtyAtStart, "startedAt", pass.StartedAt.UTC().Format(time.RFC3339Nano))
	case pass.FinishedInWritethrough:
		log.Info("flush pass did not write back what was dirty at its start within its limit: finished in writethrough", "reason", pass.Reason, "took", pass.Elapsed.String(),
			"writethroughSeconds", pass.WritethroughFlushSeconds)
	case pass.Ended:
		log.Info("flush pass done", "reason", pass.Reason, "took", pass.Elapsed.String(), "swept", pass.Swept)
	}
}

// newNodeLogger logs to stderr, at debug level with --verbose (the runner logs each command at V(1)).
func newNodeLogger(cmd *cobra.Command, opts *nodeOptions) logr.Logger {
	level := zapcore.InfoLevel
	if opts.verbose {
		level = zapcore.DebugLevel
	}
	return zap.New(zap.WriteTo(cmd.ErrOrStderr()), zap.ConsoleEncoder(), zap.Level(level))
}
