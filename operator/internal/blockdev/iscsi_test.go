package blockdev

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseSendTargetsKeepsEachTargetOnce(t *testing.T) {
	out := "192.0.2.10:3260,1 iqn.2003-01.org.linux-iscsi.san1:mysql\n[2001:db8::1]:3260,1 iqn.2003-01.org.linux-iscsi.san1:mysql\n" +
		"192.0.2.10:3260,1 iqn.2003-01.org.linux-iscsi.san1:logs\niscsiadm: some warning\n"
	got := ParseSendTargets(out)
	want := []string{"iqn.2003-01.org.linux-iscsi.san1:mysql", "iqn.2003-01.org.linux-iscsi.san1:logs"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestPortalAddressesDefaultThePort(t *testing.T) {
	for portal, want := range map[string]string{
		"192.0.2.10":         "192.0.2.10:3260",
		"192.0.2.10:3261":    "192.0.2.10:3261",
		"[2001:db8::1]":      "[2001:db8::1]:3260",
		"[2001:db8::1]:3262": "[2001:db8::1]:3262",
	} {
		got, err := PortalAddresses(context.Background(), portal)
		if err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("%s: got %q, %v; want %s", portal, got, err, want)
		}
	}
	if _, err := PortalAddresses(context.Background(), "192.0.2.10:99999"); err == nil {
		t.Error("a port out of range passed")
	}
}

func TestIfaceIsDefaultUnlessTheSpecNamesAnInitiator(t *testing.T) {
	if got := (ISCSITarget{}).Iface(); got != "default" {
		t.Errorf("no initiator name: %s", got)
	}
	a := ISCSITarget{InitiatorName: "iqn.2024-01.io.flashcache:node-a"}.Iface()
	b := ISCSITarget{InitiatorName: "iqn.2024-01.io.flashcache:node-b"}.Iface()
	if a == b || a == "default" {
		t.Errorf("ifaces %s and %s", a, b)
	}
}

func TestCHAPNeverPrintsItsFields(t *testing.T) {
	c := &CHAP{Username: "mysql-user", Password: "s3cr3t"}
	for _, s := range []string{fmt.Sprintf("%v", c), fmt.Sprintf("%+v", *c), fmt.Sprintf("%#v", *c), fmt.Sprintf("%s", c)} {
		if slices.ContainsFunc([]string{"mysql-user", "s3cr3t"}, func(x string) bool { return strings.Contains(s, x) }) {
			t.Errorf("printed: %s", s)
		}
	}
}

// The layout of /sys/class/iscsi_session as kernel 6.1 shows it, built in a temporary folder.
func TestISCSISessionsReadsSysfs(t *testing.T) {
	root := t.TempDir()
	devices := filepath.Join(root, "devices", "platform", "host3", "session2")
	write := func(path, value string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	class := filepath.Join(root, "class")
	sess := filepath.Join(devices, "iscsi_session", "session2")
	write(filepath.Join(sess, "targetname"), "iqn.2003-01.org.linux-iscsi.vm:lun")
	write(filepath.Join(sess, "state"), "FAILED")
	write(filepath.Join(sess, "initiatorname"), "iqn.1993-08.org.debian:01:abc")
	write(filepath.Join(sess, "ifacename"), "default")
	write(filepath.Join(sess, "recovery_tmo"), "120")
	if err := os.Symlink(devices, filepath.Join(sess, "device")); err != nil {
		t.Fatal(err)
	}
	conn := filepath.Join(devices, "connection2:0", "iscsi_connection", "connection2:0")
	write(filepath.Join(conn, "persistent_address"), "127.0.0.1")
	write(filepath.Join(conn, "persistent_port"), "3260")
	for lun, name := range map[string]string{"3:0:0:0": "sdc", "3:0:0:4": "sdd"} {
		write(filepath.Join(devices, "target3:0:0", lun, "block", name, "dev"), "8:32")
	}
	if err := os.MkdirAll(class, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sess, filepath.Join(class, "session2")); err != nil {
		t.Fatal(err)
	}
	old := SysClassISCSISession
	SysClassISCSISession = class
	defer func() { SysClassISCSISession = old }()

	sessions, err := ISCSISessions()
	if err != nil || len(sessions) != 1 {
		t.Fatalf("sessions %+v, %v", sessions, err)
	}
	s := sessions[0]
	if s.ID != 2 || s.Target != "iqn.2003-01.org.linux-iscsi.vm:lun" || s.LoggedIn() || s.Portal() != "127.0.0.1:3260" ||
		s.RecoveryTimeoutSeconds != 120 || s.Devices[0] != "sdc" || s.Devices[4] != "sdd" || len(s.Devices) != 2 {
		t.Errorf("session %+v", s)
	}
	found, err := FindISCSISession(context.Background(), ISCSITarget{Portals: []string{"127.0.0.1"}, IQN: s.Target})
	if err != nil || found == nil || found.ID != 2 {
		t.Errorf("find: %+v, %v", found, err)
	}
	if found, _ := FindISCSISession(context.Background(), ISCSITarget{Portals: []string{"127.0.0.1:3261"}, IQN: s.Target}); found != nil {
		t.Errorf("found a session on another port: %+v", found)
	}
	SysClassISCSISession = filepath.Join(root, "absent")
	if sessions, err := ISCSISessions(); err != nil || sessions != nil {
		t.Errorf("no iscsi modules: %v, %v", sessions, err)
	}
}
