/* DiT loading: find the pieces (diffusers folder or original-layout file), read the config
 * (config.json, or inferred from tensor shapes), map both key layouts onto one weight set with
 * every shape checked, pack the GEMM weights, and reserve the worst-case forward buffers. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/dit/dit_impl.h"
#include "engine/dit/safetensors.h"

#define DIT_CLASS "DiTTransformer2DModel"
#define DIFFUSERS_WEIGHTS "diffusion_pytorch_model.safetensors"

wf_dit_options wf_dit_options_default(void) {
    return (wf_dit_options){.max_batch = 4, .timestep_shift = -1};
}

const wf_dit_config *wf_dit_get_config(const wf_dit *m) { return &m->cfg; }
const wf_dit_paths *wf_dit_get_paths(const wf_dit *m) { return &m->paths; }

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}
static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static char *join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%s", a, b);
    return s;
}

/* ---- tensors ------------------------------------------------------------------------------ */

/* Finds `name`, checks its shape, returns an fp32 copy (caller frees). */
static wf_status fetch(const wf_safetensors *st, const char *file, const char *name, int nd,
                       const int64_t *shape, float **out, char *err, size_t errlen) {
    *out = NULL;
    const wf_safetensors_tensor *t = wf_safetensors_find(st, name);
    if (!t) return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: missing tensor '%s'", file, name);
    bool ok = t->n_dims == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[96] = "", got[96] = "";
        for (int i = 0; i < nd; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)shape[i]);
        for (int i = 0; i < t->n_dims; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "%s: tensor '%s' has shape [%s] but the config needs [%s]", file, name, got, want);
    }
    *out = malloc((size_t)(t->n_elements ? t->n_elements : 1) * sizeof(float));
    if (!*out) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory loading '%s'", name);
    wf_safetensors_to_f32(t, *out, t->n_elements);
    return WF_OK;
}

/* A linear layer from n_parts weight/bias pairs stacked along the output (diffusers' to_q,
 * to_k, to_v make one qkv). Each part is n x k (a conv weight n x C x p x p when conv_c > 0). */
static wf_status load_linear(const wf_dit *m, const wf_safetensors *st, const char *file,
                             const char *const *wnames, const char *const *bnames, int n_parts, int n,
                             int k, int conv_c, int bf16, wf__dit_linear *l, char *err, size_t errlen) {
    wf_status rc = WF_OK;
    float *w = malloc((size_t)n_parts * n * k * sizeof *w), *b = malloc((size_t)n_parts * n * sizeof *b);
    if (!w || !b) {
        rc = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory loading '%s'", wnames[0]);
        goto done;
    }
    for (int i = 0; i < n_parts; i++) {
        float *pw, *pb;
        int p = m->cfg.patch_size;
        int64_t ws[4] = {n, conv_c ? conv_c : k, p, p}, bs[1] = {n};
        rc = fetch(st, file, wnames[i], conv_c ? 4 : 2, ws, &pw, err, errlen);
        if (rc != WF_OK) goto done;
        memcpy(w + (size_t)i * n * k, pw, (size_t)n * k * sizeof *w);
        free(pw);
        rc = fetch(st, file, bnames[i], 1, bs, &pb, err, errlen);
        if (rc != WF_OK) goto done;
        memcpy(b + (size_t)i * n, pb, (size_t)n * sizeof *b);
        free(pb);
    }
    if (wf__dit_linear_pack(l, w, b, n_parts * n, k, bf16 && m->cfg.bf16) != 0)
        rc = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory packing '%s'", wnames[0]);
done:
    free(w);
    free(b);
    return rc;
}

/* bf16: whether this layer follows the model's bf16 setting. Only the blocks' attention and
 * MLP GEMMs (nearly all the work) go bf16; the conditioning layers (one row per batch item), the
 * patch embedding (k = C p^2) and the final projection (p^2 out_C outputs) stay fp32: they cost
 * little, and bf16 rounding there reaches the output unaveraged (measured: out error 9e-3 -> 5e-3
 * of RMS on DiT-S/2). */
static wf_status linear1(const wf_dit *m, const wf_safetensors *st, const char *file, const char *prefix,
                         int n, int k, int bf16, wf__dit_linear *l, char *err, size_t errlen) {
    char wn[160], bn[160];
    snprintf(wn, sizeof wn, "%s.weight", prefix);
    snprintf(bn, sizeof bn, "%s.bias", prefix);
    const char *w = wn, *b = bn;
    return load_linear(m, st, file, &w, &b, 1, n, k, 0, bf16, l, err, errlen);
}

/* diffusers keeps a timestep MLP and label table per block. weft shares block 0's when every copy
 * is the same (pretrained DiT conversions: saves 28 copies on DiT-XL) and keeps per-block copies
 * when they differ (models trained in diffusers, where each block learns its own). *same is
 * cleared when block blk's copy differs. */
static wf_status check_copy(const wf_safetensors *st, const char *file, int blk, const char *suffix,
                            int nd, const int64_t *shape, const float *ref, int *same, char *err,
                            size_t errlen) {
    char name[192];
    snprintf(name, sizeof name, "transformer_blocks.%d.norm1.emb.%s", blk, suffix);
    float *v;
    wf_status rc = fetch(st, file, name, nd, shape, &v, err, errlen);
    if (rc != WF_OK) return rc;
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)shape[i];
    if (memcmp(v, ref, n * sizeof *v) != 0) *same = 0;
    free(v);
    return rc;
}

static wf_status load_weights(wf_dit *m, const wf_safetensors *st, const char *file, char *err,
                              size_t errlen) {
    const wf_dit_config *c = &m->cfg;
    const int D = c->hidden, p = c->patch_size, F = c->ffn, orig = c->layout == WF_DIT_LAYOUT_ORIGINAL;
    char a[160], b[160], q[3][160], qb[3][160];
    wf_status rc;
    const char *pw = a, *pb = b;

    snprintf(a, sizeof a, orig ? "x_embedder.proj.weight" : "pos_embed.proj.weight");
    snprintf(b, sizeof b, orig ? "x_embedder.proj.bias" : "pos_embed.proj.bias");
    rc = load_linear(m, st, file, &pw, &pb, 1, D, c->in_channels * p * p, c->in_channels, 0, &m->x_embed, err, errlen);
    if (rc != WF_OK) return rc;

    const char *t1 = orig ? "t_embedder.mlp.0" : "transformer_blocks.0.norm1.emb.timestep_embedder.linear_1";
    const char *t2 = orig ? "t_embedder.mlp.2" : "transformer_blocks.0.norm1.emb.timestep_embedder.linear_2";
    rc = linear1(m, st, file, t1, D, WF__DIT_TFREQ, 0, &m->t1, err, errlen);
    if (rc == WF_OK) rc = linear1(m, st, file, t2, D, D, 0, &m->t2, err, errlen);
    if (rc != WF_OK) return rc;
    int64_t ts[2] = {c->num_classes + 1, D};
    rc = fetch(st, file, orig ? "y_embedder.embedding_table.weight"
                              : "transformer_blocks.0.norm1.emb.class_embedder.embedding_table.weight",
               2, ts, &m->label_table, err, errlen);
    if (rc != WF_OK) return rc;

    if (!orig) {
        /* Compare every block's copies against block 0's, read back as fp32. */
        float *w1, *b1, *w2, *b2;
        int64_t s1[2] = {D, WF__DIT_TFREQ}, s2[2] = {D, D}, sb[1] = {D};
        rc = fetch(st, file, "transformer_blocks.0.norm1.emb.timestep_embedder.linear_1.weight", 2, s1, &w1, err, errlen);
        if (rc != WF_OK) return rc;
        fetch(st, file, "transformer_blocks.0.norm1.emb.timestep_embedder.linear_1.bias", 1, sb, &b1, NULL, 0);
        fetch(st, file, "transformer_blocks.0.norm1.emb.timestep_embedder.linear_2.weight", 2, s2, &w2, NULL, 0);
        fetch(st, file, "transformer_blocks.0.norm1.emb.timestep_embedder.linear_2.bias", 1, sb, &b2, NULL, 0);
        if (!b1 || !w2 || !b2) rc = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
        int same = 1;
        for (int i = 1; i < c->depth && rc == WF_OK; i++) {
            rc = check_copy(st, file, i, "timestep_embedder.linear_1.weight", 2, s1, w1, &same, err, errlen);
            if (rc == WF_OK) rc = check_copy(st, file, i, "timestep_embedder.linear_1.bias", 1, sb, b1, &same, err, errlen);
            if (rc == WF_OK) rc = check_copy(st, file, i, "timestep_embedder.linear_2.weight", 2, s2, w2, &same, err, errlen);
            if (rc == WF_OK) rc = check_copy(st, file, i, "timestep_embedder.linear_2.bias", 1, sb, b2, &same, err, errlen);
            if (rc == WF_OK)
                rc = check_copy(st, file, i, "class_embedder.embedding_table.weight", 2, ts, m->label_table, &same, err, errlen);
        }
        for (int i = 1; i < c->depth && rc == WF_OK && !same; i++) {
            wf__dit_block *blk = &m->blocks[i];
            snprintf(a, sizeof a, "transformer_blocks.%d.norm1.emb.timestep_embedder.linear_1", i);
            rc = linear1(m, st, file, a, D, WF__DIT_TFREQ, 0, &blk->t1, err, errlen);
            snprintf(a, sizeof a, "transformer_blocks.%d.norm1.emb.timestep_embedder.linear_2", i);
            if (rc == WF_OK) rc = linear1(m, st, file, a, D, D, 0, &blk->t2, err, errlen);
            snprintf(a, sizeof a, "transformer_blocks.%d.norm1.emb.class_embedder.embedding_table.weight", i);
            if (rc == WF_OK) rc = fetch(st, file, a, 2, ts, &blk->label_table, err, errlen);
        }
        free(w1);
        free(b1);
        free(w2);
        free(b2);
        if (rc != WF_OK) return rc;
    }

    for (int i = 0; i < c->depth; i++) {
        wf__dit_block *blk = &m->blocks[i];
        if (orig) {
            snprintf(a, sizeof a, "blocks.%d.adaLN_modulation.1", i);
            rc = linear1(m, st, file, a, 6 * D, D, 0, &blk->ada, err, errlen);
            snprintf(a, sizeof a, "blocks.%d.attn.qkv", i);
            if (rc == WF_OK) rc = linear1(m, st, file, a, 3 * D, D, 1, &blk->qkv, err, errlen);
            snprintf(a, sizeof a, "blocks.%d.attn.proj", i);
            if (rc == WF_OK) rc = linear1(m, st, file, a, D, D, 1, &blk->proj, err, errlen);
            snprintf(a, sizeof a, "blocks.%d.mlp.fc1", i);
            if (rc == WF_OK) rc = linear1(m, st, file, a, F, D, 1, &blk->fc1, err, errlen);
            snprintf(a, sizeof a, "blocks.%d.mlp.fc2", i);
            if (rc == WF_OK) rc = linear1(m, st, file, a, D, F, 1, &blk->fc2, err, errlen);
        } else {
            snprintf(a, sizeof a, "transformer_blocks.%d.norm1.linear", i);
            rc = linear1(m, st, file, a, 6 * D, D, 0, &blk->ada, err, errlen);
            const char *qn[3], *qbn[3];
            static const char *const parts[3] = {"to_q", "to_k", "to_v"};
            for (int j = 0; j < 3; j++) {
                snprintf(q[j], sizeof q[j], "transformer_blocks.%d.attn1.%s.weight", i, parts[j]);
                snprintf(qb[j], sizeof qb[j], "transformer_blocks.%d.attn1.%s.bias", i, parts[j]);
                qn[j] = q[j];
                qbn[j] = qb[j];
            }
            if (rc == WF_OK) rc = load_linear(m, st, file, qn, qbn, 3, D, D, 0, 1, &blk->qkv, err, errlen);
            snprintf(a, sizeof a, "transformer_blocks.%d.attn1.to_out.0", i);
            if (rc == WF_OK) rc = linear1(m, st, file, a, D, D, 1, &blk->proj, err, errlen);
            snprintf(a, sizeof a, "transformer_blocks.%d.ff.net.0.proj", i);
            if (rc == WF_OK) rc = linear1(m, st, file, a, F, D, 1, &blk->fc1, err, errlen);
            snprintf(a, sizeof a, "transformer_blocks.%d.ff.net.2", i);
            if (rc == WF_OK) rc = linear1(m, st, file, a, D, F, 1, &blk->fc2, err, errlen);
            if (rc == WF_OK && c->norm_affine) {
                int64_t sd[1] = {D};
                snprintf(a, sizeof a, "transformer_blocks.%d.norm3.weight", i);
                rc = fetch(st, file, a, 1, sd, &blk->norm2_w, err, errlen);
                snprintf(a, sizeof a, "transformer_blocks.%d.norm3.bias", i);
                if (rc == WF_OK) rc = fetch(st, file, a, 1, sd, &blk->norm2_b, err, errlen);
            }
        }
        if (rc != WF_OK) return rc;
    }
    rc = linear1(m, st, file, orig ? "final_layer.adaLN_modulation.1" : "proj_out_1", 2 * D, D, 0, &m->final_ada,
                 err, errlen);
    if (rc == WF_OK)
        rc = linear1(m, st, file, orig ? "final_layer.linear" : "proj_out_2", p * p * c->out_channels, D, 0,
                     &m->final_lin, err, errlen);
    return rc;
}

/* ---- config -------------------------------------------------------------------------------- */

static wf_status json_int(json_t *o, const char *file, const char *key, int def, int *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (def < 0) return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: missing '%s'", file, key);
        *out = def;
        return WF_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 20))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: '%s' must be a positive integer", file, key);
    *out = (int)json_integer_value(v);
    return WF_OK;
}

static wf_status read_diffusers_config(wf_dit_config *c, const char *file, char *err, size_t errlen) {
    json_error_t je;
    json_t *o = json_load_file(file, 0, &je);
    if (!o) return wf_status_errorf(err, errlen, is_file(file) ? WF_EFORMAT : WF_ENOTFOUND,
                                    "%s: %s (line %d)", file, je.text, je.line);
    wf_status rc = WF_OK;
    if (!json_is_object(o)) {
        rc = wf_status_errorf(err, errlen, WF_EFORMAT, "%s: not a JSON object", file);
        goto done;
    }
    const char *cls = json_string_value(json_object_get(o, "_class_name"));
    if (cls && strcmp(cls, DIT_CLASS)) {
        rc = wf_status_errorf(err, errlen, WF_EUNSUPPORTED, "%s: _class_name '%s' is not %s", file, cls, DIT_CLASS);
        goto done;
    }
    int hd = 0;
    if ((rc = json_int(o, file, "num_attention_heads", -1, &c->heads, err, errlen)) ||
        (rc = json_int(o, file, "attention_head_dim", -1, &hd, err, errlen)) ||
        (rc = json_int(o, file, "in_channels", -1, &c->in_channels, err, errlen)) ||
        (rc = json_int(o, file, "out_channels", c->in_channels, &c->out_channels, err, errlen)) ||
        (rc = json_int(o, file, "num_layers", -1, &c->depth, err, errlen)) ||
        (rc = json_int(o, file, "sample_size", -1, &c->sample_size, err, errlen)) ||
        (rc = json_int(o, file, "patch_size", -1, &c->patch_size, err, errlen)) ||
        (rc = json_int(o, file, "num_embeds_ada_norm", -1, &c->num_classes, err, errlen)))
        goto done;
    c->hidden = c->heads * hd;
    c->ffn = 4 * c->hidden;
    const char *act = json_string_value(json_object_get(o, "activation_fn"));
    if (act && strcmp(act, "gelu-approximate")) {
        rc = wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                              "%s: unknown activation_fn '%s' (weft runs 'gelu-approximate')", file, act);
        goto done;
    }
    const char *norm = json_string_value(json_object_get(o, "norm_type"));
    if (norm && strcmp(norm, "ada_norm_zero")) {
        rc = wf_status_errorf(err, errlen, WF_EUNSUPPORTED, "%s: norm_type '%s' is not ada_norm_zero", file, norm);
        goto done;
    }
    json_t *ab = json_object_get(o, "attention_bias");
    if (ab && !json_is_true(ab)) {
        rc = wf_status_errorf(err, errlen, WF_EUNSUPPORTED, "%s: attention_bias false is not supported", file);
        goto done;
    }
    c->norm_affine = json_is_true(json_object_get(o, "norm_elementwise_affine"));
    json_t *eps = json_object_get(o, "norm_eps");
    c->norm_eps = json_is_number(eps) ? (float)json_number_value(eps) : 1e-5f;
    c->timestep_shift = 1;
    c->layout = WF_DIT_LAYOUT_DIFFUSERS;
done:
    json_decref(o);
    return rc;
}

/* Hyper-parameters of an original-layout file from its shapes; heads by the DiT family's width
 * (S 384/6, B 768/12, L 1024/16, XL 1152/16), else 64-wide heads. */
static wf_status infer_original_config(wf_dit_config *c, const wf_safetensors *st, const char *file,
                                       const wf_dit_options *opt, char *err, size_t errlen) {
    const wf_safetensors_tensor *xe = wf_safetensors_find(st, "x_embedder.proj.weight");
    const wf_safetensors_tensor *ye = wf_safetensors_find(st, "y_embedder.embedding_table.weight");
    const wf_safetensors_tensor *fl = wf_safetensors_find(st, "final_layer.linear.weight");
    const wf_safetensors_tensor *f1 = wf_safetensors_find(st, "blocks.0.mlp.fc1.weight");
    if (!xe || !ye || !fl || !f1)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: missing tensor '%s'", file,
                                !xe ? "x_embedder.proj.weight" : !ye ? "y_embedder.embedding_table.weight"
                                : !fl ? "final_layer.linear.weight" : "blocks.0.mlp.fc1.weight");
    if (xe->n_dims != 4 || xe->shape[2] != xe->shape[3] || xe->shape[2] < 1 || xe->shape[0] < 2 ||
        xe->shape[1] < 1 || xe->shape[0] > 65536 || xe->shape[1] > 64 || xe->shape[2] > 64)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "%s: tensor 'x_embedder.proj.weight' is not a [hidden, C, p, p] conv weight", file);
    c->hidden = (int)xe->shape[0];
    c->in_channels = (int)xe->shape[1];
    c->patch_size = (int)xe->shape[2];
    if (ye->n_dims != 2 || ye->shape[0] < 2 || ye->shape[0] > (1 << 24))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: tensor 'y_embedder.embedding_table.weight' "
                                "must be [num_classes + 1, hidden]", file);
    c->num_classes = (int)ye->shape[0] - 1;
    int pp = c->patch_size * c->patch_size;
    if (fl->n_dims != 2 || fl->shape[0] % pp || fl->shape[0] == 0)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: tensor 'final_layer.linear.weight' rows are "
                                "not a multiple of patch^2 = %d", file, pp);
    c->out_channels = (int)(fl->shape[0] / pp);
    if (f1->n_dims != 2 || f1->shape[0] < 1 || f1->shape[0] > (1 << 20))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: tensor 'blocks.0.mlp.fc1.weight' is not 2-D", file);
    c->ffn = (int)f1->shape[0];
    c->depth = 0;
    char name[64];
    for (;;) {
        snprintf(name, sizeof name, "blocks.%d.attn.qkv.weight", c->depth);
        if (!wf_safetensors_find(st, name)) break;
        c->depth++;
    }
    int D = c->hidden;
    c->heads = opt->heads > 0 ? opt->heads
               : D == 384 ? 6 : D == 768 ? 12 : D == 1024 || D == 1152 ? 16 : D % 64 == 0 ? D / 64 : 0;
    if (c->heads <= 0)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "%s: cannot infer the head count for hidden %d: pass it in the options", file, D);
    const wf_safetensors_tensor *pe = wf_safetensors_find(st, "pos_embed");
    c->sample_size = opt->sample_size > 0 ? opt->sample_size : 32;
    if (pe && pe->n_dims == 3 && opt->sample_size <= 0) {
        int side = (int)lround(sqrt((double)pe->shape[1]));
        if ((int64_t)side * side == pe->shape[1]) c->sample_size = side * c->patch_size;
    }
    c->norm_eps = 1e-6f;
    c->norm_affine = false;
    c->timestep_shift = 0;
    c->layout = WF_DIT_LAYOUT_ORIGINAL;
    return WF_OK;
}

static wf_status check_config(const wf_dit_config *c, const char *file, char *err, size_t errlen) {
    if (c->depth < 1) return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: no transformer blocks", file);
    if (c->hidden % c->heads)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: hidden %d not divisible by %d heads", file,
                                c->hidden, c->heads);
    if ((c->hidden / c->heads) % 2 || c->hidden % 4)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "%s: hidden %d must be a multiple of 4 (2-D sin-cos positions)", file, c->hidden);
    if (c->sample_size % c->patch_size)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: sample_size %d not divisible by patch_size %d",
                                file, c->sample_size, c->patch_size);
    return WF_OK;
}

/* ---- buffers ------------------------------------------------------------------------------- */

static wf_status reserve(wf_dit *m, const wf_dit_options *opt, char *err, size_t errlen) {
    const wf_dit_config *c = &m->cfg;
    const int D = c->hidden, p = c->patch_size;
    m->max_batch = opt->max_batch > 0 ? opt->max_batch : 1;
    m->max_h = opt->max_height > 0 ? opt->max_height : c->sample_size;
    m->max_w = opt->max_width > 0 ? opt->max_width : c->sample_size;
    m->max_tokens = (m->max_h / p) * (m->max_w / p);
    if (opt->max_tokens > 0) { /* any shape of at most max_tokens patches */
        m->max_tokens = opt->max_tokens;
        m->max_h = m->max_w = 0;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    m->max_threads = opt->n_threads > 0 ? opt->n_threads : cores > 0 ? (int)cores : 1;
    if (m->max_tokens < 1 || m->max_tokens > (1 << 20))
        return wf_status_errorf(err, errlen, WF_EINVAL, "max size %dx%d is below the patch size %d (or above 2^20 patches)", m->max_h,
                                m->max_w, p);
    size_t rows = (size_t)m->max_batch * m->max_tokens, B = (size_t)m->max_batch;
    int kmax = c->ffn > D ? c->ffn : D;
    if (c->in_channels * p * p > kmax) kmax = c->in_channels * p * p;
#define ALLOC(ptr, n)                                                                               \
    do {                                                                                            \
        (ptr) = aligned_alloc(64, ((n) * sizeof *(ptr) + 63) & ~(size_t)63);                        \
        if (!(ptr)) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory reserving buffers"); \
    } while (0)
    ALLOC(m->patches, rows * c->in_channels * p * p);
    ALLOC(m->h, rows * D);
    ALLOC(m->xn, rows * D);
    ALLOC(m->qkv, rows * 3 * D);
    ALLOC(m->att, rows * D);
    ALLOC(m->tmp, rows * D);
    ALLOC(m->ff, rows * c->ffn);
    ALLOC(m->tok_out, rows * p * p * c->out_channels);
    ALLOC(m->xb, rows * (size_t)(kmax + 1));
    m->xb_stride = kmax + 1;
    ALLOC(m->tfreq, B * WF__DIT_TFREQ);
    ALLOC(m->temb, B * D);
    ALLOC(m->cond, B * D);
    ALLOC(m->silu_blk, B * D);
    ALLOC(m->silu_c, B * D);
    ALLOC(m->mod, B * 6 * D);
    ALLOC(m->fmod, B * 2 * D);
    ALLOC(m->attn_scratch, wf__dit_attention_scratch(D / c->heads) * (size_t)m->max_threads);
    ALLOC(m->pos, (size_t)m->max_tokens * D);
#undef ALLOC
    m->pos_hp = m->pos_wp = -1;
    return WF_OK;
}

/* ---- load / free / detect ------------------------------------------------------------------ */

static void free_buffers(wf_dit *m) {
    void **bufs[] = {(void **)&m->patches, (void **)&m->h,     (void **)&m->xn,     (void **)&m->qkv,
                     (void **)&m->att,     (void **)&m->tmp,   (void **)&m->ff,     (void **)&m->tok_out,
                     (void **)&m->xb,      (void **)&m->tfreq, (void **)&m->temb,   (void **)&m->cond,
                     (void **)&m->silu_c,  (void **)&m->mod,   (void **)&m->fmod,   (void **)&m->attn_scratch,
                     (void **)&m->pos,     (void **)&m->silu_blk};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(*bufs[i]);
        *bufs[i] = NULL;
    }
}

void wf__dit_destroy(wf_dit *m) {
    if (!m) return;
    wf__dit_linear_free(&m->x_embed);
    wf__dit_linear_free(&m->t1);
    wf__dit_linear_free(&m->t2);
    wf__dit_linear_free(&m->final_ada);
    wf__dit_linear_free(&m->final_lin);
    if (m->blocks)
        for (int i = 0; i < m->cfg.depth; i++) {
            wf__dit_block *b = &m->blocks[i];
            wf__dit_linear_free(&b->ada);
            wf__dit_linear_free(&b->qkv);
            wf__dit_linear_free(&b->proj);
            wf__dit_linear_free(&b->fc1);
            wf__dit_linear_free(&b->fc2);
            free(b->norm2_w);
            free(b->norm2_b);
            wf__dit_linear_free(&b->t1);
            wf__dit_linear_free(&b->t2);
            free(b->label_table);
        }
    free(m->blocks);
    free(m->label_table);
    free_buffers(m);
    for (int i = 0; i < 6; i++) free(m->path_buf[i]);
    free(m);
}

wf_status wf_dit_reserve_tokens(wf_dit *m, int max_tokens, char *err, size_t errlen) {
    if (max_tokens < 1) return wf_status_errorf(err, errlen, WF_EINVAL, "max_tokens %d below 1", max_tokens);
    if (max_tokens == m->max_tokens && m->max_h == 0) return WF_OK;
    wf_dit_options o = {.max_batch = m->max_batch, .n_threads = m->max_threads, .max_tokens = max_tokens};
    free_buffers(m);
    return reserve(m, &o, err, errlen);
}

void wf_dit_free(wf_dit *m) { wf__dit_destroy(m); }

wf_status wf_dit_load(const char *path, const wf_dit_options *opt_in, wf_dit **out, char *err, size_t errlen) {
    if (!path || !out) return wf_status_errorf(err, errlen, WF_EINVAL, "invalid arguments");
    *out = NULL;
    wf_dit_options opt = opt_in ? *opt_in : wf_dit_options_default();
    wf_dit *m = calloc(1, sizeof *m);
    if (!m) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    wf_safetensors *st = NULL;
    wf_status rc = WF_OK;
    char **pb = m->path_buf;
    if (!(pb[0] = strdup(path))) goto oom;
    m->paths.root = pb[0];
    if (is_dir(path)) {
        char *tdir = NULL;
        if (!(pb[1] = join(path, "model_index.json"))) goto oom;
        if (is_file(pb[1])) {
            m->paths.model_index = pb[1];
            if (!(tdir = join(path, "transformer"))) goto oom;
            pb[4] = join(path, "scheduler/scheduler_config.json");
            pb[5] = join(path, "vae");
            if (!pb[4] || !pb[5]) {
                free(tdir);
                goto oom;
            }
            if (is_file(pb[4])) m->paths.scheduler_config = pb[4];
            if (is_dir(pb[5])) m->paths.vae_dir = pb[5];
        } else if (!(tdir = strdup(path))) {
            goto oom;
        }
        pb[2] = join(tdir, "config.json");
        pb[3] = join(tdir, DIFFUSERS_WEIGHTS);
        free(tdir);
        if (!pb[2] || !pb[3]) goto oom;
        m->paths.transformer_config = pb[2];
        m->paths.weights = pb[3];
        if (!is_file(pb[2])) {
            rc = wf_status_errorf(err, errlen, WF_ENOTFOUND, "%s: not a DiT folder: no %s", path,
                                  m->paths.model_index ? "transformer/config.json" : "model_index.json or config.json");
            goto fail;
        }
        rc = read_diffusers_config(&m->cfg, pb[2], err, errlen);
        if (rc != WF_OK) goto fail;
        rc = wf_safetensors_open(pb[3], &st, err, errlen);
        if (rc != WF_OK) goto fail;
    } else {
        m->paths.weights = pb[0];
        rc = wf_safetensors_open(path, &st, err, errlen);
        if (rc != WF_OK) goto fail;
        if (wf_safetensors_find(st, "x_embedder.proj.weight")) {
            rc = infer_original_config(&m->cfg, st, path, &opt, err, errlen);
        } else {
            /* diffusers weights given as a file: the config must sit beside it */
            const char *slash = strrchr(path, '/');
            char dir[1024];
            snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
            if (!(pb[2] = join(dir, "config.json"))) goto oom;
            m->paths.transformer_config = pb[2];
            if (!wf_safetensors_find(st, "pos_embed.proj.weight")) {
                rc = wf_status_errorf(err, errlen, WF_EFORMAT, "%s: no DiT tensors (neither "
                                      "'x_embedder.proj.weight' nor 'pos_embed.proj.weight')", path);
                goto fail;
            }
            rc = read_diffusers_config(&m->cfg, pb[2], err, errlen);
        }
        if (rc != WF_OK) goto fail;
    }
    wf_dit_config *c = &m->cfg;
    if (opt.timestep_shift >= 0) c->timestep_shift = opt.timestep_shift;
    if (opt.norm_eps > 0) c->norm_eps = opt.norm_eps;
    if (opt.heads > 0 && c->layout == WF_DIT_LAYOUT_DIFFUSERS && opt.heads != c->heads) {
        rc = wf_status_errorf(err, errlen, WF_EINVAL, "heads %d in the options but %d in the config",
                              opt.heads, c->heads);
        goto fail;
    }
    c->bf16 = opt.bf16;
    c->head_dim = c->hidden / c->heads;
    rc = check_config(c, m->paths.weights, err, errlen);
    if (rc != WF_OK) goto fail;
    if (!(m->blocks = calloc((size_t)c->depth, sizeof *m->blocks))) goto oom;
    rc = load_weights(m, st, m->paths.weights, err, errlen);
    if (rc != WF_OK) goto fail;
    rc = reserve(m, &opt, err, errlen);
    if (rc != WF_OK) goto fail;
    wf_safetensors_close(st);
    *out = m;
    return WF_OK;
oom:
    rc = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
fail:
    wf_safetensors_close(st);
    wf__dit_destroy(m);
    return rc;
}

static bool config_is_dit(const char *file) {
    json_t *o = json_load_file(file, 0, NULL);
    const char *cls = o ? json_string_value(json_object_get(o, "_class_name")) : NULL;
    bool yes = cls && !strcmp(cls, DIT_CLASS);
    json_decref(o);
    return yes;
}

bool wf_dit_detect(const char *path) {
    if (!path) return false;
    bool yes = false;
    if (is_dir(path)) {
        char *a = join(path, "transformer/config.json"), *b = join(path, "config.json");
        yes = (a && config_is_dit(a)) || (b && config_is_dit(b));
        free(a);
        free(b);
        return yes;
    }
    size_t n = strlen(path);
    if (n < 12 || strcmp(path + n - 12, ".safetensors")) return false;
    wf_safetensors *st;
    if (wf_safetensors_open(path, &st, NULL, 0) != WF_OK) return false;
    yes = (wf_safetensors_find(st, "x_embedder.proj.weight") &&
           wf_safetensors_find(st, "y_embedder.embedding_table.weight")) ||
          (wf_safetensors_find(st, "pos_embed.proj.weight") &&
           wf_safetensors_find(st, "transformer_blocks.0.norm1.emb.class_embedder.embedding_table.weight"));
    wf_safetensors_close(st);
    return yes;
}
