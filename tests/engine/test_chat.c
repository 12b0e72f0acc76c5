/* Tests engine/chat.c: byte-for-byte agreement with jinja2 renders of the real templates
 * (fixtures from scripts/make_chat_fixtures.py in tests/engine/data/), detection, the default
 * model's own template and default system prompt, and the error paths. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/chat.h"
#include "engine/gguf.h"

static char *read_file(const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/engine/data/%s", WEFT_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

/* A cursor over the fixture file. */
typedef struct cursor {
    const char *p, *end;
} cursor;

/* The next line without its newline (NUL-terminated copy into buf). */
static bool next_line(cursor *c, char *buf, size_t cap) {
    if (c->p >= c->end) return false;
    const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
    ck_assert_ptr_nonnull(nl);
    size_t n = (size_t)(nl - c->p);
    ck_assert_uint_lt(n, cap);
    memcpy(buf, c->p, n);
    buf[n] = '\0';
    c->p = nl + 1;
    return true;
}

/* A length-prefixed blob followed by a newline: returns a NUL-terminated copy. */
static char *blob(cursor *c, size_t len) {
    ck_assert(c->p + len < c->end && c->p[len] == '\n');
    char *s = malloc(len + 1);
    memcpy(s, c->p, len);
    s[len] = '\0';
    c->p += len + 1;
    return s;
}

#define MAX_MSGS 16

/* Runs every case of a fixture file; returns the number of cases and of expected errors.
 * TEMPLATE none: the case comes from llama.cpp's built-in formatter (no template text), so
 * only the explicit format is checked. */
static void run_fixtures(const char *fixture, int *n_cases, int *n_errors) {
    size_t len;
    char *file = read_file(fixture, &len);
    cursor c = {file, file + len};
    char line[512], name[256] = "", tmpl_name[256] = "", fmt_name[64] = "";
    char bos[64] = "", eos[64] = "";
    int gen = 0, cases = 0, errors = 0;
    wf_chat_message msgs[MAX_MSGS];
    char *contents[MAX_MSGS];
    char roles[MAX_MSGS][32];
    size_t n = 0;
    while (next_line(&c, line, sizeof line)) {
        size_t blen;
        if (line[0] == '#') continue;
        if (sscanf(line, "CASE %255s", name) == 1) {
            n = 0;
        } else if (sscanf(line, "TEMPLATE %255s", tmpl_name) == 1 ||
                   sscanf(line, "FORMAT %63s", fmt_name) == 1 ||
                   sscanf(line, "BOS %63s", bos) == 1 || sscanf(line, "EOS %63s", eos) == 1 ||
                   sscanf(line, "GEN %d", &gen) == 1) {
        } else if (sscanf(line, "MSG %31s %zu", roles[n], &blen) == 2) {
            ck_assert_uint_lt(n, MAX_MSGS);
            contents[n] = blob(&c, blen);
            msgs[n] = (wf_chat_message){roles[n], contents[n]};
            n++;
        } else if (strcmp(line, "ERROR") == 0 || sscanf(line, "EXPECT %zu", &blen) == 1) {
            bool want_error = strcmp(line, "ERROR") == 0;
            char *expect = want_error ? NULL : blob(&c, blen);
            bool builtin = strcmp(tmpl_name, "none") == 0;
            char *tmpl = builtin ? NULL : read_file(tmpl_name, NULL);
            wf_chat_format f;
            ck_assert_int_eq(wf_chat_format_parse(fmt_name, &f), WF_OK);
            ck_assert_msg(builtin || wf_chat_detect(tmpl) == f, "%s: detected %s, expected %s", name,
                          wf_chat_format_name(wf_chat_detect(tmpl)), fmt_name);
            char *out = NULL, err[256] = "";
            /* detect from the template, with the model's bos/eos texts */
            wf_status st = wf_chat_apply_tokens(builtin ? f : WF_CHAT_UNKNOWN, tmpl, bos, eos, msgs,
                                                n, gen != 0, &out, err, sizeof err);
            if (want_error) {
                ck_assert_msg(st == WF_EINVAL, "%s: expected an error, got %s", name,
                              wf_status_name(st));
                ck_assert_ptr_null(out);
                ck_assert(err[0] != '\0');
                errors++;
            } else {
                ck_assert_msg(st == WF_OK, "%s: %s", name, err);
                ck_assert_msg(strcmp(out, expect) == 0, "%s:\n got    [%s]\n expect [%s]", name,
                              out, expect);
                free(out);
                /* the explicit format gives the same text */
                st = wf_chat_apply_tokens(f, tmpl, bos, eos, msgs, n, gen != 0, &out, err,
                                          sizeof err);
                ck_assert_int_eq(st, WF_OK);
                ck_assert_str_eq(out, expect);
                free(out);
            }
            free(expect);
            free(tmpl);
            cases++;
        } else if (strcmp(line, "END") == 0) {
            for (size_t i = 0; i < n; i++) free(contents[i]);
            n = 0;
        } else {
            ck_abort_msg("bad fixture line: %s", line);
        }
    }
    *n_cases = cases;
    *n_errors = errors;
    free(file);
}

START_TEST(test_jinja_fixtures) {
    int cases, errors;
    run_fixtures("chat_cases.txt", &cases, &errors);
    ck_assert_int_ge(cases, 100);
    ck_assert_int_ge(errors, 10);
}
END_TEST

/* Gemma: llama.cpp's own formatter (llama_chat_apply_template "gemma") is the reference. */
START_TEST(test_llamacpp_gemma_fixtures) {
    int cases, errors;
    run_fixtures("chat_cases_gemma.txt", &cases, &errors);
    ck_assert_int_ge(cases, 20);
    ck_assert_int_eq(errors, 0);
    ck_assert_int_eq(wf_chat_for_arch("gemma3"), WF_CHAT_GEMMA);
    ck_assert_int_eq(wf_chat_for_arch("llama"), WF_CHAT_UNKNOWN);
    ck_assert_int_eq(wf_chat_detect("{{ '<start_of_turn>' + role + '\\n' }}"), WF_CHAT_GEMMA);
    ck_assert(!wf_chat_renders_bos(WF_CHAT_GEMMA));
}
END_TEST

START_TEST(test_detect_and_names) {
    ck_assert_int_eq(wf_chat_detect(NULL), WF_CHAT_UNKNOWN);
    ck_assert_int_eq(wf_chat_detect(""), WF_CHAT_UNKNOWN);
    ck_assert_int_eq(wf_chat_detect("{{'<|im_start|>' + message['role']}}"), WF_CHAT_CHATML);
    ck_assert_int_eq(wf_chat_detect("{{'<|im_start|>' + message['role'] + '<|im_sep|>'}}"),
                     WF_CHAT_UNKNOWN); /* Phi-4 */
    ck_assert_int_eq(wf_chat_detect("<|start_header_id|>x<|end_header_id|>"), WF_CHAT_LLAMA3);
    ck_assert_int_eq(wf_chat_detect("[SYSTEM_PROMPT] [INST]"), WF_CHAT_UNKNOWN); /* v7 */
    ck_assert_int_eq(wf_chat_detect("[AVAILABLE_TOOLS]{{'[INST] ' + c}}"), WF_CHAT_UNKNOWN);
    ck_assert_int_eq(wf_chat_detect("{{ '[INST] ' + message['content'] + ' [/INST]' }}"),
                     WF_CHAT_UNKNOWN); /* pre-v1 Mistral: different spacing */
    ck_assert_int_eq(wf_chat_detect("<start_of_turn>user"), WF_CHAT_GEMMA);
    static const char *names[] = {"chatml", "llama3", "llama2", "mistral", "gemma"};
    for (int i = 0; i < 5; i++) {
        wf_chat_format f;
        ck_assert_int_eq(wf_chat_format_parse(names[i], &f), WF_OK);
        ck_assert_int_eq(f, WF_CHAT_CHATML + i);
        ck_assert_str_eq(wf_chat_format_name(f), names[i]);
    }
    wf_chat_format f;
    ck_assert_int_eq(wf_chat_format_parse("vicuna", &f), WF_EINVAL);
    ck_assert_int_eq(wf_chat_format_parse(NULL, &f), WF_EINVAL);
    ck_assert_str_eq(wf_chat_format_name(WF_CHAT_UNKNOWN), "unknown");
    ck_assert(!wf_chat_renders_bos(WF_CHAT_CHATML));
    ck_assert(wf_chat_renders_bos(WF_CHAT_LLAMA3) && wf_chat_renders_bos(WF_CHAT_LLAMA2) &&
              wf_chat_renders_bos(WF_CHAT_MISTRAL));
}
END_TEST

static const char *model_path(void) {
    const char *p = getenv("WEFT_MODEL");
    return p && *p ? p : WEFT_TEST_MODEL;
}

/* The default model's template, read from its GGUF: detected as ChatML, with SmolLM2's default
 * system prompt, and identical to the fixture copy. */
START_TEST(test_default_model_template) {
    wf_gguf *g;
    char err[512];
    ck_assert_msg(wf_gguf_open(model_path(), &g, err, sizeof err) == WF_OK, "%s", err);
    wf_gguf_str s;
    ck_assert(wf_gguf_get_str(g, "tokenizer.chat_template", &s));
    char *tmpl = strndup(s.data, (size_t)s.len);
    wf_gguf_close(g);
    char *fixture = read_file("chat_template_smollm2.jinja", NULL);
    ck_assert_str_eq(tmpl, fixture);
    ck_assert_int_eq(wf_chat_detect(tmpl), WF_CHAT_CHATML);
    wf_chat_message m[] = {{"user", "What is the capital of France?"}};
    char *out;
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_UNKNOWN, tmpl, m, 1, true, &out, err, sizeof err),
                     WF_OK);
    ck_assert_str_eq(out, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                          "trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the "
                          "capital of France?<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    /* explicit chatml without a template: no default system prompt */
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_CHATML, NULL, m, 1, true, &out, err, sizeof err), WF_OK);
    ck_assert_str_eq(out, "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                          "<|im_start|>assistant\n");
    free(out);
    free(tmpl);
    free(fixture);
}
END_TEST

/* Default system blocks in other ChatML templates (Qwen2 style, escaped newlines, double
 * quotes), and literals that are not default blocks. */
START_TEST(test_chatml_default_system_variants) {
    wf_chat_message m[] = {{"user", "hi"}};
    char *out, err[256];
    const char *qwen =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_UNKNOWN, qwen, m, 1, false, &out, err, sizeof err),
                     WF_OK);
    ck_assert_str_eq(out, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                          "helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
    free(out);
    /* a system literal that only opens the block is not a default prompt */
    const char *tools = "{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\n' + "
                        "messages[0]['content'] }}{% endif %}<|im_end|>";
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_UNKNOWN, tools, m, 1, false, &out, err, sizeof err),
                     WF_OK);
    ck_assert_str_eq(out, "<|im_start|>user\nhi<|im_end|>\n");
    free(out);
    /* double-quoted literal with escapes (\n, \', \\) */
    const char *esc = "{% if messages[0]['role'] != \"system\" %}{{ \"<|im_start|>system\\nYou\\'re "
                      "\\\\ok\\t<|im_end|>\\n\" }}{% endif %}<|im_start|>";
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_UNKNOWN, esc, m, 1, false, &out, err, sizeof err),
                     WF_OK);
    ck_assert_str_eq(out, "<|im_start|>system\nYou're \\ok\t<|im_end|>\n"
                          "<|im_start|>user\nhi<|im_end|>\n");
    free(out);
    /* with a system message first, the default is not used */
    wf_chat_message m2[] = {{"system", "S"}, {"user", "hi"}};
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_UNKNOWN, qwen, m2, 2, false, &out, err, sizeof err),
                     WF_OK);
    ck_assert_str_eq(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
    free(out);
}
END_TEST

START_TEST(test_errors) {
    char *out = (char *)1, err[256] = "";
    wf_chat_message m[] = {{"user", "hi"}};
    /* an unknown template needs an explicit format */
    const char *mistral_v7 = "{{ '[SYSTEM_PROMPT]' + s + '[/SYSTEM_PROMPT][INST]' }}";
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_UNKNOWN, mistral_v7, m, 1, true, &out, err, sizeof err),
                     WF_EUNSUPPORTED);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err, "chat format") != NULL, "%s", err);
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_UNKNOWN, NULL, m, 1, true, &out, err, sizeof err),
                     WF_EUNSUPPORTED);
    ck_assert_msg(strstr(err, "no chat template") != NULL, "%s", err);
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_LLAMA3, mistral_v7, m, 1, true, &out, err, sizeof err),
                     WF_OK);
    ck_assert_str_eq(out, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi"
                          "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    free(out);
    /* unknown role */
    wf_chat_message tool[] = {{"user", "hi"}, {"tool", "{}"}};
    for (int f = WF_CHAT_CHATML; f <= WF_CHAT_MISTRAL; f++) {
        ck_assert_int_eq(wf_chat_apply((wf_chat_format)f, NULL, tool, 2, true, &out, err,
                                       sizeof err),
                         WF_EINVAL);
        ck_assert_msg(strstr(err, "message 1: unknown role 'tool'") != NULL, "%s", err);
    }
    wf_chat_message norole[] = {{NULL, "x"}};
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_CHATML, NULL, norole, 1, true, &out, err, sizeof err),
                     WF_EINVAL);
    /* empty conversation */
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_CHATML, NULL, m, 0, true, &out, err, sizeof err),
                     WF_EINVAL);
    ck_assert_msg(strstr(err, "no messages") != NULL, "%s", err);
    /* llama2 alternation and the odd-position system message (dropped by the template, rejected
     * by weft) */
    wf_chat_message odd[] = {{"user", "a"}, {"system", "late"}};
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_LLAMA2, NULL, odd, 2, true, &out, err, sizeof err),
                     WF_EINVAL);
    ck_assert_msg(strstr(err, "message 1") && strstr(err, "system"), "%s", err);
    wf_chat_message two[] = {{"user", "a"}, {"user", "b"}};
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_MISTRAL, NULL, two, 2, true, &out, err, sizeof err),
                     WF_EINVAL);
    ck_assert_msg(strstr(err, "message 1") && strstr(err, "alternating"), "%s", err);
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_CHATML, NULL, two, 2, true, NULL, err, sizeof err),
                     WF_EINVAL);
    ck_assert_int_eq(wf_chat_apply((wf_chat_format)42, NULL, m, 1, true, &out, err, sizeof err),
                     WF_EINVAL);
}
END_TEST

/* Python's str.strip() semantics at the byte level: Unicode whitespace is stripped, invalid
 * UTF-8 and non-space characters are not; NULL content is "". */
START_TEST(test_strip) {
    char *out, err[256];
    wf_chat_message m[] = {{"user", "\xe3\x80\x80 a b\xc2\xa0\xe2\x80\xa9"}};
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_LLAMA2, NULL, m, 1, false, &out, err, sizeof err),
                     WF_OK);
    ck_assert_str_eq(out, "<s>[INST] a b [/INST]");
    free(out);
    wf_chat_message bad[] = {{"user", " x\xe3\x80 "}}; /* truncated character then a space */
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_LLAMA3, NULL, bad, 1, false, &out, err, sizeof err),
                     WF_OK);
    ck_assert_str_eq(out, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx\xe3\x80"
                          "<|eot_id|>");
    free(out);
    wf_chat_message null_content[] = {{"user", NULL}};
    ck_assert_int_eq(wf_chat_apply(WF_CHAT_MISTRAL, NULL, null_content, 1, false, &out, err,
                                   sizeof err),
                     WF_OK);
    ck_assert_str_eq(out, "<s> [INST]  [/INST]");
    free(out);
}
END_TEST

static Suite *chat_suite(void) {
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_jinja_fixtures);
    tcase_add_test(tc, test_llamacpp_gemma_fixtures);
    tcase_add_test(tc, test_detect_and_names);
    tcase_add_test(tc, test_default_model_template);
    tcase_add_test(tc, test_chatml_default_system_variants);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_strip);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(chat_suite)
