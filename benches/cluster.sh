#!/bin/bash
# usage: STORE=PATH [EXTRA="--memory-budget-mb 20000"] benches/cluster.sh N RUNS SQL
# Starts N `culprit worker`s and a `culprit serve` coordinator over STORE
# (N=0: a single server), runs SQL RUNS times with psql and prints, per run,
# its wall time, its answer and the bytes each worker read (rchar), then
# every process's peak memory (VmHWM). docs/performance.md, "A cluster".
N=$1; RUNS=$2; SQL=$3
BIN=${BIN:-target/release/culprit}
STORE=${STORE:?set STORE to a culprit store}
pids=(); urls=()
for i in $(seq $N); do
  RUST_LOG=info $BIN worker --store $STORE --listen 127.0.0.1:0 2> /tmp/w$i.log &
  pids+=($!)
done
for i in $(seq $N); do
  for t in $(seq 100); do grep -q "on http://" /tmp/w$i.log && break; sleep 0.1; done
  urls+=($(grep -o "on http://[0-9.:]*" /tmp/w$i.log | head -1 | sed 's/on http:\/\///'))
done
W=""
if [ $N -gt 0 ]; then W="--workers $(IFS=,; echo "${urls[*]}")"; fi
RUST_LOG=info $BIN serve --store $STORE --listen 127.0.0.1:0 --compact-files 0 $EXTRA $W 2> /tmp/coord.log &
cpid=$!
for t in $(seq 100); do grep -q "postgres://" /tmp/coord.log && break; sleep 0.1; done
addr=$(grep -o "postgres://[0-9.:]*" /tmp/coord.log | head -1 | sed "s/postgres:\/\///")
host=${addr%:*}; port=${addr##*:}
for r in $(seq $RUNS); do
  before=(); for p in "${pids[@]}"; do before+=($(grep rchar /proc/$p/io | awk '{print $2}')); done
  s=$(date +%s.%N)
  out=$(psql -h $host -p $port -U culprit -d culprit -At -c "$SQL" 2>&1)
  e=$(date +%s.%N)
  reads=""; j=0; for p in "${pids[@]}"; do a=$(grep rchar /proc/$p/io | awk '{print $2}'); reads="$reads $(( (a - ${before[$j]}) / 1000000 ))MB"; j=$((j+1)); done
  echo "workers=$N run $r: $(echo "$e - $s" | bc) s, answer [$out], read per worker:$reads"
done
hwm="coord $(grep VmHWM /proc/$cpid/status | awk '{print $2/1024}')MiB"
for p in "${pids[@]}"; do hwm="$hwm w $(grep VmHWM /proc/$p/status | awk '{print $2/1024}')MiB"; done
echo "workers=$N peak: $hwm"
kill $cpid "${pids[@]}" 2>/dev/null; wait 2>/dev/null
