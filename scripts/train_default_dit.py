#!/usr/bin/python3
"""Train weft's default DiT: a small class-conditional pixel-space DiTTransformer2DModel on
Fashion-MNIST (--dataset fmnist: Debian's dataset-fashion-mnist, MIT licence, 32x32) or on
scikit-learn's 8x8 digits (--dataset digits: Debian's python3-sklearn, UCI, CC BY 4.0), and a small judge classifier that
the sampling tests use to check that a sample asked for class k looks like class k.

Runs on Debian's python3-torch with diffusers 0.31 (`/usr/bin/python3` only). Output, in
diffusers' folder layout (save_pretrained):
  OUT/model_index.json                      class names under "weft_class_names"
  OUT/transformer/config.json + diffusion_pytorch_model.safetensors   (fp16)
  OUT/scheduler/scheduler_config.json       DDIMScheduler, 1000 training steps, linear betas
  OUT/judge.npz                             judge CNN weights (fp16), run by dit_judge.py (numpy)
  OUT/labels.txt, OUT/LICENSE.dataset, OUT/train_log.json

Training is bounded by wall-clock time (--minutes), since the build machine is shared: the
script reports seconds per epoch and the number of optimizer steps it managed.

Usage: /usr/bin/python3 scripts/train_default_dit.py --out deploy/models/weft-dit-fmnist
       /usr/bin/python3 scripts/train_default_dit.py --dataset digits --patch 2 --minutes 10 \
           --guidance 2.0 --out deploy/models/weft-dit-digits
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np
import torch
import safetensors.torch  # noqa: F401  (must precede save_pretrained on this torch)
from diffusers import DDIMScheduler, DiTTransformer2DModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_default_dit import sample  # noqa: E402
from dit_judge import Judge, load_dataset  # noqa: E402

FMNIST_LICENSE = """weft-dit-fmnist was trained by weft's scripts/train_default_dit.py on Fashion-MNIST
(https://github.com/zalandoresearch/fashion-mnist, Debian package dataset-fashion-mnist).

Fashion-MNIST: Copyright 2017 Zalando SE. MIT (Expat) licence:

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""
DIGITS_LICENSE = """weft-dit-digits was trained by weft's scripts/train_default_dit.py on scikit-learn's
copy of the UCI "Optical Recognition of Handwritten Digits" data set (the 1,797-image test part,
8x8 pixels, values 0-16; Debian package python3-sklearn, file sklearn/datasets/data/digits.csv.gz).

Data set: Alpaydin, E. and Kaynak, C. (1998). Optical Recognition of Handwritten Digits.
UCI Machine Learning Repository. https://doi.org/10.24432/C50P49
Licence: Creative Commons Attribution 4.0 International (CC BY 4.0),
https://creativecommons.org/licenses/by/4.0/
Referenced by scikit-learn's DESCR (sklearn/datasets/descr/digits.rst): C. Kaynak (1995)
Methods of Combining Multiple Classifiers and Their Applications to Handwritten Digit
Recognition, MSc Thesis, Institute of Graduate Studies in Science and Engineering, Bogazici
University.

The model weights are a derived work of these data; changes: the pixels were rescaled to [-1, 1].
"""
DATASETS = {
    "fmnist": {"classes": ["t-shirt", "trouser", "pullover", "dress", "coat",
                           "sandal", "shirt", "sneaker", "bag", "ankle-boot"],
               "license": FMNIST_LICENSE, "test_name": "t10k"},
    "digits": {"classes": [str(k) for k in range(10)],
               "license": DIGITS_LICENSE, "test_name": "held-out 20% (360 images)"},
}


class JudgeNet(torch.nn.Module):
    """conv3x3(1->16)+relu+pool2, conv3x3(16->32)+relu+pool2, fc(32*(S/4)^2->10) on SxS inputs.
    dit_judge.py reimplements exactly this forward in numpy."""

    def __init__(self, size):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32 * (size // 4) ** 2, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


def train_judge(xtr, ytr, xte, yte, epochs, seed):
    torch.manual_seed(seed)
    net = JudgeNet(xtr.shape[-1])
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    xtr_t, ytr_t = torch.from_numpy(xtr), torch.from_numpy(ytr)
    bs = 256 if len(xtr) > 10000 else 32
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs * ((len(xtr) + bs - 1) // bs))
    for ep in range(epochs):
        t0 = time.time()
        perm = torch.randperm(len(xtr_t))
        for i in range(0, len(perm), bs):
            idx = perm[i:i + bs]
            xb = xtr_t[idx]
            # half the batch gets pixel noise, so sampled images are judged by shape, not texture
            noisy = (torch.rand(len(idx), 1, 1, 1) < 0.5).float()
            xb = xb + noisy * 0.25 * torch.randn_like(xb)
            loss = torch.nn.functional.cross_entropy(net(xb), ytr_t[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        print(f"judge epoch {ep}: {time.time() - t0:.1f} s, loss {loss.item():.3f}", flush=True)
    net.eval()
    with torch.no_grad():
        pred = torch.cat([net(torch.from_numpy(xte[i:i + 1000])).argmax(1)
                          for i in range(0, len(xte), 1000)])
    acc = float((pred.numpy() == yte).mean())
    w = {k.replace(".", "_"): v.detach().numpy().astype(np.float16)
         for k, v in net.state_dict().items()}
    return w, acc


def make_model(args, size):
    return DiTTransformer2DModel(
        num_attention_heads=args.heads, attention_head_dim=args.head_dim, in_channels=1,
        out_channels=1, num_layers=args.layers, sample_size=size, patch_size=args.patch,
        num_embeds_ada_norm=10, norm_type="ada_norm_zero", norm_elementwise_affine=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dataset", default="fmnist", choices=sorted(DATASETS))
    ap.add_argument("--guidance", type=float, default=3.0,
                    help="guidance for the EMA/raw choice; the model's default (model_index.json)")
    ap.add_argument("--minutes", type=float, default=14.0, help="wall-clock budget for the DiT")
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=24)
    ap.add_argument("--patch", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--judge-epochs", type=int, default=None, help="default 6 fmnist, 60 digits")
    ap.add_argument("--prediction", default="v_prediction",
                    choices=["epsilon", "v_prediction", "sample"])
    ap.add_argument("--reuse-judge", action="store_true",
                    help="keep the --out folder's judge.npz instead of training a new one")
    ap.add_argument("--judge-only", action="store_true",
                    help="retrain only the judge of an existing --out folder")
    ap.add_argument("--ema", type=float, default=0.995)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bench-steps", type=int, default=0,
                    help="only time this many DiT optimizer steps and exit")
    args = ap.parse_args()
    if args.judge_epochs is None:
        args.judge_epochs = 60 if args.dataset == "digits" else 6
    ds = DATASETS[args.dataset]
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    x, lab = load_dataset(args.dataset, "train")
    xt, tlab = load_dataset(args.dataset, "test")
    if args.dataset == "digits":
        # the judge's held-out split is only for the judge; the DiT learns from all 1,797 images
        x_dit, lab_dit = np.concatenate([x, xt]), np.concatenate([lab, tlab])
    else:
        x_dit, lab_dit = x, lab

    os.makedirs(args.out, exist_ok=True)
    if args.judge_only:
        return write_judge(args, x, lab, xt, tlab)
    if not args.reuse_judge:
        if os.path.exists(os.path.join(args.out, "train_log.json")):
            os.remove(os.path.join(args.out, "train_log.json"))  # a fresh run, a fresh log
        write_judge(args, x, lab, xt, tlab)
    judge = Judge(args.out)
    with open(os.path.join(args.out, "train_log.json")) as f:
        judge_log = {k: v for k, v in json.load(f).items() if k.startswith("judge_")}

    model = make_model(args, x.shape[-1])
    nparam = sum(p.numel() for p in model.parameters())
    print(f"DiT parameters: {nparam} ({2 * nparam / 1e6:.2f} MB fp16)", flush=True)
    sched = DDIMScheduler(num_train_timesteps=1000, beta_schedule="linear", beta_start=1e-4,
                          beta_end=0.02, clip_sample=True, set_alpha_to_one=False,
                          steps_offset=1, timestep_spacing="leading",
                          prediction_type=args.prediction)
    acp = sched.alphas_cumprod.clone().float()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
    xs, ys = torch.from_numpy(x_dit), torch.from_numpy(lab_dit)

    budget = args.minutes * 60.0
    t_start = time.time()
    step, epoch, done = 0, 0, False
    model.train()
    while not done:
        t_ep = time.time()
        perm = torch.randperm(len(xs))
        for i in range(0, len(perm) - args.batch + 1, args.batch):
            idx = perm[i:i + args.batch]
            x0, y = xs[idx], ys[idx]
            t = torch.randint(0, 1000, (len(idx),))
            noise = torch.randn_like(x0)
            a = acp[t].view(-1, 1, 1, 1)
            xt_ = a.sqrt() * x0 + (1 - a).sqrt() * noise
            out = model(xt_, timestep=t, class_labels=y).sample  # label dropout 0.1 inside
            if args.prediction == "epsilon":
                target = noise
            elif args.prediction == "v_prediction":
                target = a.sqrt() * noise - (1 - a).sqrt() * x0
            else:
                target = x0
            loss = torch.nn.functional.mse_loss(out, target)
            # warm-up, then cosine decay over the wall-clock budget (to 10%)
            frac = min(1.0, (time.time() - t_start) / budget)
            lr = args.lr * min(1.0, (step + 1) / 200) * (0.55 + 0.45 * math.cos(math.pi * frac))
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            decay = min(args.ema, (1 + step) / (10 + step))
            with torch.no_grad():
                for k, v in model.state_dict().items():
                    ema[k].mul_(decay).add_(v.detach(), alpha=1 - decay)
            step += 1
            if step % 50 == 0:
                el = time.time() - t_start
                print(f"step {step} epoch {epoch} loss {loss.item():.4f} "
                      f"{el / step:.3f} s/step elapsed {el:.0f} s", flush=True)
            if args.bench_steps and step >= args.bench_steps:
                el = time.time() - t_start
                print(f"bench: {el / step:.3f} s/step, {el / step * len(xs) / args.batch:.0f} "
                      "s/epoch projected", flush=True)
                return
            if time.time() - t_start > budget:
                done = True
                break
        if not done:
            print(f"epoch {epoch}: {time.time() - t_ep:.0f} s", flush=True)
        epoch += 1
    train_s = time.time() - t_start
    print(f"DiT training: {step} steps, {step * args.batch / len(xs):.2f} epochs, "
          f"{train_s:.0f} s", flush=True)

    # keep whichever of the EMA and the last weights the judge agrees with more (short runs
    # can leave the EMA behind the raw weights)
    eval_sched = DDIMScheduler.from_config(sched.config)
    raw = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.eval()
    scores = {}
    for label, weights in (("ema", ema), ("raw", raw)):
        model.load_state_dict(weights)
        g = torch.Generator().manual_seed(1)
        yy = torch.arange(10).repeat_interleave(10)
        img = sample(model, eval_sched, yy, 20, args.guidance, generator=g)
        scores[label] = float((judge.predict(img) == yy.numpy()).mean())
    pick = max(scores, key=scores.get)
    print(f"judge agreement (100 samples, DDIM 20, guidance {args.guidance}): {scores}; "
          f"keeping {pick}",
          flush=True)
    model.load_state_dict(ema if pick == "ema" else raw)
    model = model.half()
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(os.path.join(args.out, "transformer"), safe_serialization=True)
    sched.save_pretrained(os.path.join(args.out, "scheduler"))
    index = {
        "_class_name": "DiTPipeline", "_diffusers_version": "0.31.0",
        "transformer": ["diffusers", "DiTTransformer2DModel"],
        "scheduler": ["diffusers", "DDIMScheduler"],
        "weft_pixel_space": True,
        "weft_pixel_range": [-1.0, 1.0],
        "weft_class_names": ds["classes"],
        "weft_null_class": 10,
        "weft_guidance_scale": args.guidance,
    }
    with open(os.path.join(args.out, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "LICENSE.dataset"), "w") as f:
        f.write(ds["license"])
    with open(os.path.join(args.out, "labels.txt"), "w") as f:
        f.write("\n".join(ds["classes"]) + "\n")

    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump({"dit_params": nparam, "dit_steps": step, "batch": args.batch,
                   "dit_train_seconds": round(train_s), "epochs": step * args.batch / len(xs),
                   "selection": scores, "kept": pick, "args": vars(args),
                   **judge_log}, f, indent=2)
        f.write("\n")
    return 0


def write_judge(args, x, lab, xt, tlab):
    t0 = time.time()
    jw, acc = train_judge(x, lab, xt, tlab, args.judge_epochs, args.seed)
    test_name = DATASETS[args.dataset]["test_name"]
    np.savez(os.path.join(args.out, "judge.npz"), **jw)
    secs = time.time() - t0
    print(f"judge: test accuracy {acc:.4f} on the {test_name} split ({secs:.0f} s)",
          flush=True)
    path = os.path.join(args.out, "train_log.json")
    log = {}
    if os.path.exists(path):
        with open(path) as f:
            log = json.load(f)
    log.update({"judge_test_accuracy": acc, "judge_test_split": test_name, "judge_epochs": args.judge_epochs,
                "judge_train_seconds": round(secs)})
    with open(path, "w") as f:
        json.dump(log, f, indent=2)
        f.write("\n")
    return 0

if __name__ == "__main__":
    sys.exit(main())
