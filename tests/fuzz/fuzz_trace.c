/* libFuzzer target for the trace reader of weft-bench's --trace and weft-dit-sim's --trace
 * (GF-DiT's workload JSON, sched/workload/workload.h). The reader takes a path, so each input is written to a scratch file. A
 * read trace must give requests sorted by arrival, each of a valid class of the profile; a
 * failure must name the problem and leave nothing allocated.
 * weft-fuzz: covers=sched/workload/trace.c */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/workload/workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_path[64];

static void cleanup(void) { unlink(g_path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_path[0]) {
        snprintf(g_path, sizeof g_path, "/tmp/weft_fuzz_trace_XXXXXX");
        int fd = mkstemp(g_path);
        if (fd < 0) abort();
        close(fd);
        atexit(cleanup);
    }
    FILE *f = fopen(g_path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size)) abort();
    fclose(f);
    wf_workload_profile p;
    wf_workload_profile_default_classes(&p);
    wf_workload_trace t;
    char err[256] = "";
    if (wf_workload_trace_read(g_path, &p, &t, err, sizeof err) != WF_OK) {
        if (!err[0] || t.arrival_s || t.class_idx || t.seed || t.n) abort();
        return 0;
    }
    if (t.n == 0 || p.n_classes < 1 || p.n_classes > WF_WORKLOAD_MAX_CLASSES) abort();
    for (size_t c = 0; c < p.n_classes; c++) {
        const wf_workload_class *k = &p.classes[c];
        if (k->width < 1 || k->height < 1 || k->steps < 1 || !(k->alpha > 0) ||
            !isfinite(k->alpha) || !(k->t_single_ms >= 0) || !isfinite(k->t_single_ms))
            abort();
    }
    for (size_t i = 0; i < t.n; i++) {
        if (!(t.arrival_s[i] >= 0) || (i && t.arrival_s[i] < t.arrival_s[i - 1])) abort();
        if (t.class_idx[i] < 0 || (size_t)t.class_idx[i] >= p.n_classes) abort();
        if (t.seed[i] < -1 || t.seed[i] > 0x7FFFFFFF) abort();
    }
    wf_workload_trace_free(&t);
    return 0;
}
