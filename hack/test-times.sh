#!/usr/bin/env bash
# test-times.sh [LOG_DIR] [N]: where a `make test` run's time went, per test. Reads the go test
# verdicts (`--- PASS: Name (12.34s)`) in each tier's log under LOG_DIR (default test-logs/) and
# prints the N slowest tests and subtests of each tier (default 8), beside the tier's time from
# times.tsv. A subtest's seconds are part of its parent's.
set -euo pipefail
logs=${1:-test-logs}
n=${2:-8}
[[ -f $logs/times.tsv ]] || {
	echo "test-times: no $logs/times.tsv (run make test first)" >&2
	exit 1
}
printf '| tier (seconds) | test | seconds | result |\n| --- | --- | --- | --- |\n'
tail -n +2 "$logs/times.tsv" | sort -t$'\t' -k2,2nr | while IFS=$'\t' read -r tier seconds _; do
	[[ -f $logs/$tier.log ]] || continue
	grep -E -- '^ *--- (PASS|FAIL): .* \([0-9.]+s\)$' "$logs/$tier.log" |
		sed -E 's/^( *)--- (PASS|FAIL): (.*) \(([0-9.]+)s\)$/\4\t\3\t\2/' |
		sort -t$'\t' -k1,1nr | head -n "$n" |
		awk -F'\t' -v tier="$tier ($seconds)" '{printf "| %s | %s | %.0f | %s |\n", (NR == 1 ? tier : ""), $2, $1, tolower($3) "ed"}'
done
