/* Default log writer (stderr, one write per line) and the settable callback. */
#include "proto/base/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static _Atomic int current_level = WF_LOG_LEVEL_INFO;
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static wf_log_fn sink_fn;
static void *sink_user;
static _Thread_local int thread_rank = -1;

static const char *const level_names[] = {"trace", "debug", "info", "warn", "error", "off"};

void wf_log_set_level(wf_log_level level) { atomic_store(&current_level, (int)level); }
wf_log_level wf_log_get_level(void) { return (wf_log_level)atomic_load(&current_level); }
void wf_log_set_thread_rank(int rank) { thread_rank = rank; }

void wf_log_set_callback(wf_log_fn fn, void *user) {
    pthread_mutex_lock(&sink_lock);
    sink_fn = fn;
    sink_user = user;
    pthread_mutex_unlock(&sink_lock);
}

int wf_log_level_parse(const char *name, wf_log_level *out) {
    for (int i = 0; i <= WF_LOG_LEVEL_OFF; i++) {
        if (name && strcasecmp(name, level_names[i]) == 0) {
            *out = (wf_log_level)i;
            return 0;
        }
    }
    if (name && strcasecmp(name, "warning") == 0) {
        *out = WF_LOG_LEVEL_WARN;
        return 0;
    }
    return -1;
}

const char *wf_log_level_name(wf_log_level level) {
    return (level >= 0 && level <= WF_LOG_LEVEL_OFF) ? level_names[level] : "?";
}

static void write_stderr(wf_log_level level, const wf_log_context *ctx, const char *message) {
    static const char *const tags[] = {"TRACE", "DEBUG", "INFO ", "WARN ", "ERROR"};
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s [%s]",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, tags[level], ctx->module);
    if (ctx->rank >= 0 && n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, " rank=%d", ctx->rank);
    if (ctx->request_id && n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, " req=%s", ctx->request_id);
    if (n < (int)sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, " %s", message);
    if (n >= (int)sizeof line - 1) n = (int)sizeof line - 2;
    line[n++] = '\n';
    /* One write per line so concurrent threads never interleave within a line. */
    ssize_t unused = write(STDERR_FILENO, line, (size_t)n);
    (void)unused;
}

void wf_log_v(wf_log_level level, const char *module, const char *request_id, const char *fmt,
              va_list ap) {
    if (level < wf_log_get_level() || level >= WF_LOG_LEVEL_OFF) return;
    char message[1792];
    vsnprintf(message, sizeof message, fmt, ap);
    wf_log_context ctx = {module ? module : "-", request_id, thread_rank};
    pthread_mutex_lock(&sink_lock);
    wf_log_fn fn = sink_fn;
    void *user = sink_user;
    pthread_mutex_unlock(&sink_lock);
    if (fn)
        fn(level, &ctx, message, user);
    else
        write_stderr(level, &ctx, message);
}

void wf_log(wf_log_level level, const char *module, const char *request_id, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    wf_log_v(level, module, request_id, fmt, ap);
    va_end(ap);
}
