/* weftd configuration: one table of options drives flags, JSON config keys and --help. */
#include "server/config.h"

#include "engine/dit/dit.h"
#include "sched/defaults.h"
#include "sched/dit_cost.h"
#include "sched/dit_policy.h"

#include "proto/base/status.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/vmodels.h"
#include "weft_version.h"

typedef enum option_type {
    OPT_STRING, OPT_INT, OPT_LONG, OPT_DOUBLE, OPT_BOOL, OPT_KEYS, OPT_LIST, OPT_VMODELS
} option_type;

typedef struct option_spec {
    const char *name; /* flag name without "--"; JSON key is the same with '_' for '-' */
    option_type type;
    size_t offset;
    double min, max;  /* numeric bounds, inclusive */
    const char *arg;  /* placeholder in --help */
    const char *help;
} option_spec;

#define FIELD(f) offsetof(wf_config, f)

static const option_spec options[] = {
    {"model", OPT_LIST, FIELD(models), 0, 0, "PATH", "an LLM (GGUF file) or a DiT (diffusers folder or .safetensors file), detected; repeatable: one LLM plus DiTs (default: the bundled SmolLM2-135M-Instruct and weft-dit-digits)"},
    {"model-name", OPT_LIST, FIELD(model_names), 0, 0, "NAME", "model id served by the API for the --model in the same position (default: file or folder name)"},
    {"dit-policy", OPT_STRING, FIELD(dit_policy), 0, 0, "SPEC", "with --workers and a DiT: who runs each DENOISE chunk, decided at every chunk boundary: static:K (fixed lanes of K ranks), rssp (a degree per resolution), gf-static:K / gf-fcfs:K / gf-rssp (GF-DiT's baselines: lanes bound at arrival, round robin or gf-fcfs to the lane whose backlog ends first, FCFS), elastic (EDF best-fit: the smallest group that meets the deadline; default with 2 workers or more, else static:1)"},
    {"image-chunk-steps", OPT_INT, FIELD(image_chunk_steps), 1, 1000, "N", "denoising steps per DENOISE task of an image request (default 1: requests join a batch at every step)"},
    {"image-batching", OPT_BOOL, FIELD(image_batching), 0, 1, NULL, "step-level batching of image requests of one model (default true; false runs one request at a time)"},
    {"share-cores", OPT_BOOL, FIELD(share_cores), 0, 1, NULL, "with DiT models beside the LLM: LLM and DiT batches take turns on the cores, earliest deadline first, instead of running both thread pools at once (default true)"},
    {"share-turns", OPT_STRING, FIELD(share_turns), 0, 0, "edf|ahead|batch", "with --share-cores: ahead (default): text and image work in one earliest-deadline-first order, the next claim granted while the running batch runs (its batch composed meanwhile, one batch early); batch: batches composed at once wait at the gate by their earliest deadline; edf: text and image work take one earliest-deadline-first order, each scheduler composing its batch when its claim gets the turn (one more thread wake-up per turn), without the look-ahead, see BENCHMARKS.md"},
    {"share-min", OPT_DOUBLE, FIELD(share_min), 0, 0.5, "FRAC", "with --share-cores: the minimum fraction of the cores' recent time text and images each get while they have work waiting, whatever the deadlines (default " WF_DEFAULT_STR(WF_DEFAULT_SHARE_MIN) "; 0: pure EDF)"},
    {"image-order", OPT_STRING, FIELD(image_order), 0, 0, "edf|fcfs", "order of image requests: edf (earliest deadline, then priority, then arrival; default) or fcfs (arrival only: the baseline of the mixed-load benchmark)"},
    {"image-max-batch", OPT_INT, FIELD(image_max_batch), 1, 256, "N", "images per DiT forward pass (default 8)"},
    {"image-max-pixels", OPT_LONG, FIELD(image_max_pixels), 0, 1L << 26, "N", "largest image (width x height pixels) a DiT serves in other sizes than its native one; buffers and latents are sized for it (default 0: 4 x the native size's pixels; the native size itself: that size only); with --workers every size runs on groups of ranks too, and the start-up measures steps at sizes up to it"},
    {"host", OPT_STRING, FIELD(host), 0, 0, "ADDR", "address to listen on (default 127.0.0.1)"},
    {"port", OPT_INT, FIELD(port), 0, 65535, "N", "TCP port (default 8080; 0 picks a free port)"},
    {"threads", OPT_INT, FIELD(threads), 0, 1024, "N", "engine threads (default 0 = one per core)"},
    {"api-key", OPT_KEYS, FIELD(api_keys), 0, 0, "KEY", "require this Bearer key (repeatable)"},
    {"api-key-file", OPT_STRING, FIELD(api_key_file), 0, 0, "FILE", "file with one API key per line"},
    {"config", OPT_STRING, FIELD(config_file), 0, 0, "FILE", "JSON file with any of these options"},
    {"log-level", OPT_STRING, FIELD(log_level), 0, 0, "LEVEL", "trace, debug, info, warn, error (default info)"},
    {"ctx-size", OPT_INT, FIELD(ctx_size), 0, 1 << 24, "N", "max tokens per sequence (default: model's)"},
    {"max-connections", OPT_INT, FIELD(max_connections), 1, 1 << 20, "N", "open connections before 503 (default 4096)"},
    {"max-body-bytes", OPT_LONG, FIELD(max_body_bytes), 1, 1L << 34, "N", "largest request body before 413 (default 8 MiB)"},
    {"idle-timeout-ms", OPT_INT, FIELD(idle_timeout_ms), 1, INT_MAX, "MS", "close idle or slow clients after (default 30000)"},
    {"shutdown-timeout-ms", OPT_INT, FIELD(shutdown_timeout_ms), 0, INT_MAX, "MS", "SIGTERM drain deadline (default 10000)"},
    {"metrics-open", OPT_BOOL, FIELD(metrics_open), 0, 1, NULL, "serve /metrics without an API key"},
    {"queue-size", OPT_INT, FIELD(queue_size), 1, 1 << 20, "N", "pending requests before 503 (default " WF_DEFAULT_STR(WF_DEFAULT_QUEUE_SIZE) ")"},
    {"policy", OPT_STRING, FIELD(policy), 0, 0, "NAME", "scheduling policy: fcfs, priority, slo, fair (weighted fair queueing across virtual models) (default " WF_DEFAULT_POLICY ")"},
    {"kv-memory-mb", OPT_LONG, FIELD(kv_memory_mb), 1, 1L << 30, "MB", "KV-cache memory budget (default " WF_DEFAULT_STR(WF_DEFAULT_KV_MEMORY_MB) ")"},
    {"kv-window-release", OPT_BOOL, FIELD(kv_window_release), 0, 1, NULL, "models with sliding-window layers (Gemma 3): those layers keep their own KV blocks, only the window's, so a long sequence's KV follows the window there (default true; false: every layer keeps the whole context, as before; worker processes split alike, except with --prefill roles)"},
    {"max-batch-tokens", OPT_INT, FIELD(max_batch_tokens), 1, 1 << 20, "N", "token budget per iteration (default " WF_DEFAULT_STR(WF_DEFAULT_MAX_BATCH_TOKENS) ")"},
    {"default-ttft-ms", OPT_DOUBLE, FIELD(default_ttft_ms), 0, 1e9, "MS", "TTFT target when a request names none (default " WF_DEFAULT_STR(WF_DEFAULT_TTFT_MS) ")"},
    {"default-tpot-ms", OPT_DOUBLE, FIELD(default_tpot_ms), 0, 1e9, "MS", "TPOT target when a request names none (default " WF_DEFAULT_STR(WF_DEFAULT_TPOT_MS) ")"},
    {"request-timeout-ms", OPT_INT, FIELD(request_timeout_ms), 1, INT_MAX, "MS", "a request must arrive whole within this, else 408 (default 60000)"},
    {"max-header-bytes", OPT_LONG, FIELD(max_header_bytes), 256, 1L << 26, "N", "largest request head before 431 (default 64 KiB)"},
    {"write-timeout-ms", OPT_INT, FIELD(write_timeout_ms), 1, INT_MAX, "MS", "a client not reading a response this long is disconnected and its request cancelled (default 30000)"},
    {"max-output-bytes", OPT_LONG, FIELD(max_output_bytes), 4096, 1L << 34, "N", "streamed bytes buffered for a slow client before it is disconnected and its request cancelled (default 4 MiB)"},
    {"cost-model", OPT_STRING, FIELD(cost_model), 0, 0, "A,B,C,D|FILE", "scheduler cost model step_ms = a + b*prefill + c*decode + d*attention, attention = positions each token attends to (default: calibrate at start-up)"},
    {"prefill-stretch", OPT_DOUBLE, FIELD(prefill_stretch), 0, 1000, "X", "while streams decode, an iteration takes at most X times its decode-only time; prompt chunks are sized to fit unless a prompt's TTFT is at risk (default " WF_DEFAULT_STR(WF_DEFAULT_PREFILL_STRETCH) "; 0 or 1: off)"},
    {"admission-factor", OPT_DOUBLE, FIELD(admission_factor), 0.01, 1e9, "X", "refuse (429) a request whose predicted TTFT exceeds X times its TTFT SLO (default 2; a huge X turns admission control off)"},
    {"fixed-cost-model", OPT_BOOL, FIELD(fixed_cost_model), 0, 1, NULL, "keep the cost model as given (no online refit; predictable admission)"},
    {"max-running", OPT_INT, FIELD(max_running), 1, 1 << 16, "N", "sequences decoding at once (default " WF_DEFAULT_STR(WF_DEFAULT_MAX_RUNNING) ")"},
    {"workers", OPT_INT, FIELD(workers), 0, 64, "N", "serve with N worker processes, each one rank of the world with its own engine replica and KV (default 0: in-process engine)"},
    {"prefill-workers", OPT_INT, FIELD(prefill_workers), 0, 63, "N", "prefill/decode disaggregation: N worker processes prefill prompts and ship their KV over UCX to the decode workers (needs --decode-workers; replaces --workers)"},
    {"decode-workers", OPT_INT, FIELD(decode_workers), 0, 63, "M", "prefill/decode disaggregation: M worker processes decode (each one scheduler group; needs --prefill-workers)"},
    {"kv-profiles", OPT_STRING, FIELD(kv_profiles), 0, 0, "FILE", "prefill/decode: the KV codec profile library (weft-kvprof's JSON, e.g. deploy/kv-profiles.json); without it KV always crosses raw"},
    {"kv-codec", OPT_STRING, FIELD(kv_codec), 0, 0, "auto|off|NAME", "prefill/decode: auto (the controller compresses when the link is the bottleneck; default), off, or always the named profile"},
    {"kv-codec-threads", OPT_INT, FIELD(kv_codec_threads), 0, 256, "N", "prefill/decode: threads each worker encodes and decodes KV with (0: one per core of the worker, default; 1: serial)"},
    {"kv-layer-overlap", OPT_BOOL, FIELD(kv_layer_overlap), 0, 1, NULL, "prefill/decode: a prefill worker starts moving a prompt's raw KV layer by layer while the prefill computes the later layers (default true; false: the transfer starts once the prefill is done, as before)"},
    {"kv-accuracy", OPT_DOUBLE, FIELD(kv_accuracy), 0, 1, "X", "prefill/decode: the least greedy-token agreement a compressed transfer may cost (default 0.9)"},
    {"worker-cores", OPT_STRING, FIELD(worker_cores), 0, 0, "L:L:..", "CPU list per local worker, ':'-separated, e.g. 0:1 or 0-3:4-7 (default: this process's CPUs split evenly)"},
    {"role", OPT_STRING, FIELD(role), 0, 0, "ROLE", "server (default) or worker (joins a coordinator's world: see --join)"},
    {"join", OPT_STRING, FIELD(join), 0, 0, "HOST:PORT", "worker role: the coordinator's world bootstrap address"},
    {"pd-role", OPT_STRING, FIELD(pd_role), 0, 0, "prefill|decode", "worker role: the pool this worker serves when the coordinator runs --prefill-workers/--decode-workers (declared when it joins; default: the slot it gets decides)"},
    {"world-host", OPT_STRING, FIELD(world_host), 0, 0, "ADDR", "with --workers: bootstrap address workers connect to (default 127.0.0.1; 0.0.0.0 for workers on other hosts)"},
    {"world-port", OPT_INT, FIELD(world_port), 0, 65535, "N", "with --workers: bootstrap TCP port (default 0: a free port, logged)"},
    {"world-size", OPT_INT, FIELD(world_size), 0, 65, "N", "worker role: ranks in the world (default --workers + 1)"},
    {"rank", OPT_INT, FIELD(rank), -1, 64, "R", "worker role: the slot to fill, for a restarted worker (default -1: any free slot)"},
    {"local-workers", OPT_INT, FIELD(local_workers), -1, 64, "N", "with --workers: how many to start on this host; the rest join with --role worker (default: all)"},
    {"heartbeat-ms", OPT_INT, FIELD(heartbeat_ms), 10, 60000, "MS", "heartbeat period between coordinator and workers (default 500)"},
    {"worker-timeout-ms", OPT_INT, FIELD(worker_timeout_ms), 100, INT_MAX, "MS", "a worker (or coordinator) silent this long is taken down (default 30000)"},
    {"vmodel", OPT_VMODELS, FIELD(vmodels), 0, 0, "id=NAME,adapter=PATH[:SCALE],weight=W,...,system=TEXT", "a virtual model on the backbone: LoRA adapters (GGUF or PEFT folder, repeatable, in order), fair-share weight, quotas (max_in_flight, max_running, max_queued), SLO class (ttft_ms, tpot_ms), default sampling parameters (temperature, top_p, top_k, min_p, max_tokens, presence_penalty, frequency_penalty, repetition_penalty, seed, stop), system prompt (last: runs to the end); repeatable; config file: a list of strings or objects {id, adapters:[{path, scale}], weight, max_running, max_queued, defaults:{...}, system}"},
    {"adapter-memory-mb", OPT_LONG, FIELD(adapter_memory_mb), 0, 1L << 30, "MB", "memory budget for virtual models' adapters; adding one beyond it fails with 507 (default 0: unlimited)"},
    {"join-timeout-ms", OPT_INT, FIELD(join_timeout_ms), 100, INT_MAX, "MS", "bound for workers to join and load their model (default 120000)"},
};

#define N_OPTIONS (sizeof options / sizeof options[0])

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    wf_verrorf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static void set_defaults(wf_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->host = strdup("127.0.0.1");
    cfg->port = 8080;
    cfg->log_level = strdup("info");
    cfg->max_connections = 4096;
    cfg->max_body_bytes = 8L << 20;
    cfg->idle_timeout_ms = 30000;
    cfg->shutdown_timeout_ms = 10000;
    cfg->queue_size = WF_DEFAULT_QUEUE_SIZE;
    cfg->policy = strdup(WF_DEFAULT_POLICY);
    cfg->kv_memory_mb = WF_DEFAULT_KV_MEMORY_MB;
    cfg->max_batch_tokens = WF_DEFAULT_MAX_BATCH_TOKENS;
    cfg->default_ttft_ms = WF_DEFAULT_TTFT_MS;
    cfg->default_tpot_ms = WF_DEFAULT_TPOT_MS;
    cfg->admission_factor = WF_DEFAULT_ADMISSION_FACTOR;
    cfg->prefill_stretch = WF_DEFAULT_PREFILL_STRETCH;
    cfg->request_timeout_ms = 60000;
    cfg->max_header_bytes = 64L << 10;
    cfg->write_timeout_ms = 30000;
    cfg->max_output_bytes = 4L << 20;
    cfg->max_running = WF_DEFAULT_MAX_RUNNING;
    cfg->role = strdup("server");
    cfg->image_chunk_steps = 1;
    cfg->image_batching = 1;
    cfg->image_max_batch = 8;
    cfg->share_cores = 1;
    cfg->share_min = WF_DEFAULT_SHARE_MIN;
    cfg->kv_window_release = 1;
    cfg->kv_layer_overlap = 1;
    cfg->rank = -1;
    cfg->local_workers = -1;
    cfg->kv_accuracy = 0.9;
    cfg->heartbeat_ms = 500;
    cfg->worker_timeout_ms = 30000;
    cfg->join_timeout_ms = 120000;
}

/* Flags that only make sense together. */
static int check_roles(wf_config *cfg, char *err, size_t errlen) {
    bool worker = strcmp(cfg->role, "worker") == 0;
    if (!worker && strcmp(cfg->role, "server") != 0)
        return fail(err, errlen, "--role must be server or worker (got '%s')", cfg->role);
    if (cfg->heartbeat_ms >= cfg->worker_timeout_ms)
        return fail(err, errlen, "--heartbeat-ms (%d) must be below --worker-timeout-ms (%d)",
                    cfg->heartbeat_ms, cfg->worker_timeout_ms);
    if (cfg->prefill_workers > 0 || cfg->decode_workers > 0) {
        if (cfg->prefill_workers < 1 || cfg->decode_workers < 1)
            return fail(err, errlen, "--prefill-workers and --decode-workers go together (each at least 1)");
        int n = cfg->prefill_workers + cfg->decode_workers;
        if (cfg->workers != 0 && cfg->workers != n)
            return fail(err, errlen, "--workers %d disagrees with --prefill-workers %d + --decode-workers %d",
                        cfg->workers, cfg->prefill_workers, cfg->decode_workers);
        if (n > 64) return fail(err, errlen, "--prefill-workers + --decode-workers must be at most 64");
        cfg->workers = n;
    }
    if (worker) {
        if (!cfg->join) return fail(err, errlen, "--role worker needs --join HOST:PORT (the coordinator's world address)");
        const char *colon = strrchr(cfg->join, ':');
        char *end;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || colon == cfg->join || colon[1] == '\0' || *end || port < 1 || port > 65535)
            return fail(err, errlen, "--join '%s': expected HOST:PORT with a port in 1..65535", cfg->join);
        if (cfg->world_size == 0) cfg->world_size = cfg->workers > 0 ? cfg->workers + 1 : 0;
        if (cfg->world_size < 2)
            return fail(err, errlen, "--role worker needs the world's size: --workers N (the coordinator's) or --world-size N+1");
        if (cfg->rank == 0 || cfg->rank >= cfg->world_size)
            return fail(err, errlen, "--rank %d: a worker's slot is 1..%d", cfg->rank, cfg->world_size - 1);
        if (cfg->pd_role && strcmp(cfg->pd_role, "prefill") != 0 && strcmp(cfg->pd_role, "decode") != 0)
            return fail(err, errlen, "--pd-role must be prefill or decode (got '%s')", cfg->pd_role);
        return 0;
    }
    if (cfg->join) return fail(err, errlen, "--join is for --role worker");
    if (cfg->dit_policy && cfg->workers == 0)
        return fail(err, errlen, "--dit-policy needs --workers N (the ranks its groups are made of)");
    /* Found here, before any model loads (it was accepted and ignored, or refused only once
     * the models had loaded). */
    if (cfg->dit_policy && cfg->n_dits == 0)
        return fail(err, errlen, "--dit-policy places DiT chunks, but no --model is a DiT (a diffusers folder or "
                    ".safetensors file)");
    if (cfg->workers > 0 && cfg->n_dits > 1)
        return fail(err, errlen, "--workers serves one DiT model (got %d): drop --workers or all but one DiT",
                    cfg->n_dits);
    if (cfg->dit_policy) { /* the policy module's own parser judges the spec, at start */
        wf_dit_cost cost;
        wf_dit_cost_synthetic(&cost);
        wf_dit_policy *pol;
        char why[256];
        int n = cfg->workers < WF_DIT_MAX_RANKS ? cfg->workers : WF_DIT_MAX_RANKS;
        if (wf_dit_policy_new(cfg->dit_policy, n, &cost, 1, &pol, why, sizeof why) != WF_OK)
            return fail(err, errlen, "--dit-policy '%s': %s", cfg->dit_policy, why);
        wf_dit_policy_free(pol);
    }
    if (cfg->pd_role)
        return fail(err, errlen, "--pd-role is for --role worker (the coordinator sizes the pools with "
                    "--prefill-workers and --decode-workers)");
    if (cfg->workers == 0 && (cfg->worker_cores || cfg->local_workers >= 0))
        return fail(err, errlen, "--worker-cores and --local-workers need --workers N");
    if (cfg->local_workers > cfg->workers)
        return fail(err, errlen, "--local-workers %d exceeds --workers %d", cfg->local_workers, cfg->workers);
    return 0;
}

static int add_key(wf_config *cfg, const char *key, char *err, size_t errlen);

/* One key per line; '#' comments and blank lines skipped; surrounding whitespace trimmed. */
static int load_key_file(wf_config *cfg, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) return fail(err, errlen, "--api-key-file %s: %s", path, strerror(errno));
    char line[4096];
    int rc = 0, n = 0;
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        size_t len = strlen(p);
        while (len && (p[len - 1] == '\n' || p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t'))
            p[--len] = '\0';
        if (!len || p[0] == '#') continue;
        if ((rc = add_key(cfg, p, err, errlen)) < 0) break;
        n++;
    }
    fclose(f);
    if (rc == 0 && n == 0) rc = fail(err, errlen, "--api-key-file %s holds no keys", path);
    return rc;
}

static const option_spec *find_flag(const char *name, size_t len) {
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
            return &options[i];
    return NULL;
}

static int add_key(wf_config *cfg, const char *key, char *err, size_t errlen) {
    if (!key[0]) return fail(err, errlen, "an API key must not be empty");
    char **keys = realloc(cfg->api_keys, (cfg->n_api_keys + 2) * sizeof *keys);
    if (!keys) return fail(err, errlen, "out of memory");
    cfg->api_keys = keys;
    keys[cfg->n_api_keys] = strdup(key);
    if (!keys[cfg->n_api_keys]) return fail(err, errlen, "out of memory");
    keys[++cfg->n_api_keys] = NULL;
    return 0;
}

static int add_vmodel(wf_config *cfg, const char *text, char *err, size_t errlen) {
    wf_vmodel_spec v;
    char e2[400];
    wf_status st = wf_vmodel_spec_from_text(text, &v, e2, sizeof e2);
    if (st != WF_OK) return fail(err, errlen, "--vmodel: %s", e2);
    wf_vmodel_spec_free(&v);
    char **list = realloc(cfg->vmodels, (cfg->n_vmodels + 1) * sizeof *list);
    if (!list) return fail(err, errlen, "out of memory");
    cfg->vmodels = list;
    if (!(list[cfg->n_vmodels] = strdup(text))) return fail(err, errlen, "out of memory");
    cfg->n_vmodels++;
    return 0;
}

/* Sets one option from its text form; `origin` names where it came from for messages. */
static int set_from_text(wf_config *cfg, const option_spec *opt, const char *text,
                         const char *origin, char *err, size_t errlen) {
    void *field = (char *)cfg + opt->offset;
    char *end = NULL;
    switch (opt->type) {
    case OPT_STRING: {
        char *copy = strdup(text);
        if (!copy) return fail(err, errlen, "out of memory");
        free(*(char **)field);
        *(char **)field = copy;
        return 0;
    }
    case OPT_KEYS:
        return add_key(cfg, text, err, errlen);
    case OPT_LIST: {
        wf_strlist *l = field;
        char **v = realloc(l->v, (size_t)(l->n + 1) * sizeof *v);
        if (!v) return fail(err, errlen, "out of memory");
        l->v = v;
        if (!(v[l->n] = strdup(text))) return fail(err, errlen, "out of memory");
        l->n++;
        return 0;
    }
    case OPT_VMODELS:
        return add_vmodel(cfg, text, err, errlen);
    case OPT_BOOL:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0) *(int *)field = 1;
        else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0) *(int *)field = 0;
        else return fail(err, errlen, "%s: '%s' expects true or false, got '%s'", origin, opt->name, text);
        return 0;
    case OPT_INT:
    case OPT_LONG: {
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (errno || end == text || *end)
            return fail(err, errlen, "%s: '%s' expects an integer, got '%s'", origin, opt->name, text);
        if ((double)v < opt->min || (double)v > opt->max)
            return fail(err, errlen, "%s: '%s' must be between %.0f and %.0f, got %lld", origin,
                        opt->name, opt->min, opt->max, v);
        if (opt->type == OPT_INT) *(int *)field = (int)v;
        else *(long *)field = (long)v;
        return 0;
    }
    case OPT_DOUBLE: {
        errno = 0;
        double v = strtod(text, &end);
        if (errno || end == text || *end)
            return fail(err, errlen, "%s: '%s' expects a number, got '%s'", origin, opt->name, text);
        if (v < opt->min || v > opt->max)
            return fail(err, errlen, "%s: '%s' must be between %g and %g, got %g", origin,
                        opt->name, opt->min, opt->max, v);
        *(double *)field = v;
        return 0;
    }
    }
    return fail(err, errlen, "internal: bad option type");
}

static int set_from_json(wf_config *cfg, const option_spec *opt, json_t *value,
                         const char *path, char *err, size_t errlen) {
    char text[64];
    switch (opt->type) {
    case OPT_STRING:
        if (!json_is_string(value))
            return fail(err, errlen, "%s: key '%s' must be a string", path, opt->name);
        return set_from_text(cfg, opt, json_string_value(value), path, err, errlen);
    case OPT_LIST:
        if (json_is_string(value)) return set_from_text(cfg, opt, json_string_value(value), path, err, errlen);
        if (!json_is_array(value))
            return fail(err, errlen, "%s: key '%s' must be a string or an array of strings", path, opt->name);
        for (size_t i = 0; i < json_array_size(value); i++) {
            json_t *k = json_array_get(value, i);
            if (!json_is_string(k)) return fail(err, errlen, "%s: %s[%zu] must be a string", path, opt->name, i);
            if (set_from_text(cfg, opt, json_string_value(k), path, err, errlen) < 0) return -1;
        }
        return 0;
    case OPT_KEYS:
        if (json_is_string(value)) return add_key(cfg, json_string_value(value), err, errlen);
        if (!json_is_array(value))
            return fail(err, errlen, "%s: key 'api_key' must be a string or an array of strings", path);
        for (size_t i = 0; i < json_array_size(value); i++) {
            json_t *k = json_array_get(value, i);
            if (!json_is_string(k))
                return fail(err, errlen, "%s: api_key[%zu] must be a string", path, i);
            if (add_key(cfg, json_string_value(k), err, errlen) < 0) return -1;
        }
        return 0;
    case OPT_VMODELS: {
        if (!json_is_array(value))
            return fail(err, errlen, "%s: key 'vmodel' must be a list of strings or objects", path);
        for (size_t i = 0; i < json_array_size(value); i++) {
            json_t *e = json_array_get(value, i);
            char *txt = json_is_string(e) ? strdup(json_string_value(e))
                        : json_is_object(e) ? json_dumps(e, JSON_COMPACT) : NULL;
            if (!txt)
                return fail(err, errlen, "%s: vmodel[%zu] must be a string or an object", path, i);
            int rc = add_vmodel(cfg, txt, err, errlen);
            free(txt);
            if (rc < 0) return -1;
        }
        return 0;
    }
    case OPT_BOOL:
        if (!json_is_boolean(value))
            return fail(err, errlen, "%s: key '%s' must be true or false", path, opt->name);
        return set_from_text(cfg, opt, json_is_true(value) ? "true" : "false", path, err, errlen);
    case OPT_INT:
    case OPT_LONG:
        if (!json_is_integer(value))
            return fail(err, errlen, "%s: key '%s' must be an integer", path, opt->name);
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(value));
        return set_from_text(cfg, opt, text, path, err, errlen);
    case OPT_DOUBLE:
        if (!json_is_number(value))
            return fail(err, errlen, "%s: key '%s' must be a number", path, opt->name);
        snprintf(text, sizeof text, "%.17g", json_number_value(value));
        return set_from_text(cfg, opt, text, path, err, errlen);
    }
    return fail(err, errlen, "internal: bad option type");
}

int wf_config_load_file(wf_config *cfg, const char *path, char *err, size_t errlen) {
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return fail(err, errlen, "config %s: %s (line %d, column %d)", path, jerr.text, jerr.line,
                    jerr.column);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = fail(err, errlen, "config %s: the top level must be a JSON object", path);
        goto done;
    }
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        char flag[64];
        size_t n = strlen(key);
        if (n >= sizeof flag) n = sizeof flag - 1;
        for (size_t i = 0; i < n; i++) flag[i] = key[i] == '_' ? '-' : key[i];
        flag[n] = '\0';
        const option_spec *opt = find_flag(flag, n);
        if (!opt || strcmp(opt->name, "config") == 0) {
            rc = fail(err, errlen, "config %s: unknown key '%s'", path, key);
            goto done;
        }
        if ((rc = set_from_json(cfg, opt, value, path, err, errlen)) < 0) goto done;
    }
done:
    json_decref(root);
    return rc;
}

static int resolve_models(wf_config *cfg, char *err, size_t errlen);

char *wf_config_default_model_path(void) {
    const char *env = getenv("WEFT_MODEL");
    if (env && env[0]) return strdup(env);
    char system_path[PATH_MAX], user_path[PATH_MAX];
    snprintf(system_path, sizeof system_path, "%s/%s", WF_DEFAULT_MODEL_DIR, WF_DEFAULT_MODEL_FILE);
    if (access(system_path, R_OK) == 0) return strdup(system_path);
    const char *home = getenv("HOME");
    if (home) {
        snprintf(user_path, sizeof user_path, "%s/.local/share/weft/models/%s", home,
                 WF_DEFAULT_MODEL_FILE);
        if (access(user_path, R_OK) == 0) return strdup(user_path);
    }
    return strdup(system_path);
}

void wf_config_print_help(FILE *out, const char *argv0) {
    fprintf(out,
            "Usage: %s [OPTIONS]\n"
            "weft %s: an OpenAI-compatible serving daemon for LLMs and DiTs.\n\n"
            "Every option can also be set in the JSON file given to --config, under the same\n"
            "name with '_' for '-' (e.g. {\"port\": 8081, \"api_key\": [\"k1\", \"k2\"]}).\n"
            "Flags override the file.\n\nOptions:\n",
            argv0, WEFT_VERSION);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        char left[48];
        snprintf(left, sizeof left, "--%s%s%s", options[i].name, options[i].arg ? " " : "",
                 options[i].arg ? options[i].arg : "");
        fprintf(out, "  %-28s %s\n", left, options[i].help);
    }
    fprintf(out, "  %-28s %s\n  %-28s %s\n", "-h, --help", "print this help and exit",
            "-V, --version", "print the version and exit");
}

/* Splits "--name=value" / "--name value"; returns the option or NULL (error set). */
static const option_spec *flag_at(int argc, char **argv, int *i, const char **value, char *err,
                                  size_t errlen) {
    const char *arg = argv[*i];
    if (strncmp(arg, "--", 2) != 0) {
        fail(err, errlen, "unexpected argument '%s' (see --help)", arg);
        return NULL;
    }
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const option_spec *opt = find_flag(name, len);
    if (!opt) {
        fail(err, errlen, "unknown option '%.*s' (see --help)", (int)(len + 2), arg);
        return NULL;
    }
    if (eq) *value = eq + 1;
    else if (opt->type == OPT_BOOL) *value = "true";
    else if (*i + 1 < argc) *value = argv[++*i];
    else {
        fail(err, errlen, "option '--%s' needs a value", opt->name);
        return NULL;
    }
    return opt;
}

int wf_config_parse(wf_config *cfg, int argc, char **argv, char *err, size_t errlen) {
    set_defaults(cfg);
    if (!cfg->host || !cfg->log_level || !cfg->policy) return fail(err, errlen, "out of memory");
    /* Pass 1: --help, --version and --config, so the file applies before the other flags. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            wf_config_print_help(stdout, argv[0]);
            return 1;
        }
        if (strcmp(argv[i], "-V") == 0 || strcmp(argv[i], "--version") == 0) {
            printf("weftd %s\n", WEFT_VERSION);
            return 1;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *value = NULL;
        const option_spec *opt = flag_at(argc, argv, &i, &value, err, errlen);
        if (!opt) return -1;
        if (strcmp(opt->name, "config") == 0 &&
            (set_from_text(cfg, opt, value, "command line", err, errlen) < 0 ||
             wf_config_load_file(cfg, value, err, errlen) < 0))
            return -1;
    }
    /* Pass 2: every flag but --config, overriding the file. */
    for (int i = 1; i < argc; i++) {
        const char *value = NULL;
        const option_spec *opt = flag_at(argc, argv, &i, &value, err, errlen);
        if (!opt) return -1;
        if (strcmp(opt->name, "config") == 0) continue;
        if (set_from_text(cfg, opt, value, "command line", err, errlen) < 0) return -1;
    }
    if (cfg->api_key_file && load_key_file(cfg, cfg->api_key_file, err, errlen) < 0) return -1;
    if (resolve_models(cfg, err, errlen) < 0) return -1;
    if (cfg->share_turns && strcmp(cfg->share_turns, "edf") != 0 && strcmp(cfg->share_turns, "batch") != 0 &&
        strcmp(cfg->share_turns, "ahead") != 0)
        return fail(err, errlen, "--share-turns must be edf, ahead or batch, not '%.40s'", cfg->share_turns);
    if (cfg->image_order && strcmp(cfg->image_order, "edf") != 0 && strcmp(cfg->image_order, "fcfs") != 0)
        return fail(err, errlen, "--image-order must be edf or fcfs, not '%.40s'", cfg->image_order);
    return check_roles(cfg, err, errlen);
}

void wf_config_free(wf_config *cfg) {
    for (size_t i = 0; i < N_OPTIONS; i++) {
        void *field = (char *)cfg + options[i].offset;
        if (options[i].type == OPT_STRING) {
            free(*(char **)field);
            *(char **)field = NULL;
        } else if (options[i].type == OPT_LIST) {
            wf_strlist *l = field;
            for (int k = 0; k < l->n; k++) free(l->v[k]);
            free(l->v);
            l->v = NULL;
            l->n = 0;
        }
    }
    free(cfg->model);
    free(cfg->model_name);
    cfg->model = cfg->model_name = NULL;
    for (int i = 0; i < cfg->n_dits; i++) {
        free(cfg->dit_models[i]);
        free(cfg->dit_names[i]);
        cfg->dit_models[i] = cfg->dit_names[i] = NULL;
    }
    cfg->n_dits = 0;
    for (size_t i = 0; i < cfg->n_api_keys; i++) free(cfg->api_keys[i]);
    free(cfg->api_keys);
    cfg->api_keys = NULL;
    cfg->n_api_keys = 0;
    for (size_t i = 0; i < cfg->n_vmodels; i++) free(cfg->vmodels[i]);
    free(cfg->vmodels);
    cfg->vmodels = NULL;
    cfg->n_vmodels = 0;
}

/* Sorts --model values into the LLM and the DiTs (wf_dit_detect reads headers only) and pairs
 * --model-name values with them. No --model: the default LLM plus the default DiT when it is
 * installed; DiTs alone: the default LLM beside them (the text routes need one). */
static int resolve_models(wf_config *cfg, char *err, size_t errlen) {
    free(cfg->model);
    free(cfg->model_name);
    cfg->model = cfg->model_name = NULL;
    for (int i = 0; i < cfg->n_dits; i++) {
        free(cfg->dit_models[i]);
        free(cfg->dit_names[i]);
    }
    cfg->n_dits = 0;
    if (cfg->model_names.n > cfg->models.n && cfg->models.n > 0)
        return fail(err, errlen, "%d --model-name for %d --model", cfg->model_names.n, cfg->models.n);
    for (int i = 0; i < cfg->models.n; i++) {
        const char *path = cfg->models.v[i];
        const char *name = i < cfg->model_names.n ? cfg->model_names.v[i] : NULL;
        if (wf_dit_detect(path)) {
            if (cfg->n_dits >= WF_CONFIG_MAX_DITS)
                return fail(err, errlen, "--model: at most %d DiT models", WF_CONFIG_MAX_DITS);
            cfg->dit_models[cfg->n_dits] = strdup(path);
            cfg->dit_names[cfg->n_dits] = name ? strdup(name) : NULL;
            cfg->n_dits++;
        } else {
            if (cfg->model)
                return fail(err, errlen, "--model %s and %s are both LLMs: weftd serves one LLM (plus any DiTs)",
                            cfg->model, path);
            cfg->model = strdup(path);
            cfg->model_name = name ? strdup(name) : NULL;
        }
    }
    if (cfg->models.n == 0 && cfg->model_names.n == 1) cfg->model_name = strdup(cfg->model_names.v[0]);
    if (!cfg->model && !(cfg->model = wf_config_default_model_path()))
        return fail(err, errlen, "out of memory");
    if (cfg->models.n == 0) {
        char dit[4096];
        snprintf(dit, sizeof dit, "%s/%s", WF_DEFAULT_MODEL_DIR, WF_DEFAULT_DIT_DIR);
        if (access(dit, R_OK) == 0 && wf_dit_detect(dit)) {
            cfg->dit_models[0] = strdup(dit);
            cfg->dit_names[0] = NULL;
            cfg->n_dits = 1;
        }
    }
    return 0;
}
