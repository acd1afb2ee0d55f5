//===- ScalarProgram.cpp - Scalar ops compiled for fast evaluation --------===//

#include "ScalarProgram.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace flashc;
using namespace flashc::interp;

namespace {

/// Wraps an integer to `width` bits, two's complement (i1 is 0 or 1).
double wrapInt(int64_t value, unsigned width) {
  if (width >= 64)
    return static_cast<double>(value);
  uint64_t mask = (uint64_t(1) << width) - 1;
  uint64_t bits = static_cast<uint64_t>(value) & mask;
  if (width > 1 && (bits >> (width - 1)))
    return static_cast<double>(static_cast<int64_t>(bits | ~mask));
  return static_cast<double>(bits);
}

/// The unsigned view of a value of `width` bits.
uint64_t asUnsigned(double value, unsigned width) {
  uint64_t bits = static_cast<uint64_t>(static_cast<int64_t>(value));
  return width >= 64 ? bits : bits & ((uint64_t(1) << width) - 1);
}

bool evalCmpI(arith::CmpIPredicate predicate, double lhs, double rhs, unsigned width) {
  int64_t a = static_cast<int64_t>(lhs), b = static_cast<int64_t>(rhs);
  uint64_t ua = asUnsigned(lhs, width), ub = asUnsigned(rhs, width);
  switch (predicate) {
  case arith::CmpIPredicate::eq: return a == b;
  case arith::CmpIPredicate::ne: return a != b;
  case arith::CmpIPredicate::slt: return a < b;
  case arith::CmpIPredicate::sle: return a <= b;
  case arith::CmpIPredicate::sgt: return a > b;
  case arith::CmpIPredicate::sge: return a >= b;
  case arith::CmpIPredicate::ult: return ua < ub;
  case arith::CmpIPredicate::ule: return ua <= ub;
  case arith::CmpIPredicate::ugt: return ua > ub;
  case arith::CmpIPredicate::uge: return ua >= ub;
  }
  return false;
}

bool evalCmpF(arith::CmpFPredicate predicate, double a, double b) {
  bool unordered = std::isnan(a) || std::isnan(b);
  switch (predicate) {
  case arith::CmpFPredicate::AlwaysFalse: return false;
  case arith::CmpFPredicate::OEQ: return !unordered && a == b;
  case arith::CmpFPredicate::OGT: return !unordered && a > b;
  case arith::CmpFPredicate::OGE: return !unordered && a >= b;
  case arith::CmpFPredicate::OLT: return !unordered && a < b;
  case arith::CmpFPredicate::OLE: return !unordered && a <= b;
  case arith::CmpFPredicate::ONE: return !unordered && a != b;
  case arith::CmpFPredicate::ORD: return !unordered;
  case arith::CmpFPredicate::UEQ: return unordered || a == b;
  case arith::CmpFPredicate::UGT: return unordered || a > b;
  case arith::CmpFPredicate::UGE: return unordered || a >= b;
  case arith::CmpFPredicate::ULT: return unordered || a < b;
  case arith::CmpFPredicate::ULE: return unordered || a <= b;
  case arith::CmpFPredicate::UNE: return unordered || a != b;
  case arith::CmpFPredicate::UNO: return unordered;
  case arith::CmpFPredicate::AlwaysTrue: return true;
  }
  return false;
}

/// NaN-propagating minimum/maximum (arith.minimumf / maximumf).
double propagatingMinMax(double a, double b, bool isMax) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<double>::quiet_NaN();
  if (a == b) // -0 < +0 for these ops
    return isMax ? (std::signbit(a) ? b : a) : (std::signbit(a) ? a : b);
  return isMax ? std::max(a, b) : std::min(a, b);
}

unsigned intWidthOf(Type type) {
  if (auto intType = dyn_cast<IntegerType>(type))
    return intType.getWidth();
  return 64; // index
}

} // namespace

double ScalarInstr::execute(const double *slots) const {
  auto in = [&](int i) { return slots[operands[i]]; };
  auto i64 = [&](int i) { return static_cast<int64_t>(slots[operands[i]]); };
  double r = 0;
  switch (opcode) {
  case Opcode::Constant:
  case Opcode::Param:
  case Opcode::Dim:
    r = constant;
    break;
  case Opcode::SequenceDim:
    r = *dynamic;
    break;
  case Opcode::AddI: r = wrapInt(i64(0) + i64(1), intWidth); break;
  case Opcode::SubI: r = wrapInt(i64(0) - i64(1), intWidth); break;
  case Opcode::MulI:
    r = wrapInt(static_cast<int64_t>(static_cast<uint64_t>(i64(0)) * static_cast<uint64_t>(i64(1))),
                intWidth);
    break;
  // Division by zero is undefined in arith; the interpreter gives 0 rather
  // than crashing the host (the front end never emits it unguarded).
  case Opcode::DivSI: r = i64(1) == 0 ? 0 : wrapInt(i64(0) / i64(1), intWidth); break;
  case Opcode::RemSI: r = i64(1) == 0 ? 0 : wrapInt(i64(0) % i64(1), intWidth); break;
  case Opcode::DivUI: {
    uint64_t b = asUnsigned(in(1), intWidth);
    r = b == 0 ? 0 : wrapInt(static_cast<int64_t>(asUnsigned(in(0), intWidth) / b), intWidth);
    break;
  }
  case Opcode::RemUI: {
    uint64_t b = asUnsigned(in(1), intWidth);
    r = b == 0 ? 0 : wrapInt(static_cast<int64_t>(asUnsigned(in(0), intWidth) % b), intWidth);
    break;
  }
  case Opcode::CeilDivUI: {
    uint64_t a = asUnsigned(in(0), intWidth), b = asUnsigned(in(1), intWidth);
    r = b == 0 ? 0 : wrapInt(static_cast<int64_t>((a + b - 1) / b), intWidth);
    break;
  }
  case Opcode::CeilDivSI:
  case Opcode::FloorDivSI: {
    int64_t a = i64(0), b = i64(1);
    if (b == 0) {
      r = 0;
      break;
    }
    int64_t q = a / b;
    bool inexact = q * b != a;
    if (inexact && opcode == Opcode::CeilDivSI && ((a < 0) == (b < 0)))
      ++q;
    if (inexact && opcode == Opcode::FloorDivSI && ((a < 0) != (b < 0)))
      --q;
    r = wrapInt(q, intWidth);
    break;
  }
  case Opcode::AndI: r = wrapInt(i64(0) & i64(1), intWidth); break;
  case Opcode::OrI: r = wrapInt(i64(0) | i64(1), intWidth); break;
  case Opcode::XOrI: r = wrapInt(i64(0) ^ i64(1), intWidth); break;
  case Opcode::MaxSI: r = static_cast<double>(std::max(i64(0), i64(1))); break;
  case Opcode::MinSI: r = static_cast<double>(std::min(i64(0), i64(1))); break;
  case Opcode::MaxUI:
    r = asUnsigned(in(0), intWidth) >= asUnsigned(in(1), intWidth) ? in(0) : in(1);
    break;
  case Opcode::MinUI:
    r = asUnsigned(in(0), intWidth) <= asUnsigned(in(1), intWidth) ? in(0) : in(1);
    break;
  case Opcode::CmpI:
    // The operands' width, not the i1 result's, decides unsigned views.
    r = evalCmpI(static_cast<arith::CmpIPredicate>(predicate), in(0), in(1), intWidth) ? 1 : 0;
    break;
  case Opcode::AddF: r = in(0) + in(1); break;
  case Opcode::SubF: r = in(0) - in(1); break;
  case Opcode::MulF: r = in(0) * in(1); break;
  case Opcode::DivF: r = in(0) / in(1); break;
  case Opcode::NegF: r = -in(0); break;
  case Opcode::MaximumF: r = propagatingMinMax(in(0), in(1), true); break;
  case Opcode::MinimumF: r = propagatingMinMax(in(0), in(1), false); break;
  case Opcode::MaxNumF: r = std::fmax(in(0), in(1)); break;
  case Opcode::MinNumF: r = std::fmin(in(0), in(1)); break;
  case Opcode::CmpF:
    r = evalCmpF(static_cast<arith::CmpFPredicate>(predicate), in(0), in(1)) ? 1 : 0;
    break;
  case Opcode::Select: r = in(0) != 0 ? in(1) : in(2); break;
  case Opcode::SIToFP: r = in(0); break;
  case Opcode::FPToSI: {
    double v = in(0);
    r = std::isnan(v) ? 0 : wrapInt(static_cast<int64_t>(std::trunc(v)), intWidth);
    break;
  }
  case Opcode::IndexCast:
  case Opcode::ExtSI: // values are stored sign-extended already
  case Opcode::TruncI: r = wrapInt(i64(0), intWidth); break;
  case Opcode::ExtUI: r = static_cast<double>(asUnsigned(in(0), predicate)); break;
  case Opcode::ExtF:
  case Opcode::TruncF: r = in(0); break;
  case Opcode::Exp: r = std::exp(in(0)); break;
  case Opcode::Exp2: r = std::exp2(in(0)); break;
  case Opcode::Log: r = std::log(in(0)); break;
  case Opcode::Log2: r = std::log2(in(0)); break;
  case Opcode::Tanh: r = std::tanh(in(0)); break;
  case Opcode::Sqrt: r = std::sqrt(in(0)); break;
  case Opcode::Rsqrt: r = 1.0 / std::sqrt(in(0)); break;
  case Opcode::AbsF: r = std::fabs(in(0)); break;
  case Opcode::AbsI: r = wrapInt(std::llabs(i64(0)), intWidth); break;
  case Opcode::AuxLoad: {
    int64_t indices[4];
    for (size_t i = 0; i < operands.size(); ++i)
      indices[i] = i64(static_cast<int>(i));
    r = tensor->at(llvm::ArrayRef<int64_t>(indices, operands.size()));
    break;
  }
  case Opcode::AuxGradAdd: {
    // The indices, then the value; f32 adds like the GPU's atomics.
    size_t rank = operands.size() - 1;
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d) {
      int64_t at = i64(static_cast<int>(d));
      if (at < 0 || at >= tensor->shape[d])
        return 0; // outside the tensor: the read there gave 0
      offset = offset * tensor->shape[d] + at;
    }
    gradient[offset] = static_cast<float>(gradient[offset] + in(static_cast<int>(rank)));
    return 0;
  }
  case Opcode::KVHead: // `predicate` holds the group size H / HKV
    r = static_cast<double>(i64(0) / static_cast<int64_t>(predicate));
    break;
  }
  // Every f32 result is rounded, so interpreter scalars match f32 hardware
  // arithmetic up to the accuracy of exp/log/tanh.
  return roundToF32 ? static_cast<double>(static_cast<float>(r)) : r;
}

FailureOr<ScalarInstr>
interp::compileScalarOp(Operation *op, const LaunchEnv &env,
                        const std::function<int(Value)> &slotOf, std::string &error) {
  auto fail = [&](const Twine &message) -> FailureOr<ScalarInstr> {
    std::string location;
    llvm::raw_string_ostream os(location);
    op->getLoc().print(os);
    error = (message + " (at " + location + ")").str();
    return failure();
  };
  if (auto add = dyn_cast<flash::AuxGradAddOp>(op)) {
    auto tensor = env.inputs->tensors.find(add.getTensor());
    if (!env.tensorGrads || tensor == env.inputs->tensors.end())
      return fail("interpreter: no gradient of aux tensor '" + add.getTensor() + "'");
    std::vector<float> &gradient = (*env.tensorGrads)[add.getTensor()];
    ScalarInstr instr{Opcode::AuxGradAdd};
    instr.tensor = &tensor->second;
    instr.gradient = gradient.data();
    for (Value operand : op->getOperands())
      instr.operands.push_back(slotOf(operand));
    return instr;
  }
  if (op->getNumResults() != 1)
    return fail("interpreter: '" + op->getName().getStringRef() +
                "' is not a scalar operation");
  Type resultType = op->getResult(0).getType();
  if (isa<ShapedType>(resultType))
    return fail("interpreter: '" + op->getName().getStringRef() +
                "' on tensors is not supported; only scalar arith/math ops are");

  ScalarInstr instr{Opcode::Constant};
  instr.roundToF32 = resultType.isF32();
  if (resultType.isIntOrIndex())
    instr.intWidth = intWidthOf(resultType);
  for (Value operand : op->getOperands())
    instr.operands.push_back(slotOf(operand));

  std::optional<Opcode> opcode =
      llvm::TypeSwitch<Operation *, std::optional<Opcode>>(op)
          .Case([&](arith::ConstantOp constant) -> std::optional<Opcode> {
            Attribute value = constant.getValue();
            if (auto intAttr = dyn_cast<IntegerAttr>(value)) {
              instr.constant = resultType.isInteger(1)
                                   ? static_cast<double>(intAttr.getValue().getZExtValue())
                                   : static_cast<double>(intAttr.getValue().getSExtValue());
              return Opcode::Constant;
            }
            if (auto floatAttr = dyn_cast<FloatAttr>(value)) {
              instr.constant = floatAttr.getValueAsDouble();
              return Opcode::Constant;
            }
            return std::nullopt;
          })
          .Case([](arith::AddIOp) { return Opcode::AddI; })
          .Case([](arith::SubIOp) { return Opcode::SubI; })
          .Case([](arith::MulIOp) { return Opcode::MulI; })
          .Case([](arith::DivSIOp) { return Opcode::DivSI; })
          .Case([](arith::RemSIOp) { return Opcode::RemSI; })
          .Case([](arith::DivUIOp) { return Opcode::DivUI; })
          .Case([](arith::RemUIOp) { return Opcode::RemUI; })
          .Case([](arith::CeilDivUIOp) { return Opcode::CeilDivUI; })
          .Case([](arith::CeilDivSIOp) { return Opcode::CeilDivSI; })
          .Case([](arith::FloorDivSIOp) { return Opcode::FloorDivSI; })
          .Case([](arith::AndIOp) { return Opcode::AndI; })
          .Case([](arith::OrIOp) { return Opcode::OrI; })
          .Case([](arith::XOrIOp) { return Opcode::XOrI; })
          .Case([](arith::MaxSIOp) { return Opcode::MaxSI; })
          .Case([](arith::MinSIOp) { return Opcode::MinSI; })
          .Case([](arith::MaxUIOp) { return Opcode::MaxUI; })
          .Case([](arith::MinUIOp) { return Opcode::MinUI; })
          .Case([&](arith::CmpIOp cmp) {
            instr.predicate = static_cast<int>(cmp.getPredicate());
            instr.intWidth = intWidthOf(cmp.getLhs().getType());
            return Opcode::CmpI;
          })
          .Case([](arith::AddFOp) { return Opcode::AddF; })
          .Case([](arith::SubFOp) { return Opcode::SubF; })
          .Case([](arith::MulFOp) { return Opcode::MulF; })
          .Case([](arith::DivFOp) { return Opcode::DivF; })
          .Case([](arith::NegFOp) { return Opcode::NegF; })
          .Case([](arith::MaximumFOp) { return Opcode::MaximumF; })
          .Case([](arith::MinimumFOp) { return Opcode::MinimumF; })
          .Case([](arith::MaxNumFOp) { return Opcode::MaxNumF; })
          .Case([](arith::MinNumFOp) { return Opcode::MinNumF; })
          .Case([&](arith::CmpFOp cmp) {
            instr.predicate = static_cast<int>(cmp.getPredicate());
            return Opcode::CmpF;
          })
          .Case([](arith::SelectOp) { return Opcode::Select; })
          .Case([](arith::SIToFPOp) { return Opcode::SIToFP; })
          .Case([](arith::FPToSIOp) { return Opcode::FPToSI; })
          .Case([](arith::IndexCastOp) { return Opcode::IndexCast; })
          .Case([](arith::ExtSIOp) { return Opcode::ExtSI; })
          .Case([&](arith::ExtUIOp ext) {
            instr.predicate = static_cast<int>(intWidthOf(ext.getIn().getType()));
            return Opcode::ExtUI;
          })
          .Case([](arith::TruncIOp) { return Opcode::TruncI; })
          .Case([](arith::ExtFOp) { return Opcode::ExtF; })
          .Case([](arith::TruncFOp) { return Opcode::TruncF; })
          .Case([](math::ExpOp) { return Opcode::Exp; })
          .Case([](math::Exp2Op) { return Opcode::Exp2; })
          .Case([](math::LogOp) { return Opcode::Log; })
          .Case([](math::Log2Op) { return Opcode::Log2; })
          .Case([](math::TanhOp) { return Opcode::Tanh; })
          .Case([](math::SqrtOp) { return Opcode::Sqrt; })
          .Case([](math::RsqrtOp) { return Opcode::Rsqrt; })
          .Case([](math::AbsFOp) { return Opcode::AbsF; })
          .Case([](math::AbsIOp) { return Opcode::AbsI; })
          .Case([&](flash::ParamOp param) {
            instr.constant = env.params.lookup(param.getName());
            return Opcode::Param;
          })
          .Case([&](flash::DimOp dim) {
            if (env.sequenceKeyLengths && dim.getRole() == flash::DimRole::KeyLen) {
              instr.dynamic = &env.sequenceKeyLength;
              return Opcode::SequenceDim;
            }
            if (env.sequenceQueryLengths && dim.getRole() == flash::DimRole::QueryLen) {
              instr.dynamic = &env.sequenceQueryLength;
              return Opcode::SequenceDim;
            }
            instr.constant = static_cast<double>(env.inputs->shape[dim.getRole()]);
            return Opcode::Dim;
          })
          .Case([&](flash::AuxLoadOp load) -> std::optional<Opcode> {
            auto it = env.inputs->tensors.find(load.getTensor());
            if (it == env.inputs->tensors.end())
              return std::nullopt;
            instr.tensor = &it->second;
            return Opcode::AuxLoad;
          })
          .Case([&](flash::KVHeadOp) {
            const ProblemShape &shape = env.inputs->shape;
            instr.predicate = static_cast<int>(shape.heads() / shape.kvHeads());
            return Opcode::KVHead;
          })
          .Default([](Operation *) { return std::nullopt; });
  if (!opcode)
    return fail("interpreter: unsupported operation '" + op->getName().getStringRef() + "'");
  instr.opcode = *opcode;
  return instr;
}

FailureOr<RegionProgram> RegionProgram::compile(Region &region, const LaunchEnv &env,
                                                std::string &error) {
  RegionProgram program;
  llvm::DenseMap<Value, int> slots;
  Block &block = region.front();
  for (BlockArgument arg : block.getArguments())
    slots[arg] = program.numSlots++;
  auto slotOf = [&](Value value) {
    auto [it, inserted] = slots.try_emplace(value, program.numSlots);
    if (inserted) { // defined above the region: read once per tile
      program.captures.push_back({program.numSlots, value});
      ++program.numSlots;
    }
    return it->second;
  };
  for (Operation &op : block) {
    if (auto yield = dyn_cast<flash::YieldOp>(op)) {
      program.yieldSlot = slotOf(yield.getValue());
      break;
    }
    FailureOr<ScalarInstr> instr = compileScalarOp(&op, env, slotOf, error);
    if (failed(instr))
      return failure();
    instr->result = program.numSlots++;
    if (op.getNumResults() == 1)
      slots[op.getResult(0)] = instr->result;
    program.instrs.push_back(std::move(*instr));
  }
  return program;
}
