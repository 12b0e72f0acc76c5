/* Internal: the DiT step-time model the elastic policies and the simulator predict with:
 * T(tokens, P) per denoising step of one image on a group of P ranks, a reshard cost by bytes
 * moved, and the cost of forming a group (zero with group-free collectives).
 *
 *     wf_dit_cost c;
 *     wf_dit_cost_synthetic(&c);                       // GF-DiT's synthetic model
 *     double ms = wf_dit_cost_step_ms(&c, 4096, 2);    // 0.1323*4096/1.82 + 20 = 317.7 ms
 *     wf_dit_cost_add_point(&c, 256, 2, 41.0);         // measured (bench/elastic): a table
 *     wf_dit_cost_observe(&c, 256, 2, 45.1);           // online correction of degree 2
 *     wf_dit_cost_observe_chunk(&c, 0.8);              // a chunk's hand-off, learnt online
 *     wf_dit_cost_observe_request(&c, 1.1);            // a lone request's rest (ENCODE, PNG..)
 *     wf_dit_cost_mode m;                              // a guided image on 2 ranks: CFG or
 *     double g = wf_dit_cost_guided_ms(&c, 4096, 2, &m); // Ulysses, whichever is faster
 *
 * Synthetic: T = ms_per_token * tokens / eff(P) + comm_ms * (P - 1), eff = {1: 1, 2: 1.82,
 * 4: 3.33, 8: 5.88}. Measured: points (tokens, P, ms) per degree, linear in tokens between
 * points and proportional beyond them; a degree without points is not allowed. Either way each
 * degree carries a correction factor, the exponentially weighted ratio of observed to predicted
 * times (observe), so a model measured at start-up follows the machine.
 *
 * Guidance. A guided image (classifier-free guidance) runs two forwards per step, the
 * conditional and the unconditional one. On P ranks it runs either in Ulysses mode (both
 * halves over the P ranks: WF_DIT_COST_GUIDED) or, on exactly 2 ranks, guidance-parallel (one
 * half per rank, one output exchanged per step: WF_DIT_COST_CFG). Synthetic: GUIDED = 2 x
 * ms_per_token x tokens / eff(P) + comm_ms x (P - 1) (the all-to-alls carry both halves at
 * once: GF-DiT's comm term is per collective round), CFG = ms_per_token x tokens + the reshard
 * cost of one latent (tokens x latent_bytes_per_token) (both ranks compute a full forward, then
 * swap outputs). Measured: points carry their mode; a degree without GUIDED points falls back
 * to 2 x its PLAIN time (two forwards, no better measurement), CFG is allowed only where
 * measured. The online correction is per degree, shared by the modes.
 *
 * Size classes. A measured model with points at several token counts (a daemon calibrates its
 * native size and larger ones up to its largest) corrects each size class apart: a class per
 * distinct token count of the points (at most WF_DIT_COST_MAX_CLASSES), an observation moves
 * the class nearest to its tokens (in ratio) and the degree's correction, and a prediction
 * uses its class's (wf_dit_cost_correction): a machine that slows down only for long
 * sequences (attention, caches) does not mislead the small ones, nor the other way round. With
 * one token count (or the synthetic model) the degree's correction is the only one.
 *
 * Overheads. What a served request takes beyond its steps: chunk_ms per DENOISE task (the
 * scheduler's plan, the dispatch to the ranks and the completion's hand-off: per step with
 * one-step chunks) and request_ms once (ENCODE, DECODE_IMAGE, PNG, HTTP). Both 0 in GF-DiT's
 * synthetic model; a daemon learns both (observe_chunk from its waves, observe_request from
 * requests served alone), and with them the simulator replays its lone-request latency
 * (BENCHMARKS.md, tests/integration/test_dit_sim_daemon.py).
 * Not thread-safe: one owner. */
#ifndef WF_SCHED_DIT_COST_H
#define WF_SCHED_DIT_COST_H

#include <stdbool.h>

#include "proto/base/status.h"

#define WF_DIT_COST_MAX_P 64
#define WF_DIT_COST_MAX_POINTS 64
#define WF_DIT_COST_REQUEST_WINDOW 15 /* lone requests request_ms is the median of */
#define WF_DIT_COST_MAX_CLASSES 8     /* size classes with their own corrections */

typedef enum wf_dit_cost_mode {
    WF_DIT_COST_PLAIN = 0,  /* an unguided image (one forward per step), Ulysses over P */
    WF_DIT_COST_GUIDED = 1, /* a guided image, both halves in Ulysses mode over P */
    WF_DIT_COST_CFG = 2,    /* a guided image, guidance-parallel: one half per rank, P = 2 */
} wf_dit_cost_mode;
#define WF_DIT_COST_MODES 3

typedef struct wf_dit_cost_point {
    int tokens, P;
    double ms;
    wf_dit_cost_mode mode;
} wf_dit_cost_point;

typedef struct wf_dit_cost {
    double ms_per_token, comm_ms;        /* synthetic */
    double eff[WF_DIT_COST_MAX_P + 1];   /* synthetic speed-up of degree P; 0 = not allowed */
    wf_dit_cost_point pts[WF_DIT_COST_MAX_POINTS];
    int n_points;                        /* > 0: the measured table replaces the formula */
    double corr[WF_DIT_COST_MAX_P + 1];  /* observed / predicted, per degree (1 at start) */
    int n_classes;                       /* size classes: the points' distinct token counts */
    int class_tokens[WF_DIT_COST_MAX_CLASSES];
    double class_corr[WF_DIT_COST_MAX_CLASSES][WF_DIT_COST_MAX_P + 1]; /* per class and degree */
    double corr_weight;                  /* weight of a new observation (default 0.1) */
    double reshard_lat_ms, reshard_ms_per_mib; /* reshard = lat + bytes / MiB * per_mib */
    double latent_bytes_per_token;       /* synthetic CFG exchange (default 64) */
    double chunk_ms;                     /* per task, outside the step: the daemon's plan,
                                          * dispatch and hand-off of a DENOISE chunk (0 here;
                                          * a daemon learns it: observe_chunk) */
    int chunk_obs;                       /* observations observe_chunk averaged in */
    double request_ms;                   /* per request, outside the DENOISE chunks: ENCODE,
                                          * DECODE_IMAGE, PNG, HTTP (0 here; a daemon learns
                                          * it: observe_request) */
    int request_obs;                     /* observations observe_request took in */
    double request_win[WF_DIT_COST_REQUEST_WINDOW]; /* its latest ones (ring) */
    double group_form_ms;                /* per group formed for the first time (0: group-free;
                                          * GF-DiT measured ~778 ms per new communicator) */
} wf_dit_cost;

/* GF-DiT's synthetic model; reshard 0.05 ms + 0.1 ms/MiB; group formation 0. */
void wf_dit_cost_synthetic(wf_dit_cost *c);
/* An empty measured model (no degree allowed until points are added). */
void wf_dit_cost_measured(wf_dit_cost *c);
/* WF_EINVAL (bad values: ms must be in (0, 1e9]; table full). Points of one degree may come in
 * any order. */
wf_status wf_dit_cost_add_point(wf_dit_cost *c, int tokens, int P, double ms);
/* A point of a mode; WF_EINVAL also for CFG with P != 2. */
wf_status wf_dit_cost_add_mode_point(wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode mode, double ms);
/* Reads "tokens P ms [plain|guided|cfg]" lines ('#' comments; no mode: plain), and the
 * overheads "chunk MS" and "request MS" (chunk_ms, request_ms, 0 to 1e9), into a measured
 * model; lines of up to 254 characters. WF_ENOTFOUND, WF_EFORMAT (err names the line). */
wf_status wf_dit_cost_load(wf_dit_cost *c, const char *path, char *err, int errlen);

bool wf_dit_cost_allows(const wf_dit_cost *c, int P);
/* Predicted ms of one step of one image (< 0 when P is not allowed). */
double wf_dit_cost_step_ms(const wf_dit_cost *c, int tokens, int P);
/* Predicted ms of one step in a mode (< 0 when the degree or the mode is not allowed). */
double wf_dit_cost_mode_step_ms(const wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode mode);
/* A guided image's step on P ranks in the faster of its modes (CFG only at P = 2); *mode (if
 * not NULL) says which (ties: GUIDED, the mode that needs no even split of the batch). */
double wf_dit_cost_guided_ms(const wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode *mode);
const char *wf_dit_cost_mode_name(wf_dit_cost_mode mode);
void wf_dit_cost_observe(wf_dit_cost *c, int tokens, int P, double ms);
/* The correction a prediction of (tokens, P) is multiplied by: its size class's when the model
 * has two or more, else the degree's. */
double wf_dit_cost_correction(const wf_dit_cost *c, int tokens, int P);
/* An observed step of a mode (corrects the degree against that mode's prediction). */
void wf_dit_cost_observe_mode(wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode mode, double ms);
/* A DENOISE chunk's overhead as observed: its wall time minus the predicted time of its steps
 * (may be < 0 when the steps ran faster than predicted: noise that averages out). chunk_ms
 * becomes its exponentially weighted mean (weight corr_weight; the first observation replaces
 * the start value), never below 0. */
void wf_dit_cost_observe_chunk(wf_dit_cost *c, double overhead_ms);
/* A request's overhead as observed: the wall time of a request served alone minus its
 * predicted steps and chunks (wf_dit_cost_alone_ms with request_ms left out). request_ms
 * becomes the median of the latest WF_DIT_COST_REQUEST_WINDOW (never below 0): lone requests
 * are few, and a daemon's first ones (code and buffers paged in) or one preempted by another
 * process would hold a mean up for long. */
void wf_dit_cost_observe_request(wf_dit_cost *c, double overhead_ms);
/* A lone request's predicted latency: steps x the step of (P, mode) + one chunk_ms per
 * chunk of chunk_steps steps + request_ms (what weft-dit-sim --alone charges); < 0 when the
 * degree or the mode is not allowed. */
double wf_dit_cost_alone_ms(const wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode mode, int steps,
                            int chunk_steps);
double wf_dit_cost_reshard_ms(const wf_dit_cost *c, double bytes);

#endif
