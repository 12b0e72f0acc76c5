/* UTF-8 and codepoint-category helpers for the tokenizer. The decoding rules deliberately
 * follow llama.cpp (lenient: overlongs and surrogates pass, broken sequences become
 * U+FFFD one byte at a time) because token ids must match it byte for byte. */
#include "engine/unicode.h"

uint16_t wf_unicode_flags(uint32_t cp) {
    if (cp < 256)
        return wf_unicode_latin1_flags[cp];
    if (cp >= 0x110000)
        return WF_UCF_UNDEFINED;
    /* last range whose start is <= cp */
    int lo = 0, hi = wf_unicode_n_ranges - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (wf_unicode_range_start[mid] <= cp)
            lo = mid;
        else
            hi = mid - 1;
    }
    return wf_unicode_range_flags[lo];
}

uint32_t wf_unicode_tolower_ascii(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    for (int i = 0; i < wf_unicode_n_lower_ascii; i++)
        if (wf_unicode_lower_ascii[i][0] == cp)
            return wf_unicode_lower_ascii[i][1];
    return cp;
}

int wf_utf8_seq_len(uint8_t lead) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

static inline int is_cont(uint8_t c) { return (c & 0xC0) == 0x80; }

uint32_t wf_utf8_decode(const char *str, size_t len, size_t *adv) {
    const uint8_t *s = (const uint8_t *)str;
    uint8_t c = s[0];
    *adv = 1;
    if (!(c & 0x80))
        return c;
    if (!(c & 0x40))
        return 0xFFFD;
    if (!(c & 0x20)) {
        if (len < 2 || !is_cont(s[1]))
            return 0xFFFD;
        *adv = 2;
        return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (!(c & 0x10)) {
        if (len < 3 || !is_cont(s[1]) || !is_cont(s[2]))
            return 0xFFFD;
        *adv = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    if (!(c & 0x08)) {
        if (len < 4 || !is_cont(s[1]) || !is_cont(s[2]) || !is_cont(s[3]))
            return 0xFFFD;
        uint32_t cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                      ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if (cp > 0x10FFFF)
            return 0xFFFD; /* llama.cpp throws here; we degrade to one bad byte */
        *adv = 4;
        return cp;
    }
    return 0xFFFD;
}

int wf_utf8_encode(uint32_t cp, char out[4]) {
    if (cp <= 0x7F) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp <= 0x7FF) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp <= 0xFFFF) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int wf_utf8_check(const char *str, size_t len) {
    const uint8_t *s = (const uint8_t *)str;
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    int n;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* no overlongs */
        if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else {
        return -1;
    }
    for (int i = 1; i < n; i++) {
        if ((size_t)i >= len)
            return 0;
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : !is_cont(b))
            return -i; /* the maximal subpart s[0..i) is replaced as one unit */
    }
    return n;
}

size_t wf_utf8_valid_prefix(const char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        int n = wf_utf8_check(s + i, len - i);
        if (n <= 0)
            break;
        i += (size_t)n;
    }
    return i;
}

/* Bytes that print as themselves in GPT-2's mapping: '!'..'~', U+00A1..U+00AC,
 * U+00AE..U+00FF. The other 68 bytes map, in byte order, to U+0100, U+0101, ... */
static inline int gpt2_is_direct(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t wf_gpt2_byte_to_cp(uint8_t b) {
    if (gpt2_is_direct(b))
        return b;
    /* count the non-direct bytes below b */
    unsigned n;
    if (b <= 0x20)
        n = b;                 /* 0x00..0x20 are the first 33 */
    else if (b <= 0xA0)
        n = 33 + (b - 0x7F);   /* 0x7F..0xA0 follow */
    else
        n = 33 + 34;           /* 0xAD is the last one */
    return 256 + n;
}

int wf_gpt2_cp_to_byte(uint32_t cp) {
    if (cp < 256)
        return gpt2_is_direct(cp) ? (int)cp : -1;
    if (cp < 256 + 33)
        return (int)(cp - 256);
    if (cp < 256 + 67)
        return (int)(0x7F + (cp - 256 - 33));
    if (cp == 256 + 67)
        return 0xAD;
    return -1;
}
