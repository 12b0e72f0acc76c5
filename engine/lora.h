/* LoRA adapters of a loaded backbone: llama.cpp's GGUF adapters and PEFT's safetensors folders,
 * read into f32 A/B pairs per (layer, projection) and validated against the backbone's shapes.
 * An adapter is never merged into the weights: the forward pass adds scale * B (A x) per row
 * (engine/forward.h, wf_fwd_seq.loras), so one backbone serves many adapters in one batch.
 *
 *     wf_lora *ad;
 *     char err[256];
 *     if (wf_lora_load(model, "adapters/sql.gguf", &ad, err, sizeof err) != WF_OK) { log(err); }
 *     wf_lora_use use = {.lora = ad, .scale = 1.0f};       // user scale, as llama.cpp's
 *     wf_fwd_seq s = {..., .loras = &use, .n_loras = 1};   // this sequence runs with it
 *     ...
 *     wf_lora_free(ad);   // after the last batch that used it
 *
 * Formats (chosen by content, not by name):
 *  - GGUF: general.type = "adapter", adapter.type = "lora", general.architecture equal to the
 *    backbone's, optional adapter.lora.alpha; tensors "<weight name>.lora_a" (ne = [n_in,
 *    rank]) and "<weight name>.lora_b" (ne = [rank, n_out]), as llama.cpp's
 *    convert_lora_to_gguf.py writes them.
 *  - PEFT: a folder (or its adapter_model.safetensors) with adapter_config.json (r, lora_alpha,
 *    target_modules, use_rslora) and tensors "...layers.<i>.<self_attn|mlp>.<module>.lora_A.weight"
 *    ([rank, n_in]) and "...lora_B.weight" ([n_out, rank]); modules q_proj, k_proj, v_proj,
 *    o_proj, gate_proj, up_proj, down_proj map to attn_q, attn_k, attn_v, attn_output,
 *    ffn_gate, ffn_up, ffn_down. For the `llama` architecture the rows of q_proj/k_proj's B are
 *    permuted as llama.cpp's converter permutes the backbone's Q/K rows (interleaved RoPE).
 * Scale of one pair: user_scale * alpha / rank when alpha != 0, else user_scale (llama.cpp's
 * rule; PEFT's lora_alpha / r is the same, use_rslora's lora_alpha / sqrt(r) is folded into
 * alpha). A/B of type F32, F16 or BF16 are kept in their type: the forward pass multiplies
 * by them as ggml does by such weights (the activations rounded to F16/BF16 first for F16/BF16
 * tensors), so greedy tokens equal llama.cpp's with the same file.
 * Errors (err names the tensor or key): WF_ENOTFOUND / WF_EIO (files), WF_EFORMAT (not an
 * adapter, truncated or corrupt file, shape mismatch with the backbone, rank 0, A without B,
 * a bad adapter_config.json), WF_EUNSUPPORTED (another architecture, a target weft does not
 * adapt such as token_embd or lm_head, rank above WF_LORA_MAX_RANK, DoRA, rank/alpha
 * patterns, a tensor type other than F32/F16/BF16), WF_ENOMEM.
 * Thread-safety: immutable after load; any number of threads may read it. */
#ifndef WF_ENGINE_LORA_H
#define WF_ENGINE_LORA_H

#include <stddef.h>

#include "engine/model.h"
#include "proto/base/status.h"

/* Largest rank accepted: the forward pass reserves its low-rank scratch for it at start. */
#define WF_LORA_MAX_RANK 512

typedef enum wf_lora_target {
    WF_LORA_WQ = 0,
    WF_LORA_WK,
    WF_LORA_WV,
    WF_LORA_WO,
    WF_LORA_W_GATE,
    WF_LORA_W_UP,
    WF_LORA_W_DOWN,
    WF_LORA_N_TARGETS
} wf_lora_target;

/* The low-rank update of one weight W (n_out x n_in): W + scale * B A. */
typedef struct wf_lora_mat {
    const void *a;  /* rank rows of n_in elements of a_type; NULL: this weight is not adapted */
    const void *b;  /* n_out rows of rank elements of b_type */
    wf_ggml_type a_type, b_type; /* F32, F16 or BF16, as in the file */
    int rank;
} wf_lora_mat;

typedef struct wf_lora {
    char format[8];   /* "gguf" or "peft" */
    int n_layer;
    int max_rank;
    int n_mats;       /* adapted weights */
    float alpha;      /* 0: none */
    size_t bytes;     /* A and B held */
    wf_lora_mat *mats; /* [n_layer * WF_LORA_N_TARGETS] */
} wf_lora;

/* One adapter as a sequence uses it, with the user's scale (wf_lora_scale). */
typedef struct wf_lora_use {
    const wf_lora *lora;
    float scale;
} wf_lora_use;

/* Loads the adapter at path (a GGUF file, a PEFT folder, or a PEFT .safetensors file next to
 * its adapter_config.json) for backbone m. WF_OK and *out (free with wf_lora_free), or an
 * error as listed above with err naming the problem; *out is NULL then. */
wf_status wf_lora_load(const wf_model *m, const char *path, wf_lora **out, char *err,
                       size_t errlen);

void wf_lora_free(wf_lora *l); /* NULL is a no-op */

/* The pair of (layer, target), or NULL if that weight is not adapted. */
const wf_lora_mat *wf_lora_mat_get(const wf_lora *l, int layer, wf_lora_target t);

/* The factor of B A for a pair: user_scale * alpha / rank, or user_scale when alpha is 0,
 * evaluated in that order in f32 as llama.cpp does. */
float wf_lora_scale(const wf_lora *l, const wf_lora_mat *mt, float user_scale);

/* "attn_q", "attn_k", ... (the GGUF weight name part). */
const char *wf_lora_target_name(wf_lora_target t);

#endif
