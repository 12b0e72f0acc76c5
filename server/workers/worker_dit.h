/* The DiT side of a worker process (server/workers/worker.h): the DENOISE chunks the
 * coordinator's router (server/workers/dit_router.h) sends it, on this rank alone or over a
 * group of ranks (engine/elastic/dit_sp.h). Internal to server/workers/.
 *
 *     wf_worker_dit d;
 *     if (wf_worker_dit_open(&d, p, n_threads, world, &link, err, sizeof err) != WF_OK) fail(err);
 *     d.host = me, d.heartbeat = tick, d.run_local = run_with_heartbeats;   // optional
 *     ...  // for each TASK_DISPATCH whose tasks are DENOISE:
 *     st = wf_worker_dit_run(&d, &batch);   // receives, moves, runs, answers, sends home
 *     wf_worker_dit_close(&d);
 *
 * A worker without a DiT (p->dit_path NULL) has d.dit NULL: run answers every batch with
 * WF_EUNSUPPORTED. The world and the link are borrowed (the worker's; they outlive d). One
 * call at a time, on the worker's thread. */
#ifndef WF_SERVER_WORKERS_WORKER_DIT_H
#define WF_SERVER_WORKERS_WORKER_DIT_H

#include <stdint.h>

#include "engine/dit/dit_exec.h"
#include "engine/elastic/dit_sp.h"
#include "engine/world/world.h"
#include "proto/frame_task.h"
#include "server/workers/worker.h"
#include "server/workers/world_link.h"

#define WF_WORKER_DIT_RUNNERS 8

typedef struct wf_worker_dit {
    wf_dit_exec *dit;                /* DENOISE chunks (p->dit_path); NULL: none */
    wf_world *world;
    wf_link *link;
    float *scratch;                  /* receives a latent that has no slot (then fails) */
    wf_dit_item *items;              /* a multi-rank batch's items (max_items of them) */
    struct {                         /* multi-rank steppers per (sampler, step count, latent
                                        grid), LRU, within a budget of positions (worker_dit.c) */
        int sampler, n_steps, height, width;
        uint64_t used;
        wf_dit_sp *sp;
    } sps[WF_WORKER_DIT_RUNNERS];
    uint64_t clock;
    wf_frame_task_result *results;   /* the TASK_EVENT's */
    int results_cap;
    /* The worker's, set after open (NULL: none): heartbeat sends one when due, called between
     * the rounds of multi-rank chunks; run_local runs a single-rank chunk on the DiT's
     * executor while keeping the heartbeats (a long chunk must not look like a dead worker). */
    void *host;
    void (*heartbeat)(void *host);
    wf_status (*run_local)(void *host, wf_executor ex, wf_task_batch *b, char *msg, size_t cap);
} wf_worker_dit;

/* Opens p->dit_path (if any) with the coordinator's batch size and largest image. WF_OK, or
 * an error (err names the file and the problem). */
wf_status wf_worker_dit_open(wf_worker_dit *d, const wf_worker_params *p, int n_threads, wf_world *world,
                             wf_link *link, char *err, size_t errlen);
void wf_worker_dit_close(wf_worker_dit *d);

/* Runs one decoded TASK_DISPATCH of DENOISE tasks and answers it (TASK_EVENT, BATCH_DONE, the
 * results bound for home). Returns != WF_OK only when rank 0 is gone or out of memory. */
wf_status wf_worker_dit_run(wf_worker_dit *d, wf_task_batch *b);

#endif
