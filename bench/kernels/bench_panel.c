/* weft-bench-panel: one batched wf_matmul shape timed alone, for the panel kernels (the Q8_0
 * output matrix, the Q5_0 projections and the Q4_K/Q6_K output and down projections of Gemma 3).
 *
 *     weft-bench-panel [--type q8_0|q5_0|q4_0|q4_1|q5_1|q4_k|q6_k] [--n-out N] [--k K] [--m M]
 *                      [--threads T] [--reps R]
 *
 * Defaults: Q8_0, 32768 x 640 weights (an eighth of Gemma 3 270M's tied output matrix, 22 MB,
 * bigger than the caches), 32 activation rows (the batch-32 decode step), 1 thread, 15 reps.
 * Prints the median, min and max wall seconds per call, the median process CPU seconds, and
 * the multiply-adds per second of each median. Weights and activations are random; the numbers depend only on the shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cpu/matmul.h"
#include "engine/cpu/quant.h"

static double now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

int main(int argc, char **argv) {
    const char *type_name = "q8_0";
    int n_out = 32768, k = 640, m = 32, threads = 1, reps = 15;
    for (int i = 1; i < argc; i += 2) { /* flag, value */
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--type")) type_name = v;
        else if (!strcmp(argv[i], "--n-out")) n_out = atoi(v);
        else if (!strcmp(argv[i], "--k")) k = atoi(v);
        else if (!strcmp(argv[i], "--m")) m = atoi(v);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(v);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(v);
        else {
            fprintf(stderr, "usage: %s [--type q8_0|q5_0|q4_0|q4_1|q5_1|q4_k|q6_k] [--n-out N] [--k K] [--m M] "
                            "[--threads T] [--reps R]\n", argv[0]);
            return 2;
        }
    }
    static const struct { const char *name; wf_ggml_type t; } types[] = {
        {"q8_0", WF_GGML_TYPE_Q8_0}, {"q5_0", WF_GGML_TYPE_Q5_0}, {"q4_0", WF_GGML_TYPE_Q4_0},
        {"q4_1", WF_GGML_TYPE_Q4_1}, {"q5_1", WF_GGML_TYPE_Q5_1}, {"q4_k", WF_GGML_TYPE_Q4_K},
        {"q6_k", WF_GGML_TYPE_Q6_K}};
    int ti = -1;
    for (int i = 0; i < (int)(sizeof types / sizeof types[0]); i++)
        if (!strcmp(types[i].name, type_name)) ti = i;
    if (ti < 0) {
        fprintf(stderr, "%s: --type '%s' is not one of q8_0, q5_0, q4_0, q4_1, q5_1, q4_k, q6_k\n", argv[0], type_name);
        return 2;
    }
    const int block = wf_ggml_type_info_get(types[ti].t)->block_size;
    if (n_out <= 0 || k <= 0 || k % block || m <= 0 || threads <= 0 || reps <= 0) {
        fprintf(stderr, "%s: --n-out, --m, --threads and --reps must be positive, --k a positive multiple of %d\n",
                argv[0], block);
        return 2;
    }
    const wf_ggml_type t = types[ti].t;
    const wf_quant_ops *ops = wf_quant_ops_get(t);
    const size_t row = wf_quant_row_size(t, k);
    char *w = malloc(row * (size_t)n_out);
    float *x = malloc(sizeof(float) * (size_t)m * (size_t)k);
    float *y = malloc(sizeof(float) * (size_t)m * (size_t)n_out);
    float *f = malloc(sizeof(float) * (size_t)k);
    const size_t scratch_size = (wf_matmul_scratch_size(t, k, m) + 63) / 64 * 64;
    void *scratch = aligned_alloc(64, scratch_size ? scratch_size : 64);
    double *secs = malloc(sizeof(double) * (size_t)reps), *cpu = malloc(sizeof(double) * (size_t)reps);
    if (!w || !x || !y || !f || !scratch || !secs || !cpu) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    unsigned seed = 1;
    for (int r = 0; r < n_out; r++) {
        for (int i = 0; i < k; i++) f[i] = frand(&seed);
        ops->from_float_ref(f, w + (size_t)r * row, k);
    }
    for (size_t i = 0; i < (size_t)m * (size_t)k; i++) x[i] = frand(&seed);
    wf_threadpool *pool = threads > 1 ? wf_threadpool_new(threads) : NULL;
    if (threads > 1 && !pool) {
        fprintf(stderr, "%s: cannot start %d threads\n", argv[0], threads);
        return 1;
    }
    wf_matmul(pool, w, t, n_out, k, x, m, y, scratch); /* warm-up */
    for (int i = 0; i < reps; i++) {
        const double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        wf_matmul(pool, w, t, n_out, k, x, m, y, scratch);
        secs[i] = now(CLOCK_MONOTONIC) - t0;
        cpu[i] = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    qsort(secs, (size_t)reps, sizeof *secs, cmp_double);
    qsort(cpu, (size_t)reps, sizeof *cpu, cmp_double);
    const double med = secs[reps / 2], macs = (double)n_out * k * m;
    /* CPU time: the figure least disturbed when other jobs share the cores */
    printf("%s n_out=%d k=%d m=%d threads=%d: wall median %.3f ms (min %.3f, max %.3f) %.1f GMAC/s; "
           "cpu median %.3f ms (min %.3f) %.1f GMAC/cpu-s; y[0]=%.6g\n",
           type_name, n_out, k, m, threads, med * 1e3, secs[0] * 1e3, secs[reps - 1] * 1e3,
           macs / med * 1e-9, cpu[reps / 2] * 1e3, cpu[0] * 1e3, macs / cpu[reps / 2] * 1e-9,
           (double)y[0]);
    wf_threadpool_free(pool);
    free(w); free(x); free(y); free(f); free(scratch); free(secs); free(cpu);
    return 0;
}
