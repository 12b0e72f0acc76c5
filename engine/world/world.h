/* The world: every weft process (rank 0 the coordinator, ranks 1..n-1 the workers) as one fixed
 * set of ranks that reach each other over UCX. The world is formed once: a TCP bootstrap on
 * rank 0's HOST:PORT exchanges UCX worker addresses and the remote key of one registered
 * symmetric buffer per rank; after that every byte goes over UCX (shared memory on one host,
 * TCP or RDMA across hosts: UCX chooses; UCX_TLS and the other UCX_* variables pass through).
 *
 *     wf_world_config cfg = wf_world_config_default();
 *     cfg.n_ranks = 4; cfg.rank = my_rank;            // 0: coordinator; -1: "any free slot"
 *     cfg.host = "127.0.0.1"; cfg.port = 7000;
 *     wf_world *w;
 *     char err[256];
 *     if (wf_world_create(&cfg, &w, err, sizeof err) != WF_OK) { fprintf(stderr, "%s\n", err); ... }
 *     wf_world_op op = {.kind = WF_WORLD_SEND, .peer = 1, .tag = {.kind = WF_WORLD_TAG_USER},
 *                       .buf = frame, .len = frame_len};
 *     wf_status st = wf_world_run(w, &op, 1);       // posts and waits, bounded by cfg.timeout_ms
 *     if (st != WF_OK) fprintf(stderr, "%s (rank %d)\n", wf_world_error(w), wf_world_error_rank(w));
 *     wf_world_destroy(w);
 *
 * Failures: every wait is bounded by cfg.timeout_ms. A peer whose endpoint reports an error
 * (UCP_ERR_HANDLING_MODE_PEER) or whose process is gone (same host: checked via /proc) gives
 * WF_EPEER; a peer that does not answer in time (stopped, stuck) gives WF_ETIMEDOUT. Either way
 * wf_world_error_rank() names the rank and wf_world_error() says what was waited for.
 *
 * Replacement: a process that died can be replaced by a new process created with cfg.rank set
 * to the dead slot. Rank 0 admits it (wf_world_admit), gives the slot a new incarnation, bumps
 * the world epoch and sends the new entry to every other rank over UCX; they apply it in any
 * progress call (or wait for it with wf_world_wait_epoch). Tags carry the epoch, so traffic of
 * collectives broken by the failure can never match a receive of the new epoch. Rank 0 itself
 * cannot be replaced. WF_WORLD_TAG_USER messages (proto/ frames) are the exception: their tags
 * carry no epoch, so a frame sent just before an admission still matches a receive posted after
 * it; frames carry their own ids (batch iterations) to tell stale ones.
 *
 * Threading: a world is driven by one thread at a time (UCX runs in UCS_THREAD_MODE_SERIALIZED:
 * callers may hand a world between threads with their own synchronisation, never call it from
 * two at once). Nothing here starts threads of its own (UCX may, for its async events). */
#ifndef WF_ENGINE_WORLD_H
#define WF_ENGINE_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

#define WF_WORLD_MAX_RANKS 256 /* the tag layout spends 8 bits on the source rank */

typedef struct wf_world wf_world;

typedef struct wf_world_config {
    int n_ranks;            /* world size, fixed at creation (1..WF_WORLD_MAX_RANKS) */
    int rank;               /* 0 for the coordinator; a slot to fill; or -1 for any free slot */
    const char *host;       /* rank 0's bootstrap address ("127.0.0.1") */
    int port;               /* rank 0's bootstrap TCP port */
    size_t sym_size;        /* bytes of this rank's registered symmetric buffer */
    int timeout_ms;         /* bound of every wait on peers */
    /* 1 (default): endpoints to peers on this host (same boot id) do without UCX's peer-error
     * handling, so that UCX may use shared memory and CMA for them (UCX 1.13 offers peer-error
     * handling only over TCP: with it every byte between two local ranks went over loopback
     * TCP, see BENCHMARKS.md). Their failures are still found: the /proc liveness check, and
     * the wait bound for a stuck one. 0: every endpoint with UCX's peer-error handling (what
     * the world also does when UCX_TLS names no shared-memory transport, e.g. "tcp,self"). */
    int local_fast_path;
    int join_timeout_ms;    /* bound for the whole world to form (or a replacement to join) */
    /* Optional, rank 0: polled (every 100 ms) while waiting for joiners; nonzero gives up at
     * once (e.g. a worker process it started has already exited). */
    int (*join_abort)(void *arg);
    void *join_abort_arg;
    /* Optional, rank 0: a socket already listening on host:port (wf_world_boot_socket), which
     * the world takes over (closed with it, also when create fails); -1 (default): the world
     * binds host:port itself. A coordinator that lets the system pick the port holds it from
     * that moment, with no window in which another process can take it. */
    int listen_fd;
} wf_world_config;

/* A TCP socket listening on host:*port for a world's bootstrap (*port 0: a free port, written
 * back). Returns the socket, or -1 with err saying why. */
int wf_world_boot_socket(const char *host, int *port, char *err, size_t errlen);

/* n_ranks 1, rank 0, host 127.0.0.1, port 0 (must be set), sym 4 MiB, 10 s, 30 s, local fast
 * path on, no listening socket given. */
wf_world_config wf_world_config_default(void);

/* Forms the world (rank 0 waits for all n_ranks - 1 others; the others join) or, when cfg.rank
 * names a slot of a world that is already formed, joins as that slot's replacement. On error
 * *out is NULL and err says why (a join time-out names the slots that never joined).
 * Returns WF_OK, WF_EINVAL, WF_ENOMEM, WF_EIO (socket or UCX set-up), WF_ETIMEDOUT, WF_EPROTO. */
wf_status wf_world_create(const wf_world_config *cfg, wf_world **out, char *err, size_t errlen);

/* Closes endpoints, frees the symmetric buffer and UCX. NULL is a no-op. */
void wf_world_destroy(wf_world *w);

int wf_world_rank(const wf_world *w);
int wf_world_size(const wf_world *w);
/* The membership epoch: 0 when formed, +1 at every admitted replacement. */
uint32_t wf_world_epoch(const wf_world *w);
/* How many times a slot was filled (1 for a slot that never failed). */
uint32_t wf_world_incarnation(const wf_world *w, int rank);
/* This rank's symmetric buffer (registered, cfg.sym_size bytes) and its size. */
void *wf_world_sym(const wf_world *w);
size_t wf_world_sym_size(const wf_world *w);
/* The configured wait bound; can be changed at any time (ms > 0). */
int wf_world_timeout_ms(const wf_world *w);
void wf_world_set_timeout_ms(wf_world *w, int ms);
/* The bound of wf_world_admit (and of joins); ms > 0. */
void wf_world_set_join_timeout_ms(wf_world *w, int ms);
/* 1: a wait whose pending ops are all receives sleeps on UCX's wake-up descriptor once it has
 * seen no event for 50 us (instead of yielding in a loop), so that ranks outnumbering cores
 * leave the cores to the ranks still working (BENCHMARKS.md: 4 ranks on 2 cores, 64 MiB
 * all-to-all). 0 (default): waits yield only. Off by default because weftd's PD fault test
 * (a decode worker SIGKILLed during KV transfers) ended requests with "prefill task failed:
 * closed" instead of naming the lost rank when every wait could sleep; the cause is not
 * found. */
void wf_world_set_idle_sleep(wf_world *w, int on);

/* The last error's description ("" if none) and the rank it names (-1 if none). */
const char *wf_world_error(const wf_world *w);
int wf_world_error_rank(const wf_world *w);

/* ---- tags --------------------------------------------------------------------------------- */
/* A 64-bit UCX tag is laid out as kind:4 | source rank:8 | epoch:8 | group:16 | seq:20 | step:8,
 * so messages of different kinds, groups, collective sequence numbers and steps never match
 * each other's receives, and a message from an old epoch never matches a new receive. The
 * source rank and epoch are filled in by the world. */
enum {
    WF_WORLD_TAG_CTRL = 0, /* the world's own membership messages */
    WF_WORLD_TAG_COLL = 1, /* collectives (engine/gfc) */
    WF_WORLD_TAG_P2P = 2,  /* group send/recv (engine/gfc) */
    WF_WORLD_TAG_USER = 3, /* task dispatch, events and other frames */
};

typedef struct wf_world_tag {
    uint8_t kind;     /* WF_WORLD_TAG_* (4 bits) */
    uint64_t group;   /* a group id; its low 16 bits go into the tag */
    uint32_t seq;     /* a sequence number; low 20 bits */
    uint8_t step;     /* a step within one operation */
} wf_world_tag;

/* ---- point-to-point operations -------------------------------------------------------------- */
typedef enum wf_world_op_kind {
    WF_WORLD_SEND = 0, /* tagged send of buf[0..len) to peer */
    WF_WORLD_RECV,     /* tagged receive from peer into buf (at most len bytes) */
    WF_WORLD_PUT,      /* RMA write of buf[0..len) into peer's symmetric buffer at offset, or
                        * into op.region (a peer's exposed region) at offset */
    WF_WORLD_FLUSH,    /* completes when every PUT posted so far to peer is complete at peer */
} wf_world_op_kind;

/* ---- exposed regions: puts straight into a peer's own buffers --------------------------------
 * A rank exposes any buffer of its own (wf_world_mem_expose) and sends the region to the peers
 * that will write it (as a message: wf_world_region_wire_size bytes of the struct); they PUT
 * into it with op.region set. Registrations are cached per (pointer, size) and by containment,
 * so exposing the same buffer again costs a lookup; memory unmapped from the process (munmap,
 * free of a large block, sbrk shrink: UCX's memory events) drops the cached registrations it
 * overlaps, so a buffer freed and allocated again at the same address is registered anew.
 * Peers cache the unpacked remote keys per (rank, region id); ids are never reused.
 * Memory from wf_world_mem_alloc is registered for the transports that map a peer's memory
 * (shared memory on one host): puts into it are one copy by the writer, done by the world
 * itself inside wf_world_post (complete when it returns; copies of at least a quarter of the
 * last-level cache use stores that bypass the cache) instead of by UCX. Other memory is
 * reached by what UCX offers for it (CMA, RDMA, or its active-message emulation that needs the
 * target to progress, as every wait here does). */
#define WF_WORLD_RKEY_MAX 1024

typedef struct wf_world_region {
    uint64_t id;        /* the registration's id, unique in the owner's process; 0: no
                         * registration and no key (an empty region, or one not exposed) */
    uint64_t addr;      /* the owner's address of the region */
    uint64_t len;
    uint32_t rkey_len;  /* bytes of rkey used */
    uint32_t reserved;
    uint8_t rkey[WF_WORLD_RKEY_MAX]; /* the packed remote key of the registration */
} wf_world_region;

/* Registers buf[0..len) (or finds the cached registration that contains it) and describes it
 * in *out. The buffer must stay allocated while peers may write it. Without UCX's memory events
 * (UCX_MEM_EVENTS=no, TSan builds) nothing is cached: a registration of caller memory lasts
 * until the next expose (enough for blocking collectives, which expose one buffer at a time). len 0 is allowed (an
 * empty region, id 0, nothing registered). Returns WF_OK, WF_EINVAL, WF_EIO (UCX refused the
 * registration; the message says why), WF_ENOMEM. */
wf_status wf_world_mem_expose(wf_world *w, void *buf, size_t len, wf_world_region *out);
/* Bytes of *r that a message must carry (the header and the used part of the key). */
size_t wf_world_region_wire_size(const wf_world_region *r);
/* Checks a region received in a message of `bytes` bytes (sizes, key length; a key exactly
 * when id is not 0). WF_OK or WF_EPROTO. */
wf_status wf_world_region_check(const wf_world_region *r, size_t bytes);
/* len bytes of registered memory (page aligned), or NULL (out of memory, or UCX cannot
 * allocate). Free with wf_world_mem_free before wf_world_destroy. */
void *wf_world_mem_alloc(wf_world *w, size_t len);
/* Frees memory from wf_world_mem_alloc; NULL is a no-op. */
void wf_world_mem_free(wf_world *w, void *p);

typedef struct wf_world_op {
    wf_world_op_kind kind;
    int peer;               /* world rank */
    wf_world_tag tag;       /* SEND / RECV */
    void *buf;              /* caller-owned; must stay valid until the op completes */
    size_t len;
    size_t offset;          /* PUT: byte offset in the peer's symmetric buffer (or region) */
    const wf_world_region *region; /* PUT: NULL, or the peer's exposed region to write into;
                                    * must stay valid until the op completes */
    /* outputs */
    size_t received;        /* RECV: bytes received */
    wf_status status;
    void *req_;             /* internal */
    uint64_t seq_;          /* internal */
    uint32_t gen_;          /* internal: the peer's incarnation when posted */
} wf_world_op;

/* Posts ops[0..n): starts every one; does not wait. A local failure to post leaves the ops
 * posted so far running; wait or cancel them with wf_world_wait. Returns WF_OK, WF_EINVAL,
 * WF_EPEER (the peer is known dead), WF_EIO. */
wf_status wf_world_post(wf_world *w, wf_world_op *ops, int n);

/* Progresses until ops[0..n) are all complete, or the wait bound passes, or a peer of a pending
 * op fails. On error every still-pending op is cancelled before returning, so the buffers are
 * free again. Returns WF_OK, WF_ETIMEDOUT, WF_EPEER (error rank: the peer), WF_EPROTO (a message
 * longer than its receive buffer). */
wf_status wf_world_wait(wf_world *w, wf_world_op *ops, int n);

/* wf_world_post then wf_world_wait. */
wf_status wf_world_run(wf_world *w, wf_world_op *ops, int n);

/* Orders PUTs: every put posted before the fence is visible at its target before any posted
 * after it (used to write data, fence, then write a completion flag). */
wf_status wf_world_fence(wf_world *w);
/* Waits until every PUT posted so far is complete at its target. */
wf_status wf_world_flush(wf_world *w);
/* The same for the PUTs to one peer: unlike wf_world_flush it knows whom it waits for, so a
 * peer that dies meanwhile fails it at once (WF_EPEER) instead of at the time-out. */
wf_status wf_world_flush_peer(wf_world *w, int peer_rank);
/* Waits until the uint64 at `offset` of this rank's symmetric buffer is >= value (a peer's
 * flag PUT), progressing meanwhile. `peer` is the rank expected to write it (named on time-out
 * and checked for failure): the incarnation of it at the call; one that dies, or is replaced
 * by a new incarnation during the wait (even unseen dying), fails the wait with WF_EPEER, as
 * the operation waits do. Returns WF_OK, WF_ETIMEDOUT, WF_EPEER, WF_EINVAL. */
wf_status wf_world_wait_flag(wf_world *w, size_t offset, uint64_t value, int peer);

/* Never waits: progresses, then reports how many of ops[0..n) are complete (each op's status
 * says how it ended). A pending op whose peer is known dead (endpoint error, or its process is
 * gone: checked at most every 20 ms) is cancelled and completes with WF_EPEER. Also applies
 * membership updates. For event loops that serve many peers at once (weftd's coordinator). */
int wf_world_test(wf_world *w, wf_world_op *ops, int n);
/* Cancels the ops still pending (a receive nobody waits for any more); their buffers are free
 * on return. */
void wf_world_cancel(wf_world *w, wf_world_op *ops, int n);
/* Whether rank is known to have failed (until its slot is refilled). */
int wf_world_peer_failed(const wf_world *w, int rank);
/* The caller knows nothing more goes to or comes from rank (its process ended, or the world is
 * shutting down with nothing in flight): wf_world_destroy closes its endpoint without the flush
 * of a graceful close, which to a process that has left UCX waits out to its endpoint time-out
 * (seconds, logged as errors). Also makes wf_world_peer_failed true for rank. */
void wf_world_peer_gone(wf_world *w, int rank);
/* Sleeps until UCX may have something to progress, extra_fd (-1: none) is readable, or
 * timeout_ms passes (capped at 20 ms, the liveness probe's period). Returns at once when
 * events are pending. Call wf_world_test after it. */
void wf_world_wait_event(wf_world *w, int extra_fd, int timeout_ms);

/* Drives UCX once and applies membership updates. Returns the number of events handled. */
int wf_world_progress(wf_world *w);

/* ---- replacement ------------------------------------------------------------------------------ */
/* Rank 0 only: waits (cfg.join_timeout_ms) for one replacement process to join, re-admits it to
 * its slot and tells every other rank. *rank_out (may be NULL) is the refilled slot.
 * Returns WF_OK, WF_ETIMEDOUT, WF_EPROTO, WF_EINVAL (not rank 0). */
wf_status wf_world_admit(wf_world *w, int *rank_out);
/* The process id rank reported when it joined (0 for an unknown rank). */
uint32_t wf_world_peer_pid(const wf_world *w, int rank);
/* The size of rank's registered symmetric buffer as it announced it (0 for an unknown rank). A
 * peer that lays a known structure out in its buffer (a paged KV store) lets others address it
 * from this size alone. */
size_t wf_world_peer_sym_size(const wf_world *w, int rank);
/* Rank 0: the bootstrap socket a replacement connects to (readable: call wf_world_admit, which
 * then only waits for the handshake); -1 elsewhere. For event loops that must not block. */
int wf_world_listen_fd(const wf_world *w);
/* Progresses until the world epoch is >= epoch (a replacement was admitted), bounded by
 * cfg.join_timeout_ms. Returns WF_OK or WF_ETIMEDOUT. */
wf_status wf_world_wait_epoch(wf_world *w, uint32_t epoch);

/* ---- counters (for tests and benchmarks) ------------------------------------------------------ */
typedef struct wf_world_stats {
    uint64_t sends, recvs, puts; /* operations posted through this layer */
    uint64_t puts_direct;        /* of the puts: copies by this process into a peer's memory
                                  * mapped here (same host, UCX-allocated shared memory) */
    uint64_t bytes_sent, bytes_put;
    uint64_t endpoints_created;
    uint64_t flushes;            /* FLUSH operations posted */
    uint64_t sleeps;             /* waits that slept on UCX's wake-up descriptor
                                  * (wf_world_set_idle_sleep) */
    uint64_t mem_registrations;  /* buffers registered by wf_world_mem_expose (cache misses) */
    uint64_t mem_cache_hits;     /* exposes served by a cached registration */
    uint64_t mem_invalidations;  /* cached registrations dropped because memory was unmapped */
    uint64_t rkeys_unpacked;     /* peers' region keys unpacked (their cache misses) */
} wf_world_stats;

void wf_world_get_stats(const wf_world *w, wf_world_stats *out);

#endif
