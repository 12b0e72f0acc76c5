/* The one status enum of the project. 0 is success, negative values are errors, and
 * WF_IN_PROGRESS is a success that says "not finished yet, you will be called back".
 *
 *     wf_status st = wf_gguf_open(path, &file);
 *     if (st != WF_OK) fprintf(stderr, "open %s: %s\n", path, wf_status_str(st));
 *
 * Thread-safe; no allocation. Keep wf_status_str() and tests/proto/test_status.c in step with
 * this list. */
#ifndef WF_BASE_STATUS_H
#define WF_BASE_STATUS_H

#include <stdarg.h>
#include <stddef.h>

typedef enum wf_status {
    WF_IN_PROGRESS = 1,      /* accepted; completion is reported later */
    WF_OK = 0,
    WF_EINVAL = -1,          /* an argument or input is invalid */
    WF_ENOMEM = -2,          /* an allocation failed */
    WF_EIO = -3,             /* a read, write or system call failed */
    WF_ENOTFOUND = -4,       /* a named thing (file, model, key, route) does not exist */
    WF_EFORMAT = -5,         /* a file or message is malformed, truncated or corrupt */
    WF_EUNSUPPORTED = -6,    /* valid, but this build or model does not support it */
    WF_EFULL = -7,           /* a bounded queue or pool is full: back-pressure */
    WF_ECANCELLED = -8,      /* cancelled by the caller or a client disconnect */
    WF_ETIMEDOUT = -9,       /* a deadline passed */
    WF_ERANGE = -10,         /* a value is outside its allowed range */
    WF_EBUSY = -11,          /* temporarily unavailable (loading, draining); retry later */
    WF_ECLOSED = -12,        /* the peer or object is closed */
    WF_EPROTO = -13,         /* a peer broke the protocol */
    WF_EPERM = -14,          /* not authorised */
    WF_EOVERLOAD = -15,      /* admission control rejected the work: its SLO cannot be met */
    WF_EINTERNAL = -16,      /* a bug: an invariant did not hold */
    WF_EPEER = -17,          /* a peer process of the world failed (died or its link broke) */
} wf_status;

#define WF_STATUS_MIN WF_EPEER /* the most negative value, for tests and tables */

/* A short, stable, human-readable description ("invalid argument"). Never NULL: unknown values
 * give "unknown status". */
const char *wf_status_str(wf_status status);

/* The enumerator's name ("WF_EINVAL"), for logs and wire formats; "WF_UNKNOWN" if unknown. */
const char *wf_status_name(wf_status status);

/* Error messages for functions that take (char *err, size_t errlen): format into err when
 * err is non-NULL and errlen > 0 (truncating), and do nothing otherwise.
 *
 *     if (n_dims > 4)
 *         return wf_status_errorf(err, errlen, WF_EFORMAT, "tensor '%s': %u dimensions", name, n);
 */
void wf_errorf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void wf_verrorf(char *err, size_t errlen, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* As wf_errorf, returning status: a one-line "fail with this message". */
wf_status wf_status_errorf(char *err, size_t errlen, wf_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
