package vmharness

import (
	"context"
	"fmt"
	"time"
)

// Pull removes an NVMe disk's PCI function from the running guest, as when the drive dies or is
// pulled out: its block device disappears under whatever uses it. It waits until the disk's
// stable path is gone.
func (vm *VM) Pull(ctx context.Context, d Disk) error {
	if d.Kind != NVMe {
		return fmt.Errorf("pull %s: only NVMe disks have a PCI function of their own", d.Serial)
	}
	if out, err := vm.Output(ctx, "echo 1 > $(readlink -f /sys/block/$(basename $(readlink -f "+d.ByID()+"))/device/device)/remove"); err != nil {
		return fmt.Errorf("removing the PCI function of %s: %w\n%s", d.ByID(), err, out)
	}
	for i := 0; i < 50; i++ {
		if _, _, code, err := vm.Run(ctx, "test -e "+d.ByID()); err == nil && code != 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s is still there after its PCI function was removed", d.ByID())
}
