#!/bin/sh
# Front-end benchmarks: HTTP requests/s (wrk) and the loop thread's cost per streamed token.
#   bench/http/run.sh [BUILD_DIR]      (default build; needs wrk, a built weftd and libs)
# 1. wrk against GET /health (keep-alive, 1 thread, 64 connections, 10 s).
# 2. wrk against a streaming completion (32 tokens, ignore_eos, 4 connections, 20 s): requests/s
#    and tokens/s here are bounded by the engine, not the front end.
# 3. token_overhead: the server code path per streamed token with a fake scheduler (no engine),
#    compared with the decode step time weftd reports (weft:inter_token_latency_seconds).
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
MODEL=${WEFT_MODEL:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
PORT=${PORT:-18480}
OUT=$(mktemp -d)
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$OUT"' EXIT

"$BUILD/bin/weftd" --model "$MODEL" --port "$PORT" --cost-model 0.5,0.05,2,0.0005 \
    --default-ttft-ms 600000 --log-level warn > "$OUT/weftd.log" 2>&1 &
PID=$!
i=0
until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do
    i=$((i + 1)); [ $i -lt 600 ] || { echo "weftd not ready"; cat "$OUT/weftd.log"; exit 1; }
    sleep 0.2
done

echo "== GET /health, wrk -t1 -c64 -d10s"
wrk -t1 -c64 -d10s "http://127.0.0.1:$PORT/health" | grep -E "Requests/sec|Latency|requests in"

cat > "$OUT/stream.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"prompt":"Once upon a time","max_tokens":32,"ignore_eos":true,"stream":true,"temperature":0}'
LUA
echo "== POST /v1/completions stream 32 tokens, wrk -t1 -c4 -d20s"
wrk -t1 -c4 -d20s --timeout 60s -s "$OUT/stream.lua" "http://127.0.0.1:$PORT/v1/completions" | grep -E "Requests/sec|Latency|requests in"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E "^weft:inter_token_latency_seconds_(sum|count)" > "$OUT/itl"
ITL_MS=$(awk '/_sum/ {s=$2} /_count/ {c=$2} END {if (c > 0) printf "%.2f", 1000 * s / c; else print "n/a"}' "$OUT/itl")
echo "mean inter-token latency (decode step with 4 streams): $ITL_MS ms"

echo "== front-end cost per streamed token (fake scheduler, real detokenizer)"
cc -std=gnu11 -O2 -I"$SRC" -I"$BUILD/generated" "$SRC/bench/http/token_overhead.c" \
    "$BUILD/libweft_server.a" "$BUILD/libweft_sched.a" "$BUILD/libweft_engine.a" "$BUILD/libweft_kv.a" \
    "$BUILD/libweft_proto.a" "$BUILD/libllhttp.a" $(pkg-config --libs libuv jansson) -lpthread -lm \
    -o "$OUT/token_overhead"
"$OUT/token_overhead" "$MODEL" 200000
