/* Tests engine/dit/safetensors.c: a valid file of every accepted dtype with metadata, the real
 * files diffusers wrote for the fixtures, and hostile files (every truncation, bad header
 * length, bad JSON, duplicate names, bad dtype/shape/offsets, overlaps, holes, trailing bytes)
 * that must fail with WF_EFORMAT / WF_EUNSUPPORTED and a message naming the problem. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/cpu/quant.h"
#include "engine/dit/safetensors.h"

/* header (padded to 8 with spaces) + data bytes, in an exact-size heap buffer */
static uint8_t *build(const char *json, const void *data, size_t dlen, size_t *len) {
    size_t hl = strlen(json), pad = (8 - hl % 8) % 8;
    *len = 8 + hl + pad + dlen;
    uint8_t *b = malloc(*len);
    uint64_t n = hl + pad;
    memcpy(b, &n, 8);
    memcpy(b + 8, json, hl);
    memset(b + 8 + hl, ' ', pad);
    if (dlen) memcpy(b + 8 + hl + pad, data, dlen);
    return b;
}

static void expect_fail(const char *json, size_t dlen, wf_status want, const char *needle) {
    uint8_t data[256] = {0};
    size_t len;
    uint8_t *b = build(json, data, dlen, &len);
    wf_safetensors *st = (wf_safetensors *)1;
    char err[512] = "";
    wf_status rc = wf_safetensors_open_memory(b, len, &st, err, sizeof err);
    ck_assert_msg(rc == want, "%s: got %s (%s), want %s", json, wf_status_name(rc), err, wf_status_name(want));
    ck_assert_ptr_null(st);
    ck_assert_msg(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", json, err, needle);
    free(b);
}

static const char *k_valid =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
    "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]},"
    "\"c\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[22,24]},"
    "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[24,28]},"
    "\"z\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[28,28]}}";

static uint8_t *valid_file(size_t *len) {
    uint8_t d[28];
    float a[4] = {1.0f, -2.0f, 0.5f, 3.0f}, s = 7.0f;
    uint16_t h[3] = {wf_fp32_to_fp16(1.5f), wf_fp32_to_fp16(-0.25f), wf_fp32_to_fp16(65504.0f)};
    uint16_t bf = wf_fp32_to_bf16(-3.0f);
    memcpy(d, a, 16);
    memcpy(d + 16, h, 6);
    memcpy(d + 22, &bf, 2);
    memcpy(d + 24, &s, 4);
    return build(k_valid, d, sizeof d, len);
}

START_TEST(valid_every_dtype) {
    size_t len;
    uint8_t *b = valid_file(&len);
    wf_safetensors *st;
    char err[256] = "";
    ck_assert_msg(wf_safetensors_open_memory(b, len, &st, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_int_eq(wf_safetensors_n_tensors(st), 5);
    ck_assert_str_eq(wf_safetensors_metadata(st, "format"), "pt");
    ck_assert_ptr_null(wf_safetensors_metadata(st, "nope"));
    const wf_safetensors_tensor *a = wf_safetensors_find(st, "a");
    ck_assert_int_eq(a->n_dims, 2);
    ck_assert_int_eq(a->shape[1], 2);
    float f[4];
    wf_safetensors_to_f32(a, f, 4);
    ck_assert(f[1] == -2.0f && f[3] == 3.0f);
    const wf_safetensors_tensor *h = wf_safetensors_find(st, "b");
    ck_assert_int_eq(h->dtype, WF_SAFETENSORS_F16);
    wf_safetensors_to_f32(h, f, 3);
    ck_assert(f[0] == 1.5f && f[1] == -0.25f && f[2] == 65504.0f);
    const wf_safetensors_tensor *c = wf_safetensors_find(st, "c");
    ck_assert_str_eq(wf_safetensors_dtype_name(c->dtype), "BF16");
    wf_safetensors_to_f32(c, f, 1);
    ck_assert(f[0] == -3.0f);
    const wf_safetensors_tensor *s = wf_safetensors_find(st, "s");
    ck_assert_int_eq(s->n_dims, 0);
    ck_assert_int_eq(s->n_elements, 1);
    ck_assert_int_eq(wf_safetensors_find(st, "z")->n_elements, 0);
    ck_assert_ptr_null(wf_safetensors_find(st, "d"));
    ck_assert_str_eq(wf_safetensors_tensor_at(st, 0)->name, "a"); /* name order */
    ck_assert_ptr_null(wf_safetensors_tensor_at(st, 5));
    wf_safetensors_close(st);
    free(b);
}
END_TEST

START_TEST(every_truncation_fails) {
    size_t len;
    uint8_t *b = valid_file(&len);
    for (size_t n = 0; n < len; n++) {
        uint8_t *c = malloc(n ? n : 1);
        memcpy(c, b, n);
        wf_safetensors *st = NULL;
        char err[256] = "";
        wf_status rc = wf_safetensors_open_memory(c, n, &st, err, sizeof err);
        ck_assert_msg(rc == WF_EFORMAT && st == NULL && err[0], "length %zu: %s", n, wf_status_name(rc));
        free(c);
    }
    free(b);
}
END_TEST

START_TEST(hostile_headers) {
    const char *t = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    char buf[512];
    expect_fail("[1,2]", 0, WF_EFORMAT, "not a JSON object");
    expect_fail("{\"t\":", 0, WF_EFORMAT, "not valid JSON");
    snprintf(buf, sizeof buf, "%s,\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", t);
    expect_fail(buf, 16, WF_EFORMAT, "duplicate");
    expect_fail("{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, WF_EFORMAT, "tensor 't': missing or non-string dtype");
    expect_fail("{\"t\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, WF_EFORMAT, "unknown dtype 'Q4'");
    expect_fail("{\"t\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, WF_EUNSUPPORTED,
                "dtype I64 is not supported");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, WF_EFORMAT, "non-array shape");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, WF_EFORMAT, "shape[0]");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, WF_EFORMAT,
                "9 dimensions");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,4]}}", 4,
                WF_EFORMAT, "shape too large");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, WF_EFORMAT,
                "8 bytes in data_offsets but shape x F32 needs 12");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, WF_EFORMAT,
                "beyond the data section");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, WF_EFORMAT, "begin 8 > end 0");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, WF_EFORMAT, "data_offsets must be");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, WF_EFORMAT,
                "unknown field 'x'");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, WF_EFORMAT, "overlaps");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, WF_EFORMAT,
                "leaving bytes [0, 4) unused");
    expect_fail("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, WF_EFORMAT, "trailing bytes");
    expect_fail("{\"__metadata__\":{\"a\":1}}", 0, WF_EFORMAT, "__metadata__ 'a' is not a string");
    expect_fail("{\"__metadata__\":[]}", 0, WF_EFORMAT, "__metadata__ is not an object");
    expect_fail("{\"t\":[]}", 0, WF_EFORMAT, "tensor 't': entry is not an object");
}
END_TEST

START_TEST(bad_header_length) {
    uint8_t b[16] = {0};
    uint64_t n = 1000;
    memcpy(b, &n, 8);
    wf_safetensors *st;
    char err[256] = "";
    ck_assert_int_eq(wf_safetensors_open_memory(b, sizeof b, &st, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, "header length 1000 beyond the file (16 bytes)"), "%s", err);
    n = UINT64_MAX;
    memcpy(b, &n, 8);
    ck_assert_int_eq(wf_safetensors_open_memory(b, sizeof b, &st, err, sizeof err), WF_EFORMAT);
    ck_assert_int_eq(wf_safetensors_open_memory(b, 5, &st, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, "truncated"), "%s", err);
}
END_TEST

START_TEST(files_on_disk) {
    wf_safetensors *st;
    char err[512] = "";
    const char *p = WEFT_SOURCE_DIR "/tests/engine/data/dit/tiny_diffusers/transformer/diffusion_pytorch_model.safetensors";
    ck_assert_msg(wf_safetensors_open(p, &st, err, sizeof err) == WF_OK, "%s", err);
    const wf_safetensors_tensor *t = wf_safetensors_find(st, "pos_embed.proj.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->n_dims, 4);
    ck_assert_int_eq(t->shape[0], 32);
    wf_safetensors_close(st);
    ck_assert_int_eq(wf_safetensors_open(WEFT_SOURCE_DIR "/nope.safetensors", &st, err, sizeof err), WF_ENOTFOUND);
    ck_assert_ptr_null(st);
    ck_assert_int_eq(wf_safetensors_open(WEFT_SOURCE_DIR "/README.md", &st, err, sizeof err), WF_EFORMAT);
    ck_assert_msg(strstr(err, "README.md"), "%s", err); /* the message names the file */
}
END_TEST

static Suite *st_suite(void) {
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("reader");
    tcase_add_test(tc, valid_every_dtype);
    tcase_add_test(tc, every_truncation_fails);
    tcase_add_test(tc, hostile_headers);
    tcase_add_test(tc, bad_header_length);
    tcase_add_test(tc, files_on_disk);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(st_suite)
