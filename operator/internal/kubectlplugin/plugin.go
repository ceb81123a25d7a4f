// Package kubectlplugin is `kubectl flashcache`: what an on-call person asks of the cluster's
// cached volumes, answered from their status, the agents' heartbeats and the eviction webhook's
// own rule, so that the plugin and a drain never disagree.
package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/heartbeat"
	"github.com/flashcache/flashcache/operator/internal/units"
	"github.com/flashcache/flashcache/operator/internal/webhook"
)

// DefaultAgentNamespace is where the chart's documentation installs flashcache.
const DefaultAgentNamespace = "flashcache-system"

type options struct {
	kubeconfig, context, agentNamespace string
	out                                 io.Writer
	now                                 func() time.Time
}

// NewCommand is the plugin's root command (kubectl runs kubectl-flashcache as `kubectl flashcache`).
func NewCommand() *cobra.Command {
	opts := &options{now: time.Now}
	root := &cobra.Command{
		Use:          "kubectl-flashcache",
		Short:        "Cached volumes (FlashCacheVolumes) as an on-call person needs them: status, flushes, what a drain waits for",
		SilenceUsage: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			opts.out = cmd.OutOrStdout()
		},
	}
	root.PersistentFlags().StringVar(&opts.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	root.PersistentFlags().StringVar(&opts.context, "context", "", "kubeconfig context to use")
	root.PersistentFlags().StringVar(&opts.agentNamespace, "agent-namespace", DefaultAgentNamespace,
		"namespace where flashcache's agents renew their heartbeat Leases (the chart's release namespace)")
	root.AddCommand(statusCommand(opts), flushCommand(opts), drainStatusCommand(opts))
	return root
}

func (o *options) client() (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(fcv1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	return c, nil
}

// volumes lists the FlashCacheVolumes, of one node when node is set, by name.
func volumes(ctx context.Context, c client.Reader, node string) ([]fcv1.FlashCacheVolume, error) {
	var list fcv1.FlashCacheVolumeList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing FlashCacheVolumes: %w", err)
	}
	var out []fcv1.FlashCacheVolume
	for _, v := range list.Items {
		if node == "" || v.Spec.NodeName == node {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func statusCommand(opts *options) *cobra.Command {
	return &cobra.Command{
		Use:   "status [NODE]",
		Short: "Every volume (of NODE): phase, cache mode, dirty data and its age, the safety verdict and the devices it is for, wear",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := opts.client()
			if err != nil {
				return err
			}
			node := ""
			if len(args) == 1 {
				node = args[0]
			}
			list, err := volumes(cmd.Context(), c, node)
			if err != nil {
				return err
			}
			if len(list) == 0 {
				_, err := fmt.Fprintln(opts.out, "no FlashCacheVolumes"+map[bool]string{true: " on " + node, false: ""}[node != ""])
				return err
			}
			w := tabwriter.NewWriter(opts.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tNODE\tPHASE\tMODE\tDIRTY\tDIRTY FOR\tVERDICT\tCHECKED DEVICES\tWEAR")
			for i := range list {
				v := &list[i]
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Spec.NodeName, orDash(string(v.Status.Phase)),
					mode(v), dirty(v), dirtyFor(v, opts.now()), verdict(v), checkedDevices(v), wear(v))
			}
			return w.Flush()
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// mode is the device's cache mode, and the spec's when the two differ (a hold, a safety
// downgrade, a volume not built yet).
func mode(v *fcv1.FlashCacheVolume) string {
	want := string(v.Spec.EffectiveMode())
	if v.Status.Device == nil || v.Status.Device.CacheMode == "" {
		return "- (spec " + want + ")"
	}
	if got := string(v.Status.Device.CacheMode); got != want {
		return got + " (spec " + want + ")"
	}
	return want
}

func dirty(v *fcv1.FlashCacheVolume) string {
	if v.Status.DirtyData == nil {
		return "-"
	}
	return units.Bytes(v.Status.DirtyData.Value())
}

// dirtyFor is how long the volume has not been seen clean: a bound on the age of its oldest
// dirty data, against its flush period.
func dirtyFor(v *fcv1.FlashCacheVolume, now time.Time) string {
	if v.Status.DirtyData != nil && v.Status.DirtyData.IsZero() {
		return "clean"
	}
	if v.Status.DirtySince == nil {
		return "-"
	}
	age := now.Sub(v.Status.DirtySince.Time).Round(time.Second)
	s := age.String()
	if p := v.Spec.EffectiveFlushPeriod(); p > 0 {
		s += " of " + p.String()
		if age > p {
			s += " (OVER)"
		}
	}
	return s
}

func verdict(v *fcv1.FlashCacheVolume) string {
	if v.Status.Safety == nil || v.Status.Safety.Verdict == "" {
		return "-"
	}
	s := string(v.Status.Safety.Verdict)
	if c := meta.FindStatusCondition(v.Status.Conditions, fcv1.ConditionSafetyChecked); c != nil && c.Reason == fcv1.ReasonWritethroughEnforced {
		s += " (writethrough enforced)"
	}
	return s
}

func checkedDevices(v *fcv1.FlashCacheVolume) string {
	if v.Status.Safety == nil || len(v.Status.Safety.Devices) == 0 {
		return "-"
	}
	var parts []string
	for _, d := range v.Status.Safety.Devices {
		p := d.Role + "=" + d.Device
		if d.HardwareID != "" {
			p += "(" + d.HardwareID + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ",")
}

func wear(v *fcv1.FlashCacheVolume) string {
	if v.Status.CacheWearPercent == nil {
		return "-"
	}
	return fmt.Sprintf("%d%% of %d%%", *v.Status.CacheWearPercent, v.Spec.Safety.EffectiveMaxWearPercent())
}

func flushCommand(opts *options) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "flush NAME",
		Short: "Ask for a flush pass now: dirty data written back at full speed while the volume stays in writeback",
		Long: "Ask the node agent for a flush pass now (the flashcache.io/background-flush annotation): the dirty data is written\n" +
			"back at full speed while the volume stays in writeback, so the database keeps its speed. With --wait, print\n" +
			"the progress until the pass is done. A drain's blocking flush, which holds the volume in writethrough, is\n" +
			"`kubectl drain` itself.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := opts.client()
			if err != nil {
				return err
			}
			return opts.flush(cmd.Context(), c, args[0], wait, timeout)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the pass is done, printing its progress")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "with --wait: give up waiting after this long (the pass goes on)")
	return cmd
}

// flushPoll is how often --wait reads the volume: the agent reports a pass for at least one of
// its refreshes (10 s), so a pass is seen however short.
const flushPoll = time.Second

func (o *options) flush(ctx context.Context, c client.Client, name string, wait bool, timeout time.Duration) error {
	var v fcv1.FlashCacheVolume
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &v); err != nil {
		return fmt.Errorf("reading FlashCacheVolume %s: %w", name, err)
	}
	request := o.now().UTC().Format(time.RFC3339Nano)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, fcv1.AnnotationBackgroundFlush, request)
	if err := c.Patch(ctx, &v, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("asking %s for a flush pass: %w", name, err)
	}
	fmt.Fprintf(o.out, "%s: flush pass asked for (%s=%s), %s dirty\n", name, fcv1.AnnotationBackgroundFlush, request, dirty(&v))
	if silence := o.agentSilence(ctx, c, v.Spec.NodeName); silence != "" {
		fmt.Fprintf(o.out, "%s: %s; the pass starts when it is back\n", name, silence)
	}
	if !wait {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	seenPass, last := false, ""
	for {
		if err := c.Get(ctx, types.NamespacedName{Name: name}, &v); err != nil {
			return fmt.Errorf("reading FlashCacheVolume %s: %w", name, err)
		}
		pass := meta.FindStatusCondition(v.Status.Conditions, fcv1.ConditionFlushing)
		passing := pass != nil && pass.Status == metav1.ConditionTrue && pass.Reason == fcv1.ReasonFlushPass
		clean := v.Status.DirtyData != nil && v.Status.DirtyData.IsZero()
		if passing {
			seenPass = true
			if line := dirty(&v); line != last {
				fmt.Fprintf(o.out, "%s: %s dirty, pass under way\n", name, line)
				last = line
			}
		}
		// Done when the pass was seen and is over, or when there was nothing to pass over (a
		// clean volume takes the request without a pass).
		if (seenPass && !passing) || (!seenPass && clean) {
			fmt.Fprintf(o.out, "%s: pass done, %s dirty, cache mode %s\n", name, dirty(&v), mode(&v))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no end of the flush pass within %s (%s dirty); it goes on in the node's kernel", name, timeout, dirty(&v))
		case <-time.After(flushPoll):
		}
	}
}

// agentSilence is "" while the node's agent heartbeats, and why it cannot be counted on if not.
func (o *options) agentSilence(ctx context.Context, c client.Reader, node string) string {
	if node == "" || o.agentNamespace == "" {
		return ""
	}
	silence, err := heartbeat.Silence(ctx, c, o.agentNamespace, node, o.now())
	if err != nil {
		return "its agent's heartbeat could not be read: " + err.Error()
	}
	return silence
}

func drainStatusCommand(opts *options) *cobra.Command {
	return &cobra.Command{
		Use:   "drain-status NODE",
		Short: "What an eviction on NODE waits for: each cached volume, the pods that use it, and the way out",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := opts.client()
			if err != nil {
				return err
			}
			return opts.drainStatus(cmd.Context(), c, args[0])
		},
	}
}

func (o *options) drainStatus(ctx context.Context, c client.Client, node string) error {
	var n corev1.Node
	if err := c.Get(ctx, types.NamespacedName{Name: node}, &n); err != nil {
		return fmt.Errorf("reading node %s: %w", node, err)
	}
	list, err := volumes(ctx, c, node)
	if err != nil {
		return err
	}
	cordon := "schedulable"
	if n.Spec.Unschedulable {
		cordon = "cordoned"
	}
	agent := "alive"
	if silence := o.agentSilence(ctx, c, node); silence != "" {
		agent = silence + ": nothing flushes this node's volumes while it is down"
	}
	fmt.Fprintf(o.out, "node %s: %s; agent: %s\n", node, cordon, agent)
	if len(list) == 0 {
		fmt.Fprintf(o.out, "no FlashCacheVolumes on %s: evictions do not wait for flashcache\n", node)
		return nil
	}

	// Which pods on the node use which volume, by the webhook's own path (pod, claim,
	// PersistentVolume, volume).
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return fmt.Errorf("listing the pods on %s: %w", node, err)
	}
	gate := &webhook.EvictionGate{Reader: c}
	users := map[string][]string{}
	for _, p := range pods.Items {
		used, err := gate.VolumesOf(ctx, p.Namespace, p.Name)
		if err != nil {
			return err
		}
		for _, v := range used {
			users[v.Name] = append(users[v.Name], p.Namespace+"/"+p.Name)
		}
	}

	w := tabwriter.NewWriter(o.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "VOLUME\tPODS\tEVICTION\tWHY")
	var waiting []string
	for i := range list {
		v := &list[i]
		ok, why := webhook.Evictable(v)
		eviction := "passes"
		switch {
		case !ok:
			eviction = "waits"
			waiting = append(waiting, v.Name)
		case v.Annotations[fcv1.AnnotationEvictWithoutFlush] == "true":
			why = fcv1.AnnotationEvictWithoutFlush + "=true: evictions pass without the flush, dirty or not"
		default:
			why = "nothing on the cache alone (clean and held in writethrough, or not writeback)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", v.Name, orDash(strings.Join(users[v.Name], ",")), eviction, why)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(waiting) > 0 {
		fmt.Fprintf(o.out, "\nAn eviction of these volumes' pods waits until the agent has flushed them and holds them in writethrough "+
			"(kubectl drain retries and prints the progress). To evict without the flush, losing what only the SSD holds:\n")
		for _, name := range waiting {
			fmt.Fprintf(o.out, "  kubectl annotate flashcachevolume %s %s=true\n", name, fcv1.AnnotationEvictWithoutFlush)
		}
		fmt.Fprintln(o.out, "and remove the annotation afterwards (docs/runbooks/agent-down.md).")
	}
	return nil
}

// Main runs the plugin and returns its exit code.
func Main() int {
	if err := NewCommand().Execute(); err != nil {
		return 1
	}
	return 0
}
