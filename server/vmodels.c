/* Virtual-model declarations: the --vmodel flag grammar and its JSON form, checked field by
 * field so a typo is an error that names the key, never a silently ignored option. */
#include "server/vmodels.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"

void wf_vmodel_spec_free(wf_vmodel_spec *v) {
    if (!v) return;
    for (int i = 0; i < v->n_adapters; i++) free(v->paths[i]);
    free(v->system);
    json_decref(v->defaults);
    memset(v, 0, sizeof *v);
}

wf_status wf_vmodel_spec_copy(wf_vmodel_spec *dst, const wf_vmodel_spec *src) {
    *dst = *src;
    for (int i = 0; i < WF_VMODEL_MAX_ADAPTERS; i++) dst->paths[i] = NULL;
    dst->system = NULL;
    dst->defaults = NULL;
    bool oom = false;
    for (int i = 0; i < src->n_adapters; i++) oom = oom || !(dst->paths[i] = strdup(src->paths[i]));
    if (src->system) oom = oom || !(dst->system = strdup(src->system));
    if (src->defaults) oom = oom || !(dst->defaults = json_deep_copy(src->defaults));
    if (oom) {
        wf_vmodel_spec_free(dst);
        return WF_ENOMEM;
    }
    return WF_OK;
}

/* The sampling fields a virtual model may default (the API's names). */
static const char *const k_defaults[] = {"temperature", "top_p", "top_k", "min_p", "max_tokens",
                                         "presence_penalty", "frequency_penalty",
                                         "repetition_penalty", "seed", "stop"};
#define N_DEFAULTS (sizeof k_defaults / sizeof k_defaults[0])
#define DEFAULT_KEYS "temperature, top_p, top_k, min_p, max_tokens, presence_penalty, " \
                     "frequency_penalty, repetition_penalty, seed, stop"

static bool is_default_key(const char *k, size_t n) {
    for (size_t i = 0; i < N_DEFAULTS; i++)
        if (strlen(k_defaults[i]) == n && memcmp(k_defaults[i], k, n) == 0) return true;
    return false;
}

/* The defaults must be what the API accepts in a request: checked by its own decoder. */
static wf_status check_defaults(wf_vmodel_spec *v, char *err, size_t errlen) {
    if (!v->defaults) return WF_OK;
    json_t *probe = json_deep_copy(v->defaults);
    if (!probe || json_object_set_new(probe, "prompt", json_string("x")) != 0) {
        json_decref(probe);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    }
    char *text = json_dumps(probe, JSON_COMPACT);
    json_decref(probe);
    if (!text) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    wf_openai_request r;
    wf_openai_error e;
    wf_status st = wf_openai_decode(WF_OPENAI_COMPLETION, text, strlen(text), &r, &e);
    free(text);
    if (st == WF_OK) {
        wf_openai_request_free(&r);
        return WF_OK;
    }
    if (st == WF_ENOMEM) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel '%s': default %s", v->id, e.message);
}

static wf_status set_default(wf_vmodel_spec *v, const char *key, json_t *val, char *err,
                             size_t errlen) {
    if (!val) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    if (!v->defaults && !(v->defaults = json_object())) {
        json_decref(val);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    }
    if (json_object_set_new(v->defaults, key, val) != 0)
        return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    return WF_OK;
}

wf_status wf_vmodel_spec_apply_defaults(const wf_vmodel_spec *v, const char *body, size_t len,
                                        char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (!v->defaults || json_object_size(v->defaults) == 0) return WF_OK;
    json_t *root = json_loadb(body ? body : "", len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return WF_OK;
    }
    bool added = false;
    const char *key;
    json_t *val;
    json_object_foreach(v->defaults, key, val) {
        json_t *own = json_object_get(root, key);
        if (own && !json_is_null(own)) continue;
        if (strcmp(key, "max_tokens") == 0 &&
            (own = json_object_get(root, "max_completion_tokens")) && !json_is_null(own))
            continue;
        if (json_object_set(root, key, val) != 0) {
            json_decref(root);
            return WF_ENOMEM;
        }
        added = true;
    }
    if (added) {
        if (!(*out = json_dumps(root, JSON_COMPACT))) {
            json_decref(root);
            return WF_ENOMEM;
        }
        *out_len = strlen(*out);
    }
    json_decref(root);
    return WF_OK;
}

static wf_status set_id(wf_vmodel_spec *v, const char *s, size_t n, char *err, size_t errlen) {
    if (n == 0 || n >= sizeof v->id)
        return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'id' must be 1..%d characters",
                                (int)sizeof v->id - 1);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || s[i] == ',' || s[i] == '"' || s[i] == '\\')
            return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'id' must not contain "
                                    "spaces, commas, quotes or backslashes");
    memcpy(v->id, s, n);
    v->id[n] = 0;
    return WF_OK;
}

static wf_status add_adapter(wf_vmodel_spec *v, const char *path, size_t n, double scale,
                             char *err, size_t errlen) {
    if (v->n_adapters == WF_VMODEL_MAX_ADAPTERS)
        return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel '%s': more than %d adapters",
                                v->id, WF_VMODEL_MAX_ADAPTERS);
    if (n == 0)
        return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel '%s': 'adapter' path is empty",
                                v->id);
    if (memchr(path, 0, n)) /* a JSON string may hold one; cutting the path there would load
                              * another file than the one named */
        return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel '%s': 'adapter' path contains a "
                                "NUL character", v->id);
    if (!isfinite(scale) || fabs(scale) > 1e6)
        return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel '%s': adapter scale must be a "
                                "finite number", v->id);
    char *p = strndup(path, n);
    if (!p) return wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
    v->paths[v->n_adapters] = p;
    v->scales[v->n_adapters++] = (float)scale;
    return WF_OK;
}

static wf_status check_done(wf_vmodel_spec *v, char *err, size_t errlen) {
    if (!v->id[0]) return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'id' is required");
    if (v->n_adapters == 0)
        return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel '%s': at least one 'adapter' is "
                                "required", v->id);
    if (!(v->weight > 0.0) || !isfinite(v->weight) || v->weight > 1e6)
        return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel '%s': 'weight' must be in (0, "
                                "1e6]", v->id);
    return check_defaults(v, err, errlen);
}

static bool parse_double(const char *s, size_t n, double *out) {
    char buf[64];
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    errno = 0;
    *out = strtod(buf, &end);
    return errno == 0 && *end == 0;
}

wf_status wf_vmodel_spec_parse(const char *text, wf_vmodel_spec *v, char *err, size_t errlen) {
    memset(v, 0, sizeof *v);
    v->weight = 1.0;
    wf_status st = WF_OK;
    const char *p = text ? text : "";
    while (*p && st == WF_OK) {
        const char *eq = strchr(p, '=');
        if (!eq) {
            st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: '%.40s' is not key=value", p);
            break;
        }
        size_t kl = (size_t)(eq - p);
        const char *val = eq + 1;
        if (kl == 6 && memcmp(p, "system", 6) == 0) { /* the rest, commas included */
            free(v->system);
            if (!(v->system = strdup(val))) st = WF_ENOMEM;
            break;
        }
        const char *comma = strchr(val, ',');
        size_t vl = comma ? (size_t)(comma - val) : strlen(val);
        if (kl == 2 && memcmp(p, "id", 2) == 0) {
            st = set_id(v, val, vl, err, errlen);
        } else if (kl == 7 && memcmp(p, "adapter", 7) == 0) {
            /* PATH[:SCALE]: a suffix that parses as a number is the scale */
            const char *colon = NULL;
            for (size_t k = vl; k > 0 && !colon; k--)
                if (val[k - 1] == ':') colon = val + k - 1;
            double scale = 1.0;
            size_t pl = vl;
            if (colon && parse_double(colon + 1, vl - (size_t)(colon + 1 - val), &scale))
                pl = (size_t)(colon - val);
            else scale = 1.0;
            st = add_adapter(v, val, pl, scale, err, errlen);
        } else if ((kl == 13 && memcmp(p, "max_in_flight", 13) == 0) ||
                   (kl == 11 && memcmp(p, "max_running", 11) == 0) ||
                   (kl == 10 && memcmp(p, "max_queued", 10) == 0)) {
            double q;
            int *dst = kl == 13 ? &v->max_in_flight : kl == 11 ? &v->max_running : &v->max_queued;
            /* !(q >= 0) refuses NaN before the cast, which would be undefined */
            if (!parse_double(val, vl, &q) || !(q >= 0) || q > 1e9 || q != floor(q))
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: '%.*s' must be "
                                      "a non-negative integer", (int)kl, p);
            else *dst = (int)q;
        } else if (kl == 7 && (memcmp(p, "ttft_ms", 7) == 0 || memcmp(p, "tpot_ms", 7) == 0)) {
            double *dst = p[1] == 't' ? &v->ttft_ms : &v->tpot_ms;
            if (!parse_double(val, vl, dst) || !(*dst > 0) || *dst > 1e9)
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: '%.7s' must be a number of "
                                      "milliseconds > 0", p);
        } else if (kl == 6 && memcmp(p, "weight", 6) == 0) {
            if (!parse_double(val, vl, &v->weight))
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'weight' must be a "
                                      "number");
        } else if (kl == 4 && memcmp(p, "stop", 4) == 0) {
            json_t *stop = v->defaults ? json_object_get(v->defaults, "stop") : NULL;
            if (!stop) {
                st = set_default(v, "stop", json_array(), err, errlen);
                stop = st == WF_OK ? json_object_get(v->defaults, "stop") : NULL;
            }
            if (stop && json_array_append_new(stop, json_stringn(val, vl)) != 0)
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'stop' must be UTF-8 text");
        } else if (is_default_key(p, kl)) {
            double x;
            char key[32];
            snprintf(key, sizeof key, "%.*s", (int)kl, p);
            bool integer = strcmp(key, "max_tokens") == 0 || strcmp(key, "top_k") == 0 ||
                           strcmp(key, "seed") == 0;
            /* strtod takes "nan", "inf" and 1e300: refuse them here, before the cast to an
             * integer (undefined out of range) and json_real (NULL for non-finite, which
             * set_default would report as out of memory). Ranges are check_defaults' job. */
            if (!parse_double(val, vl, &x) || !isfinite(x) ||
                (integer && (fabs(x) > 9007199254740992.0 || x != floor(x))))
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: '%s' must be %s", key,
                                      integer ? "an integer" : "a finite number");
            else
                st = set_default(v, key, integer ? json_integer((long long)x) : json_real(x), err,
                                 errlen);
        } else {
            st = wf_status_errorf(err, errlen, WF_EINVAL,
                                  "vmodel: unknown key '%.*s' (id, adapter, weight, "
                                  "max_in_flight, max_running, max_queued, ttft_ms, tpot_ms, " DEFAULT_KEYS ", system)",
                                  (int)(kl < 40 ? kl : 40), p);
        }
        p = comma ? comma + 1 : val + vl;
    }
    if (st == WF_OK) st = check_done(v, err, errlen);
    if (st == WF_ENOMEM) wf_errorf(err, errlen, "out of memory");
    if (st != WF_OK) wf_vmodel_spec_free(v);
    return st;
}

wf_status wf_vmodel_spec_from_json(const json_t *o, wf_vmodel_spec *v, char *err,
                                   size_t errlen) {
    memset(v, 0, sizeof *v);
    v->weight = 1.0;
    if (!json_is_object(o))
        return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: expected a JSON object");
    wf_status st = WF_OK;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)o, key, val) {
        if (strcmp(key, "id") == 0) {
            if (!json_is_string(val)) {
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'id' must be a string");
                break;
            }
            st = set_id(v, json_string_value(val), json_string_length(val), err, errlen);
        } else if (strcmp(key, "adapter") == 0) {
            if (!json_is_string(val)) {
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'adapter' must be a path");
                break;
            }
            st = add_adapter(v, json_string_value(val), json_string_length(val), 1.0, err, errlen);
        } else if (strcmp(key, "adapters") == 0) {
            if (!json_is_array(val)) {
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'adapters' must be a list "
                                      "of {\"path\", \"scale\"}");
                break;
            }
            size_t i;
            json_t *it;
            json_array_foreach(val, i, it) {
                json_t *path = json_object_get(it, "path"), *scale = json_object_get(it, "scale");
                if (!json_is_string(path) || (scale && !json_is_number(scale))) {
                    st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'adapters[%zu]' needs a "
                                          "string 'path' and an optional number 'scale'", i);
                    break;
                }
                st = add_adapter(v, json_string_value(path), json_string_length(path),
                                 scale ? json_number_value(scale) : 1.0, err, errlen);
                if (st != WF_OK) break;
            }
        } else if (strcmp(key, "max_in_flight") == 0 || strcmp(key, "max_running") == 0 ||
                   strcmp(key, "max_queued") == 0) {
            if (!json_is_integer(val) || json_integer_value(val) < 0 ||
                json_integer_value(val) > 1000000000) {
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: '%s' must be a "
                                      "non-negative integer", key);
                break;
            }
            int *dst = key[4] == 'i' ? &v->max_in_flight : key[4] == 'r' ? &v->max_running
                                                                        : &v->max_queued;
            *dst = (int)json_integer_value(val);
        } else if (strcmp(key, "ttft_ms") == 0 || strcmp(key, "tpot_ms") == 0) {
            double x = json_is_number(val) ? json_number_value(val) : -1;
            if (!(x > 0) || x > 1e9) {
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: '%s' must be a number of "
                                      "milliseconds > 0", key);
                break;
            }
            if (key[1] == 't') v->ttft_ms = x;
            else v->tpot_ms = x;
        } else if (strcmp(key, "weight") == 0) {
            if (!json_is_number(val)) {
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'weight' must be a number");
                break;
            }
            v->weight = json_number_value(val);
        } else if (strcmp(key, "system") == 0) {
            if (!json_is_string(val) || strlen(json_string_value(val)) != json_string_length(val)) {
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'system' must be a string "
                                      "without NUL characters");
                break;
            }
            free(v->system);
            if (!(v->system = strdup(json_string_value(val)))) {
                st = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory");
                break;
            }
        } else if (strcmp(key, "defaults") == 0) {
            if (!json_is_object(val)) {
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'defaults' must be an "
                                      "object of sampling parameters (" DEFAULT_KEYS ")");
                break;
            }
            const char *dk;
            json_t *dv;
            json_object_foreach(val, dk, dv) {
                if (!is_default_key(dk, strlen(dk))) {
                    st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'defaults.%.40s' is not "
                                          "a sampling parameter a virtual model may default ("
                                          DEFAULT_KEYS ")", dk);
                    break;
                }
                if (json_is_null(dv)) continue;
                if ((st = set_default(v, dk, json_deep_copy(dv), err, errlen)) != WF_OK) break;
            }
        } else {
            st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: unknown field '%.40s' (id, "
                                  "adapter, adapters, weight, max_in_flight, max_running, max_queued, "
                                  "ttft_ms, tpot_ms, system, defaults)", key);
        }
        if (st != WF_OK) break;
    }
    if (st == WF_OK) st = check_done(v, err, errlen);
    if (st != WF_OK) wf_vmodel_spec_free(v);
    return st;
}

wf_status wf_vmodel_spec_from_text(const char *text, wf_vmodel_spec *v, char *err,
                                   size_t errlen) {
    if (!text || text[0] != '{') return wf_vmodel_spec_parse(text, v, err, errlen);
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    if (!o) {
        memset(v, 0, sizeof *v);
        return wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: invalid JSON: %s", je.text);
    }
    wf_status st = wf_vmodel_spec_from_json(o, v, err, errlen);
    json_decref(o);
    return st;
}

uint32_t wf_vmodel_spec_num(const wf_vmodel_spec *v) {
    uint64_t h = wf_vmodel_spec_salt(v);
    for (const char *c = v->id; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    uint32_t n = (uint32_t)(h ^ (h >> 32));
    return n ? n : 1;
}

uint64_t wf_vmodel_spec_salt(const wf_vmodel_spec *v) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over path bytes, a separator, scale bits */
    for (int i = 0; i < v->n_adapters; i++) {
        for (const char *c = v->paths[i]; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
        uint32_t bits;
        memcpy(&bits, &v->scales[i], 4);
        h = (h ^ 0xff) * 0x100000001b3ull;
        for (int k = 0; k < 4; k++) h = (h ^ ((bits >> (8 * k)) & 0xff)) * 0x100000001b3ull;
    }
    return h ? h : 1;
}

char *wf_vmodel_spec_to_json(const wf_vmodel_spec *v) {
    json_t *o = json_object(), *ads = json_array();
    bool ok = o && ads;
    for (int i = 0; ok && i < v->n_adapters; i++)
        ok = json_array_append_new(ads, json_pack("{s:s,s:f}", "path", v->paths[i], "scale",
                                                  (double)v->scales[i])) == 0;
    ok = ok && json_object_set_new(o, "id", json_string(v->id)) == 0 &&
         json_object_set(o, "adapters", ads) == 0 &&
         json_object_set_new(o, "weight", json_real(v->weight)) == 0 &&
         json_object_set_new(o, "max_in_flight", json_integer(v->max_in_flight)) == 0 &&
         json_object_set_new(o, "max_running", json_integer(v->max_running)) == 0 &&
         json_object_set_new(o, "max_queued", json_integer(v->max_queued)) == 0;
    if (ok && v->ttft_ms > 0) ok = json_object_set_new(o, "ttft_ms", json_real(v->ttft_ms)) == 0;
    if (ok && v->tpot_ms > 0) ok = json_object_set_new(o, "tpot_ms", json_real(v->tpot_ms)) == 0;
    if (ok && v->system) ok = json_object_set_new(o, "system", json_string(v->system)) == 0;
    if (ok && v->defaults) ok = json_object_set(o, "defaults", v->defaults) == 0;
    char *text = ok ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(ads);
    json_decref(o);
    return text;
}
