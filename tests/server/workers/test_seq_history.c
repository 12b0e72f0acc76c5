/* Sequence histories kept on workers (server/workers/seq_history.h): a coordinator's mirror and
 * a worker's store, with every batch going through a real TASK_DISPATCH encode and decode,
 * keep giving the worker the very histories the coordinator has -- over new sequences, decode
 * steps, evictions (drop lists), a new worker process (reset) and a sequence moved back; a
 * batch of 64 sequences 70k tokens long, which whole passes the link's 16 MiB bound, travels in
 * a few KiB; and a store refuses what it cannot rebuild. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "proto/frame_task.h"
#include "server/workers/seq_history.h"
#include "server/workers/world_link.h"

enum { NSEQ = 12, MAXH = 6000 };

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

typedef struct coord_seq {
    int32_t tok[MAXH];
    int n;
} coord_seq;

static coord_seq seqs[NSEQ];
static wf_sampling_params params = {.temperature = 0, .top_p = 1, .repetition_penalty = 1.1f};

/* A batch over seqs idx[0..n): a PREFILL for a new sequence (len 0), else a DECODE step that
 * first appends the token "drawn" last time. */
static void build(wf_task_batch *b, wf_task *tasks, wf_task_sample *samples, const int *idx, int n,
                  uint64_t iteration) {
    memset(b, 0, sizeof *b);
    for (int k = 0; k < n; k++) {
        coord_seq *cs = &seqs[idx[k]];
        wf_task *t = &tasks[k];
        memset(t, 0, sizeof *t);
        t->id = iteration * 100 + (uint64_t)k;
        if (cs->n == 0) {
            cs->n = 1 + (int)rnd(MAXH / 3);
            for (int i = 0; i < cs->n; i++) cs->tok[i] = (int32_t)rnd(50000);
            t->kind = WF_TASK_PREFILL;
            t->llm.tokens = cs->tok;
            t->llm.n_tokens = cs->n;
        } else {
            ck_assert_int_lt(cs->n, MAXH);
            cs->tok[cs->n++] = (int32_t)rnd(50000);
            t->kind = WF_TASK_DECODE;
            t->llm.tokens = cs->tok + cs->n - 1;
            t->llm.n_tokens = 1;
            t->llm.pos = cs->n - 1;
        }
        t->request_seq = 1000 + (uint64_t)idx[k];
        wf_task_sample *s = &samples[k];
        memset(s, 0, sizeof *s);
        s->params = &params;
        s->history = cs->tok;
        s->n_history = cs->n;
        s->n_prompt = 1;
        s->seq = 1000 + (uint64_t)idx[k];
        t->llm.samples = s;
        t->llm.n_samples = 1;
    }
    b->tasks = tasks;
    b->n_tasks = n;
    b->iteration = iteration;
}

static uint8_t *frame, *arena_mem;
static size_t frame_cap = 24u << 20, arena_cap = 64u << 20;

/* Encodes, decodes and applies to the store; returns the frame's length. */
static size_t cross(const wf_task_batch *b, wf_seq_store *st, wf_task_batch *out) {
    char err[256];
    size_t len;
    ck_assert_msg(wf_frame_encode_task_dispatch(b, frame, frame_cap, &len, err, sizeof err) == WF_OK, "%s", err);
    wf_frame_view f;
    ck_assert_msg(wf_frame_open(frame, len, frame_cap, &f, err, sizeof err) == WF_OK, "%s", err);
    wf_frame_arena arena;
    wf_frame_arena_init(&arena, arena_mem, arena_cap);
    ck_assert_msg(wf_frame_decode_task_dispatch(&f, &arena, out, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_msg(wf_seq_store_apply(st, out, err, sizeof err) == WF_OK, "%s", err);
    return len;
}

static void setup(void) {
    frame = malloc(frame_cap);
    arena_mem = malloc(arena_cap);
    ck_assert(frame && arena_mem);
    memset(seqs, 0, sizeof seqs);
}

static void teardown(void) {
    free(frame);
    free(arena_mem);
}

START_TEST(worker_rebuilds_the_coordinators_histories) {
    wf_seq_mirror m;
    wf_seq_store st;
    /* Small bounds: evictions (and so drop lists) happen often. */
    ck_assert_int_eq(wf_seq_mirror_init(&m, 5, 8000), WF_OK);
    wf_seq_store_init(&st);
    wf_task tasks[NSEQ];
    wf_task_sample samples[NSEQ];
    int resets = 0, dropped_seen = 0, partial = 0;
    for (int it = 1; it <= 400; it++) {
        /* a few distinct sequences per batch */
        int idx[NSEQ], n = 1 + (int)rnd(4);
        for (int k = 0; k < n; k++) {
            bool again;
            do {
                idx[k] = (int)rnd(NSEQ);
                again = seqs[idx[k]].n >= MAXH - 1;
                for (int q = 0; q < k; q++) again |= idx[q] == idx[k];
            } while (again);
        }
        wf_task_batch b, d;
        build(&b, tasks, samples, idx, n, (uint64_t)it);
        if (it % 97 == 0) { /* a new process took the worker's slot */
            wf_seq_mirror_reset(&m);
            wf_seq_store_free(&st);
            wf_seq_store_init(&st);
            resets++;
        }
        ck_assert_int_eq(wf_seq_mirror_prepare(&m, &b), WF_OK);
        for (int k = 0; k < n; k++) partial += samples[k].history_base > 0;
        cross(&b, &st, &d);
        for (int k = 0; k < n; k++) {
            const wf_task_sample *s = &d.tasks[k].llm.samples[0];
            const coord_seq *cs = &seqs[idx[k]];
            ck_assert_int_eq(s->history_base, 0);
            ck_assert_int_eq(s->n_history, cs->n);
            ck_assert(memcmp(s->history, cs->tok, (size_t)cs->n * sizeof(int32_t)) == 0);
        }
        for (int i = 0; i < d.n_history_drop; i++) {
            ck_assert_int_eq(wf_seq_store_length(&st, d.history_drop[i]), -1);
            dropped_seen++;
        }
        /* the worker never keeps more than the mirror's bounds (plus this batch's) */
        ck_assert_int_le(st.n, 5 + n);
    }
    ck_assert_int_gt(resets, 0);
    ck_assert_int_gt(dropped_seen, 0);
    ck_assert_int_gt(partial, 100); /* most decode steps carried only the new token */
    ck_assert_uint_gt(m.saved_tokens, 0);
    wf_seq_mirror_free(&m);
    wf_seq_store_free(&st);
}
END_TEST

/* 64 sequences 70k tokens long: whole histories make a decode batch's frame pass the link's
 * 16 MiB bound; kept on the worker, the batch carries one token of history per sequence. */
START_TEST(long_histories_fit_the_link) {
    enum { N = 64, LEN = 70000 };
    int32_t *hist = malloc((size_t)N * (LEN + 1) * sizeof *hist);
    ck_assert_ptr_nonnull(hist);
    for (size_t i = 0; i < (size_t)N * (LEN + 1); i++) hist[i] = (int32_t)(i % 49999);
    wf_task tasks[N];
    wf_task_sample samples[N];
    wf_seq_mirror m;
    wf_seq_store st;
    ck_assert_int_eq(wf_seq_mirror_init(&m, 4096, 16l << 20), WF_OK);
    wf_seq_store_init(&st);
    /* The prompts reach the worker 4 at a time (final prefill chunks). */
    for (int first = 0; first < N; first += 4) {
        for (int k = 0; k < 4; k++) {
            int q = first + k;
            tasks[k] = (wf_task){.id = (uint64_t)q, .kind = WF_TASK_PREFILL, .request_seq = 7 + (uint64_t)q,
                                 .llm = {.tokens = hist + (size_t)q * (LEN + 1), .n_tokens = 16,
                                         .samples = &samples[k], .n_samples = 1}};
            samples[k] = (wf_task_sample){.params = &params, .history = hist + (size_t)q * (LEN + 1),
                                          .n_history = LEN, .n_prompt = LEN, .seq = 7 + (uint64_t)q};
        }
        wf_task_batch b = {.tasks = tasks, .n_tasks = 4, .iteration = (uint64_t)first}, d;
        ck_assert_int_eq(wf_seq_mirror_prepare(&m, &b), WF_OK);
        ck_assert_uint_lt(cross(&b, &st, &d), WF_LINK_MAX_FRAME);
    }
    /* One decode step of all 64. */
    for (int q = 0; q < N; q++) {
        const int32_t *h = hist + (size_t)q * (LEN + 1);
        tasks[q] = (wf_task){.id = 100 + (uint64_t)q, .kind = WF_TASK_DECODE, .request_seq = 7 + (uint64_t)q,
                             .llm = {.tokens = h + LEN, .n_tokens = 1, .pos = LEN,
                                     .samples = &samples[q], .n_samples = 1}};
        samples[q] = (wf_task_sample){.params = &params, .history = h, .n_history = LEN + 1,
                                      .n_prompt = LEN, .seq = 7 + (uint64_t)q};
    }
    wf_task_batch b = {.tasks = tasks, .n_tasks = N, .iteration = 99}, d;
    size_t whole;
    char err[256];
    wf_status s = wf_frame_encode_task_dispatch(&b, frame, frame_cap, &whole, err, sizeof err);
    ck_assert_int_eq(s, WF_OK);
    ck_assert_uint_gt(whole, WF_LINK_MAX_FRAME); /* what every decode step used to send */
    ck_assert_int_eq(wf_seq_mirror_prepare(&m, &b), WF_OK);
    size_t kept = cross(&b, &st, &d);
    ck_assert_uint_lt(kept, 64u << 10);
    fprintf(stderr, "64 decode steps of 70001-token histories: %zu bytes whole, %zu kept on the worker\n",
            whole, kept);
    for (int q = 0; q < N; q++) {
        const wf_task_sample *x = &d.tasks[q].llm.samples[0];
        ck_assert_int_eq(x->n_history, LEN + 1);
        ck_assert(memcmp(x->history, hist + (size_t)q * (LEN + 1), (size_t)(LEN + 1) * sizeof(int32_t)) == 0);
    }
    wf_seq_mirror_free(&m);
    wf_seq_store_free(&st);
    free(hist);
}
END_TEST

START_TEST(store_refuses_what_it_cannot_rebuild) {
    wf_seq_store st;
    wf_seq_store_init(&st);
    int32_t tok[4] = {1, 2, 3, 4};
    wf_task_sample s[2] = {{.params = &params, .history = tok + 2, .n_history = 4, .history_base = 2, .seq = 5},
                           {.params = &params, .history = tok, .n_history = 4, .seq = 5}};
    wf_task t[2] = {{.id = 1, .kind = WF_TASK_DECODE, .llm = {.samples = &s[0], .n_samples = 1}},
                    {.id = 2, .kind = WF_TASK_DECODE, .llm = {.samples = &s[1], .n_samples = 1}}};
    wf_task_batch b = {.tasks = t, .n_tasks = 1};
    char err[256];
    /* builds on 2 tokens nobody sent */
    ck_assert_int_eq(wf_seq_store_apply(&st, &b, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "holds 0"));
    /* the same sequence twice in one batch */
    s[0] = (wf_task_sample){.params = &params, .history = tok, .n_history = 4, .seq = 5};
    b.n_tasks = 2;
    ck_assert_int_eq(wf_seq_store_apply(&st, &b, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "twice"));
    /* a reset forgets, a drop forgets one */
    b.n_tasks = 1;
    s[0] = (wf_task_sample){.params = &params, .history = tok, .n_history = 4, .seq = 5};
    ck_assert_int_eq(wf_seq_store_apply(&st, &b, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_seq_store_length(&st, 5), 4);
    uint64_t five = 5;
    wf_task_batch none = {.history_drop = &five, .n_history_drop = 1};
    ck_assert_int_eq(wf_seq_store_apply(&st, &none, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_seq_store_length(&st, 5), -1);
    ck_assert_int_eq(wf_seq_mirror_init(&(wf_seq_mirror){0}, 0, 1), WF_EINVAL);
    wf_seq_store_free(&st);
}
END_TEST

static Suite *seq_history_suite(void) {
    Suite *s = suite_create("seq_history");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, worker_rebuilds_the_coordinators_histories);
    tcase_add_test(tc, long_histories_fit_the_link);
    tcase_add_test(tc, store_refuses_what_it_cannot_rebuild);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(seq_history_suite)
