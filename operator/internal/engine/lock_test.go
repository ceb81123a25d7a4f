package engine

import (
	"context"
	"errors"
	"strings"
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

func TestCarvedVolumesShareTheirPoolAndKeepItsBuildOut(t *testing.T) {
	old := LockDir
	LockDir = t.TempDir()
	defer func() { LockDir = old }()
	pool := Pool{Name: "db", Spec: fcv1.FlashCachePoolSpec{CacheDevice: fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-p"},
		BackingDevices: []fcv1.PoolBackingDevice{{Path: "/dev/disk/by-id/hdd-p1"}}}}
	carved := func(name string) Volume {
		return Volume{Name: name, Pool: &pool, Spec: fcv1.FlashCacheVolumeSpec{Pool: &fcv1.PoolVolumeSource{Name: "db"}}}
	}
	ctx := context.Background()
	unlockA, err := Lock(ctx, carved("a"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	unlockB, err := Lock(ctx, carved("b"), time.Second)
	if err != nil {
		t.Fatalf("two volumes of one pool: %v", err)
	}
	if _, err := Lock(ctx, carved("a"), 200*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Errorf("the same carved volume twice: got %v, want ErrBusy", err)
	}
	if _, err := LockPool(ctx, pool, 200*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Errorf("the pool while its volumes run: got %v, want ErrBusy", err)
	}
	unlockLook, err := LockPoolToLook(ctx, pool, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("a look at the pool while its volumes run: %v", err)
	}
	unlockC, err := Lock(ctx, carved("c"), 200*time.Millisecond)
	if err != nil {
		t.Fatalf("a carved volume while the pool is looked at: %v", err)
	}
	unlockC()
	if _, err := LockPool(ctx, pool, 200*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Errorf("the pool's build while it is looked at: got %v, want ErrBusy", err)
	}
	unlockLook()
	unlockA()
	unlockB()
	unlockPool, err := LockPool(ctx, pool, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(ctx, carved("a"), 200*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Errorf("a carved volume while its pool is built: got %v, want ErrBusy", err)
	}
	if _, err := LockPoolToLook(ctx, pool, 200*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Errorf("a look at the pool while it is built: got %v, want ErrBusy", err)
	}
	unlockPool()
	if _, err := Lock(ctx, Volume{Name: "lost", Spec: fcv1.FlashCacheVolumeSpec{Pool: &fcv1.PoolVolumeSource{Name: "db"}}}, time.Second); err == nil ||
		!strings.Contains(err.Error(), "pool.name") {
		t.Errorf("a carved volume without its pool: %v", err)
	}
}
