/* weft-bench: benchmarks OpenAI-compatible LLM servers (weftd, llama.cpp's server, vLLM) with
 * vLLM benchmark_serving metric definitions. Command line parsing and the run sequence; the
 * work is in runner.c (load), metrics.c (arithmetic) and report.c (outputs). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loadgen/dataset.h"
#include "loadgen/image.h"
#include "loadgen/metrics.h"
#include "sched/workload/workload.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "weft_version.h"

#define MAX_POINTS 64

static void usage(FILE *f) {
    fprintf(f,
"usage: weft-bench [options]               run a benchmark\n"
"       weft-bench compare A.json B.json    print two results side by side with B/A ratios\n"
"\n"
"Target (only 127.0.0.1:8080 unless you name another address):\n"
"  --url URL               http://HOST:PORT[/v1/completions|/v1/chat/completions]\n"
"  --host HOST --port N    (defaults 127.0.0.1, 8080)\n"
"  --endpoint E            completions (default), chat, or a path\n"
"  --model NAME            \"model\" field (default: the first of GET /v1/models, else none;\n"
"                          images: the first listed as \"type\": \"image\", its size and classes)\n"
"  --api-key KEY           sent as Authorization: Bearer KEY\n"
"Load (each list element is one load point; several make a sweep):\n"
"  --concurrency N[,N..]   closed loop: N requests always in flight (default 1)\n"
"  --rate R[,R..]          open loop: arrivals at R requests/s ('inf' = all at once)\n"
"  --burstiness B          gamma shape of arrival gaps; 1 = Poisson (default), <1 burstier\n"
"  --max-concurrency N     open loop: at most N in flight (arrivals wait)\n"
"Bounds (every run stops by itself):\n"
"  --num-requests N        requests per load point (default 100, at most %d)\n"
"  --duration S            no new request after S seconds (default 120, at most %.0f)\n"
"  --grace S               then wait S seconds for requests in flight (default 30)\n"
"  --timeout S             per-request timeout (default 600)\n"
"  --retry-after           re-send a request refused (429/503) after its Retry-After delay,\n"
"                          while its timeout and --duration allow (default: count it refused)\n"
"Requests:\n"
"  --dataset KIND          synthetic (default), sharegpt, prompts\n"
"  --dataset-path FILE     ShareGPT JSON, or prompt list (one per line, or JSON strings)\n"
"  --input-len SPEC        synthetic prompt tokens: N, LO:HI or @histogram (default 128)\n"
"  --output-len SPEC       max_tokens: N, LO:HI or @histogram (default 128; sharegpt: reply)\n"
"  --max-total-len N       sharegpt: skip conversations longer than N tokens (default 2048)\n"
"  --seed N                request sequence and arrival times (default 0)\n"
"  --fresh-prompts         a sweep's load points get disjoint requests (point i takes items\n"
"                          i*N..(i+1)*N-1 of one seeded sequence) instead of the same N, so a\n"
"                          server's prompt/prefix cache cannot serve one point from another\n"
"  --no-stream             non-streaming requests (TTFT = e2e, no TPOT/ITL)\n"
"  --no-ignore-eos         do not send ignore_eos (outputs may stop early)\n"
"  --temperature T         sampling temperature (default: the server's)\n"
"  --extra-body JSON       object merged into every request body\n"
"  --slo-class NAME:TTFT_MS:TPOT_MS:WEIGHT  (repeatable) SLO classes, mixed by weight\n"
"  --no-slo-ext            do not send weft's \"slo\" field (for other servers)\n"
"Output:\n"
"  --label NAME            name of this system in results (e.g. weftd)\n"
"  --json FILE             result file (vLLM-style keys)\n"
"  --csv FILE              one line per request\n"
"  --plot PREFIX           PREFIX_latency_cdf.png (+ PREFIX_throughput.png for sweeps)\n"
"  --no-progress           no progress bar (it is drawn only when stdout is a terminal)\n"
"  --version, --help\n"
"Image workload (--workload images: POST /v1/images/generations, PNGs checked):\n"
"  --workload W            text (default) or images\n"
"  --profile P             piecewise-Poisson arrivals: short, tridentserve, foreground_burst\n"
"                          (GF-DiT's) or a profile file (see loadgen/README.md)\n"
"  --profile-duration S    stretch or compress the profile's clock to S seconds\n"
"  --rate-scale K[,K..]    multiply the profile's rates by K (one load point each)\n"
"  --target-load L[,L..]   scale the profile's rates to an offered load L of --servers\n"
"                          (work = sum of T_single; 1 = saturated), one load point each\n"
"  --servers N             servers (ranks) behind the target, for --target-load (default 1)\n"
"  --image-class NAME:WxH:STEPS[:ALPHA[:PRIORITY]]  (repeatable) add or replace a class;\n"
"                          defaults S:8x8:5:1.5:100 M:8x8:15:2:50 L:8x8:45:6:0\n"
"  --image-size WxH        the size of every class (default 8x8, weftd's default DiT's;\n"
"                          a profile's or trace's own); --image-class still overrides\n"
"  --image-mix S=W,M=W..   class weights for --rate/--concurrency (default equal)\n"
"  --t-single S=MS,..      T_single per class in ms (else measured before the run: requests\n"
"                          of each class alone, after one warm-up request)\n"
"  --calibrate-reps N      calibration requests per class; T_single = their median (3)\n"
"  --image-n N             images per request (default 1)\n"
"  --image-prompt TEXT     prompt (default \"a photo\")\n"
"  --class-labels N        send class_label drawn from 0..N-1 (class-conditional models;\n"
"                          default: the num_classes weftd lists for the model)\n"
"  --guidance G            guidance_scale (default: the server's)\n"
"  --stream                stream: true (SSE progress events, then the image)\n"
"  --no-image-seed         do not send a per-request seed\n"
"  --trace-out FILE        --profile: also write each load point's requests (arrival, class,\n"
"                          size, steps, deadline, seed) in GF-DiT's workload JSON, for a\n"
"                          simulator to replay (FILE.N.json per point when several)\n"
"  --dry-run               --profile: write --trace-out and send nothing (needs --t-single)\n"
"  --trace FILE            replay a trace (--trace-out's, or GF-DiT's workload JSON): its\n"
"                          arrivals, classes, T_single and alphas; --image-class NAME:...\n"
"                          maps a class to this server's size; --rate-scale K: K x faster\n"
"  (deadlines: arrival + ALPHA x T_single, sent as \"slo\": {\"deadline_ms\"} and \"priority\"\n"
"   unless --no-slo-ext)\n",
            WF_LOADGEN_MAX_REQUESTS, WF_LOADGEN_MAX_DURATION_S);
}

/* Parses "a,b,c" into doubles ('inf' allowed). Returns the count or -1. */
static int parse_list(const char *s, double *out, int max, int allow_inf) {
    int n = 0;
    const char *p = s;
    while (*p) {
        if (n == max) return -1;
        char *e;
        double v;
        if (allow_inf && strncmp(p, "inf", 3) == 0) {
            v = INFINITY;
            e = (char *)p + 3;
        } else {
            errno = 0;
            v = strtod(p, &e);
            if (e == p || errno || !isfinite(v) || v <= 0) return -1;
        }
        out[n++] = v;
        if (*e == ',') e++;
        else if (*e) return -1;
        p = e;
    }
    return n;
}

static int parse_double(const char *s, double *out) {
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (e == s || *e || errno || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* A whole number in [lo, hi] (1e3 is one too). */
static int parse_count(const char *s, double lo, double hi, double *out) {
    return parse_double(s, out) || *out < lo || *out > hi || *out != floor(*out) ? -1 : 0;
}

/* Seconds in (0, WF_LOADGEN_MAX_DURATION_S], or [0, ...] with zero_ok. */
static int parse_seconds(const char *s, bool zero_ok, double *out) {
    return parse_double(s, out) || *out < 0 || (*out == 0 && !zero_ok) ||
                   *out > WF_LOADGEN_MAX_DURATION_S
               ? -1
               : 0;
}

static int parse_slo_class(const char *s, wf_loadgen_slo_class *c) {
    memset(c, 0, sizeof *c);
    const char *p1 = strchr(s, ':');
    if (!p1 || p1 == s || (size_t)(p1 - s) >= sizeof c->name) return -1;
    memcpy(c->name, s, (size_t)(p1 - s));
    char *e;
    errno = 0;
    c->ttft_ms = strtod(p1 + 1, &e);
    if (*e != ':' || errno || !isfinite(c->ttft_ms) || c->ttft_ms < 0) return -1;
    c->tpot_ms = strtod(e + 1, &e);
    if (errno || !isfinite(c->tpot_ms) || c->tpot_ms < 0) return -1;
    c->weight = 1;
    if (*e == ':') {
        c->weight = strtod(e + 1, &e);
        if (errno || !isfinite(c->weight) || c->weight < 0) return -1;
    }
    return *e ? -1 : 0;
}

/* http://host:port/path -> host, port, path ("" when none). */
static int parse_url(const char *url, char *host, size_t hl, int *port, char *path, size_t pl) {
    if (strncmp(url, "https://", 8) == 0) return -2;
    if (strncmp(url, "http://", 7) != 0) return -1;
    const char *h = url + 7, *slash = strchr(h, '/');
    size_t len = slash ? (size_t)(slash - h) : strlen(h);
    char hp[300];
    if (len == 0 || len >= sizeof hp) return -1;
    memcpy(hp, h, len);
    hp[len] = '\0';
    char *colon = hp[0] == '[' ? strstr(hp, "]:") : strrchr(hp, ':');
    if (colon && hp[0] == '[') colon++;
    *port = 80;
    if (colon) {
        *colon = '\0';
        char *e;
        long v = strtol(colon + 1, &e, 10);
        if (*e || v < 1 || v > 65535) return -1;
        *port = (int)v;
    }
    if (strlen(hp) >= hl) return -1;
    snprintf(host, hl, "%s", hp);
    snprintf(path, pl, "%s", slash && strcmp(slash, "/") != 0 ? slash : "");
    return 0;
}

static char *discover_model(const wf_loadgen_target *t, const char *api_key) {
    int status = 0;
    char *body = NULL;
    size_t len = 0;
    char *model = NULL;
    if (wf_loadgen_http_get(t, "/v1/models", api_key, 10, &status, &body, &len) == WF_OK &&
        status == 200 && body) {
        json_t *r = json_loadb(body, len, 0, NULL);
        json_t *d = json_object_get(r, "data");
        json_t *id = json_object_get(json_array_get(d, 0), "id");
        if (json_is_string(id)) model = strdup(json_string_value(id));
        json_decref(r);
    }
    free(body);
    return model;
}

/* The first image model of GET /v1/models (weftd marks them "type": "image", with their "size"
 * and "num_classes"), for --workload images without --model. NULL when there is none. */
static char *discover_image_model(const wf_loadgen_target *t, const char *api_key, int *w, int *h,
                                  int *num_classes) {
    int status = 0;
    char *body = NULL;
    size_t len = 0;
    char *model = NULL;
    if (wf_loadgen_http_get(t, "/v1/models", api_key, 10, &status, &body, &len) == WF_OK &&
        status == 200 && body) {
        json_t *r = json_loadb(body, len, 0, NULL);
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(r, "data"), i, m) {
            const char *type = json_string_value(json_object_get(m, "type"));
            const char *id = json_string_value(json_object_get(m, "id"));
            if (!type || strcmp(type, "image") != 0 || !id) continue;
            model = strdup(id);
            const char *size = json_string_value(json_object_get(m, "size"));
            char tail;
            if (size && sscanf(size, "%dx%d%c", w, h, &tail) != 2) *w = *h = 0;
            json_t *nc = json_object_get(m, "num_classes");
            if (json_is_integer(nc) && json_integer_value(nc) > 0 && json_integer_value(nc) < 1000000)
                *num_classes = (int)json_integer_value(nc);
            break;
        }
        json_decref(r);
    }
    free(body);
    return model;
}

enum {
    OPT_URL = 256, OPT_HOST, OPT_PORT, OPT_ENDPOINT, OPT_MODEL, OPT_API_KEY, OPT_CONC, OPT_RATE,
    OPT_BURST, OPT_MAXCONC, OPT_NUM, OPT_DURATION, OPT_GRACE, OPT_TIMEOUT, OPT_RETRY, OPT_DATASET,
    OPT_DATAPATH, OPT_INLEN, OPT_OUTLEN, OPT_MAXTOTAL, OPT_SEED, OPT_NOSTREAM, OPT_NOEOS,
    OPT_TEMP, OPT_EXTRA, OPT_SLO, OPT_NOSLO, OPT_LABEL, OPT_JSON, OPT_CSV, OPT_PLOT,
    OPT_NOPROGRESS, OPT_FRESH, OPT_VERSION, OPT_HELP, OPT_WORKLOAD, OPT_PROFILE, OPT_PROFDUR,
    OPT_RSCALE, OPT_TLOAD, OPT_SERVERS, OPT_ICLASS, OPT_IMIX, OPT_TSINGLE, OPT_CALREPS, OPT_IMGN,
    OPT_IPROMPT, OPT_LABELS, OPT_GUIDANCE, OPT_STREAM, OPT_NOISEED, OPT_ISIZE, OPT_TRACEOUT,
    OPT_DRYRUN, OPT_TRACE,
};

static const struct option long_opts[] = {
    {"url", required_argument, 0, OPT_URL}, {"host", required_argument, 0, OPT_HOST},
    {"port", required_argument, 0, OPT_PORT}, {"endpoint", required_argument, 0, OPT_ENDPOINT},
    {"model", required_argument, 0, OPT_MODEL}, {"api-key", required_argument, 0, OPT_API_KEY},
    {"concurrency", required_argument, 0, OPT_CONC}, {"rate", required_argument, 0, OPT_RATE},
    {"burstiness", required_argument, 0, OPT_BURST},
    {"max-concurrency", required_argument, 0, OPT_MAXCONC},
    {"num-requests", required_argument, 0, OPT_NUM}, {"duration", required_argument, 0, OPT_DURATION},
    {"grace", required_argument, 0, OPT_GRACE}, {"timeout", required_argument, 0, OPT_TIMEOUT},
    {"dataset", required_argument, 0, OPT_DATASET},
    {"dataset-path", required_argument, 0, OPT_DATAPATH},
    {"input-len", required_argument, 0, OPT_INLEN}, {"output-len", required_argument, 0, OPT_OUTLEN},
    {"max-total-len", required_argument, 0, OPT_MAXTOTAL}, {"seed", required_argument, 0, OPT_SEED},
    {"no-stream", no_argument, 0, OPT_NOSTREAM}, {"no-ignore-eos", no_argument, 0, OPT_NOEOS},
    {"temperature", required_argument, 0, OPT_TEMP}, {"extra-body", required_argument, 0, OPT_EXTRA},
    {"slo-class", required_argument, 0, OPT_SLO}, {"no-slo-ext", no_argument, 0, OPT_NOSLO},
    {"label", required_argument, 0, OPT_LABEL}, {"json", required_argument, 0, OPT_JSON},
    {"csv", required_argument, 0, OPT_CSV}, {"plot", required_argument, 0, OPT_PLOT},
    {"no-progress", no_argument, 0, OPT_NOPROGRESS}, {"retry-after", no_argument, 0, OPT_RETRY},
    {"fresh-prompts", no_argument, 0, OPT_FRESH}, {"version", no_argument, 0, OPT_VERSION},
    {"help", no_argument, 0, OPT_HELP}, {"workload", required_argument, 0, OPT_WORKLOAD},
    {"profile", required_argument, 0, OPT_PROFILE},
    {"profile-duration", required_argument, 0, OPT_PROFDUR},
    {"rate-scale", required_argument, 0, OPT_RSCALE},
    {"target-load", required_argument, 0, OPT_TLOAD}, {"servers", required_argument, 0, OPT_SERVERS},
    {"image-class", required_argument, 0, OPT_ICLASS}, {"image-mix", required_argument, 0, OPT_IMIX},
    {"t-single", required_argument, 0, OPT_TSINGLE},
    {"calibrate-reps", required_argument, 0, OPT_CALREPS},
    {"image-n", required_argument, 0, OPT_IMGN}, {"image-prompt", required_argument, 0, OPT_IPROMPT},
    {"class-labels", required_argument, 0, OPT_LABELS},
    {"guidance", required_argument, 0, OPT_GUIDANCE}, {"stream", no_argument, 0, OPT_STREAM},
    {"no-image-seed", no_argument, 0, OPT_NOISEED}, {"image-size", required_argument, 0, OPT_ISIZE},
    {"trace-out", required_argument, 0, OPT_TRACEOUT}, {"dry-run", no_argument, 0, OPT_DRYRUN},
    {"trace", required_argument, 0, OPT_TRACE},
    {0, 0, 0, 0},
};

/* The outputs every run writes; returns the exit code (1: an output failed, 3: nothing
 * succeeded -- a wrong URL or a server that is down). */
static int report_all(const wf_loadgen_info *info, const wf_loadgen_point *pts, size_t done,
                      const char *json_path, const char *csv_path, const char *plot_prefix) {
    char err[512];
    int rc = 0;
    wf_loadgen_report_print(stdout, info, pts, done);
    if (json_path && wf_loadgen_report_write_json(json_path, info, pts, done, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-bench: %s\n", err);
        rc = 1;
    }
    if (csv_path && wf_loadgen_report_write_csv(csv_path, pts, done, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-bench: %s\n", err);
        rc = 1;
    }
    if (plot_prefix && wf_loadgen_report_plot(plot_prefix, pts, done, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-bench: plot: %s\n", err);
        rc = 1;
    }
    uint64_t completed = 0;
    for (size_t i = 0; i < done; i++) completed += pts[i].image ? pts[i].isum.completed : pts[i].sum.completed;
    if (completed == 0) {
        fprintf(stderr, "weft-bench: no request succeeded\n");
        rc = rc ? rc : 3;
    }
    return rc;
}

/* ---- image workload ------------------------------------------------------------------------ */

typedef struct image_cfg {
    bool on;
    const char *profile;     /* NULL: --rate (gamma gaps) or --concurrency, classes by mix */
    double profile_duration; /* 0: the profile's own clock */
    double scales[MAX_POINTS], loads[MAX_POINTS];
    int n_scales, n_loads;
    int servers;
    wf_workload_class classes[WF_WORKLOAD_MAX_CLASSES]; /* --image-class */
    size_t n_classes;
    const char *mix, *t_single;
    int reps;
    wf_loadgen_image_opts io;
    bool stream_set;
    int width, height; /* --image-size: of every class before --image-class; 0 = theirs */
    const char *trace_out;
    bool dry_run;
    const char *trace;          /* --trace: replay this trace file */
    double *tr_arrival;         /* its requests, read by cmd_images, freed by the caller */
    wf_loadgen_prompt *tr_items;
    size_t tr_n;
} image_cfg;

/* n items with seeded per-request seeds; classes from cls[] or, when NULL, drawn from mix. */
static wf_status image_items(size_t n, uint64_t seed, const int *cls, const double *mix,
                             size_t n_classes, wf_loadgen_dataset *ds) {
    memset(ds, 0, sizeof *ds);
    ds->items = calloc(n ? n : 1, sizeof *ds->items);
    if (!ds->items) return WF_ENOMEM;
    ds->n = n;
    wf_workload_rng rng;
    wf_workload_rng_seed(&rng, seed ^ 0x696d616765ULL);
    double total = 0;
    for (size_t c = 0; mix && c < n_classes; c++) total += mix[c];
    for (size_t i = 0; i < n; i++) {
        int c = 0;
        if (cls) {
            c = cls[i];
        } else if (total > 0) {
            c = wf_workload_rng_pick(&rng, mix, n_classes, total);
        }
        ds->items[i].slo_class = c;
        ds->items[i].text_seed = wf_workload_rng_next(&rng);
    }
    return WF_OK;
}

/* --t-single S=120,M=300: fills the named classes' T_single. */
static int parse_t_single(const char *s, wf_workload_profile *p) {
    char buf[512];
    if (strlen(s) >= sizeof buf) return -1;
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        if (!eq) return -1;
        *eq = '\0';
        int c = wf_workload_profile_class_index(p, t);
        double v;
        if (c < 0 || parse_double(eq + 1, &v) || !(v > 0)) return -1;
        p->classes[c].t_single_ms = v;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* T_single of every class the run uses that has none yet: after one warm-up request, `reps`
 * requests of the class one at a time with nothing else in flight; the median latency. */
static int calibrate(const wf_loadgen_run_opts *base, wf_workload_profile *p, const bool *used,
                     int reps) {
    char err[512];
    bool warmed = false;
    for (size_t c = 0; c < p->n_classes; c++) {
        if (p->classes[c].t_single_ms > 0 || !used[c]) continue;
        size_t n = (size_t)reps + (warmed ? 0 : 1);
        int *cls = malloc(n * sizeof *cls);
        wf_loadgen_dataset ds;
        if (!cls) return -1;
        for (size_t i = 0; i < n; i++) cls[i] = (int)c;
        if (image_items(n, base->seed + 7919 * (c + 1), cls, NULL, p->n_classes, &ds) != WF_OK) {
            free(cls);
            return -1;
        }
        free(cls);
        wf_loadgen_run_opts o = *base;
        o.mode = WF_LOADGEN_CLOSED;
        o.concurrency = 1;
        o.num_requests = n;
        o.schedule = NULL;
        o.slo_ext = false; /* no deadline exists yet */
        o.retry_after = true; /* a shedding server: wait as told; the request's time is not used */
        o.progress = false;
        o.duration_s = WF_LOADGEN_MAX_DURATION_S;
        wf_loadgen_run_result res;
        if (wf_loadgen_run(&o, &ds, &res, err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-bench: calibration of class %s: %s\n", p->classes[c].name, err);
            free(ds.items);
            return -1;
        }
        free(ds.items);
        double lat[64];
        size_t m = 0;
        int rc = 0;
        for (size_t i = warmed ? 0 : 1; i < res.n; i++) {
            const wf_loadgen_record *r = &res.records[i];
            if (r->outcome != WF_LOADGEN_OK) {
                fprintf(stderr, "weft-bench: calibration request of class %s failed: %s\n",
                        p->classes[c].name, r->error[0] ? r->error : "not sent");
                rc = -1;
                break;
            }
            /* A re-sent request's latency holds the Retry-After wait: not T_single. */
            if (r->retries == 0 && m < sizeof lat / sizeof lat[0]) lat[m++] = wf_loadgen_record_e2e_ms(r);
        }
        if (rc == 0 && m == 0) {
            fprintf(stderr, "weft-bench: calibration of class %s: every request was refused first "
                    "(429/503); give --t-single or calibrate on an idle server\n", p->classes[c].name);
            rc = -1;
        }
        if (!warmed && rc == 0 && res.records[0].outcome != WF_LOADGEN_OK) {
            fprintf(stderr, "weft-bench: warm-up request failed: %s\n", res.records[0].error);
            rc = -1;
        }
        wf_loadgen_run_result_free(&res);
        if (rc) return rc;
        warmed = true;
        qsort(lat, m, sizeof *lat, cmp_double);
        p->classes[c].t_single_ms = m % 2 ? lat[m / 2] : 0.5 * (lat[m / 2 - 1] + lat[m / 2]);
        /* The spread shows a calibration disturbed by other load on the machine. */
        printf("calibrated T_single of class %s (%dx%d, %d steps): %.1f ms (median of %zu, "
               "%.1f-%.1f)\n", p->classes[c].name, p->classes[c].width, p->classes[c].height,
               p->classes[c].steps, p->classes[c].t_single_ms, m, lat[0], lat[m - 1]);
    }
    return 0;
}

typedef struct image_run {
    const char *label, *target, *json_path, *csv_path, *plot_prefix;
    bool num_set, duration_set;
    double rates[MAX_POINTS], conc[MAX_POINTS];
    int n_rates, n_conc;
} image_run;

static int cmd_images(wf_loadgen_run_opts *o, image_cfg *img, const image_run *ir) {
    char err[512];
    wf_workload_profile prof;
    if (img->trace) {
        wf_workload_profile_default_classes(&prof);
        if (img->profile || ir->n_rates || ir->n_conc || img->n_loads || img->profile_duration > 0) {
            fprintf(stderr, "weft-bench: --trace sets the arrivals: --rate-scale K replays it K "
                            "times faster; --profile, --rate, --concurrency, --target-load and "
                            "--profile-duration do not apply\n");
            return 2;
        }
        if (wf_loadgen_image_trace_read(img->trace, &prof, &img->tr_arrival, &img->tr_items,
                                        &img->tr_n, err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-bench: %s\n", err);
            return 2;
        }
    } else if (img->profile) {
        if (wf_workload_profile_load(img->profile, &prof, err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-bench: %s\n", err);
            return 2;
        }
        if (ir->n_rates || ir->n_conc) {
            fprintf(stderr, "weft-bench: --profile sets the arrivals: use --rate-scale or "
                            "--target-load for load points, not --rate/--concurrency\n");
            return 2;
        }
    } else {
        wf_workload_profile_default_classes(&prof);
        if (img->n_scales || img->n_loads || img->profile_duration > 0) {
            fprintf(stderr, "weft-bench: --rate-scale, --target-load and --profile-duration go "
                            "with --profile (--rate-scale also with --trace)\n");
            return 2;
        }
    }
    if ((img->trace_out || img->dry_run) && !img->profile) {
        fprintf(stderr, "weft-bench: --trace-out and --dry-run go with --profile\n");
        return 2;
    }
    if (img->dry_run && !img->trace_out) {
        fprintf(stderr, "weft-bench: --dry-run writes the traces of --trace-out and nothing else: "
                        "give --trace-out\n");
        return 2;
    }
    if (img->n_scales && img->n_loads) {
        fprintf(stderr, "weft-bench: give --rate-scale or --target-load, not both\n");
        return 2;
    }
    if (img->mix && (img->profile || img->trace)) {
        fprintf(stderr, "weft-bench: --image-mix is for --rate/--concurrency: a profile's phases "
                        "and a trace's requests carry their own classes\n");
        return 2;
    }
    for (size_t c = 0; img->width && c < prof.n_classes; c++) {
        wf_workload_class *k = &prof.classes[c];
        /* A trace's T_single was measured at its own size: not this one's. */
        if (k->width != img->width || k->height != img->height) k->t_single_ms = 0;
        k->width = img->width;
        k->height = img->height;
    }
    for (size_t i = 0; i < img->n_classes; i++)
        if (wf_workload_profile_set_class(&prof, &img->classes[i]) != WF_OK) {
            fprintf(stderr, "weft-bench: at most %d image classes\n", WF_WORKLOAD_MAX_CLASSES);
            return 2;
        }
    double mix[WF_WORKLOAD_MAX_CLASSES];
    for (size_t c = 0; c < WF_WORKLOAD_MAX_CLASSES; c++) mix[c] = 1;
    if (img->mix && wf_workload_profile_parse_mix(&prof, img->mix, mix, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-bench: --image-mix: %s\n", err);
        return 2;
    }
    if (img->t_single && parse_t_single(img->t_single, &prof)) {
        fprintf(stderr, "weft-bench: bad --t-single '%s': use CLASS=MS[,CLASS=MS...] with known "
                        "classes\n", img->t_single);
        return 2;
    }
    if (img->profile_duration > 0)
        wf_workload_profile_scale_time(&prof, img->profile_duration / wf_workload_profile_end_s(&prof));
    img->io.classes = prof.classes;
    img->io.n_classes = prof.n_classes;
    o->image = &img->io;
    if (!img->stream_set) o->stream = false; /* OpenAI's image API answers in one body */
    bool used[WF_WORKLOAD_MAX_CLASSES] = {0};
    for (size_t i = 0; i < img->tr_n; i++) used[img->tr_items[i].slo_class] = true;
    for (size_t c = 0; !img->trace && c < prof.n_classes; c++) {
        if (!img->profile) used[c] = mix[c] > 0;
        for (size_t k = 0; img->profile && k < prof.n_phases; k++)
            if (prof.phases[k].rate > 0 && prof.phases[k].mix[c] > 0) used[c] = true;
    }
    if (img->dry_run) {
        for (size_t c = 0; c < prof.n_classes; c++)
            if (used[c] && !(prof.classes[c].t_single_ms > 0)) {
                fprintf(stderr, "weft-bench: --dry-run sends nothing, so it cannot calibrate: give "
                                "--t-single for class %s\n", prof.classes[c].name);
                return 2;
            }
    } else if (calibrate(o, &prof, used, img->reps) != 0) {
        return 1;
    }

    int n_points = img->trace ? (img->n_scales ? img->n_scales : 1)
                   : img->profile ? (img->n_loads ? img->n_loads : img->n_scales ? img->n_scales : 1)
                   : ir->n_rates ? ir->n_rates : ir->n_conc ? ir->n_conc : 1;
    wf_loadgen_point *pts = calloc((size_t)n_points, sizeof *pts);
    if (!pts) return 1;
    int done = 0, rc = 0;
    char prof_desc[256] = "";
    for (int i = 0; i < n_points && rc == 0; i++) {
        wf_loadgen_point *pt = &pts[i];
        wf_loadgen_run_opts po = *o;
        wf_loadgen_dataset ds = {0};
        double *arr = NULL;
        int *cls = NULL;
        pt->image = true;
        if (img->trace) {
            /* The trace's own requests, its clock divided by --rate-scale. */
            double k = img->n_scales ? img->scales[i] : 1;
            size_t n = ir->num_set && o->num_requests < img->tr_n ? o->num_requests : img->tr_n;
            arr = malloc(n * sizeof *arr);
            ds.items = malloc(n * sizeof *ds.items);
            if (!arr || !ds.items) {
                rc = 1;
            } else {
                for (size_t q = 0; q < n; q++) arr[q] = img->tr_arrival[q] / k;
                memcpy(ds.items, img->tr_items, n * sizeof *ds.items);
                ds.n = n;
            }
            pt->scale = k;
            snprintf(pt->label, sizeof pt->label, "trace x%g", k);
            snprintf(prof_desc, sizeof prof_desc, "trace %.200s (%zu requests over %.0f s)", img->trace,
                     img->tr_n, img->tr_arrival[img->tr_n - 1]);
            pt->mode = po.mode = WF_LOADGEN_OPEN;
            pt->rate = arr && n > 1 && arr[n - 1] > 0 ? (double)n / arr[n - 1] : 0;
            pt->burstiness = 1;
            pt->max_concurrency = o->max_concurrency;
            po.schedule = arr;
            po.num_requests = n;
            if (!ir->duration_set && arr) po.duration_s = arr[n - 1] + 1;
        } else if (img->profile) {
            wf_workload_profile pp = prof;
            double k = img->n_scales ? img->scales[i] : 1;
            if (img->n_loads) {
                double cur = wf_workload_profile_offered_load(&pp, img->servers);
                if (!(cur > 0)) {
                    fprintf(stderr, "weft-bench: profile %s offers no load to scale\n", pp.name);
                    rc = 2;
                    break;
                }
                k = img->loads[i] / cur;
            }
            wf_workload_profile_scale_rate(&pp, k);
            pt->scale = k;
            if (img->n_loads) snprintf(pt->label, sizeof pt->label, "%.40s load=%g", pp.name, img->loads[i]);
            else snprintf(pt->label, sizeof pt->label, "%.40s x%g", pp.name, k);
            snprintf(prof_desc, sizeof prof_desc, "profile %s over %.0f s (%zu phases)", pp.name,
                     wf_workload_profile_end_s(&pp), pp.n_phases);
            size_t cap = ir->num_set ? o->num_requests : WF_LOADGEN_MAX_REQUESTS;
            double expect = wf_workload_profile_expected_requests(&pp);
            size_t want = expect * 2 + 64 < (double)cap ? (size_t)(expect * 2 + 64) : cap;
            arr = malloc(want * sizeof *arr);
            cls = malloc(want * sizeof *cls);
            size_t n = arr && cls ? wf_workload_profile_sample(&pp, o->seed, want, arr, cls) : 0;
            if (n == 0) {
                fprintf(stderr, "weft-bench: %s: the profile yields no arrivals (raise the rates "
                        "with --rate-scale or --target-load)\n", pt->label);
                free(arr), free(cls);
                rc = 2;
                break;
            }
            pt->mode = po.mode = WF_LOADGEN_OPEN;
            pt->rate = expect / wf_workload_profile_end_s(&pp);
            pt->burstiness = 1;
            pt->max_concurrency = o->max_concurrency;
            po.schedule = arr;
            po.num_requests = n;
            if (!ir->duration_set) po.duration_s = wf_workload_profile_end_s(&pp) + 1;
            if (image_items(n, o->seed, cls, NULL, prof.n_classes, &ds) != WF_OK) rc = 1;
            if (rc == 0 && img->trace_out) {
                char path[1024];
                if (n_points == 1) snprintf(path, sizeof path, "%s", img->trace_out);
                else snprintf(path, sizeof path, "%s.%d.json", img->trace_out, i);
                if (wf_loadgen_image_trace_write(path, &pp, k, o->seed, arr, ds.items, n, err,
                                                 sizeof err) != WF_OK) {
                    fprintf(stderr, "weft-bench: %s\n", err);
                    rc = 1;
                } else {
                    printf("%s: %zu requests written to %s\n", pt->label, n, path);
                }
            }
            if (rc == 0 && img->dry_run) {
                free(ds.items);
                free(arr);
                free(cls);
                continue;
            }
        } else {
            if (ir->n_rates) {
                pt->mode = po.mode = WF_LOADGEN_OPEN;
                pt->rate = po.rate = ir->rates[i];
                pt->burstiness = o->burstiness;
                pt->max_concurrency = o->max_concurrency;
                if (isinf(ir->rates[i])) snprintf(pt->label, sizeof pt->label, "rate=inf");
                else snprintf(pt->label, sizeof pt->label, "rate=%g", ir->rates[i]);
            } else {
                pt->mode = po.mode = WF_LOADGEN_CLOSED;
                pt->concurrency = po.concurrency = ir->n_conc ? (int)ir->conc[i] : 1;
                snprintf(pt->label, sizeof pt->label, "concurrency=%d", po.concurrency);
            }
            if (image_items(o->num_requests, o->seed, NULL, mix, prof.n_classes, &ds) != WF_OK) rc = 1;
        }
        if (rc == 0 && wf_loadgen_run(&po, &ds, &pt->res, err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-bench: %s: %s\n", pt->label, err);
            rc = 1;
        }
        free(ds.items);
        free(arr);
        free(cls);
        if (rc) break;
        wf_loadgen_summarize(pt->res.records, pt->res.n, NULL, 0, pt->res.duration_s, &pt->sum);
        wf_loadgen_image_summarize(pt->res.records, pt->res.n, prof.classes, prof.n_classes,
                                   pt->res.duration_s, &pt->isum);
        if (img->profile && !img->trace) {
            wf_workload_profile pp = prof; /* phase times are not scaled by rate */
            wf_loadgen_image_summarize_phases(pt->res.records, pt->res.n, pt->res.t0_ns, &pp, &pt->isum);
        }
        done++;
        if (pt->res.stop_reason && strcmp(pt->res.stop_reason, "interrupted") == 0) break;
    }
    char desc[600];
    int len = snprintf(desc, sizeof desc, "images n=%d", img->io.n);
    for (size_t c = 0; c < prof.n_classes && len > 0 && (size_t)len < sizeof desc; c++)
        len += snprintf(desc + len, sizeof desc - (size_t)len, " %s=%dx%d/%d steps/alpha %g",
                        prof.classes[c].name, prof.classes[c].width, prof.classes[c].height,
                        prof.classes[c].steps, prof.classes[c].alpha);
    wf_loadgen_info info = {
        .label = ir->label, .target = ir->target, .model = o->model, .dataset = desc,
        .stream = o->stream, .seed = o->seed, .num_requests = o->num_requests,
        .duration_s = o->duration_s, .workload = "images",
        .profile = prof_desc[0] ? prof_desc : NULL,
    };
    if (done > 0) {
        int r2 = report_all(&info, pts, (size_t)done, ir->json_path, ir->csv_path, ir->plot_prefix);
        if (rc == 0) rc = r2;
    }
    for (int i = 0; i < n_points; i++) wf_loadgen_run_result_free(&pts[i].res);
    free(pts);
    return rc;
}

static int bad(const char *opt, const char *val) {
    fprintf(stderr, "weft-bench: bad value for --%s: '%s' (see --help)\n", opt, val);
    return 2;
}

static int cmd_run(int argc, char **argv) {
    wf_loadgen_run_opts o;
    wf_loadgen_run_opts_default(&o);
    wf_loadgen_dataset_opts dopt = {0};
    dopt.kind = WF_LOADGEN_DATA_SYNTHETIC;
    const char *host = "127.0.0.1", *url = NULL, *endpoint = NULL, *label = NULL;
    const char *json_path = NULL, *csv_path = NULL, *plot_prefix = NULL;
    const char *in_spec = "128", *out_spec = NULL;
    char *model = NULL;
    int port = 8080;
    bool port_set = false, host_set = false, progress = true, fresh = false;
    double conc[MAX_POINTS] = {0}, rates[MAX_POINTS] = {0};
    int n_conc = 0, n_rates = 0;
    wf_loadgen_slo_class classes[WF_LOADGEN_MAX_CLASSES];
    size_t n_classes = 0;
    char err[512];
    int rc = 2;
    double d;
    const char *text_only = NULL; /* a text-workload option given, for the image check */
    bool burst_set = false;
    image_cfg img = {.servers = 1, .reps = 3, .io = {.n = 1, .guidance = -1, .send_seed = true}};
    bool num_set = false, duration_set = false;

    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        const char *name = NULL;
        for (const struct option *lo = long_opts; lo->name; lo++)
            if (lo->val == c) name = lo->name;
        switch (c) {
        case OPT_URL: url = optarg; break;
        case OPT_HOST: host = optarg; host_set = true; break;
        case OPT_PORT: {
            char *e;
            long v = strtol(optarg, &e, 10);
            if (*e || v < 1 || v > 65535) return bad(name, optarg);
            port = (int)v;
            port_set = true;
            break;
        }
        case OPT_ENDPOINT: endpoint = optarg; break;
        case OPT_MODEL: free(model); model = strdup(optarg); break;
        case OPT_API_KEY: o.api_key = optarg; break;
        case OPT_CONC:
            n_conc = parse_list(optarg, conc, MAX_POINTS, 0);
            if (n_conc < 1) return bad(name, optarg);
            for (int i = 0; i < n_conc; i++)
                if (conc[i] != floor(conc[i]) || conc[i] > WF_LOADGEN_MAX_CONNS) return bad(name, optarg);
            break;
        case OPT_RATE:
            n_rates = parse_list(optarg, rates, MAX_POINTS, 1);
            if (n_rates < 1) return bad(name, optarg);
            break;
        case OPT_BURST:
            text_only = text_only ? text_only : "--burstiness";
            burst_set = true;
            if (parse_double(optarg, &o.burstiness) || o.burstiness <= 0) return bad(name, optarg);
            break;
        case OPT_MAXCONC:
            if (parse_count(optarg, 1, WF_LOADGEN_MAX_CONNS, &d)) return bad(name, optarg);
            o.max_concurrency = (int)d;
            break;
        case OPT_NUM:
            if (parse_count(optarg, 1, WF_LOADGEN_MAX_REQUESTS, &d)) return bad(name, optarg);
            o.num_requests = (size_t)d;
            num_set = true;
            break;
        case OPT_DURATION:
            if (parse_seconds(optarg, false, &o.duration_s)) return bad(name, optarg);
            duration_set = true;
            break;
        case OPT_GRACE:
            if (parse_seconds(optarg, true, &o.grace_s)) return bad(name, optarg);
            break;
        case OPT_RETRY: o.retry_after = true; break;
        case OPT_TIMEOUT:
            if (parse_seconds(optarg, false, &o.timeout_s)) return bad(name, optarg);
            break;
        case OPT_DATASET:
            if (strcmp(optarg, "synthetic") == 0 || strcmp(optarg, "random") == 0)
                dopt.kind = WF_LOADGEN_DATA_SYNTHETIC;
            else if (strcmp(optarg, "sharegpt") == 0) dopt.kind = WF_LOADGEN_DATA_SHAREGPT;
            else if (strcmp(optarg, "prompts") == 0) dopt.kind = WF_LOADGEN_DATA_PROMPTS;
            else return bad(name, optarg);
            break;
        case OPT_DATAPATH: dopt.path = optarg; break;
        case OPT_INLEN: in_spec = optarg; text_only = "--input-len"; break;
        case OPT_OUTLEN: out_spec = optarg; text_only = "--output-len"; break;
        case OPT_MAXTOTAL:
            text_only = "--max-total-len";
            if (parse_count(optarg, 8, 1e7, &d)) return bad(name, optarg);
            dopt.max_total_len = (int32_t)d;
            break;
        case OPT_SEED: {
            char *e;
            errno = 0;
            unsigned long long v = strtoull(optarg, &e, 10);
            if (*e || errno || optarg[0] == '-') return bad(name, optarg);
            o.seed = v;
            break;
        }
        case OPT_NOSTREAM: o.stream = false; break;
        case OPT_NOEOS: o.ignore_eos = false; text_only = "--no-ignore-eos"; break;
        case OPT_TEMP:
            text_only = "--temperature";
            if (parse_double(optarg, &o.temperature) || o.temperature < 0) return bad(name, optarg);
            break;
        case OPT_EXTRA: {
            json_t *j = json_loads(optarg, 0, NULL);
            bool ok = json_is_object(j);
            json_decref(j);
            if (!ok) return bad(name, optarg);
            o.extra_body = optarg;
            break;
        }
        case OPT_SLO:
            if (n_classes == WF_LOADGEN_MAX_CLASSES) {
                fprintf(stderr, "weft-bench: at most %d SLO classes\n", WF_LOADGEN_MAX_CLASSES);
                return 2;
            }
            if (parse_slo_class(optarg, &classes[n_classes])) {
                fprintf(stderr, "weft-bench: bad --slo-class '%s': use NAME:TTFT_MS:TPOT_MS[:WEIGHT] "
                        "(0 = no target)\n", optarg);
                return 2;
            }
            n_classes++;
            break;
        case OPT_NOSLO: o.slo_ext = false; break;
        case OPT_LABEL: label = optarg; break;
        case OPT_JSON: json_path = optarg; break;
        case OPT_CSV: csv_path = optarg; break;
        case OPT_PLOT: plot_prefix = optarg; break;
        case OPT_NOPROGRESS: progress = false; break;
        case OPT_FRESH: fresh = true; break;
        case OPT_VERSION: printf("weft-bench %s\n", WEFT_VERSION); free(model); return 0;
        case OPT_HELP: usage(stdout); free(model); return 0;
        case OPT_WORKLOAD:
            if (strcmp(optarg, "images") == 0) img.on = true;
            else if (strcmp(optarg, "text") == 0) img.on = false;
            else return bad(name, optarg);
            break;
        case OPT_PROFILE: img.profile = optarg; break;
        case OPT_PROFDUR:
            if (parse_seconds(optarg, false, &img.profile_duration)) return bad(name, optarg);
            break;
        case OPT_RSCALE:
            img.n_scales = parse_list(optarg, img.scales, MAX_POINTS, 0);
            if (img.n_scales < 1) return bad(name, optarg);
            break;
        case OPT_TLOAD:
            img.n_loads = parse_list(optarg, img.loads, MAX_POINTS, 0);
            if (img.n_loads < 1) return bad(name, optarg);
            break;
        case OPT_SERVERS:
            if (parse_count(optarg, 1, 65536, &d)) return bad(name, optarg);
            img.servers = (int)d;
            break;
        case OPT_ICLASS:
            if (img.n_classes == WF_WORKLOAD_MAX_CLASSES) {
                fprintf(stderr, "weft-bench: at most %d image classes\n", WF_WORKLOAD_MAX_CLASSES);
                return 2;
            }
            if (wf_workload_class_parse(optarg, &img.classes[img.n_classes], err, sizeof err) != WF_OK) {
                fprintf(stderr, "weft-bench: %s\n", err);
                return 2;
            }
            img.n_classes++;
            break;
        case OPT_IMIX: img.mix = optarg; break;
        case OPT_TSINGLE: img.t_single = optarg; break;
        case OPT_CALREPS:
            if (parse_count(optarg, 1, 64, &d)) return bad(name, optarg);
            img.reps = (int)d;
            break;
        case OPT_IMGN:
            if (parse_count(optarg, 1, 128, &d)) return bad(name, optarg);
            img.io.n = (int)d;
            break;
        case OPT_IPROMPT: img.io.prompt = optarg; break;
        case OPT_LABELS:
            if (parse_count(optarg, 1, 1000000, &d)) return bad(name, optarg);
            img.io.class_labels = (int)d;
            break;
        case OPT_GUIDANCE:
            if (parse_double(optarg, &img.io.guidance) || img.io.guidance < 0) return bad(name, optarg);
            break;
        case OPT_STREAM: o.stream = true; img.stream_set = true; break;
        case OPT_NOISEED: img.io.send_seed = false; break;
        case OPT_TRACEOUT: img.trace_out = optarg; break;
        case OPT_DRYRUN: img.dry_run = true; break;
        case OPT_TRACE: img.trace = optarg; break;
        case OPT_ISIZE: {
            char tail;
            if (sscanf(optarg, "%dx%d%c", &img.width, &img.height, &tail) != 2 || img.width < 1 ||
                img.height < 1 || img.width > 16384 || img.height > 16384)
                return bad(name, optarg);
            break;
        }
        default: usage(stderr); free(model); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-bench: unexpected argument '%s' (see --help)\n", argv[optind]);
        free(model);
        return 2;
    }
    if (n_conc && n_rates) {
        fprintf(stderr, "weft-bench: give --concurrency (closed loop) or --rate (open loop), "
                        "not both; --max-concurrency caps an open loop\n");
        free(model);
        return 2;
    }

    /* Target: only what the user named, else loopback. */
    char path[256] = "";
    char url_host[256];
    if (url) {
        if (host_set || port_set) {
            fprintf(stderr, "weft-bench: give --url or --host/--port, not both\n");
            return 2;
        }
        int u = parse_url(url, url_host, sizeof url_host, &port, path, sizeof path);
        if (u == -2) {
            fprintf(stderr, "weft-bench: https is not supported; use http://\n");
            return 2;
        }
        if (u != 0) return bad("url", url);
        host = url_host;
    }
    if (endpoint) {
        if (strcmp(endpoint, "completions") == 0) snprintf(path, sizeof path, "/v1/completions");
        else if (strcmp(endpoint, "chat") == 0) snprintf(path, sizeof path, "/v1/chat/completions");
        else if (endpoint[0] == '/' && strlen(endpoint) < sizeof path) snprintf(path, sizeof path, "%s", endpoint);
        else return bad("endpoint", endpoint);
    }
    if (!path[0]) snprintf(path, sizeof path, img.on ? "/v1/images/generations" : "/v1/completions");
    /* (--stream is the text default, so it may be given either way) */
    if (!img.on && (img.profile || img.n_classes || img.mix || img.t_single || img.n_scales ||
                    img.n_loads || img.width || img.trace || img.trace_out || img.dry_run ||
                    img.profile_duration > 0 || img.servers != 1 || img.reps != 3 ||
                    img.io.n != 1 || img.io.prompt || img.io.class_labels ||
                    img.io.guidance >= 0 || !img.io.send_seed)) {
        fprintf(stderr, "weft-bench: the image options go with --workload images\n");
        free(model);
        return 2;
    }
    o.chat = strstr(path, "chat") != NULL;
    if (wf_loadgen_target_resolve(host, port, &o.target, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-bench: %s\n", err);
        free(model);
        return 2;
    }
    snprintf(o.target.path, sizeof o.target.path, "%s", path);
    o.classes = n_classes ? classes : NULL;
    o.n_classes = n_classes;
    o.progress = progress && isatty(STDOUT_FILENO);
    if (img.on) {
        /* --burstiness shapes --rate's gaps for images too; only a profile or trace ignores it */
        if (text_only && !(burst_set && !img.profile && !img.trace && strcmp(text_only, "--burstiness") == 0)) {
            fprintf(stderr, "weft-bench: %s does not apply to --workload images%s\n", text_only,
                    strcmp(text_only, "--burstiness") == 0
                        ? " with --profile or --trace (their arrivals are Poisson)" : "");
            free(model);
            return 2;
        }
        if (n_classes || dopt.kind != WF_LOADGEN_DATA_SYNTHETIC || fresh) {
            fprintf(stderr, "weft-bench: --slo-class, --dataset and --fresh-prompts are for text; "
                            "images use --image-class and --image-prompt\n");
            free(model);
            return 2;
        }
        /* No --model: the first image model weftd lists, with its size and classes as defaults;
         * else the field is left out (the server's default), since the first model listed may
         * well be an LLM. */
        if (!model && !img.dry_run) {
            int w = 0, h = 0, nc = 0;
            model = discover_image_model(&o.target, o.api_key, &w, &h, &nc);
            if (model && !img.width && w > 0 && h > 0) img.width = w, img.height = h;
            if (model && !img.io.class_labels && !img.io.prompt && nc > 0) img.io.class_labels = nc;
        }
        o.model = model;
        char tdesc[600];
        snprintf(tdesc, sizeof tdesc, "http://%s%s", o.target.host_header, o.target.path);
        image_run ir = {.label = label, .target = tdesc, .json_path = json_path,
                        .csv_path = csv_path, .plot_prefix = plot_prefix, .num_set = num_set,
                        .duration_set = duration_set, .n_rates = n_rates, .n_conc = n_conc};
        memcpy(ir.rates, rates, sizeof rates);
        memcpy(ir.conc, conc, sizeof conc);
        rc = cmd_images(&o, &img, &ir);
        free(img.tr_arrival);
        free(img.tr_items);
        free(model);
        return rc;
    }

    /* Dataset. */
    wf_loadgen_dataset ds = {0};
    if ((dopt.kind != WF_LOADGEN_DATA_SYNTHETIC) != (dopt.path != NULL)) {
        fprintf(stderr, "weft-bench: --dataset-path goes with --dataset sharegpt or prompts\n");
        free(model);
        return 2;
    }
    if (wf_loadgen_len_spec_parse(in_spec, &dopt.input_len, err, sizeof err) != WF_OK ||
        wf_loadgen_len_spec_parse(out_spec ? out_spec : "128", &dopt.output_len, err,
                                  sizeof err) != WF_OK) {
        fprintf(stderr, "weft-bench: %s\n", err);
        goto out_spec;
    }
    dopt.set_output = out_spec != NULL;
    /* Load points. */
    int n_points = n_rates ? n_rates : (n_conc ? n_conc : 1);
    if (!n_rates && !n_conc) conc[0] = 1;
    /* --fresh-prompts: one sequence of n_points x N items, point i takes the i-th slice, so
     * no point repeats another's prompts (a sweep against one long-running server would
     * otherwise measure its prompt cache from the second point on). */
    size_t n_slices = fresh ? (size_t)n_points : 1;
    if (o.num_requests > WF_LOADGEN_MAX_REQUESTS / n_slices) {
        fprintf(stderr, "weft-bench: --fresh-prompts needs %d x %zu requests, more than %d\n",
                n_points, o.num_requests, WF_LOADGEN_MAX_REQUESTS);
        goto out_spec;
    }
    dopt.n_requests = o.num_requests * n_slices;
    dopt.seed = o.seed;
    dopt.classes = o.classes;
    dopt.n_classes = n_classes;
    if (wf_loadgen_dataset_build(&dopt, &ds, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-bench: %s\n", err);
        goto out_spec;
    }
    if (fresh && dopt.kind != WF_LOADGEN_DATA_SYNTHETIC && ds.n_source < ds.n)
        fprintf(stderr, "weft-bench: warning: %s holds %zu usable prompts, fewer than the %zu "
                "requests of the sweep: prompts repeat across load points\n", dopt.path,
                ds.n_source, ds.n);
    if (!model) model = discover_model(&o.target, o.api_key);
    o.model = model;

    char dataset_desc[600];
    if (dopt.kind == WF_LOADGEN_DATA_SYNTHETIC)
        snprintf(dataset_desc, sizeof dataset_desc, "synthetic input=%s output=%s", in_spec,
                 out_spec ? out_spec : "128");
    else
        snprintf(dataset_desc, sizeof dataset_desc, "%s:%s (%zu prompts) output=%s",
                 dopt.kind == WF_LOADGEN_DATA_SHAREGPT ? "sharegpt" : "prompts", dopt.path,
                 ds.n_source, out_spec ? out_spec : (dopt.kind == WF_LOADGEN_DATA_SHAREGPT ? "reply" : "128"));
    char target_desc[600];
    snprintf(target_desc, sizeof target_desc, "http://%s%s", o.target.host_header, o.target.path);

    wf_loadgen_point *pts = calloc((size_t)n_points, sizeof *pts);
    if (!pts) goto out_ds;
    int done = 0;
    rc = 0;
    for (int i = 0; i < n_points; i++) {
        wf_loadgen_point *p = &pts[i];
        wf_loadgen_run_opts po = o;
        if (n_rates) {
            po.mode = WF_LOADGEN_OPEN;
            po.rate = rates[i];
            p->rate = rates[i];
            p->burstiness = o.burstiness;
            p->max_concurrency = o.max_concurrency;
            if (isinf(rates[i])) snprintf(p->label, sizeof p->label, "rate=inf");
            else snprintf(p->label, sizeof p->label, "rate=%g", rates[i]);
        } else {
            po.mode = WF_LOADGEN_CLOSED;
            po.concurrency = (int)conc[i];
            p->concurrency = (int)conc[i];
            snprintf(p->label, sizeof p->label, "concurrency=%d", (int)conc[i]);
        }
        p->mode = po.mode;
        wf_loadgen_dataset slice = ds; /* a view: the items stay owned by ds */
        if (fresh) slice.items = ds.items + (size_t)i * o.num_requests;
        slice.n = o.num_requests;
        if (wf_loadgen_run(&po, &slice, &p->res, err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-bench: %s: %s\n", p->label, err);
            rc = 1;
            break;
        }
        wf_loadgen_summarize(p->res.records, p->res.n, o.classes, n_classes, p->res.duration_s,
                             &p->sum);
        done++;
        if (p->res.stop_reason && strcmp(p->res.stop_reason, "interrupted") == 0) break;
    }
    wf_loadgen_info info = {
        .label = label, .target = target_desc, .model = model, .dataset = dataset_desc,
        .stream = o.stream, .seed = o.seed, .num_requests = o.num_requests,
        .fresh_prompts = fresh,
        .duration_s = o.duration_s, .classes = o.classes, .n_classes = n_classes,
    };
    if (done > 0) rc = report_all(&info, pts, (size_t)done, json_path, csv_path, plot_prefix);
    for (int i = 0; i < n_points; i++) wf_loadgen_run_result_free(&pts[i].res);
    free(pts);
out_ds:
    wf_loadgen_dataset_free(&ds);
out_spec:
    wf_loadgen_len_spec_free(&dopt.input_len);
    wf_loadgen_len_spec_free(&dopt.output_len);
    free(model);
    return rc ? rc : 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "compare") == 0) {
        if (argc != 4) {
            fprintf(stderr, "usage: weft-bench compare A.json B.json\n");
            return 2;
        }
        char err[512];
        if (wf_loadgen_compare(stdout, argv[2], argv[3], err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-bench: %s\n", err);
            return 1;
        }
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "run") == 0) {
        argv[1] = argv[0];
        return cmd_run(argc - 1, argv + 1);
    }
    return cmd_run(argc, argv);
}
