#!/usr/bin/env bash
# Provides the Dockerfile's two base images locally, since no registry can be pulled from where
# this project is built:
#   BASE_IMAGE (debian:bookworm-<date>-slim)  a minimal Debian bookworm rootfs (mmdebstrap
#       minbase from the host's own Debian mirror, without docs, man pages or locales, as the
#       official slim images), imported with `docker import`.
#   GO_IMAGE (golang:<version>-bookworm)  the same rootfs plus ca-certificates and the Go
#       toolchain, laid out as the official image (GOROOT /usr/local/go, GOPATH /go).
# The toolchain is the module golang.org/toolchain@v0.0.1-go<version>.linux-amd64 from the Go
# module proxy, not the host's GOROOT: it is exactly the version the tag names whatever Go the
# host has, and `go mod download` checks it against the checksum database.
# Both names come from the Dockerfile's ARG lines. An image `docker image inspect` finds is left
# alone; the rootfs tarballs are cached under ${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/
# base-images/<hash of this script and the two names>, so a machine whose docker was wiped
# re-imports them in seconds. Needs root (mmdebstrap's root mode) and a running dockerd
# (hack/install-docker.sh). Prints the two image names; progress goes to stderr.
# Single-quoted $(...) below are apt's own placeholders.
# shellcheck disable=SC2016
set -euo pipefail
# shellcheck source=hack/lib/debian-mirrors.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian-mirrors.sh"
# shellcheck source=hack/lib/packages.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/packages.sh"

exec 3>&1 1>&2

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
script=$root/hack/build-base-images.sh
docker=${DOCKER:-/usr/bin/docker}

arg() {
	local value
	value=$(sed -n "s/^ARG $1=//p" "$root/Dockerfile")
	if [[ -z $value ]]; then
		echo "build-base-images: no 'ARG $1=' line in $root/Dockerfile" >&2
		exit 1
	fi
	echo "$value"
}
go_image=$(arg GO_IMAGE)
base_image=$(arg BASE_IMAGE)
# golang:1.26.8-bookworm -> 1.26.8
go_version=${go_image#*:}
go_version=${go_version%%-*}

have() { "$docker" image inspect "$1" >/dev/null 2>&1; }
if have "$base_image" && have "$go_image"; then
	printf '%s\n' "$base_image" "$go_image" >&3
	exit 0
fi

cache=${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/base-images
key=$( (
	cat "$script"
	echo "$base_image $go_image"
) | sha256sum | cut -c1-16)
out=$cache/$key
start=$SECONDS

hold_lock base-images
if [[ ! -f $out/base.tar || ! -f $out/go.tar ]]; then
	if ((EUID != 0)); then
		echo "build-base-images: must run as root (mmdebstrap root mode)" >&2
		exit 1
	fi
	require mmdebstrap
	require_packages debian-archive-keyring ca-certificates
	suite=bookworm
	mapfile -t mirrors < <(debian_mirrors "$suite")

	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.build-$key.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	rootfs=$tmp/rootfs

	echo "build-base-images: mmdebstrap $suite from ${mirrors[*]}" >&2
	# The dpkg and apt options stay in the rootfs (/etc/dpkg/dpkg.cfg.d, /etc/apt/apt.conf.d),
	# so what the Dockerfile installs later is slim and recommends-free too.
	# The merged-usr hook lays out /usr as bookworm wants without the usrmerge package, whose
	# perl would add 50 MB; debuerreotype, which builds the official images, does the same.
	mmdebstrap --variant=minbase --mode=root \
		--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
		--aptopt='APT::Install-Recommends "false"' \
		--aptopt='APT::Install-Suggests "false"' \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*.log "$1"/var/log/apt/*' \
		"$suite" "$rootfs" "${mirrors[@]}"
	# Sorted names and a fixed owner make the tarball depend on the files only.
	tar --sort=name --numeric-owner -C "$rootfs" -cf "$tmp/base.tar" .

	echo "build-base-images: adding ca-certificates and Go $go_version for $go_image" >&2
	cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
	chroot "$rootfs" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive chroot "$rootfs" apt-get install -y -qq -o Dpkg::Use-Pty=0 ca-certificates >/dev/null
	rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/*
	: >"$rootfs/etc/resolv.conf"
	toolchain=$(cd "$tmp" && GOTOOLCHAIN=local go mod download -json \
		"golang.org/toolchain@v0.0.1-go$go_version.linux-amd64" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	if [[ ! -f $toolchain/bin/go ]]; then
		echo "build-base-images: no Go toolchain in '$toolchain'" >&2
		exit 1
	fi
	mkdir -p "$rootfs/usr/local" "$rootfs/go/bin" "$rootfs/go/src"
	cp -a "$toolchain" "$rootfs/usr/local/go"
	# Module zips carry no file modes: the go command sets them when it switches toolchains.
	chmod -R u+w "$rootfs/usr/local/go"
	chmod 0755 "$rootfs"/usr/local/go/bin/* "$rootfs"/usr/local/go/pkg/tool/*/*
	tar --sort=name --numeric-owner -C "$rootfs" -cf "$tmp/go.tar" .
	rm -rf "$rootfs"

	# Another build may have finished first; its result is as good as ours.
	if mv -T "$tmp" "$out" 2>/dev/null; then
		trap - EXIT
	elif [[ ! -f $out/base.tar ]]; then
		echo "build-base-images: $out exists but holds no tarballs; remove it and run again" >&2
		exit 1
	fi
fi

path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if ! have "$base_image"; then
	echo "build-base-images: importing $base_image" >&2
	"$docker" import --change "ENV PATH=$path" --change 'CMD ["bash"]' \
		--message "mmdebstrap bookworm minbase, by hack/build-base-images.sh" \
		"$out/base.tar" "$base_image" >/dev/null
fi
if ! have "$go_image"; then
	echo "build-base-images: importing $go_image" >&2
	"$docker" import --change "ENV PATH=/go/bin:/usr/local/go/bin:$path" \
		--change "ENV GOLANG_VERSION=$go_version" --change 'ENV GOPATH=/go' \
		--change 'ENV GOTOOLCHAIN=local' --change 'WORKDIR /go' --change 'CMD ["bash"]' \
		--message "$base_image plus ca-certificates and golang.org/toolchain go$go_version, by hack/build-base-images.sh" \
		"$out/go.tar" "$go_image" >/dev/null
fi
echo "build-base-images: done in $((SECONDS - start)) s" >&2
printf '%s\n' "$base_image" "$go_image" >&3
