/* Internal: the DiT model struct shared by dit_load.c (weights, buffers) and dit.c (forward). */
#ifndef WF_ENGINE_DIT_IMPL_H
#define WF_ENGINE_DIT_IMPL_H

#include "engine/dit/dit.h"
#include "engine/dit/dit_kernels.h"

#define WF__DIT_TFREQ 256 /* timestep frequency features */

typedef struct wf__dit_block {
    wf__dit_linear ada, qkv, proj, fc1, fc2;
    float *norm2_w, *norm2_b; /* NULL unless norm_affine */
    /* this block's own timestep MLP and label table (diffusers keeps one per block; loaded only
     * when they differ from block 0's, e.g. a model trained in diffusers); NULL: the shared one */
    wf__dit_linear t1, t2;
    float *label_table;
} wf__dit_block;

struct wf_dit {
    wf_dit_config cfg;
    wf_dit_paths paths;
    char *path_buf[6];

    wf__dit_linear x_embed, t1, t2, final_ada, final_lin;
    float *label_table; /* (num_classes + 1) x hidden */
    wf__dit_block *blocks;

    /* reserved at load for max_batch x max_tokens */
    int max_batch, max_tokens, max_h, max_w, max_threads;
    float *patches, *h, *xn, *qkv, *att, *tmp, *ff, *tok_out;
    uint16_t *xb;
    float *tfreq, *temb, *cond, *silu_c, *mod, *fmod;
    float *silu_blk; /* silu(c) of a block with its own conditioning */
    float *attn_scratch;
    float *pos;       /* positions for (pos_hp, pos_wp) */
    int pos_hp, pos_wp;
};

/* Frees everything the model owns (also a partly loaded one). */
void wf__dit_destroy(wf_dit *m);

#endif
