/* libFuzzer target for the chat renderer: arbitrary templates (default-system-prompt literal
 * scanning, escapes), roles, contents (Python-whitespace stripping of arbitrary bytes) and
 * formats. Input: byte 0 = format (mod 5, 0 = detect), byte 1 = flags (bit 0: generation
 * prompt, bit 1: custom bos/eos), then NUL-separated fields: template, then role/content
 * pairs. Checks: no crash or out-of-bounds read; a failure sets a message and no output; a
 * successful ChatML/Mistral render contains the turn contents verbatim.
 * weft-fuzz: covers=engine/chat.c */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FIELDS 17

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    wf_chat_format f = (wf_chat_format)(data[0] % 5);
    bool gen = data[1] & 1, custom = data[1] & 2;
    /* exact-size NUL-terminated copy, split on NULs */
    char *buf = malloc(size - 2 + 1);
    if (!buf) return 0;
    memcpy(buf, data + 2, size - 2);
    buf[size - 2] = '\0';
    const char *fields[MAX_FIELDS];
    int nf = 0;
    for (char *p = buf; nf < MAX_FIELDS;) {
        fields[nf++] = p;
        char *z = memchr(p, '\0', (size_t)(buf + size - 2 - p) + 1);
        if (!z || z >= buf + size - 2) break;
        p = z + 1;
    }
    wf_chat_message msgs[(MAX_FIELDS - 1) / 2];
    size_t n = 0;
    for (int i = 1; i + 1 < nf; i += 2) msgs[n++] = (wf_chat_message){fields[i], fields[i + 1]};
    char *out = NULL, err[256];
    wf_status st = wf_chat_apply_tokens(f, fields[0][0] ? fields[0] : NULL, custom ? "<B>" : NULL,
                                        custom ? "<E>" : NULL, msgs, n, gen, &out, err, sizeof err);
    if (st == WF_OK) {
        if (!out) abort();
        wf_chat_format used = f != WF_CHAT_UNKNOWN ? f : wf_chat_detect(fields[0]);
        /* ChatML renders every content verbatim; Mistral every user/assistant content (a lone
         * system message has no user turn to join, as in the template) */
        for (size_t i = 0; i < n; i++)
            if ((used == WF_CHAT_CHATML ||
                 (used == WF_CHAT_MISTRAL && strcmp(msgs[i].role, "system") != 0)) &&
                !strstr(out, msgs[i].content))
                abort();
        free(out);
    } else if (out != NULL || err[0] == '\0') {
        abort();
    }
    free(buf);
    return 0;
}
