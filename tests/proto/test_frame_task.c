#define _GNU_SOURCE /* memmem */
/* proto/frame_task.c: TASK_DISPATCH, TASK_EVENT and BATCH_DONE round trips with random
 * contents (field by field), truncation at every offset, each class of bad frame, the arena
 * bound, applying events to a batch, and the fuzz seeds of tests/fuzz/corpus/frame_task/. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "frame_testutil.h"
#include "proto/frame.h"
#include "proto/frame_task.h"

/* The 1.3 trailer of a one-task batch without a local table: u32 n, i32 swa_lo, u32 count. */
#define TRAILER_1_3 12u

/* ---- random batches (storage bump-allocated from a static pool) ------------------------------ */

static uint8_t pool[8 << 20];
static size_t pool_used;

static void *palloc(size_t n) {
    pool_used = (pool_used + 15) & ~(size_t)15;
    ck_assert_uint_le(pool_used + n, sizeof pool);
    void *p = pool + pool_used;
    pool_used += n;
    memset(p, 0, n);
    return p;
}

static void rand_group(trng *r, wf_group *g) {
    g->id = trng_u64(r);
    g->n_ranks = trng_int(r, 0, 5) == 0 ? WF_MAX_GROUP_RANKS : trng_int(r, 0, 4);
    for (int i = 0; i < g->n_ranks; i++) g->ranks[i] = trng_int(r, 0, 1000);
}

static int32_t *rand_i32s(trng *r, int n, int max) {
    int32_t *v = n ? palloc((size_t)n * 4) : NULL;
    for (int i = 0; i < n; i++) v[i] = trng_int(r, 0, max);
    return v;
}

static void rand_artifact(trng *r, wf_artifact *a, wf_artifact_kind kind) {
    memset(a, 0, sizeof *a);
    a->id = trng_u64(r);
    a->kind = kind;
    a->placement.kind = (wf_placement_kind)trng_int(r, 0, 2);
    a->placement.shard_dim = trng_int(r, -1, 3);
    rand_group(r, &a->placement.holders);
    if (kind == WF_ARTIFACT_KV) {
        a->n_blocks = trng_int(r, 0, 12);
        a->block_table = rand_i32s(r, a->n_blocks, 100000);
    } else if (kind == WF_ARTIFACT_LATENT) {
        a->latent.channels = trng_int(r, 1, 8);
        a->latent.height = trng_int(r, 1, 64);
        a->latent.width = trng_int(r, 1, 64);
        a->latent.step = trng_int(r, 0, 50);
    } else if (kind == WF_ARTIFACT_IMAGE) {
        a->image.channels = 3;
        a->image.height = trng_int(r, 1, 512);
        a->image.width = trng_int(r, 1, 512);
    }
}

static wf_sampling_params *rand_params(trng *r) {
    wf_sampling_params *p = palloc(sizeof *p);
    p->temperature = trng_float(r);
    p->top_k = trng_int(r, 0, 100);
    p->top_p = trng_float(r);
    p->min_p = trng_float(r);
    p->repetition_penalty = trng_float(r);
    p->frequency_penalty = trng_float(r);
    p->presence_penalty = trng_float(r);
    p->has_seed = trng_int(r, 0, 1);
    p->seed = trng_u64(r);
    p->logprobs = trng_int(r, 0, 1);
    p->top_logprobs = trng_int(r, 0, WF_MAX_TOP_LOGPROBS);
    p->n_logit_bias = trng_int(r, 0, 4);
    wf_logit_bias *lb = p->n_logit_bias ? palloc(sizeof *lb * (size_t)p->n_logit_bias) : NULL;
    for (int i = 0; i < p->n_logit_bias; i++) {
        lb[i].token = trng_int(r, 0, 50000);
        lb[i].bias = trng_float(r);
    }
    p->logit_bias = lb;
    return p;
}

static void rand_gen_token(trng *r, wf_generated_token *t) {
    t->token = trng_int(r, 0, 50000);
    t->logprob = -trng_float(r);
    t->n_top = trng_int(r, 0, WF_MAX_TOP_LOGPROBS);
    for (int i = 0; i < t->n_top; i++) {
        t->top[i].token = trng_int(r, 0, 50000);
        t->top[i].logprob = trng_float(r);
    }
}

static void rand_task(trng *r, wf_task *t, int kind) {
    memset(t, 0, sizeof *t);
    t->id = trng_u64(r);
    t->kind = (wf_task_kind)(kind >= 0 ? kind : trng_int(r, 0, WF_TASK_KIND_COUNT - 1));
    t->request_seq = trng_u64(r);
    t->vmodel = (uint32_t)trng_u64(r);
    rand_group(r, &t->group);
    t->deadline_ns = trng_u64(r);
    switch (t->kind) {
    case WF_TASK_PREFILL:
    case WF_TASK_DECODE: {
        wf_task_llm *l = &t->llm;
        l->n_tokens = t->kind == WF_TASK_DECODE ? 1 : trng_int(r, 0, 40);
        l->tokens = rand_i32s(r, l->n_tokens, 50000);
        l->pos = trng_int(r, 0, 4096);
        rand_artifact(r, &l->kv, WF_ARTIFACT_KV);
        if (trng_int(r, 0, 1)) { /* 1.3: a split store's local table, released entries first */
            int32_t *swa = palloc(sizeof *swa * (size_t)(l->kv.n_blocks + 1));
            int lo = trng_int(r, 0, l->kv.n_blocks);
            for (int i = 0; i < l->kv.n_blocks; i++) swa[i] = i < lo ? -1 : trng_int(r, 0, 100000);
            l->kv.swa_block_table = swa;
        }
        l->n_samples = trng_int(r, 0, 3);
        l->samples = l->n_samples ? palloc(sizeof *l->samples * (size_t)l->n_samples) : NULL;
        for (int i = 0; i < l->n_samples; i++) {
            wf_task_sample *s = &l->samples[i];
            s->params = rand_params(r);
            s->rng_state = trng_u64(r);
            s->n_history = trng_int(r, 0, 30);
            /* 1.2: a sequence's history travels once; history holds the tokens from
             * history_base on (seq 0: whole, kept nowhere) */
            s->seq = trng_int(r, 0, 3) ? trng_u64(r) | 1 : 0;
            s->history_base = s->seq ? trng_int(r, 0, s->n_history) : 0;
            s->history = rand_i32s(r, s->n_history - s->history_base, 50000);
            s->n_prompt = trng_int(r, 0, s->n_history);
            s->suppress_eos = trng_int(r, 0, 1);
            rand_gen_token(r, &s->out);
            s->out_is_eog = trng_int(r, 0, 1);
        }
        break;
    }
    case WF_TASK_ENCODE:
    case WF_TASK_DENOISE:
    case WF_TASK_DECODE_IMAGE: {
        wf_task_dit *d = &t->dit;
        d->class_label = trng_int(r, -1, 1000);
        d->negative_label = trng_int(r, -1, 1000);
        d->guidance_scale = trng_float(r);
        d->sampler = trng_int(r, 0, 3);
        d->num_steps = trng_int(r, 0, 250);
        d->step_begin = trng_int(r, 0, d->num_steps);
        d->step_end = trng_int(r, d->step_begin, d->num_steps);
        d->seed = trng_u64(r);
        d->noise_index = (uint32_t)trng_int(r, 0, 9);
        rand_artifact(r, &d->latent, WF_ARTIFACT_LATENT);
        rand_artifact(r, &d->image, trng_int(r, 0, 1) ? WF_ARTIFACT_IMAGE : WF_ARTIFACT_NONE);
        break;
    }
    default:
        rand_artifact(r, &t->finish.artifact, (wf_artifact_kind)trng_int(r, 0, 3));
        break;
    }
    t->status = (wf_status)trng_int(r, WF_STATUS_MIN, 0);
    t->t_begin_ns = trng_u64(r);
    t->t_end_ns = trng_u64(r);
}

static void rand_batch(trng *r, wf_task_batch *b, int n_tasks, int kind) {
    b->iteration = trng_u64(r);
    rand_group(r, &b->group);
    b->n_tasks = n_tasks;
    b->tasks = n_tasks ? palloc(sizeof *b->tasks * (size_t)n_tasks) : NULL;
    for (int i = 0; i < n_tasks; i++) rand_task(r, &b->tasks[i], kind);
    b->history_reset = trng_int(r, 0, 1);
    b->n_history_drop = trng_int(r, 0, 4);
    uint64_t *drop = b->n_history_drop ? palloc(sizeof *drop * (size_t)b->n_history_drop) : NULL;
    for (int i = 0; i < b->n_history_drop; i++) drop[i] = trng_u64(r);
    b->history_drop = drop;
}

/* ---- comparisons ------------------------------------------------------------------------------- */

static void cmp_group(const wf_group *a, const wf_group *b) {
    ck_assert_uint_eq(a->id, b->id);
    ck_assert_int_eq(a->n_ranks, b->n_ranks);
    for (int i = 0; i < a->n_ranks; i++) ck_assert_int_eq(a->ranks[i], b->ranks[i]);
}

static void cmp_i32s(const int32_t *a, const int32_t *b, int n) {
    for (int i = 0; i < n; i++) ck_assert_int_eq(a[i], b[i]);
}

static void cmp_f32(float a, float b) { ck_assert(memcmp(&a, &b, 4) == 0); }

static void cmp_artifact(const wf_artifact *a, const wf_artifact *b) {
    ck_assert_uint_eq(a->id, b->id);
    ck_assert_int_eq(a->kind, b->kind);
    ck_assert_int_eq(a->placement.kind, b->placement.kind);
    ck_assert_int_eq(a->placement.shard_dim, b->placement.shard_dim);
    cmp_group(&a->placement.holders, &b->placement.holders);
    if (a->kind == WF_ARTIFACT_KV) {
        ck_assert_int_eq(a->n_blocks, b->n_blocks);
        cmp_i32s(a->block_table, b->block_table, a->n_blocks);
    } else if (a->kind == WF_ARTIFACT_LATENT) {
        ck_assert(memcmp(&a->latent, &b->latent, sizeof a->latent) == 0);
    } else if (a->kind == WF_ARTIFACT_IMAGE) {
        ck_assert(memcmp(&a->image, &b->image, sizeof a->image) == 0);
    }
}

static void cmp_params(const wf_sampling_params *a, const wf_sampling_params *b) {
    cmp_f32(a->temperature, b->temperature);
    ck_assert_int_eq(a->top_k, b->top_k);
    cmp_f32(a->top_p, b->top_p);
    cmp_f32(a->min_p, b->min_p);
    cmp_f32(a->repetition_penalty, b->repetition_penalty);
    cmp_f32(a->frequency_penalty, b->frequency_penalty);
    cmp_f32(a->presence_penalty, b->presence_penalty);
    ck_assert_int_eq(a->has_seed, b->has_seed);
    ck_assert_uint_eq(a->seed, b->seed);
    ck_assert_int_eq(a->logprobs, b->logprobs);
    ck_assert_int_eq(a->top_logprobs, b->top_logprobs);
    ck_assert_int_eq(a->n_logit_bias, b->n_logit_bias);
    for (int i = 0; i < a->n_logit_bias; i++) {
        ck_assert_int_eq(a->logit_bias[i].token, b->logit_bias[i].token);
        cmp_f32(a->logit_bias[i].bias, b->logit_bias[i].bias);
    }
}

static void cmp_gen_token(const wf_generated_token *a, const wf_generated_token *b) {
    ck_assert_int_eq(a->token, b->token);
    cmp_f32(a->logprob, b->logprob);
    ck_assert_int_eq(a->n_top, b->n_top);
    for (int i = 0; i < a->n_top; i++) {
        ck_assert_int_eq(a->top[i].token, b->top[i].token);
        cmp_f32(a->top[i].logprob, b->top[i].logprob);
    }
}

/* Inputs only: a dispatch does not carry outputs (they must decode as zero). */
static void cmp_task(const wf_task *a, const wf_task *b) {
    ck_assert_uint_eq(a->id, b->id);
    ck_assert_int_eq(a->kind, b->kind);
    ck_assert_uint_eq(a->request_seq, b->request_seq);
    ck_assert_uint_eq(a->vmodel, b->vmodel);
    cmp_group(&a->group, &b->group);
    ck_assert_uint_eq(a->deadline_ns, b->deadline_ns);
    ck_assert_int_eq(b->status, WF_OK);
    ck_assert_uint_eq(b->t_begin_ns, 0);
    ck_assert_uint_eq(b->t_end_ns, 0);
    switch (a->kind) {
    case WF_TASK_PREFILL:
    case WF_TASK_DECODE:
        ck_assert_int_eq(a->llm.n_tokens, b->llm.n_tokens);
        cmp_i32s(a->llm.tokens, b->llm.tokens, a->llm.n_tokens);
        ck_assert_int_eq(a->llm.pos, b->llm.pos);
        cmp_artifact(&a->llm.kv, &b->llm.kv);
        ck_assert_int_eq(a->llm.kv.swa_block_table == NULL, b->llm.kv.swa_block_table == NULL);
        if (a->llm.kv.swa_block_table)
            cmp_i32s(a->llm.kv.swa_block_table, b->llm.kv.swa_block_table, a->llm.kv.n_blocks);
        ck_assert_int_eq(a->llm.n_samples, b->llm.n_samples);
        for (int i = 0; i < a->llm.n_samples; i++) {
            const wf_task_sample *x = &a->llm.samples[i], *y = &b->llm.samples[i];
            cmp_params(x->params, y->params);
            ck_assert_uint_eq(x->rng_state, y->rng_state);
            ck_assert_int_eq(x->n_history, y->n_history);
            ck_assert_uint_eq(x->seq, y->seq);
            ck_assert_int_eq(x->history_base, y->history_base);
            cmp_i32s(x->history, y->history, x->n_history - x->history_base);
            ck_assert_int_eq(x->n_prompt, y->n_prompt);
            ck_assert_int_eq(x->suppress_eos, y->suppress_eos);
            ck_assert_int_eq(y->out.token, 0);
            ck_assert_int_eq(y->out_is_eog, 0);
        }
        break;
    case WF_TASK_ENCODE:
    case WF_TASK_DENOISE:
    case WF_TASK_DECODE_IMAGE:
        ck_assert_int_eq(a->dit.class_label, b->dit.class_label);
        ck_assert_int_eq(a->dit.negative_label, b->dit.negative_label);
        cmp_f32(a->dit.guidance_scale, b->dit.guidance_scale);
        ck_assert_int_eq(a->dit.sampler, b->dit.sampler);
        ck_assert_int_eq(a->dit.num_steps, b->dit.num_steps);
        ck_assert_int_eq(a->dit.step_begin, b->dit.step_begin);
        ck_assert_int_eq(a->dit.step_end, b->dit.step_end);
        ck_assert_uint_eq(a->dit.seed, b->dit.seed);
        ck_assert_uint_eq(a->dit.noise_index, b->dit.noise_index);
        cmp_artifact(&a->dit.latent, &b->dit.latent);
        cmp_artifact(&a->dit.image, &b->dit.image);
        ck_assert_ptr_null(b->dit.pixels);
        break;
    default:
        cmp_artifact(&a->finish.artifact, &b->finish.artifact);
        break;
    }
}

/* ---- helpers ------------------------------------------------------------------------------------- */

static uint8_t frame_buf[4 << 20];
static uint8_t arena_mem[8 << 20];

static size_t encode_batch(const wf_task_batch *b) {
    size_t len;
    char err[256];
    wf_status st = wf_frame_encode_task_dispatch(b, frame_buf, sizeof frame_buf, &len, err,
                                                 sizeof err);
    ck_assert_msg(st == WF_OK, "encode: %s", err);
    return len;
}

static wf_status dec_dispatch(const wf_frame_view *f, wf_frame_arena *a, char *err, size_t n) {
    wf_task_batch b;
    return wf_frame_decode_task_dispatch(f, a, &b, err, n);
}
static wf_status dec_event(const wf_frame_view *f, wf_frame_arena *a, char *err, size_t n) {
    wf_frame_task_event ev;
    return wf_frame_decode_task_event(f, a, &ev, err, n);
}
static wf_status dec_done(const wf_frame_view *f, wf_frame_arena *a, char *err, size_t n) {
    (void)a;
    wf_frame_batch_done d;
    return wf_frame_decode_batch_done(f, &d, err, n);
}
/* Any frame of the family (the seed check). */
static wf_status dec_any(const wf_frame_view *f, wf_frame_arena *a, char *err, size_t n) {
    switch (f->hdr.type) {
    case WF_FRAME_TASK_DISPATCH: return dec_dispatch(f, a, err, n);
    case WF_FRAME_TASK_EVENT: return dec_event(f, a, err, n);
    case WF_FRAME_BATCH_DONE: return dec_done(f, a, err, n);
    }
    return WF_EPROTO;
}

/* Decodes frame_buf[0..len) as a dispatch; returns the status and the message in err. */
static wf_status decode_batch(size_t len, wf_task_batch *out, size_t arena_cap, char *err,
                              size_t errlen) {
    wf_frame_view f;
    wf_status st = wf_frame_open(frame_buf, len, sizeof frame_buf, &f, err, errlen);
    if (st != WF_OK) return st;
    wf_frame_arena arena;
    wf_frame_arena_init(&arena, arena_mem, arena_cap);
    return wf_frame_decode_task_dispatch(&f, &arena, out, err, errlen);
}

/* ---- TASK_DISPATCH ------------------------------------------------------------------------------ */

START_TEST(dispatch_roundtrip_random) {
    trng r = {42};
    for (int iter = 0; iter < 300; iter++) {
        pool_used = 0;
        wf_task_batch b;
        rand_batch(&r, &b, trng_int(&r, 0, 12), -1);
        size_t len = encode_batch(&b);
        wf_frame_view f;
        char err[256];
        ck_assert_int_eq(wf_frame_open(frame_buf, len, sizeof frame_buf, &f, err, sizeof err),
                         WF_OK);
        ck_assert_uint_eq(f.frame_len, len);
        ck_assert_uint_eq(f.hdr.type, WF_FRAME_TASK_DISPATCH);
        wf_frame_arena arena;
        wf_frame_arena_init(&arena, arena_mem, sizeof arena_mem);
        wf_task_batch d;
        ck_assert_msg(wf_frame_decode_task_dispatch(&f, &arena, &d, err, sizeof err) == WF_OK,
                      "%s", err);
        ck_assert_uint_le(arena.used, wf_frame_task_dispatch_arena_bound(f.hdr.payload_len));
        ck_assert_uint_eq(d.iteration, b.iteration);
        cmp_group(&b.group, &d.group);
        ck_assert_int_eq(d.n_tasks, b.n_tasks);
        for (int i = 0; i < b.n_tasks; i++) cmp_task(&b.tasks[i], &d.tasks[i]);
        ck_assert_int_eq(d.history_reset, b.history_reset);
        ck_assert_int_eq(d.n_history_drop, b.n_history_drop);
        for (int i = 0; i < b.n_history_drop; i++) ck_assert_uint_eq(d.history_drop[i], b.history_drop[i]);
        /* decoded pointers live in the arena, never in the frame bytes */
        for (int i = 0; i < d.n_tasks; i++)
            if ((d.tasks[i].kind == WF_TASK_DECODE || d.tasks[i].kind == WF_TASK_PREFILL) &&
                d.tasks[i].llm.n_tokens)
                ck_assert((const uint8_t *)d.tasks[i].llm.tokens >= arena_mem &&
                          (const uint8_t *)d.tasks[i].llm.tokens < arena_mem + arena.used);
        /* re-encoding the decoded batch gives the same bytes */
        static uint8_t again[1 << 20];
        size_t len2;
        ck_assert_int_eq(wf_frame_encode_task_dispatch(&d, again, sizeof again, &len2, err,
                                                       sizeof err),
                         WF_OK);
        ck_assert_uint_eq(len2, len);
        ck_assert(memcmp(again, frame_buf, len) == 0);
    }
}
END_TEST

START_TEST(dispatch_truncated_everywhere) {
    trng r = {7};
    for (int kind = 0; kind < WF_TASK_KIND_COUNT; kind++) {
        pool_used = 0;
        wf_task_batch b;
        rand_batch(&r, &b, 2, kind);
        size_t len = encode_batch(&b);
        check_truncations(frame_buf, len, dec_dispatch);
    }
}
END_TEST

START_TEST(dispatch_encode_needs_room) {
    trng r = {3};
    pool_used = 0;
    wf_task_batch b;
    rand_batch(&r, &b, 4, WF_TASK_DECODE);
    size_t need, len;
    char err[256];
    /* measuring with no buffer at all */
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, NULL, 0, &need, err, sizeof err),
                     WF_ERANGE);
    ck_assert_uint_gt(need, WF_FRAME_HEADER_SIZE);
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, need - 1, &len, err,
                                                   sizeof err),
                     WF_ERANGE);
    ck_assert_uint_eq(len, need);
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, need, &len, err, sizeof err),
                     WF_OK);
    ck_assert_uint_eq(len, need);
}
END_TEST

START_TEST(dispatch_encode_refuses_invalid) {
    trng r = {5};
    char err[256];
    size_t len;
    pool_used = 0;
    wf_task_batch b;
    rand_batch(&r, &b, 1, WF_TASK_DECODE);
    b.tasks[0].llm.n_samples = 1;
    wf_task_batch ok = b;
    b.group.n_ranks = WF_MAX_GROUP_RANKS + 1;
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, sizeof frame_buf, &len, err,
                                                   sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "n_ranks"));
    b = ok;
    b.tasks[0].kind = (wf_task_kind)99;
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, sizeof frame_buf, &len, err,
                                                   sizeof err),
                     WF_EINVAL);
    b.tasks[0].kind = WF_TASK_DECODE;
    b.tasks[0].llm.samples[0].n_prompt = b.tasks[0].llm.samples[0].n_history + 1;
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, sizeof frame_buf, &len, err,
                                                   sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "n_prompt"));
    b.tasks[0].llm.samples[0].n_prompt = 0;
    /* history_base past the history, or kept for no sequence */
    wf_task_sample keep = b.tasks[0].llm.samples[0];
    b.tasks[0].llm.samples[0].seq = 5;
    b.tasks[0].llm.samples[0].history_base = b.tasks[0].llm.samples[0].n_history + 1;
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, sizeof frame_buf, &len, err,
                                                   sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "history_base"));
    b.tasks[0].llm.samples[0].seq = 0;
    b.tasks[0].llm.samples[0].history_base = b.tasks[0].llm.samples[0].n_history;
    if (b.tasks[0].llm.samples[0].history_base > 0) {
        ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, sizeof frame_buf, &len,
                                                       err, sizeof err),
                         WF_EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "without a sequence"));
    }
    b.tasks[0].llm.samples[0] = keep;
    b.n_history_drop = WF_FRAME_MAX_HISTORY_DROP + 1;
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, sizeof frame_buf, &len, err,
                                                   sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "n_history_drop"));
    b.n_history_drop = 0;
    wf_sampling_params p = *b.tasks[0].llm.samples[0].params;
    p.top_logprobs = WF_MAX_TOP_LOGPROBS + 1;
    b.tasks[0].llm.samples[0].params = &p;
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, sizeof frame_buf, &len, err,
                                                   sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "top_logprobs"));
    pool_used = 0;
    rand_batch(&r, &b, 1, WF_TASK_DENOISE);
    b.tasks[0].dit.step_end = b.tasks[0].dit.num_steps + 1;
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, sizeof frame_buf, &len, err,
                                                   sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "steps"));
}
END_TEST

/* A batch with a known layout, for patching single fields: group of 0 ranks, one task whose
 * own group has 0 ranks. Payload offsets: n_tasks at 17, task at 21, kind at 29, kind payload
 * at 59. */
static size_t known_batch(wf_task_kind kind) {
    static int32_t tok[1] = {5};
    static wf_sampling_params params;
    static wf_task_sample sample;
    static wf_task task;
    memset(&task, 0, sizeof task);
    memset(&params, 0, sizeof params);
    memset(&sample, 0, sizeof sample);
    params.temperature = 1;
    sample.params = &params;
    task.id = 77;
    task.kind = kind;
    if (kind == WF_TASK_DECODE) {
        task.llm.tokens = tok;
        task.llm.n_tokens = 1;
        task.llm.samples = &sample;
        task.llm.n_samples = 1;
    } else if (kind == WF_TASK_DENOISE) {
        task.dit.num_steps = 10;
        task.dit.step_begin = 2;
        task.dit.step_end = 4;
    }
    wf_task_batch b = {.tasks = &task, .n_tasks = 1, .iteration = 9};
    return encode_batch(&b);
}

static void patch_u32(size_t payload_off, uint32_t v) {
    uint8_t *p = frame_buf + WF_FRAME_HEADER_SIZE + payload_off;
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t payload_len(void) {
    return frame_buf[12] | frame_buf[13] << 8 | frame_buf[14] << 16 | (uint32_t)frame_buf[15] << 24;
}

static void expect_decode(size_t len, wf_status want, const char *needle) {
    wf_task_batch d;
    char err[256] = "";
    reseal(frame_buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    wf_status st = decode_batch(len, &d, sizeof arena_mem, err, sizeof err);
    ck_assert_msg(st == want, "want %d got %d (%s)", want, st, err);
    ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
}

START_TEST(dispatch_rejects_bad_fields) {
    size_t len = known_batch(WF_TASK_DECODE);
    ck_assert_uint_eq(frame_buf[WF_FRAME_HEADER_SIZE + 29], WF_TASK_DECODE);
    /* a count that needs more bytes than are left: refused before allocating */
    patch_u32(17, 1000);
    expect_decode(len, WF_EFORMAT, "n_tasks");
    /* over the maximum */
    patch_u32(17, WF_FRAME_MAX_TASKS + 1);
    expect_decode(len, WF_ERANGE, "n_tasks");
    /* invalid enum: task kind */
    len = known_batch(WF_TASK_DECODE);
    frame_buf[WF_FRAME_HEADER_SIZE + 29] = WF_TASK_KIND_COUNT;
    expect_decode(len, WF_EPROTO, "kind");
    /* group n_ranks > WF_MAX_GROUP_RANKS (the batch group's count byte is at 16) */
    len = known_batch(WF_TASK_DECODE);
    frame_buf[WF_FRAME_HEADER_SIZE + 16] = WF_MAX_GROUP_RANKS + 1;
    expect_decode(len, WF_ERANGE, "n_ranks");
    /* negative token (tokens: count at 59, token at 63) */
    len = known_batch(WF_TASK_DECODE);
    patch_u32(63, (uint32_t)-3);
    expect_decode(len, WF_ERANGE, "tokens");
    /* negative pos at 67 */
    len = known_batch(WF_TASK_DECODE);
    patch_u32(67, (uint32_t)-1);
    expect_decode(len, WF_ERANGE, "pos");
    /* artifact kind at 71 + 8 = 79 */
    len = known_batch(WF_TASK_DECODE);
    frame_buf[WF_FRAME_HEADER_SIZE + 79] = 9;
    expect_decode(len, WF_EPROTO, "artifact kind");
    /* placement kind at 80 */
    len = known_batch(WF_TASK_DECODE);
    frame_buf[WF_FRAME_HEADER_SIZE + 80] = 3;
    expect_decode(len, WF_EPROTO, "placement kind");
    /* sample: sampling starts at 98; has_seed at 126 must be 0 or 1 */
    len = known_batch(WF_TASK_DECODE);
    frame_buf[WF_FRAME_HEADER_SIZE + 126] = 2;
    expect_decode(len, WF_EPROTO, "has_seed");
    /* top_logprobs at 136 */
    len = known_batch(WF_TASK_DECODE);
    frame_buf[WF_FRAME_HEADER_SIZE + 136] = WF_MAX_TOP_LOGPROBS + 1;
    expect_decode(len, WF_ERANGE, "top_logprobs");
    /* negative top_k at 102 */
    len = known_batch(WF_TASK_DECODE);
    patch_u32(102, (uint32_t)-1);
    expect_decode(len, WF_ERANGE, "top_k");
    /* n_logit_bias at 137: more than the bytes left */
    len = known_batch(WF_TASK_DECODE);
    patch_u32(137, 100);
    expect_decode(len, WF_EFORMAT, "n_logit_bias");
    /* 1.2 sample: rng_state at 141, seq at 149, history_base at 157, history count at 161,
     * n_prompt at 165 (> n_history 0) */
    len = known_batch(WF_TASK_DECODE);
    patch_u32(165, 1);
    expect_decode(len, WF_ERANGE, "n_prompt");
    /* history_base beyond the bound, or without a sequence (seq 0) */
    len = known_batch(WF_TASK_DECODE);
    patch_u32(157, WF_FRAME_MAX_TOKENS + 1);
    expect_decode(len, WF_ERANGE, "history_base");
    len = known_batch(WF_TASK_DECODE);
    patch_u32(157, 3);
    expect_decode(len, WF_EPROTO, "without a sequence");
    /* carried tokens past what history_base leaves of the bound */
    len = known_batch(WF_TASK_DECODE);
    patch_u32(149, 7);
    patch_u32(157, WF_FRAME_MAX_TOKENS - 1);
    patch_u32(161, 2);
    expect_decode(len, WF_ERANGE, "history");
    /* 170 bytes of the task, then the 1.1 trailer: u32 n + (f32 kv_accuracy, u32 kv_codec,
     * u32 noise_index), then the 1.2 one: bool history_reset, u32 n_history_drop, then the 1.3
     * one */
    ck_assert_uint_eq(payload_len(), 191 + TRAILER_1_3);
    len = known_batch(WF_TASK_DECODE);
    frame_buf[WF_FRAME_HEADER_SIZE + 186] = 2;
    expect_decode(len, WF_EPROTO, "history_reset");
    len = known_batch(WF_TASK_DECODE);
    patch_u32(187, 100);
    expect_decode(len, WF_EFORMAT, "n_history_drop");
    len = known_batch(WF_TASK_DECODE);
    patch_u32(187, WF_FRAME_MAX_HISTORY_DROP + 1);
    expect_decode(len, WF_ERANGE, "n_history_drop");
    /* DiT: num_steps at 75, step_begin at 79, step_end at 83 */
    len = known_batch(WF_TASK_DENOISE);
    patch_u32(83, 11);
    expect_decode(len, WF_ERANGE, "step_end");
    len = known_batch(WF_TASK_DENOISE);
    patch_u32(79, 5);
    expect_decode(len, WF_ERANGE, "step_end");
    len = known_batch(WF_TASK_DENOISE);
    patch_u32(75, (uint32_t)-1);
    expect_decode(len, WF_ERANGE, "num_steps");
}
END_TEST

/* known_batch(WF_TASK_DECODE) as an older version wrote it: without the 1.3 trailer and, before
 * 1.2, the 1.2 sample fields (seq, history_base at 149..157), the 1.2 trailer (5 bytes) and, for
 * 1.0, the 1.1 one (16 bytes). Returns the frame's length. */
static size_t older_decode_frame(int minor) {
    size_t len = known_batch(WF_TASK_DECODE);
    uint8_t *pl = frame_buf + WF_FRAME_HEADER_SIZE;
    size_t plen = len - WF_FRAME_HEADER_SIZE - TRAILER_1_3;
    if (minor < 2) {
        memmove(pl + 149, pl + 161, plen - 161);
        plen -= 12 + 5 + (minor == 0 ? 16 : 0);
    }
    frame_buf[5] = (uint8_t)minor;
    reseal(frame_buf, (uint32_t)plen);
    return WF_FRAME_HEADER_SIZE + plen;
}

/* 1.1: the KV accuracy budget and codec choice of LLM tasks cross after the tasks; a 1.0 frame
 * (no trailer) still decodes, with both 0; values outside [0, 1] are rejected. 1.0 and 1.1
 * frames carry each history whole and decode with history_base and seq 0. */
START_TEST(dispatch_kv_trailer) {
    size_t len = known_batch(WF_TASK_DECODE);
    uint32_t plen = payload_len() - TRAILER_1_3;
    /* trailer: n at plen - 21, kv_accuracy at plen - 17, kv_codec at plen - 13, noise_index at
     * plen - 9; then the 1.2 trailer (5 bytes) (plen: the payload without the 1.3 trailer) */
    float acc = 0.75f;
    uint32_t bits;
    memcpy(&bits, &acc, 4);
    patch_u32(plen - 17, bits);
    patch_u32(plen - 13, 5);
    wf_task_batch d;
    char err[256] = "";
    reseal(frame_buf, plen + TRAILER_1_3);
    ck_assert_int_eq(decode_batch(len, &d, sizeof arena_mem, err, sizeof err), WF_OK);
    ck_assert(d.tasks[0].llm.kv_accuracy == 0.75f);
    ck_assert_uint_eq(d.tasks[0].llm.kv_codec, 5);
    acc = 1.5f;
    memcpy(&bits, &acc, 4);
    patch_u32(plen - 17, bits);
    expect_decode(len, WF_ERANGE, "kv_accuracy");
    len = known_batch(WF_TASK_DECODE);
    patch_u32(plen - 21, 2);
    expect_decode(len, WF_EPROTO, "kv_accuracy values");
    /* the same frame as 1.0 and 1.1 */
    wf_task_batch d0;
    for (int minor = 0; minor <= 2; minor++) {
        len = older_decode_frame(minor);
        ck_assert_int_eq(decode_batch(len, &d0, sizeof arena_mem, err, sizeof err), WF_OK);
        ck_assert(d0.tasks[0].llm.kv_accuracy == 0.0f && d0.tasks[0].llm.kv_codec == 0);
        ck_assert_int_eq(d0.tasks[0].llm.n_samples, 1);
        ck_assert_ptr_null(d0.tasks[0].llm.kv.swa_block_table);
        if (minor == 2) continue; /* 1.2 carries histories by sequence */
        ck_assert_int_eq(d0.tasks[0].llm.samples[0].history_base, 0);
        ck_assert_uint_eq(d0.tasks[0].llm.samples[0].seq, 0);
        ck_assert(!d0.history_reset && d0.n_history_drop == 0);
    }
    /* a field of another kind must be 0, so that decode-then-encode gives the same bytes (the
     * frame fuzzer found a DiT task with a kv_codec): a noise index on a DECODE task, a codec
     * on a DENOISE task, and a negative zero accuracy on a DENOISE task are refused */
    len = known_batch(WF_TASK_DECODE);
    patch_u32(plen - 9, 1);
    expect_decode(len, WF_EPROTO, "noise_index");
    len = known_batch(WF_TASK_DENOISE);
    uint32_t dlen = payload_len() - TRAILER_1_3;
    patch_u32(dlen - 13, 5);
    expect_decode(len, WF_EPROTO, "kv_codec");
    len = known_batch(WF_TASK_DENOISE);
    patch_u32(dlen - 17, 0x80000000u);
    expect_decode(len, WF_EPROTO, "kv_accuracy");
    len = known_batch(WF_TASK_DENOISE);
    patch_u32(dlen - 9, 3);
    reseal(frame_buf, dlen + TRAILER_1_3);
    ck_assert_int_eq(decode_batch(len, &d, sizeof arena_mem, err, sizeof err), WF_OK);
    ck_assert_uint_eq(d.tasks[0].dit.noise_index, 3);
}
END_TEST

/* 1.3: a split store's local table crosses as (swa_lo, entries from swa_lo), decodes whole with
 * -1 before swa_lo, and is refused when it does not match the block table, holds a negative
 * entry, or comes with a task that is not PREFILL/DECODE; the encoder refuses a released entry
 * after a held block. */
static int32_t swa_kv[5] = {10, 11, 12, 13, 14};
static int32_t swa_local[5] = {-1, -1, -1, 3, 4};
static wf_task swa_tasks[2];

static size_t swa_batch(void) {
    memset(swa_tasks, 0, sizeof swa_tasks);
    swa_tasks[0].id = 1;
    swa_tasks[0].kind = WF_TASK_PREFILL;
    swa_tasks[0].llm.kv.kind = WF_ARTIFACT_KV;
    swa_tasks[0].llm.kv.block_table = swa_kv;
    swa_tasks[0].llm.kv.n_blocks = 5;
    swa_tasks[0].llm.kv.swa_block_table = swa_local;
    swa_tasks[1].id = 2;
    swa_tasks[1].kind = WF_TASK_FINISH;
    wf_task_batch b = {.tasks = swa_tasks, .n_tasks = 2, .iteration = 3};
    return encode_batch(&b);
}

START_TEST(dispatch_swa_table) {
    size_t len = swa_batch();
    uint32_t plen = payload_len();
    /* trailer (28 bytes): n at plen - 28; task 0: swa_lo at plen - 24, count at plen - 20,
     * entries at plen - 16 and plen - 12; task 1: swa_lo at plen - 8, count at plen - 4 */
    wf_task_batch d;
    char err[256] = "";
    ck_assert_int_eq(decode_batch(len, &d, sizeof arena_mem, err, sizeof err), WF_OK);
    ck_assert_ptr_nonnull(d.tasks[0].llm.kv.swa_block_table);
    cmp_i32s(d.tasks[0].llm.kv.swa_block_table, swa_local, 5);
    ck_assert_int_eq(d.tasks[0].llm.kv.n_blocks, 5);
    /* the bytes are the same as decode-then-encode gives */
    static uint8_t first[4096];
    memcpy(first, frame_buf, len);
    ck_assert_uint_eq(encode_batch(&d), len);
    ck_assert(memcmp(first, frame_buf, len) == 0);
    /* every entry released (a sequence whose window lies past its held blocks) */
    swa_local[3] = swa_local[4] = -1;
    len = swa_batch();
    ck_assert_int_eq(decode_batch(len, &d, sizeof arena_mem, err, sizeof err), WF_OK);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(d.tasks[0].llm.kv.swa_block_table[i], -1);
    swa_local[3] = 3;
    swa_local[4] = 4;
    /* the same batch as 1.2 wrote it (no trailer): no local table */
    len = swa_batch();
    frame_buf[5] = 2;
    reseal(frame_buf, plen - 28);
    ck_assert_msg(decode_batch(len - 28, &d, sizeof arena_mem, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_ptr_null(d.tasks[0].llm.kv.swa_block_table);
    /* rejections */
    len = swa_batch();
    patch_u32(plen - 28, 1);
    expect_decode(len, WF_EPROTO, "swa tables for 2 tasks");
    len = swa_batch();
    patch_u32(plen - 24, 4); /* swa_lo 4: one entry expected, two carried */
    expect_decode(len, WF_EPROTO, "does not match");
    len = swa_batch();
    patch_u32(plen - 24, 6); /* past the block table */
    expect_decode(len, WF_EPROTO, "does not match");
    len = swa_batch();
    patch_u32(plen - 24, (uint32_t)-2);
    expect_decode(len, WF_ERANGE, "swa_lo");
    len = swa_batch();
    patch_u32(plen - 12, (uint32_t)-1);
    expect_decode(len, WF_ERANGE, "swa_block_table");
    len = swa_batch();
    patch_u32(plen - 8, 0); /* a FINISH task with a (0-entry) table */
    expect_decode(len, WF_EPROTO, "not PREFILL or DECODE");
    len = swa_batch();
    patch_u32(plen - 4, 1); /* entries without swa_lo */
    expect_decode(len, WF_EFORMAT, "swa_block_table");
    /* the encoder: a released entry after a held block */
    swa_batch();
    swa_local[4] = -1;
    wf_task_batch b = {.tasks = swa_tasks, .n_tasks = 2};
    size_t n;
    ck_assert_int_eq(wf_frame_encode_task_dispatch(&b, frame_buf, sizeof frame_buf, &n, err, sizeof err),
                     WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "swa_block_table[4] = -1"));
    swa_local[4] = 4;
}
END_TEST

START_TEST(dispatch_rejects_trailing_and_wrong_type) {
    size_t len = known_batch(WF_TASK_FINISH);
    frame_buf[len] = 0;
    expect_decode(len + 1, WF_EFORMAT, "trailing");
    /* a newer minor version may append fields: trailing bytes are then ignored */
    len = known_batch(WF_TASK_FINISH);
    frame_buf[5] = WF_FRAME_VERSION_MINOR + 1;
    frame_buf[len] = 0xab;
    reseal(frame_buf, (uint32_t)(len + 1 - WF_FRAME_HEADER_SIZE));
    wf_task_batch d;
    char err[256];
    ck_assert_int_eq(decode_batch(len + 1, &d, sizeof arena_mem, err, sizeof err), WF_OK);
    ck_assert_int_eq(d.n_tasks, 1);
    ck_assert_uint_eq(d.tasks[0].id, 77);
    /* decoding another type's frame */
    len = known_batch(WF_TASK_FINISH);
    wf_frame_view f;
    ck_assert_int_eq(wf_frame_open(frame_buf, len, 1 << 20, &f, err, sizeof err), WF_OK);
    wf_frame_task_event ev;
    wf_frame_arena arena;
    wf_frame_arena_init(&arena, arena_mem, sizeof arena_mem);
    ck_assert_int_eq(wf_frame_decode_task_event(&f, &arena, &ev, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "task_dispatch"));
}
END_TEST

START_TEST(dispatch_arena_exhaustion) {
    trng r = {11};
    pool_used = 0;
    wf_task_batch b;
    rand_batch(&r, &b, 8, WF_TASK_PREFILL);
    size_t len = encode_batch(&b);
    wf_task_batch d;
    char err[256];
    /* every arena smaller than what the frame needs is refused cleanly */
    wf_frame_view f;
    ck_assert_int_eq(wf_frame_open(frame_buf, len, 1 << 20, &f, err, sizeof err), WF_OK);
    wf_frame_arena arena;
    wf_frame_arena_init(&arena, arena_mem, sizeof arena_mem);
    ck_assert_int_eq(wf_frame_decode_task_dispatch(&f, &arena, &d, err, sizeof err), WF_OK);
    size_t need = arena.used;
    for (size_t cap = 0; cap < need; cap += 1 + cap / 16) {
        err[0] = '\0';
        ck_assert_int_eq(decode_batch(len, &d, cap, err, sizeof err), WF_ERANGE);
        ck_assert_ptr_nonnull(strstr(err, "arena exhausted"));
    }
    /* no arena at all */
    wf_frame_arena_init(&arena, NULL, 0);
    ck_assert_int_eq(wf_frame_decode_task_dispatch(&f, &arena, &d, err, sizeof err), WF_ERANGE);
}
END_TEST

/* The arena bound holds for the frames that expand the most: many minimal tasks, tasks with
 * many minimal samples, and LLM tasks whose one-block KV table comes with a local table (the
 * decoder rebuilds it whole). */
START_TEST(dispatch_arena_bound_worst_case) {
    static wf_task tasks[WF_FRAME_MAX_TASKS];
    static wf_task_sample samples[WF_FRAME_MAX_SAMPLES];
    static wf_sampling_params params;
    static const int32_t one_block[1] = {7}, one_released[1] = {-1};
    memset(tasks, 0, sizeof tasks);
    for (int i = 0; i < WF_FRAME_MAX_TASKS; i++) tasks[i].kind = WF_TASK_FINISH;
    wf_task_batch b = {.tasks = tasks, .n_tasks = WF_FRAME_MAX_TASKS};
    char err[256];
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 2) {
            memset(tasks, 0, sizeof tasks);
            for (int i = 0; i < WF_FRAME_MAX_TASKS; i++) {
                tasks[i].kind = WF_TASK_DECODE;
                tasks[i].llm.kv.kind = WF_ARTIFACT_KV;
                tasks[i].llm.kv.block_table = one_block;
                tasks[i].llm.kv.n_blocks = 1;
                tasks[i].llm.kv.swa_block_table = one_released;
            }
            b.n_tasks = WF_FRAME_MAX_TASKS;
        }
        if (pass == 1) {
            for (int i = 0; i < WF_FRAME_MAX_SAMPLES; i++) samples[i].params = &params;
            for (int i = 0; i < 16; i++) {
                tasks[i].kind = WF_TASK_DECODE;
                tasks[i].llm.samples = samples;
                tasks[i].llm.n_samples = WF_FRAME_MAX_SAMPLES;
            }
            b.n_tasks = 16;
        }
        size_t len = encode_batch(&b);
        wf_frame_view f;
        ck_assert_int_eq(wf_frame_open(frame_buf, len, sizeof frame_buf, &f, err, sizeof err),
                         WF_OK);
        size_t bound = wf_frame_task_dispatch_arena_bound(f.hdr.payload_len);
        ck_assert_uint_le(bound, sizeof arena_mem);
        wf_frame_arena arena;
        wf_frame_arena_init(&arena, arena_mem, bound);
        wf_task_batch d;
        ck_assert_msg(wf_frame_decode_task_dispatch(&f, &arena, &d, err, sizeof err) == WF_OK,
                      "%s", err);
        ck_assert_uint_le(arena.used, bound);
    }
}
END_TEST

/* The event arena bound holds for the frames that expand the most: many minimal FINISH results,
 * and results with many minimal samples (no alternatives). */
START_TEST(event_arena_bound_worst_case) {
    static wf_frame_task_result res[WF_FRAME_MAX_TASKS];
    static wf_task_sample samples[WF_FRAME_MAX_SAMPLES];
    memset(res, 0, sizeof res);
    memset(samples, 0, sizeof samples);
    for (int i = 0; i < WF_FRAME_MAX_TASKS; i++) res[i].kind = WF_TASK_FINISH;
    wf_frame_task_event ev = {.results = res, .n_results = WF_FRAME_MAX_TASKS};
    char err[256];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (int i = 0; i < 64; i++) {
                res[i].kind = WF_TASK_DECODE;
                res[i].samples = samples;
                res[i].n_samples = WF_FRAME_MAX_SAMPLES;
            }
            ev.n_results = 64;
        }
        size_t len;
        ck_assert_int_eq(wf_frame_encode_task_event(&ev, frame_buf, sizeof frame_buf, &len, err,
                                                    sizeof err),
                         WF_OK);
        wf_frame_view f;
        ck_assert_int_eq(wf_frame_open(frame_buf, len, sizeof frame_buf, &f, err, sizeof err),
                         WF_OK);
        size_t bound = wf_frame_task_event_arena_bound(f.hdr.payload_len);
        ck_assert_uint_le(bound, sizeof arena_mem);
        wf_frame_arena arena;
        wf_frame_arena_init(&arena, arena_mem, bound);
        wf_frame_task_event d;
        ck_assert_msg(wf_frame_decode_task_event(&f, &arena, &d, err, sizeof err) == WF_OK, "%s",
                      err);
        ck_assert_uint_le(arena.used, bound);
        ck_assert_int_eq(d.n_results, ev.n_results);
    }
}
END_TEST

/* ---- TASK_EVENT and BATCH_DONE ------------------------------------------------------------------ */

static void rand_event_outputs(trng *r, wf_task_batch *b, const char **messages) {
    for (int i = 0; i < b->n_tasks; i++) {
        wf_task *t = &b->tasks[i];
        if (t->kind == WF_TASK_PREFILL || t->kind == WF_TASK_DECODE)
            for (int k = 0; k < t->llm.n_samples; k++) {
                rand_gen_token(r, &t->llm.samples[k].out);
                t->llm.samples[k].rng_state = trng_u64(r);
                t->llm.samples[k].out_is_eog = trng_int(r, 0, 1);
            }
        char *m = trng_int(r, 0, 2) ? palloc(40) : NULL;
        if (m) trng_str(r, m, 39);
        messages[i] = m;
    }
}

START_TEST(event_roundtrip_random_and_apply) {
    trng r = {99};
    for (int iter = 0; iter < 200; iter++) {
        pool_used = 0;
        wf_task_batch b;
        rand_batch(&r, &b, trng_int(&r, 0, 10), -1);
        const char *messages[16];
        rand_event_outputs(&r, &b, messages);
        wf_frame_task_result results[16];
        wf_frame_task_event ev;
        wf_frame_task_event_from_batch(&b, results, messages, &ev);
        size_t len;
        char err[256];
        ck_assert_msg(wf_frame_encode_task_event(&ev, frame_buf, sizeof frame_buf, &len, err,
                                                 sizeof err) == WF_OK,
                      "%s", err);
        wf_frame_view f;
        ck_assert_int_eq(wf_frame_open(frame_buf, len, 1 << 20, &f, err, sizeof err), WF_OK);
        wf_frame_arena arena;
        wf_frame_arena_init(&arena, arena_mem, sizeof arena_mem);
        wf_frame_task_event d;
        ck_assert_msg(wf_frame_decode_task_event(&f, &arena, &d, err, sizeof err) == WF_OK, "%s",
                      err);
        ck_assert_uint_le(arena.used, wf_frame_task_event_arena_bound(f.hdr.payload_len));
        ck_assert_uint_eq(d.iteration, b.iteration);
        ck_assert_int_eq(d.n_results, b.n_tasks);
        for (int i = 0; i < b.n_tasks; i++) {
            const wf_task *t = &b.tasks[i];
            const wf_frame_task_result *x = &d.results[i];
            ck_assert_uint_eq(x->task_id, t->id);
            ck_assert_int_eq(x->kind, t->kind);
            ck_assert_int_eq(x->status, t->status);
            ck_assert_str_eq(x->message, messages[i] ? messages[i] : "");
            ck_assert_uint_eq(x->t_begin_ns, t->t_begin_ns);
            ck_assert_uint_eq(x->t_end_ns, t->t_end_ns);
            if (t->kind == WF_TASK_PREFILL || t->kind == WF_TASK_DECODE) {
                ck_assert_int_eq(x->n_samples, t->llm.n_samples);
                for (int k = 0; k < x->n_samples; k++) {
                    ck_assert_uint_eq(x->samples[k].rng_state, t->llm.samples[k].rng_state);
                    ck_assert_int_eq(x->samples[k].out_is_eog, t->llm.samples[k].out_is_eog);
                    cmp_gen_token(&x->samples[k].out, &t->llm.samples[k].out);
                }
            } else if (t->kind != WF_TASK_FINISH) {
                ck_assert_int_eq(x->step_reached, t->dit.latent.latent.step);
            }
        }
        /* the coordinator's copy of the batch (outputs cleared) receives the outputs */
        wf_task_batch c;
        size_t dlen = encode_batch(&b);
        ck_assert_int_eq(decode_batch(dlen, &c, sizeof arena_mem / 2, err, sizeof err), WF_OK);
        /* re-decode the event into the upper half of the arena (the batch uses the lower) */
        ck_assert_int_eq(wf_frame_encode_task_event(&ev, frame_buf, sizeof frame_buf, &len, err,
                                                    sizeof err),
                         WF_OK);
        ck_assert_int_eq(wf_frame_open(frame_buf, len, 1 << 20, &f, err, sizeof err), WF_OK);
        wf_frame_arena_init(&arena, arena_mem + sizeof arena_mem / 2, sizeof arena_mem / 2);
        ck_assert_int_eq(wf_frame_decode_task_event(&f, &arena, &d, err, sizeof err), WF_OK);
        ck_assert_msg(wf_frame_task_event_apply(&d, &c, err, sizeof err) == WF_OK, "%s", err);
        for (int i = 0; i < b.n_tasks; i++) {
            ck_assert_int_eq(c.tasks[i].status, b.tasks[i].status);
            ck_assert_uint_eq(c.tasks[i].t_end_ns, b.tasks[i].t_end_ns);
            if (b.tasks[i].kind == WF_TASK_PREFILL || b.tasks[i].kind == WF_TASK_DECODE)
                for (int k = 0; k < b.tasks[i].llm.n_samples; k++) {
                    cmp_gen_token(&c.tasks[i].llm.samples[k].out, &b.tasks[i].llm.samples[k].out);
                    ck_assert_uint_eq(c.tasks[i].llm.samples[k].rng_state,
                                      b.tasks[i].llm.samples[k].rng_state);
                }
        }
    }
}
END_TEST

START_TEST(event_apply_mismatches) {
    trng r = {1};
    pool_used = 0;
    wf_task_batch b;
    rand_batch(&r, &b, 3, WF_TASK_DECODE);
    for (int i = 0; i < 3; i++) b.tasks[i].id = (uint64_t)i + 1;
    wf_frame_task_result results[3];
    wf_frame_task_event ev;
    wf_frame_task_event_from_batch(&b, results, NULL, &ev);
    char err[256];
    ck_assert_int_eq(wf_frame_task_event_apply(&ev, &b, err, sizeof err), WF_OK);
    /* out of order is fine */
    wf_frame_task_result t = results[0];
    results[0] = results[2];
    results[2] = t;
    ck_assert_int_eq(wf_frame_task_event_apply(&ev, &b, err, sizeof err), WF_OK);
    results[1].task_id = 99;
    ck_assert_int_eq(wf_frame_task_event_apply(&ev, &b, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "unknown task 99"));
    results[1].task_id = 2;
    results[1].n_samples++;
    ck_assert_int_eq(wf_frame_task_event_apply(&ev, &b, err, sizeof err), WF_EPROTO);
    results[1].n_samples--;
    results[1].kind = WF_TASK_FINISH;
    ck_assert_int_eq(wf_frame_task_event_apply(&ev, &b, err, sizeof err), WF_EPROTO);
    results[1].kind = WF_TASK_DECODE;
    ev.iteration++;
    ck_assert_int_eq(wf_frame_task_event_apply(&ev, &b, err, sizeof err), WF_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "iteration"));
}
END_TEST

START_TEST(event_truncated_and_bad_fields) {
    trng r = {12};
    pool_used = 0;
    wf_task_batch b;
    rand_batch(&r, &b, 3, -1);
    b.tasks[0].kind = WF_TASK_DECODE;
    b.tasks[0].llm.n_samples = 1;
    b.tasks[0].llm.samples = palloc(sizeof(wf_task_sample));
    b.tasks[0].llm.samples[0].out.n_top = 2;
    b.tasks[0].status = WF_OK;
    const char *messages[3] = {NULL, "oops", NULL};
    wf_frame_task_result results[3];
    wf_frame_task_event ev;
    wf_frame_task_event_from_batch(&b, results, messages, &ev);
    size_t len;
    char err[256];
    ck_assert_int_eq(wf_frame_encode_task_event(&ev, frame_buf, sizeof frame_buf, &len, err,
                                                sizeof err),
                     WF_OK);
    check_truncations(frame_buf, len, dec_event);
    maybe_write_seed("frame_task", "task_event", frame_buf, len);
    /* result 0: task_id at 12, kind at 20, status at 21, message len at 25, times, then
     * n_samples at 43, rng 47, eog 55, token 56, logprob 60, n_top 64 */
    uint8_t save[1 << 16];
    memcpy(save, frame_buf, len);
    struct {
        size_t off;
        uint8_t v;
        wf_status want;
        const char *needle;
    } cases[] = {{20, WF_TASK_KIND_COUNT, WF_EPROTO, "kind"},
                 {21, 0x7f, WF_EPROTO, "status"},
                 {55, 2, WF_EPROTO, "out_is_eog"},
                 {64, WF_MAX_TOP_LOGPROBS + 1, WF_ERANGE, "n_top"},
                 {43, 0xff, WF_EFORMAT, "n_samples"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(frame_buf, save, len);
        frame_buf[WF_FRAME_HEADER_SIZE + cases[i].off] = cases[i].v;
        reseal(frame_buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
        wf_frame_view f;
        ck_assert_int_eq(wf_frame_open(frame_buf, len, 1 << 20, &f, err, sizeof err), WF_OK);
        wf_frame_arena arena;
        wf_frame_arena_init(&arena, arena_mem, sizeof arena_mem);
        wf_frame_task_event d;
        err[0] = '\0';
        wf_status st = wf_frame_decode_task_event(&f, &arena, &d, err, sizeof err);
        ck_assert_msg(st == cases[i].want, "case %zu: %d (%s)", i, st, err);
        ck_assert_msg(strstr(err, cases[i].needle), "case %zu: '%s'", i, err);
    }
    /* a message with a NUL in it */
    const char *m2[3] = {NULL, "ab", NULL};
    wf_frame_task_event_from_batch(&b, results, m2, &ev);
    ck_assert_int_eq(wf_frame_encode_task_event(&ev, frame_buf, sizeof frame_buf, &len, err,
                                                sizeof err),
                     WF_OK);
    uint8_t *p = memmem(frame_buf, len, "ab", 2);
    ck_assert_ptr_nonnull(p);
    p[1] = 0;
    reseal(frame_buf, (uint32_t)(len - WF_FRAME_HEADER_SIZE));
    wf_frame_view f;
    ck_assert_int_eq(wf_frame_open(frame_buf, len, 1 << 20, &f, err, sizeof err), WF_OK);
    ck_assert_int_eq(dec_event(&f, &(wf_frame_arena){.base = arena_mem, .cap = 1 << 20}, err,
                               sizeof err),
                     WF_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "NUL"));
}
END_TEST

START_TEST(batch_done_roundtrip) {
    trng r = {17};
    size_t len;
    char err[256];
    for (int i = 0; i < 100; i++) {
        wf_frame_batch_done m = {.iteration = trng_u64(&r),
                                 .status = (wf_status)trng_int(&r, WF_STATUS_MIN, 1)};
        trng_str(&r, m.message, WF_FRAME_TASK_MESSAGE_MAX - 1);
        ck_assert_int_eq(wf_frame_encode_batch_done(&m, frame_buf, sizeof frame_buf, &len, err,
                                                    sizeof err),
                         WF_OK);
        wf_frame_view f;
        ck_assert_int_eq(wf_frame_open(frame_buf, len, 1 << 20, &f, err, sizeof err), WF_OK);
        wf_frame_batch_done d;
        ck_assert_int_eq(wf_frame_decode_batch_done(&f, &d, err, sizeof err), WF_OK);
        ck_assert_uint_eq(d.iteration, m.iteration);
        ck_assert_int_eq(d.status, m.status);
        ck_assert_str_eq(d.message, m.message);
    }
    wf_frame_batch_done m = {.iteration = 123456789, .status = WF_ECANCELLED};
    snprintf(m.message, sizeof m.message, "cancelled by the client");
    ck_assert_int_eq(wf_frame_encode_batch_done(&m, frame_buf, sizeof frame_buf, &len, err,
                                                sizeof err),
                     WF_OK);
    wf_frame_view f;
    ck_assert_int_eq(wf_frame_open(frame_buf, len, 1 << 20, &f, err, sizeof err), WF_OK);
    wf_frame_batch_done d;
    ck_assert_int_eq(wf_frame_decode_batch_done(&f, &d, err, sizeof err), WF_OK);
    ck_assert_uint_eq(d.iteration, m.iteration);
    ck_assert_int_eq(d.status, WF_ECANCELLED);
    ck_assert_str_eq(d.message, m.message);
    check_truncations(frame_buf, len, dec_done);
    maybe_write_seed("frame_task", "batch_done", frame_buf, len);
    /* a status outside wf_status */
    m.status = (wf_status)-1000;
    ck_assert_int_eq(wf_frame_encode_batch_done(&m, frame_buf, sizeof frame_buf, &len, err,
                                                sizeof err),
                     WF_EINVAL);
    /* a message too long for the field */
    m.status = WF_OK;
    memset(m.message, 'x', sizeof m.message);
    ck_assert_int_eq(wf_frame_encode_batch_done(&m, frame_buf, sizeof frame_buf, &len, err,
                                                sizeof err),
                     WF_EINVAL);
}
END_TEST

/* Seeds for fuzz_frame_task: one frame per task kind, a mixed batch, an empty one. */
START_TEST(seeds_valid) {
    trng r = {2026};
    char name[64];
    for (int kind = 0; kind < WF_TASK_KIND_COUNT; kind++) {
        pool_used = 0;
        wf_task_batch b;
        rand_batch(&r, &b, 2, kind);
        size_t len = encode_batch(&b);
        snprintf(name, sizeof name, "dispatch_%s", wf_task_kind_str((wf_task_kind)kind));
        maybe_write_seed("frame_task", name, frame_buf, len);
    }
    pool_used = 0;
    wf_task_batch b;
    rand_batch(&r, &b, 6, -1);
    maybe_write_seed("frame_task", "dispatch_mixed", frame_buf, encode_batch(&b));
    b.n_tasks = 0;
    maybe_write_seed("frame_task", "dispatch_empty", frame_buf, encode_batch(&b));
    ck_assert_int_ge(check_committed_seeds("frame_task", dec_any), 9);
}
END_TEST

static Suite *frame_task_suite(void) {
    Suite *s = suite_create("proto/frame_task");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, dispatch_roundtrip_random);
    tcase_add_test(tc, dispatch_kv_trailer);
    tcase_add_test(tc, dispatch_swa_table);
    tcase_add_test(tc, dispatch_truncated_everywhere);
    tcase_add_test(tc, dispatch_encode_needs_room);
    tcase_add_test(tc, dispatch_encode_refuses_invalid);
    tcase_add_test(tc, dispatch_rejects_bad_fields);
    tcase_add_test(tc, dispatch_rejects_trailing_and_wrong_type);
    tcase_add_test(tc, dispatch_arena_exhaustion);
    tcase_add_test(tc, dispatch_arena_bound_worst_case);
    tcase_add_test(tc, event_arena_bound_worst_case);
    tcase_add_test(tc, event_roundtrip_random_and_apply);
    tcase_add_test(tc, event_apply_mismatches);
    tcase_add_test(tc, event_truncated_and_bad_fields);
    tcase_add_test(tc, batch_done_roundtrip);
    tcase_add_test(tc, seeds_valid);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(frame_task_suite)
