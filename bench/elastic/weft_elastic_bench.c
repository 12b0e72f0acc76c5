/* DiT step time T(tokens, P) on real ranks: a world of 2 processes over UCX (1 thread each),
 * a random-weight DiT-S/2 (the tests' generator), one image per step, for P = 1 (rank 0 alone),
 * Ulysses P = 2, and for a guided image (2 rows) also guidance-parallel P = 2; plus the time of
 * resharding a latent from 1 to 2 ranks. Prints one line per size with the medians, and
 * "cost TOKENS P MS [guided|cfg]" lines: `grep ^cost | cut -c6-` is a cost file for weft-dit-sim.
 * Also a batch of 2 unguided images per step on P = 1 and P = 2 ("batch TOKENS P N MS" lines):
 * what a multi-rank group running two jobs at once would cost against one.
 *
 *     weft-elastic-bench [--sizes 32,64,96] [--iters 5] [--model s2|b2]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/dit/dit_gen.h"
#include "engine/elastic/dit_sp.h"
#include "engine/world/world_launch.h"
#include "proto/base/clock.h"

typedef struct args {
    int sizes[8], n_sizes, iters;
    const char *model;
    char path[64];
} args;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median ms of `iters` single steps of the items on pl (every world rank calls this). */
static int time_steps(wf_world *w, wf_dit_sp *sp, wf_threadpool *pool, const wf_dit_placement *pl, wf_dit_item *it,
                      int n_items, int iters, double *median) {
    double ms[64];
    char err[512];
    int all[2] = {0, 1};
    wf_group world;
    wf_gfc_group_init(&world, all, 2);
    bool member = wf_gfc_group_index(&pl->group, wf_world_rank(w)) >= 0;
    for (int k = 0; k < iters + 1; k++) {
        if (wf_gfc_barrier(w, &world) != WF_OK) return 1;
        uint64_t t0 = wf_clock_now_ns();
        for (int i = 0; i < n_items; i++) {
            it[i].step = 0;
            it[i].step_end = 1;
        }
        if (member && wf_dit_sp_run(sp, pool, pl, n_items, it, err, sizeof err) != WF_OK) {
            fprintf(stderr, "run: %s\n", err);
            return 1;
        }
        if (k > 0) ms[k - 1] = (double)(wf_clock_now_ns() - t0) / 1e6; /* first: warm-up */
    }
    qsort(ms, (size_t)iters, sizeof ms[0], cmp_d);
    *median = ms[iters / 2];
    return 0;
}

static int body(wf_world *w, int rank, void *arg) {
    args *a = arg;
    wf_dit_options opt = wf_dit_options_default();
    int maxs = 0;
    for (int i = 0; i < a->n_sizes; i++) maxs = a->sizes[i] > maxs ? a->sizes[i] : maxs;
    opt.max_batch = 4;
    opt.max_height = opt.max_width = maxs;
    opt.n_threads = 1;
    wf_dit *m;
    char err[512];
    if (wf_dit_load(a->path, &opt, &m, err, sizeof err) != WF_OK) WT_FAIL("load: %s", err);
    const wf_dit_config *c = wf_dit_get_config(m);
    wf_threadpool *pool = wf_threadpool_new(1);
    wf_dit_sampler_config scfg;
    wf_dit_sampler_config_default(WF_DIT_SAMPLER_KIND_DDIM, &scfg);
    const int r0[] = {0}, r01[] = {0, 1};
    wf_dit_placement p1 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r0, 1);
    wf_dit_placement p2 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r01, 2);
    wf_dit_placement g2 = wf_dit_placement_make(WF_DIT_SP_CFG, r01, 2);
    for (int s = 0; s < a->n_sizes; s++) {
        int side = a->sizes[s], tokens = (side / c->patch_size) * (side / c->patch_size);
        wf_dit_sp *sp;
        if (wf_dit_sp_new(m, &scfg, 50, 2, side, side, w, &sp, err, sizeof err) != WF_OK) WT_FAIL("sp: %s", err);
        float *lat = malloc(sizeof(float) * wf_dit_sp_latent_size(sp));
        float *lat2 = malloc(sizeof(float) * wf_dit_sp_latent_size(sp));
        if (!lat || !lat2) WT_FAIL("out of memory");
        wf_dit_item it = {.latent = lat, .label = 1, .uncond_label = -1, .guidance = 1.0f, .key = {.seed = 1}};
        wf_dit_sp_init_latent(sp, &it);
        double t1, t2, g1, gu, gc, rs;
        if (time_steps(w, sp, pool, &p1, &it, 1, a->iters, &t1) || time_steps(w, sp, pool, &p2, &it, 1, a->iters, &t2))
            return 1;
        it.guidance = 4.0f;
        if (time_steps(w, sp, pool, &p1, &it, 1, a->iters, &g1) || time_steps(w, sp, pool, &p2, &it, 1, a->iters, &gu) ||
            time_steps(w, sp, pool, &g2, &it, 1, a->iters, &gc))
            return 1;
        /* two unguided images in one step, on 1 and on 2 ranks */
        double b1, b2;
        it.guidance = 1.0f;
        wf_dit_item two[2] = {it, it};
        two[1].latent = lat2;
        two[1].key.request = 1;
        wf_dit_sp_init_latent(sp, &two[1]);
        if (time_steps(w, sp, pool, &p1, two, 2, a->iters, &b1) || time_steps(w, sp, pool, &p2, two, 2, a->iters, &b2))
            return 1;
        /* reshard 1 -> 2 ranks (half the latent moves), median of iters */
        double rms[64];
        for (int k = 0; k < a->iters; k++) {
            uint64_t t0 = wf_clock_now_ns();
            if (wf_dit_sp_reshard(sp, &p1, &p2, 1, &it, err, sizeof err) != WF_OK) WT_FAIL("reshard: %s", err);
            rms[k] = (double)(wf_clock_now_ns() - t0) / 1e6;
        }
        qsort(rms, (size_t)a->iters, sizeof rms[0], cmp_d);
        rs = rms[a->iters / 2];
        /* a whole 10-step request (unguided) on 1 and on 2 ranks, against the prediction from
         * the per-step medians above: what weft-dit-sim would say for it alone */
        double req[2];
        const wf_dit_placement *pls[2] = {&p1, &p2};
        it.guidance = 1.0f;
        for (int k = 0; k < 2; k++) {
            int all[2] = {0, 1};
            wf_group wg;
            wf_gfc_group_init(&wg, all, 2);
            if (wf_gfc_barrier(w, &wg) != WF_OK) return 1;
            it.step = 0;
            it.step_end = 10;
            uint64_t t0 = wf_clock_now_ns();
            if (wf_gfc_group_index(&pls[k]->group, rank) >= 0 &&
                wf_dit_sp_run(sp, pool, pls[k], 1, &it, err, sizeof err) != WF_OK)
                WT_FAIL("request: %s", err);
            req[k] = (double)(wf_clock_now_ns() - t0) / 1e6;
        }
        if (rank == 0) {
            printf("model=%s side=%d tokens=%d one_row: P1_ms=%.2f P2_ms=%.2f speedup=%.2f | guided(2 rows): "
                   "P1_ms=%.2f ulysses2_ms=%.2f (x%.2f) cfg2_ms=%.2f (x%.2f) | reshard_1to2_ms=%.3f bytes=%zu\n",
                   a->model, side, tokens, t1, t2, t1 / t2, g1, gu, g1 / gu, gc, g1 / gc, rs,
                   wf_dit_sp_reshard_bytes(sp, &p1, &p2, 1, 0));
            printf("model=%s tokens=%d request of 10 steps: P1 real %.1f ms vs predicted %.1f (%+.1f%%), "
                   "P2 real %.1f ms vs predicted %.1f (%+.1f%%)\n",
                   a->model, tokens, req[0], 10 * t1, 100.0 * (req[0] - 10 * t1) / (10 * t1), req[1], 10 * t2,
                   100.0 * (req[1] - 10 * t2) / (10 * t2));
            /* the measured cost model weft-dit-sim --cost-file reads: tokens P ms [mode]; the
             * guided times are of one guided image (2 rows: its two halves) */
            printf("model=%s tokens=%d batch of 2 (unguided): P1_ms=%.2f (x%.2f of one) P2_ms=%.2f (x%.2f of one); "
                   "2 images on 2 ranks: batched %.2f ms a step vs one after the other %.2f (x%.2f) vs each on its "
                   "own rank %.2f\n",
                   a->model, tokens, b1, b1 / t1, b2, b2 / t2, b2, 2 * t2, 2 * t2 / b2, t1);
            printf("batch %d 1 2 %.3f\nbatch %d 2 2 %.3f\n", tokens, b1, tokens, b2);
            printf("cost %d 1 %.3f\ncost %d 2 %.3f\n", tokens, t1, tokens, t2);
            printf("cost %d 1 %.3f guided\ncost %d 2 %.3f guided\ncost %d 2 %.3f cfg\n", tokens, g1, tokens, gu,
                   tokens, gc);
            fflush(stdout);
        }
        free(lat);
        free(lat2);
        wf_dit_sp_free(sp);
    }
    wf_threadpool_free(pool);
    wf_dit_free(m);
    return 0;
}

int main(int argc, char **argv) {
    args a = {.sizes = {32, 64, 96}, .n_sizes = 3, .iters = 5, .model = "s2"};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) a.iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) a.model = argv[++i];
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            a.n_sizes = 0;
            for (char *t = strtok(argv[++i], ","); t && a.n_sizes < 8; t = strtok(NULL, ",")) a.sizes[a.n_sizes++] = atoi(t);
        } else {
            fprintf(stderr, "usage: %s [--sizes 32,64,96] [--iters N] [--model s2|b2]\n", argv[0]);
            return 2;
        }
    }
    if (a.iters < 1 || a.iters > 63 || a.n_sizes < 1) return 2;
    dit_gen_cfg g = {384, 6, 12, 4, 8, 2, 32, 1000};
    if (!strcmp(a.model, "b2")) g.hidden = 768, g.heads = 12;
    strcpy(a.path, "/tmp/weft-elastic-bench-XXXXXX.safetensors");
    int fd = mkstemps(a.path, 12);
    if (fd < 0 || dit_gen_write_original(&g, 1, a.path) != 0) {
        fprintf(stderr, "cannot write the model\n");
        return 1;
    }
    close(fd);
    wt_env env = wt_env_default(2);
    env.timeout_ms = 600000;
    env.sym_size = 1u << 20;
    int bad = wt_run(&env, body, &a, 3600);
    unlink(a.path);
    return bad ? 1 : 0;
}
