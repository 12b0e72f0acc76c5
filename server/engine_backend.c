/* Adapters from the engine (tokenizer, chat template) and the scheduler to the front end's two
 * function tables (the assembly of modules is server/daemon.c). */
#include "server/engine_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

_Static_assert(sizeof(wf_detokenizer) <= WF_SERVER_DETOK_MAX, "detokenizer state too big");

/* ---- model ---- */

static wf_status m_tokenize(void *ctx, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t *out, int cap, int *n_out) {
    wf_engine_adapter *se = ctx;
    return wf_tokenizer_encode(wf_engine_tokenizer(se->engine), text, len, add_special,
                               parse_special, out, cap, n_out);
}

static int m_piece(void *ctx, int32_t token, char *buf, int cap) {
    wf_engine_adapter *se = ctx;
    return wf_tokenizer_token_to_piece(wf_engine_tokenizer(se->engine), token, false, buf, cap);
}

static wf_status m_chat(void *ctx, const wf_openai_message *msgs, size_t n, char **out, char *err,
                        size_t errlen) {
    wf_engine_adapter *se = ctx;
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
    wf_engine_adapter *se = ctx;
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
    wf_engine_adapter *a = ctx;
    if (!spec->kv_codec_name[0] || strcmp(spec->kv_codec_name, "auto") == 0)
        return wf_sched_submit(a->sched, spec, events, user, out, why);
    /* "kv_codec": the names the deployment's KV profile library knows become their ids. */
    wf_request_spec s = *spec;
    s.kv_codec = WF_KV_CODEC_OFF;
    if (strcmp(spec->kv_codec_name, "off") != 0) {
        int i = 0;
        while (i < a->n_kv_codecs && strcmp(a->kv_codecs[i].name, spec->kv_codec_name) != 0) i++;
        if (i == a->n_kv_codecs) {
            memset(why, 0, sizeof *why);
            snprintf(why->message, sizeof why->message,
                     "'kv_codec' \"%s\" is not a KV profile of this server (%s)", spec->kv_codec_name,
                     a->n_kv_codecs ? "see --kv-profiles" : "it has none: use \"auto\" or \"off\"");
            return WF_EINVAL;
        }
        s.kv_codec = a->kv_codecs[i].id;
    }
    return wf_sched_submit(a->sched, &s, events, user, out, why);
}
static void b_cancel(void *ctx, wf_request *r) { wf_sched_cancel(((wf_engine_adapter *)ctx)->sched, r); }
static void b_release(void *ctx, wf_request *r) { wf_sched_release(((wf_engine_adapter *)ctx)->sched, r); }
static void b_event_free(void *ctx, wf_request_event *ev) {
    wf_request_event_free(((wf_engine_adapter *)ctx)->sched, ev);
}
static void b_stats(void *ctx, wf_sched_stats *out) { wf_sched_get_stats(((wf_engine_adapter *)ctx)->sched, out); }
static void b_foreach(void *ctx, void (*fn)(const wf_request_snapshot *, void *), void *user) {
    wf_sched_foreach_request(((wf_engine_adapter *)ctx)->sched, fn, user);
}
static void b_drain(void *ctx, int deadline_ms) { wf_sched_drain(((wf_engine_adapter *)ctx)->sched, deadline_ms); }

/* ---- virtual models ---- */

static void vm_free_loras(struct wf_engine_adapter_vm *v) {
    for (int i = 0; i < v->n; i++) wf_lora_free(v->loras[i]);
    v->n = 0;
}

static wf_status b_vmodel_load(void *ctx, uint32_t num, const wf_vmodel_spec *spec, size_t budget,
                               size_t *bytes, char *err, size_t errlen) {
    wf_engine_adapter *a = ctx;
    *bytes = 0;
    if (a->n_vms == a->cap_vms) {
        int cap = a->cap_vms ? 2 * a->cap_vms : 8;
        void *p = realloc(a->vms, (size_t)cap * sizeof *a->vms);
        if (!p) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
        a->vms = p;
        a->cap_vms = cap;
    }
    struct wf_engine_adapter_vm v = {.num = num};
    wf_lora_use uses[WF_VMODEL_MAX_ADAPTERS];
    wf_status st = WF_OK;
    size_t total = 0;
    for (int i = 0; i < spec->n_adapters && st == WF_OK; i++) {
        char e2[400];
        st = wf_engine_lora_load(a->engine, spec->paths[i], &v.loras[i], e2, sizeof e2);
        if (st != WF_OK) {
            wf_errorf(err, errlen, "virtual model '%s': adapter %s: %s", spec->id, spec->paths[i],
                      e2);
            break;
        }
        v.n = i + 1;
        total += v.loras[i]->bytes;
        uses[i] = (wf_lora_use){v.loras[i], spec->scales[i]};
    }
    if (st == WF_OK && total > budget)
        st = wf_status_errorf(err, errlen, WF_EFULL,
                              "adapter memory budget full: virtual model '%s' needs %.1f MiB, "
                              "%.1f MiB are left (--adapter-memory-mb)", spec->id,
                              (double)total / 1048576.0, (double)budget / 1048576.0);
    if (st == WF_OK) st = wf_engine_vmodel_bind(a->engine, num, uses, v.n, err, errlen);
    if (st != WF_OK) {
        vm_free_loras(&v);
        return st;
    }
    a->vms[a->n_vms++] = v;
    *bytes = total;
    return WF_OK;
}

static void b_vmodel_unload(void *ctx, uint32_t num) {
    wf_engine_adapter *a = ctx;
    for (int i = 0; i < a->n_vms; i++) {
        if (a->vms[i].num != num) continue;
        /* unbind waits for a running batch: nothing reads the adapters after it */
        wf_engine_vmodel_unbind(a->engine, num);
        vm_free_loras(&a->vms[i]);
        a->vms[i] = a->vms[--a->n_vms];
        return;
    }
}

void wf_engine_adapter_free(wf_engine_adapter *a) {
    while (a->n_vms > 0) b_vmodel_unload(a, a->vms[a->n_vms - 1].num);
    free(a->vms);
    a->vms = NULL;
    a->cap_vms = 0;
}

void wf_engine_adapter_init(wf_engine_adapter *a, wf_engine *engine, wf_sched *sched,
                            const char *name, int n_ctx) {
    memset(a, 0, sizeof *a);
    a->engine = engine;
    a->sched = sched;
    a->n_kv_codecs = 0;
    snprintf(a->name, sizeof a->name, "%s", name);
    a->model = (wf_server_model){
        .id = a->name, .n_vocab = wf_engine_info(engine)->n_vocab, .n_ctx = n_ctx, .ctx = a,
        .tokenize = m_tokenize, .piece = m_piece, .chat = m_chat,
        .detok_size = sizeof(wf_detokenizer), .detok_init = m_detok_init,
        .detok_push = m_detok_push, .detok_flush = m_detok_flush};
    a->backend = (wf_server_backend){
        .ctx = a, .submit = b_submit, .cancel = b_cancel, .release = b_release,
        .event_free = b_event_free, .stats = b_stats, .foreach_request = b_foreach,
        .drain = b_drain, .vmodel_load = b_vmodel_load, .vmodel_unload = b_vmodel_unload};
}

static int b_ranks(void *ctx, wf_server_rank *out, int cap) {
    wf_engine_adapter *a = ctx;
    return a->ranks ? a->ranks(a->ranks_ctx, out, cap) : 0;
}

void wf_engine_adapter_set_ranks(wf_engine_adapter *a,
                                 int (*fn)(void *ranks_ctx, wf_server_rank *out, int cap),
                                 void *ranks_ctx) {
    a->ranks = fn;
    a->ranks_ctx = ranks_ctx;
    a->backend.ranks = fn ? b_ranks : NULL;
    if (fn) a->backend.vmodel_load = NULL; /* worker engines hold no adapters */
}

void wf_engine_adapter_set_kv_codecs(wf_engine_adapter *a, const char *const *names,
                                     const uint32_t *ids, int n) {
    a->n_kv_codecs = 0;
    for (int i = 0; i < n && i < (int)(sizeof a->kv_codecs / sizeof a->kv_codecs[0]); i++) {
        snprintf(a->kv_codecs[i].name, sizeof a->kv_codecs[i].name, "%s", names[i]);
        a->kv_codecs[i].id = ids[i];
        a->n_kv_codecs = i + 1;
    }
}
