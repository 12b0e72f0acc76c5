#!/usr/bin/env python3
"""Tighter lower bounds on what ANY DiT placement policy can reach on weft-dit-sim's traces.

weft-dit-sim's own bounds (sched/dit_sim.c) are closed-form and loose. This solves a
time-indexed relaxation of the cluster as a mixed-integer program (HiGHS, through scipy), for
the traces that `weft-dit-sim --jobs-out FILE` writes:

    build/bin/weft-dit-sim --ranks 8 --profile tridentserve --load 1.2 --seeds 5 \
        --policies elastic --jobs-out /tmp/t.jobs
    python3 bench/elastic/bounds.py /tmp/t.jobs            # misses bound per seed and in sum

Misses. Time is cut at every arrival and deadline, so a slot lies wholly inside or outside each
job's window [arrival, deadline]. Per job a 0/1 "on time" x_j; per job and slot inside its
window, z (steps done there) and y (rank-ms spent there). An on-time job does all its steps
inside its window (sum z >= steps x_j). A job that does z steps in a slot of length len uses at
least len x g(z / len) rank-ms, g being the lower convex hull of (0, 0) and (1 / T(P), P) over
the allowed degrees P (a rate above the fastest degree's is impossible): whatever degrees it
runs at inside the slot, its mean (rate, ranks) lies in that hull. The ranks bound every slot:
sum_j y <= ranks x len. Every real schedule (any policy, any degrees, preemptive or not, any
reshards, which only add time) is a feasible point of this program, so the program's maximum
of sum x_j bounds the on-time jobs from above, and jobs - that max bounds the misses from
below. The jobs that miss even alone on their fastest degree are counted apart. Requires scipy
(pip install scipy); not part of CI.
"""
import argparse
import math
import sys
from collections import defaultdict

import numpy as np
from scipy.optimize import milp, LinearConstraint, Bounds
from scipy.sparse import coo_matrix


def read_jobs(path):
    ranks, steps, overhead, step_ms, traces = 0, {}, {}, defaultdict(dict), defaultdict(list)
    for line in open(path):
        f = line.split()
        if not f:
            continue
        if f[0] == "ranks":
            ranks = int(f[1])
        elif f[0] == "class":
            steps[int(f[1])], overhead[int(f[1])] = int(f[4]), float(f[5])
        elif f[0] == "step":
            step_ms[int(f[1])][int(f[2])] = float(f[3])
        elif f[0] == "job":
            traces[int(f[1])].append((float(f[2]), int(f[3]), float(f[4])))
    return ranks, steps, overhead, step_ms, traces


def hull(step_ms):
    """Lower convex hull of (0, 0) and (1/T(P), P): the segments (slope, intercept) with
    ranks >= slope x rate + intercept, and the fastest rate."""
    pts = sorted([(0.0, 0.0)] + [(1.0 / t, float(p)) for p, t in step_ms.items()])
    low = []
    for p in pts:
        while len(low) >= 2:
            (x1, y1), (x2, y2) = low[-2], low[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) <= 0:  # not a left turn
                low.pop()
            else:
                break
        low.append(p)
    # keep the increasing part (a faster rate never needs fewer ranks on the hull)
    segs = []
    for (x1, y1), (x2, y2) in zip(low, low[1:]):
        if x2 > x1:
            s = (y2 - y1) / (x2 - x1)
            segs.append((s, y1 - s * x1))
    return segs, max(1.0 / t for t in step_ms.values())


def misses_bound(ranks, steps, step_ms, jobs, time_limit, use_hull):
    fastest = {c: steps[c] * min(t.values()) for c, t in step_ms.items()}
    cand = [(a, c, d) for a, c, d in jobs if a + fastest[c] <= d]
    late_alone = len(jobs) - len(cand)
    cuts = sorted(set([a for a, _, _ in cand] + [d for _, _, d in cand]))
    pos = {t: i for i, t in enumerate(cuts)}
    hulls = {c: hull(step_ms[c]) for c in step_ms}
    rows, cols, vals, lo, hi = [], [], [], [], []
    n_var = len(cand)  # x_j first
    var_lo, var_hi, integ = [0.0] * n_var, [1.0] * n_var, [1] * n_var
    slot_terms = defaultdict(list)  # slot -> y columns
    r = 0

    def row(entries, lb, ub):
        nonlocal r
        for col, v in entries:
            rows.append(r), cols.append(col), vals.append(v)
        lo.append(lb), hi.append(ub)
        r += 1

    for j, (a, c, d) in enumerate(cand):
        segs, rmax = hulls[c]
        t1 = segs[0][0]  # rank-ms per step on the cheapest degree
        zs = []
        for s in range(pos[a], pos[d]):
            ln = cuts[s + 1] - cuts[s]
            if use_hull:  # z steps and y rank-ms, y above every hull segment
                z, y = n_var, n_var + 1
                n_var += 2
                var_lo += [0.0, 0.0]
                var_hi += [rmax * ln, ranks * ln]
                integ += [0, 0]
                for slope, icept in segs[1:]:  # y >= slope z + icept len
                    row([(y, 1.0), (z, -slope)], icept * ln, np.inf)
                row([(y, 1.0), (z, -t1)], 0.0, np.inf)
            else:  # fluid: y rank-ms at the cheapest degree's rate, at most the fastest rate
                z = y = n_var
                n_var += 1
                var_lo.append(0.0)
                var_hi.append(min(rmax * t1, ranks) * ln)
                integ.append(0)
            zs.append(z)
            slot_terms[s].append(y)
        per_step = 1.0 if use_hull else t1
        row([(z, 1.0) for z in zs] + [(j, -float(steps[c]) * per_step)], 0.0, np.inf)
    for s, ys in slot_terms.items():
        row([(y, 1.0) for y in ys], -np.inf, ranks * (cuts[s + 1] - cuts[s]))
    A = coo_matrix((vals, (rows, cols)), shape=(r, n_var)).tocsr()
    cost = np.zeros(n_var)
    cost[: len(cand)] = -1.0
    res = milp(cost, constraints=LinearConstraint(A, lo, hi), integrality=np.array(integ),
               bounds=Bounds(var_lo, var_hi), options={"time_limit": time_limit, "disp": False})
    # the dual bound caps the on-time count even when the search stopped early; with no
    # dual bound at all, no bound is claimed
    dual = getattr(res, "mip_dual_bound", None)
    if dual is None or not np.isfinite(dual):
        return None, False, n_var, r
    on_time_cap = math.floor(-dual + 1e-6)
    given_up = [a for j, (a, _, _) in enumerate(cand) if res.x is not None and res.x[j] < 0.5]
    return late_alone + len(cand) - on_time_cap, res.status == 0, n_var, r, given_up


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("jobs", help="a weft-dit-sim --jobs-out file")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds per trace (default 300)")
    ap.add_argument("--hull", action="store_true",
                    help="charge the rank-time of running faster than one rank (tighter, much larger program)")
    ap.add_argument("--given-up", help="append the arrival times (ms) of the jobs the solution gives up to this file")
    args = ap.parse_args()
    ranks, steps, _, step_ms, traces = read_jobs(args.jobs)
    if not ranks or not traces:
        sys.exit(f"bounds.py: {args.jobs} has no ranks or jobs (write it with weft-dit-sim --jobs-out)")
    total = 0
    for seed in sorted(traces):
        b, optimal, nv, nr, given_up = misses_bound(ranks, steps, step_ms, traces[seed], args.time_limit, args.hull)
        if b is None:
            sys.exit(f"seed {seed}: the solver found no bound within --time-limit {args.time_limit:g} s")
        total += b
        if args.given_up:
            with open(args.given_up, "a") as g:
                g.writelines(f"{a:.6f}\n" for a in given_up)
        print(f"seed {seed}: jobs {len(traces[seed])}, misses >= {b} "
              f"({'optimal' if optimal else 'time limit: dual bound'}; {nv} variables, {nr} rows)", flush=True)
    print(f"misses bound over {len(traces)} traces: {total}")


if __name__ == "__main__":
    main()
