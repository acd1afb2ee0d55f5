/*===- merge_states.h - Merge partial attention states, C API ------*- C -*-===*
 *
 * The C entry point of flashrun::StateMerger (flashrun/MergeStates.h), for
 * programs that are not C++: attention over a key set split into parts
 * (cascade or shared-prefix attention, context parallelism, a caller's own
 * split-KV) gives one state (O normalized over the part's keys, LSE) per
 * part; the merged state over all the keys is
 *   LSE = log sum_p exp(LSE_p),   O = sum_p exp(LSE_p - LSE) * O_p.
 * A part whose LSE is -inf in a row weighs nothing there; a row no part
 * sees gets O = 0 and LSE = -inf; a NaN LSE makes its row NaN.
 *
 * Link libflashrun and libflashrt (C++; the CUDA driver is opened at run
 * time). The kernel runs on the device $FLASHRT_DEVICE names (default 0),
 * whose primary context becomes the calling thread's current context.
 *
 *===----------------------------------------------------------------------===*/
#ifndef FLASHRUN_MERGE_STATES_H
#define FLASHRUN_MERGE_STATES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One state in device memory: row r's O (head_dim contiguous elements) at
 * element out + r * row_stride, its LSE (f32) at byte lse + 4 * r. */
typedef struct flashrun_state {
  uint64_t out;
  uint64_t lse;
  int64_t row_stride;
} flashrun_state;

/* Merges num_states (1 to 64) states of `state_type` ("f32", "bf16" or
 * "f16") into `out` of `out_type`, rows x head_dim, asynchronously on
 * `stream` (a CUstream of the device's primary context, or NULL for the
 * legacy default stream). `out` may be one of the states (in place) only if
 * it is the same memory with the same stride. O pointers 16-byte aligned
 * where head_dim allows, LSE pointers 4-byte aligned.
 * Returns 0, or 2 for arguments the kernel does not take, 3 without a GPU
 * or driver, 4 when the PTX does not JIT, 5 for other driver errors;
 * flashrun_merge_states_error() then says why. */
int flashrun_merge_states(void *stream, const char *state_type, const char *out_type,
                          const flashrun_state *states, int num_states, flashrun_state out,
                          int64_t rows, int64_t head_dim);

/* Why the calling thread's last flashrun_merge_states call failed ("" after
 * a success). */
const char *flashrun_merge_states_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHRUN_MERGE_STATES_H */
