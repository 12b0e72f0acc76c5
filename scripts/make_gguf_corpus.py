#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_gguf.c: a few tiny, valid GGUF files made with the
reference Python `gguf` package (so the seeds are independent of weft's reader), covering every
metadata value type, nested arrays, v2 and v3 headers, a custom alignment and the tensor types
weft knows. Each file is at most a few KB.

    python3 scripts/make_gguf_corpus.py            # writes tests/fuzz/corpus/gguf/*.gguf
"""
import os
import sys

import numpy as np
from gguf import GGUFValueType, GGUFWriter, GGMLQuantizationType

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fuzz", "corpus", "gguf")


def write(name, build, version=3, alignment=None):
    path = os.path.join(OUT, name)
    w = GGUFWriter(path, arch="llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    build(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if version != 3:  # v2 and v3 share the little-endian layout; only the version differs
        with open(path, "r+b") as f:
            f.seek(4)
            f.write(version.to_bytes(4, "little"))
    print(f"{path}: {os.path.getsize(path)} bytes")


def all_types(w):
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -300)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "hello")
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 0.25)
    w.add_array("a.i32", [1, -2, 3])
    w.add_array("a.str", ["a", "", "ccc"])
    w.add_array("a.f32", [0.5, 1.5])
    w.add_array("a.bool", [False, True])
    w.add_array("a.nested", [["x", "yy"], ["z"]])
    w.add_array("a.deep", [[[1, 2]], [[3]]])
    w.add_tensor("w.f32", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.add_tensor("w.f16", np.ones((2, 3), dtype=np.float16))


def tiny_llama(w):
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "ab"])
    w.add_token_types([3, 3, 3, 1, 1, 1])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}")
    # Q8_0: one block of 32 = 2-byte scale + 32 int8; raw bytes with the quantised shape
    q8 = np.zeros((2, 34), dtype=np.uint8)
    q8[:, 1] = 0x3c  # scale 1.0 (fp16 0x3c00)
    q8[:, 2:] = np.arange(32, dtype=np.uint8)
    w.add_tensor("token_embd.weight", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    q41 = np.zeros((2, 20), dtype=np.uint8)
    w.add_tensor("blk.0.attn_q.weight", q41, raw_dtype=GGMLQuantizationType.Q4_1)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(32, dtype=np.float32))


def empty(w):
    w.add_string("general.name", "empty")


def main():
    os.makedirs(OUT, exist_ok=True)
    write("all_types_v3.gguf", all_types)
    write("all_types_v2.gguf", all_types, version=2)
    write("tiny_llama.gguf", tiny_llama)
    write("align64.gguf", tiny_llama, alignment=64)
    write("no_tensors.gguf", empty)
    return 0


if __name__ == "__main__":
    sys.exit(main())
