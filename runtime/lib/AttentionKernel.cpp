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

} // namespace

AttentionKernel::AttentionKernel(flashrt::Context &context, flashrt::KernelPackage package)
    : kernelPackage(std::move(package)),
      module(flashrt::Module::fromPtx(context, kernelPackage.ptx)),
      kernelFunction(module.function(kernelPackage.kernelName)) {
  if (kernelPackage.dynamicSharedBytes > 48 * 1024)
    kernelFunction.setMaxDynamicSharedMemory(kernelPackage.dynamicSharedBytes);
  if (kernelPackage.persistent) {
    int perSM = kernelFunction.maxActiveBlocksPerMultiprocessor(
        static_cast<int>(kernelPackage.threadsPerBlock),
        static_cast<size_t>(kernelPackage.dynamicSharedBytes));
    if (perSM < 1)
      throw Error(ErrorKind::LaunchError, "kernel '" + kernelPackage.kernelName +
                                              "' does not fit on one multiprocessor of " +
                                              context.device().name());
    residentCtas = static_cast<int64_t>(perSM) * context.device().multiprocessorCount();
  }
}

void AttentionKernel::validate(const Sizes &sizes, const TensorRef &q, const TensorRef &k,
                               const TensorRef &v, const TensorRef &o,
                               const std::map<std::string, double> &params,
                               const std::vector<uint64_t> &tensors) const {
  const flashrt::KernelPackage &pkg = kernelPackage;
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
  int64_t tiles = (sizes.queryLen + pkg.blockRows - 1) / pkg.blockRows;
  if (pkg.persistent && tiles * sizes.heads * sizes.batch > INT32_MAX)
    invalid("kernel '" + pkg.kernelName + "' numbers its query tiles in 32 bits: " +
            std::to_string(tiles) + " x H x B is too many");
  // cp.async copies 16 bytes: 8 bf16/f16 elements.
  auto checkInput = [](const char *name, const TensorRef &t) {
    if (t.devicePtr % 16 != 0)
      invalid(std::string(name) + " must be 16-byte aligned");
    if (t.batchStride % 8 || t.headStride % 8 || t.rowStride % 8)
      invalid(std::string(name) + " strides must be multiples of 8 elements");
    // TMA tensor maps take byte strides below 2^40.
    for (int64_t stride : {t.batchStride, t.headStride, t.rowStride})
      if (stride < 0 || stride >= (int64_t(1) << 39))
        invalid(std::string(name) + " strides must be in [0, 2^39) elements, got " +
                std::to_string(stride));
  };
  checkInput("q", q);
  checkInput("k", k);
  checkInput("v", v);
  // The wgmma kernel stores O 16 bytes at a time.
  checkInput("o", o);
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

void AttentionKernel::launch(flashrt::Stream &stream, const TensorRef &q, const TensorRef &k,
                             const TensorRef &v, const TensorRef &o, uint64_t lse,
                             const Sizes &sizes, const std::map<std::string, double> &params,
                             const std::vector<uint64_t> &tensors) const {
  validate(sizes, q, k, v, o, params, tensors);
  flashrt::KernelArgs args;
  args.add(q.devicePtr).add(k.devicePtr).add(v.devicePtr).add(o.devicePtr).add(lse);
  for (const TensorRef *t : {&q, &k, &v, &o})
    args.add(t->batchStride).add(t->headStride).add(t->rowStride);
  for (int64_t size : {sizes.batch, sizes.heads, sizes.kvHeads, sizes.queryLen, sizes.keyLen})
    args.add(static_cast<int32_t>(size));
  for (const flashrt::PackageParam &param : kernelPackage.params) {
    auto it = params.find(param.name);
    double value = it != params.end() ? it->second : param.defaultValue;
    if (param.type == "i32")
      args.add(static_cast<int32_t>(value));
    else
      args.add(static_cast<float>(value));
  }
  for (uint64_t tensor : tensors)
    args.add(tensor);
  if (kernelPackage.kvTensorMaps) {
    // TMA boxes: one 64-column panel of `rows` rows of one (batch, head).
    auto tensorMap = [&](const TensorRef &t, int64_t length, int64_t heads, int64_t rows) {
      flashrt::TiledTensorMapSpec spec;
      spec.elementType = kernelPackage.elementType;
      spec.address = t.devicePtr;
      spec.dims = {static_cast<uint64_t>(kernelPackage.headDim), static_cast<uint64_t>(length),
                   static_cast<uint64_t>(heads), static_cast<uint64_t>(sizes.batch)};
      spec.byteStrides = {static_cast<uint64_t>(t.rowStride) * 2,
                          static_cast<uint64_t>(t.headStride) * 2,
                          static_cast<uint64_t>(t.batchStride) * 2};
      spec.box = {64, static_cast<uint32_t>(rows), 1, 1};
      return flashrt::encodeTiledTensorMap(flashrt::Driver::get(), spec);
    };
    if (kernelPackage.persistent)
      args.add(tensorMap(q, sizes.queryLen, sizes.heads, kernelPackage.blockRows));
    args.add(tensorMap(k, sizes.keyLen, sizes.kvHeads, kernelPackage.blockCols))
        .add(tensorMap(v, sizes.keyLen, sizes.kvHeads, kernelPackage.blockCols));
  }
  int64_t tiles = (sizes.queryLen + kernelPackage.blockRows - 1) / kernelPackage.blockRows;
  flashrt::Dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(sizes.heads),
                     static_cast<unsigned>(sizes.batch));
  if (kernelPackage.persistent)
    grid = flashrt::Dim3(
        static_cast<unsigned>(std::min(tiles * sizes.heads * sizes.batch, residentCtas)));
  kernelFunction.launch(grid,
                        flashrt::Dim3(static_cast<unsigned>(kernelPackage.threadsPerBlock)),
                        static_cast<size_t>(kernelPackage.dynamicSharedBytes), stream, args);
}

} // namespace flashrun
