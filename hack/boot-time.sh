#!/usr/bin/env bash
# boot-time.sh [IMAGE_DIR] [N]: boots the test VM N times (default 3) and prints, per boot, the
# harness's time to SSH ready and systemd-analyze's line, to measure a change to the image or
# the harness: a real boot each time, not a restored snapshot. IMAGE_DIR defaults to the image
# hack/build-vm-image.sh builds.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/install-vm-deps.sh
image=${1:-$(hack/build-vm-image.sh)}
n=${2:-3}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd operator && go build -o "$bin/vmshell" ./test/vmshell)
for _ in $(seq "$n"); do
	printf 'systemd-analyze | head -1; exit\n' | FLASHCACHE_VM_COLD_BOOT=1 FLASHCACHE_VM_IMAGE=$image "$bin/vmshell" 2>&1 |
		grep -E 'ssh ready|Startup finished' | tr '\n' ' '
	echo
done
