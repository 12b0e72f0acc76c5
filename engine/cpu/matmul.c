/* y = x · W^T on the CPU pool. Two phases: activations are quantised once to the weight
 * type's vec_dot type (split by activation row when there are many) and, for the panel
 * kernels, packed 16 rows at a time; then threads work through chunks of weight rows (dealt
 * out in one contiguous range per thread, with stealing, so a busy core on a shared machine
 * does not hold the others up) and dot each chunk's weight rows (which stay in cache) against
 * every activation row: 16-row matvec tiles for one activation row (wf_quant_ops.matvec),
 * panel kernels (panel_dot) or register tiles (vec_dot_tile) for several. Weights stream from
 * memory once per call, not once per token, and each unpacked weight block serves several
 * activation rows. */
#include "engine/cpu/matmul.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/cpu/quant.h"

#define MIN_ROWS_PER_CHUNK 16 /* weight rows claimed at once, at least */
#define CHUNKS_PER_THREAD 8   /* enough to even out a busy core, few enough to claim rarely */
#define ACT_TILE 8            /* without a tile kernel: activation rows per hot weight row */
#define MIN_QUANT_ROWS_PARALLEL 8
/* Panels (zero-padded; the kernels skip the pairs of rows that are all padding) from this many
 * activation rows on: with 8-row panels, at 8 and 32 rows they were 1.8x the 2x4 tiles per
 * core, and at 4 about even. */
#define MIN_PANEL_ROWS 4
#define PANEL_ALIGN 64
#define PANEL_SLICE_BYTES 16384 /* weight bytes that meet all panels while in L1 */

#define MAX_OUTS 4 /* matrices sharing one input per call (q, k, v; gate, up) */

/* One thread's share of the chunks, [front, back), on its own cache line: the owner takes
 * from the front with an atomic nobody else touches until the owner is nearly done, and a
 * thread that has run out steals from the back. (One counter shared by all threads cost a
 * cache-line transfer between cores per claim; these ranges gave +15% decode tokens/s.) */
typedef struct chunk_range {
    alignas(64) _Atomic uint64_t front_back; /* front in the low 32 bits, back in the high */
} chunk_range;

static bool take_chunk(chunk_range *r, bool from_back, int *chunk) {
    uint64_t v = atomic_load_explicit(&r->front_back, memory_order_relaxed);
    for (;;) {
        const uint32_t front = (uint32_t)v, back = (uint32_t)(v >> 32);
        if (front >= back) return false;
        const uint64_t next = from_back ? v - ((uint64_t)1 << 32) : v + 1;
        if (atomic_compare_exchange_weak_explicit(&r->front_back, &v, next, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *chunk = (int)(from_back ? back - 1 : front);
            return true;
        }
    }
}

typedef struct mm_ctx {
    const wf_quant_ops *ops;     /* of the weight type */
    const wf_quant_ops *act_ops; /* of its vec_dot type */
    wf_matmul_out outs[MAX_OUTS];
    int first_chunk[MAX_OUTS + 1]; /* chunks [first_chunk[o], first_chunk[o+1]) are outs[o]'s */
    int n_outs;
    size_t w_row;
    const float *x;
    const char *xq; /* quantised activations (or x itself for F32) */
    char *xq_out;
    size_t xq_row;
    char *panels; /* NULL: tiles; else ceil(m / WF_QUANT_PANEL_ROWS) panels of panel_bytes */
    size_t panel_bytes;
    int k, m;
    int rows_per_chunk, n_chunks;
    chunk_range *ranges; /* one per thread */
} mm_ctx;

static void quantise_rows(mm_ctx *c, int i0, int i1) {
    for (int i = i0; i < i1; i++)
        c->act_ops->from_float(c->x + (size_t)i * (size_t)c->k, c->xq_out + (size_t)i * c->xq_row,
                               c->k);
}

/* Quantises (and packs) whole panels [p0, p1) of activation rows (a panel: 16 rows). */
static void prepare_panels(mm_ctx *c, int p0, int p1) {
    for (int p = p0; p < p1; p++) {
        int i0 = p * WF_QUANT_PANEL_ROWS;
        int i1 = i0 + WF_QUANT_PANEL_ROWS < c->m ? i0 + WF_QUANT_PANEL_ROWS : c->m;
        quantise_rows(c, i0, i1);
        if (c->panels)
            c->ops->panel_pack(c->xq_out + (size_t)i0 * c->xq_row, c->xq_row, i1 - i0, c->k,
                               c->panels + (size_t)p * c->panel_bytes);
    }
}

static void quantise_task(void *arg, int ith, int nth) {
    mm_ctx *c = arg;
    int n_panels = (c->m + WF_QUANT_PANEL_ROWS - 1) / WF_QUANT_PANEL_ROWS;
    int per = (n_panels + nth - 1) / nth;
    int p0 = ith * per, p1 = p0 + per < n_panels ? p0 + per : n_panels;
    if (p0 < p1) prepare_panels(c, p0, p1);
}

/* Weight rows [r0, r1) of one matrix against every activation row. */
static void dot_rows(const mm_ctx *c, const wf_matmul_out *o, int r0, int r1) {
    const int k = c->k, m = c->m, n_out = o->n_out;
    const char *w = o->w, *xq = c->xq;
    const size_t w_row = c->w_row, xq_row = c->xq_row;
    float *y = o->y;
    if (c->panels) {
        /* a slice of weight rows small enough to stay in L1 meets every panel before the
         * next slice is read: weights come from memory once per call, whatever m is */
        int slice = (int)(PANEL_SLICE_BYTES / w_row) / WF_QUANT_TILE_NR * WF_QUANT_TILE_NR;
        if (slice < WF_QUANT_TILE_NR) slice = WF_QUANT_TILE_NR;
        for (int s0 = r0; s0 < r1; s0 += slice) {
            int s1 = s0 + slice < r1 ? s0 + slice : r1;
            for (int i0 = 0, p = 0; i0 < m; i0 += WF_QUANT_PANEL_ROWS, p++) {
                int nc = m - i0 < WF_QUANT_PANEL_ROWS ? m - i0 : WF_QUANT_PANEL_ROWS;
                c->ops->panel_dot(k, &y[(size_t)i0 * (size_t)n_out + (size_t)s0], (size_t)n_out,
                                  w + (size_t)s0 * w_row, w_row,
                                  c->panels + (size_t)p * c->panel_bytes, s1 - s0, nc);
            }
        }
        return;
    }
    if (m == 1 && c->ops->matvec) {
        /* decode: 16-row tiles, the chunk's last rows (a matrix's tail) through the tiles below */
        const int full = (r1 - r0) / WF_QUANT_MATVEC_ROWS * WF_QUANT_MATVEC_ROWS;
        c->ops->matvec(k, &y[r0], w + (size_t)r0 * w_row, w_row, xq, full);
        r0 += full;
        if (r0 == r1) return;
    }
    if (c->ops->vec_dot_tile) {
        /* the chunk's weight rows stay in L1 while all activation rows stream past */
        for (int i0 = 0; i0 < m; i0 += WF_QUANT_TILE_NC) {
            int nc = m - i0 < WF_QUANT_TILE_NC ? m - i0 : WF_QUANT_TILE_NC;
            /* one activation row: 4 weight rows = 4 independent accumulator chains;
             * several: 2 x nc tiles (what fits the register file) */
            const int step = nc == 1 ? WF_QUANT_TILE_NR : 2;
            for (int r = r0; r < r1; r += step) {
                int nr = r1 - r < step ? r1 - r : step;
                c->ops->vec_dot_tile(k, &y[(size_t)i0 * (size_t)n_out + (size_t)r], (size_t)n_out,
                                     w + (size_t)r * w_row, w_row, xq + (size_t)i0 * xq_row,
                                     xq_row, nr, nc);
            }
        }
        return;
    }
    for (int i0 = 0; i0 < m; i0 += ACT_TILE) {
        int i1 = i0 + ACT_TILE < m ? i0 + ACT_TILE : m;
        for (int r = r0; r < r1; r++) {
            const char *wr = w + (size_t)r * w_row;
            for (int i = i0; i < i1; i++)
                c->ops->vec_dot(k, &y[(size_t)i * (size_t)n_out + (size_t)r], wr,
                                xq + (size_t)i * xq_row);
        }
    }
}

static void dot_chunk(const mm_ctx *c, int chunk) {
    int o = 0;
    while (chunk >= c->first_chunk[o + 1]) o++;
    const wf_matmul_out *out = &c->outs[o];
    int r0 = (chunk - c->first_chunk[o]) * c->rows_per_chunk;
    int r1 = r0 + c->rows_per_chunk < out->n_out ? r0 + c->rows_per_chunk : out->n_out;
    dot_rows(c, out, r0, r1);
}

static void dot_task(void *arg, int ith, int nth) {
    mm_ctx *c = arg;
    int chunk;
    while (take_chunk(&c->ranges[ith], false, &chunk)) dot_chunk(c, chunk);
    for (int v = 1; v < nth; v++)
        while (take_chunk(&c->ranges[(ith + v) % nth], true, &chunk)) dot_chunk(c, chunk);
}

static const wf_quant_ops *weight_ops(wf_ggml_type wtype, int k) {
    const wf_quant_ops *ops = wf_quant_ops_get(wtype);
    if (!ops || !ops->vec_dot || wf_quant_row_size(wtype, k) == 0) return NULL;
    return ops;
}

static bool use_panels(const wf_quant_ops *ops, wf_ggml_type wtype, int k, int m) {
    return ops->panel_dot && m >= MIN_PANEL_ROWS && wf_quant_panel_size(wtype, k) > 0;
}

size_t wf_matmul_scratch_size(wf_ggml_type wtype, int k, int m) {
    const wf_quant_ops *ops = weight_ops(wtype, k);
    if (!ops || m <= 0 || ops->vec_dot_type == WF_GGML_TYPE_F32) return 0;
    size_t rows = (size_t)m * wf_quant_row_size(ops->vec_dot_type, k);
    if (!use_panels(ops, wtype, k, m)) return rows;
    size_t n_panels = ((size_t)m + WF_QUANT_PANEL_ROWS - 1) / WF_QUANT_PANEL_ROWS;
    return rows + PANEL_ALIGN + n_panels * wf_quant_panel_size(wtype, k);
}

void wf_matmul_multi(wf_threadpool *pool, wf_ggml_type wtype, int k, const float *x, int m,
                     const wf_matmul_out *outs, int n_outs, void *scratch) {
    const wf_quant_ops *ops = weight_ops(wtype, k);
    if (!ops || n_outs < 1 || n_outs > MAX_OUTS) {
        fprintf(stderr, "wf_matmul: unsupported weight type %d, row length %d or %d outputs\n",
                (int)wtype, k, n_outs);
        abort();
    }
    if (m <= 0) return;
    mm_ctx c = {
        .ops = ops,
        .act_ops = wf_quant_ops_get(ops->vec_dot_type),
        .n_outs = n_outs,
        .w_row = wf_quant_row_size(wtype, k),
        .x = x,
        .k = k,
        .m = m,
    };
    const int nth = wf_threadpool_size(pool);
    int total_rows = 0;
    for (int o = 0; o < n_outs; o++) {
        c.outs[o] = outs[o];
        total_rows += outs[o].n_out > 0 ? outs[o].n_out : 0;
    }
    if (total_rows == 0) return;
    int rows_per_chunk = total_rows / (nth * CHUNKS_PER_THREAD);
    c.rows_per_chunk = rows_per_chunk < MIN_ROWS_PER_CHUNK
                           ? MIN_ROWS_PER_CHUNK
                           : rows_per_chunk / MIN_ROWS_PER_CHUNK * MIN_ROWS_PER_CHUNK;
    for (int o = 0; o < n_outs; o++) {
        int rows = outs[o].n_out > 0 ? outs[o].n_out : 0;
        c.first_chunk[o + 1] = c.first_chunk[o] + (rows + c.rows_per_chunk - 1) / c.rows_per_chunk;
    }
    c.n_chunks = c.first_chunk[n_outs];
    chunk_range ranges[WF_THREADPOOL_MAX_THREADS]; /* only the first nth are used */
    for (int t = 0; t < nth; t++) {
        const uint64_t front = (uint64_t)c.n_chunks * (uint64_t)t / (uint64_t)nth;
        const uint64_t back = (uint64_t)c.n_chunks * (uint64_t)(t + 1) / (uint64_t)nth;
        atomic_init(&ranges[t].front_back, front | back << 32);
    }
    c.ranges = ranges;
    if (ops->vec_dot_type == WF_GGML_TYPE_F32) {
        c.xq = (const char *)x;
        c.xq_row = (size_t)k * sizeof(float);
    } else {
        c.xq_out = scratch;
        c.xq = scratch;
        c.xq_row = wf_quant_row_size(ops->vec_dot_type, k);
        if (use_panels(ops, wtype, k, m)) {
            uintptr_t end = (uintptr_t)scratch + (size_t)m * c.xq_row;
            c.panels = (char *)((end + PANEL_ALIGN - 1) / PANEL_ALIGN * PANEL_ALIGN);
            c.panel_bytes = wf_quant_panel_size(wtype, k);
        }
        if (m >= MIN_QUANT_ROWS_PARALLEL && nth > 1)
            wf_threadpool_run(pool, quantise_task, &c);
        else
            prepare_panels(&c, 0, (m + WF_QUANT_PANEL_ROWS - 1) / WF_QUANT_PANEL_ROWS);
    }
    wf_threadpool_run(pool, dot_task, &c);
}

void wf_matmul(wf_threadpool *pool, const void *w, wf_ggml_type wtype, int n_out, int k,
               const float *x, int m, float *y, void *scratch) {
    wf_matmul_out out = {.w = w, .n_out = n_out, .y = y};
    wf_matmul_multi(pool, wtype, k, x, m, &out, 1, scratch);
}
