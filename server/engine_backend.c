/* Adapters from the engine (tokenizer, chat template) and the scheduler to the front end's two
 * function tables (the assembly of modules is server/daemon.c). */
#include "server/engine_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* The sharing key of an adapter path: its resolved path with the identity of what it names
 * (a file replaced on disk is a new adapter). NULL for what cannot be read twice (pipes,
 * devices) or cannot be resolved: never shared. */
static char *file_key(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !(S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode))) return NULL;
    char *real = realpath(path, NULL);
    if (!real) return NULL;
    size_t n = strlen(real) + 96;
    char *key = malloc(n);
    if (key)
        snprintf(key, n, "%s|%llu:%llu:%lld:%lld.%09ld", real, (unsigned long long)sb.st_dev,
                 (unsigned long long)sb.st_ino, (long long)sb.st_size,
                 (long long)sb.st_mtim.tv_sec, (long)sb.st_mtim.tv_nsec);
    free(real);
    return key;
}

static struct wf_engine_adapter_file *file_find_locked(wf_engine_adapter *a, const char *key) {
    if (!key) return NULL;
    for (struct wf_engine_adapter_file *f = a->files; f; f = f->next)
        if (f->key && strcmp(f->key, key) == 0) return f;
    return NULL;
}

/* Drops one reference (a->mu held); returns the bytes freed (0 while others use it). */
static size_t file_unref_locked(wf_engine_adapter *a, struct wf_engine_adapter_file *f) {
    if (--f->refs > 0) return 0;
    struct wf_engine_adapter_file **pp = &a->files;
    while (*pp != f) pp = &(*pp)->next;
    *pp = f->next;
    size_t bytes = f->lora->bytes;
    a->held_bytes -= bytes;
    wf_lora_free(f->lora);
    free(f->key);
    free(f->path);
    free(f);
    return bytes;
}

/* One reference to the adapter at path, loading it unless a virtual model holds it already.
 * Loads run without the lock (they read files; others go on meanwhile); *added gets the bytes
 * newly held. */
static wf_status file_acquire(wf_engine_adapter *a, const char *path,
                              struct wf_engine_adapter_file **out, size_t *added, char *err,
                              size_t errlen) {
    char *key = file_key(path);
    pthread_mutex_lock(&a->mu);
    struct wf_engine_adapter_file *f = file_find_locked(a, key);
    if (f) f->refs++;
    pthread_mutex_unlock(&a->mu);
    if (f) {
        free(key);
        *out = f;
        return WF_OK;
    }
    wf_lora *l;
    wf_status st = wf_engine_lora_load(a->engine, path, &l, err, errlen);
    if (st != WF_OK) {
        free(key);
        return st;
    }
    pthread_mutex_lock(&a->mu);
    f = file_find_locked(a, key); /* another load of the same file finished first */
    if (f) {
        f->refs++;
        pthread_mutex_unlock(&a->mu);
        wf_lora_free(l);
        free(key);
        *out = f;
        return WF_OK;
    }
    f = calloc(1, sizeof *f);
    char *shown = f ? realpath(path, NULL) : NULL; /* NULL for a pipe gone by now: as given */
    if (f && !shown && !(shown = strdup(path))) {
        free(f);
        f = NULL;
    }
    if (!f) {
        pthread_mutex_unlock(&a->mu);
        wf_lora_free(l);
        free(key);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    }
    *f = (struct wf_engine_adapter_file){.key = key, .path = shown, .lora = l, .refs = 1,
                                         .next = a->files};
    a->files = f;
    a->held_bytes += l->bytes;
    *added += l->bytes;
    pthread_mutex_unlock(&a->mu);
    *out = f;
    return WF_OK;
}

static size_t vm_release_files(wf_engine_adapter *a, struct wf_engine_adapter_vm *v) {
    size_t freed = 0;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < v->n; i++) freed += file_unref_locked(a, v->files[i]);
    pthread_mutex_unlock(&a->mu);
    v->n = 0;
    return freed;
}

static wf_status b_vmodel_load(void *ctx, uint32_t num, const wf_vmodel_spec *spec, size_t budget,
                               size_t *bytes, size_t *added, char *err, size_t errlen) {
    wf_engine_adapter *a = ctx;
    *bytes = *added = 0;
    struct wf_engine_adapter_vm v = {.num = num};
    wf_lora_use uses[WF_VMODEL_MAX_ADAPTERS];
    wf_status st = WF_OK;
    size_t total = 0, add = 0;
    for (int i = 0; i < spec->n_adapters && st == WF_OK; i++) {
        char e2[400];
        st = file_acquire(a, spec->paths[i], &v.files[i], &add, e2, sizeof e2);
        if (st != WF_OK) {
            wf_errorf(err, errlen, "virtual model '%s': adapter %s: %s", spec->id, spec->paths[i],
                      e2);
            break;
        }
        v.n = i + 1;
        total += v.files[i]->lora->bytes;
        uses[i] = (wf_lora_use){v.files[i]->lora, spec->scales[i]};
    }
    pthread_mutex_lock(&a->mu);
    /* only new files count against the budget: a shared one costs nothing more */
    if (st == WF_OK && add > 0 && a->held_bytes > budget) {
        size_t others = a->held_bytes - add; /* a concurrent load may have taken the rest */
        st = wf_status_errorf(err, errlen, WF_EFULL,
                              "adapter memory budget full: virtual model '%s' needs %.1f MiB "
                              "more, %.1f MiB are left (--adapter-memory-mb)", spec->id,
                              (double)add / 1048576.0,
                              (double)(others < budget ? budget - others : 0) / 1048576.0);
    }
    if (st == WF_OK && a->n_vms == a->cap_vms) {
        int cap = a->cap_vms ? 2 * a->cap_vms : 8;
        void *p = realloc(a->vms, (size_t)cap * sizeof *a->vms);
        if (!p) st = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
        else {
            a->vms = p;
            a->cap_vms = cap;
        }
    }
    if (st == WF_OK) st = wf_engine_vmodel_bind(a->engine, num, uses, v.n, err, errlen);
    if (st == WF_OK) a->vms[a->n_vms++] = v;
    bool publish = st == WF_OK && a->vm_publish && a->n_static_vms-- <= 0;
    pthread_mutex_unlock(&a->mu);
    if (st != WF_OK) {
        vm_release_files(a, &v);
        return st;
    }
    /* checked and bound here: now on every worker, before the server admits its requests */
    if (publish && (st = a->vm_publish(a->vm_ctx, num, spec, err, errlen)) != WF_OK) {
        char e2[400];
        snprintf(e2, sizeof e2, "%s", err);
        wf_errorf(err, errlen, "virtual model '%s': %s", spec->id, e2);
        a->vm_retract(a->vm_ctx, num);
        pthread_mutex_lock(&a->mu);
        for (int i = 0; i < a->n_vms; i++)
            if (a->vms[i].num == num) {
                a->vms[i] = a->vms[--a->n_vms];
                break;
            }
        pthread_mutex_unlock(&a->mu);
        wf_engine_vmodel_unbind(a->engine, num);
        vm_release_files(a, &v);
        return st;
    }
    *bytes = total;
    *added = add;
    return WF_OK;
}

static size_t b_vmodel_unload(void *ctx, uint32_t num) {
    wf_engine_adapter *a = ctx;
    pthread_mutex_lock(&a->mu);
    struct wf_engine_adapter_vm v = {0};
    for (int i = 0; i < a->n_vms; i++) {
        if (a->vms[i].num != num) continue;
        v = a->vms[i];
        a->vms[i] = a->vms[--a->n_vms];
        break;
    }
    pthread_mutex_unlock(&a->mu);
    if (v.num != num) return 0;
    if (a->vm_retract) a->vm_retract(a->vm_ctx, num); /* drained: the workers unbind it too */
    /* unbind waits for a running batch: nothing reads the adapters after it */
    wf_engine_vmodel_unbind(a->engine, num);
    return vm_release_files(a, &v);
}

static void b_adapter_files(void *ctx, void (*fn)(const char *, size_t, int, void *),
                            void *user) {
    wf_engine_adapter *a = ctx;
    pthread_mutex_lock(&a->mu);
    for (struct wf_engine_adapter_file *f = a->files; f; f = f->next)
        fn(f->path, f->lora->bytes, f->refs, user);
    pthread_mutex_unlock(&a->mu);
}

void wf_engine_adapter_free(wf_engine_adapter *a) {
    while (a->n_vms > 0) b_vmodel_unload(a, a->vms[a->n_vms - 1].num);
    free(a->vms);
    a->vms = NULL;
    a->cap_vms = 0;
    pthread_mutex_destroy(&a->mu);
}

void wf_engine_adapter_init(wf_engine_adapter *a, wf_engine *engine, wf_sched *sched,
                            const char *name, int n_ctx) {
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
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
        .drain = b_drain, .vmodel_load = b_vmodel_load, .vmodel_unload = b_vmodel_unload,
        .adapter_files = b_adapter_files};
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
    /* the workers load the start-up --vmodel declarations themselves; the coordinator's load
     * still checks the files at start (a bad adapter is a start-up error) */
    a->backend.vmodels_static = fn != NULL;
}

void wf_engine_adapter_set_vm_sync(wf_engine_adapter *a, int n_static,
                                   wf_status (*publish)(void *ctx, uint32_t num,
                                                        const wf_vmodel_spec *spec, char *err,
                                                        size_t errlen),
                                   void (*retract)(void *ctx, uint32_t num), void *ctx) {
    a->vm_publish = publish;
    a->vm_retract = retract;
    a->vm_ctx = ctx;
    a->n_static_vms = n_static;
    a->backend.vmodels_static = publish == NULL;
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
