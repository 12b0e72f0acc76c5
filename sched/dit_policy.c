/* DiT placement policies: static lanes, resolution-specific static P, and elastic EDF
 * best-fit (GF-DiT). Each pick is a pure function of the view and the cost model. */
#include "sched/dit_policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A job demotes another at a boundary only when the other has this many times more work left
 * (single-rank time): "long" jobs yield to short ones at risk, peers do not thrash. */
#define WF_DIT_DEMOTE_RATIO 4.0
/* A late job waits behind jobs that can still meet their deadlines for at most this many times
 * its single-rank time past its deadline (cf. sched's WF_SLO_LATE_AGING). */
#ifndef WF_DIT_LATE_AGING
#define WF_DIT_LATE_AGING 1.0
#endif
/* A wider group is as cheap as the best fit when its rank-time per step (P x T(P)) is at most
 * this much larger: a guided image on 2 ranks in CFG mode (each rank runs one half) costs no
 * more than on one, and finishes twice as fast. Below the cost model's own error. */
#define WF_DIT_FREE_GROWTH 0.02
/* Overload triage (set_aside): the ready jobs' single-rank work is taken as served at this
 * fraction of n_ranks rank-ms per ms. Below 1 because the view shows only waiting jobs (the
 * ranks also owe the running jobs' chunks) and best fits above one rank cost more rank-time
 * than one rank (parallel efficiency < 1). Measured on bench/elastic/sim_table.sh (24 points, 5
 * seeds): 0.5, 0.6, 0.7, 0.8, 0.9, 1.0 and 1.1 missed 1847, 1722, 1697, 1711, 1738, 1768 and
 * 1786 deadlines (no triage: 1826); 0.8 rather than the slightly better 0.7 to stay away from
 * the cliff below 0.6, where the triage sets aside jobs that would have made it. */
#define WF_DIT_TRIAGE_SPEED 0.8
/* rssp's rule: the largest degree whose parallel efficiency is at least this. */
#define WF_DIT_RSSP_EFFICIENCY 0.7

int wf_dit_policy_degree_at_most(const wf_dit_cost *c, const wf_dit_job *j, int limit) {
    int best = 1;
    for (int P = 2; P <= limit && P <= j->max_P && P <= WF_DIT_COST_MAX_P; P++)
        if (wf_dit_cost_allows(c, P)) best = P;
    return best;
}

double wf_dit_policy_step_ms(const wf_dit_cost *c, const wf_dit_job *j, int P, wf_dit_cost_mode *mode) {
    if (!j->guided) {
        if (mode) *mode = WF_DIT_COST_PLAIN;
        return wf_dit_cost_step_ms(c, j->tokens, P);
    }
    return wf_dit_cost_guided_ms(c, j->tokens, P, mode);
}

double wf_dit_policy_remaining_ms(const wf_dit_cost *c, const wf_dit_job *j, int P, bool moved, int chunk_steps) {
    int rem = j->steps - j->steps_done, chunks = chunk_steps > 0 ? (rem + chunk_steps - 1) / chunk_steps : rem;
    double ms = rem * wf_dit_policy_step_ms(c, j, P, NULL) + chunks * c->chunk_ms + c->request_ms;
    if (moved) ms += wf_dit_cost_reshard_ms(c, j->latent_bytes);
    return ms;
}

int wf_dit_policy_rssp_degree(const wf_dit_policy *p, const wf_dit_job *j) {
    int limit = p->n_ranks < j->max_P ? p->n_ranks : j->max_P;
    if (p->rssp_n > 0) {
        int P = 1, best_tokens = -1;
        for (int i = 0; i < p->rssp_n; i++) /* the entry of the largest size <= tokens */
            if (p->rssp_tokens[i] <= j->tokens && p->rssp_tokens[i] > best_tokens) {
                best_tokens = p->rssp_tokens[i];
                P = p->rssp_P[i];
            }
        return wf_dit_policy_degree_at_most(p->cost, j, P < limit ? P : limit);
    }
    double t1 = wf_dit_policy_step_ms(p->cost, j, 1, NULL);
    int best = 1;
    for (int P = 2; P <= limit; P++) {
        if (!wf_dit_cost_allows(p->cost, P)) continue;
        double tp = wf_dit_policy_step_ms(p->cost, j, P, NULL);
        if (t1 / (P * tp) >= WF_DIT_RSSP_EFFICIENCY) best = P;
    }
    return best;
}

/* a before b: earliest deadline first (by_arrival: first come first), ties by arrival, id */
static bool before(const wf_dit_job *a, const wf_dit_job *b, bool by_arrival) {
    if (!by_arrival && a->deadline_ms != b->deadline_ms) return a->deadline_ms < b->deadline_ms;
    if (a->arrival_ms != b->arrival_ms) return a->arrival_ms < b->arrival_ms;
    return a->id < b->id;
}

/* ready indices in earliest-deadline order, or first come first served (by_arrival) */
static void queue_order(const wf_dit_view *v, int *idx, bool by_arrival) {
    for (int i = 0; i < v->n_ready; i++) idx[i] = i;
    for (int i = 1; i < v->n_ready; i++) {
        int x = idx[i], k = i - 1;
        while (k >= 0 && before(v->ready[x], v->ready[idx[k]], by_arrival)) {
            idx[k + 1] = idx[k];
            k--;
        }
        idx[k + 1] = x;
    }
}

static void edf_order(const wf_dit_view *v, int *idx) { queue_order(v, idx, false); }

static bool reserve(wf_dit_policy *p, int n) {
    if (n <= p->cap) return true;
    int cap = n < 64 ? 64 : 2 * n;
    int *idx = realloc(p->idx, sizeof(int) * (size_t)cap);
    if (idx) p->idx = idx;
    int *deg = realloc(p->deg, sizeof(int) * (size_t)cap);
    if (deg) p->deg = deg;
    bool *late = realloc(p->late, sizeof(bool) * (size_t)cap);
    if (late) p->late = late;
    bool *dem = realloc(p->demoted, sizeof(bool) * (size_t)cap);
    if (dem) p->demoted = dem;
    int *grown = realloc(p->grown, sizeof(int) * (size_t)cap);
    if (grown) p->grown = grown;
    bool *aside = realloc(p->aside, sizeof(bool) * (size_t)cap);
    if (aside) p->aside = aside;
    double *work = realloc(p->work, sizeof(double) * (size_t)cap);
    if (work) p->work = work;
    if (!idx || !deg || !late || !dem || !grown || !aside || !work) return false;
    p->cap = cap;
    return true;
}

static int count_free(const wf_dit_view *v, bool *freem) {
    int f = 0;
    for (int r = 0; r < v->n_ranks; r++) {
        freem[r] = !v->busy[r];
        f += freem[r];
    }
    return f;
}

/* P free ranks for job j: the ones it already holds first (no reshard), then the lowest; and
 * the mode the cost model assumes on them. */
static void take_ranks(const wf_dit_cost *c, const wf_dit_job *j, int P, bool *freem, int n_ranks, wf_dit_task *t) {
    wf_dit_policy_step_ms(c, j, P, &t->mode);
    t->n_ranks = 0;
    for (int i = 0; i < j->n_ranks && t->n_ranks < P; i++) {
        int r = j->ranks[i];
        if (r >= 0 && r < n_ranks && freem[r]) {
            freem[r] = false;
            t->ranks[t->n_ranks++] = r;
        }
    }
    for (int r = 0; r < n_ranks && t->n_ranks < P; r++)
        if (freem[r]) {
            freem[r] = false;
            t->ranks[t->n_ranks++] = r;
        }
}

static int remaining_steps(const wf_dit_job *j) { return j->steps - j->steps_done; }

/* Whether every rank of lane l (the aligned block of K ranks from l * K) is free. */
static bool lane_free(const bool *freem, int l, int K) {
    bool all = true;
    for (int r = l * K; r < (l + 1) * K; r++) all &= freem[r];
    return all;
}

/* Runs ready job `job` on lane l of K ranks: its remaining steps on the first of them its
 * degree (at most K) uses; the whole lane is taken. */
static void lane_task(const wf_dit_policy *p, const wf_dit_view *v, int job, int l, int K, bool *freem,
                      wf_dit_task *t) {
    const wf_dit_job *j = v->ready[job];
    t->job = job;
    t->steps = remaining_steps(j);
    t->n_ranks = wf_dit_policy_degree_at_most(p->cost, j, K);
    wf_dit_policy_step_ms(p->cost, j, t->n_ranks, &t->mode);
    for (int k = 0; k < t->n_ranks; k++) t->ranks[k] = l * K + k;
    for (int r = l * K; r < (l + 1) * K; r++) freem[r] = false;
}

/* ---- static:K ------------------------------------------------------------------------------ */

static int pick_static(wf_dit_policy *p, const wf_dit_view *v, wf_dit_task *out, int max_out) {
    bool freem[WF_DIT_MAX_RANKS];
    int n = 0, K = p->static_k, lanes = v->n_ranks / K, *idx = p->idx;
    count_free(v, freem);
    edf_order(v, idx);
    int lane = 0;
    for (int i = 0; i < v->n_ready && n < max_out; i++) {
        while (lane < lanes && !lane_free(freem, lane, K)) lane++;
        if (lane >= lanes) break;
        lane_task(p, v, idx[i], lane, K, freem, &out[n++]);
        lane++;
    }
    return n;
}

/* ---- rssp ---------------------------------------------------------------------------------- */

static int pick_rssp(wf_dit_policy *p, const wf_dit_view *v, wf_dit_task *out, int max_out) {
    bool freem[WF_DIT_MAX_RANKS];
    int n = 0, *idx = p->idx;
    int f = count_free(v, freem);
    edf_order(v, idx);
    for (int i = 0; i < v->n_ready && n < max_out && f > 0; i++) {
        const wf_dit_job *j = v->ready[idx[i]];
        int P = wf_dit_policy_rssp_degree(p, j);
        if (P > f) continue; /* backfill: a smaller job behind it may start */
        wf_dit_task *t = &out[n++];
        t->job = idx[i];
        t->steps = remaining_steps(j);
        take_ranks(p->cost, j, P, freem, v->n_ranks, t);
        f -= P;
    }
    return n;
}

/* ---- gf-static:K and gf-rssp (GF-DiT's baselines) ------------------------------------------ */

/* The lane size a binding policy gives job j: K, or its rssp degree. */
static int bound_size(const wf_dit_policy *p, const wf_dit_job *j) {
    return p->static_k ? p->static_k : wf_dit_policy_rssp_degree(p, j);
}

/* GF-DiT binds a request to one group at submission (round-robin over the groups of its size)
 * and each group runs its requests first come first served, one at a time, to the end; among
 * the groups whose next request finds all its ranks free, the earliest-arrived starts first
 * (its simulator's _next_startable_task). Lanes of size P are the aligned blocks of P ranks. */
static int pick_bound(wf_dit_policy *p, const wf_dit_view *v, wf_dit_task *out, int max_out) {
    bool freem[WF_DIT_MAX_RANKS];
    bool head_seen[WF_DIT_MAX_RANKS + 1][WF_DIT_MAX_RANKS];
    int n = 0, *idx = p->idx;
    count_free(v, freem);
    memset(head_seen, 0, sizeof head_seen);
    queue_order(v, idx, true);
    for (int i = 0; i < v->n_ready; i++) { /* bind the newcomers, in arrival order */
        wf_dit_job *j = v->ready[idx[i]];
        int P = bound_size(p, j), lanes = v->n_ranks / P;
        if (j->lane >= 1 && j->lane <= lanes) continue;
        if (!p->earliest_free) {
            j->lane = 1 + p->rr[P]++ % lanes;
            continue;
        }
        /* the lane whose backlog (its bound jobs' predicted time, from when it was last idle)
         * ends first; ties: the lowest */
        int best = 0;
        for (int l = 1; l < lanes; l++)
            if (p->lane_free_ms[l] < p->lane_free_ms[best]) best = l;
        double start = p->lane_free_ms[best] > v->now_ms ? p->lane_free_ms[best] : v->now_ms;
        int deg = wf_dit_policy_degree_at_most(p->cost, j, P);
        p->lane_free_ms[best] = start + wf_dit_policy_remaining_ms(p->cost, j, deg, false, remaining_steps(j));
        j->lane = 1 + best;
    }
    for (int i = 0; i < v->n_ready && n < max_out; i++) {
        const wf_dit_job *j = v->ready[idx[i]];
        int P = bound_size(p, j), l = j->lane - 1;
        if (head_seen[P][l]) continue; /* not its lane's first */
        head_seen[P][l] = true;
        if (lane_free(freem, l, P)) lane_task(p, v, idx[i], l, P, freem, &out[n++]);
    }
    return n;
}

/* ---- elastic EDF best-fit ------------------------------------------------------------------ */

static bool moves(const wf_dit_job *j, int P) { return j->n_ranks > 0 && j->n_ranks != P; }

/* The widest degree above `need` (<= limit) that is faster and as cheap in rank-time per step
 * (WF_DIT_FREE_GROWTH); need if none. */
static int cheap_wider(const wf_dit_cost *c, const wf_dit_job *j, int need, int limit) {
    double t = wf_dit_policy_step_ms(c, j, need, NULL), best_t = t;
    int best = need;
    for (int P = need + 1; P <= limit; P++) {
        double tp = wf_dit_policy_step_ms(c, j, P, NULL);
        if (tp > 0 && tp < best_t && P * tp <= (1 + WF_DIT_FREE_GROWTH) * need * t) best = P, best_t = tp;
    }
    return best;
}

/* ms until job j's next task (a chunk at degree P) ends. */
static double next_chunk_ms(const wf_dit_policy *p, const wf_dit_job *j, int P) {
    int rem = remaining_steps(j);
    return (rem < p->chunk_steps ? rem : p->chunk_steps) * wf_dit_policy_step_ms(p->cost, j, P, NULL) + p->cost->chunk_ms;
}

/* Overload triage: aside[i] for the jobs (deadline order idx) that Moore-Hodgson's rule sets
 * aside on the cluster seen as one server of WF_DIT_TRIAGE_SPEED x n_ranks single-rank work
 * per ms: walking the jobs in deadline order, their work is summed; where the sum would end past
 * a job's deadline, the job with the most work so far is set aside (its work leaves the sum).
 * Jobs that cannot meet their deadline even alone on their fastest degree are late anyway and
 * take no part; a job is never set aside for its own work alone (it may have the whole
 * cluster). Uses p->work. */
static void set_aside(wf_dit_policy *p, const wf_dit_view *v, const int *idx, bool *aside) {
    const wf_dit_cost *c = p->cost;
    double *work = p->work, sum = 0, speed = WF_DIT_TRIAGE_SPEED * v->n_ranks;
    int kept = 0;
    for (int i = 0; i < v->n_ready; i++) {
        const wf_dit_job *j = v->ready[idx[i]];
        int fast = wf_dit_policy_degree_at_most(c, j, v->n_ranks);
        double own = wf_dit_policy_remaining_ms(c, j, fast, false, p->chunk_steps);
        aside[i] = false;
        work[i] = -1; /* late anyway: not counted, never chosen */
        if (v->now_ms + own > j->deadline_ms) continue;
        work[i] = wf_dit_policy_remaining_ms(c, j, 1, false, p->chunk_steps);
        sum += work[i];
        kept++;
        if (v->now_ms + (sum / speed > own ? sum / speed : own) <= j->deadline_ms || kept < 2) continue;
        int most = -1; /* ties: the earliest deadline, the furthest behind of equals */
        for (int k = 0; k <= i; k++)
            if (!aside[k] && work[k] >= 0 && (most < 0 || work[k] > work[most])) most = k;
        aside[most] = true;
        sum -= work[most];
        kept--;
    }
}

static int pick_elastic(wf_dit_policy *p, const wf_dit_view *v, wf_dit_task *out, int max_out) {
    bool freem[WF_DIT_MAX_RANKS];
    int *idx = p->idx, *deg = p->deg;
    bool *late = p->late, *demoted = p->demoted;
    int *grown = p->grown;
    const wf_dit_cost *c = p->cost;
    int f = count_free(v, freem), n = v->n_ready;
    if (f == 0 || n == 0) return 0;
    edf_order(v, idx);
    for (int i = 0; i < n; i++) deg[i] = grown[i] = 0, late[i] = demoted[i] = false;
    set_aside(p, v, idx, p->aside);
    /* pass 1: the smallest degree meeting the deadline, in deadline order (jobs set aside by
     * the triage count as late) */
    for (int i = 0; i < n; i++) {
        const wf_dit_job *j = v->ready[idx[i]];
        if (p->aside[i]) {
            late[i] = true;
            continue;
        }
        int limit = v->n_ranks < j->max_P ? v->n_ranks : j->max_P, need = 0;
        for (int P = 1; P <= limit && !need; P++)
            if (wf_dit_cost_allows(c, P) &&
                v->now_ms + wf_dit_policy_remaining_ms(c, j, P, moves(j, P), p->chunk_steps) <= j->deadline_ms)
                need = P;
        if (!need) {
            late[i] = true;
            continue;
        }
        if (need > f) {
            /* ranks lent to a cheap growth come back when this job cannot wait for them: when
             * waiting for the earliest lent group's chunk to end would cost its deadline */
            int lent = 0;
            double wait = 1e300;
            for (int k = 0; k < i; k++)
                if (grown[k]) {
                    lent += grown[k];
                    double w = next_chunk_ms(p, v->ready[idx[k]], deg[k]);
                    wait = w < wait ? w : wait;
                }
            if (lent && f + lent >= need) {
                if (v->now_ms + wait + wf_dit_policy_remaining_ms(c, j, need, moves(j, need), p->chunk_steps) <=
                    j->deadline_ms)
                    continue; /* it can wait a chunk: the lent ranks stay */
                for (int k = i - 1; k >= 0 && f < need; k--)
                    if (grown[k]) {
                        f += grown[k];
                        deg[k] -= grown[k];
                        grown[k] = 0;
                    }
            }
        }
        if (need > f) {
            /* demote jobs with far more work left, longest first, if that makes room */
            double mine = wf_dit_policy_remaining_ms(c, j, 1, false, p->chunk_steps);
            int room = f;
            for (int k = 0; k < i; k++)
                if (deg[k] && wf_dit_policy_remaining_ms(c, v->ready[idx[k]], 1, false, p->chunk_steps) > WF_DIT_DEMOTE_RATIO * mine)
                    room += deg[k];
            if (room < need) continue;
            while (f < need) {
                int longest = -1;
                double lm = 0;
                for (int k = 0; k < i; k++) {
                    if (!deg[k]) continue;
                    double m = wf_dit_policy_remaining_ms(c, v->ready[idx[k]], 1, false, p->chunk_steps);
                    if (m > WF_DIT_DEMOTE_RATIO * mine && m > lm) lm = m, longest = k;
                }
                f += deg[longest];
                deg[longest] = grown[longest] = 0;
                demoted[longest] = true;
            }
        }
        deg[i] = need;
        f -= need;
        /* as cheap but faster (a guided image in CFG mode on 2 ranks): the extra ranks now, lent
         * (jobs later in deadline order take them back if they cannot wait) */
        int wide = cheap_wider(c, j, need, limit < need + f ? limit : need + f);
        grown[i] = wide - need;
        deg[i] = wide;
        f -= grown[i];
    }
    /* pass 2: the rest start now rather than wait: jobs whose best fit was too large for what
     * is left (largest degree that fits, deadline order); then jobs that will be late anyway,
     * one rank each (the most efficient degree), shortest remaining work first (they have lost
     * their deadline: serving the short ones first minimises their latency); demoted jobs last */
    /* late long enough: one rank before what feasible jobs would get beyond their best fit,
     * in deadline order, so that a stream of partly fitting newcomers cannot starve it; never
     * a rank a feasible job's best fit needs (that would turn one miss into more under a
     * sustained overload, e.g. tridentserve's) */
    for (int i = 0; i < n && f > 0; i++) {
        const wf_dit_job *j = v->ready[idx[i]];
        if (late[i] && !deg[i] && !demoted[i] &&
            v->now_ms > j->deadline_ms + WF_DIT_LATE_AGING * j->steps * wf_dit_policy_step_ms(c, j, 1, NULL)) {
            deg[i] = 1;
            f--;
        }
    }
    for (int i = 0; i < n && f > 0; i++)
        if (!deg[i] && !late[i] && !demoted[i]) {
            deg[i] = wf_dit_policy_degree_at_most(c, v->ready[idx[i]], f);
            f -= deg[i];
        }
    while (f > 0) {
        int best = -1;
        double best_ms = 0;
        for (int i = 0; i < n; i++) {
            if (deg[i] || !late[i] || demoted[i]) continue;
            double ms = wf_dit_policy_remaining_ms(c, v->ready[idx[i]], 1, false, p->chunk_steps);
            if (best < 0 || ms < best_ms) best = i, best_ms = ms;
        }
        if (best < 0) break;
        deg[best] = 1;
        f--;
    }
    for (int i = 0; i < n && f > 0; i++)
        if (!deg[i] && demoted[i]) {
            deg[i] = wf_dit_policy_degree_at_most(c, v->ready[idx[i]], f);
            f -= deg[i];
        }
    /* pass 3: leftovers to the most urgent: the fastest degree within its ranks plus what is
     * left, when that is faster than what it has */
    for (int i = 0; i < n && f > 0; i++) {
        if (!deg[i]) continue;
        const wf_dit_job *j = v->ready[idx[i]];
        int best = deg[i];
        double best_ms = wf_dit_policy_step_ms(c, j, deg[i], NULL);
        for (int P = deg[i] + 1; P <= deg[i] + f && P <= j->max_P; P++) {
            double ms = wf_dit_policy_step_ms(c, j, P, NULL);
            if (ms > 0 && ms < best_ms) best = P, best_ms = ms;
        }
        f -= best - deg[i];
        deg[i] = best;
    }
    int k = 0;
    for (int i = 0; i < n && k < max_out; i++) {
        if (!deg[i]) continue;
        const wf_dit_job *j = v->ready[idx[i]];
        wf_dit_task *t = &out[k++];
        t->job = idx[i];
        int rem = remaining_steps(j);
        t->steps = rem < p->chunk_steps ? rem : p->chunk_steps;
        take_ranks(c, j, deg[i], freem, v->n_ranks, t);
    }
    return k;
}

static const wf_dit_policy_ops static_ops = {"static", NULL, pick_static, NULL};
static const wf_dit_policy_ops rssp_ops = {"rssp", NULL, pick_rssp, NULL};
static const wf_dit_policy_ops elastic_ops = {"elastic", NULL, pick_elastic, NULL};
static const wf_dit_policy_ops gf_static_ops = {"gf-static", NULL, pick_bound, NULL};
static const wf_dit_policy_ops gf_rssp_ops = {"gf-rssp", NULL, pick_bound, NULL};
static const wf_dit_policy_ops gf_fcfs_ops = {"gf-fcfs", NULL, pick_bound, NULL};

const char *wf_dit_policy_names(void) {
    return "static:K (K = 1, 2, 4, 8), rssp[:T=P,...], elastic, gf-static:K, gf-fcfs:K, gf-rssp[:T=P,...]";
}

/* "K" of static:K: 1, 2, 4 or 8 and at most n_ranks */
static bool parse_k(const char *s, int n_ranks, int *k_out) {
    char *end;
    long k = strtol(s, &end, 10);
    if (end == s || *end || (k != 1 && k != 2 && k != 4 && k != 8) || k > n_ranks) return false;
    *k_out = (int)k;
    return true;
}

/* "T=P[,T=P...]" of rssp (s NULL: no table). A table the user gives (checked) names degrees
 * this world has, each size once: a P the ranks cannot form, or a size named twice, would be
 * quietly changed or dropped at run time. GF-DiT's default map (S:4) is its own and is clamped
 * to the ranks there are, as its simulator does. */
static bool parse_rssp_table(wf_dit_policy *p, const char *s, bool checked, const char *gf, char *why,
                             size_t whylen) {
    p->rssp_n = 0;
    while (s && *s) {
        int t, P, used;
        if (p->rssp_n >= 8 || sscanf(s, "%d=%d%n", &t, &P, &used) != 2 || t < 1 || P < 1 ||
            (s[used] != ',' && s[used] != 0)) {
            snprintf(why, whylen, "expected %srssp:TOKENS=P[,TOKENS=P...] (at most 8, both positive)", gf);
            return false;
        }
        if (checked && ((P & (P - 1)) || P > p->n_ranks)) {
            snprintf(why, whylen, "%d=%d: P must be a power of two (1, 2, 4, 8..) and at most the %d ranks", t, P,
                     p->n_ranks);
            return false;
        }
        for (int i = 0; i < p->rssp_n; i++)
            if (p->rssp_tokens[i] == t) {
                snprintf(why, whylen, "%d tokens named twice", t);
                return false;
            }
        p->rssp_tokens[p->rssp_n] = t;
        p->rssp_P[p->rssp_n++] = P;
        s += used + (s[used] == ',');
    }
    return true;
}

wf_status wf_dit_policy_new(const char *spec, int n_ranks, const wf_dit_cost *cost, int chunk_steps,
                            wf_dit_policy **out, char *err, size_t errlen) {
    *out = NULL;
    if (!spec || !cost || n_ranks < 1 || n_ranks > WF_DIT_MAX_RANKS || chunk_steps < 1)
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit policy: %d ranks (1..%d), chunk of %d steps", n_ranks,
                                WF_DIT_MAX_RANKS, chunk_steps);
    wf_dit_policy *p = calloc(1, sizeof *p);
    if (!p) return wf_status_errorf(err, errlen, WF_ENOMEM, "dit policy: out of memory");
    p->cost = cost;
    p->n_ranks = n_ranks;
    p->chunk_steps = chunk_steps;
    bool gf = !strncmp(spec, "gf-", 3);
    const char *name = gf ? spec + 3 : spec;
    bool fcfs = gf && !strncmp(name, "fcfs:", 5);
    if (!strncmp(name, "static:", 7) || fcfs) {
        if (!parse_k(name + (fcfs ? 5 : 7), n_ranks, &p->static_k)) {
            free(p);
            return wf_status_errorf(err, errlen, WF_EINVAL,
                                    "dit policy \"%s\": K must be 1, 2, 4 or 8 and at most the %d ranks", spec,
                                    n_ranks);
        }
        p->ops = fcfs ? &gf_fcfs_ops : gf ? &gf_static_ops : &static_ops;
        p->earliest_free = fcfs;
    } else if (!strcmp(name, "rssp") || !strncmp(name, "rssp:", 5)) {
        p->ops = gf ? &gf_rssp_ops : &rssp_ops;
        /* GF-DiT's default class map S:4, M:4, L:1, by tokens (L = 16384) */
        const char *table = name[4] == ':' ? name + 5 : gf ? "1=4,16384=1" : NULL;
        char why[128];
        if (!parse_rssp_table(p, table, name[4] == ':', gf ? "gf-" : "", why, sizeof why)) {
            free(p);
            return wf_status_errorf(err, errlen, WF_EINVAL, "dit policy \"%s\": %s", spec, why);
        }
    } else if (!strcmp(spec, "elastic")) {
        p->ops = &elastic_ops;
    } else {
        free(p);
        return wf_status_errorf(err, errlen, WF_EINVAL, "unknown dit policy \"%s\" (known: %s)", spec,
                                wf_dit_policy_names());
    }
    *out = p;
    return WF_OK;
}

void wf_dit_policy_free(wf_dit_policy *p) {
    if (!p) return;
    free(p->idx);
    free(p->deg);
    free(p->late);
    free(p->demoted);
    free(p->grown);
    free(p->aside);
    free(p->work);
    free(p);
}

bool wf_dit_policy_admit(wf_dit_policy *p, const wf_dit_view *v, const wf_dit_job *j) {
    return p->ops->admit ? p->ops->admit(p, v, j) : true;
}

int wf_dit_policy_pick(wf_dit_policy *p, const wf_dit_view *v, wf_dit_task *out, int max_out) {
    if (v->n_ready < 1 || !reserve(p, v->n_ready)) return 0;
    return p->ops->pick(p, v, out, max_out);
}

void wf_dit_policy_complete(wf_dit_policy *p, const wf_dit_job *j, double now_ms) {
    if (p->ops->complete) p->ops->complete(p, j, now_ms);
}
