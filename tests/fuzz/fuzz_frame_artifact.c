/* libFuzzer target for the artifact transfer frame decoders (proto/frame_artifact.h): see
 * fuzz_frame_common.h for what each input goes through.
 * weft-fuzz: covers=proto/frame.c,proto/frame_artifact.c */
#include "fuzz_frame_common.h"
#include "proto/frame_artifact.h"

static wf_status family_roundtrip(const wf_frame_view *f, wf_frame_arena *arena, uint8_t *out,
                                  size_t cap, size_t *len) {
    char err[256];
    wf_status st;
    if (f->hdr.type == WF_FRAME_ARTIFACT_TRANSFER) {
        wf_frame_artifact_transfer m;
        if ((st = wf_frame_decode_artifact_transfer(f, arena, &m, err, sizeof err)) != WF_OK)
            return st;
        if (wf_frame_encode_artifact_transfer(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    if (f->hdr.type == WF_FRAME_TRANSFER_DONE) {
        wf_frame_transfer_done m;
        if ((st = wf_frame_decode_transfer_done(f, &m, err, sizeof err)) != WF_OK) return st;
        if (wf_frame_encode_transfer_done(&m, out, cap, len, err, sizeof err) != WF_OK) abort();
        return WF_OK;
    }
    return WF_EPROTO;
}
