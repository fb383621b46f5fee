/* RMSNorm (with the residual add before it) and SwiGLU's silu(gate) * up for a step's rows, each in one
 * call: what ``llama.rms_norm`` and ``F.silu(gate) * up`` do in four to eight PyTorch kernels.
 *
 * Every value is the one PyTorch computes, to the bit, so the model's output does not change:
 *
 * - RMSNorm. PyTorch squares each element (rounded), sums the squares in the order of its vectorised
 *   sum kernel (ATen's cascade sum over a contiguous row: W-lane vector accumulators, 4 of them side by
 *   side, added in levels of 2^p vectors, then the 4 added, then the lanes added one by one after any
 *   scalar tail), divides by n, adds eps, takes 1 / sqrt, and multiplies: x * r, then * weight (fp32), or
 *   rounds x * r to bf16 and multiplies by the bf16 weight (Hugging Face's order for half types). W is
 *   the lane count of PyTorch's float vector on this CPU (16 with AVX-512, 8 with AVX2); Python passes it.
 * - silu. PyTorch computes x / (1 + exp(-x)) in fp32, with its vector exp (SLEEF's expf, 1-ulp, which
 *   libtorch exports; Python hands this file its address) on whole pairs of vectors from the start of each
 *   row, and the C library's expf on the rest; bf16 rounds the result, then the product with up.
 *
 * Python checks both against PyTorch on this machine before it uses them (``native.fused_exact``), and
 * keeps PyTorch's kernels where they differ. This file is compiled without contracting a·b + c into a
 * fused multiply-add: each product is rounded on its own, as in PyTorch's separate kernels. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "simd.h"

#if defined(__AVX__)
#include <immintrin.h>      /* simd.h includes it only with AVX-512: the 8-lane exp needs it too */
#endif

#if defined(__clang__)
#define NO_CONTRACT
#define CONTRACT_OFF _Pragma("clang fp contract(off)")
#else
#define NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#define CONTRACT_OFF
#endif

#define MAX_W 16

static inline NO_CONTRACT float load_f(const void *base, int64_t i, int bf) {
    return bf ? widen(((const bf16 *)base)[i]) : ((const float *)base)[i];
}

/* ceil(log2(x)) as ATen computes it (1 for x <= 2). */
static inline int64_t ceil_log2(int64_t x) {
    if (x <= 2)
        return 1;
    return 64 - __builtin_clzll((uint64_t)(x - 1));
}

/* The sum of x[i]² (each square rounded to fp32) over one row of n values, in PyTorch's order with W lanes. */
static NO_CONTRACT float sum_squares(const void *x, int64_t n, int64_t W, int bf) {
    CONTRACT_OFF
    const int64_t vecs = n / W, rows = vecs / 4;
    /* multi_row_sum over `rows` groups of 4 vectors, with 4 levels of partial sums */
    const int64_t power = ceil_log2(rows) / 4 > 4 ? ceil_log2(rows) / 4 : 4;
    const int64_t step = (int64_t)1 << power, mask = step - 1;
    float acc[4][4][MAX_W];
    memset(acc, 0, sizeof acc);
    int64_t i = 0;
#define ADD_GROUP(level, g)                                                                               \
    for (int k = 0; k < 4; k++)                                                                           \
        for (int64_t l = 0; l < W; l++) {                                                                 \
            const float v = load_f(x, ((g) * 4 + k) * W + l, bf);                                          \
            const float sq = v * v;                                                                         \
            acc[level][k][l] = acc[level][k][l] + sq;                                                       \
        }
    while (i + step <= rows) {
        for (int64_t j = 0; j < step; j++, i++) {
            ADD_GROUP(0, i)
        }
        for (int j = 1; j < 4; j++) {
            for (int k = 0; k < 4; k++)
                for (int64_t l = 0; l < W; l++) {
                    acc[j][k][l] = acc[j][k][l] + acc[j - 1][k][l];
                    acc[j - 1][k][l] = 0.0f;
                }
            if ((i & (mask << (j * power))) != 0)
                break;
        }
    }
    for (; i < rows; i++) {
        ADD_GROUP(0, i)
    }
#undef ADD_GROUP
    for (int j = 1; j < 4; j++)
        for (int k = 0; k < 4; k++)
            for (int64_t l = 0; l < W; l++)
                acc[0][k][l] = acc[0][k][l] + acc[j][k][l];
    /* row_sum: the vectors past the last group of 4 go to the first accumulator, then the 4 are added */
    for (int64_t v = rows * 4; v < vecs; v++)
        for (int64_t l = 0; l < W; l++) {
            const float e = load_f(x, v * W + l, bf);
            const float sq = e * e;
            acc[0][0][l] = acc[0][0][l] + sq;
        }
    for (int k = 1; k < 4; k++)
        for (int64_t l = 0; l < W; l++)
            acc[0][0][l] = acc[0][0][l] + acc[0][k][l];
    /* the scalar tail first, then the lanes in order */
    float total = 0.0f;
    for (int64_t e = vecs * W; e < n; e++) {
        const float v = load_f(x, e, bf);
        const float sq = v * v;
        total = total + sq;
    }
    for (int64_t l = 0; l < W; l++)
        total = total + acc[0][0][l];
    return total;
}

static NO_CONTRACT void norm_row(const void *x, const void *w, void *out, int64_t n, float eps, int64_t W, int bf) {
    CONTRACT_OFF
    const float mean = sum_squares(x, n, W, bf) / (float)n;
    const float r = 1.0f / sqrtf(mean + eps);
    if (bf) {
        const bf16 *xb = x, *wb = w;
        bf16 *o = out;
        for (int64_t i = 0; i < n; i++) {
            const float scaled = widen(xb[i]) * r;
            o[i] = narrow(widen(wb[i]) * widen(narrow(scaled)));
        }
    } else {
        const float *xf = x, *wf = w;
        float *o = out;
        for (int64_t i = 0; i < n; i++) {
            const float scaled = xf[i] * r;
            o[i] = scaled * wf[i];
        }
    }
}

/* out[t] = rms_norm(x[t]) for T rows of n values (fp32 or bf16; weight in the same dtype). */
void labkit_rms_norm(const void *x, const void *w, void *out, int64_t T, int64_t n, float eps, int64_t W, int bf) {
    const int64_t size = bf ? 2 : 4;
    for (int64_t t = 0; t < T; t++)
        norm_row((const char *)x + t * n * size, w, (char *)out + t * n * size, n, eps, W, bf);
}

/* sum[t] = x[t] + delta[t] (rounded to the dtype, as PyTorch's add), then out[t] = rms_norm(sum[t]). */
NO_CONTRACT void labkit_add_rms_norm(const void *x, const void *delta, void *sum, const void *w, void *out, int64_t T,
                                     int64_t n, float eps, int64_t W, int bf) {
    CONTRACT_OFF
    const int64_t size = bf ? 2 : 4;
    for (int64_t t = 0; t < T; t++) {
        const int64_t base = t * n;
        if (bf) {
            const bf16 *a = x, *b = delta;
            bf16 *s = sum;
            for (int64_t i = base; i < base + n; i++)
                s[i] = narrow(widen(a[i]) + widen(b[i]));
        } else {
            const float *a = x, *b = delta;
            float *s = sum;
            for (int64_t i = base; i < base + n; i++)
                s[i] = a[i] + b[i];
        }
        norm_row((const char *)sum + base * size, w, (char *)out + base * size, n, eps, W, bf);
    }
}

/* ---- silu(gate) * up ---- */

static void *vector_exp = 0;    /* PyTorch's vector expf (SLEEF), W lanes */
static int64_t vector_exp_lanes = 0;

/* Hand over PyTorch's vector exp for W lanes (16: Sleef_expf16_u10, 8: Sleef_expf8_u10); returns 0 if
 * this build cannot call a W-lane function (then silu_mul must not be used). */
int labkit_set_vector_exp(void *fn, int64_t lanes) {
#if defined(__AVX512F__)
    if (lanes == 16 || lanes == 8) {
        vector_exp = fn, vector_exp_lanes = lanes;
        return 1;
    }
#elif defined(__AVX__)
    if (lanes == 8) {
        vector_exp = fn, vector_exp_lanes = lanes;
        return 1;
    }
#endif
    (void)fn, (void)lanes;
    return 0;
}

/* e[l] = exp(v[l]) for one vector of vector_exp_lanes lanes, through PyTorch's own function. */
static inline void exp_vector(const float *v, float *e) {
#if defined(__AVX512F__)
    if (vector_exp_lanes == 16) {
        typedef __m512 (*fn16)(__m512);
        _mm512_storeu_ps(e, ((fn16)vector_exp)(_mm512_loadu_ps(v)));
        return;
    }
#endif
#if defined(__AVX__)
    typedef __m256 (*fn8)(__m256);
    _mm256_storeu_ps(e, ((fn8)vector_exp)(_mm256_loadu_ps(v)));
#else
    (void)v, (void)e;
#endif
}

/* out[t][i] = silu(gu[t][i]) * gu[t][I + i] for T rows of 2I values (gate, then up). PyTorch's silu
 * kernel runs whole pairs of vectors (2W fp32, or 4W bf16 values: its bf16 vector holds 2W) from each
 * row's start with its vector exp, and the rest with expf. */
#if defined(__AVX512F__)
/* The vectored part with 16 lanes, in registers: the same operations as the loop below. */
static inline NO_CONTRACT void silu_mul16(const void *gu, void *out, int64_t g, int64_t u, int64_t o, int64_t n, int bf) {
    CONTRACT_OFF
    typedef __m512 (*fn16)(__m512);
    const fn16 exp16 = (fn16)vector_exp;
    const __m512 one = _mm512_set1_ps(1.0f), sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < n; i += 16) {
        if (bf) {
            const __m512 v = load_widen((const bf16 *)gu + g + i), up = load_widen((const bf16 *)gu + u + i);
            const __m512 s = _mm512_div_ps(v, _mm512_add_ps(one, exp16(_mm512_xor_ps(v, sign))));
            float f[16];
            _mm512_storeu_ps(f, s);
            bf16 *dst = (bf16 *)out + o + i;
            for (int l = 0; l < 16; l++)
                f[l] = widen(narrow(f[l])) * up[l];
            for (int l = 0; l < 16; l++)
                dst[l] = narrow(f[l]);
        } else {
            const __m512 v = _mm512_loadu_ps((const float *)gu + g + i), up = _mm512_loadu_ps((const float *)gu + u + i);
            const __m512 s = _mm512_div_ps(v, _mm512_add_ps(one, exp16(_mm512_xor_ps(v, sign))));
            _mm512_storeu_ps((float *)out + o + i, _mm512_mul_ps(s, up));
        }
    }
}
#endif

NO_CONTRACT void labkit_silu_mul(const void *gu, void *out, int64_t T, int64_t I, int bf) {
    CONTRACT_OFF
    const int64_t W = vector_exp_lanes, chunk = bf ? 4 * W : 2 * W, vectored = I - I % chunk;
    float x[MAX_W], e[MAX_W];
    for (int64_t t = 0; t < T; t++) {
        const int64_t g = t * 2 * I, u = g + I, o = t * I;
        int64_t start = 0;
#if defined(__AVX512F__)
        if (W == 16) {
            silu_mul16(gu, out, g, u, o, vectored, bf);
            start = vectored;
        }
#endif
        for (int64_t i = start; i < I; i += W) {
            const int64_t lanes = i < vectored ? W : (I - i < W ? I - i : W);
            for (int64_t l = 0; l < lanes; l++)
                x[l] = -load_f(gu, g + i + l, bf);
            if (i < vectored) {
                exp_vector(x, e);
            } else {
                for (int64_t l = 0; l < lanes; l++)
                    e[l] = expf(x[l]);
            }
            for (int64_t l = 0; l < lanes; l++) {
                const float v = load_f(gu, g + i + l, bf);
                const float s = v / (1.0f + e[l]);
                if (bf) {
                    ((bf16 *)out)[o + i + l] = narrow(widen(narrow(s)) * load_f(gu, u + i + l, bf));
                } else {
                    ((float *)out)[o + i + l] = s * load_f(gu, u + i + l, bf);
                }
            }
        }
    }
}
