//===- BackwardCheck.cpp - The backward pass against fp64 -----------------===//

#include "flashc/Interpreter/BackwardCheck.h"

#include "flashc/Interpreter/VariantReference.h"

#include <chrono>
#include <cmath>

using namespace mlir;
using namespace flashc;
using namespace flashc::interp;

bool BackwardCheck::passes() const {
  return llvm::all_of(gradients, [](const GradientCheck &check) { return check.passes(); });
}

double interp::gradientBound(Type elementType) {
  // Measured on the examples: bf16 ~2.5e-3, f16 ~3e-4, f32 ~5e-7.
  if (elementType.isBF16())
    return 1e-2;
  if (elementType.isF16())
    return 2e-3;
  return 1e-5;
}

LogicalResult interp::checkBackward(const AttentionOutputs &outputs,
                                    flash::BackwardKernelOp backward,
                                    const frontend::Variant &variant,
                                    const AttentionInputs &inputs,
                                    llvm::ArrayRef<float> outputGrad, BackwardCheck &result,
                                    std::string &error) {
  auto start = std::chrono::steady_clock::now();
  BackwardInputs backwardInputs{outputs.out, outputs.lse,
                                std::vector<float>(outputGrad.begin(), outputGrad.end())};
  AttentionGradients gradients;
  if (failed(runBackwardKernel(backward, inputs, backwardInputs, gradients, error)))
    return failure();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.tiles = gradients.tiles;
  result.emptyRows = llvm::count_if(outputs.lse, [](float v) { return std::isinf(v); });

  ReferenceSpec spec = referenceFor(variant, inputs);
  ReferenceGradients reference = naiveAttentionBackward(inputs, spec, outputGrad);
  double bound = gradientBound(backward.getElementType());
  result.gradients.clear();
  result.gradients.push_back({"dQ", compare(gradients.dq, reference.dq), bound});
  result.gradients.push_back({"dK", compare(gradients.dk, reference.dk), bound});
  result.gradients.push_back({"dV", compare(gradients.dv, reference.dv), bound});
  // Aux gradients are sums over every (i, j) that reads an element; their
  // error is relative to the magnitudes summed (tensorGradSizes), since the
  // sum itself may cancel to 0.
  for (const auto &entry : gradients.tensorGrads) {
    std::vector<double> zeros(entry.getValue().size(), 0.0);
    auto lookup = [&](const llvm::StringMap<std::vector<double>> &map) {
      auto it = map.find(entry.getKey());
      return it == map.end() ? llvm::ArrayRef<double>(zeros) : llvm::ArrayRef<double>(it->second);
    };
    result.gradients.push_back({("d(" + entry.getKey() + ")").str(),
                                compare(entry.getValue(), lookup(reference.tensorGrads),
                                        lookup(reference.tensorGradSizes)),
                                bound});
  }
  return success();
}
