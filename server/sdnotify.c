/* sd_notify by hand (see sdnotify.h): the protocol is one datagram of "KEY=value" lines. */
#include "server/sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto/base/log.h"

wf_status wf_sdnotify_send(const char *message) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path) return WF_OK;
    size_t plen = strlen(path);
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if ((path[0] != '/' && path[0] != '@') || plen >= sizeof addr.sun_path) {
        WF_LOG_DEBUG("server", NULL, "NOTIFY_SOCKET '%s' is not a usable socket name", path);
        return WF_EIO;
    }
    memcpy(addr.sun_path, path, plen);
    if (path[0] == '@') addr.sun_path[0] = '\0'; /* abstract namespace: no NUL terminator */
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + (path[0] == '/'));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return WF_EIO;
    ssize_t n = sendto(fd, message, strlen(message), MSG_NOSIGNAL, (struct sockaddr *)&addr, alen);
    int e = errno;
    close(fd);
    if (n < 0) {
        WF_LOG_DEBUG("server", NULL, "sd_notify to %s: %s", path, strerror(e));
        return WF_EIO;
    }
    return WF_OK;
}

uint64_t wf_sdnotify_watchdog_usec(void) {
    const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    if (!us || !*us) return 0;
    if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid()) return 0;
    char *end = NULL;
    unsigned long long v = strtoull(us, &end, 10);
    return end && *end == '\0' ? (uint64_t)v : 0;
}
