/* proto/frame.c, frame_control.c, frame_artifact.c: the envelope (every rejection class), CRC32C,
 * version negotiation, the streaming reader with frames split at every offset, and round trips
 * of every control and artifact frame with random contents, truncation at every offset and bad
 * fields; the fuzz seeds of tests/fuzz/corpus/frame_control/ and frame_artifact/. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "frame_testutil.h"
#include "proto/frame.h"
#include "proto/frame_artifact.h"
#include "proto/frame_control.h"
#include "proto/frame_impl.h"

static uint8_t buf[1 << 20];
static uint8_t arena_mem[1 << 20];

/* ---- random control messages ------------------------------------------------------------------ */

static uint8_t blobs[64][WF_FRAME_UCX_ADDRESS_MAX];
static int n_blobs;

static const uint8_t *rand_blob(trng *r, uint32_t *len, uint32_t max) {
    *len = trng_int(r, 0, 3) == 0 ? 0 : (uint32_t)trng_int(r, 1, trng_int(r, 0, 1) ? 64 : (int)max);
    uint8_t *b = blobs[n_blobs++ % 64];
    for (uint32_t i = 0; i < *len; i++) b[i] = (uint8_t)trng_u64(r);
    return *len ? b : NULL;
}

static void rand_hello(trng *r, wf_frame_hello *h) {
    memset(h, 0, sizeof *h);
    h->version_min = (uint16_t)trng_int(r, 0, 0x200);
    h->version_max = (uint16_t)trng_int(r, h->version_min, 0x300);
    h->role = (wf_frame_role)trng_int(r, 0, WF_FRAME_ROLE_COUNT - 1);
    h->requested_rank = trng_int(r, -1, 100);
    h->pid = (uint32_t)trng_u64(r);
    trng_str(r, h->host, WF_FRAME_HOST_MAX - 1);
    h->n_cores = (uint32_t)trng_int(r, 1, 256);
    int words = trng_int(r, 0, WF_FRAME_MAX_CORE_WORDS);
    for (int i = 0; i < words; i++) h->core_mask[i] = trng_u64(r) | (i == words - 1);
    h->model.file_size = trng_u64(r);
    for (int i = 0; i < WF_FRAME_DIGEST_SIZE; i++) h->model.digest[i] = (uint8_t)trng_u64(r);
    trng_str(r, h->model.name, WF_FRAME_NAME_MAX - 1);
    h->ucx_address = rand_blob(r, &h->ucx_address_len, WF_FRAME_UCX_ADDRESS_MAX);
    h->rkey = rand_blob(r, &h->rkey_len, WF_FRAME_RKEY_MAX);
    h->buffer_addr = trng_u64(r);
    h->buffer_size = trng_u64(r);
    h->incarnation = trng_u64(r);
}

static void cmp_blob(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen) {
    ck_assert_uint_eq(alen, blen);
    if (alen) ck_assert(memcmp(a, b, alen) == 0);
}

static void cmp_hello(const wf_frame_hello *a, const wf_frame_hello *b) {
    ck_assert_uint_eq(a->version_min, b->version_min);
    ck_assert_uint_eq(a->version_max, b->version_max);
    ck_assert_int_eq(a->role, b->role);
    ck_assert_int_eq(a->requested_rank, b->requested_rank);
    ck_assert_uint_eq(a->pid, b->pid);
    ck_assert_str_eq(a->host, b->host);
    ck_assert_uint_eq(a->n_cores, b->n_cores);
    ck_assert(memcmp(a->core_mask, b->core_mask, sizeof a->core_mask) == 0);
    ck_assert(wf_frame_model_fingerprint_equal(&a->model, &b->model));
    cmp_blob(a->ucx_address, a->ucx_address_len, b->ucx_address, b->ucx_address_len);
    cmp_blob(a->rkey, a->rkey_len, b->rkey, b->rkey_len);
    ck_assert_uint_eq(a->buffer_addr, b->buffer_addr);
    ck_assert_uint_eq(a->buffer_size, b->buffer_size);
    ck_assert_uint_eq(a->incarnation, b->incarnation);
}

static wf_frame_peer peers_mem[WF_FRAME_MAX_WORLD];

static int rand_peers(trng *r, int world) {
    int n = trng_int(r, 0, world < 8 ? world : 8);
    for (int i = 0; i < n; i++) {
        wf_frame_peer *p = &peers_mem[i];
        memset(p, 0, sizeof *p);
        p->rank = trng_int(r, 0, world - 1);
        p->role = (wf_frame_role)trng_int(r, 0, WF_FRAME_ROLE_COUNT - 1);
        p->pid = (uint32_t)trng_u64(r);
        trng_str(r, p->host, 20);
        p->ucx_address = rand_blob(r, &p->ucx_address_len, 300);
        p->rkey = rand_blob(r, &p->rkey_len, 100);
        p->buffer_addr = trng_u64(r);
        p->buffer_size = trng_u64(r);
        p->incarnation = trng_u64(r);
    }
    return n;
}

static void cmp_peers(const wf_frame_peer *a, const wf_frame_peer *b, int n) {
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(a[i].rank, b[i].rank);
        ck_assert_int_eq(a[i].role, b[i].role);
        ck_assert_uint_eq(a[i].pid, b[i].pid);
        ck_assert_str_eq(a[i].host, b[i].host);
        cmp_blob(a[i].ucx_address, a[i].ucx_address_len, b[i].ucx_address, b[i].ucx_address_len);
        cmp_blob(a[i].rkey, a[i].rkey_len, b[i].rkey, b[i].rkey_len);
        ck_assert_uint_eq(a[i].buffer_addr, b[i].buffer_addr);
        ck_assert_uint_eq(a[i].buffer_size, b[i].buffer_size);
        ck_assert_uint_eq(a[i].incarnation, b[i].incarnation);
    }
}

static uint64_t get_u64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

static wf_frame_view open_ok(size_t len) {
    wf_frame_view f;
    char err[256];
    ck_assert_msg(wf_frame_open(buf, len, 1 << 20, &f, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_uint_eq(f.frame_len, len);
    return f;
}

static wf_frame_arena fresh_arena(void) {
    wf_frame_arena a;
    wf_frame_arena_init(&a, arena_mem, sizeof arena_mem);
    return a;
}

/* decode_fn adapters */
#define ADAPT(name, type, call)                                                              \
    static wf_status name(const wf_frame_view *f, wf_frame_arena *a, char *err, size_t n) { \
        type m;                                                                              \
        (void)a;                                                                             \
        return call;                                                                         \
    }
ADAPT(dec_hello, wf_frame_hello, wf_frame_decode_hello(f, a, &m, err, n))
ADAPT(dec_welcome, wf_frame_welcome, wf_frame_decode_welcome(f, a, &m, err, n))
ADAPT(dec_world, wf_frame_world_table, wf_frame_decode_world_table(f, a, &m, err, n))
ADAPT(dec_reject, wf_frame_reject, wf_frame_decode_reject(f, &m, err, n))
ADAPT(dec_heartbeat, wf_frame_heartbeat, wf_frame_decode_heartbeat(f, &m, err, n))
ADAPT(dec_info, wf_frame_worker_info, wf_frame_decode_worker_info(f, &m, err, n))
ADAPT(dec_cancel, wf_frame_cancel, wf_frame_decode_cancel(f, &m, err, n))
ADAPT(dec_drain, wf_frame_drain, wf_frame_decode_drain(f, &m, err, n))
ADAPT(dec_status, wf_frame_status_msg, wf_frame_decode_status_msg(f, &m, err, n))
ADAPT(dec_vmodel, wf_frame_vmodel, wf_frame_decode_vmodel(f, a, &m, err, n))
ADAPT(dec_vmodel_ack, wf_frame_vmodel_ack, wf_frame_decode_vmodel_ack(f, &m, err, n))
ADAPT(dec_xfer, wf_frame_artifact_transfer, wf_frame_decode_artifact_transfer(f, a, &m, err, n))
ADAPT(dec_xdone, wf_frame_transfer_done, wf_frame_decode_transfer_done(f, &m, err, n))

static wf_status dec_control(const wf_frame_view *f, wf_frame_arena *a, char *err, size_t n) {
    switch (f->hdr.type) {
    case WF_FRAME_HELLO: return dec_hello(f, a, err, n);
    case WF_FRAME_WELCOME: return dec_welcome(f, a, err, n);
    case WF_FRAME_WORLD_TABLE: return dec_world(f, a, err, n);
    case WF_FRAME_REJECT: return dec_reject(f, a, err, n);
    case WF_FRAME_HEARTBEAT: return dec_heartbeat(f, a, err, n);
    case WF_FRAME_CANCEL: return dec_cancel(f, a, err, n);
    case WF_FRAME_WORKER_INFO: return dec_info(f, a, err, n);
    case WF_FRAME_DRAIN: return dec_drain(f, a, err, n);
    case WF_FRAME_VMODEL: return dec_vmodel(f, a, err, n);
    case WF_FRAME_VMODEL_ACK: return dec_vmodel_ack(f, a, err, n);
    case WF_FRAME_SHUTDOWN:
    case WF_FRAME_ERROR: return dec_status(f, a, err, n);
    }
    return WF_EPROTO;
}
static wf_status dec_artifact(const wf_frame_view *f, wf_frame_arena *a, char *err, size_t n) {
    if (f->hdr.type == WF_FRAME_ARTIFACT_TRANSFER) return dec_xfer(f, a, err, n);
    if (f->hdr.type == WF_FRAME_TRANSFER_DONE) return dec_xdone(f, a, err, n);
    return WF_EPROTO;
}

/* ---- envelope ------------------------------------------------------------------------------------ */

START_TEST(crc32c_known_values) {
    ck_assert_uint_eq(wf_frame_crc32c(0, "123456789", 9), 0xe3069283u);
    ck_assert_uint_eq(wf_frame_crc32c(0, "", 0), 0);
    /* incremental equals one shot, across the 8-byte stride */
    uint8_t data[1000];
    for (int i = 0; i < 1000; i++) data[i] = (uint8_t)(i * 7 + 3);
    uint32_t whole = wf_frame_crc32c(0, data, sizeof data);
    for (size_t cut = 0; cut <= 1000; cut += 37)
        ck_assert_uint_eq(wf_frame_crc32c(wf_frame_crc32c(0, data, cut), data + cut, 1000 - cut),
                          whole);
    /* the SSE4.2 variant (when this CPU has it) against the scalar reference, every alignment
     * and length up to 300 bytes, and chained */
    ck_assert_uint_eq(wf__crc32c_scalar(0, "123456789", 9), 0xe3069283u);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("sse4.2")) {
        ck_assert_uint_eq(wf__crc32c_avx2(0, "123456789", 9), 0xe3069283u);
        for (size_t off = 0; off < 8; off++)
            for (size_t n = 0; n + off <= 300; n++)
                ck_assert_uint_eq(wf__crc32c_avx2(0x1234u, data + off, n),
                                  wf__crc32c_scalar(0x1234u, data + off, n));
    }
}
END_TEST

static size_t make_drain(uint64_t deadline) {
    wf_frame_drain d = {.deadline_ns = deadline};
    size_t len;
    ck_assert_int_eq(wf_frame_encode_drain(&d, buf, sizeof buf, &len, NULL, 0), WF_OK);
    return len;
}

static void expect_open(size_t len, size_t max_payload, wf_status want, const char *needle) {
    wf_frame_view f;
    char err[256] = "";
    wf_status st = wf_frame_open(buf, len, max_payload, &f, err, sizeof err);
    ck_assert_msg(st == want, "want %d got %d (%s)", want, st, err);
    ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
}

static void rewrite_header(uint8_t major, uint8_t minor, uint16_t type, uint32_t flags) {
    wf_frame_header h = {.major = major, .minor = minor, .type = type, .flags = flags,
                         .payload_len = buf[12] | buf[13] << 8 | buf[14] << 16 |
                                        (uint32_t)buf[15] << 24};
    h.payload_crc = wf_frame_crc32c(0, buf + WF_FRAME_HEADER_SIZE, h.payload_len);
    wf_frame_write_header(&h, buf);
}

START_TEST(envelope_rejections) {
    size_t len = make_drain(5);
    ck_assert_uint_eq(len, WF_FRAME_HEADER_SIZE + 8);
    ck_assert(memcmp(buf, "WFRM", 4) == 0);
    open_ok(len);
    /* truncated header, at every length */
    for (size_t n = 0; n < WF_FRAME_HEADER_SIZE; n++) expect_open(n, 1 << 20, WF_EFORMAT, "header");
    /* truncated payload */
    expect_open(len - 1, 1 << 20, WF_EFORMAT, "truncated");
    /* wrong magic */
    buf[0] = 'X';
    expect_open(len, 1 << 20, WF_EFORMAT, "magic");
    /* header corruption (a bit of the length field) */
    len = make_drain(5);
    buf[12] ^= 0x40;
    expect_open(len, 1 << 20, WF_EFORMAT, "header checksum");
    /* payload corruption */
    len = make_drain(5);
    buf[WF_FRAME_HEADER_SIZE + 3] ^= 1;
    expect_open(len, 1 << 20, WF_EFORMAT, "payload checksum");
    /* unknown major version: the message names both versions */
    len = make_drain(5);
    rewrite_header(2, 3, WF_FRAME_DRAIN, 0);
    expect_open(len, 1 << 20, WF_EUNSUPPORTED, "version 2.3");
    expect_open(len, 1 << 20, WF_EUNSUPPORTED, "speaks version 1.4");
    /* unknown type */
    len = make_drain(5);
    rewrite_header(1, 0, 99, 0);
    expect_open(len, 1 << 20, WF_EUNSUPPORTED, "type 99");
    /* unknown flags */
    len = make_drain(5);
    rewrite_header(1, 0, WF_FRAME_DRAIN, 4);
    expect_open(len, 1 << 20, WF_EUNSUPPORTED, "flags");
    /* over the receiver's limit: refused from the header alone */
    len = make_drain(5);
    expect_open(len, 7, WF_ERANGE, "exceeds the limit of 7");
    wf_frame_header h;
    char err[256];
    ck_assert_int_eq(wf_frame_decode_header(buf, WF_FRAME_HEADER_SIZE, 7, &h, err, sizeof err),
                     WF_ERANGE);
    ck_assert_int_eq(wf_frame_decode_header(buf, WF_FRAME_HEADER_SIZE, 8, &h, err, sizeof err),
                     WF_OK);
    ck_assert_uint_eq(h.payload_len, 8);
    /* a decoder given another type's frame */
    wf_frame_view f = open_ok(len);
    wf_frame_heartbeat hb;
    ck_assert_int_eq(wf_frame_decode_heartbeat(&f, &hb, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "expected a heartbeat frame, got drain"));
    /* NULL err is allowed */
    buf[0] = 0;
    ck_assert_int_eq(wf_frame_open(buf, len, 1 << 20, &f, NULL, 0), WF_EFORMAT);
}
END_TEST

START_TEST(hello_of_another_major_is_heard) {
    trng r = {8};
    wf_frame_hello h, d;
    rand_hello(&r, &h);
    h.version_min = 0x0300;
    h.version_max = 0x0305;
    size_t len;
    char err[256];
    ck_assert_int_eq(wf_frame_encode_hello(&h, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    rewrite_header(3, 5, WF_FRAME_HELLO, 0);
    wf_frame_view f = open_ok(len);
    ck_assert_uint_eq(f.hdr.major, 3);
    wf_frame_arena a = fresh_arena();
    ck_assert_int_eq(wf_frame_decode_hello(&f, &a, &d, err, sizeof err), WF_OK);
    uint16_t v;
    ck_assert_int_eq(wf_frame_negotiate_version(WF_FRAME_VERSION, WF_FRAME_VERSION, d.version_min,
                                                d.version_max, &v, err, sizeof err),
                     WF_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "3.0..3.5"));
    /* so the coordinator answers with a REJECT naming its range */
    wf_frame_reject rj = {.version_min = WF_FRAME_VERSION, .version_max = WF_FRAME_VERSION,
                          .status = WF_EUNSUPPORTED};
    snprintf(rj.reason, sizeof rj.reason, "%s", err);
    ck_assert_int_eq(wf_frame_encode_reject(&rj, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    f = open_ok(len);
    wf_frame_reject rd;
    ck_assert_int_eq(wf_frame_decode_reject(&f, &rd, err, sizeof err), WF_OK);
    ck_assert_str_eq(rd.reason, rj.reason);
    ck_assert_int_eq(rd.status, WF_EUNSUPPORTED);
}
END_TEST

START_TEST(version_negotiation) {
    uint16_t v = 0;
    char err[128];
    ck_assert_int_eq(wf_frame_negotiate_version(0x100, 0x105, 0x103, 0x200, &v, err, sizeof err),
                     WF_OK);
    ck_assert_uint_eq(v, 0x105);
    ck_assert_int_eq(wf_frame_negotiate_version(0x100, 0x100, 0x100, 0x100, &v, err, sizeof err),
                     WF_OK);
    ck_assert_uint_eq(v, 0x100);
    ck_assert_int_eq(wf_frame_negotiate_version(0x100, 0x101, 0x102, 0x200, &v, err, sizeof err),
                     WF_EUNSUPPORTED);
    ck_assert_int_eq(wf_frame_negotiate_version(0x105, 0x100, 0x100, 0x200, &v, err, sizeof err),
                     WF_EUNSUPPORTED);
}
END_TEST

/* ---- control frames ------------------------------------------------------------------------------- */

START_TEST(hello_roundtrip_random) {
    trng r = {21};
    for (int i = 0; i < 200; i++) {
        wf_frame_hello h, d;
        rand_hello(&r, &h);
        size_t len;
        char err[256];
        ck_assert_msg(wf_frame_encode_hello(&h, buf, sizeof buf, &len, err, sizeof err) == WF_OK,
                      "%s", err);
        wf_frame_view f = open_ok(len);
        wf_frame_arena a = fresh_arena();
        ck_assert_msg(wf_frame_decode_hello(&f, &a, &d, err, sizeof err) == WF_OK, "%s", err);
        cmp_hello(&h, &d);
        if (i < 3) {
            check_truncations(buf, len, dec_hello);
            char name[32];
            snprintf(name, sizeof name, "hello_%d", i);
            maybe_write_seed("frame_control", name, buf, len);
        }
    }
}
END_TEST

START_TEST(hello_rejects_bad_fields) {
    wf_frame_hello h = {.version_min = 0x100, .version_max = 0x100,
                        .requested_rank = WF_FRAME_RANK_ANY};
    size_t len;
    char err[256];
    ck_assert_int_eq(wf_frame_encode_hello(&h, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    /* role at payload offset 4 */
    buf[WF_FRAME_HEADER_SIZE + 4] = WF_FRAME_ROLE_COUNT;
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    wf_frame_view f = open_ok(len);
    wf_frame_arena a = fresh_arena();
    ck_assert_int_eq(dec_hello(&f, &a, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "role"));
    /* requested rank below -1 at 5 */
    ck_assert_int_eq(wf_frame_encode_hello(&h, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    buf[WF_FRAME_HEADER_SIZE + 5] = 0xfe;
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_hello(&f, &a, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "requested_rank"));
    /* encoder-side checks */
    h.requested_rank = -2;
    ck_assert_int_eq(wf_frame_encode_hello(&h, buf, sizeof buf, &len, err, sizeof err), WF_EINVAL);
    h.requested_rank = 0;
    h.ucx_address_len = WF_FRAME_UCX_ADDRESS_MAX + 1;
    h.ucx_address = blobs[0];
    ck_assert_int_eq(wf_frame_encode_hello(&h, buf, sizeof buf, &len, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "ucx_address"));
    h.ucx_address_len = 0;
    memset(h.host, 'h', sizeof h.host); /* no NUL: the encoder must not read past the array */
    ck_assert_int_eq(wf_frame_encode_hello(&h, buf, sizeof buf, &len, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "host"));
    /* a core mask whose last word is zero is not canonical */
    memset(h.host, 0, sizeof h.host);
    h.core_mask[0] = 1;
    ck_assert_int_eq(wf_frame_encode_hello(&h, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    /* payload: versions 4, role 1, rank 4, pid 4, host len 2, n_cores 4 -> n_words at 19 */
    ck_assert_uint_eq(buf[WF_FRAME_HEADER_SIZE + 19], 1);
    memset(buf + WF_FRAME_HEADER_SIZE + 20, 0, 8);
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_hello(&f, &a, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "core_mask"));
    /* a blob longer than its bound (ucx_address length at 20 + 8 + 8 + 32 + 2 = 70) */
    ck_assert_int_eq(wf_frame_encode_hello(&h, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    uint32_t big = WF_FRAME_UCX_ADDRESS_MAX + 1;
    memcpy(buf + WF_FRAME_HEADER_SIZE + 70, &big, 4);
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_hello(&f, &a, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "ucx_address"));
}
END_TEST

START_TEST(welcome_and_world_table_roundtrip) {
    trng r = {31};
    for (int i = 0; i < 100; i++) {
        wf_frame_welcome w = {.version = WF_FRAME_VERSION, .world_size = trng_int(&r, 1, 64),
                              .heartbeat_ms = (uint32_t)trng_int(&r, 1, 10000),
                              .epoch = trng_u64(&r)};
        w.rank = trng_int(&r, 0, w.world_size - 1);
        w.n_peers = rand_peers(&r, w.world_size);
        w.peers = peers_mem;
        size_t len;
        char err[256];
        ck_assert_msg(wf_frame_encode_welcome(&w, buf, sizeof buf, &len, err, sizeof err) == WF_OK,
                      "%s", err);
        wf_frame_view f = open_ok(len);
        wf_frame_arena a = fresh_arena();
        wf_frame_welcome d;
        ck_assert_msg(wf_frame_decode_welcome(&f, &a, &d, err, sizeof err) == WF_OK, "%s", err);
        ck_assert_uint_eq(d.version, w.version);
        ck_assert_int_eq(d.rank, w.rank);
        ck_assert_int_eq(d.world_size, w.world_size);
        ck_assert_uint_eq(d.heartbeat_ms, w.heartbeat_ms);
        ck_assert_uint_eq(d.epoch, w.epoch);
        ck_assert_int_eq(d.n_peers, w.n_peers);
        cmp_peers(w.peers, d.peers, w.n_peers);
        if (i == 0) {
            check_truncations(buf, len, dec_welcome);
            maybe_write_seed("frame_control", "welcome", buf, len);
        }

        wf_frame_world_table t = {.epoch = trng_u64(&r), .world_size = w.world_size,
                                  .peers = peers_mem, .n_peers = w.n_peers};
        ck_assert_int_eq(wf_frame_encode_world_table(&t, buf, sizeof buf, &len, err, sizeof err),
                         WF_OK);
        f = open_ok(len);
        a = fresh_arena();
        wf_frame_world_table td;
        ck_assert_int_eq(wf_frame_decode_world_table(&f, &a, &td, err, sizeof err), WF_OK);
        ck_assert_uint_eq(td.epoch, t.epoch);
        ck_assert_int_eq(td.world_size, t.world_size);
        ck_assert_int_eq(td.n_peers, t.n_peers);
        cmp_peers(t.peers, td.peers, t.n_peers);
        if (i == 0) {
            check_truncations(buf, len, dec_world);
            maybe_write_seed("frame_control", "world_table", buf, len);
        }
    }
}
END_TEST

START_TEST(welcome_rejects_bad_fields) {
    wf_frame_welcome w = {.version = WF_FRAME_VERSION, .rank = 1, .world_size = 2};
    size_t len;
    char err[256];
    ck_assert_int_eq(wf_frame_encode_welcome(&w, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    /* payload: version 2, rank at 2, world_size at 6, heartbeat 10, epoch 14, n_peers 22 */
    buf[WF_FRAME_HEADER_SIZE + 2] = 2; /* rank == world_size */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    wf_frame_view f = open_ok(len);
    wf_frame_arena a = fresh_arena();
    ck_assert_int_eq(dec_welcome(&f, &a, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "rank = 2"));
    ck_assert_int_eq(wf_frame_encode_welcome(&w, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    buf[WF_FRAME_HEADER_SIZE + 22] = 3; /* n_peers > world_size */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_welcome(&f, &a, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "n_peers"));
    ck_assert_int_eq(wf_frame_encode_welcome(&w, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    buf[WF_FRAME_HEADER_SIZE + 9] = 0x80; /* world_size negative */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_welcome(&f, &a, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "world_size"));
    /* n_peers that the payload cannot hold (1 <= world but no bytes follow) */
    ck_assert_int_eq(wf_frame_encode_welcome(&w, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    buf[WF_FRAME_HEADER_SIZE + 22] = 1;
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_welcome(&f, &a, err, sizeof err), WF_EFORMAT);
    /* encoder: a peer outside the world */
    wf_frame_peer p = {.rank = 5};
    w.peers = &p;
    w.n_peers = 1;
    ck_assert_int_eq(wf_frame_encode_welcome(&w, buf, sizeof buf, &len, err, sizeof err),
                     WF_EINVAL);
    w.world_size = WF_FRAME_MAX_WORLD + 1;
    ck_assert_int_eq(wf_frame_encode_welcome(&w, buf, sizeof buf, &len, err, sizeof err),
                     WF_EINVAL);
}
END_TEST

START_TEST(small_control_frames_roundtrip) {
    trng r = {41};
    char err[256];
    size_t len;
    for (int i = 0; i < 50; i++) {
        wf_frame_heartbeat hb = {.seq = trng_u64(&r), .time_ns = trng_u64(&r),
                                 .kv_blocks_total = (uint32_t)trng_int(&r, 0, 100000),
                                 .queued_batches = (uint32_t)trng_int(&r, 0, 9),
                                 .kv_swa_blocks_total = (uint32_t)trng_int(&r, 0, 3000),
                                 .prefix_queries = trng_u64(&r) >> 1, .kv_layers_early = trng_u64(&r)};
        hb.kv_blocks_used = (uint32_t)trng_int(&r, 0, (int)hb.kv_blocks_total);
        hb.prefix_hits = hb.prefix_queries / (uint64_t)trng_int(&r, 1, 5);
        ck_assert_int_eq(wf_frame_encode_heartbeat(&hb, buf, sizeof buf, &len, err, sizeof err),
                         WF_OK);
        wf_frame_view f = open_ok(len);
        wf_frame_heartbeat hd;
        ck_assert_int_eq(wf_frame_decode_heartbeat(&f, &hd, err, sizeof err), WF_OK);
        ck_assert_uint_eq(hd.seq, hb.seq);
        ck_assert_uint_eq(hd.time_ns, hb.time_ns);
        ck_assert_uint_eq(hd.kv_blocks_used, hb.kv_blocks_used);
        ck_assert_uint_eq(hd.kv_blocks_total, hb.kv_blocks_total);
        ck_assert_uint_eq(hd.queued_batches, hb.queued_batches);
        ck_assert_uint_eq(hd.kv_swa_blocks_total, hb.kv_swa_blocks_total);
        ck_assert_uint_eq(hd.prefix_queries, hb.prefix_queries);
        ck_assert_uint_eq(hd.prefix_hits, hb.prefix_hits);
        ck_assert_uint_eq(hd.kv_layers_early, hb.kv_layers_early);
        if (i == 0) {
            check_truncations(buf, len, dec_heartbeat);
            maybe_write_seed("frame_control", "heartbeat", buf, len);
            /* a 1.3 heartbeat (without the counters) decodes with them 0 */
            buf[5] = 3;
            reseal(buf, (uint32_t)(len - 24 - WF_FRAME_HEADER_SIZE));
            f = open_ok(len - 24);
            ck_assert_int_eq(wf_frame_decode_heartbeat(&f, &hd, err, sizeof err), WF_OK);
            ck_assert_uint_eq(hd.kv_swa_blocks_total, hb.kv_swa_blocks_total);
            ck_assert_uint_eq(hd.prefix_queries, 0);
            ck_assert_uint_eq(hd.prefix_hits, 0);
            ck_assert_uint_eq(hd.kv_layers_early, 0);
            /* more hits than queries is refused */
            wf_frame_heartbeat bad = hb;
            bad.prefix_hits = bad.prefix_queries + 1;
            ck_assert_int_eq(wf_frame_encode_heartbeat(&bad, buf, sizeof buf, &len, err, sizeof err),
                             WF_EINVAL);
            ck_assert_int_eq(wf_frame_encode_heartbeat(&hb, buf, sizeof buf, &len, err, sizeof err), WF_OK);
            /* a 1.2 heartbeat (without kv_swa_blocks_total) decodes as an unsplit store */
            buf[5] = 2;
            reseal(buf, (uint32_t)(len - 28 - WF_FRAME_HEADER_SIZE));
            f = open_ok(len - 28);
            ck_assert_int_eq(wf_frame_decode_heartbeat(&f, &hd, err, sizeof err), WF_OK);
            ck_assert_uint_eq(hd.kv_swa_blocks_total, 0);
            ck_assert_uint_eq(hd.queued_batches, hb.queued_batches);
        }

        wf_frame_cancel c = {.scope = (wf_frame_cancel_scope)trng_int(&r, 0, 1),
                             .id = trng_u64(&r)};
        ck_assert_int_eq(wf_frame_encode_cancel(&c, buf, sizeof buf, &len, err, sizeof err),
                         WF_OK);
        f = open_ok(len);
        wf_frame_cancel cd;
        ck_assert_int_eq(wf_frame_decode_cancel(&f, &cd, err, sizeof err), WF_OK);
        ck_assert_int_eq(cd.scope, c.scope);
        ck_assert_uint_eq(cd.id, c.id);
        if (i == 0) {
            check_truncations(buf, len, dec_cancel);
            maybe_write_seed("frame_control", "cancel", buf, len);
        }

        len = make_drain(trng_u64(&r));
        f = open_ok(len);
        wf_frame_drain dd;
        ck_assert_int_eq(wf_frame_decode_drain(&f, &dd, err, sizeof err), WF_OK);
        ck_assert_uint_eq(dd.deadline_ns, get_u64(buf + WF_FRAME_HEADER_SIZE));
        if (i == 0) {
            check_truncations(buf, len, dec_drain);
            maybe_write_seed("frame_control", "drain", buf, len);
        }

        wf_frame_type types[2] = {WF_FRAME_SHUTDOWN, WF_FRAME_ERROR};
        for (int k = 0; k < 2; k++) {
            wf_frame_status_msg m = {.status = (wf_status)trng_int(&r, WF_STATUS_MIN, 1)};
            trng_str(&r, m.message, WF_FRAME_MESSAGE_MAX - 1);
            ck_assert_int_eq(wf_frame_encode_status_msg(types[k], &m, buf, sizeof buf, &len, err,
                                                        sizeof err),
                             WF_OK);
            f = open_ok(len);
            ck_assert_uint_eq(f.hdr.type, types[k]);
            wf_frame_status_msg md;
            ck_assert_int_eq(wf_frame_decode_status_msg(&f, &md, err, sizeof err), WF_OK);
            ck_assert_int_eq(md.status, m.status);
            ck_assert_str_eq(md.message, m.message);
            if (i == 0) {
                check_truncations(buf, len, dec_status);
                maybe_write_seed("frame_control", k ? "error" : "shutdown", buf, len);
            }
        }

        wf_frame_reject rj = {.version_min = (uint16_t)trng_u64(&r),
                              .version_max = (uint16_t)trng_u64(&r),
                              .status = (wf_status)trng_int(&r, WF_STATUS_MIN, 0)};
        trng_str(&r, rj.reason, 100);
        ck_assert_int_eq(wf_frame_encode_reject(&rj, buf, sizeof buf, &len, err, sizeof err),
                         WF_OK);
        f = open_ok(len);
        wf_frame_reject rd;
        ck_assert_int_eq(wf_frame_decode_reject(&f, &rd, err, sizeof err), WF_OK);
        ck_assert_uint_eq(rd.version_min, rj.version_min);
        ck_assert_uint_eq(rd.version_max, rj.version_max);
        ck_assert_int_eq(rd.status, rj.status);
        ck_assert_str_eq(rd.reason, rj.reason);
        if (i == 0) {
            check_truncations(buf, len, dec_reject);
            maybe_write_seed("frame_control", "reject", buf, len);
        }
    }
    /* bad fields */
    wf_frame_heartbeat hb = {.kv_blocks_used = 5, .kv_blocks_total = 4};
    ck_assert_int_eq(wf_frame_encode_heartbeat(&hb, buf, sizeof buf, &len, err, sizeof err),
                     WF_EINVAL);
    hb.kv_blocks_total = 5;
    ck_assert_int_eq(wf_frame_encode_heartbeat(&hb, buf, sizeof buf, &len, err, sizeof err),
                     WF_OK);
    buf[WF_FRAME_HEADER_SIZE + 20] = 4; /* total < used */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    wf_frame_view f = open_ok(len);
    ck_assert_int_eq(dec_heartbeat(&f, NULL, err, sizeof err), WF_ERANGE);
    /* 1.4: a peer's frame with more prefix hits than queries is refused, naming both */
    hb.prefix_queries = 7;
    hb.prefix_hits = 7;
    ck_assert_int_eq(wf_frame_encode_heartbeat(&hb, buf, sizeof buf, &len, err, sizeof err),
                     WF_OK);
    buf[WF_FRAME_HEADER_SIZE + 40] = 8; /* prefix_hits (u64 LE after queries) = 8 > 7 */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_heartbeat(&f, NULL, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "prefix_hits 8 > prefix_queries 7"));
    wf_frame_cancel c = {.scope = WF_FRAME_CANCEL_BATCH, .id = 1};
    ck_assert_int_eq(wf_frame_encode_cancel(&c, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    buf[WF_FRAME_HEADER_SIZE] = 2;
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_cancel(&f, NULL, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "scope"));
    wf_frame_status_msg m = {.status = (wf_status)5};
    ck_assert_int_eq(wf_frame_encode_status_msg(WF_FRAME_ERROR, &m, buf, sizeof buf, &len, err,
                                                sizeof err),
                     WF_EINVAL);
    m.status = WF_OK;
    ck_assert_int_eq(wf_frame_encode_status_msg(WF_FRAME_HELLO, &m, buf, sizeof buf, &len, err,
                                                sizeof err),
                     WF_EINVAL);
    ck_assert_int_eq(wf_frame_encode_status_msg(WF_FRAME_ERROR, &m, buf, sizeof buf, &len, err,
                                                sizeof err),
                     WF_OK);
    buf[WF_FRAME_HEADER_SIZE + 3] = 0x40; /* status far outside the enum */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_status(&f, NULL, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "wf_status"));
}
END_TEST

/* ---- artifact frames -------------------------------------------------------------------------------- */

static int32_t blocks_a[64], blocks_b[64];
static wf_frame_transfer_range ranges_mem[16];

static void rand_transfer(trng *r, wf_frame_artifact_transfer *x) {
    memset(x, 0, sizeof *x);
    x->transfer_id = trng_u64(r);
    wf_artifact_kind kind = (wf_artifact_kind)trng_int(r, 0, 3);
    wf_artifact *arts[2] = {&x->src, &x->dst};
    for (int k = 0; k < 2; k++) {
        wf_artifact *a = arts[k];
        a->id = trng_u64(r);
        a->kind = kind;
        a->placement.kind = (wf_placement_kind)trng_int(r, 0, 2);
        a->placement.shard_dim = trng_int(r, 0, 2);
        a->placement.holders.id = trng_u64(r);
        a->placement.holders.n_ranks = trng_int(r, 0, 8);
        for (int i = 0; i < a->placement.holders.n_ranks; i++)
            a->placement.holders.ranks[i] = trng_int(r, 0, 63);
        if (kind == WF_ARTIFACT_KV) {
            int32_t *bt = k ? blocks_b : blocks_a;
            a->n_blocks = trng_int(r, 0, 64);
            for (int i = 0; i < a->n_blocks; i++) bt[i] = trng_int(r, 0, 9999);
            a->block_table = bt;
        } else if (kind == WF_ARTIFACT_LATENT) {
            a->latent.channels = 4;
            a->latent.height = a->latent.width = trng_int(r, 1, 64);
            a->latent.step = trng_int(r, 0, 50);
        } else if (kind == WF_ARTIFACT_IMAGE) {
            a->image.channels = 3;
            a->image.height = a->image.width = trng_int(r, 1, 512);
        }
    }
    x->codec_profile = (uint32_t)trng_int(r, 0, 5);
    x->n_ranges = trng_int(r, 0, 16);
    x->ranges = ranges_mem;
    for (int i = 0; i < x->n_ranges; i++) {
        wf_frame_transfer_range *g = &ranges_mem[i];
        g->src_rank = trng_int(r, 0, 63);
        g->dst_rank = trng_int(r, 0, 63);
        g->shard = trng_int(r, -1, 7);
        g->method = (wf_frame_transfer_method)trng_int(r, 0, 1);
        g->src_offset = trng_u64(r) >> 20;
        g->length = trng_u64(r) >> 24;
        g->dst_offset = trng_u64(r) >> 20;
        g->tag = trng_u64(r);
        x->total_bytes += g->length;
    }
}

START_TEST(worker_info_roundtrip_and_rejections) {
    trng r = {77};
    char err[256];
    size_t len;
    static wf_frame_worker_info m, d; /* 64 codecs: off the stack */
    for (int i = 0; i < 30; i++) {
        memset(&m, 0, sizeof m);
        m.role = (wf_frame_role)trng_int(&r, 0, WF_FRAME_ROLE_COUNT - 1);
        m.n_codecs = i == 1 ? WF_FRAME_MAX_CODECS : trng_int(&r, 0, 6);
        for (int c = 0; c < m.n_codecs; c++) {
            snprintf(m.codecs[c].name, sizeof m.codecs[c].name, "k%dv%d-%d", trng_int(&r, 2, 8),
                     trng_int(&r, 2, 8), c);
            m.codecs[c].cr = 1.0f + (float)trng_int(&r, 0, 700) / 100.0f;
            m.codecs[c].enc_gbps = 0.01f + (float)trng_int(&r, 0, 5000) / 100.0f;
            m.codecs[c].dec_gbps = 0.01f + (float)trng_int(&r, 0, 5000) / 100.0f;
        }
        ck_assert_int_eq(wf_frame_encode_worker_info(&m, buf, sizeof buf, &len, err, sizeof err), WF_OK);
        wf_frame_view f = open_ok(len);
        ck_assert_int_eq(wf_frame_decode_worker_info(&f, &d, err, sizeof err), WF_OK);
        ck_assert_int_eq(d.role, m.role);
        ck_assert_int_eq(d.n_codecs, m.n_codecs);
        for (int c = 0; c < m.n_codecs; c++) {
            ck_assert_str_eq(d.codecs[c].name, m.codecs[c].name);
            ck_assert(d.codecs[c].cr == m.codecs[c].cr);
            ck_assert(d.codecs[c].enc_gbps == m.codecs[c].enc_gbps);
            ck_assert(d.codecs[c].dec_gbps == m.codecs[c].dec_gbps);
        }
        if (i == 2 && m.n_codecs > 0) {
            check_truncations(buf, len, dec_info);
            maybe_write_seed("frame_control", "worker_info", buf, len);
        }
    }
    /* bad fields: the encoder refuses them, and so does the decoder when a peer sends them */
    memset(&m, 0, sizeof m);
    m.role = WF_FRAME_ROLE_COUNT;
    ck_assert_int_eq(wf_frame_encode_worker_info(&m, buf, sizeof buf, &len, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "role"));
    m.role = WF_FRAME_ROLE_PREFILL;
    m.n_codecs = WF_FRAME_MAX_CODECS + 1;
    ck_assert_int_eq(wf_frame_encode_worker_info(&m, buf, sizeof buf, &len, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "n_codecs"));
    m.n_codecs = 1;
    snprintf(m.codecs[0].name, sizeof m.codecs[0].name, "k4v4");
    m.codecs[0].cr = 3.5f;
    m.codecs[0].enc_gbps = 0.0f / 0.0f; /* NaN */
    m.codecs[0].dec_gbps = 1.0f;
    ck_assert_int_eq(wf_frame_encode_worker_info(&m, buf, sizeof buf, &len, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "k4v4"));
    m.codecs[0].enc_gbps = 2.0f;
    ck_assert_int_eq(wf_frame_encode_worker_info(&m, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    /* payload: role 0, n_codecs 1, name (u16 + 4 bytes) 5, cr 11, enc 15, dec 19 */
    uint8_t keep = buf[WF_FRAME_HEADER_SIZE];
    buf[WF_FRAME_HEADER_SIZE] = WF_FRAME_ROLE_COUNT;
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    wf_frame_view f = open_ok(len);
    ck_assert_int_eq(dec_info(&f, NULL, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "role"));
    buf[WF_FRAME_HEADER_SIZE] = keep;
    memset(buf + WF_FRAME_HEADER_SIZE + 15, 0, 4); /* enc_gbps 0 */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_info(&f, NULL, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "enc_gbps"));
    buf[WF_FRAME_HEADER_SIZE + 1] = 200; /* n_codecs 200 */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_info(&f, NULL, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "n_codecs"));
}
END_TEST

START_TEST(artifact_transfer_roundtrip_random) {
    trng r = {51};
    char err[256];
    size_t len;
    for (int i = 0; i < 200; i++) {
        wf_frame_artifact_transfer x, d;
        rand_transfer(&r, &x);
        ck_assert_msg(wf_frame_encode_artifact_transfer(&x, buf, sizeof buf, &len, err,
                                                        sizeof err) == WF_OK,
                      "%s", err);
        wf_frame_view f = open_ok(len);
        wf_frame_arena a = fresh_arena();
        ck_assert_msg(wf_frame_decode_artifact_transfer(&f, &a, &d, err, sizeof err) == WF_OK,
                      "%s", err);
        ck_assert_uint_eq(d.transfer_id, x.transfer_id);
        ck_assert_uint_eq(d.codec_profile, x.codec_profile);
        ck_assert_uint_eq(d.total_bytes, x.total_bytes);
        const wf_artifact *xa[2] = {&x.src, &x.dst}, *da[2] = {&d.src, &d.dst};
        for (int k = 0; k < 2; k++) {
            ck_assert_uint_eq(xa[k]->id, da[k]->id);
            ck_assert_int_eq(xa[k]->kind, da[k]->kind);
            ck_assert_int_eq(xa[k]->placement.kind, da[k]->placement.kind);
            ck_assert_int_eq(xa[k]->placement.shard_dim, da[k]->placement.shard_dim);
            ck_assert(memcmp(&xa[k]->placement.holders, &da[k]->placement.holders,
                             8 + sizeof(int) +
                                 sizeof(int) * (size_t)xa[k]->placement.holders.n_ranks) == 0);
            if (xa[k]->kind == WF_ARTIFACT_KV) {
                ck_assert_int_eq(xa[k]->n_blocks, da[k]->n_blocks);
                for (int b = 0; b < xa[k]->n_blocks; b++)
                    ck_assert_int_eq(xa[k]->block_table[b], da[k]->block_table[b]);
            } else if (xa[k]->kind == WF_ARTIFACT_LATENT) {
                ck_assert(memcmp(&xa[k]->latent, &da[k]->latent, sizeof xa[k]->latent) == 0);
            } else if (xa[k]->kind == WF_ARTIFACT_IMAGE) {
                ck_assert(memcmp(&xa[k]->image, &da[k]->image, sizeof xa[k]->image) == 0);
            }
        }
        ck_assert_int_eq(d.n_ranges, x.n_ranges);
        for (int k = 0; k < x.n_ranges; k++) {
            ck_assert_int_eq(d.ranges[k].src_rank, x.ranges[k].src_rank);
            ck_assert_int_eq(d.ranges[k].dst_rank, x.ranges[k].dst_rank);
            ck_assert_int_eq(d.ranges[k].shard, x.ranges[k].shard);
            ck_assert_int_eq(d.ranges[k].method, x.ranges[k].method);
            ck_assert_uint_eq(d.ranges[k].src_offset, x.ranges[k].src_offset);
            ck_assert_uint_eq(d.ranges[k].length, x.ranges[k].length);
            ck_assert_uint_eq(d.ranges[k].dst_offset, x.ranges[k].dst_offset);
            ck_assert_uint_eq(d.ranges[k].tag, x.ranges[k].tag);
        }
        if (i < 4) {
            check_truncations(buf, len, dec_xfer);
            char name[32];
            snprintf(name, sizeof name, "transfer_%d", i);
            maybe_write_seed("frame_artifact", name, buf, len);
        }
    }
}
END_TEST

START_TEST(artifact_transfer_rejects_bad_fields) {
    wf_frame_transfer_range g = {.src_rank = 0, .dst_rank = 1, .shard = -1, .length = 10};
    wf_frame_artifact_transfer x = {.transfer_id = 1, .total_bytes = 10, .ranges = &g,
                                    .n_ranges = 1};
    char err[256];
    size_t len;
    ck_assert_int_eq(wf_frame_encode_artifact_transfer(&x, buf, sizeof buf, &len, err,
                                                       sizeof err),
                     WF_OK);
    /* payload: id 8, src artifact (NONE, 0 holders) 23, dst 23, codec 4, total 8, n 4 ->
     * range at 70: src 70, dst 74, shard 78, method 82, src_off 83, length 91 */
    wf_frame_view f;
    wf_frame_arena a = fresh_arena();
    uint8_t save[256];
    memcpy(save, buf, len);
    buf[WF_FRAME_HEADER_SIZE + 82] = 2;
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_xfer(&f, &a, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "method"));
    memcpy(buf, save, len);
    buf[WF_FRAME_HEADER_SIZE + 91] = 11; /* lengths no longer sum to total_bytes */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_xfer(&f, &a, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "total_bytes"));
    memcpy(buf, save, len);
    buf[WF_FRAME_HEADER_SIZE + 78] = 0xfe; /* shard -2 */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_xfer(&f, &a, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "shard"));
    memcpy(buf, save, len);
    buf[WF_FRAME_HEADER_SIZE + 8 + 23 + 8] = WF_ARTIFACT_KV; /* dst kind != src kind */
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_eq(dec_xfer(&f, &a, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "differs"));
    memcpy(buf, save, len);
    buf[WF_FRAME_HEADER_SIZE + 8 + 23 + 8] = WF_ARTIFACT_IMAGE;
    reseal(buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    f = open_ok(len);
    ck_assert_int_ne(dec_xfer(&f, &a, err, sizeof err), WF_OK);
    /* encoder side */
    x.total_bytes = 9;
    ck_assert_int_eq(wf_frame_encode_artifact_transfer(&x, buf, sizeof buf, &len, err,
                                                       sizeof err),
                     WF_EINVAL);
    x.total_bytes = 10;
    x.dst.kind = WF_ARTIFACT_LATENT;
    ck_assert_int_eq(wf_frame_encode_artifact_transfer(&x, buf, sizeof buf, &len, err,
                                                       sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "kind"));
}
END_TEST

START_TEST(transfer_done_roundtrip) {
    trng r = {71};
    for (int i = 0; i < 100; i++) {
        wf_frame_transfer_done x = {.transfer_id = trng_u64(&r), .rank = trng_int(&r, 0, 1023),
                                    .status = (wf_status)trng_int(&r, WF_STATUS_MIN, 1),
                                    .bytes = trng_u64(&r), .elapsed_ns = trng_u64(&r)};
        trng_str(&r, x.message, WF_FRAME_MESSAGE_MAX - 1);
        size_t n;
        ck_assert_int_eq(wf_frame_encode_transfer_done(&x, buf, sizeof buf, &n, NULL, 0), WF_OK);
        wf_frame_view v = open_ok(n);
        wf_frame_transfer_done y;
        ck_assert_int_eq(wf_frame_decode_transfer_done(&v, &y, NULL, 0), WF_OK);
        ck_assert_uint_eq(y.transfer_id, x.transfer_id);
        ck_assert_int_eq(y.rank, x.rank);
        ck_assert_int_eq(y.status, x.status);
        ck_assert_uint_eq(y.bytes, x.bytes);
        ck_assert_uint_eq(y.elapsed_ns, x.elapsed_ns);
        ck_assert_str_eq(y.message, x.message);
    }
    wf_frame_transfer_done m = {.transfer_id = 5, .rank = 3, .status = WF_EIO, .bytes = 1 << 20,
                                .elapsed_ns = 123456};
    snprintf(m.message, sizeof m.message, "peer closed the endpoint");
    size_t len;
    char err[256];
    ck_assert_int_eq(wf_frame_encode_transfer_done(&m, buf, sizeof buf, &len, err, sizeof err),
                     WF_OK);
    wf_frame_view f = open_ok(len);
    wf_frame_transfer_done d;
    ck_assert_int_eq(wf_frame_decode_transfer_done(&f, &d, err, sizeof err), WF_OK);
    ck_assert_uint_eq(d.transfer_id, 5);
    ck_assert_int_eq(d.rank, 3);
    ck_assert_int_eq(d.status, WF_EIO);
    ck_assert_uint_eq(d.bytes, 1 << 20);
    ck_assert_uint_eq(d.elapsed_ns, 123456);
    ck_assert_str_eq(d.message, m.message);
    check_truncations(buf, len, dec_xdone);
    maybe_write_seed("frame_artifact", "transfer_done", buf, len);
    m.rank = -1;
    ck_assert_int_eq(wf_frame_encode_transfer_done(&m, buf, sizeof buf, &len, err, sizeof err),
                     WF_EINVAL);
}
END_TEST

/* ---- streaming reader ------------------------------------------------------------------------------- */

static uint8_t stream_in[1 << 16];
static size_t frame_off[16], frame_len[16];

/* A few frames of different types and sizes back to back. */
static int build_stream(size_t *total) {
    trng r = {61};
    size_t off = 0, len;
    int n = 0;
    wf_frame_hello h;
    rand_hello(&r, &h);
    h.ucx_address_len = h.ucx_address_len > 500 ? 500 : h.ucx_address_len;
    ck_assert_int_eq(wf_frame_encode_hello(&h, stream_in + off, sizeof stream_in - off, &len, NULL,
                                           0),
                     WF_OK);
    frame_off[n] = off, frame_len[n++] = len, off += len;
    wf_frame_drain d = {.deadline_ns = 3};
    ck_assert_int_eq(wf_frame_encode_drain(&d, stream_in + off, sizeof stream_in - off, &len, NULL,
                                           0),
                     WF_OK);
    frame_off[n] = off, frame_len[n++] = len, off += len;
    wf_frame_status_msg m = {.status = WF_EIO};
    snprintf(m.message, sizeof m.message, "disk on fire");
    ck_assert_int_eq(wf_frame_encode_status_msg(WF_FRAME_ERROR, &m, stream_in + off,
                                                sizeof stream_in - off, &len, NULL, 0),
                     WF_OK);
    frame_off[n] = off, frame_len[n++] = len, off += len;
    wf_frame_heartbeat hb = {.seq = 9, .kv_blocks_total = 10};
    ck_assert_int_eq(wf_frame_encode_heartbeat(&hb, stream_in + off, sizeof stream_in - off, &len,
                                               NULL, 0),
                     WF_OK);
    frame_off[n] = off, frame_len[n++] = len, off += len;
    *total = off;
    return n;
}

/* Feeds data in pieces of the given sizes (cycled) and checks every frame comes out whole. */
static void run_stream(size_t total, int n_frames, const size_t *pieces, int n_pieces,
                       size_t cap) {
    static uint8_t sbuf[1 << 16];
    wf_frame_stream s;
    ck_assert_int_eq(wf_frame_stream_init(&s, sbuf, cap, cap - WF_FRAME_HEADER_SIZE), WF_OK);
    size_t fed = 0;
    int got = 0, piece = 0;
    char err[256];
    while (got < n_frames) {
        size_t want = pieces[piece++ % n_pieces];
        if (want > total - fed) want = total - fed;
        size_t used;
        ck_assert_int_eq(wf_frame_stream_feed(&s, stream_in + fed, want, &used), WF_OK);
        fed += used;
        wf_frame_view f;
        wf_status st;
        while ((st = wf_frame_stream_next(&s, &f, err, sizeof err)) == WF_OK) {
            ck_assert_int_lt(got, n_frames);
            ck_assert_uint_eq(f.frame_len, frame_len[got]);
            ck_assert(memcmp(f.payload, stream_in + frame_off[got] + WF_FRAME_HEADER_SIZE,
                             f.hdr.payload_len) == 0);
            got++;
        }
        ck_assert_msg(st == WF_IN_PROGRESS, "%s", err);
        ck_assert_msg(used > 0 || got == n_frames || want == 0, "stream stalled");
    }
    ck_assert_uint_eq(fed, total);
}

START_TEST(stream_split_at_every_offset) {
    size_t total;
    int n = build_stream(&total);
    size_t max_frame = 0;
    for (int i = 0; i < n; i++) max_frame = frame_len[i] > max_frame ? frame_len[i] : max_frame;
    for (size_t split = 0; split <= total; split++) {
        size_t pieces[2] = {split, total - split};
        run_stream(total, n, pieces, 2, sizeof stream_in);
    }
    size_t one = 1;
    run_stream(total, n, &one, 1, sizeof stream_in);
    /* a buffer that holds just the largest frame: feed takes what fits */
    size_t big = total;
    run_stream(total, n, &big, 1, max_frame);
    size_t odd[3] = {7, 100, 3};
    run_stream(total, n, odd, 3, max_frame + 5);
}
END_TEST

START_TEST(stream_errors_are_early_and_sticky) {
    static uint8_t sbuf[4096];
    wf_frame_stream s;
    char err[256];
    wf_frame_view f;
    size_t used;
    ck_assert_int_eq(wf_frame_stream_init(&s, sbuf, 100, 200), WF_EINVAL);
    /* a frame announcing a payload over the limit is refused once its header is in, before any
     * payload byte arrives */
    ck_assert_int_eq(wf_frame_stream_init(&s, sbuf, sizeof sbuf, 16), WF_OK);
    size_t len = make_drain(1);
    wf_frame_header h = {.major = 1, .type = WF_FRAME_DRAIN, .payload_len = 1000};
    wf_frame_write_header(&h, buf);
    ck_assert_int_eq(wf_frame_stream_feed(&s, buf, WF_FRAME_HEADER_SIZE - 1, &used), WF_OK);
    ck_assert_int_eq(wf_frame_stream_next(&s, &f, err, sizeof err), WF_IN_PROGRESS);
    ck_assert_int_eq(wf_frame_stream_feed(&s, buf + WF_FRAME_HEADER_SIZE - 1, 1, &used), WF_OK);
    ck_assert_int_eq(wf_frame_stream_next(&s, &f, err, sizeof err), WF_ERANGE);
    ck_assert_ptr_nonnull(strstr(err, "exceeds the limit"));
    /* sticky */
    ck_assert_int_eq(wf_frame_stream_feed(&s, buf, 4, &used), WF_ERANGE);
    ck_assert_uint_eq(used, 0);
    ck_assert_int_eq(wf_frame_stream_next(&s, &f, err, sizeof err), WF_ERANGE);
    /* garbage in front of a frame */
    ck_assert_int_eq(wf_frame_stream_init(&s, sbuf, sizeof sbuf, 1024), WF_OK);
    len = make_drain(1);
    ck_assert_int_eq(wf_frame_stream_feed(&s, "x", 1, &used), WF_OK);
    ck_assert_int_eq(wf_frame_stream_feed(&s, buf, len, &used), WF_OK);
    ck_assert_int_eq(wf_frame_stream_next(&s, &f, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "magic"));
    /* a corrupt payload is caught when the frame completes */
    ck_assert_int_eq(wf_frame_stream_init(&s, sbuf, sizeof sbuf, 1024), WF_OK);
    len = make_drain(1);
    buf[len - 1] ^= 0xff;
    ck_assert_int_eq(wf_frame_stream_feed(&s, buf, len - 1, &used), WF_OK);
    ck_assert_int_eq(wf_frame_stream_next(&s, &f, err, sizeof err), WF_IN_PROGRESS);
    ck_assert_int_eq(wf_frame_stream_feed(&s, buf + len - 1, 1, &used), WF_OK);
    ck_assert_int_eq(wf_frame_stream_next(&s, &f, err, sizeof err), WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "checksum"));
}
END_TEST

/* VMODEL / VMODEL_ACK: round trips, truncations, and the fields decoders refuse (num 0, an
 * op outside the enum, an add without a spec, a spec at the size bound). */
START_TEST(vmodel_frames) {
    char err[256];
    size_t len;
    const char *spec = "{\"id\":\"sql\",\"adapters\":[{\"path\":\"/a/sql.gguf\",\"scale\":0.5}]}";
    wf_frame_vmodel m = {.op = WF_FRAME_VMODEL_ADD, .num = 0xdeadbeefu, .spec = spec};
    ck_assert_int_eq(wf_frame_encode_vmodel(&m, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    wf_frame_view f = open_ok(len);
    wf_frame_arena a = fresh_arena();
    wf_frame_vmodel d;
    ck_assert_msg(wf_frame_decode_vmodel(&f, &a, &d, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_int_eq(d.op, WF_FRAME_VMODEL_ADD);
    ck_assert_uint_eq(d.num, m.num);
    ck_assert_str_eq(d.spec, spec);
    check_truncations(buf, len, dec_vmodel);
    maybe_write_seed("frame_control", "vmodel", buf, len);
    /* a byte of op outside the enum */
    buf[WF_FRAME_HEADER_SIZE] = 7;
    wf_frame_header h = f.hdr;
    h.payload_crc = wf_frame_crc32c(0, buf + WF_FRAME_HEADER_SIZE, h.payload_len);
    wf_frame_write_header(&h, buf);
    f = open_ok(len);
    a = fresh_arena();
    ck_assert_int_eq(wf_frame_decode_vmodel(&f, &a, &d, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "op"));

    wf_frame_vmodel rm = {.op = WF_FRAME_VMODEL_REMOVE, .num = 42};
    ck_assert_int_eq(wf_frame_encode_vmodel(&rm, buf, sizeof buf, &len, err, sizeof err), WF_OK);
    f = open_ok(len);
    a = fresh_arena();
    ck_assert_int_eq(wf_frame_decode_vmodel(&f, &a, &d, err, sizeof err), WF_OK);
    ck_assert_int_eq(d.op, WF_FRAME_VMODEL_REMOVE);
    ck_assert_uint_eq(d.num, 42);
    ck_assert_str_eq(d.spec, "");

    wf_frame_vmodel bad = {.op = WF_FRAME_VMODEL_ADD, .num = 0, .spec = spec};
    ck_assert_int_eq(wf_frame_encode_vmodel(&bad, buf, sizeof buf, &len, err, sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "num 0"));
    bad = (wf_frame_vmodel){.op = WF_FRAME_VMODEL_ADD, .num = 1, .spec = ""};
    ck_assert_int_eq(wf_frame_encode_vmodel(&bad, buf, sizeof buf, &len, err, sizeof err),
                     WF_EINVAL);
    static char big[WF_FRAME_VMODEL_SPEC_MAX + 1];
    memset(big, 'x', WF_FRAME_VMODEL_SPEC_MAX);
    big[WF_FRAME_VMODEL_SPEC_MAX] = 0;
    bad.spec = big;
    ck_assert_int_eq(wf_frame_encode_vmodel(&bad, buf, sizeof buf, &len, err, sizeof err),
                     WF_EINVAL);
    big[WF_FRAME_VMODEL_SPEC_MAX - 1] = 0; /* the largest that fits */
    ck_assert_int_eq(wf_frame_encode_vmodel(&bad, buf, sizeof buf, &len, err, sizeof err), WF_OK);

    wf_frame_vmodel_ack k = {.op = WF_FRAME_VMODEL_ADD, .num = 9, .status = WF_EFORMAT};
    snprintf(k.message, sizeof k.message, "adapter /a/sql.gguf: truncated");
    ck_assert_int_eq(wf_frame_encode_vmodel_ack(&k, buf, sizeof buf, &len, err, sizeof err),
                     WF_OK);
    f = open_ok(len);
    wf_frame_vmodel_ack kd;
    ck_assert_int_eq(wf_frame_decode_vmodel_ack(&f, &kd, err, sizeof err), WF_OK);
    ck_assert_int_eq(kd.op, k.op);
    ck_assert_uint_eq(kd.num, 9);
    ck_assert_int_eq(kd.status, WF_EFORMAT);
    ck_assert_str_eq(kd.message, k.message);
    check_truncations(buf, len, dec_vmodel_ack);
    maybe_write_seed("frame_control", "vmodel_ack", buf, len);
    /* another frame type is refused */
    ck_assert_int_eq(wf_frame_decode_vmodel(&f, &a, &d, err, sizeof err), WF_EPROTO);
}
END_TEST

START_TEST(seeds_valid) {
    ck_assert_int_ge(check_committed_seeds("frame_control", dec_control), 12);
    ck_assert_int_ge(check_committed_seeds("frame_artifact", dec_artifact), 5);
}
END_TEST

static Suite *frame_suite(void) {
    Suite *s = suite_create("proto/frame");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, crc32c_known_values);
    tcase_add_test(tc, envelope_rejections);
    tcase_add_test(tc, hello_of_another_major_is_heard);
    tcase_add_test(tc, version_negotiation);
    tcase_add_test(tc, hello_roundtrip_random);
    tcase_add_test(tc, hello_rejects_bad_fields);
    tcase_add_test(tc, welcome_and_world_table_roundtrip);
    tcase_add_test(tc, welcome_rejects_bad_fields);
    tcase_add_test(tc, small_control_frames_roundtrip);
    tcase_add_test(tc, worker_info_roundtrip_and_rejections);
    tcase_add_test(tc, artifact_transfer_roundtrip_random);
    tcase_add_test(tc, artifact_transfer_rejects_bad_fields);
    tcase_add_test(tc, transfer_done_roundtrip);
    tcase_add_test(tc, stream_split_at_every_offset);
    tcase_add_test(tc, stream_errors_are_early_and_sticky);
    tcase_add_test(tc, vmodel_frames);
    tcase_add_test(tc, seeds_valid);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(frame_suite)
