/* Test launcher for engine/world and engine/gfc: forks N real processes that form a world over
 * the TCP bootstrap on 127.0.0.1 and UCX, runs a function in each, and collects exit codes.
 *
 *     static int body(wf_world *w, int rank, void *arg) { ...; return 0; }   // 0: passed
 *     wt_env env = wt_env_default(4);
 *     ck_assert_int_eq(wt_run(&env, body, NULL, 60), 0);
 *
 * Children report failures on stderr and by exit code (never through Check, whose state
 * belongs to the parent). */
#ifndef WF_TESTS_WORLD_LAUNCH_H
#define WF_TESTS_WORLD_LAUNCH_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/world/world.h"
#include "proto/base/clock.h"

#define WT_MAX_PROCS 16

typedef struct wt_env {
    int n;
    int port;
    int timeout_ms;
    int join_timeout_ms;
    size_t sym_size;
    int local_fast_path; /* wf_world_config's */
} wt_env;

typedef int (*wt_rank_fn)(wf_world *w, int rank, void *arg);

#define WT_FAIL(...)                                                                \
    do {                                                                            \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                             \
        fprintf(stderr, __VA_ARGS__);                                               \
        fprintf(stderr, "\n");                                                      \
        return 1;                                                                   \
    } while (0)
/* The message is a printf format and its arguments; `cond` must not contain a '%'. */
#define WT_CHECK(cond, ...) \
    do { if (!(cond)) WT_FAIL("check failed: " #cond ": " __VA_ARGS__); } while (0)

/* A port the kernel just handed out (and released): good enough on a test machine. */
static inline int wt_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static inline wt_env wt_env_default(int n) {
    return (wt_env){.n = n, .port = wt_free_port(), .timeout_ms = 20000,
                    .join_timeout_ms = 30000, .sym_size = 1u << 20,
                    .local_fast_path = 1};
}

static inline wf_world_config wt_config(const wt_env *env, int rank) {
    wf_world_config cfg = wf_world_config_default();
    cfg.n_ranks = env->n;
    cfg.rank = rank;
    cfg.host = "127.0.0.1";
    cfg.port = env->port;
    cfg.timeout_ms = env->timeout_ms;
    cfg.join_timeout_ms = env->join_timeout_ms;
    cfg.sym_size = env->sym_size;
    cfg.local_fast_path = env->local_fast_path;
    return cfg;
}

/* Forks one rank: it forms (or rejoins) the world, runs fn, destroys the world, exits with fn's
 * code (100 if the world could not be formed). */
static inline pid_t wt_spawn(const wt_env *env, int rank, wt_rank_fn fn, void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    wf_world_config cfg = wt_config(env, rank);
    wf_world *w;
    char err[256];
    wf_status st = wf_world_create(&cfg, &w, err, sizeof err);
    if (st != WF_OK) {
        fprintf(stderr, "rank %d: world: %s: %s\n", rank, wf_status_name(st), err);
        /* 101: the coordinator lost its bootstrap port to another process between
         * wt_free_port and its bind (tests run in parallel): wt_run tries another port */
        _exit(rank == 0 && strstr(err, "in use") ? 101 : 100);
    }
    int rc = fn(w, wf_world_rank(w), arg);
    wf_world_destroy(w);
    fflush(NULL);
    _exit(rc);
}

/* Waits for pids[0..n) (entries <= 0 are skipped) until timeout_s, killing the rest then.
 * codes[i] is the exit code, or 128 + signal. Returns how many are non-zero. */
static inline int wt_wait(pid_t *pids, int n, int timeout_s, int *codes) {
    uint64_t deadline = wf_clock_now_ns() + (uint64_t)timeout_s * 1000000000ull;
    int left = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        codes[i] = 0;
        left += pids[i] > 0;
    }
    while (left > 0) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p > 0) {
            for (int i = 0; i < n; i++) {
                if (pids[i] != p) continue;
                codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                if (codes[i]) {
                    fprintf(stderr, "process %d (pid %d) ended with code %d\n", i, p, codes[i]);
                    bad++;
                }
                pids[i] = 0;
                left--;
            }
            continue;
        }
        if (wf_clock_now_ns() > deadline) {
            for (int i = 0; i < n; i++) {
                if (pids[i] <= 0) continue;
                fprintf(stderr, "process %d (pid %d) still running at the deadline: killed\n", i,
                        pids[i]);
                kill(pids[i], SIGKILL);
                waitpid(pids[i], NULL, 0);
                codes[i] = 128 + SIGKILL;
                pids[i] = 0;
                bad++;
                left--;
            }
            break;
        }
        usleep(2000);
    }
    return bad;
}

/* Runs fn on env->n ranks; returns how many failed. When no world formed because the
 * bootstrap port was taken meanwhile (no rank ran fn), it runs again on a fresh port. */
static inline int wt_run(const wt_env *env, wt_rank_fn fn, void *arg, int timeout_s) {
    pid_t pids[WT_MAX_PROCS];
    int codes[WT_MAX_PROCS];
    wt_env e = *env;
    for (int attempt = 0;; attempt++) {
        for (int r = 0; r < e.n; r++) pids[r] = wt_spawn(&e, r, fn, arg);
        int bad = wt_wait(pids, e.n, timeout_s, codes);
        bool port_lost = bad > 0 && codes[0] == 101;
        for (int r = 1; r < e.n; r++) port_lost = port_lost && (codes[r] == 100 || codes[r] == 0);
        if (!port_lost || attempt == 2) return bad;
        fprintf(stderr, "bootstrap port %d was taken by another process: again on a new port\n", e.port);
        e.port = wt_free_port();
    }
}

#endif
