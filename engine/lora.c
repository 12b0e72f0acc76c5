/* LoRA adapter loading (GGUF and PEFT) into f32 A/B pairs, checked against the backbone. The
 * two readers only find tensors and their (layer, target); one routine validates the shapes
 * and widens the data, so both formats give the same errors for the same mistakes. */
#include "engine/lora.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/cpu/quant.h"
#include "engine/dit/safetensors.h"
#include "engine/gguf.h"

static const char *const k_gguf_names[WF_LORA_N_TARGETS] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
static const char *const k_peft_names[WF_LORA_N_TARGETS] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

const char *wf_lora_target_name(wf_lora_target t) {
    return (unsigned)t < WF_LORA_N_TARGETS ? k_gguf_names[t] : "?";
}

static const wf_weight *backbone_weight(const wf_model *m, int layer, wf_lora_target t) {
    const wf_layer_weights *L = &m->layers[layer];
    switch (t) {
    case WF_LORA_WQ: return &L->wq;
    case WF_LORA_WK: return &L->wk;
    case WF_LORA_WV: return &L->wv;
    case WF_LORA_WO: return &L->wo;
    case WF_LORA_W_GATE: return &L->w_gate;
    case WF_LORA_W_UP: return &L->w_up;
    case WF_LORA_W_DOWN: return &L->w_down;
    default: return NULL;
    }
}

const wf_lora_mat *wf_lora_mat_get(const wf_lora *l, int layer, wf_lora_target t) {
    if (!l || layer < 0 || layer >= l->n_layer || (unsigned)t >= WF_LORA_N_TARGETS) return NULL;
    const wf_lora_mat *mt = &l->mats[(size_t)layer * WF_LORA_N_TARGETS + t];
    return mt->a ? mt : NULL;
}

float wf_lora_scale(const wf_lora *l, const wf_lora_mat *mt, float user_scale) {
    return l->alpha != 0.0f ? user_scale * l->alpha / (float)mt->rank : user_scale;
}

void wf_lora_free(wf_lora *l) {
    if (!l) return;
    if (l->mats)
        for (int i = 0; i < l->n_layer * WF_LORA_N_TARGETS; i++) {
            free((void *)l->mats[i].a);
            free((void *)l->mats[i].b);
        }
    free(l->mats);
    free(l);
}

/* A source tensor, whichever file it came from: its element type and row-major data. */
typedef struct src_tensor {
    const char *name;
    int kind;          /* 0 f32, 1 f16, 2 bf16 */
    int64_t rows, cols; /* cols = elements per row */
    const void *data;
} src_tensor;

static wf_ggml_type src_type(const src_tensor *s) {
    return s->kind == 0 ? WF_GGML_TYPE_F32 : s->kind == 1 ? WF_GGML_TYPE_F16 : WF_GGML_TYPE_BF16;
}

static size_t src_elem_size(const src_tensor *s) { return s->kind == 0 ? 4 : 2; }

/* The rows-of-B permutation llama.cpp's converter applies to a llama model's Q and K (HF's
 * rotate-half layout to interleaved pairs): GGUF row h*hd + 2i + j is HF row h*hd + j*hd/2 + i.
 * Rows of row_bytes each, moved whole (any element type). */
static void permute_rows(unsigned char *b, int n_out, size_t row_bytes, int n_head,
                         unsigned char *tmp) {
    int hd = n_out / n_head;
    memcpy(tmp, b, row_bytes * (size_t)n_out);
    for (int h = 0; h < n_head; h++)
        for (int i = 0; i < hd / 2; i++)
            for (int j = 0; j < 2; j++)
                memcpy(b + ((size_t)h * hd + 2 * i + j) * row_bytes,
                       tmp + ((size_t)h * hd + (size_t)j * (hd / 2) + i) * row_bytes, row_bytes);
}

/* Validates one A/B pair against W and stores it widened to f32. */
static wf_status set_pair(const wf_model *m, wf_lora *l, int layer, wf_lora_target t,
                          const src_tensor *a, const src_tensor *b, bool permute_qk, char *err,
                          size_t errlen) {
    const wf_weight *w = backbone_weight(m, layer, t);
    wf_lora_mat *mt = &l->mats[(size_t)layer * WF_LORA_N_TARGETS + t];
    if (mt->a)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "lora: '%s': blk.%d.%s adapted twice",
                                a->name, layer, k_gguf_names[t]);
    /* A: rank rows of n_in; B: n_out rows of rank */
    if (a->rows == 0 || b->cols == 0)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "lora: '%s': rank 0", a->name);
    if (a->cols != w->ne0)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "lora: '%s' has %lld inputs per row but blk.%d.%s.weight takes "
                                "%lld", a->name, (long long)a->cols, layer, k_gguf_names[t],
                                (long long)w->ne0);
    if (b->rows != w->ne1)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "lora: '%s' has %lld outputs but blk.%d.%s.weight has %lld",
                                b->name, (long long)b->rows, layer, k_gguf_names[t],
                                (long long)w->ne1);
    if (a->rows != b->cols)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "lora: rank of '%s' (%lld) differs from rank of '%s' (%lld)",
                                a->name, (long long)a->rows, b->name, (long long)b->cols);
    if (a->rows > WF_LORA_MAX_RANK)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: '%s': rank %lld is above the largest weft takes (%d)",
                                a->name, (long long)a->rows, WF_LORA_MAX_RANK);
    int rank = (int)a->rows, n_in = (int)w->ne0, n_out = (int)w->ne1;
    /* kept in the file's type: an F16 adapter must round as llama.cpp's F16 matmul does */
    size_t a_bytes = src_elem_size(a) * (size_t)rank * (size_t)n_in;
    size_t b_row = src_elem_size(b) * (size_t)rank, b_bytes = b_row * (size_t)n_out;
    unsigned char *da = malloc(a_bytes), *db = malloc(b_bytes);
    unsigned char *tmp = permute_qk ? malloc(b_bytes) : NULL;
    if (!da || !db || (permute_qk && !tmp)) {
        free(da);
        free(db);
        free(tmp);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "lora: out of memory");
    }
    memcpy(da, a->data, a_bytes);
    memcpy(db, b->data, b_bytes);
    if (permute_qk)
        permute_rows(db, n_out, b_row, t == WF_LORA_WQ ? m->hp.n_head : m->hp.n_head_kv, tmp);
    free(tmp);
    mt->a = da;
    mt->b = db;
    mt->a_type = src_type(a);
    mt->b_type = src_type(b);
    mt->rank = rank;
    l->n_mats++;
    if (rank > l->max_rank) l->max_rank = rank;
    l->bytes += a_bytes + b_bytes;
    return WF_OK;
}

static int target_by_name(const char *const *names, const char *s, size_t len) {
    for (int t = 0; t < WF_LORA_N_TARGETS; t++)
        if (strlen(names[t]) == len && memcmp(names[t], s, len) == 0) return t;
    return -1;
}

/* The error of a file reader, prefixed with "lora: " and the path unless the reader's message
 * starts with it already (wf_gguf_open's and wf_safetensors_open's do). */
static wf_status reader_error(wf_status st, const char *path, const char *msg, char *err,
                              size_t errlen) {
    if (strncmp(msg, path, strlen(path)) == 0)
        return wf_status_errorf(err, errlen, st, "lora: %s", msg);
    return wf_status_errorf(err, errlen, st, "lora: %s: %s", path, msg);
}

/* ---- GGUF (llama.cpp) ------------------------------------------------------------------- */

static bool gguf_str_is(const wf_gguf *g, const char *key, const char *want, char *got,
                        size_t cap) {
    wf_gguf_str s;
    got[0] = 0;
    if (!wf_gguf_get_str(g, key, &s)) return false;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(got, s.data, n);
    got[n] = 0;
    return s.len == strlen(want) && memcmp(s.data, want, s.len) == 0;
}

static wf_status gguf_src(const wf_gguf_tensor *t, src_tensor *out, char *err, size_t errlen) {
    int kind = t->type == WF_GGML_TYPE_F32 ? 0 : t->type == WF_GGML_TYPE_F16 ? 1
             : t->type == WF_GGML_TYPE_BF16 ? 2 : -1;
    if (kind < 0) {
        const wf_ggml_type_info *ti = wf_ggml_type_info_get((uint32_t)t->type);
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: '%s' has type %s (weft takes F32, F16, BF16 adapters)",
                                t->name, ti ? ti->name : "?");
    }
    if (t->n_dims != 2)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "lora: '%s' has %d dimensions, not 2",
                                t->name, t->n_dims);
    *out = (src_tensor){t->name, kind, t->ne[1], t->ne[0], t->data};
    return WF_OK;
}

/* name = "blk.<L>.<target>.weight.lora_a": layer, target and which half. */
static wf_status gguf_parse_name(const wf_model *m, const char *name, int *layer, int *target,
                                 bool *is_b, char *err, size_t errlen) {
    size_t n = strlen(name);
    const char *suf_a = ".weight.lora_a", *suf_b = ".weight.lora_b";
    size_t ls = strlen(suf_a);
    if (n <= ls || (strcmp(name + n - ls, suf_a) != 0 && strcmp(name + n - ls, suf_b) != 0))
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "lora: tensor '%s' is not a LoRA half (<weight>.lora_a/.lora_b)",
                                name);
    *is_b = name[n - 1] == 'b';
    int l = -1, off = 0;
    if (sscanf(name, "blk.%d.%n", &l, &off) != 1 || off == 0)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: '%s' adapts a weight outside the layers (weft adapts "
                                "attn_q/k/v/output and ffn_gate/up/down)", name);
    if (l < 0 || l >= m->hp.n_layer)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "lora: '%s': layer %d, the backbone has %d", name, l,
                                m->hp.n_layer);
    int t = target_by_name(k_gguf_names, name + off, n - ls - (size_t)off);
    if (t < 0)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: '%s' adapts a weight weft does not (attn_q/k/v/output, "
                                "ffn_gate/up/down)", name);
    *layer = l;
    *target = t;
    return WF_OK;
}

/* A pipe or a device cannot be mapped: read it whole (bash's <(curl ...) as an adapter path). */
static wf_status read_stream(const char *path, char **data, size_t *size, char *err,
                             size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return wf_status_errorf(err, errlen, WF_EIO, "lora: %s: %s", path, strerror(errno));
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    wf_status st = buf ? WF_OK : WF_ENOMEM;
    while (st == WF_OK) {
        if (n == cap) {
            char *p = cap < ((size_t)1 << 34) ? realloc(buf, cap * 2) : NULL;
            if (!p) {
                st = WF_ENOMEM;
                break;
            }
            buf = p;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) st = wf_status_errorf(err, errlen, WF_EIO, "lora: %s: %s", path, strerror(errno));
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (st == WF_ENOMEM) wf_errorf(err, errlen, "lora: %s: out of memory", path);
    if (st != WF_OK) {
        free(buf);
        return st;
    }
    *data = buf;
    *size = n;
    return WF_OK;
}

static wf_status load_gguf(const wf_model *m, const char *path, bool stream, wf_lora *l,
                           char *err, size_t errlen) {
    wf_gguf *g;
    char e2[512];
    char *mem = NULL; /* a stream's bytes, alive until wf_gguf_close */
    size_t mem_size = 0;
    wf_status st;
    if (stream && (st = read_stream(path, &mem, &mem_size, err, errlen)) != WF_OK) return st;
    st = stream ? wf_gguf_open_memory(mem, mem_size, &g, e2, sizeof e2)
                : wf_gguf_open(path, &g, e2, sizeof e2);
    if (st != WF_OK) {
        free(mem);
        return reader_error(st, path, e2, err, errlen);
    }
    char got[64];
    if (!gguf_str_is(g, "general.type", "adapter", got, sizeof got)) {
        st = wf_status_errorf(err, errlen, WF_EFORMAT,
                              "lora: %s: general.type is '%s', not 'adapter'", path, got);
        goto done;
    }
    if (!gguf_str_is(g, "adapter.type", "lora", got, sizeof got)) {
        st = wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                              "lora: %s: adapter.type is '%s', not 'lora'", path, got);
        goto done;
    }
    if (!gguf_str_is(g, "general.architecture", m->arch_name, got, sizeof got)) {
        st = wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                              "lora: %s: adapter architecture '%s' differs from the backbone's "
                              "'%s'", path, got, m->arch_name);
        goto done;
    }
    float alpha = 0.0f;
    if (wf_gguf_find_key(g, "adapter.lora.alpha") >= 0 &&
        !wf_gguf_get_f32(g, "adapter.lora.alpha", &alpha)) {
        st = wf_status_errorf(err, errlen, WF_EFORMAT, "lora: %s: adapter.lora.alpha is not a "
                              "number", path);
        goto done;
    }
    l->alpha = alpha;
    int64_t nt = wf_gguf_n_tensors(g);
    for (int64_t i = 0; i < nt; i++) {
        const wf_gguf_tensor *ta = wf_gguf_tensor_at(g, i);
        int layer = 0, target = 0;
        bool is_b = false;
        if ((st = gguf_parse_name(m, ta->name, &layer, &target, &is_b, err, errlen)) != WF_OK)
            goto done;
        char other[300];
        snprintf(other, sizeof other, "%.*s%c", (int)strlen(ta->name) - 1, ta->name,
                 is_b ? 'a' : 'b');
        const wf_gguf_tensor *tb = wf_gguf_find_tensor(g, other);
        if (!tb) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT, "lora: '%s' has no '%s'", ta->name,
                                  other);
            goto done;
        }
        if (is_b) continue; /* each pair once, from its A */
        src_tensor a, b;
        if ((st = gguf_src(ta, &a, err, errlen)) != WF_OK ||
            (st = gguf_src(tb, &b, err, errlen)) != WF_OK)
            goto done;
        /* GGUF holds the backbone's Q/K rows permuted already, and the adapter with them */
        if ((st = set_pair(m, l, layer, (wf_lora_target)target, &a, &b, false, err, errlen)) !=
            WF_OK)
            goto done;
    }
    snprintf(l->format, sizeof l->format, "gguf");
done:
    wf_gguf_close(g);
    free(mem);
    return st;
}

/* ---- PEFT (adapter_config.json + adapter_model.safetensors) ------------------------------ */

typedef struct peft_config {
    int r;
    double alpha;
    bool rslora;
    json_t *targets; /* array of strings (borrowed from root) */
    json_t *root;
} peft_config;

static wf_status peft_read_config(const char *path, peft_config *c, char *err, size_t errlen) {
    json_error_t je;
    memset(c, 0, sizeof *c);
    c->root = json_load_file(path, 0, &je);
    if (!c->root) {
        struct stat sb;
        if (stat(path, &sb) != 0)
            return wf_status_errorf(err, errlen, WF_ENOTFOUND, "lora: %s: no such file", path);
        return wf_status_errorf(err, errlen, WF_EFORMAT, "lora: %s: line %d: %s", path, je.line,
                                je.text);
    }
    json_t *o = c->root;
    if (!json_is_object(o))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "lora: %s: not a JSON object", path);
    json_t *v = json_object_get(o, "peft_type");
    if (v && (!json_is_string(v) || strcmp(json_string_value(v), "LORA") != 0))
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: %s: peft_type is not \"LORA\"", path);
    v = json_object_get(o, "r");
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 20)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "lora: %s: \"r\" must be a non-negative integer", path);
    c->r = (int)json_integer_value(v);
    if (c->r == 0)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "lora: %s: \"r\" (rank) is 0", path);
    v = json_object_get(o, "lora_alpha");
    if (!json_is_number(v))
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "lora: %s: \"lora_alpha\" must be a number", path);
    c->alpha = json_number_value(v);
    v = json_object_get(o, "use_rslora");
    c->rslora = json_is_true(v);
    v = json_object_get(o, "use_dora");
    if (json_is_true(v))
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: %s: DoRA (use_dora) is not supported", path);
    v = json_object_get(o, "fan_in_fan_out");
    if (json_is_true(v))
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: %s: fan_in_fan_out is not supported", path);
    v = json_object_get(o, "bias");
    if (v && !(json_is_string(v) && strcmp(json_string_value(v), "none") == 0))
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: %s: \"bias\" must be \"none\"", path);
    const char *pats[] = {"rank_pattern", "alpha_pattern"};
    for (int i = 0; i < 2; i++) {
        v = json_object_get(o, pats[i]);
        if (v && !json_is_null(v) && !(json_is_object(v) && json_object_size(v) == 0))
            return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                    "lora: %s: \"%s\" is not supported", path, pats[i]);
    }
    v = json_object_get(o, "target_modules");
    if (!json_is_array(v) || json_array_size(v) == 0)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: %s: \"target_modules\" must be a list of module names "
                                "(patterns are not supported)", path);
    size_t i;
    json_t *it;
    json_array_foreach(v, i, it) {
        if (!json_is_string(it))
            return wf_status_errorf(err, errlen, WF_EFORMAT,
                                    "lora: %s: target_modules[%zu] is not a string", path, i);
        const char *s = json_string_value(it);
        if (target_by_name(k_peft_names, s, strlen(s)) < 0)
            return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                    "lora: %s: target module '%s' is not one weft adapts "
                                    "(q/k/v/o_proj, gate/up/down_proj)", path, s);
    }
    c->targets = v;
    return WF_OK;
}

static bool peft_targets_has(const peft_config *c, const char *mod) {
    size_t i;
    json_t *it;
    json_array_foreach(c->targets, i, it) if (strcmp(json_string_value(it), mod) == 0) return true;
    return false;
}

/* "....layers.<L>.<self_attn|mlp>.<module>.lora_<A|B>.weight" */
static wf_status peft_parse_name(const wf_model *m, const char *name, int *layer, int *target,
                                 bool *is_b, char *err, size_t errlen) {
    const char *p = strstr(name, ".layers.");
    const char *sfx_a = ".lora_A.weight", *sfx_b = ".lora_B.weight";
    size_t n = strlen(name), ls = strlen(sfx_a);
    if (n <= ls || (strcmp(name + n - ls, sfx_a) != 0 && strcmp(name + n - ls, sfx_b) != 0))
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: tensor '%s' is not a LoRA A/B weight of a linear layer",
                                name);
    *is_b = name[n - ls + 6] == 'B';
    int l = -1, off = 0;
    if (!p || sscanf(p, ".layers.%d.%n", &l, &off) != 1 || off == 0)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: '%s' adapts a module outside the decoder layers", name);
    if (l < 0 || l >= m->hp.n_layer)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "lora: '%s': layer %d, the backbone "
                                "has %d", name, l, m->hp.n_layer);
    const char *mod = p + off;
    if (strncmp(mod, "self_attn.", 10) == 0) mod += 10;
    else if (strncmp(mod, "mlp.", 4) == 0) mod += 4;
    int t = target_by_name(k_peft_names, mod, (size_t)(name + n - ls - mod));
    if (t < 0)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "lora: '%s' adapts a module weft does not (q/k/v/o_proj, "
                                "gate/up/down_proj)", name);
    *layer = l;
    *target = t;
    return WF_OK;
}

static wf_status st_src(const wf_safetensors_tensor *t, src_tensor *out, char *err,
                        size_t errlen) {
    if (t->n_dims != 2)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "lora: '%s' has %d dimensions, not 2",
                                t->name, t->n_dims);
    int kind = t->dtype == WF_SAFETENSORS_F32 ? 0 : t->dtype == WF_SAFETENSORS_F16 ? 1 : 2;
    *out = (src_tensor){t->name, kind, t->shape[0], t->shape[1], t->data};
    return WF_OK;
}

static wf_status load_peft(const wf_model *m, const char *dir, const char *st_path, wf_lora *l,
                           char *err, size_t errlen) {
    char cfg_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/adapter_config.json", dir);
    peft_config c;
    wf_status st = peft_read_config(cfg_path, &c, err, errlen);
    wf_safetensors *sf = NULL;
    if (st != WF_OK) goto done;
    char e2[512];
    if ((st = wf_safetensors_open(st_path, &sf, e2, sizeof e2)) != WF_OK) {
        st = reader_error(st, st_path, e2, err, errlen);
        goto done;
    }
    /* alpha such that alpha / r is PEFT's factor: lora_alpha / r, or / sqrt(r) with rsLoRA */
    l->alpha = c.rslora ? (float)(c.alpha * (double)c.r / sqrt((double)c.r)) : (float)c.alpha;
    int64_t nt = wf_safetensors_n_tensors(sf);
    for (int64_t i = 0; i < nt; i++) {
        const wf_safetensors_tensor *ta = wf_safetensors_tensor_at(sf, i);
        int layer = 0, target = 0;
        bool is_b = false;
        if ((st = peft_parse_name(m, ta->name, &layer, &target, &is_b, err, errlen)) != WF_OK)
            goto done;
        char other[512];
        size_t n = strlen(ta->name);
        snprintf(other, sizeof other, "%s", ta->name);
        if (n < sizeof other) other[n - 8] = is_b ? 'A' : 'B'; /* ".lora_X.weight" */
        const wf_safetensors_tensor *tb = wf_safetensors_find(sf, other);
        if (!tb) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT, "lora: '%s' has no '%s'", ta->name,
                                  other);
            goto done;
        }
        if (is_b) continue;
        if (!peft_targets_has(&c, k_peft_names[target])) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT,
                                  "lora: '%s' adapts %s, which target_modules does not list",
                                  ta->name, k_peft_names[target]);
            goto done;
        }
        src_tensor a, b;
        if ((st = st_src(ta, &a, err, errlen)) != WF_OK ||
            (st = st_src(tb, &b, err, errlen)) != WF_OK)
            goto done;
        if (a.rows != c.r) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT,
                                  "lora: '%s' has rank %lld but adapter_config.json says r = %d",
                                  ta->name, (long long)a.rows, c.r);
            goto done;
        }
        bool permute = m->arch == WF_ARCH_LLAMA &&
                       (target == WF_LORA_WQ || target == WF_LORA_WK);
        if ((st = set_pair(m, l, layer, (wf_lora_target)target, &a, &b, permute, err, errlen)) !=
            WF_OK)
            goto done;
    }
    snprintf(l->format, sizeof l->format, "peft");
done:
    wf_safetensors_close(sf);
    json_decref(c.root);
    return st;
}

/* ---- entry point -------------------------------------------------------------------------- */

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

wf_status wf_lora_load(const wf_model *m, const char *path, wf_lora **out, char *err,
                       size_t errlen) {
    if (!out) return WF_EINVAL;
    *out = NULL;
    if (!m || !path || !*path)
        return wf_status_errorf(err, errlen, WF_EINVAL, "lora: no adapter path");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return wf_status_errorf(err, errlen, WF_ENOTFOUND, "lora: %s: no such file or folder",
                                path);
    wf_lora *l = calloc(1, sizeof *l);
    if (!l) return wf_status_errorf(err, errlen, WF_ENOMEM, "lora: out of memory");
    l->n_layer = m->hp.n_layer;
    l->mats = calloc((size_t)l->n_layer * WF_LORA_N_TARGETS, sizeof *l->mats);
    if (!l->mats) {
        wf_lora_free(l);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "lora: out of memory");
    }
    wf_status st;
    if (S_ISDIR(sb.st_mode)) {
        char stp[4096];
        snprintf(stp, sizeof stp, "%s/adapter_model.safetensors", path);
        st = load_peft(m, path, stp, l, err, errlen);
    } else if (ends_with(path, ".safetensors")) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
        st = load_peft(m, dir, path, l, err, errlen);
    } else {
        st = load_gguf(m, path, S_ISFIFO(sb.st_mode) || S_ISCHR(sb.st_mode), l, err, errlen);
    }
    if (st == WF_OK && l->n_mats == 0)
        st = wf_status_errorf(err, errlen, WF_EFORMAT, "lora: %s: the adapter has no tensors",
                              path);
    if (st != WF_OK) {
        wf_lora_free(l);
        return st;
    }
    *out = l;
    return WF_OK;
}
