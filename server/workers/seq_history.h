/* Token histories of sequences kept by the worker that runs them, so that a TASK_DISPATCH
 * carries each sequence's history once instead of whole in every decode step (the penalties
 * need it: a frame of 64 sequences 64k tokens long passed the link's 16 MiB bound). The
 * coordinator keeps, per worker process, a mirror of what that worker holds; each sample then
 * travels with history_base = the tokens the worker already has (proto/task.h), and the worker
 * puts the whole history back together before the task runs.
 *
 *     // coordinator, one mirror per worker process (its comm thread)
 *     wf_seq_mirror m;
 *     wf_seq_mirror_init(&m, 4096, 16 << 20);        // at most 4096 sequences, 16 Mi tokens
 *     wf_seq_mirror_prepare(&m, &wire);              // sets samples' history_base, drop list
 *     send(&wire);                                   // TASK_DISPATCH 1.2
 *     wf_seq_mirror_reset(&m);   // the send failed (the worker got nothing), or a new process
 *                                // took the slot: the next batch tells it to forget everything
 *     // worker
 *     wf_seq_store s;
 *     wf_seq_store_init(&s);
 *     wf_seq_store_apply(&s, &decoded, err, sizeof err);  // whole histories again, drops done
 *
 * What the worker holds is what it was sent: the mirror records a sample's whole history as
 * held once its frame went out, and the next step of that sequence carries the tokens added
 * since (the token the worker drew, now the step's input). A sequence that moves to another
 * worker, or comes back to a new process, is not in that mirror: its history goes whole. The
 * mirror forgets the least recently used sequences beyond its bounds and names them in the
 * next frame's drop list, so the worker's memory stays within the same bounds. Samples with
 * seq 0 (calibration) always carry their history whole and are kept nowhere. A sequence twice
 * in one batch (never planned by the scheduler) goes whole the second time, unkept.
 *
 * Not thread-safe: each belongs to the thread that sends (mirror) or runs (store) batches. */
#ifndef WF_SERVER_WORKERS_SEQ_HISTORY_H
#define WF_SERVER_WORKERS_SEQ_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/task.h"

typedef struct wf_seq_mirror {
    struct wf__seq_held *e;  /* open addressing on seq (linear probing), cap a power of two */
    int cap, n;
    int max_seqs;
    long max_tokens, tokens;
    uint64_t clock;          /* batches prepared: recency of each entry */
    uint64_t *drop;          /* the last prepared batch's drop list */
    int n_drop, cap_drop;
    bool reset_pending;
    uint64_t sent_tokens, saved_tokens; /* history tokens carried / not carried (stats) */
} wf_seq_mirror;

wf_status wf_seq_mirror_init(wf_seq_mirror *m, int max_seqs, long max_tokens);
void wf_seq_mirror_free(wf_seq_mirror *m);
/* Forgets everything; the next prepared batch carries history_reset. */
void wf_seq_mirror_reset(wf_seq_mirror *m);
/* For every sample of the batch's PREFILL and DECODE tasks: history_base and history (the tasks'
 * samples are the caller's, written in place; a sample prepared before for another worker is
 * put back whole first), and the batch's history_reset and drop list (valid until the next
 * call). The mirror then counts the batch as sent. WF_ENOMEM (nothing changed but the samples;
 * call wf_seq_mirror_reset before the next batch). */
wf_status wf_seq_mirror_prepare(wf_seq_mirror *m, wf_task_batch *wire);

typedef struct wf_seq_store {
    struct wf__seq_tokens *e;
    int cap, n;
    uint64_t stamp;          /* batches applied: a sequence twice in one batch is refused */
    long tokens;
} wf_seq_store;

#define WF_SEQ_STORE_MAX_SEQS (1 << 16) /* beyond what any mirror keeps */

void wf_seq_store_init(wf_seq_store *s);
void wf_seq_store_free(wf_seq_store *s);
/* Applies the batch's reset and drops, then gives every sample its whole history (history_base
 * 0, history pointing into the store, valid until the next call) and keeps it. WF_EPROTO when a
 * sample builds on tokens this store does not hold, or a sequence comes twice (err says which);
 * WF_ENOMEM. On error the batch must not run. */
wf_status wf_seq_store_apply(wf_seq_store *s, wf_task_batch *b, char *err, size_t errlen);
/* Whether seq is held, and its length (tests, stats). */
int wf_seq_store_length(const wf_seq_store *s, uint64_t seq);

#endif
