package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// LockDir holds one lock file per device path. flock works across processes (the agent, a
// `flashcache node` run by hand, the boot unit) and, because each Lock opens its own file, across
// goroutines of one process too.
var LockDir = "/run/flashcache/locks"

// ErrBusy says another engine run holds one of the volume's devices.
var ErrBusy = errors.New("another flashcache run is using the volume's devices")

// Unlock releases what Lock took.
type Unlock func()

// Lock takes the volume's devices (cache and backing, by the paths the spec names) for one engine
// run, so that two runs never act on the same disks at once, even for two volumes that name the
// same disk by mistake. It waits up to wait, then returns ErrBusy.
func Lock(ctx context.Context, v Volume, wait time.Duration) (Unlock, error) {
	if v.Carved() {
		// A carved volume shares its pool's disks with the pool's other volumes: it takes them
		// shared, which keeps a pool's build or teardown out, and its own logical volume alone.
		if v.Pool == nil {
			return nil, fmt.Errorf("pool.name: volume %s is carved from pool %s, which the engine was not given", v.Name, v.Spec.Pool.Name)
		}
		return lockPaths(ctx, []string{"logical volume " + v.Pool.VolumeGroup() + "/" + v.LogicalVolume()}, poolPaths(*v.Pool), wait)
	}
	paths := []string{v.Spec.CacheDevice.Path}
	if p := v.Spec.BackingDevice.Path; p != "" {
		paths = append(paths, p)
	}
	if v.Spec.BackingISCSI() != nil {
		paths = append(paths, iscsiLockKey(v))
	}
	return lockPaths(ctx, paths, nil, wait)
}

// LockPool takes a pool's devices for one engine run, as Lock does a volume's: alone, so that
// none of its volumes runs meanwhile.
func LockPool(ctx context.Context, p Pool, wait time.Duration) (Unlock, error) {
	return lockPaths(ctx, poolPaths(p), nil, wait)
}

// LockPoolToLook takes a pool's devices shared, as its carved volumes do: enough to read the
// pool without a build or teardown changing it underfoot, and not enough to change it. The
// pool's status follows every volume built or removed; taken alone for that, the pool would
// stop its volumes converging side by side.
func LockPoolToLook(ctx context.Context, p Pool, wait time.Duration) (Unlock, error) {
	return lockPaths(ctx, nil, poolPaths(p), wait)
}

func poolPaths(p Pool) []string {
	paths := []string{p.Spec.CacheDevice.Path}
	for _, d := range p.Spec.BackingDevices {
		paths = append(paths, d.Path)
	}
	return paths
}

// probeLockWait bounds how long a durability probe waits for the probes of other volumes on the
// same disks: each takes a few seconds (safety.DefaultProbeLimits, taken again near the bar), and
// a StatefulSet scaled up builds its volumes on one pool side by side.
const probeLockWait = 5 * time.Minute

// lockDisksToProbe takes whole disks alone for a durability probe. Carved volumes converge side
// by side on their pool's disks, and two probes on one disk would time each other: one's flush
// can write the other's block, or wait behind the other's flush, and a verdict stays for the boot.
func lockDisksToProbe(ctx context.Context, disks []string) (Unlock, error) {
	keys := make([]string, len(disks))
	for i, d := range disks {
		keys[i] = "durability probe of disk " + d
	}
	return lockPaths(ctx, keys, nil, probeLockWait)
}

// lockPaths takes every path's lock, exclusive ones alone and shared ones with other shared
// holders, or none.
func lockPaths(ctx context.Context, exclusive, shared []string, wait time.Duration) (Unlock, error) {
	type lock struct {
		path string
		how  int
	}
	var locks []lock
	for _, p := range exclusive {
		locks = append(locks, lock{p, unix.LOCK_EX})
	}
	for _, p := range shared {
		locks = append(locks, lock{p, unix.LOCK_SH})
	}
	for i, l := range locks {
		// One disk may go by several names; the resolved one is what must be exclusive.
		if real, err := filepath.EvalSymlinks(l.path); err == nil {
			locks[i].path = real
		}
	}
	// A fixed order, so that two runs taking overlapping sets cannot deadlock.
	sort.Slice(locks, func(i, j int) bool { return locks[i].path < locks[j].path })
	if err := os.MkdirAll(LockDir, 0o755); err != nil {
		return nil, fmt.Errorf("lock folder: %w", err)
	}
	var held []*os.File
	release := func() {
		for _, f := range held {
			_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
			_ = f.Close()
		}
	}
	deadline := time.Now().Add(wait)
	for _, l := range locks {
		p := l.path
		sum := sha256.Sum256([]byte(p))
		f, err := os.OpenFile(filepath.Join(LockDir, hex.EncodeToString(sum[:8])), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			release()
			return nil, fmt.Errorf("lock for %s: %w", p, err)
		}
		held = append(held, f)
		for {
			err := unix.Flock(int(f.Fd()), l.how|unix.LOCK_NB)
			if err == nil {
				break
			}
			if !errors.Is(err, unix.EWOULDBLOCK) {
				release()
				return nil, fmt.Errorf("locking %s: %w", p, err)
			}
			if time.Now().After(deadline) {
				release()
				return nil, fmt.Errorf("%w: %s", ErrBusy, p)
			}
			select {
			case <-ctx.Done():
				release()
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return release, nil
}
