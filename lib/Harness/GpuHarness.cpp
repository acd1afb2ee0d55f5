//===- GpuHarness.cpp - Run a flash kernel on the GPU and check it --------===//

#include "flashc/Harness/GpuHarness.h"

#include "flashc/Interpreter/BackwardCheck.h"

#include "flashrt/Timing.h"

#include "llvm/ADT/StringSet.h"

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
/// length, D] tensor: host data is BHSD, device data is in `layout`, or with
/// varlen `offsets` (non-null) packed token-major, sequence b's rows from
/// offsets[b] and none past its length.
template <typename CopyRow>
void forEachRow(Layout layout, int64_t batch, int64_t heads, int64_t length, int64_t dim,
                CopyRow copy, const std::vector<int32_t> *offsets = nullptr) {
  for (int64_t b = 0; b < batch; ++b) {
    int64_t rows = offsets ? std::clamp<int64_t>(int64_t((*offsets)[b + 1]) - (*offsets)[b], 0,
                                                 length)
                           : length;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < rows; ++s) {
        int64_t host = ((b * heads + h) * length + s) * dim;
        if (offsets)
          copy(host, (((*offsets)[b] + s) * heads + h) * dim);
        else
          copy(host, layout == Layout::BSHD ? ((b * length + s) * heads + h) * dim : host);
      }
  }
}

/// Rows of a packed varlen tensor: its sequences' and kSpareRows more, so
/// a kernel reading or writing past the last sequence meets NaN or leaves a
/// trace.
constexpr int64_t kSpareRows = 3;
int64_t packedRows(const std::vector<int32_t> &offsets) { return offsets.back() + kSpareRows; }

} // namespace

flashrun::Sizes DeviceProblem::sizes() const {
  const interp::ProblemShape &s = inputs.shape;
  return {s.batch(), s.heads(), s.kvHeads(), s.queryLen(), s.keyLen()};
}

namespace {

/// dst[i] = the element type's nearest value to a uniform draw in [-1, 1)
/// from a hash of (i, seed); a thread per element, 256 per CTA.
constexpr const char *kFillRandomPtx = R"(.version 7.8
.target sm_80
.address_size 64
.visible .entry flashc_fill_random(.param .u64 dst, .param .u64 count, .param .u32 seed)
{
  .reg .pred %p;
  .reg .b16 %h;
  .reg .b32 %r<12>;
  .reg .b64 %rd<6>;
  .reg .f32 %f<3>;
  ld.param.u64 %rd1, [dst];
  ld.param.u64 %rd2, [count];
  ld.param.u32 %r1, [seed];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %tid.x;
  mul.wide.u32 %rd3, %r2, 256;
  cvt.u64.u32 %rd4, %r3;
  add.u64 %rd3, %rd3, %rd4;
  setp.ge.u64 %p, %rd3, %rd2;
  @%p bra DONE;
  cvt.u32.u64 %r4, %rd3;
  shr.u64 %rd4, %rd3, 32;
  cvt.u32.u64 %r5, %rd4;
  mul.lo.u32 %r6, %r4, 0x9E3779B1;
  xor.b32 %r6, %r6, %r1;
  mad.lo.u32 %r6, %r5, 0x27D4EB2F, %r6;
  shr.u32 %r7, %r6, 16;
  xor.b32 %r6, %r6, %r7;
  mul.lo.u32 %r6, %r6, 0x85EBCA6B;
  shr.u32 %r7, %r6, 13;
  xor.b32 %r6, %r6, %r7;
  mul.lo.u32 %r6, %r6, 0xC2B2AE35;
  shr.u32 %r7, %r6, 16;
  xor.b32 %r6, %r6, %r7;
  shr.u32 %r8, %r6, 8;
  cvt.rn.f32.u32 %f1, %r8;
  fma.rn.f32 %f2, %f1, 0f34000000, 0fBF800000;
  cvt.rn.ELEMENT.f32 %h, %f2;
  shl.b64 %rd5, %rd3, 1;
  add.u64 %rd5, %rd1, %rd5;
  st.global.b16 [%rd5], %h;
DONE:
  ret;
}
)";

/// A device buffer of `count` random elements of `element` (bf16 or f16).
flashrt::DeviceBuffer randomDeviceBuffer(flashrt::Context &context, int64_t count, Type element,
                                         uint64_t seed) {
  std::string ptx = kFillRandomPtx;
  ptx.replace(ptx.find("ELEMENT"), 7, element.isBF16() ? "bf16" : "f16");
  flashrt::Module module = flashrt::Module::fromPtx(context, ptx);
  flashrt::Function fill = module.function("flashc_fill_random");
  flashrt::DeviceBuffer buffer(context, static_cast<size_t>(count) * 2);
  flashrt::Stream stream(context);
  flashrt::KernelArgs args;
  args.add(buffer.devicePtr()).add(static_cast<uint64_t>(count))
      .add(static_cast<uint32_t>(seed ^ (seed >> 32)));
  fill.launch(flashrt::Dim3(static_cast<unsigned>((count + 255) / 256)), flashrt::Dim3(256), 0,
              stream, args);
  stream.synchronize();
  return buffer;
}

} // namespace

bool harness::drawsInputsOnHost(const interp::ProblemShape &shape) {
  int64_t elements = (shape.batch() * shape.heads() * shape.queryLen() +
                      2 * shape.batch() * shape.kvHeads() * shape.keyLen()) *
                     shape.headDim();
  return elements <= kHostInputElements;
}

DeviceProblem harness::upload(flashrt::Context &context, flash::KernelOp kernel,
                              const interp::ProblemShape &shape,
                              const llvm::StringMap<double> &params, uint64_t seed,
                              Layout layout, int64_t documents, interp::PagedInputs pages) {
  DeviceProblem problem;
  problem.layout = layout;
  bool onHost = drawsInputsOnHost(shape);
  problem.inputs =
      onHost ? interp::makeRandomInputs(kernel, shape, seed, documents, pages)
             : interp::makeRandomAuxInputs(kernel, shape, seed, documents, pages);
  for (const auto &entry : params) {
    problem.inputs.params[entry.getKey()] = entry.getValue();
    problem.params[entry.getKey().str()] = entry.getValue();
  }
  Type element = kernel.getElementType();
  int64_t D = shape.headDim();
  const interp::VarlenBatch &varlen = problem.inputs.varlen;
  const std::vector<int32_t> *queryOffsets =
      varlen.packsQueries() ? &varlen.queryOffsets : nullptr;
  const std::vector<int32_t> *keyOffsets = varlen.packsKeys() ? &varlen.keyOffsets : nullptr;
  // Packed: the rows before the first sequence and the spare ones after the
  // last hold NaN.
  auto put = [&](const std::vector<float> &data, int64_t heads, int64_t length,
                 const std::vector<int32_t> *offsets) {
    size_t count = offsets ? packedRows(*offsets) * heads * D : data.size();
    std::vector<uint16_t> bits(count, 0xFFFF);
    forEachRow(
        layout, shape.batch(), heads, length, D,
        [&](int64_t host, int64_t device) {
          for (int64_t d = 0; d < D; ++d)
            bits[device + d] = toHalfBits(data[host + d], element);
        },
        offsets);
    flashrt::DeviceBuffer buffer(context, bits.size() * 2);
    buffer.copyFromHost(bits.data(), bits.size() * 2);
    return buffer;
  };
  auto putInts = [&](const std::vector<int32_t> &values) {
    flashrt::DeviceBuffer buffer(context, std::max<size_t>(values.size() * 4, 4));
    buffer.copyFromHost(values.data(), values.size() * 4);
    return buffer;
  };
  int64_t qCount = shape.batch() * shape.heads() * shape.queryLen() * D;
  int64_t kvCount = shape.batch() * shape.kvHeads() * shape.keyLen() * D;
  int64_t lseCount = shape.batch() * shape.heads() * shape.queryLen();
  if (queryOffsets) {
    qCount = packedRows(*queryOffsets) * shape.heads() * D;
    lseCount = packedRows(*queryOffsets) * shape.heads();
    problem.queryOffsets.emplace(putInts(*queryOffsets));
  }
  if (keyOffsets) {
    kvCount = packedRows(*keyOffsets) * shape.kvHeads() * D;
    problem.keyOffsets.emplace(putInts(*keyOffsets));
  }
  const interp::PagedCache &paged = problem.inputs.paged;
  if (paged.enabled()) {
    kvCount = paged.numPages * paged.pageSize * shape.kvHeads() * D;
    problem.blockTable.emplace(putInts(paged.table));
    problem.keyLengths.emplace(putInts(paged.lengths));
  }
  if (onHost && paged.enabled()) {
    // The cache's pages as they are: [pages, page, HKV, D] in any layout.
    auto putCache = [&](const std::vector<float> &data) {
      std::vector<uint16_t> bits(data.size());
      for (size_t i = 0; i < data.size(); ++i)
        bits[i] = toHalfBits(data[i], element);
      flashrt::DeviceBuffer buffer(context, bits.size() * 2);
      buffer.copyFromHost(bits.data(), bits.size() * 2);
      return buffer;
    };
    problem.q.emplace(put(problem.inputs.q, shape.heads(), shape.queryLen(), queryOffsets));
    problem.k.emplace(putCache(problem.inputs.k));
    problem.v.emplace(putCache(problem.inputs.v));
  } else if (onHost) {
    problem.q.emplace(put(problem.inputs.q, shape.heads(), shape.queryLen(), queryOffsets));
    problem.k.emplace(put(problem.inputs.k, shape.kvHeads(), shape.keyLen(), keyOffsets));
    problem.v.emplace(put(problem.inputs.v, shape.kvHeads(), shape.keyLen(), keyOffsets));
  } else {
    problem.q.emplace(randomDeviceBuffer(context, qCount, element, seed));
    problem.k.emplace(randomDeviceBuffer(context, kvCount, element, seed + 1));
    problem.v.emplace(randomDeviceBuffer(context, kvCount, element, seed + 2));
  }
  problem.o.emplace(context, qCount * 2);
  problem.lse.emplace(context, lseCount * 4);
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

namespace {
std::vector<uint64_t> auxPointers(const DeviceProblem &p) {
  std::vector<uint64_t> aux;
  for (const flashrt::DeviceBuffer &buffer : p.aux)
    aux.push_back(buffer.devicePtr());
  return aux;
}
} // namespace

void harness::launch(const flashrun::AttentionKernel &kernel, flashrt::Stream &stream,
                     const DeviceProblem &p, uint64_t blockSummary) {
  const interp::ProblemShape &s = p.inputs.shape;
  std::vector<uint64_t> aux = auxPointers(p);
  const interp::VarlenBatch &varlen = p.inputs.varlen;
  const interp::PagedCache &paged = p.inputs.paged;
  std::optional<flashrun::PagedKV> pages;
  if (paged.enabled())
    pages = flashrun::PagedKV{p.blockTable->devicePtr(), p.keyLengths->devicePtr(),
                              paged.tableStride, paged.numPages};
  if (varlen.packsQueries() || varlen.packsKeys()) {
    // Packed sides are token-major whatever the layout; the others keep it.
    auto ref = [&](const flashrt::DeviceBuffer &buffer, int64_t heads, int64_t length,
                   bool packed) {
      return packed ? flashrun::TensorRef::packed(buffer.devicePtr(), heads, s.headDim())
                    : tensorRef(p.layout, buffer.devicePtr(), heads, length, s.headDim());
    };
    flashrun::VarlenBatch batch;
    if (varlen.packsQueries())
      batch.queryOffsets = p.queryOffsets->devicePtr(),
      batch.queryRows = packedRows(varlen.queryOffsets);
    if (varlen.packsKeys())
      // Up to the last sequence's end: the NaN rows after it are outside the
      // tensor (a TMA box past a sequence's end reads its next rows, which
      // the contract asks to be finite, and zeros past the rows).
      batch.keyOffsets = p.keyOffsets->devicePtr(), batch.keyRows = varlen.keyOffsets.back();
    flashrun::TensorRef k = ref(*p.k, s.kvHeads(), s.keyLen(), varlen.packsKeys()),
                        v = ref(*p.v, s.kvHeads(), s.keyLen(), varlen.packsKeys());
    if (paged.enabled())
      k = flashrun::TensorRef::pagedCache(p.k->devicePtr(), paged.pageSize, s.kvHeads(),
                                          s.headDim()),
      v = flashrun::TensorRef::pagedCache(p.v->devicePtr(), paged.pageSize, s.kvHeads(),
                                          s.headDim());
    kernel.launchVarlen(stream, ref(*p.q, s.heads(), s.queryLen(), varlen.packsQueries()), k, v,
                        ref(*p.o, s.heads(), s.queryLen(), varlen.packsQueries()),
                        p.lse->devicePtr(), p.sizes(), batch, pages ? &*pages : nullptr, p.params,
                        aux);
    return;
  }
  if (paged.enabled()) {
    auto cache = [&](const flashrt::DeviceBuffer &buffer) {
      return flashrun::TensorRef::pagedCache(buffer.devicePtr(), paged.pageSize, s.kvHeads(),
                                             s.headDim());
    };
    kernel.launchPaged(stream,
                       tensorRef(p.layout, p.q->devicePtr(), s.heads(), s.queryLen(), s.headDim()),
                       cache(*p.k), cache(*p.v),
                       tensorRef(p.layout, p.o->devicePtr(), s.heads(), s.queryLen(), s.headDim()),
                       p.lse->devicePtr(), p.sizes(), *pages, p.params, aux);
    return;
  }
  kernel.launch(stream,
                tensorRef(p.layout, p.q->devicePtr(), s.heads(), s.queryLen(), s.headDim()),
                tensorRef(p.layout, p.k->devicePtr(), s.kvHeads(), s.keyLen(), s.headDim()),
                tensorRef(p.layout, p.v->devicePtr(), s.kvHeads(), s.keyLen(), s.headDim()),
                tensorRef(p.layout, p.o->devicePtr(), s.heads(), s.queryLen(), s.headDim()),
                p.lse->devicePtr(), p.sizes(), p.params, aux, blockSummary);
}

namespace {
/// The GPU's block summary of `problem` into problem.summary (allocated on
/// first use); returns its device address.
uint64_t computeSummary(const flashrun::AttentionKernel &kernel, flashrt::Stream &stream,
                        DeviceProblem &problem, flashrt::Context &context) {
  size_t bytes = kernel.blockSummaryBytes(problem.sizes());
  if (!problem.summary || problem.summary->size() < bytes)
    problem.summary.emplace(context, std::max<size_t>(bytes, 16));
  kernel.computeBlockSummary(stream, problem.sizes(), problem.params, auxPointers(problem),
                             problem.summary->devicePtr());
  return problem.summary->devicePtr();
}
} // namespace

std::string harness::checkTileOrder(const flash::BlockSummaryShape &shape,
                                    const std::vector<uint8_t> &classes,
                                    const std::vector<uint8_t> &gpu) {
  // Each query tile's cost from the (interpreter's) classes.
  int64_t entries = shape.orderEntries();
  std::vector<int64_t> bins(entries);
  for (int64_t e = 0; e < entries; ++e) {
    int64_t cost = 0;
    for (int64_t kt = 0; kt < shape.keyBlocks; ++kt) {
      uint8_t blockClass = classes[e * shape.keyBlocks + kt];
      cost += (blockClass != flash::kBlockEmpty) + (blockClass == flash::kBlockPartial);
    }
    bins[e] = shape.orderBin(cost);
  }
  std::vector<bool> seen(entries, false);
  int64_t previousBin = 0;
  for (int64_t position = 0; position < entries; ++position) {
    uint32_t entry;
    std::memcpy(&entry, &gpu[shape.orderOffset() + 4 * position], 4);
    std::string at = "position " + std::to_string(position) + " holds " + std::to_string(entry);
    if (entry >= static_cast<uint64_t>(entries))
      return at + ", past the " + std::to_string(entries) + " query tiles";
    if (seen[entry])
      return at + " a second time";
    seen[entry] = true;
    if (bins[entry] < previousBin)
      return at + " (cost bin " + std::to_string(bins[entry]) + ") after bin " +
             std::to_string(previousBin);
    previousBin = bins[entry];
  }
  return "";
}

std::optional<SummaryCheck> harness::checkBlockSummary(const flashrun::AttentionKernel &kernel,
                                                       flashrt::Stream &stream,
                                                       DeviceProblem &problem,
                                                       flash::KernelOp flashKernel,
                                                       std::string &error) {
  SummaryCheck check;
  size_t bytes = kernel.blockSummaryBytes(problem.sizes());
  problem.summary.emplace(stream.context(), std::max<size_t>(bytes, 16));
  // Twice: each launch must leave the tile order's counters as the next
  // one needs them. The first launch's classes must equal the second's,
  // which is checked against the interpreter below.
  std::vector<uint8_t> first(bytes), gpu(bytes);
  for (std::vector<uint8_t> *result : {&first, &gpu}) {
    problem.summary->fill(0xFF); // no valid class, no valid order
    // The fill runs on the legacy default stream, which a non-blocking
    // stream does not wait for.
    stream.context().synchronize();
    computeSummary(kernel, stream, problem, stream.context());
    stream.synchronize();
    problem.summary->copyToHost(result->data(), bytes);
  }
  std::vector<uint8_t> expected;
  if (failed(interp::computeBlockSummary(flashKernel, problem.inputs, expected, error)))
    return std::nullopt;
  const flashrt::KernelPackage &pkg = kernel.package();
  const interp::ProblemShape &s = problem.inputs.shape;
  flash::BlockSummaryShape shape =
      flash::BlockSummaryShape::of(flashKernel.getBlockSummaryAttr(), pkg.blockRows,
                                   pkg.blockCols, s.batch(), s.heads(), s.queryLen(), s.keyLen());
  if (expected.size() != static_cast<size_t>(shape.bytes()) ||
      bytes != static_cast<size_t>(shape.bytesWithOrder())) {
    error = "the block summary's size disagrees between the runtime (" + std::to_string(bytes) +
            " bytes) and the interpreter (" + std::to_string(expected.size()) + " + order)";
    return std::nullopt;
  }
  check.tiles = static_cast<int64_t>(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    bool wrong = gpu[i] != expected[i], unstable = first[i] != gpu[i];
    if ((wrong || unstable) && check.mismatches++ == 0)
      check.firstMismatch =
          "byte " + std::to_string(i) + ": GPU " +
          (wrong ? std::to_string(gpu[i]) + ", interpreter " + std::to_string(expected[i])
                 : std::to_string(first[i]) + " in the first launch, " +
                       std::to_string(gpu[i]) + " in the second");
  }
  check.orderError = checkTileOrder(shape, expected, gpu);
  return check;
}

std::optional<Validation> harness::validate(const flashrun::AttentionKernel &kernel,
                                            flashrt::Stream &stream, DeviceProblem &problem,
                                            flash::KernelOp flashKernel, std::string &error) {
  if (!drawsInputsOnHost(problem.inputs.shape)) {
    error = "the check shape " + problem.inputs.shape.str() +
            " is too large to draw its inputs on the host";
    return std::nullopt;
  }
  // A persistent kernel must leave its tile counter ready for the next
  // launch: the checked launch is the second on this stream.
  if (kernel.package().persistent)
    launch(kernel, stream, problem);
  problem.o->fill(0xFF); // NaN in bf16 and f16
  problem.lse->fill(0xFF);
  Validation v;
  uint64_t summary = 0;
  if (kernel.hasBlockSummary()) {
    std::optional<SummaryCheck> check = checkBlockSummary(kernel, stream, problem, flashKernel, error);
    if (!check)
      return std::nullopt;
    v.summary = *check;
    summary = problem.summary->devicePtr();
  }
  launch(kernel, stream, problem, summary);
  stream.synchronize();
  const interp::ProblemShape &s = problem.inputs.shape;
  std::vector<uint16_t> oBits(problem.o->size() / 2);
  problem.o->copyToHost(oBits.data(), oBits.size() * 2);
  std::vector<float> deviceLse(problem.lse->size() / 4);
  problem.lse->copyToHost(deviceLse.data(), deviceLse.size() * 4);
  Type element = flashKernel.getElementType();
  const std::vector<int32_t> *queryOffsets =
      problem.inputs.varlen.packsQueries() ? &problem.inputs.varlen.queryOffsets : nullptr;
  // Rows past a varlen sequence are none of the packed o: O = 0, LSE = -inf
  // there, as the interpreter leaves them.
  std::vector<float> out(problem.inputs.q.size(), 0.0f);
  std::vector<float> lse = deviceLse;
  forEachRow(
      problem.layout, s.batch(), s.heads(), s.queryLen(), s.headDim(),
      [&](int64_t host, int64_t device) {
        for (int64_t d = 0; d < s.headDim(); ++d)
          out[host + d] = fromHalfBits(oBits[device + d], element);
      },
      queryOffsets);
  if (queryOffsets) {
    // LSE is [H, rows]: row r of head h at h·rows + r.
    int64_t rows = packedRows(*queryOffsets);
    lse.assign(s.batch() * s.heads() * s.queryLen(), -std::numeric_limits<float>::infinity());
    forEachRow(
        Layout::BHSD, s.batch(), s.heads(), s.queryLen(), 1,
        [&](int64_t host, int64_t device) {
          int64_t h = device % s.heads(), row = device / s.heads();
          lse[host] = deviceLse[h * rows + row];
        },
        queryOffsets);
    // The rows no sequence owns must keep their poison: a store there
    // would have hit a neighbour's rows.
    int64_t rowElems = s.heads() * s.headDim();
    for (int64_t row = 0; row < rows; ++row) {
      if (row >= queryOffsets->front() && row < queryOffsets->back())
        continue;
      for (int64_t e = 0; e < rowElems; ++e)
        if (oBits[row * rowElems + e] != 0xFFFF) {
          error = "the kernel wrote row " + std::to_string(row) +
                  " of the packed o, which no sequence owns";
          return std::nullopt;
        }
    }
  }

  // The interpreter splits the keys as the launch did.
  interp::AttentionInputs inputs = problem.inputs;
  inputs.keySplits = kernel.keySplits(problem.sizes());
  interp::AttentionOutputs expected;
  if (failed(interp::runKernel(flashKernel, inputs, expected, error)))
    return std::nullopt;
  std::vector<double> expectedOut(expected.out.begin(), expected.out.end());
  std::vector<double> expectedLse(expected.lse.begin(), expected.lse.end());
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
  // The interpreter computes whole tiles: a decode row costs a 64-row tile.
  int64_t tileRows = std::max<int64_t>(kernel.getConfig().getBr(), shape.queryLen());
  int64_t work = shape.batch() * shape.heads() * tileRows * shape.keyLen() * shape.headDim();
  if (work <= (int64_t(1) << 31) && drawsInputsOnHost(shape))
    return check;
  // A paged cache or a varlen batch keeps five sequences: lengths full, 1,
  // 0 and random.
  bool ragged = kernel.getPagedKvAttr() || kernel.getVarlenAttr();
  check[flash::DimRole::Batch] = ragged ? std::min<int64_t>(shape.batch(), 5) : 1;
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

harness::SummaryTimes harness::timeBlockSummary(const flashrun::AttentionKernel &kernel,
                                                flashrt::Stream &stream, DeviceProblem &problem,
                                                int warmup, int iterations) {
  SummaryTimes times;
  if (!kernel.hasBlockSummary())
    return times;
  uint64_t summary = 0;
  times.summaryMs = flashrt::median(flashrt::timeLaunches(stream, warmup, iterations, [&] {
    summary = computeSummary(kernel, stream, problem, stream.context());
  }));
  times.cachedMs = flashrt::median(flashrt::timeLaunches(
      stream, warmup, iterations, [&] { launch(kernel, stream, problem, summary); }));
  return times;
}

double harness::tflops(const interp::ProblemShape &shape, double ms, bool causal) {
  double flops = 4.0 * shape.batch() * shape.heads() * shape.queryLen() * shape.keyLen() *
                 shape.headDim() * (causal ? 0.5 : 1.0);
  return flops / (ms * 1e-3) / 1e12;
}

//===----------------------------------------------------------------------===//
// The backward pass
//===----------------------------------------------------------------------===//

namespace {

/// Host BHSD values (already in the element type) to a device buffer in
/// `layout`.
flashrt::DeviceBuffer uploadRows(flashrt::Context &context, const std::vector<float> &data,
                                 Layout layout, const interp::ProblemShape &s, int64_t heads,
                                 int64_t length, Type element) {
  std::vector<uint16_t> bits(data.size());
  forEachRow(layout, s.batch(), heads, length, s.headDim(), [&](int64_t host, int64_t device) {
    for (int64_t d = 0; d < s.headDim(); ++d)
      bits[device + d] = toHalfBits(data[host + d], element);
  });
  flashrt::DeviceBuffer buffer(context, std::max<size_t>(bits.size() * 2, 16));
  buffer.copyFromHost(bits.data(), bits.size() * 2);
  return buffer;
}

std::vector<float> downloadRows(const flashrt::DeviceBuffer &buffer, Layout layout,
                                const interp::ProblemShape &s, int64_t heads, int64_t length,
                                Type element) {
  size_t count = s.batch() * heads * length * s.headDim();
  std::vector<uint16_t> bits(count);
  buffer.copyToHost(bits.data(), count * 2);
  std::vector<float> values(count);
  forEachRow(layout, s.batch(), heads, length, s.headDim(), [&](int64_t host, int64_t device) {
    for (int64_t d = 0; d < s.headDim(); ++d)
      values[host + d] = fromHalfBits(bits[device + d], element);
  });
  return values;
}

/// Elements of aux tensor `decl` at `shape`.
int64_t elementCount(flash::AuxTensorAttr decl, const interp::ProblemShape &shape) {
  int64_t count = 1;
  for (int64_t extent : decl.getExtents())
    count *= flash::AuxTensorAttr::isRole(extent)
                 ? shape[flash::AuxTensorAttr::decodeRole(extent)]
                 : extent;
  return count;
}

} // namespace

BackwardProblem harness::uploadBackward(flashrt::Context &context,
                                        flash::BackwardKernelOp kernel,
                                        const DeviceProblem &problem, uint64_t seed,
                                        size_t workspaceBytes) {
  const interp::ProblemShape &s = problem.inputs.shape;
  Type element = kernel.getElementType();
  BackwardProblem backward;
  backward.outputGrad = interp::makeRandomOutputGrad(kernel, s, seed);
  backward.dO.emplace(
      uploadRows(context, backward.outputGrad, problem.layout, s, s.heads(), s.queryLen(), element));
  // From the shape: a problem too large for the host has no inputs.q/k
  // (upload drew them on the GPU), and 16-byte gradients were written far
  // past their end (flash-run --bwd above 2^27 q + k + v elements).
  size_t qBytes = static_cast<size_t>(s.batch() * s.heads() * s.queryLen() * s.headDim()) * 2,
         kBytes = static_cast<size_t>(s.batch() * s.kvHeads() * s.keyLen() * s.headDim()) * 2;
  backward.dq.emplace(context, std::max<size_t>(qBytes, 16));
  backward.dk.emplace(context, std::max<size_t>(kBytes, 16));
  backward.dv.emplace(context, std::max<size_t>(kBytes, 16));
  backward.workspace.emplace(context, workspaceBytes);
  llvm::StringSet<> withGrad;
  kernel.walk([&](flash::AuxGradAddOp add) { withGrad.insert(add.getTensor()); });
  for (Attribute attr : kernel.getTensors()) {
    auto decl = cast<flash::AuxTensorAttr>(attr);
    if (!withGrad.contains(decl.getName().getValue())) {
      backward.tensorGrads.emplace_back();
      continue;
    }
    backward.tensorGrads.emplace_back(
        std::in_place, context, std::max<size_t>(elementCount(decl, s) * 4, 4));
  }
  return backward;
}

void harness::launchBackward(const flashrun::BackwardKernel &kernel, flashrt::Stream &stream,
                             const DeviceProblem &p, const BackwardProblem &bwd,
                             uint64_t blockSummary) {
  const interp::ProblemShape &s = p.inputs.shape;
  flashrun::BackwardTensors t;
  t.q = tensorRef(p.layout, p.q->devicePtr(), s.heads(), s.queryLen(), s.headDim());
  t.k = tensorRef(p.layout, p.k->devicePtr(), s.kvHeads(), s.keyLen(), s.headDim());
  t.v = tensorRef(p.layout, p.v->devicePtr(), s.kvHeads(), s.keyLen(), s.headDim());
  t.out = tensorRef(p.layout, p.o->devicePtr(), s.heads(), s.queryLen(), s.headDim());
  t.lse = p.lse->devicePtr();
  t.outputGrad = tensorRef(p.layout, bwd.dO->devicePtr(), s.heads(), s.queryLen(), s.headDim());
  t.queryGrad = tensorRef(p.layout, bwd.dq->devicePtr(), s.heads(), s.queryLen(), s.headDim());
  t.keyGrad = tensorRef(p.layout, bwd.dk->devicePtr(), s.kvHeads(), s.keyLen(), s.headDim());
  t.valueGrad = tensorRef(p.layout, bwd.dv->devicePtr(), s.kvHeads(), s.keyLen(), s.headDim());
  t.workspace = bwd.workspace->devicePtr();
  t.blockSummary = blockSummary;
  for (const std::optional<flashrt::DeviceBuffer> &grad : bwd.tensorGrads)
    t.tensorGrads.push_back(grad ? grad->devicePtr() : 0);
  std::vector<uint64_t> aux;
  for (const flashrt::DeviceBuffer &buffer : p.aux)
    aux.push_back(buffer.devicePtr());
  kernel.launch(stream, t, p.sizes(), p.params, aux);
}

bool BackwardValidation::gradientPasses(const interp::ErrorStats &stats) const {
  // A gradient that cancels to about 0 (a one-hot row: dP - Δ = 0 up to
  // f32 rounding, so dQ and dK are rounding noise on both sides) has no
  // relative error to speak of: it passes where every element is within
  // 1e-3 of the bound of the interpreter's, in absolute terms. NaN never
  // passes.
  constexpr double kCancelledGradientFloor = 1e-3;
  return stats.passes(bound) || (stats.nonFinite == 0 && stats.mismatchedInf == 0 &&
                                 stats.maxAbs <= bound * kCancelledGradientFloor);
}

bool BackwardValidation::cachedSummaryPassed() const {
  return !cachedSummary || (cachedSummary->passed() && !cachedLaunchWroteSummary &&
                            gradientPasses(cachedDq) && gradientPasses(cachedDk) &&
                            gradientPasses(cachedDv));
}

bool BackwardValidation::passed() const {
  bool ok = gradientPasses(dq) && gradientPasses(dk) && gradientPasses(dv) &&
            (!summary || summary->passed()) && cachedSummaryPassed();
  for (const auto &[name, stats] : tensorGrads)
    ok &= gradientPasses(stats);
  return ok;
}

std::optional<BackwardValidation>
harness::validateBackward(flashrt::Context &context, const flashrun::BackwardKernel &kernel,
                          flashrt::Stream &stream, DeviceProblem &problem,
                          flash::KernelOp forward, flash::BackwardKernelOp backward,
                          uint64_t seed, std::string &error) {
  const interp::ProblemShape &s = problem.inputs.shape;
  if (!drawsInputsOnHost(s)) {
    error = "the check shape " + s.str() + " is too large to draw its inputs on the host";
    return std::nullopt;
  }
  Type element = backward.getElementType();
  interp::AttentionOutputs outputs;
  if (failed(interp::runKernel(forward, problem.inputs, outputs, error)))
    return std::nullopt;
  problem.o.emplace(
      uploadRows(context, outputs.out, problem.layout, s, s.heads(), s.queryLen(), element));
  problem.lse->copyFromHost(outputs.lse.data(), outputs.lse.size() * 4);
  BackwardProblem bwd = uploadBackward(context, backward, problem, seed,
                                       kernel.workspaceBytes(problem.sizes()));
  // Poisoned: every element the backward should write is NaN until it does.
  for (std::optional<flashrt::DeviceBuffer> *buffer : {&bwd.dq, &bwd.dk, &bwd.dv})
    (*buffer)->fill(0xFF);
  for (std::optional<flashrt::DeviceBuffer> &grad : bwd.tensorGrads)
    if (grad)
      grad->fill(0xFF);
  launchBackward(kernel, stream, problem, bwd);
  stream.synchronize();

  interp::BackwardInputs inputs{outputs.out, outputs.lse, bwd.outputGrad};
  interp::AttentionGradients expected;
  if (failed(interp::runBackwardKernel(backward, problem.inputs, inputs, expected, error)))
    return std::nullopt;
  BackwardValidation v;
  std::vector<uint8_t> wantSummary;
  // The GPU's summary bytes (`offset` into `buffer`) against the
  // interpreter's.
  auto checkSummary = [&](const flashrt::DeviceBuffer &buffer, size_t offset) {
    std::vector<uint8_t> got(wantSummary.size());
    buffer.copyToHost(got.data(), got.size(), offset);
    SummaryCheck check;
    check.tiles = static_cast<int64_t>(wantSummary.size());
    for (size_t i = 0; i < wantSummary.size(); ++i)
      if (got[i] != wantSummary[i] && check.mismatches++ == 0)
        check.firstMismatch = "byte " + std::to_string(i) + ": GPU " + std::to_string(got[i]) +
                              ", interpreter " + std::to_string(wantSummary[i]);
    return check;
  };
  // Where a launch that computes its own summary leaves it.
  size_t workspaceSummary = 0;
  if (kernel.package().blockSummary) {
    if (failed(interp::computeBlockSummary(backward, problem.inputs, wantSummary, error)))
      return std::nullopt;
    workspaceSummary =
        flashrun::BackwardKernel::blockSummaryOffset(kernel.package(), problem.sizes());
    v.summary = checkSummary(*bwd.workspace, workspaceSummary);
  }
  auto compareRows = [&](const flashrt::DeviceBuffer &buffer, const std::vector<float> &want,
                         int64_t heads, int64_t length) {
    std::vector<float> got = downloadRows(buffer, problem.layout, s, heads, length, element);
    return interp::compare(got, std::vector<double>(want.begin(), want.end()));
  };
  v.bound = interp::gradientBound(element);
  v.dq = compareRows(*bwd.dq, expected.dq, s.heads(), s.queryLen());
  v.dk = compareRows(*bwd.dk, expected.dk, s.kvHeads(), s.keyLen());
  v.dv = compareRows(*bwd.dv, expected.dv, s.kvHeads(), s.keyLen());
  if (kernel.package().blockSummary) {
    // The cached-summary API: the summary into a buffer of its own (no
    // valid class before), then a launch that reads it, over a workspace
    // of 0xFF bytes (it needs no initialization): the launch must leave
    // the workspace's summary alone.
    flashrt::DeviceBuffer cached(context,
                                 std::max<size_t>(kernel.blockSummaryBytes(problem.sizes()), 16));
    cached.fill(0xFF);
    kernel.computeBlockSummary(stream, problem.sizes(), problem.params, auxPointers(problem),
                               cached.devicePtr());
    stream.synchronize();
    v.cachedSummary = checkSummary(cached, 0);
    for (std::optional<flashrt::DeviceBuffer> *buffer : {&bwd.dq, &bwd.dk, &bwd.dv, &bwd.workspace})
      (*buffer)->fill(0xFF);
    launchBackward(kernel, stream, problem, bwd, cached.devicePtr());
    stream.synchronize();
    std::vector<uint8_t> untouched(wantSummary.size());
    bwd.workspace->copyToHost(untouched.data(), untouched.size(), workspaceSummary);
    v.cachedLaunchWroteSummary =
        llvm::any_of(untouched, [](uint8_t byte) { return byte != 0xFF; });
    v.cachedDq = compareRows(*bwd.dq, expected.dq, s.heads(), s.queryLen());
    v.cachedDk = compareRows(*bwd.dk, expected.dk, s.kvHeads(), s.keyLen());
    v.cachedDv = compareRows(*bwd.dv, expected.dv, s.kvHeads(), s.keyLen());
  }
  for (auto [attr, grad] : llvm::zip(backward.getTensors(), bwd.tensorGrads)) {
    if (!grad)
      continue;
    StringRef name = cast<flash::AuxTensorAttr>(attr).getName().getValue();
    auto it = expected.tensorGrads.find(name);
    if (it == expected.tensorGrads.end())
      continue;
    std::vector<float> got(it->second.size());
    grad->copyToHost(got.data(), got.size() * 4);
    v.tensorGrads.push_back(
        {name.str(), interp::compare(got, std::vector<double>(it->second.begin(),
                                                              it->second.end()))});
  }
  return v;
}

int harness::differingGradRuns(const flashrun::BackwardKernel &kernel, flashrt::Stream &stream,
                               const DeviceProblem &problem, BackwardProblem &backward,
                               int runs) {
  // dQ and every aux gradient, raw bits, poisoned before each run.
  std::vector<std::pair<flashrt::DeviceBuffer *, size_t>> outputs = {
      {&*backward.dq, problem.inputs.q.size() * 2}};
  for (std::optional<flashrt::DeviceBuffer> &grad : backward.tensorGrads)
    if (grad)
      outputs.push_back({&*grad, grad->size()});
  std::vector<std::vector<uint8_t>> first(outputs.size()), again(outputs.size());
  int differing = 0;
  for (int run = 0; run < runs; ++run) {
    for (auto &[buffer, bytes] : outputs)
      buffer->fill(0xFF);
    launchBackward(kernel, stream, problem, backward);
    stream.synchronize();
    bool same = true;
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::vector<uint8_t> &host = run == 0 ? first[i] : again[i];
      host.resize(outputs[i].second);
      outputs[i].first->copyToHost(host.data(), host.size());
      same &= run == 0 || first[i] == again[i];
    }
    if (!same)
      ++differing;
  }
  return differing;
}

harness::SummaryTimes harness::timeBackwardSummary(const flashrun::BackwardKernel &kernel,
                                                   flashrt::Stream &stream,
                                                   const DeviceProblem &problem,
                                                   const BackwardProblem &backward, int warmup,
                                                   int iterations) {
  SummaryTimes times;
  if (!kernel.hasBlockSummary())
    return times;
  flashrt::DeviceBuffer summary(stream.context(),
                                std::max<size_t>(kernel.blockSummaryBytes(problem.sizes()), 16));
  times.summaryMs = flashrt::median(flashrt::timeLaunches(stream, warmup, iterations, [&] {
    kernel.computeBlockSummary(stream, problem.sizes(), problem.params, auxPointers(problem),
                               summary.devicePtr());
  }));
  times.cachedMs = flashrt::median(flashrt::timeLaunches(stream, warmup, iterations, [&] {
    launchBackward(kernel, stream, problem, backward, summary.devicePtr());
  }));
  return times;
}

double harness::timeTrainingStep(const flashrun::AttentionKernel &forward,
                                 const flashrun::BackwardKernel &backwardKernel,
                                 flashrt::Stream &stream, const DeviceProblem &problem,
                                 const BackwardProblem &backward, int warmup, int iterations) {
  std::vector<float> times = flashrt::timeLaunches(stream, warmup, iterations, [&] {
    launch(forward, stream, problem);
    launchBackward(backwardKernel, stream, problem, backward);
  });
  return flashrt::median(times);
}

double harness::timeBackward(const flashrun::BackwardKernel &kernel, flashrt::Stream &stream,
                             const DeviceProblem &problem, const BackwardProblem &backward,
                             int warmup, int iterations) {
  std::vector<float> times = flashrt::timeLaunches(
      stream, warmup, iterations, [&] { launchBackward(kernel, stream, problem, backward); });
  return flashrt::median(times);
}
