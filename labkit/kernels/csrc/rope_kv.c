/* RoPE on a step's q and k heads, and the K/V write into the paged pool, in one pass: what
 * ``Rotary.forward`` and ``attention.reference.write_kv`` do in about ten PyTorch kernels a layer.
 *
 *   heads  [T, H + 2 Hkv, D] fp32   the fused QKV projection's output: H q heads, Hkv k heads, Hkv v heads
 *   cos, sin  [P, D]                the rotary tables (``Rotary.cos`` and ``Rotary.signed_sin``)
 *   positions [T], slots [T]        each token's position, and the pool slot its K/V goes to
 *   q      [T, H, D]                the rotated q heads (out)
 *   k_pool, v_pool  [S, Hkv, D]     the layer's pool: slot s receives the rotated k and the v of its token
 *
 * Every value is the one PyTorch computes, to the bit: out[d] = x[d]·cos[d] + x[(d + D/2) mod D]·sin[d]
 * with each product and the sum rounded on its own (torch runs mul, roll, mul, add as separate kernels),
 * so this file is compiled without contracting a·b + c into a fused multiply-add. In bf16 the heads,
 * q and the pools are bf16 and the tables are rounded to bf16 first (``Rotary.forward`` casts them), and
 * each product and the sum is rounded to bf16, as PyTorch's bf16 kernels round each result. */
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "simd.h"

#if defined(__clang__)
#define NO_CONTRACT
#else
#define NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#endif

static inline NO_CONTRACT void rotate(const float *x, const float *c, const float *s, float *out, int64_t D) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    const int64_t half = D / 2;
    for (int64_t d = 0; d < half; d++) {
        const float a = x[d] * c[d], b = x[d + half] * s[d];
        out[d] = a + b;
    }
    for (int64_t d = half; d < D; d++) {
        const float a = x[d] * c[d], b = x[d - half] * s[d];
        out[d] = a + b;
    }
}

static inline NO_CONTRACT bf16 mul_bf(bf16 a, float table) { return narrow(widen(a) * widen(narrow(table))); }

static inline NO_CONTRACT void rotate_bf(const bf16 *x, const float *c, const float *s, bf16 *out, int64_t D) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    const int64_t half = D / 2;
    for (int64_t d = 0; d < D; d++) {
        const bf16 a = mul_bf(x[d], c[d]), b = mul_bf(x[d < half ? d + half : d - half], s[d]);
        out[d] = narrow(widen(a) + widen(b));
    }
}

/* Both dtypes walk the step the same way: `bf` is a constant at each entry point. */
static inline __attribute__((always_inline)) NO_CONTRACT void rope_write_kv(
    const void *heads, const float *cos, const float *sin, const int64_t *positions, const int64_t *slots, void *q,
    void *k_pool, void *v_pool, int64_t T, int64_t H, int64_t Hkv, int64_t D, const int bf) {
    const int64_t size = bf ? (int64_t)sizeof(bf16) : (int64_t)sizeof(float), width = (H + 2 * Hkv) * D;
    for (int64_t t = 0; t < T; t++) {
        const char *row = (const char *)heads + t * width * size;
        const float *c = cos + positions[t] * D, *s = sin + positions[t] * D;
        char *k = (char *)k_pool + slots[t] * Hkv * D * size;
        for (int64_t h = 0; h < H + Hkv; h++) {     /* the q heads, then the k heads */
            void *out = h < H ? (char *)q + (t * H + h) * D * size : k + (h - H) * D * size;
            if (bf)
                rotate_bf((const bf16 *)(row + h * D * size), c, s, out, D);
            else
                rotate((const float *)(row + h * D * size), c, s, out, D);
        }
        memcpy((char *)v_pool + slots[t] * Hkv * D * size, row + (H + Hkv) * D * size, (size_t)(Hkv * D * size));
    }
}

NO_CONTRACT void labkit_rope_write_kv_bf16(const bf16 *heads, const float *cos, const float *sin, const int64_t *positions,
                               const int64_t *slots, bf16 *q, bf16 *k_pool, bf16 *v_pool, int64_t T, int64_t H,
                               int64_t Hkv, int64_t D) {
    rope_write_kv(heads, cos, sin, positions, slots, q, k_pool, v_pool, T, H, Hkv, D, 1);
}

NO_CONTRACT void labkit_rope_write_kv_f32(const float *heads, const float *cos, const float *sin, const int64_t *positions,
                              const int64_t *slots, float *q, float *k_pool, float *v_pool, int64_t T, int64_t H,
                              int64_t Hkv, int64_t D) {
    rope_write_kv(heads, cos, sin, positions, slots, q, k_pool, v_pool, T, H, Hkv, D, 0);
}
