/* The entry points one of labkit's C files calls in another (decode_layer.c calls the rest), declared once.
 *
 * Every file that defines one of these includes this header, so a definition that drifts from its
 * declaration here is a compile error ("conflicting types"), not a call with the wrong arguments. Python
 * reads each entry point's ctypes signature from its definition (native.prototypes), not from here. */
#ifndef LABKIT_KERNELS_H
#define LABKIT_KERNELS_H

#include <stdint.h>

#include "simd.h"

/* linear_rows.c */
void labkit_linear_rows_f32(const float *x, const float *w, float *y, int64_t T, int64_t N, int64_t K);
int labkit_linear_rows_bf16(const bf16 *x, const bf16 *w, bf16 *y, int64_t T, int64_t N, int64_t K);

/* norm_act.c */
void labkit_rms_norm(const void *x, const void *w, void *out, int64_t T, int64_t n, float eps, int64_t W, int bf);
void labkit_add_rms_norm(const void *x, const void *delta, void *sum, const void *w, void *out, int64_t T, int64_t n,
                         float eps, int64_t W, int bf);
void labkit_silu_mul(const void *gu, void *out, int64_t T, int64_t I, int bf);

/* rope_kv.c */
void labkit_rope_write_kv_f32(const float *heads, const float *cos, const float *sin, const int64_t *positions,
                              const int64_t *slots, float *q, float *k_pool, float *v_pool, int64_t T, int64_t H,
                              int64_t Hkv, int64_t D);
void labkit_rope_write_kv_bf16(const bf16 *heads, const float *cos, const float *sin, const int64_t *positions,
                               const int64_t *slots, bf16 *q, bf16 *k_pool, bf16 *v_pool, int64_t T, int64_t H,
                               int64_t Hkv, int64_t D);

/* decode_attention.c */
int labkit_decode_attention_f32(const float *q, const float *k, const float *v, const int64_t *slots,
                                int64_t slot_stride, const int64_t *lens, float *out, int64_t R, int64_t H,
                                int64_t Hkv, int64_t D, float scale);
int labkit_decode_attention_bf16(const float *q, const bf16 *k, const bf16 *v, const int64_t *slots,
                                 int64_t slot_stride, const int64_t *lens, float *out, int64_t R, int64_t H,
                                 int64_t Hkv, int64_t D, float scale);

/* int4_rows.c */
int labkit_int4_rows_f32(const float *x, const uint8_t *packed, const bf16 *scales_zeros, float *y, int64_t T,
                         int64_t N, int64_t K, int64_t G, int64_t block);

#endif
