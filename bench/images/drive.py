#!/usr/bin/env python3
"""Open-loop Poisson load on /v1/images/generations: for each rate (requests/s) it sends
requests for --duration seconds at exponential inter-arrival times (fixed seed), each on its own
thread, and prints one line per rate: sent, ok, errors, throughput (images/s over the span from
the first arrival to the last completion), and latency p50/p90/p99 (s).

    bench/images/drive.py --url http://127.0.0.1:8080 --model weft-dit-fmnist \\
        --rates 1,2,4,8 --duration 20 --steps 20 [--n 1] [--label on]
"""
import argparse
import http.client
import json
import random
import threading
import time
import urllib.parse


def one(host, port, body, out):
    t0 = time.monotonic()
    try:
        c = http.client.HTTPConnection(host, port, timeout=600)
        c.request("POST", "/v1/images/generations", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        ok = r.status == 200 and b"b64_json" in data
    except OSError:
        ok = False
    out.append((ok, t0, time.monotonic()))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", required=True)
    ap.add_argument("--rates", default="1,2,4")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--n", type=int, default=1)
    ap.add_argument("--label", default="")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    for rate in [float(r) for r in a.rates.split(",")]:
        rng = random.Random(a.seed)
        out, threads = [], []
        start = time.monotonic()
        t, i = 0.0, 0
        while True:
            t += rng.expovariate(rate)
            if t > a.duration:
                break
            delay = start + t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            body = json.dumps({"model": a.model, "class_label": i % 10, "seed": i, "n": a.n,
                               "num_inference_steps": a.steps})
            th = threading.Thread(target=one, args=(u.hostname, u.port, body, out))
            th.start()
            threads.append(th)
            i += 1
        for th in threads:
            th.join()
        good = [(t0, t1) for ok, t0, t1 in out if ok]
        lat = [t1 - t0 for t0, t1 in good]
        span = max(t1 for _, t1 in good) - start if good else float("nan")
        print(json.dumps({"label": a.label, "rate": rate, "sent": len(out), "ok": len(good),
                          "errors": len(out) - len(good),
                          "throughput_img_s": round(len(good) * a.n / span, 3),
                          "p50_s": round(pct(lat, 50), 3), "p90_s": round(pct(lat, 90), 3),
                          "p99_s": round(pct(lat, 99), 3)}), flush=True)


if __name__ == "__main__":
    main()
