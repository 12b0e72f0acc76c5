/* server/png.h: PNG files libpng can read back, base64 test vectors (RFC 4648). */
#include <check.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

#include "server/png.h"

static void b64(const char *in, const char *want) {
    wf_jbuf b = {0};
    wf_base64_append(&b, in, strlen(in));
    wf_jbuf_raw(&b, "", 1);
    ck_assert_str_eq(b.data ? b.data : "", want);
    wf_jbuf_free(&b);
}

START_TEST(base64_vectors) {
    b64("", "");
    b64("f", "Zg==");
    b64("fo", "Zm8=");
    b64("foo", "Zm9v");
    b64("foob", "Zm9vYg==");
    b64("fooba", "Zm9vYmE=");
    b64("foobar", "Zm9vYmFy");
}
END_TEST

/* Encodes w x h x c pixels and reads them back with libpng's simplified API. */
static void roundtrip(int w, int h, int c) {
    uint8_t *px = malloc((size_t)w * h * c);
    for (int i = 0; i < w * h * c; i++) px[i] = (uint8_t)(i * 37 + 11);
    wf_jbuf out = {0};
    ck_assert_int_eq(wf_png_encode(px, w, h, c, &out), WF_OK);
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    ck_assert(png_image_begin_read_from_memory(&img, out.data, out.len));
    ck_assert_int_eq((int)img.width, w);
    ck_assert_int_eq((int)img.height, h);
    static const png_uint_32 fmt[] = {0, PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB, PNG_FORMAT_RGBA};
    img.format = fmt[c];
    uint8_t *back = malloc(PNG_IMAGE_SIZE(img));
    ck_assert(png_image_finish_read(&img, NULL, back, 0, NULL));
    ck_assert_int_eq(memcmp(back, px, (size_t)w * h * c), 0);
    free(back);
    free(px);
    wf_jbuf_free(&out);
}

START_TEST(png_roundtrip) {
    roundtrip(8, 8, 1);
    roundtrip(3, 5, 3);
    roundtrip(32, 32, 4);
    roundtrip(1, 1, 2);
}
END_TEST

START_TEST(png_bad_arguments) {
    uint8_t px[4] = {0};
    wf_jbuf out = {0};
    ck_assert_int_eq(wf_png_encode(px, 0, 1, 1, &out), WF_EINVAL);
    ck_assert_int_eq(wf_png_encode(px, 1, 1, 5, &out), WF_EINVAL);
    ck_assert_int_eq(wf_png_encode(NULL, 1, 1, 1, &out), WF_EINVAL);
    ck_assert_uint_eq(out.len, 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("server/png");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, base64_vectors);
    tcase_add_test(tc, png_roundtrip);
    tcase_add_test(tc, png_bad_arguments);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
