#!/bin/bash
# How long `kill -TERM` takes to stop an idle weftd --workers 2 serving the default DiT (and
# the LLM beside it), and what its log says meanwhile; the binaries alternate, ROUNDS each.
#   bench/elastic/stop_time.sh BEFORE_WEFTD AFTER_WEFTD [ROUNDS]
set -eu
BEFORE=$1 AFTER=$2 ROUNDS=${3:-3}
D=${WEFT_DIT_MODEL:-/usr/local/share/weft/models/weft-dit-digits}
PORT=${PORT:-18661}
log=$(mktemp)
one() {
    "$1" --model "$D" --workers 2 --port "$PORT" >"$log" 2>&1 &
    local pid=$!
    for _ in $(seq 1 120); do curl -s "localhost:$PORT/health" | grep -q '"ok"' && break; sleep 1; done
    sleep 1
    local t0; t0=$(date +%s%N)
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
    echo "$(( ($(date +%s%N) - t0) / 1000000 )) ms, UCX errors $(grep -c 'UCX  ERROR' "$log" || true)"
}
uptime
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r before: $(one "$BEFORE")"
    echo "round $r after:  $(one "$AFTER")"
done
uptime
rm -f "$log"
