package engine

import (
	"strings"
	"testing"

	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// Each state a lost cache can leave a volume in: what the engine does on its own, and what the
// message says of the data.
func TestALostCacheIsDetachedOrStartedUncachedOnlyWhenNoDirtyDataIsGivenUpUnasked(t *testing.T) {
	registered := &Observation{Backing: blockdev.Device{DevPath: "/dev/sda"}, BackingReg: &blockdev.BackingRegistration{Sysfs: "/sys/block/sda/bcache"}}
	unregistered := &Observation{Backing: blockdev.Device{DevPath: "/dev/sda"}}
	attached := func(dirty int64) *Status { return &Status{Device: "bcache0", CacheSetUUID: "set-1", DirtyBytes: dirty} }
	cases := []struct {
		name     string
		lost     CacheLostError
		step     StepKind
		inMsg    string
		notInMsg string
	}{
		{"clean and still attached: detach now rather than fail a read",
			CacheLostError{Status: attached(0), DirtyOnDisk: true, backing: registered}, StepDetachLostCache, "no dirty data", "accept"},
		{"dirty and still attached: bcache stops it itself",
			CacheLostError{Status: attached(4096), backing: registered}, "", "dirty data on it", "no dirty data"},
		{"already uncached",
			CacheLostError{Status: &Status{Device: "bcache0"}, SuperblockState: "detached", backing: registered}, "", "uncached", "accepted"},
		{"started without its cache after an accepted loss",
			CacheLostError{Status: &Status{Device: "bcache0"}, SuperblockState: "inconsistent", Accepted: true, backing: registered}, "", "loss was accepted", "no dirty data"},
		{"dirty, not running, not accepted: nothing",
			CacheLostError{Status: &Status{State: "waiting for its cache set"}, DirtyOnDisk: true, backing: registered}, "", "accept-cache-loss=", "serves"},
		{"dirty, not running, accepted: start it",
			CacheLostError{Status: &Status{}, DirtyOnDisk: true, Accepted: true, backing: registered}, StepStartWithoutCache, "not started", ""},
		{"clean at boot, waiting for its set: start it",
			CacheLostError{Status: &Status{}, backing: registered}, StepStartWithoutCache, "holds every write", "dirty"},
		{"clean, unregistered: register first",
			CacheLostError{backing: unregistered}, StepRegisterBacking, "holds every write", "dirty"},
		{"dirty, unregistered, not accepted: nothing",
			CacheLostError{DirtyOnDisk: true, backing: unregistered}, "", "not started", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.lost.Path = "/dev/disk/by-id/nvme-gone"
			step, ok := stepWithoutCache(&c.lost)
			if ok != (c.step != "") || step.Kind != c.step {
				t.Errorf("step %q (ok %v), want %q", step.Kind, ok, c.step)
			}
			msg := c.lost.Error()
			if !strings.HasPrefix(msg, "cacheDevice.path: /dev/disk/by-id/nvme-gone") || !strings.Contains(msg, c.inMsg) ||
				(c.notInMsg != "" && strings.Contains(msg, c.notInMsg)) {
				t.Errorf("message %q: want %q in it and not %q", msg, c.inMsg, c.notInMsg)
			}
		})
	}
}

func TestAnOfflineBackingDiskIsAFailureThatNamesTheFieldAndKeepsTheDirtyData(t *testing.T) {
	running := (&BackingFailedError{Path: "/dev/disk/by-id/scsi-x", State: "offline",
		Status: &Status{Device: "bcache0", DirtyBytes: 3 << 20, BackingIOErrors: 7, BackingIOErrorLimit: 64}}).Error()
	for _, want := range []string{"backingDevice.path: /dev/disk/by-id/scsi-x is offline", "3.0 MiB of dirty data waits on the cache device", "64 backing I/O errors (7 so far)"} {
		if !strings.Contains(running, want) {
			t.Errorf("%q lacks %q", running, want)
		}
	}
	if stopped := (&BackingFailedError{Path: "/dev/sdb", State: "offline"}).Error(); !strings.Contains(stopped, "Dirty data stays on the cache device") {
		t.Errorf("%q", stopped)
	}
}

func TestACacheDeviceThatAnswersButFailsIsReportedAsErrorsNotAsGone(t *testing.T) {
	failing := &CacheLostError{Path: "/dev/disk/by-id/nvme-x", Failing: true, DirtyOnDisk: true, backing: &Observation{}}
	if failing.Reason() != "CacheDeviceErrors" || !strings.Contains(failing.Error(), "is failing (reading it returns I/O errors)") {
		t.Errorf("%s: %s", failing.Reason(), failing.Error())
	}
	if gone := (&CacheLostError{Path: "/dev/disk/by-id/nvme-x"}); gone.Reason() != "CacheDeviceLost" || !strings.Contains(gone.Error(), "is gone") {
		t.Errorf("%s: %s", gone.Reason(), gone.Error())
	}
	if f := FailureOfStatus(&Status{Device: "bcache0", CacheIOErrors: 3}); f == nil || f.Reason != "CacheDeviceErrors" || f.Device != "Cache" {
		t.Errorf("cache errors counted on a running device: %+v", f)
	}
	if f := FailureOfStatus(&Status{Device: "bcache0"}); f != nil {
		t.Errorf("no errors, yet %+v", f)
	}
}
