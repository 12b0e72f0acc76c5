/* wf_engine and its executor: opening, model info, KV geometry, task batches mixing prefill
 * chunks and decodes, per-task failures, sampling outputs, timestamps, and the weft-run CLI.
 * weft-test: labels=slow timeout=600 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "kv/kv_store.h"

static const char *model_path(void) {
    const char *m = getenv("WEFT_MODEL");
    return m && *m ? m : WEFT_TEST_MODEL;
}

static wf_engine *open_engine(int max_tokens, int max_seqs) {
    wf_engine_options o;
    wf_engine_options_init(&o);
    o.model_path = model_path();
    o.n_threads = 2;
    o.max_batch_tokens = max_tokens;
    o.max_seqs = max_seqs;
    wf_engine *e = NULL;
    char err[256];
    wf_status st = wf_engine_open(&o, &e, err, sizeof err);
    ck_assert_msg(st == WF_OK, "open: %s", err);
    return e;
}

/* "The capital of France is" -> " Paris" "." (llama.cpp, tests/engine/data/golden) */
static const int32_t k_prompt[] = {504, 3575, 282, 4649, 314};
static const int32_t k_next[] = {7042, 30};

START_TEST(test_open_info) {
    wf_engine *e = open_engine(64, 4);
    const wf_model_info *i = wf_engine_info(e);
    ck_assert_str_eq(i->arch, "llama");
    ck_assert_int_eq(i->n_layers, 30);
    ck_assert_int_eq(i->n_heads, 9);
    ck_assert_int_eq(i->n_kv_heads, 3);
    ck_assert_int_eq(i->head_dim, 64);
    ck_assert_int_eq(i->n_embd, 576);
    ck_assert_int_eq(i->n_vocab, 49152);
    ck_assert_int_eq(i->n_ctx_train, 8192);
    ck_assert(i->weight_bytes > (50u << 20) && i->weight_bytes < (200u << 20));
    ck_assert_ptr_nonnull(wf_engine_tokenizer(e));
    ck_assert_ptr_nonnull(wf_engine_chat_template(e));
    ck_assert_int_eq(wf_engine_chat_format(e), WF_CHAT_CHATML);
    wf_kv_geometry g = wf_engine_kv_geometry(e, 32);
    ck_assert_int_eq(g.n_layers, 30);
    ck_assert_int_eq(g.n_kv_heads, 3);
    ck_assert_int_eq(g.head_dim, 64);
    ck_assert_int_eq(g.block_size, 32);
    ck_assert_int_eq(g.dtype, WF_KV_DTYPE_F16);
    wf_engine_free(e);
    wf_engine_free(NULL);
}
END_TEST

START_TEST(test_open_errors) {
    wf_engine_options o;
    wf_engine_options_init(&o);
    ck_assert_int_eq(o.max_batch_tokens, 512);
    ck_assert_int_eq(o.max_seqs, 64);
    wf_engine *e = (wf_engine *)1;
    char err[256] = "";
    ck_assert_int_eq(wf_engine_open(&o, &e, err, sizeof err), WF_EINVAL); /* no path */
    ck_assert_ptr_null(e);
    o.model_path = "/nonexistent/model.gguf";
    ck_assert_int_ne(wf_engine_open(&o, &e, err, sizeof err), WF_OK);
    ck_assert(strlen(err) > 0);
    o.model_path = model_path();
    o.chat_format = "klingon";
    ck_assert_int_eq(wf_engine_open(&o, &e, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "klingon"));
    o.chat_format = "llama3";
    o.max_batch_tokens = 8;
    ck_assert_int_eq(wf_engine_open(&o, &e, err, sizeof err), WF_OK);
    ck_assert_int_eq(wf_engine_chat_format(e), WF_CHAT_LLAMA3);
    wf_engine_free(e);
}
END_TEST

typedef struct exec_rig {
    wf_engine *e;
    wf_kv_store kv;
    wf_executor ex;
} exec_rig;

static void rig_open(exec_rig *r, int max_tokens, int max_seqs) {
    r->e = open_engine(max_tokens, max_seqs);
    wf_kv_geometry g = wf_engine_kv_geometry(r->e, 16);
    ck_assert_int_eq(wf_kv_store_init(&r->kv, &g, wf_kv_geometry_block_bytes(&g) * 64), WF_OK);
    r->ex = wf_engine_executor(r->e, &r->kv);
    ck_assert_ptr_nonnull(r->ex.ops);
    ck_assert_ptr_nonnull(r->ex.ops->dispatch);
}

static void rig_close(exec_rig *r) {
    wf_engine_free(r->e);
    wf_kv_store_free(&r->kv);
}

/* A batch with a final prefill (greedy sample), a non-final prefill chunk (no sample), a
 * decode of another sequence, and an invalid task: the invalid one fails alone. */
START_TEST(test_executor_mixed_batch) {
    exec_rig r;
    rig_open(&r, 64, 8);
    wf_sampling_params greedy = {.temperature = 0, .top_p = 1, .repetition_penalty = 1,
                                 .logprobs = true, .top_logprobs = 3};
    int32_t bt_a[4] = {0, 1, 2, 3}, bt_b[4] = {8, 9, 10, 11}, bt_c[4] = {20, 21, 22, 23};
    int32_t hist_a[16], hist_b[16];
    memcpy(hist_a, k_prompt, sizeof k_prompt);
    memcpy(hist_b, k_prompt, sizeof k_prompt);
    wf_task_sample sa = {.params = &greedy, .history = hist_a, .n_history = 5, .n_prompt = 5};
    /* sequence B: first 3 prompt tokens now (no sample), the rest in the next batch */
    wf_task tasks[4] = {
        {.id = 1, .kind = WF_TASK_PREFILL, .llm.tokens = k_prompt, .llm.n_tokens = 5, .llm.pos = 0,
         .llm.kv.block_table = bt_a, .llm.kv.n_blocks = 4, .llm.samples = &sa, .llm.n_samples = 1},
        {.id = 2, .kind = WF_TASK_PREFILL, .llm.tokens = k_prompt, .llm.n_tokens = 3, .llm.pos = 0,
         .llm.kv.block_table = bt_b, .llm.kv.n_blocks = 4},
        {.id = 3, .kind = WF_TASK_PREFILL, .llm.tokens = k_prompt, .llm.n_tokens = 5, .llm.pos = 0,
         .llm.kv.block_table = bt_c, .llm.kv.n_blocks = 0}, /* no blocks: must fail alone */
        {.id = 4, .kind = WF_TASK_DENOISE},
    };
    wf_task_batch batch = {.tasks = tasks, .n_tasks = 4, .group = {.n_ranks = 1}};
    ck_assert_int_eq(wf_executor_run(r.ex, &batch, NULL, 0), WF_OK);
    ck_assert_int_eq(tasks[0].status, WF_OK);
    ck_assert_int_eq(tasks[1].status, WF_OK);
    ck_assert_int_eq(tasks[2].status, WF_EINVAL);
    ck_assert_int_eq(tasks[3].status, WF_EUNSUPPORTED);
    ck_assert_int_eq(sa.out.token, k_next[0]);
    ck_assert(!sa.out_is_eog);
    ck_assert(sa.out.logprob <= 0.0f);
    ck_assert_int_eq(sa.out.n_top, 3);
    ck_assert_int_eq(sa.out.top[0].token, k_next[0]);
    for (int i = 0; i < 4; i++) {
        ck_assert(tasks[i].t_begin_ns > 0);
        ck_assert(tasks[i].t_end_ns >= tasks[i].t_begin_ns);
    }
    /* next batch: A decodes its sampled token, B finishes its prompt and samples */
    hist_a[5] = sa.out.token;
    wf_task_sample sa2 = {.params = &greedy, .history = hist_a, .n_history = 6, .n_prompt = 5};
    wf_task_sample sb = {.params = &greedy, .history = hist_b, .n_history = 5, .n_prompt = 5};
    wf_task t2[2] = {
        {.id = 5, .kind = WF_TASK_DECODE, .llm.tokens = &hist_a[5], .llm.n_tokens = 1, .llm.pos = 5,
         .llm.kv.block_table = bt_a, .llm.kv.n_blocks = 4, .llm.samples = &sa2, .llm.n_samples = 1},
        {.id = 6, .kind = WF_TASK_PREFILL, .llm.tokens = k_prompt + 3, .llm.n_tokens = 2, .llm.pos = 3,
         .llm.kv.block_table = bt_b, .llm.kv.n_blocks = 4, .llm.samples = &sb, .llm.n_samples = 1},
    };
    wf_task_batch b2 = {.tasks = t2, .n_tasks = 2, .group = {.n_ranks = 1}};
    ck_assert_int_eq(wf_executor_run(r.ex, &b2, NULL, 0), WF_OK);
    ck_assert_int_eq(t2[0].status, WF_OK);
    ck_assert_int_eq(t2[1].status, WF_OK);
    ck_assert_int_eq(sa2.out.token, k_next[1]);
    ck_assert_int_eq(sb.out.token, k_next[0]); /* chunked prompt gives the same token */
    rig_close(&r);
}
END_TEST

/* The layer hook (prefill/decode disaggregation ships layer l while l+1 computes): called once
 * per layer, in order, on the executor's thread; when layer l is reported its K/V of the batch
 * are in the store and the next layer's are not yet; cleared, it is not called. */
typedef struct hook_log {
    const wf_kv_store *kv;
    int n, order_ok, stored_ok;
} hook_log;

static bool row_written(const wf_kv_store *kv, int layer, int block) {
    const uint16_t *k = (const uint16_t *)wf_kv_store_k(kv, layer, block);
    for (size_t i = 0; i < kv->row_elems; i++)
        if (k[i]) return true;
    return false;
}

static void on_layer(void *user, int layer) {
    hook_log *h = user;
    h->order_ok += layer == h->n;
    h->stored_ok += row_written(h->kv, layer, 0) &&
                    (layer + 1 == h->kv->geometry.n_layers || !row_written(h->kv, layer + 1, 0));
    h->n++;
}

START_TEST(test_layer_hook) {
    exec_rig r;
    rig_open(&r, 64, 4);
    hook_log h = {.kv = &r.kv};
    for (int l = 0; l < r.kv.geometry.n_layers; l++) /* the store's memory is not cleared */
        memset(wf_kv_store_k(&r.kv, l, 0), 0, r.kv.block_bytes);
    wf_engine_set_layer_hook(r.e, on_layer, &h);
    int32_t bt[1] = {0};
    wf_task t = {.id = 1, .kind = WF_TASK_PREFILL, .llm.tokens = k_prompt, .llm.n_tokens = 5,
                 .llm.pos = 0, .llm.kv.block_table = bt, .llm.kv.n_blocks = 1};
    wf_task_batch b = {.tasks = &t, .n_tasks = 1, .group = {.n_ranks = 1}};
    ck_assert_int_eq(wf_executor_run(r.ex, &b, NULL, 0), WF_OK);
    ck_assert_int_eq(t.status, WF_OK);
    int L = r.kv.geometry.n_layers;
    ck_assert_int_eq(h.n, L);
    ck_assert_int_eq(h.order_ok, L);
    ck_assert_int_eq(h.stored_ok, L);
    wf_engine_set_layer_hook(r.e, NULL, NULL);
    ck_assert_int_eq(wf_executor_run(r.ex, &b, NULL, 0), WF_OK);
    ck_assert_int_eq(h.n, L);
    rig_close(&r);
}
END_TEST

/* n > 1 samples from one final prefill; seeded sampling is reproducible. */
START_TEST(test_executor_sampling) {
    exec_rig r;
    rig_open(&r, 64, 4);
    wf_sampling_params p = {.temperature = 1.0f, .top_k = 40, .top_p = 0.95f,
                            .repetition_penalty = 1, .has_seed = true, .seed = 7};
    int32_t bt[4] = {0, 1, 2, 3};
    int32_t first[2][3];
    for (int run = 0; run < 2; run++) {
        wf_task_sample s[3];
        for (int j = 0; j < 3; j++)
            s[j] = (wf_task_sample){.params = &p, .rng_state = wf_sampler_seed_state(7, j),
                                    .history = k_prompt, .n_history = 5, .n_prompt = 5};
        wf_task t = {.id = 1, .kind = WF_TASK_PREFILL, .llm.tokens = k_prompt, .llm.n_tokens = 5,
                     .llm.pos = 0, .llm.kv.block_table = bt, .llm.kv.n_blocks = 4, .llm.samples = s, .llm.n_samples = 3};
        wf_task_batch b = {.tasks = &t, .n_tasks = 1};
        ck_assert_int_eq(wf_executor_run(r.ex, &b, NULL, 0), WF_OK);
        ck_assert_int_eq(t.status, WF_OK);
        for (int j = 0; j < 3; j++) {
            ck_assert(s[j].out.token >= 0 && s[j].out.token < 49152);
            ck_assert(s[j].rng_state != wf_sampler_seed_state(7, j));
            first[run][j] = s[j].out.token;
        }
    }
    for (int j = 0; j < 3; j++) ck_assert_int_eq(first[0][j], first[1][j]);
    rig_close(&r);
}
END_TEST

START_TEST(test_executor_limits) {
    exec_rig r;
    rig_open(&r, 8, 2);
    int32_t bt[4] = {0, 1, 2, 3};
    int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    wf_task t = {.kind = WF_TASK_PREFILL, .llm.tokens = toks, .llm.n_tokens = 9, .llm.pos = 0,
                 .llm.kv.block_table = bt, .llm.kv.n_blocks = 4};
    wf_task_batch b = {.tasks = &t, .n_tasks = 1};
    ck_assert_int_eq(wf_executor_run(r.ex, &b, NULL, 0), WF_EINVAL); /* > max_batch_tokens */
    wf_task three[3] = {t, t, t};
    for (int i = 0; i < 3; i++) three[i].llm.n_tokens = 1;
    wf_task_batch b3 = {.tasks = three, .n_tasks = 3};
    ck_assert_int_eq(wf_executor_run(r.ex, &b3, NULL, 0), WF_EINVAL); /* > max_seqs */
    /* per-task failures: bad token id, position beyond the context, decode with 2 tokens */
    int32_t bad = 1 << 20;
    wf_task t4[2] = {
        {.kind = WF_TASK_PREFILL, .llm.tokens = &bad, .llm.n_tokens = 1, .llm.pos = 0, .llm.kv.block_table = bt,
         .llm.kv.n_blocks = 4},
        {.kind = WF_TASK_DECODE, .llm.tokens = toks, .llm.n_tokens = 2, .llm.pos = 0, .llm.kv.block_table = bt,
         .llm.kv.n_blocks = 4},
    };
    wf_task_batch b4 = {.tasks = t4, .n_tasks = 2};
    ck_assert_int_eq(wf_executor_run(r.ex, &b4, NULL, 0), WF_OK);
    ck_assert_int_eq(t4[0].status, WF_EINVAL);
    ck_assert_int_eq(t4[1].status, WF_EINVAL);
    wf_task far = {.kind = WF_TASK_DECODE, .llm.tokens = toks, .llm.n_tokens = 1, .llm.pos = 9000,
                   .llm.kv.block_table = bt, .llm.kv.n_blocks = 4};
    wf_task_batch b5 = {.tasks = &far, .n_tasks = 1};
    ck_assert_int_eq(wf_executor_run(r.ex, &b5, NULL, 0), WF_OK);
    ck_assert_int_eq(far.status, WF_ERANGE);
    /* a KV store of the wrong geometry is refused */
    wf_kv_geometry g = {.n_layers = 2, .n_kv_heads = 3, .head_dim = 64, .block_size = 16,
                        .dtype = WF_KV_DTYPE_F16};
    wf_kv_store other;
    ck_assert_int_eq(wf_kv_store_init(&other, &g, 1 << 20), WF_OK);
    wf_executor ex2 = wf_engine_executor(r.e, &other);
    ck_assert_int_eq(wf_executor_run(ex2, &b4, NULL, 0), WF_EINVAL);
    wf_kv_store_free(&other);
    rig_close(&r);
}
END_TEST

/* weft-run greedy output equals the golden continuation. */
START_TEST(test_weft_run_cli) {
    const char *bin = getenv("WEFT_BIN_DIR");
    if (!bin) return; /* only under ctest */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s/weft-run -m '%s' -p 'The capital of France is' -n 2 --ids --threads 2 2>/dev/null",
             bin, model_path());
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[256] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    ck_assert_int_eq(pclose(p), 0);
    char want[64];
    snprintf(want, sizeof want, "%d %d", k_next[0], k_next[1]);
    ck_assert_msg(strncmp(line, want, strlen(want)) == 0, "weft-run printed '%s'", line);
    snprintf(cmd, sizeof cmd, "%s/weft-run -m '%s' -p hi -n nope 2>/dev/null", bin, model_path());
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(WEXITSTATUS(pclose(p)), 2);
}
END_TEST

static Suite *engine_suite(void) {
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_open_info);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_executor_mixed_batch);
    tcase_add_test(tc, test_layer_hook);
    tcase_add_test(tc, test_executor_sampling);
    tcase_add_test(tc, test_executor_limits);
    tcase_add_test(tc, test_weft_run_cli);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(engine_suite)
