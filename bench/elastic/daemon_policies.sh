#!/bin/sh
# The real 2-rank run: weftd --workers 2 serving the default DiT under each --dit-policy, the same
# mixed S/L image workload (weft-bench --workload images, S and L differ by steps) against each,
# in one run; then the cost model's single-request prediction against the daemon's latency.
#   bench/elastic/daemon_policies.sh [build-dir]   (RATE=20 N=300 POLICIES="static:1 static:2 elastic")
# SIZES=1: a mixed-SIZE workload instead (S = 8x8 images of 5 steps, L = 64x64 images of 20
# steps, weftd --image-max-pixels 4096; RATE=3 N=120 by default): where P = 2 can pay (1024
# tokens a step, attention-heavy) next to images where it cannot (16 tokens); the start-up's
# calibrated single-step times per size and degree are printed with each daemon.
# CLASSES="--image-class ... --image-mix ..." overrides the classes (MAX_PIXELS the largest image).
# BEFORE_BIN=<another build's bin dir> runs each policy with that weftd first, then with this
# build's, interleaved in one run (a before/after comparison on the same loaded host); each
# run prints the workers' latent traffic (bytes worker to worker, from and to rank 0, and in
# mid-trajectory) where the daemon reports it.
set -eu
BUILD=${1:-build}
SIZES=${SIZES:-0}
if [ "$SIZES" = 1 ]; then
    RATE=${RATE:-3}
    N=${N:-120}
    MAX_PIXELS=${MAX_PIXELS:-4096}
    CLASSES=${CLASSES:-"--image-class S:8x8:5:1.5 --image-class L:64x64:20:6 --image-mix S=3,L=1"}
    L_STEPS=20
else
    RATE=${RATE:-20}
    N=${N:-300}
    MAX_PIXELS=${MAX_PIXELS:-0}
    CLASSES=${CLASSES:-"--image-class S:8x8:5:1.5 --image-class L:8x8:45:6 --image-mix S=1,L=1"}
    L_STEPS=45
fi
POLICIES=${POLICIES:-"static:1 static:2 elastic"}
DIT=${WEFT_DIT_MODEL:-/usr/local/share/weft/models/weft-dit-digits}
PORT=${PORT:-18740}
PIXELS=""
[ "$MAX_PIXELS" = 0 ] || PIXELS="--image-max-pixels $MAX_PIXELS"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

start() { # policy [bin dir] -> weftd pid in $pid, log in $tmp/weftd.log
    # shellcheck disable=SC2086 # PIXELS is empty or one option and its value
    "${2:-$BUILD/bin}/weftd" --model "$DIT" --workers 2 --dit-policy "$1" --threads 1 --port "$PORT" $PIXELS \
        >"$tmp/weftd.log" 2>&1 &
    pid=$!
    i=0
    until curl -s "http://127.0.0.1:$PORT/health" | grep -q '"ok"'; do
        i=$((i + 1)); [ $i -lt 300 ] || { cat "$tmp/weftd.log"; exit 1; }; sleep 0.2
    done
}
stop() { kill "$pid"; wait "$pid" || true; }

uptime
# T_single per class, measured once (static:1, requests alone) and given to every policy, so
# that all of them are held to the same deadlines.
start static:1
"$BUILD/bin/weft-bench" --port "$PORT" --workload images $CLASSES --num-requests 1 --rate 1 \
    >"$tmp/cal.txt" 2>&1
grep '^calibrated' "$tmp/cal.txt"
TS=$(awk '/^calibrated T_single of class/ {c=$5; v=$9; printf "%s%s=%s", sep, c, v; sep=","}' "$tmp/cal.txt")
step1=$(sed -n 's/.*DiT step on 1 worker rank(s): \([0-9.]*\) ms.*/\1/p' "$tmp/weftd.log")
if [ "$SIZES" = 1 ]; then # the L class's size: its step as calibrated, guided (weft-bench sends
    # no guidance_scale: the default DiT's default, 2.0, makes its images guided)
    step1=$(sed -n 's/.*DiT guided step of a 64x64 latent on 1 worker rank(s), mode guided: \([0-9.]*\) ms.*/\1/p' \
        "$tmp/weftd.log")
fi
stop
echo "T_single: $TS"

traffic() { # the workers' latent bytes per path, summed over them, minus $tmp/traffic0 (the
    # start-up's: the image scheduler's calibration decodes in batches of their own)
    curl -s "http://127.0.0.1:$PORT/admin/stats" | python3 -c '
import json, sys
ws = json.load(sys.stdin)["scheduler"]["workers"]
if "dit_latent_bytes" not in ws[0]:
    sys.argv[1] == "base" or print("latent traffic: not reported by this build"); sys.exit()
t = {k: sum(w["dit_latent_bytes"][k] for w in ws) for k in ws[0]["dit_latent_bytes"]}
t["reshards"] = sum(w["dit_reshards"] for w in ws)
if sys.argv[1] == "base":
    json.dump(t, open(sys.argv[2], "w")); sys.exit()
b = json.load(open(sys.argv[2]))
print("latent traffic of the run: " + ", ".join("%s %d" % (k, t[k] - b[k]) for k in t))' "$1" "$tmp/traffic0"
}

for p in $POLICIES; do
    for side in ${BEFORE_BIN:+before} after; do
        bin=$BUILD/bin
        [ "$side" = before ] && bin=$BEFORE_BIN
        label=$p
        [ -n "${BEFORE_BIN:-}" ] && label="$p $side"
        start "$p" "$bin"
        grep '\[dit\]' "$tmp/weftd.log" | sed 's/^.*\[dit\] /  /'
        traffic base
        "$BUILD/bin/weft-bench" --port "$PORT" --workload images $CLASSES --t-single "$TS" \
            --rate "$RATE" --num-requests "$N" --label "$label" --json "$tmp/$p.$side.json" >"$tmp/$p.txt" 2>&1
        groups=$(curl -s "http://127.0.0.1:$PORT/admin/stats" |
                 python3 -c 'import json,sys; print(json.load(sys.stdin)["images"]["chunks_by_group_size"])')
        echo "== $label: chunks by group size $groups"
        traffic run
        grep -E '^(SLO attainment|Image throughput|class|S |L |all )' "$tmp/$p.txt"
        stop
    done
done
uptime

# The cost model's single-request latency (the simulator predicts a lone job as steps x T(tokens,
# 1)) against the daemon's measured T_single of the L class (alone on one rank).
TL=$(echo "$TS" | tr ',' '\n' | sed -n 's/^L=//p')
if [ -n "$step1" ]; then
    awk -v s="$step1" -v t="$TL" -v n="$L_STEPS" 'BEGIN { p = n * s; printf "single L request: cost model %.1f ms (%d x %.3f), daemon %.1f ms, ratio %.2f\n", p, n, s, t, t / p }'
fi
