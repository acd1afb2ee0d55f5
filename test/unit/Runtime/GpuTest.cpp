//===- GpuTest.cpp - libflashrt against a real GPU ------------------------===//
//
// Every test here needs a CUDA driver and a GPU of compute capability 8.0 or
// later; elsewhere each reports itself SKIPPED with the reason.
//
//===----------------------------------------------------------------------===//
#include "flashrt/Runtime.h"

#include "TestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

using namespace flashrt;
using flashrt::test::readKernel;
using flashrt::test::ScopedEnv;
using ::testing::HasSubstr;

namespace {

class GpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string whyNot;
    if (!Driver::available(&whyNot))
      GTEST_SKIP() << "no CUDA driver/GPU: " << whyNot;
    context = std::make_unique<Context>();
    ComputeCapability cc = context->device().computeCapability();
    if (cc.number() < 80)
      GTEST_SKIP() << "the test kernels target sm_80; "
                   << context->device().name() << " is sm_" << cc.number();
  }

  std::vector<float> download(const DeviceBuffer &buffer, size_t count) {
    std::vector<float> values(count);
    buffer.copyToHost(values.data(), count * sizeof(float));
    return values;
  }

  std::unique_ptr<Context> context;
};

TEST_F(GpuTest, DeviceReportsItsProperties) {
  const Device &device = context->device();
  EXPECT_FALSE(device.name().empty());
  EXPECT_GE(device.computeCapability().major, 8);
  EXPECT_GT(device.multiprocessorCount(), 0);
  // Every sm_80+ GPU lets a block opt in to more than the 48 KiB default.
  EXPECT_GT(device.maxSharedMemoryPerBlockOptin(), 48 * 1024);
  EXPECT_GT(context->driver().version(), 0);
  EXPECT_GE(context->driver().deviceCount(), 1);
  ::testing::Test::RecordProperty("gpu", device.name());
}

TEST_F(GpuTest, VectorAddComputesTheSumAndNothingElse) {
  Module module = Module::fromPtx(*context, readKernel("vector_add.ptx"));
  Function vectorAdd = module.function("vectorAdd");
  EXPECT_EQ(vectorAdd.name(), "vectorAdd");

  // Not a multiple of the block size, to exercise the bounds check; the
  // output has a tail the kernel must leave poisoned.
  const uint32_t n = 1000, tail = 64;
  std::vector<float> a(n), b(n);
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = 0.5f * i;
    b[i] = 1000.0f - 2.0f * i;
  }
  DeviceBuffer da(*context, n * sizeof(float));
  DeviceBuffer db(*context, n * sizeof(float));
  DeviceBuffer dc(*context, (n + tail) * sizeof(float));
  da.copyFromHost(a.data(), n * sizeof(float));
  db.copyFromHost(b.data(), n * sizeof(float));
  dc.fill(0xFF); // NaN in every float: an unwritten element cannot pass.

  Stream stream(*context);
  vectorAdd.launch(Dim3((n + 255) / 256), Dim3(256), 0, stream,
                   KernelArgs::pack(da, db, dc, n));
  stream.synchronize();

  std::vector<float> c = download(dc, n + tail);
  for (uint32_t i = 0; i < n; ++i)
    ASSERT_EQ(c[i], a[i] + b[i]) << "element " << i;
  uint32_t poison = 0xFFFFFFFFu;
  for (uint32_t i = n; i < n + tail; ++i)
    ASSERT_EQ(std::memcmp(&c[i], &poison, 4), 0) << "tail element " << i;
}

TEST_F(GpuTest, RawArgumentArrayLaunchesOnTheLegacyStream) {
  Module module = Module::fromPtx(*context, readKernel("vector_add.ptx"));
  Function vectorAdd = module.function("vectorAdd");
  const uint32_t n = 256;
  std::vector<float> ones(n, 1.0f);
  DeviceBuffer da(*context, n * 4), db(*context, n * 4), dc(*context, n * 4);
  da.copyFromHost(ones.data(), n * 4);
  db.copyFromHost(ones.data(), n * 4);
  uint64_t pa = da.devicePtr(), pb = db.devicePtr(), pc = dc.devicePtr();
  void *args[] = {&pa, &pb, &pc, const_cast<uint32_t *>(&n)};
  Stream stream = Stream::legacyDefault(*context);
  EXPECT_TRUE(stream.isLegacyDefault());
  vectorAdd.launch(Dim3(1), Dim3(n), 0, stream, args);
  context->synchronize();
  EXPECT_THAT(download(dc, n), ::testing::Each(2.0f));
}

TEST_F(GpuTest, DynamicSharedMemoryAboveTheDefaultNeedsOptIn) {
  const size_t bytes = 64 * 1024;
  ASSERT_GE(size_t(context->device().maxSharedMemoryPerBlockOptin()), bytes);
  Module module = Module::fromPtx(*context, readKernel("scale_shared.ptx"));
  Function scale = module.function("scaleThroughShared");

  const uint32_t n = 300;
  std::vector<float> in(n);
  for (uint32_t i = 0; i < n; ++i)
    in[i] = float(i) - 100.0f;
  DeviceBuffer din(*context, n * 4), dout(*context, n * 4);
  din.copyFromHost(in.data(), n * 4);
  dout.fill(0xFF);
  Stream stream(*context);
  KernelArgs args = KernelArgs::pack(dout, din, 0.25f, n);

  try {
    scale.launch(Dim3(3), Dim3(128), bytes, stream, args);
    FAIL() << "64 KiB of dynamic shared memory launched without opting in";
  } catch (const Error &error) {
    EXPECT_EQ(error.kind(), ErrorKind::LaunchError) << error.what();
    EXPECT_THAT(error.what(), HasSubstr("cuLaunchKernel failed: CUDA_ERROR_"));
    EXPECT_THAT(error.what(), HasSubstr("scaleThroughShared"));
  }

  scale.setMaxDynamicSharedMemory(bytes);
  // The occupancy calculator (persistent grids size themselves with it):
  // 64 KiB blocks fit fewer times per multiprocessor than blocks without.
  int withShared = scale.maxActiveBlocksPerMultiprocessor(128, bytes);
  EXPECT_GE(withShared, 1);
  EXPECT_LE(size_t(withShared) * bytes,
            size_t(context->device().attribute(/*MAX_SHARED_MEMORY_PER_MULTIPROCESSOR=*/81)));
  EXPECT_LT(withShared, scale.maxActiveBlocksPerMultiprocessor(128, 0));
  scale.launch(Dim3(3), Dim3(128), bytes, stream, args);
  stream.synchronize();
  std::vector<float> out = download(dout, n);
  for (uint32_t i = 0; i < n; ++i)
    ASSERT_EQ(out[i], in[i] * 0.25f) << "element " << i;
}

TEST_F(GpuTest, MalformedPtxIsJitErrorWithTheJitLog) {
  // Line 8 reads a register that was never declared.
  const char *broken = ".version 8.0\n"
                       ".target sm_80\n"
                       ".address_size 64\n"
                       "\n"
                       ".visible .entry broken()\n"
                       "{\n"
                       "    .reg .b32 %r<2>;\n"
                       "    mov.u32 %r1, %r7;\n"
                       "    ret;\n"
                       "}\n";
  try {
    Module::fromPtx(*context, broken);
    FAIL() << "malformed PTX loaded";
  } catch (const Error &error) {
    EXPECT_EQ(error.kind(), ErrorKind::JitError) << error.what();
    EXPECT_EQ(exitCodeFor(error.kind()), 4);
    std::string message = error.what();
    EXPECT_THAT(message, HasSubstr("cuModuleLoadDataEx failed: CUDA_ERROR_"));
    EXPECT_THAT(message, HasSubstr("JIT error log:"));
    // ptxas' own diagnostic, with the line it is about.
    EXPECT_THAT(message, HasSubstr("ptxas"));
    EXPECT_THAT(message, HasSubstr("line 8"));
    EXPECT_THAT(message, HasSubstr("%r7"));
  }
}

TEST_F(GpuTest, MissingKernelIsNamed) {
  Module module = Module::fromPtx(*context, readKernel("vector_add.ptx"));
  try {
    module.function("noSuchKernel");
    FAIL() << "found a kernel that does not exist";
  } catch (const Error &error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument);
    EXPECT_THAT(error.what(), HasSubstr("'noSuchKernel'"));
    EXPECT_THAT(error.what(), HasSubstr("CUDA_ERROR_NOT_FOUND"));
  }
}

// Launching vectorAdd over `grid` is refused before the driver sees it,
// with a message that holds `expected`.
static void expectInvalidLaunch(Context &context, Dim3 grid, const std::string &expected) {
  Module module = Module::fromPtx(context, readKernel("vector_add.ptx"));
  Function vectorAdd = module.function("vectorAdd");
  Stream stream(context);
  KernelArgs args = KernelArgs::pack(uint64_t(0), uint64_t(0), uint64_t(0),
                                     uint32_t(0));
  try {
    vectorAdd.launch(grid, Dim3(32), 0, stream, args);
    FAIL() << "launched grid " << grid.x << "x" << grid.y << "x" << grid.z;
  } catch (const Error &error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument);
    EXPECT_THAT(error.what(), HasSubstr(expected));
  }
}

TEST_F(GpuTest, ZeroLaunchDimensionIsInvalidArgument) {
  expectInvalidLaunch(*context, Dim3(0), "grid 0x1x1");
}

TEST_F(GpuTest, GridAboveTheYLimitIsInvalidArgument) {
  expectInvalidLaunch(*context, Dim3(1, 65536), "at most 65535");
}

TEST_F(GpuTest, EventsTimeLaunchesPositively) {
  Module module = Module::fromPtx(*context, readKernel("vector_add.ptx"));
  Function vectorAdd = module.function("vectorAdd");
  const uint32_t n = 1u << 22;
  DeviceBuffer da(*context, n * 4), db(*context, n * 4), dc(*context, n * 4);
  da.fill(0);
  db.fill(0);
  Stream stream(*context);
  KernelArgs args = KernelArgs::pack(da, db, dc, n);
  auto launch = [&] {
    vectorAdd.launch(Dim3(n / 256), Dim3(256), 0, stream, args);
  };

  std::vector<float> times = timeLaunches(stream, 2, 5, launch);
  ASSERT_EQ(times.size(), 5u);
  for (float ms : times) {
    EXPECT_GT(ms, 0.0f);
    EXPECT_LT(ms, 1000.0f); // 48 MiB of traffic, not a second's worth.
  }
  EXPECT_GT(median(times), 0.0f);

  Event start(*context), end(*context);
  start.record(stream);
  launch();
  end.record(stream);
  end.synchronize();
  EXPECT_GT(Event::elapsedMs(start, end), 0.0f);

  EXPECT_THROW(timeLaunches(stream, 0, 0, launch), Error);
}

TEST_F(GpuTest, BufferFillAndCopiesRoundTrip) {
  const size_t bytes = 4096;
  DeviceBuffer buffer(*context, bytes);
  EXPECT_EQ(buffer.size(), bytes);
  EXPECT_NE(buffer.devicePtr(), 0u);

  buffer.fill(0xAB);
  std::vector<uint8_t> host(bytes, 0);
  buffer.copyToHost(host.data(), bytes);
  EXPECT_THAT(host, ::testing::Each(uint8_t(0xAB)));

  std::vector<uint8_t> pattern(100);
  for (size_t i = 0; i < pattern.size(); ++i)
    pattern[i] = uint8_t(i * 7 + 1);
  buffer.copyFromHost(pattern.data(), pattern.size(), /*offset=*/1000);
  buffer.copyToHost(host.data(), bytes);
  for (size_t i = 0; i < bytes; ++i) {
    uint8_t expected =
        i >= 1000 && i < 1100 ? pattern[i - 1000] : uint8_t(0xAB);
    ASSERT_EQ(host[i], expected) << "byte " << i;
  }

  std::vector<uint8_t> slice(100);
  buffer.copyToHost(slice.data(), slice.size(), 1000);
  EXPECT_EQ(slice, pattern);

  EXPECT_THROW(buffer.copyFromHost(host.data(), bytes + 1), Error);
  EXPECT_THROW(buffer.copyToHost(host.data(), 1, bytes), Error);

  // Moving hands the allocation over without freeing it.
  uint64_t address = buffer.devicePtr();
  DeviceBuffer moved = std::move(buffer);
  EXPECT_EQ(moved.devicePtr(), address);
  EXPECT_EQ(buffer.devicePtr(), 0u);
  EXPECT_EQ(buffer.size(), 0u);
  moved.copyToHost(slice.data(), slice.size(), 1000);
  EXPECT_EQ(slice, pattern);

  DeviceBuffer empty(*context, 0);
  EXPECT_TRUE(empty.empty());
  empty.fill(0);
}

TEST_F(GpuTest, HugeAllocationIsDriverErrorNamingTheCall) {
  try {
    DeviceBuffer tooBig(*context, size_t(1) << 50); // 1 PiB.
    FAIL() << "allocated a petabyte";
  } catch (const Error &error) {
    EXPECT_EQ(error.kind(), ErrorKind::DriverError);
    EXPECT_THAT(error.what(),
                HasSubstr("cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY "
                          "(out of memory)"));
  }
}

TEST_F(GpuTest, DeviceOrdinalFromEnvironmentIsValidated) {
  {
    ScopedEnv env("FLASHRT_DEVICE", "zero");
    EXPECT_THROW(Device::fromEnvironment(), Error);
  }
  {
    ScopedEnv env("FLASHRT_DEVICE", "4096");
    try {
      Device::fromEnvironment();
      FAIL() << "device 4096 exists";
    } catch (const Error &error) {
      EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument);
      EXPECT_THAT(error.what(), HasSubstr("4096"));
    }
  }
  ScopedEnv env("FLASHRT_DEVICE", "0");
  EXPECT_EQ(Device::fromEnvironment().ordinal(), 0);
}

} // namespace

namespace {

TEST_F(GpuTest, TiledTensorMapsEncodeAndBadSpecsAreNamed) {
  if (!context->driver().hasTensorMapEncodeTiled())
    GTEST_SKIP() << "driver " << context->driver().versionString() << " has no tensor maps";
  DeviceBuffer buffer(*context, 4 * 2 * 256 * 128 * 2);
  TiledTensorMapSpec spec;
  spec.elementType = "bf16";
  spec.address = buffer.devicePtr();
  spec.dims = {128, 256, 2, 4}; // D, M, HKV, B
  spec.byteStrides = {128 * 2, 256 * 128 * 2, 2 * 256 * 128 * 2};
  spec.box = {64, 64, 1, 1};
  TensorMap map = encodeTiledTensorMap(context->driver(), spec);
  bool nonZero = false;
  for (uint64_t word : map.opaque)
    nonZero |= word != 0;
  EXPECT_TRUE(nonZero);

  TiledTensorMapSpec misaligned = spec;
  misaligned.byteStrides[0] = 100; // not a multiple of 16
  try {
    encodeTiledTensorMap(context->driver(), misaligned);
    ADD_FAILURE() << "a stride of 100 bytes was accepted";
  } catch (const Error &error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidArgument);
    EXPECT_THAT(error.what(), HasSubstr("byte strides {100"));
  }
  TiledTensorMapSpec f32 = spec;
  f32.elementType = "f32";
  EXPECT_THROW(encodeTiledTensorMap(context->driver(), f32), Error);
}

} // namespace
