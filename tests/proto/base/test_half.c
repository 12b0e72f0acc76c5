/* proto/base/half.c: half <-> float conversion against the F16C instructions (all 65536
 * halves, every rounding midpoint and its neighbours, random floats, NaN payloads) and
 * bfloat16 rounding. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <cpuid.h>
#include <immintrin.h>

#include "check_main.h"
#include "proto/base/half.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

__attribute__((target("f16c"))) static float hw_h2f(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) static uint16_t hw_f2h(float f) { return _cvtss_sh(f, 0); }

/* Asked once: CPUID traps to the hypervisor in a VM, and the checks call this millions of times. */
static bool have_f16c(void) {
    static int known = -1;
    if (known < 0) {
        unsigned a, b, c, d;
        known = __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1u);
    }
    return known;
}

START_TEST(test_half_to_float_all) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = wf_fp16_to_fp32((uint16_t)h);
        if (have_f16c()) ck_assert_uint_eq(fbits(f), fbits(hw_h2f((uint16_t)h)));
        /* exponent-all-ones halves are inf/NaN; everything else round-trips exactly */
        if ((h & 0x7c00) != 0x7c00 || (h & 0x3ff) == 0)
            ck_assert_uint_eq(wf_fp32_to_fp16(f), h);
    }
    ck_assert(wf_fp16_to_fp32(0x3c00) == 1.0f);
    ck_assert(wf_fp16_to_fp32(0x0001) == 0x1p-24f);
    ck_assert(wf_fp16_to_fp32(0x7bff) == 65504.0f);
}
END_TEST

static void check_f2h(float f) {
    uint16_t h = wf_fp32_to_fp16(f);
    if (have_f16c()) {
        uint16_t hw = hw_f2h(f);
        ck_assert_msg(h == hw, "f=%a bits %08x: got %04x, F16C %04x", (double)f, fbits(f), h, hw);
    }
}

START_TEST(test_float_to_half_midpoints) {
    /* for every pair of adjacent finite halves: the midpoint (a tie), one float ulp either
     * side of it, and both halves themselves */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
            float a = wf_fp16_to_fp32((uint16_t)(h | sign));
            float b = h + 1 == 0x7c00 ? (sign ? -65536.0f : 65536.0f)
                                      : wf_fp16_to_fp32((uint16_t)((h + 1) | sign));
            float mid = (float)(((double)a + (double)b) / 2);
            check_f2h(a);
            check_f2h(mid);
            check_f2h(nextafterf(mid, 0.0f));
            check_f2h(nextafterf(mid, INFINITY));
            check_f2h(nextafterf(mid, -INFINITY));
        }
    }
    /* overflow, infinities, float subnormals, zeros */
    const float special[] = {65504.0f, 65519.99f, 65520.0f, 1e10f, INFINITY, -INFINITY, 0.0f,
                             -0.0f, 1e-45f, -1e-40f, 0x1p-25f, 0x1.000002p-25f, 0x1p-26f,
                             FLT_MIN, 3e38f};
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++) check_f2h(special[i]);
    ck_assert_uint_eq(wf_fp32_to_fp16(65520.0f), 0x7c00);
    ck_assert_uint_eq(wf_fp32_to_fp16(0x1p-25f), 0x0000);           /* tie to even: zero */
    ck_assert_uint_eq(wf_fp32_to_fp16(0x1.000002p-25f), 0x0001);
}
END_TEST

START_TEST(test_float_to_half_random_and_nan) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 2000000; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        check_f2h(bitsf((uint32_t)s));
    }
    /* NaNs: quieted, top payload bits kept, as VCVTPS2PH */
    const uint32_t nans[] = {0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0x7fa02000, 0xff812345};
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
        uint16_t h = wf_fp32_to_fp16(bitsf(nans[i]));
        ck_assert_uint_eq(h & 0x7e00, 0x7e00);
        check_f2h(bitsf(nans[i]));
    }
}
END_TEST

START_TEST(test_bf16) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = wf_bf16_to_fp32((uint16_t)h);
        ck_assert_uint_eq(fbits(f), h << 16);
        if (!isnan(f)) ck_assert_uint_eq(wf_fp32_to_bf16(f), h);
    }
    ck_assert_uint_eq(wf_fp32_to_bf16(bitsf(0x3f808000)), 0x3f80); /* tie, even stays */
    ck_assert_uint_eq(wf_fp32_to_bf16(bitsf(0x3f818000)), 0x3f82); /* tie, odd rounds up */
    ck_assert_uint_eq(wf_fp32_to_bf16(bitsf(0x3f808001)), 0x3f81);
    ck_assert_uint_eq(wf_fp32_to_bf16(bitsf(0x7f800001)) & 0x7fc0, 0x7fc0); /* quiet NaN */
    ck_assert_uint_eq(wf_fp32_to_bf16(bitsf(0x7f7fffff)), 0x7f80);          /* rounds to inf */
}
END_TEST

static Suite *fp16_suite(void) {
    Suite *s = suite_create("fp16");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_half_to_float_all);
    tcase_add_test(tc, test_float_to_half_midpoints);
    tcase_add_test(tc, test_float_to_half_random_and_nan);
    tcase_add_test(tc, test_bf16);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(fp16_suite)
