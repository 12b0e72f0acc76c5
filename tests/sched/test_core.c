/* Tests sched/core.c (planning, batching, policies, preemption, COW, cancellation) with the
 * deterministic fake executor and a virtual clock. Every output stream is compared with the
 * stream the fake model gives for the same sequence without any scheduling effects. */
#include "check_main.h"
#include "sched/core.h"
#include "sched/fake_executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXREQ = 32, MAXCH = 4, MAXTOK = 512 };

typedef struct rec {
    int32_t toks[MAXCH][MAXTOK];
    int n[MAXCH];
    wf_finish_reason fin[MAXCH];
    wf_status fin_status[MAXCH];
    int n_fin;
    bool retired;
    uint64_t first_token_iter;
    uint64_t token_iters[MAXTOK]; /* iteration of each token of choice 0 */
} rec;

typedef struct harness {
    wf_kv_store store;
    wf_kv_pool *pool;
    wf_fake_executor fx;
    wf_core core;
    uint64_t now;
    int budget;
    int mixed_batches;          /* batches holding both PREFILL and DECODE tasks */
    int max_prefill_with_decode; /* most prefill tokens in one batch that also decodes */
    int retire_order[MAXREQ], n_retired;
    wf_request *reqs[MAXREQ];
    rec recs[MAXREQ];
    int n_reqs;
    uint64_t start_rng[MAXREQ][MAXCH];
    uint32_t next_vmodel;       /* h_add gives the next request this virtual model */
    int next_vm_max_running;    /* ... and this per-virtual-model seat quota */
    int max_vm1_tasks;          /* most tasks of virtual model 1 in one batch */
    double next_weight;         /* ... and this fair-share weight (0: 1) */
    wf_fair fair;               /* the "fair" policy's clocks */
    wf_cost_model cost;
} harness;

static void cb_token(void *user, wf_request *r, int choice, const wf_generated_token *tok,
                     uint64_t now) {
    harness *h = user;
    (void)now;
    rec *rc = r->user;
    ck_assert_int_lt(rc->n[choice], MAXTOK);
    if (choice == 0) rc->token_iters[rc->n[0]] = h->core.iteration;
    if (rc->n[0] == 0 && choice == 0) rc->first_token_iter = h->core.iteration;
    rc->toks[choice][rc->n[choice]++] = tok->token;
    ck_assert(!rc->retired);
}

static void cb_finished(void *user, wf_request *r, int choice, wf_finish_reason reason,
                        wf_status st, const char *msg, uint64_t now) {
    (void)user;
    (void)msg;
    (void)now;
    rec *rc = r->user;
    ck_assert_int_eq(rc->fin[choice], WF_FINISH_NONE); /* exactly one FINISHED per choice */
    rc->fin[choice] = reason;
    rc->fin_status[choice] = st;
    rc->n_fin++;
}

static void cb_retired(void *user, wf_request *r) {
    harness *h = user;
    rec *rc = r->user;
    ck_assert_int_eq(rc->n_fin, r->n_choices);
    rc->retired = true;
    for (int i = 0; i < h->n_reqs; i++)
        if (h->reqs[i] == r) h->retire_order[h->n_retired++] = i;
}

static void on_batch(void *user, const wf_task_batch *b) {
    harness *h = user;
    int tokens = 0, pre = 0, dec = 0;
    for (int i = 0; i < b->n_tasks; i++) {
        tokens += b->tasks[i].llm.n_tokens;
        pre += b->tasks[i].kind == WF_TASK_PREFILL;
        dec += b->tasks[i].kind == WF_TASK_DECODE;
        ck_assert_int_eq(b->tasks[i].status, WF_OK); /* the KV held the right sequence */
    }
    ck_assert_int_le(tokens, h->budget); /* the token budget holds in every iteration */
    ck_assert_int_eq(b->group.n_ranks, 1);
    ck_assert_int_eq(b->group.ranks[0], 0);
    if (pre && dec) h->mixed_batches++;
    int vm1 = 0;
    for (int i = 0; i < b->n_tasks; i++) vm1 += b->tasks[i].vmodel == 1;
    if (vm1 > h->max_vm1_tasks) h->max_vm1_tasks = vm1;
    int prefill_tokens = tokens - dec;
    if (dec && prefill_tokens > h->max_prefill_with_decode)
        h->max_prefill_with_decode = prefill_tokens;
}

/* window > 0: a store split by layer kind (layer 0 global, layer 1 sliding-window with
 * n_swa_blocks blocks) and a split pool, as weftd makes for Gemma 3. */
static void h_init_ex(harness *h, const char *policy, int n_blocks, int bs, int budget,
                      int max_running, bool prefix, int window, int n_swa_blocks) {
    memset(h, 0, sizeof *h);
    wf_kv_geometry g = {.n_layers = window > 0 ? 2 : 1, .n_kv_heads = 1, .head_dim = 4,
                        .block_size = bs, .dtype = WF_KV_DTYPE_F32,
                        .swa_layers = window > 0 ? 2u : 0u, .swa_window = window};
    size_t layer_block = wf_kv_geometry_block_bytes(&g) / (size_t)g.n_layers;
    ck_assert_int_eq(wf_kv_store_init_swa(&h->store, &g,
                                          layer_block * (size_t)(n_blocks + n_swa_blocks),
                                          window > 0 ? n_swa_blocks : 1),
                     WF_OK);
    ck_assert_int_eq(h->store.n_blocks, n_blocks);
    if (window > 0) {
        ck_assert_int_eq(h->store.n_swa_blocks, n_swa_blocks);
        ck_assert_int_eq(wf_kv_pool_new_swa(n_blocks, n_swa_blocks, bs, window, prefix, &h->pool),
                         WF_OK);
    } else {
        ck_assert_int_eq(wf_kv_pool_new(n_blocks, bs, prefix, &h->pool), WF_OK);
    }
    wf_fake_executor_init(&h->fx, &h->store, 1000, 7);
    h->fx.on_batch = on_batch;
    h->fx.user = h;
    h->budget = budget;
    wf_core_config cfg = {.policy = wf_sched_policy_find(policy),
                          .max_batch_tokens = budget,
                          .max_running = max_running,
                          .n_ctx = 256,
                          .pool = h->pool,
                          .store = &h->store,
                          .group = {.n_ranks = 1},
                          .fair = &h->fair,
                          .cb = {cb_token, cb_finished, cb_retired, NULL, h}};
    wf_fair_init(&h->fair);
    ck_assert_int_eq(wf_core_init(&h->core, &cfg), WF_OK);
    h->now = 1000000000ull;
}

static void h_init(harness *h, const char *policy, int n_blocks, int bs, int budget,
                   int max_running, bool prefix) {
    h_init_ex(h, policy, n_blocks, bs, budget, max_running, prefix, 0, 0);
}

static wf_request *h_add(harness *h, const int32_t *prompt, int n_prompt, int max_tokens, int n,
                         float temperature, double ttft_ms, int priority) {
    wf_request_spec spec;
    wf_request_spec_init(&spec);
    spec.prompt = prompt;
    spec.n_prompt = n_prompt;
    spec.max_tokens = max_tokens;
    spec.n = n;
    spec.sampling.temperature = temperature;
    spec.priority = priority;
    spec.vmodel = h->next_vmodel;
    spec.vm_max_running = h->next_vm_max_running;
    spec.share_weight = h->next_weight;
    snprintf(spec.id, sizeof spec.id, "req-%d", h->n_reqs);
    wf_request *r;
    ck_assert_int_eq(wf__request_new(&spec, 256, h->store.geometry.block_size,
                                     0x1234 + (uint64_t)h->n_reqs, &r),
                     WF_OK);
    r->ttft_ms = ttft_ms;
    r->tpot_ms = 50;
    r->user = &h->recs[h->n_reqs];
    for (int i = 0; i < n; i++) h->start_rng[h->n_reqs][i] = r->choices[i].rng;
    h->reqs[h->n_reqs++] = r;
    ck_assert_int_eq(wf_core_add(&h->core, r, h->now), WF_OK);
    return r;
}

/* One iteration on the virtual clock: 1 ms per iteration. */
static int h_step(harness *h) {
    wf_task_batch *b = wf_core_plan(&h->core, h->now);
    int n = b->n_tasks;
    if (n > 0) {
        wf_status st = wf_executor_run(wf_fake_executor_get(&h->fx), b, NULL, 0);
        h->now += 1000000;
        wf_core_complete(&h->core, st, NULL, h->now);
    }
    return n;
}

static void h_run(harness *h) {
    for (int i = 0; i < 20000 && wf_core_n_requests(&h->core) > 0; i++) h_step(h);
    ck_assert_int_eq(wf_core_n_requests(&h->core), 0);
}

static void h_free(harness *h) {
    wf_core_free(&h->core, h->now);
    wf_fair_free(&h->fair);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(h->pool, &u);
    ck_assert_int_eq(u.used, 0); /* every block came back */
    ck_assert_int_eq(u.swa_used, 0);
    char err[128];
    ck_assert_msg(wf_kv_pool_check(h->pool, err, sizeof err), "%s", err);
    for (int i = 0; i < h->n_reqs; i++) wf__request_free(h->reqs[i]);
    wf_kv_pool_free(h->pool);
    wf_kv_store_free(&h->store);
}

/* The stream the fake model gives for this prompt, run alone: greedy or with the choice's own
 * generator, EOS (token 7) ends it, max_tokens caps it. */
static int expected_stream(const harness *h, const int32_t *prompt, int n_prompt, int max_tokens,
                           float temperature, uint64_t rng, int32_t *out) {
    int32_t seq[MAXTOK];
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    int n = n_prompt, g = 0;
    wf_sampling_params p = {.temperature = temperature};
    while (g < max_tokens) {
        int32_t t = wf_fake_next_token(&h->fx, seq, n, &p, &rng);
        if (t == 7) break;
        seq[n++] = t;
        out[g++] = t;
    }
    return g;
}

static void check_request(const harness *h, int i, const int32_t *prompt, int n_prompt,
                          int max_tokens, float temperature) {
    const rec *rc = &h->recs[i];
    ck_assert(rc->retired);
    for (int c = 0; c < h->reqs[i]->n_choices; c++) {
        int32_t want[MAXTOK];
        int n = expected_stream(h, prompt, n_prompt, max_tokens, temperature, h->start_rng[i][c],
                                want);
        ck_assert_int_eq(rc->n[c], n);
        for (int k = 0; k < n; k++)
            ck_assert_msg(rc->toks[c][k] == want[k], "req %d choice %d token %d: %d != %d", i,
                          c, k, rc->toks[c][k], want[k]);
        ck_assert_int_eq(rc->fin[c], n < max_tokens ? WF_FINISH_STOP : WF_FINISH_LENGTH);
    }
}

static void make_prompt(int32_t *p, int n, int salt) {
    for (int i = 0; i < n; i++) p[i] = 100 + (i * 31 + salt * 17) % 800;
}

START_TEST(streams_match_the_model) {
    harness h;
    h_init(&h, "fcfs", 64, 4, 32, 8, true);
    int32_t p[3][20];
    for (int i = 0; i < 3; i++) {
        make_prompt(p[i], 10 + i * 3, i);
        h_add(&h, p[i], 10 + i * 3, 40, 1, 0, 1000, 0);
    }
    h_run(&h);
    for (int i = 0; i < 3; i++) check_request(&h, i, p[i], 10 + i * 3, 40, 0);
    h_free(&h);
}
END_TEST

/* What the core reports to the cost model: a prefill chunk's attention work (every position
 * each of its tokens attends to), not its end position; decodes add their context. */
START_TEST(batches_report_attention_work) {
    harness h;
    h_init(&h, "fcfs", 64, 8, 64, 8, false);
    int32_t p[100];
    make_prompt(p, 100, 3);
    h_add(&h, p, 100, 3, 1, 0, 1000, 0);
    ck_assert_int_eq(h_step(&h), 1); /* chunk [0, 64) */
    ck_assert_int_eq(h.core.last_prefill_tokens, 64);
    ck_assert(h.core.last_context == wf_cost_model_attention(0, 64));
    ck_assert_int_eq(h_step(&h), 1); /* chunk [64, 100): its tokens see 65..100 positions */
    ck_assert_int_eq(h.core.last_prefill_tokens, 36);
    ck_assert(h.core.last_context == wf_cost_model_attention(64, 36));
    ck_assert(h.core.last_context == 36.0 * 64 + 36.0 * 37 / 2);
    ck_assert_int_eq(h_step(&h), 1); /* a decode at position 100 sees 101 positions */
    ck_assert_int_eq(h.core.last_decode_tokens, 1);
    ck_assert(h.core.last_context == 101.0 && h.core.last_decode_context == 101.0);
    h_run(&h);
    h_free(&h);
}
END_TEST

START_TEST(chunked_prefill_interleaves_with_decode) {
    harness h;
    h_init(&h, "fcfs", 128, 8, 16, 8, false);
    int32_t a[6], b[150];
    make_prompt(a, 6, 1);
    make_prompt(b, 150, 2);
    h_add(&h, a, 6, 60, 1, 0, 1000, 0);
    h.fx.eog_token = -1; /* keep A streaming */
    for (int i = 0; i < 3; i++) h_step(&h); /* A is decoding */
    h_add(&h, b, 150, 5, 1, 0, 1000, 0);
    uint64_t b_start = h.core.iteration;
    h_run(&h);
    /* B's 150-token prompt took >= 150/15 iterations of chunks, each sharing the batch with
     * A's decode: A got one token in every iteration while B was prefilling. */
    ck_assert_int_ge(h.mixed_batches, 10);
    const rec *ra = &h.recs[0];
    for (int k = 1; k < ra->n[0]; k++)
        if (ra->token_iters[k] > b_start && ra->token_iters[k] <= h.recs[1].first_token_iter)
            ck_assert_int_eq(ra->token_iters[k], ra->token_iters[k - 1] + 1);
    ck_assert_int_le(h.fx.max_batch_tokens_seen, 16);
    ck_assert_int_eq(h.recs[1].n[0], 5);
    ck_assert_int_eq(ra->n[0], 60);
    h_free(&h);
}
END_TEST

/* The stall cap (prefill_stretch): while A decodes, B's 64-token prompt arrives. The cost
 * model says a decode-only iteration costs 2 ms and each prompt token 1 ms; A's TPOT budget
 * (50 ms per token on a 1 ms/iteration clock) would let the whole prompt run at once. With
 * stretch 2 an iteration may add only 2 ms of prefill: B runs in chunks of the one-block floor
 * (8 tokens) and A's iterations stay short. With a TTFT that the capped rate would miss, the
 * cap is lifted and the prompt runs in one chunk. Without the cap: one chunk as well. */
static int max_prefill_beside_decode(double stretch, double b_ttft_ms) {
    harness h;
    h_init(&h, "slo", 128, 8, 512, 8, false);
    wf_cost_model cost;
    wf_cost_model_init(&cost, (const double[4]){1, 1, 1, 0});
    h.core.cfg.cost = &cost;
    h.core.cfg.prefill_stretch = stretch;
    int32_t a[6], b[64];
    make_prompt(a, 6, 1);
    make_prompt(b, 64, 2);
    h_add(&h, a, 6, 40, 1, 0, 1000, 0);
    h.fx.eog_token = -1; /* keep A streaming */
    for (int i = 0; i < 3; i++) h_step(&h); /* A is decoding */
    h.max_prefill_with_decode = 0;
    h_add(&h, b, 64, 4, 1, 0, b_ttft_ms, 0);
    h_run(&h);
    ck_assert_int_eq(h.recs[1].n[0], 4);
    ck_assert_int_eq(h.recs[0].n[0], 40);
    int seen = h.max_prefill_with_decode;
    h_free(&h);
    return seen;
}

START_TEST(stall_cap_sizes_prefill_beside_decodes) {
    ck_assert_int_eq(max_prefill_beside_decode(0, 1000), 64);  /* off: the TPOT bank pays */
    ck_assert_int_eq(max_prefill_beside_decode(2, 1000), 8);   /* capped: one block a time */
    ck_assert_int_eq(max_prefill_beside_decode(2, 10), 64);    /* TTFT at risk: lifted */
}
END_TEST

/* With room for one request at a time, the order in which requests finish is the policy's. */
static void run_order(const char *policy, const double *ttft, const int *prio, const int *want) {
    harness h;
    h_init(&h, policy, 64, 4, 64, 1, false);
    h.fx.eog_token = -1;
    int32_t p[4][8];
    for (int i = 0; i < 4; i++) {
        make_prompt(p[i], 8, i);
        h_add(&h, p[i], 8, 3, 1, 0, ttft[i], prio[i]);
    }
    h_run(&h);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(h.retire_order[i], want[i]);
    h_free(&h);
}

START_TEST(policy_orders) {
    double ttft[4] = {900, 100, 500, 300};
    int prio[4] = {0, 1, 5, 1};
    run_order("fcfs", ttft, prio, (int[4]){0, 1, 2, 3});
    run_order("slo", ttft, prio, (int[4]){1, 3, 2, 0});      /* earliest deadline first */
    run_order("priority", ttft, prio, (int[4]){2, 1, 3, 0}); /* then arrival among equals */
}
END_TEST

START_TEST(preemption_gives_identical_output) {
    /* 14 blocks of 4 tokens; each request needs ceil((10 + 24) / 4) = 9 blocks at its end, so
     * three cannot all stay resident: someone is preempted and recomputed. */
    harness h;
    h_init(&h, "fcfs", 14, 4, 32, 8, false);
    h.fx.eog_token = -1;
    int32_t p[3][10];
    for (int i = 0; i < 3; i++) {
        make_prompt(p[i], 10, i + 5);
        h_add(&h, p[i], 10, 24, 1, 0, 1000, 0);
    }
    h_run(&h);
    ck_assert_uint_gt(h.core.preempted_total, 0);
    for (int i = 0; i < 3; i++) check_request(&h, i, p[i], 10, 24, 0);
    h_free(&h);
}
END_TEST

START_TEST(preemption_with_prefix_cache_and_sampling) {
    harness h;
    h_init(&h, "slo", 16, 4, 12, 8, true);
    h.fx.eog_token = -1;
    int32_t p[4][14];
    for (int i = 0; i < 4; i++) {
        make_prompt(p[i], 14, 0); /* one shared "system prompt" */
        p[i][13] = 900 + i;
        h_add(&h, p[i], 14, 20, 1, 0.8f, 500 + 100 * i, 0);
    }
    h_run(&h);
    ck_assert_uint_gt(h.core.preempted_total, 0);
    for (int i = 0; i < 4; i++) check_request(&h, i, p[i], 14, 20, 0.8f);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(h.pool, &u);
    ck_assert_uint_gt(u.prefix_hits, 0);
    h_free(&h);
}
END_TEST

START_TEST(cancellation_frees_blocks) {
    harness h;
    h_init(&h, "fcfs", 32, 4, 32, 8, false);
    h.fx.eog_token = -1;
    int32_t p[10];
    make_prompt(p, 10, 3);
    wf_request *r = h_add(&h, p, 10, 100, 2, 1.0f, 1000, 0);
    wf_request *q = h_add(&h, p, 10, 100, 1, 0, 1000, 0);
    for (int i = 0; i < 5; i++) h_step(&h);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(h.pool, &u);
    ck_assert_int_gt(u.used, 0);
    atomic_store(&r->cancel_requested, true);
    atomic_store(&q->cancel_requested, true);
    h_step(&h); /* the next iteration frees them */
    ck_assert_int_eq(wf_core_n_requests(&h.core), 0);
    wf_kv_pool_get_usage(h.pool, &u);
    ck_assert_int_eq(u.used, 0);
    ck_assert_int_eq(h.recs[0].fin[0], WF_FINISH_CANCELLED);
    ck_assert_int_eq(h.recs[0].fin[1], WF_FINISH_CANCELLED);
    ck_assert_int_eq(h.recs[0].fin_status[1], WF_ECANCELLED);
    ck_assert_int_eq(h.recs[1].fin[0], WF_FINISH_CANCELLED);
    ck_assert_int_eq(r->state, WF_REQUEST_CANCELLED);
    ck_assert_uint_eq(h.core.cancelled_total, 2);
    h_free(&h);
}
END_TEST

START_TEST(n_choices_share_prompt_copy_on_write) {
    harness h;
    h_init(&h, "fcfs", 64, 4, 64, 8, true);
    h.fx.eog_token = -1;
    int32_t p[10];
    make_prompt(p, 10, 9); /* 10 tokens: the last prompt block is partial and shared */
    h_add(&h, p, 10, 30, 3, 1.0f, 1000, 0);
    h_step(&h); /* prefill + first tokens */
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(h.pool, &u);
    ck_assert_int_eq(u.used, 3); /* 3 prompt blocks, shared by the 3 choices */
    h_run(&h);
    check_request(&h, 0, p, 10, 30, 1.0f);
    /* Independent streams: the choices differ. */
    ck_assert(memcmp(h.recs[0].toks[0], h.recs[0].toks[1], 30 * sizeof(int32_t)) != 0);
    ck_assert(memcmp(h.recs[0].toks[1], h.recs[0].toks[2], 30 * sizeof(int32_t)) != 0);
    wf_kv_pool_get_usage(h.pool, &u);
    ck_assert_uint_eq(u.cow_copies, 2); /* two choices copied the partial block; one kept it */
    ck_assert_int_eq(u.used, 0);
    h_free(&h);
}
END_TEST

START_TEST(prefix_cache_reuses_system_prompt) {
    harness h;
    h_init(&h, "fcfs", 64, 4, 64, 8, true);
    int32_t p[2][30];
    make_prompt(p[0], 30, 4);
    make_prompt(p[1], 30, 4);
    p[1][29] = 999;
    h_add(&h, p[0], 30, 5, 1, 0, 1000, 0);
    h_run(&h);
    wf_request *r = h_add(&h, p[1], 30, 5, 1, 0, 1000, 0);
    h_run(&h);
    ck_assert_int_eq(r->cached_prompt_tokens, 28); /* 7 full blocks of the 29 shared tokens */
    check_request(&h, 0, p[0], 30, 5, 0);
    check_request(&h, 1, p[1], 30, 5, 0);
    h_free(&h);
}
END_TEST

START_TEST(eos_and_min_tokens) {
    harness h;
    h_init(&h, "fcfs", 64, 4, 64, 8, false);
    /* Find a prompt whose first greedy token is the EOS (7) of the fake model. */
    int32_t p[5] = {1, 2, 3, 4, 0};
    wf_sampling_params greedy = {0};
    for (int32_t x = 0; x < 100000; x++) {
        p[4] = x;
        if (wf_fake_next_token(&h.fx, p, 5, &greedy, NULL) == 7) break;
    }
    ck_assert_int_eq(wf_fake_next_token(&h.fx, p, 5, &greedy, NULL), 7);
    h_add(&h, p, 5, 10, 1, 0, 1000, 0);
    wf_request *m = h_add(&h, p, 5, 10, 1, 0, 1000, 0);
    m->spec.min_tokens = 3;
    h_run(&h);
    ck_assert_int_eq(h.recs[0].fin[0], WF_FINISH_STOP);
    ck_assert_int_eq(h.recs[0].n[0], 0);
    ck_assert_int_ge(h.recs[1].n[0], 3); /* EOS suppressed until min_tokens */
    h_free(&h);
}
END_TEST

START_TEST(executor_failure_fails_requests) {
    harness h;
    h_init(&h, "fcfs", 64, 4, 64, 8, false);
    h.fx.eog_token = -1;
    h.fx.fail_batch = 3;
    int32_t p[8];
    make_prompt(p, 8, 1);
    h_add(&h, p, 8, 20, 2, 1.0f, 1000, 0);
    h_add(&h, p, 8, 20, 1, 0, 1000, 0);
    h_run(&h);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(h.recs[i].fin[0], WF_FINISH_ERROR);
        ck_assert_int_eq(h.recs[i].fin_status[0], WF_EIO);
        ck_assert_int_eq(h.reqs[i]->state, WF_REQUEST_FAILED);
    }
    ck_assert_int_eq(h.recs[0].fin[1], WF_FINISH_ERROR);
    h_free(&h);
}
END_TEST

START_TEST(request_too_big_for_cache_fails_cleanly) {
    harness h;
    h_init(&h, "fcfs", 4, 4, 64, 8, false);
    h.fx.eog_token = -1;
    int32_t p[8];
    make_prompt(p, 8, 1);
    h_add(&h, p, 8, 100, 1, 0, 1000, 0); /* 108 tokens > 16 the cache holds */
    h_run(&h);
    ck_assert_int_eq(h.recs[0].fin[0], WF_FINISH_ERROR);
    ck_assert_int_eq(h.recs[0].n[0], 9); /* positions 0..15 hold 8 prompt + 8 fed tokens; the 9th was drawn from position 15 */
    h_free(&h);
}
END_TEST

START_TEST(priority_preempts_the_lowest_priority) {
    /* 10 blocks of 4 tokens; each request ends at 8 + 20 = 28 tokens = 7 blocks: both cannot
     * stay. The low-priority one arrived first, yet it is the one preempted. */
    harness h;
    h_init(&h, "priority", 10, 4, 32, 8, false);
    h.fx.eog_token = -1;
    int32_t p[2][8];
    make_prompt(p[0], 8, 1);
    make_prompt(p[1], 8, 2);
    wf_request *low = h_add(&h, p[0], 8, 20, 1, 0, 1000, 0);
    wf_request *high = h_add(&h, p[1], 8, 20, 1, 0, 1000, 5);
    h_run(&h);
    ck_assert_int_gt(low->n_preemptions, 0);
    ck_assert_int_eq(high->n_preemptions, 0);
    ck_assert_int_eq(h.retire_order[0], 1);
    check_request(&h, 0, p[0], 8, 20, 0);
    check_request(&h, 1, p[1], 8, 20, 0);
    h_free(&h);
}
END_TEST

START_TEST(vmodel_max_running_caps_only_that_model) {
    /* Virtual model 1 may run one request at a time: its three requests run one after another,
     * while virtual model 2's request, queued behind them, starts at once. */
    harness h;
    h_init(&h, "fcfs", 64, 4, 64, 8, false);
    h.fx.eog_token = -1;
    int32_t p[4][8];
    for (int i = 0; i < 4; i++) make_prompt(p[i], 8, i + 1);
    h.next_vmodel = 1;
    h.next_vm_max_running = 1;
    for (int i = 0; i < 3; i++) h_add(&h, p[i], 8, 6, 1, 0, 1e6, 0);
    h.next_vmodel = 2;
    h.next_vm_max_running = 0;
    h_add(&h, p[3], 8, 6, 1, 0, 1e6, 0);
    h_step(&h);
    ck_assert_int_eq(h.core.n_running, 2); /* one of model 1, model 2's */
    ck_assert_int_eq(h.recs[3].first_token_iter, h.core.iteration);
    h_run(&h);
    ck_assert_int_eq(h.max_vm1_tasks, 1);
    /* model 1's requests ran in arrival order, one after another */
    ck_assert_uint_lt(h.recs[0].token_iters[5], h.recs[1].first_token_iter);
    ck_assert_uint_lt(h.recs[1].token_iters[5], h.recs[2].first_token_iter);
    for (int i = 0; i < 4; i++) check_request(&h, i, p[i], 8, 6, 0);
    h_free(&h);
}
END_TEST

/* Sequences of virtual model v running in h's core. */
static int running_of(const harness *h, uint32_t v) {
    int n = 0;
    for (int i = 0; i < h->core.n_running; i++)
        if (h->core.running[i]->spec.vmodel == v) n += h->core.running[i]->n_active;
    return n;
}

START_TEST(fair_caps_a_tenant_only_while_another_is_active) {
    /* Eight seats, no cost model. Virtual model 1 alone takes all eight (work-conserving).
     * Model 2's request arrives: it joins at model 1's virtual time, and once model 1 is ahead
     * of it by 2.5 margins of 8 decodes (three steps of 8 decodes against 1), model 1 is held to
     * its weighted share (4 of 8): it gives back its four latest arrivals (preempted,
     * recomputed later) and stays at 4 while model 2 runs; every output is still exactly
     * what the request gives alone. */
    harness h;
    h_init(&h, "fair", 128, 4, 256, 8, false);
    h.fx.eog_token = -1;
    int32_t p[9][8];
    for (int i = 0; i < 9; i++) make_prompt(p[i], 8, i + 1);
    h.next_vmodel = 1;
    for (int i = 0; i < 8; i++) h_add(&h, p[i], 8, 30, 1, 0, 1e6, 0);
    h_step(&h);
    ck_assert_int_eq(running_of(&h, 1), 8);
    h.next_vmodel = 2;
    h_add(&h, p[8], 8, 20, 1, 0, 1e6, 0);
    int steps = 0;
    while (running_of(&h, 1) > 4 && steps < 10) {
        h_step(&h);
        steps++;
    }
    ck_assert_int_le(steps, 6);
    ck_assert_int_eq(running_of(&h, 1), 4);
    ck_assert_int_eq(running_of(&h, 2), 1);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(h.reqs[i]->n_preemptions, 0); /* earliest stay */
    for (int i = 4; i < 8; i++) ck_assert_int_eq(h.reqs[i]->n_preemptions, 1);
    while (!h.recs[8].retired) {
        h_step(&h);
        ck_assert_int_le(running_of(&h, 1), 4); /* capped while model 2 runs */
    }
    h_run(&h);
    for (int i = 0; i < 9; i++) check_request(&h, i, p[i], 8, i < 8 ? 30 : 20, 0);
    h_free(&h);
}
END_TEST

START_TEST(fair_cap_is_a_weighted_share_of_the_knee_batch) {
    /* Cost model a = 3 ms, c = 1 ms per decode: past 3 sequences a step's per-sequence cost
     * outweighs its fixed cost, so with three active virtual models those ahead are held to
     * their weighted share of 3 x 3 = 9 seats (of 16), weights 1 : 2 : 1 -> 2 and 4 seats
     * (rounded down) for models 1 and 2, which send 10 requests each against model 3's one
     * long request. Model 3, behind them, is never capped. And the cost a model ahead adds to
     * the steps (decodes x c + prompt tokens x b) stays within its share of n_active x a per
     * step (3 x 3 x 1/4 = 2.25 ms for model 1, 4.5 for model 2) plus what it may bank (one
     * block of prompt, b x 4, and 4 steps' share). */
    harness h;
    h_init(&h, "fair", 256, 4, 512, 16, false);
    wf_cost_model_init(&h.cost, (double[4]){3.0, 0.25, 1.0, 0.0});
    h.core.cfg.cost = &h.cost;
    h.fx.eog_token = -1;
    int32_t p[21][32];
    for (int i = 0; i < 21; i++) make_prompt(p[i], 32, i + 1);
    h.next_vmodel = 3;
    h_add(&h, p[20], 8, 60, 1, 0, 1e6, 0);
    h_step(&h);
    const double weight[2] = {1, 2};
    for (int m = 0; m < 2; m++) {
        h.next_vmodel = (uint32_t)m + 1;
        h.next_weight = weight[m];
        for (int i = 0; i < 10; i++) h_add(&h, p[m * 10 + i], 32, 6, 1, 0, 1e6, 0);
    }
    int steps = 0;
    do {
        h_step(&h);
        steps++;
    } while ((running_of(&h, 1) > 2 || running_of(&h, 2) > 4) && steps < 60);
    ck_assert_int_lt(steps, 60);
    double spent[3] = {0, 0, 0};
    int window = 0;
    while (!h.recs[20].retired) {
        wf_task_batch *b = wf_core_plan(&h.core, h.now);
        ck_assert_int_le(running_of(&h, 1), 2);
        ck_assert_int_le(running_of(&h, 2), 4);
        for (int k = 0; k < b->n_tasks; k++) {
            const wf_task *t = &b->tasks[k];
            if (t->kind == WF_TASK_PREFILL) spent[t->vmodel - 1] += 0.25 * t->llm.n_tokens;
            if (t->kind == WF_TASK_DECODE) spent[t->vmodel - 1] += 1.0;
        }
        window++;
        wf_status st = wf_executor_run(wf_fake_executor_get(&h.fx), b, NULL, 0);
        h.now += 1000000;
        wf_core_complete(&h.core, st, NULL, h.now);
    }
    ck_assert_int_gt(window, 20);
    const double share[2] = {2.25, 4.5};
    for (int m = 0; m < 2; m++)
        ck_assert_double_le(spent[m], share[m] * window + 1.0 + 4 * share[m] + 1e-9);
    h_run(&h);
    for (int i = 0; i < 20; i++) check_request(&h, i + 1, p[i], 32, 6, 0);
    check_request(&h, 0, p[20], 8, 60, 0);
    h_free(&h);
}
END_TEST

START_TEST(priority_displaces_a_running_request) {
    /* One seat. The low-priority request is decoding when an urgent one arrives: it is
     * preempted at the next iteration, the urgent one runs to the end, then it resumes with
     * exactly the output it would have produced alone. */
    harness h;
    h_init(&h, "priority", 64, 4, 32, 1, false);
    h.fx.eog_token = -1;
    int32_t p[2][8];
    make_prompt(p[0], 8, 3);
    make_prompt(p[1], 8, 4);
    wf_request *low = h_add(&h, p[0], 8, 30, 1, 0, 1000, 0);
    for (int i = 0; i < 5; i++) h_step(&h);
    ck_assert_int_eq(h.recs[0].n[0], 5);
    wf_request *high = h_add(&h, p[1], 8, 10, 1, 0, 1000, 9);
    h_step(&h);
    ck_assert_int_eq(low->state, WF_REQUEST_PREEMPTED);
    ck_assert_int_eq(high->state, WF_REQUEST_RUNNING);
    h_run(&h);
    ck_assert_int_eq(h.retire_order[0], 1);
    ck_assert_int_eq(low->n_preemptions, 1);
    check_request(&h, 0, p[0], 8, 30, 0);
    check_request(&h, 1, p[1], 8, 10, 0);
    /* fcfs never displaces: same scenario, the first request keeps its seat. */
    harness f;
    h_init(&f, "fcfs", 64, 4, 32, 1, false);
    f.fx.eog_token = -1;
    h_add(&f, p[0], 8, 30, 1, 0, 1000, 0);
    for (int i = 0; i < 5; i++) h_step(&f);
    h_add(&f, p[1], 8, 10, 1, 0, 1000, 9);
    h_run(&f);
    ck_assert_int_eq(f.retire_order[0], 0);
    ck_assert_uint_eq(f.core.preempted_total, 0);
    h_free(&f);
    h_free(&h);
}
END_TEST

static uint64_t xorshift(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Random workloads against the real core: random policy, pool, budget, arrivals, prompt
 * sharing, n, sampling and cancellations. Every iteration the hook checks the budget and the
 * fake model checks the KV; at the end every choice got exactly one FINISHED, every stream
 * equals the model's own (a prefix of it when cancelled), and no block is left. */
static void run_random_workload(uint64_t seed, uint64_t cover[5], bool split) {
    static const char *policies[3] = {"fcfs", "priority", "slo"};
    uint64_t x = seed;
    harness h;
    int n_blocks = 54 + (int)(xorshift(&x) % 30);
    int budget = 8 + (int)(xorshift(&x) % 56);
    int max_running = 3 + (int)(xorshift(&x) % 6);
    /* split: a window of 5..12 positions; local blocks from 3 choices' windows (a request with
     * n = 3 must fit alone) up to plenty, so admission and preemption also run on them */
    int window = split ? 5 + (int)(xorshift(&x) % 8) : 0;
    int win_blocks = (window + 3) / 4 + 1;
    int n_swa = split ? 3 * (win_blocks + 1) + (int)(xorshift(&x) % 20) : 0;
    h_init_ex(&h, policies[xorshift(&x) % 3], n_blocks, 4, budget, max_running,
              xorshift(&x) % 4 != 0, window, n_swa);
    enum { NR = 24 };
    int32_t prompts[NR][40];
    int n_prompt[NR], max_tok[NR], arrive[NR], cancel_at[NR], n_choices[NR];
    float temp[NR];
    for (int i = 0; i < NR; i++) {
        n_prompt[i] = 1 + (int)(xorshift(&x) % 40);
        int sys = (int)(xorshift(&x) % 3);
        for (int k = 0; k < n_prompt[i]; k++)
            prompts[i][k] = k < 20 ? 100 + sys * 50 + k : 200 + (int)(xorshift(&x) % 700);
        max_tok[i] = 1 + (int)(xorshift(&x) % 30);
        n_choices[i] = 1 + (int)(xorshift(&x) % 3);
        temp[i] = xorshift(&x) % 2 ? 0.7f : 0.0f;
        if (n_choices[i] > 1 && temp[i] == 0) temp[i] = 1.0f;
        arrive[i] = (int)(xorshift(&x) % 40);
        cancel_at[i] = xorshift(&x) % 10 == 0 ? arrive[i] + (int)(xorshift(&x) % 15) : -1;
    }
    wf_request *reqs[NR] = {0};
    bool cancelled[NR] = {false};
    for (int it = 0; it < 5000; it++) {
        for (int i = 0; i < NR; i++) {
            if (arrive[i] == it)
                reqs[i] = h_add(&h, prompts[i], n_prompt[i], max_tok[i], n_choices[i], temp[i],
                                200 + 37.0 * (i % 5), (int)(i % 3));
            if (cancel_at[i] == it && reqs[i]) {
                atomic_store(&reqs[i]->cancel_requested, true);
                cancelled[i] = true;
            }
        }
        if (it > 60 && wf_core_n_requests(&h.core) == 0) break;
        h_step(&h);
    }
    ck_assert_int_eq(wf_core_n_requests(&h.core), 0);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(h.pool, &u);
    cover[0] += h.core.preempted_total;
    cover[1] += h.core.cancelled_total;
    cover[2] += u.cow_copies;
    cover[3] += u.prefix_hits;
    cover[4] += u.swa_released;
    for (int i = 0; i < NR; i++) {
        int ri = -1;
        for (int k = 0; k < h.n_reqs; k++)
            if (h.reqs[k] == reqs[i]) ri = k;
        ck_assert_int_ge(ri, 0);
        const rec *rc = &h.recs[ri];
        ck_assert(rc->retired);
        ck_assert_int_eq(rc->n_fin, n_choices[i]);
        for (int c = 0; c < n_choices[i]; c++) {
            int32_t want[MAXTOK];
            int n = expected_stream(&h, prompts[i], n_prompt[i], max_tok[i], temp[i],
                                    h.start_rng[ri][c], want);
            if (rc->fin[c] == WF_FINISH_CANCELLED) {
                ck_assert(cancelled[i]);
                ck_assert_int_le(rc->n[c], n);
            } else {
                ck_assert_msg(rc->fin[c] != WF_FINISH_ERROR, "seed %llu req %d failed",
                              (unsigned long long)seed, i);
                ck_assert_int_eq(rc->n[c], n);
            }
            for (int k = 0; k < rc->n[c]; k++)
                if (rc->toks[c][k] != want[k])
                    ck_abort_msg("seed %llu req %d choice %d token %d: %d != %d",
                                 (unsigned long long)seed, i, c, k, rc->toks[c][k], want[k]);
        }
    }
    h_free(&h);
}

START_TEST(random_workloads_keep_every_invariant) {
    uint64_t cover[5] = {0, 0, 0, 0, 0};
    for (uint64_t seed = 1; seed <= 40; seed++)
        run_random_workload(seed * 0x9e3779b97f4a7c15ull, cover, false);
    /* The workloads did reach the interesting paths. */
    ck_assert_uint_gt(cover[0], 0); /* preemptions */
    ck_assert_uint_gt(cover[1], 0); /* cancellations */
    ck_assert_uint_gt(cover[2], 0); /* copy-on-write */
    ck_assert_uint_gt(cover[3], 0); /* prefix hits */
    printf("random workloads: %llu preemptions, %llu cancellations, %llu COW copies, %llu "
           "prefix-hit tokens\n",
           (unsigned long long)cover[0], (unsigned long long)cover[1],
           (unsigned long long)cover[2], (unsigned long long)cover[3]);
}
END_TEST

/* The same workloads on a store split by layer kind (Gemma 3's sliding-window layers): the
 * fake model also writes each token through the local table and checks the window there, so
 * a local block released too early, shared wrongly or not copied on write fails the batch. */
START_TEST(random_workloads_split_kv_keep_every_invariant) {
    uint64_t cover[5] = {0, 0, 0, 0, 0};
    for (uint64_t seed = 1; seed <= 40; seed++)
        run_random_workload(seed * 0x2545f4914f6cdd1dull, cover, true);
    ck_assert_uint_gt(cover[0], 0); /* preemptions */
    ck_assert_uint_gt(cover[2], 0); /* copy-on-write */
    ck_assert_uint_gt(cover[3], 0); /* prefix hits */
    ck_assert_uint_gt(cover[4], 0); /* local blocks released behind the window */
    printf("split KV random workloads: %llu preemptions, %llu COW copies, %llu prefix-hit "
           "tokens, %llu local blocks released\n",
           (unsigned long long)cover[0], (unsigned long long)cover[2],
           (unsigned long long)cover[3], (unsigned long long)cover[4]);
}
END_TEST

/* Admission on an idle server: a prompt whose own prefill is predicted over the target is
 * refused only when the request named that target; with the deployment default it is served
 * (waiting could not make it sooner). With work queued ahead, both are refused. Cost model:
 * 10 ms per prefill token, so a 1000-token prompt is predicted at 10 s > 2 x 2000 ms. */
START_TEST(idle_server_serves_default_slo_requests) {
    wf_cost_model cost;
    wf_cost_model_init(&cost, (const double[4]){0, 10, 0, 0});
    wf_admission adm = {.cost = &cost, .max_batch_tokens = 512, .queue_size = 8, .factor = 2};
    double retry = -1, pred = 0;
    char msg[160];
    ck_assert_int_eq(wf_core_admit(&adm, 1000, 2000, &retry, &pred, msg, sizeof msg), WF_OK);
    ck_assert_double_eq_tol(pred, 10000, 1e-6);
    adm.explicit_slo = true;
    ck_assert_int_eq(wf_core_admit(&adm, 1000, 2000, &retry, NULL, msg, sizeof msg), WF_EOVERLOAD);
    ck_assert_double_eq_tol(retry, 0, 1e-9); /* nothing to drain */
    adm.explicit_slo = false;
    adm.load.pending_prefill_tokens = 100;
    adm.load.n_waiting = 1;
    ck_assert_int_eq(wf_core_admit(&adm, 1000, 2000, &retry, NULL, msg, sizeof msg), WF_EOVERLOAD);
    ck_assert_double_eq_tol(retry, 1.0, 1e-9); /* 100 queued tokens x 10 ms */
    ck_assert_int_eq(wf_core_admit(&adm, 10, 2000, &retry, NULL, msg, sizeof msg), WF_OK);
}
END_TEST

/* Admission predicts in the policy's own order: under "slo" (EDF) an interactive request whose
 * deadline comes before eight queued batch requests' waits only behind the running work, so it
 * is admitted; under "fcfs" the same request waits behind all of them and is refused; under
 * "slo" a request whose deadline comes after theirs is refused too. Cost model: 1 ms per
 * prefill token. */
START_TEST(admission_predicts_in_the_policy_order) {
    wf_cost_model cost;
    wf_cost_model_init(&cost, (const double[4]){0, 1, 0, 0});
    const uint64_t now = 1000000000000ull;
    wf_waiting_work batch[8];
    for (int i = 0; i < 8; i++)
        batch[i] = (wf_waiting_work){.key = {.priority = 0, .serial = (uint64_t)i + 1,
                                             .slo_key = now + 60000000000ull},
                                     .prefill_tokens = 500, .prefill_attention = 0};
    wf_core_load running = {.pending_prefill_tokens = 50, .n_decode = 0};
    wf_admission adm = {.cost = &cost, .max_batch_tokens = 512, .queue_size = 64, .factor = 2,
                        .explicit_slo = true};
    char msg[160];
    double retry, pred;
    wf_order_key interactive = {.priority = 0, .serial = UINT64_MAX, .slo_key = now + 1000000000ull};
    wf_core_load_ahead_of(&running, batch, 8, wf_sched_policy_find("slo"), &interactive, &adm.load);
    ck_assert_int_eq(adm.load.n_waiting, 8);
    ck_assert_double_eq_tol(adm.load.pending_prefill_tokens, 50, 1e-9);
    ck_assert_int_eq(wf_core_admit(&adm, 100, 1000, &retry, &pred, msg, sizeof msg), WF_OK);
    ck_assert_double_lt(pred, 2000);
    wf_core_load_ahead_of(&running, batch, 8, wf_sched_policy_find("fcfs"), &interactive, &adm.load);
    ck_assert_double_eq_tol(adm.load.pending_prefill_tokens, 50 + 8 * 500, 1e-9);
    ck_assert_int_eq(wf_core_admit(&adm, 100, 1000, &retry, &pred, msg, sizeof msg), WF_EOVERLOAD);
    ck_assert_ptr_nonnull(strstr(msg, "predicted time to first token"));
    wf_order_key late = {.priority = 0, .serial = UINT64_MAX, .slo_key = now + 120000000000ull};
    wf_core_load_ahead_of(&running, batch, 8, wf_sched_policy_find("slo"), &late, &adm.load);
    ck_assert_double_eq_tol(adm.load.pending_prefill_tokens, 50 + 8 * 500, 1e-9);
    ck_assert_int_eq(wf_core_admit(&adm, 100, 1000, &retry, &pred, msg, sizeof msg), WF_EOVERLOAD);
    /* "priority": a higher priority goes before the queued ones, an equal one after them. */
    wf_order_key urgent = {.priority = 5, .serial = UINT64_MAX};
    wf_core_load_ahead_of(&running, batch, 8, wf_sched_policy_find("priority"), &urgent, &adm.load);
    ck_assert_double_eq_tol(adm.load.pending_prefill_tokens, 50, 1e-9);
    wf_order_key same = {.priority = 0, .serial = UINT64_MAX};
    wf_core_load_ahead_of(&running, batch, 8, wf_sched_policy_find("priority"), &same, &adm.load);
    ck_assert_double_eq_tol(adm.load.pending_prefill_tokens, 50 + 8 * 500, 1e-9);
}
END_TEST

/* The key order is the request order: compare(a, b) agrees with key_compare on their keys. */
START_TEST(order_keys_agree_with_compare) {
    static const char *const names[] = {"fcfs", "priority", "slo"};
    wf_request_spec spec;
    memset(&spec, 0, sizeof spec);
    int32_t prompt[4] = {1, 2, 3, 4};
    spec.prompt = prompt;
    spec.n_prompt = 4;
    spec.n = 1;
    spec.max_tokens = 4;
    wf_request *r[6];
    for (int i = 0; i < 6; i++) {
        spec.priority = i % 3;
        ck_assert_int_eq(wf__request_new(&spec, 64, 16, (uint64_t)i, &r[i]), WF_OK);
        r[i]->serial = (uint64_t)(10 - i);
        r[i]->ttft_ms = 100.0 * (i % 2 + 1);
        r[i]->times.queued_ns = 1000000000ull * (uint64_t)(i + 1);
    }
    for (int p = 0; p < 3; p++) {
        const wf_sched_policy *pol = wf_sched_policy_find(names[p]);
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++) {
                wf_order_key a, b;
                wf_sched_order_key(r[i], &a);
                wf_sched_order_key(r[j], &b);
                int want = pol->compare(r[i], r[j]), got = pol->key_compare(&a, &b);
                ck_assert_int_eq((want > 0) - (want < 0), (got > 0) - (got < 0));
            }
    }
    for (int i = 0; i < 6; i++) wf__request_free(r[i]);
}
END_TEST

/* PREFILL and DECODE tasks carry their request's next-token deadline (queued + TTFT + TPOT x
 * tokens so far): what a core-sharing gate orders LLM batches by against image batches. */
START_TEST(tasks_carry_the_next_token_deadline) {
    harness h;
    h_init(&h, "fcfs", 64, 4, 64, 8, false);
    int32_t p[6];
    make_prompt(p, 6, 3);
    wf_request *a = h_add(&h, p, 6, 4, 1, 0, 200, 0);
    h.now += 5000000;
    wf_request *b = h_add(&h, p, 6, 4, 1, 0, 80, 0);
    for (int iter = 0; iter < 3; iter++) {
        wf_task_batch *bt = wf_core_plan(&h.core, h.now);
        ck_assert_int_gt(bt->n_tasks, 0);
        for (int i = 0; i < bt->n_tasks; i++) {
            const wf_task *t = &bt->tasks[i];
            if (t->kind != WF_TASK_PREFILL && t->kind != WF_TASK_DECODE) continue;
            wf_request *r = t->request_seq == a->choices[0].seq_id ? a : b;
            uint64_t want = r->times.queued_ns +
                            (uint64_t)((r->ttft_ms + r->tpot_ms * r->max_generated) * 1e6);
            ck_assert_uint_eq(t->deadline_ns, want);
            ck_assert_uint_eq(t->deadline_ns, wf__request_deadline_ns(r));
        }
        wf_status st = wf_executor_run(wf_fake_executor_get(&h.fx), bt, NULL, 0);
        h.now += 1000000;
        wf_core_complete(&h.core, st, NULL, h.now);
    }
    /* after tokens came out, the deadline moved on by TPOT per token */
    ck_assert_int_gt(a->max_generated, 0);
    ck_assert_uint_gt(wf__request_deadline_ns(a), a->times.queued_ns + 200000000ull);
    h_run(&h);
    h_free(&h);
}
END_TEST

static Suite *core_suite(void) {
    Suite *s = suite_create("sched_core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, streams_match_the_model);
    tcase_add_test(tc, stall_cap_sizes_prefill_beside_decodes);
    tcase_add_test(tc, chunked_prefill_interleaves_with_decode);
    tcase_add_test(tc, batches_report_attention_work);
    tcase_add_test(tc, policy_orders);
    tcase_add_test(tc, idle_server_serves_default_slo_requests);
    tcase_add_test(tc, admission_predicts_in_the_policy_order);
    tcase_add_test(tc, order_keys_agree_with_compare);
    tcase_add_test(tc, preemption_gives_identical_output);
    tcase_add_test(tc, preemption_with_prefix_cache_and_sampling);
    tcase_add_test(tc, cancellation_frees_blocks);
    tcase_add_test(tc, n_choices_share_prompt_copy_on_write);
    tcase_add_test(tc, prefix_cache_reuses_system_prompt);
    tcase_add_test(tc, eos_and_min_tokens);
    tcase_add_test(tc, executor_failure_fails_requests);
    tcase_add_test(tc, request_too_big_for_cache_fails_cleanly);
    tcase_add_test(tc, priority_preempts_the_lowest_priority);
    tcase_add_test(tc, priority_displaces_a_running_request);
    tcase_add_test(tc, vmodel_max_running_caps_only_that_model);
    tcase_add_test(tc, fair_caps_a_tenant_only_while_another_is_active);
    tcase_add_test(tc, fair_cap_is_a_weighted_share_of_the_knee_batch);
    tcase_add_test(tc, random_workloads_keep_every_invariant);
    tcase_add_test(tc, random_workloads_split_kv_keep_every_invariant);
    /* 80 random workloads: a few seconds, more on a loaded host or under sanitizers */
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, tasks_carry_the_next_token_deadline);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(core_suite)
