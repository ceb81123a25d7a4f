#!/usr/bin/env bash
# Builds the CSI sidecars the chart runs beside the operator's CSI controller, from the Go module
# proxy: csi-provisioner (external-provisioner) and csi-resizer (external-resizer), at the
# versions pinned in hack/control-plane/go.mod, whose go.sum the downloads are verified against.
# They are built in that module, beside the control plane, so that the Kubernetes libraries they
# share with it compile once: on a fresh machine test-e2e built the two in 515 s in their own
# modules' folders, in 41 s in that module (docs/testing.md).
#
# Usage: hack/build-csi-sidecars.sh
# Prints one line: the folder that holds csi-provisioner and csi-resizer, under
# ${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/csi-sidecars/<versions>-go<version>/. Only missing
# binaries are built.
set -euo pipefail
exec 3>&1 1>&2
# shellcheck source=hack/lib/lock.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/lock.sh"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
pins=$root/hack/control-plane
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly
log() { printf 'build-csi-sidecars: %s\n' "$*" >&2; }

version_of() { (cd "$pins" && go list -m -f '{{.Version}}' "$1"); }
provisioner_version=$(version_of github.com/kubernetes-csi/external-provisioner/v6)
resizer_version=$(version_of github.com/kubernetes-csi/external-resizer/v2)
go_version=$(go env GOVERSION)
out=${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/csi-sidecars/provisioner-${provisioner_version}-resizer-${resizer_version}-${go_version}
mkdir -p "$out"

# build <binary> <module> <version>: the binary from the module's cmd/<binary>.
build() {
	[[ -x $out/$1 ]] && return
	log "building $1 $3"
	local start=$SECONDS
	# The sidecars print this version in their logs and at --version. -trimpath and the cgo setting
	# are the control plane's (hack/build-control-plane.sh): flags are part of a package's cache key.
	(cd "$pins" && go build -trimpath -ldflags "-s -w -X main.version=$3" -o "$out/.$1.tmp" "$2/cmd/$1")
	mv "$out/.$1.tmp" "$out/$1"
	log "$1 built in $((SECONDS - start)) s"
}

hold_lock csi-sidecars
build csi-provisioner github.com/kubernetes-csi/external-provisioner/v6 "$provisioner_version"
build csi-resizer github.com/kubernetes-csi/external-resizer/v2 "$resizer_version"
echo "$out" >&3
