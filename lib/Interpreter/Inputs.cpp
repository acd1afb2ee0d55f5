//===- Inputs.cpp - Seeded random inputs for a kernel ---------------------===//

#include "flashc/Interpreter/Inputs.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

using namespace mlir;
using namespace flashc;
using namespace flashc::interp;

namespace {

std::vector<float> randomNormal(int64_t count, Type elementType, std::mt19937_64 &rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> data(count);
  for (float &value : data)
    value = roundToElementType(normal(rng), elementType);
  return data;
}

HostTensor randomAuxTensor(flash::AuxTensorAttr decl, const ProblemShape &shape,
                           int64_t documents,
                           std::mt19937_64 &rng) {
  HostTensor tensor;
  for (int64_t extent : decl.getExtents())
    tensor.shape.push_back(flash::AuxTensorAttr::isRole(extent)
                               ? shape[flash::AuxTensorAttr::decodeRole(extent)]
                               : extent);
  tensor.data.assign(tensor.numElements(), 0.0);
  Type type = decl.getElementType();
  if (!type.isSignlessInteger(32)) {
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (double &value : tensor.data)
      value = roundToElementType(uniform(rng), type);
    return tensor;
  }
  int64_t last = decl.getExtents().back();
  bool overSequence = flash::AuxTensorAttr::isRole(last) &&
                      (flash::AuxTensorAttr::decodeRole(last) == flash::DimRole::QueryLen ||
                       flash::AuxTensorAttr::decodeRole(last) == flash::DimRole::KeyLen);
  if (!overSequence) {
    std::uniform_int_distribution<int64_t> length(1, shape.keyLen());
    for (double &value : tensor.data)
      value = static_cast<double>(length(rng));
    return tensor;
  }
  // Each row along the sequence: up to 3 random cut points make 1-4 docs
  // (or `documents` - 1 distinct ones).
  int64_t length = tensor.shape.back();
  std::uniform_int_distribution<int64_t> cut(1, std::max<int64_t>(1, length - 1));
  for (int64_t start = 0; start < tensor.numElements(); start += length) {
    std::vector<int64_t> cuts;
    if (documents > 0) {
      std::vector<int64_t> points(static_cast<size_t>(std::max<int64_t>(0, length - 1)));
      std::iota(points.begin(), points.end(), 1);
      std::shuffle(points.begin(), points.end(), rng);
      points.resize(std::min<size_t>(points.size(), static_cast<size_t>(documents - 1)));
      cuts = std::move(points);
    } else {
      cuts = {cut(rng), cut(rng), cut(rng)};
    }
    std::sort(cuts.begin(), cuts.end());
    for (int64_t pos = 0; pos < length; ++pos)
      tensor.data[start + pos] = static_cast<double>(
          std::upper_bound(cuts.begin(), cuts.end(), pos) - cuts.begin());
  }
  return tensor;
}

/// The table and page counts of a cache of `pageSize`-key pages at
/// `shape`: entries to cover M, a page per entry and two spare.
PagedCache pagedGeometry(int64_t pageSize, const ProblemShape &shape) {
  PagedCache paged;
  paged.pageSize = pageSize;
  paged.tableStride = (shape.keyLen() + pageSize - 1) / pageSize;
  paged.numPages = shape.batch() * paged.tableStride + 2;
  return paged;
}

/// Page indices 0 .. pages - 1, shuffled by `rng` when asked.
std::vector<int32_t> pagePool(int64_t pages, bool shuffle, std::mt19937_64 &rng) {
  std::vector<int32_t> pool(static_cast<size_t>(pages));
  std::iota(pool.begin(), pool.end(), 0);
  if (shuffle)
    std::shuffle(pool.begin(), pool.end(), rng);
  return pool;
}

/// Sequence b's length in a ragged batch whose longest is `full`: the full
/// length, one, none, then random in [0, full] (all full where asked).
int64_t raggedLength(int64_t b, int64_t full, PagedInputs options, std::mt19937_64 &rng) {
  if (options.fullLengths || b == 0)
    return full;
  if (b == 1 || b == 2)
    return b == 1 ? 1 : 0;
  return std::uniform_int_distribution<int64_t>(0, full)(rng);
}

/// Varlen offsets of `shape.batch()` ragged sequences at most `full` long,
/// from row 5 (row 0 with full lengths), so a kernel that ignores
/// offsets[0] shows.
std::vector<int32_t> randomOffsets(const ProblemShape &shape, int64_t full, PagedInputs options,
                                   std::mt19937_64 &rng) {
  std::vector<int32_t> offsets = {options.fullLengths ? 0 : 5};
  for (int64_t b = 0; b < shape.batch(); ++b)
    offsets.push_back(offsets.back() + static_cast<int32_t>(raggedLength(b, full, options, rng)));
  return offsets;
}

/// The varlen offsets makeRandomInputs and makeRandomAuxInputs draw for
/// `kernel` (none without a #flash.varlen), from a stream of their own;
/// queries and keys packed by one offsets tensor get one.
VarlenBatch seededVarlenBatch(flash::KernelSignature kernel, const ProblemShape &shape,
                              uint64_t seed, PagedInputs options) {
  auto kernelOp = dyn_cast<flash::KernelOp>(kernel.getOperation());
  VarlenBatch batch;
  if (!kernelOp || !kernelOp.getVarlenAttr())
    return batch;
  flash::VarlenAttr varlen = kernelOp.getVarlenAttr();
  std::mt19937_64 rng(seed ^ 0x9b05688c2b3e6c1full);
  if (!varlen.getQueries().getValue().empty())
    batch.queryOffsets = randomOffsets(shape, shape.queryLen(), options, rng);
  if (varlen.getKeys() == varlen.getQueries())
    batch.keyOffsets = batch.queryOffsets;
  else if (!varlen.getKeys().getValue().empty())
    batch.keyOffsets = randomOffsets(shape, shape.keyLen(), options, rng);
  return batch;
}

/// A paged cache for `kernel` (which has a paged_kv) at `shape`: every
/// sequence's pages drawn from a shuffled pool with two spare pages, and
/// the table entries past a sequence's length set to pages outside the
/// cache, so a kernel that reads one fails (never a silent stale page).
PagedCache randomPagedCache(flash::KernelOp kernel, const ProblemShape &shape,
                            PagedInputs options, std::mt19937_64 &rng) {
  PagedCache paged = pagedGeometry(kernel.getPagedKvAttr().getPage(), shape);
  for (int64_t b = 0; b < shape.batch(); ++b)
    paged.lengths.push_back(static_cast<int32_t>(raggedLength(b, shape.keyLen(), options, rng)));
  std::vector<int32_t> pool = pagePool(paged.numPages, !options.inOrder, rng);
  size_t next = 0;
  for (int64_t b = 0; b < shape.batch(); ++b)
    for (int64_t block = 0; block < paged.tableStride; ++block) {
      bool used = block * paged.pageSize < paged.lengths[b];
      paged.table.push_back(used ? pool[next++]
                                 : static_cast<int32_t>(block % 2 ? -1 : paged.numPages + 7));
    }
  return paged;
}

/// The paged cache makeRandomInputs and makeRandomAuxInputs draw for
/// `kernel` (none without a paged_kv): from a stream of its own, so both
/// give the same cache for the same seed.
std::optional<PagedCache> seededPagedCache(flash::KernelSignature kernel,
                                           const ProblemShape &shape, uint64_t seed,
                                           PagedInputs options) {
  auto kernelOp = dyn_cast<flash::KernelOp>(kernel.getOperation());
  if (!kernelOp || !kernelOp.getPagedKvAttr())
    return std::nullopt;
  std::mt19937_64 rng(seed ^ 0x3c6ef372fe94f82bull);
  return randomPagedCache(kernelOp, shape, options, rng);
}

} // namespace

AttentionInputs interp::makeRandomInputs(flash::KernelSignature kernel, const ProblemShape &shape,
                                         uint64_t seed, int64_t documents, PagedInputs paged) {
  std::mt19937_64 rng(seed);
  AttentionInputs inputs;
  inputs.shape = shape;
  Type element = kernel.getElementType();
  int64_t qCount = shape.batch() * shape.heads() * shape.queryLen() * shape.headDim();
  int64_t kvCount = shape.batch() * shape.kvHeads() * shape.keyLen() * shape.headDim();
  if (std::optional<PagedCache> cache = seededPagedCache(kernel, shape, seed, paged)) {
    inputs.paged = std::move(*cache);
    kvCount = inputs.paged.numPages * inputs.paged.pageSize * shape.kvHeads() * shape.headDim();
  }
  inputs.varlen = seededVarlenBatch(kernel, shape, seed, paged);
  inputs.q = randomNormal(qCount, element, rng);
  inputs.k = randomNormal(kvCount, element, rng);
  inputs.v = randomNormal(kvCount, element, rng);
  for (Attribute attr : kernel.getTensors()) {
    auto decl = cast<flash::AuxTensorAttr>(attr);
    inputs.tensors[decl.getName().getValue()] = randomAuxTensor(decl, shape, documents, rng);
  }
  return inputs;
}

AttentionInputs interp::pageKeysAndValues(const AttentionInputs &dense, int64_t pageSize,
                                          uint64_t seed) {
  const ProblemShape &s = dense.shape;
  AttentionInputs paged = dense;
  PagedCache &cache = paged.paged;
  cache = pagedGeometry(pageSize, s);
  cache.lengths.assign(s.batch(), static_cast<int32_t>(s.keyLen()));
  std::mt19937_64 rng(seed ^ 0x510e527fade682d1ull);
  std::vector<int32_t> pool = pagePool(cache.numPages, /*shuffle=*/true, rng);
  cache.table.assign(pool.begin(), pool.begin() + s.batch() * cache.tableStride);
  int64_t rowElems = s.kvHeads() * s.headDim();
  for (std::vector<float> *data : {&paged.k, &paged.v}) {
    const std::vector<float> &source = data == &paged.k ? dense.k : dense.v;
    // Spare pages and the rows past M hold NaN: reading one shows.
    data->assign(cache.numPages * pageSize * rowElems, std::numeric_limits<float>::quiet_NaN());
    for (int64_t b = 0; b < s.batch(); ++b)
      for (int64_t j = 0; j < s.keyLen(); ++j) {
        int64_t row = cache.table[b * cache.tableStride + j / pageSize] * pageSize + j % pageSize;
        for (int64_t h = 0; h < s.kvHeads(); ++h)
          std::copy_n(&source[((b * s.kvHeads() + h) * s.keyLen() + j) * s.headDim()],
                      s.headDim(), &(*data)[(row * s.kvHeads() + h) * s.headDim()]);
      }
  }
  return paged;
}

AttentionInputs interp::makeRandomAuxInputs(flash::KernelSignature kernel,
                                            const ProblemShape &shape, uint64_t seed,
                                            int64_t documents, PagedInputs paged) {
  std::mt19937_64 rng(seed ^ 0xbb67ae8584caa73bull);
  AttentionInputs inputs;
  inputs.shape = shape;
  if (std::optional<PagedCache> cache = seededPagedCache(kernel, shape, seed, paged))
    inputs.paged = std::move(*cache);
  inputs.varlen = seededVarlenBatch(kernel, shape, seed, paged);
  for (Attribute attr : kernel.getTensors()) {
    auto decl = cast<flash::AuxTensorAttr>(attr);
    inputs.tensors[decl.getName().getValue()] = randomAuxTensor(decl, shape, documents, rng);
  }
  return inputs;
}

std::vector<float> interp::makeRandomOutputGrad(flash::KernelSignature kernel,
                                                const ProblemShape &shape, uint64_t seed) {
  // A stream of its own, so dO does not depend on how many aux elements
  // the forward inputs drew.
  std::mt19937_64 rng(seed ^ 0x6a09e667f3bcc909ull);
  return randomNormal(shape.batch() * shape.heads() * shape.queryLen() * shape.headDim(),
                      kernel.getElementType(), rng);
}

const llvm::StringRef interp::kShapeKeys[flash::kNumDimRoles] = {"B", "H", "HKV", "N", "M", "D"};

ProblemShape interp::resolveShape(flash::KernelSignature kernel, const llvm::StringMap<int64_t> &given,
                                  const ProblemShape *base) {
  auto isGiven = [&](flash::DimRole role) {
    return given.count(kShapeKeys[static_cast<int>(role)]) != 0;
  };
  ProblemShape shape;
  if (base) {
    shape = *base;
  } else {
    shape[flash::DimRole::Batch] = 1;
    shape[flash::DimRole::Heads] = 2;
    shape[flash::DimRole::QueryLen] = 256;
  }
  ArrayRef<int64_t> fixed = kernel.getStaticSizes();
  for (int role = 0; role < flash::kNumDimRoles; ++role) {
    auto it = given.find(kShapeKeys[role]);
    if (it != given.end())
      shape.sizes[role] = it->second;
    else if (fixed[role] != -1)
      shape.sizes[role] = fixed[role];
  }
  if (!isGiven(flash::DimRole::KVHeads)) {
    if (!base) {
      shape[flash::DimRole::KVHeads] = shape.heads();
    } else if (isGiven(flash::DimRole::Heads)) {
      int64_t group = base->heads() / base->kvHeads();
      shape[flash::DimRole::KVHeads] =
          shape.heads() % group == 0 ? shape.heads() / group : shape.heads();
    }
  }
  if (!isGiven(flash::DimRole::KeyLen) && !base)
    shape[flash::DimRole::KeyLen] = shape.queryLen();
  ArrayRef<int64_t> classes = kernel.getDimClasses();
  for (int role = 0; role < flash::kNumDimRoles; ++role)
    if (!given.count(kShapeKeys[role]) && classes[role] != role)
      shape.sizes[role] = shape.sizes[classes[role]];
  shape[flash::DimRole::HeadDim] = kernel.getConfig().getHeadDim();
  return shape;
}

llvm::Expected<llvm::StringMap<int64_t>>
interp::parseSizes(llvm::StringRef spec, llvm::StringRef option,
                   llvm::ArrayRef<llvm::StringRef> allowed) {
  llvm::StringMap<int64_t> sizes;
  llvm::SmallVector<llvm::StringRef> items;
  spec.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    key = key.trim();
    int64_t number;
    if (value.trim().getAsInteger(10, number) || number < 1)
      return llvm::createStringError("--" + option + ": '" + item +
                                     "' is not KEY=POSITIVE_INTEGER");
    if (!llvm::is_contained(allowed, key))
      return llvm::createStringError("--" + option + ": unknown key '" + key +
                                     "' (expected one of " + llvm::join(allowed, ", ") + ")");
    sizes[key] = number;
  }
  return sizes;
}
