/* Per-request records and the benchmark summary, with vLLM benchmark_serving definitions.
 *
 *     wf_loadgen_record *recs = ...;          // filled by the runner (or a test)
 *     wf_loadgen_summary sum;
 *     wf_loadgen_summarize(recs, n, classes, n_classes, duration_s, &sum);
 *     ... sum.ttft.p99, sum.goodput ...     // the summary owns no memory
 *
 * Definitions (times in ms, from the moment the request is issued, connection setup included
 * as in vLLM):
 *  - TTFT: until the first chunk that carries generated text (a role-only chat chunk does not
 *    count). Non-streamed responses: the first token is seen with the whole body, so TTFT = e2e.
 *  - TPOT: (e2e - TTFT) / (output_tokens - 1), only for streamed requests with > 1 output token.
 *  - ITL: every gap between consecutive text-bearing chunks, pooled over all requests.
 *  - e2e: until the response is complete.
 *  - Throughputs divide by the run's duration (first send to last completion). Token counts are
 *    the server's usage fields; when a server sends none the record says so (tokens_estimated).
 *  - A request is "good" when it completed and meets its class's TTFT and TPOT targets (a target
 *    <= 0 is no constraint; an undefined TPOT meets any TPOT target, as in vLLM). Goodput = good
 *    requests / duration. Attainment of a class = good / issued in that class (failures miss).
 *  - Percentiles interpolate linearly between order statistics (numpy's default).
 * Pure arithmetic (and the JSON shapes of its results, shared by the text and image reports):
 * no I/O, no clock; thread-compatible. */
#ifndef WF_LOADGEN_METRICS_H
#define WF_LOADGEN_METRICS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

#define WF_LOADGEN_MAX_CLASSES 16
#define WF_LOADGEN_MAX_ERROR_KINDS 32

typedef enum wf_loadgen_outcome {
    WF_LOADGEN_NOT_SENT = 0, /* never sent (the run ended first); not counted anywhere. Zero, so
                              * that a calloc'ed record array needs no initialising pass */
    WF_LOADGEN_OK,
    WF_LOADGEN_HTTP_ERROR,   /* the server answered with a non-2xx status */
    WF_LOADGEN_STREAM_ERROR, /* 2xx, but the body carried an error or was malformed */
    WF_LOADGEN_TRANSPORT,    /* connect/read/write failed or the peer closed early */
    WF_LOADGEN_TIMEOUT,      /* the per-request timeout passed */
    WF_LOADGEN_CANCELLED,    /* still running when the run's duration + grace ran out */
} wf_loadgen_outcome;

/* One SLO class: --slo-class name:ttft_ms:tpot_ms:weight. */
typedef struct wf_loadgen_slo_class {
    char name[32];
    double ttft_ms; /* <= 0: no TTFT target */
    double tpot_ms; /* <= 0: no TPOT target */
    double weight;  /* relative share of requests */
} wf_loadgen_slo_class;

typedef struct wf_loadgen_record {
    uint32_t index;    /* position in the request sequence */
    int slo_class;     /* index into the classes, or -1 */
    wf_loadgen_outcome outcome;
    int http_status;   /* 0 when no response status arrived */
    uint32_t retries;  /* re-sent after a 429/503 with Retry-After (--retry-after) */
    bool streamed;
    uint64_t t_start_ns; /* request issued (uv_hrtime clock) */
    uint64_t t_first_ns; /* first text-bearing chunk; 0 if none */
    uint64_t t_end_ns;   /* response complete (or failure) */
    uint64_t *chunk_ns;  /* arrival time of every text-bearing chunk, owned by the record */
    uint32_t n_chunks, cap_chunks;
    int64_t input_tokens;     /* usage.prompt_tokens, else the dataset's estimate */
    int64_t output_tokens;    /* usage.completion_tokens, else the number of text chunks */
    int32_t expected_input;   /* what the dataset asked for (estimate) */
    int32_t expected_output;  /* max_tokens sent */
    bool tokens_estimated;    /* the server sent no usage */
    uint64_t t_arrival_ns;    /* scheduled arrival (open loop; else t_start_ns): deadlines count
                               * from here */
    uint32_t images;          /* image workload: valid images received */
    char error[160];          /* first error message, "" when ok */
} wf_loadgen_record;

typedef struct wf_loadgen_dist {
    size_t n;
    double mean, std, median, p90, p95, p99, min, max;
} wf_loadgen_dist;

typedef struct wf_loadgen_error_kind {
    char key[24]; /* "http_429", "stream_error", "transport", "timeout", "cancelled" */
    uint64_t count;
} wf_loadgen_error_kind;

typedef struct wf_loadgen_class_stats {
    wf_loadgen_slo_class def;
    uint64_t issued, completed, good;
    double attainment; /* good / issued, 0 when none issued */
    double goodput;    /* good / duration */
} wf_loadgen_class_stats;

typedef struct wf_loadgen_summary {
    uint64_t issued, completed, failed;
    uint64_t refused;      /* 429/503 answers (load shedding), not counted in failed */
    double duration_s;
    int64_t input_tokens, output_tokens;
    bool tokens_estimated; /* some completed request had no usage fields */
    double request_throughput, input_throughput, output_throughput, total_token_throughput;
    bool has_slo;          /* classes were given: goodput is meaningful */
    uint64_t good;
    double goodput;
    wf_loadgen_dist ttft, tpot, itl, e2e;
    size_t n_errors;
    wf_loadgen_error_kind errors[WF_LOADGEN_MAX_ERROR_KINDS];
    size_t n_classes;
    wf_loadgen_class_stats classes[WF_LOADGEN_MAX_CLASSES];
} wf_loadgen_summary;

/* Per-request derived values; NAN when undefined (failed request, no text chunk, <= 1 token). */
double wf_loadgen_record_ttft_ms(const wf_loadgen_record *r);
double wf_loadgen_record_tpot_ms(const wf_loadgen_record *r);
double wf_loadgen_record_e2e_ms(const wf_loadgen_record *r);
/* True when r completed and meets class c's targets (c NULL: completed). */
bool wf_loadgen_record_meets(const wf_loadgen_record *r, const wf_loadgen_slo_class *c);
/* Appends one chunk time, growing the array. WF_OK or WF_ENOMEM. */
wf_status wf_loadgen_record_add_chunk(wf_loadgen_record *r, uint64_t t_ns);
/* Frees the chunk array and clears the record. */
void wf_loadgen_record_free(wf_loadgen_record *r);

/* Percentile p in [0, 100] of n sorted values, linear interpolation; NAN if n == 0. */
double wf_loadgen_percentile(const double *sorted, size_t n, double p);
/* Fills d from n values (sorts them in place). */
void wf_loadgen_dist_compute(double *values, size_t n, wf_loadgen_dist *d);

/* Summarizes n records (NOT_SENT ones are skipped). duration_s > 0. classes may be NULL when
 * n_classes is 0. WF_OK, WF_EINVAL (n_classes too large), WF_ENOMEM. */
wf_status wf_loadgen_summarize(const wf_loadgen_record *recs, size_t n,
                               const wf_loadgen_slo_class *classes, size_t n_classes,
                               double duration_s, wf_loadgen_summary *out);

/* Counts one error of kind `key` in kinds[0..*n_kinds) (at most WF_LOADGEN_MAX_ERROR_KINDS). */
void wf_loadgen_error_count(wf_loadgen_error_kind *kinds, size_t *n_kinds, const char *key);
/* The error key of a failed record ("http_503", "timeout", ...) into buf. */
void wf_loadgen_error_key(const wf_loadgen_record *r, char *buf, size_t len);

/* ---- JSON of the results (report.c and image.c) ---- */

/* v as a JSON real, or null when it is not finite (NAN: no sample). */
json_t *wf_loadgen_json_num(double v);
/* Sets "<stat>_<name><suffix>" in o for every stat named in `stats` (NULL-terminated; of mean,
 * median, std, p90, p95, p99, min, max), null where not finite, and "n_<name>" (the sample
 * count) when with_n. */
void wf_loadgen_json_put_dist(json_t *o, const char *name, const char *suffix,
                              const wf_loadgen_dist *d, const char *const *stats, bool with_n);
/* {"<key>": count, ...} of an error tally. */
json_t *wf_loadgen_json_errors(const wf_loadgen_error_kind *kinds, size_t n_kinds);

#endif
