//===- AttentionKernel.cpp - Launch a flashc kernel package ---------------===//

#include "flashrun/AttentionKernel.h"

#include <algorithm>
#include <climits>
#include <cstring>

using flashrt::Error;
using flashrt::ErrorKind;

namespace flashrun {

namespace {

[[noreturn]] void invalid(const std::string &message) {
  throw Error(ErrorKind::InvalidArgument, message);
}

const char *const kRoleNames[6] = {"B", "H", "HKV", "N", "M", "D"};

/// The sizes against what the package fixes and ties.
void checkSizes(const flashrt::KernelPackage &pkg, const Sizes &sizes) {
  int64_t values[6] = {sizes.batch,   sizes.heads,  sizes.kvHeads,
                       sizes.queryLen, sizes.keyLen, pkg.headDim};
  for (int role = 0; role < 6; ++role) {
    if (values[role] < 1)
      invalid(std::string(kRoleNames[role]) + " must be positive");
    if (pkg.staticSizes[role] != -1 && values[role] != pkg.staticSizes[role])
      invalid("kernel '" + pkg.kernelName + "' is compiled for " + kRoleNames[role] + " = " +
              std::to_string(pkg.staticSizes[role]) + ", got " + std::to_string(values[role]));
    int64_t tied = pkg.dimClasses[role];
    if (values[role] != values[tied])
      invalid("kernel '" + pkg.kernelName + "' needs " + kRoleNames[tied] + " == " +
              kRoleNames[role] + ", got " + std::to_string(values[tied]) + " and " +
              std::to_string(values[role]));
  }
  if (sizes.heads % sizes.kvHeads != 0)
    invalid("H = " + std::to_string(sizes.heads) + " is not a multiple of HKV = " +
            std::to_string(sizes.kvHeads));
  if (sizes.queryLen > INT32_MAX || sizes.keyLen > INT32_MAX)
    invalid("sequence lengths must fit in 32 bits");
  if (sizes.heads > 65535 || sizes.batch > 65535)
    invalid("H and B must be at most 65535 (grid y and z)");
  // The block summary's grid is (CTAs per tile, query tiles, summary rows).
  if (pkg.entry("summary")) {
    int64_t rows = (pkg.summaryPerBatch ? sizes.batch : 1) * (pkg.summaryPerHead ? sizes.heads : 1);
    int64_t queryTiles = (sizes.queryLen + pkg.blockRows - 1) / std::max<int64_t>(pkg.blockRows, 1);
    if (rows > 65535 || queryTiles > 65535)
      invalid("kernel '" + pkg.kernelName + "' reads a block summary of " +
              std::to_string(queryTiles) + " query tiles x " + std::to_string(rows) +
              " rows (B x H of the mask's tensors); each must be at most 65535 (grid y and z)");
  }
  if (pkg.packedHeads && sizes.queryLen * (sizes.heads / sizes.kvHeads) > INT32_MAX)
    invalid("kernel '" + pkg.kernelName + "' packs the H / HKV query heads of a KV group: N x "
            "H / HKV must fit in 32 bits");
}

/// cp.async copies 16 bytes: 8 bf16/f16 elements.
void checkTensor(const char *name, const TensorRef &t) {
  if (t.devicePtr == 0)
    invalid(std::string(name) + " is a null pointer");
  if (t.devicePtr % 16 != 0)
    invalid(std::string(name) + " must be 16-byte aligned");
  if (t.batchStride % 8 || t.headStride % 8 || t.rowStride % 8)
    invalid(std::string(name) + " strides must be multiples of 8 elements");
  // TMA tensor maps take byte strides below 2^40.
  for (int64_t stride : {t.batchStride, t.headStride, t.rowStride})
    if (stride < 0 || stride >= (int64_t(1) << 39))
      invalid(std::string(name) + " strides must be in [0, 2^39) elements, got " +
              std::to_string(stride));
}

/// Parameter names and the aux tensor count against the package.
void checkArguments(const flashrt::KernelPackage &pkg, const std::map<std::string, double> &params,
                    const std::vector<uint64_t> &tensors) {
  for (const auto &[name, value] : params) {
    bool known = false;
    for (const flashrt::PackageParam &param : pkg.params)
      known |= param.name == name;
    if (!known)
      invalid("kernel '" + pkg.kernelName + "' has no parameter '" + name + "'");
    (void)value;
  }
  if (tensors.size() != pkg.tensors.size())
    invalid("kernel '" + pkg.kernelName + "' reads " + std::to_string(pkg.tensors.size()) +
            " aux tensor(s), got " + std::to_string(tensors.size()));
}

/// Parameters (by name, else their defaults) in ABI order, then the aux tensors.
void addArguments(flashrt::KernelArgs &args, const flashrt::KernelPackage &pkg,
                  const std::map<std::string, double> &params,
                  const std::vector<uint64_t> &tensors) {
  for (const flashrt::PackageParam &param : pkg.params) {
    auto it = params.find(param.name);
    double value = it != params.end() ? it->second : param.defaultValue;
    if (param.type == "i32")
      args.add(static_cast<int32_t>(value));
    else
      args.add(static_cast<float>(value));
  }
  for (uint64_t tensor : tensors)
    args.add(tensor);
}

/// The forward ABI up to the target arguments (flashc/Target/NVPTX/EmitPTX.h):
/// what the main kernel and the block summary kernel both take.
flashrt::KernelArgs forwardArguments(const flashrt::KernelPackage &pkg, const TensorRef &q,
                                     const TensorRef &k, const TensorRef &v, const TensorRef &o,
                                     uint64_t lse, const Sizes &sizes,
                                     const std::map<std::string, double> &params,
                                     const std::vector<uint64_t> &tensors,
                                     uint64_t blockSummary, const PagedKV *paged,
                                     const VarlenBatch *varlen = nullptr) {
  flashrt::KernelArgs args;
  args.add(q.devicePtr).add(k.devicePtr).add(v.devicePtr).add(o.devicePtr).add(lse);
  for (const TensorRef *t : {&q, &k, &v, &o})
    args.add(t->batchStride).add(t->headStride).add(t->rowStride);
  for (int64_t size : {sizes.batch, sizes.heads, sizes.kvHeads, sizes.queryLen, sizes.keyLen})
    args.add(static_cast<int32_t>(size));
  addArguments(args, pkg, params, tensors);
  if (pkg.blockSummary)
    args.add(blockSummary);
  if (paged)
    args.add(paged->blockTable)
        .add(paged->keyLengths)
        .add(static_cast<int32_t>(paged->tableStride))
        .add(static_cast<int32_t>(paged->numPages));
  if (varlen && pkg.packsQueries())
    args.add(varlen->queryOffsets).add(static_cast<int32_t>(varlen->queryRows));
  if (varlen && pkg.packsKeys())
    args.add(varlen->keyOffsets).add(static_cast<int32_t>(varlen->keyRows));
  return args;
}

/// A varlen launch's arguments against the package (what can be checked
/// without reading device memory).
void checkVarlen(const flashrt::KernelPackage &pkg, const VarlenBatch *varlen) {
  bool packs = pkg.packsQueries() || pkg.packsKeys();
  if (!packs && varlen)
    invalid("kernel '" + pkg.kernelName + "' reads no packed varlen batch");
  if (packs && !varlen)
    invalid("kernel '" + pkg.kernelName + "' reads a packed varlen batch: launch it with "
            "launchVarlen");
  if (!varlen)
    return;
  auto checkSide = [&](bool packed, const std::string &name, uint64_t offsets, int64_t rows,
                       const char *tensors) {
    if (!packed)
      return;
    if (!offsets || offsets % 4)
      invalid("the offsets '" + name + "' must be a non-null, 4-byte aligned i32 [B + 1]");
    if (rows < 0 || rows > INT32_MAX)
      invalid(std::string("the packed ") + tensors + " need 0 to 2^31 - 1 rows, got " +
              std::to_string(rows));
  };
  checkSide(pkg.packsQueries(), pkg.varlenQueries, varlen->queryOffsets, varlen->queryRows,
            "q and o");
  checkSide(pkg.packsKeys(), pkg.varlenKeys, varlen->keyOffsets, varlen->keyRows, "k and v");
}

/// A paged launch's arguments against the package (what can be checked
/// without reading device memory).
void checkPagedKV(const flashrt::KernelPackage &pkg, const Sizes &sizes, const PagedKV *paged) {
  if (!pkg.pageSize && paged)
    invalid("kernel '" + pkg.kernelName + "' reads dense K and V, not a paged cache");
  if (pkg.pageSize && !paged)
    invalid("kernel '" + pkg.kernelName + "' reads a paged K/V cache (pages of " +
            std::to_string(pkg.pageSize) + " keys): launch it with launchPaged");
  if (!paged)
    return;
  if (!paged->blockTable || !paged->keyLengths)
    invalid("the block table '" + pkg.pageTable + "' and the key lengths '" + pkg.pageLengths +
            "' must not be null");
  if (paged->blockTable % 4 || paged->keyLengths % 4)
    invalid("the block table and the key lengths must be 4-byte aligned (i32)");
  if (paged->numPages < 1 || paged->numPages > INT32_MAX)
    invalid("the paged cache needs 1 to 2^31 - 1 pages, got " + std::to_string(paged->numPages));
  if (paged->tableStride < 1 || paged->tableStride > INT32_MAX ||
      paged->tableStride * pkg.pageSize < sizes.keyLen)
    invalid("the block table's " + std::to_string(paged->tableStride) +
            " entries per sequence of " + std::to_string(pkg.pageSize) +
            "-key pages do not cover M = " + std::to_string(sizes.keyLen));
}

/// What computeBlockSummary (forward and backward) refuses: a package
/// without a summary kernel, sizes or arguments its launch would refuse, a
/// null summary.
void checkSummaryRequest(const flashrt::KernelPackage &pkg, bool hasSummaryKernel,
                         const Sizes &sizes, const std::map<std::string, double> &params,
                         const std::vector<uint64_t> &tensors, uint64_t summary) {
  if (!hasSummaryKernel)
    invalid("kernel '" + pkg.kernelName + "' reads no block summary");
  checkSizes(pkg, sizes);
  checkArguments(pkg, params, tensors);
  if (summary == 0)
    invalid("the block summary of kernel '" + pkg.kernelName + "' is a null pointer");
}

/// CTAs of a package's summary kernel resident at once on the GPU.
int64_t residentSummaryCtas(flashrt::Context &context, const flashrt::Function &summary,
                            const flashrt::PackageEntry &entry) {
  int perSM = summary.maxActiveBlocksPerMultiprocessor(static_cast<int>(entry.threadsPerBlock),
                                                       static_cast<size_t>(entry.dynamicSharedBytes));
  return std::max<int64_t>(perSM, 1) * context.device().multiprocessorCount();
}

/// The summary kernel's grid (CTAs per query tile, query tiles, summary
/// rows) at `sizes`, `residentCtas` of them fitting at once.
flashrt::Dim3 summaryGrid(const flashrt::KernelPackage &pkg, const Sizes &sizes,
                          int64_t residentCtas) {
  unsigned rows = static_cast<unsigned>((pkg.summaryPerBatch ? sizes.batch : 1) *
                                        (pkg.summaryPerHead ? sizes.heads : 1));
  // One key block per warp of the summary kernel's CTA.
  const flashrt::PackageEntry &entry = *pkg.entry("summary");
  int64_t keyBlocksPerCta = std::max<int64_t>(entry.threadsPerBlock / 32, 1);
  int64_t keyBlocks = (sizes.keyLen + pkg.blockCols - 1) / pkg.blockCols;
  int64_t queryTiles = (sizes.queryLen + pkg.blockRows - 1) / pkg.blockRows;
  // The CTAs of a query tile take its groups of key blocks in turn: one
  // wave of resident CTAs in all, at most one per group. Each CTA is short
  // and bound by latency, so the launch's dispatch and a partial second
  // wave cost more than the groups a CTA loops over (H200, documents at
  // 16k: one wave 5-7% faster than 4096 CTAs, at 32k within 3%; 8192 and
  // 16384 CTAs slower everywhere: bench/results/2026-12-04e-h200-summary).
  int64_t keyGroups = std::max<int64_t>((keyBlocks + keyBlocksPerCta - 1) / keyBlocksPerCta, 1);
  int64_t entries = static_cast<int64_t>(rows) * queryTiles;
  int64_t ctasPerTile =
      std::clamp<int64_t>(std::max<int64_t>(residentCtas, 1) / entries, 1, keyGroups);
  return flashrt::Dim3(static_cast<unsigned>(ctasPerTile), static_cast<unsigned>(queryTiles),
                       rows);
}

} // namespace

AttentionKernel::AttentionKernel(flashrt::Context &context, flashrt::KernelPackage package)
    : kernelPackage(std::move(package)),
      module(flashrt::Module::fromPtx(context, kernelPackage.ptx)),
      kernelFunction(module.function(kernelPackage.kernelName)), context(&context) {
  if (const flashrt::PackageEntry *summary = kernelPackage.entry("summary")) {
    summaryFunction.emplace(module.function(summary->name));
    summaryResidentCtas = residentSummaryCtas(context, *summaryFunction, *summary);
  }
  if (const flashrt::PackageEntry *combine = kernelPackage.entry("combine"))
    combineFunction.emplace(module.function(combine->name));
  if (kernelPackage.backward)
    throw Error(ErrorKind::InvalidArgument,
                "kernel '" + kernelPackage.kernelName +
                    "' is a backward package: load it as a BackwardKernel, or pass it as "
                    "the second package");
  if (kernelPackage.dynamicSharedBytes > 48 * 1024)
    kernelFunction.setMaxDynamicSharedMemory(kernelPackage.dynamicSharedBytes);
  if (kernelPackage.persistent || kernelPackage.splitKeys) {
    int perSM = kernelFunction.maxActiveBlocksPerMultiprocessor(
        static_cast<int>(kernelPackage.threadsPerBlock),
        static_cast<size_t>(kernelPackage.dynamicSharedBytes));
    if (perSM < 1)
      throw Error(ErrorKind::LaunchError, "kernel '" + kernelPackage.kernelName +
                                              "' does not fit on one multiprocessor of " +
                                              context.device().name());
    residentCtas = static_cast<int64_t>(perSM) * context.device().multiprocessorCount();
    splitSlots = residentCtas;
  }
}

int64_t AttentionKernel::keySplitsFor(const flashrt::KernelPackage &pkg, const Sizes &sizes,
                                      int64_t slots) {
  if (!pkg.splitKeys || slots < 1)
    return 1;
  int64_t tiles = pkg.queryTiles(sizes.heads, sizes.kvHeads, sizes.queryLen) *
                  pkg.gridHeads(sizes.heads, sizes.kvHeads) * sizes.batch;
  int64_t keyBlocks = (sizes.keyLen + pkg.blockCols - 1) / pkg.blockCols;
  // The query tiles fill 80% of the slots on their own: no split pays for
  // its combine step. Otherwise the fewest splits within 95% of the best
  // wave fill (at B = 1, 32 heads, M = 8192 on the H200, 8 splits of 264
  // slots read 1328 GB/s, 7 splits 1202: bench/results/2026-12-04-h200-decode).
  if (tiles * 5 >= slots * 4)
    return 1;
  int64_t most = std::min<int64_t>({128, keyBlocks, std::max<int64_t>(slots / tiles * 4, 1)});
  auto efficiency = [&](int64_t splits) {
    int64_t ctas = tiles * splits, waves = (ctas + slots - 1) / slots;
    return static_cast<double>(ctas) / static_cast<double>(waves * slots);
  };
  double best = 0;
  for (int64_t splits = 1; splits <= most; ++splits)
    best = std::max(best, efficiency(splits));
  for (int64_t splits = 1; splits <= most; ++splits)
    if (efficiency(splits) >= 0.95 * best)
      return splits;
  return 1;
}

int64_t AttentionKernel::keySplits(const Sizes &sizes) const {
  if (!kernelPackage.splitKeys)
    return 1;
  return fixedKeySplits ? fixedKeySplits : keySplitsFor(kernelPackage, sizes, splitSlots);
}

void AttentionKernel::setKeySplits(int64_t splits) {
  if (!kernelPackage.splitKeys)
    invalid("kernel '" + kernelPackage.kernelName +
            "' does not split keys (compile it with --split-keys)");
  if (splits < 0 || splits > kMaxKeySplits)
    invalid("the key split count must be 0 (automatic) or 1 to " +
            std::to_string(kMaxKeySplits) + ", got " + std::to_string(splits));
  fixedKeySplits = splits;
}

size_t AttentionKernel::splitStateBytes(const flashrt::KernelPackage &kernelPackage,
                                        const Sizes &sizes, int64_t splits) {
  size_t rows = static_cast<size_t>(splits) * static_cast<size_t>(sizes.batch) *
                static_cast<size_t>(sizes.heads) * static_cast<size_t>(sizes.queryLen);
  // O (D f32 per row), then LSE, each 256-byte aligned.
  size_t outBytes = (rows * static_cast<size_t>(kernelPackage.headDim) * 4 + 255) / 256 * 256;
  return outBytes + rows * 4;
}

void AttentionKernel::validate(const Sizes &sizes, const TensorRef &q, const TensorRef &k,
                               const TensorRef &v, const TensorRef &o,
                               const std::map<std::string, double> &params,
                               const std::vector<uint64_t> &tensors) const {
  const flashrt::KernelPackage &pkg = kernelPackage;
  checkSizes(pkg, sizes);
  int64_t tiles = pkg.queryTiles(sizes.heads, sizes.kvHeads, sizes.queryLen);
  if (pkg.persistent && tiles * sizes.heads * sizes.batch > INT32_MAX)
    invalid("kernel '" + pkg.kernelName + "' numbers its query tiles in 32 bits: " +
            std::to_string(tiles) + " x H x B is too many");
  checkTensor("q", q);
  checkTensor("k", k);
  checkTensor("v", v);
  // The wgmma kernel stores O 16 bytes at a time.
  checkTensor("o", o);
  checkArguments(pkg, params, tensors);
}

void AttentionKernel::launch(flashrt::Stream &stream, const TensorRef &q, const TensorRef &k,
                             const TensorRef &v, const TensorRef &o, uint64_t lse,
                             const Sizes &sizes, const std::map<std::string, double> &params,
                             const std::vector<uint64_t> &tensors, uint64_t blockSummary) const {
  launchWith(stream, q, k, v, o, lse, sizes, nullptr, nullptr, params, tensors, blockSummary);
}

void AttentionKernel::launchVarlen(flashrt::Stream &stream, const TensorRef &q,
                                   const TensorRef &k, const TensorRef &v, const TensorRef &o,
                                   uint64_t lse, const Sizes &sizes, const VarlenBatch &varlen,
                                   const PagedKV *paged,
                                   const std::map<std::string, double> &params,
                                   const std::vector<uint64_t> &tensors) const {
  launchWith(stream, q, k, v, o, lse, sizes, paged, &varlen, params, tensors, 0);
}

void AttentionKernel::checkVarlenOffsets(const flashrt::KernelPackage &pkg, const Sizes &sizes,
                                         const int32_t *queryOffsets, int64_t queryRows,
                                         const int32_t *keyOffsets, int64_t keyRows) {
  if (!pkg.packsQueries() && !pkg.packsKeys())
    invalid("kernel '" + pkg.kernelName + "' reads no packed varlen batch");
  auto checkSide = [&](const std::string &name, const int32_t *offsets, int64_t rows,
                       int64_t longest, const char *length) {
    if (!offsets)
      invalid("the offsets '" + name + "' are null");
    for (int64_t b = 0; b <= sizes.batch; ++b) {
      std::string entry = name + "[" + std::to_string(b) + "] = " + std::to_string(offsets[b]);
      if (offsets[b] < 0 || offsets[b] > rows)
        invalid(entry + " is outside the packed tensors' rows [0, " + std::to_string(rows) + "]");
      if (b > 0 && offsets[b] < offsets[b - 1])
        invalid(entry + " is below " + name + "[" + std::to_string(b - 1) + "] = " +
                std::to_string(offsets[b - 1]) + " (offsets never decrease)");
      if (b > 0 && offsets[b] - offsets[b - 1] > longest)
        invalid("sequence " + std::to_string(b - 1) + " has " +
                std::to_string(offsets[b] - offsets[b - 1]) + " rows, more than " + length +
                " = " + std::to_string(longest) + " (the longest the launch says)");
    }
  };
  if (pkg.packsQueries())
    checkSide(pkg.varlenQueries, queryOffsets, queryRows, sizes.queryLen, "N");
  if (pkg.packsKeys())
    checkSide(pkg.varlenKeys, keyOffsets, keyRows, sizes.keyLen, "M");
}

void AttentionKernel::launchPaged(flashrt::Stream &stream, const TensorRef &q, const TensorRef &k,
                                  const TensorRef &v, const TensorRef &o, uint64_t lse,
                                  const Sizes &sizes, const PagedKV &paged,
                                  const std::map<std::string, double> &params,
                                  const std::vector<uint64_t> &tensors) const {
  launchWith(stream, q, k, v, o, lse, sizes, &paged, nullptr, params, tensors, 0);
}

void AttentionKernel::checkPagedTable(const flashrt::KernelPackage &pkg, const Sizes &sizes,
                                      const int32_t *blockTable, int64_t tableStride,
                                      const int32_t *keyLengths, int64_t numPages) {
  if (!pkg.pageSize)
    invalid("kernel '" + pkg.kernelName + "' reads dense K and V, not a paged cache");
  for (int64_t b = 0; b < sizes.batch; ++b) {
    int64_t length = keyLengths[b];
    if (length < 0 || length > sizes.keyLen)
      invalid(pkg.pageLengths + "[" + std::to_string(b) + "] = " + std::to_string(length) +
              " is outside [0, M = " + std::to_string(sizes.keyLen) + "]");
    if (length > tableStride * pkg.pageSize)
      invalid(pkg.pageLengths + "[" + std::to_string(b) + "] = " + std::to_string(length) +
              " keys are more than the table's " + std::to_string(tableStride) + " pages hold");
    for (int64_t block = 0; block * pkg.pageSize < length; ++block) {
      int64_t page = blockTable[b * tableStride + block];
      if (page < 0 || page >= numPages)
        invalid(pkg.pageTable + "[" + std::to_string(b) + ", " + std::to_string(block) + "] = " +
                std::to_string(page) + " points outside the cache's " +
                std::to_string(numPages) + " pages");
    }
  }
}

void AttentionKernel::launchWith(flashrt::Stream &stream, const TensorRef &q, const TensorRef &k,
                                 const TensorRef &v, const TensorRef &o, uint64_t lse,
                                 const Sizes &sizes, const PagedKV *paged,
                                 const VarlenBatch *varlen,
                                 const std::map<std::string, double> &params,
                                 const std::vector<uint64_t> &tensors,
                                 uint64_t blockSummary) const {
  validate(sizes, q, k, v, o, params, tensors);
  checkPagedKV(kernelPackage, sizes, paged);
  checkVarlen(kernelPackage, varlen);
  if (kernelPackage.blockSummary && blockSummary == 0) {
    size_t bytes = blockSummaryBytes(sizes);
    if (ownSummary.size() < bytes)
      ownSummary = flashrt::DeviceBuffer(*context, bytes);
    blockSummary = ownSummary.devicePtr();
    computeBlockSummary(stream, sizes, params, tensors, blockSummary);
  } else if (!kernelPackage.blockSummary && blockSummary != 0) {
    invalid("kernel '" + kernelPackage.kernelName + "' reads no block summary");
  }
  flashrt::KernelArgs args = forwardArguments(kernelPackage, q, k, v, o, lse, sizes, params,
                                              tensors, blockSummary, paged, varlen);
  int64_t splits = keySplits(sizes);
  int64_t tiles = kernelPackage.queryTiles(sizes.heads, sizes.kvHeads, sizes.queryLen);
  uint64_t partialOut = 0, partialLse = 0;
  if (kernelPackage.splitKeys) {
    if (tiles * splits > INT32_MAX)
      invalid("kernel '" + kernelPackage.kernelName + "': " + std::to_string(tiles) +
              " query tiles x " + std::to_string(splits) + " key splits do not fit grid x");
    if (splits > 1) {
      size_t bytes = splitStateBytes(sizes, splits);
      partialOut = streamCounters(*splitStates, stream, bytes);
      // LSE after O: the bytes past O are the LSE's, one f32 per row.
      size_t lseBytes = static_cast<size_t>(splits * sizes.batch * sizes.heads * sizes.queryLen) * 4;
      partialLse = partialOut + (bytes - lseBytes);
    }
    args.add(partialOut).add(partialLse).add(static_cast<int32_t>(splits));
  }
  if (kernelPackage.kvTensorMaps) {
    // TMA boxes: one 64-column panel of `boxRows` rows of one (batch, head)
    // of a [batches, rows, heads, D] tensor.
    auto boxMap = [&](const TensorRef &t, int64_t rows, int64_t heads, int64_t batches,
                      int64_t batchStride, int64_t boxRows) {
      flashrt::TiledTensorMapSpec spec;
      spec.elementType = kernelPackage.elementType;
      spec.address = t.devicePtr;
      spec.dims = {static_cast<uint64_t>(kernelPackage.headDim), static_cast<uint64_t>(rows),
                   static_cast<uint64_t>(heads), static_cast<uint64_t>(batches)};
      spec.byteStrides = {static_cast<uint64_t>(t.rowStride) * 2,
                          static_cast<uint64_t>(t.headStride) * 2,
                          static_cast<uint64_t>(batchStride) * 2};
      spec.box = {64, static_cast<uint32_t>(boxRows), 1, 1};
      return flashrt::encodeTiledTensorMap(flashrt::Driver::get(), spec);
    };
    // Packed varlen tensors are one [rows, heads, D] tensor: batch extent 1.
    // A packed batch of no keys at all still needs a valid map (no box is
    // ever issued from it).
    auto tensorMap = [&](const TensorRef &t, int64_t length, int64_t heads, int64_t boxRows,
                         bool packed) {
      int64_t rows = std::max<int64_t>(length, 1);
      return packed ? boxMap(t, rows, heads, 1, rows * t.rowStride, boxRows)
                    : boxMap(t, rows, heads, sizes.batch, t.batchStride, boxRows);
    };
    if (kernelPackage.persistent) {
      bool packedQueries = kernelPackage.packsQueries();
      args.add(tensorMap(q, packedQueries ? varlen->queryRows : sizes.queryLen, sizes.heads,
                         kernelPackage.blockRows, packedQueries));
    }
    bool packedKeys = kernelPackage.packsKeys();
    int64_t keyRows = packedKeys ? varlen->keyRows : sizes.keyLen;
    if (paged) {
      // The caches [pages, page, HKV, D]: a box is a page's rows (or the
      // block's rows of one page) of one head, the page its batch index.
      int64_t boxRows = std::min(kernelPackage.pageSize, kernelPackage.blockCols);
      for (const TensorRef *cache : {&k, &v})
        args.add(boxMap(*cache, kernelPackage.pageSize, sizes.kvHeads, paged->numPages,
                        cache->batchStride, boxRows));
    } else {
      args.add(tensorMap(k, keyRows, sizes.kvHeads, kernelPackage.blockCols, packedKeys))
          .add(tensorMap(v, keyRows, sizes.kvHeads, kernelPackage.blockCols, packedKeys));
    }
  }
  if (kernelPackage.persistent)
    args.add(streamCounters(*tileCounters, stream, 2 * sizeof(uint32_t)));
  flashrt::Dim3 grid(static_cast<unsigned>(tiles * splits),
                     static_cast<unsigned>(kernelPackage.gridHeads(sizes.heads, sizes.kvHeads)),
                     static_cast<unsigned>(sizes.batch));
  if (kernelPackage.persistent)
    grid = flashrt::Dim3(
        static_cast<unsigned>(std::min(tiles * sizes.heads * sizes.batch, residentCtas)));
  kernelFunction.launch(grid,
                        flashrt::Dim3(static_cast<unsigned>(kernelPackage.threadsPerBlock)),
                        static_cast<size_t>(kernelPackage.dynamicSharedBytes), stream, args);
  if (splits > 1) {
    // The combine kernel takes the main kernel's arguments up to S.
    flashrt::KernelArgs combineArgs = forwardArguments(kernelPackage, q, k, v, o, lse, sizes,
                                                       params, tensors, blockSummary, paged, varlen);
    combineArgs.add(partialOut).add(partialLse).add(static_cast<int32_t>(splits));
    const flashrt::PackageEntry &entry = *kernelPackage.entry("combine");
    int64_t rowsPerCta = std::max<int64_t>(entry.threadsPerBlock / 32, 1);
    int64_t rows = sizes.batch * sizes.heads * sizes.queryLen;
    if ((rows + rowsPerCta - 1) / rowsPerCta > INT32_MAX)
      invalid("kernel '" + kernelPackage.kernelName + "': B x H x N is too large to combine");
    combineFunction->launch(
        flashrt::Dim3(static_cast<unsigned>((rows + rowsPerCta - 1) / rowsPerCta)),
        flashrt::Dim3(static_cast<unsigned>(entry.threadsPerBlock)),
        static_cast<size_t>(entry.dynamicSharedBytes), stream, combineArgs);
  }
}

uint64_t AttentionKernel::streamCounters(StreamCounters &counters, const flashrt::Stream &stream,
                                         size_t bytes) const {
  std::lock_guard<std::mutex> guard(counters.lock);
  auto found = counters.byStream.find(stream.handle());
  if (found != counters.byStream.end() && found->second.size() >= bytes)
    return found->second.devicePtr();
  // A launch on the stream may still use the old buffer.
  if (found != counters.byStream.end())
    context->synchronize();
  flashrt::DeviceBuffer buffer(*context, bytes);
  buffer.fill(0);
  // The fill runs on the legacy default stream, which a non-blocking
  // stream does not wait for.
  context->synchronize();
  uint64_t address = buffer.devicePtr();
  counters.byStream.insert_or_assign(stream.handle(), std::move(buffer));
  return address;
}

size_t AttentionKernel::blockSummaryBytes(const flashrt::KernelPackage &pkg,
                                          const Sizes &sizes) {
  if (!pkg.blockSummary)
    return 0;
  auto blocks = [](int64_t length, int64_t block) {
    return static_cast<size_t>((length + block - 1) / block);
  };
  size_t tiles = static_cast<size_t>(pkg.summaryPerBatch ? sizes.batch : 1) *
                 static_cast<size_t>(pkg.summaryPerHead ? sizes.heads : 1) *
                 blocks(sizes.queryLen, pkg.blockRows);
  size_t classes = tiles * blocks(sizes.keyLen, pkg.blockCols);
  // The backward walks its tiles in order: no order after the classes.
  if (pkg.backward)
    return classes;
  return ((classes + 3) & ~size_t{3}) + tiles * sizeof(uint32_t);
}

void AttentionKernel::computeBlockSummary(flashrt::Stream &stream, const Sizes &sizes,
                                          const std::map<std::string, double> &params,
                                          const std::vector<uint64_t> &tensors,
                                          uint64_t summary) const {
  const flashrt::KernelPackage &pkg = kernelPackage;
  checkSummaryRequest(pkg, summaryFunction.has_value(), sizes, params, tensors, summary);
  // The summary kernel reads only the sizes, parameters and aux tensors of
  // the forward ABI.
  TensorRef none;
  flashrt::KernelArgs args =
      forwardArguments(pkg, none, none, none, none, 0, sizes, params, tensors, summary, nullptr);
  const flashrt::PackageEntry &entry = *pkg.entry("summary");
  flashrt::Dim3 grid = summaryGrid(pkg, sizes, summaryResidentCtas);
  size_t entries = static_cast<size_t>(grid.y) * grid.z;
  // The tile order's counters: per (summary row, query tile) a u64 (CTAs
  // done, cost so far), then per tile its cost (u32), then the tiles done.
  args.add(streamCounters(*orderCounters, stream, entries * 12 + 4));
  summaryFunction->launch(grid, flashrt::Dim3(static_cast<unsigned>(entry.threadsPerBlock)),
                          static_cast<size_t>(entry.dynamicSharedBytes), stream, args);
}

AttentionKernel::AttentionKernel(flashrt::Context &context, flashrt::KernelPackage package,
                                 flashrt::KernelPackage backwardPackage)
    : AttentionKernel(context, std::move(package)) {
  const flashrt::KernelPackage &fwd = kernelPackage;
  if (backwardPackage.variantHash.empty() || fwd.elementType != backwardPackage.elementType ||
      fwd.headDim != backwardPackage.headDim || fwd.staticSizes != backwardPackage.staticSizes ||
      fwd.dimClasses != backwardPackage.dimClasses ||
      fwd.tensors.size() != backwardPackage.tensors.size() ||
      fwd.params.size() != backwardPackage.params.size())
    invalid("backward package '" + backwardPackage.kernelName +
            "' does not match the signature of forward kernel '" + fwd.kernelName + "'");
  backwardPass = std::make_shared<BackwardKernel>(context, std::move(backwardPackage));
}

void AttentionKernel::backward(flashrt::Stream &stream, const BackwardTensors &tensors,
                               const Sizes &sizes, const std::map<std::string, double> &params,
                               const std::vector<uint64_t> &auxTensors) const {
  if (!backwardPass)
    invalid("kernel '" + kernelPackage.kernelName +
            "' was loaded without its backward package");
  backwardPass->launch(stream, tensors, sizes, params, auxTensors);
}

//===----------------------------------------------------------------------===//
// BackwardKernel
//===----------------------------------------------------------------------===//

namespace {

size_t roundUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

/// Elements of aux tensor `tensor` at `sizes`.
size_t tensorElements(const flashrt::KernelPackage &pkg, const flashrt::PackageTensor &tensor,
                      const Sizes &sizes) {
  size_t count = 1;
  for (const std::string &extent : tensor.extents) {
    int64_t size = extent == "batch"      ? sizes.batch
                   : extent == "heads"     ? sizes.heads
                   : extent == "kv_heads"  ? sizes.kvHeads
                   : extent == "query_len" ? sizes.queryLen
                   : extent == "key_len"   ? sizes.keyLen
                   : extent == "head_dim"  ? pkg.headDim
                                           : std::stoll(extent);
    count *= static_cast<size_t>(size);
  }
  return count;
}

/// The workspace: Δ, then the dQ accumulator (a block of blockRows x D
/// floats per query tile, rows past N included), then one semaphore per query
/// tile and column slice, then (deterministic packages) per float aux tensor an i64
/// fixed-point accumulator of 1 + elements, then (packages with a block
/// summary) the summary of the backward's tiling; each 256-byte aligned.
struct WorkspaceLayout {
  size_t delta, accum, locks, summary = 0, total;
  std::vector<size_t> fixedPoint; // per aux tensor; 0: none
  WorkspaceLayout(const Sizes &sizes, const flashrt::KernelPackage &pkg) {
    size_t rows = static_cast<size_t>(sizes.batch * sizes.heads * sizes.queryLen);
    size_t tiles = static_cast<size_t>(sizes.batch * sizes.heads *
                                       ((sizes.queryLen + pkg.blockRows - 1) / pkg.blockRows));
    delta = 0;
    accum = roundUp(rows * 4);
    locks = accum + roundUp(tiles * static_cast<size_t>(pkg.blockRows * pkg.headDim) * 4);
    total = locks + roundUp(tiles * static_cast<size_t>(pkg.columnSlices) * 4);
    for (const flashrt::PackageTensor &tensor : pkg.tensors) {
      if (!pkg.deterministic || tensor.elementType == "i32") {
        fixedPoint.push_back(0);
        continue;
      }
      fixedPoint.push_back(total);
      total += roundUp((1 + tensorElements(pkg, tensor, sizes)) * 8);
    }
    if (pkg.blockSummary) {
      summary = total;
      total += roundUp(AttentionKernel::blockSummaryBytes(pkg, sizes));
    }
  }
};

/// The backward ABI (flashc/Target/NVPTX/EmitPTX.h), which the main,
/// preprocess, convert and summary kernels all take; `summary` is the
/// block summary's address (packages with one).
flashrt::KernelArgs backwardArguments(const flashrt::KernelPackage &pkg, const BackwardTensors &t,
                                      const Sizes &sizes,
                                      const std::map<std::string, double> &params,
                                      const std::vector<uint64_t> &auxTensors, uint64_t summary) {
  flashrt::KernelArgs args;
  WorkspaceLayout layout(sizes, pkg);
  // Without a workspace (the summary kernel alone) its parts are null too.
  auto inWorkspace = [&](size_t offset) { return t.workspace ? t.workspace + offset : 0; };
  for (uint64_t pointer :
       {t.q.devicePtr, t.k.devicePtr, t.v.devicePtr, t.out.devicePtr, t.outputGrad.devicePtr,
        t.lse, inWorkspace(layout.delta), inWorkspace(layout.accum), inWorkspace(layout.locks),
        t.queryGrad.devicePtr, t.keyGrad.devicePtr, t.valueGrad.devicePtr})
    args.add(pointer);
  for (const TensorRef *ref : {&t.q, &t.k, &t.v, &t.out, &t.outputGrad, &t.queryGrad,
                               &t.keyGrad, &t.valueGrad})
    args.add(ref->batchStride).add(ref->headStride).add(ref->rowStride);
  for (int64_t size : {sizes.batch, sizes.heads, sizes.kvHeads, sizes.queryLen, sizes.keyLen})
    args.add(static_cast<int32_t>(size));
  addArguments(args, pkg, params, auxTensors);
  // One gradient per aux tensor, then the fixed-point accumulators
  // (deterministic packages) of the wanted ones.
  for (size_t i = 0; i < pkg.tensors.size(); ++i)
    args.add(i < t.tensorGrads.size() ? t.tensorGrads[i] : uint64_t{0});
  for (size_t i = 0; i < pkg.tensors.size(); ++i)
    args.add(i < t.tensorGrads.size() && t.tensorGrads[i] && layout.fixedPoint[i]
                 ? inWorkspace(layout.fixedPoint[i])
                 : uint64_t{0});
  if (pkg.blockSummary)
    args.add(summary);
  return args;
}

} // namespace

size_t BackwardKernel::workspaceBytes(const flashrt::KernelPackage &package,
                                      const Sizes &sizes) {
  return WorkspaceLayout(sizes, package).total;
}

size_t BackwardKernel::blockSummaryOffset(const flashrt::KernelPackage &package,
                                          const Sizes &sizes) {
  if (!package.blockSummary)
    invalid("kernel '" + package.kernelName + "' reads no block summary");
  return WorkspaceLayout(sizes, package).summary;
}

BackwardKernel::BackwardKernel(flashrt::Context &context, flashrt::KernelPackage package)
    : kernelPackage(std::move(package)),
      module(flashrt::Module::fromPtx(context, kernelPackage.ptx)),
      preprocess(module.function(kernelPackage.backward && kernelPackage.entry("preprocess")
                                     ? kernelPackage.entry("preprocess")->name
                                     : kernelPackage.kernelName)),
      main(module.function(kernelPackage.kernelName)),
      convert(module.function(kernelPackage.backward && kernelPackage.entry("convert")
                                  ? kernelPackage.entry("convert")->name
                                  : kernelPackage.kernelName)) {
  if (!kernelPackage.backward)
    invalid("kernel '" + kernelPackage.kernelName + "' is not a backward package");
  if (kernelPackage.dynamicSharedBytes > 48 * 1024)
    main.setMaxDynamicSharedMemory(kernelPackage.dynamicSharedBytes);
  if (const flashrt::PackageEntry *entry = kernelPackage.entry("summary")) {
    summaryFunction.emplace(module.function(entry->name));
    summaryResidentCtas = residentSummaryCtas(context, *summaryFunction, *entry);
  }
}

size_t BackwardKernel::blockSummaryBytes(const Sizes &sizes) const {
  return AttentionKernel::blockSummaryBytes(kernelPackage, sizes);
}

void BackwardKernel::computeBlockSummary(flashrt::Stream &stream, const Sizes &sizes,
                                         const std::map<std::string, double> &params,
                                         const std::vector<uint64_t> &auxTensors,
                                         uint64_t summary) const {
  checkSummaryRequest(kernelPackage, summaryFunction.has_value(), sizes, params, auxTensors,
                      summary);
  launchSummary(stream, BackwardTensors{}, sizes, params, auxTensors, summary);
}

void BackwardKernel::launchSummary(flashrt::Stream &stream, const BackwardTensors &tensors,
                                   const Sizes &sizes, const std::map<std::string, double> &params,
                                   const std::vector<uint64_t> &auxTensors,
                                   uint64_t summary) const {
  // The summary kernel reads only the sizes, parameters and aux tensors of
  // the backward ABI.
  flashrt::KernelArgs args =
      backwardArguments(kernelPackage, tensors, sizes, params, auxTensors, summary);
  const flashrt::PackageEntry &entry = *kernelPackage.entry("summary");
  summaryFunction->launch(summaryGrid(kernelPackage, sizes, summaryResidentCtas),
                          flashrt::Dim3(static_cast<unsigned>(entry.threadsPerBlock)),
                          static_cast<size_t>(entry.dynamicSharedBytes), stream, args);
}

void BackwardKernel::validate(const Sizes &sizes, const BackwardTensors &t,
                              const std::map<std::string, double> &params,
                              const std::vector<uint64_t> &auxTensors) const {
  checkSizes(kernelPackage, sizes);
  for (auto [name, tensor] :
       {std::pair("q", &t.q), std::pair("k", &t.k), std::pair("v", &t.v), std::pair("o", &t.out),
        std::pair("dO", &t.outputGrad), std::pair("dQ", &t.queryGrad),
        std::pair("dK", &t.keyGrad), std::pair("dV", &t.valueGrad)})
    checkTensor(name, *tensor);
  if (t.lse == 0 || t.lse % 4)
    invalid("lse must be a 4-byte aligned f32 [B, H, N] array");
  if (t.workspace == 0 || t.workspace % 16)
    invalid("the workspace must be 16-byte aligned, BackwardKernel::workspaceBytes bytes");
  checkArguments(kernelPackage, params, auxTensors);
  if (t.tensorGrads.size() != kernelPackage.tensors.size())
    invalid("kernel '" + kernelPackage.kernelName + "' takes one gradient per aux tensor (" +
            std::to_string(kernelPackage.tensors.size()) + "), got " +
            std::to_string(t.tensorGrads.size()));
  for (size_t i = 0; i < t.tensorGrads.size(); ++i)
    if (t.tensorGrads[i] % 4)
      invalid("the gradient of aux tensor '" + kernelPackage.tensors[i].name +
              "' must be 4-byte aligned");
  if (!kernelPackage.blockSummary && t.blockSummary != 0)
    invalid("kernel '" + kernelPackage.kernelName + "' reads no block summary");
}

void BackwardKernel::launch(flashrt::Stream &stream, const BackwardTensors &t, const Sizes &sizes,
                            const std::map<std::string, double> &params,
                            const std::vector<uint64_t> &auxTensors) const {
  validate(sizes, t, params, auxTensors);
  const flashrt::KernelPackage &pkg = kernelPackage;
  // The summary of the backward's own tiling, which the main kernel's
  // query loops walk: the caller's, else computed into the workspace.
  uint64_t blockSummary = t.blockSummary;
  if (pkg.blockSummary && blockSummary == 0) {
    blockSummary = t.workspace + WorkspaceLayout(sizes, pkg).summary;
    launchSummary(stream, t, sizes, params, auxTensors, blockSummary);
  }
  flashrt::KernelArgs args = backwardArguments(pkg, t, sizes, params, auxTensors, blockSummary);

  auto rows = static_cast<unsigned>((sizes.queryLen + pkg.blockRows - 1) / pkg.blockRows);
  auto keys = static_cast<unsigned>((sizes.keyLen + pkg.blockCols - 1) / pkg.blockCols *
                                    pkg.columnSlices);
  flashrt::Dim3 rowGrid(rows, static_cast<unsigned>(sizes.heads),
                        static_cast<unsigned>(sizes.batch));
  flashrt::Dim3 keyGrid(keys, static_cast<unsigned>(sizes.kvHeads),
                        static_cast<unsigned>(sizes.batch));
  const flashrt::PackageEntry &pre = *pkg.entry("preprocess"), &post = *pkg.entry("convert");
  preprocess.launch(rowGrid, flashrt::Dim3(static_cast<unsigned>(pre.threadsPerBlock)),
                    static_cast<size_t>(pre.dynamicSharedBytes), stream, args);
  main.launch(keyGrid, flashrt::Dim3(static_cast<unsigned>(pkg.threadsPerBlock)),
              static_cast<size_t>(pkg.dynamicSharedBytes), stream, args);
  convert.launch(rowGrid, flashrt::Dim3(static_cast<unsigned>(post.threadsPerBlock)),
                 static_cast<size_t>(post.dynamicSharedBytes), stream, args);
}

} // namespace flashrun
