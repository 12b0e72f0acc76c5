/* server/imgenc.h: JPEG and WebP files that libjpeg and libwebp decode back to the pixels
 * (within lossy error at quality 100), format names, and what each format refuses. */
#include <check.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <webp/decode.h>

#include "check_main.h"
#include "server/imgenc.h"

/* A smooth gradient: lossy codecs keep it close at quality 100. */
static uint8_t *gradient(int w, int h, int c) {
    uint8_t *px = malloc((size_t)w * h * c);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                px[((size_t)y * w + x) * c + k] = (uint8_t)(k == 3 ? 255 : 40 + 4 * x + 3 * y + 20 * k);
    return px;
}

static double mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d += abs((int)a[i] - (int)b[i]);
    return d / (double)n;
}

/* A smooth but busy pattern (no wrap-around edges) whose JPEG does not compress small. */
static uint8_t *waves(int w, int h, int c) {
    uint8_t *px = malloc((size_t)w * h * c);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                px[((size_t)y * w + x) * c + k] =
                    (uint8_t)(128.0 + 100.0 * sin(0.35 * x) * cos(0.25 * y) + 10 * k);
    return px;
}

/* Encodes px (freed here) and decodes it back; returns the file's size. */
static size_t jpeg_roundtrip_px(uint8_t *px, int w, int h, int c) {
    wf_jbuf out = {0};
    ck_assert_int_eq(wf_image_encode(WF_IMAGE_FORMAT_JPEG, px, w, h, c, 100, &out), WF_OK);
    ck_assert(out.len > 4 && (uint8_t)out.data[0] == 0xFF && (uint8_t)out.data[1] == 0xD8);
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr err;
    d.err = jpeg_std_error(&err);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, (const unsigned char *)out.data, out.len);
    ck_assert_int_eq(jpeg_read_header(&d, TRUE), JPEG_HEADER_OK);
    jpeg_start_decompress(&d);
    ck_assert_int_eq((int)d.output_width, w);
    ck_assert_int_eq((int)d.output_height, h);
    ck_assert_int_eq(d.output_components, c);
    uint8_t *back = malloc((size_t)w * h * c);
    while (d.output_scanline < d.output_height) {
        JSAMPROW row = back + (size_t)d.output_scanline * w * c;
        jpeg_read_scanlines(&d, &row, 1);
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    ck_assert_double_lt(mean_abs_diff(back, px, (size_t)w * h * c), 3.0);
    free(back);
    free(px);
    size_t len = out.len;
    wf_jbuf_free(&out);
    return len;
}

static void jpeg_roundtrip(int w, int h, int c) { jpeg_roundtrip_px(gradient(w, h, c), w, h, c); }

START_TEST(jpeg_roundtrip_gray_rgb) {
    jpeg_roundtrip(8, 8, 1);
    jpeg_roundtrip(32, 24, 3);
    jpeg_roundtrip(1, 1, 3);
    /* larger than the encoder's 16 KiB staging buffer: the file is written in several pieces */
    ck_assert_uint_gt(jpeg_roundtrip_px(waves(256, 192, 3), 256, 192, 3), 16384);
}
END_TEST

static void webp_roundtrip(int w, int h, int c) {
    uint8_t *px = gradient(w, h, c);
    wf_jbuf out = {0};
    ck_assert_int_eq(wf_image_encode(WF_IMAGE_FORMAT_WEBP, px, w, h, c, 100, &out), WF_OK);
    ck_assert(out.len > 12 && memcmp(out.data, "RIFF", 4) == 0 && memcmp(out.data + 8, "WEBP", 4) == 0);
    int bw = 0, bh = 0;
    uint8_t *rgba = WebPDecodeRGBA((const uint8_t *)out.data, out.len, &bw, &bh);
    ck_assert_ptr_nonnull(rgba);
    ck_assert_int_eq(bw, w);
    ck_assert_int_eq(bh, h);
    /* Back to the input's layout: gray is any of the (equal) colour channels. */
    uint8_t *back = malloc((size_t)w * h * c);
    for (size_t i = 0; i < (size_t)w * h; i++) {
        if (c <= 2) back[i * c] = rgba[i * 4 + 1];
        else for (int k = 0; k < 3; k++) back[i * c + k] = rgba[i * 4 + k];
        if (c == 2 || c == 4) back[i * c + c - 1] = rgba[i * 4 + 3];
    }
    ck_assert_double_lt(mean_abs_diff(back, px, (size_t)w * h * c), 4.0);
    WebPFree(rgba);
    free(back);
    free(px);
    wf_jbuf_free(&out);
}

START_TEST(webp_roundtrip_every_layout) {
    webp_roundtrip(8, 8, 1);
    webp_roundtrip(16, 8, 2);
    webp_roundtrip(32, 24, 3);
    webp_roundtrip(9, 7, 4);
}
END_TEST

START_TEST(png_through_imgenc) {
    uint8_t *px = gradient(4, 4, 3);
    wf_jbuf out = {0};
    ck_assert_int_eq(wf_image_encode(WF_IMAGE_FORMAT_PNG, px, 4, 4, 3, 0, &out), WF_OK);
    ck_assert(out.len > 8 && memcmp(out.data, "\x89PNG", 4) == 0);
    free(px);
    wf_jbuf_free(&out);
}
END_TEST

START_TEST(names_and_refusals) {
    wf_image_format f;
    ck_assert(wf_image_format_parse("jpeg", &f) && f == WF_IMAGE_FORMAT_JPEG);
    ck_assert(wf_image_format_parse("jpg", &f) && f == WF_IMAGE_FORMAT_JPEG);
    ck_assert(wf_image_format_parse("webp", &f) && f == WF_IMAGE_FORMAT_WEBP);
    ck_assert(wf_image_format_parse("png", &f) && f == WF_IMAGE_FORMAT_PNG);
    ck_assert(!wf_image_format_parse("gif", &f));
    ck_assert(!wf_image_format_parse("PNG", &f));
    ck_assert(!wf_image_format_parse(NULL, &f));
    ck_assert_str_eq(wf_image_format_name(WF_IMAGE_FORMAT_JPEG), "jpeg");
    char why[120];
    ck_assert(!wf_image_format_supports(WF_IMAGE_FORMAT_JPEG, 4, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "alpha"));
    ck_assert(wf_image_format_supports(WF_IMAGE_FORMAT_WEBP, 2, why, sizeof why));
    uint8_t px[16] = {0};
    wf_jbuf out = {0};
    ck_assert_int_eq(wf_image_encode(WF_IMAGE_FORMAT_JPEG, px, 2, 2, 4, 90, &out), WF_EINVAL);
    ck_assert_int_eq(wf_image_encode(WF_IMAGE_FORMAT_WEBP, px, 2, 2, 3, 101, &out), WF_EINVAL);
    ck_assert_int_eq(wf_image_encode(WF_IMAGE_FORMAT_WEBP, px, 0, 2, 3, 90, &out), WF_EINVAL);
    ck_assert_int_eq(wf_image_encode(WF_IMAGE_FORMAT_JPEG, NULL, 2, 2, 3, 90, &out), WF_EINVAL);
    ck_assert_uint_eq(out.len, 0);
    wf_jbuf_free(&out);
}
END_TEST

static Suite *imgenc_suite(void) {
    Suite *s = suite_create("imgenc");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, jpeg_roundtrip_gray_rgb);
    tcase_add_test(tc, webp_roundtrip_every_layout);
    tcase_add_test(tc, png_through_imgenc);
    tcase_add_test(tc, names_and_refusals);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(imgenc_suite)
