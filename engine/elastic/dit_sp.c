/* DiT steps over a group: Ulysses sequence parallelism (all-to-all over heads around attention),
 * classifier-free-guidance parallelism, and the planned copy of latent row slices between
 * placements. The network itself is engine/dit's, run on a slice of the tokens. */
#include "engine/elastic/dit_sp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dit/dit_impl.h"

struct wf_dit_sp {
    wf_dit *model;
    wf_world *world;
    wf_dit_schedule *sched;
    int max_items, height, width, in_c, out_c, null_label, patch, hp, wp, T, D, heads, hd;
    size_t plane, lat_sz, out_sz;
    /* forward rows: up to 2 x max_items, full-size images of which a member fills its rows */
    float *x, *out, *t;
    int32_t *y;
    int *row_item, *active;
    /* Ulysses: the all-to-all's buffer (in place; from the world's memory when it gives it, so
     * that the pairs of members on one host swap through the mapping), the gathered q|k|v of
     * this member's heads, their output */
    float *a2a, *gqkv, *gatt;
    bool a2a_world;
    /* one item's slice packed channel-major for the sampler: latent, model output, noise */
    float *cx, *cm, *cz;
    /* CFG: this member's guided outputs, and both members' */
    float *g_send, *g_recv;
    /* reshard staging */
    float *rs_send, *rs_recv;
    size_t scount[2 * WF_MAX_GROUP_RANKS], sdispl[2 * WF_MAX_GROUP_RANKS];
    size_t rcount[2 * WF_MAX_GROUP_RANKS], rdispl[2 * WF_MAX_GROUP_RANKS];
    /* the group of the forward under way (attention callback) */
    const wf_group *g;
    int me, P;
    void (*round_hook)(void *);
    void *round_user;
};

wf_dit_placement wf_dit_placement_make(wf_dit_sp_mode mode, const int *ranks, int n) {
    wf_dit_placement pl;
    memset(&pl, 0, sizeof pl);
    pl.mode = mode;
    if (!ranks || wf_gfc_group_init(&pl.group, ranks, n) != WF_OK) pl.group.n_ranks = 0;
    return pl;
}

wf_status wf_dit_sp_check(const wf_dit_config *c, int height, int width, wf_dit_sp_mode mode, int P,
                          char *err, size_t errlen) {
    if (P < 1 || P > WF_MAX_GROUP_RANKS)
        return wf_status_errorf(err, errlen, WF_EINVAL, "parallel degree %d outside [1, %d]", P,
                                WF_MAX_GROUP_RANKS);
    if (height < c->patch_size || width < c->patch_size || height % c->patch_size || width % c->patch_size)
        return wf_status_errorf(err, errlen, WF_EINVAL, "size %dx%d is not a positive multiple of the patch size %d",
                                height, width, c->patch_size);
    if (mode == WF_DIT_SP_CFG) {
        if (P > 2)
            return wf_status_errorf(err, errlen, WF_EINVAL,
                                    "guidance parallelism runs on 1 or 2 ranks, not %d", P);
        return WF_OK;
    }
    if (mode != WF_DIT_SP_ULYSSES)
        return wf_status_errorf(err, errlen, WF_EINVAL, "unknown parallel mode %d", (int)mode);
    if (c->heads % P)
        return wf_status_errorf(err, errlen, WF_EINVAL,
                                "sequence parallelism over %d ranks: %d attention heads not divisible by %d", P,
                                c->heads, P);
    int hp = height / c->patch_size;
    if (hp % P)
        return wf_status_errorf(err, errlen, WF_EINVAL,
                                "sequence parallelism over %d ranks: %d patch rows (height %d / patch %d) not "
                                "divisible by %d",
                                P, hp, height, c->patch_size, P);
    return WF_OK;
}

int wf_dit_sp_fit(const wf_dit_config *c, int height, int width, int P) {
    for (; P > 1; P--)
        if (wf_dit_sp_check(c, height, width, WF_DIT_SP_ULYSSES, P, NULL, 0) == WF_OK) return P;
    return 1;
}

wf_dit_sp_mode wf_dit_sp_choose(const wf_dit_config *c, int height, int width, int P, int n_items,
                                int n_guided) {
    if (P != 2) return WF_DIT_SP_ULYSSES;
    /* Every item guided: both modes split the work in halves, but CFG exchanges one output
     * per item and step where Ulysses does two all-to-alls per block. */
    if (n_items > 0 && n_guided == n_items) return WF_DIT_SP_CFG;
    /* Too few patch rows (or heads) to split: CFG still spreads the guided items' halves. */
    if (wf_dit_sp_check(c, height, width, WF_DIT_SP_ULYSSES, 2, NULL, 0) != WF_OK) return WF_DIT_SP_CFG;
    return WF_DIT_SP_ULYSSES;
}

static bool replicated(const wf_dit_placement *pl) { return pl->mode == WF_DIT_SP_CFG || pl->group.n_ranks == 1; }

void wf_dit_sp_rows(const wf_dit_placement *pl, int patch, int height, int member, int *r0, int *r1) {
    if (replicated(pl) || pl->group.n_ranks < 1) {
        *r0 = 0;
        *r1 = height;
        return;
    }
    int per = height / patch / pl->group.n_ranks * patch;
    *r0 = member * per;
    *r1 = *r0 + per;
}

wf_status wf_dit_sp_new(wf_dit *model, const wf_dit_sampler_config *cfg, int n_steps, int max_items, int height,
                        int width, wf_world *world, wf_dit_sp **out, char *err, size_t errlen) {
    *out = NULL;
    if (!model || !cfg || !world || max_items < 1 || height < 1 || width < 1)
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit sp: bad arguments (max_items %d, size %dx%d)",
                                max_items, height, width);
    const wf_dit_config *c = wf_dit_get_config(model);
    if (height % c->patch_size || width % c->patch_size)
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit sp: size %dx%d is not a multiple of the patch size %d",
                                height, width, c->patch_size);
    wf_dit_sp *sp = calloc(1, sizeof *sp);
    if (!sp) return wf_status_errorf(err, errlen, WF_ENOMEM, "dit sp: out of memory");
    sp->model = model;
    sp->world = world;
    sp->max_items = max_items;
    sp->height = height;
    sp->width = width;
    sp->in_c = c->in_channels;
    sp->out_c = c->out_channels;
    sp->null_label = c->num_classes;
    sp->patch = c->patch_size;
    sp->hp = height / c->patch_size;
    sp->wp = width / c->patch_size;
    sp->T = sp->hp * sp->wp;
    sp->D = c->hidden;
    sp->heads = c->heads;
    sp->hd = c->head_dim;
    sp->plane = (size_t)height * (size_t)width;
    sp->lat_sz = (size_t)sp->in_c * sp->plane;
    sp->out_sz = (size_t)sp->out_c * sp->plane;
    wf_status st = wf_dit_schedule_new(cfg, n_steps, &sp->sched, err, errlen);
    if (st != WF_OK) {
        wf_dit_sp_free(sp);
        return st;
    }
    size_t rows = 2 * (size_t)max_items, tok = rows * (size_t)sp->T * (size_t)sp->D;
    sp->x = malloc(sizeof(float) * rows * sp->lat_sz);
    sp->out = malloc(sizeof(float) * rows * sp->out_sz);
    sp->t = malloc(sizeof(float) * rows);
    sp->y = malloc(sizeof(int32_t) * rows);
    sp->row_item = malloc(sizeof(int) * (size_t)max_items);
    sp->active = malloc(sizeof(int) * (size_t)max_items);
    /* Ulysses buffers hold rows x T/P tokens x 3D (or T tokens x 3D/P): P >= 2 when used */
    size_t half = (3 * tok + 1) / 2;
    sp->a2a = wf_world_mem_alloc(world, sizeof(float) * half);
    sp->a2a_world = sp->a2a != NULL;
    if (!sp->a2a) sp->a2a = malloc(sizeof(float) * half); /* in place works on any memory */
    sp->gqkv = malloc(sizeof(float) * half);
    sp->gatt = malloc(sizeof(float) * ((tok + 1) / 2));
    sp->cx = malloc(sizeof(float) * sp->lat_sz);
    sp->cm = malloc(sizeof(float) * sp->out_sz);
    sp->cz = malloc(sizeof(float) * sp->lat_sz);
    sp->g_send = malloc(sizeof(float) * (size_t)max_items * sp->out_sz);
    sp->g_recv = malloc(sizeof(float) * 2 * (size_t)max_items * sp->out_sz);
    /* a row goes to at most two new holders (a CFG pair), so a rank sends at most 2 latents */
    sp->rs_send = malloc(sizeof(float) * 2 * (size_t)max_items * sp->lat_sz);
    sp->rs_recv = malloc(sizeof(float) * (size_t)max_items * sp->lat_sz);
    if (!sp->x || !sp->out || !sp->t || !sp->y || !sp->row_item || !sp->active || !sp->a2a ||
        !sp->gqkv || !sp->gatt || !sp->cx || !sp->cm || !sp->cz || !sp->g_send || !sp->g_recv || !sp->rs_send ||
        !sp->rs_recv) {
        wf_dit_sp_free(sp);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "dit sp: out of memory for %d items", max_items);
    }
    *out = sp;
    return WF_OK;
}

void wf_dit_sp_free(wf_dit_sp *sp) {
    if (!sp) return;
    wf_dit_schedule_free(sp->sched);
    if (sp->a2a_world) wf_world_mem_free(sp->world, sp->a2a);
    else free(sp->a2a);
    float *bufs[] = {sp->x,  sp->out,    sp->t,      sp->gqkv,    sp->gatt,   sp->cx,
                     sp->cm, sp->cz,     sp->g_send, sp->g_recv, sp->rs_send, sp->rs_recv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(sp->y);
    free(sp->row_item);
    free(sp->active);
    free(sp);
}

size_t wf_dit_sp_latent_size(const wf_dit_sp *sp) { return sp->lat_sz; }

void wf_dit_sp_init_latent(const wf_dit_sp *sp, wf_dit_item *item) {
    wf_dit_noise_fill(item->key, WF_DIT_NOISE_STEP_INIT, 0, item->latent, sp->lat_sz);
    wf_dit_scale(item->latent, sp->lat_sz, wf_dit_schedule_init_sigma(sp->sched));
}

static bool is_guided(const wf_dit_item *it) { return it->guidance > 1.0f; }

static wf_status check_items(const wf_dit_sp *sp, int n_items, const wf_dit_item *items, char *err, size_t errlen) {
    if (n_items < 0 || n_items > sp->max_items || (n_items > 0 && !items))
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit sp: %d items, at most %d reserved", n_items,
                                sp->max_items);
    int n_steps = wf_dit_schedule_n_steps(sp->sched);
    for (int i = 0; i < n_items; i++) {
        const wf_dit_item *it = &items[i];
        if (!it->latent) return wf_status_errorf(err, errlen, WF_EINVAL, "dit sp: item %d has no latent", i);
        if (it->step < 0 || it->step > it->step_end || it->step_end > n_steps)
            return wf_status_errorf(err, errlen, WF_EINVAL, "dit sp: item %d steps %d..%d outside 0..%d", i,
                                    it->step, it->step_end, n_steps);
        if (it->label < 0 || it->label > sp->null_label || (is_guided(it) && it->uncond_label > sp->null_label))
            return wf_status_errorf(err, errlen, WF_EINVAL, "dit sp: item %d label %d / %d outside 0..%d", i,
                                    (int)it->label, (int)it->uncond_label, sp->null_label);
    }
    return WF_OK;
}

static wf_status check_placement(const wf_dit_sp *sp, const wf_dit_placement *pl, const char *what, char *err,
                                 size_t errlen) {
    if (!pl || pl->group.n_ranks < 1)
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit sp: %s placement has no ranks", what);
    return wf_dit_sp_check(wf_dit_get_config(sp->model), sp->height, sp->width, pl->mode, pl->group.n_ranks, err,
                           errlen);
}

/* ---- attention over the group ---------------------------------------------------------------- */

static wf_status attn_local(void *user, wf_threadpool *pool, float *qkv, float *att, int batch, int ntok, char *err,
                            size_t errlen) {
    (void)err;
    (void)errlen;
    wf_dit_sp *sp = user;
    wf__dit_attention(pool, qkv, att, batch, ntok, sp->heads, sp->hd, sp->model->attn_scratch);
    return WF_OK;
}

/* Ulysses: member i holds tokens [i*Tl, (i+1)*Tl) with every head; one all-to-all gives it the
 * whole sequence for heads [i*H/P, (i+1)*H/P), attention runs there, a second all-to-all
 * returns each member its tokens with every head. Both all-to-alls run in place (every block
 * is as long as the one it is swapped with): pairs of members on one host swap their blocks
 * through the mapping, and the own block does not move. */
static wf_status attn_ulysses(void *user, wf_threadpool *pool, float *qkv, float *att, int batch, int ntok,
                              char *err, size_t errlen) {
    wf_dit_sp *sp = user;
    const int P = sp->P, D = sp->D, Dl = D / P, Tl = ntok, T = Tl * P;
    const size_t dsz = (size_t)Dl * sizeof(float);
    for (int j = 0; j < P; j++)
        for (int b = 0; b < batch; b++)
            for (int k = 0; k < Tl; k++)
                for (int part = 0; part < 3; part++)
                    memcpy(sp->a2a + ((((size_t)j * batch + b) * Tl + k) * 3 + part) * Dl,
                           qkv + ((size_t)b * Tl + k) * 3 * D + (size_t)part * D + (size_t)j * Dl, dsz);
    wf_status st = wf_gfc_alltoall(sp->world, sp->g, sp->a2a, sp->a2a,
                                   (size_t)batch * Tl * 3 * dsz);
    if (st != WF_OK)
        return wf_status_errorf(err, errlen, st, "dit sp: all-to-all before attention: %s",
                                wf_world_error(sp->world));
    for (int j = 0; j < P; j++)
        for (int b = 0; b < batch; b++)
            for (int k = 0; k < Tl; k++)
                for (int part = 0; part < 3; part++)
                    memcpy(sp->gqkv + (((size_t)b * T + (size_t)j * Tl + k) * 3 + part) * Dl,
                           sp->a2a + ((((size_t)j * batch + b) * Tl + k) * 3 + part) * Dl, dsz);
    wf__dit_attention(pool, sp->gqkv, sp->gatt, batch, T, sp->heads / P, sp->hd, sp->model->attn_scratch);
    for (int j = 0; j < P; j++)
        for (int b = 0; b < batch; b++)
            for (int k = 0; k < Tl; k++)
                memcpy(sp->a2a + (((size_t)j * batch + b) * Tl + k) * Dl,
                       sp->gatt + ((size_t)b * T + (size_t)j * Tl + k) * Dl, dsz);
    st = wf_gfc_alltoall(sp->world, sp->g, sp->a2a, sp->a2a, (size_t)batch * Tl * dsz);
    if (st != WF_OK)
        return wf_status_errorf(err, errlen, st, "dit sp: all-to-all after attention: %s",
                                wf_world_error(sp->world));
    for (int j = 0; j < P; j++)
        for (int b = 0; b < batch; b++)
            for (int k = 0; k < Tl; k++)
                memcpy(att + ((size_t)b * Tl + k) * D + (size_t)j * Dl,
                       sp->a2a + (((size_t)j * batch + b) * Tl + k) * Dl, dsz);
    return WF_OK;
}

/* ---- one round --------------------------------------------------------------------------------- */

/* Rows [r0, r1) of every channel of img (ch channels) packed into dst, or back (unpack). */
static void pack_rows(const wf_dit_sp *sp, float *dst, const float *img, int ch, int r0, int r1) {
    size_t n = (size_t)(r1 - r0) * sp->width;
    for (int c = 0; c < ch; c++)
        memcpy(dst + (size_t)c * n, img + (size_t)c * sp->plane + (size_t)r0 * sp->width, n * sizeof(float));
}

static void unpack_rows(const wf_dit_sp *sp, float *img, const float *src, int ch, int r0, int r1) {
    size_t n = (size_t)(r1 - r0) * sp->width;
    for (int c = 0; c < ch; c++)
        memcpy(img + (size_t)c * sp->plane + (size_t)r0 * sp->width, src + (size_t)c * n, n * sizeof(float));
}

/* Guidance combine and the sampler step on latent rows [r0, r1): element-wise, with the noise
 * of those elements' indices in the whole latent, so any slicing gives the same values. */
static wf_status step_rows(wf_dit_sp *sp, wf_dit_item *it, const float *cond, const float *uncond, int r0, int r1,
                           char *err, size_t errlen) {
    const size_t n = (size_t)(r1 - r0) * sp->width;
    pack_rows(sp, sp->cm, cond, sp->out_c, r0, r1);
    if (uncond)
        for (int c = 0; c < sp->in_c; c++) {
            const size_t off = (size_t)c * sp->plane + (size_t)r0 * sp->width;
            wf_dit_cfg_combine(sp->cm + (size_t)c * n, sp->cm + (size_t)c * n, uncond + off, n, n, it->guidance);
        }
    pack_rows(sp, sp->cx, it->latent, sp->in_c, r0, r1);
    for (int c = 0; c < sp->in_c; c++)
        wf_dit_noise_fill(it->key, (uint32_t)it->step, (uint64_t)c * sp->plane + (uint64_t)r0 * sp->width,
                          sp->cz + (size_t)c * n, n);
    wf_dit_step_io io = {.model_out = sp->cm,
                         .model_channels = sp->out_c,
                         .x = sp->cx,
                         .x_prev = sp->cx,
                         .channels = sp->in_c,
                         .plane = n,
                         .key = it->key,
                         .noise = sp->cz};
    wf_status st = wf_dit_schedule_step(sp->sched, it->step, &io);
    if (st != WF_OK) return wf_status_errorf(err, errlen, st, "dit sp: scheduler step %d failed", it->step);
    unpack_rows(sp, it->latent, sp->cx, sp->in_c, r0, r1);
    it->step++;
    return WF_OK;
}

/* Fills the forward rows of the active items: model input rows [r0, r1) (x_t times the input
 * scale), timesteps and labels. cfg_member >= 0: guidance-parallel, guided items contribute the
 * one row of that member (0 conditional, 1 unconditional). Returns the row count. */
static int fill_rows(wf_dit_sp *sp, int n_items, wf_dit_item *items, int r0, int r1, int cfg_member,
                     int *n_active) {
    int n_act = 0, rows = 0;
    for (int i = 0; i < n_items; i++) {
        wf_dit_item *it = &items[i];
        if (it->step >= it->step_end) continue;
        float scale = wf_dit_schedule_input_scale(sp->sched, it->step);
        float tstep = (float)wf_dit_schedule_timestep(sp->sched, it->step);
        sp->active[n_act] = i;
        sp->row_item[n_act++] = rows;
        int first = 0, last = is_guided(it) ? 1 : 0;
        if (cfg_member >= 0 && is_guided(it)) first = last = cfg_member;
        for (int r = first; r <= last; r++, rows++) {
            float *x = sp->x + (size_t)rows * sp->lat_sz;
            for (int c = 0; c < sp->in_c; c++) {
                const size_t off = (size_t)c * sp->plane + (size_t)r0 * sp->width;
                const size_t n = (size_t)(r1 - r0) * sp->width;
                for (size_t j = 0; j < n; j++) x[off + j] = it->latent[off + j] * scale;
            }
            sp->t[rows] = tstep;
            sp->y[rows] = r == 0 ? it->label : (it->uncond_label < 0 ? sp->null_label : it->uncond_label);
        }
    }
    *n_active = n_act;
    return rows;
}

/* The forward over rows on tokens of image rows [r0, r1), into sp->out (those rows only). */
static wf_status forward_rows(wf_dit_sp *sp, wf_threadpool *pool, int rows, int r0, int r1, wf__dit_attn_fn attn,
                              char *err, size_t errlen) {
    wf_status st = wf__dit_check_forward(sp->model, pool, rows, sp->height, sp->width, sp->y, err, errlen);
    if (st != WF_OK) return st;
    const int tok0 = r0 / sp->patch * sp->wp, ntok = (r1 - r0) / sp->patch * sp->wp;
    wf__dit_patchify(sp->model, rows, sp->height, sp->width, tok0, ntok, sp->x);
    st = wf__dit_forward_tokens(sp->model, pool, rows, sp->hp, sp->wp, tok0, ntok, sp->t, sp->y, attn, sp, NULL,
                                err, errlen);
    if (st != WF_OK) return st;
    wf__dit_unpatchify(sp->model, rows, sp->height, sp->width, tok0, ntok, sp->out);
    return WF_OK;
}

static wf_status round_ulysses(wf_dit_sp *sp, wf_threadpool *pool, int n_items, wf_dit_item *items, int *n_active,
                               char *err, size_t errlen) {
    int r0, r1;
    wf_dit_placement pl = {.mode = WF_DIT_SP_ULYSSES, .group = *sp->g};
    wf_dit_sp_rows(&pl, sp->patch, sp->height, sp->me, &r0, &r1);
    int rows = fill_rows(sp, n_items, items, r0, r1, -1, n_active);
    if (*n_active == 0) return WF_OK;
    wf_status st = forward_rows(sp, pool, rows, r0, r1, sp->P > 1 ? attn_ulysses : attn_local, err, errlen);
    for (int a = 0; a < *n_active && st == WF_OK; a++) {
        wf_dit_item *it = &items[sp->active[a]];
        const float *cond = sp->out + (size_t)sp->row_item[a] * sp->out_sz;
        st = step_rows(sp, it, cond, is_guided(it) ? cond + sp->out_sz : NULL, r0, r1, err, errlen);
    }
    return st;
}

static wf_status round_cfg(wf_dit_sp *sp, wf_threadpool *pool, int n_items, wf_dit_item *items, int *n_active,
                           char *err, size_t errlen) {
    int rows = fill_rows(sp, n_items, items, 0, sp->height, sp->me, n_active);
    if (*n_active == 0) return WF_OK;
    wf_status st = forward_rows(sp, pool, rows, 0, sp->height, attn_local, err, errlen);
    if (st != WF_OK) return st;
    int ng = 0;
    for (int a = 0; a < *n_active; a++)
        if (is_guided(&items[sp->active[a]]))
            memcpy(sp->g_send + (size_t)ng++ * sp->out_sz, sp->out + (size_t)sp->row_item[a] * sp->out_sz,
                   sp->out_sz * sizeof(float));
    if (ng > 0) {
        st = wf_gfc_allgather(sp->world, sp->g, sp->g_send, sp->g_recv, (size_t)ng * sp->out_sz * sizeof(float));
        if (st != WF_OK)
            return wf_status_errorf(err, errlen, st, "dit sp: guidance all-gather: %s", wf_world_error(sp->world));
    }
    for (int a = 0, k = 0; a < *n_active && st == WF_OK; a++) {
        wf_dit_item *it = &items[sp->active[a]];
        if (is_guided(it)) {
            const float *cond = sp->g_recv + (size_t)k * sp->out_sz;
            const float *uncond = sp->g_recv + (size_t)(ng + k) * sp->out_sz;
            k++;
            st = step_rows(sp, it, cond, uncond, 0, sp->height, err, errlen);
        } else {
            st = step_rows(sp, it, sp->out + (size_t)sp->row_item[a] * sp->out_sz, NULL, 0, sp->height, err, errlen);
        }
    }
    return st;
}

void wf_dit_sp_set_round_hook(wf_dit_sp *sp, void (*fn)(void *user), void *user) {
    sp->round_hook = fn;
    sp->round_user = user;
}

wf_status wf_dit_sp_run(wf_dit_sp *sp, wf_threadpool *pool, const wf_dit_placement *pl, int n_items,
                        wf_dit_item *items, char *err, size_t errlen) {
    wf_status st = check_placement(sp, pl, "run", err, errlen);
    if (st != WF_OK) return st;
    st = check_items(sp, n_items, items, err, errlen);
    if (st != WF_OK) return st;
    int me = wf_gfc_group_index(&pl->group, wf_world_rank(sp->world));
    if (me < 0)
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit sp: rank %d is not a member of the group",
                                wf_world_rank(sp->world));
    sp->g = &pl->group;
    sp->me = me;
    sp->P = pl->group.n_ranks;
    const bool cfg = pl->mode == WF_DIT_SP_CFG && sp->P == 2;
    for (;;) {
        int n_active = 0;
        st = cfg ? round_cfg(sp, pool, n_items, items, &n_active, err, errlen)
                 : round_ulysses(sp, pool, n_items, items, &n_active, err, errlen);
        if (st != WF_OK || n_active == 0) break;
        if (sp->round_hook) sp->round_hook(sp->round_user);
    }
    sp->g = NULL;
    return st;
}

/* ---- reshard ----------------------------------------------------------------------------------- */

/* The union of the two groups: from's members in order, then to's that are not in from. */
static void union_ranks(const wf_dit_placement *from, const wf_dit_placement *to, int *ranks, int *n) {
    *n = 0;
    for (int i = 0; i < from->group.n_ranks; i++) ranks[(*n)++] = from->group.ranks[i];
    for (int i = 0; i < to->group.n_ranks; i++)
        if (wf_gfc_group_index(&from->group, to->group.ranks[i]) < 0) ranks[(*n)++] = to->group.ranks[i];
}

/* The latent rows world rank src sends world rank dst: [*a, *b), empty when a >= b. Every
 * rank derives the same plan: a new holder takes each row it lacks from the old member holding
 * it (for an old replicated placement: old member d % n, d its index in the new group). */
static void plan_rows(int patch, int height, const wf_dit_placement *from, const wf_dit_placement *to, int src,
                      int dst, int *a, int *b) {
    *a = *b = 0;
    int d = wf_gfc_group_index(&to->group, dst), s = wf_gfc_group_index(&from->group, src);
    if (d < 0 || s < 0 || src == dst) return;
    int n0, n1;
    wf_dit_sp_rows(to, patch, height, d, &n0, &n1);
    if (replicated(from)) {
        if (wf_gfc_group_index(&from->group, dst) >= 0) return; /* already holds everything */
        if (s != d % from->group.n_ranks) return;
        *a = n0;
        *b = n1;
        return;
    }
    int s0, s1;
    wf_dit_sp_rows(from, patch, height, s, &s0, &s1);
    *a = s0 > n0 ? s0 : n0;
    *b = s1 < n1 ? s1 : n1;
    if (*a >= *b) *a = *b = 0;
}

size_t wf_dit_sp_plan_bytes(const wf_dit_placement *from, const wf_dit_placement *to, int patch, int channels,
                            int height, int width, int n_items, int world_rank) {
    int ur[2 * WF_MAX_GROUP_RANKS], nu;
    union_ranks(from, to, ur, &nu);
    size_t bytes = 0;
    for (int j = 0; j < nu; j++) {
        int a, b;
        plan_rows(patch, height, from, to, world_rank, ur[j], &a, &b);
        bytes += (size_t)n_items * (size_t)channels * (size_t)(b - a) * (size_t)width * sizeof(float);
    }
    return bytes;
}

size_t wf_dit_sp_reshard_bytes(const wf_dit_sp *sp, const wf_dit_placement *from, const wf_dit_placement *to,
                               int n_items, int world_rank) {
    return wf_dit_sp_plan_bytes(from, to, sp->patch, sp->in_c, sp->height, sp->width, n_items, world_rank);
}

wf_status wf_dit_sp_reshard(wf_dit_sp *sp, const wf_dit_placement *from, const wf_dit_placement *to, int n_items,
                            wf_dit_item *items, char *err, size_t errlen) {
    wf_status st = check_placement(sp, from, "source", err, errlen);
    if (st == WF_OK) st = check_placement(sp, to, "destination", err, errlen);
    if (st == WF_OK) st = check_items(sp, n_items, items, err, errlen);
    if (st != WF_OK) return st;
    int ur[2 * WF_MAX_GROUP_RANKS], nu;
    union_ranks(from, to, ur, &nu);
    if (nu > WF_MAX_GROUP_RANKS)
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit sp: the two groups span %d ranks, at most %d", nu,
                                WF_MAX_GROUP_RANKS);
    const int me = wf_world_rank(sp->world);
    int my = -1;
    for (int j = 0; j < nu; j++)
        if (ur[j] == me) my = j;
    if (my < 0)
        return wf_status_errorf(err, errlen, WF_EINVAL, "dit sp: rank %d is in neither group of the reshard", me);
    /* nothing changes hands (e.g. a group shrinking onto old holders): no message at all */
    bool any = false;
    for (int s = 0; s < nu && !any; s++)
        for (int d = 0; d < nu && !any; d++) {
            int a, b;
            plan_rows(sp->patch, sp->height, from, to, ur[s], ur[d], &a, &b);
            any = a < b;
        }
    if (!any) return WF_OK;
    size_t soff = 0, roff = 0;
    for (int j = 0; j < nu; j++) {
        int a, b;
        plan_rows(sp->patch, sp->height, from, to, me, ur[j], &a, &b);
        size_t per = (size_t)sp->in_c * (size_t)(b - a) * sp->width;
        sp->sdispl[j] = soff * sizeof(float);
        for (int i = 0; i < n_items && a < b; i++)
            pack_rows(sp, sp->rs_send + soff + (size_t)i * per, items[i].latent, sp->in_c, a, b);
        soff += (size_t)n_items * per;
        sp->scount[j] = (size_t)n_items * per * sizeof(float);
        plan_rows(sp->patch, sp->height, from, to, ur[j], me, &a, &b);
        per = (size_t)sp->in_c * (size_t)(b - a) * sp->width;
        sp->rdispl[j] = roff * sizeof(float);
        roff += (size_t)n_items * per;
        sp->rcount[j] = (size_t)n_items * per * sizeof(float);
    }
    wf_group ug;
    st = wf_gfc_group_init(&ug, ur, nu);
    if (st != WF_OK) return wf_status_errorf(err, errlen, st, "dit sp: bad union group");
    st = wf_gfc_alltoallv(sp->world, &ug, sp->rs_send, sp->scount, sp->sdispl, sp->rs_recv, sp->rcount, sp->rdispl);
    if (st != WF_OK)
        return wf_status_errorf(err, errlen, st, "dit sp: reshard all-to-all-v: %s", wf_world_error(sp->world));
    for (int j = 0; j < nu; j++) {
        int a, b;
        plan_rows(sp->patch, sp->height, from, to, ur[j], me, &a, &b);
        size_t per = (size_t)sp->in_c * (size_t)(b - a) * sp->width;
        for (int i = 0; i < n_items && a < b; i++)
            unpack_rows(sp, items[i].latent, sp->rs_recv + sp->rdispl[j] / sizeof(float) + (size_t)i * per,
                        sp->in_c, a, b);
    }
    return WF_OK;
}
