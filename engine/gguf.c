/* GGUF v2/v3 reader. The whole file is validated at open time (every count, length, type,
 * dimension, offset and size, with overflow-safe arithmetic and counts capped by the bytes
 * left), so getters and tensor pointers can be used afterwards without further checks.
 * Nothing is copied except keys and tensor names (NUL-terminated copies). */
#include "engine/gguf.h"

#include "proto/base/mapped_file.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_ALIGNMENT (1u << 30)
#define GGUF_MAX_NAME 65535u     /* keys and tensor names (spec: keys < 65536 bytes) */
#define GGUF_MAX_DEPTH 8         /* nested arrays: deeper is treated as hostile */
#define GGUF_MIN_KV_BYTES 13u    /* key length (8) + type (4) + smallest value (1) */
#define GGUF_MIN_TI_BYTES 32u    /* name len (8) + n_dims (4) + ne[0] (8) + type (4) + offset (8) */

typedef struct gguf_kv {
    char *key;
    wf_gguf_value_type type;
    uint64_t off;             /* value start (file offset) */
    /* arrays */
    wf_gguf_value_type elem_type;
    uint64_t n;
    uint64_t *str_offs;       /* string arrays: file offset of each element's length field */
} gguf_kv;

struct wf_gguf {
    const uint8_t *base;
    size_t size;
    wf_mapped_file file;      /* data is non-NULL when we own a mapping */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    gguf_kv *kv;
    int64_t n_tensors;
    wf_gguf_tensor *tensors;
    uint64_t *tensor_offs;    /* relative offsets as stored, parallel to tensors */
    /* open-addressing hash indexes (value = index + 1; 0 = empty) */
    uint32_t *kv_index;
    uint32_t *tensor_index;
    uint64_t kv_cap, tensor_cap;
};

/* ---- errors ---------------------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *base;
    size_t size;
    size_t pos;
    char *err;
    size_t errlen;
} reader;

__attribute__((format(printf, 3, 4))) static wf_status fail(reader *r, wf_status st,
                                                             const char *fmt, ...) {
    if (r->err && r->errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, r->errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

static size_t left(const reader *r) { return r->size - r->pos; }

/* Reads n bytes at the cursor; `what` names the field for the message. */
static wf_status rd_bytes(reader *r, void *dst, size_t n, const char *ctx, const char *what) {
    if (left(r) < n)
        return fail(r, WF_EFORMAT, "%s: truncated file: %s needs %zu bytes at offset %zu, %zu left",
                    ctx, what, n, r->pos, left(r));
    memcpy(dst, r->base + r->pos, n);
    r->pos += n;
    return WF_OK;
}

static wf_status rd_u32(reader *r, uint32_t *v, const char *ctx, const char *what) {
    return rd_bytes(r, v, 4, ctx, what);
}

static wf_status rd_u64(reader *r, uint64_t *v, const char *ctx, const char *what) {
    return rd_bytes(r, v, 8, ctx, what);
}

/* A length-prefixed string: validates the length against the bytes left; returns its start
 * offset without copying. */
static wf_status rd_str(reader *r, uint64_t *off, uint64_t *len, const char *ctx,
                        const char *what) {
    size_t at = r->pos;
    wf_status st = rd_u64(r, len, ctx, what);
    if (st != WF_OK) return st;
    if (*len > left(r))
        return fail(r, WF_EFORMAT,
                    "%s: %s length %llu at offset %zu runs past the end of the file "
                    "(%zu bytes left)",
                    ctx, what, (unsigned long long)*len, at, left(r));
    *off = r->pos;
    r->pos += (size_t)*len;
    return WF_OK;
}

/* Copies a name (key or tensor name) into a NUL-terminated heap string. */
static wf_status rd_name(reader *r, char **out, const char *ctx, const char *what) {
    uint64_t off = 0, len = 0;
    size_t at = r->pos;
    wf_status st = rd_str(r, &off, &len, ctx, what);
    if (st != WF_OK) return st;
    if (len > GGUF_MAX_NAME)
        return fail(r, WF_EFORMAT, "%s: %s length %llu at offset %zu exceeds %u bytes", ctx, what,
                    (unsigned long long)len, at, GGUF_MAX_NAME);
    if (memchr(r->base + off, 0, (size_t)len))
        return fail(r, WF_EFORMAT, "%s: %s at offset %zu contains a NUL byte", ctx, what, at);
    char *s = malloc((size_t)len + 1);
    if (!s) return fail(r, WF_ENOMEM, "%s: out of memory copying %s", ctx, what);
    memcpy(s, r->base + off, (size_t)len);
    s[len] = '\0';
    *out = s;
    return WF_OK;
}

/* ---- value types --------------------------------------------------------------------------- */

static const char *const type_names[] = {"uint8", "int8",  "uint16", "int16",  "uint32",
                                         "int32", "float32", "bool",  "string", "array",
                                         "uint64", "int64", "float64"};

const char *wf_gguf_type_name(wf_gguf_value_type t) {
    return (unsigned)t < sizeof type_names / sizeof type_names[0] ? type_names[t] : "?";
}

static bool type_valid(uint32_t t) { return t <= WF_GGUF_FLOAT64; }

/* Fixed size of a scalar type; 0 for string and array. */
static size_t scalar_size(wf_gguf_value_type t) {
    switch (t) {
    case WF_GGUF_UINT8: case WF_GGUF_INT8: case WF_GGUF_BOOL: return 1;
    case WF_GGUF_UINT16: case WF_GGUF_INT16: return 2;
    case WF_GGUF_UINT32: case WF_GGUF_INT32: case WF_GGUF_FLOAT32: return 4;
    case WF_GGUF_UINT64: case WF_GGUF_INT64: case WF_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static wf_status check_bools(reader *r, size_t off, uint64_t n, const char *ctx) {
    for (uint64_t i = 0; i < n; i++) {
        uint8_t b = r->base[off + i];
        if (b > 1)
            return fail(r, WF_EFORMAT, "%s: bool value %u at offset %llu is not 0 or 1", ctx, b,
                        (unsigned long long)(off + i));
    }
    return WF_OK;
}

static wf_status skip_value(reader *r, wf_gguf_value_type t, int depth, const char *ctx);

/* Validates an array body (element type + count + elements) at the cursor and skips it.
 * With `kv` (top level), records the element type, count and string offsets. */
static wf_status skip_array(reader *r, int depth, const char *ctx, gguf_kv *kv) {
    if (depth >= GGUF_MAX_DEPTH)
        return fail(r, WF_EFORMAT, "%s: arrays nested deeper than %d levels at offset %zu", ctx,
                    GGUF_MAX_DEPTH, r->pos);
    uint32_t et = 0;
    uint64_t n = 0;
    size_t at = r->pos;
    wf_status st = rd_u32(r, &et, ctx, "array element type");
    if (st != WF_OK) return st;
    if (!type_valid(et))
        return fail(r, WF_EFORMAT, "%s: unknown array element type %u at offset %zu", ctx, et, at);
    st = rd_u64(r, &n, ctx, "array length");
    if (st != WF_OK) return st;
    size_t es = scalar_size((wf_gguf_value_type)et);
    /* Every element takes at least one byte (8 for a string, 12 for an array): cap the count by
     * the bytes left before anything is allocated or looped over. */
    size_t min_es = es ? es : (et == WF_GGUF_STRING ? 8 : 12);
    if (n > left(r) / min_es)
        return fail(r, WF_EFORMAT,
                    "%s: array of %llu %s elements at offset %zu does not fit in the %zu bytes "
                    "left",
                    ctx, (unsigned long long)n, wf_gguf_type_name((wf_gguf_value_type)et), at,
                    left(r));
    if (kv) {
        kv->elem_type = (wf_gguf_value_type)et;
        kv->n = n;
    }
    if (es) {
        if (et == WF_GGUF_BOOL && (st = check_bools(r, r->pos, n, ctx)) != WF_OK) return st;
        r->pos += (size_t)(n * es);
        return WF_OK;
    }
    if (et == WF_GGUF_STRING && kv && n > 0) {
        kv->str_offs = malloc((size_t)n * sizeof *kv->str_offs);
        if (!kv->str_offs)
            return fail(r, WF_ENOMEM, "%s: out of memory indexing %llu strings", ctx,
                        (unsigned long long)n);
    }
    for (uint64_t i = 0; i < n; i++) {
        if (kv && kv->str_offs) kv->str_offs[i] = r->pos;
        if (et == WF_GGUF_STRING) {
            /* inline rd_str: the element's name is only formatted on failure (the vocabulary
             * has ~10^5 strings) */
            uint64_t len = 0;
            size_t at_el = r->pos;
            if (left(r) < 8 || (memcpy(&len, r->base + r->pos, 8), len > left(r) - 8)) {
                char what[64];
                snprintf(what, sizeof what, "string element %llu", (unsigned long long)i);
                uint64_t off = 0;
                return rd_str(r, &off, &len, ctx, what); /* fails with the message */
            }
            r->pos = at_el + 8 + (size_t)len;
        } else if ((st = skip_array(r, depth + 1, ctx, NULL)) != WF_OK) {
            return st;
        }
    }
    return WF_OK;
}

static wf_status skip_value(reader *r, wf_gguf_value_type t, int depth, const char *ctx) {
    size_t es = scalar_size(t);
    if (es) {
        if (left(r) < es)
            return fail(r, WF_EFORMAT,
                        "%s: truncated file: %s value needs %zu bytes at offset %zu, %zu left", ctx,
                        wf_gguf_type_name(t), es, r->pos, left(r));
        if (t == WF_GGUF_BOOL) {
            wf_status st = check_bools(r, r->pos, 1, ctx);
            if (st != WF_OK) return st;
        }
        r->pos += es;
        return WF_OK;
    }
    if (t == WF_GGUF_STRING) {
        uint64_t off = 0, len = 0;
        return rd_str(r, &off, &len, ctx, "string value");
    }
    return skip_array(r, depth, ctx, NULL);
}

/* ---- hash index ---------------------------------------------------------------------------- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static uint64_t index_cap(int64_t n) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    return cap;
}

/* Inserts name -> i; returns the existing index + 1 if the name is already there. */
static uint32_t index_insert(uint32_t *tab, uint64_t cap, const char *name, uint32_t i,
                             const char *(*name_of)(const wf_gguf *, uint32_t), const wf_gguf *g) {
    for (uint64_t h = hash_str(name) & (cap - 1);; h = (h + 1) & (cap - 1)) {
        if (tab[h] == 0) {
            tab[h] = i + 1;
            return 0;
        }
        if (strcmp(name_of(g, tab[h] - 1), name) == 0) return tab[h];
    }
}

static int64_t index_find(const uint32_t *tab, uint64_t cap, const char *name,
                          const char *(*name_of)(const wf_gguf *, uint32_t), const wf_gguf *g) {
    if (!tab || !name) return -1;
    for (uint64_t h = hash_str(name) & (cap - 1);; h = (h + 1) & (cap - 1)) {
        if (tab[h] == 0) return -1;
        if (strcmp(name_of(g, tab[h] - 1), name) == 0) return (int64_t)tab[h] - 1;
    }
}

static const char *kv_name(const wf_gguf *g, uint32_t i) { return g->kv[i].key; }
static const char *tensor_name(const wf_gguf *g, uint32_t i) { return g->tensors[i].name; }

/* ---- parsing ------------------------------------------------------------------------------- */

static wf_status parse_kv(wf_gguf *g, reader *r) {
    wf_status st;
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        char ctx[96];
        snprintf(ctx, sizeof ctx, "metadata entry %lld", (long long)i);
        if ((st = rd_name(r, &kv->key, ctx, "key")) != WF_OK) return st;
        char kctx[200];
        snprintf(kctx, sizeof kctx, "key '%s'", kv->key);
        uint32_t t = 0;
        size_t at = r->pos;
        if ((st = rd_u32(r, &t, kctx, "value type")) != WF_OK) return st;
        if (!type_valid(t))
            return fail(r, WF_EFORMAT, "%s: unknown value type %u at offset %zu", kctx, t, at);
        kv->type = (wf_gguf_value_type)t;
        kv->off = r->pos;
        if (t == WF_GGUF_ARRAY)
            st = skip_array(r, 0, kctx, kv);
        else
            st = skip_value(r, kv->type, 0, kctx);
        if (st != WF_OK) return st;
        if (index_insert(g->kv_index, g->kv_cap, kv->key, (uint32_t)i, kv_name, g))
            return fail(r, WF_EFORMAT, "%s: duplicate metadata key", kctx);
    }
    return WF_OK;
}

typedef struct placed {
    uint64_t off;
    int64_t index;
} placed;

static int cmp_placed(const void *a, const void *b) {
    const placed *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static wf_status parse_tensors(wf_gguf *g, reader *r) {
    wf_status st;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        wf_gguf_tensor *t = &g->tensors[i];
        char ctx[96];
        snprintf(ctx, sizeof ctx, "tensor info %lld", (long long)i);
        char *name = NULL;
        if ((st = rd_name(r, &name, ctx, "tensor name")) != WF_OK) return st;
        t->name = name;
        char tctx[200];
        snprintf(tctx, sizeof tctx, "tensor '%s'", name);
        if (index_insert(g->tensor_index, g->tensor_cap, name, (uint32_t)i, tensor_name, g))
            return fail(r, WF_EFORMAT, "%s: duplicate tensor name", tctx);
        uint32_t n_dims = 0;
        size_t at = r->pos;
        if ((st = rd_u32(r, &n_dims, tctx, "n_dims")) != WF_OK) return st;
        if (n_dims < 1 || n_dims > 4)
            return fail(r, WF_EFORMAT, "%s: n_dims %u at offset %zu is not in 1..4", tctx, n_dims,
                        at);
        t->n_dims = (int)n_dims;
        uint64_t nelem = 1;
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t ne = 0;
            at = r->pos;
            if ((st = rd_u64(r, &ne, tctx, "dimension")) != WF_OK) return st;
            if (ne == 0 || ne > (uint64_t)INT64_MAX)
                return fail(r, WF_EFORMAT, "%s: ne[%u] = %llu at offset %zu is not in 1..2^63-1",
                            tctx, d, (unsigned long long)ne, at);
            if (nelem > (uint64_t)INT64_MAX / ne)
                return fail(r, WF_EFORMAT, "%s: element count overflows at ne[%u] = %llu", tctx,
                            d, (unsigned long long)ne);
            nelem *= ne;
            t->ne[d] = (int64_t)ne;
        }
        uint32_t type = 0;
        at = r->pos;
        if ((st = rd_u32(r, &type, tctx, "type")) != WF_OK) return st;
        const wf_ggml_type_info *ti = wf_ggml_type_info_get(type);
        if (!ti)
            return fail(r, WF_EUNSUPPORTED, "%s: unknown tensor type %u at offset %zu", tctx, type,
                        at);
        t->type = (wf_ggml_type)type;
        if ((uint64_t)t->ne[0] % (uint64_t)ti->block_size != 0)
            return fail(r, WF_EFORMAT,
                        "%s: row length ne[0] = %lld is not a multiple of the %s block size %d",
                        tctx, (long long)t->ne[0], ti->name, ti->block_size);
        uint64_t nblocks = nelem / (uint64_t)ti->block_size;
        if (nblocks > SIZE_MAX / ti->type_size || nblocks > UINT64_MAX / ti->type_size)
            return fail(r, WF_EFORMAT, "%s: byte size overflows (%llu blocks of %zu bytes)", tctx,
                        (unsigned long long)nblocks, ti->type_size);
        t->size = (size_t)(nblocks * ti->type_size);
        uint64_t off = 0;
        at = r->pos;
        if ((st = rd_u64(r, &off, tctx, "data offset")) != WF_OK) return st;
        if (off % g->alignment != 0)
            return fail(r, WF_EFORMAT,
                        "%s: data offset %llu at offset %zu is not a multiple of the alignment %u",
                        tctx, (unsigned long long)off, at, g->alignment);
        g->tensor_offs[i] = off;
    }
    return WF_OK;
}

/* Places tensors in the data section: each range inside the file, no two overlapping. */
static wf_status place_tensors(wf_gguf *g, reader *r) {
    if (g->n_tensors == 0) return WF_OK;
    if (g->data_offset > g->size)
        return fail(r, WF_EFORMAT,
                    "truncated file: the data section starts at offset %llu but the file has %zu "
                    "bytes",
                    (unsigned long long)g->data_offset, g->size);
    uint64_t avail = g->size - g->data_offset;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        wf_gguf_tensor *t = &g->tensors[i];
        uint64_t off = g->tensor_offs[i];
        if (off > avail || t->size > avail - off)
            return fail(r, WF_EFORMAT,
                        "tensor '%s': data [%llu, +%zu) runs past the end of the data section "
                        "(%llu bytes)",
                        t->name, (unsigned long long)off, t->size, (unsigned long long)avail);
        t->data = g->base + g->data_offset + off;
    }
    placed *order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return fail(r, WF_ENOMEM, "out of memory sorting tensors");
    for (int64_t i = 0; i < g->n_tensors; i++) order[i] = (placed){g->tensor_offs[i], i};
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_placed);
    wf_status st = WF_OK;
    for (int64_t k = 1; k < g->n_tensors; k++) {
        const wf_gguf_tensor *a = &g->tensors[order[k - 1].index], *b = &g->tensors[order[k].index];
        uint64_t a_end = order[k - 1].off + a->size;
        /* Zero-size tensors do not exist (ne > 0), so touching ranges are the only sharing. */
        if (a_end > order[k].off) {
            st = fail(r, WF_EFORMAT, "tensor '%s': data at offset %llu overlaps tensor '%s' "
                                     "(which ends at %llu)",
                      b->name, (unsigned long long)order[k].off, a->name,
                      (unsigned long long)a_end);
            break;
        }
    }
    free(order);
    return st;
}

static wf_status parse(wf_gguf *g, char *err, size_t errlen) {
    reader rr = {.base = g->base, .size = g->size, .err = err, .errlen = errlen};
    reader *r = &rr;
    wf_status st;
    uint32_t magic = 0;
    if (g->size < 4)
        return fail(r, WF_EFORMAT, "not a GGUF file: %zu bytes is too short for the magic",
                    g->size);
    rd_u32(r, &magic, "header", "magic");
    if (magic != GGUF_MAGIC)
        return fail(r, WF_EFORMAT, "not a GGUF file: bad magic 0x%08x (expected \"GGUF\")", magic);
    if ((st = rd_u32(r, &g->version, "header", "version")) != WF_OK) return st;
    if (g->version == 1)
        return fail(r, WF_EUNSUPPORTED, "GGUF version 1 is not supported (only 2 and 3)");
    if ((g->version & 0xffffu) == 0 && (g->version >> 16) != 0)
        return fail(r, WF_EUNSUPPORTED,
                    "GGUF version field 0x%08x looks byte-swapped: big-endian files are not "
                    "supported",
                    g->version);
    if (g->version != 2 && g->version != 3)
        return fail(r, WF_EUNSUPPORTED, "GGUF version %u is not supported (only 2 and 3)",
                    g->version);
    uint64_t n_tensors = 0, n_kv = 0;
    if ((st = rd_u64(r, &n_tensors, "header", "tensor count")) != WF_OK) return st;
    if ((st = rd_u64(r, &n_kv, "header", "metadata count")) != WF_OK) return st;
    /* Cap both counts by the bytes left before allocating anything for them. */
    if (n_kv > left(r) / GGUF_MIN_KV_BYTES || n_kv > UINT32_MAX - 1)
        return fail(r, WF_EFORMAT, "header: metadata count %llu cannot fit in the %zu bytes left",
                    (unsigned long long)n_kv, left(r));
    if (n_tensors > (left(r) - n_kv * GGUF_MIN_KV_BYTES) / GGUF_MIN_TI_BYTES ||
        n_tensors > UINT32_MAX - 1)
        return fail(r, WF_EFORMAT, "header: tensor count %llu cannot fit in the %zu bytes left",
                    (unsigned long long)n_tensors, left(r));
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kv_cap = index_cap(g->n_kv);
    g->tensor_cap = index_cap(g->n_tensors);
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    g->tensor_offs = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensor_offs);
    g->kv_index = calloc(g->kv_cap, sizeof *g->kv_index);
    g->tensor_index = calloc(g->tensor_cap, sizeof *g->tensor_index);
    if (!g->kv || !g->tensors || !g->tensor_offs || !g->kv_index || !g->tensor_index)
        return fail(r, WF_ENOMEM, "out of memory for %llu metadata entries and %llu tensors",
                    (unsigned long long)n_kv, (unsigned long long)n_tensors);
    if ((st = parse_kv(g, r)) != WF_OK) return st;

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = wf_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        uint32_t a = 0;
        if (g->kv[ai].type != WF_GGUF_UINT32)
            return fail(r, WF_EFORMAT, "key 'general.alignment': type %s, expected uint32",
                        wf_gguf_type_name(g->kv[ai].type));
        memcpy(&a, g->base + g->kv[ai].off, 4);
        if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_MAX_ALIGNMENT)
            return fail(r, WF_EFORMAT,
                        "key 'general.alignment': %u is not a power of two in 1..2^30", a);
        g->alignment = a;
    }
    if ((st = parse_tensors(g, r)) != WF_OK) return st;
    /* r->pos <= size < 2^63, alignment <= 2^30: no overflow. */
    g->data_offset = ((uint64_t)r->pos + g->alignment - 1) / g->alignment * g->alignment;
    return place_tensors(g, r);
}

static void gguf_free(wf_gguf *g) {
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free(g->kv[i].str_offs);
        }
    if (g->tensors)
        for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->tensor_offs);
    free(g->kv_index);
    free(g->tensor_index);
    wf_mapped_file_close(&g->file);
    free(g);
}

static wf_status open_common(wf_gguf *g, wf_gguf **out, char *err, size_t errlen) {
    wf_status st = parse(g, err, errlen);
    if (st != WF_OK) {
        gguf_free(g);
        return st;
    }
    *out = g;
    return WF_OK;
}

wf_status wf_gguf_open_memory(const void *data, size_t size, wf_gguf **out, char *err,
                              size_t errlen) {
    if (!out || (!data && size)) return wf_status_errorf(err, errlen, WF_EINVAL, "invalid arguments");
    *out = NULL;
    wf_gguf *g = calloc(1, sizeof *g);
    if (!g) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    g->base = data;
    g->size = size;
    return open_common(g, out, err, errlen);
}

wf_status wf_gguf_open(const char *path, wf_gguf **out, char *err, size_t errlen) {
    if (!out || !path) return wf_status_errorf(err, errlen, WF_EINVAL, "invalid arguments");
    *out = NULL;
    wf_mapped_file file;
    wf_status st = wf_mapped_file_open(path, 1, "GGUF", &file, err, errlen);
    if (st != WF_OK) return st;
    wf_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        wf_mapped_file_close(&file);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    }
    g->file = file;
    g->base = file.data;
    g->size = file.size;
    char msg[512] = "";
    st = open_common(g, out, msg, sizeof msg);
    if (st != WF_OK) wf_status_errorf(err, errlen, st, "%s: %s", path, msg);
    return st;
}

void wf_gguf_close(wf_gguf *g) { gguf_free(g); }

/* ---- accessors ----------------------------------------------------------------------------- */

uint32_t wf_gguf_version(const wf_gguf *g) { return g->version; }
uint32_t wf_gguf_alignment(const wf_gguf *g) { return g->alignment; }
uint64_t wf_gguf_data_offset(const wf_gguf *g) { return g->data_offset; }
const void *wf_gguf_base(const wf_gguf *g) { return g->base; }
size_t wf_gguf_size(const wf_gguf *g) { return g->size; }

int64_t wf_gguf_find_key(const wf_gguf *g, const char *key) {
    return index_find(g->kv_index, g->kv_cap, key, kv_name, g);
}

static const gguf_kv *find_kv(const wf_gguf *g, const char *key) {
    int64_t i = wf_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

/* Reads an integer value as (negative flag, magnitude-compatible) signed/unsigned pair. */
static bool read_int(const wf_gguf *g, const gguf_kv *kv, bool *neg, uint64_t *u, int64_t *s) {
    const uint8_t *p = g->base + kv->off;
    uint64_t uv = 0;
    int64_t sv = 0;
    bool is_signed = false;
    switch (kv->type) {
    case WF_GGUF_UINT8: { uint8_t v; memcpy(&v, p, 1); uv = v; break; }
    case WF_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); uv = v; break; }
    case WF_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); uv = v; break; }
    case WF_GGUF_UINT64: { memcpy(&uv, p, 8); break; }
    case WF_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); sv = v; is_signed = true; break; }
    case WF_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); sv = v; is_signed = true; break; }
    case WF_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); sv = v; is_signed = true; break; }
    case WF_GGUF_INT64: { memcpy(&sv, p, 8); is_signed = true; break; }
    default: return false;
    }
    if (is_signed) {
        *neg = sv < 0;
        *s = sv;
        *u = sv < 0 ? 0 : (uint64_t)sv;
    } else {
        *neg = false;
        *u = uv;
        *s = uv > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)uv;
    }
    return true;
}

bool wf_gguf_get_u64(const wf_gguf *g, const char *key, uint64_t *out) {
    const gguf_kv *kv = find_kv(g, key);
    bool neg = false;
    uint64_t u = 0;
    int64_t s = 0;
    if (!kv || !read_int(g, kv, &neg, &u, &s) || neg) return false;
    *out = u;
    return true;
}

bool wf_gguf_get_u32(const wf_gguf *g, const char *key, uint32_t *out) {
    uint64_t v = 0;
    if (!wf_gguf_get_u64(g, key, &v) || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

bool wf_gguf_get_i64(const wf_gguf *g, const char *key, int64_t *out) {
    const gguf_kv *kv = find_kv(g, key);
    bool neg = false;
    uint64_t u = 0;
    int64_t s = 0;
    if (!kv || !read_int(g, kv, &neg, &u, &s)) return false;
    if (!neg && u > (uint64_t)INT64_MAX) return false;
    *out = s;
    return true;
}

bool wf_gguf_get_i32(const wf_gguf *g, const char *key, int32_t *out) {
    int64_t v;
    if (!wf_gguf_get_i64(g, key, &v) || v < INT32_MIN || v > INT32_MAX) return false;
    *out = (int32_t)v;
    return true;
}

bool wf_gguf_get_f64(const wf_gguf *g, const char *key, double *out) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return false;
    if (kv->type == WF_GGUF_FLOAT32) {
        float f;
        memcpy(&f, g->base + kv->off, 4);
        *out = f;
        return true;
    }
    if (kv->type == WF_GGUF_FLOAT64) {
        memcpy(out, g->base + kv->off, 8);
        return true;
    }
    return false;
}

bool wf_gguf_get_f32(const wf_gguf *g, const char *key, float *out) {
    double d;
    if (!wf_gguf_get_f64(g, key, &d)) return false;
    *out = (float)d;
    return true;
}

bool wf_gguf_get_bool(const wf_gguf *g, const char *key, bool *out) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != WF_GGUF_BOOL) return false;
    *out = g->base[kv->off] != 0;
    return true;
}

/* A validated string at file offset `off` (its length field). */
static wf_gguf_str str_at(const wf_gguf *g, uint64_t off) {
    wf_gguf_str s;
    memcpy(&s.len, g->base + off, 8);
    s.data = (const char *)g->base + off + 8;
    return s;
}

bool wf_gguf_get_str(const wf_gguf *g, const char *key, wf_gguf_str *out) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != WF_GGUF_STRING) return false;
    *out = str_at(g, kv->off);
    return true;
}

bool wf_gguf_get_array(const wf_gguf *g, const char *key, wf_gguf_value_type *elem_type,
                       uint64_t *n, const void **data) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != WF_GGUF_ARRAY) return false;
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    if (data)
        *data = scalar_size(kv->elem_type) ? (const void *)(g->base + kv->off + 12) : NULL;
    return true;
}

bool wf_gguf_get_array_str(const wf_gguf *g, const char *key, uint64_t index, wf_gguf_str *out) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != WF_GGUF_ARRAY || kv->elem_type != WF_GGUF_STRING || index >= kv->n)
        return false;
    *out = str_at(g, kv->str_offs[index]);
    return true;
}

int64_t wf_gguf_n_tensors(const wf_gguf *g) { return g->n_tensors; }

const wf_gguf_tensor *wf_gguf_tensor_at(const wf_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const wf_gguf_tensor *wf_gguf_find_tensor(const wf_gguf *g, const char *name) {
    int64_t i = index_find(g->tensor_index, g->tensor_cap, name, tensor_name, g);
    return i < 0 ? NULL : &g->tensors[i];
}

int64_t wf_gguf_n_kv(const wf_gguf *g) { return g->n_kv; }

const char *wf_gguf_key_at(const wf_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

wf_gguf_value_type wf_gguf_type_at(const wf_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].type : (wf_gguf_value_type)-1;
}
