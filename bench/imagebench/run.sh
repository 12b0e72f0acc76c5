#!/usr/bin/env bash
# weft-bench's image workload against one weftd serving the default DiT: the same GF-DiT
# profile and seed run twice in one go, with weft's deadlines (slo.deadline_ms + priority:
# admission may refuse with 429) and without (--no-slo-ext, as a peer server sees it), then
# `weft-bench compare`. T_single is calibrated once, by the first run, and reused by the
# second so that both score against the same deadlines.
#   [WEFTD=path/to/weftd] bench/imagebench/run.sh [BUILD_DIR] [PROFILE] [SECONDS] [LOAD]
# e.g. bench/imagebench/run.sh build foreground_burst 60 0.8
# BENCH_ARGS="..." adds weft-bench arguments to both runs, e.g. classes of other image sizes:
#   BENCH_ARGS="--image-class S:8x8:5:1.5:100 --image-class M:16x8:15:2:50 --image-class L:16x16:45:6:0"
# BUSY_START=N runs N busy-looping processes while weftd starts (and calibrates its image cost
# model), stopped once it answers /health: a start-up on a busy machine, reproducibly.
set -euo pipefail
build=${1:-build}
profile=${2:-foreground_burst}
secs=${3:-60}
load=${4:-0.8}
dit=${WEFT_DIT:-/usr/local/share/weft/models/weft-dit-digits}
out=${OUT:-/tmp/weft-imagebench}
mkdir -p "$out"
busy=()
for _ in $(seq 1 "${BUSY_START:-0}"); do
  python3 -c 'while True: pass' &
  busy+=($!)
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${WEFTD:-$build/bin/weftd}" --model "$dit" --port "$port" --threads "${THREADS:-2}" --log-level warn \
  --metrics-open >"$out/weftd.log" 2>&1 &
pid=$!
trap 'kill $pid ${busy[*]} 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.5
done
for b in "${busy[@]}"; do kill "$b"; done
common=(--workload images --port "$port" --profile "$profile" --profile-duration "$secs"
        --target-load "$load" --seed "${SEED:-1}" --no-progress)
# shellcheck disable=SC2206  # word splitting of BENCH_ARGS is the point
extra=(${BENCH_ARGS:-})
common+=("${extra[@]}")
# T_SINGLE=S=ms,M=ms,L=ms pins the deadlines (both runs) instead of calibrating them here:
# to compare two weftd builds against the same deadlines.
pin=()
[ -n "${T_SINGLE:-}" ] && pin=(--t-single "$T_SINGLE")
"$build/bin/weft-bench" "${common[@]}" "${pin[@]}" --label weftd-deadlines --json "$out/deadlines.json" \
  --plot "$out/deadlines" | tee "$out/deadlines.txt"
tsingle=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]
print(",".join("%s=%.3f" % (c["name"], c["t_single_ms"]) for c in r["classes"] if c["t_single_ms"]))' \
  "$out/deadlines.json")
"$build/bin/weft-bench" "${common[@]}" --no-slo-ext --t-single "$tsingle" --label weftd-no-deadlines \
  --json "$out/no-deadlines.json" --plot "$out/no-deadlines" | tee "$out/no-deadlines.txt"
"$build/bin/weft-bench" compare "$out/no-deadlines.json" "$out/deadlines.json"
