# Shared by bench/pd/run.sh and bench/pd/changing.sh (sourced, not run): two network namespaces
# joined by a veth pair whose rate tc caps, and the prefill/decode weftd pair across them (the
# coordinator and the prefill worker in A, the decode worker, a joined `weftd --role worker`, in
# B). UCX is held to TCP on the veth (UCX_TLS=tcp,self and UCX_NET_DEVICES), so every KV byte
# crosses the capped link. Needs root. The caller sets BUILD, MODEL, OUT, PREFILL_CORES,
# DECODE_CORES (and PROFILES: the KV codec library, deploy/kv-profiles.json by default) before
# sourcing.
NS_A=weftpdA NS_B=weftpdB IP_A=10.77.0.1 IP_B=10.77.0.2
WEFTD=$(realpath "$BUILD/bin/weftd")
PROFILES=$(realpath "${PROFILES:-deploy/kv-profiles.json}")
PIDS=()

pd_cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  # What is left in the two namespaces is this script's (e.g. a worker the coordinator started).
  for ns in $NS_A $NS_B; do ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null || true; done
  ip netns del $NS_A 2>/dev/null || true
  ip netns del $NS_B 2>/dev/null || true
}

pd_netns_up() {
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
}

shape() { # rate: token bucket on both ends; the burst covers 4 ms at the rate (>= 64 KiB)
  local rate=$1 bits
  bits=$(python3 -c "import re,sys; m=re.match(r'([0-9.]+)([kmg]?)bit','$rate'); print(int(float(m[1])*{'':1,'k':1e3,'m':1e6,'g':1e9}[m[2]]))")
  local burst=$(( bits / 8 / 250 )); (( burst < 65536 )) && burst=65536
  ip netns exec $NS_A tc qdisc replace dev vpdA root tbf rate "$rate" burst "$burst" latency 200ms
  ip netns exec $NS_B tc qdisc replace dev vpdB root tbf rate "$rate" burst "$burst" latency 200ms
}

# EXTRA: more weftd flags for both processes, e.g. EXTRA="--kv-codec-threads 1".
COMMON=(--model "$MODEL" --kv-memory-mb 640 --max-running 8 --kv-profiles "$PROFILES"
        --worker-timeout-ms 1800000 --heartbeat-ms 500 ${EXTRA:-})

pd_start() { # tag: starts the pair (logs $OUT/coordinator-tag.log, decode-tag.log), waits for health
  local tag=$1
  PIDS=()
  UCX_TLS=tcp,self UCX_NET_DEVICES=vpdA ip netns exec $NS_A "$WEFTD" "${COMMON[@]}" --host $IP_A \
    --port 8080 --prefill-workers 1 --decode-workers 1 --local-workers 1 --worker-cores "$PREFILL_CORES" \
    --world-host $IP_A --world-port 7070 --cost-model 0.5,0.05,2,0.0005 --fixed-cost-model \
    --admission-factor 1000 --default-ttft-ms 3600000 >"$OUT/coordinator-$tag.log" 2>&1 &
  PIDS+=($!)
  sleep 2
  UCX_TLS=tcp,self UCX_NET_DEVICES=vpdB ip netns exec $NS_B "$WEFTD" "${COMMON[@]}" --role worker \
    --join $IP_A:7070 --world-size 3 --rank 2 --worker-cores "$DECODE_CORES" \
    --max-batch-tokens 8200 >"$OUT/decode-$tag.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 600); do
    ip netns exec $NS_A curl -sf "http://$IP_A:8080/health" 2>/dev/null | grep -q '"ok"' && return 0
    sleep 0.5
  done
  echo "weftd pair did not become healthy (see $OUT/*-$tag.log)" >&2
  return 1
}

pd_stop() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
