//===- ScalarProgram.h - Scalar ops compiled for fast evaluation -*- C++ -*-===//
//
// Score-mod and mask regions run once per score element, millions of times
// per launch; walking MLIR ops and hashing Values for each would dominate
// the interpreter. A region is therefore compiled once into a flat list of
// instructions over numbered slots. The top-level executor reuses the same
// instruction semantics for the scalar ops between tile ops, so arith and
// math mean one thing everywhere in the interpreter.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_LIB_INTERPRETER_SCALARPROGRAM_H
#define FLASHC_LIB_INTERPRETER_SCALARPROGRAM_H

#include "flashc/Interpreter/Interpreter.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <functional>

namespace flashc::interp {

/// What a compiled scalar instruction reads besides its operands.
struct LaunchEnv {
  const AttentionInputs *inputs = nullptr;
  llvm::StringMap<double> params; // every declared parameter's value
  /// The backward pass's aux tensor gradients (flash.aux_grad_add), by name.
  llvm::StringMap<std::vector<float>> *tensorGrads = nullptr;
  /// A paged_kv kernel: the key length of the sequence the kernel instance
  /// runs (flash.dim key_len reads it when it runs, not when it compiles).
  bool sequenceKeyLengths = false;
  double sequenceKeyLength = 0;
  /// A varlen kernel with packed queries: the same for flash.dim query_len.
  bool sequenceQueryLengths = false;
  double sequenceQueryLength = 0;
};

enum class Opcode {
  Constant,
  AddI, SubI, MulI, DivSI, RemSI, DivUI, RemUI, CeilDivUI, CeilDivSI, FloorDivSI,
  AndI, OrI, XOrI, MaxSI, MinSI, MaxUI, MinUI, CmpI,
  AddF, SubF, MulF, DivF, NegF, MaximumF, MinimumF, MaxNumF, MinNumF, CmpF,
  Select, SIToFP, FPToSI, IndexCast, ExtSI, ExtUI, TruncI, ExtF, TruncF,
  Exp, Exp2, Log, Log2, Tanh, Sqrt, Rsqrt, AbsF, AbsI,
  Param, Dim, SequenceDim, AuxLoad, KVHead,
  AuxGradAdd, // no result: adds its last operand into a gradient element
};

/// One scalar operation. All values are doubles: integers of up to 32 bits
/// and index values are exact in a double, and integer arithmetic converts to
/// int64, computes, and wraps to the result's bit width.
struct ScalarInstr {
  Opcode opcode;
  unsigned intWidth = 64;  // result width of integer results (index: 64)
  bool roundToF32 = false; // f32 result: round like the GPU's f32 unit
  int predicate = 0;       // cmpi / cmpf predicate
  double constant = 0;     // Constant, Param, Dim
  const double *dynamic = nullptr;    // SequenceDim: read when executed
  const HostTensor *tensor = nullptr; // AuxLoad, AuxGradAdd (its shape)
  float *gradient = nullptr;          // AuxGradAdd: indexed like `tensor`
  llvm::SmallVector<int, 4> operands; // slots
  int result = -1;                    // slot

  double execute(const double *slots) const;
};

/// Compiles `op`, numbering its operands through `slotOf` (an op without a
/// result, flash.aux_grad_add, still gets a result slot, written 0). Fails with a
/// message for ops the interpreter does not know.
mlir::FailureOr<ScalarInstr> compileScalarOp(mlir::Operation *op, const LaunchEnv &env,
                                             const std::function<int(mlir::Value)> &slotOf,
                                             std::string &error);

/// A score-mod or mask region, compiled. Slots [0, numArgs) hold the block
/// arguments, then values captured from above, then op results.
struct RegionProgram {
  int numSlots = 0;
  llvm::SmallVector<std::pair<int, mlir::Value>> captures;
  llvm::SmallVector<ScalarInstr> instrs;
  int yieldSlot = -1;

  static mlir::FailureOr<RegionProgram> compile(mlir::Region &region, const LaunchEnv &env,
                                                std::string &error);
  /// Runs the program over `slots` (size numSlots, arguments and captures
  /// filled in) and returns the yielded value.
  double run(double *slots) const {
    for (const ScalarInstr &instr : instrs)
      slots[instr.result] = instr.execute(slots);
    return slots[yieldSlot];
  }
};

} // namespace flashc::interp

#endif // FLASHC_LIB_INTERPRETER_SCALARPROGRAM_H
