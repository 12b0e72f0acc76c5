/* Unicode helpers for the tokenizer: codepoint category flags (generated tables in
 * unicode_data.c, same layout as llama.cpp's unicode_cpt_flags), UTF-8 decoding with
 * llama.cpp's error rules, and the GPT-2 byte <-> unicode mapping.
 *
 *     size_t adv;
 *     uint32_t cp = wf_utf8_decode(s, len, &adv);   // invalid -> 0xFFFD, adv = 1
 *     if (wf_unicode_flags(cp) & WF_UCF_LETTER) ...
 *
 * All functions are pure, thread-safe and allocation-free. */
#ifndef WF_ENGINE_UNICODE_H
#define WF_ENGINE_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum {
    WF_UCF_UNDEFINED = 0x0001,   /* Cn, and codepoints beyond U+10FFFF */
    WF_UCF_NUMBER = 0x0002,      /* \p{N} */
    WF_UCF_LETTER = 0x0004,      /* \p{L} */
    WF_UCF_SEPARATOR = 0x0008,   /* \p{Z} */
    WF_UCF_MARK = 0x0010,        /* \p{M} */
    WF_UCF_PUNCTUATION = 0x0020, /* \p{P} */
    WF_UCF_SYMBOL = 0x0040,      /* \p{S} */
    WF_UCF_CONTROL = 0x0080,     /* \p{C} except Cn */
    WF_UCF_CATEGORIES = 0x00FF,
    WF_UCF_WHITESPACE = 0x0100, /* \s as llama.cpp defines it */
};

/* Generated tables (engine/unicode_data.c, by scripts/gen_unicode_data.py). */
extern const char wf_unicode_data_version[];
extern const uint16_t wf_unicode_latin1_flags[256];
extern const uint32_t wf_unicode_range_start[];
extern const uint16_t wf_unicode_range_flags[];
extern const int wf_unicode_n_ranges;
extern const uint32_t wf_unicode_lower_ascii[][2];
extern const int wf_unicode_n_lower_ascii;

/* Category flags of cp (WF_UCF_*). Never 0: unknown codepoints are WF_UCF_UNDEFINED. */
uint16_t wf_unicode_flags(uint32_t cp);

/* cp lowercased when its simple lowercase is ASCII ('A' -> 'a', U+212A KELVIN -> 'k');
 * otherwise cp unchanged. Enough for the case-insensitive contraction rules. */
uint32_t wf_unicode_tolower_ascii(uint32_t cp);

/* Length of the UTF-8 sequence a lead byte announces (1 for continuation/invalid bytes),
 * as llama.cpp's unicode_len_utf8. */
int wf_utf8_seq_len(uint8_t lead);

/* Decodes one codepoint at s[0..len) (len >= 1) as llama.cpp does: a truncated or
 * malformed sequence (bad lead, missing continuation bytes) yields 0xFFFD and *adv = 1.
 * Overlong forms and surrogates are accepted (as llama.cpp). Codepoints above U+10FFFF,
 * on which llama.cpp throws, also yield 0xFFFD with *adv = 1. */
uint32_t wf_utf8_decode(const char *s, size_t len, size_t *adv);

/* Encodes cp (<= 0x10FFFF) into out; returns the number of bytes (1..4). */
int wf_utf8_encode(uint32_t cp, char out[4]);

/* Length of the longest prefix of s[0..len) that is complete, valid UTF-8 in the strict
 * sense (no overlongs, no surrogates, <= U+10FFFF), stopping before an incomplete or
 * invalid sequence. */
size_t wf_utf8_valid_prefix(const char *s, size_t len);

/* Strict validity of one sequence at s[0..len): returns its length (1..4), 0 if it is a
 * valid but incomplete prefix (more bytes could complete it), or -k if it is invalid: the
 * first k bytes (the "maximal subpart", k >= 1) are replaced by one U+FFFD, as Python's
 * errors="replace" and the Unicode recommendation do. */
int wf_utf8_check(const char *s, size_t len);

/* GPT-2 byte-level mapping: byte b <-> codepoint wf_gpt2_byte_to_cp(b). */
uint32_t wf_gpt2_byte_to_cp(uint8_t b);
/* Inverse: the byte for cp, or -1 if cp is not one of the 256 mapped codepoints. */
int wf_gpt2_cp_to_byte(uint32_t cp);

#endif
