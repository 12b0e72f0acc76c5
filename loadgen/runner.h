/* One benchmark run of weft-bench: sends a dataset's requests to an OpenAI-compatible server
 * under one load shape and records every request's timings.
 *
 *     wf_loadgen_run_opts o;  wf_loadgen_run_opts_default(&o);
 *     wf_loadgen_target_resolve("127.0.0.1", 8080, &o.target, err, sizeof err);
 *     o.mode = WF_LOADGEN_CLOSED; o.concurrency = 4;
 *     wf_loadgen_run_result res;
 *     wf_loadgen_run(&o, &dataset, &res, err, sizeof err);
 *     ... res.records[i], res.duration_s ...
 *     wf_loadgen_run_result_free(&res);
 *
 * Load shapes: CLOSED keeps `concurrency` requests in flight (each finished one starts the
 * next); OPEN issues requests at gamma/Poisson arrival times (arrival.h) or at the times of a
 * given schedule (a piecewise-Poisson profile, profile.h), optionally capped at
 * max_concurrency in flight (extra arrivals wait, FIFO). Every run is bounded twice: it issues
 * at most num_requests requests, and none after duration_s; requests still in flight then get
 * grace_s to finish and are cancelled after that. Each request also has its own timeout_s.
 * SIGINT stops a run early the same way. Runs its own uv loop on the calling thread. */
#ifndef WF_LOADGEN_RUNNER_H
#define WF_LOADGEN_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "loadgen/dataset.h"
#include "loadgen/image.h"
#include "loadgen/metrics.h"
#include "proto/base/status.h"

#define WF_LOADGEN_MAX_REQUESTS 1000000   /* hard cap on --num-requests */
#define WF_LOADGEN_MAX_DURATION_S 86400.0 /* hard cap on --duration */
#define WF_LOADGEN_MAX_CONNS 4096

typedef struct wf_loadgen_target {
    char host[256];        /* as the user gave it */
    int port;
    char path[256];        /* the endpoint, e.g. /v1/completions */
    char host_header[300]; /* host:port */
    struct sockaddr_storage addr;
} wf_loadgen_target;

typedef enum wf_loadgen_mode { WF_LOADGEN_CLOSED = 0, WF_LOADGEN_OPEN } wf_loadgen_mode;

typedef struct wf_loadgen_run_opts {
    wf_loadgen_target target;
    bool chat;              /* /v1/chat/completions body shape instead of /v1/completions */
    const char *model;      /* "model" field; NULL = omit */
    const char *api_key;    /* Authorization: Bearer; NULL = none */
    bool stream;
    bool ignore_eos;        /* ask for exactly max_tokens (vLLM / llama.cpp / weft extension) */
    bool slo_ext;           /* send weft's "slo": {"ttft_ms", "tpot_ms"} per request */
    double temperature;     /* < 0: omit */
    const char *extra_body; /* JSON object merged into every body, or NULL */
    wf_loadgen_mode mode;
    int concurrency;        /* CLOSED */
    double rate;            /* OPEN: requests/s, INFINITY = all at once */
    double burstiness;      /* OPEN: gamma shape, 1 = Poisson */
    int max_concurrency;    /* OPEN: 0 = unlimited */
    size_t num_requests;
    double duration_s;
    double timeout_s;       /* per request */
    double grace_s;         /* after duration_s, for requests in flight */
    uint64_t seed;          /* arrival times */
    const wf_loadgen_slo_class *classes;
    size_t n_classes;
    bool progress;          /* draw a progress bar on stdout */
    size_t max_conns;       /* connection pool size; 0 = as many as needed (<= 4096) */
    bool retry_after;       /* re-send a request refused (429/503) with Retry-After after that
                             * delay, while its timeout and the run's duration allow */
    /* Image workload: POST image requests (image.h) instead of completions; each item's
     * slo_class is its image class. The SLO extension sends each request's remaining deadline
     * (alpha x T_single minus the time it waited to be sent). */
    const wf_loadgen_image_opts *image;
    const double *schedule; /* OPEN: arrival time of item i in seconds from the start
                             * (ascending), instead of gamma gaps; NULL = gaps */
} wf_loadgen_run_opts;

typedef struct wf_loadgen_run_result {
    wf_loadgen_record *records; /* num_requests entries; unsent ones are NOT_SENT */
    size_t n;
    size_t issued;
    double duration_s;          /* first issue to last completion */
    uint64_t t0_ns;             /* the run's clock origin (uv_hrtime): a schedule's time 0 */
    const char *stop_reason;    /* "count", "duration", "interrupted" (static strings) */
    uint64_t connections;       /* TCP connections opened */
} wf_loadgen_run_result;

void wf_loadgen_run_opts_default(wf_loadgen_run_opts *o);
/* Resolves host (name or address) and port; the endpoint path is set separately. WF_EINVAL or
 * WF_ENOTFOUND with a message. */
wf_status wf_loadgen_target_resolve(const char *host, int port, wf_loadgen_target *t, char *err,
                                    size_t errlen);
/* Runs one load point over ds (ds->n >= o->num_requests). WF_OK even when requests failed
 * (they are in the records); WF_EINVAL for bad options, WF_ENOMEM, WF_EIO. */
wf_status wf_loadgen_run(const wf_loadgen_run_opts *o, const wf_loadgen_dataset *ds,
                         wf_loadgen_run_result *res, char *err, size_t errlen);
void wf_loadgen_run_result_free(wf_loadgen_run_result *res);

/* Builds the JSON body of request i (caller frees with free()). NULL on ENOMEM. */
char *wf_loadgen_build_body(const wf_loadgen_run_opts *o, const wf_loadgen_prompt *p);

/* One blocking GET on its own loop (for /v1/models and /metrics). *body is malloc'ed. */
wf_status wf_loadgen_http_get(const wf_loadgen_target *t, const char *path, const char *api_key,
                              double timeout_s, int *status, char **body, size_t *len);

#endif
