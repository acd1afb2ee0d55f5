//===- KernelArgsTest.cpp - Packing kernel parameters (host only) ---------===//
#include "flashrt/KernelArgs.h"

#include "flashrt/Memory.h"
#include "flashrt/Module.h"
#include "flashrt/Stream.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

using namespace flashrt;

namespace {

template <typename T> T readArg(const KernelArgs &args, size_t index) {
  T value;
  std::memcpy(&value, args.data()[index], sizeof(T));
  return value;
}

template <typename T> bool isAligned(const void *pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % alignof(T) == 0;
}

TEST(KernelArgsTest, PacksMixedScalarsAtNaturalAlignment) {
  KernelArgs args = KernelArgs::pack(
      uint64_t(0x1122334455667788), int32_t(-7), 2.5f, 1.0 / 3.0, int8_t(9),
      int64_t(-42), uint16_t(0xBEEF));
  ASSERT_EQ(args.count(), 7u);
  // u64 @0, i32 @8, f32 @12, f64 @16, i8 @24, i64 @32 (7 bytes padding),
  // u16 @40.
  const size_t expected[] = {0, 8, 12, 16, 24, 32, 40};
  for (size_t i = 0; i < 7; ++i)
    EXPECT_EQ(args.offset(i), expected[i]) << "argument " << i;
  EXPECT_EQ(args.storageBytes(), 42u);

  void **pointers = args.data();
  EXPECT_TRUE(isAligned<uint64_t>(pointers[0]));
  EXPECT_TRUE(isAligned<int32_t>(pointers[1]));
  EXPECT_TRUE(isAligned<float>(pointers[2]));
  EXPECT_TRUE(isAligned<double>(pointers[3]));
  EXPECT_TRUE(isAligned<int64_t>(pointers[5]));
  EXPECT_TRUE(isAligned<uint16_t>(pointers[6]));

  EXPECT_EQ(readArg<uint64_t>(args, 0), 0x1122334455667788u);
  EXPECT_EQ(readArg<int32_t>(args, 1), -7);
  EXPECT_EQ(readArg<float>(args, 2), 2.5f);
  EXPECT_EQ(readArg<double>(args, 3), 1.0 / 3.0);
  EXPECT_EQ(readArg<int8_t>(args, 4), 9);
  EXPECT_EQ(readArg<int64_t>(args, 5), -42);
  EXPECT_EQ(readArg<uint16_t>(args, 6), 0xBEEF);
}

TEST(KernelArgsTest, PointersPackAsEightByteValues) {
  int hostObject = 0;
  KernelArgs args;
  args.add(int8_t(1)).add(&hostObject);
  EXPECT_EQ(args.offset(1), 8u);
  EXPECT_EQ(args.storageBytes(), 16u);
  EXPECT_EQ(readArg<int *>(args, 1), &hostObject);
}

TEST(KernelArgsTest, DeviceBufferPacksItsDeviceAddress) {
  DeviceBuffer empty; // No driver needed: an empty buffer has address 0.
  KernelArgs args;
  args.add(int32_t(3)).add(empty);
  EXPECT_EQ(args.offset(1), 8u);
  EXPECT_EQ(readArg<uint64_t>(args, 1), 0u);
}

TEST(KernelArgsTest, StructsKeepTheirAlignmentAcrossStorageGrowth) {
  struct alignas(64) Descriptor {
    uint64_t words[16];
  };
  Descriptor descriptor{};
  for (int i = 0; i < 16; ++i)
    descriptor.words[i] = i * 3;
  KernelArgs args;
  args.add(int32_t(1));
  args.add(descriptor); // A CUtensorMap-like 128-byte, 64-aligned value.
  args.add(float(4));
  for (int i = 0; i < 40; ++i) // Force the storage to reallocate.
    args.add(int32_t(i));
  EXPECT_EQ(args.offset(1), 64u);
  EXPECT_EQ(args.offset(2), 192u);
  EXPECT_TRUE(isAligned<Descriptor>(args.data()[1]));
  Descriptor copy = readArg<Descriptor>(args, 1);
  EXPECT_EQ(std::memcmp(&copy, &descriptor, sizeof(copy)), 0);
  EXPECT_EQ(readArg<int32_t>(args, 42), 39);
}

TEST(KernelArgsTest, CopiesOwnTheirValues) {
  KernelArgs original = KernelArgs::pack(int32_t(5), 6.0f);
  KernelArgs copy = original;
  original.add(int32_t(7));
  EXPECT_EQ(copy.count(), 2u);
  EXPECT_NE(copy.data()[0], original.data()[0]);
  EXPECT_EQ(readArg<float>(copy, 1), 6.0f);
}

TEST(KernelArgsTest, RejectsBadAlignment) {
  KernelArgs args;
  char byte = 0;
  EXPECT_THROW(args.addBytes(&byte, 1, 3), Error);
  EXPECT_THROW(args.addBytes(&byte, 1, 0), Error);
  EXPECT_THROW(args.addBytes(&byte, 1, 256), Error);
  EXPECT_EQ(args.count(), 0u);
}

// Resource owners are move-only; kernels are cheap non-owning handles.
static_assert(!std::is_copy_constructible_v<DeviceBuffer>);
static_assert(std::is_nothrow_move_constructible_v<DeviceBuffer>);
static_assert(std::is_nothrow_move_assignable_v<DeviceBuffer>);
static_assert(!std::is_copy_constructible_v<Stream>);
static_assert(std::is_nothrow_move_constructible_v<Stream>);
static_assert(!std::is_copy_constructible_v<Event>);
static_assert(std::is_nothrow_move_constructible_v<Event>);
static_assert(!std::is_copy_constructible_v<Module>);
static_assert(std::is_nothrow_move_constructible_v<Module>);
static_assert(std::is_copy_constructible_v<Function>);

} // namespace
