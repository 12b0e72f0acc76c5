#!/usr/bin/env python3
"""Fairness of one noisy.sh phase: the cost each tenant was served and Jain's index.

    bench/vmodels/noisy_jain.py OUT TAG B C

Reads OUT/TAG-t0..t3.csv (weft-bench's per-request lines). A request's cost is weighed as the
fair policy charges it: prompt tokens x B + generated tokens x C (the cost model's per-token
coefficients). Demand is the cost of every request a tenant sent, served the cost of those that
completed. Equal weights, so the fair allocation of what was served is max-min (water-filling):
a tenant asking for less than an equal split gets all it asked for, the rest is split among the
others. Prints each tenant's demand, served cost and served / fair allocation, and Jain's index
of that ratio (1: everyone got exactly its fair allocation), and Jain's index of the raw
served costs (low when the light tenants asked for little: not unfairness by itself).
"""
import csv
import os
import sys


def jain(xs):
    s, s2 = sum(xs), sum(x * x for x in xs)
    return s * s / (len(xs) * s2) if s2 > 0 else 1.0


def water_fill(demand, total):
    alloc = [0.0] * len(demand)
    left, todo = total, sorted(range(len(demand)), key=lambda i: demand[i])
    while todo:
        share = left / len(todo)
        i = todo[0]
        if demand[i] <= share:
            alloc[i] = demand[i]
            left -= demand[i]
            todo.pop(0)
        else:
            for j in todo:
                alloc[j] = share
            break
    return alloc


def main():
    out, tag, b, c = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    demand, served = [], []
    for t in range(4):
        path = os.path.join(out, "%s-t%d.csv" % (tag, t))
        rows = list(csv.DictReader(open(path))) if os.path.exists(path) else []
        cost = lambda r: b * float(r["requested_input"]) + c * float(r["requested_output"])
        demand.append(sum(cost(r) for r in rows))
        served.append(sum(cost(r) for r in rows if r["outcome"] == "ok"))
    fair = water_fill(demand, sum(served))
    ratio = [s / f if f > 0 else 1.0 for s, f in zip(served, fair)]
    for t in range(4):
        print("  %s t%d: demand %.0f served %.0f fair allocation %.0f (served / fair %.2f)"
              % (tag, t, demand[t], served[t], fair[t], ratio[t]))
    print("  %s: Jain's index of served / fair allocation %.4f; of raw served cost %.4f"
          % (tag, jain(ratio), jain(served)))


if __name__ == "__main__":
    main()
