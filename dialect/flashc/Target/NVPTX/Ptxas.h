//===- Ptxas.h - Finding the CUDA toolkit's assembler -----------*- C++ -*-===//
#ifndef FLASHC_TARGET_NVPTX_PTXAS_H
#define FLASHC_TARGET_NVPTX_PTXAS_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace flashc::nvptx {

/// The ptxas a tool uses: `requested` when given (a --ptxas flag; "none"
/// means no ptxas), else ptxas on PATH, else /usr/local/cuda/bin/ptxas;
/// empty when there is none.
std::string findPtxas(llvm::StringRef requested);

} // namespace flashc::nvptx

#endif // FLASHC_TARGET_NVPTX_PTXAS_H
