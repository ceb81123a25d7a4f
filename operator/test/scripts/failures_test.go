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
