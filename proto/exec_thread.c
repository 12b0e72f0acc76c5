/* The executor worker thread (proto/exec_thread.h). */
#include "proto/exec_thread.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct slot {
    wf_task_batch *batch;
    wf_executor_done_fn done;
    void *user;
} slot;

struct wf_exec_thread {
    char name[32];
    wf_exec_thread_run_fn run;
    void *ctx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work, idle;
    slot *ring;
    int cap, head, count;
    bool running_one;   /* the worker holds a batch outside the ring */
    bool closing;
    unsigned long long dispatched;
};

static void *worker(void *arg) {
    wf_exec_thread *t = arg;
    char msg[160];
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (t->count == 0 && !t->closing) pthread_cond_wait(&t->work, &t->lock);
        if (t->count == 0) break; /* closing and nothing left */
        slot s = t->ring[t->head];
        t->head = (t->head + 1) % t->cap;
        t->count--;
        t->running_one = true;
        pthread_mutex_unlock(&t->lock);
        msg[0] = '\0';
        wf_status st = t->run(t->ctx, s.batch, msg, sizeof msg);
        /* running_one is cleared only after done returned: synchronize() promises that every
         * done has been called. */
        s.done(s.user, s.batch, st, msg[0] ? msg : NULL);
        pthread_mutex_lock(&t->lock);
        t->running_one = false;
        if (t->count == 0) pthread_cond_broadcast(&t->idle);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

wf_status wf_exec_thread_new(const char *name, int max_queued, wf_exec_thread_run_fn run,
                             void *ctx, wf_exec_thread **out) {
    *out = NULL;
    if (!run || max_queued < 1) return WF_EINVAL;
    wf_exec_thread *t = calloc(1, sizeof *t);
    if (!t) return WF_ENOMEM;
    wf_status st = WF_ENOMEM;
    snprintf(t->name, sizeof t->name, "%s", name ? name : "executor");
    t->run = run;
    t->ctx = ctx;
    t->cap = max_queued;
    if (!(t->ring = calloc((size_t)max_queued, sizeof *t->ring))) goto fail_ring;
    if (pthread_mutex_init(&t->lock, NULL) != 0) goto fail_lock;
    if (pthread_cond_init(&t->work, NULL) != 0) goto fail_work;
    if (pthread_cond_init(&t->idle, NULL) != 0) goto fail_idle;
    if (pthread_create(&t->thread, NULL, worker, t) != 0) {
        st = WF_EIO;
        goto fail_thread;
    }
    *out = t;
    return WF_OK;
fail_thread:
    pthread_cond_destroy(&t->idle);
fail_idle:
    pthread_cond_destroy(&t->work);
fail_work:
    pthread_mutex_destroy(&t->lock);
fail_lock:
    free(t->ring);
fail_ring:
    free(t);
    return st;
}

wf_status wf_exec_thread_dispatch(wf_exec_thread *t, wf_task_batch *batch,
                                  wf_executor_done_fn done, void *user) {
    if (!batch || !done) return WF_EINVAL;
    pthread_mutex_lock(&t->lock);
    wf_status st = WF_OK;
    if (t->closing) {
        st = WF_ECLOSED;
    } else if (t->count == t->cap) {
        st = WF_EBUSY;
    } else {
        t->ring[(t->head + t->count) % t->cap] = (slot){batch, done, user};
        t->count++;
        t->dispatched++;
        pthread_cond_signal(&t->work);
    }
    pthread_mutex_unlock(&t->lock);
    return st;
}

void wf_exec_thread_cancel(wf_exec_thread *t, wf_task_batch *batch) {
    slot found = {0};
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < t->count; i++) {
        int k = (t->head + i) % t->cap;
        if (t->ring[k].batch != batch) continue;
        found = t->ring[k];
        /* Close the gap, keeping the order of the others. */
        for (int j = i; j + 1 < t->count; j++)
            t->ring[(t->head + j) % t->cap] = t->ring[(t->head + j + 1) % t->cap];
        t->count--;
        break;
    }
    bool idle = t->count == 0 && !t->running_one;
    pthread_mutex_unlock(&t->lock);
    if (found.batch) found.done(found.user, found.batch, WF_ECANCELLED, "cancelled before it ran");
    if (idle) {
        pthread_mutex_lock(&t->lock);
        pthread_cond_broadcast(&t->idle);
        pthread_mutex_unlock(&t->lock);
    }
}

void wf_exec_thread_synchronize(wf_exec_thread *t) {
    pthread_mutex_lock(&t->lock);
    while (t->count > 0 || t->running_one) pthread_cond_wait(&t->idle, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

unsigned long long wf_exec_thread_batches(wf_exec_thread *t) {
    pthread_mutex_lock(&t->lock);
    unsigned long long n = t->dispatched;
    pthread_mutex_unlock(&t->lock);
    return n;
}

void wf_exec_thread_free(wf_exec_thread *t) {
    if (!t) return;
    pthread_mutex_lock(&t->lock);
    t->closing = true;
    pthread_cond_signal(&t->work);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->idle);
    pthread_cond_destroy(&t->work);
    pthread_mutex_destroy(&t->lock);
    free(t->ring);
    free(t);
}
