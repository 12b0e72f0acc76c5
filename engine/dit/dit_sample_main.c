/* weft-dit-sample: sample class-conditional images from a DiT folder through the same step
 * interface the server uses (engine/dit/dit_step.h).
 *
 *     weft-dit-sample --model DIR --class NAME|INDEX --count N [--steps S] [--guidance G]
 *                     [--seed SEED] [--sampler ddim|ddpm|euler|flow_euler] [--threads T]
 *                     [--batch B] --out FILE
 *
 * Writes N x C x H x W float32 little-endian values to FILE (the image in [-1, 1], decoded by
 * the VAE for latent models) and one JSON line {"count", "channels", "height", "width"} on
 * stdout. Image i uses the noise key (seed, i), so it does not depend on N or --batch. Class
 * names come from model_index.json's "weft_class_names" when present. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/threadpool.h"
#include "engine/dit/dit.h"
#include "engine/dit/dit_step.h"

static void usage(FILE *f) {
    fprintf(f, "usage: weft-dit-sample --model DIR --class NAME|INDEX --count N [--steps S] "
               "[--guidance G] [--seed SEED] [--sampler ddim|ddpm|euler|flow_euler] "
               "[--threads T] [--batch B] --out FILE\n");
}

static int parse_int(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < -2147483647L || v > 2147483647L)
        return -1;
    *out = (int)v;
    return 0;
}

/* The class index of `name`: a number, or a name listed in model_index.json. -1 if unknown. */
static int resolve_class(const wf_dit *m, const char *name, int num_classes) {
    int k;
    if (parse_int(name, &k) == 0)
        return k >= 0 && k < num_classes ? k : -1;
    const char *idx = wf_dit_get_paths(m)->model_index;
    if (!idx)
        return -1;
    json_t *root = json_load_file(idx, 0, NULL);
    json_t *names = root ? json_object_get(root, "weft_class_names") : NULL;
    int found = -1;
    for (size_t i = 0; json_is_array(names) && i < json_array_size(names); i++) {
        const char *s = json_string_value(json_array_get(names, i));
        if (s && !strcmp(s, name) && (int)i < num_classes) {
            found = (int)i;
            break;
        }
    }
    json_decref(root);
    return found;
}

/* The model's scheduler config, switched to another sampler kind if asked: that class's
 * defaults with the model's training schedule (timesteps, betas, prediction) kept. */
static int sampler_config(const wf_dit *m, const char *sampler, wf_dit_sampler_config *cfg,
                          char *err, size_t errlen) {
    const char *path = wf_dit_get_paths(m)->scheduler_config;
    if (path) {
        if (wf_dit_sampler_config_load(path, cfg, err, errlen) != WF_OK)
            return -1;
    } else {
        wf_dit_sampler_config_default(WF_DIT_SAMPLER_KIND_DDIM, cfg);
    }
    if (!sampler)
        return 0;
    wf_dit_sampler_kind kind;
    if (wf_dit_sampler_kind_parse(sampler, &kind, err, errlen) != WF_OK)
        return -1;
    wf_dit_sampler_config_switch(cfg, kind, cfg);
    return 0;
}

int main(int argc, char **argv) {
    const char *model_dir = NULL, *cls = NULL, *out_path = NULL, *sampler = NULL;
    int count = 1, steps = 20, threads = 0, batch = 8;
    float guidance = 4.0f;
    unsigned long long seed = 0;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "weft-dit-sample: %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        int bad = 0;
        char *end = NULL;
        if (!strcmp(a, "--model"))
            model_dir = v;
        else if (!strcmp(a, "--class"))
            cls = v;
        else if (!strcmp(a, "--out"))
            out_path = v;
        else if (!strcmp(a, "--sampler"))
            sampler = v;
        else if (!strcmp(a, "--count"))
            bad = parse_int(v, &count) || count < 1;
        else if (!strcmp(a, "--steps"))
            bad = parse_int(v, &steps) || steps < 1;
        else if (!strcmp(a, "--threads"))
            bad = parse_int(v, &threads) || threads < 0;
        else if (!strcmp(a, "--batch"))
            bad = parse_int(v, &batch) || batch < 1 || batch > 256;
        else if (!strcmp(a, "--guidance")) {
            errno = 0;
            guidance = strtof(v, &end);
            bad = errno || *end || end == v;
        } else if (!strcmp(a, "--seed")) {
            errno = 0;
            seed = strtoull(v, &end, 10);
            bad = errno || *end || end == v;
        } else {
            fprintf(stderr, "weft-dit-sample: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "weft-dit-sample: bad value for %s: %s\n", a, v);
            return 2;
        }
    }
    if (!model_dir || !cls || !out_path) {
        usage(stderr);
        return 2;
    }

    int rc = 1;
    char err[512] = "";
    wf_dit *m = NULL;
    wf_dit_stepper *sp = NULL;
    wf_dit_vae *vae = NULL;
    wf_threadpool *pool = NULL;
    float *lat = NULL, *img = NULL;
    wf_dit_item *items = NULL;
    FILE *f = NULL;

    if (batch > count)
        batch = count;
    wf_dit_options opt = wf_dit_options_default();
    opt.max_batch = 2 * batch;
    opt.n_threads = threads;
    if (wf_dit_load(model_dir, &opt, &m, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-dit-sample: %s\n", err);
        goto done;
    }
    const wf_dit_config *c = wf_dit_get_config(m);
    int label = resolve_class(m, cls, c->num_classes);
    if (label < 0) {
        fprintf(stderr, "weft-dit-sample: unknown class \"%s\" (an index below %d or a name in "
                        "model_index.json)\n", cls, c->num_classes);
        goto done;
    }
    wf_dit_sampler_config scfg;
    if (sampler_config(m, sampler, &scfg, err, sizeof err) != 0) {
        fprintf(stderr, "weft-dit-sample: %s\n", err);
        goto done;
    }
    int side = c->sample_size;
    if (wf_dit_stepper_new(m, &scfg, steps, batch, side, side, &sp, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-dit-sample: %s\n", err);
        goto done;
    }
    pool = wf_threadpool_new(threads);
    if (!pool) {
        fprintf(stderr, "weft-dit-sample: cannot start threads\n");
        goto done;
    }
    wf_status vst = wf_dit_vae_open(m, side, side, pool, &vae, err, sizeof err);
    if (vst != WF_OK && vst != WF_ENOTFOUND) {
        fprintf(stderr, "weft-dit-sample: vae: %s\n", err);
        goto done;
    }
    int img_c = vae ? 3 : c->in_channels, up = vae ? wf_dit_vae_upscale(vae) : 1;
    int img_side = side * up;
    size_t lat_sz = wf_dit_stepper_latent_size(sp);
    size_t img_sz = (size_t)img_c * (size_t)img_side * (size_t)img_side;
    lat = malloc(sizeof(float) * lat_sz * (size_t)batch);
    img = vae ? malloc(sizeof(float) * img_sz) : NULL;
    items = calloc((size_t)batch, sizeof *items);
    if (!lat || (vae && !img) || !items) {
        fprintf(stderr, "weft-dit-sample: out of memory\n");
        goto done;
    }
    f = fopen(out_path, "wb");
    if (!f) {
        fprintf(stderr, "weft-dit-sample: cannot write %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    for (int first = 0; first < count; first += batch) {
        int n = count - first < batch ? count - first : batch;
        for (int i = 0; i < n; i++) {
            items[i] = (wf_dit_item){.latent = lat + (size_t)i * lat_sz,
                                     .label = label,
                                     .uncond_label = -1,
                                     .guidance = guidance,
                                     .key = {.seed = seed, .request = (uint32_t)(first + i)},
                                     .step = 0,
                                     .step_end = wf_dit_schedule_n_steps(
                                         wf_dit_stepper_schedule(sp))};
            wf_dit_stepper_init_latent(sp, &items[i]);
        }
        if (wf_dit_stepper_run(sp, pool, n, items, err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-dit-sample: %s\n", err);
            goto done;
        }
        for (int i = 0; i < n; i++) {
            const float *px = items[i].latent;
            if (vae) {
                if (wf_dit_vae_decode(vae, px, side, side, img) != WF_OK) {
                    fprintf(stderr, "weft-dit-sample: vae decode failed\n");
                    goto done;
                }
                px = img;
            }
            if (fwrite(px, sizeof(float), vae ? img_sz : lat_sz, f) != (vae ? img_sz : lat_sz)) {
                fprintf(stderr, "weft-dit-sample: write %s failed\n", out_path);
                goto done;
            }
        }
    }
    if (fclose(f) != 0) {
        f = NULL;
        fprintf(stderr, "weft-dit-sample: write %s failed\n", out_path);
        goto done;
    }
    f = NULL;
    printf("{\"count\": %d, \"channels\": %d, \"height\": %d, \"width\": %d}\n", count, img_c,
           img_side, img_side);
    rc = 0;
done:
    if (f)
        fclose(f);
    free(items);
    free(img);
    free(lat);
    wf_dit_vae_free(vae);
    wf_dit_stepper_free(sp);
    wf_threadpool_free(pool);
    wf_dit_free(m);
    return rc;
}
