#!/usr/bin/env python3
"""The judge classifier of weft's default DiT, in numpy only (no torch): a small CNN trained by
scripts/train_default_dit.py on the model's dataset (Fashion-MNIST 32x32, or scikit-learn's 8x8
digits), weights in judge.npz next to the model. It tells which class a 1xHxW image in [-1, 1]
shows, so tests can check that a sample asked for class k looks like class k.

    python3 scripts/dit_judge.py MODEL_DIR [--dataset fmnist|digits]   # held-out accuracy
    python3 scripts/dit_judge.py MODEL_DIR images.npy labels.npy      # agreement on samples

Library use: Judge(model_dir).predict(images[N, 1, H, W] float32) -> int labels[N]
(H, W multiples of 4; the fc layer's size fixes them: 32x32 for fmnist, 8x8 for digits).
"""
import gzip
import os
import sys

import numpy as np

FMNIST = "/usr/share/datasets/fashion-mnist"
DIGITS = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def load_fmnist(split):
    """Fashion-MNIST images as float32 [N, 1, 32, 32] in [-1, 1] (28x28 padded with -1)."""
    with gzip.open(f"{FMNIST}/{split}-images-idx3-ubyte.gz") as f:
        img = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(f"{FMNIST}/{split}-labels-idx1-ubyte.gz") as f:
        lab = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    x = img.astype(np.float32) / 127.5 - 1.0
    x = np.pad(x, ((0, 0), (2, 2), (2, 2)), constant_values=-1.0)
    return x[:, None], lab


def load_digits(split):
    """scikit-learn's 8x8 digits (UCI optdigits test set, 1,797 images, values 0-16) as float32
    [N, 1, 8, 8] in [-1, 1]. A fixed shuffle puts 1,437 images in "train" and 360 in "test";
    the judge is fitted on "train" only, so its "test" accuracy is held out."""
    raw = np.loadtxt(DIGITS, delimiter=",", dtype=np.float32)
    x = (raw[:, :64] / 8.0 - 1.0).reshape(-1, 1, 8, 8)
    lab = raw[:, 64].astype(np.int64)
    perm = np.random.RandomState(1797).permutation(len(lab))
    idx = perm[:1437] if split == "train" else perm[1437:]
    return x[idx], lab[idx]


def load_dataset(name, split):
    """split is "train" or "test" (Fashion-MNIST's t10k)."""
    if name == "digits":
        return load_digits(split)
    return load_fmnist("train" if split == "train" else "t10k")


def _conv3x3_relu_pool(x, w, b):
    """conv 3x3 (padding 1) + ReLU + 2x2 max-pool, NCHW, via im2col and one matmul."""
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((n, c, 9, h, wd), np.float32)
    for ky in range(3):
        for kx in range(3):
            cols[:, :, ky * 3 + kx] = xp[:, :, ky:ky + h, kx:kx + wd]
    cols = cols.reshape(n, c * 9, h * wd)
    y = np.einsum("ok,nkp->nop", w.reshape(w.shape[0], -1), cols, optimize=True)
    y = np.maximum(y + b[None, :, None], 0).reshape(n, w.shape[0], h, wd)
    return y.reshape(n, w.shape[0], h // 2, 2, wd // 2, 2).max(axis=(3, 5))


class Judge:
    def __init__(self, model_dir):
        z = np.load(os.path.join(model_dir, "judge.npz"))
        self.p = {k: z[k].astype(np.float32) for k in z.files}

    def logits(self, x):
        x = np.asarray(x, np.float32)
        out = []
        for i in range(0, len(x), 500):
            h = _conv3x3_relu_pool(x[i:i + 500], self.p["c1_weight"], self.p["c1_bias"])
            h = _conv3x3_relu_pool(h, self.p["c2_weight"], self.p["c2_bias"])
            out.append(h.reshape(len(h), -1) @ self.p["fc_weight"].T + self.p["fc_bias"])
        return np.concatenate(out)

    def predict(self, x):
        return self.logits(x).argmax(axis=1)


def main():
    args = sys.argv[1:]
    dataset = "fmnist"
    if len(args) == 3 and args[1] == "--dataset":
        dataset, args = args[2], args[:1]
    if len(args) not in (1, 3):
        print(__doc__)
        return 2
    judge = Judge(args[0])
    if len(args) == 1:
        x, y = load_dataset(dataset, "test")
        acc = float((judge.predict(x) == y).mean())
        print(f"judge accuracy on the held-out {dataset} split: {acc:.4f} ({len(y)} images)")
    else:
        x, y = np.load(args[1]), np.load(args[2])
        acc = float((judge.predict(x) == y).mean())
        print(f"judge agreement with requested classes: {acc:.4f} ({len(y)} samples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
