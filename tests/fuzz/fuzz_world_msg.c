/* libFuzzer target for the world's bootstrap and membership messages (engine/world/world_wire.c):
 * arbitrary bytes as they would arrive from a joiner or the coordinator. Checks: no crash or
 * out-of-bounds read; a decoded message re-encodes to as many bytes as it came from.
 * weft-fuzz: covers=engine/world/world_wire.c */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/world/world_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    wf__world_msg m;
    if (wf__world_msg_decode(data, size, &m) != WF_OK) return 0;
    wf__wbuf b = {0};
    wf__wbuf_u32(&b, m.type);
    wf__wbuf_u32(&b, (uint32_t)m.rank);
    wf__wbuf_u32(&b, (uint32_t)m.n_ranks);
    wf__wbuf_u32(&b, (uint32_t)m.status);
    wf__wbuf_u32(&b, m.epoch);
    for (int i = 0; i < m.n_entries; i++) wf__wbuf_entry(&b, &m.entries[i]);
    /* Same length (strings are re-terminated, so bytes after a NUL may differ). */
    if (!b.oom && b.len != size) abort();
    free(b.p);
    wf__world_msg_free(&m);
    return 0;
}
