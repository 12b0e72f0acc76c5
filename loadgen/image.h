/* The image side of weft-bench: POST /v1/images/generations bodies, checks of the PNGs that come
 * back, and the image report (latency, normalised latency, images/s, SLO attainment per class).
 *
 *     wf_loadgen_image_opts io = {.classes = prof.classes, .n_classes = prof.n_classes, .n = 1};
 *     char *body = wf_loadgen_image_build_body(&io, model, &item, deadline_ms, slo_ext, stream);
 *     ...
 *     int got = wf_loadgen_image_check_reply(root, w, h, err, sizeof err);  // -1: bad reply
 *     ...
 *     wf_loadgen_image_summary s;
 *     wf_loadgen_image_summarize(records, n, prof.classes, prof.n_classes, duration_s, &s);
 *     wf_loadgen_image_print(stdout, &s);
 *     json_t *j = wf_loadgen_image_summary_json(&s);
 *
 * Definitions (times in ms):
 *  - latency: from the request's send to its complete reply (e2e); normalised latency: latency
 *    / T_single of its class (GF-DiT's metric: 1 = as fast as alone).
 *  - A request meets its SLO when it completed with valid images and finished by arrival +
 *    alpha x T_single (arrival = the scheduled arrival time in an open loop, the send time in a
 *    closed one). Attainment = met / issued, per class and overall: refusals and failures miss.
 *  - Refused = answered 429 or 503 (the server shedding load), counted apart from failures.
 *  - Image throughput = valid images / the run's duration.
 * Pure functions but the body builder's allocation; thread-compatible. */
#ifndef WF_LOADGEN_IMAGE_H
#define WF_LOADGEN_IMAGE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "loadgen/dataset.h"
#include "loadgen/metrics.h"
#include "sched/workload/workload.h"
#include "proto/base/status.h"

typedef struct wf_loadgen_image_opts {
    const wf_workload_class *classes;
    size_t n_classes;
    int n;               /* images per request (OpenAI's n) */
    const char *prompt;  /* NULL: the dataset's text, else "a photo" */
    int class_labels;    /* > 0: send class_label drawn from 0..class_labels-1; 0: none */
    double guidance;     /* guidance_scale; < 0: the server's default */
    bool send_seed;      /* a per-request seed from --seed, so a run can be repeated exactly */
} wf_loadgen_image_opts;

/* The JSON body of one image request for item p (p->slo_class is the image class, p->text_seed
 * seeds its seed and label). deadline_ms > 0 with slo_ext: "slo": {"deadline_ms"} and the
 * class's priority. extra (a JSON object or NULL) is merged last. Caller frees; NULL on ENOMEM
 * or a bad class index. */
char *wf_loadgen_image_build_body(const wf_loadgen_image_opts *io, const char *model,
                                  const wf_loadgen_prompt *p, double deadline_ms, bool slo_ext,
                                  bool stream, const char *extra);

/* The "seed" sent for item p (from its own seed, so a --seed repeats a run exactly). */
int64_t wf_loadgen_image_request_seed(const wf_loadgen_prompt *p);

/* The requests of one profile load point as a trace file (wf_workload_trace_write: GF-DiT's
 * workload JSON), each request's seed being the one sent (wf_loadgen_image_request_seed);
 * items[i].slo_class is request i's class. WF_EIO on a write failure, with a message. */
wf_status wf_loadgen_image_trace_write(const char *path, const wf_workload_profile *p,
                                       double rate_scale, uint64_t seed, const double *arrival_s,
                                       const wf_loadgen_prompt *items, size_t n, char *err,
                                       size_t errlen);

/* Reads a trace (wf_workload_trace_read: weft-bench's --trace-out, or GF-DiT's generated
 * workloads) for replay, as the items weft-bench sends: slo_class is the request's class in p,
 * and the seed sent is the trace's (or one derived from the request's index). *arrival_s and
 * *items are malloc'ed (caller frees), *n set. WF_ENOTFOUND, WF_EFORMAT naming the request and
 * field, WF_ENOMEM. */
wf_status wf_loadgen_image_trace_read(const char *path, wf_workload_profile *p, double **arrival_s,
                                      wf_loadgen_prompt **items, size_t *n, char *err,
                                      size_t errlen);

/* Decodes standard base64 (padding optional; whitespace is an error). Caller frees; NULL on a
 * bad character, a bad length or ENOMEM. */
uint8_t *wf_loadgen_base64_decode(const char *s, size_t len, size_t *out_len);
/* WF_OK when buf is a PNG (signature, a first IHDR chunk with a correct CRC) of width x height;
 * WF_EFORMAT with a message saying what is wrong otherwise. */
wf_status wf_loadgen_png_check(const uint8_t *buf, size_t len, int width, int height, char *err,
                               size_t errlen);
/* Decodes one b64_json value and checks the PNG in it. */
wf_status wf_loadgen_image_check_b64(const char *b64, size_t len, int width, int height,
                                     char *err, size_t errlen);
/* Checks a non-streamed reply: {"data": [{"b64_json": ...}, ...]}. Returns the number of valid
 * images, or -1 with err set (not an object, no data, a bad image). */
int wf_loadgen_image_check_reply(json_t *root, int width, int height, char *err, size_t errlen);
/* One event of a streamed reply. Final images are in "data": [{"b64_json"}] or in a top-level
 * "b64_json" (OpenAI's image_generation.completed); a "type" containing "partial" is a preview.
 * Returns the number of final images it carried (0 for progress and previews), or -1 with err
 * set (an error event or a bad image). *progress is set for events that are not final. */
int wf_loadgen_image_check_event(json_t *msg, int width, int height, bool *progress, char *err,
                                 size_t errlen);

/* True when r completed and finished within its class's deadline (c->t_single_ms > 0). */
bool wf_loadgen_image_record_met(const wf_loadgen_record *r, const wf_workload_class *c);

typedef struct wf_loadgen_image_class_stats {
    wf_workload_class def;
    uint64_t issued, completed, refused, failed, met, images;
    double attainment;          /* met / issued; NAN when none issued */
    wf_loadgen_dist latency;    /* ms, completed requests */
    wf_loadgen_dist normalized; /* latency / T_single */
} wf_loadgen_image_class_stats;

typedef struct wf_loadgen_image_phase_stats {
    char name[32];
    double start_s, end_s;
    uint64_t issued, completed, refused, failed, met;
    double attainment;          /* met / issued; NAN when none issued */
    wf_loadgen_dist latency, normalized;
} wf_loadgen_image_phase_stats;

typedef struct wf_loadgen_image_summary {
    uint64_t issued, completed, refused, failed, met, images;
    double duration_s;
    double request_throughput, image_throughput; /* per second */
    double attainment;
    wf_loadgen_dist latency, normalized, first_event; /* first_event: streamed, first SSE event */
    size_t n_errors;
    wf_loadgen_error_kind errors[WF_LOADGEN_MAX_ERROR_KINDS];
    size_t n_classes;
    wf_loadgen_image_class_stats classes[WF_WORKLOAD_MAX_CLASSES];
    size_t n_phases; /* a profile run: the same figures per phase (by arrival time) */
    wf_loadgen_image_phase_stats phases[WF_WORKLOAD_MAX_PHASES];
} wf_loadgen_image_summary;

/* Summarizes n records (NOT_SENT skipped; r->slo_class is the image class). WF_OK, WF_EINVAL
 * (too many classes), WF_ENOMEM. */
wf_status wf_loadgen_image_summarize(const wf_loadgen_record *recs, size_t n,
                                     const wf_workload_class *classes, size_t n_classes,
                                     double duration_s, wf_loadgen_image_summary *out);
/* Adds per-phase figures to s (already summarized from the same records): each request
 * belongs to the phase of p in which it arrived, arrival times counting from t0_ns (the run's
 * clock origin). WF_OK or WF_ENOMEM. */
wf_status wf_loadgen_image_summarize_phases(const wf_loadgen_record *recs, size_t n,
                                            uint64_t t0_ns, const wf_workload_profile *p,
                                            wf_loadgen_image_summary *s);
/* The text table of one load point. */
void wf_loadgen_image_print(FILE *f, const wf_loadgen_image_summary *s);
/* The result-file object of one load point (keys: images, image_throughput, p95_latency_ms,
 * mean_normalized_latency, slo_attainment, classes[...]); caller owns the reference. */
json_t *wf_loadgen_image_summary_json(const wf_loadgen_image_summary *s);

#endif
