/* AVX-512 path of attention.c for head sizes that are multiples of 64. ggml's own AVX-512
 * layout holds the 64 slots of ggml_vec_dot_f16 in four 16-lane registers, so the score dot
 * products are the AVX2 path's with each pair of 8-lane accumulators fused into one register;
 * the V products run 16 dimensions at a time. Every lane performs the same fused multiply-adds
 * and the same reduction tree as the portable code, so the bits are the same (tests compare the
 * three paths). Built with AVX-512 F/BW/VL/DQ flags; called only when the CPU has them. */
#include <immintrin.h>
#include <math.h>

#include "engine/attention.h"

static inline __m512 load_h16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

/* ggml_vec_dot_f16's 64-slot sums of one K row against query j, folded to the 8-lane vector
 * the AVX2 path has before its final tree: registers hold slots 0-15, 16-31, 32-47, 48-63, so
 * (a0 + a2) + (a1 + a3) gives lanes 0-7 = the AVX2 "lo" and lanes 8-15 = "hi", then lo + hi. */
static inline __m256 fold_slots(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 x = _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
    return _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
}

/* Scores of nh heads (a compile-time constant after inlining) over K rows of hd = 64 * nc:
 * sc[j * ld + p] = f16dot(K[p], q_j) * scale, each K row widened once for every head; the
 * maxima go to mx[j]. Prefetches K rows ahead and the V rows the output phase reads next. */
static inline __attribute__((always_inline)) void
scores_nh(int nh, int hd, const float *qf, float scale, const wf_attn_kv_view *kv, int n_pos,
          float *sc, size_t ld, float *mx) {
    for (int p = 0; p < n_pos && p < WF_ATTN_PF_AHEAD; p++)
        wf_attn_prefetch_row(kv->k_rows[p], hd, 0);
    const __m256 vscale = _mm256_set1_ps(scale);
    __m256 vm[WF_ATTN_MAX_HEADS];
    float m[WF_ATTN_MAX_HEADS];
    for (int j = 0; j < nh; j++) {
        vm[j] = _mm256_set1_ps(-INFINITY);
        m[j] = -INFINITY;
    }
    for (int p0 = 0; p0 < n_pos; p0 += 8) {
        const int nr = n_pos - p0 < 8 ? n_pos - p0 : 8;
        __m256 rows[WF_ATTN_MAX_HEADS][8];
        for (int r = 0; r < nr; r++) {
            const int p = p0 + r;
            if (p + WF_ATTN_PF_AHEAD < n_pos)
                wf_attn_prefetch_row(kv->k_rows[p + WF_ATTN_PF_AHEAD], hd, 0);
            wf_attn_prefetch_row(kv->v_rows[p], hd, 1);
            const uint16_t *k = kv->k_rows[p];
            __m512 acc[WF_ATTN_MAX_HEADS][4];
            WF_ATTN_UNROLL
            for (int j = 0; j < nh; j++)
                WF_ATTN_UNROLL
                for (int i = 0; i < 4; i++) acc[j][i] = _mm512_setzero_ps();
            for (int c = 0; c < hd; c += 64) {
                __m512 kr[4];
                WF_ATTN_UNROLL
                for (int i = 0; i < 4; i++) kr[i] = load_h16(k + c + 16 * i);
                WF_ATTN_UNROLL
                for (int j = 0; j < nh; j++)
                    WF_ATTN_UNROLL
                    for (int i = 0; i < 4; i++)
                        acc[j][i] = _mm512_fmadd_ps(
                            kr[i], _mm512_loadu_ps(qf + (size_t)j * 256 + c + 16 * i), acc[j][i]);
            }
            WF_ATTN_UNROLL
            for (int j = 0; j < nh; j++)
                rows[j][r] = fold_slots(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
        }
        if (nr == 8) {
            for (int j = 0; j < nh; j++) {
                __m256 v = _mm256_mul_ps(wf_attn_tree8x8(rows[j]), vscale);
                _mm256_storeu_ps(sc + (size_t)j * ld + (size_t)p0, v);
                vm[j] = _mm256_max_ps(v, vm[j]); /* a NaN score is skipped, as below */
            }
        } else {
            for (int j = 0; j < nh; j++)
                for (int r = 0; r < nr; r++) {
                    float v = wf_attn_tree8(rows[j][r]) * scale;
                    sc[(size_t)j * ld + (size_t)(p0 + r)] = v;
                    m[j] = v > m[j] ? v : m[j];
                }
        }
    }
    for (int j = 0; j < nh; j++) {
        float t[8];
        _mm256_storeu_ps(t, vm[j]);
        for (int i = 0; i < 8; i++) m[j] = t[i] > m[j] ? t[i] : m[j];
        mx[j] = m[j];
    }
}

/* Output of nh heads, 32 dims (one 64-byte line of each V row) per pass: slot sums over
 * p = slot (mod 64) in order, formed in registers, combined as (s + s+32) + (s+16 + s+48),
 * then the 16-lane tree (see attention_avx2.c, which does the same 8 dims at a time). Both
 * 16-dim halves of a line are taken in the same visit of the row: 16 dims per pass read each
 * line in two passes over all n_pos rows, and the output phase waited on those loads. */
static inline __attribute__((always_inline)) void
out_nh(int nh, int hd, const wf_attn_kv_view *kv, int n_pos, const float *pf, size_t ld,
       float *out) {
    const uint16_t *const *vr = kv->v_rows;
    for (int dc = 0; dc < hd; dc += 32) {
        __m512 t[WF_ATTN_MAX_HEADS][2][16];
        for (int l = 0; l < 16; l++) {
            __m512 half[2][WF_ATTN_MAX_HEADS][2];
            for (int pair = 0; pair < 2; pair++) {
                const int s0 = l + 16 * pair; /* slots s0 and s0 + 32 */
                __m512 a[WF_ATTN_MAX_HEADS][2], b[WF_ATTN_MAX_HEADS][2];
                WF_ATTN_UNROLL
                for (int j = 0; j < nh; j++) a[j][0] = a[j][1] = b[j][0] = b[j][1] = _mm512_setzero_ps();
                for (int p = s0; p < n_pos; p += 64) {
                    const __m512 v0 = load_h16(vr[p] + dc), v1 = load_h16(vr[p] + dc + 16);
                    WF_ATTN_UNROLL
                    for (int j = 0; j < nh; j++) {
                        const __m512 w = _mm512_set1_ps(pf[(size_t)j * ld + (size_t)p]);
                        a[j][0] = _mm512_fmadd_ps(v0, w, a[j][0]);
                        a[j][1] = _mm512_fmadd_ps(v1, w, a[j][1]);
                    }
                    if (p + 32 < n_pos) {
                        const __m512 w0 = load_h16(vr[p + 32] + dc), w1 = load_h16(vr[p + 32] + dc + 16);
                        WF_ATTN_UNROLL
                        for (int j = 0; j < nh; j++) {
                            const __m512 w = _mm512_set1_ps(pf[(size_t)j * ld + (size_t)p + 32]);
                            b[j][0] = _mm512_fmadd_ps(w0, w, b[j][0]);
                            b[j][1] = _mm512_fmadd_ps(w1, w, b[j][1]);
                        }
                    }
                }
                WF_ATTN_UNROLL
                for (int j = 0; j < nh; j++) {
                    half[pair][j][0] = _mm512_add_ps(a[j][0], b[j][0]);
                    half[pair][j][1] = _mm512_add_ps(a[j][1], b[j][1]);
                }
            }
            WF_ATTN_UNROLL
            for (int j = 0; j < nh; j++)
                for (int c = 0; c < 2; c++) t[j][c][l] = _mm512_add_ps(half[0][j][c], half[1][j][c]);
        }
        for (int j = 0; j < nh; j++)
            for (int c = 0; c < 2; c++) {
                for (int w = 8; w >= 1; w /= 2)
                    for (int l = 0; l < w; l++) t[j][c][l] = _mm512_add_ps(t[j][c][l], t[j][c][l + w]);
                _mm512_storeu_ps(out + (size_t)j * (size_t)hd + dc + 16 * c, t[j][c][0]);
            }
    }
}

static inline __attribute__((always_inline)) void
group_nh(int nh, const float *q, int hd, float scale, const wf_attn_kv_view *kv, int n_pos,
         wf_attn_scratch *s, float *out) {
    /* q rounded to half (as ggml converts src1 to the F16 vec_dot type), kept as floats */
    float qf[WF_ATTN_MAX_HEADS][256];
    for (int j = 0; j < nh; j++)
        for (int i = 0; i < hd; i += 16) {
            __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(q + (size_t)j * (size_t)hd + i),
                                        _MM_FROUND_TO_NEAREST_INT);
            _mm512_storeu_ps(qf[j] + i, _mm512_cvtph_ps(h));
        }
    const size_t ld = (size_t)s->max_ctx;
    float mx[WF_ATTN_MAX_HEADS];
    scores_nh(nh, hd, qf[0], scale, kv, n_pos, s->scores, ld, mx);
    if (kv->first > 0)
        for (int j = 0; j < nh; j++)
            wf__attn_mask_prefix(s->scores + (size_t)j * ld, kv->first, n_pos, &mx[j]);
    for (int j = 0; j < nh; j++)
        wf_attn_softmax_prob_avx2(s->scores + (size_t)j * ld, n_pos, mx[j]);
    out_nh(nh, hd, kv, n_pos, s->scores, ld, out);
}

_Static_assert(WF_ATTN_MAX_HEADS == 4, "group_nh is instantiated for 1..4 heads");

void wf_attn_group_avx512(const float *q, int n_q, int hd, float scale, const wf_attn_kv_view *kv,
                          int n_pos, wf_attn_scratch *s, float *out) {
    for (int j0 = 0; j0 < n_q; j0 += WF_ATTN_MAX_HEADS) {
        const float *qj = q + (size_t)j0 * (size_t)hd;
        float *oj = out + (size_t)j0 * (size_t)hd;
        switch (n_q - j0 < WF_ATTN_MAX_HEADS ? n_q - j0 : WF_ATTN_MAX_HEADS) {
        case 1: group_nh(1, qj, hd, scale, kv, n_pos, s, oj); break;
        case 2: group_nh(2, qj, hd, scale, kv, n_pos, s, oj); break;
        case 3: group_nh(3, qj, hd, scale, kv, n_pos, s, oj); break;
        default: group_nh(4, qj, hd, scale, kv, n_pos, s, oj); break;
        }
    }
}
