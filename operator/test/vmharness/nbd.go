package vmharness

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// nbdConn is the smallest NBD client that does what the harness needs from its own nbdkit
// servers: fixed newstyle handshake, the default export, simple replies, one request at a
// time. Every other client (QEMU's, qemu-io) flushes when it disconnects, which would make
// "written but never flushed" impossible to set up from the host.
type nbdConn struct {
	conn   net.Conn
	size   uint64
	flags  uint16 // transmission flags
	handle uint64
}

const (
	nbdFlagFixedNewstyle = 1 << 0 // handshake flag, echoed by the client
	nbdFlagNoZeroes      = 1 << 1

	nbdOptExportName = 1

	nbdFlagSendFlush = 1 << 2 // transmission flags
	nbdFlagSendFUA   = 1 << 3

	nbdCmdRead  = 0
	nbdCmdWrite = 1
	nbdCmdDisc  = 2
	nbdCmdFlush = 3

	nbdCmdFlagFUA = 1 << 0

	nbdRequestMagic = 0x25609513
	nbdReplyMagic   = 0x67446698
)

// dialNBD connects to the server on a Unix socket.
func dialNBD(ctx context.Context, sock string) (*nbdConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, err
	}
	n := &nbdConn{conn: conn}
	defer n.bound(ctx)()
	if err := n.handshake(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("nbd handshake with %s: %w", sock, err)
	}
	return n, nil
}

// bound makes I/O on the connection fail once ctx is done; call the result when done.
func (n *nbdConn) bound(ctx context.Context) func() {
	stop := context.AfterFunc(ctx, func() { _ = n.conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		if stop() {
			return
		}
		_ = n.conn.SetDeadline(time.Time{}) // the AfterFunc ran or runs: undo it
	}
}

func (n *nbdConn) handshake() error {
	var hello struct {
		Magic, OptMagic uint64
		Flags           uint16
	}
	if err := binary.Read(n.conn, binary.BigEndian, &hello); err != nil {
		return err
	}
	if hello.Magic != 0x4e42444d41474943 || hello.OptMagic != 0x49484156454f5054 {
		return errors.New("not a newstyle NBD server")
	}
	if hello.Flags&nbdFlagFixedNewstyle == 0 {
		return errors.New("server lacks fixed newstyle")
	}
	clientFlags := uint32(nbdFlagFixedNewstyle)
	noZeroes := hello.Flags&nbdFlagNoZeroes != 0
	if noZeroes {
		clientFlags |= nbdFlagNoZeroes
	}
	// Client flags, then NBD_OPT_EXPORT_NAME with the empty (default) name: the server answers
	// with the export's size and flags, or closes the connection.
	msg := binary.BigEndian.AppendUint32(nil, clientFlags)
	msg = binary.BigEndian.AppendUint64(msg, 0x49484156454f5054)
	msg = binary.BigEndian.AppendUint32(msg, nbdOptExportName)
	msg = binary.BigEndian.AppendUint32(msg, 0)
	if _, err := n.conn.Write(msg); err != nil {
		return err
	}
	var export struct {
		Size  uint64
		Flags uint16
	}
	if err := binary.Read(n.conn, binary.BigEndian, &export); err != nil {
		return fmt.Errorf("export refused: %w", err)
	}
	if !noZeroes {
		if _, err := io.CopyN(io.Discard, n.conn, 124); err != nil {
			return err
		}
	}
	n.size, n.flags = export.Size, export.Flags
	return nil
}

// request sends one command and waits for its reply; data is the payload of a write, and a
// read's reply is read into buf.
func (n *nbdConn) request(ctx context.Context, cmd, flags uint16, offset uint64, length uint32, data, buf []byte) error {
	n.handle++
	defer n.bound(ctx)()
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 28+len(data)), nbdRequestMagic)
	msg = binary.BigEndian.AppendUint16(msg, flags)
	msg = binary.BigEndian.AppendUint16(msg, cmd)
	msg = binary.BigEndian.AppendUint64(msg, n.handle)
	msg = binary.BigEndian.AppendUint64(msg, offset)
	msg = binary.BigEndian.AppendUint32(msg, length)
	msg = append(msg, data...)
	if _, err := n.conn.Write(msg); err != nil {
		return err
	}
	if cmd == nbdCmdDisc {
		return nil
	}
	var reply struct {
		Magic, Error uint32
		Handle       uint64
	}
	if err := binary.Read(n.conn, binary.BigEndian, &reply); err != nil {
		return err
	}
	if reply.Magic != nbdReplyMagic || reply.Handle != n.handle {
		return fmt.Errorf("bad reply (magic %#x, handle %d, want %d)", reply.Magic, reply.Handle, n.handle)
	}
	if reply.Error != 0 {
		return fmt.Errorf("server error %d", reply.Error)
	}
	if buf != nil {
		_, err := io.ReadFull(n.conn, buf)
		return err
	}
	return nil
}

func (n *nbdConn) write(ctx context.Context, offset uint64, data []byte, fua bool) error {
	var flags uint16
	if fua {
		flags = nbdCmdFlagFUA
	}
	if err := n.request(ctx, nbdCmdWrite, flags, offset, uint32(len(data)), data, nil); err != nil {
		return fmt.Errorf("nbd write of %d bytes at %d: %w", len(data), offset, err)
	}
	return nil
}

func (n *nbdConn) read(ctx context.Context, offset uint64, length uint32) ([]byte, error) {
	buf := make([]byte, length)
	if err := n.request(ctx, nbdCmdRead, 0, offset, length, nil, buf); err != nil {
		return nil, fmt.Errorf("nbd read of %d bytes at %d: %w", length, offset, err)
	}
	return buf, nil
}

func (n *nbdConn) flush(ctx context.Context) error {
	if n.flags&nbdFlagSendFlush == 0 {
		return errors.New("nbd server does not accept flushes")
	}
	if err := n.request(ctx, nbdCmdFlush, 0, 0, 0, nil, nil); err != nil {
		return fmt.Errorf("nbd flush: %w", err)
	}
	return nil
}

// close disconnects politely (NBD_CMD_DISC) and closes the socket; it sends no flush.
func (n *nbdConn) close() error {
	err := n.request(context.Background(), nbdCmdDisc, 0, 0, 0, nil, nil)
	return errors.Join(err, n.conn.Close())
}
