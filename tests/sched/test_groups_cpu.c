/* Tests the scheduler over two in-process CPU executors (two engine replicas of a tiny model,
 * each with its own KV store and executor thread): greedy outputs equal llama.cpp's golden
 * tokens and a one-group run, and both groups did work.
 * weft-test: labels=slow timeout=300 */
#include "check_main.h"
#include "engine/engine.h"
#include "sched/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXP = 8, MAXLEN = 64, NGEN = 32, REPS = 3 };

typedef struct golden {
    int n;
    int32_t prompt[MAXP][MAXLEN], gen[MAXP][MAXLEN];
    int n_prompt[MAXP], n_gen[MAXP];
} golden;

static int parse_line(const char *line, int32_t *out) {
    int n = 0;
    char *end;
    for (long v = strtol(line, &end, 10); end != line && n < MAXLEN; v = strtol(line, &end, 10)) {
        out[n++] = (int32_t)v;
        line = end;
    }
    return n;
}

static void load_golden(const char *path, golden *g) {
    memset(g, 0, sizeof *g);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char line[2048];
    while (fgets(line, sizeof line, f) && g->n < MAXP) {
        if (line[0] == 'I') g->n_prompt[g->n] = parse_line(line + 1, g->prompt[g->n]);
        else if (line[0] == 'G') {
            g->n_gen[g->n] = parse_line(line + 1, g->gen[g->n]);
            g->n++;
        }
    }
    fclose(f);
    ck_assert_int_ge(g->n, 1);
}

typedef struct replica {
    wf_engine *engine;
    wf_kv_store kv;
} replica;

static void replica_open(replica *r, const char *model) {
    wf_engine_options o;
    wf_engine_options_init(&o);
    o.model_path = model;
    o.n_threads = 1;
    o.max_batch_tokens = 128;
    o.max_seqs = 16;
    char err[256];
    ck_assert_msg(wf_engine_open(&o, &r->engine, err, sizeof err) == WF_OK, "%s", err);
    wf_kv_geometry g = wf_engine_kv_geometry(r->engine, 16);
    ck_assert_int_eq(wf_kv_store_init(&r->kv, &g, 8u << 20), WF_OK);
}

static void replica_close(replica *r) {
    wf_engine_free(r->engine);
    wf_kv_store_free(&r->kv);
}

/* Runs every golden prompt REPS times through a scheduler over n_groups replicas; out[i][..]
 * receives request i's tokens (request i = prompt i % g->n). */
static void run(const char *model, const golden *g, int n_groups, int32_t out[][NGEN],
                int *got, wf_sched_stats *stats) {
    replica rep[2];
    for (int i = 0; i < n_groups; i++) replica_open(&rep[i], model);
    wf_sched_options o;
    wf_sched_options_init(&o);
    o.cost_given = true;
    o.cost[0] = 1;
    o.max_batch_tokens = 128;
    o.max_running = 16;
    o.n_ctx = 256;
    wf_sched *s;
    ck_assert_int_eq(wf_sched_new(&o, &rep[0].kv, wf_engine_executor(rep[0].engine, &rep[0].kv),
                                  &s),
                     WF_OK);
    for (int i = 1; i < n_groups; i++)
        ck_assert_int_eq(wf_sched_add_group(s, &rep[i].kv,
                                            wf_engine_executor(rep[i].engine, &rep[i].kv), i, NULL),
                         WF_OK);
    ck_assert_int_eq(wf_sched_start(s), WF_OK);
    wf_handoff events;
    ck_assert_int_eq(wf_handoff_init(&events, 0, NULL, NULL), WF_OK);
    int n_req = g->n * REPS;
    wf_request *reqs[MAXP * REPS];
    int finished = 0;
    for (int i = 0; i < n_req; i++) {
        int k = i % g->n;
        wf_request_spec spec;
        wf_request_spec_init(&spec);
        spec.prompt = g->prompt[k];
        spec.n_prompt = g->n_prompt[k];
        spec.max_tokens = NGEN;
        spec.sampling.temperature = 0;
        snprintf(spec.id, sizeof spec.id, "cpu-%d", i);
        wf_sched_reject why;
        ck_assert_int_eq(wf_sched_submit(s, &spec, &events, (void *)(intptr_t)i, &reqs[i], &why),
                         WF_OK);
    }
    for (int spins = 0; spins < 20000 && finished < n_req; spins++) {
        wf_handoff_wait(&events, 10);
        for (wf_handoff_item *it = wf_handoff_take_all(&events), *next; it; it = next) {
            next = it->next;
            wf_request_event *ev = (wf_request_event *)it;
            int i = (int)(intptr_t)ev->user;
            if (ev->kind == WF_EVENT_TOKEN) {
                ck_assert_int_lt(got[i], NGEN);
                out[i][got[i]++] = ev->token.token;
            } else {
                /* length, or stop at the model's end-of-generation token */
                ck_assert(ev->finish == WF_FINISH_LENGTH || ev->finish == WF_FINISH_STOP);
                ck_assert_int_eq(ev->usage.completion_tokens, got[i]);
                finished++;
            }
            wf_request_event_free(s, ev);
        }
    }
    ck_assert_int_eq(finished, n_req);
    for (int i = 0; i < n_req; i++) wf_sched_release(s, reqs[i]);
    wf_sched_drain(s, 1000);
    wf_sched_get_stats(s, stats);
    wf_sched_free(s);
    wf_handoff_free(&events);
    for (int i = 0; i < n_groups; i++) replica_close(&rep[i]);
}

START_TEST(two_cpu_groups_match_golden_and_one_group) {
    char model[512], path[512];
    snprintf(model, sizeof model, "%s/tests/engine/data/tiny/llama-f16.gguf", WEFT_SOURCE_DIR);
    snprintf(path, sizeof path, "%s/tests/engine/data/tiny/llama-f16.txt", WEFT_SOURCE_DIR);
    static golden g;
    load_golden(path, &g);
    static int32_t one[MAXP * REPS][NGEN], two[MAXP * REPS][NGEN];
    int n_one[MAXP * REPS] = {0}, n_two[MAXP * REPS] = {0};
    wf_sched_stats st1, st2;
    run(model, &g, 1, one, n_one, &st1);
    run(model, &g, 2, two, n_two, &st2);
    int full = 0;
    for (int i = 0; i < g.n * REPS; i++) {
        int k = i % g.n;
        /* The golden continuation (llama.cpp greedy, EOS not special-cased) up to where the
         * scheduler stopped at the end-of-generation token; two groups give the same. */
        ck_assert_int_ge(n_one[i], 1);
        ck_assert_int_le(n_one[i], g.n_gen[k]);
        ck_assert_int_eq(n_two[i], n_one[i]);
        ck_assert_mem_eq(one[i], g.gen[k], (size_t)n_one[i] * sizeof(int32_t));
        ck_assert_mem_eq(two[i], one[i], (size_t)n_one[i] * sizeof(int32_t));
        full += n_one[i] == NGEN;
    }
    ck_assert_int_ge(full, 1); /* not all stopped early */
    ck_assert_int_eq(st2.n_groups, 2);
    ck_assert_uint_gt(st2.groups[0].iterations, 0);
    ck_assert_uint_gt(st2.groups[1].iterations, 0);
    ck_assert_str_eq(st2.groups[1].executor, "cpu");
    ck_assert_int_eq(st2.kv_blocks_used, 0);
    ck_assert_uint_eq(st2.finished_total, (uint64_t)g.n * REPS);
}
END_TEST

static Suite *groups_cpu_suite(void) {
    Suite *s = suite_create("groups_cpu");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, two_cpu_groups_match_golden_and_one_group);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(groups_cpu_suite)
