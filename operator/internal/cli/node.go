package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/engine"
	"github.com/flashcache/flashcache/operator/internal/volumefile"
)

type nodeOptions struct {
	config   string
	output   string
	volume   string
	holdDir  string
	stateDir string
	verbose  bool
}

// volumeReport is one volume's outcome in `-o json`.
type volumeReport struct {
	Name     string                 `json:"name"`
	Changed  bool                   `json:"changed"`
	Steps    []engine.Step          `json:"steps,omitempty"`
	Warnings []string               `json:"warnings,omitempty"`
	Status   *engine.Status         `json:"status,omitempty"`
	Flush    *engine.FlushResult    `json:"flush,omitempty"`
	Teardown *engine.TeardownResult `json:"teardown,omitempty"`
	Check    *engine.CheckReport    `json:"check,omitempty"`
	Pass     *engine.PassReport     `json:"pass,omitempty"`
	Error    *reportError           `json:"error,omitempty"`
}

type reportError struct {
	Reason  string `json:"reason,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// poolReport is one pool's outcome in `-o json`.
type poolReport struct {
	Name     string                 `json:"name"`
	Changed  bool                   `json:"changed"`
	Steps    []engine.Step          `json:"steps,omitempty"`
	Status   *engine.PoolStatus     `json:"status,omitempty"`
	Teardown *engine.TeardownResult `json:"teardown,omitempty"`
	Error    *reportError           `json:"error,omitempty"`
}

type nodeReport struct {
	Changed bool           `json:"changed"`
	Failed  bool           `json:"failed"`
	Pools   []poolReport   `json:"pools,omitempty"`
	Volumes []volumeReport `json:"volumes"`
}

// poolAction is what a `flashcache node` subcommand does to the file's pools: before the volumes
// (a build, which carved volumes need) or after them (a teardown, which needs them gone).
type poolAction struct {
	afterVolumes bool
	act          func(context.Context, *engine.Engine, engine.Pool, *poolReport) error
}

// errVolumesFailed makes the command exit non-zero after the report was printed.
var errVolumesFailed = errors.New("one or more volumes failed")

func newNodeCommand() *cobra.Command {
	opts := &nodeOptions{}
	node := &cobra.Command{
		Use:   "node",
		Short: "Plan, apply, flush and tear down volumes on this host, without Kubernetes",
		Long: `Works on the FlashCacheVolumes of a file (the same YAML as kubectl apply), on this host,
as root. The file is checked with the CRD's own schema and rules before any disk is touched.
'flashcache node tools' checks that the host has the commands the engine runs.`,
	}
	f := node.PersistentFlags()
	f.StringVarP(&opts.output, "output", "o", "text", "output: text or json")
	f.BoolVarP(&opts.verbose, "verbose", "v", false, "log every command run")

	var timeout time.Duration
	var pass, background, wait, confirm bool
	flush := &cobra.Command{
		Use:   "flush",
		Short: "Write all dirty data to the backing device and hold the volume in writethrough",
		Long: `Blocking flush: switches to writethrough, unthrottles writeback and waits until bcache
reports the volume clean, printing progress. The volume stays in writethrough (held) until
'flashcache node release'. With --pass: flush if dirty, then go back to the configured mode (a
held volume stays held); the boot unit's stop runs it. With --background: a flush pass in
writeback mode, as flushPeriod starts one: writeback at full speed until clean while writes still
land on the SSD; 'flashcache node run' (or --wait) carries it on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if background && pass {
				return fmt.Errorf("--background and --pass: choose one")
			}
			if wait && !background {
				return fmt.Errorf("--wait goes with --background (a blocking flush always waits)")
			}
			return runNode(cmd, opts, func(ctx context.Context, e *engine.Engine, v engine.Volume, r *volumeReport) error {
				var res *engine.FlushResult
				var err error
				if background {
					return backgroundFlush(ctx, cmd, e, v, r, wait, timeout)
				}
				if pass {
					res, err = e.FlushPass(ctx, v, timeout)
				} else {
					// Progress goes to stderr whatever the output format: the Ansible role's drain
					// prints it from there while the JSON report waits for the end on stdout.
					res, err = e.Flush(ctx, v, timeout, func(p engine.FlushProgress) {
						fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s dirty, %s, %.1f MiB/s, about %s left\n", v.Name,
							mib(p.DirtyBytes), p.State, p.BytesPerSecond/(1<<20), p.ETA.Round(time.Second))
					})
				}
				r.Flush = res
				r.Changed = res != nil && res.FlushedBytes > 0
				return err
			})
		},
	}
	flush.Flags().DurationVar(&timeout, "timeout", time.Hour, "give up (and stay in writethrough) after this long")
	flush.Flags().BoolVar(&pass, "pass", false, "flush then restore the configured mode")
	flush.Flags().BoolVar(&background, "background", false, "start a flush pass in writeback mode and return")
	flush.Flags().BoolVar(&wait, "wait", false, "with --background: wait until the pass is done, printing progress")

	teardown := &cobra.Command{
		Use:   "teardown",
		Short: "Flush, detach and remove a volume, erasing its bcache signatures (its data becomes unreachable)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !confirm {
				return fmt.Errorf("teardown erases the volume's bcache signatures and its data becomes unreachable: pass --confirm")
			}
			return runNodeWithPools(cmd, opts, func(ctx context.Context, e *engine.Engine, v engine.Volume, r *volumeReport) error {
				res, err := e.Teardown(ctx, v, timeout)
				r.Teardown = res
				r.Changed = res != nil && res.Changed
				return err
			}, &poolAction{afterVolumes: true, act: func(ctx context.Context, e *engine.Engine, p engine.Pool, r *poolReport) error {
				res, err := e.TeardownPool(ctx, p)
				r.Teardown = res
				r.Changed = res != nil && res.Changed
				return err
			}})
		},
	}
	teardown.Flags().BoolVar(&confirm, "confirm", false, "confirm that the volume is to be destroyed")
	teardown.Flags().DurationVar(&timeout, "flush-timeout", time.Hour, "how long the final flush may take")

	check := volumeCommand(opts, "check", "Judge both devices' durability and the cache's wear (writes only to scratch regions)",
		func(ctx context.Context, e *engine.Engine, v engine.Volume, r *volumeReport) error {
			rep, err := e.Check(ctx, v)
			r.Check = rep
			return err
		})
	check.Long = `Reads the kernel's and the device's view of each write cache, times small synchronous
writes on a scratch region of each device (between the partition table and the cache partition on
the SSD, between the bcache superblock and the data on the backing disk; never user data, never
the spare area), reads SMART wear, and gives a verdict per device and for the volume.`

	node.AddCommand(
		poolAndVolumeCommand(opts, "plan", "Print the steps apply would take, changing nothing",
			func(ctx context.Context, e *engine.Engine, v engine.Volume, r *volumeReport) error {
				steps, err := e.PlanOnly(ctx, v, engine.Desired{})
				r.Steps, r.Changed = steps, len(steps) > 0
				return err
			}, func(ctx context.Context, e *engine.Engine, p engine.Pool, r *poolReport) error {
				steps, err := e.PlanPoolOnly(ctx, p)
				r.Steps, r.Changed = steps, len(steps) > 0
				return err
			}),
		poolAndVolumeCommand(opts, "apply", "Build or adopt the pools and volumes and set their tunables",
			func(ctx context.Context, e *engine.Engine, v engine.Volume, r *volumeReport) error {
				res, err := e.Apply(ctx, v, engine.Desired{})
				r.fromResult(res)
				return err
			}, func(ctx context.Context, e *engine.Engine, p engine.Pool, r *poolReport) error {
				res, err := e.ApplyPool(ctx, p)
				r.Changed, r.Steps, r.Status = res.Changed, res.Steps, &res.Status
				return err
			}),
		poolAndVolumeCommand(opts, "status", "Report the pools and volumes as the kernel sees them",
			func(ctx context.Context, e *engine.Engine, v engine.Volume, r *volumeReport) error {
				s, err := e.Status(ctx, v)
				r.Status = s
				return err
			}, func(ctx context.Context, e *engine.Engine, p engine.Pool, r *poolReport) error {
				s, err := e.PoolStatus(ctx, p)
				r.Status = s
				return err
			}),
		flush,
		volumeCommand(opts, "release", "End a flush's hold and restore the configured mode",
			func(ctx context.Context, e *engine.Engine, v engine.Volume, r *volumeReport) error {
				res, err := e.Release(ctx, v)
				r.fromResult(res)
				return err
			}),
		teardown,
		check,
		newNodeRunCommand(opts),
	)
	// Every subcommand but tools acts on the volumes of a file.
	for _, sub := range node.Commands() {
		f := sub.Flags()
		f.StringVarP(&opts.config, "config", "c", "", "FlashCacheVolume file (YAML, several documents allowed; - for stdin)")
		f.StringVar(&opts.volume, "volume", "", "act on this volume of the file only")
		f.StringVar(&opts.holdDir, "hold-dir", engine.DefaultHoldDir, "where holds of flushed volumes are recorded")
		f.StringVar(&opts.stateDir, "state-dir", engine.DefaultStateDir, "where each volume's schedule (flush passes) is kept")
		_ = sub.MarkFlagRequired("config")
	}
	node.AddCommand(newToolsCommand(opts))
	return node
}

// backgroundFlushPoll is how often `flush --background --wait` converges the volume.
const backgroundFlushPoll = 2 * time.Second

// backgroundFlush starts a flush pass in writeback mode; with wait it drives the pass itself
// until it is done, printing progress to stderr.
func backgroundFlush(ctx context.Context, cmd *cobra.Command, e *engine.Engine, v engine.Volume, r *volumeReport, wait bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	want := engine.Desired{FlushRequest: "flashcache node flush --background at " + time.Now().UTC().Format(time.RFC3339Nano)}
	for {
		res, pass, err := e.Converge(ctx, v, want, time.Now())
		r.fromResult(res)
		r.Pass = pass
		if err != nil {
			return err
		}
		if pass.Started {
			r.Changed = true
		}
		if !wait || !pass.Active {
			return nil
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: flush pass (%s) %s in, %s dirty\n", v.Name, pass.Reason, pass.Elapsed.Round(time.Second), mib(res.Status.DirtyBytes))
		want.FlushRequest = ""
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the flush pass: %w", ctx.Err())
		case <-time.After(backgroundFlushPoll):
		}
	}
}

// volumeCommand is a `flashcache node` subcommand that acts on each volume of the file.
func volumeCommand(opts *nodeOptions, use, short string, act func(context.Context, *engine.Engine, engine.Volume, *volumeReport) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runNode(cmd, opts, act) },
	}
}

// poolAndVolumeCommand is volumeCommand for a subcommand that acts on the file's pools too,
// before its volumes.
func poolAndVolumeCommand(opts *nodeOptions, use, short string, act func(context.Context, *engine.Engine, engine.Volume, *volumeReport) error,
	poolAct func(context.Context, *engine.Engine, engine.Pool, *poolReport) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runNodeWithPools(cmd, opts, act, &poolAction{act: poolAct})
		},
	}
}

// fromResult copies what apply or release did into the report.
func (r *volumeReport) fromResult(res *engine.Result) {
	if res != nil {
		r.Changed, r.Steps, r.Warnings, r.Status, r.Check = res.Changed, res.Steps, res.Warnings, res.Status, res.Check
	}
}

// runNode loads the volume file and runs act for each volume, printing one report.
func runNode(cmd *cobra.Command, opts *nodeOptions, act func(context.Context, *engine.Engine, engine.Volume, *volumeReport) error) error {
	return runNodeWithPools(cmd, opts, act, nil)
}

// runNodeWithPools is runNode that also runs pools' act for the file's pools (with --volume, for
// that volume's pool only, and only before the volume: one volume's teardown leaves its pool).
func runNodeWithPools(cmd *cobra.Command, opts *nodeOptions, act func(context.Context, *engine.Engine, engine.Volume, *volumeReport) error, pools *poolAction) error {
	if opts.output != "text" && opts.output != "json" {
		return fmt.Errorf("--output: unknown format %q (want text or json)", opts.output)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	file, err := volumefile.Load(ctx, opts.config)
	if err != nil {
		return fmt.Errorf("--config %s: %w", opts.config, err)
	}
	log := newNodeLogger(cmd, opts)
	e := &engine.Engine{Run: blockdev.Runner{Log: log}, Log: log, HoldDir: opts.holdDir, StateDir: opts.stateDir}
	report := nodeReport{Volumes: []volumeReport{}}
	var selected []engine.Volume
	for _, v := range file.Volumes {
		if opts.volume == "" || v.Name == opts.volume {
			selected = append(selected, v)
		}
	}
	if opts.volume != "" && len(selected) == 0 {
		return fmt.Errorf("--volume: no volume %q in %s", opts.volume, opts.config)
	}
	runPools := func() {
		for _, p := range file.Pools {
			if opts.volume != "" && (pools.afterVolumes || selected[0].Spec.Pool == nil || selected[0].Spec.Pool.Name != p.Name) {
				continue
			}
			r := poolReport{Name: p.Name}
			if err := lockedPoolAct(ctx, e, p, &r, pools.act); err != nil {
				r.Error, _ = errorReport(err)
				report.Failed = true
			}
			report.Changed = report.Changed || r.Changed
			report.Pools = append(report.Pools, r)
		}
	}
	if pools != nil && !pools.afterVolumes {
		runPools()
	}
	for _, v := range selected {
		r := volumeReport{Name: v.Name}
		if err := lockedAct(ctx, e, v, &r, act); err != nil {
			var status *engine.Status
			r.Error, status = errorReport(err)
			if r.Status == nil {
				r.Status = status
			}
			report.Failed = true
		}
		report.Changed = report.Changed || r.Changed
		report.Volumes = append(report.Volumes, r)
	}
	if pools != nil && pools.afterVolumes && !report.Failed {
		// A pool goes only once every volume of the file is gone.
		runPools()
	}
	if err := printReport(cmd.OutOrStdout(), opts.output, report); err != nil {
		return err
	}
	if report.Failed {
		return errVolumesFailed
	}
	return nil
}

// errorReport is an engine error as a report gives it: its reason (none for a plain failure)
// and field, and the volume's status when the error let it be observed.
func errorReport(err error) (*reportError, *engine.Status) {
	class := engine.Classify(err)
	r := &reportError{Message: err.Error(), Field: class.Field}
	if class.Reason != fcv1.ReasonApplyFailed {
		r.Reason = class.Reason
	}
	return r, class.Status
}

func printReport(w io.Writer, output string, report nodeReport) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	for _, r := range report.Pools {
		fmt.Fprintf(w, "pool %s: changed=%v\n", r.Name, r.Changed)
		for _, s := range r.Steps {
			fmt.Fprintf(w, "  - %s\n", s)
		}
		if s := r.Status; s != nil && s.VolumeGroup != "" {
			fmt.Fprintf(w, "  cache set %s (%s), volume group %s: %s of %s free, %d volumes\n",
				s.CacheSetUUID, mib(s.CacheCapacityBytes), s.VolumeGroup, mib(s.AllocatableBytes), mib(s.CapacityBytes), s.Volumes)
		}
		if t := r.Teardown; t != nil {
			for _, s := range t.Steps {
				fmt.Fprintf(w, "  - %s\n", s)
			}
		}
		if r.Error != nil {
			fmt.Fprintf(w, "  error: %s\n", r.Error.Message)
		}
	}
	for _, r := range report.Volumes {
		fmt.Fprintf(w, "%s: changed=%v\n", r.Name, r.Changed)
		for _, s := range r.Steps {
			fmt.Fprintf(w, "  - %s\n", s)
		}
		for _, warn := range r.Warnings {
			fmt.Fprintf(w, "  warning: %s\n", warn)
		}
		if s := r.Status; s != nil && s.Device != "" {
			fmt.Fprintf(w, "  %s (%s): %s, %s, %s dirty, %s\n", s.StablePath, s.Device, s.CacheMode, s.State, mib(s.DirtyBytes), mib(s.CapacityBytes))
		}
		if f := r.Flush; f != nil {
			fmt.Fprintf(w, "  flushed %s in %s (%.1f MiB/s), held=%v\n", mib(f.FlushedBytes), f.Duration.Round(time.Millisecond), f.BytesPerSecond/(1<<20), f.Held)
		}
		if p := r.Pass; p != nil && (p.Active || p.Ended) {
			fmt.Fprintf(w, "  flush pass (%s): started %s, %s dirty then, active=%v\n", p.Reason, p.StartedAt.Format(time.RFC3339), mib(p.DirtyAtStart), p.Active)
		}
		if r.Pass != nil && !r.Pass.Active && !r.Pass.Ended {
			fmt.Fprintf(w, "  nothing to flush: the volume is clean or not in writeback\n")
		}
		if t := r.Teardown; t != nil {
			for _, s := range t.Steps {
				fmt.Fprintf(w, "  - %s\n", s)
			}
		}
		if c := r.Check; c != nil {
			fmt.Fprintf(w, "  durability: %s, worn=%v, writeback allowed=%v (policy %s)\n", c.Verdict, c.Worn, c.WritebackAllowed, c.Policy)
			for _, d := range c.Devices {
				id := ""
				if d.HardwareID != "" {
					id = " (" + d.HardwareID + ")"
				}
				fmt.Fprintf(w, "    %s %s%s: %s\n", d.Role, d.Device, id, d.Verdict)
				for _, reason := range d.Reasons {
					fmt.Fprintf(w, "      - %s\n", reason)
				}
			}
		}
		if r.Error != nil {
			fmt.Fprintf(w, "  error: %s\n", r.Error.Message)
		}
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// lockWait is how long a node command waits for another run (the agent, the boot unit) to be
// done with the same disks.
const lockWait = 2 * time.Minute

func lockedPoolAct(ctx context.Context, e *engine.Engine, p engine.Pool, r *poolReport, act func(context.Context, *engine.Engine, engine.Pool, *poolReport) error) error {
	unlock, err := engine.LockPool(ctx, p, lockWait)
	if err != nil {
		return err
	}
	defer unlock()
	return act(ctx, e, p, r)
}

func lockedAct(ctx context.Context, e *engine.Engine, v engine.Volume, r *volumeReport, act func(context.Context, *engine.Engine, engine.Volume, *volumeReport) error) error {
	unlock, err := engine.Lock(ctx, v, lockWait)
	if err != nil {
		return err
	}
	defer unlock()
	return act(ctx, e, v, r)
}
