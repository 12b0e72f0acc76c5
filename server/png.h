/* PNG encoding of 8-bit images (libpng) and base64, for the image API's b64_json.
 *
 *     wf_jbuf png = {0};
 *     if (wf_png_encode(pixels, 32, 32, 1, &png) != WF_OK) ...;   // gray, RGB or RGBA
 *     wf_jbuf b64 = {0};
 *     wf_base64_append(&b64, png.data, png.len);
 *     wf_jbuf_free(&png); wf_jbuf_free(&b64);
 *
 * pixels are row-major, height x width x channels (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA).
 * Pure functions of their inputs; any thread. */
#ifndef WF_SERVER_PNG_H
#define WF_SERVER_PNG_H

#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"
#include "server/openai.h"

/* Appends the PNG file to out. WF_EINVAL (sizes, channels), WF_ENOMEM, WF_EIO (libpng error). */
wf_status wf_png_encode(const uint8_t *pixels, int width, int height, int channels, wf_jbuf *out);
/* Appends the standard base64 (RFC 4648, padded) of data to out. */
void wf_base64_append(wf_jbuf *out, const void *data, size_t len);

#endif
