/* Request records: one allocation path for the scheduler and the simulator. */
#include "sched/request_impl.h"

#include <stdlib.h>
#include <string.h>

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

wf_status wf__request_new(const wf_request_spec *spec, int n_ctx, int block_size,
                          uint64_t rng_seed, wf_request **out) {
    *out = NULL;
    if (spec->n_prompt <= 0 || spec->n < 1 || spec->max_tokens < 1 || n_ctx <= spec->n_prompt ||
        block_size <= 0 || (spec->sampling.n_logit_bias > 0 && !spec->sampling.logit_bias))
        return WF_EINVAL;
    wf_request *r = calloc(1, sizeof *r);
    if (!r) return WF_ENOMEM;
    r->spec = *spec;
    r->spec.id[WF_REQUEST_ID_MAX - 1] = '\0';
    r->max_tokens = spec->max_tokens;
    if (r->max_tokens > n_ctx - spec->n_prompt) r->max_tokens = n_ctx - spec->n_prompt;
    r->prompt = malloc((size_t)spec->n_prompt * sizeof *r->prompt);
    if (!r->prompt) goto fail;
    memcpy(r->prompt, spec->prompt, (size_t)spec->n_prompt * sizeof *r->prompt);
    r->spec.prompt = r->prompt;
    if (spec->sampling.n_logit_bias > 0) {
        r->logit_bias = malloc((size_t)spec->sampling.n_logit_bias * sizeof *r->logit_bias);
        if (!r->logit_bias) goto fail;
        memcpy(r->logit_bias, spec->sampling.logit_bias,
               (size_t)spec->sampling.n_logit_bias * sizeof *r->logit_bias);
    }
    r->spec.sampling.logit_bias = r->logit_bias;
    r->spec.model = NULL; /* not owned; the server validated it */
    r->n_choices = r->n_active = spec->n;
    r->choices = calloc((size_t)spec->n, sizeof *r->choices);
    if (!r->choices) goto fail;
    int cap = spec->n_prompt + r->max_tokens;
    int max_blocks = (n_ctx + block_size - 1) / block_size;
    uint64_t seed = spec->sampling.has_seed ? spec->sampling.seed : rng_seed;
    for (int i = 0; i < spec->n; i++) {
        wf_choice *c = &r->choices[i];
        c->tokens = malloc((size_t)cap * sizeof *c->tokens);
        if (!c->tokens || wf_kv_seq_init(&c->kv, max_blocks) != WF_OK) goto fail;
        wf_kv_seq_set_salt(&c->kv, spec->prefix_salt);
        memcpy(c->tokens, r->prompt, (size_t)spec->n_prompt * sizeof *c->tokens);
        c->n_tokens = spec->n_prompt;
        /* Choice i's stream depends only on (seed, i): a seeded request is reproducible. */
        uint64_t x = seed + (uint64_t)i * 0x2545f4914f6cdd1dull;
        c->rng = splitmix(&x);
        c->phase = WF_CHOICE_WAIT_FORK;
    }
    atomic_init(&r->refs, 2);
    atomic_init(&r->cancel_requested, false);
    r->state = WF_REQUEST_QUEUED;
    *out = r;
    return WF_OK;
fail:
    wf__request_free(r);
    return WF_ENOMEM;
}

void wf__request_free(wf_request *r) {
    if (!r) return;
    if (r->choices)
        for (int i = 0; i < r->n_choices; i++) {
            free(r->choices[i].tokens);
            wf_kv_seq_free(&r->choices[i].kv);
        }
    free(r->choices);
    free(r->prompt);
    free(r->logit_bias);
    free(r);
}

uint64_t wf__request_deadline_ns(const wf_request *r) {
    double ms = r->ttft_ms + r->tpot_ms * (double)r->max_generated;
    return r->times.queued_ns + (uint64_t)(ms * 1e6);
}
