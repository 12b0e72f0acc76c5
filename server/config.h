/* weftd's configuration: defaults < JSON config file (--config) < command-line flags.
 * Every option is declared once in config.c's table, which drives argv parsing, the JSON file
 * keys (the flag name with '-' turned into '_'), and --help.
 *
 *     wf_config cfg;
 *     char err[256];
 *     int rc = wf_config_parse(&cfg, argc, argv, err, sizeof err);
 *     if (rc < 0) { fprintf(stderr, "weftd: %s\n", err); return 2; }
 *     if (rc > 0) return 0;  // --help or --version was printed
 *     ...
 *     wf_config_free(&cfg);
 *
 * Not thread-safe; call from main before starting threads. */
#ifndef WF_SERVER_CONFIG_H
#define WF_SERVER_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#define WF_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"
#define WF_DEFAULT_MODEL_DIR "/usr/local/share/weft/models"

/* A repeatable flag's values, in order. */
typedef struct wf_strlist {
    char **v;
    int n;
} wf_strlist;

#define WF_DEFAULT_DIT_DIR "weft-dit-digits" /* under WF_DEFAULT_MODEL_DIR */
#define WF_CONFIG_MAX_DITS 16

typedef struct wf_config {
    /* --model (repeatable): GGUF files and DiT folders/files, detected apart after parsing;
     * --model-name (repeatable) names them in the same order. */
    wf_strlist models, model_names;
    char *model;          /* the LLM's GGUF path (resolved; the default when none was given) */
    char *model_name;     /* its name in /v1/models; NULL: file name without .gguf */
    char *dit_models[WF_CONFIG_MAX_DITS]; /* DiT folders or files */
    char *dit_names[WF_CONFIG_MAX_DITS];  /* NULL: the folder/file name */
    int n_dits;
    int image_chunk_steps;  /* denoising steps per DENOISE task */
    char *dit_policy;       /* --dit-policy (with --workers) */
    int image_batching;     /* 1: step-level batching across image requests */
    int image_max_batch;    /* images per DiT forward */
    long image_max_pixels;  /* largest image a DiT serves (0: 4 x native) */
    char *image_order;      /* "edf" (default, NULL) or "fcfs": the image scheduler's order */
    int share_cores;        /* 1: LLM and DiT batches take turns on the cores */
    char *share_turns;      /* "ahead" (default, NULL): claims granted one batch ahead; "edf": late-bound claims; "batch": composed batches */
    double share_min;       /* each class's minimum share of the cores while it waits */
    char *host;
    int port;
    int threads;          /* engine worker threads; 0 = one per core */
    char **api_keys;      /* NULL-terminated; empty = no auth */
    size_t n_api_keys;
    char *api_key_file;
    char *config_file;
    char *log_level;
    int ctx_size;         /* max tokens per sequence; 0 = model's training context */
    int max_connections;
    long max_body_bytes;
    int idle_timeout_ms;
    int shutdown_timeout_ms;
    int metrics_open;     /* 1: /metrics needs no API key */
    int queue_size;       /* bound of the request queue to the scheduler */
    char *policy;         /* scheduler policy: fcfs, priority, slo */
    long kv_memory_mb;    /* KV-cache budget */
    int kv_window_release; /* 1: sliding-window layers keep only their window's KV blocks */
    int max_batch_tokens; /* token budget per iteration */
    double default_ttft_ms;
    double default_tpot_ms;
    int request_timeout_ms; /* a request must arrive whole within this, else 408 */
    long max_header_bytes;  /* request line + headers, else 431 */
    int write_timeout_ms;   /* a response write not done in this long: connection closed */
    long max_output_bytes;  /* unsent streamed bytes per connection before it is closed */
    int max_running;        /* sequences decoding at once */
    char *cost_model;       /* "a,b,c,d" (ms) or a file; NULL: calibrate at start-up */
    int fixed_cost_model;   /* 1: never refit the cost model from measured iterations */
    /* Extension: refuse (429) a request whose predicted TTFT exceeds this x its TTFT SLO. */
    double admission_factor;
    double prefill_stretch; /* sched options' prefill_stretch (<= 1: off) */
    /* Worker processes (server/workers/): ranks of one world. */
    int workers;            /* 0: the in-process engine (default); N: N worker processes */
    int prefill_workers;    /* prefill/decode disaggregation: workers = prefill + decode */
    int decode_workers;
    char *worker_cores;     /* "LIST:LIST:..." CPUs per local worker; NULL: split evenly */
    char *kv_profiles;      /* KV codec profile library for prefill -> decode transfers */
    char *kv_codec;         /* "auto" (NULL), "off", or a profile name */
    double kv_accuracy;     /* deployment default kv_accuracy (0..1) */
    int kv_codec_threads;   /* codec threads per worker (0: one per core) */
    int kv_layer_overlap;   /* 1: PD KV moves layer by layer during the prefill (default) */
    char *role;             /* "server" (default) or "worker" */
    char *join;             /* worker role: the coordinator's HOST:PORT */
    char *pd_role;          /* worker role: "prefill" or "decode" (declared when it joins) */
    char *world_host;       /* coordinator: bootstrap address to listen on */
    int world_port;         /* coordinator: bootstrap port (0: a free one) */
    int world_size;         /* worker role: ranks in the world (default: --workers + 1) */
    int rank;               /* worker role: the slot to fill (-1: any) */
    int local_workers;      /* coordinator: workers started here (-1: all) */
    int heartbeat_ms;
    int worker_timeout_ms;
    int join_timeout_ms;
    char **vmodels;         /* --vmodel declarations (server/vmodels.h grammar, or JSON text) */
    size_t n_vmodels;
    long adapter_memory_mb; /* budget for virtual models' adapters; 0: unlimited */
} wf_config;

/* Fills cfg from argv (and the JSON file named by --config), then adds the keys of
 * --api-key-file (one per line; blank lines and lines starting with '#' are skipped). Returns 0 to run, 1 if --help or
 * --version was printed (exit 0), -1 on a bad flag/file/value with a message in err naming it.
 * On -1 cfg holds nothing that needs freeing beyond wf_config_free (safe to call). */
int wf_config_parse(wf_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* Applies a JSON config file's keys onto cfg. Unknown keys and wrong types are errors. */
int wf_config_load_file(wf_config *cfg, const char *path, char *err, size_t errlen);

/* The default model path: $WEFT_MODEL, else WF_DEFAULT_MODEL_DIR/WF_DEFAULT_MODEL_FILE, else
 * $HOME/.local/share/weft/models/WF_DEFAULT_MODEL_FILE; the first that exists, or the system
 * path if none does (so the error names where it was expected). Returns a malloc'd string. */
char *wf_config_default_model_path(void);

void wf_config_print_help(FILE *out, const char *argv0);
void wf_config_free(wf_config *cfg);

#endif
