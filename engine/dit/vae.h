/* The decoder half of diffusers' AutoencoderKL (the sd-vae-ft-ema / -mse topology): latents ->
 * image, fp32 on the CPU.
 *
 *     wf_dit_vae_config cfg;
 *     wf_dit_vae_config_load("model/vae/config.json", &cfg, err, sizeof err);
 *     wf_dit_vae *vae;
 *     wf_dit_vae_new(&cfg, my_lookup, my_reader, 32, 32, pool, &vae, err, sizeof err);
 *     wf_dit_vae_decode(vae, latent, 32, 32, image);   // [4][32][32] -> [3][256][256]
 *     wf_dit_vae_free(vae);
 *
 * Topology (diffusers 0.31 Decoder): z / scaling_factor -> post_quant_conv (1x1) -> conv_in (3x3)
 * -> mid block (ResNet, single-head self-attention, ResNet) -> up blocks, from the widest
 * (block_out_channels reversed), of layers_per_block + 1 ResNets each, all but the last followed
 * by nearest-2x upsampling + 3x3 conv -> GroupNorm + SiLU -> conv_out (3x3). A ResNet is
 * GroupNorm(norm_num_groups, eps 1e-6) + SiLU + 3x3 conv, twice, plus the input (through a 1x1
 * conv_shortcut when the channel count changes). The image is in [-1, 1] (not clamped).
 *
 * Weights come through a lookup callback (so any container reader can serve them: the
 * safetensors reader in production, generated tensors in tests) under diffusers' names
 * ("decoder.up_blocks.0.resnets.1.conv2.weight", ...; the attention's to_q/to_k/to_v/to_out.0,
 * or the older query/key/value/proj_attn names). Each is checked against the shape the config
 * implies and copied to fp32 at load; the lookup's memory is not referenced afterwards.
 *
 * Memory: all activations are sized at load for the largest latent (max_h x max_w); decode
 * allocates nothing. Thread-safety: one decode at a time per wf_dit_vae (it owns the scratch);
 * the pool is borrowed and driven only by decode. */
#ifndef WF_ENGINE_DIT_VAE_H
#define WF_ENGINE_DIT_VAE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

typedef struct wf_threadpool wf_threadpool; /* engine/cpu/threadpool.h */

#define WF_DIT_VAE_MAX_BLOCKS 8

typedef struct wf_dit_vae_config {
    int latent_channels;
    int out_channels;
    int n_blocks;
    int block_out_channels[WF_DIT_VAE_MAX_BLOCKS];
    int layers_per_block;
    int norm_num_groups;
    double scaling_factor;
    double shift_factor; /* 0 when absent or null */
    bool mid_block_add_attention;
    bool use_post_quant_conv;
} wf_dit_vae_config;

/* Parses vae/config.json text. WF_EFORMAT: not a JSON object, wrong types, missing
 * block_out_channels; WF_EUNSUPPORTED: another _class_name than AutoencoderKL, up block types
 * other than UpDecoderBlock2D, more than WF_DIT_VAE_MAX_BLOCKS blocks; WF_EINVAL: channel counts
 * not divisible by norm_num_groups, non-positive sizes or scaling_factor. err gets one line. */
wf_status wf_dit_vae_config_parse(const char *json, size_t len, wf_dit_vae_config *cfg, char *err,
                                  size_t errlen);
wf_status wf_dit_vae_config_load(const char *path, wf_dit_vae_config *cfg, char *err,
                                 size_t errlen);

typedef enum wf_dit_dtype { WF_DIT_DTYPE_F32, WF_DIT_DTYPE_F16, WF_DIT_DTYPE_BF16 } wf_dit_dtype;

/* A tensor as a container reader sees it: row-major, `data` valid during the lookup call and
 * until wf_dit_vae_new returns. */
typedef struct wf_dit_tensor_view {
    wf_dit_dtype dtype;
    int n_dims;
    int64_t shape[4];
    const void *data;
} wf_dit_tensor_view;

/* Finds `name`: WF_OK and *out filled, WF_ENOTFOUND if absent, another status on error. */
typedef wf_status (*wf_dit_weight_lookup)(void *user, const char *name, wf_dit_tensor_view *out);

typedef struct wf_dit_vae wf_dit_vae;

/* Loads every decoder weight through lookup and sizes the scratch for latents up to
 * max_h x max_w. pool may be NULL (single-threaded) and must outlive the decoder.
 * WF_ENOTFOUND: a tensor is missing (named in err); WF_EINVAL: a shape mismatch (tensor,
 * shape and expected shape in err) or bad sizes; WF_ENOMEM. On error *out is NULL. */
wf_status wf_dit_vae_new(const wf_dit_vae_config *cfg, wf_dit_weight_lookup lookup, void *user,
                         int max_h, int max_w, wf_threadpool *pool, wf_dit_vae **out, char *err,
                         size_t errlen);
void wf_dit_vae_free(wf_dit_vae *vae); /* NULL is a no-op */

/* Output side per latent side: 2^(n_blocks - 1). */
int wf_dit_vae_upscale(const wf_dit_vae *vae);

/* image[out_channels][h*up][w*up] = decode(latent[latent_channels][h][w]), where up =
 * wf_dit_vae_upscale. Any shape of at most max_h x max_w latent points (the scratch is sized by
 * the point count): 2 x 8 decodes on a VAE made for 4 x 4. WF_EINVAL: NULL pointers, h or w < 1
 * or h x w above the load-time maximum.
 * No allocation. */
wf_status wf_dit_vae_decode(wf_dit_vae *vae, const float *latent, int h, int w, float *image);

#endif
