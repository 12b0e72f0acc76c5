/* Internals shared by server/server.c (routes, lifecycle) and server/generate.c (completion
 * requests). Not a public header. */
#ifndef WF_SERVER_SERVER_IMPL_H
#define WF_SERVER_SERVER_IMPL_H

#include <pthread.h>

#include "proto/base/clock.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/stop.h"

typedef struct wf_gen wf_gen;
typedef struct wf_img_gen wf_img_gen;

/* One virtual model (server/vm_registry.c). */
typedef struct wf_server_vm {
    wf_vmodel_spec spec;
    uint32_t num;               /* the id its tasks carry (proto/task.h vmodel) */
    uint64_t salt;              /* prefix-cache namespace */
    size_t bytes;               /* memory of its adapters (files it shares included) */
    int inflight;               /* generations using it */
    int running;                /* ... of them that started generating */
    bool draining;              /* DELETEd: removed when inflight reaches 0 */
    uint64_t requests;
    uint64_t rejected_quota;    /* 429s from max_in_flight or max_queued */
    uint64_t prompt_tokens, generation_tokens; /* of its ended requests */
    int64_t created;
} wf_server_vm;

struct wf_server {
    uv_loop_t *loop;
    wf_server_options opts;
    char **keys;
    size_t n_keys;
    char model_id[256];
    wf_http_server *http;
    wf_handoff events;
    uv_async_t wake;
    bool wake_on;
    bool ready;
    char failed[256];
    wf_server_model model;
    wf_server_backend backend;
    wf_metrics metrics;
    wf_gen *gens;               /* generations under way (for /admin and shutdown) */
    int n_gens;
    uint64_t next_id;
    uint64_t started_ns;
    int64_t created_unix;
    /* shutdown */
    bool shutting_down;
    bool drained;               /* the backend's drain returned */
    void (*done)(void *user);
    void *done_user;
    uv_async_t drain_async;
    bool drain_async_on;
    pthread_t drain_thread;
    bool drain_thread_on;
    uv_timer_t done_timer;
    bool done_timer_on;
    wf_jbuf scratch;
    /* images (server/images.c) */
    wf_image_sched *images;
    struct wf_gate *gate; /* --share-cores (sched/gate.h), NULL: none */
    bool gate_late;
    void (*dit_cost)(void *ctx, wf_jbuf *b); /* /admin/stats' "dit_cost" (NULL: none) */
    void *dit_cost_ctx;
    void (*image_observe)(void *ctx, int sched_model, int steps, bool guided, int group_size,
                          double ms); /* a lone request answered (NULL: none) */
    wf_server_image_model image_models[WF_SERVER_MAX_IMAGE_MODELS];
    int n_image_models;
    wf_handoff image_events;
    wf_img_gen *img_gens;       /* counted in n_gens too */
    /* virtual models */
    wf_server_vm *vms;
    int n_vms, cap_vms;
    size_t adapter_bytes;       /* held by the backend, each shared file once */
    struct wf_vm_load *vm_loads; /* POST /admin/models loads under way (work threads) */
    int n_vm_loads;
};

/* Sends an OpenAI error envelope (and counts it). retry_after_s > 0 adds Retry-After. */
void wf__server_error(wf_server *s, wf_http_request *req, int status, const char *type,
                      const char *param, const char *code, double retry_after_s,
                      const char *fmt, ...) __attribute__((format(printf, 8, 9)));
void wf__server_respond(wf_server *s, wf_http_request *req, int status, const char *ctype,
                        const char *extra, const char *body, size_t len);

/* Counts a streamed response's status (wf__server_respond counts the others). */
void wf__server_count_stream(wf_server *s);

/* vm_registry.c. acquire: the live virtual model `id` with one more in-flight user in *out:
 * WF_OK, WF_ENOTFOUND (no such live model) or WF_EFULL (its max_in_flight or max_queued quota
 * is reached: why says which); started: that user produced its first token; release gives it
 * back (a drained one is removed at its last release). */
wf_status wf__vm_acquire(wf_server *s, const char *id, const wf_server_vm **out, char *why,
                         size_t whylen);
void wf__vm_started(wf_server *s, uint32_t num);
void wf__vm_release(wf_server *s, uint32_t num, bool started, int prompt_tokens,
                    int generation_tokens);
void wf__vm_write_metrics(wf_server *s, wf_jbuf *b); /* Prometheus lines, label vmodel */
void wf__vm_free_all(wf_server *s);
void wf__vm_write_models(wf_server *s, wf_jbuf *b);  /* ",{...}" per live virtual model */
bool wf__vm_write_model(wf_server *s, wf_jbuf *b, const char *id);
void wf__vm_write_admin(wf_server *s, wf_jbuf *b);   /* ",\"vmodels\":[...]" */
void wf__vm_h_post(wf_server *s, wf_http_request *req);
void wf__vm_h_delete(wf_server *s, wf_http_request *req);
/* Loads under way (their ids are taken; shutdown and free wait for them). */
int wf__vm_loads_pending(const wf_server *s);

/* generate.c */
void wf__gen_handle(wf_server *s, wf_http_request *req, wf_openai_kind kind);
void wf__gen_on_event(wf_server *s, wf_request_event *ev);
void wf__gen_write_admin(wf_server *s, wf_jbuf *b);
/* Teardown only: cancels and releases what g holds and frees it without answering. */
void wf__gen_force_free(wf_server *s, wf_gen *g);

/* images.c */
void wf__images_handle(wf_server *s, wf_http_request *req);
void wf__images_on_event(wf_server *s, wf_image_event *ev);
void wf__images_write_admin(wf_server *s, wf_jbuf *b);
void wf__images_force_free(wf_server *s);
const wf_server_image_model *wf__images_find(wf_server *s, const char *name);

#endif
