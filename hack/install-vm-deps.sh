#!/usr/bin/env bash
# Installs the host packages the kernel-level tests need: QEMU (TCG, since the host kernel has
# no bcache and KVM is not usable), nbdkit for disks with a volatile write cache, mmdebstrap to
# build the guest rootfs, and the tools that turn it into a bootable disk image. Idempotent; runs
# apt only when something is missing, so a warm machine pays nothing and needs neither root nor
# network.
set -euo pipefail

packages=(
	qemu-system-x86 # the VM itself
	qemu-utils      # qemu-img: qcow2 base image and per-VM overlays
	nbdkit          # serves HDDs whose write cache a power cut empties (vmharness CacheVolatile*), and Faulty disks (its error filter)
	mmdebstrap      # builds the guest rootfs without root tricks or debootstrap's slowness
	e2fsprogs       # mke2fs -d: a filesystem image straight from a directory, no loop mount
	openssh-client  # ssh-keygen for the harness and host keys; ssh for make vm-shell and the demo
	iproute2        # ip netns and a tap interface: the demo's network, apart from the host's
	debian-archive-keyring
	ca-certificates
)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "install-vm-deps: installing ${missing[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
