/* Internal: the scheduling core, a pure function of its inputs plus a clock. The scheduler
 * thread (sched.c) and the simulator (sim.c) drive the SAME code:
 *
 *     wf_core core;
 *     wf_core_init(&core, &cfg);                       // policy, budgets, pool, callbacks
 *     wf_core_add(&core, req, now_ns);                 // a new request (state QUEUED)
 *     for (;;) {
 *         wf_task_batch *b = wf_core_plan(&core, now_ns);   // pick this iteration's tasks
 *         if (b->n_tasks == 0) ...idle...
 *         wf_status st = run(b);                        // executor, or the cost model
 *         wf_core_complete(&core, st, end_ns);          // tokens, finishes, KV commits
 *     }
 *
 * Planning (one iteration): cancelled requests are retired first; a waiting request may
 * displace running ones if the policy says so (priority); then every running decode gets one
 * token (running requests in policy order; when KV blocks run out, the request the policy's
 * victim order picks among those not yet planned is preempted: its blocks are freed and it is
 * requeued to be recomputed); then prefill chunks of partially prefilled running requests
 * (with the slo policy and a cost model, sized to keep every decoding request on its TPOT
 * schedule); then waiting requests are admitted in policy order (prefix-cache match first)
 * while the token budget, max_running, the TPOT budget and the KV pool (whole prompt + a 1 %
 * watermark) allow. With the fair policy, a virtual model ahead of the others (sched/fair.h) is
 * first shed to its seat cap, is admitted only below it, and its decodes and prompt chunks
 * spend a per-step cost credit (a prompt waits, its place kept, while the credit is short).
 * A request's trajectory is PREFILL chunk.. -> DECODE step.. -> FINISH; the FINISH task (KV
 * released) is reported through cb.task like the executor's tasks. Requests that end are
 * handed to cb.retired at the end of the call (a safe point: the callback may free them).
 *
 * Not thread-safe: the owner thread only. Events leave through the callbacks. */
#ifndef WF_SCHED_CORE_H
#define WF_SCHED_CORE_H

#include "kv/paged.h"
#include "sched/cost_model.h"
#include "sched/fair.h"
#include "sched/policy.h"
#include "sched/request_impl.h"

typedef struct wf_core_callbacks {
    /* A token of one choice (not called for an end-of-generation token). */
    void (*token)(void *user, wf_request *req, int choice, const wf_generated_token *tok,
                  uint64_t now_ns);
    /* A choice ended. status/message explain errors. */
    void (*finished)(void *user, wf_request *req, int choice, wf_finish_reason reason,
                     wf_status status, const char *message, uint64_t now_ns);
    /* The request reached a terminal state; the core no longer references it. */
    void (*retired)(void *user, wf_request *req);
    /* Optional: a task ended (event with the executor's begin/end timestamps). */
    void (*task)(void *user, const wf_request *req, const wf_task *task);
    void *user;
} wf_core_callbacks;

typedef struct wf_core_config {
    const wf_sched_policy *policy;
    int max_batch_tokens;
    int max_running;          /* sequences in the running set */
    int n_ctx;
    bool whole_prefill;       /* a prompt's prefill is one task or none (see wf_sched_options) */
    wf_kv_pool *pool;
    wf_kv_store *store;       /* NULL in the simulator: copy-on-write copies nothing */
    wf_group group;           /* the device group every task runs on */
    /* Optional (may be NULL): the cost model the policy's TPOT budget predicts with. The owner
     * may update or swap it between iterations (online refit; NULL while untrusted). */
    const wf_cost_model *cost;
    /* > 1: an iteration with running decodes is planned to take at most this many times its
     * decode-only time; prefill chunks are sized to fit (smooth inter-token latency), unless
     * a prompt's TTFT is at risk. <= 1: off (the TPOT budget alone sizes prefill). Needs cost. */
    double prefill_stretch;
    /* Required by a policy with `fair` (shared by every group's core): virtual models' clocks,
     * charged per planned task (prefill tokens x b + decodes x c of the cost model, or one per
     * token without one). NULL otherwise. */
    wf_fair *fair;
    wf_core_callbacks cb;
} wf_core_config;

typedef struct wf_core {
    wf_core_config cfg;
    wf_request **waiting;     /* queued and preempted, kept in policy order */
    int n_waiting, cap_waiting;
    wf_request **running;
    int n_running, cap_running;
    /* Requests that reached a terminal state during this call: handed to cb.retired only at
     * the end of the call (a safe point), because the callback may free them. */
    wf_request **retired;
    int n_retired, cap_retired;
    int running_seqs;         /* active choices of running requests */
    /* The iteration being planned/run: preallocated for the worst case. */
    wf_task *tasks;
    wf_task_sample *samples;
    wf_request **task_req;
    int *task_choice;
    int max_tasks;
    wf_task_batch batch;
    /* What the last plan packed (for the cost model). last_context is the batch's attention
     * work (wf_cost_model_attention summed over its tasks); last_decode_context the part of
     * it that the decodes add (their summed context). */
    int last_prefill_tokens, last_decode_tokens;
    double last_context, last_decode_context;
    /* The plan in progress: predicted ms left for prefill under the decoding requests' TPOT
     * schedules (INFINITY: no such limit) and the prefill tokens that run regardless. */
    double plan_ms_left;
    int plan_prefill_floor;
    uint64_t plan_now;        /* the clock the plan in progress was called with */
    bool plan_credit_off;     /* fair: no decode in this step, so no per-step cost credit */
    uint64_t iteration, next_task_id, next_seq_id, next_serial;
    uint64_t preempted_total, finished_total, failed_total, cancelled_total;
} wf_core;

/* WF_EINVAL (bad config), WF_ENOMEM. */
wf_status wf_core_init(wf_core *core, const wf_core_config *cfg);
/* Requests still held are retired as cancelled (callbacks run). */
void wf_core_free(wf_core *core, uint64_t now_ns);
/* Takes the scheduler's reference to req (given back through cb.retired). WF_ENOMEM. */
wf_status wf_core_add(wf_core *core, wf_request *req, uint64_t now_ns);
wf_task_batch *wf_core_plan(wf_core *core, uint64_t now_ns);
/* Applies the outputs of the batch returned by the last plan. status != WF_OK: the whole
 * batch failed and each of its requests fails with message. */
void wf_core_complete(wf_core *core, wf_status status, const char *message, uint64_t now_ns);
/* Ends every request (FINISHED with reason/status), e.g. at the drain deadline. */
void wf_core_abort_all(wf_core *core, wf_finish_reason reason, wf_status status,
                       const char *message, uint64_t now_ns);
/* The group this core plans for went down (its executor's process died). Every request leaves
 * the core: one that has not drawn a token yet (prompt not sampled: the client saw nothing) is
 * reset to a fresh queued state -- blocks released, no event sent -- and returned in out for the
 * owner to re-add to a live group (wf_core_add keeps its arrival order); the others end with
 * FINISHED(error, status, message) and are retired. The batch in flight, if any, is dropped
 * (call only once the executor will no longer touch it). out must hold wf_core_n_requests()
 * entries. Returns how many were returned in out. */
int wf_core_evict(wf_core *core, wf_status status, const char *message, uint64_t now_ns,
                  wf_request **out);
static inline int wf_core_n_requests(const wf_core *core) {
    return core->n_waiting + core->n_running;
}

/* Load summary for admission control. */
typedef struct wf_core_load {
    double pending_prefill_tokens; /* prompt tokens still to compute (waiting + running) */
    double pending_prefill_attention; /* their attention work (wf_cost_model_attention) */
    int n_waiting;
    int n_decode;                  /* sequences decoding */
    double decode_context;         /* their summed context */
} wf_core_load;
void wf_core_get_load(const wf_core *core, wf_core_load *out);
/* The earliest next-token deadline of the core's requests (running and waiting; 0: none):
 * when its next iteration is due, for a core-sharing gate's claim (sched/gate.h). */
uint64_t wf_core_next_deadline(const wf_core *core);
/* As wf_core_get_load, but the waiting work counts only for requests the core's policy orders
 * before probe (a request not yet added: serial past every other, its queued_ns, SLOs and
 * priority set), so that admission predicts TTFT in the policy's own order rather than as if
 * the queue were first-come-first-served. n_waiting still counts every waiting request (the
 * queue bound). probe NULL: everything counts. */
void wf_core_get_load_ahead(const wf_core *core, const wf_request *probe, wf_core_load *out);

/* One waiting request as admission sees it: its place in the policy's order and the prefill
 * work it still needs before its first token(s). */
typedef struct wf_waiting_work {
    wf_order_key key;
    double prefill_tokens, prefill_attention;
} wf_waiting_work;
void wf_core_waiting_work(const wf_request *r, wf_waiting_work *out);
/* running (the load of running work only) plus the waiting entries policy orders before probe:
 * what the newcomer waits behind. n_waiting becomes n (the queue bound counts everyone). */
void wf_core_load_ahead_of(const wf_core_load *running, const wf_waiting_work *waiting, int n,
                           const wf_sched_policy *policy, const wf_order_key *probe,
                           wf_core_load *out);

/* Admission control, pure (the scheduler's submit and the simulator both call it). */
typedef struct wf_admission {
    const wf_cost_model *cost;   /* NULL: no trusted prediction yet: only the queue bound */
    int max_batch_tokens, queue_size;
    double factor;               /* reject when predicted TTFT > factor * the TTFT SLO */
    bool explicit_slo;           /* the request named its TTFT target (not the default) */
    wf_core_load load;           /* what is queued and running ahead of the new request, summed
                                  * over every group */
    int n_groups;                /* live groups sharing that work (0 or 1: one) */
} wf_admission;
/* WF_OK, WF_EFULL (queue at its bound) or WF_EOVERLOAD (predicted TTFT too long); on a refusal
 * *retry_after_s is the predicted drain time of the queued prefill work and msg says why.
 * *pred_ms (may be NULL) receives the prediction (0 without a cost model). */
wf_status wf_core_admit(const wf_admission *a, int n_prompt, double ttft_slo_ms,
                        double *retry_after_s, double *pred_ms, char *msg, int msglen);

#endif
