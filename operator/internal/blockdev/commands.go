package blockdev

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// The disk commands the engine and the durability checks run, each with its arguments built
// here and nowhere else, so that what flashcache may do to a disk can be read in one file.

// Discard tells the device that every block is free (TRIM, whole device), so an SSD's spare
// area is known to it as unused. Large, slow SSDs take minutes: timeout bounds it.
func (r Runner) Discard(ctx context.Context, devPath string, timeout time.Duration) error {
	long := r
	long.Timeout = timeout
	_, err := long.Run(ctx, "blkdiscard", "--force", devPath)
	return err
}

// ZeroRange writes zeros over length bytes of a device from offset (the kernel's BLKZEROOUT,
// which writes the zeros itself on a disk that cannot), waiting until they are written.
func (r Runner) ZeroRange(ctx context.Context, devPath string, offset, length int64) error {
	_, err := r.Run(ctx, "blkdiscard", "--zeroout", "--force", "--offset", strconv.FormatInt(offset, 10),
		"--length", strconv.FormatInt(length, 10), devPath)
	return err
}

// ZapPartitionTable erases the GPT and MBR structures of a disk.
func (r Runner) ZapPartitionTable(ctx context.Context, devPath string) error {
	_, err := r.Run(ctx, "sgdisk", "--zap-all", devPath)
	return err
}

// CreatePartition writes partition 1 from startSector to endSector (inclusive), Linux filesystem
// type, named name.
func (r Runner) CreatePartition(ctx context.Context, devPath string, startSector, endSector int64, name string) error {
	_, err := r.Run(ctx, "sgdisk", fmt.Sprintf("--new=1:%d:%d", startSector, endSector), "--typecode=1:8300", "--change-name=1:"+name, devPath)
	return err
}

// RereadPartitionTable makes the kernel read the disk's partition table again.
func (r Runner) RereadPartitionTable(ctx context.Context, devPath string) error {
	_, err := r.Run(ctx, "blockdev", "--rereadpt", devPath)
	return err
}

// MakeBcache are make-bcache's options: a cache device, a backing device, or both (one cache
// set). Empty fields are left out.
type MakeBcache struct {
	CacheDevPath      string
	ReplacementPolicy string // lru or fifo: make-bcache knows no other
	// BucketBytes is the cache device's bucket size; 0 leaves make-bcache's own (512 KiB).
	BucketBytes    int64
	BackingDevPath string
	// DataOffsetSectors is where the backing device's data starts.
	DataOffsetSectors int
	CacheSetUUID      string
}

// MakeBcache writes bcache superblocks.
func (r Runner) MakeBcache(ctx context.Context, m MakeBcache) error {
	var args []string
	if m.CacheDevPath != "" {
		if m.BucketBytes > 0 {
			args = append(args, "--bucket", strconv.FormatInt(m.BucketBytes, 10))
		}
		args = append(args, "--cache_replacement_policy="+m.ReplacementPolicy, "-C", m.CacheDevPath)
	}
	if m.BackingDevPath != "" {
		args = append(args, "--data-offset", strconv.Itoa(m.DataOffsetSectors), "-B", m.BackingDevPath)
	}
	if m.CacheSetUUID != "" {
		args = append(args, "--cset-uuid", m.CacheSetUUID)
	}
	_, err := r.Run(ctx, "make-bcache", args...)
	return err
}

// WipeSignatures erases every signature wipefs knows on a device (filesystems, partition
// tables, RAID, LVM, bcache). force erases them even from a disk with partitions.
func (r Runner) WipeSignatures(ctx context.Context, devPath string, force bool) error {
	args := []string{"--all"}
	if force {
		args = append(args, "--force")
	}
	_, err := r.Run(ctx, "wipefs", append(args, devPath)...)
	return err
}

// WipeBcacheSignature erases only bcache's superblock signature.
func (r Runner) WipeBcacheSignature(ctx context.Context, devPath string) error {
	_, err := r.Run(ctx, "wipefs", "--all", "--types", "bcache", devPath)
	return err
}

// ForgetPartitions makes the kernel drop a disk's partitions.
func (r Runner) ForgetPartitions(ctx context.Context, devPath string) error {
	_, err := r.Run(ctx, "partx", "--delete", devPath)
	return err
}

// SmartJSON is smartctl's whole report of a disk, as JSON. smartctl's exit status is a bit mask
// that is non-zero for a worn or failing device, so its output is what counts.
func (r Runner) SmartJSON(ctx context.Context, diskPath string) (string, error) {
	return r.Run(ctx, "smartctl", "--json", "--all", diskPath)
}

// NVMeIdentifyController is `nvme id-ctrl` as JSON.
func (r Runner) NVMeIdentifyController(ctx context.Context, ctrlPath string) (string, error) {
	return r.Run(ctx, "nvme", "id-ctrl", ctrlPath, "--output-format=json")
}

// NVMeGetFeature reads one NVMe feature (6 is the volatile write cache).
func (r Runner) NVMeGetFeature(ctx context.Context, ctrlPath string, feature int) (string, error) {
	return r.Run(ctx, "nvme", "get-feature", ctrlPath, "--feature-id="+strconv.Itoa(feature))
}

// SCSIWriteCacheEnabled is sdparm's report of the WCE bit of a SCSI or SATA disk.
func (r Runner) SCSIWriteCacheEnabled(ctx context.Context, diskPath string) (string, error) {
	return r.Run(ctx, "sdparm", "--get=WCE", diskPath)
}

// ATAWriteCache is hdparm's report of an ATA disk's write cache.
func (r Runner) ATAWriteCache(ctx context.Context, diskPath string) (string, error) {
	return r.Run(ctx, "hdparm", "-W", diskPath)
}
