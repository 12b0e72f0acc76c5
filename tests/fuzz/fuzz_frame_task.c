/* libFuzzer target for the task frame decoders (proto/frame_task.h): see fuzz_frame_common.h
 * for what each input goes through. A dispatch that decodes also drives the worker's reply path:
 * its outputs go into a TASK_EVENT that must decode and apply back onto the batch.
 * weft-fuzz: covers=proto/frame.c,proto/frame_task.c */
#include "fuzz_frame_common.h"
#include "proto/frame_task.h"

static uint8_t event_buf[FUZZ_MAX_PAYLOAD + WF_FRAME_HEADER_SIZE];
static wf_frame_task_result results[WF_FRAME_MAX_TASKS];

static void reply_path(wf_task_batch *b, wf_frame_arena *arena) {
    wf_frame_task_event ev, back;
    wf_frame_task_event_from_batch(b, results, NULL, &ev);
    size_t len;
    char err[256];
    wf_status st = wf_frame_encode_task_event(&ev, event_buf, sizeof event_buf, &len, err,
                                              sizeof err);
    if (st == WF_ERANGE) return; /* a reply bigger than this harness's buffer */
    if (st != WF_OK) abort();
    wf_frame_view f;
    if (wf_frame_open(event_buf, len, FUZZ_MAX_PAYLOAD, &f, err, sizeof err) != WF_OK) abort();
    st = wf_frame_decode_task_event(&f, arena, &back, err, sizeof err);
    if (st == WF_ERANGE) return; /* the arena is shared with the dispatch */
    if (st != WF_OK || wf_frame_task_event_apply(&back, b, err, sizeof err) != WF_OK) abort();
}

static wf_status family_roundtrip(const wf_frame_view *f, wf_frame_arena *arena, uint8_t *out,
                                  size_t cap, size_t *len) {
    char err[256];
    wf_status st;
    switch (f->hdr.type) {
    case WF_FRAME_TASK_DISPATCH: {
        wf_task_batch m;
        if ((st = wf_frame_decode_task_dispatch(f, arena, &m, err, sizeof err)) != WF_OK)
            return st;
        if (wf_frame_encode_task_dispatch(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        /* duplicate task ids make apply match the first: only exercise unique-id batches */
        bool unique = true;
        for (int i = 0; i < m.n_tasks && unique; i++)
            for (int k = 0; k < i && unique; k++) unique = m.tasks[i].id != m.tasks[k].id;
        if (unique) reply_path(&m, arena);
        return WF_OK;
    }
    case WF_FRAME_TASK_EVENT: {
        wf_frame_task_event m;
        if ((st = wf_frame_decode_task_event(f, arena, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_task_event(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_BATCH_DONE: {
        wf_frame_batch_done m;
        if ((st = wf_frame_decode_batch_done(f, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_batch_done(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    }
    return WF_EPROTO;
}
