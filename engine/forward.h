/* The batched forward pass of a llama-family model on the CPU (internal to engine/).
 *
 *     wf_forward *f;
 *     wf_forward_new(model, pool, 512, 64, &f, err, sizeof err);   // all memory reserved here
 *     wf_fwd_seq seqs[2] = {{.tokens = prompt, .n_tokens = 40, .pos = 0, .block_table = bt0,
 *                            .n_blocks = 3, .want_logits = true},
 *                           {.tokens = &last, .n_tokens = 1, .pos = 77, ...}};
 *     wf_forward_run(f, kv, seqs, 2);      // K/V of the new tokens written into kv
 *     const float *l = wf_forward_logits(f, 0);   // logits of the 1st sequence wanting them
 *
 * One run carries any mix of prefill chunks and single decode tokens, each sequence with its
 * own positions and paged KV (kv/kv_store.h, F16). Every token's arithmetic depends only on
 * that token and its sequence's KV: results do not depend on what else is in the batch
 * (matmul rows are independent dot products, attention is per (token, head)). Sequences may
 * carry LoRA adapters: each adapted projection adds scale * B (A x) to its rows after the
 * shared base matmul, with the rows of all sequences using one adapter gathered into one
 * segment (A and B read once per batch), so a batch mixes adapters and the bare backbone and
 * each row's result is the same as alone. Nothing is allocated per run. Not thread-safe: one run at a time per wf_forward. */
#ifndef WF_ENGINE_FORWARD_H
#define WF_ENGINE_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/cpu/threadpool.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "kv/kv_store.h"
#include "proto/base/status.h"

typedef struct wf_fwd_seq {
    const int32_t *tokens;
    int n_tokens;               /* >= 1 */
    int pos;                    /* position of tokens[0] */
    const int32_t *block_table; /* covers positions [0, pos + n_tokens) */
    int n_blocks;
    /* A store split by layer kind (kv/kv_store.h): the sliding-window layers' table, indexed
     * like block_table; only the entries from the window of pos on are read (earlier ones
     * may be -1: released). NULL with an unsplit store. */
    const int32_t *swa_block_table;
    bool want_logits;           /* logits of the last token */
    /* LoRA adapters of this sequence's virtual model (engine/lora.h), applied in order on top
     * of the shared base matmuls; NULL/0: the bare backbone. Adapters must be of this model
     * and stay alive for the run. */
    const wf_lora_use *loras;
    int n_loras;                /* 0..WF_FWD_MAX_LORAS */
} wf_fwd_seq;

#define WF_FWD_MAX_LORAS 8

typedef struct wf_forward wf_forward;

/* pool is borrowed (may be NULL: single-threaded). max_ctx bounds positions (pos + n_tokens);
 * 0 means the model's training context. */
wf_status wf_forward_new(const wf_model *m, wf_threadpool *pool, int max_tokens, int max_seqs,
                         int max_ctx, wf_forward **out, char *err, size_t errlen);
void wf_forward_free(wf_forward *f);

/* Checks one sequence against the limits and kv (token ids, positions, block table covering
 * the positions with valid block ids). WF_OK or WF_EINVAL/WF_ERANGE with a message. */
wf_status wf_forward_check_seq(const wf_forward *f, const wf_kv_store *kv, const wf_fwd_seq *s,
                               char *err, size_t errlen);

/* Runs the batch. Sequences must have passed wf_forward_check_seq; the totals must fit
 * max_tokens / max_seqs (else WF_EINVAL, nothing runs). kv must have this model's geometry
 * (F16). */
wf_status wf_forward_run(wf_forward *f, wf_kv_store *kv, const wf_fwd_seq *seqs, int n_seqs);

/* Called on the thread running wf_forward_run once layer `layer`'s K/V of every sequence of the
 * run are written into kv (before that layer's attention), layers in order: a reader may copy
 * or send them while the later layers compute (prefill/decode disaggregation ships layer l
 * while layer l+1 runs). It must not write the store and should return quickly. */
typedef void (*wf_forward_layer_fn)(void *user, int layer);
/* fn NULL: none. Set between runs only. */
void wf_forward_set_layer_hook(wf_forward *f, wf_forward_layer_fn fn, void *user);

/* Logits [n_vocab] of the i-th sequence (in order) that had want_logits in the last run. */
const float *wf_forward_logits(const wf_forward *f, int i);

/* The model's sliding-window layers as a kv/kv_store.h swa_layers mask (bit l: layer l), or 0
 * when it has none or more than 64 layers (then its KV store stays unsplit). */
uint64_t wf_forward_swa_layers(const wf_model *m);

/* Bytes reserved for activations and scratch (for reports). */
size_t wf_forward_memory_bytes(const wf_forward *f);

#endif
