/* Chat prompt formatting: turns OpenAI-style messages into the prompt text a model's chat
 * template (tokenizer.chat_template, Jinja) would produce, for the template families weft
 * recognises. No Jinja interpreter: the family is detected from distinctive markers and
 * rendered natively, byte-for-byte as the template (tests compare with jinja2 output).
 *
 *     wf_chat_format f = wf_chat_detect(template_text);   // or wf_chat_format_parse("chatml")
 *     wf_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
 *     char *prompt, err[256];
 *     if (wf_chat_apply(f, template_text, msgs, 2, true, &prompt, err, sizeof err) == WF_OK) {
 *         ... tokenize with parse_special = true, add_special = !wf_chat_renders_bos(f) ...
 *         free(prompt);
 *     }
 *
 * Conventions (as Hugging Face's apply_chat_template with the model's bos/eos tokens):
 *  - roles: "system", "user", "assistant"; anything else is WF_EINVAL.
 *  - llama2 / mistral: an optional first system message, then user/assistant alternating,
 *    starting with user (the templates raise otherwise: WF_EINVAL). add_generation_prompt has no
 *    effect (the prompt ends with "[/INST]" either way). llama2 strips (Python str.strip) the
 *    turn contents, llama3 trims (the same), chatml and mistral keep them verbatim.
 *  - llama3: Llama 3.0's template. Llama 3.1+ templates (detected as llama3 too, like
 *    llama.cpp does) also add a dated system preamble, which is NOT rendered.
 *  - A system message at an odd position is silently dropped by the llama2 template; weft
 *    rejects it (WF_EINVAL) instead of losing content.
 *  - gemma: llama.cpp's built-in Gemma formatter (llm_chat_apply_template "gemma"), which is
 *    what llama.cpp uses for Gemma GGUFs: contents trimmed, "assistant" rendered as "model",
 *    system messages (trimmed, concatenated) folded into the next user turn as "system\n\n",
 *    no BOS in the text (the tokenizer adds it), any role order accepted. Chosen for Gemma
 *    models whose GGUF carries no template (Gemma 3 270M's does not).
 *
 * Thread-safe (no shared state). */
#ifndef WF_ENGINE_CHAT_H
#define WF_ENGINE_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/base/status.h"

typedef enum wf_chat_format {
    WF_CHAT_UNKNOWN = 0,
    WF_CHAT_CHATML,  /* <|im_start|>role\ncontent<|im_end|>\n */
    WF_CHAT_LLAMA3,  /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> */
    WF_CHAT_LLAMA2,  /* <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] assistant </s> */
    WF_CHAT_MISTRAL, /* <s> [INST] system\n\nuser [/INST] assistant</s> (Mistral "v1") */
    WF_CHAT_GEMMA,   /* <start_of_turn>user\ncontent<end_of_turn>\n, "model" for assistant */
} wf_chat_format;

typedef struct wf_chat_message {
    const char *role;    /* "system", "user", "assistant" */
    const char *content; /* NUL-terminated UTF-8; NULL is treated as "" */
} wf_chat_message;

/* Detects the family from the template text; WF_CHAT_UNKNOWN for NULL or unrecognised. */
wf_chat_format wf_chat_detect(const char *jinja_template);
/* The family a model architecture implies when its GGUF has no template ("gemma", "gemma2",
 * "gemma3" -> WF_CHAT_GEMMA); WF_CHAT_UNKNOWN otherwise. */
wf_chat_format wf_chat_for_arch(const char *arch);
/* "chatml", "llama3", "llama2", "mistral", "gemma" -> format; WF_EINVAL for anything else. */
wf_status wf_chat_format_parse(const char *name, wf_chat_format *out);
const char *wf_chat_format_name(wf_chat_format f); /* "unknown" for WF_CHAT_UNKNOWN */

/* Renders messages as the template would (including a template's default system prompt, e.g.
 * SmolLM2's, when the first message is not a system message: taken from the template text when
 * present). f == WF_CHAT_UNKNOWN means "detect from jinja_template"; if that fails the result is
 * WF_EUNSUPPORTED with a message. *out is malloc'd (NUL-terminated); the caller frees it.
 * WF_EINVAL with err naming the problem: unknown role, empty conversation, bad role sequence
 * for llama2/mistral. WF_ENOMEM. */
wf_status wf_chat_apply(wf_chat_format f, const char *jinja_template, const wf_chat_message *msgs,
                        size_t n, bool add_generation_prompt, char **out, char *err,
                        size_t errlen);

/* Same, with the tokenizer's BOS/EOS texts (the template's bos_token / eos_token variables).
 * NULL selects the format's standard text: "<s>"/"</s>" for llama2 and mistral,
 * "<|begin_of_text|>" for llama3 (ChatML uses neither). wf_chat_apply is this with NULLs. */
wf_status wf_chat_apply_tokens(wf_chat_format f, const char *jinja_template, const char *bos_token,
                               const char *eos_token, const wf_chat_message *msgs, size_t n,
                               bool add_generation_prompt, char **out, char *err, size_t errlen);

/* True if the rendered text of format f already starts with the BOS token text (llama2, llama3,
 * mistral), so the prompt must be tokenized with add_special = false (and parse_special = true)
 * to avoid a double BOS; for ChatML tokenize with add_special = true (the tokenizer adds BOS
 * only if the model wants it). */
bool wf_chat_renders_bos(wf_chat_format f);

#endif
