/* Image file encoding for the image API's output_format: PNG (server/png.h, libpng), JPEG
 * (libjpeg-turbo) and WebP (libwebp), all through Debian's libraries.
 *
 *     wf_image_format f;
 *     if (!wf_image_format_parse("webp", &f)) 400;
 *     char why[120];
 *     if (!wf_image_format_supports(f, channels, why, sizeof why)) 400 naming output_format;
 *     wf_jbuf out = {0};
 *     wf_image_encode(f, pixels, w, h, channels, 90, &out);   // quality 0..100 (not PNG)
 *     wf_jbuf_free(&out);
 *
 * pixels are row-major 8-bit, height x width x channels. JPEG takes gray and RGB (it has no
 * alpha: 2 and 4 channels are refused, never silently flattened); WebP takes every layout
 * (gray is widened to RGB, which loses nothing). Pure functions; any thread. */
#ifndef WF_SERVER_IMGENC_H
#define WF_SERVER_IMGENC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"
#include "server/openai.h"

typedef enum wf_image_format {
    WF_IMAGE_FORMAT_PNG = 0,
    WF_IMAGE_FORMAT_JPEG,
    WF_IMAGE_FORMAT_WEBP,
} wf_image_format;

/* "png", "jpeg" (or "jpg"), "webp". false for anything else. */
bool wf_image_format_parse(const char *name, wf_image_format *out);
/* "png", "jpeg", "webp": the name OpenAI's events carry in output_format. */
const char *wf_image_format_name(wf_image_format f);
/* Whether f encodes images of `channels` channels; why says why not. */
bool wf_image_format_supports(wf_image_format f, int channels, char *why, size_t whylen);
/* Appends the file to out. quality 0..100 for JPEG and WebP (lossy; 100: best), ignored by PNG.
 * WF_EINVAL (sizes, channels, quality), WF_ENOMEM, WF_EIO (the library's error). */
wf_status wf_image_encode(wf_image_format f, const uint8_t *pixels, int width, int height,
                          int channels, int quality, wf_jbuf *out);

#endif
