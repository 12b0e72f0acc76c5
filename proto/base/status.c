/* Names and descriptions of wf_status values. */
#include "proto/base/status.h"

#include <stddef.h>
#include <stdio.h>

struct status_text {
    const char *name;
    const char *text;
};

/* Indexed by 1 - status, so WF_IN_PROGRESS is 0 and WF_OK is 1. */
static const struct status_text status_texts[] = {
    {"WF_IN_PROGRESS", "in progress"},
    {"WF_OK", "ok"},
    {"WF_EINVAL", "invalid argument"},
    {"WF_ENOMEM", "out of memory"},
    {"WF_EIO", "input/output error"},
    {"WF_ENOTFOUND", "not found"},
    {"WF_EFORMAT", "malformed data"},
    {"WF_EUNSUPPORTED", "not supported"},
    {"WF_EFULL", "queue or pool full"},
    {"WF_ECANCELLED", "cancelled"},
    {"WF_ETIMEDOUT", "timed out"},
    {"WF_ERANGE", "value out of range"},
    {"WF_EBUSY", "busy, retry later"},
    {"WF_ECLOSED", "closed"},
    {"WF_EPROTO", "protocol error"},
    {"WF_EPERM", "not authorised"},
    {"WF_EOVERLOAD", "overloaded"},
    {"WF_EINTERNAL", "internal error"},
    {"WF_EPEER", "peer failed"},
};

static const struct status_text *lookup(wf_status status) {
    int index = 1 - (int)status;
    if (index < 0 || (size_t)index >= sizeof status_texts / sizeof status_texts[0]) return NULL;
    return &status_texts[index];
}

const char *wf_status_str(wf_status status) {
    const struct status_text *t = lookup(status);
    return t ? t->text : "unknown status";
}

const char *wf_status_name(wf_status status) {
    const struct status_text *t = lookup(status);
    return t ? t->name : "WF_UNKNOWN";
}

void wf_verrorf(char *err, size_t errlen, const char *fmt, va_list ap) {
    if (err && errlen > 0) vsnprintf(err, errlen, fmt, ap);
}

void wf_errorf(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    wf_verrorf(err, errlen, fmt, ap);
    va_end(ap);
}

wf_status wf_status_errorf(char *err, size_t errlen, wf_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    wf_verrorf(err, errlen, fmt, ap);
    va_end(ap);
    return status;
}
