/* libFuzzer target for the control frame decoders (proto/frame_control.h) and the envelope and
 * streaming reader (proto/frame.h): see fuzz_frame_common.h for what each input goes through.
 * weft-fuzz: covers=proto/frame.c,proto/frame_control.c */
#include "fuzz_frame_common.h"
#include "proto/frame_control.h"

static wf_status family_roundtrip(const wf_frame_view *f, wf_frame_arena *arena, uint8_t *out,
                                  size_t cap, size_t *len) {
    char err[256];
    wf_status st;
    switch (f->hdr.type) {
    case WF_FRAME_HELLO: {
        wf_frame_hello m;
        if ((st = wf_frame_decode_hello(f, arena, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_hello(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_WELCOME: {
        wf_frame_welcome m;
        if ((st = wf_frame_decode_welcome(f, arena, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_welcome(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_WORLD_TABLE: {
        wf_frame_world_table m;
        if ((st = wf_frame_decode_world_table(f, arena, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_world_table(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_REJECT: {
        wf_frame_reject m;
        if ((st = wf_frame_decode_reject(f, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_reject(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_HEARTBEAT: {
        wf_frame_heartbeat m;
        if ((st = wf_frame_decode_heartbeat(f, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_heartbeat(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_WORKER_INFO: {
        static wf_frame_worker_info m; /* 64 codecs: off the stack */
        if ((st = wf_frame_decode_worker_info(f, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_worker_info(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_CANCEL: {
        wf_frame_cancel m;
        if ((st = wf_frame_decode_cancel(f, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_cancel(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_DRAIN: {
        wf_frame_drain m;
        if ((st = wf_frame_decode_drain(f, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_drain(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_VMODEL: {
        wf_frame_vmodel m;
        if ((st = wf_frame_decode_vmodel(f, arena, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_vmodel(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_VMODEL_ACK: {
        wf_frame_vmodel_ack m;
        if ((st = wf_frame_decode_vmodel_ack(f, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_vmodel_ack(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    case WF_FRAME_SHUTDOWN:
    case WF_FRAME_ERROR: {
        wf_frame_status_msg m;
        if ((st = wf_frame_decode_status_msg(f, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_status_msg((wf_frame_type)f->hdr.type, &m, out, cap, len, err,
                                       sizeof err) != WF_OK)
            abort();
        return WF_OK;
    }
    }
    return WF_EPROTO;
}
