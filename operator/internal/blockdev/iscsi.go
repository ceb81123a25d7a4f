package blockdev

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SysClassISCSISession is where the kernel lists iSCSI sessions. Reading it needs no daemon and
// no I/O to the target, so it is safe while a session is down.
var SysClassISCSISession = "/sys/class/iscsi_session"

// iscsiadm's exit codes that the engine tells apart (open-iscsi's include/iscsi_err.h).
const (
	iscsiErrSessionExists = 15 // ISCSI_ERR_SESS_EXISTS: already logged in
	iscsiErrNoObjects     = 21 // ISCSI_ERR_NO_OBJS_FOUND: no such record or session
	iscsiErrLoginAuth     = 24 // ISCSI_ERR_LOGIN_AUTH_FAILED
)

// ErrISCSIAuth says the target refused the login's credentials.
var ErrISCSIAuth = errors.New("the target refused the login: CHAP authentication failed")

// CHAP is a login's credentials. They reach iscsiadm only, never a log or an error: String
// hides them, and the runner redacts them from what it records.
type CHAP struct {
	Username string
	Password string
}

func (c CHAP) String() string { return "CHAP{username and password redacted}" }

// GoString keeps %#v from printing the fields.
func (c CHAP) GoString() string { return c.String() }

// ISCSITarget is one LUN of a target and how to log in to it.
type ISCSITarget struct {
	// Portals are host[:port] in the order to try; the first is the spec's portal.
	Portals []string
	IQN     string
	LUN     int32
	// InitiatorName, when set, is used through an iface of its own instead of the host's
	// /etc/iscsi/initiatorname.iscsi.
	InitiatorName string
	CHAP          *CHAP
}

// Iface is the open-iscsi interface record that carries the target's initiator name, or
// "default" for the host's own name.
func (t ISCSITarget) Iface() string {
	if t.InitiatorName == "" {
		return "default"
	}
	sum := sha256.Sum256([]byte(t.InitiatorName))
	return "flashcache-" + hex.EncodeToString(sum[:6])
}

// ISCSISession is one session as sysfs shows it.
type ISCSISession struct {
	ID            int
	Target        string
	State         string // LOGGED_IN, FAILED (recovering) or FREE
	InitiatorName string
	Iface         string
	// Address and Port are the connection's persistent address, the portal it logged in to.
	Address string
	Port    int
	// RecoveryTimeoutSeconds is how long the kernel queues I/O for a lost session before it
	// fails it (node.session.timeo.replacement_timeout).
	RecoveryTimeoutSeconds int
	// Devices maps LUN numbers to kernel block device names.
	Devices map[int32]string
}

// LoggedIn says whether I/O to the session's LUNs can complete.
func (s ISCSISession) LoggedIn() bool { return s.State == "LOGGED_IN" }

// Portal is address:port as iscsiadm writes it.
func (s ISCSISession) Portal() string { return net.JoinHostPort(s.Address, strconv.Itoa(s.Port)) }

// ISCSISessions reads every iSCSI session the kernel has; none when the iSCSI modules are not
// loaded.
func ISCSISessions() ([]ISCSISession, error) {
	names, err := listDir(SysClassISCSISession)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var sessions []ISCSISession
	for _, name := range names {
		id, err := strconv.Atoi(strings.TrimPrefix(name, "session"))
		if err != nil {
			continue
		}
		dir := filepath.Join(SysClassISCSISession, name)
		s := ISCSISession{ID: id, Devices: map[int32]string{}}
		s.Target, _ = readTrim(filepath.Join(dir, "targetname"))
		s.State, _ = readTrim(filepath.Join(dir, "state"))
		s.InitiatorName, _ = readTrim(filepath.Join(dir, "initiatorname"))
		s.Iface, _ = readTrim(filepath.Join(dir, "ifacename"))
		if tmo, err := readInt(filepath.Join(dir, "recovery_tmo")); err == nil {
			s.RecoveryTimeoutSeconds = int(tmo)
		}
		// The session's device folder holds its connection and its SCSI targets.
		dev := filepath.Join(dir, "device")
		conns, _ := filepath.Glob(filepath.Join(dev, "connection*", "iscsi_connection", "connection*"))
		for _, c := range conns {
			addr, err := readTrim(filepath.Join(c, "persistent_address"))
			if err != nil || addr == "" {
				continue
			}
			port, _ := readInt(filepath.Join(c, "persistent_port"))
			s.Address, s.Port = addr, int(port)
			break
		}
		blocks, _ := filepath.Glob(filepath.Join(dev, "target*", "*:*:*:*", "block", "*"))
		for _, b := range blocks {
			hctl := strings.Split(filepath.Base(filepath.Dir(filepath.Dir(b))), ":")
			lun, err := strconv.ParseInt(hctl[len(hctl)-1], 10, 32)
			if err != nil {
				continue
			}
			s.Devices[int32(lun)] = filepath.Base(b)
		}
		sessions = append(sessions, s)
	}
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].ID < sessions[j].ID })
	return sessions, nil
}

// SplitPortal returns a portal's host and port, 3260 when it names none.
func SplitPortal(portal string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(portal)
	if err != nil {
		// No port: a bare host, IPv4 address or bracketed IPv6 address.
		host, p = strings.TrimSuffix(strings.TrimPrefix(portal, "["), "]"), "3260"
	}
	port, err = strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("portal %q: bad port", portal)
	}
	return host, port, nil
}

// PortalAddresses resolves a portal to the address:port forms a session to it may show.
func PortalAddresses(ctx context.Context, portal string) ([]string, error) {
	host, port, err := SplitPortal(portal)
	if err != nil {
		return nil, err
	}
	addrs := []string{host}
	if net.ParseIP(host) == nil {
		if addrs, err = net.DefaultResolver.LookupHost(ctx, host); err != nil {
			return nil, fmt.Errorf("portal %q: %w", portal, err)
		}
	}
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, net.JoinHostPort(a, strconv.Itoa(port)))
	}
	return out, nil
}

// FindISCSISession returns the target's session through one of its portals, or nil.
func FindISCSISession(ctx context.Context, t ISCSITarget) (*ISCSISession, error) {
	sessions, err := ISCSISessions()
	if err != nil || len(sessions) == 0 {
		return nil, err
	}
	var portals []string
	for _, p := range t.Portals {
		addrs, err := PortalAddresses(ctx, p)
		if err != nil {
			return nil, err
		}
		portals = append(portals, addrs...)
	}
	for _, s := range sessions {
		if s.Target != t.IQN || !slices.Contains(portals, s.Portal()) {
			continue
		}
		if t.InitiatorName != "" && s.InitiatorName != t.InitiatorName {
			continue
		}
		return &s, nil
	}
	return nil, nil
}

// DiscoverTargets asks a portal which targets it offers (SendTargets). Only new node records
// are created: an existing record keeps its settings (credentials, startup).
func (r Runner) DiscoverTargets(ctx context.Context, portal, iface string) ([]string, error) {
	out, err := r.Run(ctx, "iscsiadm", "-m", "discovery", "-t", "sendtargets", "-p", portal, "-I", iface, "-o", "new")
	if err != nil {
		return nil, err
	}
	return ParseSendTargets(out), nil
}

// ParseSendTargets reads discovery's "address:port,tpgt iqn" lines and returns the target names.
func ParseSendTargets(out string) []string {
	var targets []string
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2 && strings.Contains(fields[0], ",") && !slices.Contains(targets, fields[1]) {
			targets = append(targets, fields[1])
		}
	}
	return targets
}

// EnsureIface creates the iface record that carries initiatorName, over TCP.
func (r Runner) EnsureIface(ctx context.Context, iface, initiatorName string) error {
	if _, err := r.Run(ctx, "iscsiadm", "-m", "iface", "-I", iface); err != nil {
		if _, err := r.Run(ctx, "iscsiadm", "-m", "iface", "-I", iface, "-o", "new"); err != nil {
			return err
		}
	}
	for name, value := range map[string]string{"iface.transport_name": "tcp", "iface.initiatorname": initiatorName} {
		if _, err := r.Run(ctx, "iscsiadm", "-m", "iface", "-I", iface, "-o", "update", "-n", name, "-v", value); err != nil {
			return err
		}
	}
	return nil
}

// NodeSettings reads a node record's settings ("name = value" lines).
func (r Runner) NodeSettings(ctx context.Context, iqn, portal, iface string) (map[string]string, error) {
	out, err := r.Run(ctx, "iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-I", iface)
	if err != nil {
		return nil, err
	}
	settings := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		name, value, ok := strings.Cut(line, " = ")
		if ok && !strings.HasPrefix(name, "#") {
			settings[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
	}
	return settings, nil
}

// SetNodeSetting writes one setting of a node record; secret values never reach a log.
func (r Runner) SetNodeSetting(ctx context.Context, iqn, portal, iface, name, value string, secret bool) error {
	args := []string{"-m", "node", "-T", iqn, "-p", portal, "-I", iface, "-o", "update", "-n", name, "-v", value}
	var hide []string
	if secret {
		hide = []string{value}
	}
	_, err := r.RunRedacted(ctx, hide, "iscsiadm", args...)
	return err
}

// Login logs in to the target through one portal. Being logged in already is success.
func (r Runner) Login(ctx context.Context, iqn, portal, iface string) error {
	_, err := r.Run(ctx, "iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-I", iface, "--login")
	var ce *CommandError
	switch {
	case errors.As(err, &ce) && ce.ExitCode == iscsiErrSessionExists:
		return nil
	case errors.As(err, &ce) && ce.ExitCode == iscsiErrLoginAuth:
		return fmt.Errorf("%w: %w", ErrISCSIAuth, err)
	}
	return err
}

// Logout ends the target's session through the portal and deletes the target's node records
// on the iface, whatever portal each is filed under, so that none logs in again at boot. No
// session or no record is success.
func (r Runner) Logout(ctx context.Context, iqn, portal, iface string) error {
	session := []string{"-m", "node", "-T", iqn, "-p", portal, "-I", iface}
	// Every portal's: a record filed under another address than the session's (discovery names
	// records by the addresses the target answers with) would otherwise stay, and log in at boot.
	records := []string{"-m", "node", "-T", iqn, "-I", iface}
	run := func(selector []string, op ...string) (gone bool, err error) {
		_, err = r.Run(ctx, "iscsiadm", append(append([]string{}, selector...), op...)...)
		var ce *CommandError
		if errors.As(err, &ce) && ce.ExitCode == iscsiErrNoObjects {
			return true, nil
		}
		return false, err
	}
	if _, err := run(session, "--logout"); err != nil {
		return err
	}
	// Right after a logout the session may still be closing, and iscsiadm then declines to
	// delete the record while answering "no objects": check that it is gone, and try again.
	// Each try is two iscsiadm commands, seconds apiece on a loaded host: allow several.
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return WaitFor(waitCtx, 250*time.Millisecond, fmt.Sprintf("the node record of %s at %s to go after logout and delete", iqn, portal),
		func() (bool, error) {
			if _, err := run(records, "-o", "delete"); err != nil {
				return false, err
			}
			return run(records)
		})
}
