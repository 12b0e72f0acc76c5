/* Diffusion samplers (schedulers) with diffusers 0.31 semantics: DDPM (ancestral), DDIM, Euler
 * discrete and flow-matching Euler, configured from a diffusers scheduler_config.json.
 *
 *     wf_dit_sampler_config cfg;
 *     char err[256];
 *     if (wf_dit_sampler_config_load("model/scheduler/scheduler_config.json", &cfg, err,
 *                                    sizeof err) != WF_OK) ...;
 *     cfg.eta = req_eta;                                    // request overrides, optional
 *     wf_dit_schedule *s;
 *     if (wf_dit_schedule_new(&cfg, n_steps, &s, err, sizeof err) != WF_OK) ...;
 *     wf_dit_noise_fill(key, WF_DIT_NOISE_STEP_INIT, 0, x, n);
 *     wf_dit_scale(x, n, wf_dit_schedule_init_sigma(s));
 *     for (int i = 0; i < wf_dit_schedule_n_steps(s); i++) {
 *         // model input = x * wf_dit_schedule_input_scale(s, i), timestep
 *         // wf_dit_schedule_timestep(s, i); CFG: wf_dit_cfg_combine(...)
 *         wf_dit_step_io io = {.model_out = eps, .model_channels = C, .x = x, .x_prev = x,
 *                              .channels = C, .plane = H * W, .key = key};
 *         wf_dit_schedule_step(s, i, &io);
 *     }
 *     wf_dit_schedule_free(s);
 *
 * A step is a pure function of (schedule, step index i, model output, x_t, noise key): all that
 * lives between steps is (latent, i, key), so consecutive steps may run on different workers.
 * The noise a step draws is wf_dit_noise_fill(key, i, element) (engine/dit/noise.h), or, for
 * parity tests, the caller's io.noise.
 *
 * Semantics follow diffusers' schedulers exactly (their set_timesteps / step / scale_model_input
 * / init_noise_sigma): beta schedules linear, scaled_linear, squaredcos_cap_v2; timestep
 * spacings leading (+ steps_offset), trailing, linspace; prediction types epsilon, v_prediction,
 * sample (Euler: epsilon, v_prediction, sample; flow matching: the model output is the
 * velocity). DDPM variance types fixed_small, fixed_small_log, fixed_large and
 * learned_range (model output of 2C channels, the second half the variance interpolation,
 * as DiT). DDIM: eta, clip_sample; the noise estimate is re-derived from the clipped x0 (diffusers'
 * use_clipped_model_output=True). Euler: s_churn = 0, interpolation linear, final sigma zero.
 * Flow: static shift (no dynamic shifting). Not implemented: "learned" and "fixed_large_log"
 * variances (the latter takes the square root of a negative log in diffusers 0.31). Options
 * outside these are WF_EUNSUPPORTED with the option named; misspelled names are WF_EINVAL
 * naming the value.
 *
 * Model outputs with 2C channels (learned sigma) are accepted by every sampler; only DDPM
 * learned_range reads the second half (DiT's pipeline drops it for the others).
 *
 * Ownership: a schedule is immutable after wf_dit_schedule_new; share it between threads freely.
 * The step allocates nothing. */
#ifndef WF_ENGINE_DIT_SAMPLER_H
#define WF_ENGINE_DIT_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/dit/noise.h"
#include "proto/base/status.h"

typedef enum wf_dit_sampler_kind {
    WF_DIT_SAMPLER_KIND_DDPM,       /* DDPMScheduler */
    WF_DIT_SAMPLER_KIND_DDIM,       /* DDIMScheduler */
    WF_DIT_SAMPLER_KIND_EULER,      /* EulerDiscreteScheduler */
    WF_DIT_SAMPLER_KIND_FLOW_EULER, /* FlowMatchEulerDiscreteScheduler */
} wf_dit_sampler_kind;

typedef enum wf_dit_beta_schedule {
    WF_DIT_BETA_SCHEDULE_LINEAR,
    WF_DIT_BETA_SCHEDULE_SCALED_LINEAR,
    WF_DIT_BETA_SCHEDULE_COSINE, /* "squaredcos_cap_v2" */
} wf_dit_beta_schedule;

typedef enum wf_dit_spacing {
    WF_DIT_SPACING_LEADING,
    WF_DIT_SPACING_TRAILING,
    WF_DIT_SPACING_LINSPACE,
} wf_dit_spacing;

typedef enum wf_dit_prediction {
    WF_DIT_PREDICTION_EPSILON,
    WF_DIT_PREDICTION_V,      /* "v_prediction" */
    WF_DIT_PREDICTION_SAMPLE, /* "sample" (Euler also accepts "original_sample") */
} wf_dit_prediction;

typedef enum wf_dit_variance {
    WF_DIT_VARIANCE_FIXED_SMALL,
    WF_DIT_VARIANCE_FIXED_SMALL_LOG,
    WF_DIT_VARIANCE_FIXED_LARGE,
    WF_DIT_VARIANCE_LEARNED_RANGE,
} wf_dit_variance;

/* A scheduler_config.json's meaning. Fields a sampler does not use are ignored. */
typedef struct wf_dit_sampler_config {
    wf_dit_sampler_kind kind;
    int num_train_timesteps;
    double beta_start, beta_end;
    wf_dit_beta_schedule beta_schedule;
    wf_dit_spacing spacing;
    int steps_offset;
    wf_dit_prediction prediction;
    wf_dit_variance variance; /* DDPM */
    bool clip_sample;         /* DDPM, DDIM */
    double clip_sample_range; /* DDPM, DDIM */
    bool set_alpha_to_one;    /* DDIM */
    double shift;             /* flow matching */
    double eta;               /* DDIM; a request parameter, 0 by default */
} wf_dit_sampler_config;

/* The defaults of the diffusers class for `kind` (its __init__ defaults; eta 0). */
void wf_dit_sampler_config_default(wf_dit_sampler_kind kind, wf_dit_sampler_config *cfg);

/* Maps a sampler name to its kind: a diffusers class name ("DDIMScheduler") or a short name
 * ("ddpm", "ddim", "euler", "flow_euler"). WF_EINVAL naming the value if unknown. */
wf_status wf_dit_sampler_kind_parse(const char *name, wf_dit_sampler_kind *kind, char *err,
                                    size_t errlen);
const char *wf_dit_sampler_kind_name(wf_dit_sampler_kind kind); /* short name */

/* *out = the defaults of `kind` with base's training schedule kept (num_train_timesteps, betas,
 * beta schedule, prediction type): how a model trained under one sampler is sampled with
 * another. kind == base->kind copies base. */
void wf_dit_sampler_config_switch(const wf_dit_sampler_config *base, wf_dit_sampler_kind kind,
                                  wf_dit_sampler_config *out);

/* Parses scheduler_config.json text (len bytes): "_class_name" picks the kind, the other keys
 * override that class's defaults. WF_EFORMAT: not JSON, not an object, a key of the wrong type;
 * WF_EINVAL: an unknown class, beta schedule, spacing, prediction or variance type (the message
 * names it) or an out-of-range number; WF_EUNSUPPORTED: a diffusers option weft does not
 * implement (trained_betas, thresholding, rescale_betas_zero_snr, karras sigmas, dynamic
 * shifting, ...). err gets one line. */
wf_status wf_dit_sampler_config_parse(const char *json, size_t len, wf_dit_sampler_config *cfg,
                                      char *err, size_t errlen);
/* As parse, reading the file at path (WF_EIO / WF_ENOTFOUND if it cannot be read). */
wf_status wf_dit_sampler_config_load(const char *path, wf_dit_sampler_config *cfg, char *err,
                                     size_t errlen);

typedef struct wf_dit_schedule wf_dit_schedule;

/* Builds the n_steps-step schedule of cfg (diffusers' set_timesteps). WF_EINVAL: n_steps < 1 or
 * more than num_train_timesteps, a bad config value; WF_ENOMEM. On error *out is NULL. */
wf_status wf_dit_schedule_new(const wf_dit_sampler_config *cfg, int n_steps, wf_dit_schedule **out,
                              char *err, size_t errlen);
void wf_dit_schedule_free(wf_dit_schedule *s); /* NULL is a no-op */

int wf_dit_schedule_n_steps(const wf_dit_schedule *s);
const wf_dit_sampler_config *wf_dit_schedule_config(const wf_dit_schedule *s);
/* The timestep the model is given at step i (integral for DDPM/DDIM, fractional possible for
 * Euler; sigma * num_train_timesteps for flow matching). */
double wf_dit_schedule_timestep(const wf_dit_schedule *s, int i);
/* Scale of the initial standard-normal latent (diffusers' init_noise_sigma). */
float wf_dit_schedule_init_sigma(const wf_dit_schedule *s);
/* Factor the model input is multiplied by at step i (scale_model_input; 1 except Euler). */
float wf_dit_schedule_input_scale(const wf_dit_schedule *s, int i);

/* One step's buffers, for one image: planes of `plane` floats, channels-major ([C][H*W]). */
typedef struct wf_dit_step_io {
    const float *model_out; /* [model_channels][plane] */
    int model_channels;     /* channels, or 2 * channels (learned sigma) */
    const float *x;         /* x_t [channels][plane], the unscaled latent */
    float *x_prev;          /* out: x_{t-1}; may equal x (in place) */
    int channels;
    size_t plane;
    wf_dit_noise_key key; /* noise of step i is wf_dit_noise_fill(key, i, ...) */
    const float *noise;   /* optional: the step's standard-normal noise [channels][plane]
                             instead of the generator (parity tests) */
} wf_dit_step_io;

/* x_prev = step i of the schedule. WF_EINVAL: NULL pointers, i out of range, channels < 1,
 * model_channels not C or 2C, learned_range without 2C channels. No allocation. */
wf_status wf_dit_schedule_step(const wf_dit_schedule *s, int i, const wf_dit_step_io *io);

/* Classifier-free guidance as DiT's pipeline: out[j] = uncond[j] + scale * (cond[j] - uncond[j])
 * for j < n_guided (the eps channels), out[j] = cond[j] for n_guided <= j < n (the learned-sigma
 * channels). out may alias cond or uncond. */
void wf_dit_cfg_combine(float *out, const float *cond, const float *uncond, size_t n_guided,
                        size_t n, float scale);

/* x[j] *= scale, j < n. */
void wf_dit_scale(float *x, size_t n, float scale);

#endif
