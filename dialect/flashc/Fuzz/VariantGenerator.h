//===- VariantGenerator.h - Random valid .flash variants --------*- C++ -*-===//
//
// The differential fuzzer's generator (flashc-fuzz): from a seed, one valid
// attention variant with its problem: an element type, params, aux tensors,
// a mask and a score modification drawn from the expression language's
// grammar (integer and float arithmetic, / and %, min, max, abs, select,
// exp, log, tanh, sqrt, comparisons, && || ! and therefore masks whose keys
// come in pieces, shape symbols, params, aux tensor reads with indices that
// may fall outside), sizes including 1, ragged and N != M, GQA, and a tile.
//
// Comparisons are between integers only: a float comparison can flip
// between the f32 interpreter and the fp64 reference when both sides are
// within rounding of each other, which is no bug. Expressions are trees so
// that a failing case can be minimized node by node.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_FUZZ_VARIANTGENERATOR_H
#define FLASHC_FUZZ_VARIANTGENERATOR_H

#include <cstdint>
#include <string>
#include <vector>

namespace flashc::fuzz {

enum class ExprType { Int, Float, Bool };

/// One node of a generated expression.
struct GenExpr {
  enum class Kind { Literal, Name, Unary, Binary, Call, Index };
  Kind kind = Kind::Literal;
  ExprType type = ExprType::Int;
  /// The literal's text, the name, the operator, the function or the tensor.
  std::string text;
  std::vector<GenExpr> children;

  std::string render() const;
  /// Nodes in the tree, this one included.
  size_t size() const;
};

struct GenTensor {
  std::string name, elementType; // "i32", "f32"
  std::vector<std::string> extents; // shape symbols or numbers
};

struct GenParam {
  std::string name;
  bool isFloat = false;
  std::string defaultValue;
};

/// One generated variant and the problem it runs.
struct GeneratedCase {
  uint64_t seed = 0;
  std::string elementType = "f32"; // bf16, f16 or f32
  std::vector<GenParam> params;
  std::vector<GenTensor> tensors;
  bool hasMask = false, hasScore = false;
  GenExpr mask, score;
  /// Problem sizes and the interpreter's tile.
  int64_t batch = 1, heads = 1, kvHeads = 1, queryLen = 1, keyLen = 1, headDim = 16;
  int64_t blockRows = 16, blockCols = 16;

  /// The .flash source (one variant named `fuzz`).
  std::string source() const;
  /// "B=..,H=..,HKV=..,N=..,M=..,D=.."
  std::string shapeSpec() const;
  /// "Br=..,Bc=.."
  std::string tileSpec() const;
};

/// The case of `seed` (deterministic).
GeneratedCase generateCase(uint64_t seed);

/// Simpler variants of `c`, one step each (smaller sizes, fewer heads, a
/// node replaced by one of its children or a literal): the minimizer tries
/// them in order and keeps the first that still fails the same way.
std::vector<GeneratedCase> simplifications(const GeneratedCase &c);

} // namespace flashc::fuzz

#endif // FLASHC_FUZZ_VARIANTGENERATOR_H
