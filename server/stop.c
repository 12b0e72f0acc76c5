/* Streaming stop-string matcher: a naive scan is fine, there are at most four short strings
 * and the held text is shorter than the longest of them plus one token. */
#include "server/stop.h"

#include <stdlib.h>
#include <string.h>

void wf_stop_init(wf_stop *s, char *const *stops, int n_stops) {
    memset(s, 0, sizeof *s);
    s->stops = stops;
    s->n_stops = n_stops;
    for (int i = 0; i < n_stops; i++)
        if (strlen(stops[i]) > s->max_len) s->max_len = strlen(stops[i]);
}

static void drop_consumed(wf_stop *s) {
    if (!s->consumed) return;
    memmove(s->buf, s->buf + s->consumed, s->len - s->consumed);
    s->len -= s->consumed;
    s->consumed = 0;
}

bool wf_stop_push(wf_stop *s, const char *text, size_t len, const char **emit, size_t *n) {
    *emit = text;
    *n = 0;
    if (s->matched) return true;
    if (s->n_stops == 0) {
        *n = len;
        return false;
    }
    drop_consumed(s);
    if (s->len + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->len + len + 1) cap *= 2;
        char *b = realloc(s->buf, cap);
        if (!b) { /* degrade: no matching for this piece rather than losing text */
            *n = len;
            return false;
        }
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, text, len);
    s->len += len;
    *emit = s->buf;
    /* earliest full match */
    size_t best = (size_t)-1;
    for (int i = 0; i < s->n_stops; i++) {
        size_t sl = strlen(s->stops[i]);
        for (size_t p = 0; p + sl <= s->len && p < best; p++)
            if (memcmp(s->buf + p, s->stops[i], sl) == 0) {
                best = p;
                break;
            }
    }
    if (best != (size_t)-1) {
        s->matched = true;
        *n = best;
        s->consumed = s->len;
        return true;
    }
    /* hold back the longest suffix that is a proper prefix of a stop string */
    size_t hold = 0;
    for (int i = 0; i < s->n_stops; i++) {
        size_t sl = strlen(s->stops[i]);
        size_t maxk = sl - 1 < s->len ? sl - 1 : s->len;
        for (size_t k = maxk; k > hold; k--)
            if (memcmp(s->buf + s->len - k, s->stops[i], k) == 0) {
                hold = k;
                break;
            }
    }
    *n = s->len - hold;
    s->consumed = *n;
    return false;
}

void wf_stop_flush(wf_stop *s, const char **emit, size_t *n) {
    drop_consumed(s);
    *emit = s->buf ? s->buf : "";
    *n = s->matched ? 0 : s->len;
    s->consumed = s->len;
}

void wf_stop_free(wf_stop *s) {
    free(s->buf);
    memset(s, 0, sizeof *s);
}
