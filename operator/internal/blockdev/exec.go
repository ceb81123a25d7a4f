// Package blockdev is the one place where flashcache touches block devices: every external
// command it runs (blkid, wipefs, blkdiscard, sgdisk, make-bcache, bcache-super-show, ...) and
// every sysfs file it reads or writes goes through this package.
package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/go-logr/logr"
)

// DefaultTimeout bounds one command when the caller's context has no earlier deadline. A disk
// that hangs a command must surface as an error, not as a stuck agent.
const DefaultTimeout = 2 * time.Minute

// CommandError is a command that failed, with what it printed.
type CommandError struct {
	Command  string
	ExitCode int
	Stderr   string
	Err      error
}

func (e *CommandError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("%s: exit %d: %s", e.Command, e.ExitCode, msg)
}

func (e *CommandError) Unwrap() error { return e.Err }

// Runner runs external commands with a context and a timeout and captures their output.
type Runner struct {
	// Timeout bounds each command; zero means DefaultTimeout.
	Timeout time.Duration
	// Log records every command run at verbosity 1.
	Log logr.Logger
	// Ran, when set, is told of every command run, by name, and how long it took: the agent
	// counts them, so that what it costs a node in the background shows in its metrics.
	Ran func(name string, took time.Duration)

	// alsoAllowed lets this package's tests run harmless commands (cat, sh) that Tools rightly
	// does not declare.
	alsoAllowed map[string]bool
}

// Run runs name with args and returns its standard output.
func (r Runner) Run(ctx context.Context, name string, args ...string) (string, error) {
	return r.RunInput(ctx, nil, name, args...)
}

// RunInput runs name with args, feeding stdin, and returns its standard output. It refuses a
// name that Tools does not declare, so that the table stays the complete list of what the
// engine runs, and what the image and the hosts must provide.
func (r Runner) RunInput(ctx context.Context, stdin []byte, name string, args ...string) (string, error) {
	return r.run(ctx, stdin, nil, name, args...)
}

// RunRedacted is Run for a command line that carries secrets (CHAP passwords): each of them is
// replaced by "<redacted>" in the log and in the error, which the agent copies into events and
// status.
func (r Runner) RunRedacted(ctx context.Context, secrets []string, name string, args ...string) (string, error) {
	return r.run(ctx, nil, secrets, name, args...)
}

func (r Runner) run(ctx context.Context, stdin []byte, secrets []string, name string, args ...string) (string, error) {
	if _, ok := ToolNamed(name); !ok && !r.alsoAllowed[name] {
		return "", &UnknownToolError{Name: name}
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	redact := func(s string) string {
		for _, secret := range secrets {
			if secret != "" {
				s = strings.ReplaceAll(s, secret, "<redacted>")
			}
		}
		return s
	}
	line := redact(strings.Join(append([]string{name}, args...), " "))
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	r.Log.V(1).Info("ran", "command", line, "seconds", took.Seconds(), "error", err)
	if r.Ran != nil {
		r.Ran(name, took)
	}
	if err != nil {
		ce := &CommandError{Command: line, ExitCode: -1, Stderr: redact(stderr.String()), Err: err}
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			ce.ExitCode = exitErr.ExitCode()
		}
		if ctx.Err() != nil {
			ce.Err = fmt.Errorf("%w (after %s)", ctx.Err(), time.Since(start).Round(time.Millisecond))
		}
		return stdout.String(), ce
	}
	return stdout.String(), nil
}
