#!/usr/bin/env bash
# Latency of N tasks served three ways on the same cores (all with weftd, real processes and
# sockets, load from weft-bench):
#   virtual  one weftd, all cores, one virtual model per task, --policy fair
#   fifo     the same weftd with --policy fcfs (co-location without fairness)
#   spatial  N weftd processes, each given its share of the cores (--threads, taskset), one task
# Each task gets an open-loop Poisson load of RATE requests/s (NREQ requests, INPUT prompt
# tokens, OUTPUT generated), the N loads at once. Prints mean / p99 end-to-end latency per task.
#   bench/vmodels/latency.sh [N=2] [RATE=1] [NREQ=20] [INPUT=64] [OUTPUT=32]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-2}; RATE=${2:-1}; NREQ=${3:-20}; INPUT=${4:-64}; OUTPUT=${5:-32}
source bench/vmodels/lib.sh
ADAPTER=tests/engine/data/lora/smollm2.gguf
CORES=$(nproc)
OUT=$(mktemp -d /tmp/weft-vm-lat-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

vflags() { for t in $(seq 0 $((N - 1))); do echo --vmodel "id=t$t,adapter=$ADAPTER"; done; }

start() { # PORT THREADS CPUS POLICY [vmodels...]
  local p=$1 th=$2 cpus=$3 pol=$4; shift 4
  taskset -c "$cpus" "$BIN/weftd" --model "$MODEL" --port "$p" --threads "$th" --policy "$pol" \
    "${WEFTD_FLAGS[@]}" "$@" >"$OUT/weftd-$p.log" 2>&1 &
  PIDS+=($!)
  wait_ready "$p" "$OUT/weftd-$p.log"
}

load() { # LABEL PORT MODEL
  "$BIN/weft-bench" --port "$2" --model "$3" --rate "$RATE" --num-requests "$NREQ" \
    --input-len "$INPUT" --output-len "$OUTPUT" --seed "${4:-0}" --label "$1" --no-progress \
    --json "$OUT/$1.json" >"$OUT/$1.txt" 2>&1 &
}

report() { # LABEL
  python3 - "$OUT" "$1" "$N" <<'EOF'
import json, sys
out, label, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
m, p99 = [], []
for t in range(n):
    r = json.load(open("%s/%s-t%d.json" % (out, label, t)))
    r = r["runs"][0]
    m.append(r["mean_e2el_ms"]); p99.append(r["p99_e2el_ms"])
print("%-8s mean e2e %s ms (avg %.0f), p99 %s ms" % (label, [round(x) for x in m],
      sum(m) / n, [round(x) for x in p99]))
EOF
}

for mode in virtual fifo; do
  P=$(free_port)
  start "$P" "$CORES" "0-$((CORES - 1))" "$([ $mode = virtual ] && echo fair || echo fcfs)" $(vflags)
  LOADS=()
  for t in $(seq 0 $((N - 1))); do load "$mode-t$t" "$P" "t$t" "$t"; LOADS+=($!); done
  wait "${LOADS[@]}"
  kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true; PIDS=()
  report "$mode"
done

# spatial: task t on cores [t*CORES/N, (t+1)*CORES/N)
per=$((CORES / N)); [ "$per" -ge 1 ] || per=1
PORTS=()
for t in $(seq 0 $((N - 1))); do
  P=$(free_port); PORTS+=("$P")
  lo=$(( (t * per) % CORES )); hi=$(( lo + per - 1 ))
  start "$P" "$per" "$lo-$hi" fcfs --vmodel "id=t$t,adapter=$ADAPTER"
done
LOADS=()
for t in $(seq 0 $((N - 1))); do load "spatial-t$t" "${PORTS[$t]}" "t$t" "$t"; LOADS+=($!); done
wait "${LOADS[@]}"
report spatial
echo "results in $OUT"
