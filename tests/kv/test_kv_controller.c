/* Tests kv/kv_controller.c and kv/kv_profiles.c: the compress/raw boundary B* = (1 - 1/CR)·S,
 * accuracy filtering, the switch away from a profile whose observed time runs 4x its
 * prediction, cool-down and recovery, the bandwidth estimate, the formatted counters, and the
 * profile library file (round trip, rejections, the shipped deploy/kv-profiles.json). */
#include "check_main.h"
#include "kv/kv_controller.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MB (1u << 20)

static wf_kv_profile_stats prof(const char *name, uint32_t id, double cr, double gbps, double acc) {
    wf_kv_profile_stats s;
    memset(&s, 0, sizeof s);
    wf_kv_profile_init(&s.profile, name, 4, 4);
    s.profile.id = id;
    s.cr = cr;
    s.enc_gbps = s.dec_gbps = gbps;
    s.accuracy = acc;
    return s;
}

static wf_kv_controller *make(const wf_kv_profile_stats *p, int n, double bw_gbps) {
    wf_kv_controller_options o;
    wf_kv_controller_options_init(&o);
    o.init_bandwidth_gbps = bw_gbps;
    wf_kv_controller *c;
    ck_assert_int_eq(wf_kv_controller_new(&o, p, n, &c), WF_OK);
    return c;
}

/* CR 4 and S = 12.5 GB/s (25 each way): B* = 0.75 x 100 Gbps = 75 Gbps. */
START_TEST(compress_on_slow_links_only) {
    wf_kv_profile_stats p = prof("k4v4", 1, 4.0, 25.0, 0.99);
    ck_assert_double_eq_tol(wf_kv_profile_b_star_gbps(&p), 75.0, 1e-9);
    double bws[] = {5, 25, 150};
    for (int i = 0; i < 3; i++) {
        wf_kv_controller *c = make(&p, 1, bws[i]);
        wf_kv_transfer_req r = {.bytes = 64 * MB, .accuracy = -1};
        wf_kv_decision d;
        wf_kv_controller_decide(c, &r, 0, &d);
        if (bws[i] < 75) {
            ck_assert_int_eq(d.profile, 0);
            ck_assert_int_eq(d.reason, WF_KV_REASON_COMPRESS);
            ck_assert(d.predicted_ms < d.raw_ms);
        } else {
            ck_assert_int_eq(d.profile, -1);
            ck_assert_int_eq(d.reason, WF_KV_REASON_LINK_FAST);
            ck_assert(d.predicted_ms <= d.raw_ms);
        }
        ck_assert_double_eq_tol(d.b_star_gbps, 75.0, 1e-9);
        /* Raw at B: 64 MiB / (B/8 GB/s). */
        ck_assert_double_eq_tol(d.raw_ms, 64.0 * MB / 1e9 / (bws[i] / 8) * 1e3, 1e-6);
        wf_kv_controller_free(c);
    }
}
END_TEST

/* Pipelined over n layer slices, the same profile (CR 4, 25 GB/s each way) costs
 * D/n·(1/E + 1/Dc + 1/(CR·B)) + D·(n-1)/n·max(...) instead of the sum, so it still pays at
 * 150 Gbps (serial B* 75 Gbps), and stops paying only near min(E, Dc) = 200 Gbps. */
START_TEST(pipelined_model_and_boundary) {
    wf_kv_profile_stats p = prof("k4v4", 1, 4.0, 25.0, 0.99);
    double bstar = wf_kv_profile_b_star_pipelined_gbps(&p, 30);
    ck_assert_double_eq_tol(wf_kv_profile_b_star_pipelined_gbps(&p, 1), 75.0, 1e-9);
    ck_assert(bstar > 150.0 && bstar < 200.0);
    ck_assert(wf_kv_profile_b_star_pipelined_gbps(&p, 1000) > bstar);
    ck_assert(wf_kv_profile_b_star_pipelined_gbps(&p, 1000) < 200.0);
    wf_kv_profile_stats none = prof("none", 2, 1.0, 25.0, 0.99);
    ck_assert_double_eq(wf_kv_profile_b_star_pipelined_gbps(&none, 30), 0.0);
    double bws[] = {5, 25, 150, bstar - 0.01, bstar + 0.01, 250};
    for (int i = 0; i < 6; i++) {
        wf_kv_controller_options o;
        wf_kv_controller_options_init(&o);
        o.init_bandwidth_gbps = bws[i];
        o.pipeline_slices = 30;
        wf_kv_controller *c;
        ck_assert_int_eq(wf_kv_controller_new(&o, &p, 1, &c), WF_OK);
        wf_kv_transfer_req r = {.bytes = 64 * MB, .accuracy = -1};
        wf_kv_decision d;
        wf_kv_controller_decide(c, &r, 0, &d);
        ck_assert_int_eq(d.profile, bws[i] < bstar ? 0 : -1);
        ck_assert_double_eq_tol(d.b_star_gbps, bstar, 1e-9);
        if (i == 0) { /* 5 Gbps: the wire is the slowest stage */
            double gb = 64.0 * MB / 1e9, e = 1 / 25.0, x = 1 / (4.0 * 5 / 8);
            ck_assert_double_eq_tol(d.predicted_ms, gb * ((2 * e + x) / 30 + x * 29 / 30) * 1e3, 1e-9);
        }
        wf_kv_controller_free(c);
    }
    wf_kv_controller_options o;
    wf_kv_controller_options_init(&o);
    ck_assert_int_eq(o.pipeline_slices, 1);
    wf_kv_controller *c;
    o.pipeline_slices = 0;
    ck_assert_int_eq(wf_kv_controller_new(&o, &p, 1, &c), WF_EINVAL);
}
END_TEST

/* A codec-bound pipelined transfer's span only bounds B from below: below the estimate it
 * leaves B alone (a compressing controller would otherwise learn a slow link from its own
 * transfers and never go raw again), above it it is taken; a wire-bound one is a sample. */
/* A controller with one k4v4 profile that decided a 64 MiB transfer (*d) and then saw one raw
 * sample of 8 Gbps (*raw: that decision, made raw). */
static wf_kv_controller *make_after_raw_sample(wf_kv_decision *d, wf_kv_decision *raw) {
    wf_kv_profile_stats p = prof("k4v4", 1, 4.0, 1.0, 0.99);
    wf_kv_controller *c = make(&p, 1, 10);
    wf_kv_transfer_req r = {.bytes = 64 * MB, .accuracy = -1};
    wf_kv_controller_decide(c, &r, 0, d);
    *raw = *d;
    raw->profile = -1;
    wf_kv_controller_observe(c, raw, 100 * MB, 100ull * MB * 8 / 8, 1, 1);
    return c;
}

START_TEST(pipelined_samples_bound_bandwidth) {
    wf_kv_decision d, raw;
    wf_kv_controller *c = make_after_raw_sample(&d, &raw);
    wf_kv_controller_stats st;
    wf_kv_controller_get_stats(c, &st);
    ck_assert_double_eq_tol(st.bandwidth_gbps, 8.0, 1e-9);
    /* 16 MiB over 64 ms (2 Gbps) while the codec took 100 ms: codec-bound, below B: ignored. */
    wf_kv_controller_observe_pipelined(c, &d, 16 * MB, 64000000ull, 100000000ull, 200000000ull, 2);
    wf_kv_controller_get_stats(c, &st);
    ck_assert_double_eq_tol(st.bandwidth_gbps, 8.0, 1e-9);
    ck_assert_uint_eq(st.lower_bound_samples, 1);
    ck_assert_uint_eq(st.observed, 2);
    /* Codec-bound but above B (16 Gbps): taken. */
    wf_kv_controller_observe_pipelined(c, &d, 16 * MB, 8000000ull, 100000000ull, 200000000ull, 3);
    wf_kv_controller_get_stats(c, &st);
    ck_assert_double_eq_tol(st.bandwidth_gbps, 8.0 + 0.3 * (16.0 * MB * 8 / 8e6 - 8.0), 1e-6);
    double b = st.bandwidth_gbps;
    /* Wire-bound (the span exceeds the codec's time): a sample even below B. */
    wf_kv_controller_observe_pipelined(c, &d, 16 * MB, 200000000ull, 100000000ull, 300000000ull, 4);
    wf_kv_controller_get_stats(c, &st);
    ck_assert_double_eq_tol(st.bandwidth_gbps, b + 0.3 * (16.0 * MB * 8 / 2e8 - b), 1e-6);
    ck_assert_uint_eq(st.lower_bound_samples, 1);
    wf_kv_controller_free(c);
}
END_TEST

/* A transfer the prefill paced (overlapped with the layers it ships, and keeping up): a slow
 * span below B leaves B alone and is never a miss however often it recurs (its time was the
 * prefill's), one above B raises B. */
START_TEST(paced_transfers_bound_bandwidth_and_never_miss) {
    wf_kv_decision d, raw;
    wf_kv_controller *c = make_after_raw_sample(&d, &raw); /* B = 8 Gbps */
    wf_kv_controller_stats st;
    /* 64 MiB over 10 s (0.05 Gbps: the prefill's pace), ten times: B stays, no miss. */
    for (int i = 0; i < 10; i++) {
        wf_kv_controller_observe_paced(c, &raw, 64 * MB, 10000000000ull, 2 + (uint64_t)i);
        wf_kv_controller_observe_paced(c, &d, 16 * MB, 10000000000ull, 2 + (uint64_t)i);
    }
    wf_kv_controller_get_stats(c, &st);
    ck_assert_double_eq_tol(st.bandwidth_gbps, 8.0, 1e-9);
    ck_assert_uint_eq(st.misses, 0);
    ck_assert_uint_eq(st.cooldowns, 0);
    ck_assert_uint_eq(st.lower_bound_samples, 20);
    ck_assert_uint_eq(st.observed, 21);
    /* Faster than B (16 MiB in 8 ms: 16.8 Gbps): B rises. */
    wf_kv_controller_observe_paced(c, &raw, 16 * MB, 8000000ull, 20);
    wf_kv_controller_get_stats(c, &st);
    ck_assert_double_eq_tol(st.bandwidth_gbps, 8.0 + 0.3 * (16.0 * MB * 8 / 8e6 - 8.0), 1e-6);
    wf_kv_controller_free(c);
}
END_TEST

/* The 1 Gbit/s case of bench/pd (BENCHMARKS.md, "Compressed transfers as a pipeline of layer
 * slices"): a 2048-token prompt is 47.2 MB of F16 KV, UCX achieved 0.908 Gbit/s, 8 layer slices,
 * the worker's margin 0.2. k4v4-nr (CR 4.06): start-up speeds on two threads of the loaded
 * host 0.9 / 1.45 GB/s -> compress (predicted ~0.2 s against raw 0.416 s). The transfer it made
 * showed the codec at 0.118 GB/s encode and 0.157 decode (0.518 s, 0.80x raw): once those
 * speeds are observed it goes raw, and it stays raw until 6 cool-downs passed without a
 * compressed transfer (then the start-up speeds hold again). The margin: a profile predicted
 * at 0.9x raw's time is not chosen with margin 0.2, and is with margin 0. */
START_TEST(one_gbit_measured_codec_speeds) {
    wf_kv_profile_stats p = prof("k4v4-nr", 1, 4.06, 1.0, 0.915);
    p.enc_gbps = 0.9;
    p.dec_gbps = 1.45;
    wf_kv_controller_options o;
    wf_kv_controller_options_init(&o);
    o.init_bandwidth_gbps = 0.908;
    o.pipeline_slices = 8;
    o.compress_margin = 0.2;
    wf_kv_controller *c;
    ck_assert_int_eq(wf_kv_controller_new(&o, &p, 1, &c), WF_OK);
    size_t D = 47200000;
    wf_kv_transfer_req r = {.bytes = D, .accuracy = -1};
    wf_kv_decision d;
    wf_kv_controller_decide(c, &r, 1000, &d);
    ck_assert_int_eq(d.profile, 0);
    ck_assert_int_eq(d.reason, WF_KV_REASON_COMPRESS);
    ck_assert_double_eq_tol(d.raw_ms, 47.2e-3 / (0.908 / 8) * 1e3, 1e-6); /* 415.9 ms */
    ck_assert(d.predicted_ms < 0.8 * d.raw_ms);
    /* The transfer as it went: encode 0.400 s, decode 0.300 s, 11.3 MB wire, 0.518 s total. */
    uint64_t t = 2000000000ull;
    wf_kv_controller_observe_codec(c, 0, D, 400000000ull, 300000000ull, t);
    const wf_kv_profile_stats *q = wf_kv_controller_profile(c, 0);
    ck_assert(q->enc_gbps < 0.25 && q->dec_gbps < 0.35); /* EWMA of time per byte, weight 0.5 */
    wf_kv_controller_observe_pipelined(c, &d, 11300000, 100000000ull, 400000000ull, 518000000ull, t);
    wf_kv_controller_decide(c, &r, t + 1, &d);
    ck_assert_int_eq(d.profile, -1);
    ck_assert_int_eq(d.reason, WF_KV_REASON_LINK_FAST);
    /* Raw transfers at the link's rate keep it raw... */
    for (int i = 0; i < 5; i++) {
        wf_kv_controller_observe(c, &d, D, 415900000ull, 415900000ull, t + 2 + (uint64_t)i);
        wf_kv_controller_decide(c, &r, t + 3 + (uint64_t)i, &d);
        ck_assert_int_eq(d.profile, -1);
    }
    /* ... until the learnt speeds are forgotten (6 cool-downs of 5 s): compressing again. */
    wf_kv_controller_decide(c, &r, t + 31000000000ull, &d);
    ck_assert_int_eq(d.profile, 0);
    ck_assert_double_eq(wf_kv_controller_profile(c, 0)->enc_gbps, 0.9);
    wf_kv_controller_free(c);

    /* The margin: a profile predicted at ~0.9x raw (CR 4.36, 0.145 GB/s each way: k4v3 at the
     * speeds a loaded single thread measured) goes only with margin 0. */
    wf_kv_profile_stats k = prof("k4v3", 2, 4.36, 0.145, 0.931);
    for (int m = 0; m < 2; m++) {
        o.compress_margin = m ? 0.0 : 0.2;
        ck_assert_int_eq(wf_kv_controller_new(&o, &k, 1, &c), WF_OK);
        wf_kv_controller_decide(c, &r, 0, &d);
        double ratio = d.profile >= 0 ? d.predicted_ms / d.raw_ms : 0;
        if (m) {
            ck_assert_int_eq(d.profile, 0);
            ck_assert(ratio > 0.8 && ratio < 1.0);
        } else {
            ck_assert_int_eq(d.profile, -1);
            ck_assert_double_eq(d.predicted_ms, d.raw_ms);
        }
        wf_kv_controller_free(c);
    }
    o.compress_margin = 0.95;
    ck_assert_int_eq(wf_kv_controller_new(&o, &k, 1, &c), WF_EINVAL);
}
END_TEST

START_TEST(boundary_b_star) {
    wf_kv_profile_stats p = prof("k4v4", 1, 4.0, 25.0, 0.99);
    for (int side = 0; side < 2; side++) {
        wf_kv_controller *c = make(&p, 1, side ? 75.01 : 74.99);
        wf_kv_transfer_req r = {.bytes = 8 * MB, .accuracy = -1};
        wf_kv_decision d;
        wf_kv_controller_decide(c, &r, 0, &d);
        ck_assert_int_eq(d.profile, side ? -1 : 0);
        wf_kv_controller_free(c);
    }
    /* A larger CR moves the boundary up: CR 8 -> B* = 87.5 Gbps. */
    wf_kv_profile_stats q = prof("k2v2", 2, 8.0, 25.0, 0.99);
    wf_kv_controller *c = make(&q, 1, 80);
    wf_kv_transfer_req r = {.bytes = 8 * MB, .accuracy = -1};
    wf_kv_decision d;
    wf_kv_controller_decide(c, &r, 0, &d);
    ck_assert_int_eq(d.profile, 0);
    wf_kv_controller_free(c);
}
END_TEST

START_TEST(accuracy_budget_filters_profiles) {
    wf_kv_profile_stats p[2] = {prof("aggressive", 1, 8.0, 20.0, 0.80),
                                prof("mild", 2, 3.0, 20.0, 0.99)};
    wf_kv_controller *c = make(p, 2, 5);
    wf_kv_decision d;
    wf_kv_transfer_req r = {.bytes = 16 * MB, .accuracy = 0.7};
    wf_kv_controller_decide(c, &r, 0, &d);
    ck_assert_int_eq(d.profile, 0); /* the faster one is allowed */
    r.accuracy = 0.95;
    wf_kv_controller_decide(c, &r, 0, &d);
    ck_assert_int_eq(d.profile, 1);
    r.accuracy = -1; /* deployment default 0.9 */
    wf_kv_controller_decide(c, &r, 0, &d);
    ck_assert_int_eq(d.profile, 1);
    r.accuracy = 0.999;
    wf_kv_controller_decide(c, &r, 0, &d);
    ck_assert_int_eq(d.profile, -1);
    ck_assert_int_eq(d.reason, WF_KV_REASON_NO_PROFILE);
    /* An SLO the best option cannot meet is flagged, and the best option is still chosen. */
    r.accuracy = 0.95;
    r.slo_ms = 1.0;
    wf_kv_controller_decide(c, &r, 0, &d);
    ck_assert_int_eq(d.profile, 1);
    ck_assert(!d.slo_met);
    wf_kv_controller_stats st;
    wf_kv_controller_get_stats(c, &st);
    ck_assert_uint_eq(st.decisions, 5);
    ck_assert_uint_eq(st.compressed, 4);
    ck_assert_uint_eq(st.by_reason[WF_KV_REASON_NO_PROFILE], 1);
    ck_assert_uint_eq(st.slo_miss_predicted, 1);
    wf_kv_controller_free(c);
}
END_TEST

START_TEST(switches_profile_after_4x_latency) {
    wf_kv_profile_stats p[2] = {prof("a", 1, 8.0, 20.0, 0.99), prof("b", 2, 6.0, 20.0, 0.99)};
    wf_kv_controller *c = make(p, 2, 5);
    wf_kv_transfer_req r = {.bytes = 32 * MB, .accuracy = -1};
    wf_kv_decision d;
    uint64_t now = 1000;
    wf_kv_controller_decide(c, &r, now, &d);
    ck_assert_int_eq(d.profile, 0);
    double b_pred = 0;
    int switched_after = -1;
    for (int i = 0; i < 10; i++) {
        /* A's transfers take 4x the model; the link itself behaves (5 Gbps). */
        size_t wire = (size_t)(r.bytes / p[0].cr);
        uint64_t wire_ns = (uint64_t)((double)wire * 8 / 5.0);
        wf_kv_controller_observe(c, &d, wire, wire_ns, (uint64_t)(d.model_ms * 4 * 1e6), now);
        now += 1000000;
        wf_kv_controller_decide(c, &r, now, &d);
        if (d.profile == 1) {
            switched_after = i + 1;
            b_pred = d.predicted_ms;
            break;
        }
    }
    ck_assert_int_ge(switched_after, 1);
    ck_assert_int_le(switched_after, 3);
    wf_kv_option_state a, b;
    wf_kv_controller_option(c, 0, now, &a);
    wf_kv_controller_option(c, 1, now, &b);
    ck_assert_str_eq(a.name, "a");
    ck_assert(a.residual > 1.5 || a.cooling);
    ck_assert_double_eq_tol(b.residual, 1.0, 1e-12);
    ck_assert(b_pred > 0);
    /* B's predictions hold, so it keeps being chosen. */
    for (int i = 0; i < 5; i++) {
        size_t wire = (size_t)(r.bytes / p[1].cr);
        wf_kv_controller_observe(c, &d, wire, (uint64_t)((double)wire * 8 / 5.0),
                                 (uint64_t)(d.model_ms * 1e6), now);
        wf_kv_controller_decide(c, &r, now, &d);
        ck_assert_int_eq(d.profile, 1);
    }
    wf_kv_controller_free(c);
}
END_TEST

START_TEST(cool_down_and_recovery) {
    wf_kv_profile_stats p = prof("only", 7, 8.0, 20.0, 0.99);
    wf_kv_controller_options o;
    wf_kv_controller_options_init(&o);
    o.init_bandwidth_gbps = 1; /* so slow that the profile wins even at 4x its prediction */
    o.cooldown_ns = 2000000000ull;
    wf_kv_controller *c;
    ck_assert_int_eq(wf_kv_controller_new(&o, &p, 1, &c), WF_OK);
    wf_kv_transfer_req r = {.bytes = 8 * MB, .accuracy = -1};
    wf_kv_decision d;
    uint64_t now = 5;
    for (int i = 0; i < 3; i++) {
        wf_kv_controller_decide(c, &r, now, &d);
        ck_assert_int_eq(d.profile, 0);
        if (i == 0) ck_assert(d.predicted_ms * 4 < d.raw_ms);
        wf_kv_controller_observe(c, &d, 0, 0, (uint64_t)(d.model_ms * 4 * 1e6), now);
        now += 1000;
    }
    wf_kv_option_state s;
    wf_kv_controller_option(c, 0, now, &s);
    ck_assert(s.cooling);
    ck_assert_uint_eq(s.cooldowns, 1);
    ck_assert_uint_eq(s.misses, 3);
    wf_kv_controller_decide(c, &r, now, &d);
    ck_assert_int_eq(d.profile, -1);
    ck_assert_int_eq(d.reason, WF_KV_REASON_COOLING);
    now += o.cooldown_ns;
    wf_kv_controller_option(c, 0, now, &s);
    ck_assert(!s.cooling);
    ck_assert_double_eq_tol(s.residual, 1.0, 1e-12); /* starts afresh */
    wf_kv_controller_decide(c, &r, now, &d);
    ck_assert_int_eq(d.profile, 0);
    /* A hit resets the streak: two misses, a hit, two misses -> no cool-down. */
    for (int i = 0; i < 5; i++) {
        double f = i == 2 ? 1.0 : 4.0;
        wf_kv_controller_observe(c, &d, 0, 0, (uint64_t)(d.predicted_ms * f * 1e6), now);
        wf_kv_controller_decide(c, &r, now, &d);
    }
    wf_kv_controller_option(c, 0, now, &s);
    ck_assert_uint_eq(s.cooldowns, 1);
    ck_assert(!s.cooling);
    wf_kv_controller_free(c);
}
END_TEST

START_TEST(bandwidth_estimate_follows_observations) {
    wf_kv_profile_stats p = prof("k4v4", 1, 4.0, 25.0, 0.99);
    wf_kv_controller *c = make(&p, 1, 150);
    wf_kv_transfer_req r = {.bytes = 64 * MB, .accuracy = -1};
    wf_kv_decision d;
    wf_kv_controller_decide(c, &r, 0, &d);
    ck_assert_int_eq(d.profile, -1);
    /* The link turns out to carry 10 Gbps: after a few samples the controller compresses. */
    for (int i = 0; i < 40; i++) {
        size_t wire = d.profile < 0 ? r.bytes : r.bytes / 4;
        uint64_t ns = (uint64_t)((double)wire * 8 / 10.0);
        uint64_t codec_ns = d.profile < 0 ? 0 : (uint64_t)((double)r.bytes / 12.5);
        wf_kv_controller_observe(c, &d, wire, ns, ns + codec_ns, 0);
        wf_kv_controller_decide(c, &r, 0, &d);
    }
    wf_kv_controller_stats st;
    wf_kv_controller_get_stats(c, &st);
    ck_assert_double_eq_tol(st.bandwidth_gbps, 10.0, 0.01);
    ck_assert_int_eq(d.profile, 0);
    /* The bandwidth error went into B, not into the residuals. */
    wf_kv_option_state raw, k4;
    wf_kv_controller_option(c, -1, 0, &raw);
    wf_kv_controller_option(c, 0, 0, &k4);
    ck_assert_double_eq_tol(raw.residual, 1.0, 1e-3);
    ck_assert_double_eq_tol(k4.residual, 1.0, 1e-3);
    wf_kv_controller_free(c);
}
END_TEST

START_TEST(formats_metrics_and_json) {
    wf_kv_profile_stats p[2] = {prof("k4v4", 1, 4.0, 25.0, 0.99), prof("k2v2", 2, 7.0, 25.0, 0.9)};
    wf_kv_controller *c = make(p, 2, 5);
    wf_kv_transfer_req r = {.bytes = MB, .accuracy = 0.95};
    wf_kv_decision d;
    for (int i = 0; i < 3; i++) {
        wf_kv_controller_decide(c, &r, 0, &d);
        wf_kv_controller_observe(c, &d, MB / 4, 1000000, 2000000, 0);
    }
    size_t need = wf_kv_controller_format_metrics(c, NULL, 0, 0);
    char *buf = malloc(need + 1);
    ck_assert_uint_eq(wf_kv_controller_format_metrics(c, buf, need + 1, 0), need);
    ck_assert_uint_eq(strlen(buf), need);
    ck_assert(strstr(buf, "weft:kv_compress_decisions_total{reason=\"compress\"} 3\n") != NULL);
    ck_assert(strstr(buf, "weft:kv_profile_chosen_total{profile=\"k4v4\"} 3\n") != NULL);
    ck_assert(strstr(buf, "weft:kv_profile_chosen_total{profile=\"raw\"} 0\n") != NULL);
    ck_assert(strstr(buf, "weft:kv_link_bandwidth_gbps ") != NULL);
    /* A short buffer is truncated, NUL-terminated, and the full size still reported. */
    char small[40];
    ck_assert_uint_eq(wf_kv_controller_format_metrics(c, small, sizeof small, 0), need);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    free(buf);
    need = wf_kv_controller_format_json(c, NULL, 0, 0);
    buf = malloc(need + 1);
    wf_kv_controller_format_json(c, buf, need + 1, 0);
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", je.text, buf);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "decisions")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "reasons"), "compress")), 3);
    json_t *opts = json_object_get(j, "options");
    ck_assert_uint_eq(json_array_size(opts), 3);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(opts, 1), "profile")), "k4v4");
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(opts, 1), "observed")), 3);
    json_decref(j);
    free(buf);
    wf_kv_controller_free(c);
    /* Bad options and profiles are refused. */
    wf_kv_controller_options o;
    wf_kv_controller_options_init(&o);
    wf_kv_profile_stats bad = prof("x", 1, 0.0, 25.0, 0.9);
    ck_assert_int_eq(wf_kv_controller_new(&o, &bad, 1, &c), WF_EINVAL);
    o.init_bandwidth_gbps = 0;
    ck_assert_int_eq(wf_kv_controller_new(&o, NULL, 0, &c), WF_EINVAL);
}
END_TEST

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(profile_library_file) {
    char path[] = "/tmp/weft-kvprof-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    wf_kv_profile_lib lib = {.n_layers = 2, .n_kv_heads = 2, .head_dim = 64};
    snprintf(lib.model, sizeof lib.model, "test-model");
    float imp[4] = {0.5f, 0.25f, 1, 2};
    wf_kv_profile_stats items[2] = {prof("k4v4", 1, 3.7, 1.5, 0.98), prof("k2v2-h50", 2, 6.5, 1.4, 0.9)};
    items[1].profile.low_share = 0.5f;
    items[1].profile.low_v_bits = 2;
    items[1].profile.rotate_k = true;
    items[1].ppl_delta = 0.031;
    lib.importance = imp;
    lib.items = items;
    lib.n = 2;
    char err[256];
    ck_assert_int_eq(wf_kv_profile_lib_save(&lib, path, err, sizeof err), WF_OK);
    wf_kv_profile_lib back;
    ck_assert_msg(wf_kv_profile_lib_load(path, &back, err, sizeof err) == WF_OK, "%s", err);
    ck_assert_str_eq(back.model, "test-model");
    ck_assert_int_eq(back.n, 2);
    ck_assert_int_eq(back.head_dim, 64);
    ck_assert_float_eq(back.importance[3], 2.0f);
    ck_assert_str_eq(back.items[1].profile.name, "k2v2-h50");
    ck_assert(back.items[1].profile.rotate_k);
    ck_assert_int_eq(back.items[1].profile.low_v_bits, 2);
    ck_assert_float_eq_tol(back.items[1].profile.low_share, 0.5f, 1e-6f);
    ck_assert_double_eq_tol(back.items[1].ppl_delta, 0.031, 1e-9);
    ck_assert_double_eq_tol(back.items[0].cr, 3.7, 1e-9);
    wf_kv_profile_lib_free(&back);
    struct { const char *text, *needle; } bad[] = {
        {"{", ":1:"},
        {"{\"version\":2,\"profiles\":[]}", "version"},
        {"{\"version\":1,\"profiles\":[{\"name\":\"a b\",\"id\":1}]}", "name"},
        {"{\"version\":1,\"profiles\":[{\"name\":\"a\",\"id\":1,\"k_bits\":4,\"v_bits\":4}]}", "missing"},
        {"{\"version\":1,\"profiles\":[{\"name\":\"a\",\"id\":1,\"k_bits\":1,\"v_bits\":4,\"cr\":2,"
         "\"enc_gbps\":1,\"dec_gbps\":1,\"accuracy\":0.9}]}", "bit widths"},
        {"{\"version\":1,\"profiles\":[{\"name\":\"a\",\"id\":1,\"k_bits\":4,\"v_bits\":4,\"cr\":2,"
         "\"enc_gbps\":1,\"dec_gbps\":1,\"accuracy\":0.9},{\"name\":\"b\",\"id\":1,\"k_bits\":4,"
         "\"v_bits\":4,\"cr\":2,\"enc_gbps\":1,\"dec_gbps\":1,\"accuracy\":0.9}]}", "twice"},
        {"{\"version\":1,\"n_layers\":2,\"n_kv_heads\":2,\"importance\":[1,2,3],\"profiles\":[]}",
         "importance"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(path, bad[i].text);
        err[0] = 0;
        ck_assert_int_eq(wf_kv_profile_lib_load(path, &back, err, sizeof err), WF_EFORMAT);
        ck_assert_msg(strstr(err, bad[i].needle) != NULL, "case %zu: %s", i, err);
        ck_assert_int_eq(back.n, 0);
        wf_kv_profile_lib_free(&back);
    }
    unlink(path);
    ck_assert_int_eq(wf_kv_profile_lib_load(path, &back, err, sizeof err), WF_ENOTFOUND);
}
END_TEST

/* The shipped library loads, matches the default model and offers a choice of profiles. */
START_TEST(shipped_profile_file_loads) {
    wf_kv_profile_lib lib;
    char err[256];
    ck_assert_msg(wf_kv_profile_lib_load(WEFT_SOURCE_DIR "/deploy/kv-profiles.json", &lib, err,
                                         sizeof err) == WF_OK, "%s", err);
    ck_assert_int_eq(lib.n_layers, 30);
    ck_assert_int_eq(lib.n_kv_heads, 3);
    ck_assert_int_eq(lib.head_dim, 64);
    ck_assert_ptr_nonnull(lib.importance);
    ck_assert_int_ge(lib.n, 3);
    /* Start-up measurement on this machine, on a store of the model's geometry. */
    wf_kv_geometry g = {.n_layers = 30, .n_kv_heads = 3, .head_dim = 64, .block_size = 16,
                        .dtype = WF_KV_DTYPE_F16};
    wf_kv_store kv;
    ck_assert_int_eq(wf_kv_store_init(&kv, &g, wf_kv_geometry_block_bytes(&g) * 4), WF_OK);
    uint16_t *k = (void *)kv.k, *v = (void *)kv.v;
    size_t n_half = kv.block_bytes / 2 * 4 * 30;
    uint32_t x = 1;
    for (size_t i = 0; i < n_half; i++) {
        x = x * 1664525u + 1013904223u;
        k[i] = (uint16_t)(0x3000u + (x >> 20)); /* finite halves around 0.1..1 */
        v[i] = (uint16_t)(0xB000u + (x >> 21));
    }
    int32_t blocks[4] = {0, 1, 2, 3};
    double acc0 = lib.items[0].accuracy;
    ck_assert_int_eq(wf_kv_profile_lib_measure(&lib, &kv, blocks, 4, 60, 50000000ull, err,
                                               sizeof err), WF_OK);
    for (int i = 0; i < lib.n; i++) {
        ck_assert(lib.items[i].enc_gbps > 0 && lib.items[i].dec_gbps > 0);
        ck_assert(lib.items[i].cr > 1.5);
    }
    ck_assert(lib.items[0].accuracy == acc0);
    wf_kv_store_free(&kv);
    wf_kv_controller_options o;
    wf_kv_controller_options_init(&o);
    wf_kv_controller *c;
    ck_assert_int_eq(wf_kv_controller_new(&o, lib.items, lib.n, &c), WF_OK);
    for (int i = 0; i < lib.n; i++) {
        ck_assert(lib.items[i].cr > 1.0);
        ck_assert(lib.items[i].accuracy > 0.0 && lib.items[i].accuracy <= 1.0);
    }
    wf_kv_controller_free(c);
    wf_kv_profile_lib_free(&lib);
}
END_TEST

static Suite *controller_suite(void) {
    Suite *s = suite_create("kv_controller");
    TCase *t = tcase_create("controller");
    tcase_add_test(t, compress_on_slow_links_only);
    tcase_add_test(t, boundary_b_star);
    tcase_add_test(t, pipelined_model_and_boundary);
    tcase_add_test(t, pipelined_samples_bound_bandwidth);
    tcase_add_test(t, paced_transfers_bound_bandwidth_and_never_miss);
    tcase_add_test(t, one_gbit_measured_codec_speeds);
    tcase_add_test(t, accuracy_budget_filters_profiles);
    tcase_add_test(t, switches_profile_after_4x_latency);
    tcase_add_test(t, cool_down_and_recovery);
    tcase_add_test(t, bandwidth_estimate_follows_observations);
    tcase_add_test(t, formats_metrics_and_json);
    tcase_add_test(t, profile_library_file);
    tcase_add_test(t, shipped_profile_file_loads);
    suite_add_tcase(s, t);
    return s;
}

WF_CHECK_MAIN(controller_suite)
