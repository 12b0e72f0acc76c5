#!/usr/bin/python3
"""PyTorch/diffusers yardstick for weft-dit-bench: median ms of one DiTTransformer2DModel forward
(one sampler step) on the CPU, same shapes and thread count.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/dit/torch_dit_bench.py --model s2 --threads 2
Prints one line of key=value pairs. Needs Debian's torch and diffusers 0.31 (/usr/bin/python3).
"""
import argparse
import statistics
import time

import torch
from diffusers import DiTTransformer2DModel

WIDTHS = {"s2": (384, 6, 12), "b2": (768, 12, 12), "xl2": (1152, 16, 28)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="s2", choices=sorted(WIDTHS))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    hidden, heads, depth = WIDTHS[a.model]
    m = DiTTransformer2DModel(num_attention_heads=heads, attention_head_dim=hidden // heads,
                              in_channels=4, out_channels=8, num_layers=depth, sample_size=a.size,
                              patch_size=2, num_embeds_ada_norm=1000).eval()
    x = torch.randn(a.batch, 4, a.size, a.size)
    t = torch.tensor([999.0 - 37 * b for b in range(a.batch)])
    y = torch.tensor([1000 if b % 2 else 207 + b for b in range(a.batch)])
    times, cpu = [], 0.0
    with torch.inference_mode():
        for it in range(a.iters + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            m(x, timestep=t, class_labels=y)
            if it:
                times.append(time.perf_counter() - t0)
                cpu += time.process_time() - c0
    print("model=%s batch=%d tokens=%d threads=%d torch=%s step_ms_median=%.2f step_ms_min=%.2f cpu_ms_per_step=%.2f"
          % (a.model, a.batch, (a.size // 2) ** 2, a.threads, torch.__version__,
             statistics.median(times) * 1e3, min(times) * 1e3, cpu / a.iters * 1e3))


if __name__ == "__main__":
    main()
