/* Weighted fair queueing state: one virtual clock per virtual model (see fair.h). */
#include "sched/fair.h"

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

wf_fair_entry *wf_fair_join(wf_fair *f, uint32_t vmodel, double weight) {
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
    return e;
}

void wf_fair_leave(wf_fair *f, wf_fair_entry *e) {
    if (e->backlog > 0) e->backlog--;
    update_vnow(f);
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
