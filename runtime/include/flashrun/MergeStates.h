//===- MergeStates.h - Merge partial attention states by LSE ----*- C++ -*-===//
//
// Attention over a key set split into parts (cascade or shared-prefix
// attention: the shared prefix once, each request's own suffix apart;
// context parallelism; a caller's own split-KV) gives one state per part:
// O_p normalized over that part's keys and LSE_p = log Σ exp(s_j) over
// them. The state over all the keys is
//   LSE = log Σ_p exp(LSE_p),   O = Σ_p exp(LSE_p - LSE) · O_p.
// A part in which a row sees no key (LSE_p = -inf) weighs nothing, even if
// its O is garbage; a row no part sees gets O = 0 and LSE = -inf, as the
// attention kernels write it; a NaN LSE makes the row's O and LSE NaN.
// flashc's fp64 reference is interp::mergeStates.
//
//   flashrun::StateMerger merger(context, "f32", "bf16");
//   merger.merge(stream, {{o1, lse1, D}, {o2, lse2, D}}, {o, lse, D}, rows, D);
//
//===----------------------------------------------------------------------===//
#ifndef FLASHRUN_MERGESTATES_H
#define FLASHRUN_MERGESTATES_H

#include "flashrt/Runtime.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace flashrun {

/// One state in device memory: row r's O at out + r·rowStride elements
/// (headDim of them, contiguous), its LSE (f32) at lse + 4·r. O and LSE
/// list the rows in the same order: a kernel's O [B, H, N, D] (BHSD) with
/// LSE [B, H, N], or any [rows, D] with [rows].
struct StateRef {
  uint64_t out = 0;
  uint64_t lse = 0;
  int64_t rowStride = 0;
};

/// The merge kernel for one pair of element types, JIT-compiled per state
/// count on first use (PTX generated here; no compiler needed).
class StateMerger {
public:
  /// `stateType`: the element type of the parts' O ("f32", "bf16" or
  /// "f16"; flashc's split partials are f32, a kernel's O its element
  /// type); `outType`: the merged O's. Throws InvalidArgument for others.
  StateMerger(flashrt::Context &context, std::string stateType, std::string outType);

  /// Merges `states` (1 to kMaxStates) row by row into `out` on `stream`
  /// (asynchronous; rows x headDim, one warp per row). `out` may be one of
  /// the states only if it is the same StateRef. Throws InvalidArgument
  /// for a bad count, size, pointer, alignment or stride.
  void merge(flashrt::Stream &stream, const std::vector<StateRef> &states, const StateRef &out,
             int64_t rows, int64_t headDim) const;

  static constexpr int kMaxStates = 64;
  /// The kernel's PTX for `states` states (what merge JIT-compiles).
  static std::string ptx(int states, const std::string &stateType, const std::string &outType);
  /// Its entry point's name.
  static std::string kernelName(int states);

private:
  flashrt::Context *context;
  std::string stateType, outType;
  struct Loaded {
    flashrt::Module module;
    flashrt::Function function;
  };
  mutable std::mutex lock;
  mutable std::map<int, std::shared_ptr<Loaded>> byCount;
};

} // namespace flashrun

#endif // FLASHRUN_MERGESTATES_H
