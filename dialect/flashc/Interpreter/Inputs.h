//===- Inputs.h - Seeded random inputs for a kernel -------------*- C++ -*-===//
#ifndef FLASHC_INTERPRETER_INPUTS_H
#define FLASHC_INTERPRETER_INPUTS_H

#include "flashc/Interpreter/Interpreter.h"

namespace flashc::interp {

/// q, k, v drawn from N(0, 1) and rounded to the kernel's element type
/// (never zeros: they hide unwritten outputs), and aux tensors filled by
/// their shape, so masks see plausible data:
///  - i32 whose last extent is a sequence length (`doc: i32[B, N]`):
///    non-decreasing document ids, a packed batch of 1 to 4 documents;
///  - other i32 (`kv_len: i32[B]`): lengths in [1, M];
///  - floating point (`slopes: f32[H]`): uniform in [0, 1).
/// The same seed gives the same inputs.
AttentionInputs makeRandomInputs(flash::KernelOp kernel, const ProblemShape &shape,
                                 uint64_t seed);

} // namespace flashc::interp

#endif // FLASHC_INTERPRETER_INPUTS_H
