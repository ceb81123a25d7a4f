//go:build envtest

package csi

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/internal/testenv"
)

var k8s client.Client

// TestMain runs the CSI controller's tests against a real etcd and kube-apiserver with the CRDs:
// the volumes it writes are validated and defaulted as a user's would be.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		env, cfg, err := testenv.Start(testenv.CRDDir())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = env.Stop() }()
		if k8s, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

// readyPool makes a pool on node and reports it Ready with capacity, as the agent would.
func readyPool(t *testing.T, name, node, capacity string) {
	t.Helper()
	ctx := context.Background()
	p := &fcv1.FlashCachePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fcv1.FlashCachePoolSpec{
			NodeName:       node,
			CacheDevice:    fcv1.CacheDeviceSpec{Path: "/dev/disk/by-id/nvme-" + name},
			BackingDevices: []fcv1.PoolBackingDevice{{Path: "/dev/disk/by-id/scsi-" + name}},
		},
	}
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
	if capacity == "" {
		return
	}
	c := resource.MustParse(capacity)
	p.Status = fcv1.FlashCachePoolStatus{Phase: fcv1.PoolPhaseReady, Capacity: &c, Allocatable: &c}
	if err := k8s.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
}

func newController() *Controller {
	return &Controller{Client: k8s, Log: logr.Discard()}
}

func mountCapability() []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "xfs"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
}

func onNode(node string) *csi.TopologyRequirement {
	t := []*csi.Topology{{Segments: map[string]string{TopologyNodeKey: node}}}
	return &csi.TopologyRequirement{Requisite: t, Preferred: t}
}

func createRequest(name string, bytes int64, node string, params map[string]string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: bytes},
		VolumeCapabilities: mountCapability(), Parameters: params, AccessibilityRequirements: onNode(node)}
}

func deleteVolume(t *testing.T, name string) {
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &fcv1.FlashCacheVolume{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
}

func wantCode(t *testing.T, err error, code codes.Code, contains ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %s", err, code)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error %q does not say %q", err, c)
		}
	}
}

// A claim on a node becomes a FlashCacheVolume carved from that node's pool, with the
// StorageClass's tunables, the API's defaults for the rest, and the node as its topology; asked
// again (the provisioner retries), it is the same volume.
func TestCreateVolumeCarvesFromThePoolOfTheClaimsNode(t *testing.T) {
	ctx := context.Background()
	readyPool(t, "create-a", "create-node-a", "8Gi")
	readyPool(t, "create-b", "create-node-b", "8Gi")
	c := newController()
	req := createRequest("pvc-create-1", 1<<30, "create-node-b", map[string]string{
		"dirtyThresholdPercent": "20", "flushPeriod": "2m", "safety.trustWriteCache": "true",
		paramClaimName: "data-mysql-0", paramClaimNamespace: "db",
	})
	deleteVolume(t, "pvc-create-1")
	resp, err := c.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if v := resp.GetVolume(); v.GetVolumeId() != "pvc-create-1" || v.GetCapacityBytes() != 1<<30 ||
		v.GetAccessibleTopology()[0].GetSegments()[TopologyNodeKey] != "create-node-b" {
		t.Errorf("response %v: want pvc-create-1, 1 GiB, on create-node-b", v)
	}
	var fcv fcv1.FlashCacheVolume
	if err := k8s.Get(ctx, client.ObjectKey{Name: "pvc-create-1"}, &fcv); err != nil {
		t.Fatal(err)
	}
	s := fcv.Spec
	if s.NodeName != "create-node-b" || s.Pool == nil || s.Pool.Name != "create-b" || s.Pool.Size.Value() != 1<<30 ||
		s.CacheDevice != nil || s.BackingDevice != nil {
		t.Errorf("spec %+v: want carved from create-b on create-node-b, 1 GiB", s)
	}
	if *s.DirtyThresholdPercent != 20 || s.FlushPeriod.Duration.String() != "2m0s" || !s.Safety.TrustWriteCache || s.Mode != fcv1.CacheModeWriteback {
		t.Errorf("tunables %+v: want the StorageClass's 20, 2m, trustWriteCache and the default writeback", s)
	}
	if fcv.Annotations[fcv1.AnnotationProvisionedBy] != DriverName || fcv.Annotations[fcv1.AnnotationClaim] != "db/data-mysql-0" {
		t.Errorf("annotations %v", fcv.Annotations)
	}
	if _, err := c.CreateVolume(ctx, req); err != nil {
		t.Errorf("the same request again: %v", err)
	}
	bigger := createRequest("pvc-create-1", 2<<30, "create-node-b", nil)
	_, err = c.CreateVolume(ctx, bigger)
	wantCode(t, err, codes.AlreadyExists, "pvc-create-1")
}

// A CSI name that is not a DNS label (csi-sanity's are not) gets a volume of its own, named
// from it, and the same name finds that volume again; the name it was made for is kept, so a
// volume made for another name is not taken for it.
func TestCreateVolumeTakesAnyCSIName(t *testing.T) {
	ctx := context.Background()
	readyPool(t, "names", "names-node", "8Gi")
	c := newController()
	const csiName = "Sanity_Controller-Create-maxlen-5DB4DB07-AE04157B-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	id, err := volumeName(csiName)
	if err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, id)
	req := createRequest(csiName, 64<<20, "names-node", nil)
	resp, err := c.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVolume().GetVolumeId() != id {
		t.Errorf("volume ID %q, want %q", resp.GetVolume().GetVolumeId(), id)
	}
	var fcv fcv1.FlashCacheVolume
	if err := k8s.Get(ctx, client.ObjectKey{Name: id}, &fcv); err != nil {
		t.Fatal(err)
	}
	if fcv.Annotations[fcv1.AnnotationCSIName] != csiName {
		t.Errorf("annotations %v: want the CSI name", fcv.Annotations)
	}
	if again, err := c.CreateVolume(ctx, req); err != nil || again.GetVolume().GetVolumeId() != id {
		t.Errorf("the same request again: %v %v", again, err)
	}
	fcv.Annotations[fcv1.AnnotationCSIName] = "another name"
	if err := k8s.Update(ctx, &fcv); err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateVolume(ctx, req)
	wantCode(t, err, codes.AlreadyExists, "another name")
}

// Free space is the pool's capacity less the volumes carved from it, built or not: a claim that
// does not fit stays unprovisioned, and the error says pool by pool why.
func TestCreateVolumeCountsCarvedVolumesAndSaysWhyNothingFits(t *testing.T) {
	ctx := context.Background()
	readyPool(t, "full-a", "full-node", "1Gi")
	readyPool(t, "full-building", "full-node", "")
	c := newController()
	deleteVolume(t, "pvc-full-1")
	if _, err := c.CreateVolume(ctx, createRequest("pvc-full-1", 600<<20, "full-node", nil)); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateVolume(ctx, createRequest("pvc-full-2", 600<<20, "full-node", nil))
	wantCode(t, err, codes.ResourceExhausted, "full-node", "pool full-a on full-node has 420Mi free", "pool full-building on full-node is not reported yet")
	if err := k8s.Get(ctx, client.ObjectKey{Name: "pvc-full-2"}, &fcv1.FlashCacheVolume{}); !apierrors.IsNotFound(err) {
		t.Errorf("a volume was written for a claim that does not fit: %v", err)
	}
	_, err = c.CreateVolume(ctx, createRequest("pvc-full-3", 64<<20, "no-pool-node", nil))
	wantCode(t, err, codes.ResourceExhausted, "no FlashCachePool")
}

// Parameters are the spec's tunables by name: an unknown one and a bad value are refused, naming
// them, and nothing is written.
func TestCreateVolumeRefusesBadParametersNamingThem(t *testing.T) {
	ctx := context.Background()
	readyPool(t, "params-a", "params-node", "4Gi")
	c := newController()
	_, err := c.CreateVolume(ctx, createRequest("pvc-params-1", 1<<30, "params-node", map[string]string{"cacheDevice.path": "/dev/sda"}))
	wantCode(t, err, codes.InvalidArgument, `"cacheDevice.path"`)
	deleteVolume(t, "pvc-params-2")
	_, err = c.CreateVolume(ctx, createRequest("pvc-params-2", 1<<30, "params-node", map[string]string{"mode": "fast"}))
	wantCode(t, err, codes.InvalidArgument, "spec.mode")
	_, err = c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-params-3", VolumeCapabilities: []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}}})
	wantCode(t, err, codes.InvalidArgument, "access mode")
	for _, name := range []string{"pvc-params-1", "pvc-params-2", "pvc-params-3"} {
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &fcv1.FlashCacheVolume{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s written for a refused request: %v", name, err)
		}
	}
}

// GetCapacity is per node: the free space of its Ready pools, and the largest one a single
// volume can have.
func TestGetCapacityIsTheNodesFreePoolSpace(t *testing.T) {
	ctx := context.Background()
	readyPool(t, "cap-a", "cap-node", "2Gi")
	readyPool(t, "cap-b", "cap-node", "1Gi")
	c := newController()
	deleteVolume(t, "pvc-cap-1")
	if _, err := c.CreateVolume(ctx, createRequest("pvc-cap-1", 1536<<20, "cap-node", nil)); err != nil {
		t.Fatal(err)
	}
	resp, err := c.GetCapacity(ctx, &csi.GetCapacityRequest{AccessibleTopology: &csi.Topology{Segments: map[string]string{TopologyNodeKey: "cap-node"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Each volume's logical volume holds bcache's 2 MiB header too, in 4 MiB extents: cap-a has
	// 2048 - 1540 MiB free, and cap-b's 1 GiB holds a volume of 1020 MiB.
	if resp.GetAvailableCapacity() != (508+1024)<<20 || resp.GetMaximumVolumeSize().GetValue() != 1020<<20 {
		t.Errorf("capacity %d, largest %d: want 1532 MiB free in all, 1020 MiB the largest (cap-b untouched)", resp.GetAvailableCapacity(), resp.GetMaximumVolumeSize().GetValue())
	}
}

// Expansion grows the volume's pool.size within the pool's free space; the filesystem then grows
// on the node.
func TestControllerExpandVolumeGrowsWithinThePool(t *testing.T) {
	ctx := context.Background()
	readyPool(t, "grow-a", "grow-node", "2Gi")
	c := newController()
	deleteVolume(t, "pvc-grow-1")
	if _, err := c.CreateVolume(ctx, createRequest("pvc-grow-1", 1<<30, "grow-node", nil)); err != nil {
		t.Fatal(err)
	}
	resp, err := c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-grow-1",
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1536 << 20}, VolumeCapability: mountCapability()[0]})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCapacityBytes() != 1536<<20 || !resp.GetNodeExpansionRequired() {
		t.Errorf("expand: %v, want 1.5 GiB and the filesystem grown on the node", resp)
	}
	var fcv fcv1.FlashCacheVolume
	if err := k8s.Get(ctx, client.ObjectKey{Name: "pvc-grow-1"}, &fcv); err != nil || fcv.Spec.Pool.Size.Value() != 1536<<20 {
		t.Errorf("pool.size after the expansion: %v %v", fcv.Spec.Pool, err)
	}
	_, err = c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-grow-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 3 << 30}})
	wantCode(t, err, codes.ResourceExhausted, "pool grow-a has 508Mi free")
}

// DeleteVolume deletes the volume and is done only once it is gone (the agent's teardown, here a
// finalizer the test removes); a hand-written volume of that name is never deleted through it.
func TestDeleteVolumeWaitsForTheTeardownAndSparesHandWrittenVolumes(t *testing.T) {
	ctx := context.Background()
	readyPool(t, "del-a", "del-node", "2Gi")
	c := newController()
	deleteVolume(t, "pvc-del-1")
	if _, err := c.CreateVolume(ctx, createRequest("pvc-del-1", 1<<30, "del-node", nil)); err != nil {
		t.Fatal(err)
	}
	var fcv fcv1.FlashCacheVolume
	if err := k8s.Get(ctx, client.ObjectKey{Name: "pvc-del-1"}, &fcv); err != nil {
		t.Fatal(err)
	}
	fcv.Finalizers = []string{"flashcache.io/test-teardown"}
	if err := k8s.Update(ctx, &fcv); err != nil {
		t.Fatal(err)
	}
	_, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-del-1"})
	wantCode(t, err, codes.Unavailable, "being flushed and torn down")
	if err := k8s.Get(ctx, client.ObjectKey{Name: "pvc-del-1"}, &fcv); err != nil || fcv.DeletionTimestamp == nil {
		t.Fatalf("volume not being deleted: %v", err)
	}
	fcv.Finalizers = nil
	if err := k8s.Update(ctx, &fcv); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-del-1"}); err != nil {
		t.Errorf("delete once torn down: %v", err)
	}
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-del-1"}); err != nil {
		t.Errorf("delete again: %v", err)
	}

	hand := &fcv1.FlashCacheVolume{ObjectMeta: metav1.ObjectMeta{Name: "hand-written"},
		Spec: fcv1.FlashCacheVolumeSpec{NodeName: "del-node", Pool: &fcv1.PoolVolumeSource{Name: "del-a", Size: resource.MustParse("1Gi")}}}
	if err := k8s.Create(ctx, hand); err != nil {
		t.Fatal(err)
	}
	deleteVolume(t, "hand-written")
	_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "hand-written"})
	wantCode(t, err, codes.FailedPrecondition, "not made by")
	if err := k8s.Get(ctx, client.ObjectKey{Name: "hand-written"}, hand); err != nil || hand.DeletionTimestamp != nil {
		t.Errorf("a hand-written volume was deleted through the driver: %v", err)
	}
}

// The node service stages only a volume of its node that the agent has built at its full size;
// otherwise it says why, and the kubelet asks again.
func TestNodeStagesOnlyABuiltVolumeOfItsNode(t *testing.T) {
	ctx := context.Background()
	readyPool(t, "stage-a", "stage-node", "4Gi")
	c := newController()
	deleteVolume(t, "pvc-stage-1")
	if _, err := c.CreateVolume(ctx, createRequest("pvc-stage-1", 1<<30, "stage-node", nil)); err != nil {
		t.Fatal(err)
	}
	stage := func(n *Node) error {
		_, err := n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "pvc-stage-1", StagingTargetPath: t.TempDir(), VolumeCapability: mountCapability()[0]})
		return err
	}
	wantCode(t, stage(&Node{NodeName: "other-node", Client: k8s}), codes.FailedPrecondition, "on node stage-node")
	node := &Node{NodeName: "stage-node", Client: k8s}
	wantCode(t, stage(node), codes.Unavailable, "not built yet")

	var fcv fcv1.FlashCacheVolume
	if err := k8s.Get(ctx, client.ObjectKey{Name: "pvc-stage-1"}, &fcv); err != nil {
		t.Fatal(err)
	}
	half := resource.MustParse("512Mi")
	fcv.Status.Device = &fcv1.DeviceStatus{Name: "bcache9", Path: "/dev/flashcache/pvc-stage-1", Capacity: &half}
	fcv.Status.Conditions = []metav1.Condition{{Type: fcv1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: fcv1.ReasonProvisioned, LastTransitionTime: metav1.Now()}}
	if err := k8s.Status().Update(ctx, &fcv); err != nil {
		t.Fatal(err)
	}
	wantCode(t, stage(node), codes.Unavailable, "being grown from 512Mi to 1Gi")
	full := resource.MustParse("1Gi")
	fcv.Status.Device.Capacity = &full
	if err := k8s.Status().Update(ctx, &fcv); err != nil {
		t.Fatal(err)
	}
	// Built at its size; here the device itself is not on this machine.
	wantCode(t, stage(node), codes.Unavailable, "/dev/flashcache/pvc-stage-1")

	info, err := node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || info.GetNodeId() != "stage-node" || info.GetAccessibleTopology().GetSegments()[TopologyNodeKey] != "stage-node" {
		t.Errorf("NodeGetInfo: %v %v", info, err)
	}
}
