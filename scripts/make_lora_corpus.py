#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_lora.c: small valid LoRA adapters for the tiny
backbones (one layer, two or three modules, rank 2), in both formats, framed as the fuzz target
reads them (see tests/fuzz/fuzz_lora.c):
    byte 0: bit 0 = PEFT, bit 1 = tiny qwen2 backbone (else tiny llama), bit 2 = PEFT by file
    GGUF: the adapter file; PEFT: u16 LE config length, adapter_config.json, safetensors bytes
The adapters come from scripts/make_lora_fixtures.py's writer (the gguf package and numpy), so
the seeds are independent of weft's readers. Reruns give identical files.

    python3 scripts/make_lora_corpus.py        # writes tests/fuzz/corpus/lora/*
"""
import os
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_lora_fixtures as fx  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fuzz", "corpus", "lora")

# seed name, backbone bit, modules, peft-by-file
SEEDS = [
    ("llama", 0, ["q_proj", "down_proj"], False),
    ("qwen2", 2, ["k_proj", "up_proj", "o_proj"], True),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, bit, modules, by_file in SEEDS:
        backbone = os.path.join(fx.TINY, ("llama" if bit == 0 else "qwen2") + "-q8_0.gguf")
        with tempfile.TemporaryDirectory() as tmp:
            fx.make_adapter("a", backbone, 2, 4.0, [0], modules, 7, tmp)
            with open(os.path.join(tmp, "a.gguf"), "rb") as f:
                gg = f.read()
            with open(os.path.join(tmp, "a.peft", "adapter_config.json"), "rb") as f:
                cfg = f.read()
            with open(os.path.join(tmp, "a.peft", "adapter_model.safetensors"), "rb") as f:
                st = f.read()
        with open(os.path.join(OUT, name + ".gguf"), "wb") as f:
            f.write(bytes([bit]) + gg)
        flags = bit | 1 | (4 if by_file else 0)
        with open(os.path.join(OUT, name + ".peft"), "wb") as f:
            f.write(bytes([flags]) + struct.pack("<H", len(cfg)) + cfg + st)


if __name__ == "__main__":
    main()
