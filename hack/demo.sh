#!/usr/bin/env bash
# make demo: the FlashCacheVolume API and its operator on a local control plane (etcd,
# kube-apiserver and kube-controller-manager built from the Go module proxy).
#
# What is real: the API server's validation and defaults, the operator binary, PersistentVolume
# binding and protection by kube-controller-manager. What is not there yet: the node agent that
# builds bcache on the node; until it exists, this script writes the report the agent would write,
# under the agent's field manager, and says so.
#
# DEMO_ASSERT=1 checks every step and exits non-zero on the first surprise (make test-demo).
# DEMO_KEEP=1 leaves the control plane and operator running and prints how to reach them.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$root"
assert="${DEMO_ASSERT:-0}"
keep="${DEMO_KEEP:-0}"
flashcache="$root/bin/flashcache"
[[ -x $flashcache ]] || { echo "bin/flashcache is missing: run 'make demo'" >&2; exit 1; }

bold=$'\e[1m' dim=$'\e[2m' reset=$'\e[0m'
[[ -t 1 ]] || bold="" dim="" reset=""
step() { printf '\n%s==> %s%s\n' "$bold" "$*" "$reset"; }
note() { printf '%s    %s%s\n' "$dim" "$*" "$reset"; }
passed=0
check() { # description, then a command that must succeed
	local what=$1
	shift
	if "$@"; then
		passed=$((passed + 1))
	elif ((assert)); then
		echo "demo: FAILED: $what" >&2
		tail -n 40 "$work"/*.log >&2 || true
		echo "demo: $passed passed, 1 failed"
		exit 1
	else
		echo "    (unexpected: $what)"
	fi
}

assets="$(hack/build-control-plane.sh etcd kube-apiserver kubectl kube-controller-manager)"
work="$(mktemp -d "${TMPDIR:-/tmp}/flashcache-demo.XXXXXX")"
kubeconfig="$work/kubeconfig"
k() { "$assets/kubectl" --kubeconfig "$kubeconfig" --cache-dir "$work/kube-cache" "$@"; }

pids=()
cleanup() {
	if ((keep)); then
		echo
		echo "Kept running (DEMO_KEEP=1). Reach it with:"
		echo "  export KUBECONFIG=$kubeconfig; $assets/kubectl get fcv,pv,pvc -A"
		echo "Stop it with: kill ${pids[*]}"
		return
	fi
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

# wait_for: retry a command for up to $1 seconds.
wait_for() {
	local timeout=$1
	shift
	local deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
		sleep 0.5
	done
}
ready_reason() { k get fcv "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'; }
has_ready_reason() { [[ "$(ready_reason "$1")" == "$2" ]]; }

step "Start a local control plane: etcd, kube-apiserver, kube-controller-manager"
(cd operator && KUBEBUILDER_ASSETS="$assets" go run ./test/controlplane --kubeconfig "$kubeconfig" --with-controller-manager) \
	>"$work/controlplane.log" 2>&1 &
pids+=($!)
check "control plane answers" wait_for 120 k get --raw /readyz
k version | sed 's/^/    /'

step "Install the CRD the way a user does: kubectl apply -f crds/"
k apply -f crds/
check "CRD established" k wait --for=condition=Established --timeout=60s crd/flashcachevolumes.flashcache.io

step "Start the operator: flashcache operator"
"$flashcache" operator --kubeconfig "$kubeconfig" --metrics-bind-address 0 --health-probe-bind-address 0 --webhook-port 0 \
	>"$work/operator.log" 2>&1 &
pids+=($!)
"$flashcache" version

step "A node joins (no kubelet here: the node object is enough for the operator)"
k apply -f - <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: worker-1
  labels: {kubernetes.io/hostname: worker-1}
EOF

step "The API server rejects a bad spec and names the fields"
bad_spec() {
	k apply -f - <<'EOF'
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: careless}
spec:
  nodeName: worker-1
  cacheDevice: {path: /dev/nvme0n1, overProvisionPercent: 70}
  backingDevice: {path: /dev/disk/by-id/ata-ST4000NM0035-1V4107_ZC1A2B3C}
  flushPeriod: soon
EOF
}
rejection=$(bad_spec 2>&1) && rejected=0 || rejected=1
printf '    %s\n' "$rejection"
check "bad spec rejected" test "$rejected" = 1
check "rejection names cacheDevice.path" grep -q 'spec.cacheDevice.path' <<<"$rejection"
check "rejection names overProvisionPercent" grep -q 'spec.cacheDevice.overProvisionPercent' <<<"$rejection"
check "rejection names flushPeriod" grep -q 'spec.flushPeriod' <<<"$rejection"

step "kubectl apply the sample FlashCacheVolume; the API server fills in the defaults"
k apply -f operator/config/samples/flashcache_v1alpha1_flashcachevolume.yaml
check "operator reports it waits for the agent" wait_for 30 has_ready_reason mysql-data-worker-1 WaitingForAgent
k get fcv
k get storageclass flashcache

step "The node agent reports the bcache device it built"
note "The agent is not built yet: kubectl writes the report it will write, as field manager flashcache-agent."
agent_report() { # condition status, reason, message
	k apply --server-side --subresource=status --field-manager=flashcache-agent -f - <<EOF
apiVersion: flashcache.io/v1alpha1
kind: FlashCacheVolume
metadata: {name: mysql-data-worker-1}
status:
  device: {name: bcache0, path: /dev/bcache/by-uuid/7b4c2a8e-0d1f-4e59-9a43-5d1c0f6e2b11, capacity: 3726Gi, cacheMode: writeback, state: clean}
  conditions:
  - {type: Provisioned, status: "$1", reason: $2, message: "$3", lastTransitionTime: "$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
EOF
}
agent_report True Provisioned "bcache0 built on the NVMe partition (80%) and the HDD"
check "PersistentVolume published" wait_for 30 has_ready_reason mysql-data-worker-1 PersistentVolumeAvailable
k get fcv -o wide
k get pv flashcache-mysql-data-worker-1
pv_path=$(k get pv flashcache-mysql-data-worker-1 -o jsonpath='{.spec.local.path} {.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}')
note "PersistentVolume: local path and node: $pv_path"
check "PV points at the device on worker-1" test "$pv_path" = "/dev/bcache/by-uuid/7b4c2a8e-0d1f-4e59-9a43-5d1c0f6e2b11 worker-1"

step "A MySQL claim binds the volume (kube-controller-manager's binder)"
k create namespace db
k apply -f - <<'EOF'
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-mysql-0, namespace: db}
spec:
  storageClassName: flashcache
  volumeName: flashcache-mysql-data-worker-1
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 100Gi}}
EOF
check "claim bound" wait_for 60 has_ready_reason mysql-data-worker-1 PersistentVolumeBound
k get fcv,pv
k get pvc -n db

step "Deleting the volume waits while a claim holds it"
k delete fcv mysql-data-worker-1 --wait=false
check "deletion waits for the claim" wait_for 30 has_ready_reason mysql-data-worker-1 WaitingForClaimRelease
note "$(k get fcv mysql-data-worker-1 -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}')"
k get fcv

step "The claim is deleted: the operator deletes the PersistentVolume, then waits for the agent's teardown"
k delete pvc -n db data-mysql-0
check "waiting for teardown" wait_for 90 has_ready_reason mysql-data-worker-1 WaitingForTeardown
check "PersistentVolume gone" wait_for 30 bash -c "! '$assets/kubectl' --kubeconfig '$kubeconfig' get pv flashcache-mysql-data-worker-1"
note "$(k get fcv mysql-data-worker-1 -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}')"
note "The agent would now flush, detach and remove bcache0; kubectl reports it as the agent will."
agent_report False TornDown "bcache0 flushed, detached and removed"
check "volume deleted" wait_for 30 bash -c "! '$assets/kubectl' --kubeconfig '$kubeconfig' get fcv mysql-data-worker-1"
k get fcv,pv

step "Events the operator recorded"
k get events -A --field-selector involvedObject.kind=FlashCacheVolume -o custom-columns=REASON:.reason,MESSAGE:.message 2>/dev/null |
	sed 's/^/    /' || true

echo
echo "demo: $passed passed, 0 failed"
