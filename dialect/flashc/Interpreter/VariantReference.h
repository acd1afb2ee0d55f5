//===- VariantReference.h - The fp64 reference of a .flash variant -*- C++ -*-===//
#ifndef FLASHC_INTERPRETER_VARIANTREFERENCE_H
#define FLASHC_INTERPRETER_VARIANTREFERENCE_H

#include "flashc/Frontend/AST.h"
#include "flashc/Interpreter/Reference.h"

namespace flashc::interp {

/// The reference spec of `variant`: its score and mask evaluated from the
/// syntax tree in fp64 (frontend::evaluate), never through flash IR.
/// `inputs` must outlive the returned callbacks.
ReferenceSpec referenceFor(const frontend::Variant &variant, const AttentionInputs &inputs);

/// The error addDerivativeRounding forgives per unit of rounding scale: 64
/// f32 half-ulps (2^-24 each).
constexpr double kDerivativeErrorPerScale = 64.0 / (1 << 24);

/// Sets spec.scoreDerivativeError for a kernel that evaluates `derivative`
/// (the variant's symbolic ∂score/∂s, Derivative.h) in f32:
/// kDerivativeErrorPerScale times its frontend::roundingScale. `derivative`
/// and `inputs` must outlive it.
void addDerivativeRounding(ReferenceSpec &spec, const frontend::Variant &variant,
                           const frontend::Expr &derivative, const AttentionInputs &inputs);

} // namespace flashc::interp

#endif // FLASHC_INTERPRETER_VARIANTREFERENCE_H
