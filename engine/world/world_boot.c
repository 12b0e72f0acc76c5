/* The world's TCP bootstrap: rank 0 gathers every joiner's hello (UCX worker address, the key
 * of its symmetric buffer, its process identity) and answers with the rank table; later it
 * admits replacements into dead ranks' slots. Length-prefixed messages (world_wire.c), every
 * read and write bounded by the join deadline. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/world/world_state.h"
#include "proto/base/clock.h"
#include "proto/base/log.h"

static int remaining_ms(uint64_t deadline) {
    uint64_t now = wf_clock_now_ns();
    return now >= deadline ? 0 : (int)((deadline - now) / 1000000ull) + 1;
}

static int io_full(int fd, void *p, size_t n, int writing, uint64_t deadline) {
    uint8_t *b = p;
    while (n > 0) {
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        int ms = remaining_ms(deadline);
        if (ms == 0) return -ETIMEDOUT;
        int pr = poll(&pfd, 1, ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -errno;
        if (pr == 0) return -ETIMEDOUT;
        ssize_t k = writing ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k < 0) return -errno;
        if (k == 0) return -ECONNRESET;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int send_frame(int fd, const wf__wbuf *b, uint64_t deadline) {
    uint8_t len[4] = {(uint8_t)b->len, (uint8_t)(b->len >> 8), (uint8_t)(b->len >> 16),
                      (uint8_t)(b->len >> 24)};
    int rc = io_full(fd, len, 4, 1, deadline);
    return rc ? rc : io_full(fd, b->p, b->len, 1, deadline);
}

/* Reads one length-prefixed frame and decodes it. */
static wf_status recv_msg(int fd, uint64_t deadline, wf__world_msg *m) {
    memset(m, 0, sizeof *m);
    uint8_t len4[4];
    int rc = io_full(fd, len4, 4, 0, deadline);
    if (rc) return rc == -ETIMEDOUT ? WF_ETIMEDOUT : WF_EIO;
    uint32_t len = (uint32_t)len4[0] | (uint32_t)len4[1] << 8 | (uint32_t)len4[2] << 16 |
                   (uint32_t)len4[3] << 24;
    if (len > WF__WORLD_MAX_FRAME) return WF_EPROTO;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return WF_ENOMEM;
    rc = io_full(fd, buf, len, 0, deadline);
    wf_status st = rc ? (rc == -ETIMEDOUT ? WF_ETIMEDOUT : WF_EIO) : wf__world_msg_decode(buf, len, m);
    free(buf);
    if (st == WF_EFORMAT) st = WF_EPROTO;
    return st;
}

static void encode_header(wf__wbuf *b, uint32_t type, int32_t rank, int32_t n, int32_t status,
                          uint32_t epoch) {
    wf__wbuf_u32(b, type);
    wf__wbuf_u32(b, (uint32_t)rank);
    wf__wbuf_u32(b, (uint32_t)n);
    wf__wbuf_u32(b, (uint32_t)status);
    wf__wbuf_u32(b, epoch);
}

static wf_status send_welcome(wf_world *w, int fd, int rank, wf_status status, uint64_t deadline) {
    wf__wbuf b = {0};
    encode_header(&b, WF__WORLD_MSG_WELCOME, rank, w->n, status, w->epoch);
    if (status == WF_OK)
        for (int r = 0; r < w->n; r++) wf__wbuf_entry(&b, &w->peers[r].e);
    wf_status st = b.oom ? WF_ENOMEM : send_frame(fd, &b, deadline) ? WF_EIO : WF_OK;
    free(b.p);
    return st;
}

/* A listening TCP socket on host:port (0: any free port); -1 with err. */
static int listen_on(const char *host, int port, char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *ai;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    if (getaddrinfo(host, service, &hints, &ai) != 0) {
        wf_errorf(err, errlen, "cannot resolve %s", host);
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 256) != 0) {
        wf_errorf(err, errlen, "bootstrap listen on %s:%d: %s", host, port, strerror(errno));
        if (fd >= 0) close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

int wf__world_boot_listen(wf_world *w, char *err, size_t errlen) {
    return listen_on(w->cfg.host, w->cfg.port, err, errlen);
}

int wf_world_boot_socket(const char *host, int *port, char *err, size_t errlen) {
    int fd = listen_on(host, *port, err, errlen);
    if (fd < 0 || *port != 0) return fd;
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        wf_errorf(err, errlen, "bootstrap socket on %s: %s", host, strerror(errno));
        close(fd);
        return -1;
    }
    *port = ntohs(a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port : ((struct sockaddr_in *)&a)->sin_port);
    return fd;
}

static int accept_one(const wf_world *w, int lfd, uint64_t deadline) {
    for (;;) {
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        int ms = remaining_ms(deadline);
        if (ms == 0) return -ETIMEDOUT;
        if (w->cfg.join_abort && w->cfg.join_abort(w->cfg.join_abort_arg)) return -ECANCELED;
        int pr = poll(&pfd, 1, w->cfg.join_abort && ms > 100 ? 100 : ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) continue;
        if (pr < 0) return -errno;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) return fd;
        if (errno != EINTR && errno != ECONNABORTED) return -errno;
    }
}

/* Rank 0: whether a joiner's hello (read with status rs) can be taken. One of another bootstrap
 * version, for another world size, or garbage is logged and told why (best effort: a joiner
 * that can read the refusal reports it at once instead of waiting out its join time-out); *m is
 * then freed. */
static wf_status take_hello(wf_world *w, int fd, wf_status rs, wf__world_msg *m, uint64_t deadline) {
    wf_status why = WF_EPROTO;
    if (rs == WF_OK && m->type == WF__WORLD_MSG_HELLO && m->n_ranks == w->n) return WF_OK;
    if (rs == WF_OK && m->type == WF__WORLD_MSG_HELLO) {
        WF_LOG_WARN("world", NULL, "bootstrap: a joiner expects a world of %d ranks, this one has "
                    "%d; refused", m->n_ranks, w->n);
        why = WF_EINVAL;
    } else if (WF__WORLD_MSG_FAMILY(m->type) == WF__WORLD_MSG_FAMILY(WF__WORLD_MSG_HELLO) &&
               WF__WORLD_MSG_VERSION_OF(m->type) != WF__WORLD_MSG_VERSION) {
        WF_LOG_WARN("world", NULL, "bootstrap: a joiner speaks bootstrap version %c, this "
                    "coordinator %c (mixed weft releases?); refused",
                    WF__WORLD_MSG_VERSION_OF(m->type), WF__WORLD_MSG_VERSION);
    } else {
        WF_LOG_WARN("world", NULL, "bootstrap: a joiner sent a bad hello (%s)",
                    wf_status_name(rs == WF_OK ? WF_EPROTO : rs));
    }
    wf__world_msg_free(m);
    if (rs != WF_EIO && rs != WF_ETIMEDOUT) send_welcome(w, fd, -1, why, deadline);
    return why;
}

/* Rank 0: gathers the n - 1 hellos, assigns the slots, sends everyone the table. */
wf_status wf__world_boot_coordinate(wf_world *w, char *err, size_t errlen) {
    uint64_t deadline = wf_clock_now_ns() + (uint64_t)w->cfg.join_timeout_ms * 1000000ull;
    int n = w->n, n_conn = 0;
    int *fds = malloc(sizeof(int) * (size_t)n), *slot_of = malloc(sizeof(int) * (size_t)n);
    wf__world_msg *hellos = calloc((size_t)n, sizeof *hellos);
    wf_status st = WF_OK;
    if (!fds || !slot_of || !hellos) {
        st = WF_ENOMEM;
        goto out;
    }
    while (n_conn < n - 1) {
        int fd = accept_one(w, w->listen_fd, deadline);
        if (fd == -ETIMEDOUT) {
            char missing[200] = "";
            size_t used = 0;
            for (int r = 1; r < n; r++) {
                int taken = 0;
                for (int i = 0; i < n_conn; i++) taken |= hellos[i].rank == r;
                if (!taken && used < sizeof missing - 8)
                    used += (size_t)snprintf(missing + used, sizeof missing - used, " %d", r);
            }
            st = wf_status_errorf(err, errlen, WF_ETIMEDOUT,
                                  "world formation timed out after %d ms: %d of %d ranks joined; "
                                  "slots not claimed:%s", w->cfg.join_timeout_ms, n_conn + 1, n,
                                  missing);
            goto out;
        }
        if (fd == -ECANCELED) {
            st = wf_status_errorf(err, errlen, WF_ECANCELLED, "world formation abandoned: %d of %d ranks joined",
                                  n_conn + 1, n);
            goto out;
        }
        if (fd < 0) {
            st = wf_status_errorf(err, errlen, WF_EIO, "accept: %s", strerror(-fd));
            goto out;
        }
        wf__world_msg m;
        if (take_hello(w, fd, recv_msg(fd, deadline, &m), &m, deadline) != WF_OK) {
            close(fd);
            continue;
        }
        int dup = 0;
        for (int i = 0; i < n_conn; i++) dup |= m.rank >= 0 && hellos[i].rank == m.rank;
        if (dup || m.rank == 0) {
            WF_LOG_WARN("world", NULL, "bootstrap: slot %d claimed twice; refused", m.rank);
            send_welcome(w, fd, m.rank, WF_EINVAL, deadline);
            wf__world_msg_free(&m);
            close(fd);
            continue;
        }
        fds[n_conn] = fd;
        hellos[n_conn++] = m;
    }
    /* Explicit slots first, then the "any" joiners in arrival order. */
    int next = 1;
    for (int i = 0; i < n_conn; i++) {
        if (hellos[i].rank > 0) {
            slot_of[i] = hellos[i].rank;
            continue;
        }
        for (;; next++) {
            int taken = 0;
            for (int j = 0; j < n_conn; j++) taken |= hellos[j].rank == next;
            if (!taken) break;
        }
        slot_of[i] = hellos[i].rank = next++;
    }
    for (int i = 0; i < n_conn; i++) {
        wf__world_entry *e = &hellos[i].entries[0];
        e->incarnation = 1;
        w->peers[slot_of[i]].e = *e;
        memset(e, 0, sizeof *e);
    }
    for (int i = 0; i < n_conn; i++) {
        if (send_welcome(w, fds[i], slot_of[i], WF_OK, deadline) != WF_OK) {
            st = wf_status_errorf(err, errlen, WF_EIO, "sending the rank table to rank %d failed",
                                  slot_of[i]);
            break;
        }
    }
out:
    for (int i = 0; i < n_conn; i++) {
        close(fds[i]);
        wf__world_msg_free(&hellos[i]);
    }
    free(fds);
    free(slot_of);
    free(hellos);
    return st;
}

static int tcp_connect(const wf_world *w, uint64_t deadline, char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", w->cfg.port);
    if (getaddrinfo(w->cfg.host, port, &hints, &ai) != 0) {
        wf_errorf(err, errlen, "cannot resolve %s", w->cfg.host);
        return -1;
    }
    int fd = -1, last_errno = 0;
    /* Rank 0 may not be listening yet: retry until the join deadline. */
    while (wf_clock_now_ns() < deadline) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) break;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        last_errno = errno;
        close(fd);
        fd = -1;
        usleep(20000);
    }
    freeaddrinfo(ai);
    if (fd < 0)
        wf_errorf(err, errlen, "cannot reach the coordinator at %s:%d: %s", w->cfg.host,
                  w->cfg.port, strerror(last_errno ? last_errno : ETIMEDOUT));
    return fd;
}

/* A joiner (or a replacement): hello, then the table. */
wf_status wf__world_boot_join(wf_world *w, char *err, size_t errlen) {
    uint64_t deadline = wf_clock_now_ns() + (uint64_t)w->cfg.join_timeout_ms * 1000000ull;
    int fd = tcp_connect(w, deadline, err, errlen);
    if (fd < 0) return WF_ETIMEDOUT;
    wf__wbuf b = {0};
    encode_header(&b, WF__WORLD_MSG_HELLO, w->cfg.rank, w->n, 0, 0);
    wf__wbuf_entry(&b, &w->self);
    wf_status st = WF_OK;
    wf__world_msg m = {0};
    if (b.oom) {
        st = WF_ENOMEM;
    } else if (send_frame(fd, &b, deadline) != 0) {
        st = wf_status_errorf(err, errlen, WF_EIO, "sending hello to the coordinator failed");
    } else if ((st = recv_msg(fd, deadline, &m)) != WF_OK) {
        if (WF__WORLD_MSG_FAMILY(m.type) == WF__WORLD_MSG_FAMILY(WF__WORLD_MSG_WELCOME) &&
            WF__WORLD_MSG_VERSION_OF(m.type) != WF__WORLD_MSG_VERSION)
            st = wf_status_errorf(err, errlen, WF_EPROTO, "the coordinator speaks world bootstrap "
                                  "version %c, this process %c: run one weft release on every rank",
                                  WF__WORLD_MSG_VERSION_OF(m.type), WF__WORLD_MSG_VERSION);
        else
            wf_errorf(err, errlen, "no rank table from the coordinator: %s", wf_status_str(st));
    } else if (m.type != WF__WORLD_MSG_WELCOME) {
        st = wf_status_errorf(err, errlen, WF_EPROTO, "bad answer from the coordinator");
    } else if (m.status != WF_OK && m.n_ranks != w->n) {
        st = wf_status_errorf(err, errlen, (wf_status)m.status, "the coordinator's world has %d "
                              "ranks, this process was started for %d", m.n_ranks, w->n);
    } else if (m.status != WF_OK) {
        st = wf_status_errorf(err, errlen, (wf_status)m.status, "the coordinator refused slot %d: %s",
                              w->cfg.rank, wf_status_str((wf_status)m.status));
    } else if (m.n_ranks != w->n) {
        st = wf_status_errorf(err, errlen, WF_EPROTO, "bad answer from the coordinator");
    } else {
        w->rank = m.rank;
        w->epoch = m.epoch;
        for (int r = 0; r < w->n; r++) {
            w->peers[r].e = m.entries[r];
            memset(&m.entries[r], 0, sizeof m.entries[r]);
        }
    }
    wf__world_msg_free(&m);
    free(b.p);
    close(fd);
    return st;
}

wf_status wf_world_admit(wf_world *w, int *rank_out) {
    if (w->rank != 0 || w->listen_fd < 0)
        return wf__world_fail(w, WF_EINVAL, -1, "only rank 0 admits replacements");
    uint64_t deadline = wf_clock_now_ns() + (uint64_t)w->cfg.join_timeout_ms * 1000000ull;
    for (;;) {
        int fd = accept_one(w, w->listen_fd, deadline);
        if (fd == -ETIMEDOUT)
            return wf__world_fail(w, WF_ETIMEDOUT, -1, "no replacement joined in %d ms",
                        w->cfg.join_timeout_ms);
        if (fd < 0) return wf__world_fail(w, WF_EIO, -1, "accept: %s", strerror(-fd));
        wf__world_msg m;
        if (take_hello(w, fd, recv_msg(fd, deadline, &m), &m, deadline) != WF_OK) {
            close(fd);
            continue;
        }
        int r = m.rank;
        if (r <= 0) {
            /* A replacement must name its slot; rank 0 cannot be replaced. */
            send_welcome(w, fd, 0, WF_EINVAL, deadline);
            wf__world_msg_free(&m);
            close(fd);
            continue;
        }
        uint32_t inc = w->peers[r].e.incarnation + 1;
        m.entries[0].incarnation = inc;
        wf__world_apply_entry(w, r, &m.entries[0]);
        wf__world_msg_free(&m);
        w->epoch++;
        wf_status st = send_welcome(w, fd, r, WF_OK, deadline);
        close(fd);
        if (st != WF_OK) WF_LOG_WARN("world", NULL, "welcome to the replacement of rank %d failed", r);
        /* Tell everyone else; a rank that is itself dead is skipped, not waited for. */
        wf__wbuf b = {0};
        encode_header(&b, WF__WORLD_MSG_UPDATE, r, w->n, 0, w->epoch);
        wf__wbuf_entry(&b, &w->peers[r].e);
        if (b.oom) {
            free(b.p);
            return wf__world_fail(w, WF_ENOMEM, r, "out of memory");
        }
        wf_world_op *ops = calloc((size_t)w->n, sizeof *ops);
        if (!ops) {
            free(b.p);
            return wf__world_fail(w, WF_ENOMEM, r, "out of memory");
        }
        for (int q = 1; q < w->n; q++) {
            if (q == r) continue;
            ops[0] = (wf_world_op){.kind = WF_WORLD_SEND, .peer = q,
                                   .tag = {.kind = WF_WORLD_TAG_CTRL}, .buf = b.p, .len = b.len};
            wf_status sst = wf_world_run(w, ops, 1);
            if (sst != WF_OK)
                WF_LOG_WARN("world", NULL, "membership update to rank %d: %s", q, w->err);
        }
        free(ops);
        free(b.p);
        WF_LOG_INFO("world", NULL, "rank %d re-admitted (incarnation %u, epoch %u)", r, inc,
                    w->epoch);
        if (rank_out) *rank_out = r;
        w->err[0] = '\0';
        w->err_rank = -1;
        return WF_OK;
    }
}
