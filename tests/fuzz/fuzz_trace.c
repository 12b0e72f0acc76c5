/* libFuzzer target for weft-bench's trace reader (--trace: GF-DiT's workload JSON, see
 * loadgen/image.h). The reader takes a path, so each input is written to a scratch file. A
 * read trace must give requests sorted by arrival, each of a valid class of the profile; a
 * failure must name the problem and leave nothing allocated. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loadgen/image.h"
#include "loadgen/profile.h"

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
    wf_loadgen_profile p;
    wf_loadgen_profile_default_classes(&p);
    double *arrival = NULL;
    wf_loadgen_prompt *items = NULL;
    size_t n = 0;
    char err[256] = "";
    if (wf_loadgen_image_trace_read(g_path, &p, &arrival, &items, &n, err, sizeof err) != WF_OK) {
        if (!err[0] || arrival || items || n) abort();
        return 0;
    }
    if (n == 0 || p.n_classes < 1 || p.n_classes > WF_LOADGEN_MAX_IMAGE_CLASSES) abort();
    for (size_t c = 0; c < p.n_classes; c++) {
        const wf_loadgen_image_class *k = &p.classes[c];
        if (k->width < 1 || k->height < 1 || k->steps < 1 || !(k->alpha > 0) ||
            !isfinite(k->alpha) || !(k->t_single_ms >= 0) || !isfinite(k->t_single_ms))
            abort();
    }
    for (size_t i = 0; i < n; i++) {
        if (!(arrival[i] >= 0) || (i && arrival[i] < arrival[i - 1])) abort();
        if (items[i].slo_class < 0 || (size_t)items[i].slo_class >= p.n_classes) abort();
    }
    free(arrival);
    free(items);
    return 0;
}
