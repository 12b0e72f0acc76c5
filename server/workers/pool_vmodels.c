/* The worker pool's set of virtual models (see server/workers/pool.h: wf_workers_vmodel_*):
 * what every worker must hold, who acknowledged what, and the VMODEL frames waiting to go. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/base/clock.h"
#include "proto/base/log.h"
#include "server/vmodels.h"
#include "server/workers/pool_impl.h"

static pvm *vm_find(wf_workers *ws, uint32_t num) { /* lock held */
    for (int i = 0; i < ws->n_vms; i++)
        if (ws->vms[i].num == num) return &ws->vms[i];
    return NULL;
}

static wf_status push_op(wk *k, wf_frame_vmodel_op op, uint32_t num, const char *spec) {
    if (k->n_ops == k->cap_ops) { /* lock held */
        int cap = k->cap_ops ? 2 * k->cap_ops : 8;
        void *q = realloc(k->ops, (size_t)cap * sizeof *k->ops);
        if (!q) return WF_ENOMEM;
        k->ops = q;
        k->cap_ops = cap;
    }
    char *copy = spec ? strdup(spec) : NULL;
    if (spec && !copy) return WF_ENOMEM;
    k->ops[k->n_ops++] = (vop){.op = op, .num = num, .spec = copy};
    return WF_OK;
}

static void clear_ops(wk *k) { /* lock held */
    for (int i = 0; i < k->n_ops; i++) free(k->ops[i].spec);
    k->n_ops = 0;
}

/* Whether worker k takes VMODEL frames now: live, or joining and given the current set. */
static bool takes_ops(const wk *k) { /* lock held */
    return k->state == WF_WORKER_LIVE || (k->state == WF_WORKER_JOINING && k->syncing);
}


wf_status wf__pool_vm_init(wf_workers *ws, const wf_workers_params *p, char *err, size_t errlen) {
    if (p->n_vmodels <= 0) return WF_OK;
    if (!(ws->vms = calloc((size_t)p->n_vmodels, sizeof *ws->vms)))
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    ws->cap_vms = p->n_vmodels;
    for (int i = 0; i < p->n_vmodels; i++) {
        wf_vmodel_spec v;
        char e2[400];
        wf_status st = wf_vmodel_spec_from_text(p->vmodels[i], &v, e2, sizeof e2);
        if (st != WF_OK) return wf_status_errorf(err, errlen, st, "--vmodel: %s", e2);
        pvm *e = &ws->vms[ws->n_vms++];
        e->num = wf_vmodel_spec_num(&v);
        e->argv = true;
        wf_vmodel_spec_free(&v);
        if (!(e->spec = strdup(p->vmodels[i])))
            return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    }
    return WF_OK;
}

void wf__pool_vm_free(wf_workers *ws) {
    for (int i = 0; i < ws->n; i++) {
        clear_ops(&ws->w[i]);
        free(ws->w[i].ops);
    }
    for (int i = 0; i < ws->n_vms; i++) free(ws->vms[i].spec);
    free(ws->vms);
}

void wf__pool_vm_forget(wf_workers *ws, wk *k) {
    /* a later incarnation starts from nothing: it is given the set again when it joins */
    for (int i = 0; i < ws->n_vms; i++) ws->vms[i].acked &= ~(1ull << k->index);
    clear_ops(k);
    k->syncing = false;
}

int wf__pool_vm_sync(wf_workers *ws, wk *k, uint32_t kv_blocks) {
    pthread_mutex_lock(&ws->lock);
    if (k->syncing) { /* a later heartbeat while it loads */
        pthread_mutex_unlock(&ws->lock);
        return 1;
    }
    int n = 0;
    wf_status st = WF_OK;
    for (int i = 0; i < ws->n_vms && st == WF_OK; i++)
        if (!ws->vms[i].argv && !ws->vms[i].failed) {
            st = push_op(k, WF_FRAME_VMODEL_ADD, ws->vms[i].num, ws->vms[i].spec);
            n++;
        }
    k->syncing = n > 0 && st == WF_OK;
    k->sync_left = n;
    k->sync_kv = kv_blocks;
    k->sync_since_ns = wf_clock_now_ns();
    pthread_mutex_unlock(&ws->lock);
    return st != WF_OK ? -1 : n > 0;
}

int wf__pool_vm_ack(wf_workers *ws, wk *k, const wf_frame_vmodel_ack *a, uint32_t *kv_blocks,
                    char *why, size_t whylen) {
    if (a->op == WF_FRAME_VMODEL_REMOVE) {
        if (a->status != WF_OK)
            WF_LOG_WARN("workers", NULL, "worker rank %d: removing virtual model %u: %s", k->rank,
                        (unsigned)a->num, a->message);
        return 0;
    }
    pthread_mutex_lock(&ws->lock);
    pvm *v = vm_find(ws, a->num);
    bool syncing = k->syncing;
    int r = 0;
    if (v && a->status == WF_OK) v->acked |= 1ull << k->index;
    if (v && a->status != WF_OK && !syncing && !v->argv) {
        v->failed = true;
        snprintf(v->error, sizeof v->error, "worker rank %d could not load it: %s", k->rank,
                 a->message);
    }
    if (syncing && a->status == WF_OK && --k->sync_left == 0) {
        k->syncing = false;
        r = 1;
    }
    *kv_blocks = k->sync_kv;
    pthread_mutex_unlock(&ws->lock);
    if (syncing && a->status != WF_OK) {
        snprintf(why, whylen, "cannot load virtual model %u: %s", (unsigned)a->num, a->message);
        return -1;
    }
    return r;
}

bool wf__pool_vm_sync_late(wf_workers *ws, wk *k, uint64_t now_ns, int timeout_ms) {
    pthread_mutex_lock(&ws->lock);
    bool late = k->syncing && now_ns - k->sync_since_ns > (uint64_t)timeout_ms * 1000000ull;
    pthread_mutex_unlock(&ws->lock);
    return late;
}

bool wf__pool_vm_next(wf_workers *ws, wk *k, vop *out) {
    pthread_mutex_lock(&ws->lock);
    bool any = k->n_ops > 0 && k->n_flight == 0 && takes_ops(k);
    if (any) {
        *out = k->ops[0];
        memmove(&k->ops[0], &k->ops[1], (size_t)(k->n_ops - 1) * sizeof k->ops[0]);
        k->n_ops--;
    }
    pthread_mutex_unlock(&ws->lock);
    return any;
}

wf_status wf_workers_vmodel_add(wf_workers *ws, uint32_t num, const char *spec_json, char *err,
                                size_t errlen) {
    if (num == 0 || !spec_json || !spec_json[0] || strlen(spec_json) >= WF_FRAME_VMODEL_SPEC_MAX)
        return wf_status_errorf(err, errlen, WF_EINVAL, "virtual model %u: no number, or a "
                                "declaration that is empty or over %d bytes", (unsigned)num,
                                WF_FRAME_VMODEL_SPEC_MAX - 1);
    pthread_mutex_lock(&ws->lock);
    wf_status st = WF_OK;
    pvm *v = vm_find(ws, num);
    if (v) {
        /* declared at start with the same number: every worker holds it already */
        if (!v->argv) st = wf_status_errorf(err, errlen, WF_EINVAL, "virtual model %u is on the "
                                            "workers already", (unsigned)num);
        pthread_mutex_unlock(&ws->lock);
        return st;
    }
    if (ws->n_vms == ws->cap_vms) {
        int cap = ws->cap_vms ? 2 * ws->cap_vms : 8;
        void *q = realloc(ws->vms, (size_t)cap * sizeof *ws->vms);
        if (!q) st = WF_ENOMEM;
        else {
            ws->vms = q;
            ws->cap_vms = cap;
        }
    }
    char *copy = st == WF_OK ? strdup(spec_json) : NULL;
    if (!copy) {
        pthread_mutex_unlock(&ws->lock);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    }
    ws->vms[ws->n_vms++] = (pvm){.num = num, .spec = copy};
    for (int i = 0; i < ws->n && st == WF_OK; i++) {
        wk *k = &ws->w[i];
        if (!takes_ops(k)) continue; /* joining ones get the whole set when they are ready */
        st = push_op(k, WF_FRAME_VMODEL_ADD, num, copy);
        if (st == WF_OK && k->syncing) k->sync_left++;
    }
    pthread_mutex_unlock(&ws->lock);
    wf__pool_wake(ws);
    if (st != WF_OK) {
        wf_workers_vmodel_remove(ws, num);
        return wf_status_errorf(err, errlen, st, "out of memory");
    }
    return WF_OK;
}

int wf_workers_vmodel_state(wf_workers *ws, uint32_t num, char *err, size_t errlen) {
    pthread_mutex_lock(&ws->lock);
    pvm *v = vm_find(ws, num);
    int r = 1;
    if (!v) {
        r = -1;
        wf_errorf(err, errlen, "virtual model %u was removed", (unsigned)num);
    } else if (v->failed) {
        r = -1;
        wf_errorf(err, errlen, "%s", v->error);
    } else if (!v->argv) {
        for (int i = 0; i < ws->n && r == 1; i++)
            if (ws->w[i].state == WF_WORKER_LIVE && !(v->acked & (1ull << i))) r = 0;
    }
    pthread_mutex_unlock(&ws->lock);
    return r;
}

wf_status wf_workers_vmodel_wait(wf_workers *ws, uint32_t num, int timeout_ms, char *err,
                                 size_t errlen) {
    uint64_t deadline = wf_clock_now_ns() + MS(timeout_ms);
    for (;;) {
        int r = wf_workers_vmodel_state(ws, num, err, errlen);
        if (r > 0) return WF_OK;
        if (r < 0) return WF_EIO;
        if (wf_clock_now_ns() >= deadline)
            return wf_status_errorf(err, errlen, WF_ETIMEDOUT, "the workers did not all load "
                                    "virtual model %u within %d ms", (unsigned)num, timeout_ms);
        usleep(5000);
    }
}

void wf_workers_vmodel_remove(wf_workers *ws, uint32_t num) {
    pthread_mutex_lock(&ws->lock);
    pvm *v = vm_find(ws, num);
    if (!v) {
        pthread_mutex_unlock(&ws->lock);
        return;
    }
    free(v->spec);
    *v = ws->vms[--ws->n_vms];
    for (int i = 0; i < ws->n; i++) {
        wk *k = &ws->w[i];
        if (!takes_ops(k)) continue; /* a joining one is not given it any more */
        if (push_op(k, WF_FRAME_VMODEL_REMOVE, num, NULL) != WF_OK)
            WF_LOG_WARN("workers", NULL, "worker rank %d keeps virtual model %u (out of memory)",
                        k->rank, (unsigned)num);
    }
    pthread_mutex_unlock(&ws->lock);
    wf__pool_wake(ws);
}
