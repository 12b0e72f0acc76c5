/* libFuzzer target for the DiT cost-file reader (sched/dit_cost.h, wf_dit_cost_load, behind
 * weftd --dit-cost and weft-dit-sim --cost) on any bytes. A file it accepts must give a model
 * whose promises hold: at least one point, every point positive and finite with a valid degree
 * and mode, finite non-negative overheads, and finite predictions for every degree it allows.
 * A refusal must name the problem.
 * weft-fuzz: covers=sched/dit_cost.c */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sched/dit_cost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* The reader takes a path: the bytes go to an anonymous in-memory file. */
    int fd = memfd_create("dit-cost", 0);
    if (fd < 0) return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    wf_dit_cost c;
    char err[256] = "";
    wf_status st = wf_dit_cost_load(&c, path, err, sizeof err);
    close(fd);
    if (st != WF_OK) {
        if (st != WF_EFORMAT || !err[0]) abort();
        return 0;
    }
    if (c.n_points < 1 || c.n_points > WF_DIT_COST_MAX_POINTS) abort();
    for (int i = 0; i < c.n_points; i++) {
        const wf_dit_cost_point *p = &c.pts[i];
        if (p->tokens < 1 || p->P < 1 || p->P > WF_DIT_COST_MAX_P || !(p->ms > 0) || !isfinite(p->ms) ||
            (unsigned)p->mode >= WF_DIT_COST_MODES || (p->mode == WF_DIT_COST_CFG && p->P != 2))
            abort();
    }
    if (!(c.chunk_ms >= 0) || !isfinite(c.chunk_ms) || !(c.request_ms >= 0) || !isfinite(c.request_ms)) abort();
    for (int P = 1; P <= WF_DIT_COST_MAX_P; P++) {
        if (!wf_dit_cost_allows(&c, P)) continue;
        for (int tokens = 1; tokens <= 1 << 16; tokens *= 16) {
            double ms = wf_dit_cost_step_ms(&c, tokens, P), g = wf_dit_cost_guided_ms(&c, tokens, P, NULL);
            if (!(ms >= 0) || !isfinite(ms) || !(g >= 0) || !isfinite(g)) abort();
        }
    }
    return 0;
}
