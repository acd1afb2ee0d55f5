//===- GpuHarness.cpp - Run a flash kernel on the GPU and check it --------===//

#include "flashc/Harness/GpuHarness.h"

#include "flashrt/Timing.h"

#include <cstring>

using namespace mlir;
using namespace flashc;
using namespace flashc::harness;

namespace {

/// Host element bits of one float already rounded to `type`.
uint16_t toHalfBits(float value, Type type) {
  if (type.isBF16()) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    return static_cast<uint16_t>(bits >> 16);
  }
  _Float16 half = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &half, 2);
  return bits;
}

float fromHalfBits(uint16_t bits, Type type) {
  if (type.isBF16()) {
    uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return value;
  }
  _Float16 half;
  std::memcpy(&half, &bits, 2);
  return static_cast<float>(half);
}

flashrun::TensorRef tensorRef(Layout layout, uint64_t ptr, int64_t heads, int64_t length,
                              int64_t dim) {
  return layout == Layout::BSHD ? flashrun::TensorRef::bshd(ptr, heads, length, dim)
                                : flashrun::TensorRef::bhsd(ptr, heads, length, dim);
}

/// Calls `copy(hostOffset, deviceOffset)` for every row of a [B, heads,
/// length, D] tensor: host data is BHSD, device data is in `layout`.
template <typename CopyRow>
void forEachRow(Layout layout, int64_t batch, int64_t heads, int64_t length, int64_t dim,
                CopyRow copy) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < length; ++s) {
        int64_t host = ((b * heads + h) * length + s) * dim;
        copy(host, layout == Layout::BSHD ? ((b * length + s) * heads + h) * dim : host);
      }
}

} // namespace

flashrun::Sizes DeviceProblem::sizes() const {
  const interp::ProblemShape &s = inputs.shape;
  return {s.batch(), s.heads(), s.kvHeads(), s.queryLen(), s.keyLen()};
}

DeviceProblem harness::upload(flashrt::Context &context, flash::KernelOp kernel,
                              const interp::ProblemShape &shape,
                              const llvm::StringMap<double> &params, uint64_t seed,
                              Layout layout) {
  DeviceProblem problem;
  problem.layout = layout;
  problem.inputs = interp::makeRandomInputs(kernel, shape, seed);
  for (const auto &entry : params) {
    problem.inputs.params[entry.getKey()] = entry.getValue();
    problem.params[entry.getKey().str()] = entry.getValue();
  }
  Type element = kernel.getElementType();
  int64_t D = shape.headDim();
  auto put = [&](const std::vector<float> &data, int64_t heads, int64_t length) {
    std::vector<uint16_t> bits(data.size());
    forEachRow(layout, shape.batch(), heads, length, D, [&](int64_t host, int64_t device) {
      for (int64_t d = 0; d < D; ++d)
        bits[device + d] = toHalfBits(data[host + d], element);
    });
    flashrt::DeviceBuffer buffer(context, bits.size() * 2);
    buffer.copyFromHost(bits.data(), bits.size() * 2);
    return buffer;
  };
  problem.q.emplace(put(problem.inputs.q, shape.heads(), shape.queryLen()));
  problem.k.emplace(put(problem.inputs.k, shape.kvHeads(), shape.keyLen()));
  problem.v.emplace(put(problem.inputs.v, shape.kvHeads(), shape.keyLen()));
  problem.o.emplace(context, problem.inputs.q.size() * 2);
  problem.lse.emplace(context, shape.batch() * shape.heads() * shape.queryLen() * 4);
  for (Attribute attr : kernel.getTensors()) {
    auto decl = cast<flash::AuxTensorAttr>(attr);
    const interp::HostTensor &host = problem.inputs.tensors[decl.getName().getValue()];
    Type type = decl.getElementType();
    size_t bytesPer = type.isSignlessInteger(32) || type.isF32() ? 4 : 2;
    std::vector<uint8_t> bytes(host.data.size() * bytesPer);
    for (size_t i = 0; i < host.data.size(); ++i) {
      if (type.isSignlessInteger(32)) {
        int32_t value = static_cast<int32_t>(host.data[i]);
        std::memcpy(&bytes[i * 4], &value, 4);
      } else if (type.isF32()) {
        float value = static_cast<float>(host.data[i]);
        std::memcpy(&bytes[i * 4], &value, 4);
      } else {
        uint16_t value = toHalfBits(static_cast<float>(host.data[i]), type);
        std::memcpy(&bytes[i * 2], &value, 2);
      }
    }
    flashrt::DeviceBuffer buffer(context, std::max<size_t>(bytes.size(), 4));
    buffer.copyFromHost(bytes.data(), bytes.size());
    problem.aux.push_back(std::move(buffer));
  }
  return problem;
}

void harness::launch(const flashrun::AttentionKernel &kernel, flashrt::Stream &stream,
                     const DeviceProblem &p) {
  const interp::ProblemShape &s = p.inputs.shape;
  std::vector<uint64_t> aux;
  for (const flashrt::DeviceBuffer &buffer : p.aux)
    aux.push_back(buffer.devicePtr());
  kernel.launch(stream,
                tensorRef(p.layout, p.q->devicePtr(), s.heads(), s.queryLen(), s.headDim()),
                tensorRef(p.layout, p.k->devicePtr(), s.kvHeads(), s.keyLen(), s.headDim()),
                tensorRef(p.layout, p.v->devicePtr(), s.kvHeads(), s.keyLen(), s.headDim()),
                tensorRef(p.layout, p.o->devicePtr(), s.heads(), s.queryLen(), s.headDim()),
                p.lse->devicePtr(), p.sizes(), p.params, aux);
}

std::optional<Validation> harness::validate(const flashrun::AttentionKernel &kernel,
                                            flashrt::Stream &stream, DeviceProblem &problem,
                                            flash::KernelOp flashKernel, std::string &error) {
  problem.o->fill(0xFF); // NaN in bf16 and f16
  problem.lse->fill(0xFF);
  launch(kernel, stream, problem);
  stream.synchronize();
  const interp::ProblemShape &s = problem.inputs.shape;
  std::vector<uint16_t> oBits(problem.inputs.q.size());
  problem.o->copyToHost(oBits.data(), oBits.size() * 2);
  std::vector<float> lse(s.batch() * s.heads() * s.queryLen());
  problem.lse->copyToHost(lse.data(), lse.size() * 4);
  Type element = flashKernel.getElementType();
  std::vector<float> out(oBits.size());
  forEachRow(problem.layout, s.batch(), s.heads(), s.queryLen(), s.headDim(),
             [&](int64_t host, int64_t device) {
               for (int64_t d = 0; d < s.headDim(); ++d)
                 out[host + d] = fromHalfBits(oBits[device + d], element);
             });

  interp::AttentionOutputs expected;
  if (failed(interp::runKernel(flashKernel, problem.inputs, expected, error)))
    return std::nullopt;
  std::vector<double> expectedOut(expected.out.begin(), expected.out.end());
  std::vector<double> expectedLse(expected.lse.begin(), expected.lse.end());
  Validation v;
  v.out = interp::compare(out, expectedOut);
  v.lse = interp::compare(lse, expectedLse);
  // P is rounded to the element type for the P·V GEMM on the GPU and kept in
  // f32 by the interpreter; O is rounded to the element type by both.
  v.outBound = element.isBF16() ? 1e-2 : 2e-3;
  v.lseBound = 1e-4;
  return v;
}

interp::ProblemShape harness::checkShapeFor(const interp::ProblemShape &shape,
                                            flash::KernelOp kernel) {
  interp::ProblemShape check = shape;
  int64_t work = shape.batch() * shape.heads() * shape.queryLen() * shape.keyLen() *
                 shape.headDim();
  if (work <= (int64_t(1) << 31))
    return check;
  check[flash::DimRole::Batch] = 1;
  int64_t group = shape.heads() / shape.kvHeads();
  check[flash::DimRole::Heads] = group * std::min<int64_t>(shape.kvHeads(), 2);
  check[flash::DimRole::KVHeads] = std::min<int64_t>(shape.kvHeads(), 2);
  check[flash::DimRole::QueryLen] = std::min<int64_t>(shape.queryLen(), 1031);
  check[flash::DimRole::KeyLen] = kernel.getDimClasses()[4] == 3
                                      ? check.queryLen()
                                      : std::min<int64_t>(shape.keyLen(), 1031);
  return check;
}

double harness::timeKernel(const flashrun::AttentionKernel &kernel, flashrt::Stream &stream,
                           const DeviceProblem &problem, int warmup, int iterations) {
  std::vector<float> times = flashrt::timeLaunches(stream, warmup, iterations,
                                                   [&] { launch(kernel, stream, problem); });
  return flashrt::median(times);
}

double harness::tflops(const interp::ProblemShape &shape, double ms, bool causal) {
  double flops = 4.0 * shape.batch() * shape.heads() * shape.queryLen() * shape.keyLen() *
                 shape.headDim() * (causal ? 0.5 : 1.0);
  return flops / (ms * 1e-3) / 1e12;
}
