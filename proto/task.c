/* Task vocabulary and the executor seam's small helpers (proto/task.h). */
#include "proto/task.h"

#include <pthread.h>
#include <stdio.h>

const char *wf_task_kind_str(wf_task_kind kind) {
    switch (kind) {
    case WF_TASK_PREFILL: return "prefill";
    case WF_TASK_DECODE: return "decode";
    case WF_TASK_ENCODE: return "encode";
    case WF_TASK_DENOISE: return "denoise";
    case WF_TASK_DECODE_IMAGE: return "decode_image";
    case WF_TASK_FINISH: return "finish";
    case WF_TASK_KIND_COUNT: break;
    }
    return "unknown";
}

bool wf_executor_supports(wf_executor ex, wf_task_kind kind) {
    if (!ex.ops) return false;
    if (ex.ops->supports) return ex.ops->supports(ex.ctx, kind);
    return kind == WF_TASK_PREFILL || kind == WF_TASK_DECODE || kind == WF_TASK_FINISH;
}

wf_status wf_executor_dispatch(wf_executor ex, wf_task_batch *batch, wf_executor_done_fn done,
                               void *user) {
    if (!ex.ops || !ex.ops->dispatch || !batch || !done) return WF_EINVAL;
    return ex.ops->dispatch(ex.ctx, batch, done, user);
}

/* wf_executor_run waits on this until the executor's done callback fires. */
typedef struct run_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    wf_status status;
    char *message;
    size_t cap;
} run_wait;

static void run_done(void *user, wf_task_batch *batch, wf_status status, const char *message) {
    (void)batch;
    run_wait *w = user;
    pthread_mutex_lock(&w->lock);
    w->status = status;
    if (w->message && w->cap) snprintf(w->message, w->cap, "%s", message ? message : "");
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

wf_status wf_executor_run(wf_executor ex, wf_task_batch *batch, char *message, size_t cap) {
    run_wait w = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
                  .message = message, .cap = cap};
    if (message && cap) message[0] = '\0';
    wf_status st = wf_executor_dispatch(ex, batch, run_done, &w);
    if (st == WF_OK) {
        pthread_mutex_lock(&w.lock);
        while (!w.done) pthread_cond_wait(&w.cond, &w.lock);
        st = w.status;
        pthread_mutex_unlock(&w.lock);
    }
    pthread_cond_destroy(&w.cond);
    pthread_mutex_destroy(&w.lock);
    return st;
}

wf_status wf_executor_run_here(wf_executor ex, wf_task_batch *batch, char *message, size_t cap) {
    if (!ex.ops->run) return wf_executor_run(ex, batch, message, cap);
    char scratch[8];
    if (!message || !cap) {
        message = scratch;
        cap = sizeof scratch;
    }
    message[0] = '\0';
    return ex.ops->run(ex.ctx, batch, message, cap);
}

void wf_executor_free(wf_executor ex) {
    if (ex.ops && ex.ops->free) ex.ops->free(ex.ctx);
}
