/* Helpers shared by the frame tests (tests/proto/test_frame*.c): a seeded random generator,
 * resealing a frame around a cut or edited payload, the "every truncation fails" checks, and
 * writing/replaying fuzz seeds. Header-only: each test executable includes it once. */
#ifndef WF_TESTS_FRAME_TESTUTIL_H
#define WF_TESTS_FRAME_TESTUTIL_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proto/frame.h"

typedef struct trng {
    uint64_t s;
} trng;

static inline uint64_t trng_u64(trng *r) {
    uint64_t x = r->s += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
/* In [lo, hi]. */
static inline int trng_int(trng *r, int lo, int hi) {
    return lo + (int)(trng_u64(r) % (uint64_t)(hi - lo + 1));
}
static inline float trng_float(trng *r) { return (float)(trng_u64(r) % 20001) / 1000.0f - 10.0f; }
static inline void trng_str(trng *r, char *out, int maxlen) {
    int n = trng_int(r, 0, maxlen);
    for (int i = 0; i < n; i++) out[i] = (char)trng_int(r, 'a', 'z');
    out[n] = '\0';
}

/* Rewrites the header of frame buf so that its payload is the first plen bytes (checksums
 * recomputed): the envelope is valid, only the payload is cut. */
static inline void reseal(uint8_t *buf, uint32_t plen) {
    wf_frame_header h = {.major = buf[4], .minor = buf[5],
                         .type = (uint16_t)(buf[6] | buf[7] << 8), .payload_len = plen};
    h.payload_crc = wf_frame_crc32c(0, buf + WF_FRAME_HEADER_SIZE, plen);
    wf_frame_write_header(&h, buf);
}

typedef wf_status (*decode_fn)(const wf_frame_view *f, wf_frame_arena *arena, char *err,
                               size_t errlen);

/* A valid frame must decode; every shorter byte string must be refused by wf_frame_open; and
 * every cut of its payload, resealed so the envelope is valid, must be refused by the decoder
 * with WF_EFORMAT or WF_ERANGE/WF_EPROTO and a message. */
static inline void check_truncations(const uint8_t *frame, size_t len, decode_fn decode) {
    static uint8_t arena_mem[1 << 20];
    wf_frame_arena arena;
    char err[256];
    wf_frame_view f;
    ck_assert_int_eq(wf_frame_open(frame, len, 1 << 24, &f, err, sizeof err), WF_OK);
    wf_frame_arena_init(&arena, arena_mem, sizeof arena_mem);
    ck_assert_msg(decode(&f, &arena, err, sizeof err) == WF_OK, "valid frame refused: %s", err);
    uint8_t *copy = malloc(len);
    ck_assert_ptr_nonnull(copy);
    for (size_t cut = 0; cut < len; cut++) {
        memcpy(copy, frame, cut);
        err[0] = '\0';
        wf_status st = wf_frame_open(copy, cut, 1 << 24, &f, err, sizeof err);
        ck_assert_msg(st == WF_EFORMAT, "prefix of %zu/%zu bytes: status %d", cut, len, st);
        ck_assert_msg(err[0] != '\0', "prefix of %zu bytes: no message", cut);
    }
    for (size_t plen = 0; plen + WF_FRAME_HEADER_SIZE < len; plen++) {
        memcpy(copy, frame, len);
        reseal(copy, (uint32_t)plen);
        ck_assert_int_eq(wf_frame_open(copy, WF_FRAME_HEADER_SIZE + plen, 1 << 24, &f, err,
                                       sizeof err),
                         WF_OK);
        wf_frame_arena_init(&arena, arena_mem, sizeof arena_mem);
        err[0] = '\0';
        wf_status st = decode(&f, &arena, err, sizeof err);
        ck_assert_msg(st == WF_EFORMAT || st == WF_ERANGE || st == WF_EPROTO,
                      "payload cut to %zu of %zu bytes: status %d", plen,
                      len - WF_FRAME_HEADER_SIZE, st);
        ck_assert_msg(err[0] != '\0', "payload cut to %zu bytes: no message", plen);
    }
    free(copy);
}

/* With WEFT_FRAME_CORPUS_WRITE=1 in the environment, writes a seed into the source tree's
 * tests/fuzz/corpus/<family>/<name> (regenerate after a format change). */
static inline void maybe_write_seed(const char *family, const char *name, const uint8_t *frame,
                                    size_t len) {
    const char *w = getenv("WEFT_FRAME_CORPUS_WRITE");
    if (!w || strcmp(w, "1") != 0) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/%s", WEFT_SOURCE_DIR, family);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/%s/%s", WEFT_SOURCE_DIR, family, name);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(frame, 1, len, f), len);
    fclose(f);
}

/* Every committed seed of tests/fuzz/corpus/<family>/ must open and decode (seeds are valid
 * frames: a format change that forgets to regenerate them fails here). Returns the count. */
static inline int check_committed_seeds(const char *family, decode_fn decode) {
    static uint8_t arena_mem[1 << 20];
    static uint8_t buf[1 << 20];
    char dir[1024], path[1300], err[256];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", WEFT_SOURCE_DIR, family);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        wf_frame_view v;
        wf_frame_arena arena;
        wf_frame_arena_init(&arena, arena_mem, sizeof arena_mem);
        ck_assert_msg(wf_frame_open(buf, len, 1 << 20, &v, err, sizeof err) == WF_OK, "%s: %s",
                      path, err);
        ck_assert_uint_eq(v.frame_len, len);
        ck_assert_msg(decode(&v, &arena, err, sizeof err) == WF_OK, "%s: %s", path, err);
        n++;
    }
    closedir(d);
    return n;
}

#endif
