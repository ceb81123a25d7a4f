package vmharness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DiskCache is what a disk's write cache does with data the guest has not flushed, and with
// flushes. Only HDDs have a choice; see Disk.Cache.
type DiskCache int

const (
	// CacheNone: QEMU hands every write to the backing file (the host's page cache) before it
	// completes, so a power cut (Kill) loses nothing the guest saw completed, flushed or not.
	CacheNone DiskCache = iota
	// CacheVolatileHonest: writes land in a volatile cache and a power cut loses whatever the
	// guest had not flushed. A flush (or FUA write) writes the cached blocks to the backing file
	// and costs what a 7200 rpm disk's does: VolatileFlushDelay per dirty VolatileBlockSize
	// block, so about 8 ms after a small write and about 125 MiB/s for a large one. On an NVMe
	// disk it costs what programming flash does: VolatileSSDFlushDelay per block.
	CacheVolatileHonest
	// CacheVolatileLying: like CacheVolatileHonest, but flushes and FUA are acknowledged at once
	// without writing anything. A power cut loses every write since the cache was last written
	// back: by a clean Shutdown (the disk writes its cache before powering off, as real ones do
	// on STANDBY) or by VM.WriteBackDiskCaches (a disk destaging in the background).
	CacheVolatileLying
)

func (c DiskCache) String() string {
	switch c {
	case CacheNone:
		return "none"
	case CacheVolatileHonest:
		return "volatile-honest"
	case CacheVolatileLying:
		return "volatile-lying"
	}
	return "DiskCache(" + strconv.Itoa(int(c)) + ")"
}

func (c DiskCache) volatile() bool { return c == CacheVolatileHonest || c == CacheVolatileLying }

// The honest cache's cost model. nbdkit 1.32's delay filter cannot delay a flush, so the delay
// sits under the cache, on each block the cache writes back: a flush after one small write pays
// one delay (about one revolution at 7200 rpm: rotational latency plus a short seek), and a
// flush of a long sequential run writes 1 MiB per delay. A flush holds the cache's lock, so
// other I/O waits for it, as it waits behind a real disk's cache flush.
// An SSD's flush programs its cached pages into flash: VolatileSSDFlushDelay is about what a
// consumer NVMe drive's flush after a small write takes, and 1 MiB per delay is about its
// sequential write speed.
const (
	VolatileBlockSize     = 1 << 20
	VolatileFlushDelay    = 8 * time.Millisecond
	VolatileSSDFlushDelay = time.Millisecond
)

// nbdServer is one nbdkit process serving on a Unix socket in the work dir.
type nbdServer struct {
	name    string // for messages: "fc-hdd0 cache"
	args    []string
	env     []string
	sock    string
	pidFile string
	log     string

	proc   *os.Process
	exited chan struct{}
}

// volatileDisk is the nbdkit side of one disk with a volatile cache. cache holds the volatile
// write cache (nbdkit's cache filter in writeback mode over the backing file) and is where the
// harness writes the cache back from; for a lying disk, QEMU talks to front, which swallows
// flushes and FUA and forwards everything else to cache. One nbdkit cannot do both: its filters
// apply to every connection, and the harness needs a connection whose flushes are honoured.
type volatileDisk struct {
	disk  Disk
	cache *nbdServer
	front *nbdServer // lying disks only
	// failFile, for a faulty disk, makes nbdkit fail every request while it exists.
	failFile string
}

// guestSocket is the socket QEMU connects to.
func (v *volatileDisk) guestSocket() string {
	if v.front != nil {
		return v.front.sock
	}
	return v.cache.sock
}

func (v *volatileDisk) servers() []*nbdServer {
	if v.front != nil {
		return []*nbdServer{v.cache, v.front}
	}
	return []*nbdServer{v.cache}
}

// maxSocketPath is sun_path's size on Linux minus the terminating NUL.
const maxSocketPath = 107

// newVolatileDisk plans the nbdkit processes for d (already through prepareDisks).
func newVolatileDisk(d Disk, workDir string) (*volatileDisk, error) {
	server := func(role string) (*nbdServer, error) {
		base := filepath.Join(workDir, "nbd-"+d.Serial+"-"+role)
		s := &nbdServer{
			name:    d.Serial + " " + role,
			sock:    base + ".sock",
			pidFile: base + ".pid",
			log:     base + ".log",
		}
		if len(s.sock) > maxSocketPath {
			return nil, fmt.Errorf("disk %s: socket path %s is longer than %d bytes; use a shorter work dir", d.Serial, s.sock, maxSocketPath)
		}
		return s, nil
	}
	v := &volatileDisk{disk: d}
	var err error
	if v.cache, err = server("cache"); err != nil {
		return nil, err
	}
	if d.Faulty {
		// Not a cache: one server, with the error filter in front of the file.
		v.failFile = filepath.Join(workDir, "nbd-"+d.Serial+".fail")
		v.cache.args = faultyServerArgs(v.cache.sock, v.cache.pidFile, d.Path, v.failFile)
		return v, nil
	}
	delay := VolatileFlushDelay
	if d.Kind == NVMe {
		delay = VolatileSSDFlushDelay
	}
	v.cache.args = cacheServerArgs(v.cache.sock, v.cache.pidFile, d.Path, delay)
	// The cache filter keeps its (unlinked) cache file in TMPDIR; the work dir has the room a
	// disk's worth of blocks may need, /tmp may not.
	v.cache.env = []string{"TMPDIR=" + workDir}
	if d.Cache == CacheVolatileLying {
		if v.front, err = server("liar"); err != nil {
			return nil, err
		}
		v.front.args = liarServerArgs(v.front.sock, v.front.pidFile, v.cache.sock)
	}
	return v, nil
}

// cacheServerArgs: filters are listed outermost (nearest the client) first.
//   - cache=writeback: writes stay in nbdkit's cache file until a flush or a FUA write, which
//     write every dirty block to the plugin. The cache file is unlinked, so killing nbdkit
//     loses them. No cache-max-size: in 1.32 reclaiming punches holes in the cache file
//     without writing dirty blocks back, which would lose data without any power cut.
//   - delay-write: the cost of each block written back (VolatileFlushDelay for a rotating disk,
//     VolatileSSDFlushDelay for an SSD).
//   - fua fuamode=discard under the cache: the backing file's host page cache already survives
//     a power cut of the emulated machine, so the host's fdatasync adds nothing but noise (from
//     under a millisecond to tens of milliseconds on a busy host) to the modelled latency.
func cacheServerArgs(sock, pidFile, backing string, delay time.Duration) []string {
	return []string{
		"--foreground", "--unix", sock, "--pidfile", pidFile,
		"--filter=cache", "--filter=delay", "--filter=fua",
		"file", "file=" + backing,
		"cache=writeback", "cache-min-block-size=" + strconv.Itoa(VolatileBlockSize),
		"delay-write=" + strconv.FormatInt(delay.Milliseconds(), 10) + "ms",
		"fuamode=discard",
	}
}

// faultyServerArgs: the error filter fails every request with EIO while failFile exists.
func faultyServerArgs(sock, pidFile, backing, failFile string) []string {
	return []string{
		"--foreground", "--unix", sock, "--pidfile", pidFile,
		"--filter=error", "file", "file=" + backing,
		"error=EIO", "error-rate=100%", "error-file=" + failFile,
	}
}

// liarServerArgs: the fua filter in discard mode acknowledges flushes and drops the FUA flag;
// the nbd plugin forwards everything else to the cache server.
func liarServerArgs(sock, pidFile, cacheSock string) []string {
	return []string{
		"--foreground", "--unix", sock, "--pidfile", pidFile,
		"--filter=fua", "nbd", "socket=" + cacheSock, "fuamode=discard",
	}
}

func (s *nbdServer) running() bool {
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// start runs nbdkit and waits until it accepts connections (it writes its pid file then).
func (s *nbdServer) start(ctx context.Context) error {
	for _, f := range []string{s.sock, s.pidFile} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	logFile, err := os.OpenFile(s.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "--- %s nbdkit %s\n", time.Now().Format(time.RFC3339), strings.Join(s.args, " "))
	cmd := exec.Command("nbdkit", s.args...)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Like QEMU: a test binary that dies must not leave nbdkit running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start nbdkit for %s: %w", s.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	s.proc, s.exited = cmd.Process, exited

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(s.pidFile); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("nbdkit for %s exited at start; %s ends with:\n%s", s.name, s.log, tail(s.log, 1500))
		case <-ctx.Done():
			s.signal(syscall.SIGKILL)
			return fmt.Errorf("nbdkit for %s not ready: %w; %s ends with:\n%s", s.name, ctx.Err(), s.log, tail(s.log, 1500))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// signal sends sig and waits for the exit; SIGTERM that does not work within 30 s is followed
// by SIGKILL.
func (s *nbdServer) signal(sig syscall.Signal) {
	if !s.running() {
		return
	}
	_ = s.proc.Signal(sig)
	select {
	case <-s.exited:
		return
	case <-time.After(30 * time.Second):
	}
	if sig != syscall.SIGKILL {
		s.signal(syscall.SIGKILL)
	}
}

// volatileSet is every volatile disk of a VM.
type volatileSet struct {
	mu    sync.Mutex
	disks []*volatileDisk
}

func newVolatileSet(disks []Disk, workDir string) (*volatileSet, error) {
	vs := &volatileSet{}
	for _, d := range disks {
		if !d.Cache.volatile() && !d.Faulty {
			continue
		}
		v, err := newVolatileDisk(d, workDir)
		if err != nil {
			return nil, err
		}
		vs.disks = append(vs.disks, v)
	}
	if len(vs.disks) > 0 {
		if _, err := exec.LookPath("nbdkit"); err != nil {
			return nil, fmt.Errorf("volatile disks need nbdkit (run hack/install-vm-deps.sh): %w", err)
		}
	}
	return vs, nil
}

// sockets maps each volatile disk's serial to the socket QEMU connects to.
func (vs *volatileSet) sockets() map[string]string {
	m := map[string]string{}
	for _, v := range vs.disks {
		m[v.disk.Serial] = v.guestSocket()
	}
	return m
}

// powerOn starts whichever servers are not running (all after a Kill or Shutdown; none on a
// reboot, where the disks stay powered and keep their caches). The cache server starts before
// the liar's front, which connects to it.
func (vs *volatileSet) powerOn(ctx context.Context) error {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for _, v := range vs.disks {
		for _, s := range v.servers() {
			if s.running() {
				continue
			}
			if err := s.start(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// powerCut kills every server with SIGKILL: the caches, and what they held, are gone. Clients
// die before servers (the liar's front before its cache), so that none logs a lost connection.
func (vs *volatileSet) powerCut() {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for _, v := range vs.disks {
		if v.front != nil {
			v.front.signal(syscall.SIGKILL)
		}
		v.cache.signal(syscall.SIGKILL)
	}
}

// powerOff writes every cache back (as a disk does before it spins down), then stops the
// servers with SIGTERM. A failed write-back is reported, and the servers are stopped anyway.
func (vs *volatileSet) powerOff(ctx context.Context) error {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	var errs []error
	for _, v := range vs.disks {
		if v.cache.running() {
			if err := v.cache.writeBack(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		// The front first: it holds a connection to the cache server.
		if v.front != nil {
			v.front.signal(syscall.SIGTERM)
		}
		v.cache.signal(syscall.SIGTERM)
	}
	return errors.Join(errs...)
}

// stop stops the servers with SIGTERM without writing anything back: what is still cached is
// lost, as in a power cut.
func (vs *volatileSet) stop() {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for _, v := range vs.disks {
		if v.front != nil {
			v.front.signal(syscall.SIGTERM)
		}
		v.cache.signal(syscall.SIGTERM)
	}
}

func (vs *volatileSet) writeBack(ctx context.Context) error {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	var errs []error
	for _, v := range vs.disks {
		if !v.cache.running() {
			errs = append(errs, fmt.Errorf("disk %s: its nbdkit is not running", v.disk.Serial))
			continue
		}
		if err := v.cache.writeBack(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeBack sends a flush to the cache server over a connection of its own: the cache filter
// then writes every dirty block, whichever connection wrote it, to the backing file.
func (s *nbdServer) writeBack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	err := func() error {
		c, err := dialNBD(ctx, s.sock)
		if err != nil {
			return err
		}
		return errors.Join(c.flush(ctx), c.close())
	}()
	if err != nil {
		return fmt.Errorf("write back the cache of %s after %s: %w; %s ends with:\n%s",
			s.name, time.Since(start).Round(time.Millisecond), err, s.log, tail(s.log, 1500))
	}
	return nil
}

// diagnostics is the end of each server's log.
func (vs *volatileSet) diagnostics() string {
	var b strings.Builder
	for _, v := range vs.disks {
		for _, s := range v.servers() {
			fmt.Fprintf(&b, "\n--- nbdkit %s (%s), last lines:\n%s", s.name, s.log, tail(s.log, 1000))
		}
	}
	return b.String()
}
