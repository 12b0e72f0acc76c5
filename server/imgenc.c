/* JPEG through libjpeg-turbo, WebP through libwebp, PNG through server/png.h (see imgenc.h). */
#include "server/imgenc.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <webp/encode.h>

#include "server/png.h"

bool wf_image_format_parse(const char *name, wf_image_format *out) {
    if (!name) return false;
    if (strcmp(name, "png") == 0) *out = WF_IMAGE_FORMAT_PNG;
    else if (strcmp(name, "jpeg") == 0 || strcmp(name, "jpg") == 0) *out = WF_IMAGE_FORMAT_JPEG;
    else if (strcmp(name, "webp") == 0) *out = WF_IMAGE_FORMAT_WEBP;
    else return false;
    return true;
}

const char *wf_image_format_name(wf_image_format f) {
    switch (f) {
    case WF_IMAGE_FORMAT_JPEG: return "jpeg";
    case WF_IMAGE_FORMAT_WEBP: return "webp";
    default: return "png";
    }
}

bool wf_image_format_supports(wf_image_format f, int channels, char *why, size_t whylen) {
    if (channels < 1 || channels > 4) {
        snprintf(why, whylen, "images of %d channels cannot be encoded", channels);
        return false;
    }
    if (f == WF_IMAGE_FORMAT_JPEG && (channels == 2 || channels == 4)) {
        snprintf(why, whylen, "jpeg has no alpha channel and this model's images have one: use "
                              "\"png\" or \"webp\"");
        return false;
    }
    return true;
}

/* libjpeg reports errors through a callback that must not return: longjmp back. */
typedef struct jpeg_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
} jpeg_err;

static void jpeg_error_exit(j_common_ptr cinfo) { longjmp(((jpeg_err *)(void *)cinfo->err)->jump, 1); }

/* Compressed bytes go straight into the caller's wf_jbuf through a destination manager of our
 * own, staged in a fixed buffer: jpeg_mem_dest's buffer, after a longjmp from the middle of a
 * compression, may already have been replaced (and the old one freed) without the caller's
 * pointer being updated, so no cleanup of it is safe. */
typedef struct jpeg_sink {
    struct jpeg_destination_mgr pub;
    wf_jbuf *out;
    JOCTET stage[16384];
} jpeg_sink;

static void sink_init(j_compress_ptr c) {
    jpeg_sink *k = (jpeg_sink *)(void *)c->dest;
    k->pub.next_output_byte = k->stage;
    k->pub.free_in_buffer = sizeof k->stage;
}

static boolean sink_flush(j_compress_ptr c) { /* the stage is full */
    jpeg_sink *k = (jpeg_sink *)(void *)c->dest;
    wf_jbuf_raw(k->out, (const char *)k->stage, sizeof k->stage);
    sink_init(c);
    return TRUE;
}

static void sink_term(j_compress_ptr c) {
    jpeg_sink *k = (jpeg_sink *)(void *)c->dest;
    wf_jbuf_raw(k->out, (const char *)k->stage, sizeof k->stage - k->pub.free_in_buffer);
}

/* The libjpeg calls behind a setjmp of their own: locals of the function that called setjmp
 * and were changed since are indeterminate after the longjmp (C11 7.13.2.1). */
static bool jpeg_compress_rows(struct jpeg_compress_struct *c, jpeg_err *err, jpeg_sink *sink,
                               const uint8_t *pixels, int width, int height, int channels,
                               int quality) {
    if (setjmp(err->jump)) return false;
    jpeg_create_compress(c);
    sink->pub.init_destination = sink_init;
    sink->pub.empty_output_buffer = sink_flush;
    sink->pub.term_destination = sink_term;
    c->dest = &sink->pub;
    c->image_width = (JDIMENSION)width;
    c->image_height = (JDIMENSION)height;
    c->input_components = channels;
    c->in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(c);
    jpeg_set_quality(c, quality, TRUE);
    jpeg_start_compress(c, TRUE);
    size_t stride = (size_t)width * (size_t)channels;
    while (c->next_scanline < c->image_height) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)c->next_scanline * stride);
        jpeg_write_scanlines(c, &row, 1);
    }
    jpeg_finish_compress(c);
    return true;
}

static wf_status encode_jpeg(const uint8_t *pixels, int width, int height, int channels,
                             int quality, wf_jbuf *out) {
    struct jpeg_compress_struct c;
    memset(&c, 0, sizeof c); /* so jpeg_destroy_compress is safe even if create never ran */
    jpeg_err err;
    c.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_error_exit;
    jpeg_sink *sink = calloc(1, sizeof *sink);
    if (!sink) return WF_ENOMEM;
    sink->out = out;
    const size_t start = out->len;
    bool ok = jpeg_compress_rows(&c, &err, sink, pixels, width, height, channels, quality);
    jpeg_destroy_compress(&c);
    free(sink);
    if (!ok || out->failed) {
        out->len = start; /* nothing of a failed image is left behind */
        return ok ? WF_ENOMEM : WF_EIO;
    }
    return WF_OK;
}

static wf_status encode_webp(const uint8_t *pixels, int width, int height, int channels,
                             int quality, wf_jbuf *out) {
    /* libwebp takes RGB or RGBA: widen gray (and gray + alpha) first. */
    const uint8_t *src = pixels;
    uint8_t *wide = NULL;
    int out_ch = channels;
    if (channels <= 2) {
        out_ch = channels == 1 ? 3 : 4;
        wide = malloc((size_t)width * (size_t)height * (size_t)out_ch);
        if (!wide) return WF_ENOMEM;
        for (size_t i = 0; i < (size_t)width * (size_t)height; i++) {
            uint8_t g = pixels[i * (size_t)channels];
            wide[i * (size_t)out_ch] = wide[i * (size_t)out_ch + 1] = wide[i * (size_t)out_ch + 2] = g;
            if (out_ch == 4) wide[i * 4 + 3] = pixels[i * 2 + 1];
        }
        src = wide;
    }
    uint8_t *data = NULL;
    int stride = width * out_ch;
    size_t n = out_ch == 3 ? WebPEncodeRGB(src, width, height, stride, (float)quality, &data)
                           : WebPEncodeRGBA(src, width, height, stride, (float)quality, &data);
    free(wide);
    if (n == 0) {
        WebPFree(data);
        return WF_EIO;
    }
    wf_jbuf_raw(out, (const char *)data, n);
    WebPFree(data);
    return out->failed ? WF_ENOMEM : WF_OK;
}

wf_status wf_image_encode(wf_image_format f, const uint8_t *pixels, int width, int height,
                          int channels, int quality, wf_jbuf *out) {
    char why[120];
    if (!pixels || width < 1 || height < 1 || width > 1 << 14 || height > 1 << 14 ||
        !wf_image_format_supports(f, channels, why, sizeof why) || quality < 0 || quality > 100)
        return WF_EINVAL;
    switch (f) {
    case WF_IMAGE_FORMAT_JPEG: return encode_jpeg(pixels, width, height, channels, quality, out);
    case WF_IMAGE_FORMAT_WEBP: return encode_webp(pixels, width, height, channels, quality, out);
    default: return wf_png_encode(pixels, width, height, channels, out);
    }
}
