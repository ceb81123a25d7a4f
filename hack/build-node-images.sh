#!/usr/bin/env bash
# Builds the images the demo's node runs, without any registry, and saves each as a tarball the
# node's containerd imports (`ctr images import`):
#   flashcache-pause:<kubernetes version>  the pod sandbox's pause, compiled statically from the
#       pinned Kubernetes module's build/pause/linux/pause.c;
#   flashcache-mariadb:dev                 MariaDB from Debian's packages (hack/node-images/mariadb)
#       on the Dockerfile's Debian base image;
#   flashcache-csi-provisioner:<version>, flashcache-csi-resizer:<version>
#                                          the chart's CSI sidecars, built by
#       hack/build-csi-sidecars.sh from the Go module proxy (hack/node-images/csi-sidecar);
#   the image named as the argument        the project's image (`make image` prints its name).
#
# Usage: hack/build-node-images.sh <flashcache image>
# Prints one line: the folder that holds the tarballs and images.txt ("<image> <file>" per line);
# stable-images.txt lists all but the project's image, which changes with every commit.
# Tarballs are named by image name and ID under ${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/node-images,
# so an unchanged image is saved once; tarballs of images no longer named are removed.
set -euo pipefail
exec 3>&1 1>&2
# shellcheck source=hack/lib/packages.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/packages.sh"

[[ $# -eq 1 ]] || {
	echo "usage: $0 <flashcache image>" >&2
	exit 2
}
flashcache_image=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
docker=${DOCKER:-/usr/bin/docker}
export GOWORK=off
log() { printf 'build-node-images: %s\n' "$*" >&2; }

"$root/hack/install-docker.sh"
require gcc strip
require_packages libc6-dev
base_image=$("$root/hack/build-base-images.sh" | sed -n 1p)
sidecars=$("$root/hack/build-csi-sidecars.sh")

# pause.c comes with the module the control plane is built from.
k8s_mod=$root/hack/control-plane
k8s_version=$(cd "$k8s_mod" && go list -mod=readonly -m -f '{{.Version}}' k8s.io/kubernetes)
k8s_dir=$(cd "$k8s_mod" && go mod download -json k8s.io/kubernetes | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
pause_src=$k8s_dir/build/pause/linux/pause.c
[[ -f $pause_src ]] || {
	log "no $pause_src in the kubernetes module"
	exit 1
}
pause_image=flashcache-pause:$k8s_version
mariadb_image=flashcache-mariadb:dev

hold_lock node-images
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
cp "$root/hack/node-images/pause/Dockerfile" "$tmp/"
gcc -Os -Wall -Werror -static -DVERSION="$k8s_version" -o "$tmp/pause" "$pause_src"
strip "$tmp/pause"
DOCKER_BUILDKIT=1 "$docker" build -q -t "$pause_image" "$tmp" >/dev/null
DOCKER_BUILDKIT=1 "$docker" build -q --build-arg "BASE_IMAGE=$base_image" -t "$mariadb_image" \
	"$root/hack/node-images/mariadb" >/dev/null
sidecar_images=()
for sidecar in csi-provisioner csi-resizer; do
	# The version the binary was built as, which it prints last at --version.
	version=$("$sidecars/$sidecar" --version | awk '{print $NF}')
	mkdir -p "$tmp/$sidecar"
	cp "$root/hack/node-images/csi-sidecar/Dockerfile" "$tmp/$sidecar/"
	cp "$sidecars/$sidecar" "$tmp/$sidecar/sidecar"
	DOCKER_BUILDKIT=1 "$docker" build -q -t "flashcache-$sidecar:$version" "$tmp/$sidecar" >/dev/null
	sidecar_images+=("flashcache-$sidecar:$version")
done
log "images built in $((SECONDS - start)) s"

out=${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/node-images
mkdir -p "$out"
keep=()
: >"$tmp/images.txt"
: >"$tmp/stable-images.txt"
for image in "$pause_image" "$mariadb_image" "${sidecar_images[@]}" "$flashcache_image"; do
	# docker save records the name it was given: the file is named by name and content.
	id=$("$docker" image inspect -f '{{.Id}}' "$image")
	file=$(echo "$image $id" | sha256sum | cut -c1-16).tar
	if [[ ! -f $out/$file ]]; then
		log "saving $image"
		"$docker" save -o "$out/.$file.tmp" "$image"
		mv "$out/.$file.tmp" "$out/$file"
	fi
	keep+=("$file")
	echo "$image $file" >>"$tmp/images.txt"
	# All but the project's own: what a node's root disk keeps imported between runs.
	[[ $image == "$flashcache_image" ]] || echo "$image $file" >>"$tmp/stable-images.txt"
done
for f in "$out"/*.tar; do
	[[ -e $f ]] || continue
	[[ " ${keep[*]} " == *" $(basename "$f") "* ]] || rm -f "$f"
done
mv "$tmp/stable-images.txt" "$out/stable-images.txt"
mv "$tmp/images.txt" "$out/images.txt"
log "done in $((SECONDS - start)) s"
echo "$out" >&3
