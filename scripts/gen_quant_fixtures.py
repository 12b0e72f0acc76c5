#!/usr/bin/env python3
"""Writes tests/engine/cpu/data/quant_<type>.bin: small fixtures that pin weft's quantisers
and dequantisers to gguf-py's (gguf.quants, itself a numpy port of ggml's reference code), so
CI checks bit-exact agreement without Python.

Layout (little-endian): u32 n; n f32 inputs; i32 has_quant; the row's bytes; n f32 expected
dequantised values. has_quant = 1: the bytes are gguf-py's quantize(inputs) and weft must
reproduce them. has_quant = 0 (types gguf-py cannot quantise, the K-quants): the bytes are
random valid blocks and only dequantisation is compared.

Usage: python3 scripts/gen_quant_fixtures.py   (needs numpy and gguf >= 0.10)
"""
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "engine", "cpu", "data")


def inputs(n, rng):
    # a mix that exercises rounding: uniform, outliers, an all-zero block, a constant block,
    # values that land on .5 after scaling, and tiny values
    x = rng.standard_normal(n).astype(np.float32)
    x[::37] *= 8.0
    x[32:64] = 0.0
    x[64:96] = 0.25
    x[96:128] = np.arange(32, dtype=np.float32) - 15.5
    x[128:160] *= 1e-5
    return x


def write(name, n, x, has_quant, raw, deq):
    with open(os.path.join(OUT, f"quant_{name}.bin"), "wb") as f:
        f.write(struct.pack("<I", n))
        f.write(x.astype("<f4").tobytes())
        f.write(struct.pack("<i", has_quant))
        f.write(raw)
        f.write(deq.astype("<f4").tobytes())


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261121)
    n = 512
    for name, t in [("f16", T.F16), ("bf16", T.BF16), ("q4_0", T.Q4_0), ("q4_1", T.Q4_1),
                    ("q5_0", T.Q5_0), ("q5_1", T.Q5_1), ("q8_0", T.Q8_0)]:
        x = inputs(n, rng)
        q = quants.quantize(x.reshape(1, n), t)
        raw = q.tobytes()
        deq = quants.dequantize(q, t).reshape(n).astype(np.float32)
        write(name, n, x, 1, raw, deq)
    for name, t, d_off in [("q4_k", T.Q4_K, (0, 2)), ("q6_k", T.Q6_K, (208,))]:
        block, size = quants.GGML_QUANT_SIZES[t]
        nb = n // block
        raw = bytearray(rng.integers(0, 256, nb * size, dtype=np.uint8).tobytes())
        for b in range(nb):  # finite, moderate half scales
            for off in d_off:
                h = np.float16(rng.uniform(0.001, 0.1)).view(np.uint16)
                raw[b * size + off:b * size + off + 2] = struct.pack("<H", int(h))
        deq = quants.dequantize(np.frombuffer(bytes(raw), dtype=np.uint8).reshape(1, -1), t)
        write(name, n, np.zeros(n, np.float32), 0, bytes(raw), deq.reshape(n).astype(np.float32))


if __name__ == "__main__":
    main()
