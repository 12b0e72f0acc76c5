/* Task frames: a wf_task_batch going to the ranks of a group (TASK_DISPATCH), the per-task
 * outputs coming back (TASK_EVENT), and the batch's end (BATCH_DONE). Wire layouts: the tables
 * in proto/frame.h. The scheduler encodes and decodes these every iteration, so encoders write
 * straight from the batch and decoders fill caller memory only (no malloc).
 *
 *     // coordinator: send a batch
 *     wf_frame_encode_task_dispatch(&batch, buf, cap, &len, err, sizeof err);
 *     // worker: rebuild it (pointers into the arena), run it, report the outputs
 *     wf_frame_decode_task_dispatch(&f, &arena, &batch, err, sizeof err);
 *     run(&batch);
 *     wf_frame_task_event ev;
 *     wf_frame_task_event_from_batch(&batch, results, NULL, &ev);  // results: n_tasks entries
 *     wf_frame_encode_task_event(&ev, buf, cap, &len, err, sizeof err);
 *     wf_frame_batch_done done = {.iteration = batch.iteration, .status = WF_OK};
 *     wf_frame_encode_batch_done(&done, buf2, cap2, &len2, err, sizeof err);
 *     // coordinator: copy the outputs into its own batch, then complete it
 *     wf_frame_decode_task_event(&f, &arena, &ev, err, sizeof err);
 *     wf_frame_task_event_apply(&ev, &batch, err, sizeof err);
 *
 * What crosses: every task header field and its kind's inputs (for LLM samples the whole
 * wf_sampling_params, logit_bias included, the rng_state, history, n_prompt, suppress_eos). Not
 * crossing: task outputs in a dispatch (they come back in TASK_EVENT) and wf_task_dit.pixels
 * (an in-process output; across processes the image stays in its holders' artifact table).
 *
 * Ownership and statuses as in proto/frame.h. Sizing the arena: the *_arena_bound() functions
 * give an upper bound of what one frame of a given payload length can use, so an arena sized
 * from the receiver's max_payload can never be exhausted by a valid frame. Reentrant. */
#ifndef WF_PROTO_FRAME_TASK_H
#define WF_PROTO_FRAME_TASK_H

#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"
#include "proto/task.h"

/* The outputs of one task. */
typedef struct wf_frame_task_result {
    uint64_t task_id;
    wf_task_kind kind;
    wf_status status;              /* WF_OK, or why this task failed */
    const char *message;           /* NULL encodes as ""; decoded: never NULL */
    uint64_t t_begin_ns, t_end_ns;
    /* PREFILL, DECODE: only the outputs of each sample cross (rng_state advanced, out,
     * out_is_eog); decoded samples have params and history NULL. */
    wf_task_sample *samples;
    int n_samples;
    /* ENCODE, DENOISE, DECODE_IMAGE: denoising steps applied to the latent after the task */
    int step_reached;
} wf_frame_task_result;

typedef struct wf_frame_task_event {
    uint64_t iteration;
    wf_frame_task_result *results;
    int n_results;
} wf_frame_task_event;

typedef struct wf_frame_batch_done {
    uint64_t iteration;
    wf_status status;              /* != WF_OK: the whole batch failed */
    char message[WF_FRAME_TASK_MESSAGE_MAX];
} wf_frame_batch_done;

/* TASK_DISPATCH. The encoder checks what the decoder checks (counts, enums, ranges) and returns
 * WF_EINVAL naming the field. The decoder rebuilds *out (tasks, tokens, block tables, samples,
 * sampling params, logit_bias, history in the arena); output fields are zeroed. */
wf_status wf_frame_encode_task_dispatch(const wf_task_batch *batch, void *buf, size_t cap,
                                        size_t *len, char *err, size_t errlen);
wf_status wf_frame_decode_task_dispatch(const wf_frame_view *f, wf_frame_arena *arena,
                                        wf_task_batch *out, char *err, size_t errlen);
/* Arena bytes a TASK_DISPATCH payload of payload_len bytes can need, at most. */
size_t wf_frame_task_dispatch_arena_bound(size_t payload_len);

/* TASK_EVENT. */
wf_status wf_frame_encode_task_event(const wf_frame_task_event *ev, void *buf, size_t cap,
                                     size_t *len, char *err, size_t errlen);
wf_status wf_frame_decode_task_event(const wf_frame_view *f, wf_frame_arena *arena,
                                     wf_frame_task_event *out, char *err, size_t errlen);
size_t wf_frame_task_event_arena_bound(size_t payload_len);

/* Points results[i] (batch->n_tasks entries, caller memory) at the outputs of batch->tasks[i]:
 * status, times, samples (shared, not copied), step_reached = the latent's step.
 * messages: NULL, or one message per task (NULL entries: none). No allocation. */
void wf_frame_task_event_from_batch(wf_task_batch *batch, wf_frame_task_result *results,
                                    const char *const *messages, wf_frame_task_event *out);
/* Copies the event's outputs into the tasks of batch with the same ids (status, times, each
 * sample's rng_state/out/out_is_eog, the latent's step). WF_EPROTO (err says which) when the
 * iteration differs, a task id is unknown, or a kind or sample count does not match; tasks
 * before the mismatch may already be updated. */
wf_status wf_frame_task_event_apply(const wf_frame_task_event *ev, wf_task_batch *batch,
                                    char *err, size_t errlen);

/* BATCH_DONE. */
wf_status wf_frame_encode_batch_done(const wf_frame_batch_done *m, void *buf, size_t cap,
                                     size_t *len, char *err, size_t errlen);
wf_status wf_frame_decode_batch_done(const wf_frame_view *f, wf_frame_batch_done *out, char *err,
                                     size_t errlen);

#endif
