/* weft-bench result output: tables, JSON, CSV, compare and gnuplot plots (see report.h). */
#include "loadgen/report.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "weft_version.h"

static const char *mode_name(const wf_loadgen_point *p) {
    return p->mode == WF_LOADGEN_CLOSED ? "closed" : "open";
}

/* ---- summary table ----------------------------------------------------------------------------- */

static void print_dist(FILE *f, const char *name, const wf_loadgen_dist *d) {
    if (d->n == 0) {
        fprintf(f, "%-12s %10s %10s %10s %10s %8s\n", name, "-", "-", "-", "-", "0");
        return;
    }
    fprintf(f, "%-12s %10.2f %10.2f %10.2f %10.2f %8zu\n", name, d->mean, d->median, d->p90,
            d->p99, d->n);
}

static void print_point(FILE *f, const wf_loadgen_point *p) {
    const wf_loadgen_summary *s = &p->sum;
    fprintf(f, "\n==================== %s ====================\n", p->label);
    fprintf(f, "%-40s %s\n", "Stopped by:", p->res.stop_reason ? p->res.stop_reason : "-");
    if (p->image) {
        wf_loadgen_image_print(f, &p->isum);
        return;
    }
    fprintf(f, "%-40s %llu\n", "Successful requests:", (unsigned long long)s->completed);
    fprintf(f, "%-40s %llu\n", "Refused requests (429/503):", (unsigned long long)s->refused);
    fprintf(f, "%-40s %llu\n", "Failed requests:", (unsigned long long)s->failed);
    fprintf(f, "%-40s %.2f\n", "Benchmark duration (s):", s->duration_s);
    fprintf(f, "%-40s %lld%s\n", "Total input tokens:", (long long)s->input_tokens,
            s->tokens_estimated ? " (some estimated: no usage from server)" : "");
    fprintf(f, "%-40s %lld\n", "Total generated tokens:", (long long)s->output_tokens);
    fprintf(f, "%-40s %.2f\n", "Request throughput (req/s):", s->request_throughput);
    fprintf(f, "%-40s %.2f\n", "Input token throughput (tok/s):", s->input_throughput);
    fprintf(f, "%-40s %.2f\n", "Output token throughput (tok/s):", s->output_throughput);
    fprintf(f, "%-40s %.2f\n", "Total token throughput (tok/s):", s->total_token_throughput);
    if (s->has_slo)
        fprintf(f, "%-40s %.2f (%llu good)\n", "Goodput (req/s):", s->goodput,
                (unsigned long long)s->good);
    fprintf(f, "%-12s %10s %10s %10s %10s %8s\n", "", "mean", "median", "p90", "p99", "n");
    print_dist(f, "TTFT (ms)", &s->ttft);
    print_dist(f, "TPOT (ms)", &s->tpot);
    print_dist(f, "ITL (ms)", &s->itl);
    print_dist(f, "E2E (ms)", &s->e2e);
    if (s->n_errors) {
        fprintf(f, "Errors:");
        for (size_t i = 0; i < s->n_errors; i++)
            fprintf(f, " %s=%llu", s->errors[i].key, (unsigned long long)s->errors[i].count);
        fprintf(f, "\n");
    }
    if (s->n_classes) {
        fprintf(f, "%-16s %9s %9s %8s %8s %8s %11s %9s\n", "SLO class", "ttft_ms", "tpot_ms",
                "issued", "done", "good", "attainment", "goodput");
        for (size_t c = 0; c < s->n_classes; c++) {
            const wf_loadgen_class_stats *cs = &s->classes[c];
            fprintf(f, "%-16s %9.0f %9.0f %8llu %8llu %8llu %10.1f%% %9.2f\n", cs->def.name,
                    cs->def.ttft_ms, cs->def.tpot_ms, (unsigned long long)cs->issued,
                    (unsigned long long)cs->completed, (unsigned long long)cs->good,
                    100.0 * cs->attainment, cs->goodput);
        }
    }
}

void wf_loadgen_report_print(FILE *f, const wf_loadgen_info *info, const wf_loadgen_point *pts,
                             size_t n) {
    fprintf(f, "weft-bench %s%s%s: %s, model %s, %s, %s, seed %llu%s\n", WEFT_VERSION,
            info->label ? " " : "", info->label ? info->label : "", info->target,
            info->model ? info->model : "(server default)", info->dataset,
            info->stream ? "streaming" : "non-streaming", (unsigned long long)info->seed,
            info->fresh_prompts ? " (fresh prompts per load point)" : "");
    if (info->profile) fprintf(f, "arrivals: %s\n", info->profile);
    for (size_t i = 0; i < n; i++) print_point(f, &pts[i]);
    if (n > 1 && pts[0].image) {
        fprintf(f, "\n%-28s %9s %9s %9s %9s %9s %8s %7s %7s\n", "load point", "img/s", "mean_ms",
                "p95_ms", "p99_ms", "norm", "SLO met", "refused", "failed");
        for (size_t i = 0; i < n; i++) {
            const wf_loadgen_image_summary *s = &pts[i].isum;
            /* "-" where nothing completed (every request refused): not "nan" */
            const double x[5] = {s->latency.mean, s->latency.p95, s->latency.p99,
                                 s->normalized.mean, 100.0 * s->attainment};
            char v[5][32];
            for (int k = 0; k < 5; k++) {
                if (isfinite(x[k])) snprintf(v[k], sizeof v[k], k == 3 ? "%.2f" : k == 4 ? "%.1f%%" : "%.1f", x[k]);
                else snprintf(v[k], sizeof v[k], "-");
            }
            fprintf(f, "%-28s %9.3f %9s %9s %9s %9s %8s %7llu %7llu\n", pts[i].label,
                    s->image_throughput, v[0], v[1], v[2], v[3], v[4],
                    (unsigned long long)s->refused, (unsigned long long)s->failed);
        }
    } else if (n > 1) {
        fprintf(f, "\n%-20s %8s %10s %9s %9s %9s %9s %9s %7s %7s\n", "load point", "req/s", "out tok/s",
                "goodput", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "refused", "failed");
        for (size_t i = 0; i < n; i++) {
            const wf_loadgen_summary *s = &pts[i].sum;
            char gp[32] = "-";
            if (s->has_slo) snprintf(gp, sizeof gp, "%.2f", s->goodput);
            char v[4][32];
            const double x[4] = {s->ttft.median, s->ttft.p99, s->tpot.median, s->tpot.p99};
            for (int k = 0; k < 4; k++) {
                if (isfinite(x[k])) snprintf(v[k], sizeof v[k], "%.2f", x[k]);
                else snprintf(v[k], sizeof v[k], "-");
            }
            fprintf(f, "%-20s %8.2f %10.1f %9s %9s %9s %9s %9s %7llu %7llu\n", pts[i].label,
                    s->request_throughput, s->output_throughput, gp, v[0], v[1], v[2], v[3],
                    (unsigned long long)s->refused, (unsigned long long)s->failed);
        }
    }
}

/* ---- JSON ------------------------------------------------------------------------------------ */

/* The text report's distributions: ms, with the standard deviation and the sample count. */
static void put_dist(json_t *o, const char *name, const wf_loadgen_dist *d) {
    static const char *const stats[] = {"mean", "median", "std", "p90", "p99", "min", "max", NULL};
    wf_loadgen_json_put_dist(o, name, "_ms", d, stats, true);
}

static json_t *point_json(const wf_loadgen_point *p) {
    const wf_loadgen_summary *s = &p->sum;
    json_t *o = json_object();
    json_object_set_new(o, "label", json_string(p->label));
    json_object_set_new(o, "mode", json_string(mode_name(p)));
    if (p->mode == WF_LOADGEN_CLOSED) {
        json_object_set_new(o, "concurrency", json_integer(p->concurrency));
    } else {
        json_object_set_new(o, "request_rate", isinf(p->rate) ? json_string("inf") : json_real(p->rate));
        json_object_set_new(o, "burstiness", json_real(p->burstiness));
        json_object_set_new(o, "max_concurrency", json_integer(p->max_concurrency));
    }
    json_object_set_new(o, "stop_reason", json_string(p->res.stop_reason ? p->res.stop_reason : ""));
    if (p->image) {
        /* An image point: the image metrics only (token metrics mean nothing here). */
        if (p->scale > 0) json_object_set_new(o, "rate_scale", json_real(p->scale));
        json_object_set_new(o, "connections", json_integer((json_int_t)p->res.connections));
        json_t *im = wf_loadgen_image_summary_json(&p->isum);
        json_object_update(o, im);
        json_decref(im);
        return o;
    }
    json_object_set_new(o, "issued", json_integer((json_int_t)s->issued));
    json_object_set_new(o, "completed", json_integer((json_int_t)s->completed));
    json_object_set_new(o, "failed", json_integer((json_int_t)s->failed));
    json_object_set_new(o, "refused", json_integer((json_int_t)s->refused));
    json_object_set_new(o, "connections", json_integer((json_int_t)p->res.connections));
    json_object_set_new(o, "duration", json_real(s->duration_s));
    json_object_set_new(o, "total_input_tokens", json_integer(s->input_tokens));
    json_object_set_new(o, "total_output_tokens", json_integer(s->output_tokens));
    json_object_set_new(o, "tokens_estimated", json_boolean(s->tokens_estimated));
    json_object_set_new(o, "request_throughput", json_real(s->request_throughput));
    json_object_set_new(o, "input_throughput", json_real(s->input_throughput));
    json_object_set_new(o, "output_throughput", json_real(s->output_throughput));
    json_object_set_new(o, "total_token_throughput", json_real(s->total_token_throughput));
    json_object_set_new(o, "goodput", s->has_slo ? json_real(s->goodput) : json_null());
    json_object_set_new(o, "good_requests", json_integer((json_int_t)s->good));
    put_dist(o, "ttft", &s->ttft);
    put_dist(o, "tpot", &s->tpot);
    put_dist(o, "itl", &s->itl);
    put_dist(o, "e2el", &s->e2e);
    json_object_set_new(o, "errors", wf_loadgen_json_errors(s->errors, s->n_errors));
    json_t *cls = json_array();
    for (size_t c = 0; c < s->n_classes; c++) {
        const wf_loadgen_class_stats *cs = &s->classes[c];
        json_t *x = json_object();
        json_object_set_new(x, "name", json_string(cs->def.name));
        json_object_set_new(x, "ttft_ms", json_real(cs->def.ttft_ms));
        json_object_set_new(x, "tpot_ms", json_real(cs->def.tpot_ms));
        json_object_set_new(x, "weight", json_real(cs->def.weight));
        json_object_set_new(x, "issued", json_integer((json_int_t)cs->issued));
        json_object_set_new(x, "completed", json_integer((json_int_t)cs->completed));
        json_object_set_new(x, "good", json_integer((json_int_t)cs->good));
        json_object_set_new(x, "attainment", json_real(cs->attainment));
        json_object_set_new(x, "goodput", json_real(cs->goodput));
        json_array_append_new(cls, x);
    }
    json_object_set_new(o, "slo_classes", cls);
    return o;
}

wf_status wf_loadgen_report_write_json(const char *path, const wf_loadgen_info *info,
                                       const wf_loadgen_point *pts, size_t n, char *err,
                                       size_t errlen) {
    json_t *root = json_object();
    json_object_set_new(root, "tool", json_string("weft-bench"));
    json_object_set_new(root, "version", json_string(WEFT_VERSION));
    json_object_set_new(root, "label", json_string(info->label ? info->label : ""));
    json_object_set_new(root, "workload", json_string(info->workload ? info->workload : "text"));
    if (info->profile) json_object_set_new(root, "profile", json_string(info->profile));
    json_object_set_new(root, "target", json_string(info->target));
    json_object_set_new(root, "model", info->model ? json_string(info->model) : json_null());
    json_object_set_new(root, "dataset", json_string(info->dataset));
    json_object_set_new(root, "stream", json_boolean(info->stream));
    json_object_set_new(root, "seed", json_integer((json_int_t)info->seed));
    json_object_set_new(root, "fresh_prompts", json_boolean(info->fresh_prompts));
    json_object_set_new(root, "num_requests", json_integer((json_int_t)info->num_requests));
    json_object_set_new(root, "max_duration", json_real(info->duration_s));
    json_t *runs = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(runs, point_json(&pts[i]));
    json_object_set_new(root, "runs", runs);
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(root);
    if (rc != 0) return wf_status_errorf(err, errlen, WF_EIO, "cannot write %s", path);
    return WF_OK;
}

/* ---- CSV ------------------------------------------------------------------------------------- */

static void csv_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, ",%.3f", v);
    else fputs(",", f);
}

wf_status wf_loadgen_report_write_csv(const char *path, const wf_loadgen_point *pts, size_t n,
                                      char *err, size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) return wf_status_errorf(err, errlen, WF_EIO, "cannot write %s: %s", path, strerror(errno));
    fputs("point,label,index,slo_class,outcome,http_status,streamed,start_s,ttft_ms,tpot_ms,"
          "e2e_ms,itl_mean_ms,chunks,input_tokens,output_tokens,requested_input,"
          "requested_output,tokens_estimated,slo_met,error,arrival_s,images\n", f);
    for (size_t k = 0; k < n; k++) {
        const wf_loadgen_point *p = &pts[k];
        uint64_t t0 = UINT64_MAX;
        for (size_t i = 0; i < p->res.n; i++)
            if (p->res.records[i].outcome != WF_LOADGEN_NOT_SENT) {
                const wf_loadgen_record *r = &p->res.records[i];
                uint64_t t = r->t_arrival_ns && r->t_arrival_ns < r->t_start_ns ? r->t_arrival_ns : r->t_start_ns;
                if (t < t0) t0 = t;
            }
        for (size_t i = 0; i < p->res.n; i++) {
            const wf_loadgen_record *r = &p->res.records[i];
            if (r->outcome == WF_LOADGEN_NOT_SENT) continue;
            char key[24];
            wf_loadgen_error_key(r, key, sizeof key);
            const wf_loadgen_slo_class *c =
                r->slo_class >= 0 && (size_t)r->slo_class < p->sum.n_classes
                    ? &p->sum.classes[r->slo_class].def : NULL;
            const wf_workload_class *ic =
                p->image && r->slo_class >= 0 && (size_t)r->slo_class < p->isum.n_classes
                    ? &p->isum.classes[r->slo_class].def : NULL;
            fprintf(f, "%zu,%s,%u,%s,%s,%d,%d", k, p->label, r->index,
                    ic ? ic->name : c ? c->name : "", key, r->http_status, r->streamed ? 1 : 0);
            csv_num(f, (double)(r->t_start_ns - t0) / 1e9);
            csv_num(f, wf_loadgen_record_ttft_ms(r));
            csv_num(f, wf_loadgen_record_tpot_ms(r));
            csv_num(f, wf_loadgen_record_e2e_ms(r));
            double itl = NAN;
            if (r->outcome == WF_LOADGEN_OK && r->n_chunks > 1)
                itl = (double)(r->chunk_ns[r->n_chunks - 1] - r->chunk_ns[0]) / 1e6 /
                      (double)(r->n_chunks - 1);
            csv_num(f, itl);
            fprintf(f, ",%u,%lld,%lld,%d,%d,%d,%d,\"", r->n_chunks, (long long)r->input_tokens,
                    (long long)r->output_tokens, r->expected_input, r->expected_output,
                    r->tokens_estimated ? 1 : 0,
                    p->image ? (wf_loadgen_image_record_met(r, ic) ? 1 : 0)
                    : p->sum.has_slo ? (wf_loadgen_record_meets(r, c) ? 1 : 0) : -1);
            for (const char *e = r->error; *e; e++) {
                if (*e == '"') fputc('"', f);
                fputc(*e == '\n' || *e == '\r' ? ' ' : *e, f);
            }
            fputs("\"", f);
            csv_num(f, r->t_arrival_ns >= t0 ? (double)(r->t_arrival_ns - t0) / 1e9 : NAN);
            fprintf(f, ",%u\n", r->images);
        }
    }
    if (fclose(f) != 0) return wf_status_errorf(err, errlen, WF_EIO, "cannot write %s", path);
    return WF_OK;
}

/* ---- plots ------------------------------------------------------------------------------------ */

/* A path inside a gnuplot single-quoted string: ' is written twice. */
static void gp_path(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Writes the CDF of one metric of one point: "value fraction" lines. Returns the count. */
/* Image points: latency / T_single of the record's class, NAN when unknown. */
static double normalized_ms(const wf_loadgen_point *p, const wf_loadgen_record *r) {
    if (r->slo_class < 0 || (size_t)r->slo_class >= p->isum.n_classes) return NAN;
    double t = p->isum.classes[r->slo_class].def.t_single_ms;
    return t > 0 ? wf_loadgen_record_e2e_ms(r) / t : NAN;
}

/* Image points, the third panel: "arrival_s latency_ms" of every completed request of class
 * cls (-1: all). */
static size_t write_timeline(FILE *f, const wf_loadgen_point *p, int cls) {
    uint64_t t0 = UINT64_MAX;
    for (size_t i = 0; i < p->res.n; i++)
        if (p->res.records[i].outcome != WF_LOADGEN_NOT_SENT && p->res.records[i].t_arrival_ns < t0)
            t0 = p->res.records[i].t_arrival_ns;
    size_t m = 0;
    for (size_t i = 0; i < p->res.n; i++) {
        const wf_loadgen_record *r = &p->res.records[i];
        double l = wf_loadgen_record_e2e_ms(r);
        if (!isfinite(l) || (cls >= 0 && r->slo_class != cls)) continue;
        fprintf(f, "%.4f %.4f\n", (double)(r->t_arrival_ns - t0) / 1e9, l);
        m++;
    }
    return m;
}

static size_t write_cdf(FILE *f, const wf_loadgen_point *p, int metric) {
    if (p->image && metric == 2) return write_timeline(f, p, -1);
    double *v = malloc((p->res.n ? p->res.n : 1) * sizeof *v);
    if (!v) return 0;
    size_t m = 0;
    for (size_t i = 0; i < p->res.n; i++) {
        const wf_loadgen_record *r = &p->res.records[i];
        double x = p->image ? (metric == 0 ? wf_loadgen_record_e2e_ms(r) : normalized_ms(p, r))
                   : metric == 0 ? wf_loadgen_record_ttft_ms(r)
                   : metric == 1 ? wf_loadgen_record_tpot_ms(r)
                                 : wf_loadgen_record_e2e_ms(r);
        if (isfinite(x)) v[m++] = x;
    }
    qsort(v, m, sizeof *v, cmp_d);
    for (size_t i = 0; i < m; i++) fprintf(f, "%.4f %.6f\n", v[i], (double)(i + 1) / (double)m);
    free(v);
    return m;
}

static int run_gnuplot(const char *script) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

wf_status wf_loadgen_report_plot(const char *prefix, const wf_loadgen_point *pts, size_t n,
                                 char *err, size_t errlen) {
    static const char *const text_metric[] = {"ttft", "tpot", "e2e"};
    static const char *const text_title[] = {"TTFT (ms)", "TPOT (ms)", "end-to-end latency (ms)"};
    static const char *const image_metric[] = {"latency", "normalized", "timeline"};
    static const char *const image_title[] = {"image latency (ms)", "normalised latency (latency / T_single)",
                                              "arrival time (s)"};
    bool image = n > 0 && pts[0].image;
    const char *const *metric = image ? image_metric : text_metric;
    const char *const *title = image ? image_title : text_title;
    size_t plen = strlen(prefix) + 64;
    char *path = malloc(plen), *script = malloc(plen);
    if (!path || !script) {
        free(path), free(script);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    }
    wf_status st = WF_OK;
    size_t counts[3] = {0};
    /* Data: one block per point (separated by two blank lines: gnuplot's "index"). */
    for (int m = 0; m < 3; m++) {
        snprintf(path, plen, "%s_%s_cdf.dat", prefix, metric[m]);
        FILE *f = fopen(path, "w");
        if (!f) {
            st = wf_status_errorf(err, errlen, WF_EIO, "cannot write %s: %s", path, strerror(errno));
            goto out;
        }
        /* One point of an image run: its timeline one block per class (colours by class). */
        bool by_class = image && n == 1 && m == 2;
        size_t blocks = by_class ? pts[0].isum.n_classes : n;
        for (size_t k = 0; k < blocks; k++) {
            fprintf(f, "# %s\n", by_class ? pts[0].isum.classes[k].def.name : pts[k].label);
            size_t c = by_class ? write_timeline(f, &pts[0], (int)k) : write_cdf(f, &pts[k], m);
            if (c == 0) fprintf(f, "NaN NaN\n");
            counts[m] += c;
            fprintf(f, "\n\n");
        }
        fclose(f);
    }
    snprintf(script, plen, "%s_plot.gp", prefix);
    FILE *g = fopen(script, "w");
    if (!g) {
        st = wf_status_errorf(err, errlen, WF_EIO, "cannot write %s: %s", script, strerror(errno));
        goto out;
    }
    fprintf(g, "set terminal pngcairo size 1500,500 noenhanced font ',10'\nset output ");
    snprintf(path, plen, "%s_latency_cdf.png", prefix);
    gp_path(g, path);
    fprintf(g, "\nset multiplot layout 1,3\nset grid\nset key bottom right\nset ylabel 'CDF'\n"
               "set yrange [0:1]\n");
    for (int m = 0; m < 3; m++) {
        fprintf(g, "set title '%s'\nset xlabel '%s'\n", title[m], title[m]);
        bool timeline = image && m == 2;
        if (timeline)
            fprintf(g, "set title 'latency by arrival time'\nset ylabel 'latency (ms)'\n"
                       "set autoscale y\nset key top left\n");
        if (counts[m] == 0) {
            fprintf(g, "set label 1 'no data' at graph 0.4,0.5\nplot NaN notitle\nunset label 1\n");
            continue;
        }
        fprintf(g, "plot ");
        if (timeline && n == 1) {
            snprintf(path, plen, "%s_%s_cdf.dat", prefix, metric[m]);
            for (size_t c = 0; c < pts[0].isum.n_classes; c++) {
                gp_path(g, path);
                fprintf(g, " index %zu using 1:2 with points pt 7 ps 0.5 title 'class %s'%s", c,
                        pts[0].isum.classes[c].def.name,
                        c + 1 < pts[0].isum.n_classes ? ", \\\n     " : "\n");
            }
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            snprintf(path, plen, "%s_%s_cdf.dat", prefix, metric[m]);
            gp_path(g, path);
            uint64_t refused = image ? pts[k].isum.refused : pts[k].sum.refused;
            uint64_t failed = image ? pts[k].isum.failed : pts[k].sum.failed;
            fprintf(g, " index %zu using 1:2 with %s title '%s (%llu refused, %llu failed)'%s", k,
                    timeline ? "points pt 7 ps 0.5" : "lines lw 2", pts[k].label,
                    (unsigned long long)refused, (unsigned long long)failed,
                    k + 1 < n ? ", \\\n     " : "\n");
        }
    }
    fprintf(g, "unset multiplot\n");
    if (n > 1) {
        snprintf(path, plen, "%s_throughput.dat", prefix);
        FILE *f = fopen(path, "w");
        if (!f) {
            fclose(g);
            st = wf_status_errorf(err, errlen, WF_EIO, "cannot write %s: %s", path, strerror(errno));
            goto out;
        }
        bool open = pts[0].mode == WF_LOADGEN_OPEN;
        fprintf(f, "# %s req/s %s\n", open ? "offered_rate" : "concurrency",
                image ? "images/s slo_attainment" : "out_tok/s goodput");
        for (size_t k = 0; k < n; k++) {
            double x = open ? pts[k].rate : pts[k].concurrency;
            if (!isfinite(x)) continue; /* an "inf" point has no place on the axis */
            if (image)
                fprintf(f, "%g %g %g %g\n", x, pts[k].isum.request_throughput,
                        pts[k].isum.image_throughput, pts[k].isum.attainment);
            else
                fprintf(f, "%g %g %g %g\n", x, pts[k].sum.request_throughput,
                        pts[k].sum.output_throughput,
                        pts[k].sum.has_slo ? pts[k].sum.goodput : NAN);
        }
        fclose(f);
        fprintf(g, "set terminal pngcairo size 900,550 noenhanced font ',10'\nset output ");
        snprintf(path, plen, "%s_throughput.png", prefix);
        gp_path(g, path);
        fprintf(g, "\nset title 'throughput vs %s'\nset xlabel '%s'\nset ylabel 'requests/s'\n"
                   "set y2label '%s'\nset ytics nomirror\nset y2tics\n"
                   "set autoscale y\nset yrange [0:*]\nset y2range [0:%s]\nset key top left\n",
                open ? "offered rate" : "concurrency",
                open ? "offered rate (requests/s)" : "concurrent streams",
                image ? "SLO attainment" : "output tokens/s", image ? "1" : "*");
        snprintf(path, plen, "%s_throughput.dat", prefix);
        fprintf(g, "plot ");
        if (image) {
            gp_path(g, path);
            fprintf(g, " using 1:2 with linespoints lw 2 title 'request throughput', ");
            gp_path(g, path);
            fprintf(g, " using 1:3 with linespoints lw 2 title 'images/s', ");
            gp_path(g, path);
            fprintf(g, " using 1:4 axes x1y2 with linespoints lw 2 title 'SLO attainment'%s\n",
                    open ? ", x with lines dt 2 lc rgb 'gray' title 'offered rate'" : "");
            goto plotted;
        }
        gp_path(g, path);
        fprintf(g, " using 1:2 with linespoints lw 2 title 'request throughput', ");
        gp_path(g, path);
        fprintf(g, " using 1:4 with linespoints lw 2 title 'goodput', ");
        gp_path(g, path);
        fprintf(g, " using 1:3 axes x1y2 with linespoints lw 2 title 'output tokens/s'%s\n",
                open ? ", x with lines dt 2 lc rgb 'gray' title 'offered rate'" : "");
    }
plotted:
    fclose(g);
    int rc = run_gnuplot(script);
    if (rc == 127) st = wf_status_errorf(err, errlen, WF_EUNSUPPORTED, "gnuplot is not installed");
    else if (rc != 0) st = wf_status_errorf(err, errlen, WF_EIO, "gnuplot failed on %s (exit %d)", script, rc);
out:
    free(path);
    free(script);
    return st;
}

/* ---- compare ---------------------------------------------------------------------------------- */

static json_t *load_result(const char *path, char *err, size_t errlen) {
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    if (!r) {
        wf_status_errorf(err, errlen, WF_EFORMAT, "%s: %s (line %d)", path, je.text, je.line);
        return NULL;
    }
    if (!json_is_array(json_object_get(r, "runs"))) {
        wf_status_errorf(err, errlen, WF_EFORMAT, "%s: not a weft-bench result (no \"runs\" array)", path);
        json_decref(r);
        return NULL;
    }
    return r;
}

static double get_num(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

wf_status wf_loadgen_compare(FILE *f, const char *path_a, const char *path_b, char *err,
                             size_t errlen) {
    json_t *a = load_result(path_a, err, errlen);
    if (!a) return WF_EFORMAT;
    json_t *b = load_result(path_b, err, errlen);
    if (!b) {
        json_decref(a);
        return WF_EFORMAT;
    }
    static const char *const keys[] = {
        "completed", "refused", "failed", "duration", "total_output_tokens", "request_throughput",
        "output_throughput", "total_token_throughput", "goodput", "mean_ttft_ms",
        "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
        "p90_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
        "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms", "images", "image_throughput",
        "slo_attainment", "mean_latency_ms", "median_latency_ms", "p95_latency_ms",
        "p99_latency_ms", "mean_normalized_latency", "p99_normalized_latency"};
    const char *la = json_string_value(json_object_get(a, "label"));
    const char *lb = json_string_value(json_object_get(b, "label"));
    if (!la || !*la) la = "A";
    if (!lb || !*lb) lb = "B";
    json_t *ra = json_object_get(a, "runs"), *rb = json_object_get(b, "runs");
    size_t n = json_array_size(ra) < json_array_size(rb) ? json_array_size(ra) : json_array_size(rb);
    fprintf(f, "A = %s (%s)\nB = %s (%s)\n", la, path_a, lb, path_b);
    if (json_array_size(ra) != json_array_size(rb))
        fprintf(f, "note: A has %zu load points, B has %zu; comparing the first %zu\n",
                json_array_size(ra), json_array_size(rb), n);
    for (size_t i = 0; i < n; i++) {
        json_t *pa = json_array_get(ra, i), *pb = json_array_get(rb, i);
        const char *xa = json_string_value(json_object_get(pa, "label"));
        const char *xb = json_string_value(json_object_get(pb, "label"));
        fprintf(f, "\n--- %s", xa ? xa : "?");
        if (xb && xa && strcmp(xa, xb) != 0) fprintf(f, " vs %s", xb);
        fprintf(f, " ---\n%-24s %14.14s %14.14s %9s\n", "metric", la, lb, "B/A");
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            double va = get_num(pa, keys[k]), vb = get_num(pb, keys[k]);
            if (isnan(va) && isnan(vb)) continue;
            fprintf(f, "%-24s %14.2f %14.2f ", keys[k], va, vb);
            if (isfinite(va) && isfinite(vb) && va != 0) fprintf(f, "%9.3f\n", vb / va);
            else fprintf(f, "%9s\n", "-");
        }
    }
    json_decref(a);
    json_decref(b);
    return WF_OK;
}
