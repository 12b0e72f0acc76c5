#!/usr/bin/env bash
# Where the time goes in latency.sh's virtual-model run: one weftd on all cores with one
# virtual model per task (--policy fair, the same flags as latency.sh), N loads of RATE
# requests/s at once, `perf record -g` on weftd for the whole load; prints each task's mean /
# p99 end-to-end latency and perf's flat profile (self time by symbol).
#   bench/vmodels/profile.sh [N=2] [RATE=0.5] [NREQ=8] [INPUT=64] [OUTPUT=32]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-2}; RATE=${2:-0.5}; NREQ=${3:-8}; INPUT=${4:-64}; OUTPUT=${5:-32}
BIN=${WEFT_BIN_DIR:-build/bin}
MODEL=${WEFT_MODEL:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
ADAPTER=tests/engine/data/lora/smollm2.gguf
OUT=$(mktemp -d /tmp/weft-vm-prof-XXXXXX)
P=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
VM=()
for t in $(seq 0 $((N - 1))); do VM+=(--vmodel "id=t$t,adapter=$ADAPTER"); done
"$BIN/weftd" --model "$MODEL" --port "$P" --threads "$(nproc)" --policy fair --kv-memory-mb 128 \
  --cost-model 0.5,0.05,2,0.0005 --fixed-cost-model --default-ttft-ms 600000 "${VM[@]}" \
  >"$OUT/weftd.log" 2>&1 &
WP=$!
trap 'kill $WP 2>/dev/null || true' EXIT
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$P/health" >/dev/null && break; sleep 0.2; done
perf record -F 499 -g -p "$WP" -o "$OUT/perf.data" >"$OUT/perf.log" 2>&1 &
PP=$!
LOADS=()
for t in $(seq 0 $((N - 1))); do
  "$BIN/weft-bench" --port "$P" --model "t$t" --rate "$RATE" --num-requests "$NREQ" \
    --input-len "$INPUT" --output-len "$OUTPUT" --seed "$t" --label "t$t" --no-progress \
    --json "$OUT/t$t.json" >"$OUT/t$t.txt" 2>&1 &
  LOADS+=($!)
done
wait "${LOADS[@]}"
kill -INT "$PP"; wait "$PP" || true
for t in $(seq 0 $((N - 1))); do
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print('t%s mean e2e %.0f ms, p99 %.0f ms, mean TPOT %.1f ms' % (sys.argv[2], r['mean_e2el_ms'], r['p99_e2el_ms'], r['mean_tpot_ms']))" "$OUT/t$t.json" "$t"
done
perf report -i "$OUT/perf.data" --no-children --sort symbol -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -20
echo "results in $OUT"
