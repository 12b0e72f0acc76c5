/* The one way work crosses threads (ARCHITECTURE.md): a mutex-protected FIFO of intrusive items,
 * optionally bounded, that wakes its consumer only on the empty -> non-empty transition. The
 * consumer takes the whole list at once and works on it unlocked.
 *
 *     wf_handoff q;
 *     wf_handoff_init(&q, 1024, wake_loop, &async);   // wake_loop calls uv_async_send
 *     // producer thread:
 *     if (wf_handoff_push(&q, &req->link) == WF_EFULL) reply_503();
 *     // consumer (loop or scheduler thread):
 *     for (wf_handoff_item *it = wf_handoff_take_all(&q); it; it = next) { next = it->next; ... }
 *
 * Thread-safe (any number of producers; one consumer). A push that returns WF_EFULL leaves the
 * item with the caller: it is never dropped silently. */
#ifndef WF_BASE_HANDOFF_H
#define WF_BASE_HANDOFF_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

typedef struct wf_handoff_item {
    struct wf_handoff_item *next;
} wf_handoff_item;

typedef void (*wf_handoff_wake_fn)(void *user);

typedef struct wf_handoff {
    pthread_mutex_t lock;
    pthread_cond_t nonempty;
    wf_handoff_item *head, *tail;
    size_t length;
    size_t capacity; /* 0: unbounded */
    int closed;
    wf_handoff_wake_fn wake; /* may be NULL: consumers then use wf_handoff_wait */
    void *wake_user;
} wf_handoff;

/* capacity 0 means unbounded (use only where the producer is already bounded upstream). */
wf_status wf_handoff_init(wf_handoff *q, size_t capacity, wf_handoff_wake_fn wake, void *user);
/* Items still queued are not freed: drain with take_all first. */
void wf_handoff_free(wf_handoff *q);

/* WF_OK, WF_EFULL when at capacity, WF_ECLOSED after wf_handoff_close. */
wf_status wf_handoff_push(wf_handoff *q, wf_handoff_item *item);
/* Takes every queued item, oldest first, as a NULL-terminated list (NULL if empty). */
wf_handoff_item *wf_handoff_take_all(wf_handoff *q);
/* Blocks until non-empty, closed, or timeout_ms passes (-1: no timeout). Returns 1 if items
 * are queued, 0 otherwise. */
int wf_handoff_wait(wf_handoff *q, int timeout_ms);
/* Refuses further pushes and wakes waiters. Queued items stay for take_all. */
void wf_handoff_close(wf_handoff *q);
size_t wf_handoff_length(wf_handoff *q);

#endif
