/* The scheduler thread around the planning cores: intake of requests, cancels and executor
 * completions from one bounded inbox, admission control, one batch in flight per group
 * (plan -> dispatch; the executor reports through done -> inbox -> complete), event delivery
 * from a free list, stats, calibration of the cost model, groups coming and going, drain and
 * shutdown. The forward pass never runs on this thread. */
#include "proto/base/clock.h"
#include "sched/sched.h"

#include "sched/gate.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/base/log.h"
#include "sched/core.h"
#include "sched/cost_model.h"
#include "sched/defaults.h"
#include "sched/lanes.h"

#define EVENT_CHUNK 512

_Static_assert(WF_SCHED_STATS_GROUPS >= WF_LANES_MAX, "the stats list every group slot");
/* Start-up calibration stops measuring after this long (a batch in flight completes). */
#define CALIBRATION_NS 3000000000ull

typedef struct wf_sched wf_sched;

/* One device group: its KV store and pool, its executor, and the record its executor's done()
 * fills before pushing done_item into the inbox (at most one batch in flight per group, so one
 * record is enough and the push never allocates). */
typedef struct sched_group {
    wf_handoff_item done_item;
    wf_sched *sched;
    int id;                       /* the group's own number, never given to another group */
    int slot;                     /* its lane's slot (wf_lanes), reused after it went down */
    struct sched_group *replaced; /* the group that held the slot before: freed by the
                                   * scheduler thread once this one's lane takes the slot */
    wf_kv_store *kv;
    wf_executor exec;
    wf_kv_pool *pool;
    wf_group group;
    /* Written by done() on the executor's thread, read by the scheduler thread after it took
     * done_item from the inbox (the inbox's mutex orders the two). */
    wf_status done_status;
    char done_msg[160];
    /* Scheduler thread. */
    uint64_t dispatched_ns, plan_ns;
    uint64_t claim_ns;            /* a turn was first claimed for the next batch (0: none) */
    uint64_t iterations, failed_batches;
    bool laned;                   /* its lane exists (created on the scheduler thread) */
    bool cancel_sent;
    /* Under the scheduler's lock. */
    bool retired;                 /* went down with no batch in flight: its slot may be reused */
    bool down_requested;
    wf_status down_status;
    char down_msg[160];
    char last_error[160];
} sched_group;

struct wf_sched {
    wf_sched_options opts;
    bool claim_waiting;           /* thread-owned: the gated group waits for its granted turn */
    const wf_sched_policy *policy;
    wf_lanes lanes;               /* thread-owned */
    wf_cost_model cost;           /* thread-owned; coefficients copied out under lock */
    wf_fair fair;                 /* "fair" policy: virtual models' clocks (all lanes) */
    pthread_t thread;
    bool started;

    /* The one inbox: submissions, wake-ups (cancel, drain, group changes) and completions.
     * Bounded: admission keeps fewer than queue_size submissions in it, plus one completion per
     * group and one wake-up, so a push that admission allowed never finds it full. */
    wf_handoff inbox;
    wf_handoff_item wake_item;
    atomic_bool wake_pending;
    /* done() callbacks still inside their inbox push: the push touches the inbox after the
     * item became visible, so wf_sched_free waits for this to drop to 0 before freeing. */
    atomic_int dones_running;

    pthread_mutex_t lock;         /* everything below up to the event pool */
    pthread_cond_t idle_cond;
    /* Slot i: the group registered last in slot i (its lane may still be the previous
     * group's until the thread makes it, see lane_group). A down group's slot is given to the
     * next group added (wf_sched_add_group), so a flapping worker never exhausts the slots;
     * group ids keep growing, so an id held by the old group's owner never names the new one
     * (the generation that keeps the old incarnation's events away from the new group). */
    sched_group *groups[WF_LANES_MAX];
    int n_groups;                 /* slots in use */
    int next_group_id;
    /* Thread-owned: the group whose lane sits in each slot. */
    sched_group *lane_group[WF_LANES_MAX];
    int min_block_size;           /* over groups: sizes the requests' block tables */
    long max_kv_tokens;           /* over groups: the longest prompt any group can hold */
    bool draining, stopping, drained;
    uint64_t drain_deadline_ns;
    int inflight_reqs;            /* accepted but not yet taken in by the thread */
    double inflight_prefill, inflight_attention;
    wf_core_load load;
    /* For admission in the policy's order: the running work alone, and every waiting request's
     * place and prefill work (wait_n > wait_cap: too many to list, use load whole). */
    wf_core_load running_load;
    wf_waiting_work *wait_snap;
    int wait_n, wait_cap;
    int n_live;
    wf_cost_model cost_pub;
    bool model_trusted;           /* given/loaded, calibrated from enough batches, or refitted
                                   * online from enough iterations: admission may use it */
    wf_sched_stats stats;
    wf_request *live;             /* every request not yet freed, for /admin */
    uint64_t rng_counter;

    pthread_mutex_t ev_lock;
    wf_request_event *ev_free;
    void **ev_chunks;
    int n_chunks, cap_chunks;
    atomic_int ev_fail_next;      /* test hook: event allocations that fail */

    /* Thread-owned: a private stock of free events refilled from ev_free in one lock, so the
     * per-token path takes no lock to get an event. */
    wf_request_event *ev_local;
    /* Thread-owned: events whose queue was full, delivered in order later. */
    wf_request_event *pend_head, *pend_tail;
    uint64_t iterations;
    uint64_t failed_at_intake;    /* requests no live group could take */
    double iter_ms_avg, overhead_ms_avg, overhead_frac, plan_ms_avg, complete_ms_avg;
};

void wf_sched_options_init(wf_sched_options *o) {
    memset(o, 0, sizeof *o);
    o->policy = WF_DEFAULT_POLICY;
    o->queue_size = WF_DEFAULT_QUEUE_SIZE;
    o->max_batch_tokens = WF_DEFAULT_MAX_BATCH_TOKENS;
    o->max_running = WF_DEFAULT_MAX_RUNNING;
    o->n_ctx = WF_DEFAULT_N_CTX;
    o->default_ttft_ms = WF_DEFAULT_TTFT_MS;
    o->default_tpot_ms = WF_DEFAULT_TPOT_MS;
    o->admission_factor = WF_DEFAULT_ADMISSION_FACTOR;
    o->prefill_stretch = WF_DEFAULT_PREFILL_STRETCH;
    o->prefix_cache = true;
    o->online_refit = true;
    o->seed = 0x5eedf00dull;
}

const char *wf_request_state_str(wf_request_state st) {
    switch (st) {
    case WF_REQUEST_QUEUED: return "queued";
    case WF_REQUEST_RUNNING: return "running";
    case WF_REQUEST_PREEMPTED: return "preempted";
    case WF_REQUEST_FINISHED: return "finished";
    case WF_REQUEST_FAILED: return "failed";
    case WF_REQUEST_CANCELLED: return "cancelled";
    }
    return "unknown";
}

/* ---- events ---- */

static bool event_chunk_add(wf_sched *s) {
    if (s->n_chunks == s->cap_chunks) {
        int cap = s->cap_chunks ? s->cap_chunks * 2 : 8;
        void **grown = realloc(s->ev_chunks, (size_t)cap * sizeof *grown);
        if (!grown) return false;
        s->ev_chunks = grown;
        s->cap_chunks = cap;
    }
    wf_request_event *chunk = calloc(EVENT_CHUNK, sizeof *chunk);
    if (!chunk) return false;
    s->ev_chunks[s->n_chunks++] = chunk;
    for (int i = 0; i < EVENT_CHUNK; i++) {
        chunk[i].link.next = (wf_handoff_item *)s->ev_free;
        s->ev_free = &chunk[i];
    }
    return true;
}

/* Under ev_lock: one event from the pool, growing it; NULL when memory ran out (or the test
 * hook says so). */
static wf_request_event *event_take_locked(wf_sched *s) {
    if (atomic_load(&s->ev_fail_next) > 0) {
        atomic_fetch_sub(&s->ev_fail_next, 1);
        return NULL;
    }
    if (!s->ev_free && !event_chunk_add(s)) return NULL;
    wf_request_event *ev = s->ev_free;
    s->ev_free = (wf_request_event *)ev->link.next;
    return ev;
}

/* A TOKEN event for the scheduler thread, or NULL when none can be had: the caller fails the
 * request (its FINISHED events were reserved at submit, so the client still hears). */
static wf_request_event *event_get(wf_sched *s) {
    if (!s->ev_local || atomic_load(&s->ev_fail_next) > 0) {
        pthread_mutex_lock(&s->ev_lock);
        wf_request_event *ev = event_take_locked(s);
        if (ev && !s->ev_local) {
            /* Refill the private stock with whatever else is free. */
            s->ev_local = s->ev_free;
            s->ev_free = NULL;
        }
        pthread_mutex_unlock(&s->ev_lock);
        if (!ev) return NULL;
        memset(ev, 0, sizeof *ev);
        return ev;
    }
    wf_request_event *ev = s->ev_local;
    s->ev_local = (wf_request_event *)ev->link.next;
    memset(ev, 0, sizeof *ev);
    return ev;
}

void wf_request_event_free(wf_sched *s, wf_request_event *ev) {
    pthread_mutex_lock(&s->ev_lock);
    ev->link.next = (wf_handoff_item *)s->ev_free;
    s->ev_free = ev;
    pthread_mutex_unlock(&s->ev_lock);
}

void wf__sched_fail_event_allocs(wf_sched *s, int n) {
    atomic_store(&s->ev_fail_next, n);
}

/* One FINISHED event per choice, set aside at submit: ending a request never needs memory. */
static bool reserve_finish_events(wf_sched *s, wf_request *r) {
    pthread_mutex_lock(&s->ev_lock);
    bool ok = true;
    for (int i = 0; i < r->n_choices; i++) {
        wf_request_event *ev = event_take_locked(s);
        if (!ev) {
            ok = false;
            break;
        }
        ev->link.next = (wf_handoff_item *)r->finish_events;
        r->finish_events = ev;
    }
    pthread_mutex_unlock(&s->ev_lock);
    return ok;
}

static void return_finish_events(wf_sched *s, wf_request *r) {
    while (r->finish_events) {
        wf_request_event *ev = r->finish_events;
        r->finish_events = (wf_request_event *)ev->link.next;
        wf_request_event_free(s, ev);
    }
}

/* Tries to deliver; a full queue keeps the event (and every later one) for the next iteration,
 * a closed queue means the consumer is gone: the event is dropped and the request cancelled. */
static bool deliver(wf_sched *s, wf_request_event *ev) {
    wf_request *r = ev->request;
    wf_status st = wf_handoff_push(r->events, &ev->link);
    if (st == WF_EFULL) return false;
    if (st != WF_OK) {
        atomic_store(&r->cancel_requested, true);
        wf_request_event_free(s, ev);
    }
    return true;
}

static void flush_pending(wf_sched *s) {
    while (s->pend_head) {
        wf_request_event *ev = s->pend_head;
        wf_request_event *next = (wf_request_event *)ev->link.next;
        if (!deliver(s, ev)) {
            ev->link.next = (wf_handoff_item *)next; /* push reset it */
            return;
        }
        s->pend_head = next;
        if (!next) s->pend_tail = NULL;
    }
}

static void emit(wf_sched *s, wf_request_event *ev) {
    if (!s->pend_head && deliver(s, ev)) return;
    ev->link.next = NULL;
    if (s->pend_tail) s->pend_tail->link.next = &ev->link;
    else s->pend_head = ev;
    s->pend_tail = ev;
}

/* ---- request references ---- */

static void request_unref(wf_sched *s, wf_request *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    pthread_mutex_lock(&s->lock);
    if (r->live_prev) r->live_prev->live_next = r->live_next;
    else s->live = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    pthread_mutex_unlock(&s->lock);
    return_finish_events(s, r);
    wf__request_free(r);
}

/* ---- core callbacks (scheduler thread) ---- */

static void cb_token(void *user, wf_request *r, int choice, const wf_generated_token *tok,
                     uint64_t now) {
    wf_sched *s = user;
    if (r->abort_status != WF_OK) return; /* already failing: no more tokens */
    wf_request_event *ev = event_get(s);
    if (!ev) {
        /* The token cannot be delivered: the stream would have a hole. The request fails at
         * the next plan with a clear error (through its reserved FINISHED events). */
        WF_LOG_ERROR("sched", r->spec.id, "out of memory for events: the request fails");
        r->abort_status = WF_ENOMEM;
        return;
    }
    ev->request = r;
    ev->user = r->user;
    ev->kind = WF_EVENT_TOKEN;
    ev->choice = choice;
    ev->t_ns = now;
    ev->token = *tok;
    emit(s, ev);
}

static void cb_finished(void *user, wf_request *r, int choice, wf_finish_reason reason,
                        wf_status status, const char *message, uint64_t now) {
    wf_sched *s = user;
    wf_request_event *ev = r->finish_events;
    if (!ev) {
        /* Cannot happen: one was reserved per choice and each choice finishes once. */
        WF_LOG_ERROR("sched", r->spec.id, "no FINISHED event left for choice %d", choice);
        return;
    }
    r->finish_events = (wf_request_event *)ev->link.next;
    memset(ev, 0, sizeof *ev);
    ev->request = r;
    ev->user = r->user;
    ev->kind = WF_EVENT_FINISHED;
    ev->choice = choice;
    ev->t_ns = now;
    ev->finish = reason;
    ev->status = status;
    if (message) snprintf(ev->message, sizeof ev->message, "%s", message);
    ev->usage.prompt_tokens = r->spec.n_prompt;
    ev->usage.completion_tokens = r->choices[choice].n_generated;
    ev->usage.cached_prompt_tokens = r->cached_prompt_tokens;
    ev->times = r->times;
    ev->times.finished_ns = now;
    if (status != WF_OK && reason == WF_FINISH_ERROR)
        WF_LOG_WARN("sched", r->spec.id, "choice %d failed: %s", choice, ev->message);
    emit(s, ev);
}

static void cb_retired(void *user, wf_request *r) {
    wf_sched *s = user;
    pthread_mutex_lock(&s->lock);
    r->snap.state = r->state;
    pthread_mutex_unlock(&s->lock);
    request_unref(s, r);
}

static void cb_task(void *user, const wf_request *r, const wf_task *t) {
    (void)user;
    WF_LOG_TRACE("sched", r->spec.id, "task %llu %s seq %llu pos %d n %d: %s (%.3f ms)",
                 (unsigned long long)t->id, wf_task_kind_str(t->kind),
                 (unsigned long long)t->request_seq, t->llm.pos, t->llm.n_tokens,
                 wf_status_name(t->status),
                 t->t_end_ns > t->t_begin_ns ? (double)(t->t_end_ns - t->t_begin_ns) / 1e6 : 0.0);
}

/* ---- construction and groups ---- */

static uint64_t group_id(const wf_group *g) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < g->n_ranks; i++) {
        h ^= (uint64_t)(uint32_t)g->ranks[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void wake(wf_sched *s) {
    if (!atomic_exchange(&s->wake_pending, true)) wf_handoff_push(&s->inbox, &s->wake_item);
}

/* Scheduler thread (or the caller before start): creates the lane of group g. */
static void make_lane(wf_sched *s, sched_group *g) {
    wf_core_config cfg = {
        .policy = s->policy,
        .max_batch_tokens = s->opts.max_batch_tokens,
        .max_running = s->opts.max_running,
        .n_ctx = s->opts.n_ctx,
        .whole_prefill = s->opts.whole_prefill,
        .pool = g->pool,
        .store = g->kv,
        .group = g->group,
        .cost = &s->cost,
        .prefill_stretch = s->opts.prefill_stretch,
        .fair = &s->fair,
        .cb = {cb_token, cb_finished, cb_retired, cb_task, s},
    };
    wf_status st = wf_lanes_add_at(&s->lanes, g->slot, &cfg);
    g->laned = true;
    if (st != WF_OK) {
        /* A lane that cannot be made (out of memory) leaves the group down (never routed
         * to); the slot's previous lane, down and empty, stays. */
        WF_LOG_ERROR("sched", NULL, "group %d: cannot create its lane: %s", g->id,
                     wf_status_str(st));
        pthread_mutex_lock(&s->lock);
        snprintf(g->last_error, sizeof g->last_error, "cannot create its lane: %s",
                 wf_status_str(st));
        g->retired = true;
        pthread_mutex_unlock(&s->lock);
        if (g->slot >= s->lanes.n) return; /* no lane in the slot at all: not listed */
    }
    s->lane_group[g->slot] = g;
    /* The previous holder of the slot went down with no batch in flight, so nothing of it
     * is left in the inbox: free it (and any group that never got a lane in between). */
    pthread_mutex_lock(&s->lock);
    sched_group *old = g->replaced;
    g->replaced = NULL;
    pthread_mutex_unlock(&s->lock);
    while (old) {
        sched_group *prev = old->replaced;
        wf_kv_pool_free(old->pool);
        free(old);
        old = prev;
    }
}

wf_status wf_sched_add_group(wf_sched *s, wf_kv_store *kv, wf_executor executor, int rank,
                             int *out_id) {
    if (!kv || kv->n_blocks <= 0 || kv->geometry.block_size <= 0 || !executor.ops ||
        !executor.ops->dispatch)
        return WF_EINVAL;
    sched_group *g = calloc(1, sizeof *g);
    if (!g) return WF_ENOMEM;
    /* A store split by layer kind (kv/kv_store.h): the pool keeps the local layers' blocks
     * apart and releases those behind the window. */
    wf_status st = kv->n_swa_blocks > 0
                       ? wf_kv_pool_new_swa(kv->n_blocks, kv->n_swa_blocks, kv->geometry.block_size,
                                            kv->geometry.swa_window, s->opts.prefix_cache, &g->pool)
                       : wf_kv_pool_new(kv->n_blocks, kv->geometry.block_size,
                                        s->opts.prefix_cache, &g->pool);
    if (st != WF_OK) {
        free(g);
        return st;
    }
    g->sched = s;
    g->kv = kv;
    g->exec = executor;
    g->group.n_ranks = 1;
    g->group.ranks[0] = rank;
    g->group.id = group_id(&g->group);
    pthread_mutex_lock(&s->lock);
    int slot = -1;
    for (int i = 0; i < s->n_groups && slot < 0; i++)
        if (s->groups[i]->retired) slot = i;
    if (slot < 0 && s->n_groups < WF_LANES_MAX) slot = s->n_groups;
    if (slot < 0 || s->stopping) {
        pthread_mutex_unlock(&s->lock);
        wf_kv_pool_free(g->pool);
        free(g);
        return s->stopping ? WF_ECLOSED : WF_EFULL;
    }
    g->id = s->next_group_id++;
    g->slot = slot;
    if (slot < s->n_groups) g->replaced = s->groups[slot];
    else s->n_groups++;
    s->groups[slot] = g;
    int bs = kv->geometry.block_size;
    if (s->min_block_size == 0 || bs < s->min_block_size) s->min_block_size = bs;
    long tokens = (long)kv->n_blocks * bs;
    if (tokens > s->max_kv_tokens) s->max_kv_tokens = tokens;
    bool started = s->started;
    pthread_mutex_unlock(&s->lock);
    if (out_id) *out_id = g->id;
    if (started) wake(s); /* the thread creates the lane */
    else make_lane(s, g);
    WF_LOG_INFO("sched", NULL, "group %d (slot %d): rank %d, executor %s, KV %d blocks of %d", g->id,
                slot, rank, executor.ops->name ? executor.ops->name : "?", kv->n_blocks, bs);
    return WF_OK;
}

wf_status wf_sched_remove_group(wf_sched *s, int id, const char *message) {
    pthread_mutex_lock(&s->lock);
    sched_group *g = NULL;
    for (int i = 0; i < s->n_groups && !g; i++)
        if (s->groups[i]->id == id) g = s->groups[i];
    if (!g) { /* never added, or its slot already went to a newer group */
        pthread_mutex_unlock(&s->lock);
        return WF_ENOTFOUND;
    }
    g->down_requested = true;
    g->down_status = WF_ECLOSED;
    snprintf(g->down_msg, sizeof g->down_msg, "%s", message ? message : "removed");
    pthread_mutex_unlock(&s->lock);
    wake(s);
    return WF_OK;
}

wf_status wf_sched_new(const wf_sched_options *opts, wf_kv_store *kv, wf_executor executor,
                       wf_sched **out) {
    *out = NULL;
    const wf_sched_policy *pol = wf_sched_policy_find(opts->policy);
    if (!pol) {
        WF_LOG_ERROR("sched", NULL, "unknown policy \"%s\" (known: %s)", opts->policy,
                     wf_sched_policy_names());
        return WF_EINVAL;
    }
    bool first_group = kv || executor.ops;
    if ((first_group && (!kv || kv->n_blocks <= 0 || !executor.ops || !executor.ops->dispatch)) ||
        opts->queue_size < 1 || opts->max_batch_tokens < 1 || opts->max_running < 1 ||
        opts->n_ctx < 2 || opts->default_ttft_ms <= 0 || opts->default_tpot_ms <= 0 ||
        opts->admission_factor <= 0)
        return WF_EINVAL;
    wf_sched *s = calloc(1, sizeof *s);
    if (!s) return WF_ENOMEM;
    wf_status st = WF_ENOMEM;
    s->opts = *opts;
    s->opts.policy = pol->name;
    s->opts.cost_model_file = NULL; /* only read in start; not kept */
    s->policy = pol;
    wf_lanes_init(&s->lanes);
    wf_fair_init(&s->fair);
    if (pthread_mutex_init(&s->lock, NULL) != 0) goto fail_lock;
    if (pthread_mutex_init(&s->ev_lock, NULL) != 0) goto fail_evlock;
    if (pthread_cond_init(&s->idle_cond, NULL) != 0) goto fail_cond;
    if (wf_handoff_init(&s->inbox, (size_t)opts->queue_size + WF_LANES_MAX + 1, NULL, NULL) !=
        WF_OK)
        goto fail_inbox;
    s->ev_free = NULL;
    if (!event_chunk_add(s)) goto fail_events;
    s->wait_cap = opts->queue_size + WF_LANES_MAX;
    if (!(s->wait_snap = calloc((size_t)s->wait_cap, sizeof *s->wait_snap))) goto fail_events;
    /* A neutral prior until the model is calibrated or loaded (wf_sched_start). */
    double prior[4] = {5.0, 0.5, 2.0, 0.001};
    wf_cost_model_init(&s->cost, opts->cost_given ? opts->cost : prior);
    s->cost_pub = s->cost;
    s->model_trusted = opts->cost_given;
    s->rng_counter = opts->seed;
    atomic_init(&s->wake_pending, false);
    atomic_init(&s->ev_fail_next, 0);
    atomic_init(&s->dones_running, 0);
    if (opts->cost_model_file) {
        double c[4];
        char err[256];
        if ((st = wf_cost_model_load(opts->cost_model_file, c, err, sizeof err)) != WF_OK) {
            WF_LOG_ERROR("sched", NULL, "%s", err);
            goto fail_events;
        }
        wf_cost_model_init(&s->cost, c);
        s->cost_pub = s->cost;
        s->model_trusted = true;
        s->opts.cost_given = true;
        memcpy(s->opts.cost, c, sizeof c);
    }
    if (first_group && (st = wf_sched_add_group(s, kv, executor, opts->group_rank, NULL)) != WF_OK)
        goto fail_events;
    *out = s;
    return WF_OK;
fail_events:
    free(s->wait_snap);
    for (int i = 0; i < s->n_chunks; i++) free(s->ev_chunks[i]);
    free(s->ev_chunks);
    wf_handoff_free(&s->inbox);
fail_inbox:
    pthread_cond_destroy(&s->idle_cond);
fail_cond:
    pthread_mutex_destroy(&s->ev_lock);
fail_evlock:
    pthread_mutex_destroy(&s->lock);
fail_lock:
    free(s);
    return st;
}

/* ---- calibration ---- */

/* Runs one batch and returns its wall time in ms (< 0 on failure). */
static double timed_batch(sched_group *g, wf_task *tasks, int n) {
    wf_task_batch b = {.tasks = tasks, .n_tasks = n, .group = g->group};
    uint64_t t0 = wf_clock_now_ns();
    wf_status st = wf_executor_run(g->exec, &b, NULL, 0);
    uint64_t t1 = wf_clock_now_ns();
    if (st != WF_OK) return -1;
    for (int i = 0; i < n; i++)
        if (tasks[i].status != WF_OK) return -1;
    return (double)(t1 - t0) / 1e6;
}

/* One calibration batch: n_dec decodes, each at position dec_ctx (attending dec_ctx + 1
 * positions), plus (pre_len > 0) one prefill chunk of pre_len tokens starting at pre_start. */
typedef struct cal_batch {
    int n_dec, dec_ctx, pre_len, pre_start;
} cal_batch;

enum { CAL_MAXK = 32, CAL_MAX_LONG = 1024, CAL_MAXS = 48 };

/* Makes seq share the first ctx positions (a multiple of the block size) of base, then
 * reserves n_more positions after them in blocks of its own. */
static wf_status cal_seq(sched_group *g, const wf_kv_seq *base, int ctx, int n_more, wf_kv_seq *seq) {
    wf_status st = wf_kv_seq_fork_prefix(g->pool, base, ctx, seq);
    return st == WF_OK ? wf_kv_seq_reserve(g->pool, seq, ctx + n_more, g->kv) : st;
}

/* Measures batches that vary each feature of the model on its own -- prefill chunk length,
 * the chunk's start position, the number of decodes and their context -- and fits a, b, c, d.
 * Long contexts are not computed: the sequences share blocks of zeros standing for an earlier
 * prompt (the time of attention does not depend on what the keys hold), so a decode at
 * position 1024 costs one decode, and the context coefficient is identified from batches
 * whose attention work differs at equal token counts (a chunk at the start of a prompt vs the
 * same chunk deep into one) instead of from prefills whose context equals their length. The
 * synthetic tokens are small ids valid in any vocabulary; every block is returned after. */
static wf_status calibrate(wf_sched *s) {
    sched_group *g = s->groups[0];
    int bs = g->kv->geometry.block_size;
    int budget = s->opts.max_batch_tokens;
    int maxk = s->opts.max_running < CAL_MAXK ? s->opts.max_running : CAL_MAXK;
    /* The long context: up to 1024 positions, half the context window, a quarter of the
     * cache; a multiple of the block size. */
    int lng = CAL_MAX_LONG;
    if (lng > s->opts.n_ctx / 2) lng = s->opts.n_ctx / 2;
    if (lng > g->kv->n_blocks * bs / 4) lng = g->kv->n_blocks * bs / 4;
    lng -= lng % bs;
    if (lng < bs) lng = bs;
    int sh = 64 < lng / 2 ? 64 : lng / 2; /* the short context */
    sh -= sh % bs;
    if (sh < bs) sh = bs;
    int half = (lng / 2) - (lng / 2) % bs;
    if (half < sh) half = sh;
    int p_big = budget < 256 ? budget : 256, p_mid = budget < 64 ? budget : 64;
    int p_small = budget < 16 ? budget : 16;
    int k_mid = maxk < 8 ? maxk : 8;
    /* Most informative first: the time bound may cut the list short. The first batch pays
     * for cold caches and is not a sample. */
    const cal_batch plan[] = {
        {0, 0, p_small, 0},           /* warm-up */
        {0, 0, p_mid, 0},    {1, sh, 0, 0},       {0, 0, p_mid, lng},   {1, lng, 0, 0},
        {0, 0, p_big, 0},    {k_mid, sh, 0, 0},   {k_mid, lng, 0, 0},   {maxk, sh, 0, 0},
        {0, 0, p_small, lng}, {0, 0, p_small, 0}, {k_mid, sh, p_mid, 0}, {maxk, half, 0, 0},
        {1, sh, 0, 0},       {0, 0, p_mid, 0},    {0, 0, p_mid, lng},   {1, lng, 0, 0},
        {k_mid, lng, 0, 0},  {k_mid, sh, 0, 0},   {maxk, sh, 0, 0},     {k_mid, sh, p_mid, lng},
    };
    const int n_plan = (int)(sizeof plan / sizeof plan[0]);
    wf_cost_sample samples[CAL_MAXS];
    int ns = 0;
    wf_status st = WF_OK;
    int max_tokens = lng + (p_big > 1 ? p_big : 1) + 1;
    int max_blocks = (max_tokens + bs - 1) / bs;
    wf_kv_seq base, seqs[CAL_MAXK + 1];
    wf_task tasks[CAL_MAXK + 1];
    wf_task_sample samp[CAL_MAXK + 1];
    int32_t *tok = NULL;
    wf_sampling_params greedy = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    uint64_t t_start = wf_clock_now_ns();
    memset(&base, 0, sizeof base);
    memset(seqs, 0, sizeof seqs);
    /* Every sequence reads the same token history (only its length matters here). */
    tok = malloc((size_t)max_tokens * sizeof *tok);
    if (!tok || wf_kv_seq_init(&base, max_blocks) != WF_OK) {
        st = WF_ENOMEM;
        goto done;
    }
    for (int t = 0; t < max_tokens; t++) tok[t] = 1 + (t * 7) % 200;
    for (int i = 0; i <= maxk; i++)
        if (wf_kv_seq_init(&seqs[i], max_blocks) != WF_OK) {
            st = WF_ENOMEM;
            goto done;
        }
    if (lng + 1 >= s->opts.n_ctx || wf_kv_seq_reserve(g->pool, &base, lng, g->kv) != WF_OK) {
        st = WF_EFULL;
        goto done;
    }
    /* The stand-in prompt: zeros are valid keys and values in F16 and F32. A worker's memory
     * is in its own process (k NULL here): it starts zeroed. */
    for (int b = 0; b < base.n_blocks && g->kv->k; b++)
        for (int l = 0; l < g->kv->geometry.n_layers; l++) {
            int blk = wf_kv_store_layer_is_swa(g->kv, l) ? base.swa_blocks[b] : base.blocks[b];
            memset(wf_kv_store_k(g->kv, l, blk), 0, g->kv->block_bytes);
            memset(wf_kv_store_v(g->kv, l, blk), 0, g->kv->block_bytes);
        }
    base.n_tokens = lng;
    for (int pi = 0; pi < n_plan && ns < CAL_MAXS; pi++) {
        const cal_batch *cb = &plan[pi];
        if (wf_clock_now_ns() - t_start > CALIBRATION_NS) break;
        if (cb->n_dec > maxk || cb->n_dec + (cb->pre_len > 0) > s->opts.max_running ||
            cb->n_dec + cb->pre_len > budget || cb->dec_ctx + 1 >= s->opts.n_ctx ||
            cb->pre_start + cb->pre_len >= s->opts.n_ctx ||
            cb->n_dec + (cb->pre_len + bs - 1) / bs + 1 > wf_kv_pool_available_min(g->pool))
            continue;
        int n = 0;
        double attn = 0;
        for (int i = 0; i < cb->n_dec; i++, n++) {
            if ((st = cal_seq(g, &base, cb->dec_ctx, 1, &seqs[n])) != WF_OK) goto done;
            samp[n] = (wf_task_sample){.params = &greedy, .rng_state = 1, .history = tok,
                                       .n_history = cb->dec_ctx + 1, .n_prompt = cb->dec_ctx,
                                       .suppress_eos = true};
            tasks[n] = (wf_task){.id = (uint64_t)n, .kind = WF_TASK_DECODE,
                                 .request_seq = UINT64_MAX - (uint64_t)n,
                                 .llm.tokens = tok + cb->dec_ctx, .llm.n_tokens = 1, .llm.pos = cb->dec_ctx,
                                 .llm.kv.kind = WF_ARTIFACT_KV, .llm.kv.block_table = seqs[n].blocks, .llm.kv.n_blocks = seqs[n].n_blocks,
                                 .llm.kv.swa_block_table = wf_kv_seq_swa_table(g->pool, &seqs[n]),
                                 .llm.samples = &samp[n], .llm.n_samples = 1};
            attn += wf_cost_model_attention(cb->dec_ctx, 1);
        }
        if (cb->pre_len > 0) {
            int end = cb->pre_start + cb->pre_len;
            if ((st = cal_seq(g, &base, cb->pre_start, cb->pre_len, &seqs[n])) != WF_OK) goto done;
            samp[n] = (wf_task_sample){.params = &greedy, .rng_state = 1, .history = tok,
                                       .n_history = end, .n_prompt = end, .suppress_eos = true};
            tasks[n] = (wf_task){.id = (uint64_t)n, .kind = WF_TASK_PREFILL,
                                 .request_seq = UINT64_MAX - (uint64_t)n,
                                 .llm.tokens = tok + cb->pre_start, .llm.n_tokens = cb->pre_len,
                                 .llm.pos = cb->pre_start, .llm.kv.kind = WF_ARTIFACT_KV, .llm.kv.block_table = seqs[n].blocks,
                                 .llm.kv.n_blocks = seqs[n].n_blocks,
                                 .llm.kv.swa_block_table = wf_kv_seq_swa_table(g->pool, &seqs[n]),
                                 .llm.samples = &samp[n],
                                 .llm.n_samples = 1};
            attn += wf_cost_model_attention(cb->pre_start, cb->pre_len);
            n++;
        }
        double ms = timed_batch(g, tasks, n);
        for (int i = 0; i < n; i++) wf_kv_seq_release(g->pool, &seqs[i]);
        if (ms < 0) {
            st = WF_EIO;
            goto done;
        }
        if (pi > 0)
            samples[ns++] = (wf_cost_sample){(double)cb->pre_len, (double)cb->n_dec, attn, ms};
    }
    if (ns >= 4) {
        double fit[4];
        if (wf_cost_model_fit(samples, ns, s->cost.coef, fit) == WF_OK) {
            wf_cost_model_init(&s->cost, fit);
            s->model_trusted = ns >= 8;
            WF_LOG_INFO("sched", NULL,
                        "cost model calibrated from %d batches: step_ms = %.3f + %.5f*prefill "
                        "+ %.4f*decode + %.8f*attention",
                        ns, fit[0], fit[1], fit[2], fit[3]);
        }
    } else {
        st = WF_EINVAL; /* budgets too small, or too slow a device, to measure anything */
    }
done:
    for (int i = 0; i <= maxk; i++) {
        if (seqs[i].blocks) wf_kv_seq_release(g->pool, &seqs[i]);
        wf_kv_seq_free(&seqs[i]);
    }
    if (base.blocks) wf_kv_seq_release(g->pool, &base);
    wf_kv_seq_free(&base);
    free(tok);
    return st;
}

/* ---- the loop ---- */

static void publish(wf_sched *s) {
    wf_core_load load;
    wf_lanes_get_load(&s->lanes, &load);
    int n_live = wf_lanes_n_live(&s->lanes);
    wf_sched_stats agg;
    memset(&agg, 0, sizeof agg);
    uint64_t preempted = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->lanes.n; i++) {
        wf_lane *ln = s->lanes.lane[i];
        wf_core *c = &ln->core;
        sched_group *g = s->lane_group[i];
        wf_kv_pool_usage u;
        wf_kv_pool_get_usage(g->pool, &u);
        for (int pass = 0; pass < 2; pass++) {
            wf_request **arr = pass ? c->waiting : c->running;
            int n = pass ? c->n_waiting : c->n_running;
            for (int k = 0; k < n; k++) {
                wf_request *r = arr[k];
                int gen = 0;
                for (int j = 0; j < r->n_choices; j++) gen += r->choices[j].n_generated;
                r->snap.state = r->state;
                r->snap.generated_tokens = gen;
                r->snap.cached_prompt_tokens = r->cached_prompt_tokens;
                r->snap.preemptions = r->n_preemptions;
                r->snap.prefill_tasks = r->tasks_by_kind[WF_TASK_PREFILL];
                r->snap.decode_tasks = r->tasks_by_kind[WF_TASK_DECODE];
                r->snap.group = g->id;
            }
        }
        agg.running += c->n_running;
        agg.waiting += c->n_waiting;
        preempted += c->preempted_total;
        if (ln->live) {
            agg.kv_blocks_total += u.n_blocks;
            agg.kv_blocks_used += u.used;
            agg.kv_blocks_cached += u.cached;
            agg.kv_swa_blocks_total += u.swa_n_blocks;
            agg.kv_swa_blocks_used += u.swa_used;
            agg.kv_swa_blocks_cached += u.swa_cached;
        }
        agg.prefix_queries += u.prefix_queries;
        agg.prefix_hits += u.prefix_hits;
        agg.cow_copies += u.cow_copies;
        agg.kv_swa_released += u.swa_released;
        agg.finished_total += c->finished_total;
        agg.failed_total += c->failed_total;
        agg.cancelled_total += c->cancelled_total;
        if (i < WF_SCHED_STATS_GROUPS) {
            wf_sched_group_stats *gs = &agg.groups[i];
            gs->id = g->id;
            gs->slot = i;
            gs->rank = g->group.ranks[0];
            gs->live = ln->live;
            snprintf(gs->executor, sizeof gs->executor, "%s",
                     g->exec.ops->name ? g->exec.ops->name : "");
            gs->running = c->n_running;
            gs->waiting = c->n_waiting;
            gs->kv_blocks_total = u.n_blocks;
            gs->kv_blocks_used = u.used;
            gs->kv_swa_blocks_total = u.swa_n_blocks;
            gs->kv_swa_blocks_used = u.swa_used;
            gs->kv_swa_released = u.swa_released;
            gs->batches_in_flight = ln->busy ? 1 : 0;
            gs->iterations = g->iterations;
            gs->failed_batches = g->failed_batches;
            snprintf(gs->last_error, sizeof gs->last_error, "%s", g->last_error);
        }
    }
    s->load = load;
    s->running_load = load;
    s->wait_n = 0;
    for (int i = 0; i < s->lanes.n; i++) {
        const wf_core *c = &s->lanes.lane[i]->core;
        if (!s->lanes.lane[i]->live) continue;
        for (int k = 0; k < c->n_waiting; k++, s->wait_n++) {
            wf_waiting_work w;
            wf_core_waiting_work(c->waiting[k], &w);
            s->running_load.pending_prefill_tokens -= w.prefill_tokens;
            s->running_load.pending_prefill_attention -= w.prefill_attention;
            if (s->wait_n < s->wait_cap) s->wait_snap[s->wait_n] = w;
        }
    }
    s->n_live = n_live;
    s->cost_pub = s->cost;
    if (s->cost.n_obs >= 32) s->model_trusted = true;
    wf_sched_stats *st = &s->stats;
    uint64_t rejected = st->rejected_total;
    *st = agg;
    st->rejected_total = rejected;
    st->n_groups = s->lanes.n;
    st->groups_live = n_live;
    st->rerouted_total = s->lanes.rerouted_total;
    st->preempted_total = (int)preempted;
    st->failed_total += s->failed_at_intake;
    st->kv_usage = st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0;
    st->iterations = s->iterations;
    st->iteration_ms_avg = s->iter_ms_avg;
    st->sched_overhead_ms_avg = s->overhead_ms_avg;
    st->overhead_fraction = s->overhead_frac;
    st->plan_ms_avg = s->plan_ms_avg;
    st->complete_ms_avg = s->complete_ms_avg;
    memcpy(st->cost_model, s->cost.coef, sizeof st->cost_model);
    pthread_mutex_unlock(&s->lock);
}

static double ewma(double avg, double x) { return avg == 0 ? x : 0.9 * avg + 0.1 * x; }

/* Executor thread (any): the batch of group g ran. Quick: record and hand over. */
static void on_done(void *user, wf_task_batch *batch, wf_status status, const char *message) {
    (void)batch;
    sched_group *g = user;
    wf_sched *s = g->sched;
    atomic_fetch_add(&s->dones_running, 1);
    g->done_status = status;
    snprintf(g->done_msg, sizeof g->done_msg, "%s", message ? message : "");
    if (wf_handoff_push(&s->inbox, &g->done_item) != WF_OK)
        /* By construction the inbox has room for every group's completion; it is closed only
         * once no batch is in flight. */
        WF_LOG_ERROR("sched", NULL, "group %d: completion lost (inbox full or closed)", g->id);
    atomic_fetch_sub(&s->dones_running, 1); /* the last touch of s */
}

/* The group is gone (its executor reported WF_ECLOSED, or it was removed): its requests move
 * or fail (wf_lanes_down). Its lane has no batch in flight. */
static void group_down(wf_sched *s, sched_group *g, wf_status status, const char *why) {
    char msg[160];
    snprintf(msg, sizeof msg, "group %d (rank %d) went down: %s", g->id, g->group.ranks[0], why);
    WF_LOG_WARN("sched", NULL, "%s", msg);
    pthread_mutex_lock(&s->lock);
    snprintf(g->last_error, sizeof g->last_error, "%s", msg);
    pthread_mutex_unlock(&s->lock);
    wf_lanes_down(&s->lanes, g->slot, status, msg, wf_clock_now_ns());
    /* No batch in flight and none will be dispatched: nothing of this group can reach the
     * inbox any more, so a new group may take the slot. */
    pthread_mutex_lock(&s->lock);
    g->retired = true;
    pthread_mutex_unlock(&s->lock);
}

/* Scheduler thread: applies a completion of group g. */
static void complete(wf_sched *s, sched_group *g, wf_status st, const char *why) {
    wf_lane *ln = s->lanes.lane[g->slot];
    uint64_t t2 = wf_clock_now_ns();
    ln->busy = false;
    g->iterations++;
    s->iterations++;
    if (st == WF_ECLOSED) {
        g->failed_batches++;
        group_down(s, g, st, why[0] ? why : "executor closed");
        return;
    }
    pthread_mutex_lock(&s->lock);
    bool removing = g->down_requested;
    wf_status down_st = g->down_status;
    char down_msg[160];
    snprintf(down_msg, sizeof down_msg, "%s", g->down_msg);
    pthread_mutex_unlock(&s->lock);
    if (removing && st != WF_OK) {
        /* The batch was cancelled (or failed) because the group is being removed: its
         * requests are treated as the group's, not as failed by the batch. */
        group_down(s, g, down_st, down_msg);
        return;
    }
    char msg[224] = "";
    if (st != WF_OK) {
        g->failed_batches++;
        snprintf(msg, sizeof msg, "executor %s failed: %s%s%s",
                 g->exec.ops->name ? g->exec.ops->name : "", wf_status_str(st),
                 why[0] ? ": " : "", why);
        pthread_mutex_lock(&s->lock);
        snprintf(g->last_error, sizeof g->last_error, "%s", msg);
        pthread_mutex_unlock(&s->lock);
    }
    wf_core *c = &ln->core;
    wf_core_complete(c, st, st != WF_OK ? msg : NULL, t2);
    uint64_t t3 = wf_clock_now_ns();
    double run_ms = (double)(t2 - g->dispatched_ns) / 1e6;
    double plan_ms = (double)(g->plan_ns + (t3 - t2)) / 1e6;
    if (st == WF_OK && s->opts.online_refit)
        wf_cost_model_observe(&s->cost, c->last_prefill_tokens, c->last_decode_tokens,
                              c->last_context, run_ms);
    s->iter_ms_avg = ewma(s->iter_ms_avg, run_ms + plan_ms);
    s->overhead_ms_avg = ewma(s->overhead_ms_avg, plan_ms);
    s->overhead_frac = ewma(s->overhead_frac, plan_ms / (plan_ms + run_ms + 1e-9));
    s->plan_ms_avg = ewma(s->plan_ms_avg, (double)g->plan_ns / 1e6);
    s->complete_ms_avg = ewma(s->complete_ms_avg, (double)(t3 - t2) / 1e6);
}

static sched_group *group_of_item(wf_sched *s, wf_handoff_item *it) {
    for (int i = 0; i < s->lanes.n; i++)
        if (s->lane_group[i] && it == &s->lane_group[i]->done_item) return s->lane_group[i];
    return NULL;
}

/* Takes in everything the inbox holds; creates lanes of new groups and takes removed groups
 * down once idle. */
static void intake(wf_sched *s) {
    /* Groups added since the last turn (in new slots, or in slots of groups that went down). */
    sched_group *fresh[WF_LANES_MAX];
    int n_fresh = 0;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_groups; i++)
        if (!s->groups[i]->laned) fresh[n_fresh++] = s->groups[i];
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < n_fresh; i++) make_lane(s, fresh[i]);
    wf_handoff_item *it = wf_handoff_take_all(&s->inbox);
    while (it) {
        wf_handoff_item *next = it->next;
        sched_group *g;
        if (it == &s->wake_item) {
            atomic_store(&s->wake_pending, false);
        } else if ((g = group_of_item(s, it)) != NULL) {
            complete(s, g, g->done_status, g->done_msg);
        } else {
            wf_request *r = (wf_request *)it;
            pthread_mutex_lock(&s->lock);
            s->inflight_reqs--;
            s->inflight_prefill -= r->spec.n_prompt;
            s->inflight_attention -= wf_cost_model_attention(0, r->spec.n_prompt);
            pthread_mutex_unlock(&s->lock);
            wf_status st = wf_lanes_add_request(&s->lanes, r, r->times.queued_ns);
            if (st != WF_OK) {
                /* Not in any core: end it here so the client still gets its FINISHED. */
                const char *why = st == WF_ECLOSED ? "no live device group can hold the request"
                                                   : "out of memory";
                for (int j = 0; j < r->n_choices; j++)
                    cb_finished(s, r, j, WF_FINISH_ERROR, st, why, wf_clock_now_ns());
                r->state = WF_REQUEST_FAILED;
                s->failed_at_intake++;
                cb_retired(s, r);
            }
        }
        it = next;
    }
    for (int i = 0; i < s->lanes.n; i++) {
        sched_group *g = s->lane_group[i];
        wf_lane *ln = s->lanes.lane[i];
        if (!g) continue;
        pthread_mutex_lock(&s->lock);
        bool down = g->down_requested && ln->live;
        wf_status st = g->down_status;
        char msg[160];
        snprintf(msg, sizeof msg, "%s", g->down_msg);
        pthread_mutex_unlock(&s->lock);
        if (!down) continue;
        if (!ln->busy) {
            group_down(s, g, st, msg);
        } else if (!g->cancel_sent && g->exec.ops->cancel) {
            g->cancel_sent = true; /* the completion takes it down */
            g->exec.ops->cancel(g->exec.ctx, &ln->core.batch);
        }
    }
}

/* Plans one batch for every live idle group that has work and dispatches it. Returns the
 * number of batches dispatched. */
static void on_grant(void *user) { wake(user); }

/* A gated group (opts.turns) may plan only on a granted turn: without one, it posts (or
 * updates) its claim and returns false. The claim carries the earliest next-token deadline of
 * its requests and the cost model's time for the iteration they would make (its decodes and
 * up to a token budget of prompt), so the gate weighs it against image work by when it must
 * start. */
static bool turn_held(wf_sched *s, sched_group *g, wf_lane *ln) {
    if (!s->opts.turns || g->exec.ctx != (void *)s->opts.turns) return true;
    wf_gated_executor *x = s->opts.turns;
    if (!g->claim_ns) g->claim_ns = wf_clock_now_ns();
    if (wf_gated_executor_granted(x)) return true;
    wf_core_load ld;
    wf_core_get_load(&ln->core, &ld);
    double prefill = ld.pending_prefill_tokens;
    if (prefill > s->opts.max_batch_tokens - ld.n_decode) prefill = s->opts.max_batch_tokens - ld.n_decode;
    if (prefill < 0) prefill = 0;
    double pred = s->model_trusted ? wf_cost_model_predict(&s->cost, prefill, ld.n_decode, ld.decode_context) : 0;
    if (wf_gated_executor_claim(x, wf_core_next_deadline(&ln->core), pred, on_grant, s) != WF_OK)
        return true; /* the gate's table is full: wait composed, as without claims */
    bool granted = wf_gated_executor_granted(x);
    s->claim_waiting |= !granted;
    return granted;
}

/* The gated group's claim must not outlive its work: a claim granted to a scheduler with
 * nothing to plan would hold the cores forever. Withdrawn when the group is idle and has no
 * requests (retired, cancelled, drained) or is down; a turn granted for a batch in flight is
 * left alone (the gated executor uses it). */
static void settle_claim(wf_sched *s) {
    if (!s->opts.turns) return;
    for (int i = 0; i < s->lanes.n; i++) {
        wf_lane *ln = s->lanes.lane[i];
        sched_group *g = s->lane_group[i];
        if (!g || g->exec.ctx != (void *)s->opts.turns) continue;
        if (ln->busy) return;
        if (!ln->live || wf_core_n_requests(&ln->core) == 0) {
            wf_gated_executor_unclaim(s->opts.turns);
            s->claim_waiting = false;
            g->claim_ns = 0;
        }
        return;
    }
}

static int plan_groups(wf_sched *s) {
    int dispatched = 0;
    /* The SLO policy sizes batches with the model only once it is trusted: a noisy start-up
     * calibration must not serialise the server. */
    const wf_cost_model *cm = s->model_trusted ? &s->cost : NULL;
    for (int i = 0; i < s->lanes.n; i++) {
        if (!wf_lanes_can_plan(&s->lanes, i)) continue;
        wf_lane *ln = s->lanes.lane[i];
        sched_group *g = s->lane_group[i];
        if (!turn_held(s, g, ln)) continue;
        ln->core.cfg.cost = cm;
        uint64_t t0 = wf_clock_now_ns();
        wf_task_batch *b = wf_core_plan(&ln->core, t0);
        uint64_t t1 = wf_clock_now_ns();
        if (b->n_tasks == 0) {
            /* Granted but nothing to run (blocks short, all cancelled): the turn passes on. */
            if (s->opts.turns && g->exec.ctx == (void *)s->opts.turns) wf_gated_executor_unclaim(s->opts.turns);
            g->claim_ns = 0;
            continue;
        }
        g->plan_ns = t1 - t0;
        /* Timed from the claim when the batch waited for its turn, as a composed batch's wait at
         * the gate is timed: the cost model then predicts the service time on shared cores
         * (admission's TTFT), in either way of taking turns. */
        g->dispatched_ns = g->claim_ns && g->claim_ns < t1 ? g->claim_ns : t1;
        g->claim_ns = 0;
        ln->busy = true;
        wf_status st = wf_executor_dispatch(g->exec, b, on_done, g);
        if (st != WF_OK) {
            /* Nothing started and done will not come: the batch failed as a whole now. */
            char why[96];
            snprintf(why, sizeof why, "dispatch refused");
            complete(s, g, st, why);
            continue;
        }
        dispatched++;
    }
    return dispatched;
}

static bool any_busy(const wf_sched *s) {
    for (int i = 0; i < s->lanes.n; i++)
        if (s->lanes.lane[i]->busy) return true;
    return false;
}

/* One turn of the loop: intake, drain deadline, events, planning. Returns whether a batch was
 * dispatched. */
static bool step(wf_sched *s) {
    intake(s);
    pthread_mutex_lock(&s->lock);
    bool expired = s->draining && wf_clock_now_ns() >= s->drain_deadline_ns;
    pthread_mutex_unlock(&s->lock);
    if (expired) {
        /* Idle groups end their requests now; busy ones when their batch reports (their
         * requests' memory is in the executor's hands until then). */
        for (int i = 0; i < s->lanes.n; i++) {
            wf_lane *ln = s->lanes.lane[i];
            if (ln->busy || wf_core_n_requests(&ln->core) == 0) continue;
            wf_core_abort_all(&ln->core, WF_FINISH_CANCELLED, WF_ECANCELLED,
                              "server shutting down", wf_clock_now_ns());
        }
    }
    flush_pending(s);
    s->claim_waiting = false; /* set by plan_groups when a posted claim waits for its grant */
    int n = expired ? 0 : plan_groups(s);
    settle_claim(s);
    flush_pending(s);
    publish(s);
    return n > 0;
}

static bool nothing_left(wf_sched *s) {
    pthread_mutex_lock(&s->lock);
    bool none = s->inflight_reqs == 0;
    pthread_mutex_unlock(&s->lock);
    return none && wf_lanes_n_requests(&s->lanes) == 0 && !s->pend_head && !any_busy(s);
}

/* One turn plus the wait for the next thing to do. Returns false when the loop should end
 * (stopping and nothing left). */
static bool loop_once(wf_sched *s) {
    bool dispatched = step(s);
    pthread_mutex_lock(&s->lock);
    bool stopping = s->stopping, draining = s->draining;
    pthread_mutex_unlock(&s->lock);
    if (nothing_left(s)) {
        if (draining) {
            pthread_mutex_lock(&s->lock);
            s->drained = true;
            pthread_cond_broadcast(&s->idle_cond);
            pthread_mutex_unlock(&s->lock);
        }
        if (stopping) return false;
        wf_handoff_wait(&s->inbox, draining ? 10 : -1);
    } else if (s->pend_head) {
        /* The events queue is full: retry soon (back-pressure; nothing is dropped). */
        wf_handoff_wait(&s->inbox, 1);
    } else if (any_busy(s)) {
        /* A completion, a request or a cancel wakes the loop; the drain deadline needs a
         * look now and then. */
        wf_handoff_wait(&s->inbox, draining ? 10 : -1);
    } else if (!dispatched && s->claim_waiting) {
        /* A turn is claimed on the shared cores: the grant wakes the loop (as does anything
         * new); the drain deadline needs a look now and then. */
        wf_handoff_wait(&s->inbox, draining ? 10 : 100);
    } else if (!dispatched) {
        /* Work exists but nothing could run (blocks freed next iteration, a group coming
         * up): sleep briefly instead of spinning. */
        wf_handoff_wait(&s->inbox, 1);
    }
    return true;
}

static void *thread_main(void *arg) {
    wf_sched *s = arg;
    while (loop_once(s)) {
    }
    /* No claim may outlive the thread: its grant would wake a freed scheduler. */
    if (s->opts.turns) wf_gated_executor_unclaim(s->opts.turns);
    return NULL;
}

wf_status wf_sched_start(wf_sched *s) {
    if (s->started) return WF_EINVAL;
    if (!s->opts.cost_given && s->n_groups > 0) {
        uint64_t t0 = wf_clock_now_ns();
        wf_status st = calibrate(s);
        if (st != WF_OK)
            WF_LOG_WARN("sched", NULL, "cost model calibration failed (%s): using the prior",
                        wf_status_str(st));
        WF_LOG_INFO("sched", NULL, "calibration took %.0f ms", (double)(wf_clock_now_ns() - t0) / 1e6);
        publish(s);
    }
    pthread_mutex_lock(&s->lock);
    s->started = true; /* from now on the thread creates lanes of new groups */
    pthread_mutex_unlock(&s->lock);
    if (pthread_create(&s->thread, NULL, thread_main, s) != 0) {
        pthread_mutex_lock(&s->lock);
        s->started = false;
        pthread_mutex_unlock(&s->lock);
        return WF_ENOMEM;
    }
    return WF_OK;
}

/* ---- submit / cancel / release ---- */

static double predict_locked(wf_sched *s, int n_prompt, double *drain_ms) {
    double share = s->n_live > 1 ? 1.0 / s->n_live : 1.0;
    return wf_cost_model_predict_ttft(
        &s->cost_pub, s->opts.max_batch_tokens,
        (s->load.pending_prefill_tokens + s->inflight_prefill) * share,
        (s->load.pending_prefill_attention + s->inflight_attention) * share,
        (int)ceil(s->load.n_decode * share), s->load.decode_context * share, n_prompt, drain_ms);
}

double wf_sched_predict_ttft_ms(wf_sched *s, int n_prompt, double *drain_ms) {
    pthread_mutex_lock(&s->lock);
    double ms = predict_locked(s, n_prompt, drain_ms);
    pthread_mutex_unlock(&s->lock);
    return ms;
}

static wf_status reject(wf_sched *s, wf_sched_reject *why, wf_status st, const char *fmt, ...)
    WF_PRINTF(4, 5);
static wf_status reject(wf_sched *s, wf_sched_reject *why, wf_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why->message, sizeof why->message, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s->lock);
    s->stats.rejected_total++;
    pthread_mutex_unlock(&s->lock);
    return st;
}

wf_status wf_sched_submit(wf_sched *s, const wf_request_spec *spec, wf_handoff *events,
                          void *user, wf_request **out, wf_sched_reject *why) {
    wf_sched_reject scratch;
    if (!why) why = &scratch;
    memset(why, 0, sizeof *why);
    *out = NULL;
    if (!spec || !events) return reject(s, why, WF_EINVAL, "no request or no event queue");
    if (spec->n_prompt <= 0 || !spec->prompt) return reject(s, why, WF_EINVAL, "empty prompt");
    if (spec->max_tokens < 1)
        return reject(s, why, WF_EINVAL, "max_tokens must be >= 1 (got %d)", spec->max_tokens);
    if (spec->n < 1 || spec->n > s->opts.max_running)
        return reject(s, why, WF_EINVAL, "n must be 1..%d (got %d)", s->opts.max_running,
                      spec->n);
    if (spec->n_prompt >= s->opts.n_ctx)
        return reject(s, why, WF_EINVAL,
                      "prompt is %d tokens but the context holds %d (prompt + at least 1 "
                      "generated token)",
                      spec->n_prompt, s->opts.n_ctx);
    pthread_mutex_lock(&s->lock);
    int bs = s->min_block_size;
    long kv_tokens = s->max_kv_tokens;
    uint64_t seed = s->rng_counter++;
    pthread_mutex_unlock(&s->lock);
    if (bs <= 0) return reject(s, why, WF_EBUSY, "no device group is registered");
    if ((long)spec->n_prompt + 1 > kv_tokens)
        return reject(s, why, WF_EINVAL,
                      "prompt is %d tokens but the largest KV cache holds %ld tokens",
                      spec->n_prompt, kv_tokens);
    double ttft = spec->slo.ttft_ms > 0 ? spec->slo.ttft_ms : s->opts.default_ttft_ms;
    double tpot = spec->slo.tpot_ms > 0 ? spec->slo.tpot_ms : s->opts.default_tpot_ms;

    wf_request *r;
    wf_status st = wf__request_new(spec, s->opts.n_ctx, bs, seed * 0x9e3779b97f4a7c15ull, &r);
    if (st != WF_OK) return reject(s, why, st, "cannot allocate the request");
    if (!reserve_finish_events(s, r)) {
        return_finish_events(s, r);
        wf__request_free(r);
        return reject(s, why, WF_ENOMEM, "out of memory for the request's events");
    }
    r->ttft_ms = ttft;
    r->tpot_ms = tpot;
    r->events = events;
    r->user = user;

    pthread_mutex_lock(&s->lock);
    wf_admission adm = {.cost = s->model_trusted ? &s->cost_pub : NULL,
                        .max_batch_tokens = s->opts.max_batch_tokens,
                        .queue_size = s->opts.queue_size,
                        .factor = s->opts.admission_factor,
                        .explicit_slo = spec->slo.ttft_ms > 0,
                        .load = s->load,
                        .n_groups = s->n_live};
    if (s->wait_n <= s->wait_cap) {
        /* Only the waiting work the policy serves before this request delays its first token
         * (EDF under "slo": an interactive request is not queued behind batch ones). */
        wf_order_key probe = {.priority = spec->priority, .serial = UINT64_MAX,
                              .slo_key = wf_clock_now_ns() + (uint64_t)(ttft * 1e6)};
        wf_core_load_ahead_of(&s->running_load, s->wait_snap, s->wait_n, s->policy, &probe,
                              &adm.load);
    }
    adm.load.pending_prefill_tokens += s->inflight_prefill;
    adm.load.pending_prefill_attention += s->inflight_attention;
    adm.load.n_waiting += s->inflight_reqs;
    if (s->draining || s->stopping) {
        st = WF_EBUSY;
        snprintf(why->message, sizeof why->message, "the server is shutting down");
    } else {
        st = wf_core_admit(&adm, spec->n_prompt, ttft, &why->retry_after_s, NULL, why->message,
                           (int)sizeof why->message);
    }
    if (st != WF_OK) {
        s->stats.rejected_total++;
        pthread_mutex_unlock(&s->lock);
        return_finish_events(s, r);
        atomic_store(&r->refs, 0);
        wf__request_free(r);
        return st;
    }
    s->inflight_reqs++;
    s->inflight_prefill += spec->n_prompt;
    s->inflight_attention += wf_cost_model_attention(0, spec->n_prompt);
    r->times.queued_ns = wf_clock_now_ns();
    snprintf(r->snap.id, sizeof r->snap.id, "%s", r->spec.id);
    r->snap.state = WF_REQUEST_QUEUED;
    r->snap.prompt_tokens = spec->n_prompt;
    r->snap.priority = spec->priority;
    r->snap.n_choices = spec->n;
    r->snap.group = -1;
    r->live_prev = NULL;
    r->live_next = s->live;
    if (s->live) s->live->live_prev = r;
    s->live = r;
    pthread_mutex_unlock(&s->lock);
    if (wf_handoff_push(&s->inbox, &r->link) != WF_OK) {
        /* Only after wf_sched_free began: the inbox is closed. Undo. */
        pthread_mutex_lock(&s->lock);
        s->inflight_reqs--;
        s->inflight_prefill -= spec->n_prompt;
        s->inflight_attention -= wf_cost_model_attention(0, spec->n_prompt);
        pthread_mutex_unlock(&s->lock);
        atomic_store(&r->refs, 1);
        request_unref(s, r);
        snprintf(why->message, sizeof why->message, "the scheduler is closed");
        return WF_EBUSY;
    }
    *out = r;
    return WF_OK;
}

void wf_sched_cancel(wf_sched *s, wf_request *r) {
    if (!r) return;
    atomic_store_explicit(&r->cancel_requested, true, memory_order_release);
    wake(s);
}

void wf_sched_release(wf_sched *s, wf_request *r) {
    if (r) request_unref(s, r);
}

/* ---- drain / free ---- */

void wf_sched_drain(wf_sched *s, int deadline_ms) {
    pthread_mutex_lock(&s->lock);
    s->draining = true;
    s->drained = false;
    s->drain_deadline_ns = wf_clock_now_ns() + (uint64_t)(deadline_ms > 0 ? deadline_ms : 0) * 1000000ull;
    bool started = s->started;
    pthread_mutex_unlock(&s->lock);
    if (!started) {
        /* No thread: run the loop here. */
        while (!nothing_left(s)) loop_once(s);
        return;
    }
    wake(s);
    pthread_mutex_lock(&s->lock);
    while (!s->drained) pthread_cond_wait(&s->idle_cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

void wf_sched_free(wf_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    s->draining = true;
    s->drain_deadline_ns = 0; /* anything left is cancelled now */
    bool started = s->started;
    pthread_mutex_unlock(&s->lock);
    if (started) {
        wake(s);
        pthread_join(s->thread, NULL);
    } else {
        while (loop_once(s)) {
        }
    }
    /* Every completion was taken in; wait until their done() calls have left the inbox. */
    while (atomic_load(&s->dones_running) > 0) sched_yield();
    wf_handoff_close(&s->inbox);
    intake(s);
    wf_lanes_free(&s->lanes, wf_clock_now_ns());
    wf_fair_free(&s->fair);
    /* Events nobody could take (a consumer that stopped reading) go back to the pool. */
    while (s->pend_head) {
        wf_request_event *next = (wf_request_event *)s->pend_head->link.next;
        wf_request_event_free(s, s->pend_head);
        s->pend_head = next;
    }
    /* Handles the caller never released. */
    while (s->live) {
        wf_request *r = s->live;
        s->live = r->live_next;
        wf__request_free(r);
    }
    for (int i = 0; i < s->n_chunks; i++) free(s->ev_chunks[i]);
    free(s->ev_chunks);
    for (int i = 0; i < s->n_groups; i++) {
        for (sched_group *g = s->groups[i], *prev; g; g = prev) {
            prev = g->replaced;
            wf_kv_pool_free(g->pool);
            free(g);
        }
    }
    wf_handoff_free(&s->inbox);
    pthread_cond_destroy(&s->idle_cond);
    pthread_mutex_destroy(&s->ev_lock);
    pthread_mutex_destroy(&s->lock);
    free(s->wait_snap);
    free(s);
}

void wf_sched_get_stats(wf_sched *s, wf_sched_stats *out) {
    pthread_mutex_lock(&s->lock);
    *out = s->stats;
    out->waiting += s->inflight_reqs;
    pthread_mutex_unlock(&s->lock);
}

void wf_sched_foreach_request(wf_sched *s, void (*fn)(const wf_request_snapshot *, void *),
                              void *user) {
    uint64_t now = wf_clock_now_ns();
    pthread_mutex_lock(&s->lock);
    for (wf_request *r = s->live; r; r = r->live_next) {
        wf_request_snapshot snap = r->snap;
        snap.age_ms = (double)(now - r->times.queued_ns) / 1e6;
        fn(&snap, user);
    }
    pthread_mutex_unlock(&s->lock);
}
