/* weftd's worker pool (`weftd --workers N`): the coordinator's side of the world. Rank 0 (this
 * process: HTTP, tokenizer, scheduler) forms the world with N worker ranks, starts the local
 * ones (the same binary in `--role worker`, each pinned to its cores), and gives the scheduler
 * one group per worker: a block-accounting KV store sized by the worker's own KV memory and an
 * asynchronous executor that sends TASK_DISPATCH frames and completes the batch when the
 * worker's TASK_EVENT and BATCH_DONE come back. One communication thread owns the world (UCX
 * runs serialised); dispatch only queues and wakes it.
 *
 *     wf_workers_params p;
 *     wf_workers_params_init(&p);
 *     p.n_workers = 2; p.exe = "/proc/self/exe"; p.model_path = model; p.kv = geometry;
 *     wf_workers *ws;
 *     if (wf_workers_open(&p, &ws, err, sizeof err) != WF_OK) die(err);   // all ready
 *     for (int i = 0; i < wf_workers_count(ws); i++)
 *         wf_sched_add_group(s, wf_workers_kv(ws, i), wf_workers_executor(ws, i),
 *                            wf_workers_rank(ws, i), &gid[i]);
 *     wf_workers_attach(ws, s, gid);     // from now on faults re-route and rejoin
 *     ...
 *     wf_workers_close(ws);              // SHUTDOWN to every worker, reaps the children
 *
 * Prefill/decode disaggregation (n_prefill > 0): n_prefill workers prefill and get no group:
 * those that declared it in their WORKER_INFO (`--pd-role`), then undeclared ones in rank order
 * (the rest decode; more declarations than places fail open with WF_EINVAL); every decode worker is a group whose executor sends the batch's final prompt
 * chunks (PREFILL tasks that draw the first token) to a live prefill worker (the one whose prefix
 * cache, as predicted here, holds most of the prompts, among those not much busier than the
 * least busy) and the rest (decodes, recomputes) to the decode worker. The prefill worker
 * computes the prompt's KV on blocks of its own store (its prefix cache's blocks for the
 * prompt's cached prefix: only the tail is computed) and puts them all over UCX (RMA, from its registered store
 * into the decode worker's registered store: no copy) into the blocks the scheduler reserved
 * on the decode worker, then answers; the decode worker continues there. The scheduler must
 * plan whole prompts (wf_sched_options.whole_prefill) without its own prefix cache (its cached
 * blocks would be on the decode worker, not where the prompt is computed). A prefill worker
 * lost mid-prefill: the prompts are prefilled again on another live one, or fail alone
 * (WF_ECLOSED) when none is; a decode worker lost during the transfer: the puts fail, the
 * prefill worker frees its scratch blocks and the group goes down as below.
 *
 * Nothing is sent to a worker while it runs a batch (a send would block the communication
 * thread until the busy worker progresses): further batches wait here, heartbeats pause.
 *
 * Faults: a worker whose process exits, whose endpoint fails or that stays silent for
 * timeout_ms is taken down: its batch in flight completes with WF_ECLOSED and its group is
 * removed (the scheduler re-runs requests without a token elsewhere and fails the others with
 * a clear error). A worker this process started is started again (back-off 0.5 s doubling to
 * 10 s) as a replacement for its slot; once it is ready its group comes back (a new group id).
 * Workers started elsewhere (`weftd --role worker --join`) rejoin the same way when restarted
 * with `--rank` of their slot.
 *
 * Thread-safety: open/attach/close from one thread; executors from the scheduler's thread;
 * wf_workers_health/stats from any thread. */
#ifndef WF_SERVER_WORKERS_POOL_H
#define WF_SERVER_WORKERS_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/world/world.h"
#include "kv/kv_store.h"
#include "proto/task.h"
#include "sched/sched.h"

#define WF_WORKERS_MAX 64
#define WF_WORKER_CODECS_MAX 16   /* codec profiles kept per worker for the stats */

typedef struct wf_workers_params {
    int n_workers;            /* world ranks 1..n_workers */
    int n_prefill;            /* prefill/decode disaggregation: n_prefill workers prefill (see
                                 above), the rest decode; 0: every worker serves whole requests */
    int n_spawn;              /* started here (ranks 1..n_spawn); the rest join; -1: all */
    const char *worker_cores; /* "LIST:LIST:..." one CPU list per started worker; NULL: split
                                 this process's CPUs evenly */
    const char *host;         /* bootstrap address to listen on (remote workers connect here) */
    int port;                 /* 0: a free port */
    const char *exe;          /* the weftd binary for started workers */
    const char *model_path;
    wf_kv_geometry kv;        /* the model's KV geometry (block accounting); swa_layers set:
                                 workers split their stores by layer kind (kv/kv_store.h) */
    long kv_memory_mb;        /* per worker */
    int max_batch_tokens, max_running;
    const char *log_level;
    int heartbeat_ms;         /* default 500 */
    int timeout_ms;           /* silent this long: down (default 30000; a long prefill is silent) */
    int join_timeout_ms;      /* for every worker to join and load (default 120000) */
    const char *kv_profiles;  /* passed to started workers: KV codec library (NULL: raw) */
    const char *kv_codec;     /* "auto", "off" or a profile name (NULL: auto) */
    double kv_accuracy;       /* 0: the workers' default */
    int kv_codec_threads;     /* 0: the workers' default (one per core) */
    bool kv_ship_after_prefill; /* started workers get --kv-layer-overlap false */
    char *const *vmodels;     /* --vmodel declarations every started worker loads (copied:
                               * replacements get those not removed since) */
    int n_vmodels;
    const char *dit_path;     /* a DiT the workers also load (their DENOISE chunks: see
                                 wf_workers_dispatch_latents); NULL: none */
    int dit_max_items;        /* images per DiT forward pass on the workers, as on the
                                 coordinator (--image-max-batch; 0: the DiT default) */
    long image_max_pixels;    /* its largest image (weftd --image-max-pixels, passed on; 0: the
                                 DiT's default): the workers hold latents of every size served */
} wf_workers_params;

typedef struct wf_workers wf_workers;

typedef enum wf_worker_state {
    WF_WORKER_JOINING = 0,    /* in the world, loading its model */
    WF_WORKER_LIVE,           /* serving as a scheduler group */
    WF_WORKER_DOWN,           /* gone; a replacement may be on its way */
} wf_worker_state;

typedef struct wf_worker_stats {
    int rank;
    wf_worker_state state;
    int pid;                  /* 0 when not started here or not running */
    uint32_t incarnation;
    int group;                /* the scheduler group it serves (-1: none) */
    char cores[64];
    uint64_t batches, frames_in, frames_out;
    double last_heard_ms;     /* since the last frame from it */
    uint32_t kv_blocks;
    uint32_t kv_blocks_used;  /* as its last heartbeat said (a prefill worker's scratch blocks) */
    uint64_t prefix_queries, prefix_hits; /* a prefill worker's prefix cache, in prompt tokens */
    uint64_t kv_layers_early;  /* layers of KV sent before the prefill computing them ended */
    bool prefill;
    uint64_t transfers, transfers_failed, transfer_bytes; /* KV shipped (prefill workers) */
    double transfer_ms;
    uint64_t transfers_compressed;            /* of transfers: through a codec profile */
    int batches_in_flight;                    /* dispatched to it, not answered yet */
    int batches_running;                      /* of those: sent to it (at most one: pool.c) */
    uint64_t codec_reasons[4];                /* decisions per wf_kv_reason */
    char codec_last[64];                      /* the last decision: "k4v4 (compress)" */
    int restarts;
    char last_error[160];
    /* KV codec profiles as the worker measured them at start-up (its WORKER_INFO): the speeds
     * its controller uses; b_star_gbps: the link rate below which the profile pays */
    int n_codecs;
    struct {
        char name[32];
        double cr, enc_gbps, dec_gbps, b_star_gbps;
    } codecs[WF_WORKER_CODECS_MAX];
} wf_worker_stats;

void wf_workers_params_init(wf_workers_params *p);
/* Forms the world, starts the local workers and waits until every worker is ready. Statuses:
 * WF_EINVAL (bad parameters: err names them), WF_EIO (world or a worker failed to start),
 * WF_ETIMEDOUT, WF_ENOMEM. */
wf_status wf_workers_open(const wf_workers_params *p, wf_workers **out, char *err, size_t errlen);
int wf_workers_count(const wf_workers *ws);
int wf_workers_rank(const wf_workers *ws, int i);
wf_kv_store *wf_workers_kv(wf_workers *ws, int i);
wf_executor wf_workers_executor(wf_workers *ws, int i);
/* Whether worker i is a prefill worker (it gets no scheduler group: add none for it). */
bool wf_workers_is_prefill(const wf_workers *ws, int i);
/* Hands the scheduler and worker i's group ids (from wf_sched_add_group) to the pool. */
void wf_workers_attach(wf_workers *ws, wf_sched *s, const int *group_ids);
/* Takes the scheduler back: when it returns the pool no longer calls into it (a worker that
 * becomes ready later gets no group), so it can be freed. Before wf_sched_free. */
void wf_workers_detach(wf_workers *ws);
/* Live and total workers. */
void wf_workers_health(wf_workers *ws, int *live, int *total);
/* Fills up to cap entries; returns the number of workers. */
int wf_workers_stats(wf_workers *ws, wf_worker_stats *out, int cap);
/* Whether worker i is live (serving). Any thread. */
bool wf_workers_live(wf_workers *ws, int i);
/* Worker i's incarnation (its process's generation: a replacement has a new one), so that state
 * a process held (a latent between DiT chunks) is known lost with it. */
uint32_t wf_workers_incarnation(wf_workers *ws, int i);
/* DiT chunks on worker i (server/workers/dit_router.h): like its executor's dispatch, for a
 * batch of DENOISE tasks only, whose latents may cross with it. out[j] (wf_workers_latent_bytes; NULL:
 * nothing) is sent to the worker after the TASK_DISPATCH frame (tagged messages, the tag
 * WF_WORKERS_LATENT_TAG(iteration, j)); back[j] (NULL: nothing) receives the worker's result
 * for task j when the worker's TASK_EVENT said the task succeeded (the worker sends exactly
 * those; received on the comm thread before done is called). out or back may be NULL for none
 * at all. A latent that stays on the worker ranks between chunks moves neither way (the worker
 * moves it to the next group itself: server/workers/worker.c). The arrays and the buffers must
 * stay valid until done; on a failure a back buffer may hold partial bytes.
 * WF_EINVAL (a task is not DENOISE, or more than 255 tasks), else as the executor's dispatch. */
wf_status wf_workers_dispatch_latents(wf_workers *ws, int i, wf_task_batch *batch,
                                      float *const *out, float *const *back, size_t latent_bytes,
                                      wf_executor_done_fn done, void *user);
/* The bytes of DENOISE task t's latent on the wire: channels x height x width floats as its
 * latent artifact states them (a size other than the native one: ENCODE set them), else
 * native_bytes. Both ends of wf_workers_dispatch_latents size each task's message by it (the
 * latent_bytes argument is the native latent's). */
size_t wf_workers_latent_bytes(const wf_task *t, size_t native_bytes);
/* The tag of task j's latent in the batch of wire iteration `it` (both directions): a USER tag
 * (no epoch in it, like the frames it travels with: a replacement admitted between the frame
 * and its latents must not make them miss each other) whose group field, 0 for frames
 * (server/workers/world_link.h), tells the two apart. */
#define WF_WORKERS_LATENT_GROUP 0xD17Eull
#define WF_WORKERS_LATENT_TAG(it, j) \
    ((wf_world_tag){.kind = WF_WORLD_TAG_USER, .group = WF_WORKERS_LATENT_GROUP, \
                    .seq = (uint32_t)(it), .step = (uint8_t)(j)})
/* Virtual models added at run time (POST /admin/models with --workers). add: num (the number
 * its tasks carry, != 0) and its declaration (the JSON form of server/vmodels.h) join the set
 * the workers hold; a VMODEL frame goes to every live worker (when it runs no batch), which
 * loads the adapters and answers with VMODEL_ACK. A worker that joins later (a replacement,
 * or one that rejoins) is sent the whole set before it becomes live (a group) again, and is
 * taken down if it cannot load one, or has not loaded them all within join_timeout_ms. A number declared at start (--vmodel) is held by every
 * worker already: WF_OK at once. WF_EINVAL (added already, bad arguments), WF_ENOMEM.
 * state: 1 once every live worker acknowledged it (admit its requests), 0 while some have not,
 * -1 when a worker failed to load it or it was removed (err says which and why).
 * wait: polls state until 1 (WF_OK), -1 (WF_EIO) or timeout_ms (WF_ETIMEDOUT); blocks (call
 * it off the event loop). remove: drops it from the set and tells every live worker to unbind
 * it (after the caller drained its requests). Any thread. */
wf_status wf_workers_vmodel_add(wf_workers *ws, uint32_t num, const char *spec_json, char *err,
                                size_t errlen);
int wf_workers_vmodel_state(wf_workers *ws, uint32_t num, char *err, size_t errlen);
wf_status wf_workers_vmodel_wait(wf_workers *ws, uint32_t num, int timeout_ms, char *err,
                                 size_t errlen);
void wf_workers_vmodel_remove(wf_workers *ws, uint32_t num);
/* Test hook and operator action: the process of worker i gets SIGKILL (started here only). */
wf_status wf_workers_kill(wf_workers *ws, int i);
void wf_workers_close(wf_workers *ws);

/* The default split: this process's CPUs dealt to n workers in contiguous runs. Writes worker
 * i's CPU list into out. */
void wf_workers_default_cores(int n, int i, char *out, size_t cap);

#endif
