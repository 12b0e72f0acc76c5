/* A mixed S/L image workload on real ranks under the DiT placement policies: a world of 3
 * processes over UCX, rank 0 the coordinator (it runs the policy of sched/dit_policy.h on the
 * wall clock, sends commands, takes completions) and ranks 1 and 2 the workers (1 thread each),
 * which run steps with engine/elastic (Ulysses over both, or alone) and reshard latents between
 * groups as the policy moves jobs. The cost model the policies use is measured on the workers
 * at start-up (every degree the world allows) and corrected online from the task times the
 * coordinator observes (deadlines stay on the start-up figures, the same for every policy).
 * Each policy replays the same arrivals; prints
 * SLO attainment per class, mean and p99 latency.
 *
 *     weft-elastic-workload [--jobs 24] [--rate 2.0] [--steps 8] [--policies static:1,static:2,elastic]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/dit/dit_gen.h"
#include "engine/elastic/dit_sp.h"
#include "engine/world/world_launch.h"
#include "proto/base/clock.h"
#include "sched/dit_policy.h"

enum { N_CLS = 2, N_WORKERS = 2, MAX_JOBS = 256 };
static const int cls_side[N_CLS] = {16, 32};       /* S: 64 tokens, L: 256 (patch 2) */
static const double cls_alpha[N_CLS] = {3.0, 6.0}; /* deadline = arrival + alpha x T_single */
static const double cls_mix[N_CLS] = {0.7, 0.3};

enum { CMD_RUN = 1, CMD_CALIBRATE, CMD_STOP };
typedef struct cmd {
    int kind, job, cls, step, step_end, steps;
    int n_from, from[N_WORKERS], n_to, to[N_WORKERS]; /* world ranks */
    int gather;                                      /* last task: latent to to[0] */
} cmd;
typedef struct reply {
    int job, rank;
    double ms[N_CLS][N_WORKERS + 1]; /* calibration: step ms per class and degree */
} reply;

typedef struct args {
    int n_jobs, steps;
    double rate;
    char policies[256];
    char path[64];
} args;

static wf_world_tag tag_of(int seq) { return (wf_world_tag){.kind = WF_WORLD_TAG_USER, .seq = (uint32_t)seq}; }

static int send_to(wf_world *w, int peer, int seq, const void *buf, size_t len) {
    wf_world_op op = {.kind = WF_WORLD_SEND, .peer = peer, .tag = tag_of(seq), .buf = (void *)buf, .len = len};
    return wf_world_run(w, &op, 1) == WF_OK ? 0 : 1;
}

/* ---- workers -------------------------------------------------------------------------------- */

typedef struct worker {
    wf_world *w;
    wf_dit *model;
    wf_threadpool *pool;
    wf_dit_sp *sp[N_CLS];
    float *lat[MAX_JOBS];
    int seen[MAX_JOBS];
} worker;

static wf_dit_placement placement(const int *ranks, int n) {
    return wf_dit_placement_make(WF_DIT_SP_ULYSSES, ranks, n);
}

static int worker_run(worker *k, const cmd *c) {
    char err[512];
    wf_dit_sp *sp = k->sp[c->cls];
    if (!k->lat[c->job]) {
        k->lat[c->job] = malloc(sizeof(float) * wf_dit_sp_latent_size(sp));
        if (!k->lat[c->job]) WT_FAIL("oom");
    }
    wf_dit_item it = {.latent = k->lat[c->job], .label = c->job % 10, .uncond_label = -1, .guidance = 1.0f,
                      .key = {.seed = 1000 + (uint64_t)c->job}, .step = c->step, .step_end = c->step_end};
    if (!k->seen[c->job]) { /* x_T is a pure function of the key: every rank makes its own */
        wf_dit_sp_init_latent(sp, &it);
        k->seen[c->job] = 1;
    }
    wf_dit_placement to = placement(c->to, c->n_to);
    int me = wf_world_rank(k->w);
    if (c->n_from > 0) {
        wf_dit_placement from = placement(c->from, c->n_from);
        if (wf_dit_sp_reshard(sp, &from, &to, 1, &it, err, sizeof err) != WF_OK) WT_FAIL("reshard: %s", err);
    }
    if (wf_gfc_group_index(&to.group, me) >= 0) {
        if (wf_dit_sp_run(sp, k->pool, &to, 1, &it, err, sizeof err) != WF_OK) WT_FAIL("run: %s", err);
        if (c->gather && c->n_to > 1) {
            wf_dit_placement one = placement(c->to, 1);
            if (wf_dit_sp_reshard(sp, &to, &one, 1, &it, err, sizeof err) != WF_OK) WT_FAIL("gather: %s", err);
        }
    }
    return 0;
}

/* Median ms of 3 single steps of class cls on group g (every member calls it). */
static double time_step(worker *k, int cls, const int *ranks, int n) {
    char err[512];
    wf_dit_sp *sp = k->sp[cls];
    float *lat = malloc(sizeof(float) * wf_dit_sp_latent_size(sp));
    wf_dit_item it = {.latent = lat, .label = 1, .uncond_label = -1, .guidance = 1.0f, .key = {.seed = 7}};
    wf_dit_sp_init_latent(sp, &it);
    wf_dit_placement pl = placement(ranks, n);
    double ms[4];
    for (int i = 0; i < 4; i++) {
        it.step = 0;
        it.step_end = 1;
        uint64_t t0 = wf_clock_now_ns();
        if (wf_dit_sp_run(sp, k->pool, &pl, 1, &it, err, sizeof err) != WF_OK) {
            fprintf(stderr, "calibrate: %s\n", err);
            free(lat);
            return -1;
        }
        ms[i] = (double)(wf_clock_now_ns() - t0) / 1e6;
    }
    free(lat);
    /* median of the last 3 (the first warms up) */
    double a = ms[1], b = ms[2], c = ms[3];
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

static int worker_main(wf_world *w, const args *a) {
    worker k = {.w = w};
    char err[512];
    wf_dit_options opt = wf_dit_options_default();
    opt.max_batch = 2;
    opt.max_height = opt.max_width = cls_side[N_CLS - 1];
    opt.n_threads = 1;
    opt.heads = 4; /* original-layout files do not say; the width alone would give 3 */
    if (wf_dit_load(a->path, &opt, &k.model, err, sizeof err) != WF_OK) WT_FAIL("load: %s", err);
    k.pool = wf_threadpool_new(1);
    wf_dit_sampler_config scfg;
    wf_dit_sampler_config_default(WF_DIT_SAMPLER_KIND_DDIM, &scfg);
    for (int c = 0; c < N_CLS; c++)
        if (wf_dit_sp_new(k.model, &scfg, a->steps, 1, cls_side[c], cls_side[c], w, &k.sp[c], err, sizeof err) != WF_OK)
            WT_FAIL("sp: %s", err);
    int me = wf_world_rank(w), rc = 0;
    for (;;) {
        cmd c;
        wf_world_op op = {.kind = WF_WORLD_RECV, .peer = 0, .tag = tag_of(0), .buf = &c, .len = sizeof c};
        if (wf_world_run(w, &op, 1) != WF_OK) WT_FAIL("recv: %s", wf_world_error(w));
        if (c.kind == CMD_STOP) break;
        reply r = {.job = c.job, .rank = me};
        if (c.kind == CMD_CALIBRATE) {
            const int both[2] = {1, 2};
            for (int cl = 0; cl < N_CLS; cl++) {
                r.ms[cl][1] = time_step(&k, cl, &me, 1); /* both workers at once: cores shared */
                r.ms[cl][2] = time_step(&k, cl, both, 2);
            }
        } else if ((rc = worker_run(&k, &c)) != 0) {
            break;
        }
        if (send_to(w, 0, 1, &r, sizeof r)) WT_FAIL("reply: %s", wf_world_error(w));
    }
    for (int c = 0; c < N_CLS; c++) wf_dit_sp_free(k.sp[c]);
    for (int j = 0; j < MAX_JOBS; j++) free(k.lat[j]);
    wf_threadpool_free(k.pool);
    wf_dit_free(k.model);
    return rc;
}

/* ---- coordinator ---------------------------------------------------------------------------- */

typedef struct jstate {
    wf_dit_job j;
    int pending;       /* replies still due for its current task */
    int task_P, task_steps;
    double task_start_ms;
    double finish_ms;
    bool arrived, running, done;
} jstate;

static int cmp_d(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static int run_policy(wf_world *w, const args *a, const char *spec, const wf_dit_cost *calibrated,
                      const double *arrival, const int *cls) {
    char err[256];
    wf_dit_policy *pol;
    /* deadlines come from the start-up calibration (the same for every policy); the policy
     * decides on a copy corrected online by the task times it observes */
    wf_dit_cost live = *calibrated, *cost = &live;
    /* elastic re-plans every 2 steps: a command round trip per step would cost more than the
     * tiny model's step on this machine */
    if (wf_dit_policy_new(spec, N_WORKERS, cost, 2, &pol, err, sizeof err) != WF_OK) WT_FAIL("%s", err);
    jstate *js = calloc((size_t)a->n_jobs, sizeof *js);
    wf_dit_job **ready = calloc((size_t)a->n_jobs, sizeof *ready);
    int outstanding[N_WORKERS] = {0};
    reply rbuf[N_WORKERS];
    wf_world_op ops[N_WORKERS];
    for (int r = 0; r < N_WORKERS; r++) {
        ops[r] = (wf_world_op){.kind = WF_WORLD_RECV, .peer = r + 1, .tag = tag_of(1), .buf = &rbuf[r], .len = sizeof rbuf[r]};
        if (wf_world_post(w, &ops[r], 1) != WF_OK) WT_FAIL("post");
    }
    for (int i = 0; i < a->n_jobs; i++) {
        wf_dit_job *j = &js[i].j;
        j->id = i;
        j->cls = cls[i];
        j->tokens = (cls_side[cls[i]] / 2) * (cls_side[cls[i]] / 2);
        j->steps = a->steps;
        j->max_P = N_WORKERS;
        j->arrival_ms = arrival[i];
        j->deadline_ms = arrival[i] + cls_alpha[cls[i]] * a->steps * wf_dit_cost_step_ms(calibrated, j->tokens, 1);
        j->latent_bytes = 4.0 * 4 * cls_side[cls[i]] * cls_side[cls[i]];
    }
    uint64_t t0 = wf_clock_now_ns();
    int done = 0, next = 0;
    while (done < a->n_jobs) {
        double now = (double)(wf_clock_now_ns() - t0) / 1e6;
        while (next < a->n_jobs && arrival[next] <= now) js[next++].arrived = true;
        int progressed = 0;
        wf_world_test(w, ops, N_WORKERS);
        for (int r = 0; r < N_WORKERS; r++) {
            if (ops[r].status == WF_IN_PROGRESS) continue;
            if (ops[r].status != WF_OK) WT_FAIL("worker %d: %s", r + 1, wf_world_error(w));
            jstate *s = &js[rbuf[r].job];
            outstanding[r]--;
            if (--s->pending == 0) {
                s->running = false;
                double took = (double)(wf_clock_now_ns() - t0) / 1e6 - s->task_start_ms;
                wf_dit_cost_observe(cost, s->j.tokens, s->task_P, took / s->task_steps);
                if (s->j.steps_done >= s->j.steps) {
                    s->done = true;
                    s->finish_ms = (double)(wf_clock_now_ns() - t0) / 1e6;
                    done++;
                }
            }
            if (wf_world_post(w, &ops[r], 1) != WF_OK) WT_FAIL("post");
            progressed = 1;
        }
        int n_ready = 0;
        for (int i = 0; i < next; i++)
            if (js[i].arrived && !js[i].running && !js[i].done) ready[n_ready++] = &js[i].j;
        bool busy[N_WORKERS];
        for (int r = 0; r < N_WORKERS; r++) busy[r] = outstanding[r] > 0;
        wf_dit_view v = {.now_ms = now, .n_ranks = N_WORKERS, .busy = busy, .ready = ready, .n_ready = n_ready};
        wf_dit_task t[N_WORKERS];
        int k = n_ready ? wf_dit_policy_pick(pol, &v, t, N_WORKERS) : 0;
        for (int i = 0; i < k; i++) {
            wf_dit_job *j = ready[t[i].job];
            jstate *s = &js[j->id];
            cmd c = {.kind = CMD_RUN, .job = j->id, .cls = j->cls, .step = j->steps_done,
                     .step_end = j->steps_done + t[i].steps, .steps = j->steps, .n_to = t[i].n_ranks};
            for (int q = 0; q < t[i].n_ranks; q++) c.to[q] = t[i].ranks[q] + 1;
            bool same = j->n_ranks == t[i].n_ranks;
            for (int q = 0; same && q < j->n_ranks; q++) same = j->ranks[q] == t[i].ranks[q];
            if (j->n_ranks > 0 && !same) {
                c.n_from = j->n_ranks;
                for (int q = 0; q < j->n_ranks; q++) c.from[q] = j->ranks[q] + 1;
            }
            c.gather = c.step_end == j->steps;
            /* the union of the old and new groups takes part */
            int uni[2 * N_WORKERS], nu = 0;
            for (int q = 0; q < c.n_from; q++) uni[nu++] = c.from[q];
            for (int q = 0; q < c.n_to; q++) {
                bool dup = false;
                for (int z = 0; z < nu; z++) dup |= uni[z] == c.to[q];
                if (!dup) uni[nu++] = c.to[q];
            }
            for (int q = 0; q < nu; q++) {
                if (send_to(w, uni[q], 0, &c, sizeof c)) WT_FAIL("command: %s", wf_world_error(w));
                outstanding[uni[q] - 1]++;
            }
            s->pending = nu;
            s->running = true;
            s->task_P = t[i].n_ranks;
            s->task_steps = t[i].steps;
            s->task_start_ms = now;
            j->steps_done = c.step_end;
            j->n_ranks = t[i].n_ranks;
            memcpy(j->ranks, t[i].ranks, sizeof(int) * (size_t)t[i].n_ranks);
            if (c.gather && c.n_to > 1) j->n_ranks = 1; /* gathered on to[0] */
            progressed = 1;
        }
        if (!progressed) wf_world_wait_event(w, -1, 2);
    }
    double lat[MAX_JOBS], sum = 0;
    int miss[N_CLS] = {0}, cnt[N_CLS] = {0};
    for (int i = 0; i < a->n_jobs; i++) {
        lat[i] = js[i].finish_ms - arrival[i];
        sum += lat[i];
        cnt[cls[i]]++;
        if (js[i].finish_ms > js[i].j.deadline_ms) miss[cls[i]]++;
    }
    qsort(lat, (size_t)a->n_jobs, sizeof lat[0], cmp_d);
    printf("%-9s jobs=%d SLO attainment %.1f%% (S %d/%d, L %d/%d met)  mean %.0f ms  p99 %.0f ms  makespan %.0f ms\n",
           spec, a->n_jobs, 100.0 * (a->n_jobs - miss[0] - miss[1]) / a->n_jobs, cnt[0] - miss[0], cnt[0],
           cnt[1] - miss[1], cnt[1], sum / a->n_jobs, lat[(int)ceil(0.99 * a->n_jobs) - 1],
           (double)(wf_clock_now_ns() - t0) / 1e6);
    fflush(stdout);
    wf_world_cancel(w, ops, N_WORKERS);
    wf_dit_policy_free(pol);
    free(js);
    free(ready);
    return 0;
}

static int coordinator_main(wf_world *w, const args *a) {
    /* start-up calibration: both workers measure every degree the world allows */
    cmd c = {.kind = CMD_CALIBRATE};
    reply r[N_WORKERS];
    for (int q = 1; q <= N_WORKERS; q++)
        if (send_to(w, q, 0, &c, sizeof c)) WT_FAIL("calibrate: %s", wf_world_error(w));
    for (int q = 1; q <= N_WORKERS; q++) {
        wf_world_op op = {.kind = WF_WORLD_RECV, .peer = q, .tag = tag_of(1), .buf = &r[q - 1], .len = sizeof r[0]};
        if (wf_world_run(w, &op, 1) != WF_OK) WT_FAIL("calibration reply: %s", wf_world_error(w));
    }
    wf_dit_cost cost;
    wf_dit_cost_measured(&cost);
    for (int cl = 0; cl < N_CLS; cl++)
        for (int P = 1; P <= N_WORKERS; P++) {
            double ms = (r[0].ms[cl][P] + r[1].ms[cl][P]) / 2;
            int tokens = (cls_side[cl] / 2) * (cls_side[cl] / 2);
            if (wf_dit_cost_add_point(&cost, tokens, P, ms) != WF_OK) WT_FAIL("bad calibration %g", ms);
            printf("calibrated: tokens=%d P=%d step_ms=%.2f\n", tokens, P, ms);
        }
    /* one trace for every policy: Poisson arrivals, class mix */
    double arrival[MAX_JOBS];
    int cls[MAX_JOBS];
    uint64_t s = 12345;
    double t = 0;
    for (int i = 0; i < a->n_jobs; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = ((double)(s >> 11) + 1) / 9007199254740993.0;
        t += -log(u) / a->rate * 1000.0;
        arrival[i] = t;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        cls[i] = ((double)(s >> 11) / 9007199254740992.0) < cls_mix[0] ? 0 : 1;
    }
    int rc = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", a->policies);
    for (char *p = strtok(list, ","); p && !rc; p = strtok(NULL, ",")) rc = run_policy(w, a, p, &cost, arrival, cls);
    c.kind = CMD_STOP;
    for (int q = 1; q <= N_WORKERS; q++) send_to(w, q, 0, &c, sizeof c);
    return rc;
}

static int body(wf_world *w, int rank, void *arg) {
    return rank == 0 ? coordinator_main(w, arg) : worker_main(w, arg);
}

int main(int argc, char **argv) {
    args a = {.n_jobs = 24, .steps = 8, .rate = 2.0};
    snprintf(a.policies, sizeof a.policies, "static:1,static:2,elastic");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--jobs") && i + 1 < argc) a.n_jobs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rate") && i + 1 < argc) a.rate = atof(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) a.steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--policies") && i + 1 < argc) snprintf(a.policies, sizeof a.policies, "%s", argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--jobs N] [--rate PER_S] [--steps N] [--policies LIST]\n", argv[0]);
            return 2;
        }
    }
    if (a.n_jobs < 1 || a.n_jobs > MAX_JOBS || !(a.rate > 0) || a.steps < 2) {
        /* (atoi/atof: a value that is no number reads as 0 and is refused here) */
        fprintf(stderr, "%s: --jobs 1..%d, --rate > 0 per second, --steps >= 2 (got %d, %g, %d)\n", argv[0],
                MAX_JOBS, a.n_jobs, a.rate, a.steps);
        return 2;
    }
    /* Every policy name before the calibration (it was judged after, seconds later). */
    char names[sizeof a.policies], err[256];
    snprintf(names, sizeof names, "%s", a.policies);
    wf_dit_cost probe;
    wf_dit_cost_synthetic(&probe);
    for (char *p = strtok(names, ","); p; p = strtok(NULL, ",")) {
        wf_dit_policy *pol;
        if (wf_dit_policy_new(p, N_WORKERS, &probe, 2, &pol, err, sizeof err) != WF_OK) {
            fprintf(stderr, "%s: --policies: %s\n", argv[0], err);
            return 2;
        }
        wf_dit_policy_free(pol);
    }
    /* a small DiT: hidden 192, 4 heads (Ulysses over 2), depth 4, patch 2, 4 channels */
    dit_gen_cfg g = {192, 4, 4, 4, 8, 2, 32, 1000};
    strcpy(a.path, "/tmp/weft-elastic-wl-XXXXXX.safetensors");
    int fd = mkstemps(a.path, 12);
    if (fd < 0 || dit_gen_write_original(&g, 1, a.path) != 0) {
        fprintf(stderr, "cannot write the model\n");
        return 1;
    }
    close(fd);
    wt_env env = wt_env_default(1 + N_WORKERS);
    env.timeout_ms = 600000;
    int bad = wt_run(&env, body, &a, 3600);
    unlink(a.path);
    return bad ? 1 : 0;
}
