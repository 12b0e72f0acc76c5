#!/usr/bin/env python3
"""Load client of bench/pd/changing.sh: while the link's rate changes every few seconds (the
script logs each change to a file, with time.monotonic() of the moment it took effect), the same
long prompt is sent again and again, one request at a time, cycling through the KV modes (the
"kv_codec" extension: off, a fixed profile, auto = the controller). Per job: the link rate in
effect when its KV crossed, the codec the prefill worker used and why, the KV transfer time, TTFT
and JCT (as client.py measures them).

    changing.py --base http://10.77.0.1:8080 --rates rates.log --modes off,k4v4-nr,auto --prompt 1024 --duration 300 --out c.json
    changing.py --report c.json          # markdown for BENCHMARKS.md
"""
import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import admin, model_id, one  # noqa: E402


def rate_at(path, t):
    """The rate in effect at monotonic time t (the last change at or before it)."""
    rate = None
    with open(path) as f:
        for line in f:
            ts, r = line.split()
            if float(ts) <= t:
                rate = r
    return rate


def run(a):
    model = model_id(a.base)
    rng = random.Random(11)
    ids = [rng.randrange(1000, 40000) for _ in range(a.prompt)]
    modes = a.modes.split(",")
    t_end = time.monotonic() + a.duration
    rows = []
    i = 0
    while time.monotonic() < t_end:
        mode = modes[i % len(modes)]
        i += 1
        before = admin(a.base)
        t0 = time.monotonic()
        try:
            ttft, jct, n = one(a.base, model, ids, mode, a.max_tokens)
        except Exception as e:  # noqa: BLE001 - reported, the run goes on
            rows.append({"mode": mode, "t": t0, "error": str(e)})
            print(json.dumps(rows[-1]), flush=True)
            continue
        after = admin(a.base)
        xms = after["transfer_ms"] - before["transfer_ms"]
        # The KV crossed just before the first token: when its transfer started.
        t_xfer = t0 + ttft - xms / 1e3
        rows.append({"mode": mode, "t": t0, "rate": rate_at(a.rates, t_xfer),
                     "rate_end": rate_at(a.rates, t0 + ttft), "ttft_s": ttft, "jct_s": jct,
                     "tokens": n, "transfer_ms": xms,
                     "wire_bytes": after["transfer_bytes"] - before["transfer_bytes"],
                     "codec": after["codec_last"]})
        print(json.dumps(rows[-1]), flush=True)
    t_first = min(r["t"] for r in rows)
    for r in rows:
        r["t"] -= t_first
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)


def report(path):
    with open(path) as f:
        rows = json.load(f)
    ok = [r for r in rows if "error" not in r]
    print("| t s | link (at transfer) | mode | codec used | wire MB | KV transfer s | TTFT s | JCT s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['t']:.0f} | | {r['mode']} | error: {r['error'][:60]} | | | | |")
            continue
        link = r["rate"] if r["rate"] == r["rate_end"] else f"{r['rate']} -> {r['rate_end']}"
        print(f"| {r['t']:.0f} | {link} | {r['mode']} | {r['codec']} | {r['wire_bytes'] / 1e6:.1f} | "
              f"{r['transfer_ms'] / 1e3:.3f} | {r['ttft_s']:.2f} | {r['jct_s']:.2f} |")
    # Per rate (jobs whose transfer stayed within one rate), the mean transfer time per mode.
    modes = list(dict.fromkeys(r["mode"] for r in ok))
    rates = list(dict.fromkeys(r["rate"] for r in ok))
    print("\n| link | " + " | ".join(f"{m}: KV transfer s (jobs)" for m in modes) + " |")
    print("|---|" + "---|" * len(modes))
    for rate in rates:
        cells = []
        for m in modes:
            x = [r["transfer_ms"] / 1e3 for r in ok if r["mode"] == m and r["rate"] == rate == r["rate_end"]]
            cells.append(f"{sum(x) / len(x):.3f} ({len(x)})" if x else "-")
        print(f"| {rate} | " + " | ".join(cells) + " |")
    print("\n| mode | jobs | total KV transfer s | mean KV transfer s | mean TTFT s | mean JCT s |")
    print("|---|---|---|---|---|---|")
    for m in modes:
        x = [r for r in ok if r["mode"] == m]
        tx = sum(r["transfer_ms"] for r in x) / 1e3
        print(f"| {m} | {len(x)} | {tx:.2f} | {tx / len(x):.3f} | "
              f"{sum(r['ttft_s'] for r in x) / len(x):.2f} | {sum(r['jct_s'] for r in x) / len(x):.2f} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    ap.add_argument("--rates")
    ap.add_argument("--modes", default="off,k4v4-nr,auto")
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--duration", type=float, default=300)
    ap.add_argument("--out")
    ap.add_argument("--report")
    a = ap.parse_args()
    if a.report:
        report(a.report)
    else:
        run(a)
