#!/usr/bin/env python3
"""Sliding-window KV release on Gemma 3 (issue #19): KV memory of one long generation and how
many long sequences run at once in one KV budget, with the local layers' blocks released behind
the window (--kv-window-release=true, the default) and without (false). Both daemons run in the
same invocation, one after the other, with the same flags otherwise.

For each mode: start weftd, then
  1. one long request (--prompt-tokens, greedy, --max-tokens): while it decodes, /admin/stats
     gives the blocks it holds (global and local); KV bytes = blocks x layers of that kind x
     one layer's block (16 tokens x n_kv_heads x head_dim x 2 (K,V) x 2 bytes, F16);
  2. --n such requests at once (distinct prompts: no prefix sharing): the most running at once
     (sampled every 50 ms) and the wall time.

With --workers N the daemon serves through N worker processes, each with its own KV store of
--kv-memory-mb: pool blocks and "what fits" are then one worker's (its group in /admin/stats),
and the long sequence runs on one of them.

Usage: python3 bench/kv/kv_window.py [--bin build/bin] [--kv-memory-mb 96] [--max-running 8]
       [--prompt-tokens 2000] [--max-tokens 16] [--n 0] [--workers 0]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

GEMMA = os.environ.get("WEFT_TEST_GEMMA_MODEL", "/usr/local/share/weft/models/gemma-3-270m-q4_k_m.gguf")
# Gemma 3 270M: 18 layers (every 6th global: 3 global, 15 local), 1 KV head of 256, window 512
N_LAYERS, N_GLOBAL, N_KV_HEADS, HEAD_DIM, BS = 18, 3, 1, 256, 16
LAYER_BLOCK = BS * N_KV_HEADS * HEAD_DIM * 2 * 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.load(r)


def complete(base, prompt, max_tokens, on_first_token=None):
    """Streams the completion; calls on_first_token once the first token arrived (the prompt's
    KV is then complete and the sequence decodes). Returns the token count of the usage."""
    body = json.dumps({"model": os.path.basename(GEMMA)[:-5], "prompt": prompt,
                       "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    usage = None
    with urllib.request.urlopen(req, timeout=3600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("choices") and on_first_token:
                on_first_token()
                on_first_token = None
            if ev.get("usage"):
                usage = ev["usage"]
    return usage


def prompt_of(i, n_tokens):
    # ~11 tokens per sentence; a distinct head so that no two prompts share a prefix block
    return f"Ledger {i}: " + " ".join(f"Entry {k} of ledger {i} holds {k * 7 % 23} coins."
                                      for k in range(n_tokens // 13))


class Sampler(threading.Thread):
    def __init__(self, base):
        super().__init__(daemon=True)
        self.base, self.stop, self.peak = base, False, {}

    def run(self):
        while not self.stop:
            try:
                st = get(self.base, "/admin/stats")["scheduler"]
            except OSError:
                break
            for k in ("running", "kv_blocks_used", "kv_swa_blocks_used"):
                self.peak[k] = max(self.peak.get(k, 0), st[k])
            time.sleep(0.05)


def pool_stats(args, st):
    """The pools one sequence can use: the daemon's, or with workers the first worker's group."""
    if not args.workers:
        return st
    g = [x for x in st["groups"] if x["live"]]
    assert len(g) == args.workers, g
    return g[0]


def run_mode(args, release):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="weftd-kvwin-", suffix=".log", delete=False)
    proc = subprocess.Popen([os.path.join(args.bin, "weftd"), "--model", GEMMA, "--port", str(port),
                             "--threads", str(args.threads), "--kv-memory-mb", str(args.kv_memory_mb),
                             "--cost-model", "0.5,0.05,2,0.0005", "--fixed-cost-model",
                             "--default-ttft-ms", "3600000", "--default-tpot-ms", "3600000",
                             "--max-running", str(args.max_running), f"--kv-window-release={'true' if release else 'false'}",
                             *(["--workers", str(args.workers)] if args.workers else [])],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                if get(base, "/health"):
                    break
            except OSError:
                time.sleep(0.2)
        st = pool_stats(args, get(base, "/admin/stats")["scheduler"])
        out = {"mode": "release" if release else "keep", "blocks_total": st["kv_blocks_total"],
               "swa_blocks_total": st["kv_swa_blocks_total"]}
        # 1. one long generation
        s = Sampler(base)
        s.start()
        held = {}
        u = complete(base, prompt_of(0, args.prompt_tokens), args.max_tokens,
                     lambda: held.update(get(base, "/admin/stats")["scheduler"]))
        s.stop = True
        s.join()
        out["tokens"] = u["prompt_tokens"] + u["completion_tokens"]
        g, l = held["kv_blocks_used"], held["kv_swa_blocks_used"]
        n_local = N_LAYERS - N_GLOBAL
        out["single_blocks"] = (g, l)
        out["single_peak_local"] = s.peak["kv_swa_blocks_used"]
        out["single_kv_mib"] = (g * (N_GLOBAL if release else N_LAYERS) + l * n_local) * LAYER_BLOCK / 2**20
        # what fits: sequences of this length the pools hold at once (global blocks for the
        # context, local ones for the window), from the pools and the blocks measured above
        fit = st["kv_blocks_total"] / g
        if release:
            fit = min(fit, st["kv_swa_blocks_total"] / max(l, 1))
        out["fit"] = min(int(fit), args.max_running)
        out["fit_unbounded"] = fit
        if args.n == 0:
            return out
        # 2. n at once
        s = Sampler(base)
        s.start()
        t = time.time()
        ths = [threading.Thread(target=complete, args=(base, prompt_of(i + 1, args.prompt_tokens), args.max_tokens))
               for i in range(args.n)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        out["batch_s"] = time.time() - t
        s.stop = True
        s.join()
        out["peak_running"] = s.peak["running"]
        # sequences whose whole context was resident at once: the global blocks held at the
        # peak over one sequence's
        out["resident"] = s.peak["kv_blocks_used"] / max(g, 1)
        out["preempted"] = get(base, "/admin/stats")["scheduler"]["preempted_total"]
        return out
    finally:
        proc.terminate()
        proc.wait(60)
        os.unlink(log.name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--kv-memory-mb", type=int, default=96)
    ap.add_argument("--n", type=int, default=0, help="also run N at once (0: skip)")
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-running", type=int, default=8)
    ap.add_argument("--workers", type=int, default=0, help="serve through N worker processes")
    args = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}, "
          f"Gemma 3 270M, --kv-memory-mb {args.kv_memory_mb}, {args.n} requests of ~{args.prompt_tokens} "
          f"prompt + {args.max_tokens} tokens" + (f", --workers {args.workers} (pools per worker)" if args.workers else ""))
    rows = [run_mode(args, False), run_mode(args, True)]
    print("| local layers' KV | pool blocks (global / local) | one long sequence decoding: tokens, "
          "blocks held (global / local) | its KV MiB | local blocks at its peak (prefill chunk) | "
          "such sequences the pools hold at once (computed; capped at --max-running %d) |"
          % args.max_running)
    print("|---|---|---|---|---|---|")
    for o in rows:
        print(f"| {o['mode']} | {o['blocks_total']} / {o['swa_blocks_total']} | {o['tokens']}, "
              f"{o['single_blocks'][0]} / {o['single_blocks'][1]} | {o['single_kv_mib']:.1f} | "
              f"{o['single_peak_local']} | {o['fit_unbounded']:.1f} ({o['fit']}) |")
        if "resident" in o:
            print(f"#   {o['mode']}: {args.n} at once: {o['resident']:.1f} resident at the peak, "
                  f"{o['peak_running']} running, {o['preempted']} preemptions, {o['batch_s']:.1f} s")
    print(f"# ratio: one sequence's KV {rows[0]['single_kv_mib'] / rows[1]['single_kv_mib']:.2f}x smaller, "
          f"{rows[1]['fit'] / max(rows[0]['fit'], 1e-9):.2f}x the sequences at once")


if __name__ == "__main__":
    sys.exit(main())
