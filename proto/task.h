/* Trajectory tasks, artifacts and the asynchronous executor seam.
 *
 * The scheduler compiles every request into a chain of tasks (LLM: PREFILL chunk.. -> DECODE
 * step.. -> FINISH; DiT: ENCODE -> DENOISE steps a..b.. -> DECODE_IMAGE -> FINISH) and hands a
 * batch of them to an executor that serves one device group. Every task has a kind-neutral
 * header (id, kind, request, virtual model, group, deadline) and a payload per kind. State that
 * lives between tasks (KV blocks, a latent) is an *artifact*: an id plus an explicit placement
 * (which ranks hold it: one owner, replicated, or sharded along a dimension), never a pointer
 * that only one process understands, so a task boundary is a safe point where the scheduler may
 * move a request to another group.
 *
 * Dispatch is asynchronous (ggml-backend style): dispatch() returns at once and the executor
 * calls done() exactly once when the batch has run, from any thread; the scheduler's done()
 * pushes a completion event into its inbox and keeps planning meanwhile.
 *
 *     static void on_done(void *user, wf_task_batch *b, wf_status st, const char *msg) {
 *         push_completion(user, b, st, msg);          // e.g. a wf_handoff push + wake
 *     }
 *     wf_task_batch batch = {.tasks = tasks, .n_tasks = n, .group = group};
 *     wf_status st = wf_executor_dispatch(ex, &batch, on_done, inbox);
 *     // st != WF_OK: nothing was started and on_done will not be called.
 *     // Otherwise on_done(inbox, &batch, status, message) follows: status != WF_OK means the
 *     // whole batch failed; else read each task's status and outputs.
 *     wf_executor_run(ex, &batch, msg, sizeof msg);  // blocking helper (tests, calibration, tools)
 *
 * Ownership: the batch, its tasks and everything their pointers reach belong to the dispatcher
 * and must stay valid and unchanged until done() has been called. An executor that crosses a
 * process boundary serialises them into proto/ frames (proto/frame.h); pointers never cross. */
#ifndef WF_PROTO_TASK_H
#define WF_PROTO_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"
#include "proto/request.h"

typedef enum wf_task_kind {
    WF_TASK_PREFILL = 0,  /* LLM: a chunk of prompt tokens; samples only on the last chunk */
    WF_TASK_DECODE,       /* LLM: one new token per sequence */
    WF_TASK_ENCODE,       /* DiT: conditioning and the initial latent */
    WF_TASK_DENOISE,      /* DiT: denoising steps [step_begin, step_end) */
    WF_TASK_DECODE_IMAGE, /* DiT: latent to pixels */
    WF_TASK_FINISH,       /* the request's state is released */
    WF_TASK_KIND_COUNT
} wf_task_kind;

const char *wf_task_kind_str(wf_task_kind kind);

#define WF_MAX_GROUP_RANKS 64

/* A device group: an ordered list of world ranks, id hashed from the list (engine/gfc). Forming
 * one is local bookkeeping. */
typedef struct wf_group {
    uint64_t id;
    int n_ranks;
    int ranks[WF_MAX_GROUP_RANKS];
} wf_group;

/* ---- artifacts: state between tasks ------------------------------------------------------- */

typedef enum wf_placement_kind {
    WF_PLACEMENT_OWNER = 0,   /* whole, on holders.ranks[0] */
    WF_PLACEMENT_REPLICATED,  /* whole, on every rank of holders */
    WF_PLACEMENT_SHARDED,     /* split evenly along shard_dim; holders.ranks[i] holds shard i */
} wf_placement_kind;

typedef struct wf_placement {
    wf_placement_kind kind;
    int shard_dim;            /* SHARDED: the dimension split (artifact-kind specific) */
    wf_group holders;
} wf_placement;

typedef enum wf_artifact_kind {
    WF_ARTIFACT_NONE = 0,
    WF_ARTIFACT_KV,           /* paged KV blocks of one sequence */
    WF_ARTIFACT_LATENT,       /* a DiT latent (fp32, C x H x W per item) */
    WF_ARTIFACT_IMAGE,        /* decoded pixels (u8, H x W x C) */
} wf_artifact_kind;

/* A reference to state held by the ranks of its placement. KV artifacts name their blocks by
 * index in the holder's paged pool (kv/paged.h), which every process can interpret together with
 * the holder's rank; latents and images are named by id in the holders' artifact tables. */
typedef struct wf_artifact {
    uint64_t id;              /* unique in the world (assigned by the scheduler); 0: none */
    wf_artifact_kind kind;
    wf_placement placement;
    union {
        struct { /* KV */
            const int32_t *block_table; /* blocks covering the sequence's positions */
            int n_blocks;
            /* With a KV store split by layer kind (kv/kv_store.h), the sliding-window
             * layers' table, indexed like block_table, entries behind the window released
             * (-1). NULL otherwise. Crosses in TASK_DISPATCH (1.3) for PREFILL and DECODE
             * tasks only. */
            const int32_t *swa_block_table;
        };
        struct {
            int channels, height, width;
            int step;                   /* denoising steps already applied */
        } latent;
        struct {
            int channels, height, width;
        } image;
    };
} wf_artifact;

/* ---- payloads ------------------------------------------------------------------------------ */

/* One token to draw from the logits of a task's last position. A final prefill chunk of a
 * request with n > 1 carries n samples (one per choice) drawn from the same logits. */
typedef struct wf_task_sample {
    const wf_sampling_params *params;
    uint64_t rng_state;        /* in: the choice's generator state; out: advanced */
    const int32_t *history;    /* prompt followed by tokens generated so far (penalties):
                                * tokens [history_base, n_history) of it */
    int n_history;             /* the whole history's length */
    int n_prompt;              /* tokens [0..n_prompt) of the history are the prompt */
    /* In-process always 0 (history is the whole history). Across processes the history
     * travels once per sequence (proto/frame_task.h): the receiver holds tokens
     * [0, history_base) of sequence seq from earlier tasks, and history points at the rest;
     * the receiving worker restores the whole history before the task runs. */
    int history_base;
    uint64_t seq;              /* the choice's sequence the sample extends (0: none; then the
                                * history always travels whole and is not kept) */
    bool suppress_eos;         /* min_tokens not reached, or ignore_eos */
    /* outputs */
    wf_generated_token out;
    bool out_is_eog;           /* the token ends generation (EOS/EOT of the model) */
} wf_task_sample;

/* PREFILL and DECODE. */
typedef struct wf_task_llm {
    const int32_t *tokens;     /* new tokens: a prompt chunk, or the last sampled token */
    int n_tokens;
    int pos;                   /* position of tokens[0] in the sequence */
    wf_artifact kv;            /* the sequence's KV blocks, covering [0, pos + n_tokens) */
    wf_task_sample *samples;   /* NULL / 0: no token is drawn (a non-final prefill chunk) */
    int n_samples;
    float kv_accuracy;         /* the request's budget for a compressed KV transfer (0: default) */
    uint32_t kv_codec;         /* WF_KV_CODEC_AUTO, WF_KV_CODEC_OFF or a profile id to force */
} wf_task_llm;

/* ENCODE, DENOISE and DECODE_IMAGE of one image (one item of a request with n > 1). Noise comes
 * from a counter-based generator keyed by (seed, request, step, element), so the result never
 * depends on batching, threads or the group. */
typedef struct wf_task_dit {
    int32_t class_label;       /* conditioning class; the model's null class for none */
    int32_t negative_label;    /* unconditional branch of guidance (the null class by default) */
    float guidance_scale;      /* <= 1: no classifier-free guidance */
    int sampler;               /* engine/dit sampler id */
    int num_steps;             /* of the whole trajectory */
    int step_begin, step_end;  /* DENOISE: steps [step_begin, step_end) */
    uint64_t seed;             /* generator key: (seed, noise_index) */
    uint32_t noise_index;      /* which image of its request (0..n-1): the same seed and index
                                * give the same image whatever else runs beside it */
    wf_artifact latent;        /* in (DENOISE, DECODE_IMAGE) and out (ENCODE, DENOISE) */
    wf_artifact image;         /* DECODE_IMAGE: out */
    /* output of DECODE_IMAGE for an in-process executor: pixels written here (NULL: keep the
     * image in the holders' artifact table) */
    uint8_t *pixels;
    size_t pixels_cap;
} wf_task_dit;

/* FINISH: the artifacts to release. */
typedef struct wf_task_finish {
    wf_artifact artifact;
} wf_task_finish;

typedef struct wf_task {
    /* header */
    uint64_t id;
    wf_task_kind kind;
    uint64_t request_seq;      /* the sequence (request choice / image item) it advances */
    uint32_t vmodel;           /* virtual model id (0: the bare backbone) */
    wf_group group;            /* ranks that run it (may differ between a request's tasks) */
    uint64_t deadline_ns;      /* CLOCK_MONOTONIC; 0: none */
    union {
        wf_task_llm llm;       /* PREFILL, DECODE */
        wf_task_dit dit;       /* ENCODE, DENOISE, DECODE_IMAGE */
        wf_task_finish finish; /* FINISH */
    };
    /* outputs */
    wf_status status;          /* WF_OK, or why this task (only) failed */
    uint64_t t_begin_ns, t_end_ns; /* filled by the executor (CLOCK_MONOTONIC) */
} wf_task;

typedef struct wf_task_batch {
    wf_task *tasks;
    int n_tasks;
    wf_group group;
    uint64_t iteration;
    /* Across processes only (TASK_DISPATCH 1.2): the receiver forgets every sequence history
     * it keeps (history_reset) and then those of history_drop, before the tasks. */
    bool history_reset;
    const uint64_t *history_drop;
    int n_history_drop;
} wf_task_batch;

/* ---- the executor seam ----------------------------------------------------------------------- */

/* Called exactly once per dispatched batch, from any thread, after the batch ran (or failed as
 * a whole: status != WF_OK, message says why; may be NULL). Must be quick and must not call the
 * executor. */
typedef void (*wf_executor_done_fn)(void *user, wf_task_batch *batch, wf_status status,
                                    const char *message);

typedef struct wf_executor_ops {
    const char *name;
    /* Optional. Frees the executor after every dispatched batch completed. NULL: nothing. */
    void (*free)(void *ctx);
    /* Optional. Whether it can run tasks of this kind. NULL: PREFILL, DECODE and FINISH. */
    bool (*supports)(void *ctx, wf_task_kind kind);
    /* Required. Starts the batch and returns at once. WF_OK: done follows exactly once. Any
     * other status: nothing started, done is never called (e.g. WF_EBUSY when the executor
     * holds as many batches as it can queue, WF_EINVAL for a batch it cannot run). */
    wf_status (*dispatch)(void *ctx, wf_task_batch *batch, wf_executor_done_fn done, void *user);
    /* Optional. Asks a dispatched batch to stop early (its done reports WF_ECANCELLED). NULL:
     * batches run to completion. */
    void (*cancel)(void *ctx, wf_task_batch *batch);
    /* Optional. Blocks until every dispatched batch has called done. NULL: the dispatcher waits
     * for its own done callbacks. */
    void (*synchronize)(void *ctx);
    /* Optional. Runs the batch to completion on the calling thread and returns its status
     * (message, may be NULL, says why it failed), as a dispatch and the wait for its done would,
     * without the hand-over to the executor's own thread and back (two thread wake-ups, each
     * milliseconds on a loaded host). For a caller that owns a thread for this executor's
     * batches and keeps no other batch of it in flight meanwhile (sched/gate.h's gated
     * executor, which runs its inner executor's batches in its turns). NULL: dispatch. */
    wf_status (*run)(void *ctx, wf_task_batch *batch, char *message, size_t cap);
} wf_executor_ops;

typedef struct wf_executor {
    const wf_executor_ops *ops;
    void *ctx;
} wf_executor;

bool wf_executor_supports(wf_executor ex, wf_task_kind kind);
wf_status wf_executor_dispatch(wf_executor ex, wf_task_batch *batch, wf_executor_done_fn done,
                               void *user);
/* Dispatches and waits for done (tests, calibration, tools). Returns the batch status; message
 * (may be NULL) receives the executor's message. */
wf_status wf_executor_run(wf_executor ex, wf_task_batch *batch, char *message, size_t cap);
/* The batch run on the calling thread by ops->run when the executor has it, else
 * wf_executor_run. The caller keeps no other batch of ex in flight meanwhile. */
wf_status wf_executor_run_here(wf_executor ex, wf_task_batch *batch, char *message, size_t cap);
void wf_executor_free(wf_executor ex);

#endif
