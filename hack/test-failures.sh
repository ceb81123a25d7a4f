#!/usr/bin/env bash
# hack/test-failures.sh [--short] LOG...: why each failed tier failed, in a few lines per log.
#
# For a `go test -v` log: each innermost failing test with the first lines it printed (its
# t.Error and t.Fatal messages among them), and the guest kernel's complaints a VM test's
# diagnostics list. For any other log (lint, the demo): its last lines. make test prints this
# after its table, at the very end of the run, because a reader who sees only a run's last lines
# (CI's report of a run) otherwise sees the end of a long log and not the failure.
#
# --short: one line a failure, for the run's very last lines when several tiers failed (a
# report that keeps only a run's head and tail once lost a test's message under the demo's log):
# each innermost failing test with the first line of its last message, or a non-Go log's last
# error.
set -euo pipefail

short=0
if [[ ${1:-} == --short ]]; then
	short=1
	shift
fi

for log in "$@"; do
	tier=$(basename "$log" .log)
	((short)) || echo "---- why $tier failed (whole log: $log) ----"
	awk -v short="$short" -v tier="$tier" -v per_test=8 -v width=300 -v budget=80 '
		function cut(s) { return length(s) > width ? substr(s, 1, width) " ..." : s }
		function say(s) { if (budget-- > 0) print cut(s) }
		# First pass: the failing tests, in the order go test reports them.
		NR == FNR {
			if (match($0, /^[ \t]*--- FAIL: [^ ]+/)) {
				name = substr($0, RSTART, RLENGTH)
				sub(/^[ \t]*--- FAIL: /, "", name)
				if (!(name in failing)) order[++n] = name
				failing[name] = 1
			}
			# A non-Go log, in short: its last line that begins with an error ("Error: ...",
			# "demo: FAILED: ..."), else its last that says one; make'"'"'s own left out.
			if ($0 !~ /^make(\[[0-9]+\])?: /) {
				if ($0 ~ /^[ \t]*([A-Za-z0-9_.-]+: )?(Error|ERROR|FAILED|FATAL|fatal)[: ]/) errstart = $0
				else if ($0 ~ /[Ee]rror|FAIL|[Ff]ailed/) errmention = $0
			}
			last[FNR % 30] = $0
			lines = FNR
			next
		}
		FNR == 1 {
			for (i = 1; i <= n; i++) {
				leaf[order[i]] = 1
				for (j = 1; j <= n; j++)
					if (index(order[j], order[i] "/") == 1) delete leaf[order[i]]
			}
			if (n == 0 && short) {
				say(tier ": " (errstart != "" ? errstart : errmention != "" ? errmention : "(no error line; see its digest above)"))
				exit
			}
			if (n == 0) {
				say("(no failing Go test; the log ends:)")
				for (i = (lines > 30 ? lines - 29 : 1); i <= lines; i++) say(last[i % 30])
				exit
			}
		}
		/^=== (RUN|CONT|NAME) / { current = $3; complaints = 0; next }
		# In short, a test'"'"'s last message: a t.Fatal is the last thing its test says.
		short {
			if (current in leaf && /^[ \t]+[^ \t]+_test\.go:[0-9]+: /) {
				said[current] = $0
				sub(/^[ \t]+/, "", said[current])
			}
			next
		}
		# Blank lines and Ansible'"'"'s deprecation notices say nothing of a failure.
		/^[ \t]*$/ || /DEPRECATION WARNING|\[WARNING\]: Deprecation/ { next }
		/the kernel.s complaints:/ { complaints = 25; say("  " current ", the guest kernel said:"); next }
		complaints > 0 {
			if ($0 ~ /^[ \t]*--- console, last lines/) { complaints = 0; next }
			complaints--
			say($0)
			next
		}
		current in leaf && shown[current] < per_test {
			if (!shown[current]++) say("  " current ":")
			say($0)
			next
		}
		/^(FAIL|panic:)/ { say($0) }
		END {
			if (short)
				for (i = 1; i <= n; i++)
					if (order[i] in leaf) say(tier ": " order[i] ": " (order[i] in said ? said[order[i]] : "(no message)"))
		}
	' "$log" "$log"
done
