/* Virtual-model declarations: the --vmodel flag grammar and its JSON form, checked field by
 * field so a typo is an error that names the key, never a silently ignored option. */
#include "server/vmodels.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wf_vmodel_spec_free(wf_vmodel_spec *v) {
    if (!v) return;
    for (int i = 0; i < v->n_adapters; i++) free(v->paths[i]);
    free(v->system);
    memset(v, 0, sizeof *v);
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
    return WF_OK;
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
        } else if (kl == 13 && memcmp(p, "max_in_flight", 13) == 0) {
            double q;
            /* !(q >= 0) refuses NaN before the cast, which would be undefined */
            if (!parse_double(val, vl, &q) || !(q >= 0) || q > 1e9 || q != floor(q))
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'max_in_flight' must be "
                                      "a non-negative integer");
            else v->max_in_flight = (int)q;
        } else if (kl == 7 && (memcmp(p, "ttft_ms", 7) == 0 || memcmp(p, "tpot_ms", 7) == 0)) {
            double *dst = p[1] == 't' ? &v->ttft_ms : &v->tpot_ms;
            if (!parse_double(val, vl, dst) || !(*dst > 0) || *dst > 1e9)
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: '%.7s' must be a number of "
                                      "milliseconds > 0", p);
        } else if (kl == 6 && memcmp(p, "weight", 6) == 0) {
            if (!parse_double(val, vl, &v->weight))
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'weight' must be a "
                                      "number");
        } else {
            st = wf_status_errorf(err, errlen, WF_EINVAL,
                                  "vmodel: unknown key '%.*s' (id, adapter, weight, "
                                  "max_in_flight, ttft_ms, tpot_ms, system)",
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
        } else if (strcmp(key, "max_in_flight") == 0) {
            if (!json_is_integer(val) || json_integer_value(val) < 0 ||
                json_integer_value(val) > 1000000000) {
                st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: 'max_in_flight' must be a "
                                      "non-negative integer");
                break;
            }
            v->max_in_flight = (int)json_integer_value(val);
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
        } else {
            st = wf_status_errorf(err, errlen, WF_EINVAL, "vmodel: unknown field '%.40s' (id, "
                                  "adapter, adapters, weight, max_in_flight, ttft_ms, tpot_ms, "
                                  "system)", key);
        }
        if (st != WF_OK) break;
    }
    if (st == WF_OK) st = check_done(v, err, errlen);
    if (st != WF_OK) wf_vmodel_spec_free(v);
    return st;
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
