/* Compute ceiling of bit-exact block-quant kernels (see mac_ceiling.c). */
#ifndef WF_BENCH_KERNELS_MAC_CEILING_H
#define WF_BENCH_KERNELS_MAC_CEILING_H

#include "engine/cpu/threadpool.h"

/* Multiply-adds per second over all of the pool's threads, best of three runs of about
 * `seconds` / 4 each; 0 if this CPU lacks AVX-512 VNNI (the loop is written for it). */
double wf_bench_mac_ceiling(wf_threadpool *pool, double seconds);

#endif
