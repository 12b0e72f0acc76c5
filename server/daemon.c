/* weftd's assembly of modules (see daemon.h): engine -> KV store -> executor -> scheduler ->
 * the adapters the HTTP server uses. */
#include "server/daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "proto/base/log.h"
#include "sched/cost_model.h"
#include "sched/defaults.h"
#include "server/engine_backend.h"

struct wf_daemon {
    wf_engine *engine;
    wf_kv_store kv;
    bool kv_on;
    wf_sched *sched;
    wf_engine_adapter adapter;
};

void wf_daemon_params_init(wf_daemon_params *p) {
    memset(p, 0, sizeof *p);
    p->kv_memory_mb = WF_DEFAULT_KV_MEMORY_MB;
    p->policy = WF_DEFAULT_POLICY;
    p->queue_size = WF_DEFAULT_QUEUE_SIZE;
    p->max_batch_tokens = WF_DEFAULT_MAX_BATCH_TOKENS;
    p->max_running = WF_DEFAULT_MAX_RUNNING;
    p->default_ttft_ms = WF_DEFAULT_TTFT_MS;
    p->default_tpot_ms = WF_DEFAULT_TPOT_MS;
    p->admission_factor = WF_DEFAULT_ADMISSION_FACTOR;
}

static void model_name_from_path(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, cap, "%s", base);
    size_t n = strlen(out);
    if (n > 5 && strcmp(out + n - 5, ".gguf") == 0) out[n - 5] = '\0';
}

/* The scheduler's options from the daemon's parameters. */
static void sched_options(const wf_daemon_params *p, int n_ctx, wf_sched_options *so) {
    wf_sched_options_init(so);
    so->policy = p->policy;
    so->queue_size = p->queue_size;
    so->max_batch_tokens = p->max_batch_tokens;
    so->max_running = p->max_running;
    so->n_ctx = n_ctx;
    so->default_ttft_ms = p->default_ttft_ms;
    so->default_tpot_ms = p->default_tpot_ms;
    if (p->admission_factor > 0) so->admission_factor = p->admission_factor;
    if (p->fixed_cost_model) so->online_refit = false;
    if (p->cost_model && p->cost_model[0]) {
        char cerr[128];
        if (wf_cost_model_parse(p->cost_model, so->cost, cerr, sizeof cerr) == WF_OK)
            so->cost_given = true;
        else
            so->cost_model_file = p->cost_model;
    }
}

wf_status wf_daemon_open(const wf_daemon_params *p, wf_daemon **out, char *err, size_t errlen) {
    wf_status st;
    *out = NULL;
    wf_daemon *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return WF_ENOMEM;
    }
    /* 1. The engine: weights mmapped, tokenizer, step memory, its executor thread. */
    wf_engine_options eo;
    wf_engine_options_init(&eo);
    eo.model_path = p->model_path;
    eo.n_threads = p->n_threads;
    eo.max_batch_tokens = p->max_batch_tokens;
    eo.max_seqs = p->max_running;
    st = wf_engine_open(&eo, &d->engine, err, errlen);
    if (st != WF_OK) goto fail_engine;
    const wf_model_info *info = wf_engine_info(d->engine);

    /* 2. Its KV store, which sizes the context. */
    wf_kv_geometry geo = wf_engine_kv_geometry(d->engine, WF_DEFAULT_KV_BLOCK_SIZE);
    st = wf_kv_store_init(&d->kv, &geo, (size_t)p->kv_memory_mb << 20);
    if (st != WF_OK) {
        snprintf(err, errlen, "KV cache of %ld MiB: %s", p->kv_memory_mb, wf_status_str(st));
        goto fail_kv;
    }
    d->kv_on = true;
    int kv_tokens = d->kv.n_blocks * WF_DEFAULT_KV_BLOCK_SIZE;
    int n_ctx = p->ctx_size > 0 ? p->ctx_size : info->n_ctx_train;
    if (n_ctx <= 0) n_ctx = WF_DEFAULT_N_CTX;
    if (n_ctx > kv_tokens) {
        WF_LOG_WARN("server", NULL, "context %d tokens exceeds the KV cache (%d tokens): capped; raise --kv-memory-mb",
                    n_ctx, kv_tokens);
        n_ctx = kv_tokens;
    }

    /* 3. The scheduler, with the in-process CPU executor as group 0 (rank 0). */
    wf_sched_options so;
    sched_options(p, n_ctx, &so);
    st = wf_sched_new(&so, &d->kv, wf_engine_executor(d->engine, &d->kv), &d->sched);
    if (st != WF_OK) {
        snprintf(err, errlen, "scheduler: %s", wf_status_str(st));
        goto fail_sched;
    }
    st = wf_sched_start(d->sched);
    if (st != WF_OK) {
        snprintf(err, errlen, "starting the scheduler: %s", wf_status_str(st));
        goto fail_start;
    }

    /* 4. The front end's view. */
    char name[256];
    if (p->model_name && p->model_name[0]) snprintf(name, sizeof name, "%s", p->model_name);
    else model_name_from_path(p->model_path, name, sizeof name);
    wf_engine_adapter_init(&d->adapter, d->engine, d->sched, name, n_ctx);
    WF_LOG_INFO("server", NULL, "model %s (%s, %d layers, vocab %d), context %d, KV %d blocks of %d",
                d->adapter.name, info->arch, info->n_layers, info->n_vocab, n_ctx, d->kv.n_blocks,
                WF_DEFAULT_KV_BLOCK_SIZE);
    *out = d;
    return WF_OK;

fail_start:
    wf_sched_free(d->sched);
fail_sched:
    wf_kv_store_free(&d->kv);
fail_kv:
    wf_engine_free(d->engine);
fail_engine:
    free(d);
    return st;
}

const wf_server_model *wf_daemon_model(wf_daemon *d) { return &d->adapter.model; }
const wf_server_backend *wf_daemon_backend(wf_daemon *d) { return &d->adapter.backend; }
wf_sched *wf_daemon_sched(wf_daemon *d) { return d->sched; }

void wf_daemon_drain(wf_daemon *d, int deadline_ms) {
    if (d) wf_sched_drain(d->sched, deadline_ms);
}

void wf_daemon_close(wf_daemon *d) {
    if (!d) return;
    /* Scheduler first (no batch in flight after it), then the engine (its executor thread),
     * then the KV store both used. */
    wf_sched_free(d->sched);
    wf_engine_free(d->engine);
    if (d->kv_on) wf_kv_store_free(&d->kv);
    free(d);
}
