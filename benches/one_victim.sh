#!/usr/bin/env bash
# Times one victim's analysis as a whole process (docs/performance.md, "One
# victim at any store size"): RUNS runs of `culprit sql` asking
# culprits(VICTIM) of STORE, the median wall time and the peak memory.
#   benches/one_victim.sh BINARY STORE VICTIM [RUNS]
set -euo pipefail
bin=$1 store=$2 victim=$3 runs=${4:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
times=()
for _ in $(seq "$runs"); do
  start=$(date +%s.%N)
  /usr/bin/time -f "%M" -o "$tmp/mem" "$bin" sql --store "$store" \
    "SELECT count(*), round(sum(blame_seconds),6) FROM culprits('$victim')" >"$tmp/out" 2>&1 || true
  end=$(date +%s.%N)
  times+=("$(echo "$end - $start" | bc)")
done
median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p")
echo "$store $victim: median ${median} s; runs $(printf '%s\n' "${times[@]}" | sort -n | tr '\n' ' ')"
echo "peak memory of the last run: $(tail -1 "$tmp/mem") KiB"
grep -E '^\| [0-9]|error' "$tmp/out" | head -2
