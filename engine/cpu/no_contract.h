/* Internal to engine: a float barrier that keeps the compiler from fusing a multiply with the
 * add that follows it.
 *
 *     float u = wf_no_contract_f32(d * sc); // rounded to float here
 *     y += u;                               // a separate add: two roundings, never one fma
 *
 * Why: weft matches llama.cpp bit for bit, and ggml adds some products unfused (its F32 dot
 * product's leftovers, ggml_scale then ggml_add for a LoRA update). GCC's default
 * -ffp-contract=fast fuses `a * b + c` into one fma even across statements wherever the target
 * has one (-mfma on x86-64, always on aarch64), which changes the last bit. An empty asm that
 * claims to modify the value in a float register makes the product opaque, so it is rounded
 * before the add; it costs no instruction. */
#ifndef WF_ENGINE_CPU_NO_CONTRACT_H
#define WF_ENGINE_CPU_NO_CONTRACT_H

static inline float wf_no_contract_f32(float v) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__("" : "+x"(v));
#elif defined(__aarch64__) || defined(__arm__)
    __asm__("" : "+w"(v));
#else
    /* No known register class: a volatile round trip forces the rounded value to memory. */
    volatile float t = v;
    v = t;
#endif
    return v;
}

#endif
