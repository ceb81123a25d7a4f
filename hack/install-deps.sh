#!/usr/bin/env bash
# Installs the host packages every target needs (make itself, git for the version stamp, gcc for
# the demo's pause image) and checks the Go toolchain. Each script requires what it runs on top
# (hack/lib/packages.sh), so this is only the start. Idempotent; installs only what is missing.
set -euo pipefail
# shellcheck source=hack/lib/packages.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/packages.sh"

require make git gcc
# gcc's static link of pause.c needs libc's static archive.
require_packages ca-certificates libc6-dev

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
