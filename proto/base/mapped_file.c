#include "proto/base/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

wf_status wf_mapped_file_open(const char *path, size_t min_size, const char *what, wf_mapped_file *out,
                              char *err, size_t errlen) {
    if (!out || !path || !what) return wf_status_errorf(err, errlen, WF_EINVAL, "invalid arguments");
    out->data = NULL;
    out->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return wf_status_errorf(err, errlen, e == ENOENT ? WF_ENOTFOUND : WF_EIO, "%s: %s", path, strerror(e));
    }
    struct stat sb;
    wf_status st = WF_OK;
    if (fstat(fd, &sb) != 0)
        st = wf_status_errorf(err, errlen, WF_EIO, "%s: fstat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = wf_status_errorf(err, errlen, WF_EIO, "%s: not a regular file", path);
    else if (sb.st_size == 0)
        st = wf_status_errorf(err, errlen, WF_EFORMAT, "%s: not a %s file: the file is empty", path, what);
    else if ((uint64_t)sb.st_size < min_size)
        st = wf_status_errorf(err, errlen, WF_EFORMAT, "%s: truncated: %lld bytes, a %s file has at least %zu",
                              path, (long long)sb.st_size, what, min_size);
    else if ((uint64_t)sb.st_size > SIZE_MAX)
        st = wf_status_errorf(err, errlen, WF_EUNSUPPORTED, "%s: file too large to map", path);
    if (st != WF_OK) {
        close(fd);
        return st;
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (map == MAP_FAILED) return wf_status_errorf(err, errlen, WF_EIO, "%s: mmap: %s", path, strerror(e));
    out->data = map;
    out->size = (size_t)sb.st_size;
    return WF_OK;
}

void wf_mapped_file_close(wf_mapped_file *f) {
    if (!f || !f->data) return;
    munmap(f->data, f->size);
    f->data = NULL;
    f->size = 0;
}
