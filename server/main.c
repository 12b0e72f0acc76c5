/* weftd: parses the configuration, starts the HTTP listener at once (so /health can say
 * "loading"), loads the model on a helper thread, then serves until SIGTERM/SIGINT, when it
 * stops accepting, drains in-flight requests within --shutdown-timeout-ms and exits 0.
 *
 * Start-up order (documented choice): listen first, then load. Orchestrators see the port open
 * immediately and /health answers 503 {"status":"loading"} until the engine, KV cache and
 * scheduler are up, then 200. A model that fails to load makes weftd exit 1.
 *
 * Under systemd (Type=notify): READY=1 once the model is loaded and the scheduler calibrated,
 * STATUS= lines along the way, STOPPING=1 on SIGTERM, WATCHDOG=1 from the loop thread every
 * half WatchdogSec (a stuck loop stops them and systemd restarts the service). SIGHUP re-reads
 * the configuration's API keys (--api-key, --api-key-file) and log level; connections stay. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "proto/base/log.h"
#include "server/config.h"
#include "server/daemon.h"
#ifdef WEFT_HAVE_WORKERS
#include "server/workers/worker.h"
#endif
#include "server/sdnotify.h"
#include "server/server.h"

typedef struct daemon {
    uv_loop_t *loop;
    wf_config cfg;
    wf_server *server;
    wf_daemon *engine;
    uv_async_t loaded;
    pthread_t loader;
    bool loader_on;
    wf_status load_status;
    char load_err[512];
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t watchdog;
    bool watchdog_on;
    int argc;
    char **argv;
    char listen_on[300];
    int exit_code;
    bool stopping;
    bool drained;
} daemon_t;

static void *load_main(void *arg) {
    daemon_t *d = arg;
    wf_daemon_params p;
    wf_daemon_params_init(&p);
    p.model_path = d->cfg.model;
    p.model_name = d->cfg.model_name;
    p.n_threads = d->cfg.threads;
    p.kv_memory_mb = d->cfg.kv_memory_mb;
    p.ctx_size = d->cfg.ctx_size;
    p.policy = d->cfg.policy;
    p.queue_size = d->cfg.queue_size;
    p.max_batch_tokens = d->cfg.max_batch_tokens;
    p.max_running = d->cfg.max_running;
    p.default_ttft_ms = d->cfg.default_ttft_ms;
    p.default_tpot_ms = d->cfg.default_tpot_ms;
    p.cost_model = d->cfg.cost_model;
    p.fixed_cost_model = d->cfg.fixed_cost_model != 0;
    p.admission_factor = d->cfg.admission_factor;
    p.prefill_stretch = d->cfg.prefill_stretch;
    p.n_workers = d->cfg.workers;
    p.n_prefill = d->cfg.prefill_workers;
    p.local_workers = d->cfg.local_workers;
    p.worker_cores = d->cfg.worker_cores;
    if (d->cfg.world_host) p.world_host = d->cfg.world_host;
    p.world_port = d->cfg.world_port;
    p.log_level = d->cfg.log_level;
    p.heartbeat_ms = d->cfg.heartbeat_ms;
    p.worker_timeout_ms = d->cfg.worker_timeout_ms;
    p.join_timeout_ms = d->cfg.join_timeout_ms;
    p.dit_paths = (const char *const *)d->cfg.dit_models;
    p.dit_names = (const char *const *)d->cfg.dit_names;
    p.n_dits = d->cfg.n_dits;
    p.image_chunk_steps = d->cfg.image_chunk_steps;
    p.dit_policy = d->cfg.dit_policy;
    p.image_batching = d->cfg.image_batching != 0;
    p.image_fcfs = d->cfg.image_order && strcmp(d->cfg.image_order, "fcfs") == 0;
    p.image_max_batch = d->cfg.image_max_batch;
    p.image_max_pixels = d->cfg.image_max_pixels;
    p.share_cores = d->cfg.share_cores != 0;
    p.share_batch = d->cfg.share_turns && strcmp(d->cfg.share_turns, "batch") == 0;
    p.share_ahead = !d->cfg.share_turns || strcmp(d->cfg.share_turns, "ahead") == 0; /* the default */
    p.share_min = d->cfg.share_min;
    p.kv_window_release = d->cfg.kv_window_release != 0;
    p.kv_profiles = d->cfg.kv_profiles;
    p.kv_codec = d->cfg.kv_codec;
    p.kv_accuracy = d->cfg.kv_accuracy;
    p.kv_codec_threads = d->cfg.kv_codec_threads;
    p.kv_ship_after_prefill = !d->cfg.kv_layer_overlap;
    p.vmodels = d->cfg.vmodels;
    p.n_vmodels = (int)d->cfg.n_vmodels;
    d->load_status = wf_daemon_open(&p, &d->engine, d->load_err, sizeof d->load_err);
    uv_async_send(&d->loaded);
    return NULL;
}

static void on_drained(void *user) {
    daemon_t *d = user;
    WF_LOG_INFO("server", NULL, "drained: exiting");
    d->drained = true;
    uv_stop(d->loop);
}

static void begin_stop(daemon_t *d, const char *why) {
    if (d->stopping) return;
    d->stopping = true;
    WF_LOG_INFO("server", NULL, "%s: shutting down", why);
    char msg[160];
    snprintf(msg, sizeof msg, "STOPPING=1\nSTATUS=draining (%s)", why);
    wf_sdnotify_send(msg);
    wf_server_shutdown(d->server, on_drained, d);
}

static void on_loaded(uv_async_t *a) {
    daemon_t *d = a->data;
    if (d->loader_on) {
        pthread_join(d->loader, NULL);
        d->loader_on = false;
    }
    if (d->load_status != WF_OK) {
        WF_LOG_ERROR("server", NULL, "loading %s%s failed: %s", d->cfg.model,
                     d->cfg.n_dits ? " and the DiT models" : "", d->load_err);
        wf_server_set_failed(d->server, d->load_err);
        char msg[600];
        snprintf(msg, sizeof msg, "STATUS=model failed to load: %s", d->load_err);
        wf_sdnotify_send(msg);
        d->exit_code = 1;
        uv_stop(d->loop);
        return;
    }
    int n_images = 0;
    const wf_server_image_model *images = wf_daemon_image_models(d->engine, &n_images);
    wf_server_set_images(d->server, wf_daemon_images(d->engine), images, n_images);
    wf_server_set_dit_cost(d->server, wf_daemon_write_dit_cost, wf_daemon_observe_image, d->engine);
    bool late;
    struct wf_gate *gate = wf_daemon_gate(d->engine, &late);
    if (gate) wf_server_set_gate(d->server, gate, late);
    wf_server_set_ready(d->server, wf_daemon_model(d->engine), wf_daemon_backend(d->engine));
    /* virtual models declared at start: any failure is fatal, as a bad flag is */
    for (size_t i = 0; i < d->cfg.n_vmodels; i++) {
        wf_vmodel_spec v;
        char err[600];
        const char *txt = d->cfg.vmodels[i];
        wf_status st = wf_vmodel_spec_from_text(txt, &v, err, sizeof err);
        if (st == WF_OK) {
            st = wf_server_vmodel_add(d->server, &v, NULL, err, sizeof err);
            wf_vmodel_spec_free(&v);
        }
        if (st != WF_OK) {
            WF_LOG_ERROR("server", NULL, "--vmodel %s: %s", txt, err);
            d->exit_code = 1;
            uv_stop(d->loop);
            return;
        }
    }
    WF_LOG_INFO("server", NULL, "ready");
    char msg[400];
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=serving %s on %s", wf_daemon_model(d->engine)->id,
             d->listen_on);
    wf_sdnotify_send(msg);
    if (d->stopping) { /* a signal came while loading: the drain has nothing to wait for */
        d->stopping = false;
        begin_stop(d, "signal during loading");
    }
}

static void on_signal(uv_signal_t *h, int signum) {
    daemon_t *d = h->data;
    if (d->stopping && signum == SIGINT) {
        WF_LOG_WARN("server", NULL, "second SIGINT: exiting without draining");
        d->exit_code = 1;
        uv_stop(d->loop);
        return;
    }
    begin_stop(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* SIGHUP: parse the command line (and its --config file) again and apply what can change
 * without a restart. Anything else that differs is reported and ignored. */
static void reload(daemon_t *d) {
    wf_sdnotify_send("RELOADING=1\nSTATUS=reloading API keys and log level");
    wf_config cfg;
    char err[512];
    int rc = wf_config_parse(&cfg, d->argc, d->argv, err, sizeof err);
    wf_log_level level;
    if (rc != 0 || wf_log_level_parse(cfg.log_level, &level) < 0) {
        WF_LOG_ERROR("server", NULL, "SIGHUP: configuration not reloaded: %s",
                     rc != 0 ? err : "unknown log level");
    } else if (wf_server_set_api_keys(d->server, cfg.api_keys, cfg.n_api_keys) != WF_OK) {
        WF_LOG_ERROR("server", NULL, "SIGHUP: out of memory: configuration not reloaded");
    } else {
        wf_log_set_level(level);
        WF_LOG_INFO("server", NULL, "SIGHUP: reloaded %zu API key(s), log level %s", cfg.n_api_keys,
                    cfg.log_level);
    }
    wf_config_free(&cfg);
    char msg[400];
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s on %s", d->stopping ? "draining" : "serving",
             d->listen_on);
    wf_sdnotify_send(msg);
}

static void on_hup(uv_signal_t *h, int signum) {
    (void)signum;
    reload(h->data);
}

/* Runs on the loop thread: if the loop is stuck, the keep-alives stop and systemd acts. */
static void on_watchdog(uv_timer_t *t) {
    (void)t;
    wf_sdnotify_send("WATCHDOG=1");
}

/* `weftd --role worker`: one rank of a coordinator's world (server/workers/worker.h). */
static int run_worker(const wf_config *cfg) {
#ifdef WEFT_HAVE_WORKERS
    if (access(cfg->model, R_OK) != 0) {
        WF_LOG_ERROR("worker", NULL, "model file %s is not readable", cfg->model);
        return 1;
    }
    static char host[256];
    const char *colon = strrchr(cfg->join, ':');
    snprintf(host, sizeof host, "%.*s", (int)(colon - cfg->join), cfg->join);
    wf_worker_params p;
    wf_worker_params_init(&p);
    p.host = host;
    p.port = atoi(colon + 1);
    p.n_ranks = cfg->world_size;
    p.rank = cfg->rank;
    p.cores = cfg->worker_cores;
    p.n_threads = cfg->threads;
    p.model_path = cfg->model;
    p.kv_memory_mb = cfg->kv_memory_mb;
    p.max_batch_tokens = cfg->max_batch_tokens;
    p.max_running = cfg->max_running;
    p.heartbeat_ms = cfg->heartbeat_ms;
    p.timeout_ms = cfg->worker_timeout_ms;
    p.join_timeout_ms = cfg->join_timeout_ms;
    p.kv_profiles = cfg->kv_profiles;
    if (cfg->kv_codec) p.kv_codec = cfg->kv_codec;
    p.kv_accuracy = cfg->kv_accuracy;
    p.kv_codec_threads = cfg->kv_codec_threads;
    p.kv_window_release = cfg->kv_window_release != 0;
    p.kv_ship_after_prefill = !cfg->kv_layer_overlap;
    p.vmodels = cfg->vmodels;
    p.n_vmodels = (int)cfg->n_vmodels;
    if (cfg->n_dits > 1) {
        WF_LOG_ERROR("worker", NULL, "a worker runs one DiT model (got %d)", cfg->n_dits);
        return 1;
    }
    p.dit_path = cfg->n_dits == 1 ? cfg->dit_models[0] : NULL;
    p.dit_max_items = cfg->image_max_batch;
    p.image_max_pixels = cfg->image_max_pixels;
    if (cfg->pd_role) p.pd_role = strcmp(cfg->pd_role, "prefill") == 0 ? WF_FRAME_ROLE_PREFILL : WF_FRAME_ROLE_DECODE;
    signal(SIGPIPE, SIG_IGN);
    return wf_worker_main(&p);
#else
    (void)cfg;
    fprintf(stderr, "weftd: --role worker needs a weftd built with UCX\n");
    return 2;
#endif
}

int main(int argc, char **argv) {
    static daemon_t d;
    char err[512];
    int rc = wf_config_parse(&d.cfg, argc, argv, err, sizeof err);
    if (rc != 0) {
        if (rc < 0) fprintf(stderr, "weftd: %s\n", err);
        wf_config_free(&d.cfg);
        return rc < 0 ? 2 : 0;
    }
    wf_log_level level;
    if (wf_log_level_parse(d.cfg.log_level, &level) < 0) {
        fprintf(stderr, "weftd: unknown --log-level '%s' (trace, debug, info, warn, error)\n",
                d.cfg.log_level);
        wf_config_free(&d.cfg);
        return 2;
    }
    wf_log_set_level(level);
    if (strcmp(d.cfg.role, "worker") == 0) {
        rc = run_worker(&d.cfg);
        wf_config_free(&d.cfg);
        return rc;
    }
    if (access(d.cfg.model, R_OK) != 0) {
        WF_LOG_ERROR("server", NULL, "model file %s is not readable (run scripts/setup, or pass --model FILE)",
                     d.cfg.model);
        wf_config_free(&d.cfg);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    d.loop = uv_default_loop();

    wf_server_options o;
    wf_server_options_init(&o);
    o.http.max_body_bytes = (size_t)d.cfg.max_body_bytes;
    o.http.max_header_bytes = (size_t)d.cfg.max_header_bytes;
    o.http.idle_timeout_ms = d.cfg.idle_timeout_ms;
    o.http.request_timeout_ms = d.cfg.request_timeout_ms;
    o.http.write_timeout_ms = d.cfg.write_timeout_ms;
    o.http.max_output_bytes = (size_t)d.cfg.max_output_bytes;
    o.http.max_connections = d.cfg.max_connections;
    o.api_keys = d.cfg.api_keys;
    o.n_api_keys = d.cfg.n_api_keys;
    o.metrics_open = d.cfg.metrics_open != 0;
    o.shutdown_timeout_ms = d.cfg.shutdown_timeout_ms;
    char name[256];
    if (d.cfg.model_name) {
        snprintf(name, sizeof name, "%s", d.cfg.model_name);
    } else {
        const char *base = strrchr(d.cfg.model, '/');
        snprintf(name, sizeof name, "%s", base ? base + 1 : d.cfg.model);
        size_t n = strlen(name);
        if (n > 5 && strcmp(name + n - 5, ".gguf") == 0) name[n - 5] = '\0';
    }
    o.model_id = name;
    o.max_n = d.cfg.max_running;
    o.default_ttft_ms = d.cfg.default_ttft_ms;
    o.default_tpot_ms = d.cfg.default_tpot_ms;
    o.adapter_budget_bytes = (size_t)d.cfg.adapter_memory_mb << 20;
    d.server = wf_server_new(d.loop, &o);
    if (!d.server) {
        wf_config_free(&d.cfg);
        return 1;
    }
    int port = 0;
    if (wf_server_listen(d.server, d.cfg.host, d.cfg.port, &port) != WF_OK) {
        wf_server_free(d.server);
        wf_config_free(&d.cfg);
        return 1;
    }
    WF_LOG_INFO("server", NULL, "listening on http://%s:%d (loading %s; %zu API key(s))", d.cfg.host,
                port, d.cfg.model, d.cfg.n_api_keys);
    d.argc = argc;
    d.argv = argv;
    snprintf(d.listen_on, sizeof d.listen_on, "http://%s:%d", d.cfg.host, port);
    {
        char msg[600];
        snprintf(msg, sizeof msg, "STATUS=loading %s (listening on %s)", d.cfg.model, d.listen_on);
        wf_sdnotify_send(msg);
    }
    uint64_t wd_usec = wf_sdnotify_watchdog_usec();
    if (wd_usec) {
        uint64_t period_ms = wd_usec / 2000 ? wd_usec / 2000 : 1;
        uv_timer_init(d.loop, &d.watchdog);
        uv_timer_start(&d.watchdog, on_watchdog, 0, period_ms);
        uv_unref((uv_handle_t *)&d.watchdog);
        d.watchdog_on = true;
    }
    uv_signal_init(d.loop, &d.sighup);
    d.sighup.data = &d;
    uv_signal_start(&d.sighup, on_hup, SIGHUP);
    uv_unref((uv_handle_t *)&d.sighup);

    uv_signal_init(d.loop, &d.sigterm);
    uv_signal_init(d.loop, &d.sigint);
    d.sigterm.data = d.sigint.data = &d;
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    uv_async_init(d.loop, &d.loaded, on_loaded);
    d.loaded.data = &d;
    if (pthread_create(&d.loader, NULL, load_main, &d) != 0) {
        WF_LOG_ERROR("server", NULL, "cannot start the loader thread");
        d.exit_code = 1;
    } else {
        d.loader_on = true;
        uv_run(d.loop, UV_RUN_DEFAULT);
    }

    if (d.loader_on) { /* stopped while loading: wait for it, then tear it down */
        pthread_join(d.loader, NULL);
        d.loader_on = false;
    }
    uv_signal_stop(&d.sigterm);
    uv_signal_stop(&d.sigint);
    uv_close((uv_handle_t *)&d.sigterm, NULL);
    uv_close((uv_handle_t *)&d.sigint, NULL);
    uv_signal_stop(&d.sighup);
    uv_close((uv_handle_t *)&d.sighup, NULL);
    if (d.watchdog_on) uv_close((uv_handle_t *)&d.watchdog, NULL);
    uv_close((uv_handle_t *)&d.loaded, NULL);
    /* A fast exit (second SIGINT) skipped the drain: cancel now, so every request ends with
     * its FINISHED events before the server that receives them goes away. */
    if (d.load_status == WF_OK && d.engine && !d.drained) wf_daemon_drain(d.engine, 0);
    wf_server_free(d.server);
    wf_daemon_close(d.load_status == WF_OK ? d.engine : NULL);
    uv_run(d.loop, UV_RUN_NOWAIT);
    uv_loop_close(d.loop);
    wf_config_free(&d.cfg);
    return d.exit_code;
}
