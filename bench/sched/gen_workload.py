#!/usr/bin/env python3
"""Writes a reproducible weft-sim workload: Poisson arrivals, log-uniform prompt lengths
32..2048, outputs 16..256; 20% interactive requests (TTFT 500 ms, TPOT 50 ms, priority 1),
the rest batch-like (TTFT 5 s, TPOT 200 ms). Fixed-seed LCG: the same arguments give the
same file.   usage: gen_workload.py N MEAN_GAP_MS > workload.txt"""
import math
import sys

def main() -> None:
    n, gap = int(sys.argv[1]), float(sys.argv[2])
    state = 12345

    def rnd() -> float:
        nonlocal state
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (state >> 11) / float(1 << 53)

    print("# weft-sim workload: arrival_ms prompt_len output_len ttft_slo_ms tpot_slo_ms [priority]")
    print(f"# bench/sched/gen_workload.py {n} {gap:g}")
    t = 0.0
    for _ in range(n):
        t += -math.log(1 - rnd()) * gap
        p = int(math.exp(math.log(32) + rnd() * (math.log(2048) - math.log(32))))
        o = int(16 + rnd() * 240)
        if rnd() < 0.2:
            print(f"{t:.1f} {p} {o} 500 50 1")
        else:
            print(f"{t:.1f} {p} {o} 5000 200 0")

if __name__ == "__main__":
    main()
