/* The copy behind puts that the world does itself (into a peer's memory mapped in this process,
 * see world.c): large copies stream past the cache. A copy much larger than the last-level
 * cache (a 64 MiB all-to-all moves 2 x 32 MiB per rank on 2 ranks, in a 32 MiB cache shared
 * by both) only evicts data, and an ordinary store first reads each destination line (a read
 * for ownership) that is then overwritten: non-temporal stores skip both. Measured on the
 * project's host (BENCHMARKS.md): 32 MiB copies 27 -> 33 GB/s, 64 MiB 21 -> 28 GB/s, while
 * below ~8 MiB a cached copy is faster (65 against 44 GB/s at 4 MiB), so only copies of at
 * least a quarter of the last-level cache stream. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <emmintrin.h> /* SSE2: part of the x86-64 baseline, so no run-time dispatch is needed */
#endif

#include "engine/world/world_impl.h"

#define STREAM_MIN_DEFAULT (8u << 20) /* when the cache size is not known */

size_t wf__world_stream_min(void) {
    /* Racing first calls compute the same value; every access is atomic (a plain read beside
     * the store is a data race: undefined, and what TSan reports). */
    static size_t min;
    size_t cur = __atomic_load_n(&min, __ATOMIC_RELAXED);
    if (!cur) {
        long l3 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
        l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
        size_t v = l3 > 0 ? (size_t)l3 / 4 : STREAM_MIN_DEFAULT;
        cur = v < (1u << 20) ? (size_t)(1u << 20) : v;
        __atomic_store_n(&min, cur, __ATOMIC_RELAXED);
    }
    return cur;
}

void wf__world_copy(void *dst, const void *src, size_t n) {
    wf__world_copy_as(dst, src, n, n >= wf__world_stream_min());
}

void wf__world_copy_as(void *dst, const void *src, size_t n, int stream) {
#if defined(__x86_64__)
    if (stream && n >= 64) {
        uint8_t *d = dst;
        const uint8_t *s = src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15; /* stores must be 16-byte aligned */
        memcpy(d, s, head);
        d += head, s += head, n -= head;
        size_t body = n & ~(size_t)63;
        for (size_t i = 0; i < body; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));
            _mm_stream_si128((__m128i *)(void *)(d + i), a);
            _mm_stream_si128((__m128i *)(void *)(d + i + 16), b);
            _mm_stream_si128((__m128i *)(void *)(d + i + 32), c);
            _mm_stream_si128((__m128i *)(void *)(d + i + 48), e);
        }
        memcpy(d + body, s + body, n - body);
        /* Streaming stores are weakly ordered: whatever this thread stores next (a done
         * message in a shared-memory queue) must not become visible before them. */
        _mm_sfence();
        return;
    }
#else
    (void)stream;
#endif
    memcpy(dst, src, n);
}

/* ---- swap: the in-place all-to-all's exchange of two blocks (engine/gfc) ----------------------
 * Loads both sides, then stores both, in 64-byte steps: no bounce buffer, whose extra loads and
 * stores made a 256 KiB swap 2.6x slower than this with 32-byte vectors (BENCHMARKS.md). The
 * vectors are the compiler's generic ones, so the same code is SSE2 (x86-64 baseline) or NEON;
 * on x86-64 an AVX2 build of it is chosen at run time when the CPU has AVX2. */
typedef uint8_t wf__v16 __attribute__((vector_size(16)));
#define SWAP_BODY(V)                                                                      \
    size_t i = 0;                                                                         \
    for (; i + 64 <= n; i += 64) {                                                        \
        V x[64 / sizeof(V)], y[64 / sizeof(V)];                                           \
        memcpy(x, a + i, 64);                                                             \
        memcpy(y, b + i, 64);                                                             \
        memcpy(a + i, y, 64);                                                             \
        memcpy(b + i, x, 64);                                                             \
    }                                                                                     \
    for (; i < n; i++) {                                                                  \
        uint8_t t = a[i];                                                                 \
        a[i] = b[i];                                                                      \
        b[i] = t;                                                                         \
    }

static void swap_v16(uint8_t *a, uint8_t *b, size_t n) { SWAP_BODY(wf__v16) }

#if defined(__x86_64__)
typedef uint8_t wf__v32 __attribute__((vector_size(32)));
__attribute__((target("avx2"))) static void swap_v32(uint8_t *a, uint8_t *b, size_t n) {
    SWAP_BODY(wf__v32)
}
#endif

static void (*swap_impl)(uint8_t *, uint8_t *, size_t);
static pthread_once_t swap_once = PTHREAD_ONCE_INIT;

static void swap_choose_once(void) {
    swap_impl = swap_v16;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) swap_impl = swap_v32;
#endif
}

void wf__world_swap(void *a, void *b, size_t n) {
    pthread_once(&swap_once, swap_choose_once);
    swap_impl(a, b, n);
}
