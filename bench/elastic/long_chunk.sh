#!/bin/bash
# A single-rank DENOISE chunk of many steps on a worker, end to end: weftd --workers 2
# --dit-policy static:1 --image-chunk-steps 1000 with the larger bundled DiT (weft-dit-fmnist,
# 32x32), requests of n=2 images x 400 guided steps (one chunk per image, one image per rank),
# ROUNDS x 3 requests per binary, the binaries alternating so that both see the same host.
#   bench/elastic/long_chunk.sh BEFORE_WEFTD AFTER_WEFTD [ROUNDS]
# Prints each request's seconds per binary and round.
set -eu
BEFORE=$1 AFTER=$2 ROUNDS=${3:-3}
F=${WEFT_DIT_MODEL_LARGE:-/usr/local/share/weft/models/weft-dit-fmnist}
PORT=${PORT:-18631}
one() {
    "$1" --model "$F" --port "$PORT" --workers 2 --dit-policy static:1 --image-chunk-steps 1000 >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 1 120); do curl -s "localhost:$PORT/health" | grep -q '"ok"' && break; sleep 1; done
    sleep 1
    python3 - "$PORT" <<'PY'
import sys, json, time, http.client
port = int(sys.argv[1])
ts = []
for k in range(3):
    t = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/images/generations", body=json.dumps(dict(model="weft-dit-fmnist", prompt="1", n=2,
              size="32x32", seed=k, num_inference_steps=400, guidance_scale=2)), headers={"Content-Type": "application/json"})
    r = c.getresponse(); r.read(); assert r.status == 200, r.status
    ts.append(time.time() - t)
print(" ".join(f"{x:.3f}" for x in ts))
PY
    kill "$pid"; wait "$pid" 2>/dev/null || true
}
uptime
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r before: $(one "$BEFORE")"
    echo "round $r after:  $(one "$AFTER")"
done
uptime
