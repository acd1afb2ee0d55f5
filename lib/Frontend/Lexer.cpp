//===- Lexer.cpp - Tokens, diagnostics and names of .flash ----------------===//

#include "Lexer.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cctype>

using namespace flashc::frontend;
using namespace flashc::frontend::detail;
using llvm::SMLoc;
using llvm::StringRef;

//===----------------------------------------------------------------------===//
// Diagnostics
//===----------------------------------------------------------------------===//

void Diagnostics::error(SMLoc loc, const llvm::Twine &message) {
  // A second error at the very spot of the previous one is a consequence of
  // it (`mask = j <=` at the end of a file: no expression and no '}').
  if (errors != 0 && loc == lastErrorLoc) {
    lastErrorShown = false;
    return;
  }
  lastErrorLoc = loc;
  ++errors;
  lastErrorShown = errors <= kMaxErrors;
  if (lastErrorShown) {
    sourceMgr.PrintMessage(loc, llvm::SourceMgr::DK_Error, message);
  } else if (errors == kMaxErrors + 1) {
    sourceMgr.PrintMessage(loc, llvm::SourceMgr::DK_Error,
                           "too many errors; stopping here");
  }
}

void Diagnostics::note(SMLoc loc, const llvm::Twine &message) {
  if (lastErrorShown)
    sourceMgr.PrintMessage(loc, llvm::SourceMgr::DK_Note, message);
}

//===----------------------------------------------------------------------===//
// Lexer
//===----------------------------------------------------------------------===//

static bool isIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
static bool isIdentChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
static bool isDigit(char c) { return c >= '0' && c <= '9'; }
static bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}
/// Characters that can begin a token (or whitespace / a comment).
static bool canStartToken(char c) {
  return isIdentStart(c) || isDigit(c) || isSpace(c) ||
         StringRef("#{}[](),:;=+-*/%<>!&|.").contains(c);
}

const Token &Lexer::peek(unsigned n) {
  while (lookahead.size() <= n) {
    // Once at the end, every further token is the same Eof.
    if (!lookahead.empty() && lookahead.back().is(TokenKind::Eof)) {
      lookahead.push_back(lookahead.back());
      continue;
    }
    lookahead.push_back(lex());
  }
  return lookahead[n];
}

Token Lexer::next() {
  Token token = peek(0);
  if (!token.is(TokenKind::Eof))
    lookahead.pop_front();
  return token;
}

Token Lexer::make(TokenKind kind, size_t begin, size_t end) {
  Token token;
  token.kind = kind;
  token.text = buffer.slice(begin, end);
  token.startsLine = sawNewline;
  sawNewline = false;
  pos = end;
  return token;
}

Token Lexer::lex() {
  const size_t size = buffer.size();
  // Whitespace and comments.
  while (pos < size) {
    char c = buffer[pos];
    if (c == '\n') {
      sawNewline = true;
      ++pos;
    } else if (isSpace(c)) {
      ++pos;
    } else if (c == '#') {
      while (pos < size && buffer[pos] != '\n')
        ++pos;
    } else {
      break;
    }
  }
  if (pos >= size)
    return make(TokenKind::Eof, size, size);

  const size_t begin = pos;
  const char c = buffer[pos];
  auto at = [&](size_t i) { return i < size ? buffer[i] : '\0'; };

  if (isIdentStart(c)) {
    size_t end = pos + 1;
    while (end < size && isIdentChar(buffer[end]))
      ++end;
    return make(TokenKind::Identifier, begin, end);
  }

  if (isDigit(c) || (c == '.' && isDigit(at(pos + 1)))) {
    size_t end = pos;
    bool isFloat = false;
    while (isDigit(at(end)))
      ++end;
    if (at(end) == '.') {
      isFloat = true;
      ++end;
      while (isDigit(at(end)))
        ++end;
    }
    if (at(end) == 'e' || at(end) == 'E') {
      size_t exp = end + 1;
      if (at(exp) == '+' || at(exp) == '-')
        ++exp;
      if (isDigit(at(exp))) {
        isFloat = true;
        end = exp;
        while (isDigit(at(end)))
          ++end;
      }
    }
    if (isIdentChar(at(end)) || at(end) == '.') {
      // `12abc`, `1e`, `1.2.3`: one bad number, not a number and a name.
      while (isIdentChar(at(end)) || at(end) == '.')
        ++end;
      diags.error(SMLoc::getFromPointer(buffer.data() + begin),
                  "invalid number '" + buffer.slice(begin, end) + "'");
      return make(TokenKind::Error, begin, end);
    }
    return make(isFloat ? TokenKind::Float : TokenKind::Integer, begin, end);
  }

  auto single = [&](TokenKind kind) { return make(kind, begin, begin + 1); };
  auto pair = [&](char second, TokenKind two, TokenKind one) {
    if (at(pos + 1) == second)
      return make(two, begin, begin + 2);
    return make(one, begin, begin + 1);
  };

  switch (c) {
  case '{': return single(TokenKind::LBrace);
  case '}': return single(TokenKind::RBrace);
  case '[': return single(TokenKind::LBracket);
  case ']': return single(TokenKind::RBracket);
  case '(': return single(TokenKind::LParen);
  case ')': return single(TokenKind::RParen);
  case ',': return single(TokenKind::Comma);
  case ':': return single(TokenKind::Colon);
  case ';': return single(TokenKind::Semicolon);
  case '+': return single(TokenKind::Plus);
  case '-': return single(TokenKind::Minus);
  case '*': return single(TokenKind::Star);
  case '/': return single(TokenKind::Slash);
  case '%': return single(TokenKind::Percent);
  case '=': return pair('=', TokenKind::EqualEqual, TokenKind::Assign);
  case '!': return pair('=', TokenKind::NotEqual, TokenKind::Not);
  case '<': return pair('=', TokenKind::LessEqual, TokenKind::Less);
  case '>': return pair('=', TokenKind::GreaterEqual, TokenKind::Greater);
  case '&':
  case '|':
    if (at(pos + 1) == c)
      return make(c == '&' ? TokenKind::AndAnd : TokenKind::OrOr, begin,
                  begin + 2);
    diags.error(SMLoc::getFromPointer(buffer.data() + begin),
                llvm::Twine("invalid operator '") + llvm::Twine(c) +
                    "'; did you mean '" + llvm::Twine(c) + llvm::Twine(c) +
                    "'?");
    return make(TokenKind::Error, begin, begin + 1);
  default:
    break;
  }

  // A run of characters that cannot start a token: one error for all.
  size_t end = begin + 1;
  while (end < size && !canStartToken(buffer[end]))
    ++end;
  std::string message;
  llvm::raw_string_ostream os(message);
  unsigned char byte = static_cast<unsigned char>(c);
  if (byte >= 0x20 && byte < 0x7f)
    os << "invalid character '" << c << "'";
  else
    os << "invalid character (byte 0x" << llvm::format_hex_no_prefix(byte, 2, /*Upper=*/true)
       << ")" << (byte >= 0x80 ? "; .flash files are plain ASCII" : "");
  diags.error(SMLoc::getFromPointer(buffer.data() + begin), os.str());
  return make(TokenKind::Error, begin, end);
}

std::string flashc::frontend::detail::describe(const Token &token) {
  switch (token.kind) {
  case TokenKind::Eof:
    return "end of file";
  case TokenKind::Error:
    return "invalid input";
  case TokenKind::Identifier:
    if (isKeyword(token.text))
      return "keyword '" + token.text.str() + "'";
    return "'" + token.text.str() + "'";
  default:
    return "'" + token.text.str() + "'";
  }
}

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

bool flashc::frontend::detail::isKeyword(StringRef name) {
  static const char *const keywords[] = {
      "attention", "param", "tensor", "q",    "k",     "v",
      "scale",     "score", "mask",   "true", "false",
  };
  for (const char *keyword : keywords)
    if (name == keyword)
      return true;
  return false;
}

const char *flashc::frontend::detail::builtinValueDescription(StringRef name) {
  return llvm::StringSwitch<const char *>(name)
      .Case("s", "the attention score")
      .Case("b", "the batch index")
      .Case("h", "the query head index")
      .Case("i", "the query position")
      .Case("j", "the key position")
      .Default(nullptr);
}

std::optional<Builtin> flashc::frontend::detail::lookupBuiltin(StringRef name) {
  return llvm::StringSwitch<std::optional<Builtin>>(name)
      .Case("min", Builtin::Min)
      .Case("max", Builtin::Max)
      .Case("abs", Builtin::Abs)
      .Case("exp", Builtin::Exp)
      .Case("log", Builtin::Log)
      .Case("tanh", Builtin::Tanh)
      .Case("sqrt", Builtin::Sqrt)
      .Case("select", Builtin::Select)
      .Default(std::nullopt);
}

unsigned flashc::frontend::detail::builtinArity(Builtin fn) {
  switch (fn) {
  case Builtin::Min:
  case Builtin::Max:
    return 2;
  case Builtin::Select:
    return 3;
  case Builtin::Abs:
  case Builtin::Exp:
  case Builtin::Log:
  case Builtin::Tanh:
  case Builtin::Sqrt:
    return 1;
  }
  return 1;
}

/// True when `a` becomes `b` by swapping two adjacent characters.
static bool isTransposition(StringRef a, StringRef b) {
  if (a.size() != b.size())
    return false;
  size_t n = 0;
  while (n < a.size() && a[n] == b[n])
    ++n;
  return n + 1 < a.size() && a[n] == b[n + 1] && a[n + 1] == b[n] &&
         a.substr(n + 2) == b.substr(n + 2);
}

StringRef flashc::frontend::detail::closestMatch(
    StringRef name, llvm::ArrayRef<StringRef> candidates) {
  // About one edit per three characters (a swap of two neighbours counts as
  // one): `windw` -> `window`, `tahn` -> `tanh`; nothing for names of one or
  // two characters, where every short name would look close.
  if (name.size() <= 2)
    return {};
  const unsigned limit = (name.size() + 1) / 3;
  StringRef best;
  unsigned bestDistance = limit + 1;
  for (StringRef candidate : candidates) {
    if (candidate == name)
      continue;
    unsigned distance =
        isTransposition(name, candidate)
            ? 1
            : name.edit_distance(candidate, /*AllowReplacements=*/true,
                                 /*MaxEditDistance=*/limit);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  return bestDistance <= limit ? best : StringRef();
}
