package blockdev

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// testRunner may also run the shell utilities these tests drive it with.
func testRunner() Runner {
	return Runner{alsoAllowed: map[string]bool{"cat": true, "sh": true, "sleep": true}}
}

func TestRunnerCapturesStdoutAndStdin(t *testing.T) {
	out, err := testRunner().RunInput(context.Background(), []byte("hello"), "cat")
	if err != nil || out != "hello" {
		t.Errorf("out %q err %v", out, err)
	}
}

func TestRunnerErrorCarriesExitCodeAndStderr(t *testing.T) {
	_, err := testRunner().Run(context.Background(), "sh", "-c", "echo device busy >&2; exit 3")
	var ce *CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want *CommandError", err)
	}
	if ce.ExitCode != 3 || !strings.Contains(err.Error(), "device busy") || !strings.Contains(err.Error(), "sh -c") {
		t.Errorf("err = %v (exit %d)", err, ce.ExitCode)
	}
}

func TestRunnerTimesOut(t *testing.T) {
	start := time.Now()
	r := testRunner()
	r.Timeout = 200 * time.Millisecond
	_, err := r.Run(context.Background(), "sleep", "10")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want deadline exceeded", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("timeout did not stop the command: %s", time.Since(start))
	}
}

func TestRunnerRedactsSecretsFromTheLogAndTheError(t *testing.T) {
	var logged strings.Builder
	r := testRunner()
	r.Log = funcr.New(func(prefix, args string) { logged.WriteString(args) }, funcr.Options{Verbosity: 1})
	_, err := r.RunRedacted(context.Background(), []string{"s3cr3t-pass"}, "sh", "-c", "echo login with $0 refused >&2; exit 24", "s3cr3t-pass")
	if err == nil {
		t.Fatal("want an error")
	}
	if strings.Contains(err.Error(), "s3cr3t-pass") || strings.Contains(logged.String(), "s3cr3t-pass") {
		t.Errorf("the secret leaked:\nerror: %v\nlog: %s", err, logged.String())
	}
	if !strings.Contains(err.Error(), "login with <redacted> refused") || !strings.Contains(logged.String(), "<redacted>") {
		t.Errorf("want the redacted forms:\nerror: %v\nlog: %s", err, logged.String())
	}
}
