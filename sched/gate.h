/* Turns on shared cores: executors of different classes (LLM batches, DiT batches) that run on
 * the same CPU cores take turns instead of running their thread pools at once (which
 * oversubscribes the cores and stretches both). Among the work waiting, the earliest key goes
 * first (EDF over text and image work): the key is the deadline minus the predicted run time
 * (the time the work must start by; 0 predicted: the deadline itself). A deadline is the
 * work's earliest task deadline_ns, or, when none states one, the time it became ready plus
 * its class's slack (wf_gate_set_slack; no slack: never before work with a deadline). Equal
 * keys (e.g. none anywhere) go round robin between the classes; one class alone runs back to
 * back. Shares (wf_gate_set_share): a waiting class whose part of the recently served time
 * (decayed over ~1 s) is below its minimum share goes first whatever the keys, so a stream
 * of earlier-keyed work of one class cannot take all the cores.
 *
 * Two ways to wait for a turn. A batch already composed waits in the gate's order, dispatched
 * to its gated executor (keyed by its earliest task deadline; wf_gate_acquire_by is the same
 * wait for a caller's own thread). Or late binding: the scheduler posts a
 * claim (wf_gated_executor_claim: its most urgent ready work's deadline and predicted time,
 * re-posted whenever they change) and composes its batch only when the gate grants the claim
 * (the callback, from whichever thread freed the gate, often the runner: it must only wake
 * the scheduler);
 * then it dispatches that batch to the gated executor, which runs it without waiting again, or
 * calls wf_gated_executor_unclaim when it has nothing to run after all (the turn passes on).
 * With late binding the turns follow one EDF order over the ready work of every class, and
 * work that arrives while a claim waits still joins its batch.
 *
 *     // the scheduler's loop, per gated executor x with ready work:
 *     if (!wf_gated_executor_granted(x)) wf_gated_executor_claim(x, deadline, pred_ms, wake, s);
 *     else if (compose(&b)) wf_executor_dispatch(wf_gated_executor_get(x), &b, done, s);
 *     else wf_gated_executor_unclaim(x);
 *
 *     wf_gate *g = wf_gate_new(2);                        // classes 0 (text) and 1 (images)
 *     wf_executor llm, dit;                               // e.g. the CPU engine, the DiT executor
 *     wf_gated_executor *gl, *gd;
 *     wf_gated_executor_new(llm, g, 0, &gl);
 *     wf_gated_executor_new(dit, g, 1, &gd);
 *     wf_executor ex = wf_gated_executor_get(gl);         // give this to the scheduler
 *     ...
 *     wf_gated_executor_free(gl); wf_gated_executor_free(gd); wf_gate_free(g);
 *
 * One runner thread per gate runs the batches of all its gated executors (one batch runs at a
 * time anyway): a dispatched batch waits in the order for its turn (its earliest task
 * deadline), unless its executor holds a granted claim; the runner runs it on the inner
 * executor, on the runner's own thread when the inner executor has a run op (proto/task.h),
 * then passes the turn on and calls the batch's done. The thread that ends a turn thus takes
 * the next queued batch itself: no thread wake-up between two turns whose batches are
 * composed (a claim's turn still waits for its scheduler to compose and dispatch). A batch
 * cancelled while queued is reported at once (WF_ECANCELLED, from the cancelling thread);
 * one cancelled on a granted claim gives the turn back, as wf_gated_executor_unclaim does.
 * Each turn is timed (wf_gate_get_turn_stats): where the time between turns goes. The inner
 * executor must outlive the gated one. Thread-safe; turns are counted per class for stats. */
#ifndef WF_SCHED_GATE_H
#define WF_SCHED_GATE_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/base/status.h"
#include "proto/task.h"

#define WF_GATE_MAX_CLASSES 8

typedef struct wf_gate wf_gate;

/* NULL on bad n_classes (1..WF_GATE_MAX_CLASSES) or no memory. */
wf_gate *wf_gate_new(int n_classes);
void wf_gate_free(wf_gate *g);
/* A batch of class cls that states no deadline gets arrival + slack_ms (0: none). */
void wf_gate_set_slack(wf_gate *g, int cls, double slack_ms);
/* Blocks until this batch may run (EDF, then round robin, then arrival). deadline_ns 0: none. */
void wf_gate_acquire_by(wf_gate *g, int cls, uint64_t deadline_ns);
/* wf_gate_acquire_by(g, cls, 0). */
void wf_gate_acquire(wf_gate *g, int cls);
void wf_gate_release(wf_gate *g, int cls);
/* Look-ahead (default off): while a batch runs, the claim next in the order is granted at once
 * (its callback runs then), so its scheduler composes its batch during the running one and
 * that batch runs as soon as the turn passes (one thread wake-up between turns, as a composed
 * batch waiting at the gate has, instead of two); the batch is then bound up to one batch
 * early. Nothing else is granted while that reservation stands; an unclaim gives it up. */
void wf_gate_set_lookahead(wf_gate *g, bool on);
bool wf_gate_lookahead(wf_gate *g);
/* Minimum fraction (0..1, exclusive; 0: none) of the served time class cls gets while it waits. */
void wf_gate_set_share(wf_gate *g, int cls, double share);
/* Turns taken by class so far; of them, those given by the share rule rather than the key. */
uint64_t wf_gate_turns(wf_gate *g, int cls);
uint64_t wf_gate_share_turns(wf_gate *g, int cls);
/* Batches waiting for a turn now. */
int wf_gate_waiting(wf_gate *g);

/* Where the time between turns goes (wf_gate_get_turn_stats). A histogram of microseconds in
 * powers of two: bucket 0 holds < 1 us, bucket i holds [2^(i-1), 2^i) us, the last one the
 * rest. */
#define WF_GATE_HIST_BUCKETS 24
typedef struct wf_gate_hist {
    uint64_t n;
    double sum_us;
    uint64_t bucket[WF_GATE_HIST_BUCKETS];
} wf_gate_hist;

/* Per turn, timed on the monotonic clock; a turn's compute is its batch's first task begin to
 * last task end (as its executor stamped them; without stamps, the inner run). The first three
 * count only turns whose work already waited when the turn before was released: the cores'
 * idle time between two turns when there was work to do. */
typedef struct wf_gate_turn_stats {
    wf_gate_hist handover;       /* the previous turn's compute end -> this turn's compute start */
    wf_gate_hist to_grant;       /* the previous release -> this turn taken (granted) */
    wf_gate_hist grant_to_run;   /* taken -> compute start (a claim: its scheduler composes and
                                  * dispatches; then thread hand-overs to the inner executor) */
    wf_gate_hist end_to_release; /* compute end -> the turn released (every turn) */
    wf_gate_hist compute;        /* compute start -> end (every turn) */
    wf_gate_hist compute_by_class[WF_GATE_MAX_CLASSES];
} wf_gate_turn_stats;

void wf_gate_get_turn_stats(wf_gate *g, wf_gate_turn_stats *out);
/* The upper bound (us) of the bucket holding quantile q (0..1) of h; 0 when h is empty. */
double wf_gate_hist_quantile(const wf_gate_hist *h, double q);

typedef struct wf_gated_executor wf_gated_executor;

/* Gated executors one gate takes (the daemon's LLM and each of its DiT models). */
#define WF_GATE_MAX_EXECUTORS 32
/* WF_EINVAL (class out of range, no inner ops), WF_ENOMEM, WF_EIO (thread), WF_EFULL (the
 * gate has WF_GATE_MAX_EXECUTORS already). */
wf_status wf_gated_executor_new(wf_executor inner, wf_gate *g, int cls, wf_gated_executor **out);
wf_executor wf_gated_executor_get(wf_gated_executor *x);
/* Called, once per grant, when a waiting claim gets the turn (from the thread that freed the
 * gate); not when wf_gated_executor_claim grants the caller's claim at once. */
typedef void (*wf_gate_grant_fn)(void *user);
/* Posts or updates x's claim: its most urgent ready work is due deadline_ns (0: none) and
 * predicted to run pred_ms. Already granted: no-op. WF_EFULL: the gate's table is full. */
wf_status wf_gated_executor_claim(wf_gated_executor *x, uint64_t deadline_ns, double pred_ms,
                                  wf_gate_grant_fn fn, void *user);
/* Whether x holds a granted turn not yet used by a batch. */
bool wf_gated_executor_granted(wf_gated_executor *x);
/* Withdraws x's claim; a granted turn not used is released. */
void wf_gated_executor_unclaim(wf_gated_executor *x);
/* Runs what is queued, then stops (a pending claim is withdrawn). NULL is a no-op. */
void wf_gated_executor_free(wf_gated_executor *x);

#endif
