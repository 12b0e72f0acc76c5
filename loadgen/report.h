/* weft-bench outputs: the summary table, the --json result file, the --csv per-request file,
 * `weft-bench compare`, and gnuplot plots.
 *
 *     wf_loadgen_point pts[n];             // one per load point (a sweep has several)
 *     wf_loadgen_report_print(stdout, &info, pts, n);
 *     wf_loadgen_report_write_json("out.json", &info, pts, n, err, sizeof err);
 *     wf_loadgen_report_write_csv("out.csv", pts, n, err, sizeof err);
 *     wf_loadgen_report_plot("out", pts, n, err, sizeof err);   // out_latency_cdf.png, ...
 *     wf_loadgen_compare(stdout, "a.json", "b.json", err, sizeof err);
 *
 * Result JSON keys follow vLLM benchmark_serving's (mean_ttft_ms, p99_itl_ms, ...) so existing
 * tooling can read them. Not thread-safe; every function reports failures as a status and a
 * message. */
#ifndef WF_LOADGEN_REPORT_H
#define WF_LOADGEN_REPORT_H

#include <stdio.h>

#include "loadgen/image.h"
#include "loadgen/metrics.h"
#include "loadgen/runner.h"
#include "proto/base/status.h"

typedef struct wf_loadgen_point {
    char label[64];            /* "concurrency=4", "rate=2" */
    wf_loadgen_mode mode;
    int concurrency;
    double rate, burstiness;
    int max_concurrency;
    wf_loadgen_run_result res;
    wf_loadgen_summary sum;
    bool image;                 /* an image workload point: isum is the report */
    double scale;               /* image profile: the rate factor of this point (0 = none) */
    wf_loadgen_image_summary isum;
} wf_loadgen_point;

/* What the run was, for the header of reports. Strings are borrowed. */
typedef struct wf_loadgen_info {
    const char *label;   /* --label, e.g. "weftd" */
    const char *target;  /* host:port + path */
    const char *model;
    const char *dataset; /* "synthetic in=128 out=64", "sharegpt:FILE", ... */
    bool stream;
    uint64_t seed;
    size_t num_requests;
    double duration_s;
    const wf_loadgen_slo_class *classes;
    size_t n_classes;
    bool fresh_prompts;  /* each load point had its own requests (--fresh-prompts) */
    const char *workload; /* "text" or "images" */
    const char *profile;  /* image arrival profile description, or NULL */
} wf_loadgen_info;

void wf_loadgen_report_print(FILE *f, const wf_loadgen_info *info, const wf_loadgen_point *pts,
                             size_t n);
wf_status wf_loadgen_report_write_json(const char *path, const wf_loadgen_info *info,
                                       const wf_loadgen_point *pts, size_t n, char *err,
                                       size_t errlen);
wf_status wf_loadgen_report_write_csv(const char *path, const wf_loadgen_point *pts, size_t n,
                                      char *err, size_t errlen);
/* Writes PREFIX_latency_cdf.png (TTFT, TPOT, e2e CDFs, one curve per point) and, with more
 * than one point, PREFIX_throughput.png (throughput and goodput vs offered load). Data and
 * script files go beside them. Needs gnuplot on PATH: WF_EUNSUPPORTED otherwise. */
wf_status wf_loadgen_report_plot(const char *prefix, const wf_loadgen_point *pts, size_t n,
                                 char *err, size_t errlen);
/* Prints two result files side by side with B/A ratios, point by point. */
wf_status wf_loadgen_compare(FILE *f, const char *path_a, const char *path_b, char *err,
                             size_t errlen);

#endif
