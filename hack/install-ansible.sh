#!/usr/bin/env bash
# Installs the pinned Ansible toolchain (hack/ansible-requirements.txt) into its virtualenv with
# install-venv.sh and prints the virtualenv's bin folder.
set -euo pipefail
# shellcheck source=hack/lib/packages.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/packages.sh"
# ansible-playbook reaches hosts with OpenSSH's client.
require ssh >&2
exec "$(dirname "${BASH_SOURCE[0]}")/install-venv.sh" ansible
