/* Request datasets for weft-bench: synthetic prompts, ShareGPT JSON files, prompt lists, and
 * the length specs (fixed, uniform, histogram file) that size them.
 *
 *     wf_loadgen_dataset_opts o = {.kind = WF_LOADGEN_DATA_SYNTHETIC, .n_requests = 100,
 *                                  .seed = 1};
 *     wf_loadgen_len_spec_parse("256", &o.input_len, err, sizeof err);
 *     wf_loadgen_len_spec_parse("64:128", &o.output_len, err, sizeof err);
 *     wf_loadgen_dataset ds;
 *     if (wf_loadgen_dataset_build(&o, &ds, err, sizeof err) != WF_OK) puts(err);
 *     char *text = wf_loadgen_prompt_text(&ds.items[i]);  // + .input_tokens, .output_tokens
 *     free(text);
 *     wf_loadgen_dataset_free(&ds);
 *
 * Length specs: "N" fixed; "LO:HI" uniform on [LO, HI]; "@FILE" a histogram file whose lines
 * are "LEN WEIGHT" or "LO-HI WEIGHT" (a bucket, uniform inside), '#' comments and blank lines
 * ignored. Token counts of text are estimated (no tokenizer here: we speak HTTP only) as
 * ceil(bytes / 4), the usual English BPE ratio; synthetic prompts use one common English word
 * per token, which BPE vocabularies hold as single tokens. The same seed gives the same items.
 * Errors come back as a status and a message naming the file and line. Not thread-safe. */
#ifndef WF_LOADGEN_DATASET_H
#define WF_LOADGEN_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen/arrival.h"
#include "loadgen/metrics.h"
#include "proto/base/status.h"

typedef enum wf_loadgen_len_kind {
    WF_LOADGEN_LEN_FIXED = 0,
    WF_LOADGEN_LEN_UNIFORM,
    WF_LOADGEN_LEN_HIST,
} wf_loadgen_len_kind;

typedef struct wf_loadgen_len_spec {
    wf_loadgen_len_kind kind;
    int32_t lo, hi;     /* fixed: lo == hi */
    size_t n_bins;      /* histogram */
    int32_t *bin_lo, *bin_hi;
    double *cum;        /* cumulative weights, cum[n_bins - 1] = total */
} wf_loadgen_len_spec;

/* Parses a length spec; lengths must be 1..1,000,000. Owns any histogram arrays. */
wf_status wf_loadgen_len_spec_parse(const char *text, wf_loadgen_len_spec *out, char *err,
                                    size_t errlen);
/* Loads a histogram file (see above). WF_ENOTFOUND, WF_EFORMAT (with the line number). */
wf_status wf_loadgen_hist_load(const char *path, wf_loadgen_len_spec *out, char *err,
                               size_t errlen);
int32_t wf_loadgen_len_spec_sample(const wf_loadgen_len_spec *spec, wf_workload_rng *rng);
/* Mean length of the spec (for reports). */
double wf_loadgen_len_spec_mean(const wf_loadgen_len_spec *spec);
void wf_loadgen_len_spec_free(wf_loadgen_len_spec *spec);

typedef enum wf_loadgen_data_kind {
    WF_LOADGEN_DATA_SYNTHETIC = 0,
    WF_LOADGEN_DATA_SHAREGPT,
    WF_LOADGEN_DATA_PROMPTS,
} wf_loadgen_data_kind;

typedef struct wf_loadgen_prompt {
    const char *text;      /* file prompt, owned by the dataset; NULL for synthetic ones */
    uint64_t text_seed;    /* synthetic: the words are drawn from this seed when sent */
    int32_t input_tokens;  /* estimate */
    int32_t output_tokens; /* max_tokens to request */
    int slo_class;         /* -1 when no classes */
} wf_loadgen_prompt;

typedef struct wf_loadgen_dataset {
    wf_loadgen_prompt *items;
    size_t n;
    char **sources;  /* distinct prompts the file gave (after filtering), shuffled */
    size_t n_source;
} wf_loadgen_dataset;

typedef struct wf_loadgen_dataset_opts {
    wf_loadgen_data_kind kind;
    const char *path;               /* sharegpt / prompts file */
    wf_loadgen_len_spec input_len;  /* synthetic prompt lengths */
    wf_loadgen_len_spec output_len; /* output lengths (sharegpt: used when set_output) */
    int set_output;                 /* sharegpt: 0 = the reply's estimated length */
    int32_t max_total_len;          /* sharegpt: skip prompt + output above this (0 = 2048) */
    size_t n_requests;
    uint64_t seed;
    const wf_loadgen_slo_class *classes;
    size_t n_classes;
} wf_loadgen_dataset_opts;

/* Builds exactly o->n_requests items (file prompts are shuffled with the seed and reused
 * cyclically when there are fewer). WF_EINVAL, WF_ENOTFOUND, WF_EFORMAT, WF_ENOMEM. */
wf_status wf_loadgen_dataset_build(const wf_loadgen_dataset_opts *o, wf_loadgen_dataset *out,
                                   char *err, size_t errlen);
void wf_loadgen_dataset_free(wf_loadgen_dataset *ds);

/* The prompt text of an item, malloc'ed (caller frees); NULL on ENOMEM. Synthetic prompts are
 * rendered here, when sent, so that a million-request dataset stays small in memory. */
char *wf_loadgen_prompt_text(const wf_loadgen_prompt *p);

/* Estimated token count of text: ceil(bytes / 4), at least 1. */
int32_t wf_loadgen_estimate_tokens(const char *text);

#endif
