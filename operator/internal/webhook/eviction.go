// Package webhook holds the eviction admission webhook: it keeps a pod that uses a writeback
// FlashCacheVolume from being evicted until the volume's dirty cache is on the backing disk and
// the volume is held in writethrough, answering 429 with the flush's progress meanwhile, so
// that kubectl drain retries and prints it.
package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/heartbeat"
	"github.com/flashcache/flashcache/operator/internal/units"
)

// Path is where the webhook server serves the eviction check.
const Path = "/validate-eviction"

// EvictionGate answers admission requests for pods/eviction.
type EvictionGate struct {
	// Reader must be the manager's cache: a pod without our volumes is admitted without a
	// round trip to the API server.
	Reader client.Reader
	// Writer records the flush request on the volume.
	Writer   client.Writer
	Recorder events.EventRecorder
	Now      func() time.Time
	// Agents reads the node agents' Leases (heartbeat) in AgentNamespace, uncached: a held
	// eviction whose agent is silent says so, and how to proceed. Nil or empty: not checked.
	Agents         client.Reader
	AgentNamespace string
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch

// Handle admits or holds back one eviction.
func (g *EvictionGate) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.SubResource != "eviction" || req.Resource.Resource != "pods" {
		return admission.Allowed("not an eviction")
	}
	log := logf.FromContext(ctx).WithValues("pod", req.Namespace+"/"+req.Name)
	volumes, err := g.VolumesOf(ctx, req.Namespace, req.Name)
	if err != nil {
		// The failure policy decides what an error means; say why in any case.
		return admission.Errored(http.StatusInternalServerError, err)
	}
	var waiting []string
	for _, fcv := range volumes {
		ok, why := Evictable(fcv)
		if ok {
			if fcv.Annotations[fcv1.AnnotationEvictWithoutFlush] == "true" && needsFlush(fcv) {
				g.Recorder.Eventf(fcv, nil, corev1.EventTypeWarning, "EvictedWithoutFlush", "Evict",
					"pod %s/%s evicted without waiting for the flush (%s=true)", req.Namespace, req.Name, fcv1.AnnotationEvictWithoutFlush)
			}
			continue
		}
		waiting = append(waiting, why+g.agentSilence(ctx, fcv))
		if req.DryRun != nil && *req.DryRun {
			continue
		}
		if err := g.requestFlush(ctx, fcv); err != nil {
			log.Error(err, "recording the flush request", "volume", fcv.Name)
		}
	}
	if len(waiting) == 0 {
		return admission.Allowed("")
	}
	log.Info("eviction held back until the cache is clean", "waiting", waiting)
	return admission.Response{AdmissionResponse: admissionResponse(strings.Join(waiting, "; "))}
}

// agentSilence is what a held eviction adds when the volume's node agent is not heartbeating:
// the flush cannot start without it, so the drain would wait for good. It names the way on.
func (g *EvictionGate) agentSilence(ctx context.Context, fcv *fcv1.FlashCacheVolume) string {
	if g.Agents == nil || g.AgentNamespace == "" {
		return ""
	}
	silent, err := heartbeat.Silence(ctx, g.Agents, g.AgentNamespace, fcv.Spec.NodeName, g.now())
	if err != nil {
		logf.FromContext(ctx).Error(err, "reading the node agent's heartbeat", "node", fcv.Spec.NodeName)
		return ""
	}
	if silent == "" {
		return ""
	}
	return fmt.Sprintf(" (%s: nothing flushes while it is down; its pod: kubectl -n %s get pods -l app.kubernetes.io/component=agent --field-selector spec.nodeName=%s. "+
		"To evict without the flush, losing what only the SSD holds: kubectl annotate flashcachevolume %s %s=true; see docs/runbooks/agent-down.md)",
		silent, g.AgentNamespace, fcv.Spec.NodeName, fcv.Name, fcv1.AnnotationEvictWithoutFlush)
}

// VolumesOf follows pod -> claims -> PersistentVolumes -> FlashCacheVolumes through Reader: the
// volumes whose flush an eviction of the pod waits for.
func (g *EvictionGate) VolumesOf(ctx context.Context, namespace, name string) ([]*fcv1.FlashCacheVolume, error) {
	var pod corev1.Pod
	if err := g.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &pod); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, nil // the API server answers 404 itself
		}
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	var out []*fcv1.FlashCacheVolume
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil {
			continue
		}
		var pvc corev1.PersistentVolumeClaim
		if err := g.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: vol.PersistentVolumeClaim.ClaimName}, &pvc); err != nil {
			if client.IgnoreNotFound(err) == nil {
				continue
			}
			return nil, fmt.Errorf("reading claim %s/%s: %w", namespace, vol.PersistentVolumeClaim.ClaimName, err)
		}
		if pvc.Spec.VolumeName == "" {
			continue
		}
		if fcv, err := g.claimedVolume(ctx, &pvc); err != nil {
			return nil, err
		} else if fcv != nil {
			out = append(out, fcv)
			continue
		}
		// The cache holds only PersistentVolumes labelled as ours: any other is not found.
		var pv corev1.PersistentVolume
		if err := g.Reader.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, &pv); err != nil {
			if client.IgnoreNotFound(err) == nil {
				continue
			}
			return nil, fmt.Errorf("reading PersistentVolume %s: %w", pvc.Spec.VolumeName, err)
		}
		fcvName := pv.Labels[fcv1.LabelVolume]
		if fcvName == "" {
			continue
		}
		var fcv fcv1.FlashCacheVolume
		if err := g.Reader.Get(ctx, types.NamespacedName{Name: fcvName}, &fcv); err != nil {
			if client.IgnoreNotFound(err) == nil {
				continue
			}
			return nil, fmt.Errorf("reading FlashCacheVolume %s: %w", fcvName, err)
		}
		if uid := pv.Annotations[fcv1.AnnotationVolumeUID]; uid != "" && uid != string(fcv.UID) {
			continue
		}
		out = append(out, &fcv)
	}
	return out, nil
}

// claimedVolume is the volume the CSI driver carved for a claim, if the claim is bound to one:
// the provisioner names the PersistentVolume as the driver named the volume, and the volume
// records its claim.
func (g *EvictionGate) claimedVolume(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*fcv1.FlashCacheVolume, error) {
	var fcv fcv1.FlashCacheVolume
	if err := g.Reader.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, &fcv); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("reading FlashCacheVolume %s: %w", pvc.Spec.VolumeName, err)
	}
	if fcv.Annotations[fcv1.AnnotationProvisionedBy] != fcv1.CSIDriverName {
		return nil, nil
	}
	if claim := fcv.Annotations[fcv1.AnnotationClaim]; claim != "" && claim != pvc.Namespace+"/"+pvc.Name {
		return nil, nil
	}
	return &fcv, nil
}

// needsFlush: a writeback volume, or one whose device still runs in writeback, may hold data
// that is on the cache device only.
func needsFlush(fcv *fcv1.FlashCacheVolume) bool {
	if fcv.Spec.EffectiveMode() == fcv1.CacheModeWriteback {
		return true
	}
	if d := fcv.Status.Device; d != nil && d.CacheMode == fcv1.CacheModeWriteback {
		return true
	}
	return fcv.Status.DirtyData != nil && !fcv.Status.DirtyData.IsZero()
}

// Evictable says whether a pod using the volume may be evicted now, and if not, what it waits
// for, in words kubectl drain prints.
func Evictable(fcv *fcv1.FlashCacheVolume) (bool, string) {
	if fcv.Annotations[fcv1.AnnotationEvictWithoutFlush] == "true" || !needsFlush(fcv) {
		return true, ""
	}
	if fcv.Status.Device == nil {
		// Nothing was ever built, so nothing can be dirty.
		return true, ""
	}
	flushing := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionFlushing)
	dirty := fcv.Status.DirtyData == nil || !fcv.Status.DirtyData.IsZero()
	if flushing != nil && flushing.Status == metav1.ConditionTrue && flushing.Reason == fcv1.ReasonHeldClean &&
		!dirty && fcv.Status.Device.CacheMode != fcv1.CacheModeWriteback {
		return true, ""
	}
	prefix := fmt.Sprintf("flashcache volume %s on %s", fcv.Name, fcv.Spec.NodeName)
	switch {
	case flushing != nil && flushing.Status == metav1.ConditionTrue:
		return false, fmt.Sprintf("%s: %s", prefix, flushing.Message)
	case fcv.Status.DirtyData != nil:
		return false, fmt.Sprintf("%s: waiting for the node agent to flush %s and hold writethrough", prefix, units.Bytes(fcv.Status.DirtyData.Value()))
	}
	return false, fmt.Sprintf("%s: waiting for the node agent to flush and hold writethrough", prefix)
}

// requestFlush stamps the volume so its agent flushes and holds it; each retry of the eviction
// refreshes the stamp, so the hold lasts while the drain does.
func (g *EvictionGate) requestFlush(ctx context.Context, fcv *fcv1.FlashCacheVolume) error {
	now := g.now().UTC().Format(time.RFC3339)
	if fcv.Annotations[fcv1.AnnotationFlushRequested] == now {
		return nil
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fcv1.AnnotationFlushRequested, now))
	if err := g.Writer.Patch(ctx, fcv, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("annotating %s: %w", fcv.Name, err)
	}
	return nil
}

func (g *EvictionGate) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// admissionResponse refuses with 429 Too Many Requests: kubectl drain and the eviction API's
// other clients treat it as "retry later" and print the message each time.
func admissionResponse(message string) admissionv1.AdmissionResponse {
	return admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests, Message: message}}
}

// SlimPod is the cache transform for Pods: the gate needs a pod's claims and nothing else, and
// on a large cluster the rest of every pod spec is most of the operator's memory.
func SlimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion}}
	slim.Spec.NodeName = pod.Spec.NodeName
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			slim.Spec.Volumes = append(slim.Spec.Volumes, corev1.Volume{Name: v.Name,
				VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		}
	}
	return slim, nil
}
