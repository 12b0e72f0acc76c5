/* libFuzzer target for the safetensors reader: open any bytes with wf_safetensors_open_memory
 * and, when that succeeds, check every tensor is found by name and read its first and last data
 * bytes and convert its first elements (ASan catches anything outside the input).
 * weft-fuzz: covers=engine/dit/safetensors.c */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dit/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1); /* exact size: a read past the end is an error */
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    wf_safetensors *st = NULL;
    char err[256] = "";
    if (wf_safetensors_open_memory(copy, size, &st, err, sizeof err) == WF_OK) {
        for (int64_t i = 0; i < wf_safetensors_n_tensors(st); i++) {
            const wf_safetensors_tensor *t = wf_safetensors_tensor_at(st, i);
            if (wf_safetensors_find(st, t->name) != t) abort();
            const uint8_t *p = t->data;
            if (t->size) sink += p[0] + p[t->size - 1];
            float f[4];
            wf_safetensors_to_f32(t, f, t->n_elements < 4 ? t->n_elements : 4);
            sink += (uint64_t)t->n_elements + (uint64_t)t->n_dims;
        }
        sink += (uint64_t)(wf_safetensors_metadata(st, "format") != NULL);
        wf_safetensors_close(st);
    } else if (st != NULL || err[0] == '\0') {
        abort(); /* a failure must leave *out NULL and say why */
    }
    free(copy);
    return 0;
}
