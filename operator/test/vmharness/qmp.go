package vmharness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
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

// SetIOPS changes an HDD's cap on I/O a second while the guest runs, as a disk that slows down
// would (its cap on bytes a second stays); 0 gives it its own cap back.
func (vm *VM) SetIOPS(ctx context.Context, d Disk, iops int) error {
	for _, vd := range vm.disks {
		if vd.Serial == d.Serial {
			d = vd
		}
	}
	if d.Kind != HDD {
		return fmt.Errorf("vmharness: %s is not an HDD", d.Serial)
	}
	if iops == 0 {
		iops = d.IOPS
	}
	s, err := dialQMP(ctx, vm.qmpSocket())
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := s.call("block_set_io_throttle", ioThrottle(d, iops)); err != nil {
		return err
	}
	// Read back: a test that slows a disk is about what the guest does on a slow disk, and must
	// not go on as if it were slow when QEMU did not take the cap.
	blocks, err := s.call("query-block", nil)
	if err != nil {
		return err
	}
	have, err := throttledIOPS(blocks, d.Serial)
	if err != nil {
		return err
	}
	if have != iops {
		return fmt.Errorf("vmharness: %s's cap is %d I/O a second after setting it to %d", d.Serial, have, iops)
	}
	return nil
}

// throttledIOPS is the cap on I/O a second that query-block's answer gives the device whose id
// is serial.
func throttledIOPS(queryBlock json.RawMessage, serial string) (int, error) {
	var blocks []struct {
		Qdev     string `json:"qdev"`
		Inserted *struct {
			IOPS int `json:"iops"`
		} `json:"inserted"`
	}
	if err := json.Unmarshal(queryBlock, &blocks); err != nil {
		return 0, fmt.Errorf("vmharness: query-block: %w", err)
	}
	for _, b := range blocks {
		// qdev is the device's id (QEMU 10), or a QOM path under /machine/peripheral/<id>/.
		if b.Inserted != nil && (b.Qdev == serial || strings.HasPrefix(b.Qdev, "/machine/peripheral/"+serial+"/")) {
			return b.Inserted.IOPS, nil
		}
	}
	return 0, fmt.Errorf("vmharness: query-block lists no drive for the device %s", serial)
}

// ioThrottle is block_set_io_throttle's arguments for d: one bucket for reads and writes together,
// as -drive's throttling.* options set at boot, with d's cap on bytes a second and iops.
func ioThrottle(d Disk, iops int) map[string]any {
	return map[string]any{"id": d.Serial, "bps": max(d.BytesPerSec, 0), "bps_rd": 0, "bps_wr": 0, "iops": max(iops, 0), "iops_rd": 0, "iops_wr": 0}
}

// qmp runs one QMP command on the running QEMU and waits for its answer.
func (vm *VM) qmp(ctx context.Context, command string, arguments map[string]any) error {
	s, err := dialQMP(ctx, vm.qmpSocket())
	if err != nil {
		return err
	}
	defer s.close()
	_, err = s.call(command, arguments)
	return err
}

// qmpSession is one connection to QEMU's QMP socket, past the capabilities handshake.
type qmpSession struct {
	conn net.Conn
	dec  *json.Decoder
	enc  *json.Encoder
}

// dialQMP connects to a QMP socket; each call made on the session is bounded by ctx's deadline, or
// 30 s.
func dialQMP(ctx context.Context, socket string) (*qmpSession, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("vmharness: QMP: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	s := &qmpSession{conn: conn, dec: json.NewDecoder(conn), enc: json.NewEncoder(conn)}
	var greeting map[string]any
	if err := s.dec.Decode(&greeting); err != nil {
		conn.Close()
		return nil, fmt.Errorf("vmharness: QMP greeting: %w", err)
	}
	if _, err := s.call("qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("vmharness: QMP capabilities: %w", err)
	}
	return s, nil
}

// call runs a command and returns its "return" value.
func (s *qmpSession) call(command string, arguments map[string]any) (json.RawMessage, error) {
	msg := map[string]any{"execute": command}
	if arguments != nil {
		msg["arguments"] = arguments
	}
	if err := s.enc.Encode(msg); err != nil {
		return nil, fmt.Errorf("vmharness: QMP %s: %w", command, err)
	}
	for {
		var reply struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class, Desc string
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := s.dec.Decode(&reply); err != nil {
			return nil, fmt.Errorf("vmharness: QMP %s: %w", command, err)
		}
		switch {
		case reply.Event != "":
			continue // asynchronous events come in between
		case reply.Error != nil:
			return nil, fmt.Errorf("vmharness: QMP %s %v: %s: %s", command, arguments, reply.Error.Class, reply.Error.Desc)
		default:
			return reply.Return, nil
		}
	}
}

func (s *qmpSession) close() { _ = s.conn.Close() }
