#!/usr/bin/env bash
# Prefill/decode disaggregation over a capped link: the coordinator and the prefill worker in
# one network namespace, the decode worker (a joined `weftd --role worker`) in another, joined
# by a veth pair whose rate `tc` caps. UCX is held to TCP on the veth (UCX_TLS=tcp,self and
# UCX_NET_DEVICES), so every KV byte crosses the capped link. Per link rate, one daemon: long
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
NS_A=weftpdA NS_B=weftpdB IP_A=10.77.0.1 IP_B=10.77.0.2
WEFTD=$(realpath "$BUILD/bin/weftd")
PROFILES=$(realpath deploy/kv-profiles.json)
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  # What is left in the two namespaces is this script's (e.g. a worker the coordinator started).
  for ns in $NS_A $NS_B; do ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null || true; done
  ip netns del $NS_A 2>/dev/null || true
  ip netns del $NS_B 2>/dev/null || true
}
trap cleanup EXIT

ip netns del $NS_A 2>/dev/null || true
ip netns del $NS_B 2>/dev/null || true
ip netns add $NS_A
ip netns add $NS_B
ip link add vpdA netns $NS_A type veth peer name vpdB netns $NS_B
ip -n $NS_A addr add $IP_A/24 dev vpdA
ip -n $NS_B addr add $IP_B/24 dev vpdB
for ns in $NS_A $NS_B; do ip -n $ns link set lo up; done
ip -n $NS_A link set vpdA up
ip -n $NS_B link set vpdB up

shape() { # rate: token bucket on both ends; the burst covers 4 ms at the rate (>= 64 KiB)
  local rate=$1 bits
  bits=$(python3 -c "import re,sys; m=re.match(r'([0-9.]+)([kmg]?)bit','$rate'); print(int(float(m[1])*{'':1,'k':1e3,'m':1e6,'g':1e9}[m[2]]))")
  local burst=$(( bits / 8 / 250 )); (( burst < 65536 )) && burst=65536
  ip netns exec $NS_A tc qdisc replace dev vpdA root tbf rate "$rate" burst "$burst" latency 200ms
  ip netns exec $NS_B tc qdisc replace dev vpdB root tbf rate "$rate" burst "$burst" latency 200ms
}

COMMON=(--model "$MODEL" --kv-memory-mb 640 --max-running 8 --kv-profiles "$PROFILES"
        --worker-timeout-ms 1800000 --heartbeat-ms 500)
for rate in $RATES; do
  shape "$rate"
  PIDS=()
  UCX_TLS=tcp,self UCX_NET_DEVICES=vpdA ip netns exec $NS_A "$WEFTD" "${COMMON[@]}" --host $IP_A \
    --port 8080 --prefill-workers 1 --decode-workers 1 --local-workers 1 --worker-cores "$PREFILL_CORES" \
    --world-host $IP_A --world-port 7070 --cost-model 0.5,0.05,2,0.0005 --fixed-cost-model \
    --admission-factor 1000 --default-ttft-ms 3600000 >"$OUT/coordinator-$rate.log" 2>&1 &
  PIDS+=($!)
  sleep 2
  UCX_TLS=tcp,self UCX_NET_DEVICES=vpdB ip netns exec $NS_B "$WEFTD" "${COMMON[@]}" --role worker \
    --join $IP_A:7070 --world-size 3 --rank 2 --worker-cores "$DECODE_CORES" \
    --max-batch-tokens 8200 >"$OUT/decode-$rate.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 600); do
    ip netns exec $NS_A curl -sf "http://$IP_A:8080/health" 2>/dev/null | grep -q '"ok"' && break
    sleep 0.5
  done
  ip netns exec $NS_A python3 bench/pd/client.py --base "http://$IP_A:8080" --rate "$rate" \
    --modes "$MODES" --prompts "$PROMPTS" --reps "$REPS" --out "$OUT/$rate.json"
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
done
echo "results in $OUT"
python3 bench/pd/client.py --report $(for r in $RATES; do echo "$OUT/$r.json"; done)
