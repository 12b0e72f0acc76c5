/* Logging with a level and context (module, request id, rank).
 *
 *     wf_log_set_level(WF_LOG_DEBUG);
 *     WF_LOG_INFO("server", NULL, "listening on %s:%d", host, port);
 *     WF_LOG_WARN("sched", req->id, "rejected: predicted TTFT %.0f ms", ttft_ms);
 *
 * Lines go to stderr as "2026-11-21T20:00:00.123Z INFO  [server] req=abc message", or to a
 * callback set with wf_log_set_callback() (library users route engine/ and kv/ logs there).
 * Thread-safe: one line is written with one call, and the level is an atomic. */
#ifndef WF_BASE_LOG_H
#define WF_BASE_LOG_H

#include <stdarg.h>

typedef enum wf_log_level {
    WF_LOG_LEVEL_TRACE = 0,
    WF_LOG_LEVEL_DEBUG,
    WF_LOG_LEVEL_INFO,
    WF_LOG_LEVEL_WARN,
    WF_LOG_LEVEL_ERROR,
    WF_LOG_LEVEL_OFF,
} wf_log_level;

typedef struct wf_log_context {
    const char *module;     /* "server", "engine", ...; never NULL */
    const char *request_id; /* NULL when the line is not about one request */
    int rank;               /* worker rank, or -1 */
} wf_log_context;

/* Receives every line at or above the level. `message` is formatted, without a newline. */
typedef void (*wf_log_fn)(wf_log_level level, const wf_log_context *ctx, const char *message,
                          void *user);

void wf_log_set_level(wf_log_level level);
wf_log_level wf_log_get_level(void);
/* NULL restores the default stderr writer. */
void wf_log_set_callback(wf_log_fn fn, void *user);
/* Sets the rank printed by this thread's lines (-1: none). */
void wf_log_set_thread_rank(int rank);

/* "trace".."error", "off"; returns 0, or -1 if the name is unknown (level untouched). */
int wf_log_level_parse(const char *name, wf_log_level *out);
const char *wf_log_level_name(wf_log_level level);

#if defined(__GNUC__)
#define WF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define WF_PRINTF(a, b)
#endif

void wf_log(wf_log_level level, const char *module, const char *request_id, const char *fmt, ...)
    WF_PRINTF(4, 5);
void wf_log_v(wf_log_level level, const char *module, const char *request_id, const char *fmt,
              va_list ap) WF_PRINTF(4, 0);

#define WF_LOG_ENABLED(lvl) ((lvl) >= wf_log_get_level())
#define WF_LOG_AT(lvl, module, req, ...) \
    do { if (WF_LOG_ENABLED(lvl)) wf_log((lvl), (module), (req), __VA_ARGS__); } while (0)
#define WF_LOG_TRACE(module, req, ...) WF_LOG_AT(WF_LOG_LEVEL_TRACE, module, req, __VA_ARGS__)
#define WF_LOG_DEBUG(module, req, ...) WF_LOG_AT(WF_LOG_LEVEL_DEBUG, module, req, __VA_ARGS__)
#define WF_LOG_INFO(module, req, ...) WF_LOG_AT(WF_LOG_LEVEL_INFO, module, req, __VA_ARGS__)
#define WF_LOG_WARN(module, req, ...) WF_LOG_AT(WF_LOG_LEVEL_WARN, module, req, __VA_ARGS__)
#define WF_LOG_ERROR(module, req, ...) WF_LOG_AT(WF_LOG_LEVEL_ERROR, module, req, __VA_ARGS__)

#endif
