#!/usr/bin/env python3
"""llama.cpp side of bench/engine/run.sh, through llama-cpp-python's low-level API: prefill
tokens/s of one 512-token prompt, aggregate decode tokens/s at the given batch sizes (B
sequences with 64-token prompts, then 8 warm-up and 128 timed steps of B single-token decodes per llama_decode).

llama.cpp runs with flash attention "auto" (its default), F16 KV, n_batch 512, plain CPU weight
buffers (use_extra_bufts off: the AMX repacking path dies with SIGILL in this VM, which does not
grant AMX tile state), a unified KV cache for the batched runs, and the
same thread count as weft. Output: "llama.cpp <metric> <value>" lines.

Usage: llama_bench.py MODEL THREADS [BATCH ...]
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from llama_ref import Ref  # noqa: E402


def main():
    model, threads = sys.argv[1], int(sys.argv[2])
    batches = [int(x) for x in sys.argv[3:]] or [1]
    maxb = max(batches)
    ref = Ref(model, n_ctx=max(1024, (64 + 8 + 128) * maxb + 64), n_batch=512, n_threads=threads,
              flash_attn=None, extra_bufts=False, n_seq_max=maxb)
    prompt = [100 + (i * 7919) % 30000 for i in range(512)]
    best = 1e9
    for _ in range(3):
        ref.clear()
        t0 = time.perf_counter()
        ref.decode([(t, i, 0, i == 511) for i, t in enumerate(prompt)])
        best = min(best, time.perf_counter() - t0)
    print("llama.cpp prefill_512 %.1f" % (512 / best), flush=True)
    for B in batches:
        ref.clear()
        for s in range(B):
            ref.decode([(t, i, s, i == 63) for i, t in enumerate(prompt[s:s + 64])])
        last = [1000 + s for s in range(B)]
        warmup, steps = 8, 128
        t0 = 0.0
        for step in range(warmup + steps):
            if step == warmup:
                t0 = time.perf_counter()
            ref.decode([(last[s], 64 + step, s, True) for s in range(B)])
            for s in range(B):
                last[s] = ref.argmax(s)
        dt = time.perf_counter() - t0
        print("llama.cpp decode_b%d %.1f" % (B, B * steps / dt), flush=True)
    ref.close()


if __name__ == "__main__":
    main()
