/* libFuzzer target for the 'size' parser of /v1/images/generations (wf_image_size_parse,
 * sched/images.h, called by server/images.c) on any bytes. The first byte picks a model
 * geometry (native only, digits-like 8x8 by 2 up to 32x32, fmnist-like 32x32 by 8 up to
 * 128x128, a wide 16x8 by 4, a large 1024x1024 by 16); the rest, cut at its first NUL, is the
 * string. An accepted size must be one the geometry can make and, unless "auto", print back
 * to exactly the input ("%dx%d": no sign, space, leading zero or trailing byte slips through);
 * a refused one leaves the native size in *w, *h.
 * weft-fuzz: covers=sched/images.c */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/images.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const wf_image_geometry geos[] = {
    {.width = 8, .height = 8, .size_multiple = 0, .max_pixels = 64},
    {.width = 8, .height = 8, .size_multiple = 2, .max_pixels = 32 * 32},
    {.width = 32, .height = 32, .size_multiple = 8, .max_pixels = 128 * 128},
    {.width = 16, .height = 8, .size_multiple = 4, .max_pixels = 16 * 8 * 4},
    {.width = 1024, .height = 1024, .size_multiple = 16, .max_pixels = 2048L * 2048},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const wf_image_geometry *g = &geos[data[0] % (sizeof geos / sizeof geos[0])];
    char s[64];
    size_t n = size - 1 < sizeof s - 1 ? size - 1 : sizeof s - 1;
    memcpy(s, data + 1, n);
    s[n] = '\0';
    int w = -1, h = -1;
    bool ok = wf_image_size_parse(g, s, &w, &h);
    if (!ok) {
        if (w != g->width || h != g->height) abort();
        return 0;
    }
    if (strcmp(s, "auto") == 0) {
        if (w != g->width || h != g->height) abort();
        return 0;
    }
    char back[32];
    snprintf(back, sizeof back, "%dx%d", w, h);
    if (strcmp(back, s) != 0) abort();
    if (w == g->width && h == g->height) return 0;
    int k = g->size_multiple;
    if (k < 1 || w < k || h < k || w % k || h % k || (long)w * h > g->max_pixels) abort();
    return 0;
}
