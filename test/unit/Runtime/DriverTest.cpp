//===- DriverTest.cpp - Loading the driver, and failing to ----------------===//
#include "flashrt/Driver.h"

#include "TestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <unistd.h>

using namespace flashrt;
using flashrt::test::ScopedEnv;
using ::testing::HasSubstr;

namespace {

/// Loads `path` as an independent Driver, expecting `kind`; returns what().
std::string expectLoadFailure(const std::string &path, ErrorKind kind) {
  try {
    Driver driver(path);
    ADD_FAILURE() << "loading '" << path << "' succeeded";
  } catch (const Error &error) {
    EXPECT_EQ(error.kind(), kind) << error.what();
    return error.what();
  }
  return "";
}

TEST(DriverTest, MissingLibraryIsNoDriverNamingPathAndLoaderError) {
  const char *missing = "/nonexistent/libcuda.so.1";
  ScopedEnv env("FLASHRT_CUDA_LIBRARY", missing);
  ASSERT_EQ(Driver::defaultLibraryPath(), missing);

  std::string message =
      expectLoadFailure(Driver::defaultLibraryPath(), ErrorKind::NoDriver);
  EXPECT_THAT(message, HasSubstr(missing));
  // dlerror()'s own words, so users see why the loader failed.
  EXPECT_THAT(message, HasSubstr("cannot open shared object file"));
  EXPECT_EQ(exitCodeFor(ErrorKind::NoDriver), kNoGpuExitCode);
}

TEST(DriverTest, DefaultLibraryIsLibcudaSo1) {
  ScopedEnv env("FLASHRT_CUDA_LIBRARY", "");
  EXPECT_EQ(Driver::defaultLibraryPath(), "libcuda.so.1");
}

TEST(DriverTest, NonLibraryFileIsNoDriver) {
  char path[] = "/tmp/flashrt-not-a-library-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "not ELF\n", 8), 8);
  close(fd);
  std::string message = expectLoadFailure(path, ErrorKind::NoDriver);
  EXPECT_THAT(message, HasSubstr(path));
  std::remove(path);
}

TEST(DriverTest, LibraryWithoutDriverEntryPointsIsNoDriver) {
  // Any glibc system has libm; it is a loadable library but no driver.
  std::string message = expectLoadFailure("libm.so.6", ErrorKind::NoDriver);
  EXPECT_THAT(message, HasSubstr("does not export cuGetErrorName"));
}

TEST(DriverTest, ToolkitStubLibraryIsNoDriver) {
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) != 0)
    GTEST_SKIP() << "no CUDA toolkit stub at " << stub;
  // The stub's SONAME is libcuda.so.1: load the process-wide driver first,
  // or a later dlopen("libcuda.so.1") would be handed the stub.
  Driver::available();
  std::string message = expectLoadFailure(stub, ErrorKind::NoDriver);
  EXPECT_THAT(message, HasSubstr("stub"));
  EXPECT_THAT(message, HasSubstr("CUDA_ERROR_STUB_LIBRARY"));
}

TEST(DriverDeathTest, ProcessDriverRemembersItsFirstFailure) {
  // A fresh process, so the singleton is loaded under the fake path.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("FLASHRT_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
        std::string whyNot;
        if (Driver::available(&whyNot) || whyNot.empty())
          std::_Exit(1);
        // The path is read once: the first failure stands.
        unsetenv("FLASHRT_CUDA_LIBRARY");
        try {
          Driver::get();
        } catch (const Error &error) {
          std::fprintf(stderr, "%s\n", error.what());
          std::_Exit(exitCodeFor(error.kind()));
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(kNoGpuExitCode), "/nonexistent/libcuda.so.1");
}

} // namespace
