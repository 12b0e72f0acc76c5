#!/usr/bin/env python3
"""Mixed text + image load on one weftd: chat streams (closed loop, --chat-clients at a time)
and Poisson image requests (--image-rate per second), each alone and then together, for
--duration seconds per phase. Prints one JSON line per phase: chat tokens/s and inter-token
latency p50/p99 (ms), image throughput (images/s) and latency p50/p99 (s). Shows whether one
kind starves the other when both share the cores.

    bench/images/mixed.py --url http://127.0.0.1:8080 --llm SmolLM2-135M-Instruct.Q4_1 \\
        --dit weft-dit-fmnist --duration 20 --chat-clients 2 --image-rate 2
"""
import argparse
import http.client
import json
import random
import threading
import time
import urllib.parse


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else None


def chat_client(host, port, model, until, itl, counts, slo=None, slo_log=None):
    while time.monotonic() < until:
        c = http.client.HTTPConnection(host, port, timeout=600)
        req = {"model": model, "stream": True, "max_tokens": 64, "temperature": 0, "ignore_eos": True,
               "messages": [{"role": "user", "content": "Write a long story about a cat."}]}
        if slo:
            req["slo"] = {"ttft_ms": slo[0], "tpot_ms": slo[1]}
        t0 = time.monotonic()
        c.request("POST", "/v1/chat/completions", body=json.dumps(req), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:  # a refusal (429) counts as a missed SLO
            r.read()
            c.close()
            if slo_log is not None:
                slo_log.append(False)
            time.sleep(0.05)
            continue
        last = first = None
        n = 0
        for line in r:
            if not line.startswith(b"data: {"):
                continue
            now = time.monotonic()
            ev = json.loads(line[6:])
            if ev.get("choices") and ev["choices"][0]["delta"].get("content"):
                if last is not None:
                    itl.append((now - last) * 1000)
                else:
                    first = now
                last = now
                n += 1
                counts[0] += 1
        c.close()
        if slo_log is not None and slo:
            # Met: first token within TTFT and the mean time per later token within TPOT.
            ok = first is not None and (first - t0) * 1000 <= slo[0] and \
                (n < 2 or (last - first) * 1000 / (n - 1) <= slo[1])
            slo_log.append(ok)


def image_load(host, port, model, rate, duration, lat, counts, seed=1):
    rng = random.Random(seed)
    start, t, i, threads = time.monotonic(), 0.0, 0, []

    def one(k):
        t0 = time.monotonic()
        c = http.client.HTTPConnection(host, port, timeout=600)
        c.request("POST", "/v1/images/generations", headers={"Content-Type": "application/json"},
                  body=json.dumps({"model": model, "class_label": k % 10, "seed": k, "num_inference_steps": 20}))
        r = c.getresponse()
        ok = r.status == 200 and b"b64_json" in r.read()
        c.close()
        if ok:
            lat.append(time.monotonic() - t0)
            counts[0] += 1

    while True:
        t += rng.expovariate(rate)
        if t > duration:
            break
        d = start + t - time.monotonic()
        if d > 0:
            time.sleep(d)
        th = threading.Thread(target=one, args=(i,))
        th.start()
        threads.append(th)
        i += 1
    for th in threads:
        th.join()


def phase(a, u, chat, images):
    itl, lat, tok, img, slo_log = [], [], [0], [0], []
    until = time.monotonic() + a.duration
    threads = []
    if chat:
        threads += [threading.Thread(target=chat_client, args=(u.hostname, u.port, a.llm, until, itl, tok, a.chat_slo, slo_log))
                    for _ in range(a.chat_clients)]
    if images:
        threads.append(threading.Thread(target=image_load,
                                        args=(u.hostname, u.port, a.dit, a.image_rate, a.duration, lat, img)))
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    span = time.monotonic() - t0
    r = {"phase": "+".join(k for k, on in (("chat", chat), ("images", images)) if on)}
    if chat:
        r.update(chat_tokens_s=round(tok[0] / span, 2), itl_p50_ms=round(pct(itl, 50), 1),
                 itl_p99_ms=round(pct(itl, 99), 1))
        if a.chat_slo:
            r.update(chat_requests=len(slo_log), chat_slo_met=sum(slo_log),
                     chat_slo_attainment=round(sum(slo_log) / max(1, len(slo_log)), 3))
    if images:
        r.update(images_s=round(img[0] / span, 3), image_p50_s=round(pct(lat, 50), 3),
                 image_p99_s=round(pct(lat, 99), 3), images_done=img[0])
    print(json.dumps(r), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--llm", required=True)
    ap.add_argument("--dit", required=True)
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--chat-clients", type=int, default=2)
    ap.add_argument("--image-rate", type=float, default=2)
    ap.add_argument("--phases", default="chat,images,chat+images",
                    help="comma list of chat, images, chat+images (bench/images/order.sh runs "
                         "chat alone beside weft-bench's image workload)")
    ap.add_argument("--chat-slo", default=None, metavar="TTFT_MS,TPOT_MS",
                    help="send each chat request weft's slo extension with these targets and report "
                         "the fraction that met both (TTFT, and mean time per later token); a refusal "
                         "counts as a miss")
    a = ap.parse_args()
    if a.chat_slo:
        a.chat_slo = tuple(float(x) for x in a.chat_slo.split(","))
        if len(a.chat_slo) != 2:
            ap.error("--chat-slo: TTFT_MS,TPOT_MS")
    u = urllib.parse.urlparse(a.url)
    kinds = {"chat": (True, False), "images": (False, True), "chat+images": (True, True)}
    for p in a.phases.split(","):
        if p not in kinds:
            ap.error(f"--phases: unknown phase {p!r} (chat, images, chat+images)")
        phase(a, u, *kinds[p])


if __name__ == "__main__":
    main()
