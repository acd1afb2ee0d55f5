//===- MergeStates.cpp - Merging partial attention states by LSE ----------===//

#include "flashc/Interpreter/MergeStates.h"

#include <cmath>
#include <limits>

using namespace flashc;
using namespace flashc::interp;

bool interp::mergeStates(llvm::ArrayRef<PartialState> states, int64_t headDim,
                         std::vector<float> &out, std::vector<float> &lse, std::string &error) {
  if (states.empty()) {
    error = "merge states: no state to merge";
    return false;
  }
  if (headDim <= 0) {
    error = "merge states: head dim " + std::to_string(headDim) + " is not positive";
    return false;
  }
  size_t rows = states.front().lse.size();
  for (size_t p = 0; p < states.size(); ++p) {
    const PartialState &state = states[p];
    if (state.lse.size() != rows || state.out.size() != rows * static_cast<size_t>(headDim)) {
      error = "merge states: state " + std::to_string(p) + " has " +
              std::to_string(state.lse.size()) + " LSE rows and " +
              std::to_string(state.out.size()) + " O values; state 0 has " +
              std::to_string(rows) + " rows of " + std::to_string(headDim);
      return false;
    }
  }
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  out.assign(rows * headDim, 0.0f);
  lse.assign(rows, 0.0f);
  std::vector<double> sum(headDim);
  for (size_t r = 0; r < rows; ++r) {
    double largest = kNegInf;
    bool poisoned = false;
    for (const PartialState &state : states) {
      double value = state.lse[r];
      poisoned |= std::isnan(value);
      largest = std::max(largest, value);
    }
    float *row = out.data() + r * headDim;
    if (poisoned) {
      std::fill(row, row + headDim, nan);
      lse[r] = nan;
      continue;
    }
    // No part sees a key of this row.
    if (largest == kNegInf) {
      lse[r] = -std::numeric_limits<float>::infinity();
      continue;
    }
    // exp(LSE_p - largest) <= 1; +inf - +inf is NaN, which poisons the row.
    double total = 0;
    std::fill(sum.begin(), sum.end(), 0.0);
    for (const PartialState &state : states) {
      double weight = std::exp(static_cast<double>(state.lse[r]) - largest);
      if (weight == 0)
        continue;
      total += weight;
      for (int64_t d = 0; d < headDim; ++d)
        sum[d] += weight * state.out[r * headDim + d];
    }
    for (int64_t d = 0; d < headDim; ++d)
      row[d] = static_cast<float>(sum[d] / total);
    lse[r] = static_cast<float>(largest + std::log(total));
  }
  return true;
}
