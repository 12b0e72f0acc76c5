/* The systemd notification protocol (sd_notify(3)), written by hand so weftd needs no
 * libsystemd: one datagram per message to the unix socket named by $NOTIFY_SOCKET (an
 * abstract-namespace socket when the name starts with '@'). Outside systemd (no
 * NOTIFY_SOCKET) every call is a no-op.
 *
 *     wf_sdnotify_send("READY=1\nSTATUS=serving on 127.0.0.1:8080");
 *     uint64_t usec = wf_sdnotify_watchdog_usec();   // 0: no watchdog asked for
 *     if (usec) ... every usec/2: wf_sdnotify_send("WATCHDOG=1");
 *
 * Thread-safety: calls may come from any thread (each opens its own socket). Returns WF_OK
 * when the message was sent or there is nobody to send it to, WF_EIO when the send failed
 * (logged at debug level: the service keeps running). */
#ifndef WF_SERVER_SDNOTIFY_H
#define WF_SERVER_SDNOTIFY_H

#include <stdint.h>

#include "proto/base/status.h"

wf_status wf_sdnotify_send(const char *message);
/* $WATCHDOG_USEC when it is set for this process ($WATCHDOG_PID absent or ours), else 0. */
uint64_t wf_sdnotify_watchdog_usec(void);

#endif
