/* Adapters from the engine (tokenizer, chat template) and the scheduler to the front end's two
 * function tables, plus the start-up sequence: engine -> KV store -> scheduler. */
#include "server/engine_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "proto/base/log.h"
#include "sched/cost_model.h"

#define KV_BLOCK_SIZE 16

struct wf_server_engine {
    wf_engine *engine;
    wf_kv_store kv;
    bool kv_on;
    wf_sched *sched;
    wf_server_model model;
    wf_server_backend backend;
    char name[256];
};

_Static_assert(sizeof(wf_detokenizer) <= WF_SERVER_DETOK_MAX, "detokenizer state too big");

void wf_server_engine_params_init(wf_server_engine_params *p) {
    memset(p, 0, sizeof *p);
    p->kv_memory_mb = 512;
    p->policy = "slo";
    p->queue_size = 1024;
    p->max_batch_tokens = 512;
    p->max_running = 64;
    p->default_ttft_ms = 2000;
    p->default_tpot_ms = 200;
    p->admission_factor = 2.0;
}

/* ---- model ---- */

static wf_status m_tokenize(void *ctx, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t *out, int cap, int *n_out) {
    wf_server_engine *se = ctx;
    return wf_tokenizer_encode(wf_engine_tokenizer(se->engine), text, len, add_special,
                               parse_special, out, cap, n_out);
}

static int m_piece(void *ctx, int32_t token, char *buf, int cap) {
    wf_server_engine *se = ctx;
    return wf_tokenizer_token_to_piece(wf_engine_tokenizer(se->engine), token, false, buf, cap);
}

static wf_status m_chat(void *ctx, const wf_openai_message *msgs, size_t n, char **out, char *err,
                        size_t errlen) {
    wf_server_engine *se = ctx;
    wf_chat_message *cm = calloc(n ? n : 1, sizeof *cm);
    if (!cm) return WF_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        cm[i].role = msgs[i].role;
        cm[i].content = msgs[i].content;
    }
    wf_status st = wf_chat_apply(wf_engine_chat_format(se->engine), wf_engine_chat_template(se->engine),
                                 cm, n, true, out, err, errlen);
    free(cm);
    /* a model without a usable template cannot serve chat: the client's request is the problem */
    if (st == WF_EUNSUPPORTED) st = WF_EINVAL;
    return st;
}

static void m_detok_init(void *ctx, void *state) {
    wf_server_engine *se = ctx;
    wf_detokenizer_init(state, wf_engine_tokenizer(se->engine));
}
static int m_detok_push(void *ctx, void *state, int32_t token, char *out, int cap) {
    (void)ctx;
    return wf_detokenizer_push(state, token, out, cap);
}
static int m_detok_flush(void *ctx, void *state, char *out, int cap) {
    (void)ctx;
    return wf_detokenizer_flush(state, out, cap);
}

/* ---- scheduler ---- */

static wf_status b_submit(void *ctx, const wf_request_spec *spec, wf_handoff *events, void *user,
                          wf_request **out, wf_sched_reject *why) {
    return wf_sched_submit(((wf_server_engine *)ctx)->sched, spec, events, user, out, why);
}
static void b_cancel(void *ctx, wf_request *r) { wf_sched_cancel(((wf_server_engine *)ctx)->sched, r); }
static void b_release(void *ctx, wf_request *r) { wf_sched_release(((wf_server_engine *)ctx)->sched, r); }
static void b_event_free(void *ctx, wf_request_event *ev) {
    wf_request_event_free(((wf_server_engine *)ctx)->sched, ev);
}
static void b_stats(void *ctx, wf_sched_stats *out) { wf_sched_get_stats(((wf_server_engine *)ctx)->sched, out); }
static void b_foreach(void *ctx, void (*fn)(const wf_request_snapshot *, void *), void *user) {
    wf_sched_foreach_request(((wf_server_engine *)ctx)->sched, fn, user);
}
static void b_drain(void *ctx, int deadline_ms) { wf_sched_drain(((wf_server_engine *)ctx)->sched, deadline_ms); }

/* ---- lifecycle ---- */

static void model_name_from_path(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, cap, "%s", base);
    size_t n = strlen(out);
    if (n > 5 && strcmp(out + n - 5, ".gguf") == 0) out[n - 5] = '\0';
}

wf_status wf_server_engine_open(const wf_server_engine_params *p, wf_server_engine **out,
                                char *err, size_t errlen) {
    wf_status st;
    wf_server_engine *se = calloc(1, sizeof *se);
    if (!se) {
        snprintf(err, errlen, "out of memory");
        return WF_ENOMEM;
    }
    wf_engine_options eo;
    wf_engine_options_init(&eo);
    eo.model_path = p->model_path;
    eo.n_threads = p->n_threads;
    eo.max_batch_tokens = p->max_batch_tokens;
    eo.max_seqs = p->max_running;
    st = wf_engine_open(&eo, &se->engine, err, errlen);
    if (st != WF_OK) goto fail_engine;
    const wf_model_info *info = wf_engine_info(se->engine);

    wf_kv_geometry geo = wf_engine_kv_geometry(se->engine, KV_BLOCK_SIZE);
    st = wf_kv_store_init(&se->kv, &geo, (size_t)p->kv_memory_mb << 20);
    if (st != WF_OK) {
        snprintf(err, errlen, "KV cache of %ld MiB: %s", p->kv_memory_mb, wf_status_str(st));
        goto fail_kv;
    }
    se->kv_on = true;
    int kv_tokens = se->kv.n_blocks * KV_BLOCK_SIZE;
    int n_ctx = p->ctx_size > 0 ? p->ctx_size : info->n_ctx_train;
    if (n_ctx <= 0) n_ctx = 2048;
    if (n_ctx > kv_tokens) {
        WF_LOG_WARN("server", NULL, "context %d tokens exceeds the KV cache (%d tokens): capped; raise --kv-memory-mb",
                    n_ctx, kv_tokens);
        n_ctx = kv_tokens;
    }

    wf_sched_options so;
    wf_sched_options_init(&so);
    so.policy = p->policy;
    so.queue_size = p->queue_size;
    so.max_batch_tokens = p->max_batch_tokens;
    so.max_running = p->max_running;
    so.n_ctx = n_ctx;
    so.default_ttft_ms = p->default_ttft_ms;
    so.default_tpot_ms = p->default_tpot_ms;
    if (p->admission_factor > 0) so.admission_factor = p->admission_factor;
    if (p->fixed_cost_model) so.online_refit = false;
    if (p->cost_model && p->cost_model[0]) {
        char cerr[128];
        if (wf_cost_model_parse(p->cost_model, so.cost, cerr, sizeof cerr) == WF_OK) so.cost_given = true;
        else so.cost_model_file = p->cost_model;
    }
    st = wf_sched_new(&so, &se->kv, wf_engine_executor(se->engine, &se->kv), &se->sched);
    if (st != WF_OK) {
        snprintf(err, errlen, "scheduler: %s", wf_status_str(st));
        goto fail_sched;
    }
    st = wf_sched_start(se->sched);
    if (st != WF_OK) {
        snprintf(err, errlen, "starting the scheduler: %s", wf_status_str(st));
        goto fail_start;
    }

    if (p->model_name && p->model_name[0]) snprintf(se->name, sizeof se->name, "%s", p->model_name);
    else model_name_from_path(p->model_path, se->name, sizeof se->name);
    se->model = (wf_server_model){
        .id = se->name, .n_vocab = info->n_vocab, .n_ctx = n_ctx, .ctx = se,
        .tokenize = m_tokenize, .piece = m_piece, .chat = m_chat,
        .detok_size = sizeof(wf_detokenizer), .detok_init = m_detok_init,
        .detok_push = m_detok_push, .detok_flush = m_detok_flush};
    se->backend = (wf_server_backend){
        .ctx = se, .submit = b_submit, .cancel = b_cancel, .release = b_release,
        .event_free = b_event_free, .stats = b_stats, .foreach_request = b_foreach,
        .drain = b_drain};
    WF_LOG_INFO("server", NULL, "model %s (%s, %d layers, vocab %d), context %d, KV %d blocks of %d",
                se->name, info->arch, info->n_layers, info->n_vocab, n_ctx, se->kv.n_blocks, KV_BLOCK_SIZE);
    *out = se;
    return WF_OK;

fail_start:
    wf_sched_free(se->sched);
fail_sched:
    wf_kv_store_free(&se->kv);
fail_kv:
    wf_engine_free(se->engine);
fail_engine:
    free(se);
    return st;
}

const wf_server_model *wf_server_engine_model(wf_server_engine *se) { return &se->model; }
const wf_server_backend *wf_server_engine_backend(wf_server_engine *se) { return &se->backend; }

void wf_server_engine_drain(wf_server_engine *se, int deadline_ms) {
    if (se) wf_sched_drain(se->sched, deadline_ms);
}

void wf_server_engine_close(wf_server_engine *se) {
    if (!se) return;
    wf_sched_free(se->sched);
    if (se->kv_on) wf_kv_store_free(&se->kv);
    wf_engine_free(se->engine);
    free(se);
}
