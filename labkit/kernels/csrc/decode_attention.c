/* Paged attention for one query token at a time (decode, and verification row by row), on the threads
 * Python asks for (threads.c).
 *
 *   q, out    [R, H, D] fp32        R query rows, H heads of D values
 *   k, v      [S, Hkv, D]           the layer's K/V pool as slots (fp32, or bf16 in the _bf16 entry)
 *   slots     row r's context position l lives in slot slots[r * slot_stride + l] (slot_stride 0: all
 *             rows share one context, as a verification's rows do)
 *   lens      row r attends to positions 0 .. lens[r] - 1 (its causal prefix)
 *
 * For each row r and head h (its K/V head g = h / (H / Hkv), grouped-query attention):
 *
 *   s_l = scale · (q[r,h] · K[slot(l), g])        the dot product over D in lanes, the fixed tree of simd.h
 *   m   = max_l s_l,   p_l = exp(s_l − m),   Z = Σ p_l (in lanes, then the fixed tree: exp_and_sum)
 *   out = (Σ_l p_l · V[slot(l), g]) / Z            accumulated in l order, lane by lane over D
 *
 * The G query heads that share a K/V head are computed together, so each K and V row is read once
 * for all of them; that changes no head's arithmetic. A row's result depends on its own query, context and length only, never on how many rows the call
 * has, so a verified row equals the decode step at its position to the bit. PyTorch's CPU SDPA for the
 * same rows cost a batch-16 decode step 10.7 of its 48.6 ms (gathering each sequence's context into a
 * padded copy, a mask, then the kernel); this reads the pool in place through the slots.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels.h"
#include "simd.h"
#include "threads.h"

static inline vec load_kv(const void *base, int64_t index, const int is_bf16) {
    return is_bf16 ? load_widen((const bf16 *)base + index) : LOAD((const float *)base + index);
}

static inline float kv_scalar(const void *base, int64_t index, const int is_bf16) {
    return is_bf16 ? widen(((const bf16 *)base)[index]) : ((const float *)base)[index];
}

#if defined(__AVX512F__)
/* exp over 16 lanes: n = round(x·log2 e), r = x − n·ln 2 (in two parts), a degree-7 polynomial in r,
 * times 2^n (Cephes' expf, about 1 ulp). glibc's scalar expf took half of a batch-16 call's time. */
static inline vec exp_vec(vec x) {
    x = _mm512_max_ps(x, SPLAT(-88.0f));
    const vec n = _mm512_roundscale_ps(_mm512_mul_ps(x, SPLAT(1.44269504088896341f)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vec r = FMA(n, SPLAT(-0.693359375f), x);
    r = FMA(n, SPLAT(2.12194440e-4f), r);
    vec y = SPLAT(1.9875691500e-4f);
    y = FMA(y, r, SPLAT(1.3981999507e-3f));
    y = FMA(y, r, SPLAT(8.3334519073e-3f));
    y = FMA(y, r, SPLAT(4.1665795894e-2f));
    y = FMA(y, r, SPLAT(1.6666665459e-1f));
    y = FMA(y, r, SPLAT(5.0000001201e-1f));
    y = FMA(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, SPLAT(1.0f)));
    return _mm512_scalef_ps(y, n);
}
#else
static inline vec exp_vec(vec x) {
    float f[LANES];
    memcpy(f, &x, sizeof f);
    for (int i = 0; i < LANES; i++)
        f[i] = expf(f[i]);
    return LOAD(f);
}
#endif

/* p[0 .. L-1] = exp(p − m) in place, every one through exp_vec (the tail through a padded copy); returns
 * their sum: lane l adds p[l], p[l + LANES], ... in order, the lanes are added as the fixed tree, then
 * the tail in order. */
static inline float exp_and_sum(float *p, int64_t L, float m) {
    const int64_t LL = L - L % LANES;
    vec z = ZERO();
    for (int64_t l = 0; l < LL; l += LANES) {
        const vec e = exp_vec(LOAD(p + l) - SPLAT(m));
        memcpy(p + l, &e, sizeof e);
        z = z + e;
    }
    float sum = reduce(z);
    if (LL < L) {
        float pad[LANES] = {0};
        memcpy(pad, p + LL, sizeof(float) * (size_t)(L - LL));
        const vec e = exp_vec(LOAD(pad) - SPLAT(m));
        memcpy(pad, &e, sizeof e);
        for (int64_t l = LL; l < L; l++) {
            p[l] = pad[l - LL];
            sum += p[l];
        }
    }
    return sum;
}

#define MAX_GROUP 8          /* query heads per K/V head handled together (more: in several passes) */
#define MAX_D 128            /* head sizes whose sums a head keeps in registers */

/* One row's query heads h0 .. h0 + G - 1, all on K/V head g: each K and V row is read once for the G
 * heads. Each head's arithmetic is exactly the formula above, whatever G is. */
static inline __attribute__((always_inline)) void heads(const float *qr, const void *k, const void *v,
                                                        const int64_t *row_slots, int64_t L, int64_t h0, int G,
                                                        int64_t g, int64_t Hkv, const int64_t D, float scale,
                                                        float *p, float *acc, float *outr, const int is_bf16) {
    const int64_t DL = D - D % LANES;
    float m[MAX_GROUP];
    for (int i = 0; i < G; i++) {
        const float *qh = qr + (h0 + i) * D;
        vec qv[MAX_D / LANES];               /* the head's query in registers (D = 64: 4 vectors) */
        for (int64_t c = 0; c < DL / LANES && c < MAX_D / LANES; c++)
            qv[c] = LOAD(qh + c * LANES);
        m[i] = -INFINITY;
        for (int64_t l = 0; l < L; l++) {
            const int64_t at = (row_slots[l] * Hkv + g) * D;
            vec s = ZERO();
            for (int64_t d = 0; d < DL; d += LANES)
                s = FMA(d < MAX_D ? qv[d / LANES] : LOAD(qh + d), load_kv(k, at + d, is_bf16), s);
            float dot = reduce(s);
            for (int64_t d = DL; d < D; d++)
                dot = fmadd(qh[d], kv_scalar(k, at + d, is_bf16), dot);
            const float score = dot * scale;
            p[i * L + l] = score;
            m[i] = score > m[i] ? score : m[i];
        }
    }
    float z[MAX_GROUP];
    for (int i = 0; i < G; i++)
        z[i] = exp_and_sum(p + i * L, L, m[i]);
    for (int i = 0; i < G; i++) {
        const float *pi = p + i * L;
        float *ai = acc + i * D;
        if (DL == D && D <= MAX_D) {
            /* A head's sums stay in registers over the whole context (D = 64: 4 vectors). */
            vec a[MAX_D / LANES];
            for (int64_t c = 0; c < D / LANES; c++)
                a[c] = ZERO();
            for (int64_t l = 0; l < L; l++) {
                const int64_t at = (row_slots[l] * Hkv + g) * D;
                const vec w = SPLAT(pi[l]);
                for (int64_t c = 0; c < D / LANES; c++)
                    a[c] = FMA(load_kv(v, at + c * LANES, is_bf16), w, a[c]);
            }
            for (int64_t c = 0; c < D / LANES; c++)
                memcpy(ai + c * LANES, &a[c], sizeof a[c]);
            continue;
        }
        for (int64_t d = 0; d < D; d++)
            ai[d] = 0.0f;
        for (int64_t l = 0; l < L; l++) {       /* the same sums, kept in memory */
            const int64_t at = (row_slots[l] * Hkv + g) * D;
            for (int64_t d = 0; d < DL; d += LANES) {
                const vec a = FMA(load_kv(v, at + d, is_bf16), SPLAT(pi[l]), LOAD(ai + d));
                memcpy(ai + d, &a, sizeof a);
            }
            for (int64_t d = DL; d < D; d++)
                ai[d] = fmadd(kv_scalar(v, at + d, is_bf16), pi[l], ai[d]);
        }
    }
    for (int i = 0; i < G; i++)
        for (int64_t d = 0; d < D; d++)
            outr[(h0 + i) * D + d] = acc[i * D + d] / z[i];
}

struct attention_job {
    const float *q;
    const void *k, *v;
    const int64_t *slots, *lens;
    int64_t slot_stride, R, H, Hkv, D, longest;
    float scale;
    float *out;
    int is_bf16;
    atomic_int failed;
};

/* Pairs i in [lo, hi) of (row r, K/V head g), i = r * Hkv + g, each with the G query heads on g. */
static inline __attribute__((always_inline)) void attend_pairs(struct attention_job *j, int64_t lo, int64_t hi,
                                                               const int is_bf16) {
    const int64_t H = j->H, Hkv = j->Hkv, D = j->D, group = H / Hkv;
    float *p = malloc(sizeof(float) * (size_t)(MAX_GROUP * j->longest));
    float *acc = malloc(sizeof(float) * (size_t)(MAX_GROUP * (D > 0 ? D : 1)));
    if (p == NULL || acc == NULL) {
        free(p);
        free(acc);
        atomic_store(&j->failed, 1);
        return;
    }
    for (int64_t i = lo; i < hi; i++) {
        const int64_t r = i / Hkv, g = i % Hkv;
        for (int64_t h0 = g * group; h0 < (g + 1) * group; h0 += MAX_GROUP) {
            const int G = (int)((g + 1) * group - h0 < MAX_GROUP ? (g + 1) * group - h0 : MAX_GROUP);
            if (D == 64)        /* the default model's head size: a constant lets the loops unroll */
                heads(j->q + r * H * D, j->k, j->v, j->slots + r * j->slot_stride, j->lens[r], h0, G, g, Hkv, 64,
                      j->scale, p, acc, j->out + r * H * D, is_bf16);
            else
                heads(j->q + r * H * D, j->k, j->v, j->slots + r * j->slot_stride, j->lens[r], h0, G, g, Hkv, D,
                      j->scale, p, acc, j->out + r * H * D, is_bf16);
        }
    }
    free(p);
    free(acc);
}

static void pairs_f32(void *c, int64_t lo, int64_t hi) { attend_pairs(c, lo, hi, 0); }

static void pairs_bf16(void *c, int64_t lo, int64_t hi) { attend_pairs(c, lo, hi, 1); }

/* Threads split the (row, K/V head) pairs into contiguous parts (threads.h); a pair's arithmetic is the
 * same on any thread, so the thread count changes no bit. */
static int attend(const float *q, const void *k, const void *v, const int64_t *slots, int64_t slot_stride,
                  const int64_t *lens, float *out, int64_t R, int64_t H, int64_t Hkv, int64_t D, float scale,
                  const int is_bf16) {
    int64_t longest = 1;
    for (int64_t r = 0; r < R; r++)
        longest = lens[r] > longest ? lens[r] : longest;
    struct attention_job j = {q, k, v, slots, lens, slot_stride, R, H, Hkv, D, longest, scale, out, is_bf16, 0};
    /* a pair's work: its group's query heads against up to `longest` K and V rows */
    parallel_parts(is_bf16 ? pairs_bf16 : pairs_f32, &j, R * Hkv, 1, 2 * (H / Hkv) * longest * D);
    return atomic_load(&j.failed);
}

/* The entry points (ctypes releases the GIL for the call); 0 on success, 1 if scratch memory ran out. */
int labkit_decode_attention_f32(const float *q, const float *k, const float *v, const int64_t *slots,
                                int64_t slot_stride, const int64_t *lens, float *out, int64_t R, int64_t H,
                                int64_t Hkv, int64_t D, float scale) {
    return attend(q, k, v, slots, slot_stride, lens, out, R, H, Hkv, D, scale, 0);
}

int labkit_decode_attention_bf16(const float *q, const bf16 *k, const bf16 *v, const int64_t *slots,
                                 int64_t slot_stride, const int64_t *lens, float *out, int64_t R, int64_t H,
                                 int64_t Hkv, int64_t D, float scale) {
    return attend(q, k, v, slots, slot_stride, lens, out, R, H, Hkv, D, scale, 1);
}
