/* weft-dit-sim: the DiT placement policies on a simulated cluster (sched/dit_sim.h): each
 * policy on the same traces (one per seed), SLO attainment per class, latency, throughput,
 * utilisation and makespan; then elastic against the best static policy. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/dit_sim.h"
#include "sched/dit_workload.h"

static void usage(FILE *f) {
    char names[128] = "";
    for (const char *const *b = wf_workload_profile_builtin_names(); *b; b++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "", *b);
    fprintf(f,
            "usage: weft-dit-sim [options]\n"
            "  --ranks N            ranks in the cluster, 1..64 (default 8)\n"
            "  --profile NAME|PATH  GF-DiT's profile, built in (%s) or a .profile file\n"
            "                       (sched/workload/profiles/, weft-bench's format; default short)\n"
            "  --trace PATH         replay a weft-bench --trace-out file (GF-DiT's workload JSON) instead\n"
            "  --load X             offered load: every phase's rate scaled so that the work (sum of T_single)\n"
            "                       is X x ranks x the loaded span (default 0.8; rates grow with --ranks).\n"
            "                       With --trace: its clock rescaled to that load (default: kept as is)\n"
            "  --seeds N            traces, seeds 1..N (default 5; one trace with --trace)\n"
            "  --policies LIST      comma-separated: %s\n"
            "                       (default static:1,static:2,static:4,static:8,rssp, GF-DiT's baselines\n"
            "                       gf-static:1,gf-static:2,gf-static:4,gf-static:8,gf-fcfs:1,gf-fcfs:2,\n"
            "                       gf-rssp,\n"
            "                       gf-rssp:1=2,16384=4 (its queueing with rssp's degrees), and elastic;\n"
            "                       with fewer ranks than a policy needs, it is left out, saying so)\n"
            "  --chunk-steps N      steps per elastic task (default 1, as GF-DiT)\n"
            "  --group-form-ms MS   cost of forming a group never used before (default 0: group-free;\n"
            "                       GF-DiT measured ~778 per new communicator)\n"
            "  --cost-file PATH     measured step times, lines \"tokens P ms\" (default: GF-DiT's synthetic\n"
            "                       0.1323 ms x tokens / eff(P) + 20 ms x (P - 1))\n"
            "  --classes S,M,L      tokens of the three classes (default 1024,4096,16384)\n"
            "  --steps N            denoising steps per job (default 50)\n"
            "  --alpha a,b,c        deadline factors of the classes (default 1.5,2,6)\n"
            "  --alone              instead of a workload: each class's request alone on the cluster under\n"
            "                       each policy, its latency (\"alone CLASS TOKENS STEPS POLICY MS\"): what a\n"
            "                       real server's single-request latency is compared with\n"
            "  --guided             every image guided (two forwards a step; on 2 ranks guidance-parallel\n"
            "                       or Ulysses, whichever the cost model says is faster)\n"
            "  --jobs-out PATH      also write every trace's jobs and the cost per class and degree there\n"
            "                       (the input of bench/elastic/bounds.py's tighter bounds)\n",
            names, wf_dit_policy_names());
}

typedef struct agg {
    const char *policy;
    int jobs, missed, cls_jobs[WF_DIT_SIM_CLASSES], cls_missed[WF_DIT_SIM_CLASSES];
    double mean, p95, p99, norm, tput, util, makespan, cls_lat[WF_DIT_SIM_CLASSES];
    double cls_wait[WF_DIT_SIM_CLASSES], cls_rank[WF_DIT_SIM_CLASSES], idle_waiting, missed_rank, missed_early, busy;
    int seeds;
} agg;

/* a is the better static policy: fewer misses, ties by the lower mean latency */
static bool better(const agg *a, const agg *b) {
    return a->missed < b->missed || (a->missed == b->missed && a->mean < b->mean);
}

/* A whole integer or number, nothing after it ("3x" and "abc" are refused, not read as 3 or 0). */
static bool parse_int(const char *s, int *out) {
    char *e;
    long v = strtol(s, &e, 10);
    if (e == s || *e || v < -1000000000L || v > 1000000000L) return false;
    *out = (int)v;
    return true;
}

static bool parse_num(const char *s, double *out) {
    char *e;
    double v = strtod(s, &e);
    if (e == s || *e || v != v) return false;
    *out = v;
    return true;
}

/* A bad option value: its name and what it must be. */
static int bad_value(const char *opt, const char *want, const char *got) {
    fprintf(stderr, "weft-dit-sim: --%s wants %s, got \"%s\"\n", opt, want, got);
    return 2;
}

static int parse3(const char *s, double *v) {
    char extra;
    return sscanf(s, "%lf,%lf,%lf%c", &v[0], &v[1], &v[2], &extra) == 3 ? 0 : -1;
}

int main(int argc, char **argv) {
    wf_dit_sim_config cfg;
    wf_dit_sim_config_init(&cfg);
    const char *profile = "short", *trace = NULL, *jobs_out = NULL;
    bool load_given = false, alone = false, policies_given = false;
    char policies[512] = "static:1,static:2,static:4,static:8,rssp,"
                         "gf-static:1,gf-static:2,gf-static:4,gf-static:8,gf-fcfs:1,gf-fcfs:2,gf-rssp,gf-rssp:1=2,16384=4,"
                         "elastic";
    double load = 0.8;
    int seeds = 5;
    char err[256];
    static const struct option longs[] = {{"ranks", required_argument, 0, 'r'},     {"profile", required_argument, 0, 'p'},
                                          {"load", required_argument, 0, 'l'},      {"seeds", required_argument, 0, 's'},
                                          {"policies", required_argument, 0, 'P'},  {"chunk-steps", required_argument, 0, 'c'},
                                          {"group-form-ms", required_argument, 0, 'g'}, {"cost-file", required_argument, 0, 'f'},
                                          {"classes", required_argument, 0, 'C'},   {"steps", required_argument, 0, 'S'},
                                          {"alpha", required_argument, 0, 'a'},     {"help", no_argument, 0, 'h'},
                                          {"trace", required_argument, 0, 't'},     {"guided", no_argument, 0, 'G'},
                                          {"alone", no_argument, 0, 'A'},       {"jobs-out", required_argument, 0, 'J'},
                                          {0, 0, 0, 0}};
    int opt;
    double v[3];
    while ((opt = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (opt) {
        case 'r':
            if (!parse_int(optarg, &cfg.n_ranks) || cfg.n_ranks < 1 || cfg.n_ranks > WF_DIT_MAX_RANKS) {
                char want[32];
                snprintf(want, sizeof want, "1..%d ranks", WF_DIT_MAX_RANKS);
                return bad_value("ranks", want, optarg);
            }
            break;
        case 'p': profile = optarg; break;
        case 'l': {
            if (!parse_num(optarg, &load) || !(load > 0)) return bad_value("load", "a positive number", optarg);
            load_given = true;
            break;
        }
        case 't': trace = optarg; break;
        case 's':
            if (!parse_int(optarg, &seeds) || seeds < 1) return bad_value("seeds", "a positive count", optarg);
            break;
        case 'P':
            snprintf(policies, sizeof policies, "%s", optarg);
            policies_given = true;
            break;
        case 'c':
            if (!parse_int(optarg, &cfg.chunk_steps) || cfg.chunk_steps < 1)
                return bad_value("chunk-steps", "a positive count", optarg);
            break;
        case 'g':
            if (!parse_num(optarg, &cfg.cost.group_form_ms) || cfg.cost.group_form_ms < 0 ||
                cfg.cost.group_form_ms > 1e9)
                return bad_value("group-form-ms", "milliseconds, 0 to 1e9", optarg);
            break;
        case 'f': {
            double g = cfg.cost.group_form_ms;
            if (wf_dit_cost_load(&cfg.cost, optarg, err, sizeof err) != WF_OK) {
                fprintf(stderr, "weft-dit-sim: %s\n", err);
                return 2;
            }
            cfg.cost.group_form_ms = g;
            break;
        }
        case 'C':
            if (parse3(optarg, v) || v[0] < 1 || v[1] < 1 || v[2] < 1) {
                fprintf(stderr, "weft-dit-sim: --classes wants three positive token counts, got \"%s\"\n", optarg);
                return 2;
            }
            for (int c = 0; c < 3; c++) cfg.classes[c].tokens = (int)v[c];
            break;
        case 'S': {
            int steps;
            if (!parse_int(optarg, &steps) || steps < 1) {
                fprintf(stderr, "weft-dit-sim: --steps must be positive, got \"%s\"\n", optarg);
                return 2;
            }
            for (int c = 0; c < 3; c++) cfg.classes[c].steps = steps;
            break;
        }
        case 'a':
            if (parse3(optarg, v) || !(v[0] > 0) || !(v[1] > 0) || !(v[2] > 0)) {
                fprintf(stderr, "weft-dit-sim: --alpha wants three positive factors, got \"%s\"\n", optarg);
                return 2;
            }
            for (int c = 0; c < 3; c++) cfg.classes[c].alpha = v[c];
            break;
        case 'G': cfg.guided = true; break;
        case 'A': alone = true; break;
        case 'J': jobs_out = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-dit-sim: unexpected argument \"%s\" (options only; --help lists them)\n", argv[optind]);
        return 2;
    }
    double bound = 0; /* the sum over seeds of the lower bound on any policy's mean latency */
    int miss_bound = 0; /* and of the lower bound on its misses */
    agg aggs[16];
    int n_pol = 0;
    /* split at commas, except those inside an rssp table ("rssp:1=2,16384=4": a digit follows) */
    for (char *tok = policies, *c = policies;; c++) {
        if (*c && (*c != ',' || (c[1] >= '0' && c[1] <= '9'))) continue;
        bool end = !*c;
        *c = 0;
        if (*tok) {
            if (n_pol == 16) {
                fprintf(stderr, "weft-dit-sim: --policies: at most 16\n");
                return 2;
            }
            aggs[n_pol++] = (agg){.policy = tok};
        }
        if (end) break;
        tok = c + 1;
    }
    if (n_pol == 0) {
        fprintf(stderr, "weft-dit-sim: --policies names no policy (known: %s)\n", wf_dit_policy_names());
        return 2;
    }
    for (int p = 0; p < n_pol; p++) { /* refuse a bad name before any output */
        wf_dit_policy *pol;
        if (wf_dit_policy_new(aggs[p].policy, cfg.n_ranks, &cfg.cost, cfg.chunk_steps, &pol, err, sizeof err) != WF_OK) {
            if (policies_given) {
                fprintf(stderr, "weft-dit-sim: %s\n", err);
                return 2;
            }
            /* The default list is for 8 ranks and more: on fewer, its lanes that do not fit
             * are left out, saying so (named in --policies they are an error). */
            fprintf(stderr, "weft-dit-sim: leaving out %s: %s\n", aggs[p].policy, err);
            memmove(&aggs[p], &aggs[p + 1], (size_t)(n_pol - p - 1) * sizeof aggs[0]);
            n_pol--, p--;
            continue;
        }
        wf_dit_policy_free(pol);
    }
    if (alone) {
        for (int c = 0; c < WF_DIT_SIM_CLASSES; c++)
            for (int p = 0; p < n_pol; p++) {
                wf_dit_sim_job one = {.arrival_ms = 0, .cls = c};
                wf_dit_sim_report r;
                if (wf_dit_sim_run(&cfg, aggs[p].policy, &one, 1, &r, err, sizeof err) != WF_OK) {
                    fprintf(stderr, "weft-dit-sim: %s\n", err);
                    return 2;
                }
                printf("alone %s %d %d %s %.3f\n", cfg.classes[c].name, cfg.classes[c].tokens, cfg.classes[c].steps,
                       aggs[p].policy, r.latency_mean_ms);
            }
        return 0;
    }
    if (trace) seeds = 1;
    FILE *jobs_f = NULL;
    if (jobs_out && !(jobs_f = fopen(jobs_out, "w"))) {
        fprintf(stderr, "weft-dit-sim: --jobs-out %s: cannot write it\n", jobs_out);
        return 2;
    }
    for (int seed = 1; seed <= seeds; seed++) {
        wf_dit_sim_job *jobs;
        int n;
        wf_workload_profile used;
        double scale = 1;
        wf_status st = trace ? wf_dit_workload_trace(&cfg, trace, load_given ? load : 0, &jobs, &n, &scale, err, sizeof err)
                             : wf_dit_workload_profile(&cfg, profile, load, (uint64_t)seed, &jobs, &n, &used, err, sizeof err);
        if (st != WF_OK) {
            fprintf(stderr, "weft-dit-sim: %s\n", err);
            return 2;
        }
        if (seed == 1 && trace) {
            printf("# weft-dit-sim ranks=%d trace=%s jobs=%d time_scale=%.4g offered_load=%.3f chunk_steps=%d "
                   "group_form_ms=%.0f cost=%s\n",
                   cfg.n_ranks, trace, n, scale, wf_dit_sim_offered_load(&cfg, jobs, n), cfg.chunk_steps,
                   cfg.cost.group_form_ms, cfg.cost.n_points ? "measured" : "synthetic");
        } else if (seed == 1) {
            printf("# weft-dit-sim ranks=%d profile=%s load=%.2f seeds=%d chunk_steps=%d group_form_ms=%.0f cost=%s%s\n",
                   cfg.n_ranks, profile, load, seeds, cfg.chunk_steps, cfg.cost.group_form_ms,
                   cfg.cost.n_points ? "measured" : "synthetic", cfg.guided ? " guided" : "");
            for (size_t i = 0; i < used.n_phases; i++) {
                const wf_workload_phase *ph = &used.phases[i];
                printf("#   phase %-10s %6.0f-%-6.0f s %7.3f req/min", ph->name, ph->start_s, ph->end_s, ph->rate * 60);
                for (size_t c = 0; c < used.n_classes; c++)
                    if (ph->mix[c] > 0) printf(" %s=%.2f", used.classes[c].name, ph->mix[c]);
                printf("\n");
            }
        }
        if (jobs_f) wf_dit_sim_write_jobs(jobs_f, &cfg, seed, seed == 1, jobs, n);
        bound += wf_dit_sim_latency_bound_ms(&cfg, jobs, n);
        miss_bound += wf_dit_sim_misses_bound(&cfg, jobs, n);
        for (int p = 0; p < n_pol; p++) {
            wf_dit_sim_report r;
            if (wf_dit_sim_run(&cfg, aggs[p].policy, jobs, n, &r, err, sizeof err) != WF_OK) {
                fprintf(stderr, "weft-dit-sim: %s\n", err);
                free(jobs);
                return 2;
            }
            agg *a = &aggs[p];
            a->jobs += r.n_jobs;
            a->missed += r.n_missed;
            for (int c = 0; c < WF_DIT_SIM_CLASSES; c++) {
                a->cls_jobs[c] += r.cls_jobs[c], a->cls_missed[c] += r.cls_missed[c];
                a->cls_lat[c] += r.cls_latency_mean_ms[c] * r.cls_jobs[c];
                a->cls_wait[c] += r.cls_wait_mean_ms[c] * r.cls_jobs[c];
                a->cls_rank[c] += r.cls_rank_ms_mean[c] * r.cls_jobs[c];
            }
            a->idle_waiting += r.idle_waiting_rank_ms, a->missed_rank += r.missed_rank_ms;
            a->missed_early += r.missed_early_rank_ms;
            a->busy += r.utilisation * cfg.n_ranks * r.makespan_ms;
            a->mean += r.latency_mean_ms, a->p95 += r.latency_p95_ms, a->p99 += r.latency_p99_ms;
            a->norm += r.norm_latency_mean, a->tput += r.throughput_rps, a->util += r.utilisation;
            a->makespan += r.makespan_ms;
            a->seeds++;
        }
        free(jobs);
    }
    if (jobs_f && fclose(jobs_f)) {
        fprintf(stderr, "weft-dit-sim: --jobs-out %s: write failed\n", jobs_out);
        return 2;
    }
    printf("%-12s %6s %7s %6s %6s %6s %6s %9s %9s %9s %6s %7s %6s %10s %8s %8s %8s\n", "policy", "jobs", "missed",
           "att%", "S%", "M%", "L%", "mean_s", "p95_s", "p99_s", "norm", "tput/s", "util", "makespan_s", "S_mean", "M_mean",
           "L_mean");
    int best_weft = -1, best_gf = -1, elastic = -1; /* weft's static policies; GF-DiT's (gf-) */
    for (int p = 0; p < n_pol; p++) {
        agg *a = &aggs[p];
        double k = a->seeds;
        double att[WF_DIT_SIM_CLASSES];
        for (int c = 0; c < WF_DIT_SIM_CLASSES; c++)
            att[c] = a->cls_jobs[c] ? 100.0 * (a->cls_jobs[c] - a->cls_missed[c]) / a->cls_jobs[c] : 100.0;
        double cl[WF_DIT_SIM_CLASSES];
        for (int c = 0; c < WF_DIT_SIM_CLASSES; c++) cl[c] = a->cls_jobs[c] ? a->cls_lat[c] / a->cls_jobs[c] / 1000 : 0;
        printf("%-12s %6d %7d %6.1f %6.1f %6.1f %6.1f %9.2f %9.2f %9.2f %6.2f %7.3f %6.2f %10.1f %8.2f %8.2f %8.2f\n",
               a->policy, a->jobs, a->missed, a->jobs ? 100.0 * (a->jobs - a->missed) / a->jobs : 100.0, att[0], att[1],
               att[2], a->mean / k / 1000, a->p95 / k / 1000, a->p99 / k / 1000, a->norm / k, a->tput / k, a->util / k,
               a->makespan / k / 1000, cl[0], cl[1], cl[2]);
        if (!strcmp(a->policy, "elastic")) {
            elastic = p;
            continue;
        }
        int *best = strncmp(a->policy, "gf-", 3) ? &best_weft : &best_gf;
        if (*best < 0 || better(a, &aggs[*best])) *best = p;
    }
    /* where the latency goes: per class the mean wait for ranks and rank-time per job (vs
     * T_single), ranks idle while jobs waited and rank-time spent on jobs that missed (% of the
     * busy rank-time), and of it the part spent before their deadlines (early) */
    printf("why %-12s %8s %8s %8s %8s %8s %8s %10s %10s %10s\n", "policy", "S_wait", "M_wait", "L_wait", "S_rank/T1",
           "M_rank/T1", "L_rank/T1", "idle_wait%", "missed_rk%",
           "early_rk%");
    for (int p = 0; p < n_pol; p++) {
        agg *a = &aggs[p];
        printf("why %-12s", a->policy);
        for (int c = 0; c < WF_DIT_SIM_CLASSES; c++) printf(" %8.2f", a->cls_jobs[c] ? a->cls_wait[c] / a->cls_jobs[c] / 1000 : 0);
        for (int c = 0; c < WF_DIT_SIM_CLASSES; c++)
            printf(" %9.3f", a->cls_jobs[c] ? a->cls_rank[c] / a->cls_jobs[c] / wf_dit_sim_single_ms(&cfg, c) : 0);
        printf(" %10.2f %10.2f %10.2f\n", a->busy > 0 ? 100 * a->idle_waiting / a->busy : 0,
               a->busy > 0 ? 100 * a->missed_rank / a->busy : 0, a->busy > 0 ? 100 * a->missed_early / a->busy : 0);
    }
    /* the best static policy: weft's or GF-DiT's, whichever misses fewer (ties: lower mean) */
    int best_static = best_weft;
    if (best_gf >= 0 && (best_static < 0 || better(&aggs[best_gf], &aggs[best_static]))) best_static = best_gf;
    if (elastic >= 0 && best_static >= 0) {
        agg *e = &aggs[elastic];
        int vs[2] = {best_static, best_gf};
        const char *what[2] = {"best static", "best GF-DiT baseline"};
        for (int w = 0; w < 2; w++) {
            if (vs[w] < 0 || (w == 1 && vs[1] == vs[0])) continue;
            agg *b = &aggs[vs[w]];
            char fewer[64];
            if (b->missed > 0)
                snprintf(fewer, sizeof fewer, "%.1f%% fewer", 100.0 * (b->missed - e->missed) / b->missed);
            else snprintf(fewer, sizeof fewer, "static missed none");
            printf("elastic vs %s (%s): SLO violations %d vs %d (%s), mean latency %.2f s vs %.2f s "
                   "(%.2fx lower), static miss rate %.1f%%\n",
                   what[w], b->policy, e->missed, b->missed, fewer, e->mean / e->seeds / 1000,
                   b->mean / b->seeds / 1000, e->mean > 0 ? b->mean / e->mean : 0.0, b->jobs ? 100.0 * b->missed / b->jobs : 0.0);
        }
        agg *b = &aggs[best_static];
        printf("lower bound on any policy's mean latency: %.2f s (best static / bound %.2fx, elastic / bound "
               "%.2fx)\n",
               bound / e->seeds / 1000, bound > 0 ? b->mean / bound : 0.0, bound > 0 ? e->mean / bound : 0.0);
        printf("lower bound on any policy's misses: %d (best static %d: at most %.1f%% fewer)\n", miss_bound, b->missed,
               b->missed > 0 ? 100.0 * (b->missed - miss_bound) / b->missed : 0.0);
    }
    return 0;
}
