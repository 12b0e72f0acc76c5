/* Tests engine/unicode.c and the generated engine/unicode_data.c: category flags of
 * representative codepoints, llama.cpp's lenient UTF-8 decoding, strict validation (maximal
 * subparts), and the GPT-2 byte <-> unicode bijection. */
#include <check.h>
#include <string.h>

#include "check_main.h"
#include "engine/unicode.h"

START_TEST(test_flags) {
    static const struct { uint32_t cp; uint16_t want; } cases[] = {
        {'a', WF_UCF_LETTER}, {'Z', WF_UCF_LETTER}, {'5', WF_UCF_NUMBER}, {' ', WF_UCF_SEPARATOR | WF_UCF_WHITESPACE},
        {'\t', WF_UCF_CONTROL | WF_UCF_WHITESPACE}, {'\n', WF_UCF_CONTROL | WF_UCF_WHITESPACE},
        {0x1C, WF_UCF_CONTROL}, /* FS: not \s for llama.cpp (Python's str.isspace says yes) */
        {',', WF_UCF_PUNCTUATION}, {'$', WF_UCF_SYMBOL}, {'`', WF_UCF_SYMBOL}, {0x00, WF_UCF_CONTROL},
        {0x85, WF_UCF_CONTROL | WF_UCF_WHITESPACE}, {0xA0, WF_UCF_SEPARATOR | WF_UCF_WHITESPACE},
        {0xAD, WF_UCF_CONTROL}, {0xE9, WF_UCF_LETTER}, {0x0301, WF_UCF_MARK}, {0x0663, WF_UCF_NUMBER},
        {0x0915, WF_UCF_LETTER}, {0x093F, WF_UCF_MARK}, {0x4E2D, WF_UCF_LETTER}, {0x3000, WF_UCF_SEPARATOR | WF_UCF_WHITESPACE},
        {0x3001, WF_UCF_PUNCTUATION}, {0x200B, WF_UCF_CONTROL}, {0x200D, WF_UCF_CONTROL},
        {0x2028, WF_UCF_SEPARATOR | WF_UCF_WHITESPACE}, {0x2167, WF_UCF_NUMBER}, {0x00BD, WF_UCF_NUMBER},
        {0x1F600, WF_UCF_SYMBOL}, {0x1F3FD, WF_UCF_SYMBOL}, {0xFE0F, WF_UCF_MARK}, {0xFFFD, WF_UCF_SYMBOL},
        {0xD800, WF_UCF_CONTROL}, {0xE000, WF_UCF_CONTROL}, {0x0378, WF_UCF_UNDEFINED},
        {0x10FFFF, WF_UCF_UNDEFINED}, {0x110000, WF_UCF_UNDEFINED}, {0xFFFFFFFF, WF_UCF_UNDEFINED},
        {0x20000, WF_UCF_LETTER}, {0x1D518, WF_UCF_LETTER}, {0xFF21, WF_UCF_LETTER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(wf_unicode_flags(cases[i].cp) == cases[i].want, "U+%04X: 0x%x != 0x%x", cases[i].cp,
                      wf_unicode_flags(cases[i].cp), cases[i].want);
    /* ranges are sorted and never produce 0 */
    for (int i = 1; i < wf_unicode_n_ranges; i++)
        ck_assert_uint_lt(wf_unicode_range_start[i - 1], wf_unicode_range_start[i]);
    for (uint32_t cp = 0; cp < 0x110000; cp += 97)
        ck_assert_uint_ne(wf_unicode_flags(cp) & WF_UCF_CATEGORIES, 0);
    /* the Latin-1 fast path agrees with the range table */
    for (uint32_t cp = 0; cp < 256; cp++) {
        int lo = 0;
        while (lo + 1 < wf_unicode_n_ranges && wf_unicode_range_start[lo + 1] <= cp)
            lo++;
        ck_assert_uint_eq(wf_unicode_latin1_flags[cp], wf_unicode_range_flags[lo]);
    }
}
END_TEST

START_TEST(test_tolower) {
    ck_assert_uint_eq(wf_unicode_tolower_ascii('S'), 's');
    ck_assert_uint_eq(wf_unicode_tolower_ascii('s'), 's');
    ck_assert_uint_eq(wf_unicode_tolower_ascii('\''), '\'');
    ck_assert_uint_eq(wf_unicode_tolower_ascii(0x212A), 'k'); /* KELVIN SIGN */
    ck_assert_uint_eq(wf_unicode_tolower_ascii(0x130), 'i');
    ck_assert_uint_eq(wf_unicode_tolower_ascii(0xC9), 0xC9); /* É -> é is not ASCII */
}
END_TEST

static uint32_t dec(const char *s, size_t len, size_t *adv) { return wf_utf8_decode(s, len, adv); }

START_TEST(test_decode_lenient) {
    size_t adv;
    ck_assert_uint_eq(dec("A", 1, &adv), 'A');
    ck_assert_uint_eq(adv, 1);
    ck_assert_uint_eq(dec("\xC3\xA9", 2, &adv), 0xE9);
    ck_assert_uint_eq(adv, 2);
    ck_assert_uint_eq(dec("\xE4\xBD\xA0", 3, &adv), 0x4F60);
    ck_assert_uint_eq(dec("\xF0\x9F\x98\x80", 4, &adv), 0x1F600);
    ck_assert_uint_eq(adv, 4);
    /* broken sequences: one byte becomes U+FFFD */
    ck_assert_uint_eq(dec("\x80", 1, &adv), 0xFFFD);
    ck_assert_uint_eq(adv, 1);
    ck_assert_uint_eq(dec("\xC3", 1, &adv), 0xFFFD);
    ck_assert_uint_eq(dec("\xC3(", 2, &adv), 0xFFFD);
    ck_assert_uint_eq(adv, 1);
    ck_assert_uint_eq(dec("\xE2\x82", 2, &adv), 0xFFFD);
    ck_assert_uint_eq(dec("\xF8\x88\x80\x80", 4, &adv), 0xFFFD);
    ck_assert_uint_eq(dec("\xFF", 1, &adv), 0xFFFD);
    /* lenient like llama.cpp: overlongs and surrogates decode */
    ck_assert_uint_eq(dec("\xC0\x80", 2, &adv), 0);
    ck_assert_uint_eq(adv, 2);
    ck_assert_uint_eq(dec("\xED\xA0\x80", 3, &adv), 0xD800);
    /* beyond U+10FFFF: one bad byte (llama.cpp would throw) */
    ck_assert_uint_eq(dec("\xF7\xBF\xBF\xBF", 4, &adv), 0xFFFD);
    ck_assert_uint_eq(adv, 1);
}
END_TEST

START_TEST(test_encode_roundtrip) {
    char b[4];
    for (uint32_t cp = 0; cp < 0x110000; cp += (cp < 0x1000 ? 1 : 61)) {
        int n = wf_utf8_encode(cp, b);
        size_t adv;
        ck_assert_uint_eq(wf_utf8_decode(b, (size_t)n, &adv), cp);
        ck_assert_uint_eq(adv, (size_t)n);
        ck_assert_int_eq(n, wf_utf8_seq_len((uint8_t)b[0]));
    }
}
END_TEST

START_TEST(test_check_strict) {
    ck_assert_int_eq(wf_utf8_check("a", 1), 1);
    ck_assert_int_eq(wf_utf8_check("\xC3\xA9", 2), 2);
    ck_assert_int_eq(wf_utf8_check("\xC3", 1), 0);            /* incomplete */
    ck_assert_int_eq(wf_utf8_check("\xF0\x9F\x98", 3), 0);    /* incomplete */
    ck_assert_int_eq(wf_utf8_check("\xF0\x9F\x98\x80", 4), 4);
    ck_assert_int_eq(wf_utf8_check("\x80", 1), -1);
    ck_assert_int_eq(wf_utf8_check("\xC0\x80", 2), -1);       /* overlong lead */
    ck_assert_int_eq(wf_utf8_check("\xE0\x80\x80", 3), -1);   /* overlong */
    ck_assert_int_eq(wf_utf8_check("\xED\xA0\x80", 3), -1);   /* surrogate */
    ck_assert_int_eq(wf_utf8_check("\xF4\x90\x80\x80", 4), -1); /* > U+10FFFF */
    ck_assert_int_eq(wf_utf8_check("\xE4\xBD" "A", 3), -2);   /* maximal subpart of 2 */
    ck_assert_int_eq(wf_utf8_check("\xF0\x9F\x98" "A", 4), -3);
    ck_assert_uint_eq(wf_utf8_valid_prefix("ab\xC3\xA9\xE4", 5), 4);
    ck_assert_uint_eq(wf_utf8_valid_prefix("\xFF" "ab", 3), 0);
}
END_TEST

START_TEST(test_gpt2_bytes) {
    int seen[512] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = wf_gpt2_byte_to_cp((uint8_t)b);
        ck_assert_uint_lt(cp, 512);
        ck_assert_int_eq(seen[cp], 0);
        seen[cp] = 1;
        ck_assert_int_eq(wf_gpt2_cp_to_byte(cp), b);
    }
    ck_assert_uint_eq(wf_gpt2_byte_to_cp(' '), 0x120); /* "Ġ" */
    ck_assert_uint_eq(wf_gpt2_byte_to_cp('\n'), 0x10A); /* "Ċ" */
    ck_assert_uint_eq(wf_gpt2_byte_to_cp('a'), 'a');
    ck_assert_int_eq(wf_gpt2_cp_to_byte(0x20), -1);
    ck_assert_int_eq(wf_gpt2_cp_to_byte(0x144), -1);
    ck_assert_int_eq(wf_gpt2_cp_to_byte(0x4E2D), -1);
}
END_TEST

static Suite *unicode_suite(void) {
    Suite *s = suite_create("unicode");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_flags);
    tcase_add_test(tc, test_tolower);
    tcase_add_test(tc, test_decode_lenient);
    tcase_add_test(tc, test_encode_roundtrip);
    tcase_add_test(tc, test_check_strict);
    tcase_add_test(tc, test_gpt2_bytes);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(unicode_suite)
