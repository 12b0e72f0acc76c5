/* Diffusion samplers with diffusers 0.31 semantics (engine/dit/sampler.h). The schedule tables
 * are built the way diffusers builds them (float32 betas, cumulative product accumulated in
 * double as torch's CPU cumprod does, numpy's rounding), so trajectories match to ~1e-6. */
#include "engine/dit/sampler.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct wf_dit_schedule {
    wf_dit_sampler_config cfg;
    int n_steps;
    int step_ratio;     /* DDPM/DDIM: num_train_timesteps / n_steps (integer division) */
    float final_alpha;  /* DDIM: alpha_cumprod when the previous timestep is < 0 */
    float init_sigma;
    float *alphas_cumprod; /* [num_train_timesteps] */
    double *timesteps;     /* [n_steps] */
    float *sigmas;         /* [n_steps + 1], Euler and flow matching */
};

typedef struct name_map {
    const char *name;
    int value;
} name_map;

static const name_map KIND_NAMES[] = {
    {"DDPMScheduler", WF_DIT_SAMPLER_KIND_DDPM},     {"DDIMScheduler", WF_DIT_SAMPLER_KIND_DDIM},
    {"EulerDiscreteScheduler", WF_DIT_SAMPLER_KIND_EULER},
    {"FlowMatchEulerDiscreteScheduler", WF_DIT_SAMPLER_KIND_FLOW_EULER},
    {"ddpm", WF_DIT_SAMPLER_KIND_DDPM},              {"ddim", WF_DIT_SAMPLER_KIND_DDIM},
    {"euler", WF_DIT_SAMPLER_KIND_EULER},            {"flow_euler", WF_DIT_SAMPLER_KIND_FLOW_EULER},
    {NULL, 0}};
static const name_map BETA_NAMES[] = {{"linear", WF_DIT_BETA_SCHEDULE_LINEAR},
                                      {"scaled_linear", WF_DIT_BETA_SCHEDULE_SCALED_LINEAR},
                                      {"squaredcos_cap_v2", WF_DIT_BETA_SCHEDULE_COSINE},
                                      {NULL, 0}};
static const name_map SPACING_NAMES[] = {{"leading", WF_DIT_SPACING_LEADING},
                                         {"trailing", WF_DIT_SPACING_TRAILING},
                                         {"linspace", WF_DIT_SPACING_LINSPACE},
                                         {NULL, 0}};
static const name_map PRED_NAMES[] = {{"epsilon", WF_DIT_PREDICTION_EPSILON},
                                      {"v_prediction", WF_DIT_PREDICTION_V},
                                      {"sample", WF_DIT_PREDICTION_SAMPLE},
                                      {"original_sample", WF_DIT_PREDICTION_SAMPLE},
                                      {NULL, 0}};
static const name_map VAR_NAMES[] = {{"fixed_small", WF_DIT_VARIANCE_FIXED_SMALL},
                                     {"fixed_small_log", WF_DIT_VARIANCE_FIXED_SMALL_LOG},
                                     {"fixed_large", WF_DIT_VARIANCE_FIXED_LARGE},
                                     {"learned_range", WF_DIT_VARIANCE_LEARNED_RANGE},
                                     {NULL, 0}};

static int lookup_name(const name_map *m, const char *name, int *value) {
    for (; m->name; m++)
        if (strcmp(m->name, name) == 0) {
            *value = m->value;
            return 1;
        }
    return 0;
}

static wf_status name_error(const char *what, const char *name, const name_map *m, char *err,
                            size_t errlen) {
    char known[256] = "";
    size_t used = 0;
    for (; m->name && used + 1 < sizeof known; m++) {
        int w = snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", m->name);
        if (w < 0) break;
        used += (size_t)w;
    }
    return wf_status_errorf(err, errlen, WF_EINVAL, "unknown %s '%s' (known: %s)", what, name,
                            known);
}

wf_status wf_dit_sampler_kind_parse(const char *name, wf_dit_sampler_kind *kind, char *err,
                                    size_t errlen) {
    int v;
    if (!name || !kind) return wf_status_errorf(err, errlen, WF_EINVAL, "sampler name is NULL");
    if (!lookup_name(KIND_NAMES, name, &v))
        return name_error("sampler", name, KIND_NAMES, err, errlen);
    *kind = (wf_dit_sampler_kind)v;
    return WF_OK;
}

const char *wf_dit_sampler_kind_name(wf_dit_sampler_kind kind) {
    switch (kind) {
    case WF_DIT_SAMPLER_KIND_DDPM: return "ddpm";
    case WF_DIT_SAMPLER_KIND_DDIM: return "ddim";
    case WF_DIT_SAMPLER_KIND_EULER: return "euler";
    case WF_DIT_SAMPLER_KIND_FLOW_EULER: return "flow_euler";
    }
    return "unknown";
}

void wf_dit_sampler_config_default(wf_dit_sampler_kind kind, wf_dit_sampler_config *cfg) {
    *cfg = (wf_dit_sampler_config){
        .kind = kind,
        .num_train_timesteps = 1000,
        .beta_start = 0.0001,
        .beta_end = 0.02,
        .beta_schedule = WF_DIT_BETA_SCHEDULE_LINEAR,
        .spacing =
            kind == WF_DIT_SAMPLER_KIND_EULER ? WF_DIT_SPACING_LINSPACE : WF_DIT_SPACING_LEADING,
        .steps_offset = 0,
        .prediction = WF_DIT_PREDICTION_EPSILON,
        .variance = WF_DIT_VARIANCE_FIXED_SMALL,
        .clip_sample = true,
        .clip_sample_range = 1.0,
        .set_alpha_to_one = true,
        .shift = 1.0,
        .eta = 0.0,
    };
}

/* ---- scheduler_config.json ---- */

static wf_status get_enum(json_t *root, const char *key, const char *what, const name_map *m,
                          int *value, char *err, size_t errlen) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return WF_OK;
    if (!json_is_string(v))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "scheduler config: '%s' is not a string",
                                key);
    if (!lookup_name(m, json_string_value(v), value))
        return name_error(what, json_string_value(v), m, err, errlen);
    return WF_OK;
}

static wf_status get_number(json_t *root, const char *key, double *value, char *err,
                            size_t errlen) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return WF_OK;
    if (!json_is_number(v))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "scheduler config: '%s' is not a number",
                                key);
    *value = json_number_value(v);
    if (!isfinite(*value))
        return wf_status_errorf(err, errlen, WF_EINVAL, "scheduler config: '%s' is not finite",
                                key);
    return WF_OK;
}

static wf_status get_int(json_t *root, const char *key, int *value, char *err, size_t errlen) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return WF_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "scheduler config: '%s' is not an integer in 0..1000000", key);
    *value = (int)json_integer_value(v);
    return WF_OK;
}

static wf_status get_bool(json_t *root, const char *key, bool *value, char *err, size_t errlen) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return WF_OK;
    if (!json_is_boolean(v))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "scheduler config: '%s' is not a boolean",
                                key);
    *value = json_is_true(v);
    return WF_OK;
}

/* Options weft does not implement: present and not at their neutral value -> unsupported. */
static wf_status reject_unsupported(json_t *root, char *err, size_t errlen) {
    static const char *const truthy[] = {"thresholding", "rescale_betas_zero_snr",
                                         "use_karras_sigmas", "use_exponential_sigmas",
                                         "use_beta_sigmas", "use_dynamic_shifting",
                                         "invert_sigmas", NULL};
    for (int k = 0; truthy[k]; k++) {
        json_t *v = json_object_get(root, truthy[k]);
        if (v && json_is_true(v))
            return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                    "scheduler config: '%s' = true is not supported", truthy[k]);
    }
    static const char *const non_null[] = {"trained_betas", "shift_terminal", NULL};
    for (int k = 0; non_null[k]; k++) {
        json_t *v = json_object_get(root, non_null[k]);
        if (v && !json_is_null(v))
            return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                    "scheduler config: '%s' is not supported", non_null[k]);
    }
    static const struct {
        const char *key, *neutral;
    } strings[] = {{"interpolation_type", "linear"},
                   {"final_sigmas_type", "zero"},
                   {"timestep_type", "discrete"},
                   {NULL, NULL}};
    for (int k = 0; strings[k].key; k++) {
        json_t *v = json_object_get(root, strings[k].key);
        if (!v || json_is_null(v)) continue;
        if (!json_is_string(v))
            return wf_status_errorf(err, errlen, WF_EFORMAT,
                                    "scheduler config: '%s' is not a string", strings[k].key);
        if (strcmp(json_string_value(v), strings[k].neutral) != 0)
            return wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                    "scheduler config: %s '%s' is not supported (only '%s')",
                                    strings[k].key, json_string_value(v), strings[k].neutral);
    }
    return WF_OK;
}

static wf_status check_config(const wf_dit_sampler_config *c, char *err, size_t errlen) {
    if (c->num_train_timesteps < 2)
        return wf_status_errorf(err, errlen, WF_EINVAL, "num_train_timesteps %d < 2",
                                c->num_train_timesteps);
    if (!(c->beta_start > 0 && c->beta_end > 0 && c->beta_start < 1 && c->beta_end < 1))
        return wf_status_errorf(err, errlen, WF_EINVAL,
                                "beta_start %g / beta_end %g outside (0, 1)",
                                c->beta_start, c->beta_end);
    if (!(c->clip_sample_range > 0))
        return wf_status_errorf(err, errlen, WF_EINVAL, "clip_sample_range %g <= 0",
                                c->clip_sample_range);
    if (!(c->shift > 0))
        return wf_status_errorf(err, errlen, WF_EINVAL, "shift %g <= 0", c->shift);
    if (!(c->eta >= 0 && c->eta <= 10))
        return wf_status_errorf(err, errlen, WF_EINVAL, "eta %g outside [0, 10]", c->eta);
    return WF_OK;
}

wf_status wf_dit_sampler_config_parse(const char *json, size_t len, wf_dit_sampler_config *cfg,
                                      char *err, size_t errlen) {
    if (!json || !cfg) return wf_status_errorf(err, errlen, WF_EINVAL, "NULL argument");
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "scheduler config: line %d: %s",
                                jerr.line, jerr.text);
    wf_status st = WF_OK;
    if (!json_is_object(root)) {
        st = wf_status_errorf(err, errlen, WF_EFORMAT, "scheduler config: not a JSON object");
        goto out;
    }
    json_t *cls = json_object_get(root, "_class_name");
    if (!cls || !json_is_string(cls)) {
        st = wf_status_errorf(err, errlen, WF_EFORMAT,
                              "scheduler config: '_class_name' missing or not a string");
        goto out;
    }
    wf_dit_sampler_kind kind;
    if ((st = wf_dit_sampler_kind_parse(json_string_value(cls), &kind, err, errlen)) != WF_OK)
        goto out;
    wf_dit_sampler_config c;
    wf_dit_sampler_config_default(kind, &c);
    int beta = (int)c.beta_schedule, spacing = (int)c.spacing, pred = (int)c.prediction,
        var = (int)c.variance;
    if ((st = reject_unsupported(root, err, errlen)) != WF_OK ||
        (st = get_int(root, "num_train_timesteps", &c.num_train_timesteps, err, errlen)) ||
        (st = get_number(root, "beta_start", &c.beta_start, err, errlen)) ||
        (st = get_number(root, "beta_end", &c.beta_end, err, errlen)) ||
        (st = get_enum(root, "beta_schedule", "beta schedule", BETA_NAMES, &beta, err, errlen)) ||
        (st = get_enum(root, "timestep_spacing", "timestep spacing", SPACING_NAMES, &spacing, err,
                       errlen)) ||
        (st = get_int(root, "steps_offset", &c.steps_offset, err, errlen)) ||
        (st = get_enum(root, "prediction_type", "prediction type", PRED_NAMES, &pred, err,
                       errlen)) ||
        (st = get_bool(root, "clip_sample", &c.clip_sample, err, errlen)) ||
        (st = get_number(root, "clip_sample_range", &c.clip_sample_range, err, errlen)) ||
        (st = get_bool(root, "set_alpha_to_one", &c.set_alpha_to_one, err, errlen)) ||
        (st = get_number(root, "shift", &c.shift, err, errlen)))
        goto out;
    if (kind == WF_DIT_SAMPLER_KIND_DDPM) {
        json_t *v = json_object_get(root, "variance_type");
        if (v && json_is_string(v) &&
            (strcmp(json_string_value(v), "learned") == 0 ||
             strcmp(json_string_value(v), "fixed_large_log") == 0)) {
            st = wf_status_errorf(err, errlen, WF_EUNSUPPORTED,
                                  "scheduler config: variance_type '%s' is not supported",
                                  json_string_value(v));
            goto out;
        }
        if ((st = get_enum(root, "variance_type", "variance type", VAR_NAMES, &var, err, errlen)))
            goto out;
    }
    c.beta_schedule = (wf_dit_beta_schedule)beta;
    c.spacing = (wf_dit_spacing)spacing;
    c.prediction = (wf_dit_prediction)pred;
    c.variance = (wf_dit_variance)var;
    if ((st = check_config(&c, err, errlen)) != WF_OK) goto out;
    *cfg = c;
out:
    json_decref(root);
    return st;
}

wf_status wf_dit_sampler_config_load(const char *path, wf_dit_sampler_config *cfg, char *err,
                                     size_t errlen) {
    if (!path || !cfg) return wf_status_errorf(err, errlen, WF_EINVAL, "NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return wf_status_errorf(err, errlen, WF_ENOTFOUND, "cannot open '%s'", path);
    char *buf = NULL;
    wf_status st = WF_OK;
    if (fseek(f, 0, SEEK_END) != 0) goto io_error;
    long size = ftell(f);
    if (size < 0 || size > (1 << 20) || fseek(f, 0, SEEK_SET) != 0) goto io_error;
    buf = malloc((size_t)size + 1);
    if (!buf) {
        st = wf_status_errorf(err, errlen, WF_ENOMEM, "reading '%s'", path);
        goto out;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) goto io_error;
    st = wf_dit_sampler_config_parse(buf, (size_t)size, cfg, err, errlen);
    goto out;
io_error:
    st = wf_status_errorf(err, errlen, WF_EIO, "cannot read '%s' (or larger than 1 MiB)", path);
out:
    free(buf);
    fclose(f);
    return st;
}

/* ---- schedule tables ---- */

/* torch.linspace(start, end, n, dtype=float32): the first half counts up from start, the second
 * down from end, in float. */
static float torch_linspace_f32(float start, float end, int n, int i) {
    float step = (end - start) / (float)(n - 1);
    return i < n / 2 ? start + step * (float)i : end - step * (float)(n - 1 - i);
}

static double cosine_alpha_bar(double t) {
    double c = cos((t + 0.008) / 1.008 * 3.14159265358979323846 / 2);
    return c * c;
}

static void build_alphas_cumprod(const wf_dit_sampler_config *c, float *acp) {
    int n = c->num_train_timesteps;
    double prod = 1.0;
    for (int i = 0; i < n; i++) {
        float beta;
        switch (c->beta_schedule) {
        case WF_DIT_BETA_SCHEDULE_SCALED_LINEAR: {
            float b =
                torch_linspace_f32((float)sqrt(c->beta_start), (float)sqrt(c->beta_end), n, i);
            beta = b * b;
            break;
        }
        case WF_DIT_BETA_SCHEDULE_COSINE: {
            double b =
                1.0 - cosine_alpha_bar((double)(i + 1) / n) / cosine_alpha_bar((double)i / n);
            beta = (float)(b < 0.999 ? b : 0.999);
            break;
        }
        case WF_DIT_BETA_SCHEDULE_LINEAR:
        default: beta = torch_linspace_f32((float)c->beta_start, (float)c->beta_end, n, i); break;
        }
        float alpha = 1.0f - beta;
        prod *= (double)alpha; /* torch's CPU cumprod accumulates float in double */
        acp[i] = (float)prod;
    }
}

/* numpy's np.round: halves to even. */
static double round_half_even(double v) { return nearbyint(v); }

/* numpy.interp(x, arange(n), y) for x in [0, n - 1]. */
static double interp_index(const double *y, int n, double x) {
    if (x <= 0) return y[0];
    if (x >= n - 1) return y[n - 1];
    int j = (int)floor(x);
    double w = x - j;
    return y[j] + (y[j + 1] - y[j]) * w;
}

/* Fills s->timesteps (DDPM/DDIM integral; Euler float32) for cfg->spacing; returns the count
 * (trailing spacing can yield a different count, as numpy's arange would). */
static int make_timesteps(const wf_dit_sampler_config *c, int n, double *ts, int cap, bool euler) {
    int T = c->num_train_timesteps, count = 0;
    switch (c->spacing) {
    case WF_DIT_SPACING_LINSPACE:
        for (int i = 0; i < n && count < cap; i++) {
            double v = n == 1 ? 0.0 : (double)(T - 1) / (n - 1) * (n - 1 - i);
            if (i == 0) v = T - 1; /* numpy sets the endpoint exactly */
            ts[count++] = euler ? (double)(float)v : round_half_even(v);
        }
        break;
    case WF_DIT_SPACING_LEADING: {
        int ratio = T / n;
        for (int i = 0; i < n && count < cap; i++)
            ts[count++] = (double)((n - 1 - i) * ratio + c->steps_offset);
        break;
    }
    case WF_DIT_SPACING_TRAILING: {
        double ratio = (double)T / n;
        double len = ceil((0.0 - T) / -ratio);
        for (int k = 0; k < (int)len && count < cap; k++)
            ts[count++] = round_half_even((double)T + k * -ratio) - 1.0;
        break;
    }
    }
    return count;
}

void wf_dit_schedule_free(wf_dit_schedule *s) {
    if (!s) return;
    free(s->alphas_cumprod);
    free(s->timesteps);
    free(s->sigmas);
    free(s);
}

static wf_status build_euler(wf_dit_schedule *s, double *tmp) {
    int T = s->cfg.num_train_timesteps;
    for (int k = 0; k < T; k++) {
        float a = s->alphas_cumprod[k];
        tmp[k] = (double)sqrtf((1.0f - a) / a); /* computed in float32 by torch */
    }
    float max_sigma = 0;
    for (int i = 0; i < s->n_steps; i++) {
        s->sigmas[i] = (float)interp_index(tmp, T, s->timesteps[i]);
        if (s->sigmas[i] > max_sigma) max_sigma = s->sigmas[i];
    }
    s->sigmas[s->n_steps] = 0.0f;
    s->init_sigma = s->cfg.spacing == WF_DIT_SPACING_LEADING
                        ? (float)sqrt((double)max_sigma * max_sigma + 1.0)
                        : max_sigma;
    return WF_OK;
}

static float flow_shift(double shift, double s) {
    return (float)(shift * s / (1 + (shift - 1) * s));
}

static void build_flow(wf_dit_schedule *s) {
    int T = s->cfg.num_train_timesteps, n = s->n_steps;
    double sh = s->cfg.shift;
    /* __init__: sigmas = shift(t / T) for t = T..1 (float32); set_timesteps then spaces the
     * shifted extremes linearly and shifts again, as diffusers 0.31 does. */
    double sigma_max = flow_shift(sh, (double)(float)((float)T / (float)T));
    double sigma_min = flow_shift(sh, (double)(1.0f / (float)T));
    for (int i = 0; i < n; i++) {
        double t = n == 1 ? sigma_max * T
                          : sigma_max * T + (sigma_min * T - sigma_max * T) / (n - 1) * i;
        if (i == n - 1 && n > 1) t = sigma_min * T;
        s->sigmas[i] = flow_shift(sh, t / T);
        s->timesteps[i] = (double)(s->sigmas[i] * (float)T);
    }
    s->sigmas[n] = 0.0f;
    s->init_sigma = 1.0f;
}

wf_status wf_dit_schedule_new(const wf_dit_sampler_config *cfg, int n_steps, wf_dit_schedule **out,
                              char *err, size_t errlen) {
    if (!out) return wf_status_errorf(err, errlen, WF_EINVAL, "NULL argument");
    *out = NULL;
    if (!cfg) return wf_status_errorf(err, errlen, WF_EINVAL, "NULL argument");
    wf_status st = check_config(cfg, err, errlen);
    if (st != WF_OK) return st;
    int T = cfg->num_train_timesteps;
    if (n_steps < 1 || n_steps > T)
        return wf_status_errorf(err, errlen, WF_EINVAL, "steps %d outside 1..%d", n_steps, T);
    wf_dit_schedule *s = calloc(1, sizeof *s);
    double *tmp = NULL;
    if (!s) goto oom;
    s->cfg = *cfg;
    int cap = n_steps + 2;
    s->alphas_cumprod = malloc(sizeof(float) * (size_t)T);
    s->timesteps = malloc(sizeof(double) * (size_t)cap);
    s->sigmas = malloc(sizeof(float) * (size_t)(cap + 1));
    tmp = malloc(sizeof(double) * (size_t)T);
    if (!s->alphas_cumprod || !s->timesteps || !s->sigmas || !tmp) goto oom;
    build_alphas_cumprod(cfg, s->alphas_cumprod);
    s->step_ratio = T / n_steps;
    s->init_sigma = 1.0f;
    s->final_alpha = cfg->set_alpha_to_one ? 1.0f : s->alphas_cumprod[0];
    if (cfg->kind == WF_DIT_SAMPLER_KIND_FLOW_EULER) {
        s->n_steps = n_steps;
        build_flow(s);
    } else {
        bool euler = cfg->kind == WF_DIT_SAMPLER_KIND_EULER;
        s->n_steps = make_timesteps(cfg, n_steps, s->timesteps, cap, euler);
        for (int i = 0; i < s->n_steps; i++)
            if (s->timesteps[i] < 0 || s->timesteps[i] > T - 1) {
                st = wf_status_errorf(err, errlen, WF_EINVAL,
                                      "timestep %g of step %d outside 0..%d (steps_offset %d)",
                                      s->timesteps[i], i, T - 1, cfg->steps_offset);
                goto fail;
            }
        if (cfg->kind == WF_DIT_SAMPLER_KIND_EULER) build_euler(s, tmp);
    }
    free(tmp);
    *out = s;
    return WF_OK;
oom:
    st = wf_status_errorf(err, errlen, WF_ENOMEM, "schedule of %d steps", n_steps);
fail:
    free(tmp);
    wf_dit_schedule_free(s);
    return st;
}

int wf_dit_schedule_n_steps(const wf_dit_schedule *s) { return s->n_steps; }
const wf_dit_sampler_config *wf_dit_schedule_config(const wf_dit_schedule *s) { return &s->cfg; }

double wf_dit_schedule_timestep(const wf_dit_schedule *s, int i) {
    return i >= 0 && i < s->n_steps ? s->timesteps[i] : 0.0;
}

float wf_dit_schedule_init_sigma(const wf_dit_schedule *s) { return s->init_sigma; }

float wf_dit_schedule_input_scale(const wf_dit_schedule *s, int i) {
    if (s->cfg.kind != WF_DIT_SAMPLER_KIND_EULER || i < 0 || i >= s->n_steps) return 1.0f;
    double sg = s->sigmas[i];
    return (float)(1.0 / sqrt(sg * sg + 1.0));
}

/* ---- the step ---- */

/* Per-step coefficients, computed once per call in double. */
typedef struct step_coef {
    double a_t, a_prev, b_t;  /* alpha_cumprod at t and prev, 1 - a_t */
    double cur_alpha, cur_beta;
    double std;               /* noise scale (DDPM fixed variances, DDIM eta) */
    double min_log, max_log;  /* DDPM learned_range */
    double sigma, sigma_next; /* Euler, flow */
    bool noise;
} step_coef;

static double x0_of(const wf_dit_schedule *s, const step_coef *k, double x, double m) {
    switch (s->cfg.prediction) {
    case WF_DIT_PREDICTION_SAMPLE: return m;
    case WF_DIT_PREDICTION_V: return sqrt(k->a_t) * x - sqrt(k->b_t) * m;
    case WF_DIT_PREDICTION_EPSILON:
    default: return (x - sqrt(k->b_t) * m) / sqrt(k->a_t);
    }
}

static double clip(const wf_dit_sampler_config *c, double v) {
    if (!c->clip_sample) return v;
    double r = c->clip_sample_range;
    return v < -r ? -r : v > r ? r : v;
}

static void coefficients(const wf_dit_schedule *s, int i, step_coef *k) {
    const wf_dit_sampler_config *c = &s->cfg;
    memset(k, 0, sizeof *k);
    if (c->kind == WF_DIT_SAMPLER_KIND_EULER || c->kind == WF_DIT_SAMPLER_KIND_FLOW_EULER) {
        k->sigma = s->sigmas[i];
        k->sigma_next = s->sigmas[i + 1];
        return;
    }
    int t = (int)s->timesteps[i];
    int prev = t - s->step_ratio;
    k->a_t = s->alphas_cumprod[t];
    k->b_t = 1.0 - k->a_t;
    if (c->kind == WF_DIT_SAMPLER_KIND_DDPM) {
        k->a_prev = prev >= 0 ? s->alphas_cumprod[prev] : 1.0;
        k->cur_alpha = k->a_t / k->a_prev;
        k->cur_beta = 1.0 - k->cur_alpha;
        double var = (1.0 - k->a_prev) / k->b_t * k->cur_beta;
        if (var < 1e-20) var = 1e-20;
        k->noise = t > 0;
        k->min_log = log(var);
        k->max_log = log(k->cur_beta);
        k->std = c->variance == WF_DIT_VARIANCE_FIXED_LARGE ? sqrt(k->cur_beta) : sqrt(var);
    } else {
        k->a_prev = prev >= 0 ? s->alphas_cumprod[prev] : s->final_alpha;
        double var = (1.0 - k->a_prev) / k->b_t * (1.0 - k->a_t / k->a_prev);
        k->std = c->eta * sqrt(var);
        k->noise = c->eta > 0;
    }
}

static double step_one(const wf_dit_schedule *s, const step_coef *k, double x, double m,
                       double var_out, double z) {
    const wf_dit_sampler_config *c = &s->cfg;
    switch (c->kind) {
    case WF_DIT_SAMPLER_KIND_DDPM: {
        double x0 = clip(c, x0_of(s, k, x, m));
        double mean = sqrt(k->a_prev) * k->cur_beta / k->b_t * x0 +
                      sqrt(k->cur_alpha) * (1.0 - k->a_prev) / k->b_t * x;
        if (!k->noise) return mean;
        double std = k->std;
        if (c->variance == WF_DIT_VARIANCE_LEARNED_RANGE) {
            double frac = (var_out + 1.0) / 2.0;
            std = exp(0.5 * (frac * k->max_log + (1.0 - frac) * k->min_log));
        }
        return mean + std * z;
    }
    case WF_DIT_SAMPLER_KIND_DDIM: {
        double x0 = x0_of(s, k, x, m), eps;
        switch (c->prediction) {
        case WF_DIT_PREDICTION_SAMPLE: eps = (x - sqrt(k->a_t) * x0) / sqrt(k->b_t); break;
        case WF_DIT_PREDICTION_V: eps = sqrt(k->a_t) * m + sqrt(k->b_t) * x; break;
        case WF_DIT_PREDICTION_EPSILON:
        default: eps = m; break;
        }
        if (c->clip_sample) { /* use_clipped_model_output: eps consistent with the clipped x0 */
            x0 = clip(c, x0);
            eps = (x - sqrt(k->a_t) * x0) / sqrt(k->b_t);
        }
        double dir = sqrt(fmax(0.0, 1.0 - k->a_prev - k->std * k->std)) * eps;
        double prev = sqrt(k->a_prev) * x0 + dir;
        return k->noise ? prev + k->std * z : prev;
    }
    case WF_DIT_SAMPLER_KIND_EULER: {
        double sg = k->sigma, x0;
        switch (c->prediction) {
        case WF_DIT_PREDICTION_SAMPLE: x0 = m; break;
        case WF_DIT_PREDICTION_V: x0 = m * (-sg / sqrt(sg * sg + 1)) + x / (sg * sg + 1); break;
        case WF_DIT_PREDICTION_EPSILON:
        default: x0 = x - sg * m; break;
        }
        return x + (x - x0) / sg * (k->sigma_next - sg);
    }
    case WF_DIT_SAMPLER_KIND_FLOW_EULER: return x + (k->sigma_next - k->sigma) * m;
    }
    return x;
}

#define NOISE_CHUNK 256

wf_status wf_dit_schedule_step(const wf_dit_schedule *s, int i, const wf_dit_step_io *io) {
    if (!s || !io || !io->model_out || !io->x || !io->x_prev) return WF_EINVAL;
    if (i < 0 || i >= s->n_steps || io->channels < 1 || io->plane < 1) return WF_EINVAL;
    int C = io->channels;
    if (io->model_channels != C && io->model_channels != 2 * C) return WF_EINVAL;
    bool learned = s->cfg.kind == WF_DIT_SAMPLER_KIND_DDPM &&
                   s->cfg.variance == WF_DIT_VARIANCE_LEARNED_RANGE;
    if (learned && io->model_channels != 2 * C) return WF_EINVAL;
    step_coef k;
    coefficients(s, i, &k);
    size_t n = (size_t)C * io->plane;
    float zbuf[NOISE_CHUNK];
    for (size_t j0 = 0; j0 < n; j0 += NOISE_CHUNK) {
        size_t m = n - j0 < NOISE_CHUNK ? n - j0 : NOISE_CHUNK;
        const float *z = zbuf;
        if (!k.noise) memset(zbuf, 0, sizeof zbuf);
        else if (io->noise) z = io->noise + j0;
        else wf_dit_noise_fill(io->key, (uint32_t)i, j0, zbuf, m);
        for (size_t j = 0; j < m; j++) {
            size_t e = j0 + j;
            double v = learned ? io->model_out[n + e] : 0.0;
            io->x_prev[e] = (float)step_one(s, &k, io->x[e], io->model_out[e], v, z[j]);
        }
    }
    return WF_OK;
}

void wf_dit_cfg_combine(float *out, const float *cond, const float *uncond, size_t n_guided,
                        size_t n, float scale) {
    for (size_t j = 0; j < n_guided; j++) out[j] = uncond[j] + scale * (cond[j] - uncond[j]);
    if (out != cond)
        for (size_t j = n_guided; j < n; j++) out[j] = cond[j];
}

void wf_dit_scale(float *x, size_t n, float scale) {
    for (size_t j = 0; j < n; j++) x[j] *= scale;
}

void wf_dit_sampler_config_switch(const wf_dit_sampler_config *base, wf_dit_sampler_kind kind,
                                  wf_dit_sampler_config *out) {
    wf_dit_sampler_config b = *base;
    if (kind == b.kind) {
        *out = b;
        return;
    }
    wf_dit_sampler_config_default(kind, out);
    out->num_train_timesteps = b.num_train_timesteps;
    out->beta_start = b.beta_start;
    out->beta_end = b.beta_end;
    out->beta_schedule = b.beta_schedule;
    out->prediction = b.prediction;
}
