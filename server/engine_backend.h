/* weftd's real back end: opens the engine, sizes the paged KV cache, starts the scheduler, and
 * exposes them to the front end as a wf_server_model and a wf_server_backend.
 *
 *     wf_server_engine_params p; wf_server_engine_params_init(&p);
 *     p.model_path = cfg.model; p.kv_memory_mb = cfg.kv_memory_mb; ...
 *     wf_server_engine *se;
 *     if (wf_server_engine_open(&p, &se, err, sizeof err) != WF_OK) die(err);   // slow: loads
 *     wf_server_set_ready(server, wf_server_engine_model(se), wf_server_engine_backend(se));
 *     ...
 *     wf_server_engine_close(se);   // after wf_server_free: stops the scheduler, frees all
 *
 * open may run on any thread (weftd loads on a helper thread while /health says "loading");
 * the model and backend functions are then used from the loop thread only. */
#ifndef WF_SERVER_ENGINE_BACKEND_H
#define WF_SERVER_ENGINE_BACKEND_H

#include "server/server.h"

typedef struct wf_server_engine_params {
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
} wf_server_engine_params;

typedef struct wf_server_engine wf_server_engine;

void wf_server_engine_params_init(wf_server_engine_params *p);
wf_status wf_server_engine_open(const wf_server_engine_params *p, wf_server_engine **out,
                                char *err, size_t errlen);
const wf_server_model *wf_server_engine_model(wf_server_engine *se);
const wf_server_backend *wf_server_engine_backend(wf_server_engine *se);
/* Stops admitting and cancels whatever still runs after deadline_ms; returns when idle. The
 * FINISHED events go to the server's queue: call before wf_server_free on a fast exit. */
void wf_server_engine_drain(wf_server_engine *se, int deadline_ms);
void wf_server_engine_close(wf_server_engine *se);

#endif
