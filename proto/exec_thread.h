/* A worker thread behind the asynchronous executor seam (proto/task.h): an in-process executor
 * whose work is synchronous (a forward pass, a fake model) hands each dispatched batch to its
 * own thread and returns at once; the thread runs the batches in dispatch order and calls each
 * batch's done() from there.
 *
 *     static wf_status run(void *ctx, wf_task_batch *b, char *msg, size_t cap) { ...forward... }
 *     wf_exec_thread *t;
 *     wf_exec_thread_new("cpu", 2, run, engine, &t);
 *     // in the executor's ops:
 *     //   dispatch    -> wf_exec_thread_dispatch(t, batch, done, user)
 *     //   cancel      -> wf_exec_thread_cancel(t, batch)
 *     //   synchronize -> wf_exec_thread_synchronize(t)
 *     wf_exec_thread_free(t);   // runs what is queued, then joins
 *
 * run() is called on the worker thread only, one batch at a time; its status and message go to
 * done (message NULL when empty). The queue holds max_queued batches (fixed ring: dispatch
 * never allocates); dispatch returns WF_EBUSY when it is full and WF_ECLOSED after free began.
 * A batch cancelled while still queued is reported at once, from the cancelling thread, with
 * WF_ECANCELLED; one already running completes normally. Thread-safe: dispatch, cancel and
 * synchronize from any thread (done must not call back into the thread object). */
#ifndef WF_PROTO_EXEC_THREAD_H
#define WF_PROTO_EXEC_THREAD_H

#include <stddef.h>

#include "proto/base/status.h"
#include "proto/task.h"

typedef struct wf_exec_thread wf_exec_thread;

typedef wf_status (*wf_exec_thread_run_fn)(void *ctx, wf_task_batch *batch, char *message,
                                           size_t cap);

/* WF_EINVAL (no run, max_queued < 1), WF_ENOMEM, WF_EIO (the thread could not start). name is
 * copied (logs). */
wf_status wf_exec_thread_new(const char *name, int max_queued, wf_exec_thread_run_fn run,
                             void *ctx, wf_exec_thread **out);
wf_status wf_exec_thread_dispatch(wf_exec_thread *t, wf_task_batch *batch,
                                  wf_executor_done_fn done, void *user);
void wf_exec_thread_cancel(wf_exec_thread *t, wf_task_batch *batch);
/* Blocks until every batch dispatched before the call has called done. */
void wf_exec_thread_synchronize(wf_exec_thread *t);
/* Batches dispatched so far (for tests and stats). */
unsigned long long wf_exec_thread_batches(wf_exec_thread *t);
/* NULL is a no-op. Runs the queued batches, then stops and joins the thread. */
void wf_exec_thread_free(wf_exec_thread *t);

#endif
