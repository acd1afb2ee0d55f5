//===- VariantReference.cpp - The fp64 reference of a .flash variant ------===//

#include "flashc/Interpreter/VariantReference.h"

#include "flashc/Frontend/Frontend.h"
#include "flashc/IRGen/IRGen.h"

#include <memory>

using namespace flashc;
using namespace flashc::interp;

namespace {

/// What the callbacks share: parameter values and sizes by declaration index.
struct EvalState {
  std::vector<double> params;
  /// Per batch entry: a paged cache's and a varlen batch's sequences each
  /// have their own M (and N).
  std::vector<std::vector<int64_t>> dimSizes;
  std::vector<const HostTensor *> tensors;
};

} // namespace

/// Builds EvalContexts for (b, h, i, j) of `variant` on `inputs`: parameter
/// values in their declared types, sizes, aux tensor reads.
static std::function<frontend::EvalContext(int64_t, int64_t, int64_t, int64_t)>
contextMaker(const frontend::Variant &variant, const AttentionInputs &inputs) {
  auto state = std::make_shared<EvalState>();
  for (const frontend::ParamDecl &param : variant.params) {
    auto it = inputs.params.find(param.name);
    double value = it != inputs.params.end() ? it->second : param.defaultValue;
    // Parameters have their declared type, as in the kernel.
    state->params.push_back(param.type == frontend::ScalarType::Int
                                ? static_cast<double>(static_cast<int32_t>(value))
                                : static_cast<double>(static_cast<float>(value)));
  }
  for (int64_t b = 0; b < inputs.shape.batch(); ++b) {
    std::vector<int64_t> sizes(std::begin(inputs.shape.sizes), std::end(inputs.shape.sizes));
    sizes[static_cast<int>(flash::DimRole::KeyLen)] = sequenceKeyLength(inputs, b);
    sizes[static_cast<int>(flash::DimRole::QueryLen)] = sequenceQueryLength(inputs, b);
    state->dimSizes.push_back(std::move(sizes));
  }
  for (const frontend::TensorDecl &tensor : variant.tensors) {
    auto it = inputs.tensors.find(tensor.name);
    state->tensors.push_back(it == inputs.tensors.end() ? nullptr : &it->second);
  }
  return [state](int64_t b, int64_t h, int64_t i, int64_t j) {
    frontend::EvalContext context;
    context.b = b;
    context.h = h;
    context.i = i;
    context.j = j;
    context.params = state->params;
    context.dimSizes = state->dimSizes[b];
    context.readTensor = [state](int index, llvm::ArrayRef<int64_t> indices) {
      const HostTensor *tensor = state->tensors[index];
      return tensor ? tensor->at(indices) : 0.0;
    };
    return context;
  };
}

void interp::addDerivativeRounding(ReferenceSpec &spec, const frontend::Variant &variant,
                                   const frontend::Expr &derivative,
                                   const AttentionInputs &inputs) {
  auto makeContext = contextMaker(variant, inputs);
  spec.scoreDerivativeError = [makeContext, &derivative](double s, int64_t b, int64_t h,
                                                        int64_t i, int64_t j) {
    frontend::EvalContext context = makeContext(b, h, i, j);
    context.score = s;
    return kDerivativeErrorPerScale * frontend::roundingScale(derivative, context);
  };
}

ReferenceSpec interp::referenceFor(const frontend::Variant &variant,
                                   const AttentionInputs &inputs) {
  auto makeContext = contextMaker(variant, inputs);
  ReferenceSpec spec;
  spec.scale = frontend::evaluateScale(variant, inputs.shape.headDim());
  if (const frontend::Expr *score = variant.score.get())
    spec.score = [makeContext, score](double s, int64_t b, int64_t h, int64_t i, int64_t j) {
      frontend::EvalContext context = makeContext(b, h, i, j);
      context.score = s;
      return frontend::evaluate(*score, context);
    };
  if (const frontend::Expr *mask = variant.mask.get())
    spec.mask = [makeContext, mask](int64_t b, int64_t h, int64_t i, int64_t j) {
      return frontend::evaluate(*mask, makeContext(b, h, i, j)) != 0;
    };
  // The backward's derivatives by dual numbers over the same tree, never
  // through the symbolic derivatives the kernel uses (Derivative.h).
  if (const frontend::Expr *score = variant.score.get()) {
    spec.scoreDerivative = [makeContext, score](double s, int64_t b, int64_t h, int64_t i,
                                                int64_t j) {
      frontend::EvalContext context = makeContext(b, h, i, j);
      context.score = s;
      return frontend::evaluateTangent(*score, context, nullptr).derivative;
    };
    auto reads = std::make_shared<std::vector<const frontend::Expr *>>();
    std::function<void(const frontend::Expr &)> collect = [&](const frontend::Expr &expr) {
      if (expr.kind == frontend::ExprKind::Index && expr.type == frontend::ScalarType::Float)
        reads->push_back(&expr);
      for (const auto &operand : expr.operands)
        collect(*operand);
    };
    collect(*score);
    if (!reads->empty())
      spec.tensorPartials = [makeContext, score, reads, &variant](
                                double s, int64_t b, int64_t h, int64_t i, int64_t j,
                                const ReferenceSpec::TensorPartialFn &add) {
        frontend::EvalContext context = makeContext(b, h, i, j);
        context.score = s;
        for (const frontend::Expr *read : *reads) {
          llvm::SmallVector<int64_t, 4> indices;
          for (const auto &operand : read->operands)
            indices.push_back(static_cast<int64_t>(frontend::evaluate(*operand, context)));
          add(variant.tensors[read->declIndex].name, indices,
              frontend::evaluateTangent(*score, context, read).derivative);
        }
      };
  }
  return spec;
}
