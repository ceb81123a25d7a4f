#!/usr/bin/env bash
# Makes a Docker daemon answer, for `make image` and `make test-image`: installs Debian's
# docker.io when the docker client is missing, starts dockerd when nothing answers, and waits
# until `docker info` does. Idempotent: a machine where docker already answers pays one
# `docker info`, and needs neither root nor network.
# Uses $DOCKER (default /usr/bin/docker, Debian's client): another client earlier in PATH may
# be newer than the daemon, or route `docker build` through a buildx it does not have.
set -euo pipefail
# shellcheck source=hack/lib/packages.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/packages.sh"

docker=${DOCKER:-/usr/bin/docker}
if "$docker" info >/dev/null 2>&1; then
	exit 0
fi

if ((EUID != 0)); then
	echo "install-docker: $docker does not answer, and only root can install or start it" >&2
	exit 1
fi

hold_lock docker
if "$docker" info >/dev/null 2>&1; then # started while this waited
	exit 0
fi

# A docker client alone (some machines have one) is not enough: the daemon is Debian's docker.io.
require docker dockerd

if [[ -d /run/systemd/system ]]; then
	require systemctl
	systemctl start docker.service
elif require pgrep && ! pgrep -x dockerd >/dev/null; then
	# No init to own it (CI containers): detached, so it outlives this script and make.
	log=${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/dockerd.log
	mkdir -p "$(dirname "$log")"
	echo "install-docker: starting dockerd, log in $log" >&2
	setsid nohup /usr/sbin/dockerd >>"$log" 2>&1 </dev/null {lock_fd}>&- &
fi

for ((i = 0; i < 120; i++)); do
	if "$docker" info >/dev/null 2>&1; then
		exit 0
	fi
	sleep 0.5
done
echo "install-docker: dockerd did not answer within 60 s; see ${log:-its log}" >&2
exit 1
