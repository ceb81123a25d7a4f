package blockdev

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// LVM: a pool's slow disks are one volume group, and each volume carved from the pool is a
// logical volume of it. Every LVM command the engine runs is built here.

// lvmReportArgs make the reporting commands print JSON with sizes in bytes and no unit suffix.
var lvmReportArgs = []string{"--reportformat", "json", "--units", "b", "--nosuffix"}

// VolumeGroup is a volume group as vgs reports it.
type VolumeGroup struct {
	Name        string
	SizeBytes   int64
	FreeBytes   int64
	ExtentBytes int64
	PVCount     int
	LVCount     int
	Tags        string
}

// LogicalVolume is a logical volume as lvs reports it.
type LogicalVolume struct {
	Name      string
	VG        string
	Path      string
	SizeBytes int64
	Tags      string
	// Active says the kernel has the volume's device-mapper device.
	Active bool
}

// HasTag says whether the volume group carries tag.
func (vg VolumeGroup) HasTag(tag string) bool { return hasTag(vg.Tags, tag) }

// HasTag says whether the logical volume carries tag.
func (lv LogicalVolume) HasTag(tag string) bool { return hasTag(lv.Tags, tag) }

// hasTag reads LVM's comma-separated tag list.
func hasTag(tags, tag string) bool { return slices.Contains(strings.Split(tags, ","), tag) }

// PhysicalVolume is a physical volume as pvs reports it.
type PhysicalVolume struct {
	Path      string
	VG        string
	SizeBytes int64
}

// VolumeGroups reports the volume group named vg; none when it does not exist.
func (r Runner) VolumeGroups(ctx context.Context, vg string) ([]VolumeGroup, error) {
	out, err := r.Run(ctx, "vgs", append(append([]string{}, lvmReportArgs...),
		"--options", "vg_name,vg_size,vg_free,vg_extent_size,pv_count,lv_count,vg_tags", "--select", "vg_name="+vg)...)
	if err != nil {
		return nil, err
	}
	return ParseVGs(out)
}

// LogicalVolumes reports the logical volumes of the volume group vg.
func (r Runner) LogicalVolumes(ctx context.Context, vg string) ([]LogicalVolume, error) {
	out, err := r.Run(ctx, "lvs", append(append([]string{}, lvmReportArgs...),
		"--options", "lv_name,vg_name,lv_path,lv_size,lv_tags,lv_active", "--select", "vg_name="+vg)...)
	if err != nil {
		return nil, err
	}
	return ParseLVs(out)
}

// PhysicalVolumes reports every physical volume LVM sees, with the group it belongs to.
func (r Runner) PhysicalVolumes(ctx context.Context) ([]PhysicalVolume, error) {
	out, err := r.Run(ctx, "pvs", append(append([]string{}, lvmReportArgs...), "--options", "pv_name,vg_name,pv_size")...)
	if err != nil {
		return nil, err
	}
	return ParsePVs(out)
}

// CreatePhysicalVolume writes an LVM label on a whole disk.
func (r Runner) CreatePhysicalVolume(ctx context.Context, devPath string) error {
	_, err := r.Run(ctx, "pvcreate", devPath)
	return err
}

// CreateVolumeGroup makes the volume group vg of the physical volumes pvs, tagged tag.
func (r Runner) CreateVolumeGroup(ctx context.Context, vg, tag string, pvs ...string) error {
	_, err := r.Run(ctx, "vgcreate", append([]string{"--addtag", tag, vg}, pvs...)...)
	return err
}

// ExtendVolumeGroup adds the physical volume pv to vg.
func (r Runner) ExtendVolumeGroup(ctx context.Context, vg, pv string) error {
	_, err := r.Run(ctx, "vgextend", vg, pv)
	return err
}

// CreateLogicalVolume makes the logical volume vg/name of sizeBytes (LVM rounds up to its
// extent), tagged tag. --wipesignatures makes a new volume start blank even where an older
// one left a filesystem or a bcache superblock in the same extents.
func (r Runner) CreateLogicalVolume(ctx context.Context, vg, name string, sizeBytes int64, tag string) error {
	_, err := r.Run(ctx, "lvcreate", "--yes", "--wipesignatures", "y", "--zero", "y", "--addtag", tag,
		"--name", name, "--size", strconv.FormatInt(sizeBytes, 10)+"b", vg)
	return err
}

// ActivateLogicalVolume makes the kernel's device of vg/name, when LVM did not at boot.
func (r Runner) ActivateLogicalVolume(ctx context.Context, vg, name string) error {
	_, err := r.Run(ctx, "lvchange", "--activate", "y", vg+"/"+name)
	return err
}

// ExtendLogicalVolume grows vg/name to sizeBytes (rounded up to the extent).
func (r Runner) ExtendLogicalVolume(ctx context.Context, vg, name string, sizeBytes int64) error {
	_, err := r.Run(ctx, "lvextend", "--size", strconv.FormatInt(sizeBytes, 10)+"b", vg+"/"+name)
	return err
}

// RemoveLogicalVolume removes vg/name and every byte of data on it.
func (r Runner) RemoveLogicalVolume(ctx context.Context, vg, name string) error {
	_, err := r.Run(ctx, "lvremove", "--yes", vg+"/"+name)
	return err
}

// RemoveVolumeGroup removes the volume group vg, which must hold no logical volume.
func (r Runner) RemoveVolumeGroup(ctx context.Context, vg string) error {
	_, err := r.Run(ctx, "vgremove", vg)
	return err
}

// RemovePhysicalVolume erases the LVM label of a disk that belongs to no volume group.
func (r Runner) RemovePhysicalVolume(ctx context.Context, devPath string) error {
	_, err := r.Run(ctx, "pvremove", devPath)
	return err
}

// lvmReport is the JSON the LVM reporting commands print: one report, one list per object kind.
type lvmReport struct {
	Report []struct {
		VG []map[string]string `json:"vg"`
		LV []map[string]string `json:"lv"`
		PV []map[string]string `json:"pv"`
	} `json:"report"`
}

func parseLVMReport(out string) (lvmReport, error) {
	var rep lvmReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		return rep, fmt.Errorf("LVM report is not JSON: %w", err)
	}
	return rep, nil
}

// lvmRow reads the fields of one report row; the first field that is not a number where one is
// wanted is kept as the error.
type lvmRow struct {
	row map[string]string
	err error
}

func (r *lvmRow) str(name string) string { return r.row[name] }

func (r *lvmRow) int(name string) int64 {
	if r.err != nil {
		return 0
	}
	v, err := strconv.ParseInt(r.row[name], 10, 64)
	if err != nil {
		r.err = fmt.Errorf("LVM report: %s %q is not a whole number", name, r.row[name])
	}
	return v
}

// ParseVGs reads `vgs --reportformat json --units b --nosuffix`.
func ParseVGs(out string) ([]VolumeGroup, error) {
	rep, err := parseLVMReport(out)
	if err != nil {
		return nil, err
	}
	var vgs []VolumeGroup
	for _, r := range rep.Report {
		for _, row := range r.VG {
			f := &lvmRow{row: row}
			vg := VolumeGroup{Name: f.str("vg_name"), SizeBytes: f.int("vg_size"), FreeBytes: f.int("vg_free"),
				ExtentBytes: f.int("vg_extent_size"), PVCount: int(f.int("pv_count")), LVCount: int(f.int("lv_count")), Tags: f.str("vg_tags")}
			if f.err != nil {
				return nil, f.err
			}
			vgs = append(vgs, vg)
		}
	}
	return vgs, nil
}

// ParseLVs reads `lvs --reportformat json --units b --nosuffix`.
func ParseLVs(out string) ([]LogicalVolume, error) {
	rep, err := parseLVMReport(out)
	if err != nil {
		return nil, err
	}
	var lvs []LogicalVolume
	for _, r := range rep.Report {
		for _, row := range r.LV {
			f := &lvmRow{row: row}
			lv := LogicalVolume{Name: f.str("lv_name"), VG: f.str("vg_name"), Path: f.str("lv_path"), SizeBytes: f.int("lv_size"),
				Tags: f.str("lv_tags"), Active: f.str("lv_active") == "active"}
			if f.err != nil {
				return nil, f.err
			}
			lvs = append(lvs, lv)
		}
	}
	return lvs, nil
}

// ParsePVs reads `pvs --reportformat json --units b --nosuffix`.
func ParsePVs(out string) ([]PhysicalVolume, error) {
	rep, err := parseLVMReport(out)
	if err != nil {
		return nil, err
	}
	var pvs []PhysicalVolume
	for _, r := range rep.Report {
		for _, row := range r.PV {
			f := &lvmRow{row: row}
			pv := PhysicalVolume{Path: f.str("pv_name"), VG: f.str("vg_name"), SizeBytes: f.int("pv_size")}
			if f.err != nil {
				return nil, f.err
			}
			pvs = append(pvs, pv)
		}
	}
	return pvs, nil
}
