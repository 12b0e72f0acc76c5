#!/usr/bin/env bash
# The noisy neighbour on the real daemon: one weftd on all cores with four virtual models of
# equal weight (each its own random LoRA adapter); three light tenants each send a Poisson load
# of RATE requests/s, NREQ requests; in the "noisy" phase a fourth sends 10x that rate at the
# same time (stopped when the light loads end: its backlog is not waited for). For --policy
# fair and --policy fcfs (FIFO co-location) in turn, each phase on a fresh weftd, the light
# tenants' arrivals identical in both phases (seeds 1-3). Prints the light tenants' pooled mean
# and p99 end-to-end latency alone and with the noisy one, the ratio (issue #17's goal: p99
# within 2x under fair), and how many of the noisy tenant's requests were served.
#   bench/vmodels/noisy.sh [RATE=0.2] [NREQ=8] [INPUT=64] [OUTPUT=32]
# WEFT_NOISY_FLAGS adds weftd flags (e.g. "--max-running 8") to every phase; WEFT_NOISY_QUOTA
# adds options to the noisy tenant's --vmodel (e.g. ",max_running=4"). weftd runs with lib.sh's
# fixed cost model (WEFT_VM_COST="a,b,c,d" gives another), which also sizes the fair policy's
# seat cap (a/c seats per active virtual model) and the cost one ahead of the others may add per
# step (a); WEFT_NOISY_CALIBRATE=1 lets each weftd calibrate its own at start (and refit it
# online) instead.
# Also prints, per phase with the noisy tenant, each tenant's served cost against its max-min
# fair allocation and Jain's index (bench/vmodels/noisy_jain.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/vmodels/lib.sh
[ "${WEFT_NOISY_CALIBRATE:-0}" = 0 ] || WEFTD_FLAGS=(--kv-memory-mb 128 --default-ttft-ms 600000)
RATE=${1:-0.2}; NREQ=${2:-8}; INPUT=${3:-64}; OUTPUT=${4:-32}
CORES=$(nproc)
OUT=$(mktemp -d /tmp/weft-vm-noisy-XXXXXX)
WP=""
stop() { [ -z "$WP" ] || { kill "$WP" 2>/dev/null || true; wait "$WP" 2>/dev/null || true; }; WP=""; }
trap stop EXIT
make_adapters "$OUT" 4

run() { # POLICY PHASE
  local tag="$1-$2" p t light=() noisy=""
  p=$(free_port)
  "$BIN/weftd" --model "$MODEL" --port "$p" --threads "$CORES" --policy "$1" "${WEFTD_FLAGS[@]}" ${WEFT_NOISY_FLAGS:-} \
    --vmodel "id=t0,adapter=$OUT/t0.gguf${WEFT_NOISY_QUOTA:-}" --vmodel "id=t1,adapter=$OUT/t1.gguf" \
    --vmodel "id=t2,adapter=$OUT/t2.gguf" --vmodel "id=t3,adapter=$OUT/t3.gguf" \
    >"$OUT/$tag.log" 2>&1 &
  WP=$!
  wait_ready "$p" "$OUT/$tag.log"
  echo "$tag: load average $(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/loadavg"
  bench() { # MODEL RATE NREQ SEED
    "$BIN/weft-bench" --port "$p" --model "$1" --rate "$2" --num-requests "$3" --seed "$4" \
      --input-len "$INPUT" --output-len "$OUTPUT" --duration 3600 --no-progress \
      --label "$tag-$1" --csv "$OUT/$tag-$1.csv" >"$OUT/$tag-$1.txt" 2>&1 &
  }
  if [ "$2" = noisy ]; then
    bench t0 "$(python3 -c "print(10 * $RATE)")" $((10 * NREQ)) 0; noisy=$!
  fi
  for t in 1 2 3; do bench "t$t" "$RATE" "$NREQ" "$t"; light+=($!); done
  wait "${light[@]}"
  # SIGINT: weft-bench stops sending, cancels what is in flight and still writes its CSV.
  [ -z "$noisy" ] || { kill -INT "$noisy" 2>/dev/null || true; wait "$noisy" || true; }
  stop
}

for pol in fair fcfs; do
  for phase in alone noisy; do run "$pol" "$phase"; done
done
cat "$OUT/loadavg"
python3 - "$OUT" <<'EOF'
import csv, os, sys
out = sys.argv[1]
def rows(tag, m):
    path = os.path.join(out, "%s-%s.csv" % (tag, m))
    return list(csv.DictReader(open(path))) if os.path.exists(path) else []
def p99(xs):
    xs = sorted(xs); k = (len(xs) - 1) * 0.99; lo = int(k); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
for pol in ("fair", "fcfs"):
    res = {}
    for phase in ("alone", "noisy"):
        e = [float(r["e2e_ms"]) for m in ("t1", "t2", "t3") for r in rows(pol + "-" + phase, m)
             if r["outcome"] == "ok"]
        sent = sum(len(rows(pol + "-" + phase, m)) for m in ("t1", "t2", "t3"))
        res[phase] = (sum(e) / len(e), p99(e), len(e), sent)
    nz = rows(pol + "-noisy", "t0")
    ok = sum(r["outcome"] == "ok" for r in nz)
    a, n = res["alone"], res["noisy"]
    print("%-4s light tenants alone: mean %.0f p99 %.0f ms (%d/%d); with the noisy one: mean %.0f "
          "p99 %.0f ms (%d/%d); p99 ratio %.2fx, mean ratio %.2fx; noisy tenant served %d of %d sent"
          % (pol, a[0], a[1], a[2], a[3], n[0], n[1], n[2], n[3], n[1] / a[1], n[0] / a[0], ok,
             len(nz)))
EOF
IFS=, read -r _ CB CC _ <<<"$WEFTD_COST"
for pol in fair fcfs; do python3 bench/vmodels/noisy_jain.py "$OUT" "$pol-noisy" "$CB" "$CC"; done
echo "results in $OUT"
