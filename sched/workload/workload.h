/* GF-DiT image workloads, shared by weft-bench (loadgen/, real runs) and the DiT simulator
 * (sched/dit_workload.h, weft-dit-sim), so that one set of files and one parser define the
 * requests both see: request classes (size, steps, SLO factor), piecewise-Poisson arrival
 * profiles, the trace files of GF-DiT's workload JSON, and the seeded generator that samples
 * them. Links only proto/base and jansson.
 *
 *     wf_workload_profile p;
 *     if (wf_workload_profile_load("tridentserve", &p, err, sizeof err) != WF_OK) puts(err);
 *     wf_workload_profile_set_class(&p, &(wf_workload_class){.name = "S", .width = 8, ...});
 *     p.classes[0].t_single_ms = 120;                 // measured by a calibration run, or given
 *     wf_workload_profile_scale_time(&p, 60.0 / wf_workload_profile_end_s(&p)); // a 60 s run
 *     wf_workload_profile_scale_rate(&p, 0.8 / wf_workload_profile_offered_load(&p, 1)); // 80% load
 *     size_t n = wf_workload_profile_sample(&p, seed, max_n, arrival_s, class_idx);
 *     double deadline = wf_workload_class_deadline_ms(&p.classes[c]);  // alpha * T_single
 *
 *     wf_workload_trace t;                              // a `weft-bench --trace-out` file
 *     if (wf_workload_trace_read("trace.json", &p, &t, err, sizeof err) == WF_OK) {
 *         ... t.arrival_s[i], p.classes[t.class_idx[i]] ...
 *         wf_workload_trace_free(&t);
 *     }
 *
 * A profile is a list of phases [start_s, end_s), each a Poisson process of its own rate whose
 * requests draw their class from the phase's mix (weights over the classes). Every request of
 * class c has the deadline arrival + alpha_c * T_single_c, T_single_c being the latency of one
 * request of that class served alone (GF-DiT's definition; alphas default to 1.5/2/6 for S/M/L).
 *
 * Profile text (built-in ones: sched/workload/profiles/NAME.profile, compiled in):
 *     # comment
 *     class S 8x8 steps=5 alpha=1.5 priority=100       (optional: replaces a default class)
 *     phase warmup 0 60 0.8/min S=0.5 M=0.35 L=0.15    (name start_s end_s rate mix...)
 * Rates are N/s, N/min or a bare N (per second); a mix names classes defined before it. Phases
 * are given in time order and do not overlap; a phase's weights and its rate x length are
 * finite. Without class lines the classes are the defaults (wf_workload_profile_default_classes).
 * Errors name the file and line. Pure: no I/O but reading the file; not thread-safe. */
#ifndef WF_SCHED_WORKLOAD_H
#define WF_SCHED_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

/* ---- the seeded generator (xoshiro256**): the same numbers for a seed on every platform;
 * allocation-free, one per thread ---- */
typedef struct wf_workload_rng {
    uint64_t s[4]; /* xoshiro256** state */
} wf_workload_rng;

/* Seeds the state from one 64-bit value (splitmix64 expansion); any seed is valid. */
void wf_workload_rng_seed(wf_workload_rng *rng, uint64_t seed);
/* Next raw 64-bit value. */
uint64_t wf_workload_rng_next(wf_workload_rng *rng);
/* Uniform double in [0, 1). */
double wf_workload_rng_uniform(wf_workload_rng *rng);
/* Uniform integer in [lo, hi] (inclusive); lo when hi <= lo. */
int64_t wf_workload_rng_range(wf_workload_rng *rng, int64_t lo, int64_t hi);
/* Standard normal deviate (Box-Muller). */
double wf_workload_rng_normal(wf_workload_rng *rng);
/* Gamma(shape, scale) deviate, shape > 0 (Marsaglia-Tsang; boosted for shape < 1). */
double wf_workload_rng_gamma(wf_workload_rng *rng, double shape, double scale);
/* An index drawn from weights w[0..n) (total: their sum, > 0) with one uniform draw; entries
 * <= 0 are never drawn. */
int wf_workload_rng_pick(wf_workload_rng *rng, const double *w, size_t n, double total);

/* ---- classes and profiles ---- */

#define WF_WORKLOAD_MAX_CLASSES 8
#define WF_WORKLOAD_MAX_PHASES 64
/* Bounds of a class: width and height in pixels, denoising steps, |priority|. */
#define WF_WORKLOAD_MAX_DIM 16384
#define WF_WORKLOAD_MAX_STEPS 100000
#define WF_WORKLOAD_MAX_PRIORITY 1000000

typedef struct wf_workload_class {
    char name[16];
    int width, height;  /* the "size" sent: WxH */
    int steps;          /* num_inference_steps */
    double alpha;       /* deadline = arrival + alpha * t_single_ms */
    bool has_priority;  /* send "priority" with weft's SLO extension */
    int priority;
    double t_single_ms; /* latency alone; 0 = not known yet (calibrate) */
} wf_workload_class;

typedef struct wf_workload_phase {
    char name[32];
    double start_s, end_s;
    double rate;                              /* requests/s; 0 = no arrivals (a drain) */
    double mix[WF_WORKLOAD_MAX_CLASSES]; /* weight per class index */
} wf_workload_phase;

typedef struct wf_workload_profile {
    char name[64];
    size_t n_classes;
    wf_workload_class classes[WF_WORKLOAD_MAX_CLASSES];
    size_t n_phases;
    wf_workload_phase phases[WF_WORKLOAD_MAX_PHASES];
} wf_workload_profile;

/* The default classes S, M, L: one size (8x8, weftd's default DiT's; --image-size changes it)
 * and 5/15/45 steps, so their costs span 9x as GF-DiT's S/M/L do (weft's DiTs serve one size
 * each); alphas 1.5/2/6, priorities 100/50/0. Clears phases. */
void wf_workload_profile_default_classes(wf_workload_profile *p);
/* Parses profile text (see above) on top of the default classes. `origin` names it in errors. */
wf_status wf_workload_profile_parse(const char *text, const char *origin, wf_workload_profile *p,
                                   char *err, size_t errlen);
/* A built-in profile by name (short, tridentserve, foreground_burst) or a file path (anything
 * with a '/' or a '.', or a name that is not built in). WF_ENOTFOUND, WF_EFORMAT. */
wf_status wf_workload_profile_load(const char *name_or_path, wf_workload_profile *p, char *err,
                                  size_t errlen);
/* Names of the built-in profiles, NULL-terminated. */
const char *const *wf_workload_profile_builtin_names(void);
/* A single phase [0, duration_s) at `rate` with the given mix (NULL: equal weights). */
void wf_workload_profile_set_poisson(wf_workload_profile *p, double rate, double duration_s,
                                    const double *mix);

/* Adds or replaces (by name) a class. WF_EINVAL when the table is full or the class invalid. */
wf_status wf_workload_profile_set_class(wf_workload_profile *p, const wf_workload_class *c);
/* Index of the class named `name`, or -1. */
int wf_workload_profile_class_index(const wf_workload_profile *p, const char *name);
/* Parses "NAME:WxH:STEPS[:ALPHA[:PRIORITY]]" (the --image-class flag). */
wf_status wf_workload_class_parse(const char *s, wf_workload_class *c, char *err,
                                       size_t errlen);
/* Parses a mix "S=0.5,M=0.3,L=0.2" over p's classes into mix[n_classes]; WF_EINVAL. */
wf_status wf_workload_profile_parse_mix(const wf_workload_profile *p, const char *s, double *mix,
                                       char *err, size_t errlen);

/* End of the last phase in seconds. */
double wf_workload_profile_end_s(const wf_workload_profile *p);
/* Multiplies every phase's start and end by k (> 0); rates stay. */
void wf_workload_profile_scale_time(wf_workload_profile *p, double k);
/* Multiplies every phase's rate by k (>= 0). */
void wf_workload_profile_scale_rate(wf_workload_profile *p, double k);
/* Expected requests of the whole profile (sum of rate x length). */
double wf_workload_profile_expected_requests(const wf_workload_profile *p);
/* Expected offered load on `servers` servers: the work (sum over requests of T_single) over
 * servers x the span of the phases that have arrivals. NAN when a class with weight has no
 * t_single_ms, 0 when nothing arrives. */
double wf_workload_profile_offered_load(const wf_workload_profile *p, int servers);

/* Samples the profile's arrivals with `seed`: for every phase in order, exponential gaps at its
 * rate from its start until its end, each request's class drawn from its mix. Writes at most
 * max_n arrival times (seconds, ascending) and class indices; returns how many. Deterministic
 * for a seed, on every platform (wf_workload_rng). */
size_t wf_workload_profile_sample(const wf_workload_profile *p, uint64_t seed, size_t max_n,
                                 double *arrival_s, int *class_idx);

/* A request's relative deadline, alpha x T_single in ms; NAN when T_single is unknown. */
double wf_workload_class_deadline_ms(const wf_workload_class *c);

/* ---- traces: GF-DiT's workload JSON ---- */

/* The requests of a trace, sorted by arrival. */
typedef struct wf_workload_trace {
    size_t n;
    double *arrival_s; /* ascending */
    int *class_idx;    /* into the profile's classes */
    int64_t *seed;     /* the request's "seed" (0..2^31-1); -1 when the trace gives none */
} wf_workload_trace;

/* Writes t's requests as a trace file in GF-DiT's workload JSON shape: {"metadata": {profile,
 * phases, classes, rate_scale, seed, ...}, "requests": [{request_id, request_class, arrival_ms,
 * width, height, num_steps, priority, deadline_ms (absolute, ms from the start),
 * profiled_optimal_latency_ms (T_single), seed}]}, so that a simulator replays the very
 * requests a real run sends. Requests of a class index outside p are skipped. WF_EIO on a
 * write failure, with a message. */
wf_status wf_workload_trace_write(const char *path, const wf_workload_profile *p,
                                  double rate_scale, uint64_t seed, const wf_workload_trace *t,
                                  char *err, size_t errlen);
/* Reads a trace in that shape (weft-bench's --trace-out, or GF-DiT's generated workloads):
 * classes come from the requests (request_class with width, height, num_steps; T_single =
 * profiled_optimal_latency_ms and alpha = (deadline_ms - arrival_ms) / T_single where given,
 * else alpha 2 and T_single unknown) and replace p's classes of the same name; requests are
 * sorted by arrival. *t is filled (free with wf_workload_trace_free), or zeroed on an error:
 * WF_ENOTFOUND, WF_EFORMAT naming the request and field, WF_ENOMEM. */
wf_status wf_workload_trace_read(const char *path, wf_workload_profile *p, wf_workload_trace *t,
                                 char *err, size_t errlen);
void wf_workload_trace_free(wf_workload_trace *t); /* zeroes it; a zeroed one is a no-op */

#endif
