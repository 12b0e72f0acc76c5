#!/usr/bin/env python3
"""Random LoRA adapters in both formats weft reads, and llama.cpp's greedy tokens with them.

For each backbone (the default model SmolLM2 and tiny models from scripts/make_tiny_models.py)
this writes, into tests/engine/data/lora/:
  <name>.gguf        llama.cpp's GGUF LoRA (general.type adapter, adapter.lora.alpha, F32 or
                     (the *-f16 ones) F16 <weight>.lora_a [n_in, r] / .lora_b [r, n_out]),
                     written with the gguf package
  <name>.peft/       PEFT's adapter_config.json + adapter_model.safetensors holding the SAME
                     numbers in Hugging Face layout (lora_A [r, in], lora_B [out, r]; for llama,
                     q/k rows of B un-permuted, as the HF checkpoint would hold them)
  <name>.txt         llama.cpp's greedy tokens with the GGUF adapter ("S <scale>" then I/G
                     lines as in tests/engine/data/golden); weft must give them with either file.
llama.cpp runs the GGUF adapter through llama-cpp-python (llama_adapter_lora_init +
llama_set_adapter_lora), with scripts/llama_ref.py's pinned settings (n_batch 1, F16 KV, no
flash attention, plain CPU weights, 1 thread). The permutation of Q/K rows is the one llama.cpp's
convert_lora_to_gguf.py applies (LlamaModel.permute), so the PEFT copy checks weft's mapping.
Weights come from a fixed numpy seed: reruns give identical files.

Stacked adapters (STACKS below): <name>.txt holds llama.cpp's greedy tokens with two of the
adapters above applied together, each at its own scale (llama_set_adapters_lora with both),
as "L <file> <scale>" lines (one per adapter, in order) then I/G lines; a virtual model that
stacks the same files at the same scales must give them. llama.cpp keeps a context's adapters
in an unordered_map, so the order it adds their updates in is unspecified (two float sums in
another order may flip a near-tie): the script runs llama.cpp with both orders and keeps, per
prompt, the tokens both give (cut at the first difference; prompts where they agree on fewer
than 8 tokens are left out).

Usage: python3 scripts/make_lora_fixtures.py [--only NAME] [--n 24]
"""
import argparse
import ctypes
import json
import os
import struct
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEFAULT_MODEL = os.environ.get(
    "WEFT_MODEL", "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf")

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "..", "tests", "engine", "data", "tiny")

GGUF_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
              "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
          "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}

# name, backbone, rank, alpha, layers (None: all), modules, user scales to record, and the
# tensor type of A and B in both files (F16: llama.cpp multiplies them as F16 weights, so the
# activations are rounded to F16 first; weft must do the same to give its tokens)
ADAPTERS = [
    ("tiny-llama", os.path.join(TINY, "llama-q8_0.gguf"), 8, 16.0, None, list(GGUF_NAMES),
     [1.0, 0.75], np.float32),
    ("tiny-qwen2", os.path.join(TINY, "qwen2-q8_0.gguf"), 4, 8.0, None, list(GGUF_NAMES), [1.0],
     np.float32),
    ("smollm2", DEFAULT_MODEL, 8, 16.0, [0, 9, 18, 29], list(GGUF_NAMES), [1.0], np.float32),
    ("tiny-llama-f16", os.path.join(TINY, "llama-q8_0.gguf"), 8, 16.0, None, list(GGUF_NAMES),
     [1.0, 0.75], np.float16),
    ("smollm2-f16", DEFAULT_MODEL, 8, 16.0, [0, 9, 18, 29], list(GGUF_NAMES), [1.0], np.float16),
]

# name, backbone, [(adapter file written above, user scale), ...]
STACKS = [
    ("tiny-llama-stacked", os.path.join(TINY, "llama-q8_0.gguf"),
     [("tiny-llama.gguf", 0.6), ("tiny-llama-f16.gguf", 0.8)]),
    ("smollm2-stacked", DEFAULT_MODEL, [("smollm2.gguf", 0.7), ("smollm2-f16.gguf", 0.5)]),
]


def backbone_info(path):
    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    def u32(key):
        return int(r.fields[arch + "." + key].parts[-1][0])
    shapes = {}
    for t in r.tensors:
        # gguf-py reports ne order: shape[0] = row length (n_in), shape[1] = rows (n_out)
        shapes[t.name] = (int(t.shape[0]), int(t.shape[1]) if len(t.shape) > 1 else 1)
    return arch, u32("block_count"), u32("attention.head_count"), \
        u32("attention.head_count_kv"), shapes


def hf_permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute of the output rows of a q/k weight."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}[a.dtype]
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_adapter(name, backbone, rank, alpha, layers, modules, seed, out, dtype=np.float32):
    arch, n_layer, n_head, n_head_kv, shapes = backbone_info(backbone)
    rng = np.random.default_rng(seed)
    layers = range(n_layer) if layers is None else layers
    w = gguf.GGUFWriter(os.path.join(out, name + ".gguf"), arch)
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    peft = {}
    for il in layers:
        for mod in modules:
            n_in, n_out = shapes["blk.%d.%s.weight" % (il, GGUF_NAMES[mod])]
            a = (rng.standard_normal((rank, n_in)) / np.sqrt(n_in)).astype(np.float32).astype(dtype)
            b = (rng.standard_normal((n_out, rank)) * 0.08).astype(np.float32).astype(dtype)
            key = "base_model.model.model.layers.%d.%s.%s" % (il, PARENT[mod], mod)
            peft[key + ".lora_A.weight"] = a
            peft[key + ".lora_B.weight"] = b
            bg = b
            if arch == "llama" and mod in ("q_proj", "k_proj"):
                bg = hf_permute(b, n_head if mod == "q_proj" else n_head_kv)
            base = "blk.%d.%s.weight" % (il, GGUF_NAMES[mod])
            # numpy shape (rows, cols) -> GGUF ne [cols, rows]: A ne [n_in, r], B ne [r, n_out]
            w.add_tensor(base + ".lora_a", a)
            w.add_tensor(base + ".lora_b", np.ascontiguousarray(bg))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    pdir = os.path.join(out, name + ".peft")
    os.makedirs(pdir, exist_ok=True)
    write_safetensors(os.path.join(pdir, "adapter_model.safetensors"), peft)
    cfg = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "target_modules": modules,
           "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
           "task_type": "CAUSAL_LM", "base_model_name_or_path": os.path.basename(backbone)}
    if layers is not None:
        cfg["layers_to_transform"] = list(layers)
    with open(os.path.join(pdir, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")


def greedy_with_adapter(backbone, adapter, scale, prompts, n_gen, tokenize):
    return greedy_with_adapters(backbone, [(adapter, scale)] if adapter else [], prompts, n_gen,
                                tokenize)


def greedy_with_adapters(backbone, adapters, prompts, n_gen, tokenize):
    """llama.cpp's greedy tokens with every (path, scale) of adapters applied at once."""
    import llama_cpp as L
    from llama_ref import Ref
    ref = Ref(backbone, n_ctx=512, n_batch=1, n_threads=1)
    ads = []
    for path, _ in adapters:
        ad = L.llama_adapter_lora_init(ref.model, path.encode())
        if not ad:
            raise RuntimeError("llama.cpp rejects " + path)
        ads.append(ad)
    if ads:
        if hasattr(L, "llama_set_adapters_lora"):
            arr = (L.llama_adapter_lora_p_ctypes * len(ads))(*ads)
            sc = (ctypes.c_float * len(ads))(*[s for _, s in adapters])
            rc = L.llama_set_adapters_lora(ref.ctx, arr, len(ads), sc)
        else:
            rc = 0
            for ad, (_, s) in zip(ads, adapters):
                rc = rc or L.llama_set_adapter_lora(ref.ctx, ad, s)
        if rc != 0:
            raise RuntimeError("llama_set_adapter_lora failed")
    out = []
    for p in prompts:
        ids = ref.tokenize(p) if tokenize else p
        out.append((ids, ref.greedy(ids, n_gen)))
    ref.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "engine", "data", "lora"))
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--only", default="")
    ap.add_argument("--adapters-only", action="store_true",
                    help="write the adapter files, not llama.cpp's tokens")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for i, (name, backbone, rank, alpha, layers, modules, scales, dtype) in enumerate(ADAPTERS):
        if args.only and args.only != name:
            continue
        make_adapter(name, backbone, rank, alpha, layers, modules, 7000 + i, args.out, dtype)
        if args.adapters_only:
            continue
        from make_golden_fixtures import PROMPTS
        tiny = name.startswith("tiny")
        prompts = ([[1, 100, 200, 300, 17, 42], [400 + i % 50 for i in range(40)], [5]] if tiny
                   else [PROMPTS[0], PROMPTS[3], PROMPTS[-1]])
        base = greedy_with_adapter(backbone, None, 1.0, prompts, args.n, not tiny)
        lines = ["# %s: llama.cpp greedy tokens with the adapter %s.gguf (rank %d, alpha %g) on %s "
                 "(scripts/make_lora_fixtures.py)" % (name, name, rank, alpha,
                                                       os.path.basename(backbone))]
        for sc in scales:
            runs = greedy_with_adapter(backbone, os.path.join(args.out, name + ".gguf"), sc,
                                       prompts, args.n, not tiny)
            lines.append("S %g" % sc)
            for (ids, gen), (_, bgen) in zip(runs, base):
                lines += ["I " + " ".join(map(str, ids)), "G " + " ".join(map(str, gen))]
                print(name, sc, "differs from the backbone at token",
                      next((k for k in range(len(gen)) if gen[k] != bgen[k]), None),
                      file=sys.stderr, flush=True)
        with open(os.path.join(args.out, name + ".txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.adapters_only:
        return
    for name, backbone, stack in STACKS:
        if args.only and args.only != name:
            continue
        from make_golden_fixtures import PROMPTS
        tiny = name.startswith("tiny")
        prompts = ([[1, 100, 200, 300, 17, 42], [400 + i % 50 for i in range(40)], [5]] if tiny
                   else [PROMPTS[0], PROMPTS[3], PROMPTS[-1]])
        prompts = prompts + ([[7, 8, 9, 10], [200 + 3 * i for i in range(12)]] if tiny
                             else [PROMPTS[1], PROMPTS[2], PROMPTS[4]])
        paths = [(os.path.join(args.out, f), sc) for f, sc in stack]
        runs = greedy_with_adapters(backbone, paths, prompts, args.n, not tiny)
        rev = greedy_with_adapters(backbone, paths[::-1], prompts, args.n, not tiny)
        kept = []
        for (ids, gen), (_, gen2) in zip(runs, rev):
            k = next((i for i in range(len(gen)) if gen[i] != gen2[i]), len(gen))
            print(name, "orders agree on", k, "tokens", file=sys.stderr, flush=True)
            if k >= 8:
                kept.append((ids, gen[:k]))
        runs = kept
        lines = ["# %s: llama.cpp greedy tokens with the adapters %s stacked on %s "
                 "(scripts/make_lora_fixtures.py)" % (
                     name, ", ".join("%s at %g" % (f, sc) for f, sc in stack),
                     os.path.basename(backbone))]
        lines += ["L %s %g" % (f, sc) for f, sc in stack]
        for ids, gen in runs:
            lines += ["I " + " ".join(map(str, ids)), "G " + " ".join(map(str, gen))]
        with open(os.path.join(args.out, name + ".txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
