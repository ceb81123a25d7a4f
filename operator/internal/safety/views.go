package safety

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// KernelViewOf reads what the block layer believes about a device.
// nvmeFeatureVolatileWriteCache is NVMe's feature 0x06.
const nvmeFeatureVolatileWriteCache = 6

func KernelViewOf(d blockdev.Device) KernelView {
	return KernelView{WriteCache: d.WriteCache, FUA: d.FUA, Rotational: d.Rotational, DiscardMaxBytes: d.DiscardMaxBytes}
}

// DeviceViewOf asks the device about its volatile write cache: nvme-cli for NVMe, sdparm for
// SCSI and SATA (through the kernel's SCSI translation), hdparm for ATA as a last resort.
func DeviceViewOf(ctx context.Context, r blockdev.Runner, d blockdev.Device) DeviceView {
	disk := d.Disk()
	if strings.HasPrefix(disk, "nvme") {
		ctrl := "/dev/" + nvmeController(disk)
		idCtrl, err1 := r.NVMeIdentifyController(ctx, ctrl)
		feature, err2 := r.NVMeGetFeature(ctx, ctrl, nvmeFeatureVolatileWriteCache)
		if err1 == nil && err2 == nil {
			if v, err := ParseNVMe(idCtrl, feature); err == nil {
				return v
			}
		}
		return DeviceView{Detail: fmt.Sprintf("nvme-cli could not read %s: %v %v", ctrl, err1, err2)}
	}
	// sdparm exits non-zero when a device lacks saved values (QEMU's disks do) but still
	// prints the current one, so its output is read whatever it exits with.
	out, _ := r.SCSIWriteCacheEnabled(ctx, "/dev/"+disk)
	if v, err := ParseSdparmWCE(out); err == nil {
		return v
	}
	if out, err := r.ATAWriteCache(ctx, "/dev/"+disk); err == nil {
		if v, err := ParseHdparmW(out); err == nil {
			return v
		}
	}
	return DeviceView{Detail: "neither sdparm nor hdparm reported the write cache of /dev/" + disk}
}

var nvmeNamespace = regexp.MustCompile(`^(nvme[0-9]+)(c[0-9]+)?n[0-9]+$`)

// nvmeController maps a namespace (nvme0n1) to its controller (nvme0).
func nvmeController(namespace string) string {
	if m := nvmeNamespace.FindStringSubmatch(namespace); m != nil {
		return m[1]
	}
	return namespace
}

func boolPtr(b bool) *bool { return &b }

// ParseSdparmWCE parses `sdparm --get=WCE DEV`: "WCE  1  [cha: y, def:  1, sav:  1]".
func ParseSdparmWCE(out string) (DeviceView, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "WCE" {
			continue
		}
		v := DeviceView{Source: "sdparm WCE", VolatileCache: boolPtr(f[1] == "1"), Detail: strings.TrimSpace(line)}
		if i := strings.Index(line, "cha:"); i >= 0 {
			rest := strings.TrimSpace(line[i+len("cha:"):])
			v.Changeable = boolPtr(strings.HasPrefix(rest, "y"))
		}
		return v, nil
	}
	return DeviceView{}, fmt.Errorf("no WCE line in sdparm output")
}

// ParseHdparmW parses `hdparm -W DEV`: " write-caching =  1 (on)".
func ParseHdparmW(out string) (DeviceView, error) {
	for _, line := range strings.Split(out, "\n") {
		_, val, ok := strings.Cut(line, "write-caching =")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		if strings.HasPrefix(val, "not supported") {
			return DeviceView{}, fmt.Errorf("hdparm: write-caching not supported")
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			break
		}
		return DeviceView{Source: "hdparm -W", VolatileCache: boolPtr(f[0] == "1"), Detail: strings.TrimSpace(line)}, nil
	}
	return DeviceView{}, fmt.Errorf("no write-caching line in hdparm output")
}

// ParseNVMe reads the volatile write cache from `nvme id-ctrl -o json` (vwc bit 0: present) and
// `nvme get-feature -f 6` ("Current value:0x00000001": enabled).
func ParseNVMe(idCtrlJSON, feature string) (DeviceView, error) {
	var id struct {
		VWC *int `json:"vwc"`
	}
	if err := json.Unmarshal([]byte(idCtrlJSON), &id); err != nil || id.VWC == nil {
		return DeviceView{}, fmt.Errorf("nvme id-ctrl: no vwc field (%v)", err)
	}
	v := DeviceView{Source: "nvme id-ctrl vwc, feature 0x06"}
	if *id.VWC&1 == 0 {
		v.VolatileCache = boolPtr(false)
		v.Changeable = boolPtr(false)
		v.Detail = "no volatile write cache (vwc bit 0 clear)"
		return v, nil
	}
	_, val, ok := strings.Cut(feature, "Current value:")
	if !ok {
		return DeviceView{}, fmt.Errorf("nvme get-feature 6: no current value in %q", strings.TrimSpace(feature))
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(strings.Fields(val)[0], "0x"), 16, 32)
	if err != nil {
		return DeviceView{}, fmt.Errorf("nvme get-feature 6: %w", err)
	}
	v.VolatileCache = boolPtr(n&1 == 1)
	v.Changeable = boolPtr(true)
	v.Detail = fmt.Sprintf("volatile write cache present, feature 0x06 = %#x", n)
	return v, nil
}
