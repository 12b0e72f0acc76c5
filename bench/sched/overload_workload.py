#!/usr/bin/env python3
"""Writes a weft-sim workload: Poisson arrivals (fixed seed), 128-token prompts, 64 output
tokens, TTFT SLO 1000 or 2000 ms, TPOT SLO 200 ms.

    python3 bench/sched/overload_workload.py MEAN_GAP_MS [N] > w.txt
"""
import random
import sys

gap = float(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
rng = random.Random(1)
t = 0.0
for _ in range(n):
    t += rng.expovariate(1.0 / gap)
    print(f"{t:.1f} 128 64 {rng.choice([1000, 2000])} 200")
