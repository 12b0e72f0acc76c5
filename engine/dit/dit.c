/* The DiT forward pass: patchify + 2-D sin-cos positions, timestep and label conditioning,
 * adaLN-Zero blocks (attention, GELU-tanh MLP), the modulated final layer and unpatchify, each
 * step exactly as diffusers' DiTTransformer2DModel computes it (facebookresearch/DiT models.py
 * is the same network). Only buffers reserved at load are used. */
#include <math.h>
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

typedef struct gate_ctx {
    float *h;
    const float *v, *gate;
    int rows, d, tokens, stride;
} gate_ctx;

/* h += gate(item) * v, row-split across the pool */
static void gate_worker(void *arg, int ith, int nth) {
    const gate_ctx *c = arg;
    int r0 = (int)((long)c->rows * ith / nth), r1 = (int)((long)c->rows * (ith + 1) / nth);
    for (int r = r0; r < r1; r++) {
        const float *g = c->gate + (size_t)(r / c->tokens) * c->stride;
        float *h = c->h + (size_t)r * c->d;
        const float *v = c->v + (size_t)r * c->d;
        for (int i = 0; i < c->d; i++) h[i] += g[i] * v[i];
    }
}

static void gated_add(wf_threadpool *pool, float *h, const float *v, const float *gate, int rows, int d,
                      int tokens, int stride) {
    gate_ctx c = {h, v, gate, rows, d, tokens, stride};
    wf_threadpool_run(pool, gate_worker, &c);
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
    if (height > m->max_h || width > m->max_w)
        return wf_status_errorf(err, errlen, WF_EINVAL, "size %dx%d above the maximum %dx%d reserved at load",
                                height, width, m->max_h, m->max_w);
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
        const float *mod = m->mod;
        wf__dit_ln_modulate(pool, m->h, m->xn, rows, D, 1e-6f, NULL, NULL, mod, mod + D, ntok, 6 * D);
        wf__dit_linear_run(pool, NULL, &blk->qkv, m->xn, rows, m->qkv, m->xb);
        wf_status st = attn(attn_user, pool, m->qkv, m->att, batch, ntok, err, errlen);
        if (st != WF_OK) return st;
        wf__dit_linear_run(pool, NULL, &blk->proj, m->att, rows, m->tmp, m->xb);
        gated_add(pool, m->h, m->tmp, mod + 2 * D, rows, D, ntok, 6 * D);
        wf__dit_ln_modulate(pool, m->h, m->xn, rows, D, c->norm_eps, blk->norm2_w, blk->norm2_b, mod + 3 * D,
                            mod + 4 * D, ntok, 6 * D);
        wf__dit_linear_run(pool, NULL, &blk->fc1, m->xn, rows, m->ff, m->xb);
        wf__dit_gelu_tanh(pool, m->ff, (size_t)rows * c->ffn);
        wf__dit_linear_run(pool, NULL, &blk->fc2, m->ff, rows, m->tmp, m->xb);
        gated_add(pool, m->h, m->tmp, mod + 5 * D, rows, D, ntok, 6 * D);
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
