#!/bin/sh
# Image serving throughput and latency at rising Poisson rates, step-level batching on against
# off (--image-batching false: one request at a time), one weftd each, in the same run.
#   bench/images/run.sh [build-dir]
#   (DIT=/usr/local/share/weft/models/weft-dit-fmnist RATES=2,4,8,16 DURATION=20 STEPS=20
#    THREADS=2 MAX_BATCH=8 by default)
set -eu
BUILD=${1:-build}
DIT=${DIT:-/usr/local/share/weft/models/weft-dit-fmnist}
LLM=${LLM:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
RATES=${RATES:-2,4,8,16}
DURATION=${DURATION:-20}
STEPS=${STEPS:-20}
THREADS=${THREADS:-2}
MAX_BATCH=${MAX_BATCH:-8}
PORT=${PORT:-18471}
HERE=$(dirname "$0")
MODEL=$(basename "$DIT")
for batching in true false; do
    "$BUILD/bin/weftd" --model "$LLM" --model "$DIT" --port "$PORT" --threads "$THREADS" \
        --cost-model 0.5,0.05,2,0.0005 --fixed-cost-model --kv-memory-mb 64 \
        --image-batching="$batching" --image-max-batch "$MAX_BATCH" --log-level warn &
    pid=$!
    i=0
    until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -lt 600 ] || { kill $pid; echo "weftd did not start" >&2; exit 1; }
        sleep 0.2
    done
    python3 "$HERE/drive.py" --url "http://127.0.0.1:$PORT" --model "$MODEL" --rates "$RATES" \
        --duration "$DURATION" --steps "$STEPS" --label "batching=$batching"
    kill -TERM $pid
    wait $pid || true
done
