/* weftd's front end: route table, API-key auth, the small endpoints (/health, /v1/models,
 * /tokenize, /detokenize, /metrics, /admin), the event pump from the scheduler and graceful
 * shutdown. Completions live in generate.c. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/base/clock.h"
#include "proto/base/log.h"
#include "sched/defaults.h"
#include "server/admin_page.h"
#include "server/server_impl.h"
#include "weft_version.h"

void wf_server_options_init(wf_server_options *o) {
    memset(o, 0, sizeof *o);
    wf_http_limits_init(&o->http);
    o->shutdown_timeout_ms = 10000;
    o->model_id = "model";
    o->events_queue = WF_DEFAULT_EVENTS_QUEUE;
    o->default_ttft_ms = WF_DEFAULT_TTFT_MS;
    o->default_tpot_ms = WF_DEFAULT_TPOT_MS;
}

/* ---- responses -------------------------------------------------------------------------- */

void wf__server_respond(wf_server *s, wf_http_request *req, int status, const char *ctype,
                        const char *extra, const char *body, size_t len) {
    wf_metrics_count_status(&s->metrics, status);
    wf_http_respond(req, status, ctype, extra, body, len);
}

void wf__server_count_stream(wf_server *s) { wf_metrics_count_status(&s->metrics, 200); }

void wf__server_error(wf_server *s, wf_http_request *req, int status, const char *type,
                      const char *param, const char *code, double retry_after_s,
                      const char *fmt, ...) {
    wf_openai_error e;
    memset(&e, 0, sizeof e);
    e.status = status;
    e.type = type ? type : (status >= 500 ? "server_error" : "invalid_request_error");
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    snprintf(e.code, sizeof e.code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    wf_jbuf b = {0};
    wf_openai_write_error(&b, &e);
    char extra[64] = "";
    if (retry_after_s > 0) snprintf(extra, sizeof extra, "Retry-After: %.0f\r\n", ceil(retry_after_s));
    if (status == 401) snprintf(extra, sizeof extra, "WWW-Authenticate: Bearer\r\n");
    WF_LOG_DEBUG("server", NULL, "%s %s -> %d %s", wf_http_request_method(req),
                 wf_http_request_path(req), status, e.message);
    wf__server_respond(s, req, status, "application/json", extra[0] ? extra : NULL,
                       b.failed ? "{}" : b.data, b.failed ? 2 : b.len);
    wf_jbuf_free(&b);
}

static void respond_json(wf_server *s, wf_http_request *req, int status, wf_jbuf *b) {
    if (b->failed) {
        wf__server_error(s, req, 503, "server_error", NULL, NULL, 1, "out of memory");
        return;
    }
    wf__server_respond(s, req, status, "application/json", NULL, b->data, b->len);
}

static size_t http_error(int status, const char *message, char *buf, size_t cap,
                         const char **ctype, void *user) {
    wf_server *s = user;
    wf_metrics_count_status(&s->metrics, status);
    wf_openai_error e;
    memset(&e, 0, sizeof e);
    wf_openai_error_set(&e, status, status >= 500 ? "server_error" : "invalid_request_error",
                        NULL, "%s", message);
    wf_jbuf b = {0};
    wf_openai_write_error(&b, &e);
    size_t n = b.failed ? 0 : (b.len < cap ? b.len : cap - 1);
    if (n) memcpy(buf, b.data, n);
    wf_jbuf_free(&b);
    *ctype = "application/json";
    return n;
}

/* ---- auth ------------------------------------------------------------------------------- */

/* Time depends on the length of the presented token only, never on where it differs. */
static bool ct_equal(const char *given, size_t n, const char *key) {
    size_t kn = strlen(key);
    unsigned diff = (unsigned)(n != kn);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)given[i] ^ (unsigned char)key[kn ? i % kn : 0];
    return diff == 0;
}

bool wf_server_auth_ok(char *const *keys, size_t n_keys, const char *auth) {
    if (n_keys == 0) return true;
    if (!auth) return false;
    while (*auth == ' ') auth++;
    if (strncasecmp(auth, "Bearer ", 7) != 0) return false;
    const char *tok = auth + 7;
    while (*tok == ' ') tok++;
    size_t n = strlen(tok);
    while (n && (tok[n - 1] == ' ' || tok[n - 1] == '\t')) n--;
    bool ok = false;
    for (size_t i = 0; i < n_keys; i++) ok |= ct_equal(tok, n, keys[i]); /* no early exit */
    return ok;
}

/* ---- small endpoints -------------------------------------------------------------------- */

static void h_health(wf_server *s, wf_http_request *req) {
    if (s->failed[0]) {
        wf__server_error(s, req, 503, "server_error", NULL, NULL, 0, "model failed to load: %s", s->failed);
        return;
    }
    const char *state = s->shutting_down || wf_http_server_is_stopping(s->http) ? "draining"
                        : s->ready ? "ok" : "loading";
    char body[160];
    int n, code = strcmp(state, "ok") == 0 ? 200 : 503;
    if (code == 200 && s->backend.ranks) {
        /* Worker processes: degraded while some are down (still serving), unavailable when
         * none is live. */
        wf_server_rank r[WF_SERVER_MAX_RANKS];
        int total = s->backend.ranks(s->backend.ctx, r, WF_SERVER_MAX_RANKS), live = 0;
        for (int i = 0; i < total && i < WF_SERVER_MAX_RANKS; i++) live += r[i].live;
        if (live == 0) state = "unavailable", code = 503;
        else if (live < total) state = "degraded";
        n = snprintf(body, sizeof body, "{\"status\":\"%s\",\"workers_live\":%d,\"workers_total\":%d}",
                     state, live, total);
    } else {
        n = snprintf(body, sizeof body, "{\"status\":\"%s\"}", state);
    }
    wf__server_respond(s, req, code, "application/json", code == 200 ? NULL : "Retry-After: 5\r\n",
                       body, (size_t)n);
}

static void write_model(wf_server *s, wf_jbuf *b) {
    wf_jbuf_cstr(b, "{\"id\":");
    wf_jbuf_str(b, s->model_id, strlen(s->model_id));
    wf_jbuf_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"weft\",\"max_model_len\":%d}",
                   (long long)s->created_unix, s->ready ? s->model.n_ctx : 0);
}

static void write_image_model(wf_server *s, wf_jbuf *b, const wf_server_image_model *m) {
    wf_jbuf_cstr(b, "{\"id\":");
    wf_jbuf_str(b, m->id, strlen(m->id));
    wf_jbuf_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"weft\","
                      "\"type\":\"image\",\"size\":\"%dx%d\",\"num_classes\":%d",
                   (long long)s->created_unix, m->geometry.width, m->geometry.height, m->num_classes);
    /* other sizes: sides multiples of size_multiple, at most max_pixels pixels */
    if (m->geometry.size_multiple > 0)
        wf_jbuf_printf(b, ",\"size_multiple\":%d,\"max_pixels\":%ld", m->geometry.size_multiple,
                       m->geometry.max_pixels);
    wf_jbuf_cstr(b, "}");
}

static void h_models(wf_server *s, wf_http_request *req) {
    wf_jbuf b = {0};
    wf_jbuf_cstr(&b, "{\"object\":\"list\",\"data\":[");
    write_model(s, &b);
    for (int i = 0; i < s->n_image_models; i++) {
        wf_jbuf_cstr(&b, ",");
        write_image_model(s, &b, &s->image_models[i]);
    }
    wf__vm_write_models(s, &b);
    wf_jbuf_cstr(&b, "]}");
    respond_json(s, req, 200, &b);
    wf_jbuf_free(&b);
}

/* %XX decoding of a path segment (model ids such as "org/name" arrive as "org%2Fname").
 * Returns false on a malformed escape or when the result does not fit. */
static bool percent_decode(const char *in, char *out, size_t cap) {
    size_t n = 0;
    for (; *in; in++) {
        if (n + 1 >= cap) return false;
        if (*in != '%') {
            out[n++] = *in;
            continue;
        }
        if (!isxdigit((unsigned char)in[1]) || !isxdigit((unsigned char)in[2])) return false;
        char hex[3] = {in[1], in[2], 0};
        out[n++] = (char)strtol(hex, NULL, 16);
        in += 2;
    }
    out[n] = '\0';
    return memchr(out, '\0', n) == NULL;
}

static void h_model(wf_server *s, wf_http_request *req) {
    const char *raw = wf_http_request_path(req) + strlen("/v1/models/");
    char id[sizeof s->model_id + 1];
    if (!percent_decode(raw, id, sizeof id)) {
        wf__server_error(s, req, 404, "invalid_request_error", "model", "model_not_found", 0,
                         "The model '%.200s' does not exist", raw);
        return;
    }
    const wf_server_image_model *im = wf__images_find(s, id);
    if (im) {
        wf_jbuf b = {0};
        write_image_model(s, &b, im);
        respond_json(s, req, 200, &b);
        wf_jbuf_free(&b);
        return;
    }
    wf_jbuf b = {0};
    if (strcmp(id, s->model_id) != 0 && !wf__vm_write_model(s, &b, id)) {
        wf_jbuf_free(&b);
        wf__server_error(s, req, 404, "invalid_request_error", "model", "model_not_found", 0,
                         "The model '%.200s' does not exist", id);
        return;
    }
    if (strcmp(id, s->model_id) == 0) write_model(s, &b);
    respond_json(s, req, 200, &b);
    wf_jbuf_free(&b);
}

static bool require_ready(wf_server *s, wf_http_request *req) {
    if (s->ready) return true;
    wf__server_error(s, req, 503, "server_error", NULL, NULL, 5, "the model is still loading");
    return false;
}

static json_t *parse_body(wf_server *s, wf_http_request *req) {
    size_t len;
    const char *body = wf_http_request_body(req, &len);
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root) {
        wf__server_error(s, req, 400, "invalid_request_error", NULL, NULL, 0,
                         "the request body is not valid JSON: %s (line %d, column %d)",
                         wf_openai_json_error_text(jerr.text),
                         jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        wf__server_error(s, req, 400, "invalid_request_error", NULL, NULL, 0,
                         "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

static bool opt_bool(wf_server *s, wf_http_request *req, json_t *root, const char *name, bool def,
                     bool *out) {
    json_t *v = json_object_get(root, name);
    if (!v || json_is_null(v)) {
        *out = def;
        return true;
    }
    if (!json_is_boolean(v)) {
        wf__server_error(s, req, 400, "invalid_request_error", name, NULL, 0, "'%s' must be true or false", name);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

/* llama.cpp server shape: {"content": "...", "add_special": false, "parse_special": true,
 * "with_pieces": false} -> {"tokens": [...]} or {"tokens": [{"id":..,"piece":".."}]} */
static void h_tokenize(wf_server *s, wf_http_request *req) {
    if (!require_ready(s, req)) return;
    json_t *root = parse_body(s, req);
    if (!root) return;
    wf_jbuf b = {0};
    int32_t *ids = NULL;
    json_t *content = json_object_get(root, "content");
    bool add_special, parse_special, with_pieces;
    if (!json_is_string(content)) {
        wf__server_error(s, req, 400, "invalid_request_error", "content", NULL, 0, "'content' must be a string");
        goto done;
    }
    if (!opt_bool(s, req, root, "add_special", false, &add_special) ||
        !opt_bool(s, req, root, "parse_special", true, &parse_special) ||
        !opt_bool(s, req, root, "with_pieces", false, &with_pieces))
        goto done;
    size_t len = json_string_length(content);
    int cap = (int)(len < (1u << 26) ? len : (1u << 26)) + 16, n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(ids);
        ids = malloc((size_t)cap * sizeof *ids);
        wf_status st = ids ? s->model.tokenize(s->model.ctx, json_string_value(content), len, add_special,
                                               parse_special, ids, cap, &n)
                           : WF_ENOMEM;
        if (st != WF_OK) {
            wf__server_error(s, req, 503, "server_error", NULL, NULL, 1, "tokenization failed: %s", wf_status_str(st));
            goto done;
        }
        if (n <= cap) break;
        cap = n;
    }
    wf_jbuf_cstr(&b, "{\"tokens\":[");
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            wf_jbuf_printf(&b, i ? ",%d" : "%d", (int)ids[i]);
            continue;
        }
        char piece[256];
        int pn = s->model.piece(s->model.ctx, ids[i], piece, sizeof piece);
        if (pn < 0 || pn > (int)sizeof piece) pn = 0;
        wf_jbuf_printf(&b, "%s{\"id\":%d,\"piece\":", i ? "," : "", (int)ids[i]);
        wf_jbuf_str(&b, piece, (size_t)pn);
        wf_jbuf_cstr(&b, "}");
    }
    wf_jbuf_cstr(&b, "]}");
    respond_json(s, req, 200, &b);
done:
    free(ids);
    wf_jbuf_free(&b);
    json_decref(root);
}

/* {"tokens": [ids]} -> {"content": "..."} */
static void h_detokenize(wf_server *s, wf_http_request *req) {
    if (!require_ready(s, req)) return;
    json_t *root = parse_body(s, req);
    if (!root) return;
    wf_jbuf text = {0}, b = {0};
    json_t *tokens = json_object_get(root, "tokens");
    if (!json_is_array(tokens)) {
        wf__server_error(s, req, 400, "invalid_request_error", "tokens", NULL, 0, "'tokens' must be an array of token ids");
        goto done;
    }
    _Alignas(16) unsigned char detok[WF_SERVER_DETOK_MAX];
    s->model.detok_init(s->model.ctx, detok);
    size_t i;
    json_t *t;
    char piece[512];
    json_array_foreach(tokens, i, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= s->model.n_vocab) {
            wf__server_error(s, req, 400, "invalid_request_error", "tokens", NULL, 0,
                             "'tokens[%zu]' must be a token id in [0, %d)", i, s->model.n_vocab);
            goto done;
        }
        int n = s->model.detok_push(s->model.ctx, detok, (int32_t)json_integer_value(t), piece, sizeof piece);
        if (n > 0) wf_jbuf_raw(&text, piece, (size_t)n);
    }
    int n = s->model.detok_flush(s->model.ctx, detok, piece, sizeof piece);
    if (n > 0) wf_jbuf_raw(&text, piece, (size_t)n);
    wf_jbuf_cstr(&b, "{\"content\":");
    wf_jbuf_str(&b, text.data ? text.data : "", text.len);
    wf_jbuf_cstr(&b, "}");
    respond_json(s, req, 200, &b);
done:
    wf_jbuf_free(&text);
    wf_jbuf_free(&b);
    json_decref(root);
}

static void h_metrics(wf_server *s, wf_http_request *req) {
    wf_sched_stats st;
    memset(&st, 0, sizeof st);
    if (s->ready) s->backend.stats(s->backend.ctx, &st);
    wf_jbuf b = {0};
    wf_metrics_render(&s->metrics, s->model_id, s->ready ? &st : NULL, &b);
    if (s->ready && s->images) {
        /* Indexed by scheduler model id, as the metrics are. */
        wf_image_sched_stats ist[WF_METRICS_MAX_IMAGE_MODELS];
        const char *names[WF_METRICS_MAX_IMAGE_MODELS] = {0};
        int n = 0;
        for (int i = 0; i < s->n_image_models; i++) {
            int id = s->image_models[i].sched_model;
            if (id < 0 || id >= WF_METRICS_MAX_IMAGE_MODELS) continue;
            names[id] = s->image_models[i].id;
            if (!wf_image_sched_get_model_stats(s->images, id, &ist[id])) memset(&ist[id], 0, sizeof ist[id]);
            if (id + 1 > n) n = id + 1;
        }
        for (int i = 0; i < n; i++)
            if (!names[i]) { /* a scheduler model no route names: never counted, but keep ids aligned */
                names[i] = "unnamed";
                memset(&ist[i], 0, sizeof ist[i]);
            }
        wf_metrics_render_images(&s->metrics, names, ist, n, &b);
    }
    if (s->ready && s->backend.ranks) {
        wf_server_rank r[WF_SERVER_MAX_RANKS];
        int n = s->backend.ranks(s->backend.ctx, r, WF_SERVER_MAX_RANKS);
        /* With --workers one DiT is served (README), the one whose chunks the workers count. */
        wf_metrics_render_ranks(r, n < WF_SERVER_MAX_RANKS ? n : WF_SERVER_MAX_RANKS, s->model_id,
                                s->n_image_models > 0 ? s->image_models[0].id : NULL, &b);
    }
    wf__vm_write_metrics(s, &b);
    if (b.failed) wf__server_error(s, req, 503, "server_error", NULL, NULL, 1, "out of memory");
    else wf__server_respond(s, req, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.data, b.len);
    wf_jbuf_free(&b);
}

static void snapshot_fn(const wf_request_snapshot *snap, void *user) {
    wf_jbuf *b = user;
    if (b->len && b->data[b->len - 1] != '[') wf_jbuf_raw(b, ",", 1);
    wf_jbuf_cstr(b, "{\"id\":");
    wf_jbuf_str(b, snap->id, strnlen(snap->id, sizeof snap->id));
    wf_jbuf_printf(b, ",\"state\":\"%s\",\"prompt_tokens\":%d,\"generated_tokens\":%d,\"priority\":%d,\"age_ms\":",
                   wf_request_state_str(snap->state), snap->prompt_tokens, snap->generated_tokens,
                   snap->priority);
    wf_jbuf_num(b, snap->age_ms);
    wf_jbuf_cstr(b, "}");
}

/* ,"workers":[{per worker rank}] (weftd --workers) */
static void write_ranks(wf_server *s, wf_jbuf *b) {
    if (!s->backend.ranks) return;
    wf_server_rank r[WF_SERVER_MAX_RANKS];
    int n = s->backend.ranks(s->backend.ctx, r, WF_SERVER_MAX_RANKS);
    wf_jbuf_cstr(b, ",\"workers\":[");
    for (int i = 0; i < n && i < WF_SERVER_MAX_RANKS; i++) {
        wf_jbuf_printf(b, "%s{\"rank\":%d,\"state\":\"%s\",\"pid\":%d,\"incarnation\":%u,\"group\":%d,"
                       "\"cores\":", i ? "," : "", r[i].rank, r[i].state, r[i].pid, r[i].incarnation, r[i].group);
        wf_jbuf_str(b, r[i].cores, strnlen(r[i].cores, sizeof r[i].cores));
        wf_jbuf_printf(b, ",\"batches\":%llu,\"kv_blocks\":%u,\"restarts\":%d,\"last_heard_ms\":",
                       (unsigned long long)r[i].batches, r[i].kv_blocks, r[i].restarts);
        wf_jbuf_num(b, r[i].last_heard_ms);
        wf_jbuf_printf(b, ",\"prefix_queries\":%llu,\"prefix_hits\":%llu,\"kv_layers_early\":%llu",
                       (unsigned long long)r[i].prefix_queries, (unsigned long long)r[i].prefix_hits,
                       (unsigned long long)r[i].kv_layers_early);
        wf_jbuf_printf(b, ",\"role\":\"%s\",\"kv_blocks_used\":%u,\"transfers\":%llu,"
                       "\"transfers_failed\":%llu,\"transfer_bytes\":%llu,\"transfer_ms\":",
                       r[i].role[0] ? r[i].role : "worker", r[i].kv_blocks_used,
                       (unsigned long long)r[i].transfers, (unsigned long long)r[i].transfers_failed,
                       (unsigned long long)r[i].transfer_bytes);
        wf_jbuf_num(b, r[i].transfer_ms);
        wf_jbuf_printf(b, ",\"batches_in_flight\":%d,\"batches_running\":%d,\"frames_in\":%llu,"
                       "\"frames_out\":%llu,\"dit_chunks\":%llu,\"dit_cfg_chunks\":%llu",
                       r[i].batches_in_flight, r[i].batches_running, (unsigned long long)r[i].frames_in,
                       (unsigned long long)r[i].frames_out, (unsigned long long)r[i].dit_chunks,
                       (unsigned long long)r[i].dit_cfg_chunks);
        wf_jbuf_printf(b, ",\"dit_reshards\":%llu,\"dit_latent_bytes\":{\"worker\":%llu,\"from_rank0\":%llu,"
                       "\"to_rank0\":%llu,\"mid_trajectory_rank0\":%llu}",
                       (unsigned long long)r[i].dit_reshards, (unsigned long long)r[i].dit_reshard_bytes,
                       (unsigned long long)r[i].dit_from_home_bytes, (unsigned long long)r[i].dit_to_home_bytes,
                       (unsigned long long)r[i].dit_mid_home_bytes);
        wf_jbuf_printf(b, ",\"transfers_compressed\":%llu,\"codec_decisions\":{\"compress\":%llu,"
                       "\"link_fast\":%llu,\"no_profile\":%llu,\"cooling\":%llu},\"codec_last\":",
                       (unsigned long long)r[i].transfers_compressed,
                       (unsigned long long)r[i].codec_reasons[0], (unsigned long long)r[i].codec_reasons[1],
                       (unsigned long long)r[i].codec_reasons[2], (unsigned long long)r[i].codec_reasons[3]);
        wf_jbuf_str(b, r[i].codec_last, strnlen(r[i].codec_last, sizeof r[i].codec_last));
        wf_jbuf_cstr(b, ",\"codecs\":[");
        for (int c = 0; c < r[i].n_codecs; c++) {
            wf_jbuf_cstr(b, c ? ",{\"name\":" : "{\"name\":");
            wf_jbuf_str(b, r[i].codecs[c].name, strnlen(r[i].codecs[c].name, sizeof r[i].codecs[c].name));
            wf_jbuf_cstr(b, ",\"cr\":");
            wf_jbuf_num(b, r[i].codecs[c].cr);
            wf_jbuf_cstr(b, ",\"enc_gbps\":");
            wf_jbuf_num(b, r[i].codecs[c].enc_gbps);
            wf_jbuf_cstr(b, ",\"dec_gbps\":");
            wf_jbuf_num(b, r[i].codecs[c].dec_gbps);
            wf_jbuf_cstr(b, ",\"b_star_gbps\":");
            wf_jbuf_num(b, r[i].codecs[c].b_star_gbps);
            wf_jbuf_cstr(b, "}");
        }
        wf_jbuf_cstr(b, "]");
        wf_jbuf_cstr(b, ",\"last_error\":");
        if (r[i].last_error[0]) wf_jbuf_str(b, r[i].last_error, strnlen(r[i].last_error, sizeof r[i].last_error));
        else wf_jbuf_cstr(b, "null");
        wf_jbuf_cstr(b, "}");
    }
    wf_jbuf_cstr(b, "]");
}

/* One SLO class: counters since start and the sliding window. */
static void write_slo_class(wf_jbuf *b, const wf_slo_class *c, uint64_t now) {
    uint32_t done, met;
    wf_slo_class_window(c, now, &done, &met);
    wf_jbuf_printf(b, "\"finished\":%llu,\"met\":%llu,\"ttft_met\":%llu,\"tpot_met\":%llu,"
                   "\"window_finished\":%u,\"window_met\":%u,\"attainment\":",
                   (unsigned long long)c->finished, (unsigned long long)c->met,
                   (unsigned long long)c->ttft_met, (unsigned long long)c->tpot_met, done, met);
    wf_jbuf_num(b, done ? (double)met / done : 0);
    wf_jbuf_cstr(b, ",\"goodput_rps\":");
    wf_jbuf_num(b, (double)met / WF_SLO_WINDOW_S);
}

/* "slo":{"window_s":60,"default_ttft_ms":..,"overall":{..},"by_priority":[{"priority":P,..}]}, */
static void write_slo(wf_server *s, wf_jbuf *b) {
    uint64_t now = wf_clock_now_ns();
    const wf_metrics *m = &s->metrics;
    wf_jbuf_printf(b, "\"slo\":{\"window_s\":%d,\"default_ttft_ms\":", WF_SLO_WINDOW_S);
    wf_jbuf_num(b, s->opts.default_ttft_ms);
    wf_jbuf_cstr(b, ",\"default_tpot_ms\":");
    wf_jbuf_num(b, s->opts.default_tpot_ms);
    wf_jbuf_cstr(b, ",\"overall\":{");
    write_slo_class(b, &m->slo_all, now);
    wf_jbuf_cstr(b, "},\"by_priority\":[");
    for (int i = 0, k = 0; i < WF_SLO_CLASSES; i++) {
        if (!m->slo[i].used) continue;
        wf_jbuf_printf(b, "%s{\"priority\":%d,", k++ ? "," : "", m->slo[i].priority);
        write_slo_class(b, &m->slo[i], now);
        wf_jbuf_cstr(b, "}");
    }
    wf_jbuf_cstr(b, "]},");
}

/* ,"groups_live":N,"rerouted_total":N,"groups":[{per group}] */
static void write_groups(wf_jbuf *b, const wf_sched_stats *st) {
    wf_jbuf_printf(b, ",\"groups_live\":%d,\"rerouted_total\":%llu,\"groups\":[", st->groups_live,
                   (unsigned long long)st->rerouted_total);
    int n = st->n_groups < WF_SCHED_STATS_GROUPS ? st->n_groups : WF_SCHED_STATS_GROUPS;
    for (int i = 0; i < n; i++) {
        const wf_sched_group_stats *g = &st->groups[i];
        wf_jbuf_printf(b, "%s{\"id\":%d,\"slot\":%d,\"rank\":%d,\"live\":%s,\"executor\":", i ? "," : "",
                       g->id, g->slot, g->rank, g->live ? "true" : "false");
        wf_jbuf_str(b, g->executor, strnlen(g->executor, sizeof g->executor));
        wf_jbuf_printf(b, ",\"running\":%d,\"waiting\":%d,\"kv_blocks_used\":%d,\"kv_blocks_total\":%d,"
                       "\"kv_swa_blocks_used\":%d,\"kv_swa_blocks_total\":%d,\"kv_swa_blocks_released\":%llu,"
                       "\"batches_in_flight\":%d,\"iterations\":%llu,\"failed_batches\":%llu,"
                       "\"last_error\":",
                       g->running, g->waiting, g->kv_blocks_used, g->kv_blocks_total,
                       g->kv_swa_blocks_used, g->kv_swa_blocks_total,
                       (unsigned long long)g->kv_swa_released, g->batches_in_flight, (unsigned long long)g->iterations,
                       (unsigned long long)g->failed_batches);
        if (g->last_error[0]) wf_jbuf_str(b, g->last_error, strnlen(g->last_error, sizeof g->last_error));
        else wf_jbuf_cstr(b, "null");
        wf_jbuf_cstr(b, "}");
    }
    wf_jbuf_cstr(b, "]");
}

static void h_admin_stats(wf_server *s, wf_http_request *req) {
    wf_jbuf b = {0};
    const wf_metrics *m = &s->metrics;
    wf_jbuf_cstr(&b, "{\"version\":\"" WEFT_VERSION "\",\"model\":");
    wf_jbuf_str(&b, s->model_id, strlen(s->model_id));
    wf_jbuf_printf(&b, ",\"ready\":%s,\"draining\":%s,\"uptime_s\":",
                   s->ready ? "true" : "false", s->shutting_down ? "true" : "false");
    wf_jbuf_num(&b, (double)(wf_clock_now_ns() - s->started_ns) / 1e9);
    wf_jbuf_printf(&b, ",\"http\":{\"connections\":%d,\"active_requests\":%d},",
                   wf_http_server_connections(s->http), wf_http_server_active_requests(s->http));
    wf_jbuf_printf(&b, "\"totals\":{\"prompt_tokens\":%llu,\"generation_tokens\":%llu,"
                   "\"finished_stop\":%llu,\"finished_length\":%llu,\"aborted\":%llu,\"failed\":%llu,"
                   "\"rejected_overload\":%llu,\"rejected_full\":%llu},",
                   (unsigned long long)m->prompt_tokens, (unsigned long long)m->generation_tokens,
                   (unsigned long long)m->success_stop, (unsigned long long)m->success_length,
                   (unsigned long long)m->success_abort, (unsigned long long)m->success_error,
                   (unsigned long long)m->requests_rejected_overload,
                   (unsigned long long)m->requests_rejected_full);
    write_slo(s, &b);
    wf_jbuf_cstr(&b, "\"latency_s\":{");
    const struct { const char *name; const wf_histogram *h; } lat[] = {
        {"ttft", &m->ttft}, {"itl", &m->itl}, {"e2e", &m->e2e}, {"queue", &m->queue}};
    for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++) {
        wf_jbuf_printf(&b, "%s\"%s_mean\":", i ? "," : "", lat[i].name);
        wf_jbuf_num(&b, lat[i].h->count ? lat[i].h->sum / (double)lat[i].h->count : 0);
        wf_jbuf_printf(&b, ",\"%s_count\":%llu", lat[i].name, (unsigned long long)lat[i].h->count);
    }
    wf_jbuf_cstr(&b, "},\"scheduler\":");
    if (s->ready) {
        wf_sched_stats st;
        memset(&st, 0, sizeof st);
        s->backend.stats(s->backend.ctx, &st);
        wf_jbuf_printf(&b, "{\"running\":%d,\"waiting\":%d,\"preempted_total\":%d,\"kv_blocks_total\":%d,"
                       "\"kv_blocks_used\":%d,\"kv_usage\":",
                       st.running, st.waiting, st.preempted_total, st.kv_blocks_total, st.kv_blocks_used);
        wf_jbuf_num(&b, st.kv_usage);
        wf_jbuf_printf(&b, ",\"kv_blocks_cached\":%d,\"kv_swa_blocks_total\":%d,"
                       "\"kv_swa_blocks_used\":%d,\"kv_swa_blocks_cached\":%d,"
                       "\"kv_swa_blocks_released\":%llu",
                       st.kv_blocks_cached, st.kv_swa_blocks_total, st.kv_swa_blocks_used,
                       st.kv_swa_blocks_cached, (unsigned long long)st.kv_swa_released);
        wf_jbuf_printf(&b, ",\"prefix_queries\":%llu,\"prefix_hits\":%llu,\"iterations\":%llu,\"iteration_ms_avg\":",
                       (unsigned long long)st.prefix_queries, (unsigned long long)st.prefix_hits,
                       (unsigned long long)st.iterations);
        wf_jbuf_num(&b, st.iteration_ms_avg);
        wf_jbuf_cstr(&b, ",\"sched_overhead_ms_avg\":");
        wf_jbuf_num(&b, st.sched_overhead_ms_avg);
        write_groups(&b, &st);
        write_ranks(s, &b);
        wf_jbuf_cstr(&b, "}");
    } else {
        wf_jbuf_cstr(&b, "null");
    }
    wf__vm_write_admin(s, &b);
    wf_jbuf_cstr(&b, ",\"requests\":");
    wf__gen_write_admin(s, &b);
    wf__images_write_admin(s, &b);
    wf_jbuf_cstr(&b, ",\"scheduler_requests\":[");
    if (s->ready && s->backend.foreach_request) s->backend.foreach_request(s->backend.ctx, snapshot_fn, &b);
    wf_jbuf_cstr(&b, "]}");
    respond_json(s, req, 200, &b);
    wf_jbuf_free(&b);
}

static void h_admin(wf_server *s, wf_http_request *req) {
    wf__server_respond(s, req, 200, "text/html; charset=utf-8", "Cache-Control: no-cache\r\n",
                       wf_admin_page_html, strlen(wf_admin_page_html));
}

static void h_chat(wf_server *s, wf_http_request *req) { wf__gen_handle(s, req, WF_OPENAI_CHAT); }
static void h_completions(wf_server *s, wf_http_request *req) {
    wf__gen_handle(s, req, WF_OPENAI_COMPLETION);
}

/* ---- routing ---------------------------------------------------------------------------- */

typedef enum auth_kind { AUTH_NONE = 0, AUTH_KEY, AUTH_METRICS } auth_kind;

typedef struct route {
    const char *method;
    const char *path;
    bool prefix;
    auth_kind auth;
    void (*fn)(wf_server *s, wf_http_request *req);
    bool generates;            /* refused (503) while draining */
} route;

static const route routes[] = {
    {"GET", "/health", false, AUTH_NONE, h_health, false},
    {"GET", "/v1/models", false, AUTH_KEY, h_models, false},
    {"GET", "/v1/models/", true, AUTH_KEY, h_model, false},
    {"POST", "/v1/chat/completions", false, AUTH_KEY, h_chat, true},
    {"POST", "/v1/completions", false, AUTH_KEY, h_completions, true},
    {"POST", "/v1/images/generations", false, AUTH_KEY, wf__images_handle, true},
    {"POST", "/tokenize", false, AUTH_KEY, h_tokenize, false},
    {"POST", "/detokenize", false, AUTH_KEY, h_detokenize, false},
    {"GET", "/metrics", false, AUTH_METRICS, h_metrics, false},
    {"GET", "/admin/stats", false, AUTH_KEY, h_admin_stats, false},
    {"POST", "/admin/models", false, AUTH_KEY, wf__vm_h_post, false},
    {"DELETE", "/admin/models/", true, AUTH_KEY, wf__vm_h_delete, false},
    {"GET", "/admin", false, AUTH_KEY, h_admin, false},
};

static bool path_matches(const route *r, const char *path) {
    if (r->prefix) return strncmp(path, r->path, strlen(r->path)) == 0 && path[strlen(r->path)];
    return strcmp(path, r->path) == 0;
}

static void handle(wf_http_request *req, void *user) {
    wf_server *s = user;
    const char *method = wf_http_request_method(req);
    const char *path = wf_http_request_path(req);
    bool head = strcmp(method, "HEAD") == 0;
    char allow[64] = "";
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const route *r = &routes[i];
        if (!path_matches(r, path)) continue;
        if (strcmp(r->method, method) != 0 && !(head && strcmp(r->method, "GET") == 0)) {
            size_t n = strlen(allow);
            snprintf(allow + n, sizeof allow - n, "%s%s", n ? ", " : "", r->method);
            continue;
        }
        bool need_key = r->auth == AUTH_KEY || (r->auth == AUTH_METRICS && !s->opts.metrics_open);
        if (need_key && !wf_server_auth_ok(s->keys, s->n_keys, wf_http_request_header(req, "Authorization"))) {
            wf__server_error(s, req, 401, "invalid_request_error", NULL, "invalid_api_key", 0, "%s",
                             wf_http_request_header(req, "Authorization")
                                 ? "Incorrect API key provided."
                                 : "You didn't provide an API key. Pass it as 'Authorization: Bearer KEY'.");
            return;
        }
        if (r->generates && s->shutting_down) {
            wf__server_error(s, req, 503, "server_error", NULL, "draining", 5,
                             "the server is shutting down; retry on another replica");
            return;
        }
        r->fn(s, req);
        return;
    }
    if (allow[0]) {
        char extra[96];
        snprintf(extra, sizeof extra, "Allow: %s\r\n", allow);
        wf_openai_error e;
        wf_openai_error_set(&e, 405, "invalid_request_error", NULL, "method %s is not allowed on %s (allowed: %s)",
                            method, path, allow);
        wf_jbuf b = {0};
        wf_openai_write_error(&b, &e);
        wf__server_respond(s, req, 405, "application/json", extra, b.failed ? "{}" : b.data,
                           b.failed ? 2 : b.len);
        wf_jbuf_free(&b);
        return;
    }
    wf__server_error(s, req, 404, "invalid_request_error", NULL, "not_found", 0, "no route for %s %.200s",
                     method, path);
}

/* ---- events and lifecycle --------------------------------------------------------------- */

static void check_done(wf_server *s);

void wf_server_poll(wf_server *s) {
    wf_handoff_item *it = wf_handoff_take_all(&s->events);
    while (it) {
        wf_handoff_item *next = it->next;
        wf__gen_on_event(s, (wf_request_event *)it);
        it = next;
    }
    for (it = wf_handoff_take_all(&s->image_events); it;) {
        wf_handoff_item *next = it->next;
        wf__images_on_event(s, (wf_image_event *)it);
        it = next;
    }
    if (s->shutting_down) check_done(s);
}

static void on_wake(uv_async_t *a) { wf_server_poll(a->data); }

static void wake_loop(void *user) {
    wf_server *s = user;
    if (s->wake_on) uv_async_send(&s->wake);
}

wf_server *wf_server_new(uv_loop_t *loop, const wf_server_options *o) {
    wf_server *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->loop = loop;
    s->opts = *o;
    s->started_ns = wf_clock_now_ns();
    s->created_unix = (int64_t)time(NULL);
    snprintf(s->model_id, sizeof s->model_id, "%s", o->model_id ? o->model_id : "model");
    wf_metrics_init(&s->metrics);
    if (o->n_api_keys) {
        s->keys = calloc(o->n_api_keys + 1, sizeof *s->keys);
        if (!s->keys) goto fail;
        for (size_t i = 0; i < o->n_api_keys; i++)
            if (!(s->keys[s->n_keys++] = strdup(o->api_keys[i]))) goto fail;
    }
    s->opts.api_keys = s->keys;
    /* Bounded: when the loop falls behind, the scheduler keeps the events it cannot push and
     * retries (back-pressure, nothing dropped: sched/sched.h). */
    if (wf_handoff_init(&s->events, o->events_queue > 0 ? (size_t)o->events_queue : 0,
                        loop ? wake_loop : NULL, s) != WF_OK)
        goto fail;
    /* Unbounded: the image scheduler bounds requests and each sends a bounded number. */
    if (wf_handoff_init(&s->image_events, 0, loop ? wake_loop : NULL, s) != WF_OK) goto fail;
    if (loop) {
        uv_async_init(loop, &s->wake, on_wake);
        s->wake.data = s;
        s->wake_on = true;
    }
    s->http = wf_http_server_new(loop, &o->http, handle, s);
    if (!s->http) goto fail;
    wf_http_server_set_error_fn(s->http, http_error, s);
    return s;
fail:
    WF_LOG_ERROR("server", NULL, "out of memory creating the server");
    wf_server_free(s);
    return NULL;
}

wf_status wf_server_listen(wf_server *s, const char *host, int port, int *bound_port) {
    return wf_http_server_listen(s->http, host, port, bound_port);
}

void wf_server_set_ready(wf_server *s, const wf_server_model *model, const wf_server_backend *backend) {
    s->model = *model;
    s->backend = *backend;
    snprintf(s->model_id, sizeof s->model_id, "%s", model->id);
    s->model.id = s->model_id;
    s->ready = true;
}

void wf_server_set_failed(wf_server *s, const char *message) {
    snprintf(s->failed, sizeof s->failed, "%s", message);
}

wf_status wf_server_set_api_keys(wf_server *s, char *const *keys, size_t n_keys) {
    char **copy = calloc(n_keys + 1, sizeof *copy);
    if (!copy) return WF_ENOMEM;
    for (size_t i = 0; i < n_keys; i++) {
        if (!(copy[i] = strdup(keys[i]))) {
            for (size_t j = 0; j < i; j++) free(copy[j]);
            free(copy);
            return WF_ENOMEM;
        }
    }
    for (size_t i = 0; i < s->n_keys; i++) free(s->keys[i]);
    free(s->keys);
    s->keys = copy;
    s->n_keys = n_keys;
    s->opts.api_keys = copy;
    s->opts.n_api_keys = n_keys;
    return WF_OK;
}

wf_handoff *wf_server_events(wf_server *s) { return &s->events; }
wf_handoff *wf_server_image_events(wf_server *s) { return &s->image_events; }

void wf_server_set_images(wf_server *s, wf_image_sched *sched, const wf_server_image_model *models,
                          int n) {
    s->images = sched;
    s->n_image_models = n < WF_SERVER_MAX_IMAGE_MODELS ? n : WF_SERVER_MAX_IMAGE_MODELS;
    for (int i = 0; i < s->n_image_models; i++) s->image_models[i] = models[i];
}
void wf_server_set_dit_cost(wf_server *s, void (*fn)(void *ctx, wf_jbuf *b),
                            void (*observe)(void *ctx, int sched_model, int steps, bool guided, int group_size,
                                            double ms),
                            void *ctx) {
    s->dit_cost = fn;
    s->image_observe = observe;
    s->dit_cost_ctx = ctx;
}
wf_http_server *wf_server_http(wf_server *s) { return s->http; }

static void check_done(wf_server *s) {
    if (!s->done || !s->drained) return;
    if (s->n_gens > 0 || wf_http_server_active_requests(s->http) > 0) return;
    if (wf__vm_loads_pending(s) > 0) return; /* an adapter load's work thread still runs */
    void (*done)(void *) = s->done;
    s->done = NULL;
    if (s->done_timer_on) uv_timer_stop(&s->done_timer);
    done(s->done_user);
}

static void *drain_main(void *arg) {
    wf_server *s = arg;
    s->backend.drain(s->backend.ctx, s->opts.shutdown_timeout_ms);
    if (s->images) wf_image_sched_drain(s->images, s->opts.shutdown_timeout_ms);
    uv_async_send(&s->drain_async);
    return NULL;
}

static void on_drained(uv_async_t *a) {
    wf_server *s = a->data;
    if (s->drain_thread_on) {
        pthread_join(s->drain_thread, NULL);
        s->drain_thread_on = false;
    }
    s->drained = true;
    WF_LOG_INFO("server", NULL, "scheduler drained; %d response(s) still being written", s->n_gens);
    wf_server_poll(s);
    check_done(s);
}

static void on_done_timer(uv_timer_t *t) {
    wf_server *s = t->data;
    check_done(s);
}

void wf_server_shutdown(wf_server *s, void (*done)(void *user), void *user) {
    if (s->shutting_down) return;
    s->shutting_down = true;
    s->done = done;
    s->done_user = user;
    WF_LOG_INFO("server", NULL, "shutting down: draining %d request(s) within %d ms", s->n_gens,
                s->opts.shutdown_timeout_ms);
    wf_http_server_stop_accepting(s->http);
    if (!s->ready || !s->backend.drain) {
    no_drain:
        s->drained = true;
        check_done(s);
        return;
    }
    if (!s->loop) {
        s->backend.drain(s->backend.ctx, s->opts.shutdown_timeout_ms);
        s->drained = true;
        wf_server_poll(s);
        check_done(s);
        return;
    }
    uv_async_init(s->loop, &s->drain_async, on_drained);
    s->drain_async.data = s;
    s->drain_async_on = true;
    uv_timer_init(s->loop, &s->done_timer);
    s->done_timer.data = s;
    s->done_timer_on = true;
    uv_timer_start(&s->done_timer, on_done_timer, 20, 20);
    if (pthread_create(&s->drain_thread, NULL, drain_main, s) != 0) {
        WF_LOG_ERROR("server", NULL, "cannot start the drain thread: stopping now");
        goto no_drain;
    }
    s->drain_thread_on = true;
}

static void on_handle_closed(uv_handle_t *h) { (void)h; }

void wf_server_free(wf_server *s) {
    if (!s) return;
    if (s->drain_thread_on) {
        pthread_join(s->drain_thread, NULL);
        s->drain_thread_on = false;
    }
    /* adapter loads on work threads finish first: their completion touches the registry */
    while (s->loop && wf__vm_loads_pending(s) > 0) uv_run(s->loop, UV_RUN_ONCE);
    if (s->http) wf_http_server_free(s->http); /* aborts requests: generations get cancelled */
    s->http = NULL;
    /* Generations still waiting for FINISHED events: the backend is going away too, so
     * release what we hold and free them here. */
    wf_server_poll(s);
    wf__images_force_free(s);
    while (s->gens) {
        wf_gen *g = s->gens;
        wf__gen_force_free(s, g);
    }
    for (wf_handoff_item *it = wf_handoff_take_all(&s->image_events), *next; it; it = next) {
        next = it->next;
        wf_image_event_free((wf_image_event *)it);
    }
    wf_handoff_free(&s->image_events);
    wf_handoff_item *it = wf_handoff_take_all(&s->events);
    while (it) {
        wf_handoff_item *next = it->next;
        if (s->ready) s->backend.event_free(s->backend.ctx, (wf_request_event *)it);
        it = next;
    }
    wf__vm_free_all(s);
    wf_handoff_free(&s->events);
    if (s->wake_on) uv_close((uv_handle_t *)&s->wake, on_handle_closed);
    if (s->drain_async_on) uv_close((uv_handle_t *)&s->drain_async, on_handle_closed);
    if (s->done_timer_on) uv_close((uv_handle_t *)&s->done_timer, on_handle_closed);
    if (s->loop) uv_run(s->loop, UV_RUN_NOWAIT); /* let libuv finish the closes */
    for (size_t i = 0; i < s->n_keys; i++) free(s->keys[i]);
    free(s->keys);
    wf_jbuf_free(&s->scratch);
    free(s);
}
