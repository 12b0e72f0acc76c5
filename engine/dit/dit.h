/* The DiT model on the CPU (Peebles & Xie; diffusers' DiTTransformer2DModel): loading from a
 * diffusers folder or an original-layout .safetensors file, and one forward pass (the model
 * output for a batch of latents at per-item timesteps and class labels).
 *
 *     wf_dit_options opt = wf_dit_options_default();
 *     opt.max_batch = 4;                                  // buffers reserved once, here
 *     wf_dit *m;
 *     if (wf_dit_load("models/DiT-XL-2-256", &opt, &m, err, sizeof err) != WF_OK) ...;
 *     const wf_dit_config *c = wf_dit_get_config(m);
 *     // x: B x in_channels x H x W, t: B floats, y: B labels (c->num_classes = the null class)
 *     st = wf_dit_forward(m, pool, B, H, W, x, t, y, out, NULL, err, sizeof err);
 *     // out: B x out_channels x H x W (out_channels = 2 x in_channels with learned sigma)
 *     wf_dit_free(m);
 *
 * Both layouts map to one weight set; diffusers' per-block copies of the timestep MLP and the
 * label table must agree (one is kept). Timestep features: cos|sin of t * 10000^(-i/(128 -
 * shift)), shift 1 for diffusers models and 0 for original DiT files (overridable).
 *
 * Ownership: the model owns its weights and every buffer; nothing is allocated by forward.
 * Thread-safety: forward uses the model's buffers, so one forward at a time per model (it runs
 * on the given pool's threads); the config and paths are immutable after load.
 * Statuses: load returns WF_ENOTFOUND/WF_EIO (files), WF_EFORMAT (corrupt safetensors or JSON,
 * missing tensor, mismatched shape, per-block copies that differ), WF_EUNSUPPORTED (an
 * activation, norm or dtype this build does not run), WF_ENOMEM; err names the file, tensor or
 * key. forward returns WF_EINVAL (size not divisible by the patch, batch or size (or patch
 * count, with max_tokens) above the reserved maximum, label out of range, pool larger than reserved), with a message. */
#ifndef WF_ENGINE_DIT_DIT_H
#define WF_ENGINE_DIT_DIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/cpu/threadpool.h"
#include "proto/base/status.h"

typedef struct wf_dit wf_dit;

typedef enum wf_dit_layout {
    WF_DIT_LAYOUT_DIFFUSERS = 0, /* transformer/config.json + diffusion_pytorch_model.safetensors */
    WF_DIT_LAYOUT_ORIGINAL = 1,  /* facebookresearch/DiT keys in one .safetensors file */
} wf_dit_layout;

typedef struct wf_dit_config {
    int in_channels, out_channels; /* out = 2 x in when the model learns sigma */
    int patch_size;
    int sample_size;               /* latent side the positions' base grid is built for */
    int hidden, heads, head_dim, depth, ffn;
    int num_classes;               /* label num_classes is the null (unconditional) class */
    int timestep_shift;            /* downscale_freq_shift: 1 diffusers, 0 original */
    float norm_eps;                /* the feed-forward LayerNorm's eps (first/out norms: 1e-6) */
    bool norm_affine;              /* that LayerNorm has weight and bias */
    bool bf16;                     /* the blocks' qkv/proj/fc1/fc2 weights held as bf16 (bf16
                                    * GEMMs, fp32 accumulation); other layers stay fp32 */
    wf_dit_layout layout;
} wf_dit_config;

/* Where the pieces of a diffusers folder are (NULL when absent), for the pipeline's other
 * half (scheduler, VAE). */
typedef struct wf_dit_paths {
    const char *root;               /* the folder or file given to load */
    const char *model_index;        /* model_index.json */
    const char *transformer_config; /* transformer/config.json */
    const char *weights;            /* the .safetensors file the weights came from */
    const char *scheduler_config;   /* scheduler/scheduler_config.json */
    const char *vae_dir;            /* vae/ */
} wf_dit_paths;

typedef struct wf_dit_options {
    int max_batch;      /* forward batches up to this (default 4) */
    int max_height;     /* largest latent height/width forward accepts; 0 = sample_size */
    int max_width;
    int max_tokens;     /* > 0: forward accepts any grid of at most this many patches (any
                         * shape, max_height/max_width then unused): other image sizes than
                         * the native one with memory bounded by the token count */
    int n_threads;      /* largest pool forward will run on; 0 = online cores */
    bool bf16;          /* hold weights as bf16 */
    int timestep_shift; /* -1 = the layout's convention */
    int heads;          /* 0 = config (diffusers) or inferred from the width (original) */
    int sample_size;    /* original files without pos_embed: 0 = 32 (256-pixel models) */
    float norm_eps;     /* the feed-forward LayerNorm's eps; 0 = the layout's (diffusers config
                         * norm_eps, 1e-5 by default; original DiT 1e-6) */
} wf_dit_options;

wf_dit_options wf_dit_options_default(void);

/* Loads a diffusers folder (containing model_index.json, or a transformer folder itself with
 * config.json) or an original-layout .safetensors file. On failure *out is NULL. */
wf_status wf_dit_load(const char *path, const wf_dit_options *opt, wf_dit **out, char *err,
                      size_t errlen);
void wf_dit_free(wf_dit *m);

/* Re-reserves the forward's buffers for grids of up to max_tokens patches of any shape (as
 * wf_dit_options.max_tokens; max_batch and threads kept), e.g. once the config is known. Not
 * during a forward. WF_EINVAL, WF_ENOMEM (the model then has no buffers: free it). */
wf_status wf_dit_reserve_tokens(wf_dit *m, int max_tokens, char *err, size_t errlen);

const wf_dit_config *wf_dit_get_config(const wf_dit *m);
const wf_dit_paths *wf_dit_get_paths(const wf_dit *m);

/* True if path looks like a DiT: a folder with model_index.json naming a DiT transformer or
 * with transformer/config.json (or config.json) of class DiTTransformer2DModel, or a
 * .safetensors file with DiT keys (original or diffusers). Reads headers only. */
bool wf_dit_detect(const char *path);

/* Receives intermediates during forward: what = "patch" (B x T x D, after positions), "cond"
 * (B x 1 x D, timestep + label embedding), "block" (B x T x D after block `index`), "final"
 * (B x T x p*p*out_C, before unpatchify). data is valid only during the call. */
typedef void (*wf_dit_dump_fn)(void *user, const char *what, int index, const float *data,
                               int batch, int rows, int cols);
typedef struct wf_dit_dump {
    wf_dit_dump_fn fn;
    void *user;
} wf_dit_dump;

/* One model evaluation. x: batch x in_C x height x width fp32; t: batch timesteps (any float);
 * labels: batch ints in [0, num_classes]; out: batch x out_C x height x width. pool may be
 * NULL (caller thread). dump may be NULL. No allocation. */
wf_status wf_dit_forward(wf_dit *m, wf_threadpool *pool, int batch, int height, int width,
                         const float *x, const float *t, const int32_t *labels, float *out,
                         const wf_dit_dump *dump, char *err, size_t errlen);

/* Multiply-adds of one forward (for benchmarks' GFLOP/s): GEMMs and attention. */
double wf_dit_forward_macs(const wf_dit *m, int batch, int height, int width);

#endif
