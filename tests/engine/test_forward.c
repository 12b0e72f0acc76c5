/* Forward pass: token-exact parity with llama.cpp (golden fixtures from
 * scripts/make_golden_fixtures.py and scripts/make_tiny_models.py) and batch invariance
 * (a sequence gives the same greedy tokens alone and inside a mixed batch).
 * weft-test: labels=slow timeout=900 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/attention.h"
#include "engine/cpu/quant.h"
#include "engine/engine.h"
#include "kv/kv_store.h"
#include "kv/paged.h"

#define MAX_IDS 4096

typedef struct golden_case {
    int32_t prompt[MAX_IDS];
    int n_prompt;
    int32_t gen[MAX_IDS];
    int n_gen;
} golden_case;

static const char *model_path(void) {
    const char *m = getenv("WEFT_MODEL");
    return m && *m ? m : WEFT_TEST_MODEL;
}

static int parse_ids(const char *s, int32_t *out, int cap) {
    int n = 0;
    char *end;
    for (;;) {
        long v = strtol(s, &end, 10);
        if (end == s) break;
        if (n < cap) out[n] = (int32_t)v;
        n++;
        s = end;
    }
    return n;
}

/* Reads "I ..." / "G ..." line pairs. Returns the number of cases (<= cap). */
static int read_golden(const char *path, golden_case *cases, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    static char line[1 << 16];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == 'I' && line[1] == ' ' && n < cap) {
            cases[n].n_prompt = parse_ids(line + 2, cases[n].prompt, MAX_IDS);
        } else if (line[0] == 'G' && line[1] == ' ' && n < cap) {
            cases[n].n_gen = parse_ids(line + 2, cases[n].gen, MAX_IDS);
            n++;
        }
    }
    fclose(f);
    return n;
}

typedef struct rig {
    wf_engine *e;
    wf_kv_store kv;
    float *logits;
    int n_vocab;
} rig;

static void rig_open(rig *r, const char *path, int max_tokens, int max_seqs, int blocks) {
    wf_engine_options o;
    wf_engine_options_init(&o);
    o.model_path = path;
    o.n_threads = 2;
    o.max_batch_tokens = max_tokens;
    o.max_seqs = max_seqs;
    char err[256];
    wf_status st = wf_engine_open(&o, &r->e, err, sizeof err);
    ck_assert_msg(st == WF_OK, "open %s: %s", path, err);
    wf_kv_geometry g = wf_engine_kv_geometry(r->e, 16);
    ck_assert_int_eq(wf_kv_store_init(&r->kv, &g, wf_kv_geometry_block_bytes(&g) * (size_t)blocks),
                     WF_OK);
    r->n_vocab = wf_engine_info(r->e)->n_vocab;
    r->logits = malloc(sizeof(float) * (size_t)r->n_vocab * (size_t)max_seqs);
    ck_assert_ptr_nonnull(r->logits);
}

static void rig_close(rig *r) {
    free(r->logits);
    wf_kv_store_free(&r->kv);
    wf_engine_free(r->e);
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* Greedy generation of one sequence on blocks [first_block, ...), prompt fed in chunks. */
static void greedy(rig *r, const int32_t *prompt, int n_prompt, int n_gen, int chunk,
                   int first_block, int32_t *out) {
    int32_t bt[512];
    int nb = (n_prompt + n_gen + 15) / 16 + 1;
    ck_assert_int_le(nb, 512);
    for (int i = 0; i < nb; i++) bt[i] = first_block + i;
    int pos = 0;
    while (pos < n_prompt) {
        int n = n_prompt - pos < chunk ? n_prompt - pos : chunk;
        wf_task t = {.kind = WF_TASK_PREFILL, .llm.tokens = prompt + pos, .llm.n_tokens = n,
                     .llm.pos = pos, .llm.kv.block_table = bt, .llm.kv.n_blocks = nb};
        ck_assert_int_eq(wf_engine_forward_logits(r->e, &r->kv, &t, 1, r->logits), WF_OK);
        pos += n;
    }
    for (int i = 0; i < n_gen; i++) {
        out[i] = argmax(r->logits, r->n_vocab);
        if (i + 1 == n_gen) break;
        wf_task t = {.kind = WF_TASK_DECODE, .llm.tokens = &out[i], .llm.n_tokens = 1,
                     .llm.pos = n_prompt + i, .llm.kv.block_table = bt, .llm.kv.n_blocks = nb};
        ck_assert_int_eq(wf_engine_forward_logits(r->e, &r->kv, &t, 1, r->logits), WF_OK);
    }
}

static golden_case g_cases[32];

/* Sanitizer builds run every code path on a subset of the cases (they are ~10x slower). */
static int case_budget(int n) {
    const char *san = getenv("WEFT_SANITIZE");
    return san && *san && n > 3 ? 3 : n;
}

static void check_golden_file(const char *model, const char *golden, int chunk, int max_cases) {
    int n = read_golden(golden, g_cases, 32);
    if (n > max_cases) n = max_cases;
    if (n > 0) n = case_budget(n);
    ck_assert_msg(n > 0, "cannot read %s", golden);
    rig r;
    rig_open(&r, model, 512, 4, 256);
    int32_t out[MAX_IDS];
    int failed = 0;
    for (int c = 0; c < n; c++) {
        golden_case *gc = &g_cases[c];
        greedy(&r, gc->prompt, gc->n_prompt, gc->n_gen, chunk, 0, out);
        int first_diff = -1;
        for (int i = 0; i < gc->n_gen; i++)
            if (out[i] != gc->gen[i]) {
                first_diff = i;
                break;
            }
        if (first_diff >= 0) {
            failed++;
            fprintf(stderr, "%s case %d: first difference at token %d (weft %d, llama.cpp %d)\n",
                    golden, c, first_diff, out[first_diff], gc->gen[first_diff]);
        }
    }
    rig_close(&r);
    ck_assert_msg(failed == 0, "%d of %d golden cases differ from llama.cpp (%s)", failed, n,
                  golden);
}

START_TEST(test_golden_default_model) {
    char path[1024];
    const char *m = model_path();
    const char *base = strrchr(m, '/');
    base = base ? base + 1 : m;
    char stem[256];
    snprintf(stem, sizeof stem, "%s", base);
    char *dot = strrchr(stem, '.');
    if (dot) *dot = 0;
    snprintf(path, sizeof path, "%s/tests/engine/data/golden/%s.txt", WEFT_SOURCE_DIR, stem);
    /* whole prompt in one chunk; weft's numerics do not depend on the chunking */
    check_golden_file(m, path, 512, 32);
}
END_TEST

START_TEST(test_golden_chunked_prefill) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/engine/data/golden/SmolLM2-135M-Instruct.Q4_1.txt",
             WEFT_SOURCE_DIR);
    if (strstr(model_path(), "SmolLM2-135M-Instruct.Q4_1") == NULL) return;
    check_golden_file(model_path(), path, 7, 6); /* a subset keeps CI fast */
}
END_TEST

/* Gemma 3 270M (Q4_K_M: Q5_0, Q8_0, Q4_K, Q6_K weights; sliding-window layers): 20 prompts x
 * 64 tokens from scripts/make_golden_fixtures.py --model <gemma>. */
START_TEST(test_golden_gemma3) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/engine/data/golden/gemma-3-270m-q4_k_m.txt",
             WEFT_SOURCE_DIR);
    check_golden_file(WEFT_TEST_GEMMA_MODEL, path, 512, 32);
}
END_TEST

/* A 520-token prompt and 64 generated tokens: past Gemma's 512-position window, so the local
 * layers mask the oldest positions (scripts/make_golden_fixtures.py --long). Prefilled in
 * one chunk and in chunks of 100. */
START_TEST(test_golden_gemma3_past_window) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/engine/data/golden/gemma-3-270m-q4_k_m.long.txt",
             WEFT_SOURCE_DIR);
    check_golden_file(WEFT_TEST_GEMMA_MODEL, path, 512, 1);
    check_golden_file(WEFT_TEST_GEMMA_MODEL, path, 100, 1);
}
END_TEST

/* Tiny random-weight models, one per weight type, plus qwen2, qwen3 and YaRN-scaled llama and
 * qwen2 (scripts/make_tiny_models.py). */
START_TEST(test_golden_tiny_models) {
    static const char *names[] = {"llama-q4_0", "llama-q5_0", "llama-q5_1", "llama-q8_0",
                                  "llama-f16", "llama-bf16", "llama-q4_k", "llama-q6_k",
                                  "qwen2-q8_0", "qwen3-q8_0", "llama-yarn-q8_0",
                                  "qwen2-yarn-q4_k"};
    const char *name = names[_i];
    char model[1024], golden[1024];
    snprintf(model, sizeof model, "%s/tests/engine/data/tiny/%s.gguf", WEFT_SOURCE_DIR, name);
    snprintf(golden, sizeof golden, "%s/tests/engine/data/tiny/%s.txt", WEFT_SOURCE_DIR, name);
    check_golden_file(model, golden, 512, 32);
    check_golden_file(model, golden, 3, 32);
}
END_TEST

/* Batch invariance: sequence A decoded alone, then again while 7 other sequences (prefill
 * chunks of different lengths and single-token decodes) share every forward pass. */
START_TEST(test_batch_invariance) {
    enum { NS = 8, NGEN = 24, PLEN = 48 };
    rig r;
    rig_open(&r, model_path(), 512, NS, 512);
    int32_t prompts[NS][PLEN];
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < PLEN; i++) prompts[s][i] = (int32_t)(100 + (s * 977 + i * 131) % 20000);
    int32_t alone[NGEN];
    greedy(&r, prompts[0], PLEN, NGEN, 512, 0, alone);

    /* batched: every sequence on its own 16 blocks; sequence s prefills in chunks of
     * (s + 3) tokens, so at each step some sequences prefill and others decode */
    int32_t bt[NS][16];
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < 16; i++) bt[s][i] = 100 + s * 16 + i;
    int pos[NS] = {0}, ngen[NS] = {0};
    int32_t gen[NS][NGEN + 1];
    float *lg = malloc(sizeof(float) * (size_t)r.n_vocab * NS);
    ck_assert_ptr_nonnull(lg);
    for (int step = 0; step < 200; step++) {
        wf_task tasks[NS];
        int map[NS], nt = 0;
        for (int s = 0; s < NS; s++) {
            if (ngen[s] >= NGEN) continue;
            wf_task *t = &tasks[nt];
            memset(t, 0, sizeof *t);
            t->llm.kv.block_table = bt[s];
            t->llm.kv.n_blocks = 16;
            if (pos[s] < PLEN) {
                int chunk = s == 0 ? 5 : s + 3;
                int n = PLEN - pos[s] < chunk ? PLEN - pos[s] : chunk;
                t->kind = WF_TASK_PREFILL;
                t->llm.tokens = prompts[s] + pos[s];
                t->llm.n_tokens = n;
                t->llm.pos = pos[s];
            } else {
                t->kind = WF_TASK_DECODE;
                t->llm.tokens = &gen[s][ngen[s] - 1];
                t->llm.n_tokens = 1;
                t->llm.pos = pos[s];
            }
            map[nt++] = s;
        }
        if (nt == 0) break;
        ck_assert_int_eq(wf_engine_forward_logits(r.e, &r.kv, tasks, nt, lg), WF_OK);
        for (int i = 0; i < nt; i++) {
            int s = map[i];
            pos[s] += tasks[i].llm.n_tokens;
            if (pos[s] >= PLEN) gen[s][ngen[s]++] = argmax(lg + (size_t)i * r.n_vocab, r.n_vocab);
        }
    }
    free(lg);
    for (int i = 0; i < NGEN; i++)
        ck_assert_msg(gen[0][i] == alone[i], "token %d: batched %d, alone %d", i, gen[0][i],
                      alone[i]);
    /* and every other sequence matches its own solo run */
    for (int s = 1; s < NS; s += 3) {
        int32_t solo[NGEN];
        greedy(&r, prompts[s], PLEN, NGEN, 512, 300, solo);
        for (int i = 0; i < NGEN; i++)
            ck_assert_msg(gen[s][i] == solo[i], "seq %d token %d: batched %d, alone %d", s, i,
                          gen[s][i], solo[i]);
    }
    rig_close(&r);
}
END_TEST

/* The AVX-512 and AVX2 attention paths and the portable code give identical bits, and so does
 * the grouped call (several query heads over one kv head) for every head, at lengths that leave
 * partial 16-lane chunks and wrap the 64 accumulator slots several times, head sizes with and
 * without an f16dot tail (and Gemma 3's 256), and group sizes below, at and above WF_ATTN_MAX_HEADS. */
START_TEST(test_attention_paths_agree) {
    enum { HDMAX = 256, NPOS = 300, GMAX = 5 };
    static uint16_t k[NPOS][HDMAX], v[NPOS][HDMAX];
    const uint16_t *kr[NPOS], *vr[NPOS];
    uint32_t seed = 12345;
    for (int p = 0; p < NPOS; p++) {
        for (int d = 0; d < HDMAX; d++) {
            seed = seed * 1664525u + 1013904223u;
            k[p][d] = wf_fp32_to_fp16(((float)(seed >> 8) / 16777216.0f - 0.5f) * 4.0f);
            seed = seed * 1664525u + 1013904223u;
            v[p][d] = wf_fp32_to_fp16(((float)(seed >> 8) / 16777216.0f - 0.5f) * 2.0f);
            if (seed % 97 == 0) v[p][d] = 0x8000; /* -0 */
            if (seed % 89 == 0) v[p][d] = 0;
        }
        kr[p] = k[p];
        vr[p] = v[p];
    }
    static unsigned char mem[1 << 21];
    wf_attn_scratch sc;
    wf_attn_kv_view view = {kr, vr, 0};
    const int hds[] = {64, 96, 128, 40, 256}; /* 256: Gemma 3 */
    const int lens[] = {1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200, 300};
    const int groups[] = {1, 2, 3, 4, GMAX};
    int simd = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        const int HD = hds[hi];
        ck_assert_uint_le(wf_attn_scratch_bytes(NPOS, HD), sizeof mem);
        wf_attn_scratch_init(&sc, mem, NPOS, HD);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
                const int G = groups[gi];
                /* the last head gets large scores, so some probabilities round to 0 */
                float q[GMAX * HDMAX];
                for (int j = 0; j < G; j++)
                    for (int d = 0; d < HD; d++)
                        q[j * HD + d] = ((float)((d * 37 + (int)li + 5 * j) % 11) * 0.7f - 3.5f) *
                                        (j == G - 1 && G > 1 ? 6.0f : 1.0f);
                float a[GMAX * HDMAX], b[GMAX * HDMAX], c[GMAX * HDMAX];
                /* reference: the portable code, one head at a time */
                wf_attn_set_simd(0);
                for (int j = 0; j < G; j++)
                    wf_attn_one(q + j * HD, HD, 0.125f, &view, lens[li], &sc, b + j * HD);
                wf_attn_group(q, G, HD, 0.125f, &view, lens[li], &sc, a);
                ck_assert(memcmp(a, b, sizeof(float) * (size_t)(G * HD)) == 0);
                /* the AVX-512 path (if the CPU has it) and the AVX2 path, grouped and alone */
                for (int level = 2; level >= 1; level--) {
                    simd = wf_attn_set_simd(level);
                    wf_attn_group(q, G, HD, 0.125f, &view, lens[li], &sc, a);
                    for (int j = 0; j < G; j++)
                        wf_attn_one(q + j * HD, HD, 0.125f, &view, lens[li], &sc, c + j * HD);
                    for (int i = 0; i < G * HD; i++) {
                        ck_assert_msg(memcmp(&a[i], &b[i], 4) == 0,
                                      "hd %d len %d G %d head %d d %d: %a vs %a (simd %d)", HD,
                                      lens[li], G, i / HD, i % HD, (double)a[i], (double)b[i],
                                      simd);
                        ck_assert_msg(memcmp(&a[i], &c[i], 4) == 0,
                                      "hd %d len %d G %d head %d d %d: group %a vs one %a "
                                      "(simd %d)",
                                      HD, lens[li], G, i / HD, i % HD, (double)a[i],
                                      (double)c[i], simd);
                        ck_assert(a[i] >= -1.01f && a[i] <= 1.01f);
                    }
                }
                wf_attn_set_simd(2);
            }
        }
    }
    /* f16dot: body + double tail */
    uint16_t x[100], y[100];
    for (int i = 0; i < 100; i++) {
        x[i] = wf_fp32_to_fp16((float)i * 0.25f);
        y[i] = wf_fp32_to_fp16(1.0f);
    }
    ck_assert(wf_attn_f16dot(100, x, y) == 0.25f * 4950.0f);
}
END_TEST

START_TEST(test_expf_matches_libm) {
    for (float x = -80.0f; x < 80.0f; x += 0.37f) {
        float a = wf_attn_expf(x), b = expf(x);
        ck_assert_msg(a == b || ((a - b) / b < 4e-7f && (b - a) / b < 4e-7f), "x %g: %g vs %g",
                      (double)x, (double)a, (double)b);
    }
    ck_assert(wf_attn_expf(-INFINITY) == 0.0f);
    /* SwiGLU: the AVX2 path equals the portable one bit for bit */
    enum { N = 1000 };
    static float g1[N], g2[N], up[N];
    for (int i = 0; i < N; i++) {
        g1[i] = g2[i] = (float)(i - 500) * 0.037f;
        up[i] = 1.0f + (float)(i % 7) * 0.25f;
    }
    g1[3] = -200.0f; /* exp overflow lane */
    g2[3] = -200.0f;
    wf_attn_set_simd(1);
    wf_attn_swiglu(N, g1, up);
    wf_attn_set_simd(0);
    wf_attn_swiglu(N, g2, up);
    wf_attn_set_simd(1);
    for (int i = 0; i < N; i++) ck_assert_msg(memcmp(&g1[i], &g2[i], 4) == 0, "i %d", i);
    ck_assert(wf_attn_expf(-200.0f) == 0.0f);
}
END_TEST

/* GeGLU: the AVX2 path equals the portable one bit for bit, over an arbitrary table, across
 * the +-10 cut-offs, infinities, NaN, subnormals and a tail shorter than a vector. */
START_TEST(test_geglu_paths_agree) {
    static uint16_t tab[65536];
    for (int i = 0; i < 65536; i++) tab[i] = (uint16_t)(((unsigned)i * 40503u) >> 3 & 0x7bff);
    enum { N = 1003 };
    static float g1[N], g2[N], up[N];
    for (int i = 0; i < N; i++) {
        g1[i] = (float)(i - 500) * 0.0213f;
        up[i] = 0.5f + (float)(i % 5) * 0.75f;
    }
    const float special[] = {-10.0f, 10.0f, -10.000001f, 9.999999f, INFINITY, -INFINITY, NAN,
                             1e-7f, -3e-8f, 65520.0f, -0.0f};
    for (size_t j = 0; j < sizeof special / sizeof special[0]; j++) g1[7 * j + 1] = special[j];
    g1[N - 2] = 10.0f;
    g1[N - 1] = NAN;
    memcpy(g2, g1, sizeof g1);
    ck_assert_int_ge(wf_attn_set_simd(1), 1);
    wf_attn_geglu(tab, N, g1, up);
    wf_attn_set_simd(0);
    wf_attn_geglu(tab, N, g2, up);
    wf_attn_set_simd(2);
    for (int i = 0; i < N; i++)
        ck_assert_msg(memcmp(&g1[i], &g2[i], 4) == 0, "i %d: %g vs %g", i, (double)g1[i], (double)g2[i]);
    ck_assert(g2[1] == 0.0f); /* -10: cut off */
    ck_assert(g2[8] == 10.0f * up[8]);
}
END_TEST

/* NEOX RoPE: the AVX2 path equals the portable one bit for bit (head sizes with and without a
 * tail shorter than a vector, values that make the fused operations differ from mul + add). */
START_TEST(test_rope_neox_paths_agree) {
    static const int sizes[] = {256, 128, 64, 40, 18, 2};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int n = sizes[si];
        float cache[256], x1[256], x2[256];
        for (int i = 0; i < n; i += 2) {
            const float th = (float)i * 0.37f + 0.1f;
            cache[i] = cosf(th) * 1.0000001f;
            cache[i + 1] = sinf(th);
        }
        for (int i = 0; i < n; i++) x1[i] = (float)((i * 7919) % 211 - 105) * 0.0173f + 1e-7f * (float)i;
        x1[1] = 3.0e38f; /* large products: a separate rounding would overflow or differ */
        x1[n / 2 + 1] = -2.9e38f;
        memcpy(x2, x1, sizeof x1);
        ck_assert_int_ge(wf_attn_set_simd(1), 1);
        wf_attn_rope_neox(cache, n, x1);
        wf_attn_set_simd(0);
        wf_attn_rope_neox(cache, n, x2);
        wf_attn_set_simd(2);
        for (int i = 0; i < n; i++)
            ck_assert_msg(memcmp(&x1[i], &x2[i], 4) == 0, "n %d i %d: %a vs %a", n, i, (double)x1[i],
                          (double)x2[i]);
    }
}
END_TEST

/* ---- sliding-window KV release (Gemma 3) ---- */

/* Greedy generation through a paged pool over a store split by layer kind (kv/paged.h), as the
 * scheduler drives it: reserve, run, commit (which releases local blocks behind the window).
 * Records the most local blocks the sequence held after any commit. */
static void greedy_split(rig *r, wf_kv_pool *pool, const int32_t *prompt, int n_prompt,
                         int n_gen, int chunk, int32_t *out, int *max_held) {
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(n_prompt + n_gen));
    ck_assert_ptr_nonnull(toks);
    memcpy(toks, prompt, sizeof(int32_t) * (size_t)n_prompt);
    wf_kv_seq seq;
    ck_assert_int_eq(wf_kv_seq_init(&seq, (n_prompt + n_gen) / 16 + 2), WF_OK);
    *max_held = 0;
    int n = 0; /* tokens known */
    for (int pos = 0; pos < n_prompt + n_gen - 1;) {
        int len = pos < n_prompt ? (n_prompt - pos < chunk ? n_prompt - pos : chunk) : 1;
        ck_assert_int_eq(wf_kv_seq_reserve(pool, &seq, pos + len, &r->kv), WF_OK);
        wf_task t = {.kind = pos < n_prompt ? WF_TASK_PREFILL : WF_TASK_DECODE,
                     .llm.tokens = toks + pos, .llm.n_tokens = len, .llm.pos = pos,
                     .llm.kv.block_table = seq.blocks, .llm.kv.n_blocks = seq.n_blocks,
                     .llm.kv.swa_block_table = seq.swa_blocks};
        ck_assert_int_eq(wf_engine_forward_logits(r->e, &r->kv, &t, 1, r->logits), WF_OK);
        pos += len;
        wf_kv_seq_commit(pool, &seq, toks, pos);
        if (wf_kv_seq_swa_held(&seq) > *max_held) *max_held = wf_kv_seq_swa_held(&seq);
        if (pos >= n_prompt) {
            out[n] = argmax(r->logits, r->n_vocab);
            toks[pos] = out[n++];
        }
    }
    char err[160];
    ck_assert_msg(wf_kv_pool_check(pool, err, sizeof err), "%s", err);
    wf_kv_seq_release(pool, &seq);
    wf_kv_seq_free(&seq);
    free(toks);
}

/* A split rig: local blocks for the window plus one chunk (and a partial block each side),
 * global blocks for the whole context. */
static wf_kv_pool *rig_open_split(rig *r, int max_tokens, int ctx_blocks, int chunk) {
    rig_open(r, WEFT_TEST_GEMMA_MODEL, max_tokens, 1, 1);
    wf_kv_store_free(&r->kv);
    wf_kv_geometry g = wf_engine_kv_geometry_swa(r->e, 16);
    ck_assert_uint_ne(g.swa_layers, 0);
    int swa_blocks = (g.swa_window + chunk) / 16 + 2;
    /* the split never gives local layers more blocks than the unsplit layout would */
    if (ctx_blocks < swa_blocks) ctx_blocks = swa_blocks;
    size_t per_layer = wf_kv_geometry_block_bytes(&g) / (size_t)g.n_layers;
    int n_swa = __builtin_popcountll(g.swa_layers);
    size_t budget = per_layer * ((size_t)n_swa * (size_t)swa_blocks +
                                 (size_t)(g.n_layers - n_swa) * (size_t)ctx_blocks);
    ck_assert_int_eq(wf_kv_store_init_swa(&r->kv, &g, budget, swa_blocks), WF_OK);
    ck_assert_int_eq(r->kv.n_swa_blocks, swa_blocks);
    ck_assert_int_ge(r->kv.n_blocks, ctx_blocks);
    wf_kv_pool *pool;
    ck_assert_int_eq(wf_kv_pool_new_swa(r->kv.n_blocks, r->kv.n_swa_blocks, 16, g.swa_window,
                                        false, &pool), WF_OK);
    return pool;
}

/* The past-window golden case (520-token prompt, 64 tokens, window 512) on a split store whose
 * local pool holds only the window plus one chunk: token-identical to llama.cpp, and the local
 * blocks behind the window went back to the pool. */
START_TEST(test_gemma3_split_kv_golden) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/engine/data/golden/gemma-3-270m-q4_k_m.long.txt",
             WEFT_SOURCE_DIR);
    ck_assert_int_ge(read_golden(path, g_cases, 1), 1);
    golden_case *gc = &g_cases[0];
    rig r;
    wf_kv_pool *pool = rig_open_split(&r, 512, (gc->n_prompt + gc->n_gen) / 16 + 2, 100);
    int32_t out[MAX_IDS];
    int max_held;
    greedy_split(&r, pool, gc->prompt, gc->n_prompt, gc->n_gen, 100, out, &max_held);
    for (int i = 0; i < gc->n_gen; i++)
        ck_assert_msg(out[i] == gc->gen[i], "token %d: weft %d, llama.cpp %d", i, out[i],
                      gc->gen[i]);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(pool, &u);
    ck_assert_uint_gt(u.swa_released, 0);
    ck_assert_int_le(max_held, 512 / 16 + 1);
    wf_kv_pool_free(pool);
    rig_close(&r);
}
END_TEST

/* A sequence of about 2.3 windows (a shorter one under sanitizers): the split path gives the
 * same greedy tokens as the unsplit one, while its local layers hold at most window/16 + 1
 * blocks and the global ones the whole context. */
START_TEST(test_gemma3_split_kv_long_matches_unsplit) {
    const char *san = getenv("WEFT_SANITIZE");
    int n_prompt = san && *san ? 600 : 1150, n_gen = 16, chunk = 256;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
    ck_assert_ptr_nonnull(prompt);
    for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)(300 + (i * 7919) % 20000);
    int32_t ref[64], got[64];
    rig r;
    rig_open(&r, WEFT_TEST_GEMMA_MODEL, 256, 1, (n_prompt + n_gen) / 16 + 2);
    {
        int32_t bt[256];
        int nb = (n_prompt + n_gen) / 16 + 2;
        for (int i = 0; i < nb; i++) bt[i] = i;
        int pos = 0;
        while (pos < n_prompt) {
            int n = n_prompt - pos < chunk ? n_prompt - pos : chunk;
            wf_task t = {.kind = WF_TASK_PREFILL, .llm.tokens = prompt + pos, .llm.n_tokens = n,
                         .llm.pos = pos, .llm.kv.block_table = bt, .llm.kv.n_blocks = nb};
            ck_assert_int_eq(wf_engine_forward_logits(r.e, &r.kv, &t, 1, r.logits), WF_OK);
            pos += n;
        }
        for (int i = 0; i < n_gen; i++) {
            ref[i] = argmax(r.logits, r.n_vocab);
            if (i + 1 == n_gen) break;
            wf_task t = {.kind = WF_TASK_DECODE, .llm.tokens = &ref[i], .llm.n_tokens = 1,
                         .llm.pos = n_prompt + i, .llm.kv.block_table = bt, .llm.kv.n_blocks = nb};
            ck_assert_int_eq(wf_engine_forward_logits(r.e, &r.kv, &t, 1, r.logits), WF_OK);
        }
    }
    rig_close(&r);
    wf_kv_pool *pool = rig_open_split(&r, 256, (n_prompt + n_gen) / 16 + 2, chunk);
    int max_held;
    greedy_split(&r, pool, prompt, n_prompt, n_gen, chunk, got, &max_held);
    for (int i = 0; i < n_gen; i++)
        ck_assert_msg(got[i] == ref[i], "token %d: split %d, unsplit %d", i, got[i], ref[i]);
    wf_kv_pool_usage u;
    wf_kv_pool_get_usage(pool, &u);
    int ctx_blocks = (n_prompt + n_gen - 1 + 15) / 16;
    ck_assert_int_le(max_held, 512 / 16 + 1);
    ck_assert_uint_ge(u.swa_released, (uint64_t)(ctx_blocks - (512 / 16 + 1)));
    fprintf(stderr, "split KV: %d positions, local blocks held at most %d (of %d context "
                    "blocks), %llu released\n", n_prompt + n_gen - 1, max_held, ctx_blocks,
            (unsigned long long)u.swa_released);
    /* A task without the local table, or with a released block inside the window: refused. */
    int32_t bt[128], sbt[128];
    for (int i = 0; i < 128; i++) bt[i] = sbt[i] = 0;
    wf_task t = {.kind = WF_TASK_DECODE, .llm.tokens = &got[0], .llm.n_tokens = 1,
                 .llm.pos = 600, .llm.kv.block_table = bt, .llm.kv.n_blocks = 64};
    ck_assert_int_eq(wf_engine_forward_logits(r.e, &r.kv, &t, 1, r.logits), WF_EINVAL);
    sbt[600 / 16] = -1;
    t.llm.kv.swa_block_table = sbt;
    ck_assert_int_eq(wf_engine_forward_logits(r.e, &r.kv, &t, 1, r.logits), WF_EINVAL);
    sbt[600 / 16] = 0;
    sbt[0] = -1; /* behind the window: never read */
    ck_assert_int_eq(wf_engine_forward_logits(r.e, &r.kv, &t, 1, r.logits), WF_OK);
    wf_kv_pool_free(pool);
    rig_close(&r);
    free(prompt);
}
END_TEST

static Suite *forward_suite(void) {
    Suite *s = suite_create("engine_forward");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_expf_matches_libm);
    tcase_add_test(tc, test_geglu_paths_agree);
    tcase_add_test(tc, test_rope_neox_paths_agree);
    tcase_add_test(tc, test_attention_paths_agree);
    tcase_add_test(tc, test_golden_default_model);
    tcase_add_test(tc, test_golden_chunked_prefill);
    tcase_add_loop_test(tc, test_golden_tiny_models, 0, 12);
    tcase_add_test(tc, test_batch_invariance);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gemma3");
    tcase_set_timeout(tg, 900);
    tcase_add_test(tg, test_golden_gemma3);
    tcase_add_test(tg, test_golden_gemma3_past_window);
    tcase_add_test(tg, test_gemma3_split_kv_golden);
    tcase_add_test(tg, test_gemma3_split_kv_long_matches_unsplit);
    suite_add_tcase(s, tg);
    return s;
}

WF_CHECK_MAIN(forward_suite)
