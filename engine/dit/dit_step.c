/* The DiT step interface: batches items (each at its own step) into one forward per round,
 * classifier-free guidance rows included, then applies each item's scheduler step. */
#include "engine/dit/dit_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dit/safetensors.h"

struct wf_dit_stepper {
    wf_dit *model;
    wf_dit_schedule *sched;
    int max_items, height, width;
    int in_c, out_c, null_label;
    size_t plane;
    size_t cap_plane; /* the buffers' latent points */
    /* forward rows: up to 2 x max_items (cond + uncond per guided item) */
    float *x, *t, *out;
    int32_t *y;
    int *row_item; /* per active item: its first row (uncond is the next one when guided) */
    int *active;   /* indices of the items running this round */
};

wf_status wf_dit_stepper_new(wf_dit *model, const wf_dit_sampler_config *cfg, int n_steps,
                             int max_items, int height, int width, wf_dit_stepper **out,
                             char *err, size_t errlen) {
    *out = NULL;
    if (!model || !cfg || max_items < 1 || height < 1 || width < 1) {
        snprintf(err, errlen, "dit stepper: bad arguments (max_items %d, size %dx%d)", max_items,
                 height, width);
        return WF_EINVAL;
    }
    wf_status st = WF_ENOMEM;
    wf_dit_stepper *sp = calloc(1, sizeof *sp);
    if (!sp)
        goto fail;
    const wf_dit_config *c = wf_dit_get_config(model);
    sp->model = model;
    sp->max_items = max_items;
    sp->height = height;
    sp->width = width;
    sp->in_c = c->in_channels;
    sp->out_c = c->out_channels;
    sp->null_label = c->num_classes;
    sp->plane = sp->cap_plane = (size_t)height * (size_t)width;
    st = wf_dit_schedule_new(cfg, n_steps, &sp->sched, err, errlen);
    if (st != WF_OK)
        goto fail;
    st = WF_ENOMEM;
    size_t rows = 2 * (size_t)max_items;
    sp->x = malloc(sizeof(float) * rows * (size_t)sp->in_c * sp->plane);
    sp->out = malloc(sizeof(float) * rows * (size_t)sp->out_c * sp->plane);
    sp->t = malloc(sizeof(float) * rows);
    sp->y = malloc(sizeof(int32_t) * rows);
    sp->row_item = malloc(sizeof(int) * (size_t)max_items);
    sp->active = malloc(sizeof(int) * (size_t)max_items);
    if (!sp->x || !sp->out || !sp->t || !sp->y || !sp->row_item || !sp->active) {
        snprintf(err, errlen, "dit stepper: out of memory for %d items", max_items);
        goto fail;
    }
    *out = sp;
    return WF_OK;
fail:
    if (st == WF_ENOMEM && sp && sp->sched == NULL)
        snprintf(err, errlen, "dit stepper: out of memory");
    wf_dit_stepper_free(sp);
    return st;
}

void wf_dit_stepper_free(wf_dit_stepper *sp) {
    if (!sp)
        return;
    wf_dit_schedule_free(sp->sched);
    free(sp->x);
    free(sp->out);
    free(sp->t);
    free(sp->y);
    free(sp->row_item);
    free(sp->active);
    free(sp);
}

wf_status wf_dit_stepper_reserve(wf_dit_stepper *sp, size_t points, char *err, size_t errlen) {
    if (points < 1 || points > ((size_t)1 << 24)) {
        snprintf(err, errlen, "dit stepper: %zu latent points outside 1..2^24", points);
        return WF_EINVAL;
    }
    if (points <= sp->cap_plane) return WF_OK;
    size_t rows = 2 * (size_t)sp->max_items;
    float *x = realloc(sp->x, sizeof(float) * rows * (size_t)sp->in_c * points);
    if (x) sp->x = x;
    float *o = x ? realloc(sp->out, sizeof(float) * rows * (size_t)sp->out_c * points) : NULL;
    if (o) sp->out = o;
    if (!x || !o) {
        snprintf(err, errlen, "dit stepper: out of memory for latents of %zu points", points);
        return WF_ENOMEM;
    }
    sp->cap_plane = points;
    return WF_OK;
}

wf_status wf_dit_stepper_set_size(wf_dit_stepper *sp, int height, int width, char *err,
                                  size_t errlen) {
    if (height < 1 || width < 1 || (size_t)height * (size_t)width > sp->cap_plane) {
        snprintf(err, errlen, "dit stepper: latent %dx%d outside the %zu points reserved", height,
                 width, sp->cap_plane);
        return WF_EINVAL;
    }
    sp->height = height;
    sp->width = width;
    sp->plane = (size_t)height * (size_t)width;
    return WF_OK;
}

const wf_dit_schedule *wf_dit_stepper_schedule(const wf_dit_stepper *sp) { return sp->sched; }

size_t wf_dit_stepper_latent_size(const wf_dit_stepper *sp) {
    return (size_t)sp->in_c * sp->plane;
}

void wf_dit_stepper_init_latent(const wf_dit_stepper *sp, wf_dit_item *item) {
    size_t n = wf_dit_stepper_latent_size(sp);
    wf_dit_noise_fill(item->key, WF_DIT_NOISE_STEP_INIT, 0, item->latent, n);
    wf_dit_scale(item->latent, n, wf_dit_schedule_init_sigma(sp->sched));
}

static bool is_guided(const wf_dit_item *it) { return it->guidance > 1.0f; }

static const wf_dit_schedule *item_schedule(const wf_dit_stepper *sp, const wf_dit_item *it) {
    return it->schedule ? it->schedule : sp->sched;
}

static wf_status check_items(const wf_dit_stepper *sp, int n_items, const wf_dit_item *items,
                             char *err, size_t errlen) {
    if (n_items < 0 || n_items > sp->max_items || (n_items > 0 && !items)) {
        snprintf(err, errlen, "dit stepper: %d items, at most %d reserved", n_items,
                 sp->max_items);
        return WF_EINVAL;
    }
    for (int i = 0; i < n_items; i++) {
        const wf_dit_item *it = &items[i];
        int n_steps = wf_dit_schedule_n_steps(item_schedule(sp, it));
        if (!it->latent) {
            snprintf(err, errlen, "dit stepper: item %d has no latent", i);
            return WF_EINVAL;
        }
        if (it->step < 0 || it->step > it->step_end || it->step_end > n_steps) {
            snprintf(err, errlen, "dit stepper: item %d steps %d..%d outside 0..%d", i, it->step,
                     it->step_end, n_steps);
            return WF_EINVAL;
        }
        if (it->label < 0 || it->label > sp->null_label ||
            (is_guided(it) && it->uncond_label > sp->null_label)) {
            snprintf(err, errlen, "dit stepper: item %d label %d / %d outside 0..%d", i,
                     (int)it->label, (int)it->uncond_label, sp->null_label);
            return WF_EINVAL;
        }
    }
    return WF_OK;
}

/* One round: every item with step < step_end advances one step. *n_active = items advanced. */
static wf_status run_round(wf_dit_stepper *sp, wf_threadpool *pool, int n_items,
                           wf_dit_item *items, int *n_active, char *err, size_t errlen) {
    size_t in_sz = (size_t)sp->in_c * sp->plane, out_sz = (size_t)sp->out_c * sp->plane;
    int n_act = 0, rows = 0;
    for (int i = 0; i < n_items; i++) {
        wf_dit_item *it = &items[i];
        if (it->step >= it->step_end)
            continue;
        const wf_dit_schedule *sch = item_schedule(sp, it);
        float scale = wf_dit_schedule_input_scale(sch, it->step);
        float tstep = (float)wf_dit_schedule_timestep(sch, it->step);
        sp->active[n_act] = i;
        sp->row_item[n_act++] = rows;
        int n_rows = is_guided(it) ? 2 : 1;
        for (int r = 0; r < n_rows; r++, rows++) {
            float *x = sp->x + (size_t)rows * in_sz;
            for (size_t j = 0; j < in_sz; j++)
                x[j] = it->latent[j] * scale;
            sp->t[rows] = tstep;
            sp->y[rows] = r == 0 ? it->label
                                 : (it->uncond_label < 0 ? sp->null_label : it->uncond_label);
        }
    }
    *n_active = n_act;
    if (n_act == 0)
        return WF_OK;
    wf_status st = wf_dit_forward(sp->model, pool, rows, sp->height, sp->width, sp->x, sp->t,
                                  sp->y, sp->out, NULL, err, errlen);
    if (st != WF_OK)
        return st;
    for (int a = 0; a < n_act; a++) {
        wf_dit_item *it = &items[sp->active[a]];
        float *cond = sp->out + (size_t)sp->row_item[a] * out_sz;
        if (is_guided(it))
            wf_dit_cfg_combine(cond, cond, cond + out_sz, in_sz, out_sz, it->guidance);
        wf_dit_step_io io = {.model_out = cond,
                             .model_channels = sp->out_c,
                             .x = it->latent,
                             .x_prev = it->latent,
                             .channels = sp->in_c,
                             .plane = sp->plane,
                             .key = it->key,
                             .noise = NULL};
        st = wf_dit_schedule_step(item_schedule(sp, it), it->step, &io);
        if (st != WF_OK) {
            snprintf(err, errlen, "dit stepper: scheduler step %d failed", it->step);
            return st;
        }
        it->step++;
    }
    return WF_OK;
}

wf_status wf_dit_stepper_run(wf_dit_stepper *sp, wf_threadpool *pool, int n_items,
                             wf_dit_item *items, char *err, size_t errlen) {
    wf_status st = check_items(sp, n_items, items, err, errlen);
    if (st != WF_OK)
        return st;
    for (;;) {
        int n_active = 0;
        st = run_round(sp, pool, n_items, items, &n_active, err, errlen);
        if (st != WF_OK || n_active == 0)
            return st;
    }
}

/* ---- VAE weights from vae/diffusion_pytorch_model.safetensors ---- */

static wf_status vae_lookup(void *user, const char *name, wf_dit_tensor_view *out) {
    const wf_safetensors_tensor *t = wf_safetensors_find(user, name);
    if (!t)
        return WF_ENOTFOUND;
    if (t->n_dims > 4)
        return WF_EFORMAT;
    switch (t->dtype) {
    case WF_SAFETENSORS_F32: out->dtype = WF_DIT_DTYPE_F32; break;
    case WF_SAFETENSORS_F16: out->dtype = WF_DIT_DTYPE_F16; break;
    case WF_SAFETENSORS_BF16: out->dtype = WF_DIT_DTYPE_BF16; break;
    default: return WF_EUNSUPPORTED;
    }
    out->n_dims = t->n_dims;
    for (int d = 0; d < 4; d++)
        out->shape[d] = d < t->n_dims ? t->shape[d] : 1;
    out->data = t->data;
    return WF_OK;
}

wf_status wf_dit_vae_open(const wf_dit *model, int max_h, int max_w, wf_threadpool *pool,
                          wf_dit_vae **out, char *err, size_t errlen) {
    *out = NULL;
    const char *dir = wf_dit_get_paths(model)->vae_dir;
    if (!dir) {
        snprintf(err, errlen, "no vae/ folder: a pixel-space model");
        return WF_ENOTFOUND;
    }
    char path[4096];
    wf_dit_vae_config cfg;
    snprintf(path, sizeof path, "%s/config.json", dir);
    wf_status st = wf_dit_vae_config_load(path, &cfg, err, errlen);
    if (st != WF_OK)
        return st;
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    wf_safetensors *sf = NULL;
    st = wf_safetensors_open(path, &sf, err, errlen);
    if (st != WF_OK)
        return st;
    st = wf_dit_vae_new(&cfg, vae_lookup, sf, max_h, max_w, pool, out, err, errlen);
    wf_safetensors_close(sf);
    return st;
}
