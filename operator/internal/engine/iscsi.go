package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// SessionLostError says the backing LUN's iSCSI session is down. The engine sends no I/O to the
// LUN meanwhile (it would wait for the session), and changes nothing.
type SessionLostError struct {
	IQN, Portal            string
	State                  string
	RecoveryTimeoutSeconds int
}

func (e *SessionLostError) Error() string {
	return fmt.Sprintf("backingDevice.iscsi: the session to %s at %s is %s (lost): the kernel holds I/O to the LUN for up to "+
		"%d s after the loss and then fails it. Writes in writeback mode still land on the cache; dirty data stays there and "+
		"is written back when the session returns. Reads of blocks not in the cache, and writeback, wait for it",
		e.IQN, e.Portal, e.State, e.RecoveryTimeoutSeconds)
}

func sessionLost(t blockdev.ISCSITarget, s *blockdev.ISCSISession) *SessionLostError {
	return &SessionLostError{IQN: t.IQN, Portal: s.Portal(), State: s.State, RecoveryTimeoutSeconds: s.RecoveryTimeoutSeconds}
}

// iscsiTarget is the spec's LUN, with the credentials the front end resolved.
func (v Volume) iscsiTarget() blockdev.ISCSITarget {
	s := v.Spec.BackingISCSI()
	return blockdev.ISCSITarget{
		Portals:       append([]string{s.Portal}, s.AdditionalPortals...),
		IQN:           s.IQN,
		LUN:           s.LUN,
		InitiatorName: s.InitiatorName,
		CHAP:          v.CHAP,
	}
}

// ErrNotLoggedIn: this host has no session to the volume's target (a first run, or a boot that
// did not log in). Apply and Teardown log in; everything else reports it.
var ErrNotLoggedIn = errors.New("not logged in")

// iscsiBacking finds the LUN's block device in the target's session, without logging in.
func (e *Engine) iscsiBacking(ctx context.Context, v Volume) (blockdev.Device, error) {
	t := v.iscsiTarget()
	s, err := blockdev.FindISCSISession(ctx, t)
	if err != nil {
		return blockdev.Device{}, fmt.Errorf("backingDevice.iscsi: %w", err)
	}
	if s == nil {
		return blockdev.Device{}, fmt.Errorf("backingDevice.iscsi: %w to %s at %s: %w", ErrNotLoggedIn, t.IQN, strings.Join(t.Portals, " or "), blockdev.ErrNotFound)
	}
	if !s.LoggedIn() {
		return blockdev.Device{}, sessionLost(t, s)
	}
	name, ok := s.Devices[t.LUN]
	if !ok {
		return blockdev.Device{}, fmt.Errorf("backingDevice.iscsi.lun: the session to %s has no LUN %d (it has LUNs %v): %w", t.IQN, t.LUN, luns(s), blockdev.ErrNotFound)
	}
	d, err := blockdev.InspectName(name)
	if err != nil {
		return d, fmt.Errorf("backingDevice.iscsi: LUN %d: %w", t.LUN, err)
	}
	// udev's stable name when the host has it; the kernel name otherwise.
	d.Path = d.DevPath
	if p := filepath.Join("/dev/disk/by-path", fmt.Sprintf("ip-%s-iscsi-%s-lun-%d", s.Portal(), t.IQN, t.LUN)); exists(p) {
		d.Path = p
	}
	return d, nil
}

func luns(s *blockdev.ISCSISession) []int32 {
	var l []int32
	for n := range s.Devices {
		l = append(l, n)
	}
	slices.Sort(l)
	return l
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// connectISCSI logs in to the volume's target unless a session is up, and makes the session
// start at boot. A refused login changes nothing on the host's disks.
func (e *Engine) connectISCSI(ctx context.Context, v Volume, res *Result) error {
	t := v.iscsiTarget()
	iface := t.Iface()
	s, err := blockdev.FindISCSISession(ctx, t)
	if err != nil {
		return fmt.Errorf("backingDevice.iscsi: %w", err)
	}
	if s != nil && !s.LoggedIn() {
		return sessionLost(t, s)
	}
	if s != nil {
		changed, err := e.startAtBoot(ctx, t.IQN, s.Portal(), iface)
		if err != nil {
			return err
		}
		if changed {
			res.Changed = true
			res.Steps = append(res.Steps, Step{Kind: StepISCSIStartup, Device: t.IQN + " at " + s.Portal()})
		}
		return nil
	}
	if t.InitiatorName != "" {
		if err := e.Run.EnsureIface(ctx, iface, t.InitiatorName); err != nil {
			return fmt.Errorf("backingDevice.iscsi.initiatorName: %w", err)
		}
	}
	var failures []error
	for _, portal := range t.Portals {
		err := e.loginThrough(ctx, t, portal, iface)
		var refusal *Refusal
		if errors.As(err, &refusal) {
			return err
		}
		if err != nil {
			failures = append(failures, err)
			continue
		}
		res.Changed = true
		res.Steps = append(res.Steps, Step{Kind: StepISCSILogin, Device: t.IQN + " at " + portal})
		return e.waitUntil(ctx, fmt.Sprintf("LUN %d of %s", t.LUN, t.IQN), func() (bool, error) {
			s, err := blockdev.FindISCSISession(ctx, t)
			if err != nil || s == nil {
				return false, err
			}
			_, ok := s.Devices[t.LUN]
			return ok, nil
		})
	}
	return fmt.Errorf("backingDevice.iscsi: no portal let us log in to %s: %w", t.IQN, errors.Join(failures...))
}

// loginThrough discovers the target at one portal, writes the node record's settings and logs in.
func (e *Engine) loginThrough(ctx context.Context, t blockdev.ISCSITarget, portal, iface string) error {
	targets, err := e.Run.DiscoverTargets(ctx, portal, iface)
	if err != nil {
		return fmt.Errorf("discovery at %s: %w", portal, err)
	}
	if !slices.Contains(targets, t.IQN) {
		return fmt.Errorf("portal %s does not offer %s (it offers %q)", portal, t.IQN, targets)
	}
	// Discovery names the record by the address the target answered with; use that.
	settings := map[string]string{"node.startup": "automatic", "node.session.auth.authmethod": "None"}
	if t.CHAP != nil {
		settings["node.session.auth.authmethod"] = "CHAP"
		settings["node.session.auth.username"] = t.CHAP.Username
	}
	for _, name := range []string{"node.session.auth.authmethod", "node.session.auth.username", "node.startup"} {
		if value, ok := settings[name]; ok {
			if err := e.Run.SetNodeSetting(ctx, t.IQN, portal, iface, name, value, false); err != nil {
				return fmt.Errorf("setting %s for %s at %s: %w", name, t.IQN, portal, err)
			}
		}
	}
	if t.CHAP != nil {
		if err := e.Run.SetNodeSetting(ctx, t.IQN, portal, iface, "node.session.auth.password", t.CHAP.Password, true); err != nil {
			return fmt.Errorf("setting the CHAP password for %s at %s: %w", t.IQN, portal, err)
		}
	}
	if err := e.Run.Login(ctx, t.IQN, portal, iface); err != nil {
		if errors.Is(err, blockdev.ErrISCSIAuth) {
			field := "backingDevice.iscsi.chapSecretRef"
			msg := fmt.Sprintf("%s at %s refused the CHAP credentials: %v", t.IQN, portal, err)
			if t.CHAP == nil {
				msg = fmt.Sprintf("%s at %s asks for credentials and the spec names no CHAP secret: %v", t.IQN, portal, err)
			}
			return &Refusal{Reason: ReasonISCSILoginRefused, Field: field, Message: msg}
		}
		return fmt.Errorf("login to %s at %s: %w", t.IQN, portal, err)
	}
	return nil
}

// startAtBoot makes the node record log in at boot; it says whether it had to.
func (e *Engine) startAtBoot(ctx context.Context, iqn, portal, iface string) (bool, error) {
	settings, err := e.Run.NodeSettings(ctx, iqn, portal, iface)
	if err != nil {
		return false, fmt.Errorf("reading the node record of %s at %s: %w", iqn, portal, err)
	}
	if settings["node.startup"] == "automatic" {
		return false, nil
	}
	if err := e.Run.SetNodeSetting(ctx, iqn, portal, iface, "node.startup", "automatic", false); err != nil {
		return false, fmt.Errorf("making %s at %s start at boot: %w", iqn, portal, err)
	}
	return true, nil
}

// disconnectISCSI logs out of the volume's target after teardown, unless another LUN of the
// session is in use (another volume, a mount, a device stacked on it): the session is shared.
func (e *Engine) disconnectISCSI(ctx context.Context, v Volume) (string, error) {
	t := v.iscsiTarget()
	s, err := blockdev.FindISCSISession(ctx, t)
	if err != nil || s == nil {
		return "", err
	}
	for lun, name := range s.Devices {
		if lun == t.LUN {
			continue
		}
		if busy, why := inUse(name); busy {
			return fmt.Sprintf("left the session to %s logged in: LUN %d (%s) %s", t.IQN, lun, name, why), nil
		}
	}
	if err := e.Run.Logout(ctx, t.IQN, s.Portal(), t.Iface()); err != nil {
		return "", fmt.Errorf("logging out of %s at %s: %w", t.IQN, s.Portal(), err)
	}
	return fmt.Sprintf("logged out of %s at %s and deleted its node record", t.IQN, s.Portal()), nil
}

// inUse says whether a disk or one of its partitions is held or mounted.
func inUse(name string) (bool, string) {
	d, err := blockdev.InspectName(name)
	if err != nil {
		return false, ""
	}
	devs := []blockdev.Device{d}
	for _, p := range d.Partitions {
		if pd, err := blockdev.InspectName(p); err == nil {
			devs = append(devs, pd)
		}
	}
	for _, dev := range devs {
		if len(dev.Holders) > 0 {
			return true, "is held by " + strings.Join(dev.Holders, ", ")
		}
		if where, err := blockdev.MountedAt(dev); err == nil && len(where) > 0 {
			return true, "is mounted at " + strings.Join(where, ", ")
		}
	}
	return false, ""
}

// iscsiLockKey is what Lock takes for an iSCSI LUN, which has no device path before the login.
func iscsiLockKey(v Volume) string {
	s := v.Spec.BackingISCSI()
	return "iscsi:" + s.IQN + ":lun-" + strconv.Itoa(int(s.LUN))
}
