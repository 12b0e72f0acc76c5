"""weft's default DiT (deploy/models/weft-dit-fmnist), checked without torch: the diffusers folder
layout and config values weft's loader relies on, fp16 safetensors within the size budget, class
names, and the numpy judge's accuracy on the real Fashion-MNIST test split.
weft-test: labels=integration timeout=300
"""
import json
import os
import struct
import sys

import numpy as np
import pytest

SRC = os.environ.get("WEFT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODEL = os.path.join(SRC, "deploy", "models", "weft-dit-fmnist")
sys.path.insert(0, os.path.join(SRC, "scripts"))
import dit_judge  # noqa: E402


def read_json(*parts):
    with open(os.path.join(MODEL, *parts)) as f:
        return json.load(f)


def test_layout_and_configs():
    index = read_json("model_index.json")
    assert index["transformer"] == ["diffusers", "DiTTransformer2DModel"]
    assert index["scheduler"][1] in ("DDIMScheduler", "DDPMScheduler")
    names = index["weft_class_names"]
    assert len(names) == 10 and len(set(names)) == 10 and names[0] == "t-shirt"
    assert index["weft_null_class"] == 10
    with open(os.path.join(MODEL, "labels.txt")) as f:
        assert f.read().split() == names
    cfg = read_json("transformer", "config.json")
    assert cfg["_class_name"] == "DiTTransformer2DModel"
    assert cfg["in_channels"] == 1 and cfg["sample_size"] == 32
    assert cfg["num_embeds_ada_norm"] == 10 and cfg["norm_type"] == "ada_norm_zero"
    sched = read_json("scheduler", "scheduler_config.json")
    assert sched["_class_name"] == index["scheduler"][1]
    assert sched["num_train_timesteps"] == 1000
    assert sched["prediction_type"] in ("epsilon", "v_prediction", "sample")
    assert os.path.exists(os.path.join(MODEL, "LICENSE.dataset"))
    assert not os.path.exists(os.path.join(MODEL, "vae"))  # pixel space


def test_weights_are_fp16_and_small():
    path = os.path.join(MODEL, "transformer", "diffusion_pytorch_model.safetensors")
    size = os.path.getsize(path)
    assert size <= 5 * 1024 * 1024
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    assert tensors, "no tensors"
    n_bytes = 0
    for name, t in tensors.items():
        assert t["dtype"] == "F16", name
        n = int(np.prod(t["shape"])) if t["shape"] else 1
        begin, end = t["data_offsets"]
        assert end - begin == 2 * n, name
        n_bytes += end - begin
    assert 8 + hlen + n_bytes == size
    # every block's class embedding holds the 10 classes and the null (CFG) class
    cfg = read_json("transformer", "config.json")
    emb = [v for k, v in tensors.items() if k.endswith("class_embedder.embedding_table.weight")]
    assert len(emb) == cfg["num_layers"]
    assert all(e["shape"] == [11, cfg["num_attention_heads"] * cfg["attention_head_dim"]]
               for e in emb)


def test_judge_accuracy_on_real_test_split():
    if not os.path.exists(os.path.join(dit_judge.FMNIST, "t10k-images-idx3-ubyte.gz")):
        pytest.skip("Debian's dataset-fashion-mnist is not installed (scripts/setup installs it)")
    x, y = dit_judge.load_fmnist("t10k")
    judge = dit_judge.Judge(MODEL)
    # the first 2000 of the 10000 test images keep the test short; train_log.json records the
    # accuracy on all 10000 measured at training time
    pred = judge.predict(x[:2000])
    acc = float((pred == y[:2000]).mean())
    assert acc >= 0.88, acc
    log = read_json("train_log.json")
    assert abs(log["judge_test_accuracy"] - acc) < 0.03
