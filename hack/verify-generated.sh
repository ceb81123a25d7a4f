#!/usr/bin/env bash
# Regenerates what `make generate` owns and fails if anything changed, so that the CRDs in crds/
# (what users apply) can never drift from the Go types. Works on a dirty tree: it compares
# against a copy taken before generating, not against git.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=hack/lib/packages.sh
source hack/lib/packages.sh
require make

before=$(mktemp -d)
trap 'rm -rf "$before"' EXIT
for path in "$@"; do
	if [[ -e $path ]]; then
		cp -a --parents "$path" "$before/"
	fi
done
make --no-print-directory generate >/dev/null
stale=0
for path in "$@"; do
	if ! diff -r -u "$before/$path" "$path"; then
		stale=1
	fi
done
if ((stale)); then
	echo "generated files were stale (now regenerated above): review and commit them" >&2
	exit 1
fi
echo "generated files are up to date: $*"
