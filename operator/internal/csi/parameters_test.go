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
		got, err := requestedBytes(&csi.CapacityRange{RequiredBytes: c.required, LimitBytes: c.limit})
		if status.Code(err) != c.code || got != c.want {
			t.Errorf("required %d limit %d: %d %v, want %d %s", c.required, c.limit, got, err, c.want, c.code)
		}
	}
}

func TestVolumeNamesAreTheProvisionersDNSLabels(t *testing.T) {
	if n, err := volumeName("pvc-0b5a1c3e-6f7d-4e2a-9b8c-1d2e3f4a5b6c"); err != nil || n != "pvc-0b5a1c3e-6f7d-4e2a-9b8c-1d2e3f4a5b6c" {
		t.Errorf("%q %v", n, err)
	}
	for _, bad := range []string{"", "PVC-1", "pvc_1", strings.Repeat("a", 64)} {
		if _, err := volumeName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
