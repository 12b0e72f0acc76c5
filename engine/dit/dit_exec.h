/* The in-process DiT executor: one DiT model (diffusers folder or original-layout file), its
 * VAE when it has one, a thread pool and a table of latents, behind the asynchronous executor
 * seam (proto/task.h) like the LLM engine's CPU executor.
 *
 *     wf_dit_exec_options o;
 *     wf_dit_exec_options_init(&o);
 *     o.model_path = "/usr/local/share/weft/models/weft-dit-digits";
 *     wf_dit_exec *x;
 *     if (wf_dit_exec_open(&o, &x, err, sizeof err) != WF_OK) die(err);
 *     const wf_dit_exec_info *info = wf_dit_exec_get_info(x);   // sizes, classes, defaults
 *     wf_executor ex = wf_dit_exec_executor(x);                 // ENCODE/DENOISE/DECODE_IMAGE/FINISH
 *     ...dispatch batches (sched/images.h does)...
 *     wf_dit_exec_free(x);                                       // after the last batch completed
 *
 * Tasks (wf_task_dit): ENCODE takes a free latent slot for latent.id and fills it with the
 * noise of (seed, noise_index) times the schedule's initial sigma, on the latent grid of
 * latent.latent.height x width (0 x 0: the native one; any patch multiples within
 * info.max_pixels: the positions are computed for that grid, the DiT's 2-D sin-cos embedding
 * extends to any), and the slot keeps that size for the tasks that follow; DENOISE runs steps
 * [step_begin, step_end) of every DENOISE task of the batch together (engine/dit/dit_step.h:
 * one forward per round over all items of one latent size, each at its own step, with its own
 * sampler, step count, guidance and labels; items of other sizes run as further forwards);
 * DECODE_IMAGE writes the image (of its latent's size) as 8-bit pixels, row-major H x W x C
 * ([-1, 1] mapped to 0..255, rounded, clamped) into task.dit.pixels (pixels_cap bytes) after
 * the VAE for latent models; FINISH frees latent.id's slot. sampler < 0 means the model's own
 * scheduler config; another wf_dit_sampler_kind keeps the model's training schedule
 * (wf_dit_sampler_config_switch). A task that cannot run (no free slot, unknown latent, bad
 * steps or labels) fails alone with its status; the batch fails as a whole only when the
 * forward pass does.
 *
 * Memory: latents (max_latents of them), forward rows (2 x max_items) and the VAE's activations
 * are reserved at open; the schedules of (sampler, step count) pairs are built on first use and
 * cached (at most WF_DIT_EXEC_SCHEDULES, least recently used evicted).
 * Thread-safety: info and class lookup from any thread; batches run on the executor's own
 * thread (proto/exec_thread.h), one at a time. */
#ifndef WF_ENGINE_DIT_DIT_EXEC_H
#define WF_ENGINE_DIT_DIT_EXEC_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/dit/dit_step.h"
#include "proto/base/status.h"
#include "proto/task.h"

#define WF_DIT_EXEC_SCHEDULES 32
#define WF_DIT_EXEC_MAX_CLASS_NAMES 1024

typedef struct wf_dit_exec_options {
    const char *model_path;
    int n_threads;   /* 0: one per core */
    int max_items;   /* images denoised in one forward (guided ones take 2 rows); default 8 */
    int max_latents; /* latents held at once; default 64 */
    long max_pixels; /* largest image (width x height pixels) ENCODE accepts; 0: 4 x the
                      * native size's (the buffers, latents included, are sized for it) */
} wf_dit_exec_options;

void wf_dit_exec_options_init(wf_dit_exec_options *o);
/* Sets images per forward pass (max_items; <= 0 keeps the default) and raises max_latents to
 * twice that if it is lower: weftd and its worker ranks open a DiT through this one rule, so
 * the coordinator knows the latent slots a worker has. */
void wf_dit_exec_options_set_batch(wf_dit_exec_options *o, int max_items);

typedef struct wf_dit_exec_info {
    int image_width, image_height, image_channels; /* the native size DECODE_IMAGE writes */
    int latent_width, latent_height, latent_channels; /* the native latent */
    /* Other sizes: an image side must be a multiple of size_multiple (the VAE's upscale x the
     * patch size: latent sides are patch multiples), and width x height at most max_pixels. */
    int image_scale;            /* image pixels per latent position along a side (VAE) */
    double attn_share;          /* of a native forward's multiply-adds, attention's (they
                                 * grow with the square of the positions, the rest linearly) */
    int size_multiple;
    long max_pixels;
    int num_classes;            /* labels 0..num_classes-1; num_classes is the null class */
    int n_class_names;          /* from model_index.json "weft_class_names"; 0: none */
    char **class_names;
    float default_guidance;     /* model_index.json "weft_guidance_scale", else 4 */
    int default_sampler;        /* wf_dit_sampler_kind of the model's scheduler config */
    int max_steps;              /* the schedule's num_train_timesteps */
    int max_items, max_latents;
    bool latent_model;          /* has a VAE */
} wf_dit_exec_info;

typedef struct wf_dit_exec wf_dit_exec;

/* Loads the model, its scheduler config and VAE, starts the pool and the executor thread.
 * Statuses: wf_dit_load's, the sampler config's and the VAE's, WF_EINVAL (bad options),
 * WF_ENOMEM, WF_EIO (threads); err names the problem. On error *out is NULL. */
wf_status wf_dit_exec_open(const wf_dit_exec_options *o, wf_dit_exec **out, char *err,
                           size_t errlen);
/* NULL is a no-op. Runs what is queued, then stops the thread and frees everything. */
void wf_dit_exec_free(wf_dit_exec *x);

const wf_dit_exec_info *wf_dit_exec_get_info(const wf_dit_exec *x);
/* The label of `name`: a class name of the model, or a decimal index below num_classes.
 * -1 when neither. */
int wf_dit_exec_class_index(const wf_dit_exec *x, const char *name);
wf_executor wf_dit_exec_executor(wf_dit_exec *x);
/* Whether (sampler, n_steps) gives a valid schedule for this model (sampler < 0: the model's):
 * WF_OK, or WF_EINVAL with err naming the problem (e.g. more steps than the spacing allows).
 * Any thread; builds and frees a schedule (microseconds). */
wf_status wf_dit_exec_check_schedule(const wf_dit_exec *x, int sampler, int n_steps, char *err,
                                     size_t errlen);

/* Latents as artifacts that cross processes (server/workers/dit_router.h): the table entry of
 * latent `id` (latent_channels x latent_height x latent_width floats, wf_dit_exec_latent_floats
 * of them: a native latent; a slot has room for the largest, wf_dit_exec_latent_floats_max).
 * create: take a free slot for an id not held yet (a latent arriving from another rank) at
 * the native size; NULL when the id is not held (create false), or no slot is free, or id is 0.
 * wf_dit_exec_latent_sized creates (or finds) one of h x w latent positions (0 x 0: native;
 * NULL also when this executor cannot run that grid, or the id is held at another size);
 * wf_dit_exec_latent_dims tells a held latent's grid (false: not held). drop frees the slot
 * (no-op for an unknown id). Only while no batch of this executor runs (the caller orders
 * them: e.g. a worker between its blocking runs, a router between its phases). */
float *wf_dit_exec_latent(wf_dit_exec *x, uint64_t id, bool create);
float *wf_dit_exec_latent_sized(wf_dit_exec *x, uint64_t id, int h, int w);
bool wf_dit_exec_latent_dims(const wf_dit_exec *x, uint64_t id, int *h, int *w);
void wf_dit_exec_latent_drop(wf_dit_exec *x, uint64_t id);
size_t wf_dit_exec_latent_floats(const wf_dit_exec *x);
size_t wf_dit_exec_latent_floats_max(const wf_dit_exec *x);

/* What a multi-rank stepper over the same model needs (engine/elastic/dit_sp.h on a worker
 * rank): the model, the thread pool and the sampler config of `sampler` (< 0: the model's).
 * Use them only while no batch of this executor runs (they share the model's buffers). */
wf_dit *wf_dit_exec_model(wf_dit_exec *x);
wf_threadpool *wf_dit_exec_pool(wf_dit_exec *x);
void wf_dit_exec_sampler_config(const wf_dit_exec *x, int sampler, wf_dit_sampler_config *cfg);

#endif
