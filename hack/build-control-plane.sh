#!/usr/bin/env bash
# Build real Kubernetes control-plane binaries (etcd, kube-apiserver, kubectl,
# optionally kube-controller-manager, kube-scheduler, kwok, the fake kubelet
# of the end-to-end tests, kubelet and kube-proxy for the demo's real node, and helm for the
# chart's tests) from the Go module proxy into a cache folder usable as KUBEBUILDER_ASSETS for
# envtest.
#
# Usage: hack/build-control-plane.sh [component...]
#   components: etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok helm
#               kubelet kube-proxy
#   default:    etcd kube-apiserver kubectl
#
#   KUBEBUILDER_ASSETS="$(hack/build-control-plane.sh)"
#
# Versions are pinned only in the module hack/control-plane (go.mod + go.sum, built with
# -mod=readonly), one module for every program so that their shared packages compile once.
# Cache: ${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/control-plane/
#        <k8s version>-etcd-<etcd version>-go<go version>/
# Only missing binaries are built. kwok's and helm's versions are not in the folder
# name (so adding them did not orphan existing caches); a kwok or helm binary that
# reports another version than the pinned one counts as missing. Progress goes to stderr; the only line on
# stdout is the absolute path of the folder holding the binaries.
set -euo pipefail

readonly ALL_COMPONENTS=(etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok helm kubelet kube-proxy)
readonly DEFAULT_COMPONENTS=(etcd kube-apiserver kubectl)

log() { printf 'build-control-plane: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
	cat >&2 <<EOF
usage: $0 [component...]
  components: ${ALL_COMPONENTS[*]}
  default:    ${DEFAULT_COMPONENTS[*]}
Prints the absolute path of the binary folder (for KUBEBUILDER_ASSETS) on stdout.
Cache root: \${FLASHCACHE_CACHE:-\$HOME/.cache/flashcache}
EOF
}

components=("$@")
if [[ ${#components[@]} -eq 0 ]]; then
	components=("${DEFAULT_COMPONENTS[@]}")
fi
for c in "${components[@]}"; do
	case "$c" in
	-h | --help)
		usage
		exit 0
		;;
	etcd | kube-apiserver | kubectl | kube-controller-manager | kube-scheduler | kwok | helm | kubelet | kube-proxy) ;;
	*)
		usage
		die "unknown component: $c"
		;;
	esac
done

command -v go >/dev/null 2>&1 || die "go is not installed or not in PATH"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
readonly mod_dir="$repo_root/hack/control-plane"

# The module must be built on its own, never as part of a workspace.
export GOWORK=off
export CGO_ENABLED=0

# Module query; -mod=readonly so the committed go.sum is what gets verified (never silently
# updated).
modfield() { # module template
	(cd "$mod_dir" && go list -mod=readonly -m -f "$2" "$1")
}

k8s_version="$(modfield k8s.io/kubernetes '{{.Version}}')"
etcd_version="$(modfield go.etcd.io/etcd/server/v3 '{{.Version}}')"
kwok_version="$(modfield sigs.k8s.io/kwok '{{.Version}}')"
helm_version="$(modfield helm.sh/helm/v4 '{{.Version}}')"
go_version="$(cd "$mod_dir" && go env GOVERSION)"
go_version="${go_version#go}"
[[ -n "$k8s_version" && -n "$etcd_version" && -n "$kwok_version" && -n "$helm_version" && -n "$go_version" ]] ||
	die "could not determine versions (k8s='$k8s_version' etcd='$etcd_version' kwok='$kwok_version' helm='$helm_version' go='$go_version')"

cache_root="${FLASHCACHE_CACHE:-${HOME:?HOME is not set}/.cache/flashcache}"
out_dir="$cache_root/control-plane/${k8s_version}-etcd-${etcd_version}-go${go_version}"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd -P)"

# present: the binary is there and, for kwok (whose version the folder name does
# not carry), is the pinned version. kwok prints "kwok version v0.8.0 go1.26.8 ...".
present() { # component
	[[ -x "$out_dir/$1" ]] || return 1
	case $1 in
	kwok) [[ "$("$out_dir/kwok" --version 2>/dev/null)" == "kwok version $kwok_version "* ]] || return 1 ;;
	helm) [[ "$("$out_dir/helm" version --template '{{.Version}}' 2>/dev/null)" == "$helm_version" ]] || return 1 ;;
	esac
}

# print_folder: says where the binaries are, prints the folder and ends the script.
print_folder() {
	log "binaries in $out_dir"
	printf '%s\n' "$out_dir"
	exit 0
}

# find_missing: sets missing to the components asked for that are not built yet.
find_missing() {
	missing=()
	local c
	for c in "${components[@]}"; do
		present "$c" || missing+=("$c")
	done
}
find_missing

if [[ ${#missing[@]} -gt 0 ]]; then
	# Serialise concurrent runs on the same folder: the second one waits and
	# then finds the binaries already built. It looks again every few seconds
	# while it waits, and goes on as soon as what it asked for is there: the
	# other run may be building more (make test's preparation builds kubelet
	# after the components test-e2e waits for, and kube-apiserver after the
	# helm verify-generated waits for).
	if command -v flock >/dev/null 2>&1; then
		exec 9>"$out_dir/.lock"
		if ! flock -n 9; then
			log "waiting for another build in $out_dir"
			until flock -w 5 9; do
				find_missing
				[[ ${#missing[@]} -gt 0 ]] || print_folder
			done
		fi
		# Holding the lock: leftovers of killed runs can go.
		rm -rf "$out_dir"/.build.*
	fi

	tmp_dir="$(mktemp -d "$out_dir/.build.XXXXXX")"
	trap 'rm -rf "$tmp_dir"' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	# Version stamping, as done by kubernetes' hack/lib/version.sh. kubectl
	# (and envtest) parse the server's /version, which comes from
	# k8s.io/component-base/version; client-go's copy feeds the User-Agent.
	# buildDate is the publication time of the pinned module (reproducible).
	build_date="$(modfield k8s.io/kubernetes '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}')"
	build_date="${build_date:-1970-01-01T00:00:00Z}"
	k8s_semver="${k8s_version#v}"
	k8s_major="${k8s_semver%%.*}"
	k8s_minor="${k8s_semver#*.}"
	k8s_minor="${k8s_minor%%.*}"
	k8s_ldflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version"
		k8s_ldflags+=" -X $pkg.gitMajor=$k8s_major"
		k8s_ldflags+=" -X $pkg.gitMinor=$k8s_minor"
		k8s_ldflags+=" -X $pkg.gitTreeState=clean"
		k8s_ldflags+=" -X $pkg.buildDate=$build_date"
	done
	# etcd normally stamps the git commit; a module build has none, so record
	# the version tag instead of "Not provided (use ./build instead of go build)".
	etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version"

	log "building ${missing[*]} (kubernetes $k8s_version, etcd $etcd_version, kwok $kwok_version, go $go_version) into $out_dir"
	for c in "${missing[@]}"; do
		if present "$c"; then # built meanwhile by a concurrent run
			log "$c: already present"
			continue
		fi
		case "$c" in
		etcd)
			pkg=go.etcd.io/etcd/server/v3 ldflags="$etcd_ldflags" check=(--version)
			;;
		kwok)
			# Its release build stamps the same version into pkg/consts, which the
			# module's source already carries; nothing to add.
			pkg=sigs.k8s.io/kwok/cmd/kwok ldflags="-s -w" check=(--version)
			;;
		helm)
			# As helm's own Makefile stamps it; unstamped, helm says "v4.3".
			pkg=helm.sh/helm/v4/cmd/helm check=(version)
			ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
			;;
		kubectl)
			pkg="k8s.io/kubernetes/cmd/$c" ldflags="$k8s_ldflags" check=(version --client)
			;;
		*)
			pkg="k8s.io/kubernetes/cmd/$c" ldflags="$k8s_ldflags" check=(--version)
			;;
		esac
		log "$c: go build $pkg"
		start=$SECONDS
		(cd "$mod_dir" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp_dir/$c" "$pkg") >&2 ||
			die "$c: build failed"
		"$tmp_dir/$c" "${check[@]}" >&2 || die "$c: built binary does not run"
		mv -f "$tmp_dir/$c" "$out_dir/$c"
		log "$c: done in $((SECONDS - start))s"
	done
fi

print_folder
