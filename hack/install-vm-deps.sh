#!/usr/bin/env bash
# Installs the host packages the kernel-level tests run from Go (vmharness): QEMU (TCG, since the
# host kernel has no bcache and KVM is not usable; 10.0 from bookworm-backports, whose TCG costs
# the guests less than half of 7.2's host CPU: hack/lib/packages.sh), nbdkit for disks with a
# volatile write cache, OpenSSH's client for `make vm-shell` and the demo, iproute2 for the demo's
# network namespace.
# The scripts that build the VM image require their own tools (mmdebstrap, qemu-img, ssh-keygen).
# Idempotent; runs apt only when something is missing, so a warm machine pays nothing and needs
# neither root nor network.
set -euo pipefail
# shellcheck source=hack/lib/packages.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/packages.sh"

require qemu-system-x86_64 qemu-img nbdkit ssh ssh-keygen ip
