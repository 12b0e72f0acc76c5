/* The KV compression controller: the analytical model (raw D/B against D/S + D/(CR·B)), the
 * online corrections (EWMA bandwidth, EWMA residual per option, cool-down of options that keep
 * missing), and its counters formatted for /metrics and /admin/stats. */
#include "kv/kv_controller.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A profile whose speeds were learnt from transfers gets its start-up speeds back after this
 * many cool-downs without a transfer (the load that slowed it may be gone; a profile judged
 * too slow would otherwise never be tried again). Rare, since each retry may lose to raw. */
#define CODEC_FORGET 6u

typedef struct option {
    uint64_t chosen, observed, misses, cooldowns;
    int streak;           /* consecutive misses */
    double residual;      /* EWMA observed / model */
    uint64_t cool_until;  /* now_ns before which the option is not chosen */
    uint64_t codec_seen;  /* now_ns of the last observe_codec (0: never: the prior holds) */
} option;

struct wf_kv_controller {
    wf_kv_controller_options o;
    wf_kv_profile_stats *prof;
    wf_kv_profile_stats *prior; /* the speeds given at _new, restored after cooldown_ns unseen */
    int n;
    option *opt; /* n + 1: opt[0] is raw, opt[i + 1] profile i */
    double bw_gbps;
    uint64_t bw_samples;  /* bandwidth samples seen (the first replaces the prior) */
    wf_kv_controller_stats st;
};

double wf_kv_profile_speed_gbps(const wf_kv_profile_stats *s) {
    return 1.0 / (1.0 / s->enc_gbps + 1.0 / s->dec_gbps);
}

double wf_kv_profile_b_star_gbps(const wf_kv_profile_stats *s) {
    return (1.0 - 1.0 / s->cr) * wf_kv_profile_speed_gbps(s) * 8.0;
}

/* Seconds per GB of F16 KV through profile p cut into n slices at wire_gbs GB/s: the first
 * slice passes every stage, then one slice leaves per period of the slowest stage. */
static double pipe_s_per_gb(const wf_kv_profile_stats *p, int n, double wire_gbs) {
    double e = 1.0 / p->enc_gbps, d = 1.0 / p->dec_gbps, x = 1.0 / (p->cr * wire_gbs);
    double slow = fmax(e, fmax(d, x));
    return (e + d + x) / n + slow * (double)(n - 1) / n;
}

double wf_kv_profile_b_star_pipelined_gbps(const wf_kv_profile_stats *s, int n_slices) {
    if (n_slices <= 1) return wf_kv_profile_b_star_gbps(s);
    if (!(s->cr > 1)) return 0.0;
    /* compressed minus raw time per GB rises with the bandwidth (for CR > 1), from minus
     * infinity to a positive value: bisect for its root, in log space. */
    double lo = 1e-6, hi = 1e6; /* GB/s */
    for (int i = 0; i < 80; i++) {
        double mid = sqrt(lo * hi);
        if (pipe_s_per_gb(s, n_slices, mid) < 1.0 / mid) lo = mid;
        else hi = mid;
    }
    return lo * 8.0;
}

void wf_kv_controller_options_init(wf_kv_controller_options *o) {
    *o = (wf_kv_controller_options){
        .init_bandwidth_gbps = 10.0,
        .bandwidth_alpha = 0.3,
        .residual_alpha = 0.3,
        .default_accuracy = 0.9,
        .miss_factor = 1.5,
        .miss_limit = 3,
        .cooldown_ns = 5000000000ull,
        .link_latency_ms = 0.0,
        .pipeline_slices = 1,
        .compress_margin = 0.0,
        .codec_alpha = 0.5,
    };
}

const char *wf_kv_reason_name(wf_kv_reason r) {
    switch (r) {
    case WF_KV_REASON_COMPRESS: return "compress";
    case WF_KV_REASON_LINK_FAST: return "link_fast";
    case WF_KV_REASON_NO_PROFILE: return "no_profile";
    case WF_KV_REASON_COOLING: return "cooling";
    default: return "unknown";
    }
}

wf_status wf_kv_controller_new(const wf_kv_controller_options *o,
                               const wf_kv_profile_stats *profiles, int n,
                               wf_kv_controller **out) {
    *out = NULL;
    if (!o || n < 0 || (n > 0 && !profiles) || !(o->init_bandwidth_gbps > 0) ||
        !(o->bandwidth_alpha > 0 && o->bandwidth_alpha <= 1) ||
        !(o->residual_alpha > 0 && o->residual_alpha <= 1) || !(o->miss_factor >= 1) ||
        o->miss_limit < 1 || !(o->link_latency_ms >= 0) || o->pipeline_slices < 1 ||
        o->pipeline_slices > 4096 || !(o->compress_margin >= 0 && o->compress_margin <= 0.9) ||
        !(o->codec_alpha > 0 && o->codec_alpha <= 1))
        return WF_EINVAL;
    for (int i = 0; i < n; i++)
        if (!(profiles[i].cr > 0) || !(profiles[i].enc_gbps > 0) || !(profiles[i].dec_gbps > 0))
            return WF_EINVAL;
    wf_kv_controller *c = calloc(1, sizeof *c);
    if (!c) return WF_ENOMEM;
    c->prof = malloc((size_t)(n ? n : 1) * sizeof *c->prof);
    c->prior = malloc((size_t)(n ? n : 1) * sizeof *c->prior);
    c->opt = calloc((size_t)n + 1, sizeof *c->opt);
    if (!c->prof || !c->prior || !c->opt) {
        wf_kv_controller_free(c);
        return WF_ENOMEM;
    }
    if (n) memcpy(c->prof, profiles, (size_t)n * sizeof *profiles);
    if (n) memcpy(c->prior, profiles, (size_t)n * sizeof *profiles);
    c->n = n;
    c->o = *o;
    c->bw_gbps = o->init_bandwidth_gbps;
    for (int i = 0; i <= n; i++) c->opt[i].residual = 1.0;
    *out = c;
    return WF_OK;
}

void wf_kv_controller_free(wf_kv_controller *c) {
    if (!c) return;
    free(c->prof);
    free(c->prior);
    free(c->opt);
    free(c);
}

/* Model time in ms of moving `bytes` with option i (-1 raw) at bandwidth bw_gbps. */
static double model_at(const wf_kv_controller *c, int i, size_t bytes, double bw_gbps) {
    double gb = (double)bytes / 1e9, wire_gbs = bw_gbps / 8.0;
    if (i < 0) return gb / wire_gbs * 1e3 + c->o.link_latency_ms;
    return gb * pipe_s_per_gb(&c->prof[i], c->o.pipeline_slices, wire_gbs) * 1e3 +
           c->o.link_latency_ms;
}

static double model_ms(const wf_kv_controller *c, int i, size_t bytes) {
    return model_at(c, i, bytes, c->bw_gbps);
}

static bool cooling(const wf_kv_controller *c, int i, uint64_t now_ns) {
    return now_ns < c->opt[i + 1].cool_until;
}

void wf_kv_controller_decide(wf_kv_controller *c, const wf_kv_transfer_req *req, uint64_t now_ns,
                             wf_kv_decision *out) {
    double budget = req->accuracy >= 0 ? req->accuracy : c->o.default_accuracy;
    int best = -1, n_accurate = 0, best_eligible = -1;
    double raw_model = model_ms(c, -1, req->bytes);
    double raw_ms = raw_model * c->opt[0].residual;
    /* A profile must beat raw by the margin: the bar it is compared against. */
    double best_ms = raw_ms * (1.0 - c->o.compress_margin), best_model = raw_model;
    double fastest_ms = INFINITY;
    for (int i = 0; i < c->n; i++) {
        if (c->prof[i].accuracy < budget) continue;
        n_accurate++;
        if (cooling(c, i, now_ns)) continue;
        option *op = &c->opt[i + 1];
        if (op->codec_seen && now_ns - op->codec_seen > CODEC_FORGET * c->o.cooldown_ns) {
            c->prof[i].enc_gbps = c->prior[i].enc_gbps;
            c->prof[i].dec_gbps = c->prior[i].dec_gbps;
            op->codec_seen = 0;
        }
        double m = model_ms(c, i, req->bytes), t = m * c->opt[i + 1].residual;
        if (t < fastest_ms) {
            fastest_ms = t;
            best_eligible = i;
        }
        if (t < best_ms) {
            best_ms = t;
            best_model = m;
            best = i;
        }
    }
    wf_kv_reason reason = best >= 0 ? WF_KV_REASON_COMPRESS
                          : n_accurate == 0 ? WF_KV_REASON_NO_PROFILE
                          : best_eligible < 0 ? WF_KV_REASON_COOLING
                                              : WF_KV_REASON_LINK_FAST;
    if (best < 0) best_ms = raw_ms;
    int shown = best >= 0 ? best : best_eligible;
    *out = (wf_kv_decision){
        .profile = best,
        .reason = reason,
        .predicted_ms = best_ms,
        .model_ms = best_model,
        .raw_ms = raw_ms,
        .bandwidth_gbps = c->bw_gbps,
        .b_star_gbps = shown >= 0 ? wf_kv_profile_b_star_pipelined_gbps(&c->prof[shown],
                                                                          c->o.pipeline_slices)
                                   : 0.0,
        .slo_met = !(req->slo_ms > 0) || best_ms <= req->slo_ms,
        .bytes = req->bytes,
    };
    c->st.decisions++;
    c->st.by_reason[reason]++;
    if (best >= 0) c->st.compressed++;
    else c->st.raw++;
    if (!out->slo_met) c->st.slo_miss_predicted++;
    c->opt[best + 1].chosen++;
}

void wf_kv_controller_observe(wf_kv_controller *c, const wf_kv_decision *d, size_t wire_bytes,
                              uint64_t wire_ns, uint64_t total_ns, uint64_t now_ns) {
    if (d->profile < -1 || d->profile >= c->n) return;
    option *op = &c->opt[d->profile + 1];
    /* The residual must not absorb a bandwidth error (B has its own estimate): compare the
     * observed time with the model at the bandwidth this very transfer saw on the wire. */
    double model = d->model_ms;
    if (wire_ns > 0 && wire_bytes > 0) {
        double sample = (double)wire_bytes * 8.0 / (double)wire_ns; /* bits/ns = Gbps */
        /* B0 is a prior until the link is measured: the first sample replaces it (an EWMA
         * from a 10 Gbps guess would take many transfers to learn a 100 Mbps link). */
        if (c->bw_samples++ == 0) c->bw_gbps = sample;
        else c->bw_gbps += c->o.bandwidth_alpha * (sample - c->bw_gbps);
        model = model_at(c, d->profile, d->bytes, sample);
    }
    double observed_ms = (double)total_ns / 1e6, expected_ms = model * op->residual;
    if (model > 0) {
        double ratio = observed_ms / model;
        op->residual += c->o.residual_alpha * (ratio - op->residual);
    }
    op->observed++;
    c->st.observed++;
    c->st.bytes_in += d->bytes;
    c->st.bytes_wire += wire_bytes;
    if (observed_ms > c->o.miss_factor * expected_ms) {
        op->misses++;
        c->st.misses++;
        if (++op->streak >= c->o.miss_limit && d->profile >= 0) {
            /* Sit out a while, then start afresh: the conditions that made it miss may pass. */
            op->cool_until = now_ns + c->o.cooldown_ns;
            op->cooldowns++;
            c->st.cooldowns++;
            op->streak = 0;
            op->residual = 1.0;
        }
    } else {
        op->streak = 0;
    }
}

void wf_kv_controller_observe_pipelined(wf_kv_controller *c, const wf_kv_decision *d,
                                        size_t wire_bytes, uint64_t wire_ns, uint64_t codec_ns,
                                        uint64_t total_ns, uint64_t now_ns) {
    if (wire_ns > codec_ns || wire_ns == 0 || wire_bytes == 0 ||
        (double)wire_bytes * 8.0 / (double)wire_ns > c->bw_gbps) {
        wf_kv_controller_observe(c, d, wire_bytes, wire_ns, total_ns, now_ns);
        return;
    }
    /* Codec-bound and below the estimate: no bandwidth sample (the residual is then judged
     * against the model at the current B). */
    c->st.lower_bound_samples++;
    wf_kv_controller_observe(c, d, wire_bytes, 0, total_ns, now_ns);
}

void wf_kv_controller_observe_paced(wf_kv_controller *c, const wf_kv_decision *d, size_t wire_bytes,
                                    uint64_t wire_ns, uint64_t now_ns) {
    (void)now_ns;
    if (d->profile < -1 || d->profile >= c->n) return;
    option *op = &c->opt[d->profile + 1];
    if (wire_ns > 0 && wire_bytes > 0) {
        double sample = (double)wire_bytes * 8.0 / (double)wire_ns;
        if (sample > c->bw_gbps) {
            if (c->bw_samples++ == 0) c->bw_gbps = sample;
            else c->bw_gbps += c->o.bandwidth_alpha * (sample - c->bw_gbps);
        }
    }
    c->st.lower_bound_samples++;
    op->observed++;
    c->st.observed++;
    c->st.bytes_in += d->bytes;
    c->st.bytes_wire += wire_bytes;
}

void wf_kv_controller_observe_codec(wf_kv_controller *c, int profile, size_t in_bytes,
                                    uint64_t enc_ns, uint64_t dec_ns, uint64_t now_ns) {
    if (profile < 0 || profile >= c->n || in_bytes == 0) return;
    c->opt[profile + 1].codec_seen = now_ns ? now_ns : 1;
    wf_kv_profile_stats *p = &c->prof[profile];
    double a = c->o.codec_alpha, gb = (double)in_bytes;
    /* GB/s = bytes / ns; an EWMA of the times per byte (not of the speeds), so that one
     * preempted, very slow sample weighs by the time it cost. */
    if (enc_ns > 0) p->enc_gbps = 1.0 / ((1 - a) / p->enc_gbps + a * (double)enc_ns / gb);
    if (dec_ns > 0) p->dec_gbps = 1.0 / ((1 - a) / p->dec_gbps + a * (double)dec_ns / gb);
}

const wf_kv_profile_stats *wf_kv_controller_profile(const wf_kv_controller *c, int index) {
    return index >= 0 && index < c->n ? &c->prof[index] : NULL;
}

void wf_kv_controller_get_stats(const wf_kv_controller *c, wf_kv_controller_stats *out) {
    *out = c->st;
    out->bandwidth_gbps = c->bw_gbps;
}

int wf_kv_controller_n_profiles(const wf_kv_controller *c) { return c->n; }

void wf_kv_controller_option(const wf_kv_controller *c, int index, uint64_t now_ns,
                             wf_kv_option_state *out) {
    memset(out, 0, sizeof *out);
    if (index < -1 || index >= c->n) return;
    const option *op = &c->opt[index + 1];
    *out = (wf_kv_option_state){
        .name = index < 0 ? "raw" : c->prof[index].profile.name,
        .chosen = op->chosen,
        .observed = op->observed,
        .misses = op->misses,
        .cooldowns = op->cooldowns,
        .residual = op->residual,
        .cooling = index >= 0 && cooling(c, index, now_ns),
    };
}

/* snprintf into a running buffer; keeps counting past the end so the caller learns the size. */
typedef struct out_buf {
    char *p;
    size_t len, used;
} out_buf;

static void emit(out_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(out_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->used < b->len ? b->len - b->used : 0;
    int n = vsnprintf(room ? b->p + b->used : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) b->used += (size_t)n;
}

size_t wf_kv_controller_format_metrics(const wf_kv_controller *c, char *buf, size_t len,
                                       uint64_t now_ns) {
    out_buf b = {buf, len, 0};
    if (len) buf[0] = 0;
    emit(&b, "# HELP weft:kv_compress_decisions_total KV transfer decisions by reason.\n"
             "# TYPE weft:kv_compress_decisions_total counter\n");
    for (int r = 0; r < WF_KV_REASON_COUNT; r++)
        emit(&b, "weft:kv_compress_decisions_total{reason=\"%s\"} %llu\n",
             wf_kv_reason_name((wf_kv_reason)r), (unsigned long long)c->st.by_reason[r]);
    emit(&b, "# HELP weft:kv_compress_slo_miss_predicted_total Decisions predicted over their SLO.\n"
             "# TYPE weft:kv_compress_slo_miss_predicted_total counter\n"
             "weft:kv_compress_slo_miss_predicted_total %llu\n",
         (unsigned long long)c->st.slo_miss_predicted);
    emit(&b, "# HELP weft:kv_link_bandwidth_gbps Estimated link bandwidth.\n"
             "# TYPE weft:kv_link_bandwidth_gbps gauge\nweft:kv_link_bandwidth_gbps %.6g\n",
         c->bw_gbps);
    emit(&b, "# HELP weft:kv_transfer_bytes_total F16 KV bytes moved and bytes on the wire.\n"
             "# TYPE weft:kv_transfer_bytes_total counter\n"
             "weft:kv_transfer_bytes_total{kind=\"kv\"} %llu\n"
             "weft:kv_transfer_bytes_total{kind=\"wire\"} %llu\n",
         (unsigned long long)c->st.bytes_in, (unsigned long long)c->st.bytes_wire);
    static const char *const series[][2] = {
        {"kv_profile_chosen_total", "counter"},   {"kv_profile_misses_total", "counter"},
        {"kv_profile_cooldowns_total", "counter"}, {"kv_profile_residual", "gauge"},
        {"kv_profile_cooling", "gauge"}};
    for (size_t s = 0; s < sizeof series / sizeof series[0]; s++) {
        emit(&b, "# TYPE weft:%s %s\n", series[s][0], series[s][1]);
        for (int i = -1; i < c->n; i++) {
            wf_kv_option_state o;
            wf_kv_controller_option(c, i, now_ns, &o);
            double v = s == 0 ? (double)o.chosen : s == 1 ? (double)o.misses
                     : s == 2 ? (double)o.cooldowns : s == 3 ? o.residual : (double)o.cooling;
            emit(&b, "weft:%s{profile=\"%s\"} %.6g\n", series[s][0], o.name, v);
        }
    }
    return b.used;
}

size_t wf_kv_controller_format_json(const wf_kv_controller *c, char *buf, size_t len,
                                    uint64_t now_ns) {
    out_buf b = {buf, len, 0};
    if (len) buf[0] = 0;
    emit(&b, "{\"bandwidth_gbps\":%.6g,\"decisions\":%llu,\"compressed\":%llu,\"raw\":%llu,"
             "\"slo_miss_predicted\":%llu,\"observed\":%llu,\"misses\":%llu,\"cooldowns\":%llu,"
             "\"bytes_kv\":%llu,\"bytes_wire\":%llu,\"reasons\":{",
         c->bw_gbps, (unsigned long long)c->st.decisions, (unsigned long long)c->st.compressed,
         (unsigned long long)c->st.raw, (unsigned long long)c->st.slo_miss_predicted,
         (unsigned long long)c->st.observed, (unsigned long long)c->st.misses,
         (unsigned long long)c->st.cooldowns, (unsigned long long)c->st.bytes_in,
         (unsigned long long)c->st.bytes_wire);
    for (int r = 0; r < WF_KV_REASON_COUNT; r++)
        emit(&b, "%s\"%s\":%llu", r ? "," : "", wf_kv_reason_name((wf_kv_reason)r),
             (unsigned long long)c->st.by_reason[r]);
    emit(&b, "},\"options\":[");
    for (int i = -1; i < c->n; i++) {
        wf_kv_option_state o;
        wf_kv_controller_option(c, i, now_ns, &o);
        /* Profile names come from a file: keep only characters that need no JSON escaping. */
        char name[WF_KV_PROFILE_NAME_MAX];
        size_t k = 0;
        for (const char *p = o.name; *p && k + 1 < sizeof name; p++)
            name[k++] = (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) ? '_' : *p;
        name[k] = 0;
        emit(&b, "%s{\"profile\":\"%s\"", i > -1 ? "," : "", name);
        if (i >= 0) {
            const wf_kv_profile_stats *p = &c->prof[i];
            emit(&b, ",\"cr\":%.4g,\"enc_gbps\":%.4g,\"dec_gbps\":%.4g,\"speed_gbps\":%.4g,"
                     "\"b_star_gbps\":%.4g,\"accuracy\":%.4g",
                 p->cr, p->enc_gbps, p->dec_gbps, wf_kv_profile_speed_gbps(p),
                 wf_kv_profile_b_star_pipelined_gbps(p, c->o.pipeline_slices), p->accuracy);
        }
        emit(&b, ",\"chosen\":%llu,\"observed\":%llu,\"misses\":%llu,\"cooldowns\":%llu,"
                 "\"residual\":%.4g,\"cooling\":%s}",
             (unsigned long long)o.chosen, (unsigned long long)o.observed,
             (unsigned long long)o.misses, (unsigned long long)o.cooldowns, o.residual,
             o.cooling ? "true" : "false");
    }
    emit(&b, "]}");
    return b.used;
}
