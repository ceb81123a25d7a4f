package blockdev

import (
	"fmt"
	"os/exec"
	"sort"
)

// Tool is an external command the engine may run, and the packages that provide it. The image's
// Dockerfile installs the Debian packages of this table and nothing else, `flashcache node
// tools` checks a host against it, and the Ansible role installs its Debian or RHEL packages
// (roles/flashcache/vars, kept equal to this table by a test).
type Tool struct {
	// Name is the command as Runner runs it, looked up on PATH.
	Name string `json:"name"`
	// Debian is the Debian (and Ubuntu) package that provides it.
	Debian string `json:"debianPackage"`
	// RHEL is the RHEL-family (RHEL, Rocky, Alma, Fedora) package that provides it.
	RHEL string `json:"rhelPackage"`
	// Why says what the engine runs it for.
	Why string `json:"why"`
	// Planned, when set, says which coming feature will run it: nothing runs it yet, but hosts
	// and the image get it now. A test fails when code runs a planned tool, or when a tool is
	// neither planned nor run, so the table says the truth.
	Planned string `json:"planned,omitempty"`
}

// Tools is every external command the engine may run. Runner refuses any other.
var Tools = []Tool{
	{Name: "wipefs", Debian: "util-linux", RHEL: "util-linux", Why: "reads and erases the signatures on cache and backing devices"},
	{Name: "blkdiscard", Debian: "util-linux", RHEL: "util-linux", Why: "discards the whole cache device before partitioning, and zeroes where a new carved volume's data begins and ends"},
	{Name: "blockdev", Debian: "util-linux", RHEL: "util-linux", Why: "makes the kernel reread the cache device's partition table"},
	{Name: "partx", Debian: "util-linux", RHEL: "util-linux", Why: "drops stale partitions of a wiped device from the kernel"},
	{Name: "sfdisk", Debian: "fdisk", RHEL: "util-linux", Why: "reads the cache device's partition table"},
	{Name: "sgdisk", Debian: "gdisk", RHEL: "gdisk", Why: "writes the cache device's GPT partition"},
	{Name: "make-bcache", Debian: "bcache-tools", RHEL: "bcache-tools", Why: "formats the cache and backing devices"},
	{Name: "bcache-super-show", Debian: "bcache-tools", RHEL: "bcache-tools", Why: "reads bcache superblocks"},
	{Name: "smartctl", Debian: "smartmontools", RHEL: "smartmontools", Why: "reports device health in `node check`"},
	{Name: "nvme", Debian: "nvme-cli", RHEL: "nvme-cli", Why: "reads an NVMe cache's volatile write cache setting"},
	{Name: "sdparm", Debian: "sdparm", RHEL: "sdparm", Why: "reads a SCSI disk's write cache setting"},
	{Name: "hdparm", Debian: "hdparm", RHEL: "hdparm", Why: "reads an ATA disk's write cache setting"},
	{Name: "pvcreate", Debian: "lvm2", RHEL: "lvm2", Why: "labels a pool's slow disks as LVM physical volumes"},
	{Name: "vgcreate", Debian: "lvm2", RHEL: "lvm2", Why: "makes a pool's volume group of its slow disks"},
	{Name: "vgextend", Debian: "lvm2", RHEL: "lvm2", Why: "adds a slow disk to a pool's volume group"},
	{Name: "lvcreate", Debian: "lvm2", RHEL: "lvm2", Why: "carves a volume's backing device from its pool"},
	{Name: "lvchange", Debian: "lvm2", RHEL: "lvm2", Why: "activates a carved volume's backing device that LVM left inactive"},
	{Name: "lvextend", Debian: "lvm2", RHEL: "lvm2", Why: "grows a carved volume's backing device"},
	{Name: "lvremove", Debian: "lvm2", RHEL: "lvm2", Why: "removes a carved volume's backing device at teardown"},
	{Name: "vgremove", Debian: "lvm2", RHEL: "lvm2", Why: "removes a pool's volume group at the pool's teardown"},
	{Name: "pvremove", Debian: "lvm2", RHEL: "lvm2", Why: "erases the LVM labels of a pool's slow disks at the pool's teardown"},
	{Name: "pvs", Debian: "lvm2", RHEL: "lvm2", Why: "reads which volume group a slow disk belongs to"},
	{Name: "vgs", Debian: "lvm2", RHEL: "lvm2", Why: "reads a pool's capacity"},
	{Name: "lvs", Debian: "lvm2", RHEL: "lvm2", Why: "reads a pool's carved volumes"},
	{Name: "mkfs.xfs", Debian: "xfsprogs", RHEL: "xfsprogs", Why: "makes the filesystem of a claimed volume (CSI), on a blank device only"},
	{Name: "xfs_growfs", Debian: "xfsprogs", RHEL: "xfsprogs", Why: "grows a claimed volume's XFS filesystem after an expansion"},
	{Name: "mkfs.ext4", Debian: "e2fsprogs", RHEL: "e2fsprogs", Why: "makes an ext4 filesystem on a claimed volume that asks for one, on a blank device only"},
	{Name: "resize2fs", Debian: "e2fsprogs", RHEL: "e2fsprogs", Why: "grows a claimed volume's ext4 filesystem after an expansion"},
	{Name: "iscsiadm", Debian: "open-iscsi", RHEL: "iscsi-initiator-utils", Why: "discovers, logs in to and out of the iSCSI target of a backing device"},
}

// ToolNamed returns the entry of Tools for a command name.
func ToolNamed(name string) (Tool, bool) {
	for _, t := range Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// UnknownToolError is a command that Runner refused because Tools does not declare it.
type UnknownToolError struct{ Name string }

func (e *UnknownToolError) Error() string {
	return fmt.Sprintf("refusing to run %q: it is not in blockdev.Tools, so neither the image nor `flashcache node tools` would provide or check it; declare it there with its packages", e.Name)
}

// Packages returns the sorted, distinct packages that provide Tools, for one family: "debian"
// or "rhel".
func Packages(family string) ([]string, error) {
	seen := map[string]bool{}
	for _, t := range Tools {
		var p string
		switch family {
		case "debian":
			p = t.Debian
		case "rhel":
			p = t.RHEL
		default:
			return nil, fmt.Errorf("unknown package family %q: want debian or rhel", family)
		}
		seen[p] = true
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// ToolStatus is where a tool was found on PATH, if it was.
type ToolStatus struct {
	Tool
	// Path is where exec.LookPath found it; empty when it is missing.
	Path string `json:"path,omitempty"`
	// Error is why it was not found.
	Error string `json:"error,omitempty"`
}

// Found says whether the tool is on PATH.
func (s ToolStatus) Found() bool { return s.Path != "" }

// LookPathFunc finds a command as exec.LookPath does.
type LookPathFunc func(name string) (string, error)

// LocateTools looks every entry of Tools up with lookPath (exec.LookPath when nil).
func LocateTools(lookPath LookPathFunc) []ToolStatus {
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	out := make([]ToolStatus, 0, len(Tools))
	for _, t := range Tools {
		s := ToolStatus{Tool: t}
		if p, err := lookPath(t.Name); err != nil {
			s.Error = err.Error()
		} else {
			s.Path = p
		}
		out = append(out, s)
	}
	return out
}
