/* fcfs, priority and slo (EDF) orders over requests. */
#include "sched/policy.h"

#include <string.h>

static int cmp_u64(uint64_t a, uint64_t b) { return a < b ? -1 : a > b ? 1 : 0; }

static int fcfs_compare(const wf_request *a, const wf_request *b) {
    return cmp_u64(a->serial, b->serial);
}

static int priority_compare(const wf_request *a, const wf_request *b) {
    if (a->spec.priority != b->spec.priority) return a->spec.priority > b->spec.priority ? -1 : 1;
    return cmp_u64(a->serial, b->serial);
}

static int slo_compare(const wf_request *a, const wf_request *b) {
    /* A request that already missed its TTFT cannot meet its SLO any more: serve the ones
     * that still can first (EDF otherwise collapses under overload, missing everything). */
    if (a->ttft_missed != b->ttft_missed) return a->ttft_missed ? 1 : -1;
    int c = cmp_u64(wf__request_deadline_ns(a), wf__request_deadline_ns(b));
    return c ? c : cmp_u64(a->serial, b->serial);
}

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

static const wf_sched_policy policies[] = {
    {"fcfs", fcfs_compare, fcfs_victim, false, NULL},
    {"priority", priority_compare, priority_victim, false, priority_displaces},
    {"slo", slo_compare, slo_victim, true, NULL},
};

const wf_sched_policy *wf_sched_policy_find(const char *name) {
    if (!name) name = "slo";
    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
        if (strcmp(policies[i].name, name) == 0) return &policies[i];
    return NULL;
}

const char *wf_sched_policy_names(void) { return "fcfs, priority, slo"; }
