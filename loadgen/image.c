/* Image requests, PNG checks and the image report of weft-bench (see image.h). */
#include "loadgen/image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- request bodies ------------------------------------------------------------------------- */

char *wf_loadgen_image_build_body(const wf_loadgen_image_opts *io, const char *model,
                                  const wf_loadgen_prompt *p, double deadline_ms, bool slo_ext,
                                  bool stream, const char *extra) {
    if (p->slo_class < 0 || (size_t)p->slo_class >= io->n_classes) return NULL;
    const wf_workload_class *c = &io->classes[p->slo_class];
    json_t *b = json_object();
    if (!b) return NULL;
    if (model) json_object_set_new(b, "model", json_string(model));
    if (io->prompt) {
        json_object_set_new(b, "prompt", json_string(io->prompt));
    } else if (p->text) {
        json_object_set_new(b, "prompt", json_string(p->text));
    } else {
        json_object_set_new(b, "prompt", json_string("a photo"));
    }
    json_object_set_new(b, "n", json_integer(io->n > 0 ? io->n : 1));
    char size[32];
    snprintf(size, sizeof size, "%dx%d", c->width, c->height);
    json_object_set_new(b, "size", json_string(size));
    json_object_set_new(b, "response_format", json_string("b64_json"));
    json_object_set_new(b, "num_inference_steps", json_integer(c->steps));
    /* The seed and label come from the item's own seed: the same --seed repeats a run exactly,
     * and neither depends on when or where the request was sent. */
    if (io->send_seed) json_object_set_new(b, "seed", json_integer(wf_loadgen_image_request_seed(p)));
    if (io->class_labels > 0)
        json_object_set_new(b, "class_label",
                            json_integer((json_int_t)((p->text_seed >> 7) % (uint64_t)io->class_labels)));
    if (io->guidance >= 0) json_object_set_new(b, "guidance_scale", json_real(io->guidance));
    if (stream) json_object_set_new(b, "stream", json_true());
    if (slo_ext && deadline_ms > 0) {
        json_t *slo = json_object();
        /* Whole milliseconds, at least 1: a request the client itself sent late is still
         * sent, and the server may refuse it at once. */
        json_object_set_new(slo, "deadline_ms", json_integer((json_int_t)(deadline_ms < 1 ? 1 : deadline_ms)));
        json_object_set_new(b, "slo", slo);
        if (c->has_priority) json_object_set_new(b, "priority", json_integer(c->priority));
    }
    if (extra) {
        json_t *x = json_loads(extra, 0, NULL);
        if (json_is_object(x)) json_object_update(b, x);
        json_decref(x);
    }
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}

int64_t wf_loadgen_image_request_seed(const wf_loadgen_prompt *p) {
    return (int64_t)(p->text_seed >> 33); /* 31 bits: any server's seed type holds it */
}

/* ---- traces: the workload module's, with the items weft-bench sends ------------------------ */

wf_status wf_loadgen_image_trace_write(const char *path, const wf_workload_profile *p,
                                       double rate_scale, uint64_t seed, const double *arrival_s,
                                       const wf_loadgen_prompt *items, size_t n, char *err,
                                       size_t errlen) {
    int *cls = malloc((n ? n : 1) * sizeof *cls);
    int64_t *seeds = malloc((n ? n : 1) * sizeof *seeds);
    wf_status st = WF_ENOMEM;
    if (cls && seeds) {
        for (size_t i = 0; i < n; i++) {
            cls[i] = items[i].slo_class;
            seeds[i] = wf_loadgen_image_request_seed(&items[i]);
        }
        wf_workload_trace t = {.n = n, .arrival_s = (double *)arrival_s, .class_idx = cls,
                               .seed = seeds};
        st = wf_workload_trace_write(path, p, rate_scale, seed, &t, err, errlen);
    } else {
        wf_status_errorf(err, errlen, st, "trace %s: out of memory", path);
    }
    free(cls);
    free(seeds);
    return st;
}

wf_status wf_loadgen_image_trace_read(const char *path, wf_workload_profile *p, double **arrival_s,
                                      wf_loadgen_prompt **items, size_t *n, char *err,
                                      size_t errlen) {
    *arrival_s = NULL;
    *items = NULL;
    *n = 0;
    wf_workload_trace t;
    wf_status st = wf_workload_trace_read(path, p, &t, err, errlen);
    if (st != WF_OK) return st;
    wf_loadgen_prompt *it = calloc(t.n, sizeof *it);
    if (!it) {
        wf_workload_trace_free(&t);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "trace %s: out of memory", path);
    }
    for (size_t i = 0; i < t.n; i++) {
        it[i].slo_class = t.class_idx[i];
        /* The seed sent is the trace's (high bits); the low bits vary the class label. */
        uint64_t seed = t.seed[i] >= 0 ? (uint64_t)t.seed[i] : (uint64_t)i * 2654435761u;
        it[i].text_seed = seed << 33 | ((uint64_t)i * 0x9E3779B1u & 0x1FFFFFFFFull);
    }
    *arrival_s = t.arrival_s; /* handed over: the caller frees it */
    *items = it;
    *n = t.n;
    free(t.class_idx);
    free(t.seed);
    return WF_OK;
}

/* ---- PNG checks ------------------------------------------------------------------------------- */

static int b64_value(unsigned char ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

uint8_t *wf_loadgen_base64_decode(const char *s, size_t len, size_t *out_len) {
    while (len > 0 && s[len - 1] == '=') len--;
    if (len % 4 == 1) return NULL;
    uint8_t *out = malloc(len / 4 * 3 + 3);
    if (!out) return NULL;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    *out_len = o;
    return out;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* CRC-32 as PNG defines it (ISO 3309, reflected, polynomial 0xEDB88320). */
static uint32_t png_crc(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

wf_status wf_loadgen_png_check(const uint8_t *buf, size_t len, int width, int height, char *err,
                               size_t errlen) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len < 8 || memcmp(buf, sig, 8) != 0)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "not a PNG (bad signature)");
    /* The first chunk must be IHDR: length 13, type, 13 bytes of data, CRC over type + data. */
    if (len < 8 + 8 + 13 + 4 || be32(buf + 8) != 13 || memcmp(buf + 12, "IHDR", 4) != 0)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "PNG does not start with an IHDR chunk");
    if (png_crc(buf + 12, 4 + 13) != be32(buf + 12 + 4 + 13))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "PNG IHDR chunk has a bad CRC");
    uint32_t w = be32(buf + 16), h = be32(buf + 20);
    if ((int64_t)w != width || (int64_t)h != height)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "PNG is %ux%u, asked %dx%d", w, h, width,
                                height);
    return WF_OK;
}

wf_status wf_loadgen_image_check_b64(const char *b64, size_t len, int width, int height,
                                     char *err, size_t errlen) {
    size_t n = 0;
    uint8_t *png = wf_loadgen_base64_decode(b64, len, &n);
    if (!png) return wf_status_errorf(err, errlen, WF_EFORMAT, "b64_json is not valid base64");
    wf_status st = wf_loadgen_png_check(png, n, width, height, err, errlen);
    free(png);
    return st;
}

static int check_data_array(json_t *data, int width, int height, char *err, size_t errlen) {
    size_t i;
    json_t *item;
    char m[160];
    json_array_foreach(data, i, item) {
        json_t *b = json_object_get(item, "b64_json");
        if (!json_is_string(b)) {
            wf_errorf(err, errlen, "data[%zu] has no b64_json string", i);
            return -1;
        }
        if (wf_loadgen_image_check_b64(json_string_value(b), json_string_length(b), width, height,
                                       m, sizeof m) != WF_OK) {
            wf_errorf(err, errlen, "data[%zu]: %s", i, m);
            return -1;
        }
    }
    return (int)json_array_size(data);
}

static void error_text(json_t *root, char *err, size_t errlen) {
    json_t *e = json_object_get(root, "error");
    json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
    wf_errorf(err, errlen, "%s", json_is_string(m) ? json_string_value(m) : "error object in reply");
}

int wf_loadgen_image_check_reply(json_t *root, int width, int height, char *err, size_t errlen) {
    if (!json_is_object(root)) {
        wf_errorf(err, errlen, "reply is not a JSON object");
        return -1;
    }
    if (json_object_get(root, "error")) {
        error_text(root, err, errlen);
        return -1;
    }
    json_t *data = json_object_get(root, "data");
    if (!json_is_array(data)) {
        wf_errorf(err, errlen, "reply has no \"data\" array");
        return -1;
    }
    return check_data_array(data, width, height, err, errlen);
}

int wf_loadgen_image_check_event(json_t *msg, int width, int height, bool *progress, char *err,
                                 size_t errlen) {
    *progress = false;
    if (!json_is_object(msg)) {
        wf_errorf(err, errlen, "event is not a JSON object");
        return -1;
    }
    if (json_object_get(msg, "error")) {
        error_text(msg, err, errlen);
        return -1;
    }
    json_t *data = json_object_get(msg, "data");
    if (json_is_array(data)) return check_data_array(data, width, height, err, errlen);
    json_t *b = json_object_get(msg, "b64_json");
    const char *type = json_string_value(json_object_get(msg, "type"));
    if (json_is_string(b) && !(type && strstr(type, "partial"))) {
        char m[160];
        if (wf_loadgen_image_check_b64(json_string_value(b), json_string_length(b), width, height,
                                       m, sizeof m) != WF_OK) {
            wf_errorf(err, errlen, "final image: %s", m);
            return -1;
        }
        return 1;
    }
    *progress = true; /* step i of n, or a preview */
    return 0;
}

/* ---- report math ------------------------------------------------------------------------------ */

bool wf_loadgen_image_record_met(const wf_loadgen_record *r, const wf_workload_class *c) {
    if (r->outcome != WF_LOADGEN_OK || !c || !(c->t_single_ms > 0)) return false;
    uint64_t arrival = r->t_arrival_ns ? r->t_arrival_ns : r->t_start_ns;
    if (r->t_end_ns < arrival) return false;
    return (double)(r->t_end_ns - arrival) / 1e6 <= wf_workload_class_deadline_ms(c);
}

static bool refused(const wf_loadgen_record *r) {
    return r->outcome == WF_LOADGEN_HTTP_ERROR && (r->http_status == 429 || r->http_status == 503);
}

wf_status wf_loadgen_image_summarize(const wf_loadgen_record *recs, size_t n,
                                     const wf_workload_class *classes, size_t n_classes,
                                     double duration_s, wf_loadgen_image_summary *out) {
    memset(out, 0, sizeof *out);
    if (n_classes > WF_WORKLOAD_MAX_CLASSES) return WF_EINVAL;
    out->duration_s = duration_s;
    out->n_classes = n_classes;
    for (size_t c = 0; c < n_classes; c++) out->classes[c].def = classes[c];
    /* One pass per class over a scratch array keeps the memory at 3 x n doubles. */
    double *lat = malloc((n ? n : 1) * sizeof *lat), *norm = malloc((n ? n : 1) * sizeof *norm);
    double *first = malloc((n ? n : 1) * sizeof *first);
    if (!lat || !norm || !first) {
        free(lat), free(norm), free(first);
        return WF_ENOMEM;
    }
    size_t n_lat = 0, n_norm = 0, n_first = 0;
    for (size_t i = 0; i < n; i++) {
        const wf_loadgen_record *r = &recs[i];
        if (r->outcome == WF_LOADGEN_NOT_SENT) continue;
        bool has_class = r->slo_class >= 0 && (size_t)r->slo_class < n_classes;
        wf_loadgen_image_class_stats *cs = has_class ? &out->classes[r->slo_class] : NULL;
        out->issued++;
        if (cs) cs->issued++;
        if (r->outcome != WF_LOADGEN_OK) {
            if (refused(r)) {
                out->refused++;
                if (cs) cs->refused++;
            } else {
                out->failed++;
                if (cs) cs->failed++;
            }
            char key[24];
            wf_loadgen_error_key(r, key, sizeof key);
            wf_loadgen_error_count(out->errors, &out->n_errors, key);
            continue;
        }
        out->completed++;
        out->images += r->images;
        if (cs) {
            cs->completed++;
            cs->images += r->images;
        }
        double l = wf_loadgen_record_e2e_ms(r);
        if (!isnan(l)) lat[n_lat++] = l;
        if (cs && cs->def.t_single_ms > 0 && !isnan(l)) norm[n_norm++] = l / cs->def.t_single_ms;
        if (r->streamed && r->t_first_ns >= r->t_start_ns && r->t_first_ns)
            first[n_first++] = (double)(r->t_first_ns - r->t_start_ns) / 1e6;
        if (cs && wf_loadgen_image_record_met(r, &cs->def)) {
            out->met++;
            cs->met++;
        }
    }
    wf_loadgen_dist_compute(lat, n_lat, &out->latency);
    wf_loadgen_dist_compute(norm, n_norm, &out->normalized);
    wf_loadgen_dist_compute(first, n_first, &out->first_event);
    for (size_t c = 0; c < n_classes; c++) {
        wf_loadgen_image_class_stats *cs = &out->classes[c];
        size_t m = 0, k = 0;
        for (size_t i = 0; i < n; i++) {
            const wf_loadgen_record *r = &recs[i];
            if (r->outcome != WF_LOADGEN_OK || r->slo_class != (int)c) continue;
            double l = wf_loadgen_record_e2e_ms(r);
            if (isnan(l)) continue;
            lat[m++] = l;
            if (cs->def.t_single_ms > 0) norm[k++] = l / cs->def.t_single_ms;
        }
        wf_loadgen_dist_compute(lat, m, &cs->latency);
        wf_loadgen_dist_compute(norm, k, &cs->normalized);
        cs->attainment = cs->issued ? (double)cs->met / (double)cs->issued : NAN;
    }
    free(lat), free(norm), free(first);
    out->attainment = out->issued ? (double)out->met / (double)out->issued : NAN;
    if (duration_s > 0) {
        out->request_throughput = (double)out->completed / duration_s;
        out->image_throughput = (double)out->images / duration_s;
    }
    return WF_OK;
}

wf_status wf_loadgen_image_summarize_phases(const wf_loadgen_record *recs, size_t n,
                                            uint64_t t0_ns, const wf_workload_profile *p,
                                            wf_loadgen_image_summary *s) {
    s->n_phases = p->n_phases;
    double *lat = malloc((n ? n : 1) * sizeof *lat), *norm = malloc((n ? n : 1) * sizeof *norm);
    if (!lat || !norm) {
        free(lat), free(norm);
        return WF_ENOMEM;
    }
    for (size_t k = 0; k < p->n_phases; k++) {
        wf_loadgen_image_phase_stats *ps = &s->phases[k];
        memset(ps, 0, sizeof *ps);
        snprintf(ps->name, sizeof ps->name, "%s", p->phases[k].name);
        ps->start_s = p->phases[k].start_s;
        ps->end_s = p->phases[k].end_s;
        size_t m = 0, z = 0;
        for (size_t i = 0; i < n; i++) {
            const wf_loadgen_record *r = &recs[i];
            if (r->outcome == WF_LOADGEN_NOT_SENT || r->t_arrival_ns < t0_ns) continue;
            double t = (double)(r->t_arrival_ns - t0_ns) / 1e9;
            if (t < ps->start_s || t >= ps->end_s) continue;
            const wf_workload_class *c =
                r->slo_class >= 0 && (size_t)r->slo_class < s->n_classes ? &s->classes[r->slo_class].def : NULL;
            ps->issued++;
            if (r->outcome != WF_LOADGEN_OK) {
                if (refused(r)) ps->refused++;
                else ps->failed++;
                continue;
            }
            ps->completed++;
            double l = wf_loadgen_record_e2e_ms(r);
            if (!isnan(l)) lat[m++] = l;
            if (c && c->t_single_ms > 0 && !isnan(l)) norm[z++] = l / c->t_single_ms;
            if (wf_loadgen_image_record_met(r, c)) ps->met++;
        }
        wf_loadgen_dist_compute(lat, m, &ps->latency);
        wf_loadgen_dist_compute(norm, z, &ps->normalized);
        ps->attainment = ps->issued ? (double)ps->met / (double)ps->issued : NAN;
    }
    free(lat), free(norm);
    return WF_OK;
}

/* ---- text table and JSON --------------------------------------------------------------------- */

/* v with `dec` decimals ("%" appended when pct), "-" when undefined. */
static void fmt(char *buf, size_t len, double v, int dec, bool pct) {
    if (isfinite(v)) snprintf(buf, len, "%.*f%s", dec, v, pct ? "%" : "");
    else snprintf(buf, len, "-");
}

static void print_row(FILE *f, const char *name, const wf_loadgen_dist *l, const wf_loadgen_dist *z,
                      uint64_t issued, uint64_t done, uint64_t refused_n, uint64_t failed,
                      double attainment, double t_single, double deadline) {
    char v[9][24];
    fmt(v[0], sizeof v[0], t_single, 1, false);
    fmt(v[1], sizeof v[1], deadline, 1, false);
    fmt(v[2], sizeof v[2], l->mean, 1, false);
    fmt(v[3], sizeof v[3], l->median, 1, false);
    fmt(v[4], sizeof v[4], l->p95, 1, false);
    fmt(v[5], sizeof v[5], l->p99, 1, false);
    fmt(v[6], sizeof v[6], z->mean, 2, false);
    fmt(v[7], sizeof v[7], z->p99, 2, false);
    fmt(v[8], sizeof v[8], 100.0 * attainment, 1, true);
    fprintf(f, "%-8s %9s %9s %6llu %6llu %7llu %6llu %9s %9s %9s %9s %7s %7s %8s\n", name, v[0],
            v[1], (unsigned long long)issued, (unsigned long long)done,
            (unsigned long long)refused_n, (unsigned long long)failed, v[2], v[3], v[4], v[5], v[6],
            v[7], v[8]);
}

void wf_loadgen_image_print(FILE *f, const wf_loadgen_image_summary *s) {
    fprintf(f, "%-40s %llu\n", "Successful requests:", (unsigned long long)s->completed);
    fprintf(f, "%-40s %llu\n", "Refused requests (429/503):", (unsigned long long)s->refused);
    fprintf(f, "%-40s %llu\n", "Failed requests:", (unsigned long long)s->failed);
    fprintf(f, "%-40s %.2f\n", "Benchmark duration (s):", s->duration_s);
    fprintf(f, "%-40s %llu\n", "Images (valid PNGs):", (unsigned long long)s->images);
    fprintf(f, "%-40s %.3f\n", "Image throughput (images/s):", s->image_throughput);
    fprintf(f, "%-40s %.3f\n", "Request throughput (req/s):", s->request_throughput);
    char a[24];
    fmt(a, sizeof a, 100.0 * s->attainment, 1, true);
    fprintf(f, "%-40s %s (%llu of %llu met)\n", "SLO attainment:", a, (unsigned long long)s->met,
            (unsigned long long)s->issued);
    if (s->first_event.n) {
        fprintf(f, "%-40s %.1f / %.1f / %.1f\n", "First stream event mean/p50/p99 (ms):",
                s->first_event.mean, s->first_event.median, s->first_event.p99);
    }
    fprintf(f, "%-8s %9s %9s %6s %6s %7s %6s %9s %9s %9s %9s %7s %7s %8s\n", "class", "T_single",
            "deadline", "issued", "done", "refused", "failed", "mean_ms", "p50_ms", "p95_ms",
            "p99_ms", "norm", "norm99", "SLO met");
    for (size_t c = 0; c < s->n_classes; c++) {
        const wf_loadgen_image_class_stats *cs = &s->classes[c];
        print_row(f, cs->def.name, &cs->latency, &cs->normalized, cs->issued, cs->completed,
                  cs->refused, cs->failed, cs->attainment, cs->def.t_single_ms,
                  wf_workload_class_deadline_ms(&cs->def));
    }
    print_row(f, "all", &s->latency, &s->normalized, s->issued, s->completed, s->refused, s->failed,
              s->attainment, NAN, NAN);
    if (s->n_phases) {
        fprintf(f, "%-12s %8s %8s %6s %6s %7s %6s %9s %9s %7s %8s\n", "phase", "start_s", "end_s",
                "issued", "done", "refused", "failed", "mean_ms", "p99_ms", "norm", "SLO met");
        for (size_t k = 0; k < s->n_phases; k++) {
            const wf_loadgen_image_phase_stats *ps = &s->phases[k];
            char v[4][24];
            fmt(v[0], sizeof v[0], ps->latency.mean, 1, false);
            fmt(v[1], sizeof v[1], ps->latency.p99, 1, false);
            fmt(v[2], sizeof v[2], ps->normalized.mean, 2, false);
            fmt(v[3], sizeof v[3], 100.0 * ps->attainment, 1, true);
            fprintf(f, "%-12.12s %8.1f %8.1f %6llu %6llu %7llu %6llu %9s %9s %7s %8s\n", ps->name,
                    ps->start_s, ps->end_s, (unsigned long long)ps->issued,
                    (unsigned long long)ps->completed, (unsigned long long)ps->refused,
                    (unsigned long long)ps->failed, v[0], v[1], v[2], v[3]);
        }
    }
    if (s->n_errors) {
        fprintf(f, "Errors:");
        for (size_t i = 0; i < s->n_errors; i++)
            fprintf(f, " %s=%llu", s->errors[i].key, (unsigned long long)s->errors[i].count);
        fprintf(f, "\n");
    }
}

/* The image report's distributions: latency percentiles with p95, no std (GF-DiT's table). */
static void put_dist(json_t *o, const char *name, const wf_loadgen_dist *d) {
    static const char *const stats[] = {"mean", "median", "p90", "p95", "p99", "min", "max", NULL};
    wf_loadgen_json_put_dist(o, name, "", d, stats, false);
}

static void put_counts(json_t *o, uint64_t issued, uint64_t completed, uint64_t refused_n,
                       uint64_t failed, uint64_t met, uint64_t images, double attainment) {
    json_object_set_new(o, "issued", json_integer((json_int_t)issued));
    json_object_set_new(o, "completed", json_integer((json_int_t)completed));
    json_object_set_new(o, "refused", json_integer((json_int_t)refused_n));
    json_object_set_new(o, "failed", json_integer((json_int_t)failed));
    json_object_set_new(o, "slo_met", json_integer((json_int_t)met));
    json_object_set_new(o, "images", json_integer((json_int_t)images));
    json_object_set_new(o, "slo_attainment", wf_loadgen_json_num(attainment));
}

json_t *wf_loadgen_image_summary_json(const wf_loadgen_image_summary *s) {
    json_t *o = json_object();
    put_counts(o, s->issued, s->completed, s->refused, s->failed, s->met, s->images, s->attainment);
    json_object_set_new(o, "duration", json_real(s->duration_s));
    json_object_set_new(o, "image_throughput", json_real(s->image_throughput));
    json_object_set_new(o, "request_throughput", json_real(s->request_throughput));
    put_dist(o, "latency_ms", &s->latency);
    put_dist(o, "normalized_latency", &s->normalized);
    put_dist(o, "first_event_ms", &s->first_event);
    json_object_set_new(o, "errors", wf_loadgen_json_errors(s->errors, s->n_errors));
    json_t *cls = json_array();
    for (size_t c = 0; c < s->n_classes; c++) {
        const wf_loadgen_image_class_stats *cs = &s->classes[c];
        json_t *x = json_object();
        json_object_set_new(x, "name", json_string(cs->def.name));
        char size[32];
        snprintf(size, sizeof size, "%dx%d", cs->def.width, cs->def.height);
        json_object_set_new(x, "size", json_string(size));
        json_object_set_new(x, "steps", json_integer(cs->def.steps));
        json_object_set_new(x, "alpha", json_real(cs->def.alpha));
        json_object_set_new(x, "t_single_ms", wf_loadgen_json_num(cs->def.t_single_ms > 0 ? cs->def.t_single_ms : NAN));
        json_object_set_new(x, "deadline_ms", wf_loadgen_json_num(wf_workload_class_deadline_ms(&cs->def)));
        put_counts(x, cs->issued, cs->completed, cs->refused, cs->failed, cs->met, cs->images,
                   cs->attainment);
        put_dist(x, "latency_ms", &cs->latency);
        put_dist(x, "normalized_latency", &cs->normalized);
        json_array_append_new(cls, x);
    }
    json_object_set_new(o, "classes", cls);
    if (s->n_phases) {
        json_t *ph = json_array();
        for (size_t k = 0; k < s->n_phases; k++) {
            const wf_loadgen_image_phase_stats *ps = &s->phases[k];
            json_t *x = json_object();
            json_object_set_new(x, "name", json_string(ps->name));
            json_object_set_new(x, "start_s", json_real(ps->start_s));
            json_object_set_new(x, "end_s", json_real(ps->end_s));
            json_object_set_new(x, "issued", json_integer((json_int_t)ps->issued));
            json_object_set_new(x, "completed", json_integer((json_int_t)ps->completed));
            json_object_set_new(x, "refused", json_integer((json_int_t)ps->refused));
            json_object_set_new(x, "failed", json_integer((json_int_t)ps->failed));
            json_object_set_new(x, "slo_met", json_integer((json_int_t)ps->met));
            json_object_set_new(x, "slo_attainment", wf_loadgen_json_num(ps->attainment));
            put_dist(x, "latency_ms", &ps->latency);
            put_dist(x, "normalized_latency", &ps->normalized);
            json_array_append_new(ph, x);
        }
        json_object_set_new(o, "phases", ph);
    }
    return o;
}
