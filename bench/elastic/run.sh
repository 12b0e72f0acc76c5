#!/bin/sh
# DiT step time T(tokens, P) on 2 real ranks (1 thread each) and the simulator on that measured
# cost model: bench/elastic/run.sh [build-dir]   (SIZES=32,64 ITERS=5 by default)
set -eu
BUILD=${1:-build}
SIZES=${SIZES:-32,64}
ITERS=${ITERS:-5}
out=$(mktemp)
uptime
"$BUILD/bin/weft-elastic-bench" --sizes "$SIZES" --iters "$ITERS" 2>/dev/null | tee "$out" | grep -v '^cost'
uptime
grep '^cost' "$out" | cut -c6- > "$out.cost"
# classes at the measured sizes; 2 ranks; every policy that fits 2 ranks
toks=$(cut -d' ' -f1 "$out.cost" | sort -un | tr '\n' ' ')
set -- $toks
S=$1; L=${2:-$1}
"$BUILD/bin/weft-dit-sim" --ranks 2 --cost-file "$out.cost" --classes "$S,$L,$L" --steps 20 \
    --policies static:1,static:2,rssp,elastic --profile short --load 0.8 --seeds 5
rm -f "$out" "$out.cost"
