//===- MergeStates.h - Merging partial attention states by LSE --*- C++ -*-===//
//
// Attention over a key set split into parts (split-KV decoding, cascade or
// shared-prefix attention, context parallelism) gives one state per part:
// O_p normalized over that part's keys and LSE_p = log Σ_{j in part}
// exp(s_j). The state over all the keys is
//   LSE = log Σ_p exp(LSE_p),   O = Σ_p exp(LSE_p - LSE) · O_p,
// computed here in fp64 with the largest LSE_p subtracted first. A part in
// which a row sees no key has LSE_p = -inf and weighs nothing; a row no
// part sees gets O = 0 and LSE = -inf, as the attention kernels write it.
// The reference for the GPU merge kernel (issue 16); not a kernel itself.
//
//===----------------------------------------------------------------------===//

#ifndef FLASHC_INTERPRETER_MERGESTATES_H
#define FLASHC_INTERPRETER_MERGESTATES_H

#include "llvm/ADT/ArrayRef.h"

#include <string>
#include <vector>

namespace flashc::interp {

/// One part's state: `out` holds rows x headDim values (row-major), `lse`
/// one value per row.
struct PartialState {
  llvm::ArrayRef<float> out;
  llvm::ArrayRef<float> lse;
};

/// Merges `states` (at least one, all with the same rows) row by row into
/// `out` (rows x headDim) and `lse`. A NaN in any part's LSE, or in the O
/// of a part that weighs something, makes that row's O and LSE NaN. Returns
/// false with `error` set when the states' sizes disagree.
bool mergeStates(llvm::ArrayRef<PartialState> states, int64_t headDim, std::vector<float> &out,
                 std::vector<float> &lse, std::string &error);

} // namespace flashc::interp

#endif // FLASHC_INTERPRETER_MERGESTATES_H
