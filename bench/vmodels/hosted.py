#!/usr/bin/env python3
"""How many tasks one memory budget hosts: virtual models on one weftd against one weftd per
task (each loading the backbone).

Measures private memory (/proc/PID/smaps_rollup Private_Clean + Private_Dirty) of
  * one weftd with 0, then K virtual models (the SmolLM2 test adapter, rank 8 on 4 of 30
    layers, and a full rank-8 adapter on all 30 layers written here with the gguf package),
  * P separate weftd processes (one per task), all alive at once,
all with the same --kv-memory-mb, plus the backbone's weights (the GGUF size W, mmapped: shared
page cache on a CPU). Per task, a process costs its private memory + W when each loads its own
copy of the backbone (a device without a shared page cache), or its private memory alone when
they share the page cache; a virtual model costs the private memory it adds. From those: the
tasks a budget holds. Every process is started for real and serves one request first, so
its memory is touched as in service.

Usage: python3 bench/vmodels/hosted.py [--bin build/bin] [--budget-mb 2048] [--k 32] [--p 4]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..")
MODEL = os.environ.get("WEFT_MODEL", "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def private_kib(pid):
    """Private_Clean + Private_Dirty: the memory only this process holds. (PSS would split the
    mmapped GGUF with every other process mapping it, other users' included: noisy.)"""
    n = 0
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Private_Clean:") or line.startswith("Private_Dirty:"):
                n += int(line.split()[1])
    return n


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, json.loads(r.read())


def start(binary, kv_mb, extra=()):
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="weftd-hosted-", suffix=".log", delete=False)
    p = subprocess.Popen([os.path.join(binary, "weftd"), "--model", MODEL, "--port", str(port),
                          "--threads", "1", "--kv-memory-mb", str(kv_mb), "--cost-model",
                          "0.5,0.05,2,0.0005", "--fixed-cost-model", *extra],
                         stdout=log, stderr=subprocess.STDOUT)
    base = "http://127.0.0.1:%d" % port
    for _ in range(600):
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return p, base
        except Exception:
            time.sleep(0.2)
    raise RuntimeError("weftd did not start: " + open(log.name).read()[-2000:])


def serve_one(base, model):
    call(base, "POST", "/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 4})


def full_adapter(path):
    """A rank-8 adapter on every projection of all 30 layers (what a real fine-tune holds)."""
    import gguf
    r = gguf.GGUFReader(MODEL)
    shapes = {t.name: (int(t.shape[0]), int(t.shape[1])) for t in r.tensors if len(t.shape) == 2}
    w = gguf.GGUFWriter(path, "llama")
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 16.0)
    rng = np.random.default_rng(1)
    for name, (n_in, n_out) in sorted(shapes.items()):
        if not name.startswith("blk.") or name.split(".")[2] not in (
                "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            continue
        w.add_tensor(name + ".lora_a", (rng.standard_normal((8, n_in)) * 0.01).astype(np.float32))
        w.add_tensor(name + ".lora_b", (rng.standard_normal((n_out, 8)) * 0.01).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(SRC, "build", "bin"))
    ap.add_argument("--budget-mb", type=float, default=2048)
    ap.add_argument("--kv-mb", type=int, default=64)
    ap.add_argument("--k", type=int, default=32, help="virtual models on the one weftd")
    ap.add_argument("--p", type=int, default=4, help="weftd processes, one per task")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="weft-hosted-")
    adapters = {"test adapter (rank 8, 4 of 30 layers)":
                os.path.join(SRC, "tests", "engine", "data", "lora", "smollm2.gguf")}
    full = os.path.join(tmp, "full-r8.gguf")
    full_adapter(full)
    adapters["full adapter (rank 8, all 30 layers)"] = full
    out = {}
    for label, path in adapters.items():
        p, base = start(args.bin, args.kv_mb)
        try:
            serve_one(base, None)
            base_kib = private_kib(p.pid)
            for i in range(args.k):
                code, _ = call(base, "POST", "/admin/models", {"id": "t%d" % i, "adapter": path})
                assert code == 201
            for i in range(args.k):
                serve_one(base, "t%d" % i)
            with_k = private_kib(p.pid)
        finally:
            p.terminate()
            p.wait(60)
        per_vm = (with_k - base_kib) / args.k
        out[label] = (base_kib, with_k, per_vm)
    procs = []
    try:
        for _ in range(args.p):
            procs.append(start(args.bin, args.kv_mb))
        for _, base in procs:
            serve_one(base, None)
        total = sum(private_kib(p.pid) for p, _ in procs)
    finally:
        for p, _ in procs:
            p.terminate()
            p.wait(60)
    private = total / args.p
    w = os.path.getsize(MODEL) / 1024
    budget = args.budget_mb * 1024
    n_copy = int(budget // (private + w))
    n_shared = int((budget - w) // private)
    print("backbone weights W = %.1f MiB; weftd per task: %.1f MiB private (mean of %d alive)"
          % (w / 1024, private / 1024, args.p))
    print("budget %.0f MiB as one process per task: %d tasks (each its own copy of W), %d "
          "(W shared in the page cache)" % (args.budget_mb, n_copy, n_shared))
    for label, (base_kib, with_k, per_vm) in out.items():
        n_vm = int((budget - w - base_kib) // max(per_vm, 1))
        print("%s: one weftd %.1f MiB private, with %d virtual models %.1f MiB: %.2f MiB per "
              "virtual model; the budget hosts %d tasks: %.1fx / %.1fx the processes"
              % (label, base_kib / 1024, args.k, with_k / 1024, per_vm / 1024, n_vm,
                 n_vm / max(n_copy, 1), n_vm / max(n_shared, 1)))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
