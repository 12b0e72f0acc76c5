/* Internal: the scheduler's request and choice records, shared by the scheduler thread
 * (sched.c), the planning core (core.c), the policies and the simulator. Not a public API. */
#ifndef WF_SCHED_REQUEST_IMPL_H
#define WF_SCHED_REQUEST_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv/paged.h"
#include "proto/request.h"
#include "proto/task.h"
#include "sched/sched.h"

/* Where one choice (sequence) is on its trajectory. */
typedef enum wf_choice_phase {
    WF_CHOICE_WAIT_FORK = 0, /* n > 1: waits for the leader's final prefill chunk */
    WF_CHOICE_PREFILL,       /* computing K/V up to `target` (prompt, or recompute) */
    WF_CHOICE_DECODE,        /* one token per iteration */
    WF_CHOICE_DONE,
} wf_choice_phase;

typedef struct wf_choice {
    wf_kv_seq kv;             /* the choice's KV artifact: its block table */
    int32_t *tokens;          /* prompt followed by generated tokens */
    int n_tokens;             /* prompt + generated */
    int n_generated;
    int target;               /* PREFILL: tokens whose K/V must exist before decoding */
    wf_choice_phase phase;
    uint64_t rng;             /* sampler state, advanced by the executor */
    uint64_t seq_id;
    wf_finish_reason finish;
} wf_choice;

struct wf_request {
    wf_handoff_item link;     /* the submission item: first member */
    wf_request_spec spec;     /* arrays point into this record's own copies */
    int32_t *prompt;
    wf_logit_bias *logit_bias;
    wf_handoff *events;
    void *user;
    atomic_int refs;          /* the caller's handle + the scheduler's */
    atomic_bool cancel_requested;

    /* Owned by the scheduler thread (or the simulator). */
    wf_request_state state;
    uint64_t serial;          /* arrival order */
    wf_request_times times;
    uint64_t preempted_ns;    /* last preemption */
    double ttft_ms, tpot_ms;  /* effective SLO (request's, or the deployment default) */
    int max_tokens;           /* clamped to the context */
    int n_choices, n_active;
    wf_choice *choices;
    bool prompt_sampled;      /* the first token(s) were drawn: choices are independent now */
    bool admitted_once;
    bool failed_this_iteration;
    int cached_prompt_tokens;
    int n_preemptions;
    uint64_t preempted_iteration; /* not readmitted in the iteration that preempted it */
    uint64_t tasks_by_kind[WF_TASK_FINISH + 1];
    uint64_t last_task_begin_ns, last_task_end_ns;
    int max_generated;        /* over choices; SLO deadlines advance with it */
    bool ttft_missed;         /* still waiting for its first token past the TTFT deadline */
    struct wf_fair_entry *fair; /* "fair" policy: its virtual model's clock (sched/fair.h) */

    /* The FINISHED events, one per choice, set aside at submit (sched.c): ending a request
     * never needs memory. NULL in the simulator. */
    struct wf_request_event *finish_events;
    /* != WF_OK: the owner could not deliver an event; the core fails the request (error,
     * this status) at its next plan. */
    wf_status abort_status;

    /* Published copy for /admin (under the scheduler's lock). */
    wf_request_snapshot snap;
    struct wf_request *live_prev, *live_next;
};

/* Allocates a request from spec (copies prompt and logit_bias). n_ctx and block_size size the
 * per-choice token arrays and block tables. WF_ENOMEM, WF_EINVAL. */
wf_status wf__request_new(const wf_request_spec *spec, int n_ctx, int block_size,
                          uint64_t rng_seed, wf_request **out);
void wf__request_free(wf_request *req);
/* The SLO deadline the slo policy orders by: the time by which the request's next token is
 * due (queued + TTFT SLO + TPOT SLO per token already produced). */
uint64_t wf__request_deadline_ns(const wf_request *req);

#endif
