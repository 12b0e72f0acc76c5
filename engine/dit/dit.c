/* The DiT forward pass: patchify + 2-D sin-cos positions, timestep and label conditioning,
 * adaLN-Zero blocks (attention, GELU-tanh MLP), the modulated final layer and unpatchify, each
 * step exactly as diffusers' DiTTransformer2DModel computes it (facebookresearch/DiT models.py
 * is the same network). Only buffers reserved at load are used. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "engine/dit/dit_impl.h"

/* 2-D sin-cos positions as diffusers' get_2d_sincos_pos_embed: grid coordinates scaled by
 * base / size (base = sample_size / patch), the first half of each vector from the column
 * coordinate and the second half from the row, each half [sin | cos] of pos * 10000^(-i/(D/4)). */
static void build_positions(wf_dit *m, int hp, int wp) {
    if (m->pos_hp == hp && m->pos_wp == wp) return;
    const int D = m->cfg.hidden, quarter = D / 4;
    const float base = (float)(m->cfg.sample_size / m->cfg.patch_size);
    for (int r = 0; r < hp; r++)
        for (int col = 0; col < wp; col++) {
            /* numpy: float32 arange / (size / base), then float64 einsum with omega */
            float ph = (float)r / ((float)hp / base), pw = (float)col / ((float)wp / base);
            float *dst = m->pos + ((size_t)r * wp + col) * D;
            for (int i = 0; i < quarter; i++) {
                double omega = 1.0 / pow(10000.0, (double)i / (D / 4.0));
                dst[i] = (float)sin(pw * omega);
                dst[quarter + i] = (float)cos(pw * omega);
                dst[2 * quarter + i] = (float)sin(ph * omega);
                dst[3 * quarter + i] = (float)cos(ph * omega);
            }
        }
    m->pos_hp = hp;
    m->pos_wp = wp;
}

/* Timestep features as diffusers' get_timestep_embedding with flip_sin_to_cos (cos first),
 * reproducing its float32 arithmetic: exponent = -ln(10000) * i / (half - shift). */
static void timestep_features(const wf_dit *m, const float *t, int batch) {
    const int half = WF__DIT_TFREQ / 2;
    const float neg_log = (float)-log(10000.0);
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < half; i++) {
            float e = ((float)i * neg_log) / (float)(half - m->cfg.timestep_shift);
            float arg = t[b] * expf(e);
            m->tfreq[b * WF__DIT_TFREQ + i] = (float)cos((double)arg);
            m->tfreq[b * WF__DIT_TFREQ + half + i] = (float)sin((double)arg);
        }
}

/* h[r] += gate(item of r) * v[r] for rows [r0, r1) */
static void gated_add_rows(float *h, const float *v, const float *gate, int r0, int r1, int d, int tokens,
                           int stride) {
    for (int r = r0; r < r1; r++) {
        const float *g = gate + (size_t)(r / tokens) * stride;
        float *hr = h + (size_t)r * d;
        const float *vr = v + (size_t)r * d;
        for (int i = 0; i < d; i++) hr[i] += g[i] * vr[i];
    }
}

/* A block's steps before and after attention, each one parallel region. Every step but
 * attention is row-wise, so the rows are dealt out in chunks and the thread that takes a chunk
 * runs every step on it (LayerNorm, GEMMs, GELU, gated residuals) with no barrier in between: 11
 * fork-joins per block become 2 plus attention's, and a row's LayerNorm output or MLP
 * activation is consumed in cache by the thread that made it. Chunks are taken from a shared
 * counter rather than split evenly up front: on a loaded host a descheduled thread then only
 * delays the region by its last chunk, as the running one takes the rest. Which thread runs a
 * chunk changes no result (each row's arithmetic is the same). */
typedef struct block_ctx {
    wf_dit *m;
    const wf__dit_block *blk;
    const float *mod;
    int rows, ntok, chunk;
    _Atomic int next; /* next chunk to take */
} block_ctx;

/* Rows per chunk: whole 8-row groups (the widest GEMM micro-tile), at most 32 (enough to reuse
 * each weight panel), about 4 chunks per thread when rows are few. */
static int chunk_rows(int rows, int nth) {
    int c = (rows / (4 * nth) + 7) / 8 * 8;
    return c < 8 ? 8 : c > 32 ? 32 : c;
}

/* Takes the next chunk into [r0, r1); false when none is left. */
static bool take_chunk(block_ctx *c, int *r0, int *r1) {
    const int k = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
    if ((long)k * c->chunk >= c->rows) return false;
    *r0 = k * c->chunk;
    *r1 = *r0 + c->chunk < c->rows ? *r0 + c->chunk : c->rows;
    return true;
}

static void pre_attention_worker(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    block_ctx *c = arg;
    wf_dit *m = c->m;
    const int D = m->cfg.hidden;
    int r0, r1;
    while (take_chunk(c, &r0, &r1)) {
        uint16_t *xb = m->xb + (size_t)r0 * m->xb_stride;
        wf__dit_ln_modulate_rows(m->h, m->xn, r0, r1, D, 1e-6f, NULL, NULL, c->mod, c->mod + D, c->ntok, 6 * D);
        wf__dit_linear_rows(NULL, &c->blk->qkv, m->xn, r0, r1, m->qkv, xb);
    }
}

static void post_attention_worker(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    block_ctx *c = arg;
    wf_dit *m = c->m;
    const wf__dit_block *blk = c->blk;
    const int D = m->cfg.hidden, F = m->cfg.ffn;
    int r0, r1;
    while (take_chunk(c, &r0, &r1)) {
        uint16_t *xb = m->xb + (size_t)r0 * m->xb_stride;
        wf__dit_linear_rows(NULL, &blk->proj, m->att, r0, r1, m->tmp, xb);
        gated_add_rows(m->h, m->tmp, c->mod + 2 * D, r0, r1, D, c->ntok, 6 * D);
        wf__dit_ln_modulate_rows(m->h, m->xn, r0, r1, D, m->cfg.norm_eps, blk->norm2_w, blk->norm2_b,
                                 c->mod + 3 * D, c->mod + 4 * D, c->ntok, 6 * D);
        wf__dit_linear_rows(NULL, &blk->fc1, m->xn, r0, r1, m->ff, xb);
        wf__dit_gelu_tanh_serial(m->ff + (size_t)r0 * F, (size_t)(r1 - r0) * F);
        wf__dit_linear_rows(NULL, &blk->fc2, m->ff, r0, r1, m->tmp, xb);
        gated_add_rows(m->h, m->tmp, c->mod + 5 * D, r0, r1, D, c->ntok, 6 * D);
    }
}

static void dump(const wf_dit_dump *d, const char *what, int index, const float *data, int batch, int rows,
                 int cols) {
    if (d && d->fn) d->fn(d->user, what, index, data, batch, rows, cols);
}

/* c = t2(silu(t1(timestep features))) + table[label] into m->cond, silu(c) into silu_out (the
 * timestep features are already in m->tfreq). */
static void conditioning(wf_dit *m, wf_threadpool *pool, const wf__dit_linear *t1,
                         const wf__dit_linear *t2, const float *table, const int32_t *labels,
                         int batch, float *silu_out) {
    const int D = m->cfg.hidden;
    wf__dit_linear_run(pool, NULL, t1, m->tfreq, batch, m->temb, m->xb);
    wf__dit_silu(m->temb, (size_t)batch * D);
    wf__dit_linear_run(pool, NULL, t2, m->temb, batch, m->cond, m->xb);
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < D; i++) m->cond[(size_t)b * D + i] += table[(size_t)labels[b] * D + i];
    memcpy(silu_out, m->cond, (size_t)batch * D * sizeof(float));
    wf__dit_silu(silu_out, (size_t)batch * D);
}

/* Patchify tokens [tok0, tok0 + ntok) of each item: token (r, col) gathers
 * x[c][r*p + i][col*p + j] in (c, i, j) order, the conv weight's layout. */
void wf__dit_patchify(wf_dit *m, int batch, int height, int width, int tok0, int ntok, const float *x) {
    const int p = m->cfg.patch_size, C = m->cfg.in_channels, wp = width / p, pk = C * p * p;
    for (int b = 0; b < batch; b++)
        for (int k = 0; k < ntok; k++) {
            const int r = (tok0 + k) / wp, col = (tok0 + k) % wp;
            float *dst = m->patches + ((size_t)b * ntok + k) * pk;
            for (int ch = 0; ch < C; ch++)
                for (int i = 0; i < p; i++)
                    memcpy(dst + (ch * p + i) * p,
                           x + (((size_t)b * C + ch) * height + (size_t)r * p + i) * width + (size_t)col * p,
                           (size_t)p * sizeof(float));
        }
}

/* Unpatchify tokens [tok0, tok0 + ntok): token vector (i, j, oc) -> out[b][oc][r*p + i][col*p + j]. */
void wf__dit_unpatchify(const wf_dit *m, int batch, int height, int width, int tok0, int ntok, float *out) {
    const int p = m->cfg.patch_size, OC = m->cfg.out_channels, wp = width / p, po = p * p * OC;
    for (int b = 0; b < batch; b++)
        for (int k = 0; k < ntok; k++) {
            const int r = (tok0 + k) / wp, col = (tok0 + k) % wp;
            const float *src = m->tok_out + ((size_t)b * ntok + k) * po;
            for (int i = 0; i < p; i++)
                for (int j = 0; j < p; j++)
                    for (int oc = 0; oc < OC; oc++)
                        out[(((size_t)b * OC + oc) * height + (size_t)r * p + i) * width + (size_t)col * p + j] =
                            src[(i * p + j) * OC + oc];
        }
}

wf_status wf__dit_check_forward(const wf_dit *m, const wf_threadpool *pool, int batch, int height, int width,
                                const int32_t *labels, char *err, size_t errlen) {
    const wf_dit_config *c = &m->cfg;
    const int p = c->patch_size;
    if (batch < 1 || batch > m->max_batch)
        return wf_status_errorf(err, errlen, WF_EINVAL, "batch %d outside [1, %d] (max_batch at load)", batch,
                                m->max_batch);
    if (height < p || width < p || height % p || width % p)
        return wf_status_errorf(err, errlen, WF_EINVAL, "size %dx%d is not a positive multiple of the patch size %d",
                                height, width, p);
    if (m->max_h && (height > m->max_h || width > m->max_w))
        return wf_status_errorf(err, errlen, WF_EINVAL, "size %dx%d above the maximum %dx%d reserved at load",
                                height, width, m->max_h, m->max_w);
    if ((long)(height / p) * (width / p) > m->max_tokens)
        return wf_status_errorf(err, errlen, WF_EINVAL, "size %dx%d has %d patches, above the %d reserved at load",
                                height, width, (height / p) * (width / p), m->max_tokens);
    if (wf_threadpool_size((wf_threadpool *)pool) > m->max_threads)
        return wf_status_errorf(err, errlen, WF_EINVAL, "pool of %d threads, buffers reserved for %d",
                                wf_threadpool_size((wf_threadpool *)pool), m->max_threads);
    for (int b = 0; b < batch; b++)
        if (labels[b] < 0 || labels[b] > c->num_classes)
            return wf_status_errorf(err, errlen, WF_EINVAL, "label %d of item %d outside [0, %d] (%d = null class)",
                                    (int)labels[b], b, c->num_classes, c->num_classes);
    return WF_OK;
}

/* Attention over the whole sequence held by this process. */
static wf_status local_attention(void *user, wf_threadpool *pool, float *qkv, float *att, int batch, int ntok,
                                 char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    wf_dit *m = user;
    wf__dit_attention(pool, qkv, att, batch, ntok, m->cfg.heads, m->cfg.head_dim, m->attn_scratch);
    return WF_OK;
}

wf_status wf__dit_forward_tokens(wf_dit *m, wf_threadpool *pool, int batch, int hp, int wp, int tok0, int ntok,
                                 const float *t, const int32_t *labels, wf__dit_attn_fn attn, void *attn_user,
                                 const wf_dit_dump *dmp, char *err, size_t errlen) {
    const wf_dit_config *c = &m->cfg;
    const int D = c->hidden, p = c->patch_size, rows = batch * ntok;
    wf__dit_linear_run(pool, NULL, &m->x_embed, m->patches, rows, m->h, m->xb);
    build_positions(m, hp, wp);
    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < (size_t)ntok * D; i++)
            m->h[(size_t)b * ntok * D + i] += m->pos[(size_t)tok0 * D + i];
    dump(dmp, "patch", 0, m->h, batch, ntok, D);

    /* conditioning c = MLP(timestep features) + label embedding; every adaLN takes silu(c).
     * Block 0's c also drives the final layer (diffusers does the same). */
    timestep_features(m, t, batch);
    conditioning(m, pool, &m->t1, &m->t2, m->label_table, labels, batch, m->silu_c);
    dump(dmp, "cond", 0, m->cond, batch, 1, D);

    for (int l = 0; l < c->depth; l++) {
        const wf__dit_block *blk = &m->blocks[l];
        const float *silu_c = m->silu_c;
        if (blk->label_table) { /* a block with its own timestep MLP and label table */
            conditioning(m, pool, &blk->t1, &blk->t2, blk->label_table, labels, batch, m->silu_blk);
            silu_c = m->silu_blk;
        }
        /* mod rows: shift_msa | scale_msa | gate_msa | shift_mlp | scale_mlp | gate_mlp */
        wf__dit_linear_run(pool, NULL, &blk->ada, silu_c, batch, m->mod, m->xb);
        block_ctx bc = {.m = m, .blk = blk, .mod = m->mod, .rows = rows, .ntok = ntok,
                        .chunk = chunk_rows(rows, pool ? wf_threadpool_size(pool) : 1)};
        atomic_init(&bc.next, 0);
        wf_threadpool_run(pool, pre_attention_worker, &bc);
        wf_status st = attn(attn_user, pool, m->qkv, m->att, batch, ntok, err, errlen);
        if (st != WF_OK) return st;
        atomic_store_explicit(&bc.next, 0, memory_order_relaxed); /* the run's join orders it */
        wf_threadpool_run(pool, post_attention_worker, &bc);
        dump(dmp, "block", l, m->h, batch, ntok, D);
    }

    /* final layer: shift | scale from silu(c), LayerNorm without affine, linear to p*p*OC */
    wf__dit_linear_run(pool, NULL, &m->final_ada, m->silu_c, batch, m->fmod, m->xb);
    wf__dit_ln_modulate(pool, m->h, m->xn, rows, D, 1e-6f, NULL, NULL, m->fmod, m->fmod + D, ntok, 2 * D);
    wf__dit_linear_run(pool, NULL, &m->final_lin, m->xn, rows, m->tok_out, m->xb);
    dump(dmp, "final", 0, m->tok_out, batch, ntok, p * p * c->out_channels);
    return WF_OK;
}

wf_status wf_dit_forward(wf_dit *m, wf_threadpool *pool, int batch, int height, int width, const float *x,
                         const float *t, const int32_t *labels, float *out, const wf_dit_dump *dmp, char *err,
                         size_t errlen) {
    if (!x || !t || !labels || !out) return wf_status_errorf(err, errlen, WF_EINVAL, "invalid arguments");
    wf_status st = wf__dit_check_forward(m, pool, batch, height, width, labels, err, errlen);
    if (st != WF_OK) return st;
    const int p = m->cfg.patch_size, hp = height / p, wp = width / p, T = hp * wp;
    wf__dit_patchify(m, batch, height, width, 0, T, x);
    st = wf__dit_forward_tokens(m, pool, batch, hp, wp, 0, T, t, labels, local_attention, m, dmp, err, errlen);
    if (st != WF_OK) return st;
    wf__dit_unpatchify(m, batch, height, width, 0, T, out);
    return WF_OK;
}

double wf_dit_forward_macs(const wf_dit *m, int batch, int height, int width) {
    const wf_dit_config *c = &m->cfg;
    const double D = c->hidden, p = c->patch_size, T = (double)(height / c->patch_size) * (width / c->patch_size);
    const double rows = batch * T;
    double per_block = rows * (3 * D * D + D * D + 2 * D * c->ffn) + batch * 6 * D * D + 2 * batch * T * T * D;
    return c->depth * per_block + rows * (c->in_channels * p * p * D + D * p * p * c->out_channels) +
           batch * (WF__DIT_TFREQ * D + D * D + 2 * D * D);
}
