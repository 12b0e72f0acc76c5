/* wf_engine: a loaded model plus everything one batch needs, and the executor that turns the
 * scheduler's task batches into one forward pass followed by sampling. */
#include "proto/base/clock.h"
#include "engine/engine.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/cpu/threadpool.h"
#include "engine/forward.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "proto/exec_thread.h"
#include "proto/base/log.h"

typedef struct wf_engine_exec {
    wf_engine *e;
    wf_kv_store *kv;
} wf_engine_exec;

struct wf_engine {
    wf_model *model;
    wf_tokenizer *tok;
    wf_threadpool *pool;
    wf_forward *fwd;
    wf_sampler *sampler;
    wf_model_info info;
    wf_chat_format chat_format;
    char *chat_template;
    int max_batch_tokens, max_seqs;
    /* per-batch bookkeeping, preallocated for max_seqs tasks */
    wf_fwd_seq *seqs;
    int *task_of_seq;
    wf_engine_exec exec;
    /* virtual model id -> adapters; vm_mu is held by a whole batch so that unbind returns
     * only when no running batch still reads the adapters */
    pthread_mutex_t vm_mu;
    struct vm_binding {
        uint32_t id;
        int n;
        wf_lora_use uses[WF_FWD_MAX_LORAS];
    } *vms;
    int n_vms, cap_vms;
    /* The executor's own thread: dispatch queues a batch here and returns; the thread runs it
     * (driving the thread pool as its caller thread) and calls done. */
    wf_exec_thread *worker;
};

static wf_status exec_thread_run(void *ctx, wf_task_batch *batch, char *msg, size_t cap);

void wf_engine_options_init(wf_engine_options *o) {
    memset(o, 0, sizeof *o);
    o->n_threads = 0;
    o->max_batch_tokens = 512;
    o->max_seqs = 64;
    o->chat_format = NULL;
}

wf_status wf_engine_open(const wf_engine_options *o, wf_engine **out, char *err, size_t errlen) {
    *out = NULL;
    wf_status st;
    if (!o || !o->model_path || o->max_batch_tokens < 1 || o->max_seqs < 1 ||
        o->n_threads < 0) {
        wf_errorf(err, errlen, "engine: invalid options (model_path, max_batch_tokens >= 1, "
                "max_seqs >= 1, n_threads >= 0)");
        return WF_EINVAL;
    }
    wf_engine *e = calloc(1, sizeof *e);
    if (!e) {
        wf_errorf(err, errlen, "engine: out of memory");
        return WF_ENOMEM;
    }
    pthread_mutex_init(&e->vm_mu, NULL);
    e->max_batch_tokens = o->max_batch_tokens;
    e->max_seqs = o->max_seqs < o->max_batch_tokens ? o->max_seqs : o->max_batch_tokens;
    if ((st = wf_model_load(o->model_path, &e->model, err, errlen)) != WF_OK) goto fail;
    const wf_model *m = e->model;
    if ((st = wf_tokenizer_from_gguf(m->gguf, &e->tok, err, errlen)) != WF_OK) goto fail;
    if (wf_tokenizer_n_vocab(e->tok) > m->hp.n_vocab) {
        wf_errorf(err, errlen, "engine: tokenizer has %d tokens but the model's vocabulary is %d",
                wf_tokenizer_n_vocab(e->tok), m->hp.n_vocab);
        st = WF_EFORMAT;
        goto fail;
    }
    wf_gguf_str tmpl;
    if (wf_gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl)) {
        e->chat_template = malloc(tmpl.len + 1);
        if (!e->chat_template) goto nomem;
        memcpy(e->chat_template, tmpl.data, tmpl.len);
        e->chat_template[tmpl.len] = 0;
    }
    if (o->chat_format) {
        if ((st = wf_chat_format_parse(o->chat_format, &e->chat_format)) != WF_OK) {
            wf_errorf(err, errlen, "engine: unknown chat format '%s'", o->chat_format);
            goto fail;
        }
    } else {
        e->chat_format = wf_chat_detect(e->chat_template);
        /* No template in the file (Gemma 3 270M's GGUF has none): the family's own format, as
         * llama.cpp's built-in formatter would render it. */
        if (e->chat_format == WF_CHAT_UNKNOWN && !e->chat_template)
            e->chat_format = wf_chat_for_arch(m->arch_name);
    }
    if (!(e->pool = wf_threadpool_new(o->n_threads))) goto nomem;
    e->exec.e = e;
    /* Two slots: the scheduler keeps at most one batch in flight per executor; the second lets
     * a tool queue the next batch while one runs. */
    if ((st = wf_exec_thread_new("cpu", 2, exec_thread_run, &e->exec, &e->worker)) != WF_OK) {
        wf_errorf(err, errlen, "engine: cannot start the executor thread");
        goto fail;
    }
    if ((st = wf_forward_new(m, e->pool, e->max_batch_tokens, e->max_seqs, 0, &e->fwd, err,
                             errlen)) != WF_OK)
        goto fail;
    if (!(e->sampler = wf_sampler_new(m->hp.n_vocab))) goto nomem;
    e->seqs = calloc((size_t)e->max_seqs, sizeof *e->seqs);
    e->task_of_seq = calloc((size_t)e->max_seqs, sizeof *e->task_of_seq);
    if (!e->seqs || !e->task_of_seq) goto nomem;
    e->info = (wf_model_info){.name = m->name,
                              .arch = m->arch_name,
                              .n_vocab = m->hp.n_vocab,
                              .n_ctx_train = m->hp.n_ctx_train,
                              .n_layers = m->hp.n_layer,
                              .n_heads = m->hp.n_head,
                              .n_kv_heads = m->hp.n_head_kv,
                              .head_dim = m->hp.head_dim,
                              .n_embd = m->hp.n_embd,
                              .weight_bytes = m->weight_bytes,
                              .matmul_macs = m->matmul_macs};
    WF_LOG_INFO("engine", NULL, "loaded %s (%s): %d layers, %d heads (%d kv), %zu MiB weights, "
                "%d threads, %zu MiB activations", m->name, m->arch_name, m->hp.n_layer,
                m->hp.n_head, m->hp.n_head_kv, m->weight_bytes >> 20,
                wf_threadpool_size(e->pool), wf_forward_memory_bytes(e->fwd) >> 20);
    *out = e;
    return WF_OK;
nomem:
    wf_errorf(err, errlen, "engine: out of memory");
    st = WF_ENOMEM;
fail:
    wf_engine_free(e);
    return st;
}

void wf_engine_free(wf_engine *e) {
    if (!e) return;
    wf_exec_thread_free(e->worker); /* first: a queued batch still runs on the engine */
    free(e->seqs);
    free(e->task_of_seq);
    wf_sampler_free(e->sampler);
    wf_forward_free(e->fwd);
    wf_threadpool_free(e->pool);
    wf_tokenizer_free(e->tok);
    free(e->chat_template);
    wf_model_free(e->model);
    free(e->vms);
    pthread_mutex_destroy(&e->vm_mu);
    free(e);
}

const wf_model_info *wf_engine_info(const wf_engine *e) {
    return &e->info;
}

const wf_tokenizer *wf_engine_tokenizer(const wf_engine *e) {
    return e->tok;
}

wf_chat_format wf_engine_chat_format(const wf_engine *e) {
    return e->chat_format;
}

const char *wf_engine_chat_template(const wf_engine *e) {
    return e->chat_template;
}

wf_kv_geometry wf_engine_kv_geometry(const wf_engine *e, int block_size) {
    return (wf_kv_geometry){.n_layers = e->model->hp.n_layer,
                            .n_kv_heads = e->model->hp.n_head_kv,
                            .head_dim = e->model->hp.head_dim,
                            .block_size = block_size,
                            .dtype = WF_KV_DTYPE_F16};
}

wf_kv_geometry wf_engine_kv_geometry_swa(const wf_engine *e, int block_size) {
    wf_kv_geometry g = wf_engine_kv_geometry(e, block_size);
    g.swa_layers = wf_forward_swa_layers(e->model);
    g.swa_window = g.swa_layers ? e->model->hp.n_swa : 0;
    return g;
}

static bool kv_matches(const wf_engine *e, const wf_kv_store *kv) {
    const wf_kv_geometry *g = &kv->geometry;
    return g->dtype == WF_KV_DTYPE_F16 && g->n_layers == e->model->hp.n_layer &&
           g->n_kv_heads == e->model->hp.n_head_kv && g->head_dim == e->model->hp.head_dim &&
           (!g->swa_layers || (g->swa_layers == wf_forward_swa_layers(e->model) &&
                               g->swa_window == e->model->hp.n_swa));
}

wf_status wf_engine_lora_load(wf_engine *e, const char *path, wf_lora **out, char *err,
                              size_t errlen) {
    return wf_lora_load(e->model, path, out, err, errlen);
}

static struct vm_binding *vm_find(wf_engine *e, uint32_t id) {
    for (int i = 0; i < e->n_vms; i++)
        if (e->vms[i].id == id) return &e->vms[i];
    return NULL;
}

wf_status wf_engine_vmodel_bind(wf_engine *e, uint32_t vmodel, const wf_lora_use *uses, int n,
                                char *err, size_t errlen) {
    if (vmodel == 0 || n < 1 || n > WF_FWD_MAX_LORAS || !uses)
        return wf_status_errorf(err, errlen, WF_EINVAL, "engine: a virtual model binds 1..%d "
                                "adapters to an id > 0", WF_FWD_MAX_LORAS);
    for (int i = 0; i < n; i++)
        if (!uses[i].lora || uses[i].lora->n_layer != e->model->hp.n_layer)
            return wf_status_errorf(err, errlen, WF_EINVAL,
                                    "engine: adapter %d is missing or of another model", i);
    pthread_mutex_lock(&e->vm_mu);
    struct vm_binding *b = vm_find(e, vmodel);
    if (!b) {
        if (e->n_vms == e->cap_vms) {
            int cap = e->cap_vms ? 2 * e->cap_vms : 16;
            void *p = realloc(e->vms, (size_t)cap * sizeof *e->vms);
            if (!p) {
                pthread_mutex_unlock(&e->vm_mu);
                return wf_status_errorf(err, errlen, WF_ENOMEM, "engine: out of memory");
            }
            e->vms = p;
            e->cap_vms = cap;
        }
        b = &e->vms[e->n_vms++];
    }
    b->id = vmodel;
    b->n = n;
    memcpy(b->uses, uses, (size_t)n * sizeof *uses);
    pthread_mutex_unlock(&e->vm_mu);
    return WF_OK;
}

wf_status wf_engine_vmodel_unbind(wf_engine *e, uint32_t vmodel) {
    pthread_mutex_lock(&e->vm_mu);
    struct vm_binding *b = vm_find(e, vmodel);
    if (b) *b = e->vms[--e->n_vms];
    pthread_mutex_unlock(&e->vm_mu);
    return b ? WF_OK : WF_ENOTFOUND;
}

void wf_engine_set_layer_hook(wf_engine *e, wf_engine_layer_fn fn, void *user) {
    wf_forward_set_layer_hook(e->fwd, fn, user);
}

/* Collects the runnable tasks into e->seqs (failing the invalid ones individually) and runs
 * the forward pass. Returns the number of sequences run, or a negative status. */
static int prepare_and_run_locked(wf_engine *e, wf_kv_store *kv, wf_task *tasks, int n_tasks,
                                  bool all_logits) {
    char msg[160];
    int n = 0, total = 0;
    for (int i = 0; i < n_tasks; i++) {
        wf_task *t = &tasks[i];
        t->status = WF_OK;
        if (t->kind == WF_TASK_FINISH) continue;
        if (t->kind != WF_TASK_PREFILL && t->kind != WF_TASK_DECODE) {
            t->status = WF_EUNSUPPORTED;
            continue;
        }
        if (t->kind == WF_TASK_DECODE && t->llm.n_tokens != 1) {
            t->status = WF_EINVAL;
            continue;
        }
        const struct vm_binding *vb = NULL;
        if (t->vmodel != 0 && !(vb = vm_find(e, t->vmodel))) {
            WF_LOG_WARN("engine", NULL, "task %llu fails: virtual model %u has no adapters",
                        (unsigned long long)t->id, t->vmodel);
            t->status = WF_ENOTFOUND;
            continue;
        }
        wf_fwd_seq s = {.tokens = t->llm.tokens,
                        .n_tokens = t->llm.n_tokens,
                        .pos = t->llm.pos,
                        .block_table = t->llm.kv.block_table,
                        .n_blocks = t->llm.kv.n_blocks,
                        .swa_block_table = t->llm.kv.swa_block_table,
                        .want_logits = all_logits || (t->llm.samples && t->llm.n_samples > 0),
                        .loras = vb ? vb->uses : NULL,
                        .n_loras = vb ? vb->n : 0};
        wf_status st = wf_forward_check_seq(e->fwd, kv, &s, msg, sizeof msg);
        if (st != WF_OK) {
            WF_LOG_WARN("engine", NULL, "task %llu fails: %s", (unsigned long long)t->id, msg);
            t->status = st;
            continue;
        }
        if (n == e->max_seqs || total + t->llm.n_tokens > e->max_batch_tokens) return WF_EINVAL;
        total += t->llm.n_tokens;
        e->task_of_seq[n] = i;
        e->seqs[n++] = s;
    }
    if (n == 0) return 0;
    wf_status st = wf_forward_run(e->fwd, kv, e->seqs, n);
    return st == WF_OK ? n : (int)st;
}

/* The bindings stay locked for the whole run: the sequences point into them. */
static int prepare_and_run(wf_engine *e, wf_kv_store *kv, wf_task *tasks, int n_tasks,
                           bool all_logits) {
    pthread_mutex_lock(&e->vm_mu);
    int n = prepare_and_run_locked(e, kv, tasks, n_tasks, all_logits);
    pthread_mutex_unlock(&e->vm_mu);
    return n;
}

static wf_status exec_run_batch(void *ctx, wf_task_batch *batch) {
    wf_engine_exec *x = ctx;
    wf_engine *e = x->e;
    if (!batch || (batch->n_tasks > 0 && !batch->tasks)) return WF_EINVAL;
    if (!kv_matches(e, x->kv)) return WF_EINVAL;
    if (batch->n_tasks > e->max_seqs) return WF_EINVAL;
    int total = 0;
    for (int i = 0; i < batch->n_tasks; i++) total += batch->tasks[i].llm.n_tokens;
    if (total > e->max_batch_tokens) return WF_EINVAL;
    uint64_t t0 = wf_clock_now_ns();
    for (int i = 0; i < batch->n_tasks; i++) batch->tasks[i].t_begin_ns = t0;
    int n = prepare_and_run(e, x->kv, batch->tasks, batch->n_tasks, false);
    if (n < 0) return (wf_status)n;
    int li = 0;
    for (int s = 0; s < n; s++) {
        if (!e->seqs[s].want_logits) continue;
        wf_task *t = &batch->tasks[e->task_of_seq[s]];
        const float *logits = wf_forward_logits(e->fwd, li++);
        for (int j = 0; j < t->llm.n_samples; j++) {
            wf_status st = wf_sampler_sample(e->sampler, logits, e->tok, &t->llm.samples[j]);
            if (st != WF_OK) {
                t->status = st;
                break;
            }
        }
    }
    uint64_t t1 = wf_clock_now_ns();
    for (int i = 0; i < batch->n_tasks; i++) batch->tasks[i].t_end_ns = t1;
    return WF_OK;
}

static wf_status exec_thread_run(void *ctx, wf_task_batch *batch, char *msg, size_t cap) {
    wf_status st = exec_run_batch(ctx, batch);
    if (st != WF_OK) wf_errorf(msg, cap, "cpu executor: %s", wf_status_str(st));
    return st;
}

static bool exec_supports(void *ctx, wf_task_kind kind) {
    (void)ctx;
    return kind == WF_TASK_PREFILL || kind == WF_TASK_DECODE || kind == WF_TASK_FINISH;
}

static wf_status exec_dispatch(void *ctx, wf_task_batch *batch, wf_executor_done_fn done,
                               void *user) {
    wf_engine_exec *x = ctx;
    return wf_exec_thread_dispatch(x->e->worker, batch, done, user);
}

static void exec_cancel(void *ctx, wf_task_batch *batch) {
    wf_engine_exec *x = ctx;
    wf_exec_thread_cancel(x->e->worker, batch);
}

static void exec_synchronize(void *ctx) {
    wf_engine_exec *x = ctx;
    wf_exec_thread_synchronize(x->e->worker);
}

/* free stays NULL: the executor belongs to the engine (wf_engine_free). */
static const wf_executor_ops exec_ops = {.name = "cpu",
                                         .supports = exec_supports,
                                         .dispatch = exec_dispatch,
                                         .cancel = exec_cancel,
                                         .synchronize = exec_synchronize,
                                         /* on the caller's thread (a gated executor's turn) */
                                         .run = exec_thread_run};

wf_executor wf_engine_executor(wf_engine *e, wf_kv_store *kv) {
    e->exec.e = e;
    e->exec.kv = kv;
    return (wf_executor){.ops = &exec_ops, .ctx = &e->exec};
}

wf_status wf_engine_forward_logits(wf_engine *e, wf_kv_store *kv, wf_task *tasks, int n_tasks,
                                   float *logits) {
    if (!kv_matches(e, kv) || n_tasks < 1 || n_tasks > e->max_seqs) return WF_EINVAL;
    int n = prepare_and_run(e, kv, tasks, n_tasks, true);
    if (n < 0) return (wf_status)n;
    for (int i = 0; i < n_tasks; i++)
        if (tasks[i].status != WF_OK) return tasks[i].status;
    size_t V = (size_t)e->model->hp.n_vocab;
    for (int s = 0; s < n; s++)
        memcpy(logits + (size_t)e->task_of_seq[s] * V, wf_forward_logits(e->fwd, s),
               V * sizeof(float));
    return WF_OK;
}
