/* Round-robin turns on shared cores, and the executor decorator that takes them (gate.h). */
#include "sched/gate.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "proto/exec_thread.h"

struct wf_gate {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int n_classes;
    bool busy;
    int last;                              /* the class that ran last */
    int waiting[WF_GATE_MAX_CLASSES];
    uint64_t turns[WF_GATE_MAX_CLASSES];
};

wf_gate *wf_gate_new(int n_classes) {
    if (n_classes < 1 || n_classes > WF_GATE_MAX_CLASSES) return NULL;
    wf_gate *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->n_classes = n_classes;
    g->last = n_classes - 1;
    return g;
}

void wf_gate_free(wf_gate *g) {
    if (!g) return;
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cv);
    free(g);
}

/* The class whose turn it is among those waiting: the first after `last`, cyclically. */
static int next_class(const wf_gate *g) {
    for (int k = 1; k <= g->n_classes; k++) {
        int c = (g->last + k) % g->n_classes;
        if (g->waiting[c] > 0) return c;
    }
    return -1;
}

void wf_gate_acquire(wf_gate *g, int cls) {
    pthread_mutex_lock(&g->lock);
    g->waiting[cls]++;
    while (g->busy || next_class(g) != cls) pthread_cond_wait(&g->cv, &g->lock);
    g->waiting[cls]--;
    g->busy = true;
    g->last = cls;
    g->turns[cls]++;
    pthread_mutex_unlock(&g->lock);
}

void wf_gate_release(wf_gate *g, int cls) {
    (void)cls;
    pthread_mutex_lock(&g->lock);
    g->busy = false;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->lock);
}

uint64_t wf_gate_turns(wf_gate *g, int cls) {
    pthread_mutex_lock(&g->lock);
    uint64_t n = cls >= 0 && cls < g->n_classes ? g->turns[cls] : 0;
    pthread_mutex_unlock(&g->lock);
    return n;
}

/* ---- the decorator ---- */

struct wf_gated_executor {
    wf_executor inner;
    wf_gate *gate;
    int cls;
    wf_exec_thread *thread;
    char name[32];
    wf_executor_ops ops;
};

static wf_status gated_run(void *ctx, wf_task_batch *b, char *msg, size_t cap) {
    wf_gated_executor *x = ctx;
    wf_gate_acquire(x->gate, x->cls);
    wf_status st = wf_executor_run(x->inner, b, msg, cap);
    wf_gate_release(x->gate, x->cls);
    return st;
}

static bool gated_supports(void *ctx, wf_task_kind kind) {
    wf_gated_executor *x = ctx;
    return wf_executor_supports(x->inner, kind);
}

static wf_status gated_dispatch(void *ctx, wf_task_batch *b, wf_executor_done_fn done, void *user) {
    wf_gated_executor *x = ctx;
    return wf_exec_thread_dispatch(x->thread, b, done, user);
}

static void gated_cancel(void *ctx, wf_task_batch *b) {
    wf_gated_executor *x = ctx;
    wf_exec_thread_cancel(x->thread, b);
}

static void gated_synchronize(void *ctx) {
    wf_gated_executor *x = ctx;
    wf_exec_thread_synchronize(x->thread);
}

wf_status wf_gated_executor_new(wf_executor inner, wf_gate *g, int cls, wf_gated_executor **out) {
    *out = NULL;
    if (!inner.ops || !g || cls < 0 || cls >= g->n_classes) return WF_EINVAL;
    wf_gated_executor *x = calloc(1, sizeof *x);
    if (!x) return WF_ENOMEM;
    x->inner = inner;
    x->gate = g;
    x->cls = cls;
    /* The inner executor's name, so stats and logs still say what runs the batches. */
    strncpy(x->name, inner.ops->name ? inner.ops->name : "gated", sizeof x->name - 1);
    x->ops = (wf_executor_ops){.name = x->name, .supports = gated_supports, .dispatch = gated_dispatch,
                               .cancel = gated_cancel, .synchronize = gated_synchronize};
    /* As deep a queue as an in-process executor takes: the schedulers keep one batch in
     * flight per group. */
    wf_status st = wf_exec_thread_new("gate", 4, gated_run, x, &x->thread);
    if (st != WF_OK) {
        free(x);
        return st;
    }
    *out = x;
    return WF_OK;
}

wf_executor wf_gated_executor_get(wf_gated_executor *x) {
    return (wf_executor){.ops = &x->ops, .ctx = x};
}

void wf_gated_executor_free(wf_gated_executor *x) {
    if (!x) return;
    wf_exec_thread_free(x->thread);
    free(x);
}
