/* Internal: DiT placement policies behind a small vtable (issue #15). At every boundary (an
 * arrival, the end of a task) the policy sees the jobs that wait for ranks and the ranks that
 * are free, and says which jobs start now, on which group of ranks, for how many steps. The
 * simulator (sched/dit_sim.h) and the image scheduler drive the same code.
 *
 *     wf_dit_policy *p;
 *     if (wf_dit_policy_new("elastic", 8, &cost, 5, &p, err, sizeof err) != WF_OK) ...;
 *     wf_dit_view v = {.now_ms = now, .n_ranks = 8, .busy = busy, .ready = ready, .n_ready = n};
 *     wf_dit_task t[8];
 *     int k = wf_dit_policy_pick(p, &v, t, 8);        // start t[0..k)
 *     wf_dit_policy_complete(p, job, now);            // a job finished
 *     wf_dit_policy_free(p);
 *
 * Policies ("--dit-policy"):
 *   static:K  fixed lanes of K consecutive ranks (K = 1, 2, 4, 8); the most urgent waiting job
 *             (earliest deadline) takes a free lane and runs all its steps there, on
 *             min(K, its largest valid degree) ranks.
 *   rssp      resolution-specific static P: each job runs all its steps on P(tokens) ranks, P
 *             the largest degree whose parallel efficiency T(1) / (P T(P)) is >= 0.7 (or a
 *             table "rssp:1024=1,4096=2,16384=4"); earliest deadline first, with backfill.
 *   elastic   GF-DiT's EDF best-fit: jobs in deadline order each get the SMALLEST degree that
 *             still meets their deadline (remaining steps x T(tokens, P) plus the reshard);
 *             a job that cannot fit demotes jobs with far more work left (4x; they wait a
 *             chunk); jobs whose best fit is too large for what is left start on the largest
 *             degree that fits; jobs that cannot meet their deadline anyway get one rank each
 *             from what the feasible jobs' best fits leave, shortest remaining work first
 *             (those late by more than their single-rank time first, in deadline order, and
 *             before feasible jobs get more than their best fit, so partly fitting newcomers
 *             cannot starve them; never a rank a feasible best fit needs: under a sustained
 *             overload that would turn one miss into several); ranks left over go to the most
 *             urgent jobs, at the fastest degree.
 *             A guided job's step time on 2 ranks is the faster of guidance-parallel (one
 *             half per rank) and Ulysses (dit_cost.h), so its best fit and its fastest degree
 *             follow the mode; the task says which mode was assumed.
 *             Cheap growth: a best fit grows to a faster degree that costs no more rank-time
 *             per step (within 2%: a guided image in CFG mode on 2 ranks) when ranks are free;
 *             those ranks are lent: a job later in deadline order takes them back when waiting
 *             for the lender's chunk to end would cost its deadline, and otherwise waits (one
 *             job twice as fast beats two at once at the same throughput: lower mean latency).
 *             Overload triage (Moore-Hodgson's rule for the fewest late jobs on one machine,
 *             the cluster seen as one server of 0.8 x n_ranks single-rank work per ms): in
 *             deadline order the jobs' single-rank work is summed; where the sum would end
 *             past a job's deadline, the job with the most work so far (not the only one) is
 *             set aside: it is treated as late for this pick (no best fit, only the ranks the
 *             others leave), so that under an overload the ranks EDF would give to a long job
 *             go to several shorter ones that can still make it.
 *             Tasks are chunks of `chunk_steps`, so every job is reconsidered at each
 *             chunk's end.
 *   gf-static:K  GF-DiT's static-SP baseline as its simulator runs it
 *             (benchmarks/diffusion/policies/static_sp.py): each job is bound at its first pick
 *             (its arrival) to a lane of K ranks, round-robin over the lanes, and each lane
 *             serves its jobs first come first served, one at a time, to the end; no deadline
 *             order, no moving to a free lane, no dropping.
 *   gf-fcfs:K GF-DiT's static baseline as its real runtime runs it (FCFSSchedulerPolicy on a
 *             topology of K-rank groups, scripts/sweep_policies.sh's fcfs_spK): as gf-static:K
 *             but each job is bound to the lane whose backlog (the predicted time of the jobs
 *             bound to it) ends first, the "earliest-free" heuristic.
 *   gf-rssp[:T=P,...]  GF-DiT's RSSP (policies/rssp.py): a fixed degree per class, by default
 *             its S:4, M:4, L:1 (here by tokens: "1=4,16384=1", L being 16384 tokens), each job
 *             bound round-robin to a lane of that many ranks (aligned blocks: lanes of different
 *             sizes overlap, as in GF-DiT's 8 x SP1 + 2 x SP4 topology), each lane first come
 *             first served; a lane's next job starts when all its ranks are free, the
 *             earliest-arrived such job first.
 *             In the daemon a job is presented anew each wave, so there it is bound per pick.
 * Not thread-safe: one owner. */
#ifndef WF_SCHED_DIT_POLICY_H
#define WF_SCHED_DIT_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/base/status.h"
#include "sched/dit_cost.h"

#define WF_DIT_MAX_RANKS 64

/* A request's denoising trajectory as the policies see it. */
typedef struct wf_dit_job {
    int id;
    int cls;                 /* class index, for reports */
    int tokens, steps, steps_done;
    int max_P;               /* the largest degree the model allows at this size */
    bool guided;             /* classifier-free guidance: two forwards a step (dit_cost.h) */
    double arrival_ms, deadline_ms;
    double latent_bytes;     /* moved in full when a job changes ranks */
    int n_ranks;             /* the group of its last task (0 before its first) */
    int ranks[WF_DIT_MAX_RANKS];
    int lane;                /* the policy's: 1 + the lane a binding policy (gf-static, gf-rssp)
                              * tied it to at its first pick; 0 (zeroed job) = not yet bound */
} wf_dit_job;

typedef struct wf_dit_view {
    double now_ms;
    int n_ranks;
    const bool *busy;        /* n_ranks: running a task */
    wf_dit_job *const *ready;/* waiting for ranks (arrived, not running, not finished) */
    int n_ready;
} wf_dit_view;

typedef struct wf_dit_task {
    int job;                 /* index into view.ready */
    int steps;
    int n_ranks;
    int ranks[WF_DIT_MAX_RANKS];
    wf_dit_cost_mode mode;   /* what the cost model assumed: PLAIN, or for a guided job GUIDED
                              * (Ulysses) or CFG (guidance-parallel, 2 ranks) */
} wf_dit_task;

typedef struct wf_dit_policy wf_dit_policy;

typedef struct wf_dit_policy_ops {
    const char *name;
    /* Optional: false refuses the job at arrival (it counts as a missed deadline). */
    bool (*admit)(wf_dit_policy *p, const wf_dit_view *v, const wf_dit_job *j);
    /* Fills out[0..k) with tasks to start now on free ranks; returns k (0 also when out of
     * memory for its scratch: nothing starts, the next boundary retries). */
    int (*pick)(wf_dit_policy *p, const wf_dit_view *v, wf_dit_task *out, int max_out);
    /* Optional: job j finished at now_ms. */
    void (*complete)(wf_dit_policy *p, const wf_dit_job *j, double now_ms);
} wf_dit_policy_ops;

struct wf_dit_policy {
    const wf_dit_policy_ops *ops;
    const wf_dit_cost *cost;  /* borrowed */
    int n_ranks, chunk_steps;
    int static_k;             /* static:K, gf-static:K */
    int rr[WF_DIT_MAX_RANKS + 1]; /* their round-robin cursor per lane size */
    bool earliest_free;       /* gf-fcfs:K: bound to the lane whose backlog ends first */
    double lane_free_ms[WF_DIT_MAX_RANKS]; /* gf-fcfs: when each lane's bound jobs end */
    int rssp_n, rssp_tokens[8], rssp_P[8]; /* rssp table (empty: efficiency rule) */
    /* pick's scratch, per ready job; grown when the ready list outgrows it */
    int cap, *idx, *deg;
    bool *late, *demoted, *aside;
    int *grown;
    double *work;
};

/* spec: "static:K", "rssp", "rssp:T=P,...", "elastic", "gf-static:K", "gf-fcfs:K",
 * "gf-rssp[:T=P,...]".
 * WF_EINVAL naming the problem. */
wf_status wf_dit_policy_new(const char *spec, int n_ranks, const wf_dit_cost *cost, int chunk_steps,
                            wf_dit_policy **out, char *err, size_t errlen);
void wf_dit_policy_free(wf_dit_policy *p);
bool wf_dit_policy_admit(wf_dit_policy *p, const wf_dit_view *v, const wf_dit_job *j);
int wf_dit_policy_pick(wf_dit_policy *p, const wf_dit_view *v, wf_dit_task *out, int max_out);
void wf_dit_policy_complete(wf_dit_policy *p, const wf_dit_job *j, double now_ms);
const char *wf_dit_policy_names(void);

/* Helpers shared by the policies and the simulator. */
/* The largest allowed degree <= limit and <= j->max_P (1 if none). */
int wf_dit_policy_degree_at_most(const wf_dit_cost *c, const wf_dit_job *j, int limit);
/* One step of the job on P ranks: plain, or guided in its faster mode (CFG or Ulysses at
 * P = 2); < 0 when P is not allowed. *mode (if not NULL) gets the mode. */
double wf_dit_policy_step_ms(const wf_dit_cost *c, const wf_dit_job *j, int P, wf_dit_cost_mode *mode);
/* ms to finish the job on P ranks from now, in chunks of chunk_steps: its remaining steps,
 * each chunk's overhead, the request's (cost->request_ms: its image is decoded and sent after
 * the last step), and the reshard if its ranks change (moved = true). */
double wf_dit_policy_remaining_ms(const wf_dit_cost *c, const wf_dit_job *j, int P, bool moved, int chunk_steps);
/* The rssp degree for tokens. */
int wf_dit_policy_rssp_degree(const wf_dit_policy *p, const wf_dit_job *j);

#endif
