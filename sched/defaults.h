/* The one table of serving defaults: the scheduler's options (wf_sched_options_init), weftd's
 * configuration (server/config.c) and its assembly (server/daemon.c) all start from these, so a
 * default changes in one place.
 *
 *     wf_sched_options o;
 *     wf_sched_options_init(&o);     // o.queue_size == WF_DEFAULT_QUEUE_SIZE, ...
 *
 * Constants only: thread-safe, nothing to free. Plain literals, so WF_DEFAULT_STR() can put them
 * into help texts. */
#ifndef WF_SCHED_DEFAULTS_H
#define WF_SCHED_DEFAULTS_H

#define WF_DEFAULT_POLICY "slo"
#define WF_DEFAULT_QUEUE_SIZE 1024          /* waiting requests before 503 */
#define WF_DEFAULT_MAX_BATCH_TOKENS 512     /* token budget per iteration (per group) */
#define WF_DEFAULT_MAX_RUNNING 64           /* sequences decoding at once (per group) */
#define WF_DEFAULT_N_CTX 2048               /* when neither the model nor the user says */
#define WF_DEFAULT_TTFT_MS 2000             /* SLO of a request that names none */
#define WF_DEFAULT_TPOT_MS 200
#define WF_DEFAULT_ADMISSION_FACTOR 2.0     /* reject when predicted TTFT > factor x SLO */
/* An iteration that decodes takes at most this x its decode-only time (prefill chunks fit in
 * the rest) unless a prompt's TTFT is at risk: smooth inter-token latency (sched/core.h). */
#define WF_DEFAULT_PREFILL_STRETCH 2.0
#define WF_DEFAULT_KV_MEMORY_MB 512         /* KV cache budget (per group) */
#define WF_DEFAULT_KV_BLOCK_SIZE 16         /* tokens per KV block */
/* Events the server's queue holds before the scheduler keeps them back (back-pressure): a few
 * iterations' worth of tokens at max_running sequences. */
#define WF_DEFAULT_EVENTS_QUEUE 4096
/* With --share-cores: the minimum fraction of the cores' recent time each class (text, images)
 * gets while it has work waiting, whatever the deadlines say (sched/gate.h). */
#define WF_DEFAULT_SHARE_MIN 0.2

#define WF_DEFAULT_STR_(x) #x
#define WF_DEFAULT_STR(x) WF_DEFAULT_STR_(x)

#endif
