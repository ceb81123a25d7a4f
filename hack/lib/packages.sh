# shellcheck shell=bash
# What the project's scripts and Makefile run beyond a minimal Debian 12 (its priority-required
# packages, `base_commands` below) and Go, and the Debian package each command comes from.
# A script states what it runs with `require CMD...` (and `require_packages PKG...` for what is
# not a command: keyrings, certificates, headers) before it runs it, so that whatever target a user
# starts with, the packages are there; only missing ones are installed, so a warm machine pays one
# dpkg-query and needs neither root nor network.
#
# operator/test/scripts checks, in `make test`, that every command a script or a Makefile recipe
# runs is a shell builtin, a function, a base command, or required before it, and that this table
# names the package that really holds each command. Sourced; defines no other globals.

# shellcheck source=hack/lib/lock.sh
source "$(dirname "${BASH_SOURCE[0]}")/lock.sh"
# shellcheck source=hack/lib/debian-mirrors.sh
source "$(dirname "${BASH_SOURCE[0]}")/debian-mirrors.sh"

# Commands of Debian 12's priority-required packages (what debootstrap's minbase installs), which
# the scripts use without requiring them.
base_commands=(
	awk basename cat chmod chroot cmp cp cut date dd diff dirname dpkg dpkg-query du env find
	flock grep gzip head id install ln ls mkdir mktemp mount mv nice nohup nproc numfmt paste printf
	readlink realpath rm rmdir sed seq setsid sha256sum sleep sort stat tail tar tee timeout touch
	tr true uname wc xargs apt-get mke2fs
)

# Command -> the Debian package that installs it.
declare -gA package_of=(
	[make]=make
	[git]=git
	[gcc]=gcc
	[strip]=binutils
	[python3]=python3-minimal
	[pgrep]=procps
	[systemctl]=systemd
	[qemu-system-x86_64]=qemu-system-x86
	[qemu-img]=qemu-utils
	[nbdkit]=nbdkit
	[mmdebstrap]=mmdebstrap
	[ssh]=openssh-client
	[ssh-keygen]=openssh-client
	[ip]=iproute2
	[docker]=docker.io
	[dockerd]=docker.io
)

# Packages taken from the release's backports rather than the release itself, with the version
# they need at least. QEMU: bookworm's 7.2 runs the guests, which are nearly all of a warm
# `make test`'s CPU, at about two and a half times the host CPU of 10.0 from bookworm-backports
# (the same commands in the same guest; docs/testing.md).
declare -gA backport_minimum=(
	[qemu-system-x86]=1:10.0
	[qemu-utils]=1:10.0
)

# backport_installed PKG: dpkg has PKG at backport_minimum's version or later.
backport_installed() {
	local version
	version=$(dpkg-query -W -f='${Version}' "$1" 2>/dev/null) || return 1
	[[ -n $version ]] && dpkg --compare-versions "$version" ge "${backport_minimum[$1]}"
}

# install_backports PKG...: installs the packages from this release's backports (bookworm-backports
# on Debian 12), adding that suite to apt's sources, from the mirror the release comes from, when
# no source names it yet. apt prefers a backport only when told to (-t), so nothing else changes.
install_backports() {
	local codename suite uri
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:?}")
	suite=$codename-backports
	if ((EUID == 0)); then
		uri=$(debian_mirrors "$codename" | awk -v release="$codename" '$3 == release {print $2; exit}')
		(
			hold_lock apt
			if ! grep -qrsE -- "^[^#]*[[:space:]]$suite([[:space:]]|\$)" /etc/apt/sources.list /etc/apt/sources.list.d/; then
				echo "${0##*/}: adding $suite to apt's sources (/etc/apt/sources.list.d/flashcache-backports.sources)" >&2
				cat >/etc/apt/sources.list.d/flashcache-backports.sources <<-EOF
					Types: deb
					URIs: $uri
					Suites: $suite
					Components: main
					Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
				EOF
			fi
		)
	fi
	apt_install "$suite" "$@"
}

# install_packages PKG...: installs those of the packages that dpkg does not have.
install_packages() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	apt_install "" "${missing[@]}"
}

# apt_install RELEASE PKG...: installs the packages with apt, from RELEASE (apt's -t) when it is
# not empty; as root only.
apt_install() {
	local release=$1
	shift
	if ((EUID != 0)); then
		echo "${0##*/}: needs the Debian packages $*${release:+ from $release}; install them, or run as root" >&2
		return 1
	fi
	# One apt at a time: dpkg's own lock fails a second apt-get instead of waiting.
	(
		hold_lock apt
		echo "${0##*/}: installing $*${release:+ from $release}" >&2
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${release:+-t "$release"} "$@" >&2
	)
}

# require CMD...: installs the packages of the commands that are not on PATH, and those of
# backport_minimum older than their minimum.
require() {
	local packages=() backports=() c p
	for c in "$@"; do
		p=${package_of[$c]:-}
		if [[ -z $p ]]; then
			echo "${0##*/}: require $c: not in hack/lib/packages.sh's table" >&2
			return 1
		fi
		if [[ -n ${backport_minimum[$p]:-} ]]; then
			backport_installed "$p" || backports+=("$p")
		else
			command -v "$c" >/dev/null 2>&1 || packages+=("$p")
		fi
	done
	((${#packages[@]} == 0)) || install_packages "${packages[@]}"
	((${#backports[@]} == 0)) || install_backports "${backports[@]}"
}

# require_packages PKG...: for packages that are not commands (keyrings, certificates, headers).
require_packages() { install_packages "$@"; }
