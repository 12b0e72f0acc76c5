/* Adapters from the engine (tokenizer, chat template, detokenizer) and the scheduler to the
 * front end's two function tables. server/daemon.c assembles the modules and fills these.
 *
 *     wf_engine_adapter a;
 *     wf_engine_adapter_init(&a, engine, sched, "SmolLM2", n_ctx);
 *     wf_server_set_ready(server, &a.model, &a.backend);
 *
 * The tables point at *a (their ctx): it must stay valid (and unmoved) as long as the server
 * uses them. No ownership: engine and scheduler belong to the caller. Virtual models' adapters
 * (backend.vmodel_load) belong to the adapter: wf_engine_adapter_free. One adapter file named by
 * several virtual models is loaded once and shared (refcounted by its resolved path, device,
 * inode, size and modification time; pipes are never shared). With worker processes
 * (set_ranks) the virtual models declared at start are loaded by every worker as well (the
 * pool passes the --vmodel flags on); adding or removing one at run time is refused
 * (backend.vmodels_static) unless set_vm_sync gives the hooks that carry it to the workers:
 * then a run-time load, once checked and bound here, is published and waited for (every live
 * worker holds it before the server lists it), and an unload retracts it. Thread-safety:
 * as the server uses them (the loop thread), except backend.vmodel_load, which the server runs
 * on a libuv work thread: the adapter state is guarded by `mu`. */
#ifndef WF_SERVER_ENGINE_BACKEND_H
#define WF_SERVER_ENGINE_BACKEND_H

#include <pthread.h>

#include "engine/engine.h"
#include "sched/sched.h"
#include "server/server.h"

typedef struct wf_engine_adapter {
    wf_engine *engine;
    wf_sched *sched;
    wf_server_model model;
    wf_server_backend backend;
    char name[256];
    int (*ranks)(void *ranks_ctx, wf_server_rank *out, int cap); /* NULL: no workers */
    void *ranks_ctx;
    /* virtual models' adapters, by the number their tasks carry (engine bindings); the loaded
     * files, each once, shared by the virtual models that name them. Guarded by mu. */
    pthread_mutex_t mu;
    struct wf_engine_adapter_file {
        char *key;              /* NULL: never shared (a pipe) */
        char *path;             /* resolved when it could be (what /admin/stats shows) */
        wf_lora *lora;
        int refs;               /* virtual models (or loads under way) using it */
        struct wf_engine_adapter_file *next;
    } *files;
    size_t held_bytes;          /* of files, each counted once */
    struct wf_engine_adapter_vm {
        uint32_t num;
        int n;
        struct wf_engine_adapter_file *files[WF_VMODEL_MAX_ADAPTERS];
    } *vms;
    int n_vms, cap_vms;
    struct {
        char name[32];
        uint32_t id;
    } kv_codecs[64];            /* the KV profiles requests may name ("kv_codec") */
    int n_kv_codecs;
    /* run-time virtual models on worker processes (set_vm_sync); NULL: none */
    wf_status (*vm_publish)(void *ctx, uint32_t num, const wf_vmodel_spec *spec, char *err,
                            size_t errlen);
    void (*vm_retract)(void *ctx, uint32_t num);
    void *vm_ctx;
    int n_static_vms;           /* --vmodel declarations still to come (start-up): not published */
} wf_engine_adapter;

/* name is copied; n_ctx is the context the scheduler serves. */
void wf_engine_adapter_init(wf_engine_adapter *a, wf_engine *engine, wf_sched *sched,
                            const char *name, int n_ctx);

/* Unloads every virtual model's adapters (the engine must still be open). */
void wf_engine_adapter_free(wf_engine_adapter *a);

/* Worker ranks for the front end (backend.ranks forwards to fn). */
/* The KV profiles a request's "kv_codec" may name (copied; at most 64). */
void wf_engine_adapter_set_kv_codecs(wf_engine_adapter *a, const char *const *names,
                                     const uint32_t *ids, int n);

void wf_engine_adapter_set_ranks(wf_engine_adapter *a,
                                 int (*fn)(void *ranks_ctx, wf_server_rank *out, int cap),
                                 void *ranks_ctx);

/* Worker processes take virtual models added at run time: publish (on the load's work thread,
 * after the local load and bind succeeded) must return once every live worker holds num, or
 * an error (the load then fails and is undone); retract (after its requests drained) removes
 * it from them. The first n_static loads are the --vmodel declarations, which the workers
 * load themselves: they are not published. Makes backend.vmodels_static false. */
void wf_engine_adapter_set_vm_sync(wf_engine_adapter *a, int n_static,
                                   wf_status (*publish)(void *ctx, uint32_t num,
                                                        const wf_vmodel_spec *spec, char *err,
                                                        size_t errlen),
                                   void (*retract)(void *ctx, uint32_t num), void *ctx);

#endif
