/* Sequence histories kept on workers: see seq_history.h. */
#include "server/workers/seq_history.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wf__seq_held {
    uint64_t seq;      /* 0: empty slot */
    int32_t held;      /* tokens the worker holds */
    uint64_t used;     /* the mirror's clock when last in a batch */
};

struct wf__seq_tokens {
    uint64_t seq;      /* 0: empty slot */
    int32_t *tok;
    int n, cap;
    uint64_t stamp;
};

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* ---- one open-addressing table for both (linear probing, backward-shift deletion) --------- */

/* The slot of key, or the empty slot where it would go (the table always has an empty one). */
#define TABLE_FIND(e, cap, key)                                                                    \
    ({                                                                                             \
        int _i = (int)(mix(key) & (uint64_t)((cap) - 1));                                          \
        while ((e)[_i].seq && (e)[_i].seq != (key)) _i = (_i + 1) & ((cap) - 1);                   \
        _i;                                                                                        \
    })

/* Removes slot i, moving later entries of its probe run back so that lookups stay correct. */
#define TABLE_DELETE(e, cap, i0)                                                                   \
    do {                                                                                           \
        int _i = (i0), _j = (i0);                                                                  \
        for (;;) {                                                                                 \
            _j = (_j + 1) & ((cap) - 1);                                                           \
            if (!(e)[_j].seq) break;                                                               \
            int _h = (int)(mix((e)[_j].seq) & (uint64_t)((cap) - 1));                              \
            /* entry j may move to i when its home is not in (i, j] (cyclically) */               \
            bool _stay = _i <= _j ? (_i < _h && _h <= _j) : (_i < _h || _h <= _j);                 \
            if (_stay) continue;                                                                   \
            (e)[_i] = (e)[_j];                                                                     \
            _i = _j;                                                                               \
        }                                                                                          \
        memset(&(e)[_i], 0, sizeof (e)[_i]);                                                       \
    } while (0)

/* ---- the coordinator's mirror ------------------------------------------------------------------ */

wf_status wf_seq_mirror_init(wf_seq_mirror *m, int max_seqs, long max_tokens) {
    memset(m, 0, sizeof *m);
    if (max_seqs < 1 || max_tokens < 1 || max_seqs > WF_SEQ_STORE_MAX_SEQS) return WF_EINVAL;
    /* A batch's own sequences are not evicted while it is prepared, so n may pass max_seqs
     * by one batch's new ones: the table grows when it must. */
    int cap = 16;
    while (cap < 2 * max_seqs + 2) cap *= 2;
    if (!(m->e = calloc((size_t)cap, sizeof *m->e))) return WF_ENOMEM;
    m->cap = cap;
    m->max_seqs = max_seqs;
    m->max_tokens = max_tokens;
    return WF_OK;
}

void wf_seq_mirror_free(wf_seq_mirror *m) {
    free(m->e);
    free(m->drop);
    memset(m, 0, sizeof *m);
}

void wf_seq_mirror_reset(wf_seq_mirror *m) {
    if (m->e) memset(m->e, 0, (size_t)m->cap * sizeof *m->e);
    m->n = 0;
    m->tokens = 0;
    m->n_drop = 0;
    m->reset_pending = true;
}

static wf_status mirror_grow(wf_seq_mirror *m) {
    int cap = m->cap * 2;
    struct wf__seq_held *e = calloc((size_t)cap, sizeof *e);
    if (!e) return WF_ENOMEM;
    for (int i = 0; i < m->cap; i++)
        if (m->e[i].seq) e[TABLE_FIND(e, cap, m->e[i].seq)] = m->e[i];
    free(m->e);
    m->e = e;
    m->cap = cap;
    return WF_OK;
}

static wf_status drop_push(wf_seq_mirror *m, uint64_t seq) {
    if (m->n_drop == m->cap_drop) {
        int cap = m->cap_drop ? 2 * m->cap_drop : 64;
        uint64_t *d = realloc(m->drop, (size_t)cap * sizeof *d);
        if (!d) return WF_ENOMEM;
        m->drop = d;
        m->cap_drop = cap;
    }
    m->drop[m->n_drop++] = seq;
    return WF_OK;
}

/* Forgets least recently used sequences (not of this batch) beyond the bounds. */
static wf_status mirror_evict(wf_seq_mirror *m) {
    while (m->n > m->max_seqs || m->tokens > m->max_tokens) {
        int victim = -1;
        for (int i = 0; i < m->cap; i++)
            if (m->e[i].seq && m->e[i].used != m->clock &&
                (victim < 0 || m->e[i].used < m->e[victim].used))
                victim = i;
        if (victim < 0) return WF_OK; /* only this batch's: over the bound until the next */
        if (drop_push(m, m->e[victim].seq) != WF_OK) return WF_ENOMEM;
        m->tokens -= m->e[victim].held;
        m->n--;
        TABLE_DELETE(m->e, m->cap, victim);
    }
    return WF_OK;
}

wf_status wf_seq_mirror_prepare(wf_seq_mirror *m, wf_task_batch *wire) {
    m->clock++;
    m->n_drop = 0;
    wire->history_reset = m->reset_pending;
    m->reset_pending = false;
    for (int k = 0; k < wire->n_tasks; k++) {
        wf_task *t = &wire->tasks[k];
        if (t->kind != WF_TASK_PREFILL && t->kind != WF_TASK_DECODE) continue;
        for (int j = 0; j < t->llm.n_samples; j++) {
            wf_task_sample *s = &t->llm.samples[j];
            /* Whole again (a prefill re-sent to another worker was prepared for the first). */
            s->history -= s->history_base;
            s->history_base = 0;
            if (s->seq == 0) {
                m->sent_tokens += (uint64_t)s->n_history;
                continue;
            }
            if (2 * (m->n + 1) > m->cap && mirror_grow(m) != WF_OK) return WF_ENOMEM;
            int i = TABLE_FIND(m->e, m->cap, s->seq);
            struct wf__seq_held *e = &m->e[i];
            if (e->seq && e->used == m->clock) {
                /* Twice in one batch: this one travels whole and is not kept. */
                s->seq = 0;
                m->sent_tokens += (uint64_t)s->n_history;
                continue;
            }
            int base = e->seq && e->held <= s->n_history ? e->held : 0;
            s->history_base = base;
            s->history += base;
            m->sent_tokens += (uint64_t)(s->n_history - base);
            m->saved_tokens += (uint64_t)base;
            if (!e->seq) {
                e->seq = s->seq;
                e->held = 0;
                m->n++;
            }
            m->tokens += s->n_history - e->held;
            e->held = s->n_history;
            e->used = m->clock;
        }
    }
    wf_status st = mirror_evict(m);
    wire->history_drop = m->n_drop ? m->drop : NULL;
    wire->n_history_drop = m->n_drop;
    return st;
}

/* ---- the worker's store ------------------------------------------------------------------------ */

void wf_seq_store_init(wf_seq_store *s) { memset(s, 0, sizeof *s); }

static void store_clear(wf_seq_store *s) {
    for (int i = 0; i < s->cap; i++) free(s->e[i].tok);
    if (s->e) memset(s->e, 0, (size_t)s->cap * sizeof *s->e);
    s->n = 0;
    s->tokens = 0;
}

void wf_seq_store_free(wf_seq_store *s) {
    store_clear(s);
    free(s->e);
    memset(s, 0, sizeof *s);
}

static wf_status store_grow(wf_seq_store *s) {
    int cap = s->cap ? 2 * s->cap : 64;
    struct wf__seq_tokens *e = calloc((size_t)cap, sizeof *e);
    if (!e) return WF_ENOMEM;
    for (int i = 0; i < s->cap; i++)
        if (s->e[i].seq) e[TABLE_FIND(e, cap, s->e[i].seq)] = s->e[i];
    free(s->e);
    s->e = e;
    s->cap = cap;
    return WF_OK;
}

static void store_drop(wf_seq_store *s, uint64_t seq) {
    if (!s->cap || !seq) return;
    int i = TABLE_FIND(s->e, s->cap, seq);
    if (!s->e[i].seq) return;
    free(s->e[i].tok);
    s->tokens -= s->e[i].n;
    s->n--;
    TABLE_DELETE(s->e, s->cap, i);
}

int wf_seq_store_length(const wf_seq_store *s, uint64_t seq) {
    if (!s->cap || !seq) return -1;
    int i = TABLE_FIND(s->e, s->cap, seq);
    return s->e[i].seq ? s->e[i].n : -1;
}

wf_status wf_seq_store_apply(wf_seq_store *s, wf_task_batch *b, char *err, size_t errlen) {
    s->stamp++;
    if (b->history_reset) store_clear(s);
    for (int i = 0; i < b->n_history_drop; i++) store_drop(s, b->history_drop[i]);
    for (int k = 0; k < b->n_tasks; k++) {
        wf_task *t = &b->tasks[k];
        if (t->kind != WF_TASK_PREFILL && t->kind != WF_TASK_DECODE) continue;
        for (int j = 0; j < t->llm.n_samples; j++) {
            wf_task_sample *sm = &t->llm.samples[j];
            if (sm->seq == 0) continue; /* whole, kept nowhere (the decoder refuses a base) */
            if ((s->n + 1) * 2 > s->cap && store_grow(s) != WF_OK)
                return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory for token histories");
            int i = TABLE_FIND(s->e, s->cap, sm->seq);
            struct wf__seq_tokens *e = &s->e[i];
            int held = e->seq ? e->n : 0;
            if (e->seq && e->stamp == s->stamp)
                return wf_status_errorf(err, errlen, WF_EPROTO,
                                        "sequence %llu comes twice in one batch",
                                        (unsigned long long)sm->seq);
            if (sm->history_base > held)
                return wf_status_errorf(err, errlen, WF_EPROTO,
                                        "sequence %llu: the task builds on %d tokens of history, "
                                        "this worker holds %d", (unsigned long long)sm->seq,
                                        sm->history_base, held);
            if (!e->seq && s->n >= WF_SEQ_STORE_MAX_SEQS)
                return wf_status_errorf(err, errlen, WF_EPROTO,
                                        "more than %d sequence histories kept: the coordinator "
                                        "never asked to forget any", WF_SEQ_STORE_MAX_SEQS);
            if (sm->n_history > e->cap) {
                int cap = e->cap ? e->cap : 64;
                while (cap < sm->n_history) cap *= 2;
                int32_t *tok = realloc(e->tok, (size_t)cap * sizeof *tok);
                if (!tok)
                    return wf_status_errorf(err, errlen, WF_ENOMEM,
                                            "out of memory for the history of sequence %llu",
                                            (unsigned long long)sm->seq);
                e->tok = tok;
                e->cap = cap;
            }
            if (!e->seq) {
                e->seq = sm->seq;
                s->n++;
            }
            int carried = sm->n_history - sm->history_base;
            if (carried > 0) memcpy(e->tok + sm->history_base, sm->history, (size_t)carried * sizeof *e->tok);
            s->tokens += sm->n_history - e->n;
            e->n = sm->n_history;
            e->stamp = s->stamp;
            sm->history = e->tok;
            sm->history_base = 0;
        }
    }
    return WF_OK;
}
