/* The image scheduler (sched/images.h) on the real in-process DiT executor
 * (engine/dit/dit_exec.h) with the committed default DiT (deploy/models/weft-dit-digits):
 * batching invariance across mixed requests, chunk lengths and batching off, cancellation at a
 * step boundary, admission errors, drain. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/dit/dit_exec.h"
#include "proto/base/clock.h"
#include "proto/base/handoff.h"
#include "sched/gate.h"
#include "sched/images.h"

#define MODEL WEFT_SOURCE_DIR "/deploy/models/weft-dit-digits"

typedef struct fixture {
    wf_dit_exec *x;
    wf_image_sched *s;
    int model;
    wf_handoff events;
    size_t image_bytes;
} fixture;

/* The order the next open_fixture's scheduler uses (the fcfs test sets it, then clears it). */
static bool fixture_fcfs;

static void open_fixture(fixture *f, int chunk, bool batching, int queue) {
    memset(f, 0, sizeof *f);
    char err[400];
    wf_dit_exec_options xo;
    wf_dit_exec_options_init(&xo);
    xo.model_path = MODEL;
    xo.n_threads = 2;
    xo.max_items = 4;
    xo.max_latents = 8;
    ck_assert_msg(wf_dit_exec_open(&xo, &f->x, err, sizeof err) == WF_OK, "%s", err);
    const wf_dit_exec_info *in = wf_dit_exec_get_info(f->x);
    ck_assert_int_eq(in->image_width, 8);
    ck_assert_int_eq(in->image_channels, 1);
    ck_assert_int_eq(in->n_class_names, 10);
    ck_assert_int_eq(wf_dit_exec_class_index(f->x, "7"), 7);
    ck_assert_int_eq(wf_dit_exec_class_index(f->x, "cat"), -1);
    wf_image_sched_options o;
    wf_image_sched_options_init(&o);
    o.chunk_steps = chunk;
    o.batching = batching;
    o.queue_size = queue;
    o.fcfs = fixture_fcfs;
    ck_assert_int_eq(wf_image_sched_new(&o, &f->s), WF_OK);
    wf_image_geometry g = {.width = in->image_width, .height = in->image_height,
                           .channels = in->image_channels, .latent_channels = in->latent_channels,
                           .latent_height = in->latent_height, .latent_width = in->latent_width,
                           .max_items = in->max_items, .max_latents = in->max_latents};
    ck_assert_int_eq(wf_image_sched_add_model(f->s, wf_dit_exec_executor(f->x), &g, &f->model), WF_OK);
    ck_assert_int_eq(wf_image_sched_start(f->s), WF_OK);
    ck_assert_int_eq(wf_handoff_init(&f->events, 0, NULL, NULL), WF_OK);
    f->image_bytes = (size_t)g.width * (size_t)g.height * (size_t)g.channels;
}

static void close_fixture(fixture *f) {
    wf_image_sched_drain(f->s, 1000);
    wf_image_sched_free(f->s);
    wf_dit_exec_free(f->x);
    wf_handoff_free(&f->events);
}

typedef struct outcome {
    wf_status status;
    int progress, images;
    int previews, preview_step[32], preview_index[32];
    uint8_t last_preview[64];
    uint8_t pixels[10 * 64];
    bool finished;
} outcome;

/* Consumes events until every request in reqs[0..n) finished; copies pixels; releases. */
static void collect(fixture *f, wf_image_request **reqs, outcome *out, int n,
                    int cancel_after_progress) {
    int left = n;
    while (left > 0) {
        ck_assert(wf_handoff_wait(&f->events, 30000));
        for (wf_handoff_item *it = wf_handoff_take_all(&f->events), *next; it; it = next) {
            next = it->next;
            wf_image_event *ev = (wf_image_event *)it;
            outcome *o = ev->user;
            int i = (int)(o - out);
            if (ev->kind == WF_IMAGE_EVENT_PROGRESS) {
                o->progress++;
                if (cancel_after_progress > 0 && o->progress == cancel_after_progress)
                    wf_image_sched_cancel(f->s, reqs[i]);
            } else if (ev->kind == WF_IMAGE_EVENT_PREVIEW) {
                ck_assert_int_lt(o->previews, 32);
                ck_assert_int_eq(ev->width * ev->height * ev->channels, (int)f->image_bytes);
                o->preview_step[o->previews] = ev->step;
                o->preview_index[o->previews++] = ev->index;
                memcpy(o->last_preview, ev->pixels, f->image_bytes);
            } else if (ev->kind == WF_IMAGE_EVENT_IMAGE) {
                memcpy(o->pixels + (size_t)ev->index * f->image_bytes, ev->pixels, f->image_bytes);
                o->images++;
            } else {
                ck_assert(!o->finished);
                o->finished = true;
                o->status = ev->status;
                wf_image_sched_release(f->s, reqs[i]);
                left--;
            }
            wf_image_event_free(ev);
        }
    }
}

static wf_image_spec spec_of(int model, int k) {
    wf_image_spec sp = {.model = model, .n = 1 + k % 2, .class_label = k % 10, .negative_label = -1,
                        .guidance_scale = (float[]){2.0f, 1.0f, 3.0f}[k % 3],
                        .sampler = k % 4 == 3 ? 0 /* DDPM */ : -1,
                        .num_steps = (int[]){6, 10, 3, 8}[k % 4], .seed = 500 + (uint64_t)k,
                        .progress = true};
    snprintf(sp.id, sizeof sp.id, "req-%d", k);
    return sp;
}

#define N_REQ 6

static void run_set(int chunk, bool batching, bool together, outcome *out) {
    fixture f;
    open_fixture(&f, chunk, batching, 64);
    wf_image_request *reqs[N_REQ];
    memset(out, 0, sizeof(outcome) * N_REQ);
    char why[160];
    for (int k = 0; k < N_REQ; k++) {
        wf_image_spec sp = spec_of(f.model, k);
        ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[k], &reqs[k], why, sizeof why, NULL), WF_OK);
        if (!together) collect(&f, &reqs[k], &out[k], 1, 0);
    }
    if (together) collect(&f, reqs, out, N_REQ, 0);
    wf_image_sched_stats st;
    wf_image_sched_get_stats(f.s, &st);
    ck_assert_uint_eq(st.finished, N_REQ);
    ck_assert_uint_eq(st.failed, 0);
    close_fixture(&f);
    for (int k = 0; k < N_REQ; k++) {
        wf_image_spec sp = spec_of(0, k);
        ck_assert_int_eq(out[k].status, WF_OK);
        ck_assert_int_eq(out[k].images, sp.n);
    }
}

START_TEST(batching_invariance) {
    static outcome alone[N_REQ], together[N_REQ], chunked[N_REQ], solo[N_REQ];
    run_set(1, true, false, alone);
    run_set(1, true, true, together);
    run_set(3, true, true, chunked);
    run_set(1, false, true, solo);
    for (int k = 0; k < N_REQ; k++) {
        wf_image_spec sp = spec_of(0, k);
        size_t bytes = (size_t)sp.n * 64;
        ck_assert_msg(memcmp(alone[k].pixels, together[k].pixels, bytes) == 0, "request %d batched", k);
        ck_assert_msg(memcmp(alone[k].pixels, chunked[k].pixels, bytes) == 0, "request %d chunk 3", k);
        ck_assert_msg(memcmp(alone[k].pixels, solo[k].pixels, bytes) == 0, "request %d batching off", k);
        /* chunk 1: one progress event per step per image */
        ck_assert_int_eq(together[k].progress, sp.n * sp.num_steps);
    }
    /* different seeds of one class give different images */
    ck_assert(memcmp(alone[0].pixels, alone[2].pixels, 64) != 0);
}
END_TEST

START_TEST(cancel_at_step_boundary) {
    fixture f;
    open_fixture(&f, 1, true, 64);
    wf_image_spec sp = spec_of(f.model, 0);
    sp.num_steps = 400;
    sp.n = 3;
    outcome out[1] = {0};
    wf_image_request *req;
    char why[160];
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[0], &req, why, sizeof why, NULL), WF_OK);
    collect(&f, &req, out, 1, 5);
    ck_assert_int_eq(out[0].status, WF_ECANCELLED);
    ck_assert_int_eq(out[0].images, 0);
    ck_assert_int_lt(out[0].progress, sp.n * sp.num_steps);
    wf_image_sched_stats st;
    wf_image_sched_get_stats(f.s, &st);
    ck_assert_uint_eq(st.cancelled, 1);
    /* its latents were freed: a request needing every slot still runs */
    sp = spec_of(f.model, 1);
    sp.n = 8;
    sp.num_steps = 2;
    memset(out, 0, sizeof out);
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[0], &req, why, sizeof why, NULL), WF_OK);
    collect(&f, &req, out, 1, 0);
    ck_assert_int_eq(out[0].status, WF_OK);
    ck_assert_int_eq(out[0].images, 8);
    close_fixture(&f);
}
END_TEST

/* Previews every 2 steps of 7: chunk 1 shows steps 2, 4, 6 of each image; chunk 3 shows the
 * chunk ends that passed a multiple (3 and 6); never the last step; the final images are those
 * of a request without previews. Per-model stats match the scheduler's (one model). */
static void run_previews(int chunk, int every, outcome *out) {
    fixture f;
    open_fixture(&f, chunk, true, 64);
    memset(out, 0, sizeof *out);
    wf_image_spec sp = spec_of(f.model, 0);
    sp.n = 2;
    sp.num_steps = 7;
    sp.preview_every = every;
    wf_image_request *req;
    char why[160];
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, out, &req, why, sizeof why, NULL), WF_OK);
    collect(&f, &req, out, 1, 0);
    ck_assert_int_eq(out->status, WF_OK);
    wf_image_sched_stats all, one;
    wf_image_sched_get_stats(f.s, &all);
    ck_assert(wf_image_sched_get_model_stats(f.s, f.model, &one));
    ck_assert(!wf_image_sched_get_model_stats(f.s, f.model + 1, &one));
    ck_assert(!wf_image_sched_get_model_stats(f.s, -1, &one));
    ck_assert(wf_image_sched_get_model_stats(f.s, f.model, &one));
    ck_assert_uint_eq(one.finished, all.finished);
    ck_assert_uint_eq(one.images, 2); /* previews are not images */
    ck_assert_uint_eq(one.steps, all.steps);
    ck_assert_uint_eq(one.batches, all.batches);
    close_fixture(&f);
}

START_TEST(previews_every_k_steps) {
    static outcome plain, c1, c3;
    run_previews(1, 0, &plain);
    ck_assert_int_eq(plain.previews, 0);
    run_previews(1, 2, &c1);
    run_previews(3, 2, &c3);
    ck_assert_int_eq(c1.previews, 6);
    ck_assert_int_eq(c3.previews, 4);
    int want1[] = {2, 4, 6}, want3[] = {3, 6};
    for (int img = 0; img < 2; img++) {
        int k1 = 0, k3 = 0;
        for (int i = 0; i < c1.previews; i++)
            if (c1.preview_index[i] == img) ck_assert_int_eq(c1.preview_step[i], want1[k1++]);
        for (int i = 0; i < c3.previews; i++)
            if (c3.preview_index[i] == img) ck_assert_int_eq(c3.preview_step[i], want3[k3++]);
        ck_assert_int_eq(k1, 3);
        ck_assert_int_eq(k3, 2);
    }
    ck_assert_int_eq(memcmp(plain.pixels, c1.pixels, 2 * 64), 0);
    ck_assert_int_eq(memcmp(plain.pixels, c3.pixels, 2 * 64), 0);
    ck_assert_int_eq(c1.images, 2);
}
END_TEST

/* Which of A (first, no deadline, long) and B (second, a deadline, short) ends first: with
 * both filling a batch (4 images each, max_items 4), EDF runs B ahead of A at the next step
 * boundary, FCFS keeps A's slots until it ends. */
static int first_finished(bool fcfs) {
    fixture_fcfs = fcfs;
    fixture f;
    open_fixture(&f, 1, true, 64);
    fixture_fcfs = false;
    wf_image_spec a = spec_of(f.model, 0), b = spec_of(f.model, 1);
    a.n = b.n = 4;
    a.num_steps = 60;
    b.num_steps = 4;
    a.progress = b.progress = false;
    b.deadline_ns = wf_clock_now_ns() + 60000000000ull;
    outcome out[2];
    memset(out, 0, sizeof out);
    wf_image_request *reqs[2];
    char why[160];
    ck_assert_int_eq(wf_image_sched_submit(f.s, &a, &f.events, &out[0], &reqs[0], why, sizeof why, NULL), WF_OK);
    ck_assert_int_eq(wf_image_sched_submit(f.s, &b, &f.events, &out[1], &reqs[1], why, sizeof why, NULL), WF_OK);
    int first = -1;
    for (int left = 2; left > 0;) {
        ck_assert(wf_handoff_wait(&f.events, 30000));
        for (wf_handoff_item *it = wf_handoff_take_all(&f.events), *next; it; it = next) {
            next = it->next;
            wf_image_event *ev = (wf_image_event *)it;
            if (ev->kind == WF_IMAGE_EVENT_FINISHED) {
                int i = (int)((outcome *)ev->user - out);
                ck_assert_int_eq(ev->status, WF_OK);
                ck_assert(!ev->alone); /* they shared the model's batches */
                ck_assert_int_eq(ev->group_size, 1); /* an in-process executor's */
                if (first < 0) first = i;
                wf_image_sched_release(f.s, reqs[i]);
                left--;
            }
            wf_image_event_free(ev);
        }
    }
    close_fixture(&f);
    return first;
}

START_TEST(fcfs_order_ignores_deadlines) {
    ck_assert_int_eq(first_finished(false), 1);
    ck_assert_int_eq(first_finished(true), 0);
}
END_TEST

START_TEST(admission_errors) {
    fixture f;
    open_fixture(&f, 1, true, 2);
    wf_image_request *r[3];
    char why[160];
    outcome out[3] = {0};
    wf_image_spec sp = spec_of(f.model, 0);
    sp.n = 9; /* above max_latents (8) */
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[0], &r[0], why, sizeof why, NULL), WF_EINVAL);
    ck_assert_ptr_null(r[0]);
    sp.n = 1;
    sp.num_steps = 0;
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[0], &r[0], why, sizeof why, NULL), WF_EINVAL);
    sp.num_steps = 300;
    sp.model = 5;
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[0], &r[0], why, sizeof why, NULL), WF_EINVAL);
    sp.model = f.model;
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[0], &r[0], why, sizeof why, NULL), WF_OK);
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[1], &r[1], why, sizeof why, NULL), WF_OK);
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[2], &r[2], why, sizeof why, NULL), WF_EFULL);
    ck_assert(strstr(why, "queued") != NULL);
    wf_image_sched_cancel(f.s, r[0]);
    wf_image_sched_cancel(f.s, r[1]);
    collect(&f, r, out, 2, 0);
    ck_assert_int_eq(out[0].status, WF_ECANCELLED);
    /* drained: no more admissions */
    wf_image_sched_drain(f.s, 100);
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[2], &r[2], why, sizeof why, NULL), WF_EBUSY);
    wf_image_sched_stats st;
    wf_image_sched_get_stats(f.s, &st);
    ck_assert_uint_eq(st.rejected, 2);
    close_fixture(&f);
}
END_TEST

START_TEST(deadline_admission) {
    fixture f;
    open_fixture(&f, 1, true, 64);
    double a, c, d, corr;
    ck_assert(wf_image_sched_cost(f.s, f.model, &a, &c, &d, &corr));
    ck_assert(a >= 0 && c >= 0 && a + c > 0 && d > 0 && corr == 1.0);
    wf_image_spec sp = spec_of(f.model, 0);
    sp.num_steps = 500;
    sp.deadline_ns = wf_clock_now_ns() + 10000; /* 10 us for 500 steps: out of reach */
    wf_image_request *req;
    char why[160];
    double retry = -1;
    outcome out[1] = {0};
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[0], &req, why, sizeof why, &retry), WF_EOVERLOAD);
    ck_assert(strstr(why, "deadline") != NULL);
    ck_assert(retry >= 0);
    sp.num_steps = 4;
    sp.deadline_ns = wf_clock_now_ns() + 600ull * 1000000000ull; /* 10 minutes: fine */
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, &out[0], &req, why, sizeof why, &retry), WF_OK);
    collect(&f, &req, out, 1, 0);
    ck_assert_int_eq(out[0].status, WF_OK);
    wf_image_sched_stats st;
    wf_image_sched_get_stats(f.s, &st);
    ck_assert_uint_eq(st.overloaded, 1);
    close_fixture(&f);
}
END_TEST


/* ---- admission recovery, on a fake executor whose speed the test sets ------------------ */

/* Runs every batch synchronously in dispatch, sleeping forward_us per forward (per step of a
 * batch's longest DENOISE chunk, whatever its images) and decode_us per DECODE_IMAGE: a calibration on a busy machine is a slow
 * forward_us at start that drops afterwards. */
typedef struct fake_exec {
    _Atomic int forward_us, decode_us;
    _Atomic int forwards;
    _Atomic int batches, first_encodes; /* batches run; ENCODE tasks in the first (reset by tests) */
    _Atomic int mixed_sizes;            /* batches whose DENOISE tasks had different latent sizes */
    _Atomic int wide_encodes;           /* ENCODE tasks of a 4 x 8 latent */
} fake_exec;

static bool fake_supports(void *ctx, wf_task_kind kind) {
    (void)ctx;
    return kind == WF_TASK_ENCODE || kind == WF_TASK_DENOISE || kind == WF_TASK_DECODE_IMAGE ||
           kind == WF_TASK_FINISH;
}

static void sleep_us(int us) {
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static wf_status fake_dispatch(void *ctx, wf_task_batch *b, wf_executor_done_fn done, void *user) {
    fake_exec *x = ctx;
    int steps = 0, decodes = 0, encodes = 0, lat_h = 0, lat_w = 0;
    for (int i = 0; i < b->n_tasks; i++) encodes += b->tasks[i].kind == WF_TASK_ENCODE;
    for (int i = 0; i < b->n_tasks; i++) {
        const wf_task *t = &b->tasks[i];
        if (t->kind == WF_TASK_ENCODE && t->dit.latent.latent.height == 4 && t->dit.latent.latent.width == 8)
            x->wide_encodes++;
        if (t->kind != WF_TASK_DENOISE) continue;
        if (lat_h && (t->dit.latent.latent.height != lat_h || t->dit.latent.latent.width != lat_w)) x->mixed_sizes++;
        lat_h = t->dit.latent.latent.height;
        lat_w = t->dit.latent.latent.width;
    }
    /* a forward's time grows with its latent's positions (native: 4 x 4) */
    int points = lat_h * lat_w > 16 ? lat_h * lat_w : 16;
    if (x->batches++ == 0) x->first_encodes = encodes;
    for (int i = 0; i < b->n_tasks; i++) {
        wf_task *t = &b->tasks[i];
        t->status = WF_OK;
        if (t->kind == WF_TASK_ENCODE) {
            t->dit.latent.latent.step = 0;
        } else if (t->kind == WF_TASK_DENOISE) {
            if (t->dit.step_end - t->dit.step_begin > steps) steps = t->dit.step_end - t->dit.step_begin;
            t->dit.latent.latent.step = t->dit.step_end;
        } else if (t->kind == WF_TASK_DECODE_IMAGE) {
            decodes++;
            memset(t->dit.pixels, (int)(t->dit.class_label & 0xff), t->dit.pixels_cap);
        }
    }
    for (int k = 0; k < steps; k++) {
        x->forwards++;
        sleep_us(x->forward_us * points / 16);
    }
    sleep_us(decodes * x->decode_us);
    done(user, b, WF_OK, NULL);
    return WF_OK;
}

static const wf_executor_ops fake_ops = {.name = "fake", .supports = fake_supports,
                                         .dispatch = fake_dispatch};

typedef struct fake_fixture {
    fake_exec x;
    wf_image_sched *s;
    int model;
    wf_handoff events;
} fake_fixture;

static void open_fake_sized(fake_fixture *f, int calib_forward_us, int run_forward_us, int size_multiple,
                            long max_pixels) {
    memset(f, 0, sizeof *f);
    f->x.forward_us = calib_forward_us;
    f->x.decode_us = 100;
    wf_image_sched_options o;
    wf_image_sched_options_init(&o);
    ck_assert_int_eq(wf_image_sched_new(&o, &f->s), WF_OK);
    wf_image_geometry g = {.width = 8, .height = 8, .channels = 1, .latent_channels = 4,
                           .latent_height = 4, .latent_width = 4, .max_items = 4, .max_latents = 8,
                           .size_multiple = size_multiple, .max_pixels = max_pixels};
    wf_executor ex = {.ops = &fake_ops, .ctx = &f->x};
    ck_assert_int_eq(wf_image_sched_add_model(f->s, ex, &g, &f->model), WF_OK);
    ck_assert_int_eq(wf_image_sched_start(f->s), WF_OK);
    f->x.forward_us = run_forward_us; /* the machine got quiet (or warm) after start-up */
    ck_assert_int_eq(wf_handoff_init(&f->events, 0, NULL, NULL), WF_OK);
}

static void open_fake(fake_fixture *f, int calib_forward_us, int run_forward_us) {
    open_fake_sized(f, calib_forward_us, run_forward_us, 0, 0);
}

static void close_fake(fake_fixture *f) {
    wf_image_sched_drain(f->s, 1000);
    wf_image_sched_free(f->s);
    wf_handoff_free(&f->events);
}

/* Waits for req's FINISHED (the only request in flight on f: it ran alone) and releases it. */
static wf_status finish_one(fake_fixture *f, wf_image_request *req, int *images) {
    *images = 0;
    for (;;) {
        ck_assert(wf_handoff_wait(&f->events, 30000));
        for (wf_handoff_item *it = wf_handoff_take_all(&f->events), *next; it; it = next) {
            next = it->next;
            wf_image_event *ev = (wf_image_event *)it;
            ck_assert_ptr_eq(ev->request, req);
            wf_image_event_kind kind = ev->kind;
            wf_status st = ev->status;
            if (kind == WF_IMAGE_EVENT_FINISHED) ck_assert(ev->alone); /* no other request held */
            if (kind == WF_IMAGE_EVENT_IMAGE) (*images)++;
            wf_image_event_free(ev);
            if (kind == WF_IMAGE_EVENT_FINISHED) {
                ck_assert(next == NULL);
                wf_image_sched_release(f->s, req);
                return st;
            }
        }
    }
}

static double predicted_step_ms(fake_fixture *f, int images) {
    double a, c, d, corr;
    ck_assert(wf_image_sched_cost(f->s, f->model, &a, &c, &d, &corr));
    return (a + c * images) * corr;
}

/* The load-test bug: calibrated at 20 ms per step while a step then takes 1 ms, a deadline of
 * 150 ms for 10 steps looked out of reach forever, and no batch ever ran to correct it. Now a
 * refusal that says "even alone" has the idle model re-measured, an idle model admits what does
 * not miss even alone, and every batch corrects the model: admission recovers at once. */
START_TEST(admission_recovers_from_slow_calibration) {
    fake_fixture f;
    open_fake(&f, 20000, 1000);
    ck_assert_msg(predicted_step_ms(&f, 1) > 15, "calibrated at %.2f ms", predicted_step_ms(&f, 1));
    char why[160];
    double retry = -1;
    int admitted = 0, refused = 0;
    for (int k = 0; k < 12; k++) {
        wf_image_spec sp = {.model = f.model, .n = 1, .class_label = k, .negative_label = -1,
                            .sampler = -1, .num_steps = 10, .seed = (uint64_t)k};
        snprintf(sp.id, sizeof sp.id, "recover-%d", k);
        sp.deadline_ns = wf_clock_now_ns() + 150ull * 1000000ull;
        wf_image_request *req;
        wf_status st = wf_image_sched_submit(f.s, &sp, &f.events, NULL, &req, why, sizeof why, &retry);
        if (st == WF_EOVERLOAD && admitted == 0 && refused < 40) {
            /* Only before the re-measurement, and the message names the stale floor. */
            ck_assert_msg(strstr(why, "even alone") != NULL, "%s", why);
            refused++;
            k--;
            sleep_us(50000);
            continue;
        }
        ck_assert_msg(st == WF_OK, "request %d refused on an idle model: %s", k, why);
        admitted++;
        int images;
        ck_assert_int_eq(finish_one(&f, req, &images), WF_OK); /* nothing accepted is lost */
        ck_assert_int_eq(images, 1);
    }
    /* One refusal, then the idle probe (within the thread's 100 ms wake-up) fixed the floor. */
    ck_assert_int_le(refused, 6);
    /* The model learned the fast steps from the batches it ran. */
    double now_ms = predicted_step_ms(&f, 1);
    ck_assert_msg(now_ms < 6, "still predicts %.2f ms per step", now_ms);
    /* Now busy: two requests together fit the deadline by the corrected model and are admitted
     * while another runs. */
    wf_image_request *reqs[3];
    for (int k = 0; k < 3; k++) {
        wf_image_spec sp = {.model = f.model, .n = 1, .class_label = k, .negative_label = -1,
                            .sampler = -1, .num_steps = 10, .seed = 100 + (uint64_t)k,
                            .deadline_ns = wf_clock_now_ns() + 2000ull * 1000000ull};
        ck_assert_msg(wf_image_sched_submit(f.s, &sp, &f.events, NULL, &reqs[k], why, sizeof why,
                                            &retry) == WF_OK, "busy request %d: %s", k, why);
    }
    int finished = 0;
    while (finished < 3) {
        ck_assert(wf_handoff_wait(&f.events, 30000));
        for (wf_handoff_item *it = wf_handoff_take_all(&f.events), *next; it; it = next) {
            next = it->next;
            wf_image_event *ev = (wf_image_event *)it;
            if (ev->kind == WF_IMAGE_EVENT_FINISHED) {
                ck_assert_int_eq(ev->status, WF_OK);
                wf_image_sched_release(f.s, ev->request);
                finished++;
            }
            wf_image_event_free(ev);
        }
    }
    wf_image_sched_stats st;
    wf_image_sched_get_stats(f.s, &st);
    ck_assert_uint_eq(st.finished, (uint64_t)admitted + 3);
    ck_assert_uint_eq(st.overloaded, (uint64_t)refused);
    close_fake(&f);
}
END_TEST

/* Refusals that stay: a request that misses even alone at the fastest step ever measured says
 * so; one that only misses behind the held work gets a Retry-After of that work. */
START_TEST(refusals_say_why_and_when) {
    fake_fixture f;
    open_fake(&f, 2000, 2000);
    char why[160];
    double retry = -1;
    wf_image_request *req;
    wf_image_spec sp = {.model = f.model, .n = 1, .negative_label = -1, .sampler = -1,
                        .num_steps = 500, .seed = 1};
    sp.deadline_ns = wf_clock_now_ns() + 50ull * 1000000ull; /* 500 steps of >= 2 ms in 50 ms */
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, NULL, &req, why, sizeof why, &retry),
                     WF_EOVERLOAD);
    ck_assert_msg(strstr(why, "even alone") != NULL, "%s", why);
    ck_assert(retry >= 0);
    /* Fill the model with 8 images x 200 steps (>= 400 ms in waves of 4), then ask for a
     * short deadline: refused, and told to come back after the held work. */
    wf_image_spec big = {.model = f.model, .n = 8, .negative_label = -1, .sampler = -1,
                         .num_steps = 200, .seed = 2};
    wf_image_request *held;
    ck_assert_int_eq(wf_image_sched_submit(f.s, &big, &f.events, NULL, &held, why, sizeof why, NULL),
                     WF_OK);
    sp.num_steps = 10;
    sp.deadline_ns = wf_clock_now_ns() + 60ull * 1000000ull; /* alone: ~20 ms, fits */
    ck_assert_int_eq(wf_image_sched_submit(f.s, &sp, &f.events, NULL, &req, why, sizeof why, &retry),
                     WF_EOVERLOAD);
    ck_assert_msg(strstr(why, "held") != NULL, "%s", why);
    ck_assert_msg(retry > 0.1, "Retry-After %.3f s for >= 400 ms of held work", retry);
    int images;
    ck_assert_int_eq(finish_one(&f, held, &images), WF_OK);
    ck_assert_int_eq(images, 8);
    wf_image_sched_stats st;
    wf_image_sched_get_stats(f.s, &st);
    ck_assert_uint_eq(st.overloaded, 2);
    close_fake(&f);
}
END_TEST

/* Admission predicts in the plan's order: behind a full batch of work due later (no deadline),
 * a request with a close deadline is admitted, since it overtakes that work at the next step
 * boundary, and it does finish first. */
START_TEST(admission_counts_only_work_due_earlier) {
    fake_fixture f;
    open_fake(&f, 2000, 2000);
    char why[160];
    double retry = -1;
    wf_image_spec big = {.model = f.model, .n = 4, .negative_label = -1, .sampler = -1,
                         .num_steps = 200, .seed = 2}; /* fills max_items, due whenever */
    wf_image_request *held, *req;
    ck_assert_int_eq(wf_image_sched_submit(f.s, &big, &f.events, NULL, &held, why, sizeof why, NULL),
                     WF_OK);
    wf_image_spec sp = {.model = f.model, .n = 1, .negative_label = -1, .sampler = -1,
                        .num_steps = 10, .seed = 1};
    sp.deadline_ns = wf_clock_now_ns() + 60ull * 1000000ull; /* ~20 ms of steps; the big: >= 400 ms */
    ck_assert_msg(wf_image_sched_submit(f.s, &sp, &f.events, NULL, &req, why, sizeof why, &retry) ==
                  WF_OK, "%s", why);
    wf_image_request *order[2];
    int n_done = 0;
    while (n_done < 2) {
        ck_assert(wf_handoff_wait(&f.events, 30000));
        for (wf_handoff_item *it = wf_handoff_take_all(&f.events), *next; it; it = next) {
            next = it->next;
            wf_image_event *ev = (wf_image_event *)it;
            if (ev->kind == WF_IMAGE_EVENT_FINISHED) {
                ck_assert_int_eq(ev->status, WF_OK);
                order[n_done++] = ev->request;
                wf_image_sched_release(f.s, ev->request);
            }
            wf_image_event_free(ev);
        }
    }
    ck_assert_ptr_eq(order[0], req); /* overtook the held work */
    ck_assert_ptr_eq(order[1], held);
    close_fake(&f);
}
END_TEST

/* ---- turns on shared cores (sched/gate.h) ---------------------------------------------- */

static void count_held(const wf_image_snapshot *snap, void *user) {
    (void)snap;
    (*(int *)user)++;
}

static int held_requests(wf_image_sched *s) {
    int n = 0;
    wf_image_sched_foreach(s, count_held, &n);
    return n;
}

/* While text work holds the cores, request A is ready and then B arrives. With late binding
 * (wf_image_sched_set_turns) the batch is composed when the turn comes, so B joins A's first
 * batch; with batches composed at once (the gated executor alone) A's batch was fixed before B
 * came, and B waits for the next one. Either way both finish and the gate counts the turns. */
START_TEST(late_binding_joins_work_that_arrives_while_waiting) {
    for (int late = 0; late < 2; late++) {
        fake_exec x = {.forward_us = 200, .decode_us = 100};
        wf_gate *g = wf_gate_new(2);
        wf_gated_executor *gx;
        ck_assert_int_eq(wf_gated_executor_new((wf_executor){.ops = &fake_ops, .ctx = &x}, g, 1, &gx), WF_OK);
        wf_image_sched_options o;
        wf_image_sched_options_init(&o);
        wf_image_sched *s;
        ck_assert_int_eq(wf_image_sched_new(&o, &s), WF_OK);
        wf_image_geometry geo = {.width = 8, .height = 8, .channels = 1, .latent_channels = 4,
                                 .latent_height = 4, .latent_width = 4, .max_items = 4, .max_latents = 8};
        int m;
        ck_assert_int_eq(wf_image_sched_add_model(s, wf_gated_executor_get(gx), &geo, &m), WF_OK);
        if (late) ck_assert_int_eq(wf_image_sched_set_turns(s, m, gx), WF_OK);
        ck_assert_int_eq(wf_image_sched_set_turns(s, m + 1, gx), WF_EINVAL);
        ck_assert_int_eq(wf_image_sched_start(s), WF_OK);
        ck_assert_int_eq(wf_image_sched_set_turns(s, m, gx), WF_EINVAL); /* started */
        wf_handoff events;
        ck_assert_int_eq(wf_handoff_init(&events, 0, NULL, NULL), WF_OK);
        x.batches = 0;
        wf_gate_acquire(g, 0); /* a text batch runs */
        wf_image_request *ra, *rb;
        char why[160];
        wf_image_spec a = {.model = m, .n = 1, .class_label = 1, .negative_label = -1, .num_steps = 3, .seed = 1};
        wf_image_spec b = a;
        b.class_label = 2;
        snprintf(a.id, sizeof a.id, "A");
        snprintf(b.id, sizeof b.id, "B");
        ck_assert_int_eq(wf_image_sched_submit(s, &a, &events, NULL, &ra, why, sizeof why, NULL), WF_OK);
        while (wf_gate_waiting(g) != 1) sleep_us(1000); /* A's claim (or batch) waits for the cores */
        ck_assert_int_eq(wf_image_sched_submit(s, &b, &events, NULL, &rb, why, sizeof why, NULL), WF_OK);
        while (held_requests(s) != 2) sleep_us(1000); /* B reached the scheduler's lists */
        ck_assert_int_eq(x.batches, 0);
        wf_gate_release(g, 0);
        int finished = 0;
        while (finished < 2) {
            ck_assert(wf_handoff_wait(&events, 30000));
            for (wf_handoff_item *it = wf_handoff_take_all(&events), *next; it; it = next) {
                next = it->next;
                wf_image_event *ev = (wf_image_event *)it;
                if (ev->kind == WF_IMAGE_EVENT_FINISHED) {
                    ck_assert_int_eq(ev->status, WF_OK);
                    wf_image_sched_release(s, ev->request);
                    finished++;
                }
                wf_image_event_free(ev);
            }
        }
        ck_assert_int_eq(x.first_encodes, late ? 2 : 1);
        ck_assert_uint_eq(wf_gate_turns(g, 0), 1);
        ck_assert_uint_ge(wf_gate_turns(g, 1), 3); /* 3 steps, both at each */
        wf_image_sched_drain(s, 1000);
        wf_image_sched_free(s);
        wf_handoff_free(&events);
        wf_gated_executor_free(gx);
        wf_gate_free(g);
    }
}
END_TEST

/* Image sizes other than the native 8x8 (latent 4x4; here sides multiples of 4, at most 256
 * pixels): refused with a reason when they cannot be made; a native and a 16x8 request at once
 * run in batches of one size each (the 16x8 one's ENCODE makes a 4x8 latent), their IMAGE
 * events carry their own sizes, and the cost model has an entry per size, scaled by the latent
 * positions and measured by the size's own batches. */
START_TEST(other_sizes_batch_apart) {
    fake_fixture f;
    open_fake_sized(&f, 300, 300, 4, 256);
    char why[200];
    wf_image_request *req;
    wf_image_spec bad = {.model = f.model, .n = 1, .num_steps = 4, .width = 10, .height = 8};
    ck_assert_int_eq(wf_image_sched_submit(f.s, &bad, &f.events, NULL, &req, why, sizeof why, NULL), WF_EINVAL);
    ck_assert_msg(strstr(why, "multiples of 4") && strstr(why, "256"), "%s", why);
    bad.width = 32;
    bad.height = 16; /* 512 pixels */
    ck_assert_int_eq(wf_image_sched_submit(f.s, &bad, &f.events, NULL, &req, why, sizeof why, NULL), WF_EINVAL);
    wf_image_spec a = {.model = f.model, .n = 2, .num_steps = 6, .class_label = 1};
    wf_image_spec b = {.model = f.model, .n = 2, .num_steps = 6, .class_label = 2, .width = 16, .height = 8};
    wf_image_request *ra, *rb;
    ck_assert_int_eq(wf_image_sched_submit(f.s, &a, &f.events, NULL, &ra, why, sizeof why, NULL), WF_OK);
    ck_assert_int_eq(wf_image_sched_submit(f.s, &b, &f.events, NULL, &rb, why, sizeof why, NULL), WF_OK);
    int finished = 0, images_a = 0, images_b = 0;
    while (finished < 2) {
        ck_assert(wf_handoff_wait(&f.events, 30000));
        for (wf_handoff_item *it = wf_handoff_take_all(&f.events), *next; it; it = next) {
            next = it->next;
            wf_image_event *ev = (wf_image_event *)it;
            if (ev->kind == WF_IMAGE_EVENT_IMAGE) {
                bool is_a = ev->request == ra;
                ck_assert_int_eq(ev->width, is_a ? 8 : 16);
                ck_assert_int_eq(ev->height, 8);
                /* the fake writes the label into every byte: the whole image is there */
                for (int p = 0; p < ev->width * ev->height; p++) ck_assert_int_eq(ev->pixels[p], is_a ? 1 : 2);
                if (is_a) images_a++;
                else images_b++;
            } else if (ev->kind == WF_IMAGE_EVENT_FINISHED) {
                ck_assert_int_eq(ev->status, WF_OK);
                finished++;
                wf_image_sched_release(f.s, ev->request);
            }
            wf_image_event_free(ev);
        }
    }
    ck_assert_int_eq(images_a, 2);
    ck_assert_int_eq(images_b, 2);
    ck_assert_int_eq(f.x.mixed_sizes, 0);
    ck_assert_int_eq(f.x.wide_encodes, 2);
    wf_image_size_cost sz[WF_IMAGE_MAX_SIZES];
    int n = wf_image_sched_size_costs(f.s, f.model, sz, WF_IMAGE_MAX_SIZES);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(sz[0].width, 8);
    ck_assert(sz[0].measured);
    ck_assert_double_eq(sz[0].scale, 1.0);
    ck_assert_int_eq(sz[1].width, 16);
    ck_assert_int_eq(sz[1].height, 8);
    ck_assert_double_eq(sz[1].scale, 2.0);
    ck_assert(sz[1].measured && sz[1].correction > 0);
    ck_assert_int_eq(sz[1].held_images, 0);
    close_fake(&f);
}
END_TEST

/* Admission predicts a request with its size's cost: with 5 ms native steps (a sleep: never
 * faster), 10 steps of a 16x16 image (4 x the latent positions, predicted 4 x the step before
 * any ran) cannot meet 150 ms even alone, while a native one can. */
START_TEST(admission_per_size) {
    fake_fixture f;
    open_fake_sized(&f, 5000, 5000, 4, 256);
    char why[300];
    wf_image_request *req;
    wf_image_spec wide = {.model = f.model, .n = 1, .num_steps = 10, .width = 16, .height = 16,
                          .deadline_ns = wf_clock_now_ns() + 150ull * 1000000ull};
    ck_assert_int_eq(wf_image_sched_submit(f.s, &wide, &f.events, NULL, &req, why, sizeof why, NULL), WF_EOVERLOAD);
    ck_assert_msg(strstr(why, "even alone"), "%s", why);
    wf_image_spec native = {.model = f.model, .n = 1, .num_steps = 10,
                            .deadline_ns = wf_clock_now_ns() + 150ull * 1000000ull};
    ck_assert_msg(wf_image_sched_submit(f.s, &native, &f.events, NULL, &req, why, sizeof why, NULL) == WF_OK, "%s",
                  why);
    int images;
    finish_one(&f, req, &images);
    ck_assert_int_eq(images, 1);
    /* without a deadline the 16x16 one runs, and its size's entry is measured */
    wide.deadline_ns = 0;
    ck_assert_int_eq(wf_image_sched_submit(f.s, &wide, &f.events, NULL, &req, why, sizeof why, NULL), WF_OK);
    ck_assert_int_eq(finish_one(&f, req, &images), WF_OK);
    ck_assert_int_eq(images, 1);
    wf_image_size_cost sz[WF_IMAGE_MAX_SIZES];
    ck_assert_int_eq(wf_image_sched_size_costs(f.s, f.model, sz, WF_IMAGE_MAX_SIZES), 2);
    ck_assert_int_eq(sz[1].width, 16);
    ck_assert_double_eq(sz[1].scale, 4.0);
    ck_assert(sz[1].measured);
    close_fake(&f);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("sched/images");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, batching_invariance);
    tcase_add_test(tc, cancel_at_step_boundary);
    tcase_add_test(tc, previews_every_k_steps);
    tcase_add_test(tc, fcfs_order_ignores_deadlines);
    tcase_add_test(tc, admission_errors);
    tcase_add_test(tc, deadline_admission);
    tcase_add_test(tc, admission_recovers_from_slow_calibration);
    tcase_add_test(tc, refusals_say_why_and_when);
    tcase_add_test(tc, admission_counts_only_work_due_earlier);
    tcase_add_test(tc, late_binding_joins_work_that_arrives_while_waiting);
    tcase_add_test(tc, other_sizes_batch_apart);
    tcase_add_test(tc, admission_per_size);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
