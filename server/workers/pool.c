/* The coordinator's worker pool: see pool.h. */
#define _GNU_SOURCE
#include "server/workers/pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/world/world.h"
#include "kv/kv_controller.h"
#include "proto/base/clock.h"
#include "proto/base/log.h"
#include "proto/frame_artifact.h"
#include "proto/frame_control.h"
#include "proto/frame_task.h"
#include "sched/defaults.h"
#include "server/workers/kv_xfer.h"
#include "server/workers/pool_impl.h"
#include "server/workers/world_link.h"

void wf_workers_params_init(wf_workers_params *p) {
    memset(p, 0, sizeof *p);
    p->n_spawn = -1;
    p->host = "127.0.0.1";
    p->kv_memory_mb = WF_DEFAULT_KV_MEMORY_MB;
    p->max_batch_tokens = WF_DEFAULT_MAX_BATCH_TOKENS;
    p->max_running = WF_DEFAULT_MAX_RUNNING;
    p->log_level = "info";
    p->heartbeat_ms = 500;
    p->timeout_ms = 30000;
    p->join_timeout_ms = 120000;
}

void wf_workers_default_cores(int n, int i, char *out, size_t cap) {
    cpu_set_t set;
    int cpus[CPU_SETSIZE], n_cpus = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) cpus[n_cpus++] = c;
    }
    if (n_cpus == 0) cpus[n_cpus++] = 0;
    if (n >= n_cpus) { /* more workers than CPUs: one each, wrapping around */
        snprintf(out, cap, "%d", cpus[i % n_cpus]);
        return;
    }
    int per = n_cpus / n, first = i * per, last = i == n - 1 ? n_cpus - 1 : first + per - 1;
    size_t len = 0;
    out[0] = '\0';
    for (int c = first; c <= last && len + 8 < cap; c++)
        len += (size_t)snprintf(out + len, cap - len, "%s%d", c > first ? "," : "", cpus[c]);
}

void wf__pool_wake(wf_workers *ws) {
    uint64_t one = 1;
    ssize_t r = write(ws->wake_fd, &one, sizeof one);
    (void)r;
}

/* ---- the executor (scheduler thread) ------------------------------------------------------- */

static wf_status queue_batch(wk *k, const queued *q) {
    wf_workers *ws = k->ws;
    pthread_mutex_lock(&ws->lock);
    wf_status st = WF_OK;
    if (k->state == WF_WORKER_DOWN || ws->stopping) st = WF_ECLOSED;
    else if (k->n_pending + k->n_flight >= MAX_QUEUED) st = WF_EBUSY;
    else k->pending[k->n_pending++] = *q;
    pthread_mutex_unlock(&ws->lock);
    if (st == WF_OK) wf__pool_wake(ws);
    return st;
}

static wf_status exec_dispatch(void *ctx, wf_task_batch *batch, wf_executor_done_fn done, void *user) {
    return queue_batch(ctx, &(queued){.batch = batch, .done = done, .user = user});
}

wf_status wf_workers_dispatch_latents(wf_workers *ws, int i, wf_task_batch *batch,
                                      float *const *out, float *const *back, size_t latent_bytes,
                                      wf_executor_done_fn done, void *user) {
    if (i < 0 || i >= ws->n || !ws->dit_path || batch->n_tasks > 255 || latent_bytes == 0)
        return WF_EINVAL;
    for (int j = 0; j < batch->n_tasks; j++)
        if (batch->tasks[j].kind != WF_TASK_DENOISE) return WF_EINVAL;
    return queue_batch(&ws->w[i], &(queued){.batch = batch, .done = done, .user = user,
                                            .lat_out = out, .lat_back = back,
                                            .lat_bytes = latent_bytes});
}

size_t wf_workers_latent_bytes(const wf_task *t, size_t native_bytes) {
    const wf_artifact *a = &t->dit.latent;
    if (a->kind != WF_ARTIFACT_LATENT || a->latent.channels < 1 || a->latent.height < 1 || a->latent.width < 1)
        return native_bytes;
    return (size_t)a->latent.channels * (size_t)a->latent.height * (size_t)a->latent.width * sizeof(float);
}

uint32_t wf_workers_incarnation(wf_workers *ws, int i) {
    pthread_mutex_lock(&ws->lock);
    uint32_t inc = i >= 0 && i < ws->n ? ws->w[i].pub.incarnation : 0;
    pthread_mutex_unlock(&ws->lock);
    return inc;
}

bool wf_workers_live(wf_workers *ws, int i) {
    pthread_mutex_lock(&ws->lock);
    bool live = i >= 0 && i < ws->n && ws->w[i].state == WF_WORKER_LIVE && !ws->stopping;
    pthread_mutex_unlock(&ws->lock);
    return live;
}

/* The latents of a DiT batch, one tagged message each, to (send: out[j] set) or from
 * (receive: back[j] set and the task succeeded, as its TASK_EVENT said; the worker applies the
 * same rule) the worker. Comm thread. */
static wf_status move_latents(wf_workers *ws, wk *k, const queued *q, bool send) {
    int n = q->wire.n_tasks, m = 0;
    wf_world_op ops[256];
    for (int j = 0; j < n; j++) {
        float *buf = send ? (q->lat_out ? q->lat_out[j] : NULL) : (q->lat_back ? q->lat_back[j] : NULL);
        if (!buf || (!send && q->wire.tasks[j].status != WF_OK)) continue;
        ops[m++] = (wf_world_op){.kind = send ? WF_WORLD_SEND : WF_WORLD_RECV, .peer = k->rank,
                                 .tag = WF_WORKERS_LATENT_TAG(q->wire.iteration, j),
                                 .buf = buf, .len = wf_workers_latent_bytes(&q->wire.tasks[j], q->lat_bytes)};
    }
    if (m == 0) return WF_OK;
    wf_status st = wf_world_run(ws->world, ops, m);
    for (int j = 0; st == WF_OK && !send && j < m; j++)
        if (ops[j].received != ops[j].len) st = WF_EPROTO;
    return st;
}

static const wf_executor_ops remote_ops = {.name = "worker", .dispatch = exec_dispatch};

/* ---- the prefill/decode executor (scheduler thread; completions on the comm thread) --------- */

/* One batch of a decode worker's group: its final prompt chunks (PREFILL with samples) run on a
 * prefill worker, which ships their KV into this decode worker's blocks before it answers;
 * everything else (decodes, recomputes after preemption) runs on the decode worker. The batch
 * completes when both parts did. */
typedef struct pd_job {
    wf_workers *ws;
    wk *dec, *pre;
    wf_task_batch *batch;
    wf_executor_done_fn done;
    void *user;
    wf_task_batch pb, db;            /* the two parts */
    int *pidx, *didx;                /* their tasks' indices in batch */
    int left;                        /* parts still running (ws->lock) */
    int attempts;                    /* prefill dispatches */
    uint32_t dec_gen;                /* dec->gen at dispatch: the process the KV goes to */
    wf_status dstatus;
    char dmsg[160];
} pd_job;

static bool is_pd_prefill(const wf_task *t) {
    return t->kind == WF_TASK_PREFILL && t->llm.n_samples > 0;
}

/* Prompt tokens of the batch's prompts that k's prefix cache holds (as predicted). Lock held. */
static int pfx_match(const wk *k, const wf_task_batch *b) {
    int m = 0;
    for (int i = 0; k->pfx && i < b->n_tasks; i++) {
        const wf_task *t = &b->tasks[i];
        /* As the worker's pd_cacheable: a virtual model's prompts share nothing. */
        if (t->vmodel == 0) m += wf_kv_pool_cached_prefix(k->pfx, 0, t->llm.tokens, t->llm.pos + t->llm.n_tokens);
    }
    return m;
}

/* What k's worker does with the batch's prompts (worker.c pd_prepare, then pd_release): each
 * takes its cached prefix and new blocks, then all are committed and released. Lock held. */
static void pfx_predict(wk *k, const wf_task_batch *b) {
    if (!k->pfx) return;
    wf_kv_seq *q = calloc((size_t)b->n_tasks, sizeof *q);
    if (!q) return;
    int bs = wf_kv_pool_block_size(k->pfx);
    bool *ok = calloc((size_t)b->n_tasks, sizeof *ok);
    for (int i = 0; ok && i < b->n_tasks; i++) {
        const wf_task *t = &b->tasks[i];
        int total = t->llm.pos + t->llm.n_tokens;
        if (wf_kv_seq_init(&q[i], (total + bs - 1) / bs) != WF_OK) continue;
        if (t->vmodel == 0) wf_kv_seq_match_prefix(k->pfx, &q[i], t->llm.tokens, total);
        ok[i] = wf_kv_seq_reserve(k->pfx, &q[i], total, NULL) == WF_OK;
    }
    for (int i = 0; i < b->n_tasks; i++) {
        const wf_task *t = &b->tasks[i];
        if (ok && ok[i] && t->vmodel == 0)
            wf_kv_seq_commit(k->pfx, &q[i], t->llm.tokens, t->llm.pos + t->llm.n_tokens);
        wf_kv_seq_release(k->pfx, &q[i]);
        wf_kv_seq_free(&q[i]);
    }
    free(ok);
    free(q);
}

/* The live prefill worker for the batch's prompts (NULL: none), as wf_lanes_route picks a
 * group: among those not much busier than the least busy one, the one whose prefix cache holds
 * the most of the prompts, then the least busy; its predicted cache takes the prompts. Lock
 * held. */
static wk *pick_prefill(wf_workers *ws, const wk *avoid, const wf_task_batch *b) {
    int min_load = -1;
    for (int j = 0; j < ws->n; j++) {
        const wk *k = &ws->w[j];
        if (!k->prefill || k->state != WF_WORKER_LIVE || k == avoid) continue;
        int load = k->n_pending + k->n_flight;
        if (load < MAX_QUEUED && (min_load < 0 || load < min_load)) min_load = load;
    }
    if (min_load < 0) return NULL;
    wk *best = NULL;
    int best_match = -1, best_load = 0;
    /* Ties go round: with one decode group every prefill worker is idle at each pick. */
    int start = (int)(ws->prefill_rr++ % (unsigned)ws->n);
    for (int j = 0; j < ws->n; j++) {
        wk *k = &ws->w[(start + j) % ws->n];
        if (!k->prefill || k->state != WF_WORKER_LIVE || k == avoid) continue;
        int load = k->n_pending + k->n_flight;
        if (load >= MAX_QUEUED || load > 2 * min_load + 2) continue; /* affinity must not pile up work */
        int match = pfx_match(k, b);
        if (!best || match > best_match || (match == best_match && load < best_load)) {
            best = k;
            best_match = match;
            best_load = load;
        }
    }
    if (best) pfx_predict(best, b);
    return best;
}

static void pd_finish_part(pd_job *j) {
    wf_workers *ws = j->ws;
    pthread_mutex_lock(&ws->lock);
    bool last = --j->left == 0;
    pthread_mutex_unlock(&ws->lock);
    if (!last) return;
    wf_task_batch *b = j->batch;
    wf_executor_done_fn done = j->done;
    void *user = j->user;
    wf_status st = j->dstatus;
    char msg[160];
    snprintf(msg, sizeof msg, "%s", j->dmsg);
    /* KV that could not reach a decode worker that is now down: the batch is the group's
     * loss (its requests move or fail naming the worker), not a prefill error. */
    pthread_mutex_lock(&ws->lock);
    /* A replacement may already serve the slot (a new group): the process this batch's KV
     * was for is gone all the same. */
    bool dec_down = j->dec->state == WF_WORKER_DOWN || j->dec->gen != j->dec_gen;
    if (dec_down && st == WF_OK) {
        st = WF_ECLOSED;
        snprintf(msg, sizeof msg, "worker rank %d is down: %.120s", j->dec->rank, j->dec->last_error);
    }
    pthread_mutex_unlock(&ws->lock);
    free(j);
    done(user, b, st, st == WF_OK ? NULL : msg);
}

static void pd_copy_back(wf_task_batch *b, const wf_task_batch *part, const int *idx) {
    for (int i = 0; i < part->n_tasks; i++) {
        wf_task *t = &b->tasks[idx[i]];
        t->status = part->tasks[i].status;
        t->t_begin_ns = part->tasks[i].t_begin_ns;
        t->t_end_ns = part->tasks[i].t_end_ns;
    }
}

static void pd_decode_done(void *user, wf_task_batch *part, wf_status st, const char *msg) {
    pd_job *j = user;
    pd_copy_back(j->batch, part, j->didx);
    j->dstatus = st;
    snprintf(j->dmsg, sizeof j->dmsg, "%s", msg ? msg : "");
    pd_finish_part(j);
}

static void pd_prefill_done(void *user, wf_task_batch *part, wf_status st, const char *msg);

/* Sends the prefill part to a prefill worker; WF_ECLOSED when none is live. */
static wf_status pd_send_prefill(pd_job *j, wk *avoid) {
    wf_workers *ws = j->ws;
    pthread_mutex_lock(&ws->lock);
    wk *pre = pick_prefill(ws, avoid, &j->pb);
    pthread_mutex_unlock(&ws->lock);
    if (!pre) return WF_ECLOSED;
    j->pre = pre;
    j->attempts++;
    j->pb.group = (wf_group){.n_ranks = 1, .ranks = {pre->rank}};
    return exec_dispatch(pre, &j->pb, pd_prefill_done, j);
}

static void worker_down(wf_workers *ws, wk *k, const char *why);

static void pd_prefill_done(void *user, wf_task_batch *part, wf_status st, const char *msg) {
    pd_job *j = user;
    bool lost = false;
    for (int i = 0; st == WF_OK && i < part->n_tasks; i++) lost |= part->tasks[i].status == WF_EPEER;
    pthread_mutex_lock(&j->ws->lock);
    /* Only the process the KV was for: not a replacement that joined meanwhile (a put to a
     * dead peer can take a while to fail). */
    lost &= j->dec->gen == j->dec_gen;
    pthread_mutex_unlock(&j->ws->lock);
    if (lost) {
        /* The prefill worker's world saw the decode worker fail while it put the KV there:
         * take it down now (its batches end, its group goes), so that these requests end as
         * the group's loss, naming the worker, rather than as prefill errors. Comm thread. */
        worker_down(j->ws, j->dec, "the KV transfer to it failed (peer failed)");
    }
    if (st == WF_ECLOSED && j->attempts < 3) {
        /* The prefill worker went away mid-prefill: nothing of it reached the decode rank and
         * the samples were not drawn, so prefill the same prompts on another one. */
        WF_LOG_WARN("workers", NULL, "prefill on rank %d failed (%s): re-prefilling on another",
                    j->pre->rank, msg ? msg : wf_status_str(st));
        if (pd_send_prefill(j, j->pre) == WF_OK) return;
    }
    if (st != WF_OK) {
        /* Only these requests fail: the decode group is fine. */
        for (int i = 0; i < part->n_tasks; i++)
            if (part->tasks[i].status == WF_OK) part->tasks[i].status = st;
        WF_LOG_WARN("workers", NULL, "prefill of %d prompt(s) for rank %d failed: %s", part->n_tasks,
                    j->dec->rank, msg ? msg : wf_status_str(st));
    }
    pd_copy_back(j->batch, part, j->pidx);
    pd_finish_part(j);
}

static wf_status pd_dispatch(void *ctx, wf_task_batch *batch, wf_executor_done_fn done, void *user) {
    wk *k = ctx;
    wf_workers *ws = k->ws;
    int n_p = 0;
    for (int i = 0; i < batch->n_tasks; i++) n_p += is_pd_prefill(&batch->tasks[i]);
    if (n_p == 0) return exec_dispatch(ctx, batch, done, user);
    pthread_mutex_lock(&ws->lock);
    bool down = k->state != WF_WORKER_LIVE || ws->stopping;
    bool busy = k->n_pending + k->n_flight >= MAX_QUEUED;
    uint32_t gen = k->gen;
    pthread_mutex_unlock(&ws->lock);
    if (down) return WF_ECLOSED;
    if (busy) return WF_EBUSY;
    int n = batch->n_tasks;
    pd_job *j = calloc(1, sizeof *j + 2 * (size_t)n * (sizeof(wf_task) + sizeof(int)));
    if (!j) return WF_ENOMEM;
    wf_task *pt = (wf_task *)(j + 1), *dt = pt + n;
    int *pidx = (int *)(dt + n);
    *j = (pd_job){.ws = ws, .dec = k, .batch = batch, .done = done, .user = user,
                  .pidx = pidx, .didx = pidx + n, .dec_gen = gen};
    j->pb = (wf_task_batch){.tasks = pt, .iteration = batch->iteration};
    j->db = (wf_task_batch){.tasks = dt, .group = batch->group, .iteration = batch->iteration};
    for (int i = 0; i < n; i++) {
        const wf_task *t = &batch->tasks[i];
        if (is_pd_prefill(t)) {
            /* The KV artifact is held by the decode rank: the prefill worker computes it on
             * scratch blocks and puts them into these blocks of the decode rank's store. */
            pt[j->pb.n_tasks] = *t;
            pt[j->pb.n_tasks].llm.kv.placement =
                (wf_placement){.kind = WF_PLACEMENT_OWNER, .holders = {.n_ranks = 1, .ranks = {k->rank}}};
            j->pidx[j->pb.n_tasks++] = i;
        } else {
            dt[j->db.n_tasks] = *t;
            j->didx[j->db.n_tasks++] = i;
        }
    }
    j->left = j->db.n_tasks > 0 ? 2 : 1;
    wf_status st = WF_OK;
    if (j->db.n_tasks > 0 && (st = exec_dispatch(k, &j->db, pd_decode_done, j)) != WF_OK) {
        free(j);
        return st;
    }
    if (pd_send_prefill(j, NULL) != WF_OK) {
        /* No prefill worker is live (a replacement is on its way): these prompts fail alone. */
        for (int i = 0; i < j->pb.n_tasks; i++) pt[i].status = WF_ECLOSED;
        WF_LOG_WARN("workers", NULL, "no prefill worker is live: %d prompt(s) fail", j->pb.n_tasks);
        pd_copy_back(batch, &j->pb, j->pidx);
        pd_finish_part(j);
    }
    return WF_OK;
}

static const wf_executor_ops pd_ops = {.name = "pd-worker", .dispatch = pd_dispatch};

/* ---- worker lifecycle (comm thread, or open before the thread starts) ---------------------- */

static wf_status spawn(wf_workers *ws, wk *k, bool replacement) {
    char rank[16], n_ranks[16], port[16], kvmb[32], mbt[16], mr[16], hb[16], to[16], jt[16];
    snprintf(rank, sizeof rank, "%d", replacement ? k->rank : -1);
    snprintf(n_ranks, sizeof n_ranks, "%d", ws->n + 1);
    snprintf(port, sizeof port, "%d", ws->p.port);
    snprintf(kvmb, sizeof kvmb, "%ld", ws->p.kv_memory_mb);
    snprintf(mbt, sizeof mbt, "%d", ws->p.max_batch_tokens);
    snprintf(mr, sizeof mr, "%d", ws->p.max_running);
    snprintf(hb, sizeof hb, "%d", ws->p.heartbeat_ms);
    snprintf(to, sizeof to, "%d", ws->p.timeout_ms);
    snprintf(jt, sizeof jt, "%d", ws->p.join_timeout_ms);
    /* A first start takes any free slot: slots are given in join order, and workers are
     * started in rank order, but only the coordinator's table says who is who. */
    char join[300];
    snprintf(join, sizeof join, "%s:%s", ws->host, port);
    const char *base[] = {ws->exe, "--role", "worker", "--join", join,
                          "--world-size", n_ranks, "--rank", rank, "--worker-cores", k->cores,
                          "--model", ws->model_path, "--kv-memory-mb", kvmb, "--max-batch-tokens",
                          mbt, "--max-running", mr, "--log-level", ws->log_level, "--heartbeat-ms",
                          hb, "--worker-timeout-ms", to, "--join-timeout-ms", jt,
                          /* split KV stores only where the group's geometry is split */
                          ws->p.kv.swa_layers ? "--kv-window-release=true" : "--kv-window-release=false",
                          NULL};
    int argc = 0;
    while (base[argc]) argc++;
    /* the base, 9 optional KV arguments, 6 for a DiT, 2 for a PD role, 2 per virtual model,
     * the NULL */
    /* The lock is held until the fork: argv points at the set's declarations (the child only
     * execs). Those added at run time are sent when it joins. */
    pthread_mutex_lock(&ws->lock);
    char **argv = calloc((size_t)argc + 18 + 2 * (size_t)ws->n_vms, sizeof *argv);
    if (!argv) {
        pthread_mutex_unlock(&ws->lock);
        return WF_ENOMEM;
    }
    memcpy(argv, base, (size_t)argc * sizeof *argv);
    for (int i = 0; i < ws->n_vms; i++) {
        if (!ws->vms[i].argv) continue;
        argv[argc++] = "--vmodel";
        argv[argc++] = ws->vms[i].spec;
    }
    char acc[32];
    if (ws->kv_profiles) {
        argv[argc++] = "--kv-profiles";
        argv[argc++] = ws->kv_profiles;
    }
    if (ws->kv_codec) {
        argv[argc++] = "--kv-codec";
        argv[argc++] = ws->kv_codec;
    }
    char cth[16];
    if (ws->p.kv_codec_threads > 0) {
        snprintf(cth, sizeof cth, "%d", ws->p.kv_codec_threads);
        argv[argc++] = "--kv-codec-threads";
        argv[argc++] = cth;
    }
    if (ws->p.kv_ship_after_prefill) argv[argc++] = "--kv-layer-overlap=false";
    if (ws->p.kv_accuracy > 0) {
        snprintf(acc, sizeof acc, "%.6g", ws->p.kv_accuracy);
        argv[argc++] = "--kv-accuracy";
        argv[argc++] = acc;
    }
    char dmi[16], mpx[24];
    if (ws->dit_path) { /* a second --model: the worker sorts LLM and DiT as weftd does */
        argv[argc++] = "--model";
        argv[argc++] = ws->dit_path;
        if (ws->p.dit_max_items > 0) {
            snprintf(dmi, sizeof dmi, "%d", ws->p.dit_max_items);
            argv[argc++] = "--image-max-batch";
            argv[argc++] = dmi;
        }
        if (ws->p.image_max_pixels > 0) {
            snprintf(mpx, sizeof mpx, "%ld", ws->p.image_max_pixels);
            argv[argc++] = "--image-max-pixels";
            argv[argc++] = mpx;
        }
    }
    if (ws->p.n_prefill > 0 && replacement) {
        /* A replacement fills its slot's role. A first start declares none: slots are dealt in
         * join order, and the undeclared take the places left in rank order (prefill first). */
        argv[argc++] = "--pd-role";
        argv[argc++] = k->prefill ? "prefill" : "decode";
    }
    /* No PR_SET_PDEATHSIG: it fires when the forking *thread* ends (weftd loads on a helper
     * thread). A worker notices rank 0's end itself (world liveness, heartbeats). */
    /* Workers that run DiT chunks over groups of workers exchange rows of latents between
     * themselves, and UCX 1.13's CMA transport (process_vm_readv of the peer's memory)
     * aborts the process when that peer dies during a transfer, instead of failing the
     * operation: a killed member would take the survivor down with it. Unless the operator
     * chose UCX_TLS, such workers run without CMA (shared memory copies instead). The
     * environment is built here: between fork and exec only async-signal-safe calls. */
    extern char **environ;
    char **envp = environ, **own = NULL;
    if (ws->dit_path && !getenv("UCX_TLS")) {
        size_t n_env = 0;
        while (environ[n_env]) n_env++;
        if ((own = malloc((n_env + 2) * sizeof *own))) {
            memcpy(own, environ, n_env * sizeof *own);
            own[n_env] = "UCX_TLS=^cma";
            own[n_env + 1] = NULL;
            envp = own;
        }
    }
    pid_t pid = fork();
    if (pid == 0) { /* the child does not touch the lock: it execs */
        execve(ws->exe, argv, envp);
        fprintf(stderr, "weftd: cannot start worker %s: %s\n", ws->exe, strerror(errno));
        _exit(127);
    }
    pthread_mutex_unlock(&ws->lock);
    if (pid < 0) {
        free(own);
        free(argv);
        return WF_EIO;
    }
    free(argv);
    free(own);
    k->pid = pid;
    WF_LOG_INFO("workers", NULL, "started worker %s%d (pid %d) on CPUs %s",
                replacement ? "rank " : "#", replacement ? k->rank : k->index + 1, (int)pid, k->cores);
    return WF_OK;
}

/* Completes every batch the worker holds with WF_ECLOSED (lock held by the caller: no; the done
 * callbacks run without the lock, they only push to the scheduler's inbox). */
static void fail_batches(wf_workers *ws, wk *k, const char *msg) {
    queued q[2 * MAX_QUEUED];
    int n = 0;
    pthread_mutex_lock(&ws->lock);
    for (int i = 0; i < k->n_flight; i++) q[n++] = k->flight[i];
    for (int i = 0; i < k->n_pending; i++) q[n++] = k->pending[i];
    k->n_flight = k->n_pending = 0;
    pthread_mutex_unlock(&ws->lock);
    for (int i = 0; i < n; i++) q[i].done(q[i].user, q[i].batch, WF_ECLOSED, msg);
}

/* A worker started here comes back after a back-off that doubles while it keeps failing and
 * starts over once it has served a minute. */
static void schedule_respawn(wf_workers *ws, wk *k) {
    (void)ws;
    if (!k->spawned_here || k->respawn_at_ns) return;
    uint64_t now = wf_clock_now_ns();
    if (k->live_since_ns && now - k->live_since_ns > MS(60000)) k->backoff_ms = RESPAWN_FIRST_MS;
    k->live_since_ns = 0;
    k->respawn_at_ns = now + MS(k->backoff_ms);
    k->backoff_ms = k->backoff_ms * 2 > RESPAWN_MAX_MS ? RESPAWN_MAX_MS : k->backoff_ms * 2;
}

static void worker_down(wf_workers *ws, wk *k, const char *why) {
    pthread_mutex_lock(&ws->lock);
    if (k->state == WF_WORKER_DOWN) {
        pthread_mutex_unlock(&ws->lock);
        return;
    }
    k->state = WF_WORKER_DOWN;
    int group = k->group;
    k->group = -1;
    wf__pool_vm_forget(ws, k);
    snprintf(k->last_error, sizeof k->last_error, "%s", why);
    pthread_mutex_unlock(&ws->lock);
    char msg[256];
    snprintf(msg, sizeof msg, "worker rank %d is down: %s", k->rank, why);
    WF_LOG_ERROR("workers", NULL, "%s", msg);
    if (k->link.posted) wf_world_cancel(ws->world, &k->link.recv, 1);
    k->link.posted = 0;
    fail_batches(ws, k, msg);
    pthread_mutex_lock(&ws->sched_lock);
    if (group >= 0 && ws->sched) wf_sched_remove_group(ws->sched, group, msg);
    pthread_mutex_unlock(&ws->sched_lock);
    if (k->spawned_here && k->pid > 0) kill(k->pid, SIGKILL); /* stuck rather than dead: make sure */
    schedule_respawn(ws, k);
}

/* A worker's first heartbeat: its KV size is known, it becomes a group. */
static void worker_ready(wf_workers *ws, wk *k, uint32_t kv_blocks) {
    wf_kv_store *kv = &k->kv;
    pthread_mutex_lock(&ws->lock); /* wf_workers_stats reads n_blocks */
    kv->geometry = ws->p.kv;
    kv->n_blocks = (int)kv_blocks;
    /* split as its heartbeat said: a worker started by hand may keep one table */
    kv->n_swa_blocks = (int)k->swa_blocks;
    if (!k->swa_blocks) {
        kv->geometry.swa_layers = 0;
        kv->geometry.swa_window = 0;
    }
    kv->elem_bytes = ws->p.kv.dtype == WF_KV_DTYPE_F32 ? 4 : 2;
    kv->row_elems = (size_t)ws->p.kv.n_kv_heads * (size_t)ws->p.kv.head_dim;
    kv->block_bytes = (size_t)ws->p.kv.block_size * kv->row_elems * kv->elem_bytes;
    kv->k = kv->v = NULL;
    /* A new process: an empty cache (its worker's pool has the store's blocks, unsplit). */
    wf_kv_pool_free(k->pfx);
    k->pfx = NULL;
    if (k->prefill && wf_kv_pool_new((int)kv_blocks, ws->p.kv.block_size, true, &k->pfx) != WF_OK)
        k->pfx = NULL; /* no prediction: least busy only */
    pthread_mutex_unlock(&ws->lock);
    int group = -1;
    pthread_mutex_lock(&ws->sched_lock);
    bool attached = ws->sched != NULL;
    if (attached && !k->prefill) {
        wf_status st = wf_sched_add_group(ws->sched, kv, wf_workers_executor(ws, k->index), k->rank,
                                          &group);
        if (st != WF_OK) {
            WF_LOG_ERROR("workers", NULL, "worker rank %d: cannot add its group: %s", k->rank,
                         wf_status_str(st));
            group = -1;
        }
    }
    pthread_mutex_unlock(&ws->sched_lock);
    pthread_mutex_lock(&ws->lock);
    k->state = WF_WORKER_LIVE;
    k->group = group;
    pthread_mutex_unlock(&ws->lock);
    k->live_since_ns = wf_clock_now_ns();
    if (attached) WF_LOG_INFO("workers", NULL, "worker rank %d is back as group %d", k->rank, group);
}

/* ---- frames from a worker ------------------------------------------------------------------ */

static const char *slot_role(const wf_workers *ws, const wk *k) {
    return ws->p.n_prefill == 0 ? "worker" : k->prefill ? "prefill" : "decode";
}

/* Whether the role a worker declared (--pd-role) does not fit its slot; why says so. */
static bool role_mismatch(const wf_workers *ws, const wk *k, char *why, size_t cap) {
    wf_frame_role want = ws->p.n_prefill == 0 ? WF_FRAME_ROLE_WORKER
                         : k->prefill         ? WF_FRAME_ROLE_PREFILL
                                              : WF_FRAME_ROLE_DECODE;
    if (k->declared == WF_FRAME_ROLE_WORKER || k->declared == want) return false;
    if (ws->p.n_prefill == 0)
        snprintf(why, cap, "it declared --pd-role %s, but this coordinator has no prefill/decode pools "
                 "(--prefill-workers, --decode-workers)", wf_frame_role_str(k->declared));
    else
        snprintf(why, cap, "it declared the role %s, but rank %d is a %s slot", wf_frame_role_str(k->declared),
                 k->rank, slot_role(ws, k));
    return true;
}

/* Once every worker joined and said what it is: workers that declared a role (--pd-role, a
 * joined worker; the coordinator's own are started with theirs) serve in that pool, the rest
 * fill the places left, in rank order. The pool sizes are the coordinator's. */
static wf_status assign_roles(wf_workers *ws, char *err, size_t errlen) {
    int n_pre = 0, n_dec = 0;
    for (int i = 0; i < ws->n; i++) {
        wk *k = &ws->w[i];
        if (k->declared != WF_FRAME_ROLE_WORKER && ws->p.n_prefill == 0) {
            char why[200];
            role_mismatch(ws, k, why, sizeof why);
            return wf_status_errorf(err, errlen, WF_EINVAL, "worker rank %d: %s", k->rank, why);
        }
        if (k->declared == WF_FRAME_ROLE_DIT)
            return wf_status_errorf(err, errlen, WF_EINVAL, "worker rank %d declared the role dit: "
                                    "prefill/decode pools take prefill or decode workers", k->rank);
        n_pre += k->declared == WF_FRAME_ROLE_PREFILL;
        n_dec += k->declared == WF_FRAME_ROLE_DECODE;
    }
    if (ws->p.n_prefill == 0) return WF_OK;
    if (n_pre > ws->p.n_prefill || n_dec > ws->n - ws->p.n_prefill)
        return wf_status_errorf(err, errlen, WF_EINVAL,
                                "%d worker(s) declared prefill and %d decode, but the pools are "
                                "--prefill-workers %d and --decode-workers %d", n_pre, n_dec,
                                ws->p.n_prefill, ws->n - ws->p.n_prefill);
    int pre_left = ws->p.n_prefill - n_pre;
    pthread_mutex_lock(&ws->lock);
    for (int i = 0; i < ws->n; i++) {
        wk *k = &ws->w[i];
        if (k->declared == WF_FRAME_ROLE_WORKER) k->prefill = pre_left-- > 0;
        else k->prefill = k->declared == WF_FRAME_ROLE_PREFILL;
    }
    pthread_mutex_unlock(&ws->lock);
    return WF_OK;
}

static wf_status ensure_arena(wf_workers *ws, size_t payload_len) {
    size_t need = wf_link_arena_bound(payload_len);
    if (need <= ws->arena_cap) return WF_OK;
    free(ws->arena_mem);
    ws->arena_cap = 0;
    if (!(ws->arena_mem = malloc(need))) return WF_ENOMEM;
    ws->arena_cap = need;
    return WF_OK;
}

static void handle_frame(wf_workers *ws, wk *k, const wf_frame_view *f) {
    char err[WF_FRAME_TASK_MESSAGE_MAX] = "";
    wf_frame_arena arena;
    switch (f->hdr.type) {
    case WF_FRAME_HEARTBEAT: {
        wf_frame_heartbeat hb;
        if (wf_frame_decode_heartbeat(f, &hb, err, sizeof err) != WF_OK) break;
        pthread_mutex_lock(&ws->lock);
        k->kv_used = hb.kv_blocks_used;
        k->prefix_queries = hb.prefix_queries;
        k->prefix_hits = hb.prefix_hits;
        k->kv_layers_early = hb.kv_layers_early;
        pthread_mutex_unlock(&ws->lock);
        if (k->state == WF_WORKER_JOINING) {
            if (hb.kv_blocks_total == 0) {
                worker_down(ws, k, "it reports no KV memory");
                return;
            }
            if (hb.kv_swa_blocks_total && (!ws->p.kv.swa_layers || k->prefill)) {
                worker_down(ws, k, "its KV store is split by layer kind but this world's stores "
                            "are not (prefill/decode roles or --kv-window-release=false): start it "
                            "with --kv-window-release=false");
                return;
            }
            k->swa_blocks = hb.kv_swa_blocks_total;
            /* It serves once it holds every virtual model added at run time (those declared
             * at start it loaded before this heartbeat). */
            int sync = wf__pool_vm_sync(ws, k, hb.kv_blocks_total);
            if (sync < 0) worker_down(ws, k, "out of memory");
            else if (sync == 0) worker_ready(ws, k, hb.kv_blocks_total);
        }
        return;
    }
    case WF_FRAME_WORKER_INFO: {
        static wf_frame_worker_info info; /* comm thread only (and open, before it starts) */
        if (wf_frame_decode_worker_info(f, &info, err, sizeof err) != WF_OK) break;
        if (info.n_codecs > WF_WORKER_CODECS_MAX)
            WF_LOG_WARN("workers", NULL, "worker rank %d: %d codec profiles measured, the stats show the "
                        "first %d", k->rank, info.n_codecs, WF_WORKER_CODECS_MAX);
        pthread_mutex_lock(&ws->lock);
        k->n_codecs = info.n_codecs < WF_WORKER_CODECS_MAX ? info.n_codecs : WF_WORKER_CODECS_MAX;
        memcpy(k->codecs, info.codecs, (size_t)k->n_codecs * sizeof k->codecs[0]);
        pthread_mutex_unlock(&ws->lock);
        k->declared = info.role;
        char why[160];
        if (ws->roles_fixed && role_mismatch(ws, k, why, sizeof why)) worker_down(ws, k, why);
        return;
    }
    case WF_FRAME_TASK_EVENT: {
        wf_frame_task_event ev;
        if (ensure_arena(ws, f->hdr.payload_len) != WF_OK) break;
        wf_frame_arena_init(&arena, ws->arena_mem, ws->arena_cap);
        if (wf_frame_decode_task_event(f, &arena, &ev, err, sizeof err) != WF_OK) break;
        pthread_mutex_lock(&ws->lock);
        wf_task_batch *wire = k->n_flight > 0 ? &k->flight[0].wire : NULL;
        pthread_mutex_unlock(&ws->lock);
        if (!wire || wire->iteration != ev.iteration) {
            WF_LOG_WARN("workers", NULL, "worker rank %d: stale TASK_EVENT %llu dropped", k->rank,
                        (unsigned long long)ev.iteration);
            return;
        }
        if (wf_frame_task_event_apply(&ev, wire, err, sizeof err) == WF_OK) return;
        break;
    }
    case WF_FRAME_BATCH_DONE: {
        wf_frame_batch_done d;
        if (wf_frame_decode_batch_done(f, &d, err, sizeof err) != WF_OK) break;
        pthread_mutex_lock(&ws->lock);
        if (k->n_flight == 0 || k->flight[0].wire.iteration != d.iteration) {
            pthread_mutex_unlock(&ws->lock);
            WF_LOG_WARN("workers", NULL, "worker rank %d: stale BATCH_DONE %llu dropped", k->rank,
                        (unsigned long long)d.iteration);
            return;
        }
        queued q = k->flight[0];
        memmove(&k->flight[0], &k->flight[1], (size_t)(k->n_flight - 1) * sizeof k->flight[0]);
        k->n_flight--;
        k->batches++;
        pthread_mutex_unlock(&ws->lock);
        if (q.lat_back) {
            /* The worker sends the results of the tasks that succeeded right after BATCH_DONE
             * (it blocks until we take them, so both sides progress here). */
            wf_status ls = move_latents(ws, k, &q, false);
            if (ls != WF_OK) {
                d.status = ls;
                snprintf(d.message, sizeof d.message, "latents from worker rank %d: %s", k->rank,
                         ls == WF_EPROTO ? "wrong size" : wf_world_error(ws->world));
            }
        }
        q.done(q.user, q.batch, d.status, d.status == WF_OK ? NULL : d.message);
        return;
    }
    case WF_FRAME_TRANSFER_DONE: {
        wf_frame_transfer_done d;
        if (wf_frame_decode_transfer_done(f, &d, err, sizeof err) != WF_OK) break;
        pthread_mutex_lock(&ws->lock);
        k->xfers++;
        k->xfer_bytes += d.bytes;
        k->xfer_ns += d.elapsed_ns;
        k->xfer_failed += d.status != WF_OK;
        /* The worker's controller says what it chose: "... codec=NAME reason=REASON". */
        const char *c = strstr(d.message, "codec="), *r = strstr(d.message, "reason=");
        if (c && r) {
            int n = (int)strcspn(c + 6, " ");
            k->xfer_compressed += strncmp(c + 6, "raw", 3) != 0;
            for (int i = 0; i < WF_KV_REASON_COUNT; i++)
                if (strcmp(r + 7, wf_kv_reason_name((wf_kv_reason)i)) == 0) k->xfer_reason[i]++;
            snprintf(k->xfer_last, sizeof k->xfer_last, "%.*s (%s)", n, c + 6, r + 7);
        }
        pthread_mutex_unlock(&ws->lock);
        return;
    }
    case WF_FRAME_ERROR: {
        wf_frame_status_msg m;
        if (wf_frame_decode_status_msg(f, &m, err, sizeof err) != WF_OK) break;
        worker_down(ws, k, m.message);
        return;
    }
    case WF_FRAME_VMODEL_ACK: {
        wf_frame_vmodel_ack a;
        if (wf_frame_decode_vmodel_ack(f, &a, err, sizeof err) != WF_OK) break;
        uint32_t kv_blocks = 0;
        char why[WF_FRAME_MESSAGE_MAX + 64];
        int r = wf__pool_vm_ack(ws, k, &a, &kv_blocks, why, sizeof why);
        if (r < 0) worker_down(ws, k, why);
        else if (r > 0) worker_ready(ws, k, kv_blocks);
        return;
    }
    default:
        snprintf(err, sizeof err, "unexpected frame type %u", (unsigned)f->hdr.type);
        break;
    }
    /* A frame we cannot use from a worker we cannot trust any more. */
    char why[WF_FRAME_TASK_MESSAGE_MAX + 32];
    snprintf(why, sizeof why, "protocol error: %s", err);
    worker_down(ws, k, why);
}

/* ---- the communication thread -------------------------------------------------------------- */

/* Sends the next batch to a worker with none in flight. One at a time because a send blocks
 * this thread until UCX has the bytes, and a large frame (a rendezvous) or a full eager FIFO
 * needs the receiver to progress, which a worker computing a batch does not: a send to a busy
 * worker stalled every other worker for the length of its batch, and failed it (the world's
 * bound) when the batch took longer (a long prefill under a slow build or on a busy host). An
 * idle worker progresses within a heartbeat. */
static void send_pending(wf_workers *ws, wk *k) {
    /* VMODEL frames first: a batch of a new virtual model is dispatched only after every live
     * worker acknowledged it, and one of a removed one never again */
    vop op;
    while (wf__pool_vm_next(ws, k, &op)) {
        wf_frame_vmodel m = {.op = op.op, .num = op.num, .spec = op.spec};
        char err[256];
        wf_status st = WF_LINK_SEND(ws->world, &k->link, wf_frame_encode_vmodel, &m, err,
                                    sizeof err);
        free(op.spec);
        if (st != WF_OK) {
            worker_down(ws, k, err);
            return;
        }
        k->last_sent_ns = wf_clock_now_ns();
    }
    for (;;) {
        pthread_mutex_lock(&ws->lock);
        if (k->n_pending == 0 || k->n_flight > 0 || k->state != WF_WORKER_LIVE) {
            pthread_mutex_unlock(&ws->lock);
            return;
        }
        queued q = k->pending[0];
        memmove(&k->pending[0], &k->pending[1], (size_t)(k->n_pending - 1) * sizeof k->pending[0]);
        k->n_pending--;
        q.wire = *q.batch;
        q.wire.iteration = ++ws->next_iteration;
        k->flight[k->n_flight++] = q;
        pthread_mutex_unlock(&ws->lock);
        char err[256];
        /* Each sequence's history travels once (seq_history.h): the samples carry what the
         * worker does not hold yet. */
        wf_status st = wf_seq_mirror_prepare(&k->hist, &q.wire);
        if (st != WF_OK) snprintf(err, sizeof err, "out of memory for the token histories");
        else st = WF_LINK_SEND(ws->world, &k->link, wf_frame_encode_task_dispatch, &q.wire, err, sizeof err);
        if (st == WF_EINVAL || st == WF_ERANGE || st == WF_ENOMEM) {
            /* This batch cannot cross; the worker is fine, but does not hold what the mirror
             * now counts as sent: the next batch tells it to forget every history. */
            wf_seq_mirror_reset(&k->hist);
            pthread_mutex_lock(&ws->lock);
            for (int i = 0; i < k->n_flight; i++)
                if (k->flight[i].wire.iteration == q.wire.iteration) {
                    memmove(&k->flight[i], &k->flight[i + 1], (size_t)(k->n_flight - i - 1) * sizeof q);
                    k->n_flight--;
                    break;
                }
            pthread_mutex_unlock(&ws->lock);
            q.done(q.user, q.batch, st, err);
        } else if (st != WF_OK) {
            worker_down(ws, k, err);
            return;
        }
        if (q.lat_out && (st = move_latents(ws, k, &q, true)) != WF_OK) {
            snprintf(err, sizeof err, "sending latents: %s", wf_world_error(ws->world));
            worker_down(ws, k, err);
            return;
        }
        k->last_sent_ns = wf_clock_now_ns();
    }
}

/* Whether a worker process started here is there and able to run (not stopped, not a
 * zombie): /proc/PID/stat's state. */
static bool process_running(pid_t pid) {
    if (pid <= 0) return false;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (!p || p[1] != ' ') return false;
    char state = p[2];
    return state == 'R' || state == 'S' || state == 'D';
}

/* Whether a worker silent for longer than the time-out is lost. A worker running a batch sends
 * heartbeats from its loop while its compute thread works (worker.c), but on a crowded host
 * that loop can wait seconds for its core: a process started here that is still there and
 * running (not stopped) while it holds a batch gets up to four time-outs. */
static bool silent_too_long(const wf_workers *ws, const wk *k, bool busy, uint64_t now) {
    uint64_t silent = now - k->last_heard_ns, bound = MS(ws->p.timeout_ms);
    if (silent <= bound) return false;
    return !(busy && k->spawned_here && silent <= 4 * bound && process_running(k->pid));
}

static void reap_children(wf_workers *ws) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < ws->n; i++) {
            wk *k = &ws->w[i];
            if (k->pid != pid) continue;
            k->pid = 0;
            char why[96];
            if (WIFSIGNALED(status)) snprintf(why, sizeof why, "its process was killed (signal %d)", WTERMSIG(status));
            else snprintf(why, sizeof why, "its process exited with status %d", WEXITSTATUS(status));
            WF_LOG_INFO("workers", NULL, "worker rank %d (pid %d): %s", k->rank, (int)pid, why);
            /* Already down (the world saw the peer fail first, or it was silent): its
             * last_error says how its process ended too, which is what an operator asks. */
            pthread_mutex_lock(&ws->lock);
            bool was_down = k->state == WF_WORKER_DOWN;
            if (was_down && !strstr(k->last_error, "its process")) {
                size_t len = strlen(k->last_error);
                snprintf(k->last_error + len, sizeof k->last_error - len, "; %s", why);
            }
            pthread_mutex_unlock(&ws->lock);
            if (!was_down) worker_down(ws, k, why);
            schedule_respawn(ws, k); /* also when a replacement died before it joined */
        }
    }
}

static void admit_replacement(wf_workers *ws) {
    int r = -1;
    /* Bounded: a replacement that connected completes its handshake in milliseconds, and the
     * other workers' traffic waits while this thread admits. */
    wf_world_set_join_timeout_ms(ws->world, ADMIT_TIMEOUT_MS);
    wf_status st = wf_world_admit(ws->world, &r);
    wf_world_set_join_timeout_ms(ws->world, ws->p.join_timeout_ms);
    if (st != WF_OK || r < 1 || r > ws->n) {
        WF_LOG_WARN("workers", NULL, "a replacement worker could not join: %s", wf_world_error(ws->world));
        return;
    }
    wk *k = &ws->w[r - 1];
    if (k->state != WF_WORKER_DOWN) worker_down(ws, k, "replaced by a new process");
    wf_link_free(ws->world, &k->link);
    wf_link_init(&k->link, r);
    wf_seq_mirror_reset(&k->hist); /* a new process holds no history */
    pthread_mutex_lock(&ws->lock);
    k->state = WF_WORKER_JOINING;
    k->restarts++;
    k->gen++;
    pthread_mutex_unlock(&ws->lock);
    k->last_heard_ns = wf_clock_now_ns();
    if (wf_link_post(ws->world, &k->link) != WF_OK) worker_down(ws, k, "cannot receive from it");
}

/* Copies what only the comm thread writes into the fields wf_workers_stats reads. */
static void publish(wf_workers *ws, wk *k) {
    uint32_t inc = ws->world ? wf_world_incarnation(ws->world, k->rank) : 0;
    pthread_mutex_lock(&ws->lock);
    k->pub.pid = k->pid;
    k->pub.last_heard_ns = k->last_heard_ns;
    k->pub.frames_in = k->link.frames_in;
    k->pub.frames_out = k->link.frames_out;
    k->pub.incarnation = inc;
    pthread_mutex_unlock(&ws->lock);
}

static void *comm_main(void *arg) {
    wf_workers *ws = arg;
    for (;;) {
        uint64_t drained;
        ssize_t rd = read(ws->wake_fd, &drained, sizeof drained); /* non-blocking */
        (void)rd;
        pthread_mutex_lock(&ws->lock);
        bool stopping = ws->stopping;
        pthread_mutex_unlock(&ws->lock);
        if (stopping) break;
        uint64_t now = wf_clock_now_ns();
        reap_children(ws);
        for (int i = 0; i < ws->n; i++) {
            wk *k = &ws->w[i];
            if (k->state == WF_WORKER_DOWN) {
                if (k->spawned_here && k->pid == 0 && k->respawn_at_ns && now >= k->respawn_at_ns) {
                    k->respawn_at_ns = 0;
                    if (spawn(ws, k, true) != WF_OK) k->respawn_at_ns = now + MS(k->backoff_ms);
                }
                continue;
            }
            send_pending(ws, k);
            if (k->state == WF_WORKER_DOWN) continue;
            while (k->link.posted && wf_world_test(ws->world, &k->link.recv, 1) == 1) {
                wf_frame_view f;
                char err[256];
                wf_status st = wf_link_open(&k->link, &f, err, sizeof err);
                if (st == WF_EPEER || st == WF_ETIMEDOUT || st == WF_ECANCELLED) {
                    worker_down(ws, k, wf_world_error(ws->world));
                    break;
                }
                k->last_heard_ns = wf_clock_now_ns();
                if (st != WF_OK) {
                    char why[300];
                    snprintf(why, sizeof why, "bad frame: %s", err);
                    worker_down(ws, k, why);
                    break;
                }
                handle_frame(ws, k, &f);
                if (k->state == WF_WORKER_DOWN || wf_link_post(ws->world, &k->link) != WF_OK) break;
            }
            if (k->state == WF_WORKER_DOWN) continue;
            send_pending(ws, k); /* the next batch, once the last one is answered */
            if (k->state == WF_WORKER_DOWN) continue;
            pthread_mutex_lock(&ws->lock);
            bool busy = k->n_flight > 0;
            pthread_mutex_unlock(&ws->lock);
            now = wf_clock_now_ns();
            if (silent_too_long(ws, k, busy, now)) {
                char why[96];
                snprintf(why, sizeof why, "silent for %d ms", ws->p.timeout_ms);
                worker_down(ws, k, why);
            } else if (wf__pool_vm_sync_late(ws, k, now, ws->p.join_timeout_ms)) {
                char why[128];
                snprintf(why, sizeof why, "did not load the virtual models added at run time "
                         "within %d ms", ws->p.join_timeout_ms);
                worker_down(ws, k, why);
            } else if (!busy && now - k->last_sent_ns > MS(ws->p.heartbeat_ms)) {
                /* Not to a worker running a batch (see send_pending): it reads none until it
                 * answers, and heartbeats piling up in its FIFO would block this thread. */
                wf_frame_heartbeat hb = {.seq = now, .time_ns = now};
                char err[256];
                if (WF_LINK_SEND(ws->world, &k->link, wf_frame_encode_heartbeat, &hb, err, sizeof err) != WF_OK)
                    worker_down(ws, k, err);
                k->last_sent_ns = now;
            }
        }
        for (int i = 0; i < ws->n; i++) publish(ws, &ws->w[i]);
        /* A replacement knocking at the bootstrap socket. */
        struct timeval tv = {0};
        fd_set rfds;
        int lfd = wf_world_listen_fd(ws->world);
        if (lfd >= 0) {
            FD_ZERO(&rfds);
            FD_SET(lfd, &rfds);
            if (select(lfd + 1, &rfds, NULL, NULL, &tv) > 0) admit_replacement(ws);
        }
        wf_world_wait_event(ws->world, ws->wake_fd, ws->p.heartbeat_ms / 2 > 0 ? ws->p.heartbeat_ms / 2 : 1);
    }
    return NULL;
}

/* ---- open / close ----------------------------------------------------------------------------- */

/* While the world forms: a worker started here that already exited will never join. */
static int start_failed(void *arg) {
    wf_workers *ws = arg;
    for (int i = 0; i < ws->n; i++) {
        wk *k = &ws->w[i];
        int status;
        if (k->pid <= 0 || waitpid(k->pid, &status, WNOHANG) != k->pid) continue;
        k->pid = 0;
        snprintf(ws->start_error, sizeof ws->start_error,
                 "worker #%d exited before joining (%s %d; its log says why)", i + 1,
                 WIFSIGNALED(status) ? "signal" : "status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        return 1;
    }
    return 0;
}

/* Forms the world (blocks until every worker joined) while the local workers start. */
static wf_status form_world(wf_workers *ws, char *err, size_t errlen) {
    wf_world_config wc = wf_world_config_default();
    wc.n_ranks = ws->n + 1;
    wc.rank = 0;
    wc.host = ws->host;
    wc.port = ws->p.port;
    wc.sym_size = 1u << 20;
    wc.timeout_ms = 10000;
    wc.join_timeout_ms = ws->p.join_timeout_ms;
    wc.join_abort = start_failed;
    wc.join_abort_arg = ws;
    wc.listen_fd = ws->boot_fd;
    ws->boot_fd = -1; /* the world's now, also if it fails */
    wf_status st = wf_world_create(&wc, &ws->world, err, errlen);
    if (st == WF_ECANCELLED && ws->start_error[0]) return wf_status_errorf(err, errlen, WF_EIO, "%s", ws->start_error);
    return st;
}

/* Waits for every worker's first heartbeat (its model loaded), reaping failed starts. */
static wf_status wait_ready(wf_workers *ws, char *err, size_t errlen) {
    uint64_t deadline = wf_clock_now_ns() + MS(ws->p.join_timeout_ms);
    for (;;) {
        int ready = 0;
        reap_children(ws);
        for (int i = 0; i < ws->n; i++) {
            wk *k = &ws->w[i];
            if (k->state == WF_WORKER_DOWN)
                return wf_status_errorf(err, errlen, WF_EIO, "worker rank %d failed to start: %s", k->rank,
                                        k->last_error);
            if (k->state == WF_WORKER_LIVE) {
                ready++;
                continue;
            }
            if (wf_world_test(ws->world, &k->link.recv, 1) == 1) {
                wf_frame_view f;
                char ferr[256];
                wf_status st = wf_link_open(&k->link, &f, ferr, sizeof ferr);
                if (st != WF_OK) {
                    worker_down(ws, k, st == WF_EPEER ? wf_world_error(ws->world) : ferr);
                    continue;
                }
                k->last_heard_ns = wf_clock_now_ns();
                handle_frame(ws, k, &f);
                if (k->state != WF_WORKER_DOWN) wf_link_post(ws->world, &k->link);
            }
        }
        if (ready == ws->n) return WF_OK;
        if (wf_clock_now_ns() > deadline)
            return wf_status_errorf(err, errlen, WF_ETIMEDOUT, "%d of %d workers were not ready after %d ms",
                                    ws->n - ready, ws->n, ws->p.join_timeout_ms);
        wf_world_wait_event(ws->world, -1, 20);
    }
}

static void kill_children(wf_workers *ws) {
    for (int i = 0; i < ws->n; i++)
        if (ws->w[i].pid > 0) kill(ws->w[i].pid, SIGKILL);
    for (int i = 0; i < ws->n; i++)
        if (ws->w[i].pid > 0) {
            waitpid(ws->w[i].pid, NULL, 0);
            ws->w[i].pid = 0;
        }
}

static wf_status check_params(const wf_workers_params *p, char *err, size_t errlen) {
    if (p->n_workers < 1 || p->n_workers > WF_WORKERS_MAX)
        return wf_status_errorf(err, errlen, WF_EINVAL, "--workers must be 1..%d (got %d)", WF_WORKERS_MAX,
                                p->n_workers);
    if (p->n_prefill < 0 || (p->n_prefill > 0 && p->n_prefill >= p->n_workers))
        return wf_status_errorf(err, errlen, WF_EINVAL,
                                "prefill workers (%d) need at least one decode worker besides them "
                                "(%d workers in all)", p->n_prefill, p->n_workers);
    if (p->n_spawn > p->n_workers)
        return wf_status_errorf(err, errlen, WF_EINVAL, "more local workers (%d) than --workers (%d)",
                                p->n_spawn, p->n_workers);
    if (!p->exe || !p->model_path || !p->host)
        return wf_status_errorf(err, errlen, WF_EINVAL, "worker pool: missing binary, model or host");
    if (p->kv.n_layers <= 0 || p->kv.block_size <= 0)
        return wf_status_errorf(err, errlen, WF_EINVAL, "worker pool: no KV geometry");
    if (p->heartbeat_ms <= 0 || p->timeout_ms <= p->heartbeat_ms || p->join_timeout_ms <= 0)
        return wf_status_errorf(err, errlen, WF_EINVAL, "worker time-outs: need 0 < heartbeat < timeout");
    return WF_OK;
}

/* Worker i's CPU list from "LIST:LIST:..." (or the default split). */
static wf_status cores_of(const wf_workers_params *p, int n_spawn, int i, char *out, size_t cap,
                          char *err, size_t errlen) {
    if (!p->worker_cores || !p->worker_cores[0]) {
        wf_workers_default_cores(n_spawn, i, out, cap);
        return WF_OK;
    }
    const char *s = p->worker_cores;
    int field = 0, count = 1;
    for (const char *c = s; *c; c++) count += *c == ':';
    if (count != n_spawn)
        return wf_status_errorf(err, errlen, WF_EINVAL,
                                "--worker-cores has %d CPU lists for %d local workers (one per worker, "
                                "separated by ':', e.g. 0:1 or 0-3:4-7)", count, n_spawn);
    while (field < i) field += *s++ == ':';
    size_t n = strcspn(s, ":");
    if (n == 0 || n >= cap)
        return wf_status_errorf(err, errlen, WF_EINVAL, "--worker-cores: CPU list %d is empty or too long", i + 1);
    memcpy(out, s, n);
    out[n] = '\0';
    return WF_OK;
}

wf_status wf_workers_open(const wf_workers_params *p, wf_workers **out, char *err, size_t errlen) {
    *out = NULL;
    wf_status st = check_params(p, err, errlen);
    if (st != WF_OK) return st;
    wf_workers *ws = calloc(1, sizeof *ws);
    if (!ws) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    ws->p = *p;
    ws->n = p->n_workers;
    ws->wake_fd = -1;
    ws->boot_fd = -1;
    pthread_mutex_init(&ws->lock, NULL);
    pthread_mutex_init(&ws->sched_lock, NULL);
    ws->host = strdup(p->host);
    ws->exe = strdup(p->exe);
    ws->model_path = strdup(p->model_path);
    ws->log_level = strdup(p->log_level ? p->log_level : "info");
    ws->kv_profiles = p->kv_profiles ? strdup(p->kv_profiles) : NULL;
    ws->kv_codec = p->kv_codec ? strdup(p->kv_codec) : NULL;
    ws->dit_path = p->dit_path ? strdup(p->dit_path) : NULL;
    if ((p->dit_path && !ws->dit_path) || !ws->host || !ws->exe || !ws->model_path || !ws->log_level) {
        st = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
        goto fail;
    }
    /* the virtual models declared at start: every started worker loads them (--vmodel) */
    if ((st = wf__pool_vm_init(ws, p, err, errlen)) != WF_OK) goto fail;
    /* The bootstrap socket listens before any worker starts, so the port the workers are told
     * (a free one when none was asked for) stays this daemon's until the world takes it over:
     * picking a free port and binding it later let a parallel process take it in between. */
    char why[256];
    if ((ws->boot_fd = wf_world_boot_socket(ws->host, &ws->p.port, why, sizeof why)) < 0) {
        st = wf_status_errorf(err, errlen, WF_EIO, "the world's bootstrap: %s", why);
        goto fail;
    }
    int n_spawn = p->n_spawn < 0 ? ws->n : p->n_spawn;
    for (int i = 0; i < ws->n; i++) {
        wk *k = &ws->w[i];
        k->ws = ws;
        k->index = i;
        k->rank = i + 1;
        k->group = -1;
        k->backoff_ms = RESPAWN_FIRST_MS;
        k->state = WF_WORKER_JOINING;
        k->spawned_here = i < n_spawn;
        k->prefill = i < p->n_prefill;
        wf_link_init(&k->link, k->rank);
        if (wf_seq_mirror_init(&k->hist, HISTORY_MAX_SEQS, HISTORY_MAX_TOKENS) != WF_OK) {
            st = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
            goto fail;
        }
        if (k->spawned_here && (st = cores_of(p, n_spawn, i, k->cores, sizeof k->cores, err, errlen)) != WF_OK)
            goto fail;
    }
    for (int i = 0; i < n_spawn; i++)
        if ((st = spawn(ws, &ws->w[i], false)) != WF_OK) {
            wf_status_errorf(err, errlen, st, "cannot start worker %d: %s", i + 1, strerror(errno));
            goto fail;
        }
    if (n_spawn < ws->n)
        WF_LOG_INFO("workers", NULL, "waiting for %d worker(s) to join at %s:%d (weftd --role worker "
                    "--join %s:%d --world-size %d)", ws->n - n_spawn, ws->host, ws->p.port, ws->host,
                    ws->p.port, ws->n + 1);
    if ((st = form_world(ws, err, errlen)) != WF_OK) goto fail;
    /* Slots were dealt in join order: match started processes to ranks by pid. */
    for (int i = 0; i < ws->n; i++) ws->w[i].last_heard_ns = wf_clock_now_ns();
    pid_t pids[WF_WORKERS_MAX];
    char cores[WF_WORKERS_MAX][64];
    for (int i = 0; i < ws->n; i++) {
        pids[i] = ws->w[i].pid;
        memcpy(cores[i], ws->w[i].cores, sizeof cores[i]);
        ws->w[i].pid = 0;
        ws->w[i].spawned_here = false;
        ws->w[i].cores[0] = '\0';
    }
    for (int i = 0; i < ws->n; i++) {
        if (pids[i] <= 0) continue;
        for (int r = 1; r <= ws->n; r++) {
            if (wf_world_peer_pid(ws->world, r) == (uint32_t)pids[i]) {
                wk *k = &ws->w[r - 1];
                k->pid = pids[i];
                k->spawned_here = true;
                memcpy(k->cores, cores[i], sizeof k->cores);
            }
        }
    }
    for (int i = 0; i < ws->n; i++)
        if (wf_link_post(ws->world, &ws->w[i].link) != WF_OK) {
            st = wf_status_errorf(err, errlen, WF_EIO, "cannot receive from worker rank %d", i + 1);
            goto fail;
        }
    if ((st = wait_ready(ws, err, errlen)) != WF_OK) goto fail;
    if ((st = assign_roles(ws, err, errlen)) != WF_OK) goto fail;
    ws->roles_fixed = true;
    for (int i = 0; i < ws->n; i++) publish(ws, &ws->w[i]);
    ws->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ws->wake_fd < 0 || pthread_create(&ws->thread, NULL, comm_main, ws) != 0) {
        st = wf_status_errorf(err, errlen, WF_EIO, "cannot start the worker pool's thread");
        goto fail;
    }
    ws->thread_on = true;
    WF_LOG_INFO("workers", NULL, "%d worker(s) ready (bootstrap %s:%d)", ws->n, ws->host, ws->p.port);
    *out = ws;
    return WF_OK;
fail:
    wf_workers_close(ws);
    return st;
}

int wf_workers_count(const wf_workers *ws) { return ws->n; }
int wf_workers_rank(const wf_workers *ws, int i) { return ws->w[i].rank; }
wf_kv_store *wf_workers_kv(wf_workers *ws, int i) { return &ws->w[i].kv; }

wf_executor wf_workers_executor(wf_workers *ws, int i) {
    return (wf_executor){.ops = ws->p.n_prefill > 0 ? &pd_ops : &remote_ops, .ctx = &ws->w[i]};
}

bool wf_workers_is_prefill(const wf_workers *ws, int i) { return ws->w[i].prefill; }

void wf_workers_attach(wf_workers *ws, wf_sched *s, const int *group_ids) {
    pthread_mutex_lock(&ws->sched_lock);
    pthread_mutex_lock(&ws->lock);
    ws->sched = s;
    for (int i = 0; i < ws->n; i++) ws->w[i].group = group_ids[i];
    pthread_mutex_unlock(&ws->lock);
    pthread_mutex_unlock(&ws->sched_lock);
}

void wf_workers_detach(wf_workers *ws) {
    if (!ws) return;
    pthread_mutex_lock(&ws->sched_lock);
    ws->sched = NULL;
    pthread_mutex_unlock(&ws->sched_lock);
}

void wf_workers_health(wf_workers *ws, int *live, int *total) {
    int n = 0;
    pthread_mutex_lock(&ws->lock);
    for (int i = 0; i < ws->n; i++) n += ws->w[i].state == WF_WORKER_LIVE;
    pthread_mutex_unlock(&ws->lock);
    *live = n;
    *total = ws->n;
}

int wf_workers_stats(wf_workers *ws, wf_worker_stats *out, int cap) {
    uint64_t now = wf_clock_now_ns();
    pthread_mutex_lock(&ws->lock);
    for (int i = 0; i < ws->n && i < cap; i++) {
        wk *k = &ws->w[i];
        wf_worker_stats *o = &out[i];
        memset(o, 0, sizeof *o);
        o->rank = k->rank;
        o->state = k->state;
        o->pid = k->pub.pid;
        o->incarnation = k->pub.incarnation;
        o->group = k->group;
        snprintf(o->cores, sizeof o->cores, "%s", k->cores);
        o->batches = k->batches;
        o->frames_in = k->pub.frames_in;
        o->frames_out = k->pub.frames_out;
        o->last_heard_ms = k->pub.last_heard_ns && now > k->pub.last_heard_ns
                               ? (double)(now - k->pub.last_heard_ns) / 1e6 : 0;
        o->kv_blocks = (uint32_t)k->kv.n_blocks;
        o->kv_blocks_used = k->kv_used;
        o->prefix_queries = k->prefix_queries;
        o->prefix_hits = k->prefix_hits;
        o->kv_layers_early = k->kv_layers_early;
        o->prefill = k->prefill;
        o->transfers = k->xfers;
        o->transfer_bytes = k->xfer_bytes;
        o->transfer_ms = (double)k->xfer_ns / 1e6;
        o->transfers_failed = k->xfer_failed;
        o->batches_in_flight = k->n_pending + k->n_flight;
        o->batches_running = k->n_flight;
        o->transfers_compressed = k->xfer_compressed;
        memcpy(o->codec_reasons, k->xfer_reason, sizeof o->codec_reasons);
        snprintf(o->codec_last, sizeof o->codec_last, "%s", k->xfer_last);
        o->restarts = k->restarts;
        snprintf(o->last_error, sizeof o->last_error, "%s", k->last_error);
        o->n_codecs = k->n_codecs;
        for (int c = 0; c < k->n_codecs; c++) {
            const wf_frame_codec_speed *m = &k->codecs[c];
            wf_kv_profile_stats ps = {.cr = m->cr, .enc_gbps = m->enc_gbps, .dec_gbps = m->dec_gbps};
            snprintf(o->codecs[c].name, sizeof o->codecs[c].name, "%s", m->name);
            o->codecs[c].cr = m->cr;
            o->codecs[c].enc_gbps = m->enc_gbps;
            o->codecs[c].dec_gbps = m->dec_gbps;
            o->codecs[c].b_star_gbps =
                wf_kv_profile_b_star_pipelined_gbps(&ps, wf_kv_xfer_slices(ws->p.kv.n_layers));
        }
    }
    pthread_mutex_unlock(&ws->lock);
    return ws->n;
}

wf_status wf_workers_kill(wf_workers *ws, int i) {
    if (i < 0 || i >= ws->n) return WF_ENOTFOUND;
    pthread_mutex_lock(&ws->lock);
    pid_t pid = ws->w[i].pub.pid;
    pthread_mutex_unlock(&ws->lock);
    if (pid <= 0) return WF_ENOTFOUND;
    return kill(pid, SIGKILL) == 0 ? WF_OK : WF_EIO;
}

void wf_workers_close(wf_workers *ws) {
    if (!ws) return;
    if (ws->boot_fd >= 0) close(ws->boot_fd); /* the world never took it over */
    ws->boot_fd = -1;
    if (ws->thread_on) {
        pthread_mutex_lock(&ws->lock);
        ws->stopping = true;
        pthread_mutex_unlock(&ws->lock);
        wf__pool_wake(ws);
        pthread_join(ws->thread, NULL);
    }
    for (int i = 0; i < ws->n; i++) {
        wk *k = &ws->w[i];
        if (ws->world && k->state != WF_WORKER_DOWN)
            wf_link_send_status(ws->world, &k->link, WF_FRAME_SHUTDOWN, WF_OK, "coordinator stopping");
        fail_batches(ws, k, "the worker pool is closing");
    }
    /* Give the workers a moment to leave by themselves, then make sure. */
    uint64_t deadline = wf_clock_now_ns() + MS(2000);
    for (int i = 0; i < ws->n; i++)
        while (ws->w[i].pid > 0 && wf_clock_now_ns() < deadline) {
            if (waitpid(ws->w[i].pid, NULL, WNOHANG) == ws->w[i].pid) ws->w[i].pid = 0;
            else usleep(10000);
        }
    for (int i = 0; i < ws->n; i++)
        if (ws->w[i].pid > 0)
            WF_LOG_WARN("workers", NULL, "worker rank %d (pid %d) did not leave within 2 s of the shutdown: killed",
                        ws->w[i].rank, (int)ws->w[i].pid);
    kill_children(ws);
    /* Reaped, so gone: their endpoints close at once (a graceful close to a process that has
     * left waits out UCX's endpoint time-out, seconds of "error during flush" at every stop of
     * a daemon whose workers run without CMA). */
    for (int i = 0; i < ws->n; i++)
        if (ws->world && ws->w[i].spawned_here) wf_world_peer_gone(ws->world, ws->w[i].rank);
    for (int i = 0; i < ws->n; i++) {
        wf_link_free(ws->world, &ws->w[i].link);
        wf_seq_mirror_free(&ws->w[i].hist);
        wf_kv_pool_free(ws->w[i].pfx);
    }
    wf_world_destroy(ws->world);
    if (ws->wake_fd >= 0) close(ws->wake_fd);
    free(ws->arena_mem);
    free(ws->host);
    free(ws->exe);
    free(ws->model_path);
    free(ws->log_level);
    free(ws->kv_profiles);
    free(ws->kv_codec);
    free(ws->dit_path);
    wf__pool_vm_free(ws);
    pthread_mutex_destroy(&ws->lock);
    pthread_mutex_destroy(&ws->sched_lock);
    free(ws);
}
