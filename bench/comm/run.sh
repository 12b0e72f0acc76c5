#!/usr/bin/env bash
# Comm benchmarks in one run: weft's group formation and collectives, all-to-all by path
# (tagged messages, puts into malloc'd buffers, puts into wf_world_mem_alloc buffers, in place in
# a wf_world_mem_alloc buffer), UCX's own
# ucx_perftest (ucp_put_bw, ucp_am_bw between two processes on loopback, same UCX_TLS) and memcpy.
#   bench/comm/run.sh [BUILD_DIR] [RANKS...]     (default: build, ranks 2 4 8)
# BEFORE_BIN=path/to/an/older/weft-bench-comm also runs its collectives in the same run.
# For 16 and 64 MiB (medians, CPU time, time waiting for a core, before and after) see large.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}; shift || true
ranks=${*:-2 4 8}
bin=$build/bin/weft-bench-comm
export UCX_TLS=${UCX_TLS:-all}
echo "UCX_TLS=$UCX_TLS  $(ucx_info -v | head -1)  nproc=$(nproc)"
echo; echo "## memcpy"; "$bin" memcpy
echo; echo "## ucx_perftest (1 MiB and 16 MiB messages; bandwidth columns are MB/s)"
port=$((20000 + RANDOM % 20000))
for t in ucp_put_bw ucp_am_bw; do
  for s in 1048576 16777216; do
    ucx_perftest -p $port >/dev/null 2>&1 & srv=$!
    sleep 0.5
    echo "$t size $s:"; ucx_perftest 127.0.0.1 -p $port -t $t -s $s -n 100 2>&1 | tail -2
    wait $srv || true
    port=$((port + 1))
  done
done
echo; echo "## group formation: ranks | gfc p50 | gfc p99 | conventional p50 | p99 | ratio p50 | ratio p99"
"$bin" formation 8 2>&1 | grep '^|'
echo; echo "## collectives: name | ranks | bytes per rank | best time | bus bandwidth"
for n in $ranks; do "$bin" coll "$n" 2>&1 | grep '^|'; done
if [ -n "${BEFORE_BIN:-}" ]; then
  echo; echo "## collectives, BEFORE_BIN=$BEFORE_BIN"
  # An older binary may give up on a size (a wait bound): say so and go on.
  for n in $ranks; do "$BEFORE_BIN" coll "$n" 2>&1 | grep -E '^\||: ' || echo "(BEFORE_BIN coll $n failed)"; done
fi
echo; echo "## all-to-all by path: path | ranks | bytes per rank | best | mean | bus bw (best) | bus bw (mean)"
for n in $ranks; do "$bin" a2a "$n" 2>&1 | grep -E '^\||registrations'; done
echo; echo "## bare ucp_put_nbx + flush between two processes (weft-bench-put-raw): buffer | error mode | size | best | mean | GB/s best | GB/s mean"
for s in 1048576 16777216; do
  for m in alloc malloc; do
    for e in none peer; do "$build/bin/weft-bench-put-raw" $s $m $e 30 | grep -E '^\||lane\[0\]' || echo "(put-raw $s $m $e failed)"; done
  done
done
