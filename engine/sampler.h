/* Token sampler: turns one position's logits into a token with the request's sampling
 * parameters (proto/request.h), reproducibly from a per-choice generator state.
 *
 *     wf_sampler *s = wf_sampler_new(n_vocab);            // once per worker thread
 *     sample.rng_state = wf_sampler_seed_state(seed, choice_index);   // once per choice
 *     ...
 *     wf_status st = wf_sampler_sample(s, logits, tok, &sample);      // per token
 *     // sample.out.token, sample.out.logprob, sample.out.top[], sample.out_is_eog
 *
 * Pipeline (in order): logit bias -> repetition penalty (llama.cpp: over the last 64 history
 * tokens, each distinct token once, positive logits divided, negative multiplied) ->
 * frequency/presence penalties (OpenAI: over the generated tokens history[n_prompt..] only,
 * logit -= count * frequency + (count > 0) * presence) -> EOG suppression (suppress_eos) ->
 * greedy if temperature <= 0 (ties -> lowest id) else top-k -> top-p -> min-p -> temperature ->
 * draw.
 *
 * Log-probabilities: out.logprob and out.top[] are under the full softmax (temperature 1) of
 * the PROCESSED logits: after bias, penalties and EOG suppression, before temperature and
 * top-k/top-p/min-p truncation (vLLM's "processed" logits without the truncation mask). This
 * keeps the values finite and comparable across sampling settings; a suppressed token has
 * logprob -inf and is never listed in top[]. top[] is sorted by logprob descending (ties: lower
 * id first) and holds min(top_logprobs, candidates) entries; it is filled only when
 * params->logprobs is true (out.logprob likewise; otherwise 0).
 *
 * EOG: tok decides which ids end generation (wf_tokenizer_is_eog). tok == NULL means "this
 * vocabulary has no EOG tokens": nothing is suppressed and out_is_eog is always false. The
 * sampler caches the EOG id list of the last tokenizer pointer it saw (one scan of the vocabulary,
 * not one per token): use a new sampler if a tokenizer is freed and another one is created.
 *
 * Randomness: splitmix64 on the 64-bit rng_state; exactly one draw per sampled token whatever
 * the truncation (greedy draws none), so a choice's stream is reproducible from its seed on a
 * given machine. The softmax weights use an AVX2 kernel where available and a portable one
 * otherwise (WEFT_CPU_ISA=scalar); they differ in the last bits, so a draw that lands on a
 * boundary can differ between the two.
 *
 * Thread-safety: a wf_sampler is scratch memory for one thread. wf_sampler_sample does not
 * allocate. */
#ifndef WF_ENGINE_SAMPLER_H
#define WF_ENGINE_SAMPLER_H

#include <stdint.h>

#include "proto/base/status.h"
#include "proto/task.h"

typedef struct wf_sampler wf_sampler;
typedef struct wf_tokenizer wf_tokenizer; /* engine/tokenizer.h */

/* Scratch for one vocabulary. NULL on allocation failure or n_vocab < 1. */
wf_sampler *wf_sampler_new(int n_vocab);
void wf_sampler_free(wf_sampler *s); /* NULL is a no-op */
int wf_sampler_n_vocab(const wf_sampler *s);

/* Draws one token for `sample` from logits[n_vocab] (not modified). Advances
 * sample->rng_state (unchanged when greedy). Fills sample->out and sample->out_is_eog.
 * WF_EINVAL: NULL arguments, bad parameters (top_k < 0, top_p outside (0,1], min_p outside
 * [0,1], repetition_penalty <= 0, top_logprobs outside 0..WF_MAX_TOP_LOGPROBS, history
 * inconsistent); WF_ERANGE: every token is banned/suppressed or a logit is NaN. No
 * allocation. */
wf_status wf_sampler_sample(wf_sampler *s, const float *logits, const wf_tokenizer *tok,
                            wf_task_sample *sample);

/* Initial rng_state for choice `choice` of a request with `seed`: distinct choices give
 * independent streams. Pure function. */
uint64_t wf_sampler_seed_state(uint64_t seed, int choice);

#endif
