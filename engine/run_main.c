/* weft-run: generate text from a GGUF model on the command line, through the same engine and
 * executor the server uses (one sequence, contiguous KV).
 *
 *     weft-run -m model.gguf -p "Once upon a time" -n 64 [--temp 0.8 --top-k 40 --top-p 0.95
 *              --seed 1 --threads 2 --chat] [--ids]
 *
 * Streams text to stdout; prompt and decode speed go to stderr. --ids prints token ids
 * instead of text (used by tests). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/base/clock.h"
#include "engine/chat.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "kv/kv_store.h"
#include "proto/base/log.h"

static void usage(FILE *f) {
    fprintf(f, "usage: weft-run -m MODEL.gguf -p PROMPT [-n N] [--temp T] [--top-k K] "
               "[--top-p P] [--min-p P] [--seed S] [--threads N] [--chat] [--ids] "
               "[--batch-tokens N]\n");
}

static double now_s(void) { return (double)wf_clock_now_ns() * 1e-9; }

static int parse_int(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < -2147483647L || v > 2147483647L) return -1;
    *out = (int)v;
    return 0;
}

static int parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL;
    int n_gen = 64, threads = 0, batch_tokens = 512, top_k = 0;
    float temp = 0.0f, top_p = 1.0f, min_p = 0.0f;
    unsigned long long seed = 0;
    int chat = 0, ids = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--chat")) {
            chat = 1;
        } else if (!strcmp(a, "--ids")) {
            ids = 1;
        } else if (!v) {
            bad = 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            model = v, i++;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            prompt = v, i++;
        } else if (!strcmp(a, "-n")) {
            bad = parse_int(v, &n_gen) || n_gen < 0, i++;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            bad = parse_int(v, &threads) || threads < 0, i++;
        } else if (!strcmp(a, "--batch-tokens")) {
            bad = parse_int(v, &batch_tokens) || batch_tokens < 1, i++;
        } else if (!strcmp(a, "--temp")) {
            bad = parse_float(v, &temp) || temp < 0, i++;
        } else if (!strcmp(a, "--top-k")) {
            bad = parse_int(v, &top_k) || top_k < 0, i++;
        } else if (!strcmp(a, "--top-p")) {
            bad = parse_float(v, &top_p) || !(top_p > 0 && top_p <= 1), i++;
        } else if (!strcmp(a, "--min-p")) {
            bad = parse_float(v, &min_p) || !(min_p >= 0 && min_p <= 1), i++;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            seed = strtoull(v, &end, 10);
            bad = *end != 0, i++;
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "weft-run: bad or missing value for %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || !prompt) {
        usage(stderr);
        return 2;
    }
    wf_log_set_level(WF_LOG_LEVEL_WARN);
    int rc = 1;
    char err[512];
    wf_engine *e = NULL;
    wf_kv_store kv = {0};
    int32_t *toks = NULL;
    int32_t *blocks = NULL;
    char *text = NULL;
    wf_engine_options o;
    wf_engine_options_init(&o);
    o.model_path = model;
    o.n_threads = threads;
    o.max_batch_tokens = batch_tokens;
    o.max_seqs = 1;
    if (wf_engine_open(&o, &e, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-run: %s\n", err);
        goto out;
    }
    const wf_tokenizer *tok = wf_engine_tokenizer(e);
    const char *src = prompt;
    if (chat) {
        wf_chat_message msg = {"user", prompt};
        if (wf_chat_apply(wf_engine_chat_format(e), wf_engine_chat_template(e), &msg, 1, true,
                          &text, err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-run: chat template: %s\n", err);
            goto out;
        }
        src = text;
    }
    int n_prompt = 0;
    size_t len = strlen(src);
    wf_tokenizer_encode(tok, src, len, true, true, NULL, 0, &n_prompt);
    int cap = n_prompt + n_gen + 1;
    toks = malloc((size_t)cap * sizeof *toks);
    if (!toks) goto out;
    if (wf_tokenizer_encode(tok, src, len, true, true, toks, cap, &n_prompt) != WF_OK ||
        n_prompt < 1) {
        fprintf(stderr, "weft-run: cannot tokenize the prompt (or it is empty)\n");
        goto out;
    }
    const wf_model_info *info = wf_engine_info(e);
    if (n_prompt + n_gen > info->n_ctx_train) n_gen = info->n_ctx_train - n_prompt;
    if (n_gen < 0) n_gen = 0;
    const int bs = 16;
    int n_blocks = (n_prompt + n_gen + bs) / bs;
    wf_kv_geometry g = wf_engine_kv_geometry(e, bs);
    if (wf_kv_store_init(&kv, &g, wf_kv_geometry_block_bytes(&g) * (size_t)n_blocks) != WF_OK) {
        fprintf(stderr, "weft-run: cannot allocate the KV cache\n");
        goto out;
    }
    blocks = malloc((size_t)n_blocks * sizeof *blocks);
    if (!blocks) goto out;
    for (int i = 0; i < n_blocks; i++) blocks[i] = i;
    wf_executor ex = wf_engine_executor(e, &kv);
    wf_sampling_params sp = {.temperature = temp, .top_k = top_k, .top_p = top_p,
                             .min_p = min_p, .repetition_penalty = 1.0f,
                             .has_seed = true, .seed = seed};
    wf_task_sample sample = {.params = &sp, .rng_state = wf_sampler_seed_state(seed, 0),
                             .history = toks, .n_prompt = n_prompt};
    wf_detokenizer dt;
    wf_detokenizer_init(&dt, tok);
    char buf[512];
    double t_start = now_s(), t_first = 0;
    int pos = 0, n_done = 0;
    while (n_done < n_gen) {
        int first = pos == 0;
        int n_new = first ? (n_prompt - pos < batch_tokens ? n_prompt - pos : batch_tokens) : 1;
        const int32_t *in = first ? toks + pos : toks + n_prompt + n_done - 1;
        bool last_chunk = !first || pos + n_new == n_prompt;
        wf_task task = {.id = 1, .kind = first ? WF_TASK_PREFILL : WF_TASK_DECODE,
                        .llm.tokens = in, .llm.n_tokens = n_new, .llm.pos = first ? pos : n_prompt + n_done - 1,
                        .llm.kv.block_table = blocks, .llm.kv.n_blocks = n_blocks,
                        .llm.samples = last_chunk ? &sample : NULL, .llm.n_samples = last_chunk ? 1 : 0};
        sample.n_history = n_prompt + n_done;
        wf_task_batch batch = {.tasks = &task, .n_tasks = 1, .group = {.n_ranks = 1}};
        wf_status st = wf_executor_run(ex, &batch, NULL, 0);
        if (st == WF_OK) st = task.status;
        if (st != WF_OK) {
            fprintf(stderr, "weft-run: forward failed: %s\n", wf_status_str(st));
            goto out;
        }
        if (first) {
            pos += n_new;
            if (pos < n_prompt) continue;
            t_first = now_s();
        }
        int32_t id = sample.out.token;
        toks[n_prompt + n_done++] = id;
        if (ids) {
            printf("%s%d", n_done > 1 ? " " : "", id);
        } else {
            int nb = wf_detokenizer_push(&dt, id, buf, sizeof buf);
            fwrite(buf, 1, (size_t)nb, stdout);
        }
        fflush(stdout);
        if (sample.out_is_eog) break;
        pos = 1; /* not first any more */
    }
    if (!ids) {
        int nb = wf_detokenizer_flush(&dt, buf, sizeof buf);
        fwrite(buf, 1, (size_t)nb, stdout);
    }
    printf("\n");
    fflush(stdout);
    double t_end = now_s();
    if (t_first == 0) t_first = t_end;
    fprintf(stderr, "weft-run: prompt %d tokens in %.3f s (%.1f tok/s), decode %d tokens in "
            "%.3f s (%.1f tok/s), %d threads\n", n_prompt, t_first - t_start,
            n_prompt / (t_first - t_start + 1e-9), n_done > 0 ? n_done - 1 : 0, t_end - t_first,
            (n_done > 1 ? n_done - 1 : 0) / (t_end - t_first + 1e-9), threads);
    rc = 0;
out:
    free(blocks);
    free(toks);
    free(text);
    wf_kv_store_free(&kv);
    wf_engine_free(e);
    return rc;
}
