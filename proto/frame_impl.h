/* Internals shared by the frame codecs (proto/frame*.c): a counting little-endian writer, a
 * bounds-checked reader with a sticky error that names the field, arena allocation, and the
 * building blocks of proto/frame.h's "payload building blocks" table. Not a public header. */
#ifndef WF_PROTO_FRAME_IMPL_H
#define WF_PROTO_FRAME_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto/frame.h"
#include "proto/task.h"

/* Writer: counts every byte but stores only what fits in cap, so one pass both encodes and
 * measures. The first invalid field sets st (WF_EINVAL) with a message. */
typedef struct wf__fw {
    uint8_t *p;
    size_t cap;
    size_t len;
    wf_status st;
    char *err;
    size_t errlen;
} wf__fw;

/* Reader over one payload. The first failure sets st and err; later reads return zeros. */
typedef struct wf__fr {
    const uint8_t *p;
    size_t len;
    size_t off;
    wf_status st;
    char *err;
    size_t errlen;
    wf_frame_arena *arena;
    bool newer;   /* the frame's version is newer than ours: trailing bytes are allowed */
    uint8_t major, minor; /* the frame's version: layouts that changed are read by it */
} wf__fr;

static inline void wf__fw_bytes(wf__fw *w, const void *src, size_t n) {
    if (n && w->len <= w->cap && n <= w->cap - w->len) memcpy(w->p + w->len, src, n);
    w->len += n;
}
static inline void wf__fw_u8(wf__fw *w, uint8_t v) { wf__fw_bytes(w, &v, 1); }
static inline void wf__fw_u16(wf__fw *w, uint16_t v) {
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    wf__fw_bytes(w, b, 2);
}
static inline void wf__fw_u32(wf__fw *w, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    wf__fw_bytes(w, b, 4);
}
static inline void wf__fw_u64(wf__fw *w, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    wf__fw_bytes(w, b, 8);
}
static inline void wf__fw_i32(wf__fw *w, int32_t v) { wf__fw_u32(w, (uint32_t)v); }
static inline void wf__fw_f32(wf__fw *w, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    wf__fw_u32(w, u);
}
static inline void wf__fw_bool(wf__fw *w, bool v) { wf__fw_u8(w, v ? 1 : 0); }

static inline uint32_t wf__get_u32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline uint64_t wf__get_u64(const uint8_t *b) {
    return (uint64_t)wf__get_u32(b) | (uint64_t)wf__get_u32(b + 4) << 32;
}

void wf__fw_fail(wf__fw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void wf__fr_fail(wf__fr *r, wf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True when n more bytes are there; else fails the reader ("truncated: <what> ..."). */
bool wf__fr_need(wf__fr *r, size_t n, const char *what);

static inline uint8_t wf__fr_u8(wf__fr *r, const char *what) {
    if (!wf__fr_need(r, 1, what)) return 0;
    return r->p[r->off++];
}
static inline uint16_t wf__fr_u16(wf__fr *r, const char *what) {
    if (!wf__fr_need(r, 2, what)) return 0;
    uint16_t v = (uint16_t)(r->p[r->off] | r->p[r->off + 1] << 8);
    r->off += 2;
    return v;
}
static inline uint32_t wf__fr_u32(wf__fr *r, const char *what) {
    if (!wf__fr_need(r, 4, what)) return 0;
    uint32_t v = wf__get_u32(r->p + r->off);
    r->off += 4;
    return v;
}
static inline uint64_t wf__fr_u64(wf__fr *r, const char *what) {
    if (!wf__fr_need(r, 8, what)) return 0;
    uint64_t v = wf__get_u64(r->p + r->off);
    r->off += 8;
    return v;
}
static inline int32_t wf__fr_i32(wf__fr *r, const char *what) {
    return (int32_t)wf__fr_u32(r, what);
}
static inline float wf__fr_f32(wf__fr *r, const char *what) {
    uint32_t u = wf__fr_u32(r, what);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

bool wf__fr_bool(wf__fr *r, const char *what);
/* An i32 that must lie in [lo, hi] (WF_ERANGE otherwise). */
int32_t wf__fr_i32_range(wf__fr *r, int32_t lo, int32_t hi, const char *what);
/* A u32 count <= max (WF_ERANGE) whose elements need at least min_elem bytes each, which must
 * be left in the payload (WF_EFORMAT): checked before anything is allocated for them. */
uint32_t wf__fr_count(wf__fr *r, uint32_t max, size_t min_elem, const char *what);
/* size bytes of the arena aligned to align, or NULL after failing the reader (WF_ERANGE). */
void *wf__fr_alloc(wf__fr *r, size_t size, size_t align, const char *what);
/* Starts reading f's payload after checking its type (WF_EPROTO on a mismatch). */
void wf__fr_init(wf__fr *r, const wf_frame_view *f, wf_frame_type type, wf_frame_arena *arena,
                 char *err, size_t errlen);
/* Ends a decode: refuses trailing bytes (unless the frame is newer) and returns the status. */
wf_status wf__fr_end(wf__fr *r);

/* Writer setup and completion: the payload goes after the header; wf__fw_finish writes the
 * header (length, CRCs) and returns WF_OK / WF_ERANGE (*len = size needed) / WF_EINVAL. */
void wf__fw_init(wf__fw *w, void *buf, size_t cap, char *err, size_t errlen);
wf_status wf__fw_finish(wf__fw *w, wf_frame_type type, size_t *len);

/* Building blocks (layouts in proto/frame.h). Strings: str<max> (max includes the NUL). */
void wf__fw_str(wf__fw *w, const char *s, size_t max, const char *what);
/* Into a fixed char array of max bytes. */
void wf__fr_str_fixed(wf__fr *r, char *out, size_t max, const char *what);
/* Into the arena; "" for a zero length. */
const char *wf__fr_str(wf__fr *r, size_t max, const char *what);
void wf__fw_blob(wf__fw *w, const uint8_t *b, uint32_t n, uint32_t max, const char *what);
const uint8_t *wf__fr_blob(wf__fr *r, uint32_t *n, uint32_t max, const char *what);
void wf__fw_i32s(wf__fw *w, const int32_t *v, int n, uint32_t max,
                 const char *what);
/* i32s of non-negative elements (token ids, block indices). Returns NULL for n == 0. */
const int32_t *wf__fr_i32s(wf__fr *r, int *n, uint32_t max, const char *what);

void wf__fw_group(wf__fw *w, const wf_group *g, const char *what);
void wf__fr_group(wf__fr *r, wf_group *g, const char *what);
void wf__fw_placement(wf__fw *w, const wf_placement *p, const char *what);
void wf__fr_placement(wf__fr *r, wf_placement *p, const char *what);
void wf__fw_artifact(wf__fw *w, const wf_artifact *a, const char *what);
void wf__fr_artifact(wf__fr *r, wf_artifact *a, const char *what);
void wf__fw_sampling(wf__fw *w, const wf_sampling_params *s);
void wf__fr_sampling(wf__fr *r, wf_sampling_params *s);
void wf__fw_gen_token(wf__fw *w, const wf_generated_token *t);
void wf__fr_gen_token(wf__fr *r, wf_generated_token *t);
/* A wf_status carried as i32: must be one of the enum's values. */
void wf__fw_status(wf__fw *w, wf_status st, const char *what);
wf_status wf__fr_status(wf__fr *r, const char *what);

/* CRC32C implementations behind wf_frame_crc32c (chosen once at run time). */
uint32_t wf__crc32c_scalar(uint32_t crc, const void *data, size_t n);
uint32_t wf__crc32c_avx2(uint32_t crc, const void *data, size_t n);

/* Wire sizes of the smallest encodings, for count checks. */
#define WF__GROUP_MIN 9u
#define WF__ARTIFACT_MIN (8u + 1u + 1u + 4u + WF__GROUP_MIN)

#endif
