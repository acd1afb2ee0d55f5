//===- AOT.cpp - Kernels for plain C/C++ programs --------------------------===//

#include "flashc/Target/Package/AOT.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

using namespace flashc;

namespace {

/// The raw-string delimiter around the embedded package; PTX never
/// contains it.
constexpr llvm::StringLiteral kDelimiter = "flashc_package";

std::string cType(const std::string &type) { return type == "i32" ? "int32_t" : "float"; }

std::string upper(llvm::StringRef text) { return text.upper(); }

/// The sizes and the run-time arguments every launch takes (C).
std::string sizeParameters() {
  return "int64_t batch, int64_t heads, int64_t kv_heads, int64_t query_len, int64_t key_len";
}

std::string argumentParameters(const flashrt::KernelPackage &package) {
  std::string text;
  for (const flashrt::PackageParam &param : package.params)
    text += ", " + cType(param.type) + " " + param.name;
  for (const flashrt::PackageTensor &tensor : package.tensors)
    text += ", uint64_t " + tensor.name;
  return text;
}

/// The launch function's parameter list (C), shared by header and source.
std::string launchParameters(const flashrt::KernelPackage &package) {
  // Fixed names, so no param, tensor or local of the generated code can
  // clash with them (the header's comment names the variant's own).
  std::string paged;
  if (package.pageSize)
    paged = ",\n    uint64_t paged_block_table, int64_t paged_table_stride, "
            "uint64_t paged_key_lengths, int64_t paged_num_pages";
  std::string varlen;
  if (package.packsQueries())
    varlen += ",\n    uint64_t varlen_query_offsets, int64_t varlen_query_rows";
  if (package.packsKeys())
    varlen += ",\n    uint64_t varlen_key_offsets, int64_t varlen_key_rows";
  return "void *stream, flashc_tensor q, flashc_tensor k, flashc_tensor v, "
         "flashc_tensor o, uint64_t lse,\n    " +
         sizeParameters() + argumentParameters(package) + paged + varlen;
}

/// The block summary function's parameter list: the sizes and run-time
/// arguments the mask reads, and the summary written.
std::string summaryParameters(const flashrt::KernelPackage &package) {
  return "void *stream, " + sizeParameters() + argumentParameters(package) +
         ", uint64_t summary";
}

/// The backward function's parameter list: the forward's tensors, O, LSE
/// and dO in, dQ, dK, dV and one f32 gradient per aux tensor out.
std::string backwardParameters(const flashrt::KernelPackage &package) {
  std::string text = "void *stream, flashc_tensor q, flashc_tensor k, flashc_tensor v, "
                     "flashc_tensor o, uint64_t lse, flashc_tensor d_o,\n"
                     "    flashc_tensor dq, flashc_tensor dk, flashc_tensor dv, uint64_t "
                     "workspace,\n    " +
                     sizeParameters() + argumentParameters(package);
  for (const flashrt::PackageTensor &tensor : package.tensors)
    text += ", uint64_t d_" + tensor.name;
  return text;
}

/// Statements filling `params` and `tensors` from the C arguments.
std::string collectArguments(const flashrt::KernelPackage &package) {
  std::string text = "    std::map<std::string, double> params;\n";
  for (const flashrt::PackageParam &param : package.params)
    text += "    params[\"" + param.name + "\"] = " + param.name + ";\n";
  text += "    std::vector<uint64_t> tensors;\n";
  for (const flashrt::PackageTensor &tensor : package.tensors)
    text += "    tensors.push_back(" + tensor.name + ");\n";
  return text;
}

/// How every entry point that launches starts: the loaded kernels, their
/// context current, the caller's stream.
constexpr llvm::StringLiteral kEnterCall = R"(  try {
    Loaded &state = loaded();
    state.context.makeCurrent();
    flashrt::Stream launchStream =
        flashrt::Stream::borrow(state.context, static_cast<CUstream_st *>(stream));
)";

/// How it ends: success, or the error's message and return code.
constexpr llvm::StringLiteral kReturnSuccess = R"(    lastError.clear();
    return 0;
  } catch (const flashrt::Error &error) {
    lastError = error.what();
    return error.kind() == flashrt::ErrorKind::InvalidArgument
               ? 2
               : flashrt::exitCodeFor(error.kind());
  } catch (const std::exception &error) {
    lastError = error.what();
    return 5;
  }
}
)";

} // namespace

AOTSources flashc::generateAOTSources(const flashrt::KernelPackage &package,
                                      llvm::StringRef inputName,
                                      const flashrt::KernelPackage *backward) {
  const std::string &name = package.kernelName;
  std::string guard = "FLASHC_AOT_" + upper(name) + "_H";
  std::string description = llvm::formatv(
      "flashc {0} from {1}, variant '{2}': {3}, head dim {4}, tile {5}x{6}, {7}, {8} threads",
      package.flashcVersion, llvm::sys::path::filename(inputName), name, package.elementType,
      package.headDim, package.blockRows, package.blockCols, package.arch,
      package.threadsPerBlock);

  AOTSources out;
  llvm::raw_string_ostream h(out.header);
  h << "/* Generated by " << description << ".\n"
    << " * Link " << name << ".cpp and flashc::flashrun (find_package(flashc)). */\n"
    << "#ifndef " << guard << "\n#define " << guard << "\n\n"
    << "#include <stdint.h>\n\n"
    << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
    << "#ifndef FLASHC_TENSOR_DEFINED\n#define FLASHC_TENSOR_DEFINED\n"
    << "/* A [batch, heads, length, head_dim] tensor in device memory; strides in\n"
    << " * elements (head-dim stride 1). BHSD: {H*N*D, N*D, D}; BSHD: {N*H*D, D, H*D}.\n"
    << " * q, k, v and o: data 16-byte aligned, strides multiples of 8. */\n"
    << "typedef struct flashc_tensor {\n"
    << "  uint64_t data;\n  int64_t batch_stride, head_stride, row_stride;\n"
    << "} flashc_tensor;\n#endif\n\n"
    << "/* O = attention(q, k, v) in " << package.elementType
    << "; lse: f32 [batch, heads, query_len].\n"
    << " * The kernel runs on the device $FLASHRT_DEVICE names (default 0), whose\n"
    << " * primary context becomes the calling thread's current context; `stream`\n"
    << " * is a CUstream of that context, or NULL for the legacy default stream.\n"
    << " * The launch is asynchronous.\n"
    << " * Returns 0, or 2 for arguments the kernel does not take, 3 without a GPU\n"
    << " * or driver, 4 when the PTX does not JIT, 5 for other driver errors;\n"
    << " * flashc_" << name << "_error() then says why. */\n"
    << "int flashc_" << name << "_launch(" << launchParameters(package) << ");\n\n";
  if (package.pageSize)
    h << "/* K and V live in a paged cache of " << package.pageSize << "-key pages: k and v are\n"
      << " * [paged_num_pages, " << package.pageSize << ", kv_heads, head_dim] with strides {"
      << package.pageSize << "*kv_heads*head_dim,\n"
      << " * head_dim, kv_heads*head_dim}; key j of sequence b is row j % " << package.pageSize
      << " of page\n * paged_block_table[b * paged_table_stride + j / " << package.pageSize
      << "] (device i32; the variant's '" << package.pageTable
      << "'), and sequence b has\n * paged_key_lengths[b] keys (device i32; '"
      << package.pageLengths << "'), at most key_len;\n * key_len <= paged_table_stride * "
      << package.pageSize << ".\n"
      << " * The caller's contract, which the kernel cannot report: lengths in\n"
      << " * [0, key_len] and the table entries they reach in [0, paged_num_pages); the kernel\n"
      << " * clamps a length and reads zeros for an entry outside the cache. */\n\n";
  if (package.packsQueries() || package.packsKeys()) {
    h << "/* A packed batch of ragged sequences (FlashAttention-2's varlen layout):\n";
    if (package.packsQueries())
      h << " * q and o are token-major [varlen_query_rows, heads, head_dim] (strides {0,\n"
        << " * head_dim, heads*head_dim}); sequence b's queries are rows\n"
        << " * varlen_query_offsets[b] .. varlen_query_offsets[b + 1] - 1 (device i32\n"
        << " * [batch + 1]; the variant's '" << package.varlenQueries
        << "'), at most query_len of them;\n"
        << " * lse is f32 [heads, varlen_query_rows].\n";
    if (package.packsKeys())
      h << " * k and v are token-major [varlen_key_rows, kv_heads, head_dim]; sequence b's\n"
        << " * keys are rows varlen_key_offsets[b] .. varlen_key_offsets[b + 1] - 1 (device\n"
        << " * i32 [batch + 1]; the variant's '" << package.varlenKeys
        << "'), at most key_len of them; every k and v row below varlen_key_rows\n"
        << " * must be finite (a TMA box brings a sequence's next rows into masked\n"
        << " * positions): pass varlen_key_offsets[batch] when later rows hold garbage.\n";
    h << " * The caller's contract, which the kernel cannot report: offsets never\n"
      << " * decreasing and inside [0, rows]; the kernel clamps them into the rows. */\n\n";
  }
  if (package.blockSummary)
    h << "/* The mask reads aux tensors: flashc_" << name << "_launch first classifies\n"
      << " * every (query tile, key block) into a block summary (empty, partial,\n"
      << " * full) on `stream`. One summary serves every launch with the same sizes,\n"
      << " * parameters and aux tensor contents (the layers and heads that share the\n"
      << " * mask): compute it once into device memory of\n"
      << " * flashc_" << name << "_summary_bytes(...) bytes with flashc_" << name
      << "_summary, then\n"
      << " * launch with flashc_" << name << "_launch_with_summary. A summary of other\n"
      << " * inputs gives wrong results. Same return codes and stream rules. */\n"
      << "uint64_t flashc_" << name << "_summary_bytes(" << sizeParameters() << ");\n"
      << "int flashc_" << name << "_summary(" << summaryParameters(package) << ");\n"
      << "int flashc_" << name << "_launch_with_summary(" << launchParameters(package)
      << ", uint64_t summary);\n\n";
  if (backward)
    h << "/* The backward pass from the forward's O and lse and the output gradient\n"
      << " * d_o (like o): writes dq (like q), dk and dv (like k, v) and adds into\n"
      << " * d_<tensor>, one f32 gradient per aux tensor in its shape (0: none\n"
      << " * wanted; overwritten, not accumulated). workspace: device scratch of\n"
      << " * flashc_" << name << "_backward_workspace(...) bytes, 16-byte aligned.\n"
      << " * Backward tile " << backward->blockRows << "x" << backward->blockCols << ", "
      << backward->threadsPerBlock << " threads. Same return codes and stream rules. */\n"
      << "int flashc_" << name << "_backward(" << backwardParameters(*backward) << ");\n"
      << "uint64_t flashc_" << name << "_backward_workspace(" << sizeParameters()
      << ");\n\n";
  if (backward && backward->blockSummary)
    h << "/* The backward walks the blocks of its own tiling that a summary of the\n"
      << " * mask leaves (flashc_" << name << "_backward computes it into the workspace\n"
      << " * first). Like the forward's, one serves every backward with the same sizes,\n"
      << " * parameters and aux tensor contents: compute it once into device memory of\n"
      << " * flashc_" << name << "_backward_summary_bytes(...) bytes with\n"
      << " * flashc_" << name << "_backward_summary, then call\n"
      << " * flashc_" << name << "_backward_with_summary. It is not the forward's summary\n"
      << " * (another tiling). Same return codes and stream rules. */\n"
      << "uint64_t flashc_" << name << "_backward_summary_bytes(" << sizeParameters() << ");\n"
      << "int flashc_" << name << "_backward_summary(" << summaryParameters(*backward)
      << ");\n"
      << "int flashc_" << name << "_backward_with_summary(" << backwardParameters(*backward)
      << ", uint64_t summary);\n\n";
  h
    << "/* The message of the last failed call on this thread (\"\" when none). */\n"
    << "const char *flashc_" << name << "_error(void);\n\n"
    << "#ifdef __cplusplus\n}\n#endif\n\n#endif /* " << guard << " */\n";

  llvm::raw_string_ostream c(out.source);
  c << "// Generated by " << description << ".\n"
    << "#include \"" << name << ".h\"\n\n"
    << "#include \"flashrun/AttentionKernel.h\"\n\n"
    << "#include <exception>\n#include <map>\n#include <memory>\n#include <mutex>\n"
    << "#include <string>\n#include <vector>\n\n"
    << "namespace {\n\n"
    << "// The kernel package: launch metadata and PTX.\n"
    << "const char kPackage[] = R\"" << kDelimiter << "(" << package.serialize() << ")"
    << kDelimiter << "\";\n\n";
  if (backward)
    c << "// The backward package: its three kernels and their launch metadata.\n"
      << "const char kBackwardPackage[] = R\"" << kDelimiter << "(" << backward->serialize()
      << ")" << kDelimiter << "\";\n\n";
  c << "struct Loaded {\n"
    << "  flashrt::Context context;\n"
    << "  flashrun::AttentionKernel kernel{context, flashrt::KernelPackage::parse(kPackage)};\n";
  if (backward)
    c << "  flashrun::BackwardKernel backward{context, "
         "flashrt::KernelPackage::parse(kBackwardPackage)};\n";
  c << "};\n\n"
    << "thread_local std::string lastError;\n\n"
    << "// Loaded (and the PTX JIT-compiled) on first use; a failed load is retried.\n"
    << "Loaded &loaded() {\n"
    << "  static std::mutex mutex;\n  static std::unique_ptr<Loaded> instance;\n"
    << "  std::lock_guard<std::mutex> lock(mutex);\n"
    << "  if (!instance)\n    instance = std::make_unique<Loaded>();\n"
    << "  return *instance;\n}\n\n"
    << "flashrun::TensorRef ref(const flashc_tensor &t) {\n"
    << "  return {t.data, t.batch_stride, t.head_stride, t.row_stride};\n}\n\n"
    << "} // namespace\n\n"
    << "extern \"C\" int flashc_" << name << "_launch(" << launchParameters(package) << ") {\n";
  std::string pagedArgument = "{paged_block_table, paged_key_lengths, paged_table_stride, "
                              "paged_num_pages}";
  std::string varlenLaunch =
      std::string(package.pageSize ? "    flashrun::PagedKV flashc_paged" + pagedArgument + ";\n" : "") +
      "    state.kernel.launchVarlen(launchStream, ref(q), ref(k), ref(v), ref(o), lse,\n"
      "                              {batch, heads, kv_heads, query_len, key_len},\n"
      "                              {" +
      (package.packsQueries() ? "varlen_query_offsets" : "0") + ", " +
      (package.packsKeys() ? "varlen_key_offsets" : "0") + ", " +
      (package.packsQueries() ? "varlen_query_rows" : "0") + ", " +
      (package.packsKeys() ? "varlen_key_rows" : "0") + "},\n" +
      "                              " + (package.pageSize ? "&flashc_paged" : "nullptr") +
      ", params, tensors";
  std::string launchCall;
  if (package.packsQueries() || package.packsKeys())
    launchCall = varlenLaunch;
  else if (package.pageSize)
    launchCall = "    state.kernel.launchPaged(launchStream, ref(q), ref(k), ref(v), ref(o), lse,\n"
                 "                             {batch, heads, kv_heads, query_len, key_len},\n"
                 "                             " + pagedArgument + ", params, tensors";
  else
    launchCall = "    state.kernel.launch(launchStream, ref(q), ref(k), ref(v), ref(o), lse,\n"
                 "                        {batch, heads, kv_heads, query_len, key_len}, params, "
                 "tensors";
  auto emitLaunchBody = [&](llvm::StringRef summary) {
    c << kEnterCall << collectArguments(package) << launchCall << summary << ");\n"
      << kReturnSuccess << "\n";
  };
  // flashc_<name>_<prefix>summary_bytes and _<prefix>summary: the size of
  // `pkg`'s summary (from the embedded package `constant`, no GPU) and its
  // computation by the loaded kernel object `member`.
  auto emitSummaryEntryPoints = [&](llvm::StringRef prefix, const flashrt::KernelPackage &pkg,
                                    llvm::StringRef constant, llvm::StringRef member) {
    c << "extern \"C\" uint64_t flashc_" << name << "_" << prefix << "summary_bytes("
      << sizeParameters() << ") {\n"
      << "  // The summary's size depends on the package's tile only: no GPU needed.\n"
      << "  static const flashrt::KernelPackage package =\n"
      << "      flashrt::KernelPackage::parse(" << constant << ");\n"
      << "  return flashrun::AttentionKernel::blockSummaryBytes(\n"
      << "      package, {batch, heads, kv_heads, query_len, key_len});\n"
      << "}\n\n"
      << "extern \"C\" int flashc_" << name << "_" << prefix << "summary("
      << summaryParameters(pkg) << ") {\n"
      << kEnterCall << collectArguments(pkg) << "    state." << member
      << ".computeBlockSummary(launchStream, {batch, heads, kv_heads, query_len, key_len},\n"
      << "                              params, tensors, summary);\n"
      << kReturnSuccess << "\n";
  };
  emitLaunchBody("");
  if (package.blockSummary) {
    c << "extern \"C\" int flashc_" << name << "_launch_with_summary("
      << launchParameters(package) << ", uint64_t summary) {\n"
      << "  if (summary == 0) {\n"
      << "    lastError = \"the block summary is a null pointer (flashc_" << name
      << "_launch computes one)\";\n"
      << "    return 2;\n  }\n";
    emitLaunchBody(", summary");
    emitSummaryEntryPoints("", package, "kPackage", "kernel");
  }
  if (backward) {
    auto emitBackwardBody = [&](llvm::StringRef summary) {
      c << kEnterCall << collectArguments(*backward)
        << "    flashrun::BackwardTensors t;\n"
        << "    t.q = ref(q);\n    t.k = ref(k);\n    t.v = ref(v);\n    t.out = ref(o);\n"
        << "    t.lse = lse;\n    t.outputGrad = ref(d_o);\n    t.queryGrad = ref(dq);\n"
        << "    t.keyGrad = ref(dk);\n    t.valueGrad = ref(dv);\n    t.workspace = workspace;\n";
      for (const flashrt::PackageTensor &tensor : backward->tensors)
        c << "    t.tensorGrads.push_back(d_" << tensor.name << ");\n";
      if (!summary.empty())
        c << "    t.blockSummary = " << summary << ";\n";
      c << "    state.backward.launch(launchStream, t, {batch, heads, kv_heads, query_len, "
           "key_len},\n"
        << "                          params, tensors);\n"
        << kReturnSuccess << "\n";
    };
    c << "extern \"C\" int flashc_" << name << "_backward(" << backwardParameters(*backward)
      << ") {\n";
    emitBackwardBody("");
    c << "extern \"C\" uint64_t flashc_" << name << "_backward_workspace(" << sizeParameters()
      << ") {\n"
      << "  // The workspace depends on the package's tile only: no GPU needed.\n"
      << "  static const flashrt::KernelPackage package =\n"
      << "      flashrt::KernelPackage::parse(kBackwardPackage);\n"
      << "  return flashrun::BackwardKernel::workspaceBytes(\n"
      << "      package, {batch, heads, kv_heads, query_len, key_len});\n"
      << "}\n\n";
    if (backward->blockSummary) {
      c << "extern \"C\" int flashc_" << name << "_backward_with_summary("
        << backwardParameters(*backward) << ", uint64_t summary) {\n"
        << "  if (summary == 0) {\n"
        << "    lastError = \"the block summary is a null pointer (flashc_" << name
        << "_backward computes one)\";\n"
        << "    return 2;\n  }\n";
      emitBackwardBody("summary");
      emitSummaryEntryPoints("backward_", *backward, "kBackwardPackage", "backward");
    }
  }
  c << "extern \"C\" const char *flashc_" << name << "_error(void) { return lastError.c_str(); }\n";
  return out;
}

static llvm::Error writeFile(llvm::StringRef path, llvm::StringRef text) {
  std::error_code error;
  llvm::raw_fd_ostream os(path, error);
  if (error)
    return llvm::createStringError(error, "cannot write '" + path + "': " + error.message());
  os << text;
  os.close();
  if (os.has_error()) {
    // Cleared, or the stream's destructor would abort the process.
    error = os.error();
    os.clear_error();
    return llvm::createStringError(error, "cannot write '" + path + "': " + error.message());
  }
  return llvm::Error::success();
}

llvm::Error flashc::writeAOT(const flashrt::KernelPackage &package, llvm::StringRef inputName,
                             llvm::StringRef directory, llvm::StringRef ptxas,
                             const flashrt::KernelPackage *backward) {
  if (std::error_code error = llvm::sys::fs::create_directories(directory))
    return llvm::createStringError(error, "cannot create '" + directory + "': " +
                                              error.message());
  auto path = [&](llvm::StringRef extension) {
    llvm::SmallString<256> result(directory);
    llvm::sys::path::append(result, package.kernelName + extension);
    return std::string(result);
  };
  AOTSources sources = generateAOTSources(package, inputName, backward);
  if (llvm::Error error = writeFile(path(".h"), sources.header))
    return error;
  if (llvm::Error error = writeFile(path(".cpp"), sources.source))
    return error;
  // Each package's PTX beside the sources and, with ptxas, its cubin: the
  // build fails here, not at the first launch, when ptxas rejects it.
  auto writeKernel = [&](const flashrt::KernelPackage &kernel,
                         llvm::StringRef stem) -> llvm::Error {
    std::string ptxPath = path(stem.str() + ".ptx");
    if (llvm::Error error = writeFile(ptxPath, kernel.ptx))
      return error;
    if (ptxas.empty())
      return llvm::Error::success();
    std::string cubinPath = path(stem.str() + ".cubin"), message;
    std::string archFlag = "-arch=" + kernel.arch;
    llvm::StringRef args[] = {ptxas, archFlag, ptxPath, "-o", cubinPath};
    int status = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, {}, 0, 0, &message);
    if (status != 0)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     ptxas + " failed on " + ptxPath +
                                         (message.empty() ? "" : ": " + message) +
                                         " (exit " + std::to_string(status) + ")");
    return llvm::Error::success();
  };
  if (llvm::Error error = writeKernel(package, ""))
    return error;
  if (backward)
    if (llvm::Error error = writeKernel(*backward, "_backward"))
      return error;
  return llvm::Error::success();
}
