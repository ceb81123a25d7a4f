package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/engine"
)

// Node is the CSI node service, in the agent: it stages a claimed volume's bcache device (a
// filesystem made only on a blank device, then mounted), publishes it into pods, grows the
// filesystem after an expansion, and reports usage. The agent builds the device itself, as for
// any FlashCacheVolume; staging waits for it.
type Node struct {
	csi.UnimplementedNodeServer
	NodeName string
	// Client reads volumes from the agent's cache; APIReader, when set, reads one the cache has
	// not seen yet from the API server: a volume may be staged moments after CreateVolume wrote it.
	Client    client.Reader
	APIReader client.Reader
	Runner    blockdev.Runner
	Log       logr.Logger
}

// volume reads the FlashCacheVolume of a CSI volume ID: NotFound, Unavailable, or the volume.
func (n *Node) volume(ctx context.Context, id string) (*fcv1.FlashCacheVolume, error) {
	var fcv fcv1.FlashCacheVolume
	err := n.Client.Get(ctx, client.ObjectKey{Name: id}, &fcv)
	if apierrors.IsNotFound(err) && n.APIReader != nil {
		err = n.APIReader.Get(ctx, client.ObjectKey{Name: id}, &fcv)
	}
	if apierrors.IsNotFound(err) {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "reading FlashCacheVolume %s: %v", id, err)
	}
	return &fcv, nil
}

func (n *Node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             n.NodeName,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{TopologyNodeKey: n.NodeName}},
	}, nil
}

func (n *Node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// builtVolume is the claimed volume on this node once the agent has built it at its full size,
// with its device's stable path; otherwise an error the kubelet retries on.
func (n *Node) builtVolume(ctx context.Context, id string) (*fcv1.FlashCacheVolume, string, error) {
	if id == "" {
		return nil, "", status.Error(codes.InvalidArgument, "volume_id is required")
	}
	fcv, err := n.volume(ctx, id)
	if err != nil {
		return nil, "", err
	}
	if fcv.Spec.NodeName != n.NodeName {
		return nil, "", status.Errorf(codes.FailedPrecondition, "volume %s is on node %s, not %s", id, fcv.Spec.NodeName, n.NodeName)
	}
	c := meta.FindStatusCondition(fcv.Status.Conditions, fcv1.ConditionProvisioned)
	if c == nil || c.Status != metav1.ConditionTrue || fcv.Status.Device == nil || fcv.Status.Device.Capacity == nil {
		why := "not built yet"
		if c != nil {
			why = c.Reason + ": " + c.Message
		}
		return nil, "", status.Errorf(codes.Unavailable, "volume %s is %s", id, why)
	}
	// An expansion is offline: the agent grows the device while nothing uses it, so a volume
	// still at its old size is not staged until it has.
	if fcv.Spec.Pool != nil && fcv.Status.Device.Capacity.Cmp(fcv.Spec.Pool.Size) < 0 {
		return nil, "", status.Errorf(codes.Unavailable, "volume %s is being grown from %s to %s; it is staged once it has", id,
			fcv.Status.Device.Capacity.String(), fcv.Spec.Pool.Size.String())
	}
	device := engine.Volume{Name: fcv.Name}.StablePath()
	if _, err := os.Stat(device); err != nil {
		return nil, "", status.Errorf(codes.Unavailable, "volume %s: device %s: %v", id, device, err)
	}
	return fcv, device, nil
}

func (n *Node) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is required")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	_, device, err := n.builtVolume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	mnt := req.GetVolumeCapability().GetMount()
	if mnt == nil {
		// A block volume is published straight from the device.
		return &csi.NodeStageVolumeResponse{}, nil
	}
	target := req.GetStagingTargetPath()
	if mounted, err := isMountPoint(target); err != nil {
		return nil, err
	} else if mounted {
		return &csi.NodeStageVolumeResponse{}, nil
	}
	fsType := mnt.GetFsType()
	if fsType == "" {
		fsType = fsTypes[0]
	}
	// A filesystem is made only on a blank device: one that carries anything else (another
	// filesystem, a partition table) is refused, never formatted.
	sigs, err := n.Runner.Signatures(ctx, device)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "staging volume %s: %v", req.GetVolumeId(), err)
	}
	switch {
	case len(sigs) == 0:
		if err := n.Runner.MakeFilesystem(ctx, fsType, device); err != nil {
			return nil, status.Errorf(codes.Internal, "staging volume %s: %v", req.GetVolumeId(), err)
		}
		n.Log.Info("filesystem made on a blank volume", "volume", req.GetVolumeId(), "device", device, "fsType", fsType)
	case len(sigs) > 1 || sigs[0].Type != fsType:
		var found []string
		for _, s := range sigs {
			found = append(found, s.Type)
		}
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s (%s) carries %v, not a %s filesystem: it is not formatted, and not mounted", req.GetVolumeId(), device, found, fsType)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "staging volume %s: %v", req.GetVolumeId(), err)
	}
	if err := blockdev.MountAt(device, target, fsType, mnt.GetMountFlags()); err != nil {
		return nil, status.Errorf(codes.Internal, "staging volume %s: %v", req.GetVolumeId(), err)
	}
	n.Log.Info("volume staged", "volume", req.GetVolumeId(), "device", device, "path", target, "fsType", fsType)
	return &csi.NodeStageVolumeResponse{}, nil
}

func (n *Node) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	if err := blockdev.Unmount(req.GetStagingTargetPath()); err != nil {
		return nil, status.Errorf(codes.Internal, "unstaging volume %s: %v", req.GetVolumeId(), err)
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (n *Node) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	_, device, err := n.builtVolume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	options := []string{"bind"}
	if req.GetReadonly() {
		options = append(options, "ro")
	}
	source := req.GetStagingTargetPath()
	if req.GetVolumeCapability().GetBlock() != nil {
		// The device itself, bound onto a file the kubelet gives the pod.
		source = device
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "publishing %s: %v", target, err)
		}
		f, err := os.OpenFile(target, os.O_CREATE, 0o660)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "publishing %s: %v", target, err)
		}
		_ = f.Close()
	} else {
		if source == "" {
			return nil, status.Error(codes.InvalidArgument, "staging_target_path is required: a filesystem is mounted once at staging")
		}
		if err := os.MkdirAll(target, 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "publishing %s: %v", target, err)
		}
		options = append(options, req.GetVolumeCapability().GetMount().GetMountFlags()...)
	}
	if mounted, err := isMountPoint(target); err != nil {
		return nil, err
	} else if mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := blockdev.MountAt(source, target, "", options); err != nil {
		return nil, status.Errorf(codes.Internal, "publishing volume %s: %v", req.GetVolumeId(), err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *Node) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	if err := blockdev.Unmount(req.GetTargetPath()); err != nil {
		return nil, status.Errorf(codes.Internal, "unpublishing volume %s: %v", req.GetVolumeId(), err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (n *Node) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	fcv, device, err := n.builtVolume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	size := fcv.Status.Device.Capacity.Value()
	if req.GetVolumeCapability().GetBlock() != nil {
		return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
	}
	sigs, err := n.Runner.Signatures(ctx, device)
	if err != nil || len(sigs) != 1 {
		return nil, status.Errorf(codes.Internal, "growing volume %s: its filesystem: %v %v", fcv.Name, sigs, err)
	}
	if err := n.Runner.GrowFilesystem(ctx, sigs[0].Type, device, req.GetVolumePath()); err != nil {
		return nil, status.Errorf(codes.Internal, "growing volume %s: %v", fcv.Name, err)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

func (n *Node) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path are required")
	}
	fcv, err := n.volume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if info, err := os.Stat(req.GetVolumePath()); err == nil && !info.IsDir() && fcv.Status.Device != nil && fcv.Status.Device.Capacity != nil {
		// A block volume: the file the device is bound onto; its size is the device's.
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: fcv.Status.Device.Capacity.Value()}}}, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(req.GetVolumePath(), &st); errors.Is(err, unix.ENOENT) {
		return nil, status.Errorf(codes.NotFound, "volume path %s: %v", req.GetVolumePath(), err)
	} else if err != nil {
		return nil, status.Errorf(codes.Internal, "volume path %s: %v", req.GetVolumePath(), err)
	}
	bsize := int64(st.Bsize)
	usage := []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bsize, Available: int64(st.Bavail) * bsize, Used: int64(st.Blocks-st.Bfree) * bsize},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: usage}, nil
}

func isMountPoint(path string) (bool, error) {
	mounted, err := blockdev.IsMountPoint(path)
	if err != nil {
		return false, status.Errorf(codes.Internal, "%s: %v", path, err)
	}
	return mounted, nil
}
