#!/bin/sh
# DiT per-step benchmark: weft (fp32 and bf16) against PyTorch/diffusers on the CPU, same shapes
# and thread count, in one run. Each repetition runs the three programs back to back (weft fp32,
# weft bf16, torch), so a load swing on a shared host hits all three alike; prints each
# program's line, the PyTorch/weft ratios of that repetition (wall and CPU time per step), and
# the median ratio over the repetitions.
#   bench/dit/run.sh [build-dir]
#   (THREADS=2 ITERS=10 REPEAT=1 MODELS="s2 b2" BATCHES=2 by default; xl2 is DiT-XL/2's width)
set -eu
BUILD=${1:-build}
THREADS=${THREADS:-2}
ITERS=${ITERS:-10}
REPEAT=${REPEAT:-1}
MODELS=${MODELS:-"s2 b2"}
BATCHES=${BATCHES:-2}
BENCH="$BUILD/bin/weft-dit-bench"
[ -x "$BENCH" ] || { echo "build weft-dit-bench first (cmake --build $BUILD --target weft-dit-bench)" >&2; exit 1; }
export OMP_WAIT_POLICY=PASSIVE
med() { sed -n 's/.*step_ms_median=\([0-9.]*\).*/\1/p'; }
cpu() { sed -n 's/.*cpu_ms_per_step=\([0-9.]*\).*/\1/p'; }
ratio() { echo "$1 / $2" | bc -l | awk '{printf "%.2f", $1}'; }
for m in $MODELS; do
    for b in $BATCHES; do
        rs=""
        r=1
        while [ "$r" -le "$REPEAT" ]; do
            w32=$("$BENCH" --model "$m" --batch "$b" --threads "$THREADS" --iters "$ITERS")
            wbf=$("$BENCH" --model "$m" --batch "$b" --threads "$THREADS" --iters "$ITERS" --bf16)
            pt=$(/usr/bin/python3 "$(dirname "$0")/torch_dit_bench.py" --model "$m" --batch "$b" --threads "$THREADS" --iters "$ITERS")
            echo "weft  $w32"
            echo "weft  $wbf"
            echo "torch $pt"
            a=$(echo "$w32" | med); c=$(echo "$wbf" | med); p=$(echo "$pt" | med)
            ca=$(echo "$w32" | cpu); cc=$(echo "$wbf" | cpu); cp=$(echo "$pt" | cpu)
            line="$(ratio "$p" "$a") $(ratio "$p" "$c") $(ratio "$cp" "$ca") $(ratio "$cp" "$cc")"
            echo "$m batch $b rep $r torch/weft: wall fp32 bf16, cpu fp32 bf16 = $line ($(uptime | sed 's/.*load/load/'))"
            rs="$rs$line
"
            r=$((r + 1))
        done
        printf '%s' "$rs" | awk -v m="$m" -v b="$b" -v n="$REPEAT" '{for (i = 1; i <= 4; i++) col[i] = col[i] " " $i}
            END {printf "%s batch %s median of %d torch/weft:", m, b, n;
                 split("wall_fp32 wall_bf16 cpu_fp32 cpu_bf16", name, " ");
                 for (i = 1; i <= 4; i++) {k = split(col[i], v, " "); for (x = 1; x <= k; x++) for (y = x + 1; y <= k; y++) if (v[y] < v[x]) {t = v[x]; v[x] = v[y]; v[y] = t};
                     printf " %s=%s", name[i], (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2}
                 printf "\n"}'
    done
done
