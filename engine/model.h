/* A llama-family model's hyper-parameters and weights, read from a GGUF file. Weights are not
 * copied: every wf_weight points into the file mapping, which lives as long as the model.
 *
 *     wf_model *m;
 *     char err[256];
 *     if (wf_model_load(path, &m, err, sizeof err) != WF_OK) { log(err); return; }
 *     printf("%d layers, %d heads\n", m->hp.n_layer, m->hp.n_head);
 *     wf_model_free(m);
 *
 * Supported architectures: `llama` (SmolLM2, TinyLlama, Llama 2/3: adjacent-pair RoPE, optional
 * llama3 rope_freqs.weight), `qwen2` (Q/K/V biases, NeoX half rotation) and `qwen3` (NeoX,
 * per-head query/key RMSNorm, no biases), the mapping llama.cpp uses. RoPE scaling: linear,
 * YaRN (rope.scaling.type = yarn, with rope.scaling.original_context_length and the optional
 * yarn ext/attn/beta keys) and Llama 3's per-frequency factors (rope_freqs.weight). `gemma3`:
 * scaled embeddings, q/k norms, post-attention and post-FFN norms, GeGLU, interleaved
 * sliding-window layers (five local to one global, as llama.cpp) with RoPE base 10000. Every tensor the forward pass reads is checked at load: present, of a type
 * weft has kernels for, with the shape the hyper-parameters imply; errors name the tensor.
 * Thread-safety: a loaded model is immutable; any number of threads may read it. */
#ifndef WF_ENGINE_MODEL_H
#define WF_ENGINE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ggml_types.h"
#include "engine/gguf.h"
#include "proto/base/status.h"

typedef enum wf_rope_kind {
    WF_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama */
    WF_ROPE_NEOX = 1, /* rotate halves (x[i], x[i + n_rot/2]): qwen2 */
} wf_rope_kind;

typedef enum wf_arch {
    WF_ARCH_LLAMA = 0,
    WF_ARCH_QWEN2 = 1,
    WF_ARCH_QWEN3 = 2, /* qwen2 without biases, with per-head query/key RMSNorm */
    WF_ARCH_GEMMA3 = 3,
} wf_arch;

typedef enum wf_ffn_act {
    WF_FFN_SILU = 0, /* SwiGLU: silu(gate) * up */
    WF_FFN_GELU = 1, /* GeGLU: gelu_tanh(gate) * up (gemma) */
} wf_ffn_act;

typedef struct wf_model_hparams {
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;   /* GQA: n_head % n_head_kv == 0 */
    int head_dim;    /* key/value length per head */
    int n_rot;       /* rotated dimensions per head (<= head_dim, even) */
    int n_ff;
    int n_vocab;
    int n_ctx_train;
    float rms_eps;
    float rope_freq_base;
    float rope_freq_scale; /* 1 / scaling factor (linear or YaRN) */
    /* YaRN (rope.scaling.type = yarn), as llama.cpp's ggml_rope_ext takes it: ext_factor 0
     * means plain (linear) scaling; corr_dims are the ramp ends from beta_fast/beta_slow. */
    float yarn_ext_factor;
    float yarn_attn_factor;
    float yarn_corr_dims[2];
    wf_rope_kind rope_kind;
    bool qkv_bias;
    bool qk_norm;          /* per-head RMSNorm of q and k before RoPE (qwen3, gemma3) */
    wf_ffn_act ffn_act;
    /* Gemma 3: embeddings scaled by sqrt(n_embd); q scaled by attn_q_scale before attention
     * (then no softmax scale; 0: softmax scale 1/sqrt(head_dim) as llama); sliding-window
     * layers (wf_layer_weights.swa) see the last n_swa positions and use their own RoPE base
     * without scaling. */
    float embd_scale;      /* 0: none */
    float attn_q_scale;
    int n_swa;             /* 0: no sliding-window layers */
    float rope_freq_base_swa;
    bool tied_output;      /* no output.weight: token_embd.weight is the output projection */
} wf_model_hparams;

/* One tensor as the forward pass sees it: rows of ne0 elements, ne1 rows. */
typedef struct wf_weight {
    const void *data; /* NULL: absent (optional tensors) */
    wf_ggml_type type;
    int64_t ne0, ne1;
    size_t row_bytes;
    size_t bytes;
} wf_weight;

typedef struct wf_layer_weights {
    wf_weight attn_norm;   /* F32 [n_embd] */
    wf_weight wq, wk, wv;  /* [n_embd] -> n_head*head_dim, n_head_kv*head_dim */
    wf_weight bq, bk, bv;  /* F32 biases (qwen2) or absent */
    wf_weight q_norm, k_norm; /* F32 [head_dim] per-head RMSNorm weights (qwen3) or absent */
    wf_weight wo;          /* n_head*head_dim -> n_embd */
    wf_weight attn_post_norm; /* F32 [n_embd] on the attention output (gemma3) or absent */
    wf_weight ffn_norm;    /* F32 [n_embd] */
    wf_weight ffn_post_norm;  /* F32 [n_embd] on the FFN output (gemma3) or absent */
    wf_weight w_gate, w_up; /* n_embd -> n_ff */
    wf_weight w_down;      /* n_ff -> n_embd */
    bool swa;              /* sliding-window (local) attention layer */
} wf_layer_weights;

typedef struct wf_model {
    wf_gguf *gguf; /* owned: the mapping every weight points into */
    wf_arch arch;
    char arch_name[16];
    char name[128];
    wf_model_hparams hp;
    wf_weight tok_embd;    /* [n_vocab rows of n_embd] */
    wf_weight output_norm; /* F32 [n_embd] */
    wf_weight output;      /* == tok_embd when tied */
    wf_weight rope_freqs;  /* F32 [n_rot/2] llama3 frequency factors, or absent */
    wf_layer_weights *layers;
    size_t weight_bytes;   /* bytes the forward pass reads per token (tied output counted once) */
    int64_t matmul_macs;   /* multiply-adds per token in the weight matmuls (output included) */
} wf_model;

/* Opens `path` and loads the model. WF_OK and *out (free with wf_model_free), or the status
 * of wf_gguf_open, WF_EUNSUPPORTED (architecture, rope scaling, tensor type), WF_EFORMAT
 * (missing key or tensor, wrong shape/type), WF_ENOMEM; err names the key or tensor. */
wf_status wf_model_load(const char *path, wf_model **out, char *err, size_t errlen);

/* Same from an opened file; takes ownership of g on success AND on failure. */
wf_status wf_model_load_gguf(wf_gguf *g, wf_model **out, char *err, size_t errlen);

void wf_model_free(wf_model *m); /* NULL is a no-op */

#endif
