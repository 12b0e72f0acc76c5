/* libFuzzer target for the virtual-model declarations (server/vmodels.h): the --vmodel flag
 * grammar on the input as text, and the JSON form (config file, POST /admin/models) on the
 * same bytes when they parse as JSON. A parsed spec must hold what the grammar promises (an id,
 * 1..WF_VMODEL_MAX_ADAPTERS non-empty paths of exactly the bytes given, finite scales, a weight
 * in (0, 1e6]); a failure must say why and leave nothing allocated (LSan).
 * weft-fuzz: covers=server/vmodels.c */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "server/vmodels.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void check_spec(const wf_vmodel_spec *v) {
    size_t idl = strnlen(v->id, sizeof v->id);
    if (idl == 0 || idl >= sizeof v->id) abort();
    if (v->n_adapters < 1 || v->n_adapters > WF_VMODEL_MAX_ADAPTERS) abort();
    for (int i = 0; i < v->n_adapters; i++)
        if (!v->paths[i] || !v->paths[i][0] || !isfinite(v->scales[i])) abort();
    if (!(v->weight > 0.0) || !(v->weight <= 1e6)) abort();
    if (v->max_in_flight < 0 || v->ttft_ms < 0 || v->tpot_ms < 0) abort();
    if (wf_vmodel_spec_salt(v) == 0) abort();
    sink += v->system ? strlen(v->system) : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    text[size] = 0;
    wf_vmodel_spec v;
    char err[256] = "";
    if (wf_vmodel_spec_parse(text, &v, err, sizeof err) == WF_OK) {
        /* the flag form cannot carry a NUL: every path is a piece of the text */
        for (int i = 0; i < v.n_adapters; i++)
            if (!strstr(text, v.paths[i])) abort();
        check_spec(&v);
        wf_vmodel_spec_free(&v);
    } else if (!err[0] || v.n_adapters || v.system) {
        abort();
    }
    json_t *o = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
    if (o) {
        err[0] = 0;
        if (wf_vmodel_spec_from_json(o, &v, err, sizeof err) == WF_OK) {
            check_spec(&v);
            /* a path is kept whole: a NUL inside a JSON string must be refused, not cut */
            json_t *one = json_object_get(o, "adapter");
            if (json_is_string(one)) { /* "adapters" may stack more: it is one of the paths */
                bool whole = false;
                for (int i = 0; i < v.n_adapters; i++)
                    whole = whole || (json_string_length(one) == strlen(v.paths[i]) &&
                                      memcmp(v.paths[i], json_string_value(one), strlen(v.paths[i])) == 0);
                if (!whole) abort();
            }
            json_t *sys = json_object_get(o, "system");
            if (json_is_string(sys) && json_string_length(sys) != strlen(v.system)) abort();
            wf_vmodel_spec_free(&v);
        } else if (!err[0] || v.n_adapters || v.system) {
            abort();
        }
        json_decref(o);
    }
    free(text);
    return 0;
}
