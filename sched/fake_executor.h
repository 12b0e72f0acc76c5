/* A deterministic fake executor (model): next token = f(the sequence's tokens as read back
 * from the KV blocks of the task's block table). It writes each input token into its KV slot
 * (layer 0, K[0] = token, V[0] = position), so wrong block tables, a missed copy-on-write or
 * a bad prefix-cache hit change the output or are reported as a task failure. For tests,
 * benchmarks and examples; the simulator needs none.
 *
 *     wf_fake_executor fx;
 *     wf_fake_executor_init(&fx, &store, 1000, 7);     // vocab 1000, token 7 ends generation
 *     wf_executor ex = wf_fake_executor_get(&fx);
 *     wf_sched_new(&opts, &store, ex, &s);
 *
 * The store must use WF_KV_DTYPE_F32. A store split by layer kind (kv/kv_store.h) is modelled
 * too: each token is also written through the task's swa_block_table into the first local
 * layer, and a sampling task checks the window's positions there (a released or wrong local
 * block is a scheduler bug, WF_EFORMAT). By default the batch runs inline, inside dispatch (done
 * is called before dispatch returns). wf_fake_executor_start_async gives it a thread of its
 * own (proto/exec_thread.h) and an optional delay per batch, so tests see real concurrency:
 * dispatch returns at once and done comes from that thread.
 *
 *     wf_fake_executor_start_async(&fx, 2000);        // each batch takes >= 2 ms
 *     ...
 *     wf_fake_executor_die(&fx);    // the "process" died: every later batch fails, WF_ECLOSED
 *     wf_fake_executor_stop(&fx);   // after the scheduler is freed: joins the thread
 *
 * The counters and hooks are touched by whichever thread runs batches; read them after the
 * scheduler drained. die() is thread-safe. */
#ifndef WF_SCHED_FAKE_EXECUTOR_H
#define WF_SCHED_FAKE_EXECUTOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_store.h"
#include "proto/task.h"

typedef struct wf_fake_executor {
    wf_kv_store *store;
    int vocab;
    int32_t eog_token;        /* -1: never */
    bool verify_kv;           /* compare the KV read back with sample->history (default) */
    int fail_batch;           /* > 0: the fail_batch-th batch (1-based) fails as a whole */
    uint64_t batches, tasks, tokens, samples;
    int max_batch_tokens_seen;
    /* Optional hook after each batch ran (tests inspect the plan). */
    void (*on_batch)(void *user, const wf_task_batch *batch);
    void *user;
    /* Async mode (wf_fake_executor_start_async). */
    struct wf_exec_thread *thread;
    int delay_us;
    atomic_bool dead;
} wf_fake_executor;

void wf_fake_executor_init(wf_fake_executor *fx, wf_kv_store *store, int vocab,
                           int32_t eog_token);
wf_executor wf_fake_executor_get(wf_fake_executor *fx);
/* WF_OK, WF_EINVAL (already async), WF_ENOMEM, WF_EIO. */
wf_status wf_fake_executor_start_async(wf_fake_executor *fx, int delay_us);
/* Simulates the death of the executor's process: batches not yet finished and every later one
 * fail as a whole with WF_ECLOSED (the scheduler then takes the group down). */
void wf_fake_executor_die(wf_fake_executor *fx);
/* Joins the async thread (after the last batch completed); no-op when inline. */
void wf_fake_executor_stop(wf_fake_executor *fx);
/* The token the fake model produces after tokens[0..n) for a sampler in state *rng (advanced
 * when temperature > 0). Exposed so tests can compute expected streams. */
int32_t wf_fake_next_token(const wf_fake_executor *fx, const int32_t *tokens, int n,
                           const wf_sampling_params *params, uint64_t *rng);

#endif
