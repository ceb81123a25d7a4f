#!/usr/bin/env bash
# install-venv.sh NAME: installs the pinned Python tools of hack/NAME-requirements.txt into a
# virtualenv under ${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/NAME/<hash of the requirements>,
# from PyPI, and prints the virtualenv's bin folder. A warm run costs nothing; changing a pin
# makes a new one. Progress goes to stderr; only the folder goes to stdout.
set -euo pipefail
exec 3>&1 1>&2
# shellcheck source=hack/lib/packages.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/packages.sh"

name=${1:?usage: install-venv.sh NAME (hack/NAME-requirements.txt)}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
requirements=$repo/hack/$name-requirements.txt
key=$(sha256sum "$requirements" | cut -c1-16)
venv=${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/$name/$key

# .complete is written last, so an interrupted install is started again.
if [[ -f $venv/.complete ]]; then
	echo "$venv/bin" >&3
	exit 0
fi
hold_lock "$name-venv"
if [[ -f $venv/.complete ]]; then # installed while this waited
	echo "$venv/bin" >&3
	exit 0
fi

require python3
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
	require_packages python3-venv
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
touch "$venv/.complete"
echo "install-venv: $(grep -v "^#" "$requirements" | tr "\n" " ")installed in $venv" >&2
echo "$venv/bin" >&3
