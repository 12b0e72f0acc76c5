/* The OpenAI wire format, and nothing past it: decodes a /v1/chat/completions or
 * /v1/completions JSON body into native structs (a wf_request_spec plus what only the server
 * needs: messages, prompts, stop strings, streaming options), and writes the JSON the API
 * returns (responses, SSE chunks, logprobs, the error envelope) with a small JSON writer, so the
 * per-token streaming path does not build a document tree.
 *
 *     wf_openai_request r;
 *     wf_openai_error e;
 *     if (wf_openai_decode(WF_OPENAI_CHAT, body, len, &r, &e) != WF_OK)
 *         reply(e.status, e.message, e.param);   // 400 with the field named
 *     ... tokenize r.messages / r.prompts, then r.spec.prompt = ids ...
 *     wf_openai_request_free(&r);
 *
 * Pure functions: thread-safe, no global state. */
#ifndef WF_SERVER_OPENAI_H
#define WF_SERVER_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/request.h"
#include "proto/base/status.h"

#define WF_OPENAI_MAX_STOP 4

typedef enum wf_openai_kind { WF_OPENAI_CHAT = 0, WF_OPENAI_COMPLETION } wf_openai_kind;

typedef struct wf_openai_message {
    char *role;    /* system, user, assistant, tool ("developer" becomes "system") */
    char *content; /* text parts joined; "" for an assistant message without content */
} wf_openai_message;

typedef struct wf_openai_prompt {
    char *text;       /* a text prompt, or NULL when given as token ids */
    int32_t *tokens;
    int n_tokens;
} wf_openai_prompt;

typedef struct wf_openai_request {
    wf_openai_kind kind;
    char *model;                 /* NULL when absent */
    wf_openai_message *messages; /* chat */
    size_t n_messages;
    wf_openai_prompt *prompts;   /* completions: one generation (times n) per prompt */
    size_t n_prompts;
    char *stop[WF_OPENAI_MAX_STOP];
    int n_stop;
    bool stream;
    bool include_usage;          /* stream_options.include_usage */
    bool max_tokens_set;         /* else the server picks (chat: the context left) */
    char *user;
    wf_logit_bias *logit_bias;   /* owned; spec.sampling.logit_bias points here */
    wf_request_spec spec;        /* everything but the prompt (filled after tokenizing) */
} wf_openai_request;

typedef struct wf_openai_error {
    int status;         /* HTTP status */
    const char *type;   /* "invalid_request_error", ... */
    char param[64];     /* the offending field, or "" */
    char code[48];      /* OpenAI's code string, or "" */
    char message[320];
} wf_openai_error;

/* WF_OK, or WF_EINVAL with err filled (status 400, the field named). Checks JSON syntax and
 * UTF-8, types, ranges that need no model, and unsupported features. On error r needs no free;
 * on WF_OK free it with wf_openai_request_free. */
wf_status wf_openai_decode(wf_openai_kind kind, const char *body, size_t len,
                           wf_openai_request *r, wf_openai_error *err);
void wf_openai_request_free(wf_openai_request *r);

/* jansson's parse error text as a client may read it (no library flag names). */
const char *wf_openai_json_error_text(const char *text);
void wf_openai_error_set(wf_openai_error *e, int status, const char *type, const char *param,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* --- a growable JSON text buffer ------------------------------------------------------- */
typedef struct wf_jbuf {
    char *data;
    size_t len, cap;
    bool failed; /* an allocation failed: the text is incomplete */
} wf_jbuf;

void wf_jbuf_reset(wf_jbuf *b);       /* len = 0, keeps memory */
void wf_jbuf_free(wf_jbuf *b);
void wf_jbuf_raw(wf_jbuf *b, const char *s, size_t n);
void wf_jbuf_cstr(wf_jbuf *b, const char *s); /* raw, NUL-terminated */
void wf_jbuf_printf(wf_jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string literal: quotes, escapes; invalid UTF-8 becomes U+FFFD. */
void wf_jbuf_str(wf_jbuf *b, const char *s, size_t n);
/* A float as JSON (non-finite values as -9999.0, which OpenAI uses for "impossible"). */
void wf_jbuf_num(wf_jbuf *b, double v);

/* --- response pieces -------------------------------------------------------------------- */
/* {"error":{"message":...,"type":...,"param":...|null,"code":...|null}} */
void wf_openai_write_error(wf_jbuf *b, const wf_openai_error *e);

/* The bytes of a token as the client sees it (may be part of a UTF-8 character). */
typedef int (*wf_openai_piece_fn)(void *ctx, int32_t token, char *buf, int cap);

/* One generated position's logprobs, shaped for kind:
 * chat:        {"token":..,"logprob":..,"bytes":[..],"top_logprobs":[{..},..]}
 * completions: appended to the four arrays of wf_openai_completion_logprobs (see below). */
void wf_openai_write_chat_logprob(wf_jbuf *b, const wf_generated_token *t, wf_openai_piece_fn piece,
                                  void *ctx);
/* {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{tok:lp,..},..],"text_offset":[..]} for
 * n positions; text_offset[i] is the offset of token i in the choice's text. */
void wf_openai_write_completion_logprobs(wf_jbuf *b, const wf_generated_token *t,
                                         const int *text_offset, int n, wf_openai_piece_fn piece,
                                         void *ctx);
/* "usage":{...} member (without a leading comma). */
void wf_openai_write_usage(wf_jbuf *b, int prompt_tokens, int completion_tokens,
                           int cached_tokens);

#endif
