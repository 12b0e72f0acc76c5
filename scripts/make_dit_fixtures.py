#!/usr/bin/python3
"""Reference outputs of diffusers' DiTTransformer2DModel for weft's DiT parity tests.

Run with Debian's python (it has torch 1.13 and diffusers 0.31):
    /usr/bin/python3 scripts/make_dit_fixtures.py tests/engine/data/dit

Weights and inputs come from a counter-based generator that tests/engine/dit/dit_gen.h
implements identically in C, so the large models (DiT-S/2 at full depth, DiT-XL/2 width at
depth 2) need no committed weights: the C test rebuilds the same weights, writes them as a
diffusers folder and compares against the references saved here. Every generated value is
k/128 * 2^-e (|k| <= 128), exact in fp16 and bf16, and nothing is DiT's zero init.

One tiny model is also saved for real, by diffusers' save_pretrained (the folder layout the
loader reads) and converted to the original DiT key layout (one bf16 safetensors file).

Outputs per case <name>.safetensors: "out" (B x out_C x H x W) and intermediates on a subset
of tokens (every 17th; all of them up to 64 tokens): "patch" (patch embedding + positions), "cond" (t + y embedding, B x D),
"block_first", "block_last" (hidden states after those blocks). "shift0" cases are diffusers
with the original DiT timestep features (downscale_freq_shift 0).
"""
import json
import os
import sys

import numpy as np
import safetensors.torch  # noqa: F401  (must be imported before diffusers saves)
import torch
from safetensors.torch import save_file
from diffusers import DiTTransformer2DModel, DDPMScheduler

MASK = (1 << 64) - 1
TOKEN_STRIDE = 17


def fnv1a(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def gen(name, n, e, seed):
    """n values of tensor `name`: splitmix64 of (fnv1a(name) ^ seed) + (i+1)*golden, top 8 bits."""
    key = np.uint64(fnv1a(name) ^ seed)
    i = np.arange(1, n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = key + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    k = (z >> np.uint64(56)).astype(np.int64) - 128
    return (k.astype(np.float64) / 128.0 * 2.0 ** (-e)).astype(np.float32)


def fan_exp(fan_in):
    """e with 4^e <= fan_in < 4^(e+1): weights ~ U(-1,1)/2^e ~ 1/sqrt(fan_in)."""
    e = 0
    while (1 << (2 * (e + 1))) <= fan_in:
        e += 1
    return e


def original_weights(cfg, seed):
    """The original DiT key layout, generated. Shapes follow facebookresearch/DiT models.py."""
    D, p, C = cfg["hidden"], cfg["patch"], cfg["in_channels"]
    out_c, nc = cfg["out_channels"], cfg["num_classes"]
    w = {}

    def put(name, shape, fan_in):
        n = int(np.prod(shape))
        w[name] = torch.from_numpy(gen(name, n, fan_exp(fan_in), seed).reshape(shape))

    put("x_embedder.proj.weight", (D, C, p, p), C * p * p)
    put("x_embedder.proj.bias", (D,), 16)
    put("t_embedder.mlp.0.weight", (D, 256), 256)
    put("t_embedder.mlp.0.bias", (D,), 16)
    put("t_embedder.mlp.2.weight", (D, D), D)
    put("t_embedder.mlp.2.bias", (D,), 16)
    put("y_embedder.embedding_table.weight", (nc + 1, D), 1)
    for b in range(cfg["depth"]):
        q = f"blocks.{b}."
        put(q + "attn.qkv.weight", (3 * D, D), D)
        put(q + "attn.qkv.bias", (3 * D,), 16)
        put(q + "attn.proj.weight", (D, D), D)
        put(q + "attn.proj.bias", (D,), 16)
        put(q + "mlp.fc1.weight", (4 * D, D), D)
        put(q + "mlp.fc1.bias", (4 * D,), 16)
        put(q + "mlp.fc2.weight", (D, 4 * D), 4 * D)
        put(q + "mlp.fc2.bias", (D,), 16)
        put(q + "adaLN_modulation.1.weight", (6 * D, D), D)
        put(q + "adaLN_modulation.1.bias", (6 * D,), 16)
    put("final_layer.adaLN_modulation.1.weight", (2 * D, D), D)
    put("final_layer.adaLN_modulation.1.bias", (2 * D,), 16)
    put("final_layer.linear.weight", (p * p * out_c, D), D)
    put("final_layer.linear.bias", (p * p * out_c,), 16)
    return w


def to_diffusers(w, cfg):
    """Original layout -> diffusers names (per-block copies of the t MLP and label table)."""
    D = cfg["hidden"]
    d = {"pos_embed.proj.weight": w["x_embedder.proj.weight"],
         "pos_embed.proj.bias": w["x_embedder.proj.bias"],
         "proj_out_1.weight": w["final_layer.adaLN_modulation.1.weight"],
         "proj_out_1.bias": w["final_layer.adaLN_modulation.1.bias"],
         "proj_out_2.weight": w["final_layer.linear.weight"],
         "proj_out_2.bias": w["final_layer.linear.bias"]}
    for b in range(cfg["depth"]):
        o, q = f"blocks.{b}.", f"transformer_blocks.{b}."
        e = q + "norm1.emb."
        d[e + "timestep_embedder.linear_1.weight"] = w["t_embedder.mlp.0.weight"]
        d[e + "timestep_embedder.linear_1.bias"] = w["t_embedder.mlp.0.bias"]
        d[e + "timestep_embedder.linear_2.weight"] = w["t_embedder.mlp.2.weight"]
        d[e + "timestep_embedder.linear_2.bias"] = w["t_embedder.mlp.2.bias"]
        d[e + "class_embedder.embedding_table.weight"] = w["y_embedder.embedding_table.weight"]
        d[q + "norm1.linear.weight"] = w[o + "adaLN_modulation.1.weight"]
        d[q + "norm1.linear.bias"] = w[o + "adaLN_modulation.1.bias"]
        qkv_w, qkv_b = w[o + "attn.qkv.weight"], w[o + "attn.qkv.bias"]
        for i, n in enumerate(("to_q", "to_k", "to_v")):
            d[q + f"attn1.{n}.weight"] = qkv_w[i * D:(i + 1) * D].clone()
            d[q + f"attn1.{n}.bias"] = qkv_b[i * D:(i + 1) * D].clone()
        d[q + "attn1.to_out.0.weight"] = w[o + "attn.proj.weight"]
        d[q + "attn1.to_out.0.bias"] = w[o + "attn.proj.bias"]
        d[q + "ff.net.0.proj.weight"] = w[o + "mlp.fc1.weight"]
        d[q + "ff.net.0.proj.bias"] = w[o + "mlp.fc1.bias"]
        d[q + "ff.net.2.weight"] = w[o + "mlp.fc2.weight"]
        d[q + "ff.net.2.bias"] = w[o + "mlp.fc2.bias"]
    return d


def build(cfg, seed):
    m = DiTTransformer2DModel(
        num_attention_heads=cfg["heads"], attention_head_dim=cfg["hidden"] // cfg["heads"],
        in_channels=cfg["in_channels"], out_channels=cfg["out_channels"],
        num_layers=cfg["depth"], sample_size=cfg["sample"], patch_size=cfg["patch"],
        num_embeds_ada_norm=cfg["num_classes"])
    w = original_weights(cfg, seed)
    sd = to_diffusers(w, cfg)
    missing, unexpected = m.load_state_dict(sd, strict=True), None
    del missing, unexpected
    return m.eval(), w


def run(m, cfg, x, t, y, shift, stride):
    for blk in m.transformer_blocks:
        blk.norm1.emb.time_proj.downscale_freq_shift = shift
    dumps = {}
    hs = []
    hs.append(m.pos_embed.register_forward_hook(lambda mod, i, o: dumps.__setitem__("patch", o)))
    hs.append(m.transformer_blocks[0].norm1.emb.register_forward_hook(
        lambda mod, i, o: dumps.setdefault("cond", o)))
    hs.append(m.transformer_blocks[0].register_forward_hook(
        lambda mod, i, o: dumps.__setitem__("block_first", o)))
    hs.append(m.transformer_blocks[-1].register_forward_hook(
        lambda mod, i, o: dumps.__setitem__("block_last", o)))
    with torch.no_grad():
        out = m(x, timestep=t, class_labels=y).sample
    for h in hs:
        h.remove()
    for blk in m.transformer_blocks:
        blk.norm1.emb.time_proj.downscale_freq_shift = 1
    res = {"out": out.contiguous()}
    res["cond"] = dumps["cond"].contiguous()
    for k in ("patch", "block_first", "block_last"):
        res[k] = dumps[k][:, ::stride, :].contiguous()
    return res


def inputs(cfg, seed, batch, size, ts, labels):
    C = cfg["in_channels"]
    x = torch.from_numpy(gen("input.latents", batch * C * size * size, 0, seed)
                         .reshape(batch, C, size, size))
    return x, torch.tensor(ts, dtype=torch.float32), torch.tensor(labels, dtype=torch.long)


def case(outdir, name, cfg, seed, batch, size, ts, labels, shift=1, model=None):
    m = model or build(cfg, seed)[0]
    x, t, y = inputs(cfg, seed, batch, size, ts, labels)
    tokens = (size // cfg["patch"]) ** 2
    stride = 1 if tokens <= 64 else TOKEN_STRIDE  # small grids: every token
    res = run(m, cfg, x, t, y, shift, stride)
    meta = {"config": json.dumps(cfg), "seed": str(seed), "size": str(size),
            "timesteps": json.dumps(ts), "labels": json.dumps(labels), "shift": str(shift),
            "token_stride": str(stride)}
    save_file(res, os.path.join(outdir, name + ".safetensors"), metadata=meta)
    print(name, {k: tuple(v.shape) for k, v in res.items()},
          "rms(out)=%.4f" % float(res["out"].pow(2).mean().sqrt()))
    return m


def tiny(outdir):
    """A real diffusers folder and an original-layout bf16 file of the same weights."""
    cfg = dict(hidden=32, heads=2, depth=2, in_channels=4, out_channels=8, patch=2, sample=8,
               num_classes=10)
    seed = 7
    m, w = build(cfg, seed)
    root = os.path.join(outdir, "tiny_diffusers")
    m.save_pretrained(os.path.join(root, "transformer"), safe_serialization=True)
    DDPMScheduler(num_train_timesteps=1000).save_pretrained(os.path.join(root, "scheduler"))
    with open(os.path.join(root, "model_index.json"), "w") as f:
        json.dump({"_class_name": "DiTPipeline", "_diffusers_version": "0.31.0",
                   "scheduler": ["diffusers", "DDPMScheduler"],
                   "transformer": ["diffusers", "DiTTransformer2DModel"],
                   "vae": ["diffusers", "AutoencoderKL"]}, f, indent=2)
    bf = {k: v.to(torch.bfloat16).contiguous() for k, v in w.items()}
    assert all(torch.equal(bf[k].float(), w[k]) for k in w), "generator values not bf16-exact"
    # Original checkpoints carry the fixed positions as a (1, T, D) buffer: the loader reads the
    # base grid from its shape (and recomputes the values).
    from diffusers.models.embeddings import get_2d_sincos_pos_embed
    grid = cfg["sample"] // cfg["patch"]
    bf["pos_embed"] = torch.from_numpy(get_2d_sincos_pos_embed(cfg["hidden"], grid)).float()[None]
    save_file(bf, os.path.join(outdir, "tiny_original.safetensors"))
    case(outdir, "tiny_ref", cfg, seed, 3, 8, [0.0, 500.0, 999.0], [1, 9, 10], model=m)
    case(outdir, "tiny_ref_shift0", cfg, seed, 3, 8, [0.0, 500.0, 999.0], [1, 9, 10], shift=0,
         model=m)
    case(outdir, "tiny_ref_12", cfg, seed, 2, 12, [1.0, 250.5], [0, 10], model=m)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/engine/data/dit"
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(2)
    tiny(outdir)
    s2 = dict(hidden=384, heads=6, depth=12, in_channels=4, out_channels=8, patch=2, sample=32,
              num_classes=1000)
    case(outdir, "s2_ref", s2, 1, 4, 32, [0.0, 1.0, 500.0, 999.0], [3, 999, 1000, 42])
    xl = dict(hidden=1152, heads=16, depth=2, in_channels=4, out_channels=8, patch=2, sample=32,
              num_classes=1000)
    case(outdir, "xl2_ref", xl, 2, 2, 32, [1.0, 500.0], [207, 1000])
    px = dict(hidden=64, heads=4, depth=2, in_channels=3, out_channels=3, patch=4, sample=16,
              num_classes=10)
    case(outdir, "pixel_ref", px, 3, 2, 16, [0.0, 999.0], [5, 10])
    case(outdir, "pixel_ref_24", px, 3, 2, 24, [10.0, 700.0], [10, 0])


if __name__ == "__main__":
    main()
