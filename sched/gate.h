/* Turns on shared cores: executors of different classes (LLM batches, DiT batches) that run on
 * the same CPU cores take turns instead of running their thread pools at once (which
 * oversubscribes the cores and stretches both). Among the batches waiting, the earliest
 * deadline goes first (EDF over text and image work): a batch's deadline is its tasks' earliest
 * deadline_ns, or, when none states one, its arrival at the gate plus its class's slack
 * (wf_gate_set_slack; no slack: never before a batch with a deadline). Equal deadlines (e.g.
 * none anywhere) go round robin between the classes, so each class gets its share and none
 * starves; one class alone runs back to back.
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
 * A gated executor has its own thread (proto/exec_thread.h): it waits for the batch's turn (its
 * earliest task deadline), runs it on the inner executor (wf_executor_run), then passes the
 * turn on, and calls the batch's done. The inner executor must outlive it. Thread-safe; turns are counted per
 * class for stats. */
#ifndef WF_SCHED_GATE_H
#define WF_SCHED_GATE_H

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
/* Turns taken by class so far. */
uint64_t wf_gate_turns(wf_gate *g, int cls);
/* Batches waiting for a turn now. */
int wf_gate_waiting(wf_gate *g);

typedef struct wf_gated_executor wf_gated_executor;

/* WF_EINVAL (class out of range, no inner ops), WF_ENOMEM, WF_EIO (thread). */
wf_status wf_gated_executor_new(wf_executor inner, wf_gate *g, int cls, wf_gated_executor **out);
wf_executor wf_gated_executor_get(wf_gated_executor *x);
/* Runs what is queued, then stops. NULL is a no-op. */
void wf_gated_executor_free(wf_gated_executor *x);

#endif
