/* The front end's registry of virtual models (loop thread only): POST /admin/models and the
 * --vmodel flags add one (the backend loads and binds its adapters), DELETE /admin/models/{id}
 * stops new requests at once (404) and removes it when its last in-flight request ends, so the
 * others' requests never notice; GET /v1/models lists them with the backbone as parent/root. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "proto/base/log.h"
#include "server/server_impl.h"

static wf_server_vm *find_any(wf_server *s, const char *id) {
    for (int i = 0; i < s->n_vms; i++)
        if (strcmp(s->vms[i].spec.id, id) == 0) return &s->vms[i];
    return NULL;
}

static wf_server_vm *find_num(wf_server *s, uint32_t num) {
    for (int i = 0; i < s->n_vms; i++)
        if (s->vms[i].num == num) return &s->vms[i];
    return NULL;
}

/* Its requests waiting: those beyond its max_running seats (the scheduler runs no more), or
 * without max_running those that have not started generating. */
static int queued(const wf_server_vm *v) {
    int q = v->inflight - (v->spec.max_running > 0 ? v->spec.max_running : v->running);
    return q > 0 ? q : 0;
}

wf_status wf__vm_acquire(wf_server *s, const char *id, const wf_server_vm **out, char *why,
                         size_t whylen) {
    *out = NULL;
    wf_server_vm *v = find_any(s, id);
    if (!v || v->draining) return WF_ENOTFOUND;
    if (v->spec.max_in_flight > 0 && v->inflight >= v->spec.max_in_flight) {
        v->rejected_quota++;
        *out = v;
        snprintf(why, whylen, "virtual model '%s' has %d requests in flight, its quota "
                 "(max_in_flight); retry later", v->spec.id, v->inflight);
        return WF_EFULL;
    }
    if (v->spec.max_queued > 0 && queued(v) >= v->spec.max_queued) {
        v->rejected_quota++;
        *out = v;
        snprintf(why, whylen, "virtual model '%s' has %d requests queued, its quota "
                 "(max_queued); retry later", v->spec.id, queued(v));
        return WF_EFULL;
    }
    v->inflight++;
    v->requests++;
    *out = v;
    return WF_OK;
}

static void drop(wf_server *s, wf_server_vm *v) {
    size_t freed = s->backend.vmodel_unload ? s->backend.vmodel_unload(s->backend.ctx, v->num) : 0;
    s->adapter_bytes -= freed < s->adapter_bytes ? freed : s->adapter_bytes;
    WF_LOG_INFO("server", NULL, "virtual model %s removed (%zu KiB of adapters freed, %zu KiB "
                "still shared)", v->spec.id, freed >> 10, (v->bytes - freed) >> 10);
    wf_vmodel_spec_free(&v->spec);
    *v = s->vms[--s->n_vms];
}

void wf__vm_started(wf_server *s, uint32_t num) {
    wf_server_vm *v = find_num(s, num);
    if (v) v->running++;
}

void wf__vm_release(wf_server *s, uint32_t num, bool started, int prompt_tokens,
                    int generation_tokens) {
    wf_server_vm *v = find_num(s, num);
    if (!v) return;
    if (started && v->running > 0) v->running--;
    v->prompt_tokens += (uint64_t)(prompt_tokens > 0 ? prompt_tokens : 0);
    v->generation_tokens += (uint64_t)(generation_tokens > 0 ? generation_tokens : 0);
    if (v->inflight > 0) v->inflight--;
    if (v->draining && v->inflight == 0) drop(s, v);
}

/* One virtual model being added: its spec (owned), the number it gets, the load's outcome.
 * POST /admin/models runs the load on a libuv work thread, start-up inline. */
typedef struct wf_vm_load {
    uv_work_t work;
    wf_server *s;
    wf_http_request *req;       /* NULL: added at start, or the client left */
    wf_vmodel_spec spec;
    uint32_t num;
    size_t budget, bytes, added;
    wf_status st;
    char err[600];
    struct wf_vm_load *next;
} wf_vm_load;

int wf__vm_loads_pending(const wf_server *s) { return s->n_vm_loads; }

static bool loading(wf_server *s, const char *id) {
    for (wf_vm_load *l = s->vm_loads; l; l = l->next)
        if (strcmp(l->spec.id, id) == 0) return true;
    return false;
}

/* Loop thread, before the load: the checks that need the registry, and the number. */
static wf_status add_begin(wf_server *s, wf_vm_load *l, int *http_status, char *err,
                           size_t errlen) {
    *http_status = 400;
    if (!s->ready || !s->backend.vmodel_load)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "this server cannot host virtual models (no adapter support in "
                                "its backend, e.g. with --workers)");
    if (strcmp(l->spec.id, s->model_id) == 0 || find_any(s, l->spec.id) || loading(s, l->spec.id)) {
        *http_status = 409;
        return wf_status_errorf(err, errlen, WF_EINVAL, "a model named '%s' already exists%s",
                                l->spec.id, loading(s, l->spec.id) ? " (being added)" : "");
    }
    if (s->n_vms + s->n_vm_loads >= s->cap_vms) {
        int cap = s->cap_vms ? 2 * s->cap_vms : 8;
        while (cap <= s->n_vms + s->n_vm_loads) cap *= 2;
        void *p = realloc(s->vms, (size_t)cap * sizeof *s->vms);
        if (!p) {
            *http_status = 503;
            return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
        }
        s->vms = p;
        s->cap_vms = cap;
    }
    l->s = s;
    /* derived from the spec (workers bind the same number); a clash with a live or draining
     * one (a re-added id still draining, in-process only) takes the next free number */
    uint32_t num = wf_vmodel_spec_num(&l->spec);
    for (bool taken = true; taken;) {
        taken = find_num(s, num) != NULL;
        for (wf_vm_load *o = s->vm_loads; o && !taken; o = o->next) taken = o->num == num;
        if (taken && ++num == 0) num = 1;
    }
    l->num = num;
    l->budget = s->opts.adapter_budget_bytes ? s->opts.adapter_budget_bytes : SIZE_MAX;
    return WF_OK;
}

/* Any thread: reads the adapter files (the slow part). */
static void add_load(wf_vm_load *l) {
    wf_server *s = l->s;
    l->st = s->backend.vmodel_load(s->backend.ctx, l->num, &l->spec, l->budget, &l->bytes,
                                   &l->added, l->err, sizeof l->err);
}

static int load_status(wf_status st) {
    /* a worker that did not answer in time (--workers) is the server's trouble, not the request's */
    return st == WF_EFULL ? 507 : st == WF_ENOMEM || st == WF_ETIMEDOUT ? 503 : 400;
}

/* Loop thread, after a successful load: lists it (the spec moves into the registry). */
static void add_commit(wf_server *s, wf_vm_load *l) {
    wf_server_vm *v = &s->vms[s->n_vms++]; /* room reserved by add_begin */
    memset(v, 0, sizeof *v);
    v->spec = l->spec;
    memset(&l->spec, 0, sizeof l->spec);
    snprintf(l->spec.id, sizeof l->spec.id, "%s", v->spec.id);
    v->num = l->num;
    v->salt = wf_vmodel_spec_salt(&v->spec);
    v->bytes = l->bytes;
    v->created = (int64_t)time(NULL);
    s->adapter_bytes += l->added;
    WF_LOG_INFO("server", NULL, "virtual model %s: %d adapter(s), %zu KiB (%zu KiB new), "
                "weight %g", v->spec.id, v->spec.n_adapters, l->bytes >> 10, l->added >> 10,
                v->spec.weight);
}

wf_status wf_server_vmodel_add(wf_server *s, const wf_vmodel_spec *spec, int *http_status,
                               char *err, size_t errlen) {
    int dummy;
    if (!http_status) http_status = &dummy;
    wf_vm_load l;
    memset(&l, 0, sizeof l);
    if (wf_vmodel_spec_copy(&l.spec, spec) != WF_OK) {
        *http_status = 503;
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    }
    wf_status st = add_begin(s, &l, http_status, err, errlen);
    if (st == WF_OK) {
        add_load(&l);
        st = l.st;
        if (st != WF_OK) {
            *http_status = load_status(st);
            wf_errorf(err, errlen, "%s", l.err);
        } else {
            add_commit(s, &l);
            *http_status = 200;
        }
    }
    wf_vmodel_spec_free(&l.spec);
    return st;
}

wf_status wf_server_vmodel_remove(wf_server *s, const char *id) {
    wf_server_vm *v = find_any(s, id);
    if (!v || v->draining) return WF_ENOTFOUND;
    v->draining = true;
    if (v->inflight == 0) drop(s, v);
    return WF_OK;
}

void wf__vm_free_all(wf_server *s) {
    while (s->n_vms > 0) drop(s, &s->vms[s->n_vms - 1]);
    free(s->vms);
    s->vms = NULL;
    s->cap_vms = 0;
}

static void write_one(wf_server *s, wf_jbuf *b, const wf_server_vm *v) {
    wf_jbuf_cstr(b, "{\"id\":");
    wf_jbuf_str(b, v->spec.id, strlen(v->spec.id));
    wf_jbuf_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"weft\","
                   "\"max_model_len\":%d,\"root\":", (long long)v->created, s->model.n_ctx);
    wf_jbuf_str(b, s->model_id, strlen(s->model_id));
    wf_jbuf_cstr(b, ",\"parent\":");
    wf_jbuf_str(b, s->model_id, strlen(s->model_id));
    wf_jbuf_printf(b, ",\"weight\":%g,\"max_in_flight\":%d,\"max_running\":%d,"
                   "\"max_queued\":%d,\"slo\":{\"ttft_ms\":%g,"
                   "\"tpot_ms\":%g},\"adapters\":[", v->spec.weight, v->spec.max_in_flight,
                   v->spec.max_running, v->spec.max_queued,
                   v->spec.ttft_ms > 0 ? v->spec.ttft_ms : s->opts.default_ttft_ms,
                   v->spec.tpot_ms > 0 ? v->spec.tpot_ms : s->opts.default_tpot_ms);
    for (int i = 0; i < v->spec.n_adapters; i++) {
        wf_jbuf_cstr(b, i ? ",{\"path\":" : "{\"path\":");
        wf_jbuf_str(b, v->spec.paths[i], strlen(v->spec.paths[i]));
        wf_jbuf_printf(b, ",\"scale\":%g}", (double)v->spec.scales[i]);
    }
    wf_jbuf_printf(b, "],\"adapter_bytes\":%zu,\"defaults\":", v->bytes);
    char *d = v->spec.defaults ? json_dumps(v->spec.defaults, JSON_COMPACT) : NULL;
    wf_jbuf_cstr(b, d ? d : "{}");
    free(d);
    wf_jbuf_cstr(b, "}");
}

void wf__vm_write_models(wf_server *s, wf_jbuf *b) {
    for (int i = 0; i < s->n_vms; i++) {
        if (s->vms[i].draining) continue;
        wf_jbuf_cstr(b, ",");
        write_one(s, b, &s->vms[i]);
    }
}

bool wf__vm_write_model(wf_server *s, wf_jbuf *b, const char *id) {
    wf_server_vm *v = find_any(s, id);
    if (!v || v->draining) return false;
    write_one(s, b, v);
    return true;
}

static void write_file(const char *path, size_t bytes, int users, void *user) {
    wf_jbuf *b = user;
    if (b->len && b->data[b->len - 1] == '}') wf_jbuf_cstr(b, ",");
    wf_jbuf_cstr(b, "{\"path\":");
    wf_jbuf_str(b, path, strlen(path));
    wf_jbuf_printf(b, ",\"bytes\":%zu,\"vmodels\":%d}", bytes, users);
}

void wf__vm_write_admin(wf_server *s, wf_jbuf *b) {
    /* each adapter file once, with how many virtual models share it */
    wf_jbuf_cstr(b, ",\"adapter_files\":[");
    if (s->ready && s->backend.adapter_files) s->backend.adapter_files(s->backend.ctx, write_file, b);
    wf_jbuf_cstr(b, "]");
    wf_jbuf_printf(b, ",\"adapter_bytes\":%zu,\"adapter_budget_bytes\":%zu,\"vmodels\":[",
                   s->adapter_bytes, s->opts.adapter_budget_bytes);
    for (int i = 0; i < s->n_vms; i++) {
        const wf_server_vm *v = &s->vms[i];
        wf_jbuf_cstr(b, i ? ",{\"id\":" : "{\"id\":");
        wf_jbuf_str(b, v->spec.id, strlen(v->spec.id));
        wf_jbuf_printf(b, ",\"weight\":%g,\"in_flight\":%d,\"running\":%d,\"queued\":%d,"
                       "\"max_in_flight\":%d,\"max_running\":%d,\"max_queued\":%d,"
                       "\"requests_total\":%" PRIu64 ",\"rejected_quota_total\":%" PRIu64
                       ",\"draining\":%s,\"adapter_bytes\":%zu}", v->spec.weight, v->inflight,
                       v->inflight - queued(v), queued(v), v->spec.max_in_flight,
                       v->spec.max_running, v->spec.max_queued, v->requests, v->rejected_quota,
                       v->draining ? "true" : "false", v->bytes);
    }
    wf_jbuf_cstr(b, "]");
}

void wf__vm_write_metrics(wf_server *s, wf_jbuf *b) {
    if (s->n_vms == 0) return;
    static const struct { const char *name, *type, *help; } m[] = {
        {"vmodel_requests_total", "counter", "Requests accepted per virtual model"},
        {"vmodel_requests_in_flight", "gauge", "Requests running or queued per virtual model"},
        {"vmodel_rejected_quota_total", "counter", "Requests refused (429) by the virtual model's max_in_flight or max_queued"},
        {"vmodel_prompt_tokens_total", "counter", "Prompt tokens of ended requests per virtual model"},
        {"vmodel_generation_tokens_total", "counter", "Generated tokens of ended requests per virtual model"},
        {"vmodel_adapter_bytes", "gauge", "Adapter memory per virtual model"},
        {"vmodel_weight", "gauge", "Fair-sharing weight per virtual model"},
    };
    for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
        wf_jbuf_printf(b, "# HELP weft:%s %s\n# TYPE weft:%s %s\n", m[k].name, m[k].help,
                       m[k].name, m[k].type);
        for (int i = 0; i < s->n_vms; i++) {
            const wf_server_vm *v = &s->vms[i];
            double val = k == 0 ? (double)v->requests : k == 1 ? v->inflight
                       : k == 2 ? (double)v->rejected_quota : k == 3 ? (double)v->prompt_tokens
                       : k == 4 ? (double)v->generation_tokens : k == 5 ? (double)v->bytes
                       : v->spec.weight;
            /* virtual model ids have no quotes or spaces (wf_vmodel_spec checks); the
             * backbone's name is escaped as a label value */
            wf_jbuf_printf(b, "weft:%s{model_name=\"", m[k].name);
            for (const char *c = s->model_id; *c; c++) {
                if (*c == '\\' || *c == '"') wf_jbuf_raw(b, "\\", 1);
                if (*c == '\n') wf_jbuf_cstr(b, "\\n");
                else wf_jbuf_raw(b, c, 1);
            }
            wf_jbuf_printf(b, "\",vmodel=\"%s\"} %.17g\n", v->spec.id, val);
        }
    }
}

static void post_error(wf_server *s, wf_http_request *req, int code, const char *msg) {
    wf__server_error(s, req, code, code == 507 ? "insufficient_storage" : code >= 500
                     ? "server_error" : "invalid_request_error", code == 400 ? "adapters" :
                     NULL, NULL, 0, "%s", msg);
}

static void post_aborted(wf_http_request *req, void *user) {
    (void)req;
    ((wf_vm_load *)user)->req = NULL; /* still added: the request was accepted */
}

static void post_work(uv_work_t *w) { add_load(w->data); }

/* A load ended: lists the virtual model if it succeeded, and answers req (NULL: nobody to
 * answer) with 201 and the model, or the load's error. */
static void post_finish(wf_server *s, wf_http_request *req, wf_vm_load *l) {
    if (l->st == WF_OK) add_commit(s, l);
    else WF_LOG_WARN("server", NULL, "POST /admin/models: %s", l->err);
    if (!req) return;
    if (l->st != WF_OK) {
        post_error(s, req, load_status(l->st), l->err);
        return;
    }
    wf_jbuf b = {0};
    wf__vm_write_model(s, &b, l->spec.id);
    if (b.failed) wf__server_error(s, req, 503, "server_error", NULL, NULL, 1, "out of memory");
    else wf__server_respond(s, req, 201, "application/json", NULL, b.data, b.len);
    wf_jbuf_free(&b);
}

static void post_after(uv_work_t *w, int status) {
    (void)status; /* UV_ECANCELED cannot happen: nothing cancels it */
    wf_vm_load *l = w->data;
    wf_server *s = l->s;
    wf_vm_load **pp = &s->vm_loads;
    while (*pp != l) pp = &(*pp)->next;
    *pp = l->next;
    s->n_vm_loads--;
    if (l->req) wf_http_request_set_abort(l->req, NULL, NULL);
    post_finish(s, l->req, l);
    wf_vmodel_spec_free(&l->spec);
    free(l);
}

static bool refuse_static(wf_server *s, wf_http_request *req) {
    if (!s->ready || !s->backend.vmodels_static) return false;
    wf__server_error(s, req, 400, "invalid_request_error", NULL, NULL, 0,
                     "with worker processes (--workers) virtual models are declared at start "
                     "(--vmodel, which the workers load too); adding or removing one at run "
                     "time is not supported");
    return true;
}

/* POST /admin/models: the JSON form of wf_vmodel_spec. The adapters load on a libuv work
 * thread, so the loop keeps serving; the answer comes when the load is done. */
void wf__vm_h_post(wf_server *s, wf_http_request *req) {
    if (refuse_static(s, req)) return;
    size_t len;
    const char *body = wf_http_request_body(req, &len);
    json_error_t je;
    json_t *o = json_loadb(body ? body : "", len, 0, &je);
    if (!o) {
        wf__server_error(s, req, 400, "invalid_request_error", NULL, NULL, 0,
                         "the body is not valid JSON: %s", je.text);
        return;
    }
    wf_vm_load *l = calloc(1, sizeof *l);
    if (!l) {
        json_decref(o);
        wf__server_error(s, req, 503, "server_error", NULL, NULL, 1, "out of memory");
        return;
    }
    char err[sizeof l->err];
    wf_status st = wf_vmodel_spec_from_json(o, &l->spec, err, sizeof err);
    json_decref(o);
    if (st != WF_OK) {
        free(l);
        wf__server_error(s, req, 400, "invalid_request_error", NULL, NULL, 0, "%s", err);
        return;
    }
    int code;
    st = add_begin(s, l, &code, err, sizeof err);
    if (st == WF_OK && !s->loop) { /* a socket-less test server: load inline */
        add_load(l);
        post_finish(s, req, l);
    } else if (st == WF_OK) {
        l->req = req;
        l->work.data = l;
        l->next = s->vm_loads;
        s->vm_loads = l;
        s->n_vm_loads++;
        if (uv_queue_work(s->loop, &l->work, post_work, post_after) == 0) {
            wf_http_request_set_abort(req, post_aborted, l);
            return;
        }
        s->vm_loads = l->next;
        s->n_vm_loads--;
        st = WF_EIO;
        code = 503;
        snprintf(err, sizeof err, "cannot start the adapter load (uv_queue_work failed)");
    }
    if (st != WF_OK) post_error(s, req, code, err);
    wf_vmodel_spec_free(&l->spec);
    free(l);
}

/* DELETE /admin/models/{id}: no new requests from now; removed when the last one ends. */
void wf__vm_h_delete(wf_server *s, wf_http_request *req) {
    const char *id = wf_http_request_path(req) + strlen("/admin/models/");
    if (refuse_static(s, req)) return;
    wf_server_vm *v = find_any(s, id);
    int inflight = v ? v->inflight : 0;
    if (wf_server_vmodel_remove(s, id) != WF_OK) {
        wf__server_error(s, req, 404, "invalid_request_error", "model", "model_not_found", 0,
                         "The model '%.200s' does not exist", id);
        return;
    }
    wf_jbuf b = {0};
    wf_jbuf_cstr(&b, "{\"id\":");
    wf_jbuf_str(&b, id, strlen(id));
    wf_jbuf_printf(&b, ",\"object\":\"model\",\"deleted\":true,\"draining_requests\":%d}",
                   inflight);
    if (b.failed) wf__server_error(s, req, 503, "server_error", NULL, NULL, 1, "out of memory");
    else wf__server_respond(s, req, 200, "application/json", NULL, b.data, b.len);
    wf_jbuf_free(&b);
}
