#!/bin/sh
# Elastic EDF best-fit against the best static policy in the simulator (issue #15's simulated
# benchmark): GF-DiT's profiles (sched/workload/profiles), 8 and 16 ranks, several loads, 5 seeds each,
# GF-DiT's synthetic cost model. Prints BENCHMARKS.md's table; "bound" is the lower bound on
# any policy's mean latency (wf_dit_sim_latency_bound_ms), so "static / bound" < 2 means no
# policy can be 2x below the best static one there.
#   bench/elastic/sim_table.sh [build-dir]   (RANKS="8 16" LOADS="0.6 0.8 1.0 1.2" SEEDS=5
#                                             EXTRA="--guided": more weft-dit-sim options)
set -eu
BUILD=${1:-build}
RANKS=${RANKS:-8 16}
LOADS=${LOADS:-0.6 0.8 1.0 1.2}
SEEDS=${SEEDS:-5}
EXTRA=${EXTRA:-}
echo "| ranks | profile | load | jobs | best static | its misses | elastic misses | fewer violations | mean latency static / elastic | bound | static / bound |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for r in $RANKS; do
    for p in short tridentserve foreground_burst; do
        for l in $LOADS; do
            "$BUILD/bin/weft-dit-sim" --ranks "$r" --profile "$p" --load "$l" --seeds "$SEEDS" $EXTRA | awk -v r="$r" -v p="$p" -v l="$l" '
                $1 == "elastic" && $2 ~ /^[0-9]+$/ { jobs = $2; em = $3; emean = $8 }
                /^lower bound/ { bound = $8 }
                /^elastic vs best static/ {
                    match($0, /\(([a-z0-9:]+)\)/); best = substr($0, RSTART + 1, RLENGTH - 2)
                    match($0, /violations [0-9]+ vs [0-9]+/); split(substr($0, RSTART, RLENGTH), v, " ")
                    sm = v[4]
                    match($0, /vs [0-9.]+ s \(/); split(substr($0, RSTART, RLENGTH), m, " "); smean = m[2]
                    rate = 100 * sm / jobs
                    fewer = sm > 0 ? sprintf("%.1f%%", 100 * (sm - em) / sm) : "-"
                    hit = rate > 20 ? "**" : ""
                }
                END {
                    printf "| %s | %s | %s | %d | %s | %s%.1f%%%s | %d (%.1f%%) | %s | %.2f / %.2f s (%.2fx) | %.2f s | %.2fx |\n",
                           r, p, l, jobs, best, hit, rate, hit, em, 100 * em / jobs, fewer, smean, emean, smean / emean,
                           bound, smean / bound
                }'
        done
    done
done
