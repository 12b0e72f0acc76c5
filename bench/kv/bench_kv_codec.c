/* weft-bench-kvcodec: how fast the KV codec runs and how much it saves, on real KV.
 *
 *     weft-bench-kvcodec [-m MODEL.gguf] [-p PROFILES.json] [-n TOKENS] [--threads N]
 *                        [--codec-threads N]
 *
 * Prefills TOKENS tokens of text with the engine (default 512, the default model), then per
 * profile (the library file, default deploy/kv-profiles.json) and per SIMD level this CPU
 * runs, encodes and decodes that KV repeatedly and reports GB/s of F16 KV in (encode) and out
 * (decode), the compression ratio, and B* = (1 - 1/CR)·S. Peers in the same run: memcpy of the
 * same bytes, and zstd level 1 alone on the F16 KV (the lossless baseline). Single-threaded:
 * the codec runs on the transfer path of one worker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "engine/cpu/threadpool.h"
#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "kv/codec.h"
#include "kv/kv_controller.h"
#include "proto/base/clock.h"

static const char k_text[] =
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
    "combined movable metal type with an oil-based ink and a wooden press. Within fifty years, "
    "presses were operating in more than two hundred cities across Europe, and millions of books "
    "had been printed. The spread of printing changed how knowledge travelled: scholars could "
    "compare identical copies of a text, errors could be corrected in later editions, and ideas "
    "moved faster than ever before. Religious reformers used pamphlets to reach ordinary people, "
    "scientists shared their observations in journals, and governments issued printed laws. "
    "Newspapers appeared in the seventeenth century, first as weekly sheets of foreign news and "
    "later as daily papers with advertisements, letters and reports from parliament. By the "
    "nineteenth century steam-powered presses could print thousands of sheets an hour, paper "
    "made from wood pulp had become cheap, and literacy rates rose across the industrial world. "
    "Libraries opened to the public, publishers issued inexpensive novels in monthly parts, and "
    "a reading public emerged that included factory workers as well as merchants and clergy. "
    "In the twentieth century offset lithography, phototypesetting and finally desktop "
    "publishing transformed the industry again, while radio, television and the internet "
    "competed for the attention that print had once held alone. def parse(line):\n    fields = "
    "line.strip().split(',')\n    return {name: value for name, value in zip(HEADER, fields)}\n"
    "Question: what is the capital of Australia? Answer: Canberra, which was chosen as a "
    "compromise between Sydney and Melbourne and was purpose-built as the seat of government.";

/* The codec's fork-join hook over the engine's pool. */
static void pool_run(void *pool, void (*fn)(void *ctx, int ith, int nth), void *ctx) {
    wf_threadpool_run(pool, fn, ctx);
}

static double gbps(size_t bytes, uint64_t ns) { return (double)bytes / (double)ns; }

/* Runs fn until at least 300 ms have passed; returns ns per call. */
#define TIME_LOOP(ns_out, body)                                                   \
    do {                                                                          \
        uint64_t _t0 = wf_clock_now_ns(), _n = 0;                                 \
        do {                                                                      \
            body;                                                                 \
            _n++;                                                                 \
        } while (wf_clock_now_ns() - _t0 < 300000000ull);                         \
        ns_out = (wf_clock_now_ns() - _t0) / _n;                                  \
    } while (0)

int main(int argc, char **argv) {
    const char *model = "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    const char *lib_path = WEFT_BENCH_SOURCE_DIR "/deploy/kv-profiles.json";
    int n_tokens = 512, threads = 0, n_par_threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) model = argv[i + 1];
        else if (!strcmp(argv[i], "-p")) lib_path = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) n_tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--codec-threads")) n_par_threads = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: weft-bench-kvcodec [-m MODEL] [-p PROFILES.json] [-n TOKENS] "
                            "[--threads N] [--codec-threads N]\n");
            return 2;
        }
    }
    char err[512];
    wf_kv_profile_lib lib;
    if (wf_kv_profile_lib_load(lib_path, &lib, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-bench-kvcodec: %s\n", err);
        return 1;
    }
    wf_engine_options o;
    wf_engine_options_init(&o);
    o.model_path = model;
    o.n_threads = threads;
    wf_engine *e;
    if (wf_engine_open(&o, &e, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-bench-kvcodec: %s\n", err);
        return 1;
    }
    /* Enough text for n_tokens: repeat it. */
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(n_tokens + 1024));
    int have = 0;
    while (have < n_tokens) {
        int n = 0;
        wf_tokenizer_encode(wf_engine_tokenizer(e), k_text, strlen(k_text), have == 0, false,
                            tokens + have, 1024, &n);
        have += n;
    }
    wf_kv_geometry g = wf_engine_kv_geometry(e, 16);
    int n_blocks = (n_tokens + 15) / 16;
    wf_kv_store kv, out;
    wf_kv_store_init(&kv, &g, wf_kv_geometry_block_bytes(&g) * (size_t)n_blocks);
    wf_kv_store_init(&out, &g, wf_kv_geometry_block_bytes(&g) * (size_t)n_blocks);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++) table[i] = i;
    for (int pos = 0; pos < n_tokens; pos += 256) {
        int n = n_tokens - pos < 256 ? n_tokens - pos : 256;
        wf_task t = {.kind = WF_TASK_PREFILL, .llm.tokens = tokens + pos, .llm.n_tokens = n, .llm.pos = pos,
                     .llm.kv.block_table = table, .llm.kv.n_blocks = n_blocks};
        float *logits = malloc(sizeof(float) * (size_t)wf_engine_info(e)->n_vocab);
        if (wf_engine_forward_logits(e, &kv, &t, 1, logits) != WF_OK) return 1;
        free(logits);
    }
    size_t in_bytes = (size_t)n_tokens * (size_t)g.n_layers * 2u * kv.row_elems * 2u;
    printf("model %s: %d layers x %d KV heads x %d, %d tokens, %.2f MiB of F16 KV\n",
           wf_engine_info(e)->name, g.n_layers, g.n_kv_heads, g.head_dim, n_tokens,
           (double)in_bytes / (1 << 20));

    /* Peers: memcpy and zstd -1 over the same bytes (gathered contiguous first). */
    unsigned char *flat = malloc(in_bytes), *flat2 = malloc(in_bytes);
    size_t zcap = ZSTD_compressBound(in_bytes), zlen = 0;
    unsigned char *z = malloc(zcap);
    size_t half = in_bytes / 2;
    memcpy(flat, kv.k, half);
    memcpy(flat + half, kv.v, half);
    uint64_t ns;
    TIME_LOOP(ns, memcpy(flat2, flat, in_bytes));
    double memcpy_gbps = gbps(in_bytes, ns);
    ZSTD_CCtx *zc = ZSTD_createCCtx();
    ZSTD_DCtx *zd = ZSTD_createDCtx();
    TIME_LOOP(ns, zlen = ZSTD_compressCCtx(zc, z, zcap, flat, in_bytes, 1));
    double zenc = gbps(in_bytes, ns);
    TIME_LOOP(ns, ZSTD_decompressDCtx(zd, flat2, in_bytes, z, zlen));
    double zdec = gbps(in_bytes, ns);
    printf("peers: memcpy %.2f GB/s; zstd -1 on F16 KV: CR %.3f, encode %.3f GB/s, decode %.3f "
           "GB/s\n\n", memcpy_gbps, (double)in_bytes / (double)zlen, zenc, zdec);

    printf("| profile | ISA | CR | encode GB/s | decode GB/s | S GB/s | B* Gbps | encode / zstd-1 "
           "|\n|---|---|---|---|---|---|---|---|\n");
    const char *isas[] = {"scalar", "avx2", "avx512"};
    wf_kv_profile_stats *best = calloc((size_t)lib.n, sizeof *best); /* best ISA's numbers */
    size_t cap = 0;
    unsigned char *frame = NULL;
    for (int p = 0; p < lib.n; p++)
        for (int ii = 0; ii < 3; ii++) {
            setenv("WEFT_CPU_ISA", isas[ii], 1);
            if (strcmp(wf_kv_codec_isa(), isas[ii]) != 0) continue; /* not on this CPU */
            wf_kv_codec *c;
            if (wf_kv_codec_new(&g, n_tokens, &c) != WF_OK) return 1;
            if (!frame) {
                cap = wf_kv_codec_max_frame_bytes(c, n_tokens);
                frame = malloc(cap);
            }
            wf_kv_codec_set_profile(c, &lib.items[p].profile, lib.importance, 7);
            size_t len = 0;
            int n;
            wf_status st = WF_OK;
            TIME_LOOP(ns, st |= wf_kv_codec_encode(c, &kv, table, n_blocks, n_tokens, frame, cap,
                                                   &len, err, sizeof err));
            uint64_t dns;
            TIME_LOOP(dns, st |= wf_kv_codec_decode(c, frame, len, &out, table, n_blocks, &n, err,
                                                    sizeof err));
            if (st != WF_OK) {
                fprintf(stderr, "weft-bench-kvcodec: %s\n", err);
                return 1;
            }
            wf_kv_profile_stats s = lib.items[p];
            s.cr = (double)in_bytes / (double)len;
            s.enc_gbps = gbps(in_bytes, ns);
            s.dec_gbps = gbps(in_bytes, dns);
            printf("| %s | %s | %.2f | %.3f | %.3f | %.3f | %.1f | %.2fx |\n", s.profile.name,
                   isas[ii], s.cr, s.enc_gbps, s.dec_gbps, wf_kv_profile_speed_gbps(&s),
                   wf_kv_profile_b_star_gbps(&s), s.enc_gbps / zenc);
            fflush(stdout);
            best[p] = s; /* levels run in increasing order: the last one is the best */
            wf_kv_codec_free(c);
        }
    unsetenv("WEFT_CPU_ISA");
    /* Layer-parallel coding through the engine's thread pool (what a worker would pass). */
    int n_par = n_par_threads > 0 ? n_par_threads : 2;
    wf_threadpool *tp = wf_threadpool_new(n_par);
    printf("\n| profile | threads | encode GB/s | decode GB/s | vs 1 thread (encode, decode) |\n"
           "|---|---|---|---|---|\n");
    for (int p = 0; tp && p < lib.n; p++) {
        double e1 = 0, d1 = 0;
        for (int nt = 1; nt <= n_par; nt += n_par - 1) {
            wf_kv_codec *c;
            if (wf_kv_codec_new(&g, n_tokens, &c) != WF_OK) return 1;
            if (nt > 1 && wf_kv_codec_set_parallel(c, pool_run, tp, nt) != WF_OK) return 1;
            wf_kv_codec_set_profile(c, &lib.items[p].profile, lib.importance, 7);
            size_t len = 0;
            int n;
            uint64_t dns;
            TIME_LOOP(ns, wf_kv_codec_encode(c, &kv, table, n_blocks, n_tokens, frame, cap, &len,
                                             NULL, 0));
            TIME_LOOP(dns, wf_kv_codec_decode(c, frame, len, &out, table, n_blocks, &n, NULL, 0));
            double eg = gbps(in_bytes, ns), dg = gbps(in_bytes, dns);
            if (nt == 1) {
                e1 = eg;
                d1 = dg;
            }
            printf("| %s | %d | %.3f | %.3f | %.2fx, %.2fx |\n", lib.items[p].profile.name, nt,
                   eg, dg, eg / e1, dg / d1);
            fflush(stdout);
            wf_kv_codec_free(c);
            if (n_par == 1) break;
        }
    }
    wf_threadpool_free(tp);
    double budgets[] = {0.9, 0.95};
    double links[] = {1, 5, 10, 25, 100};
    printf("\n| kv_accuracy | link Gbps | controller's choice | predicted ms | raw ms | speedup |\n"
           "|---|---|---|---|---|---|\n");
    for (int bi = 0; bi < 2; bi++)
        for (int li = 0; li < 5; li++) {
            wf_kv_controller_options co;
            wf_kv_controller_options_init(&co);
            co.init_bandwidth_gbps = links[li];
            wf_kv_controller *ctl;
            if (wf_kv_controller_new(&co, best, lib.n, &ctl) != WF_OK) return 1;
            wf_kv_transfer_req req = {.bytes = in_bytes, .accuracy = budgets[bi]};
            wf_kv_decision d;
            wf_kv_controller_decide(ctl, &req, 0, &d);
            printf("| %.2f | %g | %s (%s) | %.2f | %.2f | %.2fx |\n", budgets[bi], links[li],
                   d.profile < 0 ? "raw" : best[d.profile].profile.name,
                   wf_kv_reason_name(d.reason), d.predicted_ms, d.raw_ms,
                   d.raw_ms / d.predicted_ms);
            wf_kv_controller_free(ctl);
        }
    free(best);
    free(frame);
    ZSTD_freeCCtx(zc);
    ZSTD_freeDCtx(zd);
    free(z);
    free(flat);
    free(flat2);
    free(table);
    free(tokens);
    wf_kv_store_free(&kv);
    wf_kv_store_free(&out);
    wf_engine_free(e);
    wf_kv_profile_lib_free(&lib);
    return 0;
}
