/* weft-bench-lora: what a virtual model's adapters add to a forward step. B sequences decode
 * one token each per step, all on the bare backbone or all on virtual models (each sequence
 * its own, alternating two bindings of the adapter as latency.sh's tasks do), the two kinds of
 * step interleaved in rounds so that a loaded host slows both alike; prints the mean step time
 * of each and their ratio, then the same for a 64-token prompt chunk per sequence.
 *   weft-bench-lora MODEL THREADS ADAPTER [B=2] [ROUNDS=40] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/engine.h"
#include "kv/kv_store.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL THREADS ADAPTER [B=2] [ROUNDS=40]\n", argv[0]);
        return 2;
    }
    int B = argc > 4 ? atoi(argv[4]) : 2, rounds = argc > 5 ? atoi(argv[5]) : 40;
    if (B < 1 || B > 64 || rounds < 1) return 2;
    wf_engine_options o;
    wf_engine_options_init(&o);
    o.model_path = argv[1];
    o.n_threads = atoi(argv[2]);
    o.max_batch_tokens = 64 * B;
    o.max_seqs = B;
    wf_engine *e;
    wf_lora *ad;
    char err[256];
    if (wf_engine_open(&o, &e, err, sizeof err) != WF_OK ||
        wf_engine_lora_load(e, argv[3], &ad, err, sizeof err) != WF_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    wf_lora_use u = {ad, 1.0f};
    if (wf_engine_vmodel_bind(e, 1, &u, 1, err, sizeof err) != WF_OK ||
        wf_engine_vmodel_bind(e, 2, &u, 1, err, sizeof err) != WF_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const int bs = 16, per_seq = 1024 / bs;
    wf_kv_geometry g = wf_engine_kv_geometry(e, bs);
    wf_kv_store kv;
    if (wf_kv_store_init(&kv, &g, wf_kv_geometry_block_bytes(&g) * (size_t)(per_seq * 2 * B)) != WF_OK)
        return 1;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)(per_seq * 2 * B));
    for (int i = 0; i < per_seq * 2 * B; i++) bt[i] = i;
    float *logits = malloc(sizeof(float) * (size_t)wf_engine_info(e)->n_vocab * (size_t)B);
    int32_t prompt[64], tok = 1000;
    for (int i = 0; i < 64; i++) prompt[i] = 100 + i * 37;
    wf_task t[64];
    /* kind 0: bare, 1: virtual models; each kind its own sequences (KV blocks) */
    for (int kind = 0; kind < 2; kind++)
        for (int s = 0; s < B; s++) {
            int32_t *tb = bt + (kind * B + s) * per_seq;
            t[0] = (wf_task){.kind = WF_TASK_PREFILL, .vmodel = kind ? 1u + (uint32_t)(s % 2) : 0,
                             .llm.tokens = prompt, .llm.n_tokens = 64, .llm.kv.block_table = tb,
                             .llm.kv.n_blocks = per_seq};
            if (wf_engine_forward_logits(e, &kv, t, 1, logits) != WF_OK) return 1;
        }
    double dec[2] = {0, 0}, pre[2] = {0, 0};
    int pos = 64, steps = 0;
    for (int r = 0; r < rounds && pos + 16 < 1024 - 64; r++) {
        for (int kind = 0; kind < 2; kind++) {
            for (int k = 0; k < 8; k++) {
                for (int s = 0; s < B; s++)
                    t[s] = (wf_task){.kind = WF_TASK_DECODE,
                                     .vmodel = kind ? 1u + (uint32_t)(s % 2) : 0,
                                     .llm.tokens = &tok, .llm.n_tokens = 1, .llm.pos = pos + k,
                                     .llm.kv.block_table = bt + (kind * B + s) * per_seq,
                                     .llm.kv.n_blocks = per_seq};
                double t0 = now_s();
                if (wf_engine_forward_logits(e, &kv, t, B, logits) != WF_OK) return 1;
                dec[kind] += now_s() - t0;
            }
        }
        pos += 8;
        steps += 8;
    }
    /* prompt chunks: 64 tokens per sequence at the end of what was decoded (rewritten each
     * round: the cost, not the text, is measured) */
    for (int r = 0; r < rounds / 4 + 1; r++)
        for (int kind = 0; kind < 2; kind++) {
            for (int s = 0; s < B; s++)
                t[s] = (wf_task){.kind = WF_TASK_PREFILL, .vmodel = kind ? 1u + (uint32_t)(s % 2) : 0,
                                 .llm.tokens = prompt, .llm.n_tokens = 64, .llm.pos = pos,
                                 .llm.kv.block_table = bt + (kind * B + s) * per_seq,
                                 .llm.kv.n_blocks = per_seq};
            double t0 = now_s();
            if (wf_engine_forward_logits(e, &kv, t, B, logits) != WF_OK) return 1;
            pre[kind] += now_s() - t0;
        }
    int pr = rounds / 4 + 1;
    printf("decode B=%d: bare %.3f ms/step, virtual models %.3f ms/step, ratio %.3f (%d steps each)\n",
           B, 1e3 * dec[0] / steps, 1e3 * dec[1] / steps, dec[1] / dec[0], steps);
    printf("prefill %dx64: bare %.3f ms, virtual models %.3f ms, ratio %.3f (%d each)\n", B,
           1e3 * pre[0] / pr, 1e3 * pre[1] / pr, pre[1] / pre[0], pr);
    wf_engine_vmodel_unbind(e, 1);
    wf_engine_vmodel_unbind(e, 2);
    wf_engine_free(e);
    wf_lora_free(ad);
    wf_kv_store_free(&kv);
    free(bt);
    free(logits);
    return 0;
}
