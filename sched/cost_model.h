/* Internal: the iteration cost model the scheduler predicts with.
 *     step_ms = a + b * prefill_tokens + c * decode_tokens + d * attention
 * where attention = for each token of the batch, the number of positions it attends to: a
 * decode at position p adds p + 1; a prefill chunk of n tokens starting at position s adds
 * n*s + n*(n+1)/2 (wf_cost_model_attention). That is the work of the attention kernels, so
 * one d fits decodes and prefill chunks at any offset; counting a chunk by its end position
 * instead under-predicts long prompts by their quadratic term. Fitted by least squares from
 * measured iterations (start-up calibration), loaded from a file, or given; refitted online
 * from an exponentially weighted window of observed iterations.
 *
 *     wf_cost_model m;
 *     wf_cost_model_init(&m, (double[4]){2.0, 0.05, 0.3, 0.0005});
 *     double ms = wf_cost_model_predict(&m, 256, 8, wf_cost_model_attention(0, 256) + 4096);
 *     wf_cost_model_observe(&m, 256, 8, attention, measured_ms);   // online refit
 *
 * Not thread-safe: one owner; readers on other threads take a copy under the owner's lock. */
#ifndef WF_SCHED_COST_MODEL_H
#define WF_SCHED_COST_MODEL_H

#include <stdbool.h>

#include "proto/base/status.h"

typedef struct wf_cost_model {
    double coef[4];          /* a (ms), b, c, d (ms per token) */
    double prior[4];         /* ridge target: the coefficients last given/fitted offline */
    double xtx[4][4], xty[4];/* exponentially weighted normal equations */
    double decay;            /* weight kept per observation (0.98: ~50-iteration window) */
    int n_obs;
    int refit_every;         /* observations between refits */
} wf_cost_model;

/* One measured iteration. */
typedef struct wf_cost_sample {
    double prefill_tokens, decode_tokens, context, ms;
} wf_cost_sample;

void wf_cost_model_init(wf_cost_model *m, const double coef[4]);
double wf_cost_model_predict(const wf_cost_model *m, double prefill_tokens,
                             double decode_tokens, double context);
void wf_cost_model_observe(wf_cost_model *m, double prefill_tokens, double decode_tokens,
                           double context, double ms);
/* Attention work of a prefill chunk of n tokens starting at position start (n*start +
 * n*(n+1)/2); a decode at position p is wf_cost_model_attention(p, 1) = p + 1. */
static inline double wf_cost_model_attention(double start, double n) {
    return n * start + n * (n + 1) / 2;
}
/* The largest prefill chunk (<= max_tokens) starting at position start whose predicted cost
 * b*n + d*attention(start, n) fits in ms (0 when not even one token fits). */
int wf_cost_model_prefill_fit(const wf_cost_model *m, double ms, int start, int max_tokens);
/* Predicted time to first token of a new prompt of n_prompt tokens queued behind
 * pending_prefill tokens (whose attention work is pending_attention), with n_decode sequences
 * (summed context decode_context) decoding meanwhile: each iteration packs
 * min(n_decode, budget - 1) decodes and fills the rest of the budget with prefill, so
 * k = ceil((pending + n_prompt) / prefill_per_iteration) iterations of
 * (a + c*decodes + d*context) plus b per prefill token and d per unit of their attention work.
 * *drain_ms (may be NULL) is the same for the pending work alone. */
double wf_cost_model_predict_ttft(const wf_cost_model *m, int max_batch_tokens,
                                  double pending_prefill, double pending_attention,
                                  int n_decode, double decode_context, int n_prompt,
                                  double *drain_ms);
/* Least-squares fit of out[4] to n samples, lightly regularised toward prior (may be NULL)
 * so unobserved directions stay sane; coefficients are clamped at >= 0.
 * WF_EINVAL if n < 1. */
wf_status wf_cost_model_fit(const wf_cost_sample *samples, int n, const double *prior,
                            double out[4]);
/* "a,b,c,d" (ms). WF_EINVAL with the reason in err. */
wf_status wf_cost_model_parse(const char *text, double out[4], char *err, int errlen);
/* A text file holding "a b c d" or "a,b,c,d", or a JSON object {"a":..,"b":..,"c":..,"d":..}.
 * WF_ENOTFOUND, WF_EFORMAT (err says why). */
wf_status wf_cost_model_load(const char *path, double out[4], char *err, int errlen);
/* Writes a JSON object the loader reads. WF_EIO. */
wf_status wf_cost_model_save(const char *path, const double coef[4]);

#endif
