/* weftd's assembly of modules: engine -> KV store -> executor -> scheduler, exposed to the
 * front end as a wf_server_model and a wf_server_backend (server/engine_backend.h holds those
 * adapters). main.c parses the configuration and runs the loop; this unit owns start-up order
 * and teardown of everything behind the HTTP server.
 *
 *     wf_daemon_params p; wf_daemon_params_init(&p);   // defaults: sched/defaults.h
 *     p.model_path = cfg.model; p.kv_memory_mb = cfg.kv_memory_mb; ...
 *     wf_daemon *d;
 *     if (wf_daemon_open(&p, &d, err, sizeof err) != WF_OK) die(err);   // slow: loads
 *     wf_server_set_ready(server, wf_daemon_model(d), wf_daemon_backend(d));
 *     ...
 *     wf_daemon_drain(d, 0);   // on a fast exit, before wf_server_free
 *     wf_daemon_close(d);      // after wf_server_free: stops the scheduler, frees all
 *
 * open may run on any thread (weftd loads on a helper thread while /health says "loading");
 * the model and backend functions are then used from the loop thread only. The in-process CPU
 * engine is group 0 of the scheduler (README command 1 needs no flag). With n_workers > 0 the
 * engine stays loaded here for tokenizing and templates only, and every group is a worker
 * process (server/workers/pool.h): faults re-route, restarted workers come back as new groups. Statuses: those of wf_engine_open,
 * wf_kv_store_init, wf_sched_new/start; err names the step that failed. */
#ifndef WF_SERVER_DAEMON_H
#define WF_SERVER_DAEMON_H

#include "sched/sched.h"
#include "server/server.h"

typedef struct wf_daemon_params {
    const char *model_path;
    const char *model_name;   /* NULL: the file name without .gguf */
    int n_threads;            /* 0: one per core */
    long kv_memory_mb;
    int ctx_size;             /* 0: the model's training context (capped by the KV budget) */
    const char *policy;
    int queue_size;
    int max_batch_tokens;
    int max_running;
    double default_ttft_ms, default_tpot_ms;
    const char *cost_model;   /* "a,b,c,d" or a file (sched/cost_model.h); NULL: calibrate */
    bool fixed_cost_model;    /* no online refit */
    double admission_factor;  /* > 0 (sched options' admission_factor) */
    double prefill_stretch;   /* sched options' prefill_stretch */
    /* Worker processes: 0 runs the in-process CPU engine as group 0 (the default); N > 0
     * serves from N worker processes (server/workers/pool.h), one group each. */
    int n_workers;
    int n_prefill;            /* of them, prefill workers (ranks 1..n_prefill); the others
                                 decode; 0: no prefill/decode disaggregation */
    int local_workers;        /* -1: all started here */
    const char *worker_cores;
    const char *world_host;
    int world_port;
    const char *exe;          /* this binary, for the workers */
    const char *log_level;
    int heartbeat_ms, worker_timeout_ms, join_timeout_ms;
    /* DiT models served on /v1/images/generations, each by an in-process DiT executor
     * (engine/dit/dit_exec.h) under the image scheduler (sched/images.h). */
    const char *const *dit_paths;
    const char *const *dit_names;  /* entries may be NULL: the folder/file name */
    int n_dits;
    int image_chunk_steps;
    bool image_batching;
    bool image_fcfs;         /* image requests by arrival only (default: EDF) */
    const char *dit_policy;   /* --dit-policy with --workers (sched/dit_policy.h); NULL: default */
    int image_max_batch;
    long image_max_pixels; /* largest image size a DiT serves (0: 4 x its native pixels) */
    /* With DiTs beside the in-process LLM: LLM and DiT batches take turns on the cores
     * (sched/gate.h) instead of running their thread pools at once. Default true. */
    bool share_cores;
    bool share_batch;        /* composed batches wait at the gate (the old turns), not claims */
    bool share_ahead;        /* claims, the next one granted while a batch runs (--share-turns ahead) */
    double share_min;        /* minimum share per class (sched/gate.h); default WF_DEFAULT_SHARE_MIN */
    /* A model with sliding-window layers: they get their own KV blocks, only the window's
     * (kv/kv_store.h split store); false: one table for every layer. In-process engine only. */
    bool kv_window_release;
    const char *kv_profiles, *kv_codec; /* prefill/decode KV compression (worker flags) */
    double kv_accuracy;
    int kv_codec_threads;
    bool kv_ship_after_prefill; /* PD: KV moves once the prefill is done (--kv-layer-overlap false) */
    char *const *vmodels;     /* --vmodel declarations, passed on to started workers */
    int n_vmodels;
} wf_daemon_params;

typedef struct wf_daemon wf_daemon;

void wf_daemon_params_init(wf_daemon_params *p);
wf_status wf_daemon_open(const wf_daemon_params *p, wf_daemon **out, char *err, size_t errlen);
const wf_server_model *wf_daemon_model(wf_daemon *d);
const wf_server_backend *wf_daemon_backend(wf_daemon *d);
/* The image scheduler and the image models (NULL / 0 without DiTs), for wf_server_set_images. */
wf_image_sched *wf_daemon_images(wf_daemon *d);
const wf_server_image_model *wf_daemon_image_models(wf_daemon *d, int *n);
wf_sched *wf_daemon_sched(wf_daemon *d);
/* The core-sharing gate (NULL without --share-cores or DiTs); *late: claims, not batches. */
struct wf_gate *wf_daemon_gate(wf_daemon *d, bool *late);
/* For wf_server_set_dit_cost (ctx: the daemon): appends `,"dit_cost":{...}` when the DiT runs
 * on worker ranks (--workers), nothing otherwise. */
void wf_daemon_write_dit_cost(void *ctx, wf_jbuf *b);
/* A lone image request answered (wf_server_set_dit_cost's observe): to the DiT router's cost
 * model when sched_model is the model it serves. */
void wf_daemon_observe_image(void *ctx, int sched_model, int steps, bool guided, int group_size, double ms);
/* Stops admitting and cancels whatever still runs after deadline_ms; returns when idle. The
 * FINISHED events go to the server's queue: call before wf_server_free on a fast exit. */
void wf_daemon_drain(wf_daemon *d, int deadline_ms);
/* NULL is a no-op. */
void wf_daemon_close(wf_daemon *d);

#endif
