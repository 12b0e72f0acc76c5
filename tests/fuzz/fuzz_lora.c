/* libFuzzer target for the LoRA adapter loaders (engine/lora.h) on a tiny backbone. The loader
 * reads files (a GGUF adapter, or a PEFT folder: adapter_config.json + adapter_model.safetensors),
 * so each input is written to a scratch folder first. Input layout:
 *     byte 0: bit 0 = format (0 GGUF, 1 PEFT), bit 1 = backbone (0 tiny llama, 1 tiny qwen2),
 *             bit 2 = PEFT by its .safetensors file (1) or by its folder (0)
 *     GGUF: the rest is the adapter file
 *     PEFT: bytes 1-2 = length L of adapter_config.json (little endian, clamped to what is
 *           left), then L bytes of it, then the adapter_model.safetensors bytes
 * A load either succeeds with every pair readable (A: rank x n_in, B: n_out x rank of the
 * backbone's weight; ASan catches a short buffer) or fails with a message and no adapter.
 * Seeds: scripts/make_lora_corpus.py.
 * weft-fuzz: covers=engine/lora.c,engine/gguf.c */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/lora.h"
#include "engine/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink;
static char g_dir[64];
static wf_model *g_models[2];

static void cleanup(void) {
    const char *names[] = {"a.gguf", "p/adapter_config.json", "p/adapter_model.safetensors"};
    char path[128];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/p", g_dir);
    rmdir(path);
    rmdir(g_dir);
    for (int i = 0; i < 2; i++) wf_model_free(g_models[i]);
}

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_fuzz_lora_XXXXXX");
    if (!mkdtemp(g_dir)) abort();
    char path[128];
    snprintf(path, sizeof path, "%s/p", g_dir);
    if (mkdir(path, 0700) != 0) abort();
    const char *files[] = {WEFT_SOURCE_DIR "/tests/engine/data/tiny/llama-q8_0.gguf",
                           WEFT_SOURCE_DIR "/tests/engine/data/tiny/qwen2-q8_0.gguf"};
    for (int i = 0; i < 2; i++) {
        char err[256];
        if (wf_model_load(files[i], &g_models[i], err, sizeof err) != WF_OK) {
            fprintf(stderr, "fuzz_lora: %s\n", err);
            abort();
        }
    }
    atexit(cleanup);
}

static void write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n)) abort();
    fclose(f);
}

static const wf_weight *weight_of(const wf_model *m, int layer, int t) {
    const wf_layer_weights *L = &m->layers[layer];
    const wf_weight *w[WF_LORA_N_TARGETS] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate,
                                             &L->w_up, &L->w_down};
    return w[t];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    if (size < 1) return 0;
    uint8_t flags = data[0];
    const wf_model *m = g_models[(flags >> 1) & 1];
    data++, size--;
    char path[160];
    if (!(flags & 1)) {
        snprintf(path, sizeof path, "%s/a.gguf", g_dir);
        write_file(path, data, size);
    } else {
        size_t lc = size >= 2 ? (size_t)data[0] | (size_t)data[1] << 8 : 0;
        size_t skip = size >= 2 ? 2 : size;
        data += skip, size -= skip;
        if (lc > size) lc = size;
        snprintf(path, sizeof path, "%s/p/adapter_config.json", g_dir);
        write_file(path, data, lc);
        snprintf(path, sizeof path, "%s/p/adapter_model.safetensors", g_dir);
        write_file(path, data + lc, size - lc);
        if (!(flags & 4)) snprintf(path, sizeof path, "%s/p", g_dir);
    }
    wf_lora *l = NULL;
    char err[256] = "";
    if (wf_lora_load(m, path, &l, err, sizeof err) != WF_OK) {
        if (l || !err[0]) abort(); /* a failure leaves no adapter and says why */
        return 0;
    }
    int n = 0;
    for (int layer = 0; layer < m->hp.n_layer; layer++)
        for (int t = 0; t < WF_LORA_N_TARGETS; t++) {
            const wf_lora_mat *mt = wf_lora_mat_get(l, layer, (wf_lora_target)t);
            if (!mt) continue;
            const wf_weight *w = weight_of(m, layer, t);
            if (mt->rank < 1 || mt->rank > WF_LORA_MAX_RANK || mt->rank > l->max_rank) abort();
            size_t na = (size_t)mt->rank * (size_t)w->ne0, nb = (size_t)mt->rank * (size_t)w->ne1;
            /* A and B hold their file's element type: touch their first and last bytes */
            size_t ea = mt->a_type == WF_GGML_TYPE_F32 ? 4 : 2, eb = mt->b_type == WF_GGML_TYPE_F32 ? 4 : 2;
            const unsigned char *a = mt->a, *b = mt->b;
            sink += a[0] + a[na * ea - 1] + b[0] + b[nb * eb - 1];
            sink += wf_lora_scale(l, mt, 1.0f);
            n++;
        }
    if (n != l->n_mats || n == 0) abort();
    wf_lora_free(l);
    return 0;
}
