#!/usr/bin/env bash
# Latency of N tasks: virtual models against spatial partitioning with a hard CPU share.
#   virtual  one weftd on all cores (--threads = cores, --policy fair), one virtual model per
#            task, each task its own random LoRA adapter
#   spatial  N weftd processes (--threads 1), one task each with the same adapter, each in a
#            cgroup of its own whose CPU quota is cores/N of a period (cgroup v2 cpu.max, or
#            v1 cpu.cfs_quota_us where the cpu controller is only mounted as v1), so an idle
#            neighbour's share is not available to it (taskset alone would lend it); process t
#            is also pinned to core t mod cores
# Load: Poisson, RATE requests/s in total spread evenly over the N tasks (task t: RATE/N, seed
# ROUND*1000+t, the same arrivals for both sides of a round), NREQ requests in total per side.
# The two sides alternate in ROUNDS rounds (virtual first in even rounds, spatial first in odd
# ones) so that other jobs on the host weigh on both; each round prints the host's load
# average, every side's pooled mean / p99 end-to-end latency and mean TTFT, and CPU use: the
# fraction of its share each weftd used while the load ran (spatial: also the fraction of CFS
# periods in which a process hit its quota and was throttled). Needs root (cgroups).
#   bench/vmodels/spatial.sh [N=4] [RATE=0.4] [NREQ=24] [ROUNDS=2] [INPUT=64] [OUTPUT=32]
# WEFT_CPU_PERIOD_US sets the CFS period (default 100000, the kernel's). WEFT_BENCH_CPU_SHARES=S
# runs everything measured (weftd of both sides and the load generators) inside one cgroup of
# cpu weight S (v1 cpu.shares; v2 cpu.weight S*100/1024): on a host shared with other jobs, a
# large S (e.g. 262144) lets the measured processes run when they are runnable, as on an idle
# host, instead of each thread getting 1/(runnable threads) of a core, which would hand the
# spatial side N threads' worth of the host against the virtual side's `cores` threads.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/vmodels/lib.sh
N=${1:-4}; RATE=${2:-0.4}; NREQ=${3:-24}; ROUNDS=${4:-2}; INPUT=${5:-64}; OUTPUT=${6:-32}
CORES=$(nproc)
PERIOD_US=${WEFT_CPU_PERIOD_US:-100000}
QUOTA_US=$((CORES * PERIOD_US / N))
TASK_RATE=$(python3 -c "print($RATE / $N)")
TASK_NREQ=$((NREQ / N)); [ "$TASK_NREQ" -ge 1 ] || { echo "NREQ must be >= N" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "spatial.sh creates cgroups: run it as root" >&2; exit 2; }
OUT=$(mktemp -d /tmp/weft-vm-spatial-XXXXXX)

# The cgroup interface to use: v2 with the cpu controller if the unified tree has it, else v1's.
if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then CGV=2; CGROOT=/sys/fs/cgroup
elif grep -qw cpu /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null; then
  CGV=2; CGROOT=/sys/fs/cgroup/unified
elif [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then CGV=1; CGROOT=/sys/fs/cgroup/cpu
else echo "no cgroup cpu controller found (v2 cpu.max or v1 cpu.cfs_quota_us)" >&2; exit 2; fi
if [ "$CGV" = 2 ] && ! grep -qw cpu "$CGROOT/cgroup.subtree_control"; then
  echo +cpu >"$CGROOT/cgroup.subtree_control"
fi
CGP=- # the parent of everything measured ("-": none, the caller's cgroup)
if [ -n "${WEFT_BENCH_CPU_SHARES:-}" ]; then
  CGP="$CGROOT/weft-bench-$$"
  mkdir "$CGP"
  if [ "$CGV" = 2 ]; then
    w=$((WEFT_BENCH_CPU_SHARES * 100 / 1024)); [ "$w" -ge 1 ] || w=1; [ "$w" -le 10000 ] || w=10000
    echo "$w" >"$CGP/cpu.weight"; echo +cpu >"$CGP/cgroup.subtree_control"
  else echo "$WEFT_BENCH_CPU_SHARES" >"$CGP/cpu.shares"; fi
fi

PIDS=(); CGS=()
stop_all() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && { wait "$p" 2>/dev/null || true; }; done
  for c in "${CGS[@]:-}"; do [ -n "$c" ] && rmdir "$c" 2>/dev/null || true; done
  PIDS=(); CGS=()
}
trap 'stop_all; [ "$CGP" = - ] || rmdir "$CGP"' EXIT
in_cg() { # CGROUP|- CMD... &: CMD inside the cgroup (every thread it starts too). Only with &:
  # the background subshell becomes CMD (exec), so $! is CMD's pid.
  exec bash -c '[ "$1" = - ] || echo $$ >"$1/cgroup.procs"; shift; exec "$@"' _ "$@"
}

cg_make() { # NAME -> prints the cgroup's directory, quota QUOTA_US per PERIOD_US
  local d; d="$([ "$CGP" = - ] && echo "$CGROOT" || echo "$CGP")/weft-spatial-$$-$1"
  mkdir "$d"
  if [ "$CGV" = 2 ]; then echo "$QUOTA_US $PERIOD_US" >"$d/cpu.max"
  else echo "$PERIOD_US" >"$d/cpu.cfs_period_us"; echo "$QUOTA_US" >"$d/cpu.cfs_quota_us"; fi
  echo "$d"
}
cg_throttled() { # DIR -> "periods throttled"
  awk '$1 == "nr_periods" {p = $2} $1 == "nr_throttled" {t = $2} END {print p + 0, t + 0}' "$1/cpu.stat"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

make_adapters "$OUT" "$N"

start_weftd() { # LOG CGROUP|- CPUS THREADS POLICY [vmodel flags...]: starts one weftd, prints PORT
  local log=$1 cg=$2 cpus=$3 th=$4 pol=$5; shift 5
  local p; p=$(free_port)
  in_cg "$cg" taskset -c "$cpus" "$BIN/weftd" --model "$MODEL" --port "$p" --threads "$th" --policy "$pol" \
    "${WEFTD_FLAGS[@]}" "$@" >"$log" 2>&1 &
  PIDS+=($!)
  echo "$p" >"$log.port"
}

run_side() { # SIDE ROUND
  local side=$1 r=$2 ports=() t
  local tag="r$r-$side"
  if [ "$side" = virtual ]; then
    local vm=()
    for t in $(seq 0 $((N - 1))); do vm+=(--vmodel "id=t$t,adapter=$OUT/t$t.gguf"); done
    start_weftd "$OUT/$tag.log" "$CGP" "0-$((CORES - 1))" "$CORES" fair "${vm[@]}"
    wait_ready "$(cat "$OUT/$tag.log.port")" "$OUT/$tag.log"
    for t in $(seq 0 $((N - 1))); do ports+=("$(cat "$OUT/$tag.log.port")"); done
  else
    for t in $(seq 0 $((N - 1))); do
      CGS+=("$(cg_make "$t")")
      start_weftd "$OUT/$tag-t$t.log" "${CGS[-1]}" "$((t % CORES))" 1 fcfs \
        --vmodel "id=t$t,adapter=$OUT/t$t.gguf"
      ports+=("$(cat "$OUT/$tag-t$t.log.port")")
    done
    for t in $(seq 0 $((N - 1))); do wait_ready "${ports[$t]}" "$OUT/$tag-t$t.log"; done
  fi
  local la0 c0=() c1=() th0=() th1=() w0 w1 p c loads=()
  la0=$(cut -d' ' -f1 /proc/loadavg)
  for p in "${PIDS[@]}"; do c0+=("$(cpu_ticks "$p")"); done
  for c in "${CGS[@]:-}"; do [ -n "$c" ] && th0+=("$(cg_throttled "$c")"); done
  w0=$(date +%s.%N)
  for t in $(seq 0 $((N - 1))); do
    in_cg "$CGP" "$BIN/weft-bench" --port "${ports[$t]}" --model "t$t" --rate "$TASK_RATE" \
      --num-requests "$TASK_NREQ" --duration 3600 --input-len "$INPUT" --output-len "$OUTPUT" \
      --seed "$((r * 1000 + t))" --label "$tag-t$t" --no-progress --csv "$OUT/$tag-t$t.csv" \
      >"$OUT/$tag-t$t.txt" 2>&1 &
    loads+=($!)
  done
  wait "${loads[@]}"
  w1=$(date +%s.%N)
  for p in "${PIDS[@]}"; do c1+=("$(cpu_ticks "$p")"); done
  for c in "${CGS[@]:-}"; do [ -n "$c" ] && th1+=("$(cg_throttled "$c")"); done
  # side, wall s, load average at start and end, each process's CPU ticks used and its share in
  # cores, then each cgroup's "periods throttled" before and after
  {
    echo "wall $(python3 -c "print($w1 - $w0)")"
    echo "loadavg $la0 $(cut -d' ' -f1 /proc/loadavg)"
    local share; share=$([ "$side" = virtual ] && echo "$CORES" || python3 -c "print($CORES / $N)")
    for i in "${!PIDS[@]}"; do echo "cpu $((c1[i] - c0[i])) $share"; done
    for i in "${!th0[@]}"; do echo "throttle ${th0[$i]} ${th1[$i]}"; done
  } >"$OUT/$tag.info"
  stop_all
}

for r in $(seq 0 $((ROUNDS - 1))); do
  if [ $((r % 2)) = 0 ]; then order="virtual spatial"; else order="spatial virtual"; fi
  for side in $order; do run_side "$side" "$r"; done
  python3 bench/vmodels/spatial_report.py "$OUT" "$N" "$r" "$(getconf CLK_TCK)"
done
python3 bench/vmodels/spatial_report.py "$OUT" "$N" all "$(getconf CLK_TCK)"
echo "N=$N tasks, $RATE requests/s in total, $NREQ requests per side and round, cgroup v$CGV quota" \
  "${QUOTA_US}us per ${PERIOD_US}us, cpu shares ${WEFT_BENCH_CPU_SHARES:-none}; results in $OUT"
