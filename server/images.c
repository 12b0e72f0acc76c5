/* POST /v1/images/generations: OpenAI's image API (plus weft's class-conditional and SLO
 * extensions) on the image scheduler (sched/images.h); files in the request's output_format
 * (PNG, JPEG, WebP) through server/imgenc.h, base64 through server/png.h. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/dit/sampler.h"
#include "proto/base/clock.h"
#include "proto/base/log.h"
#include "sched/gate.h"
#include "server/imgenc.h"
#include "server/png.h"
#include "server/server_impl.h"

#define MAX_N 10
#define MAX_STEPS 1000
#define DEFAULT_STEPS 20

struct wf_img_gen {
    wf_server *s;
    wf_img_gen *prev, *next;
    wf_http_request *http;     /* NULL once answered or aborted */
    wf_image_request *req;
    const wf_server_image_model *model;
    int n, num_steps;
    int width, height;         /* the size asked for (the model's when not) */
    int64_t created;
    uint64_t arrived_ns;       /* when its handler started: its answer's wall time from there */
    bool guided;               /* guidance_scale > 1 (two forwards a step) */
    bool streaming;
    uint64_t deadline_ns;
    int priority;              /* the SLO class its metrics count in */
    int previews_sent[MAX_N]; /* per image: OpenAI's partial_image_index */
    wf_image_format format;   /* output_format */
    int quality;              /* output_compression (JPEG, WebP) */
    char id[WF_REQUEST_ID_MAX];
};

const wf_server_image_model *wf__images_find(wf_server *s, const char *name) {
    for (int i = 0; name && i < s->n_image_models; i++)
        if (strcmp(s->image_models[i].id, name) == 0) return &s->image_models[i];
    return NULL;
}

static void img_free(wf_img_gen *g) {
    wf_server *s = g->s;
    if (g->prev) g->prev->next = g->next;
    else if (s->img_gens == g) s->img_gens = g->next;
    if (g->next) g->next->prev = g->prev;
    s->n_gens--;
    free(g);
}

static void on_abort(wf_http_request *req, void *user) {
    (void)req;
    wf_img_gen *g = user;
    g->http = NULL;
    /* The scheduler stops it at its next step boundary and frees its latents; FINISHED
     * follows and frees g. */
    wf_image_sched_cancel(g->s->images, g->req);
}

/* What sizes model m can make, for the message of a refused 'size': the rule and examples
 * (the native size, twice it in one dimension and in both, where they fit). */
static void size_help(const wf_server_image_model *m, char *out, size_t cap) {
    const wf_image_geometry *g = &m->geometry;
    if (g->size_multiple < 1) {
        snprintf(out, cap, "use \"%dx%d\" (or \"auto\"): the only size it makes", g->width, g->height);
        return;
    }
    int n = snprintf(out, cap, "use \"WxH\" with W and H multiples of %d and W x H at most %ld pixels, e.g. "
                     "\"%dx%d\" (native)", g->size_multiple, g->max_pixels, g->width, g->height);
    const int ex[3][2] = {{2 * g->width, g->height}, {g->width, 2 * g->height}, {2 * g->width, 2 * g->height}};
    for (int i = 0; i < 3 && n > 0 && (size_t)n < cap; i++)
        if ((long)ex[i][0] * ex[i][1] <= g->max_pixels)
            n += snprintf(out + n, cap - (size_t)n, ", \"%dx%d\"", ex[i][0], ex[i][1]);
}

/* A label from a JSON int or class-name string; -1 (with *bad set) when unknown. */
static int label_of(const wf_server_image_model *m, json_t *v, bool *bad) {
    *bad = false;
    if (json_is_integer(v)) {
        json_int_t k = json_integer_value(v);
        if (k >= 0 && k < m->num_classes) return (int)k;
    } else if (json_is_string(v)) {
        int k = m->class_index(m->class_ctx, json_string_value(v));
        if (k >= 0) return k;
    }
    *bad = true;
    return -1;
}

static void class_list(const wf_server_image_model *m, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < m->n_class_names && n + 1 < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? ", " : "", m->class_names[i]);
    if (m->n_class_names == 0) snprintf(out, cap, "0..%d", m->num_classes - 1);
}

#define BAD(param, ...)                                                                         \
    do {                                                                                        \
        wf__server_error(s, req, 400, "invalid_request_error", param, NULL, 0, __VA_ARGS__);     \
        goto out;                                                                               \
    } while (0)

static const char *const known_keys[] = {
    "model", "prompt", "n", "size", "response_format", "output_format", "user", "class_label",
    "num_inference_steps", "guidance_scale", "seed", "sampler", "negative_class_label", "slo",
    "priority", "stream", "quality", "style", "preview_every", "partial_images",
    "output_compression", NULL};

void wf__images_handle(wf_server *s, wf_http_request *req) {
    uint64_t arrived_ns = wf_clock_now_ns();
    if (!s->ready) {
        wf__server_error(s, req, 503, "server_error", NULL, NULL, 5, "the model is still loading");
        return;
    }
    size_t len;
    const char *body = wf_http_request_body(req, &len);
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    wf_img_gen *g = NULL;
    if (!root || !json_is_object(root)) {
        if (root) BAD(NULL, "the request body must be a JSON object");
        BAD(NULL, "the request body is not valid JSON: %s (line %d, column %d)",
            wf_openai_json_error_text(jerr.text), jerr.line, jerr.column);
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        bool known = false;
        for (int i = 0; known_keys[i]; i++) known |= strcmp(known_keys[i], key) == 0;
        if (!known) BAD(key, "unknown parameter '%.100s' for /v1/images/generations", key);
    }
    /* model */
    const wf_server_image_model *m = NULL;
    v = json_object_get(root, "model");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) BAD("model", "'model' must be a string");
        const char *name = json_string_value(v);
        m = wf__images_find(s, name);
        if (!m && s->model.id && strcmp(name, s->model.id) == 0)
            BAD("model", "'%.200s' is a text model; use /v1/chat/completions or /v1/completions", name);
        if (!m) {
            wf__server_error(s, req, 404, "invalid_request_error", "model", "model_not_found", 0,
                             "The model '%.200s' does not exist", name);
            goto out;
        }
    } else if (s->n_image_models > 0) {
        m = &s->image_models[0];
    }
    if (!m) {
        wf__server_error(s, req, 404, "invalid_request_error", "model", "model_not_found", 0,
                         "this server serves no image model");
        goto out;
    }
    char classes[600];
    class_list(m, classes, sizeof classes);
    wf_image_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.model = m->sched_model;
    spec.negative_label = -1;
    spec.sampler = -1;
    /* n */
    v = json_object_get(root, "n");
    spec.n = 1;
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > MAX_N)
            BAD("n", "'n' must be an integer from 1 to %d", MAX_N);
        spec.n = (int)json_integer_value(v);
    }
    /* size */
    v = json_object_get(root, "size");
    spec.width = m->geometry.width;
    spec.height = m->geometry.height;
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) BAD("size", "'size' must be a string such as \"%dx%d\"", m->geometry.width, m->geometry.height);
        const char *sz = json_string_value(v);
        if (!wf_image_size_parse(&m->geometry, sz, &spec.width, &spec.height)) {
            char help[300];
            size_help(m, help, sizeof help);
            BAD("size", "'size' %.40s cannot be made by %.200s: %s", sz, m->id, help);
        }
    }
    /* response_format, output_format */
    v = json_object_get(root, "response_format");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) BAD("response_format", "'response_format' must be a string");
        if (strcmp(json_string_value(v), "url") == 0)
            BAD("response_format", "'response_format' \"url\" is not served by weft (it keeps no "
                                   "files): use \"b64_json\"");
        if (strcmp(json_string_value(v), "b64_json") != 0)
            BAD("response_format", "'response_format' must be \"b64_json\"");
    }
    wf_image_format format = WF_IMAGE_FORMAT_PNG;
    v = json_object_get(root, "output_format");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v) || !wf_image_format_parse(json_string_value(v), &format))
            BAD("output_format", "'output_format' must be \"png\", \"jpeg\" or \"webp\"");
        char why[160];
        if (!wf_image_format_supports(format, m->geometry.channels, why, sizeof why))
            BAD("output_format", "'output_format' %s for %.200s: %s", wf_image_format_name(format), m->id, why);
    }
    int quality = 100; /* OpenAI's default output_compression */
    v = json_object_get(root, "output_compression");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100)
            BAD("output_compression", "'output_compression' must be an integer from 0 to 100");
        if (format == WF_IMAGE_FORMAT_PNG)
            BAD("output_compression", "'output_compression' applies to \"jpeg\" and \"webp\" only "
                                      "(png is lossless)");
        quality = (int)json_integer_value(v);
    }
    v = json_object_get(root, "user");
    if (v && !json_is_null(v) && !json_is_string(v)) BAD("user", "'user' must be a string");
    v = json_object_get(root, "quality");
    if (v && !json_is_null(v) &&
        (!json_is_string(v) || (strcmp(json_string_value(v), "auto") && strcmp(json_string_value(v), "standard"))))
        BAD("quality", "'quality' must be \"auto\" or \"standard\"");
    v = json_object_get(root, "style");
    if (v && !json_is_null(v)) BAD("style", "'style' is not supported by class-conditional models");
    /* class: class_label, else a prompt that is a class name */
    json_t *cl = json_object_get(root, "class_label");
    json_t *prompt = json_object_get(root, "prompt");
    if (prompt && !json_is_null(prompt) && !json_is_string(prompt)) BAD("prompt", "'prompt' must be a string");
    bool bad;
    if (cl && !json_is_null(cl)) {
        spec.class_label = label_of(m, cl, &bad);
        if (bad) BAD("class_label", "'class_label' is not a class of %.200s (classes: %s)", m->id, classes);
    } else if (prompt && !json_is_null(prompt)) {
        spec.class_label = label_of(m, prompt, &bad);
        if (bad)
            BAD("prompt", "%.200s is class-conditional: 'prompt' must be a class name (%s) or "
                          "give 'class_label'", m->id, classes);
    } else {
        BAD("prompt", "'prompt' is required (a class name: %s), or give 'class_label'", classes);
    }
    v = json_object_get(root, "negative_class_label");
    if (v && !json_is_null(v)) {
        spec.negative_label = label_of(m, v, &bad);
        if (bad) BAD("negative_class_label", "'negative_class_label' is not a class of %.200s (classes: %s)", m->id, classes);
    }
    /* steps, guidance, seed, sampler */
    int max_steps = m->max_steps < MAX_STEPS ? m->max_steps : MAX_STEPS;
    spec.num_steps = DEFAULT_STEPS < max_steps ? DEFAULT_STEPS : max_steps;
    v = json_object_get(root, "num_inference_steps");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max_steps)
            BAD("num_inference_steps", "'num_inference_steps' must be an integer from 1 to %d", max_steps);
        spec.num_steps = (int)json_integer_value(v);
    }
    spec.guidance_scale = m->default_guidance;
    v = json_object_get(root, "guidance_scale");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 100)
            BAD("guidance_scale", "'guidance_scale' must be a number from 0 to 100");
        spec.guidance_scale = (float)json_number_value(v);
    }
    v = json_object_get(root, "seed");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            BAD("seed", "'seed' must be a non-negative integer");
        spec.seed = (uint64_t)json_integer_value(v);
    } else {
        spec.seed = wf_clock_now_ns() ^ ((uint64_t)++s->next_id << 32);
    }
    v = json_object_get(root, "sampler");
    if (v && !json_is_null(v)) {
        char serr[160];
        wf_dit_sampler_kind kind;
        if (!json_is_string(v) || wf_dit_sampler_kind_parse(json_string_value(v), &kind, serr, sizeof serr) != WF_OK)
            BAD("sampler", "'sampler' must be one of ddim, ddpm, euler, flow_euler");
        spec.sampler = (int)kind;
    }
    if (m->check_schedule) {
        char serr[200];
        if (m->check_schedule(m->class_ctx, spec.sampler, spec.num_steps, serr, sizeof serr) != WF_OK)
            BAD("num_inference_steps", "'num_inference_steps' %d with this sampler: %s", spec.num_steps, serr);
    }
    /* SLO extension */
    v = json_object_get(root, "priority");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < -1000 || json_integer_value(v) > 1000)
            BAD("priority", "'priority' must be an integer from -1000 to 1000");
        spec.priority = (int)json_integer_value(v);
    }
    v = json_object_get(root, "slo");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v)) BAD("slo", "'slo' must be an object such as {\"deadline_ms\": 2000}");
        json_t *d = json_object_get(v, "deadline_ms");
        json_object_foreach(v, key, d) {
            if (strcmp(key, "deadline_ms") != 0) BAD("slo", "unknown 'slo' field '%.100s'", key);
        }
        d = json_object_get(v, "deadline_ms");
        if (d && !json_is_null(d)) {
            if (!json_is_number(d) || json_number_value(d) <= 0 || json_number_value(d) > 86400000)
                BAD("slo.deadline_ms", "'slo.deadline_ms' must be a number of milliseconds above 0 and at most 86400000 (a day)");
            spec.deadline_ns = wf_clock_now_ns() + (uint64_t)(json_number_value(d) * 1e6);
        }
    }
    bool stream = false;
    v = json_object_get(root, "stream");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) BAD("stream", "'stream' must be true or false");
        stream = json_is_true(v);
    }

    /* Previews: weft's preview_every (steps), or OpenAI's partial_images (0..3) spread evenly. */
    v = json_object_get(root, "preview_every");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > MAX_STEPS)
            BAD("preview_every", "'preview_every' must be an integer from 1 to %d (denoising steps "
                                 "between previews)", MAX_STEPS);
        if (!stream) BAD("preview_every", "'preview_every' needs \"stream\": true (previews are stream events)");
        spec.preview_every = (int)json_integer_value(v);
    }
    v = json_object_get(root, "partial_images");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 3)
            BAD("partial_images", "'partial_images' must be an integer from 0 to 3");
        if (json_integer_value(v) > 0 && !stream)
            BAD("partial_images", "'partial_images' needs \"stream\": true (previews are stream events)");
        if (json_integer_value(v) > 0 && spec.preview_every)
            BAD("partial_images", "give 'partial_images' or 'preview_every', not both");
        int k = (int)json_integer_value(v);
        if (k > 0) spec.preview_every = (spec.num_steps + k) / (k + 1); /* k previews before the end */
        if (spec.preview_every < 1 && k > 0) spec.preview_every = 1;
    }

    g = calloc(1, sizeof *g);
    if (!g) {
        wf__server_error(s, req, 503, "server_error", NULL, NULL, 1, "out of memory");
        goto out;
    }
    g->s = s;
    g->http = req;
    g->model = m;
    g->n = spec.n;
    g->width = spec.width;
    g->height = spec.height;
    g->num_steps = spec.num_steps;
    g->streaming = stream;
    g->deadline_ns = spec.deadline_ns;
    g->priority = spec.priority;
    g->format = format;
    g->quality = quality;
    g->created = (int64_t)time(NULL);
    g->arrived_ns = arrived_ns;
    g->guided = spec.guidance_scale > 1.0f;
    snprintf(g->id, sizeof g->id, "img-%016" PRIx64, wf_clock_now_ns() ^ ((uint64_t)++s->next_id << 40));
    snprintf(spec.id, sizeof spec.id, "%s", g->id);
    spec.progress = stream;
    char why[160] = "";
    double retry = 0;
    wf_status st = wf_image_sched_submit(s->images, &spec, &s->image_events, g, &g->req, why,
                                         sizeof why, &retry);
    if (st != WF_OK) {
        free(g);
        g = NULL;
        if (st == WF_EINVAL) BAD(NULL, "%s", why);
        wf_image_class_metrics *mc = wf_metrics_image_class(&s->metrics, m->sched_model, spec.priority);
        if (mc) mc->rejected++;
        if (st == WF_EOVERLOAD) {
            s->metrics.requests_rejected_overload++;
            wf__server_error(s, req, 429, "rate_limit_error", "slo.deadline_ms", "deadline_unreachable",
                             retry < 1 ? 1 : retry, "%s", why);
            goto out;
        }
        wf__server_error(s, req, st == WF_ENOMEM || st == WF_EBUSY || st == WF_EFULL ? 503 : 500,
                         "server_error", NULL, NULL, 1, "%s", why);
        goto out;
    }
    g->next = s->img_gens;
    if (s->img_gens) s->img_gens->prev = g;
    s->img_gens = g;
    s->n_gens++;
    wf_http_request_set_abort(req, on_abort, g);
    if (stream) {
        wf__server_count_stream(s);
        wf_http_stream_begin(req, 200, "text/event-stream", "Cache-Control: no-cache\r\n");
    }
out:
    json_decref(root);
}

/* ---- events ----------------------------------------------------------------------------- */

/* "b64_json":"<base64 file in the request's output_format>" */
static void write_b64_image(wf_jbuf *b, const wf_img_gen *g, const wf_image_event *ev, bool *ok) {
    wf_jbuf file = {0};
    if (wf_image_encode(g->format, ev->pixels, ev->width, ev->height, ev->channels, g->quality,
                        &file) != WF_OK)
        *ok = false;
    wf_jbuf_cstr(b, "\"b64_json\":\"");
    wf_base64_append(b, file.data, file.len);
    wf_jbuf_cstr(b, "\"");
    wf_jbuf_free(&file);
}

static void write_image_json(wf_jbuf *b, const wf_img_gen *g, const wf_image_event *ev, bool *ok) {
    wf_jbuf_cstr(b, "{");
    write_b64_image(b, g, ev, ok);
    wf_jbuf_cstr(b, ",\"revised_prompt\":null}");
}

/* b holds "data: " + the event's JSON: one write per event, so each is one chunk on the wire. */
static void sse(wf_img_gen *g, wf_jbuf *b) {
    wf_jbuf_raw(b, "\n\n", 2);
    wf_http_stream_write(g->http, b->data, b->len);
}

static void write_usage(wf_jbuf *b, const wf_img_gen *g, const wf_image_event *ev) {
    wf_jbuf_printf(b, ",\"usage\":{\"input_tokens\":0,\"output_tokens\":0,\"total_tokens\":0,"
                      "\"input_tokens_details\":{\"image_tokens\":0,\"text_tokens\":0},"
                      "\"images\":%d,\"num_inference_steps\":%d,\"denoising_steps\":%d}",
                   g->n, g->num_steps, ev->steps_run);
}

static void on_event(wf_server *s, wf_image_event *ev) {
    wf_img_gen *g = ev->user;
    wf_jbuf *b = &s->scratch;
    wf_jbuf_reset(b);
    if (g->streaming) wf_jbuf_raw(b, "data: ", 6);
    if (ev->kind == WF_IMAGE_EVENT_PROGRESS) {
        if (g->http && g->streaming) {
            wf_jbuf_printf(b, "{\"type\":\"image_generation.progress\",\"id\":\"%s\",\"index\":%d,"
                              "\"step\":%d,\"num_inference_steps\":%d}",
                           g->id, ev->index, ev->step, ev->n_steps);
            sse(g, b);
        }
        return;
    }
    if (ev->kind == WF_IMAGE_EVENT_PREVIEW) {
        if (g->http && g->streaming) {
            bool ok = true;
            /* OpenAI's ImageGenPartialImageEvent, plus id, index and the step it shows */
            wf_jbuf_printf(b, "{\"type\":\"image_generation.partial_image\",\"id\":\"%s\",\"index\":%d,"
                              "\"partial_image_index\":%d,\"step\":%d,\"num_inference_steps\":%d,"
                              "\"created_at\":%lld,\"background\":\"opaque\",\"output_format\":\"%s\","
                              "\"quality\":\"auto\",\"size\":\"%dx%d\",",
                           g->id, ev->index, g->previews_sent[ev->index], ev->step, ev->n_steps,
                           (long long)g->created, wf_image_format_name(g->format), ev->width, ev->height);
            write_b64_image(b, g, ev, &ok);
            wf_jbuf_cstr(b, "}");
            /* A preview is advisory: one that fails to encode is skipped, and said so. Only a
             * sent one takes a partial_image_index, so the client sees them without gaps. */
            if (ok && !b->failed) {
                sse(g, b);
                g->previews_sent[ev->index]++;
            } else {
                WF_LOG_WARN("images", g->id, "preview of image %d at step %d not sent: %s encoding failed",
                            ev->index, ev->step, wf_image_format_name(g->format));
            }
        }
        return;
    }
    if (ev->kind == WF_IMAGE_EVENT_IMAGE) {
        if (g->http && g->streaming) {
            bool ok = true;
            /* OpenAI's ImageGenCompletedEvent (one per image), plus id and index */
            wf_jbuf_printf(b, "{\"type\":\"image_generation.completed\",\"id\":\"%s\",\"index\":%d,"
                              "\"created_at\":%lld,\"background\":\"opaque\",\"output_format\":\"%s\","
                              "\"quality\":\"auto\",\"size\":\"%dx%d\",",
                           g->id, ev->index, (long long)g->created, wf_image_format_name(g->format),
                           ev->width, ev->height);
            write_b64_image(b, g, ev, &ok);
            wf_jbuf_cstr(b, ",\"usage\":{\"input_tokens\":0,\"output_tokens\":0,\"total_tokens\":0,"
                            "\"input_tokens_details\":{\"image_tokens\":0,\"text_tokens\":0}}}");
            if (ok && !b->failed) {
                sse(g, b);
            } else {
                /* The stream ends with the error; the scheduler stops the rest and FINISHED
                 * (cancelled) frees g. */
                wf_jbuf_reset(b);
                wf_jbuf_printf(b, "data: {\"error\":{\"message\":\"%s encoding of image %d failed\","
                                  "\"type\":\"server_error\",\"param\":null,\"code\":null}}",
                               wf_image_format_name(g->format), ev->index);
                sse(g, b);
                wf_http_stream_end(g->http);
                g->http = NULL;
                wf_image_sched_cancel(s->images, g->req);
            }
        }
        return;
    }
    /* FINISHED: the whole response (non-streaming) from the pixels the request still holds. */
    wf_image_class_metrics *mc = wf_metrics_image_class(&s->metrics, g->model->sched_model, g->priority);
    if (mc) {
        if (ev->status == WF_OK) {
            mc->success++;
            wf_histogram_observe(&mc->e2e, (double)(ev->finished_ns - ev->queued_ns) / 1e9);
            if (ev->started_ns)
                wf_histogram_observe(&mc->queue, (double)(ev->started_ns - ev->queued_ns) / 1e9);
        } else if (ev->status == WF_ECANCELLED) {
            mc->cancelled++;
        } else {
            mc->error++;
        }
        if (g->deadline_ns) {
            mc->deadline_total++;
            mc->deadline_met += ev->status == WF_OK && ev->finished_ns <= g->deadline_ns;
        }
    }
    if (g->http) {
        if (ev->status != WF_OK) {
            if (g->streaming) {
                wf_jbuf_printf(b, "{\"error\":{\"message\":");
                wf_jbuf_str(b, ev->message, strlen(ev->message));
                wf_jbuf_cstr(b, ",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
                sse(g, b); /* as on the text routes: the error event ends the stream, no [DONE] */
                wf_http_stream_end(g->http);
            } else {
                wf__server_error(s, g->http, 500, "server_error", NULL, NULL, 0,
                                 "image generation failed: %s", ev->message);
            }
        } else if (g->streaming) {
            wf_jbuf_printf(b, "{\"type\":\"image_generation.done\",\"id\":\"%s\",\"created\":%lld",
                           g->id, (long long)g->created);
            write_usage(b, g, ev);
            wf_jbuf_cstr(b, "}");
            sse(g, b);
            wf_http_stream_write(g->http, "data: [DONE]\n\n", 14);
            wf_http_stream_end(g->http);
        } else {
            const wf_image_geometry *geo = &g->model->geometry;
            size_t bytes = (size_t)g->width * (size_t)g->height * (size_t)geo->channels;
            const uint8_t *px = wf_image_request_pixels(g->req);
            bool ok = true;
            wf_jbuf_printf(b, "{\"created\":%lld,\"data\":[", (long long)g->created);
            for (int i = 0; i < g->n; i++) {
                if (i) wf_jbuf_cstr(b, ",");
                wf_image_event img = {.pixels = px + (size_t)i * bytes, .width = g->width,
                                      .height = g->height, .channels = geo->channels};
                write_image_json(b, g, &img, &ok);
            }
            wf_jbuf_cstr(b, "]");
            write_usage(b, g, ev);
            wf_jbuf_cstr(b, "}");
            if (!ok || b->failed)
                wf__server_error(s, g->http, 500, "server_error", NULL, NULL, 0, "%s encoding failed",
                                 wf_image_format_name(g->format));
            else
                wf__server_respond(s, g->http, 200, "application/json", NULL, b->data, b->len);
            /* A lone one-image answer of the native size tells the cost model what a request
             * costs beyond its chunks (PNG and the HTTP answer included; the router's request
             * model is the native size's). */
            if (ok && !b->failed && ev->alone && g->n == 1 && s->image_observe &&
                g->width == g->model->geometry.width && g->height == g->model->geometry.height)
                s->image_observe(s->dit_cost_ctx, g->model->sched_model, ev->steps_run, g->guided,
                                 ev->group_size, (double)(wf_clock_now_ns() - g->arrived_ns) / 1e6);
        }
        g->http = NULL;
    }
    wf_image_sched_release(s->images, g->req);
    img_free(g);
}

void wf__images_on_event(wf_server *s, wf_image_event *ev) {
    on_event(s, ev);
    wf_image_event_free(ev);
}

void wf__images_force_free(wf_server *s) {
    while (s->img_gens) {
        wf_img_gen *g = s->img_gens;
        wf_image_sched_cancel(s->images, g->req);
        wf_image_sched_release(s->images, g->req);
        img_free(g);
    }
}

typedef struct admin_ctx {
    wf_server *s;
    wf_jbuf *b;
} admin_ctx;

static void admin_one(const wf_image_snapshot *snap, void *user) {
    admin_ctx *a = user;
    wf_jbuf *b = a->b;
    if (b->len && b->data[b->len - 1] == '}') wf_jbuf_cstr(b, ",");
    wf_jbuf_cstr(b, "{\"id\":");
    wf_jbuf_str(b, snap->id, strlen(snap->id));
    const char *model = "";
    for (int i = 0; i < a->s->n_image_models; i++)
        if (a->s->image_models[i].sched_model == snap->model) model = a->s->image_models[i].id;
    wf_jbuf_cstr(b, ",\"model\":");
    wf_jbuf_str(b, model, strlen(model));
    wf_jbuf_printf(b, ",\"size\":\"%dx%d\",\"priority\":%d,\"n\":%d,\"num_inference_steps\":%d,\"steps_done\":%d,\"images_done\":%d,"
                      "\"progress\":%.4f,\"age_ms\":%.1f,\"cancelled\":%s,\"group_size\":%d}",
                   snap->width, snap->height, snap->priority, snap->n, snap->num_steps, snap->steps_done, snap->images_done,
                   (double)snap->steps_done / ((double)snap->n * snap->num_steps), snap->age_ms,
                   snap->cancelled ? "true" : "false", snap->group_size);
}

void wf_server_set_gate(wf_server *s, struct wf_gate *gate, bool late) {
    s->gate = gate;
    s->gate_late = late;
}

/* The turns on shared cores: how many each class took, and how many of them its minimum
 * share gave it (rather than its deadlines). */
static void write_cores(wf_server *s, wf_jbuf *b) {
    if (!s->gate) return;
    wf_jbuf_printf(b, ",\"cores\":{\"turns_mode\":\"%s\",\"turns\":{\"text\":%llu,\"images\":%llu},"
                      "\"share_turns\":{\"text\":%llu,\"images\":%llu}",
                   !s->gate_late ? "batch" : wf_gate_lookahead(s->gate) ? "ahead" : "edf",
                   (unsigned long long)wf_gate_turns(s->gate, 0),
                   (unsigned long long)wf_gate_turns(s->gate, 1), (unsigned long long)wf_gate_share_turns(s->gate, 0),
                   (unsigned long long)wf_gate_share_turns(s->gate, 1));
    /* Where the time between turns goes (sched/gate.h wf_gate_turn_stats), in microseconds:
     * the bucketed quantiles are the upper bounds of power-of-two buckets. */
    wf_gate_turn_stats ts;
    wf_gate_get_turn_stats(s->gate, &ts);
    const struct {
        const char *name;
        const wf_gate_hist *h;
    } hs[] = {{"handover", &ts.handover}, {"to_grant", &ts.to_grant}, {"grant_to_run", &ts.grant_to_run},
              {"end_to_release", &ts.end_to_release}, {"compute", &ts.compute},
              {"compute_text", &ts.compute_by_class[0]}, {"compute_images", &ts.compute_by_class[1]}};
    wf_jbuf_cstr(b, ",\"turn_us\":{");
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
        const wf_gate_hist *h = hs[i].h;
        wf_jbuf_printf(b, "%s\"%s\":{\"n\":%llu,\"mean\":%.1f,\"p50\":%.0f,\"p90\":%.0f,\"p99\":%.0f}",
                       i ? "," : "", hs[i].name, (unsigned long long)h->n, h->n ? h->sum_us / (double)h->n : 0.0,
                       wf_gate_hist_quantile(h, 0.5), wf_gate_hist_quantile(h, 0.9), wf_gate_hist_quantile(h, 0.99));
    }
    wf_jbuf_cstr(b, "}}");
}

void wf__images_write_admin(wf_server *s, wf_jbuf *b) {
    write_cores(s, b);
    if (s->dit_cost) s->dit_cost(s->dit_cost_ctx, b);
    if (!s->images) return;
    wf_image_sched_stats st;
    wf_image_sched_get_stats(s->images, &st);
    wf_jbuf_printf(b, ",\"images\":{\"running\":%d,\"submitted\":%llu,\"finished\":%llu,"
                      "\"failed\":%llu,\"cancelled\":%llu,\"rejected\":%llu,\"images\":%llu,"
                      "\"steps\":%llu,\"batches\":%llu,\"step_ms_avg\":%.3f,\"step_ms_sum\":%.3f,"
                      "\"e2e_ms_sum\":%.3f,\"queue_ms_sum\":%.3f",
                   st.running, (unsigned long long)st.submitted, (unsigned long long)st.finished,
                   (unsigned long long)st.failed, (unsigned long long)st.cancelled,
                   (unsigned long long)st.rejected, (unsigned long long)st.images,
                   (unsigned long long)st.steps, (unsigned long long)st.batches, st.step_ms_avg, st.step_ms_sum,
                   st.e2e_ms_sum, st.queue_ms_sum);
    /* the group each DENOISE chunk ran on (--workers: chosen by --dit-policy per chunk) */
    wf_jbuf_printf(b, ",\"last_group_size\":%d,\"chunks_by_group_size\":{", st.last_group_size);
    for (int P = 1, first = 1; P <= WF_IMAGE_MAX_GROUP; P++)
        if (st.chunks_by_group[P]) {
            wf_jbuf_printf(b, "%s\"%d\":%llu", first ? "" : ",", P, (unsigned long long)st.chunks_by_group[P]);
            first = 0;
        }
    /* the cost model per image size of each model (native first: calibrated; others scaled
     * from it until their first batch measured them) */
    wf_jbuf_cstr(b, "},\"cost_by_size\":{");
    for (int i = 0; i < s->n_image_models; i++) {
        const wf_server_image_model *m = &s->image_models[i];
        wf_image_size_cost sz[WF_IMAGE_MAX_SIZES];
        int n = wf_image_sched_size_costs(s->images, m->sched_model, sz, WF_IMAGE_MAX_SIZES);
        if (i) wf_jbuf_cstr(b, ",");
        wf_jbuf_str(b, m->id, strlen(m->id));
        wf_jbuf_cstr(b, ":[");
        for (int k = 0; k < n; k++)
            wf_jbuf_printf(b, "%s{\"size\":\"%dx%d\",\"scale\":%.4f,\"correction\":%.4f,\"measured\":%s,"
                              "\"step_ms\":%.4f,\"held_images\":%d}",
                           k ? "," : "", sz[k].width, sz[k].height, sz[k].scale, sz[k].correction,
                           sz[k].measured ? "true" : "false", sz[k].step_ms, sz[k].held_images);
        wf_jbuf_cstr(b, "]");
    }
    wf_jbuf_cstr(b, "},\"requests\":[");
    admin_ctx a = {.s = s, .b = b};
    wf_image_sched_foreach(s->images, admin_one, &a);
    wf_jbuf_cstr(b, "]}");
}
