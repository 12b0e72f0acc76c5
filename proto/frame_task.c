/* Task frame codecs (proto/frame_task.h): TASK_DISPATCH, TASK_EVENT, BATCH_DONE. */
#include "proto/frame_task.h"

#include <string.h>

#include "proto/frame_impl.h"

/* Smallest wire encodings, so that a count is checked against the bytes left before anything
 * is allocated for it (and for the arena bounds). */
#define TASK_HEADER_MIN (8u + 1u + 8u + 4u + WF__GROUP_MIN + 8u)
#define TASK_MIN (TASK_HEADER_MIN + WF__ARTIFACT_MIN) /* FINISH is the smallest kind */
#define SAMPLING_MIN (7u * 4u + 1u + 8u + 1u + 1u + 4u)
#define SAMPLE_MIN (SAMPLING_MIN + 8u + 4u + 4u + 1u)
#define RESULT_MIN (8u + 1u + 4u + 2u + 8u + 8u)
#define RESULT_SAMPLE_MIN (8u + 1u + 4u + 4u + 1u)

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static bool kind_is_llm(wf_task_kind k) { return k == WF_TASK_PREFILL || k == WF_TASK_DECODE; }
static bool kind_is_dit(wf_task_kind k) {
    return k == WF_TASK_ENCODE || k == WF_TASK_DENOISE || k == WF_TASK_DECODE_IMAGE;
}

/* ---- TASK_DISPATCH ------------------------------------------------------------------------------ */

static void fw_sample(wf__fw *w, const wf_task_sample *s) {
    if (!s->params) {
        wf__fw_fail(w, "sample without sampling params");
        return;
    }
    if (s->n_prompt < 0 || s->n_prompt > s->n_history) {
        wf__fw_fail(w, "sample: n_prompt = %d outside [0, n_history %d]", s->n_prompt,
                    s->n_history);
        return;
    }
    if (s->history_base < 0 || s->history_base > s->n_history || s->n_history > WF_FRAME_MAX_TOKENS) {
        wf__fw_fail(w, "sample: history_base = %d outside [0, n_history %d] (at most %d)",
                    s->history_base, s->n_history, WF_FRAME_MAX_TOKENS);
        return;
    }
    if (s->history_base > 0 && s->seq == 0) {
        wf__fw_fail(w, "sample: history_base = %d without a sequence (seq 0 carries its history whole)",
                    s->history_base);
        return;
    }
    wf__fw_sampling(w, s->params);
    wf__fw_u64(w, s->rng_state);
    wf__fw_u64(w, s->seq);
    wf__fw_i32(w, s->history_base);
    /* history holds the tokens from history_base on (proto/task.h). */
    wf__fw_i32s(w, s->history, s->n_history - s->history_base, WF_FRAME_MAX_TOKENS, "sample.history");
    wf__fw_i32(w, s->n_prompt);
    wf__fw_bool(w, s->suppress_eos);
}

static void fw_task(wf__fw *w, const wf_task *t) {
    if ((unsigned)t->kind >= WF_TASK_KIND_COUNT) {
        wf__fw_fail(w, "task %llu: kind %d", (unsigned long long)t->id, (int)t->kind);
        return;
    }
    wf__fw_u64(w, t->id);
    wf__fw_u8(w, (uint8_t)t->kind);
    wf__fw_u64(w, t->request_seq);
    wf__fw_u32(w, t->vmodel);
    wf__fw_group(w, &t->group, "task.group");
    wf__fw_u64(w, t->deadline_ns);
    if (kind_is_llm(t->kind)) {
        const wf_task_llm *l = &t->llm;
        if (l->pos < 0 || l->n_samples < 0 || l->n_samples > WF_FRAME_MAX_SAMPLES ||
            (l->n_samples && !l->samples)) {
            wf__fw_fail(w, "task %llu: pos %d or n_samples %d out of range",
                        (unsigned long long)t->id, l->pos, l->n_samples);
            return;
        }
        wf__fw_i32s(w, l->tokens, l->n_tokens, WF_FRAME_MAX_TOKENS, "task.tokens");
        wf__fw_i32(w, l->pos);
        wf__fw_artifact(w, &l->kv, "task.kv");
        wf__fw_u32(w, (uint32_t)l->n_samples);
        for (int i = 0; i < l->n_samples; i++) fw_sample(w, &l->samples[i]);
    } else if (kind_is_dit(t->kind)) {
        const wf_task_dit *d = &t->dit;
        if (d->num_steps < 0 || d->step_begin < 0 || d->step_begin > d->step_end ||
            d->step_end > d->num_steps) {
            wf__fw_fail(w, "task %llu: steps [%d, %d) of %d", (unsigned long long)t->id,
                        d->step_begin, d->step_end, d->num_steps);
            return;
        }
        wf__fw_i32(w, d->class_label);
        wf__fw_i32(w, d->negative_label);
        wf__fw_f32(w, d->guidance_scale);
        wf__fw_i32(w, d->sampler);
        wf__fw_i32(w, d->num_steps);
        wf__fw_i32(w, d->step_begin);
        wf__fw_i32(w, d->step_end);
        wf__fw_u64(w, d->seed);
        wf__fw_artifact(w, &d->latent, "task.latent");
        wf__fw_artifact(w, &d->image, "task.image");
    } else {
        wf__fw_artifact(w, &t->finish.artifact, "task.artifact");
    }
}

/* A local table holds released entries (-1) before swa_lo and blocks from there on
 * (kv/paged.h), so only [swa_lo, n_blocks) crosses: a long sequence's frame grows with its
 * window, not its context. -1: no local table (unsplit store, or not an LLM task). */
static void fw_swa_table(wf__fw *w, const wf_task *t) {
    const wf_artifact *kv = kind_is_llm(t->kind) ? &t->llm.kv : NULL;
    if (!kv || !kv->swa_block_table) {
        wf__fw_i32(w, -1);
        wf__fw_u32(w, 0);
        return;
    }
    const int32_t *tab = kv->swa_block_table;
    int n = kv->n_blocks, lo = 0;
    while (lo < n && tab[lo] == -1) lo++;
    for (int i = lo; i < n; i++)
        if (tab[i] < 0) {
            wf__fw_fail(w, "task %llu: kv.swa_block_table[%d] = %d: released entries (-1) must "
                        "precede held blocks", (unsigned long long)t->id, i, tab[i]);
            return;
        }
    wf__fw_i32(w, lo);
    wf__fw_i32s(w, tab + lo, n - lo, WF_FRAME_MAX_BLOCKS, "task.kv.swa_block_table");
}

wf_status wf_frame_encode_task_dispatch(const wf_task_batch *batch, void *buf, size_t cap,
                                        size_t *len, char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    if (batch->n_tasks < 0 || batch->n_tasks > WF_FRAME_MAX_TASKS ||
        (batch->n_tasks && !batch->tasks))
        wf__fw_fail(&w, "n_tasks = %d outside [0, %d]", batch->n_tasks, WF_FRAME_MAX_TASKS);
    wf__fw_u64(&w, batch->iteration);
    wf__fw_group(&w, &batch->group, "batch.group");
    wf__fw_u32(&w, (uint32_t)batch->n_tasks);
    for (int i = 0; i < batch->n_tasks && w.st == WF_OK; i++) fw_task(&w, &batch->tasks[i]);
    /* 1.1: per task, the KV accuracy budget and codec (LLM tasks) and the noise index (DiT
     * tasks), appended after the tasks so that 1.0 peers skip them. */
    wf__fw_u32(&w, (uint32_t)batch->n_tasks);
    for (int i = 0; i < batch->n_tasks && w.st == WF_OK; i++) {
        const wf_task *t = &batch->tasks[i];
        float a = kind_is_llm(t->kind) ? t->llm.kv_accuracy : 0.0f;
        if (!(a >= 0.0f && a <= 1.0f)) {
            wf__fw_fail(&w, "task %llu: kv_accuracy %g outside [0, 1]", (unsigned long long)t->id, (double)a);
            break;
        }
        wf__fw_f32(&w, a);
        wf__fw_u32(&w, kind_is_llm(t->kind) ? t->llm.kv_codec : 0);
        wf__fw_u32(&w, kind_is_dit(t->kind) ? t->dit.noise_index : 0);
    }
    /* 1.2: the sequence histories the receiver forgets before the tasks. */
    if (batch->n_history_drop < 0 || batch->n_history_drop > WF_FRAME_MAX_HISTORY_DROP ||
        (batch->n_history_drop && !batch->history_drop))
        wf__fw_fail(&w, "n_history_drop = %d outside [0, %d]", batch->n_history_drop,
                    WF_FRAME_MAX_HISTORY_DROP);
    wf__fw_bool(&w, batch->history_reset);
    wf__fw_u32(&w, (uint32_t)batch->n_history_drop);
    for (int i = 0; i < batch->n_history_drop && w.st == WF_OK; i++) wf__fw_u64(&w, batch->history_drop[i]);
    /* 1.3: per task, the sliding-window layers' table of a split KV store. */
    wf__fw_u32(&w, (uint32_t)batch->n_tasks);
    for (int i = 0; i < batch->n_tasks && w.st == WF_OK; i++) fw_swa_table(&w, &batch->tasks[i]);
    return wf__fw_finish(&w, WF_FRAME_TASK_DISPATCH, len);
}

static bool frame_at_least(const wf__fr *r, unsigned minor) {
    return r->major > 1 || r->minor >= minor;
}

static void fr_llm(wf__fr *r, wf_task_llm *l) {
    l->tokens = wf__fr_i32s(r, &l->n_tokens, WF_FRAME_MAX_TOKENS, "task.tokens");
    l->pos = wf__fr_i32_range(r, 0, INT32_MAX, "task.pos");
    wf__fr_artifact(r, &l->kv, "task.kv");
    uint32_t n = wf__fr_count(r, WF_FRAME_MAX_SAMPLES, SAMPLE_MIN, "task.n_samples");
    if (r->st != WF_OK || n == 0) return;
    wf_task_sample *s = wf__fr_alloc(r, n * sizeof *s, _Alignof(wf_task_sample), "samples");
    wf_sampling_params *p =
        wf__fr_alloc(r, n * sizeof *p, _Alignof(wf_sampling_params), "sampling params");
    if (!s || !p) return;
    memset(s, 0, n * sizeof *s);
    for (uint32_t i = 0; i < n && r->st == WF_OK; i++) {
        wf__fr_sampling(r, &p[i]);
        s[i].params = &p[i];
        s[i].rng_state = wf__fr_u64(r, "sample.rng_state");
        if (frame_at_least(r, 2)) {
            s[i].seq = wf__fr_u64(r, "sample.seq");
            s[i].history_base = wf__fr_i32_range(r, 0, WF_FRAME_MAX_TOKENS, "sample.history_base");
            int carried = 0;
            s[i].history = wf__fr_i32s(r, &carried,
                                       WF_FRAME_MAX_TOKENS - (uint32_t)s[i].history_base,
                                       "sample.history");
            s[i].n_history = s[i].history_base + carried;
            if (r->st == WF_OK && s[i].history_base > 0 && s[i].seq == 0)
                wf__fr_fail(r, WF_EPROTO, "sample: history_base %d without a sequence (seq 0)",
                            s[i].history_base);
        } else {
            s[i].history = wf__fr_i32s(r, &s[i].n_history, WF_FRAME_MAX_TOKENS, "sample.history");
        }
        s[i].n_prompt = wf__fr_i32_range(r, 0, s[i].n_history, "sample.n_prompt");
        s[i].suppress_eos = wf__fr_bool(r, "sample.suppress_eos");
    }
    l->samples = s;
    l->n_samples = (int)n;
}

static void fr_dit(wf__fr *r, wf_task_dit *d) {
    d->class_label = wf__fr_i32(r, "task.class_label");
    d->negative_label = wf__fr_i32(r, "task.negative_label");
    d->guidance_scale = wf__fr_f32(r, "task.guidance_scale");
    d->sampler = wf__fr_i32(r, "task.sampler");
    d->num_steps = wf__fr_i32_range(r, 0, INT32_MAX, "task.num_steps");
    d->step_begin = wf__fr_i32_range(r, 0, d->num_steps, "task.step_begin");
    d->step_end = wf__fr_i32_range(r, d->step_begin, d->num_steps, "task.step_end");
    d->seed = wf__fr_u64(r, "task.seed");
    d->noise_index = 0; /* 1.1 trailer */
    wf__fr_artifact(r, &d->latent, "task.latent");
    wf__fr_artifact(r, &d->image, "task.image");
    d->pixels = NULL;
    d->pixels_cap = 0;
}

static void fr_task(wf__fr *r, wf_task *t) {
    memset(t, 0, sizeof *t);
    t->id = wf__fr_u64(r, "task.id");
    unsigned kind = wf__fr_u8(r, "task.kind");
    if (r->st == WF_OK && kind >= WF_TASK_KIND_COUNT) {
        wf__fr_fail(r, WF_EPROTO, "task %llu: invalid kind %u", (unsigned long long)t->id, kind);
        return;
    }
    t->kind = (wf_task_kind)kind;
    t->request_seq = wf__fr_u64(r, "task.request_seq");
    t->vmodel = wf__fr_u32(r, "task.vmodel");
    wf__fr_group(r, &t->group, "task.group");
    t->deadline_ns = wf__fr_u64(r, "task.deadline_ns");
    if (r->st != WF_OK) return;
    if (kind_is_llm(t->kind))
        fr_llm(r, &t->llm);
    else if (kind_is_dit(t->kind))
        fr_dit(r, &t->dit);
    else
        wf__fr_artifact(r, &t->finish.artifact, "task.artifact");
}

/* The whole table is rebuilt (-1 before swa_lo), indexed like the block table: its bytes are
 * charged to the block table's on the wire (wf_frame_task_dispatch_arena_bound). */
static void fr_swa_table(wf__fr *r, wf_task *t, uint32_t i) {
    int32_t lo = wf__fr_i32_range(r, -1, WF_FRAME_MAX_BLOCKS, "task.kv.swa_lo");
    uint32_t count = wf__fr_count(r, WF_FRAME_MAX_BLOCKS, 4, "task.kv.swa_block_table");
    if (r->st != WF_OK) return;
    if (lo < 0) {
        if (count != 0) wf__fr_fail(r, WF_EPROTO, "task %u: swa_block_table entries without swa_lo", i);
        return;
    }
    if (!kind_is_llm(t->kind)) {
        wf__fr_fail(r, WF_EPROTO, "task %u: swa_block_table on a task that is not PREFILL or DECODE", i);
        return;
    }
    int n = t->llm.kv.n_blocks;
    if (lo > n || count != (uint32_t)(n - lo)) {
        wf__fr_fail(r, WF_EPROTO, "task %u: swa_block_table of %u entries from %d does not match "
                    "the %d-block table", i, count, lo, n);
        return;
    }
    int32_t *tab = n ? wf__fr_alloc(r, (size_t)n * 4, _Alignof(int32_t), "swa_block_table") : NULL;
    if (n && !tab) return;
    for (int j = 0; j < lo; j++) tab[j] = -1;
    for (int j = lo; j < n && r->st == WF_OK; j++)
        tab[j] = wf__fr_i32_range(r, 0, INT32_MAX, "task.kv.swa_block_table");
    /* non-NULL even for 0 blocks: the sender's store is split */
    static const int32_t no_blocks[1] = {-1};
    t->llm.kv.swa_block_table = tab ? tab : no_blocks;
}

wf_status wf_frame_decode_task_dispatch(const wf_frame_view *f, wf_frame_arena *arena,
                                        wf_task_batch *out, char *err, size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_TASK_DISPATCH, arena, err, errlen);
    memset(out, 0, sizeof *out);
    out->iteration = wf__fr_u64(&r, "iteration");
    wf__fr_group(&r, &out->group, "batch.group");
    uint32_t n = wf__fr_count(&r, WF_FRAME_MAX_TASKS, TASK_MIN, "n_tasks");
    if (r.st == WF_OK && n) {
        wf_task *tasks = wf__fr_alloc(&r, n * sizeof *tasks, _Alignof(wf_task), "tasks");
        for (uint32_t i = 0; tasks && i < n && r.st == WF_OK; i++) fr_task(&r, &tasks[i]);
        out->tasks = tasks;
        out->n_tasks = tasks ? (int)n : 0;
    }
    if (r.st == WF_OK && (f->hdr.major > 1 || f->hdr.minor >= 1)) {
        uint32_t m = wf__fr_u32(&r, "n_kv_accuracy");
        if (r.st == WF_OK && m != n)
            wf__fr_fail(&r, WF_EPROTO, "%u kv_accuracy values for %u tasks", m, n);
        for (uint32_t i = 0; i < m && r.st == WF_OK; i++) {
            float a = wf__fr_f32(&r, "task.kv_accuracy");
            uint32_t codec = wf__fr_u32(&r, "task.kv_codec");
            uint32_t noise_index = wf__fr_u32(&r, "task.noise_index");
            bool llm = r.st == WF_OK && kind_is_llm(out->tasks[i].kind);
            bool dit = r.st == WF_OK && kind_is_dit(out->tasks[i].kind);
            if (r.st == WF_OK && !(a >= 0.0f && a <= 1.0f))
                wf__fr_fail(&r, WF_ERANGE, "task %u: kv_accuracy %g outside [0, 1]", i, (double)a);
            /* Fields of another kind must be 0 (one encoding per batch: decode then encode
             * gives the same bytes). */
            else if (r.st == WF_OK && !llm && (f32_bits(a) != 0 || codec != 0))
                wf__fr_fail(&r, WF_EPROTO, "task %u: kv_accuracy/kv_codec on a task that is not "
                            "PREFILL or DECODE", i);
            else if (r.st == WF_OK && !dit && noise_index != 0)
                wf__fr_fail(&r, WF_EPROTO, "task %u: noise_index on a task that is not a DiT task", i);
            else if (llm) {
                out->tasks[i].llm.kv_accuracy = a;
                out->tasks[i].llm.kv_codec = codec;
            } else if (dit) {
                out->tasks[i].dit.noise_index = noise_index;
            }
        }
    }
    if (r.st == WF_OK && frame_at_least(&r, 2)) {
        out->history_reset = wf__fr_bool(&r, "history_reset");
        uint32_t nd = wf__fr_count(&r, WF_FRAME_MAX_HISTORY_DROP, 8, "n_history_drop");
        if (r.st == WF_OK && nd) {
            uint64_t *drop = wf__fr_alloc(&r, nd * sizeof *drop, _Alignof(uint64_t), "history_drop");
            for (uint32_t i = 0; drop && i < nd && r.st == WF_OK; i++) drop[i] = wf__fr_u64(&r, "history_drop");
            out->history_drop = drop;
            out->n_history_drop = drop ? (int)nd : 0;
        }
    }
    if (r.st == WF_OK && frame_at_least(&r, 3)) {
        uint32_t m = wf__fr_u32(&r, "n_swa_tables");
        if (r.st == WF_OK && m != n)
            wf__fr_fail(&r, WF_EPROTO, "%u swa tables for %u tasks", m, n);
        for (uint32_t i = 0; i < m && r.st == WF_OK; i++) fr_swa_table(&r, &out->tasks[i], i);
    }
    return wf__fr_end(&r);
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* Every allocation is charged to wire bytes of its own that no other allocation is charged to:
 * a wf_task to its task's fixed fields (>= TASK_MIN bytes), a sample and its params to the
 * sample's fixed fields (SAMPLE_MIN minus its two count fields), an i32 or logit_bias array with
 * its alignment padding to its count field and elements (at most 2x; a KV block table's count
 * and entries also pay for the task's rebuilt sliding-window table: 2 x (4n + 3) <= 2 x (4 + 4n)),
 * and the padding of each task's samples/params arrays to the task (16 bytes). So no payload can use more than its
 * length times the largest of these ratios, plus that padding. */
size_t wf_frame_task_dispatch_arena_bound(size_t payload_len) {
    size_t ratio = max3(ceil_div(sizeof(wf_task), TASK_MIN),
                        ceil_div(sizeof(wf_task_sample) + sizeof(wf_sampling_params),
                                 SAMPLE_MIN - 8),
                        2);
    return payload_len * ratio + 16 * (payload_len / TASK_MIN) + 64;
}

/* ---- TASK_EVENT ---------------------------------------------------------------------------------- */

wf_status wf_frame_encode_task_event(const wf_frame_task_event *ev, void *buf, size_t cap,
                                     size_t *len, char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    if (ev->n_results < 0 || ev->n_results > WF_FRAME_MAX_TASKS ||
        (ev->n_results && !ev->results))
        wf__fw_fail(&w, "n_results = %d outside [0, %d]", ev->n_results, WF_FRAME_MAX_TASKS);
    wf__fw_u64(&w, ev->iteration);
    wf__fw_u32(&w, (uint32_t)ev->n_results);
    for (int i = 0; i < ev->n_results && w.st == WF_OK; i++) {
        const wf_frame_task_result *t = &ev->results[i];
        if ((unsigned)t->kind >= WF_TASK_KIND_COUNT) {
            wf__fw_fail(&w, "result %d: kind %d", i, (int)t->kind);
            break;
        }
        wf__fw_u64(&w, t->task_id);
        wf__fw_u8(&w, (uint8_t)t->kind);
        wf__fw_status(&w, t->status, "result.status");
        wf__fw_str(&w, t->message, WF_FRAME_TASK_MESSAGE_MAX, "result.message");
        wf__fw_u64(&w, t->t_begin_ns);
        wf__fw_u64(&w, t->t_end_ns);
        if (kind_is_llm(t->kind)) {
            if (t->n_samples < 0 || t->n_samples > WF_FRAME_MAX_SAMPLES ||
                (t->n_samples && !t->samples)) {
                wf__fw_fail(&w, "result %d: n_samples = %d", i, t->n_samples);
                break;
            }
            wf__fw_u32(&w, (uint32_t)t->n_samples);
            for (int k = 0; k < t->n_samples; k++) {
                wf__fw_u64(&w, t->samples[k].rng_state);
                wf__fw_bool(&w, t->samples[k].out_is_eog);
                wf__fw_gen_token(&w, &t->samples[k].out);
            }
        } else if (kind_is_dit(t->kind)) {
            if (t->step_reached < 0) wf__fw_fail(&w, "result %d: step_reached < 0", i);
            wf__fw_i32(&w, t->step_reached);
        }
    }
    return wf__fw_finish(&w, WF_FRAME_TASK_EVENT, len);
}

wf_status wf_frame_decode_task_event(const wf_frame_view *f, wf_frame_arena *arena,
                                     wf_frame_task_event *out, char *err, size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_TASK_EVENT, arena, err, errlen);
    memset(out, 0, sizeof *out);
    out->iteration = wf__fr_u64(&r, "iteration");
    uint32_t n = wf__fr_count(&r, WF_FRAME_MAX_TASKS, RESULT_MIN, "n_results");
    wf_frame_task_result *res =
        n ? wf__fr_alloc(&r, n * sizeof *res, _Alignof(wf_frame_task_result), "results") : NULL;
    if (res) memset(res, 0, n * sizeof *res);
    for (uint32_t i = 0; res && i < n && r.st == WF_OK; i++) {
        wf_frame_task_result *t = &res[i];
        t->task_id = wf__fr_u64(&r, "result.task_id");
        unsigned kind = wf__fr_u8(&r, "result.kind");
        if (r.st == WF_OK && kind >= WF_TASK_KIND_COUNT)
            wf__fr_fail(&r, WF_EPROTO, "result %u: invalid kind %u", i, kind);
        t->kind = (wf_task_kind)kind;
        t->status = wf__fr_status(&r, "result.status");
        t->message = wf__fr_str(&r, WF_FRAME_TASK_MESSAGE_MAX, "result.message");
        t->t_begin_ns = wf__fr_u64(&r, "result.t_begin_ns");
        t->t_end_ns = wf__fr_u64(&r, "result.t_end_ns");
        if (r.st != WF_OK) break;
        if (kind_is_llm(t->kind)) {
            uint32_t ns =
                wf__fr_count(&r, WF_FRAME_MAX_SAMPLES, RESULT_SAMPLE_MIN, "result.n_samples");
            if (r.st != WF_OK || ns == 0) continue;
            wf_task_sample *s =
                wf__fr_alloc(&r, ns * sizeof *s, _Alignof(wf_task_sample), "result samples");
            if (!s) break;
            memset(s, 0, ns * sizeof *s);
            for (uint32_t k = 0; k < ns && r.st == WF_OK; k++) {
                s[k].rng_state = wf__fr_u64(&r, "result.rng_state");
                s[k].out_is_eog = wf__fr_bool(&r, "result.out_is_eog");
                wf__fr_gen_token(&r, &s[k].out);
            }
            t->samples = s;
            t->n_samples = (int)ns;
        } else if (kind_is_dit(t->kind)) {
            t->step_reached = wf__fr_i32_range(&r, 0, INT32_MAX, "result.step_reached");
        }
    }
    out->results = res;
    out->n_results = res ? (int)n : 0;
    return wf__fr_end(&r);
}

/* As for dispatches: a result is charged to its fixed fields but the message length (the
 * message, len + 1 bytes, to its own 2 + len), a sample to its 18 fixed bytes, the padding of
 * a result's samples array to its count field. */
size_t wf_frame_task_event_arena_bound(size_t payload_len) {
    size_t ratio = max3(ceil_div(sizeof(wf_frame_task_result), RESULT_MIN - 2),
                        ceil_div(sizeof(wf_task_sample), RESULT_SAMPLE_MIN), 2);
    return payload_len * ratio + 64;
}

void wf_frame_task_event_from_batch(wf_task_batch *batch, wf_frame_task_result *results,
                                    const char *const *messages, wf_frame_task_event *out) {
    out->iteration = batch->iteration;
    out->results = results;
    out->n_results = batch->n_tasks;
    for (int i = 0; i < batch->n_tasks; i++) {
        wf_task *t = &batch->tasks[i];
        wf_frame_task_result *res = &results[i];
        *res = (wf_frame_task_result){.task_id = t->id, .kind = t->kind, .status = t->status,
                                      .message = messages ? messages[i] : NULL,
                                      .t_begin_ns = t->t_begin_ns, .t_end_ns = t->t_end_ns};
        if (kind_is_llm(t->kind)) {
            res->samples = t->llm.samples;
            res->n_samples = t->llm.n_samples;
        } else if (kind_is_dit(t->kind)) {
            res->step_reached = t->dit.latent.kind == WF_ARTIFACT_LATENT ? t->dit.latent.latent.step
                                                                         : 0;
        }
    }
}

wf_status wf_frame_task_event_apply(const wf_frame_task_event *ev, wf_task_batch *batch,
                                    char *err, size_t errlen) {
    if (ev->iteration != batch->iteration)
        return wf_status_errorf(err, errlen, WF_EPROTO, "event of iteration %llu for batch %llu",
                                (unsigned long long)ev->iteration,
                                (unsigned long long)batch->iteration);
    for (int i = 0; i < ev->n_results; i++) {
        const wf_frame_task_result *res = &ev->results[i];
        /* Results normally come in dispatch order: try the same index first. */
        wf_task *t = i < batch->n_tasks && batch->tasks[i].id == res->task_id ? &batch->tasks[i]
                                                                               : NULL;
        for (int k = 0; !t && k < batch->n_tasks; k++)
            if (batch->tasks[k].id == res->task_id) t = &batch->tasks[k];
        if (!t)
            return wf_status_errorf(err, errlen, WF_EPROTO, "result for unknown task %llu",
                                    (unsigned long long)res->task_id);
        if (t->kind != res->kind ||
            (kind_is_llm(t->kind) && t->llm.n_samples != res->n_samples))
            return wf_status_errorf(err, errlen, WF_EPROTO,
                                    "task %llu: result of kind %s with %d samples for a %s task "
                                    "with %d",
                                    (unsigned long long)t->id, wf_task_kind_str(res->kind),
                                    res->n_samples, wf_task_kind_str(t->kind),
                                    kind_is_llm(t->kind) ? t->llm.n_samples : 0);
        t->status = res->status;
        t->t_begin_ns = res->t_begin_ns;
        t->t_end_ns = res->t_end_ns;
        if (kind_is_llm(t->kind)) {
            for (int k = 0; k < res->n_samples; k++) {
                t->llm.samples[k].rng_state = res->samples[k].rng_state;
                t->llm.samples[k].out = res->samples[k].out;
                t->llm.samples[k].out_is_eog = res->samples[k].out_is_eog;
            }
        } else if (kind_is_dit(t->kind) && t->dit.latent.kind == WF_ARTIFACT_LATENT) {
            t->dit.latent.latent.step = res->step_reached;
        }
    }
    return WF_OK;
}

/* ---- BATCH_DONE ----------------------------------------------------------------------------------- */

wf_status wf_frame_encode_batch_done(const wf_frame_batch_done *m, void *buf, size_t cap,
                                     size_t *len, char *err, size_t errlen) {
    wf__fw w;
    wf__fw_init(&w, buf, cap, err, errlen);
    wf__fw_u64(&w, m->iteration);
    wf__fw_status(&w, m->status, "status");
    wf__fw_str(&w, m->message, WF_FRAME_TASK_MESSAGE_MAX, "message");
    return wf__fw_finish(&w, WF_FRAME_BATCH_DONE, len);
}

wf_status wf_frame_decode_batch_done(const wf_frame_view *f, wf_frame_batch_done *out, char *err,
                                     size_t errlen) {
    wf__fr r;
    wf__fr_init(&r, f, WF_FRAME_BATCH_DONE, NULL, err, errlen);
    out->iteration = wf__fr_u64(&r, "iteration");
    out->status = wf__fr_status(&r, "status");
    wf__fr_str_fixed(&r, out->message, WF_FRAME_TASK_MESSAGE_MAX, "message");
    return wf__fr_end(&r);
}
