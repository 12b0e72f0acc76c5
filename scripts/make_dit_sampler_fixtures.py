#!/usr/bin/python3
"""Writes tests/engine/data/dit/sampler_cases.json: short sampler trajectories computed by
diffusers 0.31's schedulers (DDPMScheduler, DDIMScheduler, EulerDiscreteScheduler,
FlowMatchEulerDiscreteScheduler), which tests/engine/dit/test_sampler.c replays without torch.

Every case records the scheduler config, the initial standard-normal latent z (x_T = z *
init_noise_sigma), the standard-normal noise fed to each step (DDPM through a patched
randn_tensor, DDIM through variance_noise), the timesteps, and the final latent. The model is a
fixed function of the scaled model input x_in (element e, timestep t), computed in double:
    out[e]     = 0.5 * x_in[e] + 0.3 * sin(0.1 * e + 0.002 * t)        (the prediction)
    out[n + e] = tanh(0.3 * x_in[e] - 0.001 * t)                      (learned sigma, 2C only)
Needs Debian's python3-torch and diffusers 0.31 (/usr/bin/python3).
Usage: /usr/bin/python3 scripts/make_dit_sampler_fixtures.py [out.json]
"""
import json
import os
import sys

import numpy as np
import torch
import diffusers
import diffusers.schedulers.scheduling_ddpm as ddpm_mod

CHANNELS, PLANE = 2, 16  # a 2x4x4 latent: 32 elements


def fake_model(x_in, t, model_channels):
    n = x_in.size
    e = np.arange(n, dtype=np.float64)
    x = x_in.astype(np.float64).reshape(-1)
    out = [0.5 * x + 0.3 * np.sin(0.1 * e + 0.002 * t)]
    if model_channels == 2 * CHANNELS:
        out.append(np.tanh(0.3 * x - 0.001 * t))
    return np.concatenate(out).astype(np.float32)


CASES = [
    ("ddpm_fixed_small", {"_class_name": "DDPMScheduler", "beta_schedule": "linear",
                          "clip_sample": True, "variance_type": "fixed_small"}, 4, 0.0, 1),
    ("ddpm_learned_range_cosine", {"_class_name": "DDPMScheduler",
                                   "beta_schedule": "squaredcos_cap_v2", "clip_sample": False,
                                   "variance_type": "learned_range"}, 4, 0.0, 2),
    ("ddpm_fixed_large_v_trailing", {"_class_name": "DDPMScheduler",
                                     "beta_schedule": "scaled_linear", "beta_start": 0.00085,
                                     "beta_end": 0.012, "prediction_type": "v_prediction",
                                     "timestep_spacing": "trailing", "clip_sample": False,
                                     "variance_type": "fixed_large"}, 4, 0.0, 1),
    ("ddpm_sample_linspace", {"_class_name": "DDPMScheduler", "prediction_type": "sample",
                              "timestep_spacing": "linspace", "clip_sample": True,
                              "variance_type": "fixed_small_log"}, 4, 0.0, 1),
    ("ddim_eta0", {"_class_name": "DDIMScheduler", "beta_schedule": "scaled_linear",
                   "beta_start": 0.00085, "beta_end": 0.012, "clip_sample": False,
                   "set_alpha_to_one": False, "steps_offset": 1,
                   "timestep_spacing": "leading"}, 4, 0.0, 1),
    ("ddim_eta1_clip", {"_class_name": "DDIMScheduler", "beta_schedule": "linear",
                        "clip_sample": True, "set_alpha_to_one": False, "steps_offset": 1,
                        "timestep_spacing": "leading"}, 4, 1.0, 1),
    ("ddim_v_trailing_learned_sigma", {"_class_name": "DDIMScheduler",
                                       "beta_schedule": "squaredcos_cap_v2",
                                       "prediction_type": "v_prediction", "clip_sample": False,
                                       "timestep_spacing": "trailing"}, 4, 0.5, 2),
    ("euler_leading", {"_class_name": "EulerDiscreteScheduler", "beta_schedule": "scaled_linear",
                       "beta_start": 0.00085, "beta_end": 0.012, "steps_offset": 1,
                       "timestep_spacing": "leading"}, 4, 0.0, 1),
    ("euler_linspace_v", {"_class_name": "EulerDiscreteScheduler",
                          "prediction_type": "v_prediction", "timestep_spacing": "linspace"},
     4, 0.0, 1),
    ("euler_trailing_sample", {"_class_name": "EulerDiscreteScheduler",
                               "prediction_type": "sample", "timestep_spacing": "trailing"},
     4, 0.0, 1),
    ("flow_euler_shift3", {"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0},
     4, 0.0, 1),
    ("flow_euler_shift1", {"_class_name": "FlowMatchEulerDiscreteScheduler"}, 6, 0.0, 1),
]


def run_case(name, config, steps, eta, mult, rng):
    cls = getattr(diffusers, config["_class_name"])
    sched = cls.from_config(config)
    sched.set_timesteps(steps)
    n = CHANNELS * PLANE
    z = rng.standard_normal(n).astype(np.float32)
    nsteps = len(sched.timesteps)
    noise = rng.standard_normal((nsteps, n)).astype(np.float32)
    x = torch.from_numpy(z.copy()).reshape(1, CHANNELS, 4, 4) * getattr(sched, "init_noise_sigma", 1.0)
    model_channels = mult * CHANNELS
    for i, t in enumerate(sched.timesteps):
        x_in = sched.scale_model_input(x, t) if hasattr(sched, "scale_model_input") else x
        out = fake_model(x_in.numpy(), float(t), model_channels)
        m = torch.from_numpy(out).reshape(1, model_channels, 4, 4)
        z_i = torch.from_numpy(noise[i].copy()).reshape(1, CHANNELS, 4, 4)
        if isinstance(sched, diffusers.DDPMScheduler):
            ddpm_mod.randn_tensor = lambda *a, _z=z_i, **k: _z
            x = sched.step(m, t, x).prev_sample
        elif isinstance(sched, diffusers.DDIMScheduler):
            # DiT's pipeline hands the scheduler the eps half only
            x = sched.step(m[:, :CHANNELS], t, x, eta=eta,
                           use_clipped_model_output=bool(sched.config.clip_sample),
                           variance_noise=z_i).prev_sample
        elif isinstance(sched, diffusers.EulerDiscreteScheduler):
            x = sched.step(m[:, :CHANNELS], t, x).prev_sample
        else:
            x = sched.step(m[:, :CHANNELS], t, x).prev_sample
    return {
        "name": name, "config": config, "steps": steps, "eta": eta,
        "channels": CHANNELS, "plane": PLANE, "model_channels": model_channels,
        "init_sigma": float(getattr(sched, "init_noise_sigma", 1.0)),
        "timesteps": [float(t) for t in sched.timesteps],
        "z": [float(v) for v in z],
        "noise": [[float(v) for v in row] for row in noise],
        "final": [float(v) for v in x.reshape(-1).numpy()],
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "engine", "data", "dit", "sampler_cases.json")
    rng = np.random.RandomState(20261123)
    cases = [run_case(*c, rng) for c in CASES]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"generator": "scripts/make_dit_sampler_fixtures.py",
                   "diffusers": diffusers.__version__, "cases": cases}, f)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
