/* y = x · wᵀ for a few bf16 rows x [T, K] and a 4-bit weight w [N, K] in PyTorch's packed CPU layout,
 * with the bits of PyTorch's `_weight_int4pack_mm_for_cpu` on AVX-512 CPUs: the q4_1 model's layer
 * products, so that a q4_1 decode layer can run as one C call (decode_layer.c) instead of four PyTorch
 * calls and eight dtype conversions between the C ops.
 *
 * The layout (what `_convert_weight_to_int4pack_for_cpu` writes where PyTorch's CPU capability is AVX512):
 * output rows in blocks of 64; block b holds, for each k, 32 bytes: byte d (d < 16) has row 64b + d in its
 * low nibble and row 64b + 32 + d in its high one, byte 16 + d rows 64b + 16 + d and 64b + 48 + d.
 * scales_zeros [K / G, N, 2] bf16: the scale and zero point of each group of G along k.
 *
 * The arithmetic, per output (t, n), k in order from 0 to K - 1, g = k / G (all fp32, each step one
 * rounding, i.e. fused multiply-adds):
 *
 *   w = fma(code - 8, scale[g][n], zero[g][n])       code in 0..15, so code - 8 in -8..7 (exact)
 *   c = fma(x[t][k], w, c)                            c starts at 0
 *   y[t][n] = c rounded to bf16 (to nearest, ties to even)
 *
 * One sequential sum per output whatever T is, so a row gets the same bits alone or among others.
 * Python checks this kernel against PyTorch's on this machine before it uses it (`SmallOps`): PyTorch's
 * AVX2 form rounds a shifted zero point first and packs in blocks of 32, so there it is not offered.
 */
#include "simd.h"

#include <stdlib.h>

#if defined(__AVX512F__)
#define PREFETCH_K 64       /* codes asked for this many k ahead (2 KiB) */

/* The 16 scales and 16 zero points of one group for rows 16j..16j+15 of a block (j = 0..3): 32 bf16
 * (scale, zero) pairs, widened and split. */
static inline void scales_zeros_of(const bf16 *sz, __m512 *scale, __m512 *zero) {
    const __m512i pairs = _mm512_loadu_si512((const void *)sz);                     /* s0 z0 s1 z1 ... s15 z15 */
    const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(pairs)), 16));
    const __m512 hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(pairs, 1)), 16));
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    *scale = _mm512_permutex2var_ps(lo, even, hi);
    *zero = _mm512_permutex2var_ps(lo, odd, hi);
}

/* R rows of x (widened to fp32, from row t) against output block b (64 rows of w). */
static inline __attribute__((always_inline)) void int4_block(const float *x, const uint8_t *packed, const bf16 *sz,
                                                             bf16 *y, int64_t t, int64_t b, int64_t N, int64_t K,
                                                             int64_t G, const int R) {
    const __m512 lut = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const uint8_t *codes = packed + b * K * 32;
    __m512 acc[4][4], scale[4] = {0}, zero[4] = {0};     /* set at k = 0, a group start */
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        if (k % G == 0)
            for (int j = 0; j < 4; j++)
                scales_zeros_of(sz + ((k / G) * N + b * 64 + 16 * j) * 2, &scale[j], &zero[j]);
        const __m256i bytes = _mm256_loadu_si256((const __m256i *)(codes + k * 32));
        if ((k & 1) == 0)
            _mm_prefetch((const char *)(codes + (k + PREFETCH_K) * 32), _MM_HINT_T0);
        const __m512i first = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(bytes));      /* rows 0-15 | 32-47 */
        const __m512i second = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(bytes, 1)); /* rows 16-31 | 48-63 */
        __m512 w[4];     /* a permute reads only the low 4 bits of each index: the low nibble as it is */
        w[0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(first, lut), scale[0], zero[0]);
        w[1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(second, lut), scale[1], zero[1]);
        w[2] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(first, 4), lut), scale[2], zero[2]);
        w[3] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(second, 4), lut), scale[3], zero[3]);
        for (int i = 0; i < R; i++) {
            const __m512 a = _mm512_set1_ps(x[(t + i) * K + k]);
            for (int j = 0; j < 4; j++)
                acc[i][j] = _mm512_fmadd_ps(a, w[j], acc[i][j]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++) {
            float f[16];
            _mm512_storeu_ps(f, acc[i][j]);
            bf16 *out = y + (t + i) * N + b * 64 + 16 * j;
            for (int l = 0; l < 16; l++)
                out[l] = narrow(f[l]);
        }
}
#endif

/* x [T, K] bf16, packed [N / 64, K, 32], scales_zeros [K / G, N, 2] bf16, y [T, N] bf16; N a multiple
 * of 64, K of G. Returns 0; 1 where scratch memory could not be had, 2 where this build has no AVX-512
 * (Python never asks then). */
int labkit_int4_rows(const bf16 *x, const uint8_t *packed, const bf16 *scales_zeros, bf16 *y, int64_t T, int64_t N,
                     int64_t K, int64_t G) {
#if defined(__AVX512F__)
    float *xf = malloc((size_t)(T * K) * sizeof(float));      /* x widened once, not once per block */
    if (!xf)
        return 1;
    for (int64_t i = 0; i < T * K; i++)
        xf[i] = widen(x[i]);
    for (int64_t b = 0; b < N / 64; b++) {
        int64_t t = 0;
        for (; t + 4 <= T; t += 4)
            int4_block(xf, packed, scales_zeros, y, t, b, N, K, G, 4);
        for (; t + 2 <= T; t += 2)
            int4_block(xf, packed, scales_zeros, y, t, b, N, K, G, 2);
        if (t < T)
            int4_block(xf, packed, scales_zeros, y, t, b, N, K, G, 1);
    }
    free(xf);
    return 0;
#else
    (void)x, (void)packed, (void)scales_zeros, (void)y, (void)T, (void)N, (void)K, (void)G;
    return 2;
#endif
}
