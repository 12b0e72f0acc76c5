/* The profile library file: what weft-kvprof measured for one model (per profile: compression
 * ratio, codec speeds, accuracy; per head: the importance score that ranks heads for hybrid
 * precision), read and written as JSON. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_controller.h"
#include "proto/base/clock.h"

#define LIB_VERSION 1

void wf_kv_profile_lib_free(wf_kv_profile_lib *lib) {
    free(lib->importance);
    free(lib->items);
    memset(lib, 0, sizeof *lib);
}

static bool name_ok(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            return false;
    return true;
}

/* Reads a number field; missing -> def (required fields pass NAN and fail). */
static bool get_num(json_t *o, const char *key, double def, double *out) {
    json_t *v = json_object_get(o, key);
    if (!v) {
        *out = def;
        return !isnan(def);
    }
    if (!json_is_number(v)) return false;
    *out = json_number_value(v);
    return isfinite(*out);
}

static wf_status parse_profile(json_t *o, int idx, wf_kv_profile_stats *s, char *err,
                               size_t errlen) {
    if (!json_is_object(o))
        return wf_status_errorf(err, errlen, WF_EFORMAT, "profiles[%d] is not an object", idx);
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!name || strlen(name) >= WF_KV_PROFILE_NAME_MAX || !name_ok(name))
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "profiles[%d]: name must be 1..%d characters of [A-Za-z0-9_.-]",
                                idx, WF_KV_PROFILE_NAME_MAX - 1);
    double id, kb, vb, lkb, lvb, share, group, zl, cr, enc, dec, acc, ppl;
    if (!get_num(o, "id", NAN, &id) || !get_num(o, "k_bits", NAN, &kb) ||
        !get_num(o, "v_bits", NAN, &vb) || !get_num(o, "low_k_bits", kb, &lkb) ||
        !get_num(o, "low_v_bits", vb, &lvb) || !get_num(o, "low_share", 0, &share) ||
        !get_num(o, "k_group", 64, &group) || !get_num(o, "zstd_level", 1, &zl) ||
        !get_num(o, "cr", NAN, &cr) || !get_num(o, "enc_gbps", NAN, &enc) ||
        !get_num(o, "dec_gbps", NAN, &dec) || !get_num(o, "accuracy", NAN, &acc) ||
        !get_num(o, "ppl_delta", 0, &ppl))
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "profile '%s': a field is missing or not a finite number (needs "
                                "id, k_bits, v_bits, cr, enc_gbps, dec_gbps, accuracy)", name);
    if (id < 0 || id > 4294967295.0 || group < 1 || group > 65535 || kb < 0 || kb > 16 ||
        vb < 0 || vb > 16 || lkb < 0 || lkb > 16 || lvb < 0 || lvb > 16 || zl < -100 || zl > 100)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "profile '%s': a field is out of range",
                                name);
    wf_kv_profile_init(&s->profile, name, (int)kb, (int)vb);
    s->profile.id = (uint32_t)id;
    s->profile.low_k_bits = (uint8_t)lkb;
    s->profile.low_v_bits = (uint8_t)lvb;
    s->profile.low_share = (float)share;
    s->profile.k_group = (uint16_t)group;
    s->profile.zstd_level = (int)zl;
    json_t *rk = json_object_get(o, "rotate_k"), *rv = json_object_get(o, "rotate_v");
    if ((rk && !json_is_boolean(rk)) || (rv && !json_is_boolean(rv)))
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "profile '%s': rotate_k/rotate_v must be booleans", name);
    if (rk) s->profile.rotate_k = json_is_true(rk);
    if (rv) s->profile.rotate_v = json_is_true(rv);
    wf_status st = wf_kv_profile_check(&s->profile, err, errlen);
    if (st != WF_OK) return WF_EFORMAT;
    if (!(cr > 0) || !(enc > 0) || !(dec > 0) || acc < 0 || acc > 1)
        return wf_status_errorf(err, errlen, WF_EFORMAT,
                                "profile '%s': cr and speeds must be > 0, accuracy in [0, 1]",
                                name);
    s->cr = cr;
    s->enc_gbps = enc;
    s->dec_gbps = dec;
    s->accuracy = acc;
    s->ppl_delta = ppl;
    return WF_OK;
}

wf_status wf_kv_profile_lib_load(const char *path, wf_kv_profile_lib *lib, char *err,
                                 size_t errlen) {
    memset(lib, 0, sizeof *lib);
    FILE *f = fopen(path, "rb");
    if (!f)
        return wf_status_errorf(err, errlen, errno == ENOENT ? WF_ENOTFOUND : WF_EIO, "%s: %s",
                                path, strerror(errno));
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root)
        return wf_status_errorf(err, errlen, WF_EFORMAT, "%s:%d: %s", path, je.line, je.text);
    wf_status st = WF_EFORMAT;
    json_t *ver = json_object_get(root, "version"), *profs = json_object_get(root, "profiles");
    if (!json_is_integer(ver) || json_integer_value(ver) != LIB_VERSION) {
        wf_errorf(err, errlen, "%s: \"version\" must be %d", path, LIB_VERSION);
        goto fail;
    }
    if (!json_is_array(profs) || json_array_size(profs) > 256) {
        wf_errorf(err, errlen, "%s: \"profiles\" must be an array of at most 256", path);
        goto fail;
    }
    const char *model = json_string_value(json_object_get(root, "model"));
    snprintf(lib->model, sizeof lib->model, "%s", model ? model : "");
    double L, H, D;
    if (!get_num(root, "n_layers", 0, &L) || !get_num(root, "n_kv_heads", 0, &H) ||
        !get_num(root, "head_dim", 0, &D) || L < 0 || H < 0 || D < 0 || L > 65535 ||
        H > 65535 || D > 65535) {
        wf_errorf(err, errlen, "%s: bad n_layers / n_kv_heads / head_dim", path);
        goto fail;
    }
    lib->n_layers = (int)L;
    lib->n_kv_heads = (int)H;
    lib->head_dim = (int)D;
    json_t *imp = json_object_get(root, "importance");
    if (imp) {
        size_t want = (size_t)lib->n_layers * (size_t)lib->n_kv_heads;
        if (!json_is_array(imp) || json_array_size(imp) != want || want == 0) {
            wf_errorf(err, errlen, "%s: \"importance\" must hold n_layers x n_kv_heads = %zu "
                      "numbers", path, want);
            goto fail;
        }
        lib->importance = malloc(want * sizeof *lib->importance);
        if (!lib->importance) {
            st = WF_ENOMEM;
            goto fail;
        }
        for (size_t i = 0; i < want; i++) {
            json_t *v = json_array_get(imp, i);
            if (!json_is_number(v) || !isfinite(json_number_value(v))) {
                wf_errorf(err, errlen, "%s: importance[%zu] is not a number", path, i);
                goto fail;
            }
            lib->importance[i] = (float)json_number_value(v);
        }
    }
    size_t n = json_array_size(profs);
    lib->items = calloc(n ? n : 1, sizeof *lib->items);
    if (!lib->items) {
        st = WF_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        if (parse_profile(json_array_get(profs, i), (int)i, &lib->items[i], err, errlen) != WF_OK)
            goto fail;
        for (size_t j = 0; j < i; j++)
            if (lib->items[j].profile.id == lib->items[i].profile.id) {
                wf_errorf(err, errlen, "%s: profile id %u used twice", path,
                          lib->items[i].profile.id);
                goto fail;
            }
        lib->n++;
    }
    json_decref(root);
    return WF_OK;
fail:
    json_decref(root);
    wf_kv_profile_lib_free(lib);
    return st;
}

wf_status wf_kv_profile_lib_save(const wf_kv_profile_lib *lib, const char *path, char *err,
                                 size_t errlen) {
    wf_status st = WF_ENOMEM;
    json_t *root = json_object(), *profs = json_array();
    if (!root || !profs) goto done;
    json_object_set_new(root, "version", json_integer(LIB_VERSION));
    json_object_set_new(root, "model", json_string(lib->model));
    json_object_set_new(root, "n_layers", json_integer(lib->n_layers));
    json_object_set_new(root, "n_kv_heads", json_integer(lib->n_kv_heads));
    json_object_set_new(root, "head_dim", json_integer(lib->head_dim));
    if (lib->importance) {
        json_t *imp = json_array();
        for (int i = 0; i < lib->n_layers * lib->n_kv_heads; i++)
            json_array_append_new(imp, json_real(round(lib->importance[i] * 1e6) / 1e6));
        json_object_set_new(root, "importance", imp);
    }
    for (int i = 0; i < lib->n; i++) {
        const wf_kv_profile_stats *s = &lib->items[i];
        const wf_kv_profile *p = &s->profile;
        json_t *o = json_pack("{s:i, s:s, s:i, s:i, s:i, s:i, s:f, s:b, s:b, s:i, s:i, s:f, s:f, "
                              "s:f, s:f, s:f}",
                              "id", (json_int_t)p->id, "name", p->name, "k_bits", p->k_bits,
                              "v_bits", p->v_bits, "low_k_bits", p->low_k_bits, "low_v_bits",
                              p->low_v_bits, "low_share", (double)p->low_share, "rotate_k",
                              p->rotate_k, "rotate_v", p->rotate_v, "k_group", p->k_group,
                              "zstd_level", p->zstd_level, "cr", round(s->cr * 1e4) / 1e4,
                              "enc_gbps", round(s->enc_gbps * 1e4) / 1e4, "dec_gbps",
                              round(s->dec_gbps * 1e4) / 1e4, "accuracy",
                              floor(s->accuracy * 1e4) / 1e4, "ppl_delta", /* never overstate */
                              round(s->ppl_delta * 1e5) / 1e5);
        if (!o || json_array_append_new(profs, o) != 0) goto done;
    }
    json_object_set(root, "profiles", profs);
    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
        st = wf_status_errorf(err, errlen, WF_EIO, "cannot write %s", path);
        goto done;
    }
    st = WF_OK;
done:
    if (st == WF_ENOMEM) wf_errorf(err, errlen, "out of memory writing %s", path);
    json_decref(profs);
    json_decref(root);
    return st;
}

wf_status wf_kv_profile_lib_measure(wf_kv_profile_lib *lib, const wf_kv_store *kv,
                                    const int32_t *blocks, int n_blocks, int n_tokens,
                                    uint64_t budget_ns, char *err, size_t errlen) {
    return wf_kv_profile_lib_measure_parallel(lib, kv, blocks, n_blocks, n_tokens, budget_ns, NULL,
                                              NULL, 1, err, errlen);
}

wf_status wf_kv_profile_lib_measure_parallel(wf_kv_profile_lib *lib, const wf_kv_store *kv,
                                             const int32_t *blocks, int n_blocks, int n_tokens,
                                             uint64_t budget_ns, wf_kv_parallel_fn run, void *pool,
                                             int n_workers, char *err, size_t errlen) {
    if (lib->n == 0) return WF_OK;
    wf_kv_codec *c;
    wf_status st = wf_kv_codec_new(&kv->geometry, n_tokens > 0 ? n_tokens : 1, &c);
    if (st != WF_OK) return wf_status_errorf(err, errlen, st, "kv codec for the measurement");
    if (run && (st = wf_kv_codec_set_parallel(c, run, pool, n_workers)) != WF_OK) {
        wf_kv_codec_free(c);
        return wf_status_errorf(err, errlen, st, "kv codec on %d threads", n_workers);
    }
    wf_kv_store out;
    size_t cap = wf_kv_codec_max_frame_bytes(c, n_tokens);
    uint8_t *frame = malloc(cap);
    if (!frame || wf_kv_store_init(&out, &kv->geometry,
                                   wf_kv_geometry_block_bytes(&kv->geometry) *
                                       (size_t)((n_tokens + kv->geometry.block_size - 1) /
                                                kv->geometry.block_size)) != WF_OK) {
        free(frame);
        wf_kv_codec_free(c);
        return wf_status_errorf(err, errlen, WF_ENOMEM, "kv profile measurement buffers");
    }
    int32_t *table = malloc((size_t)out.n_blocks * sizeof *table);
    if (!table) {
        st = wf_status_errorf(err, errlen, WF_ENOMEM, "kv profile measurement buffers");
        goto done;
    }
    for (int i = 0; i < out.n_blocks; i++) table[i] = i;
    size_t in = wf_kv_codec_input_bytes(c, n_tokens);
    /* Rounds over every profile in turn (at least three, then until the budget is spent), each
     * speed the fastest of its rounds: on a shared host a round that lost its CPU measures the
     * other jobs. A mean over one profile's few rounds in a row (before) took such a stretch
     * for the codec's speed: a profile looked up to 10x slower than it runs and the controller
     * never chose it. Interleaved, a burst of load slows one round of every profile, not every
     * round of one. Real transfers correct the speeds for load later
     * (wf_kv_controller_observe_codec). */
    for (int i = 0; i < lib->n; i++) lib->items[i].enc_gbps = lib->items[i].dec_gbps = 0;
    uint64_t start = wf_clock_now_ns();
    for (int round = 0; round < 3 || wf_clock_now_ns() - start < budget_ns; round++) {
        for (int i = 0; i < lib->n; i++) {
            wf_kv_profile_stats *s = &lib->items[i];
            st = wf_kv_codec_set_profile(c, &s->profile, lib->importance, 1);
            if (st != WF_OK) {
                wf_errorf(err, errlen, "profile '%s' does not fit this model", s->profile.name);
                goto done;
            }
            int n;
            size_t len = 0;
            uint64_t t0 = wf_clock_now_ns();
            st = wf_kv_codec_encode(c, kv, blocks, n_blocks, n_tokens, frame, cap, &len, err, errlen);
            uint64_t t1 = wf_clock_now_ns();
            if (st == WF_OK)
                st = wf_kv_codec_decode(c, frame, len, &out, table, out.n_blocks, &n, err, errlen);
            if (st != WF_OK) goto done;
            uint64_t t2 = wf_clock_now_ns();
            double e = (double)in / (double)(t1 > t0 ? t1 - t0 : 1);
            double d = (double)in / (double)(t2 > t1 ? t2 - t1 : 1);
            s->cr = (double)in / (double)len;
            if (e > s->enc_gbps) s->enc_gbps = e;
            if (d > s->dec_gbps) s->dec_gbps = d;
        }
    }
    st = WF_OK;
done:
    free(table);
    free(frame);
    wf_kv_store_free(&out);
    wf_kv_codec_free(c);
    return st;
}
