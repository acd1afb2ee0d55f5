//===- InterpreterTest.cpp - Interpreter vs the naive fp64 reference ------===//
//
// Each test compiles a .flash variant to flash IR, runs it on the CPU
// interpreter and compares O and LSE with naiveAttention(), whose masks and
// score mods are written here by hand in C++ (independent of the front end's
// own evaluator). Every case runs twice: on the IR as the front end emits it
// and after flash-fuse-rescale + flash-fold-scale.
//
//===----------------------------------------------------------------------===//

#include "flashc/Dialect/Flash/Transforms/MaskIntervals.h"
#include "flashc/Frontend/Frontend.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"
#include "flashc/Interpreter/Inputs.h"
#include "flashc/Interpreter/Interpreter.h"
#include "flashc/Interpreter/MergeStates.h"
#include "flashc/Interpreter/Reference.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include "TestSizes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace flashc;
using flashc::interp::AttentionInputs;
using flashc::interp::AttentionOutputs;
using flashc::interp::ProblemShape;
using flashc::interp::ReferenceSpec;

namespace {

constexpr double kF32Bound = 1e-5;

using test::Sizes;
using test::toShape;

/// Owns the context and module of one compiled variant.
struct CompiledKernel {
  std::unique_ptr<mlir::MLIRContext> context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  flash::KernelOp kernel;
};

/// Compiles `source` (one variant, f32 q/k/v) with the given tiles. Parse
/// errors fail the test with the diagnostics.
CompiledKernel compile(const std::string &source, int64_t br, int64_t bc, int64_t headDim,
                       bool optimize) {
  CompiledKernel result;
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  result.context = std::make_unique<mlir::MLIRContext>(registry);

  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  sourceMgr.setDiagHandler(
      [](const llvm::SMDiagnostic &diag, void *out) {
        llvm::raw_string_ostream os(*static_cast<std::string *>(out));
        diag.print("test", os);
      },
      &diagnostics);
  sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(source, "test.flash"),
                               llvm::SMLoc());
  std::optional<frontend::Module> ast = frontend::parseFlashFile(sourceMgr);
  EXPECT_TRUE(ast.has_value()) << diagnostics;
  if (!ast)
    return result;
  frontend::KernelOptions options;
  options.blockRows = br;
  options.blockCols = bc;
  options.headDim = headDim;
  result.module = frontend::emitFlashIR(*result.context, *ast, options, sourceMgr);
  EXPECT_TRUE(result.module) << diagnostics;
  if (!result.module)
    return result;
  if (optimize) {
    mlir::PassManager pm(result.context.get());
    flash::buildFlashPipeline(pm);
    EXPECT_TRUE(mlir::succeeded(pm.run(*result.module)));
  }
  result.kernel = *result.module->getOps<flash::KernelOp>().begin();
  return result;
}

struct Case {
  std::string source;
  Sizes sizes;
  int64_t br = 32, bc = 32;
  uint64_t seed = 7;
  /// Hand-written reference semantics; gets the inputs (aux tensors).
  std::function<ReferenceSpec(const AttentionInputs &)> reference;
  /// Optional edits of the random inputs (planted maxima, lengths).
  std::function<void(AttentionInputs &)> tweak;
  llvm::StringMap<double> params;
};

double defaultScale(const Sizes &s) { return 1.0 / std::sqrt(static_cast<double>(s.D)); }

/// Runs `c` with and without the passes; returns the unoptimized outputs.
AttentionOutputs check(const Case &c) {
  AttentionOutputs first;
  for (bool optimize : {false, true}) {
    SCOPED_TRACE(optimize ? "after flash passes" : "front-end IR");
    CompiledKernel compiled = compile(c.source, c.br, c.bc, c.sizes.D, optimize);
    if (!compiled.kernel)
      return first;
    AttentionInputs inputs =
        interp::makeRandomInputs(compiled.kernel, toShape(c.sizes), c.seed);
    inputs.params = c.params;
    if (c.tweak)
      c.tweak(inputs);
    AttentionOutputs outputs;
    std::string error;
    EXPECT_TRUE(mlir::succeeded(interp::runKernel(compiled.kernel, inputs, outputs, error)))
        << error;
    interp::ReferenceOutputs reference = interp::naiveAttention(inputs, c.reference(inputs));
    interp::ErrorStats out = interp::compare(outputs.out, reference.out);
    interp::ErrorStats lse = interp::compare(outputs.lse, reference.lse);
    EXPECT_TRUE(out.passes(kF32Bound))
        << "O: rel " << out.relative << " max " << out.maxAbs << " nonfinite "
        << out.nonFinite << " inf-mismatch " << out.mismatchedInf;
    EXPECT_TRUE(lse.passes(kF32Bound))
        << "LSE: rel " << lse.relative << " max " << lse.maxAbs << " nonfinite "
        << lse.nonFinite << " inf-mismatch " << lse.mismatchedInf;
    if (!optimize)
      first = std::move(outputs);
  }
  return first;
}

ReferenceSpec plain(const Sizes &s) {
  ReferenceSpec spec;
  spec.scale = defaultScale(s);
  return spec;
}

ReferenceSpec masked(const Sizes &s, std::function<bool(int64_t, int64_t, int64_t, int64_t)> mask) {
  ReferenceSpec spec = plain(s);
  spec.mask = std::move(mask);
  return spec;
}

const char *kF32Header = "q: f32[B, H, N, D] k: f32[B, HKV, M, D] v: f32[B, HKV, M, D]\n";

std::string variant(const std::string &body) {
  return std::string("attention t {\n") + kF32Header + body + "\n}\n";
}

bool anyNaN(const std::vector<float> &values) {
  return llvm::any_of(values, [](float v) { return std::isnan(v); });
}

//===----------------------------------------------------------------------===//
// Plain and causal
//===----------------------------------------------------------------------===//

TEST(Interpreter, NonCausal) {
  Case c;
  c.source = variant("");
  c.sizes = {2, 2, 2, 96, 96, 32};
  c.reference = [&](const AttentionInputs &) { return plain(c.sizes); };
  check(c);
}

TEST(Interpreter, NonCausalRaggedLengths) {
  for (int64_t n : {257, 1000}) {
    SCOPED_TRACE("N = M = " + std::to_string(n));
    Case c;
    c.source = variant("");
    c.sizes = {1, 1, 1, n, n, 16};
    c.br = 64;
    c.bc = 64;
    c.reference = [&](const AttentionInputs &) { return plain(c.sizes); };
    check(c);
  }
}

TEST(Interpreter, CausalBlocksAligned) {
  Case c;
  c.source = variant("mask = j <= i");
  c.sizes = {1, 2, 2, 128, 128, 32};
  c.reference = [&](const AttentionInputs &) {
    return masked(c.sizes, [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; });
  };
  check(c);
}

TEST(Interpreter, CausalBottomRightOffsetNotAligned) {
  // M - N = 37: the diagonal crosses key blocks at offsets that are not a
  // multiple of Bc, and query tiles start mid-block.
  Case c;
  c.source = variant("mask = j <= i + (M - N)");
  c.sizes = {1, 1, 1, 100, 137, 32};
  c.br = 32;
  c.bc = 16;
  c.reference = [&](const AttentionInputs &) {
    return masked(c.sizes, [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i + 37; });
  };
  check(c);
}

TEST(Interpreter, BrDiffersFromBc) {
  for (auto [br, bc] : {std::pair<int64_t, int64_t>{64, 16}, {16, 64}, {48, 80}}) {
    SCOPED_TRACE("Br=" + std::to_string(br) + " Bc=" + std::to_string(bc));
    Case c;
    c.source = variant("mask = j <= i");
    c.sizes = {1, 2, 2, 257, 257, 32};
    c.br = br;
    c.bc = bc;
    c.reference = [&](const AttentionInputs &) {
      return masked(c.sizes, [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; });
    };
    check(c);
  }
}

TEST(Interpreter, LateMaximum) {
  // The largest scores sit in the last five keys, so the running max jumps
  // in the last block and every earlier block must be rescaled by a tiny α.
  Case c;
  c.source = variant("");
  c.sizes = {1, 1, 1, 64, 1000, 16};
  c.bc = 64;
  c.tweak = [&](AttentionInputs &in) {
    for (float &x : in.q)
      x = std::fabs(x) + 0.1f;
    for (int64_t j = 995; j < 1000; ++j)
      for (int64_t d = 0; d < 16; ++d)
        in.k[j * 16 + d] = 6.0f;
  };
  c.reference = [&](const AttentionInputs &) { return plain(c.sizes); };
  check(c);
}

//===----------------------------------------------------------------------===//
// Windows, padding, prefixes, documents
//===----------------------------------------------------------------------===//

TEST(Interpreter, SlidingWindowRowsMaskedInsideBlocks) {
  // window = 20 < Bc = 64: in most key blocks most rows see nothing, so the
  // fully-masked-row guard runs on rows whose running max is still -inf.
  Case c;
  c.source = variant("param window: i32 = 20\nmask = j <= i && i - j < window");
  c.sizes = {2, 2, 2, 300, 300, 16};
  c.bc = 64;
  c.reference = [&](const AttentionInputs &) {
    return masked(c.sizes,
                  [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i && i - j < 20; });
  };
  check(c);
}

TEST(Interpreter, SlidingWindowParamOverride) {
  Case c;
  c.source = variant("param window: i32 = 1024\nmask = i - j < window && j - i < window");
  c.sizes = {1, 1, 1, 200, 200, 16};
  c.params["window"] = 7;
  c.reference = [&](const AttentionInputs &) {
    return masked(c.sizes, [](int64_t, int64_t, int64_t i, int64_t j) {
      return i - j < 7 && j - i < 7;
    });
  };
  check(c);
}

TEST(Interpreter, KeyPaddingPerBatchLengths) {
  // M < N, and batch 1 has zero valid keys: its rows see no key at all.
  Case c;
  c.source = variant("tensor kv_len: i32[B]\nmask = j < kv_len[b]");
  c.sizes = {3, 2, 2, 120, 90, 16};
  c.tweak = [](AttentionInputs &in) {
    in.tensors["kv_len"].data = {90, 0, 41};
  };
  c.reference = [&](const AttentionInputs &in) {
    const interp::HostTensor &lengths = in.tensors.find("kv_len")->second;
    return masked(c.sizes, [&lengths](int64_t b, int64_t, int64_t, int64_t j) {
      return j < static_cast<int64_t>(lengths.data[b]);
    });
  };
  AttentionOutputs out = check(c);
  ASSERT_FALSE(anyNaN(out.out));
  ASSERT_FALSE(anyNaN(out.lse));
  // Batch 1: O = 0 and LSE = -inf on every row.
  int64_t rowsPerBatch = 2 * 120;
  for (int64_t row = rowsPerBatch; row < 2 * rowsPerBatch; ++row) {
    EXPECT_TRUE(std::isinf(out.lse[row]) && out.lse[row] < 0) << "row " << row;
    for (int64_t d = 0; d < 16; ++d)
      ASSERT_EQ(out.out[row * 16 + d], 0.0f) << "row " << row;
  }
}

TEST(Interpreter, RowsThatSeeNoKey) {
  // Rows i < 10 see nothing; rows i >= 10 are causal.
  Case c;
  c.source = variant("mask = i >= 10 && j <= i");
  c.sizes = {1, 1, 1, 70, 70, 16};
  c.reference = [&](const AttentionInputs &) {
    return masked(c.sizes,
                  [](int64_t, int64_t, int64_t i, int64_t j) { return i >= 10 && j <= i; });
  };
  AttentionOutputs out = check(c);
  ASSERT_FALSE(anyNaN(out.out));
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_TRUE(std::isinf(out.lse[i]) && out.lse[i] < 0);
    for (int64_t d = 0; d < 16; ++d)
      EXPECT_EQ(out.out[i * 16 + d], 0.0f);
  }
  EXPECT_TRUE(std::isfinite(out.lse[10]));
}

TEST(Interpreter, PrefixLM) {
  Case c;
  c.source = variant("param prefix: i32 = 50\nmask = j < prefix || j <= i");
  c.sizes = {1, 2, 2, 130, 130, 16};
  c.reference = [&](const AttentionInputs &) {
    return masked(c.sizes,
                  [](int64_t, int64_t, int64_t i, int64_t j) { return j < 50 || j <= i; });
  };
  check(c);
}

TEST(Interpreter, DocumentIds) {
  Case c;
  c.source = variant("tensor doc: i32[B, N]\nmask = doc[b, i] == doc[b, j] && j <= i");
  c.sizes = {2, 1, 1, 150, 150, 16};
  c.reference = [&](const AttentionInputs &in) {
    const interp::HostTensor &doc = in.tensors.find("doc")->second;
    return masked(c.sizes, [&doc](int64_t b, int64_t, int64_t i, int64_t j) {
      return doc.at({b, i}) == doc.at({b, j}) && j <= i;
    });
  };
  check(c);
}

TEST(BlockSummary, IsExactAndObeyedAndAWrongOneFailsTheReference) {
  // doc[b, i] == doc[b, j] && j <= i with 5 documents: the summary the
  // interpreter computes is the brute-force class of every tile, the run
  // obeys it (full tiles unmasked, empty ones skipped) and matches the fp64
  // reference; a planted summary that calls a partial tile full, or a
  // visible one empty, changes O and fails the reference check.
  Case c;
  c.source = variant("tensor doc: i32[B, N]\nmask = doc[b, i] == doc[b, j] && j <= i");
  c.sizes = {2, 3, 3, 200, 200, 16};
  CompiledKernel compiled = compile(c.source, 32, 32, 16, /*optimize=*/true);
  ASSERT_TRUE(compiled.kernel);
  flash::BlockSummaryAttr attr = compiled.kernel.getBlockSummaryAttr();
  ASSERT_TRUE(attr);
  EXPECT_TRUE(attr.getPerBatch());
  EXPECT_FALSE(attr.getPerHead()); // one summary serves every head
  AttentionInputs inputs =
      interp::makeRandomInputs(compiled.kernel, toShape(c.sizes), 3, /*documents=*/5);
  const interp::HostTensor &doc = inputs.tensors.find("doc")->second;
  auto visible = [&doc](int64_t b, int64_t, int64_t i, int64_t j) {
    return doc.at({b, i}) == doc.at({b, j}) && j <= i;
  };
  std::vector<uint8_t> summary;
  std::string error;
  ASSERT_TRUE(mlir::succeeded(interp::computeBlockSummary(compiled.kernel, inputs, summary,
                                                          error)))
      << error;
  flash::BlockSummaryShape shape = flash::BlockSummaryShape::of(attr, 32, 32, 2, 3, 200, 200);
  ASSERT_EQ(static_cast<int64_t>(summary.size()), shape.bytes());
  int64_t partial = -1, visibleTile = -1, counts[3] = {0, 0, 0};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t qt = 0; qt < shape.queryTiles; ++qt)
      for (int64_t kt = 0; kt < shape.keyBlocks; ++kt) {
        bool any = false, all = true;
        for (int64_t i = qt * 32; i < std::min<int64_t>(200, qt * 32 + 32); ++i)
          for (int64_t j = kt * 32; j < std::min<int64_t>(200, kt * 32 + 32); ++j) {
            any |= visible(b, 0, i, j);
            all &= visible(b, 0, i, j);
          }
        int expected = !any ? flash::kBlockEmpty : all ? flash::kBlockFull : flash::kBlockPartial;
        int64_t at = shape.offset(b, 0, qt, kt);
        EXPECT_EQ(summary[at], expected) << "b " << b << " qt " << qt << " kt " << kt;
        ++counts[expected];
        if (expected == flash::kBlockPartial && partial < 0)
          partial = at;
        if (expected != flash::kBlockEmpty && visibleTile < 0)
          visibleTile = at;
      }
  EXPECT_GT(counts[flash::kBlockEmpty], 0);
  EXPECT_GT(counts[flash::kBlockFull], 0);
  ASSERT_GE(partial, 0);

  ReferenceSpec spec = masked(c.sizes, visible);
  interp::ReferenceOutputs reference = interp::naiveAttention(inputs, spec);
  auto runWith = [&](std::vector<uint8_t> planted, AttentionOutputs &outputs) {
    AttentionInputs withSummary = inputs;
    withSummary.blockSummary = std::move(planted);
    std::string runError;
    EXPECT_TRUE(mlir::succeeded(interp::runKernel(compiled.kernel, withSummary, outputs,
                                                  runError)))
        << runError;
    return interp::compare(outputs.out, reference.out).passes(kF32Bound);
  };
  AttentionOutputs computed, given, wrongFull, wrongEmpty;
  EXPECT_TRUE(runWith({}, computed)); // the interpreter's own summary
  EXPECT_GT(computed.tiles.full, 0);
  EXPECT_TRUE(runWith(summary, given));
  std::vector<uint8_t> planted = summary;
  planted[partial] = flash::kBlockFull;
  EXPECT_FALSE(runWith(planted, wrongFull));
  planted = summary;
  planted[visibleTile] = flash::kBlockEmpty;
  EXPECT_FALSE(runWith(planted, wrongEmpty));

  // A summary of the wrong size is a clear error, not a wild read.
  AttentionInputs shortSummary = inputs;
  shortSummary.blockSummary.assign(3, flash::kBlockPartial);
  AttentionOutputs outputs;
  EXPECT_TRUE(mlir::failed(interp::runKernel(compiled.kernel, shortSummary, outputs, error)));
  EXPECT_NE(error.find("the block summary has 3 bytes"), std::string::npos) << error;
}

/// The value of `value` when it folds to a constant, given `known` values
/// for the mask's (b, h, qt, kt): the emitted interval IR, evaluated.
mlir::Attribute foldedValue(mlir::Value value, llvm::DenseMap<mlir::Value, mlir::Attribute> &known) {
  auto it = known.find(value);
  if (it != known.end())
    return it->second;
  mlir::Operation *op = value.getDefiningOp();
  if (!op)
    return {};
  llvm::SmallVector<mlir::Attribute> operands;
  for (mlir::Value operand : op->getOperands())
    operands.push_back(foldedValue(operand, known));
  llvm::SmallVector<mlir::OpFoldResult> results;
  if (mlir::failed(op->fold(operands, results)) || results.size() != 1)
    return {};
  mlir::Attribute result = llvm::dyn_cast_if_present<mlir::Attribute>(results[0]);
  if (!result) // folded to one of its operands
    result = foldedValue(llvm::cast<mlir::Value>(results[0]), known);
  known[value] = result;
  return result;
}

TEST(MaskIntervals, AuxRangesDecideSortedDocumentTilesSoundly) {
  // The interval analysis the summary kernel runs, with the min/max of doc
  // over each tile's rows and keys (what the GPU reduces per warp) given by
  // a range function computed here: every tile it decides has that exact
  // class, it decides every tile whose document ranges are disjoint or one
  // and the same below the diagonal, and without the ranges it decides none
  // below the diagonal.
  CompiledKernel compiled =
      compile(variant("tensor doc: i32[B, N]\nmask = doc[b, i] == doc[b, j] && j <= i"), 32, 32, 16,
              /*optimize=*/false);
  ASSERT_TRUE(compiled.kernel);
  const Sizes sizes{2, 1, 1, 512, 512, 16};
  AttentionInputs inputs = interp::makeRandomInputs(compiled.kernel, toShape(sizes), 11, 6);
  std::vector<uint8_t> exact;
  std::string error;
  ASSERT_TRUE(mlir::succeeded(interp::computeBlockSummary(compiled.kernel, inputs, exact, error)))
      << error;
  flash::BlockSummaryShape shape = flash::BlockSummaryShape::of(
      compiled.kernel.getBlockSummaryAttr(), 32, 32, sizes.B, sizes.H, sizes.N, sizes.M);
  const interp::HostTensor &doc = inputs.tensors.find("doc")->second;
  flash::MaskOp mask;
  compiled.kernel.walk([&](flash::MaskOp op) { mask = op; });
  ASSERT_TRUE(mask);
  mlir::OpBuilder builder(mask);
  mlir::Location loc = mask.getLoc();

  int64_t decidedWithRanges = 0, decidedBelowDiagonalWithout = 0;
  for (int64_t b = 0; b < sizes.B; ++b)
    for (int64_t qt = 0; qt < shape.queryTiles; ++qt)
      for (int64_t kt = 0; kt < shape.keyBlocks; ++kt) {
        SCOPED_TRACE("b " + std::to_string(b) + " qt " + std::to_string(qt) + " kt " +
                     std::to_string(kt));
        llvm::DenseMap<mlir::Value, mlir::Attribute> known;
        auto index = [&](int64_t v) { return builder.getIndexAttr(v); };
        known[mask.getBatch()] = index(b);
        known[mask.getHead()] = index(0);
        known[mask.getQueryTile()] = index(qt);
        known[mask.getKeyTile()] = index(kt);
        auto docRange = [&](flash::AuxLoadOp load, llvm::ArrayRef<flash::Interval> indices)
            -> std::optional<flash::Interval> {
          EXPECT_EQ(load.getTensor(), "doc");
          EXPECT_EQ(indices.size(), 2u);
          auto bound = [&](mlir::Value v) {
            return llvm::cast<mlir::IntegerAttr>(foldedValue(v, known)).getInt();
          };
          EXPECT_EQ(bound(indices[0].lo), bound(indices[0].hi));
          double least = INFINITY, most = -INFINITY;
          for (int64_t p = bound(indices[1].lo); p <= bound(indices[1].hi); ++p) {
            least = std::min(least, doc.at({bound(indices[0].lo), p}));
            most = std::max(most, doc.at({bound(indices[0].lo), p}));
          }
          auto constant = [&](double v) -> mlir::Value {
            return mlir::arith::ConstantIntOp::create(builder, loc, static_cast<int64_t>(v), 64);
          };
          return flash::Interval{flash::Interval::Kind::Int, constant(least), constant(most)};
        };
        auto classify = [&](flash::MaskIntervalEmitter::AuxRangeFn range) {
          flash::MaskIntervalEmitter::Facts facts =
              flash::MaskIntervalEmitter(builder, loc, range).classify(mask, 0);
          auto truth = [&](mlir::Value v) {
            auto attr = llvm::dyn_cast_if_present<mlir::IntegerAttr>(foldedValue(v, known));
            EXPECT_TRUE(attr) << "the facts fold to constants";
            return attr && attr.getInt() != 0;
          };
          return std::make_pair(truth(facts.allVisible), truth(facts.anyVisible));
        };
        auto [all, any] = classify(docRange);
        int expected = exact[shape.offset(b, 0, qt, kt)];
        if (all) {
          EXPECT_EQ(expected, flash::kBlockFull);
        }
        if (!any) {
          EXPECT_EQ(expected, flash::kBlockEmpty);
        }
        decidedWithRanges += all || !any;
        double qFirst = doc.at({b, qt * 32}), qLast = doc.at({b, qt * 32 + 31});
        double kFirst = doc.at({b, kt * 32}), kLast = doc.at({b, kt * 32 + 31});
        bool disjoint = qLast < kFirst || kLast < qFirst; // ids are sorted
        bool oneDocument = qFirst == qLast && kFirst == kLast && qFirst == kFirst;
        if (disjoint || kt > qt) {
          EXPECT_FALSE(any);
        }
        if (oneDocument && kt < qt) {
          EXPECT_TRUE(all);
        }
        auto [allWithout, anyWithout] = classify({});
        if (kt < qt)
          decidedBelowDiagonalWithout += allWithout || !anyWithout;
      }
  EXPECT_GT(decidedWithRanges, shape.queryTiles * shape.keyBlocks); // most of 2 x 256
  EXPECT_EQ(decidedBelowDiagonalWithout, 0);
}

//===----------------------------------------------------------------------===//
// Score modifications
//===----------------------------------------------------------------------===//

TEST(Interpreter, ALiBi) {
  Case c;
  c.source = variant("tensor slopes: f32[H]\nscore = s - slopes[h] * (i - j)\nmask = j <= i");
  c.sizes = {1, 4, 4, 100, 100, 16};
  c.reference = [&](const AttentionInputs &in) {
    const interp::HostTensor &slopes = in.tensors.find("slopes")->second;
    ReferenceSpec spec =
        masked(c.sizes, [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; });
    spec.score = [&slopes](double s, int64_t, int64_t h, int64_t i, int64_t j) {
      return s - slopes.data[h] * static_cast<double>(i - j);
    };
    return spec;
  };
  check(c);
}

TEST(Interpreter, Softcap) {
  Case c;
  c.source = variant("param cap: f32 = 2.5\nscore = cap * tanh(s / cap)");
  c.sizes = {1, 2, 2, 90, 90, 16};
  c.tweak = [](AttentionInputs &in) {
    for (float &x : in.q)
      x *= 3.0f; // scores well past the cap
  };
  c.reference = [&](const AttentionInputs &) {
    ReferenceSpec spec = plain(c.sizes);
    spec.score = [](double s, int64_t, int64_t, int64_t, int64_t) {
      return 2.5 * std::tanh(s / 2.5);
    };
    return spec;
  };
  check(c);
}

TEST(Interpreter, CustomScale) {
  Case c;
  c.source = variant("scale = 0.5 / sqrt(D)\nmask = j <= i");
  c.sizes = {1, 1, 1, 64, 64, 16};
  c.reference = [&](const AttentionInputs &) {
    ReferenceSpec spec =
        masked(c.sizes, [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; });
    spec.scale = 0.5 / 4.0;
    return spec;
  };
  check(c);
}

//===----------------------------------------------------------------------===//
// Grouped heads
//===----------------------------------------------------------------------===//

TEST(Interpreter, GroupedQueryAttention) {
  Case c;
  c.source = variant("mask = j <= i");
  c.sizes = {2, 8, 2, 70, 70, 16}; // H = 4 * HKV
  c.reference = [&](const AttentionInputs &) {
    return masked(c.sizes, [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; });
  };
  check(c);
}

TEST(Interpreter, MultiQueryAttention) {
  Case c;
  c.source = variant("");
  c.sizes = {1, 4, 1, 70, 50, 16}; // one KV head for all query heads
  c.reference = [&](const AttentionInputs &) { return plain(c.sizes); };
  check(c);
}

//===----------------------------------------------------------------------===//
// Tile classification (flash-classify-tiles, run by the pipeline)
//===----------------------------------------------------------------------===//

/// A causal case with tiles br x bc, checked against the reference.
Case causalCase(Sizes sizes, int64_t br, int64_t bc) {
  Case c;
  c.source = variant("mask = j <= i");
  c.sizes = sizes;
  c.br = br;
  c.bc = bc;
  c.reference = [sizes](const AttentionInputs &) {
    return masked(sizes, [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; });
  };
  return c;
}

TEST(ClassifyTiles, CausalTilesAreCountedExactly) {
  // N = M = 256, Br = Bc = 64: per (b, h) 4 x 4 tiles, 6 above the diagonal
  // (empty), 6 below (full), 4 on it (partial).
  Case c = causalCase({1, 2, 2, 256, 256, 16}, 64, 64);
  check(c);
  CompiledKernel compiled = compile(c.source, 64, 64, 16, /*optimize=*/true);
  AttentionInputs inputs = interp::makeRandomInputs(compiled.kernel, toShape(c.sizes), 1);
  AttentionOutputs out;
  std::string error;
  ASSERT_TRUE(mlir::succeeded(interp::runKernel(compiled.kernel, inputs, out, error))) << error;
  EXPECT_EQ(out.tiles.empty, 2 * 6);
  EXPECT_EQ(out.tiles.full, 2 * 6);
  EXPECT_EQ(out.tiles.partial, 2 * 4);
}

TEST(ClassifyTiles, RowBandsAreProvedAndObeyed) {
  // Br = 128 splits into two bands of 64 rows (the pipeline's group-rows).
  // Causal with Bc = 64: the diagonal tile's last key block is empty for
  // band 0 only. The bands agree with the reference...
  Case c = causalCase({1, 1, 1, 256, 256, 16}, 128, 64);
  check(c);
  // ...and the interpreter obeys them as the GPU does: a band wrongly
  // proved empty hides every key from its rows (LSE -inf), which the
  // reference check would catch.
  CompiledKernel compiled = compile(c.source, 128, 64, 16, /*optimize=*/true);
  size_t banded = 0;
  compiled.kernel.walk([&](flash::MaskOp mask) {
    ASSERT_EQ(mask.getRowsVisible().size(), 2u);
    mlir::OpBuilder builder(mask);
    mlir::Value never = mlir::arith::ConstantIntOp::create(builder, mask.getLoc(), 0, 1);
    mask.getRowsVisibleMutable().slice(0, 1).assign(never);
    ++banded;
  });
  ASSERT_EQ(banded, 1u);
  AttentionInputs inputs = interp::makeRandomInputs(compiled.kernel, toShape(c.sizes), 1);
  AttentionOutputs out;
  std::string error;
  ASSERT_TRUE(mlir::succeeded(interp::runKernel(compiled.kernel, inputs, out, error))) << error;
  // Row 0 (band 0 of tile 0) sees key 0 alone; with its band "empty" it
  // sees none. Row 64 (band 1) is untouched.
  EXPECT_TRUE(std::isinf(out.lse[0]) && out.lse[0] < 0) << out.lse[0];
  EXPECT_TRUE(std::isfinite(out.lse[64])) << out.lse[64];
}

TEST(Frontend, PrintedNegationsOfLiteralsParseBack) {
  // Found by the libFuzzer target: `- -0` parsed as -(literal -0) and printed
  // as `-0`, which parses as the literal alone, so every print/parse cycle
  // lost a negation. The printer now keeps `-(0)`.
  for (const char *score : {"0.0 - ---0", "- -0.0 * s", "s + -(2)", "- -5 + s"}) {
    llvm::SourceMgr first, second;
    std::string source = variant(std::string("score = ") + score);
    first.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(source, "a.flash"),
                             llvm::SMLoc());
    std::optional<frontend::Module> ast = frontend::parseFlashFile(first);
    ASSERT_TRUE(ast) << source;
    std::string printed = frontend::toString(*ast);
    second.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(printed, "b.flash"),
                              llvm::SMLoc());
    std::optional<frontend::Module> reparsed = frontend::parseFlashFile(second);
    ASSERT_TRUE(reparsed) << printed;
    EXPECT_EQ(frontend::toString(*reparsed), printed) << score;
  }
}

TEST(ClassifyTiles, WrongClaimsFailTheBruteForceCheck) {
  // checkClassification evaluates the mask on every element of a classified
  // tile: a planted wrong claim (tile "empty", tile "full", band "empty")
  // fails, naming the tile and the element, while the true claims pass.
  Case c = causalCase({1, 1, 1, 256, 256, 16}, 128, 64);
  interp::RunOptions checked;
  checked.checkClassification = true;
  auto run = [&](llvm::function_ref<void(flash::MaskOp, mlir::OpBuilder &)> plant) {
    CompiledKernel compiled = compile(c.source, 128, 64, 16, /*optimize=*/true);
    compiled.kernel.walk([&](flash::MaskOp mask) {
      mlir::OpBuilder builder(mask);
      plant(mask, builder);
    });
    AttentionInputs inputs = interp::makeRandomInputs(compiled.kernel, toShape(c.sizes), 1);
    AttentionOutputs out;
    std::string error;
    bool failed = mlir::failed(interp::runKernel(compiled.kernel, inputs, out, error, checked));
    EXPECT_EQ(failed, !error.empty());
    return error;
  };
  EXPECT_EQ(run([](flash::MaskOp, mlir::OpBuilder &) {}), "");
  std::string empty = run([](flash::MaskOp mask, mlir::OpBuilder &builder) {
    mask.getAnyVisibleMutable().assign(
        mlir::arith::ConstantIntOp::create(builder, mask.getLoc(), 0, 1));
  });
  EXPECT_NE(empty.find("flash-classify-tiles proved the tile (b = 0, h = 0, query tile 0, key "
                       "block 0) empty, but (i = 0, j = 0) is visible"),
            std::string::npos)
      << empty;
  std::string full = run([](flash::MaskOp mask, mlir::OpBuilder &builder) {
    mask.getAllVisibleMutable().assign(
        mlir::arith::ConstantIntOp::create(builder, mask.getLoc(), 1, 1));
  });
  EXPECT_NE(full.find(") full, but (i = 0, j = 1) is masked"), std::string::npos) << full;
  std::string band = run([](flash::MaskOp mask, mlir::OpBuilder &builder) {
    mask.getRowsVisibleMutable().slice(1, 1).assign(
        mlir::arith::ConstantIntOp::create(builder, mask.getLoc(), 0, 1));
  });
  EXPECT_NE(band.find("empty in its row band, but (i = 64, j = 0) is visible"),
            std::string::npos)
      << band;
}

TEST(Interpreter, FullTilesAtAnyValueCount) {
  // A tile proved full copies the scores' tile to the mask's result. That
  // copy once read a reference into the value map after the insertion of
  // the result had rehashed it (a crash whenever the result was the 48th,
  // 96th, ... value). Masks of growing size cross those counts.
  for (int depth = 0; depth <= 40; ++depth) {
    std::string expr = "j";
    for (int d = 0; d < depth; ++d)
      expr = "max(" + expr + ", " + std::to_string(d % 3) + ")";
    Case c;
    c.source = variant("mask = " + expr + " >= b");
    c.sizes = {1, 2, 2, 40, 40, 16};
    c.reference = [&](const AttentionInputs &) {
      return masked(c.sizes, [](int64_t, int64_t, int64_t, int64_t) { return true; });
    };
    SCOPED_TRACE("depth " + std::to_string(depth));
    check(c);
  }
}

TEST(ClassifyTiles, WrapAroundIsNotProvedEmpty) {
  // j * 2^32 wraps to 0 in 32-bit arithmetic, so every key is visible. An
  // analysis that ignored wrap-around would prove blocks kt >= 1 empty.
  Case c;
  c.source = variant("mask = j * 65536 * 65536 < 1");
  c.sizes = {1, 1, 1, 100, 200, 16};
  c.reference = [&](const AttentionInputs &) {
    return masked(c.sizes, [](int64_t, int64_t, int64_t, int64_t j) {
      int32_t wrapped = static_cast<int32_t>(static_cast<uint32_t>(j) * 65536u * 65536u);
      return wrapped < 1;
    });
  };
  check(c);
}

TEST(ClassifyTiles, FloatMaskAndParameters) {
  // A float predicate with a parameter: exp(-|i - j| / width) > 0.1, i.e. a
  // symmetric window of about 2.3 * width keys.
  Case c;
  c.source = variant("param width: f32 = 10.0\nmask = exp(-abs(i - j) / width) > 0.1");
  c.sizes = {1, 1, 1, 300, 300, 16};
  c.reference = [&](const AttentionInputs &) {
    return masked(c.sizes, [](int64_t, int64_t, int64_t i, int64_t j) {
      float x = std::exp(-static_cast<float>(std::llabs(i - j)) / 10.0f);
      return x > 0.1f;
    });
  };
  check(c);
}

//===----------------------------------------------------------------------===//
// Inputs the interpreter must refuse
//===----------------------------------------------------------------------===//

TEST(Interpreter, RejectsHeadsNotMultipleOfKVHeads) {
  CompiledKernel compiled = compile(variant(""), 32, 32, 16, false);
  Sizes s{1, 3, 2, 10, 10, 16};
  AttentionInputs inputs = interp::makeRandomInputs(compiled.kernel, toShape(s), 1);
  AttentionOutputs outputs;
  std::string error;
  EXPECT_TRUE(mlir::failed(interp::runKernel(compiled.kernel, inputs, outputs, error)));
  EXPECT_NE(error.find("not a multiple of HKV"), std::string::npos) << error;
}

TEST(Interpreter, RejectsUnknownParameterAndMissingTensor) {
  CompiledKernel compiled =
      compile(variant("tensor doc: i32[B, N]\nmask = doc[b, i] == doc[b, j]"), 32, 32, 16, false);
  Sizes s{1, 1, 1, 10, 10, 16};
  AttentionInputs inputs = interp::makeRandomInputs(compiled.kernel, toShape(s), 1);
  AttentionOutputs outputs;
  std::string error;
  inputs.params["nope"] = 1;
  EXPECT_TRUE(mlir::failed(interp::runKernel(compiled.kernel, inputs, outputs, error)));
  EXPECT_NE(error.find("no parameter 'nope'"), std::string::npos) << error;
  inputs.params.clear();
  inputs.tensors.clear();
  EXPECT_TRUE(mlir::failed(interp::runKernel(compiled.kernel, inputs, outputs, error)));
  EXPECT_NE(error.find("missing aux tensor 'doc'"), std::string::npos) << error;
}

TEST(Interpreter, RejectsTiedSizesThatDiffer) {
  // k uses N for its length: self-attention, so M must equal N.
  CompiledKernel compiled = compile(
      "attention t { q: f32[B, H, N, D] k: f32[B, H, N, D] v: f32[B, H, N, D] }", 32, 32, 16,
      false);
  Sizes s{1, 1, 1, 10, 12, 16};
  AttentionInputs inputs = interp::makeRandomInputs(compiled.kernel, toShape(s), 1);
  AttentionOutputs outputs;
  std::string error;
  EXPECT_TRUE(mlir::failed(interp::runKernel(compiled.kernel, inputs, outputs, error)));
  EXPECT_NE(error.find("uses one symbol"), std::string::npos) << error;
}

//===----------------------------------------------------------------------===//
// The reference itself and the comparison
//===----------------------------------------------------------------------===//

TEST(Reference, CompareNeverPassesNaN) {
  std::vector<float> actual = {1.0f, std::nanf("")};
  std::vector<double> expected = {1.0, 2.0};
  EXPECT_FALSE(interp::compare(actual, expected).passes(1.0));
}

TEST(Reference, CompareFlagsOneSidedEmptyRow) {
  std::vector<float> actual = {0.0f};
  std::vector<double> expected = {-INFINITY};
  EXPECT_FALSE(interp::compare(actual, expected).passes(1.0));
  std::vector<float> same = {-INFINITY};
  EXPECT_TRUE(interp::compare(same, expected).passes(1e-9));
}

TEST(Reference, MatchesClosedFormForUniformKeys) {
  // All keys equal: softmax is uniform, O is the mean of V.
  AttentionInputs in;
  in.shape = toShape({1, 1, 1, 1, 4, 2});
  in.q = {1, 2};
  in.k = {1, 1, 1, 1, 1, 1, 1, 1};
  in.v = {1, 2, 3, 4, 5, 6, 7, 8};
  interp::ReferenceOutputs out = interp::naiveAttention(in, ReferenceSpec{});
  EXPECT_DOUBLE_EQ(out.out[0], 4.0);
  EXPECT_DOUBLE_EQ(out.out[1], 5.0);
  EXPECT_NEAR(out.lse[0], 3.0 + std::log(4.0), 1e-12);
}

TEST(Rounding, BF16TiesToEven) {
  mlir::MLIRContext context;
  mlir::Type bf16 = mlir::BFloat16Type::get(&context);
  EXPECT_EQ(interp::roundToElementType(1.0f, bf16), 1.0f);
  // 1 + 2^-8 is halfway between two bf16 values; ties go to the even one (1.0).
  EXPECT_EQ(interp::roundToElementType(1.0f + 1.0f / 256, bf16), 1.0f);
  EXPECT_EQ(interp::roundToElementType(1.0f + 3.0f / 256, bf16), 1.0f + 4.0f / 256);
}

//===----------------------------------------------------------------------===//
// Merging partial states by LSE (the reference of issue 16's merge kernel)
//===----------------------------------------------------------------------===//

/// The interpreter's O and LSE of `body` on the seeded inputs of `sizes`
/// (the same q, k, v for every body, since no body declares aux tensors).
AttentionOutputs runVariant(const std::string &body, const Sizes &sizes,
                            const llvm::StringMap<double> &params = {}) {
  AttentionOutputs outputs;
  CompiledKernel compiled = compile(variant(body), 32, 32, sizes.D, /*optimize=*/true);
  if (!compiled.kernel)
    return outputs;
  AttentionInputs inputs = interp::makeRandomInputs(compiled.kernel, toShape(sizes), 11);
  inputs.params = params;
  std::string error;
  EXPECT_TRUE(mlir::succeeded(interp::runKernel(compiled.kernel, inputs, outputs, error)))
      << error;
  return outputs;
}

/// Merges the parts and compares with the whole, LSE -inf rows included.
void expectMergeEquals(llvm::ArrayRef<AttentionOutputs> parts, const AttentionOutputs &whole,
                       int64_t headDim) {
  std::vector<interp::PartialState> states;
  for (const AttentionOutputs &part : parts)
    states.push_back({part.out, part.lse});
  std::vector<float> out, lse;
  std::string error;
  ASSERT_TRUE(interp::mergeStates(states, headDim, out, lse, error)) << error;
  std::vector<double> wholeOut(whole.out.begin(), whole.out.end());
  std::vector<double> wholeLse(whole.lse.begin(), whole.lse.end());
  interp::ErrorStats outStats = interp::compare(out, wholeOut);
  interp::ErrorStats lseStats = interp::compare(lse, wholeLse);
  EXPECT_TRUE(outStats.passes(kF32Bound))
      << "O: rel " << outStats.relative << " nonfinite " << outStats.nonFinite;
  EXPECT_TRUE(lseStats.passes(kF32Bound))
      << "LSE: rel " << lseStats.relative << " nonfinite " << lseStats.nonFinite
      << " inf-mismatch " << lseStats.mismatchedInf;
}

TEST(MergeStates, TwoKeyRangesMakeTheWhole) {
  // Keys [0, split) and [split, M): split = 0 leaves the first part empty
  // for every row (LSE -inf, weight 0), split = M the second.
  Sizes sizes = {2, 2, 1, 70, 90, 16};
  AttentionOutputs whole = runVariant("", sizes);
  for (double split : {0.0, 37.0, 90.0}) {
    SCOPED_TRACE("split = " + std::to_string(split));
    llvm::StringMap<double> params;
    params["split"] = split;
    AttentionOutputs low = runVariant("param split: i32 = 0\nmask = j < split", sizes, params);
    AttentionOutputs high = runVariant("param split: i32 = 0\nmask = j >= split", sizes, params);
    expectMergeEquals({low, high}, whole, sizes.D);
  }
}

TEST(MergeStates, CausalPartsWithRowsThatSeeNothing) {
  // Three key ranges under a causal mask: early rows see nothing of the
  // later ranges, and the rows before `a` see no key of the middle one.
  Sizes sizes = {1, 2, 2, 64, 64, 16};
  AttentionOutputs whole = runVariant("mask = j <= i", sizes);
  llvm::StringMap<double> params;
  params["a"] = 20;
  params["c"] = 45;
  const std::string decls = "param a: i32 = 0\nparam c: i32 = 0\n";
  AttentionOutputs first = runVariant(decls + "mask = j <= i && j < a", sizes, params);
  AttentionOutputs middle =
      runVariant(decls + "mask = j <= i && j >= a && j < c", sizes, params);
  AttentionOutputs last = runVariant(decls + "mask = j <= i && j >= c", sizes, params);
  EXPECT_TRUE(std::isinf(middle.lse[0]) && middle.lse[0] < 0);
  expectMergeEquals({last, first, middle}, whole, sizes.D);
}

TEST(MergeStates, RowsNoPartSeesAreZeroWithNegativeInfinity) {
  std::vector<float> emptyOut = {5, 6}, emptyLse = {-INFINITY};
  std::vector<float> out, lse;
  std::string error;
  ASSERT_TRUE(interp::mergeStates({{emptyOut, emptyLse}, {emptyOut, emptyLse}}, 2, out, lse,
                                  error));
  EXPECT_EQ(out, (std::vector<float>{0, 0}));
  EXPECT_TRUE(std::isinf(lse[0]) && lse[0] < 0);
}

TEST(MergeStates, ClosedFormAndNaNPropagation) {
  // Two rows: LSEs log 1 and log 3 weigh 1/4 and 3/4; then a NaN LSE in
  // one part poisons its row, and a NaN in a weighted O too.
  std::vector<float> out1 = {4, 8, 1, 1}, lse1 = {0.0f, 0.0f};
  std::vector<float> out2 = {0, 4, NAN, 2}, lse2 = {static_cast<float>(std::log(3.0)), NAN};
  std::vector<float> out, lse;
  std::string error;
  ASSERT_TRUE(interp::mergeStates({{out1, lse1}, {out2, lse2}}, 2, out, lse, error)) << error;
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 5.0f);
  EXPECT_NEAR(lse[0], std::log(4.0), 1e-6);
  EXPECT_TRUE(std::isnan(out[2]) && std::isnan(out[3]) && std::isnan(lse[1]));
  std::vector<float> nanOut = {NAN, 0}, oneLse = {0.0f};
  std::vector<float> fine = {1, 1};
  ASSERT_TRUE(interp::mergeStates({{fine, oneLse}, {nanOut, oneLse}}, 2, out, lse, error));
  EXPECT_TRUE(std::isnan(out[0]));
}

TEST(MergeStates, MismatchedStatesAreNamed) {
  std::vector<float> out1 = {1, 2}, lse1 = {0};
  std::vector<float> out2 = {1, 2, 3, 4}, lse2 = {0, 0};
  std::vector<float> out, lse;
  std::string error;
  EXPECT_FALSE(interp::mergeStates({{out1, lse1}, {out2, lse2}}, 2, out, lse, error));
  EXPECT_NE(error.find("state 1 has 2 LSE rows"), std::string::npos) << error;
  EXPECT_FALSE(interp::mergeStates({}, 2, out, lse, error));
  EXPECT_NE(error.find("no state"), std::string::npos) << error;
}

//===----------------------------------------------------------------------===//
// Paged K/V caches
//===----------------------------------------------------------------------===//

/// The dense [B, HKV, M, D] copy of a paged cache, gathered by hand here
/// (keys past a sequence's length zero), so the reference below never goes
/// through interp::keyValueRow.
std::vector<float> gatherPages(const AttentionInputs &inputs, const std::vector<float> &cache) {
  const interp::ProblemShape &s = inputs.shape;
  const interp::PagedCache &paged = inputs.paged;
  std::vector<float> dense(s.batch() * s.kvHeads() * s.keyLen() * s.headDim(), 0.0f);
  for (int64_t b = 0; b < s.batch(); ++b)
    for (int64_t j = 0; j < paged.lengths[b]; ++j) {
      int64_t page = paged.table[b * paged.tableStride + j / paged.pageSize];
      for (int64_t h = 0; h < s.kvHeads(); ++h)
        for (int64_t d = 0; d < s.headDim(); ++d)
          dense[((b * s.kvHeads() + h) * s.keyLen() + j) * s.headDim() + d] =
              cache[((page * paged.pageSize + j % paged.pageSize) * s.kvHeads() + h) *
                        s.headDim() + d];
    }
  return dense;
}

TEST(PagedKV, MatchesTheDenseGatherAtEveryPageSize) {
  // Pages smaller than, equal to, not dividing and larger than the key
  // block; sequences of M, 1, 0 and random keys over shuffled pages whose
  // unused table entries point outside the cache; M is each sequence's own
  // (the causal mask ends at its last key).
  Sizes sizes = {6, 4, 2, 3, 150, 16};
  for (int64_t page : {1, 16, 32, 48, 256}) {
    SCOPED_TRACE("page " + std::to_string(page));
    std::string source = variant("paged k, v: table block_table, lengths kv_len, page " +
                                 std::to_string(page) + "\nmask = j <= i + (M - N)");
    for (bool optimize : {false, true}) {
      CompiledKernel compiled = compile(source, 32, 32, sizes.D, optimize);
      ASSERT_TRUE(compiled.kernel);
      AttentionInputs inputs = interp::makeRandomInputs(compiled.kernel, toShape(sizes), 5);
      ASSERT_EQ(inputs.paged.pageSize, page);
      ASSERT_EQ(inputs.paged.lengths[1], 1);
      ASSERT_EQ(inputs.paged.lengths[2], 0);
      AttentionOutputs outputs;
      std::string error;
      ASSERT_TRUE(mlir::succeeded(interp::runKernel(compiled.kernel, inputs, outputs, error)))
          << error;
      AttentionInputs dense = inputs;
      dense.paged = interp::PagedCache();
      dense.k = gatherPages(inputs, inputs.k);
      dense.v = gatherPages(inputs, inputs.v);
      std::vector<int32_t> lengths = inputs.paged.lengths;
      int64_t N = sizes.N;
      interp::ReferenceOutputs reference = interp::naiveAttention(
          dense, masked(sizes, [&](int64_t b, int64_t, int64_t i, int64_t j) {
            return j < lengths[b] && j <= i + (lengths[b] - N);
          }));
      interp::ErrorStats out = interp::compare(outputs.out, reference.out);
      interp::ErrorStats lse = interp::compare(outputs.lse, reference.lse);
      EXPECT_TRUE(out.passes(kF32Bound)) << "O: rel " << out.relative << " nonfinite "
                                         << out.nonFinite;
      EXPECT_TRUE(lse.passes(kF32Bound)) << "LSE: rel " << lse.relative << " inf-mismatch "
                                         << lse.mismatchedInf;
      // The sequence with no key: O = 0, LSE = -inf in every row.
      for (int64_t h = 0; h < sizes.H; ++h)
        for (int64_t i = 0; i < N; ++i)
          EXPECT_EQ(outputs.lse[(2 * sizes.H + h) * N + i], -INFINITY);
    }
  }
}

TEST(PagedKV, BadTablesAndLengthsAreNamed) {
  Sizes sizes = {3, 2, 2, 1, 40, 16};
  CompiledKernel compiled =
      compile(variant("paged k, v: table block_table, lengths kv_len, page 16"), 32, 32, sizes.D,
              /*optimize=*/true);
  ASSERT_TRUE(compiled.kernel);
  AttentionInputs good = interp::makeRandomInputs(compiled.kernel, toShape(sizes), 3);
  auto errorOf = [&](const std::function<void(AttentionInputs &)> &edit) {
    AttentionInputs inputs = good;
    edit(inputs);
    return interp::checkInputs(compiled.kernel, inputs);
  };
  EXPECT_EQ(errorOf([](AttentionInputs &) {}), "");
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.paged.table[0] = in.paged.numPages; })
                .find("block table entry [0, 0] = "),
            std::string::npos);
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.paged.table[1] = -1; }).find("outside the cache"),
            std::string::npos);
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.paged.lengths[0] = 41; })
                .find("sequence 0 has 41 keys, outside [0, M = 40]"),
            std::string::npos);
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.paged.lengths[2] = -3; }).find("sequence 2"),
            std::string::npos);
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.paged.pageSize = 32; })
                .find("the kernel was compiled for 16"),
            std::string::npos);
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.paged.tableStride = 2; }).find("do not cover"),
            std::string::npos);
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.paged = interp::PagedCache(); })
                .find("the kernel reads a paged K/V cache"),
            std::string::npos);
}

TEST(Varlen, MatchesEachSequenceRunAlone) {
  // Packed ragged queries and keys (lengths full, 1, 0, random; offsets
  // from row 5), GQA, a mask that reads each sequence's N and M: every
  // sequence must get what the dense kernel gives it alone.
  Sizes sizes = {6, 4, 2, 45, 80, 16};
  const std::string mask = "\nmask = j <= i + (M - N) && i + (M - N) - j < 50";
  for (bool optimize : {false, true}) {
    CompiledKernel packed = compile(
        variant("varlen q: offsets cu_q\nvarlen k, v: offsets cu_k" + mask), 16, 32, sizes.D,
        optimize);
    CompiledKernel dense = compile(variant(mask.substr(1)), 16, 32, sizes.D, optimize);
    ASSERT_TRUE(packed.kernel && dense.kernel);
    AttentionInputs inputs = interp::makeRandomInputs(packed.kernel, toShape(sizes), 9);
    ASSERT_EQ(inputs.varlen.queryOffsets.size(), 7u);
    ASSERT_EQ(inputs.varlen.queryOffsets[0], 5);
    AttentionOutputs outputs;
    std::string error;
    ASSERT_TRUE(mlir::succeeded(interp::runKernel(packed.kernel, inputs, outputs, error))) << error;
    int64_t H = sizes.H, HKV = sizes.HKV, N = sizes.N, M = sizes.M, D = sizes.D;
    for (int64_t b = 0; b < sizes.B; ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b));
      int64_t n = interp::sequenceQueryLength(inputs, b), m = interp::sequenceKeyLength(inputs, b);
      // Rows past the sequence: O = 0, LSE = -inf.
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = n; i < N; ++i)
          ASSERT_EQ(outputs.lse[(b * H + h) * N + i], -INFINITY);
      if (n == 0 || m == 0)
        continue;
      AttentionInputs alone;
      alone.shape = toShape({1, H, HKV, n, m, D});
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < n; ++i)
          alone.q.insert(alone.q.end(), &inputs.q[((b * H + h) * N + i) * D],
                         &inputs.q[((b * H + h) * N + i) * D] + D);
      for (int64_t h = 0; h < HKV; ++h)
        for (int64_t j = 0; j < m; ++j)
          for (auto [to, from] : {std::make_pair(&alone.k, &inputs.k),
                                  std::make_pair(&alone.v, &inputs.v)})
            to->insert(to->end(), &(*from)[((b * HKV + h) * M + j) * D],
                       &(*from)[((b * HKV + h) * M + j) * D] + D);
      AttentionOutputs expected;
      ASSERT_TRUE(mlir::succeeded(interp::runKernel(dense.kernel, alone, expected, error)))
          << error;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_NEAR(outputs.lse[(b * H + h) * N + i], expected.lse[h * n + i], 1e-5);
          for (int64_t d = 0; d < D; ++d)
            EXPECT_NEAR(outputs.out[((b * H + h) * N + i) * D + d],
                        expected.out[(h * n + i) * D + d], 1e-5);
        }
    }
  }
}

TEST(Varlen, BadOffsetsAreNamed) {
  Sizes sizes = {3, 2, 2, 20, 40, 16};
  CompiledKernel compiled = compile(variant("varlen q: offsets cu_q\nvarlen k, v: offsets cu_k"),
                                    16, 32, sizes.D, /*optimize=*/true);
  ASSERT_TRUE(compiled.kernel);
  AttentionInputs good = interp::makeRandomInputs(compiled.kernel, toShape(sizes), 3);
  auto errorOf = [&](const std::function<void(AttentionInputs &)> &edit) {
    AttentionInputs inputs = good;
    edit(inputs);
    return interp::checkInputs(compiled.kernel, inputs);
  };
  EXPECT_EQ(errorOf([](AttentionInputs &) {}), "");
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.varlen.queryOffsets.pop_back(); })
                .find("the query offsets hold 3 entries, expected B + 1 = 4"),
            std::string::npos);
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.varlen.keyOffsets[0] = -2; })
                .find("the key offsets start at -2"),
            std::string::npos);
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.varlen.queryOffsets[2] = 0; })
                .find("the query offsets decrease at sequence 1"),
            std::string::npos);
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.varlen.queryOffsets[1] += 30; })
                .find("sequence 0 has 50 queries, more than the launch's N = 20"),
            std::string::npos);
  EXPECT_NE(errorOf([](AttentionInputs &in) { in.varlen.keyOffsets.clear(); })
                .find("the kernel packs ragged keys, but the inputs have no key offsets"),
            std::string::npos);
}

} // namespace
