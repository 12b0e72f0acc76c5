/* Internal: weighted fair queueing across virtual models (the "fair" policy). Each virtual
 * model has a virtual time advanced by the cost it is actually served divided by its weight;
 * the policy orders requests by their virtual model's virtual time (the most-behind first,
 * then arrival), so a batch admits the most-behind backlogged virtual model's work and fills
 * the rest of the batch from the others. A virtual model that becomes backlogged again starts
 * at the system's virtual time (the least among the backlogged), so idle time is not banked.
 *
 *     wf_fair f; wf_fair_init(&f);
 *     wf_fair_entry *e = wf_fair_join(&f, spec.vmodel, spec.share_weight);  // request arrives
 *     wf_fair_charge(&f, e, cost);                                          // work planned
 *     wf_fair_leave(&f, e);                                                 // request ends
 *     wf_fair_free(&f);
 *
 * Owned by the scheduler thread (or the simulator); shared by every group's core, so a
 * re-routed request keeps its entry. Entries are never moved (requests point at them). */
#ifndef WF_SCHED_FAIR_H
#define WF_SCHED_FAIR_H

#include <stdint.h>

typedef struct wf_fair_entry {
    uint32_t vmodel;
    double weight;      /* > 0; the latest request's */
    double vtime;       /* served cost / weight, floored at the system time when re-joining */
    double served;      /* cost served in total */
    int backlog;        /* requests of it in the scheduler */
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
/* One more request of vmodel (weight <= 0 means 1). NULL on allocation failure. */
wf_fair_entry *wf_fair_join(wf_fair *f, uint32_t vmodel, double weight);
void wf_fair_leave(wf_fair *f, wf_fair_entry *e);
/* Served cost (>= 0) for e: vtime += cost / weight. */
void wf_fair_charge(wf_fair *f, wf_fair_entry *e, double cost);
/* Jain's fairness index of x[0..n): (sum x)^2 / (n sum x^2); 1 when all equal. */
double wf_fair_jain(const double *x, int n);

#endif
