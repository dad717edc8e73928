#!/usr/bin/env bash
# Times victims far from every earlier question through a warm server
# (docs/performance.md, "One victim at any store size"): starts
# `culprit serve` on STORE (no background compaction), asks one statement
# to load the query index, then each victim once through psql (`\timing`:
# the client's time, a little more than the server's), then the same
# victims again; prints the medians and the median of the reads' times
# from the server's log.
#   benches/far_victims.sh BINARY STORE [PORT]
# VICTIMS (space-separated query ids) overrides the twelve far apart on a
# store of `culprit generate --tasks 1000000 --hosts 500` (500 queries);
# PSQL names the psql to use (default: psql on the PATH).
set -euo pipefail
bin=$1 store=$2 port=${3:-5499}
victims=${VICTIMS:-"q000011 q000051 q000091 q000131 q000171 q000211 q000291 q000331 q000371 q000411 q000451 q000491"}
psql=${PSQL:-psql}
log=$(mktemp)
RUST_LOG=info "$bin" serve --store "$store" --listen "127.0.0.1:$port" --compact-files 0 >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -f "$log"' EXIT
ask() { "$psql" -h 127.0.0.1 -p "$port" -U culprit -d culprit -At "$@"; }
for _ in $(seq 100); do ask -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.2; done
ask -c "SELECT count(*) FROM culprits('q000001')" >/dev/null
round() {
  { echo '\timing on'; for v in $victims; do
      echo "SELECT count(*), round(sum(blame_seconds),6) FROM culprits('$v');"
    done; } | ask 2>&1 | grep -o "Time: [0-9.]*" | awk '{print $2}'
}
median() { sort -n | awk '{a[NR]=$1} END {printf "%.1f", (a[int((NR+1)/2)]+a[int(NR/2)+1])/2}'; }
first=$(round)
again=$(round)
n=$(echo "$victims" | wc -w)
echo "far victims: median $(echo "$first" | median) ms [$(echo $first)]"
echo "the same again: median $(echo "$again" | median) ms"
reads=$(grep -o "read for q[0-9]* in [0-9.]* s" "$log" | sed -n "2,$((n + 1))p" | awk '{print $5 * 1000}')
echo "their reads (server log): median $(echo "$reads" | median) ms"
