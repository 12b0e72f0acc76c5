#!/usr/bin/env bash
# One prefill worker and one decode worker on this host (no netns, no tc): sends one long prompt
# at a time for each KV mode and prints its wall time next to the CPU time every thread of the
# worker processes used meanwhile (/proc/PID/task/TID/stat utime+stime), so a prefill that is
# slow for want of CPU time tells apart from one whose threads wait.
#
#   CODECS="off k4v4 off k4v4" EXTRA="--kv-layer-overlap=false" bench/pd/local_prefill.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
CODECS=${CODECS:-"off k4v4 off k4v4"}
TOKENS=${TOKENS:-2000}
PORT=${PORT:-18484}
LOG=${LOG:-$(mktemp /tmp/weft-local-prefill.XXXXXX.log)}
"$BUILD/bin/weftd" --model "$MODEL" --port "$PORT" --prefill-workers 1 --decode-workers 1 \
  --kv-profiles deploy/kv-profiles.json --world-port $((PORT - 1000)) ${EXTRA:-} >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 240); do curl -sf "localhost:$PORT/health" | grep -q '"ok"' && break; sleep 0.5; done
ticks() { for c in $(pgrep -P $PID); do for t in /proc/$c/task/*; do
  echo "$c/$(basename "$t") $(awk '{print $14 + $15}' "$t/stat")"; done; done | sort; }
for codec in $CODECS; do
  ticks >/tmp/weft-lp-a.$$
  python3 - "$codec" "$PORT" "$TOKENS" "$(basename "$MODEL" .gguf)" <<'PY'
import json, sys, time, urllib.request
codec, port, n, model = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ids = ([504, 3575, 282, 4649, 314] * (n // 5 + 1))[:n]
body = {"model": model, "prompt": ids, "max_tokens": 2, "temperature": 0, "ignore_eos": True,
        "kv_codec": codec}
t = time.time()
req = urllib.request.Request(f"http://localhost:{port}/v1/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=600).read()
print(f"{codec}: {time.time() - t:.2f} s wall", end="")
PY
  ticks >/tmp/weft-lp-b.$$
  join /tmp/weft-lp-a.$$ /tmp/weft-lp-b.$$ | awk -v hz="$(getconf CLK_TCK)" \
    '{d = ($3 - $2) / hz; if (d >= 0.05) printf ", thread %s %.2f s CPU", $1, d} END {print ""}'
done
rm -f /tmp/weft-lp-a.$$ /tmp/weft-lp-b.$$
echo "log: $LOG"
