/* OpenAI JSON <-> native structs. Decoding uses jansson (it validates UTF-8); encoding uses
 * wf_jbuf so streaming chunks are written straight into a reused buffer. */
#include "server/openai.h"

#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *wf_openai_json_error_text(const char *text) {
    /* jansson names its own flag ("...without JSON_ALLOW_NUL"): say what it means instead */
    if (strstr(text, "JSON_ALLOW_NUL")) return "\\u0000 (NUL) is not allowed in strings";
    return text;
}

void wf_openai_error_set(wf_openai_error *e, int status, const char *type, const char *param,
                         const char *fmt, ...) {
    e->status = status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->code[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

#define BAD(param, ...)                                                              \
    do {                                                                             \
        wf_openai_error_set(err, 400, "invalid_request_error", (param), __VA_ARGS__); \
        return WF_EINVAL;                                                            \
    } while (0)

static char *dup_str(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* ---- typed field getters: each names the field in its message ------------------------- */

static wf_status get_number(json_t *v, const char *name, double lo, double hi, double *out,
                            wf_openai_error *err) {
    if (!json_is_number(v)) BAD(name, "'%s' must be a number", name);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        BAD(name, "'%s' must be between %g and %g, got %g", name, lo, hi, d);
    *out = d;
    return WF_OK;
}

static wf_status get_int(json_t *v, const char *name, long long lo, long long hi, long long *out,
                         wf_openai_error *err) {
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9.2e18) {
        x = (long long)json_real_value(v); /* 16.0 is an integer too */
    } else if (json_is_real(v)) {
        BAD(name, "'%s' must be an integer, got %g", name, json_real_value(v));
    } else {
        BAD(name, "'%s' must be an integer", name);
    }
    if (x < lo || x > hi) BAD(name, "'%s' must be between %lld and %lld, got %lld", name, lo, hi, x);
    *out = x;
    return WF_OK;
}

static wf_status get_bool(json_t *v, const char *name, bool *out, wf_openai_error *err) {
    if (!json_is_boolean(v)) BAD(name, "'%s' must be true or false", name);
    *out = json_is_true(v);
    return WF_OK;
}

#define TRY(x)                              \
    do {                                    \
        wf_status st_ = (x);                \
        if (st_ != WF_OK) return st_;       \
    } while (0)

/* ---- content ---------------------------------------------------------------------------- */

/* A message's content: a string, null, or an array of {"type":"text","text":...} parts. */
static wf_status decode_content(json_t *c, size_t idx, char **out, wf_openai_error *err) {
    char name[48];
    snprintf(name, sizeof name, "messages[%zu].content", idx);
    if (!c || json_is_null(c)) {
        *out = dup_str("", 0);
        return *out ? WF_OK : WF_ENOMEM;
    }
    if (json_is_string(c)) {
        *out = dup_str(json_string_value(c), json_string_length(c));
        return *out ? WF_OK : WF_ENOMEM;
    }
    if (!json_is_array(c)) BAD(name, "'%s' must be a string or an array of content parts", name);
    size_t total = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type");
        if (!json_is_object(part) || !json_is_string(type))
            BAD(name, "'%s[%zu]' must be an object with a 'type'", name, i);
        if (strcmp(json_string_value(type), "text") != 0)
            BAD(name, "'%s[%zu]': content type '%s' is not supported by this model", name, i,
                json_string_value(type));
        json_t *text = json_object_get(part, "text");
        if (!json_is_string(text)) BAD(name, "'%s[%zu].text' must be a string", name, i);
        total += json_string_length(text);
    }
    char *s = malloc(total + 1);
    if (!s) return WF_ENOMEM;
    size_t off = 0;
    json_array_foreach(c, i, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(s + off, json_string_value(text), json_string_length(text));
        off += json_string_length(text);
    }
    s[off] = '\0';
    *out = s;
    return WF_OK;
}

static wf_status decode_messages(json_t *msgs, wf_openai_request *r, wf_openai_error *err) {
    if (!msgs) BAD("messages", "'messages' is required");
    if (!json_is_array(msgs)) BAD("messages", "'messages' must be an array");
    size_t n = json_array_size(msgs);
    if (n == 0) BAD("messages", "'messages' must not be empty");
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return WF_ENOMEM;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char name[48];
        snprintf(name, sizeof name, "messages[%zu]", i);
        if (!json_is_object(m)) BAD(name, "'%s' must be an object", name);
        json_t *role = json_object_get(m, "role");
        snprintf(name, sizeof name, "messages[%zu].role", i);
        if (!json_is_string(role)) BAD(name, "'%s' must be a string", name);
        const char *rs = json_string_value(role);
        if (strcmp(rs, "developer") == 0) rs = "system";
        /* no 'tool': tool calls are not supported, and no chat template here renders them */
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant"))
            BAD(name, "'%s' must be one of system, developer, user, assistant; got '%s'",
                name, json_string_value(role));
        r->messages[i].role = dup_str(rs, strlen(rs));
        r->n_messages = i + 1;
        if (!r->messages[i].role) return WF_ENOMEM;
        json_t *content = json_object_get(m, "content");
        if (!content && strcmp(rs, "assistant") != 0) {
            snprintf(name, sizeof name, "messages[%zu].content", i);
            BAD(name, "'%s' is required", name);
        }
        TRY(decode_content(content, i, &r->messages[i].content, err));
    }
    return WF_OK;
}

static wf_status decode_token_array(json_t *a, const char *name, wf_openai_prompt *p,
                                    wf_openai_error *err) {
    size_t n = json_array_size(a);
    if (n == 0) BAD(name, "'%s' must not be empty", name);
    if (n > (size_t)INT_MAX / 2) BAD(name, "'%s' is too long", name);
    p->tokens = malloc(n * sizeof *p->tokens);
    if (!p->tokens) return WF_ENOMEM;
    p->n_tokens = (int)n;
    size_t i;
    json_t *t;
    json_array_foreach(a, i, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            BAD(name, "'%s[%zu]' must be a non-negative integer token id", name, i);
        p->tokens[i] = (int32_t)json_integer_value(t);
    }
    return WF_OK;
}

/* prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...] */
static wf_status decode_prompt(json_t *p, wf_openai_request *r, wf_openai_error *err) {
    if (!p) BAD("prompt", "'prompt' is required");
    if (json_is_string(p)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return WF_ENOMEM;
        r->n_prompts = 1;
        r->prompts[0].text = dup_str(json_string_value(p), json_string_length(p));
        return r->prompts[0].text ? WF_OK : WF_ENOMEM;
    }
    if (!json_is_array(p))
        BAD("prompt", "'prompt' must be a string, an array of strings, or token ids");
    size_t n = json_array_size(p);
    if (n == 0) BAD("prompt", "'prompt' must not be empty");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) { /* one prompt of token ids */
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return WF_ENOMEM;
        r->n_prompts = 1;
        return decode_token_array(p, "prompt", &r->prompts[0], err);
    }
    if (n > 1024) BAD("prompt", "'prompt' holds %zu prompts; at most 1024 are allowed", n);
    r->prompts = calloc(n, sizeof *r->prompts);
    if (!r->prompts) return WF_ENOMEM;
    r->n_prompts = n;
    size_t i;
    json_t *e;
    json_array_foreach(p, i, e) {
        char name[32];
        snprintf(name, sizeof name, "prompt[%zu]", i);
        if (json_is_string(e)) {
            r->prompts[i].text = dup_str(json_string_value(e), json_string_length(e));
            if (!r->prompts[i].text) return WF_ENOMEM;
        } else if (json_is_array(e)) {
            TRY(decode_token_array(e, name, &r->prompts[i], err));
        } else {
            BAD(name, "'%s' must be a string or an array of token ids", name);
        }
    }
    return WF_OK;
}

static wf_status decode_stop(json_t *s, wf_openai_request *r, wf_openai_error *err) {
    if (!s || json_is_null(s)) return WF_OK;
    if (json_is_string(s)) {
        if (json_string_length(s) == 0) return WF_OK;
        r->stop[0] = dup_str(json_string_value(s), json_string_length(s));
        if (!r->stop[0]) return WF_ENOMEM;
        r->n_stop = 1;
        return WF_OK;
    }
    if (!json_is_array(s)) BAD("stop", "'stop' must be a string or an array of strings");
    if (json_array_size(s) > WF_OPENAI_MAX_STOP)
        BAD("stop", "'stop' holds %zu sequences; at most %d are allowed", json_array_size(s),
            WF_OPENAI_MAX_STOP);
    size_t i;
    json_t *e;
    json_array_foreach(s, i, e) {
        if (!json_is_string(e)) BAD("stop", "'stop[%zu]' must be a string", i);
        if (json_string_length(e) == 0) continue;
        if (json_string_length(e) > 1024) BAD("stop", "'stop[%zu]' is longer than 1024 bytes", i);
        r->stop[r->n_stop] = dup_str(json_string_value(e), json_string_length(e));
        if (!r->stop[r->n_stop]) return WF_ENOMEM;
        r->n_stop++;
    }
    return WF_OK;
}

static wf_status decode_logit_bias(json_t *lb, wf_openai_request *r, wf_openai_error *err) {
    if (!lb || json_is_null(lb)) return WF_OK;
    if (!json_is_object(lb)) BAD("logit_bias", "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(lb);
    if (n == 0) return WF_OK;
    if (n > 1024) BAD("logit_bias", "'logit_bias' holds %zu entries; at most 1024 are allowed", n);
    r->logit_bias = calloc(n, sizeof *r->logit_bias);
    if (!r->logit_bias) return WF_ENOMEM;
    const char *key;
    json_t *v;
    int i = 0;
    json_object_foreach(lb, key, v) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (end == key || *end || id < 0 || id > INT32_MAX)
            BAD("logit_bias", "'logit_bias' key '%.32s' is not a token id", key);
        if (!json_is_number(v)) BAD("logit_bias", "'logit_bias[%s]' must be a number", key);
        double b = json_number_value(v);
        if (!isfinite(b) || b < -100 || b > 100)
            BAD("logit_bias", "'logit_bias[%s]' must be between -100 and 100, got %g", key, b);
        r->logit_bias[i].token = (int32_t)id;
        r->logit_bias[i].bias = (float)b;
        i++;
    }
    r->spec.sampling.logit_bias = r->logit_bias;
    r->spec.sampling.n_logit_bias = i;
    return WF_OK;
}

static bool present(json_t *v) { return v && !json_is_null(v); }

static wf_status decode_fields(json_t *root, wf_openai_request *r, wf_openai_error *err) {
    wf_request_spec *spec = &r->spec;
    wf_sampling_params *s = &spec->sampling;
    bool chat = r->kind == WF_OPENAI_CHAT;
    json_t *v;
    double d;
    long long x;
    bool b = false; /* set by get_bool; the initialiser silences -Wmaybe-uninitialized at -O3 */

    if ((v = json_object_get(root, "model")) && !json_is_null(v)) {
        if (!json_is_string(v)) BAD("model", "'model' must be a string");
        if (!(r->model = dup_str(json_string_value(v), json_string_length(v)))) return WF_ENOMEM;
    }
    if (chat) TRY(decode_messages(json_object_get(root, "messages"), r, err));
    else TRY(decode_prompt(json_object_get(root, "prompt"), r, err));

    if (present(v = json_object_get(root, "max_tokens"))) {
        TRY(get_int(v, "max_tokens", 1, 1 << 24, &x, err));
        spec->max_tokens = (int)x;
        r->max_tokens_set = true;
    }
    if (chat && present(v = json_object_get(root, "max_completion_tokens"))) {
        TRY(get_int(v, "max_completion_tokens", 1, 1 << 24, &x, err));
        spec->max_tokens = (int)x;
        r->max_tokens_set = true;
    }
    if (present(v = json_object_get(root, "temperature"))) {
        TRY(get_number(v, "temperature", 0, 2, &d, err));
        s->temperature = (float)d;
    }
    if (present(v = json_object_get(root, "top_p"))) {
        TRY(get_number(v, "top_p", 0, 1, &d, err));
        if (d <= 0) BAD("top_p", "'top_p' must be in (0, 1], got %g", d);
        s->top_p = (float)d;
    }
    if (present(v = json_object_get(root, "top_k"))) {
        TRY(get_int(v, "top_k", -1, INT_MAX, &x, err));
        s->top_k = x < 0 ? 0 : (int)x; /* -1 means off, as in vLLM */
    }
    if (present(v = json_object_get(root, "min_p"))) {
        TRY(get_number(v, "min_p", 0, 1, &d, err));
        s->min_p = (float)d;
    }
    if (present(v = json_object_get(root, "presence_penalty"))) {
        TRY(get_number(v, "presence_penalty", -2, 2, &d, err));
        s->presence_penalty = (float)d;
    }
    if (present(v = json_object_get(root, "frequency_penalty"))) {
        TRY(get_number(v, "frequency_penalty", -2, 2, &d, err));
        s->frequency_penalty = (float)d;
    }
    if (present(v = json_object_get(root, "repetition_penalty"))) {
        TRY(get_number(v, "repetition_penalty", 0, 10, &d, err));
        if (d <= 0) BAD("repetition_penalty", "'repetition_penalty' must be in (0, 10], got %g", d);
        s->repetition_penalty = (float)d;
    }
    if (present(v = json_object_get(root, "seed"))) {
        TRY(get_int(v, "seed", LLONG_MIN, LLONG_MAX, &x, err));
        s->has_seed = true;
        s->seed = (uint64_t)x;
    }
    if (present(v = json_object_get(root, "n"))) {
        TRY(get_int(v, "n", 1, 128, &x, err));
        spec->n = (int)x;
    }
    if (present(v = json_object_get(root, "best_of"))) {
        TRY(get_int(v, "best_of", 1, 128, &x, err));
        if (x != spec->n) BAD("best_of", "'best_of' other than 'n' is not supported");
    }
    TRY(decode_stop(json_object_get(root, "stop"), r, err));
    TRY(decode_logit_bias(json_object_get(root, "logit_bias"), r, err));
    if (chat) {
        if (present(v = json_object_get(root, "logprobs"))) {
            TRY(get_bool(v, "logprobs", &b, err));
            s->logprobs = b;
        }
        if (present(v = json_object_get(root, "top_logprobs"))) {
            TRY(get_int(v, "top_logprobs", 0, WF_MAX_TOP_LOGPROBS, &x, err));
            if (!s->logprobs && x > 0)
                BAD("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
            s->top_logprobs = (int)x;
        }
    } else if (present(v = json_object_get(root, "logprobs"))) {
        /* completions: an integer, the number of alternatives (0 = only the chosen token) */
        TRY(get_int(v, "logprobs", 0, WF_MAX_TOP_LOGPROBS, &x, err));
        s->logprobs = true;
        s->top_logprobs = (int)x;
    }
    if (present(v = json_object_get(root, "stream"))) TRY(get_bool(v, "stream", &r->stream, err));
    if (present(v = json_object_get(root, "stream_options"))) {
        if (!json_is_object(v)) BAD("stream_options", "'stream_options' must be an object");
        if (!r->stream) BAD("stream_options", "'stream_options' is only allowed with 'stream': true");
        json_t *iu = json_object_get(v, "include_usage");
        if (present(iu)) TRY(get_bool(iu, "stream_options.include_usage", &r->include_usage, err));
    }
    if (present(v = json_object_get(root, "user"))) {
        if (!json_is_string(v)) BAD("user", "'user' must be a string");
        if (!(r->user = dup_str(json_string_value(v), json_string_length(v)))) return WF_ENOMEM;
    }
    if (present(v = json_object_get(root, "ignore_eos"))) TRY(get_bool(v, "ignore_eos", &spec->ignore_eos, err));
    if (present(v = json_object_get(root, "min_tokens"))) {
        TRY(get_int(v, "min_tokens", 0, 1 << 24, &x, err));
        spec->min_tokens = (int)x;
    }
    if (present(v = json_object_get(root, "kv_accuracy"))) {
        TRY(get_number(v, "kv_accuracy", 0, 1, &d, err));
        spec->kv_accuracy = (float)d;
    }
    if (present(v = json_object_get(root, "kv_codec"))) {
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) >= sizeof spec->kv_codec_name)
            BAD("kv_codec", "'kv_codec' must be \"auto\", \"off\" or the name of a KV profile");
        snprintf(spec->kv_codec_name, sizeof spec->kv_codec_name, "%s", json_string_value(v));
    }
    if (present(v = json_object_get(root, "priority"))) {
        TRY(get_int(v, "priority", -1000000, 1000000, &x, err));
        spec->priority = (int)x;
    }
    if (present(v = json_object_get(root, "slo"))) {
        if (!json_is_object(v)) BAD("slo", "'slo' must be an object with ttft_ms and tpot_ms");
        json_t *t = json_object_get(v, "ttft_ms");
        if (present(t)) {
            TRY(get_number(t, "slo.ttft_ms", 0, 1e9, &d, err));
            spec->slo.ttft_ms = d;
        }
        if (present(t = json_object_get(v, "tpot_ms"))) {
            TRY(get_number(t, "slo.tpot_ms", 0, 1e9, &d, err));
            spec->slo.tpot_ms = d;
        }
    }
    /* Features a client might rely on that weft does not implement: say so, never ignore. */
    if (present(v = json_object_get(root, "tools")) && (!json_is_array(v) || json_array_size(v)))
        BAD("tools", "'tools' (function calling) is not supported");
    if (present(v = json_object_get(root, "functions")))
        BAD("functions", "'functions' (function calling) is not supported");
    if (present(v = json_object_get(root, "response_format"))) {
        json_t *t = json_object_get(v, "type");
        if (!json_is_object(v) || !json_is_string(t) || strcmp(json_string_value(t), "text") != 0)
            BAD("response_format", "'response_format' other than {\"type\": \"text\"} is not supported");
    }
    if (present(v = json_object_get(root, "echo"))) {
        TRY(get_bool(v, "echo", &b, err));
        if (b) BAD("echo", "'echo' is not supported");
    }
    if (present(v = json_object_get(root, "suffix")))
        BAD("suffix", "'suffix' is not supported");
    if (spec->min_tokens > spec->max_tokens && r->max_tokens_set)
        BAD("min_tokens", "'min_tokens' (%d) must not exceed 'max_tokens' (%d)", spec->min_tokens,
            spec->max_tokens);
    return WF_OK;
}

wf_status wf_openai_decode(wf_openai_kind kind, const char *body, size_t len,
                           wf_openai_request *r, wf_openai_error *err) {
    memset(r, 0, sizeof *r);
    memset(err, 0, sizeof *err);
    r->kind = kind;
    wf_request_spec_init(&r->spec);
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root) {
        wf_openai_error_set(err, 400, "invalid_request_error", NULL,
                            "the request body is not valid JSON: %s (line %d, column %d)",
                            wf_openai_json_error_text(jerr.text), jerr.line, jerr.column);
        return WF_EINVAL;
    }
    wf_status st;
    if (!json_is_object(root)) {
        wf_openai_error_set(err, 400, "invalid_request_error", NULL,
                            "the request body must be a JSON object");
        st = WF_EINVAL;
    } else {
        st = decode_fields(root, r, err);
        if (st == WF_ENOMEM)
            wf_openai_error_set(err, 503, "server_error", NULL, "out of memory decoding the request");
    }
    json_decref(root);
    if (st != WF_OK) wf_openai_request_free(r);
    return st;
}

void wf_openai_request_free(wf_openai_request *r) {
    for (size_t i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    for (size_t i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].tokens);
    }
    free(r->prompts);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->model);
    free(r->user);
    free(r->logit_bias);
    memset(r, 0, sizeof *r);
}

/* ---- JSON writer ------------------------------------------------------------------------ */

static bool jb_reserve(wf_jbuf *b, size_t extra) {
    if (b->failed) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 512;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

void wf_jbuf_reset(wf_jbuf *b) {
    b->len = 0;
    b->failed = false;
    if (b->data) b->data[0] = '\0';
}

void wf_jbuf_free(wf_jbuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

void wf_jbuf_raw(wf_jbuf *b, const char *s, size_t n) {
    if (!jb_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void wf_jbuf_cstr(wf_jbuf *b, const char *s) { wf_jbuf_raw(b, s, strlen(s)); }

void wf_jbuf_printf(wf_jbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        wf_jbuf_raw(b, tmp, (size_t)n);
        return;
    }
    if (!jb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static int utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    unsigned cp = c & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

void wf_jbuf_str(wf_jbuf *b, const char *s, size_t n) {
    if (!jb_reserve(b, n + 2)) return;
    wf_jbuf_raw(b, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    size_t start = 0, i = 0;
    while (i < n) {
        unsigned char c = p[i];
        const char *esc = NULL;
        char ubuf[8];
        int adv = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
            esc = ubuf;
        } else if (c >= 0x80) {
            adv = utf8_len(p + i, n - i);
            if (adv == 0) {
                /* one U+FFFD per maximal invalid subpart: a truncated sequence counts once */
                esc = "\\ufffd";
                int want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
                adv = 1;
                if (c >= 0xC2 && c <= 0xF4)
                    while (adv < want && i + (size_t)adv < n && (p[i + (size_t)adv] & 0xC0) == 0x80) adv++;
            }
        }
        if (esc) {
            wf_jbuf_raw(b, s + start, i - start);
            wf_jbuf_cstr(b, esc);
            start = i + (size_t)adv;
        }
        i += (size_t)adv;
    }
    wf_jbuf_raw(b, s + start, n - start);
    wf_jbuf_raw(b, "\"", 1);
}

void wf_jbuf_num(wf_jbuf *b, double v) {
    if (!isfinite(v)) v = -9999.0;
    wf_jbuf_printf(b, "%.9g", v);
}

/* ---- response pieces -------------------------------------------------------------------- */

void wf_openai_write_error(wf_jbuf *b, const wf_openai_error *e) {
    wf_jbuf_cstr(b, "{\"error\":{\"message\":");
    wf_jbuf_str(b, e->message, strlen(e->message));
    wf_jbuf_cstr(b, ",\"type\":");
    const char *type = e->type ? e->type : "invalid_request_error";
    wf_jbuf_str(b, type, strlen(type));
    wf_jbuf_cstr(b, ",\"param\":");
    if (e->param[0]) wf_jbuf_str(b, e->param, strlen(e->param));
    else wf_jbuf_cstr(b, "null");
    wf_jbuf_cstr(b, ",\"code\":");
    if (e->code[0]) wf_jbuf_str(b, e->code, strlen(e->code));
    else wf_jbuf_cstr(b, "null");
    wf_jbuf_cstr(b, "}}");
}

static int piece_of(wf_openai_piece_fn piece, void *ctx, int32_t tok, char *buf, int cap) {
    int n = piece(ctx, tok, buf, cap);
    return n < 0 ? 0 : (n > cap ? cap : n);
}

static void write_bytes(wf_jbuf *b, const char *s, int n) {
    wf_jbuf_raw(b, "[", 1);
    for (int i = 0; i < n; i++) wf_jbuf_printf(b, i ? ",%u" : "%u", (unsigned char)s[i]);
    wf_jbuf_raw(b, "]", 1);
}

static void write_chat_entry(wf_jbuf *b, int32_t tok, float lp, wf_openai_piece_fn piece, void *ctx) {
    char text[256];
    int n = piece_of(piece, ctx, tok, text, sizeof text);
    wf_jbuf_cstr(b, "{\"token\":");
    wf_jbuf_str(b, text, (size_t)n);
    wf_jbuf_cstr(b, ",\"logprob\":");
    wf_jbuf_num(b, lp);
    wf_jbuf_cstr(b, ",\"bytes\":");
    write_bytes(b, text, n);
}

void wf_openai_write_chat_logprob(wf_jbuf *b, const wf_generated_token *t, wf_openai_piece_fn piece,
                                  void *ctx) {
    write_chat_entry(b, t->token, t->logprob, piece, ctx);
    wf_jbuf_cstr(b, ",\"top_logprobs\":[");
    for (int i = 0; i < t->n_top && i < WF_MAX_TOP_LOGPROBS; i++) {
        if (i) wf_jbuf_raw(b, ",", 1);
        write_chat_entry(b, t->top[i].token, t->top[i].logprob, piece, ctx);
        wf_jbuf_raw(b, "}", 1);
    }
    wf_jbuf_cstr(b, "]}");
}

void wf_openai_write_completion_logprobs(wf_jbuf *b, const wf_generated_token *t,
                                         const int *text_offset, int n, wf_openai_piece_fn piece,
                                         void *ctx) {
    char text[256];
    wf_jbuf_cstr(b, "{\"tokens\":[");
    for (int i = 0; i < n; i++) {
        if (i) wf_jbuf_raw(b, ",", 1);
        int len = piece_of(piece, ctx, t[i].token, text, sizeof text);
        wf_jbuf_str(b, text, (size_t)len);
    }
    wf_jbuf_cstr(b, "],\"token_logprobs\":[");
    for (int i = 0; i < n; i++) {
        if (i) wf_jbuf_raw(b, ",", 1);
        wf_jbuf_num(b, t[i].logprob);
    }
    wf_jbuf_cstr(b, "],\"top_logprobs\":[");
    for (int i = 0; i < n; i++) {
        wf_jbuf_cstr(b, i ? ",{" : "{");
        /* an object keyed by token text: distinct tokens may share a text; keep the first */
        for (int j = 0; j < t[i].n_top && j < WF_MAX_TOP_LOGPROBS; j++) {
            int len = piece_of(piece, ctx, t[i].top[j].token, text, sizeof text);
            bool dup = false;
            char other[256];
            for (int k = 0; k < j && !dup; k++) {
                int ol = piece_of(piece, ctx, t[i].top[k].token, other, sizeof other);
                dup = ol == len && memcmp(other, text, (size_t)len) == 0;
            }
            if (dup) continue;
            if (j) wf_jbuf_raw(b, ",", 1);
            wf_jbuf_str(b, text, (size_t)len);
            wf_jbuf_raw(b, ":", 1);
            wf_jbuf_num(b, t[i].top[j].logprob);
        }
        wf_jbuf_raw(b, "}", 1);
    }
    wf_jbuf_cstr(b, "],\"text_offset\":[");
    for (int i = 0; i < n; i++) wf_jbuf_printf(b, i ? ",%d" : "%d", text_offset[i]);
    wf_jbuf_cstr(b, "]}");
}

void wf_openai_write_usage(wf_jbuf *b, int prompt_tokens, int completion_tokens, int cached) {
    wf_jbuf_printf(b,
                   "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
                   "\"prompt_tokens_details\":{\"cached_tokens\":%d}}",
                   prompt_tokens, completion_tokens, prompt_tokens + completion_tokens, cached);
}
