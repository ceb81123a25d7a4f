package vmharness

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// ISCSITarget is an iSCSI target the guest serves itself through LIO, for its own initiator to
// log in to over 127.0.0.1: the engine then sees a real session, a real SCSI disk behind it and
// real session loss, with no second machine.
type ISCSITarget struct {
	IQN string
	// User and Password are the CHAP credentials every initiator must give.
	User, Password string
	// LUNs are guest disks exported in order as LUN 0, 1, ...
	LUNs []Disk
}

// Portal is where the guest's initiator finds the target.
const Portal = "127.0.0.1:3260"

func (t ISCSITarget) tpg() string { return "/iscsi/" + t.IQN + "/tpg1" }

// LUNPath is the stable path of LUN lun once the guest is logged in.
func (t ISCSITarget) LUNPath(lun int) string {
	return fmt.Sprintf("/dev/disk/by-path/ip-%s-iscsi-%s-lun-%d", Portal, t.IQN, lun)
}

// ServeISCSI creates the target and starts the guest's iscsid; it logs nobody in.
func (vm *VM) ServeISCSI(ctx context.Context, t ISCSITarget) error {
	cmds := []string{}
	for i, d := range t.LUNs {
		cmds = append(cmds, fmt.Sprintf("targetcli /backstores/block create name=lun%d dev=%s", i, d.ByID()))
	}
	cmds = append(cmds, "targetcli /iscsi create "+t.IQN)
	for i := range t.LUNs {
		cmds = append(cmds, fmt.Sprintf("targetcli %s/luns create /backstores/block/lun%d", t.tpg(), i))
	}
	cmds = append(cmds,
		"targetcli "+t.tpg()+" set attribute authentication=1 generate_node_acls=1 demo_mode_write_protect=0",
		"targetcli "+t.tpg()+" set auth userid="+t.User+" password="+t.Password,
		"systemctl start iscsid")
	if out, err := vm.Output(ctx, strings.Join(cmds, " && ")); err != nil {
		return fmt.Errorf("serving iSCSI target %s: %w\n%s", t.IQN, err, out)
	}
	return nil
}

// SetISCSITargetEnabled turns the target portal group off or on: off, the initiator's session
// fails as when a SAN goes away, and it logs in again by itself once the group is back.
func (vm *VM) SetISCSITargetEnabled(ctx context.Context, t ISCSITarget, enabled bool) error {
	verb := "disable"
	if enabled {
		verb = "enable"
	}
	if out, err := vm.Output(ctx, "targetcli "+t.tpg()+" "+verb); err != nil {
		return fmt.Errorf("targetcli %s %s: %w\n%s", t.tpg(), verb, err, out)
	}
	return nil
}

// ISCSISessions is the state of each of the guest's iSCSI sessions (LOGGED_IN, FAILED, ...),
// space-separated; empty when there is none.
func (vm *VM) ISCSISessions(ctx context.Context) string {
	out, _, _, _ := vm.Run(ctx, "cat /sys/class/iscsi_session/*/state 2>/dev/null")
	return strings.Join(strings.Fields(out), " ")
}

// WaitISCSISessions waits up to timeout for the sessions' states to be want.
func (vm *VM) WaitISCSISessions(ctx context.Context, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got := vm.ISCSISessions(ctx)
		if got == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("iSCSI sessions %q after %s, want %q", got, timeout, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
