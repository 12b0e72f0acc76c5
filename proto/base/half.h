/* Half-precision (IEEE binary16) and bfloat16 conversions in portable C, bit-identical to the
 * F16C instructions, shared by the engine's scalar kernels and kv/'s codec.
 *
 *     uint16_t h = wf_fp32_to_fp16(0.1f);      // 0x2e66, rounded to nearest even
 *     float f = wf_fp16_to_fp32(h);            // 0.0999755859375f, exact
 */
#ifndef WF_PROTO_BASE_HALF_H
#define WF_PROTO_BASE_HALF_H

#include <stdint.h>

/* IEEE half -> float (exact) and float -> half, rounding to nearest even exactly as F16C's
 * VCVTPS2PH with imm 0 does (overflow -> inf, NaN stays NaN, subnormals kept). */
float wf_fp16_to_fp32(uint16_t h);
uint16_t wf_fp32_to_fp16(float f);
/* bfloat16 -> float (exact: the top 16 bits of a float). */
float wf_bf16_to_fp32(uint16_t h);
/* float -> bfloat16, rounding to nearest even; NaN stays a quiet NaN (as ggml). */
uint16_t wf_fp32_to_bf16(float f);

#endif
