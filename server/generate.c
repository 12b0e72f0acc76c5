/* /v1/chat/completions and /v1/completions: decode, tokenize, check the context, submit one
 * scheduler request per prompt, then turn token events into text (detokenizer -> stop-string
 * matcher) and write SSE chunks or, at the end, one JSON response. A generation outlives its
 * HTTP request when the client goes away: it is cancelled and freed once the scheduler has
 * sent every FINISHED event and the handles are released (the only safe point). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/base/log.h"
#include "server/server_impl.h"

typedef struct gen_choice {
    _Alignas(16) unsigned char detok[WF_SERVER_DETOK_MAX];
    wf_stop stop;
    wf_jbuf text;               /* non-streaming: the text so far */
    wf_generated_token *lp;     /* non-streaming with logprobs */
    int *lp_off;
    int n_lp, cap_lp;
    int tokens;                 /* counted in usage (up to and including a stop match) */
    int emitted;                /* bytes of text sent or kept so far */
    bool done;
    wf_finish_reason finish;
    uint64_t first_ns, last_ns;
} gen_choice;

typedef struct gen_sub {
    wf_gen *g;
    int index;
    wf_request *req;            /* NULL once released, or if never submitted */
    int32_t *prompt;
    int n_prompt;
    int n_finished;
    int cached;
} gen_sub;

struct wf_gen {
    wf_server *s;
    wf_gen *prev, *next;
    wf_http_request *http;      /* NULL once answered or aborted */
    wf_openai_request oai;
    wf_openai_kind kind;
    char id[WF_REQUEST_ID_MAX];
    int64_t created;
    gen_sub *subs;
    int n_subs, live_subs;
    gen_choice *choices;
    int n_choices, per_sub;
    bool streaming;
    bool failed;
    bool aborted;
    uint64_t arrival_ns, first_token_ns;
    int prompt_tokens;
    uint32_t vm;                /* virtual model held (wf__vm_acquire), 0: the backbone */
};

/* The model name a response echoes: the virtual model the client named, or the backbone. */
static const char *gen_model(const wf_gen *g) {
    return g->vm && g->oai.model ? g->oai.model : g->s->model.id;
}

static const char *finish_str(wf_finish_reason r) {
    return r == WF_FINISH_LENGTH ? "length" : "stop";
}

/* ---- lifetime --------------------------------------------------------------------------- */

static void gen_free(wf_gen *g) {
    wf_server *s = g->s;
    if (g->prev) g->prev->next = g->next;
    else if (s->gens == g) s->gens = g->next;
    if (g->next) g->next->prev = g->prev;
    s->n_gens--;
    for (int i = 0; i < g->n_choices; i++) {
        wf_stop_free(&g->choices[i].stop);
        wf_jbuf_free(&g->choices[i].text);
        free(g->choices[i].lp);
        free(g->choices[i].lp_off);
    }
    for (int i = 0; i < g->n_subs; i++) free(g->subs[i].prompt);
    if (g->vm) {
        int gen_tokens = 0;
        for (int i = 0; i < g->n_choices; i++) gen_tokens += g->choices[i].tokens;
        wf__vm_release(s, g->vm, g->first_token_ns != 0, g->prompt_tokens, gen_tokens);
    }
    free(g->choices);
    free(g->subs);
    wf_openai_request_free(&g->oai);
    free(g);
}

static void cancel_all(wf_gen *g) {
    for (int i = 0; i < g->n_subs; i++)
        if (g->subs[i].req) g->s->backend.cancel(g->s->backend.ctx, g->subs[i].req);
}

static void on_abort(wf_http_request *req, void *user) {
    wf_gen *g = user;
    (void)req;
    WF_LOG_DEBUG("server", g->id, "client went away: cancelling");
    g->http = NULL;
    g->aborted = true;
    cancel_all(g);
    if (g->live_subs == 0) gen_free(g);
}

/* Ends the HTTP side with an error; the scheduler side winds down through cancel. */
static void gen_fail(wf_gen *g, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void gen_fail(wf_gen *g, int status, const char *type, const char *fmt, ...) {
    if (g->failed) return;
    g->failed = true;
    cancel_all(g);
    if (!g->http) return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    wf_http_request *req = g->http;
    g->http = NULL;
    wf_http_request_set_abort(req, NULL, NULL);
    if (g->streaming) {
        wf_openai_error e;
        wf_openai_error_set(&e, status, type, NULL, "%s", msg);
        wf_jbuf *b = &g->s->scratch;
        wf_jbuf_reset(b);
        wf_jbuf_cstr(b, "data: ");
        wf_openai_write_error(b, &e);
        wf_jbuf_cstr(b, "\n\n");
        wf_http_stream_write(req, b->data, b->len);
        wf_http_stream_end(req);
    } else {
        wf__server_error(g->s, req, status, type, NULL, NULL, 0, "%s", msg);
    }
}

/* ---- output ----------------------------------------------------------------------------- */

static void chunk_head(wf_gen *g, wf_jbuf *b, int index) {
    wf_jbuf_cstr(b, "data: {\"id\":");
    wf_jbuf_str(b, g->id, strlen(g->id));
    wf_jbuf_printf(b, ",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":",
                   g->kind == WF_OPENAI_CHAT ? "chat.completion.chunk" : "text_completion",
                   g->created);
    wf_jbuf_str(b, gen_model(g), strlen(gen_model(g)));
    wf_jbuf_printf(b, ",\"choices\":[{\"index\":%d,", index);
}

static void stream_chunk(wf_gen *g, int index, gen_choice *c, const char *text, size_t n,
                         const wf_generated_token *lp, const char *finish) {
    if (!g->http) return;
    wf_jbuf *b = &g->s->scratch;
    wf_jbuf_reset(b);
    chunk_head(g, b, index);
    if (g->kind == WF_OPENAI_CHAT) {
        wf_jbuf_cstr(b, "\"delta\":{");
        if (n || !finish) {
            wf_jbuf_cstr(b, "\"content\":");
            wf_jbuf_str(b, text, n);
        }
        wf_jbuf_cstr(b, "},\"logprobs\":");
        if (lp) {
            wf_jbuf_cstr(b, "{\"content\":[");
            wf_openai_write_chat_logprob(b, lp, g->s->model.piece, g->s->model.ctx);
            wf_jbuf_cstr(b, "]}");
        } else {
            wf_jbuf_cstr(b, "null");
        }
    } else {
        wf_jbuf_cstr(b, "\"text\":");
        wf_jbuf_str(b, text, n);
        wf_jbuf_cstr(b, ",\"logprobs\":");
        if (lp) {
            int off = c->emitted - (int)n;
            wf_openai_write_completion_logprobs(b, lp, &off, 1, g->s->model.piece, g->s->model.ctx);
        } else {
            wf_jbuf_cstr(b, "null");
        }
    }
    wf_jbuf_cstr(b, ",\"finish_reason\":");
    if (finish) wf_jbuf_str(b, finish, strlen(finish));
    else wf_jbuf_cstr(b, "null");
    wf_jbuf_cstr(b, "}]}\n\n");
    if (b->failed) {
        gen_fail(g, 503, "server_error", "out of memory writing the stream");
        return;
    }
    wf_http_stream_write(g->http, b->data, b->len);
}

static bool keep_logprob(gen_choice *c, const wf_generated_token *t, int offset) {
    if (c->n_lp == c->cap_lp) {
        int cap = c->cap_lp ? c->cap_lp * 2 : 16;
        wf_generated_token *lp = realloc(c->lp, (size_t)cap * sizeof *lp);
        if (!lp) return false;
        c->lp = lp;
        int *off = realloc(c->lp_off, (size_t)cap * sizeof *off);
        if (!off) return false;
        c->lp_off = off;
        c->cap_lp = cap;
    }
    c->lp[c->n_lp] = *t;
    c->lp_off[c->n_lp] = offset;
    c->n_lp++;
    return true;
}

/* New text of a choice (may be empty), with the token that produced it (logprobs). */
static void emit(wf_gen *g, int index, gen_choice *c, const char *text, size_t n,
                 const wf_generated_token *tok, const char *finish) {
    bool want_lp = tok && g->oai.spec.sampling.logprobs;
    int offset = c->emitted;
    c->emitted += (int)n;
    if (g->streaming) {
        if (n || want_lp || finish) stream_chunk(g, index, c, text, n, want_lp ? tok : NULL, finish);
        return;
    }
    wf_jbuf_raw(&c->text, text, n);
    if ((want_lp && !keep_logprob(c, tok, offset)) || c->text.failed)
        gen_fail(g, 503, "server_error", "out of memory collecting the completion");
}

static void write_response(wf_gen *g, wf_jbuf *b) {
    wf_server *s = g->s;
    bool chat = g->kind == WF_OPENAI_CHAT;
    wf_jbuf_cstr(b, "{\"id\":");
    wf_jbuf_str(b, g->id, strlen(g->id));
    wf_jbuf_printf(b, ",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":",
                   chat ? "chat.completion" : "text_completion", g->created);
    wf_jbuf_str(b, gen_model(g), strlen(gen_model(g)));
    wf_jbuf_cstr(b, ",\"system_fingerprint\":null,\"choices\":[");
    int completion = 0, cached = 0;
    for (int i = 0; i < g->n_choices; i++) {
        gen_choice *c = &g->choices[i];
        completion += c->tokens;
        wf_jbuf_printf(b, "%s{\"index\":%d,", i ? "," : "", i);
        if (chat) {
            wf_jbuf_cstr(b, "\"message\":{\"role\":\"assistant\",\"content\":");
            wf_jbuf_str(b, c->text.data ? c->text.data : "", c->text.len);
            wf_jbuf_cstr(b, "},\"logprobs\":");
            if (g->oai.spec.sampling.logprobs) {
                wf_jbuf_cstr(b, "{\"content\":[");
                for (int k = 0; k < c->n_lp; k++) {
                    if (k) wf_jbuf_raw(b, ",", 1);
                    wf_openai_write_chat_logprob(b, &c->lp[k], s->model.piece, s->model.ctx);
                }
                wf_jbuf_cstr(b, "]}");
            } else {
                wf_jbuf_cstr(b, "null");
            }
        } else {
            wf_jbuf_cstr(b, "\"text\":");
            wf_jbuf_str(b, c->text.data ? c->text.data : "", c->text.len);
            wf_jbuf_cstr(b, ",\"logprobs\":");
            if (g->oai.spec.sampling.logprobs)
                wf_openai_write_completion_logprobs(b, c->lp, c->lp_off, c->n_lp, s->model.piece,
                                                    s->model.ctx);
            else
                wf_jbuf_cstr(b, "null");
        }
        wf_jbuf_printf(b, ",\"finish_reason\":\"%s\"}", finish_str(c->finish));
    }
    for (int i = 0; i < g->n_subs; i++) cached += g->subs[i].cached;
    wf_jbuf_cstr(b, "],");
    wf_openai_write_usage(b, g->prompt_tokens, completion, cached);
    wf_jbuf_cstr(b, "}");
}

/* Every choice of every prompt has finished and every handle is released. */
static void gen_complete(wf_gen *g) {
    wf_server *s = g->s;
    if (g->http) {
        wf_http_request *req = g->http;
        g->http = NULL;
        wf_http_request_set_abort(req, NULL, NULL);
        wf_jbuf *b = &s->scratch;
        wf_jbuf_reset(b);
        if (g->streaming) {
            if (g->oai.include_usage) {
                int completion = 0, cached = 0;
                for (int i = 0; i < g->n_choices; i++) completion += g->choices[i].tokens;
                for (int i = 0; i < g->n_subs; i++) cached += g->subs[i].cached;
                wf_jbuf_cstr(b, "data: {\"id\":");
                wf_jbuf_str(b, g->id, strlen(g->id));
                wf_jbuf_printf(b, ",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":",
                               g->kind == WF_OPENAI_CHAT ? "chat.completion.chunk" : "text_completion",
                               g->created);
                wf_jbuf_str(b, gen_model(g), strlen(gen_model(g)));
                wf_jbuf_cstr(b, ",\"choices\":[],");
                wf_openai_write_usage(b, g->prompt_tokens, completion, cached);
                wf_jbuf_cstr(b, "}\n\n");
            }
            wf_jbuf_cstr(b, "data: [DONE]\n\n");
            wf_http_stream_write(req, b->data, b->len);
            wf_http_stream_end(req);
        } else {
            write_response(g, b);
            if (b->failed)
                wf__server_error(s, req, 503, "server_error", NULL, NULL, 1, "out of memory writing the response");
            else
                wf__server_respond(s, req, 200, "application/json", NULL, b->data, b->len);
        }
    }
    gen_free(g);
}

/* ---- events ----------------------------------------------------------------------------- */

static bool sub_all_done(wf_gen *g, gen_sub *sub) {
    for (int k = 0; k < g->per_sub; k++)
        if (!g->choices[sub->index * g->per_sub + k].done) return false;
    return true;
}

static void on_token(wf_gen *g, gen_sub *sub, int index, gen_choice *c, const wf_request_event *ev) {
    wf_server *s = g->s;
    s->metrics.generation_tokens++;
    if (c->done || g->failed) return;
    c->tokens++;
    uint64_t t = ev->t_ns ? ev->t_ns : wf_clock_now_ns();
    if (!c->first_ns) {
        c->first_ns = t;
        if (!g->first_token_ns) {
            g->first_token_ns = t;
            if (g->vm) wf__vm_started(s, g->vm);
            wf_histogram_observe(&s->metrics.ttft, (double)(t - g->arrival_ns) / 1e9);
        }
    } else {
        wf_histogram_observe(&s->metrics.itl, (double)(t - c->last_ns) / 1e9);
    }
    c->last_ns = t;
    char piece[512];
    int n = s->model.detok_push(s->model.ctx, c->detok, ev->token.token, piece, sizeof piece);
    if (n < 0) n = 0;
    const char *out;
    size_t on;
    bool hit = wf_stop_push(&c->stop, piece, (size_t)n, &out, &on);
    if (hit) {
        c->done = true;
        c->finish = WF_FINISH_STOP;
    }
    emit(g, index, c, out, on, &ev->token, hit ? "stop" : NULL);
    if (hit && sub->req && sub_all_done(g, sub)) s->backend.cancel(s->backend.ctx, sub->req);
}

static int status_for(wf_status st) {
    switch (st) {
    case WF_EINVAL: case WF_ERANGE: return 400;
    case WF_EOVERLOAD: return 429;
    case WF_ENOMEM: case WF_EFULL: case WF_EBUSY: case WF_ETIMEDOUT: return 503;
    default: return 500;
    }
}

/* SLO attainment of one finished sequence: TTFT from the request's arrival to its first token,
 * TPOT over this sequence's tokens after the first; targets from the request's "slo" or the
 * server's defaults. A failed sequence missed both; a cancelled one (client gone, shutdown) is
 * not judged. */
static void judge_slo(wf_gen *g, const gen_choice *c, const wf_request_event *ev, uint64_t now) {
    wf_server *s = g->s;
    bool success = c->done && !g->failed && (c->finish == WF_FINISH_STOP || c->finish == WF_FINISH_LENGTH);
    bool error = ev->finish == WF_FINISH_ERROR || (ev->status != WF_OK && ev->status != WF_ECANCELLED);
    if (!success && !error) return;
    double ttft_target = g->oai.spec.slo.ttft_ms > 0 ? g->oai.spec.slo.ttft_ms : s->opts.default_ttft_ms;
    double tpot_target = g->oai.spec.slo.tpot_ms > 0 ? g->oai.spec.slo.tpot_ms : s->opts.default_tpot_ms;
    bool ttft_met = success && g->first_token_ns &&
                    (double)(g->first_token_ns - g->arrival_ns) / 1e6 <= ttft_target;
    bool tpot_met = success && (c->tokens < 2 ||
                                (double)(c->last_ns - c->first_ns) / 1e6 / (c->tokens - 1) <= tpot_target);
    wf_metrics_observe_slo(&s->metrics, g->oai.spec.priority, ttft_met, tpot_met, now);
}

static void on_finished(wf_gen *g, gen_sub *sub, int index, gen_choice *c, const wf_request_event *ev) {
    wf_server *s = g->s;
    sub->n_finished++;
    if (ev->usage.cached_prompt_tokens > sub->cached) sub->cached = ev->usage.cached_prompt_tokens;
    if (!c->done && !g->failed) {
        if (ev->finish == WF_FINISH_CANCELLED || ev->status == WF_ECANCELLED) {
            s->metrics.success_abort++;
            if (!g->aborted)
                gen_fail(g, 503, "server_error", "the request was cancelled: the server is shutting down");
        } else if (ev->status != WF_OK || ev->finish == WF_FINISH_ERROR) {
            s->metrics.success_error++;
            wf_status st = ev->status != WF_OK ? ev->status : WF_EINTERNAL;
            gen_fail(g, status_for(st), status_for(st) < 500 ? "invalid_request_error" : "server_error",
                     "generation failed: %s", ev->message[0] ? ev->message : wf_status_str(st));
        } else {
            char tail[512];
            int n = s->model.detok_flush(s->model.ctx, c->detok, tail, sizeof tail);
            const char *out;
            size_t on;
            bool hit = wf_stop_push(&c->stop, tail, n > 0 ? (size_t)n : 0, &out, &on);
            c->finish = hit ? WF_FINISH_STOP : ev->finish;
            if (!hit) {
                emit(g, index, c, out, on, NULL, NULL);
                const char *rest;
                size_t rn;
                wf_stop_flush(&c->stop, &rest, &rn);
                emit(g, index, c, rest, rn, NULL, finish_str(c->finish));
            } else {
                emit(g, index, c, out, on, NULL, "stop");
            }
            if (c->finish == WF_FINISH_LENGTH) s->metrics.success_length++;
            else s->metrics.success_stop++;
        }
        c->done = true;
    } else if (c->done && c->finish == WF_FINISH_STOP && ev->finish == WF_FINISH_CANCELLED) {
        s->metrics.success_stop++; /* our stop string ended it */
    }
    /* a choice that ended on a stop string keeps generating until the whole request is
     * cancelled: do that once every choice of this prompt is done */
    if (sub->req && sub->n_finished < g->per_sub && sub_all_done(g, sub)) s->backend.cancel(s->backend.ctx, sub->req);
    uint64_t t = ev->t_ns ? ev->t_ns : wf_clock_now_ns();
    const wf_request_times *tm = &ev->times;
    judge_slo(g, c, ev, t);
    wf_histogram_observe(&s->metrics.e2e, (double)(t - g->arrival_ns) / 1e9);
    wf_histogram_observe(&s->metrics.gen_len, c->tokens);
    if (c->tokens > 1 && c->last_ns > c->first_ns)
        wf_histogram_observe(&s->metrics.tpot, (double)(c->last_ns - c->first_ns) / 1e9 / (c->tokens - 1));
    if (tm->started_ns && tm->queued_ns && tm->started_ns >= tm->queued_ns)
        wf_histogram_observe(&s->metrics.queue, (double)(tm->started_ns - tm->queued_ns) / 1e9);
    if (tm->first_token_ns && tm->started_ns && tm->first_token_ns >= tm->started_ns)
        wf_histogram_observe(&s->metrics.prefill, (double)(tm->first_token_ns - tm->started_ns) / 1e9);
    if (tm->finished_ns && tm->first_token_ns && tm->finished_ns >= tm->first_token_ns)
        wf_histogram_observe(&s->metrics.decode, (double)(tm->finished_ns - tm->first_token_ns) / 1e9);
}

void wf__gen_on_event(wf_server *s, wf_request_event *ev) {
    gen_sub *sub = ev->user;
    wf_gen *g = sub ? sub->g : NULL;
    bool finished = ev->kind == WF_EVENT_FINISHED;
    if (!g || ev->choice < 0 || ev->choice >= g->per_sub) {
        WF_LOG_ERROR("server", NULL, "event for an unknown choice %d: dropped", ev->choice);
        s->backend.event_free(s->backend.ctx, ev);
        return;
    }
    int index = sub->index * g->per_sub + ev->choice;
    gen_choice *c = &g->choices[index];
    if (finished) on_finished(g, sub, index, c, ev);
    else on_token(g, sub, index, c, ev);
    s->backend.event_free(s->backend.ctx, ev); /* before release: the event refers to it */
    if (finished && sub->n_finished == g->per_sub && sub->req) {
        s->backend.release(s->backend.ctx, sub->req);
        sub->req = NULL;
        if (--g->live_subs == 0) gen_complete(g);
    }
}

/* ---- the request ------------------------------------------------------------------------ */

static wf_status tokenize(wf_server *s, const char *text, size_t len, int32_t **out, int *n_out) {
    int cap = (int)(len < (1u << 26) ? len : (1u << 26)) + 16;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) return WF_ENOMEM;
        int n = 0;
        wf_status st = s->model.tokenize(s->model.ctx, text, len, true, true, ids, cap, &n);
        if (st != WF_OK) {
            free(ids);
            return st;
        }
        if (n <= cap) {
            *out = ids;
            *n_out = n;
            return WF_OK;
        }
        free(ids);
        cap = n;
    }
    return WF_EINTERNAL;
}

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#define FAIL(status, type, param, code, ...)                                             \
    do {                                                                                 \
        wf__server_error(s, req, (status), (type), (param), (code), 0, __VA_ARGS__);     \
        gen_free(g);                                                                     \
        return;                                                                          \
    } while (0)

void wf__gen_handle(wf_server *s, wf_http_request *req, wf_openai_kind kind) {
    if (!s->ready) {
        wf__server_error(s, req, 503, "server_error", NULL, NULL, 5, "the model is still loading");
        return;
    }
    wf_gen *g = calloc(1, sizeof *g);
    if (!g) {
        wf__server_error(s, req, 503, "server_error", NULL, NULL, 1, "out of memory");
        return;
    }
    g->s = s;
    g->kind = kind;
    g->arrival_ns = wf_clock_now_ns();
    g->created = (int64_t)time(NULL);
    g->next = s->gens;
    if (s->gens) s->gens->prev = g;
    s->gens = g;
    s->n_gens++;
    snprintf(g->id, sizeof g->id, "%s-%016" PRIx64, kind == WF_OPENAI_CHAT ? "chatcmpl" : "cmpl",
             mix64(s->started_ns ^ ++s->next_id));

    size_t len;
    const char *body = wf_http_request_body(req, &len);
    wf_openai_error e;
    if (wf_openai_decode(kind, body, len, &g->oai, &e) != WF_OK)
        FAIL(e.status, e.type, e.param, NULL, "%s", e.message);
    wf_openai_request *o = &g->oai;
    if (o->model && wf__images_find(s, o->model))
        FAIL(400, "invalid_request_error", "model", NULL,
             "'%.200s' is an image model; use /v1/images/generations", o->model);
    const wf_server_vm *vm = NULL;
    if (o->model && strcmp(o->model, s->model.id) != 0) {
        char why[400];
        wf_status vst = wf__vm_acquire(s, o->model, &vm, why, sizeof why);
        if (vst == WF_EFULL) {
            s->metrics.requests_rejected_overload++;
            wf__server_error(s, req, 429, "rate_limit_error", "model", "quota_exceeded", 1, "%s",
                             why);
            gen_free(g);
            return;
        }
        if (vst != WF_OK)
            FAIL(404, "invalid_request_error", "model", "model_not_found",
                 "The model '%.200s' does not exist (this server serves '%.200s'%s)", o->model,
                 s->model.id, s->n_vms ? " and its virtual models: GET /v1/models" : "");
        g->vm = vm->num;
        /* its default sampling parameters, for the fields the request leaves unset: decoded
         * again from the merged body so every check applies to the result */
        char *merged;
        size_t mlen;
        if (wf_vmodel_spec_apply_defaults(&vm->spec, body, len, &merged, &mlen) != WF_OK)
            FAIL(503, "server_error", NULL, NULL, "out of memory");
        if (merged) {
            wf_openai_request_free(&g->oai);
            memset(&g->oai, 0, sizeof g->oai);
            wf_status dst = wf_openai_decode(kind, merged, mlen, &g->oai, &e);
            free(merged);
            if (dst != WF_OK) FAIL(e.status, e.type, e.param, NULL, "%s", e.message);
        }
        /* the virtual model's SLO class, for requests that state none */
        if (!(o->spec.slo.ttft_ms > 0) && vm->spec.ttft_ms > 0) o->spec.slo.ttft_ms = vm->spec.ttft_ms;
        if (!(o->spec.slo.tpot_ms > 0) && vm->spec.tpot_ms > 0) o->spec.slo.tpot_ms = vm->spec.tpot_ms;
    }

    g->n_subs = kind == WF_OPENAI_CHAT ? 1 : (int)o->n_prompts;
    g->subs = calloc((size_t)g->n_subs, sizeof *g->subs);
    if (!g->subs) FAIL(503, "server_error", NULL, NULL, "out of memory");
    for (int i = 0; i < g->n_subs; i++) {
        gen_sub *sub = &g->subs[i];
        sub->g = g;
        sub->index = i;
        wf_status st = WF_OK;
        if (kind == WF_OPENAI_CHAT) {
            char *text = NULL;
            char err[256] = "";
            if (vm && vm->spec.system &&
                (o->n_messages == 0 || strcmp(o->messages[0].role, "system") != 0)) {
                /* the virtual model's system prompt, unless the client sent its own */
                wf_openai_message *msgs = malloc((o->n_messages + 1) * sizeof *msgs);
                if (!msgs) FAIL(503, "server_error", NULL, NULL, "out of memory");
                msgs[0] = (wf_openai_message){.role = "system", .content = vm->spec.system};
                memcpy(msgs + 1, o->messages, o->n_messages * sizeof *msgs);
                st = s->model.chat(s->model.ctx, msgs, o->n_messages + 1, &text, err, sizeof err);
                free(msgs);
            } else {
                st = s->model.chat(s->model.ctx, o->messages, o->n_messages, &text, err, sizeof err);
            }
            if (st == WF_EINVAL)
                FAIL(400, "invalid_request_error", "messages", NULL, "'messages': %s", err[0] ? err : "rejected by the chat template");
            if (st == WF_OK) st = tokenize(s, text, strlen(text), &sub->prompt, &sub->n_prompt);
            free(text);
        } else if (o->prompts[i].text) {
            st = tokenize(s, o->prompts[i].text, strlen(o->prompts[i].text), &sub->prompt, &sub->n_prompt);
        } else {
            for (int k = 0; k < o->prompts[i].n_tokens; k++)
                if (o->prompts[i].tokens[k] >= s->model.n_vocab)
                    FAIL(400, "invalid_request_error", "prompt", NULL,
                         "'prompt' token id %d is outside the vocabulary [0, %d)",
                         (int)o->prompts[i].tokens[k], s->model.n_vocab);
            sub->prompt = o->prompts[i].tokens; /* take ownership */
            sub->n_prompt = o->prompts[i].n_tokens;
            o->prompts[i].tokens = NULL;
        }
        if (st != WF_OK)
            FAIL(st == WF_ENOMEM ? 503 : 500, "server_error", NULL, NULL, "tokenization failed: %s", wf_status_str(st));
        const char *what = kind == WF_OPENAI_CHAT ? "messages" : "prompt";
        if (sub->n_prompt == 0) FAIL(400, "invalid_request_error", what, NULL, "'%s' must not be empty", what);
        int n_ctx = s->model.n_ctx;
        if (sub->n_prompt >= n_ctx)
            FAIL(400, "invalid_request_error", what, "context_length_exceeded",
                 "This model's maximum context length is %d tokens. However, your %s resulted in %d tokens. "
                 "Please reduce the length of the %s.", n_ctx, what, sub->n_prompt, what);
        if (o->max_tokens_set && (long)sub->n_prompt + o->spec.max_tokens > n_ctx)
            FAIL(400, "invalid_request_error", what, "context_length_exceeded",
                 "This model's maximum context length is %d tokens. However, you requested %ld tokens "
                 "(%d in the %s, %d in the completion). Please reduce the length of the %s or completion.",
                 n_ctx, (long)sub->n_prompt + o->spec.max_tokens, sub->n_prompt, what, o->spec.max_tokens, what);
        g->prompt_tokens += sub->n_prompt;
        s->metrics.prompt_tokens += (uint64_t)sub->n_prompt;
        wf_histogram_observe(&s->metrics.prompt_len, sub->n_prompt);
    }

    /* the scheduler runs at most --max-running sequences, so a larger n could never start */
    if (s->opts.max_n > 0 && o->spec.n > s->opts.max_n)
        FAIL(400, "invalid_request_error", "n", NULL,
             "'n' must be between 1 and %d on this server (--max-running), got %d", s->opts.max_n, o->spec.n);
    g->per_sub = o->spec.n;
    g->n_choices = g->n_subs * g->per_sub;
    g->choices = calloc((size_t)g->n_choices, sizeof *g->choices);
    if (!g->choices) FAIL(503, "server_error", NULL, NULL, "out of memory");
    for (int i = 0; i < g->n_choices; i++) {
        s->model.detok_init(s->model.ctx, g->choices[i].detok);
        wf_stop_init(&g->choices[i].stop, o->stop, o->n_stop);
    }
    /* validate every prompt's spec before submitting any */
    for (int i = 0; i < g->n_subs; i++) {
        wf_request_spec spec = o->spec;
        spec.prompt = g->subs[i].prompt;
        spec.n_prompt = g->subs[i].n_prompt;
        int left = s->model.n_ctx - spec.n_prompt;
        if (!o->max_tokens_set) spec.max_tokens = kind == WF_OPENAI_CHAT ? left : (left < 16 ? left : 16);
        char err[256];
        if (wf_request_spec_validate(&spec, s->model.n_vocab, err, sizeof err) != WF_OK) {
            /* every message starts with the field's name in quotes: that is the param */
            char param[32] = "";
            const char *q = err[0] == '\'' ? strchr(err + 1, '\'') : NULL;
            if (q && (size_t)(q - err - 1) < sizeof param) memcpy(param, err + 1, (size_t)(q - err - 1));
            FAIL(400, "invalid_request_error", param[0] ? param : NULL, NULL, "%s", err);
        }
    }
    g->streaming = o->stream;
    g->http = req;
    wf_http_request_set_abort(req, on_abort, g);
    for (int i = 0; i < g->n_subs; i++) {
        gen_sub *sub = &g->subs[i];
        wf_request_spec spec = o->spec;
        spec.prompt = sub->prompt;
        spec.n_prompt = sub->n_prompt;
        spec.model = vm ? vm->spec.id : s->model.id;
        spec.vmodel = vm ? vm->num : 0;
        spec.prefix_salt = vm ? vm->salt : 0;
        spec.share_weight = vm ? vm->spec.weight : 1.0;
        spec.vm_max_running = vm ? vm->spec.max_running : 0;
        int left = s->model.n_ctx - spec.n_prompt;
        if (!o->max_tokens_set) spec.max_tokens = kind == WF_OPENAI_CHAT ? left : (left < 16 ? left : 16);
        snprintf(spec.id, sizeof spec.id, "%s", g->id);
        if (g->n_subs > 1) {
            char suffix[16];
            snprintf(suffix, sizeof suffix, "-%d", i);
            size_t l = strlen(spec.id);
            if (l + strlen(suffix) < sizeof spec.id) memcpy(spec.id + l, suffix, strlen(suffix) + 1);
        }
        wf_sched_reject why;
        memset(&why, 0, sizeof why);
        wf_status st = s->backend.submit(s->backend.ctx, &spec, &s->events, sub, &sub->req, &why);
        if (st == WF_OK) {
            g->live_subs++;
            continue;
        }
        sub->req = NULL;
        wf_http_request_set_abort(req, NULL, NULL);
        g->http = NULL;
        cancel_all(g);
        const char *msg = why.message[0] ? why.message : wf_status_str(st);
        if (st == WF_EOVERLOAD) {
            s->metrics.requests_rejected_overload++;
            wf__server_error(s, req, 429, "rate_limit_error", NULL, "overloaded",
                             why.retry_after_s > 0 ? why.retry_after_s : 1,
                             "the server cannot meet this request's latency target now: %s", msg);
        } else if (st == WF_EFULL || st == WF_EBUSY) {
            s->metrics.requests_rejected_full++;
            wf__server_error(s, req, 503, "server_error", NULL, NULL,
                             why.retry_after_s > 0 ? why.retry_after_s : 1, "the server is busy: %s", msg);
        } else if (st == WF_EINVAL || st == WF_ERANGE) {
            wf__server_error(s, req, 400, "invalid_request_error", NULL, NULL, 0, "%s", msg);
        } else {
            wf__server_error(s, req, status_for(st), "server_error", NULL, NULL, 0, "submit failed: %s", msg);
        }
        g->failed = true;
        if (g->live_subs == 0) gen_free(g);
        return;
    }
    WF_LOG_DEBUG("server", g->id, "%s: %d prompt(s), %d prompt tokens, n=%d, stream=%d",
                 kind == WF_OPENAI_CHAT ? "chat" : "completion", g->n_subs, g->prompt_tokens,
                 g->per_sub, g->streaming);
    if (g->streaming) {
        wf_http_stream_begin(req, 200, "text/event-stream",
                             "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
        wf__server_count_stream(s);
        if (kind == WF_OPENAI_CHAT) {
            for (int i = 0; i < g->n_choices && g->http; i++) {
                wf_jbuf *b = &s->scratch;
                wf_jbuf_reset(b);
                chunk_head(g, b, i);
                wf_jbuf_cstr(b, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                                "\"finish_reason\":null}]}\n\n");
                wf_http_stream_write(req, b->data, b->len);
            }
        }
    }
}

void wf__gen_write_admin(wf_server *s, wf_jbuf *b) {
    uint64_t now = wf_clock_now_ns();
    wf_jbuf_cstr(b, "[");
    int i = 0;
    for (wf_gen *g = s->gens; g; g = g->next, i++) {
        int tokens = 0, done = 0;
        for (int k = 0; k < g->n_choices; k++) {
            tokens += g->choices[k].tokens;
            done += g->choices[k].done;
        }
        const char *state = g->aborted ? "cancelling" : g->failed ? "failed"
                            : g->first_token_ns ? "generating" : "waiting";
        wf_jbuf_cstr(b, i ? ",{\"id\":" : "{\"id\":");
        wf_jbuf_str(b, g->id, strlen(g->id));
        wf_jbuf_cstr(b, ",\"model\":");
        wf_jbuf_str(b, gen_model(g), strlen(gen_model(g)));
        wf_jbuf_printf(b, ",\"endpoint\":\"%s\",\"state\":\"%s\",\"stream\":%s,\"prompts\":%d,\"n\":%d,"
                       "\"prompt_tokens\":%d,\"completion_tokens\":%d,\"choices_done\":%d,"
                       "\"age_ms\":%.1f,\"ttft_ms\":",
                       g->kind == WF_OPENAI_CHAT ? "chat" : "completions", state,
                       g->streaming ? "true" : "false", g->n_subs, g->per_sub, g->prompt_tokens,
                       tokens, done, (double)(now - g->arrival_ns) / 1e6);
        if (g->first_token_ns) wf_jbuf_num(b, (double)(g->first_token_ns - g->arrival_ns) / 1e6);
        else wf_jbuf_cstr(b, "null");
        wf_jbuf_cstr(b, "}");
    }
    wf_jbuf_cstr(b, "]");
}

void wf__gen_force_free(wf_server *s, wf_gen *g) {
    if (g->http) wf_http_request_set_abort(g->http, NULL, NULL);
    g->http = NULL;
    for (int i = 0; i < g->n_subs; i++)
        if (g->subs[i].req) {
            s->backend.cancel(s->backend.ctx, g->subs[i].req);
            s->backend.release(s->backend.ctx, g->subs[i].req);
            g->subs[i].req = NULL;
        }
    gen_free(g);
}
