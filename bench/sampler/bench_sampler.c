/* Sampler cost per token on a 49152-entry vocabulary (the default model's), for the sampling
 * settings clients actually send. CPU time of this process (not wall time), so a shared, loaded
 * machine inflates it less. Usage: weft-bench-sampler [iterations] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/sampler.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t lcg(uint64_t *x) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 11;
}

static double unit(uint64_t *x) { return ((double)lcg(x) + 0.5) * 0x1p-53; }

int main(int argc, char **argv) {
    const int nv = 49152, iters = argc > 1 ? atoi(argv[1]) : 500;
    float *logits = malloc((size_t)nv * sizeof *logits);
    wf_sampler *s = wf_sampler_new(nv);
    if (!logits || !s || iters < 1) return 1;
    int32_t history[1024];
    for (int i = 0; i < 1024; i++) history[i] = (i * 7919) % nv;
    static const struct {
        const char *name;
        wf_sampling_params p;
        int n_history;
    } cases[] = {
        {"greedy", {.temperature = 0, .top_p = 1, .repetition_penalty = 1}, 0},
        {"temperature 1 (full vocabulary)", {.temperature = 1, .top_p = 1, .repetition_penalty = 1}, 0},
        {"top_k 40", {.temperature = 0.8f, .top_k = 40, .top_p = 1, .repetition_penalty = 1}, 0},
        {"top_p 0.9", {.temperature = 0.8f, .top_p = 0.9f, .repetition_penalty = 1}, 0},
        {"top_k 40 + top_p 0.95 + min_p 0.05",
         {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repetition_penalty = 1}, 0},
        {"temperature 1 + logprobs (top 5)",
         {.temperature = 1, .top_p = 1, .repetition_penalty = 1, .logprobs = true, .top_logprobs = 5}, 0},
        {"penalties (1024 history, 512 generated)",
         {.temperature = 0.7f, .top_p = 0.9f, .repetition_penalty = 1.1f, .frequency_penalty = 0.5f,
          .presence_penalty = 0.5f}, 1024},
    };
    for (int dist = 0; dist < 2; dist++) {
        uint64_t x = 42;
        for (int i = 0; i < nv; i++) {
            if (dist == 0) { /* flat: uniform logits in [0, 12): the worst case for top-p */
                logits[i] = (float)(12.0 * unit(&x));
            } else { /* LLM-like: normal(0, 2.5) plus one confident token */
                double u1 = unit(&x), u2 = unit(&x);
                logits[i] = (float)(2.5 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
            }
        }
        if (dist == 1) logits[123] = 18;
        printf("%s logits\n", dist == 0 ? "flat (uniform [0,12))" : "peaked (normal(0,2.5) + one at 18)");
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            wf_task_sample t = {.params = &cases[c].p, .rng_state = wf_sampler_seed_state(1, 0),
                                .history = history, .n_history = cases[c].n_history,
                                .n_prompt = cases[c].n_history / 2};
            double t0 = cpu_now();
            for (int i = 0; i < iters; i++)
                if (wf_sampler_sample(s, logits, NULL, &t) != WF_OK) return 1;
            printf("  %-42s %8.1f us/token\n", cases[c].name, (cpu_now() - t0) / iters * 1e6);
        }
    }
    wf_sampler_free(s);
    free(logits);
    return 0;
}
