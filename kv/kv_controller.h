/* The KV compression controller: per transfer of KV from a prefill to a decode worker, decides
 * whether to compress and with which profile (after KVServe's analytical model). Sending D bytes
 * of F16 KV raw takes D/B; through a profile of compression ratio CR and codec speed S (encode
 * and decode together) it takes D/S + D/(CR·B) when the stages run one after the other. So
 * compression pays only when
 *     B < B* = (1 - 1/CR) · S.
 * A transfer cut into n layer slices is a pipeline (slice i is encoded while i-1 is on the
 * wire and i-2 is decoded): with encode speed E, decode speed Dc and wire time per byte
 * 1/(CR·B), it takes  D/n · (1/E + 1/Dc + 1/(CR·B)) + D·(n-1)/n · max(1/E, 1/Dc, 1/(CR·B))
 * (the first slice fills the pipe, then the slowest stage sets the pace); options.
 * pipeline_slices = n selects it (1: the serial sum above). Its B* (found numerically) tends
 * to min(E, Dc) as n grows, against (1 - 1/CR)/(1/E + 1/Dc) without the pipeline.
 * Among the profiles that meet the request's accuracy budget (greedy-token agreement, measured
 * per model by weft-kvprof) and are not cooling down, it picks the smallest predicted time,
 * and flags a predicted SLO miss. It learns online: B is an EWMA of observed wire throughput
 * (the first sample replaces the initial guess);
 * each option's prediction is scaled by an EWMA of observed/predicted time (the residual, with
 * the prediction redone at the bandwidth that transfer saw, so a link change moves B and not
 * the residuals); an option that misses its corrected prediction by miss_factor miss_limit
 * times in a row sits out cooldown_ns, then starts afresh (residual 1).
 *
 *     wf_kv_profile_lib lib;
 *     wf_kv_profile_lib_load("deploy/kv-profiles.json", &lib, err, sizeof err);
 *     wf_kv_controller_options o;
 *     wf_kv_controller_options_init(&o);                 // B0 10 Gbps, kv_accuracy 0.9, ...
 *     wf_kv_controller *ctl;
 *     wf_kv_controller_new(&o, lib.items, lib.n, &ctl);
 *     wf_kv_transfer_req r = {.bytes = kv_bytes, .accuracy = -1, .slo_ms = 50};
 *     wf_kv_decision d;
 *     wf_kv_controller_decide(ctl, &r, now_ns, &d);       // d.profile: index, or -1 for raw
 *     // ... encode with lib.items[d.profile].profile, send, decode ...
 *     wf_kv_controller_observe(ctl, &d, wire_bytes, wire_ns, total_ns, now_ns);
 *     wf_kv_controller_format_metrics(ctl, buf, sizeof buf, now_ns);  // for /metrics
 *     wf_kv_controller_free(ctl);
 *
 * Time is passed in (now_ns, any monotonic clock), so tests and the simulator drive it.
 * Not thread-safe: one owner (the transfer path of one worker). No allocation after _new. */
#ifndef WF_KV_KV_CONTROLLER_H
#define WF_KV_KV_CONTROLLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/codec.h"
#include "proto/base/status.h"

/* A profile with what was measured about it. */
typedef struct wf_kv_profile_stats {
    wf_kv_profile profile;
    double cr;        /* F16 bytes in / frame bytes */
    double enc_gbps;  /* encode speed, GB/s of F16 KV in */
    double dec_gbps;  /* decode speed, GB/s of F16 KV out */
    double accuracy;  /* greedy-token agreement with uncompressed KV, 0..1 */
    double ppl_delta; /* relative perplexity change (0.01 = +1%) */
} wf_kv_profile_stats;

/* Combined codec speed S (GB/s) of a profile: 1 / (1/enc + 1/dec). */
double wf_kv_profile_speed_gbps(const wf_kv_profile_stats *s);
/* B* in Gbps: the bandwidth below which this profile beats sending raw (serial stages). */
double wf_kv_profile_b_star_gbps(const wf_kv_profile_stats *s);
/* The same for a transfer pipelined over n_slices layer slices (n_slices <= 1: the serial
 * one); 0 when CR <= 1 (compression never pays). */
double wf_kv_profile_b_star_pipelined_gbps(const wf_kv_profile_stats *s, int n_slices);

/* A library of profiles, as weft-kvprof writes it (JSON, see deploy/kv-profiles.json). */
typedef struct wf_kv_profile_lib {
    char model[128];
    int n_layers, n_kv_heads, head_dim;
    float *importance; /* n_layers * n_kv_heads, or NULL */
    wf_kv_profile_stats *items;
    int n;
} wf_kv_profile_lib;

/* WF_ENOTFOUND / WF_EIO (file), WF_EFORMAT (bad JSON or a bad field; err names it), WF_ENOMEM.
 * On failure lib is empty (freeing it is still fine). */
wf_status wf_kv_profile_lib_load(const char *path, wf_kv_profile_lib *lib, char *err,
                                 size_t errlen);
wf_status wf_kv_profile_lib_save(const wf_kv_profile_lib *lib, const char *path, char *err,
                                 size_t errlen);
void wf_kv_profile_lib_free(wf_kv_profile_lib *lib);
/* Start-up measurement on this machine: encodes and decodes positions [0, n_tokens) of kv
 * (block table blocks) with every profile of the library in turn, round after round (three at
 * least, then for about budget_ns in total), and replaces each profile's cr, enc_gbps and
 * dec_gbps with what it measured, each speed from the fastest of its rounds (accuracy stays:
 * it belongs to the model, not the machine). Single-threaded. WF_EINVAL (geometry, counts, a
 * profile that does not fit), WF_ENOMEM. */
wf_status wf_kv_profile_lib_measure(wf_kv_profile_lib *lib, const wf_kv_store *kv,
                                    const int32_t *blocks, int n_blocks, int n_tokens,
                                    uint64_t budget_ns, char *err, size_t errlen);
/* The same with the codec split over n_workers threads (wf_kv_codec_set_parallel: run NULL is
 * the serial one), as the transfers that will use these speeds code. */
wf_status wf_kv_profile_lib_measure_parallel(wf_kv_profile_lib *lib, const wf_kv_store *kv,
                                             const int32_t *blocks, int n_blocks, int n_tokens,
                                             uint64_t budget_ns, wf_kv_parallel_fn run, void *pool,
                                             int n_workers, char *err, size_t errlen);

typedef struct wf_kv_controller_options {
    double init_bandwidth_gbps; /* B before the first observation */
    double bandwidth_alpha;     /* EWMA weight of a new bandwidth sample */
    double residual_alpha;      /* EWMA weight of a new observed/predicted ratio */
    double default_accuracy;    /* the deployment's kv_accuracy, for requests stating none */
    double miss_factor;         /* observed > miss_factor x predicted is a miss */
    int miss_limit;             /* consecutive misses that start a cool-down */
    uint64_t cooldown_ns;       /* how long a cooled-down profile is not chosen */
    double link_latency_ms;     /* fixed cost of any transfer (added to every option) */
    int pipeline_slices;        /* layer slices a compressed transfer is pipelined over (1..4096;
                                   1: encode, wire and decode one after the other) */
    double compress_margin;     /* 0..0.9: a profile must be predicted at most (1 - margin) x
                                   raw's time to be chosen (a loaded CPU's codec speed varies
                                   more than a link's rate: losing to raw costs more than
                                   a small missed gain) */
    double codec_alpha;         /* EWMA weight of a codec speed observed on a real transfer */
} wf_kv_controller_options;

/* Defaults: B0 10 Gbps, alphas 0.3 (codec 0.5), kv_accuracy 0.9, miss 1.5x, 3 misses, 5 s,
 * latency 0, 1 slice, margin 0. */
void wf_kv_controller_options_init(wf_kv_controller_options *o);

typedef struct wf_kv_transfer_req {
    size_t bytes;    /* F16 KV bytes to move */
    double accuracy; /* least accuracy acceptable (0..1); negative: the default */
    double slo_ms;   /* time this transfer may take; 0: no target */
} wf_kv_transfer_req;

typedef enum wf_kv_reason {
    WF_KV_REASON_COMPRESS = 0,  /* a profile is predicted faster than raw */
    WF_KV_REASON_LINK_FAST,     /* B >= B* of every eligible profile: raw is faster */
    WF_KV_REASON_NO_PROFILE,    /* no profile meets the accuracy budget: raw */
    WF_KV_REASON_COOLING,       /* the eligible profiles are all cooling down: raw */
    WF_KV_REASON_COUNT,
} wf_kv_reason;
const char *wf_kv_reason_name(wf_kv_reason r); /* "compress", "link_fast", ... */

typedef struct wf_kv_decision {
    int profile;            /* index into the library, -1: send raw */
    wf_kv_reason reason;
    double predicted_ms;    /* corrected prediction of the chosen option */
    double model_ms;        /* the same before the residual correction */
    double raw_ms;          /* corrected prediction of sending raw */
    double bandwidth_gbps;  /* B the prediction used */
    double b_star_gbps;     /* B* of the chosen profile (of the fastest eligible one if raw) */
    bool slo_met;           /* predicted_ms <= slo_ms (true without a target) */
    size_t bytes;
} wf_kv_decision;

typedef struct wf_kv_controller wf_kv_controller;

/* Copies the profiles (n >= 0; 0 means always raw). WF_EINVAL (bad options, a profile with
 * cr <= 0 or a speed <= 0), WF_ENOMEM. */
wf_status wf_kv_controller_new(const wf_kv_controller_options *o,
                               const wf_kv_profile_stats *profiles, int n,
                               wf_kv_controller **out);
void wf_kv_controller_free(wf_kv_controller *c);

/* Chooses for one transfer. Never fails: raw is always possible. */
void wf_kv_controller_decide(wf_kv_controller *c, const wf_kv_transfer_req *req, uint64_t now_ns,
                             wf_kv_decision *out);
/* Reports how the decided transfer went: wire_bytes took wire_ns on the link (the bandwidth
 * sample), the whole transfer (encode + wire + decode) took total_ns. */
void wf_kv_controller_observe(wf_kv_controller *c, const wf_kv_decision *d, size_t wire_bytes,
                              uint64_t wire_ns, uint64_t total_ns, uint64_t now_ns);
/* The same for a pipelined transfer, whose wire time is only known as the span its slices took:
 * codec_ns is its slowest codec stage (encode or decode, whole transfer). When the span is not
 * longer than that, the codec set the pace and wire_bytes / wire_ns only bounds B from below:
 * it moves B only if above it (else a compressing controller would keep learning a slow link
 * from its own transfers and never see that raw became faster). */
void wf_kv_controller_observe_pipelined(wf_kv_controller *c, const wf_kv_decision *d,
                                        size_t wire_bytes, uint64_t wire_ns, uint64_t codec_ns,
                                        uint64_t total_ns, uint64_t now_ns);

/* A transfer that overlapped the prefill producing its data and kept up with it (it ended about
 * one part's wire time after the last part was ready): its time was the prefill's, so it says
 * nothing of the option's residual (no residual update, never a miss) and wire_bytes / wire_ns
 * only bounds B from below (it moves B only if above it). Counted as observed and as a lower
 * bound sample. */
void wf_kv_controller_observe_paced(wf_kv_controller *c, const wf_kv_decision *d, size_t wire_bytes,
                                    uint64_t wire_ns, uint64_t now_ns);

/* The codec speeds a real transfer through profile `profile` showed: in_bytes of F16 KV took
 * enc_ns to encode and dec_ns to decode (sums over its slices, on the cores and under the load
 * the transfer had, parallel coding included; 0: not measured). They move the profile's
 * enc/dec speeds (EWMA of the time per byte, codec_alpha), the start-up figures being the
 * prior, so a codec that runs slower than measured at start-up stops being chosen where it
 * loses to raw. A profile not observed for 6 x cooldown_ns gets its prior back (the load that
 * slowed it may be gone; else it would never be tried again). Call it before the transfer's
 * observe so that the residual is judged with the corrected speeds. */
void wf_kv_controller_observe_codec(wf_kv_controller *c, int profile, size_t in_bytes,
                                    uint64_t enc_ns, uint64_t dec_ns, uint64_t now_ns);
/* A profile's current figures (its speeds as corrected by observe_codec); NULL if out of range. */
const wf_kv_profile_stats *wf_kv_controller_profile(const wf_kv_controller *c, int index);

/* Per option state; index -1 is raw. */
typedef struct wf_kv_option_state {
    const char *name;   /* the profile's name, "raw" for -1 */
    uint64_t chosen, observed, misses, cooldowns;
    double residual;    /* EWMA of observed / predicted (1 = the model is right) */
    bool cooling;       /* in a cool-down at the time asked */
} wf_kv_option_state;

typedef struct wf_kv_controller_stats {
    uint64_t decisions, compressed, raw;
    uint64_t by_reason[WF_KV_REASON_COUNT];
    uint64_t slo_miss_predicted; /* decisions whose best option was predicted over the SLO */
    uint64_t observed, misses, cooldowns;
    uint64_t bytes_in, bytes_wire; /* over observed transfers */
    uint64_t lower_bound_samples;  /* codec- or prefill-paced transfers (B only a lower bound) */
    double bandwidth_gbps;         /* current estimate of B */
} wf_kv_controller_stats;

void wf_kv_controller_get_stats(const wf_kv_controller *c, wf_kv_controller_stats *out);
int wf_kv_controller_n_profiles(const wf_kv_controller *c);
void wf_kv_controller_option(const wf_kv_controller *c, int index, uint64_t now_ns,
                             wf_kv_option_state *out);

/* Prometheus text (metric names "weft:kv_..."), and a JSON object for /admin/stats. Write at
 * most len bytes (NUL-terminated) and return the length the whole text needs, as snprintf. */
size_t wf_kv_controller_format_metrics(const wf_kv_controller *c, char *buf, size_t len,
                                       uint64_t now_ns);
size_t wf_kv_controller_format_json(const wf_kv_controller *c, char *buf, size_t len,
                                    uint64_t now_ns);

#endif
