#!/bin/sh
# DiT per-step benchmark: weft (fp32 and bf16) against PyTorch/diffusers on the CPU, same shapes
# and thread count, in one run; prints each program's line and the weft/PyTorch speed ratios.
#   bench/dit/run.sh [build-dir]     (THREADS=2 ITERS=10 MODELS="s2 b2" by default)
set -eu
BUILD=${1:-build}
THREADS=${THREADS:-2}
ITERS=${ITERS:-10}
MODELS=${MODELS:-"s2 b2"}
BENCH="$BUILD/bin/weft-dit-bench"
[ -x "$BENCH" ] || { echo "build weft-dit-bench first (cmake --build $BUILD --target weft-dit-bench)" >&2; exit 1; }
export OMP_WAIT_POLICY=PASSIVE
med() { sed -n 's/.*step_ms_median=\([0-9.]*\).*/\1/p'; }
cpu() { sed -n 's/.*cpu_ms_per_step=\([0-9.]*\).*/\1/p'; }
for m in $MODELS; do
    w32=$("$BENCH" --model "$m" --threads "$THREADS" --iters "$ITERS")
    wbf=$("$BENCH" --model "$m" --threads "$THREADS" --iters "$ITERS" --bf16)
    pt=$(/usr/bin/python3 "$(dirname "$0")/torch_dit_bench.py" --model "$m" --threads "$THREADS" --iters "$ITERS")
    echo "weft  $w32"
    echo "weft  $wbf"
    echo "torch $pt"
    a=$(echo "$w32" | med); b=$(echo "$wbf" | med); p=$(echo "$pt" | med)
    echo "$m wall: torch/weft-fp32 = $(echo "$p / $a" | bc -l | cut -c1-5)x, torch/weft-bf16 = $(echo "$p / $b" | bc -l | cut -c1-5)x"
    a=$(echo "$w32" | cpu); b=$(echo "$wbf" | cpu); p=$(echo "$pt" | cpu)
    echo "$m cpu:  torch/weft-fp32 = $(echo "$p / $a" | bc -l | cut -c1-5)x, torch/weft-bf16 = $(echo "$p / $b" | bc -l | cut -c1-5)x"
done
