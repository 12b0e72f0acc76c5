#!/usr/bin/env bash
# Large collectives (16 and 64 MiB per rank) on a shared host: weft-bench-comm's `size` mode,
# ROUNDS rounds, each running this build and (if BEFORE_BIN is set) an older weft-bench-comm
# back to back, so that both see the same load; then ucx_perftest's ucp_put_bw and ucp_am_bw
# and memcpy at 64 MiB. Prints every row, then per configuration the median over rounds of
# each run's median time and bus bandwidth, CPU time and time waiting for a core.
#   BEFORE_BIN=old/bin/weft-bench-comm bench/comm/large.sh [BUILD_DIR] [ROUNDS] [REPS]
# SIZES (bytes per rank; default "16777216 67108864"), RANKS (default "2 4") and BUFS (buffer
# modes of `size`: alloc, malloc, inplace; default alloc) choose the configurations, e.g.
#   SIZES=1048576 RANKS=2 BUFS="alloc inplace" bench/comm/large.sh build 5 200
# BATCH=K runs K collectives back to back per repetition (times per collective; default 1).
# AUTOGROUP_NICE=-10 runs each weft-bench-comm in a session of its own whose autogroup has that
# nice value (needs CAP_SYS_NICE): with kernel.sched_autogroup_enabled=1 every session gets an
# equal share of the CPUs whatever its processes' nice values, so on a host shared by many
# sessions a benchmark's ranks rarely run at the same time; this takes most of that out, for a
# short diagnostic run (it slows the other sessions meanwhile).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rounds=${2:-3}
reps=${3:-20}
bin=$build/bin/weft-bench-comm
colls=${COLLS:-alltoall}
sizes=${SIZES:-16777216 67108864}
nranks=${RANKS:-2 4}
bufs=${BUFS:-alloc}
export UCX_TLS=${UCX_TLS:-all}
# Runs a command, in a session of its own at AUTOGROUP_NICE if that is set (see above).
prio() {
  if [ -n "${AUTOGROUP_NICE:-}" ]; then
    setsid sh -c 'echo "$0" > /proc/self/autogroup && exec "$@"' "$AUTOGROUP_NICE" "$@"
  else
    "$@"
  fi
}
out=$(mktemp)
perf=$(mktemp)
trap 'rm -f "$out" "$perf"' EXIT
port=$((20000 + RANDOM % 20000))
# ucx_perftest's ucp_put_bw at size $1 (100 puts): appends "SIZE MB/s" (its average) to $perf.
put_bw() {
  prio ucx_perftest -p $port >/dev/null 2>&1 & local srv=$!
  sleep 0.5
  prio ucx_perftest 127.0.0.1 -p $port -t ucp_put_bw -s "$1" -n 100 2>&1 | awk -v s="$1" '/^Final:/ { print s, $6 }' >> "$perf"
  wait $srv || true
  port=$((port + 1))
}
echo "UCX_TLS=$UCX_TLS  $(ucx_info -v | head -1)  nproc=$(nproc)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| build | collective | buffers | ranks | bytes per rank | reps | best | median | mean | bus bw best | bus bw median | bus bw mean | CPU time median | waiting for a core median |"
for r in $(seq "$rounds"); do
  for s in $sizes; do put_bw "$s"; done # each round: the reference under the same load
  for c in $colls; do
    for n in $nranks; do
      for s in $sizes; do
        for m in $bufs; do
          for which in after before; do
            b=$bin
            [ "$which" = before ] && { [ -n "${BEFORE_BIN:-}" ] || continue; b=$BEFORE_BIN; }
            prio "$b" size "$n" "$c" "$s" "$reps" "$m" "${BATCH:-1}" 2>/dev/null | sed "s/^|/| $which |/" | tee -a "$out"
          done
        done
      done
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo; echo "## medians over $rounds rounds: build | collective | buffers | ranks | KiB | median time | bus bw | CPU time | waiting for a core"
awk -F'|' '{ k = $2 "|" $3 "|" $4 "|" $5 "|" $6; gsub(/ /, "", k); t[k] = t[k] " " $9 + 0; bw[k] = bw[k] " " $12 + 0;
             cpu[k] = cpu[k] " " $14 + 0; wt[k] = wt[k] " " $15 + 0 }
     function med(s,   a, n, i, j, x) { n = split(s, a, " ");
       for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
       return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
     END { for (k in t) printf "| %s | %.0f us | %.2f GB/s | %.0f us | %.0f us |\n", k, med(t[k]), med(bw[k]), med(cpu[k]), med(wt[k]) }' "$out" | sort
echo; echo "## ucx_perftest ucp_put_bw, one run of 100 puts per round: size | its average (MB/s) per round | median"
awk '{ v[$1] = v[$1] " " $2 } END { for (k in v) { n = split(v[k], a, " ");
       for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
       printf "| %s |%s | %s |\n", k, v[k], n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 } }' "$perf"
echo; echo "## ucx_perftest at the same sizes (MB/s columns; average over 20 iterations) and memcpy"
for t in ucp_put_bw ucp_am_bw; do
  for s in $sizes; do
    prio ucx_perftest -p $port >/dev/null 2>&1 & srv=$!
    sleep 0.5
    echo "$t size $s:"; prio ucx_perftest 127.0.0.1 -p $port -t $t -s "$s" -n 20 2>&1 | tail -2
    wait $srv || true
    port=$((port + 1))
  done
done
prio "$bin" memcpy | tail -3
