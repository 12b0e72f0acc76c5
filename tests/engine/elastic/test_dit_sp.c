/* engine/elastic/dit_sp.c over a world of 4 real processes (UCX): the default DiT run with
 * Ulysses sequence parallelism on 2 and 4 ranks, guidance-parallel on 2, and a schedule that
 * changes the group between chunks (1 -> 2 -> guidance pair -> 4 -> 2 in another order -> 1 on
 * another rank) gives latents bit-identical to the single-rank stepper (engine/dit/dit_step.h),
 * for a batch with mixed labels, guidance scales and step indices; the same at another latent
 * grid than the native one (16x32). A member killed mid-request:
 * the survivor's step fails cleanly within the timeout and the request restarts on other ranks
 * with the same result. Plus the degree checks and argument errors.
 * weft-test: labels=net timeout=300 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "engine/cpu/threadpool.h"
#include "engine/dit/dit_gen.h"
#include "engine/dit/dit_step.h"
#include "engine/elastic/dit_sp.h"
#include "engine/world/world_launch.h"

#define MODEL WEFT_SOURCE_DIR "/deploy/models/weft-dit-fmnist"
enum { STEPS = 12, ITEMS = 4 };

static const int labels[ITEMS] = {3, 7, 0, 9};
static const float guidances[ITEMS] = {4.0f, 1.0f, 2.5f, 6.0f};

typedef struct ctx {
    wf_dit *model;
    wf_dit_sampler_config scfg;
    wf_threadpool *pool;
    wf_dit_sp *sp;
    size_t n;
    float *lat, *ref;
    wf_dit_item items[ITEMS];
    char err[512];
} ctx;

static wf_dit_item mk_item(float *latent, int i) {
    return (wf_dit_item){.latent = latent,
                         .label = labels[i],
                         .uncond_label = i == 2 ? 5 : -1,
                         .guidance = guidances[i],
                         .key = {.seed = 4242 + (uint64_t)i, .request = (uint32_t)i},
                         .step = 0,
                         .step_end = STEPS};
}

/* Loads the model (the default DiT, or when gen_path is set a generated one with learned sigma
 * run by DDPM learned_range: 2C model channels, noise at every step), computes the single-rank
 * reference with the plain stepper (item 1 starts two steps late, so rounds mix step indices),
 * and prepares the items' x_T. */
static int setup_grid(ctx *c, wf_world *w, const char *gen_path, int height, int width) {
    memset(c, 0, sizeof *c);
    wf_dit_options opt = wf_dit_options_default();
    opt.max_batch = 2 * ITEMS;
    opt.n_threads = 1;
    if (gen_path) {
        opt.heads = 4;
        opt.sample_size = 16;
    }
    if (wf_dit_load(gen_path ? gen_path : MODEL, &opt, &c->model, c->err, sizeof c->err) != WF_OK)
        WT_FAIL("load: %s", c->err);
    if (gen_path) {
        wf_dit_sampler_config_default(WF_DIT_SAMPLER_KIND_DDPM, &c->scfg);
        c->scfg.variance = WF_DIT_VARIANCE_LEARNED_RANGE;
    } else {
        if (wf_dit_sampler_config_load(wf_dit_get_paths(c->model)->scheduler_config, &c->scfg, c->err,
                                       sizeof c->err) != WF_OK)
            WT_FAIL("sampler: %s", c->err);
        c->scfg.eta = 0.7; /* DDIM with noise: the per-step noise of each slice is exercised too */
    }
    c->pool = wf_threadpool_new(1);
    int side = wf_dit_get_config(c->model)->sample_size;
    if (height <= 0 || width <= 0) height = width = side;
    if (wf_dit_sp_new(c->model, &c->scfg, STEPS, ITEMS, height, width, w, &c->sp, c->err, sizeof c->err) != WF_OK)
        WT_FAIL("sp: %s", c->err);
    c->n = wf_dit_sp_latent_size(c->sp);
    c->lat = malloc(sizeof(float) * c->n * ITEMS);
    c->ref = malloc(sizeof(float) * c->n * ITEMS);
    WT_CHECK(c->pool && c->lat && c->ref, "alloc");
    wf_dit_stepper *st;
    if (wf_dit_stepper_new(c->model, &c->scfg, STEPS, ITEMS, height, width, &st, c->err, sizeof c->err) != WF_OK)
        WT_FAIL("stepper: %s", c->err);
    wf_dit_item r[ITEMS];
    for (int i = 0; i < ITEMS; i++) {
        r[i] = mk_item(c->ref + (size_t)i * c->n, i);
        wf_dit_stepper_init_latent(st, &r[i]);
    }
    r[1].step_end = 2;
    if (wf_dit_stepper_run(st, c->pool, 1, &r[1], c->err, sizeof c->err) != WF_OK) WT_FAIL("ref: %s", c->err);
    r[1].step_end = STEPS;
    if (wf_dit_stepper_run(st, c->pool, ITEMS, r, c->err, sizeof c->err) != WF_OK) WT_FAIL("ref: %s", c->err);
    wf_dit_stepper_free(st);
    return 0;
}

static int setup_model(ctx *c, wf_world *w, const char *gen_path) { return setup_grid(c, w, gen_path, 0, 0); }

static int setup(ctx *c, wf_world *w) { return setup_model(c, w, NULL); }

static void reset_items(ctx *c) {
    for (int i = 0; i < ITEMS; i++) {
        c->items[i] = mk_item(c->lat + (size_t)i * c->n, i);
        wf_dit_sp_init_latent(c->sp, &c->items[i]);
    }
}

static void teardown(ctx *c) {
    wf_dit_sp_free(c->sp);
    wf_dit_free(c->model);
    wf_threadpool_free(c->pool);
    free(c->lat);
    free(c->ref);
}

/* Runs the items to step_end on pl if this rank is a member. */
static int run_on(ctx *c, wf_world *w, const wf_dit_placement *pl, int step_end) {
    for (int i = 0; i < ITEMS; i++) c->items[i].step_end = step_end;
    if (wf_gfc_group_index(&pl->group, wf_world_rank(w)) < 0) {
        for (int i = 0; i < ITEMS; i++) c->items[i].step = step_end > c->items[i].step ? step_end : c->items[i].step;
        return 0;
    }
    if (wf_dit_sp_run(c->sp, c->pool, pl, ITEMS, c->items, c->err, sizeof c->err) != WF_OK)
        WT_FAIL("run on %d ranks: %s", pl->group.n_ranks, c->err);
    return 0;
}

static int move(ctx *c, wf_world *w, const wf_dit_placement *from, const wf_dit_placement *to) {
    int me = wf_world_rank(w);
    if (wf_gfc_group_index(&from->group, me) < 0 && wf_gfc_group_index(&to->group, me) < 0) return 0;
    if (wf_dit_sp_reshard(c->sp, from, to, ITEMS, c->items, c->err, sizeof c->err) != WF_OK)
        WT_FAIL("reshard: %s", c->err);
    return 0;
}

/* Gathers the result on world rank 0 and compares it bit for bit with the reference. */
static int finish(ctx *c, wf_world *w, const wf_dit_placement *last, const char *what) {
    int r0 = 0;
    wf_dit_placement p0 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, &r0, 1);
    if (move(c, w, last, &p0)) return 1;
    if (wf_world_rank(w) != 0) return 0;
    for (int i = 0; i < ITEMS; i++) {
        WT_CHECK(c->items[i].step == STEPS, "%s: item %d at step %d", what, i, c->items[i].step);
        const float *a = c->lat + (size_t)i * c->n, *b = c->ref + (size_t)i * c->n;
        for (size_t j = 0; j < c->n; j++)
            if (a[j] != b[j])
                WT_FAIL("%s: item %d element %zu: %.9g vs single-rank %.9g", what, i, j, a[j], b[j]);
    }
    return 0;
}

/* Every scenario starts from x_T on every rank (a pure function of the key); item 1 starts two
 * steps late as in the reference. */
static int start(ctx *c, wf_world *w, const wf_dit_placement *pl) {
    reset_items(c);
    wf_dit_item *it = &c->items[1];
    if (wf_gfc_group_index(&pl->group, wf_world_rank(w)) < 0) {
        it->step = 2; /* the members' rows of it are two steps on; ours are not held */
        return 0;
    }
    it->step_end = 2;
    if (wf_dit_sp_run(c->sp, c->pool, pl, 1, it, c->err, sizeof c->err) != WF_OK) WT_FAIL("start: %s", c->err);
    return 0;
}

static int body_invariance(wf_world *w, int rank, void *arg) {
    (void)arg;
    (void)rank;
    ctx c;
    if (setup(&c, w)) return 1;
    const int r01[] = {0, 1}, r3102[] = {3, 1, 0, 2}, r12[] = {1, 2}, r20[] = {2, 0}, r31[] = {3, 1};
    const int r0[] = {0}, r2[] = {2};
    wf_dit_placement p1 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r0, 1);
    wf_dit_placement p2 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r01, 2);
    wf_dit_placement p4 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r3102, 4);
    wf_dit_placement g2 = wf_dit_placement_make(WF_DIT_SP_CFG, r01, 2);
    int rc = 0;
    /* static placements: P = 1, Ulysses 2, Ulysses 4, guidance-parallel 2 */
    const wf_dit_placement *stat[] = {&p1, &p2, &p4, &g2};
    const char *names[] = {"P=1", "Ulysses P=2", "Ulysses P=4", "guidance-parallel"};
    for (int s = 0; s < 4 && !rc; s++) {
        if (!rc) rc = start(&c, w, &p1);
        if (!rc) rc = move(&c, w, &p1, stat[s]);
        if (!rc) rc = run_on(&c, w, stat[s], STEPS);
        if (!rc) rc = finish(&c, w, stat[s], names[s]);
    }
    /* elastic: 1 -> 2 -> 1 (back on rank 0) */
    if (!rc) {
        if (!rc) rc = start(&c, w, &p1);
        if (!rc) rc = run_on(&c, w, &p1, 4);
        if (!rc) rc = move(&c, w, &p1, &p2);
        if (!rc) rc = run_on(&c, w, &p2, 8);
        if (!rc) rc = move(&c, w, &p2, &p1);
        if (!rc) rc = run_on(&c, w, &p1, STEPS);
        if (!rc) rc = finish(&c, w, &p1, "1->2->1");
    }
    /* elastic over other ranks: {0} -> {1,2} -> CFG {2,0} -> {3,1,0,2} -> {3,1} -> {2} */
    if (!rc) {
        wf_dit_placement a = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r12, 2);
        wf_dit_placement b = wf_dit_placement_make(WF_DIT_SP_CFG, r20, 2);
        wf_dit_placement d = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r31, 2);
        wf_dit_placement e = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r2, 1);
        if (!rc) rc = start(&c, w, &p1);
        if (!rc) rc = run_on(&c, w, &p1, 3);
        if (!rc) rc = move(&c, w, &p1, &a);
        if (!rc) rc = run_on(&c, w, &a, 5);
        if (!rc) rc = move(&c, w, &a, &b);
        if (!rc) rc = run_on(&c, w, &b, 7);
        if (!rc) rc = move(&c, w, &b, &p4);
        if (!rc) rc = run_on(&c, w, &p4, 9);
        if (!rc) rc = move(&c, w, &p4, &d);
        if (!rc) rc = run_on(&c, w, &d, 10);
        if (!rc) rc = move(&c, w, &d, &e);
        if (!rc) rc = run_on(&c, w, &e, STEPS);
        if (!rc) rc = finish(&c, w, &e, "moving groups");
    }
    teardown(&c);
    return rc;
}

/* Ranks outside a group wait in the next reshard while the members compute: on a loaded
 * machine that can take longer than the default 20 s, which is not what these tests test. */
START_TEST(test_elastic_invariance) {
    wt_env env = wt_env_default(4);
    env.timeout_ms = 120000;
    ck_assert_int_eq(wt_run(&env, body_invariance, NULL, 240), 0);
}
END_TEST

/* Another latent grid than the model's native 32x32 (16 high, 32 wide: 4 x 8 patches, as
 * weftd serves other sizes): P = 1, Ulysses over 2, guidance-parallel, and 1 -> 2 -> CFG -> 1
 * on the other rank, bit-identical to the single-rank stepper at that grid. */
static int body_other_size(wf_world *w, int rank, void *arg) {
    (void)arg;
    (void)rank;
    ctx c;
    if (setup_grid(&c, w, NULL, 16, 32)) return 1;
    const int r0[] = {0}, r1[] = {1}, r01[] = {0, 1}, r10[] = {1, 0};
    wf_dit_placement p1 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r0, 1);
    wf_dit_placement q1 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r1, 1);
    wf_dit_placement p2 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r01, 2);
    wf_dit_placement g2 = wf_dit_placement_make(WF_DIT_SP_CFG, r10, 2);
    int rc = 0;
    const wf_dit_placement *stat[] = {&p1, &p2, &g2};
    const char *names[] = {"16x32 P=1", "16x32 Ulysses P=2", "16x32 guidance-parallel"};
    for (int s = 0; s < 3 && !rc; s++) {
        if (!rc) rc = start(&c, w, &p1);
        if (!rc) rc = move(&c, w, &p1, stat[s]);
        if (!rc) rc = run_on(&c, w, stat[s], STEPS);
        if (!rc) rc = finish(&c, w, stat[s], names[s]);
    }
    if (!rc) rc = start(&c, w, &p1);
    if (!rc) rc = run_on(&c, w, &p1, 3);
    if (!rc) rc = move(&c, w, &p1, &p2);
    if (!rc) rc = run_on(&c, w, &p2, 6);
    if (!rc) rc = move(&c, w, &p2, &g2);
    if (!rc) rc = run_on(&c, w, &g2, 9);
    if (!rc) rc = move(&c, w, &g2, &q1);
    if (!rc) rc = run_on(&c, w, &q1, STEPS);
    if (!rc) rc = finish(&c, w, &q1, "16x32 1->2->CFG->1");
    teardown(&c);
    return rc;
}

START_TEST(test_other_size_invariance) {
    wt_env env = wt_env_default(2);
    env.timeout_ms = 120000;
    ck_assert_int_eq(wt_run(&env, body_other_size, NULL, 240), 0);
}
END_TEST

/* The kill tests' placements: rank 0 alone, the group {0, 1} that loses rank 1, and {0, 2}
 * where the request restarts. */
typedef struct kill_groups {
    wf_dit_placement p0, p01, p02;
} kill_groups;

static kill_groups make_kill_groups(void) {
    static const int r01[] = {0, 1}, r02[] = {0, 2};
    return (kill_groups){wf_dit_placement_make(WF_DIT_SP_ULYSSES, r01, 1),
                         wf_dit_placement_make(WF_DIT_SP_ULYSSES, r01, 2),
                         wf_dit_placement_make(WF_DIT_SP_ULYSSES, r02, 2)};
}

/* The kill tests' first chunks: the model set up, the request started on rank 0, moved to {0,
 * 1} and 4 steps run there. */
static int run_before_kill(ctx *c, wf_world *w, const kill_groups *g) {
    if (setup(c, w)) return 1;
    wf_world_set_timeout_ms(w, 60000);
    return start(c, w, &g->p0) || move(c, w, &g->p0, &g->p01) || run_on(c, w, &g->p01, 4);
}

/* The restart from x_T on {0, 2} (item 1 two steps late, as the reference), bit-identical to the
 * single-rank run; tears the model down. */
static int restart_on_02(ctx *c, wf_world *w, const kill_groups *g) {
    wf_world_set_timeout_ms(w, 60000);
    if (start(c, w, &g->p0) || move(c, w, &g->p0, &g->p02) || run_on(c, w, &g->p02, STEPS) ||
        finish(c, w, &g->p02, "restart"))
        return 1;
    teardown(c);
    return 0;
}

/* A member killed during a 2-rank step: the survivor's run fails with WF_EPEER or
 * WF_ETIMEDOUT within the world's timeout (no hang); since a trajectory is a pure function of
 * its key, the request restarts from x_T on other ranks ({0, 2}) and still ends bit-identical
 * to the single-rank run. */
static int body_killed_member(wf_world *w, int rank, void *arg) {
    (void)arg;
    ctx c;
    kill_groups g = make_kill_groups();
    if (rank == 2) { /* joins the restart: waits for the survivor's failure detection */
        if (setup(&c, w)) return 1;
        return restart_on_02(&c, w, &g);
    }
    if (run_before_kill(&c, w, &g)) return 1;
    if (rank == 1) raise(SIGKILL); /* dies between chunks: rank 0 is already in the next */
    wf_world_set_timeout_ms(w, 4000);
    for (int i = 0; i < ITEMS; i++) c.items[i].step_end = 8;
    uint64_t t0 = wf_clock_now_ns();
    wf_status st = wf_dit_sp_run(c.sp, c.pool, &g.p01, ITEMS, c.items, c.err, sizeof c.err);
    double ms = (double)(wf_clock_now_ns() - t0) / 1e6;
    WT_CHECK(st == WF_EPEER || st == WF_ETIMEDOUT, "run with a dead member: %s: %s", wf_status_name(st), c.err);
    WT_CHECK(strstr(c.err, "rank 1") != NULL, "%s", c.err);
    WT_CHECK(ms < 4000 + 3000, "noticed after %.0f ms", ms);
    fprintf(stderr, "rank 0: %s after %.0f ms: %s\n", wf_status_name(st), ms, c.err);
    return restart_on_02(&c, w, &g);
}

/* Three ranks run body; rank 1 kills itself, the others must finish cleanly. */
static void run_with_rank1_killed(int (*body)(wf_world *, int, void *)) {
    wt_env env = wt_env_default(3);
    env.timeout_ms = 120000;
    pid_t pids[3];
    int codes[3];
    for (int r = 0; r < 3; r++) pids[r] = wt_spawn(&env, r, body, NULL);
    wt_wait(pids, 3, 200, codes);
    ck_assert_int_eq(codes[0], 0);
    ck_assert_int_eq(codes[1], 128 + SIGKILL);
    ck_assert_int_eq(codes[2], 0);
}

START_TEST(test_killed_member_restart) {
    run_with_rank1_killed(body_killed_member);
}
END_TEST

/* A holder killed between chunks, before the reshard that moves its rows to a new group: the
 * reshard fails on every other rank of the two groups with WF_EPEER or WF_ETIMEDOUT within the
 * world's timeout (no hang), and the request restarts from x_T on {0, 2}, bit-identical. */
static int body_killed_holder(wf_world *w, int rank, void *arg) {
    (void)arg;
    ctx c;
    kill_groups g = make_kill_groups();
    if (run_before_kill(&c, w, &g)) return 1;
    if (rank == 1) raise(SIGKILL); /* holds rows 1/2 of every latent */
    wf_world_set_timeout_ms(w, 4000);
    uint64_t t0 = wf_clock_now_ns();
    wf_status st = wf_dit_sp_reshard(c.sp, &g.p01, &g.p02, ITEMS, c.items, c.err, sizeof c.err);
    double ms = (double)(wf_clock_now_ns() - t0) / 1e6;
    WT_CHECK(st == WF_EPEER || st == WF_ETIMEDOUT, "rank %d: reshard with a dead holder: %s: %s", rank,
             wf_status_name(st), c.err);
    WT_CHECK(ms < 4000 + 3000, "rank %d: noticed after %.0f ms", rank, ms);
    fprintf(stderr, "rank %d: reshard %s after %.0f ms: %s\n", rank, wf_status_name(st), ms, c.err);
    return restart_on_02(&c, w, &g);
}

START_TEST(test_killed_holder_reshard) {
    run_with_rank1_killed(body_killed_holder);
}
END_TEST

/* A generated DiT with learned sigma (8 output channels for 4, DDPM learned_range reads the
 * second half) and a 16x16 latent: Ulysses over 2 and 4 ranks and guidance-parallel pairs,
 * moving between them, still bit-identical. */
static int body_learned_sigma(wf_world *w, int rank, void *arg) {
    (void)rank;
    ctx c;
    if (setup_model(&c, w, arg)) return 1;
    const int r0[] = {0}, r10[] = {1, 0}, r0123[] = {0, 1, 2, 3}, r32[] = {3, 2};
    wf_dit_placement p1 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r0, 1);
    wf_dit_placement p2 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r10, 2);
    wf_dit_placement p4 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r0123, 4);
    wf_dit_placement g2 = wf_dit_placement_make(WF_DIT_SP_CFG, r32, 2);
    int rc = start(&c, w, &p1);
    if (!rc) rc = move(&c, w, &p1, &p4);
    if (!rc) rc = run_on(&c, w, &p4, 4);
    if (!rc) rc = move(&c, w, &p4, &g2);
    if (!rc) rc = run_on(&c, w, &g2, 8);
    if (!rc) rc = move(&c, w, &g2, &p2);
    if (!rc) rc = run_on(&c, w, &p2, STEPS);
    if (!rc) rc = finish(&c, w, &p2, "learned sigma");
    teardown(&c);
    return rc;
}

START_TEST(test_learned_sigma_model) {
    char path[] = "/tmp/weft-dit-sp-XXXXXX.safetensors";
    int fd = mkstemps(path, 12);
    ck_assert_int_ge(fd, 0);
    close(fd);
    dit_gen_cfg g = {64, 4, 2, 4, 8, 2, 16, 10}; /* hidden, heads, depth, in, out, patch, sample, classes */
    ck_assert_int_eq(dit_gen_write_original(&g, 5, path), 0);
    wt_env env = wt_env_default(4);
    env.timeout_ms = 120000;
    int bad = wt_run(&env, body_learned_sigma, path, 240);
    unlink(path);
    ck_assert_int_eq(bad, 0);
}
END_TEST

static int body_errors(wf_world *w, int rank, void *arg) {
    (void)arg;
    ctx c;
    if (setup(&c, w)) return 1;
    const wf_dit_config *cfg = wf_dit_get_config(c.model); /* 4 heads, patch 4, 32x32: 8 patch rows */
    char err[256] = "";
    WT_CHECK(wf_dit_sp_check(cfg, 32, 32, WF_DIT_SP_ULYSSES, 3, err, sizeof err) == WF_EINVAL, "P=3");
    WT_CHECK(strstr(err, "heads") != NULL, "%s", err);
    WT_CHECK(wf_dit_sp_check(cfg, 24, 32, WF_DIT_SP_ULYSSES, 4, err, sizeof err) == WF_EINVAL, "hp 6");
    WT_CHECK(strstr(err, "patch rows") != NULL, "%s", err);
    WT_CHECK(wf_dit_sp_check(cfg, 30, 32, WF_DIT_SP_ULYSSES, 1, err, sizeof err) == WF_EINVAL, "30");
    WT_CHECK(wf_dit_sp_check(cfg, 32, 32, WF_DIT_SP_CFG, 4, err, sizeof err) == WF_EINVAL, "cfg 4");
    WT_CHECK(wf_dit_sp_check(cfg, 32, 32, WF_DIT_SP_ULYSSES, 4, err, sizeof err) == WF_OK, "%s", err);
    WT_CHECK(wf_dit_sp_fit(cfg, 32, 32, 3) == 2, "fit 3");
    WT_CHECK(wf_dit_sp_fit(cfg, 32, 32, 8) == 4, "fit 8");
    WT_CHECK(wf_dit_sp_fit(cfg, 24, 32, 4) == 2, "fit hp 6");
    /* the daemon's mode rule: CFG on two ranks for all-guided batches or an odd row count */
    WT_CHECK(wf_dit_sp_choose(cfg, 32, 32, 2, 2, 2) == WF_DIT_SP_CFG, "all guided");
    WT_CHECK(wf_dit_sp_choose(cfg, 32, 32, 2, 2, 1) == WF_DIT_SP_ULYSSES, "one unguided");
    WT_CHECK(wf_dit_sp_choose(cfg, 32, 32, 2, 1, 0) == WF_DIT_SP_ULYSSES, "unguided");
    WT_CHECK(wf_dit_sp_choose(cfg, 32, 32, 4, 1, 1) == WF_DIT_SP_ULYSSES, "P 4");
    WT_CHECK(wf_dit_sp_choose(cfg, 32, 32, 1, 1, 1) == WF_DIT_SP_ULYSSES, "P 1");
    WT_CHECK(wf_dit_sp_choose(cfg, 36, 32, 2, 1, 0) == WF_DIT_SP_CFG, "9 patch rows");
    reset_items(&c);
    const int r012[] = {0, 1, 2}, r1[] = {1}, rbad[] = {0, 0};
    wf_dit_placement p3 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r012, 3);
    WT_CHECK(wf_dit_sp_run(c.sp, c.pool, &p3, ITEMS, c.items, err, sizeof err) == WF_EINVAL, "run P=3");
    WT_CHECK(strstr(err, "heads") != NULL, "%s", err);
    wf_dit_placement bad = wf_dit_placement_make(WF_DIT_SP_ULYSSES, rbad, 2);
    WT_CHECK(wf_dit_sp_run(c.sp, c.pool, &bad, ITEMS, c.items, err, sizeof err) == WF_EINVAL, "dup");
    if (rank == 0) {
        wf_dit_placement other = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r1, 1);
        WT_CHECK(wf_dit_sp_run(c.sp, c.pool, &other, ITEMS, c.items, err, sizeof err) == WF_EINVAL, "member");
        WT_CHECK(strstr(err, "not a member") != NULL, "%s", err);
        WT_CHECK(wf_dit_sp_reshard(c.sp, &other, &other, ITEMS, c.items, err, sizeof err) == WF_EINVAL, "rs");
        c.items[0].label = 11;
        wf_dit_placement me = wf_dit_placement_make(WF_DIT_SP_ULYSSES, &rank, 1);
        WT_CHECK(wf_dit_sp_run(c.sp, c.pool, &me, ITEMS, c.items, err, sizeof err) == WF_EINVAL, "label");
        WT_CHECK(wf_dit_sp_run(c.sp, c.pool, &me, ITEMS + 1, c.items, err, sizeof err) == WF_EINVAL, "items");
        /* reshard bytes: {0} -> {0,1} sends rank 1 its half of every latent */
        const int r01[] = {0, 1};
        wf_dit_placement two = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r01, 2);
        WT_CHECK(wf_dit_sp_reshard_bytes(c.sp, &me, &two, ITEMS, 0) == ITEMS * c.n / 2 * sizeof(float), "bytes");
        WT_CHECK(wf_dit_sp_reshard_bytes(c.sp, &two, &me, ITEMS, 1) == ITEMS * c.n / 2 * sizeof(float), "bytes");
        WT_CHECK(wf_dit_sp_reshard_bytes(c.sp, &two, &me, ITEMS, 0) == 0, "bytes");
        /* The runner-free plan a coordinator counts with (channels x side x side): the
         * same bytes; {0} -> {1} moves every row; CFG {0,1} -> {1} moves nothing (1 holds it
         * all); Ulysses {0,1} -> CFG {0,1}: each member sends the other its half. */
        const int pch = wf_dit_get_config(c.model)->patch_size, sd = wf_dit_get_config(c.model)->sample_size;
        const int ch = (int)(c.n / (size_t)(sd * sd));
        wf_dit_placement one1 = wf_dit_placement_make(WF_DIT_SP_ULYSSES, r1, 1);
        wf_dit_placement cfg2 = wf_dit_placement_make(WF_DIT_SP_CFG, r01, 2);
        WT_CHECK(wf_dit_sp_plan_bytes(&me, &two, pch, ch, sd, sd, ITEMS, 0) ==
                     wf_dit_sp_reshard_bytes(c.sp, &me, &two, ITEMS, 0), "plan bytes");
        WT_CHECK(wf_dit_sp_plan_bytes(&me, &one1, pch, ch, sd, sd, 1, 0) == c.n * sizeof(float), "plan move");
        WT_CHECK(wf_dit_sp_plan_bytes(&cfg2, &one1, pch, ch, sd, sd, 1, 0) == 0, "plan cfg");
        WT_CHECK(wf_dit_sp_plan_bytes(&two, &cfg2, pch, ch, sd, sd, 1, 1) == c.n / 2 * sizeof(float), "plan u2c");
    }
    teardown(&c);
    return 0;
}

START_TEST(test_checks_and_errors) {
    wt_env env = wt_env_default(2);
    env.timeout_ms = 120000;
    ck_assert_int_eq(wt_run(&env, body_errors, NULL, 120), 0);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("dit_sp");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 280);
    tcase_add_test(tc, test_elastic_invariance);
    tcase_add_test(tc, test_other_size_invariance);
    tcase_add_test(tc, test_checks_and_errors);
    tcase_add_test(tc, test_killed_member_restart);
    tcase_add_test(tc, test_killed_holder_reshard);
    tcase_add_test(tc, test_learned_sigma_model);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(suite)
