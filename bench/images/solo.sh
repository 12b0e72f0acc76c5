#!/usr/bin/env bash
# Text-only and image-only loads on one weftd serving an LLM and a DiT with --share-cores, under
# each way of taking turns (--share-turns edf: claims granted in one EDF order, batches composed
# at the turn; batch: batches composed at once, ordered at the gate), in one run: what the
# unified order costs when only one class has work (the gate is then uncontended). Prints
# bench/images/mixed.py's JSON line per phase (chat tokens/s and ITL, images/s and latency).
#   bench/images/solo.sh [BUILD_DIR]   (DIT, LLM, SECS=20, CHAT_CLIENTS=2, IMAGE_RATE=4,
#                                       MODES="edf batch", THREADS=2)
set -euo pipefail
build=${1:-build}
dit=${DIT:-/usr/local/share/weft/models/weft-dit-digits}
llm=${LLM:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
here=$(dirname "$0")
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null || true' EXIT
for mode in ${MODES:-edf batch}; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$build/bin/weftd" --model "$llm" --model "$dit" --port "$port" --threads "${THREADS:-2}" \
    --share-turns "$mode" --default-ttft-ms 600000 --kv-memory-mb 64 --log-level warn >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.5
  done
  echo "== --share-turns $mode"
  python3 "$here/mixed.py" --url "http://127.0.0.1:$port" --llm "$(basename "$llm" .gguf)" \
    --dit "$(basename "$dit")" --duration "${SECS:-20}" --chat-clients "${CHAT_CLIENTS:-2}" \
    --image-rate "${IMAGE_RATE:-4}" --phases chat,images
  curl -sf "http://127.0.0.1:$port/admin/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cores"])'
  kill -TERM $pid
  wait $pid || true
  pid=
done
