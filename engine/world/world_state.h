/* The world's state, shared by world.c (endpoints, operations, membership, creation) and
 * world_boot.c (the TCP bootstrap). Private to engine/world. */
#ifndef WF_ENGINE_WORLD_STATE_H
#define WF_ENGINE_WORLD_STATE_H

#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "engine/world/world.h"
#include "engine/world/world_impl.h"

#define PEER_RKEYS 8 /* unpacked keys of a peer's exposed regions, replaced round robin */

typedef struct peer {
    wf__world_entry e;
    ucp_ep_h ep;
    ucp_rkey_h rkey;
    struct {
        uint64_t id;
        ucp_rkey_h rkey;
    } rk[PEER_RKEYS];       /* bound to ep: destroyed whenever ep is closed */
    int rk_next;
    /* Puts to this peer that went through UCX, and how many of them completed flushes cover.
     * While some are not covered, puts into mapped memory go through UCX too, so that a fence
     * still orders them (see put_direct). */
    uint64_t ucx_puts, flushed;
    wf_status failed;       /* WF_OK, or WF_EPEER once its endpoint or process failed */
    uint32_t gen;           /* bumped when a replacement takes the rank: operations posted
                             * before it can never complete (their process is gone) */
} peer;

struct wf_world {
    wf_world_config cfg;
    char host_arg[256];
    int rank, n;
    uint32_t epoch;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_mem_h mem;
    void *sym;
    size_t sym_size;
    wf__world_entry self;   /* this rank's entry as sent to the coordinator */
    peer *peers;
    int listen_fd;          /* rank 0: the bootstrap socket, kept for replacements */
    int efd;                /* UCX's wake-up descriptor (-1: none) */
    uint64_t last_probe_ns;
    char err[320];
    int err_rank;
    wf_world_stats stats;
    struct seq_slot *seqs;  /* open addressing on the group id; cap a power of two */
    size_t seq_cap, seq_used;
    void *scratch;
    size_t scratch_size;
    wf__mcache *mc;
    size_t put_threshold;
    int put_caller_memory;
    int scratch_owned;      /* scratch came from the registration cache (else posix_memalign) */
    int idle_sleep;         /* wf_world_set_idle_sleep */
};

struct seq_slot {
    uint64_t id;
    uint32_t epoch, seq;
    int used;
};

/* Records the error (wf_world_error, wf_world_error_rank) and returns st. */
wf_status wf__world_fail(wf_world *w, wf_status st, int rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Takes entry e (its buffers move) as rank r's new incarnation: endpoint and keys dropped. */
void wf__world_apply_entry(wf_world *w, int r, wf__world_entry *e);

/* The bootstrap (world_boot.c). Rank 0 listens (returns the socket, or -1 with err) and
 * gathers the n - 1 joiners; a joiner sends its hello and takes the table. */
int wf__world_boot_listen(wf_world *w, char *err, size_t errlen);
wf_status wf__world_boot_coordinate(wf_world *w, char *err, size_t errlen);
wf_status wf__world_boot_join(wf_world *w, char *err, size_t errlen);

#endif
