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
#include "loadgen/metrics.h"
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
"  --model NAME            \"model\" field (default: the first of GET /v1/models, else none)\n"
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
"  --version, --help\n",
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

enum {
    OPT_URL = 256, OPT_HOST, OPT_PORT, OPT_ENDPOINT, OPT_MODEL, OPT_API_KEY, OPT_CONC, OPT_RATE,
    OPT_BURST, OPT_MAXCONC, OPT_NUM, OPT_DURATION, OPT_GRACE, OPT_TIMEOUT, OPT_RETRY, OPT_DATASET,
    OPT_DATAPATH, OPT_INLEN, OPT_OUTLEN, OPT_MAXTOTAL, OPT_SEED, OPT_NOSTREAM, OPT_NOEOS,
    OPT_TEMP, OPT_EXTRA, OPT_SLO, OPT_NOSLO, OPT_LABEL, OPT_JSON, OPT_CSV, OPT_PLOT,
    OPT_NOPROGRESS, OPT_FRESH, OPT_VERSION, OPT_HELP,
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
    {"help", no_argument, 0, OPT_HELP}, {0, 0, 0, 0},
};

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
    double conc[MAX_POINTS], rates[MAX_POINTS];
    int n_conc = 0, n_rates = 0;
    wf_loadgen_slo_class classes[WF_LOADGEN_MAX_CLASSES];
    size_t n_classes = 0;
    char err[512];
    int rc = 2;
    double d;

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
            if (parse_double(optarg, &o.burstiness) || o.burstiness <= 0) return bad(name, optarg);
            break;
        case OPT_MAXCONC:
            if (parse_double(optarg, &d) || d < 1 || d > WF_LOADGEN_MAX_CONNS || d != floor(d))
                return bad(name, optarg);
            o.max_concurrency = (int)d;
            break;
        case OPT_NUM:
            if (parse_double(optarg, &d) || d < 1 || d > WF_LOADGEN_MAX_REQUESTS || d != floor(d))
                return bad(name, optarg);
            o.num_requests = (size_t)d;
            break;
        case OPT_DURATION:
            if (parse_double(optarg, &o.duration_s) || o.duration_s <= 0 ||
                o.duration_s > WF_LOADGEN_MAX_DURATION_S)
                return bad(name, optarg);
            break;
        case OPT_GRACE:
            if (parse_double(optarg, &o.grace_s) || o.grace_s < 0 ||
                o.grace_s > WF_LOADGEN_MAX_DURATION_S)
                return bad(name, optarg);
            break;
        case OPT_RETRY: o.retry_after = true; break;
        case OPT_TIMEOUT:
            if (parse_double(optarg, &o.timeout_s) || o.timeout_s <= 0 ||
                o.timeout_s > WF_LOADGEN_MAX_DURATION_S)
                return bad(name, optarg);
            break;
        case OPT_DATASET:
            if (strcmp(optarg, "synthetic") == 0 || strcmp(optarg, "random") == 0)
                dopt.kind = WF_LOADGEN_DATA_SYNTHETIC;
            else if (strcmp(optarg, "sharegpt") == 0) dopt.kind = WF_LOADGEN_DATA_SHAREGPT;
            else if (strcmp(optarg, "prompts") == 0) dopt.kind = WF_LOADGEN_DATA_PROMPTS;
            else return bad(name, optarg);
            break;
        case OPT_DATAPATH: dopt.path = optarg; break;
        case OPT_INLEN: in_spec = optarg; break;
        case OPT_OUTLEN: out_spec = optarg; break;
        case OPT_MAXTOTAL:
            if (parse_double(optarg, &d) || d < 8 || d > 1e7 || d != floor(d)) return bad(name, optarg);
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
        case OPT_NOEOS: o.ignore_eos = false; break;
        case OPT_TEMP:
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
    if (!path[0]) snprintf(path, sizeof path, "/v1/completions");
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
    if (done > 0) {
        wf_loadgen_report_print(stdout, &info, pts, (size_t)done);
        if (json_path && wf_loadgen_report_write_json(json_path, &info, pts, (size_t)done, err,
                                                      sizeof err) != WF_OK) {
            fprintf(stderr, "weft-bench: %s\n", err);
            rc = 1;
        }
        if (csv_path && wf_loadgen_report_write_csv(csv_path, pts, (size_t)done, err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-bench: %s\n", err);
            rc = 1;
        }
        if (plot_prefix && wf_loadgen_report_plot(plot_prefix, pts, (size_t)done, err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-bench: plot: %s\n", err);
            rc = 1;
        }
        /* Every request failing is a failed benchmark (wrong URL, server down). */
        uint64_t completed = 0;
        for (int i = 0; i < done; i++) completed += pts[i].sum.completed;
        if (completed == 0) {
            fprintf(stderr, "weft-bench: no request succeeded\n");
            rc = rc ? rc : 3;
        }
    }
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
