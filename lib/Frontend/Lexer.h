//===- Lexer.h - Tokens of the .flash language and front-end internals ----===//
//
// Private to lib/Frontend: the token stream, the diagnostics helper that every
// stage reports through, and the hand-off from the parser to Sema.
//
// Lexical rules:
//   whitespace (newlines included) only separates tokens; `#` starts a
//   comment that runs to the end of the line;
//   identifiers  [A-Za-z_][A-Za-z0-9_]*  (keywords are identifiers that the
//   parser recognises by spelling, see isKeyword);
//   integers     [0-9]+
//   floats       [0-9]+ '.' [0-9]* exp? | '.' [0-9]+ exp? | [0-9]+ exp
//                with exp = [eE] [+-]? [0-9]+
//   punctuation  { } [ ] ( ) , : ; = + - * / % < <= > >= == != && || !
// Anything else is an invalid character: it is reported once per run of such
// characters and becomes an Error token that the parser skips silently.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_LIB_FRONTEND_LEXER_H
#define FLASHC_LIB_FRONTEND_LEXER_H

#include "flashc/Frontend/AST.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/SMLoc.h"
#include "llvm/Support/SourceMgr.h"

#include <deque>
#include <optional>
#include <string>

namespace flashc::frontend::detail {

//===----------------------------------------------------------------------===//
// Diagnostics
//===----------------------------------------------------------------------===//

/// Prints errors and notes through the SourceMgr and counts the errors. After
/// `kMaxErrors` errors it prints one last message and drops the rest (the
/// parser then stops), so random input cannot flood the terminal. An error at
/// the very location of the previous one is dropped as its consequence.
class Diagnostics {
public:
  static constexpr unsigned kMaxErrors = 20;

  explicit Diagnostics(llvm::SourceMgr &sourceMgr) : sourceMgr(sourceMgr) {}

  void error(llvm::SMLoc loc, const llvm::Twine &message);
  /// A note that belongs to the last error; dropped when that error was.
  void note(llvm::SMLoc loc, const llvm::Twine &message);

  unsigned errorCount() const { return errors; }
  /// True once the error limit was hit: stop doing work.
  bool gaveUp() const { return errors > kMaxErrors; }

private:
  llvm::SourceMgr &sourceMgr;
  unsigned errors = 0;
  bool lastErrorShown = false;
  llvm::SMLoc lastErrorLoc;
};

//===----------------------------------------------------------------------===//
// Tokens and the lexer
//===----------------------------------------------------------------------===//

enum class TokenKind {
  Eof,
  Error, // invalid input; already reported by the lexer
  Identifier,
  Integer,
  Float,
  LBrace, RBrace, LBracket, RBracket, LParen, RParen,
  Comma, Colon, Semicolon, Assign,
  Plus, Minus, Star, Slash, Percent,
  Less, LessEqual, Greater, GreaterEqual, EqualEqual, NotEqual,
  AndAnd, OrOr, Not,
};

struct Token {
  TokenKind kind = TokenKind::Eof;
  llvm::StringRef text; // the spelling; empty at Eof (points at the end)
  bool startsLine = false; // a newline (or the buffer start) precedes it

  llvm::SMLoc loc() const { return llvm::SMLoc::getFromPointer(text.begin()); }
  llvm::SMLoc endLoc() const { return llvm::SMLoc::getFromPointer(text.end()); }
  bool is(TokenKind k) const { return kind == k; }
  bool isIdentifier(llvm::StringRef spelling) const {
    return kind == TokenKind::Identifier && text == spelling;
  }
};

/// How a token is shown in messages: 'mask', '}', "end of file", ...
std::string describe(const Token &token);

/// An on-demand lexer with unbounded lookahead, so diagnostics come out in
/// source order.
class Lexer {
public:
  Lexer(llvm::StringRef buffer, Diagnostics &diags)
      : buffer(buffer), diags(diags) {}

  /// The token `n` positions ahead of the current one (0: the current one).
  const Token &peek(unsigned n = 0);
  /// Consumes the current token and returns it.
  Token next();

private:
  Token lex();
  Token make(TokenKind kind, size_t begin, size_t end);

  llvm::StringRef buffer;
  Diagnostics &diags;
  size_t pos = 0;
  bool sawNewline = true;
  std::deque<Token> lookahead;
};

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

/// attention, param, tensor, q, k, v, scale, score, mask, true, false.
bool isKeyword(llvm::StringRef name);
/// s, b, h, i, j: a description ("the query position"), or null.
const char *builtinValueDescription(llvm::StringRef name);
std::optional<Builtin> lookupBuiltin(llvm::StringRef name);
unsigned builtinArity(Builtin fn);

/// The candidate closest to `name` by edit distance, if close enough to be a
/// plausible typo; empty otherwise.
llvm::StringRef closestMatch(llvm::StringRef name,
                             llvm::ArrayRef<llvm::StringRef> candidates);

//===----------------------------------------------------------------------===//
// Parser -> Sema
//===----------------------------------------------------------------------===//

/// What the parser knows about a variant beyond the AST: which declarations
/// were written and which of them failed to parse. Sema uses it to check
/// what can be checked without repeating or cascading from parse errors.
struct VariantSyntax {
  bool hasName = false;           // the header named the variant
  bool written[3] = {};           // q, k, v were declared
  bool shapesBroken = false;      // a q/k/v shape failed to parse
  bool qkvTypeBroken = false;     // a q/k/v dtype was invalid
  llvm::StringSet<> poisoned;     // params/tensors whose declaration failed
  bool anyDeclBroken = false;     // some declaration failed to parse
  bool skippedItem = false;       // text that may hold items was skipped
  llvm::StringSet<> skippedNames; // identifiers in text skipped by recovery
};

/// Checks one parsed variant: fills the q/k/v defaults and Variant::dims,
/// resolves names and types every expression. Reports through `diags`;
/// returns false on error.
bool checkVariant(Variant &variant, const VariantSyntax &syntax,
                  Diagnostics &diags);

} // namespace flashc::frontend::detail

#endif // FLASHC_LIB_FRONTEND_LEXER_H
