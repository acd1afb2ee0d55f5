//===- BackwardTest.cpp - Gradients: derivatives, reference, interpreter --===//
//
// Three layers, each checked against something independent of it:
//  - the symbolic derivatives of Derivative.h against dual-number evaluation
//    of the same expression (frontend::evaluateTangent) at random points;
//  - the analytic fp64 backward (naiveAttentionBackward) against central
//    finite differences of the fp64 forward (naiveAttention);
//  - the interpreter running flash.backward_kernel against that reference,
//    through interp::checkBackward (the check flashc --run=cpu --bwd runs).
//
//===----------------------------------------------------------------------===//

#include "flashc/Frontend/Derivative.h"
#include "flashc/Frontend/Frontend.h"
#include "flashc/Harness/GpuHarness.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"
#include "flashc/Interpreter/BackwardCheck.h"
#include "flashc/Interpreter/Inputs.h"
#include "flashc/Interpreter/Interpreter.h"
#include "flashc/Interpreter/Reference.h"
#include "flashc/Interpreter/VariantReference.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include "TestSizes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace flashc;
using flashc::interp::AttentionInputs;
using flashc::interp::ProblemShape;

namespace {

using test::Sizes;
using test::toShape;

/// A parsed source and, on demand, its forward and backward kernels.
struct Compiled {
  std::unique_ptr<mlir::MLIRContext> context;
  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  std::optional<frontend::Module> ast;
  mlir::OwningOpRef<mlir::ModuleOp> forwardModule, backwardModule;
  flash::KernelOp forward;
  flash::BackwardKernelOp backward;
};

std::unique_ptr<Compiled> parse(const std::string &source) {
  auto result = std::make_unique<Compiled>();
  result->sourceMgr.setDiagHandler(
      [](const llvm::SMDiagnostic &diag, void *out) {
        llvm::raw_string_ostream os(*static_cast<std::string *>(out));
        diag.print("test", os);
      },
      &result->diagnostics);
  result->sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source, "test.flash"), llvm::SMLoc());
  result->ast = frontend::parseFlashFile(result->sourceMgr);
  EXPECT_TRUE(result->ast.has_value()) << result->diagnostics;
  return result;
}

/// Compiles both kernels of the one variant in `source` with the flash
/// pipeline (classify-tiles included); `backwardSummary`: the backward reads
/// a block summary where its mask reads aux tensors.
std::unique_ptr<Compiled> compile(const std::string &source, int64_t br, int64_t bc,
                                  int64_t headDim, bool backwardSummary = false) {
  std::unique_ptr<Compiled> result = parse(source);
  if (!result->ast)
    return result;
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  result->context = std::make_unique<mlir::MLIRContext>(registry);
  frontend::KernelOptions options;
  options.blockRows = br;
  options.blockCols = bc;
  options.headDim = headDim;
  result->forwardModule =
      frontend::emitFlashIR(*result->context, *result->ast, options, result->sourceMgr);
  options.backward = true;
  options.backwardBlockSummary = backwardSummary;
  result->backwardModule =
      frontend::emitFlashIR(*result->context, *result->ast, options, result->sourceMgr);
  EXPECT_TRUE(result->forwardModule && result->backwardModule) << result->diagnostics;
  if (!result->forwardModule || !result->backwardModule)
    return result;
  mlir::PassManager pm(result->context.get());
  flash::buildFlashPipeline(pm);
  EXPECT_TRUE(mlir::succeeded(pm.run(*result->forwardModule)));
  EXPECT_TRUE(mlir::succeeded(pm.run(*result->backwardModule)));
  result->forward = *result->forwardModule->getOps<flash::KernelOp>().begin();
  result->backward = *result->backwardModule->getOps<flash::BackwardKernelOp>().begin();
  return result;
}

const char *kF32Header = "q: f32[B, H, N, D] k: f32[B, HKV, M, D] v: f32[B, HKV, M, D]\n";

std::string variant(const std::string &body, const char *header = kF32Header) {
  return std::string("attention t {\n") + header + body + "\n}\n";
}

/// Runs the interpreter's backward against the fp64 reference and expects
/// every gradient within its bound (and no NaN). Returns the check.
interp::BackwardCheck checkGradients(const std::string &source, Sizes sizes, int64_t br,
                                     int64_t bc, uint64_t seed = 3,
                                     const std::function<void(AttentionInputs &)> &tweak = {}) {
  interp::BackwardCheck check;
  std::unique_ptr<Compiled> compiled = compile(source, br, bc, sizes.D);
  if (!compiled->backward)
    return check;
  AttentionInputs inputs = interp::makeRandomInputs(compiled->forward, toShape(sizes), seed);
  if (tweak)
    tweak(inputs);
  std::vector<float> outputGrad =
      interp::makeRandomOutputGrad(compiled->forward, inputs.shape, seed);
  std::string error;
  interp::AttentionOutputs outputs;
  EXPECT_TRUE(mlir::succeeded(interp::runKernel(compiled->forward, inputs, outputs, error)))
      << error;
  EXPECT_TRUE(mlir::succeeded(interp::checkBackward(outputs, compiled->backward,
                                                    compiled->ast->variants.front(), inputs,
                                                    outputGrad, check, error)))
      << error;
  for (const interp::GradientCheck &gradient : check.gradients)
    EXPECT_TRUE(gradient.passes())
        << gradient.name << ": rel " << gradient.stats.relative << " max "
        << gradient.stats.maxAbs << " bound " << gradient.bound << " nonfinite "
        << gradient.stats.nonFinite;
  return check;
}

//===----------------------------------------------------------------------===//
// Symbolic derivatives
//===----------------------------------------------------------------------===//

/// Every builtin and operator on floats, nested, with reads of a float
/// tensor: the symbolic derivative must equal the dual-number one.
TEST(Derivative, MatchesDualNumbersOnEveryBuiltin) {
  const char *scores[] = {
      "s",
      "s / 30",
      "30 * tanh(s / 30)",
      "s - w[h] * (i - j)",
      "exp(s / 4) - log(1 + s * s) + sqrt(2 + s * s)",
      "select(s > 0, s * s, 0.5 * s) + abs(s - 1)",
      "min(s, 2.0) + max(s, w[h]) * w[h]",
      "s * w[h] / (1 + w[h] * w[h]) - -s",
      "tanh(tanh(s) * w[h]) + s / (2 + s * s)",
      "select(i > j, exp(s - w[h]), s * w[j % 4])",
  };
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> score(-3, 3), weight(-2, 2);
  for (const char *text : scores) {
    SCOPED_TRACE(text);
    std::unique_ptr<Compiled> compiled =
        parse(variant(std::string("tensor w: f32[4]\nscore = ") + text));
    ASSERT_TRUE(compiled->ast.has_value());
    const frontend::Variant &v = compiled->ast->variants.front();
    std::optional<frontend::ScoreDerivatives> derivatives =
        frontend::differentiateScore(v, compiled->sourceMgr);
    ASSERT_TRUE(derivatives.has_value()) << compiled->diagnostics;
    std::vector<double> w(4);
    int64_t dims[6] = {1, 4, 4, 8, 8, 16};
    for (int trial = 0; trial < 50; ++trial) {
      for (double &x : w)
        x = weight(rng);
      frontend::EvalContext context;
      context.score = score(rng);
      context.h = trial % 4;
      context.i = trial % 7;
      context.j = (trial * 3) % 5;
      context.dimSizes = dims;
      context.readTensor = [&](int, llvm::ArrayRef<int64_t> at) {
        return at[0] >= 0 && at[0] < 4 ? w[at[0]] : 0.0;
      };
      double symbolic = frontend::evaluate(*derivatives->wrtScore, context);
      double dual = frontend::evaluateTangent(*v.score, context, nullptr).derivative;
      EXPECT_NEAR(symbolic, dual, 1e-9 * std::max(1.0, std::fabs(dual)))
          << "d/ds at s = " << context.score;
      for (const frontend::ScoreDerivatives::TensorRead &read : derivatives->tensorReads) {
        double symbolicRead = frontend::evaluate(*read.partial, context);
        double dualRead = frontend::evaluateTangent(*v.score, context, read.read).derivative;
        EXPECT_NEAR(symbolicRead, dualRead, 1e-9 * std::max(1.0, std::fabs(dualRead)))
            << "d/dw at s = " << context.score;
      }
    }
  }
}

TEST(Derivative, SimplifiesToLiterals) {
  // s / 30 differentiates to the literal 1/30, ALiBi's score to 1, and an
  // integer-only score (it cannot depend on s) to 0.
  struct Expectation {
    const char *score;
    double value;
  } cases[] = {{"s / 30", 1.0 / 30}, {"s - w[h] * (i - j)", 1.0}, {"2 * s + 1", 2.0},
               {"w[h] + 3", 0.0}};
  for (const Expectation &c : cases) {
    SCOPED_TRACE(c.score);
    std::unique_ptr<Compiled> compiled =
        parse(variant(std::string("tensor w: f32[4]\nscore = ") + c.score));
    ASSERT_TRUE(compiled->ast.has_value());
    std::optional<frontend::ScoreDerivatives> derivatives =
        frontend::differentiateScore(compiled->ast->variants.front(), compiled->sourceMgr);
    ASSERT_TRUE(derivatives.has_value());
    ASSERT_EQ(derivatives->wrtScore->kind, frontend::ExprKind::FloatLiteral)
        << frontend::toString(*derivatives->wrtScore);
    EXPECT_DOUBLE_EQ(derivatives->wrtScore->floatValue, c.value);
  }
}

TEST(Derivative, RoundingScaleSeesCancellation) {
  // s * (30 / s) is 30: its derivative 30/s - s·30/s² is 0, but in f32 each
  // term is about 30/s, so the rounding scale is large where the value is
  // 0 (flashc-fuzz forgives that much, seed 200914).
  std::unique_ptr<Compiled> compiled = parse(variant("score = s * (30.0 / s)"));
  ASSERT_TRUE(compiled->ast.has_value());
  std::optional<frontend::ScoreDerivatives> derivatives =
      frontend::differentiateScore(compiled->ast->variants.front(), compiled->sourceMgr);
  ASSERT_TRUE(derivatives.has_value());
  frontend::EvalContext context;
  context.score = 0.01;
  EXPECT_NEAR(frontend::evaluate(*derivatives->wrtScore, context), 0.0, 1e-9);
  EXPECT_GE(frontend::roundingScale(*derivatives->wrtScore, context), 3000.0);
  // A well-conditioned derivative has a scale of its own size.
  std::unique_ptr<Compiled> plain = parse(variant("score = 2 * s"));
  std::optional<frontend::ScoreDerivatives> two =
      frontend::differentiateScore(plain->ast->variants.front(), plain->sourceMgr);
  EXPECT_DOUBLE_EQ(frontend::roundingScale(*two->wrtScore, context), 2.0);
}

TEST(Derivative, TooLargeIsALocatedError) {
  std::string product = "s";
  for (int n = 0; n < 120; ++n)
    product += " * s";
  std::unique_ptr<Compiled> compiled = parse(variant("score = " + product));
  ASSERT_TRUE(compiled->ast.has_value());
  EXPECT_FALSE(
      frontend::differentiateScore(compiled->ast->variants.front(), compiled->sourceMgr));
  EXPECT_NE(compiled->diagnostics.find("test.flash:3:9: error: cannot form the backward pass"),
            std::string::npos)
      << compiled->diagnostics;
}

//===----------------------------------------------------------------------===//
// The fp64 reference against finite differences
//===----------------------------------------------------------------------===//

/// L = Σ dO ∘ O of the fp64 forward.
double loss(const AttentionInputs &inputs, const interp::ReferenceSpec &spec,
            const std::vector<float> &outputGrad) {
  interp::ReferenceOutputs out = interp::naiveAttention(inputs, spec);
  double sum = 0;
  for (size_t n = 0; n < out.out.size(); ++n)
    sum += out.out[n] * static_cast<double>(outputGrad[n]);
  return sum;
}

TEST(Reference, BackwardMatchesCentralDifferences) {
  // GQA (2 query heads per KV head), N != M, a mask with a row that sees
  // nothing (i = 0 sees j > 7 only: none), softcap, and a learnable relative
  // bias read twice (both reads get gradient).
  std::unique_ptr<Compiled> compiled = parse(variant(
      "tensor bias: f32[H, 16]\n"
      "score = 3 * tanh(s / 3) + bias[h, i - j + 8] - 0.5 * bias[h, 0] * bias[h, 0]\n"
      "mask = i > 0 && j <= i + 2"));
  ASSERT_TRUE(compiled->ast.has_value());
  const frontend::Variant &v = compiled->ast->variants.front();
  Sizes sizes{1, 4, 2, 5, 7, 4};
  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  frontend::KernelOptions options;
  options.blockRows = options.blockCols = 8;
  options.headDim = sizes.D;
  auto module = frontend::emitFlashIR(context, *compiled->ast, options, compiled->sourceMgr);
  ASSERT_TRUE(module);
  flash::KernelOp kernel = *module->getOps<flash::KernelOp>().begin();
  AttentionInputs inputs = interp::makeRandomInputs(kernel, toShape(sizes), 5);
  for (float &x : inputs.q)
    x *= 2.0f; // scores of a few units: tanh's curvature matters
  std::vector<float> outputGrad = interp::makeRandomOutputGrad(kernel, inputs.shape, 5);
  interp::ReferenceSpec spec = interp::referenceFor(v, inputs);
  interp::ReferenceGradients analytic =
      interp::naiveAttentionBackward(inputs, spec, outputGrad);

  auto expectClose = [](double numeric, double exact, const std::string &what) {
    EXPECT_NEAR(numeric, exact, 1e-6 + 1e-5 * std::fabs(exact)) << what;
  };
  auto perturbFloats = [&](std::vector<float> &data, const std::vector<double> &grads,
                           const char *name) {
    ASSERT_EQ(data.size(), grads.size());
    for (size_t n = 0; n < data.size(); ++n) {
      float original = data[n];
      float up = original + 1e-3f, down = original - 1e-3f;
      data[n] = up;
      double lossUp = loss(inputs, spec, outputGrad);
      data[n] = down;
      double lossDown = loss(inputs, spec, outputGrad);
      data[n] = original;
      double numeric = (lossUp - lossDown) / (static_cast<double>(up) - down);
      expectClose(numeric, grads[n], std::string(name) + "[" + std::to_string(n) + "]");
    }
  };
  perturbFloats(inputs.q, analytic.dq, "dq");
  perturbFloats(inputs.k, analytic.dk, "dk");
  perturbFloats(inputs.v, analytic.dv, "dv");
  // Row i = 0 sees no key: its dQ is exactly 0.
  for (int64_t d = 0; d < sizes.D; ++d)
    EXPECT_EQ(analytic.dq[d], 0.0);

  interp::HostTensor &bias = inputs.tensors["bias"];
  ASSERT_TRUE(analytic.tensorGrads.count("bias"));
  const std::vector<double> &biasGrad = analytic.tensorGrads["bias"];
  ASSERT_EQ(biasGrad.size(), bias.data.size());
  for (size_t n = 0; n < bias.data.size(); ++n) {
    double original = bias.data[n];
    bias.data[n] = original + 1e-4;
    double lossUp = loss(inputs, spec, outputGrad);
    bias.data[n] = original - 1e-4;
    double lossDown = loss(inputs, spec, outputGrad);
    bias.data[n] = original;
    expectClose((lossUp - lossDown) / 2e-4, biasGrad[n], "dbias[" + std::to_string(n) + "]");
  }
}

//===----------------------------------------------------------------------===//
// The interpreter's backward kernel against the reference
//===----------------------------------------------------------------------===//

TEST(Backward, EveryExample) {
  // The examples as shipped (bf16/f16, their own aux tensors), ragged N.
  for (const char *name : {"alibi", "causal", "document", "full", "gqa", "key_padding",
                           "prefix_lm", "sliding_window", "softcap", "relative_bias"}) {
    SCOPED_TRACE(name);
    std::string path = std::string(FLASHC_SOURCE_DIR) + "/examples/" + name + ".flash";
    auto buffer = llvm::MemoryBuffer::getFile(path);
    ASSERT_TRUE(static_cast<bool>(buffer)) << path;
    Sizes sizes{2, 4, 2, 150, 150, 32};
    if (std::string(name) != "gqa")
      sizes.HKV = 4;
    checkGradients(buffer.get()->getBuffer().str(), sizes, 64, 32);
  }
}

TEST(Backward, RaggedLengthsAndUnequalTiles) {
  checkGradients(variant("mask = j <= i + 700"), {1, 2, 2, 257, 1000, 16}, 32, 64);
  checkGradients(variant(""), {1, 1, 1, 1000, 257, 16}, 64, 16);
}

TEST(Backward, GroupedAndMultiQueryHeadsSumKeyGradients) {
  checkGradients(variant("mask = j <= i"), {2, 8, 2, 70, 70, 16}, 32, 32);
  checkGradients(variant(""), {1, 4, 1, 70, 50, 16}, 16, 32);
}

TEST(Backward, RowsThatSeeNoKeyHaveZeroGradients) {
  Sizes sizes{1, 1, 1, 70, 70, 16};
  std::unique_ptr<Compiled> compiled = compile(variant("mask = i >= 10 && j <= i"), 32, 32, 16);
  ASSERT_TRUE(compiled->backward);
  AttentionInputs inputs = interp::makeRandomInputs(compiled->forward, toShape(sizes), 1);
  interp::AttentionOutputs outputs;
  std::string error;
  ASSERT_TRUE(mlir::succeeded(interp::runKernel(compiled->forward, inputs, outputs, error)));
  interp::BackwardInputs backwardInputs{outputs.out, outputs.lse,
                                        interp::makeRandomOutputGrad(compiled->forward,
                                                                     inputs.shape, 1)};
  interp::AttentionGradients grads;
  ASSERT_TRUE(mlir::succeeded(
      interp::runBackwardKernel(compiled->backward, inputs, backwardInputs, grads, error)))
      << error;
  for (float x : grads.dq)
    ASSERT_FALSE(std::isnan(x));
  for (int64_t n = 0; n < 10 * 16; ++n)
    EXPECT_EQ(grads.dq[n], 0.0f) << n;
  // Keys j > 69 - 0 are seen by someone; keys are all seen by row 69, so
  // dK is finite everywhere.
  for (float x : grads.dk)
    ASSERT_TRUE(std::isfinite(x));
  checkGradients(variant("mask = i >= 10 && j <= i"), sizes, 32, 32);
}

TEST(Backward, SoftcapAlibiAndLearnableRelativeBias) {
  checkGradients(variant("param cap: f32 = 2.5\nscore = cap * tanh(s / cap)"),
                 {1, 2, 2, 90, 90, 16}, 32, 32, 3,
                 [](AttentionInputs &in) {
                   for (float &x : in.q)
                     x *= 3.0f;
                 });
  checkGradients(variant("tensor slopes: f32[H]\nscore = s - slopes[h] * (i - j)\nmask = j <= i"),
                 {1, 4, 4, 100, 100, 16}, 32, 32);
  interp::BackwardCheck check = checkGradients(
      variant("tensor bias: f32[H, 512]\nscore = s + bias[h, i - j + 256]\nmask = j <= i"),
      {2, 2, 2, 130, 130, 16}, 32, 64);
  ASSERT_EQ(check.gradients.size(), 4u);
  EXPECT_EQ(check.gradients[3].name, "d(bias)");
}

TEST(Backward, RowShiftBiasHasZeroGradientUpToCancellation) {
  // slopes[h] · i shifts whole rows: softmax ignores it, so d(slopes) is
  // exactly 0 and the kernel's f32 sums reach it only up to the size of the
  // terms that cancel (found by flashc-fuzz, seed 100329). The check is
  // relative to those terms; a wrong sign of the partial would fail it.
  interp::BackwardCheck check = checkGradients(
      variant("tensor slopes: f32[H]\nscore = s - slopes[h] * i",
              "q: f16[B, H, N, D] k: f16[B, HKV, M, D] v: f16[B, HKV, M, D]\n"),
      {1, 2, 2, 67, 45, 16}, 32, 16);
  ASSERT_EQ(check.gradients.size(), 4u);
  EXPECT_LT(check.gradients[3].stats.relative, 1e-3);
}

TEST(Backward, LargeScores) {
  // Q·30: every row's softmax is nearly one-hot; P·(dP - Δ) cancels hard.
  checkGradients(variant("mask = j <= i"), {1, 2, 2, 100, 100, 16}, 32, 32, 3,
                 [](AttentionInputs &in) {
                   for (float &x : in.q)
                     x *= 30.0f;
                 });
}

TEST(Backward, EmptyTilesAreClassifiedAndSkipped) {
  interp::BackwardCheck check =
      checkGradients(variant("mask = j <= i"), {1, 1, 1, 128, 128, 16}, 32, 32);
  // 4x4 tiles: 6 above the diagonal empty, 4 on it partial, 6 below full.
  EXPECT_EQ(check.tiles.empty, 6);
  EXPECT_EQ(check.tiles.partial, 4);
  EXPECT_EQ(check.tiles.full, 6);
}

TEST(Backward, ABlockSummarySkipsDocumentTilesAndAWrongOneFails) {
  // Packed documents under a causal mask, backward tiles 16 x 32 (the
  // forward's are 32 x 32): the backward's summary is the brute-force class
  // of every tile of its own tiling; obeying it skips the empty tiles and
  // unmasks the full ones, which leaves every gradient bitwise the same
  // (a skipped tile adds exact zeros); a planted summary that empties a
  // visible tile fails the fp64 reference check.
  const std::string source =
      variant("tensor doc: i32[B, N]\nmask = doc[b, i] == doc[b, j] && j <= i");
  Sizes sizes{2, 4, 2, 150, 150, 16};
  std::unique_ptr<Compiled> plain = compile(source, 16, 32, sizes.D);
  std::unique_ptr<Compiled> summarized = compile(source, 16, 32, sizes.D, true);
  ASSERT_TRUE(plain->backward && summarized->backward);
  EXPECT_FALSE(plain->backward.getBlockSummaryAttr());
  flash::BlockSummaryAttr attr = summarized->backward.getBlockSummaryAttr();
  ASSERT_TRUE(attr);
  EXPECT_TRUE(attr.getPerBatch());
  EXPECT_FALSE(attr.getPerHead());
  int64_t classReads = 0;
  summarized->backward.walk([&](flash::BlockClassOp) { ++classReads; });
  EXPECT_EQ(classReads, 1);

  AttentionInputs inputs =
      interp::makeRandomInputs(summarized->forward, toShape(sizes), 7, /*documents=*/4);
  const interp::HostTensor &doc = inputs.tensors.find("doc")->second;
  std::vector<uint8_t> summary;
  std::string error;
  ASSERT_TRUE(mlir::succeeded(
      interp::computeBlockSummary(summarized->backward, inputs, summary, error)))
      << error;
  flash::BlockSummaryShape shape =
      flash::BlockSummaryShape::of(attr, 16, 32, sizes.B, sizes.H, sizes.N, sizes.M);
  ASSERT_EQ(static_cast<int64_t>(summary.size()), shape.bytes());
  int64_t visibleTile = -1;
  for (int64_t b = 0; b < sizes.B; ++b)
    for (int64_t qt = 0; qt < shape.queryTiles; ++qt)
      for (int64_t kt = 0; kt < shape.keyBlocks; ++kt) {
        bool any = false, all = true;
        for (int64_t i = qt * 16; i < std::min<int64_t>(sizes.N, qt * 16 + 16); ++i)
          for (int64_t j = kt * 32; j < std::min<int64_t>(sizes.M, kt * 32 + 32); ++j) {
            bool visible = doc.at({b, i}) == doc.at({b, j}) && j <= i;
            any |= visible;
            all &= visible;
          }
        int expected = !any ? flash::kBlockEmpty : all ? flash::kBlockFull : flash::kBlockPartial;
        int64_t at = shape.offset(b, 0, qt, kt);
        EXPECT_EQ(summary[at], expected) << "b " << b << " qt " << qt << " kt " << kt;
        if (expected != flash::kBlockEmpty && visibleTile < 0)
          visibleTile = at;
      }
  ASSERT_GE(visibleTile, 0);

  interp::AttentionOutputs outputs;
  ASSERT_TRUE(mlir::succeeded(interp::runKernel(plain->forward, inputs, outputs, error))) << error;
  std::vector<float> outputGrad =
      interp::makeRandomOutputGrad(plain->forward, inputs.shape, 7);
  interp::BackwardInputs backwardInputs{outputs.out, outputs.lse, outputGrad};
  interp::AttentionGradients unskipped, skipped;
  ASSERT_TRUE(mlir::succeeded(interp::runBackwardKernel(plain->backward, inputs, backwardInputs,
                                                        unskipped, error)))
      << error;
  ASSERT_TRUE(mlir::succeeded(interp::runBackwardKernel(summarized->backward, inputs,
                                                        backwardInputs, skipped, error)))
      << error;
  EXPECT_EQ(skipped.dq, unskipped.dq);
  EXPECT_EQ(skipped.dk, unskipped.dk);
  EXPECT_EQ(skipped.dv, unskipped.dv);
  // The intervals alone empty the tiles above the diagonal only.
  EXPECT_GT(skipped.tiles.empty, unskipped.tiles.empty);
  EXPECT_GT(skipped.tiles.full, unskipped.tiles.full);
  EXPECT_LT(skipped.tiles.partial, unskipped.tiles.partial);

  interp::BackwardCheck check;
  ASSERT_TRUE(mlir::succeeded(interp::checkBackward(outputs, summarized->backward,
                                                    summarized->ast->variants.front(), inputs,
                                                    outputGrad, check, error)))
      << error;
  EXPECT_TRUE(check.passes());
  AttentionInputs planted = inputs;
  planted.backwardBlockSummary = summary;
  planted.backwardBlockSummary[visibleTile] = flash::kBlockEmpty;
  interp::BackwardCheck wrong;
  ASSERT_TRUE(mlir::succeeded(interp::checkBackward(outputs, summarized->backward,
                                                    summarized->ast->variants.front(), planted,
                                                    outputGrad, wrong, error)))
      << error;
  EXPECT_FALSE(wrong.passes());
  // The inputs' forward summary is the forward's: the backward reads its own.
  AttentionInputs withForward = inputs;
  withForward.blockSummary.assign(3, flash::kBlockEmpty);
  interp::AttentionGradients unaffected;
  ASSERT_TRUE(mlir::succeeded(interp::runBackwardKernel(summarized->backward, withForward,
                                                        backwardInputs, unaffected, error)))
      << error;
  EXPECT_EQ(unaffected.dk, skipped.dk);
  // A summary of another tiling's size is a clear error, not a wild read.
  planted.backwardBlockSummary.resize(summary.size() / 2);
  interp::AttentionGradients grads;
  EXPECT_TRUE(mlir::failed(interp::runBackwardKernel(summarized->backward, planted,
                                                     backwardInputs, grads, error)));
  EXPECT_NE(error.find("the block summary has"), std::string::npos) << error;
}

TEST(Backward, RejectsMismatchedForwardOutputs) {
  std::unique_ptr<Compiled> compiled = compile(variant(""), 32, 32, 16);
  ASSERT_TRUE(compiled->backward);
  Sizes sizes{1, 1, 1, 40, 40, 16};
  AttentionInputs inputs = interp::makeRandomInputs(compiled->forward, toShape(sizes), 1);
  interp::BackwardInputs wrong{std::vector<float>(10), std::vector<float>(40),
                               std::vector<float>(40 * 16)};
  interp::AttentionGradients grads;
  std::string error;
  EXPECT_TRUE(mlir::failed(
      interp::runBackwardKernel(compiled->backward, inputs, wrong, grads, error)));
  EXPECT_NE(error.find("O holds 10 elements, expected 640"), std::string::npos) << error;
}

} // namespace

// The GPU check's gradient criterion: relative to the interpreter's, except
// for a gradient that cancels to about 0 (one-hot rows), whose rounding
// noise passes within 1e-3 of the bound absolutely; NaN never passes.
TEST(BackwardValidation, CancelledGradientsPassOnTheirAbsoluteError) {
  harness::BackwardValidation v;
  v.bound = 1e-2;
  interp::ErrorStats close;
  close.relative = 5e-3;
  close.maxAbs = 0.5;
  EXPECT_TRUE(v.gradientPasses(close));
  interp::ErrorStats cancelled; // a fuzz case's dQ: rel 1.46e+04, max 1.28e-06
  cancelled.relative = 1.46e4;
  cancelled.maxAbs = 1.28e-6;
  EXPECT_TRUE(v.gradientPasses(cancelled));
  interp::ErrorStats wrong = cancelled;
  wrong.maxAbs = 2e-5;
  EXPECT_FALSE(v.gradientPasses(wrong));
  interp::ErrorStats poisoned = cancelled;
  poisoned.nonFinite = 1;
  EXPECT_FALSE(v.gradientPasses(poisoned));
  v.dq = v.dk = cancelled;
  v.dv = close;
  EXPECT_TRUE(v.passed());
  v.dk = wrong;
  EXPECT_FALSE(v.passed());
}
