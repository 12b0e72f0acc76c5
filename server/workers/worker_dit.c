/* The DiT side of a worker process: see worker_dit.h. */
#include "server/workers/worker_dit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gfc/gfc.h"
#include "proto/base/clock.h"
#include "proto/frame_control.h"
#include "server/workers/pool.h"

wf_status wf_worker_dit_open(wf_worker_dit *d, const wf_worker_params *p, int n_threads, wf_world *world,
                             wf_link *link, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->world = world;
    d->link = link;
    if (!p->dit_path) return WF_OK;
    wf_dit_exec_options xo;
    wf_dit_exec_options_init(&xo);
    xo.model_path = p->dit_path;
    xo.n_threads = n_threads;
    wf_dit_exec_options_set_batch(&xo, p->dit_max_items);
    xo.max_pixels = p->image_max_pixels; /* the coordinator's: the same sizes fit */
    char xerr[400];
    if (wf_dit_exec_open(&xo, &d->dit, xerr, sizeof xerr) != WF_OK ||
        !(d->scratch = malloc(wf_dit_exec_latent_floats_max(d->dit) * sizeof(float))) ||
        !(d->items = calloc((size_t)wf_dit_exec_get_info(d->dit)->max_items, sizeof *d->items))) {
        snprintf(err, errlen, "DiT %s: %s", p->dit_path, d->dit ? "out of memory" : xerr);
        return WF_EIO;
    }
    return WF_OK;
}

void wf_worker_dit_close(wf_worker_dit *d) {
    for (int i = 0; i < WF_WORKER_DIT_RUNNERS; i++) wf_dit_sp_free(d->sps[i].sp);
    wf_dit_exec_free(d->dit);
    free(d->scratch);
    free(d->items);
    free(d->results);
    memset(d, 0, sizeof *d);
}

/* Task t's latent grid: the size its latent states (0 x 0 or none: the native one). */
static void task_grid(const wf_worker_dit *d, const wf_task *t, int *h, int *w) {
    const wf_dit_exec_info *in = wf_dit_exec_get_info(d->dit);
    bool sized = t->dit.latent.kind == WF_ARTIFACT_LATENT && t->dit.latent.latent.height > 0 &&
                 t->dit.latent.latent.width > 0;
    *h = sized ? t->dit.latent.latent.height : in->latent_height;
    *w = sized ? t->dit.latent.latent.width : in->latent_width;
}

/* Latent positions the cached steppers may reserve together: twice the largest latent's. A
 * stepper's buffers grow with its positions (its forward rows and all-to-all buffers are
 * tokens x hidden per item), so this bounds them at two steppers of the largest size, however
 * many small ones a mixed workload makes. */
static long runner_budget(const wf_worker_dit *d) {
    const wf_dit_exec_info *in = wf_dit_exec_get_info(d->dit);
    return 2 * (long)(wf_dit_exec_latent_floats_max(d->dit) / (size_t)in->latent_channels);
}

/* The multi-rank stepper of (sampler, n_steps) on an h x w latent grid, made on first use;
 * the least recently used ones are replaced while the cache is full or over its budget of
 * positions. NULL with msg on error. */
static wf_dit_sp *get_sp(wf_worker_dit *d, int sampler, int n_steps, int h, int w, char *msg, size_t cap) {
    long used = 0;
    for (int i = 0; i < WF_WORKER_DIT_RUNNERS; i++) {
        if (!d->sps[i].sp) continue;
        if (d->sps[i].sampler == sampler && d->sps[i].n_steps == n_steps && d->sps[i].height == h &&
            d->sps[i].width == w) {
            d->sps[i].used = ++d->clock;
            return d->sps[i].sp;
        }
        used += (long)d->sps[i].height * d->sps[i].width;
    }
    long want = (long)h * w;
    int victim = -1;
    for (;;) {
        int n = 0, lru = -1;
        victim = -1;
        for (int i = 0; i < WF_WORKER_DIT_RUNNERS; i++) {
            if (!d->sps[i].sp) {
                if (victim < 0) victim = i;
                continue;
            }
            n++;
            if (lru < 0 || d->sps[i].used < d->sps[lru].used) lru = i;
        }
        if (victim >= 0 && (n == 0 || used + want <= runner_budget(d))) break;
        used -= (long)d->sps[lru].height * d->sps[lru].width;
        wf_dit_sp_free(d->sps[lru].sp);
        d->sps[lru].sp = NULL;
    }
    wf_dit_sampler_config cfg;
    wf_dit_exec_sampler_config(d->dit, sampler, &cfg);
    const wf_dit_exec_info *in = wf_dit_exec_get_info(d->dit);
    wf_dit_sp *sp = NULL;
    if (wf_dit_sp_new(wf_dit_exec_model(d->dit), &cfg, n_steps, in->max_items, h, w, d->world, &sp, msg, cap) !=
        WF_OK)
        return NULL;
    if (d->heartbeat) wf_dit_sp_set_round_hook(sp, d->heartbeat, d->host);
    d->sps[victim].sp = sp;
    d->sps[victim].sampler = sampler;
    d->sps[victim].n_steps = n_steps;
    d->sps[victim].height = h;
    d->sps[victim].width = w;
    d->sps[victim].used = ++d->clock;
    return sp;
}

/* The stepper item of DENOISE task t on the latent buffer lat. */
static wf_dit_item dit_item(const wf_task *t, float *lat) {
    return (wf_dit_item){.latent = lat, .label = t->dit.class_label, .uncond_label = t->dit.negative_label,
                         .guidance = t->dit.guidance_scale,
                         .key = {.seed = t->dit.seed, .request = t->dit.noise_index},
                         .step = t->dit.step_begin, .step_end = t->dit.step_end};
}

static bool same_group(const wf_group *a, const wf_group *b) {
    return a->n_ranks == b->n_ranks && !memcmp(a->ranks, b->ranks, sizeof(int) * (size_t)a->n_ranks);
}

/* The mode group g runs in: wf_dit_sp_choose's rule over the batch's tasks of that group, the
 * rule the coordinator's router applies too (a multi-rank group runs one task, so a rank that
 * only hands its rows over sees the same tasks as the members). */
static wf_dit_sp_mode dit_mode(const wf_worker_dit *d, const wf_task_batch *b, const wf_group *g) {
    int n = 0, guided = 0, h = 0, w = 0;
    for (int j = 0; j < b->n_tasks; j++)
        if (same_group(&b->tasks[j].group, g)) {
            if (n++ == 0) task_grid(d, &b->tasks[j], &h, &w);
            guided += b->tasks[j].dit.guidance_scale > 1.0f;
        }
    if (n == 0) task_grid(d, &b->tasks[0], &h, &w);
    return wf_dit_sp_choose(wf_dit_get_config(wf_dit_exec_model(d->dit)), h, w, g->n_ranks, n, guided);
}

/* DENOISE chunks over the batch's group of ranks (sequence or guidance parallelism,
 * engine/elastic/dit_sp.h): every member runs the same items on its rows of the latents (all
 * rows under guidance parallelism); the tasks share one sampler and
 * step count (the coordinator's router groups them so). */
static wf_status run_sp(wf_worker_dit *d, wf_task_batch *b, float *const *lat, char *msg, size_t cap) {
    int n = b->n_tasks, max_items = wf_dit_exec_get_info(d->dit)->max_items;
    if (n > max_items) {
        snprintf(msg, cap, "%d tasks in one multi-rank batch, this worker takes %d (start it with "
                 "the coordinator's --image-max-batch)", n, max_items);
        return WF_EINVAL;
    }
    wf_dit_item *items = d->items;
    const wf_task *t0 = &b->tasks[0];
    int h0, w0;
    task_grid(d, t0, &h0, &w0);
    for (int j = 0; j < n; j++) {
        const wf_task *t = &b->tasks[j];
        int h, w;
        task_grid(d, t, &h, &w);
        if (t->dit.sampler != t0->dit.sampler || t->dit.num_steps != t0->dit.num_steps || h != h0 || w != w0) {
            snprintf(msg, cap, "tasks of one multi-rank batch differ in sampler, step count or latent size");
            return WF_EINVAL;
        }
        items[j] = dit_item(t, lat[j]);
    }
    wf_dit_sp *sp = get_sp(d, t0->dit.sampler, t0->dit.num_steps, h0, w0, msg, cap);
    if (!sp) return WF_EINVAL;
    /* Guidance or sequence parallelism: the rule the coordinator's router applies too. */
    wf_dit_placement pl = wf_dit_placement_make(dit_mode(d, b, &b->group), b->group.ranks, b->group.n_ranks);
    uint64_t t_begin = wf_clock_now_ns();
    wf_status st = wf_dit_sp_run(sp, wf_dit_exec_pool(d->dit), &pl, n, items, msg, cap);
    uint64_t t_end = wf_clock_now_ns();
    for (int j = 0; j < n; j++) {
        wf_task *t = &b->tasks[j];
        t->status = st;
        t->t_begin_ns = t_begin;
        t->t_end_ns = t_end;
        t->dit.latent.kind = WF_ARTIFACT_LATENT;
        t->dit.latent.latent.step = items[j].step;
    }
    return st;
}

/* Where a DENOISE task's latent is and where it goes (the coordinator's router says so,
 * server/workers/dit_router.h): dit.latent.placement holds it now: no rank or rank 0 is home
 * (the latent comes from rank 0 right after the frame); worker ranks hold it since the last
 * chunk (OWNER: whole on one rank; REPLICATED: whole on each, as guidance parallelism leaves
 * it; SHARDED: patch rows per member, as Ulysses leaves it). The task's group runs the chunk;
 * dit.image of kind WF_ARTIFACT_LATENT keeps the result on the group's ranks, else it goes home
 * right after BATCH_DONE. */
static bool dit_home(const wf_placement *p) {
    return p->holders.n_ranks == 0 || (p->holders.n_ranks == 1 && p->holders.ranks[0] == 0);
}

static wf_dit_placement dit_held(const wf_placement *p) {
    if (p->kind == WF_PLACEMENT_OWNER && p->holders.n_ranks != 1) return wf_dit_placement_make(0, NULL, 0);
    return wf_dit_placement_make(p->kind == WF_PLACEMENT_REPLICATED ? WF_DIT_SP_CFG : WF_DIT_SP_ULYSSES,
                                 p->holders.ranks, p->holders.n_ranks);
}

static void dit_fail(wf_task *t, wf_status st, const char *why, wf_frame_batch_done *done, int rank) {
    t->status = st;
    if (done->status != WF_OK) return;
    done->status = st;
    snprintf(done->message, sizeof done->message, "worker rank %d: task %llu: %.900s", rank,
             (unsigned long long)t->id, why);
}

/* Runs the member tasks of the batch (one group: this rank's in the wave) on their latents. */
static void dit_run_members(wf_worker_dit *d, wf_task_batch *b, float *const *lat, const bool *member,
                            wf_frame_batch_done *done, int rank) {
    char msg[WF_FRAME_TASK_MESSAGE_MAX] = "";
    int n = 0, steps = 0;
    const wf_group *g = NULL;
    for (int j = 0; j < b->n_tasks; j++)
        if (member[j] && b->tasks[j].status == WF_OK) {
            if (g && !same_group(g, &b->tasks[j].group)) {
                dit_fail(&b->tasks[j], WF_EINVAL, "this rank is in two groups of one batch", done, rank);
                continue;
            }
            g = &b->tasks[j].group;
            n++;
            steps += b->tasks[j].dit.step_end - b->tasks[j].dit.step_begin;
        }
    if (n == 0 || steps == 0) return; /* nothing to run (only moves) */
    wf_task *sub = malloc((size_t)n * sizeof *sub);
    float **sl = malloc((size_t)n * sizeof *sl);
    int *idx = malloc((size_t)n * sizeof *idx);
    if (!sub || !sl || !idx) {
        for (int j = 0; j < b->n_tasks; j++)
            if (member[j] && b->tasks[j].status == WF_OK) dit_fail(&b->tasks[j], WF_ENOMEM, "out of memory", done, rank);
        free(sub), free(sl), free(idx);
        return;
    }
    int k = 0;
    for (int j = 0; j < b->n_tasks; j++)
        if (member[j] && b->tasks[j].status == WF_OK && same_group(g, &b->tasks[j].group)) {
            sub[k] = b->tasks[j];
            sl[k] = lat[j];
            idx[k++] = j;
        }
    wf_task_batch sb = {.tasks = sub, .n_tasks = k, .group = *g, .iteration = b->iteration};
    wf_executor ex = wf_dit_exec_executor(d->dit);
    wf_status st = g->n_ranks > 1 ? run_sp(d, &sb, sl, msg, sizeof msg)
                   : d->run_local ? d->run_local(d->host, ex, &sb, msg, sizeof msg)
                                  : wf_executor_run(ex, &sb, msg, sizeof msg);
    for (int q = 0; q < k; q++) {
        wf_task *t = &b->tasks[idx[q]];
        t->t_begin_ns = sub[q].t_begin_ns;
        t->t_end_ns = sub[q].t_end_ns;
        t->dit.latent.latent.step = sub[q].dit.latent.latent.step;
        wf_status ts = st != WF_OK ? st : sub[q].status;
        if (ts != WF_OK) dit_fail(t, ts, msg[0] ? msg : wf_status_str(ts), done, rank);
    }
    free(sub), free(sl), free(idx);
}

/* A batch of DENOISE chunks of one wave (server/workers/dit_router.h): each task in which this
 * rank holds the latent (its old group) or runs the chunk (its new group). In order: latents
 * coming from home arrive (one tagged message per task, right after the frame); latents held
 * by worker ranks move to the new group with wf_dit_sp_reshard, one task after the other in
 * the batch's order (the same order on every rank, so these collectives never wait on each
 * other in a cycle); the member tasks run; the results bound for home go back right after
 * BATCH_DONE. A rank keeps a latent only as a member of a group that keeps it: an old holder
 * drops its copy once it has handed its rows over, and every rank drops a task's latent when
 * the task failed (the coordinator runs it again from its home copy). Every home latent is
 * received even when its task cannot run, so the coordinator's sends never wait for nothing. */
wf_status wf_worker_dit_run(wf_worker_dit *d, wf_task_batch *b) {
    char err[WF_FRAME_TASK_MESSAGE_MAX] = "", why[WF_FRAME_TASK_MESSAGE_MAX];
    wf_frame_batch_done done = {.iteration = b->iteration, .status = WF_OK};
    int rank = wf_world_rank(d->world), n = b->n_tasks, n_ops = 0;
    wf_world_op ops[256];
    float *lat[256];
    bool member[256], keep[256], processed = false;
    size_t native = d->dit ? wf_dit_exec_latent_floats(d->dit) * sizeof(float) : 0, bytes[256];
    if (!d->dit) {
        done.status = WF_EUNSUPPORTED;
        snprintf(done.message, sizeof done.message, "worker rank %d: no DiT model on this worker", rank);
    } else if (n > 255) {
        done.status = WF_EINVAL;
        snprintf(done.message, sizeof done.message, "worker rank %d: %d DENOISE tasks in one batch (at most 255)",
                 rank, n);
    } else {
        processed = true;
        for (int j = 0; j < n; j++) {
            wf_task *t = &b->tasks[j];
            t->status = WF_OK;
            lat[j] = NULL;
            member[j] = keep[j] = false;
            if (t->kind != WF_TASK_DENOISE) {
                dit_fail(t, WF_EINVAL, "not a DENOISE task", &done, rank);
                continue;
            }
            member[j] = wf_gfc_group_index(&t->group, rank) >= 0;
            keep[j] = member[j] && t->dit.image.kind == WF_ARTIFACT_LATENT;
            bool home = dit_home(&t->dit.latent.placement);
            /* A latent of another size than the native one: the size its task states, from
             * home to its group (one rank, or several splitting it as for the native size) and
             * back every chunk (the router holds native latents only between chunks). */
            int lh = t->dit.latent.latent.height, lw = t->dit.latent.latent.width;
            bool sized = t->dit.latent.kind == WF_ARTIFACT_LATENT && lh > 0 && lw > 0;
            /* by its grid, not its bytes: 16x4 has the floats of 8x8 but other positions */
            bool other = sized && (lh != wf_dit_exec_get_info(d->dit)->latent_height ||
                                   lw != wf_dit_exec_get_info(d->dit)->latent_width);
            bytes[j] = wf_workers_latent_bytes(t, native);
            if (sized && bytes[j] > wf_dit_exec_latent_floats_max(d->dit) * sizeof(float)) {
                bytes[j] = native; /* never received: the task fails below */
                snprintf(why, sizeof why, "latent %dx%d is larger than this worker's largest", lh, lw);
                dit_fail(t, WF_EINVAL, why, &done, rank);
                member[j] = false;
                continue;
            }
            if (other && (!home || keep[j])) {
                snprintf(why, sizeof why, "a %dx%d latent (not native) goes from home and back every chunk", lh, lw);
                dit_fail(t, WF_EINVAL, why, &done, rank);
                member[j] = keep[j] = false;
                continue;
            }
            if (member[j] && home && other) {
                if (!(lat[j] = wf_dit_exec_latent_sized(d->dit, t->dit.latent.id, lh, lw)))
                    dit_fail(t, WF_EFULL, "no free latent slot for its size", &done, rank);
            } else if (!home && wf_gfc_group_index(&t->dit.latent.placement.holders, rank) >= 0) {
                if (!(lat[j] = wf_dit_exec_latent(d->dit, t->dit.latent.id, false))) {
                    snprintf(why, sizeof why, "latent %llu is not held here (a replaced rank?)",
                             (unsigned long long)t->dit.latent.id);
                    dit_fail(t, WF_ENOTFOUND, why, &done, rank);
                }
            } else if (member[j] && !(lat[j] = wf_dit_exec_latent(d->dit, t->dit.latent.id, true))) {
                dit_fail(t, WF_EFULL, "no free latent slot", &done, rank);
            } else if (!member[j]) {
                /* Neither holder nor member: the coordinator gave up the copy this rank held
                 * (a cancelled request, or one restarted from home): drop it. */
                wf_dit_exec_latent_drop(d->dit, t->dit.latent.id);
            }
            if (home && member[j])
                ops[n_ops++] = (wf_world_op){.kind = WF_WORLD_RECV, .peer = 0,
                                             .tag = WF_WORKERS_LATENT_TAG(b->iteration, j),
                                             .buf = lat[j] ? lat[j] : d->scratch, .len = bytes[j]};
        }
        wf_status st = wf_world_run(d->world, ops, n_ops);
        if (st != WF_OK) return st; /* rank 0 is gone or stuck */
        for (int o = 0; o < n_ops; o++)
            if (ops[o].received != ops[o].len) {
                snprintf(why, sizeof why, "latent: %zu bytes from rank 0, expected %zu", ops[o].received, ops[o].len);
                dit_fail(&b->tasks[ops[o].tag.step], WF_EPROTO, why, &done, rank);
            }
        /* Worker to worker: the slices that change hands, task by task in batch order. A rank
         * whose part failed still takes part (with scratch rows), so the others never wait. */
        for (int j = 0; j < n; j++) {
            wf_task *t = &b->tasks[j];
            if (t->kind != WF_TASK_DENOISE || dit_home(&t->dit.latent.placement)) continue;
            bool holder = wf_gfc_group_index(&t->dit.latent.placement.holders, rank) >= 0;
            if (!holder && !member[j]) continue;
            wf_dit_placement from = dit_held(&t->dit.latent.placement);
            wf_dit_placement to = wf_dit_placement_make(dit_mode(d, b, &t->group), t->group.ranks, t->group.n_ranks);
            if (from.mode == to.mode && same_group(&from.group, &to.group)) continue; /* stays */
            int gh, gw;
            task_grid(d, t, &gh, &gw);
            wf_dit_sp *sp = get_sp(d, t->dit.sampler, t->dit.num_steps, gh, gw, why, sizeof why);
            wf_dit_item it = dit_item(t, lat[j] ? lat[j] : d->scratch);
            wf_status rs = sp ? wf_dit_sp_reshard(sp, &from, &to, 1, &it, why, sizeof why) : WF_EINVAL;
            if (rs != WF_OK) dit_fail(t, rs, why, &done, rank);
        }
        dit_run_members(d, b, lat, member, &done, rank);
    }
    wf_status st = WF_OK;
    if (processed) {
        if (n > d->results_cap) {
            free(d->results);
            d->results_cap = 0;
            if (!(d->results = malloc((size_t)n * sizeof *d->results))) return WF_ENOMEM;
            d->results_cap = n;
        }
        wf_frame_task_event ev;
        wf_frame_task_event_from_batch(b, d->results, NULL, &ev);
        st = WF_LINK_SEND(d->world, d->link, wf_frame_encode_task_event, &ev, err, sizeof err);
    }
    if (st == WF_OK) st = WF_LINK_SEND(d->world, d->link, wf_frame_encode_batch_done, &done, err, sizeof err);
    /* Home: the member results of tasks that succeeded and do not stay (pool.c receives
     * exactly these, by the statuses of the TASK_EVENT). */
    n_ops = 0;
    for (int j = 0; processed && j < n; j++)
        if (member[j] && !keep[j] && b->tasks[j].status == WF_OK)
            ops[n_ops++] = (wf_world_op){.kind = WF_WORLD_SEND, .peer = 0,
                                         .tag = WF_WORKERS_LATENT_TAG(b->iteration, j),
                                         .buf = lat[j], .len = bytes[j]};
    if (st == WF_OK && n_ops > 0) st = wf_world_run(d->world, ops, n_ops);
    for (int j = 0; processed && j < n; j++)
        if (lat[j] && !(keep[j] && b->tasks[j].status == WF_OK))
            wf_dit_exec_latent_drop(d->dit, b->tasks[j].dit.latent.id);
    return st;
}

