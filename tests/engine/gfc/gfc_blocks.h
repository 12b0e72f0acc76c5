/* For the engine/gfc tests: the bytes a member sends (a hash of the call, the source, the
 * destination and the index, so that any byte in the wrong place shows), filling and checking
 * the blocks of an all-to-all(-v) layout, and the group of world ranks 0..n-1.
 *
 *     wf_group g = wt_group_first(2);
 *     wt_blocks_fill(buf, 2, cnt, dsp, call, me);           // block j: what me sends j
 *     st = wf_gfc_alltoallv(w, &g, buf, cnt, dsp, buf, cnt, dsp);
 *     if (wt_blocks_check(buf, 2, cnt, dsp, call, me)) return 1;  // block j: what j sent me
 *
 * Failures are reported on stderr (the children of world_launch.h do not use Check). */
#ifndef WF_TESTS_GFC_BLOCKS_H
#define WF_TESTS_GFC_BLOCKS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/gfc/gfc.h"

static inline uint32_t wt_mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static inline uint32_t wt_h4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    return wt_mix(a * 0x9E3779B1u ^ wt_mix(b * 0x85EBCA77u ^ wt_mix(c * 0xC2B2AE3Du ^ wt_mix(d))));
}

/* Byte i of what member src sends member dst in call `call`. */
static inline uint8_t wt_gen_byte(int call, int src, int dst, size_t i) {
    return (uint8_t)wt_h4((uint32_t)call, (uint32_t)src, (uint32_t)dst, (uint32_t)i);
}

/* Block j (cnt[j] bytes at dsp[j]) := what member me sends member j in call `call`. */
static inline void wt_blocks_fill(uint8_t *buf, int n, const size_t *cnt, const size_t *dsp,
                                  int call, int me) {
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < cnt[j]; i++) buf[dsp[j] + i] = wt_gen_byte(call, me, j, i);
}

/* 0 if block j holds what member j sends member me in call `call`, for every j; else 1, with
 * the first wrong byte on stderr. */
static inline int wt_blocks_check(const uint8_t *buf, int n, const size_t *cnt, const size_t *dsp,
                                  int call, int me) {
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < cnt[j]; i++)
            if (buf[dsp[j] + i] != wt_gen_byte(call, j, me, i)) {
                fprintf(stderr, "call %d, member %d: block from member %d, byte %zu of %zu wrong\n",
                        call, me, j, i, cnt[j]);
                return 1;
            }
    return 0;
}

/* Equal blocks of len bytes, packed: cnt[j] = len, dsp[j] = j * len, for j < n. */
static inline void wt_blocks_even(size_t *cnt, size_t *dsp, int n, size_t len) {
    for (int j = 0; j < n; j++) cnt[j] = len, dsp[j] = (size_t)j * len;
}

/* The group of world ranks 0..n-1 in that order. */
static inline wf_group wt_group_first(int n) {
    int ranks[WF_MAX_GROUP_RANKS];
    for (int i = 0; i < n; i++) ranks[i] = i;
    wf_group g;
    wf_gfc_group_init(&g, ranks, n);
    return g;
}

#endif
