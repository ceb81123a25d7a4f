package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashcache/flashcache/operator/internal/testenv"
)

// hack/test-failures.sh names the innermost failing subtest with its message, shows what the
// guest's kernel complained of, and leaves out the tests that passed.
func TestTheFailureDigestNamesTheFailingSubtestAndItsMessage(t *testing.T) {
	log := `=== RUN   TestPlaybooks
=== RUN   TestPlaybooks/Provision
    a_test.go:10: ansible-playbook provision.yml: 8s
=== RUN   TestPlaybooks/HostLoop
    a_test.go:690: the marker never reached the backing disk; the service's log:
        flush pass started
=== NAME  TestPlaybooks
    env.go:38: the guest went through:
        --- console (/tmp/x/console.log), the kernel's complaints:
        [  539.585809] nvme nvme0: I/O 640 (I/O Cmd) QID 1 timeout, aborting
        --- console, last lines:
        [  600.0] sd 1:0:0:0: [sdb] Attached SCSI disk
--- FAIL: TestPlaybooks (524.31s)
    --- PASS: TestPlaybooks/Provision (8.00s)
    --- FAIL: TestPlaybooks/HostLoop (163.69s)
FAIL
`
	path := filepath.Join(t.TempDir(), "test-ansible.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "test-failures.sh"), path).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{"why test-ansible failed", "TestPlaybooks/HostLoop:", "the marker never reached the backing disk",
		"QID 1 timeout, aborting"} {
		if !strings.Contains(got, want) {
			t.Errorf("the digest lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"provision.yml: 8s", "Attached SCSI disk"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("the digest has %q, which is not about the failure:\n%s", unwanted, got)
		}
	}
}

// --short gives one line a failure, so that the last lines of a run in which several tiers failed
// name every failure with its message: a Go log's innermost failing test with its last message
// (a t.Fatal's), another log's last line that begins with an error, not a later one that only
// mentions one (make's own left out).
func TestTheShortDigestGivesOneLineAFailure(t *testing.T) {
	dir := t.TempDir()
	goLog := `=== RUN   TestPool
=== RUN   TestPool/Lost
    pool_test.go:60: status: exit 0
=== RUN   TestPool/Apply
    engine_vm_test.go:204: flashcache node apply: exit 1
    pool_test.go:110: clean-one: want CacheDeviceLost saying "uncached"
    pool_test.go:120: a second message
--- FAIL: TestPool (10.00s)
    --- PASS: TestPool/Lost (1.00s)
    --- FAIL: TestPool/Apply (2.02s)
FAIL
`
	demoLog := `==> helm install the chart
Error: INSTALLATION FAILED: resource DaemonSet/flashcache-system/flashcache-agent not ready
[pod/x/csi-provisioner] W1202 logging.go:55] grpc: addrConn.createTransport failed to connect to /csi/csi.sock
make[1]: *** [Makefile:203: test-demo] Error 1
`
	paths := []string{filepath.Join(dir, "test-vm-faults.log"), filepath.Join(dir, "test-demo.log")}
	for i, text := range []string{goLog, demoLog} {
		if err := os.WriteFile(paths[i], []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "test-failures.sh"), append([]string{"--short"}, paths...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := []string{
		"test-vm-faults: TestPool/Apply: pool_test.go:120: a second message",
		"test-demo: Error: INSTALLATION FAILED: resource DaemonSet/flashcache-system/flashcache-agent not ready",
	}
	if strings.TrimSpace(string(out)) != strings.Join(want, "\n") {
		t.Errorf("short digest:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
}
