/* Internal: scheduling policies behind a small vtable, selected by name. A policy is an order
 * over requests: the core admits waiting requests in that order and preempts from its end.
 *
 *     const wf_sched_policy *p = wf_sched_policy_find("slo");   // NULL if unknown
 *     if (p->compare(a, b) < 0) ... a goes first
 */
#ifndef WF_SCHED_POLICY_H
#define WF_SCHED_POLICY_H

#include "sched/request_impl.h"

/* What the policies order by, as plain values: admission (on the HTTP thread) compares a
 * newcomer with a snapshot of the waiting requests the scheduler thread publishes, since it
 * cannot read the requests themselves. */
typedef struct wf_order_key {
    int priority;             /* spec.priority */
    uint64_t serial;          /* arrival order (a newcomer: UINT64_MAX) */
    uint64_t slo_key;         /* EDF deadline, aged when late (see "slo" below) */
    double vtime;             /* "fair": the virtual model's virtual time (a newcomer: 0) */
} wf_order_key;

void wf_sched_order_key(const wf_request *r, wf_order_key *out);

typedef struct wf_sched_policy {
    const char *name;
    /* The order on keys that compare applies to requests. */
    int (*key_compare)(const wf_order_key *a, const wf_order_key *b);
    /* Negative when a should be served before b; ties must be broken (the core also breaks
     * remaining ties by arrival). Pure: reads only the two requests. */
    int (*compare)(const wf_request *a, const wf_request *b);
    /* Preemption order: positive when a should be preempted before b. Kept separate from
     * compare so that growing sequences (whose EDF deadline moves back with every token) are
     * not the ones recomputed over and over. */
    int (*victim_compare)(const wf_request *a, const wf_request *b);
    /* SLO-aware batch sizing: with a cost model, each iteration's prefill (in predicted ms)
     * is capped so that every decoding request stays on its TPOT schedule (TPOT is an
     * average: time banked by short decode iterations may be spent on a prompt), and the
     * number of decoding sequences so that a decode-only iteration fits the tightest TPOT
     * SLO (a long prompt then costs the streams nothing beyond their budget). */
    bool tpot_budget;
    /* Optional: true when waiting request w may take the place of running request r (r is
     * preempted, w admitted) when seats or KV blocks are short. NULL: never. */
    bool (*displaces)(const wf_request *w, const wf_request *r);
    /* Orders by virtual models' virtual times: the core keeps them (wf_core_config.fair). */
    bool fair;
} wf_sched_policy;

/* "fcfs": arrival order; preempts the latest arrival.
 * "priority": larger spec.priority first, then arrival; preempts the lowest priority, latest;
 *   a waiting request displaces running ones of strictly lower priority.
 * "slo": earliest deadline first (wf__request_deadline_ns), then arrival; a request already past
 *   its TTFT deadline is keyed WF_SLO_LATE_AGING TTFT windows later (it yields to requests that
 *   can still meet their SLO, for a bounded time); preempts the request with the latest
 *   first-token deadline (most slack when it arrived).
 * "fair": weighted fair queueing across virtual models (sched/fair.h): the virtual model with
 *   the least virtual time (served cost / weight) first, then arrival; preempts from the most
 *   served virtual model, latest arrival; a waiting request whose virtual model is behind a
 *   running one's by more than a margin (max_running decode steps' cost) displaces it. Batch-
 *   aware (sched/fair.h, the core applies it): a virtual model ahead of another active one is
 *   held to its seat cap and to its share of each step's cost. */
#define WF_SLO_LATE_AGING 2.0
const wf_sched_policy *wf_sched_policy_find(const char *name);
/* Comma-separated names, for help texts. */
const char *wf_sched_policy_names(void);

#endif
