# shellcheck shell=bash
# hold_lock NAME: waits for and holds, until this shell exits, the lock NAME of the build cache
# (${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/locks/NAME.lock). make test runs builds in the
# background while tiers run that need the same things; with the lock the second comes after
# the first and finds its result instead of building it again, or breaking it.
# The lock's file descriptor is $lock_fd: a process started to outlive the shell (a daemon) must
# be started with {lock_fd}>&-, or it holds the lock for as long as it runs.
hold_lock() {
	local dir=${FLASHCACHE_CACHE:-$HOME/.cache/flashcache}/locks
	mkdir -p "$dir"
	exec {lock_fd}>"$dir/$1.lock"
	if ! flock -n "$lock_fd"; then
		echo "${0##*/}: waiting for another run holding $dir/$1.lock" >&2
		flock "$lock_fd"
	fi
}
