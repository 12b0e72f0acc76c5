/* Token sampler (see sampler.h for the pipeline and the log-probability convention). All
 * scratch is sized for the vocabulary at wf_sampler_new; wf_sampler_sample never allocates.
 * Nothing is ever fully sorted: top-k uses a heap (small k) or quickselect, top-p a histogram of
 * the weights plus a mass quickselect inside the crossing bucket, min-p is a threshold, and the
 * softmax weights come from a 4-wide vector exp. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/features.h"
#include "engine/sampler_impl.h"
#include "engine/tokenizer.h"

#define REPEAT_LAST_N 64      /* llama.cpp's default penalty_last_n */
#define HEAP_TOP_K 512        /* top-k up to this uses a heap, larger k quickselect */

typedef struct cand {
    float logit;
    int32_t id;
    float w; /* softmax weight, exp(logit - max), filled by the stage that needs it */
} cand;

struct wf_sampler {
    int n_vocab;
    float *logits;      /* processed logits */
    cand *cands;        /* candidate set during truncation */
    cand *cands2;       /* top-p's partition output */
    uint16_t *bucket;   /* top-p bucket of each candidate */
    float *tmp, *w;     /* contiguous logits / weights for the vector exp */
    wf_sampler_exp_sum_fn exp_sum; /* widest kernel this CPU runs */
    int32_t *counts;    /* per-token occurrence counts (kept all-zero between calls) */
    int32_t *touched;   /* ids whose counts are non-zero, to reset them */
    /* EOG ids of the last tokenizer seen (computed once per tokenizer, not per token) */
    const wf_tokenizer *eog_tok;
    int32_t *eog_ids;
    int n_eog;
};

static wf_sampler_exp_sum_fn pick_exp_sum(void);

wf_sampler *wf_sampler_new(int n_vocab) {
    if (n_vocab < 1) return NULL;
    wf_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n_vocab = n_vocab;
    s->exp_sum = pick_exp_sum();
    s->logits = malloc((size_t)n_vocab * sizeof *s->logits);
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    s->cands2 = malloc((size_t)n_vocab * sizeof *s->cands2);
    s->bucket = malloc((size_t)n_vocab * sizeof *s->bucket);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->touched = malloc((size_t)n_vocab * sizeof *s->touched);
    s->eog_ids = malloc((size_t)n_vocab * sizeof *s->eog_ids);
    s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
    s->w = malloc((size_t)n_vocab * sizeof *s->w);
    if (!s->logits || !s->cands || !s->cands2 || !s->bucket || !s->counts || !s->touched ||
        !s->eog_ids || !s->tmp || !s->w) {
        wf_sampler_free(s);
        return NULL;
    }
    return s;
}

void wf_sampler_free(wf_sampler *s) {
    if (!s) return;
    free(s->logits);
    free(s->cands);
    free(s->cands2);
    free(s->bucket);
    free(s->counts);
    free(s->touched);
    free(s->eog_ids);
    free(s->tmp);
    free(s->w);
    free(s);
}

int wf_sampler_n_vocab(const wf_sampler *s) { return s->n_vocab; }

/* ---- random numbers: splitmix64 (one 64-bit state fits wf_task_sample.rng_state) ---------- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rng_next(uint64_t *state) {
    *state += 0x9e3779b97f4a7c15ull;
    return mix64(*state);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t *state) { return (double)(rng_next(state) >> 11) * 0x1p-53; }

uint64_t wf_sampler_seed_state(uint64_t seed, int choice) {
    /* Hash seed and choice together so that neighbouring seeds/choices start far apart on the
     * splitmix64 sequence (2^64 period): the streams do not overlap in practice. */
    return mix64(mix64(seed ^ 0x6a09e667f3bcc909ull) + mix64((uint64_t)(uint32_t)choice +
                                                             0xbb67ae8584caa73bull));
}

/* ---- exp over arrays (sampler_impl.h) --------------------------------------------------------
 * Softmax weights over a 49152-token vocabulary dominate the sampler's cost with a scalar expf:
 * the 4-lane kernel below needs no ISA flags; the 8-lane AVX2 one is chosen at run time. */

WF_SAMPLER_DEFINE_EXP_SUM(static, exp_sum_v4, 4)

/* The 4-lane types, also used by the block maximum below. */
typedef exp_sum_v4_vf v4f;
typedef exp_sum_v4_vi v4i;

static wf_sampler_exp_sum_fn pick_exp_sum(void) {
#if defined(__x86_64__) || defined(__i386__)
    if (wf_cpu_features_get()->isa >= WF_CPU_ISA_AVX2) return wf_sampler_exp_sum_avx2;
#endif
    return exp_sum_v4;
}

/* Largest of x[0..16) (NaN ignored); *nan |= whether any is NaN. Lets the argmax and the top-k
 * heap skip whole blocks with a few vector ops (most blocks hold no new maximum). */
static inline float block16_max(const float *x, v4i *nan) {
    v4f a, b, c, d;
    memcpy(&a, x, sizeof a);
    memcpy(&b, x + 4, sizeof b);
    memcpy(&c, x + 8, sizeof c);
    memcpy(&d, x + 12, sizeof d);
    *nan |= (a != a) | (b != b) | (c != c) | (d != d);
    v4i m = a > b;
    a = (v4f)(((v4i)a & m) | ((v4i)b & ~m));
    m = c > d;
    c = (v4f)(((v4i)c & m) | ((v4i)d & ~m));
    m = a > c;
    a = (v4f)(((v4i)a & m) | ((v4i)c & ~m));
    float r = a[0];
    for (int i = 1; i < 4; i++)
        if (a[i] > r) r = a[i];
    return r;
}

/* ---- ordering: by logit descending, then id ascending (a total order: deterministic) ------- */

static inline bool cand_before(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static inline void cand_swap(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Hoare partition of c[lo..hi) (hi - lo > 2) around a median-of-three pivot: returns j with
 * c[lo..j] before-or-equal the pivot and c[j+1..hi) after-or-equal it. */
static int partition(cand *c, int lo, int hi) {
    int mid = lo + (hi - lo) / 2;
    if (cand_before(&c[mid], &c[lo])) cand_swap(&c[mid], &c[lo]);
    if (cand_before(&c[hi - 1], &c[lo])) cand_swap(&c[hi - 1], &c[lo]);
    if (cand_before(&c[hi - 1], &c[mid])) cand_swap(&c[hi - 1], &c[mid]);
    cand pivot = c[mid]; /* the median: c[lo] before-or-equal, c[hi-1] after-or-equal */
    int i = lo, j = hi - 1;
    for (;;) {
        while (cand_before(&c[i], &pivot)) i++;
        while (cand_before(&pivot, &c[j])) j--;
        if (i >= j) return j;
        cand_swap(&c[i], &c[j]);
        i++;
        j--;
    }
}

static void insertion_sort(cand *c, int lo, int hi) {
    for (int a = lo + 1; a < hi; a++) {
        cand x = c[a];
        int b = a - 1;
        while (b >= lo && cand_before(&x, &c[b])) {
            c[b + 1] = c[b];
            b--;
        }
        c[b + 1] = x;
    }
}

/* Rearranges c[lo..hi) so that c[lo..k) holds the (k - lo) first candidates in cand order
 * (unsorted). Quickselect with median-of-three pivots; expected O(n). */
static void select_first(cand *c, int lo, int hi, int k) {
    while (hi - lo > 16) {
        int j = partition(c, lo, hi); /* c[lo..j] before-or-equal pivot, c[j+1..hi) after */
        if (k <= j + 1) {
            hi = j + 1;
        } else {
            lo = j + 1;
        }
        if (k <= lo || k >= hi) return;
    }
    insertion_sort(c, lo, hi); /* small range */
}

/* ---- penalties ----------------------------------------------------------------------------- */

/* Counts history[from..to) into s->counts; returns the number of touched ids. */
static int count_tokens(wf_sampler *s, const int32_t *h, int from, int to) {
    int n_touched = 0;
    for (int i = from; i < to; i++) {
        int32_t t = h[i];
        if (s->counts[t]++ == 0) s->touched[n_touched++] = t;
    }
    return n_touched;
}

static void reset_counts(wf_sampler *s, int n_touched) {
    for (int i = 0; i < n_touched; i++) s->counts[s->touched[i]] = 0;
}

static void apply_penalties(wf_sampler *s, const wf_task_sample *smp) {
    const wf_sampling_params *p = smp->params;
    float *l = s->logits;
    if (p->repetition_penalty != 1.0f && smp->n_history > 0) {
        /* llama.cpp: each distinct token of the last 64 once; shrink towards "less likely". */
        int from = smp->n_history > REPEAT_LAST_N ? smp->n_history - REPEAT_LAST_N : 0;
        int nt = count_tokens(s, smp->history, from, smp->n_history);
        for (int i = 0; i < nt; i++) {
            int32_t t = s->touched[i];
            if (l[t] <= 0)
                l[t] *= p->repetition_penalty;
            else
                l[t] /= p->repetition_penalty;
        }
        reset_counts(s, nt);
    }
    if ((p->frequency_penalty != 0 || p->presence_penalty != 0) && smp->n_history > smp->n_prompt) {
        /* OpenAI: over the generated tokens only. */
        int nt = count_tokens(s, smp->history, smp->n_prompt, smp->n_history);
        for (int i = 0; i < nt; i++) {
            int32_t t = s->touched[i];
            l[t] -= (float)s->counts[t] * p->frequency_penalty + p->presence_penalty;
        }
        reset_counts(s, nt);
    }
}

static void load_eog(wf_sampler *s, const wf_tokenizer *tok) {
    if (s->eog_tok == tok) return;
    s->n_eog = 0;
    int n = wf_tokenizer_n_vocab(tok);
    if (n > s->n_vocab) n = s->n_vocab;
    for (int32_t id = 0; id < n; id++)
        if (wf_tokenizer_is_eog(tok, id)) s->eog_ids[s->n_eog++] = id;
    s->eog_tok = tok;
}

/* ---- sampling ------------------------------------------------------------------------------ */

static wf_status check_params(const wf_sampler *s, const wf_task_sample *smp) {
    const wf_sampling_params *p = smp->params;
    if (!(p->temperature >= 0) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1) ||
        !(p->min_p >= 0 && p->min_p <= 1) || !(p->repetition_penalty > 0) ||
        !isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty) ||
        !isfinite(p->temperature) || !isfinite(p->repetition_penalty) || p->top_logprobs < 0 ||
        p->top_logprobs > WF_MAX_TOP_LOGPROBS || p->n_logit_bias < 0 ||
        (p->n_logit_bias > 0 && !p->logit_bias))
        return WF_EINVAL;
    if (smp->n_history < 0 || smp->n_prompt < 0 || smp->n_prompt > smp->n_history ||
        (smp->n_history > 0 && !smp->history))
        return WF_EINVAL;
    for (int i = 0; i < smp->n_history; i++)
        if (smp->history[i] < 0 || smp->history[i] >= s->n_vocab) return WF_EINVAL;
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= s->n_vocab ||
            isnan(p->logit_bias[i].bias))
            return WF_EINVAL;
    return WF_OK;
}

/* Fills out->logprob and out->top[] under the full softmax of the processed logits. */
static void fill_logprobs(const wf_sampler *s, const wf_sampling_params *p, float lmax,
                          wf_generated_token *out) {
    const float *l = s->logits;
    double z = s->exp_sum(l, NULL, s->n_vocab, lmax, 1.0f); /* exp(-inf) = 0 */
    double log_z = (double)lmax + log(z);
    out->logprob = (float)((double)l[out->token] - log_z);
    int k = p->top_logprobs, n = 0;
    wf_token_logprob *top = out->top;
    /* Insertion into a small sorted array: O(V) for the common case. */
    v4i nan = {0, 0, 0, 0};
    for (int32_t i = 0; i < s->n_vocab && k > 0; i++) {
        if ((i & 15) == 0 && n == k && i + 16 <= s->n_vocab &&
            !(block16_max(l + i, &nan) > top[n - 1].logprob)) {
            i += 15; /* nothing in this block enters the top list */
            continue;
        }
        float v = l[i];
        if (v == -INFINITY) continue;
        if (n == k && !(v > top[n - 1].logprob)) continue; /* ties keep the lower id */
        int j = n < k ? n++ : n - 1;
        while (j > 0 && v > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].token = i;
        top[j].logprob = v; /* raw logit for now: same order */
    }
    for (int j = 0; j < n; j++) top[j].logprob = (float)((double)top[j].logprob - log_z);
    out->n_top = n;
}

/* top-k for small k: a heap of the k first candidates so far whose root is the last of them in
 * cand order. After the first few thousand logits a new one rarely enters, so the test is a
 * well-predicted branch (quickselect's partition mispredicts about half its comparisons).
 * Returns min(k, number of logits >= thr); c[0..n) holds them, unsorted. */
static void heap_sift_down(cand *h, int n, int i) {
    for (;;) {
        int a = 2 * i + 1, b = a + 1, m = i;
        if (a < n && cand_before(&h[m], &h[a])) m = a;
        if (b < n && cand_before(&h[m], &h[b])) m = b;
        if (m == i) return;
        cand_swap(&h[i], &h[m]);
        i = m;
    }
}

static int heap_top_k(cand *h, const float *l, int nv, float thr, int k) {
    int n = 0;
    v4i nan = {0, 0, 0, 0};
    for (int32_t i = 0; i < nv; i++) {
        /* Full heap: a block whose maximum is not above the root cannot enter (an equal logit
         * has a larger id than every kept one, so it ranks after the root). */
        if ((i & 15) == 0 && n == k && i + 16 <= nv && !(block16_max(l + i, &nan) > h[0].logit)) {
            i += 15;
            continue;
        }
        float v = l[i];
        if (v == -INFINITY || !(v >= thr)) continue;
        cand x = {v, i, 0};
        if (n < k) {
            int j = n++; /* sift up */
            while (j > 0 && cand_before(&h[(j - 1) / 2], &x)) {
                h[j] = h[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            h[j] = x;
        } else if (cand_before(&x, &h[0])) {
            h[0] = x;
            heap_sift_down(h, n, 0);
        }
    }
    return n;
}

/* top-p: the number m of first candidates (in cand order) of c[0..n) whose weights sum to at
 * least `target`, leaving them in c[0..m) (unsorted). Quickselect on cumulative mass: expected
 * O(n), no sort. Equivalent to sorting and keeping the shortest prefix that reaches target. */
static int select_mass(cand *c, int n, double target) {
    int lo = 0, hi = n;
    double acc = 0; /* mass of c[0..lo), all in the kept set, < target */
    while (hi - lo > 16) {
        int j = partition(c, lo, hi);
        double mass = 0;
        for (int k = lo; k <= j; k++) mass += c[k].w;
        if (acc + mass >= target) {
            hi = j + 1;
        } else {
            acc += mass;
            lo = j + 1;
        }
    }
    insertion_sort(c, lo, hi); /* the small remainder */
    for (int k = lo; k < hi; k++) {
        acc += c[k].w;
        if (acc >= target) return k + 1;
    }
    return hi; /* rounding: target not reached, keep everything considered (0 if empty) */
}

/* Weights exp((logit - lmax) * scale) of c[0..n) into c[].w; returns their sum. */
static double cand_weights(wf_sampler *s, cand *c, int n, float lmax, float scale) {
    for (int i = 0; i < n; i++) s->tmp[i] = c[i].logit;
    double z = s->exp_sum(s->tmp, s->w, n, lmax, scale);
    for (int i = 0; i < n; i++) c[i].w = s->w[i];
    return z;
}

/* top-p over c[0..n) (weights filled, total z): the shortest prefix in cand order whose mass
 * reaches top_p * z, left in c[0..m). Buckets of (lmax - logit) find the bucket where the
 * mass crosses the target in one branch-free pass; only that bucket needs selecting. */
#define TOP_P_BUCKETS 512
#define TOP_P_BUCKET_SCALE 8.0f /* buckets per unit of logit: 64 logits of range */

static int bucket_of(float logit, float lmax) {
    float d = (lmax - logit) * TOP_P_BUCKET_SCALE;
    return d < (float)(TOP_P_BUCKETS - 1) ? (int)d : TOP_P_BUCKETS - 1;
}

static int top_p_select(wf_sampler *s, cand **cp, int n, float lmax, double target) {
    cand *c = *cp, *out = s->cands2;
    double mass[TOP_P_BUCKETS] = {0};
    int count[TOP_P_BUCKETS] = {0};
    for (int i = 0; i < n; i++) {
        int b = bucket_of(c[i].logit, lmax);
        s->bucket[i] = (uint16_t)b;
        mass[b] += c[i].w;
        count[b]++;
    }
    double cum = 0;
    int cross = -1, before = 0;
    for (int b = 0; b < TOP_P_BUCKETS; b++) {
        if (cum + mass[b] >= target) {
            cross = b;
            break;
        }
        cum += mass[b];
        before += count[b];
    }
    if (cross < 0) return n; /* rounding: the target was not reached; keep everything */
    /* Buckets < cross first (all kept), then bucket `cross`, in one pass into cands2. */
    int m = 0, k = before;
    for (int i = 0; i < n; i++) {
        int b = s->bucket[i];
        if (b < cross)
            out[m++] = c[i];
        else if (b == cross)
            out[k++] = c[i];
    }
    *cp = out;
    return before + select_mass(out + before, k - before, target - cum);
}

/* top-p over the whole vocabulary (no top-k before it), without building the full candidate
 * set: weights and the bucket histogram come straight from the contiguous logits, and only the
 * buckets up to the crossing one are gathered (whole blocks below it are skipped). Same result
 * as cand_weights + top_p_select; leaves the nucleus in s->cands[0..n). */
static int top_p_vocab(wf_sampler *s, const float *l, int nv, float lmax, double top_p) {
    double z = s->exp_sum(l, s->w, nv, lmax, 1.0f);
    double target = top_p * z;
    /* Bucket ids 4 at a time (same arithmetic as bucket_of: -inf lands in the last bucket with
     * weight 0, which only matters there), then a branch-free histogram split in two halves so
     * that consecutive hits on one bucket do not serialise on its memory. */
    const float last = (float)(TOP_P_BUCKETS - 1);
    int32_t i = 0;
    for (; i + 4 <= nv; i += 4) {
        v4f v;
        memcpy(&v, l + i, sizeof v);
        v4f d = (lmax - v) * TOP_P_BUCKET_SCALE;
        v4i big = d >= last;
        d = (v4f)(((v4i)d & ~big) | ((v4i)(d * 0 + last) & big));
        v4i b = __builtin_convertvector(d, v4i);
        for (int k = 0; k < 4; k++) s->bucket[i + k] = (uint16_t)b[k];
    }
    for (; i < nv; i++) s->bucket[i] = (uint16_t)bucket_of(l[i], lmax);
    double mass[TOP_P_BUCKETS] = {0}, mass2[TOP_P_BUCKETS] = {0};
    int count[TOP_P_BUCKETS] = {0};
    for (i = 0; i + 2 <= nv; i += 2) {
        mass[s->bucket[i]] += s->w[i];
        mass2[s->bucket[i + 1]] += s->w[i + 1];
        count[s->bucket[i]]++;
        count[s->bucket[i + 1]]++;
    }
    for (; i < nv; i++) {
        mass[s->bucket[i]] += s->w[i];
        count[s->bucket[i]]++;
    }
    for (int b = 0; b < TOP_P_BUCKETS; b++) mass[b] += mass2[b];
    double cum = 0;
    int cross = TOP_P_BUCKETS - 1, before = 0;
    for (int b = 0; b < TOP_P_BUCKETS; b++) {
        /* the last bucket also ends the walk: if rounding kept the target out of reach,
         * select_mass then keeps all of it */
        if (cum + mass[b] >= target || b == TOP_P_BUCKETS - 1) {
            cross = b;
            break;
        }
        cum += mass[b];
        before += count[b];
    }
    /* A block whose maximum lies two buckets below the crossing one holds nothing to gather
     * (one bucket of margin against rounding in bucket_of). */
    float skip_below = lmax - (float)(cross + 2) / TOP_P_BUCKET_SCALE;
    cand *c = s->cands;
    int m = 0, k = before;
    v4i nan = {0, 0, 0, 0};
    for (i = 0; i < nv; i++) {
        if ((i & 15) == 0 && i + 16 <= nv && block16_max(l + i, &nan) < skip_below) {
            i += 15;
            continue;
        }
        if (l[i] == -INFINITY) continue;
        int b = s->bucket[i];
        if (b < cross)
            c[m++] = (cand){l[i], i, s->w[i]};
        else if (b == cross)
            c[k++] = (cand){l[i], i, s->w[i]};
    }
    return before + select_mass(c + before, k - before, target - cum);
}

/* Draws from softmax(logit / T) over c[0..n); lmax is the largest logit. */
static int32_t draw_from(wf_sampler *s, cand *c, int n, float lmax, float temperature,
                         uint64_t *rng) {
    double z = cand_weights(s, c, n, lmax, 1.0f / temperature);
    double u = rng_uniform(rng) * z, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += c[i].w;
        if (u < cum && c[i].w > 0) return c[i].id;
    }
    for (int i = n - 1; i > 0; i--) /* u landed in rounding slack: the last non-zero weight */
        if (c[i].w > 0) return c[i].id;
    return c[0].id;
}

wf_status wf_sampler_sample(wf_sampler *s, const float *logits, const wf_tokenizer *tok,
                            wf_task_sample *smp) {
    if (!s || !logits || !smp || !smp->params) return WF_EINVAL;
    const wf_sampling_params *p = smp->params;
    wf_status st = check_params(s, smp);
    if (st != WF_OK) return st;
    const int nv = s->n_vocab;
    float *l = s->logits;
    memcpy(l, logits, (size_t)nv * sizeof *l);
    for (int i = 0; i < p->n_logit_bias; i++) l[p->logit_bias[i].token] += p->logit_bias[i].bias;
    apply_penalties(s, smp);
    if (tok) {
        load_eog(s, tok);
        if (smp->suppress_eos)
            for (int i = 0; i < s->n_eog; i++) l[s->eog_ids[i]] = -INFINITY;
    }

    /* Greedy pick (lowest id among equal maxima) = the maximum for everything below. The
     * update branch is rarely taken, so this runs at load speed instead of a max chain. */
    int32_t best = -1;
    float lmax = -INFINITY;
    v4i nan = {0, 0, 0, 0};
    int32_t i0 = 0;
    for (; i0 + 16 <= nv; i0 += 16) {
        if (!(block16_max(l + i0, &nan) > lmax) && best >= 0) continue;
        for (int32_t i = i0; i < i0 + 16; i++)
            if (l[i] > lmax || best < 0) {
                lmax = l[i];
                best = i;
            }
    }
    for (int32_t i = i0; i < nv; i++) {
        if (l[i] != l[i]) nan[0] = -1;
        if (l[i] > lmax || best < 0) {
            lmax = l[i];
            best = i;
        }
    }
    /* NaN logit (or a +inf bias on a -inf logit) */
    if (nan[0] | nan[1] | nan[2] | nan[3]) return WF_ERANGE;
    if (best < 0 || lmax == -INFINITY) return WF_ERANGE; /* everything banned or suppressed */
    if (lmax == INFINITY) {
        /* +inf logits (a +inf bias): those tokens share all the mass. */
        for (int32_t i = 0; i < nv; i++) l[i] = l[i] == INFINITY ? 0 : -INFINITY;
        lmax = 0;
    }

    int32_t chosen = best;
    if (p->temperature > 0 && (p->top_k == 0 || p->top_k >= nv) && p->top_p >= 1.0f &&
        p->min_p <= 0) {
        /* No truncation: draw straight from the contiguous logits (exp(-inf) = 0). */
        double z = s->exp_sum(l, s->w, nv, lmax, 1.0f / p->temperature);
        double u = rng_uniform(&smp->rng_state) * z, cum = 0;
        chosen = best;
        for (int32_t i = 0; i < nv; i++) {
            cum += s->w[i];
            if (u < cum && s->w[i] > 0) {
                chosen = i;
                break;
            }
        }
    } else if (p->temperature > 0) {
        cand *c = s->cands;
        int n = 0;
        /* llama.cpp's order: top-k -> top-p -> min-p. Each keeps a prefix of the candidates
         * in cand order, so min-p (a threshold on the logit: p_i >= min_p * p_max) commutes with
         * top-k; it is applied while building the set when top-p (whose normaliser depends on
         * what precedes it) is off, and after top-p otherwise. */
        float thr = p->min_p > 0 ? lmax + logf(p->min_p) : -INFINITY;
        bool early_min_p = p->top_p >= 1.0f;
        float build_thr = early_min_p ? thr : -INFINITY;
        bool top_p_done = false;
        if (p->top_k > 0 && p->top_k <= HEAP_TOP_K) {
            n = heap_top_k(c, l, nv, build_thr, p->top_k);
        } else if (!early_min_p && (p->top_k == 0 || p->top_k >= nv)) {
            n = top_p_vocab(s, l, nv, lmax, (double)p->top_p);
            top_p_done = true;
        } else {
            for (int32_t i = 0; i < nv; i++)
                if (l[i] != -INFINITY && l[i] >= build_thr) c[n++] = (cand){l[i], i, 0};
            if (p->top_k > 0 && p->top_k < n) {
                select_first(c, 0, n, p->top_k);
                n = p->top_k;
            }
        }
        if (!early_min_p && n > 1) {
            if (!top_p_done) {
                double z = cand_weights(s, c, n, lmax, 1.0f);
                n = top_p_select(s, &c, n, lmax, (double)p->top_p * z);
            }
            int m = 0;
            for (int i = 0; i < n; i++)
                if (c[i].logit >= thr) c[m++] = c[i];
            n = m; /* the maximum always passes */
        }
        chosen = draw_from(s, c, n, lmax, p->temperature, &smp->rng_state);
    }

    wf_generated_token *out = &smp->out;
    out->token = chosen;
    out->logprob = 0;
    out->n_top = 0;
    if (p->logprobs) fill_logprobs(s, p, lmax, out);
    smp->out_is_eog = tok != NULL && wf_tokenizer_is_eog(tok, chosen);
    return WF_OK;
}
