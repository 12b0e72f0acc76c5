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
    uint16_t *xb;  /* bf16 rows of a GEMM input, xb_stride (>= any kp) apart */
    int xb_stride;
    float *tfreq, *temb, *cond, *silu_c, *mod, *fmod;
    float *silu_blk; /* silu(c) of a block with its own conditioning */
    float *attn_scratch;
    float *pos;       /* positions for (pos_hp, pos_wp) */
    int pos_hp, pos_wp;
};

/* The forward pass in pieces, so that engine/elastic can run it on a slice of the sequence:
 * patchify tokens [tok0, tok0 + ntok) of full-size images x (batch x C x height x width) into
 * m->patches; run the network on those tokens (m->patches -> m->tok_out, batch x ntok x
 * p*p*out_C), with attention supplied by `attn` (qkv: batch x ntok x 3D of the local tokens,
 * att: batch x ntok x D out); unpatchify m->tok_out into the tokens' pixels of out. Every step
 * but attention is token-wise, so a slice gives the same rows as the whole. */
typedef wf_status (*wf__dit_attn_fn)(void *user, wf_threadpool *pool, float *qkv, float *att, int batch,
                                     int ntok, char *err, size_t errlen);
wf_status wf__dit_check_forward(const wf_dit *m, const wf_threadpool *pool, int batch, int height, int width,
                                const int32_t *labels, char *err, size_t errlen);
void wf__dit_patchify(wf_dit *m, int batch, int height, int width, int tok0, int ntok, const float *x);
void wf__dit_unpatchify(const wf_dit *m, int batch, int height, int width, int tok0, int ntok, float *out);
wf_status wf__dit_forward_tokens(wf_dit *m, wf_threadpool *pool, int batch, int hp, int wp, int tok0, int ntok,
                                 const float *t, const int32_t *labels, wf__dit_attn_fn attn, void *attn_user,
                                 const wf_dit_dump *dmp, char *err, size_t errlen);

/* Frees everything the model owns (also a partly loaded one). */
void wf__dit_destroy(wf_dit *m);

#endif
