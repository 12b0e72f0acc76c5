/* Internals of engine/world shared by world.c, world_wire.c and their tests: the rank table
 * entry and the bootstrap / membership messages that carry it. Not a public header. */
#ifndef WF_ENGINE_WORLD_IMPL_H
#define WF_ENGINE_WORLD_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

#define WF__WORLD_MAX_BLOB 65536u        /* bound of a worker address or packed rkey */
#define WF__WORLD_MAX_FRAME (32u << 20)  /* bound of one bootstrap frame */

enum {
    WF__WORLD_MSG_HELLO = 0x31484657u,   /* "WFH1": joiner -> coordinator */
    WF__WORLD_MSG_WELCOME = 0x31574657u, /* "WFW1": coordinator -> joiner, the rank table */
    WF__WORLD_MSG_UPDATE = 0x31554657u,  /* "WFU1": coordinator -> ranks, a refilled slot */
};

/* One rank as the others see it. addr and rkey are malloc'd and owned by the entry. */
typedef struct wf__world_entry {
    uint32_t incarnation;
    uint32_t pid;
    uint64_t start_ticks;  /* the process's start time (/proc/PID/stat), to tell pid reuse */
    char host[64];         /* host name, for messages */
    char node[40];         /* boot id: processes with equal ids share a kernel (liveness) */
    uint64_t sym_addr, sym_size;
    uint32_t addr_len, rkey_len;
    uint8_t *addr, *rkey;
} wf__world_entry;

void wf__world_entry_free(wf__world_entry *e);

/* A growable byte buffer for encoding. */
typedef struct wf__wbuf {
    uint8_t *p;
    size_t len, cap;
    int oom;
} wf__wbuf;

void wf__wbuf_u32(wf__wbuf *b, uint32_t v);
void wf__wbuf_u64(wf__wbuf *b, uint64_t v);
void wf__wbuf_bytes(wf__wbuf *b, const void *p, size_t n);
void wf__wbuf_entry(wf__wbuf *b, const wf__world_entry *e);

/* Decoded messages. Entries are owned by the message; free with wf__world_msg_free. */
typedef struct wf__world_msg {
    uint32_t type;
    int32_t rank;          /* HELLO: the wanted slot (-1 any); WELCOME/UPDATE: the slot */
    int32_t n_ranks;
    int32_t status;        /* WELCOME: WF_OK, or why the join was refused */
    uint32_t epoch;        /* WELCOME / UPDATE */
    int n_entries;         /* HELLO, UPDATE: 1; WELCOME: n_ranks (or 0 when refused) */
    wf__world_entry *entries;
} wf__world_msg;

/* Parses one message from untrusted bytes. Returns WF_OK, WF_EFORMAT (malformed, truncated,
 * out-of-range fields), WF_ENOMEM. On error *out holds nothing to free. */
wf_status wf__world_msg_decode(const uint8_t *p, size_t n, wf__world_msg *out);
void wf__world_msg_free(wf__world_msg *m);

/* Used by engine/gfc (same library). */
typedef struct wf_world wf_world;
/* The next collective sequence number of group `id` on this rank; every sequence restarts at 0
 * when the world epoch changes. Allocates only when a group is first seen. Returns 0 and sets
 * *seq, or -1 when out of memory. */
int wf__world_next_seq(wf_world *w, uint64_t id, uint32_t *seq);
/* A per-world scratch area of at least `bytes` (grown on demand, kept until destroy); NULL when
 * out of memory. Valid until the next call. */
void *wf__world_scratch(wf_world *w, size_t bytes);

#endif
