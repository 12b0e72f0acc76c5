/* Dataset loading and request-sequence generation for weft-bench (see dataset.h). */
#include "loadgen/dataset.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN_MAX 1000000

/* Common English words that gpt2-style BPE vocabularies hold as one token with a leading
 * space, so N of them make a prompt of about N tokens. */
static const char *const WORDS[] = {
    "the", "of", "and", "to", "in", "is", "for", "that", "with", "as", "on", "was", "by", "at",
    "from", "this", "be", "or", "are", "an", "it", "which", "not", "his", "have", "has", "but",
    "were", "had", "their", "one", "also", "its", "first", "new", "after", "they", "who", "more",
    "other", "been", "time", "two", "all", "when", "there", "she", "would", "her", "can", "into",
    "only", "most", "some", "used", "may", "over", "many", "such", "where", "then", "school",
    "year", "years", "city", "world", "state", "during", "between", "number", "part", "known",
    "well", "three", "people", "water", "house", "family", "music", "game", "war", "team",
    "group", "area", "river", "film", "book", "life", "light", "night", "day", "work", "system",
    "order", "place", "point", "power", "line", "name", "history", "country", "government",
    "company", "road", "station", "small", "large", "long", "high", "great", "little", "old",
    "good", "local", "early", "public", "national", "second", "south", "north", "west", "east",
    "under", "while", "about", "because", "before", "against", "through", "around", "each",
    "both", "same", "made", "called", "became", "began", "found", "built", "played", "moved",
    "open", "start", "end", "head", "hand", "side", "home", "field", "form", "case", "land",
    "sea", "air", "fire", "stone", "tree", "garden", "bridge", "market", "church", "king",
    "army", "island", "village", "county", "park", "street", "center", "member", "player",
    "season", "club", "league", "party", "president", "university", "college", "student",
    "language", "art", "paper", "letter", "story", "song", "album", "record", "show", "season",
    "model", "engine", "car", "train", "ship", "plane", "energy", "data", "program", "computer",
    "market", "price", "money", "trade", "law", "court", "police", "health", "food", "animal",
    "bird", "fish", "plant", "forest", "mountain", "valley", "lake", "coast", "summer", "winter",
    "spring", "morning", "evening", "week", "month", "century", "simple", "strong", "quick",
    "green", "blue", "red", "white", "black", "golden", "silver", "young", "free", "full",
};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

int32_t wf_loadgen_estimate_tokens(const char *text) {
    size_t n = strlen(text);
    size_t t = (n + 3) / 4;
    if (t < 1) t = 1;
    return t > INT32_MAX ? INT32_MAX : (int32_t)t;
}

/* Parses a positive length in [1, LEN_MAX] from s..end. */
static int parse_len(const char *s, char **end, int32_t *out) {
    if (!isdigit((unsigned char)*s)) return -1;
    errno = 0;
    long v = strtol(s, end, 10);
    if (errno || v < 1 || v > LEN_MAX) return -1;
    *out = (int32_t)v;
    return 0;
}

void wf_loadgen_len_spec_free(wf_loadgen_len_spec *spec) {
    free(spec->bin_lo);
    free(spec->bin_hi);
    free(spec->cum);
    memset(spec, 0, sizeof *spec);
}

wf_status wf_loadgen_hist_load(const char *path, wf_loadgen_len_spec *out, char *err,
                               size_t errlen) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) return wf_status_errorf(err, errlen, WF_ENOTFOUND, "histogram %s: %s", path, strerror(errno));
    wf_status st = WF_OK;
    size_t cap = 0;
    char line[512];
    int lineno = 0;
    double total = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (*p == '\0' || *p == '#') continue;
        int32_t lo, hi;
        char *e;
        if (parse_len(p, &e, &lo) != 0) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT,
                      "histogram %s:%d: expected LEN or LO-HI (1..%d) then a weight", path, lineno,
                      LEN_MAX);
            goto fail_parse;
        }
        hi = lo;
        if (*e == '-') {
            if (parse_len(e + 1, &e, &hi) != 0 || hi < lo) {
                st = wf_status_errorf(err, errlen, WF_EFORMAT, "histogram %s:%d: bad bucket upper bound",
                          path, lineno);
                goto fail_parse;
            }
        }
        if (!isspace((unsigned char)*e)) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT, "histogram %s:%d: expected whitespace and a weight",
                      path, lineno);
            goto fail_parse;
        }
        errno = 0;
        char *we;
        double w = strtod(e, &we);
        while (isspace((unsigned char)*we)) we++;
        if (errno || we == e || (*we != '\0' && *we != '#') || !(w >= 0) || w > 1e300) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT, "histogram %s:%d: weight must be a number >= 0",
                      path, lineno);
            goto fail_parse;
        }
        if (out->n_bins == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            int32_t *a = realloc(out->bin_lo, ncap * sizeof *a);
            if (a) out->bin_lo = a;
            int32_t *b = realloc(out->bin_hi, ncap * sizeof *b);
            if (b) out->bin_hi = b;
            double *c = realloc(out->cum, ncap * sizeof *c);
            if (c) out->cum = c;
            if (!a || !b || !c) {
                st = wf_status_errorf(err, errlen, WF_ENOMEM, "histogram %s: out of memory", path);
                goto fail_parse;
            }
            cap = ncap;
        }
        total += w;
        out->bin_lo[out->n_bins] = lo;
        out->bin_hi[out->n_bins] = hi;
        out->cum[out->n_bins] = total;
        out->n_bins++;
    }
    if (ferror(f)) {
        st = wf_status_errorf(err, errlen, WF_EIO, "histogram %s: read error", path);
        goto fail_parse;
    }
    if (out->n_bins == 0 || !(total > 0)) {
        st = wf_status_errorf(err, errlen, WF_EFORMAT, "histogram %s: no bins with a positive weight", path);
        goto fail_parse;
    }
    fclose(f);
    out->kind = WF_LOADGEN_LEN_HIST;
    out->lo = out->bin_lo[0];
    out->hi = out->bin_hi[0];
    for (size_t i = 0; i < out->n_bins; i++) {
        if (out->bin_lo[i] < out->lo) out->lo = out->bin_lo[i];
        if (out->bin_hi[i] > out->hi) out->hi = out->bin_hi[i];
    }
    return WF_OK;
fail_parse:
    fclose(f);
    wf_loadgen_len_spec_free(out);
    return st;
}

wf_status wf_loadgen_len_spec_parse(const char *text, wf_loadgen_len_spec *out, char *err,
                                    size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!text || !*text) return wf_status_errorf(err, errlen, WF_EINVAL, "empty length spec");
    if (text[0] == '@') return wf_loadgen_hist_load(text + 1, out, err, errlen);
    char *e;
    if (parse_len(text, &e, &out->lo) != 0) goto bad;
    out->hi = out->lo;
    out->kind = WF_LOADGEN_LEN_FIXED;
    if (*e == ':') {
        if (parse_len(e + 1, &e, &out->hi) != 0 || out->hi < out->lo) goto bad;
        out->kind = WF_LOADGEN_LEN_UNIFORM;
    }
    if (*e != '\0') goto bad;
    return WF_OK;
bad:
    return wf_status_errorf(err, errlen, WF_EINVAL,
                "bad length spec '%s': use N, LO:HI (1..%d) or @histogram-file", text, LEN_MAX);
}

int32_t wf_loadgen_len_spec_sample(const wf_loadgen_len_spec *spec, wf_workload_rng *rng) {
    switch (spec->kind) {
    case WF_LOADGEN_LEN_FIXED: return spec->lo;
    case WF_LOADGEN_LEN_UNIFORM: return (int32_t)wf_workload_rng_range(rng, spec->lo, spec->hi);
    case WF_LOADGEN_LEN_HIST: {
        double u = wf_workload_rng_uniform(rng) * spec->cum[spec->n_bins - 1];
        size_t lo = 0, hi = spec->n_bins - 1;
        while (lo < hi) { /* first bin whose cumulative weight exceeds u */
            size_t mid = (lo + hi) / 2;
            if (spec->cum[mid] > u) hi = mid;
            else lo = mid + 1;
        }
        return (int32_t)wf_workload_rng_range(rng, spec->bin_lo[lo], spec->bin_hi[lo]);
    }
    }
    return spec->lo;
}

double wf_loadgen_len_spec_mean(const wf_loadgen_len_spec *spec) {
    if (spec->kind != WF_LOADGEN_LEN_HIST) return (spec->lo + spec->hi) / 2.0;
    double s = 0, prev = 0;
    for (size_t i = 0; i < spec->n_bins; i++) {
        s += (spec->cum[i] - prev) * (spec->bin_lo[i] + spec->bin_hi[i]) / 2.0;
        prev = spec->cum[i];
    }
    return s / spec->cum[spec->n_bins - 1];
}

/* ---- source prompts ------------------------------------------------------------------------ */

typedef struct source {
    char **text;
    int32_t *out_tokens; /* sharegpt reply estimate, 0 for prompt lists */
    size_t n, cap;
} source;

static void source_free(source *s) {
    for (size_t i = 0; i < s->n; i++) free(s->text[i]);
    free(s->text);
    free(s->out_tokens);
    memset(s, 0, sizeof *s);
}

static int source_push(source *s, char *text, int32_t out) {
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 64;
        char **t = realloc(s->text, ncap * sizeof *t);
        if (t) s->text = t;
        int32_t *o = realloc(s->out_tokens, ncap * sizeof *o);
        if (o) s->out_tokens = o;
        if (!t || !o) return -1;
        s->cap = ncap;
    }
    s->text[s->n] = text;
    s->out_tokens[s->n] = out;
    s->n++;
    return 0;
}

/* The text of a ShareGPT turn and whether it is the user's ("human"/"user") or not. */
static const char *turn_text(json_t *turn, int *is_user) {
    if (!json_is_object(turn)) return NULL;
    json_t *from = json_object_get(turn, "from");
    if (!from) from = json_object_get(turn, "role");
    json_t *val = json_object_get(turn, "value");
    if (!val) val = json_object_get(turn, "content");
    if (!json_is_string(from) || !json_is_string(val)) return NULL;
    const char *f = json_string_value(from);
    *is_user = strcmp(f, "human") == 0 || strcmp(f, "user") == 0;
    return json_string_value(val);
}

static wf_status load_sharegpt(const char *path, int32_t max_total, source *src, char *err,
                               size_t errlen) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        FILE *f = fopen(path, "r");
        if (!f) return wf_status_errorf(err, errlen, WF_ENOTFOUND, "sharegpt %s: %s", path, strerror(errno));
        fclose(f);
        return wf_status_errorf(err, errlen, WF_EFORMAT, "sharegpt %s:%d:%d: %s", path, jerr.line,
                    jerr.column, jerr.text);
    }
    wf_status st = WF_OK;
    if (!json_is_array(root)) {
        st = wf_status_errorf(err, errlen, WF_EFORMAT,
                  "sharegpt %s: top level must be an array of {\"conversations\": [...]}", path);
        goto out;
    }
    size_t i;
    json_t *item;
    json_array_foreach(root, i, item) {
        json_t *conv = json_is_object(item) ? json_object_get(item, "conversations") : NULL;
        if (!conv && json_is_object(item)) conv = json_object_get(item, "conversation");
        if (!json_is_array(conv)) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT,
                      "sharegpt %s: entry %zu has no \"conversations\" array", path, i);
            goto out;
        }
        if (json_array_size(conv) < 2) continue; /* no reply to size the output by */
        int u0 = 0, u1 = 0;
        const char *prompt = turn_text(json_array_get(conv, 0), &u0);
        const char *reply = turn_text(json_array_get(conv, 1), &u1);
        if (!prompt || !reply) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT,
                      "sharegpt %s: entry %zu: turns need string \"from\" and \"value\"", path, i);
            goto out;
        }
        if (!u0 || u1) continue; /* vLLM takes conversations that open with a user turn */
        int32_t pin = wf_loadgen_estimate_tokens(prompt), pout = wf_loadgen_estimate_tokens(reply);
        /* vLLM's filter: drop very short sequences and ones beyond the context budget. */
        if (pin < 4 || pout < 4 || (int64_t)pin + pout > max_total) continue;
        char *dup = strdup(prompt);
        if (!dup || source_push(src, dup, pout) != 0) {
            free(dup);
            st = wf_status_errorf(err, errlen, WF_ENOMEM, "sharegpt %s: out of memory", path);
            goto out;
        }
    }
    if (src->n == 0)
        st = wf_status_errorf(err, errlen, WF_EFORMAT,
                  "sharegpt %s: no usable conversation (need a user turn then a reply, 4..%d "
                  "tokens in all)", path, max_total);
out:
    json_decref(root);
    return st;
}

/* One prompt per line; a line starting with '"' is a JSON string (so prompts may hold
 * newlines); blank lines are skipped. */
static wf_status load_prompts(const char *path, source *src, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) return wf_status_errorf(err, errlen, WF_ENOTFOUND, "prompts %s: %s", path, strerror(errno));
    wf_status st = WF_OK;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        if (memchr(line, '\0', (size_t)len)) {
            st = wf_status_errorf(err, errlen, WF_EFORMAT, "prompts %s:%d: NUL byte in a text file", path,
                      lineno);
            goto out;
        }
        char *text;
        if (line[0] == '"') {
            json_error_t jerr;
            json_t *s = json_loads(line, JSON_DECODE_ANY, &jerr);
            if (!json_is_string(s)) {
                json_decref(s);
                st = wf_status_errorf(err, errlen, WF_EFORMAT, "prompts %s:%d: a line starting with '\"' "
                          "must be one JSON string", path, lineno);
                goto out;
            }
            text = strdup(json_string_value(s));
            json_decref(s);
        } else {
            json_t *s = json_string(line); /* jansson refuses invalid UTF-8, as servers would */
            if (!s) {
                st = wf_status_errorf(err, errlen, WF_EFORMAT, "prompts %s:%d: not valid UTF-8", path,
                             lineno);
                goto out;
            }
            json_decref(s);
            text = strdup(line);
        }
        if (!text || source_push(src, text, 0) != 0) {
            free(text);
            st = wf_status_errorf(err, errlen, WF_ENOMEM, "prompts %s: out of memory", path);
            goto out;
        }
    }
    if (src->n == 0) st = wf_status_errorf(err, errlen, WF_EFORMAT, "prompts %s: no prompts in the file", path);
out:
    free(line);
    fclose(f);
    return st;
}

/* ---- the request sequence ----------------------------------------------------------------- */

static char *synthetic_prompt(int32_t tokens, uint64_t seed) {
    wf_workload_rng rng;
    wf_workload_rng_seed(&rng, seed);
    size_t cap = (size_t)tokens * 12 + 1, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    for (int32_t i = 0; i < tokens; i++) {
        const char *w = WORDS[wf_workload_rng_range(&rng, 0, N_WORDS - 1)];
        size_t wl = strlen(w);
        if (len + wl + 2 > cap) break; /* cannot happen: words are < 11 bytes */
        if (i) s[len++] = ' ';
        memcpy(s + len, w, wl);
        len += wl;
    }
    s[len] = '\0';
    return s;
}

char *wf_loadgen_prompt_text(const wf_loadgen_prompt *p) {
    if (p->text) return strdup(p->text);
    return synthetic_prompt(p->input_tokens, p->text_seed);
}

static int pick_class(const wf_loadgen_slo_class *classes, size_t n, wf_workload_rng *rng) {
    if (n == 0) return -1;
    double total = 0;
    for (size_t i = 0; i < n; i++) total += classes[i].weight > 0 ? classes[i].weight : 0;
    if (!(total > 0)) return (int)wf_workload_rng_range(rng, 0, (int64_t)n - 1);
    double u = wf_workload_rng_uniform(rng) * total;
    for (size_t i = 0; i < n; i++) {
        double w = classes[i].weight > 0 ? classes[i].weight : 0;
        if (u < w) return (int)i;
        u -= w;
    }
    return (int)n - 1;
}

void wf_loadgen_dataset_free(wf_loadgen_dataset *ds) {
    for (size_t i = 0; i < ds->n_source; i++) free(ds->sources[i]);
    free(ds->sources);
    free(ds->items);
    memset(ds, 0, sizeof *ds);
}

wf_status wf_loadgen_dataset_build(const wf_loadgen_dataset_opts *o, wf_loadgen_dataset *out,
                                   char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (o->n_requests == 0) return wf_status_errorf(err, errlen, WF_EINVAL, "no requests to build");
    source src = {0};
    wf_status st = WF_OK;
    /* Separate streams so that, e.g., the class mix does not change when the lengths do. */
    wf_workload_rng rng_len, rng_text, rng_class, rng_order;
    wf_workload_rng_seed(&rng_len, o->seed ^ 0x6c656e67746873ULL);
    wf_workload_rng_seed(&rng_text, o->seed ^ 0x74657874ULL);
    wf_workload_rng_seed(&rng_class, o->seed ^ 0x636c617373ULL);
    wf_workload_rng_seed(&rng_order, o->seed ^ 0x6f72646572ULL);

    if (o->kind == WF_LOADGEN_DATA_SHAREGPT || o->kind == WF_LOADGEN_DATA_PROMPTS) {
        if (!o->path) return wf_status_errorf(err, errlen, WF_EINVAL, "dataset file not given");
        st = o->kind == WF_LOADGEN_DATA_SHAREGPT
                 ? load_sharegpt(o->path, o->max_total_len > 0 ? o->max_total_len : 2048, &src,
                                 err, errlen)
                 : load_prompts(o->path, &src, err, errlen);
        if (st != WF_OK) goto fail_load;
        for (size_t i = src.n; i > 1; i--) { /* seeded Fisher-Yates */
            size_t j = (size_t)wf_workload_rng_range(&rng_order, 0, (int64_t)i - 1);
            char *t = src.text[i - 1];
            src.text[i - 1] = src.text[j];
            src.text[j] = t;
            int32_t ot = src.out_tokens[i - 1];
            src.out_tokens[i - 1] = src.out_tokens[j];
            src.out_tokens[j] = ot;
        }
    }
    out->items = calloc(o->n_requests, sizeof *out->items);
    if (!out->items) {
        st = wf_status_errorf(err, errlen, WF_ENOMEM, "out of memory for %zu requests", o->n_requests);
        goto fail_load;
    }
    for (size_t i = 0; i < o->n_requests; i++) {
        wf_loadgen_prompt *p = &out->items[i];
        if (o->kind == WF_LOADGEN_DATA_SYNTHETIC) {
            p->input_tokens = wf_loadgen_len_spec_sample(&o->input_len, &rng_len);
            p->output_tokens = wf_loadgen_len_spec_sample(&o->output_len, &rng_len);
            p->text_seed = wf_workload_rng_next(&rng_text);
        } else {
            size_t k = i % src.n;
            p->text = src.text[k];
            p->input_tokens = wf_loadgen_estimate_tokens(src.text[k]);
            if (o->kind == WF_LOADGEN_DATA_SHAREGPT && !o->set_output)
                p->output_tokens = src.out_tokens[k];
            else
                p->output_tokens = wf_loadgen_len_spec_sample(&o->output_len, &rng_len);
        }
        p->slo_class = pick_class(o->classes, o->n_classes, &rng_class);
    }
    out->n = o->n_requests;
    /* The dataset keeps the source prompts that the items point into. */
    out->sources = src.text;
    out->n_source = src.n;
    free(src.out_tokens);
    return WF_OK;
fail_load:
    source_free(&src);
    return st;
}
