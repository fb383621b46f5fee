/* labkit's kernels on several threads (threads.c): one job split into contiguous parts of its outputs.
 *
 * A part computes whole outputs, each in the one order the kernel's header gives it, so which thread
 * computes an output, and how many threads there are, changes no bit (tests/kernels/test_native_threads.py). */
#ifndef LABKIT_THREADS_H
#define LABKIT_THREADS_H

#include <stdint.h>

/* Compute outputs [lo, hi) of the job described by ctx. */
typedef void (*part_fn)(void *ctx, int64_t lo, int64_t hi);

/* Run fn over [0, n): in parts cut at multiples of `align`, one per thread, when the calling thread asked
 * for more than one (labkit_set_threads) and the job is worth it (`cost`: work per output, in multiply-adds;
 * a part gets at least MIN_PART_COST); else on the calling thread alone. Returns when every part is done. */
__attribute__((visibility("hidden"))) void parallel_parts(part_fn fn, void *ctx, int64_t n, int64_t align,
                                                          int64_t cost);

#endif
