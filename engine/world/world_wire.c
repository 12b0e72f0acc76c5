/* Encoding and decoding of the world's bootstrap and membership messages (little-endian,
 * length-checked). Decoding takes bytes from the network, so it trusts no length field. */
#include "engine/world/world_impl.h"

#include <stdlib.h>
#include <string.h>

#include "engine/world/world.h"

void wf__world_entry_free(wf__world_entry *e) {
    if (!e) return;
    free(e->addr);
    free(e->rkey);
    e->addr = e->rkey = NULL;
    e->addr_len = e->rkey_len = 0;
}

static void wbuf_reserve(wf__wbuf *b, size_t more) {
    if (b->oom) return;
    if (b->len + more <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

void wf__wbuf_bytes(wf__wbuf *b, const void *p, size_t n) {
    wbuf_reserve(b, n);
    if (b->oom || n == 0) return;
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void wf__wbuf_u32(wf__wbuf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    wf__wbuf_bytes(b, x, 4);
}

void wf__wbuf_u64(wf__wbuf *b, uint64_t v) {
    wf__wbuf_u32(b, (uint32_t)v);
    wf__wbuf_u32(b, (uint32_t)(v >> 32));
}

void wf__wbuf_entry(wf__wbuf *b, const wf__world_entry *e) {
    wf__wbuf_u32(b, e->incarnation);
    wf__wbuf_u32(b, e->pid);
    wf__wbuf_u64(b, e->start_ticks);
    wf__wbuf_bytes(b, e->host, sizeof e->host);
    wf__wbuf_bytes(b, e->node, sizeof e->node);
    wf__wbuf_u64(b, e->sym_addr);
    wf__wbuf_u64(b, e->sym_size);
    wf__wbuf_u32(b, e->addr_len);
    wf__wbuf_u32(b, e->rkey_len);
    wf__wbuf_bytes(b, e->addr, e->addr_len);
    wf__wbuf_bytes(b, e->rkey, e->rkey_len);
}

typedef struct rbuf {
    const uint8_t *p;
    size_t len, pos;
    int bad;
} rbuf;

static const uint8_t *take(rbuf *r, size_t n) {
    if (r->bad || r->len - r->pos < n) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *q = r->p + r->pos;
    r->pos += n;
    return q;
}

static uint32_t get_u32(rbuf *r) {
    const uint8_t *q = take(r, 4);
    if (!q) return 0;
    return (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
}

static uint64_t get_u64(rbuf *r) {
    uint64_t lo = get_u32(r);
    return lo | (uint64_t)get_u32(r) << 32;
}

static wf_status get_blob(rbuf *r, uint32_t len, uint8_t **out) {
    *out = NULL;
    if (len == 0 || len > WF__WORLD_MAX_BLOB) return WF_EFORMAT;
    const uint8_t *q = take(r, len);
    if (!q) return WF_EFORMAT;
    *out = malloc(len);
    if (!*out) return WF_ENOMEM;
    memcpy(*out, q, len);
    return WF_OK;
}

static wf_status get_entry(rbuf *r, wf__world_entry *e) {
    memset(e, 0, sizeof *e);
    e->incarnation = get_u32(r);
    e->pid = get_u32(r);
    e->start_ticks = get_u64(r);
    const uint8_t *h = take(r, sizeof e->host);
    const uint8_t *nd = take(r, sizeof e->node);
    e->sym_addr = get_u64(r);
    e->sym_size = get_u64(r);
    uint32_t addr_len = get_u32(r), rkey_len = get_u32(r);
    if (r->bad) return WF_EFORMAT;
    memcpy(e->host, h, sizeof e->host);
    memcpy(e->node, nd, sizeof e->node);
    /* Strings come from the peer: terminate them whatever it sent. */
    e->host[sizeof e->host - 1] = '\0';
    e->node[sizeof e->node - 1] = '\0';
    if (e->incarnation == 0) return WF_EFORMAT;
    wf_status st = get_blob(r, addr_len, &e->addr);
    if (st != WF_OK) return st;
    e->addr_len = addr_len;
    st = get_blob(r, rkey_len, &e->rkey);
    if (st != WF_OK) {
        wf__world_entry_free(e);
        return st;
    }
    e->rkey_len = rkey_len;
    return WF_OK;
}

void wf__world_msg_free(wf__world_msg *m) {
    if (!m) return;
    for (int i = 0; i < m->n_entries; i++) wf__world_entry_free(&m->entries[i]);
    free(m->entries);
    m->entries = NULL;
    m->n_entries = 0;
}

wf_status wf__world_msg_decode(const uint8_t *p, size_t n, wf__world_msg *out) {
    memset(out, 0, sizeof *out);
    rbuf r = {.p = p, .len = n};
    out->type = get_u32(&r);
    out->rank = (int32_t)get_u32(&r);
    out->n_ranks = (int32_t)get_u32(&r);
    out->status = (int32_t)get_u32(&r);
    out->epoch = get_u32(&r);
    if (r.bad) return WF_EFORMAT;
    if (out->n_ranks < 1 || out->n_ranks > WF_WORLD_MAX_RANKS) return WF_EFORMAT;
    int n_entries;
    switch (out->type) {
    case WF__WORLD_MSG_HELLO:
        if (out->rank < -1 || out->rank >= out->n_ranks) return WF_EFORMAT;
        n_entries = 1;
        break;
    case WF__WORLD_MSG_UPDATE:
        if (out->rank < 0 || out->rank >= out->n_ranks) return WF_EFORMAT;
        n_entries = 1;
        break;
    case WF__WORLD_MSG_WELCOME:
        if (out->status > 0 || out->status < WF_STATUS_MIN) return WF_EFORMAT;
        if (out->status != WF_OK) {
            n_entries = 0;
            break;
        }
        if (out->rank < 0 || out->rank >= out->n_ranks) return WF_EFORMAT;
        n_entries = out->n_ranks;
        break;
    default:
        return WF_EFORMAT;
    }
    if (n_entries > 0) {
        out->entries = calloc((size_t)n_entries, sizeof *out->entries);
        if (!out->entries) return WF_ENOMEM;
    }
    for (int i = 0; i < n_entries; i++) {
        wf_status st = get_entry(&r, &out->entries[i]);
        if (st != WF_OK) {
            wf__world_msg_free(out);
            return st;
        }
        out->n_entries = i + 1;
    }
    if (r.pos != r.len) {
        wf__world_msg_free(out);
        return WF_EFORMAT;
    }
    return WF_OK;
}
