//===- Sema.cpp - Names, types and shape roles of a .flash variant --------===//
//
// Checks one parsed variant:
//  1. q, k and v are all declared or all omitted (then the defaults
//     q: bf16[B, H, N, D], k, v: bf16[B, HKV, M, D] apply) and share a dtype;
//  2. shape roles unify: positional roles q = [Batch, Heads, QueryLen,
//     HeadDim], k, v = [Batch, KVHeads, KeyLen, HeadDim]; all entries of one
//     role agree (a symbol against a number fixes the symbol); one symbol
//     may serve two roles only as {Heads, KVHeads} or {QueryLen, KeyLen};
//  3. declared names (shape symbols, params, tensors) are unique and do not
//     reuse keywords, s/b/h/i/j or builtin function names;
//  4. aux tensor shapes only use shape symbols and positive integers (a
//     symbol that q/k/v fix to a number is replaced by that number);
//  5. every expression resolves its names and gets a type; mask is Bool,
//     score is numeric, scale is numeric and a compile-time constant.
//
// Errors that follow from an earlier parse error are not reported again:
// names whose declaration failed are "poisoned" and resolve silently, and
// unknown names are not reported while q/k/v are incomplete.
//
//===----------------------------------------------------------------------===//

#include "Lexer.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>

using namespace flashc::frontend;
using namespace flashc::frontend::detail;
using llvm::SMLoc;
using llvm::StringRef;
using llvm::Twine;

namespace {

constexpr int kNumRoles = 6;

/// Where each role appears in q (0), k (1) and v (2).
struct RoleSlot {
  int tensor;
  int index;
  DimRole role;
};
constexpr RoleSlot kSlots[12] = {
    {0, 0, DimRole::Batch},   {0, 1, DimRole::Heads},
    {0, 2, DimRole::QueryLen}, {0, 3, DimRole::HeadDim},
    {1, 0, DimRole::Batch},   {1, 1, DimRole::KVHeads},
    {1, 2, DimRole::KeyLen},  {1, 3, DimRole::HeadDim},
    {2, 0, DimRole::Batch},   {2, 1, DimRole::KVHeads},
    {2, 2, DimRole::KeyLen},  {2, 3, DimRole::HeadDim},
};
const char *const kTensorNames[3] = {"q", "k", "v"};
const char *const kDefaultShapes =
    "q: bf16[B, H, N, D], k, v: bf16[B, HKV, M, D]";

const char *describeRole(DimRole role) {
  switch (role) {
  case DimRole::Batch: return "the batch size";
  case DimRole::Heads: return "the number of heads";
  case DimRole::KVHeads: return "the number of kv heads";
  case DimRole::QueryLen: return "the query length";
  case DimRole::KeyLen: return "the key length";
  case DimRole::HeadDim: return "the head dim";
  }
  return "a dimension";
}

bool rolesCompatible(DimRole a, DimRole b) {
  auto pair = [&](DimRole x, DimRole y) {
    return (a == x && b == y) || (a == y && b == x);
  };
  return a == b || pair(DimRole::Heads, DimRole::KVHeads) ||
         pair(DimRole::QueryLen, DimRole::KeyLen);
}

bool isNumeric(ScalarType type) { return type != ScalarType::Bool; }

ScalarType promote(ScalarType a, ScalarType b) {
  return a == ScalarType::Float || b == ScalarType::Float ? ScalarType::Float
                                                          : ScalarType::Int;
}

enum class Item { Scale, Score, Mask };
const char *itemName(Item item) {
  switch (item) {
  case Item::Scale: return "scale";
  case Item::Score: return "score";
  case Item::Mask: return "mask";
  }
  return "expression";
}

const char *opSpelling(const Expr &e) {
  return e.kind == ExprKind::Unary ? toString(e.unaryOp) : toString(e.binaryOp);
}

class Sema {
public:
  Sema(Variant &variant, const VariantSyntax &syntax, Diagnostics &diags)
      : variant(variant), syntax(syntax), diags(diags) {}

  bool run();

private:
  void error(SMLoc loc, const Twine &message) {
    ok = false;
    diags.error(loc, message);
  }

  void checkQKV();
  void collectSymbols();
  void unifyShapes();
  void checkDeclarations();
  void checkTensorShapes();
  void checkSequenceLength(DimRole role, const char *whose, const char *entry);
  void checkVarlen();
  void checkItem(Expr *expr, Item item);
  std::optional<ScalarType> check(Expr &expr, Item item);
  std::optional<ScalarType> checkName(Expr &expr, Item item);
  std::optional<ScalarType> checkIndex(Expr &expr, Item item);
  std::optional<ScalarType> checkUnary(Expr &expr, Item item);
  std::optional<ScalarType> checkBinary(Expr &expr, Item item);
  std::optional<ScalarType> checkCall(Expr &expr, Item item);
  std::string symbolList() const;

  TensorDecl &qkv(int index) {
    return index == 0 ? variant.q : index == 1 ? variant.k : variant.v;
  }

  Variant &variant;
  const VariantSyntax &syntax;
  Diagnostics &diags;
  bool ok = true;

  bool usingDefaults = false;
  /// q, k and v are all there and parsed: names can be judged unknown.
  bool shapesComplete = false;

  struct SymbolUse {
    SMLoc loc;
    DimRole role;
    int tensor, index;
  };
  /// Shape symbols in order of first appearance, with all their uses.
  llvm::SmallVector<std::string, 8> symbolOrder;
  llvm::StringMap<llvm::SmallVector<SymbolUse, 4>> symbolUses;
  llvm::StringMap<DimRole> symbolRole;  // the lowest role of each symbol
  llvm::StringMap<int64_t> fixedSymbols; // symbols fixed to a number
  llvm::StringMap<int> paramIndex, tensorIndex;
  llvm::StringSet<> reportedUnknown; // each unknown name is reported once
};

} // namespace

//===----------------------------------------------------------------------===//
// q, k, v and shapes
//===----------------------------------------------------------------------===//

void Sema::checkQKV() {
  int written = 0;
  for (bool w : syntax.written)
    written += w ? 1 : 0;

  if (written == 0) {
    usingDefaults = true;
    auto make = [&](const char *name, const char *heads, const char *len) {
      TensorDecl decl;
      decl.name = name;
      decl.elementType = ElementType::BF16;
      decl.loc = variant.loc;
      for (const char *symbol : {"B", heads, len, "D"}) {
        Dim dim;
        dim.symbol = symbol;
        dim.loc = variant.loc;
        decl.shape.push_back(dim);
      }
      return decl;
    };
    variant.q = make("q", "H", "N");
    variant.k = make("k", "HKV", "M");
    variant.v = make("v", "HKV", "M");
    shapesComplete = true;
    return;
  }

  if (written < 3) {
    if (syntax.skippedItem)
      return; // the missing ones may be in the text skipped after an error
    llvm::SmallVector<StringRef, 3> have, missing;
    int first = -1;
    for (int t = 0; t < 3; ++t) {
      (syntax.written[t] ? have : missing).push_back(kTensorNames[t]);
      if (syntax.written[t] && (first < 0 || qkv(t).loc.getPointer() <
                                                 qkv(first).loc.getPointer()))
        first = t;
    }
    auto join = [](llvm::ArrayRef<StringRef> names) {
      return names.size() == 1 ? names[0].str()
                               : names[0].str() + " and " + names[1].str();
    };
    error(qkv(first).loc,
          join(have) + (have.size() == 1 ? " is" : " are") +
              " declared but " + join(missing) +
              (missing.size() == 1 ? " is" : " are") +
              " not; declare all of q, k and v, or none of them to use the "
              "defaults " + kDefaultShapes);
    return;
  }

  shapesComplete = !syntax.shapesBroken;
  if (!syntax.qkvTypeBroken) {
    for (int t = 1; t < 3; ++t) {
      if (qkv(t).elementType != variant.q.elementType) {
        error(qkv(t).loc, Twine("q, k and v must have the same dtype, but q "
                                "is ") +
                              toString(variant.q.elementType) + " and " +
                              kTensorNames[t] + " is " +
                              toString(qkv(t).elementType));
        break;
      }
    }
  }
}

void Sema::collectSymbols() {
  // Walk q, k, v in source order so "first use" means what the reader sees.
  int order[3] = {0, 1, 2};
  std::stable_sort(order, order + 3, [&](int a, int b) {
    return qkv(a).loc.getPointer() < qkv(b).loc.getPointer();
  });
  for (int t : order) {
    const TensorDecl &decl = qkv(t);
    for (const RoleSlot &slot : kSlots) {
      if (slot.tensor != t || slot.index >= static_cast<int>(decl.shape.size()))
        continue;
      const Dim &dim = decl.shape[slot.index];
      if (dim.isFixed())
        continue;
      auto &uses = symbolUses[dim.symbol];
      if (uses.empty())
        symbolOrder.push_back(dim.symbol);
      uses.push_back({dim.loc, slot.role, t, slot.index});
      auto it = symbolRole.find(dim.symbol);
      if (it == symbolRole.end())
        symbolRole[dim.symbol] = slot.role;
      else if (static_cast<int>(slot.role) < static_cast<int>(it->second))
        it->second = slot.role;
    }
  }
}

void Sema::unifyShapes() {
  bool conflict = false;

  // A symbol may play two roles only as {Heads, KVHeads} or {QueryLen,
  // KeyLen}.
  for (const std::string &symbol : symbolOrder) {
    const auto &uses = symbolUses[symbol];
    llvm::SmallVector<const SymbolUse *, 4> firstOfRole;
    for (const SymbolUse &use : uses) {
      if (llvm::any_of(firstOfRole, [&](const SymbolUse *u) {
            return u->role == use.role;
          }))
        continue;
      const SymbolUse *clash = nullptr;
      for (const SymbolUse *u : firstOfRole)
        if (!rolesCompatible(u->role, use.role))
          clash = u;
      if (clash) {
        error(use.loc, "shape conflict: '" + symbol + "' is used as " +
                           describeRole(clash->role) + " (" +
                           kTensorNames[clash->tensor] + "[" +
                           Twine(clash->index) + "]) and as " +
                           describeRole(use.role) + " (" +
                           kTensorNames[use.tensor] + "[" + Twine(use.index) +
                           "])");
        if (!usingDefaults)
          diags.note(clash->loc, "'" + symbol + "' first used here as " +
                                     describeRole(clash->role));
        conflict = true;
        break;
      }
      firstOfRole.push_back(&use);
    }
  }

  // Every entry of one role must agree; a number against a symbol fixes it.
  struct Resolved {
    const Dim *symbol = nullptr;
    int symbolTensor = 0;
    const Dim *number = nullptr;
    int numberTensor = 0;
    bool reported = false; // one conflict per role is enough
  } resolved[kNumRoles];
  for (const RoleSlot &slot : kSlots) {
    const Dim &dim = qkv(slot.tensor).shape[slot.index];
    Resolved &r = resolved[static_cast<int>(slot.role)];
    if (r.reported)
      continue;
    auto where = [&](int tensor) {
      return std::string(kTensorNames[tensor]) + "[" +
             std::to_string(slot.index) + "]";
    };
    if (!dim.isFixed()) {
      if (!r.symbol) {
        r.symbol = &dim;
        r.symbolTensor = slot.tensor;
      } else if (r.symbol->symbol != dim.symbol) {
        error(dim.loc, Twine("shape conflict: ") + describeRole(slot.role) +
                           " is '" + r.symbol->symbol + "' in " +
                           where(r.symbolTensor) + " but '" + dim.symbol +
                           "' in " + where(slot.tensor));
        conflict = r.reported = true;
      }
    } else {
      if (!r.number) {
        r.number = &dim;
        r.numberTensor = slot.tensor;
      } else if (r.number->value != dim.value) {
        error(dim.loc, Twine("shape conflict: ") + describeRole(slot.role) +
                           " is " + Twine(r.number->value) + " in " +
                           where(r.numberTensor) + " but " +
                           Twine(dim.value) + " in " + where(slot.tensor));
        conflict = r.reported = true;
      }
    }
  }
  if (conflict)
    return;

  for (int role = 0; role < kNumRoles; ++role) {
    const Resolved &r = resolved[role];
    if (!r.symbol || !r.number)
      continue;
    auto [it, inserted] =
        fixedSymbols.try_emplace(r.symbol->symbol, r.number->value);
    if (!inserted && it->second != r.number->value) {
      error(r.number->loc, "shape conflict: '" + r.symbol->symbol +
                               "' is fixed to " + Twine(it->second) +
                               " elsewhere but to " + Twine(r.number->value) +
                               " here");
      return;
    }
  }

  for (int role = 0; role < kNumRoles; ++role) {
    const Resolved &r = resolved[role];
    Dim &out = variant.dims[role];
    if (r.symbol) {
      out.loc = r.symbol->loc;
      auto it = fixedSymbols.find(r.symbol->symbol);
      if (it != fixedSymbols.end()) {
        out.symbol.clear();
        out.value = it->second;
      } else {
        out.symbol = r.symbol->symbol;
        out.value = -1;
      }
    } else if (r.number) {
      out = *r.number;
    }
  }
}

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

void Sema::checkDeclarations() {
  struct Decl {
    StringRef name;
    SMLoc loc;
    const char *kind;
    bool implicit;
    bool isParam;
    int index;
  };
  std::vector<Decl> decls;
  for (const std::string &symbol : symbolOrder)
    decls.push_back({symbol, symbolUses[symbol].front().loc, "a shape symbol",
                     usingDefaults, false, -1});
  for (size_t p = 0; p < variant.params.size(); ++p)
    decls.push_back({variant.params[p].name, variant.params[p].loc, "a param",
                     false, true, static_cast<int>(p)});
  for (size_t t = 0; t < variant.tensors.size(); ++t)
    decls.push_back({variant.tensors[t].name, variant.tensors[t].loc,
                     "a tensor", false, false, static_cast<int>(t)});
  // The paged cache's inputs are launch arguments with names of their own.
  if (variant.paged)
    for (const std::string *name : {&variant.paged->table, &variant.paged->lengths})
      decls.push_back({*name, variant.paged->loc, "an input of the paged cache", false, false, -1});
  // One offsets tensor may pack both queries and keys (self-attention).
  for (const std::optional<VarlenDecl> *varlen : {&variant.varlenQueries, &variant.varlenKeys})
    if (*varlen && !(varlen == &variant.varlenKeys && variant.varlenQueries &&
                     variant.varlenQueries->offsets == (*varlen)->offsets))
      decls.push_back({(**varlen).offsets, (**varlen).loc, "the offsets of a varlen batch", false,
                       false, -1});
  std::stable_sort(decls.begin(), decls.end(),
                   [](const Decl &a, const Decl &b) {
                     if (a.implicit != b.implicit)
                       return a.implicit;
                     return a.loc.getPointer() < b.loc.getPointer();
                   });

  llvm::StringMap<const Decl *> seen;
  for (const Decl &decl : decls) {
    if (!decl.implicit) {
      if (isKeyword(decl.name)) {
        error(decl.loc, "'" + decl.name + "' is a keyword and cannot be "
                                          "used as a name");
        continue;
      }
      if (const char *what = builtinValueDescription(decl.name)) {
        error(decl.loc, "redefinition of builtin name '" + decl.name + "' (" +
                            what + ")");
        continue;
      }
      if (lookupBuiltin(decl.name)) {
        error(decl.loc,
              "redefinition of builtin function '" + decl.name + "'");
        continue;
      }
    }
    auto [it, inserted] = seen.try_emplace(decl.name, &decl);
    if (!inserted) {
      const Decl &first = *it->second;
      if (first.implicit) {
        error(decl.loc, "redefinition of '" + decl.name +
                            "', a shape symbol of the default shapes " +
                            kDefaultShapes);
      } else {
        error(decl.loc, "redefinition of '" + decl.name + "' (already " +
                            first.kind + ")");
        diags.note(first.loc, "'" + decl.name + "' first declared here");
      }
      continue;
    }
    if (decl.index >= 0)
      (decl.isParam ? paramIndex : tensorIndex)[decl.name] = decl.index;
  }
}

void Sema::checkSequenceLength(DimRole role, const char *whose, const char *entry) {
  // Each sequence has its own length there (its lengths entry, its offsets).
  const Dim &length = variant.dim(role);
  const char *name = role == DimRole::QueryLen ? "query length" : "key length";
  if (length.isFixed()) {
    error(length.loc, Twine("the ") + name + " of " + whose + " is each sequence's own (" +
                          entry + "); it cannot be fixed to " + Twine(length.value));
    return;
  }
  // Packed queries and keys under one offsets tensor have equal lengths, so
  // N and M may be one symbol there (self-attention).
  bool sameOffsets = variant.varlenQueries && variant.varlenKeys &&
                     variant.varlenQueries->offsets == variant.varlenKeys->offsets;
  for (int other = 0; other < 6; ++other) {
    auto otherRole = static_cast<DimRole>(other);
    if (otherRole == role || variant.dims[other].symbol != length.symbol)
      continue;
    bool lengthPair = (role == DimRole::QueryLen && otherRole == DimRole::KeyLen) ||
                      (role == DimRole::KeyLen && otherRole == DimRole::QueryLen);
    if (lengthPair && sameOffsets)
      continue;
    error(length.loc, Twine("the ") + name + " '" + length.symbol + "' of " + whose +
                          " is each sequence's own (" + entry + "); it cannot also be the " +
                          toString(otherRole));
    return;
  }
}

void Sema::checkVarlen() {
  if (variant.varlenKeys && variant.paged) {
    error(variant.varlenKeys->loc, "K and V are in a paged cache, whose lengths give each "
                                   "sequence's keys: 'varlen k, v' cannot pack them too");
    diags.note(variant.paged->loc, "the paged cache is declared here");
  }
  if (variant.varlenQueries)
    checkSequenceLength(DimRole::QueryLen, "a varlen batch of queries", "its offsets");
  if (variant.varlenKeys && !variant.paged)
    checkSequenceLength(DimRole::KeyLen, "a varlen batch of keys", "its offsets");
}

std::string Sema::symbolList() const {
  std::string list;
  for (const std::string &symbol : symbolOrder) {
    if (!list.empty())
      list += ", ";
    list += symbol;
  }
  return list;
}

void Sema::checkTensorShapes() {
  llvm::SmallVector<StringRef, 8> symbols(symbolOrder.begin(),
                                          symbolOrder.end());
  for (TensorDecl &tensor : variant.tensors) {
    if (syntax.poisoned.contains(tensor.name))
      continue;
    for (Dim &dim : tensor.shape) {
      if (dim.isFixed())
        continue;
      if (symbolRole.count(dim.symbol)) {
        // A symbol fixed by q/k/v is that number here too, so every symbol
        // left in an aux shape names some Variant::dims entry.
        auto fixed = fixedSymbols.find(dim.symbol);
        if (fixed != fixedSymbols.end()) {
          dim.symbol.clear();
          dim.value = fixed->second;
        }
        continue;
      }
      if (!shapesComplete || syntax.skippedNames.contains(dim.symbol))
        continue; // the symbol may be in a q/k/v that failed to parse
      std::string message = "unknown dimension '" + dim.symbol +
                            "' in the shape of tensor '" + tensor.name + "'";
      StringRef close = closestMatch(dim.symbol, symbols);
      if (!close.empty())
        message += "; did you mean '" + close.str() + "'?";
      else
        message += "; tensor shapes use the shape symbols of q, k and v (" +
                   symbolList() + ") or positive integers";
      error(dim.loc, message);
    }
  }
}

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

std::optional<ScalarType> Sema::checkName(Expr &expr, Item item) {
  StringRef name = expr.name;
  if (syntax.poisoned.contains(name))
    return std::nullopt;

  auto p = paramIndex.find(name);
  if (p != paramIndex.end()) {
    const ParamDecl &param = variant.params[p->second];
    if (item == Item::Scale) {
      error(expr.loc, "scale must be a compile-time constant, but '" + name +
                          "' is a runtime param");
      return std::nullopt;
    }
    expr.kind = ExprKind::Param;
    expr.declIndex = p->second;
    return param.type;
  }

  auto r = symbolRole.find(name);
  if (r != symbolRole.end()) {
    expr.kind = ExprKind::DimSize;
    expr.dimRole = r->second;
    expr.declIndex = -1;
    if (item == Item::Scale && r->second != DimRole::HeadDim &&
        !fixedSymbols.count(name)) {
      error(expr.loc,
            "scale must be a compile-time constant, but '" + name +
                "' (" + describeRole(r->second) +
                ") is only known at run time; scale may use fixed sizes "
                "and the head dim");
      return std::nullopt;
    }
    return ScalarType::Int;
  }

  auto t = tensorIndex.find(name);
  if (t != tensorIndex.end()) {
    size_t rank = variant.tensors[t->second].shape.size();
    error(expr.loc, "tensor '" + name + "' must be indexed with " +
                        Twine(rank) + (rank == 1 ? " index" : " indices") +
                        ", as in " + name + "[...]");
    return std::nullopt;
  }

  // Unknown. Without complete q/k/v the name may be a lost shape symbol;
  // a name in text that recovery skipped may have been declared there.
  if (!shapesComplete || syntax.skippedNames.contains(name) ||
      !reportedUnknown.insert(name).second)
    return std::nullopt;
  llvm::SmallVector<StringRef, 16> candidates;
  for (const ParamDecl &param : variant.params)
    candidates.push_back(param.name);
  for (const std::string &symbol : symbolOrder)
    candidates.push_back(symbol);
  for (const TensorDecl &tensor : variant.tensors)
    candidates.push_back(tensor.name);
  StringRef close = closestMatch(name, candidates);
  if (!close.empty()) {
    error(expr.loc,
          "unknown name '" + name + "'; did you mean '" + close + "'?");
    return std::nullopt;
  }
  std::string expected;
  if (item == Item::Scale) {
    expected = "a number or a fixed shape symbol";
  } else {
    expected = variant.params.empty() ? "" : "a param, ";
    expected += "a shape symbol (" + symbolList() + ") or one of ";
    expected += item == Item::Score ? "s, b, h, i, j" : "b, h, i, j";
  }
  error(expr.loc, "unknown name '" + name + "'; expected " + expected);
  return std::nullopt;
}

std::optional<ScalarType> Sema::checkIndex(Expr &expr, Item item) {
  StringRef name = expr.name;
  // Check the indices first: their errors are independent of the tensor.
  bool indicesOk = true;
  llvm::SmallVector<std::optional<ScalarType>, 4> indexTypes;
  for (auto &operand : expr.operands) {
    indexTypes.push_back(check(*operand, item));
    indicesOk &= indexTypes.back().has_value();
  }

  if (syntax.poisoned.contains(name))
    return std::nullopt;
  auto t = tensorIndex.find(name);
  if (t == tensorIndex.end()) {
    if (const char *what = builtinValueDescription(name)) {
      error(expr.loc, "'" + name + "' is " + what + ", not a tensor");
    } else if (paramIndex.count(name)) {
      error(expr.loc, "'" + name + "' is a param, not a tensor; only tensors "
                                   "can be indexed");
    } else if (symbolRole.count(name)) {
      error(expr.loc, "'" + name + "' is a shape symbol, not a tensor; only "
                                   "tensors can be indexed");
    } else if ((!shapesComplete && syntax.anyDeclBroken) ||
               syntax.skippedNames.contains(name) ||
               !reportedUnknown.insert(name).second) {
      return std::nullopt;
    } else {
      llvm::SmallVector<StringRef, 8> names;
      for (const TensorDecl &tensor : variant.tensors)
        names.push_back(tensor.name);
      StringRef close = closestMatch(name, names);
      if (!close.empty())
        error(expr.loc, "unknown tensor '" + name + "'; did you mean '" +
                            close + "'?");
      else if (names.empty())
        error(expr.loc, "unknown tensor '" + name +
                            "'; declare it with 'tensor " + name +
                            ": DTYPE[dims]'");
      else
        error(expr.loc, "unknown tensor '" + name + "'; the tensors are " +
                            llvm::join(names, ", "));
    }
    return std::nullopt;
  }

  const TensorDecl &tensor = variant.tensors[t->second];
  if (item == Item::Scale) {
    error(expr.loc, "scale must be a compile-time constant, but it reads "
                    "tensor '" + name + "'");
    return std::nullopt;
  }
  if (expr.operands.size() != tensor.shape.size()) {
    size_t rank = tensor.shape.size();
    error(expr.loc, "tensor '" + name + "' has rank " + Twine(rank) +
                        " but is indexed with " +
                        Twine(expr.operands.size()) +
                        (expr.operands.size() == 1 ? " index" : " indices"));
    diags.note(tensor.loc, "'" + name + "' declared here");
    return std::nullopt;
  }
  if (!indicesOk)
    return std::nullopt;
  for (size_t n = 0; n < expr.operands.size(); ++n) {
    if (*indexTypes[n] != ScalarType::Int) {
      error(startOf(*expr.operands[n]),
            "index " + Twine(n + 1) + " of '" + name + "' must be int, but it "
            "is " + toString(*indexTypes[n]));
      return std::nullopt;
    }
  }
  expr.declIndex = t->second;
  return tensor.elementType == ElementType::I32 ? ScalarType::Int
                                                : ScalarType::Float;
}

std::optional<ScalarType> Sema::checkUnary(Expr &expr, Item item) {
  std::optional<ScalarType> operand = check(*expr.operands[0], item);
  if (!operand)
    return std::nullopt;
  if (expr.unaryOp == UnaryOp::Neg) {
    if (!isNumeric(*operand)) {
      error(expr.loc, "operand of unary '-' must be a number, but it is "
                      "bool");
      return std::nullopt;
    }
    return *operand;
  }
  if (*operand != ScalarType::Bool) {
    error(expr.loc, Twine("operand of '!' must be bool, but it is ") +
                        toString(*operand));
    return std::nullopt;
  }
  return ScalarType::Bool;
}

std::optional<ScalarType> Sema::checkBinary(Expr &expr, Item item) {
  std::optional<ScalarType> lhs = check(*expr.operands[0], item);
  std::optional<ScalarType> rhs = check(*expr.operands[1], item);
  if (!lhs || !rhs)
    return std::nullopt;
  const char *op = opSpelling(expr);

  // Reports that operands must satisfy `good`, pointing at the bad operand
  // (or at the operator when both are bad).
  auto require = [&](bool (*good)(ScalarType), const char *what) {
    bool lhsOk = good(*lhs), rhsOk = good(*rhs);
    if (lhsOk && rhsOk)
      return true;
    if (!lhsOk && !rhsOk)
      error(expr.loc, Twine("operands of '") + op + "' must be " + what +
                          ", but they are " + toString(*lhs) + " and " +
                          toString(*rhs));
    else if (!lhsOk)
      error(startOf(*expr.operands[0]),
            Twine("operands of '") + op + "' must be " + what +
                ", but the left operand is " + toString(*lhs));
    else
      error(startOf(*expr.operands[1]),
            Twine("operands of '") + op + "' must be " + what +
                ", but the right operand is " + toString(*rhs));
    return false;
  };

  switch (expr.binaryOp) {
  case BinaryOp::Add:
  case BinaryOp::Sub:
  case BinaryOp::Mul:
  case BinaryOp::Div:
    if (!require(isNumeric, "numbers"))
      return std::nullopt;
    return promote(*lhs, *rhs);
  case BinaryOp::Mod:
    if (!require([](ScalarType t) { return t == ScalarType::Int; }, "int"))
      return std::nullopt;
    return ScalarType::Int;
  case BinaryOp::Lt:
  case BinaryOp::Le:
  case BinaryOp::Gt:
  case BinaryOp::Ge:
    if (!require(isNumeric, "numbers"))
      return std::nullopt;
    return ScalarType::Bool;
  case BinaryOp::Eq:
  case BinaryOp::Ne:
    if (isNumeric(*lhs) != isNumeric(*rhs)) {
      error(expr.loc, Twine("cannot compare ") + toString(*lhs) + " with " +
                          toString(*rhs) + " using '" + op + "'");
      return std::nullopt;
    }
    return ScalarType::Bool;
  case BinaryOp::And:
  case BinaryOp::Or:
    if (!require([](ScalarType t) { return t == ScalarType::Bool; }, "bool"))
      return std::nullopt;
    return ScalarType::Bool;
  }
  return std::nullopt;
}

std::optional<ScalarType> Sema::checkCall(Expr &expr, Item item) {
  llvm::SmallVector<std::optional<ScalarType>, 3> args;
  bool argsOk = true;
  for (auto &operand : expr.operands) {
    args.push_back(check(*operand, item));
    argsOk &= args.back().has_value();
  }
  if (!argsOk)
    return std::nullopt;
  const char *fn = toString(expr.builtin);

  auto requireNumber = [&](size_t n) {
    if (isNumeric(*args[n]))
      return true;
    error(startOf(*expr.operands[n]),
          "argument " + Twine(n + 1) + " of '" + fn +
              "' must be a number, but it is bool");
    return false;
  };

  switch (expr.builtin) {
  case Builtin::Min:
  case Builtin::Max:
    if (!requireNumber(0) || !requireNumber(1))
      return std::nullopt;
    return promote(*args[0], *args[1]);
  case Builtin::Abs:
    if (!requireNumber(0))
      return std::nullopt;
    return *args[0];
  case Builtin::Exp:
  case Builtin::Log:
  case Builtin::Tanh:
  case Builtin::Sqrt:
    if (!requireNumber(0))
      return std::nullopt;
    return ScalarType::Float;
  case Builtin::Select:
    if (*args[0] != ScalarType::Bool) {
      error(startOf(*expr.operands[0]),
            Twine("the condition of 'select' must be bool, but it is ") +
                toString(*args[0]));
      return std::nullopt;
    }
    if (isNumeric(*args[1]) != isNumeric(*args[2])) {
      error(expr.loc, Twine("the branches of 'select' must both be numbers "
                            "or both be bool, but they are ") +
                          toString(*args[1]) + " and " + toString(*args[2]));
      return std::nullopt;
    }
    return isNumeric(*args[1]) ? promote(*args[1], *args[2])
                               : ScalarType::Bool;
  }
  return std::nullopt;
}

std::optional<ScalarType> Sema::check(Expr &expr, Item item) {
  std::optional<ScalarType> type;
  switch (expr.kind) {
  case ExprKind::IntLiteral:
    type = ScalarType::Int;
    break;
  case ExprKind::FloatLiteral:
    type = ScalarType::Float;
    break;
  case ExprKind::BoolLiteral:
    type = ScalarType::Bool;
    break;
  case ExprKind::Score:
    if (item != Item::Score) {
      error(expr.loc, Twine("'s' (the attention score) can only be used in "
                            "score, not in ") + itemName(item));
      return std::nullopt;
    }
    type = ScalarType::Float;
    break;
  case ExprKind::Batch:
  case ExprKind::Head:
  case ExprKind::Query:
  case ExprKind::Key:
    if (item == Item::Scale) {
      StringRef name = expr.kind == ExprKind::Batch  ? "b"
                       : expr.kind == ExprKind::Head ? "h"
                       : expr.kind == ExprKind::Query ? "i"
                                                      : "j";
      error(expr.loc, "'" + name + "' (" + builtinValueDescription(name) +
                          ") cannot be used in scale, which must be a "
                          "compile-time constant");
      return std::nullopt;
    }
    type = ScalarType::Int;
    break;
  case ExprKind::Param:
  case ExprKind::DimSize:
    type = checkName(expr, item);
    break;
  case ExprKind::Index:
    type = checkIndex(expr, item);
    break;
  case ExprKind::Unary:
    type = checkUnary(expr, item);
    break;
  case ExprKind::Binary:
    type = checkBinary(expr, item);
    break;
  case ExprKind::Call:
    type = checkCall(expr, item);
    break;
  }
  if (type)
    expr.type = *type;
  return type;
}

void Sema::checkItem(Expr *expr, Item item) {
  if (!expr)
    return;
  std::optional<ScalarType> type = check(*expr, item);
  if (!type)
    return;
  if (item == Item::Mask && *type != ScalarType::Bool)
    error(startOf(*expr), Twine("mask must be a bool expression, but this "
                                "expression is ") + toString(*type));
  else if (item != Item::Mask && *type == ScalarType::Bool)
    error(startOf(*expr), Twine(itemName(item)) +
                              " must be a number (int or float), but this "
                              "expression is bool");
}

bool Sema::run() {
  checkQKV();
  collectSymbols();
  if (shapesComplete)
    unifyShapes();
  checkDeclarations();
  checkTensorShapes();
  if (variant.paged && shapesComplete)
    checkSequenceLength(DimRole::KeyLen, "a paged K/V cache", "its lengths entry");
  if (shapesComplete)
    checkVarlen();
  // In source order, so the diagnostics are too.
  std::pair<Expr *, Item> items[3] = {{variant.scale.get(), Item::Scale},
                                      {variant.score.get(), Item::Score},
                                      {variant.mask.get(), Item::Mask}};
  std::stable_sort(std::begin(items), std::end(items),
                   [](const auto &a, const auto &b) {
                     if (!a.first || !b.first)
                       return b.first == nullptr && a.first != nullptr;
                     return startOf(*a.first).getPointer() <
                            startOf(*b.first).getPointer();
                   });
  for (auto &[expr, item] : items)
    checkItem(expr, item);
  return ok;
}

bool flashc::frontend::detail::checkVariant(Variant &variant,
                                            const VariantSyntax &syntax,
                                            Diagnostics &diags) {
  return Sema(variant, syntax, diags).run();
}
