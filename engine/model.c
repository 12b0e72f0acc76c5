/* Model loading: hyper-parameters from GGUF metadata (as llama.cpp names them) and weight
 * tensors validated against them. Nothing is copied; weights point into the mapping. */
#include "engine/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/quant.h"

/* Metadata key "<arch>.<suffix>". */
static const char *akey(const wf_model *m, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", m->arch_name, suffix);
    return buf;
}

static wf_status get_u32_req(const wf_model *m, const char *suffix, int *out, char *err,
                             size_t errlen) {
    char k[128];
    uint32_t v;
    if (!wf_gguf_get_u32(m->gguf, akey(m, suffix, k, sizeof k), &v) || v == 0 || v > (1u << 30)) {
        wf_errorf(err, errlen, "model metadata: missing or invalid key %s", k);
        return WF_EFORMAT;
    }
    *out = (int)v;
    return WF_OK;
}

static int get_u32_opt(const wf_model *m, const char *suffix, int dflt) {
    char k[128];
    uint32_t v;
    if (!wf_gguf_get_u32(m->gguf, akey(m, suffix, k, sizeof k), &v) || v == 0 || v > (1u << 30))
        return dflt;
    return (int)v;
}

static bool str_is(wf_gguf_str s, const char *lit) {
    size_t n = strlen(lit);
    return s.len == n && memcmp(s.data, lit, n) == 0;
}

/* YaRN's ramp ends, as ggml_rope_yarn_corr_dims computes them (float arithmetic). */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2 * 3.14159265358979323846f)) / (2 * logf(base));
}

/* Rope scaling, as llama.cpp reads it: rope.scaling.type (none/linear/yarn) with
 * rope.scaling.factor, or the older rope.scale_linear. Llama 3's scaling is not a type in
 * GGUF: its converter writes the per-frequency factors as rope_freqs.weight (load_weights).
 * For YaRN the magnitude factor follows llama_context: mscale(factor) = 1 + 0.1 ln(factor),
 * divided again by the (1 + 0.1 ln(factor)) ggml's rope_yarn multiplies in, so the product
 * carries llama.cpp's rounding. */
static wf_status load_rope_scaling(wf_model *m, char *err, size_t errlen) {
    wf_model_hparams *hp = &m->hp;
    char k[128];
    hp->rope_freq_scale = 1.0f;
    hp->yarn_ext_factor = 0.0f;
    hp->yarn_attn_factor = 1.0f;
    float factor = 0.0f;
    wf_gguf_str type = {0};
    bool has_type = wf_gguf_get_str(m->gguf, akey(m, "rope.scaling.type", k, sizeof k), &type);
    bool yarn = has_type && str_is(type, "yarn");
    if (has_type && !yarn && !str_is(type, "linear") && !str_is(type, "none")) {
        wf_errorf(err, errlen, "model: rope scaling type '%.*s' is not supported (linear, yarn)",
                (int)(type.len > 32 ? 32 : type.len), type.data);
        return WF_EUNSUPPORTED;
    }
    if (has_type && str_is(type, "none")) return WF_OK;
    if (!wf_gguf_get_f32(m->gguf, akey(m, "rope.scaling.factor", k, sizeof k), &factor))
        wf_gguf_get_f32(m->gguf, akey(m, "rope.scale_linear", k, sizeof k), &factor);
    if (factor != 0.0f) {
        if (!(factor > 0) || !isfinite(factor)) {
            wf_errorf(err, errlen, "model metadata: invalid rope scaling factor %g",
                    (double)factor);
            return WF_EFORMAT;
        }
        hp->rope_freq_scale = 1.0f / factor;
    }
    if (!yarn) return WF_OK;
    float v;
    if (wf_gguf_get_f32(m->gguf, akey(m, "rope.scaling.yarn_log_multiplier", k, sizeof k), &v) &&
        v != 0.0f) {
        wf_errorf(err, errlen, "model: YaRN with a log multiplier (DeepSeek) is not supported");
        return WF_EUNSUPPORTED;
    }
    float beta_fast = 32.0f, beta_slow = 1.0f, ext = 1.0f;
    wf_gguf_get_f32(m->gguf, akey(m, "rope.scaling.yarn_beta_fast", k, sizeof k), &beta_fast);
    wf_gguf_get_f32(m->gguf, akey(m, "rope.scaling.yarn_beta_slow", k, sizeof k), &beta_slow);
    wf_gguf_get_f32(m->gguf, akey(m, "rope.scaling.yarn_ext_factor", k, sizeof k), &ext);
    int n_ctx_orig = get_u32_opt(m, "rope.scaling.original_context_length", hp->n_ctx_train);
    hp->yarn_ext_factor = ext;
    if (ext != 0.0f) {
        const float f = 1.0f / hp->rope_freq_scale;
        float mscale = f <= 1.0f ? 1.0f : 0.1f * logf(f) + 1.0f;
        hp->yarn_attn_factor = mscale * (1.0f / (1.0f + 0.1f * logf(f)));
    }
    float start = floorf(yarn_corr_dim(hp->n_rot, n_ctx_orig, beta_fast, hp->rope_freq_base));
    float end = ceilf(yarn_corr_dim(hp->n_rot, n_ctx_orig, beta_slow, hp->rope_freq_base));
    hp->yarn_corr_dims[0] = start > 0 ? start : 0;
    hp->yarn_corr_dims[1] = end < (float)(hp->n_rot - 1) ? end : (float)(hp->n_rot - 1);
    return WF_OK;
}

static wf_status load_hparams(wf_model *m, char *err, size_t errlen) {
    wf_model_hparams *hp = &m->hp;
    wf_status st;
    char k[128];
    if ((st = get_u32_req(m, "embedding_length", &hp->n_embd, err, errlen)) != WF_OK ||
        (st = get_u32_req(m, "block_count", &hp->n_layer, err, errlen)) != WF_OK ||
        (st = get_u32_req(m, "attention.head_count", &hp->n_head, err, errlen)) != WF_OK ||
        (st = get_u32_req(m, "feed_forward_length", &hp->n_ff, err, errlen)) != WF_OK)
        return st;
    hp->n_head_kv = get_u32_opt(m, "attention.head_count_kv", hp->n_head);
    hp->n_ctx_train = get_u32_opt(m, "context_length", 2048);
    if (hp->n_head % hp->n_head_kv != 0) {
        wf_errorf(err, errlen, "model metadata: head_count %d is not a multiple of head_count_kv %d",
                hp->n_head, hp->n_head_kv);
        return WF_EFORMAT;
    }
    int hd_default = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : 0;
    hp->head_dim = get_u32_opt(m, "attention.key_length", hd_default);
    int vlen = get_u32_opt(m, "attention.value_length", hp->head_dim);
    if (hp->head_dim <= 0 || vlen != hp->head_dim || hp->head_dim % 2 != 0) {
        wf_errorf(err, errlen, "model metadata: unsupported head dimension (key %d, value %d)",
                hp->head_dim, vlen);
        return WF_EUNSUPPORTED;
    }
    hp->n_rot = get_u32_opt(m, "rope.dimension_count", hp->head_dim);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0) {
        wf_errorf(err, errlen, "model metadata: rope.dimension_count %d invalid for head_dim %d",
                hp->n_rot, hp->head_dim);
        return WF_EFORMAT;
    }
    if (!wf_gguf_get_f32(m->gguf, akey(m, "attention.layer_norm_rms_epsilon", k, sizeof k),
                         &hp->rms_eps))
        hp->rms_eps = 1e-5f;
    if (!wf_gguf_get_f32(m->gguf, akey(m, "rope.freq_base", k, sizeof k), &hp->rope_freq_base))
        hp->rope_freq_base = 10000.0f;
    if (!(hp->rms_eps >= 0) || !(hp->rope_freq_base > 0)) {
        wf_errorf(err, errlen, "model metadata: invalid rms epsilon or rope.freq_base");
        return WF_EFORMAT;
    }
    if ((st = load_rope_scaling(m, err, errlen)) != WF_OK) return st;
    hp->rope_kind = m->arch == WF_ARCH_LLAMA ? WF_ROPE_NORM : WF_ROPE_NEOX;
    hp->ffn_act = WF_FFN_SILU;
    if (m->arch == WF_ARCH_GEMMA3) {
        /* llama.cpp's gemma3 hparams: GeGLU, sqrt(n_embd) embedding scale, q scaled by
         * 1/sqrt(head_dim) (the 27B model, 62 layers, by 1/sqrt(n_embd / n_head)), local
         * layers with base 10000 unscaled. The converter already stores norm weights as
         * (1 + w), so the norms are plain RMSNorm. */
        hp->ffn_act = WF_FFN_GELU;
        hp->embd_scale = sqrtf((float)hp->n_embd);
        hp->attn_q_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                             : 1.0f / sqrtf((float)hp->head_dim);
        hp->n_swa = get_u32_opt(m, "attention.sliding_window", 0);
        hp->rope_freq_base_swa = 10000.0f;
        float cap;
        if ((wf_gguf_get_f32(m->gguf, akey(m, "attn_logit_softcapping", k, sizeof k), &cap) ||
             wf_gguf_get_f32(m->gguf, akey(m, "final_logit_softcapping", k, sizeof k), &cap)) &&
            cap != 0.0f) {
            wf_errorf(err, errlen, "model: gemma3 with logit soft-capping is not supported");
            return WF_EUNSUPPORTED;
        }
    }
    return WF_OK;
}

/* Looks a tensor up and checks its type and shape. ne1 == 0 means a 1-D tensor [ne0].
 * kind: 0 = matmul weight (needs vec_dot kernels), 1 = F32 vector, 2 = embedding rows
 * (needs to_float). */
enum { W_MATMUL = 0, W_F32 = 1, W_ROWS = 2 };

static wf_status get_weight(const wf_model *m, const char *name, int64_t ne0, int64_t ne1,
                            int kind, bool optional, wf_weight *w, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    const wf_gguf_tensor *t = wf_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (optional) return WF_OK;
        wf_errorf(err, errlen, "model: tensor %s is missing", name);
        return WF_EFORMAT;
    }
    int want_dims = ne1 == 0 ? 1 : 2;
    int64_t got1 = t->n_dims >= 2 ? t->ne[1] : 1;
    bool extra = (t->n_dims >= 3 && t->ne[2] != 1) || (t->n_dims >= 4 && t->ne[3] != 1);
    if (t->ne[0] != ne0 || (want_dims == 2 && got1 != ne1) || (want_dims == 1 && got1 != 1) ||
        extra) {
        wf_errorf(err, errlen,
                "model: tensor %s has shape [%lld, %lld], expected [%lld, %lld]", name,
                (long long)t->ne[0], (long long)got1, (long long)ne0,
                (long long)(ne1 == 0 ? 1 : ne1));
        return WF_EFORMAT;
    }
    const wf_ggml_type_info *ti = wf_ggml_type_info_get(t->type);
    const char *tname = ti ? ti->name : "unknown";
    if (kind == W_F32) {
        if (t->type != WF_GGML_TYPE_F32) {
            wf_errorf(err, errlen, "model: tensor %s has type %s, expected f32", name, tname);
            return WF_EUNSUPPORTED;
        }
    } else {
        const wf_quant_ops *ops = wf_quant_ops_get(t->type);
        bool ok = ti && ti->supported && ops && ops->to_float &&
                  (kind == W_ROWS || ops->vec_dot);
        if (ok && kind == W_MATMUL) {
            const wf_quant_ops *act = wf_quant_ops_get(ops->vec_dot_type);
            ok = act && (ops->vec_dot_type == WF_GGML_TYPE_F32 || act->from_float);
        }
        if (!ok) {
            wf_errorf(err, errlen, "model: tensor %s has type %s, which weft has no kernels for",
                    name, tname);
            return WF_EUNSUPPORTED;
        }
        if (ne0 % ti->block_size != 0) {
            wf_errorf(err, errlen, "model: tensor %s row length %lld is not a multiple of the %s "
                    "block size %d", name, (long long)ne0, tname, ti->block_size);
            return WF_EFORMAT;
        }
    }
    w->data = t->data;
    w->type = t->type;
    w->ne0 = ne0;
    w->ne1 = ne1 == 0 ? 1 : ne1;
    w->row_bytes = wf_quant_row_size(t->type, ne0);
    w->bytes = t->size;
    return WF_OK;
}

static wf_status load_weights(wf_model *m, char *err, size_t errlen) {
    const wf_model_hparams *hp = &m->hp;
    wf_status st;
    int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim,
            KV = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff;
    /* vocab: from the embedding matrix (llama.cpp's vocab_size key is optional) */
    const wf_gguf_tensor *te = wf_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te || te->n_dims < 2) {
        wf_errorf(err, errlen, "model: tensor token_embd.weight is missing or not 2-D");
        return WF_EFORMAT;
    }
    m->hp.n_vocab = (int)te->ne[1];
    if (te->ne[1] <= 0 || te->ne[1] > (1 << 24)) {
        wf_errorf(err, errlen, "model: token_embd.weight has an invalid vocabulary size %lld",
                (long long)te->ne[1]);
        return WF_EFORMAT;
    }
    if ((st = get_weight(m, "token_embd.weight", E, hp->n_vocab, W_ROWS, false, &m->tok_embd,
                         err, errlen)) != WF_OK ||
        (st = get_weight(m, "output_norm.weight", E, 0, W_F32, false, &m->output_norm, err,
                         errlen)) != WF_OK ||
        (st = get_weight(m, "output.weight", E, hp->n_vocab, W_MATMUL, true, &m->output, err,
                         errlen)) != WF_OK ||
        (st = get_weight(m, "rope_freqs.weight", hp->n_rot / 2, 0, W_F32, true, &m->rope_freqs,
                         err, errlen)) != WF_OK)
        return st;
    m->weight_bytes = m->tok_embd.bytes + m->output_norm.bytes;
    m->matmul_macs = E * hp->n_vocab;
    if (!m->output.data) {
        /* tied: the embedding matrix must also work as a matmul weight */
        if ((st = get_weight(m, "token_embd.weight", E, hp->n_vocab, W_MATMUL, false,
                             &m->output, err, errlen)) != WF_OK)
            return st;
        m->hp.tied_output = true;
    } else {
        m->weight_bytes += m->output.bytes;
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        wf_errorf(err, errlen, "model: out of memory");
        return WF_ENOMEM;
    }
    bool bias = m->arch == WF_ARCH_QWEN2, gemma = m->arch == WF_ARCH_GEMMA3;
    bool qk_norm = m->arch == WF_ARCH_QWEN3 || gemma;
    int64_t HD = hp->head_dim;
    for (int l = 0; l < hp->n_layer; l++) {
        wf_layer_weights *L = &m->layers[l];
        struct {
            const char *suffix;
            int64_t ne0, ne1;
            int kind;
            bool optional;
            wf_weight *w;
        } spec[] = {
            {"attn_norm.weight", E, 0, W_F32, false, &L->attn_norm},
            {"attn_q.weight", E, Q, W_MATMUL, false, &L->wq},
            {"attn_k.weight", E, KV, W_MATMUL, false, &L->wk},
            {"attn_v.weight", E, KV, W_MATMUL, false, &L->wv},
            {"attn_q.bias", Q, 0, W_F32, !bias, &L->bq},
            {"attn_k.bias", KV, 0, W_F32, !bias, &L->bk},
            {"attn_v.bias", KV, 0, W_F32, !bias, &L->bv},
            {"attn_q_norm.weight", HD, 0, W_F32, !qk_norm, &L->q_norm},
            {"attn_k_norm.weight", HD, 0, W_F32, !qk_norm, &L->k_norm},
            {"attn_output.weight", Q, E, W_MATMUL, false, &L->wo},
            {"post_attention_norm.weight", E, 0, W_F32, !gemma, &L->attn_post_norm},
            {"ffn_norm.weight", E, 0, W_F32, false, &L->ffn_norm},
            {"post_ffw_norm.weight", E, 0, W_F32, !gemma, &L->ffn_post_norm},
            {"ffn_gate.weight", E, F, W_MATMUL, false, &L->w_gate},
            {"ffn_up.weight", E, F, W_MATMUL, false, &L->w_up},
            {"ffn_down.weight", F, E, W_MATMUL, false, &L->w_down},
        };
        for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", l, spec[i].suffix);
            if ((st = get_weight(m, name, spec[i].ne0, spec[i].ne1, spec[i].kind,
                                 spec[i].optional, spec[i].w, err, errlen)) != WF_OK)
                return st;
            m->weight_bytes += spec[i].w->bytes;
            if (spec[i].kind == W_MATMUL) m->matmul_macs += spec[i].ne0 * spec[i].ne1;
        }
        if (L->bq.data) m->hp.qkv_bias = true;
        /* only qwen3 reads them (llama.cpp ignores stray tensors of other families) */
        if (!qk_norm) L->q_norm = L->k_norm = (wf_weight){0};
        if (!gemma) L->attn_post_norm = L->ffn_post_norm = (wf_weight){0};
        m->hp.qk_norm = qk_norm;
        /* llama.cpp's set_swa_pattern(6): every sixth layer is global */
        L->swa = hp->n_swa > 0 && l % 6 < 5;
    }
    return WF_OK;
}

wf_status wf_model_load_gguf(wf_gguf *g, wf_model **out, char *err, size_t errlen) {
    *out = NULL;
    wf_status st;
    wf_model *m = calloc(1, sizeof *m);
    if (!m) {
        wf_gguf_close(g);
        wf_errorf(err, errlen, "model: out of memory");
        return WF_ENOMEM;
    }
    m->gguf = g;
    wf_gguf_str s;
    if (!wf_gguf_get_str(g, "general.architecture", &s)) {
        wf_errorf(err, errlen, "model metadata: general.architecture is missing");
        st = WF_EFORMAT;
        goto fail;
    }
    if (s.len == 5 && memcmp(s.data, "llama", 5) == 0) {
        m->arch = WF_ARCH_LLAMA;
    } else if (s.len == 5 && memcmp(s.data, "qwen2", 5) == 0) {
        m->arch = WF_ARCH_QWEN2;
    } else if (s.len == 5 && memcmp(s.data, "qwen3", 5) == 0) {
        m->arch = WF_ARCH_QWEN3;
    } else if (s.len == 6 && memcmp(s.data, "gemma3", 6) == 0) {
        m->arch = WF_ARCH_GEMMA3;
    } else {
        wf_errorf(err, errlen,
                "model: architecture '%.*s' is not supported (llama, qwen2, qwen3, gemma3)",
                (int)(s.len > 64 ? 64 : s.len), s.data);
        st = WF_EUNSUPPORTED;
        goto fail;
    }
    memcpy(m->arch_name, s.data, s.len);
    m->arch_name[s.len] = 0;
    if (wf_gguf_get_str(g, "general.name", &s) && s.len > 0) {
        size_t n = s.len < sizeof m->name - 1 ? (size_t)s.len : sizeof m->name - 1;
        memcpy(m->name, s.data, n);
        m->name[n] = 0;
    } else {
        snprintf(m->name, sizeof m->name, "%s", m->arch_name);
    }
    if ((st = load_hparams(m, err, errlen)) != WF_OK) goto fail;
    if ((st = load_weights(m, err, errlen)) != WF_OK) goto fail;
    *out = m;
    return WF_OK;
fail:
    wf_model_free(m);
    return st;
}

wf_status wf_model_load(const char *path, wf_model **out, char *err, size_t errlen) {
    *out = NULL;
    wf_gguf *g;
    wf_status st = wf_gguf_open(path, &g, err, errlen);
    if (st != WF_OK) return st;
    return wf_model_load_gguf(g, out, err, errlen);
}

void wf_model_free(wf_model *m) {
    if (!m) return;
    free(m->layers);
    wf_gguf_close(m->gguf);
    free(m);
}
