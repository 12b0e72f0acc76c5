/* libFuzzer target for weft-bench's image-workload profile reader (sched/workload/workload.h) on any
 * text, and the --image-class and --mix parsers on the same text. A parsed profile must keep
 * the promises of its header (valid classes, phases in time order without overlap, finite
 * non-negative rates), and sampling it must give ascending arrivals inside its phases with
 * classes of weight > 0. A failure must name the problem.
 * weft-fuzz: covers=sched/workload/profile.c */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sched/workload/workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_N 64

static void check_profile(wf_workload_profile *p) {
    if (p->n_classes < 1 || p->n_classes > WF_WORKLOAD_MAX_CLASSES) abort();
    if (p->n_phases < 1 || p->n_phases > WF_WORKLOAD_MAX_PHASES) abort();
    for (size_t c = 0; c < p->n_classes; c++) {
        const wf_workload_class *k = &p->classes[c];
        if (!k->name[0] || k->width < 1 || k->height < 1 || k->steps < 1 || !(k->alpha > 0) ||
            !isfinite(k->alpha))
            abort();
        if (wf_workload_profile_class_index(p, k->name) != (int)c) abort(); /* names unique */
    }
    for (size_t i = 0; i < p->n_phases; i++) {
        const wf_workload_phase *ph = &p->phases[i];
        if (!(ph->start_s >= 0) || !(ph->end_s > ph->start_s) || !(ph->rate >= 0) ||
            !isfinite(ph->rate))
            abort();
        if (i && ph->start_s < p->phases[i - 1].end_s) abort();
        for (size_t c = 0; c < WF_WORKLOAD_MAX_CLASSES; c++)
            if (!(ph->mix[c] >= 0) || (c >= p->n_classes && ph->mix[c] != 0)) abort();
    }
    double arrival[MAX_N];
    int cls[MAX_N];
    size_t n = wf_workload_profile_sample(p, 42, MAX_N, arrival, cls);
    if (n > MAX_N) abort();
    for (size_t j = 0; j < n; j++) {
        if (j && arrival[j] < arrival[j - 1]) abort();
        if (cls[j] < 0 || (size_t)cls[j] >= p->n_classes) abort();
        int in = 0;
        for (size_t i = 0; i < p->n_phases && !in; i++)
            in = arrival[j] >= p->phases[i].start_s && arrival[j] < p->phases[i].end_s &&
                 p->phases[i].mix[cls[j]] > 0;
        if (!in) abort();
    }
    for (size_t c = 0; c < p->n_classes; c++) p->classes[c].t_single_ms = 100.0 * (double)(c + 1);
    double load = wf_workload_profile_offered_load(p, 2);
    if (isnan(load) || load < 0) abort();
    (void)wf_workload_profile_expected_requests(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    text[size] = 0;
    wf_workload_profile p;
    char err[256] = "";
    if (wf_workload_profile_parse(text, "fuzz.profile", &p, err, sizeof err) == WF_OK)
        check_profile(&p);
    else if (!err[0])
        abort();
    wf_workload_class c;
    err[0] = 0;
    if (wf_workload_class_parse(text, &c, err, sizeof err) == WF_OK) {
        wf_workload_profile_default_classes(&p);
        if (wf_workload_profile_set_class(&p, &c) != WF_OK) abort(); /* a parsed class is valid */
    } else if (!err[0]) {
        abort();
    }
    double mix[WF_WORKLOAD_MAX_CLASSES];
    wf_workload_profile_default_classes(&p);
    err[0] = 0;
    if (wf_workload_profile_parse_mix(&p, text, mix, err, sizeof err) == WF_OK) {
        for (size_t k = 0; k < WF_WORKLOAD_MAX_CLASSES; k++)
            if (!(mix[k] >= 0) || !isfinite(mix[k])) abort();
    } else if (!err[0]) {
        abort();
    }
    free(text);
    return 0;
}
