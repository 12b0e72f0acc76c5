/* weft-dit-bench: per-step time of a random-weight DiT on the CPU (one forward = one sampler
 * step), its GEMMs' GFLOP/s, and this machine's fp32 FMA and bf16 vdpbf16ps peak measured in
 * the same run, so GEMM efficiency is a ratio of two numbers from one run.
 *
 *   weft-dit-bench --model s2|b2|xl2 [--batch 2] [--size 32] [--threads 2] [--iters 10] [--bf16]
 *
 * The model is written by the tests' generator (tests/engine/dit/dit_gen.h) in the original key
 * layout to a temporary file and loaded through the normal loader. Prints one line of
 * key=value pairs (median/min step ms, CPU ms per step over all threads, GFLOP/s, peak GFLOP/s,
 * GEMM share of peak). On a shared machine the CPU time is the steadier of the two. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/cpu/features.h"
#include "engine/dit/dit.h"
#include "engine/dit/dit_gen.h"
#include "engine/dit/dit_kernels.h"

double wf_bench_dit_peak(wf_threadpool *pool, int bf16, long iters);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Best of 3 runs of the peak loop, in multiply-adds per second. */
static double peak(wf_threadpool *pool, int bf16) {
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s(), macs = wf_bench_dit_peak(pool, bf16, 4000000), dt = now_s() - t0;
        if (macs / dt > best) best = macs / dt;
    }
    return best;
}

/* GEMMs of one block (qkv, proj, fc1, fc2) at rows = batch x tokens, timed together: median
 * multiply-adds per second over `iters` runs. */
static double gemm_rate(wf_threadpool *pool, int D, int rows, int bf16, int iters) {
    const int ns[4] = {3 * D, D, 4 * D, D}, ks[4] = {D, D, D, 4 * D};
    wf__dit_linear l[4];
    float *x = calloc((size_t)rows * 4 * D, sizeof *x), *y = calloc((size_t)rows * 4 * D, sizeof *y);
    uint16_t *xb = calloc((size_t)rows * (4 * D + 1), sizeof *xb);
    double macs = 0;
    for (int i = 0; i < 4; i++) {
        float *w = malloc((size_t)ns[i] * ks[i] * sizeof *w);
        dit_gen_values("bench.w", (size_t)ns[i] * ks[i], 4, 1, w);
        if (wf__dit_linear_pack(&l[i], w, NULL, ns[i], ks[i], bf16) != 0) abort();
        free(w);
        macs += (double)rows * ns[i] * ks[i];
    }
    dit_gen_values("bench.x", (size_t)rows * 4 * D, 0, 1, x);
    double *ts = malloc((size_t)iters * sizeof *ts);
    for (int it = -1; it < iters; it++) {
        double t0 = now_s();
        for (int i = 0; i < 4; i++) wf__dit_linear_run(pool, NULL, &l[i], x, rows, y, xb);
        if (it >= 0) ts[it] = now_s() - t0;
    }
    qsort(ts, (size_t)iters, sizeof *ts, cmp_d);
    double rate = macs / ts[iters / 2];
    for (int i = 0; i < 4; i++) wf__dit_linear_free(&l[i]);
    free(ts);
    free(x);
    free(y);
    free(xb);
    return rate;
}

int main(int argc, char **argv) {
    const char *model = "s2";
    int batch = 2, size = 32, threads = 2, iters = 10, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bf16")) bf16 = 1;
        else {
            fprintf(stderr, "usage: %s --model s2|b2|xl2 [--batch N] [--size S] [--threads N] [--iters N] [--bf16]\n",
                    argv[0]);
            return 2;
        }
    }
    dit_gen_cfg g = {0, 0, 12, 4, 8, 2, 32, 1000};
    if (!strcmp(model, "s2")) g.hidden = 384, g.heads = 6;
    else if (!strcmp(model, "b2")) g.hidden = 768, g.heads = 12;
    else if (!strcmp(model, "xl2")) g.hidden = 1152, g.heads = 16, g.depth = 28;
    else {
        fprintf(stderr, "unknown model '%s' (s2, b2, xl2)\n", model);
        return 2;
    }
    if (batch < 1 || iters < 1 || threads < 1 || size < 2) return 2;
    char path[] = "/tmp/weft-dit-bench-XXXXXX.safetensors";
    int fd = mkstemps(path, 12);
    if (fd < 0 || dit_gen_write_original(&g, 1, path) != 0) {
        fprintf(stderr, "cannot write the model to %s\n", path);
        return 1;
    }
    close(fd);
    wf_dit_options opt = wf_dit_options_default();
    opt.max_batch = batch;
    opt.max_height = opt.max_width = size;
    opt.n_threads = threads;
    opt.bf16 = bf16;
    wf_dit *m;
    char err[512];
    wf_status st = wf_dit_load(path, &opt, &m, err, sizeof err);
    unlink(path);
    if (st != WF_OK) {
        fprintf(stderr, "load: %s\n", err);
        return 1;
    }
    wf_threadpool *pool = wf_threadpool_new(threads);
    const wf_dit_config *c = wf_dit_get_config(m);
    size_t nx = (size_t)batch * c->in_channels * size * size;
    float *x = malloc(nx * sizeof *x), *out = malloc((size_t)batch * c->out_channels * size * size * sizeof *out);
    float t[64];
    int32_t y[64];
    dit_gen_values("input.latents", nx, 0, 1, x);
    for (int b = 0; b < batch && b < 64; b++) {
        t[b] = (float)(999 - 37 * b);
        y[b] = b % 2 ? c->num_classes : 207 + b;
    }
    double *ts = malloc((size_t)iters * sizeof *ts), cpu = 0;
    for (int it = -1; it < iters; it++) { /* one warm-up */
        double t0 = now_s(), c0 = cpu_s();
        st = wf_dit_forward(m, pool, batch, size, size, x, t, y, out, NULL, err, sizeof err);
        if (st != WF_OK) {
            fprintf(stderr, "forward: %s\n", err);
            return 1;
        }
        if (it >= 0) {
            ts[it] = now_s() - t0;
            cpu += cpu_s() - c0;
        }
    }
    qsort(ts, (size_t)iters, sizeof *ts, cmp_d);
    double macs = wf_dit_forward_macs(m, batch, size, size);
    int tokens = (size / 2) * (size / 2);
    double g_rate = gemm_rate(pool, c->hidden, batch * tokens, bf16, iters);
    const wf_cpu_features *f = wf_cpu_features_get();
    double pk = f->isa >= WF_CPU_ISA_AVX512 && (!bf16 || f->avx512bf16) ? peak(pool, bf16) : 0;
    printf("model=%s hidden=%d depth=%d batch=%d tokens=%d threads=%d dtype=%s gemm=%s "
           "step_ms_median=%.2f step_ms_min=%.2f cpu_ms_per_step=%.2f forward_gflops=%.1f gemm_gflops=%.1f peak_gflops=%.1f "
           "gemm_share_of_peak=%.2f\n",
           model, c->hidden, c->depth, batch, tokens, threads, bf16 ? "bf16" : "fp32", wf__dit_gemm_best()->name,
           ts[iters / 2] * 1e3, ts[0] * 1e3, cpu / iters * 1e3, 2 * macs / ts[iters / 2] * 1e-9, 2 * g_rate * 1e-9, 2 * pk * 1e-9,
           pk > 0 ? g_rate / pk : 0.0);
    free(ts);
    free(x);
    free(out);
    wf_threadpool_free(pool);
    wf_dit_free(m);
    return 0;
}
