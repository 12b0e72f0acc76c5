/* A weftd worker process (`weftd --role worker`): one rank of the world that holds an engine
 * replica (weights mmapped, so the page cache shares them between processes) and its own paged
 * KV memory, and runs the task batches the coordinator (rank 0, server/workers/pool.h) sends it.
 *
 *     wf_worker_params p;
 *     wf_worker_params_init(&p);
 *     p.host = "10.0.0.1"; p.port = 7000; p.n_ranks = 3; p.rank = -1;
 *     p.model_path = "model.gguf"; p.cores = "2-3";
 *     return wf_worker_main(&p);   // returns when told to shut down or when rank 0 is gone
 *
 * Protocol (proto/ frames, tag WF_WORLD_TAG_USER, all with rank 0): once the engine is loaded
 * and its KV codec profiles measured, the worker sends WORKER_INFO (its declared role, the
 * codec speeds it measured), then HEARTBEAT (kv_blocks_total = its KV blocks, and
 * kv_swa_blocks_total its sliding-window layers' blocks when its store is split: the coordinator
 * sizes the group's block accounting from them; that first heartbeat means "ready"), then one HEARTBEAT per
 * heartbeat_ms while idle. Virtual models' adapters (p.vmodels) are loaded before that first
 * heartbeat; those added at run time come as VMODEL frames (add: load and bind to the
 * coordinator's number, replacing a binding of that number; remove: unbind and free), each
 * answered with VMODEL_ACK (WF_OK or the error naming the file). Each TASK_DISPATCH is run whole and answered with TASK_EVENT (the
 * tasks' outputs) and BATCH_DONE. SHUTDOWN ends the process. Rank 0 failing, or silent for
 * timeout_ms, ends it too (a worker never outlives its coordinator). */
#ifndef WF_SERVER_WORKERS_WORKER_H
#define WF_SERVER_WORKERS_WORKER_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/frame_control.h"

typedef struct wf_worker_params {
    const char *host;         /* the coordinator's bootstrap address */
    int port;
    int n_ranks;              /* world size: workers + 1 */
    int rank;                 /* the slot to fill (a replacement), or -1 for any free one */
    const char *cores;        /* CPU list to pin to ("0-1", "2,5"); NULL: inherit */
    int n_threads;            /* 0: one per pinned core */
    const char *model_path;
    long kv_memory_mb;
    int max_batch_tokens;
    int max_running;
    int heartbeat_ms;         /* idle heartbeat period */
    int timeout_ms;           /* rank 0 silent this long: exit */
    int join_timeout_ms;
    /* KV compression of prefill -> decode transfers (server/workers/kv_xfer.h): */
    const char *kv_profiles;  /* profile library (weft-kvprof's JSON); NULL: always raw */
    const char *kv_codec;     /* "auto" (controller), "off", or a profile name */
    double kv_accuracy;       /* deployment default accuracy budget (0..1) */
    int kv_codec_threads;     /* codec threads (0: one per core of this worker; 1: serial) */
    bool kv_ship_after_prefill; /* PD prefill: ship KV once the batch is done, not layer by layer */
    /* virtual models (server/vmodels.h text forms): their adapters are loaded and bound to the
     * number wf_vmodel_spec_num gives, the coordinator's; a bad one is a start-up failure */
    char *const *vmodels;
    int n_vmodels;
    const char *dit_path;     /* a DiT whose DENOISE chunks this worker runs (NULL: none); a
                                 latent from home crosses with the TASK_DISPATCH as a tagged
                                 message (server/workers/pool.h: wf_workers_dispatch_latents),
                                 stays here between chunks and moves to the next group worker
                                 to worker (server/workers/dit_router.h) */
    long image_max_pixels;    /* the DiT's largest image (weftd --image-max-pixels; 0: its
                                 default), as the coordinator's, so that its other sizes fit */
    wf_frame_role pd_role;    /* declared to the coordinator (WORKER_INFO): prefill, decode or
                                 worker (any: the coordinator's slot decides) */
    int dit_max_items;        /* images per DiT forward pass (--image-max-batch; 0: default),
                                 the coordinator's: its batches and latent slots assume it */
    bool kv_window_release;   /* a model with sliding-window layers (Gemma 3) gets a KV store
                                 split by layer kind (kv/kv_store.h), its local blocks sized by
                                 wf_kv_swa_blocks_wanted, the count in its heartbeats; not for
                                 a declared prefill or decode role (peers address unsplit
                                 stores only) */
} wf_worker_params;

void wf_worker_params_init(wf_worker_params *p);

/* Parses a CPU list ("0-3,6") into a mask of WF_CPUS_MAX bits; returns the number of CPUs, or
 * -1 (err says why) for a malformed list or a CPU >= WF_CPUS_MAX. */
#define WF_CPUS_MAX 1024
int wf_cpu_list_parse(const char *list, unsigned char mask[WF_CPUS_MAX / 8], char *err,
                      size_t errlen);

/* Runs the worker; returns the process exit status (0: told to stop or rank 0 left; 1: a
 * start-up failure, logged). */
int wf_worker_main(const wf_worker_params *p);

#endif
