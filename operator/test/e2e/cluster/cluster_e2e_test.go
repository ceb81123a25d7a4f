//go:build e2e

package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flashcache/flashcache/operator/test/e2e/cluster"
)

// A component that dies at start must fail Start at once with its log, not after the start
// timeout, and leave nothing running.
func TestStartFailsFastWhenAComponentExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		Dir:          t.TempDir(),
		Controllers:  []string{"no-such-controller"},
		StartTimeout: 3 * time.Minute,
		Logf:         t.Logf,
	})
	if err == nil {
		_ = c.Stop()
		t.Fatal("Start succeeded with an unknown controller")
	}
	t.Logf("Start failed after %s: %v", time.Since(began).Round(100*time.Millisecond), err)
	if !strings.Contains(err.Error(), "kube-controller-manager exited") || !strings.Contains(err.Error(), "no-such-controller") {
		t.Errorf("the error does not say that kube-controller-manager exited, nor quote its log: %v", err)
	}
	if d := time.Since(began); d > time.Minute {
		t.Errorf("Start took %s to notice", d)
	}
}
