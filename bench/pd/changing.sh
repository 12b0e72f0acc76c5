#!/usr/bin/env bash
# The changing-link-rate run of prefill/decode disaggregation (bench/pd/netns.sh has the setup):
# one weftd pair across a tc-capped veth whose rate steps through SCHEDULE, PERIOD seconds each
# (cycling), while bench/pd/changing.py sends one long prompt after another, cycling through
# MODES ("kv_codec": off, a fixed profile, auto = the controller). Prints, per job, the link rate
# when its KV crossed, the codec used and why, the KV transfer time, TTFT and JCT; then the mean
# transfer time per rate and mode, and the totals per mode. Needs root.
#
#   SCHEDULE="1gbit 100mbit 5gbit 300mbit 10gbit" PERIOD=10 DURATION=300 PROMPT=1024 bench/pd/changing.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
SCHEDULE=${SCHEDULE:-"1gbit 100mbit 5gbit 300mbit 10gbit"}
PERIOD=${PERIOD:-10}
DURATION=${DURATION:-300}
PROMPT=${PROMPT:-1024}
MODES=${MODES:-off,k4v4-nr,auto}
PREFILL_CORES=${PREFILL_CORES:-0-1}
DECODE_CORES=${DECODE_CORES:-1}
OUT=${OUT:-$(mktemp -d /tmp/weft-bench-pd-changing.XXXXXX)}
mkdir -p "$OUT"
. bench/pd/netns.sh
RATER=
cleanup() {
  [[ -n $RATER ]] && kill "$RATER" 2>/dev/null || true
  pd_cleanup
}
trap cleanup EXIT

pd_netns_up
shape "${SCHEDULE%% *}"
pd_start changing
: >"$OUT/rates.log"
( # each change is logged with the monotonic time it took effect (time.monotonic() in Python)
  while true; do
    for r in $SCHEDULE; do
      shape "$r"
      echo "$(python3 -c 'import time; print(time.monotonic())') $r" >>"$OUT/rates.log"
      sleep "$PERIOD"
    done
  done
) &
RATER=$!
ip netns exec $NS_A python3 bench/pd/changing.py --base "http://$IP_A:8080" --rates "$OUT/rates.log" \
  --modes "$MODES" --prompt "$PROMPT" --duration "$DURATION" --out "$OUT/changing.json"
kill "$RATER" 2>/dev/null || true
RATER=
pd_stop
echo "results in $OUT"
python3 bench/pd/changing.py --report "$OUT/changing.json"
