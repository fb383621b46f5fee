/* y = x · wᵀ for a few fp32 rows: labkit's own CPU product for decode steps (on the threads Python asks
 * for: threads.c).
 *
 *   x [T, K] (T = 1..16 rows: a decode batch, or the k + 1 rows of a verification)
 *   w [N, K] (a weight as the model stores it, row-major)      y [T, N]
 *
 * Why it exists: a decode step is memory-bound. It reads every weight once per step, so a step costs
 * about what one sweep through the weights costs, and the BLAS kernels PyTorch calls for a few rows
 * read them well below the memory's rate on some CPUs (on a 2-core AMD EPYC, MKL's one-row kernel
 * swept the model's 538 MB at about half the rate this loop reaches).
 *
 * One summation order for every row, whatever T is. Output y[t][n] is always computed the same way,
 * with L = LANES (16 with AVX-512, 8 otherwise) and KL = K - K % L:
 *
 *   acc[l] = fma(x[t][k], w[n][k], acc[l])   for k = l, l + L, l + 2L, ... < KL     (L lanes l)
 *   s      = the lanes added as a fixed tree (l and l + L/2, then l and l + L/4, ..., then l and l + 1)
 *   s      = fma(x[t][k], w[n][k], s)         for k = KL .. K - 1                   (the tail, in order)
 *
 * bf16 runs the same tiles and the same tree, the sum rounded to bf16 (to nearest, ties to even) as
 * PyTorch rounds a bf16 product's fp32 sum, in one of two ways fixed by the build's instruction set:
 *
 *   BF16_DOT  (CPUs with AVX512_BF16) 32 elements a step through the CPU's bf16 dot product (vdpbf16ps:
 *             fp32 lane l adds x[2l]·w[2l] + x[2l+1]·w[2l+1]), the tail in fp32;
 *   BF16_WIDE (every other CPU) the input rows widened to fp32 once per call, each weight vector widened
 *             in registers (its 16 bits shifted into the top of an fp32: exact), then exactly the fp32
 *             order above. So a row's bf16 output is the fp32 kernel's output for the widened operands,
 *             rounded to bf16, bit for bit; and the product reads half the weight bytes fp32 reads.
 *
 * One code path serves all three: `bf` is a constant at every call, so each entry point compiles to its
 * own loop.
 *
 * The tiles below only decide how many accumulators are live at once (4 weight rows x 4, 2 or 1 input
 * rows); they never change an output's order. So a row gets the same bits alone or in a batch of 16
 * (row invariance), which speculative decoding relies on: its k + 1 verification rows must give what
 * k + 1 one-row decode steps would. Every fused multiply-add is written out (`mac`, `fmadd`: simd.h),
 * never left to the compiler's contraction, so every tile fuses the same operations. The order differs
 * from MKL's (and from one CPU to another, as MKL's does): labkit's greedy parity with transformers is
 * token-level in fp32.
 */
#include "kernels.h"
#include "simd.h"
#include "threads.h"

#include <stdlib.h>

#if defined(__AVX512BF16__)
#define HAS_BF16 1
#else
#define HAS_BF16 0
#endif

/* What `bf` says about the operands: fp32 x, w and y; bf16 x, w and y through the bf16 dot product; or
 * fp32 x (the bf16 input widened once per call), bf16 w widened in registers, bf16 y. */
enum { F32 = 0, BF16_DOT = 1, BF16_WIDE = 2 };

/* Elements a vector step covers: LANES fp32, or for the dot product twice as many bf16 in 64 bytes. */
static inline int64_t step_of(const int bf) { return bf == BF16_DOT ? 2 * LANES : LANES; }

/* Element i of an input (x) or weight (w) array, as a pointer, a vector, or one fp32 value. */
static inline const void *at_x(const void *base, int64_t i, const int bf) {
    return (const char *)base + i * (bf == BF16_DOT ? (int64_t)sizeof(bf16) : (int64_t)sizeof(float));
}

static inline const void *at_w(const void *base, int64_t i, const int bf) {
    return (const char *)base + i * (bf != F32 ? (int64_t)sizeof(bf16) : (int64_t)sizeof(float));
}

static inline vec load_x(const void *base, int64_t i, const int bf) { return LOAD((const float *)at_x(base, i, bf)); }

/* A weight vector: raw bits for the dot product, widened bf16, or fp32. */
static inline vec load_w(const void *base, int64_t i, const int bf) {
    if (bf == BF16_WIDE)
        return load_widen((const bf16 *)at_w(base, i, bf));
    return LOAD((const float *)at_w(base, i, bf));
}

static inline float element_x(const void *base, int64_t i, const int bf) {
    return bf == BF16_DOT ? widen(((const bf16 *)base)[i]) : ((const float *)base)[i];
}

static inline float element_w(const void *base, int64_t i, const int bf) {
    return bf != F32 ? widen(((const bf16 *)base)[i]) : ((const float *)base)[i];
}

static inline void put(void *base, int64_t i, float s, const int bf) {
    if (bf != F32)
        ((bf16 *)base)[i] = narrow(s);
    else
        ((float *)base)[i] = s;
}

/* acc += x · w, lane by lane: a fused multiply-add, or for BF16_DOT the pairwise dot product. */
static inline vec mac(vec acc, vec x, vec w, const int bf) {
#if HAS_BF16
    if (bf == BF16_DOT)
        return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
#endif
    (void)bf;
    return FMA(x, w, acc);
}

static inline float tail(const void *x, const void *w, int64_t k, int64_t K, float s, const int bf) {
    for (; k < K; k++)
        s = fmadd(element_x(x, k, bf), element_w(w, k, bf), s);
    return s;
}

/* R input rows (from row t) x 4 weight rows (from row n). With ``prefetch``, while it reads its 4 weight
 * rows the tile asks for the next tile's (4 rows further on): with several input rows a tile computes
 * long enough per byte that the hardware prefetcher alone fell behind (8 rows: 45 ms a sweep without,
 * 24 with). A lone row (T = 1) streams faster without: AMD EPYC, huge pages, 13.3 ms a sweep against 15.3,
 * i.e. 40 GB/s, this core's read rate. (The flag is a run-time value on purpose: a separate T = 1 loop
 * with the flag as a constant compiled into a slower loop, 14.7 ms.) */
static inline __attribute__((always_inline)) void tile(const void *x, const void *w, void *y, int64_t t,
                                                       int64_t n, int64_t N, int64_t K, const int R,
                                                       const int prefetch, const int bf) {
    const int64_t S = step_of(bf), KS = K - K % S;
    const void *w0 = at_w(w, n * K, bf), *w1 = at_w(w, (n + 1) * K, bf), *w2 = at_w(w, (n + 2) * K, bf),
               *w3 = at_w(w, (n + 3) * K, bf);
    vec acc[MAX_R][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = ZERO();
    for (int64_t k = 0; k < KS; k += S) {
        vec a = load_w(w0, k, bf), b = load_w(w1, k, bf), c = load_w(w2, k, bf), d = load_w(w3, k, bf);
        if (R > 1) {
            IN_REGISTER(a);
            IN_REGISTER(b);
            IN_REGISTER(c);
            IN_REGISTER(d);
        }
        if (prefetch) {
            __builtin_prefetch(at_w(w0, 4 * K + k, bf)), __builtin_prefetch(at_w(w1, 4 * K + k, bf));
            __builtin_prefetch(at_w(w2, 4 * K + k, bf)), __builtin_prefetch(at_w(w3, 4 * K + k, bf));
        }
        for (int i = 0; i < R; i++) {
            vec v = load_x(x, (t + i) * K + k, bf);
            if (R > 1)
                IN_REGISTER(v);
            acc[i][0] = mac(acc[i][0], v, a, bf);
            acc[i][1] = mac(acc[i][1], v, b, bf);
            acc[i][2] = mac(acc[i][2], v, c, bf);
            acc[i][3] = mac(acc[i][3], v, d, bf);
        }
    }
    for (int i = 0; i < R; i++) {
        const void *xr = at_x(x, (t + i) * K, bf);
        float s[4];
        reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3], s);
        put(y, (t + i) * N + n, tail(xr, w0, KS, K, s[0], bf), bf);
        put(y, (t + i) * N + n + 1, tail(xr, w1, KS, K, s[1], bf), bf);
        put(y, (t + i) * N + n + 2, tail(xr, w2, KS, K, s[2], bf), bf);
        put(y, (t + i) * N + n + 3, tail(xr, w3, KS, K, s[3], bf), bf);
    }
}

/* One weight row for every input row (the last N % 4 rows of w). */
static inline __attribute__((always_inline)) void single(const void *x, const void *w, void *y, int64_t T,
                                                         int64_t n, int64_t N, int64_t K, const int bf) {
    const int64_t S = step_of(bf), KS = K - K % S;
    const void *wn = at_w(w, n * K, bf);
    for (int64_t t = 0; t < T; t++) {
        const void *xr = at_x(x, t * K, bf);
        vec acc = ZERO();
        for (int64_t k = 0; k < KS; k += S)
            acc = mac(acc, load_x(xr, k, bf), load_w(wn, k, bf), bf);
        put(y, t * N + n, tail(xr, wn, KS, K, reduce(acc), bf), bf);
    }
}

/* Two weight rows n and m for R input rows (from row t), in one loop: the sequential walk's tile. Each
 * output is one sum in the order above; the two rows only give the CPU two independent chains of
 * multiply-adds and two streams to read. n == m computes one row (twice, into the same output). */
static inline __attribute__((always_inline)) void row_pair(const void *x, const void *w, void *y, int64_t t,
                                                           int64_t n, int64_t m, int64_t N, int64_t K,
                                                           const int R, const int bf) {
    const int64_t S = step_of(bf), KS = K - K % S;
    const void *wn = at_w(w, n * K, bf), *wm = at_w(w, m * K, bf);
    vec acc[MAX_R][2];
    for (int i = 0; i < R; i++)
        acc[i][0] = acc[i][1] = ZERO();
    for (int64_t k = 0; k < KS; k += S) {
        vec a = load_w(wn, k, bf), b = load_w(wm, k, bf);
        if (R > 1) {
            IN_REGISTER(a);
            IN_REGISTER(b);
        }
        for (int i = 0; i < R; i++) {
            vec v = load_x(x, (t + i) * K + k, bf);
            acc[i][0] = mac(acc[i][0], v, a, bf);
            acc[i][1] = mac(acc[i][1], v, b, bf);
        }
    }
    for (int i = 0; i < R; i++) {
        const void *xr = at_x(x, (t + i) * K, bf);
        put(y, (t + i) * N + n, tail(xr, wn, KS, K, reduce(acc[i][0]), bf), bf);
        put(y, (t + i) * N + m, tail(xr, wm, KS, K, reduce(acc[i][1]), bf), bf);
    }
}

/* How the weights are walked: 4 rows at a time in tiles, or, for at most ``sequential_rows`` input rows,
 * in two sequential streams: the first half of the rows [lo, hi) one after the other, each fused with its
 * partner in the second half (``row_pair``; an odd count pairs its middle row with itself), each weight row against the input rows
 * up to MAX_R at a time. The order of every sum is the same either way (``row_pair``, ``single`` and
 * ``tile`` add in one order), so the choice changes no bit, only which way this CPU's
 * prefetchers stream faster: on an AMD EPYC (Zen 4) a one-row sweep read 13.1 GB/s in tiles and 26.2 GB/s
 * in one sequential stream; the tiles win from 8 rows, where the walk re-reads the inputs; on the Zen 5
 * measured before, the tiles already reached 93 % at one row. Two streams far apart (not two adjacent
 * rows, which read at half the rate there) gave one dependent chain of bf16 dot products a partner: on
 * the Zen 4, a one-row bf16 sweep went from 17 to 21 GB/s on one thread and from 33 to 41 GB/s on two,
 * fp32 from 23 to 25 and from 44 to 48 (a stand-alone loop). Python times the walks once per machine and
 * sets the crossover (`native.set_sequential_rows`). */
static int64_t sequential_rows = 0;

void labkit_linear_rows_set_sequential(int64_t max_rows) { sequential_rows = max_rows; }

/* Outputs n in [lo, hi) of every row: the whole product is lo = 0, hi = N. */
static inline __attribute__((always_inline)) void linear_rows(const void *x, const void *w, void *y, int64_t T,
                                                              int64_t lo, int64_t hi, int64_t N, int64_t K,
                                                              const int bf) {
    int64_t n = lo;
    if (T <= sequential_rows) {
        const int64_t half = (hi - lo + 1) / 2;
        for (; n < lo + half; n++) {
            const int64_t m = n + half < hi ? n + half : n;
            int64_t t = 0;
#if MAX_R == 4
            for (; t + 4 <= T; t += 4)
                row_pair(x, w, y, t, n, m, N, K, 4, bf);
#endif
            for (; t + 2 <= T; t += 2)
                row_pair(x, w, y, t, n, m, N, K, 2, bf);
            if (t < T)
                row_pair(x, w, y, t, n, m, N, K, 1, bf);
        }
        return;
    }
    for (; n + 4 <= hi; n += 4) {
        int64_t t = 0;
#if MAX_R == 4
        for (; t + 4 <= T; t += 4)
            tile(x, w, y, t, n, N, K, 4, 1, bf);
#endif
        for (; t + 2 <= T; t += 2)
            tile(x, w, y, t, n, N, K, 2, 1, bf);
        if (t < T)
            tile(x, w, y, t, n, N, K, 1, T > 1, bf);
    }
    for (; n < hi; n++)
        single(x, w, y, T, n, N, K, bf);
}

/* Threads split the weight's rows (the outputs n) into contiguous parts of whole 4-row tiles (threads.h):
 * each output is still one tile's sum in the one order above, so the thread count changes no bit. */
struct rows_job {
    const void *x, *w;
    void *y;
    int64_t T, N, K;
};

static void rows_part_f32(void *c, int64_t lo, int64_t hi) {
    const struct rows_job *j = c;
    linear_rows(j->x, j->w, j->y, j->T, lo, hi, j->N, j->K, 0);
}

/* The entry points (called through ctypes, which releases the GIL for the call). */
void labkit_linear_rows_f32(const float *x, const float *w, float *y, int64_t T, int64_t N, int64_t K) {
    struct rows_job j = {x, w, y, T, N, K};
    parallel_parts(rows_part_f32, &j, N, 4, T * K);
}

#if HAS_BF16
static void rows_part_bf16(void *c, int64_t lo, int64_t hi) {
    const struct rows_job *j = c;
    linear_rows(j->x, j->w, j->y, j->T, lo, hi, j->N, j->K, BF16_DOT);
}
#else
static void rows_part_bf16(void *c, int64_t lo, int64_t hi) {
    const struct rows_job *j = c;
    linear_rows(j->x, j->w, j->y, j->T, lo, hi, j->N, j->K, BF16_WIDE);
}
#endif

/* Returns 0, or 1 when the widened input's scratch memory could not be had (nothing written then). */
int labkit_linear_rows_bf16(const bf16 *x, const bf16 *w, bf16 *y, int64_t T, int64_t N, int64_t K) {
#if HAS_BF16
    struct rows_job j = {x, w, y, T, N, K};
    parallel_parts(rows_part_bf16, &j, N, 4, T * K);
    return 0;
#else
    float *xf = malloc((size_t)(T * K > 0 ? T * K : 1) * sizeof(float));
    if (!xf)
        return 1;
    for (int64_t i = 0; i < T * K; i++)
        xf[i] = widen(x[i]);
    struct rows_job j = {xf, w, y, T, N, K};
    parallel_parts(rows_part_bf16, &j, N, 4, T * K);
    free(xf);
    return 0;
#endif
}

/* Which bf16 product this build has: BF16_DOT (1, AVX512_BF16) or BF16_WIDE (2, every other CPU). */
int labkit_linear_rows_has_bf16(void) { return HAS_BF16 ? BF16_DOT : BF16_WIDE; }

/* The instruction-set level the build targets (the loader's LABKIT_ISA names): 0 the generic vectors
 * (no AVX2), 1 AVX2 with FMA, 2 AVX-512 (F), 3 AVX-512 with AVX512_BF16. */
int labkit_isa_level(void) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    return 3;
#elif defined(__AVX512F__)
    return 2;
#elif defined(__AVX2__) && defined(__FMA__)
    return 1;
#else
    return 0;
#endif
}

/* A version number the loader checks, so that a stale build in the cache is never used. */
int labkit_linear_rows_version(void) { return 9; }
