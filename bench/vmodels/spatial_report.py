#!/usr/bin/env python3
"""Summary of bench/vmodels/spatial.sh's results (called by it after every round).

    spatial_report.py OUT N ROUND|all CLK_TCK

Per side, every request of the N tasks pooled: completed / sent, mean and p99 end-to-end
latency, mean TTFT (a request's wait in the queue shows there), the fraction of its CPU share
each weftd used while the load ran (mean and largest), and for spatial the fraction of CFS
periods in which a process was throttled at its quota. Then virtual / spatial ratios. With
`all`, one markdown row per round and the rounds' requests pooled.
"""
import csv
import glob
import os
import sys


def pct(xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def load_side(out, n, tag, tck):
    e2e, ttft, sent = [], [], 0
    for t in range(n):
        with open(os.path.join(out, "%s-t%d.csv" % (tag, t))) as f:
            for row in csv.DictReader(f):
                sent += 1
                if row["outcome"] == "ok":
                    e2e.append(float(row["e2e_ms"]))
                    ttft.append(float(row["ttft_ms"]))
    info = {"cpu": [], "throttle": []}
    with open(os.path.join(out, tag + ".info")) as f:
        for line in f:
            k, *v = line.split()
            if k == "wall":
                info["wall"] = float(v[0])
            elif k == "loadavg":
                info["loadavg"] = (float(v[0]), float(v[1]))
            elif k == "cpu":
                info["cpu"].append(int(v[0]) / tck / (float(v[1]) * info["wall"]))
            elif k == "throttle":
                p0, t0, p1, t1 = map(int, v)
                info["throttle"].append((t1 - t0) / max(1, p1 - p0))
    return {"e2e": e2e, "ttft": ttft, "sent": sent, **info}


def line(name, s):
    util = s["cpu"]
    txt = ("%-8s %3d/%-3d done  mean %7.0f ms  p99 %7.0f ms  mean TTFT %7.0f ms  "
           "share used mean %.2f max %.2f" % (name, len(s["e2e"]), s["sent"],
                                              sum(s["e2e"]) / max(1, len(s["e2e"])),
                                              pct(s["e2e"], 0.99),
                                              sum(s["ttft"]) / max(1, len(s["ttft"])),
                                              sum(util) / len(util), max(util)))
    if s["throttle"]:
        txt += "  throttled periods %.2f" % (sum(s["throttle"]) / len(s["throttle"]))
    return txt


def mean(xs):
    return sum(xs) / max(1, len(xs))


def main():
    out, n, which, tck = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    rounds = (sorted({int(os.path.basename(p)[1:].split("-")[0])
                      for p in glob.glob(os.path.join(out, "r*-spatial.info"))})
              if which == "all" else [int(which)])
    pooled = {"virtual": [], "spatial": []}
    rows = []
    for r in rounds:
        v = load_side(out, n, "r%d-virtual" % r, tck)
        s = load_side(out, n, "r%d-spatial" % r, tck)
        pooled["virtual"] += v["e2e"]
        pooled["spatial"] += s["e2e"]
        rm, rp = mean(v["e2e"]) / mean(s["e2e"]), pct(v["e2e"], .99) / pct(s["e2e"], .99)
        if which != "all":
            print("round %d: load average virtual %.1f-%.1f, spatial %.1f-%.1f" %
                  (r, *v["loadavg"], *s["loadavg"]))
            print("  " + line("virtual", v))
            print("  " + line("spatial", s))
            print("  virtual / spatial: mean %.3fx, p99 %.3fx" % (rm, rp), flush=True)
        rows.append("| %d | %.0f-%.0f / %.0f-%.0f | %.0f / %.0f | %.0f / %.0f | %.2f / %.2f | %.2f | "
                    "%.0f / %.0f | **%.2fx** | %.2fx |" %
                    (r, *v["loadavg"], *s["loadavg"], mean(v["e2e"]), pct(v["e2e"], .99),
                     mean(s["e2e"]), pct(s["e2e"], .99), mean(v["cpu"]), mean(s["cpu"]),
                     mean(s["throttle"]), mean(v["ttft"]), mean(s["ttft"]), rm, rp))
    if which == "all":
        print("| round | load avg virtual / spatial | virtual mean / p99 ms | spatial mean / p99 ms "
              "| share used virtual / spatial | spatial throttled | mean TTFT virtual / spatial ms "
              "| mean ratio | p99 ratio |")
        print("|---|---|---|---|---|---:|---|---:|---:|")
        print("\n".join(rows))
        v, s = pooled["virtual"], pooled["spatial"]
        print("all rounds pooled: virtual mean %.0f p99 %.0f ms (%d requests), spatial mean %.0f "
              "p99 %.0f ms (%d): mean %.3fx, p99 %.3fx" %
              (mean(v), pct(v, .99), len(v), mean(s), pct(s, .99), len(s),
               mean(v) / mean(s), pct(v, .99) / pct(s, .99)))


if __name__ == "__main__":
    main()
