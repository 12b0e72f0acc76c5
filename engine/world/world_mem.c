/* The registration cache behind wf_world_mem_expose: buffers registered with UCX once and found
 * again by containment, dropped when UCX's memory events say their pages were unmapped (a
 * buffer freed and allocated again may come back at the same address with other pages). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucm/api/ucm.h>
#include <ucp/api/ucp.h>

#include "engine/world/world_impl.h"

#define MCACHE_MAX 64 /* registrations kept per world; the least recently used goes first */

typedef struct mreg {
    uintptr_t base;
    size_t len;
    uint64_t id;
    ucp_mem_h mh;
    void *rkey;
    size_t rkey_len;
    int owned;        /* allocated by wf_world_mem_alloc: freed only by wf_world_mem_free */
    int stale;        /* unmapped (written by the memory-event handler, under g_lock) */
    uint64_t last_use;
} mreg;

struct wf__mcache {
    ucp_context_h ctx;
    int cached;       /* memory events are installed: registrations can be kept */
    mreg regs[MCACHE_MAX];
    int n;
    uint64_t clock;
    struct wf__mcache *next; /* in g_caches */
};

/* Every cache of the process, for the memory-event handler (which may run in any thread that
 * unmaps memory). Recursive: the handler may run inside a call that holds the lock only if that
 * call unmaps memory, which none does, but a self-deadlock there would be silent. */
static pthread_mutex_t g_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static wf__mcache *g_caches;
static int g_events;      /* the handler is installed (set once, by install_handler) */
static pthread_once_t g_events_once = PTHREAD_ONCE_INIT;
static uint64_t g_next_id = 1;

static void on_unmap(ucm_event_type_t type, ucm_event_t *ev, void *arg) {
    (void)arg;
    if (type != UCM_EVENT_VM_UNMAPPED) return;
    uintptr_t a = (uintptr_t)ev->vm_unmapped.address, e = a + ev->vm_unmapped.size;
    pthread_mutex_lock(&g_lock);
    for (wf__mcache *c = g_caches; c; c = c->next)
        for (int i = 0; i < c->n; i++)
            if (!c->regs[i].owned && c->regs[i].base < e && a < c->regs[i].base + c->regs[i].len)
                c->regs[i].stale = 1;
    pthread_mutex_unlock(&g_lock);
}

#if defined(__SANITIZE_THREAD__)
#define WF_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WF_TSAN 1
#endif
#endif

/* Once per process, kept for its life (other worlds may come). Not under g_lock: UCX holds its
 * event lock while it calls on_unmap, which takes g_lock (TSan found the inversion). Not at all
 * under TSan: glibc unmaps a finished thread's stack after TSan has dropped the thread's state,
 * and an instrumented handler running there crashes; such builds register per collective. */
static void install_handler(void) {
#ifdef WF_TSAN
    (void)on_unmap;
    g_events = 0;
#else
    g_events = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 1000, on_unmap, NULL) == UCS_OK;
#endif
}

int wf__mcache_events(void) {
    pthread_once(&g_events_once, install_handler);
    return g_events;
}

wf__mcache *wf__mcache_create(void *ucp_ctx) {
    wf__mcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ctx = ucp_ctx;
    int events = wf__mcache_events();
    pthread_mutex_lock(&g_lock);
    c->cached = events;
    c->next = g_caches;
    g_caches = c;
    pthread_mutex_unlock(&g_lock);
    return c;
}

static void release(wf__mcache *c, mreg *r) {
    if (r->rkey) ucp_rkey_buffer_release(r->rkey);
    if (r->mh) ucp_mem_unmap(c->ctx, r->mh);
}

/* Takes entry i out of the table (under the lock) into *out, to be released outside it:
 * ucp_mem_unmap may unmap memory, which calls the handler. */
static void take(wf__mcache *c, int i, mreg *out) {
    *out = c->regs[i];
    c->regs[i] = c->regs[--c->n];
}

void wf__mcache_destroy(wf__mcache *c) {
    if (!c) return;
    pthread_mutex_lock(&g_lock);
    for (wf__mcache **p = &g_caches; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < c->n; i++) release(c, &c->regs[i]);
    free(c);
}

int wf__mcache_cached(const wf__mcache *c) { return c->cached; }

/* Drops stale registrations (and, without memory events, every one not owned: each was for
 * one collective, which has ended). Returns how many stale ones went. */
static int sweep(wf__mcache *c) {
    mreg gone[MCACHE_MAX];
    int n_gone = 0, n_stale = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < c->n;) {
        if (c->regs[i].stale || (!c->cached && !c->regs[i].owned)) {
            n_stale += c->regs[i].stale;
            take(c, i, &gone[n_gone++]);
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < n_gone; i++) release(c, &gone[i]);
    return n_stale;
}

static void describe(const mreg *r, uintptr_t addr, size_t len, wf_world_region *out) {
    out->id = r->id;
    out->addr = addr;
    out->len = len;
    out->rkey_len = (uint32_t)r->rkey_len;
    out->reserved = 0;
    memcpy(out->rkey, r->rkey, r->rkey_len);
}

/* Registers [base, base + len) (or allocates it when base is 0) and adds it to the table. */
static wf_status add(wf__mcache *c, uintptr_t base, size_t len, mreg **out, char *err,
                     size_t errlen) {
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                             UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                                             UCP_MEM_MAP_PARAM_FIELD_FLAGS,
                               .address = (void *)base, .length = len,
                               .flags = base ? 0 : UCP_MEM_MAP_ALLOCATE};
    mreg r = {.len = len, .owned = base == 0};
    ucs_status_t st = ucp_mem_map(c->ctx, &mp, &r.mh);
    if (st != UCS_OK)
        return wf_status_errorf(err, errlen, WF_EIO, "registering %zu bytes: %s", len,
                                ucs_status_string(st));
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
    st = ucp_mem_query(r.mh, &ma);
    if (st == UCS_OK) st = ucp_rkey_pack(c->ctx, r.mh, &r.rkey, &r.rkey_len);
    if (st != UCS_OK || r.rkey_len == 0 || r.rkey_len > WF_WORLD_RKEY_MAX) {
        if (st == UCS_OK) ucp_rkey_buffer_release(r.rkey);
        ucp_mem_unmap(c->ctx, r.mh);
        return wf_status_errorf(err, errlen, WF_EIO, "remote key of %zu bytes: %s", len,
                                st != UCS_OK ? ucs_status_string(st) : "key too large");
    }
    r.base = (uintptr_t)ma.address;
    mreg evicted = {0};
    pthread_mutex_lock(&g_lock);
    r.id = g_next_id++;
    r.last_use = ++c->clock;
    if (c->n == MCACHE_MAX) { /* evict the least recently used registration not owned */
        int victim = -1;
        for (int i = 0; i < c->n; i++)
            if (!c->regs[i].owned && (victim < 0 || c->regs[i].last_use < c->regs[victim].last_use))
                victim = i;
        if (victim >= 0) take(c, victim, &evicted);
    }
    int full = c->n == MCACHE_MAX;
    if (!full) c->regs[c->n++] = r;
    pthread_mutex_unlock(&g_lock);
    release(c, &evicted);
    if (full) {
        release(c, &r);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "more than %d registered allocations",
                                MCACHE_MAX);
    }
    *out = &c->regs[c->n - 1];
    return WF_OK;
}

wf_status wf__mcache_expose(wf__mcache *c, void *buf, size_t len, wf_world_region *out,
                            wf_world_stats *stats, char *err, size_t errlen) {
    memset(out, 0, offsetof(wf_world_region, rkey));
    if (len == 0) return WF_OK;
    if (!buf) return wf_status_errorf(err, errlen, WF_EINVAL, "expose: NULL buffer");
    stats->mem_invalidations += (uint64_t)sweep(c);
    uintptr_t a = (uintptr_t)buf;
    for (int i = 0; i < c->n; i++) {
        mreg *r = &c->regs[i];
        if (r->base <= a && len <= r->len && a - r->base <= r->len - len) {
            r->last_use = ++c->clock;
            describe(r, a, len, out);
            stats->mem_cache_hits++;
            return WF_OK;
        }
    }
    mreg *r;
    wf_status st = add(c, a, len, &r, err, errlen);
    if (st != WF_OK) return st;
    stats->mem_registrations++;
    describe(r, a, len, out);
    return WF_OK;
}

void *wf__mcache_alloc(wf__mcache *c, size_t len) {
    if (len == 0) return NULL;
    char err[128];
    mreg *r;
    return add(c, 0, len, &r, err, sizeof err) == WF_OK ? (void *)r->base : NULL;
}

int wf__mcache_free(wf__mcache *c, void *p) {
    mreg gone;
    int found = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < c->n; i++)
        if (c->regs[i].owned && c->regs[i].base == (uintptr_t)p) {
            take(c, i, &gone);
            found = 1;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    if (found) release(c, &gone);
    return found;
}

int wf__mcache_owned(wf__mcache *c, const void *buf, size_t len) {
    uintptr_t a = (uintptr_t)buf;
    for (int i = 0; i < c->n; i++) {
        const mreg *r = &c->regs[i];
        if (r->owned && r->base <= a && len <= r->len && a - r->base <= r->len - len) return 1;
    }
    return 0;
}
