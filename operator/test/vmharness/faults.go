package vmharness

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// SetPresent takes a disk out of the VM, or puts it back, for the next Start: a drive missing at
// boot (dead, or unplugged while the machine was off). The VM must be stopped; the disk's file is
// kept.
func (vm *VM) SetPresent(d Disk, present bool) error {
	if vm.running() {
		return fmt.Errorf("set present %s: the VM is running; stop it first", d.Serial)
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.absent == nil {
		vm.absent = map[string]bool{}
	}
	vm.absent[d.Serial] = !present
	return nil
}

// presentDisks are the disks the next launch attaches.
func (vm *VM) presentDisks() []Disk {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	var disks []Disk
	for _, d := range vm.disks {
		if !vm.absent[d.Serial] {
			disks = append(disks, d)
		}
	}
	return disks
}

// SetOffline takes a SCSI disk offline in the guest, or back online: the kernel then rejects
// every I/O to it, as after the SCSI layer gave up on a failing disk, and accepts I/O again.
func (vm *VM) SetOffline(ctx context.Context, d Disk, offline bool) error {
	if d.Kind != HDD {
		return fmt.Errorf("set offline %s: only SCSI disks have a state to set", d.Serial)
	}
	state := "running"
	if offline {
		state = "offline"
	}
	if out, err := vm.Output(ctx, "echo "+state+" > /sys/block/$(basename $(readlink -f "+d.ByID()+"))/device/state"); err != nil {
		return fmt.Errorf("setting %s %s: %w\n%s", d.ByID(), state, err, out)
	}
	return nil
}

// SetFailing makes a Faulty disk fail every read and write with EIO, or work again.
func (vm *VM) SetFailing(d Disk, failing bool) error {
	for _, v := range vm.volatile.disks {
		if v.disk.Serial != d.Serial || v.failFile == "" {
			continue
		}
		if !failing {
			if err := os.Remove(v.failFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("set failing %s: %w", d.Serial, err)
			}
			return nil
		}
		if err := os.WriteFile(v.failFile, nil, 0o644); err != nil {
			return fmt.Errorf("set failing %s: %w", d.Serial, err)
		}
		return nil
	}
	return fmt.Errorf("set failing %s: not a Faulty disk of this VM", d.Serial)
}
