/* weft engine micro-benchmark (built by bench/engine/run.sh against a build tree):
 * prefill tokens/s of one 512-token prompt, aggregate decode tokens/s at several batch sizes,
 * this machine's streaming read bandwidth and multiply-add ceiling, and peak resident memory.
 * One line of "key value" pairs per measurement on stdout.
 *
 *     weft_engine_bench MODEL THREADS [BATCH ...]
 *
 * WEFT_BENCH_DECODE_ONLY=1 skips the prefill and the machine measurements (for quick
 * before/after runs of decode kernels). decode_b<N>_cpu is tokens per second of process CPU
 * time: at one thread on a host shared with other work it is the rate while weft runs, which
 * wall time is not (with more threads it also counts the pool's spinning).
 * WEFT_BENCH_PREFILL_ONLY=1 stops after the prefill (for profiles of prefill alone); its
 * prefill_512_cpu is prompt tokens per second of process CPU time, as decode_b<N>_cpu, and
 * prefill_logits_fnv a hash of the logits (bit-identical kernels keep it). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/kernels/mac_ceiling.h"
#include "engine/cpu/threadpool.h"
#include "engine/engine.h"
#include "kv/kv_store.h"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct bw_arg {
    const uint64_t *p;
    size_t n; /* words, a multiple of 8 */
    uint64_t sink;
} bw_arg;

/* XOR of the slice over 8 independent lanes (vectorised by the compiler), with a software
 * prefetch 4 KiB ahead: the best plain read rate, the same help the decode kernels get. */
static void *bw_read(void *a_) {
    bw_arg *a = a_;
    uint64_t acc[8] = {0};
    for (size_t i = 0; i < a->n; i += 8) {
        __builtin_prefetch(a->p + i + 512);
        for (int j = 0; j < 8; j++) acc[j] ^= a->p[i + (size_t)j];
    }
    for (int j = 0; j < 8; j++) a->sink ^= acc[j];
    return NULL;
}

/* Read bandwidth over a buffer of `bytes` split across threads: best of `passes` passes
 * (the first one also warms the caches a model-sized set may partly live in). */
static double bandwidth_gbs(int threads, size_t bytes, int passes) {
    size_t n = bytes / sizeof(uint64_t) / (size_t)threads / 8 * 8 * (size_t)threads;
    uint64_t *buf = aligned_alloc(64, (n * sizeof(uint64_t) + 63) / 64 * 64);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;
    double best = 0;
    uint64_t sink = 0;
    for (int pass = 0; pass < passes; pass++) {
        pthread_t th[64];
        bw_arg args[64];
        double t0 = now_s();
        for (int t = 0; t < threads; t++) {
            args[t] = (bw_arg){buf + n / (size_t)threads * (size_t)t, n / (size_t)threads, 0};
            pthread_create(&th[t], NULL, bw_read, &args[t]);
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            sink ^= args[t].sink;
        }
        double dt = now_s() - t0;
        double gbs = (double)(n * sizeof(uint64_t)) / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    free(buf);
    return sink == 42 ? best + 1e-9 : best; /* keeps the reads observable */
}

/* The first index of the largest of l[0..n) (numpy's argmax, what llama_bench.py takes on
 * llama.cpp's side). The maximum first, over 8 independent lanes, then its first index: a
 * single running index compares each element against a reloaded l[best], a chain of
 * load + compare + cmov per element that cost ~20 ms per batch-32 step over Gemma 3's
 * 262144-entry vocabulary, timed as if it were the engine's. */
static int argmax_first(const float *l, int n) {
    float mx[8];
    for (int k = 0; k < 8; k++) mx[k] = l[0];
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) mx[k] = l[j + k] > mx[k] ? l[j + k] : mx[k];
    for (; j < n; j++) mx[0] = l[j] > mx[0] ? l[j] : mx[0];
    float m = mx[0];
    for (int k = 1; k < 8; k++) m = mx[k] > m ? mx[k] : m;
    for (j = 0; j < n; j++)
        if (l[j] == m) return j;
    return 0; /* every entry NaN */
}

static long peak_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long kb = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL THREADS [BATCH...]\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[2]);
    int batches[16], nb = 0;
    for (int i = 3; i < argc && nb < 16; i++) batches[nb++] = atoi(argv[i]);
    if (nb == 0) batches[nb++] = 1;
    int max_b = 1;
    for (int i = 0; i < nb; i++) max_b = batches[i] > max_b ? batches[i] : max_b;
    wf_engine_options o;
    wf_engine_options_init(&o);
    o.model_path = argv[1];
    o.n_threads = threads;
    o.max_batch_tokens = 512;
    o.max_seqs = max_b;
    wf_engine *e;
    char err[256];
    if (wf_engine_open(&o, &e, err, sizeof err) != WF_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const wf_model_info *info = wf_engine_info(e);
    const int bs = 16, ctx = 512 + 128, per_seq = ctx / bs + 1;
    wf_kv_geometry g = wf_engine_kv_geometry(e, bs);
    wf_kv_store kv;
    if (wf_kv_store_init(&kv, &g, wf_kv_geometry_block_bytes(&g) * (size_t)(per_seq * max_b)) !=
        WF_OK)
        return 1;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)(per_seq * max_b));
    for (int i = 0; i < per_seq * max_b; i++) bt[i] = i;
    float *logits = malloc(sizeof(float) * (size_t)info->n_vocab * (size_t)max_b);
    int32_t prompt[512];
    for (int i = 0; i < 512; i++) prompt[i] = 100 + (i * 7919) % 30000;

    const char *decode_only_env = getenv("WEFT_BENCH_DECODE_ONLY");
    const int decode_only = decode_only_env && atoi(decode_only_env) != 0;
    const char *prefill_only_env = getenv("WEFT_BENCH_PREFILL_ONLY");
    const int prefill_only = prefill_only_env && atoi(prefill_only_env) != 0;
    /* prefill: 512 tokens in one forward pass (best of 3) */
    double best = 1e9, best_cpu = 1e9;
    for (int rep = 0; rep < 3 && !decode_only; rep++) {
        wf_task t = {.kind = WF_TASK_PREFILL, .llm.tokens = prompt, .llm.n_tokens = 512, .llm.pos = 0,
                     .llm.kv.block_table = bt, .llm.kv.n_blocks = per_seq};
        double t0 = now_s(), c0 = cpu_s();
        if (wf_engine_forward_logits(e, &kv, &t, 1, logits) != WF_OK) return 1;
        double dt = now_s() - t0, dc = cpu_s() - c0;
        if (dt < best) best = dt;
        if (dc < best_cpu) best_cpu = dc;
    }
    if (!decode_only) printf("weft prefill_512 %.1f\n", 512.0 / best);
    if (prefill_only) {
        printf("weft prefill_512_cpu %.1f\n", 512.0 / best_cpu);
        /* the last position's logits, hashed (FNV-1a): kernel changes meant to be bit-identical
         * must not change it */
        uint64_t h = 0xcbf29ce484222325ull;
        const unsigned char *lb = (const unsigned char *)logits;
        for (size_t i = 0; i < sizeof(float) * (size_t)info->n_vocab; i++) h = (h ^ lb[i]) * 0x100000001b3ull;
        printf("weft prefill_logits_fnv %016llx\n", (unsigned long long)h);
        free(bt);
        free(logits);
        wf_kv_store_free(&kv);
        wf_engine_free(e);
        return 0;
    }
    fflush(stdout);

    /* decode: B sequences with 64-token prompts, then 8 warm-up steps and 128 timed steps of
     * B single-token decodes (steady state: caches and the pool's threads warm) */
    for (int bi = 0; bi < nb; bi++) {
        int B = batches[bi];
        wf_task tasks[256];
        int32_t last[256];
        for (int s = 0; s < B; s++) {
            tasks[s] = (wf_task){.kind = WF_TASK_PREFILL, .llm.tokens = prompt + s, .llm.n_tokens = 64,
                                 .llm.pos = 0, .llm.kv.block_table = bt + s * per_seq, .llm.kv.n_blocks = per_seq};
            if (wf_engine_forward_logits(e, &kv, &tasks[s], 1, logits) != WF_OK) return 1;
            last[s] = 1000 + s;
        }
        const int warmup = 8, steps = 128;
        double t0 = 0, c0 = 0;
        for (int step = 0; step < warmup + steps; step++) {
            if (step == warmup) {
                t0 = now_s();
                c0 = cpu_s();
            }
            for (int s = 0; s < B; s++)
                tasks[s] = (wf_task){.kind = WF_TASK_DECODE, .llm.tokens = &last[s], .llm.n_tokens = 1,
                                     .llm.pos = 64 + step, .llm.kv.block_table = bt + s * per_seq,
                                     .llm.kv.n_blocks = per_seq};
            if (wf_engine_forward_logits(e, &kv, tasks, B, logits) != WF_OK) return 1;
            for (int s = 0; s < B; s++)
                last[s] = argmax_first(logits + (size_t)s * info->n_vocab, info->n_vocab);
        }
        double dt = now_s() - t0, dc = cpu_s() - c0;
        printf("weft decode_b%d %.1f\n", B, (double)B * steps / dt);
        printf("weft decode_b%d_cpu %.1f\n", B, (double)B * steps / dc);
        fflush(stdout);
    }
    const size_t weight_bytes = info->weight_bytes;
    printf("weft weight_bytes %zu\n", weight_bytes);
    printf("weft matmul_macs %lld\n", (long long)info->matmul_macs);
    printf("weft peak_rss_mib %.1f\n", (double)peak_rss_kb() / 1024.0);
    free(bt);
    free(logits);
    wf_kv_store_free(&kv);
    wf_engine_free(e);
    if (decode_only) return 0;
    /* the roofline's bandwidth: reading 1 GiB (DRAM) and reading a set the size of the
     * weights over and over, as decode does (on a big-L3 host part of it stays cached);
     * run.sh divides by the larger, so the share is not flattered by a small denominator */
    const int bw_threads = threads > 0 ? threads : 2;
    printf("machine read_bandwidth_gbs %.2f\n", bandwidth_gbs(bw_threads, (size_t)1 << 30, 5));
    printf("machine model_set_bandwidth_gbs %.2f\n",
           bandwidth_gbs(bw_threads, weight_bytes, 40));
    /* what batched decode is held to: the multiply-adds per second of bit-exact kernels with
     * nothing but their arithmetic (0 without AVX-512 VNNI) */
    wf_threadpool *pool = wf_threadpool_new(bw_threads);
    if (pool) printf("machine mac_ceiling_gmacs %.2f\n", wf_bench_mac_ceiling(pool, 2.0) / 1e9);
    wf_threadpool_free(pool);
    return 0;
}
