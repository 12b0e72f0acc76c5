/* Counter-based Gaussian noise for diffusion sampling: element e of step s of request r under
 * seed k is a pure function of (k, r, s, e), so a sample never depends on batching, thread
 * count, chunking or which worker runs the step.
 *
 *     wf_dit_noise_key key = {.seed = 1234, .request = 0};
 *     wf_dit_noise_fill(key, WF_DIT_NOISE_STEP_INIT, 0, latent, n);   // x_T ~ N(0, I)
 *     wf_dit_noise_fill(key, i, 0, noise, n);                         // step i's noise
 *     wf_dit_noise_fill_parallel(pool, key, i, 0, noise, n);          // same values, threaded
 *
 * Generator: Philox4x32-10 (Salmon et al., SC'11) with key = seed (64 bits) and counter =
 * (block low 32, block high 32, step, request); each 128-bit output block yields 4 normals by
 * two Box-Muller transforms (u1 = (a + 1) / 2^32 in (0, 1], u2 = b / 2^32), computed in double
 * and rounded to float. Element e is lane e % 4 of block e / 4.
 *
 * Thread-safety: all functions are pure; call them from any thread. No allocation. */
#ifndef WF_ENGINE_DIT_NOISE_H
#define WF_ENGINE_DIT_NOISE_H

#include <stddef.h>
#include <stdint.h>

typedef struct wf_threadpool wf_threadpool; /* engine/cpu/threadpool.h */

typedef struct wf_dit_noise_key {
    uint64_t seed;    /* the request's seed */
    uint32_t request; /* which image of the request (its index in the batch of n images) */
} wf_dit_noise_key;

/* The step number that draws the initial latent x_T (steps 0..n-1 draw per-step noise). */
#define WF_DIT_NOISE_STEP_INIT UINT32_MAX

/* The raw generator: Philox4x32-10 of counter ctr[4] under key[2], into out[4]. */
void wf_dit_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* out[j] = standard normal number of element first + j, for j in [0, n). */
void wf_dit_noise_fill(wf_dit_noise_key key, uint32_t step, uint64_t first, float *out, size_t n);

/* As wf_dit_noise_fill, split across the pool's threads (NULL pool: the caller alone). The values
 * are bit-identical to wf_dit_noise_fill's. Not concurrently on one pool (threadpool.h). */
void wf_dit_noise_fill_parallel(wf_threadpool *pool, wf_dit_noise_key key, uint32_t step,
                                uint64_t first, float *out, size_t n);

#endif
