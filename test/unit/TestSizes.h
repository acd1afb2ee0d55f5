//===- TestSizes.h - Problem sizes for the unit tests -----------*- C++ -*-===//
#ifndef FLASHC_TEST_UNIT_TESTSIZES_H
#define FLASHC_TEST_UNIT_TESTSIZES_H

#include "flashc/Interpreter/Interpreter.h"

namespace flashc::test {

/// B, H, HKV, N, M, D of one test launch, in that order.
struct Sizes {
  int64_t B = 1, H = 2, HKV = 2, N = 100, M = 100, D = 32;
};

inline interp::ProblemShape toShape(const Sizes &s) {
  interp::ProblemShape shape;
  shape[flash::DimRole::Batch] = s.B;
  shape[flash::DimRole::Heads] = s.H;
  shape[flash::DimRole::KVHeads] = s.HKV;
  shape[flash::DimRole::QueryLen] = s.N;
  shape[flash::DimRole::KeyLen] = s.M;
  shape[flash::DimRole::HeadDim] = s.D;
  return shape;
}

} // namespace flashc::test

#endif // FLASHC_TEST_UNIT_TESTSIZES_H
