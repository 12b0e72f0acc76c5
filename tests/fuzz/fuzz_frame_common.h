/* Shared driver of the frame fuzz targets (tests/fuzz/fuzz_frame_*.c). Each input goes three
 * ways: (1) as raw bytes through wf_frame_open and the streaming reader (split at a point taken
 * from the input), (2) resealed: bytes 24.. become the payload of a frame whose header (type and
 * version from bytes 4..7) gets correct lengths and checksums, so the fuzzer reaches the payload
 * decoders without having to forge CRCs. Every frame that decodes is (3) re-encoded and must
 * give the same payload bytes (one encoding per message), or the target aborts. The including
 * file defines family_roundtrip(). */
#ifndef WF_FUZZ_FRAME_COMMON_H
#define WF_FUZZ_FRAME_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_PAYLOAD (1u << 20)

static uint8_t fuzz_arena[8 << 20];
static uint8_t fuzz_out[FUZZ_MAX_PAYLOAD + WF_FRAME_HEADER_SIZE];
static uint8_t fuzz_stream_buf[FUZZ_MAX_PAYLOAD + WF_FRAME_HEADER_SIZE];

/* Decodes f (a frame of the family or not) and, on success, re-encodes it into out. Returns
 * WF_OK with *len when both worked; the decode status otherwise. */
static wf_status family_roundtrip(const wf_frame_view *f, wf_frame_arena *arena, uint8_t *out,
                                  size_t cap, size_t *len);

static void check_frame(const wf_frame_view *f) {
    wf_frame_arena arena;
    wf_frame_arena_init(&arena, fuzz_arena, sizeof fuzz_arena);
    size_t len = 0;
    if (family_roundtrip(f, &arena, fuzz_out, sizeof fuzz_out, &len) != WF_OK) return;
    bool other = f->hdr.major != WF_FRAME_VERSION_MAJOR || f->hdr.minor != WF_FRAME_VERSION_MINOR;
    /* Trailing fields of a newer version are dropped on purpose, and an older frame re-encodes
     * with the fields appended since: only frames of this version must come back byte for byte. */
    if (other) return;
    if (len != f->frame_len ||
        memcmp(fuzz_out + WF_FRAME_HEADER_SIZE, f->payload, f->hdr.payload_len) != 0)
        abort(); /* decode then encode must reproduce the payload */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy: reading one byte past the input is an ASan error. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    char err[256];
    wf_frame_view f;

    /* (1) raw bytes */
    if (wf_frame_open(copy, size, FUZZ_MAX_PAYLOAD, &f, err, sizeof err) == WF_OK) check_frame(&f);
    wf_frame_stream s;
    if (wf_frame_stream_init(&s, fuzz_stream_buf, sizeof fuzz_stream_buf, FUZZ_MAX_PAYLOAD) !=
        WF_OK)
        abort();
    size_t split = size ? copy[size - 1] % (size + 1) : 0, fed = 0;
    size_t pieces[2] = {split, size - split};
    for (int p = 0; p < 2; p++) {
        size_t used;
        if (wf_frame_stream_feed(&s, copy + fed, pieces[p], &used) != WF_OK) break;
        fed += used;
        wf_status st;
        while ((st = wf_frame_stream_next(&s, &f, err, sizeof err)) == WF_OK) check_frame(&f);
        if (st != WF_IN_PROGRESS && err[0] == '\0') abort(); /* an error must say why */
    }

    /* (2) resealed payload */
    if (size >= WF_FRAME_HEADER_SIZE && size - WF_FRAME_HEADER_SIZE <= FUZZ_MAX_PAYLOAD) {
        uint8_t *sealed = malloc(size);
        if (sealed) {
            memcpy(sealed, copy, size);
            wf_frame_header h = {.major = copy[4], .minor = copy[5],
                                 .type = (uint16_t)(copy[6] | copy[7] << 8),
                                 .payload_len = (uint32_t)(size - WF_FRAME_HEADER_SIZE)};
            h.payload_crc = wf_frame_crc32c(0, sealed + WF_FRAME_HEADER_SIZE, h.payload_len);
            wf_frame_write_header(&h, sealed);
            if (wf_frame_open(sealed, size, FUZZ_MAX_PAYLOAD, &f, err, sizeof err) == WF_OK)
                check_frame(&f);
            free(sealed);
        }
    }
    free(copy);
    return 0;
}

#endif
