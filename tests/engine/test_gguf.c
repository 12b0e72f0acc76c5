/* Tests engine/gguf.c: the default model's metadata and tensors, small files of every value type
 * (v2 and v3) built here by a tiny writer, and hostile files (every truncation, huge counts,
 * bad lengths/offsets/dims/types/alignment) that must fail cleanly with a useful message. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "engine/gguf.h"

/* ---- a tiny GGUF writer -------------------------------------------------------------------- */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static void put(wbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u8(wbuf *b, uint8_t v) { put(b, &v, 1); }
static void put_u16(wbuf *b, uint16_t v) { put(b, &v, 2); }
static void put_u32(wbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(wbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_f32(wbuf *b, float v) { put(b, &v, 4); }
static void put_f64(wbuf *b, double v) { put(b, &v, 8); }
static void put_str(wbuf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void put_header(wbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}
static void put_key(wbuf *b, const char *key, uint32_t type) {
    put_str(b, key);
    put_u32(b, type);
}
static void kv_u32(wbuf *b, const char *key, uint32_t v) {
    put_key(b, key, WF_GGUF_UINT32);
    put_u32(b, v);
}
static void kv_str(wbuf *b, const char *key, const char *v) {
    put_key(b, key, WF_GGUF_STRING);
    put_str(b, v);
}
static void put_tensor_info(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                            uint32_t type, uint64_t offset) {
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) put_u64(b, ne[i]);
    put_u32(b, type);
    put_u64(b, offset);
}
static void pad_to(wbuf *b, size_t align) {
    while (b->n % align) put_u8(b, 0);
}

/* Opens b's bytes from an exact-size heap copy, so any read past the end is caught by ASan. */
static wf_status open_buf(const wbuf *b, size_t len, wf_gguf **g, uint8_t **copy, char *err,
                          size_t errlen) {
    *copy = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(*copy);
    if (len) memcpy(*copy, b->p, len);
    return wf_gguf_open_memory(*copy, len, g, err, errlen);
}

/* Expects opening b to fail with `want` and a message containing `needle`. */
static void expect_fail(const wbuf *b, wf_status want, const char *needle) {
    char err[512] = "";
    wf_gguf *g = NULL;
    uint8_t *copy;
    wf_status st = open_buf(b, b->n, &g, &copy, err, sizeof err);
    ck_assert_msg(st == want, "status %s, expected %s (%s)", wf_status_name(st),
                  wf_status_name(want), err);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
    free(copy);
}

/* A valid file with every value type (nested arrays included) and three tensors, the last one
 * ending exactly at the end of the file. `align` 0: no general.alignment key (default 32). */
static void make_valid(wbuf *b, uint32_t version, uint32_t align) {
    int n_kv = 0;
    put_header(b, version, 3, 0);
    size_t kv_count_at = 16;
    put_key(b, "t.u8", WF_GGUF_UINT8), put_u8(b, 200), n_kv++;
    put_key(b, "t.i8", WF_GGUF_INT8), put_u8(b, (uint8_t)-5), n_kv++;
    put_key(b, "t.u16", WF_GGUF_UINT16), put_u16(b, 65000), n_kv++;
    put_key(b, "t.i16", WF_GGUF_INT16), put_u16(b, (uint16_t)-300), n_kv++;
    kv_u32(b, "t.u32", 4000000000u), n_kv++;
    put_key(b, "t.i32", WF_GGUF_INT32), put_u32(b, (uint32_t)-70000), n_kv++;
    put_key(b, "t.f32", WF_GGUF_FLOAT32), put_f32(b, 1.5f), n_kv++;
    put_key(b, "t.bool", WF_GGUF_BOOL), put_u8(b, 1), n_kv++;
    kv_str(b, "t.str", "hello"), n_kv++;
    put_key(b, "t.u64", WF_GGUF_UINT64), put_u64(b, 1ull << 40), n_kv++;
    put_key(b, "t.i64", WF_GGUF_INT64), put_u64(b, (uint64_t)-(1ll << 40)), n_kv++;
    put_key(b, "t.f64", WF_GGUF_FLOAT64), put_f64(b, 0.25), n_kv++;
    put_key(b, "t.small_u64", WF_GGUF_UINT64), put_u64(b, 7), n_kv++;
    /* arrays */
    put_key(b, "a.i32", WF_GGUF_ARRAY), put_u32(b, WF_GGUF_INT32), put_u64(b, 3);
    put_u32(b, 1), put_u32(b, (uint32_t)-2), put_u32(b, 3), n_kv++;
    put_key(b, "a.str", WF_GGUF_ARRAY), put_u32(b, WF_GGUF_STRING), put_u64(b, 3);
    put_str(b, "a"), put_str(b, ""), put_str(b, "ccc"), n_kv++;
    put_key(b, "a.empty", WF_GGUF_ARRAY), put_u32(b, WF_GGUF_FLOAT32), put_u64(b, 0), n_kv++;
    put_key(b, "a.bool", WF_GGUF_ARRAY), put_u32(b, WF_GGUF_BOOL), put_u64(b, 2);
    put_u8(b, 0), put_u8(b, 1), n_kv++;
    /* an array of arrays of strings, and an array of arrays of arrays of u8 */
    put_key(b, "a.nested", WF_GGUF_ARRAY), put_u32(b, WF_GGUF_ARRAY), put_u64(b, 2);
    put_u32(b, WF_GGUF_STRING), put_u64(b, 2), put_str(b, "x"), put_str(b, "yy");
    put_u32(b, WF_GGUF_STRING), put_u64(b, 0), n_kv++;
    put_key(b, "a.deep", WF_GGUF_ARRAY), put_u32(b, WF_GGUF_ARRAY), put_u64(b, 1);
    put_u32(b, WF_GGUF_ARRAY), put_u64(b, 1), put_u32(b, WF_GGUF_UINT8), put_u64(b, 2);
    put_u8(b, 9), put_u8(b, 8), n_kv++;
    put_key(b, "a.f64", WF_GGUF_ARRAY), put_u32(b, WF_GGUF_FLOAT64), put_u64(b, 1);
    put_f64(b, -1.0), n_kv++;
    if (align) kv_u32(b, "general.alignment", align), n_kv++;
    uint64_t n_kv64 = (uint64_t)n_kv;
    memcpy(b->p + kv_count_at, &n_kv64, 8);

    uint32_t a = align ? align : 32;
    uint64_t ne_f32[2] = {4, 2};   /* 32 bytes */
    uint64_t ne_q8[1] = {64};      /* 2 blocks x 34 = 68 bytes */
    uint64_t ne_f16[3] = {3, 1, 2}; /* 12 bytes */
    uint64_t o1 = 0, o2 = (32 + a - 1) / a * a, o3 = o2 + (68 + a - 1) / a * a;
    put_tensor_info(b, "w.f32", 2, ne_f32, WF_GGML_TYPE_F32, o1);
    put_tensor_info(b, "w.q8", 1, ne_q8, WF_GGML_TYPE_Q8_0, o2);
    put_tensor_info(b, "w.f16", 3, ne_f16, WF_GGML_TYPE_F16, o3);
    pad_to(b, a);
    size_t data = b->n;
    for (int i = 0; i < 8; i++) put_f32(b, (float)i);
    while (b->n < data + o2) put_u8(b, 0);
    for (int i = 0; i < 68; i++) put_u8(b, (uint8_t)i);
    while (b->n < data + o3) put_u8(b, 0);
    for (int i = 0; i < 6; i++) put_u16(b, 0x3c00); /* 1.0 in fp16 */
}

static void check_valid(const wf_gguf *g, uint32_t version, uint32_t align) {
    ck_assert_uint_eq(wf_gguf_version(g), version);
    ck_assert_uint_eq(wf_gguf_alignment(g), align ? align : 32);
    ck_assert_int_eq(wf_gguf_n_kv(g), (align ? 21 : 20));
    ck_assert_str_eq(wf_gguf_key_at(g, 0), "t.u8");
    ck_assert_int_eq(wf_gguf_type_at(g, 0), WF_GGUF_UINT8);
    ck_assert_ptr_null(wf_gguf_key_at(g, 99));
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f;
    double d;
    bool bl;
    ck_assert(wf_gguf_get_u32(g, "t.u8", &u32) && u32 == 200);
    ck_assert(wf_gguf_get_i32(g, "t.u8", &i32) && i32 == 200);
    ck_assert(wf_gguf_get_i32(g, "t.i8", &i32) && i32 == -5);
    ck_assert(!wf_gguf_get_u32(g, "t.i8", &u32)); /* negative does not fit */
    ck_assert(wf_gguf_get_u32(g, "t.u16", &u32) && u32 == 65000);
    ck_assert(wf_gguf_get_i32(g, "t.i16", &i32) && i32 == -300);
    ck_assert(wf_gguf_get_u32(g, "t.u32", &u32) && u32 == 4000000000u);
    ck_assert(!wf_gguf_get_i32(g, "t.u32", &i32)); /* > INT32_MAX */
    ck_assert(wf_gguf_get_i64(g, "t.u32", &i64) && i64 == 4000000000ll);
    ck_assert(wf_gguf_get_i32(g, "t.i32", &i32) && i32 == -70000);
    ck_assert(wf_gguf_get_u64(g, "t.u64", &u64) && u64 == 1ull << 40);
    ck_assert(!wf_gguf_get_u32(g, "t.u64", &u32));
    ck_assert(wf_gguf_get_u32(g, "t.small_u64", &u32) && u32 == 7);
    ck_assert(wf_gguf_get_i64(g, "t.i64", &i64) && i64 == -(1ll << 40));
    ck_assert(!wf_gguf_get_u64(g, "t.i64", &u64));
    ck_assert(wf_gguf_get_f32(g, "t.f32", &f) && f == 1.5f);
    ck_assert(wf_gguf_get_f32(g, "t.f64", &f) && f == 0.25f);
    ck_assert(wf_gguf_get_f64(g, "t.f64", &d) && d == 0.25);
    ck_assert(!wf_gguf_get_f32(g, "t.u32", &f));
    ck_assert(!wf_gguf_get_u32(g, "t.f32", &u32));
    ck_assert(wf_gguf_get_bool(g, "t.bool", &bl) && bl);
    ck_assert(!wf_gguf_get_u32(g, "t.bool", &u32)); /* bool is not an integer */
    ck_assert(!wf_gguf_get_bool(g, "t.u8", &bl));
    wf_gguf_str s;
    ck_assert(wf_gguf_get_str(g, "t.str", &s) && s.len == 5 && memcmp(s.data, "hello", 5) == 0);
    ck_assert(!wf_gguf_get_str(g, "t.u32", &s));
    ck_assert(!wf_gguf_get_u32(g, "missing", &u32));
    ck_assert(!wf_gguf_get_str(g, "missing", &s));

    wf_gguf_value_type et;
    uint64_t n;
    const void *data;
    ck_assert(wf_gguf_get_array(g, "a.i32", &et, &n, &data));
    ck_assert_int_eq(et, WF_GGUF_INT32);
    ck_assert_uint_eq(n, 3);
    int32_t v[3];
    memcpy(v, data, sizeof v);
    ck_assert(v[0] == 1 && v[1] == -2 && v[2] == 3);
    ck_assert(!wf_gguf_get_array(g, "t.u32", &et, &n, &data));
    ck_assert(wf_gguf_get_array(g, "a.str", &et, &n, &data));
    ck_assert(et == WF_GGUF_STRING && n == 3 && data == NULL);
    ck_assert(wf_gguf_get_array_str(g, "a.str", 0, &s) && s.len == 1 && s.data[0] == 'a');
    ck_assert(wf_gguf_get_array_str(g, "a.str", 1, &s) && s.len == 0);
    ck_assert(wf_gguf_get_array_str(g, "a.str", 2, &s) && s.len == 3 &&
              memcmp(s.data, "ccc", 3) == 0);
    ck_assert(!wf_gguf_get_array_str(g, "a.str", 3, &s));
    ck_assert(!wf_gguf_get_array_str(g, "a.i32", 0, &s));
    ck_assert(wf_gguf_get_array(g, "a.empty", &et, &n, &data) && et == WF_GGUF_FLOAT32 && n == 0);
    ck_assert(wf_gguf_get_array(g, "a.bool", &et, &n, &data) && et == WF_GGUF_BOOL && n == 2);
    ck_assert(((const uint8_t *)data)[1] == 1);
    ck_assert(wf_gguf_get_array(g, "a.nested", &et, &n, &data));
    ck_assert(et == WF_GGUF_ARRAY && n == 2 && data == NULL);
    ck_assert(wf_gguf_get_array(g, "a.deep", &et, &n, &data) && et == WF_GGUF_ARRAY && n == 1);
    ck_assert(wf_gguf_get_array(g, "a.f64", &et, &n, &data) && et == WF_GGUF_FLOAT64 && n == 1);
    ck_assert_int_eq(wf_gguf_find_key(g, "a.deep"), 18);

    ck_assert_int_eq(wf_gguf_n_tensors(g), 3);
    const wf_gguf_tensor *t = wf_gguf_find_tensor(g, "w.f32");
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_eq(t, wf_gguf_tensor_at(g, 0));
    ck_assert(t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 2 && t->ne[2] == 1 && t->ne[3] == 1);
    ck_assert(t->type == WF_GGML_TYPE_F32 && t->size == 32);
    float fv;
    memcpy(&fv, (const uint8_t *)t->data + 7 * 4, 4);
    ck_assert(fv == 7.0f);
    ck_assert_uint_eq(((uintptr_t)t->data - (uintptr_t)wf_gguf_base(g)) % wf_gguf_alignment(g), 0);
    t = wf_gguf_find_tensor(g, "w.q8");
    ck_assert(t && t->type == WF_GGML_TYPE_Q8_0 && t->size == 68 && t->n_dims == 1);
    ck_assert_uint_eq(((const uint8_t *)t->data)[67], 67);
    t = wf_gguf_find_tensor(g, "w.f16");
    ck_assert(t && t->size == 12 && t->ne[2] == 2);
    ck_assert_ptr_eq((const uint8_t *)t->data + t->size,
                     (const uint8_t *)wf_gguf_base(g) + wf_gguf_size(g));
    ck_assert_ptr_null(wf_gguf_find_tensor(g, "nope"));
    ck_assert_ptr_null(wf_gguf_tensor_at(g, 3));
    ck_assert_ptr_null(wf_gguf_tensor_at(g, -1));
}

START_TEST(test_valid_all_types) {
    static const uint32_t versions[] = {2, 3};
    static const uint32_t aligns[] = {0, 1, 8, 64};
    for (int v = 0; v < 2; v++)
        for (int a = 0; a < 4; a++) {
            wbuf b = {0};
            make_valid(&b, versions[v], aligns[a]);
            char err[256] = "";
            wf_gguf *g;
            uint8_t *copy;
            wf_status st = open_buf(&b, b.n, &g, &copy, err, sizeof err);
            ck_assert_msg(st == WF_OK, "v%u align %u: %s", versions[v], aligns[a], err);
            check_valid(g, versions[v], aligns[a]);
            wf_gguf_close(g);
            free(copy);
            free(b.p);
        }
}
END_TEST

/* Every proper prefix of a valid file is rejected (and never read past its end: exact-size
 * copies under ASan). */
START_TEST(test_truncation_every_offset) {
    for (int a = 0; a < 2; a++) {
        wbuf b = {0};
        make_valid(&b, 3, a ? 64 : 0);
        for (size_t len = 0; len < b.n; len++) {
            char err[256] = "";
            wf_gguf *g = NULL;
            uint8_t *copy;
            wf_status st = open_buf(&b, len, &g, &copy, err, sizeof err);
            ck_assert_msg(st == WF_EFORMAT, "prefix %zu/%zu: %s (%s)", len, b.n,
                          wf_status_name(st), err);
            ck_assert_ptr_null(g);
            ck_assert_msg(err[0] != '\0', "prefix %zu: empty message", len);
            free(copy);
        }
        free(b.p);
    }
}
END_TEST

START_TEST(test_header_errors) {
    wbuf b = {0};
    put(&b, "GGML", 4), put_u32(&b, 3), put_u64(&b, 0), put_u64(&b, 0);
    expect_fail(&b, WF_EFORMAT, "bad magic");
    b.n = 0;
    put_header(&b, 1, 0, 0);
    expect_fail(&b, WF_EUNSUPPORTED, "version 1");
    b.n = 0;
    put_header(&b, 4, 0, 0);
    expect_fail(&b, WF_EUNSUPPORTED, "version 4");
    b.n = 0;
    put_header(&b, 3u << 24, 0, 0);
    expect_fail(&b, WF_EUNSUPPORTED, "big-endian");
    b.n = 0;
    put_header(&b, 3, 0, 1ull << 62);
    expect_fail(&b, WF_EFORMAT, "metadata count 4611686018427387904");
    b.n = 0;
    put_header(&b, 3, UINT64_MAX, 0);
    expect_fail(&b, WF_EFORMAT, "tensor count");
    b.n = 0;
    put(&b, "GG", 2);
    expect_fail(&b, WF_EFORMAT, "too short");
    /* an empty but valid file: no tensors, no metadata */
    b.n = 0;
    put_header(&b, 2, 0, 0);
    wf_gguf *g;
    char err[128];
    ck_assert_int_eq(wf_gguf_open_memory(b.p, b.n, &g, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_gguf_n_kv(g), 0);
    ck_assert_int_eq(wf_gguf_n_tensors(g), 0);
    wf_gguf_close(g);
    free(b.p);
}
END_TEST

START_TEST(test_metadata_errors) {
    wbuf b = {0};
    /* string length past the end */
    put_header(&b, 3, 0, 1);
    put_key(&b, "k.s", WF_GGUF_STRING), put_u64(&b, 1000), put(&b, "abc", 3);
    expect_fail(&b, WF_EFORMAT, "key 'k.s': string value length 1000");
    /* key length past the end */
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_u64(&b, UINT64_MAX), put(&b, "abcdefghijklmnop", 16);
    expect_fail(&b, WF_EFORMAT, "key length 18446744073709551615");
    /* huge array length */
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_key(&b, "k.arr", WF_GGUF_ARRAY), put_u32(&b, WF_GGUF_UINT32), put_u64(&b, 1ull << 60);
    put_u32(&b, 1);
    expect_fail(&b, WF_EFORMAT, "key 'k.arr': array of 1152921504606846976 uint32");
    /* huge string array (would allocate an index): capped by the bytes left */
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_key(&b, "k.sa", WF_GGUF_ARRAY), put_u32(&b, WF_GGUF_STRING), put_u64(&b, 1ull << 40);
    put_str(&b, "x");
    expect_fail(&b, WF_EFORMAT, "does not fit");
    /* string element past the end inside an array */
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_key(&b, "k.sa", WF_GGUF_ARRAY), put_u32(&b, WF_GGUF_STRING), put_u64(&b, 2);
    put_str(&b, "x"), put_u64(&b, 99), put_u64(&b, 0);
    expect_fail(&b, WF_EFORMAT, "string element 1 length 99");
    /* unknown value type, unknown element type */
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_key(&b, "k.t", 13), put_u32(&b, 0);
    expect_fail(&b, WF_EFORMAT, "key 'k.t': unknown value type 13");
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_key(&b, "k.t", WF_GGUF_ARRAY), put_u32(&b, 99), put_u64(&b, 0);
    expect_fail(&b, WF_EFORMAT, "unknown array element type 99");
    /* nesting bomb */
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_key(&b, "k.deep", WF_GGUF_ARRAY);
    for (int i = 0; i < 20; i++) put_u32(&b, WF_GGUF_ARRAY), put_u64(&b, 1);
    put_u32(&b, WF_GGUF_UINT8), put_u64(&b, 0);
    expect_fail(&b, WF_EFORMAT, "nested deeper");
    /* invalid bool */
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_key(&b, "k.b", WF_GGUF_BOOL), put_u8(&b, 7);
    expect_fail(&b, WF_EFORMAT, "key 'k.b': bool value 7");
    /* duplicate key */
    b.n = 0;
    put_header(&b, 3, 0, 2);
    kv_u32(&b, "k.dup", 1), kv_u32(&b, "k.dup", 2);
    expect_fail(&b, WF_EFORMAT, "key 'k.dup': duplicate");
    /* NUL inside a key */
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_u64(&b, 3), put(&b, "a\0b", 3), put_u32(&b, WF_GGUF_UINT8), put_u8(&b, 0);
    expect_fail(&b, WF_EFORMAT, "NUL");
    /* alignment: not a power of two, zero, wrong type */
    b.n = 0;
    put_header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 48);
    expect_fail(&b, WF_EFORMAT, "'general.alignment': 48 is not a power of two");
    b.n = 0;
    put_header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 0);
    expect_fail(&b, WF_EFORMAT, "general.alignment");
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_key(&b, "general.alignment", WF_GGUF_UINT64), put_u64(&b, 32);
    expect_fail(&b, WF_EFORMAT, "expected uint32");
    free(b.p);
}
END_TEST

/* One tensor info after an empty metadata section, data section of `data_bytes` zeros. */
static void one_tensor(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t off, size_t data_bytes) {
    b->n = 0;
    put_header(b, 3, 1, 0);
    put_tensor_info(b, name, n_dims, ne, type, off);
    pad_to(b, 32);
    for (size_t i = 0; i < data_bytes; i++) put_u8(b, 0);
}

START_TEST(test_tensor_errors) {
    wbuf b = {0};
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    one_tensor(&b, "ok", 2, ne, WF_GGML_TYPE_F32, 0, 256);
    wf_gguf *g;
    char err[256];
    ck_assert_int_eq(wf_gguf_open_memory(b.p, b.n, &g, err, sizeof err), WF_OK);
    wf_gguf_close(g);
    one_tensor(&b, "short", 2, ne, WF_GGML_TYPE_F32, 0, 255);
    expect_fail(&b, WF_EFORMAT, "tensor 'short': data [0, +256) runs past the end");
    one_tensor(&b, "far", 2, ne, WF_GGML_TYPE_F32, 1ull << 40, 256);
    expect_fail(&b, WF_EFORMAT, "tensor 'far'");
    one_tensor(&b, "wrap", 2, ne, WF_GGML_TYPE_F32, UINT64_MAX - 31, 256);
    expect_fail(&b, WF_EFORMAT, "tensor 'wrap'");
    one_tensor(&b, "misaligned", 2, ne, WF_GGML_TYPE_F32, 4, 512);
    expect_fail(&b, WF_EFORMAT, "tensor 'misaligned': data offset 4");
    one_tensor(&b, "ty", 2, ne, 77, 0, 256);
    expect_fail(&b, WF_EUNSUPPORTED, "tensor 'ty': unknown tensor type 77");
    one_tensor(&b, "ty4", 2, ne, 4, 0, 256); /* removed Q4_2 */
    expect_fail(&b, WF_EUNSUPPORTED, "unknown tensor type 4");
    one_tensor(&b, "d0", 0, ne, WF_GGML_TYPE_F32, 0, 256);
    expect_fail(&b, WF_EFORMAT, "tensor 'd0': n_dims 0");
    one_tensor(&b, "d5", 5, ne, WF_GGML_TYPE_F32, 0, 256);
    expect_fail(&b, WF_EFORMAT, "n_dims 5");
    uint64_t zero[2] = {32, 0};
    one_tensor(&b, "z", 2, zero, WF_GGML_TYPE_F32, 0, 256);
    expect_fail(&b, WF_EFORMAT, "tensor 'z': ne[1] = 0");
    uint64_t neg[1] = {1ull << 63};
    one_tensor(&b, "n", 1, neg, WF_GGML_TYPE_F32, 0, 256);
    expect_fail(&b, WF_EFORMAT, "ne[0] = 9223372036854775808");
    uint64_t big[3] = {1ull << 32, 1ull << 32, 1ull << 32};
    one_tensor(&b, "ovf", 3, big, WF_GGML_TYPE_F32, 0, 256);
    expect_fail(&b, WF_EFORMAT, "tensor 'ovf': element count overflows");
    uint64_t bytes[2] = {1ull << 31, 1ull << 31}; /* 2^62 elements x 4 bytes */
    one_tensor(&b, "bytes", 2, bytes, WF_GGML_TYPE_F32, 0, 256);
    expect_fail(&b, WF_EFORMAT, "tensor 'bytes'");
    uint64_t row[2] = {33, 2};
    one_tensor(&b, "q", 2, row, WF_GGML_TYPE_Q4_1, 0, 256);
    expect_fail(&b, WF_EFORMAT, "tensor 'q': row length ne[0] = 33 is not a multiple of the q4_1");

    /* overlapping and duplicate tensors */
    b.n = 0;
    put_header(&b, 3, 2, 0);
    put_tensor_info(&b, "a", 1, ne, WF_GGML_TYPE_F32, 0);  /* 128 bytes */
    put_tensor_info(&b, "b", 1, ne, WF_GGML_TYPE_F32, 96); /* overlaps a */
    pad_to(&b, 32);
    for (int i = 0; i < 256; i++) put_u8(&b, 0);
    expect_fail(&b, WF_EFORMAT, "tensor 'b': data at offset 96 overlaps tensor 'a'");
    b.n = 0;
    put_header(&b, 3, 2, 0);
    put_tensor_info(&b, "a", 1, ne, WF_GGML_TYPE_F32, 0);
    put_tensor_info(&b, "a", 1, ne, WF_GGML_TYPE_F32, 128);
    pad_to(&b, 32);
    for (int i = 0; i < 256; i++) put_u8(&b, 0);
    expect_fail(&b, WF_EFORMAT, "tensor 'a': duplicate tensor name");
    /* adjacent, in reverse order: fine */
    b.n = 0;
    put_header(&b, 3, 2, 0);
    put_tensor_info(&b, "a", 1, ne, WF_GGML_TYPE_F32, 128);
    put_tensor_info(&b, "b", 1, ne, WF_GGML_TYPE_F32, 0);
    pad_to(&b, 32);
    for (int i = 0; i < 256; i++) put_u8(&b, 0);
    ck_assert_int_eq(wf_gguf_open_memory(b.p, b.n, &g, err, sizeof err), WF_OK);
    ck_assert_ptr_eq(wf_gguf_find_tensor(g, "b")->data, (const uint8_t *)wf_gguf_base(g) +
                                                            wf_gguf_data_offset(g));
    wf_gguf_close(g);
    free(b.p);
}
END_TEST

/* Flipping any single byte of a valid file never crashes (statuses vary). */
START_TEST(test_bit_flips) {
    wbuf b = {0};
    make_valid(&b, 3, 0);
    uint8_t *copy = malloc(b.n);
    for (size_t i = 0; i < b.n; i++) {
        static const uint8_t vals[] = {0x00, 0xff, 0x80, 0x7f, 0x01};
        for (size_t k = 0; k < sizeof vals; k++) {
            memcpy(copy, b.p, b.n);
            copy[i] = vals[k];
            wf_gguf *g = NULL;
            char err[256] = "";
            wf_status st = wf_gguf_open_memory(copy, b.n, &g, err, sizeof err);
            if (st == WF_OK) {
                for (int64_t t = 0; t < wf_gguf_n_tensors(g); t++) {
                    const wf_gguf_tensor *ti = wf_gguf_tensor_at(g, t);
                    ck_assert((const uint8_t *)ti->data + ti->size <= copy + b.n);
                }
                wf_gguf_close(g);
            } else {
                ck_assert_ptr_null(g);
                ck_assert(err[0] != '\0');
            }
        }
    }
    free(copy);
    free(b.p);
}
END_TEST

START_TEST(test_open_file) {
    char path[] = "/tmp/weft-test-gguf-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    wbuf b = {0};
    make_valid(&b, 2, 0);
    ck_assert_int_eq(write(fd, b.p, b.n), (ssize_t)b.n);
    close(fd);
    wf_gguf *g;
    char err[512];
    ck_assert_int_eq(wf_gguf_open(path, &g, err, sizeof err), WF_OK);
    check_valid(g, 2, 0);
    wf_gguf_close(g);
    /* truncated on disk: the message names the file */
    ck_assert_int_eq(truncate(path, (off_t)(b.n - 1)), 0);
    ck_assert_int_eq(wf_gguf_open(path, &g, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, path) && strstr(err, "w.f16"), "%s", err);
    ck_assert_int_eq(truncate(path, 0), 0);
    ck_assert_int_eq(wf_gguf_open(path, &g, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, "empty"), "%s", err);
    unlink(path);
    ck_assert_int_eq(wf_gguf_open(path, &g, err, sizeof err), WF_ENOTFOUND);
    ck_assert_int_eq(wf_gguf_open("/tmp", &g, err, sizeof err), WF_EIO);
    wf_gguf_close(NULL);
    free(b.p);
}
END_TEST

static const char *model_path(void) {
    const char *p = getenv("WEFT_MODEL");
    return p && *p ? p : WEFT_TEST_MODEL;
}

START_TEST(test_default_model) {
    wf_gguf *g;
    char err[512];
    wf_status st = wf_gguf_open(model_path(), &g, err, sizeof err);
    ck_assert_msg(st == WF_OK, "%s", err);
    ck_assert_uint_eq(wf_gguf_version(g), 3);
    ck_assert_int_eq(wf_gguf_n_kv(g), 33);
    ck_assert_int_eq(wf_gguf_n_tensors(g), 272);
    uint32_t u;
    ck_assert(wf_gguf_get_u32(g, "llama.block_count", &u) && u == 30);
    ck_assert(wf_gguf_get_u32(g, "llama.embedding_length", &u) && u == 576);
    ck_assert(wf_gguf_get_u32(g, "llama.attention.head_count", &u) && u == 9);
    ck_assert(wf_gguf_get_u32(g, "llama.attention.head_count_kv", &u) && u == 3);
    ck_assert(wf_gguf_get_u32(g, "llama.vocab_size", &u) && u == 49152);
    ck_assert(wf_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u) && u == 2);
    float f;
    ck_assert(wf_gguf_get_f32(g, "llama.rope.freq_base", &f) && f == 100000.0f);
    bool b;
    ck_assert(wf_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b));
    wf_gguf_str s;
    ck_assert(wf_gguf_get_str(g, "general.architecture", &s) && s.len == 5 &&
              memcmp(s.data, "llama", 5) == 0);
    ck_assert(wf_gguf_get_str(g, "tokenizer.ggml.pre", &s) && s.len == 6 &&
              memcmp(s.data, "smollm", 6) == 0);
    ck_assert(wf_gguf_get_str(g, "tokenizer.chat_template", &s));
    ck_assert(s.len > 100 && memcmp(s.data, "{% for message in messages %}", 29) == 0);
    wf_gguf_value_type et;
    uint64_t n;
    const void *data;
    ck_assert(wf_gguf_get_array(g, "tokenizer.ggml.tokens", &et, &n, &data));
    ck_assert(et == WF_GGUF_STRING && n == 49152);
    ck_assert(wf_gguf_get_array_str(g, "tokenizer.ggml.tokens", 0, &s) && s.len == 13 &&
              memcmp(s.data, "<|endoftext|>", 13) == 0);
    ck_assert(wf_gguf_get_array_str(g, "tokenizer.ggml.tokens", 2, &s) && s.len == 10 &&
              memcmp(s.data, "<|im_end|>", 10) == 0);
    ck_assert(wf_gguf_get_array_str(g, "tokenizer.ggml.tokens", 49151, &s) && s.len == 7 &&
              memcmp(s.data, "ectable", 7) == 0);
    ck_assert(wf_gguf_get_array(g, "tokenizer.ggml.merges", &et, &n, &data));
    ck_assert(et == WF_GGUF_STRING && n == 48900);
    ck_assert(wf_gguf_get_array(g, "tokenizer.ggml.token_type", &et, &n, &data));
    ck_assert(et == WF_GGUF_INT32 && n == 49152 && data != NULL);

    const wf_gguf_tensor *t = wf_gguf_find_tensor(g, "token_embd.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_eq(t, wf_gguf_tensor_at(g, 0));
    ck_assert(t->type == WF_GGML_TYPE_Q8_0 && t->n_dims == 2);
    ck_assert(t->ne[0] == 576 && t->ne[1] == 49152);
    ck_assert_uint_eq(t->size, 30081024); /* 576/32 * 34 * 49152 */
    ck_assert_uint_eq((uintptr_t)t->data - (uintptr_t)wf_gguf_base(g), 1785664);
    t = wf_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    ck_assert(t && t->type == WF_GGML_TYPE_Q4_1 && t->ne[0] == 1536 && t->ne[1] == 576);
    t = wf_gguf_find_tensor(g, "blk.29.attn_norm.weight");
    ck_assert(t && t->type == WF_GGML_TYPE_F32 && t->n_dims == 1 && t->size == 576 * 4);
    size_t total = 0;
    for (int64_t i = 0; i < wf_gguf_n_tensors(g); i++) total += wf_gguf_tensor_at(g, i)->size;
    ck_assert(total <= wf_gguf_size(g) - wf_gguf_data_offset(g));
    wf_gguf_close(g);
}
END_TEST

static Suite *gguf_suite(void) {
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_valid_all_types);
    tcase_add_test(tc, test_truncation_every_offset);
    tcase_add_test(tc, test_header_errors);
    tcase_add_test(tc, test_metadata_errors);
    tcase_add_test(tc, test_tensor_errors);
    tcase_add_test(tc, test_bit_flips);
    tcase_add_test(tc, test_open_file);
    tcase_add_test(tc, test_default_model);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(gguf_suite)
