/* Image workloads for weft-bench: request classes (size, steps, SLO factor) and piecewise-Poisson
 * arrival profiles, after GF-DiT's benchmark recipe.
 *
 *     wf_loadgen_profile p;
 *     if (wf_loadgen_profile_load("tridentserve", &p, err, sizeof err) != WF_OK) puts(err);
 *     wf_loadgen_profile_set_class(&p, &(wf_loadgen_image_class){.name = "S", .width = 8, ...});
 *     p.classes[0].t_single_ms = 120;                 // measured by a calibration run, or given
 *     wf_loadgen_profile_scale_time(&p, 60.0 / wf_loadgen_profile_end_s(&p)); // a 60 s run
 *     wf_loadgen_profile_scale_rate(&p, 0.8 / wf_loadgen_profile_offered_load(&p, 1)); // 80% load
 *     size_t n = wf_loadgen_profile_sample(&p, seed, max_n, arrival_s, class_idx);
 *     double deadline = wf_loadgen_image_deadline_ms(&p.classes[c]);  // alpha * T_single
 *
 * A profile is a list of phases [start_s, end_s), each a Poisson process of its own rate whose
 * requests draw their class from the phase's mix (weights over the classes). Every request of
 * class c has the deadline arrival + alpha_c * T_single_c, T_single_c being the latency of one
 * request of that class served alone (GF-DiT's definition; alphas default to 1.5/2/6 for S/M/L).
 *
 * Profile text (built-in ones: loadgen/profiles/NAME.profile, compiled into weft-bench):
 *     # comment
 *     class S 8x8 steps=5 alpha=1.5 priority=100       (optional: replaces a default class)
 *     phase warmup 0 60 0.8/min S=0.5 M=0.35 L=0.15    (name start_s end_s rate mix...)
 * Rates are N/s, N/min or a bare N (per second); a mix names classes defined before it. Phases
 * are given in time order and do not overlap. Without class lines the classes are the defaults
 * (wf_loadgen_profile_default_classes). Errors name the file and line. Pure: no I/O but reading
 * the file; not thread-safe. */
#ifndef WF_LOADGEN_PROFILE_H
#define WF_LOADGEN_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/base/status.h"

#define WF_LOADGEN_MAX_IMAGE_CLASSES 8
#define WF_LOADGEN_MAX_PHASES 64
/* Bounds of a class: width and height in pixels, denoising steps, |priority|. */
#define WF_LOADGEN_MAX_IMAGE_DIM 16384
#define WF_LOADGEN_MAX_IMAGE_STEPS 100000
#define WF_LOADGEN_MAX_PRIORITY 1000000

typedef struct wf_loadgen_image_class {
    char name[16];
    int width, height;  /* the "size" sent: WxH */
    int steps;          /* num_inference_steps */
    double alpha;       /* deadline = arrival + alpha * t_single_ms */
    bool has_priority;  /* send "priority" with weft's SLO extension */
    int priority;
    double t_single_ms; /* latency alone; 0 = not known yet (calibrate) */
} wf_loadgen_image_class;

typedef struct wf_loadgen_phase {
    char name[32];
    double start_s, end_s;
    double rate;                              /* requests/s; 0 = no arrivals (a drain) */
    double mix[WF_LOADGEN_MAX_IMAGE_CLASSES]; /* weight per class index */
} wf_loadgen_phase;

typedef struct wf_loadgen_profile {
    char name[64];
    size_t n_classes;
    wf_loadgen_image_class classes[WF_LOADGEN_MAX_IMAGE_CLASSES];
    size_t n_phases;
    wf_loadgen_phase phases[WF_LOADGEN_MAX_PHASES];
} wf_loadgen_profile;

/* The default classes S, M, L: one size (8x8, weftd's default DiT's; --image-size changes it)
 * and 5/15/45 steps, so their costs span 9x as GF-DiT's S/M/L do (weft's DiTs serve one size
 * each); alphas 1.5/2/6, priorities 100/50/0. Clears phases. */
void wf_loadgen_profile_default_classes(wf_loadgen_profile *p);
/* Parses profile text (see above) on top of the default classes. `origin` names it in errors. */
wf_status wf_loadgen_profile_parse(const char *text, const char *origin, wf_loadgen_profile *p,
                                   char *err, size_t errlen);
/* A built-in profile by name (short, tridentserve, foreground_burst) or a file path (anything
 * with a '/' or a '.', or a name that is not built in). WF_ENOTFOUND, WF_EFORMAT. */
wf_status wf_loadgen_profile_load(const char *name_or_path, wf_loadgen_profile *p, char *err,
                                  size_t errlen);
/* Names of the built-in profiles, NULL-terminated. */
const char *const *wf_loadgen_profile_builtin_names(void);
/* A single phase [0, duration_s) at `rate` with the given mix (NULL: equal weights). */
void wf_loadgen_profile_set_poisson(wf_loadgen_profile *p, double rate, double duration_s,
                                    const double *mix);

/* Adds or replaces (by name) a class. WF_EINVAL when the table is full or the class invalid. */
wf_status wf_loadgen_profile_set_class(wf_loadgen_profile *p, const wf_loadgen_image_class *c);
/* Index of the class named `name`, or -1. */
int wf_loadgen_profile_class_index(const wf_loadgen_profile *p, const char *name);
/* Parses "NAME:WxH:STEPS[:ALPHA[:PRIORITY]]" (the --image-class flag). */
wf_status wf_loadgen_image_class_parse(const char *s, wf_loadgen_image_class *c, char *err,
                                       size_t errlen);
/* Parses a mix "S=0.5,M=0.3,L=0.2" over p's classes into mix[n_classes]; WF_EINVAL. */
wf_status wf_loadgen_profile_parse_mix(const wf_loadgen_profile *p, const char *s, double *mix,
                                       char *err, size_t errlen);

/* End of the last phase in seconds. */
double wf_loadgen_profile_end_s(const wf_loadgen_profile *p);
/* Multiplies every phase's start and end by k (> 0); rates stay. */
void wf_loadgen_profile_scale_time(wf_loadgen_profile *p, double k);
/* Multiplies every phase's rate by k (>= 0). */
void wf_loadgen_profile_scale_rate(wf_loadgen_profile *p, double k);
/* Expected requests of the whole profile (sum of rate x length). */
double wf_loadgen_profile_expected_requests(const wf_loadgen_profile *p);
/* Expected offered load on `servers` servers: the work (sum over requests of T_single) over
 * servers x the span of the phases that have arrivals. NAN when a class with weight has no
 * t_single_ms, 0 when nothing arrives. */
double wf_loadgen_profile_offered_load(const wf_loadgen_profile *p, int servers);

/* Samples the profile's arrivals with `seed`: for every phase in order, exponential gaps at its
 * rate from its start until its end, each request's class drawn from its mix. Writes at most
 * max_n arrival times (seconds, ascending) and class indices; returns how many. Deterministic
 * for a seed, on every platform (the generator is arrival.h's). */
size_t wf_loadgen_profile_sample(const wf_loadgen_profile *p, uint64_t seed, size_t max_n,
                                 double *arrival_s, int *class_idx);

/* A request's relative deadline, alpha x T_single in ms; NAN when T_single is unknown. */
double wf_loadgen_image_deadline_ms(const wf_loadgen_image_class *c);

#endif
