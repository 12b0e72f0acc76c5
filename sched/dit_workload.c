/* The DiT simulator's workloads from weft-bench's profiles and traces (see dit_workload.h). */
#include "sched/dit_workload.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/* The simulator's class of profile class c, or -1. */
static int sim_class(const wf_dit_sim_config *cfg, const wf_workload_class *c) {
    for (int k = 0; k < WF_DIT_SIM_CLASSES; k++)
        if (cfg->classes[k].name && !strcmp(cfg->classes[k].name, c->name)) return k;
    return -1;
}

/* map[c] = simulator class of every profile class; an unknown one is an error only if used. */
static wf_status map_classes(const wf_dit_sim_config *cfg, const wf_workload_profile *p, const char *what,
                             const bool *used, int *map, char *err, size_t errlen) {
    for (size_t c = 0; c < p->n_classes; c++) {
        map[c] = sim_class(cfg, &p->classes[c]);
        if (map[c] < 0 && used[c])
            return wf_status_errorf(err, errlen, WF_EFORMAT,
                                    "%s: class '%s' is not one of the simulator's (S, M, L)", what,
                                    p->classes[c].name);
    }
    return WF_OK;
}

wf_status wf_dit_workload_profile(const wf_dit_sim_config *cfg, const char *name_or_path, double load,
                                  uint64_t seed, wf_dit_sim_job **jobs, int *n, wf_workload_profile *used,
                                  char *err, size_t errlen) {
    *jobs = NULL;
    *n = 0;
    if (!(load > 0) || !isfinite(load) || cfg->n_ranks < 1)
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit workload: load must be > 0 (got %g)", load);
    wf_workload_profile p;
    wf_status st = wf_workload_profile_load(name_or_path, &p, err, errlen);
    if (st != WF_OK) return st;
    bool in_mix[WF_WORKLOAD_MAX_CLASSES] = {0};
    for (size_t i = 0; i < p.n_phases; i++)
        for (size_t c = 0; c < p.n_classes; c++)
            if (p.phases[i].rate > 0 && p.phases[i].mix[c] > 0) in_mix[c] = true;
    int map[WF_WORKLOAD_MAX_CLASSES];
    st = map_classes(cfg, &p, name_or_path, in_mix, map, err, errlen);
    if (st != WF_OK) return st;
    /* T_single of the simulated cluster, so that the offered load is the simulator's. */
    for (size_t c = 0; c < p.n_classes; c++)
        p.classes[c].t_single_ms = map[c] >= 0 ? wf_dit_sim_single_ms(cfg, map[c]) : 1;
    double offered = wf_workload_profile_offered_load(&p, cfg->n_ranks);
    if (!(offered > 0))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "profile %s: no phase has arrivals", name_or_path);
    wf_workload_profile_scale_rate(&p, load / offered);
    if (used) *used = p;
    /* Room for well beyond the expected count; sampled again with more when it fills up. */
    size_t cap = (size_t)(wf_workload_profile_expected_requests(&p) * 2) + 64, got;
    double *at = NULL;
    int *cls = NULL;
    for (;;) {
        if (cap > 10u * 1000 * 1000) {
            free(at), free(cls);
            return wf_status_errorf(err, errlen, WF_EINVAL, "profile %s: more than 10M requests at load %g",
                                    name_or_path, load);
        }
        double *na = realloc(at, cap * sizeof *at);
        if (na) at = na;
        int *nc = na ? realloc(cls, cap * sizeof *cls) : NULL;
        if (!na || !nc) {
            free(at), free(cls);
            return WF_ENOMEM;
        }
        cls = nc;
        got = wf_workload_profile_sample(&p, seed, cap, at, cls);
        if (got < cap) break;
        cap *= 2;
    }
    wf_dit_sim_job *out = malloc((got ? got : 1) * sizeof *out);
    if (!out) {
        free(at), free(cls);
        return WF_ENOMEM;
    }
    for (size_t i = 0; i < got; i++) out[i] = (wf_dit_sim_job){.arrival_ms = at[i] * 1000.0, .cls = map[cls[i]]};
    free(at), free(cls);
    *jobs = out;
    *n = (int)got;
    return WF_OK;
}

wf_status wf_dit_workload_trace(const wf_dit_sim_config *cfg, const char *path, double load,
                                wf_dit_sim_job **jobs, int *n, double *time_scale, char *err, size_t errlen) {
    *jobs = NULL;
    *n = 0;
    if (time_scale) *time_scale = 1;
    if (!(load >= 0) || !isfinite(load))
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit workload: load must be >= 0 (got %g)", load);
    wf_workload_profile p;
    wf_workload_profile_default_classes(&p);
    wf_workload_trace t;
    wf_status st = wf_workload_trace_read(path, &p, &t, err, errlen);
    if (st != WF_OK) return st;
    size_t m = t.n;
    bool in_trace[WF_WORKLOAD_MAX_CLASSES] = {0};
    for (size_t i = 0; i < m; i++) in_trace[t.class_idx[i]] = true;
    int map[WF_WORKLOAD_MAX_CLASSES];
    st = map_classes(cfg, &p, path, in_trace, map, err, errlen);
    wf_dit_sim_job *out = st == WF_OK ? malloc(m * sizeof *out) : NULL;
    if (st == WF_OK && !out) st = WF_ENOMEM;
    if (st == WF_OK) {
        for (size_t i = 0; i < m; i++) {
            const wf_workload_class *c = &p.classes[t.class_idx[i]];
            /* alpha from the trace only where it says T_single (else the reader's guess): the
             * simulator's class alpha otherwise */
            out[i] = (wf_dit_sim_job){.arrival_ms = t.arrival_s[i] * 1000.0, .cls = map[t.class_idx[i]],
                                      .alpha = c->t_single_ms > 0 ? c->alpha : 0};
        }
        double offered = wf_dit_sim_offered_load(cfg, out, (int)m);
        if (load > 0 && !(offered > 0)) {
            free(out);
            out = NULL;
            st = wf_status_errorf(err, errlen, WF_EINVAL,
                                  "trace %s: its requests all arrive at once: no load to rescale", path);
        } else if (load > 0) {
            /* Stretching the clock by k divides the offered load by k. */
            double k = offered / load;
            for (size_t i = 0; i < m; i++) out[i].arrival_ms *= k;
            if (time_scale) *time_scale = k;
        }
    }
    wf_workload_trace_free(&t);
    if (st != WF_OK) return st;
    *jobs = out;
    *n = (int)m;
    return WF_OK;
}
