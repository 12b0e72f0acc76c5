/* Bounded cross-thread FIFO with a wake-up on the empty -> non-empty edge. */
#include "proto/base/handoff.h"

#include <errno.h>
#include <string.h>
#include <time.h>

wf_status wf_handoff_init(wf_handoff *q, size_t capacity, wf_handoff_wake_fn wake, void *user) {
    memset(q, 0, sizeof *q);
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) return WF_ENOMEM;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&q->nonempty, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) return WF_ENOMEM;
    if (pthread_mutex_init(&q->lock, NULL) != 0) {
        pthread_cond_destroy(&q->nonempty);
        return WF_ENOMEM;
    }
    q->capacity = capacity;
    q->wake = wake;
    q->wake_user = user;
    return WF_OK;
}

void wf_handoff_free(wf_handoff *q) {
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->nonempty);
}

wf_status wf_handoff_push(wf_handoff *q, wf_handoff_item *item) {
    item->next = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->closed) {
        pthread_mutex_unlock(&q->lock);
        return WF_ECLOSED;
    }
    if (q->capacity && q->length >= q->capacity) {
        pthread_mutex_unlock(&q->lock);
        return WF_EFULL;
    }
    int was_empty = q->head == NULL;
    if (q->tail) q->tail->next = item;
    else q->head = item;
    q->tail = item;
    q->length++;
    if (was_empty) pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->lock);
    /* Outside the lock: the wake callback may take other locks (uv_async_send does not). */
    if (was_empty && q->wake) q->wake(q->wake_user);
    return WF_OK;
}

wf_handoff_item *wf_handoff_take_all(wf_handoff *q) {
    pthread_mutex_lock(&q->lock);
    wf_handoff_item *list = q->head;
    q->head = q->tail = NULL;
    q->length = 0;
    pthread_mutex_unlock(&q->lock);
    return list;
}

int wf_handoff_wait(wf_handoff *q, int timeout_ms) {
    pthread_mutex_lock(&q->lock);
    if (timeout_ms < 0) {
        while (!q->head && !q->closed) pthread_cond_wait(&q->nonempty, &q->lock);
    } else {
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
        while (!q->head && !q->closed)
            if (pthread_cond_timedwait(&q->nonempty, &q->lock, &deadline) == ETIMEDOUT) break;
    }
    int ready = q->head != NULL;
    pthread_mutex_unlock(&q->lock);
    return ready;
}

void wf_handoff_close(wf_handoff *q) {
    pthread_mutex_lock(&q->lock);
    q->closed = 1;
    pthread_cond_broadcast(&q->nonempty);
    pthread_mutex_unlock(&q->lock);
    if (q->wake) q->wake(q->wake_user);
}

size_t wf_handoff_length(wf_handoff *q) {
    pthread_mutex_lock(&q->lock);
    size_t n = q->length;
    pthread_mutex_unlock(&q->lock);
    return n;
}
