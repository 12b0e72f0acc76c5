#!/usr/bin/env bash
# SLO attainment of image requests under a mixed text + image load, images earliest deadline
# first (--image-order edf) against the same load with images first-come-first-served
# (--image-order fcfs), in one run: per order one weftd serving the LLM and the DiT, closed-loop
# chat streams (bench/images/mixed.py --phases chat) beside weft-bench's image workload (a
# GF-DiT profile: classes S/M/L with deadline = arrival + alpha x T_single and priorities,
# sent as slo.deadline_ms; refusals count as misses). T_single (each class alone) is measured
# once, by the first run's weft-bench while the chat streams run (the service time a lone image
# request gets under this text load), and pinned for the later runs: all score against the
# same deadlines. T_SINGLE=S=ms,M=ms,L=ms pins it for both.
# Prints per order weft-bench's per-class report, the chat rate, and weftd's own
# weft:image_slo_attainment per class; then a summary table.
# ORDERS="edf fcfs fcfs edf" alternates repetitions (each a fresh weftd) to show the noise.
# A run is named by its image order (edf, fcfs: the cores' turns are weftd's default) or by a
# scheduling configuration: unified (--share-turns edf --image-order edf: text and image work
# in one EDF order), ahead (--share-turns ahead: that order, the next claim granted while a
# batch runs), gate (--share-turns batch --image-order edf: the earlier turns, batches
# composed at once and ordered at the gate, with the minimum shares), prev (the same with
# --share-min 0: the turns exactly as before the unified order) or gate-fcfs (--share-turns
# batch --image-order fcfs: images first-come-first-served). CHAT_SLO=TTFT_MS,TPOT_MS sends the chat requests
# those targets (weft's slo extension) and reports the text class's SLO attainment beside the
# image classes'. A run may name another build directory after '@' (gate@/tmp/old-build: that
# build's weftd and weft-bench), to compare two builds in one command.
#   bench/images/order.sh [BUILD_DIR]   (DIT, LLM, PROFILE=foreground_burst, SECS=60, LOAD=1.0,
#                                        CHAT_CLIENTS=2, THREADS=2, SEED=1, CLASS_LABELS=10,
#                                        IMAGE_MAX_BATCH=8 (fewer: queueing, where order matters),
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
run=0
runs=()
for spec in ${ORDERS:-edf fcfs}; do
  run=$((run + 1))
  conf=${spec%%@*}
  bdir=$build
  [ "$spec" != "$conf" ] && bdir=${spec#*@}
  tag=$run-$conf
  [ "$bdir" != "$build" ] && tag=$tag-$(basename "$bdir")
  turns=()
  case $conf in
    unified) order=edf; turns=(--share-turns edf) ;;
    ahead) order=edf; turns=(--share-turns ahead) ;;
    gate) order=edf; turns=(--share-turns batch) ;;
    prev) order=edf; turns=(--share-turns batch --share-min 0) ;;
    gate-fcfs) order=fcfs; turns=(--share-turns batch) ;;
    edf|fcfs) order=$conf ;;
    *) echo "unknown run '$conf' (edf, fcfs, unified, ahead, gate, prev, gate-fcfs)" >&2; exit 2 ;;
  esac
  runs+=("$tag")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$bdir/bin/weftd" --model "$llm" --model "$dit" --port "$port" --threads "${THREADS:-2}" \
    --image-order "$order" "${turns[@]}" --image-max-batch "${IMAGE_MAX_BATCH:-8}" --metrics-open --default-ttft-ms 600000 --kv-memory-mb 64 \
    --log-level warn >"$out/weftd-$tag.log" 2>&1 &
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
    --phases chat ${CHAT_SLO:+--chat-slo "$CHAT_SLO"} >"$out/chat-$tag.json" &
  chat=$!
  echo "== run $tag: image order $order ${turns[*]}, $bdir (chat clients: ${CHAT_CLIENTS:-2}); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  cut -d' ' -f1 /proc/loadavg >"$out/load-$tag.txt"
  sleep 2 # the chat streams are running before T_single is measured
  pin=()
  [ -n "$tsingle" ] && pin=(--t-single "$tsingle")
  "$bdir/bin/weft-bench" "${common[@]}" "${pin[@]}" --label "$conf" \
    --json "$out/$tag.json" | tee "$out/$tag.txt"
  if [ -z "$tsingle" ]; then
    tsingle=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]
print(",".join("%s=%.3f" % (c["name"], c["t_single_ms"]) for c in r["classes"] if c["t_single_ms"]))' \
      "$out/$tag.json")
    echo "T_single (ms, measured by the first run under the chat load, pinned for the others): $tsingle"
  fi
  wait $chat
  cat "$out/chat-$tag.json"
  curl -sf "http://127.0.0.1:$port/metrics" | grep -E '^weft:image_slo_(attainment|requests_total|met_total)' \
    | tee "$out/metrics-$tag.txt"
  # turns per class on the shared cores, and those the minimum share gave (/admin/stats "cores")
  curl -sf "http://127.0.0.1:$port/admin/stats" | python3 -c 'import json,sys; print("cores:", json.load(sys.stdin).get("cores"))' \
    | tee "$out/cores-$tag.txt"
  cut -d' ' -f1 /proc/loadavg >>"$out/load-$tag.txt"
  echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  kill -TERM $pid
  wait $pid || true
  pid=
done
python3 - "$out" "${runs[@]}" <<'PY'
import json, sys
out, runs = sys.argv[1], sys.argv[2:]
print("| run | class | SLO attainment (met/issued) | refused | p50 s | p99 s |  load avg (1 min) at start / end |")
print("|---|---|---|---|---|---|---|")
for tag in runs:
    r = json.load(open(f"{out}/{tag}.json"))["runs"][0]
    chat = json.loads(open(f"{out}/chat-{tag}.json").read().splitlines()[0])
    fmt = lambda v: "-" if v is None else "%.2f" % (v / 1000)
    load = " / ".join(open(f"{out}/load-{tag}.txt").read().split())
    for c in r["classes"] + [dict(r, name="all")]:
        print(f"| {tag} | {c['name']} | {c['slo_attainment']:.3f} ({c['slo_met']}/{c['issued']}) | {c['refused']} "
              f"| {fmt(c.get('median_latency_ms'))} | {fmt(c.get('p99_latency_ms'))} | {load} |")
    if "chat_slo_attainment" in chat:
        print(f"| {tag} | text | {chat['chat_slo_attainment']:.3f} ({chat['chat_slo_met']}/{chat['chat_requests']}) "
              f"| | | | |")
    print(f"| {tag} | chat | {chat['chat_tokens_s']} tokens/s, ITL p50 {chat['itl_p50_ms']} ms, "
          f"p99 {chat['itl_p99_ms']} ms | | | | |")
PY
