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

/* One worker's part of a wave: the tasks it takes part in, as a member of their group or as a
 * holder of their latent (its own copies: its TASK_EVENT fills them), a buffer per task (a
 * latent from home goes out of it, a result bound for home comes back into it: a member of a
 * multi-rank group sends back its whole buffer, of which only its rows are valid), and which
 * batch task each is (-1: a drop of a copy the router gave up). */
typedef struct part {
    struct wf_dit_router *r;
    wf_task_batch b;
    wf_task *tasks;
    float **buf, **out, **back;
    int *widx;
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

/* A latent that stays on worker ranks between chunks (no entry: only at home, where the home
 * copy is current). n == 0: the workers' copy was lost; the home copy is older (home_step) and
 * the next chunk starts there. */
typedef struct held {
    uint64_t id;
    int n;                             /* holders (worker indices, member order) */
    int w[WF_DIT_MAX_RANKS];
    uint32_t inc[WF_DIT_MAX_RANKS];    /* their incarnations when it got there */
    wf_dit_sp_mode mode;               /* rows per member (ULYSSES, n > 1) or whole on each */
    int step;                          /* steps the held latent has */
    int home_step;                     /* steps the home copy has */
} held;

/* A request served alone (wf_dit_router_observe_request), learnt by the router's thread: the
 * cost model has one owner, which the policy reads without a lock. */
typedef struct lone_req {
    int steps, P;
    bool guided;
    double ms;
} lone_req;
#define WF_DIT_ROUTER_LONE_MAX 16 /* more between two batches: the rest add nothing new */

struct wf_dit_router {
    wf_dit_exec *local;
    wf_workers *ws;
    wf_exec_thread *thread;
    wf_dit_policy *policy;
    wf_dit_cost cost;
    const wf_dit_config *model_cfg;
    int n_workers, tokens, max_P, patch, chunk_steps;
    int lat_c, lat_h, lat_w;
    size_t lat_floats;
    size_t lat_max;    /* floats of the largest latent (a part's buffers hold any size) */
    bool calibrating;  /* every result goes home */
    int hold_max;      /* latents a worker keeps between chunks at most (its slots, minus room
                          for a batch's chunks from home) */
    /* run's scratch, grown to the largest batch */
    int cap;
    wf_task *tasks;
    wf_task *fetch;    /* run_fetch's chunks */
    int *idx, *todo, *tries, *wave, *begin;
    unsigned char *keepable; /* DENOISE task i may leave its result on its group */
    wf_dit_job *jobs;
    wf_dit_job **ready;
    wf_dit_task *picks;
    wgroup *groups;
    part parts[WF_WORKERS_MAX];
    held *held;
    int n_held, held_cap;
    struct { int w; uint64_t id; } *drops;  /* copies to drop with the next wave */
    int n_drops, drops_cap;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int left;          /* parts in flight (lock) */
    wf_dit_router_stats stats; /* lock */
    char policy_name[64];
    uint64_t wave_group_ns; /* the last wave's slowest group: dispatch to its last answer */
    uint64_t last_end_ns;   /* when the previous batch returned to the image scheduler */
    lone_req lone[WF_DIT_ROUTER_LONE_MAX]; /* lock: observed, not yet learnt */
    int n_lone;
    uint64_t handoff_ns;    /* this batch's: since then, when it continues a held latent (the
                               image scheduler's hand-off between two chunks); its first wave
                               counts it */
    /* Workers that answered a chunk with "no DiT model on this worker" (one joined by hand
     * without the coordinator's DiT): that process (incarnation) gets no more chunks. */
    struct { bool on; uint32_t inc; } no_dit[WF_WORKERS_MAX];
};

/* Whether worker w is live and may run DiT chunks (not known to lack the model). */
static bool dit_live(wf_dit_router *r, int w) {
    if (!wf_workers_live(r->ws, w)) return false;
    return !(r->no_dit[w].on && r->no_dit[w].inc == wf_workers_incarnation(r->ws, w));
}

/* The error when no worker may run a chunk: how many are down, how many lack the DiT. */
static void no_dit_rank(wf_dit_router *r, char *msg, size_t cap) {
    int down = 0, without = 0;
    for (int w = 0; w < r->n_workers; w++) {
        if (!wf_workers_live(r->ws, w)) down++;
        else if (!dit_live(r, w)) without++;
    }
    if (without == 0) snprintf(msg, cap, "no live DiT worker rank (all %d down)", r->n_workers);
    else
        snprintf(msg, cap, "no live DiT worker rank (%d of %d down, %d without the DiT model: start them with the "
                 "coordinator's --model list)", down, r->n_workers, without);
}

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
    GROW(r->begin, n);
    GROW(r->fetch, n);
    GROW(r->keepable, n);
    GROW(r->jobs, n);
    GROW(r->ready, n);
    GROW(r->picks, n);
    GROW(r->groups, n);
    r->cap = n;
    return WF_OK;
}

/* Room for one more task in p; its index, or -1 (out of memory). */
static int part_add(part *p, size_t floats) {
    int n = p->b.n_tasks;
    if (n == p->cap) {
        int c = p->cap ? 2 * p->cap : 4;
        wf_task *t = realloc(p->tasks, (size_t)c * sizeof *t);
        if (t) p->tasks = t;
        float **bf = realloc(p->buf, (size_t)c * sizeof *bf);
        if (bf) p->buf = bf;
        float **o = realloc(p->out, (size_t)c * sizeof *o);
        if (o) p->out = o;
        float **bk = realloc(p->back, (size_t)c * sizeof *bk);
        if (bk) p->back = bk;
        int *wi = realloc(p->widx, (size_t)c * sizeof *wi);
        if (wi) p->widx = wi;
        if (!t || !bf || !o || !bk || !wi) return -1;
        for (int i = p->cap; i < c; i++) p->buf[i] = NULL;
        p->cap = c;
    }
    if (!p->buf[n] && !(p->buf[n] = malloc(floats * sizeof(float)))) return -1;
    p->out[n] = p->back[n] = NULL;
    p->b.tasks = p->tasks;
    p->b.n_tasks = n + 1;
    return n;
}

/* Task t's latent grid: its home copy's (the size its ENCODE made); native when not at home. */
static void task_grid(const wf_dit_router *r, const wf_task *t, int *h, int *w) {
    if (!wf_dit_exec_latent_dims(r->local, t->dit.latent.id, h, w)) {
        *h = r->lat_h;
        *w = r->lat_w;
    }
}

/* Another size than the native one: its chunks go from home to their group and back home
 * every chunk (the worker-to-worker moves and the held copies are the native grid's only); its
 * group may split it as a native one (task_max_P), and its tokens price it in the cost model. */
static bool task_native(const wf_dit_router *r, const wf_task *t) {
    int h, w;
    task_grid(r, t, &h, &w);
    return h == r->lat_h && w == r->lat_w;
}

/* The largest group task t may run on: Ulysses' rule for its grid over the workers. */
static int task_max_P(const wf_dit_router *r, const wf_task *t) {
    int h, w;
    task_grid(r, t, &h, &w);
    return h == r->lat_h && w == r->lat_w ? r->max_P : wf_dit_sp_fit(r->model_cfg, h, w, r->n_workers);
}

static size_t task_floats(const wf_dit_router *r, const wf_task *t) {
    int h, w;
    task_grid(r, t, &h, &w);
    return (size_t)r->lat_c * (size_t)h * (size_t)w;
}

static int task_tokens(const wf_dit_router *r, const wf_task *t) {
    int h, w;
    task_grid(r, t, &h, &w);
    return (h / r->patch) * (w / r->patch);
}

static held *find_held(wf_dit_router *r, uint64_t id) {
    for (int i = 0; i < r->n_held; i++)
        if (r->held[i].id == id) return &r->held[i];
    return NULL;
}

static void forget_held(wf_dit_router *r, held *h) {
    if (h) *h = r->held[--r->n_held];
}

static held *make_held(wf_dit_router *r, uint64_t id) {
    held *h = find_held(r, id);
    if (h) return h;
    if (r->n_held == r->held_cap) {
        int c = r->held_cap ? 2 * r->held_cap : 16;
        held *nh = realloc(r->held, (size_t)c * sizeof *nh);
        if (!nh) return NULL;
        r->held = nh;
        r->held_cap = c;
    }
    h = &r->held[r->n_held++];
    memset(h, 0, sizeof *h);
    h->id = id;
    return h;
}

static void add_drop(wf_dit_router *r, int w, uint64_t id) {
    if (r->n_drops == r->drops_cap) {
        int c = r->drops_cap ? 2 * r->drops_cap : 16;
        void *nd = realloc(r->drops, (size_t)c * sizeof *r->drops);
        if (!nd) return; /* the copy stays until the worker reuses or drops the slot */
        r->drops = nd;
        r->drops_cap = c;
    }
    r->drops[r->n_drops].w = w;
    r->drops[r->n_drops++].id = id;
}

/* The workers' copy of h is given up (lost with a holder, or its request finished): the live
 * holders of the same incarnation drop theirs with the next wave; the home copy remains. */
static void release_held(wf_dit_router *r, held *h) {
    for (int m = 0; m < h->n; m++)
        if (wf_workers_live(r->ws, h->w[m]) && wf_workers_incarnation(r->ws, h->w[m]) == h->inc[m])
            add_drop(r, h->w[m], h->id);
    h->n = 0;
}

/* Whether every holder of h is still the process that got it. */
static bool held_intact(wf_dit_router *r, const held *h) {
    for (int m = 0; m < h->n; m++)
        if (!wf_workers_live(r->ws, h->w[m]) || wf_workers_incarnation(r->ws, h->w[m]) != h->inc[m]) return false;
    return true;
}

static wf_placement held_placement(const wf_dit_router *r, const held *h) {
    wf_placement pl = {.kind = h->n == 1 ? WF_PLACEMENT_OWNER
                               : h->mode == WF_DIT_SP_CFG ? WF_PLACEMENT_REPLICATED : WF_PLACEMENT_SHARDED,
                       .shard_dim = 1 /* latent rows (C x H x W) */};
    for (int m = 0; m < h->n; m++) pl.holders.ranks[m] = wf_workers_rank(r->ws, h->w[m]);
    pl.holders.n_ranks = h->n;
    pl.holders.id = wf_gfc_group_hash(pl.holders.ranks, h->n);
    return pl;
}

static wf_dit_placement sp_placement(const wf_placement *p) {
    return wf_dit_placement_make(p->kind == WF_PLACEMENT_REPLICATED ? WF_DIT_SP_CFG : WF_DIT_SP_ULYSSES,
                                 p->holders.ranks, p->holders.n_ranks);
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
    int guided = 0, h = r->lat_h, w = r->lat_w;
    for (int j = 0; j < gr->n; j++) guided += b->tasks[r->wave[gr->first + j]].dit.guidance_scale > 1.0f;
    if (gr->n > 0) task_grid(r, &b->tasks[r->wave[gr->first]], &h, &w); /* a multi-rank group runs one */
    return wf_dit_sp_choose(r->model_cfg, h, w, gr->n_ranks, gr->n, guided);
}

/* The cost model's mode for a chunk of group gr: plain, or for guided images CFG (one half per
 * rank, as wf_dit_sp_choose picks on 2 ranks) or Ulysses over both halves. */
static wf_dit_cost_mode cost_mode(bool guided, int n_ranks, wf_dit_sp_mode sp) {
    if (!guided) return WF_DIT_COST_PLAIN;
    return n_ranks == 2 && sp == WF_DIT_SP_CFG ? WF_DIT_COST_CFG : WF_DIT_COST_GUIDED;
}

static bool is_loss(wf_status st) {
    return st == WF_ECLOSED || st == WF_EPEER || st == WF_ETIMEDOUT || st == WF_ENOTFOUND;
}

/* The index of batch task i in worker w's part of the wave, or -1. */
static int part_slot(const part *p, int i) {
    for (int k = 0; k < p->b.n_tasks; k++)
        if (p->widx[k] == i) return k;
    return -1;
}

/* Puts batch task i (of group gr, world group grp) into the part of worker w: as a member of
 * the group or as a holder of its latent (h: the workers' copy, NULL when at home). */
static wf_status wave_add(wf_dit_router *r, const wf_task_batch *b, int i, const wgroup *gr, const wf_group *grp,
                          wf_dit_sp_mode mode, const held *h, int w, bool member) {
    part *p = &r->parts[w];
    int k = part_add(p, r->lat_max);
    if (k < 0) return WF_ENOMEM;
    const wf_task *src = &b->tasks[i];
    wf_task *t = &p->tasks[k];
    *t = *src;
    /* The grid on the wire: the worker sizes the latent's message and its slot by it. */
    int lh, lw;
    task_grid(r, src, &lh, &lw);
    t->dit.latent.kind = WF_ARTIFACT_LATENT;
    t->dit.latent.latent.channels = r->lat_c;
    t->dit.latent.latent.height = lh;
    t->dit.latent.latent.width = lw;
    t->group = *grp;
    t->status = WF_IN_PROGRESS;
    t->dit.step_begin = r->begin[i];
    bool keep = r->keepable[i] && !r->calibrating;
    t->dit.image = (wf_artifact){.id = src->dit.latent.id};
    if (keep) {
        held to = {.n = gr->n_ranks, .mode = mode};
        memcpy(to.w, gr->ranks, sizeof(int) * (size_t)gr->n_ranks);
        t->dit.image.kind = WF_ARTIFACT_LATENT;
        t->dit.image.placement = held_placement(r, &to);
    }
    if (h && h->n > 0) {
        t->dit.latent.placement = held_placement(r, h);
    } else {
        t->dit.latent.placement = (wf_placement){.kind = WF_PLACEMENT_OWNER};
        t->dit.latent.placement.holders.n_ranks = 1; /* rank 0: home */
        if (member) {
            p->out[k] = p->buf[k];
            memcpy(p->buf[k], wf_dit_exec_latent(r->local, src->dit.latent.id, false),
                   task_floats(r, src) * sizeof(float));
        }
    }
    if (member && !keep) p->back[k] = p->buf[k];
    p->widx[k] = i;
    return WF_OK;
}

/* Counts a task's latent moves (stats, lock held). */
static void count_moves(wf_dit_router *r, const wf_task *t, const wgroup *gr, wf_dit_sp_mode mode, const held *h,
                        bool keep, int begin) {
    size_t bytes = task_floats(r, t) * sizeof(float);
    bool from_home = !h || h->n == 0;
    for (int m = 0; m < gr->n_ranks; m++) {
        int w = gr->ranks[m];
        if (from_home) {
            r->stats.rank_from_home_bytes[w] += bytes;
            if (begin > 0) r->stats.rank_mid_home_bytes[w] += bytes;
        }
        if (!keep) {
            r->stats.rank_to_home_bytes[w] += bytes;
            if (t->dit.step_end < t->dit.num_steps) r->stats.rank_mid_home_bytes[w] += bytes;
        }
    }
    if (from_home) return;
    wf_placement hp = held_placement(r, h);
    wf_dit_placement from = sp_placement(&hp);
    int ranks[WF_DIT_MAX_RANKS];
    for (int m = 0; m < gr->n_ranks; m++) ranks[m] = wf_workers_rank(r->ws, gr->ranks[m]);
    wf_dit_placement to = wf_dit_placement_make(mode, ranks, gr->n_ranks);
    if (from.mode == to.mode && from.group.n_ranks == to.group.n_ranks &&
        !memcmp(from.group.ranks, to.group.ranks, sizeof(int) * (size_t)to.group.n_ranks))
        return; /* it stays where the previous chunk left it */
    for (int m = 0; m < h->n; m++) {
        size_t sent = wf_dit_sp_plan_bytes(&from, &to, r->patch, r->lat_c, r->lat_h, r->lat_w, 1, from.group.ranks[m]);
        r->stats.rank_reshard_bytes[h->w[m]] += sent;
        r->stats.rank_reshards[h->w[m]] += sent > 0;
    }
}

/* Runs one wave: every group's tasks on its ranks at once. A latent at home goes out to every
 * member with the frame; one held by worker ranks moves from its holders to the group worker to
 * worker (the holders take part in the wave for that); a result either stays on the group (the
 * next chunk follows) or comes home, where member m of a group of P contributes its rows. First
 * the copies the router gave up are dropped. Tasks whose latent was lost (a participant died or
 * was replaced) stay WF_IN_PROGRESS with one more try and start again from their home copy.
 * Returns != WF_OK when the batch fails as a whole (msg). */
static wf_status run_wave(wf_dit_router *r, wf_task_batch *b, int n_groups, char *msg, size_t cap) {
    size_t bytes = r->lat_floats * sizeof(float);
    for (int w = 0; w < r->n_workers; w++) {
        r->parts[w].r = r;
        r->parts[w].b = (wf_task_batch){.tasks = r->parts[w].tasks, .iteration = b->iteration};
        r->parts[w].status = WF_OK;
        r->parts[w].msg[0] = '\0';
    }
    /* Held copies whose holders are gone restart from home; where each task begins; a result
     * stays on its group only while every member has a free slot for it besides a batch's
     * worth (else it comes home: the worker's latent table is bounded). */
    int load[WF_WORKERS_MAX] = {0};
    for (int q = 0; q < r->n_held; q++)
        for (int m = 0; m < r->held[q].n; m++) load[r->held[q].w[m]]++;
    for (int g = 0; g < n_groups; g++)
        for (int j = 0; j < r->groups[g].n; j++) {
            int i = r->wave[r->groups[g].first + j];
            const wgroup *gr = &r->groups[g];
            bool fits = true;
            for (int m = 0; m < gr->n_ranks; m++) fits &= load[gr->ranks[m]] < r->hold_max;
            if (!fits) r->keepable[i] = 0;
            for (int m = 0; r->keepable[i] && m < gr->n_ranks; m++) load[gr->ranks[m]]++;
            held *h = find_held(r, b->tasks[i].dit.latent.id);
            if (h && h->n > 0 && !held_intact(r, h)) {
                WF_LOG_WARN("dit", NULL, "latent %llu lost with a worker rank: its chunk starts again at step %d",
                            (unsigned long long)h->id, h->home_step);
                release_held(r, h);
            }
            r->begin[i] = h && h->n == 0 ? h->home_step : b->tasks[i].dit.step_begin;
        }
    wf_status fail = WF_OK;
    for (int d = 0; d < r->n_drops && fail == WF_OK; d++) {
        part *p = &r->parts[r->drops[d].w];
        int k = part_add(p, r->lat_max);
        if (k < 0) {
            fail = WF_ENOMEM;
            break;
        }
        /* A task in which the worker is neither member (group: rank 0) nor holder (home). */
        wf_task *t = &p->tasks[k];
        *t = (wf_task){.id = r->drops[d].id, .kind = WF_TASK_DENOISE, .status = WF_IN_PROGRESS,
                       .dit = {.latent = {.id = r->drops[d].id, .kind = WF_ARTIFACT_LATENT}}};
        t->group.n_ranks = 1;
        t->group.id = wf_gfc_group_hash(t->group.ranks, 1);
        t->dit.latent.placement.holders.n_ranks = 1;
        p->widx[k] = -1;
    }
    r->n_drops = 0;
    for (int g = 0; g < n_groups && fail == WF_OK; g++) {
        wgroup *gr = &r->groups[g];
        wf_group grp = {.n_ranks = gr->n_ranks};
        for (int m = 0; m < gr->n_ranks; m++) grp.ranks[m] = wf_workers_rank(r->ws, gr->ranks[m]);
        grp.id = wf_gfc_group_hash(grp.ranks, grp.n_ranks);
        wf_dit_sp_mode mode = group_mode(r, b, gr);
        for (int j = 0; j < gr->n && fail == WF_OK; j++) {
            int i = r->wave[gr->first + j];
            const held *h = find_held(r, b->tasks[i].dit.latent.id);
            for (int m = 0; m < gr->n_ranks && fail == WF_OK; m++)
                fail = wave_add(r, b, i, gr, &grp, mode, h, gr->ranks[m], true);
            for (int m = 0; h && m < h->n && fail == WF_OK; m++) {
                bool member = false;
                for (int q = 0; q < gr->n_ranks; q++) member |= gr->ranks[q] == h->w[m];
                if (!member) fail = wave_add(r, b, i, gr, &grp, mode, h, h->w[m], false);
            }
        }
    }
    if (fail != WF_OK) {
        snprintf(msg, cap, "DiT router: out of memory");
        return fail;
    }
    pthread_mutex_lock(&r->lock);
    r->left = 0;
    for (int w = 0; w < r->n_workers; w++) r->left += r->parts[w].b.n_tasks > 0;
    pthread_mutex_unlock(&r->lock);
    uint64_t t0 = wf_clock_now_ns();
    r->wave_group_ns = 0;
    for (int w = 0; w < r->n_workers; w++) {
        part *p = &r->parts[w];
        if (p->b.n_tasks == 0) continue;
        wf_status st = wf_workers_dispatch_latents(r->ws, w, &p->b, p->out, p->back, bytes, part_done, p);
        if (st != WF_OK) part_done(p, &p->b, st, "dispatch refused");
    }
    pthread_mutex_lock(&r->lock);
    while (r->left > 0) pthread_cond_wait(&r->cond, &r->lock);
    pthread_mutex_unlock(&r->lock);
    /* A worker without the DiT (joined by hand without it) answers every chunk so: its
     * chunks run again elsewhere (as if lost with it) and it gets no more. */
    for (int w = 0; w < r->n_workers; w++) {
        part *p = &r->parts[w];
        if (p->b.n_tasks == 0 || p->status != WF_EUNSUPPORTED || !dit_live(r, w)) continue;
        r->no_dit[w].on = true;
        r->no_dit[w].inc = wf_workers_incarnation(r->ws, w);
        WF_LOG_WARN("dit", NULL, "worker rank %d has no DiT model (%s): DiT chunks go to the other ranks; start it "
                    "with the coordinator's --model list", wf_workers_rank(r->ws, w), p->msg);
    }
    /* A task succeeded when every rank it involved did. */
    wf_status fatal = WF_OK;
    for (int g = 0; g < n_groups; g++) {
        wgroup *gr = &r->groups[g];
        wf_dit_sp_mode mode = group_mode(r, b, gr);
        bool group_ok = true;
        for (int j = 0; j < gr->n; j++) {
            int i = r->wave[gr->first + j];
            wf_task *t = &b->tasks[i];
            held *h = find_held(r, t->dit.latent.id);
            bool keep = r->keepable[i] && !r->calibrating;
            wf_status gst = WF_OK;
            const char *gmsg = "";
            bool lost = false;
            int involved[2 * WF_DIT_MAX_RANKS], n_inv = 0;
            for (int m = 0; m < gr->n_ranks; m++) involved[n_inv++] = gr->ranks[m];
            for (int m = 0; h && m < h->n; m++) {
                bool member = false;
                for (int q = 0; q < gr->n_ranks; q++) member |= gr->ranks[q] == h->w[m];
                if (!member) involved[n_inv++] = h->w[m];
            }
            for (int v = 0; v < n_inv; v++) {
                part *p = &r->parts[involved[v]];
                int k = part_slot(p, i);
                wf_status ts = k < 0 ? WF_EPROTO : p->tasks[k].status;
                if (ts == WF_IN_PROGRESS) ts = p->status != WF_OK ? p->status : WF_EPROTO;
                if (ts == WF_OK) continue;
                bool l = is_loss(ts) || is_loss(p->status) || p->status == WF_EUNSUPPORTED;
                /* A member that saw a peer fail reports the peer's loss: the task is lost. */
                lost |= l;
                if (gst == WF_OK || l) {
                    gst = ts;
                    gmsg = p->msg;
                }
            }
            if (gst != WF_OK) {
                group_ok = false;
                WF_LOG_WARN("dit", NULL, "DENOISE chunk of latent %llu on %d rank(s) from rank %d failed: %s%s",
                            (unsigned long long)t->dit.latent.id, gr->n_ranks,
                            wf_workers_rank(r->ws, gr->ranks[0]), gmsg, lost ? " (running it again)" : "");
                /* Members that kept a result drop it: the chunk runs again from home. */
                for (int m = 0; keep && m < gr->n_ranks; m++) {
                    part *p = &r->parts[gr->ranks[m]];
                    int k = part_slot(p, i);
                    if (k >= 0 && p->tasks[k].status == WF_OK && wf_workers_live(r->ws, gr->ranks[m]))
                        add_drop(r, gr->ranks[m], t->dit.latent.id);
                }
                if (h && h->n > 0) release_held(r, h); /* holders dropped theirs on failure */
                if (lost) {
                    r->tries[i]++; /* still in progress: its home latent is untouched */
                } else if (fatal == WF_OK) {
                    fatal = gst;
                    snprintf(msg, cap, "%s", gmsg);
                }
                continue;
            }
            const part *p0 = &r->parts[gr->ranks[0]];
            const wf_task *got = &p0->tasks[part_slot(p0, i)];
            t->status = got->status;
            t->t_begin_ns = got->t_begin_ns;
            t->t_end_ns = got->t_end_ns;
            t->group = got->group;
            t->dit.latent.kind = WF_ARTIFACT_LATENT;
            t->dit.latent.latent.step = got->dit.latent.latent.step;
            pthread_mutex_lock(&r->lock);
            count_moves(r, t, gr, mode, h, keep, r->begin[i]);
            pthread_mutex_unlock(&r->lock);
            if (keep) {
                int home_step = h ? h->home_step : r->begin[i];
                if (!h && !(h = make_held(r, t->dit.latent.id))) {
                    fatal = WF_ENOMEM;
                    snprintf(msg, cap, "DiT router: out of memory");
                    continue;
                }
                h->n = gr->n_ranks;
                h->mode = mode;
                for (int m = 0; m < gr->n_ranks; m++) {
                    h->w[m] = gr->ranks[m];
                    h->inc[m] = wf_workers_incarnation(r->ws, gr->ranks[m]);
                }
                h->step = t->dit.step_end;
                h->home_step = home_step;
                continue;
            }
            forget_held(r, h);
            float *home = wf_dit_exec_latent(r->local, t->dit.latent.id, false);
            if (gr->n_ranks == 1 || mode == WF_DIT_SP_CFG) { /* every member holds the whole latent */
                memcpy(home, p0->buf[part_slot(p0, i)], task_floats(r, t) * sizeof(float));
                continue;
            }
            wf_dit_placement pl = wf_dit_placement_make(mode, t->group.ranks, gr->n_ranks);
            int lh, lw; /* any size: each member's rows of its grid */
            task_grid(r, t, &lh, &lw);
            size_t plane = (size_t)lh * (size_t)lw;
            for (int m = 0; m < gr->n_ranks; m++) {
                int r0, r1;
                wf_dit_sp_rows(&pl, r->patch, lh, m, &r0, &r1);
                const part *pm = &r->parts[gr->ranks[m]];
                const float *src = pm->buf[part_slot(pm, i)];
                for (int c = 0; c < r->lat_c; c++)
                    memcpy(home + c * plane + (size_t)r0 * (size_t)lw, src + c * plane + (size_t)r0 * (size_t)lw,
                           (size_t)(r1 - r0) * (size_t)lw * sizeof(float));
            }
        }
        uint64_t end = t0;
        for (int m = 0; m < gr->n_ranks; m++)
            if (r->parts[gr->ranks[m]].done_ns > end) end = r->parts[gr->ranks[m]].done_ns;
        if (end - t0 > r->wave_group_ns) r->wave_group_ns = end - t0;
        if (group_ok && gr->n == 1) {
            /* The group's own time (dispatch to its last member's answer), as calibrated. */
            const wf_task *t = &b->tasks[r->wave[gr->first]];
            int steps = t->dit.step_end - r->begin[r->wave[gr->first]];
            if (steps > 0) {
                pthread_mutex_lock(&r->lock); /* get_stats copies the model */
                wf_dit_cost_observe_mode(&r->cost, task_tokens(r, t), gr->n_ranks,
                                         cost_mode(t->dit.guidance_scale > 1.0f, gr->n_ranks, mode),
                                         (double)(end - t0) / 1e6 / steps);
                pthread_mutex_unlock(&r->lock);
            }
        }
        /* Chunks that ran steps (a latent only fetched home ran none). */
        uint64_t ran = 0;
        for (int j = 0; j < gr->n; j++) {
            int i = r->wave[gr->first + j];
            ran += b->tasks[i].dit.step_end > r->begin[i];
        }
        pthread_mutex_lock(&r->lock);
        for (int m = 0; group_ok && m < gr->n_ranks; m++) {
            r->stats.rank_chunks[gr->ranks[m]] += ran;
            if (gr->n_ranks > 1 && mode == WF_DIT_SP_CFG) r->stats.rank_cfg_chunks[gr->ranks[m]] += ran;
        }
        pthread_mutex_unlock(&r->lock);
    }
    return fatal;
}

/* Single-rank picks are interchangeable: one whose latent stays on another rank takes that
 * rank when it is free or given to a pick whose latent is not there (they swap), so that a
 * policy's choice of which free rank (a lane number) does not move latents for nothing. */
static void keep_in_place(wf_dit_router *r, const wf_task_batch *b, const bool *busy, int k) {
    for (int i = 0; i < k; i++) {
        wf_dit_task *pi = &r->picks[i];
        const held *h = find_held(r, b->tasks[r->todo[pi->job]].dit.latent.id);
        if (pi->n_ranks != 1 || !h || h->n != 1 || h->w[0] == pi->ranks[0] || busy[h->w[0]]) continue;
        int want = h->w[0], other = -1;
        bool used = false;
        for (int q = 0; q < k; q++) {
            const wf_dit_task *pq = &r->picks[q];
            for (int m = 0; m < pq->n_ranks; m++)
                if (pq->ranks[m] == want) {
                    used = true;
                    other = pq->n_ranks == 1 ? q : -1;
                }
        }
        if (!used) {
            pi->ranks[0] = want;
            continue;
        }
        if (other < 0) continue; /* in a multi-rank pick */
        const held *ho = find_held(r, b->tasks[r->todo[r->picks[other].job]].dit.latent.id);
        if (ho && ho->n == 1 && ho->w[0] == want) continue; /* that one stays there itself */
        r->picks[other].ranks[0] = pi->ranks[0];
        pi->ranks[0] = want;
    }
}

/* The groups of the next wave for todo[0..n): the policy's picks (sched/dit_policy.h) over the
 * live workers, each its own group; when it picks nothing, one rank per task, the tasks spread
 * in blocks over the live workers. Returns the number of groups; 0 when no worker is live. */
static int plan_wave(wf_dit_router *r, const wf_task_batch *b, int n) {
    bool busy[WF_DIT_MAX_RANKS];
    int live[WF_WORKERS_MAX], n_live = 0;
    for (int w = 0; w < r->n_workers; w++) {
        busy[w] = !dit_live(r, w);
        if (!busy[w]) live[n_live++] = w;
    }
    if (n_live == 0) return 0;
    double now_ms = (double)wf_clock_now_ns() / 1e6;
    for (int k = 0; k < n; k++) {
        const wf_task *t = &b->tasks[r->todo[k]];
        wf_dit_job *j = &r->jobs[k];
        *j = (wf_dit_job){.id = k, .tokens = task_tokens(r, t), .steps = t->dit.num_steps,
                          .steps_done = t->dit.step_begin, .max_P = task_max_P(r, t),
                          .arrival_ms = now_ms,
                          .deadline_ms = t->deadline_ns ? (double)t->deadline_ns / 1e6 : now_ms + 1e9,
                          .guided = t->dit.guidance_scale > 1.0f,
                          .latent_bytes = (double)(task_floats(r, t) * sizeof(float))};
        /* Where its latent stays since its last chunk (worker indices are the policy's ranks):
         * a policy that weighs moves sees them. */
        const held *h = find_held(r, t->dit.latent.id);
        if (h && h->n > 0) {
            j->n_ranks = h->n;
            memcpy(j->ranks, h->w, sizeof(int) * (size_t)h->n);
        } else if (h) {
            j->steps_done = h->home_step; /* lost: it starts again from its home copy */
        }
        r->ready[k] = j;
    }
    wf_dit_view v = {.now_ms = now_ms, .n_ranks = r->n_workers, .busy = busy,
                     .ready = r->ready, .n_ready = n};
    int k = wf_dit_policy_pick(r->policy, &v, r->picks, n);
    keep_in_place(r, b, busy, k);
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

/* A wave's overhead beyond its steps (the plan, the dispatch, the results home; for a batch's
 * first wave also the image scheduler's hand-off since the previous batch, handoff_ns): its
 * wall time since t0 minus its slowest group's own time (dispatch to its last member's
 * answer: what the online correction fits the step model to), learnt as the cost model's
 * chunk_ms so that the policy's remaining-time predictions include it. (Against the predicted
 * steps instead, it would inherit the correction's lag.) A wave with a failed chunk or one
 * that ran no steps (a fetch) says nothing about it. */
static void observe_wave(wf_dit_router *r, const wf_task_batch *b, int g, uint64_t t0) {
    uint64_t wall = wf_clock_now_ns() - t0;
    if (g <= 0 || r->wave_group_ns == 0) return;
    for (int k = 0; k < g; k++) {
        const wgroup *gr = &r->groups[k];
        for (int j = 0; j < gr->n; j++) {
            int i = r->wave[gr->first + j];
            if (b->tasks[i].status != WF_OK || b->tasks[i].dit.step_end <= r->begin[i]) return;
        }
    }
    double handoff_ms = (double)r->handoff_ns / 1e6;
    r->handoff_ns = 0;
    pthread_mutex_lock(&r->lock);
    wf_dit_cost_observe_chunk(&r->cost, handoff_ms + (double)wall / 1e6 - (double)r->wave_group_ns / 1e6);
    pthread_mutex_unlock(&r->lock);
}

/* Runs every DENOISE task still WF_IN_PROGRESS in waves until each has a result; a task whose
 * latent was lost with a worker stays in progress and runs in the next wave from its home copy,
 * at most WF_DIT_ROUTER_ATTEMPTS times. */
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
        uint64_t t0 = wf_clock_now_ns();
        int g = plan_wave(r, b, n);
        if (g == 0) {
            no_dit_rank(r, msg, cap);
            return WF_ECLOSED;
        }
        wf_status st = run_wave(r, b, g, msg, cap);
        if (st != WF_OK) return st;
        observe_wave(r, b, g, t0);
    }
}

/* Brings home the latents the batch decodes that are still on worker ranks (a decode in a
 * batch of its own, as the image scheduler's calibration runs them; a chunk and its decode in
 * one batch bring it home directly): each as a chunk of no steps on its holders, which send it
 * home; one whose copy was lost runs its missing steps from the home copy on a live worker. */
static wf_status run_fetch(wf_dit_router *r, wf_task_batch *b, char *msg, size_t cap) {
    int n = 0;
    for (int i = 0; i < b->n_tasks; i++) {
        const wf_task *t = &b->tasks[i];
        const held *h = t->kind == WF_TASK_DECODE_IMAGE ? find_held(r, t->dit.latent.id) : NULL;
        if (!h) continue;
        wf_task *f = &r->fetch[n++];
        *f = *t;
        f->kind = WF_TASK_DENOISE;
        f->status = WF_IN_PROGRESS;
        f->dit.step_begin = f->dit.step_end = h->step;
        f->dit.image = (wf_artifact){0};
        f->dit.pixels = NULL;
        f->dit.pixels_cap = 0;
        if (h->step > f->dit.num_steps) {
            snprintf(msg, cap, "latent %llu: %d steps held of a %d-step schedule", (unsigned long long)h->id, h->step,
                     f->dit.num_steps);
            return WF_EINVAL;
        }
    }
    if (n == 0) return WF_OK;
    wf_task_batch fb = {.tasks = r->fetch, .n_tasks = n, .iteration = b->iteration};
    for (int i = 0; i < n; i++) {
        r->keepable[i] = 0;
        r->tries[i] = 0;
    }
    for (;;) {
        int live = -1, g = 0, at = 0;
        for (int w = r->n_workers - 1; w >= 0; w--)
            if (dit_live(r, w)) live = w;
        bool pending = false;
        for (int i = 0; i < n; i++) {
            if (fb.tasks[i].status != WF_IN_PROGRESS) continue;
            if (r->tries[i] >= WF_DIT_ROUTER_ATTEMPTS) {
                snprintf(msg, cap, "latent %llu lost with its worker %d times", (unsigned long long)fb.tasks[i].dit.latent.id,
                         WF_DIT_ROUTER_ATTEMPTS);
                return WF_ECLOSED;
            }
            if (live < 0) {
                no_dit_rank(r, msg, cap);
                return WF_ECLOSED;
            }
            pending = true;
            /* Its group: the holders (no move), or a live worker that recomputes it. */
            held *h = find_held(r, fb.tasks[i].dit.latent.id);
            wgroup want = {.n_ranks = 1, .ranks = {live}};
            if (h && h->n > 0 && held_intact(r, h)) {
                want.n_ranks = h->n;
                memcpy(want.ranks, h->w, sizeof(int) * (size_t)h->n);
            }
            int q = 0;
            while (q < g && (r->groups[q].n_ranks != want.n_ranks ||
                             memcmp(r->groups[q].ranks, want.ranks, sizeof(int) * (size_t)want.n_ranks)))
                q++;
            if (q == g) r->groups[g++] = want;
            r->todo[i] = q;
        }
        if (!pending) return WF_OK;
        for (int q = 0; q < g; q++) {
            r->groups[q].first = at;
            for (int i = 0; i < n; i++)
                if (fb.tasks[i].status == WF_IN_PROGRESS && r->todo[i] == q) r->wave[at++] = i;
            r->groups[q].n = at - r->groups[q].first;
        }
        wf_status st = run_wave(r, &fb, g, msg, cap);
        if (st != WF_OK) return st;
    }
}

/* Whether the batch also decodes or finishes latent `id` (then its chunk's result comes home). */
static bool wanted_home(const wf_task_batch *b, uint64_t id) {
    for (int i = 0; i < b->n_tasks; i++) {
        const wf_task *t = &b->tasks[i];
        if ((t->kind == WF_TASK_DECODE_IMAGE && t->dit.latent.id == id) ||
            (t->kind == WF_TASK_FINISH && t->finish.artifact.id == id))
            return true;
    }
    return false;
}

static wf_status run_batch(wf_dit_router *r, wf_task_batch *b, char *msg, size_t cap) {
    if (grow(r, b->n_tasks) != WF_OK) {
        snprintf(msg, cap, "DiT router: out of memory for %d tasks", b->n_tasks);
        return WF_ENOMEM;
    }
    for (int i = 0; i < b->n_tasks; i++)
        if (b->tasks[i].kind == WF_TASK_PREFILL || b->tasks[i].kind == WF_TASK_DECODE)
            b->tasks[i].status = WF_EUNSUPPORTED;
    /* A finished (or cancelled) latent that stays on worker ranks: they drop their copies. */
    for (int i = 0; i < b->n_tasks; i++) {
        const wf_task *t = &b->tasks[i];
        held *h = t->kind == WF_TASK_FINISH ? find_held(r, t->finish.artifact.id) : NULL;
        if (!h) continue;
        release_held(r, h);
        forget_held(r, h);
    }
    if (r->n_drops > 0) {
        wf_status st = run_wave(r, b, 0, msg, cap);
        if (st != WF_OK) return st;
    }
    /* FINISH first (frees slots), then ENCODE, as the in-process executor orders them. */
    wf_status st = run_local(r, b, 1u << WF_TASK_FINISH | 1u << WF_TASK_ENCODE, msg, cap);
    if (st != WF_OK) return st;
    for (int i = 0; i < b->n_tasks; i++) {
        wf_task *t = &b->tasks[i];
        if (t->kind != WF_TASK_DENOISE) continue;
        t->status = WF_IN_PROGRESS; /* until a wave gives it a result */
        r->keepable[i] = t->dit.step_end < t->dit.num_steps && !wanted_home(b, t->dit.latent.id) &&
                         task_native(r, t);
    }
    st = run_denoise(r, b, msg, cap);
    if (st != WF_OK) return st;
    st = run_fetch(r, b, msg, cap);
    if (st != WF_OK) return st;
    return run_local(r, b, 1u << WF_TASK_DECODE_IMAGE, msg, cap);
}

/* request_ms from the requests served alone since the last batch: each one's wall time minus
 * what its steps and chunks take by the model now, in the mode its chunks ran (the workers'
 * rule for one image on its P ranks). */
static void learn_requests(wf_dit_router *r) {
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n_lone; i++) {
        const lone_req *q = &r->lone[i];
        wf_dit_cost_mode mode = cost_mode(
            q->guided, q->P, wf_dit_sp_choose(r->model_cfg, r->lat_h, r->lat_w, q->P, 1, q->guided));
        double all = wf_dit_cost_alone_ms(&r->cost, r->tokens, q->P, mode, q->steps, r->chunk_steps);
        if (all >= 0) wf_dit_cost_observe_request(&r->cost, q->ms - (all - r->cost.request_ms));
    }
    r->n_lone = 0;
    pthread_mutex_unlock(&r->lock);
}

/* A batch, and the hand-off before it: the time since the previous batch returned, when this
 * one continues a latent held on the workers (its previous chunk ran in that batch, and the
 * image scheduler has been turning it into this one since; otherwise the gap is idle time). */
static wf_status router_run(void *ctx, wf_task_batch *b, char *msg, size_t cap) {
    wf_dit_router *r = ctx;
    uint64_t start = wf_clock_now_ns();
    learn_requests(r);
    r->handoff_ns = 0;
    for (int i = 0; r->last_end_ns && i < b->n_tasks; i++) {
        const wf_task *t = &b->tasks[i];
        if (t->kind == WF_TASK_DENOISE && t->dit.step_begin > 0 && find_held(r, t->dit.latent.id)) {
            r->handoff_ns = start - r->last_end_ns;
            break;
        }
    }
    wf_status st = run_batch(r, b, msg, cap);
    r->last_end_ns = wf_clock_now_ns();
    return st;
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

/* The median of 7 timed one-step chunks of task t (after a warm-up) on ranks[0..P), at the
 * grid of its home latent (h x w), added to the cost model under the mode the workers run it in. */
static void calibrate_degree(wf_dit_router *r, wf_task *t, const int *ranks, int P, int h, int w) {
    wf_task_batch b = {.tasks = t, .n_tasks = 1};
    bool guided = t->dit.guidance_scale > 1.0f;
    int tokens = (h / r->patch) * (w / r->patch);
    wf_dit_cost_mode mode = cost_mode(guided, P, wf_dit_sp_choose(r->model_cfg, h, w, P, 1, guided));
    char msg[160] = "";
    double ms[8];
    int ok = 0;
    for (int rep = 0; rep < 8; rep++) {
        r->wave[0] = 0;
        r->groups[0] = (wgroup){.n_ranks = P, .n = 1, .first = 0};
        for (int m = 0; m < P; m++) r->groups[0].ranks[m] = ranks[m];
        t->status = WF_IN_PROGRESS;
        uint64_t t0 = wf_clock_now_ns();
        if (run_wave(r, &b, 1, msg, sizeof msg) != WF_OK || t->status != WF_OK) break;
        if (rep > 0) ms[ok++] = (double)(wf_clock_now_ns() - t0) / 1e6;
    }
    if (ok < 7) {
        WF_LOG_WARN("dit", NULL, "calibrating %dx%d on %d rank(s), %s: %s: not used", w, h, P,
                    wf_dit_cost_mode_name(mode), msg);
        return;
    }
    qsort(ms, 7, sizeof ms[0], cmp_double);
    wf_dit_cost_add_mode_point(&r->cost, tokens, P, mode, ms[3]);
    if (h != r->lat_h || w != r->lat_w)
        WF_LOG_INFO("dit", NULL, "DiT %s step of a %dx%d latent on %d worker rank(s)%s%s: %.3f ms (%d tokens, median "
                    "of 7)", guided ? "guided" : "unguided", w, h, P, guided ? ", mode " : "",
                    guided ? wf_dit_cost_mode_name(mode) : "", ms[3], tokens);
    else if (mode == WF_DIT_COST_PLAIN)
        WF_LOG_INFO("dit", NULL, "DiT step on %d worker rank(s): %.3f ms (%d tokens, median of 7)", P, ms[3], tokens);
    else
        WF_LOG_INFO("dit", NULL, "DiT guided step on %d worker rank(s), %s mode: %.3f ms (%d tokens, median of 7)",
                    P, wf_dit_cost_mode_name(mode), ms[3], tokens);
}

/* The latent grids the start-up measures besides the native one: the native grid doubled per
 * side while it stays within the largest image (--image-max-pixels), at most
 * WF_DIT_ROUTER_CALIB_SIZES of them (the largest kept): step time grows faster than linearly
 * in tokens (attention), so the cost model interpolates between real points instead of
 * scaling the native one, and a large image's worth of P = 2 is measured, not guessed. */
#define WF_DIT_ROUTER_CALIB_SIZES 3
static int calib_grids(const wf_dit_router *r, int hs[], int ws[]) {
    const wf_dit_exec_info *in = wf_dit_exec_get_info(r->local);
    long scale = in->image_scale > 0 ? in->image_scale : 1;
    long max_pos = in->max_pixels / (scale * scale);
    int n = 0, h = r->lat_h, w = r->lat_w;
    while ((long)(2 * h) * (2 * w) <= max_pos && (size_t)(4 * h * w) * (size_t)r->lat_c <= r->lat_max) {
        h *= 2;
        w *= 2;
        if (n == WF_DIT_ROUTER_CALIB_SIZES) { /* keep the largest ones */
            memmove(hs, hs + 1, sizeof(int) * (size_t)(n - 1));
            memmove(ws, ws + 1, sizeof(int) * (size_t)(n - 1));
            n--;
        }
        hs[n] = h;
        ws[n++] = w;
    }
    return n;
}

/* One size's points: for every degree the model and the workers allow at that grid (1, 2, 4,
 * ...), an unguided and a guided image's step (the guided one in the mode the workers pick for
 * it). A degree whose unguided step failed at the native size is not used at all. */
static void calibrate_size(wf_dit_router *r, wf_task *t, const int *ranks, int n_ranks, int h, int w, bool native) {
    float *home = wf_dit_exec_latent_sized(r->local, CALIB_ID, h, w);
    if (!home) return;
    size_t floats = (size_t)r->lat_c * (size_t)h * (size_t)w;
    for (int P = 1; P <= r->max_P && P <= n_ranks; P *= 2) {
        if (!native && (!wf_dit_cost_allows(&r->cost, P) || wf_dit_sp_fit(r->model_cfg, h, w, P) != P)) continue;
        memset(home, 0, floats * sizeof(float));
        t->dit.guidance_scale = 0;
        calibrate_degree(r, t, ranks, P, h, w);
        if (native && !wf_dit_cost_allows(&r->cost, P)) continue;
        memset(home, 0, floats * sizeof(float));
        t->dit.guidance_scale = 4.0f;
        calibrate_degree(r, t, ranks, P, h, w);
    }
    wf_dit_exec_latent_drop(r->local, CALIB_ID);
}

/* The measured cost model: the native size's points, then the larger sizes' (calib_grids),
 * through the dispatch path of requests (here each latent goes out from home and comes back: a
 * step's time without a worker-to-worker move, which the cost model prices by bytes apart). */
static void calibrate(wf_dit_router *r) {
    wf_dit_cost_measured(&r->cost);
    r->calibrating = true;
    wf_task t = {.id = CALIB_ID, .kind = WF_TASK_DENOISE,
                 .dit = {.class_label = 0, .negative_label = -1, .guidance_scale = 0, .sampler = -1,
                         .num_steps = 20, .step_begin = 0, .step_end = 1,
                         .latent = {.id = CALIB_ID, .kind = WF_ARTIFACT_LATENT}}};
    /* One step on each worker first: one that has no DiT says so and is left out here (a
     * group with it would wait out the world's time-out in its collectives) and after. */
    int ranks[WF_WORKERS_MAX], n_ranks = 0;
    float *home = wf_dit_exec_latent(r->local, CALIB_ID, true);
    if (!home) return;
    for (int w = 0; w < r->n_workers; w++) {
        wf_task_batch b = {.tasks = &t, .n_tasks = 1};
        char msg[160];
        r->wave[0] = 0;
        r->groups[0] = (wgroup){.n_ranks = 1, .n = 1, .first = 0, .ranks = {w}};
        t.status = WF_IN_PROGRESS;
        memset(home, 0, r->lat_floats * sizeof(float));
        run_wave(r, &b, 1, msg, sizeof msg);
        if (dit_live(r, w)) ranks[n_ranks++] = w;
    }
    wf_dit_exec_latent_drop(r->local, CALIB_ID);
    calibrate_size(r, &t, ranks, n_ranks, r->lat_h, r->lat_w, true);
    int hs[WF_DIT_ROUTER_CALIB_SIZES], ws[WF_DIT_ROUTER_CALIB_SIZES];
    int n = wf_dit_cost_allows(&r->cost, 1) ? calib_grids(r, hs, ws) : 0;
    for (int i = 0; i < n; i++) calibrate_size(r, &t, ranks, n_ranks, hs[i], ws[i], false);
    r->calibrating = false;
    if (!wf_dit_cost_allows(&r->cost, 1)) wf_dit_cost_synthetic(&r->cost); /* nothing measured */
    wf_dit_router_reset_stats(r);
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
    r->lat_max = wf_dit_exec_latent_floats_max(local);
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
    /* The workers open the DiT with the coordinator's batch size through the same rule
     * (wf_dit_exec_options_set_batch), so they have as many latent slots as it has. */
    r->hold_max = in->max_latents - in->max_items;
    if (r->hold_max < 0) r->hold_max = 0;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    wf_status st = grow(r, 16);
    if (st != WF_OK) {
        wf_dit_router_free(r);
        return wf_status_errorf(err, errlen, st, "out of memory");
    }
    r->chunk_steps = chunk_steps > 0 ? chunk_steps : 1;
    calibrate(r);
    if (!policy) policy = r->n_workers >= 2 ? "elastic" : "static:1";
    if ((st = wf_dit_policy_new(policy, r->n_workers, &r->cost, r->chunk_steps,
                                &r->policy, err, errlen)) != WF_OK) {
        wf_dit_router_free(r);
        return st;
    }
    snprintf(r->policy_name, sizeof r->policy_name, "%s", policy);
    if ((st = wf_exec_thread_new("dit-router", 4, router_run, r, &r->thread)) != WF_OK) {
        wf_dit_router_free(r);
        return wf_status_errorf(err, errlen, st, "DiT router: cannot start its thread");
    }
    int measured = 1; /* the largest degree calibrated (a degree that failed is not used) */
    for (int P = 2; P <= r->max_P; P *= 2)
        if (wf_dit_cost_allows(&r->cost, P)) measured = P;
    WF_LOG_INFO("dit", NULL, "DiT on %d worker rank(s): policy %s, degrees up to %d (%d tokens, %d heads)",
                r->n_workers, policy, measured, r->tokens, c->heads);
    *out = r;
    return WF_OK;
}

void wf_dit_router_free(wf_dit_router *r) {
    if (!r) return;
    wf_exec_thread_free(r->thread);
    for (int w = 0; w < WF_WORKERS_MAX; w++) {
        part *p = &r->parts[w];
        for (int i = 0; i < p->cap; i++) free(p->buf[i]);
        free(p->buf);
        free(p->out);
        free(p->back);
        free(p->widx);
        free(p->tasks);
    }
    free(r->held);
    free(r->drops);
    free(r->begin);
    free(r->fetch);
    free(r->keepable);
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

void wf_dit_router_reset_stats(wf_dit_router *r) {
    pthread_mutex_lock(&r->lock);
    memset(&r->stats, 0, sizeof r->stats);
    pthread_mutex_unlock(&r->lock);
}

void wf_dit_router_get_stats(wf_dit_router *r, wf_dit_router_stats *out) {
    pthread_mutex_lock(&r->lock);
    *out = r->stats;
    out->cost = r->cost;
    pthread_mutex_unlock(&r->lock);
    out->tokens = r->tokens;
    snprintf(out->policy, sizeof out->policy, "%s", r->policy_name);
}

void wf_dit_router_observe_request(wf_dit_router *r, int steps, bool guided, int P, double ms) {
    pthread_mutex_lock(&r->lock);
    if (r->n_lone < WF_DIT_ROUTER_LONE_MAX)
        r->lone[r->n_lone++] = (lone_req){.steps = steps, .guided = guided, .P = P < 1 ? 1 : P, .ms = ms};
    pthread_mutex_unlock(&r->lock);
}
