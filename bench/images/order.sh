#!/usr/bin/env bash
# SLO attainment of image requests under a mixed text + image load, images earliest deadline
# first (--image-order edf) against the same load with images first-come-first-served
# (--image-order fcfs), in one run: per order one weftd serving the LLM and the DiT, closed-loop
# chat streams (bench/images/mixed.py --phases chat) beside weft-bench's image workload (a
# GF-DiT profile: classes S/M/L with deadline = arrival + alpha x T_single and priorities,
# sent as slo.deadline_ms; refusals count as misses). T_single (each class alone) is measured
# once, by the edf run's weft-bench while the chat streams run (the service time a lone image
# request gets under this text load), and pinned for the fcfs run: both score against the
# same deadlines. T_SINGLE=S=ms,M=ms,L=ms pins it for both.
# Prints per order weft-bench's per-class report, the chat rate, and weftd's own
# weft:image_slo_attainment per class; then a summary table.
#   bench/images/order.sh [BUILD_DIR]   (DIT, LLM, PROFILE=foreground_burst, SECS=60, LOAD=1.0,
#                                        CHAT_CLIENTS=2, THREADS=2, SEED=1, CLASS_LABELS=10,
#                                        OUT=/tmp/weft-order)
set -euo pipefail
build=${1:-build}
dit=${DIT:-/usr/local/share/weft/models/weft-dit-digits}
llm=${LLM:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
secs=${SECS:-60}
out=${OUT:-/tmp/weft-order}
here=$(dirname "$0")
mkdir -p "$out"
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null || true' EXIT
tsingle=${T_SINGLE:-}
for order in edf fcfs; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$build/bin/weftd" --model "$llm" --model "$dit" --port "$port" --threads "${THREADS:-2}" \
    --image-order "$order" --metrics-open --default-ttft-ms 600000 --kv-memory-mb 64 \
    --log-level warn >"$out/weftd-$order.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.5
  done
  common=(--workload images --port "$port" --model "$(basename "$dit")" --profile "${PROFILE:-foreground_burst}"
          --class-labels "${CLASS_LABELS:-10}" --profile-duration "$secs" --target-load "${LOAD:-1.0}"
          --seed "${SEED:-1}" --no-progress)
  python3 "$here/mixed.py" --url "http://127.0.0.1:$port" --llm "$(basename "$llm" .gguf)" \
    --dit "$(basename "$dit")" --duration "$((secs + ${CHAT_EXTRA_S:-20}))" --chat-clients "${CHAT_CLIENTS:-2}" \
    --phases chat >"$out/chat-$order.json" &
  chat=$!
  echo "== image order $order (chat clients: ${CHAT_CLIENTS:-2})"
  sleep 2 # the chat streams are running before T_single is measured
  pin=()
  [ -n "$tsingle" ] && pin=(--t-single "$tsingle")
  "$build/bin/weft-bench" "${common[@]}" "${pin[@]}" --label "$order" \
    --json "$out/$order.json" | tee "$out/$order.txt"
  if [ -z "$tsingle" ]; then
    tsingle=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]
print(",".join("%s=%.3f" % (c["name"], c["t_single_ms"]) for c in r["classes"] if c["t_single_ms"]))' \
      "$out/$order.json")
    echo "T_single (ms, measured by the edf run under the chat load, pinned for fcfs): $tsingle"
  fi
  wait $chat
  cat "$out/chat-$order.json"
  curl -sf "http://127.0.0.1:$port/metrics" | grep -E '^weft:image_slo_(attainment|requests_total|met_total)' \
    | tee "$out/metrics-$order.txt"
  kill -TERM $pid
  wait $pid || true
  pid=
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = {}
for order in ("edf", "fcfs"):
    r = json.load(open(f"{out}/{order}.json"))["runs"][0]
    chat = json.loads(open(f"{out}/chat-{order}.json").read().splitlines()[0])
    rows[order] = (r, chat)
print("| class | edf attainment | fcfs attainment | edf refused | fcfs refused | edf p99 s | fcfs p99 s |")
print("|---|---|---|---|---|---|---|")
names = [c["name"] for c in rows["edf"][0]["classes"]]
def get(order, name):
    return next(c for c in rows[order][0]["classes"] if c["name"] == name)
for n in names:
    e, f = get("edf", n), get("fcfs", n)
    p99 = lambda c: c.get("p99_latency_ms")
    fmt = lambda v: "-" if v is None else "%.2f" % (v / 1000)
    print(f"| {n} | {e['slo_attainment']:.3f} ({e['slo_met']}/{e['issued']}) | {f['slo_attainment']:.3f} ({f['slo_met']}/{f['issued']}) "
          f"| {e['refused']} | {f['refused']} | {fmt(p99(e))} | {fmt(p99(f))} |")
for order in ("edf", "fcfs"):
    r, chat = rows[order]
    print(f"{order}: all classes {r['slo_attainment']:.3f}; chat {chat['chat_tokens_s']} tokens/s, "
          f"ITL p50 {chat['itl_p50_ms']} ms p99 {chat['itl_p99_ms']} ms")
PY
