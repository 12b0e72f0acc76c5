/* Turns on shared cores (EDF on start-by keys, minimum shares, late-bound claims), and the executor decorator that takes them (gate.h). */
#include "sched/gate.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "proto/base/clock.h"

/* Gated executors per gate (the LLM and every DiT: the daemon takes up to 16 DiT models
 * beside its LLM), and batches each may have queued (the schedulers keep one in flight per
 * group). */
#define MAX_GATED WF_GATE_MAX_EXECUTORS
#define MAX_JOBS 4
/* Claims and blocked acquires fill the table up to MAX_OTHER_WAITERS; the rest is kept for
 * the queued batches' heads (one per gated executor), so a dispatched batch always finds its
 * place. */
#define MAX_OTHER_WAITERS 64
#define MAX_WAITERS (MAX_OTHER_WAITERS + MAX_GATED)
/* Time constant of the served-time average the minimum shares are checked against. */
#define SHARE_TAU_NS 1000000000.0

typedef struct waiter {
    int cls;
    uint64_t deadline; /* effective: the batch's, or arrival + its class's slack */
    uint64_t key;      /* the order: deadline minus the predicted run time (start-by time) */
    uint64_t ticket;   /* arrival order */
    wf_gated_executor *claimant; /* a claim (granted by callback) */
    wf_gated_executor *queued;   /* a composed batch: the head of this executor's queue */
    /* neither: a blocked wf_gate_acquire_by */
} waiter;

typedef struct job {
    wf_task_batch *b;
    wf_executor_done_fn done;
    void *user;
} job;

struct wf_gated_executor {
    wf_executor inner;
    wf_gate *gate;
    int cls;
    char name[32];
    wf_executor_ops ops;
    /* Under the gate's lock: */
    bool claimed;      /* a claim waits in the gate's table */
    bool granted;      /* the turn is this executor's; its next batch runs without waiting */
    bool ahead;        /* granted while another batch runs: its batch takes the next turn */
    bool ahead_share;  /* that grant was the share rule's (stats) */
    uint64_t claim_ticket;
    wf_gate_grant_fn grant_fn;
    void *grant_user;
    /* Batches dispatched, in order (the runner takes the head); running: the runner runs one
     * now; closing: freed, dispatch refused. */
    job q[MAX_JOBS];
    int n_q;
    int in_done; /* batches taken off the queue whose done is being called */
    bool running, closing;
};

struct wf_gate {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int n_classes;
    bool busy;
    bool lookahead;                        /* grant the next claim while a batch runs */
    wf_gated_executor *reserved;           /* granted ahead: the next turn is its batch's */
    int last;                              /* the class that ran last */
    int waiting[WF_GATE_MAX_CLASSES];
    uint64_t turns[WF_GATE_MAX_CLASSES];
    uint64_t slack_ns[WF_GATE_MAX_CLASSES]; /* deadline of a batch that states none: arrival + slack */
    double share[WF_GATE_MAX_CLASSES];      /* minimum fraction of the served time */
    double served[WF_GATE_MAX_CLASSES];     /* ns served, decayed with SHARE_TAU_NS */
    uint64_t decayed_ns, turn_ns;
    uint64_t share_turns[WF_GATE_MAX_CLASSES]; /* turns given by the share rule, not the key */
    /* who waits, with their effective deadlines (EDF among them; ties round robin) */
    waiter w[MAX_WAITERS];
    int n_w;
    uint64_t next_ticket;
    /* Where the time between turns goes (wf_gate_get_turn_stats). */
    wf_gate_turn_stats ts;
    uint64_t last_release_ns, last_end_ns; /* the previous used turn's release and compute end */
    bool waited_at_release;                /* work waited when that turn was released */
    bool cur_after_wait;                   /* the running turn's work waited then */
    uint64_t cur_prev_end_ns;
    /* The runner: one thread for every gated executor of this gate, since one batch runs at a
     * time. The thread that ends a turn takes the next one's batch itself when it is queued:
     * no thread wake-up between two turns. */
    wf_gated_executor *xs[MAX_GATED];
    int n_xs;
    pthread_t runner;
    bool runner_started, stop;
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
    if (g->runner_started) {
        pthread_mutex_lock(&g->lock);
        g->stop = true;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->lock);
        pthread_join(g->runner, NULL);
    }
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cv);
    free(g);
}

/* Rank of class c after `last` in the round-robin order (1 = next). */
static int rr_rank(const wf_gate *g, int c) {
    return (c - g->last + g->n_classes - 1) % g->n_classes + 1;
}

static void decay_locked(wf_gate *g, uint64_t now) {
    if (now <= g->decayed_ns) return;
    double f = g->decayed_ns ? exp(-(double)(now - g->decayed_ns) / SHARE_TAU_NS) : 1.0;
    for (int c = 0; c < g->n_classes; c++) g->served[c] *= f;
    g->decayed_ns = now;
}

/* The class owed its minimum share, if any waits: the one furthest below it (-1: none). A class
 * owed its share goes first whatever the keys say, so a stream of earlier-keyed work of the
 * other class cannot take all the time. */
static int owed_class(const wf_gate *g) {
    double total = 0;
    for (int c = 0; c < g->n_classes; c++) total += g->served[c];
    if (total <= 0) return -1;
    int owed = -1;
    double most = 0;
    for (int c = 0; c < g->n_classes; c++) {
        if (g->share[c] <= 0 || !g->waiting[c]) continue;
        double deficit = g->share[c] * total - g->served[c];
        if (deficit > most) {
            most = deficit;
            owed = c;
        }
    }
    return owed;
}

/* The index of the waiter whose turn it is (-1: none): the class owed its share if one is;
 * then the earliest key; on a tie the class next in round robin after the last one; then
 * arrival. */
static int pick_among(const wf_gate *g, int owed) {
    int best = -1;
    for (int i = 0; i < g->n_w; i++) {
        const waiter *a = &g->w[i];
        if (owed >= 0 && a->cls != owed) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const waiter *b = &g->w[best];
        if (a->key != b->key) {
            if (a->key < b->key) best = i;
        } else if (rr_rank(g, a->cls) != rr_rank(g, b->cls)) {
            if (rr_rank(g, a->cls) < rr_rank(g, b->cls)) best = i;
        } else if (a->ticket < b->ticket) {
            best = i;
        }
    }
    return best;
}

static int pick(const wf_gate *g) { return pick_among(g, owed_class(g)); }

/* Whether the share rule, not the key, decides the next turn (for stats). */
static bool share_decides(const wf_gate *g) {
    int owed = owed_class(g);
    return owed >= 0 && pick_among(g, owed) != pick_among(g, -1);
}

static uint64_t next_ticket(const wf_gate *g) {
    int i = pick(g);
    return i < 0 ? 0 : g->w[i].ticket;
}

static void remove_waiter(wf_gate *g, int i) {
    g->waiting[g->w[i].cls]--;
    g->w[i] = g->w[--g->n_w];
}

static void hist_add(wf_gate_hist *h, uint64_t ns) {
    double us = (double)ns / 1e3;
    int b = 0;
    while (b < WF_GATE_HIST_BUCKETS - 1 && us >= (double)(1ull << b)) b++;
    h->n++;
    h->sum_us += us;
    h->bucket[b]++;
}

double wf_gate_hist_quantile(const wf_gate_hist *h, double q) {
    if (!h->n) return 0;
    uint64_t want = (uint64_t)ceil(q * (double)h->n), seen = 0;
    if (want < 1) want = 1;
    for (int b = 0; b < WF_GATE_HIST_BUCKETS; b++) {
        seen += h->bucket[b];
        if (seen >= want) return (double)(1ull << b);
    }
    return (double)(1ull << (WF_GATE_HIST_BUCKETS - 1));
}

static void take_turn_locked(wf_gate *g, int cls, bool by_share) {
    g->busy = true;
    g->last = cls;
    g->turns[cls]++;
    if (by_share) g->share_turns[cls]++;
    g->turn_ns = wf_clock_now_ns();
    /* A hand-over counts when this turn's work was already waiting as the last one ended. */
    g->cur_after_wait = g->waited_at_release && g->last_release_ns;
    g->cur_prev_end_ns = g->last_end_ns;
    g->waited_at_release = false;
}

/* The running turn ends. begin/end: its compute (0: the whole turn); used false: a granted
 * turn nobody ran a batch on (not timed: the cores stayed idle, the previous compute end stays
 * the reference). Then the gate is free. */
static void end_turn_locked(wf_gate *g, int cls, uint64_t begin, uint64_t end, bool used) {
    uint64_t now = wf_clock_now_ns();
    decay_locked(g, now);
    if (g->busy && cls >= 0 && cls < g->n_classes && now > g->turn_ns) g->served[cls] += (double)(now - g->turn_ns);
    if (g->busy && used) {
        if (!begin || !end || end < begin) {
            begin = g->turn_ns;
            end = now;
        }
        hist_add(&g->ts.compute, end - begin);
        if (cls >= 0 && cls < g->n_classes) hist_add(&g->ts.compute_by_class[cls], end - begin);
        hist_add(&g->ts.end_to_release, now > end ? now - end : 0);
        if (g->cur_after_wait) {
            hist_add(&g->ts.handover, begin > g->cur_prev_end_ns ? begin - g->cur_prev_end_ns : 0);
            hist_add(&g->ts.grant_to_run, begin > g->turn_ns ? begin - g->turn_ns : 0);
            hist_add(&g->ts.to_grant, g->turn_ns > g->last_release_ns ? g->turn_ns - g->last_release_ns : 0);
        }
        g->last_release_ns = now;
        g->last_end_ns = end;
        g->waited_at_release = g->n_w > 0 || g->reserved;
    } else {
        g->waited_at_release |= g->n_w > 0 || g->reserved;
    }
    g->busy = false;
}

void wf_gate_get_turn_stats(wf_gate *g, wf_gate_turn_stats *out) {
    pthread_mutex_lock(&g->lock);
    *out = g->ts;
    pthread_mutex_unlock(&g->lock);
}

/* The gate is free: if the next turn is a claim's, grant it (returns the claimant, whose
 * callback the caller runs after unlocking); a blocked acquire's: wake the waiters. With
 * look-ahead, while a batch runs the claim next in the order is granted ahead (reserved): its
 * scheduler composes its batch meanwhile, and that batch takes the turn as soon as the running
 * one ends, one wake-up later instead of two (grant, then compose and dispatch). Nothing else
 * is granted while a reservation stands. */
static wf_gated_executor *grant_locked(wf_gate *g) {
    if (g->reserved || g->n_w == 0 || (g->busy && !g->lookahead)) return NULL;
    decay_locked(g, wf_clock_now_ns());
    int i = pick(g);
    if (i < 0) return NULL;
    wf_gated_executor *x = g->w[i].claimant;
    if (!x) {
        if (!g->busy) pthread_cond_broadcast(&g->cv);
        return NULL;
    }
    int cls = g->w[i].cls;
    bool by_share = share_decides(g);
    remove_waiter(g, i);
    x->claimed = false;
    x->granted = true;
    if (g->busy) {
        x->ahead = true;
        x->ahead_share = by_share;
        g->reserved = x;
        return x;
    }
    take_turn_locked(g, cls, by_share);
    return x;
}

static void notify(wf_gated_executor *x) {
    if (x && x->grant_fn) x->grant_fn(x->grant_user);
}

void wf_gate_set_slack(wf_gate *g, int cls, double slack_ms) {
    pthread_mutex_lock(&g->lock);
    if (cls >= 0 && cls < g->n_classes) g->slack_ns[cls] = slack_ms > 0 ? (uint64_t)(slack_ms * 1e6) : 0;
    pthread_mutex_unlock(&g->lock);
}

void wf_gate_set_lookahead(wf_gate *g, bool on) {
    pthread_mutex_lock(&g->lock);
    g->lookahead = on;
    pthread_mutex_unlock(&g->lock);
}

bool wf_gate_lookahead(wf_gate *g) {
    pthread_mutex_lock(&g->lock);
    bool on = g->lookahead;
    pthread_mutex_unlock(&g->lock);
    return on;
}

void wf_gate_set_share(wf_gate *g, int cls, double share) {
    pthread_mutex_lock(&g->lock);
    if (cls >= 0 && cls < g->n_classes) g->share[cls] = share > 0 && share < 1 ? share : 0;
    pthread_mutex_unlock(&g->lock);
}

/* The key of work due by deadline_ns (0: none) that is predicted to run pred_ms. */
static void set_keys(const wf_gate *g, waiter *w, uint64_t deadline_ns, double pred_ms, uint64_t since_ns) {
    uint64_t d = deadline_ns;
    if (d == 0) d = g->slack_ns[w->cls] ? since_ns + g->slack_ns[w->cls] : UINT64_MAX;
    w->deadline = d;
    uint64_t p = pred_ms > 0 ? (uint64_t)(pred_ms * 1e6) : 0;
    w->key = d == UINT64_MAX ? d : (d > p ? d - p : 0);
}

void wf_gate_acquire_by(wf_gate *g, int cls, uint64_t deadline_ns) {
    pthread_mutex_lock(&g->lock);
    /* Waiters are bounded by the executors (one batch each); beyond the table, wait for room. */
    while (g->n_w >= MAX_OTHER_WAITERS) pthread_cond_wait(&g->cv, &g->lock);
    uint64_t ticket = ++g->next_ticket;
    waiter *w = &g->w[g->n_w];
    *w = (waiter){.cls = cls, .ticket = ticket};
    set_keys(g, w, deadline_ns, 0, wf_clock_now_ns());
    g->n_w++;
    g->waiting[cls]++;
    wf_gated_executor *x = grant_locked(g); /* a claim may be next; else this wakes us */
    pthread_mutex_unlock(&g->lock);
    notify(x);
    pthread_mutex_lock(&g->lock);
    for (;;) {
        if (!g->busy) decay_locked(g, wf_clock_now_ns());
        if (!g->busy && !g->reserved && next_ticket(g) == ticket) break;
        pthread_cond_wait(&g->cv, &g->lock);
    }
    bool by_share = share_decides(g);
    for (int i = 0; i < g->n_w; i++) {
        if (g->w[i].ticket == ticket) {
            remove_waiter(g, i);
            break;
        }
    }
    take_turn_locked(g, cls, by_share);
    pthread_mutex_unlock(&g->lock);
}

void wf_gate_acquire(wf_gate *g, int cls) { wf_gate_acquire_by(g, cls, 0); }

static void release_turn(wf_gate *g, int cls, uint64_t begin, uint64_t end, bool used) {
    pthread_mutex_lock(&g->lock);
    end_turn_locked(g, cls, begin, end, used);
    pthread_cond_broadcast(&g->cv);
    wf_gated_executor *x = grant_locked(g);
    pthread_mutex_unlock(&g->lock);
    notify(x);
}

void wf_gate_release(wf_gate *g, int cls) { release_turn(g, cls, 0, 0, true); }

uint64_t wf_gate_turns(wf_gate *g, int cls) {
    pthread_mutex_lock(&g->lock);
    uint64_t n = cls >= 0 && cls < g->n_classes ? g->turns[cls] : 0;
    pthread_mutex_unlock(&g->lock);
    return n;
}

uint64_t wf_gate_share_turns(wf_gate *g, int cls) {
    pthread_mutex_lock(&g->lock);
    uint64_t n = cls >= 0 && cls < g->n_classes ? g->share_turns[cls] : 0;
    pthread_mutex_unlock(&g->lock);
    return n;
}

int wf_gate_waiting(wf_gate *g) {
    pthread_mutex_lock(&g->lock);
    int n = g->n_w;
    pthread_mutex_unlock(&g->lock);
    return n;
}

/* ---- claims: turns bound late, the batch composed when the turn comes ---- */

wf_status wf_gated_executor_claim(wf_gated_executor *x, uint64_t deadline_ns, double pred_ms,
                                  wf_gate_grant_fn fn, void *user) {
    wf_gate *g = x->gate;
    pthread_mutex_lock(&g->lock);
    x->grant_fn = fn;
    x->grant_user = user;
    if (x->granted) { /* the turn is already ours: the owner composes its batch now */
        pthread_mutex_unlock(&g->lock);
        return WF_OK;
    }
    waiter *w = NULL;
    if (x->claimed) {
        for (int i = 0; i < g->n_w; i++)
            if (g->w[i].claimant == x) w = &g->w[i];
    }
    if (!w) {
        if (g->n_w >= MAX_OTHER_WAITERS) {
            pthread_mutex_unlock(&g->lock);
            return WF_EFULL;
        }
        w = &g->w[g->n_w++];
        *w = (waiter){.cls = x->cls, .ticket = ++g->next_ticket, .claimant = x};
        g->waiting[x->cls]++;
        x->claimed = true;
        x->claim_ticket = wf_clock_now_ns(); /* ready since: a deadline-less claim's slack counts from here */
    }
    /* Re-posted as the owner's most urgent work changes: the key moves, the ticket stays. */
    set_keys(g, w, deadline_ns, pred_ms, x->claim_ticket);
    wf_gated_executor *gx = grant_locked(g);
    pthread_mutex_unlock(&g->lock);
    /* Granted to the caller in this call (an uncontended gate): it sees that from
     * wf_gated_executor_granted, and a wake-up of its own thread would only cost a loop. */
    if (gx != x) notify(gx);
    return WF_OK;
}

bool wf_gated_executor_granted(wf_gated_executor *x) {
    pthread_mutex_lock(&x->gate->lock);
    bool gr = x->granted;
    pthread_mutex_unlock(&x->gate->lock);
    return gr;
}

void wf_gated_executor_unclaim(wf_gated_executor *x) {
    wf_gate *g = x->gate;
    pthread_mutex_lock(&g->lock);
    if (x->claimed) {
        for (int i = 0; i < g->n_w; i++) {
            if (g->w[i].claimant == x) {
                remove_waiter(g, i);
                break;
            }
        }
        x->claimed = false;
    }
    bool had_turn = x->granted, ahead = x->ahead;
    x->granted = x->ahead = false;
    if (ahead) { /* granted ahead, nothing to run: the reservation goes, the order picks again */
        if (g->reserved == x) g->reserved = NULL;
        pthread_cond_broadcast(&g->cv);
        had_turn = false;
    }
    pthread_mutex_unlock(&g->lock);
    if (had_turn) {
        release_turn(g, x->cls, 0, 0, false); /* granted, nothing to run: the next one's turn */
    } else {
        pthread_mutex_lock(&g->lock);
        wf_gated_executor *gx = grant_locked(g);
        pthread_mutex_unlock(&g->lock);
        notify(gx);
    }
}

/* ---- the decorator: one runner per gate ---- */

/* The batch's earliest task deadline (0: none states one). */
static uint64_t batch_deadline(const wf_task_batch *b) {
    uint64_t d = 0;
    for (int i = 0; i < b->n_tasks; i++)
        if (b->tasks[i].deadline_ns && (d == 0 || b->tasks[i].deadline_ns < d)) d = b->tasks[i].deadline_ns;
    return d;
}

/* x's queue head waits for a turn in the order, as a composed batch does (unless x holds a
 * granted turn: then it is the next to run; or the head is running or picked to run: the one
 * after it is queued when it has been taken off). */
static void queue_head_locked(wf_gate *g, wf_gated_executor *x) {
    if (!x->n_q || x->granted || x->running) return;
    for (int i = 0; i < g->n_w; i++)
        if (g->w[i].queued == x) return;
    waiter *w = &g->w[g->n_w++]; /* room: MAX_OTHER_WAITERS leaves one per executor */
    *w = (waiter){.cls = x->cls, .ticket = ++g->next_ticket, .queued = x};
    set_keys(g, w, batch_deadline(x->q[0].b), 0, wf_clock_now_ns());
    g->waiting[x->cls]++;
}

static void unqueue_head_locked(wf_gate *g, wf_gated_executor *x) {
    for (int i = 0; i < g->n_w; i++) {
        if (g->w[i].queued == x) {
            remove_waiter(g, i);
            return;
        }
    }
}

/* The executor whose batch runs next, its turn taken (NULL: none may run now). A batch on a
 * granted claim holds its turn (granted ahead: once the running batch ends); else, with the
 * cores free and nothing reserved, the order picks among the composed batches, the claims and
 * the blocked acquires: a claim is granted (*grant: its callback, after unlocking), an acquire
 * woken. */
static wf_gated_executor *next_locked(wf_gate *g, wf_gated_executor **grant) {
    for (int i = 0; i < g->n_xs; i++) {
        wf_gated_executor *x = g->xs[i];
        if (!x->granted || !x->n_q) continue;
        if (!x->ahead) return x; /* the turn was taken when it was granted */
        if (g->busy) continue;
        if (g->reserved == x) g->reserved = NULL;
        decay_locked(g, wf_clock_now_ns());
        take_turn_locked(g, x->cls, x->ahead_share);
        return x;
    }
    if (g->busy || g->reserved || g->n_w == 0) return NULL;
    decay_locked(g, wf_clock_now_ns());
    int i = pick(g);
    if (i < 0) return NULL;
    wf_gated_executor *x = g->w[i].queued;
    if (!x) {
        *grant = grant_locked(g);
        return NULL;
    }
    if (!x->n_q) { /* (cannot happen: a head's waiter leaves with it) */
        remove_waiter(g, i);
        return next_locked(g, grant);
    }
    bool by_share = share_decides(g);
    remove_waiter(g, i);
    take_turn_locked(g, x->cls, by_share);
    return x;
}

static void *runner_main(void *arg) {
    wf_gate *g = arg;
    pthread_mutex_lock(&g->lock);
    wf_gated_executor *x = NULL; /* the executor whose head runs next, its turn taken */
    for (;;) {
        wf_gated_executor *gx = NULL;
        if (!x) x = next_locked(g, &gx);
        if (gx) {
            pthread_mutex_unlock(&g->lock);
            notify(gx);
            pthread_mutex_lock(&g->lock);
            continue;
        }
        if (!x) {
            if (g->stop) break;
            pthread_cond_wait(&g->cv, &g->lock);
            continue;
        }
        job j = x->q[0];
        unqueue_head_locked(g, x); /* (a head queued before its claim was granted) */
        x->granted = x->ahead = false;
        x->running = true; /* (already, when picked at the end of the last turn) */
        /* Look-ahead: the claim next in the order is granted now, its batch composed during
         * this one. */
        gx = g->lookahead ? grant_locked(g) : NULL;
        pthread_mutex_unlock(&g->lock);
        notify(gx);
        wf_task_batch *b = j.b;
        for (int i = 0; i < b->n_tasks; i++) b->tasks[i].t_begin_ns = b->tasks[i].t_end_ns = 0;
        char msg[256];
        /* On this thread, which holds the turn: no hand-over to the inner executor's thread
         * and back (two wake-ups per turn, each milliseconds on a loaded host). */
        wf_status st = wf_executor_run_here(x->inner, b, msg, sizeof msg);
        uint64_t begin = 0, end = 0; /* the compute, as the executor stamped its tasks */
        for (int i = 0; i < b->n_tasks; i++) {
            const wf_task *t = &b->tasks[i];
            if (t->t_begin_ns && (!begin || t->t_begin_ns < begin)) begin = t->t_begin_ns;
            if (t->t_end_ns > end) end = t->t_end_ns;
        }
        pthread_mutex_lock(&g->lock);
        end_turn_locked(g, x->cls, begin, end, true);
        memmove(&x->q[0], &x->q[1], (size_t)(x->n_q - 1) * sizeof x->q[0]);
        x->n_q--;
        x->in_done++;
        x->running = false;
        queue_head_locked(g, x);
        pthread_cond_broadcast(&g->cv); /* acquires, synchronize */
        /* The next turn is taken now, before the done: a composed batch next is this
         * thread's (marked running: a cancel leaves it be), a claim next is granted (its
         * scheduler wakes to compose). The done then wakes this batch's scheduler, which may
         * take this core for a moment: the turn is already decided. */
        wf_gated_executor *finished = x;
        x = next_locked(g, &gx);
        if (x) x->running = true;
        pthread_mutex_unlock(&g->lock);
        notify(gx);
        j.done(j.user, b, st, st != WF_OK && msg[0] ? msg : NULL);
        pthread_mutex_lock(&g->lock);
        finished->in_done--;
        pthread_cond_broadcast(&g->cv); /* synchronize: its done has been called */
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

static bool gated_supports(void *ctx, wf_task_kind kind) {
    wf_gated_executor *x = ctx;
    return wf_executor_supports(x->inner, kind);
}

static wf_status gated_dispatch(void *ctx, wf_task_batch *b, wf_executor_done_fn done, void *user) {
    wf_gated_executor *x = ctx;
    wf_gate *g = x->gate;
    pthread_mutex_lock(&g->lock);
    wf_status st = WF_OK;
    if (x->closing) st = WF_ECLOSED;
    else if (x->n_q >= MAX_JOBS) st = WF_EBUSY;
    if (st == WF_OK) {
        x->q[x->n_q++] = (job){.b = b, .done = done, .user = user};
        queue_head_locked(g, x);
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}

/* A batch still queued is reported cancelled at once (from this thread); a running one
 * completes. A head cancelled on a granted claim gives its turn back, as an unclaim does: the
 * turn was held for this batch (granted: the gate busy; ahead: reserved), and nobody else
 * would run on it until the owner unclaimed, every other class waiting meanwhile. */
static void gated_cancel(void *ctx, wf_task_batch *b) {
    wf_gated_executor *x = ctx;
    wf_gate *g = x->gate;
    pthread_mutex_lock(&g->lock);
    job j = {0};
    bool had_turn = false;
    for (int i = x->running ? 1 : 0; i < x->n_q; i++) {
        if (x->q[i].b != b) continue;
        j = x->q[i];
        if (i == 0) {
            unqueue_head_locked(g, x);
            if (x->granted) {
                had_turn = !x->ahead;
                if (x->ahead && g->reserved == x) g->reserved = NULL;
                x->granted = x->ahead = false;
            }
        }
        memmove(&x->q[i], &x->q[i + 1], (size_t)(x->n_q - i - 1) * sizeof x->q[0]);
        x->n_q--;
        queue_head_locked(g, x);
        pthread_cond_broadcast(&g->cv);
        break;
    }
    pthread_mutex_unlock(&g->lock);
    if (had_turn) {
        release_turn(g, x->cls, 0, 0, false); /* unused: the next one's turn */
    } else if (j.done) {
        pthread_mutex_lock(&g->lock);
        wf_gated_executor *gx = grant_locked(g); /* a reservation gone: the order picks again */
        pthread_mutex_unlock(&g->lock);
        notify(gx);
    }
    if (j.done) j.done(j.user, b, WF_ECANCELLED, "cancelled before it ran");
}

static void gated_synchronize(void *ctx) {
    wf_gated_executor *x = ctx;
    wf_gate *g = x->gate;
    pthread_mutex_lock(&g->lock);
    while (x->n_q || x->in_done) pthread_cond_wait(&g->cv, &g->lock);
    pthread_mutex_unlock(&g->lock);
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
    pthread_mutex_lock(&g->lock);
    wf_status st = WF_OK;
    if (g->n_xs >= MAX_GATED) st = WF_EFULL;
    else if (!g->runner_started) st = pthread_create(&g->runner, NULL, runner_main, g) == 0 ? WF_OK : WF_EIO;
    if (st == WF_OK) {
        g->runner_started = true;
        g->xs[g->n_xs++] = x;
    }
    pthread_mutex_unlock(&g->lock);
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
    wf_gate *g = x->gate;
    pthread_mutex_lock(&g->lock);
    x->closing = true;
    pthread_mutex_unlock(&g->lock);
    gated_synchronize(x); /* runs what is queued */
    wf_gated_executor_unclaim(x); /* a claim left behind would be granted to freed memory */
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < g->n_xs; i++) {
        if (g->xs[i] == x) {
            g->xs[i] = g->xs[--g->n_xs];
            break;
        }
    }
    pthread_mutex_unlock(&g->lock);
    free(x);
}
