package csi

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParametersBecomeTheSpecsTunables(t *testing.T) {
	spec, err := specFromParameters(map[string]string{
		"mode": "writethrough", "dirtyThresholdPercent": "10", "sequentialCutoff": "8Mi", "cacheSequentialUntilFull": "false",
		"safety.policy": "Warn", "safety.maxWearPercent": "80", paramClaimName: "data-0", "csi.storage.k8s.io/fstype": "xfs",
	})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Mode != "writethrough" || *spec.DirtyThresholdPercent != 10 || spec.SequentialCutoff.String() != "8Mi" ||
		spec.CacheSequentialUntilFull == nil || *spec.CacheSequentialUntilFull || spec.Safety.Policy != "Warn" || *spec.Safety.MaxWearPercent != 80 {
		t.Errorf("spec %+v", spec)
	}
	if spec.NodeName != "" || spec.Pool != nil || spec.CacheDevice != nil {
		t.Errorf("parameters set the driver's fields: %+v", spec)
	}
	for _, bad := range []map[string]string{{"nodeName": "n1"}, {"pool.name": "p"}, {"safety.wipe": "true"}, {"Mode": "writeback"}} {
		if _, err := specFromParameters(bad); err == nil || !strings.Contains(err.Error(), "is not one flashcache takes") {
			t.Errorf("%v: %v, want refused by name", bad, err)
		}
	}
	if _, err := specFromParameters(map[string]string{"flushPeriod": "300"}); err == nil {
		t.Errorf("flushPeriod 300 (no unit) accepted")
	}
}

func TestRequestedBytesRoundUpToTheExtent(t *testing.T) {
	for _, c := range []struct {
		required, limit, want int64
		code                  codes.Code
	}{
		{0, 0, 1 << 30, codes.OK},
		{0, 256 << 20, 256 << 20, codes.OK},
		{1, 0, 64 << 20, codes.OK},
		{(100 << 20) + 1, 0, 104 << 20, codes.OK},
		{(100 << 20) + 1, 101 << 20, 0, codes.OutOfRange},
	} {
		got, err := requestedBytes(&csi.CapacityRange{RequiredBytes: c.required, LimitBytes: c.limit}, 64<<20)
		if status.Code(err) != c.code || got != c.want {
			t.Errorf("required %d limit %d: %d %v, want %d %s", c.required, c.limit, got, err, c.want, c.code)
		}
	}
}

// A volume is never smaller than its filesystem can be made on: mkfs.xfs refuses a device under
// 300 MiB, and XFS is the default.
func TestTheSmallestVolumeIsOneItsFilesystemFits(t *testing.T) {
	block := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	mount := func(fs string) *csi.VolumeCapability {
		return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}}}
	}
	for _, c := range []struct {
		caps []*csi.VolumeCapability
		want int64
	}{
		{[]*csi.VolumeCapability{block}, 64 << 20},
		{[]*csi.VolumeCapability{mount("ext4")}, 64 << 20},
		{[]*csi.VolumeCapability{mount("xfs")}, 300 << 20},
		{[]*csi.VolumeCapability{mount("")}, 300 << 20},
		{[]*csi.VolumeCapability{block, mount("")}, 300 << 20},
	} {
		if got := smallestFor(c.caps...); got != c.want {
			t.Errorf("%v: %d, want %d", c.caps, got, c.want)
		}
	}
	if _, err := requestedBytes(&csi.CapacityRange{RequiredBytes: 64 << 20, LimitBytes: 128 << 20}, smallestFor(mount("xfs"))); status.Code(err) != codes.OutOfRange || !strings.Contains(err.Error(), "300Mi") {
		t.Errorf("an XFS volume limited to 128 MiB: %v, want OutOfRange naming 300Mi", err)
	}
}

func TestVolumeNamesAreTheProvisionersDNSLabels(t *testing.T) {
	if n, err := volumeName("pvc-0b5a1c3e-6f7d-4e2a-9b8c-1d2e3f4a5b6c"); err != nil || n != "pvc-0b5a1c3e-6f7d-4e2a-9b8c-1d2e3f4a5b6c" {
		t.Errorf("%q %v", n, err)
	}
	if _, err := volumeName(""); err == nil {
		t.Error("an empty name accepted")
	}
	// Any other name becomes a DNS label, the same each time, and different names different ones.
	seen := map[string]string{}
	for _, name := range []string{"PVC-1", "pvc_1", "pvc-1_", strings.Repeat("a", 64), strings.Repeat("a", 65),
		"sanity-controller-create-maxlen-5DB4DB07-AE04157B" + strings.Repeat("a", 79), "___", "Ä"} {
		got, err := volumeName(name)
		if err != nil || len(got) > 63 || !dnsLabel.MatchString(got) {
			t.Errorf("%q: %q %v, want a DNS label", name, got, err)
		}
		if again, _ := volumeName(name); again != got {
			t.Errorf("%q: %q then %q", name, got, again)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q are both %q", name, other, got)
		}
		seen[got] = name
	}
}
