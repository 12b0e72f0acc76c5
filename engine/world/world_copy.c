/* The copy behind puts that the world does itself (into a peer's memory mapped in this process,
 * see world.c): large copies stream past the cache. A copy much larger than the last-level
 * cache (a 64 MiB all-to-all moves 2 x 32 MiB per rank on 2 ranks, in a 32 MiB cache shared
 * by both) only evicts data, and an ordinary store first reads each destination line (a read
 * for ownership) that is then overwritten: non-temporal stores skip both. Measured on the
 * project's host (BENCHMARKS.md): 32 MiB copies 27 -> 33 GB/s, 64 MiB 21 -> 28 GB/s, while
 * below ~8 MiB a cached copy is faster (65 against 44 GB/s at 4 MiB), so only copies of at
 * least a quarter of the last-level cache stream. */
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
