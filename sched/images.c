/* The image scheduler (see images.h): requests -> ENCODE / DENOISE / DECODE_IMAGE / FINISH tasks
 * planned per model with step-level batching, on one thread fed by one inbox. */
#include "sched/images.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <time.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/base/clock.h"
#include "proto/base/log.h"
#include "sched/gate.h"

typedef enum item_state {
    ITEM_NEW = 0,  /* no latent yet */
    ITEM_READY,    /* latent at `step`, nothing in flight */
    ITEM_BUSY,     /* a task in flight */
    ITEM_DECODED,  /* pixels written; latent still held */
    ITEM_DONE,     /* latent freed */
} item_state;

typedef struct item {
    item_state state;
    uint64_t latent_id; /* 0: none held */
    int step;
} item;

typedef enum msg_kind { MSG_SUBMIT, MSG_CANCEL, MSG_RELEASE, MSG_DONE, MSG_WAKE } msg_kind;

typedef struct msg {
    wf_handoff_item link;
    msg_kind kind;
} msg;

struct wf_image_request {
    msg submit_msg, cancel_msg, release_msg;
    atomic_bool cancel_sent, release_sent;
    wf_image_spec spec;
    wf_handoff *events;
    void *user;
    uint64_t seq;
    uint8_t *pixels;
    uint8_t *preview;  /* n images' latest previews (spec.preview_every > 0), else NULL */
    size_t image_bytes;
    int width, height;      /* its image size (spec's, or the native one) */
    int lat_h, lat_w;       /* its latent grid */
    int size;               /* its entry in the model's sizes (held: the entry stays its own) */
    item *items;
    bool cancelled, failed, finished, released;
    wf_status status;
    char message[160];
    int in_flight;     /* tasks dispatched, not completed */
    int steps_done, images_done;
    int group_size;    /* ranks of its last DENOISE chunk */
    bool shared;       /* another request of its model was held at some time of its life */
    long remaining;     /* image-steps still counted in the model's remaining */
    uint64_t queued_ns, started_ns;
    wf_image_event *finished_ev;
    wf_image_request *next; /* the model's list */
    wf_image_request *held_next; /* the model's held list (s->lock): admission's view */
    bool planned;           /* plan_model's mark */
};

/* One image size's share of the cost model (see wf_image_sched_cost). */
typedef struct size_cost {
    int width, height, lat_h, lat_w;
    double scale;          /* predicted step work over the native size's */
    double decode_scale;   /* latent positions over the native size's */
    double correction;     /* measured over predicted, smoothed */
    /* The smallest correction ever measured (calibration counts as 1): a floor on how fast a
     * step can be, so that "misses even alone" is said only when it provably does. */
    double min_correction;
    bool measured;
    int held_images;       /* images of unfinished requests of this size */
    uint64_t used_ns;
} size_cost;

typedef struct task_ref {
    wf_image_request *req;
    int index;
    bool preview; /* a DECODE_IMAGE into req->preview */
} task_ref;

typedef struct model {
    wf_executor ex;
    wf_image_geometry g;
    wf_image_request *head; /* held requests, arrival order */
    wf_image_request *solo; /* without batching: the request running */
    int latents_used;
    bool in_flight;
    msg done_msg;
    wf_task_batch batch;
    wf_task *tasks;
    task_ref *refs;
    int cap;
    wf_status batch_status;
    char batch_message[160];
    uint64_t dispatched_ns;
    /* The cost model, under the scheduler's lock: one denoising step of a batch of b images
     * of size z takes (a + c * b) * sizes[z].scale * sizes[z].correction ms. Calibrated at
     * start for the native size (sizes[0]), scaled for the others, corrected online. */
    double cost_a, cost_c;
    double decode_ms;    /* one DECODE_IMAGE (the VAE for latent models), native size */
    size_cost sizes[WF_IMAGE_MAX_SIZES];
    int n_sizes;
    int batch_size;      /* the size of the batch in flight (-1: no DENOISE in it) */
    bool cost_ok;
    bool probe_wanted;       /* a refusal said "even alone": re-measure once idle */
    uint64_t measured_ns;    /* the last calibration, probe or batch that measured a step */
    uint64_t probed_ns;      /* the last probe */
    long remaining;      /* image-steps not yet run by unfinished requests */
    wf_image_request *held; /* unfinished requests, under s->lock (submit links, finish unlinks) */
    int active_images;   /* images of unfinished requests */
    wf_image_sched_stats stats; /* this model's share of the scheduler's stats (s->lock) */
    wf_gated_executor *turns;   /* ex is this gated executor: plans wait for a granted claim */
    uint64_t claim_ns;          /* a turn was first claimed for the next batch (0: none) */
} model;

struct wf_image_sched {
    wf_image_sched_options o;
    model models[WF_IMAGE_SCHED_MAX_MODELS];
    int n_models;
    wf_handoff inbox;
    pthread_t thread;
    bool started;
    pthread_mutex_t lock; /* counters, held requests, stats */
    pthread_cond_t idle;
    int held;         /* submitted, not yet released */
    int unfinished;   /* submitted, FINISHED not yet sent */
    bool draining, stopping;
    atomic_bool cancel_everything; /* drain's deadline passed */
    pthread_mutex_t list_lock;     /* the models' request lists and their items (foreach) */
    uint64_t next_seq, next_artifact, next_task;
    wf_image_sched_stats stats;
    msg wake_msg;                  /* a granted turn wakes the thread (wake_pending: queued) */
    atomic_bool wake_pending;
};

/* The struct holding member m at p (intrusive links and preallocated messages). Through void *
 * because the member's own alignment already guarantees the struct's. */
#define container_of(p, T, m) ((T *)(void *)((char *)(p) - offsetof(T, m)))

/* Weight of one batch's measurement in the cost model's correction. */
#define CORRECTION_ALPHA 0.2
/* Timed repetitions of each calibration batch (the median counts). */
#define CALIB_REPS 5
/* The schedule length of calibration tasks: above the steps they run (2 + 2 x CALIB_REPS). */
#define CALIB_STEPS 32
/* Idle probes (maybe_probe): at most one a second, and one after 30 s without a measured step. */
#define PROBE_EVERY_NS 1000000000ull
#define PROBE_STALE_NS 30000000000ull

static const double hist_bounds[11] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000};

static void hist_add(uint64_t h[12], double v) {
    int i = 0;
    while (i < 11 && v > hist_bounds[i]) i++;
    h[i]++;
}

void wf_image_sched_options_init(wf_image_sched_options *o) {
    o->chunk_steps = WF_DEFAULT_IMAGE_CHUNK_STEPS;
    o->batching = true;
    o->queue_size = 1024;
    o->fcfs = false;
}

wf_status wf_image_sched_new(const wf_image_sched_options *o, wf_image_sched **out) {
    *out = NULL;
    if (!o || o->chunk_steps < 1 || o->queue_size < 1) return WF_EINVAL;
    wf_image_sched *s = calloc(1, sizeof *s);
    if (!s) return WF_ENOMEM;
    s->o = *o;
    if (wf_handoff_init(&s->inbox, 0, NULL, NULL) != WF_OK) {
        free(s);
        return WF_ENOMEM;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->list_lock, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->next_seq = s->next_artifact = s->next_task = 1;
    s->wake_msg.kind = MSG_WAKE;
    atomic_init(&s->wake_pending, false);
    *out = s;
    return WF_OK;
}

/* A side of "WxH": 1-9 digits (below 10^9: no overflow), no leading zero; the end in *end. */
static int size_side(const char *p, const char **end) {
    int v = 0, n = 0;
    if (*p == '0') return -1;
    while (*p >= '0' && *p <= '9' && n < 9) v = v * 10 + (*p++ - '0'), n++;
    *end = p;
    return n ? v : -1;
}

bool wf_image_size_parse(const wf_image_geometry *g, const char *size, int *w, int *h) {
    *w = g->width;
    *h = g->height;
    if (strcmp(size, "auto") == 0) return true;
    const char *p;
    int W = size_side(size, &p);
    if (W < 0 || *p != 'x') return false;
    int H = size_side(p + 1, &p);
    if (H < 0 || *p) return false;
    bool ok = (W == g->width && H == g->height) ||
              (g->size_multiple > 0 && W >= g->size_multiple && H >= g->size_multiple &&
               W % g->size_multiple == 0 && H % g->size_multiple == 0 && (long)W * H <= g->max_pixels);
    if (ok) {
        *w = W;
        *h = H;
    }
    return ok;
}

wf_status wf_image_sched_add_model(wf_image_sched *s, wf_executor ex, const wf_image_geometry *g,
                                   int *out_id) {
    if (s->started || !ex.ops || !g || g->max_items < 1 || g->max_latents < 1 || g->width < 1 ||
        g->height < 1 || g->channels < 1 || g->latent_height < 1 || g->latent_width < 1 ||
        g->size_multiple < 0 || (g->size_multiple > 0 && g->max_pixels < (long)g->width * g->height) ||
        !(g->attn_share >= 0 && g->attn_share <= 1))
        return WF_EINVAL;
    if (s->n_models >= WF_IMAGE_SCHED_MAX_MODELS) return WF_EFULL;
    model *m = &s->models[s->n_models];
    memset(m, 0, sizeof *m);
    m->ex = ex;
    m->g = *g;
    /* Each image has at most one task per kind in a batch (ENCODE, DENOISE, DECODE_IMAGE,
     * FINISH), and only images holding or about to hold a latent get one. */
    m->cap = g->max_latents + 3 * g->max_items;
    m->tasks = calloc((size_t)m->cap, sizeof *m->tasks);
    m->refs = calloc((size_t)m->cap, sizeof *m->refs);
    if (!m->tasks || !m->refs) {
        free(m->tasks);
        free(m->refs);
        return WF_ENOMEM;
    }
    m->done_msg.kind = MSG_DONE;
    m->sizes[0] = (size_cost){.width = g->width, .height = g->height, .lat_h = g->latent_height,
                              .lat_w = g->latent_width, .scale = 1, .decode_scale = 1, .correction = 1,
                              .min_correction = 1};
    m->n_sizes = 1;
    if (out_id) *out_id = s->n_models;
    s->n_models++;
    return WF_OK;
}

wf_status wf_image_sched_set_turns(wf_image_sched *s, int id, wf_gated_executor *x) {
    if (s->started || id < 0 || id >= s->n_models || !x ||
        wf_gated_executor_get(x).ctx != s->models[id].ex.ctx)
        return WF_EINVAL;
    s->models[id].turns = x;
    return WF_OK;
}

/* ---- events ---------------------------------------------------------------------------- */

static wf_image_event *new_event(wf_image_request *r, wf_image_event_kind kind) {
    wf_image_event *ev = calloc(1, sizeof *ev);
    if (!ev) return NULL;
    ev->request = r;
    ev->user = r->user;
    ev->kind = kind;
    ev->t_ns = wf_clock_now_ns();
    return ev;
}

static void fail_request(wf_image_request *r, wf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void push_event(wf_image_request *r, wf_image_event *ev) {
    wf_status st = wf_handoff_push(r->events, &ev->link);
    if (st != WF_OK) {
        /* The consumer is gone (closed) or refuses: nobody will read this request's events. */
        free(ev);
        r->cancelled = true;
    }
}

static void emit_progress(wf_image_request *r, int index) {
    if (!r->spec.progress) return;
    wf_image_event *ev = new_event(r, WF_IMAGE_EVENT_PROGRESS);
    if (!ev) {
        fail_request(r, WF_ENOMEM, "out of memory for a progress event");
        return;
    }
    ev->index = index;
    ev->step = r->items[index].step;
    ev->n_steps = r->spec.num_steps;
    push_event(r, ev);
}

static void emit_image(wf_image_request *r, int index, const wf_image_geometry *g) {
    wf_image_event *ev = new_event(r, WF_IMAGE_EVENT_IMAGE);
    if (!ev) {
        fail_request(r, WF_ENOMEM, "out of memory for an image event");
        return;
    }
    ev->index = index;
    ev->pixels = r->pixels + (size_t)index * r->image_bytes;
    ev->width = r->width;
    ev->height = r->height;
    ev->channels = g->channels;
    push_event(r, ev);
}

/* The event owns a copy: the next preview of the image overwrites r->preview while the
 * consumer may still be encoding this one. */
static void emit_preview(wf_image_request *r, int index, const wf_image_geometry *g) {
    wf_image_event *ev = calloc(1, sizeof *ev + r->image_bytes);
    if (!ev) {
        fail_request(r, WF_ENOMEM, "out of memory for a preview event");
        return;
    }
    ev->request = r;
    ev->user = r->user;
    ev->kind = WF_IMAGE_EVENT_PREVIEW;
    ev->t_ns = wf_clock_now_ns();
    ev->index = index;
    ev->step = r->items[index].step;
    ev->n_steps = r->spec.num_steps;
    uint8_t *px = (uint8_t *)(ev + 1);
    memcpy(px, r->preview + (size_t)index * r->image_bytes, r->image_bytes);
    ev->pixels = px;
    ev->width = r->width;
    ev->height = r->height;
    ev->channels = g->channels;
    push_event(r, ev);
}

static void fail_request(wf_image_request *r, wf_status st, const char *fmt, ...) {
    if (r->failed || r->finished) return;
    r->failed = true;
    r->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
}

/* ---- submit / cancel / release --------------------------------------------------------- */

static double step_ms(const model *m, int size, int images) {
    if (images > m->g.max_items) images = m->g.max_items;
    if (images < 1) images = 1;
    const size_cost *z = &m->sizes[size];
    return (m->cost_a + m->cost_c * images) * z->scale * z->correction;
}

static double decode_cost_ms(const model *m, int size) {
    const size_cost *z = &m->sizes[size];
    return m->decode_ms * z->decode_scale * z->correction;
}

/* The entry of the image size w x h (s->lock held): the existing one, else a new one (or the
 * least recently used entry no held request has), scaled from the native size and starting
 * with its corrections. -1: every entry is held. */
static int size_entry(model *m, int w, int h) {
    int victim = -1;
    for (int i = 0; i < m->n_sizes; i++) {
        if (m->sizes[i].width == w && m->sizes[i].height == h) return i;
        if (i > 0 && m->sizes[i].held_images == 0 &&
            (victim < 0 || m->sizes[i].used_ns < m->sizes[victim].used_ns))
            victim = i;
    }
    if (m->n_sizes < WF_IMAGE_MAX_SIZES) victim = m->n_sizes++;
    if (victim < 0) return -1;
    const size_cost *n0 = &m->sizes[0];
    int lh = h * m->g.latent_height / m->g.height, lw = w * m->g.latent_width / m->g.width;
    double r = (double)lh * lw / ((double)n0->lat_h * n0->lat_w), f = m->g.attn_share;
    m->sizes[victim] = (size_cost){.width = w, .height = h, .lat_h = lh, .lat_w = lw,
                                   .scale = (1 - f) * r + f * r * r, .decode_scale = r,
                                   .correction = n0->correction,
                                   .min_correction = n0->min_correction};
    return victim;
}

/* Whether held request r is planned before a new request of spec: earliest deadline, then
 * priority, then arrival (the new one arrives last), as the plan orders them. */
static bool due_before(const wf_image_sched *s, const wf_image_request *r, const wf_image_spec *spec) {
    if (s->o.fcfs) return true; /* every held request arrived earlier */
    uint64_t dr = r->spec.deadline_ns ? r->spec.deadline_ns : UINT64_MAX;
    uint64_t dn = spec->deadline_ns ? spec->deadline_ns : UINT64_MAX;
    if (dr != dn) return dr < dn;
    if (r->spec.priority != spec->priority) return r->spec.priority > spec->priority;
    return true;
}

/* Predicted ms until a new request of spec (of size z) finishes, and the ms the work ahead of
 * it needs to drain (s->lock held). Step-level batching runs up to max_items images of one
 * size per forward: while all of its size fit, they advance together at the batch's step time.
 * Beyond, the plan goes earliest deadline first, so only the work due before it is ahead,
 * served max_items images at a time; unless its images would not get latents at once (the
 * held images fill the executor's latents and keep them until they finish): then all held
 * work is ahead. Held work of other sizes runs in batches of its own: what of it is ahead
 * drains first, at its size's full-batch rate. */
static double predict_ms(const wf_image_sched *s, const model *m, const wf_image_spec *spec, int z,
                         double *drain_ms) {
    int n = spec->n, steps = spec->num_steps;
    double full = step_ms(m, z, m->g.max_items);
    double decode = n * decode_cost_ms(m, z); /* its images' DECODE_IMAGE tasks */
    bool all = m->active_images + n > m->g.max_latents;
    long ahead = 0;
    int ahead_images = 0, same_active = m->sizes[z].held_images;
    double other_ms = 0;
    for (const wf_image_request *r = m->held; r; r = r->held_next) {
        if (!all && !due_before(s, r, spec)) continue;
        if (r->size == z) {
            ahead += r->remaining;
            ahead_images += r->spec.n;
        } else {
            other_ms += (double)r->remaining / m->g.max_items * step_ms(m, r->size, m->g.max_items);
        }
    }
    *drain_ms = other_ms + (double)ahead / m->g.max_items * full;
    if (same_active + n <= m->g.max_items) return other_ms + steps * step_ms(m, z, same_active + n) + decode;
    if (ahead_images + n <= m->g.max_items) return other_ms + steps * full + decode;
    int waves = (n + m->g.max_items - 1) / m->g.max_items;
    return *drain_ms + (double)steps * waves * full + decode;
}

/* The least a request of n images x steps of size z can take on an idle model: its images in
 * waves of max_items at the fastest steps measured so far (s->lock held). */
static double alone_floor_ms(const model *m, int z, int n, int steps) {
    int waves = (n + m->g.max_items - 1) / m->g.max_items;
    int per_wave = n < m->g.max_items ? n : m->g.max_items;
    const size_cost *sz = &m->sizes[z];
    double step = (m->cost_a + m->cost_c * per_wave) * sz->scale * sz->min_correction;
    return (double)steps * waves * step + n * m->decode_ms * sz->decode_scale * sz->min_correction;
}

static void unlink_held(model *m, wf_image_request *r) {
    for (wf_image_request **p = &m->held; *p; p = &(*p)->held_next)
        if (*p == r) {
            *p = r->held_next;
            return;
        }
}

wf_status wf_image_sched_submit(wf_image_sched *s, const wf_image_spec *spec, wf_handoff *events,
                                void *user, wf_image_request **out, char *why, size_t whylen,
                                double *retry_after_s) {
    *out = NULL;
    if (retry_after_s) *retry_after_s = 0;
    if (!spec || spec->model < 0 || spec->model >= s->n_models) {
        snprintf(why, whylen, "unknown image model");
        return WF_EINVAL;
    }
    if (spec->n < 1 || spec->num_steps < 1 || spec->preview_every < 0) {
        snprintf(why, whylen, "n and num_inference_steps must be at least 1, preview_every at least 0");
        return WF_EINVAL;
    }
    model *m = &s->models[spec->model];
    if (spec->n > m->g.max_latents) {
        snprintf(why, whylen, "n %d exceeds the %d images this model holds at once", spec->n,
                 m->g.max_latents);
        return WF_EINVAL;
    }
    int width = spec->width ? spec->width : m->g.width, height = spec->height ? spec->height : m->g.height;
    if (width != m->g.width || height != m->g.height) {
        int k = m->g.size_multiple;
        if (k < 1 || width < k || height < k || width % k || height % k ||
            (long)width * height > m->g.max_pixels) {
            if (k < 1)
                snprintf(why, whylen, "size %dx%d: this model makes %dx%d only", width, height, m->g.width,
                         m->g.height);
            else
                snprintf(why, whylen, "size %dx%d: sides must be multiples of %d and width x height at most %ld",
                         width, height, k, m->g.max_pixels);
            return WF_EINVAL;
        }
    }
    pthread_mutex_lock(&s->lock);
    wf_status st = WF_OK;
    int z = size_entry(m, width, height);
    if (z < 0) {
        snprintf(why, whylen, "%d other image sizes are in progress: retry shortly", WF_IMAGE_MAX_SIZES);
        st = WF_EFULL;
    } else if (s->draining || s->stopping) {
        snprintf(why, whylen, "the server is shutting down");
        st = WF_EBUSY;
    } else if (s->held >= s->o.queue_size) {
        snprintf(why, whylen, "%d image requests are already queued", s->held);
        st = WF_EFULL;
    } else if (spec->deadline_ns && m->cost_ok) {
        double drain_ms, ms = predict_ms(s, m, spec, z, &drain_ms);
        double best_ms = alone_floor_ms(m, z, spec->n, spec->num_steps);
        uint64_t now = wf_clock_now_ns();
        double left = spec->deadline_ns > now ? (double)(spec->deadline_ns - now) / 1e6 : 0;
        if (best_ms > left) {
            /* Retrying cannot help: the client must ask for less or allow more time. */
            snprintf(why, whylen, "the deadline cannot be met even alone on an idle model: %d "
                     "image(s) x %d steps take at least %.0f ms, %.0f ms are left", spec->n,
                     spec->num_steps, best_ms, left);
            if (retry_after_s) *retry_after_s = drain_ms / 1000.0;
            /* The floor may itself be stale (calibrated on a busy machine): have it re-measured
             * as soon as the model is idle, so a refusal like this one cannot last. */
            if (z == 0) m->probe_wanted = true; /* the probe measures the native size */
            st = WF_EOVERLOAD;
        } else if (ms > left && m->active_images > 0) {
            /* Only the held work stands in the way: come back once it drained. An idle model
             * always admits (the prediction may be stale, and only batches that run correct
             * it: refusing on it alone could refuse forever). */
            snprintf(why, whylen, "the deadline cannot be met behind the %d image(s) held: %d "
                     "image(s) x %d steps are predicted to take %.0f ms, %.0f ms are left",
                     m->active_images, spec->n, spec->num_steps, ms, left);
            if (retry_after_s) *retry_after_s = drain_ms / 1000.0;
            st = WF_EOVERLOAD;
        }
    }
    if (st != WF_OK) {
        for (int k = 0; k < 2; k++) {
            wf_image_sched_stats *x = k ? &m->stats : &s->stats;
            x->rejected++;
            if (st == WF_EOVERLOAD) x->overloaded++;
        }
        pthread_mutex_unlock(&s->lock);
        return st;
    }
    s->held++;
    s->unfinished++;
    s->stats.submitted++;
    m->stats.submitted++;
    model *mm = &s->models[spec->model];
    mm->remaining += (long)spec->n * spec->num_steps;
    mm->active_images += spec->n;
    mm->sizes[z].held_images += spec->n;
    mm->sizes[z].used_ns = wf_clock_now_ns();
    pthread_mutex_unlock(&s->lock);
    wf_image_request *r = calloc(1, sizeof *r);
    size_t image_bytes = (size_t)width * (size_t)height * (size_t)m->g.channels;
    if (r) {
        r->items = calloc((size_t)spec->n, sizeof *r->items);
        r->pixels = malloc(image_bytes * (size_t)spec->n);
        if (spec->preview_every > 0) r->preview = malloc(image_bytes * (size_t)spec->n);
        r->finished_ev = new_event(r, WF_IMAGE_EVENT_FINISHED);
    }
    if (!r || !r->items || !r->pixels || !r->finished_ev || (spec->preview_every > 0 && !r->preview)) {
        if (r) {
            free(r->items);
            free(r->pixels);
            free(r->preview);
            free(r->finished_ev);
        }
        free(r);
        pthread_mutex_lock(&s->lock);
        s->held--;
        s->unfinished--;
        m->remaining -= (long)spec->n * spec->num_steps;
        m->active_images -= spec->n;
        m->sizes[z].held_images -= spec->n;
        s->stats.rejected++;
        m->stats.rejected++;
        pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->lock);
        snprintf(why, whylen, "out of memory for %d images", spec->n);
        return WF_ENOMEM;
    }
    r->spec = *spec;
    r->events = events;
    r->user = user;
    r->finished_ev->user = user;
    r->image_bytes = image_bytes;
    r->width = width;
    r->height = height;
    r->size = z;
    r->lat_h = m->sizes[z].lat_h;
    r->lat_w = m->sizes[z].lat_w;
    r->remaining = (long)spec->n * spec->num_steps;
    r->queued_ns = wf_clock_now_ns();
    r->submit_msg.kind = MSG_SUBMIT;
    r->cancel_msg.kind = MSG_CANCEL;
    r->release_msg.kind = MSG_RELEASE;
    pthread_mutex_lock(&s->lock);
    r->held_next = m->held;
    m->held = r;
    pthread_mutex_unlock(&s->lock);
    if (wf_handoff_push(&s->inbox, &r->submit_msg.link) != WF_OK) {
        pthread_mutex_lock(&s->lock);
        unlink_held(m, r);
        pthread_mutex_unlock(&s->lock);
        free(r->items);
        free(r->pixels);
        free(r->preview);
        free(r->finished_ev);
        free(r);
        pthread_mutex_lock(&s->lock);
        s->held--;
        s->unfinished--;
        m->remaining -= (long)spec->n * spec->num_steps;
        m->active_images -= spec->n;
        m->sizes[z].held_images -= spec->n;
        pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->lock);
        snprintf(why, whylen, "the image scheduler is stopped");
        return WF_EBUSY;
    }
    *out = r;
    return WF_OK;
}

void wf_image_sched_cancel(wf_image_sched *s, wf_image_request *req) {
    if (!req || atomic_exchange(&req->cancel_sent, true)) return;
    if (wf_handoff_push(&s->inbox, &req->cancel_msg.link) != WF_OK)
        atomic_store(&req->cancel_sent, false);
}

void wf_image_sched_release(wf_image_sched *s, wf_image_request *req) {
    if (!req || atomic_exchange(&req->release_sent, true)) return;
    (void)wf_handoff_push(&s->inbox, &req->release_msg.link); /* unbounded: only a stopped
                                                                  * scheduler refuses, and free
                                                                  * frees what is left */
}

void wf_image_event_free(wf_image_event *ev) { free(ev); }

const uint8_t *wf_image_request_pixels(const wf_image_request *req) { return req->pixels; }

/* ---- the thread ------------------------------------------------------------------------ */

static void free_request(wf_image_request *r) {
    free(r->items);
    free(r->pixels);
    free(r->preview);
    free(r->finished_ev);
    free(r);
}

static void unlink_request(model *m, wf_image_request *r) {
    if (m->solo == r) m->solo = NULL;
    for (wf_image_request **p = &m->head; *p; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            r->next = NULL;
            return;
        }
    }
}

/* Sends FINISHED when nothing of r is in flight or held any more; frees r if released. */
static void maybe_finish(wf_image_sched *s, model *m, wf_image_request *r) {
    if (r->finished || r->in_flight > 0) return;
    bool stop = r->cancelled || r->failed;
    for (int i = 0; i < r->spec.n; i++) {
        if (r->items[i].latent_id) return;          /* FINISH still to run */
        if (!stop && r->items[i].state != ITEM_DONE) return;
    }
    r->finished = true;
    unlink_request(m, r);
    wf_image_event *ev = r->finished_ev;
    r->finished_ev = NULL;
    ev->status = r->failed ? r->status : r->cancelled ? WF_ECANCELLED : WF_OK;
    snprintf(ev->message, sizeof ev->message, "%s",
             r->failed ? r->message : r->cancelled ? "cancelled" : "");
    ev->queued_ns = r->queued_ns;
    ev->started_ns = r->started_ns;
    ev->finished_ns = ev->t_ns = wf_clock_now_ns();
    ev->steps_run = r->steps_done;
    ev->alone = !r->shared;
    ev->group_size = r->group_size;
    pthread_mutex_lock(&s->lock);
    unlink_held(m, r);
    s->unfinished--;
    m->remaining -= r->remaining;
    m->active_images -= r->spec.n;
    m->sizes[r->size].held_images -= r->spec.n;
    r->remaining = 0;
    pthread_cond_broadcast(&s->idle);
    for (int k = 0; k < 2; k++) {
        wf_image_sched_stats *x = k ? &m->stats : &s->stats;
        if (ev->status == WF_OK) {
            x->finished++;
            double e2e = (double)(ev->finished_ns - r->queued_ns) / 1e6;
            hist_add(x->e2e_ms_hist, e2e / 10);
            x->e2e_ms_sum += e2e;
            if (r->started_ns) x->queue_ms_sum += (double)(r->started_ns - r->queued_ns) / 1e6;
        } else if (ev->status == WF_ECANCELLED) {
            x->cancelled++;
        } else {
            x->failed++;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (r->failed)
        WF_LOG_WARN("images", r->spec.id, "request failed: %s", r->message);
    if (wf_handoff_push(r->events, &ev->link) != WF_OK) free(ev);
    if (r->released) {
        free_request(r);
        pthread_mutex_lock(&s->lock);
        s->held--;
        pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->lock);
    }
}

/* Deadline, then priority, then arrival; with o.fcfs arrival only. */
static bool before(const wf_image_sched *s, const wf_image_request *a, const wf_image_request *b) {
    if (s->o.fcfs) return a->seq < b->seq;
    uint64_t da = a->spec.deadline_ns ? a->spec.deadline_ns : UINT64_MAX;
    uint64_t db = b->spec.deadline_ns ? b->spec.deadline_ns : UINT64_MAX;
    if (da != db) return da < db;
    if (a->spec.priority != b->spec.priority) return a->spec.priority > b->spec.priority;
    return a->seq < b->seq;
}

static wf_task *add_task(wf_image_sched *s, model *m, wf_image_request *r, int index,
                         wf_task_kind kind) {
    if (m->batch.n_tasks >= m->cap) return NULL;
    wf_task *t = &m->tasks[m->batch.n_tasks];
    memset(t, 0, sizeof *t);
    t->id = s->next_task++;
    t->kind = kind;
    t->request_seq = r->seq;
    t->deadline_ns = r->spec.deadline_ns;
    m->refs[m->batch.n_tasks] = (task_ref){.req = r, .index = index};
    m->batch.n_tasks++;
    r->in_flight++;
    item *it = &r->items[index];
    if (kind == WF_TASK_FINISH) {
        t->finish.artifact = (wf_artifact){.id = it->latent_id, .kind = WF_ARTIFACT_LATENT};
        return t;
    }
    wf_task_dit *d = &t->dit;
    d->class_label = r->spec.class_label;
    d->negative_label = r->spec.negative_label;
    d->guidance_scale = r->spec.guidance_scale;
    d->sampler = r->spec.sampler;
    d->num_steps = r->spec.num_steps;
    d->seed = r->spec.seed;
    d->noise_index = (uint32_t)index;
    d->latent = (wf_artifact){.id = it->latent_id, .kind = WF_ARTIFACT_LATENT};
    d->latent.latent.channels = m->g.latent_channels;
    d->latent.latent.height = r->lat_h; /* ENCODE makes the latent of this grid */
    d->latent.latent.width = r->lat_w;
    d->latent.latent.step = it->step;
    if (kind == WF_TASK_DECODE_IMAGE) {
        d->pixels = r->pixels + (size_t)index * r->image_bytes;
        d->pixels_cap = r->image_bytes;
    }
    return t;
}

/* Plans the work of one request into m's batch; *denoise counts images denoising in it. */
static void plan_request(wf_image_sched *s, model *m, wf_image_request *r, int *denoise) {
    bool stop = r->cancelled || r->failed;
    for (int i = 0; i < r->spec.n; i++) {
        item *it = &r->items[i];
        if (it->state == ITEM_BUSY || it->state == ITEM_DONE) continue;
        if (stop || it->state == ITEM_DECODED) {
            if (it->latent_id && add_task(s, m, r, i, WF_TASK_FINISH)) it->state = ITEM_BUSY;
            else if (!it->latent_id) it->state = ITEM_DONE;
            continue;
        }
        if (*denoise >= m->g.max_items) continue;
        if (m->batch_size >= 0 && m->batch_size != r->size) continue; /* another size's batch */
        if (it->state == ITEM_NEW) {
            if (m->latents_used >= m->g.max_latents) continue;
            it->latent_id = s->next_artifact++;
            m->latents_used++;
            it->step = 0;
            if (!add_task(s, m, r, i, WF_TASK_ENCODE)) continue;
            if (!r->started_ns) r->started_ns = wf_clock_now_ns();
        }
        int end = it->step + s->o.chunk_steps;
        if (end > r->spec.num_steps) end = r->spec.num_steps;
        wf_task *t = add_task(s, m, r, i, WF_TASK_DENOISE);
        if (t) {
            t->dit.step_begin = it->step;
            t->dit.step_end = end;
            (*denoise)++;
            m->batch_size = r->size;
            int every = r->spec.preview_every;
            if (end == r->spec.num_steps) {
                add_task(s, m, r, i, WF_TASK_DECODE_IMAGE);
            } else if (every > 0 && end / every > it->step / every) {
                /* A preview: decodes the latent as this chunk leaves it (the executor runs
                 * DECODE_IMAGE after DENOISE). */
                wf_task *d = add_task(s, m, r, i, WF_TASK_DECODE_IMAGE);
                if (d) {
                    d->dit.pixels = r->preview + (size_t)i * r->image_bytes;
                    m->refs[m->batch.n_tasks - 1].preview = true;
                }
            }
        }
        it->state = ITEM_BUSY;
    }
}

static void on_batch_done(void *user, wf_task_batch *b, wf_status status, const char *message) {
    model *m = container_of(b, model, batch);
    wf_image_sched *s = user;
    m->batch_status = status;
    snprintf(m->batch_message, sizeof m->batch_message, "%s", message ? message : "");
    (void)wf_handoff_push(&s->inbox, &m->done_msg.link);
}

static void on_grant(void *user) {
    wf_image_sched *s = user;
    if (!atomic_exchange(&s->wake_pending, true)) (void)wf_handoff_push(&s->inbox, &s->wake_msg.link);
}

/* Whether request r has work a plan would give a task now. */
static bool has_work(const wf_image_request *r) {
    if (r->finished) return false;
    for (int i = 0; i < r->spec.n; i++)
        if (r->items[i].state != ITEM_BUSY && r->items[i].state != ITEM_DONE) return true;
    return false;
}

/* A gated model (m->turns) plans only on a granted turn: without one, it posts (or updates)
 * its claim and returns false. The claim carries the earliest deadline among requests with
 * work to plan and the cost model's time for the batch they would make (one chunk of steps
 * for up to max_items images of the size the plan would pick, plus a decode per image
 * finishing), so the gate weighs it against text work by when it must start. Nothing to plan:
 * the claim is withdrawn. */
static bool turn_held(wf_image_sched *s, model *m) {
    if (!m->turns) return true;
    uint64_t deadline = 0;
    int images = 0, decodes = 0;
    bool any = false;
    const wf_image_request *first = NULL; /* the plan's first: its size makes the batch */
    for (wf_image_request *r = m->head; r; r = r->next)
        if (has_work(r) && !r->cancelled && !r->failed && (!first || before(s, r, first))) first = r;
    for (wf_image_request *r = m->head; r; r = r->next) {
        if (!has_work(r)) continue;
        any = true;
        if (r->cancelled || r->failed) continue; /* only FINISH tasks: no deadline of their own */
        if (r->spec.deadline_ns && (!deadline || r->spec.deadline_ns < deadline)) deadline = r->spec.deadline_ns;
        if (r->size != first->size) continue;
        for (int i = 0; i < r->spec.n; i++) {
            const item *it = &r->items[i];
            if (it->state != ITEM_NEW && it->state != ITEM_READY) continue;
            images++;
            if (it->step + s->o.chunk_steps >= r->spec.num_steps) decodes++;
        }
    }
    if (!any) {
        wf_gated_executor_unclaim(m->turns);
        m->claim_ns = 0;
        return false;
    }
    if (!m->claim_ns) m->claim_ns = wf_clock_now_ns();
    if (wf_gated_executor_granted(m->turns)) return true;
    if (images > m->g.max_items) images = m->g.max_items;
    if (decodes > images) decodes = images;
    pthread_mutex_lock(&s->lock);
    double pred = m->cost_ok && images && first
                      ? step_ms(m, first->size, images) * s->o.chunk_steps + decodes * decode_cost_ms(m, first->size)
                      : 0;
    pthread_mutex_unlock(&s->lock);
    if (wf_gated_executor_claim(m->turns, deadline, pred, on_grant, s) != WF_OK) return true;
    return wf_gated_executor_granted(m->turns);
}

static void plan_model(wf_image_sched *s, model *m) {
    if (m->in_flight) return;
    if (!turn_held(s, m)) {
        /* Requests with nothing left to plan may be complete (e.g. cancelled, all finished). */
        for (wf_image_request *r = m->head, *next; r; r = next) {
            next = r->next;
            maybe_finish(s, m, r);
        }
        return;
    }
    m->batch = (wf_task_batch){.tasks = m->tasks, .n_tasks = 0};
    m->batch_size = -1;
    int denoise = 0;
    /* Without batching one request runs at a time (until it ends): the solo one. */
    if (!s->o.batching && (!m->solo || m->solo->cancelled || m->solo->failed)) {
        m->solo = NULL;
        for (wf_image_request *r = m->head; r; r = r->next)
            if (!r->cancelled && !r->failed && (!m->solo || before(s, r, m->solo))) m->solo = r;
    }
    /* Requests in order: repeatedly the first one not planned yet. Lists are bounded by
     * queue_size and a plan runs once per batch. */
    for (wf_image_request *r = m->head; r; r = r->next) r->planned = false;
    for (;;) {
        wf_image_request *best = NULL;
        for (wf_image_request *r = m->head; r; r = r->next)
            if (!r->planned && (!best || before(s, r, best))) best = r;
        if (!best) break;
        best->planned = true;
        bool stop = best->cancelled || best->failed;
        if (s->o.batching || stop || best == m->solo) plan_request(s, m, best, &denoise);
    }
    /* Requests with nothing left to plan may be complete (e.g. cancelled before starting). */
    for (wf_image_request *r = m->head, *next; r; r = next) {
        next = r->next;
        maybe_finish(s, m, r);
    }
    if (m->batch.n_tasks == 0) {
        if (m->turns) wf_gated_executor_unclaim(m->turns); /* granted, nothing to run: pass it on */
        m->claim_ns = 0;
        return;
    }
    m->batch.iteration++;
    m->in_flight = true;
    /* Timed from the claim when the batch waited for its turn, as a composed batch's wait at the
     * gate is timed: the cost model then predicts service on shared cores (admission), in
     * either way of taking turns. */
    m->dispatched_ns = m->claim_ns ? m->claim_ns : wf_clock_now_ns();
    m->claim_ns = 0;
    wf_status st = wf_executor_dispatch(m->ex, &m->batch, on_batch_done, s);
    if (st != WF_OK) {
        m->batch_status = st;
        snprintf(m->batch_message, sizeof m->batch_message, "dispatch refused");
        (void)wf_handoff_push(&s->inbox, &m->done_msg.link);
    }
}

static void complete_model(wf_image_sched *s, model *m) {
    m->in_flight = false;
    uint64_t now = wf_clock_now_ns();
    int max_chunk = 0, n_images = 0;
    for (int i = 0; i < m->batch.n_tasks; i++) {
        wf_task *t = &m->tasks[i];
        wf_image_request *r = m->refs[i].req;
        int idx = m->refs[i].index;
        item *it = &r->items[idx];
        r->in_flight--;
        wf_status st = m->batch_status != WF_OK ? m->batch_status : t->status;
        if (t->kind == WF_TASK_FINISH) {
            /* Freed even on failure: the executor drops unknown ids, and a dead executor's
             * memory is gone with it. */
            it->latent_id = 0;
            m->latents_used--;
            it->state = ITEM_DONE;
            continue;
        }
        if (st != WF_OK) {
            /* A batch that failed as a whole (a worker rank lost with its chunk) is not this
             * task's failure: its ENCODE, which rides with the first chunk, did run. */
            bool own = t->status != WF_OK && t->status != WF_IN_PROGRESS;
            fail_request(r, st, "image %d: %s failed: %s%s%s", idx, own ? wf_task_kind_str(t->kind) : "its batch",
                         wf_status_str(st), m->batch_message[0] ? ": " : "", m->batch_message);
            it->state = ITEM_READY;
            continue;
        }
        if (t->kind == WF_TASK_ENCODE) {
            it->step = 0;
        } else if (t->kind == WF_TASK_DENOISE) {
            int done = t->dit.latent.latent.step - it->step;
            if (done > max_chunk) max_chunk = done;
            r->steps_done += done;
            n_images++;
            int P = t->group.n_ranks < 1 ? 1 : t->group.n_ranks;
            r->group_size = P;
            pthread_mutex_lock(&s->lock);
            for (wf_image_sched_stats *stats = &s->stats;; stats = &m->stats) { /* all, then this model's */
                stats->chunks_by_group[P < WF_IMAGE_MAX_GROUP ? P : WF_IMAGE_MAX_GROUP]++;
                stats->last_group_size = P;
                if (stats == &m->stats) break;
            }
            r->remaining -= done;
            m->remaining -= done;
            pthread_mutex_unlock(&s->lock);
            it->step = t->dit.latent.latent.step;
            it->state = ITEM_READY;
            if (!r->cancelled && !r->failed) emit_progress(r, idx);
        } else if (t->kind == WF_TASK_DECODE_IMAGE && m->refs[i].preview) {
            if (!r->cancelled && !r->failed) emit_preview(r, idx, &m->g);
        } else if (t->kind == WF_TASK_DECODE_IMAGE) {
            it->state = ITEM_DECODED;
            r->images_done++;
            if (!r->cancelled && !r->failed) emit_image(r, idx, &m->g);
        }
    }
    pthread_mutex_lock(&s->lock);
    int decoded = 0;
    for (int i = 0; i < m->batch.n_tasks; i++)
        decoded += m->tasks[i].kind == WF_TASK_DECODE_IMAGE && !m->refs[i].preview &&
                   m->tasks[i].status == WF_OK && m->batch_status == WF_OK;
    for (int k = 0; k < 2; k++) {
        wf_image_sched_stats *x = k ? &m->stats : &s->stats;
        x->batches++;
        x->images += (uint64_t)decoded;
        if (max_chunk > 0) {
            double ms = (double)(now - m->dispatched_ns) / 1e6 / max_chunk;
            x->steps += (uint64_t)max_chunk;
            x->step_ms_avg = x->step_ms_avg == 0 ? ms : 0.9 * x->step_ms_avg + 0.1 * ms;
            hist_add(x->step_ms_hist, ms);
            x->step_ms_sum += ms;
        }
    }
    if (max_chunk > 0) {
        double ms = (double)(now - m->dispatched_ns) / 1e6 / max_chunk;
        /* Online correction of the cost model from every batch that ran: measured over
         * calibrated, smoothed so that stale estimates decay toward fresh measurements within
         * a few dozen steps (a model calibrated on a busy machine recovers as soon as batches
         * run, and the idle rule of submit makes sure some do). */
        if (m->cost_ok && m->batch_status == WF_OK && m->batch_size >= 0) {
            size_cost *z = &m->sizes[m->batch_size];
            double pred = step_ms(m, m->batch_size, n_images) / z->correction;
            if (pred > 0) {
                double ratio = ms / pred;
                /* A size's first batch replaces the guess scaled from the native size (the
                 * lazy measurement); later ones correct it. */
                z->correction = z->measured ? (1 - CORRECTION_ALPHA) * z->correction + CORRECTION_ALPHA * ratio
                                            : ratio;
                if (ratio < z->min_correction || !z->measured) z->min_correction = ratio;
                z->measured = true;
                if (m->batch_size == 0) m->measured_ns = now;
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    m->batch.n_tasks = 0;
}

static model *model_of(wf_image_sched *s, wf_image_request *r) { return &s->models[r->spec.model]; }

static void handle_msg(wf_image_sched *s, msg *mg) {
    if (mg->kind == MSG_WAKE) { /* a granted turn: the plan that follows uses it */
        atomic_store(&s->wake_pending, false);
        return;
    }
    if (mg->kind == MSG_DONE) {
        model *m = container_of(mg, model, done_msg);
        complete_model(s, m);
        return;
    }
    wf_image_request *r;
    switch (mg->kind) {
    case MSG_SUBMIT:
        r = container_of(mg, wf_image_request, submit_msg);
        r->seq = s->next_seq++;
        {
            model *m = model_of(s, r);
            wf_image_request **p = &m->head;
            while (*p) {
                (*p)->shared = r->shared = true; /* neither ran alone */
                p = &(*p)->next;
            }
            *p = r;
        }
        break;
    case MSG_CANCEL:
        r = container_of(mg, wf_image_request, cancel_msg);
        if (!r->finished) r->cancelled = true;
        break;
    case MSG_RELEASE:
        r = container_of(mg, wf_image_request, release_msg);
        r->released = true;
        if (r->finished) {
            free_request(r);
            pthread_mutex_lock(&s->lock);
            s->held--;
            pthread_cond_broadcast(&s->idle);
            pthread_mutex_unlock(&s->lock);
        } else {
            r->cancelled = true; /* released early: nobody waits for it */
        }
        break;
    default:
        break;
    }
}

static void maybe_probe(wf_image_sched *s, model *m);

static void *thread_main(void *arg) {
    wf_image_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->list_lock);
        wf_handoff_item *it = wf_handoff_take_all(&s->inbox);
        while (it) {
            wf_handoff_item *next = it->next;
            handle_msg(s, (msg *)it);
            it = next;
        }
        bool cancel = atomic_load(&s->cancel_everything);
        bool any_flight = false;
        for (int i = 0; i < s->n_models; i++) {
            model *m = &s->models[i];
            for (wf_image_request *r = m->head; cancel && r; r = r->next) r->cancelled = true;
            plan_model(s, m);
            any_flight |= m->in_flight;
        }
        pthread_mutex_unlock(&s->list_lock);
        /* Outside list_lock: a probe runs batches (ms), and foreach must not wait for it. The
         * fields it reads are this thread's own. */
        for (int i = 0; i < s->n_models && !cancel; i++) maybe_probe(s, &s->models[i]);
        pthread_mutex_lock(&s->lock);
        bool stop = s->stopping && !any_flight;
        pthread_mutex_unlock(&s->lock);
        if (stop) break;
        wf_handoff_wait(&s->inbox, 100);
    }
    /* No claim may outlive the thread: its grant would wake a freed scheduler. */
    for (int i = 0; i < s->n_models; i++)
        if (s->models[i].turns) wf_gated_executor_unclaim(s->models[i].turns);
    return NULL;
}

/* Runs `kind` tasks for images [0, n) (latent ids base + i); DENOISE advances image i by one
 * step from step[i]. Returns the batch's wall time in ms, or < 0 on failure. */
static double calib_batch(model *m, wf_task *tasks, int n, wf_task_kind kind, uint64_t base,
                          int *step, uint8_t *pixels, size_t pixels_cap) {
    for (int i = 0; i < n; i++) {
        wf_task *t = &tasks[i];
        memset(t, 0, sizeof *t);
        t->kind = kind;
        t->id = base + (uint64_t)i;
        if (kind == WF_TASK_FINISH) {
            t->finish.artifact = (wf_artifact){.id = base + (uint64_t)i, .kind = WF_ARTIFACT_LATENT};
            continue;
        }
        int a = step ? step[i] : 0, b = kind == WF_TASK_DENOISE ? a + 1 : a;
        t->dit = (wf_task_dit){.class_label = 0, .negative_label = -1, .guidance_scale = 4.0f,
                               .sampler = -1, .num_steps = CALIB_STEPS, .step_begin = a,
                               .step_end = b, .seed = 1, .noise_index = (uint32_t)i};
        t->dit.latent = (wf_artifact){.id = base + (uint64_t)i, .kind = WF_ARTIFACT_LATENT};
        t->dit.latent.latent.step = a;
        if (kind == WF_TASK_DECODE_IMAGE) {
            t->dit.pixels = pixels;
            t->dit.pixels_cap = pixels_cap;
        }
    }
    wf_task_batch batch = {.tasks = tasks, .n_tasks = n};
    char message[160];
    uint64_t t0 = wf_clock_now_ns();
    if (wf_executor_run(m->ex, &batch, message, sizeof message) != WF_OK) return -1;
    for (int i = 0; i < n; i++)
        if (tasks[i].status != WF_OK) return -1;
    if (kind == WF_TASK_DENOISE)
        for (int i = 0; i < n; i++) step[i]++;
    return (double)(wf_clock_now_ns() - t0) / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of CALIB_REPS timed runs of one calibration batch (a single run is at the mercy
 * of whatever else the machine does at start-up), or < 0 if one failed. */
static double calib_median(model *m, wf_task *tasks, int n, wf_task_kind kind, uint64_t base,
                           int *step, uint8_t *pixels, size_t cap, double *fastest) {
    double t[CALIB_REPS];
    for (int r = 0; r < CALIB_REPS; r++)
        if ((t[r] = calib_batch(m, tasks, n, kind, base, step, pixels, cap)) < 0) return -1;
    qsort(t, CALIB_REPS, sizeof t[0], cmp_double);
    if (fastest) *fastest = t[0];
    return t[CALIB_REPS / 2];
}

/* The cost model of m: after a warm-up (ENCODE, two steps, a decode), the medians of timed
 * one-step batches of 1 and max_items images, and of a decode. */
static void calibrate(wf_image_sched *s, model *m) {
    int big = m->g.max_items < m->g.max_latents ? m->g.max_items : m->g.max_latents;
    /* Latent ids far above the scheduler's (which count from 1). */
    uint64_t base = UINT64_MAX / 2;
    wf_task *tasks = m->tasks; /* not in use before the thread starts */
    double t1 = -1, tn = -1, td = -1, t1_min = -1;
    size_t bytes = (size_t)m->g.width * (size_t)m->g.height * (size_t)m->g.channels;
    uint8_t *px = malloc(bytes);
    int *step = calloc((size_t)big, sizeof *step);
    if (px && step && calib_batch(m, tasks, big, WF_TASK_ENCODE, base, step, NULL, 0) >= 0 &&
        calib_batch(m, tasks, big, WF_TASK_DENOISE, base, step, NULL, 0) >= 0 &&
        calib_batch(m, tasks, 1, WF_TASK_DENOISE, base, step, NULL, 0) >= 0 &&
        calib_batch(m, tasks, 1, WF_TASK_DECODE_IMAGE, base, step, px, bytes) >= 0) { /* warm-up */
        t1 = calib_median(m, tasks, 1, WF_TASK_DENOISE, base, step, NULL, 0, &t1_min);
        if (t1 >= 0 && big > 1)
            tn = calib_median(m, tasks, big, WF_TASK_DENOISE, base, step, NULL, 0, NULL);
        if (t1 >= 0) td = calib_median(m, tasks, 1, WF_TASK_DECODE_IMAGE, base, step, px, bytes, NULL);
    }
    (void)calib_batch(m, tasks, big, WF_TASK_FINISH, base, NULL, NULL, 0);
    free(px);
    free(step);
    pthread_mutex_lock(&s->lock);
    size_cost *n0 = &m->sizes[0];
    *n0 = (size_cost){.width = m->g.width, .height = m->g.height, .lat_h = m->g.latent_height,
                      .lat_w = m->g.latent_width, .scale = 1, .decode_scale = 1, .correction = 1,
                      .min_correction = 1,
                      .measured = t1 >= 0};
    if (m->n_sizes < 1) m->n_sizes = 1;
    if (t1 >= 0) {
        double one = t1, full = tn >= 0 ? tn : one;
        m->cost_c = big > 1 && full > one ? (full - one) / (big - 1) : 0;
        m->cost_a = one - m->cost_c > 0 ? one - m->cost_c : 0;
        m->decode_ms = td > 0 ? td : 0;
        if (t1 > 0 && t1_min > 0) n0->min_correction = t1_min / t1;
        m->measured_ns = wf_clock_now_ns();
        m->cost_ok = true;
        WF_LOG_INFO("images", NULL, "cost model: step_ms = %.3f + %.3f x images (%d-image step %.3f ms), "
                    "decode %.3f ms per image (medians of %d runs)", m->cost_a, m->cost_c, big,
                    full, m->decode_ms, CALIB_REPS);
    } else {
        WF_LOG_WARN("images", NULL, "cost model calibration failed: deadlines are not enforced");
    }
    pthread_mutex_unlock(&s->lock);
}

/* Re-measures an idle model's one-image step (on the scheduler's thread, which alone
 * dispatches to it, so nothing else runs on the executor meanwhile): when a refusal said "even
 * alone" (the floor behind it may be stale) or no step was measured for PROBE_STALE_NS. At most
 * one probe per PROBE_EVERY_NS; a probe is a warm-up step and the median of CALIB_REPS more,
 * a few ms of one image. The fresh measurement replaces the correction and may lower the
 * floor. */
static void maybe_probe(wf_image_sched *s, model *m) {
    if (m->in_flight || m->head || m->latents_used >= m->g.max_latents) return;
    uint64_t now = wf_clock_now_ns();
    pthread_mutex_lock(&s->lock);
    bool due = m->cost_ok && !s->draining && m->active_images == 0 &&
               now - m->probed_ns >= PROBE_EVERY_NS &&
               (m->probe_wanted || now - m->measured_ns >= PROBE_STALE_NS);
    double one = m->cost_a + m->cost_c;
    pthread_mutex_unlock(&s->lock);
    if (!due) return;
    uint64_t base = UINT64_MAX / 2;
    int step = 0;
    double fastest = -1, t = -1;
    if (calib_batch(m, m->tasks, 1, WF_TASK_ENCODE, base, &step, NULL, 0) >= 0 &&
        calib_batch(m, m->tasks, 1, WF_TASK_DENOISE, base, &step, NULL, 0) >= 0)
        t = calib_median(m, m->tasks, 1, WF_TASK_DENOISE, base, &step, NULL, 0, &fastest);
    (void)calib_batch(m, m->tasks, 1, WF_TASK_FINISH, base, NULL, NULL, 0);
    now = wf_clock_now_ns();
    pthread_mutex_lock(&s->lock);
    m->probed_ns = now;
    m->probe_wanted = false;
    if (t > 0 && one > 0) {
        size_cost *n0 = &m->sizes[0];
        double old = n0->correction;
        n0->correction = t / one;
        if (fastest / one < n0->min_correction) n0->min_correction = fastest / one;
        m->measured_ns = now;
        WF_LOG_DEBUG("images", NULL, "idle probe: one-image step %.3f ms, correction %.3f -> %.3f",
                     t, old, n0->correction);
    }
    pthread_mutex_unlock(&s->lock);
}

bool wf_image_sched_cost(wf_image_sched *s, int model_id, double *a, double *c, double *decode_ms,
                         double *correction) {
    if (model_id < 0 || model_id >= s->n_models) return false;
    pthread_mutex_lock(&s->lock);
    const model *m = &s->models[model_id];
    bool ok = m->cost_ok;
    *a = m->cost_a;
    *c = m->cost_c;
    *decode_ms = m->decode_ms;
    *correction = m->sizes[0].correction;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

int wf_image_sched_size_costs(wf_image_sched *s, int model_id, wf_image_size_cost *out, int cap) {
    if (model_id < 0 || model_id >= s->n_models) return 0;
    pthread_mutex_lock(&s->lock);
    const model *m = &s->models[model_id];
    int n = 0;
    for (int i = 0; i < m->n_sizes && n < cap; i++) {
        const size_cost *z = &m->sizes[i];
        out[n++] = (wf_image_size_cost){.width = z->width, .height = z->height, .scale = z->scale,
                                        .correction = z->correction, .measured = z->measured,
                                        .step_ms = m->cost_ok ? step_ms(m, i, 1) : 0,
                                        .held_images = z->held_images};
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

wf_status wf_image_sched_start(wf_image_sched *s) {
    if (s->started) return WF_EINVAL;
    for (int i = 0; i < s->n_models; i++) calibrate(s, &s->models[i]);
    if (pthread_create(&s->thread, NULL, thread_main, s) != 0) return WF_EIO;
    s->started = true;
    return WF_OK;
}

void wf_image_sched_drain(wf_image_sched *s, int deadline_ms) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->draining = true;
    uint64_t until = wf_clock_now_ns() + (uint64_t)(deadline_ms > 0 ? deadline_ms : 0) * 1000000ull;
    while (s->unfinished > 0 && s->started) {
        if (wf_clock_now_ns() >= until) atomic_store(&s->cancel_everything, true);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->idle, &s->lock, &ts);
    }
    pthread_mutex_unlock(&s->lock);
}

void wf_image_sched_free(wf_image_sched *s) {
    if (!s) return;
    if (s->started) {
        /* Cancel what is left and let the batches in flight come back before stopping. */
        atomic_store(&s->cancel_everything, true);
        pthread_mutex_lock(&s->lock);
        s->stopping = true;
        s->draining = true;
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
    }
    /* A batch's done callback may still be returning from its push into the inbox (the thread
     * saw the message and stopped): wait until every executor has returned from done. */
    for (int i = 0; i < s->n_models; i++)
        if (s->models[i].ex.ops->synchronize) s->models[i].ex.ops->synchronize(s->models[i].ex.ctx);
    /* What the thread never took in: submits (never linked) and releases of finished requests
     * (off the lists) own their requests. A request may appear twice and its messages live in
     * it, so the distinct requests are gathered before any is freed. The rest are in the lists. */
    size_t n = 0, n_free = 0;
    wf_handoff_item *left = wf_handoff_take_all(&s->inbox);
    for (wf_handoff_item *it = left; it; it = it->next) n++;
    wf_image_request **doomed = n ? calloc(n, sizeof *doomed) : NULL;
    for (wf_handoff_item *it = left; it && doomed; it = it->next) {
        msg *mg = (msg *)it;
        wf_image_request *r = NULL;
        if (mg->kind == MSG_SUBMIT) r = container_of(mg, wf_image_request, submit_msg);
        else if (mg->kind == MSG_RELEASE) r = container_of(mg, wf_image_request, release_msg);
        if (!r || (mg->kind == MSG_RELEASE && !r->finished)) continue;
        bool seen = false;
        for (size_t k = 0; k < n_free; k++) seen |= doomed[k] == r;
        if (!seen) doomed[n_free++] = r;
    }
    for (size_t k = 0; k < n_free; k++) free_request(doomed[k]);
    free(doomed);
    for (int i = 0; i < s->n_models; i++) {
        model *m = &s->models[i];
        for (wf_image_request *r = m->head, *next; r; r = next) {
            next = r->next;
            free_request(r);
        }
        free(m->tasks);
        free(m->refs);
    }
    wf_handoff_free(&s->inbox);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->list_lock);
    pthread_cond_destroy(&s->idle);
    free(s);
}

void wf_image_sched_get_stats(wf_image_sched *s, wf_image_sched_stats *out) {
    pthread_mutex_lock(&s->lock);
    *out = s->stats;
    out->running = s->held;
    pthread_mutex_unlock(&s->lock);
}

void wf_image_sched_reset_stats(wf_image_sched *s) {
    pthread_mutex_lock(&s->lock);
    memset(&s->stats, 0, sizeof s->stats);
    for (int i = 0; i < s->n_models; i++) memset(&s->models[i].stats, 0, sizeof s->models[i].stats);
    pthread_mutex_unlock(&s->lock);
}

bool wf_image_sched_get_model_stats(wf_image_sched *s, int model_id, wf_image_sched_stats *out) {
    if (model_id < 0 || model_id >= s->n_models) return false;
    const model *m = &s->models[model_id];
    pthread_mutex_lock(&s->lock);
    *out = m->stats;
    out->running = 0;
    for (const wf_image_request *r = m->held; r; r = r->held_next) out->running++;
    pthread_mutex_unlock(&s->lock);
    return true;
}

void wf_image_sched_foreach(wf_image_sched *s, void (*fn)(const wf_image_snapshot *, void *),
                            void *user) {
    uint64_t now = wf_clock_now_ns();
    pthread_mutex_lock(&s->list_lock);
    for (int i = 0; i < s->n_models; i++) {
        for (const wf_image_request *r = s->models[i].head; r; r = r->next) {
            wf_image_snapshot snap = {.model = i,
                                      .n = r->spec.n,
                                      .width = r->width,
                                      .height = r->height,
                                      .num_steps = r->spec.num_steps,
                                      .priority = r->spec.priority,
                                      .steps_done = r->steps_done,
                                      .group_size = r->group_size,
                                      .images_done = r->images_done,
                                      .age_ms = (double)(now - r->queued_ns) / 1e6,
                                      .cancelled = r->cancelled};
            snprintf(snap.id, sizeof snap.id, "%s", r->spec.id);
            fn(&snap, user);
        }
    }
    pthread_mutex_unlock(&s->list_lock);
}
