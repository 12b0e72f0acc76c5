/* Several groups, one planning core each: routing, group death (see lanes.h). */
#include "sched/lanes.h"

#include <stdlib.h>
#include <string.h>

void wf_lanes_init(wf_lanes *l) { memset(l, 0, sizeof *l); }

static bool lane_reusable(const wf_lane *ln) {
    return !ln->live && !ln->busy && wf_core_n_requests(&ln->core) == 0;
}

int wf_lanes_free_slot(const wf_lanes *l) {
    for (int i = 0; i < l->n; i++)
        if (lane_reusable(l->lane[i])) return i;
    return l->n < WF_LANES_MAX ? l->n : -1;
}

wf_status wf_lanes_add_at(wf_lanes *l, int slot, const wf_core_config *cfg) {
    if (slot < 0 || slot > l->n || slot >= WF_LANES_MAX || (slot < l->n && !lane_reusable(l->lane[slot])))
        return WF_EINVAL;
    wf_lane *ln = calloc(1, sizeof *ln);
    if (!ln) return WF_ENOMEM;
    wf_status st = wf_core_init(&ln->core, cfg);
    if (st != WF_OK) {
        free(ln);
        return st;
    }
    ln->id = slot;
    ln->live = true;
    /* Ids unique across lanes, also across the lanes one slot held over time: the count of
     * lanes made in the top bits (2^40 ids per lane, 2^24 lanes). */
    uint64_t base = (l->n_made++ & 0xffffffull) << 40;
    ln->core.next_task_id = base + 1;
    ln->core.next_seq_id = base + 1;
    if (slot < l->n) {
        wf_core_free(&l->lane[slot]->core, 0); /* empty: nothing to retire */
        free(l->lane[slot]);
    } else {
        l->n++;
    }
    l->lane[slot] = ln;
    return WF_OK;
}

wf_status wf_lanes_add(wf_lanes *l, const wf_core_config *cfg, int *out_id) {
    int slot = wf_lanes_free_slot(l);
    if (slot < 0) return WF_EFULL;
    wf_status st = wf_lanes_add_at(l, slot, cfg);
    if (st == WF_OK) *out_id = slot;
    return st;
}

void wf_lanes_free(wf_lanes *l, uint64_t now) {
    for (int i = 0; i < l->n; i++) {
        wf_core_free(&l->lane[i]->core, now);
        free(l->lane[i]);
    }
    memset(l, 0, sizeof *l);
}

static bool lane_fits(const wf_lane *ln, const wf_request *r) {
    const wf_kv_pool *pool = ln->core.cfg.pool;
    int bs = wf_kv_pool_block_size(pool);
    /* The request's block tables were sized for some block size: this lane's must need no
     * more entries for the context. */
    if ((ln->core.cfg.n_ctx + bs - 1) / bs > r->choices[0].kv.max_blocks) return false;
    return wf_kv_pool_can_hold(pool, r->spec.n_prompt + 1);
}

static int lane_load(const wf_lane *ln) { return ln->core.n_running + ln->core.n_waiting; }

int wf_lanes_route(const wf_lanes *l, const wf_request *r) {
    int min_load = -1;
    for (int i = 0; i < l->n; i++) {
        const wf_lane *ln = l->lane[i];
        if (!ln->live || !lane_fits(ln, r)) continue;
        if (min_load < 0 || lane_load(ln) < min_load) min_load = lane_load(ln);
    }
    if (min_load < 0) return -1;
    int best = -1, best_match = -1, best_load = 0, best_free = 0;
    for (int i = 0; i < l->n; i++) {
        const wf_lane *ln = l->lane[i];
        if (!ln->live || !lane_fits(ln, r)) continue;
        int load = lane_load(ln);
        if (load > 2 * min_load + 2) continue; /* affinity must not pile work on one group */
        int match = wf_kv_pool_cached_prefix(ln->core.cfg.pool, r->spec.prefix_salt, r->spec.prompt, r->spec.n_prompt);
        int avail = wf_kv_pool_available(ln->core.cfg.pool);
        bool better = best < 0 || match > best_match ||
                      (match == best_match &&
                       (load < best_load || (load == best_load && avail > best_free)));
        if (better) {
            best = i;
            best_match = match;
            best_load = load;
            best_free = avail;
        }
    }
    return best;
}

wf_status wf_lanes_add_request(wf_lanes *l, wf_request *r, uint64_t now) {
    int g = wf_lanes_route(l, r);
    if (g < 0) return WF_ECLOSED;
    if (!r->serial) r->serial = ++l->next_serial;
    return wf_core_add(&l->lane[g]->core, r, now);
}

void wf_lanes_down(wf_lanes *l, int id, wf_status status, const char *message, uint64_t now) {
    if (id < 0 || id >= l->n) return;
    wf_lane *ln = l->lane[id];
    ln->live = false;
    ln->busy = false;
    int n = wf_core_n_requests(&ln->core);
    wf_request *stack_out[64];
    wf_request **out = n <= 64 ? stack_out : malloc((size_t)n * sizeof *out);
    if (!out) {
        /* No room to move them: they fail, which still tells every client. */
        wf_core_abort_all(&ln->core, WF_FINISH_ERROR, status, message, now);
        return;
    }
    int moved = wf_core_evict(&ln->core, status, message, now, out);
    for (int i = 0; i < moved; i++) {
        wf_request *r = out[i];
        if (wf_lanes_add_request(l, r, now) == WF_OK) {
            l->rerouted_total++;
            continue;
        }
        /* No live lane can take it: it fails on the lane it came from (which retires it). */
        if (wf_core_add(&ln->core, r, now) == WF_OK) continue;
        /* Cannot even be put back (out of memory): it is lost to the core; the owner's
         * retired callback never sees it. Not expected: wf_core_add only grows arrays that
         * already held it. */
    }
    wf_core_abort_all(&ln->core, WF_FINISH_ERROR, status, message, now);
    if (out != stack_out) free(out);
}

bool wf_lanes_can_plan(const wf_lanes *l, int id) {
    const wf_lane *ln = l->lane[id];
    return ln->live && !ln->busy && wf_core_n_requests(&ln->core) > 0;
}

int wf_lanes_n_requests(const wf_lanes *l) {
    int n = 0;
    for (int i = 0; i < l->n; i++) n += wf_core_n_requests(&l->lane[i]->core);
    return n;
}

int wf_lanes_n_live(const wf_lanes *l) {
    int n = 0;
    for (int i = 0; i < l->n; i++) n += l->lane[i]->live;
    return n;
}

void wf_lanes_get_load(const wf_lanes *l, wf_core_load *out) { wf_lanes_get_load_ahead(l, NULL, out); }

void wf_lanes_get_load_ahead(const wf_lanes *l, const wf_request *probe, wf_core_load *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < l->n; i++) {
        if (!l->lane[i]->live) continue;
        wf_core_load x;
        wf_core_get_load_ahead(&l->lane[i]->core, probe, &x);
        out->pending_prefill_tokens += x.pending_prefill_tokens;
        out->pending_prefill_attention += x.pending_prefill_attention;
        out->n_waiting += x.n_waiting;
        out->n_decode += x.n_decode;
        out->decode_context += x.decode_context;
    }
}

void wf_lanes_abort_all(wf_lanes *l, wf_finish_reason reason, wf_status status,
                        const char *message, uint64_t now) {
    for (int i = 0; i < l->n; i++)
        wf_core_abort_all(&l->lane[i]->core, reason, status, message, now);
}
