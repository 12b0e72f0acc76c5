/* Batched llama/qwen2 forward pass over paged F16 KV. Each operation reproduces the arithmetic
 * llama.cpp's CPU backend performs for the same graph (RMSNorm summed in double, RoPE cache
 * built by repeated multiplication, matmuls through the shared kernels, attention as in
 * attention.h, SwiGLU with ggml's exp polynomial) so greedy outputs are token-identical. */
#include "engine/forward.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/attention.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/no_contract.h"
#include "engine/cpu/quant.h"

struct wf_forward {
    const wf_model *m;
    wf_threadpool *pool;
    int n_threads;
    int max_tokens, max_seqs, max_ctx;
    /* activations, [token][...] */
    float *x, *xn, *q, *k, *v, *att, *tmp, *gate, *up, *rope;
    float *rope_swa;     /* RoPE cache of sliding-window layers (own base), or NULL */
    uint16_t *gelu_tab;  /* GeGLU: ggml's F16 GELU table, or NULL */
    uint16_t *zero_row;  /* [head_dim] zeros: K/V row of masked (out-of-window) positions */
    int *tok_seq, *tok_pos;
    float *xl, *logits;
    int n_logits;
    /* LoRA segments: gathered input rows, their rank-r projections, the B outputs, and per
     * gathered row its token and scale */
    float *lx, *lmid, *lout, *lscale;
    int *lrow, *seq_t0;
    int max_loras_run;   /* most adapters any sequence of the current run carries */
    void *mm_scratch;
    /* attention per-thread scratch */
    unsigned char *attn_mem;
    size_t attn_stride;
    size_t bytes;
    /* state of the current run, read by the parallel jobs */
    wf_kv_store *kv;
    const wf_fwd_seq *seqs;
    int n_tok;
    int layer;
    bool split_swa;      /* this layer's K/V live in the store's sliding-window region */
    wf_forward_layer_fn layer_fn; /* told when a layer's K/V are stored (may be NULL) */
    void *layer_user;
};

static void *alloc64(size_t n, size_t *total) {
    n = (n + 63) & ~(size_t)63;
    if (n == 0) n = 64;
    void *p = aligned_alloc(64, n);
    if (p) {
        memset(p, 0, n);
        *total += n;
    }
    return p;
}

static size_t max_sz(size_t a, size_t b) {
    return a > b ? a : b;
}

/* ggml_gelu_f32 (tanh approximation), tabulated at every F16 value rounded to F16, as
 * ggml_cpu_init fills ggml_table_gelu_f16. */
static void gelu_table_init(uint16_t *tab) {
    for (int i = 0; i < 65536; i++) {
        const float x = wf_fp16_to_fp32((uint16_t)i);
        /* 1 + a*x*x contracted into one fma, as GCC compiles ggml_gelu_f32 */
        const float y = 0.5f * x *
                        (1.0f + tanhf(0.79788456080286535587989211986876f * x *
                                      fmaf(0.044715f * x, x, 1.0f)));
        tab[i] = wf_fp32_to_fp16(y);
    }
}

wf_status wf_forward_new(const wf_model *m, wf_threadpool *pool, int max_tokens, int max_seqs,
                         int max_ctx, wf_forward **out, char *err, size_t errlen) {
    *out = NULL;
    const wf_model_hparams *hp = &m->hp;
    if (max_tokens < 1 || max_seqs < 1 || max_seqs > max_tokens) {
        wf_errorf(err, errlen, "forward: invalid limits (max_batch_tokens %d, max_seqs %d)",
                max_tokens, max_seqs);
        return WF_EINVAL;
    }
    if (hp->head_dim > 256) {
        wf_errorf(err, errlen, "forward: head_dim %d > 256 is not supported", hp->head_dim);
        return WF_EUNSUPPORTED;
    }
    wf_forward *f = calloc(1, sizeof *f);
    if (!f) goto nomem;
    f->m = m;
    f->pool = pool;
    f->n_threads = pool ? wf_threadpool_size(pool) : 1;
    f->max_tokens = max_tokens;
    f->max_seqs = max_seqs;
    f->max_ctx = max_ctx > 0 ? max_ctx : hp->n_ctx_train;
    size_t T = (size_t)max_tokens, E = (size_t)hp->n_embd;
    size_t QD = (size_t)hp->n_head * (size_t)hp->head_dim;
    size_t KVD = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    size_t F = (size_t)hp->n_ff;
    size_t *b = &f->bytes;
    if (!(f->x = alloc64(T * E * 4, b)) || !(f->xn = alloc64(T * max_sz(E, QD) * 4, b)) ||
        !(f->q = alloc64(T * QD * 4, b)) || !(f->k = alloc64(T * KVD * 4, b)) ||
        !(f->v = alloc64(T * KVD * 4, b)) || !(f->att = alloc64(T * QD * 4, b)) ||
        !(f->tmp = alloc64(T * E * 4, b)) || !(f->gate = alloc64(T * F * 4, b)) ||
        !(f->up = alloc64(T * F * 4, b)) ||
        !(f->rope = alloc64(T * (size_t)hp->n_rot * 4, b)) ||
        (hp->n_swa > 0 && !(f->rope_swa = alloc64(T * (size_t)hp->n_rot * 4, b))) ||
        (hp->ffn_act == WF_FFN_GELU && !(f->gelu_tab = alloc64(65536 * 2, b))) ||
        !(f->zero_row = alloc64((size_t)hp->head_dim * 2, b)) ||
        !(f->tok_seq = alloc64(T * sizeof(int), b)) ||
        !(f->tok_pos = alloc64(T * sizeof(int), b)) ||
        !(f->xl = alloc64((size_t)max_seqs * E * 4, b)) ||
        !(f->logits = alloc64((size_t)max_seqs * (size_t)hp->n_vocab * 4, b)))
        goto nomem;
    size_t LD = max_sz(max_sz(E, QD), F); /* widest input or output of an adapted weight */
    if (!(f->lx = alloc64(T * LD * 4, b)) || !(f->lout = alloc64(T * LD * 4, b)) ||
        !(f->lmid = alloc64(T * WF_LORA_MAX_RANK * 4, b)) ||
        !(f->lscale = alloc64(T * 4, b)) || !(f->lrow = alloc64(T * sizeof(int), b)) ||
        !(f->seq_t0 = alloc64((size_t)max_seqs * sizeof(int), b)))
        goto nomem;
    if (f->gelu_tab) gelu_table_init(f->gelu_tab);
    /* matmul scratch: the worst case over every weight at the largest m it sees */
    size_t mm = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        const wf_layer_weights *L = &m->layers[l];
        const wf_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                 &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            mm = max_sz(mm, wf_matmul_scratch_size(ws[i]->type, (int)ws[i]->ne0, max_tokens));
    }
    mm = max_sz(mm, wf_matmul_scratch_size(m->output.type, (int)m->output.ne0, max_seqs));
    /* adapters' F16/BF16 A (n_in up to LD) and B (k = rank) convert the activations first */
    for (int i = 0; i < 2; i++) {
        wf_ggml_type lt = i ? WF_GGML_TYPE_BF16 : WF_GGML_TYPE_F16;
        mm = max_sz(mm, wf_matmul_scratch_size(lt, (int)LD, max_tokens));
        mm = max_sz(mm, wf_matmul_scratch_size(lt, WF_LORA_MAX_RANK, max_tokens));
    }
    if (!(f->mm_scratch = alloc64(mm, b))) goto nomem;
    /* attention: per thread scores/probabilities/accumulators + two row-pointer arrays */
    f->attn_stride = wf_attn_scratch_bytes(f->max_ctx, hp->head_dim) +
                     2 * (((size_t)f->max_ctx * sizeof(void *) + 63) & ~(size_t)63);
    if (!(f->attn_mem = alloc64(f->attn_stride * (size_t)f->n_threads, b))) goto nomem;
    *out = f;
    return WF_OK;
nomem:
    wf_forward_free(f);
    wf_errorf(err, errlen, "forward: out of memory reserving activations for %d tokens",
            max_tokens);
    return WF_ENOMEM;
}

void wf_forward_free(wf_forward *f) {
    if (!f) return;
    free(f->x);
    free(f->xn);
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->att);
    free(f->tmp);
    free(f->gate);
    free(f->up);
    free(f->rope);
    free(f->rope_swa);
    free(f->gelu_tab);
    free(f->zero_row);
    free(f->tok_seq);
    free(f->tok_pos);
    free(f->xl);
    free(f->logits);
    free(f->lx);
    free(f->lout);
    free(f->lmid);
    free(f->lscale);
    free(f->lrow);
    free(f->seq_t0);
    free(f->mm_scratch);
    free(f->attn_mem);
    free(f);
}

size_t wf_forward_memory_bytes(const wf_forward *f) {
    return f->bytes;
}

const float *wf_forward_logits(const wf_forward *f, int i) {
    if (i < 0 || i >= f->n_logits) return NULL;
    return f->logits + (size_t)i * (size_t)f->m->hp.n_vocab;
}

uint64_t wf_forward_swa_layers(const wf_model *m) {
    if (m->hp.n_swa <= 0 || m->hp.n_layer > 64) return 0;
    uint64_t mask = 0;
    for (int l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].swa) mask |= UINT64_C(1) << l;
    return mask;
}

/* First block a local layer reads for a query at position q: keys > q - n_swa. */
static int swa_first_block(const wf_forward *f, const wf_kv_store *kv, int q) {
    int first = q - f->m->hp.n_swa + 1;
    return first > 0 ? first / kv->geometry.block_size : 0;
}

wf_status wf_forward_check_seq(const wf_forward *f, const wf_kv_store *kv, const wf_fwd_seq *s,
                               char *err, size_t errlen) {
    const wf_model_hparams *hp = &f->m->hp;
    if (!s->tokens || s->n_tokens < 1 || s->pos < 0) {
        wf_errorf(err, errlen, "task has no tokens or a negative position");
        return WF_EINVAL;
    }
    if ((int64_t)s->pos + s->n_tokens > f->max_ctx) {
        wf_errorf(err, errlen, "positions up to %lld exceed the context length %d",
                (long long)s->pos + s->n_tokens, f->max_ctx);
        return WF_ERANGE;
    }
    for (int i = 0; i < s->n_tokens; i++) {
        if (s->tokens[i] < 0 || s->tokens[i] >= hp->n_vocab) {
            wf_errorf(err, errlen, "token id %d outside the vocabulary (%d)", s->tokens[i],
                    hp->n_vocab);
            return WF_EINVAL;
        }
    }
    if (s->n_loras < 0 || s->n_loras > WF_FWD_MAX_LORAS || (s->n_loras > 0 && !s->loras)) {
        wf_errorf(err, errlen, "task carries %d adapters (at most %d)", s->n_loras,
                  WF_FWD_MAX_LORAS);
        return WF_EINVAL;
    }
    for (int i = 0; i < s->n_loras; i++) {
        if (!s->loras[i].lora || s->loras[i].lora->n_layer != hp->n_layer) {
            wf_errorf(err, errlen, "adapter %d of the task is missing or of another model", i);
            return WF_EINVAL;
        }
    }
    int bs = kv->geometry.block_size;
    int need = (s->pos + s->n_tokens + bs - 1) / bs;
    if (!s->block_table || s->n_blocks < need) {
        wf_errorf(err, errlen, "block table has %d blocks, positions need %d", s->n_blocks, need);
        return WF_EINVAL;
    }
    for (int i = 0; i < need; i++) {
        if (s->block_table[i] < 0 || s->block_table[i] >= kv->n_blocks) {
            wf_errorf(err, errlen, "block id %d outside the KV store (%d blocks)",
                    s->block_table[i], kv->n_blocks);
            return WF_EINVAL;
        }
    }
    if (!kv->geometry.swa_layers) return WF_OK;
    if (!s->swa_block_table) {
        wf_errorf(err, errlen, "the KV store keeps sliding-window layers apart but the task "
                               "has no table for them");
        return WF_EINVAL;
    }
    for (int i = swa_first_block(f, kv, s->pos); i < need; i++) {
        if (s->swa_block_table[i] < 0 || s->swa_block_table[i] >= kv->n_swa_blocks) {
            wf_errorf(err, errlen, "sliding-window block id %d (position block %d) outside the "
                                   "KV store (%d blocks)", s->swa_block_table[i], i,
                      kv->n_swa_blocks);
            return WF_EINVAL;
        }
    }
    return WF_OK;
}

/* ---- element-wise operations (ggml's arithmetic) ------------------------------------------ */

/* y = (x * (1/sqrt(mean(x^2) + eps))) * w; the mean of squares summed in double. */
/* RMSNorm of nr rows: y[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * w[r], as
 * ggml_compute_forward_rms_norm_f32 then the weight multiply. Each row's sum of squares is one
 * chain of double additions in element order (the rounding llama.cpp's gives), so a row costs
 * n add latencies; rows are summed four at a time in independent chains, which keeps every
 * row's bits and overlaps their latencies (Gemma normalises 4 + 1 heads and 4 rows per token
 * and layer: rms_norm_row was 3.6% of prefill samples). y[r] may be x[r]. */
#define NORM_ROWS_MAX 8
static void rms_norm_rows(int nr, const float *const *x, const float *const *w, float *const *y,
                          int n, float eps) {
    double sum[NORM_ROWS_MAX];
    int r = 0;
    for (; r + 4 <= nr; r += 4) {
        const float *x0 = x[r], *x1 = x[r + 1], *x2 = x[r + 2], *x3 = x[r + 3];
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (int i = 0; i < n; i++) {
            s0 += (double)(x0[i] * x0[i]);
            s1 += (double)(x1[i] * x1[i]);
            s2 += (double)(x2[i] * x2[i]);
            s3 += (double)(x3[i] * x3[i]);
        }
        sum[r] = s0, sum[r + 1] = s1, sum[r + 2] = s2, sum[r + 3] = s3;
    }
    for (; r + 2 <= nr; r += 2) {
        const float *x0 = x[r], *x1 = x[r + 1];
        double s0 = 0.0, s1 = 0.0;
        for (int i = 0; i < n; i++) {
            s0 += (double)(x0[i] * x0[i]);
            s1 += (double)(x1[i] * x1[i]);
        }
        sum[r] = s0, sum[r + 1] = s1;
    }
    for (; r < nr; r++) {
        double s0 = 0.0;
        for (int i = 0; i < n; i++) s0 += (double)(x[r][i] * x[r][i]);
        sum[r] = s0;
    }
    /* y may be x, so the compiler keeps the scaling scalar: four lanes at a time by hand (the
     * same two single-rounded multiplies per element) */
    typedef float v4f __attribute__((vector_size(16)));
    for (r = 0; r < nr; r++) {
        const float mean = (float)(sum[r] / n);
        const float scale = 1.0f / sqrtf(mean + eps);
        const float *xr = x[r], *wr = w[r];
        float *yr = y[r];
        int i = 0;
        for (; i + 4 <= n; i += 4) {
            v4f a, b;
            memcpy(&a, xr + i, sizeof a);
            memcpy(&b, wr + i, sizeof b);
            a = (a * scale) * b;
            memcpy(yr + i, &a, sizeof a);
        }
        for (; i < n; i++) yr[i] = (xr[i] * scale) * wr[i];
    }
}

static void rms_norm_row(const float *x, const float *w, int n, float eps, float *y) {
    rms_norm_rows(1, &x, &w, &y, n, eps);
}

/* cos/sin pairs for one position, built as ggml_rope_cache_init / rope_yarn do (theta
 * multiplied step by step, divided by the llama3 frequency factor, scaled linearly; with YaRN
 * blended between interpolation and extrapolation over the ramp and scaled in magnitude). */
static void rope_cache(const wf_model *m, int pos, float base, float fs, float *cache) {
    const wf_model_hparams *hp = &m->hp;
    const float theta_scale = powf(base, -2.0f / (float)hp->n_rot);
    const float *ff = m->rope_freqs.data;
    const float ext = hp->yarn_ext_factor;
    float mscale = hp->yarn_attn_factor;
    if (ext != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / fs);
    const float lo = hp->yarn_corr_dims[0], hi = hp->yarn_corr_dims[1];
    float theta = (float)pos;
    for (int i0 = 0; i0 < hp->n_rot; i0 += 2) {
        const float extrap = theta / (ff ? ff[i0 / 2] : 1.0f);
        const float interp = fs * extrap;
        float th = interp;
        if (ext != 0.0f) {
            const float y = ((float)(i0 / 2) - lo) / fmaxf(0.001f, hi - lo);
            const float ramp_mix = (1 - fminf(1, fmaxf(0, y))) * ext;
            th = interp * (1 - ramp_mix) + extrap * ramp_mix;
        }
        cache[i0] = cosf(th) * mscale;
        cache[i0 + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}

/* Rotation as llama.cpp's compiled rotate_pairs computes it: GCC contracts
 * x0*cos - x1*sin into fma(x0, cos, -(x1*sin)) and x0*sin + x1*cos into fma(x0, sin, x1*cos)
 * (verified bit for bit against llama.cpp's Qcur/Kcur); the same contraction here keeps q and
 * k identical. */
static void rope_apply(const wf_model_hparams *hp, const float *cache, float *x) {
    int n = hp->n_rot;
    if (hp->rope_kind == WF_ROPE_NORM) {
        for (int i0 = 0; i0 < n; i0 += 2) {
            const float c = cache[i0], s = cache[i0 + 1];
            const float x0 = x[i0], x1 = x[i0 + 1];
            x[i0] = fmaf(x0, c, -(x1 * s));
            x[i0 + 1] = fmaf(x0, s, x1 * c);
        }
    } else {
        wf_attn_rope_neox(cache, n, x); /* the same operations, eight pairs at a time */
    }
}

/* ---- parallel jobs ------------------------------------------------------------------------ */

typedef struct job {
    wf_forward *f;
    int kind;
    const float *w;
    float eps;
    const float *src;
    float *dst;
} job;

enum { JOB_NORM_ATTN, JOB_ROPE_STORE, JOB_ATTN, JOB_SWIGLU };

static void rows_range(int n, int ith, int nth, int *r0, int *r1) {
    int per = (n + nth - 1) / nth;
    *r0 = ith * per < n ? ith * per : n;
    *r1 = *r0 + per < n ? *r0 + per : n;
}

static void job_rope_store(wf_forward *f, int ith, int nth) {
    const wf_model_hparams *hp = &f->m->hp;
    const int hd = hp->head_dim, KVD = hp->n_head_kv * hd, QD = hp->n_head * hd;
    wf_kv_store *kv = f->kv;
    const int bs = kv->geometry.block_size;
    const wf_quant_ops *f16 = wf_quant_ops_get(WF_GGML_TYPE_F16);
    int r0, r1;
    rows_range(f->n_tok, ith, nth, &r0, &r1);
    const wf_layer_weights *L = &f->m->layers[f->layer];
    const float *rope = L->swa ? f->rope_swa : f->rope;
    for (int t = r0; t < r1; t++) {
        const float *cache = rope + (size_t)t * (size_t)hp->n_rot;
        float *q = f->q + (size_t)t * (size_t)QD;
        float *k = f->k + (size_t)t * (size_t)KVD;
        /* per-head query/key norms (Gemma 3, Qwen 3), several heads at once */
        float *nrows[NORM_ROWS_MAX];
        const float *nw[NORM_ROWS_MAX];
        int nn = 0;
        for (int h = 0; h < hp->n_head + hp->n_head_kv; h++) {
            bool is_q = h < hp->n_head;
            const float *w = is_q ? L->q_norm.data : L->k_norm.data;
            if (w) {
                nrows[nn] = is_q ? q + (size_t)h * hd : k + (size_t)(h - hp->n_head) * hd;
                nw[nn++] = w;
            }
            if (nn == NORM_ROWS_MAX || (nn && h == hp->n_head + hp->n_head_kv - 1)) {
                rms_norm_rows(nn, (const float *const *)nrows, nw, nrows, hd, hp->rms_eps);
                nn = 0;
            }
        }
        for (int h = 0; h < hp->n_head; h++) rope_apply(hp, cache, q + (size_t)h * hd);
        /* gemma scales q in F32 before the F16 rounding of the KQ product (not the scores) */
        if (hp->attn_q_scale != 0.0f)
            for (int i = 0; i < QD; i++) q[i] *= hp->attn_q_scale;
        for (int h = 0; h < hp->n_head_kv; h++) rope_apply(hp, cache, k + (size_t)h * hd);
        const wf_fwd_seq *s = &f->seqs[f->tok_seq[t]];
        int pos = f->tok_pos[t];
        int blk = (f->split_swa ? s->swa_block_table : s->block_table)[pos / bs];
        size_t off = (size_t)(pos % bs) * kv->row_elems;
        uint16_t *kd = (uint16_t *)wf_kv_store_k(kv, f->layer, blk) + off;
        uint16_t *vd = (uint16_t *)wf_kv_store_v(kv, f->layer, blk) + off;
        /* F16 rounding to nearest even on every path, as ggml's cpy to the F16 cache */
        f16->from_float(k, kd, KVD);
        f16->from_float(f->v + (size_t)t * (size_t)KVD, vd, KVD);
    }
}

/* Cost weight of one (token, head) attention item: its positions plus a fixed part (query
 * rounding, output reduction) worth about this many positions. */
#define ATTN_ITEM_FIXED 32

/* First item (token * n_head + head) of thread ith's share: items are split into nth contiguous
 * ranges of about equal weight, so a thread gets whole kv groups where it can (each K/V row is
 * then read once for the group's query heads) and every thread is busy even when there are
 * fewer groups than threads (one decode token: 9 heads in 3 groups on 2 threads). The split
 * only decides who computes an item, never how: results do not depend on it. */
static int attn_split(const wf_forward *f, int ith, int nth) {
    const int n_head = f->m->hp.n_head;
    if (ith <= 0) return 0;
    if (ith >= nth) return f->n_tok * n_head;
    int64_t total = 0;
    for (int t = 0; t < f->n_tok; t++) total += (int64_t)(f->tok_pos[t] + 1 + ATTN_ITEM_FIXED);
    total *= n_head;
    const int64_t target = total * ith / nth;
    int64_t cum = 0;
    for (int t = 0; t < f->n_tok; t++) {
        const int64_t w = f->tok_pos[t] + 1 + ATTN_ITEM_FIXED;
        if (cum + w * n_head > target) {
            int64_t h = target > cum ? (target - cum + w - 1) / w : 0;
            if (h < n_head) return t * n_head + (int)h;
        }
        cum += w * n_head;
    }
    return f->n_tok * n_head;
}

static void job_attn(wf_forward *f, int ith, int nth) {
    const wf_model_hparams *hp = &f->m->hp;
    const int hd = hp->head_dim, QD = hp->n_head * hd;
    const int group = hp->n_head / hp->n_head_kv;
    wf_kv_store *kv = f->kv;
    const int bs = kv->geometry.block_size;
    const float scale = hp->attn_q_scale != 0.0f ? 1.0f : 1.0f / sqrtf((float)hd);
    const bool swa = f->m->layers[f->layer].swa;
    const bool split = f->split_swa;
    unsigned char *mem = f->attn_mem + f->attn_stride * (size_t)ith;
    wf_attn_scratch sc;
    wf_attn_scratch_init(&sc, mem, f->max_ctx, hd);
    size_t ptr_bytes = ((size_t)f->max_ctx * sizeof(void *) + 63) & ~(size_t)63;
    const uint16_t **krows =
        (const uint16_t **)(void *)(mem + wf_attn_scratch_bytes(f->max_ctx, hd));
    const uint16_t **vrows = (const uint16_t **)(void *)((unsigned char *)krows + ptr_bytes);
    const int it1 = attn_split(f, ith + 1, nth);
    /* walk the share as runs of heads of one (token, kv group), computed together */
    for (int it = attn_split(f, ith, nth); it < it1;) {
        int t = it / hp->n_head, h = it % hp->n_head, g = h / group;
        int h1 = (g + 1) * group, end = t * hp->n_head + h1;
        if (end > it1) {
            end = it1;
            h1 = it1 - t * hp->n_head;
        }
        const wf_fwd_seq *s = &f->seqs[f->tok_seq[t]];
        int n_pos = f->tok_pos[t] + 1;
        /* a local layer sees the last n_swa positions (llama.cpp masks p_q - p_k >= n_swa) */
        int first = swa && n_pos > hp->n_swa ? n_pos - hp->n_swa : 0;
        size_t off = (size_t)g * (size_t)hd;
        for (int p = 0; p < first; p++) krows[p] = vrows[p] = f->zero_row;
        const int32_t *table = split ? s->swa_block_table : s->block_table;
        for (int p = first; p < n_pos; p++) {
            int blk = table[p / bs];
            size_t o = (size_t)(p % bs) * kv->row_elems + off;
            krows[p] = (const uint16_t *)wf_kv_store_k(kv, f->layer, blk) + o;
            vrows[p] = (const uint16_t *)wf_kv_store_v(kv, f->layer, blk) + o;
        }
        wf_attn_kv_view view = {krows, vrows, first};
        wf_attn_group(f->q + (size_t)t * QD + (size_t)h * hd, h1 - h, hd, scale, &view, n_pos,
                      &sc, f->att + (size_t)t * QD + (size_t)h * hd);
        it = end;
    }
}

static void job_run(void *ctx, int ith, int nth) {
    job *j = ctx;
    wf_forward *f = j->f;
    const wf_model_hparams *hp = &f->m->hp;
    int r0, r1;
    switch (j->kind) {
    case JOB_NORM_ATTN:
        rows_range(f->n_tok, ith, nth, &r0, &r1);
        for (int t = r0; t < r1; t += 4) {
            const float *xs[4], *ws[4];
            float *ys[4];
            int nr = r1 - t < 4 ? r1 - t : 4;
            for (int r = 0; r < nr; r++) {
                xs[r] = j->src + (size_t)(t + r) * hp->n_embd;
                ws[r] = j->w;
                ys[r] = j->dst + (size_t)(t + r) * hp->n_embd;
            }
            rms_norm_rows(nr, xs, ws, ys, hp->n_embd, j->eps);
        }
        break;
    case JOB_ROPE_STORE:
        job_rope_store(f, ith, nth);
        break;
    case JOB_ATTN:
        job_attn(f, ith, nth);
        break;
    case JOB_SWIGLU: {
        size_t n = (size_t)f->n_tok * (size_t)hp->n_ff;
        size_t per = (n + (size_t)nth - 1) / (size_t)nth;
        size_t i0 = (size_t)ith * per, i1 = i0 + per < n ? i0 + per : n;
        if (i0 >= i1) break;
        if (f->gelu_tab)
            wf_attn_geglu(f->gelu_tab, i1 - i0, f->gate + i0, f->up + i0);
        else
            wf_attn_swiglu(i1 - i0, f->gate + i0, f->up + i0);
        break;
    }
    }
}

static void run_job(wf_forward *f, int kind, const float *src, const float *w, float *dst) {
    job j = {.f = f, .kind = kind, .w = w, .eps = f->m->hp.rms_eps, .src = src, .dst = dst};
    /* small element-wise work is cheaper on the caller than a pool hand-off */
    bool small = kind != JOB_ATTN && f->n_tok <= 2;
    if (small || !f->pool) {
        job_run(&j, 0, 1);
    } else {
        wf_threadpool_run(f->pool, job_run, &j);
    }
}

static void matmul(wf_forward *f, const wf_weight *w, const float *x, int m, float *y) {
    wf_matmul(f->pool, w->data, w->type, (int)w->ne1, (int)w->ne0, x, m, y, f->mm_scratch);
}

/* Projections that share their input (q, k, v; gate, up): one quantisation of x and one pool
 * hand-off when their types and row lengths agree, separate matmuls otherwise. */
static void matmul_shared_input(wf_forward *f, const float *x, int m, int n,
                                const wf_weight *const *ws, float *const *ys) {
    bool same = true;
    for (int i = 1; i < n; i++)
        same = same && ws[i]->type == ws[0]->type && ws[i]->ne0 == ws[0]->ne0;
    if (!same) {
        for (int i = 0; i < n; i++) matmul(f, ws[i], x, m, ys[i]);
        return;
    }
    wf_matmul_out outs[3];
    for (int i = 0; i < n; i++) outs[i] = (wf_matmul_out){ws[i]->data, (int)ws[i]->ne1, ys[i]};
    wf_matmul_multi(f->pool, ws[0]->type, (int)ws[0]->ne0, x, m, outs, n, f->mm_scratch);
}

/* Multiply-adds of a LoRA segment (rows x rank x (n_in + n_out)) from which its products are
 * split across the pool: below, a fork-join costs more than it saves (~0.1 ms of work). */
#define LORA_PARALLEL_MACS (1u << 20)

/* Adds each row's low-rank updates of weight `target` (n_in -> n_out) to y: adapter slot by
 * slot (a row's adapters in its own order, as llama.cpp adds them), and within a slot one
 * segment per distinct adapter, gathering the rows of every sequence that uses it so A and B
 * stream once. Per row: y = y + (B (A x)) * scale, each product a wf_matmul row, so the result
 * does not depend on the segment's other rows. */
static void add_lora(wf_forward *f, wf_lora_target target, const float *x, int n_in, float *y,
                     int n_out, int n_seqs) {
    const wf_fwd_seq *seqs = f->seqs;
    for (int j = 0; j < f->max_loras_run; j++) {
        for (int s = 0; s < n_seqs; s++) {
            if (seqs[s].n_loras <= j) continue;
            const wf_lora *ad = seqs[s].loras[j].lora;
            bool seen = false;
            for (int p = 0; p < s && !seen; p++)
                seen = seqs[p].n_loras > j && seqs[p].loras[j].lora == ad;
            if (seen) continue; /* its rows went with the first sequence using it */
            const wf_lora_mat *mt = wf_lora_mat_get(ad, f->layer, target);
            if (!mt) continue;
            int nr = 0;
            for (int s2 = s; s2 < n_seqs; s2++) {
                if (seqs[s2].n_loras <= j || seqs[s2].loras[j].lora != ad) continue;
                float sc = wf_lora_scale(ad, mt, seqs[s2].loras[j].scale);
                for (int i = 0; i < seqs[s2].n_tokens; i++, nr++) {
                    int t = f->seq_t0[s2] + i;
                    memcpy(f->lx + (size_t)nr * n_in, x + (size_t)t * n_in,
                           sizeof(float) * (size_t)n_in);
                    f->lrow[nr] = t;
                    f->lscale[nr] = sc;
                }
            }
            /* A segment's two products are tiny next to the base matmul (rank 8: well under 1%
             * of a step's multiply-adds) but each would be a fork-join of the pool, which
             * costs more than the product on a busy host (a descheduled thread stalls it):
             * small ones run on this thread alone (the same bits: wf_matmul's results do
             * not depend on the thread count). */
            wf_threadpool *pool = (size_t)nr * (size_t)mt->rank * (size_t)(n_in + n_out) >=
                                  LORA_PARALLEL_MACS ? f->pool : NULL;
            wf_matmul(pool, mt->a, mt->a_type, mt->rank, n_in, f->lx, nr, f->lmid,
                      f->mm_scratch);
            wf_matmul(pool, mt->b, mt->b_type, n_out, mt->rank, f->lmid, nr, f->lout,
                      f->mm_scratch);
            for (int r = 0; r < nr; r++) {
                float *yr = y + (size_t)f->lrow[r] * n_out;
                const float *d = f->lout + (size_t)r * n_out;
                float sc = f->lscale[r];
                /* ggml_scale, then ggml_add: two roundings. The barrier keeps them two where
                 * the target has fma (-mfma, aarch64), which GCC would otherwise fuse. */
                for (int o = 0; o < n_out; o++) yr[o] = yr[o] + wf_no_contract_f32(d[o] * sc);
            }
        }
    }
}

static void add_bias(float *y, const wf_weight *b, int m) {
    if (!b->data) return;
    const float *bb = b->data;
    int n = (int)b->ne0;
    for (int t = 0; t < m; t++)
        for (int i = 0; i < n; i++) y[(size_t)t * n + i] += bb[i];
}

static void embed(wf_forward *f) {
    const wf_model *m = f->m;
    const wf_quant_ops *ops = wf_quant_ops_get(m->tok_embd.type);
    for (int t = 0; t < f->n_tok; t++) {
        const wf_fwd_seq *s = &f->seqs[f->tok_seq[t]];
        int tok = s->tokens[f->tok_pos[t] - s->pos];
        const unsigned char *row = (const unsigned char *)m->tok_embd.data +
                                   (size_t)tok * m->tok_embd.row_bytes;
        float *x = f->x + (size_t)t * (size_t)m->hp.n_embd;
        ops->to_float(row, x, m->hp.n_embd);
        if (m->hp.embd_scale != 0.0f)
            for (int i = 0; i < m->hp.n_embd; i++) x[i] *= m->hp.embd_scale;
    }
}

void wf_forward_set_layer_hook(wf_forward *f, wf_forward_layer_fn fn, void *user) {
    f->layer_fn = fn;
    f->layer_user = user;
}

wf_status wf_forward_run(wf_forward *f, wf_kv_store *kv, const wf_fwd_seq *seqs, int n_seqs) {
    const wf_model *m = f->m;
    const wf_model_hparams *hp = &m->hp;
    if (n_seqs < 1 || n_seqs > f->max_seqs) return WF_EINVAL;
    if (kv->geometry.dtype != WF_KV_DTYPE_F16 || kv->geometry.n_layers != hp->n_layer ||
        kv->geometry.n_kv_heads != hp->n_head_kv || kv->geometry.head_dim != hp->head_dim ||
        (kv->geometry.swa_layers && (kv->geometry.swa_layers != wf_forward_swa_layers(m) ||
                                     kv->geometry.swa_window != hp->n_swa)))
        return WF_EINVAL;
    int T = 0, n_want = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (seqs[s].n_tokens < 1) return WF_EINVAL;
        T += seqs[s].n_tokens;
        if (T > f->max_tokens) return WF_EINVAL;
        n_want += seqs[s].want_logits ? 1 : 0;
    }
    f->kv = kv;
    f->seqs = seqs;
    f->n_tok = T;
    f->max_loras_run = 0;
    int t = 0;
    for (int s = 0; s < n_seqs; s++) {
        f->seq_t0[s] = t;
        if (seqs[s].n_loras > f->max_loras_run) f->max_loras_run = seqs[s].n_loras;
        for (int i = 0; i < seqs[s].n_tokens; i++, t++) {
            f->tok_seq[t] = s;
            f->tok_pos[t] = seqs[s].pos + i;
            rope_cache(m, f->tok_pos[t], hp->rope_freq_base, hp->rope_freq_scale,
                       f->rope + (size_t)t * (size_t)hp->n_rot);
            if (f->rope_swa)
                rope_cache(m, f->tok_pos[t], hp->rope_freq_base_swa, 1.0f,
                           f->rope_swa + (size_t)t * (size_t)hp->n_rot);
        }
    }
    embed(f);
    const size_t E = (size_t)hp->n_embd;
    for (int l = 0; l < hp->n_layer; l++) {
        const wf_layer_weights *L = &m->layers[l];
        f->layer = l;
        f->split_swa = wf_kv_store_layer_is_swa(kv, l);
        run_job(f, JOB_NORM_ATTN, f->x, L->attn_norm.data, f->xn);
        matmul_shared_input(f, f->xn, T, 3, (const wf_weight *const[]){&L->wq, &L->wk, &L->wv},
                            (float *const[]){f->q, f->k, f->v});
        const int QD = hp->n_head * hp->head_dim, KVD = hp->n_head_kv * hp->head_dim;
        if (f->max_loras_run > 0) {
            add_lora(f, WF_LORA_WQ, f->xn, hp->n_embd, f->q, QD, n_seqs);
            add_lora(f, WF_LORA_WK, f->xn, hp->n_embd, f->k, KVD, n_seqs);
            add_lora(f, WF_LORA_WV, f->xn, hp->n_embd, f->v, KVD, n_seqs);
        }
        add_bias(f->q, &L->bq, T);
        add_bias(f->k, &L->bk, T);
        add_bias(f->v, &L->bv, T);
        run_job(f, JOB_ROPE_STORE, NULL, NULL, NULL);
        /* Layer l's K/V are final here (the jobs above returned): a reader may take them while
         * this layer's attention and the later layers compute. */
        if (f->layer_fn) f->layer_fn(f->layer_user, l);
        run_job(f, JOB_ATTN, NULL, NULL, NULL);
        matmul(f, &L->wo, f->att, T, f->tmp);
        if (f->max_loras_run > 0) add_lora(f, WF_LORA_WO, f->att, QD, f->tmp, hp->n_embd, n_seqs);
        if (L->attn_post_norm.data)
            run_job(f, JOB_NORM_ATTN, f->tmp, L->attn_post_norm.data, f->tmp);
        for (size_t i = 0; i < (size_t)T * E; i++) f->x[i] = f->tmp[i] + f->x[i];
        run_job(f, JOB_NORM_ATTN, f->x, L->ffn_norm.data, f->xn);
        matmul_shared_input(f, f->xn, T, 2, (const wf_weight *const[]){&L->w_gate, &L->w_up},
                            (float *const[]){f->gate, f->up});
        if (f->max_loras_run > 0) {
            add_lora(f, WF_LORA_W_GATE, f->xn, hp->n_embd, f->gate, hp->n_ff, n_seqs);
            add_lora(f, WF_LORA_W_UP, f->xn, hp->n_embd, f->up, hp->n_ff, n_seqs);
        }
        run_job(f, JOB_SWIGLU, NULL, NULL, NULL);
        matmul(f, &L->w_down, f->gate, T, f->tmp);
        if (f->max_loras_run > 0)
            add_lora(f, WF_LORA_W_DOWN, f->gate, hp->n_ff, f->tmp, hp->n_embd, n_seqs);
        if (L->ffn_post_norm.data)
            run_job(f, JOB_NORM_ATTN, f->tmp, L->ffn_post_norm.data, f->tmp);
        for (size_t i = 0; i < (size_t)T * E; i++) f->x[i] = f->tmp[i] + f->x[i];
    }
    /* logits only for the last token of sequences that sample */
    f->n_logits = n_want;
    if (n_want > 0) {
        int i = 0;
        t = 0;
        for (int s = 0; s < n_seqs; s++) {
            t += seqs[s].n_tokens;
            if (!seqs[s].want_logits) continue;
            rms_norm_row(f->x + (size_t)(t - 1) * E, m->output_norm.data, hp->n_embd,
                         hp->rms_eps, f->xl + (size_t)i * E);
            i++;
        }
        matmul(f, &m->output, f->xl, n_want, f->logits);
    }
    return WF_OK;
}
