#!/usr/bin/env bash
# One request at a time: weftd with one virtual model (MODE=vm, the SmolLM2 test adapter) or
# the bare backbone (MODE=bare), a closed loop of concurrency 1; prints the mean / median
# end-to-end latency, mean TTFT and TPOT. PERF=1 also records weftd with `perf record -g` and
# prints perf's flat profile (self time by symbol): where a lone request's time goes.
#   bench/vmodels/lone.sh [MODE=vm] [THREADS=cores] [NREQ=10] [INPUT=64] [OUTPUT=32]
# Run it inside a cgroup of high CPU weight to see the request's own time on a shared host
# (see BENCHMARKS.md), outside it to see what contention adds.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/vmodels/lib.sh
MODE=${1:-vm}; THREADS=${2:-$(nproc)}; NREQ=${3:-10}; INPUT=${4:-64}; OUTPUT=${5:-32}
OUT=$(mktemp -d /tmp/weft-vm-lone-XXXXXX)
P=$(free_port)
VM=(); M=()
if [ "$MODE" = vm ]; then
  VM=(--vmodel "id=t0,adapter=tests/engine/data/lora/smollm2.gguf"); M=(--model t0)
fi
"$BIN/weftd" --model "$MODEL" --port "$P" --threads "$THREADS" --policy fair "${WEFTD_FLAGS[@]}" \
  "${VM[@]}" >"$OUT/weftd.log" 2>&1 &
WP=$!; PP=""
trap 'kill $WP 2>/dev/null || true; [ -z "$PP" ] || kill -INT $PP 2>/dev/null || true' EXIT
wait_ready "$P" "$OUT/weftd.log"
if [ "${PERF:-0}" = 1 ]; then
  perf record -F 999 -g -p "$WP" -o "$OUT/perf.data" >"$OUT/perf.log" 2>&1 &
  PP=$!
  sleep 0.5
fi
"$BIN/weft-bench" --port "$P" "${M[@]}" --concurrency 1 --num-requests "$NREQ" \
  --input-len "$INPUT" --output-len "$OUTPUT" --no-progress --json "$OUT/lone.json" \
  >"$OUT/lone.txt" 2>&1
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print('%s, %s threads: mean e2e %.0f ms, median %.0f, mean TTFT %.1f ms, mean TPOT %.2f ms' % (sys.argv[2], sys.argv[3], r['mean_e2el_ms'], r['median_e2el_ms'], r['mean_ttft_ms'], r['mean_tpot_ms']))" \
  "$OUT/lone.json" "$MODE" "$THREADS"
if [ -n "$PP" ]; then
  kill -INT "$PP"; wait "$PP" || true; PP=""
  perf report -i "$OUT/perf.data" --no-children --sort symbol -g none 2>/dev/null |
    grep -v '^#' | grep -v '^$' | head -14
fi
echo "results in $OUT"
