#!/usr/bin/env python3
"""Image sizes other than the model's native one, on a real weftd (issue #14): for each size,
class-conditional images through /v1/images/generations one at a time, then

- judge agreement: the numpy judge of the model (scripts/dit_judge.py, trained at the native
  size) on each image averaged back to the native size (each native pixel the mean of the
  pixels it covers), against the class asked for;
- latency: the mean end-to-end time of a one-image request, and its ratio to the native size's
  (measured in the same run);
- the cost model's entry for the size from /admin/stats (cost_by_size: scale, correction and the
  predicted one-image step), against the measured time per step.

Then a mixed load: every size's requests at once from one thread each; all must complete.

    python3 bench/images/sizes.py [--build build] [--dit DIR] [--sizes 8x8,16x8,8x16,16x16]
                                  [--per-class 3] [--steps 20] [--threads 2]
"""
import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from dit_judge import Judge  # noqa: E402
from pngread import read_png  # noqa: E402


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def to_native(png, w, h, nw, nh):
    img = read_png(png)
    assert img.shape[:2] == (h, w), (img.shape, w, h)
    x = img[:, :, 0].astype(np.float32) / 127.5 - 1.0
    return x.reshape(nh, h // nh, nw, w // nw).mean(axis=(1, 3))[None]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--dit", default="/usr/local/share/weft/models/weft-dit-digits")
    ap.add_argument("--sizes", default="8x8,16x8,8x16,16x16")
    ap.add_argument("--per-class", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen([os.path.join(a.build, "bin", "weftd"), "--model", a.dit, "--port", str(port),
                             "--threads", str(a.threads), "--log-level", "warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except Exception:
                time.sleep(0.5)
        dit = os.path.basename(a.dit.rstrip("/"))
        info = get(base + f"/v1/models/{dit}")
        nw, nh = map(int, info["size"].split("x"))
        judge = Judge(a.dit)
        n_classes = info["num_classes"]
        rows, native_lat = [], None
        for size in a.sizes.split(","):
            w, h = map(int, size.split("x"))
            xs, want, lat = [], [], []
            for rep in range(a.per_class):
                for k in range(n_classes):
                    t0 = time.perf_counter()
                    r = post(base + "/v1/images/generations",
                             {"model": dit, "class_label": k, "size": size, "n": 1,
                              "num_inference_steps": a.steps, "seed": 5000 + 100 * rep + k})
                    lat.append((time.perf_counter() - t0) * 1000)
                    xs.append(to_native(base64.b64decode(r["data"][0]["b64_json"]), w, h, nw, nh))
                    want.append(k)
            agree = judge.predict(np.stack(xs)) == np.array(want)
            mean_ms = float(np.mean(lat))
            if native_lat is None:
                native_lat = mean_ms
            cost = {c["size"]: c for c in get(base + "/admin/stats")["images"]["cost_by_size"][dit]}[size]
            rows.append(dict(size=size, images=len(want), agree=int(agree.sum()), agreement=float(agree.mean()),
                             mean_ms=mean_ms, vs_first=mean_ms / native_lat, step_ms_measured=mean_ms / a.steps,
                             step_ms_predicted=cost["step_ms"], scale=cost["scale"],
                             correction=cost["correction"], measured=cost["measured"]))
            print(json.dumps(rows[-1]), flush=True)
        # mixed load: every size at once, one thread per size, n=2 each
        ok = {}

        def run(size):
            r = post(base + "/v1/images/generations", {"model": dit, "class_label": 3, "size": size, "n": 2,
                                                       "num_inference_steps": a.steps, "seed": 77})
            w, h = map(int, size.split("x"))
            ok[size] = all(read_png(base64.b64decode(d["b64_json"])).shape[:2] == (h, w) for d in r["data"])

        t0 = time.perf_counter()
        ts = [threading.Thread(target=run, args=(sz,)) for sz in a.sizes.split(",")]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        st = get(base + "/admin/stats")["images"]
        print(json.dumps({"mixed_load": ok, "all_ok": all(ok.values()) and len(ok) == len(ts),
                          "wall_ms": (time.perf_counter() - t0) * 1000, "failed": st["failed"]}), flush=True)
        print("| size | images | judge agreement | mean latency (ms) | vs first size | step ms measured "
              "| step ms predicted | scale | correction |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['size']} | {r['images']} | {r['agreement']:.3f} ({r['agree']}/{r['images']}) | "
                  f"{r['mean_ms']:.1f} | {r['vs_first']:.2f}x | {r['step_ms_measured']:.3f} | "
                  f"{r['step_ms_predicted']:.3f} | {r['scale']:.2f} | {r['correction']:.3f} |")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
