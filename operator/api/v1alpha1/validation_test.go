//go:build envtest

package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/testenv"
)

var (
	k8s     client.Client
	kubectl *testenv.Kubectl
)

// TestMain starts a bare API server and installs the CRDs the way a user does: kubectl apply -f crds/.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		env, cfg, err := testenv.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = env.Stop() }()
		dir, err := os.MkdirTemp("", "fcv-validation")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = os.RemoveAll(dir) }()
		if kubectl, err = testenv.NewKubectl(env, dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		out, err := kubectl.Run("apply", "-f", testenv.CRDDir())
		if err != nil || !strings.Contains(out, "flashcachevolumes.flashcache.io created") {
			fmt.Fprintf(os.Stderr, "kubectl apply -f crds/ did not create the CRD: %v\n%s", err, out)
			return 1
		}
		if out, err := kubectl.Run("wait", "--for=condition=Established", "--timeout=60s", "crd/flashcachevolumes.flashcache.io", "crd/flashcachepools.flashcache.io"); err != nil {
			fmt.Fprintf(os.Stderr, "CRD not established: %v\n%s", err, out)
			return 1
		}
		scheme := runtime.NewScheme()
		utilruntime.Must(fcv1.AddToScheme(scheme))
		utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
		if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

// minimalVolume is the smallest valid FlashCacheVolume, as a user would write it.
func minimalVolume(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "flashcache.io/v1alpha1",
		"kind":       "FlashCacheVolume",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"nodeName":      "worker-1",
			"cacheDevice":   map[string]any{"path": "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_cache01"},
			"backingDevice": map[string]any{"path": "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_drive-scsi0-0-0-0"},
		},
	}}
}

func set(value any, path ...string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
			panic(err)
		}
	}
}

func remove(path ...string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, path...) }
}

func TestKubectlInstalledCRDIsClusterScopedWithShortNameAndColumns(t *testing.T) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: "flashcachevolumes.flashcache.io"}, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Scope != apiextensionsv1.ClusterScoped {
		t.Errorf("scope = %s, want Cluster", crd.Spec.Scope)
	}
	if got := strings.Join(crd.Spec.Names.ShortNames, ","); got != "fcv" {
		t.Errorf("short names = %s, want fcv", got)
	}
	var columns []string
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		if c.Priority == 0 {
			columns = append(columns, c.Name)
		}
	}
	if got, want := strings.Join(columns, ","), "Node,Mode,Phase,Dirty,Hit Ratio,Age"; got != want {
		t.Errorf("printer columns = %s, want %s", got, want)
	}
	if crd.Spec.Versions[0].Subresources == nil || crd.Spec.Versions[0].Subresources.Status == nil {
		t.Error("no status subresource")
	}
}

func TestKubectlExplainShowsDocumentedFields(t *testing.T) {
	cases := map[string][]string{
		"fcv.spec": {"nodeName", "cacheDevice", "backingDevice", "mode", "dirtyThresholdPercent", "flushPeriod", "flushThrottle",
			"sequentialCutoff", "replacementPolicy", "cacheCongestionBypass", "volume", "safety", "wipe", "deletionPolicy",
			"writeback_percent", "consent"},
		"fcv.spec.cacheDevice":         {"path", "overProvisionPercent", "spare area", "/dev/disk/by-id/"},
		"fcv.spec.backingDevice.iscsi": {"portal", "iqn", "lun", "chapSecretRef", "never logged"},
		"fcv.spec.volume":              {"storageClassName", "createStorageClass", "volumeMode", "fsType", "reclaimPolicy"},
		"fcv.status":                   {"phase", "conditions", "dirtyData", "hitRatioPercent", "persistentVolumeName", "observedGeneration"},
	}
	for field, want := range cases {
		out, err := kubectl.Eventually(30*time.Second, "explain", field)
		if err != nil {
			t.Errorf("kubectl explain %s: %v", field, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("kubectl explain %s lacks %q:\n%s", field, w, out)
			}
		}
	}
}

func TestSamplesApplyCleanlyAndListWithColumns(t *testing.T) {
	samples := filepath.Join(testenv.RepoRoot(), "operator", "config", "samples")
	// The iSCSI sample's CHAP Secret lives in the chart's namespace.
	if out, err := kubectl.Run("create", "namespace", "flashcache-system"); err != nil && !strings.Contains(out+err.Error(), "AlreadyExists") {
		t.Fatal(err)
	}
	out, err := kubectl.Run("apply", "-f", samples)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "created") != 3 {
		t.Errorf("want both volumes and the CHAP Secret created:\n%s", out)
	}
	t.Cleanup(func() { _, _ = kubectl.Run("delete", "-f", samples, "--wait=false") })
	out, err = kubectl.Run("get", "fcv")
	if err != nil {
		t.Fatal(err)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if got := strings.Join(header, " "); got != "NAME NODE MODE PHASE DIRTY HIT RATIO AGE" {
		t.Errorf("kubectl get fcv header = %q", got)
	}
	if !strings.Contains(out, "mysql-data-worker-1") || !strings.Contains(out, "writeback") {
		t.Errorf("kubectl get fcv:\n%s", out)
	}
}

func TestDefaultsAreFilledByTheAPIServer(t *testing.T) {
	ctx := context.Background()
	if err := k8s.Create(ctx, minimalVolume("defaults")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, minimalVolume("defaults")) })
	var got fcv1.FlashCacheVolume
	if err := k8s.Get(ctx, types.NamespacedName{Name: "defaults"}, &got); err != nil {
		t.Fatal(err)
	}
	s := got.Spec
	checks := []struct {
		field     string
		got, want any
	}{
		{"cacheDevice.overProvisionPercent", deref(s.CacheDevice.OverProvisionPercent), fcv1.DefaultOverProvisionPercent},
		{"mode", s.Mode, fcv1.DefaultMode},
		{"dirtyThresholdPercent", deref(s.DirtyThresholdPercent), fcv1.DefaultDirtyThresholdPercent},
		{"flushPeriod", s.FlushPeriod.Duration, fcv1.DefaultFlushPeriod},
		{"flushThrottle", s.FlushThrottle, fcv1.DefaultFlushThrottle},
		{"sequentialCutoff", s.SequentialCutoff.Value(), fcv1.DefaultSequentialCutoffBytes},
		{"cacheSequentialUntilFull", s.CacheSequentialUntilFull != nil && *s.CacheSequentialUntilFull, true},
		{"replacementPolicy", s.ReplacementPolicy, fcv1.DefaultReplacementPolicy},
		{"cacheDevice.bucketSize", s.CacheDevice.BucketSize.Value(), fcv1.DefaultBucketSizeBytes},
		{"backingWritebackThrottling", s.BackingWritebackThrottling, fcv1.DefaultBackingWritebackThrottling},
		{"cacheCongestionBypass", s.CacheCongestionBypass, fcv1.DefaultCacheCongestionBypass},
		{"volume.storageClassName", s.Volume.StorageClassName, "flashcache"},
		{"volume.volumeMode", string(s.Volume.VolumeMode), "Filesystem"},
		{"volume.fsType", s.Volume.FSType, fcv1.FileSystemType("xfs")},
		{"volume.reclaimPolicy", string(s.Volume.ReclaimPolicy), "Retain"},
		{"volume.createStorageClass", s.Volume.CreateStorageClass, false},
		{"safety.policy", s.Safety.Policy, fcv1.DefaultSafetyPolicy},
		{"safety.trustWriteCache", s.Safety.TrustWriteCache, false},
		{"safety.maxWearPercent", deref(s.Safety.MaxWearPercent), fcv1.DefaultMaxWearPercent},
		{"safety.wearCheckInterval", s.Safety.WearCheckInterval.Duration, fcv1.DefaultWearCheckInterval},
		{"deletionPolicy", s.DeletionPolicy, fcv1.DeletionPolicyTeardown},
		{"wipe", s.Wipe == nil, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
}

func deref(p *int32) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestValidVariantsAreAccepted(t *testing.T) {
	cases := map[string][]func(*unstructured.Unstructured){
		"iscsi backing with CHAP": {remove("spec", "backingDevice", "path"), set(map[string]any{
			"portal": "192.0.2.10:3260", "iqn": "iqn.2003-01.org.linux-iscsi.san1:mysql", "lun": int64(3),
			"additionalPortals": []any{"[2001:db8::1]:3260", "san1-b.example.com"},
			"chapSecretRef":     map[string]any{"name": "chap", "namespace": "flashcache-system"},
		}, "spec", "backingDevice", "iscsi")},
		"by-path devices":             {set("/dev/disk/by-path/pci-0000:01:00.0-nvme-1", "spec", "cacheDevice", "path"), set("/dev/disk/by-path/ip-192.0.2.10:3260-iscsi-iqn.2003-01.org.x:y-lun-0", "spec", "backingDevice", "path")},
		"bounds":                      {set(int64(0), "spec", "cacheDevice", "overProvisionPercent"), set(int64(40), "spec", "dirtyThresholdPercent")},
		"flush period off":            {set("0s", "spec", "flushPeriod")},
		"flush period compound":       {set("1h30m", "spec", "flushPeriod")},
		"proportional flush throttle": {set("Proportional", "spec", "flushThrottle")},
		"cutoff zero as integer":      {set(int64(0), "spec", "sequentialCutoff")},
		"smallest bucket, in bytes":   {set(int64(4096), "spec", "cacheDevice", "bucketSize")},
		"largest bucket":              {set("16Mi", "spec", "cacheDevice", "bucketSize")},
		"block volume, writearound":   {set("Block", "spec", "volume", "volumeMode"), set("writearound", "spec", "mode")},
		"wipe consent":                {set(map[string]any{"cacheDevice": true, "backingDevice": true}, "spec", "wipe")},
	}
	ctx := context.Background()
	i := 0
	for name, mutations := range cases {
		i++
		u := minimalVolume(fmt.Sprintf("valid-%d", i))
		for _, m := range mutations {
			m(u)
		}
		if err := k8s.Create(ctx, u); err != nil {
			t.Errorf("%s: rejected: %v", name, err)
			continue
		}
		_ = k8s.Delete(ctx, u)
	}
}

func TestInvalidSpecsAreRejectedNamingTheField(t *testing.T) {
	cases := []struct {
		name     string
		mutate   func(*unstructured.Unstructured)
		field    string // the field the API server's message must name
		contains string // and a word of its explanation
	}{
		{"over-provision above 50", set(int64(51), "spec", "cacheDevice", "overProvisionPercent"), "spec.cacheDevice.overProvisionPercent", "less than or equal to 50"},
		{"over-provision negative", set(int64(-1), "spec", "cacheDevice", "overProvisionPercent"), "spec.cacheDevice.overProvisionPercent", "greater than or equal to 0"},
		{"dirty threshold above 40", set(int64(41), "spec", "dirtyThresholdPercent"), "spec.dirtyThresholdPercent", "less than or equal to 40"},
		{"unknown mode", set("writeabout", "spec", "mode"), "spec.mode", "writeback"},
		{"unknown replacement policy", set("mru", "spec", "replacementPolicy"), "spec.replacementPolicy", "lru"},
		{"unknown writeback throttling", set("on", "spec", "backingWritebackThrottling"), "spec.backingWritebackThrottling", "Kernel"},
		{"unknown congestion bypass", set("Off", "spec", "cacheCongestionBypass"), "spec.cacheCongestionBypass", "Disabled"},
		{"kernel name as cache device", set("/dev/nvme0n1", "spec", "cacheDevice", "path"), "spec.cacheDevice.path", "/dev/disk/by-"},
		{"dot-dot in device path", set("/dev/disk/by-id/../../sda", "spec", "backingDevice", "path"), "spec.backingDevice.path", "/dev/disk/by-"},
		{"by-uuid is not stable for a device we format", set("/dev/disk/by-uuid/1234", "spec", "backingDevice", "path"), "spec.backingDevice.path", "/dev/disk/by-"},
		{"both backing sources", set(map[string]any{"portal": "192.0.2.10", "iqn": "iqn.2003-01.org.x:y", "lun": int64(0)}, "spec", "backingDevice", "iscsi"), "spec.backingDevice", "exactly one"},
		{"no backing source", remove("spec", "backingDevice", "path"), "spec.backingDevice", "exactly one"},
		{"cache and backing are the same disk", set("/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_cache01", "spec", "backingDevice", "path"), "spec.backingDevice.path", "must not be the cache device"},
		{"missing node", remove("spec", "nodeName"), "spec.nodeName", "Required"},
		{"flush period not a duration", set("soon", "spec", "flushPeriod"), "spec.flushPeriod", "duration such as"},
		{"flush period too short", set("5s", "spec", "flushPeriod"), "spec.flushPeriod", "between 10s and 24h"},
		{"flush period too long", set("48h", "spec", "flushPeriod"), "spec.flushPeriod", "between 10s and 24h"},
		{"unknown flush throttle", set("Always", "spec", "flushThrottle"), "spec.flushThrottle", "supported values"},
		{"wear check interval not a duration", set("hourly", "spec", "safety", "wearCheckInterval"), "spec.safety.wearCheckInterval", "duration such as"},
		{"wear check interval too long", set("720h", "spec", "safety", "wearCheckInterval"), "spec.safety.wearCheckInterval", "between 10s and 168h"},
		{"sequential cutoff fractional", set("1.5", "spec", "sequentialCutoff"), "spec.sequentialCutoff", "whole number of bytes"},
		{"sequential cutoff negative", set("-4Mi", "spec", "sequentialCutoff"), "spec.sequentialCutoff", "whole number of bytes"},
		{"sequential cutoff above 1Gi", set("2Gi", "spec", "sequentialCutoff"), "spec.sequentialCutoff", "0 to 1Gi"},
		{"bucket size not a power of two", set("96Ki", "spec", "cacheDevice", "bucketSize"), "spec.cacheDevice.bucketSize", "power of two from 4Ki to 16Mi"},
		{"bucket size below a page", set("2Ki", "spec", "cacheDevice", "bucketSize"), "spec.cacheDevice.bucketSize", "power of two from 4Ki to 16Mi"},
		{"bucket size above what the superblock holds", set("32Mi", "spec", "cacheDevice", "bucketSize"), "spec.cacheDevice.bucketSize", "power of two from 4Ki to 16Mi"},
		{"bucket size fractional", set("0.5", "spec", "cacheDevice", "bucketSize"), "spec.cacheDevice.bucketSize", "power of two from 4Ki to 16Mi"},
		{"iscsi bad iqn", func(u *unstructured.Unstructured) {
			remove("spec", "backingDevice", "path")(u)
			set(map[string]any{"portal": "192.0.2.10", "iqn": "san1-mysql", "lun": int64(0)}, "spec", "backingDevice", "iscsi")(u)
		}, "spec.backingDevice.iscsi.iqn", "should match"},
		{"iscsi lun out of range", func(u *unstructured.Unstructured) {
			remove("spec", "backingDevice", "path")(u)
			set(map[string]any{"portal": "192.0.2.10", "iqn": "iqn.2003-01.org.x:y", "lun": int64(20000)}, "spec", "backingDevice", "iscsi")(u)
		}, "spec.backingDevice.iscsi.lun", "less than or equal to 16383"},
		{"chap secret without a namespace", func(u *unstructured.Unstructured) {
			remove("spec", "backingDevice", "path")(u)
			set(map[string]any{"portal": "192.0.2.10", "iqn": "iqn.2003-01.org.x:y", "lun": int64(0),
				"chapSecretRef": map[string]any{"name": "san1-chap"}}, "spec", "backingDevice", "iscsi")(u)
		}, "spec.backingDevice.iscsi.chapSecretRef", "both name and namespace"},
		{"iscsi portal with a path", func(u *unstructured.Unstructured) {
			remove("spec", "backingDevice", "path")(u)
			set(map[string]any{"portal": "http://192.0.2.10/", "iqn": "iqn.2003-01.org.x:y", "lun": int64(0)}, "spec", "backingDevice", "iscsi")(u)
		}, "spec.backingDevice.iscsi.portal", "should match"},
		{"unknown volume mode", set("Raw", "spec", "volume", "volumeMode"), "spec.volume.volumeMode", "Filesystem"},
		{"unsupported filesystem", set("ntfs", "spec", "volume", "fsType"), "spec.volume.fsType", "xfs"},
		{"recycle reclaim policy", set("Recycle", "spec", "volume", "reclaimPolicy"), "spec.volume.reclaimPolicy", "Retain"},
		{"unknown safety policy", set("Ignore", "spec", "safety", "policy"), "spec.safety.policy", "Enforce"},
		{"wear limit of zero", set(int64(0), "spec", "safety", "maxWearPercent"), "spec.safety.maxWearPercent", "greater than or equal to 1"},
		{"unknown deletion policy", set("Abandon", "spec", "deletionPolicy"), "spec.deletionPolicy", "Orphan"},
		{"name too long for a label", set(strings.Repeat("a", 64), "metadata", "name"), "metadata.name", "DNS label"},
	}
	ctx := context.Background()
	for i, c := range cases {
		u := minimalVolume(fmt.Sprintf("invalid-%d", i))
		c.mutate(u)
		err := k8s.Create(ctx, u)
		if err == nil {
			_ = k8s.Delete(ctx, u)
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: err = %v, want Invalid", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: message does not name %s with %q:\n%v", c.name, c.field, c.contains, err)
		}
	}
}

func TestImmutableFieldsAreRejectedOnUpdate(t *testing.T) {
	ctx := context.Background()
	base := minimalVolume("immutable")
	if err := k8s.Create(ctx, base); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, minimalVolume("immutable")) })

	cases := []struct {
		name   string
		mutate func(*unstructured.Unstructured)
		field  string // empty: the change is allowed
	}{
		{"node", set("worker-2", "spec", "nodeName"), "spec.nodeName"},
		// The one device that may change: a new SSD in place of a lost one.
		{"cache device", set("/dev/disk/by-id/nvme-other", "spec", "cacheDevice", "path"), ""},
		{"over-provisioning", set(int64(30), "spec", "cacheDevice", "overProvisionPercent"), "spec.cacheDevice.overProvisionPercent"},
		{"bucket size", set("64Ki", "spec", "cacheDevice", "bucketSize"), "spec.cacheDevice.bucketSize"},
		{"backing device", set("/dev/disk/by-id/ata-other", "spec", "backingDevice", "path"), "spec.backingDevice"},
		{"backing device to iscsi", func(u *unstructured.Unstructured) {
			remove("spec", "backingDevice", "path")(u)
			set(map[string]any{"portal": "192.0.2.10", "iqn": "iqn.2003-01.org.x:y", "lun": int64(0)}, "spec", "backingDevice", "iscsi")(u)
		}, "spec.backingDevice"},
		{"storage class", set("fast", "spec", "volume", "storageClassName"), "spec.volume.storageClassName"},
		{"volume mode", set("Block", "spec", "volume", "volumeMode"), "spec.volume.volumeMode"},
		{"filesystem", set("ext4", "spec", "volume", "fsType"), "spec.volume.fsType"},
		{"mode", set("writethrough", "spec", "mode"), ""},
		{"dirty threshold", set(int64(20), "spec", "dirtyThresholdPercent"), ""},
		{"flush period", set("30s", "spec", "flushPeriod"), ""},
		{"sequential cutoff", set("0", "spec", "sequentialCutoff"), ""},
		{"replacement policy", set("fifo", "spec", "replacementPolicy"), ""},
		{"writeback throttling", set("Kernel", "spec", "backingWritebackThrottling"), ""},
		{"congestion bypass", set("Kernel", "spec", "cacheCongestionBypass"), ""},
		{"reclaim policy", set("Delete", "spec", "volume", "reclaimPolicy"), ""},
		{"safety policy", set("Warn", "spec", "safety", "policy"), ""},
		{"deletion policy", set("Orphan", "spec", "deletionPolicy"), ""},
	}
	for _, c := range cases {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(base.GroupVersionKind())
		if err := k8s.Get(ctx, types.NamespacedName{Name: "immutable"}, u); err != nil {
			t.Fatal(err)
		}
		c.mutate(u)
		err := k8s.Update(ctx, u)
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: change rejected: %v", c.name, err)
		case c.field == "":
		case err == nil:
			t.Errorf("%s: change accepted, want it rejected as immutable", c.name)
		case !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), "immutable"):
			t.Errorf("%s: err does not name %s as immutable: %v", c.name, c.field, err)
		}
	}
}
