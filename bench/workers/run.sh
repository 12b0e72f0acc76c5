#!/usr/bin/env bash
# weftd --workers 2 (two worker processes, one core each) against one weftd process with two
# threads, under the same weft-bench load, one after the other in one run. Prints both result
# tables and the output-token ratio (workers / threads).
#
#   BUILD=build CONCURRENCY=16 IN_LEN=128 OUT_LEN=64 NUM_REQUESTS=96 REPS=2 bench/workers/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
CONCURRENCY=${CONCURRENCY:-16}
IN_LEN=${IN_LEN:-128}
OUT_LEN=${OUT_LEN:-64}
NUM_REQUESTS=${NUM_REQUESTS:-96}
REPS=${REPS:-2}
OUT=${OUT:-$(mktemp -d /tmp/weft-bench-workers.XXXXXX)}
WEFTD="$BUILD/bin/weftd"
BENCH="$BUILD/bin/weft-bench"
PORT=${PORT:-18990}

serve() { # label, extra flags...
  local label=$1; shift
  "$WEFTD" --model "$MODEL" --port "$PORT" --max-running 16 --kv-memory-mb 512 \
    --admission-factor 1000 "$@" >"$OUT/$label.log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  echo "$pid"
}

run_point() { # label rep
  "$BENCH" --port "$PORT" --concurrency "$CONCURRENCY" --input-len "$IN_LEN" --output-len "$OUT_LEN" \
    --num-requests "$NUM_REQUESTS" --duration 300 --grace 60 --seed "$2" --label "$1" \
    --json "$OUT/$1-$2.json" --no-progress >"$OUT/$1-$2.txt"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq "$REPS"); do
  # Alternate the order so a drift in the machine's load hits both alike.
  for label in $( ((rep % 2)) && echo "threads workers" || echo "workers threads"); do
    if [ "$label" = threads ]; then pid=$(serve threads --threads 2)
    else pid=$(serve workers --workers 2); fi
    run_point "$label" "$rep"
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$REPS" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def col(label, key):
    return [json.load(open(f"{out}/{label}-{r}.json"))["runs"][0][key] for r in range(1, reps + 1)]
print(f"{'':10} {'out tok/s':>10} {'TTFT p50 ms':>12} {'TPOT p50 ms':>12}  (median of {reps} runs)")
tok = {}
for label in ("threads", "workers"):
    tok[label] = statistics.median(col(label, "output_throughput"))
    print(f"{label:10} {tok[label]:10.1f} {statistics.median(col(label, 'median_ttft_ms')):12.1f} "
          f"{statistics.median(col(label, 'median_tpot_ms')):12.1f}")
print(f"workers / threads output tok/s: {tok['workers'] / tok['threads']:.2f}x")
PY
echo "results in $OUT"
