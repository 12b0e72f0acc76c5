/* Round-robin turns on shared cores, and the executor decorator that takes them (gate.h). */
#include "sched/gate.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "proto/base/clock.h"
#include "proto/exec_thread.h"

#define MAX_WAITERS 64

typedef struct waiter {
    int cls;
    uint64_t deadline; /* effective: the batch's, or arrival + its class's slack */
    uint64_t ticket;   /* arrival order */
} waiter;

struct wf_gate {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int n_classes;
    bool busy;
    int last;                              /* the class that ran last */
    int waiting[WF_GATE_MAX_CLASSES];
    uint64_t turns[WF_GATE_MAX_CLASSES];
    uint64_t slack_ns[WF_GATE_MAX_CLASSES]; /* deadline of a batch that states none: arrival + slack */
    /* who waits, with their effective deadlines (EDF among them; ties round robin) */
    waiter w[MAX_WAITERS];
    int n_w;
    uint64_t next_ticket;
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

/* Rank of class c after `last` in the round-robin order (1 = next). */
static int rr_rank(const wf_gate *g, int c) {
    return (c - g->last + g->n_classes - 1) % g->n_classes + 1;
}

/* The waiter (ticket) whose turn it is: earliest deadline; on a tie the class next in round
 * robin after the last one; then arrival. */
static uint64_t next_ticket(const wf_gate *g) {
    int best = -1;
    for (int i = 0; i < g->n_w; i++) {
        if (best < 0) {
            best = i;
            continue;
        }
        const waiter *a = &g->w[i], *b = &g->w[best];
        if (a->deadline != b->deadline) {
            if (a->deadline < b->deadline) best = i;
        } else if (rr_rank(g, a->cls) != rr_rank(g, b->cls)) {
            if (rr_rank(g, a->cls) < rr_rank(g, b->cls)) best = i;
        } else if (a->ticket < b->ticket) {
            best = i;
        }
    }
    return best < 0 ? 0 : g->w[best].ticket;
}

void wf_gate_set_slack(wf_gate *g, int cls, double slack_ms) {
    pthread_mutex_lock(&g->lock);
    if (cls >= 0 && cls < g->n_classes) g->slack_ns[cls] = slack_ms > 0 ? (uint64_t)(slack_ms * 1e6) : 0;
    pthread_mutex_unlock(&g->lock);
}

void wf_gate_acquire_by(wf_gate *g, int cls, uint64_t deadline_ns) {
    pthread_mutex_lock(&g->lock);
    /* Waiters are bounded by the executors (one batch each); beyond the table, wait for room. */
    while (g->n_w >= MAX_WAITERS) pthread_cond_wait(&g->cv, &g->lock);
    uint64_t ticket = ++g->next_ticket;
    uint64_t d = deadline_ns;
    if (d == 0) d = g->slack_ns[cls] ? wf_clock_now_ns() + g->slack_ns[cls] : UINT64_MAX;
    g->w[g->n_w].cls = cls;
    g->w[g->n_w].deadline = d;
    g->w[g->n_w].ticket = ticket;
    g->n_w++;
    g->waiting[cls]++;
    while (g->busy || next_ticket(g) != ticket) pthread_cond_wait(&g->cv, &g->lock);
    for (int i = 0; i < g->n_w; i++) {
        if (g->w[i].ticket == ticket) {
            g->w[i] = g->w[--g->n_w];
            break;
        }
    }
    g->waiting[cls]--;
    g->busy = true;
    g->last = cls;
    g->turns[cls]++;
    pthread_mutex_unlock(&g->lock);
}

void wf_gate_acquire(wf_gate *g, int cls) { wf_gate_acquire_by(g, cls, 0); }

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

int wf_gate_waiting(wf_gate *g) {
    pthread_mutex_lock(&g->lock);
    int n = g->n_w;
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

/* The batch's earliest task deadline (0: none states one). */
static uint64_t batch_deadline(const wf_task_batch *b) {
    uint64_t d = 0;
    for (int i = 0; i < b->n_tasks; i++)
        if (b->tasks[i].deadline_ns && (d == 0 || b->tasks[i].deadline_ns < d)) d = b->tasks[i].deadline_ns;
    return d;
}

static wf_status gated_run(void *ctx, wf_task_batch *b, char *msg, size_t cap) {
    wf_gated_executor *x = ctx;
    wf_gate_acquire_by(x->gate, x->cls, batch_deadline(b));
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
