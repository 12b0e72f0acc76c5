/* weftd's assembly of modules (see daemon.h): engine -> KV store -> executor -> scheduler ->
 * the adapters the HTTP server uses. */
#include "server/daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/dit/dit_exec.h"
#include "engine/engine.h"
#include "proto/base/clock.h"
#include "proto/base/handoff.h"
#include "proto/base/log.h"
#include "sched/cost_model.h"
#include "sched/defaults.h"
#include "sched/gate.h"
#include "server/engine_backend.h"
#include "server/png.h"
#ifdef WEFT_HAVE_WORKERS
#include "kv/kv_controller.h"
#include "server/workers/dit_router.h"
#include "server/workers/pool.h"
#endif

/* Every DiT model and the LLM take a gated executor of the one gate (--share-cores). */
_Static_assert(WF_SERVER_MAX_IMAGE_MODELS + 1 <= WF_GATE_MAX_EXECUTORS, "gate too small for the models");

struct wf_daemon {
    wf_engine *engine;
    wf_kv_store kv;
    bool kv_on;
    wf_sched *sched;
    wf_engine_adapter adapter;
#ifdef WEFT_HAVE_WORKERS
    wf_workers *workers;
    wf_dit_router *dit_router;  /* the DiT's DENOISE chunks on the workers */
    int dit_router_model;       /* its image scheduler model id */
    int dit_router_dit;         /* its index in dits */
    wf_handoff calib_events;    /* calibrate_requests' events: freed after the image scheduler
                                 * (a push reads the queue after the consumer has its item) */
    bool calib_events_init;
    int vm_wait_ms;             /* run-time virtual models: how long the workers may take */
#endif
    wf_dit_exec *dits[WF_SERVER_MAX_IMAGE_MODELS];
    char dit_names[WF_SERVER_MAX_IMAGE_MODELS][256];
    wf_server_image_model image_models[WF_SERVER_MAX_IMAGE_MODELS];
    int n_dits;
    wf_image_sched *images;
    /* --share-cores: LLM (class 0) and DiT (class 1) batches take turns */
    wf_gate *gate;
    wf_gated_executor *gated_llm;
    bool share_batch;         /* --share-turns batch */
    wf_gated_executor *gated_dits[WF_SERVER_MAX_IMAGE_MODELS];
    bool pd;                  /* prefill and decode workers */
};

void wf_daemon_params_init(wf_daemon_params *p) {
    memset(p, 0, sizeof *p);
    p->kv_memory_mb = WF_DEFAULT_KV_MEMORY_MB;
    p->policy = WF_DEFAULT_POLICY;
    p->queue_size = WF_DEFAULT_QUEUE_SIZE;
    p->max_batch_tokens = WF_DEFAULT_MAX_BATCH_TOKENS;
    p->max_running = WF_DEFAULT_MAX_RUNNING;
    p->default_ttft_ms = WF_DEFAULT_TTFT_MS;
    p->default_tpot_ms = WF_DEFAULT_TPOT_MS;
    p->admission_factor = WF_DEFAULT_ADMISSION_FACTOR;
    p->prefill_stretch = WF_DEFAULT_PREFILL_STRETCH;
    p->local_workers = -1;
    p->world_host = "127.0.0.1";
    p->exe = "/proc/self/exe";
    p->log_level = "info";
    p->heartbeat_ms = 500;
    p->worker_timeout_ms = 30000;
    p->join_timeout_ms = 120000;
    p->image_chunk_steps = WF_DEFAULT_IMAGE_CHUNK_STEPS;
    p->image_batching = true;
    p->image_max_batch = 8;
    p->share_cores = true;
    p->share_min = WF_DEFAULT_SHARE_MIN;
    p->share_ahead = true; /* --share-turns ahead: won over batch with the gate's runner (BENCHMARKS.md) */
    p->kv_window_release = true;
}

static int dit_class_index(void *ctx, const char *name) { return wf_dit_exec_class_index(ctx, name); }
static wf_status dit_check_schedule(void *ctx, int sampler, int steps, char *err, size_t errlen) {
    return wf_dit_exec_check_schedule(ctx, sampler, steps, err, errlen);
}

/* The DiTs: one executor each, all under one image scheduler. */
#ifdef WEFT_HAVE_WORKERS
#define CALIB_REQUESTS 5
#define CALIB_REQUEST_STEPS 4

/* The cost model's request_ms measured at start-up, as the served requests then correct it
 * (wf_daemon_observe_image): CALIB_REQUESTS one-image requests of the model the DiT router
 * serves, one at a time through the image scheduler (ENCODE, DENOISE chunks on the workers,
 * DECODE_IMAGE), each timed from its submit to its PNG's base64 (the answer's body; the HTTP
 * exchange is not there yet). Their chunks teach chunk_ms too. A failure only logs. */
static void calibrate_requests(wf_daemon *d) {
    if (wf_handoff_init(&d->calib_events, 0, NULL, NULL) != WF_OK) return;
    d->calib_events_init = true;
    wf_handoff *events = &d->calib_events;
    const wf_dit_exec_info *in = wf_dit_exec_get_info(d->dits[d->dit_router_dit]);
    wf_image_spec spec = {.model = d->dit_router_model, .n = 1, .class_label = 0, .negative_label = -1,
                          .guidance_scale = in->default_guidance, .sampler = -1,
                          .num_steps = CALIB_REQUEST_STEPS, .seed = 1};
    wf_jbuf png = {0}, b64 = {0};
    for (int k = 0; k < CALIB_REQUESTS; k++) {
        snprintf(spec.id, sizeof spec.id, "calibration-%d", k);
        wf_image_request *req;
        char why[160] = "";
        uint64_t t0 = wf_clock_now_ns();
        wf_status st = wf_image_sched_submit(d->images, &spec, events, NULL, &req, why, sizeof why, NULL);
        if (st != WF_OK) {
            WF_LOG_WARN("dit", NULL, "request calibration: %s %s", wf_status_str(st), why);
            break;
        }
        /* FINISHED always comes (a lost worker fails the request): until then the scheduler
         * holds req and pushes into events. A slow one is cancelled, not abandoned. */
        wf_image_event *fin = NULL;
        bool cancelled = false;
        while (!fin) {
            if (!wf_handoff_wait(events, 30000) && !cancelled) {
                WF_LOG_WARN("dit", NULL, "request calibration: no answer in 30 s, cancelled");
                wf_image_sched_cancel(d->images, req);
                cancelled = true;
            }
            for (wf_handoff_item *it = wf_handoff_take_all(events), *next; it; it = next) {
                next = it->next;
                wf_image_event *ev = (wf_image_event *)it;
                if (ev->kind == WF_IMAGE_EVENT_FINISHED) fin = ev;
                else wf_image_event_free(ev);
            }
        }
        st = fin->status;
        if (st == WF_OK) {
            wf_jbuf_reset(&png);
            wf_jbuf_reset(&b64);
            st = wf_png_encode(wf_image_request_pixels(req), in->image_width, in->image_height,
                               in->image_channels, &png);
            if (st == WF_OK) wf_base64_append(&b64, png.data, png.len);
        }
        double ms = (double)(wf_clock_now_ns() - t0) / 1e6;
        if (st == WF_OK && fin->alone)
            wf_dit_router_observe_request(d->dit_router, fin->steps_run, spec.guidance_scale > 1.0f,
                                          fin->group_size, ms);
        else
            WF_LOG_WARN("dit", NULL, "request calibration: %s %s", wf_status_str(st), fin->message);
        wf_image_event_free(fin);
        wf_image_sched_release(d->images, req);
        if (st != WF_OK) break;
    }
    wf_jbuf_free(&png);
    wf_jbuf_free(&b64);
    /* Nobody sent these: the counters start from the first served request. */
    wf_image_sched_reset_stats(d->images);
    wf_dit_router_reset_stats(d->dit_router);
}
#endif

static wf_status open_dits(wf_daemon *d, const wf_daemon_params *p, char *err, size_t errlen) {
    if (p->n_dits <= 0) return WF_OK;
    if (p->n_dits > WF_SERVER_MAX_IMAGE_MODELS)
        return wf_status_errorf(err, errlen, WF_EINVAL, "at most %d DiT models", WF_SERVER_MAX_IMAGE_MODELS);
    wf_image_sched_options io;
    wf_image_sched_options_init(&io);
    io.chunk_steps = p->image_chunk_steps > 0 ? p->image_chunk_steps : 1;
    io.batching = p->image_batching;
    io.fcfs = p->image_fcfs;
    io.queue_size = p->queue_size;
    wf_status st = wf_image_sched_new(&io, &d->images);
    if (st != WF_OK) return wf_status_errorf(err, errlen, st, "image scheduler: %s", wf_status_str(st));
    for (int i = 0; i < p->n_dits; i++) {
        wf_dit_exec_options xo;
        wf_dit_exec_options_init(&xo);
        xo.model_path = p->dit_paths[i];
        xo.n_threads = p->n_threads;
        wf_dit_exec_options_set_batch(&xo, p->image_max_batch);
        xo.max_pixels = p->image_max_pixels;
        char xerr[400];
        st = wf_dit_exec_open(&xo, &d->dits[i], xerr, sizeof xerr);
        if (st != WF_OK) return wf_status_errorf(err, errlen, st, "DiT %s: %s", p->dit_paths[i], xerr);
        d->n_dits = i + 1;
        const wf_dit_exec_info *in = wf_dit_exec_get_info(d->dits[i]);
        wf_image_geometry g = {.width = in->image_width,
                               .height = in->image_height,
                               .channels = in->image_channels,
                               .latent_channels = in->latent_channels,
                               .latent_height = in->latent_height,
                               .latent_width = in->latent_width,
                               .max_items = in->max_items,
                               .max_latents = in->max_latents,
                               .size_multiple = in->size_multiple,
                               .max_pixels = in->max_pixels,
                               .attn_share = in->attn_share};
        /* Only the native size when it is the only one allowed */
        if (in->max_pixels <= (long)in->image_width * in->image_height) g.size_multiple = 0;
        wf_executor ex = wf_dit_exec_executor(d->dits[i]);
#ifdef WEFT_HAVE_WORKERS
        if (d->workers) {
            /* The workers loaded this DiT too (wf_workers_params.dit_path): its DENOISE
             * chunks run there, ENCODE and DECODE_IMAGE here, where the latents live. */
            char rerr[300];
            if ((st = wf_dit_router_new(d->dits[i], d->workers, p->dit_policy, io.chunk_steps,
                                        &d->dit_router, rerr, sizeof rerr)) != WF_OK)
                return wf_status_errorf(err, errlen, st, "--dit-policy: %s", rerr);
            ex = wf_dit_router_executor(d->dit_router);
        }
#endif
        if (d->gate) {
            st = wf_gated_executor_new(ex, d->gate, 1, &d->gated_dits[i]);
            if (st != WF_OK) return wf_status_errorf(err, errlen, st, "DiT executor gate: %s", wf_status_str(st));
            ex = wf_gated_executor_get(d->gated_dits[i]);
        }
        int id;
        st = wf_image_sched_add_model(d->images, ex, &g, &id);
        if (st != WF_OK) return wf_status_errorf(err, errlen, st, "image scheduler model: %s", wf_status_str(st));
#ifdef WEFT_HAVE_WORKERS
        if (d->workers) {
            d->dit_router_model = id;
            d->dit_router_dit = i;
        }
#endif
        if (d->gate && !p->share_batch && (st = wf_image_sched_set_turns(d->images, id, d->gated_dits[i])) != WF_OK)
            return wf_status_errorf(err, errlen, st, "image scheduler turns: %s", wf_status_str(st));
        const char *name = p->dit_names && p->dit_names[i] ? p->dit_names[i] : NULL;
        if (name && name[0]) {
            snprintf(d->dit_names[i], sizeof d->dit_names[i], "%s", name);
        } else {
            char path[4096];
            snprintf(path, sizeof path, "%s", p->dit_paths[i]);
            size_t n = strlen(path);
            while (n > 1 && path[n - 1] == '/') path[--n] = '\0';
            const char *base = strrchr(path, '/');
            snprintf(d->dit_names[i], sizeof d->dit_names[i], "%s", base ? base + 1 : path);
            n = strlen(d->dit_names[i]);
            if (n > 12 && strcmp(d->dit_names[i] + n - 12, ".safetensors") == 0) d->dit_names[i][n - 12] = '\0';
        }
        d->image_models[i] = (wf_server_image_model){.id = d->dit_names[i],
                                                     .sched_model = id,
                                                     .geometry = g,
                                                     .num_classes = in->num_classes,
                                                     .n_class_names = in->n_class_names,
                                                     .class_names = in->class_names,
                                                     .default_guidance = in->default_guidance,
                                                     .max_steps = in->max_steps,
                                                     .class_index = dit_class_index,
                                                     .check_schedule = dit_check_schedule,
                                                     .class_ctx = d->dits[i]};
        WF_LOG_INFO("server", NULL, "image model %s: %dx%dx%d, %d classes, %s", d->dit_names[i],
                    g.width, g.height, g.channels, in->num_classes,
                    in->latent_model ? "latent (VAE)" : "pixel space");
    }
    st = wf_image_sched_start(d->images);
    if (st != WF_OK) return wf_status_errorf(err, errlen, st, "starting the image scheduler: %s", wf_status_str(st));
#ifdef WEFT_HAVE_WORKERS
    if (d->dit_router) calibrate_requests(d);
#endif
    return WF_OK;
}

static void close_dits(wf_daemon *d) {
    wf_image_sched_free(d->images); /* first: no batch in flight afterwards */
    d->images = NULL;
    if (d->calib_events_init) { /* nothing pushes into it any more; its events were taken */
        wf_handoff_free(&d->calib_events);
        d->calib_events_init = false;
    }
    for (int i = 0; i < d->n_dits; i++) {
        wf_gated_executor_free(d->gated_dits[i]);
        d->gated_dits[i] = NULL;
#ifdef WEFT_HAVE_WORKERS
        wf_dit_router_free(d->dit_router); /* before the executor it runs ENCODEs on */
        d->dit_router = NULL;
#endif
        wf_dit_exec_free(d->dits[i]);
    }
    d->n_dits = 0;
}

/* With prefill workers a prompt is prefilled in one piece (its KV ships in one transfer), so a
 * batch must hold the longest prompt next to the running decodes. */
static int pd_batch_tokens(const wf_daemon_params *p, const wf_model_info *info) {
    if (p->n_prefill <= 0) return p->max_batch_tokens;
    int n_ctx = p->ctx_size > 0 ? p->ctx_size : info->n_ctx_train;
    if (n_ctx <= 0) n_ctx = WF_DEFAULT_N_CTX;
    int need = n_ctx + p->max_running;
    return p->max_batch_tokens > need ? p->max_batch_tokens : need;
}

#ifdef WEFT_HAVE_WORKERS
static const char *p_role(const wf_daemon *d, const wf_worker_stats *st) {
    if (st->prefill) return "prefill";
    return d->pd ? "decode" : "worker";
}

static int daemon_ranks(void *ctx, wf_server_rank *out, int cap) {
    wf_daemon *d = ctx;
    wf_worker_stats st[WF_WORKERS_MAX];
    int n = wf_workers_stats(d->workers, st, WF_WORKERS_MAX);
    wf_dit_router_stats ds = {0};
    if (d->dit_router) wf_dit_router_get_stats(d->dit_router, &ds);
    static const char *const names[] = {"joining", "live", "down"};
    for (int i = 0; i < n && i < cap; i++) {
        wf_server_rank *r = &out[i];
        memset(r, 0, sizeof *r);
        r->rank = st[i].rank;
        r->live = st[i].state == WF_WORKER_LIVE;
        snprintf(r->state, sizeof r->state, "%s", names[st[i].state]);
        r->pid = st[i].pid;
        r->incarnation = st[i].incarnation;
        r->group = st[i].group;
        snprintf(r->cores, sizeof r->cores, "%s", st[i].cores);
        r->batches = st[i].batches;
        r->last_heard_ms = st[i].last_heard_ms;
        r->kv_blocks = st[i].kv_blocks;
        r->kv_blocks_used = st[i].kv_blocks_used;
        r->prefix_queries = st[i].prefix_queries;
        r->prefix_hits = st[i].prefix_hits;
        r->kv_layers_early = st[i].kv_layers_early;
        snprintf(r->role, sizeof r->role, "%s", p_role(d, &st[i]));
        r->transfers = st[i].transfers;
        r->transfers_failed = st[i].transfers_failed;
        r->transfer_bytes = st[i].transfer_bytes;
        r->transfer_ms = st[i].transfer_ms;
        r->transfers_compressed = st[i].transfers_compressed;
        r->batches_in_flight = st[i].batches_in_flight;
        r->batches_running = st[i].batches_running;
        r->frames_in = st[i].frames_in;
        r->frames_out = st[i].frames_out;
        memcpy(r->codec_reasons, st[i].codec_reasons, sizeof r->codec_reasons);
        snprintf(r->codec_last, sizeof r->codec_last, "%s", st[i].codec_last);
        r->restarts = st[i].restarts;
        r->dit_chunks = i < WF_WORKERS_MAX ? ds.rank_chunks[i] : 0;
        r->dit_cfg_chunks = i < WF_WORKERS_MAX ? ds.rank_cfg_chunks[i] : 0;
        if (i < WF_WORKERS_MAX) {
            r->dit_reshards = ds.rank_reshards[i];
            r->dit_reshard_bytes = ds.rank_reshard_bytes[i];
            r->dit_from_home_bytes = ds.rank_from_home_bytes[i];
            r->dit_to_home_bytes = ds.rank_to_home_bytes[i];
            r->dit_mid_home_bytes = ds.rank_mid_home_bytes[i];
        }
        snprintf(r->last_error, sizeof r->last_error, "%s", st[i].last_error);
        r->n_codecs = st[i].n_codecs < 16 ? st[i].n_codecs : 16;
        memcpy(r->codecs, st[i].codecs, (size_t)r->n_codecs * sizeof r->codecs[0]);
    }
    return n;
}

static void write_ms(wf_jbuf *b, const char *key, double ms) {
    wf_jbuf_printf(b, "\"%s\":", key);
    wf_jbuf_num(b, ms);
}
#endif

void wf_daemon_observe_image(void *ctx, int sched_model, int steps, bool guided, int group_size, double ms) {
#ifdef WEFT_HAVE_WORKERS
    wf_daemon *d = ctx;
    if (d->dit_router && sched_model == d->dit_router_model)
        wf_dit_router_observe_request(d->dit_router, steps, guided, group_size, ms);
#else
    (void)ctx;
    (void)sched_model;
    (void)steps;
    (void)guided;
    (void)group_size;
    (void)ms;
#endif
}

void wf_daemon_write_dit_cost(void *ctx, wf_jbuf *b) {
#ifdef WEFT_HAVE_WORKERS
    wf_daemon *d = ctx;
    if (!d->dit_router) return;
    wf_dit_router_stats ds;
    wf_dit_router_get_stats(d->dit_router, &ds);
    const wf_dit_cost *c = &ds.cost;
    wf_jbuf_cstr(b, ",\"dit_cost\":{\"policy\":");
    wf_jbuf_str(b, ds.policy, strlen(ds.policy));
    wf_jbuf_printf(b, ",\"source\":\"%s\",\"tokens\":%d,\"degrees\":[", c->n_points ? "measured" : "synthetic",
                   ds.tokens);
    /* Per degree: the online correction (the native size's class), and per mode the native
     * step as calibrated (measured_ms, the model before correction) and as predicted now (x
     * correction). */
    for (int P = 1, first = 1; P <= WF_DIT_COST_MAX_P; P++) {
        if (!wf_dit_cost_allows(c, P)) continue;
        double corr = wf_dit_cost_correction(c, ds.tokens, P);
        wf_jbuf_printf(b, "%s{\"ranks\":%d,\"correction\":", first ? "" : ",", P);
        wf_jbuf_num(b, corr);
        wf_jbuf_cstr(b, ",\"modes\":{");
        for (int m = 0, fm = 1; m < WF_DIT_COST_MODES; m++) {
            double ms = wf_dit_cost_mode_step_ms(c, ds.tokens, P, (wf_dit_cost_mode)m);
            if (!(ms > 0)) continue;
            wf_jbuf_printf(b, "%s\"%s\":{", fm ? "" : ",", wf_dit_cost_mode_name((wf_dit_cost_mode)m));
            write_ms(b, "measured_ms", ms / corr);
            wf_jbuf_cstr(b, ",");
            write_ms(b, "predicted_ms", ms);
            wf_jbuf_cstr(b, "}");
            fm = 0;
        }
        wf_jbuf_cstr(b, "}}");
        first = 0;
    }
    /* Every calibrated point (the native size and the larger ones the start-up measured, per
     * degree and mode: "tokens P ms" of sched/dit_cost.h), with its size class's correction. */
    wf_jbuf_cstr(b, "],\"points\":[");
    for (int i = 0; i < c->n_points; i++) {
        const wf_dit_cost_point *pt = &c->pts[i];
        wf_jbuf_printf(b, "%s{\"tokens\":%d,\"ranks\":%d,\"mode\":\"%s\",", i ? "," : "", pt->tokens, pt->P,
                       wf_dit_cost_mode_name(pt->mode));
        write_ms(b, "measured_ms", pt->ms);
        wf_jbuf_cstr(b, ",\"correction\":");
        wf_jbuf_num(b, wf_dit_cost_correction(c, pt->tokens, pt->P));
        wf_jbuf_cstr(b, "}");
    }
    wf_jbuf_cstr(b, "],");
    write_ms(b, "chunk_ms", c->chunk_ms);
    wf_jbuf_printf(b, ",\"chunk_observations\":%d,", c->chunk_obs);
    write_ms(b, "request_ms", c->request_ms);
    wf_jbuf_printf(b, ",\"request_observations\":%d", c->request_obs);
    wf_jbuf_cstr(b, ",\"reshard\":{");
    write_ms(b, "latency_ms", c->reshard_lat_ms);
    wf_jbuf_cstr(b, ",");
    write_ms(b, "ms_per_mib", c->reshard_ms_per_mib);
    wf_jbuf_cstr(b, "},");
    write_ms(b, "group_form_ms", c->group_form_ms);
    wf_jbuf_cstr(b, "}");
#else
    (void)ctx;
    (void)b;
#endif
}

#ifdef WEFT_HAVE_WORKERS
/* A virtual model added at run time: on every live worker before its requests are admitted. */
static wf_status daemon_vm_publish(void *ctx, uint32_t num, const wf_vmodel_spec *spec, char *err,
                                   size_t errlen) {
    wf_daemon *d = ctx;
    /* each worker opens the files itself: a pipe (read once, here) would block them */
    for (int i = 0; i < spec->n_adapters; i++) {
        struct stat sb;
        if (stat(spec->paths[i], &sb) != 0 || !(S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode)))
            return wf_status_errorf(err, errlen, WF_EINVAL, "adapter %s: with --workers an "
                                    "adapter must be a regular file or a folder (every worker "
                                    "reads it)", spec->paths[i]);
    }
    char *text = wf_vmodel_spec_to_json(spec);
    if (!text) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    wf_status st = wf_workers_vmodel_add(d->workers, num, text, err, errlen);
    free(text);
    if (st != WF_OK) return st;
    return wf_workers_vmodel_wait(d->workers, num, d->vm_wait_ms, err, errlen);
}

static void daemon_vm_retract(void *ctx, uint32_t num) {
    wf_workers_vmodel_remove(((wf_daemon *)ctx)->workers, num);
}

/* The scheduler's groups are the worker processes; the engine here only tokenizes.
 * *kv_tokens receives the tokens the smallest worker KV cache holds (it caps the context). */
static wf_status open_workers(wf_daemon *d, const wf_daemon_params *p, int *kv_tokens, char *err,
                              size_t errlen) {
    wf_workers_params wp;
    wf_workers_params_init(&wp);
    wp.n_workers = p->n_workers;
    wp.n_prefill = p->n_prefill;
    wp.n_spawn = p->local_workers;
    wp.worker_cores = p->worker_cores;
    wp.host = p->world_host;
    wp.port = p->world_port;
    wp.exe = p->exe;
    wp.model_path = p->model_path;
    /* Workers split their KV stores as the in-process one, except with prefill/decode roles:
     * a prefill rank puts blocks into a decode rank's store addressed from its size alone. */
    wp.kv = p->kv_window_release && p->n_prefill == 0
                ? wf_engine_kv_geometry_swa(d->engine, WF_DEFAULT_KV_BLOCK_SIZE)
                : wf_engine_kv_geometry(d->engine, WF_DEFAULT_KV_BLOCK_SIZE);
    wp.kv_memory_mb = p->kv_memory_mb;
    wp.max_batch_tokens = pd_batch_tokens(p, wf_engine_info(d->engine));
    wp.max_running = p->max_running;
    wp.log_level = p->log_level;
    wp.heartbeat_ms = p->heartbeat_ms;
    wp.timeout_ms = p->worker_timeout_ms;
    wp.join_timeout_ms = p->join_timeout_ms;
    wp.kv_profiles = p->kv_profiles;
    wp.kv_codec = p->kv_codec;
    wp.kv_accuracy = p->kv_accuracy;
    wp.kv_codec_threads = p->kv_codec_threads;
    wp.kv_ship_after_prefill = p->kv_ship_after_prefill;
    wp.vmodels = p->vmodels;
    wp.n_vmodels = p->n_vmodels;
    if (p->n_dits > 1)
        return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                "--workers serves one DiT model (got %d): drop --workers or all but one DiT",
                                p->n_dits);
    wp.dit_path = p->n_dits == 1 ? p->dit_paths[0] : NULL;
    wp.dit_max_items = p->image_max_batch;
    wp.image_max_pixels = p->image_max_pixels;
    wf_status st = wf_workers_open(&wp, &d->workers, err, errlen);
    if (st != WF_OK) return st;
    *kv_tokens = 0;
    for (int i = 0; i < wf_workers_count(d->workers); i++) {
        if (wf_workers_is_prefill(d->workers, i)) continue; /* its store is scratch only */
        int t = wf_workers_kv(d->workers, i)->n_blocks * WF_DEFAULT_KV_BLOCK_SIZE;
        if (*kv_tokens == 0 || t < *kv_tokens) *kv_tokens = t;
    }
    return WF_OK;
}

static wf_status add_worker_groups(wf_daemon *d, char *err, size_t errlen) {
    int gid[WF_WORKERS_MAX];
    for (int i = 0; i < wf_workers_count(d->workers); i++) {
        gid[i] = -1;
        if (wf_workers_is_prefill(d->workers, i)) continue;
        wf_status st = wf_sched_add_group(d->sched, wf_workers_kv(d->workers, i),
                                          wf_workers_executor(d->workers, i),
                                          wf_workers_rank(d->workers, i), &gid[i]);
        if (st != WF_OK) {
            snprintf(err, errlen, "scheduler group for worker rank %d: %s", i + 1, wf_status_str(st));
            return st;
        }
    }
    wf_workers_attach(d->workers, d->sched, gid);
    return WF_OK;
}
#endif

static void model_name_from_path(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, cap, "%s", base);
    size_t n = strlen(out);
    if (n > 5 && strcmp(out + n - 5, ".gguf") == 0) out[n - 5] = '\0';
}

/* The scheduler's options from the daemon's parameters. */
static void sched_options(const wf_daemon_params *p, const wf_model_info *info, int n_ctx,
                          wf_sched_options *so) {
    wf_sched_options_init(so);
    so->policy = p->policy;
    so->queue_size = p->queue_size;
    so->max_batch_tokens = pd_batch_tokens(p, info);
    if (p->n_prefill > 0) {
        /* Prompts are computed on prefill workers and shipped whole; cached blocks would sit
         * on a decode worker, where no prompt is computed. */
        so->whole_prefill = true;
        so->prefix_cache = false;
    }
    so->max_running = p->max_running;
    so->n_ctx = n_ctx;
    so->default_ttft_ms = p->default_ttft_ms;
    so->default_tpot_ms = p->default_tpot_ms;
    if (p->admission_factor > 0) so->admission_factor = p->admission_factor;
    so->prefill_stretch = p->prefill_stretch;
    if (p->fixed_cost_model) so->online_refit = false;
    if (p->cost_model && p->cost_model[0]) {
        char cerr[128];
        if (wf_cost_model_parse(p->cost_model, so->cost, cerr, sizeof cerr) == WF_OK)
            so->cost_given = true;
        else
            so->cost_model_file = p->cost_model;
    }
}

wf_status wf_daemon_open(const wf_daemon_params *p, wf_daemon **out, char *err, size_t errlen) {
    wf_status st;
    *out = NULL;
    wf_daemon *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return WF_ENOMEM;
    }
    /* 1. The engine: weights mmapped, tokenizer, step memory, its executor thread. */
    wf_engine_options eo;
    wf_engine_options_init(&eo);
    eo.model_path = p->model_path;
    eo.n_threads = p->n_threads;
    eo.max_batch_tokens = p->max_batch_tokens;
    eo.max_seqs = p->max_running;
    st = wf_engine_open(&eo, &d->engine, err, errlen);
    if (st != WF_OK) goto fail_engine;
    const wf_model_info *info = wf_engine_info(d->engine);

    /* 2. Its KV store, which sizes the context; or the worker processes, which have theirs. */
    int kv_tokens = 0;
    d->pd = p->n_prefill > 0;
    if (p->n_workers > 0) {
#ifdef WEFT_HAVE_WORKERS
        st = open_workers(d, p, &kv_tokens, err, errlen);
#else
        st = wf_status_errorf(err, errlen, WF_EUNSUPPORTED, "--workers needs a weftd built with UCX");
#endif
        if (st != WF_OK) goto fail_kv;
    } else {
        wf_kv_geometry geo = p->kv_window_release
                                 ? wf_engine_kv_geometry_swa(d->engine, WF_DEFAULT_KV_BLOCK_SIZE)
                                 : wf_engine_kv_geometry(d->engine, WF_DEFAULT_KV_BLOCK_SIZE);
        /* Local layers' blocks for --max-running windows (wf_kv_swa_blocks_wanted), capped
         * at what the unsplit layout holds, so a split is never worse for any length; the rest
         * of the budget holds global layers' blocks: the context of long sequences. */
        int swa_blocks = wf_kv_swa_blocks_wanted(&geo, p->max_running, p->max_batch_tokens);
        st = geo.swa_layers
                 ? wf_kv_store_init_swa(&d->kv, &geo, (size_t)p->kv_memory_mb << 20, swa_blocks)
                 : wf_kv_store_init(&d->kv, &geo, (size_t)p->kv_memory_mb << 20);
        if (st != WF_OK) {
            snprintf(err, errlen, "KV cache of %ld MiB: %s", p->kv_memory_mb, wf_status_str(st));
            goto fail_kv;
        }
        d->kv_on = true;
        kv_tokens = d->kv.n_blocks * WF_DEFAULT_KV_BLOCK_SIZE;
        if (geo.swa_layers)
            WF_LOG_INFO("server", NULL,
                        "KV split by layer kind: %d blocks of the %d global layers (%d tokens), "
                        "%d blocks of the %d sliding-window layers (window %d)",
                        d->kv.n_blocks, geo.n_layers - __builtin_popcountll(geo.swa_layers),
                        kv_tokens, d->kv.n_swa_blocks, __builtin_popcountll(geo.swa_layers),
                        geo.swa_window);
    }
    int n_ctx = p->ctx_size > 0 ? p->ctx_size : info->n_ctx_train;
    if (n_ctx <= 0) n_ctx = WF_DEFAULT_N_CTX;
    if (n_ctx > kv_tokens) {
        WF_LOG_WARN("server", NULL, "context %d tokens exceeds the KV cache (%d tokens): capped; raise --kv-memory-mb",
                    n_ctx, kv_tokens);
        n_ctx = kv_tokens;
    }

    /* 3. The scheduler, with the in-process CPU executor as group 0 (rank 0), or one group
     * per worker (calibration then measures worker rank 1). */
    wf_sched_options so;
    sched_options(p, info, n_ctx, &so);
    wf_executor llm_ex = d->kv_on ? wf_engine_executor(d->engine, &d->kv) : (wf_executor){0};
    if (d->kv_on && p->n_dits > 0 && p->share_cores) {
        d->gate = wf_gate_new(2);
        /* LLM batches carry their requests' next-token deadlines (sched/core.c); batches
         * without one (images without slo.deadline_ms) count as due one TPOT target after they
         * reach the gate, the same slack for both classes. */
        if (d->gate) {
            wf_gate_set_slack(d->gate, 0, p->default_tpot_ms);
            wf_gate_set_slack(d->gate, 1, p->default_tpot_ms);
            /* Neither class starves: each gets this much of the cores' time while it waits,
             * even behind a stream of earlier deadlines of the other. */
            wf_gate_set_share(d->gate, 0, p->share_min);
            wf_gate_set_share(d->gate, 1, p->share_min);
            wf_gate_set_lookahead(d->gate, !p->share_batch && p->share_ahead);
        }
        st = d->gate ? wf_gated_executor_new(llm_ex, d->gate, 0, &d->gated_llm) : WF_ENOMEM;
        if (st != WF_OK) {
            snprintf(err, errlen, "core-sharing gate: %s", wf_status_str(st));
            goto fail_sched;
        }
        llm_ex = wf_gated_executor_get(d->gated_llm);
        if (!p->share_batch) so.turns = d->gated_llm; /* late binding: one EDF order */
        d->share_batch = p->share_batch;
    }
    if (d->kv_on)
        st = wf_sched_new(&so, &d->kv, llm_ex, &d->sched);
    else
        st = wf_sched_new(&so, NULL, (wf_executor){0}, &d->sched);
    if (st != WF_OK) {
        snprintf(err, errlen, "scheduler: %s", wf_status_str(st));
        goto fail_sched;
    }
#ifdef WEFT_HAVE_WORKERS
    if (d->workers && (st = add_worker_groups(d, err, errlen)) != WF_OK) goto fail_start;
#endif
    st = wf_sched_start(d->sched);
    if (st != WF_OK) {
        snprintf(err, errlen, "starting the scheduler: %s", wf_status_str(st));
        goto fail_start;
    }

    /* 4. The DiTs and the image scheduler. */
    if ((st = open_dits(d, p, err, errlen)) != WF_OK) {
        close_dits(d);
        wf_sched_drain(d->sched, 0);
        goto fail_start;
    }

    /* 5. The front end's view. */
    char name[256];
    if (p->model_name && p->model_name[0]) snprintf(name, sizeof name, "%s", p->model_name);
    else model_name_from_path(p->model_path, name, sizeof name);
    wf_engine_adapter_init(&d->adapter, d->engine, d->sched, name, n_ctx);
#ifdef WEFT_HAVE_WORKERS
    if (d->workers) wf_engine_adapter_set_ranks(&d->adapter, daemon_ranks, d);
    if (d->workers) {
        /* a worker's adapter load is bounded like its start-up */
        d->vm_wait_ms = p->join_timeout_ms > 0 ? p->join_timeout_ms : 120000;
        wf_engine_adapter_set_vm_sync(&d->adapter, p->n_vmodels, daemon_vm_publish,
                                      daemon_vm_retract, d);
    }
    if (d->workers && p->kv_profiles) {
        /* The names requests may give as "kv_codec" (the workers load the same file). */
        wf_kv_profile_lib lib;
        if (wf_kv_profile_lib_load(p->kv_profiles, &lib, err, errlen) != WF_OK) {
            char e[256];
            snprintf(e, sizeof e, "%s", err);
            snprintf(err, errlen, "--kv-profiles %s: %s", p->kv_profiles, e);
            st = WF_EINVAL;
            goto fail_start;
        }
        const char *names[64];
        uint32_t ids[64];
        int n = lib.n < 64 ? lib.n : 64;
        for (int i = 0; i < n; i++) {
            names[i] = lib.items[i].profile.name;
            ids[i] = lib.items[i].profile.id;
        }
        wf_engine_adapter_set_kv_codecs(&d->adapter, names, ids, n);
        wf_kv_profile_lib_free(&lib);
    }
#endif
    WF_LOG_INFO("server", NULL, "model %s (%s, %d layers, vocab %d), context %d, KV %d blocks of %d%s",
                d->adapter.name, info->arch, info->n_layers, info->n_vocab, n_ctx,
                kv_tokens / WF_DEFAULT_KV_BLOCK_SIZE, WF_DEFAULT_KV_BLOCK_SIZE,
                p->n_workers > 0 ? " per worker" : "");
    *out = d;
    return WF_OK;

fail_start:
#ifdef WEFT_HAVE_WORKERS
    wf_workers_detach(d->workers);
#endif
    wf_sched_free(d->sched);
fail_sched:
    wf_gated_executor_free(d->gated_llm);
    wf_gate_free(d->gate);
    if (d->kv_on) wf_kv_store_free(&d->kv);
#ifdef WEFT_HAVE_WORKERS
    wf_workers_close(d->workers);
#endif
fail_kv:
    wf_engine_free(d->engine);
fail_engine:
    free(d);
    return st;
}

const wf_server_model *wf_daemon_model(wf_daemon *d) { return &d->adapter.model; }
const wf_server_backend *wf_daemon_backend(wf_daemon *d) { return &d->adapter.backend; }
wf_sched *wf_daemon_sched(wf_daemon *d) { return d->sched; }
wf_image_sched *wf_daemon_images(wf_daemon *d) { return d->images; }
wf_gate *wf_daemon_gate(wf_daemon *d, bool *late) {
    *late = d->gate && !d->share_batch;
    return d->gate;
}
const wf_server_image_model *wf_daemon_image_models(wf_daemon *d, int *n) {
    *n = d->n_dits;
    return d->image_models;
}

void wf_daemon_drain(wf_daemon *d, int deadline_ms) {
    if (!d) return;
    wf_sched_drain(d->sched, deadline_ms);
    wf_image_sched_drain(d->images, deadline_ms);
}

void wf_daemon_close(wf_daemon *d) {
    if (!d) return;
    /* Scheduler first (no batch in flight after it), then the engine (its executor thread),
     * then the KV store both used. The pool's thread stops adding groups first (a worker
     * restarted just before the stop became ready while the scheduler was being freed). */
#ifdef WEFT_HAVE_WORKERS
    wf_workers_detach(d->workers);
#endif
    wf_sched_free(d->sched);
    close_dits(d);
    wf_gated_executor_free(d->gated_llm); /* after the scheduler that used it */
    wf_gate_free(d->gate);
#ifdef WEFT_HAVE_WORKERS
    wf_workers_close(d->workers); /* after the scheduler: no batch is in flight any more */
#endif
    wf_engine_adapter_free(&d->adapter);
    wf_engine_free(d->engine);
    if (d->kv_on) wf_kv_store_free(&d->kv);
    free(d);
}
