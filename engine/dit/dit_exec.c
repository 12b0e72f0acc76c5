/* The in-process DiT executor (see dit_exec.h): trajectory tasks of images on the DiT model. */
#include "engine/dit/dit_exec.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/threadpool.h"
#include "engine/dit/dit.h"
#include "engine/dit/dit_step.h"
#include "proto/base/clock.h"
#include "proto/exec_thread.h"

typedef struct latent_slot {
    uint64_t id; /* 0: free */
    int h, w;    /* its latent grid (ENCODE's size) */
    float *data; /* room for the largest latent */
} latent_slot;

typedef struct sched_entry {
    int kind, n_steps;
    wf_dit_schedule *schedule; /* NULL: free entry */
    uint64_t last_used;        /* batch counter */
} sched_entry;

struct wf_dit_exec {
    wf_dit_exec_info info;
    wf_dit *model;
    wf_dit_vae *vae;
    wf_threadpool *pool;
    wf_dit_stepper *stepper;
    wf_dit_sampler_config base_cfg;
    wf_exec_thread *thread;
    latent_slot *slots;
    size_t latent_size, image_size; /* of the native size */
    size_t max_points;              /* latent positions of the largest size */
    float *image;                /* VAE output scratch (latent models) */
    wf_dit_item *items;          /* max_items */
    wf_task **item_task;         /* the DENOISE task of each item */
    sched_entry schedules[WF_DIT_EXEC_SCHEDULES];
    uint64_t n_batches;
};

static void schedule_config(const wf_dit_exec *x, int kind, wf_dit_sampler_config *cfg) {
    if (kind < 0) *cfg = x->base_cfg;
    else wf_dit_sampler_config_switch(&x->base_cfg, (wf_dit_sampler_kind)kind, cfg);
}

wf_status wf_dit_exec_check_schedule(const wf_dit_exec *x, int sampler, int n_steps, char *err,
                                     size_t errlen) {
    wf_dit_sampler_config cfg;
    schedule_config(x, sampler, &cfg);
    wf_dit_schedule *s = NULL;
    wf_status st = wf_dit_schedule_new(&cfg, n_steps, &s, err, errlen);
    wf_dit_schedule_free(s);
    return st == WF_OK ? WF_OK : WF_EINVAL;
}

void wf_dit_exec_options_init(wf_dit_exec_options *o) {
    memset(o, 0, sizeof *o);
    o->max_items = 8;
    o->max_latents = 64;
}

void wf_dit_exec_options_set_batch(wf_dit_exec_options *o, int max_items) {
    if (max_items > 0) o->max_items = max_items;
    if (o->max_latents < 2 * o->max_items) o->max_latents = 2 * o->max_items;
}

const wf_dit_exec_info *wf_dit_exec_get_info(const wf_dit_exec *x) { return &x->info; }

int wf_dit_exec_class_index(const wf_dit_exec *x, const char *name) {
    for (int i = 0; i < x->info.n_class_names; i++)
        if (strcmp(x->info.class_names[i], name) == 0) return i;
    char *end;
    errno = 0;
    long v = strtol(name, &end, 10);
    if (errno || end == name || *end || name[0] == '+' || name[0] == ' ') return -1;
    return v >= 0 && v < x->info.num_classes ? (int)v : -1;
}

/* model_index.json's weft extensions: class names and the guidance the model was tuned for. */
static void read_model_index(wf_dit_exec *x) {
    x->info.default_guidance = 4.0f;
    const char *path = wf_dit_get_paths(x->model)->model_index;
    if (!path) return;
    json_t *root = json_load_file(path, 0, NULL);
    if (!root) return;
    json_t *g = json_object_get(root, "weft_guidance_scale");
    if (json_is_number(g)) x->info.default_guidance = (float)json_number_value(g);
    json_t *names = json_object_get(root, "weft_class_names");
    size_t n = json_is_array(names) ? json_array_size(names) : 0;
    if (n > (size_t)x->info.num_classes) n = (size_t)x->info.num_classes;
    if (n > WF_DIT_EXEC_MAX_CLASS_NAMES) n = WF_DIT_EXEC_MAX_CLASS_NAMES;
    x->info.class_names = n ? calloc(n, sizeof *x->info.class_names) : NULL;
    for (size_t i = 0; x->info.class_names && i < n; i++) {
        const char *s = json_string_value(json_array_get(names, i));
        x->info.class_names[i] = strdup(s ? s : "");
        if (!x->info.class_names[i]) break;
        x->info.n_class_names = (int)i + 1;
    }
    json_decref(root);
}

/* The schedule of (kind, n_steps), built on first use; NULL with err on a bad pair. */
static const wf_dit_schedule *get_schedule(wf_dit_exec *x, int kind, int n_steps, char *err,
                                           size_t errlen) {
    sched_entry *victim = NULL;
    for (int i = 0; i < WF_DIT_EXEC_SCHEDULES; i++) {
        sched_entry *e = &x->schedules[i];
        if (e->schedule && e->kind == kind && e->n_steps == n_steps) {
            e->last_used = x->n_batches;
            return e->schedule;
        }
    }
    /* A free entry, else the least recently used one that the running batch does not use
     * (its items point at their schedules). */
    for (int i = 0; i < WF_DIT_EXEC_SCHEDULES && !(victim && !victim->schedule); i++) {
        sched_entry *e = &x->schedules[i];
        if (!e->schedule) victim = e;
        else if (e->last_used < x->n_batches && (!victim || e->last_used < victim->last_used))
            victim = e;
    }
    if (!victim) {
        snprintf(err, errlen, "more than %d sampler/step-count pairs in one batch",
                 WF_DIT_EXEC_SCHEDULES);
        return NULL;
    }
    wf_dit_sampler_config cfg;
    schedule_config(x, kind, &cfg);
    wf_dit_schedule *s = NULL;
    if (wf_dit_schedule_new(&cfg, n_steps, &s, err, errlen) != WF_OK) return NULL;
    wf_dit_schedule_free(victim->schedule);
    *victim = (sched_entry){.kind = kind, .n_steps = n_steps, .schedule = s,
                            .last_used = x->n_batches};
    return s;
}

static latent_slot *find_slot(wf_dit_exec *x, uint64_t id) {
    if (id == 0) return NULL;
    for (int i = 0; i < x->info.max_latents; i++)
        if (x->slots[i].id == id) return &x->slots[i];
    return NULL;
}

static bool latent_size_ok(const wf_dit_exec *x, int h, int w);

float *wf_dit_exec_latent_sized(wf_dit_exec *x, uint64_t id, int h, int w) {
    if (h == 0 && w == 0) {
        h = x->info.latent_height;
        w = x->info.latent_width;
    }
    latent_slot *slot = find_slot(x, id);
    if (slot) return slot->h == h && slot->w == w ? slot->data : NULL;
    if (id == 0 || !latent_size_ok(x, h, w)) return NULL;
    for (int i = 0; i < x->info.max_latents; i++)
        if (x->slots[i].id == 0) {
            x->slots[i].id = id;
            x->slots[i].h = h; /* from another rank: the size its task states */
            x->slots[i].w = w;
            return x->slots[i].data;
        }
    return NULL;
}

float *wf_dit_exec_latent(wf_dit_exec *x, uint64_t id, bool create) {
    latent_slot *slot = find_slot(x, id);
    if (slot) return slot->data;
    if (!create || id == 0) return NULL;
    return wf_dit_exec_latent_sized(x, id, 0, 0);
}

bool wf_dit_exec_latent_dims(const wf_dit_exec *x, uint64_t id, int *h, int *w) {
    for (int i = 0; id && i < x->info.max_latents; i++)
        if (x->slots[i].id == id) {
            *h = x->slots[i].h;
            *w = x->slots[i].w;
            return true;
        }
    return false;
}

void wf_dit_exec_latent_drop(wf_dit_exec *x, uint64_t id) {
    latent_slot *slot = find_slot(x, id);
    if (slot) slot->id = 0;
}

size_t wf_dit_exec_latent_floats(const wf_dit_exec *x) { return x->latent_size; }
size_t wf_dit_exec_latent_floats_max(const wf_dit_exec *x) {
    return (size_t)x->info.latent_channels * x->max_points;
}
wf_dit *wf_dit_exec_model(wf_dit_exec *x) { return x->model; }
wf_threadpool *wf_dit_exec_pool(wf_dit_exec *x) { return x->pool; }
void wf_dit_exec_sampler_config(const wf_dit_exec *x, int sampler, wf_dit_sampler_config *cfg) {
    schedule_config(x, sampler, cfg);
}

static wf_dit_noise_key task_key(const wf_task *t) {
    return (wf_dit_noise_key){.seed = t->dit.seed, .request = t->dit.noise_index};
}

/* Whether an h x w latent grid can run: patch multiples within the reserved points. */
static bool latent_size_ok(const wf_dit_exec *x, int h, int w) {
    int p = wf_dit_get_config(x->model)->patch_size;
    return h >= p && w >= p && h % p == 0 && w % p == 0 && (size_t)h * (size_t)w <= x->max_points;
}

static wf_status run_encode(wf_dit_exec *x, wf_task *t, char *err, size_t errlen) {
    const wf_dit_schedule *s = get_schedule(x, t->dit.sampler, t->dit.num_steps, err, errlen);
    if (!s) return WF_EINVAL;
    int h = t->dit.latent.latent.height, w = t->dit.latent.latent.width;
    if (h == 0 && w == 0) {
        h = x->info.latent_height;
        w = x->info.latent_width;
    }
    if (!latent_size_ok(x, h, w)) return WF_EINVAL;
    if (find_slot(x, t->dit.latent.id)) return WF_EINVAL; /* the id is taken */
    latent_slot *slot = NULL;
    for (int i = 0; !slot && i < x->info.max_latents; i++)
        if (x->slots[i].id == 0) slot = &x->slots[i];
    if (!slot || t->dit.latent.id == 0) return WF_EFULL;
    slot->id = t->dit.latent.id;
    slot->h = h;
    slot->w = w;
    size_t n = (size_t)x->info.latent_channels * (size_t)h * (size_t)w;
    wf_dit_noise_fill_parallel(x->pool, task_key(t), WF_DIT_NOISE_STEP_INIT, 0, slot->data, n);
    wf_dit_scale(slot->data, n, wf_dit_schedule_init_sigma(s));
    t->dit.latent.kind = WF_ARTIFACT_LATENT;
    t->dit.latent.latent.channels = x->info.latent_channels;
    t->dit.latent.latent.height = h;
    t->dit.latent.latent.width = w;
    t->dit.latent.latent.step = 0;
    return WF_OK;
}

static uint8_t to_u8(float v) {
    if (!(v > -1.0f)) return 0; /* NaN too */
    if (v >= 1.0f) return 255;
    return (uint8_t)lrintf((v + 1.0f) * 127.5f);
}

static wf_status run_decode(wf_dit_exec *x, wf_task *t) {
    latent_slot *slot = find_slot(x, t->dit.latent.id);
    if (!slot) return WF_ENOTFOUND;
    const wf_dit_exec_info *in = &x->info;
    int ih = slot->h * in->image_scale, iw = slot->w * in->image_scale;
    size_t hw = (size_t)ih * (size_t)iw;
    if (!t->dit.pixels || t->dit.pixels_cap < hw * (size_t)in->image_channels) return WF_EINVAL;
    const float *img = slot->data;
    if (x->vae) {
        if (wf_dit_vae_decode(x->vae, slot->data, slot->h, slot->w, x->image) != WF_OK)
            return WF_EINVAL;
        img = x->image;
    }
    t->dit.image = (wf_artifact){.id = t->dit.image.id, .kind = WF_ARTIFACT_IMAGE};
    t->dit.image.image.channels = in->image_channels;
    t->dit.image.image.height = ih;
    t->dit.image.image.width = iw;
    /* planar [C][H][W] -> interleaved H x W x C, as PNG rows want */
    for (size_t p = 0; p < hw; p++)
        for (int c = 0; c < in->image_channels; c++)
            t->dit.pixels[p * (size_t)in->image_channels + (size_t)c] = to_u8(img[(size_t)c * hw + p]);
    return WF_OK;
}

/* Checks DENOISE task t and fills item *it from it; false (t->status set) when it cannot run. */
static bool denoise_item(wf_dit_exec *x, wf_task *t, wf_dit_item *it, latent_slot **slot_out) {
    latent_slot *slot = find_slot(x, t->dit.latent.id);
    char serr[160];
    const wf_dit_schedule *s = get_schedule(x, t->dit.sampler, t->dit.num_steps, serr, sizeof serr);
    int null = x->info.num_classes;
    if (!slot || !s) {
        t->status = slot ? WF_EINVAL : WF_ENOTFOUND;
        return false;
    }
    if (t->dit.step_begin < 0 || t->dit.step_begin > t->dit.step_end ||
        t->dit.step_end > t->dit.num_steps || t->dit.class_label < 0 ||
        t->dit.class_label > null || t->dit.negative_label > null) {
        t->status = WF_EINVAL;
        return false;
    }
    *it = (wf_dit_item){.latent = slot->data,
                        .label = t->dit.class_label,
                        .uncond_label = t->dit.negative_label,
                        .guidance = t->dit.guidance_scale,
                        .key = task_key(t),
                        .step = t->dit.step_begin,
                        .step_end = t->dit.step_end,
                        .schedule = s};
    *slot_out = slot;
    return true;
}

/* Runs the DENOISE tasks of the batch: those of one latent size together, up to max_items per
 * stepper run (a forward runs one grid; the image scheduler batches one size at a time, so
 * a batch normally holds one). */
static wf_status run_denoise(wf_dit_exec *x, wf_task_batch *b, char *err, size_t errlen) {
    for (int i = 0; i < b->n_tasks; i++)
        if (b->tasks[i].kind == WF_TASK_DENOISE) b->tasks[i].status = WF_IN_PROGRESS; /* not run yet */
    for (;;) {
        int n = 0, h = 0, w = 0;
        for (int i = 0; i < b->n_tasks && n < x->info.max_items; i++) {
            wf_task *t = &b->tasks[i];
            if (t->kind != WF_TASK_DENOISE || t->status != WF_IN_PROGRESS) continue;
            t->t_begin_ns = wf_clock_now_ns();
            latent_slot *slot = NULL;
            if (!denoise_item(x, t, &x->items[n], &slot)) continue;
            if (n == 0) {
                h = slot->h;
                w = slot->w;
            } else if (slot->h != h || slot->w != w) {
                continue; /* another size: a later run */
            }
            t->status = WF_EBUSY;
            x->item_task[n++] = t;
        }
        if (n == 0) return WF_OK;
        wf_status st = wf_dit_stepper_set_size(x->stepper, h, w, err, errlen);
        if (st == WF_OK) st = wf_dit_stepper_run(x->stepper, x->pool, n, x->items, err, errlen);
        if (st != WF_OK) return st;
        uint64_t now = wf_clock_now_ns();
        for (int k = 0; k < n; k++) {
            wf_task *t = x->item_task[k];
            t->status = WF_OK;
            t->dit.latent.kind = WF_ARTIFACT_LATENT;
            t->dit.latent.latent.channels = x->info.latent_channels;
            t->dit.latent.latent.height = h;
            t->dit.latent.latent.width = w;
            t->dit.latent.latent.step = x->items[k].step;
            t->t_end_ns = now;
        }
    }
}

static wf_status exec_run(void *ctx, wf_task_batch *b, char *msg, size_t cap) {
    wf_dit_exec *x = ctx;
    x->n_batches++;
    /* FINISH first: it frees slots an ENCODE of the same batch may take. */
    static const wf_task_kind order[] = {WF_TASK_FINISH, WF_TASK_ENCODE, WF_TASK_DECODE_IMAGE};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        for (int i = 0; i < b->n_tasks; i++) {
            wf_task *t = &b->tasks[i];
            if (t->kind != order[k]) continue;
            t->t_begin_ns = wf_clock_now_ns();
            char terr[160];
            if (t->kind == WF_TASK_FINISH) {
                latent_slot *slot = find_slot(x, t->finish.artifact.id);
                if (slot) slot->id = 0;
                t->status = WF_OK;
            } else if (t->kind == WF_TASK_ENCODE) {
                t->status = run_encode(x, t, terr, sizeof terr);
            } else {
                continue; /* DECODE_IMAGE after the denoising below */
            }
            t->t_end_ns = wf_clock_now_ns();
        }
        if (order[k] == WF_TASK_ENCODE) {
            wf_status st = run_denoise(x, b, msg, cap);
            if (st != WF_OK) return st;
        }
    }
    for (int i = 0; i < b->n_tasks; i++) {
        wf_task *t = &b->tasks[i];
        if (t->kind == WF_TASK_DECODE_IMAGE) {
            t->t_begin_ns = wf_clock_now_ns();
            t->status = run_decode(x, t);
            t->t_end_ns = wf_clock_now_ns();
        } else if (t->kind == WF_TASK_PREFILL || t->kind == WF_TASK_DECODE) {
            t->status = WF_EUNSUPPORTED;
        }
    }
    return WF_OK;
}

static bool exec_supports(void *ctx, wf_task_kind kind) {
    (void)ctx;
    return kind == WF_TASK_ENCODE || kind == WF_TASK_DENOISE || kind == WF_TASK_DECODE_IMAGE ||
           kind == WF_TASK_FINISH;
}

static wf_status exec_dispatch(void *ctx, wf_task_batch *b, wf_executor_done_fn done, void *user) {
    wf_dit_exec *x = ctx;
    return wf_exec_thread_dispatch(x->thread, b, done, user);
}

static void exec_cancel(void *ctx, wf_task_batch *b) {
    wf_dit_exec *x = ctx;
    wf_exec_thread_cancel(x->thread, b);
}

static void exec_synchronize(void *ctx) {
    wf_dit_exec *x = ctx;
    wf_exec_thread_synchronize(x->thread);
}

static const wf_executor_ops dit_exec_ops = {.name = "dit-cpu",
                                             .supports = exec_supports,
                                             .dispatch = exec_dispatch,
                                             .cancel = exec_cancel,
                                             .synchronize = exec_synchronize,
                                             /* on the caller's thread (a gated executor's turn) */
                                             .run = exec_run};

wf_executor wf_dit_exec_executor(wf_dit_exec *x) {
    return (wf_executor){.ops = &dit_exec_ops, .ctx = x};
}

wf_status wf_dit_exec_open(const wf_dit_exec_options *o, wf_dit_exec **out, char *err,
                           size_t errlen) {
    *out = NULL;
    if (!o || !o->model_path || o->max_items < 1 || o->max_latents < 1 || o->n_threads < 0 ||
        o->max_pixels < 0) {
        snprintf(err, errlen, "dit executor: bad options");
        return WF_EINVAL;
    }
    wf_dit_exec *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return WF_ENOMEM;
    }
    wf_status st;
    wf_dit_options mo = wf_dit_options_default();
    mo.max_batch = 2 * o->max_items;
    mo.n_threads = o->n_threads;
    /* Then, knowing the config (sample_size, patch and whether a VAE upscales), the buffers
     * for the largest image: the forward's by its patch count. */
    if ((st = wf_dit_load(o->model_path, &mo, &x->model, err, errlen)) != WF_OK) goto fail;
    int up = 1;
    {
        const wf_dit_config *c0 = wf_dit_get_config(x->model);
        const char *vae_dir = wf_dit_get_paths(x->model)->vae_dir;
        if (vae_dir) {
            char vpath[4096];
            wf_dit_vae_config vc;
            snprintf(vpath, sizeof vpath, "%s/config.json", vae_dir);
            if ((st = wf_dit_vae_config_load(vpath, &vc, err, errlen)) != WF_OK) goto fail;
            up = 1 << (vc.n_blocks - 1);
        }
        long native_px = (long)c0->sample_size * up * c0->sample_size * up;
        long max_px = o->max_pixels > 0 ? o->max_pixels : 4 * native_px;
        if (max_px < native_px) max_px = native_px;
        x->max_points = (size_t)(max_px / ((long)up * up));
        x->info.max_pixels = max_px;
        x->info.image_scale = up;
        x->info.size_multiple = up * c0->patch_size;
        int p = c0->patch_size;
        size_t tokens = x->max_points / ((size_t)p * (size_t)p);
        if (tokens > (1 << 20)) {
            st = wf_status_errorf(err, errlen, WF_EINVAL, "dit executor: max_pixels %ld is above %d patches",
                                  max_px, 1 << 20);
            goto fail;
        }
        if ((st = wf_dit_reserve_tokens(x->model, (int)tokens, err, errlen)) != WF_OK) goto fail;
    }
    const wf_dit_config *c = wf_dit_get_config(x->model);
    {
        /* attention's multiply-adds: 2 T^2 D per block and row (wf_dit_forward_macs) */
        double T = (double)(c->sample_size / c->patch_size) * (c->sample_size / c->patch_size);
        double total = wf_dit_forward_macs(x->model, 1, c->sample_size, c->sample_size);
        x->info.attn_share = total > 0 ? c->depth * 2.0 * T * T * c->hidden / total : 0;
    }
    const char *scfg = wf_dit_get_paths(x->model)->scheduler_config;
    if (scfg) {
        if ((st = wf_dit_sampler_config_load(scfg, &x->base_cfg, err, errlen)) != WF_OK) goto fail;
    } else {
        wf_dit_sampler_config_default(WF_DIT_SAMPLER_KIND_DDIM, &x->base_cfg);
    }
    wf_dit_exec_info *in = &x->info;
    in->num_classes = c->num_classes;
    in->latent_channels = c->in_channels;
    in->latent_height = in->latent_width = c->sample_size;
    in->default_sampler = (int)x->base_cfg.kind;
    in->max_steps = x->base_cfg.num_train_timesteps;
    in->max_items = o->max_items;
    in->max_latents = o->max_latents;
    read_model_index(x);
    st = WF_EIO;
    if (!(x->pool = wf_threadpool_new(o->n_threads))) {
        snprintf(err, errlen, "dit executor: cannot start threads");
        goto fail;
    }
    /* the VAE's scratch is sized by points: sample_size x (enough columns) covers them all */
    st = wf_dit_vae_open(x->model, c->sample_size,
                         (int)((x->max_points + (size_t)c->sample_size - 1) / (size_t)c->sample_size),
                         x->pool, &x->vae, err, errlen);
    if (st != WF_OK && st != WF_ENOTFOUND) goto fail;
    in->latent_model = x->vae != NULL;
    in->image_channels = x->vae ? 3 : c->in_channels;
    in->image_height = in->image_width = c->sample_size * up;
    if ((st = wf_dit_stepper_new(x->model, &x->base_cfg, 1, o->max_items, c->sample_size,
                                 c->sample_size, &x->stepper, err, errlen)) != WF_OK)
        goto fail;
    if ((st = wf_dit_stepper_reserve(x->stepper, x->max_points, err, errlen)) != WF_OK) goto fail;
    st = WF_ENOMEM;
    x->latent_size = wf_dit_stepper_latent_size(x->stepper);
    /* the VAE's output of the largest image */
    x->image_size = (size_t)in->image_channels * x->max_points * (size_t)up * (size_t)up;
    x->slots = calloc((size_t)o->max_latents, sizeof *x->slots);
    x->items = calloc((size_t)o->max_items, sizeof *x->items);
    x->item_task = calloc((size_t)o->max_items, sizeof *x->item_task);
    if (x->vae && !(x->image = malloc(sizeof(float) * x->image_size))) goto nomem;
    if (!x->slots || !x->items || !x->item_task) goto nomem;
    for (int i = 0; i < o->max_latents; i++)
        if (!(x->slots[i].data = malloc(sizeof(float) * (size_t)in->latent_channels * x->max_points)))
            goto nomem;
    if ((st = wf_exec_thread_new("dit", 4, exec_run, x, &x->thread)) != WF_OK) {
        snprintf(err, errlen, "dit executor: cannot start its thread: %s", wf_status_str(st));
        goto fail;
    }
    *out = x;
    return WF_OK;
nomem:
    snprintf(err, errlen, "dit executor: out of memory for %d latents", o->max_latents);
fail:
    wf_dit_exec_free(x);
    return st;
}

void wf_dit_exec_free(wf_dit_exec *x) {
    if (!x) return;
    wf_exec_thread_free(x->thread); /* first: queued batches still use everything below */
    for (int i = 0; x->slots && i < x->info.max_latents; i++) free(x->slots[i].data);
    free(x->slots);
    free(x->items);
    free(x->item_task);
    free(x->image);
    for (int i = 0; i < WF_DIT_EXEC_SCHEDULES; i++) wf_dit_schedule_free(x->schedules[i].schedule);
    for (int i = 0; i < x->info.n_class_names; i++) free(x->info.class_names[i]);
    free(x->info.class_names);
    wf_dit_stepper_free(x->stepper);
    wf_dit_vae_free(x->vae);
    wf_threadpool_free(x->pool);
    wf_dit_free(x->model);
    free(x);
}
