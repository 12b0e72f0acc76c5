/* Virtual models of the served backbone: their declarations (the --vmodel flag, the config
 * file, the POST /admin/models body) and the front end's registry of them (ids the API
 * accepts as `model`, the number their tasks carry, the prefix-cache salt, in-flight counts for
 * drain-then-remove, and the adapter memory budget).
 *
 *     wf_vmodel_spec v;
 *     char err[256];
 *     if (wf_vmodel_spec_parse("id=sql,adapter=/a/sql.gguf:0.5,weight=2,system=Answer in SQL.",
 *                              &v, err, sizeof err) != WF_OK) die(err);
 *     wf_server_vmodel_add(server, &v, err, sizeof err);   // server/server.h: loads, binds
 *     wf_vmodel_spec_free(&v);
 *
 * Flag grammar: comma-separated key=value pairs: id (required; not the backbone's name),
 * adapter=PATH[:SCALE] (1..WF_VMODEL_MAX_ADAPTERS, in order; SCALE default 1), weight (> 0,
 * default 1: the fair-sharing weight), max_in_flight (requests running or queued at once; more
 * get 429 with Retry-After, for this virtual model only; default 0: no quota), max_running (at
 * most this many of its requests run at once: the scheduler keeps the others waiting while
 * other models' requests go ahead; 0: no limit), max_queued (at most this many of its requests
 * wait: those beyond its max_running seats, or without max_running those that have not
 * started generating; one more gets 429 with Retry-After, for this virtual model only; 0: no
 * quota), ttft_ms and
 * tpot_ms (its SLO class: the targets of its requests that state no "slo"; 0: the server's
 * defaults), default sampling parameters temperature, top_p, top_k, min_p, max_tokens,
 * presence_penalty, frequency_penalty, repetition_penalty, seed and stop=TEXT (repeatable, up
 * to 4; no commas in the flag form), used by its requests that do not set them (checked as the
 * API checks a request's), system=TEXT (must come last: the text runs to the end,
 * commas included; prepended as a system message to chat requests that carry none).
 * JSON form (config file "vmodels" entries and POST /admin/models): {"id": ..., "adapters":
 * [{"path": ..., "scale": ...}] or "adapter": "PATH", "weight": ..., "max_in_flight": ..., "max_running": ..., "max_queued": ...,
 * "ttft_ms": ..., "tpot_ms": ..., "system": ..., "defaults": {"temperature": ..., "stop":
 * [...], ...}}.
 * Errors name the key: WF_EINVAL. Thread-safety: specs are plain values. */
#ifndef WF_SERVER_VMODELS_H
#define WF_SERVER_VMODELS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

#define WF_VMODEL_MAX_ADAPTERS 8
#define WF_VMODEL_ID_MAX 128

typedef struct wf_vmodel_spec {
    char id[WF_VMODEL_ID_MAX];
    int n_adapters;
    char *paths[WF_VMODEL_MAX_ADAPTERS]; /* owned */
    float scales[WF_VMODEL_MAX_ADAPTERS];
    double weight;
    int max_in_flight;                   /* 0: no quota */
    int max_running, max_queued;         /* 0: no limit */
    double ttft_ms, tpot_ms;             /* SLO class; 0: the server's defaults */
    char *system;                        /* owned; NULL: none */
    json_t *defaults;                    /* owned object of sampling fields; NULL: none */
} wf_vmodel_spec;

wf_status wf_vmodel_spec_parse(const char *text, wf_vmodel_spec *out, char *err, size_t errlen);
wf_status wf_vmodel_spec_from_json(const json_t *o, wf_vmodel_spec *out, char *err,
                                   size_t errlen);
/* Either form, as the --vmodel flag and the config file give it: a JSON object when text
 * starts with '{', else the flag grammar. */
wf_status wf_vmodel_spec_from_text(const char *text, wf_vmodel_spec *out, char *err,
                                   size_t errlen);
void wf_vmodel_spec_free(wf_vmodel_spec *v);
/* A deep copy (WF_ENOMEM leaves *dst empty). */
wf_status wf_vmodel_spec_copy(wf_vmodel_spec *dst, const wf_vmodel_spec *src);

/* A request body with v's default sampling parameters added where the request sets none
 * (absent or null; max_completion_tokens counts as max_tokens): WF_OK with *out a malloc'd
 * JSON text, or *out NULL when nothing is added (no defaults, all set, or a body that is not a
 * JSON object: the decoder reports that). WF_ENOMEM. */
wf_status wf_vmodel_spec_apply_defaults(const wf_vmodel_spec *v, const char *body, size_t len,
                                        char **out, size_t *out_len);

/* v in the JSON form (what wf_vmodel_spec_from_json reads back into the same spec): a
 * malloc'd text, NULL when out of memory. Worker processes are sent it (proto VMODEL frames). */
char *wf_vmodel_spec_to_json(const wf_vmodel_spec *v);

/* The prefix-cache namespace of this adapter list (paths and scales, in order): virtual
 * models with the same adapters share cached prompt blocks, others never do. Never 0 (0 is
 * the bare backbone). */
uint64_t wf_vmodel_spec_salt(const wf_vmodel_spec *v);

/* The number its tasks carry, derived from its id and adapters (never 0): processes that
 * declare the same virtual model (a coordinator and its workers) agree on it without talking,
 * and a worker declaring it differently has no binding for it (its tasks fail, clearly)
 * instead of running other adapters. */
uint32_t wf_vmodel_spec_num(const wf_vmodel_spec *v);

#endif
