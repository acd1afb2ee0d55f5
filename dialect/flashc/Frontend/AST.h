//===- AST.h - The .flash language's syntax tree -----------------*- C++ -*-===//
//
// A .flash file declares attention variants. Parsing builds this tree; Sema
// resolves every name and gives every expression a scalar type; IRGen lowers a
// checked variant to the flash dialect, and the fp64 reference evaluates the
// same tree directly (so the reference never goes through the IR it checks).
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_FRONTEND_AST_H
#define FLASHC_FRONTEND_AST_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SMLoc.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace flashc::frontend {

/// Element types of tensors in memory.
enum class ElementType { BF16, F16, F32, I32 };

/// Types of scalar expressions: i32, f32 and i1.
enum class ScalarType { Int, Float, Bool };

const char *toString(ElementType type);
const char *toString(ScalarType type);

/// The role a dimension plays in q/k/v. Aux tensors reuse these symbols.
enum class DimRole { Batch, Heads, KVHeads, QueryLen, KeyLen, HeadDim };
const char *toString(DimRole role);

/// One entry of a shape: a symbol (`N`) or a fixed size (`128`).
struct Dim {
  std::string symbol; // empty when fixed
  int64_t value = -1; // >= 1 when fixed
  llvm::SMLoc loc;
  bool isFixed() const { return symbol.empty(); }
};

struct TensorDecl {
  std::string name;
  ElementType elementType = ElementType::BF16;
  std::vector<Dim> shape;
  llvm::SMLoc loc;
};

/// `paged k, v: table block_table, lengths kv_len, page 16`: K and V live in
/// a cache of pages, [pages, page, HKV, D] each; key j of sequence b is row
/// j % page of page block_table[b, j / page], and sequence b has kv_len[b]
/// keys (its M: masks, bounds and the key loop see that length). The table
/// (i32 [B, blocks]) and the lengths (i32 [B]) are inputs of the launch, not
/// aux tensors: masks do not read them.
struct PagedDecl {
  std::string table, lengths;
  int64_t pageSize = 0; // 0: given by the tools (--paged PAGE)
  llvm::SMLoc loc;
};

/// `varlen q: offsets cu_seqlens_q` / `varlen k, v: offsets cu_seqlens_k`:
/// a packed batch of ragged sequences, FlashAttention-2's varlen
/// convention. Sequence b's queries (keys) are rows offsets[b] to
/// offsets[b + 1] - 1 of a token-major [total, H, D] tensor, and its N (M) is
/// that count: i and j are positions within the sequence, so masks keep their
/// meaning. The launch's N (M) is the longest sequence. The offsets (i32
/// [B + 1]) are inputs of the launch, not aux tensors.
struct VarlenDecl {
  std::string offsets;
  llvm::SMLoc loc;
};

struct ParamDecl {
  std::string name;
  ScalarType type = ScalarType::Int; // Int or Float
  double defaultValue = 0;           // exact for every i32
  llvm::SMLoc loc;
};

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

enum class ExprKind {
  IntLiteral,
  FloatLiteral,
  BoolLiteral,
  Score,   // s: the scaled score (score expression only)
  Batch,   // b
  Head,    // h: the query head
  Query,   // i: global query position
  Key,     // j: global key position
  Param,   // a runtime scalar parameter
  DimSize, // a shape symbol used as a value (N, M, D, ...)
  Unary,
  Binary,
  Call,
  Index, // aux tensor element: doc[b, i]
};

enum class UnaryOp { Neg, Not };
enum class BinaryOp {
  Add, Sub, Mul, Div, Mod,
  Lt, Le, Gt, Ge, Eq, Ne,
  And, Or,
};
enum class Builtin { Min, Max, Abs, Exp, Log, Tanh, Sqrt, Select };

const char *toString(UnaryOp op);
const char *toString(BinaryOp op);
const char *toString(Builtin fn);

/// One expression node. Sema fills `type`; mixed Int/Float arithmetic is
/// Float (Sema wraps no casts: consumers promote an Int operand of a Float
/// node themselves). Int arithmetic is 32-bit two's complement; Int `/` and
/// `%` truncate toward zero.
struct Expr {
  ExprKind kind;
  llvm::SMLoc loc;
  ScalarType type = ScalarType::Int;

  int64_t intValue = 0;     // IntLiteral
  double floatValue = 0;    // FloatLiteral
  bool boolValue = false;   // BoolLiteral
  std::string name;         // Param, DimSize, Index: the declared name
  int declIndex = -1;       // Param: index in Variant::params;
                            // Index: index in Variant::tensors
  DimRole dimRole = DimRole::Batch; // DimSize: which size it names
  UnaryOp unaryOp = UnaryOp::Neg;
  BinaryOp binaryOp = BinaryOp::Add;
  Builtin builtin = Builtin::Min;
  std::vector<std::unique_ptr<Expr>> operands; // unary/binary/call/index args

  Expr(ExprKind kind, llvm::SMLoc loc) : kind(kind), loc(loc) {}
};

//===----------------------------------------------------------------------===//
// Variants
//===----------------------------------------------------------------------===//

struct Variant {
  std::string name;
  llvm::SMLoc loc;

  /// q: [B, H, N, D]; k, v: [B, HKV, M, D]. Sema has checked the roles.
  TensorDecl q, k, v;
  std::vector<ParamDecl> params;
  std::vector<TensorDecl> tensors; // auxiliary tensors
  std::optional<PagedDecl> paged;  // K and V in a paged cache
  std::optional<VarlenDecl> varlenQueries, varlenKeys; // packed ragged sequences

  std::unique_ptr<Expr> scale; // null: 1/sqrt(D)
  std::unique_ptr<Expr> score; // null: identity
  std::unique_ptr<Expr> mask;  // null: every key visible

  /// The symbol or fixed size that each role resolved to after Sema (indexed
  /// by DimRole). A symbol shared by two roles (k: [B, H, N, D] is
  /// self-attention) forces their sizes equal at run time.
  Dim dims[6];

  const Dim &dim(DimRole role) const { return dims[static_cast<int>(role)]; }
  /// Whether the mask reads an aux tensor (what a run-time block summary
  /// is for).
  bool maskReadsTensors() const;
  /// Whether HKV may be smaller than H (GQA/MQA): k's heads are neither
  /// q's symbol nor the same fixed number.
  bool mayGroupHeads() const {
    const Dim &heads = dim(DimRole::Heads), &kvHeads = dim(DimRole::KVHeads);
    return heads.isFixed() ? !kvHeads.isFixed() || kvHeads.value != heads.value
                           : kvHeads.symbol != heads.symbol;
  }

  /// The role a q/k/v shape symbol names (for aux tensor shapes); the lowest
  /// DimRole when it names two (H in q and k: Heads). Expressions that use
  /// the symbol as a value have the same DimSize role.
  std::optional<DimRole> roleOf(llvm::StringRef symbol) const;
};

struct Module {
  std::vector<Variant> variants;
  const Variant *lookup(llvm::StringRef name) const;
};

/// The leftmost source position of an expression (binary nodes are located
/// at their operator).
llvm::SMLoc startOf(const Expr &expr);

/// Prints in .flash syntax with minimal parentheses (`j <= i && i - j < w`).
std::string toString(const Expr &expr);
/// Prints a checked variant as .flash source (q/k/v as declared or
/// defaulted, params, tensors, then scale/score/mask); it parses back to the
/// same variant.
std::string toString(const Variant &variant);
/// All variants, separated by blank lines.
std::string toString(const Module &module);

} // namespace flashc::frontend

#endif // FLASHC_FRONTEND_AST_H
