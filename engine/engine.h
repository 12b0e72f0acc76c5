/* The engine: one loaded model (weights mmapped from a GGUF file, tokenizer, chat template) and
 * the executor that runs the scheduler's task batches against a paged KV store.
 *
 *     wf_engine_options o;
 *     wf_engine_options_init(&o);
 *     o.model_path = "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf";
 *     wf_engine *e;
 *     char err[256];
 *     if (wf_engine_open(&o, &e, err, sizeof err) != WF_OK) { fprintf(stderr, "%s\n", err); ... }
 *     wf_kv_geometry g = wf_engine_kv_geometry(e, 16);
 *     wf_kv_store kv;
 *     wf_kv_store_init(&kv, &g, 256u << 20);
 *     wf_executor ex = wf_engine_executor(e, &kv);
 *     wf_executor_run(ex, &batch, NULL, 0);  // see proto/task.h
 *     ...
 *     wf_engine_free(e);                      // after the last batch completed; then free kv
 *
 * Threading: wf_engine_open/free from one thread. The executor is asynchronous: dispatch
 * queues the batch (up to 2) to the engine's own executor thread and returns at once; that
 * thread runs the batches one at a time, driving the engine's thread pool, and calls each
 * done() from there (dispatch, cancel and synchronize are thread-safe). wf_engine_forward_logits
 * must not run while a dispatched batch does. wf_engine_info/tokenizer/chat_* are read-only
 * and thread-safe.
 * Memory: everything a step needs (activations, scratch, logits, sampler) is allocated in
 * wf_engine_open for max_batch_tokens tokens and max_seqs sequences; a batch never
 * allocates. */
#ifndef WF_ENGINE_ENGINE_H
#define WF_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/chat.h"
#include "engine/lora.h"
#include "engine/tokenizer.h"
#include "kv/kv_store.h"
#include "proto/base/status.h"
#include "proto/task.h"

typedef struct wf_engine wf_engine;

typedef struct wf_engine_options {
    const char *model_path;  /* GGUF file; required */
    int n_threads;           /* compute threads including the caller; 0 = one per core */
    int max_batch_tokens;    /* most tokens one batch may carry (sum of tasks' n_tokens) */
    int max_seqs;            /* most tasks one batch may carry */
    const char *chat_format; /* "chatml", "llama3", ...; NULL: detect from the GGUF template */
} wf_engine_options;

typedef struct wf_model_info {
    const char *name;   /* general.name, or the file's base name */
    const char *arch;   /* "llama", "qwen2" */
    int n_vocab;
    int n_ctx_train;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int n_embd;
    size_t weight_bytes; /* bytes of all tensors the forward pass reads */
    int64_t matmul_macs; /* multiply-adds per token in the weight matmuls, output included */
} wf_model_info;

/* Defaults: n_threads 0, max_batch_tokens 512, max_seqs 64, chat_format NULL. */
void wf_engine_options_init(wf_engine_options *o);

/* Opens the model: maps the GGUF, validates architecture, hyper-parameters and every tensor
 * (presence, type with kernels, shape), builds the tokenizer, preallocates all step memory and
 * starts the thread pool. Statuses: WF_EINVAL (bad options), WF_ENOTFOUND / WF_EIO (file),
 * WF_EFORMAT (corrupt file, missing/misshapen tensor), WF_EUNSUPPORTED (architecture or tensor
 * type without kernels), WF_ENOMEM. err receives a message naming the problem. */
wf_status wf_engine_open(const wf_engine_options *o, wf_engine **out, char *err, size_t errlen);

/* NULL is a no-op. No executor of this engine may be running. */
void wf_engine_free(wf_engine *e);

const wf_model_info *wf_engine_info(const wf_engine *e);
const wf_tokenizer *wf_engine_tokenizer(const wf_engine *e);
wf_chat_format wf_engine_chat_format(const wf_engine *e);
const char *wf_engine_chat_template(const wf_engine *e); /* raw jinja text or NULL */

/* The KV layout this model needs: n_layers, n_kv_heads, head_dim, F16 (as llama.cpp). */
wf_kv_geometry wf_engine_kv_geometry(const wf_engine *e, int block_size);
/* The same with the sliding-window layers marked (swa_layers, swa_window), for a store split by
 * layer kind (kv/kv_store.h: local layers keep only their window's blocks); equal to the above
 * for a model without such layers. Tasks on a split store carry llm.kv.swa_block_table. */
wf_kv_geometry wf_engine_kv_geometry_swa(const wf_engine *e, int block_size);

/* The executor (proto/task.h) that runs task batches of this engine against `kv`: one batched
 * forward pass over all tasks' tokens, then sampling for tasks with samples. `kv` must have
 * the geometry of wf_engine_kv_geometry or _swa (any block size) and outlive the executor. The
 * executor's context belongs to the engine (freed by wf_engine_free); each call returns a new
 * executor over the engine's single forward state, so drive at most one at a time.
 * Batch statuses (through done): WF_EINVAL (batch larger than max_batch_tokens/max_seqs, or a
 * task whose block table does not cover its positions: that task fails, others run),
 * WF_EINTERNAL; WF_ECANCELLED for a batch cancelled before it started. dispatch itself returns
 * WF_EBUSY when two batches are already queued. Optional slots: supports (PREFILL, DECODE,
 * FINISH), cancel (a batch not yet started), synchronize; free is NULL (the engine owns it). */
wf_executor wf_engine_executor(wf_engine *e, wf_kv_store *kv);

/* Virtual models: a task whose header names vmodel != 0 runs with the adapters bound to that
 * id (applied in order, each with its scale; no merging into the weights); vmodel 0 is the
 * bare backbone. A task naming an id with no binding fails alone with WF_ENOTFOUND.
 * wf_engine_lora_load reads an adapter for this engine's model (engine/lora.h: formats and
 * errors); the caller owns it and frees it with wf_lora_free once no binding uses it and no
 * batch runs with it (unbind, then the next batch boundary: unbind waits for a running batch).
 * bind copies the list (1..WF_FWD_MAX_LORAS entries), replacing an earlier binding of the id.
 * Thread-safe against the executor: a batch sees each binding whole, before or after. */
wf_status wf_engine_lora_load(wf_engine *e, const char *path, wf_lora **out, char *err,
                              size_t errlen);
wf_status wf_engine_vmodel_bind(wf_engine *e, uint32_t vmodel, const wf_lora_use *uses, int n,
                                char *err, size_t errlen);
/* WF_OK, or WF_ENOTFOUND if the id had no binding. */
wf_status wf_engine_vmodel_unbind(wf_engine *e, uint32_t vmodel);

/* Layer progress of the executor's batches: fn(user, l) is called on the executor's thread, in
 * layer order, as soon as layer l's K/V of every sequence of a batch are in the store (before
 * that layer's attention), so a reader may ship layer l while layer l+1 computes. It must not
 * write the store and should return quickly. Set (or clear with NULL) only while no batch of
 * this engine is queued or running; the dispatch that follows sees it. */
typedef void (*wf_engine_layer_fn)(void *user, int layer);
void wf_engine_set_layer_hook(wf_engine *e, wf_engine_layer_fn fn, void *user);

/* Additions beyond the agreed API (used by weft-run, tests and benchmarks). */

/* Runs one task batch without sampling and copies the logits of each task's last token into
 * logits[task][n_vocab] (tasks in order). For tests; the executor is the serving path. */
wf_status wf_engine_forward_logits(wf_engine *e, wf_kv_store *kv, wf_task *tasks, int n_tasks,
                                   float *logits);

#endif
