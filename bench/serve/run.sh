#!/usr/bin/env bash
# Serving benchmark: weftd against llama.cpp's own llama-server, same GGUF, same threads, same
# number of parallel slots, one after the other under the same load (closed loop at 1, 4, 16 and
# 64 concurrent streams, then an open-loop Poisson rate sweep), measured by weft-bench.
#
#   bench/serve/run.sh                 # full run; tables go to bench/serve/results.md
#   bench/serve/run.sh --quick         # small smoke run (minutes, not an hour)
#   bench/serve/run.sh --only weftd    # one system (weftd | llama)
#
# Env (defaults): BUILD (repo/build: bin/weftd, bin/weft-bench), MODEL (the default SmolLM2
# GGUF), THREADS (2), SLOTS (16: llama-server -np, weftd --max-running), IN_LEN (128),
# OUT_LEN (64), CONCURRENCY ("1 4 16 64"), RATES ("0.5,1,2,4"; empty: no Poisson sweep),
# RATE_REQUESTS (48), SEED (1), OUT (bench/serve/results.md), WORK
# (~/.cache/weft/bench-serve/<time>: raw JSON, CSV, PNG, server logs), PORT_WEFTD (18180),
# PORT_LLAMA (18181), NUM_REQUESTS (per closed-loop point; default 3 x the largest
# concurrency), POINT_DURATION (300 s per load point), GRACE (60 s), SEND_SLO (1), WEFTD_ARGS
# (extra weftd options, default none), CLOSED_WEFTD_ARGS (added for the closed loop only;
# default "--admission-factor 1000", see below), LLAMA_ARGS (extra llama-server options).
#
# Fresh prompts at every load point. Both servers keep earlier prompts: llama-server reuses a
# slot's KV when a new prompt shares its prefix (its log then shows "n_past = 128" and
# "prompt eval time = ... / 1 tokens"), weftd reuses full KV blocks through its prefix cache.
# An earlier version of this script sent the same 32 prompts at every load point, so from the
# second point on llama-server skipped prefill for EVERY request (160 of 160 requests after
# concurrency=1 evaluated a single prompt token; its TTFT at 4 streams fell to 55 ms against
# 532 ms at one stream) and weftd for a varying share: that measured cache hits, not serving.
# Now weft-bench runs with --fresh-prompts (load point i of a sweep sends items i*N..(i+1)*N-1
# of one seeded sequence), and the warm-up, the closed-loop sweep and the Poisson sweep use
# different seeds (SEED+2, SEED, SEED+1), so no request of the run repeats another's prompt.
# The synthetic prompts are random common words (loadgen/dataset.c): no shared prefix either.
# Each server is restarted between the closed-loop and the Poisson sweep (a cancelled request
# may still run in the old one).
#
# SLOs. weft-bench mixes two SLO classes (interactive: TTFT <= 1 s, TPOT <= 100 ms; batch:
# TTFT <= 5 s, TPOT <= 300 ms) and scores goodput = requests/s that met both targets of their
# class. With SEND_SLO=1 (default) each request body carries its class as weft's extension
# "slo": {"ttft_ms": .., "tpot_ms": ..}: the SAME bytes go to both servers. llama-server ignores
# the unknown field; weftd's slo policy uses it (deadline order, iteration sizing, admission
# control, which may refuse a request it predicts cannot meet its TTFT: HTTP 429, counted as a
# failed request and as not good). That is the fair comparison of an SLO-aware server with one
# that is not: same requests, same information, each server does what it can with it.
# Admission control in a closed loop is different: a refused stream sends its next request at
# once (weft-bench does not back off), so at 64 streams on 16 slots weftd refused 112 of 128
# requests within seconds and the point measured a refusal storm, not serving. The closed loop
# therefore runs weftd with CLOSED_WEFTD_ARGS="--admission-factor 1000" (admission off: both
# servers serve every request; SLO ordering and TPOT-schedule batch sizing stay on), and the
# Poisson sweep, where a refusal does not summon a replacement, with weftd's default factor 2.
# SEND_SLO=0 leaves the field out (then weftd runs on its default SLOs, --default-ttft-ms /
# --default-tpot-ms, which WEFTD_ARGS may set, e.g. to 600000 to disable its admission control).
# llama-server is built by bench/serve/build_llama_server.sh from the llama.cpp sources inside
# the llama-cpp-python sdist (PyPI), into ~/.cache/weft/llama-server, never into the repo. If it
# cannot be built, `python -m llama_cpp.server` (the installed llama-cpp-python) stands in, and
# the results say so: it serves one request at a time (no parallel slots, no continuous batching).
# Everything targets 127.0.0.1 only; every weft-bench run is bounded in requests and time.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
MODEL=${MODEL:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-2}
SLOTS=${SLOTS:-16}
IN_LEN=${IN_LEN:-128}
OUT_LEN=${OUT_LEN:-64}
CONCURRENCY=${CONCURRENCY:-1 4 16 64}
RATES=${RATES-0.5,1,2,4}
RATE_REQUESTS=${RATE_REQUESTS:-48}
SEED=${SEED:-1}
OUT=${OUT:-$HERE/results.md}
WORK=${WORK:-$HOME/.cache/weft/bench-serve/$(date -u +%Y%m%dT%H%M%SZ)}
PORT_WEFTD=${PORT_WEFTD:-18180}
PORT_LLAMA=${PORT_LLAMA:-18181}
POINT_DURATION=${POINT_DURATION:-300}
GRACE=${GRACE:-60}
NUM_REQUESTS=${NUM_REQUESTS:-}
WEFTD_ARGS=${WEFTD_ARGS:-}
LLAMA_ARGS=${LLAMA_ARGS:-}
CLOSED_WEFTD_ARGS=${CLOSED_WEFTD_ARGS---admission-factor 1000}
PHASE_ARGS=""
SEND_SLO=${SEND_SLO:-1}
SLO_CLASSES=(--slo-class "interactive:1000:100:1" --slo-class "batch:5000:300:1")
SLO_FLAG=()
[[ $SEND_SLO == 1 ]] || SLO_FLAG=(--no-slo-ext)
ONLY=""
QUICK=0

while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=1 ;;
    --only) ONLY=$2; shift ;;
    -h|--help) sed -n "2,54p" "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ $QUICK == 1 ]]; then
  CONCURRENCY=${QUICK_CONCURRENCY:-1 4}
  RATES=${QUICK_RATES:-1,2}
  RATE_REQUESTS=8
  OUT_LEN=16
  POINT_DURATION=120
fi

BENCH=$BUILD/bin/weft-bench
WEFTD=$BUILD/bin/weftd
for f in "$BENCH" "$WEFTD" "$MODEL"; do
  [[ -e $f ]] || { echo "run.sh: missing $f (build the repo first: cmake --build $BUILD)" >&2; exit 1; }
done
mkdir -p "$WORK"
log() { echo "[run.sh $(date -u +%H:%M:%S)] $*" >&2; }

SERVER_PID=""
stop_server() {
  if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT

# wait_ready PORT: /health answers 200 with the model loaded (both servers answer 503 while
# loading), then one tiny completion succeeds.
wait_ready() {
  local port=$1 i
  for i in $(seq 1 300); do
    kill -0 "$SERVER_PID" 2>/dev/null || { log "server exited; see $WORK/*.log"; return 1; }
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      curl -sf -m 120 -H 'Content-Type: application/json' \
        -d '{"prompt":"Hello","max_tokens":2}' "http://127.0.0.1:$port/v1/completions" >/dev/null && return 0
    fi
    sleep 1
  done
  log "server on $port not ready after 300 s"
  return 1
}

LLAMA_KIND=""
LLAMA_BIN=""
prepare_llama() {
  if LLAMA_BIN=$(nice -n 10 "$HERE/build_llama_server.sh" 2>"$WORK/llama_build.log"); then
    LLAMA_KIND="llama-server"
  elif python3 -c 'import llama_cpp.server.app' 2>/dev/null; then
    log "llama-server could not be built (see $WORK/llama_build.log); falling back to python -m llama_cpp.server"
    LLAMA_KIND="llama_cpp.server"
  else
    log "neither llama-server (see $WORK/llama_build.log) nor llama_cpp.server (pip install 'llama-cpp-python[server]') is available"
    LLAMA_KIND=""
  fi
}

start_system() {
  local sys=$1
  case $sys in
    weftd)
      "$WEFTD" --model "$MODEL" --host 127.0.0.1 --port "$PORT_WEFTD" --threads "$THREADS" \
        --max-running "$SLOTS" --log-level info $WEFTD_ARGS $PHASE_ARGS >>"$WORK/weftd.log" 2>&1 &
      SERVER_PID=$!; PORT=$PORT_WEFTD ;;
    llama)
      # Context: every slot holds a whole request (prompt + output + chat template slack).
      local ctx=$(( SLOTS * (IN_LEN + OUT_LEN + 64) ))
      if [[ $LLAMA_KIND == llama-server ]]; then
        "$LLAMA_BIN" -m "$MODEL" --host 127.0.0.1 --port "$PORT_LLAMA" -t "$THREADS" -tb "$THREADS" \
          -np "$SLOTS" -c "$ctx" --no-webui $LLAMA_ARGS >>"$WORK/llama.log" 2>&1 &
      else
        python3 -m llama_cpp.server --model "$MODEL" --host 127.0.0.1 --port "$PORT_LLAMA" \
          --n_threads "$THREADS" --n_ctx $(( IN_LEN + OUT_LEN + 64 )) >"$WORK/llama.log" 2>&1 &
      fi
      SERVER_PID=$!; PORT=$PORT_LLAMA ;;
  esac
}

run_system() {
  local sys=$1 c list
  # The machine may be shared: keep its load next to the numbers.
  echo "start $(cut -d' ' -f1-3 /proc/loadavg)" >"$WORK/load_$sys.txt"
  PHASE_ARGS=$CLOSED_WEFTD_ARGS
  start_system "$sys"
  wait_ready "$PORT" || { stop_server; return 1; }
  # Warm-up: page the weights in and let both servers reach steady state; not measured.
  "$BENCH" --port "$PORT" --no-progress --no-slo-ext --concurrency 2 --num-requests 4 \
    --input-len "$IN_LEN" --output-len 8 --seed $(( SEED + 2 )) --duration 120 >/dev/null || true
  list=$(echo "$CONCURRENCY" | tr ' ' ',')
  log "$sys: closed loop at concurrency $list"
  # Requests per point: enough that every stream completes several requests.
  local n=0
  for c in $CONCURRENCY; do (( c * 3 > n )) && n=$(( c * 3 )); done
  (( n < 16 )) && n=16
  [[ $QUICK == 1 ]] && n=8
  [[ -n $NUM_REQUESTS ]] && n=$NUM_REQUESTS
  "$BENCH" --port "$PORT" --label "$sys" --no-progress "${SLO_FLAG[@]}" "${SLO_CLASSES[@]}" \
    --concurrency "$list" --num-requests "$n" --input-len "$IN_LEN" --output-len "$OUT_LEN" \
    --fresh-prompts --seed "$SEED" --duration "$POINT_DURATION" --grace "$GRACE" \
    --json "$WORK/${sys}_closed.json" --csv "$WORK/${sys}_closed.csv" \
    --plot "$WORK/${sys}_closed" >"$WORK/${sys}_closed.txt" || log "$sys closed loop: weft-bench exit $?"
  if [[ -n $RATES ]]; then
    # A fresh server for the sweep: requests the closed loop cancelled at its time bound may
    # still be computing in the old one (llama-server does not stop a cancelled slot at once:
    # after a saturated 64-stream point its Poisson sweep failed every request).
    stop_server
    PHASE_ARGS=""
    start_system "$sys"
    wait_ready "$PORT" || { stop_server; return 1; }
    log "$sys: Poisson sweep at $RATES req/s"
    "$BENCH" --port "$PORT" --label "$sys" --no-progress "${SLO_FLAG[@]}" "${SLO_CLASSES[@]}" \
      --rate "$RATES" --num-requests "$RATE_REQUESTS" --input-len "$IN_LEN" --output-len "$OUT_LEN" \
      --fresh-prompts --seed $(( SEED + 1 )) --duration "$POINT_DURATION" --grace "$GRACE" \
      --json "$WORK/${sys}_poisson.json" --csv "$WORK/${sys}_poisson.csv" \
      --plot "$WORK/${sys}_poisson" >"$WORK/${sys}_poisson.txt" || log "$sys sweep: weft-bench exit $?"
  fi
  # What the server reused from its caches (should be ~0 with fresh prompts) and how weftd
  # packed its iterations, next to the numbers.
  if [[ $sys == weftd ]]; then
    curl -sf "http://127.0.0.1:$PORT/admin/stats" >"$WORK/weftd_stats.json" 2>/dev/null || true
  fi
  echo "end $(cut -d' ' -f1-3 /proc/loadavg)" >>"$WORK/load_$sys.txt"
  stop_server
}

SYSTEMS=(weftd llama)
[[ -n $ONLY ]] && SYSTEMS=("$ONLY")
for s in "${SYSTEMS[@]}"; do
  if [[ $s == llama ]]; then
    prepare_llama
    [[ -n $LLAMA_KIND ]] || continue
  fi
  log "benchmarking $s (results in $WORK)"
  run_system "$s" || log "$s could not be benchmarked"
done

# ---- the results file ----
{
  echo "# weftd vs llama.cpp server ($(date -u +%Y-%m-%d))"
  echo
  echo "Model \`$(basename "$MODEL")\`, $THREADS threads, $SLOTS parallel slots (weftd --max-running,"
  echo "llama-server -np), synthetic prompts of $IN_LEN tokens, $OUT_LEN output tokens (ignore_eos),"
  echo "streaming /v1/completions, seed $SEED, fresh prompts at every load point (no request repeats"
  echo "another's prompt). Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')."
  if [[ $SEND_SLO == 1 ]]; then
    echo "SLO classes, sent in every request body to both servers as \"slo\" (llama-server ignores it)"
  else
    echo "SLO classes, scored by weft-bench but NOT sent to the servers"
  fi
  echo "and scored for goodput: interactive TTFT<=1000 ms TPOT<=100 ms; batch TTFT<=5000 ms TPOT<=300 ms."
  echo "weftd $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown) with \`${WEFTD_ARGS:-default options}\`"
  echo "(closed loop: plus \`${CLOSED_WEFTD_ARGS:-nothing}\`; Poisson sweep: admission control at its default factor 2)."
  case $LLAMA_KIND in
    llama-server) echo "llama.cpp: llama-server built from $(cat "$(dirname "$LLAMA_BIN")/SOURCE" 2>/dev/null) (vendor/llama.cpp), $("$LLAMA_BIN" --version 2>&1 | grep -m1 -i version || true)." ;;
    llama_cpp.server) echo "llama.cpp: FALLBACK python -m llama_cpp.server (llama-cpp-python $(python3 -c 'import llama_cpp; print(llama_cpp.__version__)')): one request at a time, no parallel slots or continuous batching, so concurrency > 1 only queues." ;;
    *) echo "llama.cpp: not run." ;;
  esac
  echo
  echo "Command: \`BUILD=$BUILD THREADS=$THREADS SLOTS=$SLOTS IN_LEN=$IN_LEN OUT_LEN=$OUT_LEN CONCURRENCY='$CONCURRENCY' RATES='$RATES' SEND_SLO=$SEND_SLO NUM_REQUESTS=${NUM_REQUESTS:-auto} RATE_REQUESTS=$RATE_REQUESTS POINT_DURATION=$POINT_DURATION GRACE=$GRACE$([[ -n $WEFTD_ARGS ]] && echo " WEFTD_ARGS='$WEFTD_ARGS'") bench/serve/run.sh$([[ $QUICK == 1 ]] && echo ' --quick')\`"
  echo
  for s in weftd llama; do
    [[ -f $WORK/load_$s.txt ]] && echo "Load average (1, 5, 15 min) around the $s runs: $(tr '\n' ' ' <"$WORK/load_$s.txt")(on $(nproc) cores; far above $(nproc) means the numbers are dominated by other work on the machine)."
  done
  echo
  echo "Each load point stops after its request count or after POINT_DURATION s (requests still"
  echo "running GRACE s later are cancelled and counted as failed), whichever comes first."
  echo
  python3 - "$WORK" <<'PY'
import json, os, sys
work = sys.argv[1]
def load(name):
    p = os.path.join(work, name)
    return json.load(open(p)) if os.path.exists(p) else None
def f(v, d=1):
    return "-" if v is None else ("%.*f" % (d, v))
for kind, title in (("closed", "Closed loop (concurrent streams)"), ("poisson", "Open loop, Poisson arrivals")):
    rows = []
    for sys_ in ("weftd", "llama"):
        r = load("%s_%s.json" % (sys_, kind))
        if not r:
            continue
        for run in r["runs"]:
            rows.append((run["label"], sys_, run))
    if not rows:
        continue
    print("## %s\n" % title)
    print("| load | system | done/failed | req/s | out tok/s | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | ITL p99 (ms) | goodput (req/s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows.sort(key=lambda x: (float(x[0].split("=")[1]) if x[0].split("=")[1] != "inf" else 1e18, x[1]))
    for label, sys_, run in rows:
        print("| %s | %s | %d/%d | %s | %s | %s / %s | %s / %s | %s | %s |" % (
            label, sys_, run["completed"], run["failed"], f(run["request_throughput"], 2),
            f(run["output_throughput"]), f(run.get("median_ttft_ms")), f(run.get("p99_ttft_ms")),
            f(run.get("median_tpot_ms"), 2), f(run.get("p99_tpot_ms"), 2), f(run.get("p99_itl_ms")),
            f(run.get("goodput"), 2)))
    print()
PY
  for kind in closed poisson; do
    if [[ -f $WORK/weftd_$kind.json && -f $WORK/llama_$kind.json ]]; then
      echo "### weft-bench compare ($kind): A = llama.cpp, B = weftd"
      echo
      echo '```'
      "$BENCH" compare "$WORK/llama_$kind.json" "$WORK/weftd_$kind.json"
      echo '```'
      echo
    fi
  done
  echo "Raw results (JSON, per-request CSV, CDF and throughput plots): $WORK"
} >"$OUT"
log "wrote $OUT"
