/* safetensors reader: parse the JSON header with jansson, check every tensor entry, then sort
 * by data offset to prove the ranges tile the data section exactly (no overlap, no hole), and
 * by name for lookups. All checks happen here so accessors never see a bad entry. */
#include "engine/dit/safetensors.h"

#include "proto/base/mapped_file.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/quant.h"

/* Far above any real header (a DiT-XL header is ~100 KB), far below what would hurt. */
#define WF__ST_MAX_HEADER (64u << 20)
/* A sanity bound per dimension and in total, so products can never overflow int64. */
#define WF__ST_MAX_DIM ((int64_t)1 << 40)
#define WF__ST_MAX_ELEMS ((int64_t)1 << 50)

typedef struct st_meta {
    char *key, *value;
} st_meta;

struct wf_safetensors {
    wf_mapped_file file; /* data is NULL when parsing caller memory */
    const uint8_t *base;
    size_t size;
    wf_safetensors_tensor *tensors; /* sorted by name */
    int64_t n_tensors;
    st_meta *meta;
    int64_t n_meta;
};

static const struct {
    const char *name;
    int supported; /* 1: one of wf_safetensors_dtype; 0: valid but rejected */
    wf_safetensors_dtype dtype;
    size_t esize;
} k_dtypes[] = {
    {"F32", 1, WF_SAFETENSORS_F32, 4},  {"F16", 1, WF_SAFETENSORS_F16, 2},
    {"BF16", 1, WF_SAFETENSORS_BF16, 2}, {"F64", 0, 0, 8},   {"I64", 0, 0, 8},
    {"I32", 0, 0, 4},   {"I16", 0, 0, 2},  {"I8", 0, 0, 1},     {"U64", 0, 0, 8},
    {"U32", 0, 0, 4},   {"U16", 0, 0, 2},  {"U8", 0, 0, 1},     {"BOOL", 0, 0, 1},
    {"F8_E4M3", 0, 0, 1}, {"F8_E5M2", 0, 0, 1},
};

const char *wf_safetensors_dtype_name(wf_safetensors_dtype dtype) {
    switch (dtype) {
    case WF_SAFETENSORS_F32: return "F32";
    case WF_SAFETENSORS_F16: return "F16";
    case WF_SAFETENSORS_BF16: return "BF16";
    }
    return "?";
}

static size_t dtype_size(wf_safetensors_dtype d) { return d == WF_SAFETENSORS_F32 ? 4 : 2; }

static void st_free(wf_safetensors *st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n_tensors; i++) free((char *)st->tensors[i].name);
    free(st->tensors);
    for (int64_t i = 0; i < st->n_meta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->meta);
    wf_mapped_file_close(&st->file);
    free(st);
}

void wf_safetensors_close(wf_safetensors *st) { st_free(st); }

/* Reads a JSON integer >= 0 (jansson integers are json_int_t, i.e. long long). */
static int get_nonneg(const json_t *v, int64_t *out) {
    if (!json_is_integer(v)) return 0;
    json_int_t x = json_integer_value(v);
    if (x < 0) return 0;
    *out = (int64_t)x;
    return 1;
}

static wf_status parse_tensor(const char *name, json_t *obj, size_t data_size,
                              wf_safetensors_tensor *t, int64_t *begin, char *err, size_t errlen) {
    if (!json_is_object(obj))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "tensor '%s': entry is not an object", name);
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return wf_status_errorf(err, errlen, WF_EFORMAT, "tensor '%s': unknown field '%s'", name, key);
    }
    json_t *jd = json_object_get(obj, "dtype");
    if (!json_is_string(jd))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "tensor '%s': missing or non-string dtype", name);
    const char *dn = json_string_value(jd);
    size_t k = 0, nk = sizeof k_dtypes / sizeof k_dtypes[0];
    while (k < nk && strcmp(k_dtypes[k].name, dn)) k++;
    if (k == nk)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "tensor '%s': unknown dtype '%.32s'", name, dn);
    if (!k_dtypes[k].supported)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "tensor '%s': dtype %s is not supported (F32, F16, BF16 only)", name, dn);
    t->dtype = k_dtypes[k].dtype;

    json_t *js = json_object_get(obj, "shape");
    if (!json_is_array(js))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "tensor '%s': missing or non-array shape", name);
    size_t nd = json_array_size(js);
    if (nd > WF_SAFETENSORS_MAX_DIMS)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "tensor '%s': %zu dimensions (at most %d)", name,
                                nd, WF_SAFETENSORS_MAX_DIMS);
    t->n_dims = (int)nd;
    int64_t n = 1;
    for (size_t i = 0; i < nd; i++) {
        int64_t d;
        if (!get_nonneg(json_array_get(js, i), &d) || d > WF__ST_MAX_DIM)
            return wf_status_errorf(err, errlen, WF_EFORMAT,
                                    "tensor '%s': shape[%zu] is not an integer in [0, 2^40]", name, i);
        t->shape[i] = d;
        if (d && n > WF__ST_MAX_ELEMS / d)
            return wf_status_errorf(err, errlen, WF_EFORMAT, "tensor '%s': shape too large", name);
        n *= d;
    }
    t->n_elements = n;

    json_t *jo = json_object_get(obj, "data_offsets");
    int64_t b, e;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !get_nonneg(json_array_get(jo, 0), &b) ||
        !get_nonneg(json_array_get(jo, 1), &e))
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "tensor '%s': data_offsets must be [begin, end] of non-negative integers", name);
    if (b > e)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "tensor '%s': data_offsets begin %lld > end %lld",
                                name, (long long)b, (long long)e);
    if ((uint64_t)e > data_size)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "tensor '%s': data_offsets end %lld beyond the data section (%zu bytes)",
                                name, (long long)e, data_size);
    uint64_t want = (uint64_t)n * dtype_size(t->dtype);
    if ((uint64_t)(e - b) != want)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "tensor '%s': %lld bytes in data_offsets but shape x %s needs %llu", name,
                                (long long)(e - b), dn, (unsigned long long)want);
    t->size = (size_t)(e - b);
    *begin = b;
    return WF_OK;
}

typedef struct st_range {
    int64_t begin, end;
    int64_t idx;
} st_range;

static int cmp_range(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const wf_safetensors_tensor *)a)->name, ((const wf_safetensors_tensor *)b)->name);
}

static wf_status parse_header(wf_safetensors *st, char *err, size_t errlen) {
    if (st->size < 8)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "truncated: %zu bytes, the header length alone is 8",
                                st->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | st->base[i];
    if (hlen > st->size - 8)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "header length %llu beyond the file (%zu bytes)",
                                (unsigned long long)hlen, st->size);
    if (hlen > WF__ST_MAX_HEADER)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "header length %llu is absurd (limit %u)",
                                (unsigned long long)hlen, WF__ST_MAX_HEADER);
    if (hlen < 2) return wf_status_errorf(err, errlen, WF_EFORMAT, "header too short (%llu bytes)",
                                          (unsigned long long)hlen);
    size_t data_off = 8 + (size_t)hlen, data_size = st->size - data_off;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)st->base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "header is not valid JSON: %s (at byte %d)",
                                jerr.text, jerr.position);
    wf_status rc = WF_OK;
    st_range *ranges = NULL;
    if (!json_is_object(root)) {
        rc = wf_status_errorf(err, errlen, WF_EFORMAT, "header is not a JSON object");
        goto fail_root;
    }
    size_t n_keys = json_object_size(root);
    json_t *meta = json_object_get(root, "__metadata__");
    size_t n_t = n_keys - (meta != NULL);
    st->tensors = calloc(n_t ? n_t : 1, sizeof *st->tensors);
    ranges = calloc(n_t ? n_t : 1, sizeof *ranges);
    if (!st->tensors || !ranges) {
        rc = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
        goto fail_alloc;
    }
    if (meta) {
        if (!json_is_object(meta)) {
            rc = wf_status_errorf(err, errlen, WF_EFORMAT, "__metadata__ is not an object");
            goto fail_alloc;
        }
        size_t nm = json_object_size(meta);
        st->meta = calloc(nm ? nm : 1, sizeof *st->meta);
        if (!st->meta) {
            rc = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
            goto fail_alloc;
        }
        const char *k;
        json_t *v;
        json_object_foreach(meta, k, v) {
            if (!json_is_string(v)) {
                rc = wf_status_errorf(err, errlen, WF_EFORMAT, "__metadata__ '%s' is not a string", k);
                goto fail_alloc;
            }
            st_meta *m = &st->meta[st->n_meta];
            m->key = strdup(k);
            m->value = strdup(json_string_value(v));
            st->n_meta++;
            if (!m->key || !m->value) {
                rc = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
                goto fail_alloc;
            }
        }
    }
    const char *name;
    json_t *val;
    json_object_foreach(root, name, val) {
        if (!strcmp(name, "__metadata__")) continue;
        wf_safetensors_tensor *t = &st->tensors[st->n_tensors];
        int64_t begin = 0;
        rc = parse_tensor(name, val, data_size, t, &begin, err, errlen);
        if (rc != WF_OK) goto fail_alloc;
        t->name = strdup(name);
        if (!t->name) {
            rc = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
            goto fail_alloc;
        }
        t->data = st->base + data_off + begin;
        ranges[st->n_tensors] = (st_range){begin, begin + (int64_t)t->size, st->n_tensors};
        st->n_tensors++;
    }
    /* The ranges must tile [0, data_size): sorted by begin, each starts where the last ended. */
    qsort(ranges, (size_t)st->n_tensors, sizeof *ranges, cmp_range);
    int64_t pos = 0;
    for (int64_t i = 0; i < st->n_tensors; i++) {
        const st_range *r = &ranges[i];
        if (r->begin < pos) {
            rc = wf_status_errorf(err, errlen, WF_EFORMAT, "tensor '%s': data [%lld, %lld) overlaps '%s'",
                                  st->tensors[r->idx].name, (long long)r->begin, (long long)r->end,
                                  st->tensors[ranges[i - 1].idx].name);
            goto fail_alloc;
        }
        if (r->begin > pos) {
            rc = wf_status_errorf(err, errlen, WF_EFORMAT,
                                  "tensor '%s': data begins at %lld, leaving bytes [%lld, %lld) unused",
                                  st->tensors[r->idx].name, (long long)r->begin, (long long)pos,
                                  (long long)r->begin);
            goto fail_alloc;
        }
        pos = r->end;
    }
    if ((uint64_t)pos != data_size) {
        rc = wf_status_errorf(err, errlen, WF_EFORMAT,
                              "data section is %zu bytes but the tensors cover %lld (trailing bytes)",
                              data_size, (long long)pos);
        goto fail_alloc;
    }
    qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_tensor);
fail_alloc:
    free(ranges);
fail_root:
    json_decref(root);
    return rc;
}

wf_status wf_safetensors_open_memory(const void *data, size_t size, wf_safetensors **out, char *err,
                                     size_t errlen) {
    if (!out || (!data && size)) return wf_status_errorf(err, errlen, WF_EINVAL, "invalid arguments");
    *out = NULL;
    wf_safetensors *st = calloc(1, sizeof *st);
    if (!st) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    st->base = data;
    st->size = size;
    wf_status rc = parse_header(st, err, errlen);
    if (rc != WF_OK) {
        st_free(st);
        return rc;
    }
    *out = st;
    return WF_OK;
}

wf_status wf_safetensors_open(const char *path, wf_safetensors **out, char *err, size_t errlen) {
    if (!out || !path) return wf_status_errorf(err, errlen, WF_EINVAL, "invalid arguments");
    *out = NULL;
    wf_mapped_file file; /* 8 bytes: the header length alone */
    wf_status rc = wf_mapped_file_open(path, 8, "safetensors", &file, err, errlen);
    if (rc != WF_OK) return rc;
    wf_safetensors *st = calloc(1, sizeof *st);
    if (!st) {
        wf_mapped_file_close(&file);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    }
    st->file = file;
    st->base = file.data;
    st->size = file.size;
    char msg[384] = "";
    rc = parse_header(st, msg, sizeof msg);
    if (rc != WF_OK) {
        st_free(st);
        return wf_status_errorf(err, errlen, rc, "%s: %s", path, msg);
    }
    *out = st;
    return WF_OK;
}

int64_t wf_safetensors_n_tensors(const wf_safetensors *st) { return st->n_tensors; }

const wf_safetensors_tensor *wf_safetensors_tensor_at(const wf_safetensors *st, int64_t i) {
    return i >= 0 && i < st->n_tensors ? &st->tensors[i] : NULL;
}

const wf_safetensors_tensor *wf_safetensors_find(const wf_safetensors *st, const char *name) {
    int64_t lo = 0, hi = st->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[mid].name, name);
        if (!c) return &st->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *wf_safetensors_metadata(const wf_safetensors *st, const char *key) {
    for (int64_t i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta[i].key, key)) return st->meta[i].value;
    return NULL;
}

void wf_safetensors_to_f32(const wf_safetensors_tensor *t, float *dst, int64_t n) {
    const uint8_t *p = t->data;
    if (t->dtype == WF_SAFETENSORS_F32) {
        memcpy(dst, p, (size_t)n * 4);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = t->dtype == WF_SAFETENSORS_F16 ? wf_fp16_to_fp32(h) : wf_bf16_to_fp32(h);
    }
}
