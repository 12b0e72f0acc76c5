#!/usr/bin/env python3
"""Load client of bench/pd/run.sh: long prompts through a prefill/decode weftd, one request at
a time so that each job's time is its own. For every KV mode (the "kv_codec" extension: off,
a fixed profile, or auto = the adaptive controller) and prompt length it records the time to
first token (TTFT, streamed), the job completion time (JCT) and, from /admin/stats deltas, the
prefill worker's KV transfer: bytes on the wire, time, and the codec it used.

    client.py --base http://10.77.0.1:8080 --rate 1gbit --modes off,k4v4,auto --prompts 2048,8000 --out r.json
    client.py --report r1.json r2.json ...      # markdown tables for BENCHMARKS.md
"""
import argparse
import json
import random
import time
import urllib.request


def admin(base):
    with urllib.request.urlopen(base + "/admin/stats", timeout=30) as r:
        ws = json.loads(r.read())["scheduler"]["workers"]
    return [w for w in ws if w["role"] == "prefill"][0]


def model_id(base):
    with urllib.request.urlopen(base + "/v1/models", timeout=30) as r:
        return json.loads(r.read())["data"][0]["id"]


def one(base, model, ids, mode, max_tokens):
    body = {"model": model, "prompt": ids, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "kv_codec": mode}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft = None
    n = 0
    with urllib.request.urlopen(req, timeout=1800) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(ev["error"]["message"])
            if ev.get("choices") and ev["choices"][0].get("text") is not None:
                n += 1
                if ttft is None:
                    ttft = time.monotonic() - t0
    return ttft, time.monotonic() - t0, n


def run(a):
    model = model_id(a.base)
    rng = random.Random(7)
    results = []
    for L in [int(x) for x in a.prompts.split(",")]:
        ids = [rng.randrange(1000, 40000) for _ in range(L)]
        for mode in a.modes.split(","):
            for rep in range(a.reps):
                # a first token of its own per request: the prefill worker's prefix cache would
                # otherwise hold every repetition's prompt, and TTFT and JCT would time a hit
                ids[0] = 40000 + len(results)
                before = admin(a.base)
                try:
                    ttft, jct, n = one(a.base, model, ids, mode, a.max_tokens)
                except Exception as e:  # noqa: BLE001 - reported in the table, the run goes on
                    print(json.dumps({"rate": a.rate, "prompt": L, "mode": mode, "error": str(e)}), flush=True)
                    results.append({"rate": a.rate, "prompt": L, "mode": mode, "rep": rep, "error": str(e)})
                    continue
                after = admin(a.base)
                xb = after["transfer_bytes"] - before["transfer_bytes"]
                xms = after["transfer_ms"] - before["transfer_ms"]
                r = {"rate": a.rate, "prompt": L, "mode": mode, "rep": rep, "ttft_s": ttft, "jct_s": jct,
                     "tokens": n, "wire_bytes": xb, "transfer_ms": xms, "codec": after["codec_last"],
                     "raw_bytes": L * 30 * 2 * 3 * 64 * 2}
                results.append(r)
                print(json.dumps(r), flush=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)


def report(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rows += json.load(f)
    for rate in dict.fromkeys(r["rate"] for r in rows):
        rr = [r for r in rows if r["rate"] == rate]
        raw = [r for r in rr if r["mode"] == "off" and r.get("transfer_ms", 0) > 0]
        gbps = (sum(r["wire_bytes"] for r in raw) * 8 / 1e9) / (sum(r["transfer_ms"] for r in raw) / 1e3) if raw else 0
        # The transfer time is what the transfer took beyond the prefill: with the layer-by-layer
        # overlap (the default) most of it is hidden, and bytes / time is no link rate.
        units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
        nominal = next((float(rate[:-len(u)]) * v / 1e9 for u, v in units.items() if rate.endswith(u)), 0)
        if nominal and gbps > 1.05 * nominal:
            note = "the transfers overlapped the prefill: no link rate from their time"
        else:
            note = f"UCX achieved {gbps:.3f} Gbps on raw KV puts"
        print(f"\n### link {rate} ({note})\n")
        print("| prompt | mode | codec used | wire MB | KV transfer s | TTFT s | JCT s | transfer vs off |")
        print("|---|---|---|---|---|---|---|---|")
        for L in dict.fromkeys(r["prompt"] for r in rr):
            off = [r for r in rr if r["prompt"] == L and r["mode"] == "off" and "error" not in r]
            off_ms = sum(r["transfer_ms"] for r in off) / len(off) if off else 0
            for mode in dict.fromkeys(r["mode"] for r in rr):
                m = [r for r in rr if r["prompt"] == L and r["mode"] == mode and "error" not in r]
                for e in [r for r in rr if r["prompt"] == L and r["mode"] == mode and "error" in r]:
                    print(f"| {L} | {mode} | error: {e['error'][:60]} | | | | | |")
                if not m:
                    continue
                avg = lambda k: sum(r[k] for r in m) / len(m)
                ratio = off_ms / avg("transfer_ms") if avg("transfer_ms") > 0 else 0
                print(f"| {L} | {mode} | {m[-1]['codec']} | {avg('wire_bytes') / 1e6:.1f} | "
                      f"{avg('transfer_ms') / 1e3:.3f} | {avg('ttft_s'):.2f} | {avg('jct_s'):.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    ap.add_argument("--rate", default="")
    ap.add_argument("--modes", default="off,k8v8,k4v4,auto")
    ap.add_argument("--prompts", default="2048,8000")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--report", nargs="*")
    a = ap.parse_args()
    if a.report:
        report(a.report)
    else:
        run(a)
