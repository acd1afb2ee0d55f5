//===- GpuHarness.h - Run a flash kernel on the GPU and check it -*- C++ -*-===//
//
// What flash-run and flashc-tune share: seeded random inputs uploaded in a
// chosen layout, a launch, a validation against the CPU interpreter on the
// same flash IR (outputs poisoned with NaN first), and CUDA-event timing.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHC_HARNESS_GPUHARNESS_H
#define FLASHC_HARNESS_GPUHARNESS_H

#include "flashc/Dialect/Flash/IR/FlashDialect.h"
#include "flashc/Interpreter/Inputs.h"
#include "flashc/Interpreter/Interpreter.h"
#include "flashc/Interpreter/Reference.h"

#include "flashrun/AttentionKernel.h"

#include "llvm/ADT/StringMap.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace flashc::harness {

enum class Layout { BHSD, BSHD };

/// Device copies of one launch's tensors (and the host inputs they hold).
struct DeviceProblem {
  interp::AttentionInputs inputs;
  Layout layout = Layout::BHSD;
  std::optional<flashrt::DeviceBuffer> q, k, v, o, lse;
  std::vector<flashrt::DeviceBuffer> aux;
  std::map<std::string, double> params;
  /// A kernel with a block summary: a buffer for it (the harness's own
  /// copy, beside the one AttentionKernel::launch keeps).
  std::optional<flashrt::DeviceBuffer> summary;
  /// A paged K/V cache (inputs.paged): k and v hold its pages as they are
  /// (no layout), these its block table and key lengths.
  std::optional<flashrt::DeviceBuffer> blockTable, keyLengths;
  /// A varlen batch (inputs.varlen): the offsets of its packed sides, whose
  /// tensors are token-major whatever `layout` says (LSE [H, rows]), with
  /// NaN in the rows no sequence owns.
  std::optional<flashrt::DeviceBuffer> queryOffsets, keyOffsets;

  flashrun::Sizes sizes() const;
};

/// Seeded random inputs of `kernel` at `shape` (parameters overridden by
/// `params`; `documents` as interp::makeRandomInputs takes it), uploaded in
/// `layout`. A shape whose q, k and v hold more than kHostInputElements
/// elements (decode at B x M = 4M tokens: 8G) is drawn on the GPU instead
/// (uniform in [-1, 1), a hash of the element's index and the seed; the aux
/// tensors by interp::makeRandomAuxInputs, inputs.q/k/v left empty): such a
/// problem can be timed, not checked.
constexpr int64_t kHostInputElements = int64_t(1) << 27;
/// Whether upload draws `shape`'s q, k and v on the host.
bool drawsInputsOnHost(const interp::ProblemShape &shape);
/// A kernel with a paged K/V cache gets one from makeRandomInputs (ragged
/// key lengths; interp::PagedInputs says otherwise, for timing beside the
/// dense kernel).
DeviceProblem upload(flashrt::Context &context, flash::KernelOp kernel,
                     const interp::ProblemShape &shape, const llvm::StringMap<double> &params,
                     uint64_t seed, Layout layout, int64_t documents = 0,
                     interp::PagedInputs paged = {});

/// With `blockSummary` 0 a kernel that reads one computes it first.
void launch(const flashrun::AttentionKernel &kernel, flashrt::Stream &stream,
            const DeviceProblem &problem, uint64_t blockSummary = 0);

/// The GPU's block summary against the interpreter's.
struct SummaryCheck {
  /// Its tiles and how many of the GPU's bytes differ from the
  /// interpreter's (the first one named).
  int64_t tiles = 0, mismatches = 0;
  std::string firstMismatch;
  /// What is wrong with the summary's tile order (checkTileOrder); empty
  /// when it is a permutation sorted by cost.
  std::string orderError;
  bool passed() const { return mismatches == 0 && orderError.empty(); }
};

struct Validation {
  interp::ErrorStats out, lse;
  double outBound = 0, lseBound = 0;
  /// A kernel with a block summary: its check (tiles = 0 without one).
  SummaryCheck summary;
  bool passed() const {
    return out.passes(outBound) && lse.passes(lseBound) && summary.passed();
  }
};

/// Computes `problem`'s block summary on the GPU (into problem.summary,
/// poisoned first) and compares it with the interpreter's: the bytes, and
/// the tile order by checkTileOrder. Null with `error` when the
/// interpreter fails or the sizes disagree.
std::optional<SummaryCheck> checkBlockSummary(const flashrun::AttentionKernel &kernel,
                                              flashrt::Stream &stream, DeviceProblem &problem,
                                              flash::KernelOp flashKernel, std::string &error);

/// Checks the tile order the GPU wrote after the summary's bytes (`gpu`,
/// flash::BlockSummaryShape::bytesWithOrder() of them) against the costs of
/// `classes` (the interpreter's bytes): every query tile once, bins
/// ascending. Returns what is wrong, or "".
std::string checkTileOrder(const flash::BlockSummaryShape &shape,
                           const std::vector<uint8_t> &classes, const std::vector<uint8_t> &gpu);

/// Runs `kernel` on `problem` with O and LSE poisoned first, and compares
/// them with the interpreter on `flashKernel`. Bounds: O relative 1e-2 for
/// bf16, 2e-3 for f16; LSE 1e-4. A kernel with a block summary computes it
/// on the GPU first (poisoned first too), the bytes are compared with
/// interp::computeBlockSummary's, and the kernel runs from the GPU's. An
/// interpreter failure goes to `error`.
std::optional<Validation> validate(const flashrun::AttentionKernel &kernel,
                                   flashrt::Stream &stream, DeviceProblem &problem,
                                   flash::KernelOp flashKernel, std::string &error);

/// The shape validation runs at when `shape` is too large for the
/// interpreter (over 2^31 multiply-adds per GEMM, a query tile counted
/// whole) or for inputs drawn on the host: B = 1, at most 2 KV heads (with
/// their query heads), N and M at most 1031 (M tied to N when the kernel
/// ties them).
interp::ProblemShape checkShapeFor(const interp::ProblemShape &shape, flash::KernelOp kernel);

/// Median milliseconds of `iterations` timed launches after `warmup`
/// (block summary included, computed by each launch).
double timeKernel(const flashrun::AttentionKernel &kernel, flashrt::Stream &stream,
                  const DeviceProblem &problem, int warmup, int iterations);
/// For a kernel with a block summary: the median milliseconds of the
/// summary kernel alone, and of the attention kernel alone from a summary
/// computed once (what a caller caching it across layers pays per layer).
struct SummaryTimes {
  double summaryMs = 0, cachedMs = 0;
};
SummaryTimes timeBlockSummary(const flashrun::AttentionKernel &kernel, flashrt::Stream &stream,
                              DeviceProblem &problem, int warmup, int iterations);

//===----------------------------------------------------------------------===//
// The backward pass
//===----------------------------------------------------------------------===//

/// What a backward launch needs beside a DeviceProblem (whose q, k, v and
/// aux tensors it reads, and whose o and lse hold the forward's O and LSE):
/// dO, the gradients and the workspace.
struct BackwardProblem {
  std::vector<float> outputGrad; // host dO, BHSD, in the element type
  std::optional<flashrt::DeviceBuffer> dO, dq, dk, dv, workspace;
  /// One per aux tensor; null for a tensor without gradient.
  std::vector<std::optional<flashrt::DeviceBuffer>> tensorGrads;
};

/// A seeded dO for `problem` uploaded in its layout, the gradients (aux
/// tensors the backward adds into get one) and `workspaceBytes` of
/// workspace (BackwardKernel::workspaceBytes) allocated.
BackwardProblem uploadBackward(flashrt::Context &context, flash::BackwardKernelOp kernel,
                               const DeviceProblem &problem, uint64_t seed,
                               size_t workspaceBytes);

/// `blockSummary`: a summary BackwardKernel::computeBlockSummary wrote, or
/// 0 (the launch computes one into the workspace).
void launchBackward(const flashrun::BackwardKernel &kernel, flashrt::Stream &stream,
                    const DeviceProblem &problem, const BackwardProblem &backward,
                    uint64_t blockSummary = 0);

struct BackwardValidation {
  interp::ErrorStats dq, dk, dv;
  std::vector<std::pair<std::string, interp::ErrorStats>> tensorGrads;
  double bound = 0;
  /// A package with a block summary: the GPU's summary of the backward's
  /// tiling (from the workspace) against the interpreter's (no order).
  std::optional<SummaryCheck> summary;
  /// The same package through the cached-summary API: the summary
  /// BackwardKernel::computeBlockSummary wrote into a buffer of its own,
  /// against the interpreter's, and the gradients of a launch that reads
  /// it (BackwardTensors::blockSummary).
  std::optional<SummaryCheck> cachedSummary;
  interp::ErrorStats cachedDq, cachedDk, cachedDv;
  /// Whether that launch wrote the workspace's summary (it must read the
  /// caller's instead of computing one).
  bool cachedLaunchWroteSummary = false;
  /// The cached-summary path passed (true where there is none).
  bool cachedSummaryPassed() const;
  /// Within the bound relatively, or (a gradient that cancels to about 0)
  /// within 1e-3 of it absolutely; never with NaN.
  bool gradientPasses(const interp::ErrorStats &stats) const;
  bool passed() const;
};

/// The interpreter's forward on `problem` gives O and LSE (uploaded into
/// problem.o and problem.lse); then the GPU backward (gradients poisoned
/// with NaN first) and the interpreter's backward run from the same O,
/// LSE and dO, and dQ, dK, dV and the aux gradients are compared (bound:
/// interp::gradientBound), and the block summary where the package has
/// one; then the same through the cached-summary API (summary computed
/// apart, gradients of a launch that reads it). An interpreter failure goes
/// to `error`.
std::optional<BackwardValidation>
validateBackward(flashrt::Context &context, const flashrun::BackwardKernel &kernel,
                 flashrt::Stream &stream, DeviceProblem &problem, flash::KernelOp forward,
                 flash::BackwardKernelOp backward, uint64_t seed, std::string &error);

/// Runs the backward `runs` times and returns how many of the runs after
/// the first left dQ or an aux gradient (raw bits) different from the
/// first's.
int differingGradRuns(const flashrun::BackwardKernel &kernel, flashrt::Stream &stream,
                      const DeviceProblem &problem, BackwardProblem &backward, int runs);

/// Median milliseconds of the backward's three launches.
double timeBackward(const flashrun::BackwardKernel &kernel, flashrt::Stream &stream,
                    const DeviceProblem &problem, const BackwardProblem &backward, int warmup,
                    int iterations);

/// A backward package with a block summary: median milliseconds of its
/// summary kernel alone (BackwardKernel::computeBlockSummary) and of the
/// backward's other launches reading that summary (the time per layer when
/// one summary is cached for all); zeros without one.
SummaryTimes timeBackwardSummary(const flashrun::BackwardKernel &kernel, flashrt::Stream &stream,
                                 const DeviceProblem &problem, const BackwardProblem &backward,
                                 int warmup, int iterations);

/// Median milliseconds of one training step's attention: the forward (O,
/// LSE), then the backward from them, timed together.
double timeTrainingStep(const flashrun::AttentionKernel &forward,
                        const flashrun::BackwardKernel &backwardKernel, flashrt::Stream &stream,
                        const DeviceProblem &problem, const BackwardProblem &backward,
                        int warmup, int iterations);

/// 4·B·H·N·M·D floating-point operations per ms (halved for `causal`) in TFLOP/s.
double tflops(const interp::ProblemShape &shape, double ms, bool causal);

} // namespace flashc::harness

#endif // FLASHC_HARNESS_GPUHARNESS_H
