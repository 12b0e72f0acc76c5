/* The native vocabulary of a generation request, shared by server/ (which fills it from JSON),
 * sched/ (which schedules it) and engine/ (which samples with its parameters). No JSON, no
 * sockets, no tensors: plain data that can also be encoded into proto/ frames.
 *
 *     wf_request_spec spec;
 *     wf_request_spec_init(&spec);            // OpenAI defaults
 *     spec.prompt = tokens; spec.n_prompt = n;
 *     spec.max_tokens = 64; spec.sampling.temperature = 0;   // greedy
 *
 * Ownership: the spec's arrays belong to the caller until wf_sched_submit() copies them. */
#ifndef WF_PROTO_REQUEST_H
#define WF_PROTO_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/base/status.h"

#define WF_MAX_TOP_LOGPROBS 20
#define WF_REQUEST_ID_MAX 48

typedef struct wf_logit_bias {
    int32_t token;
    float bias; /* added to the logit; -100 bans, +100 forces, as in OpenAI */
} wf_logit_bias;

typedef struct wf_sampling_params {
    float temperature;        /* 0: greedy (argmax) */
    int top_k;                /* 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off (llama.cpp semantics: divide positive logits) */
    float frequency_penalty;  /* 0: off (OpenAI semantics) */
    float presence_penalty;   /* 0: off */
    bool has_seed;
    uint64_t seed;            /* with has_seed, the same request gives the same tokens */
    const wf_logit_bias *logit_bias;
    int n_logit_bias;
    bool logprobs;            /* report the chosen token's log-probability */
    int top_logprobs;         /* 0..WF_MAX_TOP_LOGPROBS alternatives per position */
} wf_sampling_params;

/* Latency objective. 0 means "the deployment's default" (see wf_sched_options). */
typedef struct wf_slo {
    double ttft_ms; /* time to first token */
    double tpot_ms; /* time per output token after the first */
} wf_slo;

typedef struct wf_request_spec {
    char id[WF_REQUEST_ID_MAX]; /* "chatcmpl-..." or "cmpl-..."; used in logs and /admin */
    const char *model;          /* served model id (already validated by the server) */
    const int32_t *prompt;      /* token ids, BOS included when the model wants it */
    int n_prompt;
    int max_tokens;             /* >= 1; the server clamps to the context left */
    int min_tokens;             /* EOS is not allowed before this many tokens */
    bool ignore_eos;            /* benchmark extension: generate exactly max_tokens */
    int n;                      /* choices; >= 1; prompt KV shared copy-on-write */
    wf_sampling_params sampling;
    wf_slo slo;
    int priority;               /* larger is more urgent; 0 default (priority policy) */
    uint32_t vmodel;            /* virtual model id carried by its tasks (0: the backbone) */
    double share_weight;        /* the virtual model's weight under the "fair" policy (<= 0: 1) */
    int vm_max_running;         /* at most this many requests of its virtual model run at once
                                   (per device group); the others wait without holding up other
                                   models' requests. 0: no limit */
    uint64_t prefix_salt;       /* prefix-cache namespace (kv/paged.h): equal only for virtual
                                   models with the same adapters; 0 for the backbone */
    float kv_accuracy;          /* extension: the least greedy-token agreement (0..1] a
                                   compressed prefill -> decode KV transfer may cost; 0: the
                                   deployment's --kv-accuracy */
    char kv_codec_name[32];     /* extension "kv_codec": "" or "auto" (the controller), "off",
                                   or a profile of the KV library; the server turns it into: */
    uint32_t kv_codec;          /* WF_KV_CODEC_AUTO, WF_KV_CODEC_OFF or a profile id */
} wf_request_spec;

#define WF_KV_CODEC_AUTO 0u
#define WF_KV_CODEC_OFF UINT32_MAX

typedef enum wf_finish_reason {
    WF_FINISH_NONE = 0,
    WF_FINISH_STOP,      /* end-of-sequence token, or the server matched a stop string */
    WF_FINISH_LENGTH,    /* max_tokens or the context length */
    WF_FINISH_CANCELLED, /* the client went away or the server cancelled it */
    WF_FINISH_ERROR,
} wf_finish_reason;

const char *wf_finish_reason_str(wf_finish_reason reason); /* "stop", "length", ... */

typedef struct wf_token_logprob {
    int32_t token;
    float logprob;
} wf_token_logprob;

typedef struct wf_generated_token {
    int32_t token;
    float logprob;                /* valid when sampling.logprobs */
    int n_top;                    /* alternatives filled, <= top_logprobs */
    wf_token_logprob top[WF_MAX_TOP_LOGPROBS];
} wf_generated_token;

/* Fills OpenAI's defaults: temperature 1, top_p 1, n 1, max_tokens 16, no penalties. */
void wf_request_spec_init(wf_request_spec *spec);
/* Checks ranges (temperature 0..2, top_p (0,1], penalties, n, top_logprobs...). Returns WF_OK,
 * or WF_EINVAL with a message naming the field in err. n_vocab bounds logit_bias tokens. */
wf_status wf_request_spec_validate(const wf_request_spec *spec, int n_vocab, char *err,
                                   int errlen);

#endif
