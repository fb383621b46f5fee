/* One Llama layer of a step in one call, where its attention is one kernel call: every row a single new
 * token (decode), or every row one sequence's (its verification rows, or its prefill), each row against
 * its own prefix. The same entry points the Python forward calls one by one, called here in the same
 * order on the same values, so every output bit is the one the op-by-op path gives
 * (tests/kernels/test_fused_small_ops.py compares the logits).
 * What it removes is the Python between them: about 60 µs a layer on the lab machine, 2 ms a token.
 *
 *   x [R, h]  ->  out [R, h]        (fp32, or bf16 with bf16 weights; x is left as it was)
 *
 *   n1  = rms_norm(x; ln1)                       labkit_rms_norm
 *   qkv = n1 · Wqkvᵀ                             labkit_linear_rows_*
 *   q   = RoPE(q), RoPE(k) and v to the pools     labkit_rope_write_kv_*
 *   a   = attention of q over each row's context  labkit_decode_attention_* (fp32 query; bf16: rounded back)
 *   out = x + a · Woᵀ;  n2 = rms_norm(out; ln2)   labkit_add_rms_norm
 *   out = out + (silu(n2 · Wgᵀ) * (n2 · Wuᵀ)) · Wdᵀ   labkit_linear_rows_*, labkit_silu_mul
 *
 * The q4_1 model (`labkit_decode_layer_q4`): the same fp32 layer, each product on 4-bit weights as
 * `quant.Int4Linear` computes it: the input rounded to bf16, PyTorch's int4 kernel's bits, the bf16
 * output widened back to fp32 (labkit_int4_rows_f32).
 *
 * Returns 0, or 1 when scratch memory could not be had (nothing is written to out then; the K/V may be). */
#include <stdlib.h>

#include "kernels.h"

/* The layer's four products: fp32 or bf16 weights (w), or 4-bit ones (packed codes w, bf16 scales and
 * zero points sz, groups of G, PyTorch's form for `block`) on an fp32 stream. */
struct products {
    const void *w[4], *sz[4];
    int64_t group, block;
    int int4;
};

static int product(const struct products *p, int i, const void *x, void *y, int64_t T, int64_t N, int64_t K, int bf) {
    if (p->int4)
        return labkit_int4_rows_f32(x, p->w[i], p->sz[i], y, T, N, K, p->group, p->block) != 0;
    if (bf)
        return labkit_linear_rows_bf16(x, p->w[i], y, T, N, K) != 0;
    labkit_linear_rows_f32(x, p->w[i], y, T, N, K);
    return 0;
}

static int layer(const void *x, void *out, const void *ln1, const struct products *w, const void *ln2, const float *cos,
                 const float *sin, const int64_t *positions, const int64_t *new_slots, void *k_pool, void *v_pool,
                 const int64_t *context_slots, int64_t slot_stride, const int64_t *lens, int64_t R, int64_t h,
                 int64_t H, int64_t Hkv, int64_t D, int64_t I, float eps, int64_t lanes, float scale, int bf) {
    const int64_t size = bf ? 2 : 4, width = (H + 2 * Hkv) * D, qd = H * D;
    /* one block of scratch: n1 | qkv | q | q fp32 | attention fp32 | attention | o | n2 | gate_up | m | down */
    const int64_t counts[] = {R * h, R * width, R * qd, 0, 0, R * qd, R * h, R * h, R * 2 * I, R * I, R * h};
    int64_t total = 0;
    for (int i = 0; i < 11; i++)
        total += counts[i] * size;
    total += 2 * R * qd * (int64_t)sizeof(float);
    char *block = malloc((size_t)total);
    if (!block)
        return 1;
    char *p = block;
    void *n1 = p;            p += counts[0] * size;
    void *qkv = p;           p += counts[1] * size;
    void *q = p;             p += counts[2] * size;
    float *qf = (float *)p;  p += R * qd * (int64_t)sizeof(float);
    float *af = (float *)p;  p += R * qd * (int64_t)sizeof(float);
    void *a = p;             p += counts[5] * size;
    void *o = p;             p += counts[6] * size;
    void *n2 = p;            p += counts[7] * size;
    void *gu = p;            p += counts[8] * size;
    void *m = p;             p += counts[9] * size;
    void *dn = p;

    labkit_rms_norm(x, ln1, n1, R, h, eps, lanes, bf);
    int failed = product(w, 0, n1, qkv, R, width, h, bf);
    if (failed) {
        free(block);
        return 1;
    }
    if (bf) {
        labkit_rope_write_kv_bf16(qkv, cos, sin, positions, new_slots, q, k_pool, v_pool, R, H, Hkv, D);
        for (int64_t i = 0; i < R * qd; i++)
            qf[i] = widen(((const bf16 *)q)[i]);
        failed = labkit_decode_attention_bf16(qf, k_pool, v_pool, context_slots, slot_stride, lens, af, R, H, Hkv, D,
                                              scale);
        for (int64_t i = 0; i < R * qd; i++)
            ((bf16 *)a)[i] = narrow(af[i]);
    } else {
        labkit_rope_write_kv_f32(qkv, cos, sin, positions, new_slots, q, k_pool, v_pool, R, H, Hkv, D);
        failed = labkit_decode_attention_f32(q, k_pool, v_pool, context_slots, slot_stride, lens, a, R, H, Hkv, D,
                                             scale);
    }
    if (failed) {
        free(block);
        return 1;
    }
    failed = product(w, 1, a, o, R, h, qd, bf);
    if (!failed) {
        labkit_add_rms_norm(x, o, out, ln2, n2, R, h, eps, lanes, bf);
        failed = product(w, 2, n2, gu, R, 2 * I, h, bf);
    }
    if (!failed) {
        labkit_silu_mul(gu, m, R, I, bf);
        failed = product(w, 3, m, dn, R, h, I, bf);
    }
    if (failed) {               /* out may hold the first residual sum: Python raises, the step is lost */
        free(block);
        return 1;
    }
    if (bf) {
        bf16 *y = out;
        const bf16 *d = dn;
        for (int64_t i = 0; i < R * h; i++)
            y[i] = narrow(widen(y[i]) + widen(d[i]));
    } else {
        float *y = out;
        const float *d = dn;
        for (int64_t i = 0; i < R * h; i++)
            y[i] = y[i] + d[i];
    }
    free(block);
    return 0;
}

int labkit_decode_layer(const void *x, void *out, const void *ln1, const void *w_qkv, const void *w_o,
                        const void *ln2, const void *w_gate_up, const void *w_down, const float *cos,
                        const float *sin, const int64_t *positions, const int64_t *new_slots, void *k_pool,
                        void *v_pool, const int64_t *context_slots, int64_t slot_stride, const int64_t *lens,
                        int64_t R, int64_t h, int64_t H, int64_t Hkv, int64_t D, int64_t I, float eps,
                        int64_t lanes, float scale, int bf) {
    const struct products w = {{w_qkv, w_o, w_gate_up, w_down}, {0, 0, 0, 0}, 0, 0, 0};
    return layer(x, out, ln1, &w, ln2, cos, sin, positions, new_slots, k_pool, v_pool, context_slots, slot_stride,
                 lens, R, h, H, Hkv, D, I, eps, lanes, scale, bf);
}

/* The fp32 layer with 4-bit products: packed codes p_* and scales and zero points sz_* (groups of G) as
 * `quant.Int4Linear` holds them, in PyTorch's form for `block` (int4_rows.c). */
int labkit_decode_layer_q4(const float *x, float *out, const float *ln1, const void *p_qkv, const void *sz_qkv,
                           const void *p_o, const void *sz_o, const float *ln2, const void *p_gate_up,
                           const void *sz_gate_up, const void *p_down, const void *sz_down, int64_t G, int64_t block,
                           const float *cos, const float *sin, const int64_t *positions, const int64_t *new_slots,
                           float *k_pool, float *v_pool, const int64_t *context_slots, int64_t slot_stride,
                           const int64_t *lens, int64_t R, int64_t h, int64_t H, int64_t Hkv, int64_t D, int64_t I,
                           float eps, int64_t lanes, float scale) {
    const struct products w = {{p_qkv, p_o, p_gate_up, p_down}, {sz_qkv, sz_o, sz_gate_up, sz_down}, G, block, 1};
    return layer(x, out, ln1, &w, ln2, cos, sin, positions, new_slots, k_pool, v_pool, context_slots, slot_stride,
                 lens, R, h, H, Hkv, D, I, eps, lanes, scale, 0);
}
