// Package csi is flashcache's CSI driver: claims become FlashCacheVolumes carved from the
// FlashCachePools of the node the scheduler picked. The controller side runs in the operator and
// only writes FlashCacheVolumes; the agent builds them as it builds any other, so status, metrics,
// the drain's flush and teardown are the same for a claimed volume and a hand-written one.
package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
)

const (
	// DriverName is the CSI driver's name.
	DriverName = fcv1.CSIDriverName
	// TopologyNodeKey is the topology segment a volume is accessible from: its node. A pool's
	// volumes live on the pool's node.
	TopologyNodeKey = "topology.flashcache.io/node"
)

// Parameters the external-provisioner adds with --extra-create-metadata; the driver reads the
// claim's name from them and passes no other "csi.storage.k8s.io/" key on.
const (
	paramClaimName      = "csi.storage.k8s.io/pvc/name"
	paramClaimNamespace = "csi.storage.k8s.io/pvc/namespace"
	reservedPrefix      = "csi.storage.k8s.io/"
)

// TunableParameters are the FlashCacheVolume fields a StorageClass may set, by their JSON path in
// the spec. The devices, the node and the pool are the driver's to choose; a pool's replacement
// policy is the pool's.
var TunableParameters = []string{
	"mode", "dirtyThresholdPercent", "flushPeriod", "sequentialCutoff", "cacheSequentialUntilFull",
	"safety.policy", "safety.trustWriteCache", "safety.maxWearPercent", "safety.wearCheckInterval",
}

// specFromParameters turns a StorageClass's parameters into the tunables of a FlashCacheVolume's
// spec. Values are taken as JSON where they parse as a number or a boolean, as strings otherwise,
// so that the API types keep the defaults and the API server validates the values and names the
// field it refuses. An unknown key is refused here, naming it.
func specFromParameters(params map[string]string) (fcv1.FlashCacheVolumeSpec, error) {
	var spec fcv1.FlashCacheVolumeSpec
	tree := map[string]any{}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		if strings.HasPrefix(key, reservedPrefix) {
			continue
		}
		if !slices.Contains(TunableParameters, key) {
			return spec, fmt.Errorf("StorageClass parameter %q is not one flashcache takes; it takes %s", key, strings.Join(TunableParameters, ", "))
		}
		node := tree
		path := strings.Split(key, ".")
		for _, part := range path[:len(path)-1] {
			child, ok := node[part].(map[string]any)
			if !ok {
				child = map[string]any{}
				node[part] = child
			}
			node = child
		}
		node[path[len(path)-1]] = parameterValue(params[key])
	}
	raw, err := json.Marshal(tree)
	if err != nil {
		return spec, fmt.Errorf("StorageClass parameters: %w", err)
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		return spec, fmt.Errorf("StorageClass parameters: %w", err)
	}
	return spec, nil
}

// parameterValue is a StorageClass parameter as the JSON value its field wants: StorageClass
// parameters are all strings, the spec's fields are numbers, booleans and strings.
func parameterValue(s string) any {
	if b, err := strconv.ParseBool(s); err == nil && (s == "true" || s == "false") {
		return b
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return s
}

// dnsLabel is what a FlashCacheVolume's name must be for the engine's names (fc-<name>, a label
// of its logical volume and bcache device) to stay valid.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// volumeName is the FlashCacheVolume for a CSI volume name, which is also the volume's ID. The
// external-provisioner names volumes pvc-<claim UID>, a DNS label, which is kept as it is. Any
// other name (the CSI spec allows up to 128 characters of any kind) is made one: lowercased, its
// other characters dashes, cut short, and ended with a hash of the whole name, so that the same
// name is always the same volume and two names never share one.
func volumeName(csiName string) (string, error) {
	if csiName == "" {
		return "", fmt.Errorf("name is required")
	}
	if len(csiName) <= 63 && dnsLabel.MatchString(csiName) {
		return csiName, nil
	}
	sum := sha256.Sum256([]byte(csiName))
	hash := hex.EncodeToString(sum[:])[:12]
	base := strings.Trim(notInLabel.ReplaceAllString(strings.ToLower(csiName), "-"), "-")
	if len(base) > 63-len(hash)-1 {
		base = strings.TrimRight(base[:63-len(hash)-1], "-")
	}
	if base == "" {
		return hash, nil
	}
	return base + "-" + hash, nil
}

// notInLabel is a run of characters a DNS label cannot hold.
var notInLabel = regexp.MustCompile(`[^a-z0-9-]+`)
