/* A stand-alone check of labkit's product kernels (labkit/kernels/csrc/linear_rows.c, threads.c) for a CPU
 * the tests cannot run natively: tests/kernels/test_cross_arch.py cross-compiles it for aarch64 and runs it under
 * qemu-aarch64. For fp32 and bf16 (the build's widened form there), on shapes with tails:
 *
 *   - a row gets the same bits at every row count 1..16 (on 2 and 3 threads: 1, 6, 11, 16) and on 1, 2
 *     and 3 threads, in both walks;
 *   - the bf16 product equals the fp32 product of the widened operands rounded to bf16, bit for bit;
 *   - every fp32 output is within (K + 2)·2⁻²³·Σ|x·w| of a double-precision sum (the bound of any order).
 *
 * Prints "kernel check ok" and exits 0, or names the first failure and exits 1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simd.h"

void labkit_linear_rows_f32(const float *x, const float *w, float *y, int64_t T, int64_t N, int64_t K);
int labkit_linear_rows_bf16(const bf16 *x, const bf16 *w, bf16 *y, int64_t T, int64_t N, int64_t K);
void labkit_linear_rows_set_sequential(int64_t max_rows);
void labkit_set_threads(int n);
int labkit_linear_rows_has_bf16(void);

static uint64_t state = 88172645463325252ull;

static float uniform(void) {            /* xorshift64, in [-1, 1) */
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (float)((state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static int fail(const char *what, int64_t n, int64_t k, int64_t t, int threads) {
    printf("FAILED: %s (shape %lldx%lld, rows %lld, threads %d)\n", what, (long long)n, (long long)k, (long long)t,
           threads);
    return 1;
}

static int check_shape(int64_t N, int64_t K) {
    enum { T = 16 };
    float *x = malloc(sizeof(float) * T * K), *w = malloc(sizeof(float) * N * K);
    float *full = malloc(sizeof(float) * T * N), *y = malloc(sizeof(float) * T * N);
    float *xw = malloc(sizeof(float) * T * K), *ww = malloc(sizeof(float) * N * K);
    bf16 *xb = malloc(sizeof(bf16) * T * K), *wb = malloc(sizeof(bf16) * N * K);
    bf16 *fullb = malloc(sizeof(bf16) * T * N), *yb = malloc(sizeof(bf16) * T * N);
    for (int64_t i = 0; i < T * K; i++)
        x[i] = uniform(), xb[i] = narrow(x[i]), xw[i] = widen(xb[i]);
    for (int64_t i = 0; i < N * K; i++)
        w[i] = uniform(), wb[i] = narrow(w[i]), ww[i] = widen(wb[i]);
    labkit_set_threads(1);
    labkit_linear_rows_set_sequential(0);
    labkit_linear_rows_f32(x, w, full, T, N, K);
    if (labkit_linear_rows_bf16(xb, wb, fullb, T, N, K))
        return fail("bf16 scratch memory", N, K, T, 1);
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double exact = 0, scale = 0;
            for (int64_t k = 0; k < K; k++)
                exact += (double)x[t * K + k] * w[n * K + k], scale += fabs((double)x[t * K + k] * w[n * K + k]);
            if (fabs(full[t * N + n] - exact) > (double)(K + 2) * 0x1p-23 * scale + 1e-30)   /* any order's bound */
                return fail("fp32 accuracy", N, K, t, 1);
        }
    if (labkit_linear_rows_has_bf16() == 2) {            /* widened: the fp32 order on widened operands */
        labkit_linear_rows_f32(xw, ww, y, T, N, K);
        for (int64_t i = 0; i < T * N; i++)
            if (narrow(y[i]) != fullb[i])
                return fail("bf16 != fp32 of the widened operands, rounded", N, K, i / N, 1);
    }
    for (int walk = 0; walk <= 16; walk += 16) {
        labkit_linear_rows_set_sequential(walk);
        for (int threads = 1; threads <= 3; threads++) {
            labkit_set_threads(threads);
            for (int64_t t = 1; t <= T; t += threads == 1 ? 1 : 5) {      /* 1..16; 1, 6, 11, 16 */
                labkit_linear_rows_f32(x, w, y, t, N, K);
                if (memcmp(y, full, sizeof(float) * t * N))
                    return fail("fp32 bits differ from the 16-row product", N, K, t, threads);
                labkit_linear_rows_f32(x + (t - 1) * K, w, y, 1, N, K);
                if (memcmp(y, full + (t - 1) * N, sizeof(float) * N))
                    return fail("fp32 bits of one row alone differ", N, K, t, threads);
                labkit_linear_rows_bf16(xb, wb, yb, t, N, K);
                if (memcmp(yb, fullb, sizeof(bf16) * t * N))
                    return fail("bf16 bits differ from the 16-row product", N, K, t, threads);
            }
        }
    }
    free(x), free(w), free(full), free(y), free(xw), free(ww), free(xb), free(wb), free(fullb), free(yb);
    return 0;
}

int main(void) {
    const int64_t shapes[][2] = {{64, 577}, {1027, 100}, {9, 7}, {3, 40}};
    for (int i = 0; i < 4; i++)
        if (check_shape(shapes[i][0], shapes[i][1]))
            return 1;
    printf("kernel check ok (bf16 product: %s)\n", labkit_linear_rows_has_bf16() == 1 ? "dot" : "widened");
    return 0;
}
