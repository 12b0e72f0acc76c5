/* libFuzzer target: the OpenAI request decoder on arbitrary bytes, as chat and as completions.
 * Every outcome must be WF_OK or a 400/503 error with a message, never a crash or a leak.
 * weft-fuzz: covers=server/openai.c */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int kind = 0; kind < 2; kind++) {
        wf_openai_request r;
        wf_openai_error e;
        wf_status st = wf_openai_decode(kind ? WF_OPENAI_COMPLETION : WF_OPENAI_CHAT,
                                        (const char *)data, size, &r, &e);
        if (st == WF_OK) {
            /* decoded requests are self-consistent */
            if (r.n_stop > WF_OPENAI_MAX_STOP || r.spec.n < 1) abort();
            if (kind == 0 && (r.n_messages == 0 || !r.messages)) abort();
            if (kind == 1 && (r.n_prompts == 0 || !r.prompts)) abort();
            wf_jbuf b = {0};
            for (size_t i = 0; i < r.n_messages; i++) wf_jbuf_str(&b, r.messages[i].content, strlen(r.messages[i].content));
            wf_jbuf_free(&b);
            wf_openai_request_free(&r);
        } else {
            if ((e.status != 400 && e.status != 503) || !e.message[0]) abort();
            wf_jbuf b = {0};
            wf_openai_write_error(&b, &e);
            wf_jbuf_free(&b);
        }
    }
    return 0;
}
