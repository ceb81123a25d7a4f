package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one control-plane component besides etcd and kube-apiserver (which envtest runs).
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited

	mu  sync.Mutex
	err error // how it exited, once done is closed
}

func (c *Cluster) openLog(name string) (*os.File, error) {
	path := filepath.Join(c.Dir, name+".log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s log: %w", name, err)
	}
	return f, nil
}

// run starts the binary name of the assets folder with args, its output in <Dir>/<name>.log.
func (c *Cluster) run(name string, args ...string) error {
	logFile, err := c.openLog(name)
	if err != nil {
		return err
	}
	bin := filepath.Join(c.Assets, name)
	fmt.Fprintf(logFile, "--- %s %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Nothing may outlive a test binary that dies (timeout, panic, ^C); SIGKILL because a
	// process that got no answer from a stopped API server may not finish a graceful exit.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, logPath: logFile.Name(), cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	c.logf("%s started (pid %d)", name, cmd.Process.Pid)
	return nil
}

func (c *Cluster) proc(name string) *process {
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	// Only the cluster's own code asks, for the components it started.
	panic("cluster: no process " + name)
}

// exitErr is nil while the process runs, and says how it ended (with its log's tail) after.
func (p *process) exitErr() error {
	select {
	case <-p.done:
	default:
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("%s exited (%v); end of %s:\n%s", p.name, p.err, p.logPath, logTail(p.logPath, 2000))
}

// stop sends SIGTERM and, if the process has not exited after grace, SIGKILL.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("%s ignored SIGTERM for %s and was killed", p.name, grace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit 10 s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// logTail is the end of a log, at most n bytes, starting at a line; "" if there is none.
func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ""
		}
		return err.Error()
	}
	defer f.Close()
	cut := false
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
		cut = true
	}
	b, _ := io.ReadAll(f)
	if cut {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}
