/* The DiT denoising step interface (issue #13): run steps a..b for a batch of latents of one
 * model and resolution, each item with its own step index, label, guidance scale and noise key.
 *
 *     wf_dit_stepper *sp;
 *     if (wf_dit_stepper_new(model, &sched_cfg, 20, 8, 32, 32, &sp, err, sizeof err) != WF_OK) ...;
 *     wf_dit_item it = {.latent = buf, .label = 3, .uncond_label = -1, .guidance = 4.0f,
 *                       .key = {.seed = 1234, .request = 0}, .step = 0, .step_end = 20};
 *     wf_dit_stepper_init_latent(sp, &it);               // x_T from the key, times init sigma
 *     st = wf_dit_stepper_run(sp, pool, 1, &it, err, sizeof err); // it.step == 20 afterwards
 *     wf_dit_stepper_free(sp);
 *
 * The state that lives between calls is only (latent, step index, key), all held in the item,
 * so steps 0..7 may run on one worker and 7..20 on another with bit-identical results. Each call
 * runs rounds until every item has reached its step_end; a round is one model forward over the
 * items still running (each at its own step, so its own timestep), where an item with guidance
 * > 1 contributes two rows to the batch: conditional (label) and unconditional (uncond_label, or
 * the model's null class when uncond_label < 0), combined as DiT's pipeline does. Items with
 * guidance <= 1 contribute one conditional row. Results do not depend on the batch composition
 * or the pool's size as long as the forward pass is row-independent (engine/dit/dit.h).
 *
 * Ownership: the stepper borrows the model (which must outlive it) and owns the schedule and
 * every buffer, reserved at creation for max_items items with guidance (2 x max_items forward
 * rows: the model must have been loaded with max_batch >= that); run allocates nothing. Items'
 * latents belong to the caller.
 * Thread-safety: one run at a time per stepper and per model (the forward uses the model's
 * buffers).
 * Statuses: new returns WF_EINVAL (bad sizes, n_steps), the schedule's errors, WF_ENOMEM. run
 * returns WF_EINVAL (more items than reserved, a step range outside [0, n_steps], a label out of
 * range, NULL latent) with a message, or the forward's status. */
#ifndef WF_ENGINE_DIT_DIT_STEP_H
#define WF_ENGINE_DIT_DIT_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "engine/dit/dit.h"
#include "engine/dit/noise.h"
#include "engine/dit/sampler.h"
#include "engine/dit/vae.h"
#include "proto/base/status.h"

typedef struct wf_dit_item {
    float *latent;       /* [in_channels][height][width], updated in place */
    int32_t label;       /* class in [0, num_classes] (num_classes = unconditional) */
    int32_t uncond_label; /* negative label for guidance; < 0 = the null class */
    float guidance;      /* > 1: classifier-free guidance with this scale */
    wf_dit_noise_key key;
    int step;            /* in: next step to run; out: step_end */
    int step_end;        /* run steps [step, step_end) */
    /* The item's own schedule (sampler and step count), or NULL for the stepper's: items of
     * different schedules share one forward pass, since each row has its own timestep. */
    const wf_dit_schedule *schedule;
} wf_dit_item;

typedef struct wf_dit_stepper wf_dit_stepper;

wf_status wf_dit_stepper_new(wf_dit *model, const wf_dit_sampler_config *cfg, int n_steps,
                             int max_items, int height, int width, wf_dit_stepper **out,
                             char *err, size_t errlen);
void wf_dit_stepper_free(wf_dit_stepper *sp); /* NULL is a no-op */

const wf_dit_schedule *wf_dit_stepper_schedule(const wf_dit_stepper *sp);
/* Other resolutions (image sizes other than the model's native one): reserve grows the
 * buffers to latents of up to `points` = height x width positions (allocates; at set-up, not
 * between runs of a batch), set_size picks the grid the next runs use (any height x width of at
 * most the reserved points; the model must accept it: patch multiples within its max_tokens).
 * WF_EINVAL (bad sizes, above the reservation; err says which), WF_ENOMEM. */
wf_status wf_dit_stepper_reserve(wf_dit_stepper *sp, size_t points, char *err, size_t errlen);
wf_status wf_dit_stepper_set_size(wf_dit_stepper *sp, int height, int width, char *err,
                                  size_t errlen);

/* Floats in one latent: in_channels x height x width (the current size). */
size_t wf_dit_stepper_latent_size(const wf_dit_stepper *sp);

/* item->latent = standard normal noise of (key, WF_DIT_NOISE_STEP_INIT) x init sigma. */
void wf_dit_stepper_init_latent(const wf_dit_stepper *sp, wf_dit_item *item);

wf_status wf_dit_stepper_run(wf_dit_stepper *sp, wf_threadpool *pool, int n_items,
                             wf_dit_item *items, char *err, size_t errlen);

/* The VAE of a latent model's diffusers folder: decoder weights read from
 * vae/diffusion_pytorch_model.safetensors through the safetensors reader, config from
 * vae/config.json. WF_ENOTFOUND when the model has no vae/ folder (pixel-space models: the
 * latent is the image), else wf_dit_vae_new's and the reader's statuses. */
wf_status wf_dit_vae_open(const wf_dit *model, int max_h, int max_w, wf_threadpool *pool,
                          wf_dit_vae **out, char *err, size_t errlen);

#endif
