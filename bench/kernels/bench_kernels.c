/* weft-bench-kernels: memory bandwidth vs Q4_1 matrix-vector (and batched) throughput of the
 * CPU kernels, at 1..N threads, for a weight matrix that lives in DRAM and one that fits the
 * last-level cache (the default model's ~90 MB of Q4_1 weights do on big-L3 servers), and the
 * compute ceiling of bit-exact block-quant kernels (mac_ceiling.c) to hold the batched rate to.
 *
 *     weft-bench-kernels [--threads N] [--dram-mb MB] [--llc-mb MB] [--seconds S]
 *
 * GB/s = bytes of weights (or of the buffer) read per second; GMAC/s = multiply-adds per
 * second (weight rows x k x tokens). Not part of ctest. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cpu/features.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/quant.h"
#include "engine/cpu/threadpool.h"
#include "bench/kernels/mac_ceiling.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process: on a shared, oversubscribed machine wall time mostly
 * measures the other tenants; bytes per (CPU seconds / threads) is the rate while running. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct rate {
    double wall_gbs, cpu_gbs, per_call;
} rate;

static rate make_rate(double bytes_per_iter, int iters, double wall, double cpu, int nth) {
    rate r = {bytes_per_iter * iters / wall / 1e9, bytes_per_iter * iters / (cpu / nth) / 1e9, wall / iters};
    return r;
}

typedef struct stream_ctx {
    const uint64_t *buf;
    size_t n; /* uint64 words */
    uint64_t sink[64 * 8];
} stream_ctx;

/* Streaming read: each thread XOR-reduces its contiguous slice with 8 independent lanes
 * (the compiler vectorises this); the result is kept so the loads cannot be elided. */
static void stream_fn(void *arg, int ith, int nth) {
    stream_ctx *c = arg;
    size_t per = c->n / (size_t)nth / 8 * 8;
    const uint64_t *p = c->buf + per * (size_t)ith;
    uint64_t acc[8] = {0};
    for (size_t i = 0; i < per; i += 8)
        for (int j = 0; j < 8; j++) acc[j] ^= p[i + (size_t)j];
    for (int j = 0; j < 8; j++) c->sink[ith * 8 + j] ^= acc[j];
}

static rate bench_stream(wf_threadpool *pool, size_t bytes, double seconds) {
    stream_ctx *c = calloc(1, sizeof(*c));
    uint64_t *buf = aligned_alloc(64, bytes);
    if (!c || !buf) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(buf, 0x5a, bytes);
    c->buf = buf;
    c->n = bytes / 8;
    wf_threadpool_run(pool, stream_fn, c); /* warm-up */
    int iters = 0;
    double t0 = now(), c0 = cpu_now(), t;
    do {
        wf_threadpool_run(pool, stream_fn, c);
        iters++;
        t = now() - t0;
    } while (t < seconds);
    rate r = make_rate((double)bytes, iters, t, cpu_now() - c0, wf_threadpool_size(pool));
    free(buf);
    free(c);
    return r;
}

/* Random Q4_1 weights without quantising: random nibbles, small finite scales. */
static void *make_q4_1(int n_out, int k) {
    size_t rb = wf_quant_row_size(WF_GGML_TYPE_Q4_1, k), total = rb * (size_t)n_out;
    unsigned char *w = aligned_alloc(64, (total + 63) / 64 * 64);
    if (!w) return NULL;
    uint64_t s = 0x853c49e6748fea9bull;
    for (size_t i = 0; i < total; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (unsigned char)(s >> 56);
    }
    uint16_t d = wf_fp32_to_fp16(0.01f), m = wf_fp32_to_fp16(-0.08f);
    for (size_t b = 0; b < total; b += 20) {
        memcpy(w + b, &d, 2);
        memcpy(w + b + 2, &m, 2);
    }
    return w;
}

static rate bench_matmul(wf_threadpool *pool, const void *w, int n_out, int k, int m,
                         double seconds) {
    float *x = malloc(sizeof(float) * (size_t)k * (size_t)m);
    float *y = malloc(sizeof(float) * (size_t)n_out * (size_t)m);
    void *scratch = malloc(wf_matmul_scratch_size(WF_GGML_TYPE_Q4_1, k, m));
    for (size_t i = 0; i < (size_t)k * (size_t)m; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    wf_matmul(pool, w, WF_GGML_TYPE_Q4_1, n_out, k, x, m, y, scratch);
    int iters = 0;
    double t0 = now(), c0 = cpu_now(), t;
    do {
        wf_matmul(pool, w, WF_GGML_TYPE_Q4_1, n_out, k, x, m, y, scratch);
        iters++;
        t = now() - t0;
    } while (t < seconds);
    rate r = make_rate((double)wf_quant_row_size(WF_GGML_TYPE_Q4_1, k) * n_out, iters, t,
                       cpu_now() - c0, wf_threadpool_size(pool));
    free(x);
    free(y);
    free(scratch);
    return r;
}

int main(int argc, char **argv) {
    int max_threads = 2;
    double dram_mb = 1024, llc_mb = 64, seconds = 1.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) max_threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dram-mb")) dram_mb = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--llc-mb")) llc_mb = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--threads N] [--dram-mb MB] [--llc-mb MB] [--seconds S]\n", argv[0]);
            return 2;
        }
    }
    if (max_threads < 1) max_threads = 1;
    const int k = 4096;
    const size_t rb = wf_quant_row_size(WF_GGML_TYPE_Q4_1, k);
    const int n_dram = (int)(dram_mb * 1e6 / (double)rb), n_llc = (int)(llc_mb * 1e6 / (double)rb);
    void *w_dram = make_q4_1(n_dram, k), *w_llc = make_q4_1(n_llc, k);
    if (!w_dram || !w_llc) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    printf("isa %s (vnni %d); Q4_1 k=%d; DRAM set %.0f MB, LLC set %.0f MB\n\n",
           wf_cpu_isa_name(wf_cpu_features_get()->isa), wf_cpu_features_get()->avx512vnni, k,
           dram_mb, llc_mb);
    printf("| threads | kernel | working set | m | GB/s (wall) | GB/s (per CPU-busy time) | ms/call (wall) | GMAC/s (wall) |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int nt = 1; nt <= max_threads; nt++) {
        wf_threadpool *pool = wf_threadpool_new(nt);
        if (!pool) return 1;
        const double sets[2] = {dram_mb, llc_mb};
        for (int si = 0; si < 2; si++) {
            rate r = bench_stream(pool, (size_t)(sets[si] * 1e6) / 64 * 64, seconds);
            printf("| %d | stream read | %.0f MB | - | %.1f | %.1f | - | - |\n", nt, sets[si], r.wall_gbs, r.cpu_gbs);
        }
        rate r = bench_matmul(pool, w_dram, n_dram, k, 1, seconds);
        printf("| %d | q4_1 matvec | %.0f MB | 1 | %.1f | %.1f | %.2f | %.1f |\n", nt, dram_mb, r.wall_gbs,
               r.cpu_gbs, r.per_call * 1e3, (double)n_dram * k / r.per_call / 1e9);
        const int ms[] = {1, 8, 32};
        for (int mi = 0; mi < 3; mi++) {
            r = bench_matmul(pool, w_llc, n_llc, k, ms[mi], seconds);
            printf("| %d | q4_1 matmul | %.0f MB | %d | %.1f | %.1f | %.2f | %.1f |\n", nt, llc_mb, ms[mi],
                   r.wall_gbs, r.cpu_gbs, r.per_call * 1e3, (double)n_llc * k * ms[mi] / r.per_call / 1e9);
        }
        const double ceiling = wf_bench_mac_ceiling(pool, seconds);
        if (ceiling > 0)
            printf("| %d | ggml-order ceiling (mac_ceiling.c) | L1 | - | - | - | - | %.1f |\n", nt, ceiling / 1e9);
        wf_threadpool_free(pool);
    }
    free(w_dram);
    free(w_llc);
    return 0;
}
