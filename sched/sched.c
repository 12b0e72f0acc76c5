/* The scheduler thread around the planning core: intake from the submission handoff,
 * admission control, plan -> executor -> complete, event delivery from a free list, stats,
 * calibration of the cost model, drain and shutdown. */
#include "proto/base/clock.h"
#include "sched/sched.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/base/log.h"
#include "sched/core.h"
#include "sched/cost_model.h"

#define EVENT_CHUNK 512
/* Start-up calibration stops measuring after this long (a batch in flight completes). */
#define CALIBRATION_NS 3000000000ull

struct wf_sched {
    wf_sched_options opts;
    wf_kv_store *kv;
    wf_executor exec;
    wf_kv_pool *pool;
    wf_core core;
    wf_cost_model cost;          /* thread-owned; coefficients copied out under lock */
    pthread_t thread;
    bool started;

    wf_handoff inbox;            /* submissions + wake-ups; bounded by admission upstream */
    wf_handoff_item wake_item;
    atomic_bool wake_pending;

    pthread_mutex_t lock;        /* everything below up to the event pool */
    pthread_cond_t idle_cond;
    bool draining, stopping, drained;
    uint64_t drain_deadline_ns;
    int inflight_reqs;           /* accepted but not yet taken in by the thread */
    double inflight_prefill, inflight_attention;
    wf_core_load load;
    wf_cost_model cost_pub;
    bool model_trusted;          /* given/loaded, calibrated from enough batches, or refitted
                                  * online from enough iterations: admission may use it */
    wf_sched_stats stats;
    wf_request *live;            /* every request not yet freed, for /admin */
    uint64_t rng_counter;

    pthread_mutex_t ev_lock;
    wf_request_event *ev_free;
    void **ev_chunks;
    int n_chunks, cap_chunks;

    /* Thread-owned: a private stock of free events refilled from ev_free in one lock, so the
     * per-token path takes no lock to get an event. */
    wf_request_event *ev_local;
    /* Thread-owned: events whose queue was full, delivered in order later. */
    wf_request_event *pend_head, *pend_tail;
    double iter_ms_avg, overhead_ms_avg, overhead_frac, plan_ms_avg, complete_ms_avg;
};

void wf_sched_options_init(wf_sched_options *o) {
    memset(o, 0, sizeof *o);
    o->policy = "slo";
    o->queue_size = 256;
    o->max_batch_tokens = 512;
    o->max_running = 64;
    o->n_ctx = 2048;
    o->default_ttft_ms = 2000;
    o->default_tpot_ms = 200;
    o->admission_factor = 2.0;
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

static wf_request_event *event_get(wf_sched *s) {
    if (!s->ev_local) {
        pthread_mutex_lock(&s->ev_lock);
        if (!s->ev_free && !event_chunk_add(s)) {
            pthread_mutex_unlock(&s->ev_lock);
            /* Losing an event would leave a client hanging forever; with no memory left for
             * a few hundred bytes the process cannot serve anyway. */
            WF_LOG_ERROR("sched", NULL, "out of memory for events");
            abort();
        }
        s->ev_local = s->ev_free;
        s->ev_free = NULL;
        pthread_mutex_unlock(&s->ev_lock);
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
    wf__request_free(r);
}

/* ---- core callbacks (scheduler thread) ---- */

static void cb_token(void *user, wf_request *r, int choice, const wf_generated_token *tok,
                     uint64_t now) {
    wf_sched *s = user;
    wf_request_event *ev = event_get(s);
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
    wf_request_event *ev = event_get(s);
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

/* ---- construction ---- */

static uint64_t group_id(const wf_group *g) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < g->n_ranks; i++) {
        h ^= (uint64_t)(uint32_t)g->ranks[i];
        h *= 0x100000001b3ull;
    }
    return h;
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
    if (!kv || kv->n_blocks <= 0 || !executor.ops || !executor.ops->dispatch ||
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
    s->kv = kv;
    s->exec = executor;
    if (pthread_mutex_init(&s->lock, NULL) != 0) goto fail_lock;
    if (pthread_mutex_init(&s->ev_lock, NULL) != 0) goto fail_evlock;
    if (pthread_cond_init(&s->idle_cond, NULL) != 0) goto fail_cond;
    if (wf_handoff_init(&s->inbox, 0, NULL, NULL) != WF_OK) goto fail_inbox;
    if ((st = wf_kv_pool_new(kv->n_blocks, kv->geometry.block_size, opts->prefix_cache,
                             &s->pool)) != WF_OK)
        goto fail_pool;
    wf_core_config cfg = {
        .policy = pol,
        .max_batch_tokens = opts->max_batch_tokens,
        .max_running = opts->max_running,
        .n_ctx = opts->n_ctx,
        .pool = s->pool,
        .store = kv,
        .group = {.n_ranks = 1, .ranks = {opts->group_rank}},
        .cost = &s->cost,
        .cb = {cb_token, cb_finished, cb_retired, cb_task, s},
    };
    cfg.group.id = group_id(&cfg.group);
    if ((st = wf_core_init(&s->core, &cfg)) != WF_OK) goto fail_core;
    s->ev_free = NULL;
    if (!event_chunk_add(s)) {
        st = WF_ENOMEM;
        goto fail_events;
    }
    /* A neutral prior until the model is calibrated or loaded (wf_sched_start). */
    double prior[4] = {5.0, 0.5, 2.0, 0.001};
    wf_cost_model_init(&s->cost, opts->cost_given ? opts->cost : prior);
    s->cost_pub = s->cost;
    s->model_trusted = opts->cost_given;
    s->rng_counter = opts->seed;
    atomic_init(&s->wake_pending, false);
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
    *out = s;
    return WF_OK;
fail_events:
    for (int i = 0; i < s->n_chunks; i++) free(s->ev_chunks[i]);
    free(s->ev_chunks);
    wf_core_free(&s->core, 0);
fail_core:
    wf_kv_pool_free(s->pool);
fail_pool:
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
static double timed_batch(wf_sched *s, wf_task *tasks, int n) {
    wf_task_batch b = {.tasks = tasks, .n_tasks = n, .group = s->core.batch.group};
    uint64_t t0 = wf_clock_now_ns();
    wf_status st = wf_executor_run(s->exec, &b, NULL, 0);
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
static wf_status cal_seq(wf_sched *s, const wf_kv_seq *base, int ctx, int n_more, wf_kv_seq *seq) {
    int bs = s->kv->geometry.block_size;
    int shared = ctx / bs;
    if (shared > base->n_blocks || shared > seq->max_blocks) return WF_ERANGE;
    for (int i = 0; i < shared; i++) {
        seq->blocks[i] = base->blocks[i];
        wf_kv_pool_ref(s->pool, base->blocks[i]);
    }
    seq->n_blocks = shared;
    seq->n_tokens = ctx;
    seq->n_hashed = 0;
    seq->last_hash = 0;
    return wf_kv_seq_reserve(s->pool, seq, ctx + n_more, s->kv);
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
    int bs = s->kv->geometry.block_size;
    int budget = s->opts.max_batch_tokens;
    int maxk = s->opts.max_running < CAL_MAXK ? s->opts.max_running : CAL_MAXK;
    /* The long context: up to 1024 positions, half the context window, a quarter of the
     * cache; a multiple of the block size. */
    int lng = CAL_MAX_LONG;
    if (lng > s->opts.n_ctx / 2) lng = s->opts.n_ctx / 2;
    if (lng > s->kv->n_blocks * bs / 4) lng = s->kv->n_blocks * bs / 4;
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
    if (lng + 1 >= s->opts.n_ctx || wf_kv_seq_reserve(s->pool, &base, lng, s->kv) != WF_OK) {
        st = WF_EFULL;
        goto done;
    }
    /* The stand-in prompt: zeros are valid keys and values in F16 and F32. */
    for (int b = 0; b < base.n_blocks; b++)
        for (int l = 0; l < s->kv->geometry.n_layers; l++) {
            memset(wf_kv_store_k(s->kv, l, base.blocks[b]), 0, s->kv->block_bytes);
            memset(wf_kv_store_v(s->kv, l, base.blocks[b]), 0, s->kv->block_bytes);
        }
    base.n_tokens = lng;
    for (int pi = 0; pi < n_plan && ns < CAL_MAXS; pi++) {
        const cal_batch *cb = &plan[pi];
        if (wf_clock_now_ns() - t_start > CALIBRATION_NS) break;
        if (cb->n_dec > maxk || cb->n_dec + (cb->pre_len > 0) > s->opts.max_running ||
            cb->n_dec + cb->pre_len > budget || cb->dec_ctx + 1 >= s->opts.n_ctx ||
            cb->pre_start + cb->pre_len >= s->opts.n_ctx ||
            cb->n_dec + (cb->pre_len + bs - 1) / bs + 1 > wf_kv_pool_available(s->pool))
            continue;
        int n = 0;
        double attn = 0;
        for (int i = 0; i < cb->n_dec; i++, n++) {
            if ((st = cal_seq(s, &base, cb->dec_ctx, 1, &seqs[n])) != WF_OK) goto done;
            samp[n] = (wf_task_sample){.params = &greedy, .rng_state = 1, .history = tok,
                                       .n_history = cb->dec_ctx + 1, .n_prompt = cb->dec_ctx,
                                       .suppress_eos = true};
            tasks[n] = (wf_task){.id = (uint64_t)n, .kind = WF_TASK_DECODE,
                                 .request_seq = UINT64_MAX - (uint64_t)n,
                                 .llm.tokens = tok + cb->dec_ctx, .llm.n_tokens = 1, .llm.pos = cb->dec_ctx,
                                 .llm.kv.block_table = seqs[n].blocks, .llm.kv.n_blocks = seqs[n].n_blocks,
                                 .llm.samples = &samp[n], .llm.n_samples = 1};
            attn += wf_cost_model_attention(cb->dec_ctx, 1);
        }
        if (cb->pre_len > 0) {
            int end = cb->pre_start + cb->pre_len;
            if ((st = cal_seq(s, &base, cb->pre_start, cb->pre_len, &seqs[n])) != WF_OK) goto done;
            samp[n] = (wf_task_sample){.params = &greedy, .rng_state = 1, .history = tok,
                                       .n_history = end, .n_prompt = end, .suppress_eos = true};
            tasks[n] = (wf_task){.id = (uint64_t)n, .kind = WF_TASK_PREFILL,
                                 .request_seq = UINT64_MAX - (uint64_t)n,
                                 .llm.tokens = tok + cb->pre_start, .llm.n_tokens = cb->pre_len,
                                 .llm.pos = cb->pre_start, .llm.kv.block_table = seqs[n].blocks,
                                 .llm.kv.n_blocks = seqs[n].n_blocks, .llm.samples = &samp[n],
                                 .llm.n_samples = 1};
            attn += wf_cost_model_attention(cb->pre_start, cb->pre_len);
            n++;
        }
        double ms = timed_batch(s, tasks, n);
        for (int i = 0; i < n; i++) wf_kv_seq_release(s->pool, &seqs[i]);
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
        if (seqs[i].blocks) wf_kv_seq_release(s->pool, &seqs[i]);
        wf_kv_seq_free(&seqs[i]);
    }
    if (base.blocks) wf_kv_seq_release(s->pool, &base);
    wf_kv_seq_free(&base);
    free(tok);
    return st;
}

/* ---- the loop ---- */

static void publish(wf_sched *s) {
    wf_core *c = &s->core;
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(s->pool, &u);
    wf_core_load load;
    wf_core_get_load(c, &load);
    pthread_mutex_lock(&s->lock);
    s->load = load;
    s->cost_pub = s->cost;
    if (s->cost.n_obs >= 32) s->model_trusted = true;
    for (int pass = 0; pass < 2; pass++) {
        wf_request **arr = pass ? c->waiting : c->running;
        int n = pass ? c->n_waiting : c->n_running;
        for (int i = 0; i < n; i++) {
            wf_request *r = arr[i];
            int g = 0;
            for (int j = 0; j < r->n_choices; j++) g += r->choices[j].n_generated;
            r->snap.state = r->state;
            r->snap.generated_tokens = g;
            r->snap.cached_prompt_tokens = r->cached_prompt_tokens;
            r->snap.preemptions = r->n_preemptions;
            r->snap.prefill_tasks = r->tasks_by_kind[WF_TASK_PREFILL];
            r->snap.decode_tasks = r->tasks_by_kind[WF_TASK_DECODE];
        }
    }
    wf_sched_stats *st = &s->stats;
    st->running = c->n_running;
    st->waiting = c->n_waiting;
    st->preempted_total = (int)c->preempted_total;
    st->kv_blocks_total = u.n_blocks;
    st->kv_blocks_used = u.used;
    st->kv_blocks_cached = u.cached;
    st->kv_usage = u.n_blocks ? (double)u.used / u.n_blocks : 0;
    st->prefix_queries = u.prefix_queries;
    st->prefix_hits = u.prefix_hits;
    st->cow_copies = u.cow_copies;
    st->iterations = c->iteration;
    st->iteration_ms_avg = s->iter_ms_avg;
    st->sched_overhead_ms_avg = s->overhead_ms_avg;
    st->overhead_fraction = s->overhead_frac;
    st->plan_ms_avg = s->plan_ms_avg;
    st->complete_ms_avg = s->complete_ms_avg;
    st->finished_total = c->finished_total;
    st->failed_total = c->failed_total;
    st->cancelled_total = c->cancelled_total;
    memcpy(st->cost_model, s->cost.coef, sizeof st->cost_model);
    pthread_mutex_unlock(&s->lock);
}

static void intake(wf_sched *s) {
    wf_handoff_item *it = wf_handoff_take_all(&s->inbox);
    while (it) {
        wf_handoff_item *next = it->next;
        if (it == &s->wake_item) {
            atomic_store(&s->wake_pending, false);
        } else {
            wf_request *r = (wf_request *)it;
            pthread_mutex_lock(&s->lock);
            s->inflight_reqs--;
            s->inflight_prefill -= r->spec.n_prompt;
            s->inflight_attention -= wf_cost_model_attention(0, r->spec.n_prompt);
            pthread_mutex_unlock(&s->lock);
            uint64_t queued = r->times.queued_ns;
            if (wf_core_add(&s->core, r, queued) != WF_OK) {
                /* Not in the core: end it here so the client still gets its FINISHED. */
                for (int j = 0; j < r->n_choices; j++)
                    cb_finished(s, r, j, WF_FINISH_ERROR, WF_ENOMEM, "out of memory",
                                wf_clock_now_ns());
                r->state = WF_REQUEST_FAILED;
                cb_retired(s, r);
            }
        }
        it = next;
    }
}

static void wake(wf_sched *s) {
    if (!atomic_exchange(&s->wake_pending, true)) wf_handoff_push(&s->inbox, &s->wake_item);
}

static double ewma(double avg, double x) { return avg == 0 ? x : 0.9 * avg + 0.1 * x; }

/* One iteration. Returns false when there was nothing to run. */
static bool step(wf_sched *s) {
    intake(s);
    pthread_mutex_lock(&s->lock);
    bool expired = s->draining && wf_clock_now_ns() >= s->drain_deadline_ns;
    pthread_mutex_unlock(&s->lock);
    if (expired && wf_core_n_requests(&s->core) > 0)
        wf_core_abort_all(&s->core, WF_FINISH_CANCELLED, WF_ECANCELLED,
                          "server shutting down", wf_clock_now_ns());
    flush_pending(s);
    if (wf_core_n_requests(&s->core) == 0) {
        publish(s);
        return false;
    }
    /* The SLO policy sizes batches with the model only once it is trusted: a noisy start-up
     * calibration must not serialise the server. */
    s->core.cfg.cost = s->model_trusted ? &s->cost : NULL;
    uint64_t t0 = wf_clock_now_ns();
    wf_task_batch *b = wf_core_plan(&s->core, t0);
    uint64_t t1 = wf_clock_now_ns();
    if (b->n_tasks == 0) {
        publish(s);
        return false;
    }
    char msg[128] = "", why[96] = "";
    wf_status st = wf_executor_run(s->exec, b, why, sizeof why);
    uint64_t t2 = wf_clock_now_ns();
    if (st != WF_OK)
        snprintf(msg, sizeof msg, "executor %s failed: %s%s%s", s->exec.ops->name ? s->exec.ops->name : "",
                 wf_status_str(st), why[0] ? ": " : "", why);
    wf_core_complete(&s->core, st, st != WF_OK ? msg : NULL, t2);
    uint64_t t3 = wf_clock_now_ns();
    double run_ms = (double)(t2 - t1) / 1e6, plan_ms = (double)((t1 - t0) + (t3 - t2)) / 1e6;
    if (st == WF_OK && s->opts.online_refit)
        wf_cost_model_observe(&s->cost, s->core.last_prefill_tokens, s->core.last_decode_tokens,
                              s->core.last_context, run_ms);
    s->iter_ms_avg = ewma(s->iter_ms_avg, run_ms + plan_ms);
    s->overhead_ms_avg = ewma(s->overhead_ms_avg, plan_ms);
    s->overhead_frac = ewma(s->overhead_frac, plan_ms / (plan_ms + run_ms + 1e-9));
    s->plan_ms_avg = ewma(s->plan_ms_avg, (double)(t1 - t0) / 1e6);
    s->complete_ms_avg = ewma(s->complete_ms_avg, (double)(t3 - t2) / 1e6);
    flush_pending(s);
    publish(s);
    return true;
}

static bool nothing_left(wf_sched *s) {
    pthread_mutex_lock(&s->lock);
    bool none = s->inflight_reqs == 0;
    pthread_mutex_unlock(&s->lock);
    return none && wf_core_n_requests(&s->core) == 0 && !s->pend_head;
}

static void *thread_main(void *arg) {
    wf_sched *s = arg;
    for (;;) {
        bool ran = step(s);
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
            if (stopping) break;
            wf_handoff_wait(&s->inbox, draining ? 10 : -1);
        } else if (!ran) {
            /* Work exists but nothing could run (a full event queue, blocks freed next
             * iteration): sleep briefly instead of spinning. */
            wf_handoff_wait(&s->inbox, 1);
        }
    }
    return NULL;
}

wf_status wf_sched_start(wf_sched *s) {
    if (s->started) return WF_EINVAL;
    if (!s->opts.cost_given) {
        uint64_t t0 = wf_clock_now_ns();
        wf_status st = calibrate(s);
        if (st != WF_OK)
            WF_LOG_WARN("sched", NULL, "cost model calibration failed (%s): using the prior",
                        wf_status_str(st));
        WF_LOG_INFO("sched", NULL, "calibration took %.0f ms", (double)(wf_clock_now_ns() - t0) / 1e6);
        publish(s);
    }
    if (pthread_create(&s->thread, NULL, thread_main, s) != 0) return WF_ENOMEM;
    s->started = true;
    return WF_OK;
}

/* ---- submit / cancel / release ---- */

static double predict_locked(wf_sched *s, int n_prompt, double *drain_ms) {
    return wf_cost_model_predict_ttft(&s->cost_pub, s->opts.max_batch_tokens,
                                      s->load.pending_prefill_tokens + s->inflight_prefill,
                                      s->load.pending_prefill_attention + s->inflight_attention,
                                      s->load.n_decode, s->load.decode_context, n_prompt,
                                      drain_ms);
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
    int bs = s->kv->geometry.block_size;
    int need = (spec->n_prompt + 1 + bs - 1) / bs;
    if (need > s->kv->n_blocks)
        return reject(s, why, WF_EINVAL,
                      "prompt is %d tokens (%d KV blocks) but the KV cache holds %d blocks "
                      "(%d tokens)",
                      spec->n_prompt, need, s->kv->n_blocks, s->kv->n_blocks * bs);
    double ttft = spec->slo.ttft_ms > 0 ? spec->slo.ttft_ms : s->opts.default_ttft_ms;
    double tpot = spec->slo.tpot_ms > 0 ? spec->slo.tpot_ms : s->opts.default_tpot_ms;

    pthread_mutex_lock(&s->lock);
    uint64_t seed = s->rng_counter++;
    pthread_mutex_unlock(&s->lock);
    wf_request *r;
    wf_status st = wf__request_new(spec, s->opts.n_ctx, bs, seed * 0x9e3779b97f4a7c15ull, &r);
    if (st != WF_OK) return reject(s, why, st, "cannot allocate the request");
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
                        .load = s->load};
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
    pthread_mutex_unlock(&s->lock);
    if (!s->started) {
        /* No thread: run the loop here. */
        while (!nothing_left(s)) step(s);
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
    pthread_mutex_unlock(&s->lock);
    if (s->started) {
        wake(s);
        pthread_join(s->thread, NULL);
    } else {
        while (!nothing_left(s)) step(s);
    }
    wf_handoff_close(&s->inbox);
    intake(s);
    wf_core_free(&s->core, wf_clock_now_ns());
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
    wf_kv_pool_free(s->pool);
    wf_handoff_free(&s->inbox);
    pthread_cond_destroy(&s->idle_cond);
    pthread_mutex_destroy(&s->ev_lock);
    pthread_mutex_destroy(&s->lock);
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
