# shellcheck shell=bash
# debian_mirrors SUITE: the host's own Debian sources (its mirror or proxy, which is what this
# network reaches), reduced to SUITE, SUITE-updates and SUITE-security main, one
# "deb URI RELEASE main" line each, for mmdebstrap; deb.debian.org when the host has none. Other
# vendors' sources a machine may have configured never leak into an image. Sourced by the
# scripts that build root file systems.
# Single-quoted $(...) below are apt's own placeholders.
# shellcheck disable=SC2016
debian_mirrors() {
	local suite=$1 found=0 uri release component
	while IFS='|' read -r uri release component; do
		echo "deb $uri $release $component"
		found=1
	done < <(apt-get indextargets --no-release-info --format '$(REPO_URI)|$(RELEASE)|$(COMPONENT)' 'Created-By: Packages' |
		grep -E "^[^|]+\|$suite(-updates|-security)?\|main$" | sort -u)
	if ((!found)); then
		echo "deb http://deb.debian.org/debian $suite main"
	fi
}
