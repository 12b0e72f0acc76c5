/* DiT serving on worker ranks: see dit_router.h. */
#include "server/workers/dit_router.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/elastic/dit_sp.h"
#include "engine/gfc/gfc.h"
#include "proto/base/clock.h"
#include "proto/base/log.h"
#include "proto/exec_thread.h"
#include "sched/dit_cost.h"
#include "sched/dit_policy.h"

/* One worker's part of a wave: the tasks of its group (its own copies: each member's TASK_EVENT
 * fills them) and a receive buffer per task (a member of a multi-rank group sends back its
 * whole buffer, of which only its rows are valid). */
typedef struct part {
    struct wf_dit_router *r;
    wf_task_batch b;
    wf_task *tasks;
    float **lat;
    int cap;
    wf_status status;
    char msg[160];
    uint64_t done_ns;  /* when its completion arrived */
} part;

/* A group of a wave: ranks (worker indices) and the batch tasks it runs. */
typedef struct wgroup {
    int n_ranks, ranks[WF_DIT_MAX_RANKS];
    int n, first;      /* batch task indices wave[first .. first + n) */
} wgroup;

struct wf_dit_router {
    wf_dit_exec *local;
    wf_workers *ws;
    wf_exec_thread *thread;
    wf_dit_policy *policy;
    wf_dit_cost cost;
    const wf_dit_config *model_cfg;
    int n_workers, tokens, max_P, patch;
    int lat_c, lat_h, lat_w;
    size_t lat_floats;
    /* run's scratch, grown to the largest batch */
    int cap;
    wf_task *tasks;
    int *idx, *todo, *tries, *wave;
    wf_dit_job *jobs;
    wf_dit_job **ready;
    wf_dit_task *picks;
    wgroup *groups;
    part parts[WF_WORKERS_MAX];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int left;          /* parts in flight (lock) */
    wf_dit_router_stats stats; /* lock */
    char policy_name[64];
};

static void part_done(void *user, wf_task_batch *b, wf_status st, const char *msg) {
    (void)b;
    part *p = user;
    wf_dit_router *r = p->r;
    pthread_mutex_lock(&r->lock);
    p->status = st;
    p->done_ns = wf_clock_now_ns();
    snprintf(p->msg, sizeof p->msg, "%s", msg ? msg : wf_status_str(st));
    if (--r->left == 0) pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

#define GROW(ptr, n)                                                  \
    do {                                                              \
        void *np_ = realloc((ptr), (size_t)(n) * sizeof *(ptr));      \
        if (!np_) return WF_ENOMEM;                                   \
        (ptr) = np_;                                                  \
    } while (0)

static wf_status grow(wf_dit_router *r, int n) {
    if (n <= r->cap) return WF_OK;
    GROW(r->tasks, n);
    GROW(r->idx, n);
    GROW(r->todo, n);
    GROW(r->tries, n);
    GROW(r->wave, n);
    GROW(r->jobs, n);
    GROW(r->ready, n);
    GROW(r->picks, n);
    GROW(r->groups, n);
    r->cap = n;
    return WF_OK;
}

static wf_status part_reserve(part *p, int n, size_t floats) {
    if (n <= p->cap) return WF_OK;
    GROW(p->tasks, n);
    GROW(p->lat, n);
    for (int i = p->cap; i < n; i++) p->lat[i] = NULL;
    for (int i = p->cap; i < n; i++)
        if (!(p->lat[i] = malloc(floats * sizeof(float)))) {
            p->cap = i;
            return WF_ENOMEM;
        }
    p->cap = n;
    return WF_OK;
}

/* Runs the tasks of `kinds` (a bit per wf_task_kind) on the local executor, outputs copied back. */
static wf_status run_local(wf_dit_router *r, wf_task_batch *b, unsigned kinds, char *msg, size_t cap) {
    int n = 0;
    for (int i = 0; i < b->n_tasks; i++)
        if (kinds & (1u << b->tasks[i].kind)) {
            r->tasks[n] = b->tasks[i];
            r->idx[n++] = i;
        }
    if (n == 0) return WF_OK;
    wf_task_batch sub = {.tasks = r->tasks, .n_tasks = n, .group = b->group, .iteration = b->iteration};
    wf_status st = wf_executor_run(wf_dit_exec_executor(r->local), &sub, msg, cap);
    if (st != WF_OK) return st;
    for (int i = 0; i < n; i++) b->tasks[r->idx[i]] = r->tasks[i];
    return WF_OK;
}

/* The mode group gr runs its tasks in: wf_dit_sp_choose's rule, which its members apply too. */
static wf_dit_sp_mode group_mode(const wf_dit_router *r, const wf_task_batch *b, const wgroup *gr) {
    int guided = 0;
    for (int j = 0; j < gr->n; j++) guided += b->tasks[r->wave[gr->first + j]].dit.guidance_scale > 1.0f;
    return wf_dit_sp_choose(r->model_cfg, r->lat_h, r->lat_w, gr->n_ranks, gr->n, guided);
}

/* Runs one wave: every group's tasks on its ranks at once (each member gets the same tasks and
 * whole latents), then merges what came back into the home latents: member m of a group of P
 * contributes its rows. Tasks of a lost worker stay WF_IN_PROGRESS with one more try. Returns != WF_OK when the batch fails as a whole (msg). */
static wf_status run_wave(wf_dit_router *r, wf_task_batch *b, int n_groups, char *msg, size_t cap) {
    size_t bytes = r->lat_floats * sizeof(float);
    pthread_mutex_lock(&r->lock);
    r->left = 0;
    pthread_mutex_unlock(&r->lock);
    uint64_t t0 = wf_clock_now_ns();
    for (int g = 0; g < n_groups; g++) {
        wgroup *gr = &r->groups[g];
        wf_group grp = {.n_ranks = gr->n_ranks};
        for (int m = 0; m < gr->n_ranks; m++) grp.ranks[m] = wf_workers_rank(r->ws, gr->ranks[m]);
        grp.id = wf_gfc_group_hash(grp.ranks, grp.n_ranks);
        for (int m = 0; m < gr->n_ranks; m++) {
            part *p = &r->parts[gr->ranks[m]];
            p->r = r;
            pthread_mutex_lock(&r->lock);
            r->left++;
            pthread_mutex_unlock(&r->lock);
            if (part_reserve(p, gr->n, r->lat_floats) != WF_OK) {
                /* Fails the batch, after the parts already dispatched have answered. */
                part_done(p, NULL, WF_ENOMEM, "DiT router: out of memory");
                continue;
            }
            p->status = WF_OK;
            p->msg[0] = '\0';
            p->b = (wf_task_batch){.tasks = p->tasks, .n_tasks = gr->n, .iteration = b->iteration,
                                   .group = grp};
            for (int j = 0; j < gr->n; j++) {
                wf_task *t = &p->tasks[j];
                *t = b->tasks[r->wave[gr->first + j]];
                t->group = grp;
                memcpy(p->lat[j], wf_dit_exec_latent(r->local, t->dit.latent.id, false), bytes);
            }
            wf_status st = wf_workers_dispatch_latents(r->ws, gr->ranks[m], &p->b, p->lat, bytes,
                                                       part_done, p);
            if (st != WF_OK) part_done(p, &p->b, st, "dispatch refused");
        }
    }
    pthread_mutex_lock(&r->lock);
    while (r->left > 0) pthread_cond_wait(&r->cond, &r->lock);
    pthread_mutex_unlock(&r->lock);
    /* A group succeeded when all its members did. */
    wf_status fatal = WF_OK;
    for (int g = 0; g < n_groups; g++) {
        wgroup *gr = &r->groups[g];
        wf_dit_sp_mode mode = group_mode(r, b, gr);
        wf_status gst = WF_OK;
        const char *gmsg = "";
        bool lost = false;
        for (int m = 0; m < gr->n_ranks; m++) {
            part *p = &r->parts[gr->ranks[m]];
            if (p->status == WF_OK) continue;
            bool l = p->status == WF_ECLOSED || p->status == WF_EPEER || p->status == WF_ETIMEDOUT;
            /* A member that saw a peer fail reports the peer's loss: the group is lost. */
            lost |= l;
            if (gst == WF_OK || l) {
                gst = p->status;
                gmsg = p->msg;
            }
        }
        if (gst != WF_OK)
            WF_LOG_WARN("dit", NULL, "DENOISE chunks on %d rank(s) from rank %d failed: %s%s",
                        gr->n_ranks, wf_workers_rank(r->ws, gr->ranks[0]), gmsg,
                        lost ? " (running them again)" : "");
        for (int j = 0; j < gr->n; j++) {
            int i = r->wave[gr->first + j];
            wf_task *t = &b->tasks[i];
            if (gst != WF_OK) {
                if (lost) {
                    r->tries[i]++; /* still in progress: its home latent is untouched */
                } else if (fatal == WF_OK) {
                    fatal = gst;
                    snprintf(msg, cap, "%s", gmsg);
                }
                continue;
            }
            const wf_task *got = &r->parts[gr->ranks[0]].tasks[j];
            t->status = got->status;
            t->t_begin_ns = got->t_begin_ns;
            t->t_end_ns = got->t_end_ns;
            t->group = got->group;
            if (t->status != WF_OK) continue;
            t->dit.latent.kind = WF_ARTIFACT_LATENT;
            t->dit.latent.latent.step = got->dit.latent.latent.step;
            float *home = wf_dit_exec_latent(r->local, t->dit.latent.id, false);
            if (gr->n_ranks == 1 || mode == WF_DIT_SP_CFG) { /* every member holds the whole latent */
                memcpy(home, r->parts[gr->ranks[0]].lat[j], bytes);
                continue;
            }
            wf_dit_placement pl = wf_dit_placement_make(mode, t->group.ranks, gr->n_ranks);
            size_t plane = (size_t)r->lat_h * (size_t)r->lat_w;
            for (int m = 0; m < gr->n_ranks; m++) {
                int r0, r1;
                wf_dit_sp_rows(&pl, r->patch, r->lat_h, m, &r0, &r1);
                const float *src = r->parts[gr->ranks[m]].lat[j];
                for (int c = 0; c < r->lat_c; c++)
                    memcpy(home + c * plane + (size_t)r0 * (size_t)r->lat_w,
                           src + c * plane + (size_t)r0 * (size_t)r->lat_w,
                           (size_t)(r1 - r0) * (size_t)r->lat_w * sizeof(float));
            }
        }
        if (gst == WF_OK && gr->n == 1) {
            /* The group's own time (dispatch to its last member's answer), as calibrated. */
            const wf_task *t = &b->tasks[r->wave[gr->first]];
            int steps = t->dit.step_end - t->dit.step_begin;
            uint64_t end = t0;
            for (int m = 0; m < gr->n_ranks; m++)
                if (r->parts[gr->ranks[m]].done_ns > end) end = r->parts[gr->ranks[m]].done_ns;
            if (steps > 0) wf_dit_cost_observe(&r->cost, r->tokens, gr->n_ranks, (double)(end - t0) / 1e6 / steps);
        }
        pthread_mutex_lock(&r->lock);
        for (int m = 0; gst == WF_OK && m < gr->n_ranks; m++) {
            r->stats.rank_chunks[gr->ranks[m]] += (uint64_t)gr->n;
            if (gr->n_ranks > 1 && mode == WF_DIT_SP_CFG) r->stats.rank_cfg_chunks[gr->ranks[m]] += (uint64_t)gr->n;
        }
        pthread_mutex_unlock(&r->lock);
    }
    return fatal;
}

/* The groups of the next wave for todo[0..n): the policy's picks (sched/dit_policy.h) over the
 * live workers, each its own group; when it picks nothing, one rank per task, the tasks spread
 * in blocks over the live workers. Returns the number of groups; 0 when no worker is live. */
static int plan_wave(wf_dit_router *r, const wf_task_batch *b, int n) {
    bool busy[WF_DIT_MAX_RANKS];
    int live[WF_WORKERS_MAX], n_live = 0;
    for (int w = 0; w < r->n_workers; w++) {
        busy[w] = !wf_workers_live(r->ws, w);
        if (!busy[w]) live[n_live++] = w;
    }
    if (n_live == 0) return 0;
    double now_ms = (double)wf_clock_now_ns() / 1e6;
    for (int k = 0; k < n; k++) {
        const wf_task *t = &b->tasks[r->todo[k]];
        wf_dit_job *j = &r->jobs[k];
        *j = (wf_dit_job){.id = k, .tokens = r->tokens, .steps = t->dit.num_steps,
                          .steps_done = t->dit.step_begin, .max_P = r->max_P,
                          .arrival_ms = now_ms,
                          .deadline_ms = t->deadline_ns ? (double)t->deadline_ns / 1e6 : now_ms + 1e9,
                          .latent_bytes = (double)(r->lat_floats * sizeof(float))};
        r->ready[k] = j;
    }
    wf_dit_view v = {.now_ms = now_ms, .n_ranks = r->n_workers, .busy = busy,
                     .ready = r->ready, .n_ready = n};
    int k = wf_dit_policy_pick(r->policy, &v, r->picks, n);
    int g = 0, at = 0;
    if (k > 0) {
        /* One group per pick (a policy gives each picked job its own free ranks, one job per
         * group, as GF-DiT's do); should one give several single-rank picks the same rank,
         * they share its forward. A multi-rank group runs one job. */
        for (int i = 0; i < k; i++) {
            const wf_dit_task *pk = &r->picks[i];
            int found = -1;
            for (int q = 0; pk->n_ranks == 1 && q < g; q++)
                if (r->groups[q].n_ranks == 1 && r->groups[q].ranks[0] == pk->ranks[0]) found = q;
            if (found < 0) {
                wgroup *gr = &r->groups[g++];
                gr->n_ranks = pk->n_ranks;
                memcpy(gr->ranks, pk->ranks, sizeof(int) * (size_t)pk->n_ranks);
                gr->n = 0;
            }
        }
        /* Lay the tasks out group by group. */
        for (int q = 0; q < g; q++) {
            wgroup *gr = &r->groups[q];
            gr->first = at;
            for (int i = 0; i < k; i++) {
                const wf_dit_task *pk = &r->picks[i];
                bool mine = pk->n_ranks == gr->n_ranks &&
                            !memcmp(pk->ranks, gr->ranks, sizeof(int) * (size_t)pk->n_ranks);
                if (mine && (gr->n_ranks == 1 || gr->n == 0)) {
                    r->wave[at++] = r->todo[pk->job];
                    gr->n++;
                }
            }
            if (gr->n == 0) g--; /* cannot happen: every group came from a pick */
        }
        return g;
    }
    int per = (n + n_live - 1) / n_live;
    for (int i = 0; i < n_live && at < n; i++) {
        wgroup *gr = &r->groups[g++];
        gr->n_ranks = 1;
        gr->ranks[0] = live[i];
        gr->first = at;
        gr->n = n - at < per ? n - at : per;
        for (int j = 0; j < gr->n; j++) r->wave[at + j] = r->todo[at + j];
        at += gr->n;
    }
    return g;
}

/* Runs every DENOISE task still WF_IN_PROGRESS in waves until each has a result; a task of a
 * lost worker stays in progress (its home latent untouched) and runs in the next wave, at most
 * WF_DIT_ROUTER_ATTEMPTS times. */
static wf_status run_denoise(wf_dit_router *r, wf_task_batch *b, char *msg, size_t cap) {
    for (int i = 0; i < b->n_tasks; i++) {
        wf_task *t = &b->tasks[i];
        if (t->kind != WF_TASK_DENOISE) continue;
        r->tries[i] = 0;
        if (!wf_dit_exec_latent(r->local, t->dit.latent.id, false)) t->status = WF_ENOTFOUND;
    }
    for (;;) {
        int n = 0;
        for (int i = 0; i < b->n_tasks; i++) {
            if (b->tasks[i].kind != WF_TASK_DENOISE || b->tasks[i].status != WF_IN_PROGRESS) continue;
            if (r->tries[i] >= WF_DIT_ROUTER_ATTEMPTS) {
                snprintf(msg, cap, "DENOISE chunk lost with its worker %d times", WF_DIT_ROUTER_ATTEMPTS);
                return WF_ECLOSED;
            }
            r->todo[n++] = i;
        }
        if (n == 0) return WF_OK;
        int g = plan_wave(r, b, n);
        if (g == 0) {
            snprintf(msg, cap, "no live DiT worker rank (all %d down)", r->n_workers);
            return WF_ECLOSED;
        }
        wf_status st = run_wave(r, b, g, msg, cap);
        if (st != WF_OK) return st;
    }
}

static wf_status router_run(void *ctx, wf_task_batch *b, char *msg, size_t cap) {
    wf_dit_router *r = ctx;
    if (grow(r, b->n_tasks) != WF_OK) {
        snprintf(msg, cap, "DiT router: out of memory for %d tasks", b->n_tasks);
        return WF_ENOMEM;
    }
    for (int i = 0; i < b->n_tasks; i++)
        if (b->tasks[i].kind == WF_TASK_PREFILL || b->tasks[i].kind == WF_TASK_DECODE)
            b->tasks[i].status = WF_EUNSUPPORTED;
    /* FINISH first (frees slots), then ENCODE, as the in-process executor orders them. */
    wf_status st = run_local(r, b, 1u << WF_TASK_FINISH | 1u << WF_TASK_ENCODE, msg, cap);
    if (st != WF_OK) return st;
    for (int i = 0; i < b->n_tasks; i++)
        if (b->tasks[i].kind == WF_TASK_DENOISE) b->tasks[i].status = WF_IN_PROGRESS; /* until a wave gives it a result */
    st = run_denoise(r, b, msg, cap);
    if (st != WF_OK) return st;
    return run_local(r, b, 1u << WF_TASK_DECODE_IMAGE, msg, cap);
}

static bool router_supports(void *ctx, wf_task_kind kind) {
    (void)ctx;
    return kind == WF_TASK_ENCODE || kind == WF_TASK_DENOISE || kind == WF_TASK_DECODE_IMAGE ||
           kind == WF_TASK_FINISH;
}

static wf_status router_dispatch(void *ctx, wf_task_batch *b, wf_executor_done_fn done, void *user) {
    wf_dit_router *r = ctx;
    return wf_exec_thread_dispatch(r->thread, b, done, user);
}

static void router_cancel(void *ctx, wf_task_batch *b) {
    wf_dit_router *r = ctx;
    wf_exec_thread_cancel(r->thread, b);
}

static void router_synchronize(void *ctx) {
    wf_dit_router *r = ctx;
    wf_exec_thread_synchronize(r->thread);
}

static const wf_executor_ops router_ops = {.name = "dit-workers",
                                           .supports = router_supports,
                                           .dispatch = router_dispatch,
                                           .cancel = router_cancel,
                                           .synchronize = router_synchronize};

wf_executor wf_dit_router_executor(wf_dit_router *r) {
    return (wf_executor){.ops = &router_ops, .ctx = r};
}

#define CALIB_ID UINT64_C(0xFFFFFFFFFFFFFF00) /* the scheduler's latent ids stay far below */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The measured cost model: for every degree P the model and the workers allow (1, 2, 4, ...),
 * the median of 7 timed one-step chunks of one image on ranks 1..P (after a warm-up), through
 * the same path as requests (latents out and back). */
static void calibrate(wf_dit_router *r) {
    wf_dit_cost_measured(&r->cost);
    float *home = wf_dit_exec_latent(r->local, CALIB_ID, true);
    if (!home) return;
    memset(home, 0, r->lat_floats * sizeof(float));
    wf_task t = {.id = CALIB_ID, .kind = WF_TASK_DENOISE,
                 .dit = {.class_label = 0, .negative_label = -1, .guidance_scale = 0, .sampler = -1,
                         .num_steps = 20, .step_begin = 0, .step_end = 1,
                         .latent = {.id = CALIB_ID, .kind = WF_ARTIFACT_LATENT}}};
    wf_task_batch b = {.tasks = &t, .n_tasks = 1};
    char msg[160];
    for (int P = 1; P <= r->max_P; P *= 2) {
        double ms[8];
        int ok = 0;
        for (int rep = 0; rep < 8; rep++) {
            r->wave[0] = 0;
            r->groups[0] = (wgroup){.n_ranks = P, .n = 1, .first = 0};
            for (int m = 0; m < P; m++) r->groups[0].ranks[m] = m;
            t.status = WF_IN_PROGRESS;
            uint64_t t0 = wf_clock_now_ns();
            if (run_wave(r, &b, 1, msg, sizeof msg) != WF_OK || t.status != WF_OK) break;
            if (rep > 0) ms[ok++] = (double)(wf_clock_now_ns() - t0) / 1e6;
        }
        if (ok < 7) {
            WF_LOG_WARN("dit", NULL, "calibrating %d rank(s): %s: degree not used", P, msg);
            continue;
        }
        qsort(ms, 7, sizeof ms[0], cmp_double);
        wf_dit_cost_add_point(&r->cost, r->tokens, P, ms[3]);
        WF_LOG_INFO("dit", NULL, "DiT step on %d worker rank(s): %.3f ms (%d tokens, median of 7)", P,
                    ms[3], r->tokens);
    }
    wf_dit_exec_latent_drop(r->local, CALIB_ID);
    if (!wf_dit_cost_allows(&r->cost, 1)) wf_dit_cost_synthetic(&r->cost); /* nothing measured */
    pthread_mutex_lock(&r->lock);
    memset(&r->stats, 0, sizeof r->stats);
    pthread_mutex_unlock(&r->lock);
}

wf_status wf_dit_router_new(wf_dit_exec *local, wf_workers *ws, const char *policy, int chunk_steps,
                            wf_dit_router **out, char *err, size_t errlen) {
    *out = NULL;
    if (!local || !ws) return wf_status_errorf(err, errlen, WF_EINVAL, "DiT router: no executor or pool");
    wf_dit_router *r = calloc(1, sizeof *r);
    if (!r) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    r->local = local;
    r->ws = ws;
    r->lat_floats = wf_dit_exec_latent_floats(local);
    r->n_workers = wf_workers_count(ws);
    if (r->n_workers > WF_DIT_MAX_RANKS) r->n_workers = WF_DIT_MAX_RANKS;
    const wf_dit_exec_info *in = wf_dit_exec_get_info(local);
    const wf_dit_config *c = wf_dit_get_config(wf_dit_exec_model(local));
    r->lat_c = in->latent_channels;
    r->lat_h = in->latent_height;
    r->lat_w = in->latent_width;
    r->patch = c->patch_size;
    r->model_cfg = c;
    r->tokens = (r->lat_h / r->patch) * (r->lat_w / r->patch);
    r->max_P = wf_dit_sp_fit(c, r->lat_h, r->lat_w, r->n_workers);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    wf_status st = grow(r, 16);
    if (st != WF_OK) {
        wf_dit_router_free(r);
        return wf_status_errorf(err, errlen, st, "out of memory");
    }
    calibrate(r);
    if (!policy) policy = r->n_workers >= 2 ? "elastic" : "static:1";
    if ((st = wf_dit_policy_new(policy, r->n_workers, &r->cost, chunk_steps > 0 ? chunk_steps : 1,
                                &r->policy, err, errlen)) != WF_OK) {
        wf_dit_router_free(r);
        return st;
    }
    snprintf(r->policy_name, sizeof r->policy_name, "%s", policy);
    if ((st = wf_exec_thread_new("dit-router", 4, router_run, r, &r->thread)) != WF_OK) {
        wf_dit_router_free(r);
        return wf_status_errorf(err, errlen, st, "DiT router: cannot start its thread");
    }
    WF_LOG_INFO("dit", NULL, "DiT on %d worker rank(s): policy %s, degrees up to %d (%d tokens, %d heads)",
                r->n_workers, policy, r->max_P, r->tokens, c->heads);
    *out = r;
    return WF_OK;
}

void wf_dit_router_free(wf_dit_router *r) {
    if (!r) return;
    wf_exec_thread_free(r->thread);
    for (int w = 0; w < WF_WORKERS_MAX; w++) {
        part *p = &r->parts[w];
        for (int i = 0; i < p->cap; i++) free(p->lat[i]);
        free(p->lat);
        free(p->tasks);
    }
    wf_dit_policy_free(r->policy);
    free(r->tasks);
    free(r->idx);
    free(r->todo);
    free(r->tries);
    free(r->wave);
    free(r->jobs);
    free(r->ready);
    free(r->picks);
    free(r->groups);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void wf_dit_router_get_stats(wf_dit_router *r, wf_dit_router_stats *out) {
    pthread_mutex_lock(&r->lock);
    *out = r->stats;
    pthread_mutex_unlock(&r->lock);
    snprintf(out->policy, sizeof out->policy, "%s", r->policy_name);
}
