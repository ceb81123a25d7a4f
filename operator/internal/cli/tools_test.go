package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

func statuses(missing ...string) []blockdev.ToolStatus {
	return blockdev.LocateTools(func(name string) (string, error) {
		if slices.Contains(missing, name) {
			return "", errors.New("executable file not found in $PATH")
		}
		return "/usr/sbin/" + name, nil
	})
}

func TestToolsJSONListsEveryToolAndTheMissingOnes(t *testing.T) {
	var out bytes.Buffer
	err := reportTools(&out, "json", statuses("sgdisk", "iscsiadm"))
	var missing errToolsMissing
	if !errors.As(err, &missing) || !slices.Equal(missing, []string{"sgdisk", "iscsiadm"}) {
		t.Errorf("err = %v, want the two missing tools", err)
	}
	var report toolsReport
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if len(report.Tools) != len(blockdev.Tools) || !slices.Equal(report.Missing, []string{"sgdisk", "iscsiadm"}) {
		t.Errorf("report = %+v", report)
	}
	for _, s := range report.Tools {
		if s.Debian == "" || (s.Path == "") != (s.Name == "sgdisk" || s.Name == "iscsiadm") {
			t.Errorf("tool %+v", s)
		}
	}
}

func TestToolsTextMarksTheMissingAndSucceedsWhenNoneIs(t *testing.T) {
	var out bytes.Buffer
	if err := reportTools(&out, "text", statuses("nvme")); err == nil || !strings.Contains(err.Error(), "nvme") {
		t.Errorf("err = %v, want one naming nvme", err)
	}
	if !strings.Contains(out.String(), "MISSING") || !strings.Contains(out.String(), "/usr/sbin/make-bcache") {
		t.Errorf("output:\n%s", out.String())
	}
	out.Reset()
	if err := reportTools(&out, "text", statuses()); err != nil {
		t.Errorf("nothing missing: err = %v", err)
	}
}

func TestToolsNeedsNoConfig(t *testing.T) {
	out, err := run(t, "node", "tools", "--packages", "debian")
	if err != nil {
		t.Fatalf("node tools --packages debian: %v", err)
	}
	if got := strings.Fields(out); !slices.Contains(got, "bcache-tools") || !slices.Contains(got, "util-linux") {
		t.Errorf("packages %q", out)
	}
	if _, err := run(t, "node", "tools", "--packages", "arch"); err == nil || !strings.Contains(err.Error(), "--packages") {
		t.Errorf("err = %v, want one naming --packages", err)
	}
	if _, err := run(t, "node", "tools", "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "--output") {
		t.Errorf("err = %v, want one naming --output", err)
	}
}
