/* y = x · wᵀ for a few fp32 rows x [T, K] and a Q8_0 weight w [N, K]: the q4_1 model's LM head.
 *
 * Q8_0 stores w = d · q per group of 32 along K: an int8 code q and one scale d per group (fp16 in the
 * GGUF file, passed here widened to fp32). The product d · q is exact in fp32 (an 11-bit fp16
 * significand times an 8-bit code needs 19 bits of the 24), so the weight this kernel multiplies by is
 * exactly the dequantised fp32 weight, read at a byte and an eighth per weight instead of four.
 *
 * The summation order is linear_rows.c's (`tile`, `reduce4`): with L = LANES, lane l accumulates
 * fma(x[t][k], w[n][k], acc[l]) for k = l, l + L, ...; the lanes are added as the fixed tree of
 * simd.h. K is a multiple of 32, so there is no tail. So y equals, bit for bit, linear_rows over the
 * dequantised fp32 weight (tests/kernels/test_q4_1_kernels.py), and a row gets the same bits whatever rows are beside
 * it (the walk and the tiles only decide how many accumulators are live at once).
 *
 * The weights are walked one row after the other for at most `sequential_rows` input rows, else 4 rows
 * at a time; the same bits either way. Which is faster depends on the CPU's prefetchers and differs from
 * linear_rows.c's crossover (the dequantisation's two extra vector operations a weight make this kernel
 * nearly compute-bound, where the fp32 one is bound by the memory), so Python times both once per
 * machine (`linear_forms.prepare_q8`). On the 2-core AMD EPYC (Zen 4), the LM head's 49152 x 576:
 * 1 row 1.9 ms sequentially against 2.6 in tiles, 2 rows 2.3 against 3.0, 4 rows 4.3 against 2.9;
 * in the L2 cache (1024 rows, 48 times) one row took 1.6 ms, so the kernel is near its compute bound.
 */
#include "simd.h"
#include "threads.h"

#define GROUP 32

static int64_t sequential_rows = 0;

void labkit_q8_set_sequential(int64_t max_rows) { sequential_rows = max_rows; }

/* LANES weights of row q (scales d) from column k, dequantised: exact. */
static inline vec weights(const int8_t *q, const float *d, int64_t k) {
    return MUL(load_i8(q + k), SPLAT(d[k / GROUP]));
}

/* R input rows (from row t) x 4 weight rows (from row n), asking for the next tile's rows as it goes
 * (at 4 input rows: 3.6 ms for the LM head with, 4.9 without). */
static inline __attribute__((always_inline)) void q8_tile(const float *x, const int8_t *q, const float *d,
                                                          float *y, int64_t t, int64_t n, int64_t N, int64_t K,
                                                          const int R) {
    const int64_t G = K / GROUP;
    const int8_t *q0 = q + n * K, *q1 = q0 + K, *q2 = q1 + K, *q3 = q2 + K;
    const float *d0 = d + n * G, *d1 = d0 + G, *d2 = d1 + G, *d3 = d2 + G;
    vec acc[MAX_R][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = ZERO();
    for (int64_t k = 0; k < K; k += LANES) {
        vec a = weights(q0, d0, k), b = weights(q1, d1, k), c = weights(q2, d2, k), e = weights(q3, d3, k);
        if ((k & 63) == 0)
            __builtin_prefetch(q0 + 4 * K + k), __builtin_prefetch(q1 + 4 * K + k),
                __builtin_prefetch(q2 + 4 * K + k), __builtin_prefetch(q3 + 4 * K + k);
        if (R > 1) {
            IN_REGISTER(a);
            IN_REGISTER(b);
            IN_REGISTER(c);
            IN_REGISTER(e);
        }
        for (int i = 0; i < R; i++) {
            vec v = LOAD(x + (t + i) * K + k);
            if (R > 1)
                IN_REGISTER(v);
            acc[i][0] = FMA(v, a, acc[i][0]);
            acc[i][1] = FMA(v, b, acc[i][1]);
            acc[i][2] = FMA(v, c, acc[i][2]);
            acc[i][3] = FMA(v, e, acc[i][3]);
        }
    }
    for (int i = 0; i < R; i++)
        reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3], y + (t + i) * N + n);
}

/* One weight row for R input rows (from row t): the sequential walk, and the last N % 4 rows of the tiles. */
static inline __attribute__((always_inline)) void q8_row(const float *x, const int8_t *q, const float *d, float *y,
                                                         int64_t t, int64_t n, int64_t N, int64_t K, const int R) {
    const int8_t *qn = q + n * K;
    const float *dn = d + n * (K / GROUP);
    vec acc[MAX_R];
    for (int i = 0; i < R; i++)
        acc[i] = ZERO();
    for (int64_t k = 0; k < K; k += LANES) {
        vec a = weights(qn, dn, k);
        if (R > 1)
            IN_REGISTER(a);
        for (int i = 0; i < R; i++)
            acc[i] = FMA(LOAD(x + (t + i) * K + k), a, acc[i]);
    }
    for (int i = 0; i < R; i++)
        y[(t + i) * N + n] = reduce(acc[i]);
}

static inline __attribute__((always_inline)) void q8_rows_of(const float *x, const int8_t *q, const float *d,
                                                             float *y, int64_t T, int64_t n, int64_t N, int64_t K) {
    int64_t t = 0;
    for (; t + 2 <= T; t += 2)
        q8_row(x, q, d, y, t, n, N, K, 2);
    if (t < T)
        q8_row(x, q, d, y, t, n, N, K, 1);
}

/* Outputs n in [lo, hi) of every row. */
static void q8_part(const float *x, const int8_t *q, const float *d, float *y, int64_t T, int64_t lo, int64_t hi,
                    int64_t N, int64_t K) {
    int64_t n = lo;
    if (T <= sequential_rows) {
        for (; n < hi; n++)
            q8_rows_of(x, q, d, y, T, n, N, K);
        return;
    }
    for (; n + 4 <= hi; n += 4) {
        int64_t t = 0;
#if MAX_R == 4
        for (; t + 4 <= T; t += 4)
            q8_tile(x, q, d, y, t, n, N, K, 4);
#endif
        for (; t + 2 <= T; t += 2)
            q8_tile(x, q, d, y, t, n, N, K, 2);
        if (t < T)
            q8_tile(x, q, d, y, t, n, N, K, 1);
    }
    for (; n < hi; n++)
        q8_rows_of(x, q, d, y, T, n, N, K);
}

struct q8_job {
    const float *x;
    const int8_t *q;
    const float *d;
    float *y;
    int64_t T, N, K;
};

static void q8_job_part(void *c, int64_t lo, int64_t hi) {
    const struct q8_job *j = c;
    q8_part(j->x, j->q, j->d, j->y, j->T, lo, hi, j->N, j->K);
}

/* x [T, K] fp32, q [N, K] int8, d [N, K / 32] fp32, y [T, N] fp32; K a multiple of 32. Threads split the
 * outputs n into parts of whole 4-row tiles (threads.h): the same bits at any thread count. */
void labkit_q8_rows(const float *x, const int8_t *q, const float *d, float *y, int64_t T, int64_t N, int64_t K) {
    struct q8_job j = {x, q, d, y, T, N, K};
    parallel_parts(q8_job_part, &j, N, 4, T * K);
}
