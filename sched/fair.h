/* Internal: weighted fair queueing across virtual models (the "fair" policy). Each virtual
 * model has a virtual time advanced by the cost it is actually served divided by its weight;
 * the policy orders requests by their virtual model's virtual time (the most-behind first,
 * then arrival), so a batch admits the most-behind backlogged virtual model's work and fills
 * the rest of the batch from the others. A virtual model that becomes backlogged again starts
 * at the system's virtual time (the least among the backlogged), so idle time is not banked.
 *
 * Batch-aware: the order alone cannot protect a light virtual model when every request is
 * admitted at once (a large max_running) -- a noisy one's sequences fill the batch and make
 * every step longer for its batch-mates. So while other virtual models are active, one that is
 * ahead of them (wf_fair_ahead) holds at most its weighted share of a batch sized where
 * batching stops paying (wf_fair_seat_cap); alone, a virtual model may use the whole batch.
 *
 *     wf_fair f; wf_fair_init(&f);
 *     wf_fair_entry *e = wf_fair_join(&f, spec.vmodel, spec.share_weight, now); // arrives
 *     wf_fair_charge(&f, e, cost);                                               // planned
 *     int cap = wf_fair_seat_cap(&f, e, max_running, knee, now);                 // its seats
 *     wf_fair_leave(&f, e, now);                                                 // ends
 *     wf_fair_free(&f);
 *
 * Owned by the scheduler thread (or the simulator); shared by every group's core, so a
 * re-routed request keeps its entry. Entries are never moved (requests point at them). */
#ifndef WF_SCHED_FAIR_H
#define WF_SCHED_FAIR_H

#include <stdbool.h>
#include <stdint.h>

typedef struct wf_fair_entry {
    uint32_t vmodel;
    double weight;      /* > 0; the latest request's */
    double vtime;       /* served cost / weight, floored at the system time when re-joining */
    double served;      /* cost served in total */
    int backlog;        /* requests of it in the scheduler */
    /* Activity beyond the backlog: a tenant sending a steady trickle has moments with no
     * request in the scheduler; counting it idle then would lift the others' caps and let a
     * noisy one fill the batch just before its next request arrives (which then has to
     * preempt them all). It stays active for two of its mean inter-arrival gaps. */
    uint64_t last_join_ns, last_leave_ns;
    double gap_ns;      /* exponentially weighted mean gap between its arrivals (0: unknown) */
    /* Cost (ms of the cost model) it may still add to steps while it is ahead of the others:
     * refilled by its step budget every iteration (wf_fair_refill), spent by its tasks. */
    double credit;
    struct wf_fair *owner;
    struct wf_fair_entry *next;
} wf_fair_entry;

typedef struct wf_fair {
    wf_fair_entry *head;
    double vnow;        /* system virtual time: the least vtime among the backlogged */
    /* A waiting request displaces a running one of another virtual model only when its own
     * virtual model is behind by more than this (virtual time): hysteresis, so that seats do
     * not ping-pong (each displacement recomputes the victim). The core sets it. */
    double displace_margin;
    int n;
} wf_fair;

void wf_fair_init(wf_fair *f);
void wf_fair_free(wf_fair *f);
/* One more request of vmodel (weight <= 0 means 1) arriving at now_ns. NULL on allocation
 * failure. */
wf_fair_entry *wf_fair_join(wf_fair *f, uint32_t vmodel, double weight, uint64_t now_ns);
void wf_fair_leave(wf_fair *f, wf_fair_entry *e, uint64_t now_ns);
/* True while e has requests in the scheduler or its last one left less than two mean
 * inter-arrival gaps before now_ns. */
bool wf_fair_active(const wf_fair_entry *e, uint64_t now_ns);
/* True when another active virtual model is behind e by more than margin (virtual time): e
 * has been served more than its share. Only such a virtual model is held to its seat cap; the
 * ones at or near the pace of the least served are not (a light tenant's second request does
 * not wait for its first because a noisy one is around). The core admits against the cap
 * (and spends the cost credit) beyond 2 displace_margins and sheds beyond 2.5: a hysteresis,
 * so that a virtual model hovering at the edge is not admitted and preempted in turn. */
bool wf_fair_ahead(const wf_fair *f, const wf_fair_entry *e, double margin, uint64_t now_ns);
/* How many sequences e may hold in a batch of max_running seats at now_ns. No other virtual
 * model active: max_running (work-conserving: one tenant alone uses the whole batch). Else
 * its weighted share (weight / the active ones' summed weight) of
 *     S = min(max_running, n_active x knee)
 * rounded down, at least 1. knee is the batch size past which a step's per-sequence cost
 * outweighs its fixed cost (a / c of the cost model, rounded up): up to it, more sequences
 * share the weight reads almost for free; past it, each one mostly lengthens every
 * batch-mate's step. With equal weights each active virtual model gets knee seats, so one
 * over its share at most doubles the fixed part of the others' steps. knee <= 0 (no cost
 * model): S = max_running. */
int wf_fair_seat_cap(const wf_fair *f, const wf_fair_entry *e, int max_running, double knee,
                     uint64_t now_ns);
/* One iteration's refill of every entry's credit: its weighted share of n_active x step_ms
 * (step_ms: the step's fixed cost a; with equal weights each active virtual model may add one
 * fixed cost per step), kept within [-bank_ms, bank_ms + that share x 4] so that a
 * virtual model ahead of the others adds on average at most its share to a step: its
 * decodes spend the credit first, its prompt chunks only what is left (see the core). An
 * inactive entry's credit is reset to 0. */
void wf_fair_refill(wf_fair *f, double step_ms, double bank_ms, uint64_t now_ns);
/* Served cost (>= 0) for e: vtime += cost / weight. */
void wf_fair_charge(wf_fair *f, wf_fair_entry *e, double cost);
/* Jain's fairness index of x[0..n): (sum x)^2 / (n sum x^2); 1 when all equal. */
double wf_fair_jain(const double *x, int n);

#endif
