/* weft-bench-frames: what one scheduler iteration pays to cross a process boundary. Times
 * encode, open (envelope + CRC32C) and decode of a TASK_DISPATCH of 64 DECODE tasks (history of
 * H tokens each, KV block table, full sampling params) and of a 32-task TASK_EVENT with top-20
 * logprobs, next to a memcpy of the same bytes as the in-run peer. Median of R repeats of N
 * iterations each, in thread CPU time.
 *
 *     weft-bench-frames [--repeats R] [--iters N] [--history H ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/frame.h"
#include "proto/frame_task.h"

#define N_DECODE 64
#define N_EVENT 32

/* This thread's CPU time: on a shared machine, time spent preempted is not the codec's. */
static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static volatile uint64_t sink;

typedef enum { OP_ENCODE_DISPATCH, OP_DECODE_DISPATCH, OP_ENCODE_EVENT, OP_DECODE_EVENT, OP_MEMCPY } op_kind;

typedef struct ctx {
    wf_task_batch *batch;
    wf_frame_task_event *event;
    uint8_t *buf;
    size_t cap, len;
    uint8_t *arena_mem;
    size_t arena_cap;
    uint8_t *copy;
} ctx;

static void run_op(ctx *c, op_kind op) {
    size_t len;
    wf_frame_view f;
    wf_frame_arena arena;
    wf_task_batch b;
    wf_frame_task_event ev;
    switch (op) {
    case OP_ENCODE_DISPATCH:
        if (wf_frame_encode_task_dispatch(c->batch, c->buf, c->cap, &len, NULL, 0) != WF_OK) abort();
        sink += len;
        break;
    case OP_ENCODE_EVENT:
        if (wf_frame_encode_task_event(c->event, c->buf, c->cap, &len, NULL, 0) != WF_OK) abort();
        sink += len;
        break;
    case OP_DECODE_DISPATCH:
        wf_frame_arena_init(&arena, c->arena_mem, c->arena_cap);
        if (wf_frame_open(c->buf, c->len, c->cap, &f, NULL, 0) != WF_OK ||
            wf_frame_decode_task_dispatch(&f, &arena, &b, NULL, 0) != WF_OK)
            abort();
        sink += (uint64_t)b.n_tasks;
        break;
    case OP_DECODE_EVENT:
        wf_frame_arena_init(&arena, c->arena_mem, c->arena_cap);
        if (wf_frame_open(c->buf, c->len, c->cap, &f, NULL, 0) != WF_OK ||
            wf_frame_decode_task_event(&f, &arena, &ev, NULL, 0) != WF_OK)
            abort();
        sink += (uint64_t)ev.n_results;
        break;
    case OP_MEMCPY:
        memcpy(c->copy, c->buf, c->len);
        sink += c->copy[c->len - 1];
        break;
    }
}

/* Median over repeats of the mean time per op, in microseconds. */
static double time_op(ctx *c, op_kind op, int repeats, int iters) {
    double *t = malloc(sizeof(double) * (size_t)repeats);
    for (int r = 0; r < repeats; r++) {
        double t0 = now_ns();
        for (int i = 0; i < iters; i++) run_op(c, op);
        t[r] = (now_ns() - t0) / iters / 1e3;
    }
    qsort(t, (size_t)repeats, sizeof *t, cmp_double);
    double med = t[repeats / 2];
    free(t);
    return med;
}

static uint64_t rng = 12345;
static uint32_t rnd(uint32_t n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33) % n;
}

int main(int argc, char **argv) {
    int repeats = 15, iters = 2000;
    int histories[8] = {128, 1024}, n_hist = 2, user_hist = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--history") && i + 1 < argc && user_hist < 8) {
            histories[user_hist++] = atoi(argv[++i]);
            n_hist = user_hist;
        } else {
            fprintf(stderr, "usage: %s [--repeats R] [--iters N] [--history H ...]\n", argv[0]);
            return 2;
        }
    }
    size_t cap = 8u << 20, arena_cap = 64u << 20;
    ctx c = {.buf = malloc(cap), .cap = cap, .arena_mem = malloc(arena_cap),
             .arena_cap = arena_cap, .copy = malloc(cap)};
    if (!c.buf || !c.arena_mem || !c.copy) return 1;

    printf("| frame | contents | bytes | encode µs | open+decode µs | memcpy µs (peer) | "
           "encode / memcpy |\n|---|---|---|---|---|---|---|\n");
    static wf_task tasks[N_DECODE];
    static wf_task_sample samples[N_DECODE];
    static wf_sampling_params params[N_DECODE];
    static int32_t tokens[N_DECODE];
    static int32_t blocks[N_DECODE][512];
    for (int h = 0; h < n_hist; h++) {
        int n_history = histories[h];
        int n_blocks = (n_history + 15) / 16;
        if (n_blocks > 512) n_blocks = 512;
        for (int i = 0; i < N_DECODE; i++) {
            int32_t *hist = malloc(sizeof(int32_t) * (size_t)n_history);
            for (int k = 0; k < n_history; k++) hist[k] = (int32_t)rnd(49152);
            for (int k = 0; k < n_blocks; k++) blocks[i][k] = (int32_t)rnd(100000);
            params[i] = (wf_sampling_params){.temperature = 0.7f, .top_p = 0.9f, .top_k = 40,
                                             .repetition_penalty = 1.1f, .logprobs = true,
                                             .top_logprobs = 5};
            samples[i] = (wf_task_sample){.params = &params[i], .rng_state = rnd(1u << 30),
                                          .history = hist, .n_history = n_history,
                                          .n_prompt = n_history / 2};
            tokens[i] = (int32_t)rnd(49152);
            tasks[i] = (wf_task){.id = (uint64_t)i + 1000, .kind = WF_TASK_DECODE,
                                 .request_seq = (uint64_t)i, .group = {.id = 7, .n_ranks = 1}};
            tasks[i].llm = (wf_task_llm){
                .tokens = &tokens[i], .n_tokens = 1, .pos = n_history,
                .kv = {.id = (uint64_t)i + 1, .kind = WF_ARTIFACT_KV,
                       .placement = {.holders = {.id = 7, .n_ranks = 1}},
                       .block_table = blocks[i], .n_blocks = n_blocks},
                .samples = &samples[i], .n_samples = 1};
        }
        wf_task_batch batch = {.tasks = tasks, .n_tasks = N_DECODE, .iteration = 1,
                               .group = {.id = 7, .n_ranks = 1}};
        c.batch = &batch;
        if (wf_frame_encode_task_dispatch(&batch, c.buf, c.cap, &c.len, NULL, 0) != WF_OK) return 1;
        double enc = time_op(&c, OP_ENCODE_DISPATCH, repeats, iters);
        double dec = time_op(&c, OP_DECODE_DISPATCH, repeats, iters);
        double cpy = time_op(&c, OP_MEMCPY, repeats, iters);
        printf("| TASK_DISPATCH | 64 decode tasks, history %d, %d KV blocks | %zu | %.2f | %.2f | "
               "%.2f | %.1fx |\n",
               n_history, n_blocks, c.len, enc, dec, cpy, enc / cpy);
        for (int i = 0; i < N_DECODE; i++) free((void *)samples[i].history);
    }

    /* 32 DECODE results, one token each with top-20 alternatives */
    static wf_frame_task_result results[N_EVENT];
    static wf_task_sample outs[N_EVENT];
    for (int i = 0; i < N_EVENT; i++) {
        outs[i].rng_state = rnd(1u << 30);
        outs[i].out.token = (int32_t)rnd(49152);
        outs[i].out.logprob = -0.5f;
        outs[i].out.n_top = WF_MAX_TOP_LOGPROBS;
        for (int k = 0; k < WF_MAX_TOP_LOGPROBS; k++)
            outs[i].out.top[k] = (wf_token_logprob){(int32_t)rnd(49152), -1.0f - (float)k};
        results[i] = (wf_frame_task_result){.task_id = (uint64_t)i, .kind = WF_TASK_DECODE,
                                            .t_begin_ns = 1, .t_end_ns = 2,
                                            .samples = &outs[i], .n_samples = 1};
    }
    wf_frame_task_event ev = {.iteration = 1, .results = results, .n_results = N_EVENT};
    c.event = &ev;
    if (wf_frame_encode_task_event(&ev, c.buf, c.cap, &c.len, NULL, 0) != WF_OK) return 1;
    double enc = time_op(&c, OP_ENCODE_EVENT, repeats, iters);
    double dec = time_op(&c, OP_DECODE_EVENT, repeats, iters);
    double cpy = time_op(&c, OP_MEMCPY, repeats, iters);
    printf("| TASK_EVENT | 32 decode results, top-20 logprobs | %zu | %.2f | %.2f | %.2f | %.1fx |\n",
           c.len, enc, dec, cpy, enc / cpy);
    /* the checksum alone, for scale */
    double t0 = now_ns();
    uint32_t crc = 0;
    for (int i = 0; i < iters; i++) crc ^= wf_frame_crc32c(0, c.buf, c.len);
    sink += crc;
    printf("\nCRC32C (implementation chosen at run time): %.2f GB/s\n",
           (double)c.len * iters / (now_ns() - t0));
    free(c.buf);
    free(c.arena_mem);
    free(c.copy);
    return 0;
}
