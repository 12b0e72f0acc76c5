/* Weighted fair queueing state: one virtual clock per virtual model (see fair.h). */
#include "sched/fair.h"

#include <math.h>
#include <stdlib.h>

void wf_fair_init(wf_fair *f) {
    f->head = NULL;
    f->vnow = 0.0;
    f->displace_margin = 0.0;
    f->n = 0;
}

void wf_fair_free(wf_fair *f) {
    while (f->head) {
        wf_fair_entry *e = f->head;
        f->head = e->next;
        free(e);
    }
    f->n = 0;
}

static void update_vnow(wf_fair *f) {
    double m = -1.0;
    for (wf_fair_entry *e = f->head; e; e = e->next)
        if (e->backlog > 0 && (m < 0.0 || e->vtime < m)) m = e->vtime;
    if (m >= 0.0 && m > f->vnow) f->vnow = m; /* monotone: never runs backwards */
}

wf_fair_entry *wf_fair_join(wf_fair *f, uint32_t vmodel, double weight, uint64_t now_ns) {
    wf_fair_entry *e = f->head;
    while (e && e->vmodel != vmodel) e = e->next;
    if (!e) {
        if (!(e = calloc(1, sizeof *e))) return NULL;
        e->vmodel = vmodel;
        e->owner = f;
        e->next = f->head;
        f->head = e;
        f->n++;
    }
    e->weight = weight > 0.0 ? weight : 1.0;
    /* back from idle: start at the system time, without credit for the idle period */
    if (e->backlog == 0 && e->vtime < f->vnow) e->vtime = f->vnow;
    e->backlog++;
    if (e->last_join_ns && now_ns > e->last_join_ns) {
        double gap = (double)(now_ns - e->last_join_ns);
        e->gap_ns = e->gap_ns > 0.0 ? 0.75 * e->gap_ns + 0.25 * gap : gap;
    }
    if (now_ns > e->last_join_ns) e->last_join_ns = now_ns;
    return e;
}

void wf_fair_leave(wf_fair *f, wf_fair_entry *e, uint64_t now_ns) {
    if (e->backlog > 0) e->backlog--;
    if (e->backlog == 0) e->last_leave_ns = now_ns;
    update_vnow(f);
}

bool wf_fair_active(const wf_fair_entry *e, uint64_t now_ns) {
    if (e->backlog > 0) return true;
    return e->gap_ns > 0.0 && now_ns >= e->last_leave_ns &&
           (double)(now_ns - e->last_leave_ns) < 2.0 * e->gap_ns;
}

bool wf_fair_ahead(const wf_fair *f, const wf_fair_entry *e, double margin, uint64_t now_ns) {
    for (const wf_fair_entry *o = f->head; o; o = o->next)
        if (o != e && wf_fair_active(o, now_ns) && o->vtime + margin < e->vtime)
            return true;
    return false;
}

int wf_fair_seat_cap(const wf_fair *f, const wf_fair_entry *e, int max_running, double knee,
                     uint64_t now_ns) {
    double w_active = e->weight;
    int n_active = 1;
    for (const wf_fair_entry *o = f->head; o; o = o->next)
        if (o != e && wf_fair_active(o, now_ns)) {
            w_active += o->weight;
            n_active++;
        }
    if (n_active == 1) return max_running;
    double seats = max_running;
    if (knee > 0.0 && n_active * knee < seats) seats = n_active * knee;
    int cap = (int)floor(e->weight / w_active * seats + 1e-9);
    return cap < 1 ? 1 : cap;
}

void wf_fair_charge(wf_fair *f, wf_fair_entry *e, double cost) {
    if (!(cost > 0.0)) return;
    e->served += cost;
    e->vtime += cost / e->weight;
    update_vnow(f);
}

double wf_fair_jain(const double *x, int n) {
    double s = 0.0, s2 = 0.0;
    for (int i = 0; i < n; i++) {
        s += x[i];
        s2 += x[i] * x[i];
    }
    return n > 0 && s2 > 0.0 ? s * s / ((double)n * s2) : 1.0;
}

void wf_fair_refill(wf_fair *f, double step_ms, double bank_ms, uint64_t now_ns) {
    double w_active = 0.0;
    int n_active = 0;
    for (wf_fair_entry *e = f->head; e; e = e->next)
        if (wf_fair_active(e, now_ns)) {
            w_active += e->weight;
            n_active++;
        }
    for (wf_fair_entry *e = f->head; e; e = e->next) {
        if (!wf_fair_active(e, now_ns)) {
            e->credit = 0.0;
            continue;
        }
        double budget = e->weight / w_active * n_active * step_ms;
        e->credit += budget;
        if (e->credit > bank_ms + 4.0 * budget) e->credit = bank_ms + 4.0 * budget;
        if (e->credit < -bank_ms) e->credit = -bank_ms;
    }
}
