/* The DiT cluster simulator: arrivals and task ends on a virtual clock, the policy asked at
 * every boundary, task time = steps x T(tokens, P) + reshard + group formation. */
#include "sched/dit_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wf_dit_sim_config_init(wf_dit_sim_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->n_ranks = 8;
    cfg->chunk_steps = 1; /* GF-DiT schedules every step (its denoise chunk size 1) */
    cfg->max_P = 8;
    wf_dit_cost_synthetic(&cfg->cost);
    cfg->classes[0] = (wf_dit_sim_class){"S", 1024, 50, 1.5};
    cfg->classes[1] = (wf_dit_sim_class){"M", 4096, 50, 2.0};
    cfg->classes[2] = (wf_dit_sim_class){"L", 16384, 50, 6.0};
    cfg->latent_bytes_per_token = 64;
}

/* One step of class cls on P ranks: plain, or guided in its faster mode. */
static double class_step_ms(const wf_dit_sim_config *cfg, int cls, int P) {
    int tokens = cfg->classes[cls].tokens;
    return cfg->guided ? wf_dit_cost_guided_ms(&cfg->cost, tokens, P, NULL) : wf_dit_cost_step_ms(&cfg->cost, tokens, P);
}

/* The overheads of a job of `steps` steps outside its steps: one chunk_ms per daemon chunk
 * (cfg->chunk_steps steps, whatever the policy's task size: the daemon's image scheduler cuts
 * every trajectory so) and the request's own. */
static double overhead_ms(const wf_dit_sim_config *cfg, int steps) {
    return (double)((steps + cfg->chunk_steps - 1) / cfg->chunk_steps) * cfg->cost.chunk_ms + cfg->cost.request_ms;
}

double wf_dit_sim_single_ms(const wf_dit_sim_config *cfg, int cls) {
    int steps = cfg->classes[cls].steps;
    return steps * class_step_ms(cfg, cls, 1) + overhead_ms(cfg, steps);
}

double wf_dit_sim_offered_load(const wf_dit_sim_config *cfg, const wf_dit_sim_job *jobs, int n) {
    if (n < 2 || cfg->n_ranks < 1) return 0;
    double work = 0, first = jobs[0].arrival_ms, last = jobs[0].arrival_ms;
    for (int i = 0; i < n; i++) {
        work += wf_dit_sim_single_ms(cfg, jobs[i].cls);
        first = jobs[i].arrival_ms < first ? jobs[i].arrival_ms : first;
        last = jobs[i].arrival_ms > last ? jobs[i].arrival_ms : last;
    }
    return last > first ? work / (cfg->n_ranks * (last - first)) : 0;
}

/* ---- a lower bound for any policy ---------------------------------------------------------- */

/* The class's fastest time alone and its least work (rank-ms) over the allowed degrees. */
static void class_bounds(const wf_dit_sim_config *cfg, int cls, double *fastest, double *work) {
    const wf_dit_sim_class *c = &cfg->classes[cls];
    *fastest = *work = INFINITY;
    for (int P = 1; P <= cfg->n_ranks && P <= cfg->max_P; P++) {
        double t = class_step_ms(cfg, cls, P);
        if (!(t > 0)) continue;
        *fastest = fmin(*fastest, c->steps * t + overhead_ms(cfg, c->steps));
        *work = fmin(*work, c->steps * t * P);
    }
}

double wf_dit_sim_latency_bound_ms(const wf_dit_sim_config *cfg, const wf_dit_sim_job *jobs, int n) {
    if (n < 1 || cfg->n_ranks < 1) return 0;
    double fastest[WF_DIT_SIM_CLASSES], work[WF_DIT_SIM_CLASSES];
    for (int c = 0; c < WF_DIT_SIM_CLASSES; c++) class_bounds(cfg, c, &fastest[c], &work[c]);
    double *rem = malloc(sizeof *rem * (size_t)n), *arr = malloc(sizeof *arr * (size_t)n);
    double alone = 0, srpt = 0;
    for (int i = 0; i < n; i++) alone += fastest[jobs[i].cls];
    if (!rem || !arr) { /* the weaker bound alone is still a bound */
        free(rem), free(arr);
        return alone / n;
    }
    /* SRPT on one server of speed n_ranks: the active jobs' remaining work; between arrivals
     * the shortest runs; a job finishing ends its latency. O(n x active): fine at 10^4 jobs. */
    int act = 0, next = 0;
    double now = jobs[0].arrival_ms, speed = cfg->n_ranks;
    while (next < n || act > 0) {
        if (act == 0) now = fmax(now, jobs[next].arrival_ms);
        while (next < n && jobs[next].arrival_ms <= now) {
            rem[act] = work[jobs[next].cls];
            arr[act++] = jobs[next++].arrival_ms;
        }
        int s = 0;
        for (int i = 1; i < act; i++)
            if (rem[i] < rem[s]) s = i;
        double end = now + rem[s] / speed, t_next = next < n ? jobs[next].arrival_ms : INFINITY;
        if (end <= t_next) {
            srpt += end - arr[s] + cfg->cost.request_ms;
            now = end;
            rem[s] = rem[--act], arr[s] = arr[act];
        } else {
            rem[s] -= (t_next - now) * speed;
            now = t_next;
        }
    }
    free(rem), free(arr);
    return fmax(alone, srpt) / n;
}

/* The deadline of job spec i (as the run sets it). */
static double spec_deadline_ms(const wf_dit_sim_config *cfg, const wf_dit_sim_job *j) {
    double alpha = j->alpha > 0 ? j->alpha : cfg->classes[j->cls].alpha;
    return j->arrival_ms + alpha * wf_dit_sim_single_ms(cfg, j->cls);
}

typedef struct end_at {
    double end_ms;
    int i;
} end_at;

static int cmp_end(const void *a, const void *b) {
    const end_at *x = a, *y = b;
    return (x->end_ms > y->end_ms) - (x->end_ms < y->end_ms);
}

int wf_dit_sim_misses_bound(const wf_dit_sim_config *cfg, const wf_dit_sim_job *jobs, int n) {
    if (n < 1 || cfg->n_ranks < 1) return 0;
    double fastest[WF_DIT_SIM_CLASSES], work[WF_DIT_SIM_CLASSES];
    for (int c = 0; c < WF_DIT_SIM_CLASSES; c++) class_bounds(cfg, c, &fastest[c], &work[c]);
    int by_work[WF_DIT_SIM_CLASSES]; /* classes, most work first (the fewest jobs to give up) */
    for (int c = 0; c < WF_DIT_SIM_CLASSES; c++) {
        int k = c;
        while (k > 0 && work[by_work[k - 1]] < work[c]) by_work[k] = by_work[k - 1], k--;
        by_work[k] = c;
    }
    end_at *e = malloc(sizeof *e * (size_t)n);
    if (!e) return 0; /* no bound claimed */
    int late = 0, m = 0;
    for (int i = 0; i < n; i++) {
        /* its steps must end request_ms before its deadline */
        double end = spec_deadline_ms(cfg, &jobs[i]) - cfg->cost.request_ms;
        if (jobs[i].arrival_ms + fastest[jobs[i].cls] > end + cfg->cost.request_ms) late++; /* even alone */
        else e[m++] = (end_at){end, i};
    }
    qsort(e, (size_t)m, sizeof *e, cmp_end);
    int most = 0;
    for (int a = 0; a < n; a++) {
        if (a > 0 && jobs[a].arrival_ms == jobs[a - 1].arrival_ms) continue;
        double from = jobs[a].arrival_ms, sum = 0;
        int cnt[WF_DIT_SIM_CLASSES] = {0};
        for (int k = 0; k < m; k++) {
            const wf_dit_sim_job *j = &jobs[e[k].i];
            if (j->arrival_ms < from) continue;
            cnt[j->cls]++;
            sum += work[j->cls];
            double excess = sum - cfg->n_ranks * (e[k].end_ms - from);
            if (excess <= 0) continue;
            int give_up = 0; /* the fewest of these jobs whose work covers the excess */
            for (int c = 0; c < WF_DIT_SIM_CLASSES && excess > 0; c++) {
                int cl = by_work[c], need = (int)ceil(excess / work[cl]);
                int take = need < cnt[cl] ? need : cnt[cl];
                give_up += take;
                excess -= take * work[cl];
            }
            most = give_up > most ? give_up : most;
        }
    }
    free(e);
    return late + most;
}

void wf_dit_sim_write_jobs(FILE *f, const wf_dit_sim_config *cfg, int seed, bool header, const wf_dit_sim_job *jobs,
                           int n) {
    if (header) {
        fprintf(f, "ranks %d\n", cfg->n_ranks);
        for (int c = 0; c < WF_DIT_SIM_CLASSES; c++) {
            const wf_dit_sim_class *k = &cfg->classes[c];
            fprintf(f, "class %d %s %d %d %.6f\n", c, k->name, k->tokens, k->steps, overhead_ms(cfg, k->steps));
            for (int P = 1; P <= cfg->n_ranks && P <= cfg->max_P; P++) {
                double t = class_step_ms(cfg, c, P);
                if (t > 0) fprintf(f, "step %d %d %.6f\n", c, P, t);
            }
        }
    }
    for (int i = 0; i < n; i++)
        fprintf(f, "job %d %.6f %d %.6f\n", seed, jobs[i].arrival_ms, jobs[i].cls, spec_deadline_ms(cfg, &jobs[i]));
}

/* ---- the run ------------------------------------------------------------------------------- */

typedef struct running {
    int job, steps, n_ranks, ranks[WF_DIT_MAX_RANKS];
    double end_ms;
} running;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct sim {
    const wf_dit_sim_config *cfg;
    wf_dit_job *jobs;
    wf_dit_job **ready;
    int n_ready;
    running *run;
    int n_run;
    bool busy[WF_DIT_MAX_RANKS];
    uint64_t *formed; /* ids of groups formed so far (open addressing, 0 = empty) */
    size_t formed_cap, n_formed;
    double busy_rank_ms;
    double *run_ms, *rank_ms; /* per job: its tasks' time and rank-time so far */
    double *early_ms;         /* per job: rank-time of its tasks started before its deadline */
    int tasks, reshards;
} sim;

static uint64_t group_id(const int *ranks, int n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(ranks[i] + 1)) * 0x100000001B3ull;
    return h ? h : 1;
}

/* true if the group was formed before; records it otherwise. false also when out of memory
 * (the formation is then charged again: a pessimistic but safe answer). */
static bool formed_before(sim *s, uint64_t id) {
    if (s->n_formed * 2 >= s->formed_cap) {
        size_t cap = s->formed_cap ? s->formed_cap * 2 : 256;
        uint64_t *t = calloc(cap, sizeof *t);
        if (!t) return false;
        for (size_t i = 0; i < s->formed_cap; i++)
            if (s->formed[i])
                for (size_t k = s->formed[i] & (cap - 1);; k = (k + 1) & (cap - 1))
                    if (!t[k]) {
                        t[k] = s->formed[i];
                        break;
                    }
        free(s->formed);
        s->formed = t;
        s->formed_cap = cap;
    }
    for (size_t k = id & (s->formed_cap - 1);; k = (k + 1) & (s->formed_cap - 1)) {
        if (s->formed[k] == id) return true;
        if (!s->formed[k]) {
            s->formed[k] = id;
            s->n_formed++;
            return false;
        }
    }
}

static bool same_group(const wf_dit_job *j, const wf_dit_task *t) {
    if (j->n_ranks != t->n_ranks) return false;
    for (int i = 0; i < t->n_ranks; i++)
        if (j->ranks[i] != t->ranks[i]) return false;
    return true;
}

static void start_task(sim *s, const wf_dit_task *t, double now) {
    wf_dit_job *j = s->ready[t->job];
    const wf_dit_cost *c = &s->cfg->cost;
    double ms = t->steps * wf_dit_cost_mode_step_ms(c, j->tokens, t->n_ranks, t->mode) +
                (double)((t->steps + s->cfg->chunk_steps - 1) / s->cfg->chunk_steps) * c->chunk_ms;
    if (j->n_ranks > 0 && !same_group(j, t)) {
        ms += wf_dit_cost_reshard_ms(c, j->latent_bytes);
        s->reshards++;
    }
    if (t->n_ranks > 1 && c->group_form_ms > 0 && !formed_before(s, group_id(t->ranks, t->n_ranks)))
        ms += c->group_form_ms;
    running *r = &s->run[s->n_run++];
    r->job = j->id;
    r->steps = t->steps;
    r->n_ranks = t->n_ranks;
    memcpy(r->ranks, t->ranks, sizeof(int) * (size_t)t->n_ranks);
    r->end_ms = now + ms;
    for (int i = 0; i < t->n_ranks; i++) s->busy[t->ranks[i]] = true;
    j->n_ranks = t->n_ranks;
    memcpy(j->ranks, t->ranks, sizeof(int) * (size_t)t->n_ranks);
    s->busy_rank_ms += ms * t->n_ranks;
    s->run_ms[j->id] += ms;
    s->rank_ms[j->id] += ms * t->n_ranks;
    if (now < j->deadline_ms) s->early_ms[j->id] += ms * t->n_ranks;
    s->tasks++;
}

static bool valid_task(const sim *s, const wf_dit_task *t, const bool *taken) {
    if (t->job < 0 || t->job >= s->n_ready || t->steps < 1 || t->n_ranks < 1 ||
        t->n_ranks > s->cfg->n_ranks || !wf_dit_cost_allows(&s->cfg->cost, t->n_ranks))
        return false;
    const wf_dit_job *j = s->ready[t->job];
    /* a plain job runs plain; a guided one in a mode the cost model allows on its group */
    if ((t->mode == WF_DIT_COST_PLAIN) == j->guided ||
        !(wf_dit_cost_mode_step_ms(&s->cfg->cost, j->tokens, t->n_ranks, t->mode) > 0))
        return false;
    if (t->steps > j->steps - j->steps_done || taken[t->job]) return false;
    for (int i = 0; i < t->n_ranks; i++)
        if (t->ranks[i] < 0 || t->ranks[i] >= s->cfg->n_ranks || s->busy[t->ranks[i]]) return false;
    return true;
}

wf_status wf_dit_sim_run(const wf_dit_sim_config *cfg, const char *policy, const wf_dit_sim_job *specs, int n,
                         wf_dit_sim_report *rep, char *err, size_t errlen) {
    memset(rep, 0, sizeof *rep);
    if (cfg->n_ranks < 1 || cfg->n_ranks > WF_DIT_MAX_RANKS || n < 0)
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit sim: %d ranks (1..%d)", cfg->n_ranks, WF_DIT_MAX_RANKS);
    for (int i = 0; i < n; i++)
        if (specs[i].cls < 0 || specs[i].cls >= WF_DIT_SIM_CLASSES || !(specs[i].alpha >= 0) ||
            (i && specs[i].arrival_ms < specs[i - 1].arrival_ms))
            return wf_status_errorf(err, errlen, WF_EINVAL,
                                    "dit sim: job %d: class %d (0..%d), alpha %g (>= 0), arrivals in order",
                                    i, specs[i].cls, WF_DIT_SIM_CLASSES - 1, specs[i].alpha);
    wf_dit_policy *pol;
    wf_status st = wf_dit_policy_new(policy, cfg->n_ranks, &cfg->cost, cfg->chunk_steps, &pol, err, errlen);
    if (st != WF_OK) return st;
    sim s = {.cfg = cfg};
    s.jobs = calloc((size_t)n + 1, sizeof *s.jobs);
    s.ready = calloc((size_t)n + 1, sizeof *s.ready);
    s.run = calloc((size_t)cfg->n_ranks, sizeof *s.run);
    wf_dit_task *tasks = calloc((size_t)cfg->n_ranks, sizeof *tasks);
    bool *taken = calloc((size_t)n + 1, sizeof *taken);
    double *lat = calloc((size_t)n + 1, sizeof *lat), *norm = calloc((size_t)n + 1, sizeof *norm);
    s.run_ms = calloc((size_t)n + 1, sizeof *s.run_ms);
    s.rank_ms = calloc((size_t)n + 1, sizeof *s.rank_ms);
    s.early_ms = calloc((size_t)n + 1, sizeof *s.early_ms);
    st = WF_ENOMEM;
    if (!s.jobs || !s.ready || !s.run || !tasks || !taken || !lat || !norm || !s.run_ms || !s.rank_ms || !s.early_ms) {
        wf_status_errorf(err, errlen, st, "dit sim: out of memory for %d jobs", n);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const wf_dit_sim_class *c = &cfg->classes[specs[i].cls];
        wf_dit_job *j = &s.jobs[i];
        j->id = i;
        j->cls = specs[i].cls;
        j->tokens = c->tokens;
        j->steps = c->steps;
        j->max_P = cfg->max_P;
        j->guided = cfg->guided;
        j->arrival_ms = specs[i].arrival_ms;
        j->deadline_ms = spec_deadline_ms(cfg, &specs[i]);
        j->latent_bytes = cfg->latent_bytes_per_token * c->tokens;
    }
    int next = 0, done = 0, idle_waiting = 0; /* free ranks while jobs wait, since `now` */
    double now = n ? specs[0].arrival_ms : 0, first = now, last = now;
    while (done < n) {
        /* the next event: an arrival or the earliest task end */
        double t = next < n ? specs[next].arrival_ms : INFINITY;
        for (int i = 0; i < s.n_run; i++) t = s.run[i].end_ms < t ? s.run[i].end_ms : t;
        if (t == INFINITY) {
            st = wf_status_errorf(err, errlen, WF_EPROTO,
                                  "dit sim: policy %s left %d jobs waiting with every rank idle", policy, s.n_ready);
            goto out;
        }
        rep->idle_waiting_rank_ms += idle_waiting * (t - now);
        now = t;
        for (int i = 0; i < s.n_run;) {
            running *r = &s.run[i];
            if (r->end_ms > now) {
                i++;
                continue;
            }
            wf_dit_job *j = &s.jobs[r->job];
            j->steps_done += r->steps;
            for (int k = 0; k < r->n_ranks; k++) s.busy[r->ranks[k]] = false;
            if (j->steps_done >= j->steps) { /* its image decoded and sent: request_ms more */
                double fin = now + cfg->cost.request_ms;
                lat[j->id] = fin - j->arrival_ms;
                norm[j->id] = lat[j->id] / wf_dit_sim_single_ms(cfg, j->cls);
                rep->cls_jobs[j->cls]++;
                if (fin > j->deadline_ms) {
                    rep->cls_missed[j->cls]++;
                    rep->missed_rank_ms += s.rank_ms[j->id];
                    rep->missed_early_rank_ms += s.early_ms[j->id];
                }
                rep->cls_wait_mean_ms[j->cls] += lat[j->id] - s.run_ms[j->id] - cfg->cost.request_ms;
                rep->cls_rank_ms_mean[j->cls] += s.rank_ms[j->id];
                done++;
                last = fmax(last, fin);
                wf_dit_policy_complete(pol, j, now);
            } else {
                s.ready[s.n_ready++] = j;
            }
            s.run[i] = s.run[--s.n_run];
        }
        wf_dit_view v = {.now_ms = now, .n_ranks = cfg->n_ranks, .busy = s.busy, .ready = s.ready,
                         .n_ready = s.n_ready};
        while (next < n && specs[next].arrival_ms <= now) {
            wf_dit_job *j = &s.jobs[next++];
            v.n_ready = s.n_ready;
            if (wf_dit_policy_admit(pol, &v, j)) {
                s.ready[s.n_ready++] = j;
            } else { /* refused: a missed deadline */
                lat[j->id] = 0;
                rep->cls_jobs[j->cls]++;
                rep->cls_missed[j->cls]++;
                done++;
            }
        }
        v.n_ready = s.n_ready;
        int k = s.n_ready ? wf_dit_policy_pick(pol, &v, tasks, cfg->n_ranks) : 0;
        for (int i = 0; i < k; i++) {
            if (!valid_task(&s, &tasks[i], taken)) {
                st = wf_status_errorf(err, errlen, WF_EPROTO, "dit sim: policy %s gave an invalid task", policy);
                goto out;
            }
            taken[tasks[i].job] = true;
            start_task(&s, &tasks[i], now);
        }
        /* drop the started jobs from the ready list (order kept: deterministic ties) */
        int w = 0;
        for (int i = 0; i < s.n_ready; i++) {
            if (taken[i]) taken[i] = false;
            else s.ready[w++] = s.ready[i];
        }
        s.n_ready = w;
        idle_waiting = 0;
        if (s.n_ready)
            for (int r = 0; r < cfg->n_ranks; r++) idle_waiting += !s.busy[r];
    }
    rep->n_jobs = n;
    for (int c = 0; c < WF_DIT_SIM_CLASSES; c++) rep->n_missed += rep->cls_missed[c];
    rep->makespan_ms = last - first;
    double sum = 0, nsum = 0;
    for (int i = 0; i < n; i++) {
        sum += lat[i], nsum += norm[i];
        rep->cls_latency_mean_ms[s.jobs[i].cls] += lat[i];
    }
    for (int c = 0; c < WF_DIT_SIM_CLASSES; c++)
        if (rep->cls_jobs[c]) {
            rep->cls_latency_mean_ms[c] /= rep->cls_jobs[c];
            rep->cls_wait_mean_ms[c] /= rep->cls_jobs[c];
            rep->cls_rank_ms_mean[c] /= rep->cls_jobs[c];
        }
    if (n > 0) {
        rep->latency_mean_ms = sum / n;
        rep->norm_latency_mean = nsum / n;
        qsort(lat, (size_t)n, sizeof *lat, cmp_double);
        rep->latency_p95_ms = lat[(size_t)ceil(0.95 * n) - 1];
        rep->latency_p99_ms = lat[(size_t)ceil(0.99 * n) - 1];
    }
    if (rep->makespan_ms > 0) {
        rep->throughput_rps = n / (rep->makespan_ms / 1000.0);
        rep->utilisation = s.busy_rank_ms / (cfg->n_ranks * rep->makespan_ms);
    }
    rep->tasks = s.tasks;
    rep->reshards = s.reshards;
    rep->groups_formed = (int)s.n_formed;
    st = WF_OK;
out:
    wf_dit_policy_free(pol);
    free(s.jobs);
    free(s.ready);
    free(s.run);
    free(s.formed);
    free(tasks);
    free(taken);
    free(lat);
    free(norm);
    free(s.run_ms);
    free(s.rank_ms);
    free(s.early_ms);
    return st;
}
