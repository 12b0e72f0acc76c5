/* Internal: several device groups ("lanes"), each planned by its own core (sched/core.h) over its
 * own paged KV pool, because each group (a worker, a remote process) holds its own KV. Pure like
 * the core: the scheduler thread (sched.c) and the simulator (sim.c) drive the same code.
 *
 *     wf_lanes l;
 *     wf_lanes_init(&l);
 *     int g0, g1;
 *     wf_lanes_add(&l, &cfg0, &g0);                 // a core config per group (pool, group)
 *     wf_lanes_add(&l, &cfg1, &g1);
 *     wf_lanes_add_request(&l, req, now);           // routed and bound to one group
 *     for (int g = 0; g < l.n; g++)                 // one batch per idle group
 *         if (wf_lanes_can_plan(&l, g)) {
 *             wf_task_batch *b = wf_core_plan(&l.lane[g]->core, now);
 *             if (b->n_tasks) { l.lane[g]->busy = true; dispatch(g, b); }
 *         }
 *     // on group g's completion:
 *     l.lane[g]->busy = false; wf_core_complete(&l.lane[g]->core, st, msg, now);
 *     // group g's process died (after its last batch reported):
 *     wf_lanes_down(&l, g, WF_ECLOSED, "worker 1 died", now);
 *     wf_lanes_free(&l, now);
 *
 * Routing (at admission, once per request): among the live groups whose KV can hold the
 * request, those not much busier than the least loaded (load <= 2 x min + 2 requests) are
 * candidates; the candidate whose prefix cache holds the longest prefix of the prompt wins
 * (affinity), then the least loaded, then the most free blocks, then the lowest id. A request
 * stays on its group: its KV is there, and preemption/recompute happen within the group.
 * Requests are numbered here (arrival order across groups), so a request moved off a group
 * that went down keeps its place in its new group's queue.
 *
 * Not thread-safe: the owner thread only. A lane that went down stays in its slot, empty and
 * not live, until a new lane takes the slot (wf_lanes_add_at): a flapping worker gets a new
 * group per restart, and without reuse 64 restarts would exhaust the slots. A lane's task and
 * sequence ids come from the count of lanes ever made, not from its slot, so ids of a slot's
 * new lane never repeat its predecessor's. */
#ifndef WF_SCHED_LANES_H
#define WF_SCHED_LANES_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/core.h"

#define WF_LANES_MAX 64

typedef struct wf_lane {
    wf_core core;
    int id;                  /* its slot: index in wf_lanes.lane */
    bool live;               /* takes new requests and runs batches */
    bool busy;               /* a batch of this lane is in flight (set by the owner) */
} wf_lane;

typedef struct wf_lanes {
    wf_lane *lane[WF_LANES_MAX];
    int n;                   /* slots in use (lanes live or down) */
    uint64_t n_made;         /* lanes ever made: the top bits of their task and sequence ids */
    uint64_t next_serial;
    uint64_t rerouted_total; /* requests moved off a group that went down */
} wf_lanes;

void wf_lanes_init(wf_lanes *l);
/* A new live lane planned with cfg (its own pool; cb shared by every lane is fine), in the
 * first free slot (wf_lanes_free_slot); *out_id is the slot. Task and sequence ids are made
 * unique across lanes. WF_EFULL (no free slot), WF_EINVAL, WF_ENOMEM. */
wf_status wf_lanes_add(wf_lanes *l, const wf_core_config *cfg, int *out_id);
/* The slot the next wf_lanes_add takes: the first lane that went down and holds nothing (not
 * live, not busy, no request), else l->n; -1 when every one of the WF_LANES_MAX slots holds a
 * lane that is live or still busy. */
int wf_lanes_free_slot(const wf_lanes *l);
/* As wf_lanes_add, in slot (l->n to append, or a slot wf_lanes_free_slot would give: the old
 * lane is freed). WF_EINVAL when the slot is neither; on any error the old lane stays. */
wf_status wf_lanes_add_at(wf_lanes *l, int slot, const wf_core_config *cfg);
/* Every lane's requests are retired as cancelled; frees the lanes (not their pools). */
void wf_lanes_free(wf_lanes *l, uint64_t now_ns);
/* The lane a new request would be bound to (see Routing), or -1 when no live lane can hold
 * it. Does not change anything. */
int wf_lanes_route(const wf_lanes *l, const wf_request *r);
/* Numbers, routes and adds the request. WF_ECLOSED when no live lane can hold it (nothing
 * changed: the caller ends the request), WF_ENOMEM. */
wf_status wf_lanes_add_request(wf_lanes *l, wf_request *r, uint64_t now_ns);
/* Lane id went down: it stops being live and its requests leave it (wf_core_evict): those
 * that have not produced a token yet are re-routed to a live lane, the others (and every one
 * when no live lane is left) end with FINISHED(error, status, message). Call once the lane has
 * no batch in flight, or when its executor will never touch that batch again. */
void wf_lanes_down(wf_lanes *l, int id, wf_status status, const char *message, uint64_t now_ns);
/* Whether lane id is live, idle and has work. */
bool wf_lanes_can_plan(const wf_lanes *l, int id);
int wf_lanes_n_requests(const wf_lanes *l);
int wf_lanes_n_live(const wf_lanes *l);
/* The load summed over the live lanes (admission control). */
void wf_lanes_get_load(const wf_lanes *l, wf_core_load *out);
/* Summed wf_core_get_load_ahead over live groups. */
void wf_lanes_get_load_ahead(const wf_lanes *l, const wf_request *probe, wf_core_load *out);
/* Ends every request of every lane (FINISHED with reason/status). */
void wf_lanes_abort_all(wf_lanes *l, wf_finish_reason reason, wf_status status,
                        const char *message, uint64_t now_ns);

#endif
