#!/bin/sh
# Elastic EDF best-fit against the best static policy in the simulator (issue #15's simulated
# benchmark): GF-DiT's profiles (sched/workload/profiles), 8 and 16 ranks, several loads, 5 seeds each,
# GF-DiT's synthetic cost model. Prints BENCHMARKS.md's table; "bound" is the lower bound on
# any policy's mean latency (wf_dit_sim_latency_bound_ms), so "static / bound" < 2 means no
# policy can be 2x below the best static one there; "misses bound" is a lower bound on any
# policy's missed deadlines (wf_dit_sim_misses_bound) and the most fewer than the best static
# policy's that any policy could reach. "best static" is the best of weft's static
# policies (static:K, rssp) and GF-DiT's as its simulator runs them (gf-static:K, gf-rssp: lanes
# bound at arrival, first come first served); the last two columns compare with GF-DiT's alone.
#   bench/elastic/sim_table.sh [build-dir]   (RANKS="8 16" LOADS="0.6 0.8 1.0 1.2" SEEDS=5
#                                             EXTRA="--guided": more weft-dit-sim options)
set -eu
BUILD=${1:-build}
RANKS=${RANKS:-8 16}
LOADS=${LOADS:-0.6 0.8 1.0 1.2}
SEEDS=${SEEDS:-5}
EXTRA=${EXTRA:-}
echo "| ranks | profile | load | jobs | best static | its misses | elastic misses | fewer violations | misses bound (at most fewer) | mean latency static / elastic | bound | static / bound | best GF-DiT baseline: misses, mean | elastic: fewer violations, mean ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for r in $RANKS; do
    for p in short tridentserve foreground_burst; do
        for l in $LOADS; do
            "$BUILD/bin/weft-dit-sim" --ranks "$r" --profile "$p" --load "$l" --seeds "$SEEDS" $EXTRA | awk -v r="$r" -v p="$p" -v l="$l" '
                # name, misses and mean of the policy on an "elastic vs ..." line
                function vs(line, out) {
                    match(line, /\(([a-z0-9:=,-]+)\)/); out["name"] = substr(line, RSTART + 1, RLENGTH - 2)
                    match(line, /violations [0-9]+ vs [0-9]+/); split(substr(line, RSTART, RLENGTH), v, " ")
                    out["missed"] = v[4]
                    match(line, /vs [0-9.]+ s \(/); split(substr(line, RSTART, RLENGTH), m, " "); out["mean"] = m[2]
                }
                function fewer(sm) { return sm > 0 ? sprintf("%.1f%%", 100 * (sm - em) / sm) : "-" }
                function atmost(sm) { return sm > 0 ? sprintf("%.1f%%", 100 * (sm - mb) / sm) : "-" }
                $1 == "elastic" && $2 ~ /^[0-9]+$/ { jobs = $2; em = $3; emean = $8 }
                /^lower bound on any policy.s mean/ { bound = $8 }
                /^lower bound on any policy.s misses/ { mb = $7 }
                /^elastic vs best static/ { vs($0, b) }
                /^elastic vs best GF-DiT/ { vs($0, g) }
                END {
                    if (!("name" in g)) { g["name"] = b["name"]; g["missed"] = b["missed"]; g["mean"] = b["mean"] }
                    rate = 100 * b["missed"] / jobs
                    hit = rate > 20 ? "**" : ""
                    printf "| %s | %s | %s | %d | %s | %s%.1f%%%s | %d (%.1f%%) | %s | %d (%s) | %.2f / %.2f s (%.2fx) | %.2f s | %.2fx | %s: %.1f%%, %.2f s | %s, %.2fx |\n",
                           r, p, l, jobs, b["name"], hit, rate, hit, em, 100 * em / jobs, fewer(b["missed"]), mb,
                           atmost(b["missed"]), b["mean"], emean,
                           b["mean"] / emean, bound, b["mean"] / bound, g["name"], 100 * g["missed"] / jobs, g["mean"],
                           fewer(g["missed"]), g["mean"] / emean
                }'
        done
    done
done
