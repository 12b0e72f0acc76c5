/* Linear iteration cost model: least-squares fitting, online exponentially weighted refits,
 * text/JSON persistence. */
#include "sched/cost_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wf_cost_model_init(wf_cost_model *m, const double coef[4]) {
    memset(m, 0, sizeof *m);
    memcpy(m->coef, coef, sizeof m->coef);
    memcpy(m->prior, coef, sizeof m->prior);
    m->decay = 0.98;
    m->refit_every = 16;
}

double wf_cost_model_predict(const wf_cost_model *m, double p, double dcount, double ctx) {
    return m->coef[0] + m->coef[1] * p + m->coef[2] * dcount + m->coef[3] * ctx;
}

int wf_cost_model_prefill_fit(const wf_cost_model *m, double ms, int start, int max_tokens) {
    if (max_tokens <= 0 || !(ms > 0)) return 0;
    double b = m->coef[1], d = m->coef[3];
    /* b*n + d*(n*start + n*(n+1)/2) <= ms: the positive root of a quadratic in n. */
    double lin = b + d * ((double)start + 0.5), n;
    if (d > 0) n = (-lin + sqrt(lin * lin + 2.0 * d * ms)) / d;
    else n = lin > 0 ? ms / lin : (double)max_tokens;
    if (!(n >= 0)) return 0;
    return n >= (double)max_tokens ? max_tokens : (int)n;
}

double wf_cost_model_predict_ttft(const wf_cost_model *m, int max_batch_tokens,
                                  double pending, double pending_attn, int n_decode, double ctx,
                                  int n_prompt, double *drain_ms) {
    int budget = max_batch_tokens > 1 ? max_batch_tokens : 1;
    int dec = n_decode < budget - 1 ? n_decode : budget - 1;
    if (dec < 0) dec = 0;
    double per_iter_prefill = (double)(budget - dec);
    double dec_ctx = n_decode > 0 ? ctx * (double)dec / (double)n_decode : 0.0;
    double fixed = m->coef[0] + m->coef[2] * dec + m->coef[3] * dec_ctx;
    if (pending_attn < 0) pending_attn = 0;
    if (drain_ms)
        *drain_ms = pending > 0 ? ceil(pending / per_iter_prefill) * fixed +
                                      m->coef[1] * pending + m->coef[3] * pending_attn
                                : 0.0;
    double w = pending + (double)n_prompt;
    return ceil(w / per_iter_prefill) * fixed + m->coef[1] * w +
           m->coef[3] * (pending_attn + wf_cost_model_attention(0, n_prompt));
}

/* Solves the (weighted) normal equations a x = b for the coefficients not in `pinned`.
 * Features are standardised by their RMS first (tokens and context differ by orders of
 * magnitude), a small ridge pulls toward prior (0 if NULL) so weakly observed directions stay
 * sane, and a feature never seen in the data (RMS ~ 0, e.g. no prefill in a decode-only
 * window) keeps its prior value instead of becoming arbitrary. Pinned coefficients are 0. */
static bool solve_subset(const double a_in[4][4], const double b_in[4], const double *prior,
                         const bool pinned[4], double out[4]) {
    const double lambda = 1e-6;
    double n_w = a_in[0][0]; /* x0 = 1: the total weight */
    if (!(n_w > 0)) return false;
    double scale[4];
    int idx[4], m = 0;
    for (int i = 0; i < 4; i++) {
        scale[i] = i == 0 ? 1.0 : sqrt(a_in[i][i] / n_w);
        if (pinned[i]) out[i] = 0.0;
        else if (i == 0 || scale[i] > 1e-9) idx[m++] = i;
        else out[i] = prior ? prior[i] : 0.0;
    }
    double a[4][5];
    for (int r = 0; r < m; r++) {
        int i = idx[r];
        for (int cidx = 0; cidx < m; cidx++) {
            int j = idx[cidx];
            a[r][cidx] = a_in[i][j] / (scale[i] * scale[j]);
        }
        double rhs = b_in[i];
        for (int j = 1; j < 4; j++) /* fixed (unobserved) coefficients move to the right */
            if (!pinned[j] && !(scale[j] > 1e-9)) rhs -= a_in[i][j] * out[j];
        a[r][r] += lambda * n_w;
        a[r][m] = rhs / scale[i] + lambda * n_w * (prior ? prior[i] : 0.0) * scale[i];
    }
    for (int col = 0; col < m; col++) {
        int piv = col;
        for (int r = col + 1; r < m; r++)
            if (fabs(a[r][col]) > fabs(a[piv][col])) piv = r;
        if (fabs(a[piv][col]) < 1e-300) return false;
        if (piv != col)
            for (int j = 0; j <= m; j++) {
                double t = a[col][j];
                a[col][j] = a[piv][j];
                a[piv][j] = t;
            }
        for (int r = 0; r < m; r++) {
            if (r == col) continue;
            double f = a[r][col] / a[col][col];
            for (int j = col; j <= m; j++) a[r][j] -= f * a[col][j];
        }
    }
    for (int r = 0; r < m; r++) {
        int i = idx[r];
        out[i] = a[r][m] / a[r][r] / scale[i];
        if (!isfinite(out[i])) return false;
    }
    return true;
}

/* Non-negative least squares by active set: a negative cost is noise, never physics, but
 * clamping it after an unconstrained solve leaves the other coefficients fitted to a model that
 * no longer holds (collinear features, such as prefill tokens and context in prefill-only
 * batches, then split the cost arbitrarily). Instead the most negative coefficient is pinned to
 * zero and the rest re-solved, until all are non-negative (at most 4 rounds). */
static bool solve_ridge(const double a_in[4][4], const double b_in[4], const double *prior,
                        double out[4]) {
    bool pinned[4] = {false, false, false, false};
    for (int round = 0; round < 4; round++) {
        if (!solve_subset(a_in, b_in, prior, pinned, out)) return false;
        int worst = -1;
        for (int i = 0; i < 4; i++)
            if (out[i] < 0 && (worst < 0 || out[i] < out[worst])) worst = i;
        if (worst < 0) return true;
        pinned[worst] = true;
    }
    for (int i = 0; i < 4; i++) out[i] = out[i] < 0 ? 0 : out[i];
    return true;
}

static void accumulate(double xtx[4][4], double xty[4], double w, const wf_cost_sample *s) {
    double x[4] = {1.0, s->prefill_tokens, s->decode_tokens, s->context};
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 4; j++) xtx[i][j] += w * x[i] * x[j];
        xty[i] += w * x[i] * s->ms;
    }
}

wf_status wf_cost_model_fit(const wf_cost_sample *samples, int n, const double *prior,
                            double out[4]) {
    if (n < 1) return WF_EINVAL;
    double xtx[4][4] = {{0}}, xty[4] = {0};
    for (int i = 0; i < n; i++) accumulate(xtx, xty, 1.0, &samples[i]);
    return solve_ridge(xtx, xty, prior, out) ? WF_OK : WF_EINVAL;
}

void wf_cost_model_observe(wf_cost_model *m, double p, double dcount, double ctx, double ms) {
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 4; j++) m->xtx[i][j] *= m->decay;
        m->xty[i] *= m->decay;
    }
    wf_cost_sample s = {p, dcount, ctx, ms};
    accumulate(m->xtx, m->xty, 1.0, &s);
    if (++m->n_obs % m->refit_every != 0) return;
    double fit[4];
    if (solve_ridge(m->xtx, m->xty, m->prior, fit)) memcpy(m->coef, fit, sizeof fit);
}

wf_status wf_cost_model_parse(const char *text, double out[4], char *err, int errlen) {
    const char *p = text;
    for (int i = 0; i < 4; i++) {
        char *end;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        double v = strtod(p, &end);
        if (end == p || !isfinite(v) || v < 0) {
            snprintf(err, (size_t)errlen, "cost model: coefficient %d of a,b,c,d is not a "
                     "non-negative number", i + 1);
            return WF_EINVAL;
        }
        out[i] = v;
        p = end;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (i < 3 && *p == ',') p++;
    }
    if (*p != '\0') {
        snprintf(err, (size_t)errlen, "cost model: trailing text after 4 coefficients");
        return WF_EINVAL;
    }
    return WF_OK;
}

/* Finds "key" : number in a flat JSON object (the file this module writes). */
static bool json_number(const char *text, const char *key, double *out) {
    char pat[8];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(text, pat);
    if (!p) return false;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p++ != ':') return false;
    char *end;
    *out = strtod(p, &end);
    return end != p && isfinite(*out) && *out >= 0;
}

wf_status wf_cost_model_load(const char *path, double out[4], char *err, int errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, (size_t)errlen, "cost model %s: cannot open", path);
        return WF_ENOTFOUND;
    }
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = buf;
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    if (*p == '{') {
        static const char *keys[4] = {"a", "b", "c", "d"};
        for (int i = 0; i < 4; i++)
            if (!json_number(p, keys[i], &out[i])) {
                snprintf(err, (size_t)errlen, "cost model %s: missing or bad \"%s\"", path,
                         keys[i]);
                return WF_EFORMAT;
            }
        return WF_OK;
    }
    for (char *c = buf; *c; c++)
        if (*c == ' ' || *c == '\t') *c = ',';
    /* Collapse runs of separators so "a  b c d" parses. */
    char clean[1024];
    size_t k = 0;
    for (size_t i = 0; buf[i] && k + 1 < sizeof clean; i++) {
        if (buf[i] == ',' && (k == 0 || clean[k - 1] == ',')) continue;
        clean[k++] = buf[i];
    }
    while (k > 0 && (clean[k - 1] == ',' || clean[k - 1] == '\n' || clean[k - 1] == '\r')) k--;
    clean[k] = '\0';
    if (wf_cost_model_parse(clean, out, err, errlen) != WF_OK) return WF_EFORMAT;
    return WF_OK;
}

wf_status wf_cost_model_save(const char *path, const double c[4]) {
    FILE *f = fopen(path, "w");
    if (!f) return WF_EIO;
    int rc = fprintf(f, "{\"a\": %.9g, \"b\": %.9g, \"c\": %.9g, \"d\": %.9g}\n", c[0], c[1],
                     c[2], c[3]);
    if (fclose(f) != 0 || rc < 0) return WF_EIO;
    return WF_OK;
}
