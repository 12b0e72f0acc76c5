/* The world: TCP bootstrap once (world_boot.c), then UCX endpoints, tagged messages and RMA puts
 * between ranks, every wait bounded and every peer failure reported with the rank it concerns. */
#define _GNU_SOURCE
#include "engine/world/world.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "engine/world/world_impl.h"
#include "engine/world/world_state.h"
#include "proto/base/clock.h"
#include "proto/base/log.h"

#define LIVENESS_PERIOD_NS 20000000ull /* how often a wait checks pending peers' processes */
#define CLOSE_WAIT_NS 2000000000ull    /* bound of a graceful endpoint close */

/* ---- errors --------------------------------------------------------------------------------- */
wf_status wf__world_fail(wf_world *w, wf_status st, int rank, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    w->err_rank = rank;
    WF_LOG_DEBUG("world", NULL, "rank %d: %s (%s)", w->rank, w->err, wf_status_name(st));
    return st;
}

const char *wf_world_error(const wf_world *w) { return w->err; }
int wf_world_error_rank(const wf_world *w) { return w->err_rank; }

wf_world_config wf_world_config_default(void) {
    return (wf_world_config){.n_ranks = 1, .rank = 0, .host = "127.0.0.1", .port = 0,
                             .sym_size = 4u << 20, .timeout_ms = 10000,
                             .join_timeout_ms = 30000, .local_fast_path = 1, .listen_fd = -1};
}

int wf_world_rank(const wf_world *w) { return w->rank; }
int wf_world_size(const wf_world *w) { return w->n; }
uint32_t wf_world_epoch(const wf_world *w) { return w->epoch; }
void *wf_world_sym(const wf_world *w) { return w->sym; }
size_t wf_world_sym_size(const wf_world *w) { return w->sym_size; }
int wf_world_timeout_ms(const wf_world *w) { return w->cfg.timeout_ms; }
void wf_world_set_join_timeout_ms(wf_world *w, int ms) {
    if (ms > 0) w->cfg.join_timeout_ms = ms;
}
void wf_world_set_timeout_ms(wf_world *w, int ms) {
    if (ms > 0) w->cfg.timeout_ms = ms;
}
uint32_t wf_world_incarnation(const wf_world *w, int rank) {
    return rank >= 0 && rank < w->n ? w->peers[rank].e.incarnation : 0;
}
void wf_world_get_stats(const wf_world *w, wf_world_stats *out) { *out = w->stats; }

/* ---- process identity and liveness -------------------------------------------------------- */
/* Field 22 of /proc/PID/stat (start time in clock ticks) and the state letter (field 3). */
static int read_proc_stat(uint32_t pid, char *state, uint64_t *start) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: fields start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ') return -1;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return -1;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return 0;
}

static void fill_identity(wf__world_entry *e) {
    e->pid = (uint32_t)getpid();
    char state;
    if (read_proc_stat(e->pid, &state, &e->start_ticks) != 0) e->start_ticks = 0;
    if (gethostname(e->host, sizeof e->host) != 0) snprintf(e->host, sizeof e->host, "?");
    e->host[sizeof e->host - 1] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(e->node, sizeof e->node, f)) e->node[0] = '\0';
        fclose(f);
        e->node[strcspn(e->node, "\n")] = '\0';
    }
}

/* Whether a peer's process is certainly gone: only decidable for a peer on this kernel. */
static int peer_process_gone(const wf_world *w, const wf__world_entry *e) {
    if (!e->node[0] || strcmp(e->node, w->self.node) != 0 || e->start_ticks == 0) return 0;
    char state;
    uint64_t start;
    if (read_proc_stat(e->pid, &state, &start) != 0) return 1;
    return state == 'Z' || state == 'X' || start != e->start_ticks;
}

/* ---- endpoints ---------------------------------------------------------------------------- */
/* Whether UCX_TLS (NULL: unset) leaves UCX a shared-memory transport between local ranks. When
 * it does not (e.g. "tcp,self"), local endpoints gain nothing from going without peer-error
 * handling, and without it UCX 1.13 aborts the process when a peer dies while its puts, emulated
 * over TCP, are answered (ucp_put_handler: "unexpected error: Endpoint timeout"). */
static int tls_has_shared_memory(const char *tls) {
    if (!tls || !*tls || tls[0] == '^') return 1; /* unset, or a list of exclusions */
    static const char *const shm[] = {"all", "sm", "shm", "posix", "sysv", "cma", "xpmem", "knem"};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", tls);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        for (size_t i = 0; i < sizeof shm / sizeof shm[0]; i++)
            if (strcmp(t, shm[i]) == 0) return 1;
    return 0;
}

static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status) {
    wf_world *w = arg;
    for (int r = 0; r < w->n; r++) {
        if (w->peers[r].ep == ep) {
            WF_LOG_DEBUG("world", NULL, "rank %d: endpoint to rank %d failed: %s", w->rank, r,
                         ucs_status_string(status));
            w->peers[r].failed = WF_EPEER;
            return;
        }
    }
}

/* Waits for a request that must finish without peers (a local close or probe), bounded. */
static ucs_status_t wait_local(wf_world *w, void *req, uint64_t bound_ns) {
    if (req == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    uint64_t deadline = wf_clock_now_ns() + bound_ns;
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(w->worker);
        if (wf_clock_now_ns() > deadline) break;
    }
    /* Freed either way: an unfinished request is released by UCX when it ends (a request never
     * freed makes ucp_worker_destroy assert). */
    ucp_request_free(req);
    return st == UCS_INPROGRESS ? UCS_ERR_TIMED_OUT : st;
}

static void drop_rkeys(peer *p) {
    if (p->rkey) ucp_rkey_destroy(p->rkey);
    p->rkey = NULL;
    for (int i = 0; i < PEER_RKEYS; i++) {
        if (p->rk[i].rkey) ucp_rkey_destroy(p->rk[i].rkey);
        p->rk[i].rkey = NULL;
        p->rk[i].id = 0;
    }
}

static void close_peer_ep(wf_world *w, int r, int force) {
    peer *p = &w->peers[r];
    drop_rkeys(p);
    p->flushed = p->ucx_puts; /* closing ends (or fails) every put in flight */
    if (!p->ep) return;
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
    ucp_ep_h ep = p->ep;
    p->ep = NULL; /* the error callback no longer maps this endpoint to the rank */
    ucs_status_t st = wait_local(w, ucp_ep_close_nbx(ep, &prm), CLOSE_WAIT_NS);
    if (st != UCS_OK && !force) {
        /* The graceful close could not flush (the peer is gone): nothing more to do; UCX
         * releases the endpoint when the request ends. */
        WF_LOG_DEBUG("world", NULL, "rank %d: closing endpoint to rank %d: %s", w->rank, r,
                     ucs_status_string(st));
    }
}

static wf_status get_ep(wf_world *w, int r, ucp_ep_h *out) {
    peer *p = &w->peers[r];
    if (p->failed != WF_OK)
        return wf__world_fail(w, p->failed, r, "rank %d (pid %u on %s) failed", r, p->e.pid, p->e.host);
    if (!p->ep) {
        ucp_ep_params_t prm = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .address = (const ucp_address_t *)p->e.addr,
            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
            .err_handler = {.cb = ep_error_cb, .arg = w},
        };
        /* A local peer: without peer-error mode UCX 1.13 may pick shared memory and CMA (with
         * it, only TCP). Its failure is found by the /proc check (peer_process_gone). */
        if (w->cfg.local_fast_path && p->e.node[0] && strcmp(p->e.node, w->self.node) == 0) {
            prm.field_mask &= ~(uint64_t)UCP_EP_PARAM_FIELD_ERR_HANDLER;
            prm.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        }
        ucs_status_t st = ucp_ep_create(w->worker, &prm, &p->ep);
        if (st != UCS_OK) {
            p->ep = NULL;
            return wf__world_fail(w, WF_EIO, r, "endpoint to rank %d: %s", r, ucs_status_string(st));
        }
        w->stats.endpoints_created++;
    }
    *out = p->ep;
    return WF_OK;
}

static wf_status get_rkey(wf_world *w, int r, ucp_ep_h ep, ucp_rkey_h *out) {
    peer *p = &w->peers[r];
    if (!p->rkey) {
        ucs_status_t st = ucp_ep_rkey_unpack(ep, p->e.rkey, &p->rkey);
        if (st != UCS_OK) {
            p->rkey = NULL;
            return wf__world_fail(w, WF_EIO, r, "remote key of rank %d: %s", r, ucs_status_string(st));
        }
    }
    *out = p->rkey;
    return WF_OK;
}

/* The unpacked key of a peer's exposed region: cached per region id (ids are never reused by
 * the owner process, and a replaced peer's keys go with its endpoint). */
static wf_status region_rkey(wf_world *w, int r, ucp_ep_h ep, const wf_world_region *reg,
                             ucp_rkey_h *out) {
    peer *p = &w->peers[r];
    for (int i = 0; i < PEER_RKEYS; i++)
        if (p->rk[i].rkey && p->rk[i].id == reg->id) {
            *out = p->rk[i].rkey;
            return WF_OK;
        }
    ucp_rkey_h rk;
    ucs_status_t st = ucp_ep_rkey_unpack(ep, reg->rkey, &rk);
    if (st != UCS_OK)
        return wf__world_fail(w, WF_EIO, r, "region key of rank %d: %s", r, ucs_status_string(st));
    w->stats.rkeys_unpacked++;
    int i = p->rk_next;
    p->rk_next = (i + 1) % PEER_RKEYS;
    if (p->rk[i].rkey) ucp_rkey_destroy(p->rk[i].rkey);
    p->rk[i].id = reg->id;
    p->rk[i].rkey = rk;
    *out = rk;
    return WF_OK;
}

/* ---- tags ----------------------------------------------------------------------------------- */
#define TAG_KIND_SHIFT 60
#define TAG_SRC_SHIFT 52
#define TAG_EPOCH_SHIFT 44
#define TAG_GROUP_SHIFT 28
#define TAG_SEQ_SHIFT 8
#define TAG_KIND_MASK (0xfull << TAG_KIND_SHIFT)

static ucp_tag_t make_tag(const wf_world_tag *t, int src, uint32_t epoch) {
    if (t->kind == WF_WORLD_TAG_USER) epoch = 0; /* frames outlive epochs (see world.h) */
    return (ucp_tag_t)(t->kind & 0xfu) << TAG_KIND_SHIFT |
           (ucp_tag_t)((unsigned)src & 0xffu) << TAG_SRC_SHIFT |
           (ucp_tag_t)(epoch & 0xffu) << TAG_EPOCH_SHIFT |
           (ucp_tag_t)(t->group & 0xffffu) << TAG_GROUP_SHIFT |
           (ucp_tag_t)(t->seq & 0xfffffu) << TAG_SEQ_SHIFT | (ucp_tag_t)t->step;
}

/* ---- operations ----------------------------------------------------------------------------- */
static void recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                      void *user_data) {
    wf_world_op *op = user_data;
    if (status == UCS_OK && info) op->received = info->length;
}

static wf_status op_failed(wf_world *w, wf_world_op *op, ucs_status_t us) {
    if (us == UCS_ERR_MESSAGE_TRUNCATED)
        return wf__world_fail(w, WF_EPROTO, op->peer, "message from rank %d longer than %zu bytes",
                    op->peer, op->len);
    if (us == UCS_ERR_CANCELED) return WF_ECANCELLED;
    return wf__world_fail(w, WF_EPEER, op->peer, "%s rank %d: %s",
                op->kind == WF_WORLD_RECV    ? "receive from"
                : op->kind == WF_WORLD_PUT   ? "put to"
                : op->kind == WF_WORLD_FLUSH ? "flush to"
                                             : "send to",
                op->peer, ucs_status_string(us));
}

/* A put into memory this process can map (a peer on this host whose buffer UCX allocated in
 * shared memory: wf_world_mem_alloc, the symmetric buffer) is a copy done here, now: UCX would
 * do the same copy inside ucp_put_nbx, but with ordinary stores, and the endpoint flush that
 * must follow costs progress rounds in which a loaded host may switch this rank out (the 64 MiB
 * all-to-all in BENCHMARKS.md). Complete at return, so nothing is left to flush. Not while
 * puts through UCX to the peer are unflushed: a fence orders those, not this copy. Returns 1
 * if the put was done. */
static int put_direct(wf_world *w, const peer *p, wf_world_op *op, ucp_rkey_h rkey,
                      uint64_t raddr) {
    void *dst;
    if (p->flushed != p->ucx_puts || ucp_rkey_ptr(rkey, raddr, &dst) != UCS_OK) return 0;
    wf__world_copy(dst, op->buf, op->len);
    w->stats.puts_direct++;
    op->status = WF_OK;
    return 1;
}

static wf_status post_one(wf_world *w, wf_world_op *op) {
    op->req_ = NULL;
    op->received = 0;
    op->status = WF_IN_PROGRESS;
    if (op->peer < 0 || op->peer >= w->n || (op->len > 0 && !op->buf))
        return op->status = wf__world_fail(w, WF_EINVAL, op->peer, "bad operation (peer %d)", op->peer);
    op->gen_ = w->peers[op->peer].gen;
    void *req = NULL;
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                               .datatype = ucp_dt_make_contig(1)};
    if (op->kind == WF_WORLD_RECV) {
        /* Receives need no endpoint: a failed peer is noticed while waiting. */
        ucp_tag_recv_info_t info = {0};
        /* Always a request, so that the length arrives through the callback (immediate
         * completion did not report it reliably with UCX 1.13). */
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FIELD_CALLBACK |
                            UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        prm.recv_info.tag_info = &info;
        prm.cb.recv = recv_done;
        prm.user_data = op;
        req = ucp_tag_recv_nbx(w->worker, op->buf, op->len, make_tag(&op->tag, op->peer, w->epoch),
                               ~(ucp_tag_t)0, &prm);
        w->stats.recvs++;
        if (req == NULL) {
            op->received = info.length;
            op->status = WF_OK;
            return WF_OK;
        }
    } else {
        ucp_ep_h ep = NULL;
        wf_status st = get_ep(w, op->peer, &ep);
        if (st != WF_OK) return op->status = st;
        if (op->kind == WF_WORLD_SEND) {
            req = ucp_tag_send_nbx(ep, op->buf, op->len, make_tag(&op->tag, w->rank, w->epoch),
                                   &prm);
            w->stats.sends++;
            w->stats.bytes_sent += op->len;
        } else if (op->kind == WF_WORLD_PUT) {
            peer *p = &w->peers[op->peer];
            const wf_world_region *reg = op->region;
            uint64_t base = reg ? reg->addr : p->e.sym_addr, size = reg ? reg->len : p->e.sym_size;
            if (op->offset > size || op->len > size - op->offset)
                return op->status = wf__world_fail(w, WF_ERANGE, op->peer,
                                         "put of %zu bytes at %zu beyond rank %d's %llu bytes",
                                         op->len, op->offset, op->peer, (unsigned long long)size);
            if (op->len == 0) { /* nothing to write (an empty region has no key) */
                op->status = WF_OK;
                return WF_OK;
            }
            ucp_rkey_h rkey = NULL;
            st = reg ? region_rkey(w, op->peer, ep, reg, &rkey) : get_rkey(w, op->peer, ep, &rkey);
            if (st != WF_OK) return op->status = st;
            w->stats.puts++;
            w->stats.bytes_put += op->len;
            if (put_direct(w, p, op, rkey, base + op->offset)) return WF_OK;
            req = ucp_put_nbx(ep, op->buf, op->len, base + op->offset, rkey, &prm);
            p->ucx_puts++;
        } else if (op->kind == WF_WORLD_FLUSH) {
            peer *p = &w->peers[op->peer];
            w->stats.flushes++;
            if (p->flushed == p->ucx_puts) { /* every put so far is complete at the peer */
                op->status = WF_OK;
                return WF_OK;
            }
            op->seq_ = p->ucx_puts;
            req = ucp_ep_flush_nbx(ep, &(ucp_request_param_t){.op_attr_mask = 0});
            if (req == NULL) p->flushed = op->seq_;
        } else {
            return op->status = wf__world_fail(w, WF_EINVAL, op->peer, "unknown operation kind %d",
                                     (int)op->kind);
        }
    }
    if (req == NULL) {
        op->status = WF_OK;
    } else if (UCS_PTR_IS_ERR(req)) {
        return op->status = op_failed(w, op, UCS_PTR_STATUS(req));
    } else {
        op->req_ = req;
    }
    return WF_OK;
}

wf_status wf_world_post(wf_world *w, wf_world_op *ops, int n) {
    for (int i = 0; i < n; i++) {
        wf_status st = post_one(w, &ops[i]);
        if (st != WF_OK) {
            for (int j = i + 1; j < n; j++) ops[j].status = WF_ECANCELLED, ops[j].req_ = NULL;
            return st;
        }
    }
    return WF_OK;
}

/* Moves a finished request's result into its op. Returns 1 if the op is now complete. */
static int reap(wf_world *w, wf_world_op *op) {
    if (op->status != WF_IN_PROGRESS) return 1;
    ucs_status_t us = ucp_request_check_status(op->req_);
    if (us == UCS_INPROGRESS) return 0;
    ucp_request_free(op->req_);
    op->req_ = NULL;
    op->status = us == UCS_OK ? WF_OK : op_failed(w, op, us);
    if (op->kind == WF_WORLD_FLUSH && us == UCS_OK && op->peer >= 0 && op->peer < w->n &&
        w->peers[op->peer].flushed < op->seq_)
        w->peers[op->peer].flushed = op->seq_;
    return 1;
}

/* Cancels every pending op and waits (bounded) until UCX lets go of their buffers. Sends and
 * puts cannot be cancelled one by one: their peer's endpoint is closed by force, which ends
 * them; the endpoint is created again on next use. */
static void cancel_pending(wf_world *w, wf_world_op *ops, int n) {
    for (int i = 0; i < n; i++) {
        if (ops[i].status != WF_IN_PROGRESS) continue;
        if (ops[i].kind == WF_WORLD_RECV)
            ucp_request_cancel(w->worker, ops[i].req_);
        else if (w->peers[ops[i].peer].ep)
            close_peer_ep(w, ops[i].peer, 1);
    }
    uint64_t deadline = wf_clock_now_ns() + CLOSE_WAIT_NS;
    for (;;) {
        ucp_worker_progress(w->worker);
        int pending = 0;
        for (int i = 0; i < n; i++) pending += !reap(w, &ops[i]);
        if (!pending) return;
        if (wf_clock_now_ns() > deadline) break;
    }
    for (int i = 0; i < n; i++) {
        if (ops[i].status != WF_IN_PROGRESS) continue;
        WF_LOG_ERROR("world", NULL, "rank %d: an operation with rank %d did not end on cancel",
                     w->rank, ops[i].peer);
        ucp_request_free(ops[i].req_); /* UCX releases it when it ends */
        ops[i].req_ = NULL;
        ops[i].status = WF_ECANCELLED;
    }
}

static void handle_ctrl(wf_world *w);

/* A peer that sent its last message and exited at once is gone, but the message may already be
 * in this process (a shared-memory FIFO, a socket buffer) with nobody having progressed it
 * yet: progress once more and look again before blaming it. Returns 1 if no pending op's
 * peer is dead any more (the wait goes on). */
static int check_peers(wf_world *w, wf_world_op *ops, int n, int probe, int *blame);
static int drain_retry(wf_world *w, wf_world_op *ops, int n, int *blame) {
    while (ucp_worker_progress(w->worker) > 0) {
    }
    for (int i = 0; i < n; i++) reap(w, &ops[i]);
    return !check_peers(w, ops, n, 0, blame);
}

/* The rank a wait should blame: a pending peer known dead, else the first pending one. */
static int check_peers(wf_world *w, wf_world_op *ops, int n, int probe, int *blame) {
    *blame = -1;
    for (int i = 0; i < n; i++) {
        if (ops[i].status != WF_IN_PROGRESS) continue;
        peer *p = &w->peers[ops[i].peer];
        if (p->failed == WF_OK && probe && ops[i].peer != w->rank && peer_process_gone(w, &p->e))
            p->failed = WF_EPEER;
        /* A replacement that joined before this rank's probe saw the old process die: the
         * /proc check now looks at the new process, but the op was with the old one. */
        if (p->failed != WF_OK || ops[i].gen_ != p->gen) {
            *blame = ops[i].peer;
            return 1;
        }
        if (*blame < 0) *blame = ops[i].peer;
    }
    return 0;
}

/* What a wait does when a progress round found nothing: ranks may outnumber cores (tests, a
 * busy host), so let the peer we wait for run: sched_yield. With wf_world_set_idle_sleep on,
 * after WAIT_SPIN_NS without events it sleeps on UCX's wake-up descriptor (shared memory and TCP signal it when a message arrives) so that the
 * cores go to the ranks that have work: with 4 ranks on 2 cores, ranks spinning in yield took
 * up to 3x the CPU time of the copy work itself from the ones still copying (BENCHMARKS.md,
 * the 64 MiB all-to-all). Only while every pending op is a receive: whether UCX signals the
 * completion of a send or put (one stuck behind a full queue, say) on the descriptor is not
 * established, and a missed one would cost up to the 20 ms the sleep is capped at for the
 * liveness probe. */
#define WAIT_SPIN_NS 50000ull

static void idle_wait(wf_world *w, unsigned events, int sends, uint64_t idle_ns) {
    if (events) return;
    if (!w->idle_sleep || sends || w->efd < 0 || idle_ns < WAIT_SPIN_NS) {
        sched_yield();
        return;
    }
    w->stats.sleeps++;
    wf_world_wait_event(w, -1, (int)(LIVENESS_PERIOD_NS / 1000000ull));
}

wf_status wf_world_wait(wf_world *w, wf_world_op *ops, int n) {
    uint64_t deadline = wf_clock_now_ns() + (uint64_t)w->cfg.timeout_ms * 1000000ull;
    wf_status result = WF_OK;
    uint64_t idle_since = wf_clock_now_ns();
    for (;;) {
        unsigned events = 0, ev;
        while ((ev = ucp_worker_progress(w->worker)) > 0) events += ev;
        int pending = 0, sends = 0;
        for (int i = 0; i < n; i++) {
            if (!reap(w, &ops[i])) {
                pending++;
                sends += ops[i].kind != WF_WORLD_RECV;
            } else if (ops[i].status != WF_OK && result == WF_OK) {
                result = ops[i].status;
            }
        }
        if (result != WF_OK) break;
        if (!pending) return WF_OK;
        uint64_t now = wf_clock_now_ns();
        if (events) idle_since = now;
        idle_wait(w, events, sends, now - idle_since);
        int probe = now - w->last_probe_ns > LIVENESS_PERIOD_NS;
        if (probe) {
            w->last_probe_ns = now;
            handle_ctrl(w);
        }
        int blame;
        if (check_peers(w, ops, n, probe, &blame) && !drain_retry(w, ops, n, &blame)) {
            peer *p = &w->peers[blame];
            result = wf__world_fail(w, WF_EPEER, blame, "rank %d (pid %u on %s) failed", blame, p->e.pid,
                          p->e.host);
            break;
        }
        if (now > deadline) {
            result = wf__world_fail(w, WF_ETIMEDOUT, blame,
                          "timed out after %d ms waiting for rank %d (%d operations pending)",
                          w->cfg.timeout_ms, blame, pending);
            break;
        }
    }
    char keep[sizeof w->err];
    int keep_rank = w->err_rank;
    memcpy(keep, w->err, sizeof keep);
    cancel_pending(w, ops, n);
    memcpy(w->err, keep, sizeof keep); /* the first cause, not the cancellations */
    w->err_rank = keep_rank;
    return result;
}

int wf_world_test(wf_world *w, wf_world_op *ops, int n) {
    while (ucp_worker_progress(w->worker) > 0) {
    }
    uint64_t now = wf_clock_now_ns();
    int probe = now - w->last_probe_ns > LIVENESS_PERIOD_NS;
    if (probe) {
        w->last_probe_ns = now;
        handle_ctrl(w);
    }
    int done = 0;
    for (int i = 0; i < n; i++) {
        if (reap(w, &ops[i])) {
            done++;
            continue;
        }
        peer *p = &w->peers[ops[i].peer];
        if (p->failed == WF_OK && probe && ops[i].peer != w->rank && peer_process_gone(w, &p->e))
            p->failed = WF_EPEER;
        if (p->failed == WF_OK && ops[i].gen_ == p->gen) continue; /* (gen: see check_peers) */
        while (ucp_worker_progress(w->worker) > 0) { /* what it sent before exiting */
        }
        if (reap(w, &ops[i])) {
            done++;
            continue;
        }
        cancel_pending(w, &ops[i], 1);
        ops[i].status = wf__world_fail(w, WF_EPEER, ops[i].peer, "rank %d (pid %u on %s) failed", ops[i].peer,
                             p->e.pid, p->e.host);
        done++;
    }
    return done;
}

void wf_world_cancel(wf_world *w, wf_world_op *ops, int n) {
    char keep[sizeof w->err];
    int keep_rank = w->err_rank;
    memcpy(keep, w->err, sizeof keep);
    cancel_pending(w, ops, n);
    memcpy(w->err, keep, sizeof keep); /* the error that made the caller cancel stays */
    w->err_rank = keep_rank;
}

uint32_t wf_world_peer_pid(const wf_world *w, int rank) {
    return rank >= 0 && rank < w->n ? (rank == w->rank ? w->self.pid : w->peers[rank].e.pid) : 0;
}

size_t wf_world_peer_sym_size(const wf_world *w, int rank) {
    if (rank < 0 || rank >= w->n) return 0;
    return rank == w->rank ? w->sym_size : (size_t)w->peers[rank].e.sym_size;
}

int wf_world_listen_fd(const wf_world *w) { return w->rank == 0 ? w->listen_fd : -1; }

int wf_world_peer_failed(const wf_world *w, int rank) {
    return rank >= 0 && rank < w->n && w->peers[rank].failed != WF_OK;
}

void wf_world_peer_gone(wf_world *w, int rank) {
    if (rank >= 0 && rank < w->n && rank != w->rank && w->peers[rank].failed == WF_OK)
        w->peers[rank].failed = WF_EPEER;
}

void wf_world_wait_event(wf_world *w, int extra_fd, int timeout_ms) {
    if (timeout_ms < 0) timeout_ms = 0;
    if (w->efd >= 0) {
        ucs_status_t st = ucp_worker_arm(w->worker);
        if (st == UCS_ERR_BUSY) return; /* events are pending: progress first */
        if (st == UCS_OK) {
            struct pollfd fds[2] = {{.fd = w->efd, .events = POLLIN}, {.fd = extra_fd, .events = POLLIN}};
            /* The liveness probe still needs a turn now and then. */
            int bound = (int)(LIVENESS_PERIOD_NS / 1000000ull);
            poll(fds, extra_fd >= 0 ? 2 : 1, timeout_ms < bound ? timeout_ms : bound);
            return;
        }
    }
    struct pollfd fd = {.fd = extra_fd, .events = POLLIN};
    poll(&fd, extra_fd >= 0 ? 1 : 0, timeout_ms < 1 ? timeout_ms : 1);
}

wf_status wf_world_run(wf_world *w, wf_world_op *ops, int n) {
    wf_status st = wf_world_post(w, ops, n);
    if (st != WF_OK) {
        char keep[sizeof w->err];
        int keep_rank = w->err_rank;
        memcpy(keep, w->err, sizeof keep);
        cancel_pending(w, ops, n);
        memcpy(w->err, keep, sizeof keep);
        w->err_rank = keep_rank;
        return st;
    }
    return wf_world_wait(w, ops, n);
}

wf_status wf_world_fence(wf_world *w) {
    ucs_status_t st = ucp_worker_fence(w->worker);
    return st == UCS_OK ? WF_OK : wf__world_fail(w, WF_EIO, -1, "fence: %s", ucs_status_string(st));
}

wf_status wf_world_flush(wf_world *w) {
    ucp_request_param_t prm = {.op_attr_mask = 0};
    void *req = ucp_worker_flush_nbx(w->worker, &prm);
    wf_status st = WF_OK;
    if (req != NULL && UCS_PTR_IS_ERR(req))
        return wf__world_fail(w, WF_EPEER, -1, "flush: %s", ucs_status_string(UCS_PTR_STATUS(req)));
    if (req != NULL) {
        wf_world_op op = {.kind = WF_WORLD_PUT, .peer = w->rank, .req_ = req,
                          .status = WF_IN_PROGRESS};
        /* A worker flush spans every peer: blame is not known; report it as this rank's. */
        st = wf_world_wait(w, &op, 1);
    }
    /* Puts posted before the flush are complete (those posted while it ran, before the
     * wait returned, are none: one thread drives the world). */
    if (st == WF_OK)
        for (int r = 0; r < w->n; r++) w->peers[r].flushed = w->peers[r].ucx_puts;
    return st;
}

wf_status wf_world_flush_peer(wf_world *w, int peer_rank) {
    if (peer_rank < 0 || peer_rank >= w->n) return wf__world_fail(w, WF_EINVAL, peer_rank, "flush: no rank %d", peer_rank);
    ucp_ep_h ep;
    wf_status st = get_ep(w, peer_rank, &ep);
    if (st != WF_OK) return st;
    ucp_request_param_t prm = {.op_attr_mask = 0};
    void *req = ucp_ep_flush_nbx(ep, &prm);
    if (req == NULL) return WF_OK;
    if (UCS_PTR_IS_ERR(req))
        return wf__world_fail(w, WF_EPEER, peer_rank, "flush to rank %d: %s", peer_rank,
                    ucs_status_string(UCS_PTR_STATUS(req)));
    /* Waited for like an operation with that peer: its liveness is checked meanwhile. */
    wf_world_op op = {.kind = WF_WORLD_PUT, .peer = peer_rank, .req_ = req, .status = WF_IN_PROGRESS,
                      .gen_ = w->peers[peer_rank].gen};
    return wf_world_wait(w, &op, 1);
}

wf_status wf_world_wait_flag(wf_world *w, size_t offset, uint64_t value, int peer_rank) {
    if (offset % 8 || offset + 8 > w->sym_size || peer_rank < 0 || peer_rank >= w->n)
        return wf__world_fail(w, WF_EINVAL, peer_rank, "bad flag offset %zu", offset);
    /* offset is a multiple of 8 (checked) and the buffer is page-aligned. */
    volatile uint64_t *flag = (volatile uint64_t *)(void *)((uint8_t *)w->sym + offset);
    uint64_t deadline = wf_clock_now_ns() + (uint64_t)w->cfg.timeout_ms * 1000000ull;
    /* The incarnation expected to write the flag, as the operation waits keep one per op: a
     * replacement admitted during the wait (handle_ctrl below) refills the slot, so the /proc
     * check then looks at the new process, alive, while the one that owed the flag is gone. */
    uint32_t gen = w->peers[peer_rank].gen;
    uint32_t inc = w->peers[peer_rank].e.incarnation;
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) < value) {
        if (!ucp_worker_progress(w->worker)) sched_yield();
        uint64_t now = wf_clock_now_ns();
        if (now - w->last_probe_ns > LIVENESS_PERIOD_NS) {
            w->last_probe_ns = now;
            handle_ctrl(w);
            peer *p = &w->peers[peer_rank];
            if (p->failed == WF_OK && peer_rank != w->rank && peer_process_gone(w, &p->e))
                p->failed = WF_EPEER;
            /* It may have written the flag just before it exited. */
            int replaced = p->gen != gen;
            if ((p->failed != WF_OK || replaced) &&
                (ucp_worker_progress(w->worker), __atomic_load_n(flag, __ATOMIC_ACQUIRE) < value)) {
                if (replaced)
                    return wf__world_fail(w, WF_EPEER, peer_rank,
                                "rank %d (incarnation %u) failed: incarnation %u (pid %u on %s) "
                                "took its place while waiting for its flag",
                                peer_rank, inc, p->e.incarnation, p->e.pid, p->e.host);
                return wf__world_fail(w, WF_EPEER, peer_rank, "rank %d (pid %u on %s) failed", peer_rank,
                            p->e.pid, p->e.host);
            }
        }
        if (now > deadline)
            return wf__world_fail(w, WF_ETIMEDOUT, peer_rank,
                        "timed out after %d ms waiting for a flag from rank %d",
                        w->cfg.timeout_ms, peer_rank);
    }
    return WF_OK;
}

/* ---- membership updates over UCX -------------------------------------------------------------- */
void wf__world_apply_entry(wf_world *w, int r, wf__world_entry *e) {
    close_peer_ep(w, r, 1);
    wf__world_entry_free(&w->peers[r].e);
    w->peers[r].e = *e;
    memset(e, 0, sizeof *e); /* ownership moved */
    w->peers[r].failed = WF_OK;
    w->peers[r].gen++;
}

static void handle_ctrl(wf_world *w) {
    for (;;) {
        ucp_tag_recv_info_t info;
        ucp_tag_message_h msg = ucp_tag_probe_nb(w->worker, (ucp_tag_t)WF_WORLD_TAG_CTRL
                                                 << TAG_KIND_SHIFT, TAG_KIND_MASK, 1, &info);
        if (!msg) return;
        uint8_t *buf = malloc(info.length ? info.length : 1);
        ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                                   .datatype = ucp_dt_make_contig(1)};
        void *req = ucp_tag_msg_recv_nbx(w->worker, buf ? buf : (void *)&info, buf ? info.length : 0,
                                         msg, &prm);
        ucs_status_t st = wait_local(w, req, CLOSE_WAIT_NS);
        wf__world_msg m;
        if (!buf || st != UCS_OK || wf__world_msg_decode(buf, info.length, &m) != WF_OK) {
            WF_LOG_ERROR("world", NULL, "rank %d: dropped a malformed membership message", w->rank);
            free(buf);
            continue;
        }
        free(buf);
        if (m.type == WF__WORLD_MSG_UPDATE && m.n_ranks == w->n && m.rank != w->rank &&
            m.epoch > w->epoch) {
            WF_LOG_INFO("world", NULL, "rank %d: rank %d rejoined (incarnation %u, epoch %u)",
                        w->rank, m.rank, m.entries[0].incarnation, m.epoch);
            wf__world_apply_entry(w, m.rank, &m.entries[0]);
            w->epoch = m.epoch;
        }
        wf__world_msg_free(&m);
    }
}

int wf_world_progress(wf_world *w) {
    int n = (int)ucp_worker_progress(w->worker);
    uint32_t before = w->epoch;
    handle_ctrl(w);
    return n + (w->epoch != before);
}

wf_status wf_world_wait_epoch(wf_world *w, uint32_t epoch) {
    uint64_t deadline = wf_clock_now_ns() + (uint64_t)w->cfg.join_timeout_ms * 1000000ull;
    while (w->epoch < epoch) {
        if (!ucp_worker_progress(w->worker)) sched_yield();
        handle_ctrl(w);
        if (wf_clock_now_ns() > deadline)
            return wf__world_fail(w, WF_ETIMEDOUT, 0, "no membership update to epoch %u from rank 0 in %d ms",
                        epoch, w->cfg.join_timeout_ms);
    }
    return WF_OK;
}

/* ---- exposed regions ------------------------------------------------------------------------ */
wf_status wf_world_mem_expose(wf_world *w, void *buf, size_t len, wf_world_region *out) {
    if (!w || !out) return WF_EINVAL;
    wf_status st = wf__mcache_expose(w->mc, buf, len, out, &w->stats, w->err, sizeof w->err);
    if (st != WF_OK) w->err_rank = w->rank;
    return st;
}

size_t wf_world_region_wire_size(const wf_world_region *r) {
    return offsetof(wf_world_region, rkey) + r->rkey_len;
}

wf_status wf_world_region_check(const wf_world_region *r, size_t bytes) {
    if (bytes < offsetof(wf_world_region, rkey) || r->rkey_len > WF_WORLD_RKEY_MAX ||
        bytes != wf_world_region_wire_size(r) || (r->id == 0) != (r->rkey_len == 0) ||
        r->addr + r->len < r->addr)
        return WF_EPROTO;
    return WF_OK;
}

void *wf_world_mem_alloc(wf_world *w, size_t len) { return wf__mcache_alloc(w->mc, len); }

void wf_world_mem_free(wf_world *w, void *p) {
    if (p && !wf__mcache_free(w->mc, p))
        WF_LOG_ERROR("world", NULL, "rank %d: wf_world_mem_free of memory it did not allocate",
                     w->rank);
}

int wf__world_mem_cached(const wf_world *w) { return wf__mcache_cached(w->mc); }
int wf__world_has_wakeup(const wf_world *w) { return w->efd >= 0; }

void wf_world_set_idle_sleep(wf_world *w, int on) { w->idle_sleep = on != 0; }
int wf__world_mem_owned(wf_world *w, const void *buf, size_t len) {
    return wf__mcache_owned(w->mc, buf, len);
}
int wf__world_put_caller_memory(const wf_world *w) { return w->put_caller_memory; }

void *wf__world_region_map(wf_world *w, int r, const wf_world_region *reg) {
    if (!w || r < 0 || r >= w->n || r == w->rank || !reg || reg->id == 0 || reg->len == 0)
        return NULL;
    ucp_ep_h ep;
    ucp_rkey_h rkey;
    void *p;
    if (get_ep(w, r, &ep) != WF_OK || region_rkey(w, r, ep, reg, &rkey) != WF_OK) return NULL;
    /* Not mapped here (another host, memory UCX reaches only by CMA or a network): NULL, and
     * the caller moves the data another way. */
    if (ucp_rkey_ptr(rkey, reg->addr, &p) != UCS_OK) return NULL;
    return p;
}
void wf__world_set_put_caller_memory(wf_world *w, int on) { w->put_caller_memory = on != 0; }
size_t wf__world_put_threshold(const wf_world *w) { return w->put_threshold; }
void wf__world_set_put_threshold(wf_world *w, size_t bytes) { w->put_threshold = bytes; }

/* ---- per-group sequence numbers and scratch -------------------------------------------------- */
static struct seq_slot *seq_find(struct seq_slot *t, size_t cap, uint64_t id) {
    size_t i = (size_t)(id ^ (id >> 29)) & (cap - 1);
    while (t[i].used && t[i].id != id) i = (i + 1) & (cap - 1);
    return &t[i];
}

int wf__world_next_seq(wf_world *w, uint64_t id, uint32_t *seq) {
    if (w->seq_used * 2 >= w->seq_cap) {
        size_t cap = w->seq_cap ? w->seq_cap * 2 : 64;
        struct seq_slot *t = calloc(cap, sizeof *t);
        if (!t) return -1;
        for (size_t i = 0; i < w->seq_cap; i++)
            if (w->seqs[i].used) *seq_find(t, cap, w->seqs[i].id) = w->seqs[i];
        free(w->seqs);
        w->seqs = t;
        w->seq_cap = cap;
    }
    struct seq_slot *s = seq_find(w->seqs, w->seq_cap, id);
    if (!s->used) {
        *s = (struct seq_slot){.id = id, .epoch = w->epoch, .used = 1};
        w->seq_used++;
    }
    if (s->epoch != w->epoch) { /* collectives broken by a failure left the counts unequal */
        s->epoch = w->epoch;
        s->seq = 0;
    }
    *seq = s->seq++;
    return 0;
}

static void free_scratch(wf_world *w) {
    if (w->scratch_owned) wf__mcache_free(w->mc, w->scratch);
    else free(w->scratch);
    w->scratch = NULL;
    w->scratch_size = 0;
}

void *wf__world_scratch(wf_world *w, size_t bytes) {
    if (bytes <= w->scratch_size) return w->scratch;
    /* Registered, so that peers' puts land in it through shared memory; plain memory if UCX
     * cannot allocate (the collectives then take messages into it). */
    int owned = 1;
    void *p = wf__mcache_alloc(w->mc, bytes);
    if (!p) {
        owned = 0;
        if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    }
    free_scratch(w);
    w->scratch = p;
    w->scratch_size = bytes;
    w->scratch_owned = owned;
    return p;
}

/* ---- creation ------------------------------------------------------------------------------- */
static wf_status setup_ucx(wf_world *w, char *err, size_t errlen) {
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config); /* UCX_* from the environment */
    if (st != UCS_OK)
        return wf_status_errorf(err, errlen, WF_EIO, "UCX config: %s", ucs_status_string(st));
    /* UCX's own registration cache finds regions again by address and drops stale ones on the
     * same memory events as the world's cache (world_mem.c). Without them (TSan builds,
     * UCX_MEM_EVENTS=no) UCX 1.13 handed an allocation that reused a freed buffer's addresses
     * the old region, shared-memory key included: a peer's put into it through mapped memory
     * hit a segment that was gone (test_gfc under TSan, 1 run in 3). So it is off then,
     * unless UCX_RCACHE_ENABLE says otherwise. */
    if (!wf__mcache_events() && !getenv("UCX_RCACHE_ENABLE")) {
        st = ucp_config_modify(config, "RCACHE_ENABLE", "n");
        if (st != UCS_OK)
            WF_LOG_WARN("world", NULL, "UCX: could not turn its registration cache off: %s",
                        ucs_status_string(st));
    }
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
                           .mt_workers_shared = 0};
    st = ucp_init(&params, config, &w->ctx);
    ucp_config_release(config);
    if (st != UCS_OK) {
        w->ctx = NULL;
        return wf_status_errorf(err, errlen, WF_EIO, "UCX init: %s", ucs_status_string(st));
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    st = ucp_worker_create(w->ctx, &wp, &w->worker);
    if (st != UCS_OK) {
        w->worker = NULL;
        return wf_status_errorf(err, errlen, WF_EIO, "UCX worker: %s", ucs_status_string(st));
    }
    if (ucp_worker_get_efd(w->worker, &w->efd) != UCS_OK) w->efd = -1; /* then: short sleeps */
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                                             UCP_MEM_MAP_PARAM_FIELD_FLAGS,
                               .length = w->sym_size, .flags = UCP_MEM_MAP_ALLOCATE};
    st = ucp_mem_map(w->ctx, &mp, &w->mem);
    if (st != UCS_OK) {
        w->mem = NULL;
        return wf_status_errorf(err, errlen, WF_ENOMEM, "registering %zu bytes: %s", w->sym_size,
                                ucs_status_string(st));
    }
    w->mc = wf__mcache_create(w->ctx);
    if (!w->mc) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
    if (ucp_mem_query(w->mem, &ma) != UCS_OK)
        return wf_status_errorf(err, errlen, WF_EIO, "UCX memory query failed");
    w->sym = ma.address;
    memset(w->sym, 0, w->sym_size);

    ucp_address_t *addr;
    size_t addr_len;
    void *rkey;
    size_t rkey_len;
    if (ucp_worker_get_address(w->worker, &addr, &addr_len) != UCS_OK)
        return wf_status_errorf(err, errlen, WF_EIO, "UCX worker address failed");
    st = ucp_rkey_pack(w->ctx, w->mem, &rkey, &rkey_len);
    if (st != UCS_OK || addr_len == 0 || addr_len > WF__WORLD_MAX_BLOB || rkey_len == 0 ||
        rkey_len > WF__WORLD_MAX_BLOB) {
        ucp_worker_release_address(w->worker, addr);
        if (st == UCS_OK) ucp_rkey_buffer_release(rkey);
        return wf_status_errorf(err, errlen, WF_EIO, "UCX address or rkey unusable");
    }
    w->self.addr = malloc(addr_len);
    w->self.rkey = malloc(rkey_len);
    if (w->self.addr && w->self.rkey) {
        memcpy(w->self.addr, addr, addr_len);
        memcpy(w->self.rkey, rkey, rkey_len);
        w->self.addr_len = (uint32_t)addr_len;
        w->self.rkey_len = (uint32_t)rkey_len;
    }
    ucp_worker_release_address(w->worker, addr);
    ucp_rkey_buffer_release(rkey);
    if (!w->self.addr || !w->self.rkey) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    w->self.sym_addr = (uint64_t)(uintptr_t)w->sym;
    w->self.sym_size = w->sym_size;
    w->self.incarnation = 1;
    fill_identity(&w->self);
    return WF_OK;
}

static wf_status copy_entry(wf__world_entry *dst, const wf__world_entry *src) {
    *dst = *src;
    dst->addr = malloc(src->addr_len);
    dst->rkey = malloc(src->rkey_len);
    if (!dst->addr || !dst->rkey) {
        wf__world_entry_free(dst);
        return WF_ENOMEM;
    }
    memcpy(dst->addr, src->addr, src->addr_len);
    memcpy(dst->rkey, src->rkey, src->rkey_len);
    return WF_OK;
}

wf_status wf_world_create(const wf_world_config *cfg, wf_world **out, char *err, size_t errlen) {
    *out = NULL;
    /* A listening socket given is the world's from here: closed with it, or now on failure. */
    int given_fd = cfg && cfg->rank == 0 && cfg->n_ranks > 1 ? cfg->listen_fd : -1;
    if (!cfg || cfg->n_ranks < 1 || cfg->n_ranks > WF_WORLD_MAX_RANKS || cfg->rank < -1 ||
        cfg->rank >= cfg->n_ranks || (cfg->n_ranks > 1 && (cfg->port <= 0 || cfg->port > 65535)) ||
        cfg->timeout_ms <= 0 || cfg->join_timeout_ms <= 0 || cfg->sym_size < 64 || !cfg->host) {
        if (given_fd >= 0) close(given_fd);
        return wf_status_errorf(err, errlen, WF_EINVAL, "invalid world configuration");
    }
    wf_world *w = calloc(1, sizeof *w);
    if (!w) {
        if (given_fd >= 0) close(given_fd);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    }
    w->cfg = *cfg;
    if (!tls_has_shared_memory(getenv("UCX_TLS"))) w->cfg.local_fast_path = 0;
    snprintf(w->host_arg, sizeof w->host_arg, "%s", cfg->host);
    w->cfg.host = w->host_arg;
    w->n = cfg->n_ranks;
    w->rank = cfg->rank;
    w->listen_fd = given_fd;
    w->efd = -1;
    w->err_rank = -1;
    w->sym_size = (cfg->sym_size + 63) & ~(size_t)63;
    w->put_threshold = WF__WORLD_PUT_THRESHOLD;
    w->put_caller_memory = 1;
    wf_status st;
    w->peers = calloc((size_t)w->n, sizeof *w->peers);
    if (!w->peers) {
        st = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
        goto fail_ucx; /* destroy copes with a world this bare (and closes the given socket) */
    }
    st = setup_ucx(w, err, errlen);
    if (st != WF_OK) goto fail_ucx;
    if (w->n == 1) {
        st = copy_entry(&w->peers[0].e, &w->self);
    } else if (cfg->rank == 0) {
        if (w->listen_fd < 0) w->listen_fd = wf__world_boot_listen(w, err, errlen);
        if (w->listen_fd < 0) {
            st = WF_EIO;
            goto fail_ucx;
        }
        st = copy_entry(&w->peers[0].e, &w->self);
        if (st == WF_OK) st = wf__world_boot_coordinate(w, err, errlen);
    } else {
        st = wf__world_boot_join(w, err, errlen);
    }
    if (st != WF_OK) goto fail_ucx;
    WF_LOG_DEBUG("world", NULL, "rank %d of %d joined (epoch %u)", w->rank, w->n, w->epoch);
    *out = w;
    return WF_OK;

fail_ucx:
    wf_world_destroy(w);
    return st;
}

void wf_world_destroy(wf_world *w) {
    if (!w) return;
    if (w->peers) {
        if (w->worker) {
            /* Close every endpoint at once and wait for them together (bounded), so that peers
             * that already left cost one bound, not one each. */
            void **reqs = calloc((size_t)w->n, sizeof *reqs);
            for (int r = 0; r < w->n; r++) {
                peer *p = &w->peers[r];
                drop_rkeys(p);
                if (!p->ep) continue;
                ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                           .flags = p->failed != WF_OK || !reqs
                                                        ? UCP_EP_CLOSE_FLAG_FORCE : 0};
                void *req = ucp_ep_close_nbx(p->ep, &prm);
                p->ep = NULL;
                if (reqs && req && UCS_PTR_IS_PTR(req)) reqs[r] = req;
                else if (req && UCS_PTR_IS_PTR(req)) wait_local(w, req, CLOSE_WAIT_NS);
            }
            uint64_t deadline = wf_clock_now_ns() + CLOSE_WAIT_NS;
            for (int pending = 1; pending && reqs && wf_clock_now_ns() < deadline;) {
                ucp_worker_progress(w->worker);
                pending = 0;
                for (int r = 0; r < w->n; r++) {
                    if (!reqs[r]) continue;
                    if (ucp_request_check_status(reqs[r]) == UCS_INPROGRESS) {
                        pending = 1;
                    } else {
                        ucp_request_free(reqs[r]);
                        reqs[r] = NULL;
                    }
                }
            }
            for (int r = 0; reqs && r < w->n; r++)
                if (reqs[r]) ucp_request_free(reqs[r]);
            free(reqs);
        }
        for (int r = 0; r < w->n; r++) wf__world_entry_free(&w->peers[r].e);
    }
    free(w->peers);
    free(w->seqs);
    if (w->mc) free_scratch(w);
    wf__world_entry_free(&w->self);
    wf__mcache_destroy(w->mc);
    if (w->mem) ucp_mem_unmap(w->ctx, w->mem);
    if (w->worker) ucp_worker_destroy(w->worker);
    if (w->ctx) ucp_cleanup(w->ctx);
    if (w->listen_fd >= 0) close(w->listen_fd);
    free(w);
}
