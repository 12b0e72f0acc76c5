/* fcfs, priority and slo (EDF) orders over requests. */
#include "sched/policy.h"

#include <string.h>

#include "sched/fair.h"

static int cmp_u64(uint64_t a, uint64_t b) { return a < b ? -1 : a > b ? 1 : 0; }

/* A request past its TTFT deadline yields to the ones that can still meet theirs, but only for
 * WF_SLO_LATE_AGING more TTFT windows: its key becomes queued + (1 + aging) x TTFT, so newer
 * on-time requests overtake it only while they arrived less than aging x TTFT after it. Late
 * requests among themselves keep arrival order (same TTFT) and none waits unboundedly: plain
 * "late goes last" starved the oldest under sustained overload (p99 TTFT many times the
 * median). */
static uint64_t slo_key(const wf_request *r) {
    uint64_t d = wf__request_deadline_ns(r);
    if (r->ttft_missed) d += (uint64_t)(WF_SLO_LATE_AGING * r->ttft_ms * 1e6);
    return d;
}

void wf_sched_order_key(const wf_request *r, wf_order_key *out) {
    out->priority = r->spec.priority;
    out->serial = r->serial;
    out->slo_key = slo_key(r);
    out->vtime = r->fair ? r->fair->vtime : 0.0;
}

static int fcfs_key(const wf_order_key *a, const wf_order_key *b) { return cmp_u64(a->serial, b->serial); }

static int priority_key(const wf_order_key *a, const wf_order_key *b) {
    if (a->priority != b->priority) return a->priority > b->priority ? -1 : 1;
    return cmp_u64(a->serial, b->serial);
}

static int slo_key_compare(const wf_order_key *a, const wf_order_key *b) {
    int c = cmp_u64(a->slo_key, b->slo_key);
    return c ? c : cmp_u64(a->serial, b->serial);
}

static int fair_key(const wf_order_key *a, const wf_order_key *b) {
    if (a->vtime != b->vtime) return a->vtime < b->vtime ? -1 : 1;
    return cmp_u64(a->serial, b->serial);
}

/* compare(a, b) is key_compare on the two requests' keys. */
#define KEYED_COMPARE(name, key_fn)                                      \
    static int name(const wf_request *a, const wf_request *b) {          \
        wf_order_key ka, kb;                                             \
        wf_sched_order_key(a, &ka);                                      \
        wf_sched_order_key(b, &kb);                                      \
        return key_fn(&ka, &kb);                                         \
    }
KEYED_COMPARE(fcfs_compare, fcfs_key)
KEYED_COMPARE(priority_compare, priority_key)
KEYED_COMPARE(slo_compare, slo_key_compare)
KEYED_COMPARE(fair_compare, fair_key)

/* Victim orders: the request that compares greatest is preempted first. */
static int fcfs_victim(const wf_request *a, const wf_request *b) { return fcfs_compare(a, b); }

static int priority_victim(const wf_request *a, const wf_request *b) {
    return priority_compare(a, b);
}

static bool priority_displaces(const wf_request *w, const wf_request *r) {
    return w->spec.priority > r->spec.priority;
}

static int slo_victim(const wf_request *a, const wf_request *b) {
    uint64_t da = a->times.queued_ns + (uint64_t)(a->ttft_ms * 1e6);
    uint64_t db = b->times.queued_ns + (uint64_t)(b->ttft_ms * 1e6);
    int c = cmp_u64(da, db);
    return c ? c : cmp_u64(a->serial, b->serial);
}

static int fair_victim(const wf_request *a, const wf_request *b) { return fair_compare(a, b); }

/* A virtual model behind another by more than the margin takes a seat from it: without this,
 * a light tenant waits for a noisy one's long requests to end, however far behind it is. */
static bool fair_displaces(const wf_request *w, const wf_request *r) {
    if (!w->fair || !r->fair || w->fair == r->fair) return false;
    return w->fair->vtime + w->fair->owner->displace_margin < r->fair->vtime;
}

static const wf_sched_policy policies[] = {
    {"fcfs", fcfs_key, fcfs_compare, fcfs_victim, false, NULL, false},
    {"priority", priority_key, priority_compare, priority_victim, false, priority_displaces, false},
    {"slo", slo_key_compare, slo_compare, slo_victim, true, NULL, false},
    {"fair", fair_key, fair_compare, fair_victim, false, fair_displaces, true},
};

const wf_sched_policy *wf_sched_policy_find(const char *name) {
    if (!name) name = "slo";
    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
        if (strcmp(policies[i].name, name) == 0) return &policies[i];
    return NULL;
}

const char *wf_sched_policy_names(void) { return "fcfs, priority, slo, fair"; }
