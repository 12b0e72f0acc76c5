/* Stop strings matched on the detokenized text as it streams, across token boundaries: text
 * that could be the start of a stop string is held back until it is known not to be.
 *
 *     wf_stop st;
 *     wf_stop_init(&st, req.stop, req.n_stop);
 *     const char *emit; size_t n;
 *     if (wf_stop_push(&st, piece, piece_len, &emit, &n)) { send(emit, n); finish("stop"); }
 *     else send(emit, n);
 *     ...at the end: wf_stop_flush(&st, &emit, &n); send(emit, n);
 *     wf_stop_free(&st);
 *
 * The stop text itself is never emitted. Not thread-safe; one per choice. The stop strings must
 * outlive the matcher. */
#ifndef WF_SERVER_STOP_H
#define WF_SERVER_STOP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct wf_stop {
    char *const *stops;
    int n_stops;
    size_t max_len;
    char *buf;          /* held text (+ text emitted by the last call, before `consumed`) */
    size_t len, cap, consumed;
    bool matched;
} wf_stop;

void wf_stop_init(wf_stop *s, char *const *stops, int n_stops);
/* Adds text. *emit and *n: the bytes now safe to send (valid until the next call). Returns true
 * once a stop string matched: *emit is the text before it; later pushes emit nothing. On an
 * allocation failure the text is emitted unchecked. */
bool wf_stop_push(wf_stop *s, const char *text, size_t len, const char **emit, size_t *n);
/* The generation ended without a match: the held-back tail. */
void wf_stop_flush(wf_stop *s, const char **emit, size_t *n);
void wf_stop_free(wf_stop *s);

#endif
