/* The OpenAI-compatible front end: routes, auth, the generation state of each HTTP request,
 * SSE streaming, /metrics and /admin. It sits on server/http.h and talks to the model and the
 * scheduler only through two small tables of functions, so the whole request path runs in unit
 * tests against a fake tokenizer and a fake scheduler (tests/server/test_server.c), and weftd
 * plugs in the real engine and wf_sched (server/engine_backend.c).
 *
 *     wf_server_options o; wf_server_options_init(&o);
 *     wf_server *s = wf_server_new(loop, &o);
 *     wf_server_listen(s, "127.0.0.1", 8080, &port);   // /health says 503 "loading"
 *     ... load the model on another thread, then on the loop thread:
 *     wf_server_set_ready(s, &model, &backend);         // /health says 200
 *     ... SIGTERM:
 *     wf_server_shutdown(s, on_drained, ctx);           // stop accepting, drain, then on_drained
 *     wf_server_free(s);
 *
 * Threading: every function runs on the loop thread. Events from the scheduler arrive on the
 * server's wf_handoff (wf_server_events), which wakes the loop with one uv_async. */
#ifndef WF_SERVER_SERVER_H
#define WF_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/base/handoff.h"
#include "sched/images.h"
#include "sched/sched.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/vmodels.h"

/* What the front end needs from a model: text <-> tokens. All calls on the loop thread. */
typedef struct wf_server_model {
    const char *id;         /* the model name served in the API */
    int n_vocab;
    int n_ctx;              /* max tokens per sequence (prompt + completion) */
    void *ctx;
    /* As wf_tokenizer_encode: *n_out is the count needed; may exceed cap. */
    wf_status (*tokenize)(void *ctx, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t *out, int cap, int *n_out);
    /* The token's bytes (render_special false); -needed if cap is too small. */
    int (*piece)(void *ctx, int32_t token, char *buf, int cap);
    /* Renders chat messages with the model's template plus the generation prompt. *out is
     * malloc'd. WF_EINVAL with err for a message sequence the template refuses. */
    wf_status (*chat)(void *ctx, const wf_openai_message *msgs, size_t n, char **out, char *err,
                      size_t errlen);
    /* Streaming detokenizer over an opaque state of detok_size bytes (<= 64): never splits a
     * UTF-8 character; cap >= 256 always suffices. */
    size_t detok_size;
    void (*detok_init)(void *ctx, void *state);
    int (*detok_push)(void *ctx, void *state, int32_t token, char *out, int cap);
    int (*detok_flush)(void *ctx, void *state, char *out, int cap);
} wf_server_model;

#define WF_SERVER_DETOK_MAX 64

/* What the front end needs from the scheduler (wf_sched's functions, or a test double). */
typedef struct wf_server_backend {
    void *ctx;
    wf_status (*submit)(void *ctx, const wf_request_spec *spec, wf_handoff *events, void *user,
                        wf_request **out, wf_sched_reject *why);
    void (*cancel)(void *ctx, wf_request *req);
    void (*release)(void *ctx, wf_request *req);
    void (*event_free)(void *ctx, wf_request_event *ev);
    void (*stats)(void *ctx, wf_sched_stats *out);
    void (*foreach_request)(void *ctx, void (*fn)(const wf_request_snapshot *snap, void *user),
                            void *user);
    /* Stop admitting, finish or cancel what runs by deadline_ms; blocks (called on a helper
     * thread during shutdown). */
    void (*drain)(void *ctx, int deadline_ms);
    /* Optional (NULL: no worker processes): fills up to cap ranks, returns how many exist. */
    int (*ranks)(void *ctx, wf_server_rank *out, int cap);
    /* Optional (NULL: no virtual models). Loads spec's adapters and binds them to num (the id
     * its requests' tasks carry); *bytes gets the memory of its adapters, *added the part newly
     * held (an adapter file another virtual model holds is shared, not loaded again). WF_EFULL
     * (nothing bound) when new adapters would take the memory held above budget (the total;
     * SIZE_MAX: unlimited). Adapter errors as engine/lora.h's, err naming the file. The server
     * calls it on a libuv work thread: it must be safe against concurrent loads and unloads of
     * other nums. unload (loop thread) unbinds num (waiting for a batch that runs), frees the
     * adapters no other virtual model uses and returns their bytes. */
    wf_status (*vmodel_load)(void *ctx, uint32_t num, const wf_vmodel_spec *spec, size_t budget,
                             size_t *bytes, size_t *added, char *err, size_t errlen);
    size_t (*vmodel_unload)(void *ctx, uint32_t num);
    /* Optional: calls fn once per adapter file held (its path, bytes, and how many virtual
     * models share it), each file once. */
    void (*adapter_files)(void *ctx, void (*fn)(const char *path, size_t bytes, int users,
                                                void *user), void *user);
    /* Worker processes that hold only the virtual models declared at start (--vmodel, passed
     * to them): POST/DELETE /admin/models are refused (400). weftd's workers take run-time
     * ones too (server/engine_backend.h: set_vm_sync), so it is false there. */
    bool vmodels_static;
} wf_server_backend;

/* An image model (a DiT) served on /v1/images/generations by the image scheduler. */
typedef struct wf_server_image_model {
    const char *id;
    int sched_model;              /* its id in the image scheduler */
    wf_image_geometry geometry;   /* the image size it generates */
    int num_classes;
    int n_class_names;
    char *const *class_names;
    float default_guidance;
    int max_steps;
    /* class name or decimal index -> label; -1 when unknown */
    int (*class_index)(void *class_ctx, const char *name);
    /* WF_OK if (sampler, steps) is a valid schedule (sampler < 0: the model's); else err says
     * why */
    wf_status (*check_schedule)(void *class_ctx, int sampler, int steps, char *err, size_t errlen);
    void *class_ctx;
} wf_server_image_model;

#define WF_SERVER_MAX_IMAGE_MODELS 16

typedef struct wf_server_options {
    wf_http_limits http;
    char *const *api_keys;  /* NULL or NULL-terminated; copied */
    size_t n_api_keys;
    bool metrics_open;      /* /metrics without a key */
    int shutdown_timeout_ms;
    const char *model_id;   /* the name /v1/models shows while loading */
    int events_queue;       /* capacity of the scheduler -> loop events queue (0: unbounded) */

    int max_n;              /* largest n the scheduler runs (--max-running); 0: unchecked */
    /* SLO targets of requests that state none (judging attainment and goodput). */
    double default_ttft_ms, default_tpot_ms;
    size_t adapter_budget_bytes; /* memory for virtual models' adapters; 0: unlimited */
} wf_server_options;

void wf_server_options_init(wf_server_options *o);

typedef struct wf_server wf_server;

/* loop NULL: a socket-less server for tests (drive it with wf_server_http + loopback
 * connections and wf_server_poll). */
wf_server *wf_server_new(uv_loop_t *loop, const wf_server_options *o);
wf_status wf_server_listen(wf_server *s, const char *host, int port, int *bound_port);
/* The model is loaded: from now on generation routes work and /health is 200. model and
 * backend are copied (their ctx must stay valid until wf_server_free). */
void wf_server_set_ready(wf_server *s, const wf_server_model *model,
                         const wf_server_backend *backend);
/* Image models and their scheduler (call before or with set_ready; none by default). models
 * are copied (their strings and class_ctx must stay valid until wf_server_free); at most
 * WF_SERVER_MAX_IMAGE_MODELS. */
void wf_server_set_images(wf_server *s, wf_image_sched *sched, const wf_server_image_model *models,
                          int n);
/* The gate LLM and DiT batches take turns at (--share-cores; NULL: none), for /admin/stats'
 * "cores" (turns per class; the gate must outlive the server). late: claims (--share-turns
 * edf) rather than composed batches. */
struct wf_gate;
void wf_server_set_gate(wf_server *s, struct wf_gate *gate, bool late);
/* /admin/stats' "dit_cost" (the DiT cost model the --dit-policy predicts with; fn NULL: none):
 * fn appends `,"dit_cost":{...}` to b, on the loop thread; ctx must outlive the server.
 * observe (NULL: none), on the loop thread: a one-image request of image scheduler model
 * sched_model that ran alone was answered ms after its handler started, `steps` steps, its
 * last chunk on group_size ranks (the cost model learns its request_ms from it). */
void wf_server_set_dit_cost(wf_server *s, void (*fn)(void *ctx, wf_jbuf *b),
                            void (*observe)(void *ctx, int sched_model, int steps, bool guided, int group_size,
                                            double ms),
                            void *ctx);
/* The queue image events arrive on (pass to wf_image_sched_submit; unbounded). */
wf_handoff *wf_server_image_events(wf_server *s);
/* Loading failed: /health reports the message with 503 until the process exits. */
void wf_server_set_failed(wf_server *s, const char *message);
/* Replaces the API keys (SIGHUP reload); open connections keep working and their next request
 * is checked against the new keys. keys are copied. WF_ENOMEM leaves the old keys in place. */
wf_status wf_server_set_api_keys(wf_server *s, char *const *keys, size_t n_keys);
/* The queue scheduler events arrive on (pass to wf_sched_submit). */
wf_handoff *wf_server_events(wf_server *s);
/* Processes every queued event now (the uv_async callback does this; tests call it). */
void wf_server_poll(wf_server *s);
wf_http_server *wf_server_http(wf_server *s);
/* Graceful shutdown: stop accepting, /health 503, backend drain (on a helper thread with a
 * loop, inline without one), then done(user) once every response is complete. */
void wf_server_shutdown(wf_server *s, void (*done)(void *user), void *user);
void wf_server_free(wf_server *s);

/* Virtual models (after wf_server_set_ready; loop thread). add loads and binds the adapters
 * (blocking the caller for the load: start-up's --vmodel; POST /admin/models loads on a libuv
 * work thread instead and answers when done) and lists the model; on failure *http_status (may
 * be NULL) is the status to answer: 409 (name taken, or being added), 507 (adapter budget
 * full), 400 (bad adapter, err names the file), 503. remove: new requests get 404 at once,
 * in-flight ones finish, then the adapters no other virtual model shares are freed.
 * WF_ENOTFOUND for an unknown id. */
wf_status wf_server_vmodel_add(wf_server *s, const wf_vmodel_spec *spec, int *http_status,
                               char *err, size_t errlen);
wf_status wf_server_vmodel_remove(wf_server *s, const char *id);

/* Constant-time check of an "Authorization: Bearer KEY" header against keys; true if no keys. */
bool wf_server_auth_ok(char *const *keys, size_t n_keys, const char *authorization);

#endif
