/* Trajectory tasks and the executor seam. The scheduler compiles requests into tasks and hands
 * a batch of them to an executor (a worker owning a device group); the executor fills each
 * task's outputs. engine/ implements the executor for real models; tests use a fake one; the
 * simulator uses none (it predicts step times with the cost model).
 *
 * One iteration:
 *     wf_task_batch batch = {.tasks = tasks, .n_tasks = n, .group = {.n_ranks = 1}};
 *     wf_status st = executor.ops->run_batch(executor.ctx, &batch);
 *     // st != WF_OK: the whole batch failed (fail its requests); otherwise read each task's
 *     // status and samples[].out.
 *
 * Pointers in a task stay valid for the duration of run_batch only. */
#ifndef WF_PROTO_TASK_H
#define WF_PROTO_TASK_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/request.h"
#include "proto/base/status.h"

typedef enum wf_task_kind {
    WF_TASK_PREFILL = 0,  /* a chunk of prompt tokens; samples only if it is the last chunk */
    WF_TASK_DECODE,       /* one new token per sequence */
    WF_TASK_ENCODE,       /* DiT: text/conditioning encode */
    WF_TASK_DENOISE,      /* DiT: denoising steps a..b */
    WF_TASK_DECODE_IMAGE, /* DiT: latents to pixels */
    WF_TASK_FINISH,
} wf_task_kind;

const char *wf_task_kind_str(wf_task_kind kind);

#define WF_MAX_GROUP_RANKS 64

/* A device group: an ordered rank list over the world communicator; id hashed from the list. */
typedef struct wf_group {
    uint64_t id;
    int n_ranks;
    int ranks[WF_MAX_GROUP_RANKS];
} wf_group;

/* One token to draw from the logits of a task's last position. A final prefill chunk of a
 * request with n > 1 carries n samples (one per choice) drawn from the same logits. */
typedef struct wf_task_sample {
    const wf_sampling_params *params;
    uint64_t rng_state;        /* in: the choice's generator state; out: advanced */
    const int32_t *history;    /* prompt followed by tokens generated so far (penalties) */
    int n_history;
    int n_prompt;              /* history[0..n_prompt) is the prompt */
    bool suppress_eos;         /* min_tokens not reached, or ignore_eos */
    /* outputs */
    wf_generated_token out;
    bool out_is_eog;           /* the token ends generation (EOS/EOT of the model) */
} wf_task_sample;

typedef struct wf_task {
    uint64_t id;
    wf_task_kind kind;
    uint64_t request_seq;      /* the sequence (request choice) this task advances */
    /* inputs */
    const int32_t *tokens;     /* new tokens: a prompt chunk, or the last sampled token */
    int n_tokens;
    int pos;                   /* position of tokens[0] in the sequence */
    const int32_t *block_table;/* KV blocks covering positions [0, pos + n_tokens) */
    int n_blocks;
    wf_task_sample *samples;   /* NULL / 0: no token is drawn (a non-final prefill chunk) */
    int n_samples;
    /* outputs */
    wf_status status;          /* WF_OK, or why this task (only) failed */
    /* event timestamps (CLOCK_MONOTONIC ns), filled by the executor */
    uint64_t t_begin_ns, t_end_ns;
} wf_task;

typedef struct wf_task_batch {
    wf_task *tasks;
    int n_tasks;
    wf_group group;
    uint64_t iteration;
} wf_task_batch;

typedef struct wf_executor_ops {
    const char *name;
    /* Runs every task of the batch (one forward pass where possible). Returns WF_OK if the batch
     * ran (per-task failures in task->status), or an error if nothing ran. Called from the
     * scheduler's thread; the executor may use its own threads inside. */
    wf_status (*run_batch)(void *ctx, wf_task_batch *batch);
} wf_executor_ops;

typedef struct wf_executor {
    const wf_executor_ops *ops;
    void *ctx;
} wf_executor;

#endif
