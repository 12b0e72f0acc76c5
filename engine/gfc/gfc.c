/* Group-free collectives on the world's tagged messages and puts. Every algorithm is direct
 * (each pair of members exchanges at most one payload per step): the groups are small (<= 64)
 * and large payloads move zero-copy (puts into the receiver's buffer), so fewer, larger
 * transfers beat ring pipelines here. */
#include "engine/gfc/gfc.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/world/world_impl.h"
#include "proto/base/log.h"

#define MAX_OPS (2 * WF_MAX_GROUP_RANKS)

uint64_t wf_gfc_group_hash(const int *ranks, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ranks[i];
        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    h ^= (uint64_t)n;
    h *= 0x100000001b3ull;
    return h;
}

wf_status wf_gfc_group_init(wf_group *g, const int *ranks, int n) {
    if (!g || !ranks || n < 1 || n > WF_MAX_GROUP_RANKS) return WF_EINVAL;
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= WF_WORLD_MAX_RANKS) return WF_EINVAL;
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i]) return WF_EINVAL;
    }
    g->n_ranks = n;
    memcpy(g->ranks, ranks, sizeof(int) * (size_t)n);
    g->id = wf_gfc_group_hash(ranks, n);
    return WF_OK;
}

int wf_gfc_group_index(const wf_group *g, int world_rank) {
    for (int i = 0; i < g->n_ranks; i++)
        if (g->ranks[i] == world_rank) return i;
    return -1;
}

void wf_gfc_set_put_threshold(wf_world *w, size_t bytes) {
    wf__world_set_put_threshold(w, bytes ? bytes : 1);
}

void wf_gfc_set_put_caller_memory(wf_world *w, int on) { wf__world_set_put_caller_memory(w, on); }

/* A collective's context: this member's index and the tag every message of it carries. */
typedef struct coll {
    int me, n;
    wf_world_tag tag;
} coll;

static wf_status begin(wf_world *w, const wf_group *g, coll *c) {
    if (!w || !g || g->n_ranks < 1 || g->n_ranks > WF_MAX_GROUP_RANKS) return WF_EINVAL;
    for (int i = 0; i < g->n_ranks; i++)
        if (g->ranks[i] < 0 || g->ranks[i] >= wf_world_size(w)) return WF_EINVAL;
    c->n = g->n_ranks;
    c->me = wf_gfc_group_index(g, wf_world_rank(w));
    if (c->me < 0) return WF_EINVAL;
    uint32_t seq;
    if (wf__world_next_seq(w, g->id, &seq) != 0) return WF_ENOMEM;
    c->tag = (wf_world_tag){.kind = WF_WORLD_TAG_COLL, .group = g->id, .seq = seq};
    return WF_OK;
}

static wf_world_op op_send(const wf_group *g, const coll *c, int to, const void *buf, size_t len,
                           uint8_t step) {
    wf_world_op op = {.kind = WF_WORLD_SEND, .peer = g->ranks[to], .tag = c->tag,
                      .buf = (void *)(uintptr_t)buf, .len = len};
    op.tag.step = step;
    return op;
}

static wf_world_op op_recv(const wf_group *g, const coll *c, int from, void *buf, size_t len,
                           uint8_t step) {
    wf_world_op op = {.kind = WF_WORLD_RECV, .peer = g->ranks[from], .tag = c->tag, .buf = buf,
                      .len = len};
    op.tag.step = step;
    return op;
}

/* Runs ops and checks every receive got exactly the size it expected. */
static wf_status run_exact(wf_world *w, wf_world_op *ops, int n_ops) {
    wf_status st = wf_world_run(w, ops, n_ops);
    if (st != WF_OK) return st;
    for (int i = 0; i < n_ops; i++)
        if (ops[i].kind == WF_WORLD_RECV && ops[i].received != ops[i].len) return WF_EPROTO;
    return WF_OK;
}

wf_status wf_gfc_barrier(wf_world *w, const wf_group *g) {
    coll c;
    wf_status st = begin(w, g, &c);
    if (st != WF_OK) return st;
    /* Dissemination: after round k every member has heard (transitively) from 2^(k+1) others. */
    uint8_t step = 0;
    for (int d = 1; d < c.n; d *= 2, step++) {
        wf_world_op ops[2] = {op_recv(g, &c, (c.me - d + c.n) % c.n, NULL, 0, step),
                              op_send(g, &c, (c.me + d) % c.n, NULL, 0, step)};
        st = run_exact(w, ops, 2);
        if (st != WF_OK) return st;
    }
    return WF_OK;
}

/* ---- the exchange every data-moving collective is made of ------------------------------------
 * Each member sends sptr[j][0..scnt[j]) to every other member j and receives rcnt[j] bytes from
 * j at rptr[j]; NONE means no message that way. A pair below the put threshold moves as one
 * tagged message (UCX: eager copies, or rendezvous). A larger pair moves as an RMA put straight
 * into the receiver's buffer: the receiver exposes the span of its receive buffers once (a
 * cached registration), sends each writer its slice's region, the writer puts, flushes its
 * endpoint (the data is then at the receiver) and sends a done message carrying the byte count.
 * Tags: step 4s data, 4s+1 region, 4s+2 done; the group id and sequence number keep concurrent
 * collectives apart as for every other message. */
#define NONE SIZE_MAX
#define MAX_XOPS (6 * WF_MAX_GROUP_RANKS)
#define DONE_MISMATCH UINT64_MAX /* a done message saying: the sizes disagreed, nothing put */

typedef struct xchg {
    const uint8_t *sptr[WF_MAX_GROUP_RANKS];
    size_t scnt[WF_MAX_GROUP_RANKS];
    uint8_t *rptr[WF_MAX_GROUP_RANKS];
    size_t rcnt[WF_MAX_GROUP_RANKS];
    /* This member's own slice: copied while the transfers are in flight (it is as large as
     * any other slice, so copying it first would delay every transfer by one memcpy). */
    uint8_t *self_dst;
    const uint8_t *self_src;
    size_t self_len;
} xchg;

static void xchg_init(xchg *x, int n) {
    for (int i = 0; i < n; i++) x->scnt[i] = x->rcnt[i] = NONE, x->sptr[i] = x->rptr[i] = NULL;
    x->self_dst = NULL;
    x->self_src = NULL;
    x->self_len = 0;
}

static int is_put(size_t cnt, size_t thresh) { return cnt != NONE && cnt >= thresh; }

/* Waits for all[first .. first + k); on failure cancels the other pending ops of the exchange
 * too (their buffers are free again when it returns). */
static wf_status wait_part(wf_world *w, wf_world_op *all, int n_all, int first, int k) {
    wf_status st = wf_world_wait(w, all + first, k);
    if (st != WF_OK) wf_world_cancel(w, all, n_all);
    return st;
}

/* The copy of this member's own slice, done piece by piece. A large one streams past the cache
 * (see wf__world_copy); overlapping buffers (a caller's send == recv) are moved in one go. */
#define SELF_PIECE (1u << 20)

typedef struct self_copy {
    uint8_t *dst;
    const uint8_t *src;
    size_t len, done;
    int stream;
} self_copy;

static self_copy self_copy_init(const xchg *x) {
    self_copy sc = {.dst = x->self_dst, .src = x->self_src, .len = x->self_len,
                    .stream = x->self_len >= wf__world_stream_min()};
    if (sc.len && sc.dst < sc.src + sc.len && sc.src < sc.dst + sc.len) {
        memmove(sc.dst, sc.src, sc.len);
        sc.done = sc.len;
    }
    return sc;
}

/* Copies the next piece; 0 when nothing was left. */
static int self_copy_next(self_copy *sc) {
    if (sc->done == sc->len) return 0;
    size_t k = sc->len - sc->done < SELF_PIECE ? sc->len - sc->done : SELF_PIECE;
    wf__world_copy_as(sc->dst + sc->done, sc->src + sc->done, k, sc->stream);
    sc->done += k;
    return 1;
}

static void self_copy_rest(self_copy *sc) {
    if (sc->done < sc->len)
        wf__world_copy_as(sc->dst + sc->done, sc->src + sc->done, sc->len - sc->done, sc->stream);
    sc->done = sc->len;
}

static wf_status exchange(wf_world *w, const wf_group *g, const coll *c, const xchg *x,
                          uint8_t step) {
    size_t thresh = wf__world_put_threshold(w);
    int n_in = 0, n_out = 0;
    uint8_t *lo = NULL, *hi = NULL;
    for (int j = 0; j < c->n; j++) {
        if (j == c->me) continue;
        if (is_put(x->rcnt[j], thresh)) {
            n_in++;
            if (!lo || x->rptr[j] < lo) lo = x->rptr[j];
            if (!hi || x->rptr[j] + x->rcnt[j] > hi) hi = x->rptr[j] + x->rcnt[j];
        }
        n_out += is_put(x->scnt[j], thresh);
    }
    wf_world_region *rin = NULL, *rout = NULL, mine = {0};
    if (n_in || n_out) {
        rin = malloc(sizeof *rin * (size_t)c->n * 2);
        if (!rin) return WF_ENOMEM;
        rout = rin + c->n;
    }
    /* This member's large receives come by put only into memory worth it (see gfc.h); else it
     * declines (a region with id 0) and they come as messages. The writer obeys either way,
     * so members need not agree on this. */
    int direct = n_in && (wf__world_put_caller_memory(w) ||
                          wf__world_mem_owned(w, lo, (size_t)(hi - lo)));
    /* Memory UCX cannot register (a device pointer it does not know, a mapping it refuses)
     * still arrives: as messages. */
    if (direct && wf_world_mem_expose(w, lo, (size_t)(hi - lo), &mine) != WF_OK) {
        WF_LOG_DEBUG("gfc", NULL, "rank %d: receiving by message: %s", wf_world_rank(w),
                     wf_world_error(w));
        direct = 0;
        memset(&mine, 0, offsetof(wf_world_region, rkey));
    }
    uint64_t done_in[WF_MAX_GROUP_RANKS], done_out[WF_MAX_GROUP_RANKS];
    wf_world_op ops[MAX_XOPS];
    int k = 0;
    uint8_t s_data = (uint8_t)(4 * step), s_region = (uint8_t)(4 * step + 1),
            s_done = (uint8_t)(4 * step + 2);
    /* Part 1 (waited first): the regions of the large pairs this member writes. */
    for (int i = 1; i < c->n; i++) {
        int to = (c->me + i) % c->n;
        if (is_put(x->scnt[to], thresh))
            ops[k++] = op_recv(g, c, to, &rin[to], sizeof rin[to], s_region);
    }
    int k1 = k;
    /* Part 2: everything else that can start now. Receives first so that eager data lands
     * straight in place; then sends, each member starting with its right neighbour so that no
     * member is everyone's first target. */
    for (int i = 1; i < c->n; i++) {
        int from = (c->me - i + c->n) % c->n;
        if (x->rcnt[from] == NONE) continue;
        if (direct && is_put(x->rcnt[from], thresh))
            ops[k++] = op_recv(g, c, from, &done_in[from], sizeof done_in[from], s_done);
        else
            ops[k++] = op_recv(g, c, from, x->rptr[from], x->rcnt[from], s_data);
    }
    for (int i = 1; i < c->n; i++) {
        int from = (c->me - i + c->n) % c->n;
        if (!is_put(x->rcnt[from], thresh)) continue;
        rout[from] = mine; /* direct: the registration; else id 0, no key: "send it" */
        rout[from].addr = (uint64_t)(uintptr_t)x->rptr[from];
        rout[from].len = x->rcnt[from];
        ops[k++] = op_send(g, c, from, &rout[from], wf_world_region_wire_size(&rout[from]),
                           s_region);
    }
    for (int i = 1; i < c->n; i++) {
        int to = (c->me + i) % c->n;
        if (x->scnt[to] != NONE && !is_put(x->scnt[to], thresh))
            ops[k++] = op_send(g, c, to, x->sptr[to], x->scnt[to], s_data);
    }
    int k2 = k;
    wf_status st = wf_world_post(w, ops, k);
    if (st != WF_OK) {
        wf_world_cancel(w, ops, k);
        goto out;
    }
    /* The own slice, in pieces until the regions of the large pairs are all in: then the puts
     * go first (their receivers wait for them; this member's own slice only delays itself) and
     * the rest of it is copied while the done messages travel. On a loaded host a member that
     * started late sends its region late: copying meanwhile uses that time. */
    self_copy sc = self_copy_init(x);
    while (k1 && self_copy_next(&sc) && wf_world_test(w, ops, k1) < k1) {
    }
    if (!k1) self_copy_rest(&sc);
    if (k1) {
        st = wait_part(w, ops, k, 0, k1);
        if (st != WF_OK) goto out;
    }
    /* Part 3: for each region received, a put and a flush (then a done message), or the
     * message the receiver asked for instead. */
    wf_status mismatch = WF_OK;
    int puts = 0;
    for (int i = 0; i < k1; i++) {
        int to = wf_gfc_group_index(g, ops[i].peer);
        const wf_world_region *r = &rin[to];
        if (wf_world_region_check(r, ops[i].received) != WF_OK || r->len != x->scnt[to])
            mismatch = WF_EPROTO;
        done_out[to] = DONE_MISMATCH;
        if (r->id == 0) { /* declined (or malformed): the data as a message; its size is
                           * checked by the receiver */
            ops[i].len = 0; /* marks "no done message" below */
            continue;
        }
        if (mismatch != WF_OK) continue;
        done_out[to] = x->scnt[to];
        ops[k++] = (wf_world_op){.kind = WF_WORLD_PUT, .peer = ops[i].peer,
                                 .buf = (void *)(uintptr_t)x->sptr[to], .len = x->scnt[to],
                                 .region = r};
        ops[k++] = (wf_world_op){.kind = WF_WORLD_FLUSH, .peer = ops[i].peer};
        puts = 1;
    }
    int k3 = k;
    if (puts) {
        st = wf_world_post(w, ops + k2, k3 - k2);
        if (st == WF_OK) st = wait_part(w, ops, k3, k2, k3 - k2);
        else wf_world_cancel(w, ops, k3);
        if (st != WF_OK) goto out;
    }
    for (int i = 0; i < k1; i++) {
        int to = wf_gfc_group_index(g, ops[i].peer);
        if (ops[i].len == 0)
            ops[k++] = op_send(g, c, to, x->sptr[to], x->scnt[to], s_data);
        else
            ops[k++] = op_send(g, c, to, &done_out[to], sizeof done_out[to], s_done);
    }
    if (k > k3) {
        st = wf_world_post(w, ops + k3, k - k3);
        if (st != WF_OK) {
            wf_world_cancel(w, ops, k);
            goto out;
        }
    }
    self_copy_rest(&sc);
    st = wf_world_wait(w, ops + k1, k - k1);
    if (st != WF_OK) goto out;
    /* Every message must have had exactly the size expected, every put the count expected. */
    for (int i = k1; i < k2; i++) {
        if (ops[i].kind != WF_WORLD_RECV) continue;
        int from = wf_gfc_group_index(g, ops[i].peer);
        if (ops[i].received != ops[i].len ||
            (ops[i].buf == &done_in[from] && done_in[from] != x->rcnt[from]))
            st = WF_EPROTO;
    }
    if (st == WF_OK) st = mismatch;
out:
    free(rin);
    return st;
}

/* ---- in-place all-to-all(-v): pairs swap their blocks ------------------------------------------
 * send == recv: member i's block for j (cnt[j] bytes at dsp[j]) is replaced by j's block for i,
 * which is as long (checked). Out of place every member copies all of its S bytes (its puts and
 * its own slice), so on one host bus bandwidth cannot pass (n-1)/n of one core's copy bandwidth
 * (BENCHMARKS.md). In place the own block stays where it is, and when both members of a pair
 * map each other's buffer (wf_world_mem_alloc memory, one host) they swap the pair's two blocks
 * through the mapping, each swapping one half: a core moves half of the pair's bytes, both at
 * once. A pair at or above the put threshold, in steps (tags IP_*, apart from exchange()'s, so
 * a member calling in place never matches one that does not: both time out):
 *   1. each member sends its block's region (id 0 when it cannot be mapped);
 *   2. on the peer's region, a member that maps it swaps its half (the lower group index the
 *      first half) and sends SWAPPED, else DECLINED (MISMATCH when the lengths disagree: both
 *      see it, neither touches anything, both return WF_EPROTO);
 *   3. when one of the two declined, the other swaps the remaining half and sends a done
 *      message; when both did, the pair is done;
 *   4. small pairs and pairs neither member maps: their blocks are copied aside first, then
 *      moved by the ordinary exchange from there into place. */
#define IP_REGION 9
#define IP_FLAG 10
#define IP_DONE 11
enum { IP_DECLINED = 0, IP_SWAPPED = 1, IP_MISMATCH = 2 };

/* Swaps one half of the pair (me, j): mine is this member's block for j, theirs j's block for
 * it (mapped here). `own`: the half of this member (the lower index takes the first), else
 * the other one (the peer declined). */
static void swap_half(int me, int j, uint8_t *mine, uint8_t *theirs, size_t len, int own) {
    size_t h = len / 2;
    if ((me < j) == (own != 0)) wf__world_swap(mine, theirs, h);
    else wf__world_swap(mine + h, theirs + h, len - h);
}

/* Step 4: the pairs marked in `fb` by copies aside and the exchange. The copies are only sent
 * from (no peer writes them), so plain memory serves; the world scratch (registered, grown and
 * replaced on demand) stays with the collectives that receive into it. */
static wf_status in_place_by_copy(wf_world *w, const wf_group *g, const coll *c, uint8_t *buf,
                                  const size_t *cnt, const size_t *dsp, const uint8_t *fb) {
    size_t total = 0;
    int any = 0;
    for (int j = 0; j < c->n; j++)
        if (fb[j]) total += cnt[j], any = 1;
    if (!any) return WF_OK;
    uint8_t *tmp = malloc(total ? total : 1);
    if (!tmp) return WF_ENOMEM;
    xchg x;
    xchg_init(&x, c->n);
    size_t off = 0;
    for (int j = 0; j < c->n; j++) {
        if (!fb[j]) continue;
        wf__world_copy(tmp + off, buf + dsp[j], cnt[j]);
        x.sptr[j] = tmp + off;
        x.scnt[j] = x.rcnt[j] = cnt[j];
        x.rptr[j] = buf + dsp[j];
        off += cnt[j];
    }
    wf_status st = exchange(w, g, c, &x, 0);
    free(tmp);
    return st;
}

static wf_status alltoallv_in_place(wf_world *w, const wf_group *g, const coll *c, void *vbuf,
                                    const size_t *cnt, const size_t *dsp) {
    uint8_t *buf = vbuf;
    size_t thresh = wf__world_put_threshold(w);
    int n = c->n, me = c->me, n_large = 0;
    uint8_t fb[WF_MAX_GROUP_RANKS] = {0}, *lo = NULL, *hi = NULL;
    for (int j = 0; j < n; j++) {
        if (j == me) continue;
        if (cnt[j] < thresh) {
            fb[j] = 1;
            continue;
        }
        n_large++;
        if (!lo || buf + dsp[j] < lo) lo = buf + dsp[j];
        if (!hi || buf + dsp[j] + cnt[j] > hi) hi = buf + dsp[j] + cnt[j];
    }
    if (!n_large) return in_place_by_copy(w, g, c, buf, cnt, dsp, fb);

    wf_world_region *rin = malloc(sizeof *rin * (size_t)n * 2), mine = {0};
    if (!rin) return WF_ENOMEM;
    wf_world_region *rout = rin + n;
    /* Only memory peers can map is worth registering here: a peer that cannot map declines. */
    if (wf__world_mem_owned(w, lo, (size_t)(hi - lo)) &&
        wf_world_mem_expose(w, lo, (size_t)(hi - lo), &mine) != WF_OK)
        memset(&mine, 0, offsetof(wf_world_region, rkey));
    uint64_t fin[WF_MAX_GROUP_RANKS], fout[WF_MAX_GROUP_RANKS], din[WF_MAX_GROUP_RANKS],
        dout[WF_MAX_GROUP_RANKS];
    uint8_t *peer_ptr[WF_MAX_GROUP_RANKS] = {0};
    wf_world_op ops[MAX_XOPS];
    int k = 0;
    /* Regions and flags in (posted first, so that they land in place), regions out. */
    for (int i = 1; i < n; i++) {
        int from = (me - i + n) % n;
        if (!fb[from]) ops[k++] = op_recv(g, c, from, &rin[from], sizeof rin[from], IP_REGION);
    }
    int kr = k;
    for (int i = 1; i < n; i++) {
        int from = (me - i + n) % n;
        if (!fb[from]) ops[k++] = op_recv(g, c, from, &fin[from], sizeof fin[from], IP_FLAG);
    }
    for (int i = 1; i < n; i++) {
        int to = (me + i) % n;
        if (fb[to]) continue;
        rout[to] = mine;
        rout[to].addr = (uint64_t)(uintptr_t)(buf + dsp[to]);
        rout[to].len = cnt[to];
        ops[k++] = op_send(g, c, to, &rout[to], wf_world_region_wire_size(&rout[to]), IP_REGION);
    }
    wf_status st = wf_world_post(w, ops, k), mismatch = WF_OK;
    if (st != WF_OK) {
        wf_world_cancel(w, ops, k);
        goto out;
    }
    st = wait_part(w, ops, k, 0, kr);
    if (st != WF_OK) goto out;
    /* Step 2: the own halves, then the flags. */
    int kf = k;
    for (int i = 0; i < kr; i++) {
        int j = wf_gfc_group_index(g, ops[i].peer);
        const wf_world_region *r = &rin[j];
        fout[j] = IP_DECLINED;
        if (wf_world_region_check(r, ops[i].received) != WF_OK || r->len != cnt[j]) {
            fout[j] = IP_MISMATCH;
        } else if ((peer_ptr[j] = wf__world_region_map(w, ops[i].peer, r))) {
            swap_half(me, j, buf + dsp[j], peer_ptr[j], cnt[j], 1);
            fout[j] = IP_SWAPPED;
        }
    }
    /* The swapped bytes are visible to the peer before the flag that tells it so. */
    atomic_thread_fence(memory_order_release);
    for (int i = 0; i < kr; i++) {
        int j = wf_gfc_group_index(g, ops[i].peer);
        ops[k++] = op_send(g, c, j, &fout[j], sizeof fout[j], IP_FLAG);
    }
    st = wf_world_post(w, ops + kf, k - kf);
    if (st == WF_OK) st = wait_part(w, ops, k, kr, kr);
    else wf_world_cancel(w, ops, k);
    if (st != WF_OK) goto out;
    atomic_thread_fence(memory_order_acquire);
    /* Step 3: the halves a peer declined; done messages for them. */
    int kd = k;
    for (int i = 0; i < kr; i++) {
        int j = wf_gfc_group_index(g, ops[i].peer);
        uint64_t a = fout[j], b = ops[kr + i].received == sizeof fin[j] ? fin[j] : IP_MISMATCH;
        if (a == IP_MISMATCH || b > IP_MISMATCH || b == IP_MISMATCH) {
            mismatch = WF_EPROTO;
        } else if (a == IP_SWAPPED && b == IP_DECLINED) {
            swap_half(me, j, buf + dsp[j], peer_ptr[j], cnt[j], 0); /* the peer's half */
            dout[j] = cnt[j];
            ops[k++] = op_send(g, c, j, &dout[j], sizeof dout[j], IP_DONE);
        } else if (a == IP_DECLINED && b == IP_SWAPPED) {
            ops[k++] = op_recv(g, c, j, &din[j], sizeof din[j], IP_DONE);
        } else if (a == IP_DECLINED && b == IP_DECLINED) {
            fb[j] = 1;
        }
    }
    atomic_thread_fence(memory_order_release);
    if (k > kd) {
        st = wf_world_post(w, ops + kd, k - kd);
        if (st != WF_OK) {
            wf_world_cancel(w, ops, k);
            goto out;
        }
    }
    /* Step 4 while the done messages travel (a member never waits for anything before it
     * sends them, so no member of step 4 waits on one still in step 3). */
    st = in_place_by_copy(w, g, c, buf, cnt, dsp, fb);
    if (st != WF_OK) {
        wf_world_cancel(w, ops, k);
        goto out;
    }
    st = wf_world_wait(w, ops, k);
    if (st != WF_OK) goto out;
    atomic_thread_fence(memory_order_acquire);
    for (int i = kd; i < k; i++) {
        int j = wf_gfc_group_index(g, ops[i].peer);
        if (ops[i].kind == WF_WORLD_RECV && (ops[i].received != sizeof din[j] || din[j] != cnt[j]))
            st = WF_EPROTO;
    }
    if (st == WF_OK) st = mismatch;
out:
    free(rin);
    return st;
}

wf_status wf_gfc_broadcast(wf_world *w, const wf_group *g, int root, void *buf, size_t len) {
    coll c;
    wf_status st = begin(w, g, &c);
    if (st != WF_OK) return st;
    if (root < 0 || root >= c.n || (len && !buf)) return WF_EINVAL;
    if (c.n == 1) return WF_OK;
    xchg x;
    xchg_init(&x, c.n);
    if (c.me == root) {
        for (int i = 0; i < c.n; i++) x.sptr[i] = buf, x.scnt[i] = len;
    } else {
        x.rptr[root] = buf;
        x.rcnt[root] = len;
    }
    return exchange(w, g, &c, &x, 0);
}

wf_status wf_gfc_alltoallv(wf_world *w, const wf_group *g, const void *send,
                           const size_t *send_counts, const size_t *send_displs, void *recv,
                           const size_t *recv_counts, const size_t *recv_displs) {
    coll c;
    wf_status st = begin(w, g, &c);
    if (st != WF_OK) return st;
    if (!send_counts || !send_displs || !recv_counts || !recv_displs) return WF_EINVAL;
    xchg x;
    xchg_init(&x, c.n);
    for (int j = 0; j < c.n; j++) {
        if (send_counts[j] == NONE || recv_counts[j] == NONE) return WF_EINVAL;
        x.sptr[j] = (const uint8_t *)send + send_displs[j];
        x.scnt[j] = send_counts[j];
        x.rptr[j] = (uint8_t *)recv + recv_displs[j];
        x.rcnt[j] = recv_counts[j];
    }
    if (send_counts[c.me] != recv_counts[c.me]) return WF_EINVAL;
    if (send == recv) {
        for (int j = 0; j < c.n; j++)
            if (send_counts[j] != recv_counts[j] || send_displs[j] != recv_displs[j])
                return WF_EINVAL; /* in place: one layout for both */
        return alltoallv_in_place(w, g, &c, recv, recv_counts, recv_displs);
    }
    x.self_dst = x.rptr[c.me];
    x.self_src = x.sptr[c.me];
    x.self_len = send_counts[c.me];
    x.scnt[c.me] = x.rcnt[c.me] = NONE;
    return exchange(w, g, &c, &x, 0);
}

wf_status wf_gfc_alltoall(wf_world *w, const wf_group *g, const void *send, void *recv,
                          size_t len) {
    if (!g || g->n_ranks < 1 || g->n_ranks > WF_MAX_GROUP_RANKS) return WF_EINVAL;
    size_t counts[WF_MAX_GROUP_RANKS], displs[WF_MAX_GROUP_RANKS];
    for (int i = 0; i < g->n_ranks; i++) counts[i] = len, displs[i] = (size_t)i * len;
    return wf_gfc_alltoallv(w, g, send, counts, displs, recv, counts, displs);
}

/* Every member sends its block to all others and receives block i from member i (an
 * all-gather of unequal blocks at offsets off[i] of buf). The own block is `own` (copied into
 * place meanwhile), or NULL when it is in place already. */
static wf_status gather_blocks(wf_world *w, const wf_group *g, coll *c, uint8_t *buf,
                               const size_t *off, const size_t *len, const uint8_t *own,
                               uint8_t step) {
    xchg x;
    xchg_init(&x, c->n);
    for (int j = 0; j < c->n; j++) {
        if (j == c->me) continue;
        x.sptr[j] = own ? own : buf + off[c->me];
        x.scnt[j] = len[c->me];
        x.rptr[j] = buf + off[j];
        x.rcnt[j] = len[j];
    }
    if (own) {
        x.self_dst = buf + off[c->me];
        x.self_src = own;
        x.self_len = len[c->me];
    }
    return exchange(w, g, c, &x, step);
}
wf_status wf_gfc_allgather(wf_world *w, const wf_group *g, const void *send, void *recv,
                           size_t len) {
    coll c;
    wf_status st = begin(w, g, &c);
    if (st != WF_OK) return st;
    if (len && (!send || !recv)) return WF_EINVAL;
    size_t off[WF_MAX_GROUP_RANKS], lens[WF_MAX_GROUP_RANKS];
    for (int i = 0; i < c.n; i++) off[i] = (size_t)i * len, lens[i] = len;
    return gather_blocks(w, g, &c, recv, off, lens, send, 0);
}

/* Reduce-scatter core: member j owns floats [off[j], off[j] + len[j]) of the vector; every
 * member sends each owner its slice, and each owner sums the n slices in group order into out
 * (n * max(len) floats of world scratch hold the slices). */
static wf_status reduce_blocks(wf_world *w, const wf_group *g, coll *c, const float *send,
                               const size_t *off, const size_t *len, float *out, uint8_t step) {
    size_t mine = len[c->me];
    float *slices = wf__world_scratch(w, (size_t)c->n * (mine ? mine : 1) * sizeof(float));
    if (!slices) return WF_ENOMEM;
    xchg x;
    xchg_init(&x, c->n);
    for (int j = 0; j < c->n; j++) {
        if (j == c->me) continue;
        x.sptr[j] = (const uint8_t *)(send + off[j]);
        x.scnt[j] = len[j] * sizeof(float);
        x.rptr[j] = (uint8_t *)(slices + (size_t)j * mine);
        x.rcnt[j] = mine * sizeof(float);
    }
    x.self_dst = (uint8_t *)(slices + (size_t)c->me * mine);
    x.self_src = (const uint8_t *)(send + off[c->me]);
    x.self_len = mine * sizeof(float);
    wf_status st = exchange(w, g, c, &x, step);
    if (st != WF_OK) return st;
    /* The fixed order: slice 0, then + slice 1, ... whatever arrived first. */
    if (mine) memcpy(out, slices, mine * sizeof(float));
    for (int j = 1; j < c->n; j++) {
        const float *s = slices + (size_t)j * mine;
        for (size_t i = 0; i < mine; i++) out[i] += s[i];
    }
    return WF_OK;
}

wf_status wf_gfc_reduce_scatter_f32(wf_world *w, const wf_group *g, const float *send,
                                    float *recv, size_t count) {
    coll c;
    wf_status st = begin(w, g, &c);
    if (st != WF_OK) return st;
    if (count && (!send || !recv)) return WF_EINVAL;
    size_t off[WF_MAX_GROUP_RANKS], len[WF_MAX_GROUP_RANKS];
    for (int i = 0; i < c.n; i++) off[i] = (size_t)i * count, len[i] = count;
    return reduce_blocks(w, g, &c, send, off, len, recv, 0);
}

wf_status wf_gfc_allreduce_f32(wf_world *w, const wf_group *g, const float *send, float *recv,
                               size_t count) {
    coll c;
    wf_status st = begin(w, g, &c);
    if (st != WF_OK) return st;
    if (count && (!send || !recv)) return WF_EINVAL;
    /* Reduce-scatter into the owner's block of recv, then all-gather the blocks. The order of
     * the sum does not depend on the blocking: each element is summed by one owner, in order. */
    /* Zeroed: gcc cannot see that the loop below fills them. */
    size_t off[WF_MAX_GROUP_RANKS] = {0}, len[WF_MAX_GROUP_RANKS] = {0},
           boff[WF_MAX_GROUP_RANKS], blen[WF_MAX_GROUP_RANKS];
    size_t per = (count + (size_t)c.n - 1) / (size_t)c.n;
    for (int i = 0; i < c.n; i++) {
        off[i] = (size_t)i * per < count ? (size_t)i * per : count;
        len[i] = count - off[i] < per ? count - off[i] : per;
        boff[i] = off[i] * sizeof(float);
        blen[i] = len[i] * sizeof(float);
    }
    st = reduce_blocks(w, g, &c, send, off, len, recv + off[c.me], 0);
    if (st != WF_OK) return st;
    return gather_blocks(w, g, &c, (uint8_t *)recv, boff, blen, NULL, 1);
}

static wf_status p2p(wf_world *w, const wf_group *g, int peer, uint32_t tag, void *buf,
                     size_t len, int sending, size_t *received) {
    if (!w || !g || peer < 0 || peer >= g->n_ranks || wf_gfc_group_index(g, wf_world_rank(w)) < 0)
        return WF_EINVAL;
    wf_world_op op = {.kind = sending ? WF_WORLD_SEND : WF_WORLD_RECV, .peer = g->ranks[peer],
                      .tag = {.kind = WF_WORLD_TAG_P2P, .group = g->id, .seq = tag},
                      .buf = buf, .len = len};
    wf_status st = wf_world_run(w, &op, 1);
    if (received) *received = op.received;
    return st;
}

wf_status wf_gfc_send(wf_world *w, const wf_group *g, int dst, uint32_t tag, const void *buf,
                      size_t len) {
    return p2p(w, g, dst, tag, (void *)(uintptr_t)buf, len, 1, NULL);
}

wf_status wf_gfc_recv(wf_world *w, const wf_group *g, int src, uint32_t tag, void *buf,
                      size_t len, size_t *received) {
    return p2p(w, g, src, tag, buf, len, 0, received);
}
