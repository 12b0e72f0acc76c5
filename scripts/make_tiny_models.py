#!/usr/bin/env python3
"""Tiny random-weight GGUF models (each < 2 MB) for weft's forward-pass tests, and llama.cpp's
greedy tokens on them.

Writes tests/engine/data/tiny/<name>.gguf and <name>.txt (golden format: I/G lines, see
scripts/make_golden_fixtures.py). Models: llama with every matmul weight (and the tied
output) in one of Q4_0, Q5_0, Q5_1, Q8_0, F16, BF16, Q4_K, Q6_K; one of them also carries
a llama3-style rope_freqs.weight and another linear rope scaling; plus a qwen2 model (Q/K/V
biases, NeoX rope), a qwen3 model (per-head q/k RMSNorm) and two YaRN models (llama, qwen2) whose
short original context puts the YaRN ramp in the middle of the head. llama-f16 ties the output to token_embd; llama-bf16 keeps its embedding rows in Q8_0. The vocabulary is the first 512 tokens of the
default model's (with the merges among them), so both tokenizers load it.

llama.cpp settings: as scripts/llama_ref.py (n_batch 1, F16 KV, no flash attention, plain
CPU weights), n_ctx 512, 1 thread. Weights come from a fixed numpy seed, so reruns produce
identical files.

Usage: python3 scripts/make_tiny_models.py [--out DIR] [--n 32]
"""
import argparse
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import DEFAULT_MODEL, Ref  # noqa: E402

N_VOCAB = 512
N_EMBD = 256
N_FF = 256
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = N_EMBD // N_HEAD
N_LAYER = 2


def load_vocab(path):
    r = gguf.GGUFReader(path)
    f = r.fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8")
            for i in f["tokenizer.ggml.tokens"].data[:N_VOCAB]]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0])
             for i in f["tokenizer.ggml.token_type"].data[:N_VOCAB]]
    have = set(toks)
    merges = []
    for i in f["tokenizer.ggml.merges"].data:
        m = bytes(f["tokenizer.ggml.merges"].parts[i]).decode("utf-8")
        a, _, b = m.partition(" ")
        if a in have and b in have and (a + b) in have:
            merges.append(m)
    return toks, types, merges


def k_quant_blocks(rng, qtype, rows, cols):
    """Random but well-formed K-quant blocks (small finite scales)."""
    nb = cols // 256
    if qtype == T.Q4_K:
        blk = np.zeros((rows, nb, 144), dtype=np.uint8)
        blk[:, :, 0:2] = np.frombuffer(np.float16(0.004).tobytes(), np.uint8)
        blk[:, :, 2:4] = np.frombuffer(np.float16(0.002).tobytes(), np.uint8)
        blk[:, :, 4:16] = rng.integers(0, 256, (rows, nb, 12), dtype=np.uint8)
        blk[:, :, 16:] = rng.integers(0, 256, (rows, nb, 128), dtype=np.uint8)
    else:  # Q6_K: ql[128] qh[64] scales[16] d
        blk = np.zeros((rows, nb, 210), dtype=np.uint8)
        blk[:, :, 0:192] = rng.integers(0, 256, (rows, nb, 192), dtype=np.uint8)
        blk[:, :, 192:208] = rng.integers(-40, 40, (rows, nb, 16)).astype(np.int8).view(np.uint8)
        blk[:, :, 208:210] = np.frombuffer(np.float16(0.0004).tobytes(), np.uint8)
    return blk.reshape(rows, nb * blk.shape[2])


def add_weight(w, rng, name, rows, cols, qtype, scale):
    if qtype in (T.Q4_K, T.Q6_K):
        w.add_tensor(name, k_quant_blocks(rng, qtype, rows, cols), raw_dtype=qtype)
        return
    data = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    if qtype == T.F32:
        w.add_tensor(name, data)
    elif qtype == T.F16:
        w.add_tensor(name, data.astype(np.float16))
    else:
        w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)


def write_model(path, arch, qtype, seed, vocab, rope_freqs=False, rope_linear=None,
                untied=True, embd_type=None, yarn=None):
    rng = np.random.default_rng(seed)
    toks, types, merges = vocab
    w = gguf.GGUFWriter(path, arch)
    w.add_name("weft-tiny-%s-%s" % (arch, qtype.name.lower()))
    w.add_context_length(512)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    if rope_linear:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope_linear)
    if yarn:  # (factor, original context): a short original context puts the ramp mid-head
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(yarn[0])
        w.add_rope_scaling_orig_ctx_len(yarn[1])
    w.add_vocab_size(N_VOCAB)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    # tied models get a small embedding so the residual stream is not dominated by the input
    add_weight(w, rng, "token_embd.weight", N_VOCAB, N_EMBD, embd_type or qtype,
               1.0 if untied else 0.05)
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32))
    if untied:
        add_weight(w, rng, "output.weight", N_VOCAB, N_EMBD, qtype, 0.05)
    if rope_freqs:
        w.add_tensor("rope_freqs.weight",
                     np.linspace(1.0, 8.0, HEAD_DIM // 2).astype(np.float32))
    kvd = N_HEAD_KV * HEAD_DIM
    for l in range(N_LAYER):
        p = "blk.%d." % l
        w.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32))
        add_weight(w, rng, p + "attn_q.weight", N_EMBD, N_EMBD, qtype, 0.08)
        add_weight(w, rng, p + "attn_k.weight", kvd, N_EMBD, qtype, 0.08)
        add_weight(w, rng, p + "attn_v.weight", kvd, N_EMBD, qtype, 0.08)
        if arch == "qwen2":
            w.add_tensor(p + "attn_q.bias", (0.1 * rng.standard_normal(N_EMBD)).astype(np.float32))
            w.add_tensor(p + "attn_k.bias", (0.1 * rng.standard_normal(kvd)).astype(np.float32))
            w.add_tensor(p + "attn_v.bias", (0.1 * rng.standard_normal(kvd)).astype(np.float32))
        if arch == "qwen3":
            w.add_tensor(p + "attn_q_norm.weight",
                         (1 + 0.2 * rng.standard_normal(HEAD_DIM)).astype(np.float32))
            w.add_tensor(p + "attn_k_norm.weight",
                         (1 + 0.2 * rng.standard_normal(HEAD_DIM)).astype(np.float32))
        add_weight(w, rng, p + "attn_output.weight", N_EMBD, N_EMBD, qtype, 0.08)
        w.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32))
        add_weight(w, rng, p + "ffn_gate.weight", N_FF, N_EMBD, qtype, 0.08)
        add_weight(w, rng, p + "ffn_up.weight", N_FF, N_EMBD, qtype, 0.08)
        add_weight(w, rng, p + "ffn_down.weight", N_EMBD, N_FF, qtype, 0.08)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


MODELS = [
    ("llama-q4_0", "llama", T.Q4_0, dict(rope_freqs=True)),
    ("llama-q5_0", "llama", T.Q5_0, {}),
    ("llama-q5_1", "llama", T.Q5_1, {}),
    ("llama-q8_0", "llama", T.Q8_0, dict(rope_linear=2.0)),
    ("llama-f16", "llama", T.F16, dict(untied=False)),
    ("llama-bf16", "llama", T.BF16, dict(embd_type=T.Q8_0)),  # Q8_0 rows keep it < 2 MB
    ("llama-q4_k", "llama", T.Q4_K, {}),
    ("llama-q6_k", "llama", T.Q6_K, {}),
    ("qwen2-q8_0", "qwen2", T.Q8_0, {}),
    ("qwen3-q8_0", "qwen3", T.Q8_0, {}),
    ("llama-yarn-q8_0", "llama", T.Q8_0, dict(yarn=(4.0, 64))),
    ("qwen2-yarn-q4_k", "qwen2", T.Q4_K, dict(yarn=(4.0, 128))),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "tests", "engine", "data", "tiny"))
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    vocab = load_vocab(DEFAULT_MODEL)
    prompts = [[1, 100, 200, 300, 17, 42], [400 + i % 50 for i in range(40)], [5]]
    for i, (name, arch, qtype, kw) in enumerate(MODELS):
        if args.only and args.only != name:
            continue
        path = os.path.join(args.out, name + ".gguf")
        write_model(path, arch, qtype, 1000 + i, vocab, **kw)
        ref = Ref(path, n_ctx=512, n_batch=1, n_threads=1)
        lines = ["# %s: llama.cpp greedy tokens (scripts/make_tiny_models.py)" % name]
        for p in prompts:
            gen = ref.greedy(p, args.n)
            lines += ["I " + " ".join(map(str, p)), "G " + " ".join(map(str, gen))]
        ref.close()
        with open(os.path.join(args.out, name + ".txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print(name, os.path.getsize(path), "bytes", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
