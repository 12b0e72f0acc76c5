/* libFuzzer target: diffusers scheduler_config.json and vae/config.json parsers on arbitrary
 * bytes. A parsed scheduler config must build a schedule whose steps give finite results; every
 * failure must carry a message. Never a crash or a leak.
 * weft-fuzz: covers=engine/dit/sampler.c,engine/dit/vae.c */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dit/sampler.h"
#include "engine/dit/vae.h"

static void try_schedule(const wf_dit_sampler_config *cfg, int steps) {
    wf_dit_schedule *s = NULL;
    char err[256] = "";
    if (wf_dit_schedule_new(cfg, steps, &s, err, sizeof err) != WF_OK) {
        if (!err[0] || s) abort();
        return;
    }
    float x[8], out[16];
    for (int j = 0; j < 16; j++) out[j] = (float)(j % 5) * 0.25f - 0.5f;
    for (int j = 0; j < 8; j++) x[j] = (float)j * 0.1f;
    for (int i = 0; i < wf_dit_schedule_n_steps(s); i++) {
        if (!isfinite(wf_dit_schedule_timestep(s, i))) abort();
        wf_dit_step_io io = {.model_out = out, .model_channels = 4, .x = x, .x_prev = x,
                             .channels = 2, .plane = 4, .key = {1, 0}};
        if (wf_dit_schedule_step(s, i, &io) != WF_OK) abort();
    }
    wf_dit_schedule_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    wf_dit_sampler_config cfg;
    char err[256] = "";
    if (wf_dit_sampler_config_parse((const char *)data, size, &cfg, err, sizeof err) == WF_OK) {
        if (cfg.num_train_timesteps <= 20000) {
            try_schedule(&cfg, 1);
            try_schedule(&cfg, 7);
            try_schedule(&cfg, cfg.num_train_timesteps < 50 ? cfg.num_train_timesteps : 50);
        }
    } else if (!err[0]) {
        abort();
    }
    wf_dit_vae_config vcfg;
    err[0] = 0;
    if (wf_dit_vae_config_parse((const char *)data, size, &vcfg, err, sizeof err) == WF_OK) {
        if (vcfg.n_blocks < 1 || vcfg.n_blocks > WF_DIT_VAE_MAX_BLOCKS) abort();
    } else if (!err[0]) {
        abort();
    }
    return 0;
}
