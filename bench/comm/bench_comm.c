/* weft-bench-comm: forks N ranks that form a world over loopback, then measures
 *   formation: wf_gfc_group_init on random subsets (p50/p99 of single calls) against forming a
 *              communicator the conventional way for the same ranks: an address all-gather among
 *              the subset plus new UCX endpoints to every member. Wire-up completion is NOT
 *              waited for (it needs the peers to progress a worker they are not driving), so
 *              the conventional figure is a lower bound;
 *   coll:      latency and bus bandwidth of each collective by size (NCCL's bus-bandwidth
 *              factors), timed on rank 0 between barriers;
 *   a2a:       all-to-all by path (tagged messages; puts into malloc'd buffers; puts into
 *              wf_world_mem_alloc buffers; in place in a wf_world_mem_alloc buffer, where
 *              pairs swap their blocks): best and mean time, bus bandwidth of both;
 *   size:      one collective at one size, many repetitions: best, median and mean time and the
 *              bus bandwidth of each (on a shared host the median is the figure to compare),
 *              then the medians (over repetitions, of the slowest rank) of CPU time used and of
 *              time spent runnable but waiting for a core (/proc/self/schedstat);
 *   memcpy:    single-thread memcpy bandwidth at the same sizes, for scale.
 * Usage: weft-bench-comm formation N | coll N | a2a N | memcpy
 *        weft-bench-comm size N alltoall|allgather|reduce_scatter BYTES REPS alloc|malloc|inplace
 *        (inplace: all-to-all only, send == recv in one wf_world_mem_alloc buffer; BATCH, default
 *        1: collectives per repetition, back to back between the barriers, as nccl-tests and
 *        ucx_perftest time them; the times printed are per collective) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include "engine/gfc/gfc.h"
#include "engine/world/world.h"
#include "engine/world/world_launch.h"
#include "proto/base/clock.h"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void full_group(wf_world *w, wf_group *g) {
    int r[64];
    for (int i = 0; i < wf_world_size(w); i++) r[i] = i;
    wf_gfc_group_init(g, r, wf_world_size(w));
}

/* ---- formation ------------------------------------------------------------------------------- */
#define ADDR_MAX 1024
#define CONV_ITERS 200
#define GFC_ITERS 200000

static int body_formation(wf_world *w, int rank, void *arg) {
    int n = wf_world_size(w);
    wf_group all;
    full_group(w, &all);
    /* The conventional way needs its own UCX worker whose endpoints are created per group. */
    ucp_config_t *config;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_config_read(NULL, NULL, &config);
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    if (ucp_init(&params, config, &ctx) != UCS_OK) return 1;
    ucp_config_release(config);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_worker_create(ctx, &wp, &worker) != UCS_OK) return 1;
    ucp_address_t *addr;
    size_t addr_len;
    ucp_worker_get_address(worker, &addr, &addr_len);
    if (addr_len > ADDR_MAX - 8) return 1;
    uint8_t mine[ADDR_MAX] = {0}, *table = malloc((size_t)n * ADDR_MAX);
    memcpy(mine, &addr_len, sizeof addr_len);
    memcpy(mine + 8, addr, addr_len);
    uint64_t *conv = malloc(sizeof(uint64_t) * CONV_ITERS);
    uint32_t seed = 99;
    int subset[64];
    for (int it = 0; it < CONV_ITERS; it++) {
        /* Every rank draws the same subset: the first k of a seeded shuffle, rank 0 in it. */
        int k = 2 + (int)((seed = seed * 1664525u + 1013904223u) >> 8) % (n - 1);
        int perm[64];
        for (int i = 0; i < n; i++) perm[i] = i;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)((seed = seed * 1664525u + 1013904223u) >> 8) % (i + 1);
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        subset[0] = 0;
        int m = 1;
        for (int i = 0; i < n && m < k; i++)
            if (perm[i] != 0) subset[m++] = perm[i];
        wf_group g;
        wf_gfc_group_init(&g, subset, k);
        if (wf_gfc_barrier(w, &all) != WF_OK) return 1;
        if (wf_gfc_group_index(&g, rank) < 0) continue;
        uint64_t t0 = wf_clock_now_ns();
        if (wf_gfc_allgather(w, &g, mine, table, ADDR_MAX) != WF_OK) return 1;
        ucp_ep_h eps[64];
        for (int i = 0; i < k; i++) {
            ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                  .address = (const ucp_address_t *)(table + (size_t)i * ADDR_MAX + 8)};
            if (ucp_ep_create(worker, &ep, &eps[i]) != UCS_OK) return 1;
        }
        conv[it] = wf_clock_now_ns() - t0;
        for (int i = 0; i < k; i++) {
            ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                       .flags = UCP_EP_CLOSE_FLAG_FORCE};
            void *req = ucp_ep_close_nbx(eps[i], &prm);
            while (req && UCS_PTR_IS_PTR(req) && ucp_request_check_status(req) == UCS_INPROGRESS)
                ucp_worker_progress(worker);
            if (req && UCS_PTR_IS_PTR(req)) ucp_request_free(req);
        }
    }
    if (wf_gfc_barrier(w, &all) != WF_OK) return 1;
    if (rank == 0) {
        /* Group-free: the same kind of subsets, formed locally. */
        uint64_t *gf = malloc(sizeof(uint64_t) * GFC_ITERS);
        int lists[16][64], ks[16];
        for (int s = 0; s < 16; s++) { /* rotations of 0..n-1, 2..n long */
            ks[s] = 2 + s % (n - 1);
            for (int i = 0; i < ks[s]; i++) lists[s][i] = (s + i) % n;
        }
        uint64_t sink = 0;
        for (int it = 0; it < GFC_ITERS; it++) {
            wf_group g;
            uint64_t t0 = wf_clock_now_ns();
            wf_gfc_group_init(&g, lists[it & 15], ks[it & 15]);
            gf[it] = wf_clock_now_ns() - t0;
            sink ^= g.id;
        }
        qsort(gf, GFC_ITERS, sizeof *gf, cmp_u64);
        int nc = CONV_ITERS;
        qsort(conv, CONV_ITERS, sizeof *conv, cmp_u64);
        double g50 = (double)gf[GFC_ITERS / 2], g99 = (double)gf[GFC_ITERS * 99 / 100];
        double c50 = (double)conv[nc / 2], c99 = (double)conv[nc * 99 / 100];
        printf("| %d | %.0f ns | %.0f ns | %.1f us | %.1f us | %.0fx | %.0fx |  (sink %llx)\n", n,
               g50, g99, c50 / 1e3, c99 / 1e3, c50 / g50, c99 / g99, (unsigned long long)sink & 1);
        free(gf);
    }
    free(conv);
    free(table);
    ucp_worker_release_address(worker, addr);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    return 0;
}

/* ---- collectives ----------------------------------------------------------------------------- */
enum { C_ALLREDUCE, C_ALLTOALL, C_ALLGATHER, C_REDUCE_SCATTER, C_BCAST, C_N };
static const char *cname[C_N] = {"allreduce", "alltoall", "allgather", "reduce_scatter",
                                 "broadcast"};

static int body_coll(wf_world *w, int rank, void *arg) {
    int n = wf_world_size(w);
    wf_group g;
    full_group(w, &g);
    static const size_t sizes[] = {4096, 65536, 1u << 20, 16u << 20, 64u << 20};
    size_t max = 64u << 20;
    void *a = malloc(max), *b = malloc(max);
    if (!a || !b) return 1;
    memset(a, 1, max);
    memset(b, 0, max);
    for (int c = 0; c < C_N; c++) {
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t S = sizes[si]; /* bytes of each rank's whole buffer */
            int iters = S <= 65536 ? 200 : S <= (1u << 20) ? 40 : S <= (16u << 20) ? 8 : 3;
            double best = 1e30;
            for (int rep = 0; rep < iters + 1; rep++) {
                if (wf_gfc_barrier(w, &g) != WF_OK) return 1;
                uint64_t t0 = wf_clock_now_ns();
                wf_status st = WF_OK;
                switch (c) {
                case C_ALLREDUCE: st = wf_gfc_allreduce_f32(w, &g, (float *)a, (float *)b, S / 4); break;
                case C_ALLTOALL: st = wf_gfc_alltoall(w, &g, a, b, S / (size_t)n); break;
                case C_ALLGATHER: st = wf_gfc_allgather(w, &g, a, b, S / (size_t)n); break;
                case C_REDUCE_SCATTER:
                    st = wf_gfc_reduce_scatter_f32(w, &g, (float *)a, (float *)b, S / 4 / (size_t)n);
                    break;
                case C_BCAST: st = wf_gfc_broadcast(w, &g, 0, a, S); break;
                }
                if (st != WF_OK) {
                    fprintf(stderr, "%s: %s\n", cname[c], wf_world_error(w));
                    return 1;
                }
                /* The slowest rank ends the collective: take the time after a barrier's
                 * first half, i.e. rank 0 measures until everyone is done. */
                if (wf_gfc_barrier(w, &g) != WF_OK) return 1;
                double us = (double)(wf_clock_now_ns() - t0) / 1e3;
                if (rep > 0 && us < best) best = us; /* rep 0 warms up */
            }
            double f = c == C_ALLREDUCE ? 2.0 * (n - 1) / n : c == C_BCAST ? 1.0 : (double)(n - 1) / n;
            if (rank == 0)
                printf("| %s | %d | %zu KiB | %.1f us | %.2f GB/s |\n", cname[c], n, S >> 10, best,
                       f * (double)S / (best * 1e-6) / 1e9);
            fflush(stdout);
        }
    }
    free(a);
    free(b);
    return 0;
}

/* ---- all-to-all by path ------------------------------------------------------------------------
 * The same all-to-all three ways in one run: tagged messages only (the path before puts; put
 * threshold SIZE_MAX), puts into malloc'd receive buffers (registered and cached by gfc), and
 * puts into buffers from wf_world_mem_alloc (reachable through shared memory); and in place in
 * one wf_world_mem_alloc buffer (send == recv: the pairs swap their blocks through the mapping). */
enum { P_MSG, P_PUT_MALLOC, P_PUT_ALLOC, P_IN_PLACE, P_N };
static const char *pname[P_N] = {"tagged messages", "puts, malloc'd buffers",
                                 "puts, wf_world_mem_alloc buffers",
                                 "in place, wf_world_mem_alloc buffer"};

static int body_a2a(wf_world *w, int rank, void *arg) {
    int n = wf_world_size(w);
    wf_group g;
    full_group(w, &g);
    static const size_t sizes[] = {4096,      65536,     262144,   1u << 20,
                                   4u << 20,  16u << 20, 64u << 20};
    size_t max = 64u << 20;
    for (int p = 0; p < P_N; p++) {
        uint8_t *a, *b;
        if (p == P_PUT_ALLOC || p == P_IN_PLACE) {
            a = wf_world_mem_alloc(w, max);
            b = p == P_IN_PLACE ? a : wf_world_mem_alloc(w, max);
        } else {
            a = malloc(max);
            b = malloc(max);
        }
        if (!a || !b) return 1;
        memset(a, 1, max);
        if (b != a) memset(b, 0, max);
        wf_gfc_set_put_threshold(w, p == P_MSG ? SIZE_MAX : 65536);
        wf_gfc_set_put_caller_memory(w, p == P_PUT_MALLOC);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t S = sizes[si];
            int iters = S <= 65536 ? 200 : S <= (1u << 20) ? 40 : S <= (16u << 20) ? 8 : 3;
            double best = 1e30, sum = 0;
            for (int rep = 0; rep < iters + 1; rep++) {
                if (wf_gfc_barrier(w, &g) != WF_OK) return 1;
                uint64_t t0 = wf_clock_now_ns();
                if (wf_gfc_alltoall(w, &g, a, b, S / (size_t)n) != WF_OK) {
                    fprintf(stderr, "alltoall: %s\n", wf_world_error(w));
                    return 1;
                }
                if (wf_gfc_barrier(w, &g) != WF_OK) return 1;
                double us = (double)(wf_clock_now_ns() - t0) / 1e3;
                if (rep > 0) { /* rep 0 warms up (and registers) */
                    sum += us;
                    if (us < best) best = us;
                }
            }
            double f = (double)(n - 1) / n;
            if (rank == 0)
                printf("| %s | %d | %zu KiB | %.1f us | %.1f us | %.2f GB/s | %.2f GB/s |\n",
                       pname[p], n, S >> 10, best, sum / iters, f * (double)S / (best * 1e-6) / 1e9,
                       f * (double)S / (sum / iters * 1e-6) / 1e9);
            fflush(stdout);
        }
        if (p == P_PUT_ALLOC || p == P_IN_PLACE) {
            wf_world_mem_free(w, a);
            if (b != a) wf_world_mem_free(w, b);
        } else {
            free(a);
            free(b);
        }
    }
    wf_world_stats st;
    wf_world_get_stats(w, &st);
    if (rank == 0)
        printf("rank 0: %llu registrations, %llu cache hits, %llu invalidations, "
               "%llu keys unpacked, %llu puts (%llu copies into mapped memory)\n",
               (unsigned long long)st.mem_registrations, (unsigned long long)st.mem_cache_hits,
               (unsigned long long)st.mem_invalidations, (unsigned long long)st.rkeys_unpacked,
               (unsigned long long)st.puts, (unsigned long long)st.puts_direct);
    return 0;
}

/* ---- one collective, one size ------------------------------------------------------------------ */
typedef struct size_args {
    int coll;       /* C_ALLTOALL, C_ALLGATHER or C_REDUCE_SCATTER */
    size_t bytes;   /* S: each rank's whole send buffer */
    int reps;
    int alloc;      /* buffers from wf_world_mem_alloc (1) or malloc (0) */
    int in_place;   /* all-to-all with send == recv (in one wf_world_mem_alloc buffer) */
    int batch;      /* collectives per repetition, back to back (times are per collective) */
} size_args;

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* This process's CPU time and time spent runnable but waiting for a CPU (ns), from
 * /proc/self/schedstat; zeros where it is not available. */
static void sched_times(double *cpu, double *delay) {
    unsigned long long run = 0, wait = 0;
    FILE *f = fopen("/proc/self/schedstat", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &run, &wait) != 2) run = wait = 0;
        fclose(f);
    }
    *cpu = (double)run;
    *delay = (double)wait;
}

static int body_size(wf_world *w, int rank, void *arg) {
    const size_args *a = arg;
    int n = wf_world_size(w);
    wf_group g;
    full_group(w, &g);
    size_t S = a->bytes, blk = S / (size_t)n;
    /* Ranks may outnumber cores: waiting ones sleep (see wf_world_set_idle_sleep). */
    wf_world_set_idle_sleep(w, 1);
    uint8_t *src = a->alloc ? wf_world_mem_alloc(w, S) : malloc(S);
    uint8_t *dst = a->in_place ? src : a->alloc ? wf_world_mem_alloc(w, S) : malloc(S);
    double *t = malloc(sizeof(double) * (size_t)a->reps);
    /* Per repetition and rank: CPU time and run-queue delay (us), to tell work from waiting
     * for a core on a loaded host. */
    double *cpu = calloc((size_t)a->reps, sizeof(double)), *dly = calloc((size_t)a->reps, sizeof(double));
    double *all = malloc(sizeof(double) * 2 * (size_t)a->reps * (size_t)n);
    if (!src || !dst || !t || !cpu || !dly || !all) return 1;
    memset(src, 1, S);
    if (dst != src) memset(dst, 0, S);
    for (int rep = 0; rep <= a->reps; rep++) {
        if (wf_gfc_barrier(w, &g) != WF_OK) return 1;
        double c0, d0, c1, d1;
        sched_times(&c0, &d0);
        uint64_t t0 = wf_clock_now_ns();
        wf_status st = WF_OK;
        for (int b = 0; b < a->batch && st == WF_OK; b++)
            st = a->coll == C_ALLTOALL ? wf_gfc_alltoall(w, &g, src, dst, blk)
                 : a->coll == C_ALLGATHER
                     ? wf_gfc_allgather(w, &g, src, dst, blk)
                     : wf_gfc_reduce_scatter_f32(w, &g, (float *)(void *)src, (float *)(void *)dst,
                                                 blk / 4);
        if (st != WF_OK) {
            fprintf(stderr, "%s: %s\n", cname[a->coll], wf_world_error(w));
            return 1;
        }
        sched_times(&c1, &d1); /* this rank's part ends here; the barrier waits for all */
        if (wf_gfc_barrier(w, &g) != WF_OK) return 1;
        if (rep > 0) { /* rep 0 warms up */
            t[rep - 1] = (double)(wf_clock_now_ns() - t0) / 1e3 / a->batch;
            cpu[rep - 1] = (c1 - c0) / 1e3 / a->batch;
            dly[rep - 1] = (d1 - d0) / 1e3 / a->batch;
        }
    }
    memcpy(all + (size_t)rank * 2 * (size_t)a->reps, cpu, sizeof(double) * (size_t)a->reps);
    memcpy(all + ((size_t)rank * 2 + 1) * (size_t)a->reps, dly, sizeof(double) * (size_t)a->reps);
    if (wf_gfc_allgather(w, &g, all + (size_t)rank * 2 * (size_t)a->reps, all,
                         sizeof(double) * 2 * (size_t)a->reps) != WF_OK)
        return 1;
    if (rank == 0) {
        /* Medians over repetitions of the per-rank maximum (the slowest rank ends it). */
        double *mc = malloc(sizeof(double) * (size_t)a->reps), *md = malloc(sizeof(double) * (size_t)a->reps);
        if (!mc || !md) return 1;
        for (int i = 0; i < a->reps; i++) {
            mc[i] = md[i] = 0;
            for (int r = 0; r < n; r++) {
                double c = all[(size_t)r * 2 * (size_t)a->reps + (size_t)i];
                double d = all[((size_t)r * 2 + 1) * (size_t)a->reps + (size_t)i];
                if (c > mc[i]) mc[i] = c;
                if (d > md[i]) md[i] = d;
            }
        }
        qsort(mc, (size_t)a->reps, sizeof *mc, cmp_dbl);
        qsort(md, (size_t)a->reps, sizeof *md, cmp_dbl);
        double cpu_med = mc[a->reps / 2], wait_med = md[a->reps / 2];
        wf_world_stats ws;
        wf_world_get_stats(w, &ws);
        fprintf(stderr, "rank 0: %llu puts, %llu of them copies into mapped memory\n",
                (unsigned long long)ws.puts, (unsigned long long)ws.puts_direct);
        free(mc);
        free(md);
        double sum = 0;
        for (int i = 0; i < a->reps; i++) sum += t[i];
        qsort(t, (size_t)a->reps, sizeof *t, cmp_dbl);
        double f = (double)(n - 1) / n, med = t[a->reps / 2], mean = sum / a->reps;
        printf("| %s | %s | %d | %zu KiB | %d | %.0f us | %.0f us | %.0f us | %.2f GB/s | "
               "%.2f GB/s | %.2f GB/s | %.0f us | %.0f us |\n",
               cname[a->coll],
               a->in_place ? "in place" : a->alloc ? "wf_world_mem_alloc" : "malloc", n, S >> 10,
               a->reps,
               t[0], med, mean, f * (double)S / (t[0] * 1e3), f * (double)S / (med * 1e3),
               f * (double)S / (mean * 1e3), cpu_med, wait_med);
        fflush(stdout);
    }
    if (a->alloc) {
        wf_world_mem_free(w, src);
        if (dst != src) wf_world_mem_free(w, dst);
    } else {
        free(src);
        free(dst);
    }
    free(t);
    free(cpu);
    free(dly);
    free(all);
    return 0;
}

static void bench_memcpy(void) {
    static const size_t sizes[] = {4096, 65536, 1u << 20, 16u << 20, 64u << 20};
    uint8_t *a = malloc(64u << 20), *b = malloc(64u << 20);
    memset(a, 1, 64u << 20);
    memset(b, 2, 64u << 20);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t S = sizes[si];
        int iters = (int)((256u << 20) / S) + 3;
        double best = 1e30;
        for (int it = 0; it < iters; it++) {
            uint64_t t0 = wf_clock_now_ns();
            memcpy(b, a, S);
            __asm__ volatile("" ::"r"(b) : "memory");
            double us = (double)(wf_clock_now_ns() - t0) / 1e3;
            if (us < best) best = us;
        }
        printf("| memcpy | %zu KiB | %.1f us | %.2f GB/s |\n", S >> 10, best, (double)S / (best * 1e-6) / 1e9);
    }
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "memcpy") == 0) {
        bench_memcpy();
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: %s formation N | coll N | a2a N | memcpy | "
                        "size N alltoall|allgather|reduce_scatter BYTES REPS "
                        "alloc|malloc|inplace [BATCH]\n",
                argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    if (n < 2 || n > WT_MAX_PROCS) return 2;
    wt_env env = wt_env_default(n);
    env.sym_size = 1u << 20;
    if (strcmp(argv[1], "size") == 0) {
        size_args sa = {.coll = -1};
        if (argc != 7 && argc != 8) {
            fprintf(stderr, "size: needs N COLLECTIVE BYTES REPS alloc|malloc|inplace [BATCH]\n");
            return 2;
        }
        for (int c = 0; c < C_N; c++)
            if (strcmp(argv[3], cname[c]) == 0) sa.coll = c;
        sa.bytes = strtoull(argv[4], NULL, 10);
        sa.reps = atoi(argv[5]);
        sa.in_place = strcmp(argv[6], "inplace") == 0;
        sa.batch = argc == 8 ? atoi(argv[7]) : 1;
        sa.alloc = sa.in_place || strcmp(argv[6], "alloc") == 0;
        if ((sa.coll != C_ALLTOALL && sa.coll != C_ALLGATHER && sa.coll != C_REDUCE_SCATTER) ||
            sa.bytes < 4u * (size_t)n || sa.reps < 1 || (!sa.alloc && strcmp(argv[6], "malloc")) ||
            (sa.in_place && sa.coll != C_ALLTOALL) || sa.batch < 1) {
            fprintf(stderr, "size: COLLECTIVE is alltoall, allgather or reduce_scatter; BYTES >= "
                            "4 * N; REPS >= 1; alloc, malloc or inplace (alltoall only); "
                            "BATCH >= 1\n");
            return 2;
        }
        return wt_run(&env, body_size, &sa, 1200) == 0 ? 0 : 1;
    }
    wt_rank_fn fn = strcmp(argv[1], "formation") == 0 ? body_formation
                    : strcmp(argv[1], "a2a") == 0     ? body_a2a
                                                      : body_coll;
    return wt_run(&env, fn, NULL, 1200) == 0 ? 0 : 1;
}
