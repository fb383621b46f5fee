/* y = x · wᵀ for a few fp32 rows, on one thread: labkit's own CPU product for decode steps.
 *
 *   x [T, K] (T = 1..16 rows: a decode batch, or the k + 1 rows of a verification)
 *   w [N, K] (a weight as the model stores it, row-major)      y [T, N]
 *
 * Why it exists: a decode step is memory-bound. It reads every weight once per step, so a step costs
 * about what one sweep through the weights costs, and the BLAS kernels PyTorch calls for a few rows
 * read them well below the memory's rate on some CPUs (on a 2-core AMD EPYC, MKL's one-row kernel
 * swept the model's 538 MB at about half the rate this loop reaches; issue 30).
 *
 * One summation order for every row, whatever T is. Output y[t][n] is always computed the same way,
 * with L = LANES (16 with AVX-512, 8 otherwise) and KL = K - K % L:
 *
 *   acc[l] = fma(x[t][k], w[n][k], acc[l])   for k = l, l + L, l + 2L, ... < KL     (L lanes l)
 *   s      = the lanes added as a fixed tree (l and l + L/2, then l and l + L/4, ..., then l and l + 1)
 *   s      = fma(x[t][k], w[n][k], s)         for k = KL .. K - 1                   (the tail, in order)
 *
 * The tiles below only decide how many accumulators are live at once (4 weight rows x 4, 2 or 1 input
 * rows); they never change an output's order. So a row gets the same bits alone or in a batch of 16
 * (row invariance), which speculative decoding relies on: its k + 1 verification rows must give what
 * k + 1 one-row decode steps would. The build uses -ffp-contract=fast, so a*b + c is one fused
 * multiply-add wherever the CPU has one, in every tile alike. The order differs from MKL's (and from
 * one CPU to another, as MKL's does): labkit's greedy parity with transformers is token-level in fp32.
 */
#include "simd.h"

static inline float tail(const float *x, const float *w, int64_t k, int64_t K, float s) {
    for (; k < K; k++)
        s = x[k] * w[k] + s;
    return s;
}

/* R input rows (from row t) x 4 weight rows (from row n). With ``prefetch``, while it reads its 4 weight
 * rows the tile asks for the next tile's (4 rows further on): with several input rows a tile computes
 * long enough per byte that the hardware prefetcher alone fell behind (8 rows: 45 ms a sweep without,
 * 24 with). A lone row (T = 1) streams faster without: AMD EPYC, huge pages, 13.3 ms a sweep against 15.3,
 * i.e. 40 GB/s, this core's read rate. (The flag is a run-time value on purpose: a separate T = 1 loop
 * with the flag as a constant compiled into a slower loop, 14.7 ms.) */
static inline __attribute__((always_inline)) void tile(const float *x, const float *w, float *y, int64_t t,
                                                       int64_t n, int64_t N, int64_t K, const int R,
                                                       const int prefetch) {
    const int64_t K16 = K - K % LANES;
    const float *w0 = w + n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
    vec acc[MAX_R][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = ZERO();
    for (int64_t k = 0; k < K16; k += LANES) {
        vec a = LOAD(w0 + k), b = LOAD(w1 + k), c = LOAD(w2 + k), d = LOAD(w3 + k);
        if (R > 1) {
            IN_REGISTER(a);
            IN_REGISTER(b);
            IN_REGISTER(c);
            IN_REGISTER(d);
        }
        if (prefetch) {
            __builtin_prefetch(w0 + 4 * K + k), __builtin_prefetch(w1 + 4 * K + k);
            __builtin_prefetch(w2 + 4 * K + k), __builtin_prefetch(w3 + 4 * K + k);
        }
        for (int i = 0; i < R; i++) {
            vec v = LOAD(x + (t + i) * K + k);
            if (R > 1)
                IN_REGISTER(v);
            acc[i][0] = FMA(v, a, acc[i][0]);
            acc[i][1] = FMA(v, b, acc[i][1]);
            acc[i][2] = FMA(v, c, acc[i][2]);
            acc[i][3] = FMA(v, d, acc[i][3]);
        }
    }
    for (int i = 0; i < R; i++) {
        const float *xr = x + (t + i) * K;
        float *yr = y + (t + i) * N + n, s[4];
        reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3], s);
        yr[0] = tail(xr, w0, K16, K, s[0]);
        yr[1] = tail(xr, w1, K16, K, s[1]);
        yr[2] = tail(xr, w2, K16, K, s[2]);
        yr[3] = tail(xr, w3, K16, K, s[3]);
    }
}

/* One weight row for every input row (the last N % 4 rows of w). */
static void single(const float *x, const float *w, float *y, int64_t T, int64_t n, int64_t N, int64_t K) {
    const int64_t K16 = K - K % LANES;
    const float *wn = w + n * K;
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * K;
        vec acc = ZERO();
        for (int64_t k = 0; k < K16; k += LANES)
            acc = FMA(LOAD(xr + k), LOAD(wn + k), acc);
        y[t * N + n] = tail(xr, wn, K16, K, reduce(acc));
    }
}

/* The entry point (called through ctypes, which releases the GIL for the call). */
void labkit_linear_rows_f32(const float *x, const float *w, float *y, int64_t T, int64_t N, int64_t K) {
    int64_t n = 0;
    for (; n + 4 <= N; n += 4) {
        int64_t t = 0;
#if MAX_R == 4
        for (; t + 4 <= T; t += 4)
            tile(x, w, y, t, n, N, K, 4, 1);
#endif
        for (; t + 2 <= T; t += 2)
            tile(x, w, y, t, n, N, K, 2, 1);
        if (t < T)
            tile(x, w, y, t, n, N, K, 1, T > 1);
    }
    for (; n < N; n++)
        single(x, w, y, T, n, N, K);
}

/* ------------------------------------------------------------------------------------------------
 * bf16 weights and inputs, on CPUs with AVX512_BF16 only (elsewhere labkit keeps PyTorch's bf16 forms).
 * The same tiles and the same fixed tree, 32 elements a step through the CPU's bf16 dot product
 * (vdpbf16ps: fp32 lane l adds x[2l]·w[2l] + x[2l+1]·w[2l+1]); the tail in fp32; the sum rounded to
 * bf16 (to nearest, ties to even), as PyTorch rounds a bf16 product's fp32 sum. Row-invariant as the
 * fp32 product is: bf16 speculative decoding needs a row's bits to be the same at any row count.
 */
#if defined(__AVX512BF16__)
#define BF_LANES 32

static inline __m512bh load_bf16(const bf16 *p) { return (__m512bh)_mm512_loadu_si512(p); }

static inline float tail_bf16(const bf16 *x, const bf16 *w, int64_t k, int64_t K, float s) {
    for (; k < K; k++)
        s = widen(x[k]) * widen(w[k]) + s;
    return s;
}

static inline __attribute__((always_inline)) void tile_bf16(const bf16 *x, const bf16 *w, bf16 *y, int64_t t,
                                                            int64_t n, int64_t N, int64_t K, const int R,
                                                            const int prefetch) {
    const int64_t K32 = K - K % BF_LANES;
    const bf16 *w0 = w + n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
    vec acc[MAX_R][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = ZERO();
    for (int64_t k = 0; k < K32; k += BF_LANES) {
        __m512bh a = load_bf16(w0 + k), b = load_bf16(w1 + k), c = load_bf16(w2 + k), d = load_bf16(w3 + k);
        if (R > 1) {
            IN_REGISTER(a);
            IN_REGISTER(b);
            IN_REGISTER(c);
            IN_REGISTER(d);
        }
        if (prefetch) {
            __builtin_prefetch(w0 + 4 * K + k), __builtin_prefetch(w1 + 4 * K + k);
            __builtin_prefetch(w2 + 4 * K + k), __builtin_prefetch(w3 + 4 * K + k);
        }
        for (int i = 0; i < R; i++) {
            __m512bh v = load_bf16(x + (t + i) * K + k);
            if (R > 1)
                IN_REGISTER(v);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], v, a);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], v, b);
            acc[i][2] = _mm512_dpbf16_ps(acc[i][2], v, c);
            acc[i][3] = _mm512_dpbf16_ps(acc[i][3], v, d);
        }
    }
    for (int i = 0; i < R; i++) {
        const bf16 *xr = x + (t + i) * K;
        bf16 *yr = y + (t + i) * N + n;
        float s[4];
        reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3], s);
        yr[0] = narrow(tail_bf16(xr, w0, K32, K, s[0]));
        yr[1] = narrow(tail_bf16(xr, w1, K32, K, s[1]));
        yr[2] = narrow(tail_bf16(xr, w2, K32, K, s[2]));
        yr[3] = narrow(tail_bf16(xr, w3, K32, K, s[3]));
    }
}

static void single_bf16(const bf16 *x, const bf16 *w, bf16 *y, int64_t T, int64_t n, int64_t N, int64_t K) {
    const int64_t K32 = K - K % BF_LANES;
    const bf16 *wn = w + n * K;
    for (int64_t t = 0; t < T; t++) {
        const bf16 *xr = x + t * K;
        vec acc = ZERO();
        for (int64_t k = 0; k < K32; k += BF_LANES)
            acc = _mm512_dpbf16_ps(acc, load_bf16(xr + k), load_bf16(wn + k));
        y[t * N + n] = narrow(tail_bf16(xr, wn, K32, K, reduce(acc)));
    }
}

void labkit_linear_rows_bf16(const bf16 *x, const bf16 *w, bf16 *y, int64_t T, int64_t N, int64_t K) {
    int64_t n = 0;
    for (; n + 4 <= N; n += 4) {
        int64_t t = 0;
        for (; t + 4 <= T; t += 4)
            tile_bf16(x, w, y, t, n, N, K, 4, 1);
        for (; t + 2 <= T; t += 2)
            tile_bf16(x, w, y, t, n, N, K, 2, 1);
        if (t < T)
            tile_bf16(x, w, y, t, n, N, K, 1, T > 1);
    }
    for (; n < N; n++)
        single_bf16(x, w, y, T, n, N, K);
}

int labkit_linear_rows_has_bf16(void) { return 1; }
#else
int labkit_linear_rows_has_bf16(void) { return 0; }
#endif

/* A version number the loader checks, so that a stale build in the cache is never used. */
int labkit_linear_rows_version(void) { return 4; }
