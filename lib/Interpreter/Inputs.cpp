//===- Inputs.cpp - Seeded random inputs for a kernel ---------------------===//

#include "flashc/Interpreter/Inputs.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <numeric>
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

} // namespace

AttentionInputs interp::makeRandomInputs(flash::KernelSignature kernel, const ProblemShape &shape,
                                         uint64_t seed, int64_t documents) {
  std::mt19937_64 rng(seed);
  AttentionInputs inputs;
  inputs.shape = shape;
  Type element = kernel.getElementType();
  int64_t qCount = shape.batch() * shape.heads() * shape.queryLen() * shape.headDim();
  int64_t kvCount = shape.batch() * shape.kvHeads() * shape.keyLen() * shape.headDim();
  inputs.q = randomNormal(qCount, element, rng);
  inputs.k = randomNormal(kvCount, element, rng);
  inputs.v = randomNormal(kvCount, element, rng);
  for (Attribute attr : kernel.getTensors()) {
    auto decl = cast<flash::AuxTensorAttr>(attr);
    inputs.tensors[decl.getName().getValue()] = randomAuxTensor(decl, shape, documents, rng);
  }
  return inputs;
}

AttentionInputs interp::makeRandomAuxInputs(flash::KernelSignature kernel,
                                            const ProblemShape &shape, uint64_t seed,
                                            int64_t documents) {
  std::mt19937_64 rng(seed ^ 0xbb67ae8584caa73bull);
  AttentionInputs inputs;
  inputs.shape = shape;
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
