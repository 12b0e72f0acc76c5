/* Defaults and validation of wf_request_spec. */
#include "proto/request.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void wf_request_spec_init(wf_request_spec *spec) {
    memset(spec, 0, sizeof *spec);
    spec->max_tokens = 16;
    spec->n = 1;
    spec->sampling.temperature = 1.0f;
    spec->sampling.top_p = 1.0f;
    spec->sampling.repetition_penalty = 1.0f;
}

const char *wf_finish_reason_str(wf_finish_reason reason) {
    switch (reason) {
    case WF_FINISH_NONE: return "none";
    case WF_FINISH_STOP: return "stop";
    case WF_FINISH_LENGTH: return "length";
    case WF_FINISH_CANCELLED: return "cancelled";
    case WF_FINISH_ERROR: return "error";
    }
    return "unknown";
}

#define REJECT(...)                                 \
    do {                                            \
        if (err && errlen > 0) snprintf(err, (size_t)errlen, __VA_ARGS__); \
        return WF_EINVAL;                           \
    } while (0)

static int finite_in(float v, float lo, float hi) { return isfinite(v) && v >= lo && v <= hi; }

wf_status wf_request_spec_validate(const wf_request_spec *spec, int n_vocab, char *err,
                                   int errlen) {
    const wf_sampling_params *s = &spec->sampling;
    if (spec->n_prompt <= 0 || !spec->prompt) REJECT("'prompt' must not be empty");
    for (int i = 0; i < spec->n_prompt; i++)
        if (spec->prompt[i] < 0 || spec->prompt[i] >= n_vocab)
            REJECT("'prompt' token id %d at index %d is outside the vocabulary [0, %d)",
                   (int)spec->prompt[i], i, n_vocab);
    if (spec->max_tokens < 1) REJECT("'max_tokens' must be at least 1, got %d", spec->max_tokens);
    if (spec->min_tokens < 0) REJECT("'min_tokens' must be non-negative, got %d", spec->min_tokens);
    if (spec->n < 1 || spec->n > 128) REJECT("'n' must be between 1 and 128, got %d", spec->n);
    if (!finite_in(s->temperature, 0, 2))
        REJECT("'temperature' must be between 0 and 2, got %g", (double)s->temperature);
    if (!finite_in(s->top_p, 0, 1) || s->top_p == 0)
        REJECT("'top_p' must be in (0, 1], got %g", (double)s->top_p);
    if (s->top_k < 0) REJECT("'top_k' must be non-negative, got %d", s->top_k);
    if (!finite_in(s->min_p, 0, 1)) REJECT("'min_p' must be between 0 and 1, got %g", (double)s->min_p);
    if (!finite_in(s->repetition_penalty, 0, 10) || s->repetition_penalty == 0)
        REJECT("'repetition_penalty' must be in (0, 10], got %g", (double)s->repetition_penalty);
    if (!finite_in(s->frequency_penalty, -2, 2))
        REJECT("'frequency_penalty' must be between -2 and 2, got %g", (double)s->frequency_penalty);
    if (!finite_in(s->presence_penalty, -2, 2))
        REJECT("'presence_penalty' must be between -2 and 2, got %g", (double)s->presence_penalty);
    if (s->top_logprobs < 0 || s->top_logprobs > WF_MAX_TOP_LOGPROBS)
        REJECT("'top_logprobs' must be between 0 and %d, got %d", WF_MAX_TOP_LOGPROBS, s->top_logprobs);
    if (s->n_logit_bias < 0 || (s->n_logit_bias > 0 && !s->logit_bias))
        REJECT("'logit_bias' is malformed");
    for (int i = 0; i < s->n_logit_bias; i++) {
        if (s->logit_bias[i].token < 0 || s->logit_bias[i].token >= n_vocab)
            REJECT("'logit_bias' token id %d is outside the vocabulary [0, %d)",
                   (int)s->logit_bias[i].token, n_vocab);
        if (!finite_in(s->logit_bias[i].bias, -100, 100))
            REJECT("'logit_bias' value for token %d must be between -100 and 100",
                   (int)s->logit_bias[i].token);
    }
    if (spec->slo.ttft_ms < 0 || spec->slo.tpot_ms < 0 || !isfinite(spec->slo.ttft_ms) ||
        !isfinite(spec->slo.tpot_ms))
        REJECT("'slo' targets must be non-negative numbers of milliseconds");
    if (!(spec->kv_accuracy >= 0.0f && spec->kv_accuracy <= 1.0f))
        REJECT("'kv_accuracy' must be between 0 and 1, got %g", (double)spec->kv_accuracy);
    return WF_OK;
}
