/* weft-sim: replays a workload file through the scheduler's planning core on a virtual clock
 * and prints TTFT/TPOT/e2e percentiles, SLO attainment and goodput. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/cost_model.h"
#include "sched/policy.h"
#include "sched/defaults.h"
#include "sched/sim.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft-sim [options] WORKLOAD\n"
            "  WORKLOAD: one request per line: arrival_ms prompt_len output_len ttft_slo_ms "
            "tpot_slo_ms [priority]\n"
            "  --policy NAME          %s (default slo)\n"
            "  --cost a,b,c,d         step_ms = a + b*prefill + c*decode + d*attention "
            "(default 10,0.1,0.5,0)\n"
            "  --cost-file PATH       load the cost model (as weftd's --cost-model)\n"
            "  --max-batch-tokens N   token budget per iteration (default 512)\n"
            "  --max-running N        sequences running at once (default 64)\n"
            "  --kv-blocks N          KV blocks (default 4096)\n"
            "  --block-size N         tokens per block (default 16)\n"
            "  --n-ctx N              context length (default 4096)\n"
            "  --admission-factor F   refuse requests predicted past F x their TTFT SLO "
            "(as weftd; default off)\n"
            "  --queue-size N         with admission: waiting requests before refusing\n"
            "  --prefill-stretch X    cap an iteration that decodes at X x its decode-only time\n"
            "                         (as weftd; default " WF_DEFAULT_STR(WF_DEFAULT_PREFILL_STRETCH) ", 0: off)\n"
            "  --groups N             device groups, each with its own KV blocks and batch "
            "(default 1)\n"
            "  --no-prefix-cache\n"
            "  --per-request          print one line per request\n"
            "DiT placement (--dit-policy's policies on 1-64 ranks, GF-DiT's workloads) is weft-dit-sim's:\n"
            "  weft-sim --dit [OPTIONS]   runs weft-dit-sim [OPTIONS] (the one beside weft-sim, else PATH's)\n"
            "                             (weft-sim --dit --help lists its options)\n",
            wf_sched_policy_names());
}

/* Options only weft-dit-sim has: named here, they get a pointer to --dit, not just the usage. */
static bool dit_option(const char *arg) {
    static const char *const dit[] = {"--ranks", "--profile", "--trace", "--load", "--seeds", "--policies",
                                      "--chunk-steps", "--group-form-ms", "--classes", "--steps", "--alpha",
                                      "--alone", "--guided", "--dit-policy", "--jobs-out", NULL};
    for (int i = 0; dit[i]; i++) {
        size_t n = strlen(dit[i]);
        if (!strncmp(arg, dit[i], n) && (arg[n] == 0 || arg[n] == '=')) return true;
    }
    return false;
}

static int parse_int(const char *s, const char *name, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 1 << 30) {
        fprintf(stderr, "weft-sim: %s must be a positive integer (got \"%s\")\n", name, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* weft-sim --dit ARGS: weft-dit-sim ARGS, the one beside this binary (the build's bin/), else
 * the one on PATH. Returns only on failure. */
static int run_dit_sim(char **argv) {
    char self[4096], path[4096 + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, sizeof path, "%s/weft-dit-sim", self);
            argv[0] = path;
            execv(path, argv);
        }
    }
    argv[0] = "weft-dit-sim";
    execvp("weft-dit-sim", argv);
    fprintf(stderr, "weft-sim: --dit runs weft-dit-sim, found neither beside weft-sim (%s) nor on PATH: %s\n",
            n > 0 ? self : "?", strerror(errno));
    return 2;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--dit")) return run_dit_sim(argv + 1);
    for (int i = 1; i < argc; i++)
        if (dit_option(argv[i])) {
            fprintf(stderr, "weft-sim: %s is an option of the DiT placement simulator: run weft-sim --dit %s... "
                    "(or weft-dit-sim; weft-sim --dit --help lists its options)\n", argv[i], argv[i]);
            return 2;
        }
    wf_sim_config cfg;
    wf_sim_config_init(&cfg);
    int per_request = 0;
    char err[256];
    static const struct option longs[] = {
        {"policy", required_argument, 0, 'p'},      {"cost", required_argument, 0, 'c'},
        {"cost-file", required_argument, 0, 'f'},   {"max-batch-tokens", required_argument, 0, 't'},
        {"max-running", required_argument, 0, 'r'}, {"kv-blocks", required_argument, 0, 'k'},
        {"block-size", required_argument, 0, 'b'},  {"n-ctx", required_argument, 0, 'n'},
        {"no-prefix-cache", no_argument, 0, 'P'},   {"per-request", no_argument, 0, 'R'},
        {"admission-factor", required_argument, 0, 'a'}, {"queue-size", required_argument, 0, 'q'},
        {"groups", required_argument, 0, 'g'},   {"prefill-stretch", required_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},              {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (opt) {
        case 'p':
            if (!wf_sched_policy_find(optarg)) {
                fprintf(stderr, "weft-sim: unknown policy \"%s\" (known: %s)\n", optarg,
                        wf_sched_policy_names());
                return 2;
            }
            cfg.policy = optarg;
            break;
        case 'c':
            if (wf_cost_model_parse(optarg, cfg.cost, err, sizeof err) != WF_OK) {
                fprintf(stderr, "weft-sim: %s\n", err);
                return 2;
            }
            break;
        case 'f':
            if (wf_cost_model_load(optarg, cfg.cost, err, sizeof err) != WF_OK) {
                fprintf(stderr, "weft-sim: %s\n", err);
                return 2;
            }
            break;
        case 't': if (parse_int(optarg, "--max-batch-tokens", &cfg.max_batch_tokens)) return 2; break;
        case 'r': if (parse_int(optarg, "--max-running", &cfg.max_running)) return 2; break;
        case 'k': if (parse_int(optarg, "--kv-blocks", &cfg.kv_blocks)) return 2; break;
        case 'b': if (parse_int(optarg, "--block-size", &cfg.block_size)) return 2; break;
        case 'n': if (parse_int(optarg, "--n-ctx", &cfg.n_ctx)) return 2; break;
        case 'P': cfg.prefix_cache = false; break;
        case 'a': {
            char *end;
            cfg.admission_factor = strtod(optarg, &end);
            if (*end || !(cfg.admission_factor > 0)) {
                fprintf(stderr, "weft-sim: --admission-factor must be a positive number\n");
                return 2;
            }
            break;
        }
        case 'S': {
            char *end;
            cfg.prefill_stretch = strtod(optarg, &end);
            if (*end || !(cfg.prefill_stretch >= 0)) {
                fprintf(stderr, "weft-sim: --prefill-stretch must be a number >= 0\n");
                return 2;
            }
            break;
        }
        case 'q': if (parse_int(optarg, "--queue-size", &cfg.queue_size)) return 2; break;
        case 'g': if (parse_int(optarg, "--groups", &cfg.n_groups)) return 2; break;
        case 'R': per_request = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    wf_sim_request *reqs;
    int n;
    if (wf_sim_load_workload(argv[optind], &reqs, &n, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-sim: %s\n", err);
        return 1;
    }
    wf_sim_outcome *out = calloc((size_t)(n > 0 ? n : 1), sizeof *out);
    wf_sim_report rep;
    if (!out || wf_sim_run(&cfg, reqs, n, out, &rep) != WF_OK) {
        fprintf(stderr, "weft-sim: simulation failed (bad configuration or out of memory)\n");
        free(out);
        free(reqs);
        return 1;
    }
    if (per_request) {
        printf("# idx arrival_ms prompt output ttft_ms tpot_ms e2e_ms preemptions met\n");
        for (int i = 0; i < n; i++)
            printf("%d %.3f %d %d %.3f %.3f %.3f %d %s\n", i, reqs[i].arrival_ms,
                   reqs[i].prompt_len, out[i].generated, out[i].ttft_ms, out[i].tpot_ms,
                   out[i].e2e_ms, out[i].preemptions,
                   out[i].rejected ? "rejected" : out[i].failed ? "failed"
                                   : out[i].met_slo ? "yes" : "no");
    }
    printf("policy %s  cost %.4g,%.4g,%.4g,%.4g  max_batch_tokens %d  kv_blocks %d x %d\n",
           cfg.policy, cfg.cost[0], cfg.cost[1], cfg.cost[2], cfg.cost[3], cfg.max_batch_tokens,
           cfg.kv_blocks, cfg.block_size);
    printf("requests %d  rejected %d  failed %d  iterations %llu  preemptions %llu  makespan "
           "%.1f ms\n",
           rep.n_requests, rep.n_rejected, rep.n_failed, (unsigned long long)rep.iterations,
           (unsigned long long)rep.preemptions, rep.makespan_ms);
    printf("%-5s %12s %12s %12s\n", "", "p50", "p90", "p99");
    printf("%-5s %12.3f %12.3f %12.3f ms\n", "TTFT", rep.ttft_ms[0], rep.ttft_ms[1], rep.ttft_ms[2]);
    printf("%-5s %12.3f %12.3f %12.3f ms\n", "TPOT", rep.tpot_ms[0], rep.tpot_ms[1], rep.tpot_ms[2]);
    printf("%-5s %12.3f %12.3f %12.3f ms\n", "e2e", rep.e2e_ms[0], rep.e2e_ms[1], rep.e2e_ms[2]);
    printf("SLO attainment %.1f%%  goodput %.3f req/s  throughput %.1f tok/s\n",
           100.0 * rep.slo_attainment, rep.goodput_rps, rep.throughput_tok_s);
    free(out);
    free(reqs);
    return 0;
}
