/* y = x · wᵀ for a few bf16 rows x [T, K] and a 4-bit weight w [N, K] in PyTorch's packed CPU layout,
 * with the bits of PyTorch's `_weight_int4pack_mm_for_cpu`: the q4_1 model's layer products, so that a
 * q4_1 decode layer can run as one C call (decode_layer.c) instead of four PyTorch calls and eight dtype
 * conversions between the C ops.
 *
 * PyTorch packs and computes in one of two forms, by its CPU capability when the weight was packed and
 * multiplied; `block` says which (Python passes the one for torch's capability):
 *
 * block 64 (AVX512): output rows in blocks of 64; block b holds, for each k, 32 bytes: byte d (d < 16)
 *   has row 64b + d in its low nibble and row 64b + 32 + d in its high one, byte 16 + d rows 64b + 16 + d
 *   and 64b + 48 + d. Per output (t, n), k in order from 0 to K - 1, g = k / G:
 *
 *     w = fma(code - 8, scale[g][n], zero[g][n])     code in 0..15, so code - 8 in -8..7 (exact)
 *     c = fma(x[t][k], w, c)                          c starts at 0
 *
 * block 32 (AVX2): blocks of 32 rows, 16 bytes a k: byte d has row 32b + d (low nibble) and 32b + 16 + d
 *   (high). The zero point is shifted first, one rounding of its own:
 *
 *     z = fma(scale[g][n], -8, zero[g][n]);  w = fma(code, scale[g][n], z);  c = fma(x[t][k], w, c)
 *
 * Both: scales_zeros [K / G, N, 2] bf16 (the scale and zero point of each group of G along k), widened
 * exactly; y[t][n] = c rounded to bf16 (to nearest, ties to even). One sequential sum per output whatever
 * T is, so a row gets the same bits alone or among others. Python checks this kernel against PyTorch's on
 * the machine before it uses it (`ops.native_ops._native_int4_exact`).
 */
#include "kernels.h"
#include "simd.h"
#include "threads.h"

#include <stdlib.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>      /* simd.h includes it only with AVX-512 */
#endif

/* n finished sums from output index `at` on: rounded to bf16 into yb, or (yb null) rounded and widened
 * back into yf, as `Int4Linear` returns the kernel's bf16 product on an fp32 stream. */
static inline void store(const float *f, int n, bf16 *yb, float *yf, int64_t at) {
    for (int l = 0; l < n; l++) {
        if (yb)
            yb[at + l] = narrow(f[l]);
        else
            yf[at + l] = widen(narrow(f[l]));
    }
}

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
                                                             bf16 *yb, float *yf, int64_t t, int64_t b, int64_t N,
                                                             int64_t K, int64_t G, const int R) {
    const __m512 lut = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const uint8_t *codes = packed + b * K * 32;
    __m512 acc[4][4], scale[4], zero[4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < K; k0 += G) {     /* a group at a time: no division per k */
        for (int j = 0; j < 4; j++)
            scales_zeros_of(sz + ((k0 / G) * N + b * 64 + 16 * j) * 2, &scale[j], &zero[j]);
        for (int64_t k = k0; k < k0 + G; k++) {
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
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++) {
            float f[16];
            _mm512_storeu_ps(f, acc[i][j]);
            store(f, 16, yb, yf, (t + i) * N + b * 64 + 16 * j);
        }
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
#define PREFETCH_K32 128    /* codes asked for this many k ahead (2 KiB), once a cache line (every 4 k) */

/* The 8 scales and 8 shifted zero points of one group for rows 8j..8j+7 of a 32-row block. */
static inline void scales_zeros_of8(const bf16 *sz, __m256 *scale, __m256 *zero) {
    const __m256i pairs = _mm256_loadu_si256((const __m256i *)sz);                  /* s0 z0 s1 z1 ... s7 z7 */
    const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(pairs)), 16));
    const __m256 hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(pairs, 1)), 16));
    const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    const __m256 a = _mm256_permutevar8x32_ps(lo, split), b = _mm256_permutevar8x32_ps(hi, split);
    *scale = _mm256_permute2f128_ps(a, b, 0x20);                                     /* s0..s3 | s4..s7 */
    *zero = _mm256_fmadd_ps(*scale, _mm256_set1_ps(-8.0f), _mm256_permute2f128_ps(a, b, 0x31));
}

/* R rows of x (widened to fp32, from row t) against 32-row block b, in PyTorch's AVX2 form. */
static inline __attribute__((always_inline)) void int4_block32(const float *x, const uint8_t *packed,
                                                               const bf16 *sz, bf16 *yb, float *yf, int64_t t,
                                                               int64_t b, int64_t N, int64_t K, int64_t G,
                                                               const int R) {
    const __m256i low = _mm256_set1_epi32(15);
    const uint8_t *codes = packed + b * K * 16;
    __m256 acc[4][4], scale[4], zero[4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int64_t k0 = 0; k0 < K; k0 += G) {     /* a group at a time: no division per k */
        for (int j = 0; j < 4; j++)
            scales_zeros_of8(sz + ((k0 / G) * N + b * 32 + 8 * j) * 2, &scale[j], &zero[j]);
        for (int64_t k = k0; k < k0 + G; k++) {
            const __m128i bytes = _mm_loadu_si128((const __m128i *)(codes + k * 16));
            if ((k & 3) == 0)
                _mm_prefetch((const char *)(codes + (k + PREFETCH_K32) * 16), _MM_HINT_T0);
            const __m256i first = _mm256_cvtepu8_epi32(bytes);                              /* rows 0-7 | 16-23 */
            const __m256i second = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(bytes, bytes));  /* rows 8-15 | 24-31 */
            __m256 w[4];
            w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(first, low)), scale[0], zero[0]);
            w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(second, low)), scale[1], zero[1]);
            w[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(first, 4)), scale[2], zero[2]);
            w[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(second, 4)), scale[3], zero[3]);
            for (int i = 0; i < R; i++) {
                const __m256 a = _mm256_set1_ps(x[(t + i) * K + k]);
                for (int j = 0; j < 4; j++)
                    acc[i][j] = _mm256_fmadd_ps(a, w[j], acc[i][j]);
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++) {
            float f[8];
            _mm256_storeu_ps(f, acc[i][j]);
            store(f, 8, yb, yf, (t + i) * N + b * 32 + 8 * j);
        }
}
#endif

/* Blocks [lo, hi) of the product of the rows xf (bf16 values, widened) into yb or yf (`store`). */
static void int4_blocks(const float *xf, const uint8_t *packed, const bf16 *scales_zeros, bf16 *yb, float *yf,
                        int64_t T, int64_t lo, int64_t hi, int64_t N, int64_t K, int64_t G, int64_t block) {
    for (int64_t b = lo; b < hi; b++) {
#if defined(__AVX512F__)
        if (block == 64) {
            int64_t t = 0;
            for (; t + 4 <= T; t += 4)
                int4_block(xf, packed, scales_zeros, yb, yf, t, b, N, K, G, 4);
            for (; t + 2 <= T; t += 2)
                int4_block(xf, packed, scales_zeros, yb, yf, t, b, N, K, G, 2);
            if (t < T)
                int4_block(xf, packed, scales_zeros, yb, yf, t, b, N, K, G, 1);
            continue;
        }
#endif
#if defined(__AVX2__) && defined(__FMA__)
        int64_t t = 0;
        for (; t + 4 <= T; t += 4)
            int4_block32(xf, packed, scales_zeros, yb, yf, t, b, N, K, G, 4);
        for (; t + 2 <= T; t += 2)
            int4_block32(xf, packed, scales_zeros, yb, yf, t, b, N, K, G, 2);
        if (t < T)
            int4_block32(xf, packed, scales_zeros, yb, yf, t, b, N, K, G, 1);
#endif
    }
}

struct int4_job {
    const float *xf;
    const uint8_t *packed;
    const bf16 *scales_zeros;
    bf16 *yb;
    float *yf;
    int64_t T, N, K, G, block;
};

static void int4_part(void *c, int64_t lo, int64_t hi) {
    const struct int4_job *j = c;
    int4_blocks(j->xf, j->packed, j->scales_zeros, j->yb, j->yf, j->T, lo, hi, j->N, j->K, j->G, j->block);
}

/* The product of the rows xf into yb or yf; frees xf. Threads split the column blocks (each `block`
 * outputs wide) into contiguous parts (threads.h): each output is still one sum in k order, so the thread
 * count changes no bit. */
static int int4_rows(float *xf, const uint8_t *packed, const bf16 *scales_zeros, bf16 *yb, float *yf, int64_t T,
                     int64_t N, int64_t K, int64_t G, int64_t block) {
    struct int4_job j = {xf, packed, scales_zeros, yb, yf, T, N, K, G, block};
    parallel_parts(int4_part, &j, N / block, 1, T * K * block);
    free(xf);
    return 0;
}

/* Scratch for the widened rows, or NULL with *failed set: 2 where this build lacks the form for `block`
 * (Python never asks then), 1 where there is no memory. */
static float *rows_scratch(int64_t T, int64_t K, int64_t block, int *failed) {
    int built = 0;
#if defined(__AVX512F__)
    built |= block == 64;
#endif
#if defined(__AVX2__) && defined(__FMA__)
    built |= block == 32;
#endif
    float *xf = built ? malloc((size_t)(T * K) * sizeof(float)) : NULL;
    *failed = !built ? 2 : !xf;
    return xf;
}

/* x [T, K] bf16, packed [N / block, K, block / 2], scales_zeros [K / G, N, 2] bf16, y [T, N] bf16; N a
 * multiple of block (64 or 32: PyTorch's AVX512 or AVX2 form), K of G. Returns 0; 1 where scratch memory
 * could not be had; 2 where this build lacks the form. */
int labkit_int4_rows(const bf16 *x, const uint8_t *packed, const bf16 *scales_zeros, bf16 *y, int64_t T, int64_t N,
                     int64_t K, int64_t G, int64_t block) {
    int failed;
    float *xf = rows_scratch(T, K, block, &failed);    /* x widened once, not once per block */
    if (!xf)
        return failed;
    for (int64_t i = 0; i < T * K; i++)
        xf[i] = widen(x[i]);
    return int4_rows(xf, packed, scales_zeros, y, NULL, T, N, K, G, block);
}

/* The same product on an fp32 stream, as `quant.Int4Linear` computes it there: x [T, K] fp32 rounded to
 * bf16 first, the bf16 result widened back into y [T, N] fp32 (decode_layer.c's q4_1 products). */
int labkit_int4_rows_f32(const float *x, const uint8_t *packed, const bf16 *scales_zeros, float *y, int64_t T,
                         int64_t N, int64_t K, int64_t G, int64_t block) {
    int failed;
    float *xf = rows_scratch(T, K, block, &failed);
    if (!xf)
        return failed;
    for (int64_t i = 0; i < T * K; i++)
        xf[i] = widen(narrow(x[i]));
    return int4_rows(xf, packed, scales_zeros, NULL, y, T, N, K, G, block);
}
