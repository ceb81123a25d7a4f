package vmharness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// crashCheckInterval is how often a running command's console is read for a kernel crash.
const crashCheckInterval = 2 * time.Second

// Run runs cmd through root's shell in the guest. A command that runs and fails is not an
// error: its status is in exitCode. err is for everything else (no connection, ctx done, the
// connection dropped before a status arrived, the guest's kernel crashed while it ran), and
// exitCode is then -1.
func (vm *VM) Run(ctx context.Context, cmd string) (stdout, stderr string, exitCode int, err error) {
	var out, errOut bytes.Buffer
	code, err := vm.run(ctx, cmd, nil, &out, &errOut)
	return out.String(), errOut.String(), code, err
}

// Output runs cmd and returns its stdout; a non-zero exit is an error carrying stderr and
// stdout (a command such as `flashcache node apply` says on stdout why a volume failed).
func (vm *VM) Output(ctx context.Context, cmd string) (string, error) {
	stdout, stderr, code, err := vm.Run(ctx, cmd)
	if err != nil {
		return stdout, err
	}
	if code != 0 {
		msg := strings.TrimSpace(stderr)
		if out := strings.TrimSpace(stdout); out != "" {
			msg += "\nstdout:\n" + out
		}
		return stdout, fmt.Errorf("vmharness: %q exited %d: %s", cmd, code, msg)
	}
	return stdout, nil
}

// CopyFile copies a host file into the guest. It writes a temporary file and renames it, so
// replacing a binary that is running works and a reader never sees half a file.
func (vm *VM) CopyFile(ctx context.Context, localPath, remotePath string, mode os.FileMode) error {
	f, err := os.Open(localPath)
	if err != nil {
		return fmt.Errorf("vmharness: copy: %w", err)
	}
	defer f.Close()
	tmp := remotePath + ".vmharness-tmp"
	cmd := fmt.Sprintf("cat >%s && chmod %04o %s && mv -f %s %s",
		ShellQuote(tmp), mode.Perm(), ShellQuote(tmp), ShellQuote(tmp), ShellQuote(remotePath))
	var errOut bytes.Buffer
	code, err := vm.run(ctx, cmd, f, io.Discard, &errOut)
	if err != nil {
		return fmt.Errorf("vmharness: copy %s to %s: %w", localPath, remotePath, err)
	}
	if code != 0 {
		return fmt.Errorf("vmharness: copy %s to %s: exit %d: %s", localPath, remotePath, code, strings.TrimSpace(errOut.String()))
	}
	return nil
}

// sshClient is the connection to the running guest.
func (vm *VM) sshClient() (*ssh.Client, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.client == nil {
		return nil, errors.New("vmharness: not connected (the VM is stopped)")
	}
	return vm.client, nil
}

func (vm *VM) run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	client, err := vm.sshClient()
	if err != nil {
		return -1, err
	}
	session, err := client.NewSession()
	if err != nil {
		return -1, fmt.Errorf("vmharness: new ssh session: %w", err)
	}
	defer session.Close()
	session.Stdin, session.Stdout, session.Stderr = stdin, stdout, stderr
	// A command that waits on a thread the guest's kernel lost to a crash waits for good: the
	// console says so at once, and the command ends with that line instead of at its deadline.
	// Read from before the start, so that a crash the command causes at once is not missed.
	consoleAt := fileSize(vm.console)
	if err := session.Start(cmd); err != nil {
		return -1, fmt.Errorf("vmharness: start %q: %w", cmd, err)
	}
	done := make(chan error, 1)
	go func() { done <- session.Wait() }()
	// stop kills a command that will not end by itself, and says why.
	stop := func(why error) (int, error) {
		_ = session.Signal(ssh.SIGKILL)
		session.Close()
		return -1, fmt.Errorf("vmharness: %q: %w", cmd, why)
	}
	crashCheck := time.NewTicker(crashCheckInterval)
	defer crashCheck.Stop()
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-ctx.Done():
			return stop(ctx.Err())
		case <-crashCheck.C:
			if line := crashIn(consoleSince(vm.console, consoleAt)); line != "" {
				return stop(fmt.Errorf("the guest's kernel crashed while it ran: %s", line))
			}
		}
	}
	var exitErr *ssh.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exitErr):
		return exitErr.ExitStatus(), nil
	default:
		return -1, fmt.Errorf("vmharness: %q: %w", cmd, err)
	}
}

// WriteFile writes data to a file in the guest, as CopyFile does for a host file.
func (vm *VM) WriteFile(ctx context.Context, remotePath string, data []byte, mode os.FileMode) error {
	tmp := remotePath + ".vmharness-tmp"
	cmd := fmt.Sprintf("mkdir -p %s && cat >%s && chmod %04o %s && mv -f %s %s", ShellQuote(path.Dir(remotePath)),
		ShellQuote(tmp), mode.Perm(), ShellQuote(tmp), ShellQuote(tmp), ShellQuote(remotePath))
	var errOut bytes.Buffer
	code, err := vm.run(ctx, cmd, bytes.NewReader(data), io.Discard, &errOut)
	if err != nil {
		return fmt.Errorf("vmharness: write %s: %w", remotePath, err)
	}
	if code != 0 {
		return fmt.Errorf("vmharness: write %s: exit %d: %s", remotePath, code, strings.TrimSpace(errOut.String()))
	}
	return nil
}

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Stream runs cmd like Run but hands its output to stdout as it comes, for commands whose
// progress must be seen even if the guest dies mid-way (a power cut).
func (vm *VM) Stream(ctx context.Context, cmd string, stdout io.Writer) (int, error) {
	var errOut bytes.Buffer
	code, err := vm.run(ctx, cmd, nil, stdout, &errOut)
	if err == nil && code != 0 {
		err = fmt.Errorf("vmharness: %q exited %d: %s", cmd, code, strings.TrimSpace(errOut.String()))
	}
	return code, err
}

// DialUnix connects to a unix socket in the guest through the SSH connection (OpenSSH's
// streamlocal forwarding), as a client on the host would reach a server that listens only
// inside the guest, such as the agent's CSI node socket.
func (vm *VM) DialUnix(ctx context.Context, path string) (net.Conn, error) {
	client, err := vm.sshClient()
	if err != nil {
		return nil, err
	}
	conn, err := client.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("vmharness: connecting to %s in the guest: %w", path, err)
	}
	return conn, nil
}
