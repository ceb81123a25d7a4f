package blockdev

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// SuperBlock is what bcache-super-show reports about a bcache superblock.
type SuperBlock struct {
	// Fields holds every "key value" line as printed, e.g. "dev.uuid" -> "4b8a...".
	Fields map[string]string
}

// IsCache says whether the superblock is a cache device's (as opposed to a backing device's).
func (s SuperBlock) IsCache() bool { return strings.Contains(s.Fields["sb.version"], "[cache device]") }

// UUID is the device's own UUID.
func (s SuperBlock) UUID() string { return s.Fields["dev.uuid"] }

// SetUUID is the cache set the device belongs to (a backing device: the set it is attached to).
func (s SuperBlock) SetUUID() string { return s.Fields["cset.uuid"] }

// Label is the backing device's label; bcache-super-show prints "(empty)" for none.
func (s SuperBlock) Label() string {
	if l := s.Fields["dev.label"]; l != "(empty)" {
		return l
	}
	return ""
}

// DataOffsetBytes is where a backing device's data starts (the filesystem on the bcache device
// is this far into the backing device).
func (s SuperBlock) DataOffsetBytes() (int64, error) {
	return s.sectorsAsBytes("dev.data.first_sector")
}

// BucketBytes is a cache device's bucket size, which make-bcache wrote and the kernel keeps.
func (s SuperBlock) BucketBytes() (int64, error) { return s.sectorsAsBytes("dev.sectors_per_bucket") }

// sectorsAsBytes reads a field that counts 512-byte sectors.
func (s SuperBlock) sectorsAsBytes(key string) (int64, error) {
	v := s.Fields[key]
	sectors, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", key, v, err)
	}
	return sectors * 512, nil
}

// ParseSuperShow parses the output of bcache-super-show.
func ParseSuperShow(out string) (SuperBlock, error) {
	sb := SuperBlock{Fields: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		key, value, ok := strings.Cut(line, "\t")
		if !ok {
			key, value, ok = strings.Cut(line, " ")
		}
		if !ok {
			continue
		}
		sb.Fields[strings.TrimSpace(key)] = strings.TrimSpace(value)
	}
	if sb.Fields["sb.magic"] != "ok" {
		return sb, fmt.Errorf("not a bcache superblock (sb.magic %q)", sb.Fields["sb.magic"])
	}
	return sb, nil
}

// ActiveChoice returns the bracketed entry of a sysfs choice list such as
// "writethrough [writeback] writearound none".
func ActiveChoice(s string) (string, error) {
	for _, f := range strings.Fields(s) {
		if strings.HasPrefix(f, "[") && strings.HasSuffix(f, "]") {
			return strings.Trim(f, "[]"), nil
		}
	}
	return "", fmt.Errorf("no active choice in %q", strings.TrimSpace(s))
}

// ParseHumanSize parses bcache's human-readable sizes ("0.0k", "512", "1.2M", "3.1G") into bytes.
// bcache prints one digit after the point, so the result can be short by a tenth of the unit.
func ParseHumanSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty size")
	}
	const units = "kMGTPEZY"
	mult := int64(1)
	if i := strings.IndexByte(units, s[len(s)-1]); i >= 0 {
		mult = int64(1) << (10 * (i + 1))
		s = s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q is not a non-negative number", s)
	}
	return int64(v * float64(mult)), nil
}

// ParseUnusedPercent reads the "Unused:" line of a cache device's priority_stats: the share of
// its buckets that hold no data. bcache counts a bucket as used from the moment it is allocated.
func ParseUnusedPercent(priorityStats string) (int, error) {
	for _, line := range strings.Split(priorityStats, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != "Unused" {
			continue
		}
		percent, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(value), "%"))
		if err != nil || percent < 0 || percent > 100 {
			return 0, fmt.Errorf("priority_stats: Unused %q is not a percentage", strings.TrimSpace(value))
		}
		return percent, nil
	}
	return 0, fmt.Errorf("priority_stats has no Unused line")
}

// Signature is one thing wipefs finds on a device: a filesystem, a partition table, LVM, bcache.
type Signature struct {
	Type   string `json:"type"`
	Offset string `json:"offset"`
	Label  string `json:"label"`
	UUID   string `json:"uuid"`
	Usage  string `json:"usage"`
}

// ParseWipefsJSON parses `wipefs --no-act --json DEV`; wipefs prints nothing for a blank device.
func ParseWipefsJSON(out string) ([]Signature, error) {
	if strings.TrimSpace(out) == "" {
		return nil, nil
	}
	var doc struct {
		Signatures []Signature `json:"signatures"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, fmt.Errorf("parsing wipefs output: %w", err)
	}
	return doc.Signatures, nil
}

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	MajorMinor string
	MountPoint string
	Source     string
}

// ParseMountInfo parses /proc/self/mountinfo.
func ParseMountInfo(s string) []Mount {
	var mounts []Mount
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+2 >= len(f) {
			continue
		}
		mounts = append(mounts, Mount{MajorMinor: f[2], MountPoint: unescapeMount(f[4]), Source: unescapeMount(f[sep+2])})
	}
	return mounts
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo fields.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseSfdiskFirstName returns the name of the partition that starts first in `sfdisk --json`
// output ("" when there is none or it has no name).
func ParseSfdiskFirstName(out string) (string, error) {
	var doc struct {
		PartitionTable struct {
			Partitions []struct {
				Start int64  `json:"start"`
				Name  string `json:"name"`
			} `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return "", fmt.Errorf("parsing sfdisk output: %w", err)
	}
	name, first := "", int64(-1)
	for _, p := range doc.PartitionTable.Partitions {
		if first < 0 || p.Start < first {
			name, first = p.Name, p.Start
		}
	}
	return name, nil
}
