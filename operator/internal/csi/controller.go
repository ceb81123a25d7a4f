package csi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/engine"
)

const (
	// extentBytes is the volume group's extent: a volume's size is rounded up to it, as lvcreate
	// would, so that the capacity the claim sees is the one it gets.
	extentBytes = engine.PoolExtentBytes
	// minVolumeBytes and defaultVolumeBytes: the API's smallest pool.size, and what a claim that
	// asks for no size gets.
	minVolumeBytes     = 64 << 20
	defaultVolumeBytes = 1 << 30
)

// +kubebuilder:rbac:groups=flashcache.io,resources=flashcachevolumes,verbs=get;list;create;patch;delete
// +kubebuilder:rbac:groups=flashcache.io,resources=flashcachepools,verbs=get;list

// Controller is the CSI controller service: CreateVolume writes a FlashCacheVolume carved from a
// pool with room on the claim's node, DeleteVolume deletes it (the agent flushes it and tears it
// down), ControllerExpandVolume grows it, GetCapacity says what a node's pools have free.
type Controller struct {
	csi.UnimplementedControllerServer
	Client client.Client
	Log    logr.Logger
	// carving serialises choosing a pool and writing the volume, so that two claims are never
	// given the same free space. Free space is counted from the volumes' specs, not from the
	// agent's last report, for the same reason.
	carving sync.Mutex
}

// capabilities the driver serves: one node writes, as a bcache device is one node's.
var accessModes = []csi.VolumeCapability_AccessMode_Mode{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
}

// fsTypes are the filesystems NodeStageVolume makes; "" takes the first.
var fsTypes = []string{"xfs", "ext4"}

func (c *Controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkCapabilities refuses what a bcache device on one node cannot be.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume_capabilities: at least one is required")
	}
	for _, c := range caps {
		if c.GetAccessMode() == nil || !slices.Contains(accessModes, c.GetAccessMode().GetMode()) {
			return status.Errorf(codes.InvalidArgument, "volume_capabilities: access mode %s: a flashcache volume is one node's (ReadWriteOnce or ReadWriteOncePod)", c.GetAccessMode().GetMode())
		}
		switch {
		case c.GetBlock() != nil:
		case c.GetMount() != nil:
			if fs := c.GetMount().GetFsType(); fs != "" && !slices.Contains(fsTypes, fs) {
				return status.Errorf(codes.InvalidArgument, "volume_capabilities: fsType %q: flashcache makes %s", fs, strings.Join(fsTypes, " or "))
			}
		default:
			return status.Error(codes.InvalidArgument, "volume_capabilities: neither block nor mount")
		}
	}
	return nil
}

// smallestFilesystem is the smallest device each filesystem NodeStageVolume makes can be made
// on: mkfs.xfs refuses one under 300 MiB (xfsprogs 5.19 and later).
var smallestFilesystem = map[string]int64{"xfs": 300 << 20, "ext4": minVolumeBytes}

// smallestFor is the smallest volume that every capability asked for can be: the pool's smallest
// for a block volume or ext4, 300 MiB for XFS, the default filesystem.
func smallestFor(caps ...*csi.VolumeCapability) int64 {
	least := int64(minVolumeBytes)
	for _, c := range caps {
		if m := c.GetMount(); m != nil {
			fs := m.GetFsType()
			if fs == "" {
				fs = fsTypes[0]
			}
			least = max(least, smallestFilesystem[fs])
		}
	}
	return least
}

// requestedBytes is the size a capacity range asks for, rounded up to the extent and at least
// least, or an error when the limit leaves no such size.
func requestedBytes(r *csi.CapacityRange, least int64) (int64, error) {
	want := max(r.GetRequiredBytes(), 0)
	if want == 0 {
		want = defaultVolumeBytes
		if l := r.GetLimitBytes(); l > 0 && l < want {
			want = l
		}
	}
	want = max(want, least)
	want = (want + extentBytes - 1) / extentBytes * extentBytes
	if l := r.GetLimitBytes(); l > 0 && want > l {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range: %d bytes rounded up to the 4 MiB extent and the smallest volume of this kind (%s) is %d, over the limit %d",
			r.GetRequiredBytes(), quantity(least), want, l)
	}
	return want, nil
}

func (c *Controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name, err := volumeName(req.GetName())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume_content_source: flashcache makes no snapshots or clones")
	}
	size, err := requestedBytes(req.GetCapacityRange(), smallestFor(req.GetVolumeCapabilities()...))
	if err != nil {
		return nil, err
	}
	spec, err := specFromParameters(req.GetParameters())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	c.carving.Lock()
	defer c.carving.Unlock()
	var fcv fcv1.FlashCacheVolume
	err = c.Client.Get(ctx, client.ObjectKey{Name: name}, &fcv)
	switch {
	case apierrors.IsNotFound(err):
		pool, err := c.choosePool(ctx, nodesOf(req.GetAccessibilityRequirements()), size)
		if err != nil {
			return nil, err
		}
		spec.NodeName = pool.Spec.NodeName
		spec.Pool = &fcv1.PoolVolumeSource{Name: pool.Name, Size: *resource.NewQuantity(size, resource.BinarySI)}
		fcv = fcv1.FlashCacheVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{fcv1.AnnotationProvisionedBy: DriverName}},
			Spec:       spec,
		}
		if claim := req.GetParameters()[paramClaimName]; claim != "" {
			fcv.Annotations[fcv1.AnnotationClaim] = req.GetParameters()[paramClaimNamespace] + "/" + claim
		}
		if name != req.GetName() {
			fcv.Annotations[fcv1.AnnotationCSIName] = req.GetName()
		}
		if err := c.Client.Create(ctx, &fcv); err != nil {
			if apierrors.IsInvalid(err) {
				return nil, status.Errorf(codes.InvalidArgument, "StorageClass parameters: %v", err)
			}
			return nil, status.Errorf(codes.Unavailable, "creating FlashCacheVolume %s: %v", name, err)
		}
		c.Log.Info("volume carved for a claim", "volume", name, "node", spec.NodeName, "pool", pool.Name, "bytes", size, "claim", fcv.Annotations[fcv1.AnnotationClaim])
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "reading FlashCacheVolume %s: %v", name, err)
	default:
		// The provisioner asks again after a timeout: the same name is the same volume, if it
		// is the one asked for.
		if fcv.Annotations[fcv1.AnnotationProvisionedBy] != DriverName || fcv.Spec.Pool == nil {
			return nil, status.Errorf(codes.AlreadyExists, "FlashCacheVolume %s exists and was not made by %s", name, DriverName)
		}
		if made := fcv.Annotations[fcv1.AnnotationCSIName]; name != req.GetName() && made != req.GetName() {
			return nil, status.Errorf(codes.AlreadyExists, "FlashCacheVolume %s was made for the CSI name %q, not %q", name, made, req.GetName())
		}
		if fcv.Spec.Pool.Size.Value() != size {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %s, not the %d bytes asked for", name, fcv.Spec.Pool.Size.String(), size)
		}
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           name,
		CapacityBytes:      size,
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{TopologyNodeKey: fcv.Spec.NodeName}}},
		VolumeContext:      map[string]string{"pool": fcv.Spec.Pool.Name, "node": fcv.Spec.NodeName},
	}}, nil
}

// nodesOf lists the nodes a volume may be on, preferred first, from the claim's topology (with
// WaitForFirstConsumer the scheduler's pick leads the preferred list); empty means any node.
func nodesOf(req *csi.TopologyRequirement) []string {
	var nodes []string
	for _, t := range append(req.GetPreferred(), req.GetRequisite()...) {
		if n := t.GetSegments()[TopologyNodeKey]; n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// poolSpace is a pool's room as the driver counts it.
type poolSpace struct {
	pool *fcv1.FlashCachePool
	// free is the pool's capacity less every carved volume's size, whether the agent has built
	// it yet or not.
	free int64
}

// poolSpaces are the Ready pools, with their free space, on the given nodes (all when empty),
// and a line for each pool that is not Ready, to say why a claim found no room.
func (c *Controller) poolSpaces(ctx context.Context, nodes []string) ([]poolSpace, []string, error) {
	var pools fcv1.FlashCachePoolList
	if err := c.Client.List(ctx, &pools); err != nil {
		return nil, nil, status.Errorf(codes.Unavailable, "listing FlashCachePools: %v", err)
	}
	var volumes fcv1.FlashCacheVolumeList
	if err := c.Client.List(ctx, &volumes); err != nil {
		return nil, nil, status.Errorf(codes.Unavailable, "listing FlashCacheVolumes: %v", err)
	}
	used := map[string]int64{}
	for _, v := range volumes.Items {
		if v.Spec.Pool != nil {
			used[v.Spec.Pool.Name] += engine.CarvedBackingBytes(v.Spec.Pool.Size.Value())
		}
	}
	var spaces []poolSpace
	var notReady []string
	for i := range pools.Items {
		p := &pools.Items[i]
		if len(nodes) > 0 && !slices.Contains(nodes, p.Spec.NodeName) {
			continue
		}
		if p.Status.Phase != fcv1.PoolPhaseReady || p.Status.Capacity == nil || p.DeletionTimestamp != nil {
			notReady = append(notReady, fmt.Sprintf("pool %s on %s is %s", p.Name, p.Spec.NodeName, orUnknown(string(p.Status.Phase))))
			continue
		}
		spaces = append(spaces, poolSpace{pool: p, free: p.Status.Capacity.Value() - used[p.Name]})
	}
	return spaces, notReady, nil
}

func orUnknown(phase string) string {
	if phase == "" {
		return "not reported yet"
	}
	return phase
}

// choosePool picks, on the first node in order that has one, the Ready pool with the most free
// space that holds size; or says, pool by pool, why none does.
func (c *Controller) choosePool(ctx context.Context, nodes []string, size int64) (*fcv1.FlashCachePool, error) {
	spaces, notReady, err := c.poolSpaces(ctx, nodes)
	if err != nil {
		return nil, err
	}
	order := nodes
	if len(order) == 0 {
		for _, s := range spaces {
			if !slices.Contains(order, s.pool.Spec.NodeName) {
				order = append(order, s.pool.Spec.NodeName)
			}
		}
	}
	var why []string
	for _, node := range order {
		var best *poolSpace
		for i := range spaces {
			s := &spaces[i]
			if s.pool.Spec.NodeName != node {
				continue
			}
			if s.free < engine.CarvedBackingBytes(size) {
				why = append(why, fmt.Sprintf("pool %s on %s has %s free", s.pool.Name, node, quantity(max(s.free, 0))))
				continue
			}
			if best == nil || s.free > best.free || (s.free == best.free && s.pool.Name < best.pool.Name) {
				best = s
			}
		}
		if best != nil {
			return best.pool, nil
		}
	}
	why = append(why, notReady...)
	where := "any node"
	if len(nodes) > 0 {
		where = "node " + strings.Join(nodes, ", ")
	}
	if len(why) == 0 {
		why = []string{"there is no FlashCachePool there"}
	}
	return nil, status.Errorf(codes.ResourceExhausted, "no FlashCachePool on %s has %s free for this claim: %s", where, quantity(size), strings.Join(why, "; "))
}

func quantity(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}

func (c *Controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	fcv, err := c.ownVolume(ctx, req.GetVolumeId())
	if errors.Is(err, errNoVolume) {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if fcv.DeletionTimestamp == nil {
		if err := c.Client.Delete(ctx, fcv); err != nil && !apierrors.IsNotFound(err) {
			return nil, status.Errorf(codes.Unavailable, "deleting FlashCacheVolume %s: %v", fcv.Name, err)
		}
		c.Log.Info("volume deleted for its claim: the agent flushes it and gives its space back", "volume", fcv.Name)
	}
	// Done only once the agent has flushed and torn it down and its space is free again; the
	// provisioner asks again until then.
	if err := c.Client.Get(ctx, client.ObjectKey{Name: fcv.Name}, fcv); apierrors.IsNotFound(err) {
		return &csi.DeleteVolumeResponse{}, nil
	}
	return nil, status.Errorf(codes.Unavailable, "FlashCacheVolume %s is being flushed and torn down on %s (phase %s)", fcv.Name, fcv.Spec.NodeName, orUnknown(string(fcv.Status.Phase)))
}

var errNoVolume = errors.New("no such volume")

// ownVolume reads a volume the driver made; a hand-written FlashCacheVolume of that name is
// refused, never changed or deleted through a claim.
func (c *Controller) ownVolume(ctx context.Context, id string) (*fcv1.FlashCacheVolume, error) {
	var fcv fcv1.FlashCacheVolume
	if err := c.Client.Get(ctx, client.ObjectKey{Name: id}, &fcv); apierrors.IsNotFound(err) {
		return nil, errNoVolume
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "reading FlashCacheVolume %s: %v", id, err)
	}
	if fcv.Annotations[fcv1.AnnotationProvisionedBy] != DriverName || fcv.Spec.Pool == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "FlashCacheVolume %s was not made by %s: it is not the driver's to change", id, DriverName)
	}
	return &fcv, nil
}

func (c *Controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	size, err := requestedBytes(req.GetCapacityRange(), smallestFor(req.GetVolumeCapability()))
	if err != nil {
		return nil, err
	}
	c.carving.Lock()
	defer c.carving.Unlock()
	fcv, err := c.ownVolume(ctx, req.GetVolumeId())
	if errors.Is(err, errNoVolume) {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
	}
	if err != nil {
		return nil, err
	}
	// A filesystem grows on the node once the device has (NodeExpandVolume); a block volume is
	// the device.
	nodeExpansion := req.GetVolumeCapability().GetBlock() == nil
	have := fcv.Spec.Pool.Size.Value()
	if size <= have {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: have, NodeExpansionRequired: nodeExpansion}, nil
	}
	spaces, _, err := c.poolSpaces(ctx, []string{fcv.Spec.NodeName})
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(spaces, func(s poolSpace) bool { return s.pool.Name == fcv.Spec.Pool.Name })
	if i < 0 {
		return nil, status.Errorf(codes.Unavailable, "pool %s of volume %s is not Ready", fcv.Spec.Pool.Name, fcv.Name)
	}
	if grow := engine.CarvedBackingBytes(size) - engine.CarvedBackingBytes(have); spaces[i].free < grow {
		return nil, status.Errorf(codes.ResourceExhausted, "pool %s has %s free; growing volume %s from %s to %s needs %s",
			fcv.Spec.Pool.Name, quantity(max(spaces[i].free, 0)), fcv.Name, quantity(have), quantity(size), quantity(grow))
	}
	patch := client.MergeFrom(fcv.DeepCopy())
	fcv.Spec.Pool.Size = *resource.NewQuantity(size, resource.BinarySI)
	if err := c.Client.Patch(ctx, fcv, patch); err != nil {
		return nil, status.Errorf(codes.Unavailable, "growing FlashCacheVolume %s: %v", fcv.Name, err)
	}
	c.Log.Info("volume grown for its claim: the agent grows it once nothing uses it", "volume", fcv.Name, "from", have, "to", size)
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: nodeExpansion}, nil
}

func (c *Controller) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	var nodes []string
	if n := req.GetAccessibleTopology().GetSegments()[TopologyNodeKey]; n != "" {
		nodes = []string{n}
	}
	spaces, _, err := c.poolSpaces(ctx, nodes)
	if err != nil {
		return nil, err
	}
	var total, largest int64
	for _, s := range spaces {
		free := max(s.free, 0)
		total += free
		largest = max(largest, engine.LargestCarvedVolume(free))
	}
	// A volume is carved from one pool: the largest claim that fits is the largest pool's free
	// space less bcache's header, which the scheduler compares a claim against.
	return &csi.GetCapacityResponse{
		AvailableCapacity: total,
		MaximumVolumeSize: wrapperspb.Int64(largest),
	}, nil
}

func (c *Controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if _, err := c.ownVolume(ctx, req.GetVolumeId()); errors.Is(err, errNoVolume) {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
	} else if err != nil {
		return nil, err
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}
