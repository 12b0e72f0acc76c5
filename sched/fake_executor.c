/* Deterministic fake model over the real paged KV layout: see fake_executor.h. */
#include "proto/base/clock.h"
#include "sched/fake_executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/exec_thread.h"

void wf_fake_executor_init(wf_fake_executor *fx, wf_kv_store *store, int vocab,
                           int32_t eog_token) {
    memset(fx, 0, sizeof *fx);
    fx->store = store;
    fx->vocab = vocab > 1 ? vocab : 2;
    fx->eog_token = eog_token;
    fx->verify_kv = true;
    atomic_init(&fx->dead, false);
}

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

int32_t wf_fake_next_token(const wf_fake_executor *fx, const int32_t *tokens, int n,
                           const wf_sampling_params *params, uint64_t *rng) {
    uint64_t h = 0x12345678ull + (uint64_t)n;
    for (int i = 0; i < n; i++) h = mix(h ^ (uint64_t)(uint32_t)tokens[i]);
    if (params && params->temperature > 0 && rng) {
        *rng = mix(*rng + 0x9e3779b97f4a7c15ull);
        h = mix(h ^ *rng);
    }
    return (int32_t)(h % (uint64_t)fx->vocab);
}

/* Layer 0 stands for the model; with a split store, `layer` (its first local layer) too. */
static float *slot_k_at(wf_kv_store *s, int layer, int block, int slot) {
    return (float *)wf_kv_store_k(s, layer, block) + (size_t)slot * s->row_elems;
}
static float *slot_v_at(wf_kv_store *s, int layer, int block, int slot) {
    return (float *)wf_kv_store_v(s, layer, block) + (size_t)slot * s->row_elems;
}
static float *slot_k(wf_kv_store *s, int block, int slot) { return slot_k_at(s, 0, block, slot); }
static float *slot_v(wf_kv_store *s, int block, int slot) { return slot_v_at(s, 0, block, slot); }

/* The first sliding-window layer of a split store, or -1. Layer 0 must be global. */
static int local_layer(const wf_kv_store *s) {
    if (!s->geometry.swa_layers || wf_kv_store_layer_is_swa(s, 0)) return -1;
    return __builtin_ctzll(s->geometry.swa_layers);
}

static wf_status run_task(wf_fake_executor *fx, wf_task *t, int32_t *scratch, int cap) {
    wf_kv_store *s = fx->store;
    int bs = s->geometry.block_size;
    int end = t->llm.pos + t->llm.n_tokens;
    if (t->llm.n_tokens < 1 || t->llm.pos < 0 || (end + bs - 1) / bs > t->llm.kv.n_blocks || end > cap)
        return WF_EINVAL;
    int ll = local_layer(s);
    const int32_t *lt = t->llm.kv.swa_block_table;
    if (s->geometry.swa_layers && (ll < 0 || !lt)) return WF_EINVAL;
    for (int i = 0; i < t->llm.n_tokens; i++) {
        int p = t->llm.pos + i, b = t->llm.kv.block_table[p / bs];
        if (b < 0 || b >= s->n_blocks) return WF_EINVAL;
        *slot_k(s, b, p % bs) = (float)t->llm.tokens[i];
        *slot_v(s, b, p % bs) = (float)p;
        if (ll >= 0) {
            int lb = lt[p / bs];
            if (lb < 0 || lb >= s->n_swa_blocks) return WF_EINVAL;
            *slot_k_at(s, ll, lb, p % bs) = (float)t->llm.tokens[i];
            *slot_v_at(s, ll, lb, p % bs) = (float)p;
        }
    }
    if (t->llm.n_samples == 0) return WF_OK;
    /* The local layer's window (positions > end - 1 - window): present and right. */
    for (int p = end - s->geometry.swa_window > 0 ? end - s->geometry.swa_window : 0;
         ll >= 0 && p < end; p++) {
        int lb = lt[p / bs], b = t->llm.kv.block_table[p / bs];
        if (lb < 0 || lb >= s->n_swa_blocks || *slot_v_at(s, ll, lb, p % bs) != (float)p ||
            *slot_k_at(s, ll, lb, p % bs) != *slot_k(s, b, p % bs))
            return WF_EFORMAT;
    }
    /* "Attention": read the whole sequence back through the block table. */
    for (int p = 0; p < end; p++) {
        int b = t->llm.kv.block_table[p / bs];
        if (*slot_v(s, b, p % bs) != (float)p) return WF_EFORMAT;
        scratch[p] = (int32_t)*slot_k(s, b, p % bs);
    }
    for (int k = 0; k < t->llm.n_samples; k++) {
        wf_task_sample *sm = &t->llm.samples[k];
        if (fx->verify_kv &&
            (sm->n_history != end ||
             memcmp(sm->history, scratch, (size_t)end * sizeof *scratch) != 0))
            return WF_EFORMAT; /* the KV does not hold this sequence: a scheduler bug */
        int32_t tok = wf_fake_next_token(fx, scratch, end, sm->params, &sm->rng_state);
        if (sm->suppress_eos && tok == fx->eog_token) tok = (tok + 1) % fx->vocab;
        memset(&sm->out, 0, sizeof sm->out);
        sm->out.token = tok;
        sm->out.logprob = -1.0f;
        sm->out_is_eog = tok == fx->eog_token;
        fx->samples++;
    }
    return WF_OK;
}

static wf_status fake_run_batch(void *ctx, wf_task_batch *batch) {
    wf_fake_executor *fx = ctx;
    fx->batches++;
    if (fx->fail_batch > 0 && fx->batches == (uint64_t)fx->fail_batch) return WF_EIO;
    int cap = 0;
    for (int i = 0; i < batch->n_tasks; i++)
        if (batch->tasks[i].llm.pos + batch->tasks[i].llm.n_tokens > cap)
            cap = batch->tasks[i].llm.pos + batch->tasks[i].llm.n_tokens;
    int32_t *scratch = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *scratch);
    if (!scratch) return WF_ENOMEM;
    int tokens = 0;
    for (int i = 0; i < batch->n_tasks; i++) {
        wf_task *t = &batch->tasks[i];
        t->t_begin_ns = wf_clock_now_ns();
        t->status = run_task(fx, t, scratch, cap);
        t->t_end_ns = wf_clock_now_ns();
        tokens += t->llm.n_tokens;
        fx->tasks++;
    }
    free(scratch);
    fx->tokens += (uint64_t)tokens;
    if (tokens > fx->max_batch_tokens_seen) fx->max_batch_tokens_seen = tokens;
    if (fx->on_batch) fx->on_batch(fx->user, batch);
    return WF_OK;
}

static void sleep_us(int us) {
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static const char *const died_msg = "fake executor: the executor process died";

/* One batch, on whichever thread runs it; the message goes to done. */
static wf_status fake_run(void *ctx, wf_task_batch *batch, char *msg, size_t cap) {
    wf_fake_executor *fx = ctx;
    if (fx->delay_us > 0) sleep_us(fx->delay_us);
    if (atomic_load(&fx->dead)) {
        snprintf(msg, cap, "%s", died_msg);
        return WF_ECLOSED;
    }
    wf_status st = fake_run_batch(ctx, batch);
    if (st != WF_OK) snprintf(msg, cap, "fake executor: injected failure");
    return st;
}

static wf_status fake_dispatch(void *ctx, wf_task_batch *batch, wf_executor_done_fn done,
                               void *user) {
    wf_fake_executor *fx = ctx;
    if (fx->thread) return wf_exec_thread_dispatch(fx->thread, batch, done, user);
    /* Inline: a synchronous executor behind the async seam. */
    char msg[96] = "";
    wf_status st = fake_run(ctx, batch, msg, sizeof msg);
    done(user, batch, st, msg[0] ? msg : NULL);
    return WF_OK;
}

static void fake_cancel(void *ctx, wf_task_batch *batch) {
    wf_fake_executor *fx = ctx;
    if (fx->thread) wf_exec_thread_cancel(fx->thread, batch);
}

static void fake_synchronize(void *ctx) {
    wf_fake_executor *fx = ctx;
    if (fx->thread) wf_exec_thread_synchronize(fx->thread);
}

static const wf_executor_ops fake_ops = {.name = "fake",
                                         .dispatch = fake_dispatch,
                                         .cancel = fake_cancel,
                                         .synchronize = fake_synchronize,
                                         .run = fake_run};

wf_executor wf_fake_executor_get(wf_fake_executor *fx) {
    return (wf_executor){.ops = &fake_ops, .ctx = fx};
}

wf_status wf_fake_executor_start_async(wf_fake_executor *fx, int delay_us) {
    if (fx->thread) return WF_EINVAL;
    fx->delay_us = delay_us > 0 ? delay_us : 0;
    return wf_exec_thread_new("fake", 2, fake_run, fx, &fx->thread);
}

void wf_fake_executor_die(wf_fake_executor *fx) { atomic_store(&fx->dead, true); }

void wf_fake_executor_stop(wf_fake_executor *fx) {
    wf_exec_thread_free(fx->thread);
    fx->thread = NULL;
}
