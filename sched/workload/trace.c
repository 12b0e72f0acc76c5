/* Trace files in GF-DiT's workload JSON shape: written by weft-bench --trace-out, read by its
 * --trace and by the DiT simulator (see workload.h). */
#include "sched/workload/workload.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

wf_status wf_workload_trace_write(const char *path, const wf_workload_profile *p,
                                  double rate_scale, uint64_t seed, const wf_workload_trace *t,
                                  char *err, size_t errlen) {
    json_t *root = json_object(), *meta = json_object(), *reqs = json_array();
    json_t *phases = json_array(), *classes = json_object(), *counts = json_object();
    uint64_t per_class[WF_WORKLOAD_MAX_CLASSES] = {0};
    const double *arrival_s = t->arrival_s;
    for (size_t i = 0; i < t->n; i++) {
        int c = t->class_idx[i];
        if (c < 0 || (size_t)c >= p->n_classes) continue;
        const wf_workload_class *k = &p->classes[c];
        json_t *r = json_object();
        char id[48];
        snprintf(id, sizeof id, "%s_%06llu", k->name, (unsigned long long)per_class[c]++);
        json_object_set_new(r, "request_id", json_string(id));
        json_object_set_new(r, "request_class", json_string(k->name));
        json_object_set_new(r, "arrival_ms", json_real(arrival_s[i] * 1000.0));
        json_object_set_new(r, "width", json_integer(k->width));
        json_object_set_new(r, "height", json_integer(k->height));
        json_object_set_new(r, "num_steps", json_integer(k->steps));
        if (k->has_priority) json_object_set_new(r, "priority", json_integer(k->priority));
        double d = wf_workload_class_deadline_ms(k);
        json_object_set_new(r, "deadline_ms", isfinite(d) ? json_real(arrival_s[i] * 1000.0 + d) : json_null());
        json_object_set_new(r, "profiled_optimal_latency_ms",
                            k->t_single_ms > 0 ? json_real(k->t_single_ms) : json_null());
        json_object_set_new(r, "seed", t->seed[i] >= 0 ? json_integer(t->seed[i]) : json_null());
        json_array_append_new(reqs, r);
    }
    for (size_t i = 0; i < p->n_phases; i++) {
        const wf_workload_phase *ph = &p->phases[i];
        json_t *x = json_object(), *mix = json_object();
        json_object_set_new(x, "name", json_string(ph->name));
        json_object_set_new(x, "start_s", json_real(ph->start_s));
        json_object_set_new(x, "end_s", json_real(ph->end_s));
        json_object_set_new(x, "arrival_rate_per_min", json_real(ph->rate * 60.0));
        for (size_t c = 0; c < p->n_classes; c++)
            json_object_set_new(mix, p->classes[c].name, json_real(ph->mix[c]));
        json_object_set_new(x, "mix", mix);
        json_array_append_new(phases, x);
    }
    for (size_t c = 0; c < p->n_classes; c++) {
        const wf_workload_class *k = &p->classes[c];
        json_t *x = json_object();
        json_object_set_new(x, "width", json_integer(k->width));
        json_object_set_new(x, "height", json_integer(k->height));
        json_object_set_new(x, "num_steps", json_integer(k->steps));
        json_object_set_new(x, "alpha", json_real(k->alpha));
        json_object_set_new(x, "t_single_ms", k->t_single_ms > 0 ? json_real(k->t_single_ms) : json_null());
        json_object_set_new(classes, k->name, x);
        json_object_set_new(counts, k->name, json_integer((json_int_t)per_class[c]));
    }
    json_object_set_new(meta, "generator", json_string("weft-bench"));
    json_object_set_new(meta, "profile", json_string(p->name));
    json_object_set_new(meta, "rate_scale", json_real(rate_scale));
    json_object_set_new(meta, "seed", json_integer((json_int_t)seed));
    json_object_set_new(meta, "duration_s", json_real(wf_workload_profile_end_s(p)));
    json_object_set_new(meta, "phases", phases);
    json_object_set_new(meta, "classes", classes);
    json_object_set_new(meta, "class_counts", counts);
    json_object_set_new(root, "metadata", meta);
    json_object_set_new(root, "requests", reqs);
    int rc = json_dump_file(root, path, JSON_INDENT(1) | JSON_REAL_PRECISION(12));
    json_decref(root);
    if (rc != 0) return wf_status_errorf(err, errlen, WF_EIO, "cannot write trace %s", path);
    return WF_OK;
}

typedef struct trace_req {
    double arrival_s;
    int cls;
    int64_t seed; /* -1: none given */
} trace_req;

static int cmp_trace(const void *a, const void *b) {
    double x = ((const trace_req *)a)->arrival_s, y = ((const trace_req *)b)->arrival_s;
    return (x > y) - (x < y);
}

static bool get_int(json_t *o, const char *k, int hi, int *out) {
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > hi) return false;
    *out = (int)json_integer_value(v);
    return true;
}

void wf_workload_trace_free(wf_workload_trace *t) {
    free(t->arrival_s);
    free(t->class_idx);
    free(t->seed);
    memset(t, 0, sizeof *t);
}

wf_status wf_workload_trace_read(const char *path, wf_workload_profile *p, wf_workload_trace *t,
                                 char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return wf_status_errorf(err, errlen, je.line < 0 ? WF_ENOTFOUND : WF_EFORMAT, "trace %s: %s",
                                path, je.text);
    json_t *reqs = json_object_get(root, "requests");
    size_t m = json_array_size(reqs);
    wf_status st = WF_OK;
    trace_req *tr = NULL;
    if (!json_is_array(reqs) || m == 0) {
        st = wf_status_errorf(err, errlen, WF_EFORMAT, "trace %s: no \"requests\" array", path);
        goto out;
    }
    tr = calloc(m, sizeof *tr);
    if (!tr) {
        st = wf_status_errorf(err, errlen, WF_ENOMEM, "trace %s: out of memory", path);
        goto out;
    }
    bool seen[WF_WORKLOAD_MAX_CLASSES] = {0};
    for (size_t i = 0; i < m; i++) {
        json_t *r = json_array_get(reqs, i);
        const char *name = json_string_value(json_object_get(r, "request_class"));
        json_t *arr = json_object_get(r, "arrival_ms");
        wf_workload_class c = {0};
        if (!name || !*name || strlen(name) >= sizeof c.name || !json_is_number(arr) ||
            json_number_value(arr) < 0 ||
            !get_int(r, "width", WF_WORKLOAD_MAX_DIM, &c.width) ||
            !get_int(r, "height", WF_WORKLOAD_MAX_DIM, &c.height) ||
            !get_int(r, "num_steps", WF_WORKLOAD_MAX_STEPS, &c.steps)) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT,
                                  "trace %s: request %zu needs request_class (1..%d characters), "
                                  "arrival_ms >= 0, width and height (1..%d), num_steps (1..%d)",
                                  path, i, (int)sizeof c.name - 1, WF_WORKLOAD_MAX_DIM,
                                  WF_WORKLOAD_MAX_STEPS);
            goto out;
        }
        snprintf(c.name, sizeof c.name, "%s", name);
        c.alpha = 2.0;
        json_t *ts = json_object_get(r, "profiled_optimal_latency_ms");
        json_t *d = json_object_get(r, "deadline_ms");
        if (json_is_number(ts) && json_number_value(ts) > 0) {
            c.t_single_ms = json_number_value(ts);
            if (json_is_number(d) && json_number_value(d) > json_number_value(arr))
                c.alpha = (json_number_value(d) - json_number_value(arr)) / c.t_single_ms;
            if (!isfinite(c.alpha) || !(c.alpha > 0)) {
                st = wf_status_errorf(err, errlen, WF_EFORMAT,
                                      "trace %s: request %zu: (deadline_ms - arrival_ms) / "
                                      "profiled_optimal_latency_ms is not a finite number > 0",
                                      path, i);
                goto out;
            }
        }
        json_t *pr = json_object_get(r, "priority");
        if (pr && !json_is_null(pr) &&
            (!json_is_integer(pr) || json_integer_value(pr) < -WF_WORKLOAD_MAX_PRIORITY ||
             json_integer_value(pr) > WF_WORKLOAD_MAX_PRIORITY)) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT,
                                  "trace %s: request %zu: priority must be an integer in "
                                  "[-%d, %d]", path, i, WF_WORKLOAD_MAX_PRIORITY,
                                  WF_WORKLOAD_MAX_PRIORITY);
            goto out;
        }
        if (json_is_integer(pr)) {
            c.has_priority = true;
            c.priority = (int)json_integer_value(pr);
        }
        int k = wf_workload_profile_class_index(p, c.name);
        if (k < 0 || !seen[k]) { /* the first request of a class defines it */
            if (wf_workload_profile_set_class(p, &c) != WF_OK) {
                st = wf_status_errorf(err, errlen, WF_EFORMAT, "trace %s: more than %d classes",
                                      path, WF_WORKLOAD_MAX_CLASSES);
                goto out;
            }
            k = wf_workload_profile_class_index(p, c.name);
            seen[k] = true;
        }
        tr[i].cls = k;
        tr[i].arrival_s = json_number_value(arr) / 1000.0;
        json_t *sd = json_object_get(r, "seed");
        tr[i].seed = json_is_integer(sd) && json_integer_value(sd) >= 0 ? json_integer_value(sd) & 0x7FFFFFFF : -1;
    }
    qsort(tr, m, sizeof *tr, cmp_trace);
    t->arrival_s = malloc(m * sizeof *t->arrival_s);
    t->class_idx = malloc(m * sizeof *t->class_idx);
    t->seed = malloc(m * sizeof *t->seed);
    if (!t->arrival_s || !t->class_idx || !t->seed) {
        wf_workload_trace_free(t);
        st = wf_status_errorf(err, errlen, WF_ENOMEM, "trace %s: out of memory", path);
        goto out;
    }
    for (size_t i = 0; i < m; i++) {
        t->arrival_s[i] = tr[i].arrival_s;
        t->class_idx[i] = tr[i].cls;
        t->seed[i] = tr[i].seed;
    }
    t->n = m;
    snprintf(p->name, sizeof p->name, "trace");
out:
    free(tr);
    json_decref(root);
    return st;
}
