/* Server-Sent Events framing for weft-bench's streaming responses (see sse.h). */
#include "loadgen/sse.h"

#include <stdlib.h>
#include <string.h>

#define SSE_MAX_BYTES (16u << 20)

void wf_loadgen_sse_init(wf_loadgen_sse *sse, wf_loadgen_sse_cb cb, void *ud) {
    memset(sse, 0, sizeof *sse);
    sse->cb = cb;
    sse->ud = ud;
    sse->max_bytes = SSE_MAX_BYTES;
}

void wf_loadgen_sse_reset(wf_loadgen_sse *sse) {
    sse->line_len = 0;
    sse->data_len = 0;
    sse->has_data = false;
    sse->after_cr = false;
    sse->event[0] = '\0';
}

void wf_loadgen_sse_free(wf_loadgen_sse *sse) {
    free(sse->line);
    free(sse->data);
    memset(sse, 0, sizeof *sse);
}

static wf_status grow(char **buf, size_t *cap, size_t need, size_t max) {
    if (need <= *cap) return WF_OK;
    if (need > max) return WF_EPROTO;
    size_t ncap = *cap ? *cap : 256;
    while (ncap < need) ncap *= 2;
    char *p = realloc(*buf, ncap);
    if (!p) return WF_ENOMEM;
    *buf = p;
    *cap = ncap;
    return WF_OK;
}

static wf_status end_line(wf_loadgen_sse *sse) {
    char *l = sse->line;
    size_t n = sse->line_len;
    sse->line_len = 0;
    if (n == 0) { /* blank line: dispatch */
        if (sse->has_data) {
            wf_status st = grow(&sse->data, &sse->data_cap, sse->data_len + 1, sse->max_bytes + 1);
            if (st != WF_OK) return st;
            sse->data[sse->data_len] = '\0';
            sse->cb(sse->ud, sse->event[0] ? sse->event : NULL, sse->data, sse->data_len);
        }
        sse->data_len = 0;
        sse->has_data = false;
        sse->event[0] = '\0';
        return WF_OK;
    }
    if (l[0] == ':') return WF_OK;
    size_t colon = 0;
    while (colon < n && l[colon] != ':') colon++;
    const char *val = l + colon;
    size_t vlen = 0;
    if (colon < n) {
        val = l + colon + 1;
        vlen = n - colon - 1;
        if (vlen && *val == ' ') val++, vlen--;
    }
    if (colon == 4 && memcmp(l, "data", 4) == 0) {
        size_t need = sse->data_len + vlen + 2;
        wf_status st = grow(&sse->data, &sse->data_cap, need, sse->max_bytes);
        if (st != WF_OK) return st;
        if (sse->has_data) sse->data[sse->data_len++] = '\n';
        memcpy(sse->data + sse->data_len, val, vlen);
        sse->data_len += vlen;
        sse->has_data = true;
    } else if (colon == 5 && memcmp(l, "event", 5) == 0) {
        size_t k = vlen < sizeof sse->event - 1 ? vlen : sizeof sse->event - 1;
        memcpy(sse->event, val, k);
        sse->event[k] = '\0';
    }
    return WF_OK;
}

wf_status wf_loadgen_sse_feed(wf_loadgen_sse *sse, const char *buf, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];
        if (c == '\n' && sse->after_cr) {
            sse->after_cr = false;
            continue;
        }
        sse->after_cr = false;
        if (c == '\r' || c == '\n') {
            sse->after_cr = c == '\r';
            wf_status st = end_line(sse);
            if (st != WF_OK) return st;
            continue;
        }
        /* Copy the run of ordinary bytes at once. */
        size_t j = i;
        while (j < n && buf[j] != '\r' && buf[j] != '\n') j++;
        size_t k = j - i;
        wf_status st = grow(&sse->line, &sse->line_cap, sse->line_len + k, sse->max_bytes);
        if (st != WF_OK) return st;
        memcpy(sse->line + sse->line_len, buf + i, k);
        sse->line_len += k;
        i = j - 1;
    }
    return WF_OK;
}
