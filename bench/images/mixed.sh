#!/bin/sh
# Mixed text + image load on one weftd (bench/images/mixed.py): chat alone, images alone, both;
# once with --share-cores=true (LLM and DiT batches take turns on the cores) and once with
# --share-cores=false (both thread pools at once), in the same run.
#   bench/images/mixed.sh [build-dir]   (DIT, LLM, DURATION=20, CHAT_CLIENTS=2, IMAGE_RATE=2, THREADS=2,
#                                         SHARE="true false")
set -eu
BUILD=${1:-build}
DIT=${DIT:-/usr/local/share/weft/models/weft-dit-fmnist}
LLM=${LLM:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
PORT=${PORT:-18472}
for share in ${SHARE:-true false}; do
echo "share-cores=$share"
"$BUILD/bin/weftd" --model "$LLM" --model "$DIT" --port "$PORT" --threads "${THREADS:-2}" \
    --cost-model 0.5,0.05,2,0.0005 --fixed-cost-model --default-ttft-ms 600000 --kv-memory-mb 64 \
    --share-cores="$share" --log-level warn &
pid=$!
i=0
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 600 ] || { kill $pid; echo "weftd did not start" >&2; exit 1; }
    sleep 0.2
done
python3 "$(dirname "$0")/mixed.py" --url "http://127.0.0.1:$PORT" \
    --llm "$(basename "$LLM" .gguf)" --dit "$(basename "$DIT")" --duration "${DURATION:-20}" \
    --chat-clients "${CHAT_CLIENTS:-2}" --image-rate "${IMAGE_RATE:-2}"
kill -TERM $pid
wait $pid || true
done
