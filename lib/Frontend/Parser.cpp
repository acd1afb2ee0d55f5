//===- Parser.cpp - The .flash recursive-descent parser -------------------===//
//
// Grammar (newlines are plain whitespace; every item starts with its own
// keyword, so items need no separator, though `;` is accepted):
//
//   file     ::= variant*
//   variant  ::= 'attention' IDENT '{' (item | ';')* '}'
//   item     ::= ('q' | 'k' | 'v') ':' DTYPE shape
//              | 'param' IDENT ':' ('i32' | 'f32') '=' '-'? NUMBER
//              | 'tensor' IDENT ':' DTYPE shape
//              | ('scale' | 'score' | 'mask') '=' expr
//   shape    ::= '[' dim (',' dim)* ']'        dim ::= IDENT | INTEGER
//   expr     ::= binary expression, C precedence, left associative:
//                '||' < '&&' < '==' '!=' < '<' '<=' '>' '>=' < '+' '-'
//                < '*' '/' '%' < unary '-' '!'
//   primary  ::= INTEGER | FLOAT | 'true' | 'false' | IDENT
//              | IDENT '[' expr (',' expr)* ']'     (aux tensor element)
//              | IDENT '(' (expr (',' expr)*)? ')'  (builtin call)
//              | '(' expr ')'
//
// The parser resolves what it can by spelling alone (s b h i j, true/false,
// builtin functions); every other name becomes an ExprKind::Param node with
// declIndex == -1 that Sema resolves, because items come in any order.
//
// Error recovery: after an error inside an item, tokens are skipped up to
// the next `;`, `}`, `attention NAME` or item start (an item keyword followed
// by the token it requires: `q :`, `mask =`, `param NAME`, ...).
//
//===----------------------------------------------------------------------===//

#include "Lexer.h"

#include "flashc/Frontend/Frontend.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace flashc::frontend;
using namespace flashc::frontend::detail;
using llvm::SMLoc;
using llvm::StringRef;
using llvm::Twine;

namespace {

using ExprPtr = std::unique_ptr<Expr>;

constexpr unsigned kMaxNesting = 200;     // parentheses, unary ops, calls
constexpr unsigned kMaxExprNodes = 4096;  // nodes in one expression
constexpr int64_t kMaxDimension = 2147483647;
/// The largest page of a paged K/V cache, in keys (a page holds whole key
/// blocks up to this, and a page index times it stays in 32 bits).
constexpr int64_t kMaxPageSize = 4096;

enum class DTypeUse { QKV, Tensor, Param };

/// What a misspelled dtype probably meant (`float` -> `f32`), if anything.
StringRef dtypeAlias(StringRef name) {
  std::string lower = name.lower();
  return llvm::StringSwitch<StringRef>(lower)
      .Case("bfloat16", "bf16")
      .Case("bfloat", "bf16")
      .Case("half", "f16")
      .Case("float16", "f16")
      .Case("fp16", "f16")
      .Case("float", "f32")
      .Case("float32", "f32")
      .Case("fp32", "f32")
      .Case("int", "i32")
      .Case("int32", "i32")
      .Case("bf16", "bf16") // wrong case: BF16
      .Case("f16", "f16")
      .Case("f32", "f32")
      .Case("i32", "i32")
      .Default(closestMatch(name, {"bf16", "f16", "f32", "i32"}));
}

int binaryPrecedence(TokenKind kind) {
  switch (kind) {
  case TokenKind::OrOr: return 1;
  case TokenKind::AndAnd: return 2;
  case TokenKind::EqualEqual:
  case TokenKind::NotEqual: return 3;
  case TokenKind::Less:
  case TokenKind::LessEqual:
  case TokenKind::Greater:
  case TokenKind::GreaterEqual: return 4;
  case TokenKind::Plus:
  case TokenKind::Minus: return 5;
  case TokenKind::Star:
  case TokenKind::Slash:
  case TokenKind::Percent: return 6;
  default: return 0;
  }
}

BinaryOp binaryOpFor(TokenKind kind) {
  switch (kind) {
  case TokenKind::OrOr: return BinaryOp::Or;
  case TokenKind::AndAnd: return BinaryOp::And;
  case TokenKind::EqualEqual: return BinaryOp::Eq;
  case TokenKind::NotEqual: return BinaryOp::Ne;
  case TokenKind::Less: return BinaryOp::Lt;
  case TokenKind::LessEqual: return BinaryOp::Le;
  case TokenKind::Greater: return BinaryOp::Gt;
  case TokenKind::GreaterEqual: return BinaryOp::Ge;
  case TokenKind::Plus: return BinaryOp::Add;
  case TokenKind::Minus: return BinaryOp::Sub;
  case TokenKind::Star: return BinaryOp::Mul;
  case TokenKind::Slash: return BinaryOp::Div;
  default: return BinaryOp::Mod;
  }
}

bool isItemKeyword(StringRef name) {
  return name == "q" || name == "k" || name == "v" || name == "param" ||
         name == "tensor" || name == "paged" || name == "varlen" || name == "scale" || name == "score" ||
         name == "mask";
}

const char *const kItemList =
    "q, k, v, param, tensor, paged, varlen, scale, score or mask";

class Parser {
public:
  Parser(StringRef buffer, Diagnostics &diags)
      : lexer(buffer, diags), diags(diags), buffer(buffer) {}

  std::optional<Module> parseFile();

private:
  /// One variant under construction.
  struct VariantState {
    Variant variant;
    VariantSyntax syntax;
    SMLoc exprItemLoc[3]; // first scale, score, mask item
  };

  // Tokens.
  const Token &tok() { return lexer.peek(); }
  const Token &peek(unsigned n) { return lexer.peek(n); }
  Token consume() {
    prev = lexer.next();
    return prev;
  }

  // Diagnostics.
  /// Returns whether the error was reported (notes may follow).
  bool error(const Token &at, const Twine &message) {
    if (at.is(TokenKind::Error)) // the lexer reported it already
      return false;
    diags.error(at.loc(), message);
    return true;
  }
  /// Reports "expected WHAT" at the current token, or right after the
  /// previous token when the current one is on a later line or is the end of
  /// the file (so the caret sits where the missing text belongs).
  bool errorExpected(const Twine &what) {
    const Token &t = tok();
    if (t.is(TokenKind::Error))
      return false;
    if ((t.startsLine || t.is(TokenKind::Eof)) && prev.text.data())
      diags.error(prev.endLoc(), "expected " + what);
    else
      diags.error(t.loc(), "expected " + what + ", found " + describe(t));
    return true;
  }

  // Structure.
  bool atItemStart();
  bool atVariantStart();
  void recoverInBlock();
  /// Remembers the names in text skipped by recovery: Sema does not call
  /// them unknown, since the skipped text may have declared them.
  void noteSkipped(const Token &token) {
    if (currentSyntax && token.is(TokenKind::Identifier))
      currentSyntax->skippedNames.insert(token.text);
  }
  void parseVariant(Module &module);
  bool parseItem(VariantState &state);
  bool checkItemEnd(const Twine &what);
  bool parseQKV(VariantState &state, int index);
  bool parseParam(VariantState &state);
  bool parseTensor(VariantState &state);
  bool parsePaged(VariantState &state);
  bool parseVarlen(VariantState &state);
  /// A broken `paged` or `varlen` item skips the rest of its line (its
  /// `v:` would otherwise start a bogus v declaration); returns true (the
  /// item is consumed).
  bool skipBrokenItemLine(VariantSyntax &syntax);
  bool parseExprItem(VariantState &state);

  // Pieces of declarations.
  enum class Result { Ok, Bad, Fail }; // Bad: reported, input consumed
  Result parseElementType(DTypeUse use, StringRef owner, ElementType &type);
  Result parseShape(std::vector<Dim> &shape, SMLoc &bracketLoc);

  // Expressions.
  ExprPtr parseExpression();
  ExprPtr parseBinary(int minPrecedence);
  ExprPtr parseUnary();
  ExprPtr parsePrimary();
  ExprPtr parseNumber(const Token &number, bool negate, SMLoc loc);
  ExprPtr parseName();
  bool parseArguments(TokenKind close, const char *closeSpelling,
                      std::vector<ExprPtr> &args);
  ExprPtr makeExpr(ExprKind kind, SMLoc loc) {
    ++exprNodes;
    return std::make_unique<Expr>(kind, loc);
  }

  Lexer lexer;
  Diagnostics &diags;
  StringRef buffer;
  Token prev; // the last consumed token (text is null before the first)
  VariantSyntax *currentSyntax = nullptr; // of the variant being parsed
  bool lastBlockHadErrors = false;
  llvm::StringMap<SMLoc> variantNames; // first definition of each name
  unsigned nesting = 0;
  unsigned exprNodes = 0;
  bool exprLimitReported = false;
};

} // namespace

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

bool Parser::atItemStart() {
  const Token &t = tok();
  if (!t.is(TokenKind::Identifier))
    return false;
  const Token &n = peek(1);
  StringRef s = t.text;
  if (s == "q" || s == "k" || s == "v")
    return n.is(TokenKind::Colon);
  if (s == "scale" || s == "score" || s == "mask")
    return n.is(TokenKind::Assign);
  if (s == "param" || s == "tensor")
    return n.is(TokenKind::Identifier);
  if (s == "paged")
    return n.isIdentifier("k");
  if (s == "varlen")
    return n.isIdentifier("q") || n.isIdentifier("k");
  return false;
}

bool Parser::atVariantStart() {
  return tok().isIdentifier("attention") &&
         (peek(1).is(TokenKind::Identifier) || peek(1).is(TokenKind::LBrace));
}

void Parser::recoverInBlock() {
  while (true) {
    const Token &t = tok();
    if (t.is(TokenKind::Eof) || t.is(TokenKind::RBrace) || atItemStart() ||
        atVariantStart())
      return;
    // A line that starts like an item (`maks = ...`, `slopes: f32[H]`, any
    // item keyword) is probably one, even if misspelled: report it rather
    // than skip it.
    if (t.startsLine && t.is(TokenKind::Identifier) &&
        (isItemKeyword(t.text) || peek(1).is(TokenKind::Assign) ||
         peek(1).is(TokenKind::Colon)))
      return;
    if (t.is(TokenKind::Semicolon)) {
      consume();
      return;
    }
    noteSkipped(consume());
  }
}

std::optional<Module> Parser::parseFile() {
  Module module;
  bool sawVariant = false;
  while (!tok().is(TokenKind::Eof) && !diags.gaveUp()) {
    if (tok().isIdentifier("attention")) {
      sawVariant = true;
      parseVariant(module);
      continue;
    }
    // Junk at the top level: one error, then skip to the next variant. Junk
    // right after the '}' of a block that had errors is more likely the
    // rest of a broken item (`select(c, } + 1)`): skip it quietly.
    bool quiet = lastBlockHadErrors && !tok().startsLine &&
                 prev.is(TokenKind::RBrace);
    if (quiet) {
      // nothing: see above
    } else if (tok().is(TokenKind::RBrace))
      error(tok(), "unexpected '}' outside of an attention block");
    else if (atItemStart())
      error(tok(), "expected 'attention NAME {', found " + describe(tok()) +
                       "; items must be inside an attention block");
    else if (tok().is(TokenKind::Identifier) &&
             !closestMatch(tok().text, {"attention"}).empty())
      error(tok(), "expected 'attention NAME {', found " + describe(tok()) +
                       "; did you mean 'attention'?");
    else
      error(tok(), "expected 'attention NAME {', found " + describe(tok()));
    while (!tok().is(TokenKind::Eof) && !tok().isIdentifier("attention"))
      consume();
  }
  if (!sawVariant && diags.errorCount() == 0)
    diags.error(SMLoc::getFromPointer(buffer.data()),
                "no attention variants declared (expected 'attention NAME "
                "{ ... }')");
  if (diags.errorCount() != 0)
    return std::nullopt;
  return module;
}

void Parser::parseVariant(Module &module) {
  Token keyword = consume(); // attention
  auto state = std::make_unique<VariantState>();
  Variant &variant = state->variant;
  VariantSyntax &syntax = state->syntax;
  variant.loc = keyword.loc();

  auto skipToNextVariant = [&] {
    while (!tok().is(TokenKind::Eof) && !atVariantStart())
      consume();
  };

  if (tok().is(TokenKind::Identifier) && !tok().isIdentifier("attention")) {
    Token name = consume();
    variant.name = name.text.str();
    variant.loc = name.loc();
    syntax.hasName = true;
  } else {
    errorExpected("a variant name after 'attention'");
    if (!tok().is(TokenKind::LBrace)) {
      skipToNextVariant();
      return;
    }
  }
  if (!tok().is(TokenKind::LBrace)) {
    errorExpected("'{' after 'attention " + variant.name + "'");
    skipToNextVariant();
    return;
  }
  Token lbrace = consume();
  currentSyntax = &syntax;
  unsigned errorsBefore = diags.errorCount();

  while (!diags.gaveUp()) {
    const Token &t = tok();
    if (t.is(TokenKind::RBrace)) {
      consume();
      break;
    }
    if (t.is(TokenKind::Eof) || atVariantStart()) {
      if (errorExpected("'}' to end attention block '" + variant.name + "'"))
        diags.note(lbrace.loc(), "the block starts here");
      break;
    }
    if (t.is(TokenKind::Semicolon)) {
      consume();
      continue;
    }
    const char *before = t.text.data();
    if (!parseItem(*state)) {
      recoverInBlock();
      if (tok().text.data() == before) // always make progress
        consume();
    }
  }
  currentSyntax = nullptr;
  lastBlockHadErrors = diags.errorCount() != errorsBefore;
  if (diags.gaveUp())
    return;

  bool duplicate = false;
  if (syntax.hasName) {
    auto [it, inserted] = variantNames.try_emplace(variant.name, variant.loc);
    if (!inserted) {
      duplicate = true;
      diags.error(variant.loc,
                  "redefinition of attention variant '" + variant.name + "'");
      diags.note(it->second, "'" + variant.name + "' first defined here");
    }
  }
  checkVariant(variant, syntax, diags);
  if (syntax.hasName && !duplicate)
    module.variants.push_back(std::move(variant));
}

bool Parser::parseItem(VariantState &state) {
  const Token &t = tok();
  if (t.is(TokenKind::Identifier)) {
    StringRef s = t.text;
    if (s == "q")
      return parseQKV(state, 0);
    if (s == "k")
      return parseQKV(state, 1);
    if (s == "v")
      return parseQKV(state, 2);
    if (s == "param")
      return parseParam(state);
    if (s == "tensor")
      return parseTensor(state);
    if (s == "paged")
      return parsePaged(state);
    if (s == "varlen")
      return parseVarlen(state);
    if (s == "scale" || s == "score" || s == "mask")
      return parseExprItem(state);

    std::string message = "expected an item (" + std::string(kItemList) +
                          ") or '}', found " + describe(t);
    const Token &n1 = peek(1), &n2 = peek(2);
    // What this line skips may declare q/k/v or a name (`window: i32 = 4`,
    // `parm window: i32 = 4`): do not report those as missing later.
    state.syntax.skippedItem = true;
    if (n1.is(TokenKind::Colon))
      state.syntax.poisoned.insert(s);
    else if (n1.is(TokenKind::Identifier) && n2.is(TokenKind::Colon))
      state.syntax.poisoned.insert(n1.text);
    static const StringRef itemKeywords[] = {"param", "tensor", "paged", "varlen",
                                             "scale", "score", "mask"};
    StringRef close = closestMatch(s, itemKeywords);
    if (!close.empty()) {
      message += "; did you mean '" + close.str() + "'?";
    } else if (n1.is(TokenKind::Colon) && n2.is(TokenKind::Identifier)) {
      // `window: i32 = 4` or `slopes: f32[H]`
      bool shaped = peek(3).is(TokenKind::LBracket);
      message += shaped ? "; did you mean 'tensor " : "; did you mean 'param ";
      message += s.str() + ": ...'?";
    }
    error(t, message);
    noteSkipped(consume()); // so that recovery starts after it
    return false;
  }
  error(t, "expected an item (" + std::string(kItemList) + ") or '}', found " +
               describe(t));
  state.syntax.skippedItem = true;
  consume();
  return false;
}

/// After an item: the next token must be able to follow one.
bool Parser::checkItemEnd(const Twine &what) {
  const Token &t = tok();
  if (t.is(TokenKind::Semicolon) || t.is(TokenKind::RBrace) ||
      t.is(TokenKind::Eof) || t.startsLine ||
      (t.is(TokenKind::Identifier) &&
       (isItemKeyword(t.text) || t.text == "attention")))
    return true;
  error(t, "unexpected " + describe(t) + " after " + what);
  if (currentSyntax)
    currentSyntax->skippedItem = true;
  return false;
}

Parser::Result Parser::parseElementType(DTypeUse use, StringRef owner,
                                        ElementType &type) {
  const Token &t = tok();
  if (!t.is(TokenKind::Identifier)) {
    errorExpected(use == DTypeUse::Param ? Twine("a type (i32 or f32)")
                                         : Twine("a dtype"));
    return Result::Fail;
  }
  Token name = consume();
  StringRef s = name.text;
  std::optional<ElementType> parsed;
  if (s == "bf16")
    parsed = ElementType::BF16;
  else if (s == "f16")
    parsed = ElementType::F16;
  else if (s == "f32")
    parsed = ElementType::F32;
  else if (s == "i32")
    parsed = ElementType::I32;

  const char *supported = use == DTypeUse::QKV      ? "bf16, f16 and f32"
                          : use == DTypeUse::Tensor ? "bf16, f16, f32 and i32"
                                                    : "i32 and f32";
  bool allowed = parsed.has_value();
  if (use == DTypeUse::QKV && parsed == ElementType::I32)
    allowed = false;
  if (use == DTypeUse::Param &&
      (parsed == ElementType::BF16 || parsed == ElementType::F16))
    allowed = false;
  if (allowed) {
    type = *parsed;
    return Result::Ok;
  }
  std::string message;
  if (parsed) {
    message = "unsupported dtype '" + s.str() + "' for " + owner.str() +
              "; supported: " + supported;
  } else {
    message = "unknown dtype '" + s.str() + "' for " + owner.str() +
              "; supported: " + supported;
    StringRef alias = dtypeAlias(s);
    bool aliasAllowed =
        !alias.empty() && !(use == DTypeUse::QKV && alias == "i32") &&
        !(use == DTypeUse::Param && (alias == "bf16" || alias == "f16"));
    if (aliasAllowed)
      message += " (did you mean '" + alias.str() + "'?)";
  }
  error(name, message);
  return Result::Bad;
}

Parser::Result Parser::parseShape(std::vector<Dim> &shape, SMLoc &bracketLoc) {
  if (!tok().is(TokenKind::LBracket)) {
    errorExpected("'[' and a shape");
    return Result::Fail;
  }
  bracketLoc = consume().loc();
  Result result = Result::Ok;
  while (true) {
    const Token &t = tok();
    Dim dim;
    dim.loc = t.loc();
    if (t.is(TokenKind::Identifier)) {
      dim.symbol = consume().text.str();
    } else if (t.is(TokenKind::Integer)) {
      Token number = consume();
      uint64_t value = 0;
      if (number.text.getAsInteger(10, value) ||
          value > static_cast<uint64_t>(kMaxDimension)) {
        error(number, "dimension " + number.text + " is too large (at most " +
                          Twine(kMaxDimension) + ")");
        result = Result::Bad;
        value = 1;
      } else if (value == 0) {
        error(number, "a dimension must be a positive integer, not 0");
        result = Result::Bad;
        value = 1;
      }
      dim.value = static_cast<int64_t>(value);
    } else {
      errorExpected("a dimension (a shape symbol or a positive integer)");
      return Result::Fail;
    }
    shape.push_back(std::move(dim));
    if (tok().is(TokenKind::Comma)) {
      consume();
      continue;
    }
    if (tok().is(TokenKind::RBracket)) {
      consume();
      return result;
    }
    errorExpected("',' or ']' in the shape");
    return Result::Fail;
  }
}

bool Parser::parseQKV(VariantState &state, int index) {
  Token keyword = consume();
  Variant &variant = state.variant;
  VariantSyntax &syntax = state.syntax;
  TensorDecl *slot[3] = {&variant.q, &variant.k, &variant.v};
  static const char *const roleShapes[3] = {
      "[batch, heads, query length, head dim]",
      "[batch, kv heads, key length, head dim]",
      "[batch, kv heads, key length, head dim]"};

  bool duplicate = syntax.written[index];
  if (duplicate) {
    if (error(keyword, "redefinition of '" + keyword.text + "'"))
      diags.note(slot[index]->loc,
                 "'" + keyword.text + "' first declared here");
  }
  syntax.written[index] = true;

  TensorDecl decl;
  decl.name = keyword.text.str();
  decl.loc = keyword.loc();
  bool broken = false, typeBroken = true; // until a dtype parses
  Result result = Result::Fail;
  if (!tok().is(TokenKind::Colon)) {
    errorExpected("':' after '" + keyword.text + "'");
  } else {
    consume();
    result = parseElementType(DTypeUse::QKV, decl.name, decl.elementType);
    typeBroken = result != Result::Ok;
    if (result != Result::Fail) {
      SMLoc bracket;
      result = parseShape(decl.shape, bracket);
      broken = result != Result::Ok;
      if (result == Result::Ok && decl.shape.size() != 4) {
        diags.error(bracket, "'" + keyword.text + "' must have rank 4 " +
                                 roleShapes[index] + ", but its shape has " +
                                 Twine(decl.shape.size()) + " dimension" +
                                 (decl.shape.size() == 1 ? "" : "s"));
        broken = true;
      }
    }
  }
  if (result == Result::Fail)
    broken = true;
  if (duplicate)
    return result != Result::Fail && checkItemEnd("the declaration of " +
                                                  keyword.text);
  syntax.shapesBroken |= broken;
  syntax.qkvTypeBroken |= typeBroken;
  *slot[index] = std::move(decl);
  if (result == Result::Fail)
    return false;
  return checkItemEnd("the declaration of " + keyword.text);
}

bool Parser::parseParam(VariantState &state) {
  consume(); // param
  VariantSyntax &syntax = state.syntax;
  if (!tok().is(TokenKind::Identifier)) {
    errorExpected("a param name after 'param'");
    syntax.anyDeclBroken = true;
    return false;
  }
  Token name = consume();
  ParamDecl param;
  param.name = name.text.str();
  param.loc = name.loc();
  auto fail = [&] {
    syntax.poisoned.insert(name.text);
    syntax.anyDeclBroken = true;
    return false;
  };

  if (!tok().is(TokenKind::Colon)) {
    errorExpected("':' and a type (i32 or f32) after 'param " + name.text +
                  "'");
    return fail();
  }
  consume();
  ElementType type = ElementType::F32;
  Result typeResult =
      parseElementType(DTypeUse::Param, "param '" + param.name + "'", type);
  if (typeResult == Result::Fail)
    return fail();
  param.type = type == ElementType::I32 ? ScalarType::Int : ScalarType::Float;

  if (!tok().is(TokenKind::Assign)) {
    errorExpected("'=' and a default value for param '" + name.text + "'");
    return fail();
  }
  consume();
  bool negative = false;
  SMLoc valueLoc = tok().loc();
  if (tok().is(TokenKind::Minus)) {
    negative = true;
    consume();
  }
  const Token &t = tok();
  if (!t.is(TokenKind::Integer) && !t.is(TokenKind::Float)) {
    errorExpected("a number (the default value of '" + name.text + "')");
    return fail();
  }
  Token number = consume();
  // The value as written, sign included, for messages.
  std::string spelled = (negative ? "-" : "") + number.text.str();
  if (param.type == ScalarType::Int) {
    uint64_t value = 0;
    if (number.is(TokenKind::Float)) {
      diags.error(valueLoc, "the default value of i32 param '" + name.text +
                                "' must be an integer, not " + spelled);
    } else if (number.text.getAsInteger(10, value) ||
               value > (negative ? 2147483648ull : 2147483647ull)) {
      diags.error(valueLoc, "the default value " + spelled + " of param '" +
                                name.text + "' does not fit in i32");
    } else {
      param.defaultValue = negative ? -static_cast<double>(value)
                                    : static_cast<double>(value);
    }
  } else {
    double value = std::strtod(number.text.str().c_str(), nullptr);
    if (!(value <= 3.4028234663852886e38)) // FLT_MAX; also catches inf
      diags.error(valueLoc, "the default value " + spelled + " of param '" +
                                name.text + "' does not fit in f32");
    else
      param.defaultValue = negative ? -value : value;
  }
  // A bad value is reported above; the declaration itself stands.

  if (typeResult == Result::Bad)
    syntax.poisoned.insert(name.text);
  else
    state.variant.params.push_back(std::move(param));
  return checkItemEnd("the declaration of param '" + name.text + "'");
}

bool Parser::skipBrokenItemLine(VariantSyntax &syntax) {
  syntax.anyDeclBroken = true;
  while (!tok().startsLine && !tok().is(TokenKind::Eof) && !tok().is(TokenKind::RBrace))
    noteSkipped(consume());
  return true;
}

bool Parser::parsePaged(VariantState &state) {
  Token keyword = consume(); // paged
  auto fail = [&] { return skipBrokenItemLine(state.syntax); };
  if (state.variant.paged) {
    if (error(keyword, "redefinition of the paged K/V cache"))
      diags.note(state.variant.paged->loc, "first declared here");
    return fail();
  }
  // `k, v:` names what is paged: both, always (one block table serves both).
  if (!tok().isIdentifier("k") || !peek(1).is(TokenKind::Comma) || !peek(2).isIdentifier("v") ||
      !peek(3).is(TokenKind::Colon)) {
    errorExpected("'k, v:' after 'paged' (K and V are paged together)");
    return fail();
  }
  for (int n = 0; n < 4; ++n)
    consume();
  PagedDecl paged;
  paged.loc = keyword.loc();
  bool seen[3] = {};
  while (true) {
    if (!tok().is(TokenKind::Identifier)) {
      errorExpected("'table NAME', 'lengths NAME' or 'page SIZE'");
      return fail();
    }
    Token clause = consume();
    int which = clause.text == "table" ? 0 : clause.text == "lengths" ? 1
                : clause.text == "page"    ? 2
                                           : -1;
    if (which < 0) {
      error(clause, "unknown clause '" + clause.text +
                        "' in 'paged'; expected table, lengths or page");
      return fail();
    }
    if (seen[which]) {
      error(clause, "'" + clause.text + "' given twice in 'paged'");
      return fail();
    }
    seen[which] = true;
    if (which < 2) {
      if (!tok().is(TokenKind::Identifier)) {
        errorExpected(Twine("the name of the ") +
                      (which == 0 ? "block table (i32 [B, blocks])" : "key lengths (i32 [B])"));
        return fail();
      }
      (which == 0 ? paged.table : paged.lengths) = consume().text.str();
    } else {
      if (!tok().is(TokenKind::Integer)) {
        errorExpected("the page size in keys (an integer)");
        return fail();
      }
      Token number = consume();
      uint64_t value = 0;
      if (number.text.getAsInteger(10, value) || value < 1 || value > kMaxPageSize) {
        error(number, "page size " + number.text + " is out of range (1 to " +
                          Twine(kMaxPageSize) + " keys)");
        return fail();
      }
      paged.pageSize = static_cast<int64_t>(value);
    }
    if (!tok().is(TokenKind::Comma))
      break;
    consume();
  }
  if (!seen[0] || !seen[1]) {
    error(keyword, Twine("'paged' needs ") + (!seen[0] ? "a 'table NAME'" : "a 'lengths NAME'") +
                       " clause (paged k, v: table block_table, lengths kv_len, page 16)");
    return fail();
  }
  if (paged.table == paged.lengths) {
    error(keyword, "the block table and the key lengths need two names, not '" + paged.table +
                       "' twice");
    return fail();
  }
  state.variant.paged = std::move(paged);
  return checkItemEnd("the paged K/V declaration");
}

bool Parser::parseVarlen(VariantState &state) {
  Token keyword = consume(); // varlen
  auto fail = [&] { return skipBrokenItemLine(state.syntax); };
  // `q:` packs the queries (and O); `k, v:` the keys and values, together.
  bool queries = tok().isIdentifier("q") && peek(1).is(TokenKind::Colon);
  bool keys = tok().isIdentifier("k") && peek(1).is(TokenKind::Comma) &&
              peek(2).isIdentifier("v") && peek(3).is(TokenKind::Colon);
  if (!queries && !keys) {
    errorExpected("'q:' or 'k, v:' after 'varlen' (what the offsets pack)");
    return fail();
  }
  std::optional<VarlenDecl> &slot = queries ? state.variant.varlenQueries
                                            : state.variant.varlenKeys;
  if (slot) {
    if (error(keyword, Twine("redefinition of the varlen ") + (queries ? "queries" : "keys")))
      diags.note(slot->loc, "first declared here");
    return fail();
  }
  for (int n = 0; n < (queries ? 2 : 4); ++n)
    consume();
  if (!tok().isIdentifier("offsets")) {
    errorExpected(Twine("'offsets NAME' (the i32 [B + 1] cu_seqlens_") + (queries ? "q" : "k") +
                  " of the packed sequences)");
    return fail();
  }
  consume();
  if (!tok().is(TokenKind::Identifier)) {
    errorExpected("the name of the offsets (i32 [B + 1])");
    return fail();
  }
  VarlenDecl decl;
  decl.loc = keyword.loc();
  decl.offsets = consume().text.str();
  slot = std::move(decl);
  return checkItemEnd("the varlen declaration");
}

bool Parser::parseTensor(VariantState &state) {
  consume(); // tensor
  VariantSyntax &syntax = state.syntax;
  if (!tok().is(TokenKind::Identifier)) {
    errorExpected("a tensor name after 'tensor'");
    syntax.anyDeclBroken = true;
    return false;
  }
  Token name = consume();
  TensorDecl decl;
  decl.name = name.text.str();
  decl.loc = name.loc();
  auto fail = [&] {
    syntax.poisoned.insert(name.text);
    syntax.anyDeclBroken = true;
    return false;
  };
  if (!tok().is(TokenKind::Colon)) {
    errorExpected("':' and a dtype after 'tensor " + name.text + "'");
    return fail();
  }
  consume();
  Result typeResult = parseElementType(
      DTypeUse::Tensor, "tensor '" + decl.name + "'", decl.elementType);
  if (typeResult == Result::Fail)
    return fail();
  SMLoc bracket;
  Result shapeResult = parseShape(decl.shape, bracket);
  if (shapeResult == Result::Fail)
    return fail();
  bool ok = typeResult == Result::Ok && shapeResult == Result::Ok;
  if (shapeResult == Result::Ok &&
      (decl.shape.empty() || decl.shape.size() > 4)) {
    diags.error(bracket, "tensor '" + name.text +
                             "' must have rank 1 to 4, but its shape has " +
                             Twine(decl.shape.size()) + " dimensions");
    ok = false;
  }
  if (!ok)
    syntax.poisoned.insert(name.text);
  state.variant.tensors.push_back(std::move(decl));
  return checkItemEnd("the declaration of tensor '" + name.text + "'");
}

bool Parser::parseExprItem(VariantState &state) {
  Token keyword = consume();
  int index = keyword.text == "scale" ? 0 : keyword.text == "score" ? 1 : 2;
  Variant &variant = state.variant;
  std::unique_ptr<Expr> *slot[3] = {&variant.scale, &variant.score,
                                    &variant.mask};
  bool duplicate = state.exprItemLoc[index].isValid();
  if (duplicate) {
    if (error(keyword, "redefinition of '" + keyword.text + "'"))
      diags.note(state.exprItemLoc[index],
                 "'" + keyword.text + "' first defined here");
  } else {
    state.exprItemLoc[index] = keyword.loc();
  }
  if (!tok().is(TokenKind::Assign)) {
    if (tok().is(TokenKind::EqualEqual))
      error(tok(), "expected '=' after '" + keyword.text + "', found '=='");
    else
      errorExpected("'=' after '" + keyword.text + "'");
    return false;
  }
  consume();
  ExprPtr expr = parseExpression();
  if (!expr)
    return false;
  // Junk after the expression means it was cut short: drop it rather than
  // check a fragment.
  if (!checkItemEnd("the " + keyword.text +
                    " expression; expected an operator"))
    return false;
  if (!duplicate)
    *slot[index] = std::move(expr);
  return true;
}

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

ExprPtr Parser::parseExpression() {
  nesting = 0;
  exprNodes = 0;
  exprLimitReported = false;
  return parseBinary(1);
}

ExprPtr Parser::parseBinary(int minPrecedence) {
  ExprPtr lhs = parseUnary();
  if (!lhs)
    return nullptr;
  while (true) {
    int precedence = binaryPrecedence(tok().kind);
    if (precedence == 0 || precedence < minPrecedence)
      return lhs;
    Token op = consume();
    ExprPtr rhs = parseBinary(precedence + 1);
    if (!rhs)
      return nullptr;
    ExprPtr node = makeExpr(ExprKind::Binary, op.loc());
    node->binaryOp = binaryOpFor(op.kind);
    node->operands.push_back(std::move(lhs));
    node->operands.push_back(std::move(rhs));
    lhs = std::move(node);
  }
}

ExprPtr Parser::parseUnary() {
  if (nesting >= kMaxNesting || exprNodes >= kMaxExprNodes) {
    if (!exprLimitReported)
      error(tok(), nesting >= kMaxNesting
                       ? "expression is nested too deeply (the limit is " +
                             Twine(kMaxNesting) + " levels)"
                       : "expression is too long (the limit is " +
                             Twine(kMaxExprNodes) + " operations)");
    exprLimitReported = true;
    return nullptr;
  }
  struct Nest {
    unsigned &n;
    explicit Nest(unsigned &n) : n(n) { ++n; }
    ~Nest() { --n; }
  } nest(nesting);

  const Token &t = tok();
  if (t.is(TokenKind::Minus) || t.is(TokenKind::Not)) {
    Token op = consume();
    // `-2147483648` is one literal, so that every i32 can be written.
    if (op.is(TokenKind::Minus) &&
        (tok().is(TokenKind::Integer) || tok().is(TokenKind::Float))) {
      Token number = consume();
      return parseNumber(number, /*negate=*/true, op.loc());
    }
    ExprPtr operand = parseUnary();
    if (!operand)
      return nullptr;
    ExprPtr node = makeExpr(ExprKind::Unary, op.loc());
    node->unaryOp = op.is(TokenKind::Minus) ? UnaryOp::Neg : UnaryOp::Not;
    node->operands.push_back(std::move(operand));
    return node;
  }
  return parsePrimary();
}

ExprPtr Parser::parseNumber(const Token &number, bool negate, SMLoc loc) {
  if (number.is(TokenKind::Integer)) {
    uint64_t value = 0;
    bool overflow = number.text.getAsInteger(10, value);
    uint64_t limit = negate ? 2147483648ull : 2147483647ull;
    if (overflow || value > limit) {
      diags.error(loc, "integer literal " + Twine(negate ? "-" : "") +
                           number.text +
                           " does not fit in i32 (-2147483648 to "
                           "2147483647)");
      value = 0; // reported; keep going with a harmless value
    }
    ExprPtr node = makeExpr(ExprKind::IntLiteral, loc);
    node->intValue =
        negate ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
    return node;
  }
  double value = std::strtod(number.text.str().c_str(), nullptr);
  if (!(value <= 3.4028234663852886e38)) { // FLT_MAX; also catches inf
    diags.error(loc, "float literal " + Twine(negate ? "-" : "") +
                         number.text + " does not fit in f32");
    value = 0; // reported; keep going with a harmless value
  }
  ExprPtr node = makeExpr(ExprKind::FloatLiteral, loc);
  node->floatValue = negate ? -value : value;
  return node;
}

bool Parser::parseArguments(TokenKind close, const char *closeSpelling,
                            std::vector<ExprPtr> &args) {
  Token open = consume();
  if (tok().is(close) && close == TokenKind::RParen) {
    consume();
    return true;
  }
  while (true) {
    ExprPtr arg = parseBinary(1);
    if (!arg)
      return false;
    args.push_back(std::move(arg));
    if (tok().is(TokenKind::Comma)) {
      consume();
      continue;
    }
    if (tok().is(close)) {
      consume();
      return true;
    }
    if (errorExpected(Twine("',' or '") + closeSpelling + "'"))
      diags.note(open.loc(), "to match this '" + open.text + "'");
    return false;
  }
}

ExprPtr Parser::parsePrimary() {
  const Token &t = tok();
  switch (t.kind) {
  case TokenKind::Integer:
  case TokenKind::Float: {
    Token number = consume();
    return parseNumber(number, /*negate=*/false, number.loc());
  }
  case TokenKind::LParen: {
    Token open = consume();
    ExprPtr inner = parseBinary(1);
    if (!inner)
      return nullptr;
    if (!tok().is(TokenKind::RParen)) {
      if (errorExpected("')'"))
        diags.note(open.loc(), "to match this '('");
      return nullptr;
    }
    consume();
    return inner;
  }
  case TokenKind::Identifier:
    if (!isKeyword(t.text) || t.text == "true" || t.text == "false")
      return parseName();
    [[fallthrough]];
  default:
    if (prev.text.data())
      errorExpected("an expression after '" + prev.text + "'");
    else
      errorExpected("an expression");
    return nullptr;
  }
}

ExprPtr Parser::parseName() {
  Token name = consume();
  StringRef s = name.text;

  if (tok().is(TokenKind::LParen)) {
    std::optional<Builtin> fn = lookupBuiltin(s);
    if (!fn) {
      static const StringRef names[] = {"min", "max",  "abs",  "exp",
                                        "log", "tanh", "sqrt", "select"};
      StringRef close = closestMatch(s, names);
      if (!close.empty())
        diags.error(name.loc(), "unknown function '" + s + "'; did you mean '" +
                                    close + "'?");
      else
        diags.error(name.loc(), "unknown function '" + s +
                                    "'; the functions are min, max, abs, exp, "
                                    "log, tanh, sqrt and select");
      return nullptr;
    }
    std::vector<ExprPtr> args;
    if (!parseArguments(TokenKind::RParen, ")", args))
      return nullptr;
    unsigned arity = builtinArity(*fn);
    if (args.size() != arity) {
      diags.error(name.loc(), "'" + s + "' takes " + Twine(arity) +
                                  (arity == 1 ? " argument" : " arguments") +
                                  ", but " + Twine(args.size()) +
                                  (args.size() == 1 ? " was" : " were") +
                                  " given");
      return nullptr;
    }
    ExprPtr node = makeExpr(ExprKind::Call, name.loc());
    node->builtin = *fn;
    node->operands = std::move(args);
    return node;
  }

  if (tok().is(TokenKind::LBracket)) {
    std::vector<ExprPtr> args;
    if (!parseArguments(TokenKind::RBracket, "]", args))
      return nullptr;
    ExprPtr node = makeExpr(ExprKind::Index, name.loc());
    node->name = s.str();
    node->operands = std::move(args);
    return node;
  }

  if (s == "true" || s == "false") {
    ExprPtr node = makeExpr(ExprKind::BoolLiteral, name.loc());
    node->boolValue = s == "true";
    return node;
  }
  if (s.size() == 1) {
    std::optional<ExprKind> kind;
    switch (s[0]) {
    case 's': kind = ExprKind::Score; break;
    case 'b': kind = ExprKind::Batch; break;
    case 'h': kind = ExprKind::Head; break;
    case 'i': kind = ExprKind::Query; break;
    case 'j': kind = ExprKind::Key; break;
    default: break;
    }
    if (kind) {
      ExprPtr node = makeExpr(*kind, name.loc());
      node->name = s.str();
      return node;
    }
  }
  if (lookupBuiltin(s)) {
    diags.error(name.loc(), "'" + s + "' is a function; call it as " + s +
                                "(...)");
    return nullptr;
  }
  // A param or a shape symbol: Sema decides.
  ExprPtr node = makeExpr(ExprKind::Param, name.loc());
  node->name = s.str();
  node->declIndex = -1;
  return node;
}

//===----------------------------------------------------------------------===//
// Entry point
//===----------------------------------------------------------------------===//

std::optional<Module>
flashc::frontend::parseFlashFile(llvm::SourceMgr &sourceMgr) {
  Diagnostics diags(sourceMgr);
  unsigned mainID = sourceMgr.getMainFileID();
  if (mainID == 0 || mainID > sourceMgr.getNumBuffers()) {
    // Nothing to point at: no buffer.
    sourceMgr.PrintMessage(SMLoc(), llvm::SourceMgr::DK_Error,
                           "no input buffer");
    return std::nullopt;
  }
  StringRef buffer = sourceMgr.getMemoryBuffer(mainID)->getBuffer();
  Parser parser(buffer, diags);
  return parser.parseFile();
}

std::optional<Module> flashc::frontend::parseFlashFile(StringRef path,
                                                       llvm::SourceMgr &sourceMgr) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
  if (!buffer) {
    llvm::SMDiagnostic diag(path, llvm::SourceMgr::DK_Error,
                            "cannot open input file '" + path.str() +
                                "': " + buffer.getError().message());
    if (llvm::SourceMgr::DiagHandlerTy handler = sourceMgr.getDiagHandler())
      handler(diag, sourceMgr.getDiagContext());
    else
      diag.print(nullptr, llvm::errs());
    return std::nullopt;
  }
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), SMLoc());
  return parseFlashFile(sourceMgr);
}
