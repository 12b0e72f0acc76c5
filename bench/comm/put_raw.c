/* weft-bench-put-raw: what a bare ucp_put_nbx loop reaches between two processes on this host,
 * with no weft code in the way: one put of S bytes into the peer's buffer plus an endpoint
 * flush, best and mean over the iterations. The peer's buffer is either memory UCX allocated
 * (ucp_mem_map with UCP_MEM_MAP_ALLOCATE: shared memory the writer maps) or malloc'd memory
 * registered with ucp_mem_map; the endpoints use UCX's peer-error mode or not. Prints the
 * endpoint's lanes, so that the transport UCX chose is visible.
 * Usage: weft-bench-put-raw BYTES alloc|malloc peer|none [ITERS] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "proto/base/clock.h"

static int xfer(int fd, void *p, size_t n, int writing) {
    while (n) {
        ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
        if (k <= 0) return -1;
        p = (char *)p + k;
        n -= (size_t)k;
    }
    return 0;
}

static void wait_req(ucp_worker_h wk, void *req) {
    if (!UCS_PTR_IS_PTR(req)) return;
    while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(wk);
    ucp_request_free(req);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s BYTES alloc|malloc peer|none [ITERS]\n", argv[0]);
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 10);
    int alloc = strcmp(argv[2], "alloc") == 0, peer_mode = strcmp(argv[3], "peer") == 0;
    int iters = argc > 4 ? atoi(argv[4]) : 50;
    int sv[2];
    if (size == 0 || iters < 1 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 2;
    fflush(NULL);
    pid_t pid = fork();
    int target = pid == 0, fd = sv[target ? 1 : 0];

    ucp_config_t *cfg;
    ucp_context_h ctx;
    ucp_worker_h wk;
    ucp_config_read(NULL, NULL, &cfg);
    ucp_params_t prm = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                        .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA};
    if (ucp_init(&prm, cfg, &ctx) != UCS_OK) return 1;
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_worker_create(ctx, &wp, &wk) != UCS_OK) return 1;
    ucp_address_t *addr;
    size_t addr_len, peer_len;
    ucp_worker_get_address(wk, &addr, &addr_len);
    if (xfer(fd, &addr_len, sizeof addr_len, 1) || xfer(fd, addr, addr_len, 1) ||
        xfer(fd, &peer_len, sizeof peer_len, 0))
        return 1;
    void *peer_addr = malloc(peer_len);
    if (!peer_addr || xfer(fd, peer_addr, peer_len, 0)) return 1;
    ucp_ep_params_t ep_prm = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                              .address = peer_addr,
                              .err_mode = peer_mode ? UCP_ERR_HANDLING_MODE_PEER
                                                    : UCP_ERR_HANDLING_MODE_NONE};
    ucp_ep_h ep;
    if (ucp_ep_create(wk, &ep_prm, &ep) != UCS_OK) return 1;

    if (target) {
        /* Exposes the buffer, then progresses (AM-emulated puts need it) until told to stop. */
        void *buf = NULL;
        if (!alloc && posix_memalign(&buf, 4096, size) != 0) return 1;
        ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                                 UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                                                 UCP_MEM_MAP_PARAM_FIELD_FLAGS,
                                   .address = buf, .length = size,
                                   .flags = alloc ? UCP_MEM_MAP_ALLOCATE : 0};
        ucp_mem_h mh;
        if (ucp_mem_map(ctx, &mp, &mh) != UCS_OK) return 1;
        ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
        ucp_mem_query(mh, &ma);
        memset(ma.address, 0, size);
        void *rkey;
        size_t rkey_len;
        if (ucp_rkey_pack(ctx, mh, &rkey, &rkey_len) != UCS_OK) return 1;
        uint64_t raddr = (uint64_t)(uintptr_t)ma.address;
        if (xfer(fd, &raddr, sizeof raddr, 1) || xfer(fd, &rkey_len, sizeof rkey_len, 1) ||
            xfer(fd, rkey, rkey_len, 1))
            return 1;
        fcntl(fd, F_SETFL, O_NONBLOCK);
        char stop;
        while (read(fd, &stop, 1) != 1) ucp_worker_progress(wk);
        _exit(0);
    }
    uint64_t raddr;
    size_t rkey_len;
    if (xfer(fd, &raddr, sizeof raddr, 0) || xfer(fd, &rkey_len, sizeof rkey_len, 0)) return 1;
    void *rkey_buf = malloc(rkey_len);
    ucp_rkey_h rkey;
    if (!rkey_buf || xfer(fd, rkey_buf, rkey_len, 0) ||
        ucp_ep_rkey_unpack(ep, rkey_buf, &rkey) != UCS_OK)
        return 1;
    void *src;
    if (posix_memalign(&src, 4096, size) != 0) return 1;
    memset(src, 1, size);
    ucp_request_param_t none = {.op_attr_mask = 0};
    double best = 1e30, sum = 0;
    for (int i = 0; i <= iters; i++) { /* iteration 0 warms up */
        uint64_t t0 = wf_clock_now_ns();
        wait_req(wk, ucp_put_nbx(ep, src, size, raddr, rkey, &none));
        wait_req(wk, ucp_ep_flush_nbx(ep, &none));
        double us = (double)(wf_clock_now_ns() - t0) / 1e3;
        if (i > 0) {
            sum += us;
            if (us < best) best = us;
        }
    }
    printf("| put+flush | %s | %s | %zu KiB | %.1f us | %.1f us | %.2f GB/s | %.2f GB/s |\n",
           alloc ? "UCX-allocated" : "malloc+registered", peer_mode ? "peer" : "none",
           size >> 10, best, sum / iters, (double)size / (best * 1e-6) / 1e9,
           (double)size * iters / (sum * 1e-6) / 1e9);
    ucp_ep_print_info(ep, stdout);
    char stop = 1;
    if (xfer(fd, &stop, 1, 1)) return 1;
    waitpid(pid, NULL, 0);
    return 0;
}
