#!/usr/bin/python3
"""Writes the VAE decoder parity fixtures under tests/engine/data/dit/vae_<case>/:
config.json (diffusers' save_config), weights.txt (decoder tensor names and shapes), latent.bin
and image.bin (float32 little-endian): image = AutoencoderKL.decode(latent / scaling_factor +
shift_factor) from diffusers 0.31, which tests/engine/dit/test_vae.c reproduces without torch.

Weights are not stored: both sides generate them from the tensor's name and the element index
(weft_weight below, mirrored by gen_weight in test_vae.c), so the sd-vae-sized topology needs no
large files. Cases:
  tiny:  2 up blocks of 2 ResNets, 32 channels, GroupNorm(8), 2 latent channels, scaling 0.5,
         shift 0.1, no post_quant_conv; latent 2x4x4 -> 3x8x8.
  sdvae: the sd-vae-ft-ema/mse decoder topology (4 up blocks of 3 ResNets, 3 nearest-2x
         upsamplers, mid block ResNet + single-head attention + ResNet, GroupNorm(32, eps 1e-6),
         4 latent channels, scaling 0.18215) at reduced widths 32/32/64/64 instead of
         128/256/512/512; latent 4x8x8 -> 3x64x64.
Usage: /usr/bin/python3 scripts/make_dit_vae_fixtures.py
"""
import os

import numpy as np
import torch
from diffusers import AutoencoderKL

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "engine", "data", "dit")
M32 = 0xFFFFFFFF


def fnv1a(name):
    h = 0x811C9DC5
    for b in name.encode():
        h = ((h ^ b) * 0x01000193) & M32
    return h


def weft_weight(name, shape):
    """Deterministic test weights: a hash of (name, element index) mapped to [-1, 1), scaled by
    role: conv/linear weights by sqrt(3 / fan_in), norm weights 1 + 0.2 r, biases 0.1 r."""
    n = int(np.prod(shape))
    j = np.arange(n, dtype=np.uint64)
    x = (j * np.uint64(0x9E3779B1) + np.uint64(fnv1a(name))) & np.uint64(M32)
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x2C1B3C6D)) & np.uint64(M32)
    x ^= x >> np.uint64(12)
    r = x.astype(np.float64) / 4294967296.0 * 2.0 - 1.0
    if name.endswith(".weight") and len(shape) >= 2:
        fan_in = int(np.prod(shape[1:]))
        v = r * np.sqrt(3.0 / fan_in)
    elif name.endswith(".weight"):
        v = 1.0 + 0.2 * r
    else:
        v = 0.1 * r
    return v.astype(np.float32).reshape(shape)


CASES = {
    "tiny": dict(cfg=dict(block_out_channels=(32, 32), layers_per_block=1, latent_channels=2,
                          norm_num_groups=8, scaling_factor=0.5, shift_factor=0.1,
                          use_post_quant_conv=False), latent=(2, 4, 4), seed=1),
    "sdvae": dict(cfg=dict(block_out_channels=(32, 32, 64, 64), layers_per_block=2,
                           latent_channels=4, norm_num_groups=32, scaling_factor=0.18215),
                  latent=(4, 8, 8), seed=2),
}


def make(name, case):
    cfg = dict(case["cfg"])
    n = len(cfg["block_out_channels"])
    vae = AutoencoderKL(in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * n,
                        up_block_types=("UpDecoderBlock2D",) * n, **cfg)
    vae.eval()
    sd = vae.state_dict()
    lines = []
    with torch.no_grad():
        for key, t in sd.items():
            if not (key.startswith("decoder.") or key.startswith("post_quant_conv.")):
                continue
            t.copy_(torch.from_numpy(weft_weight(key, tuple(t.shape))))
            lines.append(key + " " + " ".join(str(d) for d in t.shape))
    vae.load_state_dict(sd)
    rng = np.random.RandomState(case["seed"])
    latent = rng.standard_normal(case["latent"]).astype(np.float32)
    sf = cfg["scaling_factor"]
    shift = cfg.get("shift_factor") or 0.0
    with torch.no_grad():
        z = torch.from_numpy(latent)[None] / sf + shift
        image = vae.decode(z).sample[0].numpy().astype(np.float32)
    d = os.path.join(OUT, "vae_" + name)
    os.makedirs(d, exist_ok=True)
    vae.save_config(d)
    with open(os.path.join(d, "weights.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    latent.tofile(os.path.join(d, "latent.bin"))
    image.tofile(os.path.join(d, "image.bin"))
    print(f"{name}: {len(lines)} tensors, latent {latent.shape} -> image {image.shape}, "
          f"image rms {np.sqrt((image ** 2).mean()):.4f}")


if __name__ == "__main__":
    torch.set_num_threads(2)
    for k, c in CASES.items():
        make(k, c)
