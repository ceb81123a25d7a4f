#!/usr/bin/env bash
# Installs the host packages the build and tests need and checks the Go toolchain. Idempotent;
# installs only what is missing (root and apt needed only then).
set -euo pipefail

# gcc and libc6-dev: the demo's pause image is compiled, statically, from Kubernetes' pause.c.
packages=(make git ca-certificates gcc libc6-dev)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "install-deps: installing ${missing[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

want_go=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../operator/go.mod")
if ! command -v go >/dev/null; then
	echo "install-deps: Go $want_go or newer is required (https://go.dev/doc/install)" >&2
	exit 1
fi
have_go=$(go env GOVERSION | sed 's/^go//')
if [[ "$(printf '%s\n%s\n' "$want_go" "$have_go" | sort -V | head -1)" != "$want_go" ]]; then
	echo "install-deps: Go $have_go is older than the $want_go that operator/go.mod needs" >&2
	exit 1
fi
