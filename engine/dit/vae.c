/* AutoencoderKL decoder (engine/dit/vae.h): direct convolutions, GroupNorm, SiLU, nearest
 * upsampling and single-head attention in fp32, threaded over output channels, groups or
 * query rows. Simple by intent: the decoder runs once per image, after all sampler steps. */
#include "engine/dit/vae.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/quant.h"
#include "engine/cpu/threadpool.h"

#define GN_EPS 1e-6

typedef struct conv {
    int ci, co, k;
    float *w, *b;
} conv;

typedef struct norm {
    int c;
    float *g, *b;
} norm;

typedef struct resnet {
    int ci, co;
    norm n1, n2;
    conv c1, c2, sc; /* sc.w == NULL: identity shortcut */
} resnet;

typedef struct attn {
    int c;
    norm n;
    float *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;
} attn;

struct wf_dit_vae {
    wf_dit_vae_config cfg;
    wf_threadpool *pool;
    float **owned; /* every weight allocation */
    int n_owned, cap_owned;
    conv post_quant, conv_in, conv_out;
    norm norm_out;
    resnet mid[2];
    attn att;
    resnet *ups;                          /* [n_blocks][layers_per_block + 1] */
    conv upsample[WF_DIT_VAE_MAX_BLOCKS]; /* all but the last block */
    int max_h, max_w;
    float *a, *b, *c;            /* activations, each buf_floats */
    float *q, *k, *v, *o, *s;    /* attention: [N][C] x 4, scores [N][N] */
};

/* ---- config ---- */

static wf_status json_int_field(json_t *root, const char *key, int *v, bool required, char *err,
                                size_t errlen) {
    json_t *j = json_object_get(root, key);
    if (!j || json_is_null(j)) {
        if (required)
            return wf_status_errorf(err, errlen, WF_EFORMAT, "vae config: '%s' missing", key);
        return WF_OK;
    }
    if (!json_is_integer(j) || json_integer_value(j) < 1 || json_integer_value(j) > 65536)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "vae config: '%s' is not an integer in 1..65536", key);
    *v = (int)json_integer_value(j);
    return WF_OK;
}

wf_status wf_dit_vae_config_parse(const char *text, size_t len, wf_dit_vae_config *cfg, char *err,
                                  size_t errlen) {
    if (!text || !cfg) return wf_status_errorf(err, errlen, WF_EINVAL, "NULL argument");
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (!root)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "vae config: line %d: %s", jerr.line,
                                jerr.text);
    wf_status st = WF_OK;
    wf_dit_vae_config c = {.latent_channels = 4, .out_channels = 3, .layers_per_block = 1,
                           .norm_num_groups = 32, .scaling_factor = 0.18215,
                           .mid_block_add_attention = true, .use_post_quant_conv = true};
    if (!json_is_object(root)) {
        st = wf_status_errorf(err, errlen, WF_EFORMAT, "vae config: not a JSON object");
        goto out;
    }
    json_t *cls = json_object_get(root, "_class_name");
    if (cls && (!json_is_string(cls) || strcmp(json_string_value(cls), "AutoencoderKL") != 0)) {
        st = wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                              "vae config: _class_name '%s' is not AutoencoderKL",
                              json_is_string(cls) ? json_string_value(cls) : "?");
        goto out;
    }
    json_t *act = json_object_get(root, "act_fn");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0)) {
        st = wf_status_errorf(err, errlen, WF_EUNSUPPORTED, "vae config: act_fn must be 'silu'");
        goto out;
    }
    if ((st = json_int_field(root, "latent_channels", &c.latent_channels, false, err, errlen)) ||
        (st = json_int_field(root, "out_channels", &c.out_channels, false, err, errlen)) ||
        (st = json_int_field(root, "layers_per_block", &c.layers_per_block, false, err, errlen)) ||
        (st = json_int_field(root, "norm_num_groups", &c.norm_num_groups, false, err, errlen)))
        goto out;
    json_t *boc = json_object_get(root, "block_out_channels");
    if (!json_is_array(boc) || json_array_size(boc) < 1) {
        st = wf_status_errorf(err, errlen, WF_EFORMAT,
                              "vae config: 'block_out_channels' missing or empty");
        goto out;
    }
    if (json_array_size(boc) > WF_DIT_VAE_MAX_BLOCKS) {
        st = wf_status_errorf(err, errlen, WF_EUNSUPPORTED, "vae config: %zu blocks (max %d)",
                              json_array_size(boc), WF_DIT_VAE_MAX_BLOCKS);
        goto out;
    }
    c.n_blocks = (int)json_array_size(boc);
    for (int i = 0; i < c.n_blocks; i++) {
        json_t *v = json_array_get(boc, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65536) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT,
                                  "vae config: block_out_channels[%d] is not a positive integer",
                                  i);
            goto out;
        }
        c.block_out_channels[i] = (int)json_integer_value(v);
        if (c.block_out_channels[i] % c.norm_num_groups != 0) {
            st = wf_status_errorf(err, errlen, WF_EINVAL,
                                  "vae config: block_out_channels[%d] = %d not divisible by "
                                  "norm_num_groups %d",
                                  i, c.block_out_channels[i], c.norm_num_groups);
            goto out;
        }
    }
    json_t *ubt = json_object_get(root, "up_block_types");
    if (ubt) {
        if (!json_is_array(ubt) || json_array_size(ubt) != (size_t)c.n_blocks) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT,
                                  "vae config: up_block_types must list %d blocks", c.n_blocks);
            goto out;
        }
        for (size_t i = 0; i < json_array_size(ubt); i++) {
            json_t *v = json_array_get(ubt, i);
            if (!json_is_string(v) || strcmp(json_string_value(v), "UpDecoderBlock2D") != 0) {
                st = wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                      "vae config: up block type '%s' is not supported",
                                      json_is_string(v) ? json_string_value(v) : "?");
                goto out;
            }
        }
    }
    json_t *sf = json_object_get(root, "scaling_factor");
    if (sf && !json_is_null(sf)) {
        if (!json_is_number(sf) || !(json_number_value(sf) > 0)) {
            st = wf_status_errorf(err, errlen, WF_EINVAL, "vae config: scaling_factor must be > 0");
            goto out;
        }
        c.scaling_factor = json_number_value(sf);
    }
    json_t *sh = json_object_get(root, "shift_factor");
    if (sh && !json_is_null(sh)) {
        if (!json_is_number(sh)) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT, "vae config: shift_factor not a number");
            goto out;
        }
        c.shift_factor = json_number_value(sh);
    }
    json_t *ma = json_object_get(root, "mid_block_add_attention");
    if (ma && json_is_boolean(ma)) c.mid_block_add_attention = json_is_true(ma);
    json_t *pq = json_object_get(root, "use_post_quant_conv");
    if (pq && json_is_boolean(pq)) c.use_post_quant_conv = json_is_true(pq);
    *cfg = c;
out:
    json_decref(root);
    return st;
}

wf_status wf_dit_vae_config_load(const char *path, wf_dit_vae_config *cfg, char *err,
                                 size_t errlen) {
    if (!path || !cfg) return wf_status_errorf(err, errlen, WF_EINVAL, "NULL argument");
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        FILE *f = fopen(path, "rb");
        if (!f) return wf_status_errorf(err, errlen, WF_ENOTFOUND, "cannot open '%s'", path);
        fclose(f);
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: line %d: %s", path, jerr.line,
                                jerr.text);
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text) return wf_status_errorf(err, errlen, WF_ENOMEM, "reading '%s'", path);
    wf_status st = wf_dit_vae_config_parse(text, strlen(text), cfg, err, errlen);
    free(text);
    return st;
}

/* ---- weights ---- */

typedef struct loader {
    wf_dit_vae *vae;
    wf_dit_weight_lookup fn;
    void *user;
    char *err;
    size_t errlen;
    wf_status st;
} loader;

static void shape_str(char *buf, size_t n, int nd, const int64_t *d) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < nd && used + 1 < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%lld", i ? "x" : "", (long long)d[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* Loads tensor `name` (or `alt`) of exactly shape want[0..nd) as fp32; a trailing 1x1 of a
 * [C, C, 1, 1] tensor is accepted where a [C, C] matrix is wanted (old attention blocks). */
static float *load(loader *L, const char *name, const char *alt, int nd, const int64_t *want) {
    if (L->st != WF_OK) return NULL;
    wf_dit_tensor_view t = {0};
    wf_status st = L->fn(L->user, name, &t);
    if (st == WF_ENOTFOUND && alt) st = L->fn(L->user, name = alt, &t);
    if (st != WF_OK) {
        L->st = wf_status_errorf(L->err, L->errlen, st, "vae: tensor '%s' %s", name,
                                 st == WF_ENOTFOUND ? "not found" : "could not be read");
        return NULL;
    }
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= want[i];
    bool ok = t.n_dims == nd || (nd == 2 && t.n_dims == 4 && t.shape[2] == 1 && t.shape[3] == 1);
    for (int i = 0; ok && i < nd; i++) ok = t.shape[i] == want[i];
    if (!ok || !t.data) {
        char got[64], exp[64];
        shape_str(got, sizeof got, t.n_dims < 0 || t.n_dims > 4 ? 0 : t.n_dims, t.shape);
        shape_str(exp, sizeof exp, nd, want);
        L->st = wf_status_errorf(L->err, L->errlen, WF_EINVAL,
                                 "vae: tensor '%s' has shape [%s], expected [%s]", name, got, exp);
        return NULL;
    }
    wf_dit_vae *v = L->vae;
    float *dst = malloc(sizeof(float) * (size_t)n);
    if (!dst || v->n_owned == v->cap_owned) {
        free(dst);
        L->st = wf_status_errorf(L->err, L->errlen, WF_ENOMEM, "vae: tensor '%s'", name);
        return NULL;
    }
    v->owned[v->n_owned++] = dst;
    const uint16_t *h = t.data;
    for (int64_t i = 0; i < n; i++) {
        switch (t.dtype) {
        case WF_DIT_DTYPE_F16: dst[i] = wf_fp16_to_fp32(h[i]); break;
        case WF_DIT_DTYPE_BF16: dst[i] = wf_bf16_to_fp32(h[i]); break;
        case WF_DIT_DTYPE_F32:
        default: memcpy(&dst[i], (const char *)t.data + 4 * i, 4); break;
        }
    }
    return dst;
}

static void load_conv(loader *L, conv *c, const char *prefix, int ci, int co, int k) {
    char wn[160], bn[160];
    snprintf(wn, sizeof wn, "%s.weight", prefix);
    snprintf(bn, sizeof bn, "%s.bias", prefix);
    c->ci = ci;
    c->co = co;
    c->k = k;
    c->w = load(L, wn, NULL, 4, (const int64_t[]){co, ci, k, k});
    c->b = load(L, bn, NULL, 1, (const int64_t[]){co});
}

static void load_norm(loader *L, norm *n, const char *prefix, int c) {
    char wn[160], bn[160];
    snprintf(wn, sizeof wn, "%s.weight", prefix);
    snprintf(bn, sizeof bn, "%s.bias", prefix);
    n->c = c;
    n->g = load(L, wn, NULL, 1, (const int64_t[]){c});
    n->b = load(L, bn, NULL, 1, (const int64_t[]){c});
}

static void load_resnet(loader *L, resnet *r, const char *prefix, int ci, int co) {
    char p[160];
    r->ci = ci;
    r->co = co;
    snprintf(p, sizeof p, "%s.norm1", prefix);
    load_norm(L, &r->n1, p, ci);
    snprintf(p, sizeof p, "%s.conv1", prefix);
    load_conv(L, &r->c1, p, ci, co, 3);
    snprintf(p, sizeof p, "%s.norm2", prefix);
    load_norm(L, &r->n2, p, co);
    snprintf(p, sizeof p, "%s.conv2", prefix);
    load_conv(L, &r->c2, p, co, co, 3);
    if (ci != co) {
        snprintf(p, sizeof p, "%s.conv_shortcut", prefix);
        load_conv(L, &r->sc, p, ci, co, 1);
    }
}

static void load_linear(loader *L, float **w, float **b, const char *prefix, const char *name,
                        const char *old, int c) {
    char wn[160], bn[160], wo[160], bo[160];
    snprintf(wn, sizeof wn, "%s.%s.weight", prefix, name);
    snprintf(bn, sizeof bn, "%s.%s.bias", prefix, name);
    snprintf(wo, sizeof wo, "%s.%s.weight", prefix, old);
    snprintf(bo, sizeof bo, "%s.%s.bias", prefix, old);
    *w = load(L, wn, wo, 2, (const int64_t[]){c, c});
    *b = load(L, bn, bo, 1, (const int64_t[]){c});
}

/* Largest activation (floats) and the attention sizes for an h x w latent. */
static size_t plan_floats(const wf_dit_vae_config *c, int h, int w) {
    size_t hw = (size_t)h * (size_t)w, top = (size_t)c->block_out_channels[c->n_blocks - 1];
    size_t m = hw * (size_t)(c->latent_channels > (int)top ? c->latent_channels : (int)top);
    size_t prev = top;
    for (int i = 0; i < c->n_blocks; i++) {
        size_t co = (size_t)c->block_out_channels[c->n_blocks - 1 - i];
        size_t r = hw << (2 * i);
        size_t mc = prev > co ? prev : co;
        if (mc * r > m) m = mc * r;
        if (i < c->n_blocks - 1 && co * r * 4 > m) m = co * r * 4;
        prev = co;
    }
    size_t fin = (size_t)c->out_channels * (hw << (2 * (c->n_blocks - 1)));
    return fin > m ? fin : m;
}

void wf_dit_vae_free(wf_dit_vae *v) {
    if (!v) return;
    for (int i = 0; i < v->n_owned; i++) free(v->owned[i]);
    free(v->owned);
    free(v->ups);
    free(v->a);
    free(v->b);
    free(v->c);
    free(v->q);
    free(v->k);
    free(v->v);
    free(v->o);
    free(v->s);
    free(v);
}

wf_status wf_dit_vae_new(const wf_dit_vae_config *cfg, wf_dit_weight_lookup lookup, void *user,
                         int max_h, int max_w, wf_threadpool *pool, wf_dit_vae **out, char *err,
                         size_t errlen) {
    if (!out) return wf_status_errorf(err, errlen, WF_EINVAL, "NULL argument");
    *out = NULL;
    if (!cfg || !lookup || cfg->n_blocks < 1 || cfg->n_blocks > WF_DIT_VAE_MAX_BLOCKS)
        return wf_status_errorf(err, errlen, WF_EINVAL, "vae: bad config or lookup");
    if (max_h < 1 || max_w < 1 || max_h > 4096 || max_w > 4096)
        return wf_status_errorf(err, errlen, WF_EINVAL, "vae: latent %dx%d outside 1..4096",
                                max_h, max_w);
    wf_dit_vae *v = calloc(1, sizeof *v);
    if (!v) return wf_status_errorf(err, errlen, WF_ENOMEM, "vae");
    v->cfg = *cfg;
    v->pool = pool;
    v->max_h = max_h;
    v->max_w = max_w;
    int nb = cfg->n_blocks, per = cfg->layers_per_block + 1;
    v->cap_owned = 64 + 12 * nb * per;
    v->owned = calloc((size_t)v->cap_owned, sizeof(float *));
    v->ups = calloc((size_t)(nb * per), sizeof(resnet));
    loader L = {v, lookup, user, err, errlen, WF_OK};
    if (!v->owned || !v->ups) {
        L.st = wf_status_errorf(err, errlen, WF_ENOMEM, "vae");
        goto fail;
    }
    int cl = cfg->latent_channels, top = cfg->block_out_channels[nb - 1];
    if (cfg->use_post_quant_conv) load_conv(&L, &v->post_quant, "post_quant_conv", cl, cl, 1);
    load_conv(&L, &v->conv_in, "decoder.conv_in", cl, top, 3);
    load_resnet(&L, &v->mid[0], "decoder.mid_block.resnets.0", top, top);
    if (cfg->mid_block_add_attention) {
        const char *ap = "decoder.mid_block.attentions.0";
        v->att.c = top;
        load_norm(&L, &v->att.n, "decoder.mid_block.attentions.0.group_norm", top);
        load_linear(&L, &v->att.wq, &v->att.bq, ap, "to_q", "query", top);
        load_linear(&L, &v->att.wk, &v->att.bk, ap, "to_k", "key", top);
        load_linear(&L, &v->att.wv, &v->att.bv, ap, "to_v", "value", top);
        load_linear(&L, &v->att.wo, &v->att.bo, ap, "to_out.0", "proj_attn", top);
    }
    load_resnet(&L, &v->mid[1], "decoder.mid_block.resnets.1", top, top);
    int prev = top;
    for (int i = 0; i < nb; i++) {
        int co = cfg->block_out_channels[nb - 1 - i];
        char p[160];
        for (int j = 0; j < per; j++) {
            snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%d", i, j);
            load_resnet(&L, &v->ups[i * per + j], p, j == 0 ? prev : co, co);
        }
        if (i < nb - 1) {
            snprintf(p, sizeof p, "decoder.up_blocks.%d.upsamplers.0.conv", i);
            load_conv(&L, &v->upsample[i], p, co, co, 3);
        }
        prev = co;
    }
    load_norm(&L, &v->norm_out, "decoder.conv_norm_out", prev);
    load_conv(&L, &v->conv_out, "decoder.conv_out", prev, cfg->out_channels, 3);
    if (L.st != WF_OK) goto fail;

    size_t buf = plan_floats(cfg, max_h, max_w);
    size_t n_tok = (size_t)max_h * (size_t)max_w;
    v->a = malloc(sizeof(float) * buf);
    v->b = malloc(sizeof(float) * buf);
    v->c = malloc(sizeof(float) * buf);
    if (cfg->mid_block_add_attention) {
        v->q = malloc(sizeof(float) * n_tok * (size_t)top);
        v->k = malloc(sizeof(float) * n_tok * (size_t)top);
        v->v = malloc(sizeof(float) * n_tok * (size_t)top);
        v->o = malloc(sizeof(float) * n_tok * (size_t)top);
        v->s = malloc(sizeof(float) * n_tok * n_tok);
        if (!v->q || !v->k || !v->v || !v->o || !v->s) goto oom;
    }
    if (!v->a || !v->b || !v->c) goto oom;
    *out = v;
    return WF_OK;
oom:
    L.st = wf_status_errorf(err, errlen, WF_ENOMEM, "vae: scratch for a %dx%d latent", max_h,
                            max_w);
fail:
    wf_dit_vae_free(v);
    return L.st;
}

int wf_dit_vae_upscale(const wf_dit_vae *v) { return 1 << (v->cfg.n_blocks - 1); }

/* ---- kernels ---- */

typedef void (*range_fn)(void *ctx, int lo, int hi);
typedef struct pfor {
    range_fn fn;
    void *ctx;
    int n;
} pfor;

static void pfor_thunk(void *arg, int ith, int nth) {
    const pfor *p = arg;
    int lo = (int)((long long)p->n * ith / nth), hi = (int)((long long)p->n * (ith + 1) / nth);
    if (lo < hi) p->fn(p->ctx, lo, hi);
}

static void parallel_for(wf_threadpool *pool, int n, range_fn fn, void *ctx) {
    pfor p = {fn, ctx, n};
    wf_threadpool_run(pool, pfor_thunk, &p);
}

typedef struct conv_job {
    const conv *cv;
    const float *in;
    float *out;
    int h, w;
} conv_job;

/* Direct convolution, stride 1, "same" padding, for output channels [lo, hi). */
static void conv_range(void *arg, int lo, int hi) {
    const conv_job *j = arg;
    const conv *cv = j->cv;
    int h = j->h, w = j->w, k = cv->k, pad = k / 2;
    size_t hw = (size_t)h * (size_t)w;
    for (int co = lo; co < hi; co++) {
        float *o = j->out + (size_t)co * hw;
        for (size_t p = 0; p < hw; p++) o[p] = cv->b[co];
        for (int ci = 0; ci < cv->ci; ci++) {
            const float *ip = j->in + (size_t)ci * hw;
            const float *wk = cv->w + ((size_t)co * (size_t)cv->ci + (size_t)ci) * (size_t)(k * k);
            for (int ky = 0; ky < k; ky++) {
                int dy = ky - pad;
                int y0 = dy < 0 ? -dy : 0, y1 = dy > 0 ? h - dy : h;
                for (int kx = 0; kx < k; kx++) {
                    int dx = kx - pad;
                    int x0 = dx < 0 ? -dx : 0, x1 = dx > 0 ? w - dx : w;
                    float wv = wk[ky * k + kx];
                    for (int y = y0; y < y1; y++) {
                        float *orow = o + (size_t)y * (size_t)w;
                        const float *irow = ip + (size_t)(y + dy) * (size_t)w + dx;
                        for (int x = x0; x < x1; x++) orow[x] += wv * irow[x];
                    }
                }
            }
        }
    }
}

static void run_conv(wf_dit_vae *v, const conv *cv, const float *in, float *out, int h, int w) {
    conv_job j = {cv, in, out, h, w};
    parallel_for(v->pool, cv->co, conv_range, &j);
}

typedef struct gn_job {
    const norm *n;
    const float *in;
    float *out;
    size_t hw;
    int cpg; /* channels per group */
    bool silu;
} gn_job;

static void gn_range(void *arg, int lo, int hi) {
    const gn_job *j = arg;
    for (int g = lo; g < hi; g++) {
        size_t c0 = (size_t)g * (size_t)j->cpg, cnt = (size_t)j->cpg * j->hw;
        const float *x = j->in + c0 * j->hw;
        double s = 0, s2 = 0;
        for (size_t i = 0; i < cnt; i++) s += x[i];
        double mean = s / (double)cnt;
        for (size_t i = 0; i < cnt; i++) s2 += (x[i] - mean) * (x[i] - mean);
        double inv = 1.0 / sqrt(s2 / (double)cnt + GN_EPS);
        for (int c = 0; c < j->cpg; c++) {
            float scale = (float)(inv * j->n->g[c0 + (size_t)c]);
            float shift = (float)(j->n->b[c0 + (size_t)c] - mean * inv * j->n->g[c0 + (size_t)c]);
            const float *xc = x + (size_t)c * j->hw;
            float *yc = j->out + (c0 + (size_t)c) * j->hw;
            for (size_t i = 0; i < j->hw; i++) {
                float y = xc[i] * scale + shift;
                yc[i] = j->silu ? y / (1.0f + expf(-y)) : y;
            }
        }
    }
}

static void run_gn(wf_dit_vae *v, const norm *n, const float *in, float *out, size_t hw,
                   bool silu) {
    int groups = v->cfg.norm_num_groups;
    gn_job j = {n, in, out, hw, n->c / groups, silu};
    parallel_for(v->pool, groups, gn_range, &j);
}

/* a = resnet(a), using b and c as scratch. */
static void run_resnet(wf_dit_vae *v, const resnet *r, int h, int w) {
    size_t hw = (size_t)h * (size_t)w, n = (size_t)r->co * hw;
    run_gn(v, &r->n1, v->a, v->b, hw, true);
    run_conv(v, &r->c1, v->b, v->c, h, w);
    run_gn(v, &r->n2, v->c, v->b, hw, true);
    run_conv(v, &r->c2, v->b, v->c, h, w);
    if (r->sc.w) {
        run_conv(v, &r->sc, v->a, v->b, h, w);
        for (size_t i = 0; i < n; i++) v->a[i] = v->b[i] + v->c[i];
    } else {
        for (size_t i = 0; i < n; i++) v->a[i] += v->c[i];
    }
}

typedef struct attn_job {
    wf_dit_vae *v;
    int n_tok, c;
} attn_job;

/* q, k, v rows [lo, hi) from the normalized input b ([C][N]). */
static void qkv_range(void *arg, int lo, int hi) {
    const attn_job *j = arg;
    const attn *at = &j->v->att;
    int c = j->c, n = j->n_tok;
    const float *x = j->v->b;
    for (int i = lo; i < hi; i++) {
        for (int oc = 0; oc < c; oc++) {
            double q = at->bq[oc], k = at->bk[oc], vv = at->bv[oc];
            for (int ic = 0; ic < c; ic++) {
                double xv = x[(size_t)ic * (size_t)n + (size_t)i];
                q += at->wq[(size_t)oc * (size_t)c + (size_t)ic] * xv;
                k += at->wk[(size_t)oc * (size_t)c + (size_t)ic] * xv;
                vv += at->wv[(size_t)oc * (size_t)c + (size_t)ic] * xv;
            }
            j->v->q[(size_t)i * (size_t)c + (size_t)oc] = (float)q;
            j->v->k[(size_t)i * (size_t)c + (size_t)oc] = (float)k;
            j->v->v[(size_t)i * (size_t)c + (size_t)oc] = (float)vv;
        }
    }
}

/* softmax(q k^T / sqrt(C)) v for query rows [lo, hi) into o. */
static void scores_range(void *arg, int lo, int hi) {
    const attn_job *j = arg;
    int c = j->c, n = j->n_tok;
    const float scale = 1.0f / sqrtf((float)c);
    for (int i = lo; i < hi; i++) {
        float *s = j->v->s + (size_t)i * (size_t)n;
        const float *q = j->v->q + (size_t)i * (size_t)c;
        float mx = -INFINITY;
        for (int t = 0; t < n; t++) {
            const float *k = j->v->k + (size_t)t * (size_t)c;
            float d = 0;
            for (int e = 0; e < c; e++) d += q[e] * k[e];
            s[t] = d * scale;
            if (s[t] > mx) mx = s[t];
        }
        double sum = 0;
        for (int t = 0; t < n; t++) {
            s[t] = expf(s[t] - mx);
            sum += s[t];
        }
        float inv = (float)(1.0 / sum);
        float *o = j->v->o + (size_t)i * (size_t)c;
        for (int e = 0; e < c; e++) o[e] = 0;
        for (int t = 0; t < n; t++) {
            float p = s[t] * inv;
            const float *vv = j->v->v + (size_t)t * (size_t)c;
            for (int e = 0; e < c; e++) o[e] += p * vv[e];
        }
    }
}

/* a[oc][i] += bo[oc] + sum_ic wo[oc][ic] o[i][ic] for output channels [lo, hi). */
static void proj_range(void *arg, int lo, int hi) {
    const attn_job *j = arg;
    const attn *at = &j->v->att;
    int c = j->c, n = j->n_tok;
    for (int oc = lo; oc < hi; oc++) {
        const float *wrow = at->wo + (size_t)oc * (size_t)c;
        for (int i = 0; i < n; i++) {
            const float *o = j->v->o + (size_t)i * (size_t)c;
            float acc = at->bo[oc];
            for (int ic = 0; ic < c; ic++) acc += wrow[ic] * o[ic];
            j->v->a[(size_t)oc * (size_t)n + (size_t)i] += acc;
        }
    }
}

static void run_attention(wf_dit_vae *v, int h, int w) {
    attn_job j = {v, h * w, v->att.c};
    run_gn(v, &v->att.n, v->a, v->b, (size_t)h * (size_t)w, false);
    parallel_for(v->pool, j.n_tok, qkv_range, &j);
    parallel_for(v->pool, j.n_tok, scores_range, &j);
    parallel_for(v->pool, j.c, proj_range, &j);
}

/* b = nearest-2x(a) for c channels of h x w. */
static void upsample2x(const float *in, float *out, int c, int h, int w) {
    for (int ch = 0; ch < c; ch++) {
        const float *ip = in + (size_t)ch * (size_t)h * (size_t)w;
        float *op = out + (size_t)ch * (size_t)(4 * h * w);
        for (int y = 0; y < 2 * h; y++)
            for (int x = 0; x < 2 * w; x++)
                op[(size_t)y * (size_t)(2 * w) + (size_t)x] =
                    ip[(size_t)(y / 2) * (size_t)w + (size_t)(x / 2)];
    }
}

wf_status wf_dit_vae_decode(wf_dit_vae *v, const float *latent, int h, int w, float *image) {
    /* Every buffer is sized by the latent's point count, so any shape of at most
     * max_h x max_w points decodes (other image sizes than the native one). */
    if (!v || !latent || !image || h < 1 || w < 1 ||
        (size_t)h * (size_t)w > (size_t)v->max_h * (size_t)v->max_w)
        return WF_EINVAL;
    const wf_dit_vae_config *c = &v->cfg;
    size_t hw = (size_t)h * (size_t)w, nl = (size_t)c->latent_channels * hw;
    float inv_sf = (float)(1.0 / c->scaling_factor), shift = (float)c->shift_factor;
    for (size_t i = 0; i < nl; i++) v->a[i] = latent[i] * inv_sf + shift;
    if (c->use_post_quant_conv) run_conv(v, &v->post_quant, v->a, v->b, h, w);
    else memcpy(v->b, v->a, sizeof(float) * nl);
    run_conv(v, &v->conv_in, v->b, v->a, h, w);
    run_resnet(v, &v->mid[0], h, w);
    if (c->mid_block_add_attention) run_attention(v, h, w);
    run_resnet(v, &v->mid[1], h, w);
    int per = c->layers_per_block + 1, ch = h, cw = w;
    for (int i = 0; i < c->n_blocks; i++) {
        for (int j = 0; j < per; j++) run_resnet(v, &v->ups[i * per + j], ch, cw);
        if (i < c->n_blocks - 1) {
            upsample2x(v->a, v->b, v->upsample[i].ci, ch, cw);
            ch *= 2;
            cw *= 2;
            run_conv(v, &v->upsample[i], v->b, v->a, ch, cw);
        }
    }
    run_gn(v, &v->norm_out, v->a, v->b, (size_t)ch * (size_t)cw, true);
    run_conv(v, &v->conv_out, v->b, image, ch, cw);
    return WF_OK;
}
