/* The image scheduler: turns image requests into trajectory tasks (ENCODE -> DENOISE(steps
 * a..b).. -> DECODE_IMAGE -> FINISH) and runs them on one executor per DiT model with
 * step-level continuous batching.
 *
 *     wf_image_sched_options o; wf_image_sched_options_init(&o);   // chunk_steps, batching, ...
 *     wf_image_sched *s;
 *     wf_image_sched_new(&o, &s);
 *     int m;
 *     wf_image_sched_add_model(s, executor, &geometry, &m);      // e.g. engine/dit/dit_exec.h
 *     wf_image_sched_start(s);
 *     // loop thread, per HTTP request:
 *     wf_image_spec spec = {.model = m, .n = 2, .class_label = 3, .num_steps = 20, ...};
 *     wf_image_request *req; char why[160];
 *     if (wf_image_sched_submit(s, &spec, &events, conn, &req, why, sizeof why) != WF_OK) 503/400;
 *     // events (wf_image_event on the caller's wf_handoff): PROGRESS (when spec.progress),
 *     // PREVIEW (when spec.preview_every), IMAGE (one per image: pixels valid until release),
 *     // then exactly one FINISHED.
 *     wf_image_sched_cancel(s, req);        // client gone: stops at its next step boundary
 *     wf_image_sched_release(s, req);       // after FINISHED: frees the request
 *     wf_image_sched_free(s);
 *
 * Batching: every plan gathers, for one model and one image size, the DENOISE chunks
 * (chunk_steps steps each) of up to max_items images of all running requests of that size, each
 * at its own step, so requests of one model and resolution share every forward pass and a new
 * request joins at the next step boundary; the size is the one of the first request in the
 * plan's order with denoising to do, so a request of another size waits until the requests of
 * other sizes ordered before it (earlier deadline, ...) have no denoising left; its ENCODE rides in the same batch (the executor runs ENCODE before DENOISE before
 * DECODE_IMAGE), and an image whose last chunk runs also gets its DECODE_IMAGE there. Order:
 * earliest deadline first, then priority (larger first), then arrival. With batching off, one
 * request runs at a time (its n images together): the baseline the benchmark compares with.
 * The noise of image i of a request is keyed by (seed, i) only, so a seed gives the same
 * image alone or in any batch.
 *
 * Cancellation frees the request's latents (FINISH tasks) at the next plan, then sends
 * FINISHED(cancelled). A failed task fails its request (FINISHED with the status and a
 * message); a batch the executor fails fails every request in it.
 *
 * Thread-safety: submit, cancel, release, stats and foreach from any thread; events are pushed
 * from the scheduler's thread; the consumer frees each with wf_image_event_free. The events
 * queue should be unbounded (each request sends at most n x (steps + 1) + 1 events and the
 * number of requests is bounded by queue_size); a closed queue cancels the request. */
#ifndef WF_SCHED_IMAGES_H
#define WF_SCHED_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/handoff.h"
#include "proto/request.h"
#include "proto/task.h"

#define WF_IMAGE_SCHED_MAX_MODELS 16
#define WF_DEFAULT_IMAGE_CHUNK_STEPS 1
#define WF_IMAGE_MAX_GROUP 8
/* Image sizes a model's cost model tells apart at once (sizes of held requests; a size nobody
 * holds gives its entry up to a new one). */
#define WF_IMAGE_MAX_SIZES 16

typedef struct wf_image_sched_options {
    int chunk_steps;  /* denoising steps per DENOISE task (default 1: join at every step) */
    bool batching;    /* step-level batching across requests (default true) */
    bool fcfs;        /* order by arrival only, ignoring deadlines and priorities (default false:
                       * earliest deadline first): the baseline of the mixed-load benchmark */
    int queue_size;   /* requests held at once before WF_EFULL (default 1024) */
} wf_image_sched_options;

void wf_image_sched_options_init(wf_image_sched_options *o);

/* What a model's executor produces and holds. */
typedef struct wf_image_geometry {
    int width, height, channels; /* of DECODE_IMAGE's 8-bit output at the native size */
    int latent_channels, latent_height, latent_width; /* the native latent */
    /* Other sizes (engine/dit/dit_exec.h): image sides multiples of size_multiple, the latent's
     * side = the image's x latent_width / width, width x height at most max_pixels. 0: the
     * native size only. */
    int size_multiple;
    long max_pixels;
    /* The share of a native step's work that grows with the square of the latent positions
     * (attention; the rest grows linearly): a size with r times the positions is first
     * predicted at (1 - attn_share) r + attn_share r^2 times the native step. 0: linear. */
    double attn_share;
    int max_items;               /* images per forward */
    int max_latents;             /* latents the executor holds at once */
} wf_image_geometry;

/* Parses an OpenAI 'size' for a model of geometry g: "auto" (the native size) or "WxH" (decimal
 * digits only, no sign, space or leading zero) that g can make (the native size, or sides
 * multiples of g->size_multiple with W x H at most g->max_pixels). True with *w, *h set; false
 * when it cannot be made (then *w, *h hold the native size). */
bool wf_image_size_parse(const wf_image_geometry *g, const char *size, int *w, int *h);

typedef struct wf_image_spec {
    char id[WF_REQUEST_ID_MAX];
    int model;              /* from wf_image_sched_add_model */
    int n;                  /* images, >= 1 */
    int width, height;      /* image size; 0 x 0: the model's native size */
    int32_t class_label;
    int32_t negative_label; /* < 0: the null class */
    float guidance_scale;   /* <= 1: none */
    int sampler;            /* < 0: the model's own */
    int num_steps;
    uint64_t seed;
    int priority;
    uint64_t deadline_ns;   /* CLOCK_MONOTONIC; 0: none */
    bool progress;          /* send PROGRESS events */
    int preview_every;      /* > 0: a PREVIEW of each image whenever its step passes a multiple
                             * of this (not at the last step): its current latent decoded (a
                             * DECODE_IMAGE riding in the same batch), noisy early on */
} wf_image_spec;

typedef struct wf_image_request wf_image_request;

typedef enum wf_image_event_kind {
    WF_IMAGE_EVENT_PROGRESS = 0, /* an image finished a DENOISE chunk */
    WF_IMAGE_EVENT_IMAGE,        /* an image is decoded */
    WF_IMAGE_EVENT_FINISHED,     /* the request ended (the last event) */
    WF_IMAGE_EVENT_PREVIEW,      /* spec.preview_every: an image's current latent decoded */
} wf_image_event_kind;

typedef struct wf_image_event {
    wf_handoff_item link;        /* first: an event is a wf_handoff_item */
    wf_image_request *request;
    void *user;
    wf_image_event_kind kind;
    int index;                   /* PROGRESS, IMAGE: which image */
    int step, n_steps;           /* PROGRESS, PREVIEW: steps done of n_steps */
    const uint8_t *pixels;       /* IMAGE: height x width x channels bytes, valid until release;
                                  * PREVIEW: the event's own copy, valid until the event is freed */
    int width, height, channels;
    wf_status status;            /* FINISHED: WF_OK, WF_ECANCELLED or the error */
    char message[160];           /* FINISHED with an error */
    uint64_t t_ns;
    uint64_t queued_ns, started_ns, finished_ns; /* FINISHED: the request's times */
    int steps_run;               /* FINISHED: denoising steps applied over its images */
    bool alone;                  /* FINISHED: no other request of its model was held meanwhile
                                  * (its time is its own: what a cost model's request_ms fits) */
    int group_size;              /* FINISHED: ranks of its last DENOISE chunk (0: none ran) */
} wf_image_event;

typedef struct wf_image_sched wf_image_sched;

/* WF_EINVAL, WF_ENOMEM. */
wf_status wf_image_sched_new(const wf_image_sched_options *o, wf_image_sched **out);
/* Before start. The executor must support ENCODE, DENOISE, DECODE_IMAGE and FINISH and outlive
 * the scheduler. WF_EINVAL, WF_EFULL (too many models), WF_ENOMEM. */
wf_status wf_image_sched_add_model(wf_image_sched *s, wf_executor ex, const wf_image_geometry *g,
                                   int *out_id);
/* Before start: model id's executor is gated executor x (sched/gate.h, its
 * wf_gated_executor_get): its batches are then composed when the gate grants the model's
 * claim (the earliest deadline of its requests with work, and the predicted batch time), so
 * that they take one EDF order with the other classes' work. WF_EINVAL (started, bad id, x
 * not that model's executor). */
struct wf_gated_executor;
wf_status wf_image_sched_set_turns(wf_image_sched *s, int id, struct wf_gated_executor *x);
/* Calibrates each model's cost model through its executor (blocking: after a warm-up, the
 * medians of 5 timed one-step batches of 1 and of max_items images, and of 5 decodes), then
 * starts the thread. */
wf_status wf_image_sched_start(wf_image_sched *s);
/* WF_OK: *out is valid until release and events follow. WF_EINVAL (bad spec: why says which
 * field), WF_EFULL (queue_size requests held), WF_EBUSY (draining), WF_ENOMEM, WF_EOVERLOAD: the
 * request has a deadline it cannot meet (*retry_after_s, may be NULL: the seconds the work
 * already held needs), for one of two reasons, which why says:
 *  - "even alone": its images in waves of max_items at the fastest step ever measured
 *    (calibrated cost x the smallest correction seen) take longer than the time left;
 *  - "behind the held images": other images are held and the prediction misses. Prediction: a
 *    denoising step of a batch of b images takes (a + c b) x correction ms and a decode
 *    d x correction ms per image (a, c, d calibrated at start, correction an exponential average
 *    of measured over calibrated over every batch that ran); while the held images and the new
 *    ones fit in one batch (max_items) they all advance together, else the work ahead drains
 *    max_items at a time, where "ahead" follows the plan's order (the held requests due before
 *    it: earlier deadline, then higher priority, then earlier arrival), or is all held work
 *    when its images would not get latents at once (max_latents). Step times are those of
 *    each request's size; held work of another size never shares its batches: what of it is
 *    ahead drains before (at that size's full-batch rate), the rest after.
 * A model holding no images admits whatever does not miss even alone: a stale prediction (e.g.
 * calibrated on a busy machine) must not refuse forever, and the batches it then runs correct
 * the model. */
wf_status wf_image_sched_submit(wf_image_sched *s, const wf_image_spec *spec, wf_handoff *events,
                                void *user, wf_image_request **out, char *why, size_t whylen,
                                double *retry_after_s);
/* The cost model of a model: ms per denoising step of a batch of b images = (a + c b) x
 * correction, plus decode_ms x correction per image for its DECODE_IMAGE (the VAE of a latent
 * model), at the native size. false before calibration.
 * Other sizes: each size held gets an entry with scale = the step's work over the native one's
 * predicted from r, its latent positions over the native ones ((1 - attn_share) r +
 * attn_share r^2; the decode's work scales with r) and its own correction, which starts as the native one's and is set by the first
 * batch that runs at that size (measured lazily), then corrected online like the native one:
 * a step of b images of that size takes (a + c b) x scale x correction ms. */
bool wf_image_sched_cost(wf_image_sched *s, int model, double *a, double *c, double *decode_ms,
                         double *correction);
typedef struct wf_image_size_cost {
    int width, height;  /* image size */
    double scale;       /* predicted step work over the native size's (see above) */
    double correction;
    bool measured;      /* a batch of this size ran (the native size: calibrated) */
    double step_ms;     /* the prediction for a one-image step of this size */
    int held_images;
} wf_image_size_cost;
/* The model's size entries (the native one first); returns how many were written (<= cap). */
int wf_image_sched_size_costs(wf_image_sched *s, int model, wf_image_size_cost *out, int cap);
void wf_image_sched_cancel(wf_image_sched *s, wf_image_request *req);
/* The request's images, n x height x width x channels bytes: image i is complete once its
 * IMAGE event arrived; valid until release. */
const uint8_t *wf_image_request_pixels(const wf_image_request *req);
void wf_image_sched_release(wf_image_sched *s, wf_image_request *req);
void wf_image_event_free(wf_image_event *ev);
/* Stops admitting, lets requests finish until deadline_ms, cancels the rest; returns when none
 * is left. */
void wf_image_sched_drain(wf_image_sched *s, int deadline_ms);
/* Stops the thread (drain first) and frees the scheduler. NULL is a no-op. */
void wf_image_sched_free(wf_image_sched *s);

typedef struct wf_image_sched_stats {
    int running;                       /* requests held */
    uint64_t submitted, finished, failed, cancelled, rejected;
    uint64_t images, steps, batches;
    double step_ms_avg;                /* forward rounds of recent batches (per DENOISE step) */
    uint64_t step_ms_hist[12];         /* DENOISE chunk time per step: <=1,2,5,10,20,50,100,200,500,1000,2000,+inf ms */
    uint64_t e2e_ms_hist[12];          /* request end to end, same bounds x 10 */
    double queue_ms_sum, e2e_ms_sum, step_ms_sum;
    uint64_t overloaded;               /* refused: deadline out of reach (in rejected too) */
    /* DENOISE chunks by the size of the group that ran them (the task's group as the executor
     * reports it; an in-process executor counts as 1): index P, the last index also counts
     * larger groups. last_group_size: of the last chunk (0 before any). */
    uint64_t chunks_by_group[WF_IMAGE_MAX_GROUP + 1];
    int last_group_size;
} wf_image_sched_stats;

void wf_image_sched_get_stats(wf_image_sched *s, wf_image_sched_stats *out);
/* Zeroes the counters (all and per model): after requests of the server's own, e.g. a start-up
 * calibration, that its users did not send. */
void wf_image_sched_reset_stats(wf_image_sched *s);
/* The same counters for one model (running: its unfinished requests). false: no such model. */
bool wf_image_sched_get_model_stats(wf_image_sched *s, int model, wf_image_sched_stats *out);

typedef struct wf_image_snapshot {
    char id[WF_REQUEST_ID_MAX];
    int model, n, num_steps;
    int width, height;  /* its image size */
    int priority;       /* its SLO class */
    int steps_done;     /* summed over its images */
    int images_done;
    double age_ms;
    bool cancelled;
    int group_size;     /* ranks of its last DENOISE chunk (0 before any) */
} wf_image_snapshot;

/* fn per held request, under the scheduler's lock: quick, no calls back. */
void wf_image_sched_foreach(wf_image_sched *s, void (*fn)(const wf_image_snapshot *, void *),
                            void *user);

#endif
