/* Internal to the worker pool (server/workers/pool.c and pool_vmodels.c): its state. Not a
 * public header: see server/workers/pool.h. */
#ifndef WF_SERVER_WORKERS_POOL_IMPL_H
#define WF_SERVER_WORKERS_POOL_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kv/kv_controller.h"
#include "kv/paged.h"
#include "proto/frame_control.h"
#include "server/workers/pool.h"
#include "server/workers/seq_history.h"
#include "server/workers/world_link.h"

#define MAX_QUEUED 16                /* batches per worker: the scheduler keeps one in flight per
                                        group; a prefill worker serves every decode group */
#define RESPAWN_FIRST_MS 500
#define RESPAWN_MAX_MS 10000
#define ADMIT_TIMEOUT_MS 2000        /* a replacement's bootstrap handshake */
#define MS(x) ((uint64_t)(x) * 1000000ull)
/* Token histories a worker keeps (seq_history.h): at most this many sequences and tokens (4
 * bytes each) per worker, the least recently used forgotten beyond. */
#define HISTORY_MAX_SEQS 4096
#define HISTORY_MAX_TOKENS (16l << 20)

typedef struct queued {
    wf_task_batch *batch;            /* the scheduler's */
    wf_task_batch wire;              /* the same tasks under the wire iteration */
    wf_executor_done_fn done;
    void *user;
    float *const *lat_out;           /* DiT: task j's latent goes out from here (NULL: none) */
    float *const *lat_back;          /* and comes back here (NULL: none) */
    size_t lat_bytes;
} queued;

/* A virtual model the workers hold: declared at start (argv: every started worker loads it with
 * --vmodel) or added at run time (sent as VMODEL frames; acked: bit i once worker i bound it). */
typedef struct pvm {
    uint32_t num;
    char *spec;                      /* the --vmodel text or the JSON declaration */
    bool argv;
    uint64_t acked;
    bool failed;
    char error[352]; /* "worker rank R could not load it: " + its message */
} pvm;

/* A VMODEL frame waiting to go to a worker (sent only while it runs no batch). */
typedef struct vop {
    wf_frame_vmodel_op op;
    uint32_t num;
    char *spec;
} vop;

typedef struct wk {
    struct wf_workers *ws;
    int index, rank;
    bool spawned_here;
    char cores[64];
    /* comm thread only */
    wf_link link;
    pid_t pid;
    uint64_t last_heard_ns, last_sent_ns, respawn_at_ns, live_since_ns;
    int backoff_ms;
    /* guarded by ws->lock */
    wf_worker_state state;
    int group;
    queued pending[MAX_QUEUED];      /* dispatched, not yet sent */
    int n_pending;
    queued flight[MAX_QUEUED];       /* sent, waiting for BATCH_DONE (FIFO) */
    int n_flight;
    wf_kv_store kv;                  /* geometry and n_blocks only: the memory is the worker's */
    uint64_t batches;
    int restarts;
    uint32_t gen;                    /* bumped per process admitted into the slot */
    int n_codecs;                    /* its WORKER_INFO (lock) */
    wf_frame_role declared;          /* the role its WORKER_INFO declared (comm thread) */
    wf_frame_codec_speed codecs[WF_WORKER_CODECS_MAX];
    char last_error[160];
    bool prefill;                    /* a prefill rank: no group of its own (see pool.h) */
    uint32_t kv_used;                /* its last heartbeat's count */
    uint64_t prefix_queries, prefix_hits, kv_layers_early; /* its last heartbeat's counters */
    /* A prefill rank's prefix cache as this process predicts it (lock): the same pool
     * operations its worker makes for each prompt sent to it, in the same order, so that
     * pick_prefill sends a prompt where its prefix is cached. Only a hint: the worker matches
     * on its own pool, so a wrong prediction costs time, never output. */
    wf_kv_pool *pfx;
    uint64_t xfers, xfer_bytes, xfer_ns, xfer_failed;
    uint64_t xfer_compressed;
    uint64_t xfer_reason[WF_KV_REASON_COUNT];
    char xfer_last[64];              /* the last decision: "k4v4 (compress)" */
    wf_seq_mirror hist;              /* what its process holds of each sequence's history
                                      * (comm thread) */
    vop *ops;                        /* VMODEL frames to send (lock) */
    int n_ops, cap_ops;
    bool syncing;                    /* joining: loading the run-time virtual models (lock) */
    int sync_left;                   /* their acks still to come (lock) */
    uint32_t sync_kv;                /* its first heartbeat's KV blocks, for worker_ready */
    uint32_t swa_blocks;             /* its first heartbeat's sliding-window layers' blocks
                                      * (0: its store is not split) (comm thread) */
    uint64_t sync_since_ns;          /* when it was given the set (lock) */
    /* copies of the comm thread's own fields, for wf_workers_stats (published under the lock) */
    struct {
        pid_t pid;
        uint64_t last_heard_ns, frames_in, frames_out;
        uint32_t incarnation;
    } pub;
} wk;

struct wf_workers {
    wf_workers_params p;
    char *host, *exe, *model_path, *log_level, *worker_cores, *kv_profiles, *kv_codec, *dit_path;
    wf_world *world;
    int boot_fd;                     /* the bootstrap socket until the world takes it over, or -1 */
    int n;
    wk w[WF_WORKERS_MAX];
    pthread_mutex_t lock;
    pthread_t thread;
    bool thread_on;
    int wake_fd;                     /* eventfd: dispatch and close wake the thread */
    bool stopping;
    wf_sched *sched;                 /* set by attach, cleared by detach */
    /* Held by the comm thread around its calls into the scheduler (a group added or removed)
     * and by attach/detach: once detach returns, the scheduler can be freed. */
    pthread_mutex_t sched_lock;
    uint64_t next_iteration;
    unsigned prefill_rr;             /* round-robin start of pick_prefill (lock) */
    uint8_t *arena_mem;
    size_t arena_cap;
    char start_error[160];
    bool roles_fixed;                /* each slot's role is settled (after open) */
    pvm *vms;                        /* the current set of virtual models (lock) */
    int n_vms, cap_vms;
};

/* ---- the set of virtual models (pool_vmodels.c) ---------------------------------------------- */

/* The --vmodel declarations of p: the set every started worker loads. WF_EINVAL, WF_ENOMEM. */
wf_status wf__pool_vm_init(wf_workers *ws, const wf_workers_params *p, char *err, size_t errlen);
void wf__pool_vm_free(wf_workers *ws);
/* Worker k went down (lock held): it holds none of them any more and gets no frames. */
void wf__pool_vm_forget(wf_workers *ws, wk *k);
/* Worker k's first heartbeat: queues the run-time set for it. 1: it must acknowledge them
 * before it serves; 0: nothing to load (it is ready); -1: out of memory. */
int wf__pool_vm_sync(wf_workers *ws, wk *k, uint32_t kv_blocks);
/* A VMODEL_ACK from k. 1: k acknowledged the last of its set (ready, *kv_blocks its KV);
 * -1: k cannot load one it must hold (take it down: why); 0: nothing to do. */
int wf__pool_vm_ack(wf_workers *ws, wk *k, const wf_frame_vmodel_ack *a, uint32_t *kv_blocks,
                    char *why, size_t whylen);
/* The next VMODEL frame for k if it may get one now (no batch in flight): true and *out (its
 * spec is the caller's to free). */
bool wf__pool_vm_next(wf_workers *ws, wk *k, vop *out);
/* Whether k has been loading its set for longer than timeout_ms (it keeps sending heartbeats,
 * so only this ends a load that never answers). */
bool wf__pool_vm_sync_late(wf_workers *ws, wk *k, uint64_t now_ns, int timeout_ms);
/* pool.c: wakes the communication thread. */
void wf__pool_wake(wf_workers *ws);

#endif
