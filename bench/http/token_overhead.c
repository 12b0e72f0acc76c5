/* Front-end cost per streamed token: the real server code (loopback HTTP connection, generation
 * state, real detokenizer of the default model, stop-string matcher, SSE chunk JSON, chunked
 * framing) driven by a fake scheduler that pushes token events as fast as the loop takes them.
 * Prints ns per token for plain streaming, with stop strings, with logprobs, and non-streaming.
 * Built and run by bench/http/run.sh (not part of CMake). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "server/server.h"

static const wf_tokenizer *TOK;

static wf_status m_tokenize(void *c, const char *t, size_t n, bool as, bool ps, int32_t *o, int cap, int *no) {
    return wf_tokenizer_encode(TOK, t, n, as, ps, o, cap, no);
}
static int m_piece(void *c, int32_t id, char *b, int cap) { return wf_tokenizer_token_to_piece(TOK, id, false, b, cap); }
static wf_status m_chat(void *c, const wf_openai_message *m, size_t n, char **out, char *e, size_t el) {
    *out = strdup(m[n - 1].content);
    return WF_OK;
}
static void m_dinit(void *c, void *st) { wf_detokenizer_init(st, TOK); }
static int m_dpush(void *c, void *st, int32_t id, char *o, int cap) { return wf_detokenizer_push(st, id, o, cap); }
static int m_dflush(void *c, void *st, char *o, int cap) { return wf_detokenizer_flush(st, o, cap); }

struct wf_request { wf_handoff *events; void *user; int n; };
static struct wf_request REQ;
static wf_request_event *POOL; /* reused events: the fake scheduler allocates nothing per token */

static wf_status b_submit(void *c, const wf_request_spec *s, wf_handoff *ev, void *user, wf_request **out, wf_sched_reject *w) {
    REQ.events = ev;
    REQ.user = user;
    REQ.n = s->n;
    *out = &REQ;
    return WF_OK;
}
static void b_cancel(void *c, wf_request *r) {}
static void b_release(void *c, wf_request *r) {}
static void b_free(void *c, wf_request_event *e) {}
static void b_stats(void *c, wf_sched_stats *s) { memset(s, 0, sizeof *s); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double run(wf_server *s, const char *body, const int32_t *ids, int n_ids, int n_tokens) {
    wf_http_conn *c = wf_http_loopback_open(wf_server_http(s));
    char req[1024];
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
    wf_http_loopback_feed(c, req, (size_t)n);
    double t0 = now_s();
    for (int i = 0; i < n_tokens; i++) {
        wf_request_event *ev = &POOL[0];
        memset(ev, 0, offsetof(wf_request_event, token) + sizeof ev->token);
        ev->request = &REQ;
        ev->user = REQ.user;
        ev->kind = WF_EVENT_TOKEN;
        ev->token.token = ids[i % n_ids];
        ev->token.logprob = -0.25f;
        ev->token.n_top = 2;
        ev->token.top[0].token = ids[i % n_ids];
        ev->token.top[1].token = ids[(i + 1) % n_ids];
        wf_handoff_push(REQ.events, &ev->link);
        wf_server_poll(s);
        if ((i & 255) == 255) wf_http_loopback_clear(c); /* a client that keeps reading */
    }
    double dt = now_s() - t0;
    wf_request_event *fin = &POOL[1];
    memset(fin, 0, sizeof *fin);
    fin->request = &REQ;
    fin->user = REQ.user;
    fin->kind = WF_EVENT_FINISHED;
    fin->finish = WF_FINISH_LENGTH;
    wf_handoff_push(REQ.events, &fin->link);
    wf_server_poll(s);
    wf_http_loopback_free(c);
    return dt / n_tokens * 1e9;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int n_tokens = argc > 2 ? atoi(argv[2]) : 200000;
    char err[256];
    wf_gguf *g;
    wf_tokenizer *tok;
    if (wf_gguf_open(model, &g, err, sizeof err) != WF_OK || wf_tokenizer_from_gguf(g, &tok, err, sizeof err) != WF_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    TOK = tok;
    const char *text = "The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away, "
                       "there lived a king who loved numbers: 3.14159, 2.71828 and caf\xc3\xa9 \xe2\x82\xac 100.";
    int32_t ids[256];
    int n_ids = 0;
    wf_tokenizer_encode(tok, text, strlen(text), false, false, ids, 256, &n_ids);
    POOL = calloc(2, sizeof *POOL);
    wf_server_options o;
    wf_server_options_init(&o);
    wf_server *s = wf_server_new(NULL, &o);
    wf_server_model m = {.id = "bench", .n_vocab = wf_tokenizer_n_vocab(tok), .n_ctx = 1 << 20, .tokenize = m_tokenize,
                         .piece = m_piece, .chat = m_chat, .detok_size = sizeof(wf_detokenizer), .detok_init = m_dinit,
                         .detok_push = m_dpush, .detok_flush = m_dflush};
    wf_server_backend b = {.submit = b_submit, .cancel = b_cancel, .release = b_release, .event_free = b_free,
                           .stats = b_stats};
    wf_server_set_ready(s, &m, &b);
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"max_tokens\":%d,\"stream\":true}", n_tokens + 1);
    printf("stream                 %8.0f ns/token\n", run(s, body, ids, n_ids, n_tokens));
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"max_tokens\":%d,\"stream\":true,\"stop\":[\"zebra!\",\"###\"]}", n_tokens + 1);
    printf("stream + 2 stop strings %7.0f ns/token\n", run(s, body, ids, n_ids, n_tokens));
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"max_tokens\":%d,\"stream\":true,\"logprobs\":2}", n_tokens + 1);
    printf("stream + logprobs(2)   %8.0f ns/token\n", run(s, body, ids, n_ids, n_tokens));
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"max_tokens\":%d}", n_tokens + 1);
    printf("non-streaming          %8.0f ns/token\n", run(s, body, ids, n_ids, n_tokens));
    wf_server_free(s);
    wf_tokenizer_free(tok);
    wf_gguf_close(g);
    free(POOL);
    return 0;
}
