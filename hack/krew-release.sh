#!/usr/bin/env bash
# krew-release.sh VERSION [OUT_DIR]: the kubectl plugin's release for krew, proven by krew itself.
#
# Builds kubectl-flashcache for linux/amd64 and linux/arm64 into one archive each, writes the krew
# manifest (OUT_DIR/flashcache.yaml, default dist/krew/) with each archive's sha256 and its URI
# on the release page (https://github.com/flashcache/flashcache/releases/download/vVERSION/), and
# installs the plugin from the manifest and this machine's archive with krew (built from the Go
# module proxy, hack/tools/krew) into a scratch KREW_ROOT, then runs it: a manifest krew refuses,
# or a plugin that does not start once installed, fails the script. Upload the archives to the
# release and submit the manifest to krew-index.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"
# shellcheck source=hack/lib/packages.sh
source hack/lib/packages.sh

version=${1:?usage: $0 VERSION [OUT_DIR]}
version=${version#v}
out=${2:-dist/krew}
mkdir -p "$out"
out=$(cd "$out" && pwd -P)
cache=${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}
krew_version=$(cd hack/tools/krew && go list -mod=readonly -m -f '{{.Version}}' sigs.k8s.io/krew)
krew=$cache/tools/krew-$krew_version
if [[ ! -x $krew ]]; then
	mkdir -p "$(dirname "$krew")"
	(cd hack/tools/krew && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$krew.tmp" sigs.k8s.io/krew/cmd/krew)
	mv "$krew.tmp" "$krew"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=""
for arch in amd64 arm64; do
	dir=$work/$arch
	mkdir -p "$dir"
	(cd operator && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "-s -w" -o "$dir/kubectl-flashcache" ./cmd/kubectl-flashcache)
	cp README.md "$dir/"
	archive=kubectl-flashcache_v${version}_linux_${arch}.tar.gz
	# Reproducible: the same sources give the same archive, and so the same sha256.
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$dir" -czf "$out/$archive" kubectl-flashcache README.md
	sha=$(sha256sum "$out/$archive" | cut -d' ' -f1)
	platforms+="  - selector:
      matchLabels: {os: linux, arch: $arch}
    uri: https://github.com/flashcache/flashcache/releases/download/v$version/$archive
    sha256: $sha
    bin: kubectl-flashcache
    files:
      - {from: kubectl-flashcache, to: .}
      - {from: README.md, to: .}
"
done

cat >"$out/flashcache.yaml" <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: flashcache
spec:
  version: v$version
  homepage: https://github.com/flashcache/flashcache
  shortDescription: Status, flushes and drains of bcache-cached volumes
  description: |
    For clusters running the flashcache operator (SSD-cached block devices for databases):
    \`kubectl flashcache status [NODE]\` lists the cached volumes with their mode, dirty data and
    its age, the durability verdict and the devices it is for, and the SSD's wear;
    \`kubectl flashcache flush NAME [--wait]\` asks for a flush pass and follows it;
    \`kubectl flashcache drain-status NODE\` says what an eviction on the node waits for, and
    how to proceed without it.
  platforms:
$platforms
EOF

# krew's own check: it validates the manifest, verifies the archive's sha256 and installs.
arch=$(go env GOARCH)
export KREW_ROOT=$work/krew-root
"$krew" install --manifest="$out/flashcache.yaml" --archive="$out/kubectl-flashcache_v${version}_linux_${arch}.tar.gz" </dev/null >&2
"$KREW_ROOT/bin/kubectl-flashcache" --help >/dev/null
echo "$out/flashcache.yaml"
