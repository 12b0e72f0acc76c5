/* Prometheus text exposition (version 0.0.4) of wf_metrics plus scheduler gauges. */
#include "server/metrics.h"

#include "proto/base/clock.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const double latency_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                        0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double itl_bounds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                    0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double len_bounds[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
                                    20000, 50000, 100000};
static const int status_codes[WF_METRICS_N_STATUS] = {200, 400, 401, 404, 405, 408, 413,
                                                      429, 431, 500, 501, 503, 505, 415};

#define SET_BOUNDS(h, b)                                  \
    do {                                                  \
        (h).bounds = (b);                                 \
        (h).n_bounds = (int)(sizeof(b) / sizeof((b)[0])); \
    } while (0)

void wf_metrics_init(wf_metrics *m) {
    memset(m, 0, sizeof *m);
    SET_BOUNDS(m->ttft, latency_bounds);
    SET_BOUNDS(m->e2e, latency_bounds);
    SET_BOUNDS(m->queue, latency_bounds);
    SET_BOUNDS(m->prefill, latency_bounds);
    SET_BOUNDS(m->decode, latency_bounds);
    SET_BOUNDS(m->itl, itl_bounds);
    SET_BOUNDS(m->tpot, itl_bounds);
    SET_BOUNDS(m->prompt_len, len_bounds);
    SET_BOUNDS(m->gen_len, len_bounds);
    for (int i = 0; i < WF_METRICS_MAX_IMAGE_MODELS; i++)
        for (int k = 0; k <= WF_SLO_CLASSES; k++) {
            SET_BOUNDS(m->image[i][k].e2e, latency_bounds);
            SET_BOUNDS(m->image[i][k].queue, latency_bounds);
        }
}

wf_image_class_metrics *wf_metrics_image_class(wf_metrics *m, int model, int priority) {
    if (model < 0 || model >= WF_METRICS_MAX_IMAGE_MODELS) return NULL;
    wf_image_class_metrics *c = m->image[model];
    for (int k = 0; k < WF_SLO_CLASSES; k++) {
        if (c[k].used && c[k].priority == priority) return &c[k];
        if (!c[k].used) {
            c[k].used = true;
            c[k].priority = priority;
            return &c[k];
        }
    }
    c[WF_SLO_CLASSES].used = true;
    return &c[WF_SLO_CLASSES];
}

void wf_histogram_observe(wf_histogram *h, double v) {
    if (!isfinite(v)) return;
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i]) i++;
    if (i < h->n_bounds) h->buckets[i]++;
    h->count++;
    h->sum += v;
}

void wf_metrics_count_status(wf_metrics *m, int status) {
    for (int i = 0; i < WF_METRICS_N_STATUS; i++)
        if (status_codes[i] == status) {
            m->http_status[i]++;
            return;
        }
    m->http_status[WF_METRICS_N_STATUS]++;
}

/* Label values are escaped per the exposition format (backslash, quote, newline). */
static void label_value(wf_jbuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '\\') wf_jbuf_cstr(b, "\\\\");
        else if (*s == '"') wf_jbuf_cstr(b, "\\\"");
        else if (*s == '\n') wf_jbuf_cstr(b, "\\n");
        else wf_jbuf_raw(b, s, 1);
    }
}

static void header(wf_jbuf *b, const char *name, const char *type, const char *help) {
    wf_jbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u(wf_jbuf *b, const char *name, const char *model, const char *extra,
                     uint64_t v) {
    wf_jbuf_printf(b, "%s{model_name=\"", name);
    label_value(b, model);
    wf_jbuf_printf(b, "\"%s} %llu\n", extra ? extra : "", (unsigned long long)v);
}

static void sample_d(wf_jbuf *b, const char *name, const char *model, double v) {
    wf_jbuf_printf(b, "%s{model_name=\"", name);
    label_value(b, model);
    wf_jbuf_printf(b, "\"} %.17g\n", v);
}

static void counter(wf_jbuf *b, const char *name, const char *help, const char *model, uint64_t v) {
    header(b, name, "counter", help);
    sample_u(b, name, model, NULL, v);
}

static void gauge(wf_jbuf *b, const char *name, const char *help, const char *model, double v) {
    header(b, name, "gauge", help);
    sample_d(b, name, model, v);
}

/* One histogram's samples; extra: more labels (",priority=\"1\"") or NULL. */
static void histogram_samples(wf_jbuf *b, const char *name, const char *model, const char *extra,
                              const wf_histogram *h) {
    if (!extra) extra = "";
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->buckets[i];
        wf_jbuf_printf(b, "%s_bucket{le=\"%g\",model_name=\"", name, h->bounds[i]);
        label_value(b, model);
        wf_jbuf_printf(b, "\"%s} %llu\n", extra, (unsigned long long)cum);
    }
    wf_jbuf_printf(b, "%s_bucket{le=\"+Inf\",model_name=\"", name);
    label_value(b, model);
    wf_jbuf_printf(b, "\"%s} %llu\n", extra, (unsigned long long)h->count);
    wf_jbuf_printf(b, "%s_sum{model_name=\"", name);
    label_value(b, model);
    wf_jbuf_printf(b, "\"%s} %.17g\n", extra, h->sum);
    char n[128];
    snprintf(n, sizeof n, "%s_count", name);
    sample_u(b, n, model, extra, h->count);
}

static void histogram(wf_jbuf *b, const char *name, const char *help, const char *model,
                      const wf_histogram *h) {
    header(b, name, "histogram", help);
    histogram_samples(b, name, model, NULL, h);
}

/* Per-group state: one series per group, labelled group and rank. */
static void group_series(wf_jbuf *b, const char *model, const wf_sched_stats *st) {
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"weft:group_up", "gauge", "1 while the device group is live."},
        {"weft:group_requests_running", "gauge", "Requests running on the group."},
        {"weft:group_requests_waiting", "gauge", "Requests bound to the group, waiting."},
        {"weft:group_kv_blocks_used", "gauge", "KV blocks in use on the group."},
        {"weft:group_kv_blocks_total", "gauge", "KV blocks of the group."},
        {"weft:group_kv_swa_blocks_used", "gauge", "Sliding-window layers' KV blocks in use on the group (split stores; 0 otherwise)."},
        {"weft:group_kv_swa_blocks_total", "gauge", "Sliding-window layers' KV blocks of the group (split stores; 0 otherwise)."},
        {"weft:group_batches_in_flight", "gauge", "Batches dispatched to the group, not done."},
        {"weft:group_iterations_total", "counter", "Batches the group completed."},
        {"weft:group_failed_batches_total", "counter", "Batches of the group that failed."},
    };
    int n = st->n_groups < WF_SCHED_STATS_GROUPS ? st->n_groups : WF_SCHED_STATS_GROUPS;
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        header(b, fam[f].name, fam[f].type, fam[f].help);
        for (int i = 0; i < n; i++) {
            const wf_sched_group_stats *g = &st->groups[i];
            uint64_t v[] = {g->live, (uint64_t)g->running, (uint64_t)g->waiting,
                            (uint64_t)g->kv_blocks_used, (uint64_t)g->kv_blocks_total,
                            (uint64_t)g->kv_swa_blocks_used, (uint64_t)g->kv_swa_blocks_total,
                            (uint64_t)g->batches_in_flight, g->iterations, g->failed_batches};
            char extra[64];
            snprintf(extra, sizeof extra, ",group=\"%d\",rank=\"%d\"", g->id, g->rank);
            sample_u(b, fam[f].name, model, extra, v[f]);
        }
    }
}

static void render_slo(const wf_metrics *m, const char *model, wf_jbuf *b);

void wf_metrics_render(const wf_metrics *m, const char *model, const wf_sched_stats *st,
                       wf_jbuf *b) {
    gauge(b, "weft:num_requests_running", "Requests in the decode batch.", model, st ? st->running : 0);
    gauge(b, "weft:num_requests_waiting", "Requests waiting to be scheduled.", model, st ? st->waiting : 0);
    gauge(b, "weft:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full).", model,
          st ? st->kv_usage : 0);
    counter(b, "weft:num_preemptions_total", "Preemptions by the scheduler.", model,
            st ? (uint64_t)st->preempted_total : 0);
    counter(b, "weft:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            model, st ? st->prefix_queries : 0);
    counter(b, "weft:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", model,
            st ? st->prefix_hits : 0);
    gauge(b, "weft:iteration_time_ms_avg", "Recent average scheduler iteration time.", model,
          st ? st->iteration_ms_avg : 0);
    counter(b, "weft:prompt_tokens_total", "Prefill tokens processed.", model, m->prompt_tokens);
    counter(b, "weft:generation_tokens_total", "Generation tokens processed.", model,
            m->generation_tokens);
    header(b, "weft:request_success_total", "counter", "Finished requests by finish reason.");
    sample_u(b, "weft:request_success_total", model, ",finished_reason=\"stop\"", m->success_stop);
    sample_u(b, "weft:request_success_total", model, ",finished_reason=\"length\"", m->success_length);
    sample_u(b, "weft:request_success_total", model, ",finished_reason=\"abort\"", m->success_abort);
    counter(b, "weft:request_failure_total", "Requests that ended with an error.", model,
            m->success_error);
    header(b, "weft:http_requests_total", "counter", "HTTP responses by status code.");
    for (int i = 0; i <= WF_METRICS_N_STATUS; i++) {
        char extra[40];
        if (i < WF_METRICS_N_STATUS) snprintf(extra, sizeof extra, ",status=\"%d\"", status_codes[i]);
        else snprintf(extra, sizeof extra, ",status=\"other\"");
        sample_u(b, "weft:http_requests_total", model, extra, m->http_status[i]);
    }
    header(b, "weft:request_rejected_total", "counter", "Requests refused by admission control or a full queue.");
    sample_u(b, "weft:request_rejected_total", model, ",reason=\"overload\"", m->requests_rejected_overload);
    sample_u(b, "weft:request_rejected_total", model, ",reason=\"full\"", m->requests_rejected_full);
    histogram(b, "weft:time_to_first_token_seconds", "Time to first token.", model, &m->ttft);
    histogram(b, "weft:inter_token_latency_seconds", "Time between consecutive tokens.", model, &m->itl);
    histogram(b, "weft:time_per_output_token_seconds", "Mean time per output token after the first, per request.",
              model, &m->tpot);
    histogram(b, "weft:e2e_request_latency_seconds", "End-to-end request latency.", model, &m->e2e);
    histogram(b, "weft:request_queue_time_seconds", "Time spent waiting in the queue.", model, &m->queue);
    histogram(b, "weft:request_prefill_time_seconds", "Time from scheduling to the first token.", model,
              &m->prefill);
    histogram(b, "weft:request_decode_time_seconds", "Time from the first to the last token.", model,
              &m->decode);
    histogram(b, "weft:request_prompt_tokens", "Prompt length of requests.", model, &m->prompt_len);
    histogram(b, "weft:request_generation_tokens", "Generated tokens per request.", model, &m->gen_len);
    render_slo(m, model, b);
    if (st) group_series(b, model, st);
}

static const char *const codec_reason_names[4] = {"compress", "link_fast", "no_profile", "cooling"};

void wf_metrics_render_ranks(const wf_server_rank *r, int n, const char *model, const char *dit_model, wf_jbuf *b) {
    if (!dit_model) dit_model = model;
    header(b, "weft:kv_codec_decisions_total", "counter",
           "The prefill worker's KV controller decisions by reason (compress: a profile is predicted "
           "faster; link_fast: B >= B* of every eligible profile; no_profile: none meets kv_accuracy; "
           "cooling: the eligible ones are cooling down).");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            char extra[96];
            snprintf(extra, sizeof extra, ",rank=\"%d\",role=\"%s\",reason=\"%s\"", r[i].rank,
                     r[i].role[0] ? r[i].role : "worker", codec_reason_names[k]);
            sample_u(b, "weft:kv_codec_decisions_total", model, extra, r[i].codec_reasons[k]);
        }
    const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"weft:worker_up", "gauge", "1 while the worker rank serves (weftd --workers)."},
        {"weft:worker_batches_total", "counter", "Batches the worker rank completed."},
        {"weft:worker_restarts_total", "counter", "Times the worker rank's process was replaced."},
        {"weft:worker_last_heartbeat_seconds", "gauge", "Seconds since the worker rank was last heard."},
        {"weft:worker_kv_blocks_used", "gauge", "KV blocks the worker itself holds (a prefill worker's scratch blocks; 0 when idle)."},
        {"weft:kv_transfers_total", "counter", "KV transfers the prefill worker shipped to decode workers."},
        {"weft:kv_transfer_failures_total", "counter", "KV transfers that failed (the decode worker died or stalled)."},
        {"weft:kv_transfer_bytes_total", "counter", "KV bytes the prefill worker put into decode workers' memory."},
        {"weft:kv_transfer_seconds_total", "counter", "Time spent shipping KV (puts until complete at the target)."},
        {"weft:kv_transfers_compressed_total", "counter", "KV transfers sent through a codec profile (the controller's choice or --kv-codec)."},
        {"weft:worker_dit_chunks_total", "counter", "DiT DENOISE chunks the worker rank ran (a multi-rank chunk counts on each member)."},
        {"weft:worker_dit_cfg_chunks_total", "counter", "Of those, chunks run guidance-parallel (conditional and unconditional passes on two ranks)."},
        {"weft:worker_dit_reshards_total", "counter", "DiT latent reshards in which the worker rank sent rows to other workers (a chunk boundary that changed the group)."},
        {"weft:worker_dit_latent_mid_rank0_bytes_total", "counter", "DiT latent bytes between rank 0 and the worker rank in mid-trajectory (between two chunks; 0 while latents stay on workers)."},
        {"weft:worker_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefill worker's own prefix cache (prefill/decode roles)."},
        {"weft:worker_prefix_cache_hits_total", "counter", "Of those, tokens found: their KV was not computed again, only shipped."},
        {"weft:kv_layers_overlapped_total", "counter", "Layers of KV on their way to a decode worker before the prefill that computed them ended (the layer overlap)."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        header(b, fam[f].name, fam[f].type, fam[f].help);
        for (int i = 0; i < n; i++) {
            char extra[64];
            snprintf(extra, sizeof extra, ",rank=\"%d\",role=\"%s\"", r[i].rank,
                     r[i].role[0] ? r[i].role : "worker");
            if (f == 3 || f == 8) {
                wf_jbuf_printf(b, "%s{model_name=\"", fam[f].name);
                label_value(b, model);
                wf_jbuf_printf(b, "\"%s} %.3f\n", extra,
                               f == 3 ? r[i].last_heard_ms / 1e3 : r[i].transfer_ms / 1e3);
                continue;
            }
            uint64_t v[] = {r[i].live, r[i].batches, (uint64_t)r[i].restarts, 0, r[i].kv_blocks_used,
                            r[i].transfers, r[i].transfers_failed, r[i].transfer_bytes, 0,
                            r[i].transfers_compressed, r[i].dit_chunks, r[i].dit_cfg_chunks,
                            r[i].dit_reshards, r[i].dit_mid_home_bytes, r[i].prefix_queries,
                            r[i].prefix_hits, r[i].kv_layers_early};
            /* The DiT families (10-13) count the DiT's chunks: its name, not the LLM's. */
            sample_u(b, fam[f].name, f >= 10 && f <= 13 ? dit_model : model, extra, v[f]);
        }
    }
    /* One family, a sample per rank and path: worker to worker, from rank 0, to rank 0. */
    static const char *const paths[] = {"worker", "from_rank0", "to_rank0"};
    header(b, "weft:worker_dit_latent_bytes_total", "counter",
           "DiT latent bytes moved, per path: sent by the worker rank to other workers (reshards), from rank 0 to it, from it to rank 0.");
    for (int i = 0; i < n; i++)
        for (int q = 0; q < 3; q++) {
            char extra[96];
            snprintf(extra, sizeof extra, ",rank=\"%d\",role=\"%s\",path=\"%s\"", r[i].rank,
                     r[i].role[0] ? r[i].role : "worker", paths[q]);
            uint64_t v[] = {r[i].dit_reshard_bytes, r[i].dit_from_home_bytes, r[i].dit_to_home_bytes};
            sample_u(b, "weft:worker_dit_latent_bytes_total", dit_model, extra, v[q]);
        }
}

static void slo_count(wf_slo_class *c, bool ttft_met, bool tpot_met, int64_t sec) {
    c->finished++;
    c->ttft_met += ttft_met;
    c->tpot_met += tpot_met;
    c->met += ttft_met && tpot_met;
    int i = (int)(sec % WF_SLO_WINDOW_S);
    if (c->win[i].sec != sec) {
        c->win[i].sec = sec;
        c->win[i].finished = c->win[i].met = 0;
    }
    c->win[i].finished++;
    c->win[i].met += ttft_met && tpot_met;
}

void wf_metrics_observe_slo(wf_metrics *m, int priority, bool ttft_met, bool tpot_met, uint64_t now_ns) {
    int64_t sec = (int64_t)(now_ns / 1000000000ull);
    slo_count(&m->slo_all, ttft_met, tpot_met, sec);
    for (int i = 0; i < WF_SLO_CLASSES; i++) {
        wf_slo_class *c = &m->slo[i];
        if (!c->used) {
            c->used = true;
            c->priority = priority;
        }
        if (c->priority == priority) {
            slo_count(c, ttft_met, tpot_met, sec);
            return;
        }
    }
}

void wf_slo_class_window(const wf_slo_class *c, uint64_t now_ns, uint32_t *finished, uint32_t *met) {
    int64_t now = (int64_t)(now_ns / 1000000000ull);
    *finished = *met = 0;
    for (int i = 0; i < WF_SLO_WINDOW_S; i++)
        if (c->win[i].sec > now - WF_SLO_WINDOW_S && c->win[i].sec <= now) {
            *finished += c->win[i].finished;
            *met += c->win[i].met;
        }
}

/* weft:slo_* families: counters since start and gauges over the window, overall and by
 * priority. */
static void render_slo(const wf_metrics *m, const char *model, wf_jbuf *b) {
    const wf_slo_class *cls[WF_SLO_CLASSES + 1];
    int n = 0;
    cls[n++] = &m->slo_all;
    for (int i = 0; i < WF_SLO_CLASSES; i++)
        if (m->slo[i].used) cls[n++] = &m->slo[i];
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"weft:slo_requests_total", "counter", "Finished sequences judged against their SLO (TTFT and TPOT targets)."},
        {"weft:slo_met_total", "counter", "Finished sequences that met both their TTFT and TPOT targets (good requests)."},
        {"weft:slo_ttft_met_total", "counter", "Finished sequences that met their TTFT target."},
        {"weft:slo_tpot_met_total", "counter", "Finished sequences that met their TPOT target."},
        {"weft:slo_attainment_ratio", "gauge", "Share of sequences finished in the last 60 s that met both targets."},
        {"weft:goodput_requests_per_second", "gauge", "Sequences meeting both targets per second, over the last 60 s."},
    };
    uint64_t now = wf_clock_now_ns();
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        header(b, fam[f].name, fam[f].type, fam[f].help);
        for (int i = 0; i < n; i++) {
            char extra[48];
            if (i == 0) snprintf(extra, sizeof extra, ",priority=\"all\"");
            else snprintf(extra, sizeof extra, ",priority=\"%d\"", cls[i]->priority);
            const wf_slo_class *c = cls[i];
            if (f < 4) {
                uint64_t v[] = {c->finished, c->met, c->ttft_met, c->tpot_met};
                sample_u(b, fam[f].name, model, extra, v[f]);
                continue;
            }
            uint32_t done, met;
            wf_slo_class_window(c, now, &done, &met);
            double v = f == 4 ? (done ? (double)met / done : 0) : (double)met / WF_SLO_WINDOW_S;
            wf_jbuf_printf(b, "%s{model_name=\"", fam[f].name);
            label_value(b, model);
            wf_jbuf_printf(b, "\"%s} %.6g\n", extra, v);
        }
    }
}

static void class_label(const wf_image_class_metrics *c, int k, char *out, size_t cap) {
    if (k == WF_SLO_CLASSES) snprintf(out, cap, ",priority=\"other\"");
    else snprintf(out, cap, ",priority=\"%d\"", c->priority);
}

/* Runs the statement (the variadic part) for each used class of every model: one family's
 * samples. */
#define FOR_CLASSES(m, names, n_models, extra, c, ...)                                           \
    for (int mi_ = 0; mi_ < (n_models) && mi_ < WF_METRICS_MAX_IMAGE_MODELS; mi_++)              \
        for (int k_ = 0; k_ <= WF_SLO_CLASSES; k_++) {                                          \
            const wf_image_class_metrics *c = &(m)->image[mi_][k_];                             \
            const char *model_ = (names)[mi_];                                                  \
            if (!c->used) continue;                                                             \
            class_label(c, k_, extra, sizeof extra);                                            \
            __VA_ARGS__;                                                                        \
        }

void wf_metrics_render_images(const wf_metrics *m, const char *const *names,
                              const wf_image_sched_stats *st, int n_models, wf_jbuf *b) {
    char extra[64];
    const char *name = "weft:image_requests_total";
    header(b, name, "counter", "Image requests ended, by outcome, per model and SLO class (priority).");
    FOR_CLASSES(m, names, n_models, extra, c, {
        static const char *const status[] = {"success", "error", "cancelled"};
        const uint64_t v[] = {c->success, c->error, c->cancelled};
        for (int i = 0; i < 3; i++) {
            char lab[96];
            snprintf(lab, sizeof lab, "%s,status=\"%s\"", extra, status[i]);
            sample_u(b, name, model_, lab, v[i]);
        }
    });
    name = "weft:image_requests_rejected_total";
    header(b, name, "counter",
           "Image requests refused by the image scheduler (queue full, draining, deadline out of reach).");
    FOR_CLASSES(m, names, n_models, extra, c, sample_u(b, name, model_, extra, c->rejected));
    name = "weft:image_e2e_request_latency_seconds";
    header(b, name, "histogram", "Image request end-to-end latency (successful requests).");
    FOR_CLASSES(m, names, n_models, extra, c, histogram_samples(b, name, model_, extra, &c->e2e));
    name = "weft:image_queue_time_seconds";
    header(b, name, "histogram", "Image request time before its first task ran (successful requests).");
    FOR_CLASSES(m, names, n_models, extra, c, histogram_samples(b, name, model_, extra, &c->queue));
    name = "weft:image_slo_requests_total";
    header(b, name, "counter", "Image requests with slo.deadline_ms that ended.");
    FOR_CLASSES(m, names, n_models, extra, c, sample_u(b, name, model_, extra, c->deadline_total));
    name = "weft:image_slo_met_total";
    header(b, name, "counter", "Image requests with slo.deadline_ms that finished within it.");
    FOR_CLASSES(m, names, n_models, extra, c, sample_u(b, name, model_, extra, c->deadline_met));
    name = "weft:image_slo_attainment";
    header(b, name, "gauge",
           "Image requests with slo.deadline_ms that finished within it (fraction; 1 when none).");
    for (int i = 0; i < n_models && i < WF_METRICS_MAX_IMAGE_MODELS; i++) {
        uint64_t total = 0, met = 0;
        for (int k = 0; k <= WF_SLO_CLASSES; k++) {
            total += m->image[i][k].deadline_total;
            met += m->image[i][k].deadline_met;
        }
        wf_jbuf_printf(b, "%s{model_name=\"", name);
        label_value(b, names[i]);
        wf_jbuf_printf(b, "\",priority=\"all\"} %.6g\n", total ? (double)met / (double)total : 1.0);
    }
    FOR_CLASSES(m, names, n_models, extra, c, {
        wf_jbuf_printf(b, "%s{model_name=\"", name);
        label_value(b, model_);
        wf_jbuf_printf(b, "\"%s} %.6g\n", extra,
                       c->deadline_total ? (double)c->deadline_met / (double)c->deadline_total : 1.0);
    });
    /* Per model: the scheduler's counters. */
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"weft:images_generated_total", "counter", "Images decoded."},
        {"weft:image_denoise_steps_total", "counter", "Denoising steps run (batched steps count once)."},
        {"weft:image_requests_running", "gauge", "Image requests held by the image scheduler."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        header(b, fam[f].name, fam[f].type, fam[f].help);
        for (int i = 0; i < n_models; i++) {
            uint64_t v = f == 0 ? st[i].images : f == 1 ? st[i].steps : (uint64_t)st[i].running;
            sample_u(b, fam[f].name, names[i], NULL, v);
        }
    }
    /* The scheduler's step histogram has fixed millisecond bounds (sched/images.h). */
    static const double step_bounds[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0};
    name = "weft:image_step_seconds";
    header(b, name, "histogram", "Time of one denoising step of a batch.");
    for (int i = 0; i < n_models; i++) {
        wf_histogram step = {.bounds = NULL};
        SET_BOUNDS(step, step_bounds);
        for (int k = 0; k < 12; k++) {
            if (k < 11) step.buckets[k] = st[i].step_ms_hist[k];
            step.count += st[i].step_ms_hist[k];
        }
        step.sum = st[i].step_ms_sum / 1000.0;
        histogram_samples(b, name, names[i], NULL, &step);
    }
    /* Per model: the group of ranks each DENOISE chunk ran on (--workers: --dit-policy). */
    name = "weft:image_group_size";
    header(b, name, "gauge",
           "Ranks of the group that ran the last DENOISE chunk (--workers: chosen by --dit-policy at every chunk boundary; 1 in-process).");
    for (int i = 0; i < n_models; i++) sample_u(b, name, names[i], NULL, (uint64_t)st[i].last_group_size);
    name = "weft:image_chunks_by_group_size_total";
    header(b, name, "counter", "DENOISE chunks run, by the size of their group of ranks.");
    for (int i = 0; i < n_models; i++)
        for (int P = 1; P <= WF_IMAGE_MAX_GROUP; P++) {
            char lab[48];
            snprintf(lab, sizeof lab, ",group_size=\"%d\"", P);
            if (st[i].chunks_by_group[P]) sample_u(b, name, names[i], lab, st[i].chunks_by_group[P]);
        }
}
