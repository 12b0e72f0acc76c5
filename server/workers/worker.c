/* The worker process's loop: see worker.h. */
#define _GNU_SOURCE
#include "server/workers/worker.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/world/world.h"
#include "kv/paged.h"
#include "proto/base/clock.h"
#include "proto/base/log.h"
#include "proto/frame_artifact.h"
#include "proto/frame_control.h"
#include "proto/frame_task.h"
#include "sched/defaults.h"
#include "server/vmodels.h"
#include "engine/cpu/quant.h"
#include "engine/cpu/threadpool.h"
#include "server/workers/kv_xfer.h"
#include "server/workers/pool.h"
#include "server/workers/seq_history.h"
#include "server/workers/world_link.h"
#include "server/workers/worker_dit.h"

void wf_worker_params_init(wf_worker_params *p) {
    memset(p, 0, sizeof *p);
    p->host = "127.0.0.1";
    p->rank = -1;
    p->kv_memory_mb = WF_DEFAULT_KV_MEMORY_MB;
    p->max_batch_tokens = WF_DEFAULT_MAX_BATCH_TOKENS;
    p->max_running = WF_DEFAULT_MAX_RUNNING;
    p->heartbeat_ms = 500;
    p->timeout_ms = 30000;
    p->join_timeout_ms = 30000;
    p->kv_codec = "auto";
    p->kv_accuracy = 0.9;
}

int wf_cpu_list_parse(const char *list, unsigned char mask[WF_CPUS_MAX / 8], char *err,
                      size_t errlen) {
    memset(mask, 0, WF_CPUS_MAX / 8);
    int n = 0;
    const char *p = list;
    if (!p || !*p) goto bad;
    for (;;) {
        char *end;
        long a = strtol(p, &end, 10), b;
        if (end == p || a < 0) goto bad;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < a) goto bad;
            p = end;
        } else {
            b = a;
        }
        if (b >= WF_CPUS_MAX) {
            snprintf(err, errlen, "CPU %ld in '%s' is beyond %d", b, list, WF_CPUS_MAX - 1);
            return -1;
        }
        for (long c = a; c <= b; c++) {
            if (!(mask[c / 8] & (1u << (c % 8)))) n++;
            mask[c / 8] |= (unsigned char)(1u << (c % 8));
        }
        if (*p == '\0') return n;
        if (*p != ',') goto bad;
        p++;
    }
bad:
    snprintf(err, errlen, "malformed CPU list '%s' (expected e.g. 0-3,6)", list ? list : "");
    return -1;
}

/* Pins the process to the list; returns the number of CPUs, or -1. */
static int pin_cores(const char *list) {
    unsigned char mask[WF_CPUS_MAX / 8];
    char err[128];
    int n = wf_cpu_list_parse(list, mask, err, sizeof err);
    if (n < 0) {
        WF_LOG_ERROR("worker", NULL, "%s", err);
        return -1;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c = 0; c < WF_CPUS_MAX && c < CPU_SETSIZE; c++)
        if (mask[c / 8] & (1u << (c % 8))) CPU_SET(c, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        WF_LOG_ERROR("worker", NULL, "cannot pin to CPUs %s (are they online?)", list);
        return -1;
    }
    return n;
}

/* A batch's PD transfers (pd_plan, pd_pump, pd_finish). */
typedef struct pd_shipment {
    wf_kv_decision *dec;             /* per task of the batch: its decision (profile -2: none) */
    wf_status *fail;                 /* per task: failed while planned (the engine resets statuses) */
    size_t dec_cap;
    bool raw_any;                    /* raw puts planned and not failed to post */
    wf_status post_st;               /* a post that failed (the rest were not posted) */
    wf_kv_decision raw_d;            /* the raw decision (for the controller's sample) */
    size_t *layer_op0;               /* puts of layer l: pd_ops[layer_op0[l], layer_op0[l + 1]) */
    size_t n_ops, n_posted;
    int layers_posted;
    atomic_int layers;               /* layers the engine has stored (its thread writes) */
    int codec_task;                  /* the compressed task sent during the batch (-1: none) */
    bool codec_begun;                /* its send began before the batch */
    uint64_t t_first, t_layers;      /* first put posted; every layer posted */
} pd_shipment;

typedef struct worker {
    const wf_worker_params *p;
    wf_world *world;
    wf_engine *engine;
    wf_kv_store kv;
    bool kv_on;
    wf_executor exec;
    wf_link link;
    uint8_t *arena_mem;
    size_t arena_cap;
    wf_frame_task_result *results;
    int results_cap;
    uint64_t hb_seq;
    uint64_t batches;
    /* Prefill for another rank (prefill/decode disaggregation): blocks of this worker's own
     * store, taken for one batch and given back before it is answered, through the paged pool
     * with its prefix cache (kv/paged.h): a prompt's full blocks stay cached once shipped, so
     * a later prompt with the same prefix computes only its tail here (and ships them all). */
    wf_kv_pool *pd_pool;
    wf_kv_seq *pd_seqs;              /* per task of the batch (empty: not a PD task) */
    int pd_seqs_cap;
    uint64_t kv_layers_early;        /* layers on their way before their prefill ended */
    wf_world_op *pd_ops;
    size_t pd_ops_cap;
    pd_shipment ship;
    uint64_t transfers, transfer_bytes;
    uint64_t compressed_raw;         /* F16 bytes the compressed transfers stood for */
    char last_codec[96];             /* the last decision, for TRANSFER_DONE */
    struct wvm {                     /* virtual models bound here (--vmodel, VMODEL frames) */
        uint32_t num;
        int n;
        wf_lora *l[WF_VMODEL_MAX_ADAPTERS]; /* freed after unbinding, or after the engine */
    } *vms;
    int n_vms, cap_vms;
    wf_kv_xfer *xfer;                /* codec path (both directions) */
    wf_threadpool *codec_pool;       /* its encodes and decodes, split by layers (NULL: serial) */
    wf_worker_dit dit;               /* DENOISE chunks (worker_dit.h) */
    wf_seq_store hist;               /* token histories of the sequences it runs (penalties) */
    int done_fd;                     /* eventfd: the compute thread finished a batch */
    bool done_fd_on;
    uint64_t last_hb_ns;             /* the last heartbeat sent */
    bool hb_warned;                  /* a heartbeat of this batch failed (logged once) */
} worker;

/* A PD prefill: a task whose KV artifact is held by another rank (the decode rank that will
 * continue the sequence). It runs here on scratch blocks and its blocks are then put into the
 * holder's registered KV memory. */
static bool is_pd_task(const worker *w, const wf_task *t) {
    return t->kind == WF_TASK_PREFILL && t->llm.kv.placement.kind == WF_PLACEMENT_OWNER &&
           t->llm.kv.placement.holders.n_ranks == 1 &&
           t->llm.kv.placement.holders.ranks[0] != wf_world_rank(w->world);
}

/* The prefix-cache namespace of a PD task, or false when it must not share cached blocks: a
 * virtual model's adapters change its K/V and its number may name other adapters later. */
static bool pd_cacheable(const wf_task *t) { return t->vmodel == 0; }

/* Gives every PD task of the batch blocks of this worker for [0, pos + n_tokens): the prefix
 * its cache holds, then new ones, and makes the task compute only the tail (its block table is
 * replaced; dst[i] keeps the holder's). A task that cannot be served fails alone. */
static wf_status pd_prepare(worker *w, wf_task_batch *b, wf_artifact *dst) {
    int bs = w->kv.geometry.block_size;
    if (b->n_tasks > w->pd_seqs_cap) {
        wf_kv_seq *p = realloc(w->pd_seqs, (size_t)b->n_tasks * sizeof *p);
        if (!p) return WF_ENOMEM;
        w->pd_seqs = p;
        w->pd_seqs_cap = b->n_tasks;
    }
    for (int i = 0; i < b->n_tasks; i++) {
        wf_task *t = &b->tasks[i];
        wf_kv_seq *q = &w->pd_seqs[i];
        memset(q, 0, sizeof *q);
        dst[i] = t->llm.kv;
        if (!is_pd_task(w, t)) continue;
        int total = t->llm.pos + t->llm.n_tokens;
        int n = (total + bs - 1) / bs;
        wf_status st = WF_OK;
        if (t->llm.pos != 0 || n > dst[i].n_blocks) {
            /* The coordinator sends whole prompts: earlier positions' KV is not here. */
            WF_LOG_WARN("worker", NULL, "rank %d: PD prefill of task %llu at pos %d (needs 0) or "
                        "with %d of %d blocks", wf_world_rank(w->world), (unsigned long long)t->id,
                        t->llm.pos, dst[i].n_blocks, n);
            st = WF_EINVAL;
            dst[i].id |= 1ull << 63; /* failed before the run (the engine resets statuses) */
        } else if (wf_kv_seq_init(q, n) != WF_OK) {
            st = WF_ENOMEM;
            dst[i].id |= 1ull << 62;
        } else {
            int cached = pd_cacheable(t) ? wf_kv_seq_match_prefix(w->pd_pool, q, t->llm.tokens, total) : 0;
            if (wf_kv_seq_reserve(w->pd_pool, q, total, NULL) != WF_OK) {
                wf_kv_seq_release(w->pd_pool, q);
                wf_kv_seq_free(q);
                st = WF_EFULL;
                dst[i].id |= 1ull << 62;
            } else {
                t->llm.kv.block_table = q->blocks;
                t->llm.kv.n_blocks = n;
                t->llm.tokens += cached;
                t->llm.n_tokens -= cached;
                t->llm.pos = cached;
            }
        }
        if (st != WF_OK) {
            t->status = st;
            t->llm.kv.n_blocks = 0;
            t->llm.n_tokens = 0;
        }
    }
    return WF_OK;
}

/* After the batch: a task's blocks go back to the pool, its full blocks published to the
 * prefix cache when its KV was computed (the batch and the task succeeded: a failed batch may
 * leave statuses untouched); the task is whole again (pos 0, the holder's blocks). */
static void pd_release(worker *w, wf_task *t, int i, const wf_artifact *dst, bool computed) {
    wf_kv_seq *q = &w->pd_seqs[i];
    if (q->blocks) {
        int cached = t->llm.pos;
        t->llm.tokens -= cached;
        t->llm.n_tokens += cached;
        t->llm.pos = 0;
        if (computed && t->status == WF_OK && pd_cacheable(t))
            wf_kv_seq_commit(w->pd_pool, q, t->llm.tokens, t->llm.n_tokens);
        wf_kv_seq_release(w->pd_pool, q);
        wf_kv_seq_free(q);
    }
    t->llm.kv = dst[i];
}

/* The PD tasks' transfers, planned before the batch runs and started layer by layer while it
 * does: raw tasks' blocks are put into their holders' KV memory (runs of consecutive blocks on
 * both sides go as one put per layer and K/V, straight from this worker's registered store), the
 * puts of layer l posted as soon as the engine has stored layer l (pd_layer_done, on the
 * engine's thread, wakes this one), so layer l moves while layer l+1 computes; what is left
 * after the batch is posted then, and everything is waited for and flushed before the batch is
 * answered. Compressed tasks are sent after the batch (wf_kv_xfer_send). Fills w->pd_dec. */
static void pd_plan(worker *w, wf_task_batch *b, wf_artifact *dst) {
    int L = w->kv.geometry.n_layers;
    pd_shipment *s = &w->ship;
    s->n_ops = s->n_posted = 0;
    s->post_st = WF_OK;
    s->layers_posted = 0;
    s->raw_any = false;
    s->codec_task = -1;
    s->codec_begun = false;
    s->t_first = s->t_layers = 0;
    atomic_store_explicit(&s->layers, 0, memory_order_relaxed);
    if ((size_t)b->n_tasks > s->dec_cap) {
        free(s->dec);
        free(s->fail);
        s->dec = malloc((size_t)b->n_tasks * sizeof *s->dec);
        s->fail = malloc((size_t)b->n_tasks * sizeof *s->fail);
        s->dec_cap = s->dec && s->fail ? (size_t)b->n_tasks : 0;
    }
    for (size_t i = 0; i < (size_t)b->n_tasks && i < s->dec_cap; i++) {
        s->dec[i] = (wf_kv_decision){.profile = -2};
        s->fail[i] = WF_OK;
    }
    size_t n_ops = 0;
    for (int i = 0; i < b->n_tasks; i++)
        if (is_pd_task(w, &b->tasks[i]) && b->tasks[i].status == WF_OK)
            n_ops += (size_t)b->tasks[i].llm.kv.n_blocks * 2u * (size_t)L;
    if (n_ops > w->pd_ops_cap) {
        wf_world_op *p = realloc(w->pd_ops, n_ops * sizeof *p);
        if (p) {
            w->pd_ops = p;
            w->pd_ops_cap = n_ops;
        }
    }
    bool mem = s->dec_cap >= (size_t)b->n_tasks && w->pd_ops_cap >= n_ops &&
               (s->layer_op0 || (s->layer_op0 = malloc(((size_t)L + 1) * sizeof *s->layer_op0)));
    for (int i = 0; i < b->n_tasks; i++) {
        wf_task *t = &b->tasks[i];
        if (!is_pd_task(w, t) || t->status != WF_OK) continue;
        if (!mem) {
            /* Answered as failed after the batch (as pd_prepare marks them: the engine resets
             * statuses). */
            dst[i].id |= 1ull << 62;
            continue;
        }
        size_t raw = (size_t)t->llm.kv.n_blocks * 2u * (size_t)L * w->kv.block_bytes;
        wf_kv_decision *d = &s->dec[i];
        wf_kv_xfer_decide(w->xfer, raw, t->llm.kv_accuracy > 0 ? t->llm.kv_accuracy : -1, t->llm.kv_codec, d);
        snprintf(w->last_codec, sizeof w->last_codec, "codec=%s reason=%s",
                 d->profile >= 0 ? "profile" : "raw", wf_kv_reason_name(d->reason));
        if (d->profile >= 0) {
            if (s->codec_task < 0) s->codec_task = i; /* the first one goes during the batch */
            continue;
        }
        int peer = dst[i].placement.holders.ranks[0];
        wf_kv_store far;
        if (wf_kv_store_layout(&far, &w->kv.geometry, wf_world_peer_sym_size(w->world, peer)) != WF_OK) {
            s->fail[i] = WF_EINVAL;
            continue;
        }
        const int32_t *dt = dst[i].block_table;
        for (int j = 0; j < t->llm.kv.n_blocks; j++)
            if (dt[j] < 0 || dt[j] >= far.n_blocks) s->fail[i] = WF_EINVAL;
        if (s->fail[i] == WF_OK) {
            s->raw_d = *d;
            s->raw_any = true;
        }
    }
    if (!mem) s->codec_task = -1;
    if (!mem || !s->raw_any) {
        s->raw_any = false;
        return;
    }
    /* Layer-major, so that the puts of one layer are one range of pd_ops. */
    size_t k = 0;
    for (int l = 0; l < L; l++) {
        s->layer_op0[l] = k;
        for (int i = 0; i < b->n_tasks; i++) {
            wf_task *t = &b->tasks[i];
            if (!is_pd_task(w, t) || t->status != WF_OK || s->dec[i].profile != -1 || s->fail[i] != WF_OK)
                continue;
            int peer = dst[i].placement.holders.ranks[0];
            wf_kv_store far;
            wf_kv_store_layout(&far, &w->kv.geometry, wf_world_peer_sym_size(w->world, peer));
            const int32_t *src = t->llm.kv.block_table, *dt = dst[i].block_table;
            int n = t->llm.kv.n_blocks;
            for (int j = 0; j < n;) {
                int run = 1;
                while (j + run < n && src[j + run] == src[j] + run && dt[j + run] == dt[j] + run &&
                       dt[j] + run < far.n_blocks)
                    run++;
                for (int v = 0; v < 2; v++) {
                    void *from = v ? wf_kv_store_v(&w->kv, l, src[j]) : wf_kv_store_k(&w->kv, l, src[j]);
                    w->pd_ops[k++] = (wf_world_op){.kind = WF_WORLD_PUT, .peer = peer, .buf = from,
                                                   .len = (size_t)run * w->kv.block_bytes,
                                                   .offset = wf_kv_store_offset(&far, l, dt[j], v)};
                }
                j += run;
            }
        }
    }
    s->layer_op0[L] = k;
    s->n_ops = k;
}

/* Before the batch: the first compressed task's send begins (its header goes, the encoder waits
 * for the layers), so its slices are encoded and sent while the later layers compute. A send
 * that cannot begin is made after the batch, as the others. */
static void pd_begin_codec(worker *w, wf_task_batch *b, const wf_artifact *dst) {
    pd_shipment *s = &w->ship;
    int i = s->codec_task;
    if (i < 0 || w->p->kv_ship_after_prefill || !w->done_fd_on) return;
    wf_task *t = &b->tasks[i];
    char err[256];
    wf_status st = wf_kv_xfer_send_begin(w->xfer, w->world, &s->dec[i], &w->kv, t->llm.kv.block_table,
                                         t->llm.kv.n_blocks, t->llm.pos + t->llm.n_tokens,
                                         dst[i].placement.holders.ranks[0], dst[i].block_table,
                                         dst[i].n_blocks, 0, err, sizeof err);
    if (st == WF_OK) s->codec_begun = true;
    else WF_LOG_WARN("worker", NULL, "rank %d: %s (sent after the prefill)", wf_world_rank(w->world), err);
}

/* The engine's thread: layer l of the batch is stored. */
static void pd_layer_done(void *user, int layer) {
    worker *w = user;
    atomic_store_explicit(&w->ship.layers, layer + 1, memory_order_release);
    if (w->ship.codec_begun) wf_kv_xfer_send_layers(w->xfer, layer + 1);
    uint64_t one = 1;
    ssize_t r = write(w->done_fd, &one, sizeof one);
    (void)r;
}

/* The worker's thread: posts the puts of the layers stored up to `ready` (a failed post leaves
 * the rest for pd_finish, whose wait reports it) and progresses the ones posted. */
static void pd_pump(worker *w, int ready) {
    pd_shipment *s = &w->ship;
    if (!s->raw_any) return;
    if (ready > s->layers_posted) {
        size_t to = s->layer_op0[ready];
        if (to > s->n_posted) {
            if (s->n_posted == 0) s->t_first = wf_clock_now_ns();
            wf_status st = wf_world_post(w->world, w->pd_ops + s->n_posted, (int)(to - s->n_posted));
            if (st != WF_OK) {
                s->post_st = st;
                s->raw_any = false;
            }
            s->n_posted = to;
        }
        s->layers_posted = ready;
        if (ready == w->kv.geometry.n_layers) s->t_layers = wf_clock_now_ns();
    }
    if (s->n_posted > 0) wf_world_test(w->world, w->pd_ops, (int)s->n_posted);
}

/* Sleeps until the next thing to do. `moving` (KV in flight, or a batch running): back within
 * a millisecond whatever UCX says, since messages over TCP move only while this thread
 * progresses, without spinning on UCX's "events pending" (it reports them as long as its TCP
 * transport has queued work). Else until the world or done_fd has something, or timeout_ms. */
static void wait_next(worker *w, bool moving, int timeout_ms) {
    struct pollfd pf = {.fd = w->done_fd_on ? w->done_fd : -1, .events = POLLIN};
    if (!moving) {
        uint64_t t = wf_clock_now_ns();
        wf_world_wait_event(w->world, pf.fd, timeout_ms);
        /* Back at once with nothing of ours to do: UCX says events are pending (it keeps
         * saying so while its TCP transport has queued work); a millisecond's sleep instead
         * of a spin. */
        if (wf_clock_now_ns() - t < 50000 && poll(&pf, 1, 0) == 0) poll(&pf, 1, 1);
    } else {
        poll(&pf, 1, 1);
    }
    if (w->done_fd_on) {
        uint64_t drained;
        ssize_t r = read(w->done_fd, &drained, sizeof drained);
        (void)r;
    }
}

/* After the batch: posts what is left (all of it when the batch did not report layers), waits
 * until every put is complete at its target, sends the compressed tasks, then gives the scratch
 * blocks back. A failed put fails its tasks (the decode rank died or is stuck). Fills *bytes,
 * *ns (the time the transfers took beyond the batch: what the overlap did not hide) and
 * *dst_rank. */
static void pd_finish(worker *w, wf_task_batch *b, const wf_artifact *dst, bool batch_ok,
                      uint64_t *bytes, uint64_t *ns, int *dst_rank) {
    pd_shipment *s = &w->ship;
    uint64_t t0 = wf_clock_now_ns();
    int L = w->kv.geometry.n_layers;
    *bytes = 0;
    wf_status st = WF_OK;
    /* What the overlap did: the layers whose puts went while the prefill still ran. */
    if (s->n_posted > 0) w->kv_layers_early += (uint64_t)s->layers_posted;
    if (s->raw_any && batch_ok) pd_pump(w, L);
    if (s->n_posted > 0) {
        size_t put_bytes = 0;
        for (size_t i = 0; i < s->n_posted; i++) put_bytes += w->pd_ops[i].len;
        /* The wait bound grows with the bytes: a long prompt on a slow link is not a stuck peer. */
        int base = wf_world_timeout_ms(w->world);
        wf_world_set_timeout_ms(w->world, wf_kv_xfer_timeout_ms(base, put_bytes));
        st = wf_world_wait(w->world, w->pd_ops, (int)s->n_posted);
        /* Per peer: a decode worker that dies before its puts complete fails them at once. */
        for (size_t i = 0; st == WF_OK && i < s->n_posted; i++) {
            bool seen = false;
            for (size_t j = 0; j < i && !seen; j++) seen = w->pd_ops[j].peer == w->pd_ops[i].peer;
            if (!seen) st = wf_world_flush_peer(w->world, w->pd_ops[i].peer);
        }
        wf_world_set_timeout_ms(w->world, base);
        if (st == WF_OK && s->post_st != WF_OK) st = s->post_st;
        uint64_t t1 = wf_clock_now_ns();
        if (st == WF_OK && batch_ok) {
            /* While the layers were still being computed the link may have idled: the span from
             * the first put to the last is then the prefill's pace, and bytes / span only a
             * lower bound on B. Without the overlap (t_layers 0: everything was posted after the
             * batch) the span is the transfer's. */
            uint64_t span = t1 - s->t_first, tail = s->t_layers ? t1 - s->t_layers : span;
            wf_kv_xfer_observe_raw_paced(w->xfer, &s->raw_d, put_bytes, span, tail);
            WF_LOG_INFO("worker", NULL, "KV to rank %d: raw, %zu bytes in %zu puts, first put %.1f ms "
                        "before the batch ended, done %.1f ms after it (posted during the prefill: %s)",
                        w->pd_ops[0].peer, put_bytes, s->n_posted, ((double)t0 - (double)s->t_first) / 1e6,
                        (double)(t1 - t0) / 1e6, s->t_first < t0 && !w->p->kv_ship_after_prefill ? "yes" : "no");
        }
        if (st != WF_OK)
            WF_LOG_WARN("worker", NULL, "rank %d: KV transfer failed: %s", wf_world_rank(w->world),
                        wf_world_error(w->world));
        *bytes += put_bytes;
    }
    bool any = s->n_posted > 0;
    for (int i = 0; i < b->n_tasks; i++) {
        wf_task *t = &b->tasks[i];
        if (!is_pd_task(w, t)) continue;
        *dst_rank = dst[i].placement.holders.ranks[0];
        size_t wire = 0;
        char err[256];
        if (i == s->codec_task && s->codec_begun) {
            /* Begun before the batch: its last slices go now (or, the prefill failed, empty). */
            if (t->status != WF_OK) wf_kv_xfer_send_layers(w->xfer, -1);
            wf_status xs = wf_kv_xfer_send_end(w->xfer, w->world, &wire, err, sizeof err);
            s->codec_begun = false;
            if (t->status != WF_OK) continue;
            if (xs != WF_OK) {
                WF_LOG_WARN("worker", NULL, "rank %d: %s", wf_world_rank(w->world), err);
                t->status = xs;
            } else {
                any = true;
            }
            *bytes += wire;
            w->compressed_raw += (size_t)t->llm.kv.n_blocks * 2u * (size_t)L * w->kv.block_bytes;
            wf_kv_xfer_stats xst;
            wf_kv_xfer_get_stats(w->xfer, &xst);
            snprintf(w->last_codec, sizeof w->last_codec, "codec=%s reason=%s", xst.last_profile,
                     wf_kv_reason_name(s->dec[i].reason));
            continue;
        }
        if (t->status != WF_OK || s->dec[i].profile < 0) continue;
        /* Compressed: one codec frame per layer slice by tagged messages, decoded by the peer. */
        int n_tokens = t->llm.pos + t->llm.n_tokens;
        size_t raw = (size_t)t->llm.kv.n_blocks * 2u * (size_t)L * w->kv.block_bytes;
        wf_status xs = wf_kv_xfer_send(w->xfer, w->world, &s->dec[i], &w->kv, t->llm.kv.block_table,
                                       t->llm.kv.n_blocks, n_tokens, *dst_rank, dst[i].block_table,
                                       dst[i].n_blocks, &wire, err, sizeof err);
        if (xs != WF_OK) {
            WF_LOG_WARN("worker", NULL, "rank %d: %s", wf_world_rank(w->world), err);
            t->status = xs;
        } else {
            any = true;
        }
        *bytes += wire;
        w->compressed_raw += raw;
        wf_kv_xfer_stats xst;
        wf_kv_xfer_get_stats(w->xfer, &xst);
        snprintf(w->last_codec, sizeof w->last_codec, "codec=%s reason=%s", xst.last_profile,
                 wf_kv_reason_name(s->dec[i].reason));
    }
    for (int i = 0; i < b->n_tasks; i++) {
        wf_task *t = &b->tasks[i];
        if (!is_pd_task(w, t)) continue;
        if (st != WF_OK && t->status == WF_OK && s->dec[i].profile == -1) t->status = st;
        pd_release(w, t, i, dst, batch_ok);
    }
    if (st == WF_OK && any) {
        w->transfers++;
        w->transfer_bytes += *bytes;
    }
    s->n_posted = 0;
    s->raw_any = false;
    s->post_st = WF_OK;
    *ns = wf_clock_now_ns() - t0;
}

/* Start-up measurement of the KV codec profiles on this worker's CPUs (the controller's S
 * comes from here, not from the machine weft-kvprof ran on): encodes and decodes CODEC_TOKENS
 * positions of synthetic KV (a few outlier key channels, as real keys have) through every
 * profile for about CODEC_BUDGET_MS. The compression ratio and accuracy stay the library's:
 * they belong to the model's real KV, the speed to this machine. Uses the first blocks of the
 * store, which nobody has reserved before the worker says it is ready. */
#define CODEC_TOKENS 256
#define CODEC_BUDGET_MS 300
static void codec_pool_run(void *pool, void (*fn)(void *ctx, int ith, int nth), void *ctx) {
    wf_threadpool_run(pool, fn, ctx);
}

/* The codec's own pool (not the engine's: a decode worker decodes KV while its engine runs a
 * batch on the engine's pool): one thread per core of this worker, at most one per layer of a
 * slice (the codec splits a slice by layers). NULL (serial) on one core. */
static void codec_pool_open(worker *w, int n_threads, int n_layers) {
    int per_slice = (n_layers + wf_kv_xfer_slices(n_layers) - 1) / wf_kv_xfer_slices(n_layers);
    wf_threadpool *tp = wf_threadpool_new(n_threads);
    if (tp && wf_threadpool_size(tp) > per_slice) {
        wf_threadpool_free(tp);
        tp = wf_threadpool_new(per_slice);
    }
    if (tp && wf_threadpool_size(tp) <= 1) {
        wf_threadpool_free(tp);
        tp = NULL;
    }
    w->codec_pool = tp; /* a pool that cannot start leaves the codec serial */
}

static wf_status measure_codecs(worker *w, wf_kv_profile_lib *lib, char *err, size_t errlen) {
    const wf_kv_store *kv = &w->kv;
    int bs = kv->geometry.block_size, n_blocks = (CODEC_TOKENS + bs - 1) / bs;
    if (lib->n == 0) return WF_OK;
    /* every layer's blocks [0, n_blocks) are written: a split store's local region too */
    int have = kv->n_swa_blocks > 0 && kv->n_swa_blocks < kv->n_blocks ? kv->n_swa_blocks : kv->n_blocks;
    if (n_blocks > have)
        return wf_status_errorf(err, errlen, WF_EINVAL, "KV cache of %d blocks is too small to measure the "
                                "codec on %d tokens", have, CODEC_TOKENS);
    int32_t blocks[64];
    if (n_blocks > 64) n_blocks = 64;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    size_t row = kv->row_elems;
    for (int l = 0; l < kv->geometry.n_layers; l++)
        for (int b = 0; b < n_blocks; b++) {
            blocks[b] = b;
            for (int v = 0; v < 2; v++) {
                uint8_t *base = v ? wf_kv_store_v(kv, l, b) : wf_kv_store_k(kv, l, b);
                for (size_t i = 0; i < (size_t)bs * row; i++) {
                    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                    /* about N(0, 1): a sum of four uniforms; keys get outliers on channel % 16 */
                    float x = 0;
                    for (int u = 0; u < 4; u++) x += (float)((s >> (16 * u)) & 0xffff) / 65535.0f - 0.5f;
                    x *= 1.7f;
                    if (!v && (i % row) % 16 == 3) x = x * 4 + 8;
                    if (kv->elem_bytes == 2) ((uint16_t *)(void *)base)[i] = wf_fp32_to_fp16(x);
                    else ((float *)(void *)base)[i] = x;
                }
            }
        }
    double cr[WF_FRAME_MAX_CODECS];
    for (int i = 0; i < lib->n && i < WF_FRAME_MAX_CODECS; i++) cr[i] = lib->items[i].cr;
    /* On as many threads as the transfers will code with: the controller's S includes that. */
    wf_status st = wf_kv_profile_lib_measure_parallel(
        lib, kv, blocks, n_blocks, CODEC_TOKENS, (uint64_t)CODEC_BUDGET_MS * 1000000ull,
        w->codec_pool ? codec_pool_run : NULL, w->codec_pool,
        w->codec_pool ? wf_threadpool_size(w->codec_pool) : 1, err, errlen);
    for (int i = 0; i < lib->n && i < WF_FRAME_MAX_CODECS; i++) lib->items[i].cr = cr[i];
    return st;
}

/* Once, before the first heartbeat: the role this worker declares and its codec speeds. */
static wf_status send_info(worker *w, const wf_kv_profile_lib *lib) {
    static wf_frame_worker_info info; /* 64 codecs: off the stack (one worker per process) */
    memset(&info, 0, sizeof info);
    info.role = w->p->pd_role;
    for (int i = 0; i < lib->n && info.n_codecs < WF_FRAME_MAX_CODECS; i++) {
        const wf_kv_profile_stats *s = &lib->items[i];
        wf_frame_codec_speed *c = &info.codecs[info.n_codecs++];
        snprintf(c->name, sizeof c->name, "%s", s->profile.name);
        c->cr = (float)s->cr;
        c->enc_gbps = (float)s->enc_gbps;
        c->dec_gbps = (float)s->dec_gbps;
    }
    char err[256];
    return WF_LINK_SEND(w->world, &w->link, wf_frame_encode_worker_info, &info, err, sizeof err);
}

static wf_status send_heartbeat(worker *w) {
    wf_kv_pool_usage u = {0};
    if (w->pd_pool) wf_kv_pool_get_usage(w->pd_pool, &u);
    wf_kv_xfer_stats xs = {0};
    if (w->xfer) wf_kv_xfer_get_stats(w->xfer, &xs);
    /* Blocks held by a batch in flight; cached prefix blocks are free for the taking. */
    wf_frame_heartbeat hb = {.seq = w->hb_seq++, .time_ns = wf_clock_now_ns(),
                             .kv_blocks_used = (uint32_t)u.used,
                             .kv_blocks_total = (uint32_t)w->kv.n_blocks,
                             .kv_swa_blocks_total = (uint32_t)w->kv.n_swa_blocks,
                             .prefix_queries = u.prefix_queries, .prefix_hits = u.prefix_hits,
                             .kv_layers_early = w->kv_layers_early + xs.early_layers};
    char err[256];
    return WF_LINK_SEND(w->world, &w->link, wf_frame_encode_heartbeat, &hb, err, sizeof err);
}

/* While a batch runs: a heartbeat when one is due (the coordinator sends nothing to a busy
 * worker and takes one silent for --worker-timeout-ms for dead). A failed send does not stop
 * the batch (its memory is the engine's until done): the coordinator finds out by itself, and
 * serve() by its next send. */
static void heartbeat_tick(worker *w) {
    uint64_t now = wf_clock_now_ns();
    if (now - w->last_hb_ns < (uint64_t)w->p->heartbeat_ms * 1000000ull) return;
    if (send_heartbeat(w) != WF_OK && !w->hb_warned) {
        WF_LOG_WARN("worker", NULL, "rank %d: heartbeat during a batch failed: %s", wf_world_rank(w->world),
                    wf_world_error(w->world));
        w->hb_warned = true;
    }
    w->last_hb_ns = now;
}

/* worker_dit's heartbeat hook: multi-rank chunks run on this thread (the world's), so the
 * heartbeats go between their rounds (wf_dit_sp's round hook). */
static void dit_heartbeat(void *user) { heartbeat_tick(user); }

/* Runs an LLM batch on the engine's own thread and, while it computes, keeps sending
 * heartbeats from this one (which owns the world): the coordinator sends nothing to a worker
 * running a batch (a send to it could block its communication thread), so without them a batch
 * longer than --worker-timeout-ms looked like a dead worker. Compressed KV arriving from prefill
 * workers is decoded meanwhile as well (into blocks this batch does not use: the RMA path
 * writes them concurrently already). */
typedef struct batch_wait {
    atomic_bool done;
    wf_status status;
    char msg[WF_FRAME_TASK_MESSAGE_MAX];
    int fd;
} batch_wait;

static void batch_done(void *user, wf_task_batch *b, wf_status status, const char *message) {
    (void)b;
    batch_wait *bw = user;
    int fd = bw->fd;
    bw->status = status;
    snprintf(bw->msg, sizeof bw->msg, "%s", message ? message : "");
    atomic_store_explicit(&bw->done, true, memory_order_release); /* the last touch of bw */
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof one);
    (void)r;
}

/* ex: the LLM engine's executor (ship: a PD prefill's KV goes out layer by layer) or the
 * DiT's, whose single-rank DENOISE chunks also run on its own thread: a long chunk (the largest
 * size, many steps) would otherwise be silence too. */
static wf_status run_batch(worker *w, wf_executor ex, wf_task_batch *b, bool ship, char *msg, size_t cap);

/* worker_dit's single-rank chunks: on the DiT's executor, heartbeats kept. */
static wf_status dit_run_local(void *user, wf_executor ex, wf_task_batch *b, char *msg, size_t cap) {
    return run_batch(user, ex, b, false, msg, cap);
}

static wf_status run_batch(worker *w, wf_executor ex, wf_task_batch *b, bool ship, char *msg, size_t cap) {
    if (!w->done_fd_on) {
        if ((w->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
            return wf_executor_run(ex, b, msg, cap); /* no heartbeats, but the batch runs */
        w->done_fd_on = true;
    }
    batch_wait bw = {.fd = w->done_fd};
    atomic_init(&bw.done, false);
    /* PD: the engine says when each layer is stored, so its puts go while the next computes. */
    ship = ship && ((w->ship.raw_any && !w->p->kv_ship_after_prefill) || w->ship.codec_begun);
    if (ship) wf_engine_set_layer_hook(w->engine, pd_layer_done, w);
    wf_status st = wf_executor_dispatch(ex, b, batch_done, &bw);
    if (st != WF_OK) {
        if (ship) wf_engine_set_layer_hook(w->engine, NULL, NULL);
        snprintf(msg, cap, "the engine refused the batch: %s", wf_status_str(st));
        return st;
    }
    w->hb_warned = false;
    while (!atomic_load_explicit(&bw.done, memory_order_acquire)) {
        heartbeat_tick(w);
        wf_kv_xfer_poll(w->xfer, w->world, &w->kv);
        if (ship) {
            pd_pump(w, atomic_load_explicit(&w->ship.layers, memory_order_acquire));
            if (w->ship.codec_begun) wf_kv_xfer_send_pump(w->xfer, w->world);
        }
        /* Every millisecond while the batch runs, KV in flight or not: measured on this
         * project's VM under load (2 vCPUs, BENCHMARKS.md "KV moved layer by layer"), a
         * 2000-token prefill took 4.8 s with this loop waking each millisecond and 9-38 s
         * with it asleep in poll for up to 20 ms, at the same CPU time of the engine's
         * thread (no difference at low load; the cause is not established). 1000 wake-ups a
         * second cost nothing measurable. KV in flight needs it anyway (messages over TCP
         * move only while this thread progresses). */
        wait_next(w, true, w->p->heartbeat_ms);
    }
    if (ship) wf_engine_set_layer_hook(w->engine, NULL, NULL);
    snprintf(msg, cap, "%s", bw.msg);
    return bw.status;
}

/* Runs one TASK_DISPATCH and answers it. A frame that does not decode is answered with a
 * failed BATCH_DONE when its iteration can be read, so the coordinator never waits for it. */
static wf_status run_dispatch(worker *w, const wf_frame_view *f) {
    char err[WF_FRAME_TASK_MESSAGE_MAX] = "";
    size_t need = wf_link_arena_bound(f->hdr.payload_len);
    if (need > w->arena_cap) {
        free(w->arena_mem);
        w->arena_cap = 0;
        if (!(w->arena_mem = malloc(need))) return WF_ENOMEM;
        w->arena_cap = need;
    }
    wf_frame_arena arena;
    wf_frame_arena_init(&arena, w->arena_mem, w->arena_cap);
    wf_task_batch batch;
    wf_frame_batch_done done = {0};
    wf_status st = wf_frame_decode_task_dispatch(f, &arena, &batch, err, sizeof err);
    if (st != WF_OK) {
        WF_LOG_ERROR("worker", NULL, "rank %d: bad TASK_DISPATCH: %s", wf_world_rank(w->world), err);
        /* The iteration is the payload's first u64 (proto/frame.h); without it nobody waits. */
        if (f->hdr.payload_len < 8) return WF_OK;
        memcpy(&done.iteration, f->payload, 8);
        done.status = WF_EPROTO;
        snprintf(done.message, sizeof done.message, "worker rank %d: %s", wf_world_rank(w->world), err);
        return WF_LINK_SEND(w->world, &w->link, wf_frame_encode_batch_done, &done, err, sizeof err);
    }
    /* Each sample's whole history again, from the tokens kept of earlier tasks (and the
     * frame's reset and drops, whatever its tasks). */
    if ((st = wf_seq_store_apply(&w->hist, &batch, err, sizeof err)) != WF_OK) {
        WF_LOG_ERROR("worker", NULL, "rank %d: TASK_DISPATCH %llu: %s", wf_world_rank(w->world),
                     (unsigned long long)batch.iteration, err);
        done.iteration = batch.iteration;
        done.status = st;
        snprintf(done.message, sizeof done.message, "worker rank %d: %s", wf_world_rank(w->world), err);
        return WF_LINK_SEND(w->world, &w->link, wf_frame_encode_batch_done, &done, err, sizeof err);
    }
    if (batch.n_tasks > 0 && batch.tasks[0].kind == WF_TASK_DENOISE) {
        w->hb_warned = false;
        st = wf_worker_dit_run(&w->dit, &batch);
        w->batches++;
        return st;
    }
    char msg[WF_FRAME_TASK_MESSAGE_MAX] = "";
    done.iteration = batch.iteration;
    bool pd = false;
    for (int i = 0; i < batch.n_tasks && !pd; i++) pd = is_pd_task(w, &batch.tasks[i]);
    wf_artifact *dst = NULL;
    if (pd) {
        if (!(dst = malloc((size_t)batch.n_tasks * sizeof *dst)) || pd_prepare(w, &batch, dst) != WF_OK) {
            free(dst);
            return WF_ENOMEM;
        }
        pd_plan(w, &batch, dst);
        pd_begin_codec(w, &batch, dst);
    }
    done.status = run_batch(w, w->exec, &batch, pd, msg, sizeof msg);
    if (pd) {
        for (int i = 0; i < batch.n_tasks; i++) {
            if (dst[i].id >> 62) {
                batch.tasks[i].status = dst[i].id >> 63 ? WF_EINVAL : WF_EFULL;
                dst[i].id &= ~(3ull << 62);
            } else if ((size_t)i < w->ship.dec_cap && w->ship.fail[i] != WF_OK) {
                batch.tasks[i].status = w->ship.fail[i];
            }
        }
        wf_frame_transfer_done td = {.transfer_id = batch.iteration, .rank = wf_world_rank(w->world)};
        int dst_rank = -1;
        if (done.status != WF_OK) /* nothing to ship: only give the scratch blocks back */
            for (int i = 0; i < batch.n_tasks; i++)
                if (is_pd_task(w, &batch.tasks[i]) && batch.tasks[i].status == WF_OK)
                    batch.tasks[i].status = done.status;
        pd_finish(w, &batch, dst, done.status == WF_OK, &td.bytes, &td.elapsed_ns, &dst_rank);
        free(dst);
        td.status = WF_OK;
        for (int i = 0; i < batch.n_tasks; i++)
            if (batch.tasks[i].status != WF_OK) td.status = batch.tasks[i].status;
        snprintf(td.message, sizeof td.message, "to rank %d %s", dst_rank, w->last_codec);
        /* The coordinator's link-bandwidth estimate; a lost report only costs a sample. */
        if (td.bytes > 0) WF_LINK_SEND(w->world, &w->link, wf_frame_encode_transfer_done, &td, err, sizeof err);
    }
    if (done.status != WF_OK)
        snprintf(done.message, sizeof done.message, "worker rank %d: %s", wf_world_rank(w->world), msg);
    w->batches++;
    if (done.status == WF_OK) {
        if (batch.n_tasks > w->results_cap) {
            free(w->results);
            w->results_cap = 0;
            if (!(w->results = malloc((size_t)batch.n_tasks * sizeof *w->results))) return WF_ENOMEM;
            w->results_cap = batch.n_tasks;
        }
        wf_frame_task_event ev;
        wf_frame_task_event_from_batch(&batch, w->results, NULL, &ev);
        st = WF_LINK_SEND(w->world, &w->link, wf_frame_encode_task_event, &ev, err, sizeof err);
        if (st != WF_OK) return st;
    }
    return WF_LINK_SEND(w->world, &w->link, wf_frame_encode_batch_done, &done, err, sizeof err);
}

/* Serves frames until SHUTDOWN or rank 0 is gone. Returns the exit status. */
static wf_status handle_vmodel(worker *w, const wf_frame_view *f);

static int serve(worker *w) {
    const wf_worker_params *p = w->p;
    uint64_t last_heard = wf_clock_now_ns(), last_sent = 0;
    if (wf_link_post(w->world, &w->link) != WF_OK) return 1;
    for (;;) {
        uint64_t now = wf_clock_now_ns();
        if (now - last_sent >= (uint64_t)p->heartbeat_ms * 1000000ull) {
            if (send_heartbeat(w) != WF_OK) {
                WF_LOG_WARN("worker", NULL, "rank %d: rank 0 unreachable (%s): exiting",
                            wf_world_rank(w->world), wf_world_error(w->world));
                return 0;
            }
            last_sent = now;
        }
        /* Compressed KV from prefill workers: its slices taken off the wire, decoded by the
         * decoder thread, answered (the sender waits for the ACK). */
        wf_kv_xfer_poll(w->xfer, w->world, &w->kv);
        if (wf_world_test(w->world, &w->link.recv, 1) == 0) {
            if (now - last_heard > (uint64_t)p->timeout_ms * 1000000ull) {
                WF_LOG_WARN("worker", NULL, "rank %d: nothing from rank 0 in %d ms: exiting",
                            wf_world_rank(w->world), p->timeout_ms);
                return 0;
            }
            /* KV slices arriving move only while this thread progresses (UCX over TCP); the
             * decoder thread's slices wake it through done_fd. */
            wait_next(w, wf_kv_xfer_receiving(w->xfer), p->heartbeat_ms);
            continue;
        }
        wf_frame_view f;
        char err[256];
        wf_status st = wf_link_open(&w->link, &f, err, sizeof err);
        if (st == WF_EPEER || st == WF_ETIMEDOUT) {
            WF_LOG_INFO("worker", NULL, "rank %d: rank 0 is gone (%s): exiting", wf_world_rank(w->world),
                        wf_world_error(w->world));
            return 0;
        }
        last_heard = wf_clock_now_ns();
        if (st != WF_OK) {
            WF_LOG_ERROR("worker", NULL, "rank %d: dropped a bad frame: %s", wf_world_rank(w->world), err);
        } else if (f.hdr.type == WF_FRAME_TASK_DISPATCH) {
            /* The receive buffer holds the frame while it runs; the next one is posted after. */
            if (run_dispatch(w, &f) != WF_OK) {
                WF_LOG_WARN("worker", NULL, "rank %d: cannot answer rank 0 (%s): exiting",
                            wf_world_rank(w->world), wf_world_error(w->world));
                return 0;
            }
            /* Rank 0 sends nothing while a batch runs (pool.c: a send to a busy worker blocks
             * it): its silence counts from the answer. */
            last_sent = last_heard = wf_clock_now_ns();
        } else if (f.hdr.type == WF_FRAME_VMODEL) {
            wf_status vs = handle_vmodel(w, &f);
            if (vs == WF_EPROTO) {
                WF_LOG_ERROR("worker", NULL, "rank %d: dropped a bad vmodel frame",
                             wf_world_rank(w->world));
            } else if (vs != WF_OK) {
                WF_LOG_WARN("worker", NULL, "rank %d: cannot answer rank 0 (%s): exiting",
                            wf_world_rank(w->world), wf_world_error(w->world));
                return 0;
            }
            last_sent = last_heard = wf_clock_now_ns();
        } else if (f.hdr.type == WF_FRAME_SHUTDOWN) {
            WF_LOG_INFO("worker", NULL, "rank %d: shutdown after %llu batches", wf_world_rank(w->world),
                        (unsigned long long)w->batches);
            /* Nothing is in flight any more (every batch was answered) and every rank is
             * leaving: the coordinator, which no longer progresses the world while it waits
             * for us, and the other workers, some gone already. A graceful close would spin
             * for each out to UCX's time-out (over TCP: workers with a DiT run without CMA),
             * past the coordinator's wait, which then kills us. */
            for (int r = 0; r < wf_world_size(w->world); r++)
                if (r != wf_world_rank(w->world)) wf_world_peer_gone(w->world, r);
            return 0;
        }
        /* HEARTBEAT: last_heard is enough. CANCEL: batches run whole, nothing is queued here. */
        if (wf_link_post(w->world, &w->link) != WF_OK) return 0;
    }
}

/* Loads v's adapters into this engine and binds them to num (the coordinator's number). err
 * says what failed (the caller names the virtual model). */
static wf_status vm_add(worker *w, uint32_t num, const wf_vmodel_spec *v, char *err, size_t errlen) {
    for (int i = 0; i < w->n_vms; i++)
        if (w->vms[i].num == num)
            return wf_status_errorf(err, errlen, WF_EINVAL, "number %u is bound already",
                                    (unsigned)num);
    if (w->n_vms == w->cap_vms) {
        int cap = w->cap_vms ? 2 * w->cap_vms : 8;
        void *q = realloc(w->vms, (size_t)cap * sizeof *w->vms);
        if (!q) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
        w->vms = q;
        w->cap_vms = cap;
    }
    struct wvm e = {.num = num};
    wf_lora_use uses[WF_VMODEL_MAX_ADAPTERS];
    wf_status st = WF_OK;
    for (int k = 0; k < v->n_adapters && st == WF_OK; k++) {
        char e2[400];
        st = wf_engine_lora_load(w->engine, v->paths[k], &e.l[k], e2, sizeof e2);
        if (st != WF_OK) {
            wf_errorf(err, errlen, "adapter %s: %s", v->paths[k], e2);
            break;
        }
        e.n = k + 1;
        uses[k] = (wf_lora_use){e.l[k], v->scales[k]};
    }
    if (st == WF_OK) st = wf_engine_vmodel_bind(w->engine, num, uses, e.n, err, errlen);
    if (st != WF_OK) {
        for (int k = 0; k < e.n; k++) wf_lora_free(e.l[k]);
        return st;
    }
    w->vms[w->n_vms++] = e;
    WF_LOG_INFO("worker", NULL, "virtual model %s (%u): %d adapter(s) bound", v->id,
                (unsigned)num, e.n);
    return WF_OK;
}

/* Unbinds num (no batch runs: batches run on this thread) and frees its adapters. */
static wf_status vm_remove(worker *w, uint32_t num) {
    for (int i = 0; i < w->n_vms; i++) {
        if (w->vms[i].num != num) continue;
        wf_engine_vmodel_unbind(w->engine, num);
        for (int k = 0; k < w->vms[i].n; k++) wf_lora_free(w->vms[i].l[k]);
        w->vms[i] = w->vms[--w->n_vms];
        WF_LOG_INFO("worker", NULL, "virtual model %u removed", (unsigned)num);
        return WF_OK;
    }
    return WF_ENOTFOUND;
}

/* A VMODEL frame: the adapters load here, between batches (the coordinator sends it only to an
 * idle worker and admits the virtual model's requests once every live worker answered OK). */
static wf_status handle_vmodel(worker *w, const wf_frame_view *f) {
    wf_frame_vmodel_ack ack = {0};
    wf_frame_vmodel m;
    char err[400] = "";
    wf_status st = WF_OK;
    bool logged = false;
    size_t need = wf_link_arena_bound(f->hdr.payload_len);
    uint8_t *mem = malloc(need);
    wf_frame_arena arena;
    if (!mem) st = wf_status_errorf(err, sizeof err, WF_ENOMEM, "out of memory");
    if (st == WF_OK) {
        wf_frame_arena_init(&arena, mem, need);
        st = wf_frame_decode_vmodel(f, &arena, &m, err, sizeof err);
    }
    if (st == WF_OK) {
        ack.op = m.op;
        ack.num = m.num;
        if (m.op == WF_FRAME_VMODEL_REMOVE) {
            st = vm_remove(w, m.num);
            if (st != WF_OK) snprintf(err, sizeof err, "virtual model %u is not bound here",
                                      (unsigned)m.num);
        } else {
            wf_vmodel_spec v;
            char e2[300];
            st = wf_vmodel_spec_from_text(m.spec, &v, e2, sizeof e2);
            if (st != WF_OK) snprintf(err, sizeof err, "virtual model declaration: %s", e2);
            else {
                /* a binding of that number left from before (a --vmodel removed while this
                 * process started) is replaced */
                vm_remove(w, m.num);
                st = vm_add(w, m.num, &v, err, sizeof err);
                if ((logged = st != WF_OK))
                    WF_LOG_WARN("worker", NULL, "rank %d: virtual model '%s' (%u): %s",
                                wf_world_rank(w->world), v.id, (unsigned)m.num, err);
                wf_vmodel_spec_free(&v);
            }
        }
    }
    free(mem);
    if (st != WF_OK && ack.num == 0) return WF_EPROTO; /* undecodable: nothing to answer */
    ack.status = st;
    snprintf(ack.message, sizeof ack.message, "%s", st == WF_OK ? "" : err);
    if (st != WF_OK && !logged)
        WF_LOG_WARN("worker", NULL, "rank %d: %s", wf_world_rank(w->world), err);
    char e3[256];
    return WF_LINK_SEND(w->world, &w->link, wf_frame_encode_vmodel_ack, &ack, e3, sizeof e3);
}

/* The coordinator's --vmodel declarations: each one's adapters loaded into this engine and
 * bound to the number the coordinator's tasks carry for it. */
static wf_status bind_vmodels(worker *w, char *err, size_t errlen) {
    const wf_worker_params *p = w->p;
    for (int i = 0; i < p->n_vmodels; i++) {
        wf_vmodel_spec v;
        char e2[400];
        wf_status st = wf_vmodel_spec_from_text(p->vmodels[i], &v, e2, sizeof e2);
        if (st != WF_OK) return wf_status_errorf(err, errlen, st, "--vmodel: %s", e2);
        char e3[400];
        st = vm_add(w, wf_vmodel_spec_num(&v), &v, e3, sizeof e3);
        if (st != WF_OK) wf_errorf(err, errlen, "virtual model '%s': %s", v.id, e3);
        wf_vmodel_spec_free(&v);
        if (st != WF_OK) return st;
    }
    return WF_OK;
}

int wf_worker_main(const wf_worker_params *p) {
    worker w = {.p = p};
    wf_kv_profile_lib lib = {0}; /* freed at out: */
    int rc = 1;
    wf_link_init(&w.link, 0);
    int n_threads = p->n_threads;
    if (p->cores) {
        int n = pin_cores(p->cores);
        if (n < 0) return 1;
        if (n_threads == 0) n_threads = n;
    }
    /* Join first (fast), then load: the coordinator admits a replacement without waiting for
     * its model to load, and learns it is ready from its first heartbeat. */
    wf_world_config wc = wf_world_config_default();
    wc.n_ranks = p->n_ranks;
    wc.rank = p->rank;
    wc.host = p->host;
    wc.port = p->port;
    /* The paged KV store lives in the registered buffer: a prefill rank puts a sequence's blocks
     * straight into a decode rank's store, and addresses them from this size alone. */
    wc.sym_size = (size_t)p->kv_memory_mb << 20;
    wc.join_timeout_ms = p->join_timeout_ms;
    char err[512];
    if (wf_world_create(&wc, &w.world, err, sizeof err) != WF_OK) {
        WF_LOG_ERROR("worker", NULL, "joining the world at %s:%d: %s", p->host, p->port, err);
        return 1;
    }
    int rank = wf_world_rank(w.world);
    /* Started by its coordinator (rank 0 is our parent): a SIGTERM or SIGINT to the whole
     * process group (systemd's stop, Ctrl-C, timeout(1)) must not kill the worker while the
     * coordinator drains in-flight requests; the coordinator ends it (SHUTDOWN), and its
     * exit ends it too. A worker started by hand (--join) keeps the default handlers. */
    if (wf_world_peer_pid(w.world, 0) == (uint32_t)getppid()) {
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
    }
    wf_engine_options eo;
    wf_engine_options_init(&eo);
    eo.model_path = p->model_path;
    eo.n_threads = n_threads;
    eo.max_batch_tokens = p->max_batch_tokens;
    eo.max_seqs = p->max_running;
    if (wf_engine_open(&eo, &w.engine, err, sizeof err) != WF_OK) {
        WF_LOG_ERROR("worker", NULL, "rank %d: %s", rank, err);
        wf_link_send_status(w.world, &w.link, WF_FRAME_ERROR, WF_EIO, err);
        goto out;
    }
    /* The same split as the in-process store (server/daemon.c); the coordinator learns it from
     * the heartbeat and gives this group a split pool whose tasks carry local tables. */
    bool split = p->kv_window_release && p->pd_role == WF_FRAME_ROLE_WORKER;
    wf_kv_geometry geo = split ? wf_engine_kv_geometry_swa(w.engine, WF_DEFAULT_KV_BLOCK_SIZE)
                               : wf_engine_kv_geometry(w.engine, WF_DEFAULT_KV_BLOCK_SIZE);
    wf_status kst = geo.swa_layers
                        ? wf_kv_store_init_swa_in(&w.kv, &geo, wf_world_sym(w.world),
                                                  wf_world_sym_size(w.world),
                                                  wf_kv_swa_blocks_wanted(&geo, p->max_running,
                                                                          p->max_batch_tokens))
                        : wf_kv_store_init_in(&w.kv, &geo, wf_world_sym(w.world), wf_world_sym_size(w.world));
    if (kst != WF_OK || wf_kv_pool_new(w.kv.n_blocks, w.kv.geometry.block_size, true, &w.pd_pool) != WF_OK) {
        snprintf(err, sizeof err, "KV cache of %ld MiB cannot be allocated", p->kv_memory_mb);
        WF_LOG_ERROR("worker", NULL, "rank %d: %s", rank, err);
        wf_link_send_status(w.world, &w.link, WF_FRAME_ERROR, WF_ENOMEM, err);
        goto out;
    }
    w.kv_on = true;
    {
        if (p->kv_profiles)
            codec_pool_open(&w, p->kv_codec_threads > 0 ? p->kv_codec_threads : n_threads, geo.n_layers);
        if (p->kv_profiles && wf_kv_profile_lib_load(p->kv_profiles, &lib, err, sizeof err) != WF_OK) {
            char m[600];
            snprintf(m, sizeof m, "--kv-profiles %s: %s", p->kv_profiles, err);
            WF_LOG_ERROR("worker", NULL, "rank %d: %s", rank, m);
            wf_link_send_status(w.world, &w.link, WF_FRAME_ERROR, WF_EINVAL, m);
            goto out;
        }
        if (lib.n > 0 && (lib.n_layers != geo.n_layers || lib.n_kv_heads != geo.n_kv_heads ||
                          lib.head_dim != geo.head_dim)) {
            /* wf_kv_xfer_new names the mismatch */
        } else if (measure_codecs(&w, &lib, err, sizeof err) != WF_OK) {
            char m[600];
            snprintf(m, sizeof m, "measuring the KV codec profiles: %s", err);
            WF_LOG_ERROR("worker", NULL, "rank %d: %s", rank, m);
            wf_link_send_status(w.world, &w.link, WF_FRAME_ERROR, WF_EINVAL, m);
            goto out;
        } else {
            for (int i = 0; i < lib.n; i++)
                WF_LOG_INFO("worker", NULL, "rank %d: KV codec %s: encode %.3f GB/s, decode %.3f GB/s "
                            "(%d threads), CR %.2f, B* %.2f Gbps", rank, lib.items[i].profile.name,
                            lib.items[i].enc_gbps,
                            lib.items[i].dec_gbps, w.codec_pool ? wf_threadpool_size(w.codec_pool) : 1,
                            lib.items[i].cr,
                            wf_kv_profile_b_star_pipelined_gbps(&lib.items[i], wf_kv_xfer_slices(geo.n_layers)));
        }
        wf_kv_xfer_options xo;
        wf_kv_xfer_options_init(&xo);
        /* One descriptor wakes this worker's loops: a batch done, a layer stored, a KV slice
         * encoded or decoded. */
        if (!w.done_fd_on && (w.done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) >= 0) w.done_fd_on = true;
        if (w.done_fd_on) xo.wake_fd = w.done_fd;
        /* A prefill worker that ships slices as it computes them sends one per eighth of its
         * prefill: the decode side trusts a live sender as long as it trusts rank 0's silence. */
        xo.slice_wait_ms = p->timeout_ms;
        xo.force_profile = p->kv_codec;
        xo.default_accuracy = p->kv_accuracy;
        if (w.codec_pool) {
            xo.par_run = codec_pool_run;
            xo.par_pool = w.codec_pool;
            xo.par_workers = wf_threadpool_size(w.codec_pool);
        }
        wf_status xs = wf_kv_xfer_new(&geo, p->max_batch_tokens, p->kv_profiles ? &lib : NULL, &xo,
                                      &w.xfer, err, sizeof err);
        if (xs != WF_OK) {
            WF_LOG_ERROR("worker", NULL, "rank %d: %s", rank, err);
            wf_link_send_status(w.world, &w.link, WF_FRAME_ERROR, xs, err);
            goto out;
        }
        wf_kv_xfer_post(w.xfer, w.world);
    }
    if (bind_vmodels(&w, err, sizeof err) != WF_OK) {
        WF_LOG_ERROR("worker", NULL, "rank %d: %s", rank, err);
        wf_link_send_status(w.world, &w.link, WF_FRAME_ERROR, WF_EINVAL, err);
        goto out;
    }
    w.exec = wf_engine_executor(w.engine, &w.kv);
    wf_status ds = wf_worker_dit_open(&w.dit, p, n_threads, w.world, &w.link, err, sizeof err);
    w.dit.host = &w;
    w.dit.heartbeat = dit_heartbeat;
    w.dit.run_local = dit_run_local;
    if (ds != WF_OK) {
        WF_LOG_ERROR("worker", NULL, "rank %d: %s", rank, err);
        wf_link_send_status(w.world, &w.link, WF_FRAME_ERROR, ds, err);
        goto out;
    }
    WF_LOG_INFO("worker", NULL, "rank %d (pid %d): %d threads%s%s, KV %d blocks (%d of the "
                "sliding-window layers): ready", rank, (int)getpid(), n_threads,
                p->cores ? " on CPUs " : "", p->cores ? p->cores : "", w.kv.n_blocks, w.kv.n_swa_blocks);
    if (send_info(&w, &lib) != WF_OK) {
        WF_LOG_WARN("worker", NULL, "rank %d: rank 0 unreachable (%s): exiting", rank, wf_world_error(w.world));
        rc = 0;
        goto out;
    }
    rc = serve(&w);
out:
    wf_kv_profile_lib_free(&lib);
    wf_link_free(w.world, &w.link);
    free(w.arena_mem);
    wf_seq_store_free(&w.hist);
    if (w.done_fd_on) close(w.done_fd);
    free(w.results);
    wf_kv_pool_free(w.pd_pool);
    free(w.pd_seqs);
    free(w.pd_ops);
    free(w.ship.dec);
    free(w.ship.fail);
    free(w.ship.layer_op0);
    wf_kv_xfer_free(w.xfer, w.world);
    wf_threadpool_free(w.codec_pool);
    wf_worker_dit_close(&w.dit);
    wf_engine_free(w.engine);
    for (int i = 0; i < w.n_vms; i++)
        for (int k = 0; k < w.vms[i].n; k++) wf_lora_free(w.vms[i].l[k]);
    free(w.vms);
    if (w.kv_on) wf_kv_store_free(&w.kv);
    wf_world_destroy(w.world);
    return rc;
}
