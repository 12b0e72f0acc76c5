/* The scheduler: accepts requests from the server, compiles them into trajectory tasks, packs
 * each iteration's batch under a token budget (continuous batching, chunked prefill) over the
 * paged KV cache, runs it on an executor, and sends token and finish events back.
 *
 *     wf_sched_options opts;
 *     wf_sched_options_init(&opts);              // then set policy, budgets, SLO defaults
 *     wf_sched *s;
 *     wf_sched_new(&opts, &kv_store, executor, &s);
 *     wf_sched_start(s);                          // starts the scheduler thread
 *     // loop thread, per HTTP request:
 *     wf_request *req; wf_sched_reject why;
 *     switch (wf_sched_submit(s, &spec, &events_queue, conn, &req, &why)) {
 *       case WF_OK: break;                        // events will arrive on events_queue
 *       case WF_EOVERLOAD: reply 429, Retry-After: why.retry_after_s
 *       case WF_EFULL: case WF_EBUSY: reply 503
 *       case WF_EINVAL: reply 400 why.message
 *     }
 *     // on the events queue: wf_request_event items; after the last FINISHED event of a
 *     // request (one per choice), the server calls wf_sched_release(s, req).
 *     wf_sched_cancel(s, req);                    // client went away: FINISHED(cancelled) follows
 *     wf_sched_drain(s, deadline_ms); wf_sched_free(s);
 *
 * Groups: every device group (an in-process CPU engine, a worker process behind a remote
 * executor) brings its own KV store -- any geometry -- and executor; the scheduler keeps one
 * paged pool and one planning core per group (sched/lanes.h). wf_sched_new with a kv/executor
 * registers group 0; more come with wf_sched_add_group, before or after start:
 *
 *     int g1;
 *     wf_sched_add_group(s, &kv1, executor1, 1, &g1);    // rank 1, its own KV
 *     ...
 *     wf_sched_remove_group(s, g1, "worker 1 exited");   // e.g. its process died
 *
 * A request is bound to one group when the thread takes it in (least loaded, with prefix-cache
 * affinity); admission control is global (the predicted TTFT counts the work of every live
 * group, shared among them). The thread keeps at most one batch in flight per group, never runs
 * a batch itself (dispatch returns at once; completions arrive in the same inbox as requests
 * and cancels), and plans other idle groups while batches run; a request has at most one task
 * in flight. A group goes down when its executor completes a batch with WF_ECLOSED (its
 * process is gone) or when wf_sched_remove_group is called (after its batch in flight, if any,
 * reported: the executor must still call done): requests that have not produced a token yet are
 * re-run on a live group, the others end with FINISHED(error, WF_ECLOSED, "group N (rank R)
 * went down: ..."). Executors and KV stores must outlive the scheduler (wf_sched_free).
 *
 * Thread-safety: submit, cancel, release, stats and snapshot may be called from any thread.
 * Events are pushed into the caller's wf_handoff from the scheduler thread; the consumer frees
 * each with wf_request_event_free(). Per request the events keep their order (tokens of a
 * choice in order, its FINISHED last). A full events queue is back-pressure: the scheduler
 * keeps the events and retries every iteration (nothing is dropped); a closed queue means the
 * consumer is gone: the request is cancelled. The FINISHED events of a request are set aside
 * at submit (WF_ENOMEM when that fails); when a TOKEN event cannot be allocated the request
 * fails with FINISHED(error, WF_ENOMEM) instead of the process aborting.
 *
 * Semantics: every accepted request ends with exactly one FINISHED per choice (stop, length,
 * cancelled, or error with status + message). An end-of-generation token (out_is_eog from the
 * executor, not suppressed by min_tokens/ignore_eos) ends the choice with FINISHED(stop) and is
 * neither sent as a TOKEN nor counted in completion_tokens. max_tokens is clamped to the
 * context left (n_ctx - prompt); reaching either gives FINISHED(length). A request is admitted
 * to run when its whole prompt fits in free KV blocks (plus a 1 % watermark); when blocks run
 * out during decoding, a request is preempted (blocks freed, recomputed later from prompt +
 * generated tokens: the output is the same). With prefix_cache, full blocks of earlier prompts
 * are reused (usage.cached_prompt_tokens). n > 1 choices share the prompt's blocks
 * copy-on-write. Without cost_given or cost_model_file, wf_sched_start calibrates the cost
 * model with short batches through the executor (at most ~3 s) before the thread starts; the
 * model is refitted online from measured iterations (online_refit).
 * Policies: "fcfs" (arrival order; preempts the latest arrival). "priority" (spec.priority,
 * larger first; preempts the lowest; a waiting request displaces running ones of lower
 * priority). "slo" (earliest deadline first: queued + TTFT SLO + TPOT SLO x tokens produced;
 * a request already past its TTFT deadline yields to those that can still meet theirs, for at
 * most two more TTFT windows (aging: a bounded wait under overload); with a trusted cost model each
 * iteration's prefill is sized so that every decoding request stays on its TPOT schedule
 * (an average: time banked by short iterations may go to a prompt) and the number of
 * streams so that a decode-only iteration fits the tightest TPOT SLO;
 * preempts the request whose first-token deadline is latest). "fair" (weighted fair queueing
 * across virtual models, sched/fair.h: each virtual model's virtual time advances by the cost
 * it is served -- prefill tokens x b, decodes x c of the cost model -- divided by
 * spec.share_weight; the most-behind virtual model's work is admitted first and the batch is
 * filled from the others; a virtual model far enough behind displaces another's running
 * request). */
#ifndef WF_SCHED_SCHED_H
#define WF_SCHED_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "kv/kv_store.h"
#include "proto/request.h"
#include "proto/task.h"
#include "proto/base/handoff.h"

typedef struct wf_sched wf_sched;
typedef struct wf_request wf_request;

typedef struct wf_sched_options {
    const char *policy;         /* "fcfs", "priority" or "slo" (default) */
    int queue_size;             /* waiting requests before WF_EFULL */
    int max_batch_tokens;       /* token budget per iteration (prefill chunks + decodes) */
    int max_running;            /* sequences decoding at once */
    int n_ctx;                  /* max tokens (prompt + generated) per sequence */
    double default_ttft_ms;     /* SLO when a request names none */
    double default_tpot_ms;
    double admission_factor;    /* reject when predicted TTFT > factor * SLO TTFT (default 2) */
    double prefill_stretch;     /* > 1: cap on an iteration's time as a multiple of its decode-only
                                 * time, prefill sized to fit (default 2); <= 1: off (core.h) */
    const char *cost_model_file;/* fitted cost model to load; NULL: calibrate at start-up */
    bool prefix_cache;          /* default true */
    /* Extensions (wf_sched_options_init fills them): */
    bool cost_given;            /* use cost[] as the model (no file, no calibration) */
    double cost[4];             /* step_ms = a + b*prefill + c*decode + d*attention */
    bool online_refit;          /* refit the cost model from measured iterations (default) */
    uint64_t seed;              /* sampler seeds of requests without one */
    int group_rank;             /* the executor's rank in the world (one CPU worker: 0) */
    bool whole_prefill;         /* never split a prompt into chunks: a prefill runs whole or
                                   waits (prefill/decode disaggregation, where a prompt's KV is
                                   computed elsewhere and shipped in one piece; needs
                                   max_batch_tokens >= n_ctx) */
    /* Optional: the gated executor (sched/gate.h) that a group's executor is. That group then
     * takes its turns on the shared cores by late binding: it claims a turn with its most
     * urgent next-token deadline and the cost model's prediction of its next iteration, and
     * plans the iteration only when the gate grants the turn. NULL: batches are planned at
     * once (and, if the executor is gated, wait for their turn composed). */
    struct wf_gated_executor *turns;
} wf_sched_options;

void wf_sched_options_init(wf_sched_options *opts);

/* Why a submit was refused (WF_EOVERLOAD, WF_EFULL, WF_EBUSY, WF_EINVAL). */
typedef struct wf_sched_reject {
    double retry_after_s;       /* WF_EOVERLOAD/WF_EFULL: predicted queue drain time */
    char message[256];
} wf_sched_reject;

typedef enum wf_request_event_kind {
    WF_EVENT_TOKEN = 0,         /* one generated token of one choice */
    WF_EVENT_FINISHED,          /* a choice ended: finish reason, status, usage, timestamps */
} wf_request_event_kind;

typedef struct wf_usage {
    int prompt_tokens;
    int completion_tokens;      /* of this choice (FINISHED) */
    int cached_prompt_tokens;   /* prompt tokens served from the prefix cache */
} wf_usage;

/* Lifecycle timestamps, CLOCK_MONOTONIC nanoseconds (0: not reached). */
typedef struct wf_request_times {
    uint64_t queued_ns, started_ns, first_token_ns, finished_ns;
} wf_request_times;

typedef struct wf_request_event {
    wf_handoff_item link;       /* first: the event is a wf_handoff_item */
    wf_request *request;
    void *user;                 /* as given to wf_sched_submit */
    wf_request_event_kind kind;
    int choice;
    uint64_t t_ns;              /* when the event was produced */
    wf_generated_token token;   /* WF_EVENT_TOKEN */
    wf_finish_reason finish;    /* WF_EVENT_FINISHED */
    wf_status status;           /* WF_EVENT_FINISHED: WF_OK, or the error that ended it */
    char message[160];          /* WF_EVENT_FINISHED with an error */
    wf_usage usage;
    wf_request_times times;
} wf_request_event;

/* kv is shared with the executor, which writes K/V into the blocks this scheduler assigns.
 * kv and executor.ops both NULL: no group yet (submit returns WF_EBUSY until one is added). */
wf_status wf_sched_new(const wf_sched_options *opts, wf_kv_store *kv, wf_executor executor,
                       wf_sched **out);
/* Registers a device group (its rank in the world, its own KV store and executor); *out_id
 * (may be NULL) receives its id (0, 1, ... in registration order). Any thread, before or after
 * start (the start-up calibration measures group 0 only: groups are replicas). WF_EINVAL,
 * WF_EFULL (64 groups), WF_ECLOSED (shutting down), WF_ENOMEM. */
wf_status wf_sched_add_group(wf_sched *s, wf_kv_store *kv, wf_executor executor, int rank,
                             int *out_id);
/* Takes group id down (see Groups above); message goes into the failed requests' errors. Any
 * thread; returns at once. WF_ENOTFOUND. */
wf_status wf_sched_remove_group(wf_sched *s, int id, const char *message);
wf_status wf_sched_start(wf_sched *s);
/* Copies spec (prompt, logit_bias) into the request. On WF_OK *out is a handle valid until
 * wf_sched_release. On any other status no event will ever be sent and why says why. */
wf_status wf_sched_submit(wf_sched *s, const wf_request_spec *spec, wf_handoff *events,
                          void *user, wf_request **out, wf_sched_reject *why);
/* Asks the scheduler to stop the request; its blocks are freed at the next iteration and each
 * unfinished choice gets FINISHED(cancelled). Idempotent. */
void wf_sched_cancel(wf_sched *s, wf_request *req);
/* The caller is done with the handle (after all FINISHED events, or after cancel + those). */
void wf_sched_release(wf_sched *s, wf_request *req);
void wf_request_event_free(wf_sched *s, wf_request_event *ev);

/* Stops admitting (submit returns WF_EBUSY), lets running requests finish until deadline_ms,
 * then cancels the rest. Returns once nothing is running. */
void wf_sched_drain(wf_sched *s, int deadline_ms);
/* Stops the thread (after drain) and frees everything. */
void wf_sched_free(wf_sched *s);

/* Per group (/admin/stats, /metrics). */
typedef struct wf_sched_group_stats {
    int id, rank;
    int slot;                         /* its place in the list; a new group may take it once
                                       * this one went down (ids are never reused) */
    bool live;
    char executor[24];                /* the executor's name */
    int running, waiting;
    int kv_blocks_total, kv_blocks_used;
    /* A KV store split by layer kind (kv/kv_store.h): the sliding-window layers' blocks, apart
     * from the global ones counted above (0 when not split). */
    int kv_swa_blocks_total, kv_swa_blocks_used;
    uint64_t kv_swa_released;         /* local blocks released behind the window so far */
    int batches_in_flight;
    uint64_t iterations;              /* batches completed */
    uint64_t failed_batches;
    char last_error[160];             /* "" when none */
} wf_sched_group_stats;

/* Every group slot is reported: a group that went down keeps its slot (listed, not live) until
 * a new group takes it, so at most WF_LANES_MAX (sched/lanes.h) slots exist. */
#define WF_SCHED_STATS_GROUPS 64

typedef struct wf_sched_stats {
    int running, waiting, preempted_total;
    int kv_blocks_total, kv_blocks_used;
    double kv_usage;                  /* used / total, 0..1 */
    uint64_t prefix_queries, prefix_hits; /* in tokens */
    uint64_t iterations;
    double iteration_ms_avg;          /* recent average */
    double sched_overhead_ms_avg;     /* time spent choosing the batch, recent average */
    /* Extensions: */
    uint64_t finished_total, failed_total, cancelled_total, rejected_total;
    int kv_blocks_cached;             /* unreferenced prefix blocks kept for reuse */
    /* Sliding-window layers' blocks of split stores (0 when none): total, held, cached, and
     * how many were released behind the window so far. */
    int kv_swa_blocks_total, kv_swa_blocks_used, kv_swa_blocks_cached;
    uint64_t kv_swa_released;
    uint64_t cow_copies;
    double overhead_fraction;         /* planning time / (planning + executor time), recent */
    double plan_ms_avg;               /* of the overhead: choosing the batch (wf_core_plan) */
    double complete_ms_avg;           /* of the overhead: applying outputs, emitting events */
    double cost_model[4];             /* current a, b, c, d (ms) */
    /* Groups (kv_* and running/waiting above are sums over the live groups). */
    int n_groups, groups_live;
    uint64_t rerouted_total;          /* requests moved off a group that went down */
    wf_sched_group_stats groups[WF_SCHED_STATS_GROUPS];
} wf_sched_stats;

void wf_sched_get_stats(wf_sched *s, wf_sched_stats *out);

/* Extension: the TTFT (ms) admission control would predict right now for a prompt of n_prompt
 * tokens, and (drain_ms, may be NULL) the time to drain the prefill work already queued.
 * Thread-safe. wf_sched_submit rejects with WF_EOVERLOAD exactly when this prediction exceeds
 * admission_factor * the request's TTFT SLO (retry_after_s = drain_ms / 1000, 0 when nothing
 * is queued: the SLO is out of reach even on an idle server) -- once the cost model is
 * trusted: given or loaded, calibrated from >= 8 batches, or refitted online from >= 32
 * iterations (before that only the queue bound applies). */
double wf_sched_predict_ttft_ms(wf_sched *s, int n_prompt, double *drain_ms);

typedef enum wf_request_state {
    WF_REQUEST_QUEUED = 0,
    WF_REQUEST_RUNNING,
    WF_REQUEST_PREEMPTED,
    WF_REQUEST_FINISHED,
    WF_REQUEST_FAILED,
    WF_REQUEST_CANCELLED,
} wf_request_state;

const char *wf_request_state_str(wf_request_state state);

typedef struct wf_request_snapshot {
    char id[WF_REQUEST_ID_MAX];
    wf_request_state state;
    int prompt_tokens, generated_tokens;
    int priority;
    double age_ms;
    /* Extensions: the request's trajectory so far. */
    int n_choices;
    int cached_prompt_tokens;
    int preemptions;
    uint64_t prefill_tasks, decode_tasks;  /* task events seen (chunks, steps) */
    int group;                             /* the group it is bound to (-1: not yet) */
} wf_request_snapshot;

/* Calls fn for each live request under the scheduler's lock: fn must be quick and not call
 * back into the scheduler. */
void wf_sched_foreach_request(wf_sched *s,
                              void (*fn)(const wf_request_snapshot *snap, void *user),
                              void *user);

/* Test hook: the next n event allocations fail (as if memory ran out). */
void wf__sched_fail_event_allocs(wf_sched *s, int n);

#endif
