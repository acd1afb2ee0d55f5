//===- VariantGenerator.cpp - Random valid .flash variants -----------------===//

#include "flashc/Fuzz/VariantGenerator.h"

#include <algorithm>
#include <random>
#include <tuple>

using namespace flashc;
using namespace flashc::fuzz;

//===----------------------------------------------------------------------===//
// Rendering
//===----------------------------------------------------------------------===//

std::string GenExpr::render() const {
  switch (kind) {
  case Kind::Literal:
  case Kind::Name:
    return text;
  case Kind::Unary:
    return text + "(" + children[0].render() + ")";
  case Kind::Binary:
    return "(" + children[0].render() + " " + text + " " + children[1].render() + ")";
  case Kind::Call:
  case Kind::Index: {
    std::string args;
    for (const GenExpr &child : children)
      args += (args.empty() ? "" : ", ") + child.render();
    return kind == Kind::Call ? text + "(" + args + ")" : text + "[" + args + "]";
  }
  }
  return text;
}

size_t GenExpr::size() const {
  size_t n = 1;
  for (const GenExpr &child : children)
    n += child.size();
  return n;
}

std::string GeneratedCase::source() const {
  std::string text = "attention fuzz {\n";
  text += "  q: " + elementType + "[B, H, N, D]  k: " + elementType + "[B, HKV, M, D]  v: " +
          elementType + "[B, HKV, M, D]\n";
  for (const GenParam &param : params)
    text += "  param " + param.name + ": " + (param.isFloat ? "f32" : "i32") + " = " +
            param.defaultValue + "\n";
  for (const GenTensor &tensor : tensors) {
    std::string extents;
    for (const std::string &extent : tensor.extents)
      extents += (extents.empty() ? "" : ", ") + extent;
    text += "  tensor " + tensor.name + ": " + tensor.elementType + "[" + extents + "]\n";
  }
  if (hasScore)
    text += "  score = " + score.render() + "\n";
  if (hasMask)
    text += "  mask = " + mask.render() + "\n";
  return text + "}\n";
}

std::string GeneratedCase::shapeSpec() const {
  return "B=" + std::to_string(batch) + ",H=" + std::to_string(heads) +
         ",HKV=" + std::to_string(kvHeads) + ",N=" + std::to_string(queryLen) +
         ",M=" + std::to_string(keyLen) + ",D=" + std::to_string(headDim);
}

std::string GeneratedCase::tileSpec() const {
  return "Br=" + std::to_string(blockRows) + ",Bc=" + std::to_string(blockCols);
}

//===----------------------------------------------------------------------===//
// Generation
//===----------------------------------------------------------------------===//

namespace {

GenExpr leaf(GenExpr::Kind kind, ExprType type, std::string text) {
  GenExpr e;
  e.kind = kind;
  e.type = type;
  e.text = std::move(text);
  return e;
}

GenExpr node(GenExpr::Kind kind, ExprType type, std::string text,
             std::vector<GenExpr> children) {
  GenExpr e = leaf(kind, type, std::move(text));
  e.children = std::move(children);
  return e;
}

GenExpr literal(ExprType type, std::string text) {
  return leaf(GenExpr::Kind::Literal, type, std::move(text));
}

class Generator {
public:
  explicit Generator(uint64_t seed) : rng(seed) {}

  GeneratedCase generate(uint64_t seed);

private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  template <typename T> const T &choose(const std::vector<T> &options) {
    return options[pick(static_cast<int>(options.size()))];
  }

  GenExpr intLiteral();
  GenExpr floatLiteral();
  GenExpr genInt(int depth);
  GenExpr genFloat(int depth);
  GenExpr genBool(int depth);
  GenExpr tensorRead(const GenTensor &tensor, int depth);
  GenExpr structuredMask();
  GenExpr structuredScore();

  std::mt19937_64 rng;
  GeneratedCase c;
  bool inScore = false;
};

GenExpr Generator::intLiteral() {
  static const std::vector<std::string> common = {"0", "1", "2", "3", "4", "7", "8", "16"};
  static const std::vector<std::string> rare = {"64",  "83",      "128",        "330",
                                                "1000", "1048576", "2147483647", "65536"};
  return literal(ExprType::Int, chance(0.8) ? choose(common) : choose(rare));
}

GenExpr Generator::floatLiteral() {
  static const std::vector<std::string> values = {"0.5", "1.0", "2.0", "0.25", "3.5",
                                                  "30.0", "0.125", "10.0", "0.001"};
  return literal(ExprType::Float, choose(values));
}

GenExpr Generator::tensorRead(const GenTensor &tensor, int depth) {
  std::vector<GenExpr> indices;
  for (size_t k = 0; k < tensor.extents.size(); ++k) {
    // Mostly the natural index of the extent, sometimes any integer (reads
    // outside the tensor give 0).
    const std::string &extent = tensor.extents[k];
    std::string natural = extent == "B" ? "b" : extent == "H" ? "h" : chance(0.5) ? "i" : "j";
    indices.push_back(chance(0.75) ? leaf(GenExpr::Kind::Name, ExprType::Int, natural)
                                   : genInt(depth - 1));
  }
  return node(GenExpr::Kind::Index, tensor.elementType == "i32" ? ExprType::Int : ExprType::Float,
              tensor.name, std::move(indices));
}

GenExpr Generator::genInt(int depth) {
  if (depth <= 0 || chance(0.3)) {
    std::vector<std::string> names = {"b", "h", "i", "j", "i", "j", "B", "H", "HKV", "N", "M", "D"};
    for (const GenParam &param : c.params)
      if (!param.isFloat)
        names.push_back(param.name);
    int choice = pick(4);
    if (choice == 0)
      return intLiteral();
    if (choice == 3)
      for (const GenTensor &tensor : c.tensors)
        if (tensor.elementType == "i32" && depth > 0)
          return tensorRead(tensor, depth);
    return leaf(GenExpr::Kind::Name, ExprType::Int, choose(names));
  }
  switch (pick(9)) {
  case 0:
  case 1:
  case 2: {
    static const std::vector<std::string> ops = {"+", "-", "*", "/", "%", "+", "-"};
    return node(GenExpr::Kind::Binary, ExprType::Int, choose(ops),
                {genInt(depth - 1), genInt(depth - 1)});
  }
  case 3:
    return node(GenExpr::Kind::Call, ExprType::Int, chance(0.5) ? "min" : "max",
                {genInt(depth - 1), genInt(depth - 1)});
  case 4:
    return node(GenExpr::Kind::Call, ExprType::Int, "abs", {genInt(depth - 1)});
  case 5:
    return node(GenExpr::Kind::Call, ExprType::Int, "select",
                {genBool(depth - 1), genInt(depth - 1), genInt(depth - 1)});
  case 6:
    return node(GenExpr::Kind::Unary, ExprType::Int, "-", {genInt(depth - 1)});
  default:
    for (const GenTensor &tensor : c.tensors)
      if (tensor.elementType == "i32")
        return tensorRead(tensor, depth);
    return node(GenExpr::Kind::Binary, ExprType::Int, "-", {genInt(depth - 1), genInt(depth - 1)});
  }
}

GenExpr Generator::genFloat(int depth) {
  if (depth <= 0 || chance(0.3)) {
    int choice = pick(5);
    if (inScore && choice <= 1)
      return leaf(GenExpr::Kind::Name, ExprType::Float, "s");
    if (choice == 2)
      for (const GenParam &param : c.params)
        if (param.isFloat)
          return leaf(GenExpr::Kind::Name, ExprType::Float, param.name);
    if (choice == 3 && depth > 0)
      for (const GenTensor &tensor : c.tensors)
        if (tensor.elementType != "i32")
          return tensorRead(tensor, depth);
    return floatLiteral();
  }
  switch (pick(10)) {
  case 0:
  case 1:
  case 2: {
    static const std::vector<std::string> ops = {"+", "-", "*", "/"};
    // Mixed arithmetic promotes an Int operand.
    GenExpr lhs = genFloat(depth - 1);
    GenExpr rhs = chance(0.3) ? genInt(depth - 1) : genFloat(depth - 1);
    if (chance(0.5))
      std::swap(lhs, rhs);
    return node(GenExpr::Kind::Binary, ExprType::Float, choose(ops), {lhs, rhs});
  }
  case 3:
    return node(GenExpr::Kind::Call, ExprType::Float, chance(0.5) ? "min" : "max",
                {genFloat(depth - 1), chance(0.3) ? genInt(depth - 1) : genFloat(depth - 1)});
  case 4: {
    static const std::vector<std::string> fns = {"tanh", "abs", "exp", "log", "sqrt"};
    return node(GenExpr::Kind::Call, ExprType::Float, choose(fns), {genFloat(depth - 1)});
  }
  case 5:
    return node(GenExpr::Kind::Call, ExprType::Float, "select",
                {genBool(depth - 1), genFloat(depth - 1), genFloat(depth - 1)});
  case 6:
    return node(GenExpr::Kind::Unary, ExprType::Float, "-", {genFloat(depth - 1)});
  default:
    // Bounded forms, so that most scores stay finite.
    return node(GenExpr::Kind::Call, ExprType::Float, "tanh", {genFloat(depth - 1)});
  }
}

GenExpr Generator::genBool(int depth) {
  if (depth <= 0 || chance(0.2)) {
    if (chance(0.1))
      return literal(ExprType::Bool, chance(0.5) ? "true" : "false");
    static const std::vector<std::string> cmps = {"<", "<=", ">", ">=", "==", "!="};
    return node(GenExpr::Kind::Binary, ExprType::Bool, choose(cmps),
                {genInt(std::max(depth - 1, 0)), genInt(std::max(depth - 1, 0))});
  }
  switch (pick(6)) {
  case 0:
  case 1: {
    static const std::vector<std::string> cmps = {"<", "<=", ">", ">=", "==", "!="};
    return node(GenExpr::Kind::Binary, ExprType::Bool, choose(cmps),
                {genInt(depth - 1), genInt(depth - 1)});
  }
  case 2:
    return node(GenExpr::Kind::Binary, ExprType::Bool, "&&",
                {genBool(depth - 1), genBool(depth - 1)});
  case 3:
    return node(GenExpr::Kind::Binary, ExprType::Bool, "||",
                {genBool(depth - 1), genBool(depth - 1)});
  case 4:
    return node(GenExpr::Kind::Unary, ExprType::Bool, "!", {genBool(depth - 1)});
  default:
    return node(GenExpr::Kind::Call, ExprType::Bool, "select",
                {genBool(depth - 1), genBool(depth - 1), genBool(depth - 1)});
  }
}

GenExpr name(std::string text) { return leaf(GenExpr::Kind::Name, ExprType::Int, std::move(text)); }

GenExpr binary(std::string op, ExprType type, GenExpr a, GenExpr b) {
  return node(GenExpr::Kind::Binary, type, std::move(op), {std::move(a), std::move(b)});
}

GenExpr Generator::structuredMask() {
  // The shapes of the masks people write, with random constants.
  switch (pick(6)) {
  case 0:
    return binary("<=", ExprType::Bool, name("j"), name("i"));
  case 1: // sliding window
    return binary("&&", ExprType::Bool, binary("<=", ExprType::Bool, name("j"), name("i")),
                  binary("<", ExprType::Bool,
                         binary("-", ExprType::Int, name("i"), name("j")), intLiteral()));
  case 2: // prefix-LM: keys in pieces
    return binary("||", ExprType::Bool, binary("<", ExprType::Bool, name("j"), genInt(1)),
                  binary("<=", ExprType::Bool, name("j"), name("i")));
  case 3: // attention sink + window
    return binary("||", ExprType::Bool, binary("<", ExprType::Bool, name("j"), intLiteral()),
                  binary("<", ExprType::Bool,
                         binary("-", ExprType::Int, name("i"), name("j")), intLiteral()));
  case 4: // offset causal (N != M)
    return binary("<=", ExprType::Bool, name("j"),
                  binary("+", ExprType::Int, name("i"),
                         binary("-", ExprType::Int, name("M"), name("N"))));
  default:
    for (const GenTensor &tensor : c.tensors)
      if (tensor.elementType == "i32" && tensor.extents.size() == 2)
        return binary("==", ExprType::Bool,
                      node(GenExpr::Kind::Index, ExprType::Int, tensor.name, {name("b"), name("i")}),
                      node(GenExpr::Kind::Index, ExprType::Int, tensor.name, {name("b"), name("j")}));
    return binary("!=", ExprType::Bool, binary("%", ExprType::Int, name("j"), intLiteral()),
                  intLiteral());
  }
}

GenExpr Generator::structuredScore() {
  GenExpr s = leaf(GenExpr::Kind::Name, ExprType::Float, "s");
  switch (pick(5)) {
  case 0: { // softcap
    GenExpr cap = floatLiteral();
    return binary("*", ExprType::Float, cap,
                  node(GenExpr::Kind::Call, ExprType::Float, "tanh",
                       {binary("/", ExprType::Float, s, cap)}));
  }
  case 1: // ALiBi-like
    return binary("-", ExprType::Float, s,
                  binary("*", ExprType::Float, genFloat(1),
                         binary("-", ExprType::Int, name("i"), name("j"))));
  case 2:
    return binary("*", ExprType::Float, s, genFloat(1));
  case 3:
    return binary("+", ExprType::Float, s,
                  node(GenExpr::Kind::Call, ExprType::Float, "tanh", {genFloat(2)}));
  default:
    return genFloat(3);
  }
}

GeneratedCase Generator::generate(uint64_t seed) {
  c = GeneratedCase();
  c.seed = seed;
  static const std::vector<std::string> types = {"f32", "f32", "bf16", "f16"};
  c.elementType = choose(types);
  int numParams = pick(3);
  for (int p = 0; p < numParams; ++p) {
    GenParam param;
    param.name = "p" + std::to_string(p);
    param.isFloat = chance(0.4);
    param.defaultValue = param.isFloat ? floatLiteral().text : intLiteral().text;
    c.params.push_back(param);
  }
  if (chance(0.3))
    c.tensors.push_back({"ids", "i32", {"B", chance(0.5) ? "N" : "M"}});
  if (chance(0.2))
    c.tensors.push_back({"lens", "i32", {"B"}});
  if (chance(0.3))
    c.tensors.push_back({"slopes", chance(0.7) ? "f32" : "bf16", {"H"}});
  if (chance(0.1))
    c.tensors.push_back({"table", "f32", {"H", "8"}});

  c.hasMask = chance(0.85);
  if (c.hasMask) {
    inScore = false;
    if (chance(0.5)) {
      c.mask = structuredMask();
      if (chance(0.4))
        c.mask = binary(chance(0.5) ? "&&" : "||", ExprType::Bool, c.mask, genBool(2));
    } else {
      c.mask = genBool(4);
    }
  }
  c.hasScore = chance(0.5);
  if (c.hasScore) {
    inScore = true;
    c.score = structuredScore();
  }

  // Sizes: 1 often, ragged lengths, N != M, GQA.
  c.batch = chance(0.7) ? 1 : 2;
  static const std::vector<std::pair<int64_t, int64_t>> headChoices = {
      {1, 1}, {2, 2}, {2, 1}, {3, 1}, {4, 2}, {3, 3}};
  std::tie(c.heads, c.kvHeads) = choose(headChoices);
  auto length = [&]() -> int64_t {
    if (chance(0.15))
      return 1;
    static const std::vector<int64_t> common = {16, 17, 64, 100, 128, 129, 200, 257};
    return chance(0.5) ? choose(common) : 1 + pick(300);
  };
  c.queryLen = length();
  c.keyLen = chance(0.4) ? c.queryLen : length();
  static const std::vector<int64_t> dims = {16, 32, 64};
  c.headDim = choose(dims);
  static const std::vector<int64_t> rows = {16, 32, 64, 128};
  static const std::vector<int64_t> cols = {16, 32, 48, 64, 128};
  c.blockRows = choose(rows);
  c.blockCols = choose(cols);
  return c;
}

/// Every expression tree with one node of `e` replaced by a simpler one.
void simplerTrees(const GenExpr &e, std::vector<GenExpr> &out) {
  // The node itself: one of its children of the same type, or a literal.
  for (const GenExpr &child : e.children)
    if (child.type == e.type)
      out.push_back(child);
  if (e.kind != GenExpr::Kind::Literal && e.kind != GenExpr::Kind::Name)
    out.push_back(literal(e.type, e.type == ExprType::Int     ? "1"
                                  : e.type == ExprType::Float ? "1.0"
                                                              : "true"));
  // Or a simpler child.
  for (size_t k = 0; k < e.children.size(); ++k) {
    std::vector<GenExpr> simpler;
    simplerTrees(e.children[k], simpler);
    for (GenExpr &child : simpler) {
      GenExpr copy = e;
      copy.children[k] = std::move(child);
      out.push_back(std::move(copy));
    }
  }
}

} // namespace

GeneratedCase fuzz::generateCase(uint64_t seed) { return Generator(seed).generate(seed); }

std::vector<GeneratedCase> fuzz::simplifications(const GeneratedCase &c) {
  std::vector<GeneratedCase> out;
  auto with = [&](auto change) {
    GeneratedCase copy = c;
    change(copy);
    out.push_back(std::move(copy));
  };
  if (c.batch > 1)
    with([](GeneratedCase &x) { x.batch = 1; });
  if (c.heads > 1)
    with([](GeneratedCase &x) { x.heads = x.kvHeads = 1; });
  if (c.queryLen > 1) {
    with([](GeneratedCase &x) { x.queryLen = (x.queryLen + 1) / 2; });
    with([](GeneratedCase &x) { x.queryLen -= 1; });
  }
  if (c.keyLen > 1) {
    with([](GeneratedCase &x) { x.keyLen = (x.keyLen + 1) / 2; });
    with([](GeneratedCase &x) { x.keyLen -= 1; });
  }
  if (c.headDim > 16)
    with([](GeneratedCase &x) { x.headDim = 16; });
  if (c.hasScore)
    with([](GeneratedCase &x) { x.hasScore = false; });
  if (c.hasMask) {
    std::vector<GenExpr> simpler;
    simplerTrees(c.mask, simpler);
    for (GenExpr &mask : simpler)
      with([&](GeneratedCase &x) { x.mask = mask; });
  }
  if (c.hasScore) {
    std::vector<GenExpr> simpler;
    simplerTrees(c.score, simpler);
    for (GenExpr &score : simpler)
      with([&](GeneratedCase &x) { x.score = score; });
  }
  return out;
}
