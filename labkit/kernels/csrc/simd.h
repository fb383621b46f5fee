/* Vectors for labkit's C kernels (linear_rows.c, decode_attention.c): one type, one fixed reduction tree.
 *
 * With AVX-512: 16-lane __m512 and intrinsics. Elsewhere: the compiler's own 8-lane vectors. Each
 * kernel compiles for one of the two on a given machine, so its summation order is fixed there.
 */
#ifndef LABKIT_SIMD_H
#define LABKIT_SIMD_H

#include <stdint.h>
#include <string.h>

typedef uint16_t bf16;

/* bf16 -> fp32 is exact: the bf16 bits are the top half of the fp32 bits. */
static inline float widen(bf16 v) {
    const uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* a·b + c, rounded once where the CPU has a fused multiply-add (FMA3 on x86, every aarch64), else
 * rounded after each operation. The build compiles with -ffp-contract=off, so every fusion in these
 * kernels is written out (this, FMA below) and none is left to the compiler: with contraction on, GCC's
 * tuning for AMD Zen keeps multiply-add chains in loops unfused (a shorter latency) while it fuses others,
 * and an output's bits then depended on which tile computed it (seen on a Zen 3 EPYC with -march=native). */
#if defined(__FMA__) || defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
#define FUSED_MULTIPLY_ADD 1
#else
#define FUSED_MULTIPLY_ADD 0
#endif

static inline float fmadd(float a, float b, float c) {
#if FUSED_MULTIPLY_ADD
    return __builtin_fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

static inline bf16 narrow(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)          /* NaN stays NaN (quiet) */
        return (bf16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16)(u >> 16);
}



#if defined(__AVX512F__)
#include <immintrin.h>
#define LANES 16
#define MAX_R 4             /* 16 accumulators + 4 weight vectors + 1 input vector of 32 registers */
typedef __m512 vec;
#define ZERO() _mm512_setzero_ps()
#define LOAD(p) _mm512_loadu_ps(p)
#define SPLAT(x) _mm512_set1_ps(x)
#define FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
/* Pin a loaded vector to a register: without it GCC folds the load into every FMA that uses it, and a
 * 4 x 4 tile makes 20 loads for 16 FMAs instead of 8 (16 rows took 43 ms a sweep instead of 30). */
#define IN_REGISTER(v) __asm__("" : "+v"(v))

static inline float reduce(vec a) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const float s2a = s4[0] + s4[2], s2b = s4[1] + s4[3];
    return s2a + s2b;
}

/* reduce() of four accumulators at once, lane for lane the same additions (a + b == b + a in IEEE). */
static inline void reduce4(vec a0, vec a1, vec a2, vec a3, float out[4]) {
    const __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
    const __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
    const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xDD));
    const __m512 v = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E));       /* lane 0: s4[0] + s4[2], 1: s4[1] + s4[3] */
    const __m512 r = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));       /* lane 0: s2a + s2b */
    const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(first, r)));
}

/* LANES bf16 values, widened to fp32. */
static inline vec load_widen(const bf16 *p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

/* LANES int8 values as fp32 (exact). */
static inline vec load_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
#define MUL(a, b) _mm512_mul_ps((a), (b))
#else
/* Any other CPU: the compiler's own 8-lane vectors (one AVX register, two NEON ones, ...). Two input
 * rows a tile: 8 accumulators + 4 weight vectors fit in 16 AVX2 registers (a 4-row tile spilled, and
 * 16 rows took 8x as long). */
#define LANES 8
#define MAX_R 2
typedef float vec __attribute__((vector_size(LANES * sizeof(float))));
typedef float half4 __attribute__((vector_size(4 * sizeof(float))));
#define ZERO() ((vec){0})
#define SPLAT(x) ((vec){0} + (x))
#define IN_REGISTER(v) ((void)0)
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

/* a · b + c lane by lane, fused where the CPU fuses (`fmadd`). */
static inline vec FMA(vec a, vec b, vec c) {
#if defined(__AVX2__) && defined(__FMA__)
    return (vec)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#elif FUSED_MULTIPLY_ADD
    vec r;
    for (int l = 0; l < LANES; l++)
        r[l] = __builtin_fmaf(a[l], b[l], c[l]);
    return r;
#else
    return a * b + c;
#endif
}

static inline vec LOAD(const float *p) {
    vec v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The 8-lane tree: lanes l and l + 4 added, then l and l + 2, then l and l + 1. */
static inline float reduce(vec a) {
    half4 lo4, hi4;
    memcpy(&lo4, &a, sizeof lo4);
    memcpy(&hi4, (const char *)&a + sizeof lo4, sizeof hi4);
    const half4 s4 = lo4 + hi4;
    const float s2a = s4[0] + s4[2], s2b = s4[1] + s4[3];
    return s2a + s2b;
}

static inline void reduce4(vec a0, vec a1, vec a2, vec a3, float out[4]) {
    out[0] = reduce(a0), out[1] = reduce(a1), out[2] = reduce(a2), out[3] = reduce(a3);
}

#if defined(__AVX2__)
#include <immintrin.h>

/* LANES bf16 values widened to fp32: zero-extended to 32 bits and shifted into the top half. */
static inline vec load_widen(const bf16 *p) {
    const __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    vec v;
    memcpy(&v, &f, sizeof v);
    return v;
}

/* LANES int8 values as fp32 (exact): the compiler's generic conversion below took 18 ms for the q4_1 LM
 * head where this takes about 2. */
static inline vec load_i8(const int8_t *p) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
    vec v;
    memcpy(&v, &f, sizeof v);
    return v;
}
#else
typedef uint16_t u16vec __attribute__((vector_size(LANES * sizeof(uint16_t))));
typedef uint32_t u32vec __attribute__((vector_size(LANES * sizeof(uint32_t))));

/* LANES bf16 values widened to fp32, in the compiler's own vectors (SSE2, NEON, ...). */
static inline vec load_widen(const bf16 *p) {
    u16vec h;
    memcpy(&h, p, sizeof h);
    const u32vec u = __builtin_convertvector(h, u32vec) << 16;
    vec v;
    memcpy(&v, &u, sizeof v);
    return v;
}

typedef int8_t i8vec __attribute__((vector_size(LANES)));

static inline vec load_i8(const int8_t *p) {
    i8vec v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, vec);
}
#endif
#define MUL(a, b) ((a) * (b))
#endif

#endif
