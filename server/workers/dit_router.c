/* DiT serving on worker ranks: see dit_router.h. */
#include "server/workers/dit_router.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/base/log.h"
#include "proto/exec_thread.h"

/* One worker's part of a batch's DENOISE chunks. */
typedef struct part {
    wf_task_batch b;
    int *idx;          /* its tasks' indices in the scheduler's batch */
    float **lat;       /* scratch latents, one per task */
    int worker;
    wf_status status;
    char msg[160];
} part;

struct wf_dit_router {
    wf_dit_exec *local;
    wf_workers *ws;
    wf_exec_thread *thread;
    size_t lat_floats;
    /* run's scratch, grown to the largest batch */
    int cap;
    wf_task *tasks;
    int *idx, *todo;
    float **lat;
    int lat_n;         /* entries of lat (NULL or allocated) */
    part parts[WF_WORKERS_MAX];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int left;          /* parts in flight (lock) */
    wf_dit_router_stats stats; /* lock */
};

static void part_done(void *user, wf_task_batch *b, wf_status st, const char *msg) {
    (void)b;
    part *p = user;
    wf_dit_router *r = (wf_dit_router *)((char *)(p - p->worker) - offsetof(wf_dit_router, parts));
    pthread_mutex_lock(&r->lock);
    p->status = st;
    snprintf(p->msg, sizeof p->msg, "%s", msg ? msg : wf_status_str(st));
    if (--r->left == 0) pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static wf_status grow(wf_dit_router *r, int n) {
    if (n <= r->cap) return WF_OK;
    wf_task *t = realloc(r->tasks, (size_t)n * sizeof *t);
    if (t) r->tasks = t;
    int *a = realloc(r->idx, (size_t)n * sizeof *a);
    if (a) r->idx = a;
    int *c = realloc(r->todo, (size_t)n * sizeof *c);
    if (c) r->todo = c;
    float **l = realloc(r->lat, (size_t)n * sizeof *l);
    if (l) {
        for (int i = r->lat_n; i < n; i++) l[i] = NULL;
        r->lat = l;
        r->lat_n = n;
    }
    if (!t || !a || !c || !l) return WF_ENOMEM;
    for (int i = 0; i < n; i++)
        if (!r->lat[i] && !(r->lat[i] = malloc(r->lat_floats * sizeof(float)))) return WF_ENOMEM;
    r->cap = n;
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

/* Sends the chunks todo[0..n) of b to the live workers (contiguous blocks) and waits. Chunks of
 * a worker that was lost are put back into todo (*n); *ranks_used counts the workers used.
 * Returns a status other than WF_OK when the batch fails as a whole (msg says why). */
static wf_status run_round(wf_dit_router *r, wf_task_batch *b, int *n, int *ranks_used, char *msg,
                           size_t cap) {
    int live[WF_WORKERS_MAX], n_live = 0, nw = wf_workers_count(r->ws);
    for (int i = 0; i < nw; i++)
        if (wf_workers_live(r->ws, i)) live[n_live++] = i;
    if (n_live == 0) {
        snprintf(msg, cap, "no live DiT worker rank (all %d down)", nw);
        return WF_ECLOSED;
    }
    if (n_live > *n) n_live = *n;
    size_t bytes = r->lat_floats * sizeof(float);
    int per = (*n + n_live - 1) / n_live, next = 0, used = 0;
    pthread_mutex_lock(&r->lock);
    r->left = 0;
    pthread_mutex_unlock(&r->lock);
    for (int k = 0; k < n_live && next < *n; k++) {
        int w = live[k];
        part *p = &r->parts[w];
        int m = *n - next < per ? *n - next : per;
        p->b = (wf_task_batch){.tasks = r->tasks + next, .n_tasks = m, .iteration = b->iteration,
                               .group = {.n_ranks = 1, .ranks = {wf_workers_rank(r->ws, w)}}};
        p->idx = r->todo + next;
        p->lat = r->lat + next;
        p->status = WF_OK;
        p->msg[0] = '\0';
        for (int j = 0; j < m; j++) {
            wf_task *t = &p->b.tasks[j];
            *t = b->tasks[p->idx[j]];
            t->group = p->b.group;
            memcpy(p->lat[j], wf_dit_exec_latent(r->local, t->dit.latent.id, false), bytes);
        }
        next += m;
        pthread_mutex_lock(&r->lock);
        r->left++;
        pthread_mutex_unlock(&r->lock);
        wf_status st = wf_workers_dispatch_latents(r->ws, w, &p->b, p->lat, bytes, part_done, p);
        if (st != WF_OK) part_done(p, &p->b, st, "dispatch refused");
        used++;
    }
    pthread_mutex_lock(&r->lock);
    while (r->left > 0) pthread_cond_wait(&r->cond, &r->lock);
    pthread_mutex_unlock(&r->lock);
    *ranks_used = used;
    /* Results: copy what succeeded home; collect the chunks of lost workers for another round. */
    int again = 0;
    wf_status fatal = WF_OK;
    for (int k = 0; k < used; k++) {
        part *p = &r->parts[live[k]];
        bool lost = p->status == WF_ECLOSED || p->status == WF_EPEER || p->status == WF_ETIMEDOUT;
        for (int j = 0; j < p->b.n_tasks; j++) {
            int i = p->idx[j];
            if (p->status == WF_OK) {
                wf_task *t = &b->tasks[i];
                t->status = p->b.tasks[j].status;
                t->t_begin_ns = p->b.tasks[j].t_begin_ns;
                t->t_end_ns = p->b.tasks[j].t_end_ns;
                t->group = p->b.tasks[j].group;
                if (t->status == WF_OK) {
                    t->dit.latent.kind = WF_ARTIFACT_LATENT;
                    t->dit.latent.latent.step = p->b.tasks[j].dit.latent.latent.step;
                    memcpy(wf_dit_exec_latent(r->local, t->dit.latent.id, false), p->lat[j], bytes);
                }
            } else if (lost) {
                r->todo[again++] = i; /* its home latent is untouched: run it again */
            } else if (fatal == WF_OK) {
                fatal = p->status;
                snprintf(msg, cap, "%s", p->msg);
            }
        }
        if (p->status != WF_OK)
            WF_LOG_WARN("dit", NULL, "DENOISE chunks on worker rank %d failed: %s%s",
                        wf_workers_rank(r->ws, live[k]), p->msg, lost ? " (running them again)" : "");
    }
    if (fatal == WF_OK && again > 0) {
        pthread_mutex_lock(&r->lock);
        r->stats.retried += (uint64_t)again;
        pthread_mutex_unlock(&r->lock);
    }
    *n = again;
    return fatal;
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
    int n = 0;
    for (int i = 0; i < b->n_tasks; i++) {
        wf_task *t = &b->tasks[i];
        if (t->kind != WF_TASK_DENOISE) continue;
        t->t_begin_ns = t->t_end_ns = 0;
        if (!wf_dit_exec_latent(r->local, t->dit.latent.id, false)) t->status = WF_ENOTFOUND;
        else r->todo[n++] = i;
    }
    int chunks = n, ranks = 0;
    for (int attempt = 0; n > 0; attempt++) {
        if (attempt == WF_DIT_ROUTER_ATTEMPTS) {
            snprintf(msg, cap, "DENOISE chunks lost with their worker %d times", attempt);
            st = WF_ECLOSED;
            break;
        }
        int used = 0;
        if ((st = run_round(r, b, &n, &used, msg, cap)) != WF_OK) break;
        if (used > ranks) ranks = used;
    }
    pthread_mutex_lock(&r->lock);
    if (chunks > 0) {
        r->stats.batches++;
        r->stats.last_ranks = ranks;
    }
    r->stats.chunks += (uint64_t)chunks;
    if (st != WF_OK) r->stats.failed += (uint64_t)chunks;
    for (int i = 0; st == WF_OK && i < b->n_tasks; i++) {
        const wf_task *t = &b->tasks[i];
        if (t->kind != WF_TASK_DENOISE || t->group.n_ranks != 1) continue;
        int w = t->group.ranks[0] - 1;
        if (w >= 0 && w < WF_WORKERS_MAX) r->stats.rank_chunks[w]++;
    }
    pthread_mutex_unlock(&r->lock);
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

wf_status wf_dit_router_new(wf_dit_exec *local, wf_workers *ws, wf_dit_router **out) {
    *out = NULL;
    if (!local || !ws) return WF_EINVAL;
    wf_dit_router *r = calloc(1, sizeof *r);
    if (!r) return WF_ENOMEM;
    r->local = local;
    r->ws = ws;
    r->lat_floats = wf_dit_exec_latent_floats(local);
    for (int i = 0; i < WF_WORKERS_MAX; i++) r->parts[i].worker = i;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    wf_status st = grow(r, 16);
    if (st == WF_OK) st = wf_exec_thread_new("dit-router", 4, router_run, r, &r->thread);
    if (st != WF_OK) {
        wf_dit_router_free(r);
        return st;
    }
    *out = r;
    return WF_OK;
}

void wf_dit_router_free(wf_dit_router *r) {
    if (!r) return;
    wf_exec_thread_free(r->thread);
    for (int i = 0; i < r->lat_n; i++) free(r->lat[i]);
    free(r->lat);
    free(r->tasks);
    free(r->idx);
    free(r->todo);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void wf_dit_router_get_stats(wf_dit_router *r, wf_dit_router_stats *out) {
    pthread_mutex_lock(&r->lock);
    *out = r->stats;
    pthread_mutex_unlock(&r->lock);
}
