package vmharness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// qmpSocket is where the guest's QEMU listens for QMP.
func (vm *VM) qmpSocket() string { return filepath.Join(vm.opts.WorkDir, "qmp.sock") }

// SetNVMeCriticalWarning sets an emulated NVMe drive's SMART critical warning while the guest
// runs, as a failing SSD raises it (QEMU's nvme device takes the property at run time). 1 is
// "available spare below threshold".
func (vm *VM) SetNVMeCriticalWarning(ctx context.Context, serial string, value int) error {
	return vm.qmp(ctx, "qom-set", map[string]any{"path": "/machine/peripheral/" + serial, "property": "smart_critical_warning", "value": value})
}

// qmp runs one QMP command on the running QEMU and waits for its answer.
func (vm *VM) qmp(ctx context.Context, command string, arguments map[string]any) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", vm.qmpSocket())
	if err != nil {
		return fmt.Errorf("vmharness: QMP: %w", err)
	}
	defer func() { _ = conn.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	dec, enc := json.NewDecoder(conn), json.NewEncoder(conn)
	var greeting map[string]any
	if err := dec.Decode(&greeting); err != nil {
		return fmt.Errorf("vmharness: QMP greeting: %w", err)
	}
	call := func(cmd string, args map[string]any) error {
		msg := map[string]any{"execute": cmd}
		if args != nil {
			msg["arguments"] = args
		}
		if err := enc.Encode(msg); err != nil {
			return err
		}
		for {
			var reply struct {
				Return json.RawMessage `json:"return"`
				Error  *struct {
					Class, Desc string
				} `json:"error"`
				Event string `json:"event"`
			}
			if err := dec.Decode(&reply); err != nil {
				return err
			}
			switch {
			case reply.Event != "":
				continue // asynchronous events come in between
			case reply.Error != nil:
				return fmt.Errorf("%s: %s", reply.Error.Class, reply.Error.Desc)
			default:
				return nil
			}
		}
	}
	if err := call("qmp_capabilities", nil); err != nil {
		return fmt.Errorf("vmharness: QMP capabilities: %w", err)
	}
	if err := call(command, arguments); err != nil {
		return fmt.Errorf("vmharness: QMP %s %v: %w", command, arguments, err)
	}
	return nil
}
