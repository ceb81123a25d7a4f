#!/usr/bin/env bash
# make test: every tier, in the order and grouping that fits a 2-core machine.
#
#   hack/test.sh "FIRST TIERS" "LAST TIERS" SIDE_BY_SIDE "QUEUED TIERS"
#
# 1. `make test-prepare` starts in the background, at a lower priority: the cold builds and
#    installs (control plane, VM image, Ansible, the images), which on a fresh machine wait on the
#    network and on single-threaded links as much as on the CPU.
# 2. The serial tiers run one after another in the foreground, their output as it comes.
# 3. Then SIDE_BY_SIDE workers run the queued tiers: each takes the queue's next tier when its
#    last one ends, so the tiers start in the queue's order, at most SIDE_BY_SIDE at a time. The
#    kernel-level tiers spend much of their time waiting on emulated disks, sleeps and boots, which
#    leaves CPU for the others. A queue rather than fixed lanes: whichever tier ends first frees
#    its place for the next, so no lane idles at the end while another still has two tiers to go.
# 4. Last, the last tiers one after another, alone: those not yet seen to pass beside others.
# A tier that needs what the preparation is still building waits for it through the build
# scripts' locks (hack/lib/lock.sh, and build-control-plane.sh's own) and then finds it built.
#
# Every tier's output goes to $TEST_LOGS/<tier>.log (default test-logs/ in the checkout); a line
# says when each starts and ends, a failed tier's whole log is printed, and the times go to
# $TEST_LOGS/times.tsv and a table at the end. A failed queued tier does not stop the queue: one
# run reports every tier that fails (a CI run is an hour; a run that stopped at its first
# failure left the next tiers untried and unlisted), and the run fails.
#
# Every tier runs under one deadline, TEST_DEADLINE_SECONDS after the start (default 87 minutes:
# inside CI's 90, with room for the KILL a minute after it): a tier still running then is
# stopped, its log printed and the run failed, so a CI run that would run out of time names the
# tier that held it and shows its log (a run once spent its last 50 minutes in one tier and
# printed nothing of it).
set -euo pipefail
# Job control: each background job is a process group of its own, so that stopping it stops
# the make, go test and QEMU processes under it too.
set -m
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"
# shellcheck source=hack/lib/packages.sh
source hack/lib/packages.sh
require make

(($# == 4)) && [[ $3 =~ ^[1-9][0-9]*$ ]] || {
	echo "usage: $0 'FIRST TIERS' 'LAST TIERS' SIDE_BY_SIDE 'QUEUED TIERS'" >&2
	exit 2
}
logs=${TEST_LOGS:-$root/test-logs}
rm -rf "$logs"
mkdir -p "$logs"
times=$logs/times.tsv
printf 'tier\tseconds\tresult\tstarted\tcpu_seconds\n' >"$times"
began=$SECONDS
deadline=$((began + ${TEST_DEADLINE_SECONDS:-5220}))

say() { printf '\n==> %s [%s, %d s in]\n' "$*" "$(date -u +%T)" "$((SECONDS - began))"; }

# children_cpu VAR: sets VAR to the CPU seconds (user and system) of this shell's finished
# children so far, QEMU and go test under a tier's make among them, as bash's `times` counts them.
# It must run in the shell itself, not in a command substitution, which would count its own.
cpu_file=$logs/.cpu
children_cpu() {
	local file=$cpu_file.$BASHPID
	times >"$file"
	printf -v "$1" '%s' "$(awk 'NR == 2 {s = 0; for (i = 1; i <= 2; i++) {split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2]} printf "%d", s}' "$file")"
	rm -f "$file"
}

# record NAME START STAMP RC CPU: adds a step's line to times.tsv and sets $result. RC 124: the
# tier was stopped at the deadline; 125: it was not started, the deadline having passed.
record() {
	result=passed
	(($4 == 0)) || result="FAILED (exit $4)"
	(($4 != 124)) || result="FAILED (stopped at the deadline)"
	(($4 != 125)) || result="FAILED (not started: the deadline had passed)"
	printf '%s\t%d\t%s\t%s\t%s\n' "$1" "$((SECONDS - $2))" "$result" "$3" "$5" >>"$times"
}

# tier NAME [LOG]: runs `make NAME`, into LOG when given (else to this terminal); records its time.
tier() {
	local name=$1 log=${2:-} start=$SECONDS stamp rc=0 cpu_before cpu_after
	stamp=$(date -u +%T)
	local left=$((deadline - SECONDS)) result
	if ((left <= 0)); then
		record "$name" "$start" "$stamp" 125 0
		say "$name $result"
		return 1
	fi
	children_cpu cpu_before
	say "start $name"
	# timeout runs make in a process group of its own and signals all of it: go test, QEMU and
	# the demo's cluster stop with it (exit 124, or 137 when it took a KILL). Being a group of its
	# own, the workers' kill at exit does not reach it: the exit trap signals it by its pid file.
	if [[ -n $log ]]; then
		timeout --kill-after=60 "$left" make --no-print-directory "$name" >"$log" 2>&1 &
	else
		timeout --kill-after=60 "$left" make --no-print-directory "$name" &
	fi
	echo "$!" >"$logs/.running.$name"
	wait "$!" || rc=$?
	rm -f "$logs/.running.$name"
	((rc == 0 || SECONDS < deadline)) || rc=124
	children_cpu cpu_after
	record "$name" "$start" "$stamp" "$rc" "$((cpu_after - cpu_before))"
	say "$name $result in $((SECONDS - start)) s${log:+, log $log}"
	if ((rc != 0)) && [[ -n $log ]]; then
		echo "---- $log ----"
		cat "$log"
		echo "---- end of $log ----"
	elif [[ -n $log ]]; then
		# What a passing tier ran, by test: go test's verdict lines and the demo's count.
		grep -E '^(ok |FAIL|--- (PASS|FAIL|SKIP)|demo: [0-9]+ passed)' "$log" || true
	fi
	return "$rc"
}

# busy_jiffies: the machine's busy and total CPU time so far, from /proc/stat's first line.
busy_jiffies() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat; }
read -r busy_began total_began < <(busy_jiffies)

summary() {
	local busy total
	read -r busy total < <(busy_jiffies)
	echo
	echo "make test: tiers (log folder $logs; cpu_seconds: the tier's processes, user and system)"
	awk -F'\t' '{printf "  %-18s %8s  %-18s %-9s %s\n", $1, $2, $3, $4, $5}' "$times"
	echo "make test: $((SECONDS - began)) s in all; the machine's CPUs were busy" \
		"$(((busy - busy_began) * 100 / (total - total_began)))% of that time"
	awk -F'\t' 'NR > 1 {if ($3 == "passed") p++; else f++} END {printf "tiers: %d passed, %d failed\n", p, f}' "$times"
}

# Background preparation; the serial tiers wait for what they need through the build scripts'
# own locks and caches.
prepare_log=$logs/test-prepare.log
say "start test-prepare (background, log $prepare_log)"
(
	start=$SECONDS
	stamp=$(date -u +%T)
	rc=0
	# Niced: the tiers come first. Some of them measure time (the durability check tells a lying
	# disk from an honest one by its flush latency), and a cold build at full priority beside
	# them once made a liar's flush look 3 ms slow.
	nice --adjustment=10 make --no-print-directory test-prepare >"$prepare_log" 2>&1 || rc=$?
	children_cpu cpu
	record test-prepare "$start" "$stamp" "$rc" "$cpu"
	exit "$rc"
) &
prepare=$!
# stop_tiers: signals the tiers still running (each a process group under its timeout).
stop_tiers() {
	local file
	for file in "$logs"/.running.*; do
		[[ -e $file ]] && kill -TERM "$(cat "$file")" 2>/dev/null || true
	done
}
# A run that ends early (a failed serial tier, ^C) does not leave the builds running.
trap 'kill -- "-$prepare" 2>/dev/null || true; stop_tiers' EXIT

failed=0
read -r -a serial <<<"$1"
read -r -a last <<<"$2"
shift 2
for name in "${serial[@]}"; do
	if ! tier "$name"; then
		failed=1
		break
	fi
done

if ((failed)); then
	summary
	exit 1
fi

# The queue: one tier a line, taken from the top under a lock by whichever worker is free.
queue=$logs/.queue
read -r -a queued <<<"$2"
printf '%s\n' "${queued[@]}" >"$queue"
# next_tier: prints the queue's next tier and takes it off; fails when the queue is empty.
next_tier() {
	(
		flock 9
		local name
		name=$(head -n 1 "$queue")
		[[ -n $name ]] || exit 1
		sed -i 1d "$queue"
		echo "$name"
	) 9>"$queue.lock"
}
workers=()
for ((i = 0; i < $1; i++)); do
	(
		rc=0
		while name=$(next_tier); do
			tier "$name" "$logs/$name.log" || rc=1
		done
		exit "$rc"
	) &
	workers+=("$!")
done
trap 'for pid in "$prepare" "${workers[@]}"; do kill -- "-$pid" 2>/dev/null || true; done; stop_tiers' EXIT
for pid in "${workers[@]}"; do
	wait "$pid" || failed=1
done
if ((!failed)); then
	for name in "${last[@]}"; do
		if ! tier "$name" "$logs/$name.log"; then
			failed=1
			break
		fi
	done
fi
# Every tier has passed only if what they all built passed too. Past the deadline, what is
# still building is stopped rather than waited for.
((SECONDS < deadline)) || kill -- "-$prepare" 2>/dev/null || true
if ! wait "$prepare"; then
	failed=1
	say "test-prepare FAILED"
	echo "---- $prepare_log ----"
	cat "$prepare_log"
	echo "---- end of $prepare_log ----"
fi
trap - EXIT
summary
if ((failed)); then
	# Last, so that a reader of the run's last lines sees why, not only which tier.
	mapfile -t failed_logs < <(awk -F'\t' -v dir="$logs" 'NR > 1 && $3 != "passed" {print dir "/" $1 ".log"}' "$times")
	present=()
	for log in "${failed_logs[@]}"; do
		[[ -f $log ]] && present+=("$log")
	done
	if ((${#present[@]})); then
		hack/test-failures.sh "${present[@]}"
		echo "---- in short ----"
		hack/test-failures.sh --short "${present[@]}"
	fi
	echo "make test: FAILED (see the logs above and in $logs)"
	exit 1
fi
echo "make test: every tier passed"
