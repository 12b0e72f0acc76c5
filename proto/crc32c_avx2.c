/* CRC32C with the SSE4.2 crc32 instruction (this file is built with the AVX2 flag set, which
 * includes SSE4.2; proto/frame.c calls it only when the CPU has both). One dependent chain of
 * 8-byte steps (~8 bytes per 3 cycles) is several times the table version and far above what
 * frames need, so the interleaved-streams variant is not worth its merge code. Checked against
 * the scalar reference in tests/proto/test_frame.c. */
#include <nmmintrin.h>
#include <stdint.h>
#include <string.h>

#include "proto/frame_impl.h"

uint32_t wf__crc32c_avx2(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t c = (uint32_t)~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
