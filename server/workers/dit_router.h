/* DiT serving on worker ranks (`weftd --workers N` with a DiT): an executor for the image
 * scheduler (sched/images.h) that runs each batch's ENCODE, DECODE_IMAGE and FINISH tasks on the
 * coordinator's in-process DiT executor and its DENOISE chunks on the worker ranks.
 *
 *     wf_dit_router *r;
 *     if (wf_dit_router_new(local_dit, workers, &r) != WF_OK) ...;
 *     wf_image_sched_add_model(images, wf_dit_router_executor(r), &geometry, &model);
 *     ...
 *     wf_dit_router_stats st; wf_dit_router_get_stats(r, &st);     // chunks per rank
 *     wf_dit_router_observe_request(r, 20, true, 1, 12.3);          // a lone request's wall time
 *     wf_dit_router_free(r);                                        // after the image scheduler
 *
 * Latents are artifacts whose home is the coordinator's latent table (the in-process
 * executor's: ENCODE writes x_T there, DECODE_IMAGE reads it). A latent leaves home with its
 * first chunk (sent right after the TASK_DISPATCH: server/workers/pool.h:
 * wf_workers_dispatch_latents) and then stays on the ranks that ran its chunk; the next chunk's
 * dispatch tells the old holders and the new members where it is (the task's
 * dit.latent.placement), and they move the rows that change hands worker to worker
 * (wf_dit_sp_reshard; nothing when the group and mode stay). It comes home (right after the
 * BATCH_DONE) only with the chunk whose batch decodes or finishes it; a decode in a batch of its
 * own first fetches it with a chunk of no steps. The home copy is refreshed only then: a latent
 * lost with a worker (a holder killed or replaced, a chunk or reshard that failed with a peer or
 * timed out) runs again from the home copy on a live rank (at most WF_DIT_ROUTER_ATTEMPTS
 * times), and the live ranks still holding a copy drop it; with no live worker left the batch
 * fails with an error naming the ranks. The noise is a pure function of (seed, image, step,
 * element), so the images are bit-identical to the in-process path whatever rank runs which
 * chunk and whatever was recomputed.
 *
 * Sizes other than the native one (the image scheduler's other latent grids): the task's latent
 * artifact carries its grid on the wire (channels x height x width: the worker sizes the
 * message and its slot by it, wf_workers_latent_bytes), and such a chunk runs on a group as a
 * native one does (the job's max_P: wf_dit_sp_fit for its grid over the workers; Ulysses over
 * its patch rows, or CFG for guided images on two ranks, by wf_dit_sp_choose at its grid), its
 * latent from home to every member and back home every chunk (member m sends its rows): the
 * worker-to-worker moves and the copies held between chunks are the native grid's only. Each
 * worker keeps a small cache of multi-rank steppers per (sampler, steps, grid), within twice
 * its largest latent's positions (worker_dit.h). The policy and the cost model price it by its
 * tokens (interpolated between the calibrated sizes, sched/dit_cost.h).
 *
 * Placement: at every chunk boundary (each batch: the image scheduler keeps one in flight per
 * model) the --dit-policy (sched/dit_policy.h) sees every image's DENOISE chunk as a job
 * (tokens, steps done and left, deadline) and the live workers as free ranks, and picks jobs
 * and their groups; the picked chunks run at once, one wave, then the policy picks again for
 * the rest of the batch. Each picked job gets its own group, as GF-DiT's policies assume, so
 * images that share a forward in-process run one per group here (the price of placing each
 * image by its deadline); with no pick at all the chunks are spread over the live workers in
 * blocks that share a forward. A group of P > 1 ranks runs its chunk with sequence parallelism
 * (engine/elastic/dit_sp.h, Ulysses) or, on two ranks, guidance parallelism (CFG: the
 * conditional and unconditional passes on one member each), by wf_dit_sp_choose's fixed rule
 * that the members apply too (so the dispatch carries no mode); a latent from home goes whole to
 * every member, and one coming home is taken from each member's rows (under CFG both hold them all). The cost model the policy predicts with is measured here at
 * start (one-step chunks per degree) and corrected by every single-chunk group that runs (its
 * time from dispatch to its last member's answer); its chunk_ms (what a chunk costs beyond its
 * steps: the plan, the dispatch, the results home) is learnt from every wave that ran steps, and
 * its request_ms (what a request costs beyond its chunks: ENCODE, DECODE_IMAGE, PNG, HTTP) from
 * the wall times of requests served alone (wf_dit_router_observe_request).
 *
 * Thread-safety: the executor runs batches on its own thread, one at a time; stats from any
 * thread. The local executor and the pool must outlive the router. */
#ifndef WF_SERVER_WORKERS_DIT_ROUTER_H
#define WF_SERVER_WORKERS_DIT_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/dit/dit_exec.h"
#include "proto/task.h"
#include "sched/dit_cost.h"
#include "server/workers/pool.h"

#define WF_DIT_ROUTER_ATTEMPTS 3

typedef struct wf_dit_router wf_dit_router;

/* Calibrates the cost model through the workers (blocking: a few one-step chunks per degree)
 * and makes the policy: policy is a --dit-policy spec (sched/dit_policy.h: "static:K", "rssp",
 * "elastic"; NULL: elastic with 2 workers or more, else static:1); chunk_steps the image
 * scheduler's. WF_EINVAL (a bad spec: err names it), WF_ENOMEM, WF_EIO (thread). */
wf_status wf_dit_router_new(wf_dit_exec *local, wf_workers *ws, const char *policy, int chunk_steps,
                            wf_dit_router **out, char *err, size_t errlen);
wf_executor wf_dit_router_executor(wf_dit_router *r);
/* NULL is a no-op. Runs what is queued first. */
void wf_dit_router_free(wf_dit_router *r);

typedef struct wf_dit_router_stats {
    char policy[64];                       /* the --dit-policy in force */
    uint64_t rank_chunks[WF_WORKERS_MAX];  /* DENOISE chunks per worker index (a group's chunk
                                              counts on each member) */
    uint64_t rank_cfg_chunks[WF_WORKERS_MAX]; /* of which ran guidance-parallel (CFG) */
    /* Latent bytes per worker index: sent worker to worker by a reshard (as the sender), from
     * rank 0 to it (a chunk that began at home), from it to rank 0 (a result brought home: a
     * member of a multi-rank group sends its whole buffer), and of those two, the ones of a
     * latent in mid-trajectory (a chunk that began after step 0 from home, or a result home
     * before the last step: what worker-held latents avoid). */
    uint64_t rank_reshard_bytes[WF_WORKERS_MAX];
    uint64_t rank_from_home_bytes[WF_WORKERS_MAX];
    uint64_t rank_to_home_bytes[WF_WORKERS_MAX];
    uint64_t rank_mid_home_bytes[WF_WORKERS_MAX];
    uint64_t rank_reshards[WF_WORKERS_MAX]; /* reshards in which it sent rows */
    /* The cost model the policy predicts with, as it stands: the calibrated points, the online
     * corrections per degree, chunk_ms as learnt from the waves that ran (chunk_obs of them:
     * a wave's wall time, plan to results handled, minus its slowest group's own time,
     * plus for a batch's first wave the image scheduler's hand-off since the previous batch)
     * and the reshard terms. tokens: the DiT's image (the points' size). */
    wf_dit_cost cost;
    int tokens;
} wf_dit_router_stats;

void wf_dit_router_get_stats(wf_dit_router *r, wf_dit_router_stats *out);
/* Zeroes the counters (not the cost model): after the daemon's own start-up requests. */
void wf_dit_router_reset_stats(wf_dit_router *r);
/* A request of one image served alone (no other request of the model held meanwhile) took ms
 * from its arrival to its answer, over `steps` steps on groups of P ranks (its last chunk's):
 * the cost model's request_ms learns the part its steps and chunks do not explain. Any
 * thread. */
void wf_dit_router_observe_request(wf_dit_router *r, int steps, bool guided, int P, double ms);

#endif
