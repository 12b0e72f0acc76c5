/* PNG through libpng, base64 by table (see png.h). */
#include "server/png.h"

#include <png.h>
#include <setjmp.h>

static void write_fn(png_structp png, png_bytep data, png_size_t len) {
    wf_jbuf *out = png_get_io_ptr(png);
    wf_jbuf_raw(out, (const char *)data, len);
}

static void flush_fn(png_structp png) { (void)png; }

wf_status wf_png_encode(const uint8_t *pixels, int width, int height, int channels, wf_jbuf *out) {
    static const int types[] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGBA};
    if (!pixels || width < 1 || height < 1 || channels < 1 || channels > 4 || width > 1 << 16 ||
        height > 1 << 16)
        return WF_EINVAL;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    if (!png) return WF_ENOMEM;
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return WF_ENOMEM;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return WF_EIO;
    }
    png_set_write_fn(png, out, write_fn, flush_fn);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, types[channels],
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    size_t stride = (size_t)width * (size_t)channels;
    for (int y = 0; y < height; y++) png_write_row(png, (png_const_bytep)(pixels + (size_t)y * stride));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return out->failed ? WF_ENOMEM : WF_OK;
}

void wf_base64_append(wf_jbuf *out, const void *data, size_t len) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t *p = data;
    char q[4];
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        q[0] = tab[v >> 18], q[1] = tab[(v >> 12) & 63], q[2] = tab[(v >> 6) & 63], q[3] = tab[v & 63];
        wf_jbuf_raw(out, q, 4);
    }
    if (i < len) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0);
        q[0] = tab[v >> 18], q[1] = tab[(v >> 12) & 63];
        q[2] = i + 1 < len ? tab[(v >> 6) & 63] : '=';
        q[3] = '=';
        wf_jbuf_raw(out, q, 4);
    }
}
