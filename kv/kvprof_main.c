/* weft-kvprof: measures the KV codec's profiles on one model and writes the profile library the
 * compression controller loads (kv/kv_controller.h). It runs the real engine on a built-in
 * evaluation set and emulates the prefill -> decode transfer: after each prompt's prefill the
 * prompt's KV is encoded and decoded in place, then decoding continues on the result.
 *
 *     weft-kvprof -m MODEL.gguf -o deploy/kv-profiles.json     # measure every built-in profile
 *     weft-kvprof -m MODEL.gguf --check deploy/kv-profiles.json  # re-measure a library
 *
 * Per profile: compression ratio CR (F16 bytes in / frame bytes) and encode/decode speed on the
 * real KV; accuracy as greedy-token agreement with uncompressed KV, teacher-forced along the
 * uncompressed greedy continuation (the first token comes from prefill and is not counted);
 * ppl_delta as the relative change in perplexity of that continuation. Per (layer, KV head):
 * an importance score, the mean KL divergence of the next-token distribution when only that
 * head is quantised to 2 bits, which ranks heads for hybrid profiles.
 * --check exits 1 if a profile measures below its stated accuracy minus --tolerance. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "kv/codec.h"
#include "kv/kv_controller.h"
#include "proto/base/clock.h"
#include "proto/base/log.h"

static const char *const k_prompts[] = {
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
    "combined movable metal type with an oil-based ink and a wooden press. Within fifty years",
    "To make a simple loaf of bread, mix flour, water, salt and yeast, knead the dough until it "
    "is smooth, and let it rise in a warm place. After about an hour,",
    "Photosynthesis is the process by which green plants use sunlight, water and carbon dioxide "
    "to produce glucose and oxygen. The reaction takes place in the chloroplasts, where",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        "
    "return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\ndef main():\n",
    "Dear hiring manager, I am writing to apply for the position of software engineer that was "
    "advertised on your website last week. I have five years of experience in",
    "The French Revolution, which began in 1789, transformed the political landscape of Europe. "
    "It abolished the monarchy, established a republic, and",
    "Question: A train travels 120 kilometres in two hours. What is its average speed?\nAnswer: "
    "The average speed is the distance divided by the time, so",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old "
    "woman who kept a secret garden. Every morning she",
    /* Prompts 9-32 (added when 8 x 32 tokens, 2 SE about 0.033, could not tell a profile at
     * 0.92 from one at 0.89): more genres, code, lists, dialogue and numbers. */
    "The mitochondria are often called the powerhouse of the cell because they produce most of "
    "the cell's supply of adenosine triphosphate. Their inner membrane",
    "#include <stdio.h>\n\nint main(void) {\n    int sum = 0;\n    for (int i = 1; i <= 10; i++) "
    "{\n",
    "User: What are three tips for sleeping better at night?\nAssistant: Here are three tips "
    "that can help you sleep better:\n1.",
    "The stock market fell sharply on Monday after the central bank announced that it would "
    "raise interest rates by half a percentage point. Analysts said",
    "Mount Everest, the highest mountain on Earth, rises 8,849 metres above sea level on the "
    "border between Nepal and China. The first confirmed ascent",
    "SELECT customers.name, COUNT(orders.id) AS order_count\nFROM customers\nLEFT JOIN orders ON",
    "Ingredients: 2 cups of flour, 1 cup of sugar, 3 eggs, half a cup of butter, 1 teaspoon of "
    "vanilla.\nInstructions: Preheat the oven to 180 degrees.",
    "The theory of evolution by natural selection, first formulated by Charles Darwin, explains "
    "how populations of living organisms change over generations. Individuals",
    "Question: If a shirt costs 25 dollars and is on sale for 20 percent off, what is the sale "
    "price?\nAnswer:",
    "The old lighthouse keeper climbed the spiral stairs for the last time. Outside, the storm "
    "was growing stronger, and the waves",
    "Water boils at 100 degrees Celsius at sea level, but at higher altitudes the boiling point "
    "is lower because",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
    "        self.items.append(item)\n\n    def pop(self):\n",
    "Here is a list of the planets in our solar system, in order from the Sun:\n1. Mercury\n2.",
    "In economics, inflation is a general increase in the prices of goods and services in an "
    "economy. When the general price level rises,",
    "Dear Sarah,\nThank you so much for the lovely birthday present. I have already",
    "The Great Wall of China is a series of fortifications that were built across the historical "
    "northern borders of ancient Chinese states. Construction",
    "To change a flat tyre, first park the car on a flat surface and turn on the hazard lights. "
    "Then",
    "function debounce(fn, delay) {\n  let timer = null;\n  return function (...args) {\n",
    "The human heart has four chambers: two atria and two ventricles. Blood returning from the "
    "body enters the right atrium, and",
    "Climate change refers to long-term shifts in temperatures and weather patterns. Since the "
    "1800s, human activities have been the main driver, primarily",
    "Q: What is the capital of Australia?\nA: Canberra.\nQ: What is the largest ocean on Earth?\n"
    "A:",
    "The detective looked around the empty room. The window was open, a chair had been knocked "
    "over, and on the desk lay",
    "A prime number is a natural number greater than 1 that has no positive divisors other than "
    "1 and itself. The first ten prime numbers are",
    "Meeting notes, Tuesday: The team discussed the release schedule for the new version of the "
    "app. The main points were",
};
#define N_PROMPTS_MAX ((int)(sizeof k_prompts / sizeof k_prompts[0]))

/* The built-in library: the widths, rotations and hybrid shares worth offering. A hybrid puts
 * the low_share least important heads (weft-kvprof's scores) at the low widths. */
static void builtin_profiles(wf_kv_profile *p, int *n) {
    /* rv: rotate values; zl: zstd level (0 = none: a faster, slightly larger variant). */
    struct { const char *name; int kb, vb, lkb, lvb; float share; bool rk, rv; int zl; } t[] = {
        {"k8v8", 8, 8, 8, 8, 0, false, false, 1},
        {"k8v4", 8, 4, 8, 4, 0, false, false, 1},
        {"k4v4", 4, 4, 4, 4, 0, false, true, 1},
        {"k4v4-nr", 4, 4, 4, 4, 0, false, false, 1},
        {"k4v4-rk", 4, 4, 4, 4, 0, true, true, 1},
        {"k4v4-rk-nr", 4, 4, 4, 4, 0, true, false, 1},
        {"k4v4-nz", 4, 4, 4, 4, 0, false, true, 0},
        {"k4v4-h25", 4, 4, 2, 2, 0.25f, false, true, 1},
        {"k8v8-l75", 8, 8, 4, 4, 0.75f, false, false, 1}, /* top quarter of heads at 8 bits */
        {"k4v2", 4, 2, 4, 2, 0, false, true, 1},
        {"k3v3-rk", 3, 3, 3, 3, 0, true, true, 1},
        {"k2v2", 2, 2, 2, 2, 0, false, true, 1},
        /* values at 3 bits, rotated: a higher CR than k4v4 at nearly its agreement (measured
         * on SmolLM2-135M, 32 prompts x 64 tokens: 4.31 and 0.929 against 3.93 and 0.938) */
        {"k4v3", 4, 3, 4, 3, 0, false, true, 1},
        /* k4v3 with keys rotated too (it measured a lower perplexity change) and the least
         * important heads lower still: past k4v4-nr's 4.06, the ratio that capped a compressed
         * transfer at ~3.8x raw's time on a 1 Gbit/s link (BENCHMARKS.md), within the 0.9
         * budget (SmolLM2-135M, 32 prompts x 64 tokens, 2 SE 0.012: 4.55 at 0.921, 4.66 at
         * 0.919; the first 8 x 32 had said 0.927 and 0.923) */
        {"k4v3-rk-l40", 4, 3, 3, 3, 0.40f, true, true, 1},
        {"k4v3-rk-l25v2", 4, 3, 3, 2, 0.25f, true, true, 1},
    };
    _Static_assert(sizeof t / sizeof t[0] <= 16, "profs[16] in main");
    *n = (int)(sizeof t / sizeof t[0]);
    for (int i = 0; i < *n; i++) {
        wf_kv_profile_init(&p[i], t[i].name, t[i].kb, t[i].vb);
        p[i].id = (uint32_t)(i + 1);
        p[i].low_k_bits = (uint8_t)t[i].lkb;
        p[i].low_v_bits = (uint8_t)t[i].lvb;
        p[i].low_share = t[i].share;
        p[i].rotate_k = t[i].rk;
        p[i].rotate_v = t[i].rv;
        p[i].zstd_level = t[i].zl;
    }
}

typedef struct prompt_ref {
    int32_t tokens[512]; /* prompt then the greedy continuation */
    int n_prompt, n_gen;
    double nll;          /* of the continuation (tokens 1..n_gen-1) under uncompressed KV */
    float *first_logits; /* logits of the first decode step (for importance) */
} prompt_ref;

typedef struct ctx {
    wf_engine *e;
    wf_kv_store kv;
    unsigned char *saved_k, *saved_v;
    size_t store_bytes;
    int32_t table[64];
    int n_blocks;
    int n_vocab;
    float *logits;
    wf_kv_codec *codec;
    uint8_t *frame;
    size_t frame_cap;
    prompt_ref *refs;
    int n_prompts, n_gen;
} ctx;

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static double log_softmax_at(const float *l, int n, int id) {
    float m = l[0];
    for (int i = 1; i < n; i++) m = l[i] > m ? l[i] : m;
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)(l[i] - m));
    return (double)(l[id] - m) - log(s);
}

static double kl_div(const float *p_logits, const float *q_logits, int n) {
    float mp = p_logits[0], mq = q_logits[0];
    for (int i = 1; i < n; i++) {
        mp = p_logits[i] > mp ? p_logits[i] : mp;
        mq = q_logits[i] > mq ? q_logits[i] : mq;
    }
    double sp = 0, sq = 0;
    for (int i = 0; i < n; i++) {
        sp += exp((double)(p_logits[i] - mp));
        sq += exp((double)(q_logits[i] - mq));
    }
    double kl = 0, lsp = log(sp), lsq = log(sq);
    for (int i = 0; i < n; i++) {
        double lp = (double)(p_logits[i] - mp) - lsp, lq = (double)(q_logits[i] - mq) - lsq;
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

static int forward(ctx *c, const int32_t *tokens, int n, int pos) {
    wf_task t = {.kind = n > 1 ? WF_TASK_PREFILL : WF_TASK_DECODE, .llm.tokens = tokens,
                 .llm.n_tokens = n, .llm.pos = pos, .llm.kv.block_table = c->table,
                 .llm.kv.n_blocks = c->n_blocks};
    wf_status st = wf_engine_forward_logits(c->e, &c->kv, &t, 1, c->logits);
    if (st != WF_OK) {
        fprintf(stderr, "weft-kvprof: forward at %d: %s\n", pos, wf_status_str(st));
        return -1;
    }
    return 0;
}

/* Prefill of prompt i; leaves the logits of its last position in c->logits. */
static int prefill(ctx *c, int i) {
    prompt_ref *r = &c->refs[i];
    for (int pos = 0; pos < r->n_prompt; pos += 256) {
        int n = r->n_prompt - pos < 256 ? r->n_prompt - pos : 256;
        if (forward(c, r->tokens + pos, n, pos)) return -1;
    }
    return 0;
}

static void save_kv(ctx *c) {
    memcpy(c->saved_k, c->kv.k, c->store_bytes);
    memcpy(c->saved_v, c->kv.v, c->store_bytes);
}

static void restore_kv(ctx *c) {
    memcpy(c->kv.k, c->saved_k, c->store_bytes);
    memcpy(c->kv.v, c->saved_v, c->store_bytes);
}

/* The transfer: encode the prompt's KV and decode it back in place. */
static int transfer(ctx *c, int n_tokens, uint64_t *enc_ns, uint64_t *dec_ns, size_t *frame_len) {
    char err[256];
    size_t len;
    uint64_t t0 = wf_clock_now_ns();
    if (wf_kv_codec_encode(c->codec, &c->kv, c->table, c->n_blocks, n_tokens, c->frame,
                           c->frame_cap, &len, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-kvprof: encode: %s\n", err);
        return -1;
    }
    uint64_t t1 = wf_clock_now_ns();
    int n;
    if (wf_kv_codec_decode(c->codec, c->frame, len, &c->kv, c->table, c->n_blocks, &n, err,
                           sizeof err) != WF_OK) {
        fprintf(stderr, "weft-kvprof: decode: %s\n", err);
        return -1;
    }
    uint64_t t2 = wf_clock_now_ns();
    if (enc_ns) *enc_ns += t1 - t0;
    if (dec_ns) *dec_ns += t2 - t1;
    if (frame_len) *frame_len += len;
    return 0;
}

static int build_refs(ctx *c, const wf_tokenizer *tok) {
    for (int i = 0; i < c->n_prompts; i++) {
        prompt_ref *r = &c->refs[i];
        int n = 0;
        if (wf_tokenizer_encode(tok, k_prompts[i], strlen(k_prompts[i]), true, false, r->tokens,
                                256, &n) != WF_OK || n < 2 || n > 256) {
            fprintf(stderr, "weft-kvprof: cannot tokenize prompt %d (%d tokens)\n", i, n);
            return -1;
        }
        r->n_prompt = n;
        r->n_gen = c->n_gen;
        if (prefill(c, i)) return -1;
        r->nll = 0;
        for (int g = 0; g < r->n_gen; g++) {
            int32_t next = argmax(c->logits, c->n_vocab);
            if (g > 0) r->nll -= log_softmax_at(c->logits, c->n_vocab, next);
            r->tokens[n + g] = next;
            if (g + 1 == r->n_gen) break;
            if (forward(c, &r->tokens[n + g], 1, n + g)) return -1;
            if (g == 0) memcpy(r->first_logits, c->logits, (size_t)c->n_vocab * sizeof(float));
        }
    }
    return 0;
}

typedef struct measured {
    double agreement, ppl_delta, cr, enc_gbps, dec_gbps;
} measured;

/* Runs every prompt with the codec's current profile. */
static int measure(ctx *c, measured *m) {
    uint64_t enc_ns = 0, dec_ns = 0;
    size_t in_bytes = 0, frame_bytes = 0;
    double moved = 0; /* F16 bytes through the timed transfers */
    long agree = 0, total = 0;
    double nll = 0, nll_ref = 0;
    for (int i = 0; i < c->n_prompts; i++) {
        prompt_ref *r = &c->refs[i];
        if (prefill(c, i)) return -1;
        save_kv(c);
        if (transfer(c, r->n_prompt, NULL, NULL, &frame_bytes)) return -1;
        in_bytes += wf_kv_codec_input_bytes(c->codec, r->n_prompt);
        for (int g = 1; g < r->n_gen; g++) {
            if (forward(c, &r->tokens[r->n_prompt + g - 1], 1, r->n_prompt + g - 1)) return -1;
            int32_t want = r->tokens[r->n_prompt + g];
            agree += argmax(c->logits, c->n_vocab) == want;
            total++;
            nll -= log_softmax_at(c->logits, c->n_vocab, want);
        }
        nll_ref += r->nll;
        /* Speed: repeat the transfer of the saved prompt KV for >= 20 ms. */
        uint64_t t_end = wf_clock_now_ns() + 20000000ull;
        do {
            restore_kv(c);
            if (transfer(c, r->n_prompt, &enc_ns, &dec_ns, NULL)) return -1;
            moved += (double)wf_kv_codec_input_bytes(c->codec, r->n_prompt);
        } while (wf_clock_now_ns() < t_end);
    }
    m->agreement = total ? (double)agree / (double)total : 1.0;
    m->ppl_delta = total ? exp((nll - nll_ref) / (double)total) - 1.0 : 0.0;
    m->cr = (double)in_bytes / (double)frame_bytes;
    m->enc_gbps = moved / (double)enc_ns;
    m->dec_gbps = moved / (double)dec_ns;
    return 0;
}

/* importance[l*H + h]: mean KL over prompts of the first decode step with only that head at
 * 2 bits (K and V), every other head kept in F16. */
static int measure_importance(ctx *c, const wf_kv_geometry *g, float *importance) {
    int nh = g->n_layers * g->n_kv_heads;
    float *sel = malloc((size_t)nh * sizeof *sel);
    if (!sel) return -1;
    wf_kv_profile p;
    wf_kv_profile_init(&p, "probe", 16, 16);
    p.low_k_bits = p.low_v_bits = 2;
    p.low_share = 0.5f / (float)nh + 1e-6f; /* rounds to exactly one head */
    p.zstd_level = 0;
    for (int i = 0; i < nh; i++) importance[i] = 0;
    for (int q = 0; q < c->n_prompts; q++) {
        prompt_ref *r = &c->refs[q];
        if (prefill(c, q)) goto fail;
        save_kv(c);
        for (int h = 0; h < nh; h++) {
            for (int i = 0; i < nh; i++) sel[i] = i == h ? 0.0f : 1.0f;
            if (wf_kv_codec_set_profile(c->codec, &p, sel, 0x5eed) != WF_OK) goto fail;
            restore_kv(c);
            if (transfer(c, r->n_prompt, NULL, NULL, NULL)) goto fail;
            if (forward(c, &r->tokens[r->n_prompt], 1, r->n_prompt)) goto fail;
            importance[h] += (float)(kl_div(r->first_logits, c->logits, c->n_vocab) /
                                     (double)c->n_prompts);
        }
    }
    free(sel);
    return 0;
fail:
    free(sel);
    return -1;
}

/* A whole-string integer in [lo, hi], or a message naming the option and its range. */
static int parse_int(const char *opt, const char *v, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "weft-kvprof: %s takes an integer in %d..%d, got '%s'\n", opt, lo, hi, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: weft-kvprof -m MODEL.gguf [-o OUT.json] [--check LIB.json [--tolerance T]]\n"
               "                   [--prompts N (1..%d, default all)] [--gen N (2..200, default 64)]\n"
               "                   [--threads N]\n", N_PROMPTS_MAX);
}

int main(int argc, char **argv) {
    const char *model = NULL, *out_path = NULL, *check_path = NULL;
    int n_prompts = N_PROMPTS_MAX, n_gen = 64, threads = 0;
    double tolerance = 0.03;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-o")) out_path = v;
        else if (!strcmp(a, "--check")) check_path = v;
        else if (!strcmp(a, "--tolerance")) {
            char *end;
            tolerance = strtod(v, &end);
            if (end == v || *end || !(tolerance >= 0 && tolerance <= 1)) {
                fprintf(stderr, "weft-kvprof: --tolerance takes a number in 0..1, got '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--prompts")) {
            if (parse_int(a, v, 1, N_PROMPTS_MAX, &n_prompts)) return 2;
        } else if (!strcmp(a, "--gen")) {
            if (parse_int(a, v, 2, 200, &n_gen)) return 2;
        } else if (!strcmp(a, "--threads")) {
            if (parse_int(a, v, 0, 256, &threads)) return 2;
        }
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "weft-kvprof: -m MODEL.gguf is required\n");
        usage(stderr);
        return 2;
    }
    int rc = 1, failed = 0, nh = 0;
    char err[512];
    ctx c;
    memset(&c, 0, sizeof c);
    wf_kv_profile_lib lib;
    memset(&lib, 0, sizeof lib);
    wf_engine_options o;
    wf_engine_options_init(&o);
    o.model_path = model;
    o.n_threads = threads;
    if (wf_engine_open(&o, &c.e, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-kvprof: %s\n", err);
        return 1;
    }
    const wf_model_info *info = wf_engine_info(c.e);
    c.n_vocab = info->n_vocab;
    c.n_prompts = n_prompts;
    c.n_gen = n_gen;
    wf_kv_geometry g = wf_engine_kv_geometry(c.e, 16);
    c.n_blocks = (256 + n_gen + 15) / 16 + 1;
    if (wf_kv_store_init(&c.kv, &g, wf_kv_geometry_block_bytes(&g) * (size_t)c.n_blocks) != WF_OK)
        goto done;
    c.n_blocks = c.kv.n_blocks;
    for (int i = 0; i < c.n_blocks; i++) c.table[i] = i;
    c.store_bytes = c.kv.block_bytes * (size_t)c.kv.n_blocks * (size_t)g.n_layers;
    c.saved_k = malloc(c.store_bytes);
    c.saved_v = malloc(c.store_bytes);
    c.logits = malloc((size_t)c.n_vocab * sizeof(float));
    c.refs = calloc((size_t)n_prompts, sizeof *c.refs);
    if (!c.saved_k || !c.saved_v || !c.logits || !c.refs) goto done;
    for (int i = 0; i < n_prompts; i++)
        if (!(c.refs[i].first_logits = malloc((size_t)c.n_vocab * sizeof(float)))) goto done;
    if (wf_kv_codec_new(&g, 256, &c.codec) != WF_OK) goto done;
    c.frame_cap = wf_kv_codec_max_frame_bytes(c.codec, 256);
    if (!(c.frame = malloc(c.frame_cap))) goto done;
    fprintf(stderr, "weft-kvprof: %s: %d layers x %d KV heads x %d, %d prompts, %d tokens each, "
                    "codec %s\n", info->name, g.n_layers, g.n_kv_heads, g.head_dim, n_prompts,
            n_gen, wf_kv_codec_isa());
    uint64_t t0 = wf_clock_now_ns();
    if (build_refs(&c, wf_engine_tokenizer(c.e))) goto done;
    /* The agreement's sampling error, so a stated accuracy is read with its precision. */
    int positions = n_prompts * (n_gen - 1);
    fprintf(stderr, "weft-kvprof: agreement over %d decode positions per profile (2 SE at 0.92: "
                    "%.3f)\n", positions, 2.0 * sqrt(0.92 * 0.08 / positions));

    nh = g.n_layers * g.n_kv_heads;
    if (check_path) {
        if (wf_kv_profile_lib_load(check_path, &lib, err, sizeof err) != WF_OK) {
            fprintf(stderr, "weft-kvprof: %s\n", err);
            goto done;
        }
        if (lib.n_layers != g.n_layers || lib.n_kv_heads != g.n_kv_heads ||
            lib.head_dim != g.head_dim) {
            fprintf(stderr, "weft-kvprof: %s is for %dx%dx%d, this model is %dx%dx%d\n",
                    check_path, lib.n_layers, lib.n_kv_heads, lib.head_dim, g.n_layers,
                    g.n_kv_heads, g.head_dim);
            goto done;
        }
    } else {
        lib.importance = malloc((size_t)nh * sizeof *lib.importance);
        lib.items = calloc(16, sizeof *lib.items);
        if (!lib.importance || !lib.items) goto done;
        if (measure_importance(&c, &g, lib.importance)) goto done;
        wf_kv_profile profs[16];
        builtin_profiles(profs, &lib.n);
        for (int i = 0; i < lib.n; i++) lib.items[i].profile = profs[i];
        const char *base = strrchr(model, '/');
        snprintf(lib.model, sizeof lib.model, "%s", base ? base + 1 : model);
        lib.n_layers = g.n_layers;
        lib.n_kv_heads = g.n_kv_heads;
        lib.head_dim = g.head_dim;
    }
    printf("%-10s %6s %9s %9s %10s %10s %9s%s\n", "profile", "CR", "enc GB/s", "dec GB/s",
           "agreement", "ppl delta", "B* Gbps", check_path ? "   stated" : "");
    for (int i = 0; i < lib.n; i++) {
        wf_kv_profile_stats *s = &lib.items[i];
        if (wf_kv_codec_set_profile(c.codec, &s->profile, lib.importance, 0x5eed) != WF_OK) {
            fprintf(stderr, "weft-kvprof: profile %s does not fit this model\n", s->profile.name);
            goto done;
        }
        measured m = {0};
        if (measure(&c, &m)) goto done;
        double stated = s->accuracy;
        s->cr = m.cr;
        s->enc_gbps = m.enc_gbps;
        s->dec_gbps = m.dec_gbps;
        s->ppl_delta = m.ppl_delta;
        s->accuracy = m.agreement;
        printf("%-10s %6.2f %9.3f %9.3f %10.4f %+10.4f %9.2f", s->profile.name, s->cr,
               s->enc_gbps, s->dec_gbps, s->accuracy, s->ppl_delta, wf_kv_profile_b_star_gbps(s));
        if (check_path) {
            bool ok = m.agreement >= stated - tolerance;
            printf("   %.4f %s", stated, ok ? "ok" : "BELOW");
            failed += !ok;
        }
        printf("\n");
        fflush(stdout);
    }
    fprintf(stderr, "weft-kvprof: %.1f s\n", (double)(wf_clock_now_ns() - t0) / 1e9);
    if (out_path && wf_kv_profile_lib_save(&lib, out_path, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weft-kvprof: %s\n", err);
        goto done;
    }
    rc = failed ? 1 : 0;
    if (failed) fprintf(stderr, "weft-kvprof: %d profile(s) below their stated accuracy\n", failed);
done:
    if (rc && !failed && errno == ENOMEM) fprintf(stderr, "weft-kvprof: out of memory\n");
    wf_kv_profile_lib_free(&lib);
    if (c.refs)
        for (int i = 0; i < n_prompts; i++) free(c.refs[i].first_logits);
    free(c.refs);
    free(c.frame);
    wf_kv_codec_free(c.codec);
    free(c.logits);
    free(c.saved_k);
    free(c.saved_v);
    wf_kv_store_free(&c.kv);
    wf_engine_free(c.e);
    return rc;
}
