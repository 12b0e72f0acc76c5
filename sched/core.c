/* The scheduling core: request lifecycle, trajectory tasks, continuous batching with chunked
 * prefill, admission under the KV budget, preemption by recompute. Pure: the clock is an
 * argument and every effect leaves through callbacks, so the simulator runs this same code. */
#include "sched/core.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

wf_status wf_core_init(wf_core *c, const wf_core_config *cfg) {
    memset(c, 0, sizeof *c);
    if (!cfg->policy || !cfg->pool || cfg->max_batch_tokens < 1 || cfg->max_running < 1 ||
        (cfg->policy->fair && !cfg->fair) ||
        cfg->n_ctx < 2 || !cfg->cb.token || !cfg->cb.finished || !cfg->cb.retired)
        return WF_EINVAL;
    c->cfg = *cfg;
    c->max_tasks = cfg->max_running;
    c->tasks = calloc((size_t)c->max_tasks, sizeof *c->tasks);
    c->samples = calloc((size_t)c->max_tasks, sizeof *c->samples);
    c->task_req = calloc((size_t)c->max_tasks, sizeof *c->task_req);
    c->task_choice = calloc((size_t)c->max_tasks, sizeof *c->task_choice);
    c->cap_waiting = c->cap_running = 64;
    c->waiting = malloc((size_t)c->cap_waiting * sizeof *c->waiting);
    c->running = malloc((size_t)c->cap_running * sizeof *c->running);
    if (!c->tasks || !c->samples || !c->task_req || !c->task_choice || !c->waiting ||
        !c->running) {
        wf_core_free(c, 0);
        return WF_ENOMEM;
    }
    c->batch.tasks = c->tasks;
    c->batch.group = cfg->group;
    return WF_OK;
}

void wf_core_free(wf_core *c, uint64_t now_ns) {
    if (c->waiting && c->running)
        wf_core_abort_all(c, WF_FINISH_CANCELLED, WF_ECANCELLED, "scheduler shut down", now_ns);
    free(c->tasks);
    free(c->samples);
    free(c->task_req);
    free(c->task_choice);
    free(c->waiting);
    free(c->running);
    free(c->retired);
    memset(c, 0, sizeof *c);
}

static wf_status push(wf_request ***arr, int *n, int *cap, wf_request *r) {
    if (*n == *cap) {
        wf_request **grown = realloc(*arr, (size_t)*cap * 2 * sizeof **arr);
        if (!grown) return WF_ENOMEM;
        *arr = grown;
        *cap *= 2;
    }
    (*arr)[(*n)++] = r;
    return WF_OK;
}

static void remove_from(wf_request **arr, int *n, const wf_request *r) {
    for (int i = 0; i < *n; i++)
        if (arr[i] == r) {
            memmove(&arr[i], &arr[i + 1], (size_t)(*n - i - 1) * sizeof *arr);
            (*n)--;
            return;
        }
}

/* Insertion sort: the arrays are nearly sorted from one iteration to the next. */
static void sort_requests(const wf_sched_policy *pol, wf_request **arr, int n) {
    for (int i = 1; i < n; i++) {
        wf_request *x = arr[i];
        int j = i - 1;
        while (j >= 0 && pol->compare(x, arr[j]) < 0) {
            arr[j + 1] = arr[j];
            j--;
        }
        arr[j + 1] = x;
    }
}

wf_status wf_core_add(wf_core *c, wf_request *r, uint64_t now_ns) {
    /* Room for every live request on the retired list, so retiring never allocates. */
    int live = c->n_waiting + c->n_running + 1;
    if (live > c->cap_retired) {
        int cap = c->cap_retired ? c->cap_retired * 2 : 64;
        while (cap < live) cap *= 2;
        wf_request **grown = realloc(c->retired, (size_t)cap * sizeof *grown);
        if (!grown) return WF_ENOMEM;
        c->retired = grown;
        c->cap_retired = cap;
    }
    /* a re-routed request keeps its virtual model's clock (shared by the groups) */
    if (c->cfg.policy->fair && !r->fair &&
        !(r->fair = wf_fair_join(c->cfg.fair, r->spec.vmodel, r->spec.share_weight, now_ns)))
        return WF_ENOMEM;
    if (push(&c->waiting, &c->n_waiting, &c->cap_waiting, r) != WF_OK) return WF_ENOMEM;
    /* Arrival order. A request re-routed from a group that went down keeps its place; with
     * several groups the owner numbers requests (wf_lanes). */
    if (!r->serial) r->serial = ++c->next_serial;
    if (!r->times.queued_ns) r->times.queued_ns = now_ns;
    r->state = WF_REQUEST_QUEUED;
    for (int i = 0; i < r->n_choices; i++) r->choices[i].seq_id = c->next_seq_id++;
    return WF_OK;
}

static void emit_task_event(wf_core *c, wf_request *r, const wf_task *t) {
    if (t->kind <= WF_TASK_FINISH) r->tasks_by_kind[t->kind]++;
    if (t->t_begin_ns) r->last_task_begin_ns = t->t_begin_ns;
    if (t->t_end_ns) r->last_task_end_ns = t->t_end_ns;
    if (c->cfg.cb.task) c->cfg.cb.task(c->cfg.cb.user, r, t);
}

/* Terminal: the request leaves the core. Its FINISH task releases the KV artifact. */
static void retire(wf_core *c, wf_request *r, wf_request_state final_state, uint64_t now) {
    if (r->state == WF_REQUEST_RUNNING) {
        remove_from(c->running, &c->n_running, r);
    } else {
        remove_from(c->waiting, &c->n_waiting, r);
    }
    for (int i = 0; i < r->n_choices; i++) wf_kv_seq_release(c->cfg.pool, &r->choices[i].kv);
    r->state = final_state;
    r->times.finished_ns = now;
    if (r->fair) {
        wf_fair_leave(c->cfg.fair, r->fair, now);
        r->fair = NULL;
    }
    if (final_state == WF_REQUEST_FINISHED) c->finished_total++;
    else if (final_state == WF_REQUEST_FAILED) c->failed_total++;
    else c->cancelled_total++;
    wf_task fin = {.id = c->next_task_id++, .kind = WF_TASK_FINISH,
                   .request_seq = r->choices[0].seq_id, .status = WF_OK,
                   .t_begin_ns = now, .t_end_ns = now};
    emit_task_event(c, r, &fin);
    c->retired[c->n_retired++] = r;
}

/* The safe point: nothing below the caller touches the retired requests any more. */
static void flush_retired(wf_core *c) {
    for (int i = 0; i < c->n_retired; i++) c->cfg.cb.retired(c->cfg.cb.user, c->retired[i]);
    c->n_retired = 0;
}

static void finish_choice(wf_core *c, wf_request *r, int j, wf_finish_reason reason,
                          wf_status status, const char *message, uint64_t now) {
    wf_choice *ch = &r->choices[j];
    if (ch->phase == WF_CHOICE_DONE) return;
    ch->phase = WF_CHOICE_DONE;
    ch->finish = reason;
    wf_kv_seq_release(c->cfg.pool, &ch->kv);
    r->n_active--;
    if (r->state == WF_REQUEST_RUNNING) c->running_seqs--;
    c->cfg.cb.finished(c->cfg.cb.user, r, j, reason, status, message, now);
    if (r->n_active == 0)
        retire(c, r,
               reason == WF_FINISH_ERROR       ? WF_REQUEST_FAILED
               : reason == WF_FINISH_CANCELLED ? WF_REQUEST_CANCELLED
                                               : WF_REQUEST_FINISHED,
               now);
}

/* Ends every unfinished choice of r (cancel or failure); r is retired by the last one. */
static void end_request(wf_core *c, wf_request *r, wf_finish_reason reason, wf_status status,
                        const char *message, uint64_t now) {
    for (int j = 0; j < r->n_choices && r->n_active > 0; j++)
        finish_choice(c, r, j, reason, status, message, now);
}

void wf_core_abort_all(wf_core *c, wf_finish_reason reason, wf_status status,
                       const char *message, uint64_t now_ns) {
    while (c->n_running > 0) end_request(c, c->running[0], reason, status, message, now_ns);
    while (c->n_waiting > 0) end_request(c, c->waiting[0], reason, status, message, now_ns);
    flush_retired(c);
}

/* Frees every block of r and puts it back in the waiting queue: it is recomputed later
 * (prompt + generated tokens), which gives the same output as an uninterrupted run. */
static void preempt(wf_core *c, wf_request *r, uint64_t now) {
    for (int i = 0; i < r->n_choices; i++) {
        wf_choice *ch = &r->choices[i];
        wf_kv_seq_release(c->cfg.pool, &ch->kv);
        if (ch->phase != WF_CHOICE_DONE)
            ch->phase = r->prompt_sampled ? WF_CHOICE_PREFILL : WF_CHOICE_WAIT_FORK;
    }
    c->running_seqs -= r->n_active;
    remove_from(c->running, &c->n_running, r);
    r->state = WF_REQUEST_PREEMPTED;
    r->preempted_ns = now;
    r->preempted_iteration = c->iteration;
    r->n_preemptions++;
    c->preempted_total++;
    /* Cannot fail: running + waiting never exceed what was pushed into waiting before. */
    if (push(&c->waiting, &c->n_waiting, &c->cap_waiting, r) != WF_OK) abort();
}

static wf_task *new_task(wf_core *c, wf_request *r, int j, wf_task_kind kind) {
    int k = c->batch.n_tasks++;
    wf_task *t = &c->tasks[k];
    wf_choice *ch = &r->choices[j];
    memset(t, 0, sizeof *t);
    t->id = c->next_task_id++;
    t->kind = kind;
    t->request_seq = ch->seq_id;
    t->vmodel = r->spec.vmodel;
    t->group = c->batch.group;
    if (kind == WF_TASK_PREFILL || kind == WF_TASK_DECODE) {
        /* When its next token is due (TTFT, then TPOT per token: the deadline the "slo" policy
         * orders by), so that a core-sharing gate (sched/gate.h) weighs this batch against
         * image batches by the requests' real deadlines. */
        t->deadline_ns = wf__request_deadline_ns(r);
        /* The sequence's KV blocks, held whole by the group that runs it: a remote executor
         * sends the block table along (proto/frame_task.h). */
        t->llm.kv.id = ch->seq_id;
        t->llm.kv.kind = WF_ARTIFACT_KV;
        t->llm.kv.placement.kind = WF_PLACEMENT_OWNER;
        t->llm.kv.placement.holders = c->batch.group;
        t->llm.kv_accuracy = r->spec.kv_accuracy;
        t->llm.kv_codec = r->spec.kv_codec;
    }
    c->task_req[k] = r;
    c->task_choice[k] = j;
    return t;
}

static int n_samples_used(const wf_core *c) {
    int n = 0;
    for (int k = 0; k < c->batch.n_tasks; k++) n += c->tasks[k].llm.n_samples;
    return n;
}

static void fill_sample(const wf_request *r, const wf_choice *ch, wf_task_sample *s) {
    memset(s, 0, sizeof *s);
    s->params = &r->spec.sampling;
    s->rng_state = ch->rng;
    s->history = ch->tokens;
    s->n_history = ch->n_tokens;
    s->seq = ch->seq_id;
    s->n_prompt = r->spec.n_prompt;
    s->suppress_eos = r->spec.ignore_eos || ch->n_generated < r->spec.min_tokens;
}

static int fair_prefill_cap(const wf_core *c, const wf_request *r, int remaining);
/* Spends ms of r's virtual model's credit (the fair policy with a cost model). */
static void fair_spend(const wf_core *c, wf_request *r, double ms) {
    if (c->cfg.policy->fair && r->fair && c->cfg.cost) r->fair->credit -= ms;
}

/* Schedules the next prefill chunk of choice j within *budget and the free blocks.
 * Returns the tokens scheduled (0: nothing fits). */
static int plan_prefill(wf_core *c, wf_request *r, int j, int *budget) {
    wf_choice *ch = &r->choices[j];
    int remaining = ch->target - ch->kv.n_tokens;
    if (remaining <= 0 || *budget <= 0 || c->batch.n_tasks >= c->max_tasks) return 0;
    int chunk = remaining < *budget ? remaining : *budget;
    /* What both kinds of blocks allow (a split pool's local blocks bound the chunk to what
     * fits beside the window). */
    int fit = wf_kv_seq_fit_tokens(c->cfg.pool, &ch->kv) - ch->kv.n_tokens;
    if (chunk > fit) chunk = fit;
    if (!c->cfg.whole_prefill) {
        int cap = fair_prefill_cap(c, r, remaining);
        if (chunk > cap) chunk = cap;
    }
    if (c->cfg.whole_prefill) {
        /* It runs elsewhere (a prefill rank), so the TPOT budget of this group's decodes does
         * not apply; it waits for a batch with room for all of it. */
        if (chunk < remaining) return 0;
    } else if (c->plan_ms_left < INFINITY && chunk > 0) {
        /* The TPOT budget, in predicted ms: a chunk deep into a long prompt costs more per
         * token (attention) than one at its start. The floor always runs. */
        int cap = wf_cost_model_prefill_fit(c->cfg.cost, c->plan_ms_left, ch->kv.n_tokens, chunk);
        int floor_left = c->plan_prefill_floor - c->last_prefill_tokens;
        if (cap < floor_left) cap = floor_left < chunk ? floor_left : chunk;
        if (chunk > cap) chunk = cap;
    }
    bool final = ch->kv.n_tokens + chunk == ch->target && !r->prompt_sampled;
    int n_samp = 0;
    if (final)
        for (int i = 0; i < r->n_choices; i++)
            n_samp += i == j || r->choices[i].phase == WF_CHOICE_WAIT_FORK;
    if (final && n_samples_used(c) + n_samp > c->max_tasks) return 0;
    if (chunk <= 0 ||
        wf_kv_seq_reserve(c->cfg.pool, &ch->kv, ch->kv.n_tokens + chunk, c->cfg.store) != WF_OK)
        return 0;
    wf_task *t = new_task(c, r, j, WF_TASK_PREFILL);
    t->llm.tokens = ch->tokens + ch->kv.n_tokens;
    t->llm.n_tokens = chunk;
    t->llm.pos = ch->kv.n_tokens;
    t->llm.kv.block_table = ch->kv.blocks;
    t->llm.kv.n_blocks = ch->kv.n_blocks;
    t->llm.kv.swa_block_table = wf_kv_seq_swa_table(c->cfg.pool, &ch->kv);
    if (final) {
        /* The first token of every choice is drawn from these logits (n > 1 shares them). */
        t->llm.samples = c->samples + n_samples_used(c);
        for (int i = 0; i < r->n_choices; i++)
            if (i == j || r->choices[i].phase == WF_CHOICE_WAIT_FORK)
                fill_sample(r, &r->choices[i], &t->llm.samples[t->llm.n_samples++]);
    }
    *budget -= chunk;
    if (c->cfg.cost) fair_spend(c, r, c->cfg.cost->coef[1] * chunk);
    double attn = wf_cost_model_attention(t->llm.pos, chunk);
    if (c->plan_ms_left < INFINITY)
        c->plan_ms_left -= c->cfg.cost->coef[1] * chunk + c->cfg.cost->coef[3] * attn;
    c->last_prefill_tokens += chunk;
    c->last_context += attn;
    return chunk;
}

/* The running request at index >= from that the policy preempts first (NULL if none). Only
 * requests not yet given tasks this iteration (index > the one being planned) qualify. */
static wf_request *pick_victim(const wf_core *c, int from) {
    wf_request *v = NULL;
    for (int k = from; k < c->n_running; k++)
        if (!v || c->cfg.policy->victim_compare(c->running[k], v) > 0) v = c->running[k];
    return v;
}

/* Decode step of choice j. Returns false when no block could be found even after preempting
 * every request behind r in policy order (index > i). */
static bool plan_decode(wf_core *c, wf_request *r, int j, int i, int *budget, uint64_t now) {
    wf_choice *ch = &r->choices[j];
    for (;;) {
        if (wf_kv_seq_fits(c->cfg.pool, &ch->kv, ch->n_tokens)) break;
        wf_request *victim = pick_victim(c, i + 1);
        if (!victim) return false; /* nobody behind r */
        preempt(c, victim, now);
    }
    if (wf_kv_seq_reserve(c->cfg.pool, &ch->kv, ch->n_tokens, c->cfg.store) != WF_OK)
        return false;
    wf_task *t = new_task(c, r, j, WF_TASK_DECODE);
    t->llm.tokens = ch->tokens + ch->n_tokens - 1;
    t->llm.n_tokens = 1;
    t->llm.pos = ch->n_tokens - 1;
    t->llm.kv.block_table = ch->kv.blocks;
    t->llm.kv.n_blocks = ch->kv.n_blocks;
    t->llm.kv.swa_block_table = wf_kv_seq_swa_table(c->cfg.pool, &ch->kv);
    t->llm.samples = c->samples + n_samples_used(c);
    fill_sample(r, ch, &t->llm.samples[0]);
    t->llm.n_samples = 1;
    (*budget)--;
    if (c->cfg.cost) fair_spend(c, r, c->cfg.cost->coef[2]);
    c->last_decode_tokens++;
    c->last_context += ch->n_tokens;
    c->last_decode_context += ch->n_tokens;
    return true;
}

/* Sets each active choice's phase for (re)admission and reuses cached prefix blocks. */
static void admit_setup(wf_core *c, wf_request *r) {
    int leader = -1;
    for (int j = 0; j < r->n_choices; j++) {
        wf_choice *ch = &r->choices[j];
        if (ch->phase == WF_CHOICE_DONE) continue;
        if (!r->prompt_sampled) {
            if (leader >= 0) {
                ch->phase = WF_CHOICE_WAIT_FORK;
                continue;
            }
            leader = j;
            ch->target = r->spec.n_prompt;
        } else {
            ch->target = ch->n_tokens - 1; /* the last token is fed by the next decode */
        }
        ch->phase = WF_CHOICE_PREFILL;
        int n_look = r->prompt_sampled ? ch->n_tokens : r->spec.n_prompt;
        int m = wf_kv_seq_match_prefix(c->cfg.pool, &ch->kv, ch->tokens, n_look);
        if (!r->admitted_once && j == leader) r->cached_prompt_tokens = m;
        if (ch->kv.n_tokens >= ch->target) ch->phase = WF_CHOICE_DECODE;
    }
    r->admitted_once = true;
}

static void cancel_flagged(wf_core *c, wf_request **arr, int *n, uint64_t now) {
    for (int i = 0; i < *n;) {
        wf_request *r = arr[i];
        if (r->abort_status != WF_OK)
            end_request(c, r, WF_FINISH_ERROR, r->abort_status,
                        "out of memory for events: the stream could not be delivered", now);
        else if (atomic_load_explicit(&r->cancel_requested, memory_order_acquire))
            end_request(c, r, WF_FINISH_CANCELLED, WF_ECANCELLED, "cancelled", now);
        else
            i++;
    }
}

/* Blocks the first admission of r needs (its prompt or recompute, not cached blocks). */
static int blocks_to_admit(const wf_core *c, const wf_request *r) {
    int bs = wf_kv_pool_block_size(c->cfg.pool), need = 0;
    for (int j = 0; j < r->n_choices; j++) {
        const wf_choice *ch = &r->choices[j];
        if (ch->phase == WF_CHOICE_DONE) continue;
        need += (ch->n_tokens + bs - 1) / bs;
        if (!r->prompt_sampled) break; /* the choices will share the prompt */
    }
    return need;
}

/* Smooth streams (cfg.prefill_stretch > 0). The TPOT budget above lets a prompt spend what the
 * decoding requests have banked, so one iteration may stall every stream for a whole prompt:
 * TPOT stays on target on average while the inter-token latency spikes. With the cap, an
 * iteration that decodes is planned to take at most prefill_stretch x its decode-only time
 * (`decode_ms`), prefill chunks sized to fit and at least one block of prefill always running;
 * prompts then reach their first token in several short iterations instead of one long one.
 * The cap is lifted for this iteration when, at the capped rate, some prompt in line would
 * reach its first token after its TTFT deadline: time to first token outranks smoothness. */
static bool prefill_ttft_at_risk(const wf_core *c, double iter_ms, int per_iter, uint64_t now) {
    double pending = 0;
    /* Running prompts go first (step 2 of the plan), then waiting ones in policy order. */
    for (int pass = 0; pass < 2; pass++) {
        wf_request *const *arr = pass == 0 ? c->running : c->waiting;
        int n = pass == 0 ? c->n_running : c->n_waiting;
        for (int i = 0; i < n; i++) {
            const wf_request *r = arr[i];
            if (r->prompt_sampled) continue;
            double left = 0;
            for (int j = 0; j < r->n_choices; j++) {
                const wf_choice *ch = &r->choices[j];
                if (ch->phase == WF_CHOICE_PREFILL) left += ch->target - ch->kv.n_tokens;
            }
            if (pass == 1 || left == 0) left = r->spec.n_prompt; /* not admitted yet */
            pending += left;
            double done_ms = ceil(pending / per_iter) * iter_ms;
            double deadline_ms = (double)r->times.queued_ns / 1e6 + r->ttft_ms;
            if ((double)now / 1e6 + done_ms > deadline_ms) return true;
        }
    }
    return false;
}

static void apply_stall_cap(wf_core *c, double decode_ms, uint64_t now) {
    if (!(c->cfg.prefill_stretch > 1.0) || c->last_decode_tokens == 0) return;
    double stall_ms = decode_ms * (c->cfg.prefill_stretch - 1.0);
    if (!(stall_ms < c->plan_ms_left)) return; /* the TPOT budget is already tighter */
    int bs = wf_kv_pool_block_size(c->cfg.pool);
    int per_iter = wf_cost_model_prefill_fit(c->cfg.cost, stall_ms, 0, c->cfg.max_batch_tokens);
    if (per_iter < bs) per_iter = bs;
    if (prefill_ttft_at_risk(c, decode_ms + stall_ms, per_iter, now)) return;
    c->plan_ms_left = stall_ms;
    c->plan_prefill_floor = bs;
}

/* True when r's virtual model already runs its max_running requests here (its own quota:
 * r waits, and requests of other models behind it are still admitted). */
static bool vmodel_seats_full(const wf_core *c, const wf_request *r) {
    if (r->spec.vm_max_running <= 0) return false;
    int n = 0;
    for (int i = 0; i < c->n_running; i++)
        n += c->running[i]->spec.vmodel == r->spec.vmodel;
    return n >= r->spec.vm_max_running;
}

/* How far ahead (in displacement margins: max_running decodes' cost) a virtual model must be
 * of another active one to be held to its seat cap and cost credit, and to be shed to the cap.
 * Between tenants of equal load one is always a request or so ahead of another (a request of
 * 64 + 32 tokens cost ~1.2 margins on the host of BENCHMARKS.md); holding them to their shares
 * then only delays their prompts (spatial.sh, N = 4: 0.99x in one round with 0.5 margins). A
 * noisy tenant is ahead by many margins within a second. Shedding soon after holding (2.5)
 * mattered in the simulator (sched_test_fair's compute-bound case: 1.7-1.8x at 2.5, up to
 * 2.07x at 4). */
#define FAIR_HOLD 2.0
#define FAIR_SHED 2.5

/* The fair policy's batch-aware cap on r's virtual model's sequences (INT_MAX: none, as for
 * a virtual model not ahead of the others by margin). The knee comes from the cost model
 * (a / c, rounded up); without one the cap is the weighted share of max_running. */
static int fair_seat_cap(const wf_core *c, const wf_request *r, double margin, uint64_t now) {
    if (!c->cfg.policy->fair || !r->fair || !wf_fair_ahead(c->cfg.fair, r->fair, margin, now))
        return INT_MAX;
    double knee = 0.0;
    const wf_cost_model *cm = c->cfg.cost;
    if (cm && cm->coef[2] > 0.0) knee = ceil(cm->coef[0] / cm->coef[2]);
    if (cm && knee < 1.0) knee = 1.0;
    return wf_fair_seat_cap(c->cfg.fair, r->fair, c->cfg.max_running, knee, now);
}

/* The fair policy: the prompt tokens a virtual model ahead of the others may add to this
 * step, what its credit (wf_fair_refill: about one fixed step cost per step, its decodes paid
 * first) buys at b per token; 0 until that is at least a KV block (or the rest of the prompt),
 * so it runs whole blocks every few steps rather than a token per step. On a device where a
 * prompt token costs about what a decoding sequence does, a noisy tenant's 64-token prompts
 * otherwise stall its batch-mates' streams for ~10 decode steps each. */
static int fair_prefill_cap(const wf_core *c, const wf_request *r, int remaining) {
    const wf_cost_model *cm = c->cfg.cost;
    if (!c->cfg.policy->fair || !r->fair || !cm || !(cm->coef[1] > 0.0) || c->plan_credit_off ||
        !wf_fair_ahead(c->cfg.fair, r->fair, FAIR_HOLD * c->cfg.fair->displace_margin, c->plan_now))
        return INT_MAX;
    double n = floor(r->fair->credit / cm->coef[1]);
    int bs = wf_kv_pool_block_size(c->cfg.pool), least = remaining < bs ? remaining : bs;
    if (!(n >= least)) return 0;
    return n < INT_MAX ? (int)n : INT_MAX;
}

/* Sequences of virtual model v in the running set. */
static int vmodel_seqs(const wf_core *c, uint32_t v) {
    int n = 0;
    for (int i = 0; i < c->n_running; i++)
        if (c->running[i]->spec.vmodel == v) n += c->running[i]->n_active;
    return n;
}

/* True when admitting r would take its virtual model past its fair seat cap. A virtual model
 * with nothing running is always let in (a request of n choices above the cap would otherwise
 * never start). */
static bool fair_seats_full(const wf_core *c, const wf_request *r, uint64_t now) {
    if (!c->cfg.policy->fair || !r->fair) return false;
    int have = vmodel_seqs(c, r->spec.vmodel);
    return have > 0 &&
           have + r->n_active > fair_seat_cap(c, r, FAIR_HOLD * c->cfg.fair->displace_margin, now);
}

/* The fair policy: a virtual model holding more sequences than its cap (it filled the batch
 * while it was alone, or the active set changed) gives back the excess, its latest arrivals
 * first (the least progress to recompute), so that its batch-mates' steps shrink now rather
 * than after its long requests end. Its one earliest request always stays. */
static void shed_over_cap(wf_core *c, uint64_t now) {
    if (!c->cfg.policy->fair) return;
    for (int i = c->n_running - 1; i >= 0; i--) {
        wf_request *r = c->running[i];
        if (!r->fair) continue;
        int have = vmodel_seqs(c, r->spec.vmodel);
        if (have <= fair_seat_cap(c, r, FAIR_SHED * c->cfg.fair->displace_margin, now) || have == r->n_active)
            continue;
        preempt(c, r, now); /* running[i] left; i-- visits the one before it */
    }
}

/* Before planning: the most urgent waiting request may push out running requests it
 * displaces (policy), until it has a seat and blocks for its prompt. */
static void displace_for_waiting(wf_core *c, uint64_t now) {
    const wf_sched_policy *pol = c->cfg.policy;
    if (c->n_waiting == 0 || c->n_running == 0) return;
    sort_requests(pol, c->waiting, c->n_waiting);
    wf_request *w = c->waiting[0];
    if (vmodel_seats_full(c, w) || fair_seats_full(c, w, now)) return; /* it could not run anyway */
    if (w->n_preemptions > 0 && w->preempted_iteration == c->iteration) return;
    int need = blocks_to_admit(c, w) * wf_kv_pool_block_size(c->cfg.pool);
    int slack = wf_kv_pool_n_blocks(c->cfg.pool) / 100;
    while (c->n_running > 0 && (c->running_seqs + w->n_active > c->cfg.max_running ||
                                !wf_kv_pool_can_start(c->cfg.pool, need, slack))) {
        wf_request *v = pick_victim(c, 0);
        if (!pol->displaces(w, v)) return;
        preempt(c, v, now);
    }
}

/* Charges each virtual model the cost of its tasks in the planned batch, weighed as the cost
 * model weighs prefill and decode tokens, so a prompt-heavy and a decode-heavy tenant pay for
 * what they take of the step. */
static void charge_fair(wf_core *c) {
    double b = c->cfg.cost ? c->cfg.cost->coef[1] : 1.0, d = c->cfg.cost ? c->cfg.cost->coef[2] : 1.0;
    if (!(b > 0.0)) b = 1e-3;
    if (!(d > 0.0)) d = 1e-3;
    c->cfg.fair->displace_margin = d * c->cfg.max_running;
    for (int k = 0; k < c->batch.n_tasks; k++) {
        const wf_task *t = &c->tasks[k];
        wf_request *r = c->task_req[k];
        if (!r || !r->fair) continue;
        if (t->kind == WF_TASK_PREFILL) wf_fair_charge(c->cfg.fair, r->fair, b * t->llm.n_tokens);
        else if (t->kind == WF_TASK_DECODE) wf_fair_charge(c->cfg.fair, r->fair, d);
    }
}

wf_task_batch *wf_core_plan(wf_core *c, uint64_t now) {
    c->iteration++;
    c->batch.iteration = c->iteration;
    c->batch.n_tasks = 0;
    c->last_prefill_tokens = c->last_decode_tokens = 0;
    c->last_context = c->last_decode_context = 0;
    c->plan_ms_left = INFINITY;
    c->plan_prefill_floor = 0;
    c->plan_now = now;
    c->plan_credit_off = false;
    cancel_flagged(c, c->running, &c->n_running, now);
    cancel_flagged(c, c->waiting, &c->n_waiting, now);
    const wf_sched_policy *pol = c->cfg.policy;
    sort_requests(pol, c->running, c->n_running);
    int budget = c->cfg.max_batch_tokens;
    if (pol->fair && c->cfg.cost) {
        /* the bank: enough for one KV block of prompt beyond a few steps' budget */
        const double *k = c->cfg.cost->coef;
        wf_fair_refill(c->cfg.fair, k[0], k[1] * wf_kv_pool_block_size(c->cfg.pool), now);
    }
    shed_over_cap(c, now);
    if (pol->displaces) displace_for_waiting(c, now);

    /* 1. Every running decode first: streams never stall behind long prompts. */
    for (int i = 0; i < c->n_running; i++) {
        wf_request *r = c->running[i];
        int first = c->batch.n_tasks, budget_before = budget;
        double ctx_before = c->last_context, dctx_before = c->last_decode_context;
        int dec_before = c->last_decode_tokens;
        bool ok = true;
        for (int j = 0; j < r->n_choices && ok; j++) {
            if (r->choices[j].phase != WF_CHOICE_DECODE) continue;
            if (budget <= 0 || c->batch.n_tasks >= c->max_tasks) break;
            ok = plan_decode(c, r, j, i, &budget, now);
        }
        if (ok) continue;
        /* Out of blocks with nobody behind r: r itself yields (its tasks are withdrawn). */
        c->batch.n_tasks = first;
        budget = budget_before;
        c->last_context = ctx_before;
        c->last_decode_context = dctx_before;
        c->last_decode_tokens = dec_before;
        if (c->n_running == 1 && i == 0) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "KV cache too small: the request needs more than the %d blocks of %d "
                     "tokens the cache holds",
                     wf_kv_pool_n_blocks(c->cfg.pool), wf_kv_pool_block_size(c->cfg.pool));
            end_request(c, r, WF_FINISH_ERROR, WF_EFULL, msg, now);
        } else {
            preempt(c, r, now);
        }
        i--; /* r left the running array */
    }

    /* Waiting requests in policy order (the stall cap and step 3 read it). */
    for (int k = 0; k < c->n_waiting; k++) {
        wf_request *r = c->waiting[k];
        r->ttft_missed = !r->prompt_sampled &&
                         now > r->times.queued_ns + (uint64_t)(r->ttft_ms * 1e6);
    }
    sort_requests(pol, c->waiting, c->n_waiting);

    /* SLO budget. TPOT is a per-request average (time after the first token / tokens after
     * it), so what bounds this iteration is each decoding request's schedule: after it, a
     * request that has n tokens will have n intervals, due within tpot * n of its first
     * token. A request ahead of schedule (decode-only iterations are shorter than its TPOT)
     * has banked the difference, and a prompt may spend it; one behind allows only the
     * floor. The tightest allowance, minus the decodes' predicted cost, goes to prefill in
     * predicted ms (plan_prefill sizes each chunk by its cost, attention included). At least
     * max(one block, 1/8 of the budget) of prefill always runs: prompts progress. */
    double min_tpot = 0, allow_ms = INFINITY;
    const wf_cost_model *cm = c->cfg.cost;
    if (pol->tpot_budget && cm) {
        for (int i = 0; i < c->n_running; i++) {
            const wf_request *r = c->running[i];
            if (min_tpot == 0 || r->tpot_ms < min_tpot) min_tpot = r->tpot_ms;
            double allow = r->tpot_ms; /* not decoding yet: one interval */
            if (r->times.first_token_ns && r->max_generated > 0 && now > r->times.first_token_ns)
                allow = r->tpot_ms * r->max_generated -
                        (double)(now - r->times.first_token_ns) / 1e6;
            if (allow < allow_ms) allow_ms = allow;
        }
        if (min_tpot > 0) {
            double spent = wf_cost_model_predict(cm, 0, c->last_decode_tokens, c->last_context);
            int floor_tokens = wf_kv_pool_block_size(c->cfg.pool);
            if (floor_tokens < c->cfg.max_batch_tokens / 8) floor_tokens = c->cfg.max_batch_tokens / 8;
            c->plan_ms_left = allow_ms - spent;
            c->plan_prefill_floor = floor_tokens;
            apply_stall_cap(c, spent, now);
        }
    }

    /* The fair policy's credit protects decoding streams from a tenant ahead of the others;
     * with none decoding in this step there is nobody to protect, and holding its prompt back
     * could leave the step empty (the scheduler then idles, and nobody refills the credit). */
    c->plan_credit_off = c->batch.n_tasks == 0;

    /* 2. Chunks of running requests still in prefill (long prompts, recomputes). */
    for (int i = 0; i < c->n_running && budget > 0; i++) {
        wf_request *r = c->running[i];
        for (int j = 0; j < r->n_choices; j++)
            if (r->choices[j].phase == WF_CHOICE_PREFILL) plan_prefill(c, r, j, &budget);
    }

    /* 3. Admit waiting requests in policy order while budget, max_running and blocks allow. */
    for (int k = 0; k < c->n_waiting && budget > 0 && c->batch.n_tasks < c->max_tasks;) {
        wf_request *r = c->waiting[k];
        if ((r->preempted_iteration == c->iteration && r->n_preemptions > 0) ||
            vmodel_seats_full(c, r) || fair_seats_full(c, r, now)) {
            k++;
            continue;
        }
        if (c->running_seqs + r->n_active > c->cfg.max_running) break; /* keep the order */
        if (!c->cfg.whole_prefill && fair_prefill_cap(c, r, r->spec.n_prompt) == 0) {
            k++; /* ahead of the others and out of credit for now; those behind may start */
            continue;
        }
        if (pol->tpot_budget && cm) {
            /* One more stream must not push the decode-only iteration past anyone's TPOT. */
            double tightest = min_tpot > 0 && min_tpot < r->tpot_ms ? min_tpot : r->tpot_ms;
            double per_seq = c->last_decode_tokens > 0
                                 ? c->last_decode_context / c->last_decode_tokens
                                 : r->spec.n_prompt;
            double t = wf_cost_model_predict(cm, 0, c->running_seqs + r->n_active,
                                             (double)c->running_seqs * per_seq +
                                                 per_seq * r->n_active);
            if (c->n_running > 0 && t > tightest) break;
        }
        /* No predicted time left for prefill this iteration (the floor already ran). */
        if (c->plan_ms_left <= 0 && c->last_prefill_tokens >= c->plan_prefill_floor) break;
        /* Admit only if the whole prompt (what the cache does not hold) fits and leaves a
         * watermark of free blocks for the running sequences to grow into: admitting more
         * than that only buys preemptions (recompute) a few iterations later. */
        if (wf_kv_pool_available_min(c->cfg.pool) == 0) break;
        int need = blocks_to_admit(c, r) * wf_kv_pool_block_size(c->cfg.pool);
        if (c->n_running > 0 &&
            !wf_kv_pool_can_start(c->cfg.pool, need, wf_kv_pool_n_blocks(c->cfg.pool) / 100))
            break;
        admit_setup(c, r);
        int got = 0, n_prefill = 0;
        for (int j = 0; j < r->n_choices; j++)
            if (r->choices[j].phase == WF_CHOICE_PREFILL) {
                n_prefill++;
                got += plan_prefill(c, r, j, &budget);
            }
        if (n_prefill > 0 && got == 0) {
            for (int j = 0; j < r->n_choices; j++) wf_kv_seq_release(c->cfg.pool, &r->choices[j].kv);
            break; /* no room: wait for blocks, keep the order */
        }
        memmove(&c->waiting[k], &c->waiting[k + 1], (size_t)(c->n_waiting - k - 1) * sizeof *c->waiting);
        c->n_waiting--;
        if (push(&c->running, &c->n_running, &c->cap_running, r) != WF_OK) {
            end_request(c, r, WF_FINISH_ERROR, WF_ENOMEM, "out of memory", now);
            continue;
        }
        r->state = WF_REQUEST_RUNNING;
        if (!r->times.started_ns) r->times.started_ns = now;
        c->running_seqs += r->n_active;
    }

    /* 4. Running requests that could not get a block for their prefill would wait forever if
     * nothing else runs: the one last in policy order yields. */
    if (c->batch.n_tasks == 0 && c->n_running > 1) preempt(c, pick_victim(c, 0), now);
    else if (c->batch.n_tasks == 0 && c->n_running == 1 &&
             wf_kv_pool_available_min(c->cfg.pool) == 0)
        end_request(c, c->running[0], WF_FINISH_ERROR, WF_EFULL,
                    "KV cache too small for this request", now);
    if (c->cfg.policy->fair) charge_fair(c);
    flush_retired(c);
    return &c->batch;
}

/* Applies one drawn token to choice j (or ends the choice). */
static void apply_sample(wf_core *c, wf_request *r, int j, const wf_task_sample *s,
                         uint64_t now) {
    wf_choice *ch = &r->choices[j];
    ch->rng = s->rng_state;
    if (s->out_is_eog && !s->suppress_eos) {
        finish_choice(c, r, j, WF_FINISH_STOP, WF_OK, NULL, now);
        return;
    }
    ch->tokens[ch->n_tokens++] = s->out.token;
    ch->n_generated++;
    if (ch->n_generated > r->max_generated) r->max_generated = ch->n_generated;
    if (!r->times.first_token_ns) r->times.first_token_ns = now;
    c->cfg.cb.token(c->cfg.cb.user, r, j, &s->out, now);
    if (ch->n_generated >= r->max_tokens || ch->n_tokens >= c->cfg.n_ctx)
        finish_choice(c, r, j, WF_FINISH_LENGTH, WF_OK, NULL, now);
    else
        ch->phase = WF_CHOICE_DECODE;
}

void wf_core_complete(wf_core *c, wf_status status, const char *message, uint64_t now) {
    for (int k = 0; k < c->batch.n_tasks; k++) {
        wf_task *t = &c->tasks[k];
        wf_request *r = c->task_req[k];
        if (status != WF_OK && t->status == WF_OK) t->status = status;
        emit_task_event(c, r, t);
        if (r->state != WF_REQUEST_RUNNING) continue; /* failed by an earlier task */
        if (t->status != WF_OK) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s task failed: %s%s%s", wf_task_kind_str(t->kind),
                     wf_status_str(t->status), message ? ": " : "", message ? message : "");
            end_request(c, r, WF_FINISH_ERROR, t->status, msg, now);
            continue;
        }
        int j = c->task_choice[k];
        wf_choice *ch = &r->choices[j];
        if (ch->phase == WF_CHOICE_DONE) continue;
        wf_kv_seq_commit(c->cfg.pool, &ch->kv, ch->tokens, t->llm.pos + t->llm.n_tokens);
        if (t->kind == WF_TASK_DECODE) {
            apply_sample(c, r, j, &t->llm.samples[0], now);
            continue;
        }
        if (ch->kv.n_tokens < ch->target) continue; /* more chunks to come */
        if (t->llm.n_samples == 0) {
            ch->phase = WF_CHOICE_DECODE; /* a recompute caught up */
            continue;
        }
        /* Final prompt chunk: the waiting choices share the prompt's blocks (copy-on-write),
         * then each choice takes its own first token. */
        r->prompt_sampled = true;
        for (int i = 0; i < r->n_choices; i++)
            if (i != j && r->choices[i].phase == WF_CHOICE_WAIT_FORK) {
                wf_kv_seq_fork(c->cfg.pool, &ch->kv, &r->choices[i].kv);
                r->choices[i].phase = WF_CHOICE_DECODE;
            }
        /* Same walk as plan_prefill: active choices in index order, one sample each. */
        int si = 0;
        for (int i = 0; i < r->n_choices && si < t->llm.n_samples; i++)
            if (r->choices[i].phase != WF_CHOICE_DONE)
                apply_sample(c, r, i, &t->llm.samples[si++], now);
    }
    flush_retired(c);
}

int wf_core_evict(wf_core *c, wf_status status, const char *message, uint64_t now,
                  wf_request **out) {
    int n_out = 0;
    c->batch.n_tasks = 0; /* the batch in flight (if any) is void: its group is gone */
    for (int pass = 0; pass < 2; pass++) {
        wf_request **arr = pass ? c->waiting : c->running;
        int *n = pass ? &c->n_waiting : &c->n_running;
        for (int i = 0; i < *n;) {
            wf_request *r = arr[i];
            if (r->prompt_sampled) {
                /* It has streamed tokens: re-running elsewhere would repeat them. */
                end_request(c, r, WF_FINISH_ERROR, status, message, now);
                continue; /* end_request removed it from arr */
            }
            for (int j = 0; j < r->n_choices; j++) {
                wf_kv_seq_release(c->cfg.pool, &r->choices[j].kv);
                if (r->choices[j].phase != WF_CHOICE_DONE) r->choices[j].phase = WF_CHOICE_WAIT_FORK;
            }
            if (r->state == WF_REQUEST_RUNNING) c->running_seqs -= r->n_active;
            memmove(&arr[i], &arr[i + 1], (size_t)(*n - i - 1) * sizeof *arr);
            (*n)--;
            r->state = WF_REQUEST_QUEUED;
            r->admitted_once = false;
            r->cached_prompt_tokens = 0;
            out[n_out++] = r;
        }
    }
    flush_retired(c);
    return n_out;
}

void wf_core_get_load(const wf_core *c, wf_core_load *out) { wf_core_get_load_ahead(c, NULL, out); }

uint64_t wf_core_next_deadline(const wf_core *c) {
    uint64_t d = 0;
    for (int k = 0; k < 2; k++) {
        wf_request *const *list = k ? c->running : c->waiting;
        int n = k ? c->n_running : c->n_waiting;
        for (int i = 0; i < n; i++) {
            uint64_t x = wf__request_deadline_ns(list[i]);
            if (x && (d == 0 || x < d)) d = x;
        }
    }
    return d;
}

void wf_core_waiting_work(const wf_request *r, wf_waiting_work *out) {
    wf_sched_order_key(r, &out->key);
    out->prefill_tokens = out->prefill_attention = 0;
    for (int j = 0; j < r->n_choices; j++) {
        const wf_choice *ch = &r->choices[j];
        if (ch->phase == WF_CHOICE_DONE) continue;
        if (!r->prompt_sampled) { /* one prompt for every choice */
            out->prefill_tokens += r->spec.n_prompt;
            out->prefill_attention += wf_cost_model_attention(0, r->spec.n_prompt);
            break;
        }
        /* preempted: its tokens so far are computed again */
        out->prefill_tokens += ch->n_tokens - 1;
        out->prefill_attention += wf_cost_model_attention(0, ch->n_tokens - 1);
    }
}

void wf_core_load_ahead_of(const wf_core_load *running, const wf_waiting_work *waiting, int n,
                           const wf_sched_policy *policy, const wf_order_key *probe,
                           wf_core_load *out) {
    *out = *running;
    out->n_waiting = n;
    for (int i = 0; i < n; i++) {
        if (policy->key_compare(&waiting[i].key, probe) > 0) continue;
        out->pending_prefill_tokens += waiting[i].prefill_tokens;
        out->pending_prefill_attention += waiting[i].prefill_attention;
    }
}

void wf_core_get_load_ahead(const wf_core *c, const wf_request *probe, wf_core_load *out) {
    memset(out, 0, sizeof *out);
    out->n_waiting = c->n_waiting;
    for (int i = 0; i < c->n_waiting; i++) {
        const wf_request *r = c->waiting[i];
        /* Waiting work the policy orders after the newcomer does not delay its first token. */
        if (probe && c->cfg.policy->compare(r, probe) > 0) continue;
        wf_waiting_work w;
        wf_core_waiting_work(r, &w);
        out->pending_prefill_tokens += w.prefill_tokens;
        out->pending_prefill_attention += w.prefill_attention;
    }
    for (int i = 0; i < c->n_running; i++) {
        const wf_request *r = c->running[i];
        for (int j = 0; j < r->n_choices; j++) {
            const wf_choice *ch = &r->choices[j];
            if (ch->phase == WF_CHOICE_PREFILL) {
                out->pending_prefill_tokens += ch->target - ch->kv.n_tokens;
                out->pending_prefill_attention +=
                    wf_cost_model_attention(ch->kv.n_tokens, ch->target - ch->kv.n_tokens);
            }
            else if (ch->phase == WF_CHOICE_DECODE) {
                out->n_decode++;
                out->decode_context += ch->n_tokens;
            }
        }
    }
}

wf_status wf_core_admit(const wf_admission *a, int n_prompt, double ttft_slo_ms,
                        double *retry_after_s, double *pred_ms, char *msg, int msglen) {
    double drain_ms = 0, pred = 0;
    /* n groups work in parallel, each with its own batch: the queued work drains n times
     * as fast (routing keeps them about evenly loaded). */
    double share = a->n_groups > 1 ? 1.0 / a->n_groups : 1.0;
    if (a->cost)
        pred = wf_cost_model_predict_ttft(a->cost, a->max_batch_tokens,
                                          a->load.pending_prefill_tokens * share,
                                          a->load.pending_prefill_attention * share,
                                          (int)ceil(a->load.n_decode * share),
                                          a->load.decode_context * share, n_prompt, &drain_ms);
    if (pred_ms) *pred_ms = pred;
    *retry_after_s = 0;
    if (a->load.n_waiting >= a->queue_size) {
        *retry_after_s = drain_ms / 1000.0;
        snprintf(msg, (size_t)msglen, "queue full (%d requests waiting)", a->load.n_waiting);
        return WF_EFULL;
    }
    /* An idle server refuses only requests that named an SLO it cannot meet: when the
     * target is just the deployment default, waiting cannot make the answer come sooner, so
     * refusing would only turn a slow answer into none (with a useless Retry-After of 0). */
    bool idle = a->load.n_waiting == 0 && a->load.n_decode == 0 &&
                a->load.pending_prefill_tokens <= 0;
    if (a->cost && pred > a->factor * ttft_slo_ms && (a->explicit_slo || !idle)) {
        *retry_after_s = drain_ms / 1000.0;
        snprintf(msg, (size_t)msglen,
                 "predicted time to first token %.0f ms exceeds %.1f x the %.0f ms SLO", pred,
                 a->factor, ttft_slo_ms);
        return WF_EOVERLOAD;
    }
    return WF_OK;
}
