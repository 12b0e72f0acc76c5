/* A read-only, private memory mapping of a whole regular file: what the model readers (GGUF,
 * safetensors) parse in place, so weights stay in the page cache and processes share them.
 *
 *     wf_mapped_file f;
 *     char err[256];
 *     if (wf_mapped_file_open(path, 8, "safetensors", &f, err, sizeof err) != WF_OK) { ... }
 *     parse(f.data, f.size);
 *     wf_mapped_file_close(&f);
 *
 * Ownership: the mapping belongs to the wf_mapped_file until wf_mapped_file_close; the file
 * descriptor is closed at once (the mapping keeps the file alive). Thread-safe: no shared state.
 * Returns WF_OK, WF_EINVAL, WF_ENOTFOUND (no such file), WF_EIO (not a regular file, mmap
 * failed), WF_EFORMAT (shorter than min_size; the message names `what`), WF_EUNSUPPORTED (too
 * large to map). Every message starts with the path. */
#ifndef WF_BASE_MAPPED_FILE_H
#define WF_BASE_MAPPED_FILE_H

#include <stddef.h>

#include "proto/base/status.h"

typedef struct wf_mapped_file {
    void *data;  /* NULL when closed */
    size_t size; /* the file's length in bytes */
} wf_mapped_file;

/* min_size: the least a file of this format can hold (1 rejects empty files). */
wf_status wf_mapped_file_open(const char *path, size_t min_size, const char *what, wf_mapped_file *out,
                              char *err, size_t errlen);

/* Unmaps; safe on a zeroed or already-closed wf_mapped_file. */
void wf_mapped_file_close(wf_mapped_file *f);

#endif
