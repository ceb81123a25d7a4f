package vmharness

import (
	"os"
	"testing"
)

// ImageFromEnv is the image folder that `make test-vm` passes in FLASHCACHE_VM_IMAGE. A test
// without it fails rather than skips: a kernel test that silently did not run proves nothing.
func ImageFromEnv(t testing.TB) string {
	t.Helper()
	return fromEnv(t, "FLASHCACHE_VM_IMAGE", "the folder `make vm-image` prints")
}

// BinaryFromEnv is the flashcache binary that `make test-vm` passes in FLASHCACHE_BIN.
func BinaryFromEnv(t testing.TB) string {
	t.Helper()
	return fromEnv(t, "FLASHCACHE_BIN", "bin/flashcache from `make build`")
}

func fromEnv(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run the make target (make test-vm or make test-durability), or set it to %s", name, what)
	}
	return v
}

// LogDiagnosticsOnFailure makes a failed test print the end of the guest's serial console, of
// QEMU's output and of each volatile disk's nbdkit: the guest kernel's own account of what went
// wrong (an I/O timeout, a controller reset, a device it dropped, a hung task) and the host side
// of its disks, which commands over SSH cannot give once the guest is stuck, and which go with
// the test's temporary folder afterwards. Call it right after Boot.
func (vm *VM) LogDiagnosticsOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the guest went through:\n%s", vm.diagnostics())
		}
	})
}
