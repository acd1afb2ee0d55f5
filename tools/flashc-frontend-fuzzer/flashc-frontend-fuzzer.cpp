//===- flashc-frontend-fuzzer.cpp - libFuzzer target: bytes -> flash IR ----===//
//
// Built with clang's -fsanitize=fuzzer,address,undefined (FLASHC_LIBFUZZER;
// scripts/frontend-fuzz.sh builds and runs it): any input bytes go through
// the whole front end as flashc would take a file: the lexer, parser and
// Sema (errors are expected and ignored), the printer (its text must parse
// back to the same module), then for a checked module IRGen at
// a fixed tile, the verifier, and the flash pass pipeline, for the forward
// kernels and again for the backward ones (symbolic derivatives included).
// A crash, a sanitizer report or a verifier failure on IR the front end
// accepted is a bug.
//
//===----------------------------------------------------------------------===//

#include "flashc/Dialect/Flash/Transforms/Passes.h"
#include "flashc/Frontend/AST.h"
#include "flashc/Frontend/Frontend.h"
#include "flashc/IRGen/IRGen.h"
#include "flashc/InitAllDialects.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdint>
#include <cstdlib>

using namespace flashc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::SourceMgr sourceMgr;
  sourceMgr.setDiagHandler([](const llvm::SMDiagnostic &, void *) {});
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.flash"),
      llvm::SMLoc());
  std::optional<frontend::Module> ast = frontend::parseFlashFile(sourceMgr);
  if (!ast)
    return 0;
  // The printer's output parses back to the same module (printing it again
  // gives the same text).
  std::string printed = frontend::toString(*ast);
  llvm::SourceMgr reparsedMgr;
  reparsedMgr.setDiagHandler([](const llvm::SMDiagnostic &, void *) {});
  reparsedMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(printed, "printed.flash"),
                                 llvm::SMLoc());
  std::optional<frontend::Module> reparsed = frontend::parseFlashFile(reparsedMgr);
  if (!reparsed || frontend::toString(*reparsed) != printed) {
    llvm::errs() << "the printed module does not parse back to itself:\n" << printed << "\n";
    std::abort();
  }

  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  mlir::ScopedDiagnosticHandler ignore(&context, [](mlir::Diagnostic &) {
    return mlir::success();
  });
  frontend::KernelOptions options;
  options.blockRows = 64;
  options.blockCols = 64;
  for (bool backward : {false, true}) {
    options.backward = backward;
    mlir::OwningOpRef<mlir::ModuleOp> module =
        frontend::emitFlashIR(context, *ast, options, sourceMgr);
    if (!module)
      return 0; // e.g. a head dim that contradicts the default one: reported
    if (mlir::failed(mlir::verify(*module))) {
      llvm::errs() << "IRGen built invalid IR for an accepted module\n";
      std::abort();
    }
    mlir::PassManager pm(&context);
    flash::buildFlashPipeline(pm);
    if (mlir::failed(pm.run(*module))) {
      llvm::errs() << "the flash pipeline failed on IR the front end built\n";
      std::abort();
    }
  }
  return 0;
}
