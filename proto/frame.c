/* The frame envelope (header, CRC32C, open), version negotiation, the decode arena, the
 * streaming reader, and the payload building blocks every frame family shares
 * (proto/frame_impl.h). */
#include "proto/frame.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto/frame_impl.h"

/* ---- CRC32C: slicing-by-8 tables built once (reflected polynomial 0x82f63b78); the SSE4.2
 * instruction (proto/crc32c_avx2.c) when the CPU has it ------------------------------------ */

static uint32_t crc_table[8][256];

static void crc_init_once(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static uint32_t (*crc_impl)(uint32_t, const void *, size_t);

static void crc_choose_once(void) {
    crc_init_once();
    crc_impl = wf__crc32c_scalar;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("sse4.2"))
        crc_impl = wf__crc32c_avx2;
#endif
}

uint32_t wf_frame_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_choose_once);
    return crc_impl(crc, data, n);
}

uint32_t wf__crc32c_scalar(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_choose_once);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo = c ^ wf__get_u32(p), hi = wf__get_u32(p + 4);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
            crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

/* ---- envelope ---------------------------------------------------------------------------------- */

const char *wf_frame_type_str(unsigned type) {
    switch (type) {
    case WF_FRAME_HELLO: return "hello";
    case WF_FRAME_WELCOME: return "welcome";
    case WF_FRAME_REJECT: return "reject";
    case WF_FRAME_WORLD_TABLE: return "world_table";
    case WF_FRAME_HEARTBEAT: return "heartbeat";
    case WF_FRAME_CANCEL: return "cancel";
    case WF_FRAME_DRAIN: return "drain";
    case WF_FRAME_SHUTDOWN: return "shutdown";
    case WF_FRAME_ERROR: return "error";
    case WF_FRAME_WORKER_INFO: return "worker_info";
    case WF_FRAME_VMODEL: return "vmodel";
    case WF_FRAME_VMODEL_ACK: return "vmodel_ack";
    case WF_FRAME_TASK_DISPATCH: return "task_dispatch";
    case WF_FRAME_TASK_EVENT: return "task_event";
    case WF_FRAME_BATCH_DONE: return "batch_done";
    case WF_FRAME_ARTIFACT_TRANSFER: return "artifact_transfer";
    case WF_FRAME_TRANSFER_DONE: return "transfer_done";
    }
    return "unknown";
}

bool wf_frame_type_known(unsigned type) { return strcmp(wf_frame_type_str(type), "unknown") != 0; }

static void put_u32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}

void wf_frame_write_header(const wf_frame_header *hdr, uint8_t out[WF_FRAME_HEADER_SIZE]) {
    memcpy(out, WF_FRAME_MAGIC, 4);
    out[4] = hdr->major;
    out[5] = hdr->minor;
    out[6] = (uint8_t)hdr->type;
    out[7] = (uint8_t)(hdr->type >> 8);
    put_u32(out + 8, hdr->flags);
    put_u32(out + 12, hdr->payload_len);
    put_u32(out + 16, hdr->payload_crc);
    put_u32(out + 20, wf_frame_crc32c(0, out, 20));
}

wf_status wf_frame_decode_header(const void *data, size_t len, size_t max_payload,
                                 wf_frame_header *out, char *err, size_t errlen) {
    const uint8_t *b = data;
    if (len < WF_FRAME_HEADER_SIZE)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "truncated frame header: %zu of %d bytes", len,
                                WF_FRAME_HEADER_SIZE);
    if (memcmp(b, WF_FRAME_MAGIC, 4) != 0)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "bad frame magic %02x %02x %02x %02x (want \"WFRM\")", b[0], b[1],
                                b[2], b[3]);
    uint32_t hcrc = wf__get_u32(b + 20), want = wf_frame_crc32c(0, b, 20);
    if (hcrc != want)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "frame header checksum mismatch (0x%08x, computed 0x%08x)", hcrc,
                                want);
    wf_frame_header h = {.major = b[4], .minor = b[5], .type = (uint16_t)(b[6] | b[7] << 8),
                         .flags = wf__get_u32(b + 8), .payload_len = wf__get_u32(b + 12),
                         .payload_crc = wf__get_u32(b + 16)};
    /* HELLO and REJECT keep their layout in every version, so a peer speaking another major can
     * still be heard and told why it is refused. */
    bool frozen = h.type == WF_FRAME_HELLO || h.type == WF_FRAME_REJECT;
    if (h.major != WF_FRAME_VERSION_MAJOR && !frozen)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "%s frame of version %u.%u: this build speaks version %d.%d",
                                wf_frame_type_str(h.type), h.major, h.minor,
                                WF_FRAME_VERSION_MAJOR, WF_FRAME_VERSION_MINOR);
    if (h.flags != 0)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED, "unknown frame flags 0x%x",
                                h.flags);
    if (!wf_frame_type_known(h.type))
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED, "unknown frame type %u", h.type);
    if (h.payload_len > max_payload)
        return wf_status_errorf(err, errlen, WF_ERANGE,
                                "%s frame payload of %u bytes exceeds the limit of %zu",
                                wf_frame_type_str(h.type), h.payload_len, max_payload);
    *out = h;
    return WF_OK;
}

wf_status wf_frame_open(const void *data, size_t len, size_t max_payload, wf_frame_view *out,
                        char *err, size_t errlen) {
    wf_frame_header h;
    wf_status st = wf_frame_decode_header(data, len, max_payload, &h, err, errlen);
    if (st != WF_OK) return st;
    const uint8_t *payload = (const uint8_t *)data + WF_FRAME_HEADER_SIZE;
    if (len - WF_FRAME_HEADER_SIZE < h.payload_len)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "truncated %s frame: payload of %u bytes, %zu present",
                                wf_frame_type_str(h.type), h.payload_len,
                                len - WF_FRAME_HEADER_SIZE);
    uint32_t crc = wf_frame_crc32c(0, payload, h.payload_len);
    if (crc != h.payload_crc)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "%s frame payload checksum mismatch (0x%08x, computed 0x%08x)",
                                wf_frame_type_str(h.type), h.payload_crc, crc);
    out->hdr = h;
    out->payload = payload;
    out->frame_len = WF_FRAME_HEADER_SIZE + (size_t)h.payload_len;
    return WF_OK;
}

wf_status wf_frame_negotiate_version(uint16_t a_min, uint16_t a_max, uint16_t b_min,
                                     uint16_t b_max, uint16_t *out, char *err, size_t errlen) {
    uint16_t lo = a_min > b_min ? a_min : b_min, hi = a_max < b_max ? a_max : b_max;
    if (a_min > a_max || b_min > b_max || lo > hi)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "no common frame version: %u.%u..%u.%u vs %u.%u..%u.%u",
                                a_min >> 8, a_min & 0xff, a_max >> 8, a_max & 0xff, b_min >> 8,
                                b_min & 0xff, b_max >> 8, b_max & 0xff);
    *out = hi;
    return WF_OK;
}

/* ---- arena ------------------------------------------------------------------------------------ */

void wf_frame_arena_init(wf_frame_arena *arena, void *mem, size_t cap) {
    arena->base = mem;
    arena->cap = mem ? cap : 0;
    arena->used = 0;
}

void wf_frame_arena_reset(wf_frame_arena *arena) { arena->used = 0; }

/* ---- streaming reader ------------------------------------------------------------------------- */

wf_status wf_frame_stream_init(wf_frame_stream *s, void *buf, size_t cap, size_t max_payload) {
    memset(s, 0, sizeof *s);
    if (!buf || max_payload > WF_FRAME_PAYLOAD_MAX || cap < WF_FRAME_HEADER_SIZE ||
        cap - WF_FRAME_HEADER_SIZE < max_payload)
        return WF_EINVAL;
    s->buf = buf;
    s->cap = cap;
    s->max_payload = max_payload;
    return WF_OK;
}

static void stream_drop_consumed(wf_frame_stream *s) {
    if (!s->consumed) return;
    memmove(s->buf, s->buf + s->consumed, s->len - s->consumed);
    s->len -= s->consumed;
    s->consumed = 0;
    s->header_ok = false;
}

wf_status wf_frame_stream_feed(wf_frame_stream *s, const void *data, size_t n, size_t *used) {
    *used = 0;
    if (s->error != WF_OK) return s->error;
    stream_drop_consumed(s);
    size_t take = n < s->cap - s->len ? n : s->cap - s->len;
    if (take) memcpy(s->buf + s->len, data, take);
    s->len += take;
    *used = take;
    return WF_OK;
}

wf_status wf_frame_stream_next(wf_frame_stream *s, wf_frame_view *out, char *err,
                               size_t errlen) {
    if (s->error != WF_OK)
        return wf_status_errorf(err, errlen, s->error, "frame stream is corrupt (%s)",
                                wf_status_str(s->error));
    stream_drop_consumed(s);
    if (s->len < WF_FRAME_HEADER_SIZE) return WF_IN_PROGRESS;
    wf_frame_header h;
    if (!s->header_ok) {
        wf_status st = wf_frame_decode_header(s->buf, s->len, s->max_payload, &h, err, errlen);
        if (st != WF_OK) return s->error = st;
        s->header_ok = true;
    }
    uint32_t plen = wf__get_u32(s->buf + 12);
    if (s->len - WF_FRAME_HEADER_SIZE < plen) return WF_IN_PROGRESS;
    wf_status st = wf_frame_open(s->buf, s->len, s->max_payload, out, err, errlen);
    if (st != WF_OK) return s->error = st;
    s->consumed = out->frame_len;
    return WF_OK;
}

/* ---- writer and reader helpers ------------------------------------------------------------------ */

void wf__fw_fail(wf__fw *w, const char *fmt, ...) {
    if (w->st != WF_OK) return;
    w->st = WF_EINVAL;
    va_list ap;
    va_start(ap, fmt);
    wf_verrorf(w->err, w->errlen, fmt, ap);
    va_end(ap);
}

void wf__fr_fail(wf__fr *r, wf_status st, const char *fmt, ...) {
    if (r->st != WF_OK) return;
    r->st = st;
    va_list ap;
    va_start(ap, fmt);
    wf_verrorf(r->err, r->errlen, fmt, ap);
    va_end(ap);
    r->off = r->len; /* later reads see nothing */
}

bool wf__fr_need(wf__fr *r, size_t n, const char *what) {
    if (r->st != WF_OK) return false;
    if (n <= r->len - r->off) return true;
    wf__fr_fail(r, WF_EFORMAT, "truncated payload: %s needs %zu bytes at offset %zu, %zu left",
                what, n, r->off, r->len - r->off);
    return false;
}

bool wf__fr_bool(wf__fr *r, const char *what) {
    uint8_t v = wf__fr_u8(r, what);
    if (v > 1) wf__fr_fail(r, WF_EPROTO, "%s: boolean byte %u (want 0 or 1)", what, v);
    return v == 1;
}

int32_t wf__fr_i32_range(wf__fr *r, int32_t lo, int32_t hi, const char *what) {
    int32_t v = wf__fr_i32(r, what);
    if (r->st == WF_OK && (v < lo || v > hi)) {
        wf__fr_fail(r, WF_ERANGE, "%s = %d is outside [%d, %d]", what, v, lo, hi);
        return lo;
    }
    return v;
}

uint32_t wf__fr_count(wf__fr *r, uint32_t max, size_t min_elem, const char *what) {
    uint32_t n = wf__fr_u32(r, what);
    if (r->st != WF_OK) return 0;
    if (n > max) {
        wf__fr_fail(r, WF_ERANGE, "%s = %u exceeds the maximum %u", what, n, max);
        return 0;
    }
    if (min_elem && n > (r->len - r->off) / min_elem) {
        wf__fr_fail(r, WF_EFORMAT,
                    "%s = %u needs at least %zu bytes but %zu are left in the payload", what, n,
                    (size_t)n * min_elem, r->len - r->off);
        return 0;
    }
    return n;
}

void *wf__fr_alloc(wf__fr *r, size_t size, size_t align, const char *what) {
    if (r->st != WF_OK) return NULL;
    wf_frame_arena *a = r->arena;
    if (!a) {
        wf__fr_fail(r, WF_ERANGE, "%s: no arena to decode into", what);
        return NULL;
    }
    uintptr_t base = (uintptr_t)a->base;
    size_t start = (size_t)(((base + a->used + align - 1) & ~(uintptr_t)(align - 1)) - base);
    if (start > a->cap || size > a->cap - start) {
        wf__fr_fail(r, WF_ERANGE, "decode arena exhausted: %s needs %zu bytes, %zu of %zu left",
                    what, size, start > a->cap ? 0 : a->cap - start, a->cap);
        return NULL;
    }
    a->used = start + size;
    return a->base + start;
}

void wf__fr_init(wf__fr *r, const wf_frame_view *f, wf_frame_type type, wf_frame_arena *arena,
                 char *err, size_t errlen) {
    *r = (wf__fr){.p = f->payload, .len = f->hdr.payload_len, .err = err, .errlen = errlen,
                  .arena = arena, .major = f->hdr.major, .minor = f->hdr.minor,
                  .newer = f->hdr.major > WF_FRAME_VERSION_MAJOR ||
                           (f->hdr.major == WF_FRAME_VERSION_MAJOR &&
                            f->hdr.minor > WF_FRAME_VERSION_MINOR)};
    if (f->hdr.type != type) {
        wf__fr_fail(r, WF_EPROTO, "expected a %s frame, got %s (type %u)", wf_frame_type_str(type),
                    wf_frame_type_str(f->hdr.type), f->hdr.type);
    }
}

wf_status wf__fr_end(wf__fr *r) {
    if (r->st == WF_OK && r->off != r->len && !r->newer)
        wf__fr_fail(r, WF_EFORMAT, "%zu trailing bytes after the payload's last field",
                    r->len - r->off);
    return r->st;
}

void wf__fw_init(wf__fw *w, void *buf, size_t cap, char *err, size_t errlen) {
    *w = (wf__fw){.p = buf, .cap = buf ? cap : 0, .len = WF_FRAME_HEADER_SIZE, .err = err,
                  .errlen = errlen};
}

wf_status wf__fw_finish(wf__fw *w, wf_frame_type type, size_t *len) {
    *len = w->len;
    if (w->st != WF_OK) return w->st;
    if (w->len - WF_FRAME_HEADER_SIZE > WF_FRAME_PAYLOAD_MAX) {
        wf__fw_fail(w, "%s payload of %zu bytes exceeds the u32 length field",
                    wf_frame_type_str(type), w->len - WF_FRAME_HEADER_SIZE);
        return w->st;
    }
    if (w->len > w->cap)
        return wf_status_errorf(w->err, w->errlen, WF_ERANGE,
                                "%s frame needs %zu bytes, buffer has %zu",
                                wf_frame_type_str(type), w->len, w->cap);
    wf_frame_header h = {.major = WF_FRAME_VERSION_MAJOR, .minor = WF_FRAME_VERSION_MINOR,
                         .type = (uint16_t)type,
                         .payload_len = (uint32_t)(w->len - WF_FRAME_HEADER_SIZE)};
    h.payload_crc = wf_frame_crc32c(0, w->p + WF_FRAME_HEADER_SIZE, h.payload_len);
    wf_frame_write_header(&h, w->p);
    return WF_OK;
}

/* ---- building blocks ------------------------------------------------------------------------- */

void wf__fw_str(wf__fw *w, const char *s, size_t max, const char *what) {
    size_t n = s ? strnlen(s, max) : 0; /* fixed arrays may lack a NUL: never read past max */
    if (n >= max || n > UINT16_MAX) {
        wf__fw_fail(w, "%s: %zu bytes, at most %zu", what, n, max - 1);
        return;
    }
    wf__fw_u16(w, (uint16_t)n);
    wf__fw_bytes(w, s, n);
}

/* Reads a str<max> header and checks its bytes; returns the bytes or NULL. */
static const uint8_t *read_str(wf__fr *r, size_t max, size_t *n, const char *what) {
    *n = wf__fr_u16(r, what);
    if (r->st != WF_OK) return NULL;
    if (*n >= max) {
        wf__fr_fail(r, WF_ERANGE, "%s: %zu bytes, at most %zu", what, *n, max - 1);
        return NULL;
    }
    if (!wf__fr_need(r, *n, what)) return NULL;
    const uint8_t *b = r->p + r->off;
    if (memchr(b, 0, *n)) {
        wf__fr_fail(r, WF_EFORMAT, "%s contains a NUL byte", what);
        return NULL;
    }
    r->off += *n;
    return b;
}

void wf__fr_str_fixed(wf__fr *r, char *out, size_t max, const char *what) {
    size_t n;
    const uint8_t *b = read_str(r, max, &n, what);
    if (b) memcpy(out, b, n);
    out[b ? n : 0] = '\0';
}

const char *wf__fr_str(wf__fr *r, size_t max, const char *what) {
    size_t n;
    const uint8_t *b = read_str(r, max, &n, what);
    if (!b) return "";
    if (n == 0) return "";
    char *s = wf__fr_alloc(r, n + 1, 1, what);
    if (!s) return "";
    memcpy(s, b, n);
    s[n] = '\0';
    return s;
}

void wf__fw_blob(wf__fw *w, const uint8_t *b, uint32_t n, uint32_t max, const char *what) {
    if (n > max || (n && !b)) {
        wf__fw_fail(w, "%s: %u bytes, at most %u", what, n, max);
        return;
    }
    wf__fw_u32(w, n);
    wf__fw_bytes(w, b, n);
}

const uint8_t *wf__fr_blob(wf__fr *r, uint32_t *n, uint32_t max, const char *what) {
    *n = wf__fr_count(r, max, 1, what);
    if (r->st != WF_OK || *n == 0) {
        *n = 0;
        return NULL;
    }
    uint8_t *b = wf__fr_alloc(r, *n, 1, what);
    if (!b) {
        *n = 0;
        return NULL;
    }
    memcpy(b, r->p + r->off, *n);
    r->off += *n;
    return b;
}

/* Whether any element is negative: OR of all sign bits with four independent accumulators and
 * no early exit (arrays can be long: every DECODE task carries its history each iteration). */
static bool any_negative(const int32_t *v, size_t n) {
    uint32_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a |= (uint32_t)v[i];
        b |= (uint32_t)v[i + 1];
        c |= (uint32_t)v[i + 2];
        d |= (uint32_t)v[i + 3];
    }
    for (; i < n; i++) a |= (uint32_t)v[i];
    return ((a | b | c | d) >> 31) != 0;
}

void wf__fw_i32s(wf__fw *w, const int32_t *v, int n, uint32_t max,
                 const char *what) {
    if (n < 0 || (uint32_t)n > max || (n && !v)) {
        wf__fw_fail(w, "%s: count %d outside [0, %u]", what, n, max);
        return;
    }
    if (n && any_negative(v, (size_t)n)) {
        for (int i = 0; i < n; i++)
            if (v[i] < 0) {
                wf__fw_fail(w, "%s[%d] = %d is negative", what, i, v[i]);
                return;
            }
    }
    wf__fw_u32(w, (uint32_t)n);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    wf__fw_bytes(w, v, (size_t)n * 4);
#else
    for (int i = 0; i < n; i++) wf__fw_i32(w, v[i]);
#endif
}

const int32_t *wf__fr_i32s(wf__fr *r, int *n, uint32_t max, const char *what) {
    uint32_t count = wf__fr_count(r, max, 4, what);
    *n = 0;
    if (r->st != WF_OK || count == 0) return NULL;
    int32_t *v = wf__fr_alloc(r, (size_t)count * 4, _Alignof(int32_t), what);
    if (!v) return NULL;
    const uint8_t *b = r->p + r->off;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(v, b, (size_t)count * 4);
#else
    for (uint32_t i = 0; i < count; i++) v[i] = (int32_t)wf__get_u32(b + 4 * (size_t)i);
#endif
    if (any_negative(v, count)) {
        for (uint32_t i = 0; i < count; i++)
            if (v[i] < 0) {
                wf__fr_fail(r, WF_ERANGE, "%s[%u] = %d is negative", what, i, v[i]);
                return NULL;
            }
    }
    r->off += (size_t)count * 4;
    *n = (int)count;
    return v;
}

void wf__fw_group(wf__fw *w, const wf_group *g, const char *what) {
    if (g->n_ranks < 0 || g->n_ranks > WF_MAX_GROUP_RANKS) {
        wf__fw_fail(w, "%s: n_ranks = %d outside [0, %d]", what, g->n_ranks, WF_MAX_GROUP_RANKS);
        return;
    }
    wf__fw_u64(w, g->id);
    wf__fw_u8(w, (uint8_t)g->n_ranks);
    for (int i = 0; i < g->n_ranks; i++) {
        if (g->ranks[i] < 0) {
            wf__fw_fail(w, "%s: ranks[%d] = %d is negative", what, i, g->ranks[i]);
            return;
        }
        wf__fw_i32(w, g->ranks[i]);
    }
}

void wf__fr_group(wf__fr *r, wf_group *g, const char *what) {
    g->id = wf__fr_u64(r, what);
    unsigned n = wf__fr_u8(r, what);
    g->n_ranks = 0;
    if (r->st != WF_OK) return;
    if (n > WF_MAX_GROUP_RANKS) {
        wf__fr_fail(r, WF_ERANGE, "%s: n_ranks = %u exceeds WF_MAX_GROUP_RANKS (%d)", what, n,
                    WF_MAX_GROUP_RANKS);
        return;
    }
    for (unsigned i = 0; i < n; i++) g->ranks[i] = wf__fr_i32_range(r, 0, INT32_MAX, what);
    if (r->st == WF_OK) g->n_ranks = (int)n;
}

void wf__fw_placement(wf__fw *w, const wf_placement *p, const char *what) {
    if ((unsigned)p->kind > WF_PLACEMENT_SHARDED) {
        wf__fw_fail(w, "%s: placement kind %d", what, (int)p->kind);
        return;
    }
    wf__fw_u8(w, (uint8_t)p->kind);
    wf__fw_i32(w, p->shard_dim);
    wf__fw_group(w, &p->holders, what);
}

void wf__fr_placement(wf__fr *r, wf_placement *p, const char *what) {
    unsigned kind = wf__fr_u8(r, what);
    if (r->st == WF_OK && kind > WF_PLACEMENT_SHARDED)
        wf__fr_fail(r, WF_EPROTO, "%s: invalid placement kind %u", what, kind);
    p->kind = (wf_placement_kind)kind;
    p->shard_dim = wf__fr_i32(r, what);
    wf__fr_group(r, &p->holders, what);
}

static bool dims_ok(wf__fw *w, const char *what, int a, int b, int c, int d) {
    if (a < 0 || b < 0 || c < 0 || d < 0) {
        wf__fw_fail(w, "%s: negative dimension or step (%d, %d, %d, %d)", what, a, b, c, d);
        return false;
    }
    return true;
}

void wf__fw_artifact(wf__fw *w, const wf_artifact *a, const char *what) {
    if ((unsigned)a->kind > WF_ARTIFACT_IMAGE) {
        wf__fw_fail(w, "%s: artifact kind %d", what, (int)a->kind);
        return;
    }
    wf__fw_u64(w, a->id);
    wf__fw_u8(w, (uint8_t)a->kind);
    wf__fw_placement(w, &a->placement, what);
    switch (a->kind) {
    case WF_ARTIFACT_NONE: break;
    case WF_ARTIFACT_KV:
        wf__fw_i32s(w, a->block_table, a->n_blocks, WF_FRAME_MAX_BLOCKS, what);
        break;
    case WF_ARTIFACT_LATENT:
        if (!dims_ok(w, what, a->latent.channels, a->latent.height, a->latent.width,
                     a->latent.step))
            return;
        wf__fw_i32(w, a->latent.channels);
        wf__fw_i32(w, a->latent.height);
        wf__fw_i32(w, a->latent.width);
        wf__fw_i32(w, a->latent.step);
        break;
    case WF_ARTIFACT_IMAGE:
        if (!dims_ok(w, what, a->image.channels, a->image.height, a->image.width, 0)) return;
        wf__fw_i32(w, a->image.channels);
        wf__fw_i32(w, a->image.height);
        wf__fw_i32(w, a->image.width);
        break;
    }
}

void wf__fr_artifact(wf__fr *r, wf_artifact *a, const char *what) {
    memset(a, 0, sizeof *a);
    a->id = wf__fr_u64(r, what);
    unsigned kind = wf__fr_u8(r, what);
    if (r->st == WF_OK && kind > WF_ARTIFACT_IMAGE) {
        wf__fr_fail(r, WF_EPROTO, "%s: invalid artifact kind %u", what, kind);
        return;
    }
    a->kind = (wf_artifact_kind)kind;
    wf__fr_placement(r, &a->placement, what);
    switch (a->kind) {
    case WF_ARTIFACT_NONE: break;
    case WF_ARTIFACT_KV:
        a->block_table = wf__fr_i32s(r, &a->n_blocks, WF_FRAME_MAX_BLOCKS, what);
        break;
    case WF_ARTIFACT_LATENT:
        a->latent.channels = wf__fr_i32_range(r, 0, INT32_MAX, what);
        a->latent.height = wf__fr_i32_range(r, 0, INT32_MAX, what);
        a->latent.width = wf__fr_i32_range(r, 0, INT32_MAX, what);
        a->latent.step = wf__fr_i32_range(r, 0, INT32_MAX, what);
        break;
    case WF_ARTIFACT_IMAGE:
        a->image.channels = wf__fr_i32_range(r, 0, INT32_MAX, what);
        a->image.height = wf__fr_i32_range(r, 0, INT32_MAX, what);
        a->image.width = wf__fr_i32_range(r, 0, INT32_MAX, what);
        break;
    }
}

void wf__fw_sampling(wf__fw *w, const wf_sampling_params *s) {
    if (s->top_k < 0 || s->top_logprobs < 0 || s->top_logprobs > WF_MAX_TOP_LOGPROBS ||
        s->n_logit_bias < 0 || s->n_logit_bias > WF_FRAME_MAX_LOGIT_BIAS ||
        (s->n_logit_bias && !s->logit_bias)) {
        wf__fw_fail(w, "sampling: top_k %d, top_logprobs %d or n_logit_bias %d out of range",
                    s->top_k, s->top_logprobs, s->n_logit_bias);
        return;
    }
    wf__fw_f32(w, s->temperature);
    wf__fw_i32(w, s->top_k);
    wf__fw_f32(w, s->top_p);
    wf__fw_f32(w, s->min_p);
    wf__fw_f32(w, s->repetition_penalty);
    wf__fw_f32(w, s->frequency_penalty);
    wf__fw_f32(w, s->presence_penalty);
    wf__fw_bool(w, s->has_seed);
    wf__fw_u64(w, s->seed);
    wf__fw_bool(w, s->logprobs);
    wf__fw_u8(w, (uint8_t)s->top_logprobs);
    wf__fw_u32(w, (uint32_t)s->n_logit_bias);
    for (int i = 0; i < s->n_logit_bias; i++) {
        if (s->logit_bias[i].token < 0) {
            wf__fw_fail(w, "sampling: logit_bias[%d].token = %d is negative", i,
                        s->logit_bias[i].token);
            return;
        }
        wf__fw_i32(w, s->logit_bias[i].token);
        wf__fw_f32(w, s->logit_bias[i].bias);
    }
}

void wf__fr_sampling(wf__fr *r, wf_sampling_params *s) {
    memset(s, 0, sizeof *s);
    s->temperature = wf__fr_f32(r, "sampling.temperature");
    s->top_k = wf__fr_i32_range(r, 0, INT32_MAX, "sampling.top_k");
    s->top_p = wf__fr_f32(r, "sampling.top_p");
    s->min_p = wf__fr_f32(r, "sampling.min_p");
    s->repetition_penalty = wf__fr_f32(r, "sampling.repetition_penalty");
    s->frequency_penalty = wf__fr_f32(r, "sampling.frequency_penalty");
    s->presence_penalty = wf__fr_f32(r, "sampling.presence_penalty");
    s->has_seed = wf__fr_bool(r, "sampling.has_seed");
    s->seed = wf__fr_u64(r, "sampling.seed");
    s->logprobs = wf__fr_bool(r, "sampling.logprobs");
    unsigned top = wf__fr_u8(r, "sampling.top_logprobs");
    if (r->st == WF_OK && top > WF_MAX_TOP_LOGPROBS)
        wf__fr_fail(r, WF_ERANGE, "sampling.top_logprobs = %u exceeds %d", top,
                    WF_MAX_TOP_LOGPROBS);
    s->top_logprobs = (int)top;
    uint32_t n = wf__fr_count(r, WF_FRAME_MAX_LOGIT_BIAS, 8, "sampling.n_logit_bias");
    if (r->st != WF_OK || n == 0) return;
    wf_logit_bias *lb = wf__fr_alloc(r, n * sizeof *lb, _Alignof(wf_logit_bias),
                                     "sampling.logit_bias");
    if (!lb) return;
    for (uint32_t i = 0; i < n; i++) {
        lb[i].token = wf__fr_i32_range(r, 0, INT32_MAX, "sampling.logit_bias.token");
        lb[i].bias = wf__fr_f32(r, "sampling.logit_bias.bias");
    }
    s->logit_bias = lb;
    s->n_logit_bias = (int)n;
}

void wf__fw_gen_token(wf__fw *w, const wf_generated_token *t) {
    if (t->n_top < 0 || t->n_top > WF_MAX_TOP_LOGPROBS) {
        wf__fw_fail(w, "generated token: n_top = %d outside [0, %d]", t->n_top,
                    WF_MAX_TOP_LOGPROBS);
        return;
    }
    wf__fw_i32(w, t->token);
    wf__fw_f32(w, t->logprob);
    wf__fw_u8(w, (uint8_t)t->n_top);
    /* The alternatives in one write: an event carries up to 20 per sample every iteration. */
    uint8_t b[8 * WF_MAX_TOP_LOGPROBS];
    for (int i = 0; i < t->n_top; i++) {
        uint32_t tok = (uint32_t)t->top[i].token, lp;
        memcpy(&lp, &t->top[i].logprob, 4);
        for (int k = 0; k < 4; k++) {
            b[8 * i + k] = (uint8_t)(tok >> (8 * k));
            b[8 * i + 4 + k] = (uint8_t)(lp >> (8 * k));
        }
    }
    wf__fw_bytes(w, b, (size_t)t->n_top * 8);
}

void wf__fr_gen_token(wf__fr *r, wf_generated_token *t) {
    t->token = wf__fr_i32(r, "token");
    t->logprob = wf__fr_f32(r, "token.logprob");
    unsigned n = wf__fr_u8(r, "token.n_top");
    t->n_top = 0;
    if (r->st != WF_OK) return;
    if (n > WF_MAX_TOP_LOGPROBS) {
        wf__fr_fail(r, WF_ERANGE, "token.n_top = %u exceeds %d", n, WF_MAX_TOP_LOGPROBS);
        return;
    }
    if (!wf__fr_need(r, (size_t)n * 8, "token.top")) return;
    const uint8_t *b = r->p + r->off;
    for (unsigned i = 0; i < n; i++) {
        t->top[i].token = (int32_t)wf__get_u32(b + 8 * i);
        uint32_t lp = wf__get_u32(b + 8 * i + 4);
        memcpy(&t->top[i].logprob, &lp, 4);
    }
    r->off += (size_t)n * 8;
    t->n_top = (int)n;
}

static bool status_valid(int32_t v) { return v >= WF_STATUS_MIN && v <= WF_IN_PROGRESS; }

void wf__fw_status(wf__fw *w, wf_status st, const char *what) {
    if (!status_valid(st)) {
        wf__fw_fail(w, "%s: %d is not a wf_status", what, (int)st);
        return;
    }
    wf__fw_i32(w, st);
}

wf_status wf__fr_status(wf__fr *r, const char *what) {
    int32_t v = wf__fr_i32(r, what);
    if (r->st == WF_OK && !status_valid(v)) {
        wf__fr_fail(r, WF_EPROTO, "%s: %d is not a wf_status", what, v);
        return WF_EINTERNAL;
    }
    return (wf_status)v;
}
