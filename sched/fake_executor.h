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
 * The store must use WF_KV_DTYPE_F32. Not thread-safe: called from the scheduler thread. */
#ifndef WF_SCHED_FAKE_EXECUTOR_H
#define WF_SCHED_FAKE_EXECUTOR_H

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
} wf_fake_executor;

void wf_fake_executor_init(wf_fake_executor *fx, wf_kv_store *store, int vocab,
                           int32_t eog_token);
wf_executor wf_fake_executor_get(wf_fake_executor *fx);
/* The token the fake model produces after tokens[0..n) for a sampler in state *rng (advanced
 * when temperature > 0). Exposed so tests can compute expected streams. */
int32_t wf_fake_next_token(const wf_fake_executor *fx, const int32_t *tokens, int n,
                           const wf_sampling_params *params, uint64_t *rng);

#endif
