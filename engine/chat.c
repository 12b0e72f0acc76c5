/* Chat prompt rendering for the template families weft recognises (see chat.h). Each renderer
 * mirrors its official Jinja template statement by statement, including Python's str.strip()
 * whitespace set where the template strips; tests compare with jinja2's output byte-for-byte. */
#include "engine/chat.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- string builder ------------------------------------------------------------------------ */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* ---- Python str.strip() on UTF-8 ------------------------------------------------------------ */

static bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Decodes the well-formed UTF-8 character at s[0..n) (n >= 1); returns its length, or 0 if the
 * bytes are not a valid character (never whitespace then). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    size_t len = (s[0] & 0xe0) == 0xc0   ? 2
                 : (s[0] & 0xf0) == 0xe0 ? 3
                 : (s[0] & 0xf8) == 0xf0 ? 4
                                         : 0;
    if (len == 0 || len > n) return 0;
    uint32_t c = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    *cp = c;
    return len;
}

/* Strips Python whitespace from both ends of s[0..n): sets *start and returns the new length. */
static size_t py_strip(const char *s, size_t n, size_t *start) {
    const unsigned char *u = (const unsigned char *)s;
    size_t a = 0, b = n;
    uint32_t c;
    for (;;) {
        size_t l;
        if (a >= b || (l = utf8_decode(u + a, b - a, &c)) == 0 || !py_space(c)) break;
        a += l;
    }
    while (b > a) {
        size_t k = b - 1; /* start of the last character: back over continuation bytes */
        while (k > a && (u[k] & 0xc0) == 0x80 && b - k < 4) k--;
        size_t l = utf8_decode(u + k, b - k, &c);
        if (l != b - k || !py_space(c)) break;
        b = k;
    }
    *start = a;
    return b - a;
}

static void sb_stripped(sbuf *b, const char *s) {
    size_t start, len = py_strip(s, strlen(s), &start);
    sb_add(b, s + start, len);
}

/* ---- formats ------------------------------------------------------------------------------- */

static const char *const format_names[] = {"unknown", "chatml", "llama3", "llama2", "mistral",
                                           "gemma"};

const char *wf_chat_format_name(wf_chat_format f) {
    return (unsigned)f < sizeof format_names / sizeof format_names[0] ? format_names[f] : "unknown";
}

wf_status wf_chat_format_parse(const char *name, wf_chat_format *out) {
    if (!name || !out) return WF_EINVAL;
    for (int f = WF_CHAT_CHATML; f <= WF_CHAT_GEMMA; f++)
        if (strcmp(name, format_names[f]) == 0) {
            *out = (wf_chat_format)f;
            return WF_OK;
        }
    return WF_EINVAL;
}

bool wf_chat_renders_bos(wf_chat_format f) {
    return f == WF_CHAT_LLAMA2 || f == WF_CHAT_LLAMA3 || f == WF_CHAT_MISTRAL;
}

static bool has(const char *t, const char *needle) { return strstr(t, needle) != NULL; }

/* Distinctive markers, in llama.cpp's order; look-alikes with different spacing or extra
 * blocks (Phi-4, SmolVLM, Mistral v3/v7, unofficial llama2 variants) are not claimed. */
wf_chat_format wf_chat_detect(const char *t) {
    if (!t) return WF_CHAT_UNKNOWN;
    if (has(t, "<|im_start|>")) {
        if (has(t, "<|im_sep|>") || has(t, "<end_of_utterance>")) return WF_CHAT_UNKNOWN;
        return WF_CHAT_CHATML;
    }
    if (has(t, "[INST]")) {
        if (has(t, "[SYSTEM_PROMPT]") || has(t, "[AVAILABLE_TOOLS]")) return WF_CHAT_UNKNOWN;
        if (has(t, "' [INST] ' + system_message") && has(t, " [/INST]")) return WF_CHAT_MISTRAL;
        if (has(t, "<<SYS>>") && has(t, "bos_token + '[INST] '") && has(t, "content.strip()"))
            return WF_CHAT_LLAMA2;
        return WF_CHAT_UNKNOWN;
    }
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) return WF_CHAT_LLAMA3;
    if (has(t, "<start_of_turn>")) return WF_CHAT_GEMMA;
    return WF_CHAT_UNKNOWN;
}

wf_chat_format wf_chat_for_arch(const char *arch) {
    if (arch && (strcmp(arch, "gemma") == 0 || strcmp(arch, "gemma2") == 0 || strcmp(arch, "gemma3") == 0))
        return WF_CHAT_GEMMA;
    return WF_CHAT_UNKNOWN;
}

/* A ChatML template's default system block: a string literal that starts with
 * "<|im_start|>system" + newline and contains "<|im_end|>", in a template that tests
 * `!= 'system'` (SmolLM2, Qwen2). Appends the unescaped literal to b; false if none. */
static bool chatml_default_system(const char *t, sbuf *b) {
    if (!t || !(has(t, "!= 'system'") || has(t, "!= \"system\""))) return false;
    static const char marker[] = "<|im_start|>system";
    for (const char *m = strstr(t, marker); m; m = strstr(m + 1, marker)) {
        if (m == t || (m[-1] != '\'' && m[-1] != '"')) continue;
        char quote = m[-1];
        sbuf lit = {0};
        const char *p = m;
        bool closed = false;
        for (; *p; p++) {
            char c = *p;
            if (c == quote) {
                closed = true;
                break;
            }
            if (c == '\\' && p[1]) { /* Jinja (Python) string escapes */
                p++;
                c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p == 'r' ? '\r' : *p;
                if (!strchr("ntr\\'\"", *p))
                    sb_add(&lit, "\\", 1); /* unknown escape: kept, as Python does */
            }
            sb_add(&lit, &c, 1);
        }
        bool ok = closed && !lit.oom && lit.n > sizeof marker && lit.p[sizeof marker - 1] == '\n' &&
                  strstr(lit.p, "<|im_end|>") != NULL;
        if (ok) sb_add(b, lit.p, lit.n);
        free(lit.p);
        if (ok) return true;
    }
    return false;
}

static const char *content_of(const wf_chat_message *m) { return m->content ? m->content : ""; }

static bool is_role(const wf_chat_message *m, const char *r) { return strcmp(m->role, r) == 0; }

static void render_chatml(sbuf *b, const char *tmpl, const wf_chat_message *msgs, size_t n,
                          bool add_gen) {
    if (!is_role(&msgs[0], "system")) chatml_default_system(tmpl, b);
    for (size_t i = 0; i < n; i++) {
        sb_str(b, "<|im_start|>");
        sb_str(b, msgs[i].role);
        sb_str(b, "\n");
        sb_str(b, content_of(&msgs[i]));
        sb_str(b, "<|im_end|>\n");
    }
    if (add_gen) sb_str(b, "<|im_start|>assistant\n");
}

static void render_llama3(sbuf *b, const char *bos, const wf_chat_message *msgs, size_t n,
                          bool add_gen) {
    for (size_t i = 0; i < n; i++) {
        if (i == 0) sb_str(b, bos);
        sb_str(b, "<|start_header_id|>");
        sb_str(b, msgs[i].role);
        sb_str(b, "<|end_header_id|>\n\n");
        sb_stripped(b, content_of(&msgs[i]));
        sb_str(b, "<|eot_id|>");
    }
    if (add_gen) sb_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* The alternation rule shared by llama2 and mistral: after an optional first system message,
 * user at even positions, assistant at odd ones. */
static wf_status check_alternation(const wf_chat_message *msgs, size_t n, size_t first,
                                   wf_chat_format f, char *err, size_t errlen) {
    for (size_t i = first; i < n; i++) {
        bool want_user = (i - first) % 2 == 0;
        if (is_role(&msgs[i], "system"))
            return wf_status_errorf(err, errlen, WF_EINVAL,
                        "message %zu: %s allows a system message only as the first message", i,
                        wf_chat_format_name(f));
        if (is_role(&msgs[i], "user") != want_user)
            return wf_status_errorf(err, errlen, WF_EINVAL,
                        "message %zu: %s needs roles alternating user/assistant/user/... after "
                        "the optional system message, got '%s'",
                        i, wf_chat_format_name(f), msgs[i].role);
    }
    return WF_OK;
}

static void render_llama2(sbuf *b, const char *bos, const char *eos, const wf_chat_message *msgs,
                          size_t n) {
    size_t first = is_role(&msgs[0], "system") ? 1 : 0;
    for (size_t i = first; i < n; i++) {
        sbuf content = {0};
        if (i == first && first == 1) {
            sb_str(&content, "<<SYS>>\n");
            sb_str(&content, content_of(&msgs[0]));
            sb_str(&content, "\n<</SYS>>\n\n");
        }
        sb_str(&content, content_of(&msgs[i]));
        if (content.oom) {
            b->oom = true;
            return;
        }
        if (is_role(&msgs[i], "user")) {
            sb_str(b, bos);
            sb_str(b, "[INST] ");
            sb_stripped(b, content.p);
            sb_str(b, " [/INST]");
        } else {
            sb_str(b, " ");
            sb_stripped(b, content.p);
            sb_str(b, " ");
            sb_str(b, eos);
        }
        free(content.p);
    }
}

static void render_mistral(sbuf *b, const char *bos, const char *eos, const wf_chat_message *msgs,
                           size_t n) {
    size_t first = is_role(&msgs[0], "system") ? 1 : 0;
    sb_str(b, bos);
    for (size_t i = first; i < n; i++) {
        if (is_role(&msgs[i], "user")) {
            sb_str(b, " [INST] ");
            if (i == first && first == 1) {
                sb_str(b, content_of(&msgs[0]));
                sb_str(b, "\n\n");
            }
            sb_str(b, content_of(&msgs[i]));
            sb_str(b, " [/INST]");
        } else {
            sb_str(b, " ");
            sb_str(b, content_of(&msgs[i]));
            sb_str(b, eos);
        }
    }
}

/* llama.cpp's trim(): ASCII whitespace only (isspace in the C locale), unlike Python's strip. */
static void sb_trimmed_ascii(sbuf *b, const char *s) {
    size_t n = strlen(s);
    while (n && strchr(" \t\n\v\f\r", s[n - 1])) n--;
    size_t i = 0;
    while (i < n && strchr(" \t\n\v\f\r", s[i])) i++;
    sb_add(b, s + i, n - i);
}

/* llama.cpp's "gemma": system texts wait for the next non-model turn. */
static void render_gemma(sbuf *b, const wf_chat_message *msgs, size_t n, bool add_gen) {
    sbuf system = {0};
    sb_add(&system, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (is_role(&msgs[i], "system")) {
            sb_trimmed_ascii(&system, content_of(&msgs[i]));
            continue;
        }
        bool model = is_role(&msgs[i], "assistant");
        sb_str(b, "<start_of_turn>");
        sb_str(b, model ? "model" : msgs[i].role);
        sb_str(b, "\n");
        if (system.p && system.p[0] && !model) {
            sb_str(b, system.p);
            sb_str(b, "\n\n");
            system.p[0] = '\0';
            system.n = 0;
        }
        sb_trimmed_ascii(b, content_of(&msgs[i]));
        sb_str(b, "<end_of_turn>\n");
    }
    if (add_gen) sb_str(b, "<start_of_turn>model\n");
    if (system.oom) b->oom = true;
    free(system.p);
}

wf_status wf_chat_apply_tokens(wf_chat_format f, const char *tmpl, const char *bos,
                               const char *eos, const wf_chat_message *msgs, size_t n,
                               bool add_gen, char **out, char *err, size_t errlen) {
    if (!out) return wf_status_errorf(err, errlen, WF_EINVAL, "no output pointer");
    *out = NULL;
    if (f == WF_CHAT_UNKNOWN) {
        f = wf_chat_detect(tmpl);
        if (f == WF_CHAT_UNKNOWN)
            return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                        tmpl ? "the model's chat template is not one weft can render (ChatML, "
                               "Llama 3, Llama 2, Mistral, Gemma); set a chat format explicitly"
                             : "the model has no chat template; set a chat format explicitly "
                               "(chatml, llama3, llama2, mistral, gemma)");
    }
    if ((unsigned)f > WF_CHAT_GEMMA)
        return wf_status_errorf(err, errlen, WF_EINVAL, "invalid chat format %d", (int)f);
    if (n == 0 || !msgs) return wf_status_errorf(err, errlen, WF_EINVAL, "the conversation has no messages");
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r) return wf_status_errorf(err, errlen, WF_EINVAL, "message %zu: missing role", i);
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0)
            return wf_status_errorf(err, errlen, WF_EINVAL,
                        "message %zu: unknown role '%.40s' (expected system, user or assistant)",
                        i, r);
    }
    if (f == WF_CHAT_LLAMA2 || f == WF_CHAT_MISTRAL) {
        size_t first = is_role(&msgs[0], "system") ? 1 : 0;
        wf_status st = check_alternation(msgs, n, first, f, err, errlen);
        if (st != WF_OK) return st;
    }
    sbuf b = {0};
    sb_add(&b, "", 0); /* an empty conversation renders as "" (allocated) */
    switch (f) {
    case WF_CHAT_CHATML: render_chatml(&b, tmpl, msgs, n, add_gen); break;
    case WF_CHAT_LLAMA3:
        render_llama3(&b, bos ? bos : "<|begin_of_text|>", msgs, n, add_gen);
        break;
    case WF_CHAT_LLAMA2: render_llama2(&b, bos ? bos : "<s>", eos ? eos : "</s>", msgs, n); break;
    case WF_CHAT_MISTRAL: render_mistral(&b, bos ? bos : "<s>", eos ? eos : "</s>", msgs, n); break;
    case WF_CHAT_GEMMA: render_gemma(&b, msgs, n, add_gen); break;
    default: break;
    }
    if (b.oom) {
        free(b.p);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory rendering the chat prompt");
    }
    *out = b.p;
    return WF_OK;
}

wf_status wf_chat_apply(wf_chat_format f, const char *tmpl, const wf_chat_message *msgs, size_t n,
                        bool add_gen, char **out, char *err, size_t errlen) {
    return wf_chat_apply_tokens(f, tmpl, NULL, NULL, msgs, n, add_gen, out, err, errlen);
}
