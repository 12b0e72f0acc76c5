/* Tests sched/cost_model.c on synthetic data: the attention feature, fits that identify the
 * context coefficient from calibration-shaped batches (chunks at the start of a prompt and
 * deep into one, decodes at short and long contexts), predictions of held-out batches across
 * chunk sizes and context lengths, chunk sizing under a time budget, and TTFT prediction of a
 * long prompt. Everything is arithmetic on a known "true" model: no timing. */
#include "check_main.h"
#include "sched/core.h"
#include "sched/cost_model.h"

#include <math.h>
#include <stdint.h>

/* The "true" device: 8 ms per step, 0.9 ms per prefill token, 1.2 ms per decode token (its
 * logits), 0.0004 ms per attended position. */
static const double TRUE_COEF[4] = {8.0, 0.9, 1.2, 0.0004};

static double true_ms(double p, double dcount, double attn) {
    return TRUE_COEF[0] + TRUE_COEF[1] * p + TRUE_COEF[2] * dcount + TRUE_COEF[3] * attn;
}

/* Deterministic +-3 % multiplicative noise (a measured machine is never exact). */
static double noisy(double ms, uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(*state >> 11) / 9007199254740992.0; /* [0, 1) */
    return ms * (0.97 + 0.06 * u);
}

static wf_cost_sample prefill(int start, int n, uint64_t *rng) {
    double attn = wf_cost_model_attention(start, n);
    return (wf_cost_sample){n, 0, attn, noisy(true_ms(n, 0, attn), rng)};
}

static wf_cost_sample decode(int k, int ctx, uint64_t *rng) {
    double attn = k * wf_cost_model_attention(ctx, 1);
    return (wf_cost_sample){0, k, attn, noisy(true_ms(0, k, attn), rng)};
}

START_TEST(attention_work_counts_every_attended_position) {
    ck_assert(wf_cost_model_attention(0, 1) == 1.0);       /* the first token sees itself */
    ck_assert(wf_cost_model_attention(99, 1) == 100.0);    /* a decode at position 99 */
    ck_assert(wf_cost_model_attention(0, 4) == 10.0);      /* 1 + 2 + 3 + 4 */
    ck_assert(wf_cost_model_attention(10, 3) == 36.0);     /* 11 + 12 + 13 */
    /* Chunking a prompt does not change its total attention work. */
    double whole = wf_cost_model_attention(0, 2000);
    double chunked = wf_cost_model_attention(0, 512) + wf_cost_model_attention(512, 512) +
                     wf_cost_model_attention(1024, 512) + wf_cost_model_attention(1536, 464);
    ck_assert(whole == chunked);
}
END_TEST

/* The batches the start-up calibration measures (sched.c): a fit must recover the context
 * coefficient well enough to predict batches it never saw. */
START_TEST(calibration_shaped_fit_predicts_held_out_batches) {
    uint64_t rng = 42;
    wf_cost_sample s[24];
    int n = 0;
    for (int rep = 0; rep < 2; rep++) {
        s[n++] = prefill(0, 64, &rng);
        s[n++] = decode(1, 64, &rng);
        s[n++] = prefill(1024, 64, &rng);
        s[n++] = decode(1, 1024, &rng);
        s[n++] = prefill(0, 256, &rng);
        s[n++] = decode(8, 64, &rng);
        s[n++] = decode(8, 1024, &rng);
        s[n++] = decode(32, 64, &rng);
        s[n++] = prefill(1024, 16, &rng);
        s[n++] = prefill(0, 16, &rng);
    }
    double prior[4] = {5.0, 0.5, 2.0, 0.001};
    double c[4];
    ck_assert_int_eq(wf_cost_model_fit(s, n, prior, c), WF_OK);
    ck_assert_msg(fabs(c[3] - TRUE_COEF[3]) < 0.25 * TRUE_COEF[3], "d = %g", c[3]);
    wf_cost_model m;
    wf_cost_model_init(&m, c);
    /* Held out: big chunks deep into long prompts, long-context decode batches, mixes. */
    static const int chunks[][2] = {{1536, 464}, {512, 512}, {0, 512}, {1900, 100}, {256, 128}};
    for (unsigned i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        double attn = wf_cost_model_attention(chunks[i][0], chunks[i][1]);
        double want = true_ms(chunks[i][1], 0, attn);
        double got = wf_cost_model_predict(&m, chunks[i][1], 0, attn);
        ck_assert_msg(fabs(got - want) < 0.06 * want, "chunk %d@%d: %.1f vs %.1f ms",
                      chunks[i][1], chunks[i][0], got, want);
    }
    double attn = 16 * wf_cost_model_attention(1800, 1) + wf_cost_model_attention(700, 200);
    double want = true_ms(200, 16, attn);
    double got = wf_cost_model_predict(&m, 200, 16, attn);
    ck_assert_msg(fabs(got - want) < 0.06 * want, "mixed: %.1f vs %.1f ms", got, want);
    /* A 2,000-token prompt, chunked by 512: within 6 % (the old feature, the chunk's end
     * position, under-predicted such a prompt by half). */
    double total_want = 0, total_got = 0;
    for (int pos = 0; pos < 2000; pos += 512) {
        int len = 2000 - pos < 512 ? 2000 - pos : 512;
        double a = wf_cost_model_attention(pos, len);
        total_want += true_ms(len, 0, a);
        total_got += wf_cost_model_predict(&m, len, 0, a);
    }
    ck_assert_msg(fabs(total_got - total_want) < 0.06 * total_want, "2000 tokens: %.0f vs %.0f",
                  total_got, total_want);
}
END_TEST

/* Online refits from served iterations (decode-heavy with occasional prompts) converge too. */
START_TEST(online_refit_learns_attention_from_served_iterations) {
    uint64_t rng = 7;
    wf_cost_model m;
    wf_cost_model_init(&m, (const double[4]){5.0, 0.5, 2.0, 0.0});
    for (int it = 0; it < 400; it++) {
        int k = 1 + it % 16, ctx = 100 + (it * 37) % 1500;
        double p = 0, attn = k * wf_cost_model_attention(ctx, 1);
        if (it % 5 == 0) {
            int start = (it * 53) % 1500;
            p = 32 + it % 200;
            attn += wf_cost_model_attention(start, p);
        }
        wf_cost_model_observe(&m, p, k, attn, noisy(true_ms(p, k, attn), &rng));
    }
    double attn = wf_cost_model_attention(1024, 512);
    double want = true_ms(512, 0, attn), got = wf_cost_model_predict(&m, 512, 0, attn);
    ck_assert_msg(fabs(got - want) < 0.08 * want, "%.1f vs %.1f ms", got, want);
}
END_TEST

START_TEST(prefill_fit_sizes_chunks_to_a_time_budget) {
    wf_cost_model m;
    wf_cost_model_init(&m, TRUE_COEF);
    static const int starts[] = {0, 100, 1000, 4000};
    static const double budgets[] = {1.0, 50.0, 200.0, 1000.0};
    for (unsigned i = 0; i < 4; i++)
        for (unsigned j = 0; j < 4; j++) {
            int n = wf_cost_model_prefill_fit(&m, budgets[j], starts[i], 100000);
            double cost = TRUE_COEF[1] * n + TRUE_COEF[3] * wf_cost_model_attention(starts[i], n);
            double next = TRUE_COEF[1] * (n + 1) +
                          TRUE_COEF[3] * wf_cost_model_attention(starts[i], n + 1);
            ck_assert_msg(cost <= budgets[j] + 1e-9 && next > budgets[j], "start %d, %.0f ms: %d",
                          starts[i], budgets[j], n);
        }
    /* Deeper into a prompt, the same time buys fewer tokens. */
    ck_assert_int_gt(wf_cost_model_prefill_fit(&m, 200, 0, 100000),
                     wf_cost_model_prefill_fit(&m, 200, 4000, 100000));
    ck_assert_int_eq(wf_cost_model_prefill_fit(&m, 1e9, 0, 300), 300); /* capped */
    ck_assert_int_eq(wf_cost_model_prefill_fit(&m, 0, 0, 300), 0);
    ck_assert_int_eq(wf_cost_model_prefill_fit(&m, -5, 0, 300), 0);
    wf_cost_model flat;
    wf_cost_model_init(&flat, (const double[4]){1, 2, 0, 0});
    ck_assert_int_eq(wf_cost_model_prefill_fit(&flat, 100, 500, 1000), 50);
}
END_TEST

START_TEST(ttft_prediction_includes_the_prompts_attention) {
    wf_cost_model m;
    wf_cost_model_init(&m, TRUE_COEF);
    double drain = -1;
    double pred = wf_cost_model_predict_ttft(&m, 512, 0, 0, 0, 0, 2000, &drain);
    double want = 4 * TRUE_COEF[0] + TRUE_COEF[1] * 2000 +
                  TRUE_COEF[3] * wf_cost_model_attention(0, 2000);
    ck_assert(fabs(pred - want) < 1e-6);
    ck_assert(drain == 0.0);
    /* Work queued ahead adds its tokens and its attention. */
    double pend_attn = 3 * wf_cost_model_attention(0, 128);
    pred = wf_cost_model_predict_ttft(&m, 512, 384, pend_attn, 0, 0, 128, &drain);
    want = TRUE_COEF[0] + TRUE_COEF[1] * 512 +
           TRUE_COEF[3] * (pend_attn + wf_cost_model_attention(0, 128));
    ck_assert(fabs(pred - want) < 1e-6);
    want = TRUE_COEF[0] + TRUE_COEF[1] * 384 + TRUE_COEF[3] * pend_attn;
    ck_assert(fabs(drain - want) < 1e-6);
}
END_TEST

/* The admission load summary counts pending attention the way the cost model does. */
START_TEST(admission_uses_pending_attention) {
    wf_cost_model m;
    wf_cost_model_init(&m, TRUE_COEF);
    wf_admission a = {.cost = &m, .max_batch_tokens = 512, .queue_size = 8, .factor = 1,
                      .explicit_slo = true};
    a.load.pending_prefill_tokens = 1500;
    a.load.pending_prefill_attention = wf_cost_model_attention(0, 1500);
    a.load.n_waiting = 1;
    double retry = 0, pred = 0;
    char msg[160];
    wf_status st = wf_core_admit(&a, 500, 1e6, &retry, &pred, msg, sizeof msg);
    ck_assert_int_eq(st, WF_OK);
    double want = 4 * TRUE_COEF[0] + TRUE_COEF[1] * 2000 +
                  TRUE_COEF[3] * (wf_cost_model_attention(0, 1500) + wf_cost_model_attention(0, 500));
    ck_assert(fabs(pred - want) < 1e-6);
    st = wf_core_admit(&a, 500, want * 0.9, &retry, &pred, msg, sizeof msg);
    ck_assert_int_eq(st, WF_EOVERLOAD);
}
END_TEST

static Suite *cost_model_suite(void) {
    Suite *s = suite_create("cost_model");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, attention_work_counts_every_attended_position);
    tcase_add_test(tc, calibration_shaped_fit_predicts_held_out_batches);
    tcase_add_test(tc, online_refit_learns_attention_from_served_iterations);
    tcase_add_test(tc, prefill_fit_sizes_chunks_to_a_time_budget);
    tcase_add_test(tc, ttft_prediction_includes_the_prompts_attention);
    tcase_add_test(tc, admission_uses_pending_attention);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(cost_model_suite)
