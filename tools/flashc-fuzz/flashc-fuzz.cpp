//===- flashc-fuzz.cpp - Differential fuzzing of flashc ---------------------===//
//
//   flashc-fuzz --seed 1 --count 200             a fixed seed range (CI)
//   flashc-fuzz --seconds 3600 --out fuzz-out/   longer, by hand
//   flashc-fuzz --emit-cases DIR --count 300     the cases as .flash files and
//                                                flash-run command lines (GPU)
//   flashc-fuzz --emit-cases DIR --count 300 --emit-backward --emit-head-dims 64,128
//                                                the same for the backward
//
// Generates random valid variants (lib/Fuzz/VariantGenerator.cpp) and checks
// each (lib/Fuzz/DifferentialCheck.cpp: the interpreter after every pass
// against the fp64 reference, the claims of flash-classify-tiles element by
// element, PTX for sm_90a and sm_80 through ptxas). A failing case is
// minimized and saved as a .flash file whose header says how to reproduce
// it. Prints progress, then "N passed, N failed, N skipped". Exit codes: 0
// nothing failed, 1 a case failed, 2 bad command line.
//
//===----------------------------------------------------------------------===//

#include "flashc/Config/ConfigFlags.h"
#include "flashc/Fuzz/DifferentialCheck.h"
#include "flashc/Fuzz/VariantGenerator.h"
#include "flashc/Target/NVPTX/Ptxas.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

using namespace flashc;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("flashc-fuzz options");
cl::opt<uint64_t> firstSeed("seed", cl::desc("First seed (cases use seed, seed + 1, ...)"),
                            cl::init(1), cl::cat(category));
cl::opt<uint64_t> count("count", cl::desc("Cases to run (0: until --seconds)"), cl::init(0),
                        cl::cat(category));
cl::opt<unsigned> seconds("seconds", cl::desc("Stop after this many seconds (0: no limit)"),
                          cl::init(0), cl::cat(category));
cl::opt<std::string> outDir("out", cl::desc("Save minimized failing cases here"),
                            cl::init("fuzz-failures"), cl::cat(category));
cl::opt<unsigned> ptxEvery("ptx-every",
                           cl::desc("Check PTX (sm_90a and sm_80, ptxas) on every Kth case "
                                    "(0: never; default 4)"),
                           cl::init(4), cl::cat(category));
cl::opt<std::string> ptxasPath("ptxas",
                               cl::desc("ptxas (default: on PATH, then /usr/local/cuda/bin; "
                                        "'none' skips assembling)"),
                               cl::cat(category));
cl::opt<std::string> emitCases("emit-cases",
                               cl::desc("Write the cases (.flash and a flash-run command per "
                                        "case in cases.txt) here instead of checking them"),
                               cl::cat(category));
cl::opt<bool> emitBackward("emit-backward",
                           cl::desc("With --emit-cases: each command checks the case's backward "
                                    "(flash-run --bwd)"),
                           cl::cat(category));
cl::list<std::string> emitBackwardTiles(
    "emit-bwd-tile",
    cl::desc("With --emit-backward, repeatable: the written cases' backward tiles in turn, "
             "each given to every --emit-head-dims dim before the next (flash-run --bwd-tile, "
             "e.g. Br=128,Bc=128; 'default' for none), so small shapes reach the tiles the "
             "defaults give only at long N (default: none)"),
    cl::cat(category));
cl::list<int64_t> emitHeadDims("emit-head-dims",
                               cl::desc("With --emit-cases: the written cases' head dims in "
                                        "turn, case k at the (k mod count)-th (default 64; each "
                                        "case passes the CPU checks at its own)"),
                               cl::CommaSeparated, cl::cat(category));
cl::opt<bool> noMinimize("no-minimize", cl::desc("Save failing cases as generated"),
                         cl::cat(category));
cl::opt<bool> verbose("verbose", cl::desc("One line per case"), cl::cat(category));
cl::opt<unsigned> caseTimeout("case-timeout",
                              cl::desc("Seconds one case may take before it counts as a hang "
                                       "(default 300)"),
                              cl::init(300), cl::cat(category));
cl::opt<bool> noFork("no-fork",
                     cl::desc("Check cases in this process (a crash then ends the run "
                              "instead of being reported and minimized)"),
                     cl::cat(category));

/// checkCase in a child process, so that a crash of the compiler or the
/// interpreter is a failing case ("crash") like any other.
fuzz::CheckResult checkIsolated(const fuzz::GeneratedCase &c, const fuzz::CheckOptions &options) {
  if (noFork)
    return fuzz::checkCase(c, options);
  int fds[2];
  if (pipe(fds) != 0)
    return fuzz::checkCase(c, options);
  pid_t child = fork();
  if (child < 0) {
    close(fds[0]);
    close(fds[1]);
    return fuzz::checkCase(c, options);
  }
  if (child == 0) {
    close(fds[0]);
    // A check that hangs is a failing case too (SIGALRM).
    alarm(caseTimeout);
    fuzz::CheckResult result = fuzz::checkCase(c, options);
    std::string text = std::to_string(static_cast<int>(result.outcome)) + "\n" + result.stage +
                       "\n" + result.message;
    size_t written = 0;
    while (written < text.size()) {
      ssize_t n = write(fds[1], text.data() + written, text.size() - written);
      if (n <= 0)
        break;
      written += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) != 0) {
    if (n < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFSIGNALED(status))
    return {fuzz::Outcome::Fail, "crash",
            std::string("the check died of signal ") + std::to_string(WTERMSIG(status)) + " (" +
                strsignal(WTERMSIG(status)) + ")"};
  llvm::StringRef rest(text);
  auto [outcome, afterOutcome] = rest.split('\n');
  auto [stage, message] = afterOutcome.split('\n');
  int kind;
  if (outcome.getAsInteger(10, kind) || kind < 0 || kind > 2)
    return {fuzz::Outcome::Fail, "crash", "the check exited without a result"};
  return {static_cast<fuzz::Outcome>(kind), stage.str(), message.str()};
}

bool writeFile(const std::string &path, const std::string &text) {
  std::error_code error;
  llvm::raw_fd_ostream os(path, error);
  if (error) {
    llvm::WithColor::error(llvm::errs(), "flashc-fuzz") << path << ": " << error.message() << "\n";
    return false;
  }
  os << text;
  return true;
}

/// The reproducer: the case's source with a header saying how it failed
/// and how to run it.
std::string reproducer(const fuzz::GeneratedCase &c, const fuzz::CheckResult &result) {
  std::string header = "# flashc-fuzz seed " + std::to_string(c.seed) + ": " + result.stage +
                       "\n";
  for (llvm::StringRef line : llvm::split(result.message, '\n'))
    if (!line.empty())
      header += "#   " + line.str() + "\n";
  if (llvm::StringRef(result.stage).starts_with("ptx")) {
    // The PTX checks compile at D = 64 with the default tile.
    llvm::StringRef chip = llvm::StringRef(result.stage).rsplit(' ').second;
    header += "# flashc THIS.flash --emit=ptx --arch=" + chip.str() + " --shape D=64,N=" +
              std::to_string(c.queryLen) + " -o THIS.ptx (then ptxas -arch=" + chip.str() +
              " THIS.ptx)\n";
  } else {
    header += "# flashc THIS.flash --run=cpu --shape " + c.shapeSpec() + " --tile " +
              c.tileSpec() + " --seed " + std::to_string(c.seed) +
              " (a false tile claim shows only in flashc-fuzz, which checks every claim)\n";
  }
  return header + c.source();
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(category);
  config::setVersionPrinter("flashc-fuzz");
  cl::ParseCommandLineOptions(argc, argv,
                              "flashc-fuzz: differential fuzzing of random valid variants "
                              "(interpreter after every pass vs fp64, tile claims, PTX)\n");
  if (count == 0 && seconds == 0) {
    llvm::WithColor::error(llvm::errs(), "flashc-fuzz") << "give --count and/or --seconds\n";
    return 2;
  }

  if (emitCases.empty() && (emitBackward || !emitHeadDims.empty() || !emitBackwardTiles.empty())) {
    llvm::WithColor::error(llvm::errs(), "flashc-fuzz")
        << "--emit-backward, --emit-head-dims and --emit-bwd-tile apply to --emit-cases\n";
    return 2;
  }
  if (!emitBackwardTiles.empty() && !emitBackward) {
    llvm::WithColor::error(llvm::errs(), "flashc-fuzz") << "--emit-bwd-tile needs --emit-backward\n";
    return 2;
  }
  for (const std::string &tile : emitBackwardTiles) {
    if (tile == "default")
      continue;
    // The spec goes into cases.txt as one word of a flash-run command.
    if (tile.empty() || tile.find_first_of(" \t") != std::string::npos) {
      llvm::WithColor::error(llvm::errs(), "flashc-fuzz")
          << "--emit-bwd-tile: '" << tile << "' is not a tile like Br=128,Bc=128\n";
      return 2;
    }
    config::ConfigRequest request;
    if (llvm::Error error = config::parseTile(tile, request, /*backward=*/true)) {
      llvm::WithColor::error(llvm::errs(), "flashc-fuzz")
          << "--emit-bwd-tile " << tile << ": " << llvm::toString(std::move(error)) << "\n";
      return 2;
    }
  }
  if (!emitCases.empty()) {
    if (count == 0) {
      llvm::WithColor::error(llvm::errs(), "flashc-fuzz") << "--emit-cases needs --count\n";
      return 2;
    }
    llvm::SmallVector<int64_t> headDims(emitHeadDims.begin(), emitHeadDims.end());
    if (headDims.empty())
      headDims.push_back(64);
    for (int64_t headDim : headDims)
      if (headDim < 16 || headDim > 256 || headDim % 16) {
        llvm::WithColor::error(llvm::errs(), "flashc-fuzz")
            << "--emit-head-dims: " << headDim << " is not a multiple of 16 in [16, 256]\n";
        return 2;
      }
    if (std::error_code error = llvm::sys::fs::create_directories(emitCases)) {
      llvm::WithColor::error(llvm::errs(), "flashc-fuzz") << emitCases << ": " << error.message()
                                                          << "\n";
      return 2;
    }
    std::string commands;
    uint64_t emitted = 0, filtered = 0, failedOnCpu = 0;
    fuzz::CheckOptions cpuOnly;
    cpuOnly.ptx = false;
    for (uint64_t seed = firstSeed; emitted < count; ++seed) {
      fuzz::GeneratedCase c = fuzz::generateCase(seed);
      if (c.elementType == "f32")
        continue; // interpreter-only on the GPU path
      // Only cases the CPU checks pass at the GPU's head dim: a case whose
      // scores are not finite, or too large to compare, says nothing about
      // the GPU (flash-run fails it, as NaN never passes).
      fuzz::GeneratedCase gpu = c;
      gpu.headDim = headDims[emitted % headDims.size()];
      fuzz::CheckResult cpu = checkIsolated(gpu, cpuOnly);
      if (cpu.outcome == fuzz::Outcome::Fail) {
        ++failedOnCpu;
        llvm::errs() << "FAIL seed " << seed << " (on the CPU, at D = " << gpu.headDim
                     << "): " << cpu.stage << ": " << cpu.message << "\n";
      }
      if (cpu.outcome != fuzz::Outcome::Pass) {
        ++filtered;
        continue;
      }
      std::string name = "case-" + std::to_string(seed) + ".flash";
      if (!writeFile(emitCases + "/" + name, c.source()))
        return 1;
      // The GPU kernels need a head dim they support; lengths stay, the
      // tile is the default one or --emit-bwd-tile's turn, which moves on
      // once every head dim had it (so each head dim meets every tile).
      std::string tile;
      if (!emitBackwardTiles.empty()) {
        const std::string &spec =
            emitBackwardTiles[emitted / headDims.size() % emitBackwardTiles.size()];
        if (spec != "default")
          tile = " --bwd-tile " + spec;
      }
      commands += name + " --shape " + gpu.shapeSpec() + " --seed " + std::to_string(seed) +
                  (emitBackward ? " --bwd" : "") + tile + "\n";
      ++emitted;
    }
    if (!writeFile(emitCases + "/cases.txt", commands))
      return 1;
    llvm::outs() << "wrote " << emitted << " cases and " << emitCases << "/cases.txt (" << filtered
                 << " left out: skipped or failed on the CPU; " << failedOnCpu << " failed)\n";
    return failedOnCpu ? 1 : 0;
  }

  fuzz::CheckOptions options;
  options.ptxas = nvptx::findPtxas(ptxasPath);
  bool terminal = llvm::sys::Process::StandardErrIsDisplayed();
  auto started = std::chrono::steady_clock::now();
  uint64_t passed = 0, failed = 0, skipped = 0;
  std::map<std::string, uint64_t> skipReasons;
  for (uint64_t n = 0;; ++n) {
    if (count && n >= count)
      break;
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (seconds && elapsed >= seconds)
      break;
    uint64_t seed = firstSeed + n;
    fuzz::GeneratedCase c = fuzz::generateCase(seed);
    options.ptx = ptxEvery && n % ptxEvery == 0;
    fuzz::CheckResult result = checkIsolated(c, options);
    if (result.outcome == fuzz::Outcome::Pass) {
      ++passed;
    } else if (result.outcome == fuzz::Outcome::Skip) {
      ++skipped;
      ++skipReasons[result.stage];
    } else {
      ++failed;
      llvm::errs() << (terminal ? "\r\x1b[K" : "") << "FAIL seed " << seed << ": "
                   << result.stage << ": " << result.message << "\n";
      fuzz::GeneratedCase small =
          noMinimize ? c : fuzz::minimize(c, result, options, checkIsolated);
      fuzz::CheckResult smallResult = noMinimize ? result : checkIsolated(small, options);
      llvm::sys::fs::create_directories(outDir);
      std::string path = outDir + "/fuzz-" + std::to_string(seed) + ".flash";
      if (writeFile(path, reproducer(small, smallResult)))
        llvm::errs() << "  minimized to " << small.mask.size() + small.score.size()
                     << " expression nodes, saved as " << path << "\n";
    }
    if (verbose)
      llvm::errs() << "seed " << seed << ": "
                   << (result.outcome == fuzz::Outcome::Pass   ? "ok"
                       : result.outcome == fuzz::Outcome::Skip ? "skip (" + result.stage + ")"
                                                               : "FAIL")
                   << "\n";
    else if ((n + 1) % 100 == 0 || terminal)
      llvm::errs() << (terminal ? "\r" : "") << "flashc-fuzz: " << n + 1 << " cases, "
                   << failed << " failed, " << skipped << " skipped"
                   << (terminal ? "\x1b[K" : "\n");
  }
  if (terminal)
    llvm::errs() << "\n";
  for (const auto &[reason, n] : skipReasons)
    llvm::outs() << "skipped " << n << ": " << reason << "\n";
  llvm::outs() << "fuzz: " << passed << " passed, " << failed << " failed, " << skipped
               << " skipped\n";
  return failed ? 1 : 0;
}
