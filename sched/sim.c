/* Discrete-event simulation over the real planning core (see sim.h). */
#include "sched/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/base/log.h"
#include "sched/core.h"
#include "sched/cost_model.h"
#include "sched/defaults.h"
#include "sched/lanes.h"

void wf_sim_config_init(wf_sim_config *c) {
    memset(c, 0, sizeof *c);
    c->policy = "slo";
    c->cost[0] = 10;
    c->cost[1] = 0.1;
    c->cost[2] = 0.5;
    c->cost[3] = 0.0;
    c->max_batch_tokens = 512;
    c->max_running = 64;
    c->n_ctx = 4096;
    c->kv_blocks = 4096;
    c->block_size = 16;
    c->prefix_cache = true;
    c->admission_factor = 0;
    c->prefill_stretch = WF_DEFAULT_PREFILL_STRETCH;
    c->queue_size = 1 << 30;
    c->n_groups = 1;
}

int wf_sim_parse_line(const char *line, wf_sim_request *r) {
    const char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '#' || *p == '\n' || *p == '\r' || *p == '\0') return 0;
    memset(r, 0, sizeof *r);
    char tail[2];
    int got = sscanf(p, "%lf %d %d %lf %lf %d %1s", &r->arrival_ms, &r->prompt_len,
                     &r->output_len, &r->ttft_slo_ms, &r->tpot_slo_ms, &r->priority, tail);
    if (got != 5 && got != 6) return -1;
    if (r->arrival_ms < 0 || r->prompt_len < 1 || r->output_len < 1 || r->ttft_slo_ms <= 0 ||
        r->tpot_slo_ms <= 0 || !isfinite(r->arrival_ms))
        return -1;
    return 1;
}

static int by_arrival(const void *a, const void *b) {
    const wf_sim_request *x = a, *y = b;
    if (x->arrival_ms != y->arrival_ms) return x->arrival_ms < y->arrival_ms ? -1 : 1;
    return 0;
}

wf_status wf_sim_load_workload(const char *path, wf_sim_request **out, int *n, char *err,
                               int errlen) {
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, (size_t)errlen, "%s: cannot open", path);
        return WF_ENOTFOUND;
    }
    wf_sim_request *arr = NULL;
    int count = 0, cap = 0, lineno = 0;
    char line[512];
    wf_status st = WF_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        wf_sim_request r;
        int rc = wf_sim_parse_line(line, &r);
        if (rc == 0) continue;
        if (rc < 0) {
            snprintf(err, (size_t)errlen,
                     "%s:%d: expected \"arrival_ms prompt_len output_len ttft_slo_ms "
                     "tpot_slo_ms [priority]\" with positive values",
                     path, lineno);
            st = WF_EFORMAT;
            goto out;
        }
        if (count == cap) {
            cap = cap ? cap * 2 : 256;
            wf_sim_request *grown = realloc(arr, (size_t)cap * sizeof *grown);
            if (!grown) {
                st = WF_ENOMEM;
                goto out;
            }
            arr = grown;
        }
        arr[count++] = r;
    }
    /* Stable (insertion) sort: equal arrivals keep file order; traces are nearly sorted. */
    for (int i = 1; i < count; i++) {
        wf_sim_request x = arr[i];
        int j = i - 1;
        while (j >= 0 && by_arrival(&x, &arr[j]) < 0) {
            arr[j + 1] = arr[j];
            j--;
        }
        arr[j + 1] = x;
    }
out:
    fclose(f);
    if (st != WF_OK) {
        free(arr);
        return st;
    }
    *out = arr;
    *n = count;
    return WF_OK;
}

typedef struct sim_state {
    const wf_sim_request *reqs;
    wf_sim_outcome *out;
    int n_retired;
} sim_state;

static void sim_token(void *user, wf_request *r, int choice, const wf_generated_token *tok,
                      uint64_t now) {
    (void)user, (void)r, (void)choice, (void)tok, (void)now;
}

static void sim_finished(void *user, wf_request *r, int choice, wf_finish_reason reason,
                         wf_status st, const char *msg, uint64_t now) {
    (void)user, (void)choice, (void)st, (void)msg, (void)now;
    wf_sim_outcome *o = r->user;
    if (reason == WF_FINISH_ERROR) o->failed = true;
}

static void sim_retired(void *user, wf_request *r) {
    sim_state *s = user;
    wf_sim_outcome *o = r->user;
    const wf_sim_request *w = &s->reqs[o - s->out];
    const wf_request_times *t = &r->times;
    o->generated = r->choices[0].n_generated;
    o->preemptions = r->n_preemptions;
    o->e2e_ms = (double)(t->finished_ns - t->queued_ns) / 1e6;
    o->ttft_ms = t->first_token_ns ? (double)(t->first_token_ns - t->queued_ns) / 1e6 : o->e2e_ms;
    o->tpot_ms = o->generated > 1
                     ? (double)(t->finished_ns - t->first_token_ns) / 1e6 / (o->generated - 1)
                     : 0.0;
    o->met_slo = !o->failed && o->ttft_ms <= w->ttft_slo_ms && o->tpot_ms <= w->tpot_slo_ms;
    s->n_retired++;
    wf__request_free(r);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest value with at least p of the data at or below it. */
static void percentiles(double *v, int n, double out[3]) {
    static const double ps[3] = {0.50, 0.90, 0.99};
    if (n == 0) {
        out[0] = out[1] = out[2] = 0;
        return;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    for (int i = 0; i < 3; i++) {
        int k = (int)ceil(ps[i] * n) - 1;
        out[i] = v[k < 0 ? 0 : k];
    }
}

static uint64_t ms_to_ns(double ms) { return (uint64_t)llround(ms * 1e6); }

/* Fills the drawn tokens of a planned batch (the simulator has no model) and returns its
 * predicted duration. */
static uint64_t sim_batch(const wf_cost_model *cost, const wf_core *core, wf_task_batch *b) {
    for (int k = 0; k < b->n_tasks; k++)
        for (int j = 0; j < b->tasks[k].llm.n_samples; j++) {
            wf_task_sample *sm = &b->tasks[k].llm.samples[j];
            memset(&sm->out, 0, sizeof sm->out);
            sm->out.token = 1;
            sm->out_is_eog = false;
        }
    return ms_to_ns(wf_cost_model_predict(cost, core->last_prefill_tokens,
                                          core->last_decode_tokens, core->last_context));
}

wf_status wf_sim_run(const wf_sim_config *cfg, const wf_sim_request *reqs, int n,
                     wf_sim_outcome *outcomes, wf_sim_report *rep) {
    memset(rep, 0, sizeof *rep);
    const wf_sched_policy *pol = wf_sched_policy_find(cfg->policy);
    int n_groups = cfg->n_groups > 0 ? cfg->n_groups : 1;
    if (!pol || n < 0 || n_groups > WF_LANES_MAX) return WF_EINVAL;
    wf_sim_outcome *out = outcomes ? outcomes : calloc((size_t)(n > 0 ? n : 1), sizeof *out);
    double *vals = malloc((size_t)(n > 0 ? n : 1) * sizeof *vals);
    int32_t *prompt = NULL;
    wf_kv_pool *pools[WF_LANES_MAX] = {0};
    uint64_t busy_until[WF_LANES_MAX] = {0};
    wf_lanes lanes;
    wf_lanes_init(&lanes);
    wf_status st = WF_ENOMEM;
    if (!out || !vals) goto done;
    memset(out, 0, (size_t)n * sizeof *out);
    sim_state ss = {reqs, out, 0};
    wf_cost_model cost;
    wf_cost_model_init(&cost, cfg->cost);
    /* Each group: its own pool and core, as weftd's groups (sched/lanes.h). */
    for (int g = 0; g < n_groups; g++) {
        if ((st = wf_kv_pool_new(cfg->kv_blocks, cfg->block_size, cfg->prefix_cache, &pools[g])) !=
            WF_OK)
            goto done;
        wf_core_config cc = {.policy = pol,
                             .max_batch_tokens = cfg->max_batch_tokens,
                             .max_running = cfg->max_running,
                             .n_ctx = cfg->n_ctx,
                             .pool = pools[g],
                             .store = NULL,
                             .group = {.n_ranks = 1, .ranks = {g}},
                             .cost = &cost,
                             .prefill_stretch = cfg->prefill_stretch,
                             .cb = {sim_token, sim_finished, sim_retired, NULL, &ss}};
        int id;
        if ((st = wf_lanes_add(&lanes, &cc, &id)) != WF_OK) goto done;
    }
    int max_prompt = 1;
    for (int i = 0; i < n; i++)
        if (reqs[i].prompt_len > max_prompt) max_prompt = reqs[i].prompt_len;
    prompt = malloc((size_t)max_prompt * sizeof *prompt);
    if (!prompt) {
        st = WF_ENOMEM;
        goto done;
    }
    uint64_t now = 0, first_arrival = n > 0 ? ms_to_ns(reqs[0].arrival_ms) : 0, last_end = 0;
    int next = 0, idle_plans = 0;
    for (;;) {
        bool busy = false;
        for (int g = 0; g < lanes.n; g++) busy |= lanes.lane[g]->busy;
        if (next >= n && wf_lanes_n_requests(&lanes) == 0 && !busy) break;
        /* Batches that ended by now report first (in group order: deterministic). */
        for (int g = 0; g < lanes.n; g++) {
            wf_lane *ln = lanes.lane[g];
            if (!ln->busy || busy_until[g] > now) continue;
            ln->busy = false;
            wf_core_complete(&ln->core, WF_OK, NULL, busy_until[g]);
            if (busy_until[g] > last_end) last_end = busy_until[g];
        }
        while (next < n && ms_to_ns(reqs[next].arrival_ms) <= now) {
            const wf_sim_request *w = &reqs[next];
            /* Distinct prompts (no accidental prefix sharing): token k of request i. */
            for (int k = 0; k < w->prompt_len; k++) prompt[k] = (int32_t)((next * 7919 + k) % 50000);
            wf_request_spec spec;
            wf_request_spec_init(&spec);
            spec.prompt = prompt;
            spec.n_prompt = w->prompt_len;
            spec.max_tokens = w->output_len;
            spec.ignore_eos = true;
            spec.priority = w->priority;
            snprintf(spec.id, sizeof spec.id, "sim-%d", next);
            if (cfg->admission_factor > 0) {
                wf_admission adm = {.cost = &cost, .max_batch_tokens = cfg->max_batch_tokens,
                                    .queue_size = cfg->queue_size,
                                    .factor = cfg->admission_factor,
                                    .explicit_slo = true, /* workload lines name their SLO */
                                    .n_groups = wf_lanes_n_live(&lanes)};
                /* Predict in the policy's order: only work it would serve first counts. */
                wf_request probe;
                memset(&probe, 0, sizeof probe);
                probe.serial = UINT64_MAX;
                probe.spec.priority = w->priority;
                probe.times.queued_ns = ms_to_ns(w->arrival_ms);
                probe.ttft_ms = w->ttft_slo_ms;
                probe.tpot_ms = w->tpot_slo_ms;
                wf_lanes_get_load_ahead(&lanes, &probe, &adm.load);
                double retry;
                char msg[160];
                if (wf_core_admit(&adm, w->prompt_len, w->ttft_slo_ms, &retry, NULL, msg,
                                  (int)sizeof msg) != WF_OK) {
                    out[next].rejected = true;
                    next++;
                    continue;
                }
            }
            wf_request *r;
            if (w->prompt_len >= cfg->n_ctx ||
                wf__request_new(&spec, cfg->n_ctx, cfg->block_size, (uint64_t)next, &r) != WF_OK) {
                out[next].failed = true;
                next++;
                continue;
            }
            r->ttft_ms = w->ttft_slo_ms;
            r->tpot_ms = w->tpot_slo_ms;
            r->user = &out[next];
            r->times.queued_ns = ms_to_ns(w->arrival_ms);
            if (wf_lanes_add_request(&lanes, r, now) != WF_OK) {
                wf__request_free(r);
                out[next].failed = true;
            }
            next++;
        }
        /* One batch per idle group. */
        busy = false;
        bool planned_empty = false;
        for (int g = 0; g < lanes.n; g++) {
            wf_lane *ln = lanes.lane[g];
            if (wf_lanes_can_plan(&lanes, g)) {
                wf_task_batch *b = wf_core_plan(&ln->core, now);
                if (b->n_tasks > 0) {
                    busy_until[g] = now + sim_batch(&cost, &ln->core, b);
                    ln->busy = true;
                } else {
                    planned_empty = true;
                }
            }
            busy |= ln->busy;
        }
        uint64_t next_arrival = next < n ? ms_to_ns(reqs[next].arrival_ms) : UINT64_MAX;
        if (busy) {
            idle_plans = 0;
            uint64_t t = next_arrival;
            for (int g = 0; g < lanes.n; g++)
                if (lanes.lane[g]->busy && busy_until[g] < t) t = busy_until[g];
            if (t > now) now = t;
            continue;
        }
        if (wf_lanes_n_requests(&lanes) == 0) {
            if (next < n) now = next_arrival;
            continue;
        }
        /* Nothing runs although work exists. Transient (a request preempted this iteration
         * is readmitted by the next plan); repeated empty plans mean nothing can progress
         * until the next arrival. */
        if (planned_empty && ++idle_plans >= 3) {
            idle_plans = 0;
            if (next < n) now = next_arrival;
            else wf_lanes_abort_all(&lanes, WF_FINISH_ERROR, WF_EFULL, "does not fit", now);
        }
    }
    for (int g = 0; g < lanes.n; g++) {
        rep->iterations += lanes.lane[g]->core.iteration;
        rep->preemptions += lanes.lane[g]->core.preempted_total;
    }
    wf_lanes_free(&lanes, now); /* retires nothing: every request ended */
    rep->n_requests = n;
    rep->makespan_ms = n > 0 ? (double)(last_end - first_arrival) / 1e6 : 0;
    int met = 0, k;
    double tokens = 0;
    for (int i = 0; i < n; i++) {
        met += out[i].met_slo;
        rep->n_failed += out[i].failed;
        rep->n_rejected += out[i].rejected;
        tokens += out[i].generated;
    }
    rep->slo_attainment = n > 0 ? (double)met / n : 0;
    rep->goodput_rps = rep->makespan_ms > 0 ? met / (rep->makespan_ms / 1000.0) : 0;
    rep->throughput_tok_s = rep->makespan_ms > 0 ? tokens / (rep->makespan_ms / 1000.0) : 0;
    k = 0;
    for (int i = 0; i < n; i++)
        if (!out[i].failed && !out[i].rejected) vals[k++] = out[i].ttft_ms;
    percentiles(vals, k, rep->ttft_ms);
    k = 0;
    for (int i = 0; i < n; i++)
        if (!out[i].failed && !out[i].rejected && out[i].generated > 1) vals[k++] = out[i].tpot_ms;
    percentiles(vals, k, rep->tpot_ms);
    k = 0;
    for (int i = 0; i < n; i++)
        if (!out[i].failed && !out[i].rejected) vals[k++] = out[i].e2e_ms;
    percentiles(vals, k, rep->e2e_ms);
    st = WF_OK;
done:
    wf_lanes_free(&lanes, 0);
    for (int g = 0; g < WF_LANES_MAX; g++) wf_kv_pool_free(pools[g]);
    free(prompt);
    free(vals);
    if (out != outcomes) free(out);
    return st;
}
