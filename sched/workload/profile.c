/* Image request classes and piecewise-Poisson arrival profiles (see workload.h). */
#include "sched/workload/workload.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The profile files of sched/workload/profiles, compiled in by CMake (workload_profiles.c). */
typedef struct wf_workload_builtin_profile {
    const char *name, *text;
} wf_workload_builtin_profile;
extern const wf_workload_builtin_profile wf_workload_builtin_profiles[];
extern const char *const wf_workload_builtin_profile_names[];

#define MAX_DIM WF_WORKLOAD_MAX_DIM
#define MAX_STEPS WF_WORKLOAD_MAX_STEPS

void wf_workload_profile_default_classes(wf_workload_profile *p) {
    memset(p, 0, sizeof *p);
    static const struct {
        const char *name;
        int steps, priority;
        double alpha;
    } def[] = {{"S", 5, 100, 1.5}, {"M", 15, 50, 2.0}, {"L", 45, 0, 6.0}};
    for (size_t i = 0; i < 3; i++) {
        wf_workload_class *c = &p->classes[i];
        snprintf(c->name, sizeof c->name, "%s", def[i].name);
        c->width = c->height = 8;
        c->steps = def[i].steps;
        c->alpha = def[i].alpha;
        c->has_priority = true;
        c->priority = def[i].priority;
    }
    p->n_classes = 3;
}

int wf_workload_profile_class_index(const wf_workload_profile *p, const char *name) {
    for (size_t i = 0; i < p->n_classes; i++)
        if (strcmp(p->classes[i].name, name) == 0) return (int)i;
    return -1;
}

static bool class_valid(const wf_workload_class *c) {
    return c->name[0] && c->width >= 1 && c->width <= MAX_DIM && c->height >= 1 &&
           c->height <= MAX_DIM && c->steps >= 1 && c->steps <= MAX_STEPS && c->alpha > 0 &&
           isfinite(c->alpha) && c->t_single_ms >= 0 && isfinite(c->t_single_ms);
}

wf_status wf_workload_profile_set_class(wf_workload_profile *p, const wf_workload_class *c) {
    if (!class_valid(c)) return WF_EINVAL;
    int i = wf_workload_profile_class_index(p, c->name);
    if (i < 0) {
        if (p->n_classes == WF_WORKLOAD_MAX_CLASSES) return WF_EINVAL;
        i = (int)p->n_classes++;
    }
    p->classes[i] = *c;
    return WF_OK;
}

/* "WxH" -> w, h. */
static int parse_size(const char *s, int *w, int *h) {
    char *e;
    errno = 0;
    long a = strtol(s, &e, 10);
    if (e == s || (*e != 'x' && *e != 'X') || errno || a < 1 || a > MAX_DIM) return -1;
    const char *s2 = e + 1;
    long b = strtol(s2, &e, 10);
    if (e == s2 || *e || errno || b < 1 || b > MAX_DIM) return -1;
    *w = (int)a;
    *h = (int)b;
    return 0;
}

static int parse_num(const char *s, double *out) {
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (e == s || *e || errno || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *e;
    errno = 0;
    long v = strtol(s, &e, 10);
    if (e == s || *e || errno || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

wf_status wf_workload_class_parse(const char *s, wf_workload_class *c, char *err,
                                       size_t errlen) {
    memset(c, 0, sizeof *c);
    char buf[128];
    if (strlen(s) >= sizeof buf) goto bad;
    snprintf(buf, sizeof buf, "%s", s);
    char *field[5] = {0};
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
        if (n == 5) goto bad;
        field[n++] = t;
    }
    if (n < 3 || strlen(field[0]) >= sizeof c->name) goto bad;
    snprintf(c->name, sizeof c->name, "%s", field[0]);
    c->alpha = 2.0;
    if (parse_size(field[1], &c->width, &c->height) || parse_int(field[2], 1, MAX_STEPS, &c->steps))
        goto bad;
    if (n >= 4 && (parse_num(field[3], &c->alpha) || !(c->alpha > 0))) goto bad;
    if (n == 5) {
        if (parse_int(field[4], -WF_WORKLOAD_MAX_PRIORITY, WF_WORKLOAD_MAX_PRIORITY, &c->priority))
            goto bad;
        c->has_priority = true;
    }
    return WF_OK;
bad:
    return wf_status_errorf(err, errlen, WF_EINVAL,
                            "bad image class '%s': use NAME:WxH:STEPS[:ALPHA[:PRIORITY]], e.g. "
                            "S:8x8:5:1.5", s);
}

wf_status wf_workload_profile_parse_mix(const wf_workload_profile *p, const char *s, double *mix,
                                       char *err, size_t errlen) {
    for (size_t i = 0; i < WF_WORKLOAD_MAX_CLASSES; i++) mix[i] = 0;
    char buf[512];
    if (strlen(s) >= sizeof buf)
        return wf_status_errorf(err, errlen, WF_EINVAL, "class mix too long: '%.40s...'", s);
    snprintf(buf, sizeof buf, "%s", s);
    double total = 0;
    for (char *save = NULL, *t = strtok_r(buf, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
        char *eq = strchr(t, '=');
        if (!eq)
            return wf_status_errorf(err, errlen, WF_EINVAL, "class mix entry '%s': use CLASS=WEIGHT", t);
        *eq = '\0';
        int c = wf_workload_profile_class_index(p, t);
        if (c < 0) return wf_status_errorf(err, errlen, WF_EINVAL, "class mix names unknown class '%s'", t);
        double w;
        if (parse_num(eq + 1, &w) || w < 0)
            return wf_status_errorf(err, errlen, WF_EINVAL, "class mix: bad weight '%s' for %s", eq + 1, t);
        mix[c] = w;
        total += w;
    }
    /* an all-zero mix is a phase without arrivals: allowed; an infinite one is not */
    if (!isfinite(total))
        return wf_status_errorf(err, errlen, WF_EINVAL, "class mix '%.40s': the weights must sum "
                                "to a finite number", s);
    return WF_OK;
}

/* "0.8/min", "2/s", "3" -> requests/s. */
static int parse_rate(const char *s, double *rate) {
    char buf[64];
    if (strlen(s) >= sizeof buf) return -1;
    snprintf(buf, sizeof buf, "%s", s);
    double div = 1;
    char *slash = strchr(buf, '/');
    if (slash) {
        if (strcmp(slash, "/min") == 0) div = 60;
        else if (strcmp(slash, "/s") != 0) return -1;
        *slash = '\0';
    }
    if (parse_num(buf, rate) || *rate < 0) return -1;
    *rate /= div;
    return 0;
}

static wf_status parse_line(char *line, wf_workload_profile *p, const char *origin, int lineno,
                            char *err, size_t errlen) {
    char *tok[4 + WF_WORKLOAD_MAX_CLASSES + 4];
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(line, " \t\r\n", &save); t;
         t = strtok_r(NULL, " \t\r\n", &save)) {
        if (n == sizeof tok / sizeof tok[0])
            return wf_status_errorf(err, errlen, WF_EFORMAT, "%s:%d: too many fields", origin, lineno);
        tok[n++] = t;
    }
    if (n == 0) return WF_OK;
    if (strcmp(tok[0], "class") == 0) {
        /* class NAME WxH steps=N [alpha=A] [priority=P] */
        wf_workload_class c = {0};
        if (n < 4 || strlen(tok[1]) >= sizeof c.name || parse_size(tok[2], &c.width, &c.height))
            goto bad_class;
        snprintf(c.name, sizeof c.name, "%s", tok[1]);
        c.alpha = 2.0;
        bool steps = false;
        for (size_t i = 3; i < n; i++) {
            if (strncmp(tok[i], "steps=", 6) == 0) {
                if (parse_int(tok[i] + 6, 1, MAX_STEPS, &c.steps)) goto bad_class;
                steps = true;
            } else if (strncmp(tok[i], "alpha=", 6) == 0) {
                if (parse_num(tok[i] + 6, &c.alpha) || !(c.alpha > 0)) goto bad_class;
            } else if (strncmp(tok[i], "priority=", 9) == 0) {
                if (parse_int(tok[i] + 9, -WF_WORKLOAD_MAX_PRIORITY, WF_WORKLOAD_MAX_PRIORITY,
                              &c.priority))
                    goto bad_class;
                c.has_priority = true;
            } else {
                goto bad_class;
            }
        }
        if (!steps) goto bad_class;
        if (p->n_phases)
            return wf_status_errorf(err, errlen, WF_EFORMAT, "%s:%d: class lines go before phases",
                                    origin, lineno);
        if (wf_workload_profile_set_class(p, &c) != WF_OK)
            return wf_status_errorf(err, errlen, WF_EFORMAT, "%s:%d: more than %d classes", origin,
                                    lineno, WF_WORKLOAD_MAX_CLASSES);
        return WF_OK;
    bad_class:
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "%s:%d: use: class NAME WxH steps=N [alpha=A] [priority=P]", origin,
                                lineno);
    }
    if (strcmp(tok[0], "phase") == 0) {
        /* phase NAME START END RATE [CLASS=WEIGHT ...] */
        if (p->n_phases == WF_WORKLOAD_MAX_PHASES)
            return wf_status_errorf(err, errlen, WF_EFORMAT, "%s:%d: more than %d phases", origin,
                                    lineno, WF_WORKLOAD_MAX_PHASES);
        wf_workload_phase ph = {0};
        if (n < 5 || strlen(tok[1]) >= sizeof ph.name || parse_num(tok[2], &ph.start_s) ||
            parse_num(tok[3], &ph.end_s) || parse_rate(tok[4], &ph.rate))
            return wf_status_errorf(err, errlen, WF_EFORMAT,
                                    "%s:%d: use: phase NAME START_S END_S RATE[/s|/min] CLASS=WEIGHT...",
                                    origin, lineno);
        snprintf(ph.name, sizeof ph.name, "%s", tok[1]);
        if (ph.start_s < 0 || ph.end_s <= ph.start_s)
            return wf_status_errorf(err, errlen, WF_EFORMAT, "%s:%d: phase %s must have 0 <= start < end",
                                    origin, lineno, ph.name);
        if (p->n_phases && ph.start_s < p->phases[p->n_phases - 1].end_s)
            return wf_status_errorf(err, errlen, WF_EFORMAT,
                                    "%s:%d: phase %s starts before the previous one ends", origin,
                                    lineno, ph.name);
        double total = 0;
        for (size_t i = 5; i < n; i++) {
            char *eq = strchr(tok[i], '=');
            double w;
            if (!eq) goto bad_mix;
            *eq = '\0';
            int c = wf_workload_profile_class_index(p, tok[i]);
            if (c < 0)
                return wf_status_errorf(err, errlen, WF_EFORMAT, "%s:%d: unknown class '%s'", origin,
                                        lineno, tok[i]);
            if (parse_num(eq + 1, &w) || w < 0) goto bad_mix;
            ph.mix[c] = w;
            total += w;
        }
        if (ph.rate > 0 && !(total > 0))
            return wf_status_errorf(err, errlen, WF_EFORMAT,
                                    "%s:%d: phase %s has arrivals but no class weight", origin,
                                    lineno, ph.name);
        /* An infinite sum of weights or of expected requests would turn every later ratio
         * (class shares, offered load) into NaN. */
        if (!isfinite(total))
            return wf_status_errorf(err, errlen, WF_EFORMAT,
                                    "%s:%d: phase %s: the class weights must sum to a finite "
                                    "number", origin, lineno, ph.name);
        if (!isfinite(ph.rate * (ph.end_s - ph.start_s)))
            return wf_status_errorf(err, errlen, WF_EFORMAT,
                                    "%s:%d: phase %s: rate x length is not a finite number of "
                                    "requests", origin, lineno, ph.name);
        p->phases[p->n_phases++] = ph;
        return WF_OK;
    bad_mix:
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s:%d: bad class weight '%s' (use CLASS=W)",
                                origin, lineno, tok[n - 1]);
    }
    return wf_status_errorf(err, errlen, WF_EFORMAT, "%s:%d: unknown directive '%s' (class or phase)",
                            origin, lineno, tok[0]);
}

wf_status wf_workload_profile_parse(const char *text, const char *origin, wf_workload_profile *p,
                                   char *err, size_t errlen) {
    wf_workload_profile_default_classes(p);
    int lineno = 0;
    const char *s = text;
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        lineno++;
        char line[1024];
        if (len >= sizeof line)
            return wf_status_errorf(err, errlen, WF_EFORMAT, "%s:%d: line too long", origin, lineno);
        memcpy(line, s, len);
        line[len] = '\0';
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        wf_status st = parse_line(line, p, origin, lineno, err, errlen);
        if (st != WF_OK) return st;
        s = nl ? nl + 1 : s + len;
    }
    if (p->n_phases == 0)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s: no phase lines", origin);
    const char *base = strrchr(origin, '/');
    snprintf(p->name, sizeof p->name, "%s", base ? base + 1 : origin);
    char *dot = strrchr(p->name, '.');
    if (dot && strcmp(dot, ".profile") == 0) *dot = '\0';
    return WF_OK;
}

const char *const *wf_workload_profile_builtin_names(void) { return wf_workload_builtin_profile_names; }

wf_status wf_workload_profile_load(const char *name_or_path, wf_workload_profile *p, char *err,
                                  size_t errlen) {
    if (!strchr(name_or_path, '/') && !strchr(name_or_path, '.'))
        for (const wf_workload_builtin_profile *b = wf_workload_builtin_profiles; b->name; b++)
            if (strcmp(b->name, name_or_path) == 0)
                return wf_workload_profile_parse(b->text, b->name, p, err, errlen);
    FILE *f = fopen(name_or_path, "rb");
    if (!f) {
        char names[256] = "";
        for (const wf_workload_builtin_profile *b = wf_workload_builtin_profiles; b->name; b++) {
            size_t l = strlen(names);
            snprintf(names + l, sizeof names - l, "%s%s", l ? ", " : "", b->name);
        }
        return wf_status_errorf(err, errlen, WF_ENOTFOUND,
                                "profile '%s': not a built-in profile (%s) and not a readable file: %s",
                                name_or_path, names, strerror(errno));
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            if (cap > (1u << 20)) {
                free(buf);
                fclose(f);
                return wf_status_errorf(err, errlen, WF_EFORMAT, "profile %s: larger than 1 MiB", name_or_path);
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return WF_ENOMEM;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    fclose(f);
    buf[len] = '\0';
    wf_status st = wf_workload_profile_parse(buf, name_or_path, p, err, errlen);
    free(buf);
    return st;
}

void wf_workload_profile_set_poisson(wf_workload_profile *p, double rate, double duration_s,
                                    const double *mix) {
    p->n_phases = 1;
    wf_workload_phase *ph = &p->phases[0];
    memset(ph, 0, sizeof *ph);
    snprintf(ph->name, sizeof ph->name, "poisson");
    ph->start_s = 0;
    ph->end_s = duration_s;
    ph->rate = rate;
    for (size_t c = 0; c < p->n_classes; c++) ph->mix[c] = mix ? mix[c] : 1.0;
    snprintf(p->name, sizeof p->name, "poisson");
}

double wf_workload_profile_end_s(const wf_workload_profile *p) {
    return p->n_phases ? p->phases[p->n_phases - 1].end_s : 0;
}

void wf_workload_profile_scale_time(wf_workload_profile *p, double k) {
    for (size_t i = 0; i < p->n_phases; i++) {
        p->phases[i].start_s *= k;
        p->phases[i].end_s *= k;
    }
}

void wf_workload_profile_scale_rate(wf_workload_profile *p, double k) {
    for (size_t i = 0; i < p->n_phases; i++) p->phases[i].rate *= k;
}

static double mix_total(const wf_workload_profile *p, const wf_workload_phase *ph) {
    double t = 0;
    for (size_t c = 0; c < p->n_classes; c++) t += ph->mix[c];
    return t;
}

double wf_workload_profile_expected_requests(const wf_workload_profile *p) {
    double n = 0;
    for (size_t i = 0; i < p->n_phases; i++)
        n += p->phases[i].rate * (p->phases[i].end_s - p->phases[i].start_s);
    return n;
}

double wf_workload_profile_offered_load(const wf_workload_profile *p, int servers) {
    double work_s = 0, first = INFINITY, last = 0;
    for (size_t i = 0; i < p->n_phases; i++) {
        const wf_workload_phase *ph = &p->phases[i];
        double total = mix_total(p, ph);
        if (!(ph->rate > 0) || !(total > 0)) continue;
        /* A drain at the end adds no arrivals, so it does not stretch the window. */
        if (ph->start_s < first) first = ph->start_s;
        last = ph->end_s;
        double n = ph->rate * (ph->end_s - ph->start_s);
        for (size_t c = 0; c < p->n_classes; c++) {
            if (ph->mix[c] <= 0) continue;
            if (!(p->classes[c].t_single_ms > 0)) return NAN;
            work_s += n * ph->mix[c] / total * p->classes[c].t_single_ms / 1000.0;
        }
    }
    if (!(last > first) || servers < 1) return 0;
    return work_s / ((double)servers * (last - first));
}

size_t wf_workload_profile_sample(const wf_workload_profile *p, uint64_t seed, size_t max_n,
                                 double *arrival_s, int *class_idx) {
    wf_workload_rng rng;
    wf_workload_rng_seed(&rng, seed);
    size_t n = 0;
    for (size_t i = 0; i < p->n_phases && n < max_n; i++) {
        const wf_workload_phase *ph = &p->phases[i];
        double total = mix_total(p, ph);
        if (!(ph->rate > 0) || !(total > 0)) continue;
        double t = ph->start_s;
        while (n < max_n) {
            /* Exponential gap; 1 - U is in (0, 1], so the log is finite. */
            t += -log(1.0 - wf_workload_rng_uniform(&rng)) / ph->rate;
            if (t >= ph->end_s) break;
            arrival_s[n] = t;
            class_idx[n] = wf_workload_rng_pick(&rng, ph->mix, p->n_classes, total);
            n++;
        }
    }
    return n;
}

double wf_workload_class_deadline_ms(const wf_workload_class *c) {
    return c->t_single_ms > 0 ? c->alpha * c->t_single_ms : NAN;
}
