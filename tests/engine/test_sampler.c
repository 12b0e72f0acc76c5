/* Tests engine/sampler.c: greedy/top-k/top-p/min-p/temperature against known distributions
 * (fixed seeds, 20,000 draws, tolerances of ~5 sigma), reproducibility of seeded streams,
 * logit bias, penalties (exact amounts, checked through the reported log-probabilities),
 * log-probability normalisation, EOG suppression with the default model's tokenizer, and the
 * large-vocabulary truncation paths against brute force. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/cpu/features.h"
#include "engine/gguf.h"
#include "engine/sampler.h"
#include "engine/sampler_impl.h"
#include "engine/tokenizer.h"

static wf_sampling_params params_default(void) {
    return (wf_sampling_params){.temperature = 1, .top_p = 1, .repetition_penalty = 1};
}

static wf_task_sample sample_of(const wf_sampling_params *p, uint64_t seed) {
    return (wf_task_sample){.params = p, .rng_state = wf_sampler_seed_state(seed, 0)};
}

static int32_t draw(wf_sampler *s, const float *logits, wf_task_sample *t) {
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, t), WF_OK);
    return t->out.token;
}

/* Draws n times; counts[] gets the histogram. */
static void histogram(wf_sampler *s, const float *logits, const wf_sampling_params *p, int n,
                      int *counts, int nv) {
    memset(counts, 0, (size_t)nv * sizeof *counts);
    wf_task_sample t = sample_of(p, 1234);
    for (int i = 0; i < n; i++) counts[draw(s, logits, &t)]++;
}

static void expect_freqs(const int *counts, const double *want, int nv, int n, double tol) {
    for (int i = 0; i < nv; i++) {
        double f = (double)counts[i] / n;
        ck_assert_msg(fabs(f - want[i]) <= tol, "token %d: frequency %.4f, expected %.4f", i, f,
                      want[i]);
    }
}

START_TEST(test_seed_streams) {
    ck_assert_uint_eq(wf_sampler_seed_state(42, 0), wf_sampler_seed_state(42, 0));
    ck_assert_uint_ne(wf_sampler_seed_state(42, 0), wf_sampler_seed_state(42, 1));
    ck_assert_uint_ne(wf_sampler_seed_state(42, 0), wf_sampler_seed_state(43, 0));
    float logits[16];
    for (int i = 0; i < 16; i++) logits[i] = 0; /* uniform: every draw is informative */
    wf_sampler *s = wf_sampler_new(16);
    wf_sampling_params p = params_default();
    int32_t a[200], b[200], c[200];
    wf_task_sample t = sample_of(&p, 7);
    for (int i = 0; i < 200; i++) a[i] = draw(s, logits, &t);
    t = sample_of(&p, 7);
    for (int i = 0; i < 200; i++) b[i] = draw(s, logits, &t);
    t = (wf_task_sample){.params = &p, .rng_state = wf_sampler_seed_state(7, 1)};
    for (int i = 0; i < 200; i++) c[i] = draw(s, logits, &t);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    int same = 0;
    for (int i = 0; i < 200; i++) same += a[i] == c[i];
    ck_assert_int_lt(same, 40); /* independent: ~200/16 expected */
    wf_sampler_free(s);
}
END_TEST

START_TEST(test_greedy) {
    float logits[8] = {0.5f, 3, -1, 3, 2.9f, -INFINITY, 0, 1};
    wf_sampler *s = wf_sampler_new(8);
    wf_sampling_params p = params_default();
    p.temperature = 0;
    wf_task_sample t = sample_of(&p, 1);
    uint64_t st0 = t.rng_state;
    ck_assert_int_eq(draw(s, logits, &t), 1); /* tie 1/3 -> lowest id */
    ck_assert_uint_eq(t.rng_state, st0);      /* greedy does not consume randomness */
    ck_assert(!t.out_is_eog);
    /* top_k = 1 at temperature 1 is greedy too */
    p = params_default();
    p.top_k = 1;
    for (uint64_t seed = 0; seed < 50; seed++) {
        t = sample_of(&p, seed);
        ck_assert_int_eq(draw(s, logits, &t), 1);
    }
    /* min_p = 1 keeps only the maxima (1 and 3, equal) */
    p = params_default();
    p.min_p = 1;
    int counts[8];
    histogram(s, logits, &p, 2000, counts, 8);
    ck_assert_int_eq(counts[1] + counts[3], 2000);
    ck_assert(counts[1] > 800 && counts[3] > 800);
    wf_sampler_free(s);
}
END_TEST

START_TEST(test_distribution) {
    static const double p4[4] = {0.1, 0.2, 0.3, 0.4};
    float logits[4];
    for (int i = 0; i < 4; i++) logits[i] = (float)log(p4[i]) + 3.0f; /* shift: irrelevant */
    wf_sampler *s = wf_sampler_new(4);
    wf_sampling_params p = params_default();
    int counts[4];
    const int n = 20000;
    histogram(s, logits, &p, n, counts, 4);
    expect_freqs(counts, p4, 4, n, 0.02);
    /* temperature 0.5 squares the probabilities */
    p.temperature = 0.5f;
    histogram(s, logits, &p, n, counts, 4);
    double sq[4], z = 0;
    for (int i = 0; i < 4; i++) z += sq[i] = p4[i] * p4[i];
    for (int i = 0; i < 4; i++) sq[i] /= z;
    expect_freqs(counts, sq, 4, n, 0.02);
    /* top_k = 2: renormalised 3/7, 4/7 */
    p = params_default();
    p.top_k = 2;
    histogram(s, logits, &p, n, counts, 4);
    expect_freqs(counts, (const double[]){0, 0, 3.0 / 7, 4.0 / 7}, 4, n, 0.02);
    /* top_p = 0.65: 0.4 + 0.3 = 0.7 >= 0.65 keeps {3, 2} */
    p = params_default();
    p.top_p = 0.65f;
    histogram(s, logits, &p, n, counts, 4);
    expect_freqs(counts, (const double[]){0, 0, 3.0 / 7, 4.0 / 7}, 4, n, 0.02);
    /* top_p = 0.75 keeps {3, 2, 1} */
    p.top_p = 0.75f;
    histogram(s, logits, &p, n, counts, 4);
    expect_freqs(counts, (const double[]){0, 2.0 / 9, 3.0 / 9, 4.0 / 9}, 4, n, 0.02);
    /* min_p = 0.5: p >= 0.2 keeps {1, 2, 3} */
    p = params_default();
    p.min_p = 0.5f;
    histogram(s, logits, &p, n, counts, 4);
    expect_freqs(counts, (const double[]){0, 2.0 / 9, 3.0 / 9, 4.0 / 9}, 4, n, 0.02);
    /* min_p = 0.7: only p >= 0.28 */
    p.min_p = 0.7f;
    histogram(s, logits, &p, n, counts, 4);
    expect_freqs(counts, (const double[]){0, 0, 3.0 / 7, 4.0 / 7}, 4, n, 0.02);
    /* top_k then temperature: top 3 at T = 2 -> sqrt(p) renormalised */
    p = params_default();
    p.top_k = 3;
    p.temperature = 2;
    histogram(s, logits, &p, n, counts, 4);
    double rt[4] = {0}, zr = 0;
    for (int i = 1; i < 4; i++) zr += rt[i] = sqrt(p4[i]);
    for (int i = 1; i < 4; i++) rt[i] /= zr;
    expect_freqs(counts, rt, 4, n, 0.02);
    wf_sampler_free(s);
}
END_TEST

START_TEST(test_logit_bias) {
    float logits[6] = {1, 5, 2, 0, 0, 0};
    wf_sampler *s = wf_sampler_new(6);
    wf_logit_bias ban[] = {{1, -100}};
    wf_sampling_params p = params_default();
    p.logit_bias = ban;
    p.n_logit_bias = 1;
    int counts[6];
    histogram(s, logits, &p, 5000, counts, 6);
    ck_assert_int_eq(counts[1], 0);
    p.temperature = 0;
    wf_task_sample t = sample_of(&p, 1);
    ck_assert_int_eq(draw(s, logits, &t), 2);
    wf_logit_bias force[] = {{4, 100}};
    p = params_default();
    p.logit_bias = force;
    p.n_logit_bias = 1;
    histogram(s, logits, &p, 5000, counts, 6);
    ck_assert_int_eq(counts[4], 5000);
    /* -inf bias: banned exactly, logprob -inf is never listed */
    wf_logit_bias inf[] = {{1, -INFINITY}};
    p = params_default();
    p.logit_bias = inf;
    p.n_logit_bias = 1;
    p.logprobs = true;
    p.top_logprobs = 6;
    t = sample_of(&p, 3);
    draw(s, logits, &t);
    ck_assert_int_eq(t.out.n_top, 5);
    for (int i = 0; i < t.out.n_top; i++) ck_assert_int_ne(t.out.top[i].token, 1);
    /* out-of-range bias token */
    wf_logit_bias bad[] = {{6, 1}};
    p.logit_bias = bad;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, &t), WF_EINVAL);
    wf_sampler_free(s);
}
END_TEST

/* The processed logits, recovered up to a constant from the reported log-probabilities. */
static void processed(wf_sampler *s, const float *logits, wf_task_sample *t, int nv, double *out) {
    wf_sampling_params *p = (wf_sampling_params *)t->params;
    p->logprobs = true;
    p->top_logprobs = nv;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, t), WF_OK);
    ck_assert_int_eq(t->out.n_top, nv);
    for (int i = 0; i < nv; i++) out[t->out.top[i].token] = t->out.top[i].logprob;
}

START_TEST(test_penalties) {
    enum { NV = 8 };
    const float logits[NV] = {0, 2, -1, 1, 0.5f, 0.25f, 3, -2};
    wf_sampler *s = wf_sampler_new(NV);
    double base[NV], got[NV];
    wf_sampling_params p = params_default();
    wf_task_sample t = sample_of(&p, 1);
    processed(s, logits, &t, NV, base);

    /* repetition penalty 2 over the last 64 history tokens: token 6 only appears 65 tokens
     * back (not penalised); tokens 1 (positive: halved) and 2 (negative: doubled) recently,
     * several times (penalised once). */
    int32_t hist[70];
    hist[0] = 6;
    for (int i = 1; i < 70; i++) hist[i] = 0;
    hist[60] = 1, hist[61] = 1, hist[65] = 2;
    hist[4] = 3; /* 66 back: outside the window */
    p = params_default();
    p.repetition_penalty = 2;
    t = (wf_task_sample){.params = &p, .history = hist, .n_history = 70, .n_prompt = 70};
    processed(s, logits, &t, NV, got);
    double want[NV];
    memcpy(want, (double[]){0, 1, -2, 1, 0.5, 0.25, 3, -2}, sizeof want);
    for (int i = 0; i < NV; i++)
        ck_assert_msg(fabs((got[i] - got[7]) - (want[i] - want[7])) < 1e-5,
                      "token %d: %f vs %f", i, got[i] - got[7], want[i] - want[7]);

    /* frequency 0.5 / presence 0.25 over generated tokens only: the prompt's 3s do not count */
    int32_t h2[] = {3, 3, 4, 4, 4, 5, 1};
    p = params_default();
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    t = (wf_task_sample){.params = &p, .history = h2, .n_history = 7, .n_prompt = 2};
    processed(s, logits, &t, NV, got);
    memcpy(want, (double[]){0, 2 - 0.75, -1, 1, 0.5 - 1.75, 0.25 - 0.75, 3, -2}, sizeof want);
    for (int i = 0; i < NV; i++)
        ck_assert_msg(fabs((got[i] - got[7]) - (want[i] - want[7])) < 1e-5,
                      "token %d: %f vs %f", i, got[i] - got[7], want[i] - want[7]);
    /* negative penalties (allowed by OpenAI) encourage repetition */
    p.frequency_penalty = -1;
    p.presence_penalty = 0;
    processed(s, logits, &t, NV, got);
    ck_assert(fabs((got[4] - got[7]) - (0.5 + 3 - -2)) < 1e-5);
    /* the same call twice gives the same answer: counts are reset between calls */
    processed(s, logits, &t, NV, base);
    for (int i = 0; i < NV; i++) ck_assert(fabs(base[i] - got[i]) < 1e-6);
    wf_sampler_free(s);
}
END_TEST

START_TEST(test_logprobs) {
    enum { NV = 20 };
    float logits[NV];
    for (int i = 0; i < NV; i++) logits[i] = (float)((i * 7) % 11) * 0.3f;
    wf_sampler *s = wf_sampler_new(NV);
    wf_sampling_params p = params_default();
    p.logprobs = true;
    p.top_logprobs = WF_MAX_TOP_LOGPROBS;
    for (uint64_t seed = 0; seed < 20; seed++) {
        wf_task_sample t = sample_of(&p, seed);
        draw(s, logits, &t);
        ck_assert_int_eq(t.out.n_top, NV);
        double sum = 0;
        bool found = false;
        for (int i = 0; i < NV; i++) {
            sum += exp(t.out.top[i].logprob);
            if (i) {
                ck_assert(t.out.top[i - 1].logprob >= t.out.top[i].logprob);
                if (t.out.top[i - 1].logprob == t.out.top[i].logprob)
                    ck_assert_int_lt(t.out.top[i - 1].token, t.out.top[i].token);
            }
            if (t.out.top[i].token == t.out.token) {
                ck_assert_float_eq(t.out.top[i].logprob, t.out.logprob);
                found = true;
            }
        }
        ck_assert(found);
        ck_assert_double_eq_tol(sum, 1.0, 1e-5);
        ck_assert(t.out.logprob <= 0);
    }
    /* logprobs are of the untruncated distribution: top_k = 1 picks the max with its full
     * softmax logprob, and temperature does not change it */
    double z = 0;
    for (int i = 0; i < NV; i++) z += exp(logits[i]);
    int32_t am = 0;
    for (int i = 1; i < NV; i++)
        if (logits[i] > logits[am]) am = i;
    p.top_k = 1;
    p.temperature = 0.3f;
    p.top_logprobs = 3;
    wf_task_sample t = sample_of(&p, 5);
    draw(s, logits, &t);
    ck_assert_int_eq(t.out.token, am);
    ck_assert_double_eq_tol(t.out.logprob, logits[am] - log(z), 1e-5);
    ck_assert_int_eq(t.out.n_top, 3);
    /* without logprobs nothing is reported */
    p.logprobs = false;
    t = sample_of(&p, 5);
    draw(s, logits, &t);
    ck_assert_int_eq(t.out.n_top, 0);
    ck_assert(t.out.logprob == 0);
    wf_sampler_free(s);
}
END_TEST

static uint64_t lcg(uint64_t *x) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* A 49152-token vocabulary: every draw with top-k / top-p lies inside the brute-force set. */
START_TEST(test_large_vocab_truncation) {
    enum { NV = 49152 };
    float *logits = malloc(NV * sizeof *logits), *sorted = malloc(NV * sizeof *sorted);
    uint64_t x = 99;
    for (int i = 0; i < NV; i++) logits[i] = (float)((double)lcg(&x) / (1ull << 31)) * 12.0f;
    logits[777] = logits[778] = 20; /* a tie at the top */
    memcpy(sorted, logits, NV * sizeof *sorted);
    qsort(sorted, NV, sizeof *sorted, cmp_desc);
    wf_sampler *s = wf_sampler_new(NV);
    static const int ks[] = {1, 2, 40, 1000, 40000};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        wf_sampling_params p = params_default();
        p.top_k = ks[ki];
        float thr = sorted[ks[ki] - 1];
        wf_task_sample t = sample_of(&p, ki);
        for (int i = 0; i < 200; i++) {
            int32_t id = draw(s, logits, &t);
            ck_assert_msg(logits[id] >= thr, "top_k %d drew %d (%f < %f)", ks[ki], id,
                          logits[id], thr);
            if (ks[ki] == 1) ck_assert_int_eq(id, 777); /* tie -> lowest id */
        }
    }
    static const float ps[] = {0.01f, 0.3f, 0.9f, 0.999f};
    double z = 0;
    for (int i = 0; i < NV; i++) z += exp(sorted[i] - sorted[0]);
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
        double cum = 0;
        int m = 0;
        while (m < NV && cum < ps[pi] * z) cum += exp(sorted[m++] - sorted[0]);
        float thr = sorted[m - 1];
        wf_sampling_params p = params_default();
        p.top_p = ps[pi];
        wf_task_sample t = sample_of(&p, 100 + pi);
        for (int i = 0; i < 200; i++) {
            int32_t id = draw(s, logits, &t);
            ck_assert_msg(logits[id] >= thr, "top_p %f drew %d", ps[pi], id);
        }
        p.top_k = 50; /* combined */
        float thr2 = thr > sorted[49] ? thr : sorted[49];
        for (int i = 0; i < 100; i++) {
            int32_t id = draw(s, logits, &t);
            ck_assert(logits[id] >= thr2 - 1e-6f || logits[id] >= sorted[49]);
        }
    }
    /* greedy logprobs over the full vocabulary */
    wf_sampling_params p = params_default();
    p.temperature = 0;
    p.logprobs = true;
    p.top_logprobs = 5;
    wf_task_sample t = sample_of(&p, 0);
    ck_assert_int_eq(draw(s, logits, &t), 777);
    ck_assert_int_eq(t.out.n_top, 5);
    ck_assert_int_eq(t.out.top[0].token, 777);
    ck_assert_int_eq(t.out.top[1].token, 778);
    ck_assert_double_eq_tol(t.out.top[2].logprob - t.out.top[0].logprob, sorted[2] - 20, 1e-4);
    wf_sampler_free(s);
    free(logits);
    free(sorted);
}
END_TEST

/* Ties are broken by id everywhere (cand order), so truncation of a flat distribution keeps the
 * lowest ids: heap top-k, quickselect top-k, and the bucketed top-p's crossing bucket. */
START_TEST(test_truncation_ties) {
    enum { NV = 1000 };
    float logits[NV];
    for (int i = 0; i < NV; i++) logits[i] = 1.5f;
    wf_sampler *s = wf_sampler_new(NV);
    static const int ks[] = {3, 600};
    for (int ki = 0; ki < 2; ki++) {
        wf_sampling_params p = params_default();
        p.top_k = ks[ki];
        wf_task_sample t = sample_of(&p, 77);
        int seen_last = 0;
        for (int i = 0; i < 3000; i++) {
            int32_t id = draw(s, logits, &t);
            ck_assert_int_lt(id, ks[ki]);
            seen_last += id == ks[ki] - 1;
        }
        ck_assert_int_gt(seen_last, 0);
    }
    wf_sampling_params p = params_default();
    p.top_p = 0.5f; /* 500 of 1000 equal weights reach exactly half */
    wf_task_sample t = sample_of(&p, 78);
    int hist[NV] = {0};
    for (int i = 0; i < 5000; i++) hist[draw(s, logits, &t)]++;
    for (int i = 500; i < NV; i++) ck_assert_int_eq(hist[i], 0);
    ck_assert(hist[0] > 0 && hist[499] > 0);
    /* and combined with min-p (applied after top-p): min_p 1 keeps all equal maxima */
    p.min_p = 1;
    for (int i = 0; i < 1000; i++) ck_assert_int_lt(draw(s, logits, &t), 500);
    wf_sampler_free(s);
}
END_TEST

/* Exactness of truncation: with a very high temperature the draw is ~uniform over the kept
 * set, so after enough draws the set of drawn tokens must equal the brute-force kept set
 * (sort, top-k prefix, top-p shortest prefix over the top-k set's softmax, min-p threshold). */
typedef struct ranked {
    float logit;
    int32_t id;
} ranked;

static int ranked_cmp(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : 1;
}

START_TEST(test_truncation_exact_sets) {
    enum { NV = 8192 };
    static float logits[NV];
    static ranked r[NV];
    static bool kept[NV], drawn[NV];
    uint64_t x = 2024;
    for (int i = 0; i < NV; i++) { /* Zipf(1.5) over a random permutation of ranks */
        int j = (int)(lcg(&x) % (uint64_t)(i + 1));
        r[i] = r[j];
        r[j].id = i;
    }
    for (int rank = 0; rank < NV; rank++) logits[r[rank].id] = -1.5f * logf((float)(rank + 1));
    for (int i = 0; i < NV; i++) r[i] = (ranked){logits[i], i};
    qsort(r, NV, sizeof *r, ranked_cmp);
    static const struct { int k; float p, min_p; } cases[] = {
        {0, 0.9f, 0}, {0, 0.95f, 0.001f}, {40, 0.9f, 0}, {1000, 0.95f, 0}, {600, 1, 0.005f},
        {100, 1, 0}, {0, 1, 0.002f}, {3, 0.5f, 0},
    };
    wf_sampler *s = wf_sampler_new(NV);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int m = cases[ci].k > 0 && cases[ci].k < NV ? cases[ci].k : NV;
        if (cases[ci].p < 1) {
            double z = 0, cum = 0;
            for (int i = 0; i < m; i++) z += exp((double)r[i].logit - r[0].logit);
            int keep = m;
            for (int i = 0; i < m; i++) {
                cum += exp((double)r[i].logit - r[0].logit);
                if (cum >= cases[ci].p * z) {
                    keep = i + 1;
                    break;
                }
            }
            m = keep;
        }
        int n_kept = 0;
        memset(kept, 0, sizeof kept);
        memset(drawn, 0, sizeof drawn);
        for (int i = 0; i < m; i++)
            if (cases[ci].min_p == 0 || r[i].logit >= r[0].logit + logf(cases[ci].min_p)) {
                kept[r[i].id] = true;
                n_kept++;
            }
        ck_assert_int_le(n_kept, 700);
        wf_sampling_params p = params_default();
        p.temperature = 1000;
        p.top_k = cases[ci].k;
        p.top_p = cases[ci].p;
        p.min_p = cases[ci].min_p;
        wf_task_sample t = sample_of(&p, 500 + ci);
        for (int i = 0; i < 25 * n_kept + 50; i++) {
            int32_t id = draw(s, logits, &t);
            ck_assert_msg(kept[id], "case %zu: drew %d outside the kept set", ci, id);
            drawn[id] = true;
        }
        for (int i = 0; i < NV; i++)
            ck_assert_msg(!kept[i] || drawn[i], "case %zu (%d kept): token %d never drawn", ci,
                          n_kept, i);
    }
    wf_sampler_free(s);
}
END_TEST

/* The 8-lane AVX2 softmax kernel against libm (the 4-lane one is covered by every test run with
 * WEFT_CPU_ISA=scalar, below). */
START_TEST(test_exp_kernel_avx2) {
    if (!wf_cpu_features_get()->avx2) return;
    enum { N = 20011 }; /* not a multiple of 8 or 256: exercises the tails */
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = -95.0f * (float)i / N;
    x[17] = -INFINITY;
    double sum = wf_sampler_exp_sum_avx2(x, y, N, 0.0f, 1.0f), want = 0;
    for (int i = 0; i < N; i++) {
        double e = i == 17 ? 0 : exp((double)x[i]);
        want += e;
        if (x[i] > -87.0f)
            ck_assert_msg(fabs(y[i] - e) <= 1e-6 * e, "exp(%g) = %g, want %g", x[i], y[i], e);
        else if (x[i] < -87.5f || i == 17)
            ck_assert_msg(y[i] == 0, "exp(%g) = %g, want 0", x[i], y[i]);
    }
    ck_assert_double_eq_tol(sum, want, 1e-6 * want);
    /* sub and scale: exp((x - 2) * 0.5) of x <= 2 */
    float a[3] = {2, 0, -2}, b[3];
    sum = wf_sampler_exp_sum_avx2(a, b, 3, 2.0f, 0.5f);
    ck_assert_double_eq_tol(b[0], 1, 1e-6);
    ck_assert_double_eq_tol(b[1], exp(-1.0), 1e-6);
    ck_assert_double_eq_tol(b[2], exp(-2.0), 1e-6);
    ck_assert_double_eq_tol(sum, 1 + exp(-1.0) + exp(-2.0), 1e-6);
}
END_TEST

/* The portable 4-lane path (WEFT_CPU_ISA=scalar, read on first use in this forked test) gives
 * the same distributions. */
START_TEST(test_scalar_isa_path) {
    setenv("WEFT_CPU_ISA", "scalar", 1);
    ck_assert_int_eq(wf_cpu_features_get()->isa, WF_CPU_ISA_SCALAR);
    static const double p4[4] = {0.1, 0.2, 0.3, 0.4};
    float logits[4];
    for (int i = 0; i < 4; i++) logits[i] = (float)log(p4[i]);
    wf_sampler *s = wf_sampler_new(4);
    wf_sampling_params p = params_default();
    int counts[4];
    histogram(s, logits, &p, 20000, counts, 4);
    expect_freqs(counts, p4, 4, 20000, 0.02);
    p.top_p = 0.65f;
    histogram(s, logits, &p, 20000, counts, 4);
    expect_freqs(counts, (const double[]){0, 0, 3.0 / 7, 4.0 / 7}, 4, 20000, 0.02);
    p = params_default();
    p.logprobs = true;
    p.top_logprobs = 4;
    wf_task_sample t = sample_of(&p, 3);
    draw(s, logits, &t);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq_tol(t.out.top[i].logprob, log(p4[3 - i]), 1e-5);
    wf_sampler_free(s);
}
END_TEST

START_TEST(test_errors) {
    float logits[4] = {0, 1, 2, 3};
    wf_sampler *s = wf_sampler_new(4);
    ck_assert_ptr_null(wf_sampler_new(0));
    ck_assert_int_eq(wf_sampler_n_vocab(s), 4);
    wf_sampling_params p = params_default();
    wf_task_sample t = sample_of(&p, 0);
    ck_assert_int_eq(wf_sampler_sample(NULL, logits, NULL, &t), WF_EINVAL);
    ck_assert_int_eq(wf_sampler_sample(s, NULL, NULL, &t), WF_EINVAL);
    p.top_k = -1;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, &t), WF_EINVAL);
    p = params_default();
    p.top_p = 0;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, &t), WF_EINVAL);
    p = params_default();
    p.temperature = NAN;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, &t), WF_EINVAL);
    p = params_default();
    p.repetition_penalty = 0;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, &t), WF_EINVAL);
    p = params_default();
    p.top_logprobs = WF_MAX_TOP_LOGPROBS + 1;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, &t), WF_EINVAL);
    p = params_default();
    int32_t hist[] = {1, 9};
    t.history = hist;
    t.n_history = 2;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, &t), WF_EINVAL); /* id 9 >= vocab */
    t.n_history = 1;
    t.n_prompt = 2;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, &t), WF_EINVAL); /* prompt > history */
    t.n_prompt = 0;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, &t), WF_OK);
    float nan_logits[4] = {0, NAN, 1, 2};
    ck_assert_int_eq(wf_sampler_sample(s, nan_logits, NULL, &t), WF_ERANGE);
    float dead[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    ck_assert_int_eq(wf_sampler_sample(s, dead, NULL, &t), WF_ERANGE);
    wf_sampler_free(s);
    wf_sampler_free(NULL);
}
END_TEST

static const char *model_path(void) {
    const char *p = getenv("WEFT_MODEL");
    return p && *p ? p : WEFT_TEST_MODEL;
}

/* EOG suppression with the real vocabulary (SmolLM2: <|endoftext|> 0 and <|im_end|> 2). */
START_TEST(test_suppress_eos) {
    wf_gguf *g;
    char err[512];
    ck_assert_msg(wf_gguf_open(model_path(), &g, err, sizeof err) == WF_OK, "%s", err);
    wf_tokenizer *tok;
    ck_assert_msg(wf_tokenizer_from_gguf(g, &tok, err, sizeof err) == WF_OK, "%s", err);
    int nv = wf_tokenizer_n_vocab(tok);
    ck_assert_int_eq(nv, 49152);
    wf_sampler *s = wf_sampler_new(nv);
    float *logits = calloc((size_t)nv, sizeof *logits);
    int32_t eos = wf_tokenizer_eos(tok);
    ck_assert(wf_tokenizer_is_eog(tok, eos));
    logits[eos] = 30;
    logits[0] = 29;
    logits[500] = 5;
    wf_sampling_params p = params_default();
    p.temperature = 0;
    wf_task_sample t = sample_of(&p, 1);
    ck_assert_int_eq(wf_sampler_sample(s, logits, tok, &t), WF_OK);
    ck_assert_int_eq(t.out.token, eos);
    ck_assert(t.out_is_eog);
    t.suppress_eos = true;
    ck_assert_int_eq(wf_sampler_sample(s, logits, tok, &t), WF_OK);
    ck_assert(!wf_tokenizer_is_eog(tok, t.out.token));
    ck_assert_int_eq(t.out.token, 500);
    ck_assert(!t.out_is_eog);
    /* sampled: never an EOG token even when they hold almost all the mass */
    p = params_default();
    p.logprobs = true;
    p.top_logprobs = 3;
    t = sample_of(&p, 9);
    t.suppress_eos = true;
    for (int i = 0; i < 300; i++) {
        ck_assert_int_eq(wf_sampler_sample(s, logits, tok, &t), WF_OK);
        ck_assert(!wf_tokenizer_is_eog(tok, t.out.token) && !t.out_is_eog);
        for (int k = 0; k < t.out.n_top; k++)
            ck_assert(!wf_tokenizer_is_eog(tok, t.out.top[k].token));
    }
    /* tok == NULL: no EOG tokens */
    p.temperature = 0;
    t = sample_of(&p, 1);
    t.suppress_eos = true;
    ck_assert_int_eq(wf_sampler_sample(s, logits, NULL, &t), WF_OK);
    ck_assert_int_eq(t.out.token, eos);
    ck_assert(!t.out_is_eog);
    free(logits);
    wf_sampler_free(s);
    wf_tokenizer_free(tok);
    wf_gguf_close(g);
}
END_TEST

static Suite *sampler_suite(void) {
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_seed_streams);
    tcase_add_test(tc, test_greedy);
    tcase_add_test(tc, test_distribution);
    tcase_add_test(tc, test_logit_bias);
    tcase_add_test(tc, test_penalties);
    tcase_add_test(tc, test_logprobs);
    tcase_add_test(tc, test_large_vocab_truncation);
    tcase_add_test(tc, test_truncation_ties);
    tcase_add_test(tc, test_truncation_exact_sets);
    tcase_add_test(tc, test_exp_kernel_avx2);
    tcase_add_test(tc, test_scalar_isa_path);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_suppress_eos);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(sampler_suite)
