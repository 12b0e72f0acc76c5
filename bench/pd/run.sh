#!/usr/bin/env bash
# Prefill/decode disaggregation over a capped link (bench/pd/netns.sh: two network namespaces,
# a tc-capped veth, UCX held to TCP on it, the weftd pair across it). Per link rate, one daemon: long
# prompts, one at a time, for each KV mode ("kv_codec": off, fixed profiles, auto = the
# adaptive controller, which runs last and has learnt the link from the earlier transfers).
# Prints markdown tables (TTFT, JCT, KV transfer time and the rate UCX achieved). Needs root.
#
#   sudo RATES="100mbit 1gbit 5gbit 10gbit" PROMPTS=2048,8000 MODES=off,k8v8,k4v4,auto bench/pd/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
RATES=${RATES:-"100mbit 1gbit 5gbit 10gbit"}
PROMPTS=${PROMPTS:-2048,8000}
MODES=${MODES:-off,k8v8,k4v4,auto}
REPS=${REPS:-1}
PREFILL_CORES=${PREFILL_CORES:-0-1}
DECODE_CORES=${DECODE_CORES:-1}
OUT=${OUT:-$(mktemp -d /tmp/weft-bench-pd.XXXXXX)}
mkdir -p "$OUT"
. bench/pd/netns.sh
trap pd_cleanup EXIT
pd_netns_up

for rate in $RATES; do
  shape "$rate"
  pd_start "$rate"
  ip netns exec $NS_A python3 bench/pd/client.py --base "http://$IP_A:8080" --rate "$rate" \
    --modes "$MODES" --prompts "$PROMPTS" --reps "$REPS" --out "$OUT/$rate.json"
  pd_stop
done
echo "results in $OUT"
python3 bench/pd/client.py --report $(for r in $RATES; do echo "$OUT/$r.json"; done)
