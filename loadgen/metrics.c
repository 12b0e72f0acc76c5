/* Benchmark arithmetic: TTFT/TPOT/ITL/e2e distributions, throughputs, goodput and SLO
 * attainment, error counts (definitions in metrics.h). */
#include "loadgen/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double wf_loadgen_record_e2e_ms(const wf_loadgen_record *r) {
    if (r->outcome != WF_LOADGEN_OK || r->t_end_ns < r->t_start_ns) return NAN;
    return (double)(r->t_end_ns - r->t_start_ns) / 1e6;
}

double wf_loadgen_record_ttft_ms(const wf_loadgen_record *r) {
    if (r->outcome != WF_LOADGEN_OK) return NAN;
    if (!r->streamed) return wf_loadgen_record_e2e_ms(r);
    if (r->t_first_ns == 0 || r->t_first_ns < r->t_start_ns) return NAN;
    return (double)(r->t_first_ns - r->t_start_ns) / 1e6;
}

double wf_loadgen_record_tpot_ms(const wf_loadgen_record *r) {
    if (r->outcome != WF_LOADGEN_OK || !r->streamed || r->output_tokens <= 1) return NAN;
    double ttft = wf_loadgen_record_ttft_ms(r), e2e = wf_loadgen_record_e2e_ms(r);
    if (isnan(ttft) || isnan(e2e)) return NAN;
    return (e2e - ttft) / (double)(r->output_tokens - 1);
}

bool wf_loadgen_record_meets(const wf_loadgen_record *r, const wf_loadgen_slo_class *c) {
    if (r->outcome != WF_LOADGEN_OK) return false;
    if (!c) return true;
    if (c->ttft_ms > 0) {
        double ttft = wf_loadgen_record_ttft_ms(r);
        if (isnan(ttft) || ttft > c->ttft_ms) return false;
    }
    if (c->tpot_ms > 0) {
        double tpot = wf_loadgen_record_tpot_ms(r);
        if (!isnan(tpot) && tpot > c->tpot_ms) return false;
    }
    return true;
}

wf_status wf_loadgen_record_add_chunk(wf_loadgen_record *r, uint64_t t_ns) {
    if (r->n_chunks == r->cap_chunks) {
        uint32_t ncap = r->cap_chunks ? r->cap_chunks * 2 : 64;
        uint64_t *p = realloc(r->chunk_ns, (size_t)ncap * sizeof *p);
        if (!p) return WF_ENOMEM;
        r->chunk_ns = p;
        r->cap_chunks = ncap;
    }
    r->chunk_ns[r->n_chunks++] = t_ns;
    return WF_OK;
}

void wf_loadgen_record_free(wf_loadgen_record *r) {
    free(r->chunk_ns);
    memset(r, 0, sizeof *r);
}

double wf_loadgen_percentile(const double *sorted, size_t n, double p) {
    if (n == 0) return NAN;
    if (p <= 0) return sorted[0];
    if (p >= 100) return sorted[n - 1];
    double rank = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(rank);
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    double frac = rank - (double)lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void wf_loadgen_dist_compute(double *values, size_t n, wf_loadgen_dist *d) {
    memset(d, 0, sizeof *d);
    d->n = n;
    if (n == 0) {
        d->mean = d->std = d->median = d->p90 = d->p95 = d->p99 = d->min = d->max = NAN;
        return;
    }
    qsort(values, n, sizeof *values, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += values[i];
    d->mean = sum / (double)n;
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (values[i] - d->mean) * (values[i] - d->mean);
    d->std = sqrt(ss / (double)n); /* population std, as numpy.std */
    d->median = wf_loadgen_percentile(values, n, 50);
    d->p90 = wf_loadgen_percentile(values, n, 90);
    d->p95 = wf_loadgen_percentile(values, n, 95);
    d->p99 = wf_loadgen_percentile(values, n, 99);
    d->min = values[0];
    d->max = values[n - 1];
}

void wf_loadgen_error_key(const wf_loadgen_record *r, char *buf, size_t len) {
    switch (r->outcome) {
    case WF_LOADGEN_HTTP_ERROR: snprintf(buf, len, "http_%d", r->http_status); break;
    case WF_LOADGEN_STREAM_ERROR: snprintf(buf, len, "stream_error"); break;
    case WF_LOADGEN_TRANSPORT: snprintf(buf, len, "transport"); break;
    case WF_LOADGEN_TIMEOUT: snprintf(buf, len, "timeout"); break;
    case WF_LOADGEN_CANCELLED: snprintf(buf, len, "cancelled"); break;
    default: snprintf(buf, len, "ok"); break;
    }
}

void wf_loadgen_error_count(wf_loadgen_error_kind *kinds, size_t *n_kinds, const char *key) {
    for (size_t i = 0; i < *n_kinds; i++) {
        if (strcmp(kinds[i].key, key) == 0) {
            kinds[i].count++;
            return;
        }
    }
    /* More distinct kinds than slots is impossible in practice; fold them into the last. */
    size_t i = *n_kinds < WF_LOADGEN_MAX_ERROR_KINDS ? (*n_kinds)++ : WF_LOADGEN_MAX_ERROR_KINDS - 1;
    if (kinds[i].count == 0) snprintf(kinds[i].key, sizeof kinds[i].key, "%s", key);
    kinds[i].count++;
}

wf_status wf_loadgen_summarize(const wf_loadgen_record *recs, size_t n,
                               const wf_loadgen_slo_class *classes, size_t n_classes,
                               double duration_s, wf_loadgen_summary *out) {
    memset(out, 0, sizeof *out);
    if (n_classes > WF_LOADGEN_MAX_CLASSES) return WF_EINVAL;
    out->duration_s = duration_s;
    out->has_slo = n_classes > 0;
    out->n_classes = n_classes;
    for (size_t c = 0; c < n_classes; c++) out->classes[c].def = classes[c];

    size_t n_itl = 0;
    for (size_t i = 0; i < n; i++)
        if (recs[i].outcome == WF_LOADGEN_OK && recs[i].streamed && recs[i].n_chunks > 1)
            n_itl += recs[i].n_chunks - 1;
    double *ttft = malloc((n ? n : 1) * sizeof *ttft);
    double *tpot = malloc((n ? n : 1) * sizeof *tpot);
    double *e2e = malloc((n ? n : 1) * sizeof *e2e);
    double *itl = malloc((n_itl ? n_itl : 1) * sizeof *itl);
    if (!ttft || !tpot || !e2e || !itl) {
        free(ttft), free(tpot), free(e2e), free(itl);
        return WF_ENOMEM;
    }
    size_t n_ttft = 0, n_tpot = 0, n_e2e = 0;
    n_itl = 0;
    for (size_t i = 0; i < n; i++) {
        const wf_loadgen_record *r = &recs[i];
        if (r->outcome == WF_LOADGEN_NOT_SENT) continue;
        out->issued++;
        const wf_loadgen_slo_class *cls = NULL;
        wf_loadgen_class_stats *cs = NULL;
        if (r->slo_class >= 0 && (size_t)r->slo_class < n_classes) {
            cls = &classes[r->slo_class];
            cs = &out->classes[r->slo_class];
            cs->issued++;
        }
        if (r->outcome != WF_LOADGEN_OK) {
            /* The server shedding load (429, 503) is an answer, not a failure: counted apart. */
            if (r->outcome == WF_LOADGEN_HTTP_ERROR && (r->http_status == 429 || r->http_status == 503))
                out->refused++;
            else
                out->failed++;
            char key[24];
            wf_loadgen_error_key(r, key, sizeof key);
            wf_loadgen_error_count(out->errors, &out->n_errors, key);
            continue;
        }
        out->completed++;
        if (cs) cs->completed++;
        out->input_tokens += r->input_tokens > 0 ? r->input_tokens : 0;
        out->output_tokens += r->output_tokens > 0 ? r->output_tokens : 0;
        if (r->tokens_estimated) out->tokens_estimated = true;
        double v = wf_loadgen_record_ttft_ms(r);
        if (!isnan(v)) ttft[n_ttft++] = v;
        v = wf_loadgen_record_tpot_ms(r);
        if (!isnan(v)) tpot[n_tpot++] = v;
        v = wf_loadgen_record_e2e_ms(r);
        if (!isnan(v)) e2e[n_e2e++] = v;
        if (r->streamed)
            for (uint32_t k = 1; k < r->n_chunks; k++)
                itl[n_itl++] = (double)(r->chunk_ns[k] - r->chunk_ns[k - 1]) / 1e6;
        if (out->has_slo && wf_loadgen_record_meets(r, cls)) {
            out->good++;
            if (cs) cs->good++;
        }
    }
    wf_loadgen_dist_compute(ttft, n_ttft, &out->ttft);
    wf_loadgen_dist_compute(tpot, n_tpot, &out->tpot);
    wf_loadgen_dist_compute(e2e, n_e2e, &out->e2e);
    wf_loadgen_dist_compute(itl, n_itl, &out->itl);
    free(ttft), free(tpot), free(e2e), free(itl);

    if (duration_s > 0) {
        out->request_throughput = (double)out->completed / duration_s;
        out->input_throughput = (double)out->input_tokens / duration_s;
        out->output_throughput = (double)out->output_tokens / duration_s;
        out->total_token_throughput = (double)(out->input_tokens + out->output_tokens) / duration_s;
        out->goodput = (double)out->good / duration_s;
    }
    for (size_t c = 0; c < n_classes; c++) {
        wf_loadgen_class_stats *cs = &out->classes[c];
        cs->attainment = cs->issued ? (double)cs->good / (double)cs->issued : 0;
        cs->goodput = duration_s > 0 ? (double)cs->good / duration_s : 0;
    }
    return WF_OK;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

json_t *wf_loadgen_json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

void wf_loadgen_json_put_dist(json_t *o, const char *name, const char *suffix,
                              const wf_loadgen_dist *d, const char *const *stats, bool with_n) {
    static const char *const names[] = {"mean", "median", "std", "p90", "p95", "p99", "min", "max"};
    const double v[] = {d->mean, d->median, d->std, d->p90, d->p95, d->p99, d->min, d->max};
    char k[64];
    for (const char *const *st = stats; *st; st++)
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
            if (strcmp(*st, names[i]) != 0) continue;
            snprintf(k, sizeof k, "%s_%s%s", names[i], name, suffix);
            json_object_set_new(o, k, wf_loadgen_json_num(v[i]));
        }
    if (with_n) {
        snprintf(k, sizeof k, "n_%s", name);
        json_object_set_new(o, k, json_integer((json_int_t)d->n));
    }
}

json_t *wf_loadgen_json_errors(const wf_loadgen_error_kind *kinds, size_t n_kinds) {
    json_t *errs = json_object();
    for (size_t i = 0; i < n_kinds; i++)
        json_object_set_new(errs, kinds[i].key, json_integer((json_int_t)kinds[i].count));
    return errs;
}
