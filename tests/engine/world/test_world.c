/* engine/world: formation over the TCP bootstrap, tagged messages, RMA puts with flags, puts
 * into exposed regions (caller memory and wf_world_mem_alloc memory) with a flush, waits that
 * sleep on UCX's wake-up descriptor and are woken by small and large messages, join
 * time-outs, joiners of another bootstrap version or world size told why, a killed and a
 * stopped peer named within the time-out, and a replacement rejoining.
 * Real processes over loopback.
 * weft-test: labels=net timeout=240 */
#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "engine/gfc/gfc.h"
#include "engine/world/world.h"
#include "engine/world/world_impl.h" /* wf__world_mem_cached */
#include "engine/world/world_launch.h"
#include "proto/base/clock.h"

/* ---- formation and point-to-point ------------------------------------------------------------ */
static int body_formation(wf_world *w, int rank, void *arg) {
    int n = wf_world_size(w);
    WT_CHECK(n == 5, "size %d", n);
    WT_CHECK(wf_world_epoch(w) == 0, "epoch");
    for (int r = 0; r < n; r++) WT_CHECK(wf_world_incarnation(w, r) == 1, "incarnation of %d", r);
    /* Every rank sends its rank to every rank (itself included) and receives n messages. */
    int in[8] = {0}, out = rank * 10 + 1;
    wf_world_op ops[16];
    int k = 0;
    for (int r = 0; r < n; r++)
        ops[k++] = (wf_world_op){.kind = WF_WORLD_RECV, .peer = r, .buf = &in[r], .len = sizeof(int),
                                 .tag = {.kind = WF_WORLD_TAG_USER, .group = 7, .seq = 3}};
    for (int r = 0; r < n; r++)
        ops[k++] = (wf_world_op){.kind = WF_WORLD_SEND, .peer = r, .buf = &out, .len = sizeof(int),
                                 .tag = {.kind = WF_WORLD_TAG_USER, .group = 7, .seq = 3}};
    wf_status st = wf_world_run(w, ops, k);
    WT_CHECK(st == WF_OK, "exchange: %s", wf_world_error(w));
    for (int r = 0; r < n; r++) {
        WT_CHECK(in[r] == r * 10 + 1, "from %d got %d", r, in[r]);
        WT_CHECK(ops[r].received == sizeof(int), "received %zu", ops[r].received);
    }
    /* A message longer than the receive buffer is a protocol error, not a silent cut. */
    int peer = rank ^ 1;
    if (peer < n) {
        char big[64] = {0}, small[8];
        wf_world_op a[2] = {
            {.kind = WF_WORLD_RECV, .peer = peer, .buf = small, .len = sizeof small,
             .tag = {.kind = WF_WORLD_TAG_USER, .seq = 9}},
            {.kind = WF_WORLD_SEND, .peer = peer, .buf = big, .len = sizeof big,
             .tag = {.kind = WF_WORLD_TAG_USER, .seq = 9}},
        };
        st = wf_world_run(w, a, 2);
        WT_CHECK(st == WF_EPROTO, "truncation gave %s", wf_status_name(st));
    }
    /* RMA: write 1000 bytes into the right neighbour's symmetric buffer, fence, then a flag. */
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    unsigned char data[1000];
    for (int i = 0; i < 1000; i++) data[i] = (unsigned char)(rank * 31 + i);
    uint64_t one = 1;
    wf_world_op put = {.kind = WF_WORLD_PUT, .peer = right, .buf = data, .len = sizeof data,
                       .offset = 64};
    WT_CHECK(wf_world_run(w, &put, 1) == WF_OK, "put: %s", wf_world_error(w));
    WT_CHECK(wf_world_fence(w) == WF_OK, "fence");
    wf_world_op flag = {.kind = WF_WORLD_PUT, .peer = right, .buf = &one, .len = 8, .offset = 0};
    WT_CHECK(wf_world_run(w, &flag, 1) == WF_OK, "flag: %s", wf_world_error(w));
    WT_CHECK(wf_world_flush(w) == WF_OK, "flush: %s", wf_world_error(w));
    WT_CHECK(wf_world_wait_flag(w, 0, 1, left) == WF_OK, "wait flag: %s", wf_world_error(w));
    const unsigned char *sym = (const unsigned char *)wf_world_sym(w) + 64;
    for (int i = 0; i < 1000; i++)
        WT_CHECK(sym[i] == (unsigned char)(left * 31 + i), "byte %d from %d", i, left);
    /* A put past the end of the peer's buffer is refused locally. */
    wf_world_op bad = {.kind = WF_WORLD_PUT, .peer = right, .buf = data, .len = sizeof data,
                       .offset = wf_world_sym_size(w) - 10};
    WT_CHECK(wf_world_run(w, &bad, 1) == WF_ERANGE, "out-of-range put");
    /* Everyone done before anyone leaves. */
    int ranks[8];
    for (int r = 0; r < n; r++) ranks[r] = r;
    wf_group g;
    wf_gfc_group_init(&g, ranks, n);
    WT_CHECK(wf_gfc_barrier(w, &g) == WF_OK, "barrier: %s", wf_world_error(w));
    return 0;
}

START_TEST(test_formation_p2p_rma) {
    wt_env env = wt_env_default(5);
    ck_assert_int_eq(wt_run(&env, body_formation, NULL, 120), 0);
}
END_TEST

/* ---- join time-out names the missing slot ---------------------------------------------------- */
static int body_never(wf_world *w, int rank, void *arg) { return 0; }

START_TEST(test_join_timeout_names_missing) {
    wt_env env = wt_env_default(3);
    env.join_timeout_ms = 800;
    pid_t joiner = wt_spawn(&env, 1, body_never, NULL); /* slot 2 never comes */
    wf_world_config cfg = wt_config(&env, 0);
    wf_world *w = NULL;
    char err[256] = "";
    uint64_t t0 = wf_clock_now_ns();
    wf_status st = wf_world_create(&cfg, &w, err, sizeof err);
    double ms = (double)(wf_clock_now_ns() - t0) / 1e6;
    ck_assert_int_eq(st, WF_ETIMEDOUT);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(err, "slots not claimed: 2") != NULL, "error: %s", err);
    ck_assert_msg(ms < 800 + 5000, "took %.0f ms", ms);
    int code;
    wt_wait(&joiner, 1, 30, &code);
    ck_assert_int_eq(code, 100); /* the joiner got no table and said so */
}
END_TEST

/* ---- joiners of another version or world size are told why ---------------------------------- */
/* Sends one bootstrap frame to 127.0.0.1:port (retrying the connect for up to 10 s) and decodes
 * the answer into *reply. Returns the decode status, or WF_EIO when no answer came. */
static wf_status raw_bootstrap(int port, const wf__wbuf *frame, wf__world_msg *reply) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = -1;
    for (int i = 0; i < 1000 && fd < 0; i++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(fd);
            fd = -1;
            usleep(10000);
        }
    }
    if (fd < 0) return WF_EIO;
    uint8_t len[4] = {(uint8_t)frame->len, (uint8_t)(frame->len >> 8), 0, 0}, in[4096];
    size_t got = 0;
    ssize_t k = 0;
    if (send(fd, len, 4, MSG_NOSIGNAL) != 4 ||
        send(fd, frame->p, frame->len, MSG_NOSIGNAL) != (ssize_t)frame->len) {
        close(fd);
        return WF_EIO;
    }
    while (got < sizeof in && (k = recv(fd, in + got, sizeof in - got, 0)) > 0) got += (size_t)k;
    close(fd);
    if (got < 4) return WF_EIO;
    return wf__world_msg_decode(in + 4, got - 4, reply);
}

static void raw_header(wf__wbuf *b, uint32_t type, int32_t rank, int32_t n, int32_t status) {
    wf__wbuf_u32(b, type);
    wf__wbuf_u32(b, (uint32_t)rank);
    wf__wbuf_u32(b, (uint32_t)n);
    wf__wbuf_u32(b, (uint32_t)status);
    wf__wbuf_u32(b, 0);
}

static int body_size_two(wf_world *w, int rank, void *arg) {
    WT_CHECK(wf_world_size(w) == 2, "size %d", wf_world_size(w));
    return 0;
}

START_TEST(test_joiners_of_another_version_or_size_refused) {
    wt_env env = wt_env_default(2);
    pid_t pids[2] = {wt_spawn(&env, 0, body_size_two, NULL), 0};
    /* A hello of bootstrap version 2 (header only: its layout is not ours to know). */
    wf__wbuf v2 = {0};
    raw_header(&v2, (WF__WORLD_MSG_HELLO & 0x00FFFFFFu) | ((uint32_t)'2' << 24), -1, 2, 0);
    wf__world_msg reply;
    ck_assert_int_eq(raw_bootstrap(env.port, &v2, &reply), WF_OK);
    ck_assert_uint_eq(reply.type, WF__WORLD_MSG_WELCOME);
    ck_assert_int_eq(reply.status, WF_EPROTO);
    wf__world_msg_free(&reply);
    free(v2.p);
    /* A real joiner started for a world of 3 is told the coordinator's size. */
    wt_env three = env;
    three.n = 3;
    three.join_timeout_ms = 10000;
    wf_world_config cfg = wt_config(&three, 1);
    wf_world *w = NULL;
    char err[256] = "";
    ck_assert_int_eq(wf_world_create(&cfg, &w, err, sizeof err), WF_EINVAL);
    ck_assert_msg(strstr(err, "world has 2 ranks") && strstr(err, "started for 3"), "error: %s", err);
    /* The coordinator kept its slot open for the right joiner. */
    pids[1] = wt_spawn(&env, 1, body_size_two, NULL);
    int codes[2];
    ck_assert_int_eq(wt_wait(pids, 2, 60, codes), 0);
}
END_TEST

START_TEST(test_joiner_names_the_coordinators_version) {
    wt_env env = wt_env_default(2);
    env.join_timeout_ms = 10000;
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)env.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(lfd, 4), 0);
    fflush(NULL);
    pid_t coordinator = fork();
    if (coordinator == 0) {
        /* A coordinator of bootstrap version 2 refuses with the frozen header-only WELCOME. */
        int fd = accept(lfd, NULL, NULL);
        uint8_t in[4096];
        if (fd < 0 || recv(fd, in, sizeof in, 0) <= 0) _exit(1);
        wf__wbuf b = {0};
        raw_header(&b, (WF__WORLD_MSG_WELCOME & 0x00FFFFFFu) | ((uint32_t)'2' << 24), -1, 2,
                   WF_EPROTO);
        uint8_t len[4] = {(uint8_t)b.len, 0, 0, 0};
        if (send(fd, len, 4, MSG_NOSIGNAL) != 4 || send(fd, b.p, b.len, MSG_NOSIGNAL) != (ssize_t)b.len)
            _exit(1);
        close(fd);
        _exit(0);
    }
    close(lfd);
    wf_world_config cfg = wt_config(&env, 1);
    wf_world *w = NULL;
    char err[256] = "";
    ck_assert_int_eq(wf_world_create(&cfg, &w, err, sizeof err), WF_EPROTO);
    ck_assert_msg(strstr(err, "version 2") && strstr(err, "this process 1"), "error: %s", err);
    int code;
    ck_assert_int_eq(wt_wait(&coordinator, 1, 30, &code), 0);
}
END_TEST

/* A coordinator's bootstrap socket, made before the world: port 0 gets a free port that stays
 * held (a second listener on it is refused, a client connects), and a world that fails to form
 * closes the socket it was given (the pool's workers are told the port before the world forms). */
START_TEST(test_boot_socket_held) {
    int port = 0;
    char err[256] = "";
    int fd = wf_world_boot_socket("127.0.0.1", &port, err, sizeof err);
    ck_assert_msg(fd >= 0, "%s", err);
    ck_assert_int_gt(port, 0);
    int again = port;
    ck_assert_int_eq(wf_world_boot_socket("127.0.0.1", &again, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "bootstrap listen on 127.0.0.1"), "error: %s", err);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(c, (struct sockaddr *)&a, sizeof a), 0);
    close(c);
    wf_world_config cfg = wf_world_config_default();
    cfg.n_ranks = 2;
    cfg.port = port;
    cfg.listen_fd = fd;
    cfg.sym_size = 1; /* invalid: refused before anything forms */
    wf_world *w = NULL;
    ck_assert_int_eq(wf_world_create(&cfg, &w, err, sizeof err), WF_EINVAL);
    ck_assert_int_eq(fcntl(fd, F_GETFD), -1); /* closed by the world's refusal */
}
END_TEST

START_TEST(test_bad_config) {
    wf_world_config cfg = wf_world_config_default();
    wf_world *w = (wf_world *)&cfg;
    char err[128];
    cfg.n_ranks = 0;
    ck_assert_int_eq(wf_world_create(&cfg, &w, err, sizeof err), WF_EINVAL);
    ck_assert_ptr_null(w);
    cfg = wf_world_config_default();
    cfg.n_ranks = 2;
    cfg.port = 0;
    ck_assert_int_eq(wf_world_create(&cfg, &w, err, sizeof err), WF_EINVAL);
    /* A world of one needs no bootstrap and runs collectives over itself. */
    cfg = wf_world_config_default();
    ck_assert_int_eq(wf_world_create(&cfg, &w, err, sizeof err), WF_OK);
    int r0 = 0;
    wf_group g;
    ck_assert_int_eq(wf_gfc_group_init(&g, &r0, 1), WF_OK);
    float x[3] = {1, 2, 3}, y[3];
    ck_assert_int_eq(wf_gfc_allreduce_f32(w, &g, x, y, 3), WF_OK);
    ck_assert(y[2] == 3.0f);
    int other = 1;
    ck_assert_int_eq(wf_gfc_group_init(&g, &other, 1), WF_OK);
    ck_assert_int_eq(wf_gfc_barrier(w, &g), WF_EINVAL); /* rank 1 is outside a world of one */
    wf_world_destroy(w);
}
END_TEST

/* ---- sleeping waits ---------------------------------------------------------------------------
 * With wf_world_set_idle_sleep, a wait for receives only sleeps on UCX's wake-up descriptor once
 * idle for 50 us: messages that
 * arrive while the receiver sleeps (small eager ones, and a large one by rendezvous) must wake
 * it and arrive whole, in order; rounds in both directions. */
static int body_sleep_wake(wf_world *w, int rank, void *arg) {
    enum { BIG = 3u << 20, ROUNDS = 4 };
    uint8_t *big = malloc(BIG);
    WT_CHECK(big != NULL, "oom");
    int peer = 1 - rank;
    wf_world_set_idle_sleep(w, 1);
    wf_world_stats s0, s1;
    wf_world_get_stats(w, &s0);
    for (int r = 0; r < ROUNDS; r++) {
        int sender = r % 2;
        wf_world_tag tag = {.kind = WF_WORLD_TAG_USER, .seq = (uint32_t)r};
        uint64_t small = 0;
        if (rank == sender) {
            usleep(100000); /* the receiver is asleep by now */
            for (size_t i = 0; i < BIG; i++) big[i] = (uint8_t)(i * 7 + (size_t)r);
            small = 1000 + (uint64_t)r;
            wf_world_op ops[2] = {
                {.kind = WF_WORLD_SEND, .peer = peer, .tag = tag, .buf = &small, .len = 8},
                {.kind = WF_WORLD_SEND, .peer = peer, .tag = tag, .buf = big, .len = BIG}};
            ops[1].tag.step = 1;
            WT_CHECK(wf_world_run(w, ops, 2) == WF_OK, "send %d: %s", r, wf_world_error(w));
        } else {
            memset(big, 0, BIG);
            wf_world_op ops[2] = {
                {.kind = WF_WORLD_RECV, .peer = peer, .tag = tag, .buf = &small, .len = 8},
                {.kind = WF_WORLD_RECV, .peer = peer, .tag = tag, .buf = big, .len = BIG}};
            ops[1].tag.step = 1;
            WT_CHECK(wf_world_run(w, ops, 2) == WF_OK, "recv %d: %s", r, wf_world_error(w));
            WT_CHECK(ops[0].received == 8 && small == 1000 + (uint64_t)r, "small %d", r);
            WT_CHECK(ops[1].received == BIG, "big %d: %zu bytes", r, ops[1].received);
            for (size_t i = 0; i < BIG; i++)
                WT_CHECK(big[i] == (uint8_t)(i * 7 + (size_t)r), "round %d byte %zu", r, i);
        }
    }
    wf_world_get_stats(w, &s1);
    if (wf__world_has_wakeup(w))
        WT_CHECK(s1.sleeps > s0.sleeps, "rank %d never slept in %d receiving waits", rank,
                 ROUNDS / 2);
    else
        fprintf(stderr, "rank %d: no wake-up descriptor: waits only yield\n", rank);
    free(big);
    return 0;
}

START_TEST(test_sleeping_wait_wakes) {
    wt_env env = wt_env_default(2);
    ck_assert_int_eq(wt_run(&env, body_sleep_wake, NULL, 60), 0);
}
END_TEST

/* ---- failures and replacement -------------------------------------------------------------- */
#define VICTIM 2
#define FAIL_N 4
#define FAIL_TIMEOUT_MS 3000
#define WARMUP 5

typedef struct fail_arg {
    int notify_fd;       /* the victim writes a byte here once it stops taking part */
    int stop_not_kill;
} fail_arg;

static int check_allreduce(wf_world *w, const wf_group *g, size_t count) {
    float *v = malloc(count * sizeof(float));
    WT_CHECK(v != NULL, "oom");
    for (size_t i = 0; i < count; i++) v[i] = (float)(wf_world_rank(w) + 1) * 0.5f + (float)i;
    wf_status st = wf_gfc_allreduce_f32(w, g, v, v, count);
    if (st != WF_OK) {
        fprintf(stderr, "rank %d: allreduce of %zu: %s: %s\n", wf_world_rank(w), count,
                wf_status_name(st), wf_world_error(w));
        free(v);
        return st;
    }
    int n = g->n_ranks;
    for (size_t i = 0; i < count; i++) {
        float ref = 0.5f + (float)i;
        for (int k = 1; k < n; k++) ref += (float)(g->ranks[k] + 1) * 0.5f + (float)i;
        if (v[i] != ref) {
            fprintf(stderr, "allreduce element %zu: %g != %g\n", i, v[i], ref);
            free(v);
            return 1;
        }
    }
    free(v);
    return 0;
}

static int body_survivor(wf_world *w, int rank, void *varg) {
    fail_arg *arg = varg;
    /* The epoch before any failure: a slow survivor may apply the replacement's entry while its
     * own collective is still failing, so an epoch read after that can be the new one already. */
    uint32_t epoch = wf_world_epoch(w);
    int ranks[FAIL_N] = {0, 1, 2, 3};
    wf_group g;
    wf_gfc_group_init(&g, ranks, FAIL_N);
    wf_world_set_timeout_ms(w, FAIL_TIMEOUT_MS);
    for (int it = 0; it < WARMUP; it++)
        WT_CHECK(check_allreduce(w, &g, 1000) == 0, "warm-up %d: %s", it, wf_world_error(w));
    if (rank == VICTIM) {
        /* Take no further part: the parent kills or stops this process now. */
        char b = 1;
        if (write(arg->notify_fd, &b, 1) != 1) return 1;
        for (;;) pause();
    }
    uint64_t t0 = wf_clock_now_ns();
    int rc = check_allreduce(w, &g, 1 << 16);
    double ms = (double)(wf_clock_now_ns() - t0) / 1e6;
    wf_status want = arg->stop_not_kill ? WF_ETIMEDOUT : WF_EPEER;
    WT_CHECK(rc == want, "rank %d: got %d (%s), want %s", rank, rc, wf_world_error(w),
             wf_status_name(want));
    WT_CHECK(wf_world_error_rank(w) == VICTIM, "rank %d blamed rank %d: %s", rank,
             wf_world_error_rank(w), wf_world_error(w));
    WT_CHECK(ms < FAIL_TIMEOUT_MS + 2000, "rank %d noticed after %.0f ms", rank, ms);
    fprintf(stderr, "rank %d: %s after %.0f ms: %s\n", rank, wf_status_name(rc), ms,
            wf_world_error(w));
    /* The replacement: rank 0 admits it, the others learn of it over UCX. */
    if (rank == 0) {
        int slot = -1;
        WT_CHECK(wf_world_admit(w, &slot) == WF_OK, "admit: %s", wf_world_error(w));
        WT_CHECK(slot == VICTIM, "admitted slot %d", slot);
    } else {
        WT_CHECK(wf_world_wait_epoch(w, epoch + 1) == WF_OK, "epoch: %s", wf_world_error(w));
    }
    WT_CHECK(wf_world_incarnation(w, VICTIM) == 2, "incarnation %u",
             wf_world_incarnation(w, VICTIM));
    wf_world_set_timeout_ms(w, 20000);
    for (int it = 0; it < 3; it++)
        WT_CHECK(check_allreduce(w, &g, 5000 + (size_t)it * 100000) == 0, "after rejoin: %s",
                 wf_world_error(w));
    WT_CHECK(wf_gfc_barrier(w, &g) == WF_OK, "barrier: %s", wf_world_error(w));
    return 0;
}

static int body_replacement(wf_world *w, int rank, void *varg) {
    if (rank != VICTIM) return 1;
    WT_CHECK(wf_world_epoch(w) == 1, "epoch %u", wf_world_epoch(w));
    WT_CHECK(wf_world_incarnation(w, VICTIM) == 2, "own incarnation");
    int ranks[FAIL_N] = {0, 1, 2, 3};
    wf_group g;
    wf_gfc_group_init(&g, ranks, FAIL_N);
    for (int it = 0; it < 3; it++)
        WT_CHECK(check_allreduce(w, &g, 5000 + (size_t)it * 100000) == 0, "rejoined: %s",
                 wf_world_error(w));
    WT_CHECK(wf_gfc_barrier(w, &g) == WF_OK, "barrier: %s", wf_world_error(w));
    return 0;
}

static void run_failure(int stop_not_kill) {
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    fail_arg arg = {.notify_fd = pfd[1], .stop_not_kill = stop_not_kill};
    wt_env env = wt_env_default(FAIL_N);
    pid_t pids[FAIL_N + 1];
    int codes[FAIL_N + 1];
    for (int r = 0; r < FAIL_N; r++) pids[r] = wt_spawn(&env, r, body_survivor, &arg);
    char b;
    struct pollfd pf = {.fd = pfd[0], .events = POLLIN};
    int ready = poll(&pf, 1, 60000) == 1 && read(pfd[0], &b, 1) == 1;
    if (!ready) {
        for (int r = 0; r < FAIL_N; r++) kill(pids[r], SIGKILL);
        wt_wait(pids, FAIL_N, 10, codes);
        close(pfd[0]);
        close(pfd[1]);
        ck_abort_msg("the warm-up collectives failed");
    }
    usleep(50000); /* the survivors are now waiting on the victim */
    if (stop_not_kill) {
        kill(pids[VICTIM], SIGSTOP);
        /* Stopped until the survivors time out, then gone for good. */
        usleep((FAIL_TIMEOUT_MS + 1500) * 1000);
    }
    kill(pids[VICTIM], SIGKILL);
    waitpid(pids[VICTIM], NULL, 0);
    pids[VICTIM] = 0;
    pids[FAIL_N] = wt_spawn(&env, VICTIM, body_replacement, NULL);
    int bad = wt_wait(pids, FAIL_N + 1, 120, codes);
    close(pfd[0]);
    close(pfd[1]);
    ck_assert_int_eq(bad, 0);
}

START_TEST(test_killed_peer_then_replacement) { run_failure(0); }
END_TEST

START_TEST(test_stopped_peer_then_replacement) { run_failure(1); }
END_TEST

/* ---- a flag owed by an incarnation that was replaced ------------------------------------------ */
/* Rank 1 waits for a flag from rank 2. Rank 2 gets stuck (SIGSTOP: its process is still there,
 * as a stuck or far-away peer looks to the /proc check) and a replacement takes its slot. Rank 1
 * then applies the membership update and finds rank 2's process -- the new one -- alive: the
 * wait must fail with WF_EPEER naming rank 2 (before, it ran into its time-out), and the new
 * incarnation's own flag then arrives as usual. */
#define FLAG_N 3
#define FLAG_TIMEOUT_MS 15000

static int body_flag(wf_world *w, int rank, void *varg) {
    fail_arg *arg = varg;
    int ranks[FLAG_N] = {0, 1, 2};
    wf_group g;
    wf_gfc_group_init(&g, ranks, FLAG_N);
    char b = (char)rank;
    if (rank == 2 && wf_world_incarnation(w, 2) == 2) { /* the replacement */
        uint64_t one = 1;
        wf_world_op put = {.kind = WF_WORLD_PUT, .peer = 1, .buf = &one, .len = 8, .offset = 8};
        WT_CHECK(wf_world_run(w, &put, 1) == WF_OK, "put: %s", wf_world_error(w));
        WT_CHECK(wf_world_flush(w) == WF_OK, "flush: %s", wf_world_error(w));
        WT_CHECK(wf_gfc_barrier(w, &g) == WF_OK, "barrier: %s", wf_world_error(w));
        return 0;
    }
    /* Endpoints between every pair exist before anyone stops. */
    WT_CHECK(wf_gfc_barrier(w, &g) == WF_OK, "first barrier: %s", wf_world_error(w));
    if (rank == 2) { /* the victim: says so, then takes no part */
        if (write(arg->notify_fd, &b, 1) != 1) return 1;
        for (;;) pause();
    }
    if (rank == 0) {
        int slot = -1;
        WT_CHECK(wf_world_admit(w, &slot) == WF_OK, "admit: %s", wf_world_error(w));
        WT_CHECK(slot == 2, "admitted slot %d", slot);
        if (write(arg->notify_fd, &b, 1) != 1) return 1; /* the update went out */
    } else {
        wf_world_set_timeout_ms(w, FLAG_TIMEOUT_MS);
        if (write(arg->notify_fd, &b, 1) != 1) return 1;
        wf_status st = wf_world_wait_flag(w, 0, 1, 2);
        WT_CHECK(st == WF_EPEER, "waiting for the old incarnation's flag gave %s: %s",
                 wf_status_name(st), wf_world_error(w));
        WT_CHECK(wf_world_error_rank(w) == 2, "blamed rank %d", wf_world_error_rank(w));
        WT_CHECK(strstr(wf_world_error(w), "took its place") != NULL, "%s", wf_world_error(w));
        WT_CHECK(wf_world_incarnation(w, 2) == 2, "incarnation %u", wf_world_incarnation(w, 2));
        wf_world_set_timeout_ms(w, 20000);
        st = wf_world_wait_flag(w, 8, 1, 2);
        WT_CHECK(st == WF_OK, "the new incarnation's flag: %s: %s", wf_status_name(st),
                 wf_world_error(w));
    }
    WT_CHECK(wf_gfc_barrier(w, &g) == WF_OK, "barrier: %s", wf_world_error(w));
    return 0;
}

static int read_byte(int fd, int timeout_ms) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    char b;
    return poll(&pf, 1, timeout_ms) == 1 && read(fd, &b, 1) == 1 ? b : -1;
}

START_TEST(test_flag_wait_sees_a_replaced_peer) {
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    fail_arg arg = {.notify_fd = pfd[1]};
    wt_env env = wt_env_default(FLAG_N);
    pid_t pids[FLAG_N];
    int codes[FLAG_N];
    for (int r = 0; r < FLAG_N; r++) pids[r] = wt_spawn(&env, r, body_flag, &arg);
    /* Rank 1 about to wait and rank 2 idle, in either order. */
    int seen = 0;
    for (int i = 0; i < 2; i++) {
        int b = read_byte(pfd[0], 60000);
        if (b == 1 || b == 2) seen |= 1 << b;
    }
    bool ok = seen == 6;
    pid_t victim = pids[2];
    if (ok) {
        usleep(100000); /* rank 1 is inside the wait */
        kill(victim, SIGSTOP);
        pids[2] = wt_spawn(&env, 2, body_flag, &arg);
        ok = read_byte(pfd[0], 60000) == 0; /* rank 0 admitted it and sent the update */
    }
    if (!ok)
        for (int r = 0; r < FLAG_N; r++) kill(pids[r], SIGKILL);
    /* The stuck process stays until rank 1 is done: its end would be seen by the /proc check. */
    int bad = wt_wait(pids, FLAG_N, 60, codes);
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    close(pfd[0]);
    close(pfd[1]);
    ck_assert_msg(ok, "the ranks did not reach the wait, or the replacement was not admitted");
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* ---- exposed regions ----------------------------------------------------------------------- */
/* Rank 1 exposes a malloc'd buffer and a wf_world_mem_alloc one and sends both regions to rank
 * 0, which puts into them, flushes, and says so; rank 1 then finds the bytes. Puts outside a
 * region fail with WF_ERANGE before anything is sent; malformed regions are rejected. */
static int body_regions(wf_world *w, int rank, void *arg) {
    enum { LEN = 300000 };
    wf_world_tag tag = {.kind = WF_WORLD_TAG_USER, .group = 11};
    if (rank == 1) {
        uint8_t *plain = calloc(1, LEN), *reg = wf_world_mem_alloc(w, LEN);
        WT_CHECK(plain && reg, "alloc");
        memset(reg, 0, LEN);
        wf_world_region r[2];
        WT_CHECK(wf_world_mem_expose(w, plain, LEN, &r[0]) == WF_OK, "%s", wf_world_error(w));
        WT_CHECK(wf_world_mem_expose(w, reg + 1000, LEN - 1000, &r[1]) == WF_OK, "%s",
                 wf_world_error(w));
        WT_CHECK(r[0].id != 0 && r[1].id != 0 && r[0].id != r[1].id, "ids");
        /* Without UCX's memory events (TSan builds) registrations last one expose only. */
        if (wf__world_mem_cached(w)) {
            wf_world_region again;
            WT_CHECK(wf_world_mem_expose(w, plain + 5, 100, &again) == WF_OK &&
                         again.id == r[0].id,
                     "a sub-range is served by the cached registration");
        }
        WT_CHECK(wf_world_region_check(&r[0], wf_world_region_wire_size(&r[0])) == WF_OK, "ok");
        WT_CHECK(wf_world_region_check(&r[0], wf_world_region_wire_size(&r[0]) - 1) == WF_EPROTO,
                 "truncated");
        wf_world_region empty;
        WT_CHECK(wf_world_mem_expose(w, NULL, 0, &empty) == WF_OK && empty.id == 0, "empty");
        wf_world_op ops[3];
        for (int i = 0; i < 2; i++) {
            tag.step = (uint8_t)i;
            ops[i] = (wf_world_op){.kind = WF_WORLD_SEND, .peer = 0, .tag = tag, .buf = &r[i],
                                   .len = wf_world_region_wire_size(&r[i])};
        }
        uint8_t done = 0;
        tag.step = 2;
        ops[2] = (wf_world_op){.kind = WF_WORLD_RECV, .peer = 0, .tag = tag, .buf = &done,
                               .len = 1};
        WT_CHECK(wf_world_run(w, ops, 3) == WF_OK, "%s", wf_world_error(w));
        for (size_t i = 0; i < LEN; i++)
            WT_CHECK(plain[i] == (uint8_t)(i * 7), "plain byte %zu", i);
        for (size_t i = 0; i < LEN - 1000; i++)
            WT_CHECK(reg[1000 + i] == (uint8_t)(i * 13), "registered byte %zu", i);
        WT_CHECK(reg[999] == 0, "nothing before the region");
        wf_world_mem_free(w, reg);
        free(plain);
        return 0;
    }
    if (rank != 0) return 0;
    wf_world_region r[2];
    wf_world_op ops[4];
    for (int i = 0; i < 2; i++) {
        tag.step = (uint8_t)i;
        ops[i] = (wf_world_op){.kind = WF_WORLD_RECV, .peer = 1, .tag = tag, .buf = &r[i],
                               .len = sizeof r[i]};
    }
    WT_CHECK(wf_world_run(w, ops, 2) == WF_OK, "%s", wf_world_error(w));
    for (int i = 0; i < 2; i++)
        WT_CHECK(wf_world_region_check(&r[i], ops[i].received) == WF_OK, "region %d", i);
    uint8_t *src = malloc(LEN);
    WT_CHECK(src != NULL, "oom");
    for (size_t i = 0; i < LEN; i++) src[i] = (uint8_t)(i * 7);
    wf_world_op bad = {.kind = WF_WORLD_PUT, .peer = 1, .buf = src, .len = 10,
                       .offset = LEN - 5, .region = &r[0]};
    WT_CHECK(wf_world_run(w, &bad, 1) == WF_ERANGE, "a put beyond the region");
    /* Two puts per region (halves), then a flush to the peer. */
    ops[0] = (wf_world_op){.kind = WF_WORLD_PUT, .peer = 1, .buf = src, .len = LEN / 2,
                           .region = &r[0]};
    ops[1] = (wf_world_op){.kind = WF_WORLD_PUT, .peer = 1, .buf = src + LEN / 2,
                           .len = LEN - LEN / 2, .offset = LEN / 2, .region = &r[0]};
    WT_CHECK(wf_world_run(w, ops, 2) == WF_OK, "%s", wf_world_error(w));
    for (size_t i = 0; i < LEN - 1000; i++) src[i] = (uint8_t)(i * 13);
    ops[0] = (wf_world_op){.kind = WF_WORLD_PUT, .peer = 1, .buf = src, .len = LEN - 1000,
                           .region = &r[1]};
    ops[1] = (wf_world_op){.kind = WF_WORLD_FLUSH, .peer = 1};
    WT_CHECK(wf_world_run(w, ops, 2) == WF_OK, "%s", wf_world_error(w));
    uint8_t done = 1;
    tag.step = 2;
    ops[0] = (wf_world_op){.kind = WF_WORLD_SEND, .peer = 1, .tag = tag, .buf = &done, .len = 1};
    WT_CHECK(wf_world_run(w, ops, 1) == WF_OK, "%s", wf_world_error(w));
    wf_world_stats st;
    wf_world_get_stats(w, &st);
    WT_CHECK(st.flushes >= 1 && st.rkeys_unpacked == 2, "%llu keys unpacked",
             (unsigned long long)st.rkeys_unpacked);
    free(src);
    return 0;
}

START_TEST(test_put_into_exposed_regions) {
    wt_env env = wt_env_default(3);
    ck_assert_int_eq(wt_run(&env, body_regions, NULL, 60), 0);
}
END_TEST

static Suite *world_suite(void) {
    Suite *s = suite_create("world");
    TCase *tc = tcase_create("world");
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, test_bad_config);
    tcase_add_test(tc, test_boot_socket_held);
    tcase_add_test(tc, test_formation_p2p_rma);
    tcase_add_test(tc, test_put_into_exposed_regions);
    tcase_add_test(tc, test_sleeping_wait_wakes);
    tcase_add_test(tc, test_join_timeout_names_missing);
    tcase_add_test(tc, test_joiners_of_another_version_or_size_refused);
    tcase_add_test(tc, test_joiner_names_the_coordinators_version);
    tcase_add_test(tc, test_killed_peer_then_replacement);
    tcase_add_test(tc, test_stopped_peer_then_replacement);
    tcase_add_test(tc, test_flag_wait_sees_a_replaced_peer);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(world_suite)
