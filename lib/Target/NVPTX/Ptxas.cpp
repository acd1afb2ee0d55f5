//===- Ptxas.cpp - Finding the CUDA toolkit's assembler --------------------===//

#include "flashc/Target/NVPTX/Ptxas.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"

std::string flashc::nvptx::findPtxas(llvm::StringRef requested) {
  if (requested == "none")
    return "";
  if (!requested.empty())
    return requested.str();
  if (llvm::ErrorOr<std::string> found = llvm::sys::findProgramByName("ptxas"))
    return *found;
  if (llvm::sys::fs::can_execute("/usr/local/cuda/bin/ptxas"))
    return "/usr/local/cuda/bin/ptxas";
  return "";
}
