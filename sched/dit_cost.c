/* The DiT step-time model: GF-DiT's synthetic formula or a table measured on this machine,
 * each degree corrected online by observed times. */
#include "sched/dit_cost.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void common_init(wf_dit_cost *c) {
    memset(c, 0, sizeof *c);
    for (int p = 0; p <= WF_DIT_COST_MAX_P; p++) c->corr[p] = 1.0;
    c->corr_weight = 0.1;
    c->reshard_lat_ms = 0.05;
    c->reshard_ms_per_mib = 0.1;
    c->latent_bytes_per_token = 64;
}

void wf_dit_cost_synthetic(wf_dit_cost *c) {
    common_init(c);
    c->ms_per_token = 0.1323;
    c->comm_ms = 20.0;
    c->eff[1] = 1.0;
    c->eff[2] = 1.82;
    c->eff[4] = 3.33;
    c->eff[8] = 5.88;
}

void wf_dit_cost_measured(wf_dit_cost *c) { common_init(c); }

/* Times above this (11.6 days) are typos; refusing them keeps every prediction finite. */
#define MAX_MS 1e9

wf_status wf_dit_cost_add_mode_point(wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode mode, double ms) {
    if (tokens < 1 || P < 1 || P > WF_DIT_COST_MAX_P || !(ms > 0) || !(ms <= MAX_MS) || c->n_points >= WF_DIT_COST_MAX_POINTS ||
        (unsigned)mode >= WF_DIT_COST_MODES || (mode == WF_DIT_COST_CFG && P != 2))
        return WF_EINVAL;
    c->pts[c->n_points++] = (wf_dit_cost_point){tokens, P, ms, mode};
    bool known = false;
    for (int k = 0; k < c->n_classes; k++) known |= c->class_tokens[k] == tokens;
    if (!known && c->n_classes < WF_DIT_COST_MAX_CLASSES) {
        int k = c->n_classes++;
        c->class_tokens[k] = tokens;
        for (int q = 0; q <= WF_DIT_COST_MAX_P; q++) c->class_corr[k][q] = 1.0;
    }
    return WF_OK;
}

wf_status wf_dit_cost_add_point(wf_dit_cost *c, int tokens, int P, double ms) {
    return wf_dit_cost_add_mode_point(c, tokens, P, WF_DIT_COST_PLAIN, ms);
}

static const char *const mode_names[WF_DIT_COST_MODES] = {"plain", "guided", "cfg"};

const char *wf_dit_cost_mode_name(wf_dit_cost_mode mode) {
    return (unsigned)mode < WF_DIT_COST_MODES ? mode_names[mode] : "?";
}

static bool has_points(const wf_dit_cost *c, int P, wf_dit_cost_mode mode);

wf_status wf_dit_cost_load(wf_dit_cost *c, const char *path, char *err, int errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, (size_t)errlen, "%s: %s", path, strerror(errno));
        return WF_ENOTFOUND;
    }
    wf_dit_cost_measured(c);
    char line[256];
    int ln = 0;
    wf_status st = WF_OK;
    while (fgets(line, sizeof line, f)) {
        ln++;
        /* A longer line would come back in pieces, and a long comment's tail would read as
         * a point. */
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, (size_t)errlen, "%s:%d: line longer than %d characters", path, ln, (int)sizeof line - 2);
            st = WF_EFORMAT;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        int tokens, P;
        double ms;
        char word[16] = "plain", extra;
        if (sscanf(line, " %15[a-z] %lf %c", word, &ms, &extra) == 2) { /* an overhead */
            double *to = !strcmp(word, "chunk") ? &c->chunk_ms : !strcmp(word, "request") ? &c->request_ms : NULL;
            if (!to || !(ms >= 0) || !(ms <= MAX_MS)) {
                snprintf(err, (size_t)errlen, "%s:%d: expected \"chunk MS\" or \"request MS\" (0 to 1e9)", path, ln);
                st = WF_EFORMAT;
                break;
            }
            *to = ms;
            continue;
        }
        snprintf(word, sizeof word, "plain");
        int n = sscanf(line, "%d %d %lf %15s %c", &tokens, &P, &ms, word, &extra);
        if (n == EOF) continue; /* blank, or a comment only; anything else is a point or an error */
        int mode = -1;
        for (int m = 0; m < WF_DIT_COST_MODES; m++)
            if (!strcmp(word, mode_names[m])) mode = m;
        /* A second time for the same point: which one counts would be the file's order. */
        for (int i = 0; mode >= 0 && (n == 3 || n == 4) && i < c->n_points; i++)
            if (c->pts[i].tokens == tokens && c->pts[i].P == P && (int)c->pts[i].mode == mode) {
                snprintf(err, (size_t)errlen, "%s:%d: %d tokens on %d rank(s) (%s) given twice", path, ln, tokens, P,
                         mode_names[mode]);
                fclose(f);
                return WF_EFORMAT;
            }
        if ((n != 3 && n != 4) || mode < 0 || wf_dit_cost_add_mode_point(c, tokens, P, mode, ms) != WF_OK) {
            snprintf(err, (size_t)errlen,
                     "%s:%d: expected \"tokens P ms [plain|guided|cfg]\" (ms up to 1e9; cfg only at P = 2; at most %d lines)",
                     path, ln, WF_DIT_COST_MAX_POINTS);
            st = WF_EFORMAT;
            break;
        }
    }
    fclose(f);
    if (st == WF_OK && c->n_points == 0) {
        snprintf(err, (size_t)errlen, "%s: no points", path);
        st = WF_EFORMAT;
    } else if (st == WF_OK && !has_points(c, 1, WF_DIT_COST_PLAIN)) {
        /* Every job's T_single (its deadline, the load's scale) is a one-rank plain step. */
        snprintf(err, (size_t)errlen, "%s: no single-rank point (\"tokens 1 ms\"): T_single, and so every deadline, "
                 "comes from it", path);
        st = WF_EFORMAT;
    }
    return st;
}

static bool has_points(const wf_dit_cost *c, int P, wf_dit_cost_mode mode) {
    for (int i = 0; i < c->n_points; i++)
        if (c->pts[i].P == P && c->pts[i].mode == mode) return true;
    return false;
}

bool wf_dit_cost_allows(const wf_dit_cost *c, int P) {
    if (P < 1 || P > WF_DIT_COST_MAX_P) return false;
    if (c->n_points == 0) return c->eff[P] > 0;
    return has_points(c, P, WF_DIT_COST_PLAIN);
}

/* Linear between the two points of (P, mode) around tokens; proportional from the nearest
 * point outside the measured range. */
static double table_ms(const wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode mode) {
    const wf_dit_cost_point *lo = NULL, *hi = NULL;
    for (int i = 0; i < c->n_points; i++) {
        const wf_dit_cost_point *p = &c->pts[i];
        if (p->P != P || p->mode != mode) continue;
        if (p->tokens <= tokens && (!lo || p->tokens > lo->tokens)) lo = p;
        if (p->tokens >= tokens && (!hi || p->tokens < hi->tokens)) hi = p;
    }
    if (lo && hi) {
        if (hi->tokens == lo->tokens) return lo->ms;
        double f = (double)(tokens - lo->tokens) / (double)(hi->tokens - lo->tokens);
        return lo->ms + f * (hi->ms - lo->ms);
    }
    const wf_dit_cost_point *p = lo ? lo : hi;
    return p ? p->ms * (double)tokens / (double)p->tokens : -1.0;
}

/* Uncorrected ms of one step in mode, < 0 when not allowed. */
static double raw_ms(const wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode mode) {
    if (!wf_dit_cost_allows(c, P) || (unsigned)mode >= WF_DIT_COST_MODES || (mode == WF_DIT_COST_CFG && P != 2))
        return -1.0;
    if (c->n_points) {
        if (mode == WF_DIT_COST_PLAIN || has_points(c, P, mode)) return table_ms(c, tokens, P, mode);
        return mode == WF_DIT_COST_GUIDED ? 2 * table_ms(c, tokens, P, WF_DIT_COST_PLAIN) : -1.0;
    }
    double compute = c->ms_per_token * tokens;
    switch (mode) {
    case WF_DIT_COST_PLAIN: return compute / c->eff[P] + c->comm_ms * (P - 1);
    case WF_DIT_COST_GUIDED: return 2 * compute / c->eff[P] + c->comm_ms * (P - 1);
    default: return compute + wf_dit_cost_reshard_ms(c, c->latent_bytes_per_token * tokens);
    }
}

/* The size class of tokens: the one whose token count is nearest in ratio; -1 with fewer
 * than two classes. */
static int size_class(const wf_dit_cost *c, int tokens) {
    if (c->n_classes < 2 || tokens < 1) return -1;
    int best = 0;
    double bd = INFINITY;
    for (int k = 0; k < c->n_classes; k++) {
        double d = fabs(log((double)tokens / (double)c->class_tokens[k]));
        if (d < bd) {
            bd = d;
            best = k;
        }
    }
    return best;
}

double wf_dit_cost_correction(const wf_dit_cost *c, int tokens, int P) {
    if (P < 1 || P > WF_DIT_COST_MAX_P) return 1.0;
    int k = size_class(c, tokens);
    return k < 0 ? c->corr[P] : c->class_corr[k][P];
}

double wf_dit_cost_mode_step_ms(const wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode mode) {
    double ms = raw_ms(c, tokens, P, mode);
    return ms > 0 ? ms * wf_dit_cost_correction(c, tokens, P) : -1.0;
}

double wf_dit_cost_step_ms(const wf_dit_cost *c, int tokens, int P) {
    return wf_dit_cost_mode_step_ms(c, tokens, P, WF_DIT_COST_PLAIN);
}

double wf_dit_cost_guided_ms(const wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode *mode) {
    double u = wf_dit_cost_mode_step_ms(c, tokens, P, WF_DIT_COST_GUIDED);
    double g = wf_dit_cost_mode_step_ms(c, tokens, P, WF_DIT_COST_CFG);
    bool cfg = g > 0 && (u < 0 || g < u);
    if (mode) *mode = cfg ? WF_DIT_COST_CFG : WF_DIT_COST_GUIDED;
    return cfg ? g : u;
}

void wf_dit_cost_observe_mode(wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode mode, double ms) {
    if (!(ms > 0)) return;
    double pred = raw_ms(c, tokens, P, mode);
    if (!(pred > 0)) return;
    c->corr[P] = (1 - c->corr_weight) * c->corr[P] + c->corr_weight * (ms / pred);
    int k = size_class(c, tokens);
    if (k >= 0) c->class_corr[k][P] = (1 - c->corr_weight) * c->class_corr[k][P] + c->corr_weight * (ms / pred);
}

void wf_dit_cost_observe(wf_dit_cost *c, int tokens, int P, double ms) {
    wf_dit_cost_observe_mode(c, tokens, P, WF_DIT_COST_PLAIN, ms);
}

double wf_dit_cost_reshard_ms(const wf_dit_cost *c, double bytes) {
    if (bytes <= 0) return 0.0;
    return c->reshard_lat_ms + bytes / (1024.0 * 1024.0) * c->reshard_ms_per_mib;
}

void wf_dit_cost_observe_chunk(wf_dit_cost *c, double overhead_ms) {
    if (overhead_ms != overhead_ms) return; /* NaN */
    /* The first observation replaces the start value (a file's or 0), as a calibration would. */
    double v = c->chunk_obs == 0 ? overhead_ms : (1 - c->corr_weight) * c->chunk_ms + c->corr_weight * overhead_ms;
    c->chunk_ms = v > 0 ? v : 0;
    c->chunk_obs++;
}

static int cmp_ms(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void wf_dit_cost_observe_request(wf_dit_cost *c, double overhead_ms) {
    if (overhead_ms != overhead_ms) return; /* NaN */
    c->request_win[c->request_obs++ % WF_DIT_COST_REQUEST_WINDOW] = overhead_ms;
    int n = c->request_obs < WF_DIT_COST_REQUEST_WINDOW ? c->request_obs : WF_DIT_COST_REQUEST_WINDOW;
    double w[WF_DIT_COST_REQUEST_WINDOW];
    memcpy(w, c->request_win, sizeof(double) * (size_t)n);
    qsort(w, (size_t)n, sizeof w[0], cmp_ms);
    double med = n % 2 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
    c->request_ms = med > 0 ? med : 0;
}

double wf_dit_cost_alone_ms(const wf_dit_cost *c, int tokens, int P, wf_dit_cost_mode mode, int steps,
                            int chunk_steps) {
    double step = wf_dit_cost_mode_step_ms(c, tokens, P, mode);
    if (!(step > 0) || steps < 0 || chunk_steps < 1) return -1.0;
    int chunks = (steps + chunk_steps - 1) / chunk_steps;
    return steps * step + chunks * c->chunk_ms + c->request_ms;
}
