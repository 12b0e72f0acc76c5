/* Internals of engine/world shared by world.c, world_wire.c and their tests: the rank table
 * entry and the bootstrap / membership messages that carry it. Not a public header. */
#ifndef WF_ENGINE_WORLD_IMPL_H
#define WF_ENGINE_WORLD_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/world/world.h"
#include "proto/base/status.h"

#define WF__WORLD_MAX_BLOB 65536u        /* bound of a worker address or packed rkey */
#define WF__WORLD_MAX_FRAME (32u << 20)  /* bound of one bootstrap frame */

/* A message type is three letters and the bootstrap version ("WFH1"). A peer of another version
 * is told so, not dropped: a refusing WELCOME is the 20-byte header alone, a layout every
 * version keeps, so the other side can read it and name both versions. */
#define WF__WORLD_MSG_VERSION '1'
#define WF__WORLD_MSG_FAMILY(type) ((type) & 0x00FFFFFFu)
#define WF__WORLD_MSG_VERSION_OF(type) ((char)((type) >> 24))

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
 * out-of-range fields, another version), WF_ENOMEM. On error *out holds nothing to free; its
 * header fields (type, rank, n_ranks, status) are kept as read, so that a caller can tell a
 * message of another version from garbage. */
wf_status wf__world_msg_decode(const uint8_t *p, size_t n, wf__world_msg *out);
void wf__world_msg_free(wf__world_msg *m);

/* Used by engine/gfc (same library). */
/* The next collective sequence number of group `id` on this rank; every sequence restarts at 0
 * when the world epoch changes. Allocates only when a group is first seen. Returns 0 and sets
 * *seq, or -1 when out of memory. */
int wf__world_next_seq(wf_world *w, uint64_t id, uint32_t *seq);
/* A per-world scratch area of at least `bytes` (grown on demand, kept until destroy; registered
 * memory from wf_world_mem_alloc when UCX can allocate it, so peers put into it directly); NULL
 * when out of memory. Valid until the next call. */
void *wf__world_scratch(wf_world *w, size_t bytes);

/* The registration cache of engine/world/world_mem.c (one per world). */
typedef struct wf__mcache wf__mcache;
/* ucp_ctx is the world's ucp_context_h. NULL when out of memory. Without UCX's memory events
 * (UCX_MEM_EVENTS=no) registrations of caller memory are not kept: each lasts until the next
 * expose, which is enough for blocking collectives that expose one buffer at a time. */
wf__mcache *wf__mcache_create(void *ucp_ctx);
/* 1 if UCX's memory events reach this process (installs the handler once; never under TSan). */
int wf__mcache_events(void);
void wf__mcache_destroy(wf__mcache *c);
int wf__mcache_cached(const wf__mcache *c);
wf_status wf__mcache_expose(wf__mcache *c, void *buf, size_t len, wf_world_region *out,
                            wf_world_stats *stats, char *err, size_t errlen);
void *wf__mcache_alloc(wf__mcache *c, size_t len);
/* Returns 1 if p was allocated by wf__mcache_alloc (and is now freed), else 0. */
int wf__mcache_free(wf__mcache *c, void *p);
int wf__mcache_owned(wf__mcache *c, const void *buf, size_t len);
/* Whether this world keeps registrations of caller memory between calls. */
int wf__world_mem_cached(const wf_world *w);
/* Whether waits can sleep on UCX's wake-up descriptor (else they only yield). */
int wf__world_has_wakeup(const wf_world *w);

#define WF__WORLD_PUT_THRESHOLD (64u << 10) /* measured: BENCHMARKS.md, comm section */

/* The size from which engine/gfc moves a pair's data with puts into the receiver's exposed
 * buffer instead of tagged messages (SIZE_MAX: never). Every member must use the same. */
size_t wf__world_put_threshold(const wf_world *w);
void wf__world_set_put_threshold(wf_world *w, size_t bytes);
/* Whether large receives into caller memory (not wf_world_mem_alloc's) are taken as puts. */
int wf__world_put_caller_memory(const wf_world *w);
void wf__world_set_put_caller_memory(wf_world *w, int on);
/* Whether buf[0..len) lies in one block of wf_world_mem_alloc memory. */
int wf__world_mem_owned(wf_world *w, const void *buf, size_t len);

/* Where peer r's exposed region (received from it) is mapped in this process, for loads and
 * stores of reg->len bytes from the returned address; NULL when this process cannot map it
 * (r on another host, memory not allocated by UCX in shared memory, a key UCX refuses). */
void *wf__world_region_map(wf_world *w, int r, const wf_world_region *reg);

/* ---- world_copy.c --------------------------------------------------------------------------- */
/* memcpy, with stores that bypass the cache for copies of at least wf__world_stream_min()
 * bytes (a quarter of the last-level cache); the stores are fenced before it returns, so
 * anything this thread writes afterwards becomes visible after the copy. */
void wf__world_copy(void *dst, const void *src, size_t n);
/* The same with the choice made by the caller (stream: 1), e.g. for a piece of a larger copy. */
void wf__world_copy_as(void *dst, const void *src, size_t n, int stream);
size_t wf__world_stream_min(void);
/* Exchanges a[0..n) and b[0..n) (not overlapping): the in-place all-to-all's swap of a pair's
 * blocks through mapped memory. SIMD width chosen at run time. */
void wf__world_swap(void *a, void *b, size_t n);

#endif
