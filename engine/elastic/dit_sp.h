/* Sequence and guidance parallelism for DiT denoising steps over a group of ranks, and the
 * reshaping of latents between groups (issue #15). A step runner like engine/dit/dit_step.h's,
 * but every member of a group calls it with the same items and the forward pass is split:
 *
 *     int r2[] = {0, 1};
 *     wf_dit_placement one = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r2, 1);  // rank 0 alone
 *     wf_dit_placement two = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r2, 2);  // ranks 0, 1
 *     wf_dit_sp *sp;
 *     wf_dit_sp_new(model, &sched_cfg, 20, 4, 32, 32, world, &sp, err, sizeof err);
 *     wf_dit_sp_init_latent(sp, &it);                         // any rank: a pure function of key
 *     it.step_end = 5;  if (me == 0) wf_dit_sp_run(sp, pool, &one, 1, &it, err, sizeof err);
 *     wf_dit_sp_reshard(sp, &one, &two, 1, &it, err, sizeof err);   // ranks of both groups
 *     it.step_end = 20; wf_dit_sp_run(sp, pool, &two, 1, &it, err, sizeof err); // ranks 0 and 1
 *
 * Modes. ULYSSES over P ranks: member i holds patch rows [i*hp/P, (i+1)*hp/P) of every latent
 * (hp = height / patch) and runs every token-wise layer on those tokens only; around attention
 * an all-to-all over heads gives it the whole sequence for heads [i*H/P, (i+1)*H/P) and a second
 * one brings the result back. Needs heads % P == 0 and hp % P == 0 (wf_dit_sp_check;
 * wf_dit_sp_fit picks the largest valid P). CFG over 2 ranks: member 0 runs the conditional
 * rows and member 1 the unconditional ones of guided items, the outputs are all-gathered before
 * the sampler step, and both members hold the whole latent. P = 1 (either mode): one rank, the
 * whole latent, no communication.
 *
 * Latents: each member keeps a full-size buffer per item (C x height x width, the caller's) of
 * which only the rows its placement gives it are meaningful. Between chunks the placement may
 * change (other size, other ranks, other mode): wf_dit_sp_reshard moves exactly the row slices
 * that change hands, as one all-to-all-v over the union of the two groups (old members first,
 * then new ones in their order); no communicator is ever created (engine/gfc).
 *
 * Results equal the single-rank stepper's bit for bit: every layer but attention is row-wise
 * (same rows, same arithmetic), attention of one head over the whole sequence is the same
 * computation wherever it runs, the sampler step and the guidance combine are element-wise, and
 * the noise of element e is a pure function of (key, step, e).
 *
 * Ownership: the runner borrows the model and the world (both must outlive it) and owns the
 * schedule and every buffer, reserved at creation for max_items guided items; run and reshard
 * allocate nothing. Thread-safety: one call at a time per runner, on the world's thread.
 * Statuses: new WF_EINVAL (bad sizes), the schedule's errors, WF_ENOMEM. run: WF_EINVAL (this
 * rank not a member, an invalid degree for the model and size, items as dit_step.h), the
 * forward's and the collectives' statuses (WF_EPEER, WF_ETIMEDOUT: a member failed; the items'
 * latents are then undefined on this rank and the request restarts from its last good chunk).
 * reshard: WF_EINVAL (not in either group, a placement invalid for this size), the
 * collectives' statuses. */
#ifndef WF_ENGINE_ELASTIC_DIT_SP_H
#define WF_ENGINE_ELASTIC_DIT_SP_H

#include <stddef.h>

#include "engine/dit/dit_step.h"
#include "engine/gfc/gfc.h"
#include "engine/world/world.h"

typedef enum wf_dit_sp_mode {
    WF_DIT_SP_ULYSSES = 0, /* tokens split, all-to-all over heads around attention */
    WF_DIT_SP_CFG = 1,     /* conditional / unconditional rows on two ranks */
} wf_dit_sp_mode;

typedef struct wf_dit_placement {
    wf_dit_sp_mode mode;
    wf_group group; /* members in order; member i holds slice i (ULYSSES) */
} wf_dit_placement;

/* A placement of ranks[0..n) (n in [1, WF_MAX_GROUP_RANKS], distinct ranks; else group.n_ranks
 * is 0 and run/reshard reject it). */
wf_dit_placement wf_dit_placement_make(wf_dit_sp_mode mode, const int *ranks, int n);

/* WF_OK if `mode` over P ranks can run this model at height x width, else WF_EINVAL with the
 * reason (heads or patch rows not divisible by P; CFG needs P of 1 or 2). */
wf_status wf_dit_sp_check(const wf_dit_config *c, int height, int width, wf_dit_sp_mode mode,
                          int P, char *err, size_t errlen);
/* The largest P' <= P for which ULYSSES is valid (1 always is). */
int wf_dit_sp_fit(const wf_dit_config *c, int height, int width, int P);
/* The mode a P-rank group runs a batch of n_items items, n_guided of them with guidance
 * (guidance > 1), by a fixed rule so that the coordinator and every member agree without
 * telling each other: CFG when P == 2 and every item is guided (the same halving of the work
 * as Ulysses, but one exchange per step instead of two all-to-alls per block), or when P == 2
 * and Ulysses is invalid for this size (heads or patch rows odd); else ULYSSES. */
wf_dit_sp_mode wf_dit_sp_choose(const wf_dit_config *c, int height, int width, int P, int n_items,
                                int n_guided);
/* The latent rows [*r0, *r1) member `member` of pl holds (all rows for CFG and P = 1). */
void wf_dit_sp_rows(const wf_dit_placement *pl, int patch, int height, int member, int *r0,
                    int *r1);

typedef struct wf_dit_sp wf_dit_sp;

wf_status wf_dit_sp_new(wf_dit *model, const wf_dit_sampler_config *cfg, int n_steps,
                        int max_items, int height, int width, wf_world *world, wf_dit_sp **out,
                        char *err, size_t errlen);
void wf_dit_sp_free(wf_dit_sp *sp); /* NULL is a no-op */

size_t wf_dit_sp_latent_size(const wf_dit_sp *sp); /* C x height x width */
/* The whole x_T of the item, exactly as wf_dit_stepper_init_latent. */
void wf_dit_sp_init_latent(const wf_dit_sp *sp, wf_dit_item *item);

/* fn(user) after every round of wf_dit_sp_run, on the caller's thread (NULL: none): a worker
 * running a long chunk keeps its liveness heartbeats going from it, since the world (and so
 * every send) belongs to that thread. */
void wf_dit_sp_set_round_hook(wf_dit_sp *sp, void (*fn)(void *user), void *user);

/* Every member of pl calls this with the same items (steps, labels, guidance, keys); each runs
 * rounds until every item reaches its step_end, as wf_dit_stepper_run. */
wf_status wf_dit_sp_run(wf_dit_sp *sp, wf_threadpool *pool, const wf_dit_placement *pl,
                        int n_items, wf_dit_item *items, char *err, size_t errlen);

/* Every rank of from or to calls this with the same items: afterwards each member of `to`
 * holds its rows of every item's latent. Ranks of both groups keep what they already have. */
wf_status wf_dit_sp_reshard(wf_dit_sp *sp, const wf_dit_placement *from,
                            const wf_dit_placement *to, int n_items, wf_dit_item *items,
                            char *err, size_t errlen);

/* The bytes world_rank sends in a reshard from -> to of n_items latents of channels x height x
 * width (patch: the model's), without a runner: what a coordinator counts for moves it plans. */
size_t wf_dit_sp_plan_bytes(const wf_dit_placement *from, const wf_dit_placement *to, int patch, int channels,
                            int height, int width, int n_items, int world_rank);
/* Bytes this rank sends in reshard (for cost models and tests). */
size_t wf_dit_sp_reshard_bytes(const wf_dit_sp *sp, const wf_dit_placement *from,
                               const wf_dit_placement *to, int n_items, int world_rank);

#endif
