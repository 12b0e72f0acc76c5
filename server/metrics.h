/* Prometheus metrics of the front end, named as vLLM names them with the prefix "weft:" so
 * dashboards carry over (weft:time_to_first_token_seconds, weft:num_requests_running, ...).
 *
 *     wf_metrics m; wf_metrics_init(&m);
 *     wf_histogram_observe(&m.ttft, 0.123);
 *     m.generation_tokens++;
 *     wf_metrics_render(&m, "SmolLM2", &sched_stats, have_stats, &jbuf);  // text format 0.0.4
 *
 * Updated and rendered on the loop thread only: no locks. */
#ifndef WF_SERVER_METRICS_H
#define WF_SERVER_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/images.h"
#include "sched/sched.h"
#include "server/openai.h"

#define WF_HISTOGRAM_MAX_BUCKETS 24

typedef struct wf_histogram {
    const double *bounds; /* upper bounds, ascending; +Inf is implicit */
    int n_bounds;
    uint64_t buckets[WF_HISTOGRAM_MAX_BUCKETS]; /* non-cumulative counts per bound */
    uint64_t count;
    double sum;
} wf_histogram;

void wf_histogram_observe(wf_histogram *h, double v);

/* SLO attainment and goodput: per finished sequence, whether it met its TTFT and TPOT targets
 * (the request's "slo", else the server's defaults), overall and per priority; counters since
 * start plus a sliding window of the last WF_SLO_WINDOW_S seconds (per-second buckets). */
#define WF_SLO_WINDOW_S 60
#define WF_SLO_CLASSES 8 /* distinct priorities tracked; later ones count in the overall only */

typedef struct wf_slo_class {
    bool used;
    int priority;
    uint64_t finished, met, ttft_met, tpot_met;
    struct {
        int64_t sec;               /* the second this bucket counts (CLOCK_MONOTONIC) */
        uint32_t finished, met;
    } win[WF_SLO_WINDOW_S];
} wf_slo_class;

/* Image requests of one model and SLO class (the request's priority, as for text), observed at
 * their end on the loop thread. */
#define WF_METRICS_MAX_IMAGE_MODELS WF_IMAGE_SCHED_MAX_MODELS

typedef struct wf_image_class_metrics {
    bool used;
    int priority;
    uint64_t success, error, cancelled, rejected;
    uint64_t deadline_total, deadline_met; /* requests with slo.deadline_ms */
    wf_histogram e2e, queue;
} wf_image_class_metrics;

/* HTTP statuses counted by weft:http_requests_total{status=...} (others count as "other"). */
#define WF_METRICS_N_STATUS 14

typedef struct wf_metrics {
    wf_histogram ttft, itl, tpot, e2e, queue, prefill, decode, prompt_len, gen_len;
    uint64_t prompt_tokens, generation_tokens;
    uint64_t success_stop, success_length, success_abort, success_error;
    uint64_t http_status[WF_METRICS_N_STATUS + 1];
    uint64_t requests_rejected_overload, requests_rejected_full;
    wf_slo_class slo_all;                  /* every finished sequence */
    wf_slo_class slo[WF_SLO_CLASSES];      /* by priority */
    /* image requests (server/images.c), per image model (its scheduler id) and priority; a
     * priority past the first WF_SLO_CLASSES of a model counts in that model's "other" class
     * (priority label "other"), so no request goes uncounted */
    wf_image_class_metrics image[WF_METRICS_MAX_IMAGE_MODELS][WF_SLO_CLASSES + 1];
} wf_metrics;

void wf_metrics_init(wf_metrics *m);
/* The class of an image request of scheduler model `model` (0..WF_METRICS_MAX_IMAGE_MODELS-1)
 * and priority: claimed on first use; the model's "other" class once its WF_SLO_CLASSES are
 * taken. NULL for a model id out of range. */
wf_image_class_metrics *wf_metrics_image_class(wf_metrics *m, int model, int priority);
void wf_metrics_count_status(wf_metrics *m, int status);
/* One finished sequence (a failed one counts with both false). */
void wf_metrics_observe_slo(wf_metrics *m, int priority, bool ttft_met, bool tpot_met, uint64_t now_ns);
/* A class's window totals at now_ns: sequences finished and those that met both targets. */
void wf_slo_class_window(const wf_slo_class *c, uint64_t now_ns, uint32_t *finished, uint32_t *met);
/* Appends the whole exposition. stats may be NULL (not loaded yet). */
void wf_metrics_render(const wf_metrics *m, const char *model, const wf_sched_stats *stats,
                       wf_jbuf *out);

/* The image series, each labelled model_name (the image model); per SLO class (label priority)
 * too where a request has one: weft:image_requests_total{status}, weft:image_requests_rejected_total
 * (refused by the scheduler: queue full, draining, deadline out of reach),
 * weft:image_e2e_request_latency_seconds, weft:image_queue_time_seconds,
 * weft:image_slo_requests_total and weft:image_slo_met_total (requests with slo.deadline_ms, and
 * those that finished within it), weft:image_slo_attainment (met / total; 1 when none; also
 * priority="all"); per model only: weft:images_generated_total, weft:image_denoise_steps_total,
 * weft:image_requests_running, weft:image_step_seconds (per denoising step of a batch).
 * names[i] and st[i] describe scheduler model i. */
void wf_metrics_render_images(const wf_metrics *m, const char *const *names,
                              const wf_image_sched_stats *st, int n_models, wf_jbuf *b);

/* One worker rank (weftd --workers), for /health, /admin/stats and /metrics. */
typedef struct wf_server_rank {
    int rank;
    bool live;
    char state[12];           /* "joining", "live", "down" */
    int pid;                  /* 0: not started by this process, or not running */
    uint32_t incarnation;
    int group;                /* its scheduler group (-1: none) */
    char cores[64];
    uint64_t batches;
    double last_heard_ms;
    uint32_t kv_blocks;
    uint32_t kv_blocks_used;  /* its own count (a prefill worker's scratch blocks) */
    uint64_t prefix_queries, prefix_hits; /* a prefill worker's prefix cache, in prompt tokens */
    uint64_t kv_layers_early; /* layers of KV sent before the prefill computing them ended */
    char role[8];             /* "worker", "prefill" or "decode" */
    uint64_t transfers, transfers_failed, transfer_bytes; /* KV shipped by a prefill worker */
    double transfer_ms;
    uint64_t transfers_compressed;
    int batches_in_flight;
    int batches_running;      /* of those: sent to the worker (one at a time) */
    uint64_t frames_in, frames_out; /* frames from and to it (heartbeats included) */
    uint64_t codec_reasons[4]; /* the KV controller's decisions: compress, link_fast, no_profile, cooling */
    char codec_last[64];
    int restarts;
    char last_error[160];
    uint64_t dit_chunks;      /* DiT DENOISE chunks it ran (a multi-rank chunk counts on each member) */
    uint64_t dit_cfg_chunks;  /* of which guidance-parallel (CFG, two ranks) */
    /* DiT latent bytes (server/workers/dit_router.h): sent by it to other workers (reshards,
     * and how many it sent rows in), from rank 0 to it, from it to rank 0, and of those two the
     * ones of latents in mid-trajectory (between two chunks) */
    uint64_t dit_reshards, dit_reshard_bytes, dit_from_home_bytes, dit_to_home_bytes, dit_mid_home_bytes;
    int n_codecs;             /* KV codec profiles as the worker measured them at start-up */
    struct {
        char name[32];
        double cr, enc_gbps, dec_gbps, b_star_gbps;
    } codecs[16];
} wf_server_rank;

#define WF_SERVER_MAX_RANKS 64

/* weft:worker_up, weft:worker_batches_total, weft:worker_restarts_total,
 * weft:worker_last_heartbeat_seconds, weft:worker_kv_blocks_used, weft:kv_transfers_total,
 * weft:kv_transfer_failures_total, weft:kv_transfer_bytes_total, weft:kv_transfer_seconds_total,
 * weft:worker_dit_chunks_total, weft:worker_dit_cfg_chunks_total, weft:worker_dit_reshards_total,
 * weft:worker_dit_latent_bytes_total{path="worker"|"from_rank0"|"to_rank0"},
 * weft:worker_dit_latent_mid_rank0_bytes_total, weft:worker_prefix_cache_queries_total,
 * weft:worker_prefix_cache_hits_total, weft:kv_layers_overlapped_total, one sample per rank (labelled rank and role). */
/* model labels them all (model_name) but the DiT families (worker_dit_*), which carry dit_model:
 * the DiT the workers run (NULL: model). */
void wf_metrics_render_ranks(const wf_server_rank *r, int n, const char *model, const char *dit_model, wf_jbuf *b);

#endif
