package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
)

func TestLockKeepsTwoRunsOffTheSameDisk(t *testing.T) {
	old := LockDir
	LockDir = t.TempDir()
	defer func() { LockDir = old }()
	a := Volume{Name: "a", Spec: fcv1.FlashCacheVolumeSpec{
		CacheDevice:   &fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-a"},
		BackingDevice: &fcv1.BackingDeviceSpec{Path: "/dev/disk/by-id/hdd-shared"}}}
	b := Volume{Name: "b", Spec: fcv1.FlashCacheVolumeSpec{
		CacheDevice:   &fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-b"},
		BackingDevice: &fcv1.BackingDeviceSpec{Path: "/dev/disk/by-id/hdd-shared"}}}
	c := Volume{Name: "c", Spec: fcv1.FlashCacheVolumeSpec{
		CacheDevice:   &fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-c"},
		BackingDevice: &fcv1.BackingDeviceSpec{Path: "/dev/disk/by-id/hdd-c"}}}
	ctx := context.Background()
	unlockA, err := Lock(ctx, a, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(ctx, b, 200*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Fatalf("b shares a's backing disk: got %v, want ErrBusy", err)
	}
	unlockC, err := Lock(ctx, c, time.Second)
	if err != nil {
		t.Fatalf("c shares nothing with a: %v", err)
	}
	unlockC()
	unlockA()
	unlockB, err := Lock(ctx, b, time.Second)
	if err != nil {
		t.Fatalf("after a released its disks: %v", err)
	}
	unlockB()
}

func TestACarvedVolumeIsRefusedBeforeAnyDeviceIsRead(t *testing.T) {
	old := LockDir
	LockDir = t.TempDir()
	defer func() { LockDir = old }()
	v := Volume{Name: "carved", Spec: fcv1.FlashCacheVolumeSpec{Pool: &fcv1.PoolVolumeSource{Name: "pool-a"}}}
	_, err := Lock(context.Background(), v, time.Second)
	var refusal *Refusal
	if !errors.As(err, &refusal) || refusal.Field != "pool" || refusal.Reason != fcv1.ReasonPoolVolumesUnsupported {
		t.Fatalf("got %v, want a refusal naming the pool field", err)
	}
	if c := Classify(err); c.Field != "pool" || c.Retry != RetryRarely {
		t.Errorf("classified as %+v, want field pool, retried rarely", c)
	}
}
